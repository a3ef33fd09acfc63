/* The SSD tier's helpers below its I/O path and its scan: CRC32C and the record format,
 * the segment table and each segment's entries, the pool of aligned buffers, the tier's space
 * and statistics. */
#include <isa-l/crc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kv/kv_ssd_int.h"

uint32_t ssd_crc(uint32_t state, const void *p, uint64_t n)
{
	const unsigned char *c = p;
	while (n) { /* ISA-L takes an int length */
		int k = n > (1u << 30) ? 1 << 30 : (int)n;
		state = crc32_iscsi((unsigned char *)c, k, state);
		c += k;
		n -= (uint64_t)k;
	}
	return state;
}

void rec_fill(struct rec_hdr *h, int type, uint32_t uid, uint64_t gen, const void *key, uint32_t key_len,
	      const void *val, uint64_t val_len, uint32_t val_off)
{
	memset(h, 0, sizeof(*h));
	h->magic = SSD_MAGIC;
	h->version = val_off ? SSD_VERSION_DIRECT : SSD_VERSION;
	h->val_off = val_off;
	h->type = (uint16_t)type;
	h->uid = uid;
	h->key_len = key_len;
	h->gen = gen;
	h->val_len = val_len;
	uint32_t c = ssd_crc(ssd_crc_init, h, sizeof(*h));
	c = ssd_crc(c, key, key_len);
	if (val_len)
		c = ssd_crc(c, val, val_len);
	h->data_crc = ssd_crc_final(c);
	h->hdr_crc = ssd_crc_final(ssd_crc(ssd_crc_init, h, sizeof(*h)));
}

int rec_hdr_ok(const struct rec_hdr *h)
{
	if (h->magic != SSD_MAGIC || (h->type != REC_VALUE && h->type != REC_TOMB))
		return 0;
	if (h->version == SSD_VERSION ? h->val_off != 0 :
	    h->version != SSD_VERSION_DIRECT || h->val_off != SSD_ALIGN || h->type != REC_VALUE)
		return 0;
	if (h->key_len < 1 || h->key_len > KV_SSD_KEY_MAX || h->val_len > (1ull << 44) ||
	    (h->type == REC_TOMB && h->val_len) || (h->type == REC_VALUE && !h->val_len))
		return 0;
	struct rec_hdr c = *h;
	c.hdr_crc = 0;
	return ssd_crc_final(ssd_crc(ssd_crc_init, &c, sizeof(c))) == h->hdr_crc;
}

int rec_data_ok(const void *p)
{
	struct rec_hdr h;
	memcpy(&h, p, sizeof(h));
	uint32_t want = h.data_crc;
	h.data_crc = h.hdr_crc = 0;
	uint32_t c = ssd_crc(ssd_crc_init, &h, sizeof(h));
	c = ssd_crc(c, (const char *)p + sizeof(h), h.key_len);
	c = ssd_crc(c, (const char *)p + rec_val_off(&h), h.val_len);
	return ssd_crc_final(c) == want;
}

int seg_name_parse(const char *name, uint32_t *no)
{
	if (strlen(name) != 15 || memcmp(name, "seg-", 4) || strcmp(name + 12, ".kv"))
		return -1;
	uint32_t u = 0;
	for (int i = 4; i < 12; i++) {
		if (name[i] < '0' || name[i] > '9')
			return -1;
		u = u * 10 + (uint32_t)(name[i] - '0');
	}
	*no = u;
	return 0;
}

/* ---- the segment table ---- */

static int segs_lower(const struct seg_table *t, uint32_t no)
{
	uint32_t lo = 0, hi = t->n;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (t->v[mid]->no < no)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (int)lo;
}

struct seg *segs_find(const struct seg_table *t, uint32_t no)
{
	int i = segs_lower(t, no);
	return (uint32_t)i < t->n && t->v[i]->no == no ? t->v[i] : NULL;
}

struct seg *segs_add(struct seg_table *t, uint32_t no, int fd)
{
	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 16;
		struct seg **v = realloc(t->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		t->v = v;
		t->cap = cap;
	}
	struct seg *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->no = no;
	g->fd = fd;
	int i = segs_lower(t, no);
	memmove(&t->v[i + 1], &t->v[i], (t->n - (uint32_t)i) * sizeof(*t->v));
	t->v[i] = g;
	t->n++;
	return g;
}

void segs_del(struct seg_table *t, struct seg *g)
{
	int i = segs_lower(t, g->no);
	if ((uint32_t)i < t->n && t->v[i] == g) {
		memmove(&t->v[i], &t->v[i + 1], (t->n - (uint32_t)i - 1) * sizeof(*t->v));
		t->n--;
	}
	free(g->ent);
	free(g);
}

/* ---- entries of a segment ---- */

static int seg_ent_insert(struct seg *g, uint32_t i, uint32_t blk, uint32_t nblk, uint32_t flags);

static uint32_t ent_lower(const struct seg *g, uint32_t blk)
{
	uint32_t lo = 0, hi = g->nent;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (g->ent[mid].blk < blk)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int seg_ent_find(const struct seg *g, uint32_t blk)
{
	uint32_t i = ent_lower(g, blk);
	return i < g->nent && g->ent[i].blk == blk ? (int)i : -1;
}

int seg_ent_add(struct seg *g, uint32_t blk, uint32_t nblk, uint32_t flags)
{
	return seg_ent_insert(g, ent_lower(g, blk), blk, nblk, flags);
}

int seg_ent_push(struct seg *g, uint32_t blk, uint32_t nblk, uint32_t flags)
{
	return seg_ent_insert(g, g->nent, blk, nblk, flags);
}

static int seg_ent_insert(struct seg *g, uint32_t i, uint32_t blk, uint32_t nblk, uint32_t flags)
{
	if (g->nent == g->cap) {
		uint32_t cap = g->cap ? g->cap * 2 : 64;
		struct seg_ent *e = realloc(g->ent, cap * sizeof(*e));
		if (!e)
			return -1;
		g->ent = e;
		g->cap = cap;
	}
	/* appends land at the end: memmove of nothing */
	memmove(&g->ent[i + 1], &g->ent[i], (g->nent - i) * sizeof(*g->ent));
	g->ent[i] = (struct seg_ent){.blk = blk, .nblk = nblk, .flags = flags};
	g->nent++;
	uint64_t b = (uint64_t)nblk * SSD_ALIGN;
	if (flags & ENT_TOMB)
		g->tomb_bytes += b;
	else
		g->live_bytes += b;
	return 0;
}

void seg_ent_del(struct seg *g, int i)
{
	uint64_t b = (uint64_t)g->ent[i].nblk * SSD_ALIGN;
	if (g->ent[i].flags & ENT_TOMB)
		g->tomb_bytes -= b;
	else
		g->live_bytes -= b;
	memmove(&g->ent[i], &g->ent[i + 1], (g->nent - (uint32_t)i - 1) * sizeof(*g->ent));
	g->nent--;
}

static int ent_cmp(const void *a, const void *b)
{
	uint32_t x = ((const struct seg_ent *)a)->blk, y = ((const struct seg_ent *)b)->blk;
	return x < y ? -1 : x > y;
}

void seg_ent_sort(struct seg *g)
{
	qsort(g->ent, g->nent, sizeof(*g->ent), ent_cmp);
}

/* ---- aligned buffers ---- */

static void *buf_alloc(size_t size)
{
	/* mmap: page-aligned, and given back to the system whole when freed; populated in one call
	 * (the copy into it would otherwise fault each page in) */
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void *pool_get(struct buf_pool *bp, size_t size, size_t *got)
{
	int best = -1;
	for (int i = 0; i < bp->n; i++) /* the smallest idle buffer that fits, within twice the size */
		if (bp->idle[i].size >= size && bp->idle[i].size <= 2 * size &&
		    (best < 0 || bp->idle[i].size < bp->idle[best].size))
			best = i;
	if (best >= 0) {
		void *p = bp->idle[best].p;
		*got = bp->idle[best].size;
		bp->bytes -= *got;
		bp->idle[best] = bp->idle[--bp->n];
		return p;
	}
	*got = size;
	return buf_alloc(size);
}

void pool_put(struct buf_pool *bp, void *p, size_t size)
{
	if (!p)
		return;
	while (bp->n && (bp->n == (int)(sizeof(bp->idle) / sizeof(bp->idle[0])) || bp->bytes + size > SSD_POOL_BYTES)) {
		/* make room: drop the oldest idle buffer */
		munmap(bp->idle[0].p, bp->idle[0].size);
		bp->bytes -= bp->idle[0].size;
		memmove(&bp->idle[0], &bp->idle[1], (size_t)(bp->n - 1) * sizeof(bp->idle[0]));
		bp->n--;
	}
	if (size > SSD_POOL_BYTES) {
		munmap(p, size);
		return;
	}
	bp->idle[bp->n++] = (struct pbuf){p, size};
	bp->bytes += size;
}

void pool_drain(struct buf_pool *bp)
{
	for (int i = 0; i < bp->n; i++)
		munmap(bp->idle[i].p, bp->idle[i].size);
	bp->n = 0;
	bp->bytes = 0;
}

/* ---- space and statistics (kv_ssd.h) ---- */

uint64_t kv_ssd_free_bytes(const struct kv_ssd *s)
{
	uint64_t held = s->reserve;
	for (uint32_t i = 0; i < s->segs.n; i++)
		held += s->segs.v[i]->live_bytes + s->segs.v[i]->tomb_bytes;
	return s->capacity > held ? s->capacity - held : 0;
}

void kv_ssd_stats_get(const struct kv_ssd *s, struct kv_ssd_stats *out)
{
	*out = s->st;
	out->capacity = s->capacity;
	out->used_bytes = s->used;
	out->live_bytes = out->records = 0;
	out->segments = s->segs.n;
	for (uint32_t i = 0; i < s->segs.n; i++) {
		const struct seg *g = s->segs.v[i];
		out->live_bytes += g->live_bytes;
		for (uint32_t k = 0; k < g->nent; k++)
			out->records += !(g->ent[k].flags & ENT_TOMB);
	}
	out->o_direct = s->odirect;
}
