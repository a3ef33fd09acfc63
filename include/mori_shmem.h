/* mori_shmem.h: MORI-SHMEM, the host API of mori's symmetric heap (part of libmori).
 *
 * A group is a set of PEs (processes; one per GPU in production) with ranks 0..n-1. Every PE
 * of a group has a heap of the same size; an object allocated collectively sits at the same
 * offset of every PE's heap, so an address in one's own heap names the same object at any PE.
 * The node's morid forms groups (PEs of one job rendezvous there by name; PEs on other nodes
 * join through their daemons), owns each heap's shareable handle for the group's life, maps
 * every local peer's heap into each PE, and serves as the proxy for PEs a PE cannot map
 * (other nodes). GPU kernels use the device API (kernels/mori_shmem.cuh: mori_shmem_* device
 * functions with ROCm/mori's names and OpenSHMEM 1.5 semantics).
 *
 * Naming rule: the object is the group (mori_group); every function of this header is
 * mori_shmem_<name>, the subsystem's prefix, as NVSHMEM's nvshmem_* and ROCm/mori's Shmem* name
 * theirs, and where a function mirrors one of theirs it keeps their name: ROCm/mori's MORI-SHMEM
 * (ShmemInit -> mori_shmem_init, ShmemFinalize -> mori_shmem_finalize, ShmemMyPe ->
 * mori_shmem_my_pe, ShmemNPes -> mori_shmem_n_pes, ShmemMalloc -> mori_shmem_malloc, ShmemFree ->
 * mori_shmem_free, ShmemPtrP2p -> mori_shmem_ptr_p2p, ShmemBarrierAll -> mori_shmem_barrier_all,
 * ShmemGetUniqueId / ShmemInit with a unique id -> mori_shmem_get_unique_id / mori_shmem_init_uid,
 * ShmemModuleInit -> mori_shmem_module_init) and NVSHMEM (nvshmem_putmem, nvshmem_getmem,
 * nvshmem_ptr, nvshmemx_quiet_on_stream, nvshmem_team_node). Unlike theirs, every call takes the
 * group explicitly instead of a process-global state, so one process may hold several groups.
 * Communicators (mori_coll.h, mori_comm_*) and EP handles (mori_ep.h, mori_ep_*) built on a group
 * carry their own object's prefix.
 *
 * Conventions as in mori.h (names, option structs with a size, status, int-returning release):
 * 0 or a negative MORI_E* code; mori_client_last_error() of the group's client has the detail.
 * Sizes and offsets are bytes; times microseconds. Collective calls (init, init_uid, malloc,
 * calloc, free, barrier_all) must be made by every PE of the group in the
 * same order; each has a deadline (the join's timeout_us) and never waits forever. A PE that
 * dies aborts the group: waits end, later calls return MORI_EPEERDEAD.
 */
#ifndef MORI_SHMEM_H
#define MORI_SHMEM_H

#include "mori.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mori_group mori_group;

/* How a PE joins: heap, root daemon, deadline. Heap memory kinds: MORI_MEM_HOST (memfd: every
 * machine, no GPU needed) or MORI_MEM_VRAM (VMM allocation with a POSIX fd handle on gpu_device). */
typedef struct mori_shmem_opts {
	size_t size;            /* sizeof(mori_shmem_opts) as the caller compiled it (mori_shmem_opts_init) */
	uint64_t heap_size;     /* bytes per PE, rounded up to the allocation granularity (2 MiB
	                         * for VRAM, the page for host); 0: morid's shmem_heap_size; more
	                         * than MORI_SHMEM_RESERVED (64 KiB) */
	mori_mem_kind heap_kind; /* MORI_MEM_HOST or MORI_MEM_VRAM */
	int gpu_device;         /* ordinal for VRAM heaps (-1: $MORI_GPU_DEVICE, else 0) */
	const char *root;       /* host:port of the root daemon's peer listener (the node that holds
	                         * the group: every PE must name the same one; PEs on that node may
	                         * give it or NULL); NULL or "": all PEs are on this node */
	int64_t timeout_us;     /* deadline of the join and of every later collective call (0: 30 s);
	                         * the first PE's to join is the group's */
} mori_shmem_opts;

/* Fill opts with the defaults (host heap of morid's size, gpu_device -1, this node only, 30 s)
 * and opts->size = size (sizeof(*opts)). MORI_EINVAL for NULL or a size below 1.0's struct.
 * The join reads only opts->size bytes (see mori.h's conventions). */
MORI_API int mori_shmem_opts_init(mori_shmem_opts *opts, size_t size);

/* Join group `name` (ROCm/mori's ShmemInit, by name instead of a bootstrap; 1..127 printable bytes, no space) as PE `rank` of `world_size` (1..1024).
 * Returns when all world_size PEs have joined (every heap is allocated and each local peer's heap
 * mapped here) or the deadline passed (MORI_ETIMEDOUT naming the ranks that never arrived). The
 * join ends with a barrier: no PE returns before every PE has mapped its peers, so a PE may leave
 * as soon as its join returns without failing a slower peer's join.
 * Refused on every PE (MORI_EINVAL with the reason) when ranks collide, or world sizes, heap
 * sizes or heap kinds disagree; MORI_EINVAL for a rank out of range; MORI_EEXIST when a group of
 * that name still lives (formed, or aborted with PEs still in it: a name is free again once every
 * PE of its group has left); MORI_EBUSY when c already is a PE of a group of that name, or of
 * morid's client_max_groups groups (64 by default; the message names the option). Names
 * are per uid: a join meets only PEs of the caller's uid (root's too), so another uid's group of
 * the same name is another group and can neither block nor join this one;
 * MORI_ENOTSUP for a remote root when this morid has no peer listener, or a VRAM heap without
 * VMM POSIX-fd allocations; MORI_EINVAL / MORI_ENOTSUP for opts->size (mori.h's conventions).
 * opts NULL: the defaults. One client may be a PE of several groups. The group is owned by the
 * caller until mori_shmem_finalize (mori_client_close finalizes the client's groups). */
MORI_API int mori_shmem_init(mori_client *c, const char *name, int rank, int world_size,
			     const mori_shmem_opts *opts, mori_group **out);

/* Unique-id form (as ROCm/mori's ShmemGetUniqueId / NVSHMEM's nvshmemx_get_uniqueid): rank 0
 * makes a blob of at most MORI_SHMEM_UID_BYTES (128) bytes (into uid, cap bytes; its length in
 * *len) naming a fresh group and its root daemon; the application broadcasts it; every PE then
 * calls mori_shmem_init_uid with it, which joins as mori_shmem_init does (same errors; opts->root
 * is ignored: the blob names the root). get_unique_id: MORI_EMSGSIZE when cap is too small.
 * init_uid: MORI_EPROTO for a blob that is not one. */
MORI_API int mori_shmem_get_unique_id(mori_client *c, void *uid, size_t cap, size_t *len);
MORI_API int mori_shmem_init_uid(mori_client *c, const void *uid, size_t len, int rank, int world_size,
				 const mori_shmem_opts *opts, mori_group **out);

/* Leave the group (ROCm/mori's ShmemFinalize, but not collective): the group is torn down for the PEs still in it (their abort
 * word becomes MORI_SHMEM_ABORT_TEARDOWN with abort_pe this PE; waits end, their later calls on
 * the group fail with MORI_ECANCELED); their mappings of this PE's heap stay valid until they
 * leave too: the heaps of a node are released when its last PE has left. Frees g.
 * Destroy g's communicators (mori_comm_destroy) and EP handles (mori_ep_destroy) first: those are
 * collective and free their heap memory. Any left alive stay valid as handles: every call on them
 * then fails with MORI_ESTALE ("this PE has left"), and their destroy frees them, not collectively
 * (their heap memory went with the group). A second finalize of g is a no-op while they live.
 * Returns MORI_OK (g is released whatever the daemon answers); NULL is a no-op returning MORI_OK. */
MORI_API int mori_shmem_finalize(mori_group *g);

/* ---- queries (local, no daemon round trip) ---- */
/* This PE's rank (-1 for NULL g) and the group's PE count (0 for NULL g). */
MORI_API int mori_shmem_my_pe(const mori_group *g);
MORI_API int mori_shmem_n_pes(const mori_group *g);
/* The node team: the PEs on this node, ascending (n entries in *pes, valid while g lives).
 * MORI_EINVAL for a NULL argument. */
MORI_API int mori_shmem_team_node(const mori_group *g, const int **pes, int *n);
/* This PE's heap: its address in this process (device address for a VRAM heap; NULL for NULL g)
 * and its size in bytes (0 for NULL g). */
MORI_API void *mori_shmem_heap_base(const mori_group *g);
MORI_API uint64_t mori_shmem_heap_size(const mori_group *g);
/* The address at which this process can load and store the object `ptr` (in its own heap) of
 * PE pe, when it maps that PE's heap (same node); NULL otherwise, or when ptr is outside the
 * heap or pe out of range (ROCm/mori's ShmemPtrP2p, NVSHMEM's nvshmem_ptr). */
MORI_API void *mori_shmem_ptr_p2p(const mori_group *g, const void *ptr, int pe);
/* The heap offset of ptr (in this PE's heap), or -1 when ptr is outside it. */
MORI_API int64_t mori_shmem_offset(const mori_group *g, const void *ptr);

/* ---- symmetric allocation (collective, deterministic) ----
 * Every PE calls with the same size and alignment in the same order and gets the same offset.
 * A PE whose call differs gets MORI_EINVAL naming the first PE and call that differ, on every
 * PE; nothing is allocated then (the call still counts: the next one lines up). MORI_ENOMEM
 * when the heap has no room (sizes in the message). align: a power of two, 0 for 256 bytes;
 * sizes round up to 64 bytes; size 0 gives NULL. calloc zeroes the bytes on every PE before it
 * returns (each PE its own, then a barrier). free(NULL) frees nothing but is a collective call
 * like the others; free of an address malloc did not return is MORI_EINVAL on every PE (an
 * address outside the heap: on this PE, before any call). A call past the deadline ends with
 * MORI_ETIMEDOUT naming the PEs that never made it, and aborts the group. */
MORI_API int mori_shmem_malloc(mori_group *g, size_t size, size_t align, void **out);
MORI_API int mori_shmem_calloc(mori_group *g, size_t size, size_t align, void **out);
MORI_API int mori_shmem_free(mori_group *g, void *ptr);

/* ---- host-initiated data movement ----
 * dst/src: an address in this PE's heap naming the symmetric object (put: dst is symmetric,
 * src any memory this process can read; get: src symmetric, dst any memory). Blocking: the
 * bytes have landed at the target (put) or here (get) when it returns. Local peers are
 * reached through the mapping, others through morid's transports. MORI_ERANGE when the range
 * leaves the heap (nothing is written); MORI_EINVAL for a PE out of range; once the group is
 * aborted, its code (MORI_EPEERDEAD, MORI_ECANCELED, MORI_ETIMEDOUT). */
MORI_API int mori_shmem_putmem(mori_group *g, void *dst, const void *src, size_t len, int pe);
MORI_API int mori_shmem_getmem(mori_group *g, void *dst, const void *src, size_t len, int pe);

/* Every PE reaches the barrier, and every put a PE made before it is visible everywhere, before
 * any PE returns (OpenSHMEM barrier_all). MORI_ETIMEDOUT naming the missing ranks, or what
 * mori_shmem_status says once the group aborted: MORI_EPEERDEAD, or MORI_ECANCELED (a PE left,
 * or this node's morid went away, stopped or killed: never MORI_ECONN; status says so from the
 * moment the call returns). */
MORI_API int mori_shmem_barrier_all(mori_group *g);
/* The same barrier enqueued on a CUDA/HIP stream (a kernel: no host synchronisation). VRAM
 * heaps only (MORI_ENOTSUP for host heaps); the call returns once the kernel is launched; if the
 * group aborts meanwhile the kernel ends and mori_shmem_status says why. */
MORI_API int mori_shmem_barrier_on_stream(mori_group *g, void *stream);
/* Completes on the stream when every proxy request made before it has completed (NVSHMEM's
 * nvshmemx_quiet_on_stream). VRAM heaps only, as barrier_on_stream. */
MORI_API int mori_shmem_quiet_on_stream(mori_group *g, void *stream);

/* The group's health, read from its abort word (local, no daemon round trip). code 0 while the
 * group is healthy (pe -1); once the abort word is set: MORI_EPEERDEAD (a PE died: pe names it;
 * also when a node holding PEs of the group, the root's included, goes down: pe names one of its
 * PEs), MORI_ECANCELED (torn down: a PE left, pe names it, or a message to the root daemon failed
 * or this node's morid went away: pe -1; libmori sets that itself when its session hangs up) or
 * MORI_ETIMEDOUT (a collective call missed its deadline: pe names the first PE that never made
 * it). message: "" while healthy, else the cause (also the client's mori_client_last_error, valid
 * until the next call on the group's client from this thread). Returns the code; MORI_EINVAL for
 * NULL g, MORI_ESTALE in a child after fork. */
MORI_API int mori_shmem_status(const mori_group *g, mori_status *out);

/* ---- the device API's state ----
 * The device address of this PE's struct mori_shmem_state (common/shmem_layout.h), for kernels
 * compiled with kernels/mori_shmem.cuh: copy it into the module's `mori_shmem_state_ptr`
 * (mori_shmem_module_init does that through the driver API for a CUmodule / hipModule_t, in the
 * primary context of the group's device). For a host heap no kernel can use the group:
 * mori_shmem_state gives a host copy of the state (host addresses, for inspection) and
 * mori_shmem_module_init MORI_ENOTSUP. mori_shmem_state: NULL for NULL g; valid while g lives.
 * mori_shmem_module_init: MORI_EINVAL for a NULL argument, the driver's code (message names it)
 * when the module has no mori_shmem_state_ptr global. */
MORI_API void *mori_shmem_state(const mori_group *g);
MORI_API int mori_shmem_module_init(const mori_group *g, void *module);

#ifdef __cplusplus
}
#endif
#endif
