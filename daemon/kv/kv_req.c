/* The KV store's requests (KvRequest, proto/mori.proto) on sessions and the control socket, and
 * its statistics. Input is checked here, before kv_store.c sees it: a bad key, size, id or batch
 * gets a clear error and changes nothing. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv_cluster.h"
#include "kv/kv_int.h"
#include "kv/kv_place.h"
#include "kv/kv_remote.h"
#include "kv/kv_store.h"
#include "log.h"

#define ALLOC(r, T, n) ((T *)rctx_alloc((r), sizeof(T) * ((n) ? (n) : 1)))

static int check_key(const ProtobufCBinaryData *k, char *msg, size_t len)
{
	if (k->len == 0 || k->len > KV_KEY_MAX) {
		snprintf(msg, len, "key of %zu bytes (keys have 1..%d)", k->len, KV_KEY_MAX);
		return MORI_EINVAL;
	}
	return MORI_OK;
}

static void do_put_alloc(struct kv_store *st, struct kv_client *kc, Mori__KvRequest *kq, Mori__KvReply *kr,
			 Mori__Reply *rep, struct rctx *r)
{
	const struct config *cfg = &st->d->cfg;
	kr->slots = ALLOC(r, Mori__KvSlot *, kq->n_items);
	kr->slabs = ALLOC(r, Mori__KvSlab *, kq->n_items);
	if (!kr->slots || !kr->slabs) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	for (size_t i = 0; i < kq->n_items; i++) {
		Mori__KvItem *it = kq->items[i];
		Mori__KvSlot *sl = rctx_alloc(r, sizeof(*sl));
		if (!sl) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			return;
		}
		mori__kv_slot__init(sl);
		kr->slots[kr->n_slots++] = sl;
		char msg[300] = "";
		int rc = check_key(&it->key, msg, sizeof(msg));
		if (rc == MORI_OK && it->size == 0) {
			rc = MORI_EINVAL;
			snprintf(msg, sizeof(msg), "value of 0 bytes");
		} else if (rc == MORI_OK && (it->size > (uint64_t)cfg->kv_value_max || it->size > (uint64_t)cfg->kv_dram_bytes)) {
			rc = MORI_EMSGSIZE;
			snprintf(msg, sizeof(msg), "value of %llu bytes is larger than the store takes (kv_value_max %lld, "
				 "kv_dram_bytes %lld)", (unsigned long long)it->size, (long long)cfg->kv_value_max,
				 (long long)cfg->kv_dram_bytes);
		} else if (rc == MORI_OK && it->pin > 2) {
			rc = MORI_EINVAL;
			snprintf(msg, sizeof(msg), "pin %u is not none (0), soft (1) or hard (2)", it->pin);
		}
		struct kv_entry *e = NULL;
		uint64_t id = 0;
		if (rc == MORI_OK)
			rc = kv_put_alloc(st, kc, it->key.data, it->key.len, it->size, it->depth, (int)it->pin, &e, &id, msg,
					  sizeof(msg));
		if (rc == MORI_OK) {
			rc = kv_fill_slot(st, kc, rep, r, sl, e);
			if (rc != MORI_OK) {
				kv_put_commit(st, kc, id, 1, NULL, NULL, msg, sizeof(msg));
				snprintf(msg, sizeof(msg), rc == MORI_EAGAIN ? "reply full of descriptors: ask again" :
					 "cannot pass the slab's descriptor");
			}
		}
		sl->status = rc;
		if (rc == MORI_OK)
			sl->id = id;
		else
			kv_first_error(rep, r, msg);
	}
}

/* Gets: values in DRAM answered now; a batch with values on SSD is answered when the last read
 * lands (1: deferred, the reply moved into g). */
static int do_get(struct kv_store *st, struct kv_client *kc, Mori__KvRequest *kq, Mori__KvReply *kr,
		  Mori__Reply *rep, struct rctx *r)
{
	kr->slots = ALLOC(r, Mori__KvSlot *, kq->n_items);
	kr->slabs = ALLOC(r, Mori__KvSlab *, kq->n_items);
	struct kv_pget *g = calloc(1, sizeof(*g));
	if (!kr->slots || !kr->slabs || !g) {
		free(g);
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return 0;
	}
	g->waiting = 1; /* this function's own, dropped at its end */
	for (size_t i = 0; i < kq->n_items; i++) {
		Mori__KvItem *it = kq->items[i];
		Mori__KvSlot *sl = rctx_alloc(r, sizeof(*sl));
		if (!sl) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			break;
		}
		mori__kv_slot__init(sl);
		kr->slots[kr->n_slots++] = sl;
		char msg[300] = "";
		int rc = check_key(&it->key, msg, sizeof(msg));
		struct kv_entry *e = NULL;
		uint64_t id = 0;
		if (rc == MORI_OK)
			rc = kv_get(st, kc, it->key.data, it->key.len, &e, &id, g, sl);
		if (rc == MORI_EINPROGRESS)
			continue; /* its read fills the slot */
		if (rc == MORI_OK) {
			rc = kv_fill_slot(st, kc, rep, r, sl, e);
			if (rc != MORI_OK)
				kv_release(st, kc, id);
		}
		sl->status = rc;
		if (rc == MORI_OK)
			sl->id = id;
		else if (rc != MORI_ENOENT)
			kv_first_error(rep, r, msg[0] ? msg : mori_strerror(rc));
	}
	/* misses asked of another node's daemon where the request names one (kv_remote.c) */
	struct kv_remote_key *rk = NULL;
	uint32_t nrk = 0;
	int named = kq->holder && kq->holder[0];
	if ((named || kv_cluster_on(st)) && kr->n_slots == kq->n_items && rep->code == 0) {
		rk = calloc(kr->n_slots, sizeof(*rk));
		for (size_t i = 0; rk && i < kr->n_slots; i++)
			if (kr->slots[i]->status == MORI_ENOENT)
				rk[nrk++] = (struct kv_remote_key){kr->slots[i], kq->items[i]->key, 0, kq->items[i]->region,
								   kq->items[i]->region_offset, kq->items[i]->cap};
	}
	if (g->waiting == 1 && nrk == 0) {
		free(rk);
		free(g);
		return 0;
	}
	/* reads or fetches are in flight: the reply waits for them in g (the dispatcher's copies are
	 * dropped) */
	g->kc = kc;
	g->rep = *rep;
	g->r = *r;
	list_add(&kc->pgets, &g->link);
	if (nrk) {
		uint32_t ms = kq->timeout_ms && kq->timeout_ms < (uint64_t)st->d->cfg.kv_timeout_ms ?
			kq->timeout_ms : (uint32_t)st->d->cfg.kv_timeout_ms;
		int rc = named ? kv_remote_get(st, g, kc->c->uid, kq->holder, 0, rk, nrk, ms)
			       : kv_remote_locate_get(st, g, kc->c->uid, rk, nrk, ms);
		if (named && rc != MORI_EINPROGRESS && rc != MORI_ENOENT)
			for (uint32_t i = 0; i < nrk; i++)
				rk[i].sl->status = rc;
	}
	free(rk);
	if (--g->waiting == 0)
		kv_pget_done(st, g);
	return 1;
}

static void do_ids(struct kv_store *st, struct kv_client *kc, Mori__KvRequest *kq, Mori__KvReply *kr,
		   Mori__Reply *rep, struct rctx *r)
{
	kr->status = ALLOC(r, int32_t, kq->n_ids);
	if (!kr->status) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	struct kv_entry *parent = NULL;
	for (size_t i = 0; i < kq->n_ids; i++) {
		char msg[200] = "";
		int rc;
		if (kq->op == MORI__KV_OP__KV_PUT_COMMIT) {
			/* a batch put's items in order: each one's parent in its chain is the one before */
			struct kv_entry *e = NULL;
			rc = kv_put_commit(st, kc, kq->ids[i], kq->abort, parent, &e, msg, sizeof(msg));
			parent = rc == MORI_OK ? e : NULL;
			if (rc == MORI_OK && e && !kq->abort)
				kv_place_put(st, e); /* past the high watermark: to the node with most room */
		} else {
			rc = kv_release(st, kc, kq->ids[i]);
			if (rc == MORI_EINVAL)
				snprintf(msg, sizeof(msg), "no lease %llx of this client", (unsigned long long)kq->ids[i]);
			else if (rc == MORI_ETIMEDOUT)
				snprintf(msg, sizeof(msg), "lease %llx had expired (kv_lease_max_ms): the value may have been "
					 "overwritten while it was read", (unsigned long long)kq->ids[i]);
		}
		kr->status[kr->n_status++] = rc;
		if (rc != MORI_OK)
			kv_first_error(rep, r, msg);
	}
}

static void do_keys(struct kv_store *st, uid_t uid, Mori__KvRequest *kq, Mori__KvReply *kr, Mori__Reply *rep,
		    struct rctx *r)
{
	int exists = kq->op == MORI__KV_OP__KV_EXISTS;
	if (exists)
		kr->present = ALLOC(r, protobuf_c_boolean, kq->n_items);
	else
		kr->status = ALLOC(r, int32_t, kq->n_items);
	if (exists ? !kr->present : !kr->status) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	int run = 1;
	for (size_t i = 0; i < kq->n_items; i++) {
		Mori__KvItem *it = kq->items[i];
		char msg[300] = "";
		int rc = check_key(&it->key, msg, sizeof(msg));
		if (exists) {
			int p = rc == MORI_OK && kv_lookup(st, uid, it->key.data, it->key.len) != NULL;
			kr->present[kr->n_present++] = p;
			run = run && p;
			kr->count += run;
			if (rc != MORI_OK)
				kv_first_error(rep, r, msg);
			if (kq->consecutive && !run)
				break;
			continue;
		}
		if (rc == MORI_OK && kq->op == MORI__KV_OP__KV_REMOVE)
			rc = kv_remove(st, uid, it->key.data, it->key.len);
		else if (rc == MORI_OK && it->pin > 2)
			rc = MORI_EINVAL, snprintf(msg, sizeof(msg), "pin %u is not none (0), soft (1) or hard (2)", it->pin);
		else if (rc == MORI_OK)
			rc = kv_pin(st, uid, it->key.data, it->key.len, (int)it->pin, msg, sizeof(msg));
		kr->status[kr->n_status++] = rc;
		if (rc != MORI_OK && rc != MORI_ENOENT)
			kv_first_error(rep, r, msg);
	}
}

struct pflush {
	struct kv_client *kc; /* checked against its client still being there */
	uint64_t client_id;
	struct morid *d;
	uint64_t req_id;
};

/* The deferred answer to a flush or clear, to its client if still there; frees f. */
static void pending_reply(struct pflush *f, int rc, uint64_t count, const char *what, const char *msg)
{
	struct client *c = client_find(f->d, f->client_id);
	if (c) {
		Mori__Reply rep = MORI__REPLY__INIT;
		struct rctx r = {0};
		Mori__KvReply kr = MORI__KV_REPLY__INIT;
		rep.id = f->req_id;
		rep.body_case = MORI__REPLY__BODY_KV;
		rep.kv = &kr;
		kr.count = count;
		if (rc != MORI_OK) {
			rep.body_case = MORI__REPLY__BODY__NOT_SET;
			reply_error(&rep, rc, "%s: %s", what, msg);
		}
		client_reply(c, &rep, &r);
		rctx_free(&r);
	}
	free(f);
}

static void flush_done(void *arg, int rc, const struct kv_ssd_loc *loc, const char *msg)
{
	(void)loc;
	pending_reply(arg, rc, 0, "flush of the SSD tier", msg);
}

static void clear_done(void *arg, int rc, uint64_t n)
{
	pending_reply(arg, rc, n, "clear", "the store stopped first");
}

/* Clear: answered once the store's walk has removed every value the uid had committed. */
static int do_clear(struct kv_store *st, struct kv_client *kc, Mori__Reply *rep, struct rctx *r)
{
	struct pflush *f = calloc(1, sizeof(*f));
	int rc = f ? MORI_OK : MORI_ENOMEM;
	if (f) {
		*f = (struct pflush){kc, kc->c->id, st->d, rep->id};
		rc = kv_clear(st, kc->c->uid, clear_done, f);
	}
	if (rc == MORI_OK) {
		rctx_free(r);
		return 1;
	}
	free(f);
	reply_error(rep, rc, rc == MORI_ENOMEM ? "out of memory" : "the store is closing");
	return 0;
}

/* Flush: answered when every spill so far is durable (at once without an SSD tier). */
static int do_flush(struct kv_store *st, struct kv_client *kc, Mori__Reply *rep, struct rctx *r)
{
	struct pflush *f = calloc(1, sizeof(*f));
	if (!f) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return 0;
	}
	*f = (struct pflush){kc, kc->c->id, st->d, rep->id};
	int rc = kv_flush(st, flush_done, f);
	if (rc == MORI_EINPROGRESS) {
		rctx_free(r);
		return 1;
	}
	free(f);
	if (rc != MORI_OK)
		reply_error(rep, rc, "the SSD tier is closing");
	return 0;
}

static void uid_stats(Mori__KvUidStats *us, const struct kv_uid *u, uint64_t quota)
{
	mori__kv_uid_stats__init(us);
	us->uid = u->uid;
	us->keys = u->keys;
	us->used_bytes = u->used;
	us->quota_bytes = quota;
	us->hard_pinned_bytes = u->hard_pinned;
	us->hits = u->hits;
	us->misses = u->misses;
	us->evictions = u->evictions;
	us->spills = u->spills;
	us->promotions = u->promotions;
	us->dram_keys = u->dram_keys;
	us->dram_bytes = u->dram_bytes;
	us->ssd_keys = u->ssd_keys;
	us->ssd_bytes = u->ssd_bytes;
}

int kv_stats_fill(struct morid *d, Mori__KvStats *s, struct rctx *r, int all_uids, uid_t uid)
{
	struct kv_store *st = d->kv;
	mori__kv_stats__init(s);
	if (!st)
		return 0;
	struct kv_dram_stats ds;
	kv_dram_stats_get(st->dram, &ds);
	s->dram_keys = st->dram_keys;
	s->dram_bytes = st->dram_bytes;
	s->dram_capacity = (uint64_t)d->cfg.kv_dram_bytes;
	s->dram_allocated = ds.allocated;
	s->dram_slab_bytes = ds.slab_bytes;
	s->ssd_keys = st->ssd_keys;
	s->ssd_bytes = st->ssd_bytes;
	s->ssd_capacity = st->ssd ? (uint64_t)d->cfg.kv_ssd_bytes : 0;
	s->hits = st->hits;
	s->misses = st->misses;
	s->evictions = st->evictions;
	s->spills = st->spills;
	s->promotions = st->promotions;
	s->leases = st->leases;
	s->reservations = st->reservations;
	s->expired_leases = st->expired;
	s->puts = st->puts;
	s->zombies = st->zombies;
	s->ssd_errors = st->ssd_errors;
	s->index_bytes = kv_index_bytes(&st->idx) + st->entry_bytes + ds.meta_bytes;
	s->policy = (char *)kv_policy_name(st->policy);
	kv_cluster_stats_fill(st, s, r);
	struct kv_remote_stats rs;
	kv_remote_stats(st, &rs);
	s->remote_fetched = rs.fetched;
	s->remote_fetched_bytes = rs.fetched_bytes;
	s->remote_misses = rs.fetch_misses;
	s->remote_errors = rs.fetch_errors;
	s->remote_served = rs.served;
	s->remote_served_bytes = rs.served_bytes;
	s->remote_leases = rs.peer_leases;
	s->placed = rs.placed;
	s->placed_bytes = rs.placed_bytes;
	s->place_failed = rs.place_failed;
	s->placed_here = rs.placed_here;
	s->remote_delivered = rs.delivered;
	s->remote_served_ssd = rs.served_ssd;
	s->uids = ALLOC(r, Mori__KvUidStats *, st->nuids);
	if (!s->uids)
		return MORI_ENOMEM;
	for (uint32_t i = 0; i < st->nuids; i++) {
		if (!all_uids && st->uids[i].uid != uid)
			continue;
		Mori__KvUidStats *us = rctx_alloc(r, sizeof(*us));
		if (!us)
			return MORI_ENOMEM;
		uid_stats(us, &st->uids[i], (uint64_t)d->cfg.kv_uid_quota_bytes);
		s->uids[s->n_uids++] = us;
	}
	return 1;
}

int kv_handle_request(struct morid *d, struct client *c, uid_t uid, Mori__KvRequest *kq, Mori__Reply *rep,
		      struct rctx *r)
{
	struct kv_store *st = d->kv;
	const struct config *cfg = &d->cfg;
	if (!st) {
		reply_error(rep, MORI_ENOTSUP, "morid runs without a KV store (kv_dram_bytes = 0)");
		return 0;
	}
	if (!c && kq->op != MORI__KV_OP__KV_STATS) {
		reply_error(rep, MORI_EPROTO, "KV requests but STATS need an attached session");
		return 0;
	}
	/* lookups take no slots: they go by KV_LOOKUP_MAX, the rest by kv_batch_max */
	int lookup = kq->op == MORI__KV_OP__KV_EXISTS || kq->op >= MORI__KV_OP__KV_EXT_REPORT;
	size_t bmax = lookup ? KV_LOOKUP_MAX : (size_t)cfg->kv_batch_max;
	if (kq->n_items > bmax || kq->n_ids > bmax) {
		reply_error(rep, MORI_EINVAL, "batch of %zu items over %s (%zu)", kq->n_items > kq->n_ids ? kq->n_items : kq->n_ids,
			    lookup ? "the lookup limit" : "kv_batch_max", bmax);
		return 0;
	}
	struct kv_client *kc = c ? kv_client_of(st, c) : NULL;
	Mori__KvReply *kr = rctx_alloc(r, sizeof(*kr));
	if (!kr || (c && !kc)) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return 0;
	}
	mori__kv_reply__init(kr);
	rep->body_case = MORI__REPLY__BODY_KV;
	rep->kv = kr;
	switch (kq->op) {
	case MORI__KV_OP__KV_OPEN: {
		Mori__KvInfo *in = rctx_alloc(r, sizeof(*in));
		if (!in)
			break;
		mori__kv_info__init(in);
		in->dram_capacity = (uint64_t)cfg->kv_dram_bytes;
		in->value_max = (uint64_t)cfg->kv_value_max;
		in->batch_max = (uint32_t)cfg->kv_batch_max;
		in->timeout_ms = (uint32_t)cfg->kv_timeout_ms;
		in->lease_max_ms = (uint32_t)cfg->kv_lease_max_ms;
		in->key_max = KV_KEY_MAX;
		in->lookup_max = KV_LOOKUP_MAX;
		struct kv_cluster_stats cs;
		kv_cluster_stats_get(st, &cs);
		in->index = (char *)cs.backend;
		kr->info = in;
		return 0;
	}
	case MORI__KV_OP__KV_PUT_ALLOC:
		do_put_alloc(st, kc, kq, kr, rep, r);
		return 0;
	case MORI__KV_OP__KV_GET:
		return do_get(st, kc, kq, kr, rep, r);
	case MORI__KV_OP__KV_PUT_COMMIT:
	case MORI__KV_OP__KV_RELEASE:
		do_ids(st, kc, kq, kr, rep, r);
		return 0;
	case MORI__KV_OP__KV_EXISTS:
		if (kv_cluster_on(st) && !kq->local && kq->n_items)
			return kv_cluster_request(st, c, kq, kr, rep, r);
		/* fall through */
	case MORI__KV_OP__KV_REMOVE:
	case MORI__KV_OP__KV_PIN:
		do_keys(st, c->uid, kq, kr, rep, r);
		return 0;
	case MORI__KV_OP__KV_CLEAR:
		return do_clear(st, kc, rep, r);
	case MORI__KV_OP__KV_FLUSH:
		return do_flush(st, kc, rep, r);
	case MORI__KV_OP__KV_STATS: {
		Mori__KvStats *s = rctx_alloc(r, sizeof(*s));
		if (!s || kv_stats_fill(d, s, r, kq->node && (uid == 0 || uid == getuid()), uid) < 0)
			break;
		kr->stats = s;
		return 0;
	}
	case MORI__KV_OP__KV_CLOSE:
		kv_client_reset(st, kc);
		return 0;
	case MORI__KV_OP__KV_EXT_REPORT:
	case MORI__KV_OP__KV_EXT_REVOKE:
	case MORI__KV_OP__KV_EXT_REVOKE_TIER:
	case MORI__KV_OP__KV_EXT_MATCH:
	case MORI__KV_OP__KV_EXT_HITS:
		return kv_cluster_request(st, c, kq, kr, rep, r);
	default:
		rep->body_case = MORI__REPLY__BODY__NOT_SET;
		reply_error(rep, MORI_EINVAL, "unknown KV op %d", (int)kq->op);
		return 0;
	}
	rep->body_case = MORI__REPLY__BODY__NOT_SET;
	reply_error(rep, MORI_ENOMEM, "out of memory");
	return 0;
}

void kv_client_gone(struct morid *d, struct client *c)
{
	if (d->kv)
		kv_ext_client_gone(d->kv, c);
	if (!c->kv)
		return;
	if (d->kv)
		kv_client_reset(d->kv, c->kv);
	free(c->kv);
	c->kv = NULL;
}

int kv_start(struct morid *d)
{
	if (d->cfg.kv_dram_bytes == 0)
		return 0;
	char err[300];
	if (!(d->kv = kv_store_new(d, err, sizeof(err)))) {
		mlog_err("kv", "%s", err);
		return -1;
	}
	if (kv_ssd_start(d->kv, err, sizeof(err)) != MORI_OK) {
		mlog_err("kv", "SSD tier: %s", err);
		kv_stop(d);
		return -1;
	}
	if (kv_remote_start(d->kv) != MORI_OK) {
		mlog_err("kv", "out of memory for the store's remote gets");
		kv_stop(d);
		return -1;
	}
	kv_place_start(d->kv);
	if (d->kv->ssd)
		mlog_info("kv", "SSD tier in %s: %llu keys found", d->cfg.kv_ssd_dir, (unsigned long long)d->kv->ssd_keys);
	if (kv_cluster_start(d, d->kv) != 0 || kv_ext_start(d->kv) != 0) {
		kv_stop(d);
		return -1;
	}
	mlog_info("kv", "KV store: DRAM tier of %lld bytes in slabs of %lld, policy %s", (long long)d->cfg.kv_dram_bytes,
		  (long long)d->cfg.kv_slab_bytes, d->cfg.kv_policy);
	return 0;
}

void kv_stop(struct morid *d)
{
	kv_ext_stop(d->kv);
	kv_cluster_stop(d->kv); /* lookups end first: a get waiting for one then asks no holder */
	if (d->kv) {
		kv_place_stop(d->kv);
		kv_remote_stop(d->kv);
		kv_clear_stop(d->kv);
	}
	kv_store_free(d->kv);
	d->kv = NULL;
}
