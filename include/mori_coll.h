/* mori_coll.h: MORI-CCL, collectives on MORI-SHMEM's symmetric heap (part of libmori).
 *
 * A communicator (mori_comm) is a group (mori_shmem.h) or its node team: ranks 0..n-1 are the
 * group's PEs (or the node team's, in ascending PE order). Its scratch and barrier flags live on
 * the heap (allocated collectively at creation, zeroed, then a barrier before any peer writes).
 * Calls mirror NCCL (ncclAllReduce, ncclAllGather, ncclReduceScatter, ncclBroadcast,
 * ncclAlltoAll, ncclCommWindowRegister) and ROCm/mori's CCL (AllreduceSdma, AllgatherSdma,
 * All2allSdma: copy-engine forms); the dtype and op numbers are NCCL's.
 *
 * Where collectives run. A VRAM-heap communicator runs on the GPU: every call enqueues on the
 * caller's stream (a CUstream / hipStream_t; NULL: the legacy default stream) and returns at
 * once: no host synchronisation, so it can be captured in a CUDA graph and replayed (the kernels
 * keep their barrier generations in device memory, not in launch arguments). Its buffers are
 * device memory of the group's device. A host-heap communicator (machines without a GPU) runs
 * the same algorithms on the calling thread, `stream` ignored, buffers host memory, and returns
 * when done; peers this process does not map (other nodes) are read through morid
 * (mori_shmem_getmem). A GPU communicator with members on other nodes (heaps not mapped here)
 * runs a simpler gather form (docs/ccl.md) whose bytes to those members go through morid's proxy;
 * all-to-all-v has no such form there (MORI_ENOTSUP).
 *
 * Buffers and windows. Any buffer works: input is staged through the heap scratch. A buffer
 * registered as a window (mori_comm_window_register: a range of the heap, the same offset and
 * size on every rank) is read and written in place by peers (zero-copy), saving the staging copy.
 * In place: sendbuf == recvbuf (all-gather: sendbuf == recvbuf + rank * count elements; reduce-
 * scatter: recvbuf == sendbuf + rank * count elements), as NCCL defines it. Any count, including
 * ones that are not multiples of 16 bytes; count 0 does nothing and returns 0.
 *
 * Ordering and collectiveness. Every rank calls the same collectives in the same order with the
 * same counts, dtypes, ops and roots (as NCCL requires); on one stream per rank. A collective's
 * results are in recvbuf when the stream reaches the end of it. Calls on one communicator are not
 * thread-safe against each other.
 *
 * Conventions as in mori.h (names mori_comm_*, the collectives keep NCCL's names; an option
 * struct with a size; status; int-returning destroy).
 * Errors (negative MORI_E* from mori.h; mori_client_last_error() of the group's client has the
 * detail). Checked on the host before anything is enqueued, nothing changed then: MORI_EINVAL (NULL
 * communicator or buffer, unknown dtype or op, a dtype/op pair that does not exist such as max on
 * uint8, a root out of range), MORI_ERANGE (a buffer that starts in a window or the heap and whose
 * count runs past its end: the only buffers whose size the library knows), MORI_ENOTSUP (all-to-
 * all-v on a GPU communicator across nodes). Buffers outside the heap are the caller's to size: they
 * must hold what the shapes below say, and be device memory for a GPU communicator, host memory
 * for a host one. Found while running: on host heaps, a collective whose operation, count, dtype,
 * reduction or root differs on some rank fails with MORI_EINVAL on every rank, naming the first
 * rank that differs and what it called, before anything moves (all-to-all-v: the first pair whose
 * counts disagree). GPU heaps compare them on the device at the call's first barrier (no host
 * round trip, so a captured graph checks them too): MORI_EINVAL on every rank naming the first rank that differs
 * from rank 0, reported once by mori_comm_status(); the call ends before recvbuf is written
 * (except under the copy-engine forms, whose copies still run: recvbuf undefined) and the
 * communicator keeps working, unless the ranks launched different grids (counts in different
 * 128 KiB size classes), which fails it. Ranks whose calls take different forms (a count across
 * the algorithm table's thresholds) meet at no barrier: MORI_ETIMEDOUT at the deadline.
 * A rank that does not call the collective makes its peers' waits end at the communicator's
 * deadline (opts.timeout_us) with MORI_ETIMEDOUT naming the missing ranks; a PE killed mid-
 * collective ends its peers' waits with MORI_EPEERDEAD (the group's abort word); GPU waits are
 * bounded by both. On the GPU such an error is reported by mori_comm_status() (and by every
 * later call on the communicator, which then enqueues nothing): kernels that fail return early
 * and leave their outputs undefined. A failed communicator stays failed; destroy it. */
#ifndef MORI_COLL_H
#define MORI_COLL_H

#include "mori.h"
#include "mori_shmem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mori_comm mori_comm;
typedef struct mori_window mori_window;

/* Element types and reduction operators: mori_dtype and mori_redop in mori_types.h, numbered as
 * ncclDataType_t and ncclRedOp_t. Reductions: MORI_FLOAT16, MORI_FLOAT32, MORI_BFLOAT16 with
 * MORI_SUM, MORI_MAX, MORI_MIN. Data movement (all-gather, all-to-all, broadcast): every mori_dtype. */

/* Algorithms (MORI_COLL_AUTO: the size table). Which apply:
 *   all-reduce:     ONESHOT (every rank reads every peer's whole input and reduces: latency),
 *                   TWOSHOT (reduce-scatter then all-gather: bandwidth)
 *   all-gather, all-to-all, broadcast:
 *                   KERNEL (SM copies), CE (copy engines: cuMemcpyDtoDAsync between peer-mapped
 *                   heap addresses, no SM but two one-block barrier kernels)
 *   reduce-scatter, all-to-all with per-peer counts: KERNEL only.
 * The table (bytes of the whole collective's output per rank): all-reduce ONESHOT up to 256 KiB,
 * TWOSHOT above; all-gather / all-to-all / broadcast KERNEL up to 4 MiB, CE above. */
typedef enum mori_coll_algo {
	MORI_COLL_AUTO = 0,
	MORI_COLL_ONESHOT = 1,
	MORI_COLL_TWOSHOT = 2,
	MORI_COLL_KERNEL = 3,
	MORI_COLL_CE = 4,
} mori_coll_algo;

typedef struct mori_comm_opts {
	size_t size;            /* sizeof(mori_comm_opts) as the caller compiled it (mori_comm_opts_init) */
	int node_team;          /* 0: every PE of the group; 1: the PEs of this node (the node team) */
	uint64_t scratch_bytes; /* heap scratch per rank (0: 32 MiB, capped at a quarter of the heap's
	                         * free space); larger transfers go in chunks of it */
	int64_t timeout_us;     /* deadline of each wait inside a collective (0: the group's) */
	const char *algo;       /* overrides of the size table, e.g. "allreduce=twoshot,allgather=ce,
	                         * allreduce.oneshot_max=65536" (NULL: $MORI_COLL_ALGO, else none) */
} mori_comm_opts;

/* Fill opts with the defaults (every PE, 32 MiB scratch, the group's deadline, the size table)
 * and opts->size = size (sizeof(*opts)). MORI_EINVAL for NULL or a size below 1.0's struct.
 * mori_comm_create reads only opts->size bytes (mori.h's conventions). */
MORI_API int mori_comm_opts_init(mori_comm_opts *opts, size_t size);

/* Make a communicator over g (collective over every PE of g, in the same order as the group's
 * other collective calls: it allocates from the heap). opts NULL: defaults. MORI_ENOMEM when the
 * heap has no room for the scratch (sizes in the message), MORI_EINVAL for bad options (the
 * algo string's bad item named; MORI_ENOTSUP for opts->size as mori.h says), the group's abort
 * code. Owned by the caller until destroy. */
MORI_API int mori_comm_create(mori_group *g, const mori_comm_opts *opts, mori_comm **out);
/* Collective (it frees heap memory; its windows too). GPU communicators: the caller's streams
 * must have run the communicator's enqueued collectives to completion first (synchronise them).
 * Returns MORI_OK, or the heap free's error (comm is freed anyway); NULL is a no-op returning
 * MORI_OK; MORI_ESTALE in a child after fork (the parent's communicator: nothing is freed). */
MORI_API int mori_comm_destroy(mori_comm *comm);

MORI_API int mori_comm_rank(const mori_comm *comm);   /* -1 for NULL */
MORI_API int mori_comm_size(const mori_comm *comm);   /* 0 for NULL */
/* Replace the size table's choices (the same syntax as opts.algo); local, no communication:
 * every rank must make the same change before the same collective. MORI_EINVAL naming a bad item
 * (nothing changed then). */
MORI_API int mori_comm_set_algo(mori_comm *comm, const char *spec);
/* The algorithm the table picks for collective `coll` ("allreduce", "allgather", "alltoall",
 * "broadcast", "reducescatter") of `bytes` output bytes per rank; its name in *name (static). */
MORI_API int mori_comm_algo(const mori_comm *comm, const char *coll, uint64_t bytes, const char **name);

/* code 0 while healthy (pe -1, message ""); else the first failure (MORI_ETIMEDOUT: pe the first
 * missing rank, and the message lists them all; MORI_EPEERDEAD: pe the dead PE's rank; the
 * group's abort codes, as mori_shmem_status). GPU communicators: MORI_EINVAL, pe the first rank
 * whose call's arguments differ from rank 0's and the message both calls, reported once where
 * the communicator kept working (see the top of this file). Reads a word the kernels write in
 * mapped host memory: no synchronisation, so an error shows once the failing kernel ended.
 * Returns the code; MORI_EINVAL for NULL comm. */
MORI_API int mori_comm_status(mori_comm *comm, mori_status *out);

/* The device address of this rank's communicator state (struct mori_coll_dev, kernels/
 * coll_kernels.h) for fused kernels built with include/mori/device/coll.cuh (mori_coll_peer_ptr,
 * mori_coll_barrier_block: NCCL's device API's peer pointer and barrier); pass it as a kernel
 * argument. Valid until destroy. NULL for a host-heap communicator (no kernel can use it), for a
 * GPU communicator across nodes (that API reaches peers by mapping only), or NULL comm. */
MORI_API void *mori_comm_device_state(const mori_comm *comm);

/* ---- windows (ncclCommWindowRegister / ncclCommWindowDeregister) ----
 * Register [ptr, ptr + bytes) of this rank's heap (mori_shmem_malloc'd memory) as a window:
 * collective; every rank gives the same heap offset and size. A rank whose offset or size differs
 * gets MORI_EINVAL naming the first rank that differs, on every rank (nothing registered).
 * MORI_ERANGE when the range leaves the heap. Collectives whose buffers lie inside windows read
 * and write them in place at peers. Deregister is collective too (streams synchronised first, as
 * for destroy); win is freed. */
MORI_API int mori_comm_window_register(mori_comm *comm, void *ptr, size_t bytes, mori_window **out);
MORI_API int mori_comm_window_deregister(mori_comm *comm, mori_window *win);

/* ---- collectives ----
 * count: elements per rank as NCCL counts them; buffers: device (GPU communicator) or host
 * memory, the sizes below in elements of dtype. */

/* recvbuf[i] = op over ranks r of sendbuf_r[i], i < count (ncclAllReduce; ROCm/mori
 * AllreduceSdma). sendbuf, recvbuf: count elements. F16/BF16 are reduced in f32, in rank order,
 * and rounded once to nearest even. */
MORI_API int mori_allreduce(mori_comm *comm, const void *sendbuf, void *recvbuf, size_t count, mori_dtype dtype,
			    mori_redop op, void *stream);
/* recvbuf[r * count + i] = sendbuf_r[i] (ncclAllGather; ROCm/mori AllgatherSdma). sendbuf: count
 * elements, recvbuf: size * count. */
MORI_API int mori_allgather(mori_comm *comm, const void *sendbuf, void *recvbuf, size_t count, mori_dtype dtype,
			    void *stream);
/* recvbuf[i] = op over ranks r of sendbuf_r[rank * count + i] (ncclReduceScatter). sendbuf: size
 * * count elements, recvbuf: count. */
MORI_API int mori_reducescatter(mori_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
				mori_dtype dtype, mori_redop op, void *stream);
/* recvbuf[r * count + i] = sendbuf_r[rank * count + i] (ncclAlltoAll; ROCm/mori All2allSdma).
 * Both size * count elements. In place (sendbuf == recvbuf) is allowed. */
MORI_API int mori_alltoall(mori_comm *comm, const void *sendbuf, void *recvbuf, size_t count, mori_dtype dtype,
			   void *stream);
/* Per-peer counts (MPI_Alltoallv; torch all_to_all_single with splits): this rank sends
 * sendcounts[r] elements from sendbuf + sdispls[r] to rank r, and receives recvcounts[r] elements
 * from rank r at recvbuf + rdispls[r] (elements; host arrays of size entries, read during the
 * call: a captured graph keeps their values). recvcounts[r] must equal rank r's sendcounts[rank]
 * (MORI_EINVAL on the receiving side when the peer disagrees; the GPU reports it through
 * mori_comm_status). Out of place only. GPU communicators: at most 64 ranks. */
MORI_API int mori_alltoallv(mori_comm *comm, const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
			    void *recvbuf, const size_t *recvcounts, const size_t *rdispls, mori_dtype dtype,
			    void *stream);
/* recvbuf[i] = sendbuf_root[i] on every rank (ncclBroadcast). sendbuf is read on root only;
 * in place: sendbuf == recvbuf at root. */
MORI_API int mori_broadcast(mori_comm *comm, const void *sendbuf, void *recvbuf, size_t count, mori_dtype dtype,
			    int root, void *stream);

/* Size of one element of dtype, 0 for an unknown one. */
MORI_API size_t mori_dtype_size(mori_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
