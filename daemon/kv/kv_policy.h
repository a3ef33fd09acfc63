/* Eviction policies of the KV store: which value leaves a tier when room is needed. The store
 * embeds a struct kv_pnode in each entry and tells the policy what happens to it; the policy
 * only orders nodes and picks victims. The same code runs in morid and in the offline
 * simulator (mori-bench kv --sim), so a policy's hit rate on a trace is measured once for both.
 *
 * Policies: LRU (the baseline, what Mooncake Store and LMCache use) and the default, chosen by
 * measurement on the Mooncake conversation trace (docs/umbp.md). Costs: O(1) per call, and a
 * few words per node. */
#ifndef MORID_KV_POLICY_H
#define MORID_KV_POLICY_H
#include <stddef.h>
#include <stdint.h>

enum kv_policy_kind {
	KV_POLICY_LRU = 0,
	KV_POLICY_DEFAULT = 1, /* the measured best (docs/umbp.md says which and why) */
	/* further kinds as measured (S3-FIFO, ARC, prefix-aware ...) */
};

/* Per-entry state; the store embeds it and never reads it. */
struct kv_pnode {
	void *prev, *next;
	uint64_t word[2];
};

struct kv_policy;

/* kind's name ("lru", "s3fifo", ...) and back; kv_policy_parse returns -1 for an unknown name. */
const char *kv_policy_name(enum kv_policy_kind kind);
int kv_policy_parse(const char *name);

/* A policy for one tier of capacity bytes. NULL on ENOMEM. */
struct kv_policy *kv_policy_new(enum kv_policy_kind kind, uint64_t capacity);
void kv_policy_free(struct kv_policy *p);

/* A value entered the tier. hash: a 64-bit hash of the (uid, key) (ghost lists use it);
 * depth: the key's depth in its prefix chain, -1 unknown; parent: the node of the key's
 * predecessor in its chain when the store knows it, else NULL. */
void kv_policy_insert(struct kv_policy *p, struct kv_pnode *n, uint64_t hash, uint64_t bytes, int depth,
		      struct kv_pnode *parent);
/* A get found it (or a put replaced its value in place). */
void kv_policy_hit(struct kv_policy *p, struct kv_pnode *n);
/* It left the tier for a reason other than eviction (removed, replaced, moved). */
void kv_policy_remove(struct kv_policy *p, struct kv_pnode *n);

/* The next victim, or NULL when nothing can be evicted. skip(n, arg) != 0 means n may not be
 * evicted now (leased, pinned, mid-spill); the policy moves on and tries it again later. The
 * victim stays in the policy until the store calls kv_policy_evicted on it. */
struct kv_pnode *kv_policy_victim(struct kv_policy *p, int (*skip)(struct kv_pnode *n, void *arg), void *arg);
/* n was evicted (ghost lists remember its hash). */
void kv_policy_evicted(struct kv_policy *p, struct kv_pnode *n);

#endif
