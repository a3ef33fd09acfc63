/* libmori: VRAM ranges over several VMM allocations mapped back to back, as PyTorch's
 * expandable segments build them (20 MiB allocations mapped one after another into one reserved
 * range; tensors cross their boundaries). Registering such a range walks the allocations that
 * back it (a hole refuses it), exports one POSIX fd per allocation and sends them to morid in
 * batches of WIRE_MAX_FDS with each allocation's offset in the range, then commits: morid holds
 * the fds as the region's. Opening one reserves one range here and maps every allocation at its
 * offset, so the range is contiguous here too (gpu_span_* in common/gpu_import.c); pieces past
 * the open reply's first batch are fetched from morid batch by batch. At no point does this
 * process hold more than one batch of descriptors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_int.h"

#define HOLE_PROBES 65536 /* granules probed to find a hole's end (128 GiB at 2 MiB) */

static int attr_u64(const struct gpu_api *g, int attr, gpu_dptr p, uint64_t *v)
{
	*v = 0;
	return g->pointer_get_attribute(v, attr, p);
}

/* The mapping (one VMM allocation) holding address a: 0 and its start and size, or non-zero
 * where nothing is mapped at a. */
static int mapping_of(const struct gpu_api *g, gpu_dptr a, uint64_t *base, uint64_t *size)
{
	unsigned type = 0;
	*base = *size = 0;
	if (g->pointer_get_attribute(&type, GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, a) != 0 || type != GPU_MEMORYTYPE_DEVICE)
		return -1;
	if (attr_u64(g, GPU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, a, base) == 0 &&
	    attr_u64(g, GPU_POINTER_ATTRIBUTE_MAPPING_SIZE, a, size) == 0 && *size)
		return *base <= a && a - *base < *size ? 0 : -1;
	gpu_dptr b = 0;
	size_t s = 0;
	if (g->mem_get_address_range(&b, &s, a) != 0 || !s || b > a || a - b >= s)
		return -1;
	*base = b;
	*size = s;
	return 0;
}

/* [cur, end) starts with unmapped addresses: name the hole (up to where memory is mapped again,
 * probed at the granularity). */
static int hole(const struct gpu_api *g, int ordinal, gpu_dptr p, size_t len, gpu_dptr cur, char *msg, size_t mlen)
{
	struct gpu_mem_prop prop;
	gpu_vmm_prop(&prop, ordinal);
	size_t gran = 0;
	if (!g->mem_get_allocation_granularity || g->mem_get_allocation_granularity(&gran, &prop, 0) != 0 || !gran)
		gran = 2u << 20;
	gpu_dptr end = p + len, q = (cur / gran + 1) * gran;
	uint64_t b, s;
	int probes = 0;
	while (q < end && probes++ < HOLE_PROBES && mapping_of(g, q, &b, &s) != 0)
		q += gran;
	const char *more = q < end && probes > HOLE_PROBES ? "at least " : "";
	if (q > end)
		q = end;
	snprintf(msg, mlen,
		 "[%#llx, +%zu) has a hole: %s[%#llx, %#llx) (%llu bytes at offset %llu of the range) is not mapped; "
		 "register the mapped parts separately",
		 (unsigned long long)p, len, more, (unsigned long long)cur, (unsigned long long)q,
		 (unsigned long long)(q - cur), (unsigned long long)(cur - p));
	return MORI_EINVAL;
}

/* One piece must be a VMM allocation exportable as a POSIX fd, on the range's device. */
static int piece_ok(const struct gpu_api *g, gpu_dptr a, int ordinal, char *msg, size_t mlen)
{
	gpu_memhandle h = 0;
	if (g->mem_retain_allocation_handle(&h, (void *)(uintptr_t)a) != 0) {
		snprintf(msg, mlen, "the memory at %#llx is not a VMM allocation (cuMemCreate): it cannot be shared",
			 (unsigned long long)a);
		return MORI_ENOTSUP;
	}
	g->mem_release(h); /* drops only the reference the retain took */
	uint64_t types = 0;
	int dev = -1;
	if (attr_u64(g, GPU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, a, &types) == 0 &&
	    !(types & GPU_MEM_HANDLE_TYPE_POSIX_FD)) {
		snprintf(msg, mlen, "the VMM allocation at %#llx was created without POSIX fd handles", (unsigned long long)a);
		return MORI_ENOTSUP;
	}
	if (g->pointer_get_attribute(&dev, GPU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a) == 0 && dev != ordinal) {
		snprintf(msg, mlen, "the VMM allocation at %#llx is on GPU %d, the range starts on GPU %d",
			 (unsigned long long)a, dev, ordinal);
		return MORI_EINVAL;
	}
	return MORI_OK;
}

int gpu_span_walk(const struct gpu_api *g, int ordinal, gpu_dptr p, size_t len, struct gpu_piece **out, uint32_t *n,
		  char *msg, size_t mlen)
{
	*out = NULL;
	*n = 0;
	msg[0] = 0;
	if (!len || p + len < p) {
		snprintf(msg, mlen, "[%#llx, +%zu) is empty or wraps", (unsigned long long)p, len);
		return MORI_ERANGE;
	}
	struct gpu_piece *pc = NULL;
	uint32_t np = 0, cap = 0;
	int rc = MORI_OK;
	for (gpu_dptr cur = p, end = p + len; cur < end && !rc;) {
		uint64_t b, s;
		if (mapping_of(g, cur, &b, &s) != 0) {
			rc = hole(g, ordinal, p, len, cur, msg, mlen);
			break;
		}
		if ((rc = piece_ok(g, cur, ordinal, msg, mlen)))
			break;
		if (np == GPU_SPAN_MAX_PIECES) {
			snprintf(msg, mlen, "[%#llx, +%zu) spans more than %u VMM allocations", (unsigned long long)p, len,
				 GPU_SPAN_MAX_PIECES);
			rc = MORI_EINVAL;
			break;
		}
		if (np == cap) {
			cap = cap ? cap * 2 : 16;
			struct gpu_piece *t = realloc(pc, cap * sizeof(*pc));
			if (!t) {
				snprintf(msg, mlen, "out of memory");
				rc = MORI_ENOMEM;
				break;
			}
			pc = t;
		}
		pc[np++] = (struct gpu_piece){b, s};
		cur = b + s; /* the next piece starts where this one ends, or there is a hole */
	}
	if (rc) {
		free(pc);
		return rc;
	}
	*out = pc;
	*n = np;
	return MORI_OK;
}

/* ---- registration ---- */

static int export_piece(const struct gpu_api *g, gpu_dptr a, int *fd, char *msg, size_t mlen)
{
	gpu_memhandle h = 0;
	*fd = -1;
	int rc = gpu_err(g->mem_retain_allocation_handle(&h, (void *)(uintptr_t)a), "cuMemRetainAllocationHandle", msg,
			 mlen);
	if (rc)
		return rc;
	rc = gpu_err(g->mem_export_to_shareable_handle(fd, h, GPU_MEM_HANDLE_TYPE_POSIX_FD, 0),
		     "cuMemExportToShareableHandle", msg, mlen);
	g->mem_release(h);
	return rc;
}

/* Pieces [k, k+cnt) to morid with their fds (exported here, closed once sent). */
static int upload_batch(mori_client *c, const struct gpu_api *g, const Mori__MemRegister *req,
			const struct gpu_piece *pc, uint32_t k, uint32_t cnt, uint64_t *upload)
{
	int fds[WIRE_MAX_FDS];
	Mori__VmmPiece pv[WIRE_MAX_FDS], *pp[WIRE_MAX_FDS];
	uint32_t got = 0;
	char msg[200];
	int rc = MORI_OK;
	for (; got < cnt; got++) {
		const struct gpu_piece *q = &pc[k + got];
		if ((rc = export_piece(g, q->base, &fds[got], msg, sizeof(msg)))) {
			rc = set_error(c, rc, "register VRAM: allocation %u at %#llx: %s", k + got,
				       (unsigned long long)q->base, msg);
			goto out;
		}
		mori__vmm_piece__init(&pv[got]);
		pv[got].offset = q->base - pc[0].base;
		pv[got].size = q->size;
		pp[got] = &pv[got];
	}
	Mori__MemRegister m = *req;
	m.has_fd = 1;
	m.n_vmm_pieces = cnt;
	m.vmm_pieces = pp;
	m.vmm_first = k;
	m.vmm_upload = *upload;
	Mori__Request rq = MORI__REQUEST__INIT;
	Mori__Reply *rep;
	rq.body_case = MORI__REQUEST__BODY_MEM_REGISTER;
	rq.mem_register = &m;
	rc = client_rpc(c, &rq, fds, (int)cnt, &rep, NULL, NULL);
	if (rc == MORI_OK) {
		if (rep->body_case != MORI__REPLY__BODY_MEM_REGISTER || !rep->mem_register->vmm_upload)
			rc = set_error(c, MORI_EPROTO, "register VRAM: morid's reply to a batch of allocations has no upload id");
		else
			*upload = rep->mem_register->vmm_upload;
		mori__reply__free_unpacked(rep, NULL);
	}
out:
	for (uint32_t i = 0; i < got; i++)
		close(fds[i]); /* morid holds its own now */
	return rc;
}

/* Give up an unfinished upload (morid also drops it when this client goes), keeping the error. */
static void drop_upload(mori_client *c, uint64_t upload)
{
	char why[512];
	snprintf(why, sizeof(why), "%s", mori_client_last_error(c));
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__MemDeregister d = MORI__MEM_DEREGISTER__INIT;
	Mori__Reply *rep = NULL;
	d.region_id = upload;
	req.body_case = MORI__REQUEST__BODY_MEM_DEREGISTER;
	req.mem_deregister = &d;
	if (client_rpc(c, &req, NULL, 0, &rep, NULL, NULL) == MORI_OK)
		mori__reply__free_unpacked(rep, NULL);
	set_error(c, MORI_OK, "%s", why);
}

int gpu_span_register(mori_client *c, const struct gpu_api *g, int ordinal, gpu_dptr p, size_t len,
		      Mori__MemRegister *req, uint8_t *buf, size_t cap)
{
	char msg[300];
	struct gpu_piece *pc;
	uint32_t n;
	int rc = gpu_span_walk(g, ordinal, p, len, &pc, &n, msg, sizeof(msg));
	if (rc)
		return set_error(c, rc, "register VRAM: %s", msg);
	if (cap < sizeof(struct gpu_vmm_blob)) {
		free(pc);
		return set_error(c, MORI_EINVAL, "register VRAM: IPC buffer of %zu bytes", cap);
	}
	uint64_t base0 = pc[0].base;
	struct gpu_vmm_blob b = {GPU_VMM_MAGIC, 2, pc[n - 1].base + pc[n - 1].size - base0, base0};
	memcpy(buf, &b, sizeof(b));
	req->kind = MORI_MEM_VRAM;
	req->size = len;
	req->addr = p;
	req->gpu_handle_type = GPU_HANDLE_POSIX_FDS;
	req->gpu_ipc.data = buf;
	req->gpu_ipc.len = sizeof(b);
	req->gpu_device = ordinal;
	req->fd_offset = p - base0;
	req->vmm_total = n;
	uint64_t upload = 0;
	for (uint32_t k = 0; k < n && !rc; k += WIRE_MAX_FDS)
		rc = upload_batch(c, g, req, pc, k, n - k < WIRE_MAX_FDS ? n - k : WIRE_MAX_FDS, &upload);
	free(pc);
	if (rc) {
		if (upload)
			drop_upload(c, upload);
		return rc;
	}
	/* the caller's MemRegister commits it: no pieces, this upload id */
	req->vmm_upload = upload;
	req->vmm_first = n;
	return MORI_OK;
}

/* ---- opening a peer's ---- */

/* Map one batch of pieces (the reply's, whose fds are fds[0..nfds)); closes nothing. */
static int map_batch(mori_client *c, const struct gpu_api *g, struct gpu_vmm_range *s, uint64_t region,
		     const Mori__MemOpenReply *o, const int *fds, int nfds)
{
	char msg[240];
	if (!o->n_vmm_pieces || o->n_vmm_pieces != (size_t)nfds || o->vmm_first != s->mapped)
		return set_error(c, MORI_EPROTO,
				 "open VRAM region %llu: a batch of %zu allocations (from %u) with %d fds, expected from %u",
				 (unsigned long long)region, o->n_vmm_pieces, o->vmm_first, nfds, s->mapped);
	for (int i = 0; i < nfds; i++) {
		int rc = gpu_vmm_map(g, s, o->vmm_pieces[i]->offset, o->vmm_pieces[i]->size, fds[i], msg, sizeof(msg));
		if (rc)
			return set_error(c, rc, "open VRAM region %llu: allocation %u: %s", (unsigned long long)region,
					 s->mapped, msg);
	}
	return MORI_OK;
}

/* Ask morid for the pieces from s->mapped on, and map them. */
static int fetch_batch(mori_client *c, const struct gpu_api *g, struct gpu_vmm_range *s, const Mori__Handle *h)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__MemOpen mo = MORI__MEM_OPEN__INIT;
	Mori__Reply *rep;
	int fds[WIRE_MAX_FDS], nfds = 0;
	mo.handle = (Mori__Handle *)h;
	mo.vmm_from = s->mapped;
	req.body_case = MORI__REQUEST__BODY_MEM_OPEN;
	req.mem_open = &mo;
	int rc = client_rpc(c, &req, NULL, 0, &rep, fds, &nfds);
	if (rc)
		return rc;
	if (rep->body_case != MORI__REPLY__BODY_MEM_OPEN)
		rc = set_error(c, MORI_EPROTO, "open VRAM region %llu: not an open reply", (unsigned long long)h->region_id);
	else
		rc = map_batch(c, g, s, h->region_id, rep->mem_open, fds, nfds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]); /* imported: the mappings hold the allocations */
	mori__reply__free_unpacked(rep, NULL);
	return rc;
}

int gpu_span_import(mori_client *c, const struct gpu_api *g, struct gpu_map *mp, const Mori__MemOpenReply *o,
		    const int *fds, int nfds)
{
	char msg[240];
	struct gpu_vmm_blob b;
	uint64_t region = o->handle->region_id;
	if (o->gpu_ipc.len != sizeof(b))
		return set_error(c, MORI_EPROTO, "open VRAM region %llu: VMM blob of %zu bytes", (unsigned long long)region,
				 o->gpu_ipc.len);
	memcpy(&b, o->gpu_ipc.data, sizeof(b));
	if (b.magic != GPU_VMM_MAGIC || b.version != 2 || !b.alloc_size || b.alloc_size > SIZE_MAX)
		return set_error(c, MORI_EPROTO, "open VRAM region %llu: not a blob of several VMM allocations",
				 (unsigned long long)region);
	int rc = gpu_vmm_reserve(g, mp->d->ordinal, (size_t)b.alloc_size, o->vmm_total, &mp->span, msg, sizeof(msg));
	if (rc)
		return set_error(c, rc, "open VRAM region %llu (%u allocations): %s", (unsigned long long)region,
				 o->vmm_total, msg);
	rc = map_batch(c, g, &mp->span, region, o, fds, nfds);
	while (!rc && mp->span.mapped < mp->span.n)
		rc = fetch_batch(c, g, &mp->span, o->handle);
	if (!rc && !gpu_vmm_complete(&mp->span))
		rc = set_error(c, MORI_EPROTO, "open VRAM region %llu: its %u allocations do not cover its %zu-byte span",
			       (unsigned long long)region, mp->span.n, mp->span.size);
	if (rc) {
		gpu_vmm_free(g, &mp->span);
		return rc;
	}
	mp->base = mp->span.base;
	mp->size = mp->span.size;
	return MORI_OK;
}
