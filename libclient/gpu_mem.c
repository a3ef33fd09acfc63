/* libmori GPU memory: registration of device memory (cudaMalloc memory by the legacy IPC handle
 * of its allocation base plus the offset of the range; VMM memory by a POSIX fd of its physical
 * allocation, passed to morid with SCM_RIGHTS; a range over several VMM allocations by one fd
 * each, gpu_span.c), mapping of peers' regions (once per allocation, cached), and pinning of
 * host regions that GPU copies touch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_int.h"
#include "log.h"

int gpu_ptr_is_device(const void *ptr)
{
	/* A process that has not loaded the runtime holds no device memory; don't load it (and
	 * pay for cuInit) just to ask. */
	if (!gpu_runtime_loaded())
		return MORI_ENOGPU;
	const struct gpu_api *g = gpu_api();
	if (!g)
		return MORI_ENOGPU;
	unsigned type = 0;
	if (g->pointer_get_attribute(&type, GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, (gpu_dptr)(uintptr_t)ptr) != 0)
		return 0; /* unknown to the driver: plain host memory */
	return type == GPU_MEMORYTYPE_DEVICE;
}

/* ---- registration ---- */

static int attr_u64(const struct gpu_api *g, int attr, gpu_dptr p, uint64_t *v)
{
	*v = 0;
	return g->pointer_get_attribute(v, attr, p);
}

static int register_legacy(mori_client *c, const struct gpu_api *g, gpu_dptr p, size_t len,
			   Mori__MemRegister *req, uint8_t *buf, size_t cap)
{
	char msg[200];
	gpu_dptr base = 0;
	size_t size = 0;
	int rc = gpu_err(g->mem_get_address_range(&base, &size, p), "cuMemGetAddressRange", msg, sizeof(msg));
	if (rc)
		return set_error(c, rc, "register VRAM %#llx: %s", (unsigned long long)p, msg);
	if (p + len < p || p + len > base + size)
		return set_error(c, MORI_ERANGE,
				 "register VRAM: [%#llx, +%zu) runs past the end of its allocation [%#llx, +%zu)",
				 (unsigned long long)p, len, (unsigned long long)base, size);
	if (cap < sizeof(struct gpu_ipc_handle))
		return set_error(c, MORI_EINVAL, "register VRAM: IPC buffer of %zu bytes", cap);
	struct gpu_ipc_handle h;
	rc = gpu_err(g->ipc_get_mem_handle(&h, base), "cuIpcGetMemHandle", msg, sizeof(msg));
	if (rc)
		return set_error(c, rc, "register VRAM %#llx: %s", (unsigned long long)p, msg);
	/* The handle names the whole allocation; the region is at an offset inside it. */
	memcpy(buf, &h, sizeof(h));
	req->gpu_handle_type = GPU_HANDLE_LEGACY_IPC;
	req->gpu_ipc.data = buf;
	req->gpu_ipc.len = sizeof(h);
	req->fd_offset = p - base;
	return MORI_OK;
}

static int register_vmm(mori_client *c, const struct gpu_api *g, int ordinal, gpu_dptr p, size_t len,
			Mori__MemRegister *req, uint8_t *buf, size_t cap, int *fd_out)
{
	char msg[200];
	if (!g->mem_retain_allocation_handle || !g->mem_export_to_shareable_handle || !g->mem_release)
		return set_error(c, MORI_ENOTSUP, "register VRAM: this driver has no VMM entry points");
	gpu_memhandle h = 0;
	if (g->mem_retain_allocation_handle(&h, (void *)(uintptr_t)p) != 0)
		return set_error(c, MORI_ENOTSUP,
				 "register VRAM %#llx: device memory that is neither cudaMalloc memory (legacy IPC) nor "
				 "a VMM allocation (cuMemCreate), e.g. a stream-ordered pool (cudaMallocAsync): it "
				 "cannot be shared", (unsigned long long)p);
	uint64_t mbase = 0, msize = 0, types = 0;
	if (attr_u64(g, GPU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, p, &mbase) != 0 ||
	    attr_u64(g, GPU_POINTER_ATTRIBUTE_MAPPING_SIZE, p, &msize) != 0 || !msize) {
		gpu_dptr b = 0;
		size_t s = 0;
		g->mem_get_address_range(&b, &s, p);
		mbase = b;
		msize = s;
	}
	int rc = MORI_OK;
	int fd = -1;
	if (attr_u64(g, GPU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p, &types) == 0 &&
	    !(types & GPU_MEM_HANDLE_TYPE_POSIX_FD)) {
		rc = set_error(c, MORI_ENOTSUP,
			       "register VRAM %#llx: the VMM allocation was created without POSIX fd handles "
			       "(requestedHandleTypes lacks CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)",
			       (unsigned long long)p);
		goto out;
	}
	if (!msize || p + len < p) {
		rc = set_error(c, msize ? MORI_ERANGE : MORI_ENOTSUP, "register VRAM: [%#llx, +%zu): %s", (unsigned long long)p, len,
			       msize ? "the range wraps" : "the driver gives no size for its VMM allocation");
		goto out;
	}
	if (p + len > mbase + msize) { /* several allocations mapped back to back (gpu_span.c) */
		rc = gpu_span_register(c, g, ordinal, p, len, req, buf, cap);
		goto out;
	}
	if (cap < sizeof(struct gpu_vmm_blob)) {
		rc = set_error(c, MORI_EINVAL, "register VRAM: IPC buffer of %zu bytes", cap);
		goto out;
	}
	rc = gpu_err(g->mem_export_to_shareable_handle(&fd, h, GPU_MEM_HANDLE_TYPE_POSIX_FD, 0),
		     "cuMemExportToShareableHandle", msg, sizeof(msg));
	if (rc) {
		rc = set_error(c, rc, "register VRAM %#llx: %s", (unsigned long long)p, msg);
		goto out;
	}
	struct gpu_vmm_blob b = {GPU_VMM_MAGIC, 1, msize, mbase};
	memcpy(buf, &b, sizeof(b));
	req->gpu_handle_type = GPU_HANDLE_POSIX_FD;
	req->gpu_ipc.data = buf;
	req->gpu_ipc.len = sizeof(b);
	req->fd_offset = p - mbase;
	*fd_out = fd; /* the caller sends it to morid, then closes it */
out:
	g->mem_release(h); /* drops only the reference the retain took */
	return rc;
}

int gpu_mem_register(mori_client *c, mori_mem *m, void *ptr, size_t len, Mori__MemRegister *req,
		     uint8_t *ipc_buf, size_t ipc_cap, int *fd_out)
{
	*fd_out = -1;
	struct gpu_ctx *x;
	int rc = gpu_ctx_get(c, &x);
	if (rc)
		return rc;
	const struct gpu_api *g = x->g;
	gpu_dptr p = (gpu_dptr)(uintptr_t)ptr;
	unsigned type = 0, managed = 0, legacy = 0;
	int ordinal = -1;
	if (g->pointer_get_attribute(&type, GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != 0)
		return set_error(c, MORI_EINVAL, "register VRAM: %p is not GPU memory (host memory, or freed)", ptr);
	if (type != GPU_MEMORYTYPE_DEVICE)
		return set_error(c, MORI_EINVAL, "register VRAM: %p is host memory (pinned), registered as VRAM", ptr);
	if (g->pointer_get_attribute(&managed, GPU_POINTER_ATTRIBUTE_IS_MANAGED, p) == 0 && managed)
		return set_error(c, MORI_ENOTSUP, "register VRAM: %p is managed (unified) memory, which cannot be shared", ptr);
	if (g->pointer_get_attribute(&ordinal, GPU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != 0 || ordinal < 0)
		return set_error(c, MORI_EINVAL, "register VRAM: no device ordinal for %p", ptr);
	struct gpu_dev *d;
	if ((rc = gpu_dev_get(c, x, ordinal, &d)))
		return rc;
	if ((rc = gpu_err(gpu_push(g, d), "push context", NULL, 0)))
		return set_error(c, rc, "register VRAM: cannot make GPU %d's context current", ordinal);
	if (g->pointer_get_attribute(&legacy, GPU_POINTER_ATTRIBUTE_IS_LEGACY_IPC_CAPABLE, p) == 0 && legacy)
		rc = register_legacy(c, g, p, len, req, ipc_buf, ipc_cap);
	else
		rc = register_vmm(c, g, ordinal, p, len, req, ipc_buf, ipc_cap, fd_out);
	gpu_pop(g);
	if (rc)
		return rc;
	req->gpu_device = ordinal;
	m->dptr = p;
	m->gpu_device = ordinal;
	m->gpu_priv = NULL; /* local: nothing mapped */
	return MORI_OK;
}

/* ---- allocation (mori_mem_alloc with MORI_MEM_VRAM) ---- */

/* Device memory libmori allocated for a local region (its gpu_priv; owns_alloc is set). */
struct gpu_alloc {
	struct gpu_dev *d;
	gpu_dptr base;
	size_t size;             /* bytes allocated (VMM: rounded up to the granularity) */
	int vmm;                 /* 1: cuMemCreate + map; 0: cuMemAlloc */
	gpu_memhandle h;
};

/* The device mori_mem_alloc uses: $MORI_GPU_DEVICE, else 0. */
static int alloc_ordinal(mori_client *c, const struct gpu_api *g, int *out)
{
	const char *e = getenv("MORI_GPU_DEVICE");
	long v = 0;
	if (e && *e) {
		char *end;
		v = strtol(e, &end, 10);
		if (*end || v < 0 || v >= g->device_count)
			return set_error(c, MORI_EINVAL, "MORI_GPU_DEVICE=%s: this process sees %d device(s) (0..%d)", e,
					 g->device_count, g->device_count - 1);
	}
	*out = (int)v;
	return MORI_OK;
}

/* VMM memory exportable as a POSIX fd. Preferred: morid holds the fd, so the physical memory
 * stays alive while any peer still maps it, even past our free. GPU_ERROR_NOT_SUPPORTED when
 * the driver or device has no VMM or no POSIX fd handles (the caller then uses cuMemAlloc). */
static int alloc_vmm(const struct gpu_api *g, struct gpu_dev *d, size_t size, struct gpu_alloc *a)
{
	int vmm = 0, posix = 0;
	if (!g->mem_create || !g->mem_address_reserve || !g->mem_map || !g->mem_set_access ||
	    !g->mem_get_allocation_granularity || !g->mem_export_to_shareable_handle || !g->device_get_attribute ||
	    g->device_get_attribute(&vmm, GPU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d->dev) || !vmm ||
	    g->device_get_attribute(&posix, GPU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FD_SUPPORTED, d->dev) || !posix)
		return GPU_ERROR_NOT_SUPPORTED;
	struct gpu_mem_prop prop;
	gpu_vmm_prop(&prop, d->ordinal);
	size_t gran = 0;
	int r = g->mem_get_allocation_granularity(&gran, &prop, GPU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r)
		return r;
	if (!gran)
		gran = 2u << 20;
	if (size > SIZE_MAX - gran)
		return GPU_ERROR_OUT_OF_MEMORY;
	a->size = (size + gran - 1) / gran * gran;
	gpu_dptr va = 0;
	struct gpu_access_desc acc = {{GPU_MEM_LOCATION_TYPE_DEVICE, d->ordinal}, GPU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	if ((r = g->mem_create(&a->h, a->size, &prop, 0)))
		return r;
	if ((r = g->mem_address_reserve(&va, a->size, gran, 0, 0)))
		goto release;
	if ((r = g->mem_map(va, a->size, 0, a->h, 0)))
		goto unreserve;
	if ((r = g->mem_set_access(va, a->size, &acc, 1)))
		goto unmap;
	a->base = va;
	a->vmm = 1;
	return GPU_SUCCESS;
unmap:
	g->mem_unmap(va, a->size);
unreserve:
	g->mem_address_free(va, a->size);
release:
	g->mem_release(a->h);
	return r;
}

static void alloc_free(const struct gpu_api *g, struct gpu_alloc *a)
{
	gpu_dev_drain(g, a->d, GPU_UNMAP_WAIT_US); /* no copy of ours may still touch it */
	gpu_push(g, a->d);
	if (a->vmm) {
		g->mem_unmap(a->base, a->size);
		g->mem_address_free(a->base, a->size);
		g->mem_release(a->h); /* the physical memory lives on while morid or a peer holds it */
	} else {
		g->mem_free(a->base);
	}
	gpu_pop(g);
	free(a);
}

int gpu_mem_alloc(mori_client *c, mori_mem *m, size_t size, Mori__MemRegister *req, uint8_t *ipc_buf,
		  size_t ipc_cap, int *fd_out)
{
	*fd_out = -1;
	struct gpu_ctx *x;
	int rc = gpu_ctx_get(c, &x);
	if (rc)
		return rc;
	int ordinal = 0;
	if ((rc = alloc_ordinal(c, x->g, &ordinal)))
		return rc;
	return gpu_mem_alloc_on(c, m, ordinal, &size, 0, req, ipc_buf, ipc_cap, fd_out);
}

int gpu_mem_alloc_on(mori_client *c, mori_mem *m, int ordinal, size_t *sizep, int vmm_only, Mori__MemRegister *req,
		     uint8_t *ipc_buf, size_t ipc_cap, int *fd_out)
{
	*fd_out = -1;
	struct gpu_ctx *x;
	size_t size = *sizep;
	int rc = gpu_ctx_get(c, &x);
	if (rc)
		return rc;
	const struct gpu_api *g = x->g;
	struct gpu_dev *d;
	if ((rc = gpu_dev_get(c, x, ordinal, &d)))
		return rc;
	struct gpu_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return set_error(c, MORI_ENOMEM, "out of memory");
	a->d = d;
	char msg[200];
	if ((rc = gpu_err(gpu_push(g, d), "push context", msg, sizeof(msg)))) {
		free(a);
		return set_error(c, rc, "alloc VRAM on GPU %d: %s", ordinal, msg);
	}
	/* $MORI_VRAM_ALLOC=malloc forces cuMemAlloc (tests cover both paths). */
	const char *how = getenv("MORI_VRAM_ALLOC"), *what = "VMM allocation (cuMemCreate)";
	int r = how && !strcmp(how, "malloc") && !vmm_only ? GPU_ERROR_NOT_SUPPORTED : alloc_vmm(g, d, size, a);
	if (r == GPU_ERROR_NOT_SUPPORTED && vmm_only) {
		gpu_pop(g);
		free(a);
		return set_error(c, MORI_ENOTSUP, "GPU %d has no VMM allocations with POSIX fd handles (cuMemCreate), "
						  "which symmetric heaps need", ordinal);
	}
	if (r != GPU_SUCCESS && r != GPU_ERROR_OUT_OF_MEMORY && !vmm_only) { /* no usable VMM here */
		what = "cuMemAlloc";
		a->size = size;
		r = g->mem_alloc(&a->base, size);
	}
	/* Zero-filled, as host regions from mori_mem_alloc are: no earlier user's bytes leak. */
	if (r == GPU_SUCCESS && (r = g->memset_d8_async(a->base, 0, a->size, NULL)) == GPU_SUCCESS)
		r = g->stream_synchronize(NULL);
	gpu_pop(g);
	if (r != GPU_SUCCESS) {
		rc = gpu_err(r, a->base ? "zero-fill" : what, msg, sizeof(msg));
		if (a->base)
			alloc_free(g, a);
		else
			free(a);
		return set_error(c, rc, "alloc %zu bytes of VRAM on GPU %d: %s", size, ordinal, msg);
	}
	if (vmm_only)
		*sizep = size = a->size; /* the whole allocation: every PE rounds the same way */
	rc = gpu_mem_register(c, m, (void *)(uintptr_t)a->base, size, req, ipc_buf, ipc_cap, fd_out);
	if (rc) {
		alloc_free(g, a);
		return rc;
	}
	m->kind = MORI_MEM_VRAM;
	m->local = 1;
	m->owns_alloc = 1;
	m->gpu_priv = a; /* gpu_mem_close frees it, also when the daemon refuses the region */
	return MORI_OK;
}

/* ---- peers' regions ---- */

static int map_import(mori_client *c, const struct gpu_api *g, struct gpu_map *mp, const Mori__MemOpenReply *o,
		      const int *fds, int nfds)
{
	char msg[240];
	int fd = nfds > 0 ? fds[0] : -1;
	if (mp->type == GPU_HANDLE_POSIX_FDS)
		return gpu_span_import(c, g, mp, o, fds, nfds);
	if (mp->type == GPU_HANDLE_LEGACY_IPC && o->gpu_ipc.len == sizeof(mp->ipc))
		memcpy(&mp->ipc, o->gpu_ipc.data, sizeof(mp->ipc));
	int rc = gpu_import(g, mp->d->ordinal, mp->type, o->gpu_ipc.data, o->gpu_ipc.len, fd, &mp->base, &mp->size, msg,
			    sizeof(msg));
	if (rc)
		return set_error(c, rc, "open VRAM region %llu: %s", (unsigned long long)o->handle->region_id, msg);
	return MORI_OK;
}

static int same_map(const struct gpu_map *mp, int type, const Mori__MemOpenReply *o)
{
	if (mp->type != type)
		return 0;
	if (type == GPU_HANDLE_LEGACY_IPC) /* one mapping per allocation: sub-ranges share it */
		return o->gpu_ipc.len == sizeof(mp->ipc) && memcmp(&mp->ipc, o->gpu_ipc.data, sizeof(mp->ipc)) == 0;
	return mp->epoch == o->handle->epoch && mp->region_id == o->handle->region_id &&
	       mp->generation == o->handle->generation;
}

int gpu_mem_open(mori_client *c, mori_mem *m, const Mori__MemOpenReply *o, int *fds, int nfds)
{
	struct gpu_ctx *x;
	int rc = gpu_ctx_get(c, &x);
	if (rc)
		goto out;
	const struct gpu_api *g = x->g;
	int type = (int)o->gpu_handle_type;
	if (!o->handle || (type != GPU_HANDLE_LEGACY_IPC && type != GPU_HANDLE_POSIX_FD && type != GPU_HANDLE_POSIX_FDS)) {
		rc = set_error(c, MORI_EPROTO, "open VRAM region: unknown GPU handle type %d", type);
		goto out;
	}
	if (o->owner_pid == getpid() && o->owner_addr) {
		/* Our own region (loopback): the driver refuses to import its own handles, and the
		 * bytes are already here. */
		m->dptr = o->owner_addr;
		m->gpu_device = o->gpu_device;
		m->gpu_priv = NULL;
		goto out;
	}
	/* Map on the owner's device ordinal when this process has it (same CUDA_VISIBLE_DEVICES),
	 * else on device 0; legacy IPC enables peer access lazily either way. */
	int ordinal = o->gpu_device >= 0 && o->gpu_device < g->device_count ? o->gpu_device : 0;
	struct gpu_dev *d;
	if ((rc = gpu_dev_get(c, x, ordinal, &d)))
		goto out;
	pthread_mutex_lock(&x->lock);
	struct gpu_map *mp;
	for (mp = x->maps; mp; mp = mp->next)
		if (mp->d == d && same_map(mp, type, o))
			break;
	if (mp) {
		mp->refs++;
	} else if (!(mp = calloc(1, sizeof(*mp)))) {
		rc = set_error(c, MORI_ENOMEM, "out of memory");
	} else {
		mp->type = type;
		mp->d = d;
		mp->epoch = o->handle->epoch;
		mp->region_id = o->handle->region_id;
		mp->generation = o->handle->generation;
		mp->refs = 1;
		if ((rc = gpu_err(gpu_push(g, d), "push context", NULL, 0)) == MORI_OK) {
			rc = map_import(c, g, mp, o, fds, nfds);
			gpu_pop(g);
		} else {
			rc = set_error(c, rc, "open VRAM region: cannot make GPU %d's context current", ordinal);
		}
		if (rc) {
			free(mp);
			mp = NULL;
		} else {
			mp->next = x->maps;
			x->maps = mp;
		}
	}
	if (mp && (o->fd_offset + m->size < o->fd_offset || o->fd_offset + m->size > mp->size)) {
		rc = set_error(c, MORI_EPROTO, "open VRAM region %llu: [%llu, +%llu) is outside its %zu-byte allocation",
			       (unsigned long long)o->handle->region_id, (unsigned long long)o->fd_offset,
			       (unsigned long long)m->size, mp->size);
		if (--mp->refs == 0) {
			for (struct gpu_map **pp = &x->maps; *pp; pp = &(*pp)->next)
				if (*pp == mp) {
					*pp = mp->next;
					break;
				}
			gpu_map_release(g, mp);
		}
		mp = NULL;
	}
	pthread_mutex_unlock(&x->lock);
	if (mp) {
		m->dptr = mp->base + o->fd_offset;
		m->gpu_device = ordinal;
		m->gpu_priv = mp;
	}
out:
	for (int i = 0; i < nfds; i++)
		close(fds[i]); /* imported (or refused): the mapping does not need them */
	return rc;
}

/* ---- host regions the GPU touches ---- */

int gpu_host_dptr(mori_client *c, struct gpu_ctx *x, struct gpu_dev *d, mori_mem *m, gpu_dptr *out)
{
	const struct gpu_api *g = x->g;
	if (!m->ptr)
		return set_error(c, MORI_ENOTSUP,
				 "host region %llu has no mapping in this process (cross-memory attach): GPU copies "
				 "need a shared-file region (mori_mem_alloc, or memfd/tmpfs memory)",
				 (unsigned long long)m->region_id);
	pthread_mutex_lock(&x->lock);
	struct gpu_pin *pin = m->gpu_priv;
	if (pin) {
		*out = pin->dptr;
		pthread_mutex_unlock(&x->lock);
		return MORI_OK;
	}
	char msg[200];
	int rc = MORI_ENOMEM;
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)m->ptr & ~(uintptr_t)(pg - 1);
	uintptr_t hi = ((uintptr_t)m->ptr + m->size + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
	if (!(pin = calloc(1, sizeof(*pin)))) {
		snprintf(msg, sizeof(msg), "out of memory");
		goto fail;
	}
	pin->base = (void *)lo;
	pin->len = hi - lo;
	if ((rc = gpu_err(gpu_push(g, d), "push context", msg, sizeof(msg))))
		goto fail;
	int r = g->mem_host_register(pin->base, pin->len, GPU_MEMHOSTREGISTER_PORTABLE | GPU_MEMHOSTREGISTER_DEVICEMAP);
	pin->owned = r == GPU_SUCCESS;
	if (r != GPU_SUCCESS && r != GPU_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
		rc = gpu_err(r, "cuMemHostRegister", msg, sizeof(msg));
	else
		rc = gpu_err(g->mem_host_get_device_pointer(&pin->dptr, m->ptr, 0), "cuMemHostGetDevicePointer",
			     msg, sizeof(msg));
	if (rc && pin->owned)
		g->mem_host_unregister(pin->base);
	gpu_pop(g);
	if (rc)
		goto fail;
	m->gpu_priv = pin; /* gpu_mem_close unpins */
	*out = pin->dptr;
	pthread_mutex_unlock(&x->lock);
	return MORI_OK;
fail:
	pthread_mutex_unlock(&x->lock);
	free(pin);
	return set_error(c, rc, "pin host region %llu (%llu bytes) for the GPU: %s", (unsigned long long)m->region_id,
			 (unsigned long long)m->size, msg);
}

void gpu_mem_close(mori_client *c, mori_mem *m)
{
	struct gpu_ctx *x = c ? c->gpu : NULL;
	if (!x || !m->gpu_priv)
		return;
	const struct gpu_api *g = x->g;
	pthread_mutex_lock(&x->lock);
	if (m->kind == MORI_MEM_HOST) {
		struct gpu_pin *pin = m->gpu_priv;
		if (pin->owned) {
			for (int i = 0; i < GPU_MAX_DEVICES; i++)
				if (x->devs[i])
					gpu_dev_drain(g, x->devs[i], GPU_UNMAP_WAIT_US);
			g->mem_host_unregister(pin->base);
		}
		free(pin);
	} else if (m->local && m->owns_alloc) {
		alloc_free(g, m->gpu_priv);
	} else {
		struct gpu_map *mp = m->gpu_priv;
		if (--mp->refs == 0) {
			for (struct gpu_map **pp = &x->maps; *pp; pp = &(*pp)->next)
				if (*pp == mp) {
					*pp = mp->next;
					break;
				}
			gpu_map_release(g, mp);
		}
	}
	m->gpu_priv = NULL;
	m->dptr = 0;
	pthread_mutex_unlock(&x->lock);
}
