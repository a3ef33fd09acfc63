/* libmori memory: allocation, registration, handles, blobs, names, and opening peers' regions. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "host_port.h"
#include "conv.h"
#include "internal.h"

#define DEREG_WAIT_US 1000000

static void mem_link(mori_client *c, mori_mem *m)
{
	pthread_mutex_lock(&c->mem_lock);
	m->next = c->mems;
	c->mems = m;
	pthread_mutex_unlock(&c->mem_lock);
}

static void mem_unlink(mori_client *c, mori_mem *m)
{
	pthread_mutex_lock(&c->mem_lock);
	for (mori_mem **p = &c->mems; *p; p = &(*p)->next)
		if (*p == m) {
			*p = m->next;
			break;
		}
	pthread_mutex_unlock(&c->mem_lock);
}

/* The owner freed a region we opened. For memory reached by cross-memory attach the owner is
 * waiting to free the bytes: acknowledge once no copy of ours touches them. */
static void mem_revoked(mori_client *c, uint64_t region_id)
{
	pthread_mutex_lock(&c->mem_lock);
	for (mori_mem *m = c->mems; m; m = m->next) {
		if (m->local || m->remote || m->region_id != region_id)
			continue;
		atomic_store(&m->revoked, 1);
		if (m->ptr || m->kind != MORI_MEM_HOST)
			continue;
		atomic_store(&m->ack_pending, 1);
		if (atomic_load(&m->inflight) == 0 && atomic_exchange(&m->ack_pending, 0))
			client_ack_revoke(c, m);
	}
	pthread_mutex_unlock(&c->mem_lock);
}

void mem_take_handle(mori_mem *m, const Mori__Handle *h)
{
	m->region_id = h->region_id;
	m->generation = h->generation;
	m->secret_len = h->secret.len == sizeof(m->secret) ? sizeof(m->secret) : 0;
	if (m->secret_len)
		memcpy(m->secret, h->secret.data, sizeof(m->secret));
	m->size = h->size;
	m->kind = (int)h->kind;
	m->epoch = h->epoch;
	snprintf(m->node, sizeof(m->node), "%s", h->node);
}

static int do_register(mori_client *c, mori_mem *m, Mori__MemRegister *mr, int fd)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__Reply *rep;
	req.body_case = MORI__REQUEST__BODY_MEM_REGISTER;
	req.mem_register = mr;
	int rc = client_rpc(c, &req, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0, &rep, NULL, NULL);
	if (rc != MORI_OK)
		return rc;
	if (rep->body_case != MORI__REPLY__BODY_MEM_REGISTER || !rep->mem_register->handle) {
		mori__reply__free_unpacked(rep, NULL);
		return set_error(c, MORI_EPROTO, "register reply without a handle");
	}
	mem_take_handle(m, rep->mem_register->handle);
	mori__reply__free_unpacked(rep, NULL);
	m->local = 1;
	m->c = c;
	mem_link(c, m);
	return MORI_OK;
}

int mori_mem_alloc(mori_client *c, size_t size, mori_mem_kind kind, mori_mem **out)
{
	if (!c || !out || size == 0)
		return set_error(c, MORI_EINVAL, "mem_alloc: NULL argument or size 0");
	int crc = client_check(c);
	if (crc != MORI_OK)
		return crc;
	if (kind != MORI_MEM_HOST && kind != MORI_MEM_VRAM)
		return set_error(c, MORI_EINVAL, "mem_alloc: unknown kind %d", (int)kind);
	if (size > (size_t)INT64_MAX) /* past off_t: ftruncate would say EINVAL, read as MORI_ESYS */
		return set_error(c, MORI_ENOMEM, "mem_alloc: %zu bytes is more than a process can map", size);
	mori_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return set_error(c, MORI_ENOMEM, "out of memory");
	if (kind == MORI_MEM_VRAM) {
		Mori__MemRegister mr = MORI__MEM_REGISTER__INIT;
		uint8_t ipc[128];
		int fd = -1;
		int rc = gpu_mem_alloc(c, m, size, &mr, ipc, sizeof(ipc), &fd); /* m owns the memory now */
		if (rc == MORI_OK) {
			mr.kind = MORI_MEM_VRAM;
			mr.size = size;
			mr.addr = m->dptr;
			mr.has_fd = fd >= 0;
			rc = do_register(c, m, &mr, fd);
			if (fd >= 0)
				close(fd);
			if (rc != MORI_OK)
				gpu_mem_close(c, m); /* frees the allocation */
		}
		if (rc != MORI_OK) {
			free(m);
			return rc;
		}
		*out = m;
		return MORI_OK;
	}
	/* Sealed against shrinking: peers map it, and a truncated mapping would SIGBUS them. */
	int fd = memfd_create("mori-mem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		free(m);
		return set_error(c, e == ENOMEM || e == ENOSPC ? MORI_ENOMEM : MORI_ESYS, "memfd: %s", strerror(e));
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		close(fd);
		free(m);
		return set_error(c, MORI_ENOMEM, "mmap %zu bytes: %s", size, strerror(e));
	}
	m->ptr = p;
	m->map_base = p;
	m->map_len = size;
	m->owns_alloc = 1;
	Mori__MemRegister mr = MORI__MEM_REGISTER__INIT;
	mr.kind = MORI_MEM_HOST;
	mr.size = size;
	mr.has_fd = 1;
	mr.addr = (uint64_t)(uintptr_t)p;
	int rc = do_register(c, m, &mr, fd);
	close(fd); /* the daemon holds its own reference now */
	if (rc != MORI_OK) {
		munmap(p, size);
		free(m);
		return rc;
	}
	*out = m;
	return MORI_OK;
}

/* If [ptr, ptr+len) lies in one shared file mapping, return an fd of that file and the offset of
 * ptr in it; -1 otherwise (private memory: peers reach it by cross-memory attach). *mapped: is
 * the whole range mapped (by one mapping or several adjacent ones)? */
static int shared_file_of(void *ptr, size_t len, uint64_t *offset, int *mapped)
{
	*mapped = 1; /* unknown: the daemon checks too */
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -1;
	char line[512];
	uintptr_t a = (uintptr_t)ptr, cur = a, end = a + len;
	int fd = -1, first = 1;
	*mapped = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off;
		char perms[8];
		if (strchr(line, '\n') == NULL) { /* a long path: skip the rest of the line */
			int ch;
			while ((ch = fgetc(f)) != EOF && ch != '\n')
				;
		}
		if (sscanf(line, "%lx-%lx %7s %lx", &lo, &hi, perms, &off) != 4 || hi <= cur)
			continue;
		if (lo > cur)
			break; /* a hole */
		if (first && a + len <= hi && perms[3] == 's') {
			char path[96];
			snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", lo, hi);
			fd = open(path, O_RDWR | O_CLOEXEC);
			*offset = off + (a - lo);
		}
		first = 0;
		cur = hi;
		if (cur >= end) {
			*mapped = 1;
			break;
		}
	}
	fclose(f);
	return fd;
}

int mori_mem_register(mori_client *c, void *ptr, size_t len, mori_mem_kind kind, mori_mem **out)
{
	if (!c || !ptr || !out || len == 0)
		return set_error(c, MORI_EINVAL, "mem_register: NULL argument or length 0");
	int crc = client_check(c);
	if (crc != MORI_OK)
		return crc;
	if (kind != MORI_MEM_HOST && kind != MORI_MEM_VRAM)
		return set_error(c, MORI_EINVAL, "mem_register: unknown kind %d", (int)kind);
	if ((uintptr_t)ptr + len < (uintptr_t)ptr)
		return set_error(c, MORI_ERANGE, "mem_register: range [%p, +%zu) wraps the address space", ptr, len);
	int dev = gpu_ptr_is_device(ptr);
	if (kind == MORI_MEM_HOST && dev == 1)
		return set_error(c, MORI_EINVAL, "mem_register: %p is GPU memory, registered as HOST", ptr);
	if (kind == MORI_MEM_VRAM && dev == 0)
		return set_error(c, MORI_EINVAL, "mem_register: %p is host memory, registered as VRAM", ptr);
	mori_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return set_error(c, MORI_ENOMEM, "out of memory");
	Mori__MemRegister mr = MORI__MEM_REGISTER__INIT;
	mr.kind = (uint32_t)kind;
	mr.size = len;
	mr.addr = (uint64_t)(uintptr_t)ptr;
	int fd = -1, rc;
	uint8_t ipc[128];
	if (kind == MORI_MEM_VRAM) {
		rc = gpu_mem_register(c, m, ptr, len, &mr, ipc, sizeof(ipc), &fd);
		if (rc != MORI_OK) {
			free(m);
			return rc;
		}
	} else {
		uint64_t off = 0;
		int mapped;
		fd = shared_file_of(ptr, len, &off, &mapped);
		if (!mapped) {
			free(m);
			return set_error(c, MORI_ERANGE, "mem_register: range [%p, +%zu) is not mapped in this process",
					 ptr, len);
		}
		mr.has_fd = fd >= 0;
		mr.fd_offset = off;
		m->ptr = ptr;
	}
	mr.has_fd = fd >= 0;
	rc = do_register(c, m, &mr, fd);
	if (fd >= 0)
		close(fd);
	if (rc != MORI_OK) {
		if (kind == MORI_MEM_VRAM)
			gpu_mem_close(c, m);
		free(m);
		return rc;
	}
	*out = m;
	return MORI_OK;
}

void *mori_mem_ptr(const mori_mem *m)
{
	if (!m || !m->local)
		return NULL;
	return m->kind == MORI_MEM_VRAM ? (void *)(uintptr_t)m->dptr : m->ptr;
}

size_t mori_mem_size(const mori_mem *m) { return m ? (size_t)m->size : 0; }

static void mem_close_all(mori_client *c)
{
	while (c->mems)
		mori_mem_deregister(c->mems);
}

__attribute__((constructor)) static void mem_hooks(void)
{
	client_on_revoked(mem_revoked);
	client_on_close(CLOSE_REGIONS, mem_close_all);
}

static void wait_idle(mori_mem *m)
{
	uint64_t deadline = mori_now_us() + DEREG_WAIT_US;
	while (atomic_load(&m->inflight) > 0 && mori_now_us() < deadline) {
		client_reap(m->c);
		usleep(100);
	}
}

int mori_mem_deregister(mori_mem *m)
{
	if (!m)
		return MORI_OK;
	mori_client *c = m->c;
	int rc = client_check(c);
	if (rc != MORI_OK)
		return rc; /* a child after fork: the parent's region stays */
	wait_idle(m);
	if (atomic_load(&m->inflight) > 0 && xfer_cancel_mem(c, m) > 0)
		wait_idle(m); /* what is left are same-node copies, which finish on their own */
	if (atomic_load(&m->inflight) > 0)
		/* freeing m now would let a running copy write into freed memory: keep it all */
		return set_error(c, MORI_EBUSY, "deregister: %d same-node transfers still use region %llu; "
			"wait for them, then deregister again", (int)atomic_load(&m->inflight),
			(unsigned long long)m->region_id);
	mem_unlink(c, m);
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__Reply *rep = NULL;
	if (m->local) {
		Mori__MemDeregister d = MORI__MEM_DEREGISTER__INIT;
		d.region_id = m->region_id;
		req.body_case = MORI__REQUEST__BODY_MEM_DEREGISTER;
		req.mem_deregister = &d;
		rc = client_rpc(c, &req, NULL, 0, &rep, NULL, NULL);
	} else {
		Mori__MemClose d = MORI__MEM_CLOSE__INIT;
		d.region_id = m->remote ? m->remote_ref : m->region_id;
		req.body_case = MORI__REQUEST__BODY_MEM_CLOSE;
		req.mem_close = &d;
		rc = client_rpc(c, &req, NULL, 0, &rep, NULL, NULL);
	}
	if (rep)
		mori__reply__free_unpacked(rep, NULL);
	if (m->kind == MORI_MEM_VRAM || m->gpu_priv) /* host regions the GPU touched are pinned */
		gpu_mem_close(c, m);
	if (m->map_base)
		munmap(m->map_base, m->map_len);
	if (m->has_owner_pidfd)
		close(m->owner_pidfd);
	free(m);
	return rc;
}

/* ---- handles ---- */

static void fill_handle(const mori_mem *m, Mori__Handle *h)
{
	mori__handle__init(h);
	h->node = (char *)m->node;
	h->epoch = m->epoch;
	h->region_id = m->region_id;
	h->generation = m->generation;
	h->size = m->size;
	h->kind = (uint32_t)m->kind;
	h->secret.data = (uint8_t *)m->secret;
	h->secret.len = m->secret_len;
}

int mori_mem_pack(const mori_mem *m, void *blob, size_t cap, size_t *len)
{
	if (!m || !blob || !len)
		return set_error(NULL, MORI_EINVAL, "mem_pack: NULL argument");
	int crc = client_check(m->c);
	if (crc != MORI_OK)
		return crc;
	Mori__Handle h;
	fill_handle(m, &h);
	size_t n = mori__handle__get_packed_size(&h) + 1;
	if (n > cap || n > MORI_MEM_BLOB_MAX)
		return set_error(m->c, MORI_EMSGSIZE, "mem_pack: blob needs %zu bytes, cap is %zu", n, cap);
	((uint8_t *)blob)[0] = WIRE_BLOB_MAGIC;
	mori__handle__pack(&h, (uint8_t *)blob + 1);
	*len = n;
	return MORI_OK;
}

/* An opener of memory reached by cross-memory attach acknowledges its revocation even while
 * idle: the hang-up watcher reaps for it (client.c). Best effort: without the thread, morid's
 * 5 s deadline still ends the owner's wait. */
static void cma_watch(mori_client *c)
{
	pthread_mutex_lock(&c->group_lock);
	if (client_hup_watch(c) == MORI_OK && !atomic_exchange(&c->hup_reap, 1)) {
		uint64_t one = 1; /* a thread a group started sleeps in poll without a timeout: wake it */
		if (write(c->hup_efd, &one, sizeof(one)) < 0) {
			/* EAGAIN: the counter is full, so a wake is pending anyway */
		}
	}
	pthread_mutex_unlock(&c->group_lock);
}

/* Map what the daemon's open reply describes. */
static int open_from_reply(mori_client *c, mori_mem *m, const Mori__MemOpenReply *o, int *fds, int nfds,
			   int populate)
{
	mem_take_handle(m, o->handle);
	m->c = c;
	if (m->kind == MORI_MEM_VRAM && !o->remote)
		return gpu_mem_open(c, m, o, fds, nfds); /* owns fds (several VMM allocations: one each) */
	for (int i = 1; i < nfds; i++)
		close(fds[i]);
	int fd = nfds > 0 ? fds[0] : -1;
	if (o->remote) {
		m->remote = 1;
		m->remote_ref = o->remote_ref;
		if (fd >= 0)
			close(fd);
		return MORI_OK;
	}
	m->owner_pid = o->owner_pid;
	m->owner_addr = o->owner_addr;
	if (fd >= 0 && o->has_owner_pidfd) {
		m->has_owner_pidfd = 1;
		m->owner_pidfd = fd; /* ours until deregister */
		cma_watch(c);
		return MORI_OK; /* cross-memory attach */
	}
	if (fd < 0) {
		cma_watch(c);
		return MORI_OK; /* cross-memory attach (a morid without pidfds: the bare pid) */
	}
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t start = o->fd_offset & ~(uint64_t)(pg - 1);
	uint64_t len = o->fd_offset - start + m->size;
	/* Populate now: a peer's KV pool is opened once and used for hours, and a first touch
	 * through a fresh mapping costs a fault per page in the middle of a transfer. (Not a
	 * symmetric heap: populating would commit every byte of every peer's heap.) */
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, (off_t)start);
	close(fd);
	if (p == MAP_FAILED)
		return set_error(c, MORI_ESYS, "mmap peer region %llu: %s", (unsigned long long)m->region_id,
				 strerror(errno));
	m->map_base = p;
	m->map_len = len;
	m->ptr = (uint8_t *)p + (o->fd_offset - start);
	return MORI_OK;
}

static int open_rpc(mori_client *c, Mori__Request *req, int populate, mori_mem **out)
{
	Mori__Reply *rep;
	int fds[WIRE_MAX_FDS], nfds = 0;
	int rc = client_rpc(c, req, NULL, 0, &rep, fds, &nfds);
	if (rc != MORI_OK)
		return rc;
	mori_mem *m = NULL;
	if (rep->body_case != MORI__REPLY__BODY_MEM_OPEN || !rep->mem_open->handle || !(m = calloc(1, sizeof(*m)))) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		rc = rep->body_case != MORI__REPLY__BODY_MEM_OPEN || !rep->mem_open->handle
			     ? set_error(c, MORI_EPROTO, "open reply without a handle")
			     : set_error(c, MORI_ENOMEM, "out of memory");
		mori__reply__free_unpacked(rep, NULL);
		return rc;
	}
	rc = open_from_reply(c, m, rep->mem_open, fds, nfds, populate); /* owns the fds */
	mori__reply__free_unpacked(rep, NULL);
	if (rc != MORI_OK) {
		free(m);
		return rc;
	}
	mem_link(c, m);
	*out = m;
	return MORI_OK;
}

int mori_mem_unpack(mori_client *c, const void *blob, size_t len, mori_mem **out)
{
	if (!c || !blob || !out)
		return set_error(c, MORI_EINVAL, "mem_unpack: NULL argument");
	int crc = client_check(c);
	if (crc != MORI_OK)
		return crc;
	if (len < 2 || len > MORI_MEM_BLOB_MAX || ((const uint8_t *)blob)[0] != WIRE_BLOB_MAGIC)
		return set_error(c, MORI_EPROTO, "mem_unpack: not a mori blob");
	Mori__Handle *h = mori__handle__unpack(NULL, len - 1, (const uint8_t *)blob + 1);
	if (!h)
		return set_error(c, MORI_EPROTO, "mem_unpack: corrupt blob");
	if (!h->secret.len) {
		mori__handle__free_unpacked(h, NULL);
		return set_error(c, MORI_EPERM, "mem_unpack: the blob opens nothing: only the region's owner packs "
						"blobs that carry its secret (this one was packed by an opener)");
	}
	int rc = mem_open_handle(c, h, out);
	mori__handle__free_unpacked(h, NULL);
	return rc;
}

static int open_handle(mori_client *c, const Mori__Handle *h, int populate, mori_mem **out)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__MemOpen mo = MORI__MEM_OPEN__INIT;
	mo.handle = (Mori__Handle *)h;
	req.body_case = MORI__REQUEST__BODY_MEM_OPEN;
	req.mem_open = &mo;
	return open_rpc(c, &req, populate, out);
}

int mem_open_handle(mori_client *c, const Mori__Handle *h, mori_mem **out)
{
	return open_handle(c, h, 1, out);
}

int mem_open_heap(mori_client *c, const Mori__Handle *h, mori_mem **out)
{
	return open_handle(c, h, 0, out);
}

int mori_mem_publish(mori_mem *m, const char *name)
{
	return mori_mem_publish_access(m, name, NULL);
}

int mori_access_init(mori_access *a, size_t size)
{
	static const mori_access defaults = {.size = sizeof(mori_access)};
	return opts_init(a, size, OPTS_MIN_ACCESS, &defaults, sizeof(defaults));
}

int mori_mem_publish_access(mori_mem *m, const char *name, const mori_access *access)
{
	if (!m || !name)
		return set_error(NULL, MORI_EINVAL, "mem_publish: NULL argument");
	int crc = client_check(m->c);
	if (crc != MORI_OK)
		return crc;
	if (!m->local)
		return set_error(m->c, MORI_EINVAL, "mem_publish: only local regions can be published");
	mori_access own = {.size = sizeof(own)};
	if (access) {
		int orc = opts_take(&own, sizeof(own), access, OPTS_MIN_ACCESS);
		if (orc)
			return set_error(m->c, orc, "mem_publish: access->size %zu is not a mori_access this library "
						    "reads (%zu bytes): call mori_access_init", access->size, sizeof(own));
		access = &own;
	}
	if (access && ((access->n_uids && !access->uids) || (access->n_nodes && !access->nodes)))
		return set_error(m->c, MORI_EINVAL, "mem_publish: access list with NULL arrays");
	if (access && (access->n_uids > 256 || access->n_nodes > 256)) /* mori.h's limit; morid checks again */
		return set_error(m->c, MORI_EINVAL, "mem_publish: at most 256 uids and 256 nodes");
	for (size_t i = 0; access && i < access->n_nodes; i++)
		if (!access->nodes[i]) /* protobuf-c would pack it as a string and crash */
			return set_error(m->c, MORI_EINVAL, "mem_publish: access list node %zu is NULL", i);
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__MemPublish p = MORI__MEM_PUBLISH__INIT;
	Mori__Reply *rep;
	p.region_id = m->region_id;
	p.name = (char *)name;
	if (access) {
		p.has_access = 1;
		p.n_uids = access->n_uids;
		p.uids = (uint32_t *)access->uids;
		p.n_nodes = access->n_nodes;
		p.nodes = (char **)access->nodes;
	}
	req.body_case = MORI__REQUEST__BODY_MEM_PUBLISH;
	req.mem_publish = &p;
	int rc = client_rpc(m->c, &req, NULL, 0, &rep, NULL, NULL);
	if (rc == MORI_OK)
		mori__reply__free_unpacked(rep, NULL);
	return rc;
}

int mori_mem_open_remote(mori_client *c, const char *node, const char *name, mori_mem **out)
{
	if (!c || !name || !out)
		return set_error(c, MORI_EINVAL, "mem_open_remote: NULL argument");
	int crc = client_check(c);
	if (crc != MORI_OK)
		return crc;
	/* morid's own "host:port" rule (common/host_port.h), checked here too so that a malformed
	 * address is MORI_EINVAL whatever the daemon's configuration (a morid without a peer
	 * listener answers MORI_ECONN before it looks at the address) */
	char host[HOST_PORT_MAX + 1];
	int port;
	if (node && node[0] && host_port_split(node, host, sizeof(host), &port) != 0)
		return set_error(c, MORI_EINVAL, "mem_open_remote: node '%.200s' is not host:port (port 1..65535)", node);
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__MemLookup l = MORI__MEM_LOOKUP__INIT;
	l.name = (char *)name;
	l.node = (char *)(node ? node : "");
	req.body_case = MORI__REQUEST__BODY_MEM_LOOKUP;
	req.mem_lookup = &l;
	return open_rpc(c, &req, 1, out);
}
