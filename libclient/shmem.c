/* libmori MORI-SHMEM, the group's life: joining (by name or unique id) through the node's morid,
 * mapping every local peer's heap, the collective calls (malloc, calloc, free, barrier_all)
 * answered by the group's root daemon, and leaving. Status, holds and the local queries are in
 * shmem_status.c, host puts and gets in shmem_rma.c, VRAM heaps and the device state in
 * shmem_gpu.c: this file calls them, they call none of it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conv.h"
#include "shmem_int.h"
#include "shmem_wire.h"

#define RPC_GRACE_MS 5000 /* the daemon answers by the deadline; this covers its backstop */

static const mori_shmem_opts shmem_defaults = {
	.size = sizeof(mori_shmem_opts),
	.heap_kind = MORI_MEM_HOST,
	.gpu_device = -1,
};

int mori_shmem_opts_init(mori_shmem_opts *o, size_t size)
{
	return opts_init(o, size, OPTS_MIN_SHMEM, &shmem_defaults, sizeof(shmem_defaults));
}

/* The caller's opts (NULL: the defaults) as this library's struct, in *own. */
static int shmem_opts_take(mori_client *c, const mori_shmem_opts *opts, mori_shmem_opts *own)
{
	*own = shmem_defaults;
	int rc = opts ? opts_take(own, sizeof(*own), opts, OPTS_MIN_SHMEM) : MORI_OK;
	if (rc)
		return set_error(c, rc, "shmem init: opts->size %zu is not a mori_shmem_opts this library reads (%zu "
					"bytes): call mori_shmem_opts_init", opts->size, sizeof(*own));
	return MORI_OK;
}

static int timeout_ms_of(const mori_group *g)
{
	int64_t ms = g->timeout_us / 1000;
	return (int)(ms > 3600000 ? 3600000 : ms < 1 ? 1 : ms);
}

/* ---- joining ---- */

/* morid's shmem_heap_size (its config, asked on the session), for VRAM heaps the PE allocates. */
static int daemon_heap_size(mori_client *c, uint64_t *out)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__ConfigRequest cq = MORI__CONFIG_REQUEST__INIT;
	Mori__Reply *rep;
	req.body_case = MORI__REQUEST__BODY_CONFIG;
	req.config = &cq;
	int rc = client_rpc(c, &req, NULL, 0, &rep, NULL, NULL);
	if (rc)
		return rc;
	rc = set_error(c, MORI_EPROTO, "morid's configuration has no shmem_heap_size");
	if (rep->body_case == MORI__REPLY__BODY_CONFIG)
		for (size_t i = 0; i < rep->config->n_entries; i++)
			if (!strcmp(rep->config->entries[i]->name, "shmem_heap_size")) {
				*out = strtoull(rep->config->entries[i]->value, NULL, 0);
				rc = MORI_OK;
			}
	mori__reply__free_unpacked(rep, NULL);
	return rc;
}

/* Everything of g but the struct itself. */
static void group_close(mori_group *g)
{
	shmem_rma_close(g);
	shmem_gpu_close(g);
	for (int i = 0; g->peers && i < g->n_pes; i++)
		if (g->peers[i].m && i != g->my_pe)
			mori_mem_deregister(g->peers[i].m);
	if (g->own) {
		if (g->kind == MORI_MEM_VRAM)
			gpu_mem_close(g->c, g->own); /* our allocation: morid and the peers hold theirs */
		free(g->own);
	}
	if (g->heap_map)
		munmap(g->heap_map, g->heap_size);
	if (g->ctrl)
		munmap(g->ctrl, g->ctrl_len);
	free(g->peers);
	free(g->team);
	free(g->state_peer_base);
	free(g->state_team);
	pthread_mutex_destroy(&g->lock);
	pthread_mutex_destroy(&g->rma_lock);
	g->own = NULL, g->heap_map = NULL, g->ctrl = NULL, g->peers = NULL, g->team = NULL;
	g->state_peer_base = NULL, g->state_team = NULL;
}

static void group_free(mori_group *g)
{
	if (!g)
		return;
	group_close(g);
	free(g);
}

static int send_leave(mori_group *g)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__GroupLeave gl = MORI__GROUP_LEAVE__INIT;
	Mori__Reply *rep;
	gl.group_id = g->id;
	req.body_case = MORI__REQUEST__BODY_GROUP_LEAVE;
	req.group_leave = &gl;
	int rc = client_rpc(g->c, &req, NULL, 0, &rep, NULL, NULL);
	if (rc == MORI_OK)
		mori__reply__free_unpacked(rep, NULL);
	return rc;
}

/* Map this PE's control page and (HOST) heap; make the own heap's region. */
static int map_own(mori_group *g, const Mori__GroupJoinReply *jr, const int *fds, int nfds)
{
	mori_client *c = g->c;
	if (nfds < (g->kind == MORI_MEM_HOST ? 2 : 1) || jr->ctrl_bytes < MORI_SHMEM_CTRL_BYTES)
		return set_error(c, MORI_EPROTO, "join reply without its control page or heap (%d fds)", nfds);
	void *p = mmap(NULL, jr->ctrl_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	if (p == MAP_FAILED)
		return set_error(c, MORI_ESYS, "mmap control page: %s", strerror(errno));
	g->ctrl = p;
	g->ctrl_len = jr->ctrl_bytes;
	g->ring_entries = jr->ring_entries;
	if (g->ctrl->magic != MORI_SHMEM_MAGIC || g->ctrl->ring_entries != jr->ring_entries ||
	    MORI_SHMEM_CTRL_BYTES + (uint64_t)jr->ring_entries * sizeof(struct mori_shmem_preq) > jr->ctrl_bytes)
		return set_error(c, MORI_EPROTO, "the control page morid sent is not one");
	Mori__Handle *h = NULL;
	const Mori__GroupMember *me = jr->members[g->my_pe];
	if (!(h = mori__handle__unpack(NULL, me->heap.len, me->heap.data)) || h->size != g->heap_size)
		goto bad;
	if (g->kind == MORI_MEM_HOST) {
		p = mmap(NULL, g->heap_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
		if (p == MAP_FAILED) {
			mori__handle__free_unpacked(h, NULL);
			return set_error(c, MORI_ESYS, "mmap heap of %llu bytes: %s", (unsigned long long)g->heap_size,
					 strerror(errno));
		}
		g->heap_map = p;
		g->base = (uint64_t)(uintptr_t)p;
		if (!(g->own = calloc(1, sizeof(*g->own)))) {
			mori__handle__free_unpacked(h, NULL);
			return set_error(c, MORI_ENOMEM, "out of memory");
		}
		g->own->kind = MORI_MEM_HOST;
		g->own->ptr = p;
	}
	mem_take_handle(g->own, h); /* VRAM: the allocation shmem_gpu_heap_alloc made */
	g->own->local = 1;
	g->own->c = c;
	if (g->kind == MORI_MEM_VRAM)
		g->base = g->own->dptr;
	mori__handle__free_unpacked(h, NULL);
	return MORI_OK;
bad:
	if (h)
		mori__handle__free_unpacked(h, NULL);
	return set_error(c, MORI_EPROTO, "join reply: this PE's heap handle is not one of %llu bytes",
			 (unsigned long long)g->heap_size);
}

/* Every peer's handle; the local ones mapped now (at the same offsets: peer_base + o is the
 * object at heap offset o of that PE). */
static int map_peers(mori_group *g, const Mori__GroupJoinReply *jr)
{
	mori_client *c = g->c;
	if (!(g->peers = calloc((size_t)g->n_pes, sizeof(*g->peers))) || !(g->team = calloc((size_t)g->n_pes, sizeof(int))))
		return set_error(c, MORI_ENOMEM, "out of memory");
	for (int i = 0; i < g->n_pes; i++) {
		const Mori__GroupMember *x = jr->members[i];
		struct gpeer *p = &g->peers[i];
		if (x->rank != i || x->heap.len > sizeof(p->handle))
			return set_error(c, MORI_EPROTO, "join reply: member %d is malformed", i);
		p->local = x->local;
		p->pid = x->pid;
		snprintf(p->node, sizeof(p->node), "%s", x->node ? x->node : "");
		memcpy(p->handle, x->heap.data, x->heap.len);
		p->handle_len = x->heap.len;
		if (p->local)
			g->team[g->team_n++] = i;
		if (i == g->my_pe) {
			p->local = 1;
			p->m = g->own;
			p->base = g->base;
			continue;
		}
		if (!p->local)
			continue; /* opened on first use (shmem_rma.c) */
		Mori__Handle *h = mori__handle__unpack(NULL, p->handle_len, p->handle);
		if (!h)
			return set_error(c, MORI_EPROTO, "join reply: PE %d's heap handle is malformed", i);
		int rc = mem_open_heap(c, h, &p->m);
		mori__handle__free_unpacked(h, NULL);
		if (rc)
			return set_error(c, rc, "group '%s': cannot map PE %d's heap: %s", g->name, i,
					 mori_client_last_error(c));
		if (p->m->size != g->heap_size)
			return set_error(c, MORI_EPROTO, "group '%s': PE %d's heap has %llu bytes, not %llu", g->name, i,
					 (unsigned long long)p->m->size, (unsigned long long)g->heap_size);
		p->base = g->kind == MORI_MEM_VRAM ? p->m->dptr : (uint64_t)(uintptr_t)p->m->ptr;
		if (!p->base)
			return set_error(c, MORI_EPROTO, "group '%s': PE %d's heap could not be mapped here", g->name, i);
	}
	return MORI_OK;
}

/* The device API's state, host copy (HOST heaps: what mori_shmem_state gives). */
static int build_state(mori_group *g)
{
	struct mori_shmem_state *s = &g->state;
	memset(s, 0, sizeof(*s));
	s->magic = MORI_SHMEM_MAGIC;
	s->my_pe = g->my_pe;
	s->n_pes = g->n_pes;
	s->node_pes = g->team_n;
	s->heap_size = g->heap_size;
	s->heap_base = g->base;
	if (!(g->state_peer_base = calloc((size_t)g->n_pes, sizeof(uint64_t))) ||
	    !(g->state_team = calloc((size_t)g->team_n + 1, sizeof(int32_t))))
		return set_error(g->c, MORI_ENOMEM, "out of memory");
	for (int i = 0; i < g->n_pes; i++)
		g->state_peer_base[i] = g->peers[i].local ? g->peers[i].base : 0;
	for (int i = 0; i < g->team_n; i++)
		g->state_team[i] = g->team[i];
	s->peer_base = g->state_peer_base;
	s->node_team = g->state_team;
	s->ctrl = g->ctrl;
	s->ring = (struct mori_shmem_preq *)((char *)g->ctrl + MORI_SHMEM_CTRL_BYTES);
	return g->kind == MORI_MEM_VRAM ? shmem_gpu_state(g) : MORI_OK;
}

/* The join's request and its reply; fd (VRAM) is sent, not closed. */
static int join_rpc(mori_group *g, const char *root, const void *blob, size_t bloblen, int fd, Mori__Reply **rep,
		    int *fds, int *nfds)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__GroupJoin j = MORI__GROUP_JOIN__INIT;
	j.name = g->name;
	j.rank = g->my_pe;
	j.world_size = g->n_pes;
	j.heap_size = g->heap_size;
	j.heap_kind = (uint32_t)g->kind;
	j.root = (char *)(root ? root : "");
	j.timeout_ms = (uint32_t)timeout_ms_of(g);
	if (g->kind == MORI_MEM_VRAM) {
		j.gpu_ipc.data = (uint8_t *)blob;
		j.gpu_ipc.len = bloblen;
		j.gpu_addr = g->own->dptr;
		j.gpu_device = g->own->gpu_device;
	}
	req.body_case = MORI__REQUEST__BODY_GROUP_JOIN;
	req.group_join = &j;
	int rc = client_rpc_timeout(g->c, &req, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0, rep, fds, nfds,
				    timeout_ms_of(g) + RPC_GRACE_MS);
	if (rc)
		return rc;
	const Mori__GroupJoinReply *jr = (*rep)->body_case == MORI__REPLY__BODY_GROUP_JOIN ? (*rep)->group_join : NULL;
	if (jr)
		g->id = jr->group_id; /* morid counts us in: a failure from here on leaves */
	/* HOST heap sizes are the daemon's (its default, page-rounded); VRAM ones ours */
	if (jr && jr->n_members == (size_t)g->n_pes && jr->rank == g->my_pe && jr->heap_kind == (uint32_t)g->kind &&
	    jr->heap_size > MORI_SHMEM_RESERVED && (g->kind == MORI_MEM_HOST || jr->heap_size == g->heap_size))
		return MORI_OK;
	for (int i = 0; i < *nfds; i++)
		close(fds[i]);
	*nfds = 0;
	mori__reply__free_unpacked(*rep, NULL);
	*rep = NULL;
	return set_error(g->c, MORI_EPROTO, "morid's join reply does not describe this PE's group");
}

static int join_check(mori_client *c, const char *name, int rank, int world, const mori_shmem_opts *o)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > SHMEM_NAME_MAX)
		return set_error(c, MORI_EINVAL, "group_join: a group name of 1..%d bytes", SHMEM_NAME_MAX);
	if (world < 1 || world > MORI_SHMEM_MAX_PES)
		return set_error(c, MORI_EINVAL, "group_join: world size %d (1..%d)", world, MORI_SHMEM_MAX_PES);
	if (rank < 0 || rank >= world)
		return set_error(c, MORI_EINVAL, "group_join: PE %d is out of range for a world of %d", rank, world);
	if (o->heap_kind != MORI_MEM_HOST && o->heap_kind != MORI_MEM_VRAM)
		return set_error(c, MORI_EINVAL, "group_join: heap kind %d (MORI_MEM_HOST or MORI_MEM_VRAM)", (int)o->heap_kind);
	if (o->heap_size && o->heap_size <= MORI_SHMEM_RESERVED)
		return set_error(c, MORI_EINVAL, "group_join: a heap of %llu bytes leaves nothing past the %u reserved",
				 (unsigned long long)o->heap_size, MORI_SHMEM_RESERVED);
	return MORI_OK;
}

/* VRAM: the PE's own allocation, made before the join (morid gets its fd). */
static int vram_prepare(mori_group *g, const mori_shmem_opts *o, int *fd, void *blob, size_t *bloblen)
{
	int ordinal = o->gpu_device;
	if (ordinal < 0) {
		const char *e = getenv("MORI_GPU_DEVICE");
		ordinal = e && *e ? atoi(e) : 0;
	}
	g->gpu_device = ordinal;
	if (!g->heap_size) {
		int rc = daemon_heap_size(g->c, &g->heap_size);
		if (rc)
			return rc;
	}
	return shmem_gpu_heap_alloc(g->c, ordinal, &g->heap_size, &g->own, fd, blob, bloblen);
}

int mori_shmem_init(mori_client *c, const char *name, int rank, int world_size, const mori_shmem_opts *caller_opts,
		    mori_group **out)
{
	if (!c || !out)
		return set_error(c, MORI_EINVAL, "shmem init: NULL argument");
	*out = NULL;
	int rc = client_check(c);
	if (rc)
		return rc;
	mori_shmem_opts def;
	if ((rc = shmem_opts_take(c, caller_opts, &def)))
		return rc;
	const mori_shmem_opts *opts = &def;
	rc = join_check(c, name, rank, world_size, opts);
	if (rc)
		return rc;
	mori_group *g = calloc(1, sizeof(*g));
	if (!g)
		return set_error(c, MORI_ENOMEM, "out of memory");
	pthread_mutex_init(&g->lock, NULL);
	pthread_mutex_init(&g->rma_lock, NULL);
	g->c = c;
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->my_pe = rank;
	g->n_pes = world_size;
	g->kind = opts->heap_kind;
	g->gpu_device = -1;
	g->heap_size = opts->heap_size;
	g->timeout_us = opts->timeout_us > 0 ? opts->timeout_us : SHMEM_DEFAULT_TIMEOUT_MS * 1000ll;
	uint8_t blob[64];
	size_t bloblen = 0;
	int fd = -1, fds[WIRE_MAX_FDS], nfds = 0;
	Mori__Reply *rep = NULL;
	if (g->kind == MORI_MEM_VRAM && (rc = vram_prepare(g, opts, &fd, blob, &bloblen))) {
		group_free(g);
		return rc;
	}
	rc = join_rpc(g, opts->root, blob, bloblen, fd, &rep, fds, &nfds);
	if (fd >= 0)
		close(fd); /* morid holds its own now */
	if (rc) {
		if (g->id)
			send_leave(g);
		group_free(g);
		return rc;
	}
	const Mori__GroupJoinReply *jr = rep->group_join;
	g->id = jr->group_id;
	g->heap_size = jr->heap_size;
	if ((rc = map_own(g, jr, fds, nfds)) == MORI_OK && (rc = map_peers(g, jr)) == MORI_OK)
		rc = build_state(g);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	mori__reply__free_unpacked(rep, NULL);
	if (rc) {
		char keep[512];
		snprintf(keep, sizeof(keep), "%s", mori_client_last_error(c));
		send_leave(g);
		group_free(g);
		return set_error(c, rc, "%s", keep);
	}
	pthread_mutex_lock(&c->group_lock);
	g->next = c->groups;
	c->groups = g;
	rc = client_hup_watch(c);
	pthread_mutex_unlock(&c->group_lock);
	if (rc) {
		char keep[512];
		snprintf(keep, sizeof(keep), "group_join: %s", mori_client_last_error(c));
		mori_shmem_finalize(g); /* without the watcher a dead morid would go unnoticed */
		return set_error(c, rc, "%s", keep);
	}
	/* Every PE has mapped its peers before any returns: a PE that leaves as soon as its join
	 * returns would otherwise take its heap away from a slower peer still mapping it (that
	 * peer's join failed with MORI_ESTALE, "region no longer registered"). */
	if ((rc = mori_shmem_barrier_all(g)) != MORI_OK) {
		char keep[512];
		snprintf(keep, sizeof(keep), "group_join: the barrier that ends the join: %s", mori_client_last_error(c));
		mori_shmem_finalize(g);
		return set_error(c, rc, "%s", keep);
	}
	*out = g;
	return MORI_OK;
}

/* ---- unique ids ---- */

int mori_shmem_get_unique_id(mori_client *c, void *uid, size_t cap, size_t *len)
{
	if (!c || !uid || !len)
		return set_error(c, MORI_EINVAL, "get_unique_id: NULL argument");
	uint64_t r[2];
	if (getrandom_u64(&r[0]) || getrandom_u64(&r[1]))
		return set_error(c, MORI_ESYS, "getrandom: %s", strerror(errno));
	char name[48];
	snprintf(name, sizeof(name), "uid-%016llx%016llx", (unsigned long long)r[0], (unsigned long long)r[1]);
	const char *root = mori_client_node(c);
	size_t rl = strlen(root), nl = strlen(name), n = 8 + rl + 1 + nl + 1;
	if (n > MORI_SHMEM_UID_BYTES || n > cap)
		return set_error(c, MORI_EMSGSIZE, "get_unique_id: the id needs %zu bytes, cap is %zu", n, cap);
	uint8_t *p = uid;
	uint32_t magic = SHMEM_UID_MAGIC, ver = SHMEM_UID_VERSION;
	memcpy(p, &magic, 4);
	memcpy(p + 4, &ver, 4);
	memcpy(p + 8, root, rl + 1);
	memcpy(p + 8 + rl + 1, name, nl + 1);
	*len = n;
	return MORI_OK;
}

int mori_shmem_init_uid(mori_client *c, const void *uid, size_t len, int rank, int world_size,
			const mori_shmem_opts *opts, mori_group **out)
{
	if (!c || !uid || !out)
		return set_error(c, MORI_EINVAL, "init_uid: NULL argument");
	const uint8_t *p = uid;
	uint32_t magic, ver;
	if (len < 10 || len > MORI_SHMEM_UID_BYTES)
		return set_error(c, MORI_EINVAL, "init_uid: %zu bytes is not a unique id", len);
	memcpy(&magic, p, 4);
	memcpy(&ver, p + 4, 4);
	const char *root = (const char *)p + 8;
	const char *end = memchr(root, 0, len - 8);
	const char *name = end ? end + 1 : NULL;
	const char *nend = name ? memchr(name, 0, len - (size_t)(name - (const char *)p)) : NULL;
	if (magic != SHMEM_UID_MAGIC || ver != SHMEM_UID_VERSION || !nend)
		return set_error(c, MORI_EINVAL, "init_uid: not a unique id of mori_shmem_get_unique_id");
	for (const char *q = nend + 1; q < (const char *)p + len; q++)
		if (*q) /* zero padding (a fixed-size id buffer) is fine; other bytes are not ours */
			return set_error(c, MORI_EINVAL, "init_uid: %zu bytes after the id's end at byte %zu",
					 len - (size_t)(nend + 1 - (const char *)p), (size_t)(nend + 1 - (const char *)p));
	mori_shmem_opts o;
	int rc = shmem_opts_take(c, opts, &o);
	if (rc)
		return rc;
	char rootbuf[128];
	snprintf(rootbuf, sizeof(rootbuf), "%s", root);
	o.root = !strcmp(rootbuf, mori_client_node(c)) ? "" : rootbuf; /* our own daemon: no hop */
	return mori_shmem_init(c, name, rank, world_size, &o, out);
}

/* ---- leaving ---- */

static void unlink_group(mori_group *g)
{
	mori_client *c = g->c;
	pthread_mutex_lock(&c->group_lock);
	for (mori_group **pp = &c->groups; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	pthread_mutex_unlock(&c->group_lock);
}

/* In a child after fork: drop the child's copies (the list entry, the heap and control-page
 * mappings, the memory) and tell morid nothing, so the parent's group stays as it is. No lock:
 * the child has one thread. The local peers' heap mappings are regions of the client, which
 * a child lets go of with mori_client_close. */
static void leave_in_child(mori_group *g)
{
	for (mori_group **pp = &g->c->groups; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	if (g->heap_map)
		munmap(g->heap_map, g->heap_size);
	if (g->ctrl)
		munmap(g->ctrl, g->ctrl_len);
	free(g->gpu); /* device state of the parent's context: freed by the parent, not here */
	free(g->own);
	free(g->peers);
	free(g->team);
	free(g->state_peer_base);
	free(g->state_team);
	g->gpu = NULL, g->own = NULL, g->peers = NULL, g->team = NULL, g->state_peer_base = NULL, g->state_team = NULL;
	g->heap_map = NULL, g->ctrl = NULL;
	shmem_free_or_shell(g, SHMEM_LEFT_CHILD);
}

int mori_shmem_finalize(mori_group *g)
{
	if (!g || shmem_left(g))
		return MORI_OK; /* a shell (left already, kept for its communicators): nothing more to do */
	if (shmem_check(g)) {
		leave_in_child(g);
		return MORI_OK;
	}
	unlink_group(g);
	send_leave(g);
	group_close(g);
	shmem_free_or_shell(g, SHMEM_LEFT);
	return MORI_OK;
}

static void shmem_close_all(mori_client *c)
{
	while (c->groups)
		mori_shmem_finalize(c->groups);
}

__attribute__((constructor)) static void shmem_hooks(void) { client_on_close(CLOSE_GROUPS, shmem_close_all); }

/* ---- collective calls ---- */

/* One collective call; timeout_ms: its deadline at the root, 0 for the group's. */
static int gcall_t(mori_group *g, uint32_t op, uint64_t size, uint64_t align, uint64_t offset, uint32_t timeout_ms,
		   uint64_t *out)
{
	int rc = shmem_check(g);
	if (rc)
		return rc;
	pthread_mutex_lock(&g->lock);
	rc = shmem_abort_status(g);
	if (rc) {
		pthread_mutex_unlock(&g->lock);
		return rc;
	}
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__GroupCall q = MORI__GROUP_CALL__INIT;
	Mori__Reply *rep;
	q.group_id = g->id;
	q.seq = ++g->seq;
	q.op = op;
	q.size = size;
	q.align = align;
	q.offset = offset;
	q.timeout_ms = timeout_ms;
	req.body_case = MORI__REQUEST__BODY_GROUP_CALL;
	req.group_call = &q;
	rc = client_rpc_timeout(g->c, &req, NULL, 0, &rep, NULL, NULL, timeout_ms_of(g) + RPC_GRACE_MS);
	pthread_mutex_unlock(&g->lock);
	if (rc && client_session_gone(g->c)) {
		/* morid went away: the abort word is set here, now, so that the call and
		 * mori_shmem_status agree (ECANCELED, PE -1, unless morid gave a reason first) instead
		 * of status reading healthy until the hang-up thread comes round */
		shmem_session_lost(g->c);
		int a = shmem_abort_status(g);
		return a ? a : rc;
	}
	if (rc)
		return rc;
	if (out)
		*out = rep->body_case == MORI__REPLY__BODY_GROUP_CALL ? rep->group_call->offset : 0;
	mori__reply__free_unpacked(rep, NULL);
	return MORI_OK;
}

static int gcall(mori_group *g, uint32_t op, uint64_t size, uint64_t align, uint64_t offset, uint64_t *out)
{
	return gcall_t(g, op, size, align, offset, 0, out);
}

int shmem_barrier_coll(mori_group *g, uint64_t count, uint64_t tag, int64_t timeout_us)
{
	if (!g)
		return MORI_EINVAL;
	int64_t ms = (timeout_us + 999) / 1000;
	uint32_t t = timeout_us <= 0 ? 0 : ms > 3600000 ? 3600000 : (uint32_t)ms;
	return gcall_t(g, SHMEM_CALL_BARRIER, tag ? count : 0, tag, 0, t, NULL);
}

static int do_alloc(mori_group *g, uint32_t op, size_t size, size_t align, void **out)
{
	if (!g || !out)
		return set_error(g ? g->c : NULL, MORI_EINVAL, "shmem malloc: NULL argument");
	*out = NULL;
	uint64_t off = 0;
	/* 0 means SHMEM_MIN_ALIGN: sent as that, so a mismatch names the alignment in effect */
	int rc = gcall(g, op, size, align ? align : SHMEM_MIN_ALIGN, 0, &off);
	if (rc)
		return rc;
	if (off && (off >= g->heap_size || size > g->heap_size - off))
		return set_error(g->c, MORI_EPROTO, "the root daemon allocated [%#llx, +%zu) outside the heap",
				 (unsigned long long)off, size);
	*out = off ? (void *)(uintptr_t)(g->base + off) : NULL;
	return MORI_OK;
}

int mori_shmem_malloc(mori_group *g, size_t size, size_t align, void **out)
{
	return do_alloc(g, SHMEM_CALL_MALLOC, size, align, out);
}

int mori_shmem_calloc(mori_group *g, size_t size, size_t align, void **out)
{
	int rc = do_alloc(g, SHMEM_CALL_CALLOC, size, align, out);
	if (rc || !*out)
		return rc;
	/* each PE zeroes its own bytes; the barrier keeps every peer from writing before that */
	if (g->kind == MORI_MEM_VRAM)
		rc = shmem_gpu_zero(g, (uint64_t)(uintptr_t)*out, size);
	else
		memset(*out, 0, size);
	if (rc == MORI_OK)
		rc = gcall(g, SHMEM_CALL_BARRIER, 0, 0, 0, NULL);
	if (rc)
		*out = NULL;
	return rc;
}

int mori_shmem_free(mori_group *g, void *ptr)
{
	if (!g)
		return MORI_EINVAL;
	int64_t off = ptr ? mori_shmem_offset(g, ptr) : 0;
	if (off < 0)
		return set_error(g->c, MORI_EINVAL, "shmem free: %p is not in this PE's heap", ptr);
	return gcall(g, SHMEM_CALL_FREE, 0, 0, (uint64_t)off, NULL);
}

int mori_shmem_barrier_all(mori_group *g)
{
	if (!g)
		return MORI_EINVAL;
	return gcall(g, SHMEM_CALL_BARRIER, 0, 0, 0, NULL);
}
