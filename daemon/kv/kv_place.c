/* UMBP across nodes: placement of puts (docs/umbp.md, "Across nodes"). A put committed while this
 * node's DRAM tier is past its high watermark goes to the live node with the most room (the
 * cluster index's heartbeat figures): a slot reserved there (PeerKv PUT_ALLOC), the value written
 * into it over a transport, committed there (PUT_COMMIT), then dropped here. Above kv_remote.c
 * (the slabs' regions, the peer service), below kv_req.c. */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_cluster.h"
#include "kv/kv_place.h"
#include "kv/kv_remote_int.h"
#include "log.h"
#include "peer/peer.h"
#include "region/region.h"

/* ---- placement: puts past the high watermark go to the node with the most room ---- */

#define PLACING_MAX 64 /* placements in flight from this node */

struct rput {
	struct list link;         /* R->rputs */
	struct kv_remote *R;      /* NULL once the store stopped: the callbacks left only free it */
	struct kv_entry *e;       /* the local version, referenced while it is placed */
	char node[KV_NODE_MAX];
	uint64_t epoch, lease, rregion, roff, xid;
	uint32_t rgen;
	uint8_t secret[REGION_SECRET_BYTES];
};

static uint64_t high_bytes(const struct config *cfg, uint64_t cap)
{
	return cap / 100 * (uint64_t)cfg->kv_high_watermark;
}

/* The live node with the most free DRAM that stays under its high watermark with size more
 * (the same kv_high_watermark assumed there), and has more room than this node; NULL: none (a
 * full cluster: the put stays here and this node evicts as it always does). */
static const struct kv_node_info *place_target(struct kv_remote *R, uint64_t size)
{
	const struct kv_node_info *nodes = NULL, *best = NULL;
	size_t n = 0;
	if (!kv_cluster_on(R->st) || kv_cluster_nodes(R->d, &nodes, &n) != MORI_OK)
		return NULL;
	const struct config *cfg = &R->d->cfg;
	uint64_t here = kv_dram_room(R->st);
	for (size_t i = 0; i < n; i++) {
		const struct kv_node_info *x = &nodes[i];
		uint64_t reserve = x->dram_capacity - high_bytes(cfg, x->dram_capacity);
		if (x->self || x->dram_free < reserve + size || x->dram_free <= here)
			continue;
		if (!best || x->dram_free > best->dram_free)
			best = x;
	}
	return best;
}

static int can_place(struct kv_store *st, uint64_t size)
{
	struct kv_remote *R = st->remote;
	return R && R->placing < PLACING_MAX && place_target(R, size) != NULL;
}

static void rput_end(struct rput *x, int ok, const char *why)
{
	struct kv_remote *R = x->R;
	if (R) {
		if (ok && kv_drop(R->st, x->e) == MORI_OK) {
			R->placed++;
			R->placed_bytes += x->e->size;
		} else if (!ok) {
			R->place_failed++;
			mlog_ratelimited(MLOG_WARN, "kv", "a put placed on node %s stays here: %s", x->node, why);
		}
		kv_unref(R->st, x->e);
		R->placing--;
		list_del(&x->link);
	}
	free(x);
}

static void put_commit_done(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	struct rput *x = q->arg;
	const Mori__PeerKvReply *kr = rep && rep->body_case == MORI__REPLY__BODY_PEER_KV ? rep->peer_kv : NULL;
	(void)p;
	if (code == MORI_OK && (!kr || kr->n_status != 1))
		code = MORI_EPROTO, msg = "a commit reply without its status";
	if (code == MORI_OK && kr->status[0] != MORI_OK)
		code = kr->status[0], msg = "its slot there expired before the commit";
	rput_end(x, code == MORI_OK, msg && msg[0] ? msg : mori_strerror(code));
}

static void put_xfer_done(void *arg, int code, const char *msg)
{
	struct rput *x = arg;
	struct kv_remote *R = x->R;
	struct peer *p = R && code == MORI_OK ? peer_get(R->d->peers, x->node, 0) : NULL;
	if (!p) {
		rput_end(x, 0, code != MORI_OK ? (msg && msg[0] ? msg : mori_strerror(code)) : "the peer is gone");
		return;
	}
	Mori__PeerKv q = MORI__PEER_KV__INIT;
	Mori__Request req = MORI__REQUEST__INIT;
	q.op = MORI__PEER_KV_OP__PEER_KV_PUT_COMMIT;
	q.leases = &x->lease;
	q.n_leases = 1;
	req.body_case = MORI__REQUEST__BODY_PEER_KV;
	req.peer_kv = &q;
	if (!peer_rpc(p, &req, (uint32_t)R->d->cfg.kv_timeout_ms, put_commit_done, x))
		rput_end(x, 0, "out of memory");
}

static void put_alloc_done(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	struct rput *x = q->arg;
	struct kv_remote *R = x->R;
	const Mori__PeerKvReply *kr = rep && rep->body_case == MORI__REPLY__BODY_PEER_KV ? rep->peer_kv : NULL;
	(void)p;
	if (!R) {
		free(x);
		return;
	}
	if (code == MORI_OK && (!kr || kr->n_items != 1 || kr->items[0]->secret.len != REGION_SECRET_BYTES))
		code = kr && kr->n_items == 1 && kr->items[0]->status != MORI_OK ? kr->items[0]->status : MORI_EPROTO,
		msg = rep && rep->message && rep->message[0] ? rep->message : "no slot there";
	if (code != MORI_OK) {
		rput_end(x, 0, msg && msg[0] ? msg : mori_strerror(code));
		return;
	}
	const Mori__PeerKvItem *it = kr->items[0];
	x->epoch = kr->epoch;
	x->lease = it->lease;
	x->rregion = it->region_id;
	x->rgen = it->region_gen;
	x->roff = it->offset;
	memcpy(x->secret, it->secret.data, REGION_SECRET_BYTES);
	struct region *local = kv_slab_region(R, x->e->u.ext.slab);
	mori_desc *d = calloc(1, sizeof(*d));
	if (!local || !d) {
		free(d);
		rput_end(x, 0, "out of memory");
		return;
	}
	d->local_offset = kv_ext_offset(&x->e->u.ext);
	d->remote_offset = x->roff;
	d->length = x->e->size;
	struct peer_xfer_args a = {
		.local = local, .node = x->node, .epoch = x->epoch, .region = x->rregion, .gen = x->rgen,
		.secret = x->secret, .read = 0, .descs = d, .n = 1, .timeout_ms = (uint32_t)R->d->cfg.kv_timeout_ms,
		.done = put_xfer_done, .arg = x,
	};
	int rc = peer_xfer_start(R->d, &a, &x->xid); /* takes d; done may run before it returns */
	if (rc != MORI_OK)
		rput_end(x, 0, mori_strerror(rc));
}

void kv_place_put(struct kv_store *st, struct kv_entry *e)
{
	struct kv_remote *R = st->remote;
	const struct config *cfg = &st->d->cfg;
	struct kv_dram_stats ds;
	if (!R || e->tier != KV_TIER_DRAM || e->pin == 2 || R->placing >= PLACING_MAX)
		return;
	kv_dram_stats_get(st->dram, &ds);
	if (ds.allocated <= high_bytes(cfg, (uint64_t)cfg->kv_dram_bytes))
		return; /* node affinity: below the high watermark every put stays here */
	const struct kv_node_info *t = place_target(R, e->size);
	struct peer *p = t ? peer_get(st->d->peers, t->node, 1) : NULL;
	struct rput *x = p ? calloc(1, sizeof(*x)) : NULL;
	if (!x)
		return;
	x->R = R;
	x->e = e;
	snprintf(x->node, sizeof(x->node), "%s", t->node);
	ProtobufCBinaryData key = {e->key_len, e->key};
	uint64_t size = e->size;
	Mori__PeerKv q = MORI__PEER_KV__INIT;
	Mori__Request req = MORI__REQUEST__INIT;
	q.op = MORI__PEER_KV_OP__PEER_KV_PUT_ALLOC;
	q.uid = (uint32_t)e->uid;
	q.keys = &key;
	q.n_keys = 1;
	q.sizes = &size;
	q.n_sizes = 1;
	q.lease_ms = (uint32_t)cfg->kv_timeout_ms * 2;
	req.body_case = MORI__REQUEST__BODY_PEER_KV;
	req.peer_kv = &q;
	if (!peer_rpc(p, &req, (uint32_t)cfg->kv_timeout_ms, put_alloc_done, x)) {
		free(x);
		return;
	}
	e->refs++;
	R->placing++;
	list_add(&R->rputs, &x->link);
	peer_use(p);
}

void kv_place_start(struct kv_store *st)
{
	if (st->remote)
		st->can_place = can_place;
}

void kv_place_stop(struct kv_store *st)
{
	struct kv_remote *R = st->remote;
	st->can_place = NULL;
	if (!R)
		return;
	while (!LIST_EMPTY(&R->rputs)) { /* writing: cancelled (done runs now); else let go */
		struct rput *x = list_entry(R->rputs.next, struct rput, link);
		if (x->xid)
			peer_xfer_cancel(R->d, x->xid);
		if (!LIST_EMPTY(&R->rputs) && list_entry(R->rputs.next, struct rput, link) == x) {
			list_del(&x->link);
			kv_unref(st, x->e);
			x->R = NULL;
		}
	}
}
