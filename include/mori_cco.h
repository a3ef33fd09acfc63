/* mori_cco.h: MORI-CCO, explicit communicators with symmetric windows and a device communicator
 * (part of libmori). ROCm/mori's CCO ("collective communication objects") in C, as NCCL 2.28's
 * device API gives kernel authors: several communicators per process, each created from a
 * 128-byte unique id, memory allocated and windows registered collectively, and a device
 * communicator passed by value into the user's kernels, which reach peers by load/store where
 * this process maps their memory (LSA), by GPU-initiated put/get/signal/counter where it does
 * not (GDA: through morid's proxy), and by copy-engine puts (include/mori/device/cco.cuh).
 *
 * A communicator is a MORI-SHMEM group of its own (include/mori_shmem.h), formed through the
 * daemons from the unique id: its own heap of per_rank_size bytes per rank (VRAM, or host memory
 * on machines without a GPU), its own control page, abort word and proxy ring. Memory and windows
 * are ranges of that heap, at the same offset on every rank. Ranks are node-major: the ranks of
 * one node are consecutive (the teams' arithmetic, as ROCm/mori's, relies on it;
 * mori_cco_dev_comm_create refuses other orders).
 *
 * Names: ROCm/mori's, with the object as prefix: ccoGetUniqueId -> mori_cco_get_unique_id,
 * ccoCommCreate / ccoCommDestroy -> mori_cco_comm_create / _destroy, ccoMemAlloc / ccoMemFree ->
 * mori_cco_mem_alloc / _free, ccoWindowRegister / ccoWindowDeregister -> mori_cco_window_register
 * / _deregister, ccoGetPeerPtr -> mori_cco_get_peer_ptr, ccoDevCommCreate / ccoDevCommDestroy ->
 * mori_cco_dev_comm_create / _destroy, ccoBarrierAll -> mori_cco_barrier_all,
 * ccoDevCommRequirements -> mori_cco_dev_comm_reqs (sdmaQueueCount is ce_queue_count: copy-engine
 * queues of either vendor). Host-initiated put/get (NVSHMEM's host API) are mori's additions.
 *
 * Conventions as in mori.h: 0 or a negative MORI_E* code, mori_client_last_error() of the
 * communicator's client has the detail; option structs with a size and an _init; bytes and
 * microseconds. Collective calls (comm_create, mem_alloc, mem_free, window_register, window_
 * deregister, dev_comm_create, barrier_all) are made by every rank in the same order; each has
 * the communicator's deadline (opts.timeout_us): a rank that never comes makes the others' call
 * end with MORI_ETIMEDOUT naming the call (a window by its offset and size) and the missing
 * ranks, and aborts the communicator. A rank that dies aborts it too: waits end at once, later
 * calls return MORI_EPEERDEAD. An aborted communicator stays aborted; destroy it.
 * Thread safety: a communicator may be used from several threads (collective calls are
 * serialised per communicator); several communicators are independent. */
#ifndef MORI_CCO_H
#define MORI_CCO_H

#include "mori.h"
#include "mori/device_host/cco_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mori_cco_comm mori_cco_comm;
typedef struct mori_cco_window mori_cco_window;

/* ROCm/mori's ccoUniqueId: names a fresh communicator and the daemon that roots it. */
typedef struct mori_cco_unique_id {
	char internal[MORI_CCO_UID_BYTES];
} mori_cco_unique_id;

/* Rank 0 makes the id (no communication); the application broadcasts its 128 bytes to every
 * rank (MPI_Bcast, torch.distributed, a file). MORI_EINVAL for NULL, MORI_ESYS when no random
 * bytes can be had. */
MORI_API int mori_cco_get_unique_id(mori_client *c, mori_cco_unique_id *id);

typedef struct mori_cco_comm_opts {
	size_t size;            /* sizeof(mori_cco_comm_opts) as the caller compiled it (_init) */
	uint64_t per_rank_size; /* heap bytes per rank (ROCm/mori's perRankVmmSize); 0: morid's
	                         * shmem_heap_size. The first 64 KiB are the library's. */
	mori_mem_kind mem_kind; /* MORI_MEM_VRAM (GPU kernels) or MORI_MEM_HOST (default: every
	                         * machine; kernels cannot use it, host threads can) */
	int gpu_device;         /* VRAM: device ordinal (-1: $MORI_GPU_DEVICE, else 0) */
	int64_t timeout_us;     /* deadline of every collective call and of each device-side wait
	                         * (0: 30 s) */
} mori_cco_comm_opts;

/* Fill opts with the defaults (morid's heap size, host memory, device -1, 30 s) and opts->size =
 * size. MORI_EINVAL for NULL or a size below 1.0's struct. */
MORI_API int mori_cco_comm_opts_init(mori_cco_comm_opts *opts, size_t size);

/* Collective: rank `rank` of `nranks` (1..1024) joins the communicator `id` names, through the
 * node's morid (c's). Returns when every rank has joined and mapped its LSA peers' heaps, or the
 * deadline passed (MORI_ETIMEDOUT naming the ranks that never came). Errors as
 * mori_shmem_init_uid's: MORI_EINVAL (rank out of range, an id that is not one, ranks
 * disagreeing on nranks or heap size), MORI_EEXIST (the id's communicator already formed),
 * MORI_ENOTSUP (a VRAM heap without VMM), MORI_ENOMEM. One process may hold several communicators,
 * over the same ranks or not; each has its own heap, windows, signals and barriers, and its own
 * session with morid (opened here on c's daemon), so that collective calls of several
 * communicators made at once by several threads never wait on each other. Owned by the caller
 * until mori_cco_comm_destroy; closing c does not end it. */
MORI_API int mori_cco_comm_create(mori_client *c, const mori_cco_unique_id *id, int nranks, int rank,
				  const mori_cco_comm_opts *opts, mori_cco_comm **out);

/* Leave the communicator and free it, with its memory, windows and device communicators (whose
 * copies kernels hold become stale: their calls return MORI_ESTALE). Not collective, but a rank
 * that leaves tears the communicator down for the others (their waits end with MORI_ECANCELED):
 * destroy after the last collective every rank makes (a barrier). GPU: kernels using it must have
 * ended. Returns MORI_OK; NULL is a no-op. */
MORI_API int mori_cco_comm_destroy(mori_cco_comm *comm);

MORI_API int mori_cco_comm_rank(const mori_cco_comm *comm);     /* -1 for NULL */
MORI_API int mori_cco_comm_size(const mori_cco_comm *comm);     /* 0 for NULL */
/* The LSA team: the ranks on this node (lsa_size of them, this rank's index lsa_rank, the first
 * one's world rank node_start). MORI_EINVAL for NULL arguments. */
MORI_API int mori_cco_comm_lsa(const mori_cco_comm *comm, int *lsa_size, int *lsa_rank, int *node_start);
/* The communicator's health (local): 0, or its abort's code (MORI_EPEERDEAD naming the dead
 * rank in out->pe, MORI_ECANCELED, MORI_ETIMEDOUT), as mori_shmem_status. MORI_EINVAL for NULL. */
MORI_API int mori_cco_comm_status(const mori_cco_comm *comm, mori_status *out);

/* ---- symmetric memory (collective) ----
 * mem_alloc: `size` bytes (rounded up to 64) of the heap, zero-filled, at the same offset on every
 * rank; *ptr is this rank's address (device address for VRAM). MORI_ENOMEM when the heap has no
 * room (sizes in the message; raise per_rank_size), MORI_EINVAL when ranks' sizes differ (naming
 * the first that differs). size 0 gives NULL. mem_free: ptr from mem_alloc (NULL frees nothing,
 * still collective); the windows over it must be deregistered first (MORI_EBUSY otherwise). */
MORI_API int mori_cco_mem_alloc(mori_cco_comm *comm, size_t size, void **ptr);
MORI_API int mori_cco_mem_free(mori_cco_comm *comm, void *ptr);

/* ---- windows (collective) ----
 * Register [ptr, ptr + size) of this rank's heap (inside a mem_alloc'd block) as a window: every
 * rank gives the same heap offset and size (a rank that differs: MORI_EINVAL on every rank naming
 * it; a rank that never registers: the others' MORI_ETIMEDOUT names the window and that rank).
 * LSA peers reach it by load/store, the others through morid, from the host (mori_cco_put/get)
 * and from kernels (the device API). MORI_ERANGE when the range leaves the heap or its block. The
 * window is owned by comm: deregister (collective) or destroy frees it. At most 4096 windows. */
MORI_API int mori_cco_window_register(mori_cco_comm *comm, void *ptr, size_t size, mori_cco_window **win);
MORI_API int mori_cco_window_deregister(mori_cco_comm *comm, mori_cco_window *win);
/* The window as kernels take it (by value), and this rank's address of its first byte (NULL for
 * NULL win). */
MORI_API mori_cco_win mori_cco_window_dev(const mori_cco_window *win);
MORI_API void *mori_cco_window_local_ptr(const mori_cco_window *win);

/* ROCm/mori's ccoGetPeerPtr: this process's address of rank's copy of the object at local_ptr (an
 * address of this rank's heap), when rank is an LSA peer (or this rank); NULL otherwise. */
MORI_API void *mori_cco_get_peer_ptr(const mori_cco_comm *comm, const void *local_ptr, int rank);

/* ---- host-initiated one-sided transfers (blocking) ----
 * put: bytes from src (any memory this process reads; device memory for VRAM) into rank's window
 * at win offset dst_off. get: bytes of rank's window at src_off into dst. LSA peers by copy,
 * the others through morid's transports. MORI_ERANGE when the range leaves the window (nothing
 * moved), MORI_EINVAL for a rank out of range or a window of another communicator; once aborted,
 * the abort's code. */
MORI_API int mori_cco_put(mori_cco_comm *comm, const mori_cco_window *win, uint64_t dst_off, const void *src,
			  size_t bytes, int rank);
MORI_API int mori_cco_get(mori_cco_comm *comm, void *dst, const mori_cco_window *win, uint64_t src_off,
			  size_t bytes, int rank);

/* Host barrier (ccoBarrierAll): every rank arrives, and every put made before it is visible
 * everywhere, before any returns. MORI_ETIMEDOUT naming the missing ranks; MORI_EPEERDEAD at once
 * when a rank dies meanwhile (its rank in mori_cco_comm_status's pe). */
MORI_API int mori_cco_barrier_all(mori_cco_comm *comm);

/* ---- device communicator ----
 * ROCm/mori's ccoDevCommRequirements: what a device communicator holds. */
typedef struct mori_cco_dev_comm_reqs {
	size_t size;                 /* sizeof(mori_cco_dev_comm_reqs) as the caller compiled it (_init) */
	mori_cco_gda_connection gda_connection_type; /* default CROSSNODE */
	int gda_signal_count;        /* GDA signals (default 16; up to MORI_CCO_MAX_SIGNALS) */
	int gda_counter_count;       /* GDA counters (default 16; up to MORI_CCO_MAX_COUNTERS) */
	int lsa_barrier_count;       /* LSA barriers (default 0; up to MORI_CCO_MAX_BARRIERS) */
	int rail_gda_barrier_count;  /* GDA barriers over the rail team (default 0) */
	int barrier_count;           /* world barriers, LSA peers by store, the others by GDA (default 0) */
	int ce_queue_count;          /* copy-engine queues (ROCm/mori's sdmaQueueCount; default 0) */
} mori_cco_dev_comm_reqs;

/* Fill reqs with the defaults (ROCm/mori's initializer: CROSSNODE, 16 signals, 16 counters, no
 * barriers, no copy-engine queue) and reqs->size = size. MORI_EINVAL for NULL or a short size. */
MORI_API int mori_cco_dev_comm_reqs_init(mori_cco_dev_comm_reqs *reqs, size_t size);

/* Collective: allocate and zero the resources reqs asks for in the communicator's heap and fill
 * *out (pass it by value into kernels). Refused at create, nothing allocated, with a message
 * naming the resource: MORI_EINVAL for a count below 0 or above its MORI_CCO_MAX_*, an unknown
 * connection type, GDA barriers with connection NONE, RAIL or rail barriers when nodes hold
 * different numbers of ranks, ranks that are not node-major, ranks whose requirements differ;
 * MORI_ENOMEM when the heap has no room for them (bytes needed and free in the message; raise
 * per_rank_size); MORI_EBUSY when the process holds MORI_CCO_LIVE_SLOTS device communicators.
 * Copy-engine queues are served by a thread of libmori for the device communicator's life. */
MORI_API int mori_cco_dev_comm_create(mori_cco_comm *comm, const mori_cco_dev_comm_reqs *reqs,
				      mori_cco_dev_comm *out);
/* Free what dev holds (not collective: the heap area stays until the communicator goes) and mark
 * it stale: copies kernels still hold return MORI_ESTALE. MORI_OK, also for a device communicator
 * already stale (its communicator destroyed: nothing left to free); MORI_EINVAL for NULL or a
 * struct that is not one. */
MORI_API int mori_cco_dev_comm_destroy(mori_cco_dev_comm *dev);
/* MORI_OK while dev and its communicator live, MORI_ESTALE once either was destroyed (the word
 * its kernels check), MORI_EINVAL for NULL or not a device communicator. */
MORI_API int mori_cco_dev_comm_check(const mori_cco_dev_comm *dev);
/* This rank's signal or counter `id` as the host sees it (host-memory communicators read it
 * directly, VRAM ones copy it). MORI_ESTALE for a stale dev (nothing read), MORI_ERANGE for an id
 * out of range. */
MORI_API int mori_cco_dev_comm_read_signal(const mori_cco_dev_comm *dev, int id, uint64_t *value);
MORI_API int mori_cco_dev_comm_read_counter(const mori_cco_dev_comm *dev, int id, uint64_t *value);

#ifdef __cplusplus
}
#endif
#endif
