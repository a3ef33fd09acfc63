/* Internals of the RDMA engine (rdma_core.h), shared by its three files, lowest layer first:
 *   rdma_track.c   transfer records: lookup by id, the first error that sticks, the check that a
 *                  transfer is finished, its callback, and what retiring a send-queue entry
 *                  means for the transfer it belongs to;
 *   rdma_conn.c    connections and their QP slots: creation, the state machine, pairing with
 *                  the peer's end, reset by drain-then-destroy, the slots' timers, and posting a
 *                  connection's waiting work onto its send queues;
 *   rdma_engine.c  the engine: configuration, starting, cancelling and expiring transfers,
 *                  completions and notifications received, progress and its timer.
 * Each file calls only the ones listed above it (callbacks to the owner aside). Nothing here is
 * for the rest of the daemon: it uses rdma_core.h alone. */
#ifndef MORID_RDMA_ENG_INT_H
#define MORID_RDMA_ENG_INT_H
#include <stddef.h>
#include <stdint.h>

#include "rdma_core.h"

/* ---- a small intrusive list (the engine does not depend on the daemon's headers) ---- */
struct rl { struct rl *prev, *next; };
static inline void rl_init(struct rl *l) { l->prev = l->next = l; }
static inline int rl_empty(const struct rl *l) { return l->next == l; }
static inline void rl_add(struct rl *h, struct rl *e)
{
	e->prev = h->prev;
	e->next = h;
	h->prev->next = e;
	h->prev = e;
}
static inline void rl_del(struct rl *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->prev = e->next = e;
}
#define rl_entry(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

enum nstate { N_NONE, N_WAIT, N_READY, N_POSTED, N_DONE };

/* Notification ids seen from the peer and not yet below its low watermark. */
struct idset {
	uint64_t *v;              /* open addressing; 0 is empty (ids start at 1) */
	uint32_t cap, n;
};

struct chunk { uint64_t loff, roff; uint32_t len; };

struct rx {
	struct rl all;            /* e->xfers */
	struct rl pend;           /* c->pending while it has work to post */
	struct rl dlink;          /* e->done while its callback is due */
	struct rx *hnext;
	int on_pend, on_done;
	struct rdma_conn *c;
	uint32_t id;
	struct rdma_xfer_args a;
	uint8_t notif[RDMA_NOTIF_MAX];
	uint64_t notif_id;        /* 0: no notification */
	struct rl nlink;          /* c->nlist while it may still send its notification */
	enum nstate ns;
	struct chunk_cursor cur;
	uint32_t seq;             /* chunks taken (wr id chunk index) */
	int plan_done;
	struct chunk *retry;      /* chunks to post again after a QP failure */
	uint32_t nretry, capretry;
	uint32_t out, out_data;   /* requests posted and not retired */
	int single_qp;            /* every data request so far went to this slot (-1 none, -2 many) */
	uint8_t single_gen;
	int requeues;
	int killed;               /* its QPs were reset to reclaim its work */
	uint64_t reset_mark;
	int failed, code;
	char msg[96];
	char last_qp_err[96];     /* why its work was last re-posted */
	uint64_t total, moved;
};

struct rdma_conn {
	struct rl link;           /* e->conns */
	uint64_t tx_nonce, next_nid;
	struct rl nlist;          /* transfers that may still send a notification, by id */
	uint64_t rx_nonce, rx_low;
	struct idset seen;
	uint64_t peer_nonce;      /* the peer connection whose QPs we pair with */
	struct rdma_eng *e;
	struct rdma_conn_cb cb;
	int nqp;
	struct rdma_qp q[RDMA_MAX_QPS];
	struct rl pending;
	uint32_t rr;              /* round-robin start */
	int freeing;
};

#define XHASH 1024
#define QHASH 256
struct rdma_eng {
	const struct rdma_ops *ops;
	void *ctx;
	struct rdma_cfg cfg;
	struct rl conns;
	struct rl xfers;
	struct rl done;
	struct rx *xh[XHASH];
	struct rdma_qp *qh[QHASH][RDMA_MAX_QPS]; /* qpn -> slot, open addressing per bucket row */
	uint32_t next_id;
	uint32_t nxfers;
	uint64_t reset_seq;
	uint64_t next_deadline;
	int in_done;
	uint64_t now;             /* the time of the current call */
	uint64_t rng;
	int dead;                 /* the device failed: nothing more runs on this engine */
	char dead_why[128];
	struct rdma_stats st;
};

/* ---- rdma_track.c: transfer records ---- */
struct rx *eng_xfind(struct rdma_eng *e, uint32_t id);
/* Fail x (the first error sticks); it ends once nothing of it is left on a device. */
void eng_xfail(struct rx *x, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Is x finished (nothing on the device, nothing left to post)? Then queue its callback. */
void eng_xcheck(struct rx *x);
/* Put x on its connection's list of work to post (unless it is there or finished). */
void eng_xpend(struct rx *x);
/* Run due callbacks; they may start or cancel transfers. */
void eng_run_done(struct rdma_eng *e);
/* Send-queue entry f of q has completed: count it to its transfer. */
void eng_retire_ok(struct rdma_eng *e, struct rdma_fifo_ent *f);
/* Send-queue entry f of q is retired without success: requeue its work, or fail its transfer. */
void eng_retire_lost(struct rdma_eng *e, struct rdma_qp *q, struct rdma_fifo_ent *f, int code,
		     const char *msg);

/* ---- rdma_conn.c: QP slots and connections ---- */
/* The slot holding QP number qpn, or NULL. */
struct rdma_qp *eng_qfind(struct rdma_eng *e, uint32_t qpn);
/* Give receive buffer slot of q back to the device. */
int eng_post_recv(struct rdma_eng *e, struct rdma_qp *q, uint32_t slot);
/* Reset a slot (ERR, drain, destroy, re-create); the first reason stands. */
void eng_slot_reset(struct rdma_eng *e, struct rdma_qp *q, int code, const char *why);
/* Reset without waiting for the device (connection freed, device dead). */
void eng_slot_kill(struct rdma_eng *e, struct rdma_qp *q, int code, const char *why);
/* Finish a reset once the slot has nothing left on the device. */
void eng_drain_check(struct rdma_eng *e, struct rdma_qp *q);
/* Post waiting work of c, in order, until its QPs' send queues are full. */
void eng_pump(struct rdma_eng *e, struct rdma_conn *c);
/* The slots' timers at now: stall watchdog, drain limit, re-creation, CONNECT resend. */
void eng_conn_timers(struct rdma_conn *c, uint64_t now);
/* The earliest of t and the times eng_conn_timers must run again for c. */
uint64_t eng_conn_next_timer(const struct rdma_conn *c, uint64_t t);
#endif
