/* Eviction policies of the KV store: which value leaves a tier when room is needed. The store
 * embeds a struct kv_pnode in each entry and tells the policy what happens to it; the policy
 * only orders nodes and picks victims. The same code runs in morid and in the offline
 * simulator (mori-bench kv --sim), so a policy's hit rate on a trace is measured once for both.
 *
 * Policies: LRU (the baseline, what Mooncake Store and LMCache use), S3-FIFO, W-TinyLFU, ARC and
 * prefix-LRU (chain tails that were never hit go first); the default is chosen by measurement on
 * the Mooncake conversation trace (docs/umbp-policy.md). Costs: O(1) per call apart from skipped
 * nodes (a victim walk passes over them), the node's two words, and for S3-FIFO, TinyLFU and ARC
 * a table sized by the resident entries and capped (kv_policy_aux_bytes). */
#ifndef MORID_KV_POLICY_H
#define MORID_KV_POLICY_H
#include <stddef.h>
#include <stdint.h>

enum kv_policy_kind {
	KV_POLICY_LRU = 0,
	KV_POLICY_DEFAULT = 1, /* the measured best (docs/umbp.md says which and why) */
	KV_POLICY_S3FIFO = 2,  /* small FIFO, main CLOCK, ghost of hashes (Yang et al., SOSP'23) */
	KV_POLICY_TINYLFU = 3, /* W-TinyLFU: LRU window, frequency-sketch admission, SLRU main */
	KV_POLICY_PREFIX_LRU = 4, /* LRU over chain tails never hit, then LRU over the rest */
	KV_POLICY_PREFIX_SLRU = 5, /* prefix-LRU with the hit blocks in a protected segment */
	KV_POLICY_ARC = 6,     /* ARC: recency and frequency lists, ghosts of hashes (Megiddo, Modha) */
	KV_POLICY_NKINDS
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

/* The kind p runs: KV_POLICY_DEFAULT resolved to the concrete kind. */
enum kv_policy_kind kv_policy_kind_of(const struct kv_policy *p);
/* Bytes p holds beyond itself and the nodes (ghost table, sketch, ARC's ghost lists): grows with
 * the most resident entries seen, up to a fixed cap (64 MiB each, 72 MiB for ARC). */
size_t kv_policy_aux_bytes(const struct kv_policy *p);

/* A policy for one tier of capacity bytes (the simulator counts blocks: bytes 1 each). NULL on
 * ENOMEM or an unknown kind. */
struct kv_policy *kv_policy_new(enum kv_policy_kind kind, uint64_t capacity);
void kv_policy_free(struct kv_policy *p);

/* A value of this hash is about to enter the tier: the victims chosen before its
 * kv_policy_insert make room for it. ARC adapts its target here on a ghost hit, before choosing
 * them (the order its definition needs); the other policies ignore it. Optional: without it ARC
 * adapts at the insert, after the victims. */
void kv_policy_expect(struct kv_policy *p, uint64_t hash);

/* A value entered the tier. hash: a 64-bit hash of the (uid, key) (ghost lists use it);
 * depth: the key's depth in its prefix chain, -1 unknown; parent: the node of the key's
 * predecessor in its chain when the store knows it (the previous item of the same batch put),
 * else NULL; it must be a node of p or NULL. n's prev/next/word are the policy's from here. */
void kv_policy_insert(struct kv_policy *p, struct kv_pnode *n, uint64_t hash, uint64_t bytes, int depth,
		      struct kv_pnode *parent);
/* A get found it (or a put replaced its value in place). n must be in p. */
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
