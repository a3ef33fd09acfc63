/* MORI-CCL's kernels in libmori's image (kernels/coll.cu) and the layout libmori (libclient/
 * coll_gpu.c) and they agree on. Plain C: libclient includes it.
 *
 * Every kernel takes (const struct mori_coll_dev *dev, struct mori_coll_args a): dev is the
 * rank's communicator state in device memory (built once at creation), a the call's arguments
 * by value (a CUDA graph keeps them). void *params[] = {&dev, &a}.
 *
 * Barriers. Rank r's heap holds flags[MORI_COLL_SLOTS][n] (8-byte generations) and
 * gens[MORI_COLL_SLOTS]. Block b of a kernel uses slot b: it bumps its generation g (kept in gens[b]
 * of its own heap, so replays of a graph continue the sequence), release-stores g into
 * flags[b][rank] of every rank, and waits until its own flags[b][q] >= g for every q. Block b of
 * every rank slices the data the same way, so a block reads only what the same block of its
 * peers wrote before the barrier. Slot MORI_COLL_SLOT_BAR is the one-block barrier kernel's (the
 * copy-engine forms). Waits poll with acquire loads and read, every MORI_COLL_POLL polls, the
 * group's abort word, the communicator's status word and the clock against dev->timeout_ns.
 *
 * Status. A failing wait records into dev->status (mapped host memory): code (MORI_ETIMEDOUT,
 * MORI_EPEERDEAD, MORI_ECANCELED, MORI_EINVAL; first writer wins), pe (the dead PE, or the first
 * missing rank) and missing[] (bit q: rank q never reached the barrier). A kernel that finds the
 * code set returns at once. */
#ifndef MORI_COLL_KERNELS_H
#define MORI_COLL_KERNELS_H
#include <stdint.h>

#define MORI_COLL_KERNEL_NAME "mori_coll_kernel"        /* one entry point; a.kind says which */
#define MORI_COLL_KERNEL_NAME_O4 "mori_coll_kernel_o4"  /* the same, 4 blocks an SM (64 registers) */
/* Communicators with a rank whose heap is not mapped here (another node): kernels/coll_xnode.cu,
 * (dev, a, const struct mori_shmem_state *st), grid 1; a.count is then the bytes each rank sends
 * each peer, a.chunk the bytes of a scratch slot. void *params[] = {&dev, &a, &st}. */
#define MORI_COLL_XNODE_KERNEL_NAME "mori_coll_xnode_kernel"
#define MORI_COLL_XNODE_SLOT_MAX (4ull << 20) /* one proxied put at most (morid takes 16 MiB) */
#define MORI_COLL_THREADS 256
#define MORI_COLL_BLOCKS_PER_SM 2                  /* up to 128 registers: no spills */
#define MORI_COLL_SLOTS 1026
#define MORI_COLL_SLOT_BAR 1025                    /* the barrier kernel's slot */
#define MORI_COLL_SLOT_USER 1024                   /* mori_coll_barrier_block (kernels/coll.cuh) */
#define MORI_COLL_MAX_BLOCKS 1024                  /* data kernels use slots 0..1023 */
#define MORI_COLL_MAX_RANKS 64                     /* GPU communicators */
#define MORI_COLL_POLL 256u
#define MORI_COLL_MAGIC 0x4d43434cu                /* "MCCL" */

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

/* The flat two-shot all-reduce's kernel: no barrier inside, any grid (ranks' grids may differ),
 * launched between barrier kernels. void *params[] = {&dev, &f}. */
#define MORI_COLL_FLAT_KERNEL_NAME "mori_coll_flat_kernel"
struct mori_coll_flat_args {
	uint32_t kind;             /* MORI_COLL_K_AR_PART or MORI_COLL_K_AR_GATHER */
	uint32_t dtype, op;
	uint32_t flags;            /* MORI_COLL_F_DST_WIN: the reduced parts are in dst (else the scratch) */
	uint64_t src;              /* AR_PART: where every rank's input is (this rank's address: window or scratch) */
	uint64_t dst;              /* the chunk's dst */
	uint64_t count;            /* the chunk's elements */
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

struct mori_coll_status {
	volatile int32_t code;
	volatile int32_t pe;
	volatile uint64_t missing[MORI_COLL_MAX_RANKS / 64];
};

struct mori_coll_dev {
	uint32_t magic;
	int32_t rank, n;
	int32_t pad;
	uint64_t timeout_ns;       /* each wait's deadline */
	uint64_t ctrl;             /* device address of the group's control page (abort word), or 0 */
	uint64_t status;           /* device address of struct mori_coll_status (mapped host memory) */
	uint64_t heap_base;        /* this rank's heap */
	uint64_t flags;            /* own heap: uint64_t [MORI_COLL_SLOTS][n] */
	uint64_t gens;             /* own heap: uint64_t [MORI_COLL_SLOTS] */
	uint64_t meta;             /* own heap: uint64_t [n][2] (all-to-all-v: displacement, bytes) */
	uint64_t scratch;          /* own heap */
	uint64_t scratch_bytes;
	uint64_t peer_base[MORI_COLL_MAX_RANKS]; /* rank q's heap in this process */
	int32_t pe_of[MORI_COLL_MAX_RANKS];      /* rank q's PE number in the group */
};

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
	/* all-to-all-v, in bytes: */
	uint64_t sdispl[MORI_COLL_MAX_RANKS], scount[MORI_COLL_MAX_RANKS];
	uint64_t rdispl[MORI_COLL_MAX_RANKS], rcount[MORI_COLL_MAX_RANKS];
};
#endif
