/* The KV store's eviction policies (daemon/kv/kv_policy.c) on hand-made sequences, each checked
 * against victims worked out independently: LRU order, skip honoured by every policy, S3-FIFO's
 * main queue surviving a scan, W-TinyLFU keeping a frequent key, prefix-LRU taking chain tails
 * first, the ghost table bounded, LRU equal to an exact LRU simulation on a small trace, and ARC
 * equal to a textbook ARC written here from the paper's pseudocode. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_policy.h"

#define NKEYS 4096

/* A store in miniature: values of one byte, a miss in a put evicts until there is room. */
struct store {
	struct kv_policy *p;
	struct kv_pnode node[NKEYS]; /* node i: key i */
	uint8_t in[NKEYS];
	uint64_t cap, used;
	struct kv_pnode *last;       /* the store's last put, the parent of a chained put */
};

static struct store *store_new(enum kv_policy_kind kind, uint64_t cap)
{
	struct store *s = calloc(1, sizeof(*s));
	ck_assert_ptr_nonnull(s);
	s->p = kv_policy_new(kind, cap);
	ck_assert_ptr_nonnull(s->p);
	s->cap = cap;
	return s;
}

static void store_free(struct store *s)
{
	kv_policy_free(s->p);
	free(s);
}

static int key_of(struct store *s, struct kv_pnode *n) { return (int)(n - s->node); }

static int evict_one(struct store *s)
{
	struct kv_pnode *v = kv_policy_victim(s->p, NULL, NULL);
	ck_assert_ptr_nonnull(v);
	int k = key_of(s, v);
	ck_assert(s->in[k]);
	kv_policy_evicted(s->p, v);
	s->in[k] = 0;
	s->used--;
	return k;
}

/* depth -1 and no parent unless chained: then the previous put is the parent. */
static void put(struct store *s, int k, int depth, int chained)
{
	if (s->in[k]) {
		kv_policy_hit(s->p, &s->node[k]);
		s->last = &s->node[k];
		return;
	}
	kv_policy_expect(s->p, (uint64_t)k * 0x9e3779b97f4a7c15ull + 1);
	while (s->used + 1 > s->cap)
		evict_one(s);
	struct kv_pnode *par = chained && s->last && s->in[key_of(s, s->last)] ? s->last : NULL;
	kv_policy_insert(s->p, &s->node[k], (uint64_t)k * 0x9e3779b97f4a7c15ull + 1, 1, depth, par);
	s->in[k] = 1;
	s->used++;
	s->last = &s->node[k];
}

static int get(struct store *s, int k)
{
	if (!s->in[k])
		return 0;
	kv_policy_hit(s->p, &s->node[k]);
	return 1;
}

START_TEST(names)
{
	for (int k = 0; k < KV_POLICY_NKINDS; k++)
		ck_assert_int_eq(kv_policy_parse(kv_policy_name((enum kv_policy_kind)k)), k);
	ck_assert_int_eq(kv_policy_parse("nope"), -1);
	ck_assert_int_eq(kv_policy_parse(NULL), -1);
	ck_assert_ptr_null(kv_policy_new(KV_POLICY_NKINDS, 10));
	struct kv_policy *p = kv_policy_new(KV_POLICY_DEFAULT, 10);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_ne(kv_policy_kind_of(p), KV_POLICY_DEFAULT); /* resolved to a concrete kind */
	kv_policy_free(p);
	kv_policy_free(NULL);
}
END_TEST

START_TEST(lru_order)
{
	/* puts 0..3, gets 2, 0, a put of 1 (in place: a hit), then put 4: recency from least is 3, 2,
	 * 0, 1, 4; the victims come in that order */
	struct store *s = store_new(KV_POLICY_LRU, 4);
	for (int k = 0; k < 4; k++)
		put(s, k, -1, 0);
	ck_assert(get(s, 2) && get(s, 0));
	put(s, 1, -1, 0);
	put(s, 4, -1, 0); /* evicts 3 */
	ck_assert(!s->in[3]);
	const int want[] = {2, 0, 1, 4};
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(evict_one(s), want[i]);
	ck_assert_ptr_null(kv_policy_victim(s->p, NULL, NULL));
	store_free(s);
}
END_TEST

static int skip_set(struct kv_pnode *n, void *arg)
{
	const uint8_t *refuse = arg;
	return refuse[n->word[1] % 64]; /* arg: refusal flag by (hash % 64), unique for keys < 64 here */
}

/* Every policy: a refused node is passed over and stays; with all refused there is no victim. */
START_TEST(skip_honoured)
{
	for (int kind = 0; kind < KV_POLICY_NKINDS; kind++) {
		struct kv_policy *p = kv_policy_new((enum kv_policy_kind)kind, 8);
		struct kv_pnode n[8];
		uint8_t refuse[64] = {0};
		for (int k = 0; k < 8; k++)
			kv_policy_insert(p, &n[k], (uint64_t)k, 1, k, NULL); /* hash k: skip_set indexes it */
		for (int k = 0; k < 8; k++)
			refuse[k] = 1;
		ck_assert_msg(kv_policy_victim(p, skip_set, refuse) == NULL, "%s", kv_policy_name(kind));
		/* only 5 may go: it is the victim, whatever the policy's order */
		refuse[5] = 0;
		ck_assert_msg(kv_policy_victim(p, skip_set, refuse) == &n[5], "%s", kv_policy_name(kind));
		kv_policy_evicted(p, &n[5]);
		/* the refused ones all stay: with refusals lifted, the 7 others come out, each once */
		memset(refuse, 0, sizeof(refuse));
		uint8_t seen[8] = {0};
		for (int i = 0; i < 7; i++) {
			struct kv_pnode *v = kv_policy_victim(p, skip_set, refuse);
			ck_assert_ptr_nonnull(v);
			int k = (int)(v - n);
			ck_assert_msg(k != 5 && !seen[k], "%s: victim %d", kv_policy_name(kind), k);
			seen[k] = 1;
			kv_policy_evicted(p, v);
		}
		ck_assert_ptr_null(kv_policy_victim(p, NULL, NULL));
		kv_policy_free(p);
	}
}
END_TEST

/* LRU passes over a refused tail and takes the next oldest; the refused one is still the oldest. */
START_TEST(lru_skip_keeps_place)
{
	struct kv_policy *p = kv_policy_new(KV_POLICY_LRU, 4);
	struct kv_pnode n[4];
	uint8_t refuse[64] = {0};
	for (int k = 0; k < 4; k++)
		kv_policy_insert(p, &n[k], (uint64_t)k, 1, -1, NULL);
	refuse[0] = 1;
	ck_assert_ptr_eq(kv_policy_victim(p, skip_set, refuse), &n[1]);
	kv_policy_evicted(p, &n[1]);
	ck_assert_ptr_eq(kv_policy_victim(p, NULL, NULL), &n[0]);
	kv_policy_free(p);
}
END_TEST

/* 40 keys read once, then a scan of 2000 new keys through a cache of 100: S3-FIFO moved the read
 * keys to its main queue and evicts the scan from its small one, so all 40 stay; LRU loses them. */
START_TEST(s3fifo_scan_resistant)
{
	int kinds[] = {KV_POLICY_S3FIFO, KV_POLICY_LRU};
	for (int t = 0; t < 2; t++) {
		struct store *s = store_new((enum kv_policy_kind)kinds[t], 100);
		for (int k = 0; k < 40; k++)
			put(s, k, -1, 0);
		for (int k = 0; k < 40; k++)
			ck_assert(get(s, k));
		for (int k = 40; k < 2040; k++)
			put(s, k, -1, 0);
		int kept = 0;
		for (int k = 0; k < 40; k++)
			kept += s->in[k];
		ck_assert_int_eq(kept, t == 0 ? 40 : 0);
		store_free(s);
	}
}
END_TEST

/* A key read 5 times outlives a scan of 1000 keys read never under W-TinyLFU (the sketch counts
 * it more than any scan key), not under LRU. */
START_TEST(tinylfu_keeps_frequent)
{
	int kinds[] = {KV_POLICY_TINYLFU, KV_POLICY_LRU};
	for (int t = 0; t < 2; t++) {
		struct store *s = store_new((enum kv_policy_kind)kinds[t], 100);
		put(s, 0, -1, 0);
		for (int i = 0; i < 5; i++)
			ck_assert(get(s, 0));
		for (int k = 1; k <= 1000; k++)
			put(s, k, -1, 0);
		ck_assert_int_eq(s->in[0], t == 0);
		store_free(s);
	}
}
END_TEST

/* Chains 0<-1<-2 and 10<-11, each put in one batch (parent = previous item): the victims are the
 * tail 2 (never hit), then, with 11 being the last put (its chain may still grow), the chained
 * blocks root first by recency, deepest first within a chain: 1, 0, 10, and 11 last. */
START_TEST(prefix_tails_first)
{
	int kinds[] = {KV_POLICY_PREFIX_LRU, KV_POLICY_PREFIX_SLRU};
	for (int t = 0; t < 2; t++) {
		struct store *s = store_new((enum kv_policy_kind)kinds[t], 8);
		put(s, 0, 0, 0);
		put(s, 1, 1, 1);
		put(s, 2, 2, 1);
		put(s, 10, 0, 0);
		put(s, 11, 1, 1);
		const int want[] = {2, 1, 0, 10, 11};
		for (int i = 0; i < 5; i++)
			ck_assert_int_eq(evict_one(s), want[i]);
		store_free(s);
	}
}
END_TEST

/* A tail that was read is no dead weight: it stays while an unread tail goes. */
START_TEST(prefix_hit_tail_kept)
{
	struct store *s = store_new(KV_POLICY_PREFIX_LRU, 8);
	put(s, 0, 0, 0);
	put(s, 1, 1, 1); /* tail of chain 0 */
	put(s, 10, 0, 0);
	put(s, 11, 1, 1); /* tail of chain 10 */
	put(s, 20, 0, 0); /* the last put */
	ck_assert(get(s, 1));
	ck_assert_int_eq(evict_one(s), 11);
	store_free(s);
}
END_TEST

/* The ghost table grows with the resident entries only: a scan of 100 000 keys through a cache of
 * 1 000 leaves it at most 4 slots of 16 bytes per resident entry. */
START_TEST(ghost_bounded)
{
	static struct kv_pnode n[1000];
	struct kv_policy *p = kv_policy_new(KV_POLICY_S3FIFO, 1000);
	uint64_t used = 0;
	for (uint64_t k = 0; k < 100000; k++) {
		if (used == 1000) {
			struct kv_pnode *v = kv_policy_victim(p, NULL, NULL);
			ck_assert_ptr_nonnull(v);
			kv_policy_evicted(p, v);
			used--;
			kv_policy_insert(p, v, k, 1, -1, NULL); /* reuse the freed node */
		} else {
			kv_policy_insert(p, &n[k], k, 1, -1, NULL);
		}
		used++;
	}
	ck_assert_uint_le(kv_policy_aux_bytes(p), 4u * 16u * 1000u);
	ck_assert_uint_gt(kv_policy_aux_bytes(p), 0);
	kv_policy_free(p);
}
END_TEST

static uint64_t rng_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* A synthetic trace of requests sharing prefixes, the ids of each request in order. The exact
 * LRU (last-use times, the least recent evicted by a full scan) and the LRU policy fed as a store
 * is (exists-consecutive, gets of the found prefix, a chained put of the rest) find the same
 * blocks: the same hits, request by request. */
START_TEST(lru_matches_exact)
{
	enum { REQS = 600, CAP = 60, CONVS = 30, MAXLEN = 24 };
	static int ids[REQS][MAXLEN], len[REQS];
	uint64_t x = 88172645463325252ull;
	int conv_len[CONVS] = {0}, conv_ids[CONVS][MAXLEN], next_id = 1;
	for (int r = 0; r < REQS; r++) { /* a conversation's next turn: its prompt plus 1..3 blocks */
		int c = (int)(rng_next(&x) % CONVS);
		if (conv_len[c] + 3 > MAXLEN || conv_len[c] == 0) {
			conv_len[c] = 1;
			conv_ids[c][0] = 0; /* a shared system block */
		}
		int add = 1 + (int)(rng_next(&x) % 3);
		for (int i = 0; i < add; i++)
			conv_ids[c][conv_len[c]++] = next_id++;
		len[r] = conv_len[c];
		memcpy(ids[r], conv_ids[c], sizeof(int) * (size_t)len[r]);
	}
	ck_assert_int_lt(next_id, NKEYS);

	/* exact LRU over the id sequence */
	static uint64_t last_use[NKEYS];
	static uint8_t in[NKEYS];
	static int hit_exact[REQS];
	uint64_t now = 0;
	int used = 0;
	for (int r = 0; r < REQS; r++)
		for (int i = 0; i < len[r]; i++) {
			int k = ids[r][i];
			now++;
			if (in[k]) {
				hit_exact[r]++;
			} else {
				if (used == CAP) {
					int v = -1;
					for (int j = 0; j < NKEYS; j++)
						if (in[j] && (v < 0 || last_use[j] < last_use[v]))
							v = j;
					in[v] = 0;
					used--;
				}
				in[k] = 1;
				used++;
			}
			last_use[k] = now;
		}

	struct store *s = store_new(KV_POLICY_LRU, CAP);
	uint64_t total_exact = 0, total_policy = 0;
	for (int r = 0; r < REQS; r++) {
		int k = 0, hits = 0;
		while (k < len[r] && s->in[ids[r][k]])
			k++;
		for (int i = 0; i < k; i++)
			hits += get(s, ids[r][i]);
		s->last = NULL; /* a new batch: its first item has no known parent */
		for (int i = k; i < len[r]; i++) {
			hits += s->in[ids[r][i]];
			put(s, ids[r][i], i, 1);
		}
		ck_assert_int_eq(hits, hit_exact[r]);
		total_exact += (uint64_t)hit_exact[r];
		total_policy += (uint64_t)hits;
	}
	ck_assert_uint_eq(total_policy, total_exact);
	ck_assert_uint_gt(total_exact, 0); /* the trace does reuse blocks */
	store_free(s);
}
END_TEST

/* ARC as Megiddo and Modha's figure 4 states it (FAST '03), on arrays in LRU order (index 0 the
 * least recent), each operation a linear search: T1, T2 in the cache, B1, B2 their ghosts, p the
 * target size of T1. */
struct ref_arc {
	int c;
	double p;
	int len[4], *l[4]; /* 0 T1, 1 T2, 2 B1, 3 B2 */
	int case2, case3;  /* ghost hits seen in B1 and B2 */
};

static int ra_find(struct ref_arc *a, int li, int x)
{
	for (int i = 0; i < a->len[li]; i++)
		if (a->l[li][i] == x)
			return i;
	return -1;
}

static void ra_del(struct ref_arc *a, int li, int at)
{
	memmove(&a->l[li][at], &a->l[li][at + 1], sizeof(int) * (size_t)(a->len[li] - at - 1));
	a->len[li]--;
}

static void ra_mru(struct ref_arc *a, int li, int x) { a->l[li][a->len[li]++] = x; }

static void ra_replace(struct ref_arc *a, int x_in_b2)
{
	if (a->len[0] >= 1 && ((x_in_b2 && a->len[0] == a->p) || a->len[0] > a->p)) {
		ra_mru(a, 2, a->l[0][0]);
		ra_del(a, 0, 0);
	} else {
		ra_mru(a, 3, a->l[1][0]);
		ra_del(a, 1, 0);
	}
}

/* 1 on a hit */
static int ra_ref(struct ref_arc *a, int x)
{
	int i;
	if ((i = ra_find(a, 0, x)) >= 0 || (i = ra_find(a, 1, x)) >= 0) { /* case I */
		ra_del(a, ra_find(a, 0, x) >= 0 ? 0 : 1, i);
		ra_mru(a, 1, x);
		return 1;
	}
	double b1 = a->len[2], b2 = a->len[3];
	if ((i = ra_find(a, 2, x)) >= 0) { /* case II */
		a->p = fmin(a->c, a->p + (b1 >= b2 ? 1 : b2 / b1));
		ra_replace(a, 0);
		ra_del(a, 2, i);
		ra_mru(a, 1, x);
		a->case2++;
		return 0;
	}
	if ((i = ra_find(a, 3, x)) >= 0) { /* case III */
		a->p = fmax(0, a->p - (b2 >= b1 ? 1 : b1 / b2));
		ra_replace(a, 1);
		ra_del(a, 3, i);
		ra_mru(a, 1, x);
		a->case3++;
		return 0;
	}
	int l1 = a->len[0] + a->len[2], all = l1 + a->len[1] + a->len[3];
	if (l1 == a->c) { /* case IV A */
		if (a->len[0] < a->c) {
			ra_del(a, 2, 0);
			ra_replace(a, 0);
		} else {
			ra_del(a, 0, 0);
		}
	} else if (all >= a->c) { /* case IV B */
		if (all == 2 * a->c)
			ra_del(a, 3, 0);
		ra_replace(a, 0);
	}
	ra_mru(a, 0, x);
	return 0;
}

/* ARC through the store miniature (expect, victims, insert; gets as hits) against the textbook ARC
 * on a trace that shifts between a looping working set larger than the cache (recency loses), a
 * zipf-like hot set and scans: the same hit or miss at every reference, the same blocks resident
 * at the end, and both ghost lists hit (the target moved both ways). */
START_TEST(arc_matches_reference)
{
	enum { CAP = 64, REFS = 60000 };
	struct ref_arc a = {.c = CAP};
	for (int li = 0; li < 4; li++)
		a.l[li] = calloc(2 * CAP + 1, sizeof(int));
	struct store *s = store_new(KV_POLICY_ARC, CAP);
	uint64_t x = 0x2545f4914f6cdd1dull;
	int scan = 2000, hits = 0;
	for (int r = 0; r < REFS; r++) {
		int phase = (r / 5000) % 3, k;
		uint64_t v = rng_next(&x);
		if (phase == 0) /* a loop over 80 keys mixed with fresh ones */
			k = v % 4 ? (int)(r % 80) : scan++ % 2000 + 2000;
		else if (phase == 1) /* hot: key i with weight ~ 1 / (i + 1) over 400 keys */
			k = (int)((v % 1000) * (v % 1000) / 2500) + (int)(v >> 40) % 2;
		else /* a scan through 1000 keys with a small hot set */
			k = v % 3 ? 1000 + (r % 1000) : (int)(v >> 33) % 16;
		ck_assert_int_lt(k, NKEYS);
		int want = ra_ref(&a, k), got = s->in[k];
		if (got)
			get(s, k);
		else
			put(s, k, -1, 0);
		ck_assert_msg(got == want, "reference %d, key %d: arc %d, reference %d", r, k, got, want);
		hits += got;
	}
	ck_assert_int_eq(a.len[0] + a.len[1], CAP);
	for (int li = 0; li < 2; li++)
		for (int i = 0; i < a.len[li]; i++)
			ck_assert(s->in[a.l[li][i]]);
	ck_assert_int_gt(a.case2, 0);
	ck_assert_int_gt(a.case3, 0);
	ck_assert_int_gt(hits, 0);
	ck_assert_uint_le(kv_policy_aux_bytes(s->p), 4096u * 36u);
	store_free(s);
	for (int li = 0; li < 4; li++)
		free(a.l[li]);
}
END_TEST

/* The policy through the store miniature against the textbook ARC: refs references over nkeys
 * keys (all of them in one half of each 5000, a third of them in the other), hit for hit.
 * Returns the policy's bytes beyond the nodes at the end. */
static size_t arc_vs_reference(int cap, int nkeys, int refs, uint64_t *x)
{
	struct ref_arc a = {.c = cap};
	for (int li = 0; li < 4; li++)
		a.l[li] = calloc(2 * (size_t)cap + 1, sizeof(int));
	struct store *s = store_new(KV_POLICY_ARC, (uint64_t)cap);
	for (int r = 0; r < refs; r++) {
		int k = (int)(rng_next(x) % (uint64_t)(r % 5000 < 2500 ? nkeys : nkeys / 3 + 1));
		int want = ra_ref(&a, k), got = s->in[k];
		if (got)
			get(s, k);
		else
			put(s, k, -1, 0);
		ck_assert_msg(got == want, "cache %d, keys %d, reference %d: arc %d, reference %d", cap, nkeys, r, got,
			      want);
	}
	size_t aux = kv_policy_aux_bytes(s->p);
	store_free(s);
	for (int li = 0; li < 4; li++)
		free(a.l[li]);
	return aux;
}

/* Small caches and few keys, many seeds: ARC's corner cases (a full T1, the target at 0 or at the
 * capacity, T1 exactly at the target when a B2 ghost returns) come up, and the hits still agree. */
START_TEST(arc_matches_reference_small)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int t = 0; t < 400; t++)
		arc_vs_reference(1 + t % 8, 2 + t % 8 + t % (2 * (1 + t % 8) + 1), 300, &x);
}
END_TEST

/* A cache of 1100: its ghosts outgrow the pool's first 1024 slots (a rehash), hit for hit still. */
START_TEST(arc_ghost_growth)
{
	uint64_t x = 12345;
	ck_assert_uint_gt(arc_vs_reference(1100, 3600, 5000, &x), 1024u * 36u);
}
END_TEST

/* A batch put reserves all its values (expect, then room) before committing any (insert): two
 * keys back from B1 in one batch both enter T2, as one after the other would. The textbook ARC on
 * the same references (0 1 0 1 2 3 4 5, then 2 3 as a batch, then 6) leaves the same blocks. */
START_TEST(arc_batch_reserve)
{
	const int seq[] = {0, 1, 0, 1, 2, 3, 4, 5, 2, 3, 6};
	struct ref_arc a = {.c = 4};
	for (int li = 0; li < 4; li++)
		a.l[li] = calloc(9, sizeof(int));
	for (int i = 0; i < 11; i++)
		ra_ref(&a, seq[i]);
	struct store *s = store_new(KV_POLICY_ARC, 4);
	for (int i = 0; i < 8; i++)
		if (!get(s, seq[i]))
			put(s, seq[i], -1, 0);
	const int batch[] = {2, 3};
	for (int i = 0; i < 2; i++) { /* reserve: expect and make room for each */
		ck_assert(!s->in[batch[i]]);
		kv_policy_expect(s->p, (uint64_t)batch[i] * 0x9e3779b97f4a7c15ull + 1);
		evict_one(s);
	}
	for (int i = 0; i < 2; i++) { /* commit */
		kv_policy_insert(s->p, &s->node[batch[i]], (uint64_t)batch[i] * 0x9e3779b97f4a7c15ull + 1, 1, -1, NULL);
		s->in[batch[i]] = 1;
		s->used++;
	}
	put(s, 6, -1, 0);
	for (int k = 0; k < 8; k++)
		ck_assert_msg(s->in[k] == (ra_find(&a, 0, k) >= 0 || ra_find(&a, 1, k) >= 0), "key %d", k);
	store_free(s);
	for (int li = 0; li < 4; li++)
		free(a.l[li]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kv_policy");
	TCase *tc = tcase_create("policies");
	tcase_add_test(tc, names);
	tcase_add_test(tc, lru_order);
	tcase_add_test(tc, skip_honoured);
	tcase_add_test(tc, lru_skip_keeps_place);
	tcase_add_test(tc, s3fifo_scan_resistant);
	tcase_add_test(tc, tinylfu_keeps_frequent);
	tcase_add_test(tc, prefix_tails_first);
	tcase_add_test(tc, prefix_hit_tail_kept);
	tcase_add_test(tc, ghost_bounded);
	tcase_add_test(tc, lru_matches_exact);
	tcase_add_test(tc, arc_matches_reference);
	tcase_add_test(tc, arc_matches_reference_small);
	tcase_add_test(tc, arc_ghost_growth);
	tcase_add_test(tc, arc_batch_reserve);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
