/* UMBP, the node's KV store, as a client calls it (include/mori_umbp.h). morid allocates slots in
 * memfd slabs of this uid and leases values; this file maps the slabs (their fds come with the
 * first reply that names them), copies the bytes itself (host threads for large batches, the GPU
 * copy engine for VRAM) and commits or releases. morid never copies a byte of a local put or get. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu_int.h"
#include "internal.h"
#include "mori_umbp.h"
#include "umbp_int.h"

#define POOL_MIN_BYTES (1u << 20) /* a batch below this is copied by the calling thread */
#define POOL_MIN_VALUE (256u << 10)

struct umbp_map {
	uint32_t id;
	uint8_t *base;
	uint64_t bytes;
	int registered;               /* pinned for the GPU copy engine */
};

/* The slabs this process maps, one set per client (several handles share it). */
struct umbp_maps {
	pthread_mutex_t lock;
	struct umbp_map *m;           /* sorted by id */
	size_t n, cap;
	int handles;
	Mori__KvInfo info;
	/* Held from a request that may carry slab fds until they are mapped: morid sends a slab's fd
	 * once, so another thread's reply naming that slab must not be read before it is mapped. */
	pthread_mutex_t take;
};

struct mori_umbp {
	mori_client *c;
	struct umbp_maps *s;
	int timeout_ms;
	uint32_t copy_threads;
	pthread_mutex_t pool_lock;
	struct copy_pool *pool;
	struct umbp_regs regs;        /* mori_umbp_register_memory's ranges */
};

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER; /* c->umbp's creation and end */


int mori_umbp_opts_init(mori_umbp_opts *o, size_t size)
{
	if (!o || size < sizeof(mori_umbp_opts))
		return MORI_EINVAL;
	memset(o, 0, size);
	o->size = size;
	return MORI_OK;
}

/* ---- slabs ---- */

static struct umbp_map *map_find(struct umbp_maps *s, uint32_t id)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->m[mid].id == id)
			return &s->m[mid];
		if (s->m[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static void map_drop(struct umbp_map *m)
{
	const struct gpu_api *g = m->registered ? gpu_api() : NULL;
	if (g)
		g->mem_host_unregister(m->base);
	munmap(m->base, m->bytes);
}

/* A call's slabs: the ones the reply brought (fds[i] for slabs[i]); dedicated ones mapped for
 * this call only (tmp, unmapped by call_end). Takes every fd. */
struct call_maps {
	struct umbp_map tmp[WIRE_MAX_FDS];
	int ntmp;
};

static int maps_take(mori_umbp *u, const Mori__KvReply *kr, int *fds, int nfds, struct call_maps *cm)
{
	int rc = MORI_OK;
	for (int i = 0; i < nfds; i++) {
		const Mori__KvSlab *sl = (size_t)i < kr->n_slabs ? kr->slabs[i] : NULL;
		void *base = MAP_FAILED;
		if (sl && rc == MORI_OK && sl->bytes)
			base = mmap(NULL, sl->bytes, PROT_READ | PROT_WRITE,
				    MAP_SHARED | (sl->dedicated ? 0 : MAP_POPULATE), fds[i], 0); /* its pages exist */
		close(fds[i]);
		if (!sl)
			continue;
		if (base == MAP_FAILED) {
			if (rc == MORI_OK)
				rc = set_error(u->c, MORI_ESYS, "mapping a slab of %llu bytes: %s",
					       (unsigned long long)sl->bytes, strerror(errno));
			continue;
		}
		struct umbp_map m = {.id = sl->id, .base = base, .bytes = sl->bytes};
		if (sl->dedicated) {
			cm->tmp[cm->ntmp++] = m;
			continue;
		}
		struct umbp_maps *s = u->s;
		pthread_mutex_lock(&s->lock);
		if (map_find(s, sl->id)) {
			munmap(base, sl->bytes); /* sent again after a reset: the mapping we have serves */
		} else if (s->n == s->cap && !(s->m = realloc(s->m, sizeof(*s->m) * (s->cap = s->cap ? 2 * s->cap : 16)))) {
			munmap(base, sl->bytes);
			rc = set_error(u->c, MORI_ENOMEM, "out of memory");
		} else {
			size_t at = s->n;
			while (at > 0 && s->m[at - 1].id > m.id)
				at--;
			memmove(&s->m[at + 1], &s->m[at], sizeof(*s->m) * (s->n - at));
			s->m[at] = m;
			s->n++;
		}
		pthread_mutex_unlock(&s->lock);
	}
	return rc;
}

static void call_end(struct call_maps *cm)
{
	for (int i = 0; i < cm->ntmp; i++)
		map_drop(&cm->tmp[i]);
	cm->ntmp = 0;
}

/* Where slot sl's bytes are in this process, or NULL. */
static uint8_t *slot_ptr(mori_umbp *u, struct call_maps *cm, const Mori__KvSlot *sl, struct umbp_map **mp)
{
	for (int i = 0; i < cm->ntmp; i++)
		if (cm->tmp[i].id == sl->slab) {
			*mp = &cm->tmp[i];
			return sl->offset + sl->len <= cm->tmp[i].bytes ? cm->tmp[i].base + sl->offset : NULL;
		}
	pthread_mutex_lock(&u->s->lock);
	struct umbp_map *m = map_find(u->s, sl->slab);
	uint8_t *p = m && sl->offset <= m->bytes && sl->len <= m->bytes - sl->offset ? m->base + sl->offset : NULL;
	pthread_mutex_unlock(&u->s->lock);
	*mp = m;
	return p;
}

/* ---- copies ---- */

struct copy {
	uint8_t *dst;
	const uint8_t *src;
	uint64_t len;
	int to_slab;                  /* 1: a put (src is the caller's), 0: a get */
	int vram;                     /* the caller's side is device memory */
	struct umbp_map *map;
	int *status;
};

/* VRAM copies through the GPU's copy engine: a batch's copies to or from one device go on its
 * stream back to back, one synchronize for them all (a run of items on one device at a time);
 * an item whose copy could not start, or whose stream failed, gets the error. */
struct vram_run {
	const struct gpu_api *g;
	struct gpu_dev *d;            /* pushed while set */
	int ordinal;
	struct copy **k;              /* copies on d's stream since its last synchronize */
	size_t nk;
};

static int vram_run_end(mori_umbp *u, struct vram_run *r)
{
	int rc = MORI_OK;
	if (!r->d)
		return rc;
	int e = r->nk ? r->g->stream_synchronize(r->d->stream) : 0;
	gpu_pop(r->g);
	if (e) {
		rc = set_error(u->c, MORI_EIO, "GPU copies of a batch (%zu values) failed (%d)", r->nk, e);
		for (size_t i = 0; i < r->nk; i++)
			*r->k[i]->status = rc;
	}
	r->d = NULL;
	r->nk = 0;
	return rc;
}

static int vram_enqueue(mori_umbp *u, struct vram_run *r, struct copy *k)
{
	const struct gpu_api *g = r->g;
	const void *dev = k->to_slab ? (const void *)k->src : (const void *)k->dst;
	int ordinal = -1;
	if (g->pointer_get_attribute(&ordinal, GPU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (gpu_dptr)(uintptr_t)dev) != 0 ||
	    ordinal < 0)
		return set_error(u->c, MORI_EINVAL, "no device ordinal for %p", dev);
	if (!r->d || r->ordinal != ordinal) {
		vram_run_end(u, r);
		struct gpu_ctx *x;
		struct gpu_dev *d;
		int rc = gpu_ctx_get(u->c, &x);
		if (rc == MORI_OK)
			rc = gpu_dev_get(u->c, x, ordinal, &d);
		if (rc != MORI_OK)
			return rc;
		if (gpu_push(g, d) != 0)
			return set_error(u->c, MORI_EIO, "cannot make GPU %d's context current", ordinal);
		r->d = d;
		r->ordinal = ordinal;
	}
	if (k->map && !k->map->registered && g->mem_host_register(k->map->base, k->map->bytes, GPU_MEMHOSTREGISTER_PORTABLE) == 0)
		k->map->registered = 1; /* pinned: the copy engine reads it directly, no staging */
	int e = k->to_slab ? g->memcpy_dtoh_async(k->dst, (gpu_dptr)(uintptr_t)k->src, k->len, r->d->stream)
			   : g->memcpy_htod_async((gpu_dptr)(uintptr_t)k->dst, k->src, k->len, r->d->stream);
	if (e)
		return set_error(u->c, MORI_EIO, "GPU copy of %llu bytes failed to start (%d)", (unsigned long long)k->len, e);
	r->k[r->nk++] = k;
	return MORI_OK;
}

/* Every VRAM copy of ks[0..n). */
static void copy_vram_all(mori_umbp *u, struct copy *ks, size_t n, size_t nv)
{
	struct vram_run r = {.g = gpu_api(), .k = malloc(sizeof(struct copy *) * (nv ? nv : 1))};
	for (size_t i = 0; i < n; i++) {
		if (!ks[i].vram)
			continue;
		int rc = !r.g ? set_error(u->c, MORI_ENOGPU, "no GPU runtime for a VRAM buffer")
			: !r.k ? set_error(u->c, MORI_ENOMEM, "out of memory") : vram_enqueue(u, &r, &ks[i]);
		if (rc != MORI_OK)
			*ks[i].status = rc;
	}
	if (r.g)
		vram_run_end(u, &r);
	free(r.k);
}

static void copy_all(mori_umbp *u, struct copy *ks, size_t n)
{
	uint64_t total = 0;
	size_t big = 0, nh = 0, nv = 0;
	struct copy_op *ops = malloc(sizeof(*ops) * (n ? n : 1));
	for (size_t i = 0; i < n; i++) {
		if (ks[i].vram) {
			nv++;
			continue;
		}
		if (!ops) {
			memcpy(ks[i].dst, ks[i].src, ks[i].len);
			continue;
		}
		ops[nh++] = (struct copy_op){ks[i].dst, ks[i].src, ks[i].len};
		total += ks[i].len;
		big += ks[i].len >= POOL_MIN_VALUE;
	}
	uint32_t threads = u->copy_threads ? u->copy_threads : (big < 4 ? (uint32_t)big : 4);
	if (ops && threads > 1 && total >= POOL_MIN_BYTES) {
		pthread_mutex_lock(&u->pool_lock);
		if (!u->pool)
			u->pool = copy_pool_new((int)threads - 1);
		struct copy_pool *p = u->pool;
		pthread_mutex_unlock(&u->pool_lock);
		if (p) {
			copy_pool_run(p, ops, nh, total);
			nh = 0;
		}
	}
	for (size_t i = 0; ops && i < nh; i++)
		memcpy(ops[i].dst, ops[i].src, ops[i].len);
	free(ops);
	if (nv)
		copy_vram_all(u, ks, n, nv);
}

/* ---- requests ---- */

int umbp_kv_rpc(mori_umbp *u, Mori__KvRequest *kq, Mori__Reply **rep, int *fds, int *nfds)
{
	Mori__Request req = MORI__REQUEST__INIT;
	req.body_case = MORI__REQUEST__BODY_KV;
	req.kv = kq;
	int rc = client_rpc_timeout(u->c, &req, NULL, 0, rep, fds, nfds, u->timeout_ms); /* fds NULL: closed there */
	if (rc == MORI_OK && (*rep)->body_case != MORI__REPLY__BODY_KV) {
		mori__reply__free_unpacked(*rep, NULL);
		*rep = NULL;
		return set_error(u->c, MORI_EPROTO, "morid answered a KV request with another reply");
	}
	return rc;
}

/* A request whose reply names slots: the slab fds it carries are mapped before another thread's
 * reply naming those slabs can be read (morid sends a slab's fd once). *rep is set whenever a
 * reply came, also when mapping failed. */
static int kv_rpc_slots(mori_umbp *u, Mori__KvRequest *kq, Mori__Reply **rep, struct call_maps *cm)
{
	int fds[WIRE_MAX_FDS], nfds = 0;
	pthread_mutex_lock(&u->s->take);
	int rc = umbp_kv_rpc(u, kq, rep, fds, &nfds);
	if (rc == MORI_OK)
		rc = maps_take(u, (*rep)->kv, fds, nfds, cm);
	pthread_mutex_unlock(&u->s->take);
	return rc;
}

static int check_key(mori_umbp *u, const void *key, size_t len)
{
	if (!key || len == 0 || len > MORI_UMBP_KEY_MAX)
		return set_error(u->c, MORI_EINVAL, "key of %zu bytes (keys have 1..%d)", key ? len : 0, MORI_UMBP_KEY_MAX);
	return MORI_OK;
}

int umbp_call_check(mori_umbp *u)
{
	if (!u)
		return MORI_EINVAL;
	return client_check(u->c);
}

int mori_umbp_open(mori_client *c, const mori_umbp_opts *opts, mori_umbp **out)
{
	if (!c || !out || (opts && opts->size < sizeof(mori_umbp_opts)))
		return c ? set_error(c, MORI_EINVAL, "umbp open: NULL argument or opts->size too small") : MORI_EINVAL;
	int rc = client_check(c);
	if (rc != MORI_OK)
		return rc;
	mori_umbp *u = calloc(1, sizeof(*u));
	if (!u)
		return set_error(c, MORI_ENOMEM, "out of memory");
	u->c = c;
	pthread_mutex_init(&u->pool_lock, NULL);
	umbp_regs_init(&u->regs);
	if (opts) {
		u->copy_threads = opts->copy_threads > 64 ? 64 : opts->copy_threads;
		u->timeout_ms = opts->timeout_us > 0 ? (int)((opts->timeout_us + 999) / 1000) : 0;
	}
	Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
	kq.op = MORI__KV_OP__KV_OPEN;
	Mori__Reply *rep = NULL;
	int to = u->timeout_ms;
	u->timeout_ms = to ? to : 15000;
	rc = umbp_kv_rpc(u, &kq, &rep, NULL, NULL);
	if (rc == MORI_OK && !rep->kv->info)
		rc = set_error(c, MORI_EPROTO, "morid's KV open reply has no info");
	if (rc != MORI_OK) {
		if (rep)
			mori__reply__free_unpacked(rep, NULL);
		pthread_mutex_destroy(&u->pool_lock);
		umbp_regs_fini(&u->regs, c, 1);
		free(u);
		return rc;
	}
	u->timeout_ms = to ? to : (int)rep->kv->info->timeout_ms;
	pthread_mutex_lock(&maps_lock);
	if (!c->umbp && (c->umbp = calloc(1, sizeof(*c->umbp)))) {
		pthread_mutex_init(&c->umbp->lock, NULL);
		pthread_mutex_init(&c->umbp->take, NULL);
	}
	if (c->umbp) {
		c->umbp->handles++;
		c->umbp->info = *rep->kv->info;
	}
	u->s = c->umbp;
	pthread_mutex_unlock(&maps_lock);
	mori__reply__free_unpacked(rep, NULL);
	if (!u->s) {
		pthread_mutex_destroy(&u->pool_lock);
		umbp_regs_fini(&u->regs, c, 1);
		free(u);
		return set_error(c, MORI_ENOMEM, "out of memory");
	}
	*out = u;
	return MORI_OK;
}

int mori_umbp_close(mori_umbp *u)
{
	if (!u)
		return MORI_OK;
	mori_client *c = u->c;
	int forked = client_forked(c);
	pthread_mutex_lock(&maps_lock);
	struct umbp_maps *s = u->s;
	int last = --s->handles == 0;
	if (last)
		c->umbp = NULL;
	pthread_mutex_unlock(&maps_lock);
	if (last) {
		if (!forked) {
			Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
			Mori__Reply *rep = NULL;
			kq.op = MORI__KV_OP__KV_CLOSE; /* morid sends the slabs again to a later open */
			if (umbp_kv_rpc(u, &kq, &rep, NULL, NULL) == MORI_OK)
				mori__reply__free_unpacked(rep, NULL);
		}
		for (size_t i = 0; i < s->n; i++)
			map_drop(&s->m[i]);
		free(s->m);
		pthread_mutex_destroy(&s->lock);
		pthread_mutex_destroy(&s->take);
		free(s);
	}
	umbp_regs_fini(&u->regs, c, forked);
	copy_pool_free(u->pool);
	pthread_mutex_destroy(&u->pool_lock);
	free(u);
	return MORI_OK;
}

/* Device memory? Asked of the driver only where this process loaded a GPU runtime (once a
 * batch: finding out costs a dlopen probe). */
static int is_vram(int runtime, const void *p)
{
	return runtime && gpu_ptr_is_device(p) == 1;
}

/* One round of a put: items idx[0..n) (n <= batch_max). */
static int put_round(mori_umbp *u, mori_umbp_item *items, const size_t *idx, size_t n)
{
	Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
	Mori__KvItem *ki = calloc(n, sizeof(*ki));
	Mori__KvItem **kp = calloc(n, sizeof(*kp));
	struct copy *ks = calloc(n, sizeof(*ks));
	uint64_t *ids = calloc(n, sizeof(*ids));
	size_t *who = calloc(n, sizeof(*who));
	int rc = MORI_OK;
	struct call_maps cm = {.ntmp = 0};
	Mori__Reply *rep = NULL;
	if (!ki || !kp || !ks || !ids || !who) {
		rc = set_error(u->c, MORI_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		mori_umbp_item *it = &items[idx[i]];
		mori__kv_item__init(&ki[i]);
		ki[i].key.data = (uint8_t *)it->key.data;
		ki[i].key.len = it->key.len;
		ki[i].size = it->size;
		ki[i].depth = it->depth;
		ki[i].pin = it->pin;
		kp[i] = &ki[i];
	}
	kq.op = MORI__KV_OP__KV_PUT_ALLOC;
	kq.n_items = n;
	kq.items = kp;
	if ((rc = kv_rpc_slots(u, &kq, &rep, &cm)) != MORI_OK)
		goto out;
	Mori__KvReply *kr = rep->kv;
	if (kr->n_slots != n) {
		rc = set_error(u->c, MORI_EPROTO, "morid answered %zu slots for %zu items", kr->n_slots, n);
		goto out;
	}
	size_t nk = 0, nids = 0;
	int runtime = gpu_runtime_loaded();
	for (size_t i = 0; i < n; i++) {
		mori_umbp_item *it = &items[idx[i]];
		const Mori__KvSlot *sl = kr->slots[i];
		it->status = sl->status;
		if (sl->status != MORI_OK)
			continue;
		struct umbp_map *m = NULL;
		uint8_t *p = slot_ptr(u, &cm, sl, &m);
		ids[nids] = sl->id;
		who[nids++] = idx[i];
		if (!p || sl->len != it->size) {
			it->status = set_error(u->c, MORI_EPROTO, "morid's slot for item %zu is outside its slab", idx[i]);
			continue;
		}
		ks[nk++] = (struct copy){.dst = p, .src = it->buf, .len = it->size, .to_slab = 1, .vram = is_vram(runtime, it->buf),
					 .map = m, .status = &it->status};
	}
	copy_all(u, ks, nk);
	mori__reply__free_unpacked(rep, NULL);
	rep = NULL;
	if (!nids)
		goto out;
	/* items whose copy failed are given back; the rest become visible */
	size_t na = 0;
	for (size_t i = 0; i < nids; i++)
		if (items[who[i]].status != MORI_OK) {
			uint64_t t = ids[i];
			size_t w = who[i];
			memmove(&ids[i], &ids[i + 1], sizeof(*ids) * (nids - i - 1));
			memmove(&who[i], &who[i + 1], sizeof(*who) * (nids - i - 1));
			ids[nids - 1] = t;
			who[nids - 1] = w;
			nids--, na++, i--;
		}
	for (int pass = 0; pass < 2; pass++) {
		size_t from = pass ? nids : 0, cnt = pass ? na : nids;
		if (!cnt)
			continue;
		Mori__KvRequest cq = MORI__KV_REQUEST__INIT;
		cq.op = MORI__KV_OP__KV_PUT_COMMIT;
		cq.abort = pass == 1;
		cq.n_ids = cnt;
		cq.ids = &ids[from];
		if ((rc = umbp_kv_rpc(u, &cq, &rep, NULL, NULL)) != MORI_OK)
			goto out;
		for (size_t i = 0; !pass && i < cnt && i < rep->kv->n_status; i++)
			items[who[from + i]].status = rep->kv->status[i];
		mori__reply__free_unpacked(rep, NULL);
		rep = NULL;
	}
out:
	call_end(&cm);
	if (rep)
		mori__reply__free_unpacked(rep, NULL);
	free(ki), free(kp), free(ks), free(ids), free(who);
	return rc;
}

/* One round of a get. */
static int get_round(mori_umbp *u, mori_umbp_item *items, const size_t *idx, size_t n, const char *holder)
{
	Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
	Mori__KvItem *ki = calloc(n, sizeof(*ki));
	Mori__KvItem **kp = calloc(n, sizeof(*kp));
	struct copy *ks = calloc(n, sizeof(*ks));
	uint64_t *ids = calloc(n, sizeof(*ids));
	size_t *who = calloc(n, sizeof(*who));
	int rc = MORI_OK;
	struct call_maps cm = {.ntmp = 0};
	Mori__Reply *rep = NULL;
	size_t nids = 0;
	if (!ki || !kp || !ks || !ids || !who) {
		rc = set_error(u->c, MORI_ENOMEM, "out of memory");
		goto out;
	}
	/* a buffer inside a registered range: a value from another node is written there by morid;
	 * the ranges stay registered until the reply is read (deregistration waits for the lock) */
	pthread_rwlock_rdlock(&u->regs.lock);
	for (size_t i = 0; i < n; i++) {
		mori_umbp_item *it = &items[idx[i]];
		mori__kv_item__init(&ki[i]);
		ki[i].key.data = (uint8_t *)it->key.data;
		ki[i].key.len = it->key.len;
		const struct umbp_reg *g = umbp_regs_find(&u->regs, it->buf, it->size);
		if (g && g->mem) {
			ki[i].region = g->mem->region_id;
			ki[i].region_offset = (uint64_t)((uint8_t *)it->buf - g->ptr);
			ki[i].cap = it->size;
		}
		kp[i] = &ki[i];
	}
	kq.op = MORI__KV_OP__KV_GET;
	kq.n_items = n;
	kq.items = kp;
	kq.holder = (char *)(holder ? holder : "");
	/* what morid waits on for other nodes ends before this call stops waiting for its reply */
	kq.timeout_ms = (uint32_t)(u->timeout_ms / 8 * 7 + 1);
	rc = kv_rpc_slots(u, &kq, &rep, &cm);
	pthread_rwlock_unlock(&u->regs.lock);
	if (rc != MORI_OK && !rep)
		goto out;
	Mori__KvReply *kr = rep->kv;
	if (rc == MORI_OK && kr->n_slots != n)
		rc = set_error(u->c, MORI_EPROTO, "morid answered %zu slots for %zu items", kr->n_slots, n);
	size_t nk = 0;
	int runtime = gpu_runtime_loaded();
	for (size_t i = 0; i < n && i < kr->n_slots; i++) {
		mori_umbp_item *it = &items[idx[i]];
		const Mori__KvSlot *sl = kr->slots[i];
		it->status = sl->status;
		it->tier = MORI_UMBP_TIER_UNKNOWN;
		if (sl->status != MORI_OK && sl->status != MORI_ENOENT && rep->message && rep->message[0])
			set_error(u->c, sl->status, "%s", rep->message); /* morid's reason (a peer's, named) */
		if (sl->delivered || (sl->status == MORI_EMSGSIZE && ki[i].region)) {
			it->len = sl->len; /* written into the caller's region by morid: no lease, no copy */
			it->tier = (uint8_t)sl->tier;
			continue;
		}
		if (sl->status != MORI_OK)
			continue;
		ids[nids] = sl->id; /* every lease goes back, copied or not */
		who[nids++] = idx[i];
		if (rc != MORI_OK)
			continue;
		it->len = sl->len;
		it->tier = (uint8_t)sl->tier;
		struct umbp_map *m = NULL;
		uint8_t *p = slot_ptr(u, &cm, sl, &m);
		if (sl->len > it->size) {
			it->status = MORI_EMSGSIZE;
			continue;
		}
		if (!p) {
			it->status = set_error(u->c, MORI_EPROTO, "morid's slot for item %zu is outside its slab", idx[i]);
			continue;
		}
		ks[nk++] = (struct copy){.dst = it->buf, .src = p, .len = sl->len, .to_slab = 0, .vram = is_vram(runtime, it->buf),
					 .map = m, .status = &it->status};
	}
	if (rc == MORI_OK)
		copy_all(u, ks, nk);
	mori__reply__free_unpacked(rep, NULL);
	rep = NULL;
	if (nids) {
		Mori__KvRequest rq = MORI__KV_REQUEST__INIT;
		rq.op = MORI__KV_OP__KV_RELEASE;
		rq.n_ids = nids;
		rq.ids = ids;
		int rrc = umbp_kv_rpc(u, &rq, &rep, NULL, NULL);
		if (rrc != MORI_OK && rc == MORI_OK)
			rc = rrc;
		for (size_t i = 0; rrc == MORI_OK && i < nids && i < rep->kv->n_status; i++)
			if (rep->kv->status[i] == MORI_ETIMEDOUT && items[who[i]].status == MORI_OK)
				/* the lease expired while we copied: the bytes may be torn */
				items[who[i]].status = MORI_ETIMEDOUT;
	}
out:
	call_end(&cm);
	if (rep)
		mori__reply__free_unpacked(rep, NULL);
	free(ki), free(kp), free(ks), free(ids), free(who);
	return rc;
}

/* A batch put or get: items checked here, then rounds of at most kv_batch_max; items a reply
 * had no room for (MORI_EAGAIN) go again. */
int umbp_batch(mori_umbp *u, mori_umbp_item *items, size_t n, size_t *n_ok, int put, const char *holder)
{
	int rc = umbp_call_check(u);
	if (rc != MORI_OK)
		return rc;
	if (!items || n == 0)
		return set_error(u->c, MORI_EINVAL, "batch of %s items", items ? "0" : "NULL");
	size_t *idx = malloc(sizeof(*idx) * n);
	if (!idx)
		return set_error(u->c, MORI_ENOMEM, "out of memory");
	size_t todo = 0, bmax = u->s->info.batch_max ? u->s->info.batch_max : 1;
	for (size_t i = 0; i < n; i++) {
		mori_umbp_item *it = &items[i];
		it->status = MORI_OK;
		if (!put)
			it->len = 0;
		if (!it->key.data || it->key.len == 0 || it->key.len > MORI_UMBP_KEY_MAX || (!it->buf && it->size))
			it->status = MORI_EINVAL;
		else if (put && it->size == 0)
			it->status = MORI_EINVAL;
		else if (put && it->size > u->s->info.value_max)
			it->status = MORI_EMSGSIZE;
		else if (put && it->pin > MORI_UMBP_PIN_HARD)
			it->status = MORI_EINVAL;
		else
			idx[todo++] = i;
	}
	/* items morid had no room for yet (values spilling to SSD, a reply full of descriptors) go
	 * again after a pause, until the call's deadline */
	uint64_t deadline = mori_now_us() + (uint64_t)u->timeout_ms * 1000, pause_us = 100;
	for (int round = 0; todo && rc == MORI_OK; round++) {
		if (round && mori_now_us() + pause_us >= deadline) {
			for (size_t i = 0; i < todo; i++)
				items[idx[i]].status = MORI_ETIMEDOUT;
			set_error(u->c, MORI_ETIMEDOUT, "%zu items found no room within %d ms (morid: values still spilling)",
				  todo, u->timeout_ms);
			break;
		}
		if (round) {
			usleep((useconds_t)pause_us);
			pause_us = pause_us < 10000 ? pause_us * 2 : pause_us;
		}
		for (size_t at = 0; at < todo && rc == MORI_OK; at += bmax) {
			size_t k = todo - at < bmax ? todo - at : bmax;
			rc = put ? put_round(u, items, idx + at, k) : get_round(u, items, idx + at, k, holder);
		}
		size_t again = 0;
		for (size_t i = 0; i < todo; i++)
			if (items[idx[i]].status == MORI_EAGAIN)
				idx[again++] = idx[i];
		todo = again;
	}
	free(idx);
	size_t ok = 0;
	for (size_t i = 0; i < n; i++)
		ok += items[i].status == MORI_OK;
	if (n_ok)
		*n_ok = ok;
	return rc;
}

int mori_umbp_batch_put(mori_umbp *u, mori_umbp_item *items, size_t n, size_t *n_ok)
{
	return umbp_batch(u, items, n, n_ok, 1, NULL);
}

int mori_umbp_batch_get(mori_umbp *u, mori_umbp_item *items, size_t n, size_t *n_ok)
{
	return umbp_batch(u, items, n, n_ok, 0, NULL);
}

int mori_umbp_put(mori_umbp *u, const void *key, size_t key_len, const void *src, size_t size)
{
	mori_umbp_item it = {.key = {key, key_len}, .buf = (void *)src, .size = size, .depth = -1};
	int rc = umbp_call_check(u);
	if (rc == MORI_OK)
		rc = check_key(u, key, key_len);
	if (rc == MORI_OK)
		rc = umbp_batch(u, &it, 1, NULL, 1, NULL);
	if (rc == MORI_OK && it.status != MORI_OK)
		rc = it.status;
	return rc;
}

int umbp_get_one(mori_umbp *u, const char *holder, const void *key, size_t key_len, void *dst, size_t cap,
		 size_t *len)
{
	mori_umbp_item it = {.key = {key, key_len}, .buf = dst, .size = cap};
	int rc = umbp_call_check(u);
	if (rc == MORI_OK)
		rc = check_key(u, key, key_len);
	if (rc == MORI_OK)
		rc = umbp_batch(u, &it, 1, NULL, 0, holder);
	if (len)
		*len = it.len;
	if (rc == MORI_OK && it.status != MORI_OK) {
		rc = it.status;
		if (rc == MORI_EMSGSIZE)
			set_error(u->c, rc, "value of %zu bytes, buffer of %zu", it.len, cap);
		else if (rc == MORI_ENOENT)
			set_error(u->c, rc, "no such key");
	}
	return rc;
}

int mori_umbp_get(mori_umbp *u, const void *key, size_t key_len, void *dst, size_t cap, size_t *len)
{
	return umbp_get_one(u, NULL, key, key_len, dst, cap, len);
}

/* Keys only: exists, remove, pin. out gets the reply (caller frees). */
static int keys_rpc(mori_umbp *u, Mori__KvOp op, const mori_umbp_key *keys, size_t n, int consecutive, uint32_t pin,
		    Mori__Reply **out)
{
	Mori__KvItem *ki = calloc(n, sizeof(*ki));
	Mori__KvItem **kp = calloc(n, sizeof(*kp));
	if (!ki || !kp) {
		free(ki), free(kp);
		return set_error(u->c, MORI_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		mori__kv_item__init(&ki[i]);
		ki[i].key.data = (uint8_t *)keys[i].data;
		ki[i].key.len = keys[i].data ? keys[i].len : 0;
		ki[i].pin = pin;
		kp[i] = &ki[i];
	}
	Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
	kq.op = op;
	kq.n_items = n;
	kq.items = kp;
	kq.consecutive = consecutive;
	int rc = umbp_kv_rpc(u, &kq, out, NULL, NULL);
	free(ki), free(kp);
	return rc;
}

static int one_key(mori_umbp *u, Mori__KvOp op, const void *key, size_t key_len, uint32_t pin)
{
	int rc = umbp_call_check(u);
	if (rc == MORI_OK)
		rc = check_key(u, key, key_len);
	if (rc != MORI_OK)
		return rc;
	mori_umbp_key k = {key, key_len};
	Mori__Reply *rep;
	if ((rc = keys_rpc(u, op, &k, 1, 0, pin, &rep)) != MORI_OK)
		return rc;
	if (op == MORI__KV_OP__KV_EXISTS)
		rc = rep->kv->n_present == 1 ? rep->kv->present[0] : set_error(u->c, MORI_EPROTO, "bad exists reply");
	else
		rc = rep->kv->n_status == 1 ? rep->kv->status[0] : set_error(u->c, MORI_EPROTO, "bad reply");
	if (rc < 0 && rep->message && rep->message[0])
		set_error(u->c, rc, "morid: %s", rep->message);
	else if (rc == MORI_ENOENT)
		set_error(u->c, rc, "no such key");
	mori__reply__free_unpacked(rep, NULL);
	return rc;
}

int mori_umbp_exists(mori_umbp *u, const void *key, size_t key_len)
{
	return one_key(u, MORI__KV_OP__KV_EXISTS, key, key_len, 0);
}

int mori_umbp_remove(mori_umbp *u, const void *key, size_t key_len)
{
	return one_key(u, MORI__KV_OP__KV_REMOVE, key, key_len, 0);
}

int mori_umbp_pin(mori_umbp *u, const void *key, size_t key_len, mori_umbp_pin_kind pin)
{
	if (u && (unsigned)pin > MORI_UMBP_PIN_HARD)
		return set_error(u->c, MORI_EINVAL, "pin %d is not a mori_umbp_pin_kind", (int)pin);
	return one_key(u, MORI__KV_OP__KV_PIN, key, key_len, (uint32_t)pin);
}

size_t umbp_lookup_round(mori_umbp *u, const mori_umbp_key *keys, size_t n)
{
	size_t max = u->s->info.lookup_max ? u->s->info.lookup_max : u->s->info.batch_max ? u->s->info.batch_max : 1;
	size_t i = 0, bytes = 0;
	while (i < n && i < max && (i == 0 || bytes + keys[i].len + 16 <= UMBP_LOOKUP_BYTES))
		bytes += keys[i++].len + 16;
	return i;
}

mori_client *umbp_client(mori_umbp *u)
{
	return u->c;
}

/* exists over a batch, in rounds of umbp_lookup_round; consecutive stops at the first absent key. */
static int exists_batch(mori_umbp *u, const mori_umbp_key *keys, size_t n, uint8_t *present, size_t *count)
{
	int rc = umbp_call_check(u);
	if (rc != MORI_OK)
		return rc;
	if (!keys || n == 0 || (!present && !count))
		return set_error(u->c, MORI_EINVAL, "exists: NULL argument or 0 keys");
	for (size_t i = 0; i < n; i++)
		if (!keys[i].data || keys[i].len == 0 || keys[i].len > MORI_UMBP_KEY_MAX)
			return set_error(u->c, MORI_EINVAL, "key %zu of %zu bytes (keys have 1..%d)", i, keys[i].len,
					 MORI_UMBP_KEY_MAX);
	if (count)
		*count = 0;
	for (size_t at = 0, k; at < n; at += k) {
		k = umbp_lookup_round(u, keys + at, n - at);
		Mori__Reply *rep;
		if ((rc = keys_rpc(u, MORI__KV_OP__KV_EXISTS, keys + at, k, count != NULL, 0, &rep)) != MORI_OK)
			return rc;
		for (size_t i = 0; present && i < k; i++)
			present[at + i] = i < rep->kv->n_present && rep->kv->present[i];
		size_t got = rep->kv->count;
		mori__reply__free_unpacked(rep, NULL);
		if (count) {
			*count += got;
			if (got < k)
				break;
		}
	}
	return MORI_OK;
}

int mori_umbp_batch_exists(mori_umbp *u, const mori_umbp_key *keys, size_t n, uint8_t *present)
{
	if (u && !present)
		return set_error(u->c, MORI_EINVAL, "batch exists: present is NULL");
	return exists_batch(u, keys, n, present, NULL);
}

int mori_umbp_batch_exists_consecutive(mori_umbp *u, const mori_umbp_key *keys, size_t n, size_t *count)
{
	if (u && !count)
		return set_error(u->c, MORI_EINVAL, "batch exists consecutive: count is NULL");
	return exists_batch(u, keys, n, NULL, count);
}

static int simple(mori_umbp *u, Mori__KvOp op, Mori__Reply **out)
{
	int rc = umbp_call_check(u);
	if (rc != MORI_OK)
		return rc;
	Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
	Mori__Reply *rep;
	kq.op = op;
	if ((rc = umbp_kv_rpc(u, &kq, &rep, NULL, NULL)) != MORI_OK)
		return rc;
	if (out)
		*out = rep;
	else
		mori__reply__free_unpacked(rep, NULL);
	return MORI_OK;
}

int mori_umbp_clear(mori_umbp *u)
{
	return simple(u, MORI__KV_OP__KV_CLEAR, NULL);
}

int mori_umbp_flush(mori_umbp *u)
{
	return simple(u, MORI__KV_OP__KV_FLUSH, NULL);
}

int mori_umbp_stats_get(mori_umbp *u, mori_umbp_stats *out)
{
	if (!out || out->size < sizeof(mori_umbp_stats))
		return u ? set_error(u->c, MORI_EINVAL, "stats: NULL or out->size too small") : MORI_EINVAL;
	Mori__Reply *rep;
	int rc = simple(u, MORI__KV_OP__KV_STATS, &rep);
	if (rc != MORI_OK)
		return rc;
	const Mori__KvStats *s = rep->kv->stats;
	size_t size = out->size;
	memset(out, 0, size);
	out->size = size;
	if (s) {
		out->dram_capacity = s->dram_capacity;
		out->ssd_capacity = s->ssd_capacity;
		if (s->n_uids) {
			const Mori__KvUidStats *us = s->uids[0];
			out->dram_keys = us->dram_keys;
			out->dram_bytes = us->dram_bytes;
			out->ssd_keys = us->ssd_keys;
			out->ssd_bytes = us->ssd_bytes;
			out->quota_bytes = us->quota_bytes;
			out->used_bytes = us->used_bytes;
			out->hits = us->hits;
			out->misses = us->misses;
			out->evictions = us->evictions;
			out->spills = us->spills;
			out->promotions = us->promotions;
		}
	}
	mori__reply__free_unpacked(rep, NULL);
	return MORI_OK;
}

int mori_umbp_register_memory(mori_umbp *u, void *ptr, size_t size)
{
	int rc = umbp_call_check(u);
	return rc != MORI_OK ? rc : umbp_regs_add(&u->regs, u->c, ptr, size);
}

int mori_umbp_deregister_memory(mori_umbp *u, void *ptr)
{
	int rc = umbp_call_check(u);
	return rc != MORI_OK ? rc : umbp_regs_remove(&u->regs, u->c, ptr);
}
