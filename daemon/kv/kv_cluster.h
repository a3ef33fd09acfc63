/* UMBP across nodes: the cluster index (kv_cluster.c: Redis connection, publishing, heartbeat,
 * lookups; kv_ext.c: external KV reports). With kv_index = local (the default) none of it runs
 * and the store is the node's alone; with kv_index = redis://HOST:PORT/DB every morid publishes
 * what it holds to that Redis, through hiredis on morid's loop.
 *
 * What Redis holds (docs/umbp.md, "Cluster"): for each node N (its peer address, as peer.h
 * names nodes) of epoch E (the morid's d->epoch, new at every start):
 *   mori:node:N        string "E free capacity keys", PX kv_index_ttl_ms, set by each heartbeat
 *   mori:kv:N:E        hash  field = uid (4 bytes, big endian) + key -> "tier size gen"
 *   mori:ext:N:E       hash  field = uid + key -> tier mask of the node's external KV reports
 *   mori:nodes         set of node names (a hint for discovery; liveness is mori:node:N alone)
 *   mori:hits:UID:KEY  string counter of match_external_kv(count_as_hit) hits, PX 2 h
 * Both hashes get PEXPIRE kv_index_ttl_ms at every heartbeat (every kv_index_ttl_ms / 3). Every
 * TTL is relative and kept by Redis's clock alone: no morid sends a wall-clock time, so skewed
 * node clocks change nothing. A node that stops heartbeating (SIGKILL, partition from Redis)
 * stops counting for lookups once mori:node:N expires, at most kv_index_ttl_ms after its last
 * heartbeat, and its hashes vanish from Redis at the same time.
 *
 * Keys are scoped as in the local store: by uid (the number), so a cluster is assumed to share
 * one uid space (as nodes sharing LDAP or NFS do); a key of uid 1000 on node A is the same key
 * as uid 1000's on node B, never uid 1001's.
 *
 * A holder named by a lookup is checked again when it serves: the holder (kv_serve.c) checks that the
 * (epoch, gen) a lookup gave is still what it has; anything else is a miss, so a node
 * that restarted, evicted or replaced a key never serves bytes the asker did not look up.
 *
 * Everything here runs on morid's loop; no call blocks on Redis. */
#ifndef MORID_KV_CLUSTER_H
#define MORID_KV_CLUSTER_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/morid.h"

struct kv_store;
struct kv_entry;
struct client;

#define KV_NODE_MAX 128      /* bytes of a node's name, NUL included (peer.h's host:port) */
#define KV_LOOKUP_MAX 4096   /* keys of one lookup (exists, locate, match, hit counts) */

/* A key as the cluster calls take it: len bytes at data (1..KV_KEY_MAX), copied by the call. */
struct kv_key {
	const void *data;
	size_t len;
};

/* One holder of one key, as its node published it. */
struct kv_holder {
	const char *node;    /* the holder's peer address (host:port): peer_xfer_args.node */
	uint64_t epoch;      /* the holder morid's epoch when it published (its d->epoch) */
	uint64_t gen;        /* the version's generation at the holder (kv_entry.gen) */
	uint64_t size;       /* the value's bytes */
	uint8_t tier;        /* enum kv_tier: KV_TIER_DRAM or KV_TIER_SSD */
	uint8_t self;        /* 1: this node */
};

/* One key's holders (any order; none: a miss everywhere). */
struct kv_located {
	const struct kv_holder *holders;
	uint32_t n;
};

/* A lookup's answer, on the loop: status MORI_OK with res[0..n) (n = the keys asked, or with
 * KV_LOCATE_CONSECUTIVE the count up to and excluding the first key no live node holds), or
 * the failure with msg (MORI_ECONN: Redis unreachable, msg names its address; MORI_ETIMEDOUT:
 * no answer within kv_index_timeout_ms; MORI_ENOMEM). res and every string in it belong to the
 * cluster and live until cb returns. */
typedef void (*kv_locate_cb)(void *arg, int status, const char *msg, const struct kv_located *res, size_t n);

enum kv_locate_flags {
	KV_LOCATE_CONSECUTIVE = 1 << 0, /* stop at the first key no live node holds */
	KV_LOCATE_REMOTE = 1 << 1,      /* leave this node's holders out (its store is asked directly) */
};

/* Start the cluster index from d->cfg (kv_index local: nothing, 0). For redis://, connects in
 * the background (a Redis that is down at start is not an error: morid runs, local operations
 * work, lookups fail with MORI_ECONN until it answers). -1 after logging why: a malformed
 * kv_index, or kv_index redis without a `listen` address to name this node by. */
int kv_cluster_start(struct morid *d, struct kv_store *st);
/* Unpublishes nothing (the entries expire by themselves, kv_index_ttl_ms) and closes the
 * connection; pending lookups end with MORI_ECANCELED. */
void kv_cluster_stop(struct kv_store *st);
/* 1 when kv_index is redis:// (lookups go to Redis), 0 for local. */
int kv_cluster_on(const struct kv_store *st);

/* Where keys[0..n) (n 1..KV_LOOKUP_MAX) of uid are held, by the live nodes: one pipelined round
 * trip to Redis (one HMGET per live node and one MGET of their liveness keys). MORI_OK: cb runs
 * exactly once, later, on the loop. Else cb never runs and msg (msglen bytes) says why:
 * MORI_ENOTSUP (kv_index local), MORI_EINVAL (n or a key's length out of range), MORI_ECONN
 * (Redis unreachable now: fails at once, naming its address), MORI_ENOMEM. */
int kv_cluster_locate(struct morid *d, uid_t uid, const struct kv_key *keys, size_t n, unsigned flags,
		      kv_locate_cb cb, void *arg, char *msg, size_t msglen);

/* A live node as its last heartbeat told, for placement. */
struct kv_node_info {
	const char *node;        /* peer address (host:port) */
	uint64_t epoch;
	uint64_t dram_free;      /* bytes of its DRAM tier not allocated to values */
	uint64_t dram_capacity;  /* its kv_dram_bytes */
	uint64_t keys;           /* keys it holds, both tiers */
	uint8_t self;
};
/* The live nodes as of the last refresh (every kv_index_ttl_ms / 3; no round trip): *out points
 * into the cluster's table, valid until control returns to the loop. MORI_OK, MORI_ENOTSUP
 * (kv_index local), MORI_ECONN (Redis unreachable: the table would be stale, *n 0). */
int kv_cluster_nodes(struct morid *d, const struct kv_node_info **out, size_t *n);

/* The store's hooks (kv_store.c): e entered the index or changed tier (publish), e leaves the
 * index (unpublish). Queued and sent in pipelined batches; no-ops with kv_index local. */
void kv_cluster_publish(struct kv_store *st, const struct kv_entry *e);
void kv_cluster_unpublish(struct kv_store *st, const struct kv_entry *e);

/* ---- external KV (kv_ext.c): blocks serving processes hold in their own caches ---- */

/* Client c (uid) holds keys on tier (mori_umbp_tier 1..3): its report, additive and idempotent
 * (a key reported again at the same tier changes nothing). Reports belong to the reporting
 * session: they end with it, with the node (kv_index_ttl_ms), or by revoke. MORI_OK, MORI_EINVAL
 * (tier or a key out of range: nothing recorded), MORI_ENOMEM. */
int kv_ext_report(struct kv_store *st, struct client *c, uid_t uid, const struct kv_key *keys, size_t n, int tier,
		  char *msg, size_t msglen);
/* c's own reports of keys at tier end (keys it never reported: nothing). */
int kv_ext_revoke(struct kv_store *st, struct client *c, uid_t uid, const struct kv_key *keys, size_t n, int tier,
		  char *msg, size_t msglen);
/* Every report of c at tier ends; *count (may be NULL) gets how many. */
int kv_ext_revoke_tier(struct kv_store *st, struct client *c, int tier, uint64_t *count);
/* c's session ended: its reports end. */
void kv_ext_client_gone(struct kv_store *st, struct client *c);
/* The external-KV table, after kv_cluster_start (0, or -1 after logging why) and before
 * kv_cluster_stop. */
int kv_ext_start(struct kv_store *st);
void kv_ext_stop(struct kv_store *st);

/* One node's part of a match: mask[i] has bit (1 << tier) where keys[i] is reported on tier. */
struct kv_ext_match {
	const char *node;
	const uint8_t *mask;     /* n entries */
	uint32_t matched;        /* keys with a non-zero mask */
};
typedef void (*kv_match_cb)(void *arg, int status, const char *msg, const struct kv_ext_match *m, size_t nnodes);
/* Which live nodes hold keys[0..n) (external reports), one round trip; count_as_hit: each key
 * some node holds gets its hit counter incremented once. kv_index local: this node alone,
 * answered on the next loop turn. Returns and calls back as kv_cluster_locate. */
int kv_ext_match(struct morid *d, uid_t uid, const struct kv_key *keys, size_t n, int count_as_hit, kv_match_cb cb,
		 void *arg, char *msg, size_t msglen);
/* Hit counters of keys: counts[i], present[i] 0 where never counted or expired (absent is not 0). */
typedef void (*kv_hits_cb)(void *arg, int status, const char *msg, const uint64_t *counts, const uint8_t *present,
			   size_t n);
int kv_ext_hit_counts(struct morid *d, uid_t uid, const struct kv_key *keys, size_t n, kv_hits_cb cb, void *arg,
		      char *msg, size_t msglen);

/* ---- observation ---- */

/* For moractl kv and the metrics. */
struct kv_cluster_stats {
	const char *backend;     /* "local" or the redis:// address */
	const char *state;       /* "local", "connecting", "resyncing", "up", "down" */
	const char *last_error;  /* "" or why it is down */
	uint64_t published;      /* keys of this node in the index as far as acknowledged */
	uint64_t queued;         /* publish operations not yet acknowledged by Redis */
	uint64_t lag_ms;         /* age of the oldest of them, 0 when none */
	uint64_t round_trips, errors, resyncs, lookups, lookup_us_sum;
	const struct kv_node_info *nodes;
	size_t nnodes;
};
void kv_cluster_stats_get(const struct kv_store *st, struct kv_cluster_stats *s);
#endif
