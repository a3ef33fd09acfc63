#include "memory.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu.h"
#include "log.h"
#include "peer/peer.h"
#include "region/region.h"
#include "region/registry.h"
#include "region/vmm.h"

#define FD_RESERVE 256 /* descriptors registrations leave for sessions, peers and control */

const char *memory_gpu_summary(struct morid *d)
{
	static char buf[400];
	gpu_describe(buf, sizeof(buf));
	return buf;
}


static int is_local_node(struct morid *d, const char *node)
{
	const char *me = d->cfg.advertise[0] ? d->cfg.advertise : d->cfg.listen;
	return !node || !node[0] || strcmp(node, me) == 0;
}

/* A handle is usable here if it names this node and epoch and a live region of that generation,
 * size and kind, and carries its secret. A forged handle and a freed region's get the same answer:
 * nothing tells a guesser which part was wrong. */
static struct region *resolve(struct morid *d, const Mori__Handle *h, Mori__Reply *rep)
{
	if (h->epoch != d->epoch) {
		reply_error(rep, MORI_ESTALE, "handle is from daemon epoch %llx, this daemon is %llx (restarted)",
			    (unsigned long long)h->epoch, (unsigned long long)d->epoch);
		return NULL;
	}
	struct region *g = region_find(d, h->region_id);
	if (!g || g->gen != h->generation || g->size != h->size || g->kind != h->kind ||
	    !region_secret_ok(g, h->secret.data, h->secret.len)) {
		reply_error(rep, MORI_ESTALE, "region %llu no longer registered", (unsigned long long)h->region_id);
		return NULL;
	}
	return g;
}

/* Is [addr, addr+size) mapped in process pid? 1 yes, 0 no (a gap), -1 its maps cannot be read (then
 * cross-memory attach cannot reach it either, and fails cleanly when tried). */
static int range_mapped(pid_t pid, uint64_t addr, uint64_t size)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	uint64_t cur = addr, end = addr + size;
	int ok = 0;
	while (!ok && getline(&line, &cap, f) > 0) {
		unsigned long long lo, hi;
		if (sscanf(line, "%llx-%llx", &lo, &hi) != 2 || hi <= cur)
			continue;
		if (lo > cur)
			break; /* a hole before the rest of the range */
		cur = hi;
		ok = cur >= end;
	}
	free(line);
	fclose(f);
	return ok;
}

/* The daemon never trusts the library's checks: a range that wraps the address space, or (memory
 * reached by cross-memory attach) that the client has not mapped, is refused. 0 or the code. */
static int check_range(struct client *c, const Mori__MemRegister *m, int fd, Mori__Reply *rep)
{
	if (m->addr + m->size < m->addr || (m->addr == 0 && fd < 0)) {
		reply_error(rep, MORI_ERANGE, "register: range [0x%llx, +%llu) wraps the address space",
			    (unsigned long long)m->addr, (unsigned long long)m->size);
		return MORI_ERANGE;
	}
	if (m->kind == MORI_MEM_HOST && fd < 0 && range_mapped(c->pid, m->addr, m->size) == 0) {
		reply_error(rep, MORI_ERANGE, "register: range [0x%llx, +%llu) is not mapped in pid %d",
			    (unsigned long long)m->addr, (unsigned long long)m->size, (int)c->pid);
		return MORI_ERANGE;
	}
	return 0;
}

/* Is there room for `need` more region descriptors (one per memfd or VMM allocation), leaving
 * FD_RESERVE? The soft RLIMIT_NOFILE is raised to the hard one the first time it is short
 * (systemd's LimitNOFILE sets both; started by hand the soft one is often 1024, and a KV cache of
 * expandable segments is thousands of allocations). *lim: the limit that applies. */
static int fd_room(struct morid *d, uint64_t need, uint64_t *lim)
{
	struct rlimit nofile;
	*lim = 0;
	if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur == RLIM_INFINITY)
		return 1;
	uint64_t want = (uint64_t)registry_fds(d) + FD_RESERVE + need;
	if (want >= (uint64_t)nofile.rlim_cur && nofile.rlim_cur < nofile.rlim_max) {
		struct rlimit up = {nofile.rlim_max, nofile.rlim_max};
		if (setrlimit(RLIMIT_NOFILE, &up) == 0) {
			mlog_info("memory", "raised the descriptor limit from %llu to %llu", (unsigned long long)nofile.rlim_cur,
				  (unsigned long long)nofile.rlim_max);
			nofile = up;
		}
	}
	*lim = (uint64_t)nofile.rlim_cur;
	return nofile.rlim_cur == RLIM_INFINITY || want < (uint64_t)nofile.rlim_cur;
}

static int do_register(struct morid *d, struct client *c, Mori__MemRegister *m, Mori__Reply *rep,
		       struct rctx *r, int *fds, int nfds)
{
	int fd = nfds > 0 ? fds[0] : -1;
	/* VRAM over several VMM allocations: one fd each, in batches (vmm.c) */
	int span = m->kind == MORI_MEM_VRAM && m->gpu_handle_type == GPU_HANDLE_POSIX_FDS;
	struct region *g = NULL;
	if (span && (m->vmm_upload || m->vmm_first)) {
		if (!(g = vmm_register_more(d, c, m, rep, r, fds, nfds)))
			return 0; /* a later batch taken, or refused: its reply is set */
		goto reply; /* committed: the owner's handle, as for any region */
	}
	for (int i = 1; i < nfds && !span; i++)
		close(fds[i]);
	if (m->size == 0 || (m->kind != MORI_MEM_HOST && m->kind != MORI_MEM_VRAM)) {
		reply_error(rep, MORI_EINVAL, "register: size must be > 0 and kind HOST or VRAM");
		goto fail;
	}
	uint64_t need = fd < 0 ? 0 : span ? m->vmm_total : 1, lim;
	if (need && !fd_room(d, need, &lim)) {
		/* keep descriptors for sessions, peers and the control socket */
		reply_error(rep, MORI_ENOMEM,
			    "register: morid holds %u region descriptors; %llu more would come near its limit of %llu "
			    "(raise LimitNOFILE, or lower client_max_regions)",
			    registry_fds(d), (unsigned long long)need, (unsigned long long)lim);
		goto fail;
	}
	if (c->nregions >= d->cfg.client_max_regions) {
		reply_error(rep, MORI_ENOMEM, "register: this client already has %u regions (client_max_regions)",
			    c->nregions);
		goto fail;
	}
	if (registry_live(d) >= d->cfg.node_max_regions) {
		count(d, C_NODE_CAP_REFUSALS, 1);
		reply_error(rep, MORI_ENOMEM, "register: morid holds %u regions of all its clients, node_max_regions (%lld)",
			    registry_live(d), (long long)d->cfg.node_max_regions);
		goto fail;
	}
	if (m->has_fd != (fd >= 0)) {
		reply_error(rep, MORI_EINVAL, "register: has_fd says %d but %d fds came", m->has_fd, nfds);
		goto fail;
	}
	if (fd >= 0 && m->kind == MORI_MEM_HOST) {
		struct stat st;
		if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
		    m->fd_offset + m->size < m->size || m->fd_offset + m->size > (uint64_t)st.st_size) {
			reply_error(rep, MORI_ERANGE, "register: range [%llu, +%llu) is outside the passed file",
				    (unsigned long long)m->fd_offset, (unsigned long long)m->size);
			goto fail;
		}
	}
	if (fd >= 0 && m->kind == MORI_MEM_HOST) {
		/* Peers map this file: it must not shrink under them (SIGBUS). A file that cannot be
		 * sealed is served by cross-memory attach instead, which fails cleanly (EFAULT). */
		int seals = fcntl(fd, F_GET_SEALS);
		if (seals < 0 || (!(seals & F_SEAL_SHRINK) && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)) {
			mlog_info("memory", "client %llu: registered file cannot be sealed against shrinking; peers will use cross-memory attach",
				  (unsigned long long)c->id);
			close(fd);
			fd = -1;
		}
	}
	if (check_range(c, m, fd, rep) != 0)
		goto fail;
	if (m->gpu_ipc.len > GPU_IPC_MAX) {
		reply_error(rep, MORI_EINVAL, "register: GPU IPC handle of %zu bytes", m->gpu_ipc.len);
		goto fail;
	}
	/* Overlap with this client's own registrations is refused: never two owners of a byte. */
	list_each(it, &c->regions) {
		struct region *g = list_entry(it, struct region, owner_link);
		if (g->kind == m->kind && m->addr && g->addr && m->addr < g->addr + g->size &&
		    g->addr < m->addr + m->size) {
			reply_error(rep, MORI_EBUSY, "register: overlaps region %llu", (unsigned long long)g->id);
			goto fail;
		}
	}
	g = region_add(d, c, m->kind, m->size, span ? -1 : fd, m->fd_offset, m->addr); /* owns fd */
	if (!g) {
		reply_error(rep, MORI_ENOMEM, "register: out of memory");
		return 0;
	}
	g->gpu_handle_type = m->gpu_handle_type;
	if (m->gpu_ipc.len) /* data is NULL when empty: memcpy(.., NULL, 0) is undefined */
		memcpy(g->gpu_ipc, m->gpu_ipc.data, m->gpu_ipc.len);
	g->gpu_ipc_len = m->gpu_ipc.len;
	g->gpu_device = m->gpu_device;
	if (span)
		return vmm_register_start(d, g, m, rep, r, fds, nfds); /* owns the fds */
reply:;
	Mori__MemRegisterReply *mr = rctx_alloc(r, sizeof(*mr));
	if (mr) {
		mori__mem_register_reply__init(mr);
		mr->handle = region_handle(d, g, r, 1); /* the owner's: it packs blobs */
	}
	if (!mr || !mr->handle) {
		region_remove(d, g, "out of memory");
		reply_error(rep, MORI_ENOMEM, "register: out of memory");
		return 0;
	}
	rep->body_case = MORI__REPLY__BODY_MEM_REGISTER;
	rep->mem_register = mr;
	mlog_debug("memory", "client %llu registered region %llu: %llu bytes kind %u%s",
		   (unsigned long long)c->id, (unsigned long long)g->id, (unsigned long long)m->size,
		   m->kind, fd >= 0 ? " (fd)" : "");
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	for (int i = 1; i < nfds && span; i++)
		close(fds[i]);
	return 0;
}

static struct region *own_region(struct morid *d, struct client *c, uint64_t id, Mori__Reply *rep)
{
	struct region *g = region_find(d, id);
	if (!g || g->owner != c) {
		reply_error(rep, MORI_ENOENT, "region %llu is not registered by this client", (unsigned long long)id);
		return NULL;
	}
	return g;
}

static void do_open(struct morid *d, struct client *c, struct region *g, Mori__Reply *rep,
		    struct rctx *r)
{
	Mori__MemOpenReply *o = rctx_alloc(r, sizeof(*o));
	if (!o) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__mem_open_reply__init(o);
	o->handle = region_handle(d, g, r, 0);
	o->fd_offset = g->fd_offset;
	o->owner_pid = g->pid;
	o->owner_addr = g->addr;
	o->gpu_handle_type = g->gpu_handle_type;
	o->gpu_ipc.data = g->gpu_ipc;
	o->gpu_ipc.len = g->gpu_ipc_len;
	o->gpu_device = g->gpu_device;
	if (g->fd >= 0) {
		if (rctx_dup_fd(r, rep, g->fd))
			return;
		o->has_fd = 1;
	} else if (g->vmm_n && vmm_open_fill(g, o, 0, rep, r) != MORI_OK) {
		return; /* the first batch of its VMM allocations (the opener asks for the rest) */
	} else if (g->kind == MORI_MEM_HOST && g->addr && g->pidfd >= 0 && g->owner != c &&
		   (c->features & WIRE_FEAT_OWNER_PIDFD)) {
		/* the opener copies by cross-memory attach itself: the owner's pidfd lets it see the
		 * owner exit (it grants nothing the pid does not; signals still need kill's rights) */
		if (rctx_dup_fd(r, rep, g->pidfd))
			return;
		o->has_owner_pidfd = 1;
	}
	if (g->owner != c && region_open(c, g) != MORI_OK) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	rep->body_case = MORI__REPLY__BODY_MEM_OPEN;
	rep->mem_open = o;
}

int memory_handle_request(struct morid *d, struct client *c, Mori__Request *req, Mori__Reply *rep,
			  struct rctx *r, int *fds, int nfds)
{
	struct region *g;
	int rc;
	switch (req->body_case) {
	case MORI__REQUEST__BODY_MEM_REGISTER:
		return do_register(d, c, req->mem_register, rep, r, fds, nfds);
	case MORI__REQUEST__BODY_XFER_PREP: /* its descriptors come as a memfd (peer.c) */
	case MORI__REQUEST__BODY_XFER_UNPREP:
		return peer_handle_request(d, c, req, rep, r, fds, nfds);
	default:
		break;
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]); /* only register takes fds */
	switch (req->body_case) {
	case MORI__REQUEST__BODY_MEM_DEREGISTER:
		if ((g = own_region(d, c, req->mem_deregister->region_id, rep)))
			return region_deregister(d, c, g, req->id);
		return 0;
	case MORI__REQUEST__BODY_MEM_PUBLISH:
		if (!(g = own_region(d, c, req->mem_publish->region_id, rep)))
			return 0;
		rc = region_publish(d, g, req->mem_publish->name, req->mem_publish->has_access, req->mem_publish->uids,
				    req->mem_publish->n_uids, req->mem_publish->nodes, req->mem_publish->n_nodes);
		if (rc == MORI_EEXIST)
			reply_error(rep, rc, "name '%s' is already published", req->mem_publish->name);
		else if (rc == MORI_ENOMEM)
			reply_error(rep, rc, "publish: out of memory");
		else if (rc)
			reply_error(rep, rc, "names are 1..127 printable bytes without spaces; access lists at most %d "
					     "uids and %d nodes of 1..127 bytes", ACCESS_MAX, ACCESS_MAX);
		return 0;
	case MORI__REQUEST__BODY_MEM_LOOKUP:
		if (!is_local_node(d, req->mem_lookup->node))
			return peer_handle_request(d, c, req, rep, r, NULL, 0);
		if (!(g = region_lookup(d, req->mem_lookup->name))) {
			reply_error(rep, MORI_EUNREACH, "name '%s' is not published on this node", req->mem_lookup->name);
			return 0;
		}
		if (!region_grants_uid(g, c->uid)) {
			count(d, C_DENIED, 1);
			reply_error(rep, MORI_EPERM, "name '%s' is not granted to uid %u (its access list)",
				    req->mem_lookup->name, (unsigned)c->uid);
			return 0;
		}
		do_open(d, c, g, rep, r);
		return 0;
	case MORI__REQUEST__BODY_MEM_OPEN:
		if (!req->mem_open->handle) {
			reply_error(rep, MORI_EPROTO, "open: no handle");
			return 0;
		}
		if (!is_local_node(d, req->mem_open->handle->node))
			return peer_handle_request(d, c, req, rep, r, NULL, 0);
		if (req->mem_open->vmm_from) {
			vmm_open_more(d, c, req->mem_open, rep, r);
			return 0;
		}
		if ((g = resolve(d, req->mem_open->handle, rep)))
			do_open(d, c, g, rep, r);
		return 0;
	case MORI__REQUEST__BODY_MEM_CLOSE:
		if (peer_close_ref(d, c, req->mem_close->region_id))
			return 0; /* a remote region's ref (peer.c) */
		if ((g = region_find(d, req->mem_close->region_id)))
			region_close(c, g);
		return 0;
	case MORI__REQUEST__BODY_XFER_PREP:
	case MORI__REQUEST__BODY_XFER_UNPREP:
		return peer_handle_request(d, c, req, rep, r, NULL, 0);
	default:
		reply_error(rep, MORI_EPROTO, "not a memory request");
		return 0;
	}
}
