/* A fake RDMA fabric for the engine's unit tests: QPs with the verbs state rules, send queues
 * that refuse to be overfilled, RDMA WRITE/READ/SEND executed in order by fake_run(), memory
 * keys checked on both sides, completion queues, and fault knobs (lost completions, a stuck
 * QP, a failing state change, a device that stops polling). The engine under test sees it only
 * through struct rdma_ops, exactly as it sees libibverbs. Header-only: one test binary per file. */
#ifndef TEST_RDMA_FAKE_H
#define TEST_RDMA_FAKE_H
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../daemon/transport/rdma/rdma_core.h"

#define FQ_MAX 256
#define FMR_MAX 256
#define FCQ 65536

struct fake_fab;

struct fake_dev {
	struct fake_fab *fab;
	struct rdma_wc cq[FCQ];
	uint32_t cq_head, cq_tail;
	int poll_error;          /* poll returns -1 */
	int fail_create;         /* qp_create fails */
	int fail_modify_to;      /* qp_modify to this state fails once (0: never) */
	int inv_req;             /* the next n RDMA WRITEs of this device's QPs are refused by the
				  * responder as invalid (a Soft-RoCE responder under load does this to
				  * well-formed writes): NAK, both ends' QPs in error */
	int overfilled;          /* a post exceeded a send queue: the engine broke its promise */
	uint32_t max_occupancy;
	int nmods;
	struct rdma_qp_attr mods[512];
	uint32_t mod_qpn[512];
};

struct fwr { struct rdma_wr w; int done; };

struct fake_qp {
	int used;
	uint32_t qpn;
	int state;
	struct fake_dev *dev;
	uint32_t depth, rq_depth;
	uint32_t dest_qpn;
	uint32_t sq_psn, rq_psn;
	struct fwr *sq;          /* ring of depth: [sq_head, sq_tail) occupy the queue */
	uint32_t sq_head, sq_exec, sq_tail; /* occupied from head; executed up to exec */
	uint32_t sq_ack;         /* completed (acknowledged) up to here: a lost ACK leaves a gap */
	struct { uint64_t wr_id, addr; uint32_t len, lkey; } *rq;
	uint32_t rq_head, rq_tail;
	int stuck;               /* nothing executes (a peer that never answers) */
	int lose_cqe;            /* requests execute, their completions never come (lost ACK) */
	uint8_t rnr_retry, retry_cnt, timeout;
};

struct fake_mr { int live; uint32_t key; uint8_t *base; size_t len; };

struct fake_fab {
	struct fake_qp q[FQ_MAX];
	uint32_t next_qpn;
	struct fake_mr mr[FMR_MAX];
	uint32_t next_key;
};

static inline struct fake_qp *fq_by_qpn(struct fake_fab *f, uint32_t qpn)
{
	for (int i = 0; i < FQ_MAX; i++)
		if (f->q[i].used && f->q[i].qpn == qpn)
			return &f->q[i];
	return NULL;
}

static inline struct fake_mr *fmr_find(struct fake_fab *f, uint32_t key, uint64_t addr, uint64_t len)
{
	for (int i = 0; i < FMR_MAX; i++) {
		struct fake_mr *m = &f->mr[i];
		if (m->live && m->key == key && addr >= (uint64_t)(uintptr_t)m->base &&
		    addr + len <= (uint64_t)(uintptr_t)m->base + m->len)
			return m;
	}
	return NULL;
}

static inline uint32_t fake_reg(struct fake_fab *f, void *p, size_t len)
{
	for (int i = 0; i < FMR_MAX; i++)
		if (!f->mr[i].live) {
			f->mr[i] = (struct fake_mr){1, 0x1000 + f->next_key++, p, len};
			return f->mr[i].key;
		}
	abort();
}

static inline void fake_dereg_key(struct fake_fab *f, uint32_t key)
{
	for (int i = 0; i < FMR_MAX; i++)
		if (f->mr[i].live && f->mr[i].key == key)
			f->mr[i].live = 0;
}

static inline void fcq_push(struct fake_dev *d, uint64_t wr_id, uint32_t qpn, int status, int recv,
			    uint32_t len)
{
	if (d->cq_tail - d->cq_head >= FCQ)
		abort(); /* CQ overrun: would be a fatal device error */
	d->cq[d->cq_tail++ % FCQ] = (struct rdma_wc){wr_id, qpn, status, recv, len, 0};
}

/* Move a QP to ERR as the device would: everything not executed and every receive flushes. */
static inline void fq_error(struct fake_qp *q)
{
	if (q->state == QPS_ERR)
		return;
	q->state = QPS_ERR;
	/* everything not acknowledged flushes, executed or not */
	for (uint32_t k = q->sq_ack; k != q->sq_tail; k++)
		fcq_push(q->dev, q->sq[k % q->depth].w.wr_id, q->qpn, IBV_WC_WR_FLUSH_ERR, 0, 0);
	q->sq_exec = q->sq_ack = q->sq_tail;
	while (q->rq_head != q->rq_tail) {
		fcq_push(q->dev, q->rq[q->rq_head % q->rq_depth].wr_id, q->qpn, IBV_WC_WR_FLUSH_ERR, 1, 0);
		q->rq_head++;
	}
}

/* ---- ops ---- */
static int f_qp_create(void *ctx, struct rdma_qp *rq, uint32_t depth, uint32_t rq_depth, char *err,
		       size_t len)
{
	struct fake_dev *d = ctx;
	if (d->fail_create) {
		snprintf(err, len, "fake: create refused");
		return MORI_EIO;
	}
	for (int i = 0; i < FQ_MAX; i++) {
		struct fake_qp *q = &d->fab->q[i];
		if (q->used)
			continue;
		memset(q, 0, sizeof(*q));
		q->used = 1;
		q->qpn = 0x100 + (uint32_t)i; /* the lowest free number, reused at once, as rxe does */
		q->state = QPS_RESET;
		q->dev = d;
		q->depth = depth;
		q->rq_depth = rq_depth;
		q->sq = calloc(depth, sizeof(*q->sq));
		q->rq = calloc(rq_depth, sizeof(*q->rq));
		rq->hw = q;
		rq->qpn = q->qpn;
		return 0;
	}
	snprintf(err, len, "fake: out of QPs");
	return MORI_ENOMEM;
}

static int f_qp_modify(void *ctx, struct rdma_qp *rq, const struct rdma_qp_attr *a, char *err, size_t len)
{
	struct fake_dev *d = ctx;
	struct fake_qp *q = rq->hw;
	if (d->fail_modify_to == a->to) {
		d->fail_modify_to = 0;
		snprintf(err, len, "fake: modify to %s refused", rdma_qps_name(a->to));
		return MORI_EIO;
	}
	int ok = (q->state == QPS_RESET && a->to == QPS_INIT) || (q->state == QPS_INIT && a->to == QPS_RTR) ||
		 (q->state == QPS_RTR && a->to == QPS_RTS) || a->to == QPS_ERR;
	if (!ok) {
		snprintf(err, len, "fake: bad transition %s -> %s", rdma_qps_name(q->state), rdma_qps_name(a->to));
		return MORI_EINVAL;
	}
	if (d->nmods < 512) {
		d->mods[d->nmods] = *a;
		d->mod_qpn[d->nmods++] = q->qpn;
	}
	if (a->to == QPS_ERR) {
		fq_error(q);
		return 0;
	}
	if (a->to == QPS_RTR) {
		q->dest_qpn = a->dest_qpn;
		q->rq_psn = a->rq_psn;
	}
	if (a->to == QPS_RTS) {
		q->sq_psn = a->sq_psn;
		q->rnr_retry = a->rnr_retry;
		q->retry_cnt = a->retry_cnt;
		q->timeout = a->timeout;
	}
	q->state = a->to;
	return 0;
}

static void f_qp_destroy(void *ctx, struct rdma_qp *rq)
{
	struct fake_qp *q = rq->hw;
	free(q->sq);
	free(q->rq);
	memset(q, 0, sizeof(*q));
}

static int f_mr_reg(void *ctx, void *addr, size_t len, uint32_t *lkey, void **handle, char *err, size_t el)
{
	struct fake_dev *d = ctx;
	*lkey = fake_reg(d->fab, addr, len);
	*handle = (void *)(uintptr_t)*lkey;
	return 0;
}

static void f_mr_dereg(void *ctx, void *handle)
{
	struct fake_dev *d = ctx;
	fake_dereg_key(d->fab, (uint32_t)(uintptr_t)handle);
}

static int f_post_send(void *ctx, struct rdma_qp *rq, const struct rdma_wr *w, int n, char *err, size_t len)
{
	struct fake_dev *d = ctx;
	struct fake_qp *q = rq->hw;
	for (int i = 0; i < n; i++) {
		if (q->sq_tail - q->sq_head >= q->depth) {
			d->overfilled = 1;
			snprintf(err, len, "fake: send queue full (%u)", q->depth);
			return MORI_EAGAIN;
		}
		if (q->state != QPS_RTS && q->state != QPS_ERR) {
			snprintf(err, len, "fake: post in %s", rdma_qps_name(q->state));
			return MORI_EINVAL;
		}
		q->sq[q->sq_tail % q->depth] = (struct fwr){w[i], 0};
		q->sq_tail++;
		if (q->sq_tail - q->sq_head > d->max_occupancy)
			d->max_occupancy = q->sq_tail - q->sq_head;
		if (q->state == QPS_ERR) { /* posts to an errored QP complete with flush */
			fcq_push(d, w[i].wr_id, q->qpn, IBV_WC_WR_FLUSH_ERR, 0, 0);
			q->sq_exec = q->sq_ack = q->sq_tail;
		}
	}
	return 0;
}

static int f_post_recv(void *ctx, struct rdma_qp *rq, uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey)
{
	struct fake_qp *q = rq->hw;
	if (q->rq_tail - q->rq_head >= q->rq_depth)
		return MORI_EAGAIN;
	q->rq[q->rq_tail % q->rq_depth].wr_id = wr_id;
	q->rq[q->rq_tail % q->rq_depth].addr = addr;
	q->rq[q->rq_tail % q->rq_depth].len = len;
	q->rq[q->rq_tail % q->rq_depth].lkey = lkey;
	q->rq_tail++;
	return 0;
}

/* A polled send completion frees its slot and every slot before it (in-order retirement). */
static void fq_retire(struct fake_fab *f, const struct rdma_wc *w)
{
	struct fake_qp *q = fq_by_qpn(f, w->qpn);
	if (!q || w->recv)
		return;
	for (uint32_t k = q->sq_head; k != q->sq_exec; k++)
		if (q->sq[k % q->depth].w.wr_id == w->wr_id) {
			q->sq_head = k + 1;
			return;
		}
}

static int f_poll(void *ctx, struct rdma_wc *wc, int max)
{
	struct fake_dev *d = ctx;
	if (d->poll_error)
		return -1;
	int n = 0;
	while (n < max && d->cq_head != d->cq_tail) {
		wc[n] = d->cq[d->cq_head++ % FCQ];
		fq_retire(d->fab, &wc[n]);
		n++;
	}
	return n;
}

static const struct rdma_ops fake_ops = {
	.qp_create = f_qp_create, .qp_modify = f_qp_modify, .qp_destroy = f_qp_destroy,
	.mr_reg = f_mr_reg, .mr_dereg = f_mr_dereg, .post_send = f_post_send,
	.post_recv = f_post_recv, .poll = f_poll,
};

/* ---- the wire: execute every QP's posted requests in order ---- */
static inline void fq_complete(struct fake_qp *q, struct fwr *r, int status)
{
	if (q->lose_cqe && status == 0)
		return;
	if (status != 0 || r->w.signaled)
		fcq_push(q->dev, r->w.wr_id, q->qpn, status, 0, r->w.len);
}

/* Execute one request; returns 0 done, 1 must wait (RNR), -1 error (QP now in ERR). */
static inline int fq_exec(struct fake_fab *f, struct fake_qp *q, struct fwr *r)
{
	struct fake_qp *p = fq_by_qpn(f, q->dest_qpn);
	if (!p || (p->state != QPS_RTR && p->state != QPS_RTS) || p->dest_qpn != q->qpn) {
		fcq_push(q->dev, r->w.wr_id, q->qpn, IBV_WC_RETRY_EXC_ERR, 0, 0);
		q->sq_ack = ++q->sq_exec;
		fq_error(q);
		return -1;
	}
	struct rdma_wr *w = &r->w;
	if (!fmr_find(f, w->lkey, w->laddr, w->len)) {
		fcq_push(q->dev, w->wr_id, q->qpn, IBV_WC_LOC_PROT_ERR, 0, 0);
		q->sq_ack = ++q->sq_exec;
		fq_error(q);
		return -1;
	}
	if (w->op == RDMA_SEND) {
		if (p->rq_head == p->rq_tail) {
			if (q->rnr_retry == 7)
				return 1;
			fcq_push(q->dev, w->wr_id, q->qpn, IBV_WC_RNR_RETRY_EXC_ERR, 0, 0);
			q->sq_ack = ++q->sq_exec;
			fq_error(q);
			return -1;
		}
		uint32_t s = p->rq_head++ % p->rq_depth;
		uint32_t n = w->len < p->rq[s].len ? w->len : p->rq[s].len;
		memcpy((void *)(uintptr_t)p->rq[s].addr, (void *)(uintptr_t)w->laddr, n);
		fcq_push(p->dev, p->rq[s].wr_id, p->qpn, 0, 1, n);
	} else {
		if (!fmr_find(f, w->rkey, w->raddr, w->len)) {
			fcq_push(q->dev, w->wr_id, q->qpn, IBV_WC_REM_ACCESS_ERR, 0, 0);
			q->sq_ack = ++q->sq_exec;
			fq_error(q);
			fq_error(p); /* the responder's QP goes to error too */
			return -1;
		}
		if (w->op == RDMA_WRITE && q->dev->inv_req > 0) {
			q->dev->inv_req--;
			fcq_push(q->dev, w->wr_id, q->qpn, IBV_WC_REM_INV_REQ_ERR, 0, 0);
			q->sq_ack = ++q->sq_exec;
			fq_error(q);
			fq_error(p);
			return -1;
		}
		if (w->op == RDMA_WRITE)
			memcpy((void *)(uintptr_t)w->raddr, (void *)(uintptr_t)w->laddr, w->len);
		else
			memcpy((void *)(uintptr_t)w->laddr, (void *)(uintptr_t)w->raddr, w->len);
	}
	fq_complete(q, r, 0);
	q->sq_exec++;
	if (!q->lose_cqe && q->sq_ack == q->sq_exec - 1)
		q->sq_ack = q->sq_exec;
	return 0;
}

/* Run up to `budget` requests per QP (0: all). Returns how many executed. */
static inline int fake_run(struct fake_fab *f, int budget)
{
	int done = 0;
	/* Each QP moves or not, at random, in each run: nothing may rely on one QP's requests
	 * landing before another's (RC orders requests within a QP only). */
	for (int j = 0; j < FQ_MAX; j++) {
		struct fake_qp *q = &f->q[j];
		if (!q->used || q->state != QPS_RTS || q->stuck || random() % 2)
			continue;
		int k = 0;
		while (q->sq_exec != q->sq_tail && (!budget || k < budget)) {
			int rc = fq_exec(f, q, &q->sq[q->sq_exec % q->depth]);
			if (rc == 1)
				break;
			k++;
			done++;
			if (rc < 0)
				break;
		}
	}
	return done;
}

/* ---- control messages between two engines' owners (queued: never re-entrant) ---- */
struct fmsg { struct rdma_conn *to; int idx, ack; struct rdma_ep ep; };
struct fake_ctl {
	struct fmsg m[4096];
	uint32_t head, tail;
	int drop;                /* drop every message while set */
	int chaos;               /* deliver late, out of order and twice, at random */
	uint64_t sent;
};

/* Deliver queued control messages; returns how many. */
static inline int fake_ctl_run(struct fake_ctl *c, uint64_t now)
{
	int n = 0;
	if (c->chaos) {
		/* each waiting message goes now with probability 1/3, else stays (so later ones
		 * overtake it); one in five goes twice */
		uint32_t cnt = c->tail - c->head;
		struct fmsg keep[4096];
		uint32_t nk = 0;
		for (uint32_t i = 0; i < cnt; i++) {
			struct fmsg m = c->m[c->head++ % 4096];
			if (random() % 3) {
				keep[nk++] = m;
				continue;
			}
			char err[160];
			rdma_conn_remote(m.to, m.idx, &m.ep, m.ack, now, err, sizeof(err));
			if (random() % 5 == 0 && nk < 4096)
				keep[nk++] = m;
			n++;
		}
		for (uint32_t i = 0; i < nk && c->tail - c->head < 4096; i++)
			c->m[c->tail++ % 4096] = keep[i];
		return n;
	}
	while (c->head != c->tail) {
		struct fmsg m = c->m[c->head++ % 4096];
		char err[160];
		rdma_conn_remote(m.to, m.idx, &m.ep, m.ack, now, err, sizeof(err));
		n++;
	}
	return n;
}

static inline void fake_ctl_send(struct fake_ctl *c, struct rdma_conn *to, int idx,
				 const struct rdma_ep *ep, int ack)
{
	c->sent++;
	if (c->drop || !to)
		return;
	c->m[c->tail++ % 4096] = (struct fmsg){to, idx, ack, *ep};
}

/* ---- two engines (A, B) on one fabric, their connections paired through the queued wire ---- */
struct pair {
	struct fake_fab fab;
	struct fake_dev da, db;
	struct rdma_eng *a, *b;
	struct rdma_conn *ca, *cb;
	struct fake_ctl ctl;
	uint64_t now;
	void (*notif)(struct pair *p, int to_b, const void *msg, uint32_t len);
	void *user;
	int events;
};

static void pair_send_connect(void *arg, struct rdma_conn *c, int idx, const struct rdma_ep *ep, int ack)
{
	struct pair *p = arg;
	fake_ctl_send(&p->ctl, c == p->ca ? p->cb : p->ca, idx, ep, ack);
}

static void pair_on_notif(void *arg, struct rdma_conn *c, const void *msg, uint32_t len)
{
	struct pair *p = arg;
	if (p->notif)
		p->notif(p, c == p->cb, msg, len);
}

static void pair_on_event(void *arg, struct rdma_conn *c, int idx, const char *what, const char *why)
{
	struct pair *p = arg;
	p->events++;
	if (getenv("FAKE_VERBOSE"))
		fprintf(stderr, "  %c qp %d %s %s\n", c == p->ca ? 'A' : 'B', idx, what, why);
}

static inline void pair_step(struct pair *p)
{
	fake_run(&p->fab, 0);
	fake_ctl_run(&p->ctl, p->now);
	rdma_eng_progress(p->a, p->now);
	rdma_eng_progress(p->b, p->now);
	p->now += 50;
}

/* cfg_a/cfg_b may be NULL for defaults (with nonzero GIDs). */
static inline struct pair *pair_new(int nqp, const struct rdma_cfg *cfg_a, const struct rdma_cfg *cfg_b)
{
	struct pair *p = calloc(1, sizeof(*p));
	struct rdma_cfg a, b;
	if (cfg_a)
		a = *cfg_a;
	else
		rdma_cfg_defaults(&a);
	if (cfg_b)
		b = *cfg_b;
	else
		rdma_cfg_defaults(&b);
	a.gid[15] = 1, a.gid[10] = a.gid[11] = 0xff;
	b.gid[15] = 2, b.gid[10] = b.gid[11] = 0xff;
	p->da.fab = p->db.fab = &p->fab;
	p->now = 1000;
	p->a = rdma_eng_new(&fake_ops, &p->da, &a);
	p->b = rdma_eng_new(&fake_ops, &p->db, &b);
	struct rdma_conn_cb cb = {pair_send_connect, pair_on_notif, pair_on_event, p};
	char err[160];
	p->ca = rdma_conn_new(p->a, nqp, &cb, p->now, err, sizeof(err));
	p->cb = rdma_conn_new(p->b, nqp, &cb, p->now, err, sizeof(err));
	if (!p->ca || !p->cb) {
		fprintf(stderr, "pair_new: %s\n", err);
		abort();
	}
	return p;
}

/* Step until both connections have every QP in RTS (or give up after n steps). */
static inline int pair_connect(struct pair *p, int n)
{
	for (int i = 0; i < n; i++) {
		if (rdma_conn_ready(p->ca) == rdma_conn_nqp(p->ca) &&
		    rdma_conn_ready(p->cb) == rdma_conn_nqp(p->cb))
			return 0;
		pair_step(p);
	}
	return -1;
}

static inline void pair_free(struct pair *p)
{
	rdma_eng_free(p->a);
	rdma_eng_free(p->b);
	free(p);
}
#endif
