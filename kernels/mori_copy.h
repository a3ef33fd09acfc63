/* The batched copy kernel's argument block, shared by the kernel (kernels/copy.cu) and the
 * host code that launches it (libclient/gpu_copy.c): fixed-width fields only, so C and
 * CUDA/HIP C++ lay it out alike. Passed by value as the kernel's one parameter. */
#ifndef MORI_COPY_H
#define MORI_COPY_H
#include <stdint.h>

#define MORI_COPY_KERNEL "mori_copy_batch"
#define MORI_COPY_KERNEL_VIZ "mori_copy_batch_viz" /* the same with MORI-VIZ trace points (args.viz) */
#define MORI_COPY_INLINE 8            /* batches this small travel inside the parameters */
#define MORI_COPY_MIN_CHUNK_SHIFT 10  /* a warp copies at least 1 KiB of one descriptor */
#define MORI_COPY_MAX_CHUNK_SHIFT 16  /* and at most 64 KiB */
#define MORI_COPY_CHUNKS_PER_WARP 4   /* aim: this many chunks per resident warp (balance) */
#define MORI_COPY_BLOCK_THREADS 256
#define MORI_COPY_BLOCKS_PER_SM 6      /* resident blocks the kernel is built for (40 registers) */

/* One descriptor, laid out as mori_desc: (local offset, remote offset, length). Which of the
 * two offsets is the source is the batch's `swap` flag, so the caller's array is copied as is. */
struct mori_copy_desc {
	uint64_t a_off;
	uint64_t b_off;
	uint64_t len;
};

/* The work is cut into chunks of 1 << chunk_shift bytes of one descriptor; each warp copies
 * whole chunks. When every descriptor has the same number of chunks (`uniform`: 1 when each
 * fits in one chunk, as KV blocks of one size do), chunk c belongs to descriptor
 * c / uniform; otherwise first_chunk[i] is descriptor i's first chunk (n + 1 entries, the
 * last is the total) and the kernel searches it. */
struct mori_copy_args {
	uint64_t a_base;       /* device address that a_off is relative to */
	uint64_t b_base;
	uint64_t descs;        /* device address of n descriptors; 0: they are in inl[] */
	uint64_t first_chunk;  /* device address of n + 1 uint32 values, when uniform == 0 */
	uint64_t index;        /* device address of n uint32 indices into descs (a prepared list's
	                        * descriptors stay on the GPU); 0: descriptor i is descs[i] */
	uint64_t total_chunks;
	uint32_t n;
	uint32_t chunk_shift;
	uint32_t swap;         /* 0: copy a -> b; 1: copy b -> a */
	uint32_t uniform;      /* chunks per descriptor when all have the same count, else 0 */
	struct mori_copy_desc inl[MORI_COPY_INLINE];
	uint32_t inl_first[MORI_COPY_INLINE + 1];
	uint32_t pad2;
	uint64_t viz;          /* mori_copy_batch_viz: device address of a MORI-VIZ buffer
	                        * (common/viz_layout.h), 0: record nothing; the untraced kernel ignores it */
};

#ifdef __cplusplus
static_assert(sizeof(struct mori_copy_args) == 64 + 24 * MORI_COPY_INLINE + 4 * (MORI_COPY_INLINE + 2) + 8,
	      "mori_copy_args layout");
#else
_Static_assert(sizeof(struct mori_copy_args) == 64 + 24 * MORI_COPY_INLINE + 4 * (MORI_COPY_INLINE + 2) + 8,
	       "mori_copy_args layout");
#endif
#endif
