/* VRAM ranges over several VMM allocations (vmm.h). The region exists from the first batch on,
 * owned by its client (so a client that dies mid-upload loses it like any other), but stays
 * pending, unreachable by anyone, until the commit has checked that the pieces tile the span
 * back to back and that the range lies in them, touching the first and the last. */
#include "vmm.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"
#include "log.h"
#include "registry.h"

static uint64_t span_of(const struct region *g)
{
	struct gpu_vmm_blob b;
	if (g->gpu_ipc_len != sizeof(b))
		return 0;
	memcpy(&b, g->gpu_ipc, sizeof(b));
	return b.magic == GPU_VMM_MAGIC && b.version == 2 ? b.alloc_size : 0;
}

/* Take one batch's pieces and fds into g (each piece where the last ended, inside the span).
 * Every fd is taken or closed. 0 or the code, with the reply's error. */
static int add_batch(struct region *g, const Mori__MemRegister *m, Mori__Reply *rep, int *fds, int nfds)
{
	uint64_t span = span_of(g);
	int i = 0, rc = 0;
	if (!nfds || m->n_vmm_pieces != (size_t)nfds || m->vmm_first != g->vmm_have ||
	    (uint64_t)nfds > g->vmm_n - g->vmm_have) {
		reply_error(rep, MORI_EINVAL, "register: a batch of %zu VMM allocations (from %u) with %d fds; %u of %u came",
			    m->n_vmm_pieces, m->vmm_first, nfds, g->vmm_have, g->vmm_n);
		rc = MORI_EINVAL;
	}
	for (; !rc && i < nfds; i++) {
		const Mori__VmmPiece *p = m->vmm_pieces[i];
		uint64_t want = g->vmm_have ? g->vmm_off[g->vmm_have - 1] + g->vmm_len[g->vmm_have - 1] : 0;
		if (p->offset != want || !p->size || p->size > span - p->offset) {
			reply_error(rep, MORI_EINVAL,
				    "register: VMM allocation %u at [%llu, +%llu) of a %llu-byte span: pieces must follow "
				    "each other from offset 0 (the next starts at %llu)",
				    g->vmm_have, (unsigned long long)p->offset, (unsigned long long)p->size,
				    (unsigned long long)span, (unsigned long long)want);
			rc = MORI_EINVAL;
			break;
		}
		region_vmm_add(g, fds[i], p->offset, p->size); /* the region owns fds[i] from here */
	}
	for (; i < nfds; i++)
		close(fds[i]);
	return rc;
}

int vmm_register_start(struct morid *d, struct region *g, const Mori__MemRegister *m, Mori__Reply *rep,
		       struct rctx *r, int *fds, int nfds)
{
	uint64_t span = span_of(g);
	int rc = MORI_EINVAL;
	if (!span || m->fd_offset >= span || m->size > span - m->fd_offset)
		reply_error(rep, rc, "register: [%llu, +%llu) of a range over several VMM allocations needs a version 2 "
				     "blob whose span holds it", (unsigned long long)m->fd_offset, (unsigned long long)m->size);
	else if (!m->vmm_total || m->vmm_total > GPU_SPAN_MAX_PIECES || m->vmm_first || m->vmm_upload)
		reply_error(rep, rc, "register: %u VMM allocations (at most %u), first batch from %u", m->vmm_total,
			    GPU_SPAN_MAX_PIECES, m->vmm_first);
	else if ((rc = region_vmm_init(g, m->vmm_total)))
		reply_error(rep, rc, "register: out of memory");
	if (rc) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		region_remove(d, g, "registration refused");
		return 0;
	}
	if (add_batch(g, m, rep, fds, nfds)) {
		region_remove(d, g, "registration refused");
		return 0;
	}
	Mori__MemRegisterReply *mr = rctx_alloc(r, sizeof(*mr));
	if (!mr) {
		region_remove(d, g, "out of memory");
		reply_error(rep, MORI_ENOMEM, "register: out of memory");
		return 0;
	}
	mori__mem_register_reply__init(mr);
	mr->vmm_upload = g->id; /* no handle yet: the commit gives it */
	rep->body_case = MORI__REPLY__BODY_MEM_REGISTER;
	rep->mem_register = mr;
	return 0;
}

/* All pieces came: they must end at the span's end, and the range must start in the first and
 * end in the last (no piece it does not touch). */
static int commit(struct region *g, Mori__Reply *rep)
{
	uint32_t n = g->vmm_n;
	uint64_t span = span_of(g);
	if (g->vmm_have != n || g->vmm_off[n - 1] + g->vmm_len[n - 1] != span || g->fd_offset >= g->vmm_len[0] ||
	    g->fd_offset + g->size <= g->vmm_off[n - 1]) {
		uint64_t have = g->vmm_have ? g->vmm_off[g->vmm_have - 1] + g->vmm_len[g->vmm_have - 1] : 0;
		reply_error(rep, MORI_EINVAL,
			    "register: %u of %u VMM allocations came, covering [0, %llu) of a %llu-byte span; the range "
			    "[%llu, +%llu) must start in the first and end in the last",
			    g->vmm_have, n, (unsigned long long)have, (unsigned long long)span,
			    (unsigned long long)g->fd_offset, (unsigned long long)g->size);
		return MORI_EINVAL;
	}
	g->vmm_pending = 0;
	mlog_debug("memory", "client %llu: region %llu is %llu bytes of VRAM over %u VMM allocations",
		   (unsigned long long)g->owner->id, (unsigned long long)g->id, (unsigned long long)g->size, n);
	return MORI_OK;
}

struct region *vmm_register_more(struct morid *d, struct client *c, const Mori__MemRegister *m, Mori__Reply *rep,
				 struct rctx *r, int *fds, int nfds)
{
	struct region *g = region_find(d, m->vmm_upload);
	if (!g || g->owner != c || !g->vmm_pending) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		reply_error(rep, MORI_ENOENT, "register: no upload %llu of VMM allocations in progress for this client",
			    (unsigned long long)m->vmm_upload);
		return NULL;
	}
	int rc;
	if (m->n_vmm_pieces == 0 && nfds == 0) {
		if ((rc = commit(g, rep)) == MORI_OK)
			return g;
	} else if (!(rc = add_batch(g, m, rep, fds, nfds))) {
		Mori__MemRegisterReply *mr = rctx_alloc(r, sizeof(*mr));
		if (!mr) {
			reply_error(rep, MORI_ENOMEM, "register: out of memory");
			rc = MORI_ENOMEM;
		} else {
			mori__mem_register_reply__init(mr);
			mr->vmm_upload = g->id;
			rep->body_case = MORI__REPLY__BODY_MEM_REGISTER;
			rep->mem_register = mr;
		}
	}
	if (rc)
		region_remove(d, g, "registration refused");
	return NULL;
}

int vmm_open_fill(struct region *g, Mori__MemOpenReply *o, uint32_t from, Mori__Reply *rep, struct rctx *r)
{
	if (g->vmm_pending || from >= g->vmm_n) {
		reply_error(rep, MORI_ESTALE, "region %llu no longer registered", (unsigned long long)g->id);
		return MORI_ESTALE;
	}
	uint32_t cnt = g->vmm_n - from;
	if (cnt > (uint32_t)(WIRE_MAX_FDS - r->nfds))
		cnt = (uint32_t)(WIRE_MAX_FDS - r->nfds);
	Mori__VmmPiece *pv = rctx_alloc(r, cnt * sizeof(*pv));
	Mori__VmmPiece **pp = rctx_alloc(r, cnt * sizeof(*pp));
	if (!cnt || !pv || !pp) {
		reply_error(rep, MORI_ENOMEM, "open: out of memory");
		return MORI_ENOMEM;
	}
	int first = r->nfds;
	for (uint32_t i = 0; i < cnt; i++) {
		if (rctx_dup_fd(r, rep, g->vmm_fds[from + i])) {
			while (r->nfds > first)
				close(r->fds[--r->nfds]);
			return MORI_ESYS;
		}
		mori__vmm_piece__init(&pv[i]);
		pv[i].offset = g->vmm_off[from + i];
		pv[i].size = g->vmm_len[from + i];
		pp[i] = &pv[i];
	}
	o->vmm_pieces = pp;
	o->n_vmm_pieces = cnt;
	o->vmm_total = g->vmm_n;
	o->vmm_first = from;
	o->has_fd = 1;
	return MORI_OK;
}

void vmm_open_more(struct morid *d, struct client *c, const Mori__MemOpen *mo, Mori__Reply *rep, struct rctx *r)
{
	const Mori__Handle *h = mo->handle;
	struct region *g = region_find(d, h->region_id);
	if (!g || g->gen != h->generation || h->epoch != d->epoch || !g->vmm_n || !region_reachable_by(g, c)) {
		reply_error(rep, MORI_ESTALE, "region %llu no longer registered", (unsigned long long)h->region_id);
		return;
	}
	Mori__MemOpenReply *o = rctx_alloc(r, sizeof(*o));
	if (!o) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__mem_open_reply__init(o);
	o->fd_offset = g->fd_offset;
	o->gpu_handle_type = g->gpu_handle_type;
	o->gpu_device = g->gpu_device;
	if (vmm_open_fill(g, o, mo->vmm_from, rep, r) != MORI_OK)
		return;
	rep->body_case = MORI__REPLY__BODY_MEM_OPEN;
	rep->mem_open = o;
}
