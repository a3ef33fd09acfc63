/* The DRAM tier's slabs and their allocator (kv_dram.h). TLSF: free runs sit in bins by size,
 * a first level per power of two and SL_N sub-bins inside it, with bitmaps of the non-empty
 * ones; an allocation rounds its size up to the next bin boundary, so any run of the first
 * non-empty bin at or above it fits (O(1), no list walk). A uid's slabs share its bins. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "invariant.h"
#include "kv/kv_dram.h"
#include "log.h"
#include "mori.h"

#define SL_LOG 3
#define SL_N (1u << SL_LOG)
#define FL_N 32

struct kv_free {
	struct kv_ext e;
	struct kv_free *fprev, *fnext;
};

struct arena {
	uid_t uid;
	uint32_t fl_map;
	uint8_t sl_map[FL_N];
	struct kv_free *bins[FL_N][SL_N];
	struct kv_slab *slabs; /* its regular slabs */
	uint32_t nslabs;
};

struct kv_dram {
	uint64_t slab_bytes, limit;
	uint64_t total_bytes;      /* every slab's bytes */
	uint64_t allocated;        /* granules of values, as bytes */
	uint64_t free_runs;
	struct kv_slab **slots;    /* by index */
	uint32_t nslots, cap_slots;
	uint32_t *free_slots;      /* indices to reuse */
	uint32_t nfree_slots;
	uint32_t next_id;
	struct arena *arenas;
	uint32_t narenas;
	void (*on_close)(void *arg, const struct kv_slab *s);
	void *on_close_arg;
};

static int log2_floor(uint32_t n) { return 31 - __builtin_clz(n); }

/* The bin holding runs of n granules. */
static void mapping(uint32_t n, int *fl, int *sl)
{
	if (n < SL_N) {
		*fl = 0;
		*sl = (int)n;
		return;
	}
	int l = log2_floor(n);
	*fl = l - SL_LOG + 1;
	*sl = (int)((n >> (l - SL_LOG)) & (SL_N - 1));
}

/* The first bin all of whose runs hold n granules. */
static void mapping_search(uint32_t n, int *fl, int *sl)
{
	if (n >= SL_N) {
		int l = log2_floor(n);
		uint64_t up = (uint64_t)n + (1u << (l - SL_LOG)) - 1;
		n = up > UINT32_MAX ? UINT32_MAX : (uint32_t)up;
	}
	mapping(n, fl, sl);
}

static void bin_insert(struct kv_dram *t, struct arena *a, struct kv_free *f)
{
	int fl, sl;
	mapping(f->e.len, &fl, &sl);
	f->fprev = NULL;
	f->fnext = a->bins[fl][sl];
	if (f->fnext)
		f->fnext->fprev = f;
	a->bins[fl][sl] = f;
	a->fl_map |= 1u << fl;
	a->sl_map[fl] |= (uint8_t)(1u << sl);
	t->free_runs++;
}

static void bin_remove(struct kv_dram *t, struct arena *a, struct kv_free *f)
{
	int fl, sl;
	mapping(f->e.len, &fl, &sl);
	if (f->fprev)
		f->fprev->fnext = f->fnext;
	else
		a->bins[fl][sl] = f->fnext;
	if (f->fnext)
		f->fnext->fprev = f->fprev;
	if (!a->bins[fl][sl]) {
		a->sl_map[fl] &= (uint8_t)~(1u << sl);
		if (!a->sl_map[fl])
			a->fl_map &= ~(1u << fl);
	}
	t->free_runs--;
}

static struct kv_free *bin_find(struct arena *a, uint32_t n)
{
	int fl, sl;
	mapping_search(n, &fl, &sl);
	if (fl >= FL_N)
		return NULL;
	uint32_t sm = a->sl_map[fl] & (~0u << sl);
	if (!sm) {
		uint32_t fm = fl + 1 < FL_N ? a->fl_map & (~0u << (fl + 1)) : 0;
		if (!fm)
			return NULL;
		fl = __builtin_ctz(fm);
		sm = a->sl_map[fl];
	}
	return a->bins[fl][__builtin_ctz(sm)];
}

static struct arena *arena_of(struct kv_dram *t, uid_t uid, int create)
{
	for (uint32_t i = 0; i < t->narenas; i++)
		if (t->arenas[i].uid == uid)
			return &t->arenas[i];
	if (!create)
		return NULL;
	struct arena *na = realloc(t->arenas, sizeof(*na) * (t->narenas + 1));
	if (!na)
		return NULL;
	t->arenas = na;
	memset(&na[t->narenas], 0, sizeof(*na));
	na[t->narenas].uid = uid;
	return &na[t->narenas++];
}

struct kv_dram *kv_dram_new(uint64_t slab_bytes, uint64_t limit_bytes)
{
	struct kv_dram *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->slab_bytes = slab_bytes;
	t->limit = limit_bytes;
	t->next_id = 1;
	return t;
}

void kv_dram_on_close(struct kv_dram *t, void (*fn)(void *arg, const struct kv_slab *s), void *arg)
{
	t->on_close = fn;
	t->on_close_arg = arg;
}

static void slab_close(struct kv_dram *t, struct kv_slab *s)
{
	if (t->on_close)
		t->on_close(t->on_close_arg, s);
	munmap(s->base, s->bytes);
	close(s->fd);
	t->total_bytes -= s->bytes;
	t->slots[s->index] = NULL;
	t->free_slots[t->nfree_slots++] = s->index;
	free(s);
}

void kv_dram_free(struct kv_dram *t)
{
	if (!t)
		return;
	/* wholesale: the free runs' nodes, then every slab (the values' runs are their entries') */
	for (uint32_t k = 0; k < t->narenas; k++)
		for (int fl = 0; fl < FL_N; fl++)
			for (uint32_t sl = 0; sl < SL_N; sl++)
				for (struct kv_free *f = t->arenas[k].bins[fl][sl], *nx; f; f = nx) {
					nx = f->fnext;
					free(f);
				}
	for (uint32_t i = 0; i < t->nslots; i++)
		if (t->slots[i])
			slab_close(t, t->slots[i]);
	free(t->slots);
	free(t->free_slots);
	free(t->arenas);
	free(t);
}

/* A new memfd of bytes for uid, mapped by morid. NULL with errno. */
static struct kv_slab *slab_new(struct kv_dram *t, uid_t uid, uint64_t bytes, int dedicated)
{
	if (!t->nfree_slots && t->nslots == t->cap_slots) {
		uint32_t ncap = t->cap_slots ? 2 * t->cap_slots : 64;
		struct kv_slab **ns = realloc(t->slots, sizeof(*ns) * ncap);
		if (!ns)
			return NULL;
		t->slots = ns;
		uint32_t *nf = realloc(t->free_slots, sizeof(*nf) * ncap);
		if (!nf)
			return NULL;
		t->free_slots = nf;
		t->cap_slots = ncap;
	}
	struct kv_slab *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	char name[48];
	snprintf(name, sizeof(name), "mori-kv-uid%u", (unsigned)uid);
	s->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (s->fd < 0)
		goto fail;
	/* Clients map it read-write: sealed, none can shrink it under morid (a SIGBUS on the loop). */
	if (ftruncate(s->fd, (off_t)bytes) != 0 || fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		goto fail_fd;
	/* A shared slab's pages are allocated now, once: puts then copy at memory speed instead of
	 * faulting zeroed pages in one at a time, and a node short of memory fails here with a clear
	 * error rather than a client's SIGBUS mid-copy. A dedicated slab is written once: its pages
	 * fault in on that copy. */
	if (!dedicated && fallocate(s->fd, 0, 0, (off_t)bytes) != 0)
		goto fail_fd;
	/* morid's own page tables filled now too (MAP_POPULATE): its copies of a shared slab's values
	 * (spills to SSD, reads back) would otherwise fault each page in on first touch */
	s->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (dedicated ? 0 : MAP_POPULATE), s->fd, 0);
	if (s->base == MAP_FAILED)
		goto fail_fd;
	s->id = t->next_id++;
	s->uid = uid;
	s->bytes = bytes;
	s->dedicated = dedicated;
	s->index = t->nfree_slots ? t->free_slots[--t->nfree_slots] : t->nslots++;
	t->slots[s->index] = s;
	t->total_bytes += bytes;
	return s;
fail_fd: {
	int e = errno;
	close(s->fd);
	errno = e;
}
fail:
	free(s);
	return NULL;
}

static void punch(struct kv_slab *s, uint64_t off, uint64_t len)
{
	uint64_t a = (off + 4095) & ~4095ull, b = (off + len) & ~4095ull;
	if (b > a && fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a, (off_t)(b - a)) != 0)
		mlog_ratelimited(MLOG_WARN, "kv", "slab %u: giving pages back: %s", s->id, strerror(errno));
}

/* An empty regular slab of arena a leaves it; its memory goes back whole (clients may still map
 * it: the pages go now). */
static void slab_drop(struct kv_dram *t, struct arena *a, struct kv_slab *s)
{
	for (struct kv_slab **pp = &a->slabs; *pp; pp = &(*pp)->next_of_uid)
		if (*pp == s) {
			*pp = s->next_of_uid;
			break;
		}
	a->nslabs--;
	punch(s, 0, s->bytes);
	slab_close(t, s);
}

/* Room for another slab of bytes: an empty slab of any uid (but for its last) is given back.
 * 1 when the tier has room now. */
static int reclaim_empty(struct kv_dram *t, uint64_t bytes)
{
	uint32_t whole = (uint32_t)(t->slab_bytes / KV_GRANULE);
	int fl, sl;
	mapping(whole, &fl, &sl);
	for (uint32_t k = 0; k < t->narenas && t->total_bytes + bytes > t->limit; k++) {
		struct arena *a = &t->arenas[k];
		for (struct kv_free *f = a->bins[fl][sl], *nx; f && a->nslabs > 1 && t->total_bytes + bytes > t->limit;
		     f = nx) {
			nx = f->fnext;
			struct kv_slab *s = t->slots[f->e.slab];
			if (f->e.len != whole || s->used)
				continue;
			bin_remove(t, a, f);
			free(f);
			slab_drop(t, a, s);
		}
	}
	return t->total_bytes + bytes <= t->limit;
}

int kv_dram_alloc(struct kv_dram *t, uid_t uid, uint64_t bytes, struct kv_ext *ext)
{
	uint64_t g = (bytes + KV_GRANULE - 1) / KV_GRANULE;
	memset(ext, 0, sizeof(*ext));
	if (bytes > t->slab_bytes / 4) {
		uint64_t sz = (bytes + 4095) & ~4095ull;
		if (t->total_bytes + sz > t->limit && !reclaim_empty(t, sz))
			return MORI_ENOMEM;
		struct kv_slab *s = slab_new(t, uid, sz, 1);
		if (!s)
			return errno == ENOMEM ? MORI_ENOMEM : MORI_ESYS;
		ext->slab = s->index;
		ext->len = (uint32_t)g;
		s->used = g;
		t->allocated += g * KV_GRANULE;
		return MORI_OK;
	}
	struct arena *a = arena_of(t, uid, 1);
	if (!a)
		return MORI_ENOMEM;
	struct kv_free *f = bin_find(a, (uint32_t)g);
	if (!f) {
		if (t->total_bytes + t->slab_bytes > t->limit && !reclaim_empty(t, t->slab_bytes))
			return MORI_ENOMEM;
		struct kv_free *nf = calloc(1, sizeof(*nf));
		if (!nf)
			return MORI_ENOMEM;
		struct kv_slab *s = slab_new(t, uid, t->slab_bytes, 0);
		if (!s) {
			free(nf);
			return errno == ENOMEM ? MORI_ENOMEM : MORI_ESYS;
		}
		s->next_of_uid = a->slabs;
		a->slabs = s;
		a->nslabs++;
		nf->e.slab = s->index;
		nf->e.len = (uint32_t)(t->slab_bytes / KV_GRANULE);
		nf->e.free = 1;
		bin_insert(t, a, nf);
		f = nf;
	}
	bin_remove(t, a, f);
	MORI_REQUIRE(f->e.len >= g, "allocator bin holds a run too small");
	/* ext takes the front of the run; the rest stays free (or the node goes when used up) */
	ext->slab = f->e.slab;
	ext->off = f->e.off;
	ext->len = (uint32_t)g;
	ext->prev = f->e.prev;
	if (ext->prev)
		ext->prev->next = ext;
	if (f->e.len == g) {
		ext->next = f->e.next;
		if (ext->next)
			ext->next->prev = ext;
		free(f);
	} else {
		f->e.off += (uint32_t)g;
		f->e.len -= (uint32_t)g;
		f->e.prev = ext;
		ext->next = &f->e;
		bin_insert(t, a, f);
	}
	t->slots[ext->slab]->used += g;
	t->allocated += g * KV_GRANULE;
	return MORI_OK;
}


void kv_dram_release(struct kv_dram *t, struct kv_ext *ext)
{
	struct kv_slab *s = t->slots[ext->slab];
	MORI_REQUIRE(s && s->used >= ext->len, "release of a run its slab does not hold");
	s->used -= ext->len;
	t->allocated -= kv_ext_bytes(ext);
	if (s->dedicated) {
		slab_close(t, s);
		memset(ext, 0, sizeof(*ext));
		return;
	}
	/* A freed run keeps its pages: the next put into it copies at memory speed instead of
	 * faulting fresh zeroed pages in (the tier is bounded by kv_dram_bytes either way); an
	 * emptied slab gives its pages back whole. */
	struct arena *a = arena_of(t, s->uid, 0);
	MORI_REQUIRE(a, "slab without an arena");
	struct kv_ext *p = ext->prev, *n = ext->next;
	struct kv_free *f;
	if (p && p->free) {
		f = (struct kv_free *)p;
		bin_remove(t, a, f);
		f->e.len += ext->len;
		f->e.next = n;
		if (n)
			n->prev = &f->e;
	} else if (n && n->free) {
		f = (struct kv_free *)n;
		bin_remove(t, a, f);
		f->e.off = ext->off;
		f->e.len += ext->len;
		f->e.prev = p;
		if (p)
			p->next = &f->e;
		n = NULL; /* merged already */
	} else {
		f = calloc(1, sizeof(*f));
		if (!f) {
			/* the run stays unusable until morid restarts: counted as held, said once */
			s->used += ext->len;
			t->allocated += kv_ext_bytes(ext);
			mlog_ratelimited(MLOG_ERR, "kv", "out of memory freeing a run of slab %u: %u granules lost", s->id,
					 ext->len);
			return;
		}
		f->e = *ext;
		f->e.free = 1;
		if (p)
			p->next = &f->e;
		if (n)
			n->prev = &f->e;
		n = NULL;
	}
	if (n && n->free && f->e.next == n) {
		struct kv_free *g = (struct kv_free *)n;
		bin_remove(t, a, g);
		f->e.len += g->e.len;
		f->e.next = g->e.next;
		if (g->e.next)
			g->e.next->prev = &f->e;
		free(g);
	}
	memset(ext, 0, sizeof(*ext));
	/* An emptied slab stays while the tier is within its limit: its pages are allocated and warm
	 * in every mapping (a new slab zeroes its bytes on the loop, and each process then faults
	 * every page in again); an allocation short of room takes it back (reclaim_empty). */
	if (s->used == 0 && a->nslabs > 1 && t->total_bytes > t->limit) {
		free(f); /* its one run, in no bin yet */
		slab_drop(t, a, s);
		return;
	}
	bin_insert(t, a, f);
}

struct kv_slab *kv_dram_slab(const struct kv_dram *t, uint32_t index)
{
	return index < t->nslots ? t->slots[index] : NULL;
}

uint32_t kv_dram_slots(const struct kv_dram *t) { return t->nslots; }

void kv_dram_stats_get(const struct kv_dram *t, struct kv_dram_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (uint32_t i = 0; i < t->nslots; i++)
		out->slabs += t->slots[i] != NULL;
	out->slab_bytes = t->total_bytes;
	out->allocated = t->allocated;
	out->free_runs = t->free_runs;
	out->meta_bytes = t->free_runs * sizeof(struct kv_free) + t->cap_slots * (sizeof(void *) + 4) +
			  t->narenas * sizeof(struct arena) + out->slabs * sizeof(struct kv_slab);
}
