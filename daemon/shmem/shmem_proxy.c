/* MORI-SHMEM's proxy (shmem_proxy.h): morid serving each ready PE's proxy ring.
 *
 * A ring is served in order, in batches: consecutive puts to one PE (up to
 * a put+signal, which ends its batch) go as one transfer, consecutive gets from one PE as one,
 * consecutive atomics to one PE as one PeerShmemAmo message; a put+signal batch's signal lands
 * only after its data: in the same message (at most PROXY_INLINE bytes), with the transfer
 * where its transport applies a signal after the data (TCP's FF_SIGNAL: the target applies it
 * once every byte landed, then answers; one round trip), else (RDMA) as a message once the
 * transfer was acknowledged (two round trips). Every atomic lands
 * after every earlier request of the ring (barrier flags rely on it). Batches of plain puts to
 * one PE may be in flight together (their bytes have no order until a fence); a batch that is
 * not plain puts waits for every batch to its PE. `done` moves past a batch once all of it and
 * all before it completed, so quiet (OP_QUIET, or done reaching head) means every earlier put is
 * visible at its target. A request is copied out of shared memory, then checked (the ring's
 * writer is untrusted): a bad one completes with its error (the ring's sticky `error`, what the
 * kernel's proxy_wait returns) and nothing else happens.
 *
 * Messages: atomics and signals (and put+signal batches of at most PROXY_INLINE bytes, data and
 * signal in one message) travel on the transport's data path where it has one (peer_rpc_fast:
 * TCP's MSG frames, which the loops write and read themselves), else on the request path (nng,
 * whose threads cost a hand-off each way: tens of microseconds a hop under load).
 *
 * Polling: a kernel cannot ring an eventfd, so the loop polls the rings. Adaptive: on every loop
 * turn (an idle handle: the loop does not sleep) for `shmem_proxy_spin_us` (config, default 2 ms)
 * after the last request seen or batch ended, yielding the CPU on each turn that found nothing
 * (on_idle); then every PROXY_POLL_MS on a timer while PEs exist; every PROXY_IDLE_POLL_MS once
 * no ring carried a request for PROXY_IDLE_MS (so that an idle daemon costs next
 * to no CPU). A burst of requests is served at loop-turn latency; the first request after
 * a pause waits up to a timer tick. One loop and no thread: the rings, the transfers and pe_gone
 * all run there, so letting go of a PE needs no lock. */
#include "shmem_proxy.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "heap.h"
#include "log.h"
#include "peer/peer.h"
#include "peer/peer_int.h"
#include "region/region.h"
#include "shmem_layout.h"

#define PROXY_BATCH 64                 /* requests one transfer or AMO message carries */
#define PROXY_INFLIGHT 8               /* batches of one ring in flight at once (to different PEs) */
#define PROXY_BATCH_BYTES (16ull << 20)
#define PROXY_POLL_MS 1
#define PROXY_TIMEOUT_MS 10000         /* each transfer and AMO message */
#define DEDUP_SLOTS 256                /* batches the target remembers (a resend comes within ~1 s) */
#define LOCAL_BOUNCE (1u << 20)
#define PROXY_INLINE (16u << 10)       /* a put+signal batch of at most this many bytes travels in its signal's message */
#define PROXY_IDLE_MS 1000
#define PROXY_IDLE_POLL_MS 10
#define PROXY_WATCH_MS 20              /* links to the PEs' nodes checked this often */
#define TURN_BYTES (4ull << 20)        /* a ring's share of one loop turn: bytes of its batches, */
#define TURN_ENTRIES 256               /* and requests; then the next turn (the loop serves its sockets between) */

struct target {                        /* another PE's heap, from its packed Handle */
	int state;                     /* 0 not yet read, 1 remote, 2 this node, -1 unusable */
	char node[128];
	uint64_t epoch, region, size;
	uint32_t gen;
	uint8_t secret[REGION_SECRET_BYTES];
};

enum { PH_FREE, PH_RUN, PH_DONE };

struct ppe;
struct batch {                         /* requests to one PE that travel together */
	struct ppe *pp;
	struct mori_shmem_preq b[PROXY_BATCH];
	int nb, phase, code;
	int nops;                      /* ops of its AMO message */
	int sig_sent;                  /* its transfer carries its signal (peer_xfer_signals) */
	uint64_t xfer;                 /* its transfer, 0 none */
	uint64_t t0;                   /* started (mori_now_us), for the debug log */
};

struct ppe {
	struct list link;
	uint64_t id;                   /* the PE at group.c */
	int rank, n;
	struct heap_ctrl *ctrl;        /* NULL once gone */
	struct region *heap;
	uint64_t next, done;           /* the next request to read; requests completed */
	struct batch q[PROXY_INFLIGHT]; /* in flight, oldest at q[head]: `done` moves over them in order */
	int head, nq, gone, held;      /* held: callbacks still to come (xfer, AMO message) */
	uint64_t amo_seq;
	struct target *t;              /* [n] */
	int *watch, nwatch;            /* one rank per other node of its group (watch_nodes); nwatch -1: not yet */
	uint64_t *wdown;               /* [nwatch]: that link's retry_at_us when the list was made */
	uint64_t served, failed;
};

struct dedup {
	uint64_t epoch, origin, seq;
	uint32_t n;
	uint64_t old[PROXY_BATCH + 1];
};

static struct {
	struct morid *d;
	int on;
	struct list pes;
	uv_timer_t timer;
	uv_idle_t idle;
	uint64_t active_us, watch_us;
	int slow;                      /* the timer ticks every PROXY_IDLE_POLL_MS */
	struct dedup *dd;              /* [DEDUP_SLOTS], the target side */
} X;

static void kick(void);
static uint64_t batch_bytes(const struct batch *bt);

static void on_idle(uv_idle_t *h);
static void on_timer(uv_timer_t *h);

/* ---- checking a request ---- */

static int in_heap(uint64_t size, uint64_t off, uint64_t len) { return off <= size && len <= size - off; }

static int amo_ok(uint32_t amo, uint32_t width, uint64_t off, uint64_t size)
{
	uint32_t code = amo & ~(uint32_t)MORI_SHMEM_AMO_FETCH;
	return (amo & ~0xffu) == 0 && code >= MORI_SHMEM_AMO_SET && code <= MORI_SHMEM_AMO_CSWAP &&
	       (width == 4 || width == 8) && off % width == 0 && in_heap(size, off, width);
}

/* 0, or the code the request completes with (nothing of it is done). */
static int check(const struct ppe *pp, const struct mori_shmem_preq *q)
{
	uint64_t hs = pp->heap ? pp->heap->size : 0;
	if (q->op == MORI_SHMEM_OP_QUIET || q->op == MORI_SHMEM_OP_FENCE)
		return 0;
	if (q->pe < 0 || q->pe >= pp->n)
		return MORI_EINVAL;
	switch (q->op) {
	case MORI_SHMEM_OP_PUT_SIGNAL:
		if ((q->amo != MORI_SHMEM_SIGNAL_SET && q->amo != MORI_SHMEM_SIGNAL_ADD) || !amo_ok(MORI_SHMEM_AMO_SET, 8, q->sig, hs))
			return MORI_EINVAL;
		/* fall through */
	case MORI_SHMEM_OP_PUT:
	case MORI_SHMEM_OP_GET:
		return in_heap(hs, q->dst, q->len) && in_heap(hs, q->src, q->len) && q->len <= PROXY_BATCH_BYTES
			       ? 0 : MORI_ERANGE;
	case MORI_SHMEM_OP_AMO:
		if (!amo_ok(q->amo, q->width, q->dst, hs))
			return MORI_EINVAL;
		return !(q->amo & MORI_SHMEM_AMO_FETCH) || amo_ok(MORI_SHMEM_AMO_SET, 8, q->src, hs) ? 0 : MORI_ERANGE;
	default:
		return MORI_EPROTO;
	}
}

/* ---- the ring ---- */

/* Request seq when it is published: copied out (then the writer may scribble as it likes). */
static int peek(const struct ppe *pp, uint64_t seq, struct mori_shmem_preq *q)
{
	struct mori_shmem_ctrl *c = pp->ctrl->page;
	struct mori_shmem_preq *slot = (struct mori_shmem_preq *)((char *)c + MORI_SHMEM_CTRL_BYTES) +
				       (seq & (pp->ctrl->entries - 1));
	if (__atomic_load_n(&slot->ready, __ATOMIC_ACQUIRE) != (uint32_t)(seq + 1))
		return 0;
	memcpy(q, (const void *)slot, sizeof(*q));
	return 1;
}

/* k requests completed (code: the first failure among them, sticky in `error`). */
static void finish(struct ppe *pp, int k, int code)
{
	if (pp->gone)
		return;
	struct mori_shmem_ctrl *c = pp->ctrl->page;
	if (code) {
		pp->failed += (uint64_t)k;
		if (!c->error)
			c->error = code;
	}
	pp->served += (uint64_t)k;
	pp->done += (uint64_t)k;
	__atomic_store_n(&c->done, pp->done, __ATOMIC_RELEASE); /* after what the requests wrote */
}

/* Errors that mean the target's node (or heap) is gone. */
static int dead_code(int code)
{
	return code == MORI_ECONN || code == MORI_ESTALE || code == MORI_EUNREACH || code == MORI_EPEERDEAD
		       ? MORI_EPEERDEAD : code;
}

static struct target *target(struct ppe *pp, int rank);

/* PE rank of pp's group is gone (a batch to it failed so): every PE served here whose rank-th
 * PE is that heap (the same group) has its waits aborted now, naming it. Else the first of them
 * to give up on its ring could leave the group first, and the others would see that (TEARDOWN)
 * as the reason rather than the dead PE; the first reason sticks in the abort word. */
static void peer_dead(struct ppe *pp, int rank)
{
	heap_ctrl_abort(pp->ctrl, MORI_SHMEM_ABORT_PEER_DEAD, rank); /* its waits end too */
	const struct target *t = &pp->t[rank];
	if (t->state != 1)
		return; /* a PE of this node: group.c aborts the group when it goes */
	list_each(it, &X.pes) {
		struct ppe *o = list_entry(it, struct ppe, link);
		if (o == pp || o->gone || rank >= o->n)
			continue;
		const struct target *u = target(o, rank);
		if (u->state == 1 && u->epoch == t->epoch && u->region == t->region && !strcmp(u->node, t->node))
			heap_ctrl_abort(o->ctrl, MORI_SHMEM_ABORT_PEER_DEAD, rank);
	}
}

/* bt completed (code: its first failure); `done` moves over the oldest completed batches. */
static void batch_end(struct batch *bt, int code, int rank)
{
	struct ppe *pp = bt->pp;
	if (code == MORI_EPEERDEAD && !pp->gone)
		peer_dead(pp, rank);
	/* where a ring's time goes (morid --log-level debug): each batch's start and duration */
	mlog_debug("shmem", "proxy of PE %d: batch to PE %d (op %u, %d requests, %llu bytes) started at %llu us, took %llu us%s",
		   pp->rank, bt->b[0].pe, bt->b[bt->nb - 1].op, bt->nb, (unsigned long long)batch_bytes(bt),
		   (unsigned long long)bt->t0, (unsigned long long)(mori_now_us() - bt->t0), code ? ", failed" : "");
	bt->code = code;
	bt->phase = PH_DONE;
	bt->xfer = 0;
	while (pp->nq && pp->q[pp->head].phase == PH_DONE) {
		struct batch *o = &pp->q[pp->head];
		finish(pp, o->nb, o->code);
		o->phase = PH_FREE;
		pp->head = (pp->head + 1) % PROXY_INFLIGHT;
		pp->nq--;
	}
	kick();
}

/* Where PE rank's heap is (read from its packed Handle once). */
static struct target *target(struct ppe *pp, int rank)
{
	struct target *t = &pp->t[rank];
	if (t->state)
		return t;
	const char *node;
	const uint8_t *blob;
	size_t len;
	struct region *g;
	t->state = -1;
	if (group_peer(pp->id, rank, &node, &blob, &len, &g) != MORI_OK)
		return t;
	if (!node) {
		t->state = 2;
		return t;
	}
	Mori__Handle *h = blob ? mori__handle__unpack(NULL, len, blob) : NULL;
	if (h && h->secret.len == REGION_SECRET_BYTES && h->region_id && snprintf(t->node, sizeof(t->node), "%s", node) <
											 (int)sizeof(t->node)) {
		t->epoch = h->epoch;
		t->region = h->region_id;
		t->gen = h->generation;
		t->size = h->size;
		memcpy(t->secret, h->secret.data, sizeof(t->secret));
		t->state = 1;
	}
	if (h)
		mori__handle__free_unpacked(h, NULL);
	return t;
}

/* ---- atomics on a heap morid reaches (both sides use it) ---- */

static uint64_t amo_calc(uint32_t code, uint64_t old, uint64_t v, uint64_t cmp)
{
	switch (code) {
	case MORI_SHMEM_AMO_ADD: return old + v;
	case MORI_SHMEM_AMO_INC: return old + 1;
	case MORI_SHMEM_AMO_AND: return old & v;
	case MORI_SHMEM_AMO_OR: return old | v;
	case MORI_SHMEM_AMO_XOR: return old ^ v;
	case MORI_SHMEM_AMO_CSWAP: return old == cmp ? v : old;
	default: return v; /* SET, SWAP */
	}
}

/* The atomic on g's word at off (checked). Host heaps: a CPU atomic on morid's mapping. Other
 * memory (VRAM): read, compute, write through region_copy: atomic against every other proxy
 * atomic (one loop applies them all), not against a kernel's own atomics on that word. */
static int amo_apply(struct region *g, uint32_t amo, uint32_t width, uint64_t off, uint64_t v, uint64_t cmp,
		     uint64_t *old)
{
	uint32_t code = amo & ~(uint32_t)MORI_SHMEM_AMO_FETCH;
	char why[200];
	int rc = region_reach(g, why, sizeof(why));
	if (rc)
		return rc;
	uint8_t *m = region_map(g);
	if (width == 4) {
		v = (uint32_t)v;
		cmp = (uint32_t)cmp;
	}
	if (m && width == 8) {
		uint64_t *w = (uint64_t *)(m + off), o = __atomic_load_n(w, __ATOMIC_RELAXED);
		while (!__atomic_compare_exchange_n(w, &o, amo_calc(code, o, v, cmp), 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
			;
		*old = o;
		return 0;
	}
	if (m) {
		uint32_t *w = (uint32_t *)(m + off), o = __atomic_load_n(w, __ATOMIC_RELAXED);
		while (!__atomic_compare_exchange_n(w, &o, (uint32_t)amo_calc(code, o, v, cmp), 0, __ATOMIC_SEQ_CST,
						    __ATOMIC_RELAXED))
			;
		*old = o;
		return 0;
	}
	uint64_t o = 0;
	if ((rc = region_copy(X.d, g, off, &o, width, 0)))
		return rc;
	uint64_t n = amo_calc(code, o, v, cmp);
	*old = o;
	return region_copy(X.d, g, off, &n, width, 1);
}

/* region_copy after region_reach (a memfd is mapped on first use). */
static int reach_copy(struct region *g, uint64_t off, void *buf, uint64_t len, int write)
{
	char why[200];
	int rc = region_reach(g, why, sizeof(why));
	return rc ? rc : region_copy(X.d, g, off, buf, len, write);
}

/* ---- a batch to a PE of this node: copies between the heap regions ---- */

static int local_copy(struct region *to, uint64_t toff, struct region *from, uint64_t foff, uint64_t len)
{
	char why[200];
	int rc;
	if ((rc = region_reach(to, why, sizeof(why))) || (rc = region_reach(from, why, sizeof(why))))
		return rc;
	uint8_t *a = region_map(to), *b = region_map(from);
	if (a && b) {
		memmove(a + toff, b + foff, len);
		return 0;
	}
	static uint8_t bounce[LOCAL_BOUNCE];
	for (uint64_t k = 0; k < len && !rc; k += LOCAL_BOUNCE) {
		uint64_t n = len - k < LOCAL_BOUNCE ? len - k : LOCAL_BOUNCE;
		if (!(rc = region_copy(X.d, from, foff + k, bounce, n, 0)))
			rc = region_copy(X.d, to, toff + k, bounce, n, 1);
	}
	return rc;
}

static int local_one(struct ppe *pp, struct region *them, const struct mori_shmem_preq *q)
{
	uint64_t old = 0;
	int rc = 0;
	switch (q->op) {
	case MORI_SHMEM_OP_PUT:
	case MORI_SHMEM_OP_PUT_SIGNAL:
		if (q->len)
			rc = local_copy(them, q->dst, pp->heap, q->src, q->len);
		if (!rc && q->op == MORI_SHMEM_OP_PUT_SIGNAL)
			rc = amo_apply(them, q->amo == MORI_SHMEM_SIGNAL_SET ? MORI_SHMEM_AMO_SET : MORI_SHMEM_AMO_ADD, 8,
				       q->sig, q->value, 0, &old);
		return rc;
	case MORI_SHMEM_OP_GET:
		return q->len ? local_copy(pp->heap, q->dst, them, q->src, q->len) : 0;
	default: /* AMO */
		rc = amo_apply(them, q->amo, q->width, q->dst, q->value, q->cmp, &old);
		if (!rc && (q->amo & MORI_SHMEM_AMO_FETCH))
			rc = reach_copy(pp->heap, q->src, &old, 8, 1);
		return rc;
	}
}

/* ---- a batch to another node ---- */

static void xfer_done(void *arg, int code, const char *msg);
enum { AMO_BATCH, AMO_SIGNAL, AMO_INLINE }; /* the batch's atomics; a put+signal's signal; its puts too */
static void send_amo(struct batch *bt, const struct target *t, int mode);

static void start_xfer(struct batch *bt, const struct target *t)
{
	struct ppe *pp = bt->pp;
	int read = bt->b[0].op == MORI_SHMEM_OP_GET, k = 0;
	mori_desc *ds = malloc(sizeof(*ds) * (size_t)bt->nb);
	if (!ds) {
		batch_end(bt, MORI_ENOMEM, bt->b[0].pe);
		return;
	}
	for (int i = 0; i < bt->nb; i++) {
		const struct mori_shmem_preq *q = &bt->b[i];
		if (!q->len)
			continue;
		ds[k].local_offset = read ? q->dst : q->src;
		ds[k].remote_offset = read ? q->src : q->dst;
		ds[k].length = q->len;
		k++;
	}
	if (!k) { /* nothing to move: a signal alone, or empty puts */
		free(ds);
		if (bt->b[bt->nb - 1].op == MORI_SHMEM_OP_PUT_SIGNAL)
			send_amo(bt, t, AMO_SIGNAL);
		else
			batch_end(bt, 0, 0);
		return;
	}
	struct peer_xfer_args a = {.local = pp->heap, .node = t->node, .epoch = t->epoch, .region = t->region,
				   .gen = t->gen, .secret = t->secret, .read = read, .descs = ds, .n = (uint32_t)k,
				   .timeout_ms = PROXY_TIMEOUT_MS, .done = xfer_done, .arg = bt};
	const struct mori_shmem_preq *last = &bt->b[bt->nb - 1];
	bt->sig_sent = last->op == MORI_SHMEM_OP_PUT_SIGNAL && peer_xfer_signals(X.d, t->node, pp->heap);
	if (bt->sig_sent) { /* one trip: the target applies it once all of the data landed */
		a.sig = last->amo == MORI_SHMEM_SIGNAL_SET ? 1 : 2;
		a.sig_off = last->sig;
		a.sig_value = last->value;
	}
	pp->held++;
	int rc = peer_xfer_start(X.d, &a, &bt->xfer);
	if (rc) {
		pp->held--;
		batch_end(bt, rc, bt->b[0].pe);
	}
}

static void ppe_release(struct ppe *pp)
{
	if (--pp->held == 0 && pp->gone) {
		free(pp->t);
		free(pp->watch);
		free(pp->wdown);
		free(pp);
	}
}

static void xfer_done(void *arg, int code, const char *msg)
{
	struct batch *bt = arg;
	struct ppe *pp = bt->pp;
	bt->xfer = 0;
	if (!pp->gone) {
		int rank = bt->b[0].pe;
		if (code) {
			mlog_info("shmem", "proxy of PE %d: %s of %d requests to PE %d failed: %s", pp->rank,
				  bt->b[0].op == MORI_SHMEM_OP_GET ? "get" : "put", bt->nb, rank, msg);
			batch_end(bt, dead_code(code), rank);
		} else if (bt->b[bt->nb - 1].op == MORI_SHMEM_OP_PUT_SIGNAL && !bt->sig_sent) {
			/* the fallback where the transport carries no signal (RDMA): the data is there,
			 * now its signal, a second round trip */
			send_amo(bt, &pp->t[rank], AMO_SIGNAL);
		} else {
			batch_end(bt, 0, rank);
		}
	}
	ppe_release(pp);
}

static void amo_done(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	struct batch *bt = q->arg;
	struct ppe *pp = bt->pp;
	if (!pp->gone) {
		int rank = bt->b[0].pe, sig = bt->b[bt->nb - 1].op == MORI_SHMEM_OP_PUT_SIGNAL;
		const Mori__PeerShmemAmoReply *r = !code && rep->body_case == MORI__REPLY__BODY_PEER_SHMEM_AMO
							   ? rep->peer_shmem_amo : NULL;
		if (!code && (!r || r->n_old != (size_t)bt->nops))
			code = MORI_EPROTO;
		for (int i = 0; !code && !sig && i < bt->nb; i++)
			if (bt->b[i].amo & MORI_SHMEM_AMO_FETCH)
				code = reach_copy(pp->heap, bt->b[i].src, &r->old[i], 8, 1);
		if (code)
			mlog_info("shmem", "proxy of PE %d: %d atomics at PE %d failed: %s", pp->rank, bt->nops, rank,
				  msg ? msg : mori_strerror(code));
		batch_end(bt, dead_code(code), rank);
	}
	ppe_release(pp);
}

/* A put+signal batch's puts as inline ops (their bytes read from this PE's heap into buf), then its
 * signal. The number of ops, or -1 with the code in *rc. */
static int inline_ops(struct batch *bt, Mori__ShmemAmo *ops, uint8_t *buf, int *rc)
{
	struct ppe *pp = bt->pp;
	int n = 0;
	uint64_t o = 0;
	for (int i = 0; i < bt->nb; i++) {
		const struct mori_shmem_preq *q = &bt->b[i];
		if (!q->len)
			continue;
		if ((*rc = reach_copy(pp->heap, q->src, buf + o, q->len, 0)))
			return -1;
		mori__shmem_amo__init(&ops[n]);
		ops[n].offset = q->dst;
		ops[n].data.data = buf + o;
		ops[n].data.len = q->len;
		o += q->len;
		n++;
	}
	return n;
}

/* The batch's atomics (mode AMO_BATCH), the signal of its last request (AMO_SIGNAL: a
 * put+signal whose data landed), or a put+signal's data and signal together (AMO_INLINE). */
static void send_amo(struct batch *bt, const struct target *t, int mode)
{
	struct ppe *pp = bt->pp;
	static uint8_t buf[PROXY_INLINE]; /* packed before send_amo returns (one loop) */
	Mori__ShmemAmo ops[PROXY_BATCH + 1], *opp[PROXY_BATCH + 1];
	int n = 0, rc = 0;
	if (mode == AMO_INLINE && (n = inline_ops(bt, ops, buf, &rc)) < 0) {
		batch_end(bt, rc, bt->b[0].pe);
		return;
	}
	for (int i = 0; i < (mode == AMO_BATCH ? bt->nb : 1); i++, n++) {
		const struct mori_shmem_preq *q = &bt->b[mode == AMO_BATCH ? i : bt->nb - 1];
		mori__shmem_amo__init(&ops[n]);
		if (mode != AMO_BATCH) {
			ops[n].amo = q->amo == MORI_SHMEM_SIGNAL_SET ? MORI_SHMEM_AMO_SET : MORI_SHMEM_AMO_ADD;
			ops[n].width = 8;
			ops[n].offset = q->sig;
		} else {
			ops[n].amo = q->amo;
			ops[n].width = q->width;
			ops[n].offset = q->dst;
			ops[n].cmp = q->cmp;
		}
		ops[n].value = q->value;
	}
	for (int i = 0; i < n; i++)
		opp[i] = &ops[i];
	bt->nops = n;
	Mori__PeerShmemAmo m = MORI__PEER_SHMEM_AMO__INIT;
	m.epoch = t->epoch;
	m.region_id = t->region;
	m.generation = t->gen;
	m.secret.data = (uint8_t *)t->secret;
	m.secret.len = sizeof(t->secret);
	m.origin_epoch = X.d->epoch;
	m.origin = pp->id;
	m.seq = ++pp->amo_seq;
	m.n_ops = (size_t)n;
	m.ops = opp;
	Mori__Request req = MORI__REQUEST__INIT;
	req.body_case = MORI__REQUEST__BODY_PEER_SHMEM_AMO;
	req.peer_shmem_amo = &m;
	struct peer *p = X.d->peers ? peer_get(X.d->peers, t->node, 1) : NULL;
	pp->held++;
	if (!p || !peer_rpc_fast(p, &req, PROXY_TIMEOUT_MS, amo_done, bt)) {
		pp->held--;
		batch_end(bt, p ? MORI_ENOMEM : MORI_ENOTSUP, bt->b[0].pe);
		return;
	}
	peer_use(p);
}

/* ---- serving a ring ---- */

static int same_class(const struct mori_shmem_preq *a, const struct mori_shmem_preq *b)
{
	if (a->pe != b->pe)
		return 0;
	if (a->op == MORI_SHMEM_OP_PUT)
		return b->op == MORI_SHMEM_OP_PUT || b->op == MORI_SHMEM_OP_PUT_SIGNAL;
	return (a->op == MORI_SHMEM_OP_GET || a->op == MORI_SHMEM_OP_AMO) && b->op == a->op;
}

/* The batch starting with q (read and checked): more of its kind as far as they are published.
 * plain: puts only (earlier puts to that PE are still in flight, and a signal must come after
 * every one of them: a put+signal starts a batch of its own once they are done). */
static void gather(struct batch *bt, const struct mori_shmem_preq *q, int plain)
{
	struct ppe *pp = bt->pp;
	uint64_t bytes = q->op == MORI_SHMEM_OP_AMO ? 0 : q->len;
	bt->b[0] = *q;
	bt->nb = 1;
	pp->next++;
	while (bt->nb < PROXY_BATCH && bt->b[bt->nb - 1].op != MORI_SHMEM_OP_PUT_SIGNAL) {
		struct mori_shmem_preq n;
		if (!peek(pp, pp->next, &n) || !same_class(q, &n) || check(pp, &n) || (plain && n.op != q->op) ||
		    (n.op != MORI_SHMEM_OP_AMO && bytes + n.len > PROXY_BATCH_BYTES))
			break;
		bytes += n.op == MORI_SHMEM_OP_AMO ? 0 : n.len;
		bt->b[bt->nb++] = n;
		pp->next++;
	}
}

static uint64_t batch_bytes(const struct batch *bt)
{
	uint64_t b = 0;
	for (int i = 0; i < bt->nb; i++)
		b += bt->b[i].len;
	return b;
}

static void run_batch(struct batch *bt)
{
	struct ppe *pp = bt->pp;
	int rank = bt->b[0].pe;
	struct target *t = target(pp, rank);
	if (t->state == 2) { /* this node: at once */
		const char *node;
		const uint8_t *blob;
		size_t len;
		struct region *them = NULL;
		int rc = group_peer(pp->id, rank, &node, &blob, &len, &them) || !them ? MORI_EPEERDEAD : 0;
		for (int i = 0; i < bt->nb && !rc; i++)
			rc = local_one(pp, them, &bt->b[i]);
		batch_end(bt, rc, rank);
	} else if (t->state != 1) {
		batch_end(bt, MORI_EPEERDEAD, rank);
	} else if (bt->b[0].op == MORI_SHMEM_OP_AMO) {
		send_amo(bt, t, AMO_BATCH);
	} else if (bt->b[bt->nb - 1].op == MORI_SHMEM_OP_PUT_SIGNAL && batch_bytes(bt) <= PROXY_INLINE) {
		send_amo(bt, t, AMO_INLINE); /* one round trip, not a transfer and then a message */
	} else {
		start_xfer(bt, t);
	}
}

/* Batches to PE pe in flight: 0 none, 1 only put batches (each may end with a put+signal), 2 others too. */
static int busy_with(const struct ppe *pp, int pe)
{
	int busy = 0;
	for (int i = 0; i < pp->nq; i++) {
		const struct batch *bt = &pp->q[(pp->head + i) % PROXY_INFLIGHT];
		if (bt->phase == PH_RUN && bt->b[0].pe == pe)
			busy = bt->b[0].op == MORI_SHMEM_OP_PUT && busy < 2 ? 1 : 2;
	}
	return busy;
}

/* Serve what pp's ring holds: batches to different PEs go at once (up to PROXY_INFLIGHT), one
 * PE's in order; a quiet, a fence or a refused request waits for every batch before it. At most
 * TURN_BYTES / TURN_ENTRIES a call (a batch that starts under them runs whole): a ring kept full
 * of local puts, copied right here, would otherwise hold the loop for good. 1 when a request was
 * read. */
static int pump(struct ppe *pp)
{
	int seen = 0;
	uint64_t bytes = 0, start = pp->next;
	struct mori_shmem_preq q;
	while (!pp->gone && pp->nq < PROXY_INFLIGHT && bytes < TURN_BYTES && pp->next - start < TURN_ENTRIES &&
	       peek(pp, pp->next, &q)) {
		seen = 1;
		int rc = check(pp, &q);
		if (rc || q.op == MORI_SHMEM_OP_QUIET || q.op == MORI_SHMEM_OP_FENCE) {
			if (pp->nq)
				break; /* completes after everything before it */
			if (rc)
				mlog_ratelimited(MLOG_INFO, "shmem", "proxy of PE %d: request %llu (op %u, PE %d) refused: %s",
						 pp->rank, (unsigned long long)pp->next, q.op, q.pe, mori_strerror(rc));
			pp->next++;
			finish(pp, 1, rc);
			continue;
		}
		/* a PE's batches in order, except plain puts (unordered until a fence), which overlap */
		int busy = busy_with(pp, q.pe);
		if (busy && (busy == 2 || q.op != MORI_SHMEM_OP_PUT))
			break;
		struct batch *bt = &pp->q[(pp->head + pp->nq) % PROXY_INFLIGHT];
		pp->nq++;
		bt->pp = pp;
		bt->phase = PH_RUN;
		bt->code = 0;
		bt->xfer = 0;
		bt->sig_sent = 0;
		gather(bt, &q, busy);
		bt->t0 = mori_now_us();
		bytes += batch_bytes(bt);
		run_batch(bt); /* may end it at once */
	}
	return seen;
}

static int poll_all(void)
{
	int seen = 0;
	list_each(it, &X.pes)
		seen |= pump(list_entry(it, struct ppe, link));
	if (X.pes.next != &X.pes && X.pes.next->next != &X.pes) { /* round robin: the first ring goes last next turn */
		struct list *first = X.pes.next;
		list_del(first);
		list_add(&X.pes, first);
	}
	uint64_t now = mori_now_us();
	if (seen)
		X.active_us = now;
	if (seen && X.slow) {
		X.slow = 0;
		uv_timer_start(&X.timer, on_timer, PROXY_POLL_MS, PROXY_POLL_MS);
	}
	if (now - X.active_us < (uint64_t)X.d->cfg.shmem_proxy_spin_us) {
		if (!uv_is_active((uv_handle_t *)&X.idle))
			uv_idle_start(&X.idle, on_idle);
	} else if (uv_is_active((uv_handle_t *)&X.idle)) {
		uv_idle_stop(&X.idle);
	}
	return seen;
}

/* A node holding PEs of a served PE's group whose link went down: those PEs are gone for it (a
 * morid that restarts has a new epoch, their heaps with it), so its waits end (the abort word),
 * also the waits that post nothing, such as wait_until on a word only they would set. Links to
 * those nodes are kept connected for it (an idle link would not notice its peer die). */
static void watch_list(struct ppe *pp)
{
	pp->nwatch = 0;
	for (int r = 0; r < pp->n; r++) {
		const struct target *t = target(pp, r);
		int seen = t->state != 1;
		for (int i = 0; i < pp->nwatch && !seen; i++)
			seen = !strcmp(pp->t[pp->watch[i]].node, t->node);
		if (!seen) {
			struct peer *p = X.d->peers ? peer_get(X.d->peers, t->node, 1) : NULL;
			pp->wdown[pp->nwatch] = p ? p->retry_at_us : 0;
			pp->watch[pp->nwatch++] = r;
		}
	}
}

static void watch_nodes(void)
{
	struct peers *P = X.d->peers;
	if (!P)
		return;
	list_each(it, &X.pes) {
		struct ppe *pp = list_entry(it, struct ppe, link);
		if (pp->ctrl->page->abort)
			continue;
		if (pp->nwatch < 0)
			watch_list(pp);
		for (int i = 0; i < pp->nwatch; i++) {
			int r = pp->watch[i];
			struct target *t = target(pp, r);
			struct peer *p = t->state == 1 ? peer_get(P, t->node, 1) : NULL;
			/* down now, or down since the list was made: peer_down sets retry_at_us anew each time,
			 * and a link is down only until its first redial (100 ms), which a loaded loop's
			 * looks can miss, leaving it "connecting" for the next seconds */
			int down = p && (p->state == PS_DOWN || p->retry_at_us != pp->wdown[i]);
			if (p && p->state == PS_IDLE)
				peer_use(p); /* its data streams up, even with nothing to carry: a node that dies breaks them */
			else if (down) {
				mlog_notice("shmem", "PE %d: the link to %s (PE %d) is down: its waits are aborted", pp->rank,
					    t->node, r);
				heap_ctrl_abort(pp->ctrl, MORI_SHMEM_ABORT_PEER_DEAD, r);
				break;
			}
		}
	}
}

/* The spin: a loop turn that found nothing gives the CPU to whoever waits for it (the nng and
 * GPU threads, other daemons, the PEs themselves on a small machine) and comes straight back when
 * nobody does. Without the yield, two morids spinning on a small machine make a put+signal hop take
 * milliseconds instead of microseconds (the threads that carry the bytes wait for a time
 * slice); mori-bench shmem --proxy measures it (docs/benchmarks.md). */
static void on_idle(uv_idle_t *h)
{
	(void)h;
	if (!poll_all())
		sched_yield();
}
static void on_timer(uv_timer_t *h)
{
	(void)h;
	poll_all();
	uint64_t now = mori_now_us();
	if (now - X.watch_us >= PROXY_WATCH_MS * 1000ull) {
		X.watch_us = now;
		watch_nodes();
	}
	if (!X.slow && now - X.active_us > PROXY_IDLE_MS * 1000ull) {
		X.slow = 1;
		uv_timer_start(&X.timer, on_timer, PROXY_IDLE_POLL_MS, PROXY_IDLE_POLL_MS);
	}
}

/* Work may be waiting (a batch ended): serve on the next loop turn. */
static void kick(void)
{
	X.active_us = mori_now_us();
	if (X.on && !uv_is_active((uv_handle_t *)&X.idle))
		uv_idle_start(&X.idle, on_idle);
}

/* ---- PEs come and go (group.c's hooks) ---- */

static void pe_ready(void *arg, uint64_t id)
{
	(void)arg;
	int rank, n;
	struct heap_ctrl *k;
	struct region *heap;
	if (group_pe(id, &rank, &n, &k, &heap) != MORI_OK || !k->page || !k->entries || (k->entries & (k->entries - 1)))
		return;
	struct ppe *pp = calloc(1, sizeof(*pp));
	if (pp) {
		pp->t = calloc((size_t)n, sizeof(*pp->t));
		pp->watch = calloc((size_t)n, sizeof(*pp->watch));
		pp->wdown = calloc((size_t)n, sizeof(*pp->wdown));
		pp->nwatch = -1;
	}
	if (!pp || !pp->t || !pp->watch || !pp->wdown) {
		if (pp) {
			free(pp->t);
			free(pp->watch);
			free(pp->wdown);
		}
		free(pp);
		heap_ctrl_abort(k, MORI_SHMEM_ABORT_TEARDOWN, -1); /* nobody would serve its ring */
		mlog_warn("shmem", "PE %d: out of memory for its proxy; its group is aborted", rank);
		return;
	}
	pp->id = id;
	pp->rank = rank;
	pp->n = n;
	pp->ctrl = k;
	pp->heap = heap;
	pp->done = pp->next = k->page->done;
	pp->held = 1; /* the list's */
	list_add(&X.pes, &pp->link);
	X.active_us = mori_now_us(); /* a group that just formed polls fast a while: its first requests come soon */
	if (!uv_is_active((uv_handle_t *)&X.timer) || X.slow) {
		X.slow = 0;
		uv_timer_start(&X.timer, on_timer, PROXY_POLL_MS, PROXY_POLL_MS);
	}
}

static void ppe_drop(struct ppe *pp)
{
	pp->gone = 1; /* from here nothing touches its control page or heap */
	for (int i = 0; i < PROXY_INFLIGHT; i++)
		if (pp->q[i].phase == PH_RUN && pp->q[i].xfer)
			peer_xfer_cancel(X.d, pp->q[i].xfer); /* its callback sees gone */
	pp->ctrl = NULL;
	pp->heap = NULL;
	list_del(&pp->link);
	ppe_release(pp);
	if (X.pes.next == &X.pes)
		uv_timer_stop(&X.timer);
}

static void pe_gone(void *arg, uint64_t id)
{
	(void)arg;
	list_each(it, &X.pes) {
		struct ppe *pp = list_entry(it, struct ppe, link);
		if (pp->id == id) {
			ppe_drop(pp);
			return;
		}
	}
}

/* ---- the target side: PeerShmemAmo from another daemon ---- */

static int amo_serve_checked(const Mori__PeerShmemAmo *m, struct region *g, uint64_t *old)
{
	for (size_t i = 0; i < m->n_ops; i++) {
		const Mori__ShmemAmo *o = m->ops[i];
		if (o->amo == 0 ? !o->data.len || o->data.len > PROXY_INLINE || !in_heap(g->size, o->offset, o->data.len)
				: !amo_ok(o->amo, o->width, o->offset, g->size))
			return MORI_EINVAL; /* nothing applied */
	}
	for (size_t i = 0; i < m->n_ops; i++) {
		const Mori__ShmemAmo *o = m->ops[i];
		old[i] = 0;
		int rc = o->amo == 0 ? reach_copy(g, o->offset, o->data.data, o->data.len, 1)
				     : amo_apply(g, o->amo, o->width, o->offset, o->value, o->cmp, &old[i]);
		if (rc)
			return rc;
	}
	return 0;
}

static int serve_amo(struct peers *P, const Mori__Request *req, const char *from, Mori__Reply *rep, struct rctx *r)
{
	(void)from;
	if (req->body_case != MORI__REQUEST__BODY_PEER_SHMEM_AMO)
		return 0;
	struct morid *d = P->d;
	const Mori__PeerShmemAmo *m = req->peer_shmem_amo;
	struct region *g = m->epoch == d->epoch ? region_find(d, m->region_id) : NULL;
	if (!g || g->dead || !g->owner || g->gen != m->generation || !region_secret_ok(g, m->secret.data, m->secret.len)) {
		reply_error(rep, MORI_ESTALE, "that heap is no longer registered at %s", P->self);
		return 1;
	}
	if (m->n_ops == 0 || m->n_ops > PROXY_BATCH + 1) {
		reply_error(rep, MORI_EPROTO, "%zu atomics in one message (1..%d)", m->n_ops, PROXY_BATCH + 1);
		return 1;
	}
	struct dedup *s = &X.dd[hmix(m->origin_epoch ^ hmix(m->origin)) % DEDUP_SLOTS];
	int again = s->epoch == m->origin_epoch && s->origin == m->origin && s->seq == m->seq && s->n == m->n_ops;
	if (!again) {
		int rc = amo_serve_checked(m, g, s->old);
		if (rc) {
			s->epoch = 0;
			reply_error(rep, rc, "atomics on the heap at %s: %s", P->self, mori_strerror(rc));
			return 1;
		}
		s->epoch = m->origin_epoch;
		s->origin = m->origin;
		s->seq = m->seq;
		s->n = (uint32_t)m->n_ops;
	}
	Mori__PeerShmemAmoReply *ar = rctx_alloc(r, sizeof(*ar));
	uint64_t *old = rctx_alloc(r, sizeof(uint64_t) * m->n_ops);
	if (!ar || !old) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return 1;
	}
	mori__peer_shmem_amo_reply__init(ar);
	memcpy(old, s->old, sizeof(uint64_t) * m->n_ops);
	ar->n_old = m->n_ops;
	ar->old = old;
	rep->body_case = MORI__REPLY__BODY_PEER_SHMEM_AMO;
	rep->peer_shmem_amo = ar;
	return 1;
}

/* A transfer's signal after its data (peers_signal_apply; the TCP target checked the word). */
static int signal_apply(struct region *g, int add, uint64_t off, uint64_t value)
{
	uint64_t old;
	return amo_apply(g, add ? MORI_SHMEM_AMO_ADD : MORI_SHMEM_AMO_SET, 8, off, value, 0, &old);
}

/* ---- start, stop ---- */

int shmem_proxy_start(struct morid *d)
{
	X.d = d;
	LIST_INIT(&X.pes);
	if (!(X.dd = calloc(DEDUP_SLOTS, sizeof(*X.dd))))
		return -1;
	uv_timer_init(d->loop, &X.timer);
	uv_idle_init(d->loop, &X.idle);
	X.on = 1;
	struct group_hooks h = {.pe_ready = pe_ready, .pe_gone = pe_gone, .arg = NULL};
	group_set_hooks(&h);
	peers_shmem_serve = serve_amo;
	peers_signal_apply = signal_apply;
	return 0;
}

void shmem_proxy_stop(struct morid *d)
{
	(void)d;
	if (!X.on)
		return;
	group_set_hooks(NULL);
	peers_shmem_serve = NULL;
	peers_signal_apply = NULL;
	list_each(it, &X.pes)
		ppe_drop(list_entry(it, struct ppe, link));
	X.on = 0;
	uv_close((uv_handle_t *)&X.timer, NULL);
	uv_close((uv_handle_t *)&X.idle, NULL);
	free(X.dd);
	X.dd = NULL;
}
