/* UMBP across nodes, the holder's side (docs/umbp.md, "Across nodes"): PeerKv requests of other
 * daemons. LEASE takes a reference on each value's DRAM version for the asker (a peer lease,
 * ended by RELEASE or after its deadline), refuses a generation or an epoch other than the asker
 * expects (MORI_ENOENT, a miss) and answers where the value lies: a region over its slab, made
 * once per slab and removed when the slab closes. A value only on SSD is read back first under a
 * pending lease, and READY tells the asker where it lies once it landed. PUT_ALLOC and
 * PUT_COMMIT take placements. The asker's side (kv_remote.c, above) registers its hooks in struct
 * kv_remote; one timer serves both sides' deadlines. Above kv_store.c. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv_int.h"
#include "kv/kv_remote.h"
#include "kv/kv_remote_int.h"
#include "log.h"
#include "peer/peer.h"
#include "peer/peer_int.h"
#include "region/region.h"

/* ---- regions over slabs ---- */

static void slab_closed(void *arg, const struct kv_slab *s)
{
	struct kv_remote *R = arg;
	if (s->index < R->nsr && R->sr[s->index].g && R->sr[s->index].slab_id == s->id) {
		/* transfers still reading or writing it hold it (inflight) until they end */
		region_remove(R->d, R->sr[s->index].g, "its KV slab was freed");
		R->sr[s->index].g = NULL;
	}
}

/* The region over slab index (the owner of a value's run), made on first use; NULL ENOMEM. */
struct region *kv_slab_region(struct kv_remote *R, uint32_t index)
{
	struct kv_slab *s = kv_dram_slab(R->st->dram, index);
	if (!s)
		return NULL;
	if (index >= R->nsr) {
		uint32_t n = index + 16;
		struct slab_region *ns = realloc(R->sr, sizeof(*ns) * n);
		if (!ns)
			return NULL;
		memset(ns + R->nsr, 0, sizeof(*ns) * (n - R->nsr));
		R->sr = ns;
		R->nsr = n;
	}
	struct slab_region *x = &R->sr[index];
	if (x->g && x->slab_id == s->id)
		return x->g;
	int fd = dup(s->fd);
	if (fd < 0)
		return NULL;
	x->g = region_add(R->d, NULL, MORI_MEM_HOST, s->bytes, fd, 0, 0); /* owns fd */
	x->slab_id = s->id;
	return x->g;
}

/* ---- the holder: leases for peers ---- */

static void on_expiry(uv_timer_t *t);

void kv_remote_arm(struct kv_remote *R)
{
	uint64_t now = uv_now(R->d->loop), at = R->asker_first_ms ? R->asker_first_ms(R) : UINT64_MAX;
	if (!LIST_EMPTY(&R->expiry)) {
		struct plea *l = list_entry(R->expiry.next, struct plea, elink);
		at = l->deadline_ms < at ? l->deadline_ms : at;
	}
	if (at != UINT64_MAX)
		uv_timer_start(&R->timer, on_expiry, at > now ? at - now : 0, 0);
}

static void lease_end(struct kv_remote *R, struct plea *l)
{
	list_del(&l->hlink);
	list_del(&l->elink);
	if (l->e) /* NULL: its value is still being read from SSD */
		kv_unref(R->st, l->e);
	R->nleases--;
	free(l);
}

static void on_expiry(uv_timer_t *t)
{
	struct kv_remote *R = t->data;
	uint64_t now = uv_now(R->d->loop);
	while (!LIST_EMPTY(&R->expiry)) {
		struct plea *l = list_entry(R->expiry.next, struct plea, elink);
		if (l->deadline_ms > now)
			break;
		R->expired++;
		lease_end(R, l);
	}
	if (R->asker_tick)
		R->asker_tick(R);
	kv_remote_arm(R);
}

static struct plea *lease_find(struct kv_remote *R, uint64_t id)
{
	list_each(it, &R->lb[hmix(id) & (LEASE_BUCKETS - 1)]) {
		struct plea *l = list_entry(it, struct plea, hlink);
		if (l->id == id)
			return l;
	}
	return NULL;
}

static int lease_add(struct kv_remote *R, struct kv_entry *e, uint32_t ms, uint64_t *id)
{
	struct plea *l = calloc(1, sizeof(*l));
	if (!l)
		return MORI_ENOMEM;
	uint64_t r = 0;
	if (auth_random(&r, sizeof(r)) != 0)
		r = 0;
	l->id = (++R->lease_seq << 20) ^ (r & 0xfffff); /* unguessable enough: a peer names only its own */
	l->e = e;
	l->deadline_ms = uv_now(R->d->loop) + ms;
	list_add(&R->lb[hmix(l->id) & (LEASE_BUCKETS - 1)], &l->hlink);
	/* by deadline: a later one goes at the tail, the usual case */
	struct list *pos = R->expiry.prev;
	while (pos != &R->expiry && list_entry(pos, struct plea, elink)->deadline_ms > l->deadline_ms)
		pos = pos->prev;
	list_add(pos, &l->elink);
	R->nleases++;
	*id = l->id;
	if (R->expiry.next == &l->elink)
		kv_remote_arm(R); /* now the first */
	return MORI_OK;
}

uint64_t kv_dram_room(struct kv_store *st)
{
	const struct config *cfg = &st->d->cfg;
	struct kv_dram_stats ds;
	kv_dram_stats_get(st->dram, &ds);
	uint64_t high = (uint64_t)cfg->kv_dram_bytes / 100 * (uint64_t)cfg->kv_high_watermark;
	return ds.allocated < high ? high - ds.allocated : 0;
}

/* Where e lies for a peer (g: its slab's region): the item's size, generation, tier and region. */
static void item_where(Mori__PeerKvItem *it, struct region *g, const struct kv_entry *e, uint64_t size, uint32_t tier)
{
	it->size = size;
	it->gen = e->gen;
	it->tier = tier;
	it->region_id = g->id;
	it->region_gen = g->gen;
	it->secret.data = g->secret; /* the asker keeps it to itself (a peer link is authenticated) */
	it->secret.len = REGION_SECRET_BYTES;
	it->offset = kv_ext_offset(&e->u.ext);
}

/* A value of a peer's lease being read back from SSD (the lease pending, its entry NULL). */
struct pread {
	struct list link;         /* R->preads */
	struct kv_remote *R;      /* NULL once the store's remote part stopped */
	uint64_t lease;
	char asker[128];
};

static void ready_sent(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	(void)q, (void)p, (void)rep, (void)code, (void)msg; /* unanswered: the lease expires here */
}

/* The read landed (e referenced) or failed: the pending lease takes e and the asker is told where
 * it lies (READY), or what failed; a lease released or expired meanwhile lets e go. */
static void ssd_landed(void *arg, struct kv_store *st, struct kv_entry *e, int rc)
{
	struct pread *pr = arg;
	struct kv_remote *R = pr->R;
	if (R)
		list_del(&pr->link);
	struct plea *l = R ? lease_find(R, pr->lease) : NULL;
	if (!l || l->e) {
		if (e)
			kv_unref(st, e);
		free(pr);
		return;
	}
	Mori__PeerKvItem it = MORI__PEER_KV_ITEM__INIT, *itp = &it;
	it.lease = pr->lease;
	it.status = rc;
	struct region *g = e ? kv_slab_region(R, e->u.ext.slab) : NULL;
	if (e && !g) {
		kv_unref(st, e);
		e = NULL;
		it.status = MORI_ENOMEM;
	}
	if (e) {
		l->e = e;
		item_where(&it, g, e, e->size, KV_TIER_SSD);
		R->served++;
		R->served_bytes += e->size;
	} else {
		lease_end(R, l);
	}
	int code = MORI_OK;
	char why[200];
	struct peer *p = peer_get_client(R->d->peers, pr->asker, &code, why, sizeof(why));
	if (p) {
		Mori__PeerKv q = MORI__PEER_KV__INIT;
		Mori__Request req = MORI__REQUEST__INIT;
		q.op = MORI__PEER_KV_OP__PEER_KV_READY;
		q.leases = &pr->lease;
		q.n_leases = 1;
		q.items = &itp;
		q.n_items = 1;
		req.body_case = MORI__REQUEST__BODY_PEER_KV;
		req.peer_kv = &q;
		if (peer_rpc(p, &req, PEER_LOOKUP_TIMEOUT_MS, ready_sent, NULL))
			peer_use(p);
	}
	free(pr);
}

/* Read key's SSD copy for a peer (from: the asker, who is told when it lands): MORI_EINPROGRESS
 * and the pending lease in *id, else what kv_peer_hold said (*e held on MORI_OK). */
static int hold_or_read(struct kv_remote *R, const Mori__PeerKv *q, size_t i, const char *from, uint32_t ms,
			struct kv_entry **e, uint64_t *id)
{
	const ProtobufCBinaryData *k = &q->keys[i];
	uint64_t gen = q->n_gens ? q->gens[i] : 0;
	struct kv_pget *pg = from && from[0] ? calloc(1, sizeof(*pg)) : NULL;
	struct pread *pr = pg ? calloc(1, sizeof(*pr)) : NULL;
	if (pg && !pr) {
		free(pg);
		pg = NULL;
	}
	if (pg) {
		pg->on_read = ssd_landed;
		pg->arg = pr;
		snprintf(pr->asker, sizeof(pr->asker), "%s", from);
	}
	int rc = kv_peer_hold(R->st, (uid_t)q->uid, k->data, k->len, gen, e, pg);
	if (rc != MORI_EINPROGRESS) {
		free(pg), free(pr);
		return rc;
	}
	/* the store owns pg now; pr goes with its landing */
	pr->R = R;
	list_add(&R->preads, &pr->link);
	if (lease_add(R, NULL, ms, id) != MORI_OK)
		return MORI_ENOMEM; /* pr->lease 0: the landing lets the value go */
	pr->lease = *id;
	R->served_ssd++;
	return MORI_EINPROGRESS;
}

/* The reply's item array for q's keys (0), or -1 with the error in rep. */
static int items_alloc(const Mori__PeerKv *q, Mori__PeerKvReply *kr, Mori__Reply *rep, struct rctx *r)
{
	kr->items = rctx_alloc(r, sizeof(*kr->items) * q->n_keys);
	if (kr->items)
		return 0;
	reply_error(rep, MORI_ENOMEM, "out of memory");
	return -1;
}

/* The next item of the reply, appended; NULL with the error in rep. */
static Mori__PeerKvItem *item_add(Mori__PeerKvReply *kr, Mori__Reply *rep, struct rctx *r)
{
	Mori__PeerKvItem *it = rctx_alloc(r, sizeof(*it));
	if (!it) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return NULL;
	}
	mori__peer_kv_item__init(it);
	kr->items[kr->n_items++] = it;
	return it;
}

/* The lease the asker wants, at most kv_lease_max_ms (its default). */
static uint32_t lease_ms_of(const struct kv_remote *R, const Mori__PeerKv *q)
{
	uint64_t max = (uint64_t)R->d->cfg.kv_lease_max_ms;
	return (uint32_t)(q->lease_ms && q->lease_ms < max ? q->lease_ms : max);
}

static void serve_lease(struct kv_remote *R, const Mori__PeerKv *q, Mori__PeerKvReply *kr, Mori__Reply *rep,
			struct rctx *r, const char *self)
{
	struct kv_store *st = R->st;
	if (q->n_keys == 0 || q->n_keys > PEER_KV_MAX || (q->n_gens && q->n_gens != q->n_keys)) {
		reply_error(rep, MORI_EINVAL, "lease of %zu keys with %zu generations (1..%d keys, as many generations "
			    "or none)", q->n_keys, q->n_gens, PEER_KV_MAX);
		return;
	}
	if (items_alloc(q, kr, rep, r))
		return;
	uint32_t ms = lease_ms_of(R, q);
	int restarted = q->epoch && q->epoch != R->d->epoch;
	for (size_t i = 0; i < q->n_keys; i++) {
		Mori__PeerKvItem *it = item_add(kr, rep, r);
		if (!it)
			return;
		const ProtobufCBinaryData *k = &q->keys[i];
		struct kv_entry *e = NULL;
		int rc = k->len == 0 || k->len > KV_KEY_MAX ? MORI_EINVAL
		       : restarted ? MORI_ENOENT
				   : hold_or_read(R, q, i, self, ms, &e, &it->lease);
		if (rc == MORI_EINPROGRESS) { /* READY follows */
			it->status = rc;
			it->tier = KV_TIER_SSD;
			continue;
		}
		struct region *g = rc == MORI_OK ? kv_slab_region(R, e->u.ext.slab) : NULL;
		if (rc == MORI_OK && (!g || (rc = lease_add(R, e, ms, &it->lease)) != MORI_OK)) {
			kv_unref(st, e);
			rc = MORI_ENOMEM;
		}
		it->status = rc;
		if (rc != MORI_OK) {
			if (rc != MORI_ENOENT)
				kv_first_error(rep, r, rc == MORI_EINVAL ? "key empty or over 256 bytes" : "out of memory");
			continue;
		}
		item_where(it, g, e, e->size, KV_TIER_DRAM);
		R->served++;
		R->served_bytes += e->size;
	}
}

/* Slots for values another node places here: temporary entries written by the asker, leased
 * until its PUT_COMMIT (an uncommitted one goes with its lease). Room is made as for a local put,
 * so a node asked past its own high watermark evicts as it would for its own puts. */
static void serve_put_alloc(struct kv_remote *R, const Mori__PeerKv *q, Mori__PeerKvReply *kr, Mori__Reply *rep,
			    struct rctx *r)
{
	struct kv_store *st = R->st;
	const struct config *cfg = &R->d->cfg;
	if (q->n_keys == 0 || q->n_keys > PEER_KV_MAX || q->n_sizes != q->n_keys) {
		reply_error(rep, MORI_EINVAL, "placement of %zu keys with %zu sizes (1..%d keys, a size each)", q->n_keys,
			    q->n_sizes, PEER_KV_MAX);
		return;
	}
	if (items_alloc(q, kr, rep, r))
		return;
	uint32_t ms = lease_ms_of(R, q);
	for (size_t i = 0; i < q->n_keys; i++) {
		Mori__PeerKvItem *it = item_add(kr, rep, r);
		if (!it)
			return;
		const ProtobufCBinaryData *k = &q->keys[i];
		char msg[300] = "";
		struct kv_entry *e = NULL;
		int rc = MORI_OK;
		if (k->len == 0 || k->len > KV_KEY_MAX || q->sizes[i] == 0 || q->sizes[i] > (uint64_t)cfg->kv_value_max) {
			rc = MORI_EINVAL;
			snprintf(msg, sizeof(msg), "placement of a key of %zu bytes, value of %llu bytes", k->len,
				 (unsigned long long)q->sizes[i]);
		} else {
			rc = kv_temp_new(st, (uid_t)q->uid, k->data, k->len, q->sizes[i], &e, msg, sizeof(msg));
		}
		struct region *g = rc == MORI_OK ? kv_slab_region(R, e->u.ext.slab) : NULL;
		if (rc == MORI_OK && (!g || (rc = lease_add(R, e, ms, &it->lease)) != MORI_OK)) {
			kv_unref(st, e);
			rc = MORI_ENOMEM;
			snprintf(msg, sizeof(msg), "out of memory");
		}
		/* from here the lease holds kv_temp_new's reference */
		it->status = rc;
		if (rc != MORI_OK) {
			kv_first_error(rep, r, msg);
			continue;
		}
		item_where(it, g, e, q->sizes[i], KV_TIER_DRAM);
	}
}

static int serve(struct peers *P, const Mori__Request *req, const char *from, Mori__Reply *rep, struct rctx *r)
{
	struct kv_store *st = P->d->kv;
	struct kv_remote *R = st ? st->remote : NULL;
	const Mori__PeerKv *q = req->peer_kv;
	if (!R)
		return 0;
	Mori__PeerKvReply *kr = rctx_alloc(r, sizeof(*kr));
	if (!kr) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return 1;
	}
	mori__peer_kv_reply__init(kr);
	kr->epoch = P->d->epoch;
	kr->dram_free = kv_dram_room(st);
	rep->body_case = MORI__REPLY__BODY_PEER_KV;
	rep->peer_kv = kr;
	if (q->op == MORI__PEER_KV_OP__PEER_KV_LEASE) {
		serve_lease(R, q, kr, rep, r, from);
	} else if (q->op == MORI__PEER_KV_OP__PEER_KV_PUT_ALLOC) {
		serve_put_alloc(R, q, kr, rep, r);
	} else if (q->op == MORI__PEER_KV_OP__PEER_KV_READY) {
		R->asker_ready(R, q, from, kr, rep, r);
	} else if (q->op == MORI__PEER_KV_OP__PEER_KV_RELEASE || q->op == MORI__PEER_KV_OP__PEER_KV_PUT_COMMIT) {
		kr->status = rctx_alloc(r, sizeof(*kr->status) * (q->n_leases ? q->n_leases : 1));
		if (!kr->status) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			return 1;
		}
		for (size_t i = 0; i < q->n_leases; i++) {
			struct plea *l = lease_find(R, q->leases[i]);
			int rc = l ? MORI_OK : MORI_ETIMEDOUT; /* expired (or never ours) */
			if (l && q->op == MORI__PEER_KV_OP__PEER_KV_PUT_COMMIT &&
			    (rc = l->e ? kv_temp_commit(st, l->e) : MORI_EINVAL) == MORI_OK)
				R->placed_here++;
			if (l)
				lease_end(R, l);
			kr->status[kr->n_status++] = rc;
		}
	} else {
		reply_error(rep, MORI_EINVAL, "unknown PeerKv op %d", (int)q->op);
	}
	if (rep->code != 0) {
		rep->body_case = MORI__REPLY__BODY__NOT_SET;
		rep->peer_kv = NULL;
	}
	return 1;
}

/* ---- life cycle ---- */

void kv_serve_start(struct kv_remote *R)
{
	for (int i = 0; i < LEASE_BUCKETS; i++)
		LIST_INIT(&R->lb[i]);
	LIST_INIT(&R->expiry);
	LIST_INIT(&R->preads);
	uv_timer_init(R->d->loop, &R->timer);
	R->timer.data = R;
	kv_dram_on_close(R->st->dram, slab_closed, R);
	peers_kv_serve = serve;
}

static void timer_closed(uv_handle_t *h)
{
	free(h->data);
}

void kv_serve_stop(struct kv_remote *R)
{
	peers_kv_serve = NULL;
	while (!LIST_EMPTY(&R->preads)) { /* their reads land for nobody */
		struct pread *pr = list_entry(R->preads.next, struct pread, link);
		list_del(&pr->link);
		pr->R = NULL;
	}
	for (int i = 0; i < LEASE_BUCKETS; i++)
		while (!LIST_EMPTY(&R->lb[i]))
			lease_end(R, list_entry(R->lb[i].next, struct plea, hlink));
	kv_dram_on_close(R->st->dram, NULL, NULL);
	for (uint32_t i = 0; i < R->nsr; i++)
		if (R->sr[i].g)
			region_remove(R->d, R->sr[i].g, "the KV store stopped");
	free(R->sr);
	uv_timer_stop(&R->timer);
	uv_close((uv_handle_t *)&R->timer, timer_closed); /* frees R */
}
