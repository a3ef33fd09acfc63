/* The KV store's index (kv_int.h): (uid, key) -> the live entry. Chains, a table doubled when it
 * holds as many entries as buckets; while a bigger table fills, every operation moves a few
 * buckets of the old one over (Redis's incremental rehash), so growing to millions of keys
 * never stops the loop for more than the calloc of the new table (pages the kernel zeroes on
 * first touch). */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"
#include "mori.h"

#define INITIAL_BUCKETS 1024
#define MOVE_PER_OP 8

int kv_index_init(struct kv_index *x)
{
	memset(x, 0, sizeof(*x));
	randombytes_buf(x->seed, sizeof(x->seed));
	x->t[0] = calloc(INITIAL_BUCKETS, sizeof(*x->t[0]));
	if (!x->t[0])
		return MORI_ENOMEM;
	x->size[0] = INITIAL_BUCKETS;
	return MORI_OK;
}

void kv_index_fini(struct kv_index *x)
{
	free(x->t[0]);
	free(x->t[1]);
	memset(x, 0, sizeof(*x));
}

uint64_t kv_index_hash(const struct kv_index *x, uid_t uid, const void *key, size_t len)
{
	unsigned char buf[4 + KV_KEY_MAX];
	uint64_t h;
	uint32_t u = (uint32_t)uid;
	memcpy(buf, &u, 4);
	memcpy(buf + 4, key, len);
	crypto_shorthash((unsigned char *)&h, buf, 4 + len, x->seed);
	return h;
}

static void move_some(struct kv_index *x, int n)
{
	if (!x->t[1])
		return;
	while (n-- > 0 && x->moved < x->size[1]) {
		struct kv_entry *e = x->t[1][x->moved];
		x->t[1][x->moved++] = NULL;
		x->epoch++;
		while (e) {
			struct kv_entry *nx = e->hnext;
			uint64_t b = e->hash & (x->size[0] - 1);
			e->hnext = x->t[0][b];
			x->t[0][b] = e;
			e = nx;
		}
	}
	if (x->moved == x->size[1]) {
		free(x->t[1]);
		x->t[1] = NULL;
		x->size[1] = 0;
		x->moved = 0;
	}
}

/* The bucket holding hash now: the old table's while not yet moved. */
static struct kv_entry **bucket(struct kv_index *x, uint32_t hash)
{
	if (x->t[1]) {
		uint64_t b = hash & (x->size[1] - 1);
		if (b >= x->moved)
			return &x->t[1][b];
	}
	return &x->t[0][hash & (x->size[0] - 1)];
}

struct kv_entry *kv_index_find(struct kv_index *x, uid_t uid, const void *key, size_t len, uint64_t hash)
{
	move_some(x, MOVE_PER_OP);
	uint32_t h = (uint32_t)hash;
	for (struct kv_entry *e = *bucket(x, h); e; e = e->hnext)
		if (e->hash == h && e->uid == uid && e->key_len == len && !memcmp(e->key, key, len))
			return e;
	return NULL;
}

int kv_index_insert(struct kv_index *x, struct kv_entry *e)
{
	int rc = MORI_OK;
	move_some(x, MOVE_PER_OP);
	if (!x->t[1] && x->count >= x->size[0] && x->size[0] < (1ull << 32)) {
		struct kv_entry **nt = calloc(x->size[0] * 2, sizeof(*nt));
		if (nt) {
			x->t[1] = x->t[0];
			x->size[1] = x->size[0];
			x->moved = 0;
			x->t[0] = nt;
			x->size[0] *= 2;
			x->epoch++;
		} else {
			rc = MORI_ENOMEM;
		}
	}
	struct kv_entry **b = bucket(x, e->hash);
	e->hnext = *b;
	*b = e;
	x->count++;
	return rc;
}

void kv_index_remove(struct kv_index *x, struct kv_entry *e)
{
	for (struct kv_entry **p = bucket(x, e->hash); *p; p = &(*p)->hnext)
		if (*p == e) {
			*p = e->hnext;
			e->hnext = NULL;
			x->count--;
			return;
		}
}

void kv_index_each(struct kv_index *x, int (*fn)(struct kv_entry *e, void *arg), void *arg)
{
	for (int t = 1; t >= 0; t--)
		for (uint64_t b = t ? x->moved : 0; x->t[t] && b < x->size[t]; b++)
			for (struct kv_entry *e = x->t[t][b], *nx; e; e = nx) {
				nx = e->hnext;
				if (fn(e, arg))
					return;
			}
}

int kv_index_walk(struct kv_index *x, struct kv_index_cursor *c, uint64_t budget,
		  void (*fn)(struct kv_entry *e, void *arg), void *arg)
{
	if (c->epoch != x->epoch) {
		c->again |= c->phase != 0 || c->b != 0; /* a pass already under way */
		c->epoch = x->epoch;
	}
	while (budget) {
		int t = c->phase == 0 ? 1 : 0;
		uint64_t size = x->t[t] ? x->size[t] : 0;
		if (t == 1 && c->b < x->moved)
			c->b = x->moved; /* those buckets are in t[0] now */
		if (c->b >= size) {
			if (c->phase == 0) {
				c->phase = 1, c->b = 0;
				continue;
			}
			if (!c->again)
				return 1;
			c->phase = 0, c->b = 0, c->again = 0;
			continue;
		}
		for (struct kv_entry *e = x->t[t][c->b], *nx; e; e = nx) {
			nx = e->hnext;
			fn(e, arg);
		}
		c->b++;
		budget--;
	}
	return 0;
}

uint64_t kv_index_bytes(const struct kv_index *x)
{
	return (x->size[0] + x->size[1]) * sizeof(struct kv_entry *);
}
