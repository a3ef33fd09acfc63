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
 * Status. A failing wait records into dev->status (mapped host memory): code (MORI_ETIMEDOUT,
 * MORI_EPEERDEAD, MORI_ECANCELED, MORI_EINVAL; first writer wins), pe (the dead PE, or the first
 * missing rank) and missing[] (bit q: rank q never reached the barrier). A kernel that finds the
 * code set returns at once. */
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
#endif
