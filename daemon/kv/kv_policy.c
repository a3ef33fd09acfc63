/* Eviction policies of the KV store (kv_policy.h). Each policy keeps its nodes on up to three
 * intrusive lists (most recent or newest at the head, victims from the tail) and the node's two
 * words: word[0] packs the bytes, the list, a 2-bit frequency and flags, word[1] the hash.
 *
 * A victim is chosen by walking a list from its tail, passing over nodes skip() refuses; they
 * stay where they are. A walk may reorder the nodes it passes (S3-FIFO promotes and reinserts),
 * but the victim it returns stays in place until kv_policy_evicted. Memory beyond the nodes: the
 * ghost table of S3-FIFO, the frequency sketch of TinyLFU and ARC's ghost lists, all sized by the
 * number of resident entries and capped (GHOST_MAX_SLOTS, SKETCH_MAX_WIDTH, ARC_GHOST_MAX). */
#include "kv/kv_policy.h"

#include <stdlib.h>
#include <string.h>

/* word[0]: bits 0..39 bytes, 40..42 list, 43..44 frequency, 45 has had a child, 46 was hit,
 * 47..63 depth + 1 (0: unknown) */
#define W_BYTES_MASK ((1ull << 40) - 1)
#define W_LIST_SHIFT 40
#define W_FREQ_SHIFT 43
#define W_CHILD (1ull << 45)
#define W_HIT (1ull << 46)
#define FREQ_MAX 3
#define W_DEPTH_SHIFT 47
#define DEPTH1_MAX ((1u << 17) - 1)

#define GHOST_WAYS 4
#define GHOST_MIN_SLOTS 1024u
#define GHOST_MAX_SLOTS (1u << 22) /* 64 MiB of 16-byte slots at most */
#define SKETCH_ROWS 4
#define SKETCH_MIN_WIDTH 1024u
#define SKETCH_MAX_WIDTH (1u << 24) /* 64 MiB of one-byte counters at most */
#define SKETCH_CMAX 15
#define ARC_GHOST_MIN 1024u
#define ARC_GHOST_MAX (1u << 21) /* 32-byte nodes and 4-byte buckets: 72 MiB at most */

/* Shares of the capacity (per mille). */
#define S3_SMALL_PM 100     /* S3-FIFO's small FIFO: 10 % */
#define TLFU_WINDOW_PM 10   /* TinyLFU's admission window: 1 % */
#define TLFU_PROTECT_PM 800 /* of the main part: the protected segment */
#define PSLRU_PROTECT_PM 300 /* prefix-SLRU's protected segment (docs/umbp-policy.md) */

enum { L_NONE = 0, L_A = 1, L_B = 2, L_C = 3, NLISTS = 4 };

struct list {
	struct kv_pnode *head, *tail;
	uint64_t bytes, n;
};

/* A bounded set of recently evicted hashes: set-associative, each slot stamped with the
 * insertion count, an entry older than `window` insertions counts as gone. */
struct ghost {
	struct {
		uint64_t hash, seq; /* seq 0: empty */
	} *slot;
	uint32_t nslots; /* a power of two, multiple of GHOST_WAYS */
	uint64_t seq;
};

/* Count-min sketch of reference counts by hash, halved every `period` increments (aging). */
struct sketch {
	uint8_t *c; /* SKETCH_ROWS x width */
	uint32_t width;
	uint64_t adds, period;
};

/* ARC's ghost lists B1 and B2: evicted hashes with their bytes, most recent at the head; a pool
 * of nodes linked by index (0: none) and a chained hash table of as many buckets. */
struct gnode {
	uint64_t hash, bytes;
	uint32_t prev, next, chain; /* next also links the free nodes */
	uint16_t list;              /* 0 free, 1 B1, 2 B2 */
	uint16_t adapted;           /* kv_policy_expect has adapted the target to it */
};

struct arc {
	struct gnode *node;
	uint32_t *bucket;
	uint32_t cap, used, free; /* nodes (node[0] unused), in use, free list */
	uint32_t head[3], tail[3];
	uint64_t bytes[3], n[3];
	double target;    /* p: the bytes T1 aims at */
	uint64_t pend;    /* kv_policy_expect's last hash, */
	int pend_list;    /* where it was found: -1 none pending, 0 no ghost, 1 B1, 2 B2 */
};

struct kv_policy {
	enum kv_policy_kind kind; /* concrete: never KV_POLICY_DEFAULT */
	uint64_t capacity;
	struct list l[NLISTS];
	uint64_t nres, nres_max; /* resident entries, now and the most so far */
	struct ghost g;
	struct sketch sk;
	/* prefix-LRU: the last node put in chain order (its successor goes right behind it) and the
	 * last inserted (its chain may still grow: not a tail yet) */
	struct kv_pnode *cursor, *last_ins;
	uint64_t protect; /* prefix-SLRU: bytes of the protected segment at most */
	struct arc arc;
};

/* The measured best on the Mooncake conversation trace (docs/umbp-policy.md). */
#define DEFAULT_KIND KV_POLICY_PREFIX_SLRU

static const char *const names[KV_POLICY_NKINDS] = {
	[KV_POLICY_LRU] = "lru",
	[KV_POLICY_DEFAULT] = "default",
	[KV_POLICY_S3FIFO] = "s3fifo",
	[KV_POLICY_TINYLFU] = "tinylfu",
	[KV_POLICY_PREFIX_LRU] = "prefix-lru",
	[KV_POLICY_PREFIX_SLRU] = "prefix-slru",
	[KV_POLICY_ARC] = "arc",
};

const char *kv_policy_name(enum kv_policy_kind kind)
{
	return (unsigned)kind < KV_POLICY_NKINDS && names[kind] ? names[kind] : "?";
}

int kv_policy_parse(const char *name)
{
	for (int k = 0; name && k < KV_POLICY_NKINDS; k++)
		if (names[k] && !strcmp(names[k], name))
			return k;
	return -1;
}

enum kv_policy_kind kv_policy_kind_of(const struct kv_policy *p)
{
	return p->kind;
}

/* ---- nodes and lists ---- */

static uint64_t nbytes(const struct kv_pnode *n) { return n->word[0] & W_BYTES_MASK; }
static unsigned nlist(const struct kv_pnode *n) { return (n->word[0] >> W_LIST_SHIFT) & 7; }
static unsigned nfreq(const struct kv_pnode *n) { return (n->word[0] >> W_FREQ_SHIFT) & 3; }

static unsigned ndepth1(const struct kv_pnode *n) { return (unsigned)(n->word[0] >> W_DEPTH_SHIFT); }

static void set_freq(struct kv_pnode *n, unsigned f)
{
	n->word[0] = (n->word[0] & ~(3ull << W_FREQ_SHIFT)) | ((uint64_t)f << W_FREQ_SHIFT);
}

static void unlink_node(struct kv_policy *p, struct kv_pnode *n)
{
	struct list *l = &p->l[nlist(n)];
	struct kv_pnode *prev = n->prev, *next = n->next;
	if (prev)
		prev->next = next;
	else
		l->head = next;
	if (next)
		next->prev = prev;
	else
		l->tail = prev;
	l->bytes -= nbytes(n);
	l->n--;
	n->prev = n->next = NULL;
	n->word[0] &= ~(7ull << W_LIST_SHIFT);
}

static void push_head(struct kv_policy *p, unsigned li, struct kv_pnode *n)
{
	struct list *l = &p->l[li];
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		((struct kv_pnode *)l->head)->prev = n;
	else
		l->tail = n;
	l->head = n;
	l->bytes += nbytes(n);
	l->n++;
	n->word[0] = (n->word[0] & ~(7ull << W_LIST_SHIFT)) | ((uint64_t)li << W_LIST_SHIFT);
}

static void move_head(struct kv_policy *p, unsigned li, struct kv_pnode *n)
{
	unlink_node(p, n);
	push_head(p, li, n);
}

/* n right behind pos (towards the tail) in pos's list. */
static void push_after(struct kv_policy *p, struct kv_pnode *pos, struct kv_pnode *n)
{
	unsigned li = nlist(pos);
	struct list *l = &p->l[li];
	n->prev = pos;
	n->next = pos->next;
	if (pos->next)
		((struct kv_pnode *)pos->next)->prev = n;
	else
		l->tail = n;
	pos->next = n;
	l->bytes += nbytes(n);
	l->n++;
	n->word[0] = (n->word[0] & ~(7ull << W_LIST_SHIFT)) | ((uint64_t)li << W_LIST_SHIFT);
}

/* Recency in chain order: a node touched right after its predecessor (depth one less) goes just
 * behind it rather than ahead, so a chain lies root first and its deepest blocks, useless
 * without the ones before them, are the first to go. */
static void touch_chain(struct kv_policy *p, unsigned li, struct kv_pnode *n)
{
	struct kv_pnode *c = p->cursor;
	if (nlist(n) != L_NONE)
		unlink_node(p, n);
	if (c && c != n && nlist(c) == li && ndepth1(n) && ndepth1(n) == ndepth1(c) + 1)
		push_after(p, c, n);
	else
		push_head(p, li, n);
	p->cursor = n;
}

typedef int (*skip_fn)(struct kv_pnode *n, void *arg);

/* The list's oldest node that skip() lets go, or NULL. */
static struct kv_pnode *oldest_free(struct kv_policy *p, unsigned li, skip_fn skip, void *arg)
{
	for (struct kv_pnode *n = p->l[li].tail; n; n = n->prev)
		if (!skip || !skip(n, arg))
			return n;
	return NULL;
}

/* ---- the ghost table ---- */

static int ghost_alloc(struct ghost *g, uint32_t nslots)
{
	void *s = calloc(nslots, sizeof(*g->slot));
	if (!s)
		return -1;
	free(g->slot);
	g->slot = s;
	g->nslots = nslots;
	return 0;
}

/* How far back the ghost remembers, in evictions: as many as there are resident entries. */
static uint64_t ghost_window(const struct kv_policy *p)
{
	return p->nres_max > 64 ? p->nres_max : 64;
}

static int ghost_live(const struct kv_policy *p, uint64_t seq)
{
	return seq && p->g.seq - seq < ghost_window(p);
}

static void ghost_put(struct kv_policy *p, uint64_t hash)
{
	struct ghost *g = &p->g;
	/* grow (rehashing the live entries) while the window outgrows half the table */
	if (ghost_window(p) * 2 > g->nslots && g->nslots < GHOST_MAX_SLOTS) {
		struct ghost old = *g;
		g->slot = NULL;
		if (ghost_alloc(g, old.nslots * 2)) {
			*g = old; /* no memory: keep remembering less */
		} else {
			for (uint32_t i = 0; i < old.nslots; i++)
				if (ghost_live(p, old.slot[i].seq)) {
					uint32_t b = (uint32_t)(old.slot[i].hash & (g->nslots / GHOST_WAYS - 1)) * GHOST_WAYS;
					for (int w = 0; w < GHOST_WAYS; w++)
						if (!g->slot[b + w].seq) {
							g->slot[b + w] = old.slot[i];
							break;
						}
				}
			free(old.slot);
		}
	}
	uint32_t b = (uint32_t)(hash & (g->nslots / GHOST_WAYS - 1)) * GHOST_WAYS, pick = b;
	for (int w = 0; w < GHOST_WAYS; w++) { /* an empty, expired or the oldest way */
		if (!ghost_live(p, g->slot[b + w].seq)) {
			pick = b + w;
			break;
		}
		if (g->slot[b + w].seq < g->slot[pick].seq)
			pick = b + w;
	}
	g->slot[pick].hash = hash;
	g->slot[pick].seq = ++g->seq;
}

/* Whether hash was evicted recently; a found entry is forgotten. */
static int ghost_take(struct kv_policy *p, uint64_t hash)
{
	struct ghost *g = &p->g;
	uint32_t b = (uint32_t)(hash & (g->nslots / GHOST_WAYS - 1)) * GHOST_WAYS;
	for (int w = 0; w < GHOST_WAYS; w++)
		if (g->slot[b + w].hash == hash && ghost_live(p, g->slot[b + w].seq)) {
			g->slot[b + w].seq = 0;
			return 1;
		}
	return 0;
}

/* ---- the frequency sketch ---- */

static uint64_t mix(uint64_t x, unsigned row)
{
	x += 0x9e3779b97f4a7c15ull * (row + 1);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static unsigned sketch_get(const struct sketch *s, uint64_t hash)
{
	unsigned m = SKETCH_CMAX;
	for (unsigned r = 0; r < SKETCH_ROWS; r++) {
		unsigned v = s->c[r * s->width + (mix(hash, r) & (s->width - 1))];
		if (v < m)
			m = v;
	}
	return m;
}

static void sketch_inc(struct kv_policy *p, uint64_t hash)
{
	struct sketch *s = &p->sk;
	/* widen with the resident entries (counts restart: rare, and only while the store fills) */
	if (p->nres_max > s->width && s->width < SKETCH_MAX_WIDTH) {
		uint8_t *c = calloc((size_t)SKETCH_ROWS * s->width * 2, 1);
		if (c) {
			free(s->c);
			s->c = c;
			s->width *= 2;
			s->adds = 0;
		}
	}
	s->period = 10ull * s->width;
	unsigned m = sketch_get(s, hash);
	for (unsigned r = 0; r < SKETCH_ROWS; r++) { /* conservative update: raise only the minima */
		uint8_t *c = &s->c[r * s->width + (mix(hash, r) & (s->width - 1))];
		if (*c == m && m < SKETCH_CMAX)
			(*c)++;
	}
	if (++s->adds >= s->period) { /* aging: old popularity fades */
		for (size_t i = 0; i < (size_t)SKETCH_ROWS * s->width; i++)
			s->c[i] >>= 1;
		s->adds /= 2;
	}
}

/* ---- ARC's ghost lists ---- */

static uint32_t *gbucket(struct arc *a, uint64_t hash)
{
	return &a->bucket[mix(hash, 0) & (a->cap - 1)];
}

static uint32_t garc_find(struct arc *a, uint64_t hash)
{
	uint32_t i = a->cap ? *gbucket(a, hash) : 0;
	while (i && a->node[i].hash != hash)
		i = a->node[i].chain;
	return i;
}

static void garc_unlink(struct arc *a, uint32_t i)
{
	struct gnode *g = &a->node[i];
	uint32_t *c = gbucket(a, g->hash);
	while (*c != i)
		c = &a->node[*c].chain;
	*c = g->chain;
	if (g->prev)
		a->node[g->prev].next = g->next;
	else
		a->head[g->list] = g->next;
	if (g->next)
		a->node[g->next].prev = g->prev;
	else
		a->tail[g->list] = g->prev;
	a->bytes[g->list] -= g->bytes;
	a->n[g->list]--;
	g->list = 0;
	g->next = a->free;
	a->free = i;
	a->used--;
}

/* Doubles the pool and the buckets (indices stay, chains are rebuilt). -1 on ENOMEM. */
static int garc_grow(struct arc *a)
{
	uint32_t ncap = a->cap ? a->cap * 2 : ARC_GHOST_MIN;
	struct gnode *nd = realloc(a->node, (size_t)ncap * sizeof(*nd));
	if (!nd)
		return -1;
	a->node = nd;
	uint32_t *b = calloc(ncap, sizeof(*b));
	if (!b)
		return -1; /* the pool is larger, the table as before: still consistent */
	free(a->bucket);
	a->bucket = b;
	for (uint32_t i = ncap - 1; i >= (a->cap ? a->cap : 1); i--) { /* new nodes onto the free list */
		nd[i].list = 0;
		nd[i].next = a->free;
		a->free = i;
	}
	a->cap = ncap;
	for (uint32_t l = 1; l <= 2; l++)
		for (uint32_t i = a->head[l]; i; i = nd[i].next) {
			uint32_t *c = gbucket(a, nd[i].hash);
			nd[i].chain = *c;
			*c = i;
		}
	return 0;
}

/* hash at the head of ghost list l. The pool grows with the resident entries (ARC keeps at most
 * as many ghosts as the capacity holds values of their sizes); past that, or without memory, the
 * longer list's oldest ghost makes way. */
static void garc_push(struct kv_policy *p, unsigned l, uint64_t hash, uint64_t bytes)
{
	struct arc *a = &p->arc;
	if (!a->free) {
		uint64_t want = 2 * p->nres_max > ARC_GHOST_MIN ? 2 * p->nres_max : ARC_GHOST_MIN;
		if (a->cap >= ARC_GHOST_MAX || a->cap > want || garc_grow(a)) {
			unsigned old = a->n[1] >= a->n[2] ? 1 : 2;
			if (!a->tail[old])
				return;
			garc_unlink(a, a->tail[old]);
		}
	}
	uint32_t i = a->free;
	struct gnode *g = &a->node[i];
	a->free = g->next;
	*g = (struct gnode){.hash = hash, .bytes = bytes, .prev = 0, .next = a->head[l], .list = (uint16_t)l};
	if (a->head[l])
		a->node[a->head[l]].prev = i;
	else
		a->tail[l] = i;
	a->head[l] = i;
	uint32_t *c = gbucket(a, hash);
	g->chain = *c;
	*c = i;
	a->bytes[l] += bytes;
	a->n[l]++;
	a->used++;
}

/* A put of hash: a ghost hit adapts T1's target (towards recency on B1, frequency on B2, by the
 * other list's share), once: at kv_policy_expect, or at the insert without one. The insert takes
 * the ghost out; an expect leaves it for the insert, which may come after other puts' expects
 * (a batch reserves all its values before committing them). Which list it was in (0 none). */
static int arc_adapt(struct kv_policy *p, uint64_t hash, int insert)
{
	struct arc *a = &p->arc;
	uint32_t i = garc_find(a, hash);
	if (!i)
		return 0;
	struct gnode *g = &a->node[i];
	int l = (int)g->list;
	if (!g->adapted) {
		uint64_t mine = a->bytes[l], other = a->bytes[3 - l];
		double delta = (double)g->bytes * (other > mine ? (double)other / (double)mine : 1.0);
		if (l == 1)
			a->target = a->target + delta < (double)p->capacity ? a->target + delta : (double)p->capacity;
		else
			a->target = a->target - delta > 0 ? a->target - delta : 0;
		g->adapted = 1;
	}
	if (insert)
		garc_unlink(a, i);
	return l;
}

/* ARC's REPLACE: T1's oldest when T1 is past its target (or at it, for a put that hit B2), else
 * T2's; the other list when the preferred one has nothing that may go. */
static struct kv_pnode *arc_victim(struct kv_policy *p, skip_fn skip, void *arg)
{
	double t1 = (double)p->l[L_A].bytes;
	int b2 = p->arc.pend_list == 2;
	unsigned first = t1 > 0 && (t1 > p->arc.target || (b2 && t1 == p->arc.target)) ? L_A : L_B;
	struct kv_pnode *v = oldest_free(p, first, skip, arg);
	return v ? v : oldest_free(p, first == L_A ? L_B : L_A, skip, arg);
}

/* ARC's bounds once n is in: T1 + B1 within the capacity, all four lists within twice it. */
static void arc_trim(struct kv_policy *p)
{
	struct arc *a = &p->arc;
	while (a->tail[1] && p->l[L_A].bytes + a->bytes[1] > p->capacity)
		garc_unlink(a, a->tail[1]);
	while (a->tail[2] && p->l[L_A].bytes + p->l[L_B].bytes + a->bytes[1] + a->bytes[2] > 2 * p->capacity)
		garc_unlink(a, a->tail[2]);
}

void kv_policy_expect(struct kv_policy *p, uint64_t hash)
{
	if (p->kind != KV_POLICY_ARC)
		return;
	p->arc.pend = hash;
	p->arc.pend_list = arc_adapt(p, hash, 0);
}

/* ---- the policies ---- */

struct kv_policy *kv_policy_new(enum kv_policy_kind kind, uint64_t capacity)
{
	if (kind == KV_POLICY_DEFAULT)
		kind = DEFAULT_KIND;
	if ((unsigned)kind >= KV_POLICY_NKINDS)
		return NULL;
	struct kv_policy *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->kind = kind;
	p->capacity = capacity;
	if ((kind == KV_POLICY_S3FIFO && ghost_alloc(&p->g, GHOST_MIN_SLOTS)) ||
	    (kind == KV_POLICY_TINYLFU && !(p->sk.c = calloc((size_t)SKETCH_ROWS * SKETCH_MIN_WIDTH, 1)))) {
		kv_policy_free(p);
		return NULL;
	}
	p->sk.width = SKETCH_MIN_WIDTH;
	p->arc.pend_list = -1;
	if (kind == KV_POLICY_PREFIX_SLRU) {
		p->protect = capacity / 1000 * PSLRU_PROTECT_PM + capacity % 1000 * PSLRU_PROTECT_PM / 1000;
	}
	return p;
}

void kv_policy_free(struct kv_policy *p)
{
	if (!p)
		return;
	free(p->g.slot);
	free(p->sk.c);
	free(p->arc.node);
	free(p->arc.bucket);
	free(p);
}

size_t kv_policy_aux_bytes(const struct kv_policy *p)
{
	return (size_t)p->g.nslots * sizeof(*p->g.slot) + (p->sk.c ? (size_t)SKETCH_ROWS * p->sk.width : 0) +
	       (size_t)p->arc.cap * (sizeof(struct gnode) + sizeof(uint32_t));
}

void kv_policy_insert(struct kv_policy *p, struct kv_pnode *n, uint64_t hash, uint64_t bytes, int depth,
		      struct kv_pnode *parent)
{
	n->prev = n->next = NULL;
	n->word[0] = bytes & W_BYTES_MASK;
	if (depth >= 0)
		n->word[0] |= (uint64_t)(depth + 1u < DEPTH1_MAX ? depth + 1u : DEPTH1_MAX) << W_DEPTH_SHIFT;
	n->word[1] = hash;
	if (++p->nres > p->nres_max)
		p->nres_max = p->nres;
	switch (p->kind) {
	case KV_POLICY_S3FIFO:
		push_head(p, ghost_take(p, hash) ? L_B : L_A, n);
		break;
	case KV_POLICY_TINYLFU: {
		uint64_t win = p->capacity * TLFU_WINDOW_PM / 1000;
		sketch_inc(p, hash);
		push_head(p, L_A, n);
		/* while the main part has room, the window's overflow enters it without a contest */
		while (p->l[L_A].bytes > win && p->l[L_B].bytes + p->l[L_C].bytes + nbytes(p->l[L_A].tail) <= p->capacity - win)
			move_head(p, L_B, p->l[L_A].tail);
		break;
	}
	case KV_POLICY_PREFIX_LRU:
	case KV_POLICY_PREFIX_SLRU:
		/* a new node is its chain's tail; its parent no longer is */
		push_head(p, L_A, n);
		if (parent && nlist(parent) != L_NONE) {
			parent->word[0] |= W_CHILD;
			if (nlist(parent) == L_A)
				touch_chain(p, L_B, parent);
		}
		p->last_ins = n;
		break;
	case KV_POLICY_ARC: {
		/* ARC: new in T1, back from a ghost list in T2 */
		int l = arc_adapt(p, hash, 1);
		if (p->arc.pend == hash)
			p->arc.pend_list = -1;
		push_head(p, l ? L_B : L_A, n);
		arc_trim(p);
		break;
	}
	default:
		push_head(p, L_A, n);
		break;
	}
}

void kv_policy_hit(struct kv_policy *p, struct kv_pnode *n)
{
	unsigned li = nlist(n);
	if (li == L_NONE)
		return;
	n->word[0] |= W_HIT;
	switch (p->kind) {
	case KV_POLICY_S3FIFO:
		if (nfreq(n) < FREQ_MAX)
			set_freq(n, nfreq(n) + 1);
		break;
	case KV_POLICY_TINYLFU:
		sketch_inc(p, n->word[1]);
		if (li == L_A) {
			move_head(p, L_A, n);
			break;
		}
		move_head(p, L_C, n); /* probation or protected: now protected */
		/* the protected segment past its share: its oldest go back to probation */
		while (p->l[L_C].bytes > (p->capacity - p->capacity * TLFU_WINDOW_PM / 1000) * TLFU_PROTECT_PM / 1000 &&
		       p->l[L_C].tail != n)
			move_head(p, L_B, p->l[L_C].tail);
		break;
	case KV_POLICY_PREFIX_LRU:
		touch_chain(p, L_B, n); /* a tail that was hit has proved itself */
		break;
	case KV_POLICY_ARC:
		move_head(p, L_B, n); /* seen twice: T2 */
		break;
	case KV_POLICY_PREFIX_SLRU:
		/* hit: protected; the segment past its share hands its oldest back to probation */
		touch_chain(p, L_C, n);
		while (p->l[L_C].bytes > p->protect && p->l[L_C].tail != n)
			move_head(p, L_B, p->l[L_C].tail);
		break;
	default:
		move_head(p, li, n);
		break;
	}
}

static void forget(struct kv_policy *p, struct kv_pnode *n)
{
	if (p->cursor == n)
		p->cursor = NULL;
	if (p->last_ins == n)
		p->last_ins = NULL;
	unlink_node(p, n);
	p->nres--;
}

void kv_policy_remove(struct kv_policy *p, struct kv_pnode *n)
{
	if (nlist(n) != L_NONE)
		forget(p, n);
}

/* S3-FIFO's small FIFO: a node hit while in it moves to main, the first unhit one is the victim. */
static struct kv_pnode *s3_small(struct kv_policy *p, skip_fn skip, void *arg)
{
	struct kv_pnode *n = p->l[L_A].tail;
	while (n) {
		struct kv_pnode *prev = n->prev;
		if (!skip || !skip(n, arg)) {
			if (!nfreq(n))
				return n;
			set_freq(n, 0);
			move_head(p, L_B, n);
		}
		n = prev;
	}
	return NULL;
}

/* S3-FIFO's main FIFO as a CLOCK: a node with frequency left is reinserted at the head with one
 * less. Reinserted nodes sit just before the old head, so the walk reaches them again in order;
 * skipped nodes stay behind it. Each node is passed at most FREQ_MAX + 1 times. */
static struct kv_pnode *s3_main(struct kv_policy *p, skip_fn skip, void *arg)
{
	uint64_t budget = (FREQ_MAX + 1) * p->l[L_B].n + 1;
	struct kv_pnode *n = p->l[L_B].tail;
	while (n && budget--) {
		struct kv_pnode *prev = n->prev;
		if (!skip || !skip(n, arg)) {
			if (!nfreq(n))
				return n;
			set_freq(n, nfreq(n) - 1);
			move_head(p, L_B, n);
			if (!prev) /* n was the head: it is next again */
				prev = n;
		}
		n = prev;
	}
	return NULL;
}

static struct kv_pnode *s3_victim(struct kv_policy *p, skip_fn skip, void *arg)
{
	struct kv_pnode *v = NULL;
	int small_first = p->l[L_A].bytes > p->capacity * S3_SMALL_PM / 1000 || !p->l[L_B].n;
	if (small_first && (v = s3_small(p, skip, arg)))
		return v;
	if ((v = s3_main(p, skip, arg)))
		return v;
	return small_first ? NULL : s3_small(p, skip, arg);
}

/* W-TinyLFU: once the main part is full, the window's oldest enters it only if the sketch
 * counts it more often than the main part's victim; the loser is evicted. */
static struct kv_pnode *tlfu_victim(struct kv_policy *p, skip_fn skip, void *arg)
{
	uint64_t win = p->capacity * TLFU_WINDOW_PM / 1000;
	{
		struct kv_pnode *main_v = oldest_free(p, L_B, skip, arg);
		if (!main_v)
			main_v = oldest_free(p, L_C, skip, arg);
		if (p->l[L_A].bytes < win && main_v) /* the put to come stays within the window */
			return main_v;
		struct kv_pnode *cand = oldest_free(p, L_A, skip, arg);
		if (!cand || !main_v)
			return cand ? cand : main_v;
		if (sketch_get(&p->sk, cand->word[1]) <= sketch_get(&p->sk, main_v->word[1]))
			return cand;
		move_head(p, L_B, cand);
		return main_v;
	}
}

struct kv_pnode *kv_policy_victim(struct kv_policy *p, int (*skip)(struct kv_pnode *n, void *arg), void *arg)
{
	struct kv_pnode *v;
	switch (p->kind) {
	case KV_POLICY_S3FIFO:
		return s3_victim(p, skip, arg);
	case KV_POLICY_TINYLFU:
		return tlfu_victim(p, skip, arg);
	case KV_POLICY_ARC:
		return arc_victim(p, skip, arg);
	case KV_POLICY_PREFIX_LRU:
	case KV_POLICY_PREFIX_SLRU:
		/* chain tails never hit first (but not the last put: its chain may be growing), then
		 * the rest by recency */
		for (v = p->l[L_A].tail; v; v = v->prev)
			if (v != p->last_ins && (!skip || !skip(v, arg)))
				return v;
		if ((v = oldest_free(p, L_B, skip, arg)) || (v = oldest_free(p, L_C, skip, arg)))
			return v;
		return p->last_ins && (!skip || !skip(p->last_ins, arg)) ? p->last_ins : NULL;
	default:
		return oldest_free(p, L_A, skip, arg);
	}
}

void kv_policy_evicted(struct kv_policy *p, struct kv_pnode *n)
{
	unsigned li = nlist(n);
	if (li == L_NONE)
		return;
	if (p->kind == KV_POLICY_S3FIFO && li == L_A)
		ghost_put(p, n->word[1]);
	if (p->kind == KV_POLICY_ARC)
		garc_push(p, li == L_A ? 1 : 2, n->word[1], nbytes(n));
	forget(p, n);
}
