/* Reaching a region's bytes by kind of memory (region.h). */
#include "region.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "gpu/gpu_stage.h"
#include "log.h"
#include "pidfd.h"

/* One backend per kind of memory morid reaches. */
struct backend {
	const char *name;
	int (*reach)(struct region *g, char *msg, size_t len);
	int (*copy)(struct region *g, uint64_t off, void *buf, uint64_t len, int write);
};

/* ---- memfd: mapped once, then plain memory ---- */

void *region_map(struct region *g)
{
	if (g->map)
		return g->map;
	if (g->fd < 0 || g->kind != MORI_MEM_HOST)
		return NULL;
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t start = g->fd_offset & ~(uint64_t)(pg - 1);
	uint64_t len = g->fd_offset - start + g->size;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, g->fd, (off_t)start);
	if (p == MAP_FAILED)
		return NULL;
	g->map_base = p;
	g->map_len = len;
	g->map = (char *)p + (g->fd_offset - start);
	return g->map;
}

static int memfd_reach(struct region *g, char *msg, size_t len)
{
	if (region_map(g))
		return MORI_OK;
	snprintf(msg, len, "region %llu: cannot map its memfd: %s", (unsigned long long)g->id, strerror(errno));
	return MORI_ESYS;
}

static int memfd_copy(struct region *g, uint64_t off, void *buf, uint64_t len, int write)
{
	if (g->dead)
		return MORI_ESTALE;
	if (!g->map)
		return MORI_EPEERDEAD;
	if (write)
		memcpy((char *)g->map + off, buf, len);
	else
		memcpy(buf, (char *)g->map + off, len);
	return MORI_OK;
}

/* ---- the owner's memory, by cross-memory attach ---- */

static int cma_reach(struct region *g, char *msg, size_t len)
{
	if (g->addr && g->pid > 0)
		return MORI_OK;
	snprintf(msg, len, "region %llu is not memory morid can reach", (unsigned long long)g->id);
	return MORI_ENOTSUP;
}

/* Is g's owner still the process that registered it, running as the uid that registered it? A
 * bare pid is not enough: once that process exits and is reaped its pid goes to another process,
 * which morid (root) would read and write. The owner's pidfd polls readable from its exit on, pid
 * reused or not. Without a pidfd (no pidfd_open) the client's end is its socket's, as before.
 * The same process may also exec a setuid program (its socket kept open): then it runs as another
 * effective uid (the owner of /proc/PID), and morid must not reach it with its own rights where
 * the owner could not. Checked before the pidfd, so a pid reused in between is caught by it. */
static int cma_owner_ok(struct region *g)
{
	if (g->owner_uid != 0) {
		char path[32];
		struct stat st;
		snprintf(path, sizeof(path), "/proc/%d", (int)g->pid);
		if (stat(path, &st) != 0 || st.st_uid != g->owner_uid) {
			if (!g->pid_gone_logged++)
				mlog_warn("region", "region %llu: its owner pid %d no longer runs as uid %u (exited, or exec'd a "
					  "setuid program): no cross-memory attach to it",
					  (unsigned long long)g->id, (int)g->pid, (unsigned)g->owner_uid);
			return 0;
		}
	}
	if (g->pidfd < 0 || !pidfd_exited(g->pidfd))
		return 1;
	if (!g->pid_gone_logged++)
		mlog_warn("region", "region %llu: its owner pid %d has exited: no cross-memory attach to that pid",
			  (unsigned long long)g->id, (int)g->pid);
	return 0;
}

static int cma_copy(struct region *g, uint64_t off, void *buf, uint64_t len, int write)
{
	uint64_t done = 0;
	/* Once deregistered the owner may free or reuse those addresses: never touch them again. */
	if (g->dead)
		return MORI_ESTALE;
	if (!cma_owner_ok(g))
		return MORI_EPEERDEAD;
	while (done < len) {
		struct iovec l = {(char *)buf + done, len - done};
		struct iovec r = {(void *)(uintptr_t)(g->addr + off + done), len - done};
		ssize_t n = write ? process_vm_writev(g->pid, &l, 1, &r, 1, 0)
				  : process_vm_readv(g->pid, &l, 1, &r, 1, 0);
		if (n <= 0)
			return g->dead ? MORI_ESTALE : MORI_EPEERDEAD;
		done += (uint64_t)n;
	}
	/* a read that raced the owner's exit may hold another process's bytes: drop them */
	if (!write && !cma_owner_ok(g))
		return MORI_EPEERDEAD;
	return MORI_OK;
}

/* ---- VRAM, through the GPU table (gpu_stage.c) ---- */

static int vram_copy(struct region *g, uint64_t off, void *buf, uint64_t len, int write)
{
	if (g->dead)
		return MORI_ESTALE;
	return region_gpu_copy(g, off, buf, len, write);
}

static const struct backend backends[] = {
	{"memfd", memfd_reach, memfd_copy},
	{"cross-memory attach", cma_reach, cma_copy},
	{"vram", region_gpu_reach, vram_copy},
};

static const struct backend *backend_of(const struct region *g)
{
	if (g->kind == MORI_MEM_VRAM)
		return &backends[2];
	if (g->kind != MORI_MEM_HOST)
		return NULL;
	return g->fd >= 0 ? &backends[0] : &backends[1];
}

int region_reach(struct region *g, char *msg, size_t len)
{
	const struct backend *b = backend_of(g);
	if (!b) {
		snprintf(msg, len, "region %llu is of kind %u, which morid cannot reach", (unsigned long long)g->id,
			 g->kind);
		return MORI_ENOTSUP;
	}
	return b->reach(g, msg, len);
}

int region_copy(struct morid *d, struct region *g, uint64_t off, void *buf, uint64_t len, int write)
{
	const struct backend *b = backend_of(g);
	if (!b)
		return MORI_ENOTSUP;
	int rc = b->copy(g, off, buf, len, write);
	if (rc == MORI_OK && g->kind == MORI_MEM_VRAM)
		count(d, C_VRAM_STAGED, len);
	return rc;
}

int region_copy_start(struct morid *d, struct region *g, uint64_t off, void *buf, uint64_t len, int write,
		      struct stage_fence *f)
{
	if (g->kind != MORI_MEM_VRAM || !stage_pinned(buf))
		return region_copy(d, g, off, buf, len, write);
	int rc = region_gpu_copy_start(g, off, buf, len, write, f); /* MORI_ESTALE once deregistered */
	if (rc == MORI_OK)
		count(d, C_VRAM_STAGED, len);
	return rc;
}

Mori__Handle *region_handle(struct morid *d, struct region *g, struct rctx *r, int with_secret)
{
	Mori__Handle *h = rctx_alloc(r, sizeof(*h));
	if (!h)
		return NULL;
	mori__handle__init(h);
	h->node = rctx_strdup(r, d->cfg.advertise[0] ? d->cfg.advertise : d->cfg.listen);
	h->epoch = d->epoch;
	h->region_id = g->id;
	h->generation = g->gen;
	h->size = g->size;
	h->kind = g->kind;
	if (with_secret) {
		h->secret.data = g->secret; /* packed before g can go: replies are packed at once */
		h->secret.len = sizeof(g->secret);
	}
	return h;
}
