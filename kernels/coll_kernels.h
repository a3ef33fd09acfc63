/* MORI-CCL's kernels in libmori's image (kernels/coll.cu) and the layout libmori (libclient/
 * coll_gpu.c) and they agree on. Plain C: libclient includes it.
 *
 * Every kernel takes (const struct mori_coll_dev *dev, struct mori_coll_args a): dev is the
 * rank's communicator state in device memory (built once at creation), a the call's arguments
 * by value (a CUDA graph keeps them). void *params[] = {&dev, &a}.
 *
 * The communicator state, its barriers and its status word: include/mori/device_host/coll_dev.h. */
#ifndef MORI_COLL_KERNELS_H
#define MORI_COLL_KERNELS_H
#include <stdint.h>
#include "../include/mori/device_host/coll_dev.h"

#define MORI_COLL_KERNEL_NAME "mori_coll_kernel"        /* one entry point; a.kind says which */
#define MORI_COLL_KERNEL_NAME_O4 "mori_coll_kernel_o4"  /* the same, 4 blocks an SM (64 registers) */
/* Communicators with a rank whose heap is not mapped here (another node): kernels/coll_xnode.cu,
 * (dev, a, const struct mori_shmem_state *st), grid 1; a.count is then the bytes each rank sends
 * each peer, a.chunk the bytes of a scratch slot. void *params[] = {&dev, &a, &st}. */
#define MORI_COLL_XNODE_KERNEL_NAME "mori_coll_xnode_kernel"
#define MORI_COLL_XNODE_SLOT_MAX (4ull << 20) /* one proxied put at most (morid takes 16 MiB) */
#define MORI_COLL_THREADS 256
#define MORI_COLL_BLOCKS_PER_SM 2                  /* up to 128 registers: no spills */

enum mori_coll_kind {
	MORI_COLL_K_BARRIER = 1,   /* one block: the barrier alone */
	MORI_COLL_K_AR_ONESHOT = 2,
	MORI_COLL_K_AR_TWOSHOT = 3,
	MORI_COLL_K_REDSCAT = 4,
	MORI_COLL_K_ALLGATHER = 5,
	MORI_COLL_K_ALLTOALL = 6,
	MORI_COLL_K_BCAST = 7,
	MORI_COLL_K_ALLTOALLV = 8,
	/* mori_coll_flat_kernel's two (the flat two-shot all-reduce, coll_gpu.c twoshot_flat) */
	MORI_COLL_K_AR_PART = 9,   /* reduce part `rank` of every rank's input into dst (and scratch) */
	MORI_COLL_K_AR_GATHER = 10, /* copy every other rank's reduced part from it (dst window or scratch) */
};

/* Two-shot's parts of a chunk of m elements over n ranks: MORI_COLL_PART_SIZE elements each (a
 * multiple of al, the elements in 16 bytes), part r at r x that, MORI_COLL_PART_LEN long (the last
 * ones short or empty). libmori and the kernels cut chunks alike with these. */
#define MORI_COLL_PART_SIZE(m, n, al) ((((m) + (n) - 1) / (n) + (al) - 1) / (al) * (al))
#define MORI_COLL_PART_LEN(r, P, m)                                                                            \
	((uint64_t)(r) * (P) >= (m) ? 0 : (m) - (uint64_t)(r) * (P) < (P) ? (m) - (uint64_t)(r) * (P) : (P))

/* The flat kernel: no barrier inside, any grid (ranks' grids may differ), launched between
 * barrier kernels (coll_gpu.c: the flat forms of every collective but all-to-all-v).
 * void *params[] = {&dev, &f}. f.kind says what it does:
 *   AR_PART     reduce part `rank` (two-shot's cut) of every rank's input at src into dst, and
 *               into the scratch unless MORI_COLL_F_DST_WIN (where peers gather it from)
 *   AR_GATHER   copy every other rank's reduced part from it (dst if DST_WIN, else its scratch)
 *   REDSCAT     reduce count elements at src + soff of every rank into dst
 *   ALLGATHER, ALLTOALL, BCAST  pulls: count bytes from src + soff of each rank r (BCAST: of
 *               root only) to dst + r x dstride
 * The small-call kernel (MORI_COLL_SMALL_KERNEL_NAME) takes the same block for a whole one-shot
 * all-reduce in one launch: kind AR_ONESHOT, count elements, chunk the elements a round, tile. */
#define MORI_COLL_FLAT_KERNEL_NAME "mori_coll_flat_kernel"
#define MORI_COLL_SMALL_KERNEL_NAME "mori_coll_small_kernel"
struct mori_coll_flat_args {
	uint32_t kind;             /* enum mori_coll_kind */
	uint32_t dtype, op;
	uint32_t flags;            /* MORI_COLL_F_* */
	uint64_t src;              /* this rank's address of the data every rank reads (window or scratch) */
	uint64_t dst;              /* the round's dst */
	uint64_t count;            /* reductions: elements; pulls: bytes a rank */
	uint64_t soff;             /* REDSCAT, pulls: bytes past src where this rank's share lies at every rank */
	uint64_t dstride;          /* pulls: bytes between consecutive ranks' data in dst (0: broadcast) */
	uint64_t chunk, tile;      /* AR_ONESHOT: elements a round, bytes a block takes at a time */
	int32_t root;              /* BCAST: the rank read */
	uint32_t pad;
	uint64_t sig;              /* AR_ONESHOT: the call's signature (MORI_COLL_SIG, coll_dev.h) */
};

/* mori_dtype and mori_redop values (include/mori_coll.h: NCCL's numbers) the kernels reduce */
#define MORI_COLL_DT_F16 6
#define MORI_COLL_DT_F32 7
#define MORI_COLL_DT_BF16 9
#define MORI_COLL_OP_SUM 0
#define MORI_COLL_OP_MAX 2
#define MORI_COLL_OP_MIN 3

/* a.flags */
#define MORI_COLL_F_SRC_WIN 1u     /* peers read src in place (a window); no staging */
#define MORI_COLL_F_DST_WIN 2u     /* two-shot: peers gather the reduced parts from dst in place */
#define MORI_COLL_F_VEC 4u         /* reductions: 2 or 4 vectors a thread at 4 or 2 ranks ($MORI_COLL_VEC) */
#define MORI_COLL_F_NO_GATHER 8u   /* two-shot, one chunk: end after the reduced parts' barrier (the
				      copy engine gathers them: coll_gpu.c) */
#define MORI_COLL_F_LATER 16u      /* barrier kernel: not the call's first; does nothing when the
				      first found the signatures differ (dev->skip) */

struct mori_coll_args {
	uint32_t kind;             /* enum mori_coll_kind */
	uint32_t dtype, op;        /* mori_dtype, mori_redop (reductions) */
	uint32_t flags;            /* MORI_COLL_F_* */
	uint32_t slot;             /* the barrier kernel's slot */
	int32_t root;
	uint64_t src, dst;         /* this rank's buffers */
	uint64_t count;            /* elements per rank (see mori_coll.h for each collective) */
	uint64_t chunk;            /* reductions: elements per chunk; pulls: bytes per segment window */
	uint64_t tile;             /* bytes a block takes at a time, blocks interleaved; 0: one range a block */
	uint64_t sig;              /* the call's signature for its first barrier (coll_dev.h); 0: none */
	/* all-to-all-v, in bytes: */
	uint64_t sdispl[MORI_COLL_MAX_RANKS], scount[MORI_COLL_MAX_RANKS];
	uint64_t rdispl[MORI_COLL_MAX_RANKS], rcount[MORI_COLL_MAX_RANKS];
};
#endif
