/* libmori's GPU state, private to the gpu_*.c files (and the tests and tools that look inside). */
#ifndef LIBMORI_GPU_INT_H
#define LIBMORI_GPU_INT_H
#include <pthread.h>
#include <stdint.h>

#include "gpu.h"
#include "internal.h"

#define GPU_MAX_DEVICES 16
#define GPU_STAGING_BYTES (4u << 20)   /* descriptor staging ring: pinned host, mapped for the GPU,
                                        * and a device mirror for slices that need a chunk table */
#define GPU_SLICE_BYTES (1u << 20)     /* most staged bytes (indices or descriptors) per launch */
#define GPU_FIRST_SLICE_DESCS 1024     /* the first launch's: the GPU starts while the CPU stages */
#define GPU_UNMAP_WAIT_US 2000000      /* how long an unmap waits for this client's copies */

/* A copy launched and not yet seen complete. */
struct gpu_op {
	struct gpu_op *prev, *next;  /* the device's live list */
	struct gpu_dev *d;
	gpu_event ev;                /* recorded after the last launch */
	uint64_t svc_seq;            /* nonzero: a copy service job instead (gpu_service.c) */
	unsigned polls;              /* service jobs: times asked so far */
	int orphan;                  /* its transfer gave up on it (deadline): free when done */
};

struct gpu_span { uint64_t end; gpu_event ev; };

struct gpu_dev {
	int ordinal;
	gpu_device dev;
	gpu_context ctx;             /* primary context, retained */
	char arch[16];
	int sm_count;
	pthread_mutex_t lock;        /* everything below */
	int kernel_rc;               /* 0 not tried, 1 loaded, < 0 MORI_E* */
	char kernel_msg[200];
	gpu_module module;
	gpu_function copy_fn;
	gpu_function service_fn;     /* the copy service's kernel; NULL: not in the image */
	struct gpu_service *service; /* gpu_service.c, made at first use */
	struct gpu_viz *viz;         /* MORI-VIZ tracing of copies, or NULL (libclient/gpu_viz.c) */
	gpu_stream stream;           /* launches when the caller gives none */
	gpu_stream upload;           /* descriptor uploads, overlapping earlier slices' copies */
	gpu_event upload_ev;
	gpu_stream stream2;          /* every other slice of a large batch (they overlap) */
	gpu_event fork_ev, join_ev;  /* stream2 after the batch's stream; the batch's after stream2 */
	gpu_stream stream2_from;     /* the stream stream2 was last forked from */
	uint8_t *ring_host;          /* staging ring (pinned), mirrored at ring_dev */
	gpu_dptr ring_zc;            /* ring_host as the GPU reads it in place (mapped) */
	gpu_dptr ring_dev;
	uint64_t ring_head, ring_tail; /* free-running byte counters */
	struct gpu_span *spans;      /* FIFO of staged slices with their completion events */
	size_t span_cap, span_first, span_n;
	gpu_event *pool;             /* idle events */
	size_t npool, cap_pool;
	struct gpu_op live;          /* sentinel of the live list */
};

/* A peer's GPU region mapped into this process, shared by every handle that opens it. */
struct gpu_map {
	struct gpu_map *next;
	int refs;
	int type;                    /* GPU_HANDLE_* */
	struct gpu_ipc_handle ipc;   /* legacy: the key */
	uint64_t epoch, region_id;   /* VMM: the key */
	uint32_t generation;
	struct gpu_dev *d;
	gpu_dptr base;
	size_t size;
	struct gpu_vmm_range span;   /* GPU_HANDLE_POSIX_FDS: the pieces mapped into [base, +size) */
};

/* Host memory pinned for the GPU on behalf of one mori_mem (gpu_priv of a HOST region; a
 * VRAM region's gpu_priv is its gpu_map, NULL when local). */
struct gpu_pin {
	void *base;
	size_t len;
	int owned;                   /* we registered it (else the application had) */
	gpu_dptr dptr;               /* device address of mori_mem.ptr */
};

struct gpu_ctx {
	const struct gpu_api *g;
	pthread_mutex_t lock;        /* devs[] creation, maps, pins */
	struct gpu_dev *devs[GPU_MAX_DEVICES];
	struct gpu_map *maps;
};

/* Make d's context current on this thread, and back. */
static inline int gpu_push(const struct gpu_api *g, struct gpu_dev *d) { return g->ctx_push_current(d->ctx); }
static inline void gpu_pop(const struct gpu_api *g)
{
	gpu_context old;
	g->ctx_pop_current(&old);
}

/* gpu_dev.c: the context (made at first use) and its devices (each at its first use). */
int gpu_ctx_get(mori_client *c, struct gpu_ctx **out);
int gpu_dev_get(mori_client *c, struct gpu_ctx *x, int ordinal, struct gpu_dev **out);
/* Free the context: peers' regions still mapped, then every device (mori_client_close). */
void gpu_ctx_free(mori_client *c);
/* Wait (bounded) until every copy launched on d has finished; reclaims finished ops. */
void gpu_dev_drain(const struct gpu_api *g, struct gpu_dev *d, uint64_t wait_us);
/* Unmap a peer's region once no copy on its device still runs, and free mp. */
void gpu_map_release(const struct gpu_api *g, struct gpu_map *mp);
/* A device's copy resources, d->lock held and (where a driver call is made) d's context
 * current: the copy kernel, loaded at first use (MORI_ENOKERNEL naming the architecture when
 * the image has none for it); the staging ring, made at first use; ring_alloc reserves `need`
 * bytes (16-aligned), waiting for older slices up to deadline; ring_push records a staged
 * slice that ends at `end` with the event that completes it; idle events from a pool. */
int gpu_kernel_load(mori_client *c, const struct gpu_api *g, struct gpu_dev *d);
int gpu_staging_init(mori_client *c, const struct gpu_api *g, struct gpu_dev *d);
int gpu_ring_alloc(mori_client *c, const struct gpu_api *g, struct gpu_dev *d, uint64_t need, uint64_t deadline,
		   uint64_t *off);
int gpu_ring_push(struct gpu_dev *d, uint64_t end, gpu_event ev);
int gpu_ev_get(const struct gpu_api *g, struct gpu_dev *d, gpu_event *e);
void gpu_ev_put(const struct gpu_api *g, struct gpu_dev *d, gpu_event e);
/* The live copies of a device: GPU_SUCCESS once op has finished, GPU_ERROR_NOT_READY before,
 * or the event's error (locked: the caller holds d->lock); unlink op from the live list; free
 * the orphaned ops that have finished (d->lock held). */
int gpu_op_query(const struct gpu_api *g, struct gpu_op *op, int locked);
void gpu_op_unlink(struct gpu_op *op);
void gpu_reap_orphans(const struct gpu_api *g, struct gpu_dev *d);

/* gpu_mem.c: device address of a HOST region's bytes, pinning them for the GPU on first use. */
int gpu_host_dptr(mori_client *c, struct gpu_ctx *x, struct gpu_dev *d, mori_mem *m, gpu_dptr *out);

/* gpu_span.c: ranges over several VMM allocations mapped back to back (expandable segments). */
struct gpu_piece { gpu_dptr base; uint64_t size; }; /* one VMM allocation's mapping */
/* The VMM allocations backing [p, p+len), in address order, each starting where the previous
 * ends (*out malloc'd, *n of them). MORI_EINVAL naming the hole when part of the range is not
 * mapped, or a piece on another device than `ordinal`; MORI_ENOTSUP when a piece is not a VMM
 * allocation with POSIX fd handles. The message goes to msg. */
int gpu_span_walk(const struct gpu_api *g, int ordinal, gpu_dptr p, size_t len, struct gpu_piece **out, uint32_t *n,
		  char *msg, size_t mlen);
/* Register [p, p+len) over several VMM allocations: upload every allocation's fd to morid in
 * batches, then fill req (GPU_HANDLE_POSIX_FDS, the version 2 blob in buf, the upload id) for
 * the caller's MemRegister, which commits the region. Context of `ordinal` current. */
int gpu_span_register(mori_client *c, const struct gpu_api *g, int ordinal, gpu_dptr p, size_t len,
		      Mori__MemRegister *req, uint8_t *buf, size_t cap);
/* Map a peer's range of several VMM allocations into mp (context current): the open reply's
 * pieces with fds[0..nfds) (not closed here), then the rest fetched from morid. */
int gpu_span_import(mori_client *c, const struct gpu_api *g, struct gpu_map *mp, const Mori__MemOpenReply *o,
		    const int *fds, int nfds);

/* gpu_copy.c */

/* Inspection for tests and mori-gpubench: load (if needed) and return the copy kernel of
 * device `ordinal`. MORI_ENOKERNEL with a message naming the architecture when absent. */
int gpu_copy_kernel(mori_client *c, int ordinal, gpu_function *fn, int *sm_count);
struct mori_copy_args;
/* The copy service (gpu_service.c), d->lock held and d's context current: post an inline batch
 * of `bytes` bytes (a->n descriptors in a->inl) as job *seq; MORI_ENOTSUP when it does not take
 * it (too large, traced, the stream order is not idle, slots full, no kernel): launch instead. */
int gpu_service_post(const struct gpu_api *g, struct gpu_dev *d, const struct mori_copy_args *a, uint64_t bytes,
		     uint64_t *seq);
/* GPU_SUCCESS once job seq is copied; GPU_ERROR_NOT_READY before (every GPU_SERVICE_CHECK_POLLS-th
 * call, polls, also launches the block again if it left); another GPU error when the block's
 * stream failed or it cannot be launched. locked: the caller holds d->lock. */
int gpu_service_query(const struct gpu_api *g, struct gpu_dev *d, uint64_t seq, unsigned polls, int locked);
/* Jobs the service has taken on d so far (tests). */
uint64_t gpu_service_jobs(const struct gpu_dev *d);
/* Stop the block (waiting up to wait_us) and free the service (d->lock held). */
void gpu_service_free(const struct gpu_api *g, struct gpu_dev *d, uint64_t wait_us);
/* libclient/gpu_viz.c (d->lock held, d's context current): after the module loads, the traced
 * copy kernel when MORI_VIZ_TRACE or MORI_VIZ_KERNEL asks for it (msg says why on error); the
 * kernel a copy launches and its trace buffer address (0: none); at device free, the trace
 * written out. */
int gpu_viz_load(mori_client *c, const struct gpu_api *g, struct gpu_dev *d, char *msg, size_t len);
gpu_function gpu_viz_kernel(const struct gpu_dev *d, uint64_t *buf);
void gpu_viz_free(const struct gpu_api *g, struct gpu_dev *d);
/* Grid for a batch of total_chunks (what gpu_xfer launches with). */
unsigned gpu_copy_grid(uint64_t total_chunks, int sm_count);
/* Chunk size (log2 bytes) gpu_xfer picks for `total` bytes on sm_count SMs. */
uint32_t gpu_copy_chunk_shift(uint64_t total, int sm_count);
#endif
