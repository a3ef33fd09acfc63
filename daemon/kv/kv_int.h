/* The KV store's internals shared by kv_index.c, kv_store.c and kv_req.c (kv_store.h says who
 * is who). */
#ifndef MORID_KV_INT_H
#define MORID_KV_INT_H
#include <stdint.h>
#include <sys/types.h>

#include "core/morid.h"
#include "kv/kv_dram.h"
#include "kv/kv_policy.h"
#include "kv/kv_ssd.h"

#define KV_KEY_MAX 256

enum kv_tier { KV_TIER_NONE = 0, KV_TIER_DRAM = 2, KV_TIER_SSD = 3 }; /* mori_umbp_tier's numbers */
enum kv_state {
	KV_RESERVED = 1, /* a put's slot, not yet committed: only its client's hold names it */
	KV_LIVE = 2,     /* in the index */
	KV_ZOMBIE = 3,   /* replaced, removed or evicted while leased: freed at its last release */
};
enum kv_flag {
	KV_F_SPILLING = 1 << 0, /* an SSD write from its DRAM run is in flight */
	KV_F_READING = 1 << 1,  /* an SSD read into DRAM is in flight */
	KV_F_IN_POLICY = 1 << 2,    /* in the policy of its tier (DRAM's, or the SSD tier's) */
	KV_F_TOMB = 1 << 3,         /* removed mid-spill: its record gets a tombstone */
	KV_F_CLEAN = 1 << 4,        /* in DRAM, and its record on SSD (clean_seg, clean_blk) is live and
				     * holds the same bytes: an eviction writes nothing */
};

/* One version of one key. The key's bytes follow the struct. */
struct kv_entry {
	struct kv_entry *hnext;  /* index chain */
	struct kv_pnode pn;      /* the tier's policy */
	union {
		struct kv_ext ext;       /* tier DRAM */
		struct kv_ssd_loc loc;   /* tier SSD */
	} u;
	uint64_t size;           /* the value's bytes */
	uint64_t gen;            /* commit order, daemon-wide (the SSD tier's records carry it) */
	uint32_t hash;           /* the index's hash, low 32 bits */
	uid_t uid;
	uint32_t refs;           /* leases and in-flight I/O: the version stays while > 0 */
	uint32_t clean_seg, clean_blk; /* KV_F_CLEAN: its SSD record (segment, offset / 4096) */
	uint16_t key_len;
	uint8_t tier, pin, state, flags;
	int8_t depth;
	uint8_t key[];
};

/* The index (kv_index.c): chained, doubled when it holds as many entries as buckets, old buckets
 * moved a few per operation (never a stall of the whole table). */
struct kv_index {
	struct kv_entry **t[2];  /* t[1]: the table being moved out of, while rehashing */
	uint64_t size[2];
	uint64_t count;
	uint64_t moved;          /* t[1]'s buckets moved so far */
	uint64_t epoch;          /* counts bucket moves and growths: a paused walk may have missed entries */
	unsigned char seed[16];  /* SipHash key: a client cannot pick colliding keys */
};
/* Where a walk paused between loop turns (kv_index_walk); zeroed to start one. */
struct kv_index_cursor {
	uint64_t b;              /* next bucket of the table the phase walks */
	uint64_t epoch;
	int phase;               /* 0: t[1]'s unmoved buckets, 1: t[0] */
	int again;               /* entries moved while paused: walk once more */
};
int kv_index_init(struct kv_index *x);
void kv_index_fini(struct kv_index *x);
uint64_t kv_index_hash(const struct kv_index *x, uid_t uid, const void *key, size_t len);
struct kv_entry *kv_index_find(struct kv_index *x, uid_t uid, const void *key, size_t len, uint64_t hash);
/* e->hash set from hash; e must not be in the index. MORI_ENOMEM when the table could not grow
 * (e is inserted all the same: chains only get longer). */
int kv_index_insert(struct kv_index *x, struct kv_entry *e);
void kv_index_remove(struct kv_index *x, struct kv_entry *e);
/* Every entry, fn may remove the one it is given. Stops when fn returns non-zero. */
void kv_index_each(struct kv_index *x, int (*fn)(struct kv_entry *e, void *arg), void *arg);
/* Part of a walk over every entry: at most budget buckets, resuming at c. fn may remove the entry
 * it is given (not others). Entries moved by a rehash while the walk paused may be missed or seen
 * twice, so a pass that saw one is followed by another: every entry present from the walk's
 * start to its end is seen at least once. Returns 1 once the walk is complete. */
int kv_index_walk(struct kv_index *x, struct kv_index_cursor *c, uint64_t budget,
		  void (*fn)(struct kv_entry *e, void *arg), void *arg);
uint64_t kv_index_bytes(const struct kv_index *x);

/* What one uid holds and did. */
struct kv_uid {
	uid_t uid;
	uint64_t used;           /* values' bytes on both tiers: reserved, live and still-leased old ones */
	uint64_t hard_pinned;
	uint64_t keys, dram_keys, dram_bytes, ssd_keys, ssd_bytes;
	uint64_t hits, misses, evictions, spills, promotions;
};

enum kv_hold_kind { KV_HOLD_RES = 1, KV_HOLD_LEASE = 2 };

/* A put's reservation or a get's lease, in its client's table; its id names it in requests. */
struct kv_hold {
	uint64_t id;
	struct kv_entry *e;      /* NULL once expired */
	struct kv_client *kc;
	uint64_t deadline_ms;    /* loop time */
	struct list link;        /* the store's expiry queue, oldest first (off it once expired) */
	uint8_t kind, expired;
};

/* A client's part of the store. */
struct kv_client {
	struct client *c;
	struct kv_hold **holds;  /* by the low bits of the id */
	uint32_t nholds, cap_holds;
	uint32_t *free_idx;
	uint32_t nfree;
	uint32_t live;           /* holds in the table */
	uint32_t *sent;          /* sent[slab index] = the id of the slab whose fd it was sent */
	uint32_t nsent;
	struct list pgets;       /* its gets waiting for SSD reads */
};

/* A get waiting for values read back from SSD (its reply is deferred until the last one). */
struct kv_pget {
	struct kv_client *kc;    /* NULL once its client is gone */
	struct list link;        /* its client's pending gets */
	Mori__Reply rep;
	struct rctx r;
	uint32_t waiting;
	/* Set instead of kc for a peer's read (kv_peer_hold): called when the value is in DRAM (e,
	 * referenced for the callee) or failed (e NULL: MORI_EIO, MORI_ECANCELED when the store
	 * stops); g is freed after it. */
	void (*on_read)(void *arg, struct kv_store *st, struct kv_entry *e, int rc);
	void *arg;
};

/* A value being read back from SSD into a DRAM run (dst, a temporary entry: the promoted version
 * when promote_on_read, else the slot the waiting gets lease and that goes at their release). */
struct kv_read {
	struct list link;        /* the store's reads in flight */
	struct kv_store *st;
	struct kv_entry *src;    /* on SSD, referenced for the read */
	struct kv_entry *dst;
	struct { struct kv_pget *g; Mori__KvSlot *slot; } *w;
	uint32_t nw, capw;
};

struct kvc;

struct kv_store {
	struct morid *d;
	struct kvc *cluster;     /* the cluster index and external KV (kv_cluster.c, kv_ext.c) */
	struct kv_dram *dram;
	struct kv_policy *pol;   /* the DRAM tier's */
	struct kv_policy *pol_ssd;
	struct kv_ssd *ssd;      /* NULL: no SSD tier */
	enum kv_policy_kind policy;
	struct kv_index idx;
	struct kv_uid *uids;
	uint32_t nuids;
	struct list expiry;      /* holds by deadline */
	struct list reads;       /* struct kv_read in flight */
	uint64_t spilling;       /* DRAM bytes whose spill is in flight (freed when it lands) */
	uint64_t ssd_ops;        /* spills and reads in flight: the store outlives them at stop */
	int closing;
	uv_timer_t timer;
	uint64_t timer_at;       /* loop ms the timer is set for, 0 none */
	uint64_t gen, hold_seq;
	struct kv_clearer *clearer; /* clears under way (NULL until the first) */
	uint64_t entry_bytes;    /* malloc'd for entries */
	/* node-wide counters */
	uint64_t hits, misses, evictions, spills, promotions, puts, expired, zombies, ssd_errors;
	uint64_t leases, reservations;
	uint64_t dram_keys, dram_bytes, ssd_keys, ssd_bytes;
	struct kv_remote *remote; /* kv_remote.c's state (gets across nodes); NULL: none */
	/* kv_remote.c's: 1 when a put of size bytes past the high watermark can be placed on another
	 * node (make_room then evicts only what the capacity needs); NULL: never */
	int (*can_place)(struct kv_store *st, uint64_t size);
};

#define KV_HOLDS_MAX (1u << 20) /* holds one client may have at once (each names a hold slot) */
#define HOLD_IDX_BITS 24
/* kv_hold.c: a new hold of kind on e for kc (*id names it; the caller took e's reference for a
 * lease). MORI_EAGAIN past KV_HOLDS_MAX, MORI_ENOMEM. */
int kv_hold_add(struct kv_store *st, struct kv_client *kc, int kind, struct kv_entry *e, uint64_t *id);
/* kv_hold.c: kc's hold named id, of kind; NULL for an id that is not one of kc's (forged, another
 * client's, already ended). */
struct kv_hold *kv_hold_find(struct kv_client *kc, uint64_t id, int kind);
/* kv_hold.c: the hold ends (a reservation's slot freed, a lease's version let go) and leaves kc's table. */
void kv_hold_drop(struct kv_store *st, struct kv_hold *h);
/* kv_hold.c: e's memory (its DRAM run or SSD record reference, its bytes) goes. */
void kv_entry_free(struct kv_store *st, struct kv_entry *e);

/* kv_store.c, for kv_req.c. Statuses are MORI_* codes; msg (may be NULL) gets why it failed. */
struct kv_store *kv_store_new(struct morid *d, char *err, size_t errlen);
void kv_store_free(struct kv_store *st);
struct kv_uid *kv_uid_get(struct kv_store *st, uid_t uid);
struct kv_client *kv_client_of(struct kv_store *st, struct client *c); /* created on first use; NULL ENOMEM */
/* End every hold of kc (reservations freed, leases ended) and forget what slabs it was sent. */
void kv_client_reset(struct kv_store *st, struct kv_client *kc);
/* A new slot for a put: *e the reserved entry (its DRAM run says where), *id its hold's id. */
int kv_put_alloc(struct kv_store *st, struct kv_client *kc, const void *key, size_t klen, uint64_t size, int depth,
		 int pin, struct kv_entry **e, uint64_t *id, char *msg, size_t msglen);
/* parent: the entry committed just before in the same batch (the policy's chain), or NULL. *out
 * (may be NULL) gets the committed entry. */
int kv_put_commit(struct kv_store *st, struct kv_client *kc, uint64_t id, int abort, struct kv_entry *parent,
		  struct kv_entry **out, char *msg, size_t msglen);
/* A lease on key's value in DRAM (*e, *id). A value only on SSD: MORI_EINPROGRESS, and g waits
 * for its read (g->waiting counts it; slot is filled, or its status set, when the read lands and
 * kv_pget_done(g) runs once g->waiting is 0). */
int kv_get(struct kv_store *st, struct kv_client *kc, const void *key, size_t klen, struct kv_entry **e, uint64_t *id,
	   struct kv_pget *g, Mori__KvSlot *slot);
/* kv_reply.c: a pending get's last read landed: reply and free g. */
void kv_pget_done(struct kv_store *st, struct kv_pget *g);
/* kv_reply.c: rep's message becomes msg unless it has one already. */
void kv_first_error(Mori__Reply *rep, struct rctx *r, const char *msg);
/* kv_reply.c: fill slot for e (leased by kc) in reply rep, with the slab's fd where kc lacks it;
 * MORI_OK or the item's error (MORI_EAGAIN: the reply carries all the fds it can). */
int kv_fill_slot(struct kv_store *st, struct kv_client *kc, Mori__Reply *rep, struct rctx *r, Mori__KvSlot *sl,
		 struct kv_entry *e);
/* The SSD tier: open it and rebuild the index from its records; flush. */
int kv_ssd_start(struct kv_store *st, char *err, size_t errlen);
/* MORI_OK at once without an SSD tier, MORI_EINPROGRESS when done will run, MORI_EINVAL. */
int kv_flush(struct kv_store *st, kv_ssd_done_cb done, void *arg);
int kv_release(struct kv_store *st, struct kv_client *kc, uint64_t id);
struct kv_entry *kv_lookup(struct kv_store *st, uid_t uid, const void *key, size_t klen);
int kv_remove(struct kv_store *st, uid_t uid, const void *key, size_t klen);
int kv_pin(struct kv_store *st, uid_t uid, const void *key, size_t klen, int pin, char *msg, size_t msglen);
/* kv_store.c, for kv_remote.c. A peer's lease: *e is key's DRAM version (a reference taken, a
 * hit counted), or MORI_ENOENT: absent, of another generation than gen (0: any), or only on SSD
 * with g NULL. With g (on_read set, waiting 0), a value only on SSD is read back into DRAM:
 * MORI_EINPROGRESS, and g->on_read runs when it lands (g is the store's until then). */
int kv_peer_hold(struct kv_store *st, uid_t uid, const void *key, size_t klen, uint64_t gen, struct kv_entry **e,
		 struct kv_pget *g);
/* Let go of a reference kv_peer_hold or kv_temp_new took (the last one of a temporary or replaced
 * version frees it). */
void kv_unref(struct kv_store *st, struct kv_entry *e);
/* A DRAM run of size bytes for uid that a value fetched from a peer lands in, room made as for a
 * put: *e is in no index, with one reference (kv_unref frees it). */
int kv_temp_new(struct kv_store *st, uid_t uid, const void *key, size_t klen, uint64_t size, struct kv_entry **e,
		char *msg, size_t msglen);
/* Temporary e (kv_temp_new, its bytes written) becomes key's version here, replacing an older
 * one: MORI_OK, or MORI_EINVAL for an entry that is not temporary. */
int kv_temp_commit(struct kv_store *st, struct kv_entry *e);
/* Live version e leaves this node (placed on another): MORI_OK, or MORI_ENOENT where it is no
 * longer key's version or is hard-pinned (it stays). */
int kv_drop(struct kv_store *st, struct kv_entry *e);
/* Lease temporary e to kc as a get's (it then lives until its last reference goes). */
int kv_temp_lease(struct kv_store *st, struct kv_client *kc, struct kv_entry *e, uint64_t *id);
/* kv_clear.c: removes every value of uid committed so far, a slice a loop turn; done(arg, MORI_OK, values
 * removed) runs once complete, or with MORI_ECANCELED when the store stops first. MORI_OK (done
 * will run), MORI_ENOMEM or MORI_ECANCELED (it will not). */
typedef void (*kv_clear_cb)(void *arg, int rc, uint64_t n);
int kv_clear(struct kv_store *st, uid_t uid, kv_clear_cb done, void *arg);
/* kv_clear.c: clears under way end (done with MORI_ECANCELED); before kv_store_free. */
void kv_clear_stop(struct kv_store *st);
/* e (live) leaves the index as a remove does (a tombstone for its SSD record). */
void kv_entry_remove(struct kv_store *st, struct kv_entry *e);
/* kv_reply.c: 1 when kc must be sent slab s's fd with this reply (and it is now marked sent); 0
 * when it has it; <0 ENOMEM. */
int kv_slab_send(struct kv_client *kc, const struct kv_slab *s);
/* kv_req_cluster.c: EXISTS with a cluster index and the external-KV ops (1: reply deferred);
 * the index's part of the stats. */
int kv_cluster_request(struct kv_store *st, struct client *c, Mori__KvRequest *kq, Mori__KvReply *kr,
		       Mori__Reply *rep, struct rctx *r);
void kv_cluster_stats_fill(struct kv_store *st, Mori__KvStats *s, struct rctx *r);
#endif
