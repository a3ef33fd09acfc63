/* The copy service (kernels/copy_service.cu): small batches without a stream of the caller's go
 * to one resident block of the copy kernel through pinned host memory instead of a launch and
 * an event, which costs a 4 KiB copy about half its latency. The block is launched at first use
 * on a stream of its own and leaves after GPU_SERVICE_IDLE_NS without a job; the next batch
 * launches it again. All under d->lock. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/mori_copy.h"
#include "gpu_int.h"
#include "log.h"

#define GPU_SERVICE_IDLE_NS 20000000ull /* 20 ms: a burst of small copies keeps it resident */

struct gpu_service {
	struct mori_copy_service *sv; /* pinned, mapped */
	gpu_dptr sv_dev;
	gpu_stream stream;
	uint64_t posted;              /* jobs numbered so far */
	int broken;                   /* could not set up or launch: batches take the launch path */
};

static int service_launch(const struct gpu_api *g, struct gpu_dev *d)
{
	struct gpu_service *s = d->service;
	void *params[] = {&s->sv_dev};
	atomic_store_explicit((_Atomic uint32_t *)&s->sv->running, 1, memory_order_release);
	int r = g->launch_kernel(d->service_fn, 1, 1, 1, MORI_COPY_BLOCK_THREADS, 1, 1, 0, s->stream, params, NULL);
	if (r != GPU_SUCCESS) {
		atomic_store_explicit((_Atomic uint32_t *)&s->sv->running, 0, memory_order_release);
		s->broken = 1;
		mlog_warn("gpu", "GPU %d: copy service launch failed (%d): small copies use launches", d->ordinal, r);
	}
	return r;
}

static int service_init(const struct gpu_api *g, struct gpu_dev *d)
{
	struct gpu_service *s = calloc(1, sizeof(*s));
	void *h = NULL;
	if (!s)
		return -1;
	d->service = s;
	if (!d->service_fn || g->stream_create(&s->stream, GPU_STREAM_NON_BLOCKING) != GPU_SUCCESS ||
	    g->mem_host_alloc(&h, sizeof(*s->sv), GPU_MEMHOSTALLOC_PORTABLE | GPU_MEMHOSTALLOC_DEVICEMAP) != GPU_SUCCESS ||
	    g->mem_host_get_device_pointer(&s->sv_dev, h, 0) != GPU_SUCCESS) {
		if (h)
			g->mem_free_host(h);
		s->broken = 1;
		return -1;
	}
	s->sv = h;
	memset(s->sv, 0, sizeof(*s->sv));
	s->sv->idle_ns = GPU_SERVICE_IDLE_NS;
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
	if (s->broken)
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
	if (!atomic_load_explicit((_Atomic uint32_t *)&s->sv->running, memory_order_acquire) &&
	    service_launch(g, d) != GPU_SUCCESS) {
		/* no block will take it: withdraw the job (nothing reads the slot) */
		atomic_store_explicit((_Atomic uint64_t *)&j->line[0], 0, memory_order_release);
		s->posted = n - 1;
		return MORI_ENOTSUP;
	}
	*seq = n;
	return MORI_OK;
}

int gpu_service_done(const struct gpu_api *g, struct gpu_dev *d, uint64_t seq, int locked)
{
	struct gpu_service *s = d->service;
	if (atomic_load_explicit((_Atomic uint64_t *)&s->sv->done, memory_order_acquire) >= seq)
		return 1;
	/* The block left between our post and its last look (it cleared `running` first): launch
	 * it again; it starts from `done`. */
	if (!locked)
		pthread_mutex_lock(&d->lock);
	if (!atomic_load_explicit((_Atomic uint32_t *)&s->sv->running, memory_order_acquire) &&
	    atomic_load_explicit((_Atomic uint64_t *)&s->sv->done, memory_order_acquire) < seq && !s->broken) {
		gpu_push(g, d);
		service_launch(g, d);
		gpu_pop(g);
	}
	if (!locked)
		pthread_mutex_unlock(&d->lock);
	return 0;
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
