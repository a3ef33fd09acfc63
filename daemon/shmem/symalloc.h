/* The symmetric heap's allocator (MORI-SHMEM): one per group, run by the group's
 * root daemon only, so that every PE gets the same offset for the same call. First fit over
 * free blocks sorted by offset; freed blocks coalesce. Pure bookkeeping: it never touches the
 * heaps themselves. */
#ifndef MORID_SYMALLOC_H
#define MORID_SYMALLOC_H
#include <stddef.h>
#include <stdint.h>

struct sblk { uint64_t off, len; };

struct symheap {
	uint64_t size;             /* the heap's bytes */
	uint64_t base;             /* first byte allocations may use (MORI_SHMEM_RESERVED) */
	struct sblk *free_b, *used_b; /* both sorted by offset */
	size_t nfree, nused, capfree, capused;
	uint64_t used_bytes;       /* allocated bytes (after rounding), base excluded */
};

/* [base, size) free. 0, or MORI_EINVAL when base >= size. */
int symheap_init(struct symheap *h, uint64_t size, uint64_t base);
void symheap_fini(struct symheap *h);
/* Allocate size bytes at a multiple of align (a power of two; 0: SHMEM_MIN_ALIGN); size rounds
 * up to SHMEM_ALLOC_GRAIN. *off gets the heap offset; size 0 gives offset 0 (NULL). MORI_EINVAL
 * (align not a power of two) or MORI_ENOMEM, with the reason and the sizes in msg. */
int symheap_alloc(struct symheap *h, uint64_t size, uint64_t align, uint64_t *off, char *msg, size_t len);
/* Free the block that starts at off (0: a no-op). MORI_EINVAL when no allocation starts there. */
int symheap_free(struct symheap *h, uint64_t off, char *msg, size_t len);
/* Bytes free in all, and the largest free block. */
uint64_t symheap_free_bytes(const struct symheap *h, uint64_t *largest);
#endif
