/* MORI-VIZ for libmori's copy kernel: with MORI_VIZ_TRACE=FILE in the environment a
 * device's copies run mori_copy_batch_viz, which records each warp's batch and chunks into a
 * trace buffer in device memory; at client close the buffer is written to FILE (FILE.<ordinal>
 * for devices after the first) for `mori-viz FILE -o trace.json`. MORI_VIZ_KERNEL=1 alone runs
 * the traced kernel with tracing off (its buffer address 0), which is how the cost of having the
 * trace points compiled in is measured. Read once, when the device's kernels load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/viz_layout.h"
#include "../kernels/mori_copy.h"
#include "gpu_int.h"
#include "log.h"

#define VIZ_EVENTS_PER_WARP 256u /* per warp ring: the newest 256 events (16 B each) survive */

struct gpu_viz {
	gpu_function fn;
	gpu_dptr dev;      /* the buffer; 0: traced kernel, tracing off */
	size_t bytes;
	char path[4096];
};

int gpu_viz_load(mori_client *c, const struct gpu_api *g, struct gpu_dev *d, char *msg, size_t len)
{
	const char *path = getenv("MORI_VIZ_TRACE"), *k = getenv("MORI_VIZ_KERNEL");
	if (path && !*path)
		path = NULL;
	if (!path && !(k && !strcmp(k, "1")))
		return MORI_OK;
	struct gpu_viz *v = calloc(1, sizeof(*v));
	if (!v)
		return MORI_ENOMEM;
	char m[160];
	int rc = gpu_err(g->module_get_function(&v->fn, d->module, MORI_COPY_KERNEL_VIZ), "cuModuleGetFunction", m,
			 sizeof(m));
	if (rc) {
		snprintf(msg, len, "GPU kernel %s: %s", MORI_COPY_KERNEL_VIZ, m);
		free(v);
		return rc;
	}
	if (path) {
		/* one ring per warp the largest launch can have (gpu_copy_grid's cap); AMD's waves are
		 * 64 lanes wide */
		uint32_t wpb = MORI_COPY_BLOCK_THREADS / (g->backend == GPU_BACKEND_HIP ? 64 : 32);
		uint32_t warps = (uint32_t)(d->sm_count > 0 ? d->sm_count : 1) * MORI_COPY_BLOCKS_PER_SM * wpb;
		if (snprintf(v->path, sizeof(v->path), d->ordinal ? "%s.%d" : "%s", path, d->ordinal) >= (int)sizeof(v->path)) {
			snprintf(msg, len, "MORI_VIZ_TRACE: path too long");
			free(v);
			return MORI_EINVAL;
		}
		v->bytes = mori_viz_bytes(warps, VIZ_EVENTS_PER_WARP);
		void *h = malloc(v->bytes);
		/* CUDA's %globaltimer counts nanoseconds; HIP's wall_clock64 runs at 100 MHz */
		uint64_t hz = g->backend == GPU_BACKEND_HIP ? 100000000ull : 1000000000ull;
		if (!h || mori_viz_init(h, v->bytes, warps, VIZ_EVENTS_PER_WARP, hz, wpb, 1)) {
			free(h);
			free(v);
			return MORI_ENOMEM;
		}
		if ((rc = gpu_err(g->mem_alloc(&v->dev, v->bytes), "cuMemAlloc", m, sizeof(m))) ||
		    (rc = gpu_err(g->memcpy_htod_async(v->dev, h, v->bytes, NULL), "cuMemcpyHtoDAsync", m, sizeof(m))) ||
		    (rc = gpu_err(g->stream_synchronize(NULL), "cuStreamSynchronize", m, sizeof(m)))) {
			snprintf(msg, len, "MORI-VIZ buffer of %zu bytes on GPU %d: %s", v->bytes, d->ordinal, m);
			if (v->dev)
				g->mem_free(v->dev);
			free(h);
			free(v);
			return rc;
		}
		free(h);
		mlog_info("gpu", "GPU %d: copy kernel traced into %s (%u warps x %u events)", d->ordinal, v->path, warps,
			  VIZ_EVENTS_PER_WARP);
	}
	d->viz = v; /* the device owns it from here; gpu_viz_free */
	(void)c;
	return MORI_OK;
}

gpu_function gpu_viz_kernel(const struct gpu_dev *d, uint64_t *buf)
{
	*buf = d->viz ? d->viz->dev : 0;
	return d->viz ? d->viz->fn : d->copy_fn;
}

void gpu_viz_free(const struct gpu_api *g, struct gpu_dev *d)
{
	struct gpu_viz *v = d->viz;
	if (!v)
		return;
	d->viz = NULL;
	if (v->dev) {
		void *h = malloc(v->bytes);
		char m[160] = "out of memory";
		int rc = h ? gpu_err(g->memcpy_dtoh_async(h, v->dev, v->bytes, NULL), "cuMemcpyDtoHAsync", m, sizeof(m))
			   : MORI_ENOMEM;
		if (!rc)
			rc = gpu_err(g->stream_synchronize(NULL), "cuStreamSynchronize", m, sizeof(m));
		FILE *f = rc ? NULL : fopen(v->path, "wb");
		if (f && fwrite(h, 1, v->bytes, f) == v->bytes && fclose(f) == 0)
			mlog_info("gpu", "GPU %d: MORI-VIZ trace written to %s", d->ordinal, v->path);
		else {
			if (f)
				fclose(f);
			mlog_warn("gpu", "GPU %d: MORI-VIZ trace not written to %s: %s", d->ordinal, v->path,
				  rc ? m : "write failed");
		}
		free(h);
		g->mem_free(v->dev);
	}
	free(v);
}
