/* UMBP across nodes, the asker's side: gets of values another node's daemon holds (docs/umbp.md,
 * "Across nodes"; the holder's side is kv_serve.c).
 *
 * The asker (the daemon where a client's get missed) sends the holder a PeerKv LEASE for the keys
 * over the authenticated peer link; the holder answers where each value lies (or, for a value it
 * reads back from SSD first, sends READY when it landed). The asker reads the bytes over the
 * transports (peer_xfer_start: TCP streams, RDMA where present, by the transport table) straight
 * into the client's registered region where the item names one, else into a temporary DRAM slot
 * (room made as for a put) that it hands to its client as an ordinary get's lease; then it
 * releases the holder's leases. A batch asks each holder once, holders in parallel; every step
 * has the get's deadline; errors name the peer. Below kv_req.c, above kv_serve.c. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv_cluster.h"
#include "kv/kv_int.h"
#include "kv/kv_remote.h"
#include "kv/kv_remote_int.h"
#include "log.h"
#include "peer/peer.h"
#include "peer/peer_int.h"
#include "region/region.h"

/* ---- the asker: fetches from holders ---- */

/* Region id of g's client with [off, off + cap) inside it, or NULL (not its own, gone, outside). */
static struct region *dest_region(struct kv_remote *R, struct kv_pget *g, uint64_t id, uint64_t off, uint64_t cap)
{
	struct region *lg = g->kc ? region_find(R->d, id) : NULL;
	if (!lg || lg->owner != g->kc->c || off > lg->size || cap > lg->size - off)
		return NULL;
	return lg;
}

struct ritem {
	Mori__KvSlot *sl;
	ProtobufCBinaryData key;  /* the request's bytes (alive in the get's rctx) */
	uint64_t gen;             /* expected (0: any) */
	struct kv_entry *tmp;     /* the local slot it lands in, or NULL: */
	uint64_t dst, dst_off, cap; /* the client's region it lands in (dst non-zero) */
	struct region *lr;        /* where it lands (set once leased), at loff */
	uint64_t loff;
	uint64_t lease, size, roff, rregion;
	uint32_t rgen;
	uint8_t secret[REGION_SECRET_BYTES];
	int rc;
	int pending;              /* leased, being read from the holder's SSD: READY follows */
	int started;              /* in a transfer */
	uint32_t tier;            /* where the holder found it */
};

struct rget {
	struct list link;         /* R->rgets */
	struct kv_remote *R;      /* NULL once the store stopped: the callbacks left only free it */
	struct kv_pget *g;
	uid_t uid;
	char node[128];
	uint64_t epoch, holder_epoch;
	uint64_t deadline_us;
	uint32_t n, xfers;
	uint32_t pending;         /* items waiting for the holder's READY */
	int leased;               /* the lease reply came */
	uint64_t *xids;           /* transfers in flight, for the store's stop */
	uint32_t nx;
	char why[300];
	struct ritem it[];
};

static void rget_step(struct rget *rg);

static uint32_t ms_left(const struct rget *rg)
{
	uint64_t now = mori_now_us();
	return rg->deadline_us > now ? (uint32_t)((rg->deadline_us - now + 999) / 1000) : 1;
}

static void rget_error(struct rget *rg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rget_error(struct rget *rg, const char *fmt, ...)
{
	if (rg->why[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rg->why, sizeof(rg->why), fmt, ap);
	va_end(ap);
}

static void release_done(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	(void)q, (void)p, (void)rep, (void)code, (void)msg; /* the leases expire at the holder otherwise */
}

/* Every item of rg is settled: release the holder's leases, answer the items, free rg. */
static void rget_finish(struct rget *rg)
{
	struct kv_remote *R = rg->R;
	struct peers *P = R ? R->d->peers : NULL;
	uint64_t *leases = calloc(rg->n ? rg->n : 1, sizeof(*leases));
	size_t nl = 0;
	for (uint32_t i = 0; i < rg->n; i++)
		if (rg->it[i].lease && leases)
			leases[nl++] = rg->it[i].lease;
	struct peer *p = nl && P ? peer_get(P, rg->node, 0) : NULL;
	if (p) {
		Mori__PeerKv q = MORI__PEER_KV__INIT;
		Mori__Request req = MORI__REQUEST__INIT;
		q.op = MORI__PEER_KV_OP__PEER_KV_RELEASE;
		q.leases = leases;
		q.n_leases = nl;
		req.body_case = MORI__REQUEST__BODY_PEER_KV;
		req.peer_kv = &q;
		peer_rpc(p, &req, PEER_LOOKUP_TIMEOUT_MS, release_done, NULL);
	}
	free(leases);
	if (R) {
		struct kv_store *st = R->st;
		struct kv_pget *g = rg->g;
		for (uint32_t i = 0; i < rg->n; i++) {
			struct ritem *x = &rg->it[i];
			if (x->rc == MORI_OK && x->dst) {
				x->sl->delivered = 1; /* in the client's region: nothing to lease or copy */
				x->sl->len = x->size;
				R->delivered++;
			} else if (x->rc == MORI_EMSGSIZE && x->dst) {
				x->sl->len = x->size;
			} else if (x->rc == MORI_OK && g->kc) {
				uint64_t id = 0;
				x->rc = kv_temp_lease(st, g->kc, x->tmp, &id);
				if (x->rc == MORI_OK) {
					x->rc = kv_fill_slot(st, g->kc, &g->rep, &g->r, x->sl, x->tmp);
					if (x->rc != MORI_OK)
						kv_release(st, g->kc, id);
					else
						x->sl->id = id;
				}
			}
			if (x->tmp)
				kv_unref(st, x->tmp);
			x->sl->status = x->rc;
			if (x->rc == MORI_OK) {
				x->sl->tier = x->tier ? x->tier : KV_TIER_DRAM;
				x->sl->node = rctx_strdup(&g->r, rg->node);
				R->fetched++;
				R->fetched_bytes += x->size;
			} else if (x->rc == MORI_ENOENT) {
				R->fetch_misses++;
			} else {
				R->fetch_errors++;
			}
		}
		if (rg->why[0])
			kv_first_error(&g->rep, &g->r, rg->why);
		list_del(&rg->link);
		if (--g->waiting == 0)
			kv_pget_done(st, g);
	}
	free(rg->xids);
	free(rg);
}

struct rx {
	struct rget *rg;
	uint32_t *idx, n;
};

static void xfer_done(void *arg, int code, const char *msg)
{
	struct rx *x = arg;
	struct rget *rg = x->rg;
	for (uint32_t i = 0; i < x->n; i++) {
		struct ritem *it = &rg->it[x->idx[i]];
		/* a holder that restarted since its lease: its regions are gone, the bytes with them */
		it->rc = code == MORI_OK ? MORI_OK : code == MORI_ESTALE ? MORI_ENOENT : code;
	}
	if (code != MORI_OK && code != MORI_ESTALE)
		rget_error(rg, "fetch from node %s: %s", rg->node, msg && msg[0] ? msg : mori_strerror(code));
	free(x->idx);
	free(x);
	rg->xfers--;
	rget_step(rg);
}

/* Read items idx[0..n) (same holder region, same local region) in one transfer. */
static void xfer_group(struct rget *rg, struct region *local, uint32_t *idx, uint32_t n)
{
	struct kv_remote *R = rg->R;
	struct rx *x = calloc(1, sizeof(*x));
	mori_desc *descs = calloc(n, sizeof(*descs));
	if (!x || !descs) {
		for (uint32_t i = 0; i < n; i++)
			rg->it[idx[i]].rc = MORI_ENOMEM;
		free(x), free(descs), free(idx);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct ritem *it = &rg->it[idx[i]];
		it->started = 1;
		descs[i].local_offset = it->loff;
		descs[i].remote_offset = it->roff;
		descs[i].length = it->size;
	}
	struct ritem *f = &rg->it[idx[0]];
	*x = (struct rx){rg, idx, n};
	struct peer_xfer_args a = {
		.local = local, .node = rg->node, .epoch = rg->holder_epoch, .region = f->rregion, .gen = f->rgen,
		.secret = f->secret, .read = 1, .descs = descs, .n = n, .timeout_ms = ms_left(rg),
		.done = xfer_done, .arg = x,
	};
	uint64_t id = 0;
	rg->xfers++;
	int rc = peer_xfer_start(R->d, &a, &id); /* takes descs; done may run before it returns */
	if (rc != MORI_OK) {
		rg->xfers--;
		for (uint32_t i = 0; i < n; i++)
			rg->it[idx[i]].rc = rc;
		rget_error(rg, "fetch from node %s: no transport takes it (%s)", rg->node, mori_strerror(rc));
		free(idx);
		free(x);
		return;
	}
	if (rg->xids)
		rg->xids[rg->nx++] = id;
}

/* Where leased item it (ki: the holder's answer) lands: the client's region, or a temporary slot
 * made here; it->rc says what failed. */
static void land(struct rget *rg, struct ritem *it, const Mori__PeerKvItem *ki)
{
	struct kv_remote *R = rg->R;
	char why[300];
	it->lease = ki->lease;
	it->tier = ki->tier ? ki->tier : KV_TIER_DRAM;
	if (ki->secret.len != REGION_SECRET_BYTES || ki->size == 0) {
		it->rc = MORI_EPROTO;
		rget_error(rg, "node %s: a lease with a malformed region", rg->node);
		return;
	}
	if (ki->size > (uint64_t)R->d->cfg.kv_value_max) {
		it->rc = MORI_EMSGSIZE;
		rget_error(rg, "node %s holds a value of %llu bytes, over kv_value_max here", rg->node,
			   (unsigned long long)ki->size);
		return;
	}
	it->size = ki->size;
	it->roff = ki->offset;
	it->rregion = ki->region_id;
	it->rgen = ki->region_gen;
	memcpy(it->secret, ki->secret.data, REGION_SECRET_BYTES);
	if (it->dst) { /* straight into the client's region: no slot here */
		if (ki->size > it->cap) {
			it->rc = MORI_EMSGSIZE; /* the slot's len says how much is needed */
			return;
		}
		if (!(it->lr = dest_region(R, rg->g, it->dst, it->dst_off, it->cap))) {
			it->rc = MORI_ESTALE;
			rget_error(rg, "region %llx was deregistered during a get from node %s", (unsigned long long)it->dst,
				   rg->node);
			return;
		}
		it->loff = it->dst_off;
		return;
	}
	it->rc = kv_temp_new(R->st, rg->uid, it->key.data, it->key.len, it->size, &it->tmp, why, sizeof(why));
	if (it->rc != MORI_OK) {
		it->tmp = NULL;
		rget_error(rg, "no room here for a value of node %s: %s", rg->node, why);
		return;
	}
	if (!(it->lr = kv_slab_region(R, it->tmp->u.ext.slab)))
		it->rc = MORI_ENOMEM;
	else
		it->loff = kv_ext_offset(&it->tmp->u.ext);
}

/* Finish rg once nothing of it is in flight; else, waiting for READY, mind its deadline. */
static void rget_step(struct rget *rg)
{
	if (rg->xfers == 0 && rg->pending == 0)
		rget_finish(rg);
	else if (rg->pending && rg->R)
		kv_remote_arm(rg->R);
}

static uint64_t early_first_ms(struct kv_remote *R);
static void early_expire(struct kv_remote *R, int all);

/* The asker's first deadline (loop ms): a fetch waiting for READY, a kept READY; UINT64_MAX none. */
static uint64_t pending_first_ms(struct kv_remote *R)
{
	uint64_t first = LIST_EMPTY(&R->early) ? UINT64_MAX : early_first_ms(R), now = uv_now(R->d->loop);
	list_each(it, &R->rgets) {
		struct rget *rg = list_entry(it, struct rget, link);
		uint64_t at = now + ms_left(rg);
		if (rg->pending && at < first)
			first = at;
	}
	return first;
}

/* Items still waiting for READY past their get's deadline end (MORI_ETIMEDOUT); kept READYs
 * past their life go. */
static void pending_expire(struct kv_remote *R)
{
	uint64_t now = mori_now_us();
	early_expire(R, 0);
again:
	list_each(x, &R->rgets) {
		struct rget *rg = list_entry(x, struct rget, link);
		if (!rg->pending || rg->deadline_us > now)
			continue;
		for (uint32_t i = 0; i < rg->n; i++)
			if (rg->it[i].pending) {
				rg->it[i].pending = 0;
				rg->it[i].rc = MORI_ETIMEDOUT;
			}
		rg->pending = 0;
		rget_error(rg, "node %s did not read a value from its SSD within the get's deadline", rg->node);
		if (rg->xfers == 0) {
			rget_finish(rg); /* leaves the list */
			goto again;
		}
	}
}

/* Pending item it of rg is ready at its holder (ki), or failed there: fetch it as a leased one. */
static void ready_item(struct rget *rg, struct ritem *it, const Mori__PeerKvItem *ki)
{
	it->pending = 0;
	rg->pending--;
	it->rc = ki->status;
	if (ki->status == MORI_OK)
		land(rg, it, ki);
	else
		rget_error(rg, "node %s: reading a value from its SSD: %s", rg->node, mori_strerror(ki->status));
	uint32_t *idx = it->rc == MORI_OK ? malloc(sizeof(*idx)) : NULL;
	if (it->rc == MORI_OK && !idx)
		it->rc = MORI_ENOMEM;
	rg->xfers++; /* held across the start: its done may run inside */
	if (idx) {
		idx[0] = (uint32_t)(it - rg->it);
		xfer_group(rg, it->lr, idx, 1); /* takes idx */
	}
	rg->xfers--;
	rget_step(rg);
}

/* A READY that came before the lease reply it answers (the holder's SSD read can beat it: READY
 * travels on the holder's own link to us), kept until that reply or the lease's end. */
struct early {
	struct list link;         /* R->early */
	char node[128];
	uint64_t lease, size, gen, region_id, offset, expires_ms;
	uint32_t region_gen, tier;
	int32_t status;
	uint8_t secret[REGION_SECRET_BYTES];
};
#define EARLY_MAX 4096

static void early_keep(struct kv_remote *R, const char *from, const Mori__PeerKvItem *ki)
{
	struct early *e = R->nearly < EARLY_MAX && (ki->status != MORI_OK || ki->secret.len == REGION_SECRET_BYTES)
			? calloc(1, sizeof(*e)) : NULL;
	if (!e)
		return; /* the item then ends at its get's deadline */
	snprintf(e->node, sizeof(e->node), "%s", from);
	e->lease = ki->lease;
	e->status = ki->status;
	e->size = ki->size;
	e->gen = ki->gen;
	e->region_id = ki->region_id;
	e->region_gen = ki->region_gen;
	e->offset = ki->offset;
	e->tier = ki->tier;
	if (ki->status == MORI_OK)
		memcpy(e->secret, ki->secret.data, REGION_SECRET_BYTES);
	e->expires_ms = uv_now(R->d->loop) + (uint64_t)R->d->cfg.kv_lease_max_ms;
	list_add(&R->early, &e->link); /* at the tail */
	R->nearly++;
	kv_remote_arm(R);
}

static void early_drop(struct kv_remote *R, struct early *e)
{
	list_del(&e->link);
	R->nearly--;
	free(e);
}

static uint64_t early_first_ms(struct kv_remote *R)
{
	return list_entry(R->early.next, struct early, link)->expires_ms; /* kept in arrival order */
}

/* Kept READYs past their lease's longest life go (all: every one). */
static void early_expire(struct kv_remote *R, int all)
{
	uint64_t now = uv_now(R->d->loop);
	while (!LIST_EMPTY(&R->early) && (all || early_first_ms(R) <= now))
		early_drop(R, list_entry(R->early.next, struct early, link));
}

/* rg's lease reply came: its pending items whose READY came first go on. */
static void early_match(struct kv_remote *R, struct rget *rg)
{
	list_each(x, &R->early) {
		struct early *e = list_entry(x, struct early, link);
		for (uint32_t i = 0; rg->pending && i < rg->n; i++) {
			struct ritem *it = &rg->it[i];
			if (!it->pending || it->lease != e->lease || strcmp(e->node, rg->node))
				continue;
			Mori__PeerKvItem ki = MORI__PEER_KV_ITEM__INIT;
			ki.status = e->status;
			ki.lease = e->lease;
			ki.size = e->size;
			ki.gen = e->gen;
			ki.region_id = e->region_id;
			ki.region_gen = e->region_gen;
			ki.secret.data = e->secret;
			ki.secret.len = e->status == MORI_OK ? REGION_SECRET_BYTES : 0;
			ki.offset = e->offset;
			ki.tier = e->tier;
			rg->xfers++; /* rg stays until this walk ends */
			ready_item(rg, it, &ki); /* copies what it keeps of ki (e's secret among it) */
			rg->xfers--;
			early_drop(R, e);
			break;
		}
	}
}

/* READY from holder `from`: values its SSD read back for our pending leases now lie where the
 * items say (or failed); each is fetched as a leased one. One for a lease whose reply has not
 * come yet is kept for it. */
static void serve_ready(struct kv_remote *R, const Mori__PeerKv *q, const char *from, Mori__PeerKvReply *kr,
			Mori__Reply *rep, struct rctx *r)
{
	kr->status = rctx_alloc(r, sizeof(*kr->status) * (q->n_items ? q->n_items : 1));
	if (!kr->status) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	for (size_t k = 0; from && k < q->n_items; k++) {
		const Mori__PeerKvItem *ki = q->items[k];
		struct rget *rg = NULL;
		struct ritem *it = NULL;
		int waiting = 0; /* a fetch from that node still waits for its lease reply */
		list_each(x, &R->rgets) {
			struct rget *c = list_entry(x, struct rget, link);
			if (strcmp(c->node, from))
				continue;
			waiting |= !c->leased;
			for (uint32_t i = 0; c->pending && !it && i < c->n; i++)
				if (c->it[i].pending && c->it[i].lease == ki->lease)
					rg = c, it = &c->it[i];
			if (it)
				break;
		}
		kr->status[kr->n_status++] = it || waiting ? MORI_OK : MORI_ENOENT;
		if (it)
			ready_item(rg, it, ki);
		else if (waiting)
			early_keep(R, from, ki);
	}
}

static void lease_done(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	struct rget *rg = q->arg;
	(void)p;
	if (!rg->R) { /* the store stopped meanwhile */
		free(rg->xids);
		free(rg);
		return;
	}
	const Mori__PeerKvReply *kr = rep && rep->body_case == MORI__REPLY__BODY_PEER_KV ? rep->peer_kv : NULL;
	if (code == MORI_OK && (!kr || kr->n_items != rg->n))
		code = MORI_EPROTO, msg = "a lease reply of another length than asked";
	if (code != MORI_OK) {
		for (uint32_t i = 0; i < rg->n; i++)
			rg->it[i].rc = code;
		rget_error(rg, "node %s: %s", rg->node, msg && msg[0] ? msg : mori_strerror(code));
		rget_finish(rg);
		return;
	}
	rg->holder_epoch = kr->epoch;
	rg->leased = 1;
	for (uint32_t i = 0; i < rg->n; i++) {
		struct ritem *it = &rg->it[i];
		const Mori__PeerKvItem *ki = kr->items[i];
		it->rc = ki->status;
		if (ki->status == MORI_EINPROGRESS) { /* read from the holder's SSD: READY says where */
			it->lease = ki->lease;
			it->pending = 1;
			rg->pending++;
			continue;
		}
		if (ki->status == MORI_OK)
			land(rg, it, ki);
	}
	/* one transfer per (holder region, local region) */
	uint8_t *done = calloc(rg->n, 1);
	rg->xids = calloc(rg->n, sizeof(*rg->xids));
	rg->xfers = 1; /* this function's own, dropped at its end */
	if (rg->pending)
		early_match(rg->R, rg);
	for (uint32_t i = 0; done && i < rg->n; i++) {
		struct ritem *a = &rg->it[i];
		if (done[i] || a->rc != MORI_OK || a->started)
			continue;
		uint32_t *grp = malloc(sizeof(*grp) * rg->n), n = 0;
		if (!grp) {
			a->rc = MORI_ENOMEM;
			continue;
		}
		for (uint32_t j = i; j < rg->n; j++) {
			struct ritem *b = &rg->it[j];
			if (!done[j] && b->rc == MORI_OK && !b->started && b->rregion == a->rregion && b->lr == a->lr) {
				grp[n++] = j;
				done[j] = 1;
			}
		}
		xfer_group(rg, a->lr, grp, n); /* takes grp */
	}
	if (!done)
		for (uint32_t i = 0; i < rg->n; i++)
			if (rg->it[i].rc == MORI_OK)
				rg->it[i].rc = MORI_ENOMEM;
	free(done);
	rg->xfers--;
	rget_step(rg);
}

int kv_remote_get(struct kv_store *st, struct kv_pget *g, uid_t uid, const char *node, uint64_t epoch,
		  const struct kv_remote_key *keys, uint32_t n, uint32_t timeout_ms)
{
	struct kv_remote *R = st->remote;
	struct peers *P = st->d->peers;
	if (!R || !P || !P->on)
		return MORI_ENOTSUP;
	if (!strcmp(node, P->self))
		return MORI_ENOENT; /* this node: what it has, the local get found */
	int code = MORI_OK;
	char why[300] = "";
	struct peer *p = peer_get_client(P, node, &code, why, sizeof(why));
	if (!p) {
		for (uint32_t i = 0; i < n; i++) {
			keys[i].sl->status = code;
		}
		kv_first_error(&g->rep, &g->r, why);
		return code;
	}
	/* a destination that is not the client's own region (or not all inside it) asks nothing */
	size_t kbytes = 0;
	uint32_t bad = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (keys[i].region && !dest_region(R, g, keys[i].region, keys[i].region_off, keys[i].cap)) {
			keys[i].sl->status = MORI_EINVAL;
			kv_first_error(&g->rep, &g->r, "a get's destination is not inside a region this client registered");
			bad++;
			continue;
		}
		kbytes += keys[i].key.len;
	}
	if (bad == n)
		return MORI_EINVAL;
	/* the keys are copied: the request they came in is freed when the get's reply is deferred */
	struct rget *rg = calloc(1, sizeof(*rg) + sizeof(struct ritem) * (n - bad) + kbytes);
	uint64_t *kb = calloc(n, sizeof(*kb));
	ProtobufCBinaryData *ks = calloc(n, sizeof(*ks));
	if (!rg || !kb || !ks) {
		free(rg), free(kb), free(ks);
		return MORI_ENOMEM;
	}
	uint8_t *kcopy = (uint8_t *)&rg->it[n - bad];
	rg->R = R;
	rg->g = g;
	rg->uid = uid;
	snprintf(rg->node, sizeof(rg->node), "%s", node);
	rg->epoch = epoch;
	rg->deadline_us = mori_now_us() + (uint64_t)timeout_ms * 1000;
	for (uint32_t i = 0; i < n; i++) {
		if (keys[i].region && keys[i].sl->status == MORI_EINVAL)
			continue;
		struct ritem *it = &rg->it[rg->n];
		it->sl = keys[i].sl;
		memcpy(kcopy, keys[i].key.data, keys[i].key.len);
		it->key.data = kcopy;
		it->key.len = keys[i].key.len;
		kcopy += keys[i].key.len;
		it->gen = keys[i].gen;
		it->dst = keys[i].region;
		it->dst_off = keys[i].region_off;
		it->cap = keys[i].cap;
		ks[rg->n] = it->key;
		kb[rg->n++] = keys[i].gen;
	}
	n = rg->n;
	Mori__PeerKv q = MORI__PEER_KV__INIT;
	Mori__Request req = MORI__REQUEST__INIT;
	q.op = MORI__PEER_KV_OP__PEER_KV_LEASE;
	q.uid = (uint32_t)uid;
	q.keys = ks;
	q.n_keys = n;
	q.gens = kb;
	q.n_gens = n;
	q.epoch = epoch;
	q.lease_ms = timeout_ms;
	req.body_case = MORI__REQUEST__BODY_PEER_KV;
	req.peer_kv = &q;
	list_add(&R->rgets, &rg->link);
	g->waiting++;
	struct rpc *rq = peer_rpc(p, &req, timeout_ms, lease_done, rg);
	free(kb);
	free(ks);
	if (!rq) {
		g->waiting--;
		list_del(&rg->link);
		free(rg);
		return MORI_ENOMEM;
	}
	peer_use(p);
	return MORI_EINPROGRESS;
}

/* ---- gets through the cluster index ---- */

/* A get's misses waiting for the index to say who holds them. */
struct rloc {
	struct kv_store *st;
	struct kv_pget *g;
	uid_t uid;
	uint64_t deadline_us;
	uint32_t n;
	struct kv_remote_key k[];  /* key bytes copied after them */
};

static void loc_done(void *arg, int status, const char *msg, const struct kv_located *res, size_t n)
{
	struct rloc *rl = arg;
	struct kv_store *st = rl->st;
	struct kv_pget *g = rl->g;
	if (status != MORI_OK || n != rl->n) {
		for (uint32_t i = 0; i < rl->n; i++)
			rl->k[i].sl->status = status != MORI_OK ? status : MORI_EPROTO;
		kv_first_error(&g->rep, &g->r, msg && msg[0] ? msg : "the cluster index answered another count of keys");
	} else {
		/* each key from one holder, one with it in DRAM first (a holder reads an SSD copy back
		 * before it serves it), a batch's keys of one holder in one request */
		const char **node = calloc(n ? n : 1, sizeof(*node));
		uint64_t *epoch = calloc(n ? n : 1, sizeof(*epoch));
		struct kv_remote_key *grp = calloc(n ? n : 1, sizeof(*grp));
		for (size_t i = 0; node && epoch && i < n; i++)
			for (uint32_t h = 0; h < res[i].n; h++) {
				const struct kv_holder *x = &res[i].holders[h];
				if (x->self || (node[i] && x->tier != KV_TIER_DRAM))
					continue;
				node[i] = x->node;
				epoch[i] = x->epoch;
				rl->k[i].gen = x->gen;
				if (x->tier == KV_TIER_DRAM)
					break;
			}
		uint64_t now = mori_now_us();
		uint32_t ms = rl->deadline_us > now ? (uint32_t)((rl->deadline_us - now) / 1000) + 1 : 1;
		for (size_t i = 0; node && epoch && grp && i < n; i++) {
			if (!node[i])
				continue;
			uint32_t m = 0;
			const char *nd = node[i];
			uint64_t ep = epoch[i];
			for (size_t j = i; j < n; j++)
				if (node[j] && epoch[j] == ep && !strcmp(node[j], nd)) {
					grp[m++] = rl->k[j];
					node[j] = NULL;
				}
			int rc = kv_remote_get(st, g, rl->uid, nd, ep, grp, m, ms);
			if (rc != MORI_EINPROGRESS)
				for (uint32_t j = 0; j < m; j++)
					grp[j].sl->status = rc;
		}
		if (!node || !epoch || !grp)
			for (uint32_t i = 0; i < rl->n; i++)
				rl->k[i].sl->status = MORI_ENOMEM;
		free(node), free(epoch), free(grp);
	}
	free(rl);
	if (--g->waiting == 0)
		kv_pget_done(st, g);
}

int kv_remote_locate_get(struct kv_store *st, struct kv_pget *g, uid_t uid, const struct kv_remote_key *keys,
			 uint32_t n, uint32_t timeout_ms)
{
	size_t kbytes = 0;
	for (uint32_t i = 0; i < n; i++)
		kbytes += keys[i].key.len;
	struct rloc *rl = calloc(1, sizeof(*rl) + sizeof(*keys) * n + kbytes);
	struct kv_key *kk = calloc(n ? n : 1, sizeof(*kk));
	if (!rl || !kk) {
		free(rl), free(kk);
		return MORI_ENOMEM;
	}
	uint8_t *kcopy = (uint8_t *)&rl->k[n];
	*rl = (struct rloc){st, g, uid, mori_now_us() + (uint64_t)timeout_ms * 1000, n};
	for (uint32_t i = 0; i < n; i++) {
		rl->k[i] = keys[i];
		memcpy(kcopy, keys[i].key.data, keys[i].key.len);
		rl->k[i].key.data = kcopy;
		kcopy += keys[i].key.len;
		kk[i] = (struct kv_key){rl->k[i].key.data, rl->k[i].key.len};
	}
	char msg[300] = "";
	g->waiting++;
	int rc = kv_cluster_locate(st->d, uid, kk, n, KV_LOCATE_REMOTE, loc_done, rl, msg, sizeof(msg));
	free(kk);
	if (rc != MORI_OK) {
		g->waiting--;
		free(rl);
		if (rc != MORI_ENOTSUP) {
			for (uint32_t i = 0; i < n; i++)
				keys[i].sl->status = rc;
			kv_first_error(&g->rep, &g->r, msg);
		}
		return rc;
	}
	return MORI_EINPROGRESS;
}

/* ---- life cycle ---- */

int kv_remote_start(struct kv_store *st)
{
	struct kv_remote *R = calloc(1, sizeof(*R));
	if (!R)
		return MORI_ENOMEM;
	R->st = st;
	R->d = st->d;
	LIST_INIT(&R->rgets);
	LIST_INIT(&R->rputs);
	LIST_INIT(&R->early);
	R->asker_ready = serve_ready;
	R->asker_first_ms = pending_first_ms;
	R->asker_tick = pending_expire;
	kv_serve_start(R);
	st->remote = R;
	return MORI_OK;
}

void kv_remote_stop(struct kv_store *st)
{
	struct kv_remote *R = st->remote;
	if (!R)
		return;
	peers_kv_serve = NULL; /* no READY comes in meanwhile */
	/* fetches waiting for READY stop waiting; those with nothing in flight end here */
	list_each(x, &R->rgets) {
		struct rget *rg = list_entry(x, struct rget, link);
		for (uint32_t i = 0; i < rg->n; i++)
			if (rg->it[i].pending) {
				rg->it[i].pending = 0;
				rg->it[i].rc = MORI_ECANCELED;
			}
		rg->pending = 0;
	}
	/* fetches reading now end (their slots freed while the store lives); those waiting for a
	 * lease reply are let go: their reply frees them */
	while (!LIST_EMPTY(&R->rgets)) {
		struct rget *rg = list_entry(R->rgets.next, struct rget, link);
		if (rg->leased && !rg->xfers) { /* was waiting for READY */
			rget_finish(rg);
			continue;
		}
		if (rg->xfers) { /* reading: cancelling its transfers finishes it (each done runs now) */
			uint32_t nx = rg->nx;
			uint64_t *ids = malloc(sizeof(*ids) * (nx ? nx : 1));
			if (ids)
				memcpy(ids, rg->xids, sizeof(*ids) * nx);
			for (uint32_t i = 0; ids && i < nx; i++)
				peer_xfer_cancel(R->d, ids[i]);
			free(ids);
			if (!LIST_EMPTY(&R->rgets) && list_entry(R->rgets.next, struct rget, link) == rg) {
				list_del(&rg->link); /* not all cancelled (out of memory): let it leak its slots */
				rg->R = NULL;
			}
			continue;
		}
		list_del(&rg->link);
		rg->R = NULL; /* its lease reply frees it */
		for (uint32_t i = 0; i < rg->n; i++)
			rg->it[i].sl->status = MORI_ECANCELED;
		if (--rg->g->waiting == 0)
			kv_pget_done(st, rg->g);
	}
	early_expire(R, 1);
	st->remote = NULL;
	kv_serve_stop(R); /* frees R once its timer closed */
}

void kv_remote_stats(const struct kv_store *st, struct kv_remote_stats *out)
{
	memset(out, 0, sizeof(*out));
	const struct kv_remote *R = st->remote;
	if (!R)
		return;
	out->fetched = R->fetched;
	out->fetched_bytes = R->fetched_bytes;
	out->fetch_misses = R->fetch_misses;
	out->fetch_errors = R->fetch_errors;
	out->served = R->served;
	out->served_bytes = R->served_bytes;
	out->peer_leases = R->nleases;
	out->expired = R->expired;
	out->placed = R->placed;
	out->placed_bytes = R->placed_bytes;
	out->place_failed = R->place_failed;
	out->placed_here = R->placed_here;
	out->delivered = R->delivered;
	out->served_ssd = R->served_ssd;
}
