/* libmori MORI-CCO: explicit communicators over MORI-SHMEM groups. A communicator joins a group
 * of its own from the unique id (its own heap, control page and proxy ring); memory is the heap's
 * symmetric allocator, windows are heap ranges agreed on by every rank (a matched collective call
 * the root daemon compares), device communicators are areas of the heap plus a slot of the
 * process's liveness table, and copy-engine queues are served by cco_ce.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cco_int.h"
#include "conv.h"
#include "gpu_int.h"
#include "shmem_wire.h"

#define OPTS_MIN_CCO_COMM OPTS_END(mori_cco_comm_opts, timeout_us)
#define OPTS_MIN_CCO_REQS OPTS_END(mori_cco_dev_comm_reqs, ce_queue_count)
#define CCO_MAX_WINDOWS 4096
#define CCO_CE_ENTRIES 256

struct cco_block { /* a mem_alloc'd block */
	struct cco_block *next;
	uint64_t off, bytes;
};

struct mori_cco_window {
	struct mori_cco_window *next;
	mori_cco_comm *comm;
	uint64_t off, bytes;
};

struct cco_dc { /* a device communicator's host side */
	struct cco_dc *next;
	uint32_t slot;
	uint64_t gen;
	uint64_t res_off, res_bytes;
	struct cco_ce *ce;
};

struct mori_cco_comm {
	mori_client *c;           /* the communicator's own session with morid (see create) */
	mori_group *g;
	int rank, n;
	int lsa_size, lsa_rank, node_start;
	int node_major;           /* every node's ranks consecutive */
	int nodes, equal_nodes;   /* nodes, and whether each holds lsa_size ranks */
	int64_t timeout_us;
	pthread_mutex_t lock;     /* the lists below */
	struct cco_block *blocks;
	struct mori_cco_window *wins;
	int n_wins;
	struct cco_dc *dcs;
};

/* ---- the liveness table (mori/device_host/cco_layout.h) ----
 * One page for the process, never freed: a kernel that still holds a device communicator after
 * its destroy reads a changed word, not freed memory. owner[] (host only) lets the host refuse a
 * device communicator whose communicator's group is gone. */
static uint64_t live_words[MORI_CCO_LIVE_SLOTS] __attribute__((aligned(4096)));
static mori_cco_comm *live_owner[MORI_CCO_LIVE_SLOTS];
static struct cco_dc *live_rec[MORI_CCO_LIVE_SLOTS];
static uint64_t live_next_gen = 1;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static int live_take(mori_cco_comm *k, struct cco_dc *h, uint32_t *slot, uint64_t *gen)
{
	pthread_mutex_lock(&live_lock);
	for (uint32_t i = 0; i < MORI_CCO_LIVE_SLOTS; i++)
		if (!live_owner[i]) {
			live_owner[i] = k;
			live_rec[i] = h;
			*slot = i;
			*gen = live_next_gen++;
			__atomic_store_n(&live_words[i], *gen, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&live_lock);
			return MORI_OK;
		}
	pthread_mutex_unlock(&live_lock);
	return set_error(k->c, MORI_EBUSY, "dev_comm_create: this process holds %d device communicators already",
			 MORI_CCO_LIVE_SLOTS);
}

static void live_drop(uint32_t slot)
{
	pthread_mutex_lock(&live_lock);
	__atomic_store_n(&live_words[slot], 0, __ATOMIC_RELEASE); /* before the slot can be reused */
	live_owner[slot] = NULL;
	live_rec[slot] = NULL;
	pthread_mutex_unlock(&live_lock);
}

/* The table's address as the communicator's kernels read it: the host address, or for a VRAM
 * group the device address of the page pinned once for the process. */
static int live_addr(mori_cco_comm *k, uint64_t *out)
{
	if (k->g->kind != MORI_MEM_VRAM) {
		*out = (uint64_t)(uintptr_t)live_words;
		return MORI_OK;
	}
	static gpu_dptr pinned;
	static mori_mem page;
	struct gpu_ctx *x;
	struct gpu_dev *d;
	int rc = gpu_ctx_get(k->c, &x);
	if (rc == MORI_OK)
		rc = gpu_dev_get(k->c, x, k->g->gpu_device, &d);
	pthread_mutex_lock(&live_lock);
	if (rc == MORI_OK && !pinned) {
		page.c = k->c;
		page.kind = MORI_MEM_HOST;
		page.ptr = (uint8_t *)live_words;
		page.size = sizeof(live_words);
		rc = gpu_host_dptr(k->c, x, d, &page, &pinned);
	}
	*out = pinned;
	pthread_mutex_unlock(&live_lock);
	return rc;
}

/* ---- unique id, create, destroy ---- */

int mori_cco_get_unique_id(mori_client *c, mori_cco_unique_id *id)
{
	if (!c || !id)
		return set_error(c, MORI_EINVAL, "cco get_unique_id: NULL argument");
	memset(id, 0, sizeof(*id));
	size_t len;
	return mori_shmem_get_unique_id(c, id->internal, sizeof(id->internal), &len);
}

static const mori_cco_comm_opts comm_defaults = {
	.size = sizeof(mori_cco_comm_opts),
	.mem_kind = MORI_MEM_HOST,
	.gpu_device = -1,
};

int mori_cco_comm_opts_init(mori_cco_comm_opts *o, size_t size)
{
	return opts_init(o, size, OPTS_MIN_CCO_COMM, &comm_defaults, sizeof(comm_defaults));
}

/* The LSA team and the node order, from the group's members (their nodes as the join named them). */
static void topology(mori_cco_comm *k)
{
	const mori_group *g = k->g;
	const int *team;
	int tn;
	mori_shmem_team_node(g, &team, &tn);
	k->lsa_size = tn;
	k->node_start = team[0];
	k->lsa_rank = k->rank - team[0];
	k->node_major = 1;
	k->nodes = 0;
	k->equal_nodes = 1;
	int run = 0;
	for (int i = 0; i < k->n; i++) {
		int fresh = i == 0 || strcmp(g->peers[i].node, g->peers[i - 1].node) != 0 ||
			    g->peers[i].local != g->peers[i - 1].local;
		if (fresh) {
			if (i && run != tn)
				k->equal_nodes = 0;
			for (int j = 0; j < i && k->node_major; j++) /* a node seen before: not consecutive */
				if (!strcmp(g->peers[j].node, g->peers[i].node) && g->peers[j].local == g->peers[i].local)
					k->node_major = 0;
			k->nodes++;
			run = 0;
		}
		run++;
	}
	if (run != tn)
		k->equal_nodes = 0;
	for (int i = 0; i < tn; i++)
		if (team[i] != team[0] + i)
			k->node_major = 0;
}

int mori_cco_comm_create(mori_client *c, const mori_cco_unique_id *id, int nranks, int rank,
			 const mori_cco_comm_opts *opts, mori_cco_comm **out)
{
	if (!c || !id || !out)
		return set_error(c, MORI_EINVAL, "cco comm_create: NULL argument");
	*out = NULL;
	mori_cco_comm_opts o = comm_defaults;
	if (opts && opts_take(&o, sizeof(o), opts, OPTS_MIN_CCO_COMM))
		return set_error(c, opts->size < OPTS_MIN_CCO_COMM ? MORI_EINVAL : MORI_ENOTSUP,
				 "cco comm_create: opts->size %zu is not a mori_cco_comm_opts this library reads (%zu "
				 "bytes): call mori_cco_comm_opts_init", opts->size, sizeof(o));
	mori_shmem_opts so;
	mori_shmem_opts_init(&so, sizeof(so));
	so.heap_size = o.per_rank_size;
	so.heap_kind = o.mem_kind;
	so.gpu_device = o.gpu_device;
	so.timeout_us = o.timeout_us;
	mori_cco_comm *k = calloc(1, sizeof(*k));
	if (!k)
		return set_error(c, MORI_ENOMEM, "out of memory");
	/* Its own session: a client has one request in flight at a time, and a collective call
	 * blocks until every rank made it, so two communicators sharing a session would wait on each
	 * other's calls (threads of two ranks taking them in opposite orders would never finish). */
	mori_client *own;
	int rc = mori_client_open(c->runtime_dir, "cco", &own);
	if (rc) {
		char keep[512];
		snprintf(keep, sizeof(keep), "%s", mori_client_last_error(c));
		free(k);
		return set_error(c, rc, "cco comm_create: a session of its own with morid: %s", keep);
	}
	if ((rc = mori_shmem_init_uid(own, id->internal, sizeof(id->internal), rank, nranks, &so, &k->g))) {
		mori_client_close(own); /* the join's message stays: last_error is the thread's */
		free(k);
		return rc;
	}
	pthread_mutex_init(&k->lock, NULL);
	k->c = own;
	k->rank = rank;
	k->n = nranks;
	k->timeout_us = k->g->timeout_us;
	topology(k);
	shmem_hold(k->g); /* released by destroy, after the group's leave */
	*out = k;
	return MORI_OK;
}

static void dc_free(struct cco_dc *d)
{
	live_drop(d->slot);
	if (d->ce)
		cco_ce_stop(d->ce);
	free(d);
}

int mori_cco_comm_destroy(mori_cco_comm *k)
{
	if (!k)
		return MORI_OK;
	while (k->dcs) {
		struct cco_dc *d = k->dcs;
		k->dcs = d->next;
		dc_free(d);
	}
	while (k->wins) {
		struct mori_cco_window *w = k->wins;
		k->wins = w->next;
		free(w);
	}
	while (k->blocks) {
		struct cco_block *b = k->blocks;
		k->blocks = b->next;
		free(b);
	}
	mori_shmem_finalize(k->g); /* leaves (the heap goes with it), or nothing for a shell */
	shmem_release(k->g);
	mori_client_close(k->c);
	pthread_mutex_destroy(&k->lock);
	free(k);
	return MORI_OK;
}

/* MORI_OK, or why k cannot be used (left, in a child after fork, aborted). */
static int usable(mori_cco_comm *k)
{
	if (!k)
		return MORI_EINVAL;
	int rc = shmem_check(k->g);
	return rc ? rc : shmem_abort_status(k->g);
}

int mori_cco_comm_rank(const mori_cco_comm *k) { return k ? k->rank : -1; }
int mori_cco_comm_size(const mori_cco_comm *k) { return k ? k->n : 0; }

int mori_cco_comm_lsa(const mori_cco_comm *k, int *lsa_size, int *lsa_rank, int *node_start)
{
	if (!k || !lsa_size || !lsa_rank || !node_start)
		return MORI_EINVAL;
	*lsa_size = k->lsa_size;
	*lsa_rank = k->lsa_rank;
	*node_start = k->node_start;
	return MORI_OK;
}

int mori_cco_comm_status(const mori_cco_comm *k, mori_status *out)
{
	if (!k)
		return MORI_EINVAL;
	return mori_shmem_status(k->g, out);
}

int mori_cco_barrier_all(mori_cco_comm *k)
{
	int rc = usable(k);
	return rc ? rc : mori_shmem_barrier_all(k->g);
}

/* ---- memory ---- */

int mori_cco_mem_alloc(mori_cco_comm *k, size_t size, void **ptr)
{
	if (!k || !ptr)
		return MORI_EINVAL;
	*ptr = NULL;
	int rc = usable(k);
	if (rc)
		return rc;
	struct cco_block *b = calloc(1, sizeof(*b));
	if (!b)
		return set_error(k->c, MORI_ENOMEM, "out of memory");
	if ((rc = mori_shmem_calloc(k->g, size, 0, ptr)) || !*ptr) {
		free(b);
		return rc;
	}
	b->off = (uint64_t)mori_shmem_offset(k->g, *ptr);
	b->bytes = size;
	pthread_mutex_lock(&k->lock);
	b->next = k->blocks;
	k->blocks = b;
	pthread_mutex_unlock(&k->lock);
	return MORI_OK;
}

int mori_cco_mem_free(mori_cco_comm *k, void *ptr)
{
	int rc = usable(k);
	if (rc)
		return rc;
	int64_t off = ptr ? mori_shmem_offset(k->g, ptr) : -1;
	struct cco_block **pp = &k->blocks, *b = NULL;
	pthread_mutex_lock(&k->lock);
	if (ptr) {
		for (; *pp; pp = &(*pp)->next)
			if ((int64_t)(*pp)->off == off)
				break;
		b = *pp;
		for (struct mori_cco_window *w = k->wins; b && w; w = w->next)
			if (w->off >= b->off && w->off < b->off + b->bytes) {
				pthread_mutex_unlock(&k->lock);
				return set_error(k->c, MORI_EBUSY, "cco mem_free(%p): window [heap offset %#llx, %llu bytes] "
								   "is still registered over it", ptr, (unsigned long long)w->off,
						 (unsigned long long)w->bytes);
			}
	}
	pthread_mutex_unlock(&k->lock);
	if (ptr && !b)
		return set_error(k->c, MORI_EINVAL, "cco mem_free(%p): not a block mori_cco_mem_alloc returned", ptr);
	if ((rc = mori_shmem_free(k->g, ptr)) == MORI_OK && b) {
		pthread_mutex_lock(&k->lock);
		for (pp = &k->blocks; *pp; pp = &(*pp)->next)
			if (*pp == b) {
				*pp = b->next;
				break;
			}
		pthread_mutex_unlock(&k->lock);
		free(b);
	}
	return rc;
}

/* ---- windows ---- */

int mori_cco_window_register(mori_cco_comm *k, void *ptr, size_t size, mori_cco_window **out)
{
	if (!k || !ptr || !out || !size)
		return set_error(k ? k->c : NULL, MORI_EINVAL, "cco window_register: NULL argument or size 0");
	*out = NULL;
	int rc = usable(k);
	if (rc)
		return rc;
	int64_t off = mori_shmem_offset(k->g, ptr);
	int inside = 0;
	pthread_mutex_lock(&k->lock);
	for (struct cco_block *b = k->blocks; b && off >= 0; b = b->next)
		if ((uint64_t)off >= b->off && (uint64_t)off - b->off <= b->bytes && size <= b->bytes - ((uint64_t)off - b->off))
			inside = 1;
	int full = k->n_wins >= CCO_MAX_WINDOWS;
	pthread_mutex_unlock(&k->lock);
	if (!inside)
		return set_error(k->c, MORI_ERANGE, "cco window_register(%p, %zu bytes): not inside a block of "
						    "mori_cco_mem_alloc", ptr, size);
	if (full)
		return set_error(k->c, MORI_EBUSY, "cco window_register: %d windows registered already", CCO_MAX_WINDOWS);
	struct mori_cco_window *w = calloc(1, sizeof(*w));
	if (!w)
		return set_error(k->c, MORI_ENOMEM, "out of memory");
	if ((rc = shmem_match(k->g, SHMEM_MATCH_CCO_WINDOW, size, (uint64_t)off))) {
		char keep[600];
		snprintf(keep, sizeof(keep), "%s", mori_client_last_error(k->c));
		free(w);
		return set_error(k->c, rc, "cco window_register(heap offset %#llx, %zu bytes): %s", (unsigned long long)off,
				 size, keep);
	}
	w->comm = k;
	w->off = (uint64_t)off;
	w->bytes = size;
	pthread_mutex_lock(&k->lock);
	w->next = k->wins;
	k->wins = w;
	k->n_wins++;
	pthread_mutex_unlock(&k->lock);
	*out = w;
	return MORI_OK;
}

int mori_cco_window_deregister(mori_cco_comm *k, mori_cco_window *win)
{
	if (!k || !win || win->comm != k)
		return set_error(k ? k->c : NULL, MORI_EINVAL, "cco window_deregister: not a window of this communicator");
	int rc = usable(k);
	if (rc)
		return rc;
	if ((rc = shmem_match(k->g, SHMEM_MATCH_CCO_UNWINDOW, win->bytes, win->off)))
		return rc;
	pthread_mutex_lock(&k->lock);
	for (struct mori_cco_window **pp = &k->wins; *pp; pp = &(*pp)->next)
		if (*pp == win) {
			*pp = win->next;
			k->n_wins--;
			break;
		}
	pthread_mutex_unlock(&k->lock);
	free(win);
	return MORI_OK;
}

mori_cco_win mori_cco_window_dev(const mori_cco_window *w)
{
	mori_cco_win v = {0, 0};
	if (w)
		v.off = w->off, v.bytes = w->bytes;
	return v;
}

void *mori_cco_window_local_ptr(const mori_cco_window *w)
{
	return w ? (void *)(uintptr_t)(w->comm->g->base + w->off) : NULL;
}

void *mori_cco_get_peer_ptr(const mori_cco_comm *k, const void *p, int rank)
{
	if (!k || shmem_left(k->g))
		return NULL;
	return mori_shmem_ptr_p2p(k->g, p, rank);
}

/* ---- host-initiated transfers ---- */

static int win_range(mori_cco_comm *k, const mori_cco_window *w, uint64_t off, size_t bytes, int rank, const char *what)
{
	int rc = usable(k);
	if (rc)
		return rc;
	if (!w || w->comm != k)
		return set_error(k->c, MORI_EINVAL, "cco %s: not a window of this communicator", what);
	if (rank < 0 || rank >= k->n)
		return set_error(k->c, MORI_EINVAL, "cco %s: rank %d of %d", what, rank, k->n);
	if (off > w->bytes || bytes > w->bytes - off)
		return set_error(k->c, MORI_ERANGE, "cco %s: [%llu, +%zu) leaves the window of %llu bytes", what,
				 (unsigned long long)off, bytes, (unsigned long long)w->bytes);
	return MORI_OK;
}

int mori_cco_put(mori_cco_comm *k, const mori_cco_window *w, uint64_t dst_off, const void *src, size_t bytes, int rank)
{
	if (!k || (!src && bytes))
		return MORI_EINVAL;
	int rc = win_range(k, w, dst_off, bytes, rank, "put");
	if (rc || !bytes)
		return rc;
	return mori_shmem_putmem(k->g, (void *)(uintptr_t)(k->g->base + w->off + dst_off), src, bytes, rank);
}

int mori_cco_get(mori_cco_comm *k, void *dst, const mori_cco_window *w, uint64_t src_off, size_t bytes, int rank)
{
	if (!k || (!dst && bytes))
		return MORI_EINVAL;
	int rc = win_range(k, w, src_off, bytes, rank, "get");
	if (rc || !bytes)
		return rc;
	return mori_shmem_getmem(k->g, dst, (const void *)(uintptr_t)(k->g->base + w->off + src_off), bytes, rank);
}

/* ---- device communicators ---- */

static const mori_cco_dev_comm_reqs reqs_defaults = {
	.size = sizeof(mori_cco_dev_comm_reqs),
	.gda_connection_type = MORI_CCO_GDA_CONNECTION_CROSSNODE,
	.gda_signal_count = 16,
	.gda_counter_count = 16,
};

int mori_cco_dev_comm_reqs_init(mori_cco_dev_comm_reqs *r, size_t size)
{
	return opts_init(r, size, OPTS_MIN_CCO_REQS, &reqs_defaults, sizeof(reqs_defaults));
}

static uint64_t up64(uint64_t x) { return (x + MORI_CCO_ALIGN - 1) & ~(uint64_t)(MORI_CCO_ALIGN - 1); }

/* Everything about r that can be judged on this rank, before any collective step. */
static int reqs_check(mori_cco_comm *k, const mori_cco_dev_comm_reqs *r)
{
	struct {
		const char *name;
		int v, max;
	} cnt[] = {
		{"gda_signal_count", r->gda_signal_count, MORI_CCO_MAX_SIGNALS},
		{"gda_counter_count", r->gda_counter_count, MORI_CCO_MAX_COUNTERS},
		{"lsa_barrier_count", r->lsa_barrier_count, MORI_CCO_MAX_BARRIERS},
		{"rail_gda_barrier_count", r->rail_gda_barrier_count, MORI_CCO_MAX_BARRIERS},
		{"barrier_count", r->barrier_count, MORI_CCO_MAX_BARRIERS},
		{"ce_queue_count", r->ce_queue_count, MORI_CCO_MAX_CE_QUEUES},
	};
	for (size_t i = 0; i < sizeof(cnt) / sizeof(cnt[0]); i++)
		if (cnt[i].v < 0 || cnt[i].v > cnt[i].max)
			return set_error(k->c, MORI_EINVAL, "dev_comm_create: %s %d exceeds what a device communicator "
							    "holds (0..%d)", cnt[i].name, cnt[i].v, cnt[i].max);
	int t = r->gda_connection_type;
	if (t < MORI_CCO_GDA_CONNECTION_NONE || t > MORI_CCO_GDA_CONNECTION_RAIL)
		return set_error(k->c, MORI_EINVAL, "dev_comm_create: gda_connection_type %d (NONE, FULL, CROSSNODE or RAIL)", t);
	if (!k->node_major)
		return set_error(k->c, MORI_EINVAL, "dev_comm_create: the ranks of a node are not consecutive (rank %d's node "
						    "holds ranks from %d): CCO's teams need node-major ranks", k->rank,
				 k->node_start);
	if ((t == MORI_CCO_GDA_CONNECTION_RAIL || r->rail_gda_barrier_count) && !k->equal_nodes)
		return set_error(k->c, MORI_EINVAL, "dev_comm_create: the rail team needs the same number of ranks on every "
						    "node (%d nodes, %d ranks, %d on this one)", k->nodes, k->n, k->lsa_size);
	if (r->rail_gda_barrier_count && t == MORI_CCO_GDA_CONNECTION_NONE)
		return set_error(k->c, MORI_EINVAL, "dev_comm_create: %d rail GDA barriers need a GDA connection (type is NONE)",
				 r->rail_gda_barrier_count);
	if (r->barrier_count && k->nodes > 1 && t != MORI_CCO_GDA_CONNECTION_CROSSNODE && t != MORI_CCO_GDA_CONNECTION_FULL)
		return set_error(k->c, MORI_EINVAL, "dev_comm_create: %d world barriers over %d nodes need GDA to every other "
						    "node (connection CROSSNODE or FULL, not %s)", r->barrier_count, k->nodes,
				 t == MORI_CCO_GDA_CONNECTION_NONE ? "NONE" : "RAIL");
	return MORI_OK;
}

/* The resource area's layout (offsets from its start) and its size. */
static uint64_t layout(const mori_cco_comm *k, const mori_cco_dev_comm_reqs *r, mori_cco_dev_comm *d)
{
	uint64_t o = 0;
	d->signal_off = o, o = up64(o + 8ull * (uint64_t)r->gda_signal_count);
	d->counter_off = o, o = up64(o + 8ull * (uint64_t)r->gda_counter_count);
	d->lsa_bar_off = o, o = up64(o + 8ull * (uint64_t)r->lsa_barrier_count * (1ull + (uint64_t)k->lsa_size));
	d->rail_bar_off = o, o = up64(o + 8ull * (uint64_t)r->rail_gda_barrier_count * (1ull + (uint64_t)k->nodes));
	d->bar_off = o, o = up64(o + 8ull * (uint64_t)r->barrier_count * (1ull + (uint64_t)k->n));
	return o;
}

static uint64_t digest(const mori_cco_dev_comm_reqs *r)
{
	int v[] = {r->gda_connection_type, r->gda_signal_count, r->gda_counter_count, r->lsa_barrier_count,
		   r->rail_gda_barrier_count, r->barrier_count, r->ce_queue_count};
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		for (int b = 0; b < 4; b++)
			h = (h ^ (uint8_t)((unsigned)v[i] >> (8 * b))) * 0x100000001b3ull;
	return h;
}

int mori_cco_dev_comm_create(mori_cco_comm *k, const mori_cco_dev_comm_reqs *caller, mori_cco_dev_comm *out)
{
	if (!k || !out)
		return set_error(k ? k->c : NULL, MORI_EINVAL, "dev_comm_create: NULL argument");
	memset(out, 0, sizeof(*out));
	int rc = usable(k);
	if (rc)
		return rc;
	mori_cco_dev_comm_reqs r = reqs_defaults;
	if (caller && opts_take(&r, sizeof(r), caller, OPTS_MIN_CCO_REQS))
		return set_error(k->c, caller->size < OPTS_MIN_CCO_REQS ? MORI_EINVAL : MORI_ENOTSUP,
				 "dev_comm_create: reqs->size %zu is not a mori_cco_dev_comm_reqs this library reads (%zu "
				 "bytes): call mori_cco_dev_comm_reqs_init", caller->size, sizeof(r));
	if ((rc = reqs_check(k, &r)))
		return rc;
	mori_cco_dev_comm d;
	memset(&d, 0, sizeof(d));
	uint64_t bytes = layout(k, &r, &d);
	if ((rc = shmem_match(k->g, SHMEM_MATCH_CCO_DEV_COMM, bytes, digest(&r))))
		return rc;
	struct cco_dc *h = calloc(1, sizeof(*h));
	if (!h)
		return set_error(k->c, MORI_ENOMEM, "out of memory");
	void *area = NULL;
	if (bytes && (rc = mori_shmem_calloc(k->g, bytes, MORI_CCO_ALIGN, &area))) {
		char keep[600];
		snprintf(keep, sizeof(keep), "%s", mori_client_last_error(k->c));
		free(h);
		return set_error(k->c, rc, "dev_comm_create: %d signals, %d counters, %d LSA, %d rail and %d world barriers "
					   "need %llu bytes of the communicator's heap (per_rank_size %llu): %s",
				 r.gda_signal_count, r.gda_counter_count, r.lsa_barrier_count, r.rail_gda_barrier_count,
				 r.barrier_count, (unsigned long long)bytes, (unsigned long long)k->g->heap_size, keep);
	}
	uint64_t res = area ? (uint64_t)mori_shmem_offset(k->g, area) : 0;
	d.magic = MORI_CCO_MAGIC;
	d.version = MORI_CCO_VERSION;
	d.rank = k->rank;
	d.world_size = k->n;
	d.lsa_size = k->lsa_size;
	d.lsa_rank = k->lsa_rank;
	d.node_start = k->node_start;
	d.gda_connection_type = r.gda_connection_type;
	d.heap_base = k->g->base;
	d.heap_size = k->g->heap_size;
	d.shmem = (uint64_t)(uintptr_t)mori_shmem_state(k->g);
	d.ctrl = k->g->kind == MORI_MEM_VRAM ? shmem_gpu_ctrl_dptr(k->g) : (uint64_t)(uintptr_t)k->g->ctrl;
	d.timeout_ns = (uint64_t)k->timeout_us * 1000ull;
	d.signal_count = r.gda_signal_count;
	d.counter_count = r.gda_counter_count;
	d.lsa_barrier_count = r.lsa_barrier_count;
	d.rail_gda_barrier_count = r.rail_gda_barrier_count;
	d.barrier_count = r.barrier_count;
	d.ce_queue_count = r.ce_queue_count;
	d.res_off = res;
	d.res_bytes = bytes;
	d.signal_off += res, d.counter_off += res, d.lsa_bar_off += res, d.rail_bar_off += res, d.bar_off += res;
	h->res_off = res;
	h->res_bytes = bytes;
	if ((rc = live_addr(k, &d.live)) == MORI_OK && (rc = live_take(k, h, &h->slot, &h->gen)) == MORI_OK) {
		d.live_slot = h->slot;
		d.live_gen = h->gen;
		if (r.ce_queue_count && (rc = cco_ce_start(k->g, r.ce_queue_count, CCO_CE_ENTRIES, &h->ce, &d.ce_ctrl,
							   &d.ce_ring)) == MORI_OK)
			d.ce_entries = CCO_CE_ENTRIES;
		if (rc)
			live_drop(h->slot);
	}
	if (rc) {
		free(h); /* the area stays allocated until the communicator goes: freeing it is collective */
		return rc;
	}
	pthread_mutex_lock(&k->lock);
	h->next = k->dcs;
	k->dcs = h;
	pthread_mutex_unlock(&k->lock);
	*out = d;
	return MORI_OK;
}

/* The communicator and record of a live dev, or NULL with *rc why not (under live_lock). */
static struct cco_dc *dc_find(const mori_cco_dev_comm *dev, mori_cco_comm **kp, int *rc)
{
	*rc = MORI_EINVAL;
	if (!dev || dev->magic != MORI_CCO_MAGIC || dev->live_slot >= MORI_CCO_LIVE_SLOTS)
		return NULL;
	*rc = MORI_ESTALE;
	mori_cco_comm *k = live_owner[dev->live_slot];
	if (!k || live_words[dev->live_slot] != dev->live_gen || shmem_left(k->g))
		return NULL;
	*kp = k;
	*rc = MORI_OK;
	return live_rec[dev->live_slot];
}

int mori_cco_dev_comm_check(const mori_cco_dev_comm *dev)
{
	mori_cco_comm *k;
	int rc;
	pthread_mutex_lock(&live_lock);
	dc_find(dev, &k, &rc);
	pthread_mutex_unlock(&live_lock);
	return rc;
}

int mori_cco_dev_comm_destroy(mori_cco_dev_comm *dev)
{
	mori_cco_comm *k;
	int rc;
	pthread_mutex_lock(&live_lock);
	struct cco_dc *h = dc_find(dev, &k, &rc);
	pthread_mutex_unlock(&live_lock);
	if (!h)
		return rc == MORI_ESTALE ? MORI_OK : rc;
	pthread_mutex_lock(&k->lock);
	for (struct cco_dc **pp = &k->dcs; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	pthread_mutex_unlock(&k->lock);
	dc_free(h);
	return MORI_OK;
}

static int read_word(const mori_cco_dev_comm *dev, int id, int count, uint64_t off, uint64_t *value, const char *what)
{
	mori_cco_comm *k;
	int rc;
	if (!value)
		return MORI_EINVAL;
	pthread_mutex_lock(&live_lock);
	struct cco_dc *h = dc_find(dev, &k, &rc);
	pthread_mutex_unlock(&live_lock);
	if (!h)
		return rc;
	if (id < 0 || id >= count)
		return set_error(k->c, MORI_ERANGE, "dev_comm read_%s: id %d of %d", what, id, count);
	const uint64_t *w = (const uint64_t *)(uintptr_t)(k->g->base + off + 8ull * (uint64_t)id);
	if (k->g->kind == MORI_MEM_VRAM)
		return shmem_gpu_copy(k->g, value, w, sizeof(*value));
	*value = __atomic_load_n(w, __ATOMIC_ACQUIRE);
	return MORI_OK;
}

int mori_cco_dev_comm_read_signal(const mori_cco_dev_comm *dev, int id, uint64_t *value)
{
	return read_word(dev, id, dev ? dev->signal_count : 0, dev ? dev->signal_off : 0, value, "signal");
}

int mori_cco_dev_comm_read_counter(const mori_cco_dev_comm *dev, int id, uint64_t *value)
{
	return read_word(dev, id, dev ? dev->counter_count : 0, dev ? dev->counter_off : 0, value, "counter");
}
