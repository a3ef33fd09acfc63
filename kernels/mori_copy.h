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
#define MORI_COPY_MAX_CHUNK_SHIFT 13  /* and at most 8 KiB (a warp per chunk: more warps balance) */
#define MORI_COPY_CHUNKS_PER_WARP 4   /* smaller chunks while a batch has fewer than this many
                                       * chunks a resident warp (latency of small batches) */
#define MORI_COPY_BLOCK_THREADS 256
#define MORI_COPY_BLOCKS_PER_SM 4      /* resident blocks the kernel is built for (64 registers) */

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

/* The copy service (kernels/copy_service.cu, libclient/gpu_service.c): one block that stays on
 * the GPU while small batches keep coming and takes them from pinned host memory, so a 4 KiB
 * copy costs no launch and no event (latency). Jobs are numbered from 1; slot seq % SLOTS holds
 * job seq, whole once its `seq` field reads seq (written last, with release). */
#define MORI_COPY_SERVICE_KERNEL "mori_copy_service"
#define MORI_COPY_SERVICE_SLOTS 16
#define MORI_COPY_SERVICE_MAX_BYTES (64u << 10) /* a batch this small (and inline) may use it */
#define MORI_COPY_SERVICE_PIECE 512             /* bytes a warp copies at a time: one 16-byte
                                                 * vector a lane */

/* One descriptor (the common small job) also travels in `line`: five 8-byte words, each the
 * low 32 bits of seq over 4 bytes of (source, destination, length), so one read of 40 bytes
 * both finds the job and carries it (8-byte stores and loads are whole; wider ones are not
 * promised over PCIe). A job of several descriptors has MORI_COPY_JOB_FULL in line[0]'s low
 * half: the block then reads the rest, after `seq`. */
#define MORI_COPY_JOB_LINE 5
#define MORI_COPY_JOB_FULL 0xffffffffu
struct mori_copy_job {
	uint64_t line[MORI_COPY_JOB_LINE + 3]; /* 64 bytes: the line words, padding */
	uint64_t a_base, b_base;
	uint32_t n, swap;
	struct mori_copy_desc d[MORI_COPY_INLINE];
	uint64_t seq;
};

struct mori_copy_service {
	uint64_t done;         /* GPU: jobs 1..done are copied (in order), written with release */
	uint32_t stop;         /* host: leave now (client close) */
	uint32_t running;      /* host: 1 before it launches the kernel; the kernel: 0 as it leaves */
	uint64_t idle_ns;      /* the kernel leaves after this long without a job */
	uint64_t pad;
	struct mori_copy_job slot[MORI_COPY_SERVICE_SLOTS];
};

#ifdef __cplusplus
static_assert(sizeof(struct mori_copy_args) == 64 + 24 * MORI_COPY_INLINE + 4 * (MORI_COPY_INLINE + 2) + 8,
	      "mori_copy_args layout");
#else
_Static_assert(sizeof(struct mori_copy_args) == 64 + 24 * MORI_COPY_INLINE + 4 * (MORI_COPY_INLINE + 2) + 8,
	       "mori_copy_args layout");
#endif
#endif
