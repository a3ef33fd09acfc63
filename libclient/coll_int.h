/* libmori's MORI-CCL internals: the communicator, shared by coll.c (creation, windows,
 * the algorithm table, argument checks, dispatch), coll_gpu.c (the device state and the launches:
 * kernels/coll.cu, and the copy-engine forms) and coll_host.c (the host paths of host heaps). */
#ifndef LIBMORI_COLL_INT_H
#define LIBMORI_COLL_INT_H
#include <stdint.h>

#include "../kernels/coll_kernels.h"
#include "mori_coll.h"
#include "shmem_int.h"

enum coll_id { CO_ALLREDUCE, CO_ALLGATHER, CO_ALLTOALL, CO_BCAST, CO_REDSCAT, CO_N };

struct mori_window {
	struct mori_window *next;
	uint64_t off, bytes;    /* heap offset and size, the same on every rank */
};

/* One collective as the dispatcher hands it to a path: counts in elements except where said. */
struct coll_call {
	int kind;               /* enum mori_coll_kind */
	int algo;               /* mori_coll_algo after the table */
	mori_dtype dtype;
	mori_redop op;
	size_t es;              /* element bytes */
	const void *src;
	void *dst;
	size_t count;
	int root;
	int src_win, dst_win;   /* inside a window (and usable in place: see coll.c) */
	const size_t *scount, *sdispl, *rcount, *rdispl; /* all-to-all-v (elements) */
	void *stream;
};

struct mori_comm {
	mori_group *g;
	mori_client *c;
	int rank, n;
	int *pe_of;             /* [n]: the group PE of each rank */
	int gpu;                /* a VRAM heap: the GPU paths */
	uint8_t *area;          /* this rank's heap allocation: flags, gens, meta, exch, scratch */
	uint64_t area_bytes;
	uint64_t off_flags, off_sigs, off_gens, off_meta, off_exch, off_scratch, scratch_bytes;
	int64_t timeout_us;
	uint64_t oneshot_max, kernel_max; /* the size table's thresholds (bytes) */
	int force[CO_N];        /* mori_coll_algo forced per collective, 0 none */
	unsigned max_blocks;    /* data kernels' grid cap ($MORI_COLL_BLOCKS) */
	uint64_t tile;          /* kernels' tile bytes ($MORI_COLL_TILE; rank 0's on every rank) */
	struct mori_window *wins;
	int failed;             /* host path: the first failure's code (sticks) */
	uint64_t tag, tag_count; /* host path: the call's arguments, for its first barrier (coll_host.c) */
	void *gpu_priv;         /* coll_gpu.c */
};

/* coll.c */
int coll_parse_algo(mori_comm *k, const char *spec);

/* coll_gpu.c */
int coll_gpu_init(mori_comm *k);
void coll_gpu_fini(mori_comm *k);
int coll_gpu_run(mori_comm *k, const struct coll_call *cc);
/* take_mismatch: report (once) a call whose arguments differed but left the communicator working */
int coll_gpu_status(mori_comm *k, int *pe, int take_mismatch);
int coll_gpu_unmapped(const mori_comm *k); /* some rank's heap is not mapped here */
int coll_gpu_xnode(mori_comm *k);          /* take the cross-node path (every rank, when any must) */

/* coll_host.c */
int coll_host_run(mori_comm *k, const struct coll_call *cc);
#endif
