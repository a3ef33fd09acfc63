/* The symmetric heap's allocator (symalloc.h): first fit, coalescing, sorted arrays. */
#include "symalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mori.h"
#include "shmem_wire.h"

int symheap_init(struct symheap *h, uint64_t size, uint64_t base)
{
	memset(h, 0, sizeof(*h));
	if (base >= size)
		return MORI_EINVAL;
	h->size = size;
	h->base = base;
	h->free_b = malloc(16 * sizeof(*h->free_b));
	h->used_b = malloc(16 * sizeof(*h->used_b));
	if (!h->free_b || !h->used_b) {
		symheap_fini(h);
		return MORI_ENOMEM;
	}
	h->capfree = h->capused = 16;
	h->free_b[0] = (struct sblk){base, size - base};
	h->nfree = 1;
	return MORI_OK;
}

void symheap_fini(struct symheap *h)
{
	free(h->free_b);
	free(h->used_b);
	memset(h, 0, sizeof(*h));
}

/* Room for one more entry in an array; 0 or MORI_ENOMEM. */
static int grow(struct sblk **a, size_t n, size_t *cap)
{
	if (n < *cap)
		return MORI_OK;
	struct sblk *p = realloc(*a, 2 * *cap * sizeof(**a));
	if (!p)
		return MORI_ENOMEM;
	*a = p;
	*cap *= 2;
	return MORI_OK;
}

static void insert_at(struct sblk *a, size_t *n, size_t i, struct sblk b)
{
	memmove(a + i + 1, a + i, (*n - i) * sizeof(*a));
	a[i] = b;
	(*n)++;
}

static void remove_at(struct sblk *a, size_t *n, size_t i)
{
	memmove(a + i, a + i + 1, (*n - i - 1) * sizeof(*a));
	(*n)--;
}

/* Index of the first block whose offset is >= off. */
static size_t lower_bound(const struct sblk *a, size_t n, uint64_t off)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

uint64_t symheap_free_bytes(const struct symheap *h, uint64_t *largest)
{
	uint64_t t = 0, big = 0;
	for (size_t i = 0; i < h->nfree; i++) {
		t += h->free_b[i].len;
		if (h->free_b[i].len > big)
			big = h->free_b[i].len;
	}
	if (largest)
		*largest = big;
	return t;
}

int symheap_alloc(struct symheap *h, uint64_t size, uint64_t align, uint64_t *off, char *msg, size_t len)
{
	*off = 0;
	if (!align)
		align = SHMEM_MIN_ALIGN;
	if (align & (align - 1)) {
		snprintf(msg, len, "alignment %llu is not a power of two", (unsigned long long)align);
		return MORI_EINVAL;
	}
	if (size == 0)
		return MORI_OK;
	uint64_t want = size > h->size ? h->size + 1 : (size + SHMEM_ALLOC_GRAIN - 1) & ~(uint64_t)(SHMEM_ALLOC_GRAIN - 1);
	for (size_t i = 0; align <= h->size && want <= h->size && i < h->nfree; i++) {
		struct sblk b = h->free_b[i];
		uint64_t a = (b.off + align - 1) & ~(align - 1);
		if (a < b.off || a - b.off > b.len || b.len - (a - b.off) < want)
			continue;
		if (grow(&h->used_b, h->nused, &h->capused) || grow(&h->free_b, h->nfree, &h->capfree)) {
			snprintf(msg, len, "morid is out of memory for the allocator's tables");
			return MORI_ENOMEM;
		}
		/* [b.off, a) stays free, [a, a+want) is taken, [a+want, end) stays free */
		uint64_t end = b.off + b.len;
		remove_at(h->free_b, &h->nfree, i);
		size_t k = i;
		if (a > b.off)
			insert_at(h->free_b, &h->nfree, k++, (struct sblk){b.off, a - b.off});
		if (end > a + want)
			insert_at(h->free_b, &h->nfree, k, (struct sblk){a + want, end - a - want});
		insert_at(h->used_b, &h->nused, lower_bound(h->used_b, h->nused, a), (struct sblk){a, want});
		h->used_bytes += want;
		*off = a;
		return MORI_OK;
	}
	uint64_t largest, total = symheap_free_bytes(h, &largest);
	snprintf(msg, len,
		 "no room for %llu bytes (aligned to %llu): %llu of the heap's %llu bytes are free, the largest "
		 "free block has %llu (%llu allocated, %llu reserved)",
		 (unsigned long long)size, (unsigned long long)align, (unsigned long long)total,
		 (unsigned long long)h->size, (unsigned long long)largest, (unsigned long long)h->used_bytes,
		 (unsigned long long)h->base);
	return MORI_ENOMEM;
}

int symheap_free(struct symheap *h, uint64_t off, char *msg, size_t len)
{
	if (off == 0)
		return MORI_OK;
	size_t i = lower_bound(h->used_b, h->nused, off);
	if (i == h->nused || h->used_b[i].off != off) {
		snprintf(msg, len, "heap offset %#llx is not the start of a symmetric allocation",
			 (unsigned long long)off);
		return MORI_EINVAL;
	}
	struct sblk b = h->used_b[i];
	if (grow(&h->free_b, h->nfree, &h->capfree)) {
		snprintf(msg, len, "morid is out of memory for the allocator's tables");
		return MORI_ENOMEM;
	}
	remove_at(h->used_b, &h->nused, i);
	h->used_bytes -= b.len;
	size_t k = lower_bound(h->free_b, h->nfree, b.off);
	/* coalesce with the free neighbours on either side */
	if (k > 0 && h->free_b[k - 1].off + h->free_b[k - 1].len == b.off) {
		b.off = h->free_b[k - 1].off;
		b.len += h->free_b[k - 1].len;
		remove_at(h->free_b, &h->nfree, --k);
	}
	if (k < h->nfree && b.off + b.len == h->free_b[k].off) {
		b.len += h->free_b[k].len;
		remove_at(h->free_b, &h->nfree, k);
	}
	insert_at(h->free_b, &h->nfree, k, b);
	return MORI_OK;
}
