/* MORI-CCL's communicator state as the device sees it, shared by libmori (libclient/coll_gpu.c
 * builds it), libmori's collective kernels (kernels/coll.cu) and fused kernels of applications
 * (the device API, include/mori/device/coll.cuh). Plain C.
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
 * Signatures. A call's first barrier carries its signature (MORI_COLL_SIG_*: kind, count, dtype,
 * op, root, grid; computed by libmori into the launch arguments): before its release store of g
 * into flags[b][rank] of rank q, block b stores the signature into sigs[b][g & 1][rank] of rank q;
 * after the barrier it reads sigs[b][g & 1][q] of its own heap for every q and compares each
 * with rank 0's. Two words a slot by parity suffice: rank q can be one generation ahead at most
 * (it passed barrier g, whose flags every rank sent, and its barrier g + 1 needs this rank's
 * flag g + 1, sent only after this rank read its words of g), so q's store for g + 1 lands in
 * the other word. A call whose signatures differ ends before its data moves: MORI_EINVAL in
 * dev->status's mismatch record. Where the grids differ too (blocks one rank launched and
 * another did not wait at a barrier no peer comes to), it also sets code, which ends those
 * waits and fails the communicator; otherwise every block passed exactly the one barrier on
 * every rank, the generations stay in step and the next call runs. A flat or copy-engine form's
 * first barrier kernel writes dev->skip (1: its signatures differed), which the call's later
 * kernels read to do nothing.
 *
 * Status. A failing wait records into dev->status (mapped host memory): code (MORI_ETIMEDOUT,
 * MORI_EPEERDEAD, MORI_ECANCELED, MORI_EINVAL; first writer wins), pe (the dead PE, or the first
 * missing rank) and missing[] (bit q: rank q never reached the barrier). A kernel that finds the
 * code set returns at once. The mismatch record (mm_*) says which rank's signature differed
 * from rank 0's; libmori reports it until the next collective call (which clears it). */
#ifndef MORI_COLL_DEV_H
#define MORI_COLL_DEV_H
#include <stdint.h>

#define MORI_COLL_SLOTS 1026
#define MORI_COLL_SLOT_BAR 1025                    /* the barrier kernel's slot */
#define MORI_COLL_SLOT_USER 1024                   /* mori_coll_barrier_block (mori/device/coll.cuh) */
#define MORI_COLL_MAX_BLOCKS 1024                  /* data kernels use slots 0..1023 */
#define MORI_COLL_MAX_RANKS 64                     /* GPU communicators */
#define MORI_COLL_POLL 256u
#define MORI_COLL_MAGIC 0x4d43434cu                /* "MCCL" */

/* A call's signature, a nonzero 64-bit word: the kind (enum mori_coll_kind of kernels/
 * coll_kernels.h), dtype, reduction op, root (broadcast), the grid of a one-kernel form (0 for a
 * barrier kernel's) and the count in elements (exact below 2^37: higher bits are folded in). */
#define MORI_COLL_SIG(kind, dtype, op, root, grid, count)                                                  \
	((uint64_t)((kind) & 15u) | (uint64_t)((dtype) & 15u) << 4 | (uint64_t)((op) & 3u) << 8 |            \
	 (uint64_t)((root) & 63u) << 10 | (uint64_t)((grid) & 0x7ffu) << 16 |                                  \
	 (((uint64_t)(count) ^ (uint64_t)(count) >> 37) & ((1ull << 37) - 1)) << 27)
#define MORI_COLL_SIG_KIND(s) ((unsigned)((s) & 15u))
#define MORI_COLL_SIG_DTYPE(s) ((unsigned)((s) >> 4 & 15u))
#define MORI_COLL_SIG_OP(s) ((unsigned)((s) >> 8 & 3u))
#define MORI_COLL_SIG_ROOT(s) ((int)((s) >> 10 & 63u))
#define MORI_COLL_SIG_GRID(s) ((unsigned)((s) >> 16 & 0x7ffu))
#define MORI_COLL_SIG_COUNT(s) ((s) >> 27)

struct mori_coll_status {
	volatile int32_t code;
	volatile int32_t pe;
	volatile uint64_t missing[MORI_COLL_MAX_RANKS / 64];
	volatile int32_t mm_state;  /* 0 none, 1 being written, 2 written (mm_pe, mm_sig, mm_ref) */
	volatile int32_t mm_pe;     /* the first rank whose signature differs from rank 0's */
	volatile uint64_t mm_sig;   /* its signature */
	volatile uint64_t mm_ref;   /* rank 0's */
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
	uint64_t sigs;             /* own heap: uint64_t [MORI_COLL_SLOTS][2][n] (signatures) */
	uint64_t skip;             /* own heap: uint64_t, 1 after a flat form's first barrier failed */
};
#endif
