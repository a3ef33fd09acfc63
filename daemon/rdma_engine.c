/* The RDMA engine below the hardware line: QP slots and their pairing, transfers striped over
 * a connection's QPs, send-queue accounting, completions, QP recovery and deadlines.
 * See rdma_core.h for the model; the comments here say why things are done as they are. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "rdma_core.h"

/* ---- a small intrusive list (this file does not depend on the daemon's headers) ---- */
struct rl { struct rl *prev, *next; };
static void rl_init(struct rl *l) { l->prev = l->next = l; }
static int rl_empty(const struct rl *l) { return l->next == l; }
static void rl_add(struct rl *h, struct rl *e)
{
	e->prev = h->prev;
	e->next = h;
	h->prev->next = e;
	h->prev = e;
}
static void rl_del(struct rl *e)
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

static uint32_t idhash(uint64_t id, uint32_t cap)
{
	id ^= id >> 31;
	id *= 0x7fb5d329728ea185ull;
	return (uint32_t)(id >> 32) & (cap - 1);
}

static int idset_has(const struct idset *s, uint64_t id)
{
	if (!s->cap)
		return 0;
	for (uint32_t i = idhash(id, s->cap);; i = (i + 1) & (s->cap - 1)) {
		if (s->v[i] == id)
			return 1;
		if (s->v[i] == 0)
			return 0;
	}
}

/* Rebuild with room for more, keeping only ids >= low. Returns -1 out of memory. */
static int idset_rebuild(struct idset *s, uint64_t low)
{
	uint32_t keep = 0;
	for (uint32_t i = 0; i < s->cap; i++)
		keep += s->v[i] >= low && s->v[i];
	uint32_t cap = 64;
	while (cap < 4 * (keep + 1))
		cap *= 2;
	uint64_t *v = calloc(cap, sizeof(*v));
	if (!v)
		return -1;
	for (uint32_t i = 0; i < s->cap; i++) {
		uint64_t id = s->v[i];
		if (id < low || !id)
			continue;
		uint32_t j = idhash(id, cap);
		while (v[j])
			j = (j + 1) & (cap - 1);
		v[j] = id;
	}
	free(s->v);
	s->v = v;
	s->cap = cap;
	s->n = keep;
	return 0;
}

static void idset_add(struct idset *s, uint64_t id, uint64_t low)
{
	/* Stale ids (< low) leave only when the table fills: then it is rebuilt without them. */
	if (2 * (s->n + 1) > s->cap && idset_rebuild(s, low) != 0)
		return; /* out of memory: no duplicate filtering for this one */
	uint32_t j = idhash(id, s->cap);
	while (s->v[j])
		j = (j + 1) & (s->cap - 1);
	s->v[j] = id;
	s->n++;
}

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
	struct rdma_cursor cur;
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

void rdma_cfg_defaults(struct rdma_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->sq_depth = 128;
	c->rq_depth = 64;
	c->sig_every = 16;
	c->chunk = 1u << 20;
	c->mtu = 1024;
	c->port = 1;
	c->gid_index = 0;
	c->timeout = 14;
	c->retry_cnt = 7;
	c->rnr_retry = 7;
	c->min_rnr_timer = 12;
	c->max_rd_atomic = 16;
	c->connect_retry_us = 200000;
}

/* ---- lookups ---- */
static struct rx *xfind(struct rdma_eng *e, uint32_t id)
{
	for (struct rx *x = e->xh[id % XHASH]; x; x = x->hnext)
		if (x->id == id)
			return x;
	return NULL;
}

static void xhash_del(struct rdma_eng *e, struct rx *x)
{
	struct rx **pp = &e->xh[x->id % XHASH];
	while (*pp && *pp != x)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = x->hnext;
}

static void qhash_set(struct rdma_eng *e, struct rdma_qp *q, int add)
{
	struct rdma_qp **row = e->qh[q->qpn % QHASH];
	for (int i = 0; i < RDMA_MAX_QPS; i++) {
		if (add && !row[i]) {
			row[i] = q;
			return;
		}
		if (!add && row[i] == q) {
			row[i] = NULL;
			return;
		}
	}
	/* A full row only costs the fast lookup: qfind falls back to a scan. */
}

static struct rdma_qp *qfind(struct rdma_eng *e, uint32_t qpn)
{
	struct rdma_qp **row = e->qh[qpn % QHASH];
	for (int i = 0; i < RDMA_MAX_QPS; i++)
		if (row[i] && row[i]->qpn == qpn && row[i]->hw)
			return row[i];
	for (struct rl *it = e->conns.next; it != &e->conns; it = it->next) {
		struct rdma_conn *c = rl_entry(it, struct rdma_conn, link);
		for (int i = 0; i < c->nqp; i++)
			if (c->q[i].hw && c->q[i].qpn == qpn)
				return &c->q[i];
	}
	return NULL;
}

/* ---- transfer end ---- */
static void xfail(struct rx *x, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void xfail(struct rx *x, int code, const char *fmt, ...)
{
	if (x->failed)
		return; /* the first error sticks */
	x->failed = 1;
	x->code = code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->msg, sizeof(x->msg), fmt, ap);
	va_end(ap);
	x->nretry = 0;
	x->plan_done = 1;
	if (x->ns != N_NONE && x->ns != N_POSTED)
		x->ns = N_DONE;
}

/* Is x finished (nothing on the device, nothing left to post)? Then queue its callback. */
static void xcheck(struct rx *x)
{
	if (x->on_done || x->out)
		return;
	if (!x->failed && (!x->plan_done || x->nretry || (x->ns != N_NONE && x->ns != N_DONE)))
		return;
	if (x->on_pend) {
		rl_del(&x->pend);
		x->on_pend = 0;
	}
	if (x->notif_id)
		rl_del(&x->nlink); /* it sends nothing more: the peer may forget its id */
	x->on_done = 1;
	rl_add(&x->c->e->done, &x->dlink);
}

static void xpend(struct rx *x)
{
	if (!x->on_pend && !x->on_done) {
		rl_add(&x->c->pending, &x->pend);
		x->on_pend = 1;
	}
}

/* Run due callbacks; they may start or cancel transfers. */
static void run_done(struct rdma_eng *e)
{
	if (e->in_done)
		return;
	e->in_done = 1;
	while (!rl_empty(&e->done)) {
		struct rx *x = rl_entry(e->done.next, struct rx, dlink);
		rl_del(&x->dlink);
		rl_del(&x->all);
		xhash_del(e, x);
		e->nxfers--;
		int code = x->failed ? x->code : MORI_OK;
		if (code) {
			e->st.xfer_errors++;
			if (code == MORI_ETIMEDOUT)
				e->st.timeouts++;
		} else {
			e->st.bytes += x->total;
		}
		e->st.xfers++;
		if (x->a.done)
			x->a.done(x->a.arg, x->id, code, code ? x->msg : "");
		free(x->retry);
		free(x);
	}
	e->in_done = 0;
}

/* ---- QP slots ---- */
/* PSNs: random per QP so that packets of an earlier QP with a reused number are not taken
 * for this one's; a private generator seeded from the kernel (rdma_eng_new). */
static uint32_t rand24(struct rdma_eng *e)
{
	uint64_t x = e->rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	e->rng = x;
	return (uint32_t)(x >> 20) & 0xffffffu;
}

int rdma_ep_check(const struct rdma_ep *ep, char *err, size_t len)
{
	static const uint8_t zero[16];
	if (ep->qpn == 0 || ep->qpn > 0xffffffu) {
		snprintf(err, len, "peer QP number %u is not a 24-bit QP number", ep->qpn);
		return MORI_EPROTO;
	}
	if (ep->psn > 0xffffffu) {
		snprintf(err, len, "peer PSN %u is over 24 bits", ep->psn);
		return MORI_EPROTO;
	}
	if (memcmp(ep->gid, zero, 16) == 0) {
		snprintf(err, len, "peer GID is zero");
		return MORI_EPROTO;
	}
	if (ep->mtu != 256 && ep->mtu != 512 && ep->mtu != 1024 && ep->mtu != 2048 && ep->mtu != 4096) {
		snprintf(err, len, "peer MTU %u is not 256..4096", ep->mtu);
		return MORI_EPROTO;
	}
	return MORI_OK;
}

int rdma_qp_modify(struct rdma_eng *e, struct rdma_qp *q, int to, const struct rdma_ep *remote,
		   char *err, size_t len)
{
	int from = q->state;
	int legal = (from == QPS_RESET && to == QPS_INIT) || (from == QPS_INIT && to == QPS_RTR) ||
		    (from == QPS_RTR && to == QPS_RTS) || (from != QPS_NONE && to == QPS_ERR);
	if (!legal || !q->hw) {
		snprintf(err, len, "illegal QP transition %s -> %s", rdma_qps_name(from), rdma_qps_name(to));
		return MORI_EINVAL;
	}
	struct rdma_qp_attr a = {0};
	a.to = to;
	a.port = e->cfg.port;
	a.gid_index = e->cfg.gid_index;
	if (to == QPS_RTR) {
		if (!remote) {
			snprintf(err, len, "RTR needs the peer's end");
			return MORI_EINVAL;
		}
		int rc = rdma_ep_check(remote, err, len);
		if (rc)
			return rc;
		a.path_mtu = remote->mtu < e->cfg.mtu ? remote->mtu : e->cfg.mtu;
		a.dest_qpn = remote->qpn;
		a.rq_psn = remote->psn;
		memcpy(a.dgid, remote->gid, 16);
		a.min_rnr_timer = e->cfg.min_rnr_timer;
		a.max_rd_atomic = e->cfg.max_rd_atomic;
	} else if (to == QPS_RTS) {
		a.timeout = e->cfg.timeout;
		a.retry_cnt = e->cfg.retry_cnt;
		a.rnr_retry = e->cfg.rnr_retry;
		a.sq_psn = q->psn;
		a.max_rd_atomic = e->cfg.max_rd_atomic;
	}
	int rc = e->ops->qp_modify(e->ctx, q, &a, err, len);
	if (rc)
		return rc;
	q->state = to;
	if (to == QPS_RTR)
		q->remote = *remote;
	return MORI_OK;
}

static void qp_event(struct rdma_qp *q, const char *what, const char *why)
{
	struct rdma_conn *c = q->conn;
	if (c->cb.on_qp_event)
		c->cb.on_qp_event(c->cb.arg, c, q->idx, what, why);
}

static int post_recv(struct rdma_eng *e, struct rdma_qp *q, uint32_t slot)
{
	uint64_t addr = (uint64_t)(uintptr_t)(q->ctrl + (uint64_t)slot * RDMA_NOTIF_WIRE);
	return e->ops->post_recv(e->ctx, q, wrid_make(0, slot, q->gen, WRK_RECV), addr, RDMA_NOTIF_WIRE,
				 q->ctrl_lkey);
}

/* Create the slot's QP and take it to INIT with its receives posted; it then waits for the
 * peer's end. On failure the slot stays empty (NONE) and progress tries again later. */
static int slot_create(struct rdma_eng *e, struct rdma_qp *q, char *err, size_t len)
{
	int rc = e->ops->qp_create(e->ctx, q, e->cfg.sq_depth, e->cfg.rq_depth, err, len);
	if (rc) {
		q->hw = NULL;
		q->state = QPS_NONE;
		return rc;
	}
	q->state = QPS_RESET;
	q->inc++;
	uint32_t old = q->psn;
	do
		q->psn = rand24(e);
	while (q->psn == old);
	memset(&q->remote, 0, sizeof(q->remote));
	rc = rdma_qp_modify(e, q, QPS_INIT, NULL, err, len);
	for (uint32_t i = 0; rc == 0 && i < e->cfg.rq_depth; i++)
		if (post_recv(e, q, i) != 0) {
			snprintf(err, len, "cannot post receive buffers");
			rc = MORI_EIO;
		}
	if (rc) {
		e->ops->qp_destroy(e->ctx, q);
		q->hw = NULL;
		q->state = QPS_NONE;
		return rc;
	}
	q->rq_posted = e->cfg.rq_depth;
	qhash_set(e, q, 1);
	q->connect_sent_us = 0; /* progress sends CONNECT */
	return 0;
}

/* Retire fifo entry k of q without success: requeue its work, or fail its transfer. */
static void retire_lost(struct rdma_eng *e, struct rdma_qp *q, struct rdma_fifo_ent *f, int code,
			const char *msg)
{
	struct rx *x = xfind(e, f->xfer);
	if (!x || x->c == NULL)
		return;
	x->out--;
	if (f->kind == WRK_DATA)
		x->out_data--;
	if (!x->failed) {
		if (x->reset_mark != q->reset_id) { /* one count per QP reset, not per request */
			x->reset_mark = q->reset_id;
			x->requeues++;
		}
		snprintf(x->last_qp_err, sizeof(x->last_qp_err), "%s", msg);
		if (x->requeues > RDMA_MAX_REQUEUES) {
			xfail(x, code, "%s (after %d QP resets)", msg, x->requeues - 1);
		} else if (f->kind == WRK_DATA) {
			if (x->nretry == x->capretry) {
				uint32_t nc = x->capretry ? 2 * x->capretry : 8;
				struct chunk *r = realloc(x->retry, nc * sizeof(*r));
				if (!r) {
					xfail(x, MORI_ENOMEM, "out of memory requeueing after: %s", msg);
					goto out;
				}
				x->retry = r;
				x->capretry = nc;
			}
			x->retry[x->nretry++] = (struct chunk){f->loff, f->roff, f->len};
			x->single_qp = -2;
			e->st.requeued++;
			xpend(x);
		} else if (f->kind == WRK_NOTIF) {
			/* Its data may be in the retry list (requeued just before it): the
			 * notification waits until every data request has completed again. */
			x->ns = N_WAIT;
			x->single_qp = -2;
			e->st.requeued++;
			xpend(x);
		}
	}
out:
	xcheck(x);
}

static void retire_ok(struct rdma_eng *e, struct rdma_fifo_ent *f)
{
	struct rx *x = xfind(e, f->xfer);
	if (!x)
		return;
	x->out--;
	if (f->kind == WRK_DATA) {
		x->out_data--;
		x->moved += f->len;
		if (x->out_data == 0 && x->ns == N_WAIT && x->plan_done && !x->nretry && !x->failed) {
			x->ns = N_READY;
			xpend(x);
		}
	} else if (f->kind == WRK_NOTIF) {
		x->ns = N_DONE;
	}
	xcheck(x);
}

static int pair(struct rdma_eng *e, struct rdma_qp *q, const struct rdma_ep *ep, int ack,
		char *err, size_t len);

/* The second half of a reset: the QP has nothing left on the device (drained), or we stop
 * waiting (forced: the device no longer answers, the connection goes). Whatever it still holds
 * is re-posted or failed; it is destroyed (the device no longer touches any buffer) and a fresh
 * QP waits for the peer, or pairs at once with an end the peer already sent. */
static void slot_finish(struct rdma_eng *e, struct rdma_qp *q)
{
	char err[128];
	while (q->head != q->tail) {
		struct rdma_fifo_ent f = q->fifo[q->head % q->depth];
		q->head++;
		retire_lost(e, q, &f, q->drain_code, q->why);
	}
	if (q->hw) {
		qhash_set(e, q, 0);
		e->ops->qp_destroy(e->ctx, q);
		q->hw = NULL;
	}
	q->state = QPS_NONE;
	q->draining = 0;
	q->head = q->tail = 0;
	q->unsignaled = 0;
	q->gen++;
	q->rq_posted = 0;
	if (q->conn->freeing || e->dead)
		return;
	if (slot_create(e, q, err, sizeof(err)) != 0) {
		snprintf(q->why, sizeof(q->why), "re-create failed: %s", err);
		qp_event(q, "down", q->why);
		q->connect_sent_us = e->now ? e->now : 1; /* progress retries after connect_retry_us */
		return;
	}
	if (q->pending_valid) {
		q->pending_valid = 0;
		if (pair(e, q, &q->pending, 0, err, sizeof(err)) != 0)
			qp_event(q, "down", err);
	}
}

static void drain_check(struct rdma_eng *e, struct rdma_qp *q)
{
	if (q->draining && q->head == q->tail && q->rq_posted == 0)
		slot_finish(e, q);
}

/* Reset a slot: move its QP to ERR, so that the device completes everything it holds (flushed
 * requests come back to be re-posted; receives that had already landed are still delivered),
 * then destroy it once drained. Only then is a notification that reached us never lost, and
 * no request of ours is left on a QP we no longer watch. A device that does not drain within
 * RDMA_DRAIN_US is not waited for. */
static void slot_reset(struct rdma_eng *e, struct rdma_qp *q, int code, const char *why)
{
	if (q->draining)
		return; /* already on its way down: the first reason stands */
	char err[128];
	q->reset_id = ++e->reset_seq;
	e->st.qp_resets++;
	snprintf(q->why, sizeof(q->why), "%s", why);
	q->drain_code = code;
	qp_event(q, "reset", why);
	if (!q->hw) {
		slot_finish(e, q);
		return;
	}
	q->draining = 1;
	q->drain_start = e->now;
	if (q->state != QPS_ERR && rdma_qp_modify(e, q, QPS_ERR, NULL, err, sizeof(err)) != 0) {
		slot_finish(e, q); /* cannot even stop it: destroy now */
		return;
	}
	q->state = QPS_ERR;
	drain_check(e, q);
}

/* Reset without waiting for the device (connection freed, device dead). */
static void slot_kill(struct rdma_eng *e, struct rdma_qp *q, int code, const char *why)
{
	slot_reset(e, q, code, why);
	if (q->draining)
		slot_finish(e, q);
}

static void pump(struct rdma_eng *e, struct rdma_conn *c);

static void derive(struct rdma_cfg *c)
{
	if (c->sig_every == 0)
		c->sig_every = 1;
	if (c->chunk == 0)
		c->chunk = 1u << 20;
	if (c->stall_us == 0) {
		double budget = 4.096 * (double)(1ull << (c->timeout < 31 ? c->timeout : 31)) * (c->retry_cnt + 1);
		double us = 4 * budget + 2e6; /* generous: a false stall only costs a re-post */
		c->stall_us = us > 600e6 ? 600000000u : (uint32_t)us;
	}
}

/* ---- connections ---- */
struct rdma_eng *rdma_eng_new(const struct rdma_ops *ops, void *ctx, const struct rdma_cfg *cfg)
{
	struct rdma_eng *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->ops = ops;
	e->ctx = ctx;
	e->cfg = *cfg;
	derive(&e->cfg);
	rl_init(&e->conns);
	rl_init(&e->xfers);
	rl_init(&e->done);
	e->next_id = 1;
	e->next_deadline = UINT64_MAX;
	if (getrandom(&e->rng, sizeof(e->rng), GRND_NONBLOCK) != (ssize_t)sizeof(e->rng))
		e->rng = (uint64_t)(uintptr_t)e ^ 0x9e3779b97f4a7c15ull;
	e->rng |= 1; /* xorshift must not start at 0 */
	return e;
}

void rdma_eng_set_cfg(struct rdma_eng *e, const struct rdma_cfg *cfg)
{
	/* Depths size the slots' arrays: they keep their values until the engine is re-made. */
	uint32_t sq = e->cfg.sq_depth, rq = e->cfg.rq_depth;
	e->cfg = *cfg;
	e->cfg.sq_depth = sq;
	e->cfg.rq_depth = rq;
	derive(&e->cfg);
}

const struct rdma_stats *rdma_eng_stats(const struct rdma_eng *e) { return &e->st; }
const char *rdma_eng_dead(const struct rdma_eng *e) { return e->dead ? e->dead_why : NULL; }
uint32_t rdma_xfers_in_flight(const struct rdma_eng *e) { return e->nxfers; }
int rdma_conn_nqp(const struct rdma_conn *c) { return c->nqp; }
const struct rdma_qp *rdma_conn_qp(const struct rdma_conn *c, int idx)
{
	return idx >= 0 && idx < c->nqp ? &c->q[idx] : NULL;
}

struct rdma_conn *rdma_conn_new(struct rdma_eng *e, int nqp, const struct rdma_conn_cb *cb,
				uint64_t now, char *err, size_t len)
{
	if (nqp < 1 || nqp > RDMA_MAX_QPS) {
		snprintf(err, len, "%d QPs per connection is outside 1..%d", nqp, RDMA_MAX_QPS);
		return NULL;
	}
	struct rdma_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, len, "out of memory");
		return NULL;
	}
	c->e = e;
	c->cb = *cb;
	c->nqp = nqp;
	rl_init(&c->pending);
	rl_init(&c->nlist);
	c->tx_nonce = ((uint64_t)rand24(e) << 40) ^ ((uint64_t)rand24(e) << 16) ^ rand24(e);
	c->next_nid = 1;
	rl_add(&e->conns, &c->link);
	size_t ctrl = (size_t)(e->cfg.rq_depth + e->cfg.sq_depth) * RDMA_NOTIF_WIRE;
	for (int i = 0; i < nqp; i++) {
		struct rdma_qp *q = &c->q[i];
		q->conn = c;
		q->idx = i;
		q->depth = e->cfg.sq_depth;
		q->fifo = calloc(q->depth, sizeof(*q->fifo));
		q->ctrl = aligned_alloc(64, ctrl);
		if (!q->fifo || !q->ctrl) {
			snprintf(err, len, "out of memory");
			goto fail;
		}
		memset(q->ctrl, 0, ctrl);
		if (e->ops->mr_reg(e->ctx, q->ctrl, ctrl, &q->ctrl_lkey, &q->ctrl_mr, err, len) != 0) {
			q->ctrl_mr = NULL;
			goto fail;
		}
		if (slot_create(e, q, err, len) != 0)
			goto fail;
	}
	(void)now;
	return c;
fail:
	rdma_conn_free(c, MORI_ECANCELED, "connection setup failed");
	return NULL;
}

void rdma_conn_free(struct rdma_conn *c, int code, const char *msg)
{
	struct rdma_eng *e = c->e;
	c->freeing = 1;
	for (struct rl *it = e->xfers.next; it != &e->xfers; it = it->next) {
		struct rx *x = rl_entry(it, struct rx, all);
		if (x->c == c && !x->on_done)
			xfail(x, code, "%s", msg);
	}
	for (int i = 0; i < c->nqp; i++) {
		struct rdma_qp *q = &c->q[i];
		if (q->hw)
			slot_kill(e, q, code, msg);
		if (q->ctrl_mr)
			e->ops->mr_dereg(e->ctx, q->ctrl_mr);
		free(q->fifo);
		free(q->ctrl);
	}
	/* Every transfer of c is finished now (nothing is on a device): hand them their ends. */
	for (struct rl *it = e->xfers.next; it != &e->xfers; it = it->next) {
		struct rx *x = rl_entry(it, struct rx, all);
		if (x->c == c)
			xcheck(x);
	}
	run_done(e);
	rl_del(&c->link);
	free(c->seen.v);
	free(c);
}

int rdma_conn_local(const struct rdma_conn *c, int idx, struct rdma_ep *ep)
{
	if (idx < 0 || idx >= c->nqp || !c->q[idx].hw)
		return MORI_ENOENT;
	const struct rdma_qp *q = &c->q[idx];
	memset(ep, 0, sizeof(*ep));
	ep->qpn = q->qpn;
	ep->psn = q->psn;
	ep->inc = q->inc;
	ep->nonce = c->tx_nonce;
	ep->mtu = c->e->cfg.mtu;
	memcpy(ep->gid, c->e->cfg.gid, 16);
	if (q->state == QPS_RTS || q->state == QPS_RTR) {
		ep->peer_qpn = q->remote.qpn;
		ep->peer_psn = q->remote.psn;
	}
	return MORI_OK;
}

int rdma_conn_ready(const struct rdma_conn *c)
{
	int n = 0;
	for (int i = 0; i < c->nqp; i++)
		n += c->q[i].state == QPS_RTS;
	return n;
}

static void send_connect(struct rdma_conn *c, int idx, int ack, uint64_t now)
{
	struct rdma_ep ep;
	if (rdma_conn_local(c, idx, &ep) != 0)
		return;
	c->q[idx].connect_sent_us = now ? now : 1;
	if (c->cb.send_connect)
		c->cb.send_connect(c->cb.arg, c, idx, &ep, ack);
}

/* Pair slot q (in INIT) with the peer's end: RTR, RTS, and answer a CONNECT. */
static int pair(struct rdma_eng *e, struct rdma_qp *q, const struct rdma_ep *ep, int ack,
		char *err, size_t len)
{
	int rc = rdma_qp_modify(e, q, QPS_RTR, ep, err, len);
	if (rc == 0)
		rc = rdma_qp_modify(e, q, QPS_RTS, NULL, err, len);
	if (rc) {
		char why[200];
		snprintf(why, sizeof(why), "pairing failed: %s", err);
		slot_reset(e, q, MORI_EIO, why);
		return rc;
	}
	qp_event(q, "up", "");
	if (!ack)
		send_connect(q->conn, q->idx, 1, e->now);
	return MORI_OK;
}

int rdma_conn_remote(struct rdma_conn *c, int idx, const struct rdma_ep *ep, int ack, uint64_t now,
		     char *err, size_t len)
{
	struct rdma_eng *e = c->e;
	e->now = now;
	if (idx < 0 || idx >= c->nqp) {
		snprintf(err, len, "QP slot %d is outside 0..%d", idx, c->nqp - 1);
		return MORI_EPROTO;
	}
	int rc = rdma_ep_check(ep, err, len);
	if (rc)
		return rc;
	if (ep->nonce != c->peer_nonce) {
		/* A new connection at the peer (it restarted): what we knew of its QPs is void. */
		c->peer_nonce = ep->nonce;
		for (int i = 0; i < c->nqp; i++)
			c->q[i].remote_inc = 0;
	}
	struct rdma_qp *q = &c->q[idx];
	if (ep->inc < q->remote_inc)
		return MORI_OK; /* about a QP the peer has replaced since: stale */
	if (ack && (ep->peer_qpn != q->qpn || ep->peer_psn != q->psn || q->draining))
		return MORI_OK; /* answers an earlier QP of ours: stale */
	int paired = q->state == QPS_RTS || q->state == QPS_RTR;
	if (paired && q->remote.qpn == ep->qpn && q->remote.psn == ep->psn) {
		if (!ack)
			send_connect(c, idx, 1, now); /* a repeated CONNECT: answer again */
		return MORI_OK;
	}
	q->remote_inc = ep->inc;
	if (q->state != QPS_INIT || q->draining) {
		/* The peer has a newer QP while ours is paired with an older one (or is being
		 * reset, or could not be created): ours is replaced. A CONNECT's end waits in INIT,
		 * so our new QP pairs with it and answers. An ACK's end is already paired (with
		 * this QP of ours): pairing a new one with it would make the peer replace it in
		 * turn, and so on; our new QP sends a fresh CONNECT instead. */
		q->pending_valid = !ack;
		if (!ack)
			q->pending = *ep;
		if (!q->draining && q->state != QPS_NONE)
			slot_reset(e, q, MORI_EIO, "peer re-created its QP");
		run_done(e);
		return MORI_OK;
	}
	rc = pair(e, q, ep, ack, err, len);
	/* Work that waited for a QP can go. No polling here: completions are handled in order by
	 * rdma_eng_progress alone. */
	if (rc == 0)
		pump(e, c);
	run_done(e);
	return rc;
}

void rdma_conn_kill_qp(struct rdma_conn *c, int idx, const char *why, uint64_t now)
{
	if (idx < 0 || idx >= c->nqp)
		return;
	c->e->now = now;
	slot_reset(c->e, &c->q[idx], MORI_EIO, why);
	run_done(c->e);
}

/* ---- transfers ---- */
int rdma_xfer_start(struct rdma_conn *c, const struct rdma_xfer_args *a, uint64_t now,
		    uint32_t *id)
{
	struct rdma_eng *e = c->e;
	e->now = now;
	if (!a->descs || a->n == 0 || (a->notif && (a->notif_len == 0 || a->notif_len > RDMA_NOTIF_MAX)))
		return MORI_EINVAL;
	if (e->dead)
		return MORI_EIO;
	struct rx *x = calloc(1, sizeof(*x));
	if (!x)
		return MORI_ENOMEM;
	do {
		x->id = e->next_id++;
	} while (x->id == 0 || xfind(e, x->id));
	x->c = c;
	x->a = *a;
	x->single_qp = -1;
	for (uint32_t i = 0; i < a->n; i++)
		x->total += a->descs[i].length;
	if (a->notif) {
		memcpy(x->notif, a->notif, a->notif_len);
		x->ns = N_WAIT;
		x->notif_id = c->next_nid++;
		rl_add(&c->nlist, &x->nlink); /* ids grow: the list stays in id order */
	}
	rl_add(&e->xfers, &x->all);
	x->hnext = e->xh[x->id % XHASH];
	e->xh[x->id % XHASH] = x;
	e->nxfers++;
	if (a->deadline_us < e->next_deadline)
		e->next_deadline = a->deadline_us;
	if (x->total == 0) {
		x->plan_done = 1;
		if (x->ns == N_WAIT)
			x->ns = N_READY;
	}
	xpend(x);
	*id = x->id;
	pump(e, c);
	run_done(e);
	(void)now;
	return MORI_OK;
}

/* Fail x and, if it has requests out, reset the QPs holding them: the device gives no
 * guarantee it will ever complete them (a lost acknowledgement, a stuck peer). */
static void xkill(struct rdma_eng *e, struct rx *x, int code, const char *msg)
{
	if (x->last_qp_err[0])
		xfail(x, code, "%s (%llu of %llu bytes moved; last QP error: %s)", msg,
		      (unsigned long long)x->moved, (unsigned long long)x->total, x->last_qp_err);
	else
		xfail(x, code, "%s (%llu of %llu bytes moved)", msg, (unsigned long long)x->moved,
		      (unsigned long long)x->total);
	x->killed = 1;
	struct rdma_conn *c = x->c;
	for (int i = 0; i < c->nqp && x->out; i++) {
		struct rdma_qp *q = &c->q[i];
		for (uint32_t k = q->head; k != q->tail; k++)
			if (q->fifo[k % q->depth].xfer == x->id) {
				char why[120];
				snprintf(why, sizeof(why), "%s: QP reset to reclaim its work", msg);
				slot_reset(e, q, MORI_EIO, why);
				break;
			}
	}
	xcheck(x);
}

int rdma_xfer_cancel(struct rdma_eng *e, uint32_t id, uint64_t now)
{
	e->now = now;
	struct rx *x = xfind(e, id);
	if (!x || x->on_done)
		return MORI_ENOENT;
	xkill(e, x, MORI_ECANCELED, "cancelled");
	pump(e, x->c);
	run_done(e);
	(void)now;
	return MORI_OK;
}

/* ---- posting ---- */
#define BATCH 32
struct batch {
	struct rdma_wr w[BATCH];
	int n;
};

static void flush(struct rdma_eng *e, struct rdma_qp *q, struct batch *b)
{
	if (!b->n)
		return;
	/* The last request of every batch is signalled, so each QP's tail always completes and
	 * retires what went before it, even when no more work follows. */
	struct rdma_wr *last = &b->w[b->n - 1];
	struct rdma_fifo_ent *lf = &q->fifo[(q->tail - 1) % q->depth];
	if (!last->signaled) {
		last->signaled = 1;
		lf->signaled = 1;
		q->unsignaled = 0;
	}
	char err[128];
	int rc = e->ops->post_send(e->ctx, q, b->w, b->n, err, sizeof(err));
	e->st.wrs_posted += (uint64_t)b->n;
	q->posted += (uint64_t)b->n;
	for (int i = 0; i < b->n; i++)
		e->st.wrs_signaled += b->w[i].signaled != 0;
	b->n = 0;
	if (rc) {
		char why[160];
		snprintf(why, sizeof(why), "post failed: %s", err);
		slot_reset(e, q, MORI_EIO, why);
	}
}

/* Queue one request on q (batched): the FIFO entry first, so that a failed post requeues it. */
static void put(struct rdma_eng *e, struct rdma_qp *q, struct batch *b, struct rx *x, int kind,
		uint64_t loff, uint64_t roff, uint32_t len, int force_signal)
{
	uint32_t slot = q->tail % q->depth;
	struct rdma_fifo_ent *f = &q->fifo[slot];
	if (q->head == q->tail)
		q->progress_us = e->now; /* the stall clock starts with the first request out */
	struct rdma_wr *w = &b->w[b->n++];
	memset(w, 0, sizeof(*w));
	int sig = force_signal || q->unsignaled + 1 >= e->cfg.sig_every ||
		  rdma_qp_outstanding(q) + 1 == q->depth;
	w->wr_id = wrid_make(x->id, kind == WRK_DATA ? x->seq : 0, q->gen, (unsigned)kind);
	w->signaled = sig;
	if (kind == WRK_DATA) {
		w->op = x->a.read ? RDMA_READ : RDMA_WRITE;
		w->laddr = x->a.laddr + loff;
		w->lkey = x->a.lkey;
		w->raddr = x->a.raddr + roff;
		w->rkey = x->a.rkey;
		w->len = len;
		x->seq++;
		x->out_data++;
		e->st.chunks++;
	} else {
		uint8_t *buf = q->ctrl + (uint64_t)(e->cfg.rq_depth + slot) * RDMA_NOTIF_WIRE;
		struct rdma_conn *c = x->c;
		uint64_t low = rl_entry(c->nlist.next, struct rx, nlink)->notif_id; /* x is on it */
		uint64_t hdr[3] = {c->tx_nonce, x->notif_id, low};
		memcpy(buf, hdr, RDMA_NOTIF_HDR);
		memcpy(buf + RDMA_NOTIF_HDR, x->notif, x->a.notif_len);
		w->op = RDMA_SEND;
		w->laddr = (uint64_t)(uintptr_t)buf;
		w->lkey = q->ctrl_lkey;
		w->len = RDMA_NOTIF_HDR + x->a.notif_len;
		/* After read data on this QP the notification waits for the reads to finish. */
		w->fence = x->a.read;
		x->ns = N_POSTED;
	}
	*f = (struct rdma_fifo_ent){w->wr_id, x->id, (uint8_t)kind, (uint8_t)sig, len, loff, roff};
	q->tail++;
	q->unsignaled = sig ? 0 : q->unsignaled + 1;
	x->out++;
	if (b->n == BATCH)
		flush(e, q, b);
}

static int has_room(const struct rdma_qp *q)
{
	return q->state == QPS_RTS && rdma_qp_outstanding(q) < q->depth;
}

/* Post waiting work of c, in order, until its QPs' send queues are full. */
static void pump(struct rdma_eng *e, struct rdma_conn *c)
{
	struct batch b[RDMA_MAX_QPS];
	for (int i = 0; i < c->nqp; i++)
		b[i].n = 0;
	int blocked = 0;
	while (!rl_empty(&c->pending) && !blocked) {
		struct rx *x = rl_entry(c->pending.next, struct rx, pend);
		for (;;) {
			if (x->failed)
				break;
			/* Next piece of data: requeued chunks first, then the plan. */
			uint64_t lo = 0, ro = 0, len = 0;
			int from_retry = 0;
			if (x->nretry) {
				struct chunk *k = &x->retry[x->nretry - 1];
				lo = k->loff, ro = k->roff, len = k->len;
				from_retry = 1;
			} else if (!x->plan_done) {
				struct rdma_cursor save = x->cur;
				len = rdma_next_chunk(x->a.descs, x->a.n, &x->cur, e->cfg.chunk, &lo, &ro);
				if (len == 0) {
					x->plan_done = 1;
				} else {
					x->cur = save; /* taken for real below, once a QP has room */
				}
			}
			if (len) {
				int qi = -1;
				for (int k = 0; k < c->nqp; k++) {
					int i = (int)((c->rr + (uint32_t)k) % (uint32_t)c->nqp);
					if (has_room(&c->q[i])) {
						qi = i;
						break;
					}
				}
				if (qi < 0) {
					blocked = 1;
					e->st.sq_full_waits++;
					break;
				}
				c->rr = (uint32_t)qi + 1;
				if (from_retry) {
					x->nretry--;
				} else {
					rdma_next_chunk(x->a.descs, x->a.n, &x->cur, e->cfg.chunk, &lo, &ro);
					struct rdma_cursor probe = x->cur;
					uint64_t l2, r2;
					if (!rdma_next_chunk(x->a.descs, x->a.n, &probe, 1, &l2, &r2))
						x->plan_done = 1;
				}
				struct rdma_qp *q = &c->q[qi];
				if (x->single_qp == -1) {
					x->single_qp = qi;
					x->single_gen = q->gen;
				} else if (x->single_qp != qi || x->single_gen != q->gen) {
					x->single_qp = -2;
				}
				int last = x->plan_done && !x->nretry;
				put(e, q, &b[qi], x, WRK_DATA, lo, ro, (uint32_t)len, last);
				if (last && x->ns == N_WAIT && x->single_qp >= 0 && has_room(q) &&
				    q->gen == x->single_gen) {
					/* All the data went on this QP: the notification can follow it
					 * at once (RC delivers in order; reads are fenced). */
					put(e, q, &b[qi], x, WRK_NOTIF, 0, 0, x->a.notif_len, 1);
				}
				continue;
			}
			/* No data left to post. The notification goes once every data request has
			 * completed (on whichever QP): then nothing it follows can still be on the way. */
			if (x->ns == N_WAIT && x->out_data == 0)
				x->ns = N_READY;
			if (x->ns == N_READY && x->out_data == 0) {
				int qi = -1;
				for (int k = 0; k < c->nqp; k++) {
					int i = (int)((c->rr + (uint32_t)k) % (uint32_t)c->nqp);
					if (has_room(&c->q[i])) {
						qi = i;
						break;
					}
				}
				if (qi < 0) {
					blocked = 1;
					e->st.sq_full_waits++;
					break;
				}
				c->rr = (uint32_t)qi + 1;
				put(e, &c->q[qi], &b[qi], x, WRK_NOTIF, 0, 0, x->a.notif_len, 1);
			}
			break;
		}
		if (blocked)
			break;
		/* Nothing more to post for x now (its notification may wait for data completions). */
		rl_del(&x->pend);
		x->on_pend = 0;
		xcheck(x);
	}
	for (int i = 0; i < c->nqp; i++)
		flush(e, &c->q[i], &b[i]);
}

/* ---- completions ---- */
static void on_recv(struct rdma_eng *e, struct rdma_qp *q, const struct rdma_wc *w)
{
	uint32_t slot = wrid_chunk(w->wr_id);
	q->rq_posted--; /* this receive is used up */
	if (w->status != 0) {
		/* A receive fails only when the QP went into error (flushed): reset it. */
		const char *m;
		rdma_wc_error(w->status, &m);
		char why[128];
		snprintf(why, sizeof(why), "receive failed: %s", m);
		slot_reset(e, q, MORI_EIO, why);
		drain_check(e, q);
		return;
	}
	if (slot >= e->cfg.rq_depth) {
		drain_check(e, q);
		return;
	}
	struct rdma_conn *c = q->conn;
	uint32_t n = w->byte_len < RDMA_NOTIF_WIRE ? w->byte_len : RDMA_NOTIF_WIRE;
	uint8_t msg[RDMA_NOTIF_WIRE];
	memcpy(msg, q->ctrl + (uint64_t)slot * RDMA_NOTIF_WIRE, n);
	int deliver = 0;
	if (n < RDMA_NOTIF_HDR) {
		e->st.notifs_bad++;
	} else {
		uint64_t hdr[3];
		memcpy(hdr, msg, sizeof(hdr));
		if (hdr[0] != c->rx_nonce) { /* a new connection at the peer: forget the old ids */
			c->rx_nonce = hdr[0];
			c->rx_low = 0;
			c->seen.n = 0;
			if (c->seen.v)
				memset(c->seen.v, 0, c->seen.cap * sizeof(uint64_t));
		}
		if (hdr[2] > c->rx_low)
			c->rx_low = hdr[2];
		/* Below the watermark, the sender saw it complete: a copy. */
		if (hdr[1] == 0 || hdr[1] < c->rx_low || idset_has(&c->seen, hdr[1])) {
			e->st.notifs_dup++;
		} else {
			idset_add(&c->seen, hdr[1], c->rx_low);
			deliver = 1;
			e->st.notifs_rx++;
		}
	}
	if (!q->draining) {
		if (post_recv(e, q, slot) == 0)
			q->rq_posted++;
		else
			slot_reset(e, q, MORI_EIO, "cannot re-post a receive buffer");
	}
	/* Delivered even from a QP being reset: the data it follows has landed. */
	if (deliver && c->cb.on_notif)
		c->cb.on_notif(c->cb.arg, c, msg + RDMA_NOTIF_HDR, n - RDMA_NOTIF_HDR);
	drain_check(e, q);
}

static void on_wc(struct rdma_eng *e, const struct rdma_wc *w)
{
	struct rdma_qp *q = qfind(e, w->qpn);
	if (!q || wrid_gen(w->wr_id) != q->gen) {
		e->st.stale_wcs++; /* a QP we already tore down */
		return;
	}
	q->progress_us = e->now;
	if (w->recv || wrid_kind(w->wr_id) == WRK_RECV) {
		on_recv(e, q, w);
		return;
	}
	uint32_t k = q->head;
	while (k != q->tail && q->fifo[k % q->depth].wr_id != w->wr_id)
		k++;
	if (k == q->tail) {
		e->st.stale_wcs++;
		return;
	}
	/* Completions come in order on an RC QP: everything before k has succeeded. */
	while (q->head != k) {
		struct rdma_fifo_ent f = q->fifo[q->head % q->depth];
		q->head++;
		retire_ok(e, &f);
	}
	struct rdma_fifo_ent f = q->fifo[k % q->depth];
	q->head++;
	if (w->status == 0) {
		q->completed++;
		retire_ok(e, &f);
		drain_check(e, q);
		return;
	}
	q->errors++;
	const char *m;
	int code = rdma_wc_error(w->status, &m);
	char why[160];
	if (rdma_wc_transient(w->status)) {
		/* Flushed behind some other failure, or the path failed (peer QP gone, receiver
		 * not ready): not this request's fault. Post it again on a new QP; the requeue
		 * limit and the deadline bound how long that goes on. */
		snprintf(why, sizeof(why), "%s", m);
		slot_reset(e, q, code, why);
		retire_lost(e, q, &f, code, q->why);
	} else {
		struct rx *x = xfind(e, f.xfer);
		if (x) {
			x->out--;
			if (f.kind == WRK_DATA)
				x->out_data--;
			xfail(x, code, "%s%s", m, f.kind == WRK_NOTIF ? " (notification)" : "");
			xcheck(x);
		}
		snprintf(why, sizeof(why), "%s (wr %s, status %d, vendor 0x%x)", m,
			 f.kind == WRK_NOTIF ? "notification" : "data", w->status, w->vendor_err);
		slot_reset(e, q, code, why);
	}
	drain_check(e, q);
}

static void expire(struct rdma_eng *e, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	for (struct rl *it = e->xfers.next; it != &e->xfers;) {
		struct rx *x = rl_entry(it, struct rx, all);
		it = it->next;
		if (x->on_done || x->killed)
			continue;
		if (x->a.deadline_us <= now) {
			if (!x->failed)
				xkill(e, x, MORI_ETIMEDOUT, "deadline expired");
			else
				xkill(e, x, x->code, x->msg); /* failed, yet work still out: reclaim it */
			/* slot resets may have finished others: restart the scan */
			it = e->xfers.next;
			next = UINT64_MAX;
			continue;
		}
		if (x->a.deadline_us < next)
			next = x->a.deadline_us;
	}
	e->next_deadline = next;
}

int rdma_eng_progress(struct rdma_eng *e, uint64_t now)
{
	struct rdma_wc wc[32];
	int total = 0, n = 0, rounds = 0;
	e->now = now;
	while (rounds++ < 8 && (n = e->ops->poll(e->ctx, wc, 32)) > 0) {
		for (int i = 0; i < n; i++)
			on_wc(e, &wc[i]);
		total += n;
	}
	if (n < 0 && !e->dead) {
		/* The completion queue is broken (device removed, fatal error): no QP of this
		 * engine can work again. End everything now with a clear code; the owner re-opens
		 * the device and builds a new engine (rdma_eng_dead). */
		e->dead = 1;
		snprintf(e->dead_why, sizeof(e->dead_why), "device failed (polling completions)");
		for (struct rl *it = e->xfers.next; it != &e->xfers; it = it->next) {
			struct rx *x = rl_entry(it, struct rx, all);
			if (!x->on_done)
				xfail(x, MORI_EIO, "%s", e->dead_why);
		}
		for (struct rl *it = e->conns.next; it != &e->conns; it = it->next) {
			struct rdma_conn *c = rl_entry(it, struct rdma_conn, link);
			c->freeing = 1; /* no re-creation */
			for (int i = 0; i < c->nqp; i++)
				if (c->q[i].hw)
					slot_kill(e, &c->q[i], MORI_EIO, e->dead_why);
		}
		for (struct rl *it = e->xfers.next; it != &e->xfers; it = it->next)
			xcheck(rl_entry(it, struct rx, all));
	}
	if (e->dead) {
		run_done(e);
		return total;
	}
	if (now >= e->next_deadline)
		expire(e, now);
	for (struct rl *it = e->conns.next; it != &e->conns; it = it->next) {
		struct rdma_conn *c = rl_entry(it, struct rdma_conn, link);
		for (int i = 0; i < c->nqp; i++) {
			struct rdma_qp *q = &c->q[i];
			if (q->state == QPS_RTS && q->head != q->tail && !q->draining &&
			    now - q->progress_us >= e->cfg.stall_us) {
				char why[96];
				snprintf(why, sizeof(why), "stalled: %u requests out, no completion in %u ms",
					 rdma_qp_outstanding(q), e->cfg.stall_us / 1000);
				e->st.stalls++;
				slot_reset(e, q, MORI_EIO, why);
			}
			if (q->draining && now - q->drain_start >= RDMA_DRAIN_US) {
				snprintf(q->why + strlen(q->why), sizeof(q->why) - strlen(q->why),
					 "; not drained in %u ms", RDMA_DRAIN_US / 1000);
				slot_finish(e, q);
			}
			if (q->state == QPS_NONE && !q->draining && !c->freeing &&
			    (q->connect_sent_us == 0 || now - q->connect_sent_us >= e->cfg.connect_retry_us)) {
				char err[128];
				q->connect_sent_us = now ? now : 1;
				if (slot_create(e, q, err, sizeof(err)) != 0) {
					snprintf(q->why, sizeof(q->why), "re-create failed: %s", err);
				} else if (q->pending_valid) {
					q->pending_valid = 0;
					if (pair(e, q, &q->pending, 0, err, sizeof(err)) != 0)
						qp_event(q, "down", err);
				}
			}
			if (q->state == QPS_INIT &&
			    (q->connect_sent_us == 0 || now - q->connect_sent_us >= e->cfg.connect_retry_us))
				send_connect(c, i, 0, now);
		}
		if (!rl_empty(&c->pending))
			pump(e, c);
	}
	run_done(e);
	return total;
}

uint64_t rdma_eng_next_timer(const struct rdma_eng *e)
{
	uint64_t t = e->next_deadline;
	for (const struct rl *it = e->conns.next; it != &e->conns; it = it->next) {
		const struct rdma_conn *c = rl_entry(it, const struct rdma_conn, link);
		for (int i = 0; i < c->nqp; i++) {
			const struct rdma_qp *q = &c->q[i];
			if (q->state == QPS_INIT || (q->state == QPS_NONE && !q->draining)) {
				uint64_t at = q->connect_sent_us + e->cfg.connect_retry_us;
				if (q->connect_sent_us == 0)
					at = 0;
				if (at < t)
					t = at;
			}
			if (q->draining && q->drain_start + RDMA_DRAIN_US < t)
				t = q->drain_start + RDMA_DRAIN_US;
			if (q->state == QPS_RTS && q->head != q->tail && q->progress_us + e->cfg.stall_us < t)
				t = q->progress_us + e->cfg.stall_us;
		}
	}
	return t;
}

void rdma_eng_free(struct rdma_eng *e)
{
	while (!rl_empty(&e->conns))
		rdma_conn_free(rl_entry(e->conns.next, struct rdma_conn, link), MORI_ECANCELED,
			       "shutting down");
	run_done(e);
	free(e);
}
