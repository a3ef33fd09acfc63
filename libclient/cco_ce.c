/* libmori MORI-CCO's copy-engine server: a device communicator's copy-engine queues
 * (mori/device_host/cco_layout.h) served by one thread. Kernels post (dst, src, bytes) requests
 * with the device API (mori/device/cco.cuh) and go on computing; the thread hands each to the copy
 * engines (cuMemcpyDtoDAsync on its own stream, as MORI-CCL's copy-engine forms drive them) or,
 * for a host-memory communicator, copies it itself, and advances the queue's `done` in order.
 * Requests come from kernels: each is copied out of the ring, then its addresses are checked
 * against the heaps this process maps (src in the own heap, dst in an LSA peer's); one that
 * fails is skipped with the queue's error word set, and still counted done. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cco_int.h"
#include "gpu_int.h"

struct cco_ce {
	mori_group *g;
	int n;
	uint32_t entries;
	uint8_t *buf;                 /* ctrl[n], then ring[n][entries] */
	size_t buf_len;
	struct mori_cco_ce_ctrl *ctrl;
	struct mori_cco_ce_req *ring;
	mori_mem pin;                 /* VRAM: buf pinned for the GPU */
	const struct gpu_api *api;
	struct gpu_dev *dev;
	gpu_stream stream;
	pthread_t thread;
	int started;
	volatile int stop;
};

/* Whether [a, a + len) lies in the heap of some PE of g this process maps (own: only its own). */
static int in_heap(mori_group *g, uint64_t a, uint64_t len, int own)
{
	for (int i = 0; i < g->n_pes; i++) {
		const struct gpeer *p = &g->peers[i];
		if ((own && i != g->my_pe) || !p->local || !p->base)
			continue;
		if (a >= p->base && a - p->base <= g->heap_size && len <= g->heap_size - (a - p->base))
			return 1;
	}
	return 0;
}

static int serve_one(struct cco_ce *ce, const struct mori_cco_ce_req *r)
{
	if (!in_heap(ce->g, r->src, r->bytes, 1) || !in_heap(ce->g, r->dst, r->bytes, 0))
		return MORI_ERANGE;
	if (!r->bytes)
		return MORI_OK;
	if (!ce->api) {
		memcpy((void *)(uintptr_t)r->dst, (const void *)(uintptr_t)r->src, r->bytes);
		return MORI_OK;
	}
	int e = ce->api->memcpy_dtod_async(r->dst, r->src, r->bytes, ce->stream);
	if (e == 0)
		e = ce->api->stream_synchronize(ce->stream);
	return e ? MORI_EIO : MORI_OK;
}

static void *serve(void *arg)
{
	struct cco_ce *ce = arg;
	if (ce->api && gpu_push(ce->api, ce->dev))
		ce->api = NULL, ce->stop = 1; /* no context: nothing served (create checked it already) */
	unsigned idle = 0;
	while (!ce->stop) {
		int busy = 0;
		for (int q = 0; q < ce->n; q++) {
			struct mori_cco_ce_ctrl *c = &ce->ctrl[q];
			uint64_t seq = c->done;
			struct mori_cco_ce_req *slot = &ce->ring[(size_t)q * ce->entries + (seq & (ce->entries - 1))];
			if (__atomic_load_n(&slot->ready, __ATOMIC_ACQUIRE) != seq + 1)
				continue;
			struct mori_cco_ce_req r;
			memcpy(&r, (const void *)slot, sizeof(r)); /* copy, then check: the kernel may write on */
			int rc = serve_one(ce, &r);
			if (rc && !c->error)
				c->error = rc;
			/* the bytes have landed (a synchronised stream, or our own copy) before done moves */
			__atomic_store_n(&c->done, seq + 1, __ATOMIC_RELEASE);
			busy = 1;
		}
		if (busy) {
			idle = 0;
		} else {
			/* polls first (a kernel posts in bursts), then short naps */
			struct timespec ts = {0, idle++ < 1000 ? 0 : 50000};
			if (ts.tv_nsec)
				nanosleep(&ts, NULL);
		}
	}
	if (ce->api)
		gpu_pop(ce->api);
	return NULL;
}

void cco_ce_stop(struct cco_ce *ce)
{
	if (!ce)
		return;
	if (ce->started) {
		ce->stop = 1;
		pthread_join(ce->thread, NULL);
	}
	if (ce->api && ce->stream && gpu_push(ce->api, ce->dev) == 0) {
		ce->api->stream_destroy(ce->stream);
		gpu_pop(ce->api);
	}
	if (ce->pin.gpu_priv)
		gpu_mem_close(ce->g->c, &ce->pin); /* unpins buf */
	free(ce->buf);
	free(ce);
}

int cco_ce_start(mori_group *g, int n, uint32_t entries, struct cco_ce **out, uint64_t *ctrl_addr,
		 uint64_t *ring_addr)
{
	*out = NULL;
	struct cco_ce *ce = calloc(1, sizeof(*ce));
	size_t ctrl_len = sizeof(struct mori_cco_ce_ctrl) * (size_t)n;
	size_t len = (ctrl_len + sizeof(struct mori_cco_ce_req) * (size_t)n * entries + 4095) & ~(size_t)4095;
	if (!ce || !(ce->buf = aligned_alloc(4096, len))) {
		free(ce);
		return set_error(g->c, MORI_ENOMEM, "dev_comm_create: no memory for %d copy-engine queues", n);
	}
	memset(ce->buf, 0, len);
	ce->g = g;
	ce->n = n;
	ce->entries = entries;
	ce->buf_len = len;
	ce->ctrl = (struct mori_cco_ce_ctrl *)ce->buf;
	ce->ring = (struct mori_cco_ce_req *)(ce->buf + ctrl_len);
	uint64_t base = (uint64_t)(uintptr_t)ce->buf;
	int rc = MORI_OK;
	if (g->kind == MORI_MEM_VRAM) {
		struct gpu_ctx *x;
		if ((rc = gpu_ctx_get(g->c, &x)) == MORI_OK && (rc = gpu_dev_get(g->c, x, g->gpu_device, &ce->dev)) == MORI_OK) {
			ce->api = x->g;
			ce->pin.c = g->c;
			ce->pin.kind = MORI_MEM_HOST;
			ce->pin.ptr = ce->buf;
			ce->pin.size = len;
			gpu_dptr d = 0;
			if ((rc = gpu_host_dptr(g->c, x, ce->dev, &ce->pin, &d)) == MORI_OK) {
				base = d;
				char msg[200];
				if ((rc = gpu_err(gpu_push(ce->api, ce->dev), "push context", msg, sizeof(msg))) == MORI_OK) {
					rc = gpu_err(ce->api->stream_create(&ce->stream, 1 /* non-blocking */), "cuStreamCreate",
						     msg, sizeof(msg));
					gpu_pop(ce->api);
				}
				if (rc)
					set_error(g->c, rc, "dev_comm_create: copy-engine stream: %s", msg);
			}
		}
	}
	if (rc == MORI_OK && pthread_create(&ce->thread, NULL, serve, ce))
		rc = set_error(g->c, MORI_ESYS, "dev_comm_create: no thread for the copy-engine queues: %s", strerror(errno));
	ce->started = rc == MORI_OK;
	if (rc) {
		cco_ce_stop(ce);
		return rc;
	}
	*ctrl_addr = base;
	*ring_addr = base + ctrl_len;
	*out = ce;
	return MORI_OK;
}
