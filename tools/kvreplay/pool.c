/* mori-kvreplay: the decode side's block pool: hash id -> block slot, LRU over unpinned held
 * blocks (linear-probing map with backward-shift deletion, so no tombstones). */
#include <stdlib.h>
#include <string.h>

#include "kvreplay.h"

static uint64_t map_hash(uint64_t k)
{
	return mix64(k + 0x632be59bd9b4e019ull);
}

void pool_init(struct pool *p, uint32_t nblocks)
{
	memset(p, 0, sizeof(*p));
	p->nblocks = nblocks;
	p->slot_hash = xcalloc(nblocks, sizeof(uint64_t));
	p->pin = xcalloc(nblocks, sizeof(uint32_t));
	p->prev = xcalloc(nblocks, sizeof(uint32_t));
	p->next = xcalloc(nblocks, sizeof(uint32_t));
	p->held = xcalloc(nblocks, 1);
	p->free_stack = xcalloc(nblocks, sizeof(uint32_t));
	for (uint32_t i = 0; i < nblocks; i++)
		p->free_stack[i] = nblocks - 1 - i; /* slot 0 first */
	p->nfree = nblocks;
	p->lru_head = p->lru_tail = NIL;
	uint64_t cap = 16;
	while (cap < (uint64_t)nblocks * 2)
		cap <<= 1;
	p->mkey = xcalloc(cap, sizeof(uint64_t));
	p->mval = xcalloc(cap, sizeof(uint32_t));
	memset(p->mval, 0xff, cap * sizeof(uint32_t));
	p->mmask = cap - 1;
}

void pool_free(struct pool *p)
{
	free(p->slot_hash);
	free(p->pin);
	free(p->prev);
	free(p->next);
	free(p->held);
	free(p->free_stack);
	free(p->mkey);
	free(p->mval);
	memset(p, 0, sizeof(*p));
}

static uint32_t map_get(const struct pool *p, uint64_t k)
{
	for (uint64_t i = map_hash(k) & p->mmask;; i = (i + 1) & p->mmask) {
		if (p->mval[i] == NIL)
			return NIL;
		if (p->mkey[i] == k)
			return p->mval[i];
	}
}

/* The slot holding hash, leaving the LRU order alone; NIL when it is not held. */
uint32_t pool_peek(const struct pool *p, uint64_t hash)
{
	return map_get(p, hash);
}

static void map_put(struct pool *p, uint64_t k, uint32_t v)
{
	uint64_t i = map_hash(k) & p->mmask;
	while (p->mval[i] != NIL && p->mkey[i] != k)
		i = (i + 1) & p->mmask;
	p->mkey[i] = k;
	p->mval[i] = v;
}

static void map_del(struct pool *p, uint64_t k)
{
	uint64_t i = map_hash(k) & p->mmask;
	while (p->mval[i] != NIL && p->mkey[i] != k)
		i = (i + 1) & p->mmask;
	if (p->mval[i] == NIL)
		return;
	/* backward-shift: move later entries of the cluster into the hole when allowed */
	for (uint64_t j = i;;) {
		p->mval[i] = NIL;
		for (;;) {
			j = (j + 1) & p->mmask;
			if (p->mval[j] == NIL)
				return;
			uint64_t home = map_hash(p->mkey[j]) & p->mmask;
			/* entry j may move to i if its home is not cyclically in (i, j] */
			if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
				break;
		}
		p->mkey[i] = p->mkey[j];
		p->mval[i] = p->mval[j];
		i = j;
	}
}

static void lru_unlink(struct pool *p, uint32_t s)
{
	if (p->prev[s] != NIL)
		p->next[p->prev[s]] = p->next[s];
	else
		p->lru_head = p->next[s];
	if (p->next[s] != NIL)
		p->prev[p->next[s]] = p->prev[s];
	else
		p->lru_tail = p->prev[s];
	p->prev[s] = p->next[s] = NIL;
}

static void lru_push_mru(struct pool *p, uint32_t s)
{
	p->prev[s] = p->lru_tail;
	p->next[s] = NIL;
	if (p->lru_tail != NIL)
		p->next[p->lru_tail] = s;
	else
		p->lru_head = s;
	p->lru_tail = s;
}

uint32_t pool_lookup(struct pool *p, uint64_t hash)
{
	uint32_t s = map_get(p, hash);
	if (s != NIL && !p->pin[s]) {
		lru_unlink(p, s);
		lru_push_mru(p, s);
	}
	return s;
}

uint32_t pool_alloc(struct pool *p, uint64_t hash)
{
	uint32_t s;
	if (p->nfree) {
		s = p->free_stack[--p->nfree];
	} else {
		s = p->lru_head;
		if (s == NIL)
			return NIL;
		lru_unlink(p, s);
		map_del(p, p->slot_hash[s]);
		p->evictions++;
	}
	p->slot_hash[s] = hash;
	p->held[s] = 1;
	p->pin[s] = 1;
	p->prev[s] = p->next[s] = NIL;
	map_put(p, hash, s);
	return s;
}

void pool_unpin(struct pool *p, uint32_t s, int ok)
{
	if (--p->pin[s])
		return;
	if (ok) {
		lru_push_mru(p, s);
	} else {
		map_del(p, p->slot_hash[s]);
		p->held[s] = 0;
		p->free_stack[p->nfree++] = s;
	}
}
