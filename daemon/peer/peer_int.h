/* Internals of the cross-node service: the one peer table, the one transfer record and the
 * request path to other daemons (peer.c, peer_rpc.c, xfer.c), shared with the transports
 * (transport.h: transport_tcp.c, transport_rdma.c).
 *
 * Control and metadata travel over nng tcp (req0 to each peer, rep0 listener at `listen`):
 * PeerHello (epochs, data port), MemLookup (name -> Handle), MemOpen (is this handle live?),
 * and each transport's own requests (RdmaConnect, RdmaRegion). Bytes travel over a transport.
 * Everything runs on the daemon's libuv loop.
 */
#ifndef MORID_PEER_INT_H
#define MORID_PEER_INT_H
#include "core/auth.h"
#include "core/morid.h"
#include "region/registry.h"
#include "core/chunk.h"
#include "transport/transport.h"

#define PEER_LOOKUP_TIMEOUT_MS 5000   /* lookups, opens and hellos at another daemon */
#define PEER_BACKOFF_MIN_MS 100       /* reconnect backoff, doubling */
#define PEER_BACKOFF_MAX_MS 2000      /* a peer away is redialled every 2 s: back within ~2 s of a restart (30 s made a
                                         * restarted peer's transfers time out), few dials with max_client_peers */
#define PEER_CLIENT_IDLE_MS 10000     /* a client-made peer never reached goes this long after its last use */
#define PEER_AUTH_LOG_S 300           /* a peer failing authentication again: one line per 5 minutes */
#define PEER_TICK_MS 10               /* deadline resolution */
#define RPC_RETRY_MS 50               /* an unsent request (no connection yet) is retried this often */
#define PEERS_MAX 1024                /* entries of the peer table */

#define REF_TAG (1ull << 62)          /* remote refs and list ids never collide with region ids */
#define LIST_TAG (1ull << 61)

/* ---- a small chained hash ---- */
#define HBUCKETS 4096
struct htab {
	struct list b[HBUCKETS];
	uint32_t n;
};
static inline uint64_t hmix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}
static inline void htab_init(struct htab *t)
{
	for (int i = 0; i < HBUCKETS; i++)
		LIST_INIT(&t->b[i]);
	t->n = 0;
}
static inline struct list *htab_bucket(struct htab *t, uint64_t key)
{
	return &t->b[hmix(key) & (HBUCKETS - 1)];
}
static inline void htab_add(struct htab *t, uint64_t key, struct list *e)
{
	list_add(htab_bucket(t, key), e);
	t->n++;
}
static inline void htab_del(struct htab *t, struct list *e)
{
	list_del(e);
	t->n--;
}

enum pstate { PS_IDLE, PS_HELLO, PS_CONNECTING, PS_UP, PS_DOWN };
enum pauth_state { PA_NONE, PA_BUSY, PA_DONE };

struct nq;
struct probe;

struct peer {
	struct list link;
	struct peers *P;
	char addr[128];           /* host:port as dialed (the key; handles name it) */
	char host[128];
	char node[128];           /* what it calls itself */
	enum pstate state;
	char why[256];            /* last failure, for moractl and messages */
	uint64_t epoch;           /* the peer daemon's epoch, 0 before the first hello */
	uint32_t data_port;
	/* nng req0: the one request path to the peer's daemon (peer_rpc.c) */
	nng_socket req;
	int req_ok;
	uv_poll_t req_poll;
	int req_poll_on;
	struct list rpcs;         /* struct rpc; the head is the one on the wire */
	uint64_t rpc_try_us;      /* last attempt to put the head request on the wire */
	/* authentication of our request path (peer.c, peer_auth.c): done for the pipe auth_pipe */
	enum pauth_state auth;
	uint32_t auth_pipe, last_pipe; /* last_pipe: the pipe of the reply being handled */
	uint8_t auth_nc[AUTH_NONCE_BYTES];
	int auth_in;              /* it authenticated to our listener */
	/* notifications after the data (xnotif.c): per initiating client, in submission order */
	struct list nqs;          /* struct nq */
	struct list nwire;        /* struct xfer.nlink: notifications sent, not yet answered */
	uint64_t nbatch;          /* the batch on the wire (0: none) */
	/* reconnect */
	uint64_t retry_at_us;
	uint32_t backoff_ms;
	uv_getaddrinfo_t gai;
	int resolving;
	/* why the request path does not connect (peer_probe.c): nng's dialer does not say */
	struct probe *probe;      /* the one running, or NULL */
	uint64_t probe_at_us;     /* the next probe not before */
	char probe_why[160];      /* "connection refused", ...; empty: reachable or not probed */
	/* transfers */
	struct list xfers;        /* struct xfer.plink: all in flight */
	uint32_t nxfers;
	void *tp[TR_MAX];         /* each transport's state for this peer (its own to free) */
	/* counters */
	uint64_t bytes_sent, bytes_received, transfers, errors;
	/* clock skew at the last hello (moractl diagnose): its wall clock minus ours at the
	 * middle of the round trip, and that trip's length */
	int64_t clock_skew_us;
	uint64_t clock_rtt_us, hello_wall_us;
	int clock_known;
	/* Made for a client's open or transfer (peer_get_client), not configured and not named by
	 * anyone else: at most max_client_peers of them, and one that never came up goes
	 * PEER_CLIENT_IDLE_MS after its last use (else every unreachable address a client
	 * named would stay and be redialled forever). */
	int client_made, ever_up;
	uint64_t used_us;
	uint32_t auth_fails;      /* authentication failures since it was last up (logging) */
	uint64_t auth_log_s;
	nng_dialer dialer;
	int handles;              /* references: table entry, nng poll handle, address lookup */
	int gone;                 /* out of the table (daemon stopping) */
};

/* An outbound transfer: what the client asked, validated and copied out of its arena. The
 * transport that runs it keeps its own state in tp. */
struct xfer {
	struct list hlink, ulink; /* P->xfers by id, P->byuser by (client, user_data) */
	struct list plink;        /* peer->xfers */
	uint64_t id;
	struct client *c;         /* NULL once the client is gone */
	uint64_t client_id, user_data;
	struct peer *p;
	struct region *local;     /* inflight reference held */
	uint64_t rregion;
	uint32_t rgen;
	uint64_t repoch;
	int read;
	uint64_t tag;             /* its notification's tag (xnotif.c) */
	mori_desc *descs;         /* owned; a transport may take them (set NULL) when it outlives x */
	uint32_t n;
	uint64_t total, done;
	/* A signal after the data (peer_xfer_args.sig): 0 none, 1 SET, 2 ADD of sig_value at sig_off
	 * of the remote region; only a transport with `signals` runs x then. */
	int sig;
	uint64_t sig_off, sig_value;
	uint64_t start_us, deadline_us;
	uint32_t timeout_ms;
	const struct transport *t; /* the one running it; NULL before it is taken */
	void *tp;
	uint8_t rsecret[REGION_SECRET_BYTES]; /* the remote region's secret, named in every request */
	/* Notifications (xnotif.c): the transports run x without one; once its data is done the
	 * core sends it, in order behind those its client submitted earlier to this peer. */
	int want_notif;
	int notif_stage;          /* 0 data moving, 1 data done: waiting its turn, 2 notification sent */
	struct list nlink;        /* on nq->xs (stage 0, 1) or p->nwire (stage 2) */
	struct nq *nq;
	uint64_t nbatch;
	uint32_t nidx;
	char stalled[256];        /* the link stalled: it waits for its deadline (peer_down) */
	/* A transfer morid started itself (peer_xfer_start, c NULL): told here instead of a CQE. */
	void (*on_done)(void *arg, int code, const char *msg);
	void *done_arg;
};

/* The notifications one client has pending to one peer (xnotif.c). */
struct nq {
	struct list link;         /* p->nqs */
	uint64_t client_id;
	struct list xs;           /* struct xfer.nlink, in submission order */
};

/* A region of another node, as one client opened it. */
struct rref {
	struct list hlink, clink;
	uint64_t id;
	struct client *c;
	struct peer *p;
	uint64_t epoch, region;
	uint32_t gen, kind;
	uint64_t size;
	uint8_t secret[REGION_SECRET_BYTES];
};

/* A prepared descriptor list (on client->lists). */
struct plist {
	struct list link;
	uint64_t id;
	uint64_t local_region, ref;
	uint32_t n;
	mori_desc *descs;
};

/* A large prepared list being read and checked in steps on the loop (peer_client.c), so that
 * other clients' requests keep their latency; its bytes count against the client at once. */
struct prep_job {
	struct list link;         /* P->preps */
	struct client *c;
	uint64_t req_id;          /* the deferred reply's */
	int fd;                   /* the descriptors' memfd (owned) */
	uint64_t local_region, ref, lsize, rsize;
	uint32_t n;
	uint64_t bytes, done, total;
	mori_desc *descs;
};

struct rpc;

/* Authentication state of the listener (peer_auth.c). */
#define PAUTH_PENDING 64
#define PAUTH_AUTHED 256
struct pauth {
	uint32_t pipe;
	uint64_t used;            /* 0: free */
	uint8_t nc[AUTH_NONCE_BYTES], ns[AUTH_NONCE_BYTES];
	char node[128];           /* what the dialer calls itself */
};
struct pauth_table {
	struct pauth pending[PAUTH_PENDING], authed[PAUTH_AUTHED];
	uint64_t clock;
};

struct peers {
	struct morid *d;
	int on;
	int forced;                   /* the transport option names one transport */
	const struct transport *only; /* that one (NULL when it is not built in) */
	const struct transport *tr[TR_MAX]; /* by id, NULL where not built in */
	const struct transport *pref[TR_MAX]; /* those built in, in order of preference */
	int npref;
	void *tp[TR_MAX];             /* each transport's node-wide state */
	char self[128];
	struct sp_server *lsn;        /* the listener other daemons' requests arrive on */
	uv_timer_t tick;
	uv_prepare_t prep;
	uv_idle_t prep_idle;          /* runs prep_jobs a step per loop turn */
	struct list preps;            /* struct prep_job */
	uint64_t list_bytes;          /* all clients' lists, those being read included (node_max_list_bytes) */
	uint64_t nlists;              /* their count (node_max_lists) */
	int handles;
	struct list peers;
	struct htab xfers, byuser, refs;
	uint64_t next_xfer, next_ref, next_list, next_rpc;
	uint64_t next_deadline_us;
	uint64_t next_expire_us;      /* the next look for client-made peers to drop (peer.c) */
	uint32_t data_port;           /* what our hello tells peers (the TCP transport's listener) */
	struct auth_key key;          /* the cluster key (key.on 0: peers are not authenticated) */
	struct pauth_table *pauth;
	/* Hooks of xnotif.c (set by peers_start), for the layers below it: x's data is done
	 * (stage 1) / x ends for good / end of a loop turn. */
	void (*notif_ready)(struct xfer *x);
	void (*notif_unlink)(struct xfer *x);
	void (*notif_flush)(struct peers *P);
};

/* What the transport option means for t (transport.h). */
static inline enum transport_mode peers_mode(const struct peers *P, const struct transport *t)
{
	return !P->forced ? TM_AUTO : P->only == t ? TM_ONLY : TM_OFF;
}

/* ---- peer.c: the table and each peer's state ---- */
struct peer *peer_get(struct peers *P, const char *addr, int create);
/* The peer at addr for a client's open: an existing one, or a new client-made one (see struct
 * peer) while fewer than max_client_peers exist; NULL with why set (MORI_EINVAL: not host:port,
 * MORI_EBUSY: the cap) otherwise. A DOWN peer is dialled again now: a client waits for it. */
struct peer *peer_get_client(struct peers *P, const char *addr, int *code, char *why, size_t n);
/* The data path of p is up: transfers may flow. */
void peer_up(struct peer *p);
/* p failed (every transfer on it ends with code; reconnect with backoff). */
void peer_down(struct peer *p, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void peer_use(struct peer *p);       /* start connecting a peer that work waits for */
void peers_kick(struct peers *P);    /* arm the tick (work exists) */
void peers_dirty(struct peers *P);   /* run the transports' flush before the loop sleeps */
/* Let go of a reference (table entry, poll handle, address lookup); the last frees p. */
void peer_unref(struct peer *p);
/* Close p's request path (daemon stopping); its poll handle lets go of p when closed. */
void peer_close_requests(struct peer *p);
/* The listener (core/sp_rep.h): anyone who reaches it may connect, so connections that have not
 * authenticated (without a cluster key: sent no well-formed request) are bounded in number,
 * time and message size, and the descriptors they may take (local_fds_pct is kept). */
#define PEER_MAX_CONNS 1024
#define PEER_UNAUTH_MAX 128
#define PEER_AUTH_DEADLINE_MS 10000
#define PEER_MAX_MSG (1u << 20)
#define PEER_UNAUTH_MAX_MSG (16u << 10)
/* How long closing a peer socket may take (svc_nng_close: nng 1.5.2 can deadlock in nng_close). */
#define PEER_CLOSE_WAIT_MS 1000
/* A handle (a stream, a QP connection...) that holds P until its close callback. */
void peers_hold(struct peers *P);
void peers_release(struct peers *P);

/* ---- peer_rpc.c: the one request path to a peer's daemon, and the listener that serves them ---- */
/* done is called exactly once: with the reply (code = the reply's code), or rep NULL and code
 * MORI_ETIMEDOUT (sent, no answer), MORI_ECONN (never reached the peer) or MORI_ECANCELED
 * (daemon stopping). arg and the client fields are the caller's. */
typedef void (*rpc_done_fn)(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg);
struct rpc {
	struct list link;
	int sent;
	uint64_t id;
	uint64_t deadline_us;
	uint32_t timeout_ms;
	uint8_t *msg;             /* the packed request */
	size_t len;
	rpc_done_fn done;
	void *arg;
	struct client *c;         /* who waits for the answer; NULL: nobody (or gone) */
	uint64_t creq;            /* the client's request id, kept for the deferred reply */
	int kind;                 /* the caller's tags (peer_rpc_drop matches on them) */
	int64_t key;
	int auth_step;            /* an authentication step (peer.c puts them ahead of the rest) */
	int auth_retries;         /* refused for want of authentication this often */
};
/* Queue req (packed now; req->id is set here) to p's daemon, in order, one on the wire at a
 * time. Returns the request (owned by the queue until done runs), or NULL out of memory. */
struct rpc *peer_rpc(struct peer *p, Mori__Request *req, uint32_t timeout_ms, rpc_done_fn done, void *arg);
/* The same, on a transport's data path while p's is up (the loop drives it, no nng thread
 * between), else as peer_rpc. For requests a data stream may carry (PeerShmemAmo). */
struct rpc *peer_rpc_fast(struct peer *p, Mori__Request *req, uint32_t timeout_ms, rpc_done_fn done, void *arg);
/* Drop p's requests not yet on the wire with the caller's tags kind and key (key -1: any key),
 * without calling done: a newer request made them void. */
void peer_rpc_drop(struct peer *p, int kind, int64_t key);
void peer_rpcs_tick(struct peer *p, uint64_t now); /* deadlines and retries of p's requests */
/* ---- peer_probe.c ---- */
/* A request has waited for p's request path since `since` (us): find out once in a while (a
 * TCP connect of our own to p->addr) why nng's dialer gets nowhere; into p->probe_why. */
void peer_probe(struct peer *p, uint64_t since, uint64_t now);
void peer_probe_stop(struct peer *p); /* end p's probe (p is leaving, or it took too long) */
void peer_rpcs_stop(struct peer *p);               /* daemon stopping: every request ends */
int peer_listen(struct peers *P);                  /* the rep0 listener at `listen` */
void peer_listen_stop(struct peers *P);

/* ---- peer_auth.c: authentication of the control link (auth.h) ---- */
int peer_auth_start(struct peers *P);              /* load the key (or warn loudly) */
void peer_auth_stop(struct peers *P);
const char *peer_auth_describe(struct peers *P);   /* for moractl status */
/* A request from another daemon on nng pipe `pipe`: 1 serve it (*node: the node it authenticated
 * as, NULL without a key); 0 answered in rep (an authentication step, or refused: counted). An
 * authentication that succeeded sets *node too. */
/* Connection pipe closed: its challenge or authentication goes. */
void peer_auth_forget(struct peers *P, uint32_t pipe);
int peer_auth_gate(struct peers *P, uint32_t pipe, const Mori__Request *req, Mori__Reply *rep, struct rctx *r,
		   const char **node);
/* The dialer's steps: a challenge (nc filled), then the answer to the listener's reply (0, or -1
 * with why: it did not prove the key; pa is then an empty answer, which tells the listener so
 * without a proof of ours, and has it count the refusal too). */
void peer_auth_step1(struct peers *P, Mori__PeerAuth *pa, uint8_t nc[AUTH_NONCE_BYTES]);
int peer_auth_step2(struct peers *P, const uint8_t nc[AUTH_NONCE_BYTES], const Mori__Reply *rep, Mori__PeerAuth *pa,
		    uint8_t mac[AUTH_MAC_BYTES], char *why, size_t len);

/* ---- xnotif.c: notifications of cross-node transfers, in order ---- */
int xnotif_add(struct xfer *x);                    /* at submission; 0 or MORI_ENOMEM */
void xnotif_hooks(struct peers *P);
/* The target's side: a PeerNotify from another daemon. */
void xnotif_serve(struct peers *P, const Mori__PeerNotify *pn, Mori__Reply *rep, struct rctx *r);

/* ---- peer_client.c ---- */
void peers_prep_init(struct peers *P);             /* the step handle of large prepared lists */

/* ---- xfer.c: transfers from this node's clients ---- */
void xfer_submit(struct peers *P, struct client *c, const struct mori_sqe *e);
/* End x: its one completion (code 0: done), counters, the transport's cancel, free. */
void xfer_complete(struct xfer *x, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
struct xfer *xfer_find(struct peers *P, uint64_t id);
/* Hand x to the first transport after `after` (NULL: from the first) in order of preference
 * that the transport option allows, carries x's signal if it has one, and takes it. 1 when one
 * took x; 0 when none did (x still unstarted: the caller ends it). */
int xfer_route(struct xfer *x, const struct transport *after);
/* Transport t gives x back unstarted (nothing of it moved): the next one that takes it runs it. */
void xfer_fallback(struct xfer *x, const struct transport *t, const char *why);
void xfers_expire(struct peers *P, uint64_t now);
struct rref *peer_ref_find(struct peers *P, struct client *c, uint64_t id);
struct plist *peer_list_find(struct client *c, uint64_t id);
/* Copy msg into a completion's 104 bytes; a longer one is cut at a word's end, with "...". */
void cqe_msg(struct mori_cqe *e, const char *msg);
/* "peer A: <text naming A again>" -> "<text>" in place (else unchanged). */
void msg_drop_repeated_peer(char *msg, const char *addr);
/* Post the target-side notification for region g (after its data landed, any transport). */
/* MORI_OK, or MORI_EAGAIN: the owner's queue is full (client_post_notif), MORI_ESTALE: no owner. */
int xfer_notify_target(struct morid *d, struct region *g, uint64_t tag);

#endif
