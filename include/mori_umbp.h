/* mori_umbp.h: UMBP, the node's tiered KV-cache store, as a client of morid sees it.
 *
 * morid keeps KV blocks between requests: a DRAM tier (memory pages morid owns and maps into the
 * local clients of each uid) and an SSD tier (segment files under the daemon's kv_ssd_dir,
 * written and read with io_uring and O_DIRECT, every record checksummed with CRC32C). Serving
 * processes on the node share one store and it outlives them; the SSD tier also outlives morid
 * (its index is rebuilt from the segments at start; DRAM contents are lost when morid stops).
 *
 * Names and semantics follow ROCm/mori's UMBP client (IUMBPClient: Put, Get, Exists, BatchPut,
 * BatchPutWithDepth, BatchGet, BatchExists, BatchExistsConsecutive, Clear, Flush, RegisterMemory,
 * DeregisterMemory) in the C convention of mori.h (return codes, option structs with a size field).
 *
 * Model (docs/umbp.md has the whole of it):
 * - Keys are byte strings of 1..MORI_UMBP_KEY_MAX bytes, compared whole. Values are 1 byte to
 *   the daemon's kv_value_max bytes (at least 64 MiB), stored at their size (not rounded up to a
 *   page). Keys live in a namespace per uid: processes of one uid share keys, other uids never
 *   see them.
 * - A put is two steps inside the call: morid allocates a slot, the caller's thread (or the GPU
 *   copy engine, for VRAM) copies into it, then the call commits it. Readers never see a value
 *   before its commit; a put of an existing key replaces it atomically at commit, and readers of
 *   the old value keep reading it until they finish. A client that dies between the two steps
 *   leaves nothing behind.
 * - A get takes a read lease on the value (it is neither evicted, overwritten in place, nor
 *   freed while leased), copies it out, and returns the lease. A lease ends when the get returns,
 *   or when its client dies; a value on the SSD tier is read back into DRAM first (and stays
 *   there when the daemon's promote_on_read is on, the default).
 * - Eviction makes room for puts: the daemon's kv_policy (docs/umbp.md compares them on the
 *   Mooncake trace) chooses among values that are not leased and not pinned; with an SSD tier a
 *   value evicted from DRAM is spilled to SSD, and evicted from SSD it is gone. Each uid has a
 *   quota (kv_uid_quota_bytes): a uid at its quota evicts its own values first, never another's.
 * - Pins: a soft pin keeps a value in DRAM unless nothing else can be evicted; a hard pin keeps it
 *   until it is unpinned or removed (hard-pinned bytes count against the quota, and a put that
 *   would need a hard-pinned value evicted fails with MORI_ENOMEM).
 *
 * Errors: every function returns MORI_OK or a negative MORI_E* (mori_types.h), with the detail in
 * mori_client_last_error(). Per-key results of batches land in mori_umbp_item.status:
 *   MORI_OK, MORI_ENOENT (no such key: a miss), MORI_EINVAL (key empty or over MORI_UMBP_KEY_MAX,
 *   value of 0 bytes), MORI_EMSGSIZE (value larger than the store takes, or a get's buffer
 *   smaller than the value: item.len says the size needed), MORI_ENOMEM (no room: quota or tier
 *   full of leased or hard-pinned values), MORI_EIO (the SSD copy failed its checksum: the key is
 *   dropped and counted, never returned with wrong bytes), MORI_ETIMEDOUT (a get's lease expired
 *   while it copied, kv_lease_max_ms, so the bytes may be torn; or a put found no room before the
 *   call's deadline while values were still spilling to SSD).
 * Thread safety: a mori_umbp may be used from several threads at once. After fork() the child's
 * calls fail with MORI_ESTALE, as every call on its client does.
 */
#ifndef MORI_UMBP_H
#define MORI_UMBP_H

#include <stddef.h>
#include <stdint.h>

#include "mori.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MORI_UMBP_KEY_MAX 256 /* bytes of a key */

/* Tiers, numbered as ROCm/mori's UMBPTierType. HBM names a serving process's own GPU cache,
 * which the store never holds itself (external-KV reports name it). */
typedef enum mori_umbp_tier {
	MORI_UMBP_TIER_UNKNOWN = 0,
	MORI_UMBP_TIER_HBM = 1,
	MORI_UMBP_TIER_DRAM = 2,
	MORI_UMBP_TIER_SSD = 3,
} mori_umbp_tier;

/* Pins (mori_umbp_item.pin, mori_umbp_pin). */
typedef enum mori_umbp_pin_kind {
	MORI_UMBP_PIN_NONE = 0,
	MORI_UMBP_PIN_SOFT = 1, /* stay in DRAM unless nothing else can be evicted */
	MORI_UMBP_PIN_HARD = 2, /* never evicted; counts against the uid's quota */
} mori_umbp_pin_kind;

/* A key: len bytes at data (1..MORI_UMBP_KEY_MAX), copied by every call that takes one. */
typedef struct mori_umbp_key {
	const void *data;
	size_t len;
} mori_umbp_key;

/* One key of a batch put or get. The caller owns items and the buffers they point to. */
typedef struct mori_umbp_item {
	mori_umbp_key key;
	void *buf;      /* put: the value's bytes; get: where they go. Host memory, or VRAM (a device
	                 * pointer of this process: copied by the GPU's copy engine) */
	size_t size;    /* put: the value's length; get: the capacity of buf (bytes) */
	size_t len;     /* out, get: the value's length (also when buf was too small: MORI_EMSGSIZE) */
	int32_t depth;  /* put: the key's depth in its prefix chain (0 = a prompt's first block), as
	                 * ROCm/mori's BatchPutWithDepth; -1 = unknown. Prefix-aware eviction uses it */
	uint8_t pin;    /* put: mori_umbp_pin_kind */
	uint8_t tier;   /* out, get: the mori_umbp_tier the value was found on */
	uint16_t reserved;
	int status;     /* out: this key's result (header comment) */
} mori_umbp_item;

/* Options of mori_umbp_open. */
typedef struct mori_umbp_opts {
	size_t size;            /* sizeof(mori_umbp_opts) as the caller compiled it (mori_umbp_opts_init) */
	int64_t timeout_us;     /* deadline of each call: 0 = the daemon's kv_timeout_ms (default) */
	uint32_t copy_threads;  /* host threads copying one batch's values: 0 = the library's choice
	                         * (up to 4, never more than the batch's values of at least 256 KiB) */
} mori_umbp_opts;

/* Fill opts with the defaults and opts->size = size (sizeof(*opts)). MORI_EINVAL for NULL or a
 * size below 1.0's struct. */
MORI_API int mori_umbp_opts_init(mori_umbp_opts *opts, size_t size);

typedef struct mori_umbp mori_umbp;

/* Open the node's store through client c (opts NULL: the defaults). The handle borrows c: close
 * it before c. Errors: MORI_ENOTSUP (morid runs without a store: kv_dram_bytes = 0), MORI_EINVAL,
 * MORI_ENOMEM, MORI_ECONN, MORI_ESTALE (c used after fork). On success *out is the caller's
 * (mori_umbp_close). */
MORI_API int mori_umbp_open(mori_client *c, const mori_umbp_opts *opts, mori_umbp **out);

/* Close: ends the handle's leases and unmaps the store's pages from this process. Values put
 * stay in the store. NULL is a no-op returning MORI_OK. */
MORI_API int mori_umbp_close(mori_umbp *u);

/* Store size bytes from src (host or VRAM) under key, replacing any value the key had.
 * ROCm/mori: Put. Errors: as an item's status (header comment). */
MORI_API int mori_umbp_put(mori_umbp *u, const void *key, size_t key_len, const void *src, size_t size);

/* Copy key's value into dst (host or VRAM, cap bytes); *len (may be NULL) gets its length.
 * ROCm/mori: Get. Errors: MORI_ENOENT (a miss), MORI_EMSGSIZE (cap < the value: *len says how
 * much is needed, nothing is copied), and as an item's status. */
MORI_API int mori_umbp_get(mori_umbp *u, const void *key, size_t key_len, void *dst, size_t cap, size_t *len);

/* 1 if key is in the store (on any tier), 0 if not, or a negative MORI_E*. ROCm/mori: Exists. */
MORI_API int mori_umbp_exists(mori_umbp *u, const void *key, size_t key_len);

/* Batches of n items (n >= 1): one round trip to morid for the slots or leases of the whole batch
 * and one for the commit or release (a batch over the daemon's kv_batch_max goes in several); the
 * values' copies run in parallel. Each item gets its own status; the call returns MORI_OK when it ran (whatever the
 * items' statuses), or an error of the whole call (MORI_EINVAL for items NULL or n 0,
 * MORI_ECONN, MORI_ETIMEDOUT, MORI_ESTALE), in which case no item of a put was committed.
 * *n_ok (may be NULL) gets the number of items whose status is MORI_OK.
 * ROCm/mori: BatchPut (and BatchPutWithDepth through item.depth), BatchGet. */
MORI_API int mori_umbp_batch_put(mori_umbp *u, mori_umbp_item *items, size_t n, size_t *n_ok);
MORI_API int mori_umbp_batch_get(mori_umbp *u, mori_umbp_item *items, size_t n, size_t *n_ok);

/* Across nodes (docs/umbp.md, "Across nodes"). A get whose key this node's store lacks asks
 * the daemon of the node that holds it: node_address ("host:port" of that node's morid peer
 * listener) here, or the cluster index where morid runs with one (mori_umbp_get and
 * mori_umbp_batch_get then ask it by themselves). The holder leases the value, checks that it is
 * the version the index named (reading it back from its SSD tier first where it is only there),
 * and its bytes travel over the daemons' transports (TCP streams, RDMA where present): straight
 * into buf where buf lies inside a range given to mori_umbp_register_memory (this node's morid
 * writes it; nothing is copied here), else into a slot of this node's DRAM tier and from there
 * into buf as for a local get (one copy). item.tier says where the holder found it. A key the
 * holder lacks, evicted meanwhile, of another generation, or a holder that restarted since the
 * index named it: MORI_ENOENT, a miss. The
 * holder unreachable, or gone mid-transfer: MORI_ECONN, MORI_ETIMEDOUT or MORI_EPEERDEAD (within the
 * call's deadline), mori_client_last_error naming the node; MORI_EPERM where it refused this
 * node's authentication; MORI_EINVAL for a node_address that is not host:port. Batches ask each
 * holder once, holders in parallel. Processes of one uid on every node share its keys (uids are
 * taken to mean the same user across the cluster, as with the cluster key's other grants). */
MORI_API int mori_umbp_get_from(mori_umbp *u, const char *node_address, const void *key, size_t key_len, void *dst,
				size_t cap, size_t *len);
MORI_API int mori_umbp_batch_get_from(mori_umbp *u, const char *node_address, mori_umbp_item *items, size_t n,
				      size_t *n_ok);

/* present[i] = 1 where keys[i] is in the store, else 0. ROCm/mori: BatchExists. */
MORI_API int mori_umbp_batch_exists(mori_umbp *u, const mori_umbp_key *keys, size_t n, uint8_t *present);

/* *count = how many of keys[0..n-1], from the first, are in the store (stops at the first that is
 * not): the prefix match a scheduler asks for. ROCm/mori: BatchExistsConsecutive. */
MORI_API int mori_umbp_batch_exists_consecutive(mori_umbp *u, const mori_umbp_key *keys, size_t n, size_t *count);

/* Remove key (waits for nothing: readers holding a lease finish with the old bytes). MORI_ENOENT
 * when absent. */
MORI_API int mori_umbp_remove(mori_umbp *u, const void *key, size_t key_len);

/* Pin or unpin (MORI_UMBP_PIN_NONE) a stored key. MORI_ENOENT when absent, MORI_ENOMEM when a hard
 * pin would take the uid past its quota. */
MORI_API int mori_umbp_pin(mori_umbp *u, const void *key, size_t key_len, mori_umbp_pin_kind pin);

/* Remove every key of the caller's uid committed before the call, on every tier; returns once all
 * are gone (morid removes them a slice per loop turn, serving other requests between; values put
 * meanwhile stay). ROCm/mori: Clear. */
MORI_API int mori_umbp_clear(mori_umbp *u);

/* Wait until every value spilled to SSD so far is durable there (written and fdatasync'd).
 * MORI_OK at once without an SSD tier. ROCm/mori: Flush. */
MORI_API int mori_umbp_flush(mori_umbp *u);

/* Register size bytes at ptr (host or VRAM) that later gets and puts will use: the range becomes
 * a mori region of this client (mori_mem_register) that morid writes values fetched from other
 * nodes straight into, and host memory is pinned for the GPU copy engine where a GPU runtime is
 * loaded. VRAM morid cannot map (neither VMM with POSIX fds nor cudaMalloc memory) is accepted and
 * served through slots. Optional: unregistered buffers work too, at the cost of one copy out of
 * a slot of this node's DRAM tier. The memory must stay valid until
 * mori_umbp_deregister_memory(ptr) (the start of the range) or mori_umbp_close. ROCm/mori:
 * RegisterMemory. Errors: MORI_EINVAL, MORI_ERANGE (host memory not mapped here), MORI_EBUSY
 * (overlaps a registered range), MORI_ENOMEM, MORI_ENOGPU; deregister: MORI_EINVAL for a ptr that
 * does not start a registered range. */
MORI_API int mori_umbp_register_memory(mori_umbp *u, void *ptr, size_t size);
MORI_API int mori_umbp_deregister_memory(mori_umbp *u, void *ptr);

/* ---- Across nodes (docs/umbp.md, "Cluster") ----
 * With the daemon's kv_index = redis://HOST:PORT/DB every morid publishes the keys it holds to
 * that Redis, and mori_umbp_exists / batch_exists / batch_exists_consecutive count keys that any
 * live node holds (this node's store first, the rest in one round trip to Redis per
 * MORI_UMBP_LOOKUP_MAX keys). Keys keep their uid scope across nodes: uid 1000's keys on every
 * node are one namespace. When Redis is unreachable, a lookup that needs it fails at once with
 * MORI_ECONN naming the Redis address; keys of this node are still found. With kv_index = local
 * (the default) everything below answers for this node alone. */
#define MORI_UMBP_LOOKUP_MAX 4096 /* keys of one lookup request; larger batches go in several */
#define MORI_UMBP_NODE_MAX 128    /* bytes of a node's name (its peer address host:port), NUL included */

/* External KV (ROCm/mori's names): blocks a serving process holds in its own GPU (HBM) or host
 * caches, reported so that schedulers can route by prefix. No bytes move. A report belongs to
 * the handle's session: it ends with a revoke, when the process exits or dies, or when its node
 * stops heartbeating (the daemon's kv_index_ttl_ms). Reporting a key again at the same tier is a
 * no-op; reporting it at another tier adds that tier. tier: MORI_UMBP_TIER_HBM, _DRAM or _SSD.
 * Errors: MORI_EINVAL (keys NULL, n 0 for report and revoke, a key out of range, a bad tier:
 * nothing recorded), MORI_ENOMEM, MORI_ECONN, MORI_ETIMEDOUT. */
MORI_API int mori_umbp_report_external_kv_blocks(mori_umbp *u, const mori_umbp_key *keys, size_t n,
						 mori_umbp_tier tier);
/* This session's reports of keys at tier end (keys it did not report: nothing). */
MORI_API int mori_umbp_revoke_external_kv_blocks(mori_umbp *u, const mori_umbp_key *keys, size_t n,
						 mori_umbp_tier tier);
/* Every report of this session at tier ends; *count (may be NULL) gets how many keys.
 * ROCm/mori: revoke_all_external_kv_blocks_at_tier. */
MORI_API int mori_umbp_revoke_all_at_tier(mori_umbp *u, mori_umbp_tier tier, size_t *count);

/* One node's part of a match: which of the query's keys it holds, on which tiers. */
typedef struct mori_umbp_external_kv_match {
	char *node_id;                    /* the node's peer address (host:port; at most
	                                   * MORI_UMBP_NODE_MAX bytes with the NUL); with kv_index =
	                                   * local this node's `listen`, or "local" */
	size_t matched;                   /* distinct keys of the query it holds (any tier):
	                                   * ROCm/mori's matched_hash_count() */
	uint8_t *tier_mask;               /* n entries: bit (1 << tier) set where keys[i] is on tier */
} mori_umbp_external_kv_match;

/* Which live nodes hold keys[0..n) (n 1..MORI_UMBP_LOOKUP_MAX), one round trip: *out gets
 * *n_out matches (only nodes holding at least one key; order unspecified), freed by the caller
 * with mori_umbp_external_kv_match_free (also when *n_out is 0). count_as_hit: each key some
 * node holds gets its hit counter incremented once (only on the real routing path, as ROCm/mori
 * says). Errors: as report, and MORI_ECONN when Redis is unreachable. */
MORI_API int mori_umbp_match_external_kv(mori_umbp *u, const mori_umbp_key *keys, size_t n, int count_as_hit,
					 mori_umbp_external_kv_match **out, size_t *n_out);
MORI_API void mori_umbp_external_kv_match_free(mori_umbp_external_kv_match *m, size_t n);

/* Hit counters of keys[0..n) (n 1..MORI_UMBP_LOOKUP_MAX): counts[i] the lifetime count of
 * count_as_hit matches of keys[i], present[i] 0 where it was never counted or its counter expired
 * (2 h after its last hit; absent is not the same as 0). Counters outlive revokes. */
MORI_API int mori_umbp_get_external_kv_hit_counts(mori_umbp *u, const mori_umbp_key *keys, size_t n,
						  uint64_t *counts, uint8_t *present);

/* The store as this uid sees it (moractl kv shows the node's whole). */
typedef struct mori_umbp_stats {
	size_t size;               /* sizeof(mori_umbp_stats) as the caller compiled it */
	uint64_t dram_keys, dram_bytes, dram_capacity;
	uint64_t ssd_keys, ssd_bytes, ssd_capacity;
	uint64_t quota_bytes;      /* this uid's quota (0: none) and what it holds, both tiers */
	uint64_t used_bytes;
	uint64_t hits, misses;     /* gets of this uid since morid started */
	uint64_t evictions, spills, promotions;
} mori_umbp_stats;

/* Fill out (out->size set by the caller to sizeof(*out)). */
MORI_API int mori_umbp_stats_get(mori_umbp *u, mori_umbp_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* MORI_UMBP_H */
