/* libmori: the argument arena, the part of the ring pair's memory where cross-node transfers
 * put what does not fit an SQE (descriptor lists); first fit over a sorted free list, 64-byte
 * granules. */
#include <stdlib.h>

#include "internal.h"

struct arena_block {
	struct arena_block *next;
	uint64_t off, len;
};

int arena_init(mori_client *c)
{
	struct arena_block *b = calloc(1, sizeof(*b));
	if (!b)
		return MORI_ENOMEM;
	b->off = 0;
	b->len = c->lay.arena_bytes;
	c->arena_free = b;
	return MORI_OK;
}

void arena_fini(mori_client *c)
{
	while (c->arena_free) {
		struct arena_block *n = c->arena_free->next;
		free(c->arena_free);
		c->arena_free = n;
	}
}

int arena_alloc(mori_client *c, uint64_t len, uint64_t *off)
{
	len = (len + 63) & ~63ull;
	int rc = MORI_EAGAIN;
	pthread_mutex_lock(&c->arena_lock);
	for (struct arena_block **p = &c->arena_free; *p; p = &(*p)->next) {
		struct arena_block *b = *p;
		if (b->len < len)
			continue;
		*off = b->off;
		b->off += len;
		b->len -= len;
		if (b->len == 0) {
			*p = b->next;
			free(b);
		}
		rc = MORI_OK;
		break;
	}
	pthread_mutex_unlock(&c->arena_lock);
	return rc;
}

void arena_release(mori_client *c, uint64_t off, uint64_t len)
{
	len = (len + 63) & ~63ull;
	pthread_mutex_lock(&c->arena_lock);
	struct arena_block **p = &c->arena_free, *prev = NULL;
	while (*p && (*p)->off < off) {
		prev = *p;
		p = &(*p)->next;
	}
	struct arena_block *next = *p;
	if (prev && prev->off + prev->len == off) {
		prev->len += len;
		if (next && prev->off + prev->len == next->off) {
			prev->len += next->len;
			prev->next = next->next;
			free(next);
		}
	} else if (next && off + len == next->off) {
		next->off = off;
		next->len += len;
	} else {
		struct arena_block *b = malloc(sizeof(*b));
		if (b) { /* on failure the space is lost until the client closes; never corrupted */
			b->off = off;
			b->len = len;
			b->next = next;
			*p = b;
		}
	}
	pthread_mutex_unlock(&c->arena_lock);
}
