/* VRAM reached by morid for cross-node transfers over TCP. A client's VRAM region is
 * mapped into morid on its first cross-node transfer, through the same handle morid brokers to
 * same-node peers (legacy IPC handle or VMM fd, or one fd per VMM allocation of a range over several
 * mapped into one span; common/gpu_import.c), on the device ordinal the
 * owner registered it with. Bytes go between it and host buffers pinned with the driver, so
 * the copies run at the PCIe rate: the frames a data stream sends are staged in a pool of
 * pinned chunk buffers; what arrives is copied from the stream's receive buffer, pinned once.
 * A data stream's frames are staged by copies it starts (region_gpu_copy_start: one stream per
 * direction and device, so both copy engines work) and polls through a fence (stage_fence_*)
 * from the loop, which keeps serving the sockets meanwhile: a synchronous copy per 512 KiB frame
 * held morid's one loop thread for each copy, and the driver's wait spun on it (half of morid's
 * CPU in mori-bench ep --nodes 2). region_gpu_copy stays for the rest (small frames, pieces of
 * a frame read with its header, a buffer from outside the pinned pool). */
#include "gpu_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "log.h"
#include "mori.h"
#include "region/registry.h"

#define STAGE_POOL 256 /* pinned chunk buffers kept (128 MiB): 4 data streams x 8 MiB of window each way
			* wanted more than 64 (mori-bench ep --nodes 2 staged 16 % through pageable memory) */
#define STAGE_EVENTS 64 /* idle events kept per device */

struct stage_dev {
	int state; /* 0 untried, 1 ready, < 0 MORI_E* */
	gpu_context ctx;
	gpu_stream stream;
	gpu_stream xstream[2]; /* started copies: [0] to host, [1] to VRAM (two copy engines run both ways at once) */
	gpu_event idle_ev[STAGE_EVENTS];
	int nidle_ev;
};

static struct {
	const struct gpu_api *g;
	struct stage_dev dev[STAGE_DEVICES];
	void *pinned[STAGE_POOL]; /* every pinned chunk buffer made */
	int npinned;
	void *idle[STAGE_POOL];
	int nidle;
} S;

static int dev_get(int ordinal, struct stage_dev **out, char *msg, size_t len)
{
	if (!S.g && !(S.g = gpu_api())) {
		snprintf(msg, len, "no GPU in morid: %s", gpu_unavailable_reason());
		return MORI_ENOGPU;
	}
	const struct gpu_api *g = S.g;
	if (ordinal < 0 || ordinal >= g->device_count || ordinal >= STAGE_DEVICES) {
		snprintf(msg, len, "GPU %d: morid sees %d device(s) (owner and morid must see the same ordinals)",
			 ordinal, g->device_count);
		return MORI_EINVAL;
	}
	struct stage_dev *d = &S.dev[ordinal];
	if (d->state == 0) {
		gpu_device dv;
		int rc = gpu_err(g->device_get(&dv, ordinal), "cuDeviceGet", msg, len);
		if (!rc)
			rc = gpu_err(g->primary_ctx_retain(&d->ctx, dv), "cuDevicePrimaryCtxRetain", msg, len);
		if (!rc && !(rc = gpu_err(g->ctx_push_current(d->ctx), "cuCtxPushCurrent", msg, len))) {
			rc = gpu_err(g->stream_create(&d->stream, GPU_STREAM_NON_BLOCKING), "cuStreamCreate", msg, len);
			for (int k = 0; k < 2 && !rc; k++)
				rc = gpu_err(g->stream_create(&d->xstream[k], GPU_STREAM_NON_BLOCKING), "cuStreamCreate", msg, len);
			for (int k = 0; rc && k < 3; k++) { /* the device is marked failed for good: none stays */
				gpu_stream *sp = k ? &d->xstream[k - 1] : &d->stream;
				if (*sp)
					g->stream_destroy(*sp);
				*sp = NULL;
			}
			gpu_context old;
			g->ctx_pop_current(&old);
		}
		d->state = rc ? rc : 1;
		if (rc)
			return rc;
		mlog_info("peer", "GPU %d: context for staging cross-node VRAM transfers", ordinal);
	}
	if (d->state < 0) {
		snprintf(msg, len, "GPU %d: context failed earlier (%s)", ordinal, mori_strerror(d->state));
		return d->state;
	}
	*out = d;
	return MORI_OK;
}

/* A range over several VMM allocations: one span here, each piece mapped from the region's fd at
 * its offset (common/gpu_import.c), so the range is contiguous in morid too. Context current. */
static int reach_span(const struct gpu_api *g, struct region *r, char *why, size_t len)
{
	struct gpu_vmm_blob b;
	if (r->gpu_ipc_len != sizeof(b)) {
		snprintf(why, len, "VMM blob of %zu bytes", r->gpu_ipc_len);
		return MORI_EPROTO;
	}
	memcpy(&b, r->gpu_ipc, sizeof(b));
	struct gpu_vmm_range *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(why, len, "out of memory");
		return MORI_ENOMEM;
	}
	int rc = gpu_vmm_reserve(g, r->gpu_device, (size_t)b.alloc_size, r->vmm_n, s, why, len);
	for (uint32_t i = 0; !rc && i < r->vmm_n; i++)
		rc = gpu_vmm_map(g, s, r->vmm_off[i], r->vmm_len[i], r->vmm_fds[i], why, len);
	if (!rc && (!gpu_vmm_complete(s) || r->fd_offset > s->size || r->size > s->size - r->fd_offset)) {
		snprintf(why, len, "[%llu, +%llu) lies outside its %zu-byte span", (unsigned long long)r->fd_offset,
			 (unsigned long long)r->size, s->size);
		rc = MORI_EPROTO;
	}
	if (rc) {
		gpu_vmm_free(g, s);
		free(s);
		return rc;
	}
	r->gpu_range = s;
	r->gpu_map_base = s->base;
	r->gpu_map_size = s->size;
	r->gpu_addr = s->base + r->fd_offset;
	return MORI_OK;
}

int region_gpu_reach(struct region *r, char *msg, size_t len)
{
	if (r->gpu_addr)
		return MORI_OK;
	if (r->kind != MORI_MEM_VRAM) {
		snprintf(msg, len, "region %llu is not VRAM", (unsigned long long)r->id);
		return MORI_EINVAL;
	}
	if (r->dead || r->vmm_pending) {
		snprintf(msg, len, "region %llu %s", (unsigned long long)r->id, r->dead ? "deregistered" : "not registered yet");
		return MORI_ESTALE;
	}
	struct stage_dev *d = NULL;
	char why[240];
	int rc = dev_get(r->gpu_device, &d, why, sizeof(why));
	if (!rc) {
		const struct gpu_api *g = S.g;
		gpu_dptr base = 0;
		size_t size = 0;
		g->ctx_push_current(d->ctx);
		if (r->vmm_n) {
			rc = reach_span(g, r, why, sizeof(why));
			gpu_context old;
			g->ctx_pop_current(&old);
			if (!rc)
				return MORI_OK;
			snprintf(msg, len, "morid cannot map VRAM region %llu (%u VMM allocations): %s", (unsigned long long)r->id,
				 r->vmm_n, why);
			return rc;
		}
		rc = gpu_import(g, r->gpu_device, (int)r->gpu_handle_type, r->gpu_ipc, r->gpu_ipc_len, r->fd, &base, &size,
				why, sizeof(why));
		if (!rc && (r->fd_offset > size || r->size > size - r->fd_offset)) {
			gpu_unimport(g, (int)r->gpu_handle_type, base, size);
			snprintf(why, sizeof(why), "[%llu, +%llu) lies outside its %zu-byte allocation",
				 (unsigned long long)r->fd_offset, (unsigned long long)r->size, size);
			rc = MORI_EPROTO;
		}
		gpu_context old;
		g->ctx_pop_current(&old);
		if (!rc) {
			r->gpu_map_base = base;
			r->gpu_map_size = size;
			r->gpu_addr = base + r->fd_offset;
			return MORI_OK;
		}
	}
	snprintf(msg, len, "morid cannot map VRAM region %llu: %s", (unsigned long long)r->id, why);
	return rc;
}

/* The copy on r's device: on its synchronous stream and waited for, or (async) queued on the
 * stream of its direction. 0 or MORI_E*. */
static int copy_issue(struct region *r, uint64_t off, void *buf, uint64_t len, int write, int async)
{
	if (r->dead)
		return MORI_ESTALE;
	if (!r->gpu_addr || off > r->size || len > r->size - off)
		return MORI_ERANGE;
	const struct gpu_api *g = S.g;
	struct stage_dev *d = &S.dev[r->gpu_device];
	gpu_stream s = async ? d->xstream[write ? 1 : 0] : d->stream;
	if (g->ctx_push_current(d->ctx) != 0)
		return MORI_EIO;
	int rc = write ? g->memcpy_htod_async(r->gpu_addr + off, buf, len, s)
		       : g->memcpy_dtoh_async(buf, r->gpu_addr + off, len, s);
	if (!rc && !async)
		rc = g->stream_synchronize(s);
	gpu_context old;
	g->ctx_pop_current(&old);
	if (rc) {
		char msg[200];
		int code = gpu_err(rc, write ? "copy to VRAM" : "copy from VRAM", msg, sizeof(msg));
		mlog_warn("peer", "region %llu: %s", (unsigned long long)r->id, msg);
		return code;
	}
	return MORI_OK;
}

int region_gpu_copy(struct region *r, uint64_t off, void *buf, uint64_t len, int write)
{
	return copy_issue(r, off, buf, len, write, 0);
}

int region_gpu_copy_start(struct region *r, uint64_t off, void *buf, uint64_t len, int write, struct stage_fence *f)
{
	if (f->mask && f->write != write)
		return MORI_EINVAL; /* one direction a fence (its events are recorded on that stream) */
	int rc = copy_issue(r, off, buf, len, write, 1);
	if (rc)
		return rc;
	f->write = (uint8_t)write;
	f->mask |= 1u << r->gpu_device;
	f->recorded &= ~(1u << r->gpu_device); /* a copy after the event: record again */
	return MORI_OK;
}

int stage_fence_record(struct stage_fence *f)
{
	const struct gpu_api *g = S.g;
	for (int i = 0; i < STAGE_DEVICES; i++) {
		uint32_t bit = 1u << i;
		if (!(f->mask & bit) || (f->recorded & bit))
			continue;
		struct stage_dev *d = &S.dev[i];
		if (g->ctx_push_current(d->ctx) != 0)
			return MORI_EIO;
		int rc = 0;
		if (!f->ev[i]) {
			if (d->nidle_ev)
				f->ev[i] = d->idle_ev[--d->nidle_ev];
			else
				rc = g->event_create(&f->ev[i], GPU_EVENT_DISABLE_TIMING);
		}
		if (!rc)
			rc = g->event_record(f->ev[i], d->xstream[f->write]);
		gpu_context old;
		g->ctx_pop_current(&old);
		if (rc) /* the caller waits with stage_fence_drop (a stream synchronisation) */
			return MORI_EIO;
		f->recorded |= bit;
	}
	return MORI_OK;
}

/* Device i's event of f back to its pool (context current). */
static void fence_ev_put(struct stage_fence *f, int i)
{
	struct stage_dev *d = &S.dev[i];
	if (!f->ev[i])
		return;
	if (d->nidle_ev < STAGE_EVENTS)
		d->idle_ev[d->nidle_ev++] = f->ev[i];
	else
		S.g->event_destroy(f->ev[i]);
	f->ev[i] = NULL;
}

int stage_fence_poll(struct stage_fence *f)
{
	if (!f->mask)
		return 1;
	if (stage_fence_record(f) != MORI_OK) {
		stage_fence_drop(f);
		return MORI_EIO;
	}
	const struct gpu_api *g = S.g;
	for (int i = 0; i < STAGE_DEVICES; i++) {
		uint32_t bit = 1u << i;
		if (!(f->mask & bit))
			continue;
		struct stage_dev *d = &S.dev[i];
		if (g->ctx_push_current(d->ctx) != 0) {
			stage_fence_drop(f);
			return MORI_EIO;
		}
		int rc = g->event_query(f->ev[i]);
		if (rc != GPU_ERROR_NOT_READY) {
			fence_ev_put(f, i);
			f->mask &= ~bit;
			f->recorded &= ~bit;
		}
		gpu_context old;
		g->ctx_pop_current(&old);
		if (rc == GPU_ERROR_NOT_READY)
			return 0;
		if (rc) {
			char msg[200];
			gpu_err(rc, "staging copy", msg, sizeof(msg));
			mlog_warn("peer", "GPU %d: %s", i, msg);
			stage_fence_drop(f);
			return MORI_EIO;
		}
	}
	return 1;
}

void stage_fence_drop(struct stage_fence *f)
{
	const struct gpu_api *g = S.g;
	for (int i = 0; f->mask && i < STAGE_DEVICES; i++) {
		uint32_t bit = 1u << i;
		if (!(f->mask & bit))
			continue;
		struct stage_dev *d = &S.dev[i];
		if (g->ctx_push_current(d->ctx) == 0) {
			g->stream_synchronize(d->xstream[f->write]); /* whatever it returns, nothing of f runs after */
			fence_ev_put(f, i);
			gpu_context old;
			g->ctx_pop_current(&old);
		}
		f->mask &= ~bit;
		f->recorded &= ~bit;
	}
}

void region_gpu_quiesce(struct region *r)
{
	const struct gpu_api *g = S.g;
	if (!r->gpu_addr || !g)
		return;
	struct stage_dev *d = &S.dev[r->gpu_device];
	if (g->ctx_push_current(d->ctx) != 0)
		return;
	for (int k = 0; k < 2; k++)
		g->stream_synchronize(d->xstream[k]);
	gpu_context old;
	g->ctx_pop_current(&old);
}

void region_gpu_release(struct region *r)
{
	const struct gpu_api *g = S.g;
	if (!r->gpu_map_base || !g)
		return;
	struct stage_dev *d = &S.dev[r->gpu_device];
	g->ctx_push_current(d->ctx);
	if (r->gpu_range) {
		gpu_vmm_free(g, r->gpu_range);
		free(r->gpu_range);
		r->gpu_range = NULL;
	} else {
		gpu_unimport(g, (int)r->gpu_handle_type, r->gpu_map_base, r->gpu_map_size);
	}
	gpu_context old;
	g->ctx_pop_current(&old);
	r->gpu_map_base = r->gpu_map_size = r->gpu_addr = 0;
}

/* A context to pin host memory under: any device's (pinned memory is portable). */
static struct stage_dev *any_dev(void)
{
	for (int i = 0; i < STAGE_DEVICES; i++)
		if (S.dev[i].state == 1)
			return &S.dev[i];
	return NULL;
}

void *stage_get(size_t len)
{
	if (len <= STAGE_BUF_BYTES) {
		if (S.nidle)
			return S.idle[--S.nidle];
		struct stage_dev *d = any_dev();
		void *p = NULL;
		if (d && S.npinned < STAGE_POOL && S.g->ctx_push_current(d->ctx) == 0) {
			if (S.g->mem_host_alloc(&p, STAGE_BUF_BYTES, GPU_MEMHOSTALLOC_PORTABLE) != 0)
				p = NULL;
			gpu_context old;
			S.g->ctx_pop_current(&old);
			if (p) {
				S.pinned[S.npinned++] = p;
				return p;
			}
		}
	}
	return malloc(len ? len : 1);
}

int stage_pinned(const void *p)
{
	for (int i = 0; i < S.npinned; i++)
		if (S.pinned[i] == p)
			return 1;
	return 0;
}

void stage_put(void *p)
{
	if (stage_pinned(p))
		S.idle[S.nidle++] = p;
	else
		free(p);
}

int stage_pin(void *p, size_t len)
{
	struct stage_dev *d = any_dev();
	if (!d || S.g->ctx_push_current(d->ctx) != 0)
		return -1;
	int rc = S.g->mem_host_register(p, len, GPU_MEMHOSTREGISTER_PORTABLE);
	gpu_context old;
	S.g->ctx_pop_current(&old);
	return rc ? -1 : 0;
}

void stage_unpin(void *p)
{
	struct stage_dev *d = any_dev();
	if (!d || S.g->ctx_push_current(d->ctx) != 0)
		return;
	S.g->mem_host_unregister(p);
	gpu_context old;
	S.g->ctx_pop_current(&old);
}

void gpu_stage_fini(void)
{
	const struct gpu_api *g = S.g;
	if (!g)
		return;
	for (int i = 0; i < STAGE_DEVICES; i++) /* no started copy may still use a buffer freed below */
		if (S.dev[i].state == 1 && g->ctx_push_current(S.dev[i].ctx) == 0) {
			gpu_context old;
			for (int k = 0; k < 2; k++)
				g->stream_synchronize(S.dev[i].xstream[k]);
			g->ctx_pop_current(&old);
		}
	struct stage_dev *d = any_dev();
	if (d && g->ctx_push_current(d->ctx) == 0) {
		for (int i = 0; i < S.npinned; i++)
			g->mem_free_host(S.pinned[i]);
		gpu_context old;
		g->ctx_pop_current(&old);
	}
	S.npinned = S.nidle = 0;
	for (int i = 0; i < STAGE_DEVICES; i++) {
		if (S.dev[i].state == 1) {
			gpu_device dv;
			g->ctx_push_current(S.dev[i].ctx);
			while (S.dev[i].nidle_ev)
				g->event_destroy(S.dev[i].idle_ev[--S.dev[i].nidle_ev]);
			for (int k = 0; k < 2; k++)
				g->stream_destroy(S.dev[i].xstream[k]);
			g->stream_destroy(S.dev[i].stream);
			gpu_context old;
			g->ctx_pop_current(&old);
			if (g->device_get(&dv, i) == 0)
				g->primary_ctx_release(dv);
		}
		S.dev[i].state = 0;
	}
}
