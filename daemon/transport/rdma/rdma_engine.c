/* The RDMA engine below the hardware line: its configuration, transfers striped over a
 * connection's QPs (start, cancel, deadlines), completions and the notifications they carry,
 * progress and its timer. Connections, their QP slots and posting are rdma_conn.c's; transfer
 * records rdma_track.c's (rdma_eng_int.h says how the three are layered). See rdma_core.h for
 * the model; the comments here say why things are done as they are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "rdma_eng_int.h"

/* ---- notification ids seen from the peer ---- */
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

/* ---- the engine ---- */
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

/* A seed when the kernel has none to give yet (getrandom fails before its pool is ready: a VM
 * early in boot, as the Soft-RoCE test guest is). The engine's address alone is the same in
 * two processes forked from one (test_rdma_verbs' A and B drew the same PSNs and connection
 * nonces), so the pid and both clocks go in too, mixed (splitmix64's finaliser). */
static uint64_t fallback_seed(const void *e)
{
	struct timespec rt, mt;
	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_MONOTONIC, &mt);
	uint64_t x = (uint64_t)(uintptr_t)e ^ (uint64_t)getpid() << 40 ^ (uint64_t)rt.tv_nsec ^
		     (uint64_t)rt.tv_sec << 30 ^ ((uint64_t)mt.tv_nsec << 20 | (uint64_t)mt.tv_sec);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

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
		e->rng = fallback_seed(e);
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
	} while (x->id == 0 || eng_xfind(e, x->id));
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
	eng_xpend(x);
	*id = x->id;
	eng_pump(e, c);
	eng_run_done(e);
	(void)now;
	return MORI_OK;
}

/* Fail x and, if it has requests out, reset the QPs holding them: the device gives no
 * guarantee it will ever complete them (a lost acknowledgement, a stuck peer). */
static void xkill(struct rdma_eng *e, struct rx *x, int code, const char *msg)
{
	if (x->last_qp_err[0])
		eng_xfail(x, code, "%s (%llu of %llu bytes moved; last QP error: %s)", msg,
		      (unsigned long long)x->moved, (unsigned long long)x->total, x->last_qp_err);
	else
		eng_xfail(x, code, "%s (%llu of %llu bytes moved)", msg, (unsigned long long)x->moved,
		      (unsigned long long)x->total);
	x->killed = 1;
	struct rdma_conn *c = x->c;
	for (int i = 0; i < c->nqp && x->out; i++) {
		struct rdma_qp *q = &c->q[i];
		for (uint32_t k = q->head; k != q->tail; k++)
			if (q->fifo[k % q->depth].xfer == x->id) {
				char why[120];
				snprintf(why, sizeof(why), "%s: QP reset to reclaim its work", msg);
				eng_slot_reset(e, q, MORI_EIO, why);
				break;
			}
	}
	eng_xcheck(x);
}

int rdma_xfer_cancel(struct rdma_eng *e, uint32_t id, uint64_t now)
{
	e->now = now;
	struct rx *x = eng_xfind(e, id);
	if (!x || x->on_done)
		return MORI_ENOENT;
	xkill(e, x, MORI_ECANCELED, "cancelled");
	eng_pump(e, x->c);
	eng_run_done(e);
	(void)now;
	return MORI_OK;
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
		eng_slot_reset(e, q, MORI_EIO, why);
		eng_drain_check(e, q);
		return;
	}
	if (slot >= e->cfg.rq_depth) {
		eng_drain_check(e, q);
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
		if (eng_post_recv(e, q, slot) == 0)
			q->rq_posted++;
		else
			eng_slot_reset(e, q, MORI_EIO, "cannot re-post a receive buffer");
	}
	/* Delivered even from a QP being reset: the data it follows has landed. */
	if (deliver && c->cb.on_notif)
		c->cb.on_notif(c->cb.arg, c, msg + RDMA_NOTIF_HDR, n - RDMA_NOTIF_HDR);
	eng_drain_check(e, q);
}

static void on_wc(struct rdma_eng *e, const struct rdma_wc *w)
{
	struct rdma_qp *q = eng_qfind(e, w->qpn);
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
		eng_retire_ok(e, &f);
	}
	struct rdma_fifo_ent f = q->fifo[k % q->depth];
	q->head++;
	if (w->status == 0) {
		q->completed++;
		eng_retire_ok(e, &f);
		eng_drain_check(e, q);
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
		eng_slot_reset(e, q, code, why);
		eng_retire_lost(e, q, &f, code, q->why);
	} else {
		struct rx *x = eng_xfind(e, f.xfer);
		if (x) {
			x->out--;
			if (f.kind == WRK_DATA)
				x->out_data--;
			eng_xfail(x, code, "%s%s", m, f.kind == WRK_NOTIF ? " (notification)" : "");
			eng_xcheck(x);
		}
		snprintf(why, sizeof(why), "%s (wr %s, status %d, vendor 0x%x)", m,
			 f.kind == WRK_NOTIF ? "notification" : "data", w->status, w->vendor_err);
		eng_slot_reset(e, q, code, why);
	}
	eng_drain_check(e, q);
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
				eng_xfail(x, MORI_EIO, "%s", e->dead_why);
		}
		for (struct rl *it = e->conns.next; it != &e->conns; it = it->next) {
			struct rdma_conn *c = rl_entry(it, struct rdma_conn, link);
			c->freeing = 1; /* no re-creation */
			for (int i = 0; i < c->nqp; i++)
				if (c->q[i].hw)
					eng_slot_kill(e, &c->q[i], MORI_EIO, e->dead_why);
		}
		for (struct rl *it = e->xfers.next; it != &e->xfers; it = it->next)
			eng_xcheck(rl_entry(it, struct rx, all));
	}
	if (e->dead) {
		eng_run_done(e);
		return total;
	}
	if (now >= e->next_deadline)
		expire(e, now);
	for (struct rl *it = e->conns.next; it != &e->conns; it = it->next) {
		struct rdma_conn *c = rl_entry(it, struct rdma_conn, link);
		eng_conn_timers(c, now);
		if (!rl_empty(&c->pending))
			eng_pump(e, c);
	}
	eng_run_done(e);
	return total;
}

uint64_t rdma_eng_next_timer(const struct rdma_eng *e)
{
	uint64_t t = e->next_deadline;
	for (const struct rl *it = e->conns.next; it != &e->conns; it = it->next) {
		const struct rdma_conn *c = rl_entry(it, const struct rdma_conn, link);
		t = eng_conn_next_timer(c, t);
	}
	return t;
}

void rdma_eng_free(struct rdma_eng *e)
{
	while (!rl_empty(&e->conns))
		rdma_conn_free(rl_entry(e->conns.next, struct rdma_conn, link), MORI_ECANCELED,
			       "shutting down");
	eng_run_done(e);
	free(e);
}
