/* Mapping another process's GPU allocation into this one: what libmori does for a same-node
 * peer's VRAM region and what morid does to stage a client's VRAM for a cross-node transfer.
 * Legacy IPC handles (cudaMalloc memory) open with cuIpcOpenMemHandle; VMM allocations
 * (cuMemCreate, as PyTorch's expandable segments) are imported from their POSIX fd, mapped
 * into a reserved range and made accessible from the device; a range over several of them
 * (gpu_span_*) gets one reserved range with each allocation mapped at its offset. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "mori.h"

void gpu_vmm_prop(struct gpu_mem_prop *prop, int ordinal)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = GPU_MEM_ALLOCATION_TYPE_PINNED;
	prop->requested_handle_types = GPU_MEM_HANDLE_TYPE_POSIX_FD;
	prop->location.type = GPU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = ordinal;
}

static int import_legacy(const struct gpu_api *g, const void *blob, size_t blob_len, gpu_dptr *base,
			 size_t *size, char *msg, size_t len)
{
	struct gpu_ipc_handle h;
	if (blob_len != sizeof(h)) {
		snprintf(msg, len, "IPC handle of %zu bytes", blob_len);
		return MORI_EPROTO;
	}
	memcpy(&h, blob, sizeof(h));
	gpu_dptr p = 0;
	int rc = gpu_err(g->ipc_open_mem_handle(&p, h, GPU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle",
			 msg, len);
	if (rc) {
		size_t n = strlen(msg);
		snprintf(msg + n, len - n, " (the owner may have freed it)");
		return rc == MORI_EINVAL ? MORI_ESTALE : rc;
	}
	gpu_dptr b = 0;
	size_t s = 0;
	if (g->mem_get_address_range(&b, &s, p) != 0 || b != p) {
		g->ipc_close_mem_handle(p);
		snprintf(msg, len, "cannot size the mapped allocation");
		return MORI_EIO;
	}
	*base = p;
	*size = s;
	return MORI_OK;
}

static int import_vmm(const struct gpu_api *g, int ordinal, const void *blob, size_t blob_len, int fd,
		      gpu_dptr *base, size_t *size, char *msg, size_t len)
{
	struct gpu_vmm_blob b;
	if (blob_len != sizeof(b)) {
		snprintf(msg, len, "VMM blob of %zu bytes", blob_len);
		return MORI_EPROTO;
	}
	memcpy(&b, blob, sizeof(b));
	if (b.magic != GPU_VMM_MAGIC || b.version != 1 || !b.alloc_size) {
		snprintf(msg, len, "not a VMM blob");
		return MORI_EPROTO;
	}
	if (fd < 0) {
		snprintf(msg, len, "no fd for a VMM region");
		return MORI_EPROTO;
	}
	if (!g->mem_import_from_shareable_handle || !g->mem_map || !g->mem_address_reserve) {
		snprintf(msg, len, "this driver has no VMM entry points");
		return MORI_ENOTSUP;
	}
	struct gpu_mem_prop prop;
	gpu_vmm_prop(&prop, ordinal);
	size_t gran = 0;
	if (g->mem_get_allocation_granularity(&gran, &prop, GPU_MEM_ALLOC_GRANULARITY_MINIMUM) != 0 || !gran)
		gran = 2u << 20;
	size_t sz = (b.alloc_size + gran - 1) / gran * gran;
	gpu_memhandle h = 0;
	gpu_dptr va = 0;
	int rc = gpu_err(g->mem_import_from_shareable_handle(&h, (void *)(uintptr_t)fd, GPU_MEM_HANDLE_TYPE_POSIX_FD),
			 "cuMemImportFromShareableHandle", msg, len);
	if (rc)
		return rc;
	if ((rc = gpu_err(g->mem_address_reserve(&va, sz, gran, 0, 0), "cuMemAddressReserve", msg, len)))
		goto fail_release;
	if ((rc = gpu_err(g->mem_map(va, sz, 0, h, 0), "cuMemMap", msg, len)))
		goto fail_free;
	struct gpu_access_desc acc = {{GPU_MEM_LOCATION_TYPE_DEVICE, ordinal}, GPU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	if ((rc = gpu_err(g->mem_set_access(va, sz, &acc, 1), "cuMemSetAccess", msg, len)))
		goto fail_unmap;
	g->mem_release(h); /* the mapping keeps the allocation alive from here */
	*base = va;
	*size = sz;
	return MORI_OK;
fail_unmap:
	g->mem_unmap(va, sz);
fail_free:
	g->mem_address_free(va, sz);
fail_release:
	g->mem_release(h);
	return rc;
}

int gpu_import(const struct gpu_api *g, int ordinal, int type, const void *blob, size_t blob_len,
	       int fd, gpu_dptr *base, size_t *size, char *msg, size_t len)
{
	msg[0] = 0;
	if (type == GPU_HANDLE_LEGACY_IPC)
		return import_legacy(g, blob, blob_len, base, size, msg, len);
	if (type == GPU_HANDLE_POSIX_FD)
		return import_vmm(g, ordinal, blob, blob_len, fd, base, size, msg, len);
	snprintf(msg, len, "unknown GPU handle type %d", type);
	return MORI_EPROTO;
}

void gpu_unimport(const struct gpu_api *g, int type, gpu_dptr base, size_t size)
{
	if (type == GPU_HANDLE_LEGACY_IPC) {
		g->ipc_close_mem_handle(base);
	} else {
		g->mem_unmap(base, size);
		g->mem_address_free(base, size);
	}
}

/* ---- a range of several VMM allocations (GPU_HANDLE_POSIX_FDS) ---- */

int gpu_vmm_reserve(const struct gpu_api *g, int ordinal, size_t span, uint32_t n, struct gpu_vmm_range *s, char *msg,
		     size_t len)
{
	memset(s, 0, sizeof(*s));
	msg[0] = 0;
	if (!g->mem_import_from_shareable_handle || !g->mem_map || !g->mem_address_reserve || !g->mem_unmap) {
		snprintf(msg, len, "this driver has no VMM entry points");
		return MORI_ENOTSUP;
	}
	if (!n || n > GPU_SPAN_MAX_PIECES || !span) {
		snprintf(msg, len, "a span of %u pieces and %zu bytes", n, span);
		return MORI_EPROTO;
	}
	struct gpu_mem_prop prop;
	gpu_vmm_prop(&prop, ordinal);
	size_t gran = 0;
	if (g->mem_get_allocation_granularity(&gran, &prop, GPU_MEM_ALLOC_GRANULARITY_MINIMUM) != 0 || !gran)
		gran = 2u << 20;
	if (span % gran) {
		snprintf(msg, len, "a span of %zu bytes, not a multiple of the granularity (%zu)", span, gran);
		return MORI_EPROTO;
	}
	s->off = calloc(n, sizeof(*s->off));
	s->len = calloc(n, sizeof(*s->len));
	if (!s->off || !s->len) {
		free(s->off);
		free(s->len);
		s->off = s->len = NULL;
		snprintf(msg, len, "out of memory");
		return MORI_ENOMEM;
	}
	int rc = gpu_err(g->mem_address_reserve(&s->base, span, gran, 0, 0), "cuMemAddressReserve", msg, len);
	if (rc) {
		free(s->off);
		free(s->len);
		memset(s, 0, sizeof(*s));
		return rc;
	}
	s->size = span;
	s->n = n;
	s->ordinal = ordinal;
	return MORI_OK;
}

int gpu_vmm_map(const struct gpu_api *g, struct gpu_vmm_range *s, uint64_t off, uint64_t bytes, int fd, char *msg,
		 size_t len)
{
	msg[0] = 0;
	uint64_t want = s->mapped ? s->off[s->mapped - 1] + s->len[s->mapped - 1] : 0;
	if (s->mapped >= s->n || off != want || !bytes || bytes > s->size - off || fd < 0) {
		snprintf(msg, len, "piece %u of %u ([%llu, +%llu) of a %zu-byte span, fd %d) does not follow the last",
			 s->mapped, s->n, (unsigned long long)off, (unsigned long long)bytes, s->size, fd);
		return MORI_EPROTO;
	}
	gpu_memhandle h = 0;
	int rc = gpu_err(g->mem_import_from_shareable_handle(&h, (void *)(uintptr_t)fd, GPU_MEM_HANDLE_TYPE_POSIX_FD),
			 "cuMemImportFromShareableHandle", msg, len);
	if (rc)
		return rc;
	if ((rc = gpu_err(g->mem_map(s->base + off, bytes, 0, h, 0), "cuMemMap", msg, len))) {
		g->mem_release(h);
		return rc;
	}
	g->mem_release(h); /* the mapping keeps the allocation alive from here */
	s->off[s->mapped] = off;
	s->len[s->mapped] = bytes;
	s->mapped++; /* counted before access is set: gpu_vmm_free unmaps it either way */
	struct gpu_access_desc acc = {{GPU_MEM_LOCATION_TYPE_DEVICE, s->ordinal}, GPU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	return gpu_err(g->mem_set_access(s->base + off, bytes, &acc, 1), "cuMemSetAccess", msg, len);
}

int gpu_vmm_complete(const struct gpu_vmm_range *s)
{
	return s->n && s->mapped == s->n && s->off[s->n - 1] + s->len[s->n - 1] == s->size;
}

void gpu_vmm_free(const struct gpu_api *g, struct gpu_vmm_range *s)
{
	for (uint32_t i = 0; i < s->mapped; i++)
		g->mem_unmap(s->base + s->off[i], s->len[i]);
	if (s->base)
		g->mem_address_free(s->base, s->size);
	free(s->off);
	free(s->len);
	memset(s, 0, sizeof(*s));
}
