/* bench.h over libmori's GPU internals: a client without a session, whose only state is its
 * GPU context, and two regions that gpu_xfer copies between. */
#include "bench.h"

#include <stdlib.h>

#include "../kernels/mori_copy.h"
#include "gpu_int.h"

struct bench_gpu {
	mori_client c;            /* only its GPU state (c.gpu) is used */
	struct gpu_dev *d;
	gpu_function fn;
	gpu_function fn_viz;      /* the same kernel with MORI-VIZ trace points, or NULL */
	int sm;
	mori_mem local, remote;
	struct mori_xfer_list list;
	struct mori_xfer x;       /* the transfer in flight */
};

int bench_gpu_open(int dev, struct bench_gpu **out)
{
	struct bench_gpu *b = calloc(1, sizeof(*b));
	if (!b)
		return set_error(NULL, MORI_ENOMEM, "out of memory");
	struct gpu_ctx *x;
	int rc = gpu_ctx_get(&b->c, &x);
	if (rc == MORI_OK)
		rc = gpu_dev_get(&b->c, x, dev, &b->d);
	if (rc == MORI_OK)
		rc = gpu_copy_kernel(&b->c, dev, &b->fn, &b->sm);
	if (rc == MORI_OK) { /* optional: an image without it (older build) leaves fn_viz NULL */
		gpu_push(x->g, b->d);
		if (x->g->module_get_function(&b->fn_viz, b->d->module, MORI_COPY_KERNEL_VIZ))
			b->fn_viz = NULL;
		gpu_pop(x->g);
	}
	if (rc) {
		bench_gpu_close(b);
		return rc;
	}
	*out = b;
	return MORI_OK;
}

void bench_gpu_close(struct bench_gpu *b)
{
	if (!b)
		return;
	bench_gpu_list_free(b);
	gpu_ctx_free(&b->c);
	free(b);
}

gpu_function bench_gpu_kernel(const struct bench_gpu *b) { return b->fn; }
gpu_function bench_gpu_kernel_viz(const struct bench_gpu *b) { return b->fn_viz; }
int bench_gpu_sms(const struct bench_gpu *b) { return b->sm; }
int bench_gpu_push(struct bench_gpu *b) { return gpu_push(gpu_api(), b->d); }
void bench_gpu_pop(struct bench_gpu *b) { gpu_pop(gpu_api()); }

uint32_t bench_gpu_chunk_shift(const struct bench_gpu *b, uint64_t total)
{
	return gpu_copy_chunk_shift(total, b->sm);
}

unsigned bench_gpu_grid(const struct bench_gpu *b, uint64_t total_chunks)
{
	return gpu_copy_grid(total_chunks, b->sm);
}

void bench_gpu_regions(struct bench_gpu *b, gpu_dptr src, gpu_dptr dst, uint64_t size)
{
	int dev = b->d->ordinal;
	b->local = (mori_mem){.c = &b->c, .local = 1, .kind = MORI_MEM_VRAM, .size = size, .dptr = src, .gpu_device = dev};
	b->remote = (mori_mem){.c = &b->c, .kind = MORI_MEM_VRAM, .size = size, .dptr = dst, .gpu_device = dev};
}

static void xfer_reset(struct bench_gpu *b, int64_t timeout_us)
{
	b->x = (struct mori_xfer){.c = &b->c};
	b->x.deadline_us = mori_now_us() + (uint64_t)timeout_us;
}

int bench_gpu_write(struct bench_gpu *b, const mori_desc *descs, size_t n, int64_t timeout_us)
{
	xfer_reset(b, timeout_us);
	return gpu_xfer(&b->c, MORI_XFER_WRITE, &b->local, &b->remote, descs, n, NULL, &b->x);
}

int bench_gpu_list_prep(struct bench_gpu *b, const mori_desc *descs, size_t n)
{
	/* the list only reads descs (mori_xfer_list's field is not const: libmori owns a copy) */
	b->list = (struct mori_xfer_list){.local = &b->local, .remote = &b->remote, .descs = (mori_desc *)descs, .n = n};
	return gpu_list_prep(&b->c, &b->list);
}

int bench_gpu_list_write(struct bench_gpu *b, const uint32_t *idx, size_t n, int64_t timeout_us)
{
	xfer_reset(b, timeout_us);
	return gpu_xfer_list(&b->c, MORI_XFER_WRITE, &b->list, idx, n, NULL, &b->x);
}

void bench_gpu_list_free(struct bench_gpu *b)
{
	gpu_list_free(&b->c, &b->list);
}

int bench_gpu_poll(struct bench_gpu *b)
{
	return gpu_xfer_poll(&b->x);
}
