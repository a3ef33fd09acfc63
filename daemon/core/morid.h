/* morid's shared state: one libuv loop owns every handle below. */
#ifndef MORID_H
#define MORID_H
#include <nng/nng.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "mori.h"
#include "mori.pb-c.h"
#include "ring.h"
#include "wire.h"

struct morid;
struct client;
struct region;
struct peer;
struct conn;
struct kv_client;
struct kv_store;

/* Counters shown by moractl status; names in counters.c. */
enum counter {
	C_REQUESTS, C_BAD_REQUESTS, C_DENIED, C_OVERSIZE, C_CLIENTS_TOTAL, C_CLIENTS_DIED,
	C_REGIONS_TOTAL, C_NOTIFS, C_SQES, C_BAD_SQES, C_XFERS, C_XFER_ERRORS, C_BYTES_SENT,
	C_BYTES_RECEIVED, C_RELOADS, C_RELOAD_FAILURES, C_CQ_OVERFLOWS,
	C_VRAM_STAGED, C_PEER_AUTH_REFUSED, C_NOTIFS_DROPPED, C_DATA_HANDSHAKES_DROPPED,
	C_METRICS_CONNS_DROPPED, C_VRAM_UNPINNED, C_VRAM_TX_WAITS, C_VRAM_TX_WAIT_US,
	C_VRAM_RX_WAITS, C_VRAM_RX_WAIT_US, C_PEER_CONNS_DROPPED, C_NODE_CAP_REFUSALS, C_COUNT
};
extern const char *const counter_names[C_COUNT];

struct list { struct list *prev, *next; };
#define LIST_INIT(l) ((l)->prev = (l)->next = (l))
static inline void list_add(struct list *head, struct list *e)
{
	e->prev = head->prev; e->next = head; head->prev->next = e; head->prev = e;
}
static inline void list_del(struct list *e)
{
	e->prev->next = e->next; e->next->prev = e->prev; e->prev = e->next = e;
}
#define list_entry(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))
#define list_each(it, head) for (struct list *it = (head)->next, *it##_n = it->next; it != (head); it = it##_n, it##_n = it->next)

/* Reply building: pieces allocated for a reply are freed together after it is packed. */
struct rctx {
	void **ptrs;
	size_t n, cap;
	int fds[WIRE_MAX_FDS];
	int nfds;
	int keep_fds; /* fds belong to someone else (ring fds): don't close after sending */
};
void *rctx_alloc(struct rctx *r, size_t size);
char *rctx_strdup(struct rctx *r, const char *s);
/* A close-on-exec dup of fd to travel with the reply (closed by rctx_free once sent): 0, or -1
 * with rep made MORI_ESYS "open: dup: ...". */
int rctx_dup_fd(struct rctx *r, Mori__Reply *rep, int fd);
void rctx_free(struct rctx *r);

struct client {
	struct list link;
	struct morid *d;
	uint64_t id;
	pid_t pid;
	uid_t uid;
	char name[64];
	uint64_t created_us, attached_us;
	int attached;
	struct conn *conn;           /* its session socket: the client ends when it closes or the process exits */
	int sock;                    /* that socket's fd while open, else -1 (client_reply) */
	int pidfd;                   /* its process (session.c's, borrowed); -1: no pidfd_open */
	uint64_t features;           /* its hello's (WIRE_FEAT_*) */
	/* rings */
	int ring_fd, sq_efd, cq_efd;
	void *ring;
	struct ring_layout lay;
	struct ring_hdr *sqh, *cqh;
	void *sqe, *cqe;
	uv_poll_t sq_poll;
	uint64_t xfers, xfer_bytes, xfer_errors; /* cross-node transfers ended (mstats.c) */
	struct mori_cqe *cq_backlog; /* entries waiting for CQ space, FIFO */
	size_t backlog_n, backlog_cap;
	uint64_t notifs_dropped;     /* notifications to it refused: its queue was full (client_post_notif) */
	struct list regions;         /* regions it owns */
	uint32_t nregions;           /* their count (client_max_regions) */
	struct list opens;           /* struct open_ref: regions of others it opened */
	struct list lists;           /* prepared descriptor lists (cross node) */
	uint64_t list_bytes;         /* their descriptors' bytes (client_max_list_bytes) */
	struct kv_client *kv;        /* its part of the KV store (kv/), NULL until it uses it */
	int said_bye;                /* it closed on purpose (SQE_BYE): not counted as died */
	int dying;
};

struct morid {
	uv_loop_t *loop;
	struct config cfg;
	char config_path[512];
	int config_from_file;
	uint64_t start_us, start_wall_us;
	uint64_t epoch;
	uint64_t counters[C_COUNT];
	uint64_t loop_iterations, last_watchdog_iter;
	/* session socket */
	int session_fd;
	uv_poll_t session_poll;
	char session_path[300];
	char control_url[320];
	int lock_fd;
	/* life cycle */
	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t watchdog;
	uv_check_t progress;
	uint64_t watchdog_usec;
	int stopping;
	/* tables */
	struct list clients;
	uint32_t nclients;
	uint64_t next_client_id;
	struct registry *reg;
	struct peers *peers;
	struct kv_store *kv;         /* UMBP (kv/), NULL without a store */
	/* Detach a client (session.c sets it): lower layers that must drop a client (a backlog
	 * at its cap) call through here instead of into the session layer. */
	void (*client_kill)(struct client *c, const char *why);
};

/* main.c */
void morid_stop(struct morid *d, const char *why);

/* reload.c: configuration at start and at reload. */
extern char **cli_names, **cli_values; /* command-line overrides, kept for every reload */
extern int cli_n;
int load_config(struct morid *d, struct config *cfg, char *err, size_t errlen);
void apply_log(struct morid *d);
/* Parse, validate, check reloadability, then swap; the old configuration stays on failure. */
int morid_reload(struct morid *d, char *err, size_t errlen);
void morid_notify_status(struct morid *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* reply.c */
void reply_error(Mori__Reply *rep, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* control.c: the control socket and the request dispatcher shared with session sockets. */
int control_start(struct morid *d);
void control_stop(struct morid *d);
/* Handle one request. c is the attached client for session requests, NULL on the control
 * socket. fds_in are owned by the callee. Returns 1 if the reply was deferred (the callee will
 * send it later through client_reply), else 0 with rep filled. */
int dispatch(struct morid *d, struct client *c, uid_t uid, Mori__Request *req, Mori__Reply *rep,
	     struct rctx *r, int *fds_in, int nfds_in);
void do_hello(struct morid *d, uid_t uid, Mori__Hello *h, Mori__Reply *rep, struct rctx *r);

/* client.c: the client table and what lower layers send a client (completions, replies). */
struct client *client_new(struct morid *d, pid_t pid, uid_t uid, const char *name);
struct client *client_find(struct morid *d, uint64_t id);
/* Queue a completion for the client; never dropped (backlog when the CQ is full; a client
 * whose backlog reaches client_max_backlog is detached through d->client_kill). */
void client_post(struct client *c, const struct mori_cqe *e);
/* Queue a notification for region owner c, from sender_pid (0: another node). Unlike
 * client_post it never detaches c, which did not ask for it: once c's CQ is full and half of
 * client_max_backlog waits behind it, the notification is dropped (counted, logged at warning)
 * and MORI_EAGAIN returned, so that a flooding opener cannot get the owner detached. */
int client_post_notif(struct client *c, const struct mori_cqe *e, pid_t sender_pid);
/* Move backlogged completions into the CQ as it frees up. */
void client_flush_backlog(struct client *c);
/* Send a reply on the client's session socket (deferred replies); nothing once it closed. */
void client_reply(struct client *c, Mori__Reply *rep, struct rctx *r);
/* Pack rep and send it with r's fds on a session socket (pid names it in the log). */
void wire_reply(int sock, pid_t pid, Mori__Reply *rep, struct rctx *r);

/* session.c: the SEQPACKET session sockets of attached clients. */
int session_start(struct morid *d);
void session_stop(struct morid *d);
void client_destroy(struct client *c, const char *why);

/* counters.c has the names */
static inline void count(struct morid *d, enum counter k, uint64_t n) { d->counters[k] += n; }
#endif
