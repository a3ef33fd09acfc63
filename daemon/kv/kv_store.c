/* The KV store's entries (kv_int.h): versions of keys, the reservations of puts and the leases
 * of gets that clients hold on them, eviction under the watermarks and the uids' quotas, pins.
 * A version lives while it is in the index or while anyone holds it (refs): a put replacing a
 * key, a remove or an eviction takes it out of the index, and the last lease frees it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "invariant.h"
#include "kv/kv_cluster.h"
#include "kv/kv_int.h"
#include "log.h"


static struct kv_entry *entry_of(struct kv_pnode *n)
{
	return (struct kv_entry *)((char *)n - offsetof(struct kv_entry, pn));
}

/* ---- entries ---- */

enum unlink_how {
	U_REMOVED,      /* removed or replaced: a tombstone keeps a restart from bringing it back */
	U_EVICTED,      /* evicted from DRAM: its policy's victim */
	U_EVICTED_SSD,  /* evicted from the SSD tier: gone */
	U_DROPPED,      /* its SSD record failed its checksum */
	U_PROMOTED,     /* read back into DRAM: its record stays, the DRAM copy's clean record */
};

/* The SSD record of a clean DRAM value (KV_F_CLEAN). Records sit at multiples of 4096 bytes. */
static struct kv_ssd_loc clean_loc(const struct kv_entry *e)
{
	return (struct kv_ssd_loc){.seg = e->clean_seg, .off = (uint64_t)e->clean_blk * 4096, .len = e->size};
}

static void clean_set(struct kv_entry *e, const struct kv_ssd_loc *loc)
{
	e->clean_seg = loc->seg;
	e->clean_blk = (uint32_t)(loc->off / 4096);
	e->flags |= KV_F_CLEAN;
}

/* A value read back or left in DRAM keeps its SSD record (clean) while the SSD tier could still
 * take the whole DRAM tier beside the records it holds. */
static int keep_clean(struct kv_store *st)
{
	return kv_ssd_free_bytes(st->ssd) >= (uint64_t)st->d->cfg.kv_dram_bytes;
}

/* e's clean record goes (with a tombstone where e was removed or replaced: a restart must not
 * bring back its bytes). */
static void clean_drop(struct kv_store *st, struct kv_entry *e, int tombstone)
{
	struct kv_ssd_loc loc = clean_loc(e);
	e->flags &= (uint8_t)~KV_F_CLEAN;
	if (st->ssd)
		kv_ssd_remove(st->ssd, &loc, e->key, e->key_len, e->uid, e->gen, tombstone);
}

static struct kv_policy *policy_of(struct kv_store *st, const struct kv_entry *e)
{
	return e->tier == KV_TIER_SSD ? st->pol_ssd : st->pol;
}

static void policy_out(struct kv_store *st, struct kv_entry *e, int evicted)
{
	if (!(e->flags & KV_F_IN_POLICY))
		return;
	if (evicted)
		kv_policy_evicted(policy_of(st, e), &e->pn);
	else
		kv_policy_remove(policy_of(st, e), &e->pn);
	e->flags &= (uint8_t)~KV_F_IN_POLICY;
}

static void policy_in(struct kv_store *st, struct kv_entry *e, struct kv_entry *parent)
{
	if (e->pin == 2 || (e->flags & KV_F_IN_POLICY))
		return;
	struct kv_policy *p = policy_of(st, e);
	kv_policy_insert(p, &e->pn, e->hash, e->size, e->depth,
			 parent && parent->tier == e->tier && (parent->flags & KV_F_IN_POLICY) ? &parent->pn : NULL);
	e->flags |= KV_F_IN_POLICY;
}

static void tier_count(struct kv_store *st, struct kv_entry *e, int sign)
{
	struct kv_uid *u = kv_uid_get(st, e->uid);
	int64_t b = sign * (int64_t)e->size;
	if (e->tier == KV_TIER_DRAM) {
		u->dram_keys += (uint64_t)(int64_t)sign, u->dram_bytes += (uint64_t)b;
		st->dram_keys += (uint64_t)(int64_t)sign, st->dram_bytes += (uint64_t)b;
	} else {
		u->ssd_keys += (uint64_t)(int64_t)sign, u->ssd_bytes += (uint64_t)b;
		st->ssd_keys += (uint64_t)(int64_t)sign, st->ssd_bytes += (uint64_t)b;
	}
}

/* e leaves the index; freed now unless held (leases, I/O in flight). */
static void entry_unlink(struct kv_store *st, struct kv_entry *e, enum unlink_how how)
{
	MORI_REQUIRE(e->state == KV_LIVE, "unlink of an entry not in the index");
	struct kv_uid *u = kv_uid_get(st, e->uid);
	kv_index_remove(&st->idx, e);
	kv_cluster_unpublish(st, e);
	policy_out(st, e, how == U_EVICTED || how == U_EVICTED_SSD);
	u->keys--;
	tier_count(st, e, -1);
	if (e->pin == 2)
		u->hard_pinned -= e->size;
	if (e->tier == KV_TIER_SSD) {
		if (st->ssd && how != U_PROMOTED)
			kv_ssd_remove(st->ssd, &e->u.loc, e->key, e->key_len, e->uid, e->gen, how == U_REMOVED);
	} else if (e->flags & KV_F_CLEAN)
		clean_drop(st, e, how == U_REMOVED);
	else if ((e->flags & KV_F_SPILLING) && how == U_REMOVED)
		e->flags |= KV_F_TOMB; /* its record, once written, goes with a tombstone */
	if (e->refs) {
		e->state = KV_ZOMBIE;
		st->zombies++;
		return;
	}
	kv_entry_free(st, e);
}

/* Live e leaves DRAM for its record at loc on SSD (its run is freed). */
static void to_ssd(struct kv_store *st, struct kv_entry *e, const struct kv_ssd_loc *loc)
{
	struct kv_uid *u = kv_uid_get(st, e->uid);
	tier_count(st, e, -1);
	kv_dram_release(st->dram, &e->u.ext);
	e->tier = KV_TIER_SSD;
	e->u.loc = *loc;
	tier_count(st, e, +1);
	kv_cluster_publish(st, e);
	policy_in(st, e, NULL);
	u->spills++;
	st->spills++;
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

static void spill_done(void *arg, int rc, const struct kv_ssd_loc *loc, const char *msg);
static void kv_store_finish(struct kv_store *st);

struct spill_op {
	struct kv_store *st;
	struct kv_entry *e;
};

/* Room on the SSD tier for len more bytes: its own victims go (for good). */
static int ssd_make_room(struct kv_store *st, uint64_t len)
{
	struct evict_ctx any = {.soft_ok = 1};
	while (kv_ssd_free_bytes(st->ssd) < len + 8192) {
		struct kv_pnode *n = kv_policy_victim(st->pol_ssd, skip_victim, &any);
		if (!n)
			return 0;
		struct kv_entry *v = entry_of(n);
		kv_uid_get(st, v->uid)->evictions++;
		entry_unlink(st, v, U_EVICTED_SSD);
	}
	return 1;
}

/* Evict one value from DRAM (soft-pinned ones only when nothing else can go): spilled to the SSD
 * tier where there is one (its run is freed when the write lands), else dropped. 1 when one
 * went or started going. */
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
	if (st->ssd && !st->closing && (e->flags & KV_F_CLEAN)) {
		/* read back from SSD and unchanged since: its record is still there, nothing to write */
		struct kv_ssd_loc loc = clean_loc(e);
		e->flags &= (uint8_t)~KV_F_CLEAN;
		if (kv_ssd_live(st->ssd, &loc, e->key_len)) {
			policy_out(st, e, 1);
			to_ssd(st, e, &loc);
			return 1;
		}
	}
	if (st->ssd && !st->closing) {
		struct kv_slab *sl = kv_dram_slab(st->dram, e->u.ext.slab);
		const uint8_t *src = sl->base + kv_ext_offset(&e->u.ext);
		struct spill_op *op = malloc(sizeof(*op));
		int rc = op ? MORI_OK : MORI_ENOMEM;
		policy_out(st, e, 1);
		if (op) {
			*op = (struct spill_op){st, e};
			rc = kv_ssd_write(st->ssd, e->key, e->key_len, e->uid, e->gen, src, e->size, spill_done, op);
			if (rc == MORI_ENOMEM && ssd_make_room(st, e->size))
				rc = kv_ssd_write(st->ssd, e->key, e->key_len, e->uid, e->gen, src, e->size, spill_done, op);
			if (rc != MORI_OK)
				free(op);
		}
		if (rc == MORI_OK) {
			e->flags |= KV_F_SPILLING;
			e->refs++;
			st->ssd_ops++;
			st->spilling += kv_ext_bytes(&e->u.ext);
			return 1;
		}
		mlog_ratelimited(MLOG_WARN, "kv", "spill of a %llu-byte value to SSD refused (%s): dropped instead",
				 (unsigned long long)e->size, mori_strerror(rc));
	}
	entry_unlink(st, e, U_EVICTED);
	return 1;
}

/* A spill landed: the value now lives on SSD and its DRAM run is free (or, failed, it is gone). */
static void spill_done(void *arg, int rc, const struct kv_ssd_loc *loc, const char *msg)
{
	struct spill_op *op = arg;
	struct kv_store *st = op->st;
	struct kv_entry *e = op->e;
	free(op);
	st->ssd_ops--;
	if (st->closing) {
		if (e->state == KV_ZOMBIE)
			free(e);
		kv_store_finish(st);
		return;
	}
	e->flags &= (uint8_t)~KV_F_SPILLING;
	st->spilling -= kv_ext_bytes(&e->u.ext);
	e->refs--;
	if (rc != MORI_OK) {
		st->ssd_errors++;
		mlog_ratelimited(MLOG_WARN, "kv", "spill to SSD failed (%s): value dropped", msg);
		if (e->state == KV_LIVE)
			entry_unlink(st, e, U_EVICTED);
		else if (!e->refs && e->state == KV_ZOMBIE)
			kv_entry_free(st, e);
		return;
	}
	if (e->state != KV_LIVE) {
		/* replaced or removed while it was written: the record is dead at once */
		kv_ssd_remove(st->ssd, loc, e->key, e->key_len, e->uid, e->gen, (e->flags & KV_F_TOMB) != 0);
		if (!e->refs)
			kv_entry_free(st, e);
		return;
	}
	if (e->refs) {
		/* leased again meanwhile (a get while it was written): it stays in DRAM, clean where
		 * there is room, else the record is dead */
		if (keep_clean(st))
			clean_set(e, loc);
		else
			kv_ssd_remove(st->ssd, loc, e->key, e->key_len, e->uid, e->gen, 0);
		policy_in(st, e, NULL);
		return;
	}
	to_ssd(st, e, loc);
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
	/* bytes still to be freed by spills in flight count as free: a put does not spill twice */
#define HELD (ds.allocated - st->spilling)
	/* past the high watermark a put may go to another node instead (kv_remote.c): no eviction
	 * down to the low one then, only what the tier's capacity needs */
	if (HELD + need > high && !(st->can_place && st->can_place(st, need)))
		while (HELD + need > low && evict_one(st, &any))
			kv_dram_stats_get(st->dram, &ds);
	while (HELD + need > cap) {
		if (!evict_one(st, &any))
			goto full;
		kv_dram_stats_get(st->dram, &ds);
	}
	for (;;) {
		int rc = ds.allocated + need > cap ? MORI_ENOMEM : kv_dram_alloc(st->dram, uid, size, ext);
		if (rc == MORI_OK)
			break;
		if (rc != MORI_ENOMEM) {
			snprintf(msg, msglen, "DRAM tier: cannot make a slab: %s", strerror(errno));
			return rc;
		}
		if (st->spilling) {
			snprintf(msg, msglen, "room is being made (values spilling to SSD): ask again");
			return MORI_EAGAIN;
		}
		if (!evict_one(st, &any))
			goto full;
		kv_dram_stats_get(st->dram, &ds);
	}
#undef HELD
	u->used += size;
	return MORI_OK;
full:
	snprintf(msg, msglen, "DRAM tier full (%llu of %llu bytes) of values that cannot be evicted (leased or "
		 "pinned)", (unsigned long long)ds.allocated, (unsigned long long)cap);
	return MORI_ENOMEM;
}

/* ---- holds ---- */

/* ---- operations ---- */

struct kv_entry *kv_lookup(struct kv_store *st, uid_t uid, const void *key, size_t klen)
{
	return kv_index_find(&st->idx, uid, key, klen, kv_index_hash(&st->idx, uid, key, klen));
}

/* A new DRAM version of key for uid, reserved (room made), in no index. */
static int entry_new(struct kv_store *st, uid_t uid, const void *key, size_t klen, uint64_t size, int pin, int depth,
		     struct kv_entry **out, char *msg, size_t msglen)
{
	struct kv_entry *e = calloc(1, sizeof(*e) + klen);
	uint32_t hash = (uint32_t)kv_index_hash(&st->idx, uid, key, klen);
	kv_policy_expect(st->pol, hash); /* the room made next is for this key (ARC adapts first) */
	int rc = e ? make_room(st, uid, size, pin, &e->u.ext, msg, msglen) : MORI_ENOMEM;
	if (rc != MORI_OK) {
		if (!e)
			snprintf(msg, msglen, "out of memory");
		free(e);
		return rc;
	}
	e->tier = KV_TIER_DRAM;
	e->size = size;
	e->uid = uid;
	e->key_len = (uint16_t)klen;
	memcpy(e->key, key, klen);
	e->hash = hash;
	e->pin = (uint8_t)pin;
	e->depth = (int8_t)(depth < -1 ? -1 : depth > 127 ? 127 : depth);
	e->state = KV_RESERVED;
	st->entry_bytes += sizeof(*e) + klen;
	*out = e;
	return MORI_OK;
}

int kv_put_alloc(struct kv_store *st, struct kv_client *kc, const void *key, size_t klen, uint64_t size, int depth,
		 int pin, struct kv_entry **out, uint64_t *id, char *msg, size_t msglen)
{
	struct kv_entry *e;
	int rc = entry_new(st, kc->c->uid, key, klen, size, pin, depth, &e, msg, msglen);
	if (rc == MORI_OK && (rc = kv_hold_add(st, kc, KV_HOLD_RES, e, id)) != MORI_OK) {
		kv_entry_free(st, e);
		snprintf(msg, msglen, rc == MORI_EAGAIN ? "client holds %u reservations and leases already" : "out of memory",
			 KV_HOLDS_MAX);
	}
	if (rc == MORI_OK)
		*out = e;
	return rc;
}

static void commit_entry(struct kv_store *st, struct kv_entry *e, struct kv_entry *parent);

int kv_put_commit(struct kv_store *st, struct kv_client *kc, uint64_t id, int abort, struct kv_entry *parent,
		  struct kv_entry **out, char *msg, size_t msglen)
{
	struct kv_hold *h = kv_hold_find(kc, id, KV_HOLD_RES);
	if (!h) {
		snprintf(msg, msglen, "no reservation %llx of this client", (unsigned long long)id);
		return MORI_EINVAL;
	}
	if (h->expired) {
		kv_hold_drop(st, h);
		snprintf(msg, msglen, "reservation %llx expired (kv_lease_max_ms): put again", (unsigned long long)id);
		return MORI_ETIMEDOUT;
	}
	if (abort) {
		kv_hold_drop(st, h);
		return MORI_OK;
	}
	struct kv_entry *e = h->e;
	h->e = NULL; /* the index owns e from here */
	list_del(&h->link);
	st->reservations--;
	kv_hold_drop(st, h);
	commit_entry(st, e, parent);
	if (out)
		*out = e;
	return MORI_OK;
}

/* e (reserved, in no index) becomes key's version, replacing the older one. */
static void commit_entry(struct kv_store *st, struct kv_entry *e, struct kv_entry *parent)
{
	struct kv_entry *old = kv_index_find(&st->idx, e->uid, e->key, e->key_len, e->hash);
	if (old)
		entry_unlink(st, old, U_REMOVED);
	e->gen = ++st->gen;
	e->state = KV_LIVE;
	kv_index_insert(&st->idx, e); /* a table that could not grow only makes chains longer */
	kv_cluster_publish(st, e);
	struct kv_uid *u = kv_uid_get(st, e->uid);
	u->keys++;
	tier_count(st, e, +1);
	st->puts++;
	if (e->pin == 2)
		u->hard_pinned += e->size;
	policy_in(st, e, parent && parent->depth >= 0 && e->depth == parent->depth + 1 ? parent : NULL);
}

static void read_done(void *arg, int rc, const struct kv_ssd_loc *loc, const char *msg);

/* Read src (on SSD) back into a new DRAM run for g (one read however many gets wait for it). */
static int read_start(struct kv_store *st, struct kv_entry *src, struct kv_pget *g, Mori__KvSlot *slot)
{
	struct kv_read *rd = NULL;
	list_each(it, &st->reads) {
		struct kv_read *x = list_entry(it, struct kv_read, link);
		if (x->src == src)
			rd = x;
	}
	if (!rd) {
		char msg[200];
		struct kv_entry *dst = NULL;
		if (!(rd = calloc(1, sizeof(*rd))))
			return MORI_ENOMEM;
		int rc = entry_new(st, src->uid, src->key, src->key_len, src->size, 0, src->depth, &dst, msg, sizeof(msg));
		if (rc != MORI_OK) {
			free(rd);
			return rc;
		}
		dst->pin = src->pin; /* room was made as for an unpinned value, as before */
		dst->gen = src->gen;
		rd->st = st;
		rd->src = src;
		rd->dst = dst;
		struct kv_slab *sl = kv_dram_slab(st->dram, dst->u.ext.slab);
		rc = kv_ssd_read(st->ssd, &src->u.loc, src->key, src->key_len, src->gen, sl->base + kv_ext_offset(&dst->u.ext),
				 read_done, rd);
		if (rc != MORI_OK) {
			kv_entry_free(st, dst);
			free(rd);
			return rc == MORI_ENOENT ? MORI_EIO : rc;
		}
		src->refs++;
		src->flags |= KV_F_READING;
		st->ssd_ops++;
		list_add(&st->reads, &rd->link);
	}
	if (rd->nw == rd->capw) {
		uint32_t nc = rd->capw ? 2 * rd->capw : 4;
		void *nw = realloc(rd->w, sizeof(*rd->w) * nc);
		if (!nw)
			return MORI_ENOMEM;
		rd->w = nw;
		rd->capw = nc;
	}
	rd->w[rd->nw].g = g;
	rd->w[rd->nw++].slot = slot;
	g->waiting++;
	return MORI_EINPROGRESS;
}

/* A read from SSD landed: the waiting gets take leases on the DRAM copy (the promoted version, or
 * with promote_on_read off a temporary one freed at their release), or get MORI_EIO and the key
 * is dropped (counted). */
static void read_done(void *arg, int rc, const struct kv_ssd_loc *loc, const char *msg)
{
	struct kv_read *rd = arg;
	struct kv_store *st = rd->st;
	struct kv_entry *src = rd->src, *dst = rd->dst;
	st->ssd_ops--;
	list_del(&rd->link);
	src->refs--;
	src->flags &= (uint8_t)~KV_F_READING;
	if (st->closing) {
		if (src->state == KV_ZOMBIE)
			free(src);
		free(dst);
		for (uint32_t i = 0; i < rd->nw; i++) {
			struct kv_pget *g = rd->w[i].g;
			g->waiting--; /* a client's: freed with its reset */
			if (g->on_read) {
				g->on_read(g->arg, st, NULL, MORI_ECANCELED);
				free(g);
			}
		}
		free(rd->w);
		free(rd);
		kv_store_finish(st);
		return;
	}
	if (rc != MORI_OK) {
		st->ssd_errors++;
		mlog_ratelimited(MLOG_WARN, "kv", "read from SSD failed (%s): key dropped", msg);
		kv_entry_free(st, dst);
		dst = NULL;
		if (src->state == KV_LIVE) {
			int gone = !src->refs;
			entry_unlink(st, src, U_DROPPED);
			src = gone ? NULL : src;
		}
	} else if (src->state == KV_LIVE && st->d->cfg.kv_promote_on_read) {
		/* dst becomes the key's version in DRAM. Its record stays while the SSD tier has room for
		 * the whole DRAM tier beside it (an eviction of the unchanged copy then writes nothing);
		 * else it goes (no tombstone: the same bytes). */
		struct kv_uid *u = kv_uid_get(st, src->uid);
		struct kv_ssd_loc kept = src->u.loc;
		int keep = keep_clean(st);
		int gone = !src->refs;
		entry_unlink(st, src, keep ? U_PROMOTED : U_EVICTED_SSD);
		src = gone ? NULL : src;
		if (keep)
			clean_set(dst, &kept);
		dst->state = KV_LIVE;
		kv_index_insert(&st->idx, dst);
		kv_cluster_publish(st, dst);
		u->keys++;
		tier_count(st, dst, +1);
		if (dst->pin == 2)
			u->hard_pinned += dst->size;
		policy_in(st, dst, NULL);
		u->promotions++;
		st->promotions++;
	} else {
		dst->state = KV_ZOMBIE; /* read for these gets only: freed at their last release */
		st->zombies++;
		if (src->state == KV_LIVE)
			policy_in(st, src, NULL);
	}
	if (src && !src->refs && src->state == KV_ZOMBIE)
		kv_entry_free(st, src);
	for (uint32_t i = 0; i < rd->nw; i++) {
		struct kv_pget *g = rd->w[i].g;
		Mori__KvSlot *sl = rd->w[i].slot;
		uint64_t id = 0;
		if (g->on_read) { /* a peer's: the reference is its own */
			if (dst)
				dst->refs++;
			g->on_read(g->arg, st, dst, dst ? MORI_OK : MORI_EIO);
			free(g);
			continue;
		}
		int src_rc = dst ? MORI_OK : MORI_EIO;
		if (dst && g->kc && (src_rc = kv_hold_add(st, g->kc, KV_HOLD_LEASE, dst, &id)) == MORI_OK) {
			dst->refs++;
			src_rc = kv_fill_slot(st, g->kc, &g->rep, &g->r, sl, dst);
			if (src_rc != MORI_OK)
				kv_release(st, g->kc, id);
			else
				sl->id = id;
		}
		sl->status = src_rc;
		sl->tier = KV_TIER_SSD;
		if (--g->waiting == 0)
			kv_pget_done(st, g);
	}
	if (dst && dst->state == KV_ZOMBIE && !dst->refs)
		kv_entry_free(st, dst);
	free(rd->w);
	free(rd);
}

/* key's live version, a hit or a miss counted; with gen (non-zero) only that generation, with
 * dram_only only one in DRAM (else a miss). */
static struct kv_entry *find_hit(struct kv_store *st, uid_t uid, const void *key, size_t klen, uint64_t gen,
				 int dram_only)
{
	struct kv_uid *u = kv_uid_get(st, uid);
	struct kv_entry *e = kv_lookup(st, uid, key, klen);
	if (!e || (gen && e->gen != gen) || (dram_only && e->tier != KV_TIER_DRAM)) {
		u->misses++;
		st->misses++;
		return NULL;
	}
	u->hits++;
	st->hits++;
	return e;
}

int kv_get(struct kv_store *st, struct kv_client *kc, const void *key, size_t klen, struct kv_entry **out,
	   uint64_t *id, struct kv_pget *g, Mori__KvSlot *slot)
{
	struct kv_entry *e = find_hit(st, kc->c->uid, key, klen, 0, 0);
	if (!e)
		return MORI_ENOENT;
	if (e->tier != KV_TIER_DRAM)
		return read_start(st, e, g, slot);
	int rc = kv_hold_add(st, kc, KV_HOLD_LEASE, e, id);
	if (rc != MORI_OK)
		return rc;
	e->refs++;
	if (e->flags & KV_F_IN_POLICY)
		kv_policy_hit(st->pol, &e->pn);
	*out = e;
	return MORI_OK;
}

int kv_peer_hold(struct kv_store *st, uid_t uid, const void *key, size_t klen, uint64_t gen, struct kv_entry **out,
		 struct kv_pget *g)
{
	struct kv_entry *e = find_hit(st, uid, key, klen, gen, !g);
	if (!e)
		return MORI_ENOENT;
	if (e->tier != KV_TIER_DRAM)
		return read_start(st, e, g, NULL);
	e->refs++;
	if (e->flags & KV_F_IN_POLICY)
		kv_policy_hit(st->pol, &e->pn);
	*out = e;
	return MORI_OK;
}

void kv_unref(struct kv_store *st, struct kv_entry *e)
{
	MORI_REQUIRE(e->refs > 0, "reference dropped on an entry without references");
	if (--e->refs == 0 && e->state == KV_ZOMBIE)
		kv_entry_free(st, e);
}

int kv_temp_new(struct kv_store *st, uid_t uid, const void *key, size_t klen, uint64_t size, struct kv_entry **out,
		char *msg, size_t msglen)
{
	int rc = entry_new(st, uid, key, klen, size, 0, -1, out, msg, msglen);
	if (rc == MORI_OK) {
		(*out)->state = KV_ZOMBIE; /* in no index: freed at its last reference */
		(*out)->refs = 1;
		st->zombies++;
	}
	return rc;
}

int kv_temp_commit(struct kv_store *st, struct kv_entry *e)
{
	if (e->state != KV_ZOMBIE || e->tier != KV_TIER_DRAM)
		return MORI_EINVAL;
	st->zombies--;
	commit_entry(st, e, NULL);
	return MORI_OK;
}

int kv_drop(struct kv_store *st, struct kv_entry *e)
{
	if (e->state != KV_LIVE || e->pin == 2 || kv_lookup(st, e->uid, e->key, e->key_len) != e)
		return MORI_ENOENT;
	entry_unlink(st, e, U_EVICTED);
	return MORI_OK;
}

int kv_temp_lease(struct kv_store *st, struct kv_client *kc, struct kv_entry *e, uint64_t *id)
{
	int rc = kv_hold_add(st, kc, KV_HOLD_LEASE, e, id);
	if (rc == MORI_OK)
		e->refs++;
	return rc;
}

int kv_release(struct kv_store *st, struct kv_client *kc, uint64_t id)
{
	struct kv_hold *h = kv_hold_find(kc, id, KV_HOLD_LEASE);
	if (!h)
		return MORI_EINVAL;
	int expired = h->expired;
	kv_hold_drop(st, h);
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
		policy_out(st, e, 0);
	} else if (e->pin == 2) {
		u->hard_pinned -= e->size;
		e->pin = (uint8_t)pin;
		if (!(e->flags & KV_F_SPILLING))
			policy_in(st, e, NULL);
	}
	e->pin = (uint8_t)pin;
	return MORI_OK;
}

void kv_entry_remove(struct kv_store *st, struct kv_entry *e)
{
	entry_unlink(st, e, U_REMOVED);
}

/* ---- the SSD tier ---- */

/* A record found at start: the key comes back on the SSD tier. */
static void ssd_found(void *arg, const void *key, size_t klen, uint32_t uid, uint64_t gen, const struct kv_ssd_loc *loc)
{
	struct kv_store *st = arg;
	struct kv_entry *e = calloc(1, sizeof(*e) + klen);
	if (!e || klen == 0 || klen > KV_KEY_MAX || loc->len == 0) {
		free(e);
		mlog_ratelimited(MLOG_ERR, "kv", "a record of the SSD tier could not be indexed (out of memory or bad key)");
		return;
	}
	memcpy(e->key, key, klen);
	e->key_len = (uint16_t)klen;
	e->uid = uid;
	e->gen = gen;
	e->size = loc->len;
	e->u.loc = *loc;
	e->tier = KV_TIER_SSD;
	e->depth = -1;
	e->hash = (uint32_t)kv_index_hash(&st->idx, uid, key, klen);
	e->state = KV_LIVE;
	st->entry_bytes += sizeof(*e) + klen;
	if (gen > st->gen)
		st->gen = gen;
	kv_index_insert(&st->idx, e);
	struct kv_uid *u = kv_uid_get(st, uid);
	u->keys++;
	u->used += e->size;
	tier_count(st, e, +1);
	policy_in(st, e, NULL);
}

/* Compaction moved a record: where the store still holds it at old, it is now at now (NULL: gone). */
static void ssd_moved(void *arg, const void *key, size_t klen, uint32_t uid, uint64_t gen, const struct kv_ssd_loc *old,
		      const struct kv_ssd_loc *now)
{
	struct kv_store *st = arg;
	struct kv_entry *e = kv_lookup(st, uid, key, klen);
	if (e && e->tier == KV_TIER_DRAM && (e->flags & KV_F_CLEAN) && e->gen == gen) {
		struct kv_ssd_loc was = clean_loc(e);
		if (was.seg != old->seg || was.off != old->off)
			return;
		if (now)
			clean_set(e, now);
		else
			e->flags &= (uint8_t)~KV_F_CLEAN; /* the record failed its checksum: the DRAM copy is still good */
		return;
	}
	if (!e || e->tier != KV_TIER_SSD || e->gen != gen || e->u.loc.seg != old->seg || e->u.loc.off != old->off)
		return;
	if (now) {
		e->u.loc = *now;
		return;
	}
	st->ssd_errors++;
	if (!e->refs) {
		memset(&e->u.loc, 0, sizeof(e->u.loc));
		entry_unlink(st, e, U_DROPPED);
	}
}

int kv_ssd_start(struct kv_store *st, char *err, size_t errlen)
{
	const struct config *cfg = &st->d->cfg;
	if (!cfg->kv_ssd_dir[0])
		return MORI_OK;
	if (!(st->pol_ssd = kv_policy_new(st->policy, (uint64_t)cfg->kv_ssd_bytes))) {
		snprintf(err, errlen, "out of memory");
		return MORI_ENOMEM;
	}
	return kv_ssd_open(st->d->loop, cfg->kv_ssd_dir, (uint64_t)cfg->kv_ssd_bytes, ssd_found, ssd_moved, st, &st->ssd,
			   err, errlen);
}

int kv_flush(struct kv_store *st, kv_ssd_done_cb done, void *arg)
{
	if (!st->ssd)
		return MORI_OK;
	return kv_ssd_flush(st->ssd, done, arg) == MORI_OK ? MORI_EINPROGRESS : MORI_EINVAL;
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
	LIST_INIT(&st->reads);
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
	if (!e->refs)
		free(e); /* the tier goes whole after: no run is given back one by one */
	else
		e->state = KV_ZOMBIE; /* its I/O's completion frees it */
	return 0;
}

static void timer_closed(uv_handle_t *h)
{
	free(h->data);
}

/* The last of the store, once no SSD operation is in flight. */
static void kv_store_finish(struct kv_store *st)
{
	if (st->ssd_ops)
		return;
	kv_index_fini(&st->idx);
	kv_policy_free(st->pol);
	kv_policy_free(st->pol_ssd);
	kv_dram_free(st->dram);
	free(st->uids);
	if (st->timer.data) {
		uv_close((uv_handle_t *)&st->timer, timer_closed);
		return;
	}
	free(st);
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
	st->closing = 1;
	if (st->dram)
		kv_index_each(&st->idx, free_entry_cb, st);
	st->ssd_ops++; /* callbacks run inside kv_ssd_close must not finish the store under us */
	if (st->ssd)
		kv_ssd_close(st->ssd); /* pending operations end with MORI_ECANCELED: their entries go then */
	st->ssd = NULL;
	st->ssd_ops--;
	if (st->timer.data)
		uv_timer_stop(&st->timer);
	kv_store_finish(st);
}
