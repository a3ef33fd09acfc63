/* libmori internals: the objects behind the opaque handles of mori.h. */
#ifndef LIBMORI_INTERNAL_H
#define LIBMORI_INTERNAL_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "mori.h"
#include "mori.pb-c.h"
#include "ring.h"
#include "wire.h"

struct mori_client {
	char runtime_dir[256];
	char node[128];
	uint64_t id, epoch;
	pid_t pid;                /* the process that opened it: every call from another fails */
	unsigned fork_gen;        /* client_fork_gen at open (a child of a fork sees it bumped) */
	uint32_t default_timeout_ms; /* the daemon's transfer_timeout_ms, from its hello */
	int sock;                 /* session socket (SEQPACKET) */
	pthread_mutex_t rpc_lock; /* one request in flight on the session socket */
	char gone_why[CQE_MSG + 64]; /* why morid detached us (its unsolicited reply, id 0) */
	int gone_code;              /* ... and its code (MORI_EPERM: refused) */
	uint64_t next_req;
	/* rings */
	int ring_fd, sq_efd, cq_efd;
	void *ring;
	struct ring_layout lay;
	struct ring_hdr *sqh, *cqh;
	void *sqe, *cqe;
	pthread_mutex_t sq_lock;  /* producers of the SQ */
	pthread_mutex_t cq_lock;  /* the consumer of the CQ (whoever polls) */
	/* arena allocator for cross-node arguments (first fit over a sorted free list) */
	pthread_mutex_t arena_lock;
	struct arena_block *arena_free;
	/* transfers waiting for daemon completions, by id */
	pthread_mutex_t xfer_lock;
	struct mori_xfer **pending;
	size_t npending, cap_pending;
	uint64_t next_xfer;
	/* notifications received but not yet taken */
	mori_notif *notifs;
	size_t nnotif, cap_notif;
	/* memory objects (for revocation and close) */
	pthread_mutex_t mem_lock;
	struct mori_mem *mems;
	/* the copy thread pool */
	struct copy_pool *pool;
	/* GPU state, created on first VRAM use (gpu_dev.c) */
	struct gpu_ctx *gpu;
	/* UMBP: the store's slabs this process maps (umbp.c), shared by the client's handles */
	struct umbp_maps *umbp;
	/* MORI-SHMEM groups this client is a PE of (shmem.c) */
	pthread_mutex_t group_lock;
	struct mori_group *groups;
	/* the hang-up watcher (client.c), started with the first group or the first region opened by
	 * cross-memory attach: under group_lock */
	int hup_on;
	_Atomic int hup_reap;     /* it also reaps the completion queue every 100 ms (revocations) */
	_Atomic int hup_stopping; /* hup_efd then means stop; else a wake to read hup_reap again */
	int hup_efd;              /* its stop signal */
	pthread_t hup_thread;
};

struct mori_mem {
	struct mori_mem *next;    /* client's list */
	mori_client *c;
	int local;                /* registered by this client */
	int kind;
	uint64_t size;
	uint64_t region_id;
	uint32_t generation;
	uint8_t secret[16];       /* the owner's handles only: what its blobs carry */
	size_t secret_len;
	char node[128];           /* owning node ("" = this node) */
	uint64_t epoch;
	/* where the bytes are, for this process */
	uint8_t *ptr;             /* host: mapped address (local or peer's memfd); NULL if CMA */
	void *map_base;           /* what to munmap, if we mapped it */
	uint64_t map_len;
	int owns_alloc;           /* mori_mem_alloc memory: unmap at deregister */
	pid_t owner_pid;          /* CMA: process and address of the bytes */
	uint64_t owner_addr;
	int has_owner_pidfd;      /* CMA: owner_pidfd is that process (from morid), checked before copies */
	int owner_pidfd;
	int remote;               /* on another node: transfers go through the daemons */
	uint64_t remote_ref;      /* daemon's id for it */
	_Atomic int revoked;      /* the owner freed it (CQE_REVOKED) */
	_Atomic int inflight;     /* this process's transfers touching it */
	_Atomic int ack_pending;  /* revoked while a copy ran: acknowledge when inflight is 0 */
	/* VRAM (gpu_mem.c) */
	uint64_t dptr;            /* device address in this process */
	int gpu_device;
	void *gpu_priv;           /* runtime-specific mapping state */
};

enum xfer_state { XS_PENDING = 0, XS_DONE = 1 };

struct mori_xfer {
	mori_client *c;
	uint64_t id;
	uint64_t bytes;
	_Atomic int state;        /* XS_* */
	int code;                 /* final code when XS_DONE */
	char msg[160];
	uint64_t deadline_us;     /* absolute, mori_now_us() clock */
	int own_deadline;         /* the caller gave a timeout; else morid's transfer_timeout_ms applies */
	uint64_t arena_off, arena_len;
	mori_mem *local, *remote;
	int has_notif;
	uint64_t tag;
	void *gpu_event;          /* VRAM copies: completion event (gpu_copy.c) */
	int in_table;
};

struct mori_xfer_list {
	mori_mem *local, *remote;
	mori_desc *descs;
	size_t n;
	uint64_t uniform_len;     /* every descriptor's length when they are all equal, else 0 */
	uint64_t list_id;         /* daemon's id for cross-node lists */
	void *gpu_priv;           /* same-node VRAM lists: descriptors kept on the GPU (gpu_copy.c) */
};

/* client.c */
/* One request/reply on the session socket; fds_out are sent (not closed), fds_in received.
 * Returns MORI_OK or an error; a daemon error reply sets last_error and returns its code. */
int client_rpc(mori_client *c, Mori__Request *req, const int *fds_out, int nfds_out,
	       Mori__Reply **rep, int *fds_in, int *nfds_in);
/* The same with a deadline of timeout_ms instead of the default 15 s (group joins and calls). */
int client_rpc_timeout(mori_client *c, Mori__Request *req, const int *fds_out, int nfds_out,
		       Mori__Reply **rep, int *fds_in, int *nfds_in, int timeout_ms);
int set_error(mori_client *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* MORI_OK when called in the process that opened c; else MORI_ESTALE ("client opened by pid N,
 * used in pid M: open a new client after fork"), and nothing of c may be touched. */
int client_check(mori_client *c);
int client_forked(const mori_client *c);     /* 1 in a child of the opener (no error set) */
/* Has morid closed our session? (Never consumes a reply another thread waits for.) */
int client_session_gone(mori_client *c);
/* Tell the daemon no copy of ours still touches revoked region m (cross-memory attach). */
void client_ack_revoke(mori_client *c, const mori_mem *m);
/* Submit one SQE, ringing the doorbell when the daemon sleeps. MORI_EAGAIN when full. */
int client_submit(mori_client *c, const struct mori_sqe *e);
/* Drain the CQ: completes transfers, queues notifications, marks revocations. */
void client_reap(mori_client *c);
/* Block on the CQ doorbell up to timeout_us (after the ring said empty). */
void client_sleep(mori_client *c, int64_t timeout_us);
/* What the files above client.c do at its events, so that client.c calls none of them. Each file
 * registers from a constructor, which runs only where the file is linked: where none of its
 * objects can exist, there is nothing to close. mori_client_close runs the close steps in this
 * order. */
enum client_close_step {
	CLOSE_GROUPS,   /* shmem.c: groups hold regions and transfers of their own */
	CLOSE_XFERS,    /* xfer.c: cross-node transfers still in flight */
	CLOSE_REGIONS,  /* mem.c: every region left registered or open */
	CLOSE_POOL,     /* xfer.c: the copy threads */
	CLOSE_GPU,      /* gpu_dev.c: the GPU context and its devices */
	CLOSE_STEPS
};
void client_on_close(enum client_close_step step, void (*fn)(mori_client *c));
/* client_reap's events: a transfer completed (CQE_XFER_DONE), an opened region revoked by its
 * owner (CQE_REVOKED). */
void client_on_xfer_done(void (*fn)(mori_client *c, uint64_t id, int code, const char *msg));
void client_on_revoked(void (*fn)(mori_client *c, uint64_t region_id));
/* The hang-up watcher saw morid close the session. */
void client_on_session_lost(void (*fn)(mori_client *c));

/* arena.c: the argument arena of the ring pair (c->lay.arena_bytes). arena_alloc: MORI_EAGAIN
 * when full; arena_init: MORI_ENOMEM. */
int arena_init(mori_client *c);
void arena_fini(mori_client *c);
int arena_alloc(mori_client *c, uint64_t len, uint64_t *off);
void arena_release(mori_client *c, uint64_t off, uint64_t len);

/* xfer.c: end (MORI_ECANCELED) the daemon-side transfers that use m, which is being deregistered;
 * returns how many. */
int xfer_cancel_mem(mori_client *c, mori_mem *m);

/* mem.c: open a region by its handle (mori_mem_unpack without the blob); mem_open_heap does the
 * same without faulting a host mapping in up front (a symmetric heap: populating would commit
 * every byte of every peer's heap); mem_take_handle takes a handle's fields into a local region
 * libmori made itself (shmem.c). */
int mem_open_handle(mori_client *c, const Mori__Handle *h, mori_mem **out);
int mem_open_heap(mori_client *c, const Mori__Handle *h, mori_mem **out);
void mem_take_handle(mori_mem *m, const Mori__Handle *h);
/* client.c: start c's hang-up watcher once (with its first group): one thread that polls the
 * session for hang-up only, never reads it, and runs the session-lost hook. Caller holds
 * group_lock. 0, or MORI_ESYS. */
int client_hup_watch(mori_client *c);

/* copy.c: memcpy over several threads for large batches. */
struct copy_pool *copy_pool_new(int threads);
struct copy_op { uint8_t *dst; const uint8_t *src; uint64_t len; };
/* Copy every op (total: their bytes), split across the pool's threads; a batch with an op whose
 * sides overlap runs on the caller's thread, in order, with memmove for that op (mori.h). */
void copy_pool_free(struct copy_pool *p);
void copy_pool_run(struct copy_pool *p, const struct copy_op *ops, size_t n, uint64_t total);

/* desc.c: descriptor and index checks, for the host and the GPU transfer paths alike. */
/* Does descriptor e lie inside both regions? (Its length may be 0.) The fast test, inline for
 * the GPU staging loop; desc_check names the fault. */
static inline int desc_inside(const mori_desc *e, const mori_mem *l, const mori_mem *r)
{
	return e->local_offset <= l->size && e->length <= l->size - e->local_offset && e->remote_offset <= r->size &&
	       e->length <= r->size - e->remote_offset;
}
/* Descriptor i against both regions: MORI_EINVAL (zero length) or MORI_ERANGE naming the side and
 * its bounds (desc_fault); MORI_OK. Inline: it runs once per descriptor of every list. */
int desc_fault(mori_client *c, const mori_mem *l, const mori_mem *r, const mori_desc *d, size_t i);
static inline int desc_check(mori_client *c, const mori_mem *l, const mori_mem *r, const mori_desc *d, size_t i)
{
	return d->length && desc_inside(d, l, r) ? MORI_OK : desc_fault(c, l, r, d, i);
}
/* Indices idx[from, to) of a prepared list of list_n descriptors: MORI_ERANGE naming the first
 * one out of range ("who: index ..."), else MORI_OK; copies them to stage[0, to - from) when
 * stage is not NULL. */
int desc_check_idx(mori_client *c, const char *who, const uint32_t *idx, size_t from, size_t to, size_t list_n,
		   uint32_t *stage);

/* gpu_*.c: GPU memory and copies; MORI_ENOGPU where no runtime is present. */
int gpu_mem_register(mori_client *c, mori_mem *m, void *ptr, size_t len, Mori__MemRegister *req,
		     uint8_t *ipc_buf, size_t ipc_cap, int *fd_out);
/* Map a peer's VRAM region from its open reply; closes fds[0..nfds) (one, or a range over several
 * VMM allocations' first batch, one each). */
int gpu_mem_open(mori_client *c, mori_mem *m, const Mori__MemOpenReply *o, int *fds, int nfds);
void gpu_mem_close(mori_client *c, mori_mem *m);
/* mori_mem_alloc(MORI_MEM_VRAM): allocate on $MORI_GPU_DEVICE (else 0), zero it and fill req as
 * gpu_mem_register does; m owns the allocation (gpu_mem_close frees it). */
int gpu_mem_alloc(mori_client *c, mori_mem *m, size_t size, Mori__MemRegister *req, uint8_t *ipc_buf,
		  size_t ipc_cap, int *fd_out);
/* The same on device `ordinal`; vmm_only: a VMM allocation with a POSIX fd or MORI_ENOTSUP (no
 * cuMemAlloc fallback), and *size becomes the granularity-rounded size it has. */
int gpu_mem_alloc_on(mori_client *c, mori_mem *m, int ordinal, size_t *size, int vmm_only, Mori__MemRegister *req,
		     uint8_t *ipc_buf, size_t ipc_cap, int *fd_out);
/* A same-node batch where either side is VRAM: libmori's copy kernel, in slices for large
 * batches; each descriptor (or a list's index) is checked as it is staged, so callers pass the
 * batch unchecked and a bad entry fails the call after earlier slices were launched (they
 * finish in the background). Sets x->bytes; completion through x->gpu_event. */
int gpu_xfer(mori_client *c, mori_xfer_op op, mori_mem *local, mori_mem *remote, const mori_desc *descs,
	     size_t n, void *stream, struct mori_xfer *x);
int gpu_xfer_poll(struct mori_xfer *x); /* MORI_EINPROGRESS, MORI_OK or an error */
/* Prepared lists where either side is VRAM (same node): gpu_list_prep uploads the list's
 * descriptors to the GPU once (sets l->gpu_priv); gpu_xfer_list then stages only the indices
 * (4 bytes each) instead of flattened descriptors; gpu_list_free (before freeing l) waits for
 * copies still reading them. gpu_xfer_list also works without a prep (it then stages the
 * indexed descriptors, like gpu_xfer on a flattened array). */
int gpu_list_prep(mori_client *c, struct mori_xfer_list *l);
void gpu_list_free(mori_client *c, struct mori_xfer_list *l);
int gpu_xfer_list(mori_client *c, mori_xfer_op op, struct mori_xfer_list *l, const uint32_t *idx, size_t n,
		  void *stream, struct mori_xfer *x);
/* Is this pointer device memory? 1 yes, 0 no, <0 no runtime. */
int gpu_ptr_is_device(const void *ptr);

#endif
