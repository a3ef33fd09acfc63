/* libmori MORI-SHMEM on the GPU side of the host: a VRAM heap (a VMM allocation with
 * a POSIX fd handle, gpu_mem.c's, on the group's device), the device state kernels read
 * (struct mori_shmem_state in device memory, with the peers' heap addresses as this process maps
 * them and the control page registered with the driver), mori_shmem_module_init, copies and
 * zeroing for VRAM heaps, and the stream operations (the device API's kernels). Without a GPU
 * runtime every entry says MORI_ENOGPU; nothing here runs for HOST heaps but mori_shmem_state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/mori_shmem_kernels.h"
#include "gpu_int.h"
#include "shmem_int.h"

#define STATE_GLOBAL "mori_shmem_state_ptr" /* the device API's module global (include/mori/device/shmem.cuh) */

struct shm_gpu {
	struct gpu_dev *d;
	mori_mem ctrl_mem;        /* the control page as a host region pinned for the GPU */
	gpu_dptr ctrl_d;          /* its device address */
	gpu_dptr buf;             /* state, then peer_base[n_pes], node_team[node_pes + 1], peer_scope[n_pes] */
	size_t buf_len;
	gpu_function barrier_fn, quiet_fn; /* kernels of libmori's image, looked up once */
};

/* The identity of d as a heap's GPU_ID word holds it (device_host/shmem_layout.h): its PCI bus id,
 * the same in every process whatever its device numbering; all zero when the driver cannot say
 * (every peer is then ordered at system scope). */
static void gpu_id(const struct gpu_api *api, const struct gpu_dev *d, char id[MORI_SHMEM_GPU_ID_BYTES])
{
	memset(id, 0, MORI_SHMEM_GPU_ID_BYTES);
	if (!api->device_get_pci_bus_id || api->device_get_pci_bus_id(id, MORI_SHMEM_GPU_ID_BYTES - 1, d->dev))
		memset(id, 0, MORI_SHMEM_GPU_ID_BYTES);
}

/* Write this GPU's identity into the new heap's GPU_ID (the heap is zero-filled already). */
static int heap_write_gpu_id(mori_client *c, int ordinal, mori_mem *m)
{
	struct gpu_ctx *x;
	struct gpu_dev *d;
	int rc = gpu_ctx_get(c, &x);
	if (rc == MORI_OK)
		rc = gpu_dev_get(c, x, ordinal, &d);
	if (rc)
		return rc;
	char id[MORI_SHMEM_GPU_ID_BYTES], msg[200];
	gpu_id(x->g, d, id);
	if ((rc = gpu_err(gpu_push(x->g, d), "push context", msg, sizeof(msg))) == MORI_OK) {
		rc = gpu_err(x->g->memcpy_htod_async(m->dptr + MORI_SHMEM_OFF_GPU_ID, id, sizeof(id), NULL), "GPU id", msg,
			     sizeof(msg));
		if (rc == MORI_OK)
			rc = gpu_err(x->g->stream_synchronize(NULL), "GPU id", msg, sizeof(msg));
		gpu_pop(x->g);
	}
	return rc ? set_error(c, rc, "VRAM heap: writing its GPU id: %s", msg) : MORI_OK;
}

int shmem_gpu_heap_alloc(mori_client *c, int ordinal, uint64_t *size, mori_mem **own, int *fd, void *blob,
			 size_t *bloblen)
{
	*own = NULL;
	*fd = -1;
	mori_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return set_error(c, MORI_ENOMEM, "out of memory");
	Mori__MemRegister mr = MORI__MEM_REGISTER__INIT;
	uint8_t ipc[128];
	size_t sz = (size_t)*size;
	int rc = gpu_mem_alloc_on(c, m, ordinal, &sz, 1, &mr, ipc, sizeof(ipc), fd), made = rc == MORI_OK;
	if (rc == MORI_OK && (mr.gpu_handle_type != GPU_HANDLE_POSIX_FD || *fd < 0 || mr.gpu_ipc.len > 64))
		rc = set_error(c, MORI_ENOTSUP, "VRAM heap: the allocation has no POSIX fd handle");
	else if (rc == MORI_OK)
		rc = heap_write_gpu_id(c, ordinal, m);
	if (rc && made) {
		gpu_mem_close(c, m);
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
	}
	if (rc) {
		free(m);
		return rc;
	}
	memcpy(blob, mr.gpu_ipc.data, mr.gpu_ipc.len);
	*bloblen = mr.gpu_ipc.len;
	m->c = c;
	m->size = sz;
	*size = sz;
	*own = m;
	return MORI_OK;
}

/* The context of the group's device pushed: 0, or an error (the caller pops on success only). */
static int push(mori_group *g, const struct gpu_api **api, struct gpu_dev **dev)
{
	struct gpu_ctx *x;
	int rc = gpu_ctx_get(g->c, &x);
	if (rc == MORI_OK)
		rc = gpu_dev_get(g->c, x, g->gpu_device < 0 ? 0 : g->gpu_device, dev);
	if (rc)
		return rc;
	*api = x->g;
	if ((rc = gpu_err(gpu_push(x->g, *dev), "push context", NULL, 0)))
		return set_error(g->c, rc, "group '%s': cannot make GPU %d's context current", g->name, g->gpu_device);
	return MORI_OK;
}

/* The ordering scope towards each PE (mori_shmem_state.peer_scope, .wait_scope), decided here once:
 * GPU where the PE's heap is mapped here and its GPU_ID is this GPU's, else SYS. Called with
 * the group's context current. */
static int peer_scopes(mori_group *g, const struct gpu_api *api, const struct gpu_dev *d, int32_t *scope,
		       int32_t *wait_scope, char *msg, size_t cap)
{
	char mine[MORI_SHMEM_GPU_ID_BYTES], theirs[MORI_SHMEM_GPU_ID_BYTES];
	gpu_id(api, d, mine);
	int all = 1;
	for (int i = 0; i < g->n_pes; i++) {
		scope[i] = MORI_SHMEM_SCOPE_SYS;
		if (i == g->my_pe) {
			scope[i] = MORI_SHMEM_SCOPE_GPU;
			continue;
		}
		if (mine[0] && g->peers[i].local && g->state_peer_base[i]) {
			int rc = gpu_err(api->memcpy_dtoh_async(theirs, g->state_peer_base[i] + MORI_SHMEM_OFF_GPU_ID,
								 sizeof(theirs), NULL), "read a peer's GPU id", msg, cap);
			if (rc == MORI_OK)
				rc = gpu_err(api->stream_synchronize(NULL), "read a peer's GPU id", msg, cap);
			if (rc)
				return rc;
			theirs[sizeof(theirs) - 1] = 0;
			if (!strcmp(mine, theirs))
				scope[i] = MORI_SHMEM_SCOPE_GPU;
		}
		all &= scope[i] == MORI_SHMEM_SCOPE_GPU;
	}
	*wait_scope = all ? MORI_SHMEM_SCOPE_GPU : MORI_SHMEM_SCOPE_SYS;
	return MORI_OK;
}

int shmem_gpu_state(mori_group *g)
{
	struct shm_gpu *s = calloc(1, sizeof(*s));
	if (!s)
		return set_error(g->c, MORI_ENOMEM, "out of memory");
	g->gpu = s;
	struct gpu_ctx *x;
	int rc = gpu_ctx_get(g->c, &x);
	if (rc == MORI_OK)
		rc = gpu_dev_get(g->c, x, g->gpu_device, &s->d);
	if (rc)
		return rc;
	/* the control page (abort word, proxy ring) as the GPU reaches it */
	s->ctrl_mem.c = g->c;
	s->ctrl_mem.kind = MORI_MEM_HOST;
	s->ctrl_mem.ptr = (uint8_t *)g->ctrl;
	s->ctrl_mem.size = g->ctrl_len;
	if ((rc = gpu_host_dptr(g->c, x, s->d, &s->ctrl_mem, &s->ctrl_d)))
		return rc;
	size_t off_peer = (sizeof(struct mori_shmem_state) + 63) & ~(size_t)63;
	size_t off_team = off_peer + sizeof(uint64_t) * (size_t)g->n_pes;
	size_t off_scope = off_team + sizeof(int32_t) * (size_t)(g->team_n + 1);
	s->buf_len = off_scope + sizeof(int32_t) * (size_t)g->n_pes;
	uint8_t *img = calloc(1, s->buf_len);
	if (!img)
		return set_error(g->c, MORI_ENOMEM, "out of memory");
	const struct gpu_api *api = x->g;
	char msg[200];
	if ((rc = gpu_err(gpu_push(api, s->d), "push context", msg, sizeof(msg))) == MORI_OK) {
		rc = gpu_err(api->mem_alloc(&s->buf, s->buf_len), "cuMemAlloc", msg, sizeof(msg));
		if (rc == MORI_OK)
			rc = peer_scopes(g, api, s->d, (int32_t *)(img + off_scope), &g->state.wait_scope, msg, sizeof(msg));
		if (rc == MORI_OK) {
			struct mori_shmem_state st = g->state;
			st.peer_base = (uint64_t *)(uintptr_t)(s->buf + off_peer);
			st.node_team = (int32_t *)(uintptr_t)(s->buf + off_team);
			st.peer_scope = (int32_t *)(uintptr_t)(s->buf + off_scope);
			st.ctrl = (struct mori_shmem_ctrl *)(uintptr_t)s->ctrl_d;
			st.ring = (struct mori_shmem_preq *)(uintptr_t)(s->ctrl_d + MORI_SHMEM_CTRL_BYTES);
			memcpy(img, &st, sizeof(st));
			memcpy(img + off_peer, g->state_peer_base, sizeof(uint64_t) * (size_t)g->n_pes);
			memcpy(img + off_team, g->state_team, sizeof(int32_t) * (size_t)g->team_n);
			rc = gpu_err(api->memcpy_htod_async(s->buf, img, s->buf_len, NULL), "upload the state", msg, sizeof(msg));
			if (rc == MORI_OK)
				rc = gpu_err(api->stream_synchronize(NULL), "upload the state", msg, sizeof(msg));
		}
		gpu_pop(api);
	}
	free(img);
	if (rc)
		return set_error(g->c, rc, "group '%s': device state: %s", g->name, msg);
	return MORI_OK;
}

void shmem_gpu_close(mori_group *g)
{
	struct shm_gpu *s = g->gpu;
	if (!s)
		return;
	struct gpu_ctx *x = g->c->gpu;
	if (x && s->buf && gpu_push(x->g, s->d) == 0) {
		x->g->mem_free(s->buf);
		gpu_pop(x->g);
	}
	if (s->ctrl_mem.gpu_priv)
		gpu_mem_close(g->c, &s->ctrl_mem); /* unpins the control page */
	free(s);
	g->gpu = NULL;
}

void *mori_shmem_state(const mori_group *g)
{
	if (!g || shmem_check(g))
		return NULL; /* a child after fork: the state is the parent's PE's */
	if (g->kind == MORI_MEM_VRAM) {
		const struct shm_gpu *s = g->gpu;
		return s ? (void *)(uintptr_t)s->buf : NULL;
	}
	return (void *)&g->state; /* HOST heaps: the host copy (no kernel can use them) */
}

int mori_shmem_module_init(const mori_group *g, void *module)
{
	if (!g || !module)
		return set_error(g ? g->c : NULL, MORI_EINVAL, "shmem module_init: NULL argument");
	if (shmem_check(g))
		return MORI_ESTALE;
	if (g->kind != MORI_MEM_VRAM || !g->gpu)
		return set_error(g->c, MORI_ENOTSUP, "group '%s' has a host heap: kernels need a VRAM heap", g->name);
	const struct gpu_api *api;
	struct gpu_dev *d;
	int rc = push((mori_group *)g, &api, &d);
	if (rc)
		return rc;
	char msg[200];
	gpu_dptr p = 0;
	size_t bytes = 0;
	if (!api->module_get_global)
		rc = set_error(g->c, MORI_ENOTSUP, "this driver has no cuModuleGetGlobal");
	else if ((rc = gpu_err(api->module_get_global(&p, &bytes, module, STATE_GLOBAL), "cuModuleGetGlobal", msg,
			       sizeof(msg))))
		rc = set_error(g->c, rc, "shmem module_init: the module has no global %s (built without "
					 "include/mori/device/shmem.cuh?): %s", STATE_GLOBAL, msg);
	else if (bytes != sizeof(void *))
		rc = set_error(g->c, MORI_EINVAL, "shmem module_init: %s has %zu bytes, not a pointer's %zu", STATE_GLOBAL,
			       bytes, sizeof(void *));
	else {
		uint64_t v = ((const struct shm_gpu *)g->gpu)->buf;
		if ((rc = gpu_err(api->memcpy_htod_async(p, &v, sizeof(v), NULL), "set the state pointer", msg, sizeof(msg))) ||
		    (rc = gpu_err(api->stream_synchronize(NULL), "set the state pointer", msg, sizeof(msg))))
			rc = set_error(g->c, rc, "shmem module_init: %s", msg);
	}
	gpu_pop(api);
	return rc;
}

int shmem_gpu_copy(mori_group *g, void *dst, const void *src, size_t len)
{
	const struct gpu_api *api;
	struct gpu_dev *d;
	int rc = push(g, &api, &d);
	if (rc)
		return rc;
	unsigned td = 0, ts = 0;
	int ddev = api->pointer_get_attribute(&td, GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, (gpu_dptr)(uintptr_t)dst) == 0 &&
		   td == GPU_MEMORYTYPE_DEVICE;
	int sdev = api->pointer_get_attribute(&ts, GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, (gpu_dptr)(uintptr_t)src) == 0 &&
		   ts == GPU_MEMORYTYPE_DEVICE;
	int r = GPU_SUCCESS;
	if (ddev && sdev)
		r = api->memcpy_dtod_async((gpu_dptr)(uintptr_t)dst, (gpu_dptr)(uintptr_t)src, len, NULL);
	else if (ddev)
		r = api->memcpy_htod_async((gpu_dptr)(uintptr_t)dst, src, len, NULL);
	else if (sdev)
		r = api->memcpy_dtoh_async(dst, (gpu_dptr)(uintptr_t)src, len, NULL);
	else
		memmove(dst, src, len);
	if (r == GPU_SUCCESS && (ddev || sdev))
		r = api->stream_synchronize(NULL);
	gpu_pop(api);
	char msg[200];
	if ((rc = gpu_err(r, "copy", msg, sizeof(msg))))
		return set_error(g->c, rc, "group '%s': %zu-byte copy: %s", g->name, len, msg);
	return MORI_OK;
}

int shmem_gpu_zero(mori_group *g, uint64_t dptr, size_t len)
{
	const struct gpu_api *api;
	struct gpu_dev *d;
	int rc = push(g, &api, &d);
	if (rc)
		return rc;
	int r = api->memset_d8_async(dptr, 0, len, NULL);
	if (r == GPU_SUCCESS)
		r = api->stream_synchronize(NULL);
	gpu_pop(api);
	char msg[200];
	if ((rc = gpu_err(r, "zero", msg, sizeof(msg))))
		return set_error(g->c, rc, "group '%s': calloc's zeroing: %s", g->name, msg);
	return MORI_OK;
}

/* The stream operations launch the device API's kernels in libmori's image (kernels/shmem.cu,
 * kernels/mori_shmem_kernels.h) with this PE's device state as their argument: one block, on
 * the caller's stream, nothing waited for here. A wait in them ends on the abort word; the
 * outcome is then mori_shmem_status's (no rc word is passed). */
static int launch(mori_group *g, void *stream, const char *name, unsigned threads, gpu_function *cache)
{
	if (!g)
		return MORI_EINVAL;
	if (shmem_check(g))
		return MORI_ESTALE;
	struct shm_gpu *s = g->gpu;
	if (g->kind != MORI_MEM_VRAM || !s)
		return set_error(g->c, MORI_ENOTSUP, "group '%s' has a host heap: stream operations need a VRAM heap",
				 g->name);
	int rc = shmem_abort_status(g);
	if (rc)
		return rc;
	gpu_function fn = NULL;
	int sm;
	if ((rc = gpu_copy_kernel(g->c, s->d->ordinal, &fn, &sm))) /* loads libmori's image on the device */
		return rc;
	const struct gpu_api *api;
	struct gpu_dev *d;
	if ((rc = push(g, &api, &d)))
		return rc;
	char msg[200];
	if (!*cache && (rc = gpu_err(api->module_get_function(cache, d->module, name), "cuModuleGetFunction", msg,
				     sizeof(msg)))) {
		gpu_pop(api);
		return set_error(g->c, rc == MORI_EINVAL ? MORI_ENOKERNEL : rc,
				 "libmori's GPU image has no kernel %s (built without kernels/shmem.cu?): %s", name, msg);
	}
	gpu_dptr st = s->buf, rcp = 0;
	void *params[] = {&st, &rcp};
	rc = gpu_err(api->launch_kernel(*cache, 1, 1, 1, threads, 1, 1, 0, stream, params, NULL), name, msg,
		     sizeof(msg));
	gpu_pop(api);
	if (rc)
		return set_error(g->c, rc, "group '%s': launch %s", g->name, msg);
	return MORI_OK;
}

int mori_shmem_barrier_on_stream(mori_group *g, void *stream)
{
	return launch(g, stream, MORI_SHMEM_BARRIER_KERNEL, MORI_SHMEM_KERNEL_THREADS,
		      g && g->gpu ? &((struct shm_gpu *)g->gpu)->barrier_fn : NULL);
}

int mori_shmem_quiet_on_stream(mori_group *g, void *stream)
{
	return launch(g, stream, MORI_SHMEM_QUIET_KERNEL, 1, g && g->gpu ? &((struct shm_gpu *)g->gpu)->quiet_fn : NULL);
}

uint64_t shmem_gpu_ctrl_dptr(const mori_group *g)
{
	const struct shm_gpu *s = g->gpu;
	return s ? (uint64_t)s->ctrl_d : 0;
}
