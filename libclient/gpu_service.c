/* The copy service (kernels/copy_service.cu): small batches without a stream of the caller's go
 * to one resident block of the copy kernel through pinned host memory instead of a launch and
 * an event, which costs a 4 KiB copy about half its latency. The block is launched at first use
 * on a stream of its own and leaves after MORI_GPU_SERVICE_IDLE_US (default 200 us) without a
 * job, so a device-wide synchronize of the application waits that long at most after its last
 * small copy; the next batch launches it again. MORI_GPU_SERVICE_IDLE_US=0: no service (every
 * batch launches). Under d->lock unless said otherwise. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/mori_copy.h"
#include "gpu_int.h"
#include "log.h"

#define GPU_SERVICE_IDLE_US 200
#define GPU_SERVICE_CHECK_POLLS 16 /* a pending job's poll asks the driver about the block this often */

struct gpu_service {
	struct mori_copy_service *sv; /* pinned, mapped */
	gpu_dptr sv_dev;
	gpu_stream stream;
	uint64_t posted;              /* jobs numbered so far */
	int err;                      /* a GPU error the block's launch or stream gave: jobs still
	                               * pending fail with it, new batches launch */
};

static int service_launch(const struct gpu_api *g, struct gpu_dev *d)
{
	struct gpu_service *s = d->service;
	void *params[] = {&s->sv_dev};
	atomic_store_explicit((_Atomic uint32_t *)&s->sv->running, 1, memory_order_release);
	int r = g->launch_kernel(d->service_fn, 1, 1, 1, MORI_COPY_BLOCK_THREADS, 1, 1, 0, s->stream, params, NULL);
	if (r != GPU_SUCCESS) {
		s->err = r;
		mlog_warn("gpu", "GPU %d: copy service launch failed (%d): small copies use launches", d->ordinal, r);
	}
	return r;
}

static int service_init(const struct gpu_api *g, struct gpu_dev *d)
{
	const char *e = getenv("MORI_GPU_SERVICE_IDLE_US");
	long idle = e && *e ? atol(e) : GPU_SERVICE_IDLE_US;
	struct gpu_service *s = calloc(1, sizeof(*s));
	void *h = NULL;
	if (!s)
		return -1;
	d->service = s;
	if (idle <= 0 || !d->service_fn || g->stream_create(&s->stream, GPU_STREAM_NON_BLOCKING) != GPU_SUCCESS ||
	    g->mem_host_alloc(&h, sizeof(*s->sv), GPU_MEMHOSTALLOC_PORTABLE | GPU_MEMHOSTALLOC_DEVICEMAP) != GPU_SUCCESS ||
	    g->mem_host_get_device_pointer(&s->sv_dev, h, 0) != GPU_SUCCESS) {
		if (h)
			g->mem_free_host(h);
		s->err = GPU_ERROR_NOT_SUPPORTED; /* off, or cannot be: batches launch */
		return -1;
	}
	s->sv = h;
	memset(s->sv, 0, sizeof(*s->sv));
	s->sv->idle_ns = (uint64_t)idle * 1000;
	return 0;
}

int gpu_service_post(const struct gpu_api *g, struct gpu_dev *d, const struct mori_copy_args *a, uint64_t bytes,
		     uint64_t *seq)
{
	if (bytes > MORI_COPY_SERVICE_MAX_BYTES || d->viz || a->n > MORI_COPY_INLINE || a->descs)
		return MORI_ENOTSUP;
	if (!d->service && service_init(g, d))
		return MORI_ENOTSUP;
	struct gpu_service *s = d->service;
	if (s->err)
		return MORI_ENOTSUP;
	/* The internal stream's promise: after the application's work on the legacy default
	 * stream. Only when that is idle may the batch skip it. (Transfers in flight together are
	 * not ordered with each other: include/mori.h.) */
	if (g->stream_query(NULL) != GPU_SUCCESS)
		return MORI_ENOTSUP;
	uint64_t done = atomic_load_explicit((_Atomic uint64_t *)&s->sv->done, memory_order_acquire);
	if (s->posted - done >= MORI_COPY_SERVICE_SLOTS)
		return MORI_ENOTSUP; /* slots full: the batch launches */
	uint64_t n = s->posted + 1, tag = (n & 0xffffffffu) << 32;
	struct mori_copy_job *j = &s->sv->slot[n % MORI_COPY_SERVICE_SLOTS];
	const struct mori_copy_desc *e = &a->inl[0];
	uint64_t src = (a->swap ? a->b_base + e->b_off : a->a_base + e->a_off);
	uint64_t dst = (a->swap ? a->a_base + e->a_off : a->b_base + e->b_off);
	if (a->n == 1 && (uint32_t)src != MORI_COPY_JOB_FULL) {
		/* the line alone: each word whole, in any order (the block checks all five tags) */
		uint64_t w[MORI_COPY_JOB_LINE] = {src & 0xffffffffu, src >> 32, dst & 0xffffffffu, dst >> 32, e->len};
		for (int i = 0; i < MORI_COPY_JOB_LINE; i++)
			atomic_store_explicit((_Atomic uint64_t *)&j->line[i], tag | w[i], memory_order_release);
	} else {
		j->a_base = a->a_base;
		j->b_base = a->b_base;
		j->n = a->n;
		j->swap = a->swap;
		memcpy(j->d, a->inl, a->n * sizeof(j->d[0]));
		atomic_store_explicit((_Atomic uint64_t *)&j->seq, n, memory_order_release);
		atomic_store_explicit((_Atomic uint64_t *)&j->line[0], tag | MORI_COPY_JOB_FULL, memory_order_release);
	}
	s->posted = n;
	*seq = n;
	/* the job's stores before the look at `running` (the block clears it, then looks at the
	 * slot once more: one of the two sees the other) */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit((_Atomic uint32_t *)&s->sv->running, memory_order_acquire) ||
	    service_launch(g, d) == GPU_SUCCESS)
		return MORI_OK;
	/* No new block. One that was leaving may still take the job: wait for the stream, then
	 * keep the job if it was copied, else take it back (nothing will read the slot). */
	uint64_t deadline = mori_now_us() + 100000;
	while (g->stream_query(s->stream) == GPU_ERROR_NOT_READY && mori_now_us() < deadline)
		usleep(10);
	if (g->stream_query(s->stream) == GPU_ERROR_NOT_READY ||
	    atomic_load_explicit((_Atomic uint64_t *)&s->sv->done, memory_order_acquire) >= n)
		return MORI_OK; /* a block still runs (it takes the job) or took it */
	atomic_store_explicit((_Atomic uint64_t *)&j->line[0], 0, memory_order_release);
	s->posted = n - 1;
	return MORI_ENOTSUP;
}

int gpu_service_query(const struct gpu_api *g, struct gpu_dev *d, uint64_t seq, unsigned polls, int locked)
{
	struct gpu_service *s = d->service;
	if (atomic_load_explicit((_Atomic uint64_t *)&s->sv->done, memory_order_acquire) >= seq)
		return GPU_SUCCESS;
	if ((polls + 1) % GPU_SERVICE_CHECK_POLLS)
		return GPU_ERROR_NOT_READY;
	/* Not copied yet: is a block there to copy it? The stream idle means the block left (it
	 * may have missed the job, or a relaunch failed): launch it again; an error on the stream
	 * (a fault of the context) fails the job. */
	if (!locked)
		pthread_mutex_lock(&d->lock);
	int r = g->stream_query(s->stream);
	if (r == GPU_SUCCESS && !s->err &&
	    atomic_load_explicit((_Atomic uint64_t *)&s->sv->done, memory_order_acquire) < seq) {
		gpu_push(g, d);
		service_launch(g, d);
		gpu_pop(g);
	}
	if (atomic_load_explicit((_Atomic uint64_t *)&s->sv->done, memory_order_acquire) >= seq)
		r = GPU_SUCCESS;
	else if (r == GPU_SUCCESS || r == GPU_ERROR_NOT_READY)
		r = s->err && r == GPU_SUCCESS ? s->err : GPU_ERROR_NOT_READY;
	if (!locked)
		pthread_mutex_unlock(&d->lock);
	return r;
}

uint64_t gpu_service_jobs(const struct gpu_dev *d)
{
	return d->service ? d->service->posted : 0;
}

void gpu_service_free(const struct gpu_api *g, struct gpu_dev *d, uint64_t wait_us)
{
	struct gpu_service *s = d->service;
	if (!s)
		return;
	if (s->sv) {
		atomic_store_explicit((_Atomic uint32_t *)&s->sv->stop, 1, memory_order_release);
		uint64_t deadline = mori_now_us() + wait_us;
		while (g->stream_query(s->stream) == GPU_ERROR_NOT_READY && mori_now_us() < deadline)
			usleep(50);
		if (g->stream_query(s->stream) == GPU_ERROR_NOT_READY)
			mlog_warn("gpu", "GPU %d: copy service still running after %llu us: its memory is left",
				  d->ordinal, (unsigned long long)wait_us);
		else
			g->mem_free_host(s->sv);
	}
	if (s->stream)
		g->stream_destroy(s->stream);
	free(s);
	d->service = NULL;
}
