/* Internals of the cross-node service (peer.c, peer_xfer.c, peer_stream.c).
 *
 * Control and metadata travel over nng tcp (req0 to each peer, rep0 listener at `listen`):
 * PeerHello (epochs, data port), MemLookup (name -> Handle), MemOpen (is this handle live?).
 * Bytes travel on TCP data streams (libuv) that each daemon opens to a peer for the transfers it
 * initiates: `data_streams` of them, framed as struct fhdr + payload. The initiator writes
 * WRITE frames (the target lands them and answers one DONE per transfer) or READ frames (the
 * target answers each with one RDATA frame carrying the bytes or an error); ABORT drops a
 * transfer at the target. Everything runs on the daemon's libuv loop.
 */
#ifndef MORID_PEER_INT_H
#define MORID_PEER_INT_H
#include "morid.h"
#include "registry.h"

#define PEER_LOOKUP_TIMEOUT_MS 5000   /* lookups, opens and hellos at another daemon */
#define PEER_BACKOFF_MIN_MS 100       /* reconnect backoff, doubling */
#define PEER_BACKOFF_MAX_MS 1000
#define PEER_TICK_MS 10               /* deadline resolution */
#define INB_SLACK_MS 2000             /* target keeps a transfer's state this long past its deadline */
#define INB_MAX_MS (3600u * 1000)     /* ... whatever deadline a peer claims */
#define RPC_RETRY_MS 50               /* an unsent request (no connection yet) is retried this often */

#define CHUNK_MAX (512u << 10)        /* largest payload of one frame */
#define BATCH_MAX (2u << 20)          /* payload bytes coalesced into one socket write */
#define BATCH_FRAMES 512              /* frames per write (iovecs stay under IOV_MAX) */
#define SMALL_COPY 4096               /* payloads below this are copied beside their header */
#define STAGE_CAP (BATCH_FRAMES * 96 + (512u << 10))
#define STREAM_WINDOW (8u << 20)      /* bytes in flight per stream (queued writes + reads asked) */
#define STREAM_DEAD_S 15              /* keepalive idle and TCP_USER_TIMEOUT of data streams */
#define RX_BUF (256u << 10)           /* per-stream receive staging */
#define RX_DIRECT_MIN (256u << 10)    /* larger payloads land straight in the region; smaller ones
                                       * through the staging buffer (a copy is cheaper than the
                                       * extra reads, measured at 64 KiB) */

#define REF_TAG (1ull << 62)          /* remote refs and list ids never collide with region ids */
#define LIST_TAG (1ull << 61)

/* ---- frames on data streams (host byte order: both ends run this code on the same ABI) ---- */
#define FRAME_MAGIC 0x4d4f5249u /* "MORI" */
#define FRAME_VERSION 1
enum ftype {
	F_HELLO = 1,     /* initiator -> target: xfer = epoch, code = version, payload = node */
	F_HELLO_ACK = 2, /* target -> initiator: xfer = epoch, payload = node */
	F_WRITE = 3,     /* payload lands at region+offset; total = transfer bytes */
	F_DONE = 4,      /* target -> initiator: a write finished (code, payload = message) */
	F_READ = 5,      /* ask for rlen bytes at region+offset, to land at the initiator's aux */
	F_RDATA = 6,     /* answer to one F_READ: code 0 and the bytes, or code and a message */
	F_ABORT = 7,     /* initiator gave up on xfer */
};
#define FF_NOTIF 1u

struct fhdr {
	uint32_t magic;
	uint16_t type;
	uint16_t flags;
	uint32_t len;         /* payload bytes following */
	int32_t code;
	uint64_t xfer;        /* initiator's transfer id (HELLO: epoch) */
	uint64_t region;
	uint32_t gen;
	uint32_t rlen;        /* READ/RDATA: bytes asked for */
	uint64_t offset;      /* WRITE/READ: target offset; RDATA: initiator's local offset */
	uint64_t aux;         /* READ: initiator's local offset */
	uint64_t total;       /* transfer bytes */
	uint64_t tag;         /* notification tag */
	uint32_t deadline_ms; /* time left at sending */
	uint32_t pad;
};
_Static_assert(sizeof(struct fhdr) == 80, "frame header is 80 bytes");

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

struct stream;

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
	/* nng req0 */
	nng_socket req;
	int req_ok;
	uv_poll_t req_poll;
	int req_poll_on;
	struct list rpcs;         /* struct rpc; the head is the one on the wire */
	/* reconnect */
	uint64_t retry_at_us;
	uint64_t rpc_try_us;      /* last attempt to put the head request on the wire */
	uint32_t backoff_ms;
	uv_getaddrinfo_t gai;
	int resolving;
	/* data streams opened by us */
	struct stream **out;
	int nout, nready;
	uint32_t conn_gen;        /* bumps at each teardown: late callbacks of old streams are ignored */
	/* transfers */
	struct list queue;        /* struct xfer.qlink: chunks left to send */
	struct list xfers;        /* struct xfer.plink: all in flight */
	uint32_t nxfers;
	int pump_needed;
	/* counters */
	uint64_t bytes_sent, bytes_received, transfers, errors;
	int handles;              /* references: table entry, nng poll handle, address lookup */
	int gone;                 /* out of the table (daemon stopping) */
};

struct batch;

struct stream {
	struct list link;         /* P->accepted (accepted streams) */
	struct peers *P;
	struct peer *p;           /* outgoing: owner; accepted: the initiator's entry (may be NULL) */
	int outgoing, ready, closing, dirty;
	uint32_t conn_gen;
	uint64_t src_epoch;       /* accepted: initiator's epoch */
	uv_tcp_t tcp;
	uv_connect_t connreq;
	/* tx */
	struct batch *cur;
	uint64_t tx_queued;       /* bytes handed to uv_write, not yet written */
	uint64_t rd_outstanding;  /* outgoing: READ bytes asked and not yet answered */
	int read_stopped;
	/* rx */
	int rx_payload;           /* 0: header; 1: payload */
	uint8_t hbuf[sizeof(struct fhdr)];
	uint32_t hhave;
	struct fhdr h;
	uint64_t rx_left;
	uint8_t *rx_dst;          /* mapped destination of the payload, NULL: discard/CMA/message */
	struct region *rx_reg;    /* inflight reference for the payload's duration */
	int rx_copy;              /* destination reached by region_copy (CMA or VRAM), at rx_addr */
	int rx_pinned;            /* rxbuf pinned for GPU copies: 1 yes, -1 tried and failed */
	uint64_t rx_addr;
	int rx_code;              /* nonzero: payload is discarded */
	int rx_big;               /* the last payload was large and direct */
	int rx_collect;           /* payload is a message: kept in rx_msg */
	char rx_msg[256];
	uint32_t rx_msglen;
	uint8_t *rxbuf;
	struct list dlink;        /* P->dirty */
};

/* An outbound transfer. */
struct xfer {
	struct list hlink, ulink; /* P->xfers by id, P->byuser by (client, user_data) */
	struct list plink, qlink; /* peer->xfers, peer->queue */
	int queued_link;
	uint64_t id;
	struct client *c;         /* NULL once the client is gone */
	uint64_t client_id, user_data;
	struct peer *p;
	struct region *local;     /* inflight reference held */
	uint64_t rregion;
	uint32_t rgen;
	uint64_t repoch;
	int read, notif;
	uint64_t tag;
	mori_desc *descs;
	uint32_t n, cur;
	uint64_t cur_off;
	uint64_t total, sent, done;
	uint64_t start_us, deadline_us;
	uint32_t timeout_ms;
	int started;
};

/* State at the target for a transfer another daemon initiated. */
struct inb {
	struct list hlink;
	uint64_t src_epoch, xfer;
	struct region *r;         /* inflight reference held; NULL after failure or abort */
	int read, notif, aborted, replied;
	int code;
	uint64_t tag, total, got;
	uint64_t expire_us;
	struct peer *p;           /* for counters; may be NULL */
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
};

/* A prepared descriptor list (on client->lists). */
struct plist {
	struct list link;
	uint64_t id;
	uint64_t local_region, ref;
	uint32_t n;
	mori_desc *descs;
};

struct rpc;

struct peers {
	struct morid *d;
	int on;
	char self[128];
	nng_socket rep;
	int rep_ok;
	uv_poll_t rep_poll;
	uv_tcp_t lsn;
	int lsn_on;
	uint32_t data_port;
	uv_timer_t tick;
	uv_prepare_t prep;
	int handles;
	struct list peers;
	struct list accepted;
	struct list dirty;
	struct htab xfers, byuser, inbound, refs;
	uint64_t next_xfer, next_ref, next_list, next_rpc;
	uint64_t next_deadline_us;
	uint64_t next_inb_scan_us;
	struct batch *batch_cache;    /* freed batches kept for reuse (they are large) */
	int nbatch_cache;
};

/* peer.c */
struct peer *peer_get(struct peers *P, const char *addr, int create);
void peer_down(struct peer *p, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void peers_kick(struct peers *P);  /* arm the tick (work exists) */
void peers_dirty(struct peers *P); /* run pumps and flush batches before the loop sleeps */
void peer_up(struct peer *p);
void peer_use(struct peer *p);       /* start connecting a peer that work waits for */
struct rref *peer_ref_find(struct peers *P, struct client *c, uint64_t id);
struct plist *peer_list_find(struct client *c, uint64_t id);
void peers_free(struct peers *P);    /* when the last handle closed */

/* peer_stream.c */
int stream_listen(struct peers *P, const char *host);
void streams_connect(struct peer *p, const struct sockaddr *sa);
void stream_close(struct stream *s);
void stream_frame(struct stream *s, const struct fhdr *h, const void *payload, uint32_t len);
/* Add a frame whose payload stays in region g's memory until written (holds a reference). */
int stream_frame_data(struct stream *s, const struct fhdr *h, struct region *g, uint64_t off,
		      uint32_t len, int *err);
uint64_t stream_batch_room(struct stream *s);
void stream_flush(struct stream *s);
void streams_flush_dirty(struct peers *P);
void stream_accept_closed(struct stream *s);

/* peer_xfer.c */
void xfer_submit(struct peers *P, struct client *c, const struct mori_sqe *e);
void xfer_complete(struct xfer *x, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
struct xfer *xfer_find(struct peers *P, uint64_t id);
void peer_pump(struct peer *p);
void xfers_expire(struct peers *P, uint64_t now);
void inb_expire(struct peers *P, uint64_t now);
void inb_drop_epoch(struct peers *P, uint64_t src_epoch);
/* Target side of frames; the stream's rx state is set for the payload that follows. */
void rx_write_hdr(struct stream *s);
void rx_write_end(struct stream *s);
void rx_read_req(struct stream *s);
void rx_read_served(struct peers *P, uint64_t src_epoch, uint64_t xfer, uint64_t bytes, int ok);
void rx_abort(struct stream *s);
/* Initiator side. */
void rx_done(struct stream *s);
void rx_rdata_hdr(struct stream *s);
void rx_rdata_end(struct stream *s);
#endif
