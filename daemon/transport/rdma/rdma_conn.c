/* Connections of the RDMA engine and their QP slots: creation, the QP state machine, pairing
 * with the peer's end through CONNECT/ACK, reset by drain-then-destroy and re-creation, the
 * slots' timers, and posting a connection's waiting work onto its QPs' send queues (batched,
 * selectively signalled, never more than a queue holds). Above rdma_track.c, below
 * rdma_engine.c (rdma_eng_int.h); see rdma_core.h for the model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_eng_int.h"

static int pair(struct rdma_eng *e, struct rdma_qp *q, const struct rdma_ep *ep, int ack,
		char *err, size_t len);
static void send_connect(struct rdma_conn *c, int idx, int ack, uint64_t now);

/* ---- lookups ---- */
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
	/* A full row only costs the fast lookup: eng_qfind falls back to a scan. */
}

struct rdma_qp *eng_qfind(struct rdma_eng *e, uint32_t qpn)
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

int eng_post_recv(struct rdma_eng *e, struct rdma_qp *q, uint32_t slot)
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
		if (eng_post_recv(e, q, i) != 0) {
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
		eng_retire_lost(e, q, &f, q->drain_code, q->why);
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

void eng_drain_check(struct rdma_eng *e, struct rdma_qp *q)
{
	if (q->draining && q->head == q->tail && q->rq_posted == 0)
		slot_finish(e, q);
}

/* Reset a slot: move its QP to ERR, so that the device completes everything it holds (flushed
 * requests come back to be re-posted; receives that had already landed are still delivered),
 * then destroy it once drained. Only then is a notification that reached us never lost, and
 * no request of ours is left on a QP we no longer watch. A device that does not drain within
 * RDMA_DRAIN_US is not waited for. */
void eng_slot_reset(struct rdma_eng *e, struct rdma_qp *q, int code, const char *why)
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
	eng_drain_check(e, q);
}

/* Reset without waiting for the device (connection freed, device dead). */
void eng_slot_kill(struct rdma_eng *e, struct rdma_qp *q, int code, const char *why)
{
	eng_slot_reset(e, q, code, why);
	if (q->draining)
		slot_finish(e, q);
}

/* ---- connections ---- */
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
			eng_xfail(x, code, "%s", msg);
	}
	for (int i = 0; i < c->nqp; i++) {
		struct rdma_qp *q = &c->q[i];
		if (q->hw)
			eng_slot_kill(e, q, code, msg);
		if (q->ctrl_mr)
			e->ops->mr_dereg(e->ctx, q->ctrl_mr);
		free(q->fifo);
		free(q->ctrl);
	}
	/* Every transfer of c is finished now (nothing is on a device): hand them their ends. */
	for (struct rl *it = e->xfers.next; it != &e->xfers; it = it->next) {
		struct rx *x = rl_entry(it, struct rx, all);
		if (x->c == c)
			eng_xcheck(x);
	}
	eng_run_done(e);
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
		eng_slot_reset(e, q, MORI_EIO, why);
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
			eng_slot_reset(e, q, MORI_EIO, "peer re-created its QP");
		eng_run_done(e);
		return MORI_OK;
	}
	rc = pair(e, q, ep, ack, err, len);
	/* Work that waited for a QP can go. No polling here: completions are handled in order by
	 * rdma_eng_progress alone. */
	if (rc == 0)
		eng_pump(e, c);
	eng_run_done(e);
	return rc;
}

void rdma_conn_kill_qp(struct rdma_conn *c, int idx, const char *why, uint64_t now)
{
	if (idx < 0 || idx >= c->nqp)
		return;
	c->e->now = now;
	eng_slot_reset(c->e, &c->q[idx], MORI_EIO, why);
	eng_run_done(c->e);
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
		eng_slot_reset(e, q, MORI_EIO, why);
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

/* The next QP of c, round robin from c->rr, whose send queue has room; -1 when none has. */
static int qp_with_room(const struct rdma_conn *c)
{
	for (int k = 0; k < c->nqp; k++) {
		int i = (int)((c->rr + (uint32_t)k) % (uint32_t)c->nqp);
		if (has_room(&c->q[i]))
			return i;
	}
	return -1;
}

/* Post waiting work of c, in order, until its QPs' send queues are full. */
void eng_pump(struct rdma_eng *e, struct rdma_conn *c)
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
				struct chunk_cursor save = x->cur;
				len = chunk_next(x->a.descs, x->a.n, &x->cur, e->cfg.chunk, &lo, &ro);
				if (len == 0) {
					x->plan_done = 1;
				} else {
					x->cur = save; /* taken for real below, once a QP has room */
				}
			}
			if (len) {
				int qi = qp_with_room(c);
				if (qi < 0) {
					blocked = 1;
					e->st.sq_full_waits++;
					break;
				}
				c->rr = (uint32_t)qi + 1;
				if (from_retry) {
					x->nretry--;
				} else {
					chunk_next(x->a.descs, x->a.n, &x->cur, e->cfg.chunk, &lo, &ro);
					struct chunk_cursor probe = x->cur;
					uint64_t l2, r2;
					if (!chunk_next(x->a.descs, x->a.n, &probe, 1, &l2, &r2))
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
				int qi = qp_with_room(c);
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
		eng_xcheck(x);
	}
	for (int i = 0; i < c->nqp; i++)
		flush(e, &c->q[i], &b[i]);
}

/* ---- the slots' timers ---- */
void eng_conn_timers(struct rdma_conn *c, uint64_t now)
{
	struct rdma_eng *e = c->e;
	for (int i = 0; i < c->nqp; i++) {
		struct rdma_qp *q = &c->q[i];
		if (q->state == QPS_RTS && q->head != q->tail && !q->draining &&
		    now - q->progress_us >= e->cfg.stall_us) {
			char why[96];
			snprintf(why, sizeof(why), "stalled: %u requests out, no completion in %u ms",
				 rdma_qp_outstanding(q), e->cfg.stall_us / 1000);
			e->st.stalls++;
			eng_slot_reset(e, q, MORI_EIO, why);
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
}

uint64_t eng_conn_next_timer(const struct rdma_conn *c, uint64_t t)
{
	const struct rdma_eng *e = c->e;
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
	return t;
}
