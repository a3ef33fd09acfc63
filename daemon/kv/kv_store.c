/* The KV store's entries (kv_int.h): versions of keys, the reservations of puts and the leases
 * of gets that clients hold on them, eviction under the watermarks and the uids' quotas, pins.
 * A version lives while it is in the index or while anyone holds it (refs): a put replacing a
 * key, a remove or an eviction takes it out of the index, and the last lease frees it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "invariant.h"
#include "kv/kv_int.h"
#include "log.h"

#define KV_HOLDS_MAX (1u << 20) /* holds one client may have at once (each names a hold slot) */
#define HOLD_IDX_BITS 24

static struct kv_entry *entry_of(struct kv_pnode *n)
{
	return (struct kv_entry *)((char *)n - offsetof(struct kv_entry, pn));
}

struct kv_uid *kv_uid_get(struct kv_store *st, uid_t uid)
{
	for (uint32_t i = 0; i < st->nuids; i++)
		if (st->uids[i].uid == uid)
			return &st->uids[i];
	struct kv_uid *nu = realloc(st->uids, sizeof(*nu) * (st->nuids + 1));
	MORI_REQUIRE(nu, "out of memory for a uid's record"); /* tens of bytes, once per uid */
	st->uids = nu;
	memset(&nu[st->nuids], 0, sizeof(*nu));
	nu[st->nuids].uid = uid;
	return &nu[st->nuids++];
}

/* ---- entries ---- */

static void entry_free(struct kv_store *st, struct kv_entry *e)
{
	struct kv_uid *u = kv_uid_get(st, e->uid);
	if (e->tier == KV_TIER_DRAM)
		kv_dram_release(st->dram, &e->u.ext);
	MORI_REQUIRE(u->used >= e->size, "uid usage underflow");
	u->used -= e->size;
	if (e->state == KV_ZOMBIE)
		st->zombies--;
	st->entry_bytes -= sizeof(*e) + e->key_len;
	free(e);
}

/* e leaves the index (replaced, removed, evicted: evicted tells the policy it was its victim);
 * freed now unless held. */
static void entry_unlink(struct kv_store *st, struct kv_entry *e, int evicted)
{
	MORI_REQUIRE(e->state == KV_LIVE, "unlink of an entry not in the index");
	struct kv_uid *u = kv_uid_get(st, e->uid);
	kv_index_remove(&st->idx, e);
	if (e->flags & KV_F_IN_POLICY) {
		if (evicted)
			kv_policy_evicted(st->pol, &e->pn);
		else
			kv_policy_remove(st->pol, &e->pn);
		e->flags &= (uint8_t)~KV_F_IN_POLICY;
	}
	u->keys--;
	if (e->tier == KV_TIER_DRAM) {
		u->dram_keys--, u->dram_bytes -= e->size;
		st->dram_keys--, st->dram_bytes -= e->size;
	}
	if (e->pin == 2)
		u->hard_pinned -= e->size;
	if (e->refs) {
		e->state = KV_ZOMBIE;
		st->zombies++;
		return;
	}
	entry_free(st, e);
}

/* ---- eviction ---- */

struct evict_ctx {
	uid_t uid;
	int uid_only;  /* a uid at its quota: only its own values */
	int soft_ok;   /* second pass: soft-pinned values too */
};

static int skip_victim(struct kv_pnode *n, void *arg)
{
	struct evict_ctx *x = arg;
	struct kv_entry *e = entry_of(n);
	return e->refs || (e->flags & (KV_F_SPILLING | KV_F_READING)) || (x->uid_only && e->uid != x->uid) ||
	       (e->pin == 1 && !x->soft_ok);
}

/* Evict one value (soft-pinned ones only when nothing else can go). 1 when one went. */
static int evict_one(struct kv_store *st, struct evict_ctx *x)
{
	struct kv_pnode *n = kv_policy_victim(st->pol, skip_victim, x);
	if (!n && !x->soft_ok) {
		x->soft_ok = 1;
		n = kv_policy_victim(st->pol, skip_victim, x);
	}
	if (!n)
		return 0;
	struct kv_entry *e = entry_of(n);
	struct kv_uid *u = kv_uid_get(st, e->uid);
	u->evictions++;
	st->evictions++;
	entry_unlink(st, e, 1);
	return 1;
}

/* Room for a value of size bytes for uid (quota, then the watermarks), then its DRAM run. */
static int make_room(struct kv_store *st, uid_t uid, uint64_t size, int pin, struct kv_ext *ext, char *msg,
		     size_t msglen)
{
	const struct config *cfg = &st->d->cfg;
	struct kv_uid *u = kv_uid_get(st, uid);
	uint64_t quota = (uint64_t)cfg->kv_uid_quota_bytes;
	if (quota && pin == 2 && u->hard_pinned + size > quota) {
		snprintf(msg, msglen, "hard pin of %llu bytes would take uid %u past its quota (%llu of %llu bytes "
			 "hard-pinned)", (unsigned long long)size, (unsigned)uid, (unsigned long long)u->hard_pinned,
			 (unsigned long long)quota);
		return MORI_ENOMEM;
	}
	struct evict_ctx own = {.uid = uid, .uid_only = 1};
	while (quota && u->used + size > quota)
		if (!evict_one(st, &own)) {
			snprintf(msg, msglen, "uid %u is at its quota (%llu of %llu bytes) and none of its values can be "
				 "evicted (leased or hard-pinned)", (unsigned)uid, (unsigned long long)u->used,
				 (unsigned long long)quota);
			return MORI_ENOMEM;
		}
	struct kv_dram_stats ds;
	kv_dram_stats_get(st->dram, &ds);
	uint64_t cap = (uint64_t)cfg->kv_dram_bytes, need = (size + KV_GRANULE - 1) / KV_GRANULE * KV_GRANULE;
	uint64_t high = cap / 100 * (uint64_t)cfg->kv_high_watermark, low = cap / 100 * (uint64_t)cfg->kv_low_watermark;
	struct evict_ctx any = {0};
	if (ds.allocated + need > high)
		while (ds.allocated + need > low && evict_one(st, &any))
			kv_dram_stats_get(st->dram, &ds);
	while (ds.allocated + need > cap) {
		if (!evict_one(st, &any))
			goto full;
		kv_dram_stats_get(st->dram, &ds);
	}
	for (;;) {
		int rc = kv_dram_alloc(st->dram, uid, size, ext);
		if (rc == MORI_OK)
			break;
		if (rc != MORI_ENOMEM) {
			snprintf(msg, msglen, "DRAM tier: cannot make a slab: %s", strerror(errno));
			return rc;
		}
		if (!evict_one(st, &any))
			goto full;
	}
	u->used += size;
	return MORI_OK;
full:
	snprintf(msg, msglen, "DRAM tier full (%llu of %llu bytes) of values that cannot be evicted (leased or "
		 "pinned)", (unsigned long long)ds.allocated, (unsigned long long)cap);
	return MORI_ENOMEM;
}

/* ---- holds ---- */

static void timer_arm(struct kv_store *st);

static int hold_add(struct kv_store *st, struct kv_client *kc, int kind, struct kv_entry *e, uint64_t *id)
{
	if (kc->live >= KV_HOLDS_MAX)
		return MORI_EAGAIN;
	uint32_t idx;
	if (kc->nfree) {
		idx = kc->free_idx[--kc->nfree];
	} else {
		if (kc->nholds == kc->cap_holds) {
			uint32_t ncap = kc->cap_holds ? 2 * kc->cap_holds : 64;
			struct kv_hold **nh = realloc(kc->holds, sizeof(*nh) * ncap);
			if (!nh)
				return MORI_ENOMEM;
			kc->holds = nh;
			uint32_t *nf = realloc(kc->free_idx, sizeof(*nf) * ncap);
			if (!nf)
				return MORI_ENOMEM;
			kc->free_idx = nf;
			kc->cap_holds = ncap;
		}
		idx = kc->nholds++;
	}
	struct kv_hold *h = calloc(1, sizeof(*h));
	if (!h) {
		kc->free_idx[kc->nfree++] = idx;
		return MORI_ENOMEM;
	}
	h->id = (++st->hold_seq << HOLD_IDX_BITS) | idx;
	h->e = e;
	h->kc = kc;
	h->kind = (uint8_t)kind;
	h->deadline_ms = uv_now(st->d->loop) + (uint64_t)st->d->cfg.kv_lease_max_ms;
	list_add(&st->expiry, &h->link);
	kc->holds[idx] = h;
	kc->live++;
	if (kind == KV_HOLD_LEASE)
		st->leases++;
	else
		st->reservations++;
	*id = h->id;
	timer_arm(st);
	return MORI_OK;
}

/* kc's hold named id, of kind; NULL for an id that is not one of kc's (forged, another client's,
 * already ended). */
static struct kv_hold *hold_find(struct kv_client *kc, uint64_t id, int kind)
{
	uint32_t idx = (uint32_t)(id & ((1u << HOLD_IDX_BITS) - 1));
	if (idx >= kc->nholds || !kc->holds[idx] || kc->holds[idx]->id != id || kc->holds[idx]->kind != kind)
		return NULL;
	return kc->holds[idx];
}

/* What the hold kept ends: a reservation's slot is freed, a lease's version let go. */
static void hold_let_go(struct kv_store *st, struct kv_hold *h)
{
	struct kv_entry *e = h->e;
	if (!e)
		return;
	h->e = NULL;
	list_del(&h->link);
	if (h->kind == KV_HOLD_LEASE) {
		st->leases--;
		MORI_REQUIRE(e->refs > 0, "lease on an entry without references");
		if (--e->refs == 0 && e->state == KV_ZOMBIE)
			entry_free(st, e);
	} else {
		st->reservations--;
		entry_free(st, e);
	}
}

static void hold_drop(struct kv_store *st, struct kv_hold *h)
{
	struct kv_client *kc = h->kc;
	hold_let_go(st, h);
	uint32_t idx = (uint32_t)(h->id & ((1u << HOLD_IDX_BITS) - 1));
	kc->holds[idx] = NULL;
	kc->free_idx[kc->nfree++] = idx;
	kc->live--;
	free(h);
}

/* Holds past their deadline end: leases let their version go (a release then says it expired),
 * reservations free their slot (a commit then fails). */
static void on_expiry(uv_timer_t *t)
{
	struct kv_store *st = t->data;
	uint64_t now = uv_now(st->d->loop);
	st->timer_at = 0;
	while (st->expiry.next != &st->expiry) {
		struct kv_hold *h = list_entry(st->expiry.next, struct kv_hold, link);
		if (h->deadline_ms > now)
			break;
		mlog_info("kv", "client %llu: %s %llx expired after kv_lease_max_ms", (unsigned long long)h->kc->c->id,
			  h->kind == KV_HOLD_LEASE ? "lease" : "reservation", (unsigned long long)h->id);
		hold_let_go(st, h);
		h->expired = 1;
		st->expired++;
	}
	timer_arm(st);
}

static void timer_arm(struct kv_store *st)
{
	if (st->expiry.next == &st->expiry)
		return;
	struct kv_hold *h = list_entry(st->expiry.next, struct kv_hold, link);
	if (st->timer_at && st->timer_at <= h->deadline_ms)
		return;
	uint64_t now = uv_now(st->d->loop);
	st->timer_at = h->deadline_ms;
	uv_timer_start(&st->timer, on_expiry, h->deadline_ms > now ? h->deadline_ms - now : 0, 0);
}

/* ---- clients ---- */

struct kv_client *kv_client_of(struct kv_store *st, struct client *c)
{
	if (c->kv)
		return c->kv;
	struct kv_client *kc = calloc(1, sizeof(*kc));
	if (!kc)
		return NULL;
	kc->c = c;
	c->kv = kc;
	return kc;
}

void kv_client_reset(struct kv_store *st, struct kv_client *kc)
{
	for (uint32_t i = 0; i < kc->nholds; i++)
		if (kc->holds[i])
			hold_drop(st, kc->holds[i]);
	free(kc->holds);
	free(kc->free_idx);
	free(kc->sent);
	kc->holds = NULL;
	kc->free_idx = NULL;
	kc->sent = NULL;
	kc->nholds = kc->cap_holds = kc->nfree = kc->live = kc->nsent = 0;
}

int kv_slab_send(struct kv_client *kc, const struct kv_slab *s)
{
	if (s->dedicated)
		return 1; /* the client maps it for one copy and lets it go */
	if (s->index >= kc->nsent) {
		uint32_t n = s->index + 16;
		uint32_t *ns = realloc(kc->sent, sizeof(*ns) * n);
		if (!ns)
			return MORI_ENOMEM;
		memset(ns + kc->nsent, 0, sizeof(*ns) * (n - kc->nsent));
		kc->sent = ns;
		kc->nsent = n;
	}
	if (kc->sent[s->index] == s->id)
		return 0;
	kc->sent[s->index] = s->id;
	return 1;
}

/* ---- operations ---- */

struct kv_entry *kv_lookup(struct kv_store *st, uid_t uid, const void *key, size_t klen)
{
	return kv_index_find(&st->idx, uid, key, klen, kv_index_hash(&st->idx, uid, key, klen));
}

int kv_put_alloc(struct kv_store *st, struct kv_client *kc, const void *key, size_t klen, uint64_t size, int depth,
		 int pin, struct kv_entry **out, uint64_t *id, char *msg, size_t msglen)
{
	uid_t uid = kc->c->uid;
	struct kv_entry *e = calloc(1, sizeof(*e) + klen);
	if (!e) {
		snprintf(msg, msglen, "out of memory");
		return MORI_ENOMEM;
	}
	int rc = make_room(st, uid, size, pin, &e->u.ext, msg, msglen);
	if (rc != MORI_OK) {
		free(e);
		return rc;
	}
	e->tier = KV_TIER_DRAM;
	e->size = size;
	e->uid = uid;
	e->key_len = (uint16_t)klen;
	memcpy(e->key, key, klen);
	e->hash = (uint32_t)kv_index_hash(&st->idx, uid, key, klen);
	e->pin = (uint8_t)pin;
	e->depth = (int8_t)(depth < -1 ? -1 : depth > 127 ? 127 : depth);
	e->state = KV_RESERVED;
	st->entry_bytes += sizeof(*e) + klen;
	rc = hold_add(st, kc, KV_HOLD_RES, e, id);
	if (rc != MORI_OK) {
		entry_free(st, e);
		snprintf(msg, msglen, rc == MORI_EAGAIN ? "client holds %u reservations and leases already" : "out of memory",
			 KV_HOLDS_MAX);
		return rc;
	}
	*out = e;
	return MORI_OK;
}

int kv_put_commit(struct kv_store *st, struct kv_client *kc, uint64_t id, int abort, char *msg, size_t msglen)
{
	struct kv_hold *h = hold_find(kc, id, KV_HOLD_RES);
	if (!h) {
		snprintf(msg, msglen, "no reservation %llx of this client", (unsigned long long)id);
		return MORI_EINVAL;
	}
	if (h->expired) {
		hold_drop(st, h);
		snprintf(msg, msglen, "reservation %llx expired (kv_lease_max_ms): put again", (unsigned long long)id);
		return MORI_ETIMEDOUT;
	}
	if (abort) {
		hold_drop(st, h);
		return MORI_OK;
	}
	struct kv_entry *e = h->e;
	h->e = NULL; /* the index owns e from here */
	list_del(&h->link);
	st->reservations--;
	hold_drop(st, h);
	struct kv_entry *old = kv_index_find(&st->idx, e->uid, e->key, e->key_len, e->hash);
	if (old)
		entry_unlink(st, old, 0);
	e->gen = ++st->gen;
	e->state = KV_LIVE;
	kv_index_insert(&st->idx, e); /* a table that could not grow only makes chains longer */
	struct kv_uid *u = kv_uid_get(st, e->uid);
	u->keys++;
	u->dram_keys++, u->dram_bytes += e->size;
	st->dram_keys++, st->dram_bytes += e->size;
	st->puts++;
	if (e->pin == 2) {
		u->hard_pinned += e->size;
	} else {
		kv_policy_insert(st->pol, &e->pn, e->hash, e->size, e->depth, NULL);
		e->flags |= KV_F_IN_POLICY;
	}
	return MORI_OK;
}

int kv_get(struct kv_store *st, struct kv_client *kc, const void *key, size_t klen, struct kv_entry **out,
	   uint64_t *id)
{
	struct kv_uid *u = kv_uid_get(st, kc->c->uid);
	struct kv_entry *e = kv_lookup(st, kc->c->uid, key, klen);
	if (!e) {
		u->misses++;
		st->misses++;
		return MORI_ENOENT;
	}
	if (e->tier != KV_TIER_DRAM)
		return MORI_ENOTSUP; /* the SSD tier's reads come with it */
	int rc = hold_add(st, kc, KV_HOLD_LEASE, e, id);
	if (rc != MORI_OK)
		return rc;
	e->refs++;
	u->hits++;
	st->hits++;
	if (e->flags & KV_F_IN_POLICY)
		kv_policy_hit(st->pol, &e->pn);
	*out = e;
	return MORI_OK;
}

int kv_release(struct kv_store *st, struct kv_client *kc, uint64_t id)
{
	struct kv_hold *h = hold_find(kc, id, KV_HOLD_LEASE);
	if (!h)
		return MORI_EINVAL;
	int expired = h->expired;
	hold_drop(st, h);
	return expired ? MORI_ETIMEDOUT : MORI_OK;
}

int kv_remove(struct kv_store *st, uid_t uid, const void *key, size_t klen)
{
	struct kv_entry *e = kv_lookup(st, uid, key, klen);
	if (!e)
		return MORI_ENOENT;
	entry_unlink(st, e, 0);
	return MORI_OK;
}

int kv_pin(struct kv_store *st, uid_t uid, const void *key, size_t klen, int pin, char *msg, size_t msglen)
{
	struct kv_entry *e = kv_lookup(st, uid, key, klen);
	if (!e)
		return MORI_ENOENT;
	struct kv_uid *u = kv_uid_get(st, uid);
	uint64_t quota = (uint64_t)st->d->cfg.kv_uid_quota_bytes;
	if (pin == e->pin)
		return MORI_OK;
	if (pin == 2) {
		if (quota && u->hard_pinned + e->size > quota) {
			snprintf(msg, msglen, "hard pin would take uid %u past its quota (%llu + %llu > %llu bytes)",
				 (unsigned)uid, (unsigned long long)u->hard_pinned, (unsigned long long)e->size,
				 (unsigned long long)quota);
			return MORI_ENOMEM;
		}
		u->hard_pinned += e->size;
		if (e->flags & KV_F_IN_POLICY) {
			kv_policy_remove(st->pol, &e->pn);
			e->flags &= (uint8_t)~KV_F_IN_POLICY;
		}
	} else if (e->pin == 2) {
		u->hard_pinned -= e->size;
		if (e->tier == KV_TIER_DRAM) {
			kv_policy_insert(st->pol, &e->pn, e->hash, e->size, e->depth, NULL);
			e->flags |= KV_F_IN_POLICY;
		}
	}
	e->pin = (uint8_t)pin;
	return MORI_OK;
}

struct clear_ctx {
	struct kv_store *st;
	uid_t uid;
	uint64_t n;
};

static int clear_one(struct kv_entry *e, void *arg)
{
	struct clear_ctx *x = arg;
	if (e->uid == x->uid) {
		entry_unlink(x->st, e, 0);
		x->n++;
	}
	return 0;
}

uint64_t kv_clear(struct kv_store *st, uid_t uid)
{
	struct clear_ctx x = {st, uid, 0};
	kv_index_each(&st->idx, clear_one, &x);
	return x.n;
}

/* ---- the store ---- */

struct kv_store *kv_store_new(struct morid *d, char *err, size_t errlen)
{
	const struct config *cfg = &d->cfg;
	int kind = kv_policy_parse(cfg->kv_policy);
	if (kind < 0) {
		snprintf(err, errlen, "kv_policy: '%s' is not a policy this morid knows", cfg->kv_policy);
		return NULL;
	}
	struct kv_store *st = calloc(1, sizeof(*st));
	if (!st)
		goto oom;
	st->d = d;
	st->policy = (enum kv_policy_kind)kind;
	LIST_INIT(&st->expiry);
	uint64_t cap = (uint64_t)cfg->kv_dram_bytes;
	if (kv_index_init(&st->idx) != MORI_OK)
		goto oom;
	/* slabs may exceed the capacity by one: a uid's last slab is kept while it has free runs */
	if (!(st->dram = kv_dram_new((uint64_t)cfg->kv_slab_bytes, cap + (uint64_t)cfg->kv_slab_bytes)) ||
	    !(st->pol = kv_policy_new(st->policy, cap)))
		goto oom;
	uv_timer_init(d->loop, &st->timer);
	st->timer.data = st;
	return st;
oom:
	snprintf(err, errlen, "out of memory");
	kv_store_free(st);
	return NULL;
}

static int free_entry_cb(struct kv_entry *e, void *arg)
{
	free(e); /* the tier goes whole after: no run is given back one by one */
	return 0;
}

static void timer_closed(uv_handle_t *h)
{
	free(h->data);
}

void kv_store_free(struct kv_store *st)
{
	if (!st)
		return;
	list_each(it, &st->d->clients) {
		struct client *c = list_entry(it, struct client, link);
		if (c->kv) {
			kv_client_reset(st, c->kv);
			free(c->kv);
			c->kv = NULL;
		}
	}
	if (st->dram)
		kv_index_each(&st->idx, free_entry_cb, st);
	kv_index_fini(&st->idx);
	kv_policy_free(st->pol);
	kv_dram_free(st->dram);
	free(st->uids);
	if (st->timer.data) {
		uv_close((uv_handle_t *)&st->timer, timer_closed);
		return;
	}
	free(st);
}
