/* libmori's MORI-SHMEM internals: the group behind mori_group, shared by shmem_status.c
 * (status, holds, queries), shmem_gpu.c (VRAM heaps, the device state, module init, stream
 * operations), shmem_rma.c (host puts and gets) and shmem.c (joining, collective calls,
 * leaving), in that order bottom up. */
#ifndef LIBMORI_SHMEM_INT_H
#define LIBMORI_SHMEM_INT_H
#include <pthread.h>
#include <stdint.h>

#include "internal.h"
#include "mori_shmem.h"
#include "shmem_layout.h"

struct gpeer {
	int local;                 /* on this node: its heap is mapped here */
	char node[128];
	int32_t pid;
	uint8_t handle[MORI_MEM_BLOB_MAX]; /* its heap's packed Handle */
	size_t handle_len;
	mori_mem *m;               /* local: the mapping; remote: opened on first use (else NULL) */
	uint64_t base;             /* local: its heap in this process (host pointer or device address) */
};

struct mori_group {
	struct mori_group *next;   /* the client's groups */
	mori_client *c;
	char name[128];
	uint64_t id;               /* GroupCall/GroupLeave name it */
	int my_pe, n_pes;
	int kind;                  /* MORI_MEM_HOST or MORI_MEM_VRAM */
	int gpu_device;
	uint64_t heap_size;
	int64_t timeout_us;
	uint64_t base;             /* own heap: host pointer (HOST) or device address (VRAM) */
	mori_mem *own;             /* own heap as a local region (cross-node transfers from it) */
	void *heap_map;            /* HOST: what to munmap */
	struct gpeer *peers;       /* [n_pes]; peers[my_pe] is this PE */
	int *team;                 /* the node team, ascending */
	int team_n;
	struct mori_shmem_ctrl *ctrl; /* the control page (and the proxy ring after it) */
	size_t ctrl_len;
	uint32_t ring_entries;
	pthread_mutex_t lock;      /* collective calls, one at a time */
	pthread_mutex_t rma_lock;  /* lazy opens of remote heaps and the bounce buffer */
	uint64_t seq;              /* collective calls made */
	mori_mem *bounce;          /* host staging for cross-node puts/gets of non-heap memory */
	/* the device API's state (struct mori_shmem_state) */
	struct mori_shmem_state state; /* host copy (HOST heaps: mori_shmem_state returns it) */
	uint64_t *state_peer_base; /* HOST heaps: the host arrays it points at */
	int32_t *state_team;
	void *gpu;                 /* VRAM heaps: shmem_gpu.c's part (device copies, pinned ctrl) */
	/* Communicators and EP handles on g (shmem_hold): while any lives, mori_shmem_finalize frees
	 * everything but this struct, which stays as a shell with left set, so that their calls
	 * fail with MORI_ESTALE and their destroy frees them; the last release frees the shell. */
	int holds;
	int left;                  /* 0; SHMEM_LEFT (left), SHMEM_LEFT_CHILD (left in a child after fork) */
};

#define SHMEM_LEFT 1
#define SHMEM_LEFT_CHILD 2

/* shmem.c */
/* MORI_OK, or MORI_ESTALE (last_error naming the joiner's pid and ours) in a child after fork():
 * a group, and every communicator and EP handle on it, belongs to the process that joined it,
 * and a child's call would act as the parent's PE (its calls counted as the parent's, its
 * leave tearing the parent's group down). Every group, CCL and EP entry point calls it first. */
int shmem_check(const mori_group *g);
/* The status of g from its control page: 0, or the abort's code with last_error set. */
int shmem_abort_status(mori_group *g);
/* morid is gone (the session hung up): set each group's abort word (TEARDOWN, PE -1) unless it
 * is set already, so that waits on it end. */
void shmem_session_lost(mori_client *c);
/* A communicator or EP handle made on g holds it (after its creation succeeded) and releases it
 * at its destroy. shmem_left: 0 while g is joined; else SHMEM_LEFT or SHMEM_LEFT_CHILD, and g is
 * a shell (no heap, no client): the destroy frees only the object's own memory (the GPU's too
 * for SHMEM_LEFT; none in a child after fork, whose GPU state is the parent's), then releases.
 * shmem_check returns MORI_ESTALE for a left g. */
void shmem_hold(mori_group *g);
void shmem_release(mori_group *g);
int shmem_left(const mori_group *g);
/* After g's resources are gone (its leave): free it, or, while communicators or EP handles hold
 * it, keep it as a shell that says how it left (how: SHMEM_LEFT*). */
void shmem_free_or_shell(mori_group *g, int how);

/* A barrier_all inside a collective: tag (shmem_coll_tag, common/shmem_wire.h) and count are
 * compared by the root with every PE's (0: a plain barrier); it ends at timeout_us (at most the
 * group's; <= 0: the group's) with MORI_ETIMEDOUT naming the PEs that never came. */
int shmem_barrier_coll(mori_group *g, uint64_t count, uint64_t tag, int64_t timeout_us);

/* shmem_rma.c */
void shmem_rma_close(mori_group *g);

/* shmem_gpu.c */
/* A VRAM heap of *size bytes (rounded up to the granularity here) on device ordinal: *own gets
 * the region-to-be (its handle follows the join), *fd the VMM fd for morid, blob its
 * gpu_vmm_blob. */
int shmem_gpu_heap_alloc(mori_client *c, int ordinal, uint64_t *size, mori_mem **own, int *fd, void *blob,
			 size_t *bloblen);
/* Build the device state of a VRAM group (after every local peer is mapped). */
int shmem_gpu_state(mori_group *g);
void shmem_gpu_close(mori_group *g);
/* Copy len bytes between addresses of this process where either may be device memory (VRAM
 * heaps): the driver picks the direction from the pointers. */
int shmem_gpu_copy(mori_group *g, void *dst, const void *src, size_t len);
/* Zero len bytes of device memory at dptr. */
int shmem_gpu_zero(mori_group *g, uint64_t dptr, size_t len);
#endif
