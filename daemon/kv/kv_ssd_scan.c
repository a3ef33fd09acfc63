/* The SSD tier's open-time scan: every segment read front to back through a window, every record
 * verified (header CRC, then data CRC streamed over key and value), the newest generation of each
 * (uid, key) kept in a temporary map; what the map holds at the end is the live set. A stretch
 * without a valid header is skipped to the next one (a failed write leaves a hole); one reaching
 * the end of the file is a torn tail (or, all zeros, the unwritten rest of a preallocated segment)
 * and is cut off. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "mori_types.h"
#include "kv/kv_ssd_int.h"

/* One (uid, key)'s newest record so far; the key's bytes are in the map's arena. */
struct ment {
	uint64_t hash, gen, val_len;
	uint32_t uid, seg, blk, nblk;
	uint32_t key_off;
	uint16_t key_len;
	uint8_t type;
};

struct map {
	struct ment *e;
	uint32_t n, cap;
	uint32_t *slot; /* entry index + 1, 0 = empty; nslot a power of two */
	uint32_t nslot;
	char *arena;
	size_t alen, acap;
};

static uint64_t key_hash(uint32_t uid, const void *key, size_t len)
{
	uint64_t h = 1469598103934665603ull ^ uid; /* FNV-1a */
	const unsigned char *c = key;
	for (size_t i = 0; i < len; i++)
		h = (h ^ c[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

static int map_grow(struct map *m)
{
	uint32_t nslot = m->nslot ? m->nslot * 2 : 1024;
	uint32_t *slot = calloc(nslot, sizeof(*slot));
	if (!slot)
		return -1;
	for (uint32_t i = 0; i < m->n; i++) {
		uint32_t k = (uint32_t)m->e[i].hash & (nslot - 1);
		while (slot[k])
			k = (k + 1) & (nslot - 1);
		slot[k] = i + 1;
	}
	free(m->slot);
	m->slot = slot;
	m->nslot = nslot;
	return 0;
}

/* Keep the record if it is newer than what the map holds for its key: a higher generation wins;
 * at equal ones a tombstone beats a value, else the later record (a compaction's copy). */
static int map_put(struct map *m, const struct rec_hdr *h, const void *key, uint32_t seg, uint32_t blk,
		   uint32_t nblk)
{
	if ((m->n + 1) * 2 > m->nslot && map_grow(m))
		return -1;
	uint64_t hash = key_hash(h->uid, key, h->key_len);
	uint32_t k = (uint32_t)hash & (m->nslot - 1);
	for (; m->slot[k]; k = (k + 1) & (m->nslot - 1)) {
		struct ment *e = &m->e[m->slot[k] - 1];
		if (e->hash != hash || e->uid != h->uid || e->key_len != h->key_len ||
		    memcmp(m->arena + e->key_off, key, h->key_len))
			continue;
		if (h->gen > e->gen || (h->gen == e->gen && (h->type == REC_TOMB || e->type != REC_TOMB))) {
			e->gen = h->gen;
			e->type = (uint8_t)h->type;
			e->val_len = h->val_len;
			e->seg = seg;
			e->blk = blk;
			e->nblk = nblk;
		}
		return 0;
	}
	if (m->n == m->cap) {
		uint32_t cap = m->cap ? m->cap * 2 : 1024;
		struct ment *e = realloc(m->e, cap * sizeof(*e));
		if (!e)
			return -1;
		m->e = e;
		m->cap = cap;
	}
	if (m->alen + h->key_len > m->acap) {
		size_t cap = m->acap ? m->acap * 2 : 65536;
		char *a = realloc(m->arena, cap);
		if (!a)
			return -1;
		m->arena = a;
		m->acap = cap;
	}
	memcpy(m->arena + m->alen, key, h->key_len);
	m->e[m->n] = (struct ment){.hash = hash, .gen = h->gen, .val_len = h->val_len, .uid = h->uid, .seg = seg, .blk = blk,
				   .nblk = nblk, .key_off = (uint32_t)m->alen, .key_len = (uint16_t)h->key_len,
				   .type = (uint8_t)h->type};
	m->alen += h->key_len;
	m->slot[k] = ++m->n;
	return 0;
}

static void map_free(struct map *m)
{
	free(m->e);
	free(m->slot);
	free(m->arena);
}

/* A read window over one file (O_DIRECT: aligned offsets, lengths and buffer). */
struct win {
	int fd;
	uint64_t size; /* the file's */
	char *buf;
	uint64_t base, len; /* the window holds [base, base + len) */
	int err;            /* errno of a failed read */
};

/* Bytes at off (*avail of them, at least want when the file has them), or NULL past the end or on
 * a read error (w->err). */
static const char *win_at(struct win *w, uint64_t off, uint64_t want, uint64_t *avail)
{
	if (off < w->base || off + want > w->base + w->len) {
		uint64_t base = off & ~(uint64_t)(SSD_ALIGN - 1);
		ssize_t r;
		do
			r = pread(w->fd, w->buf, SSD_SCAN_WINDOW, (off_t)base);
		while (r < 0 && errno == EINTR);
		if (r < 0) {
			w->err = errno;
			w->len = 0;
			return NULL;
		}
		w->base = base;
		w->len = (uint64_t)r;
		if (off + want > base + w->len)
			return NULL;
	}
	if (avail)
		*avail = w->base + w->len - off;
	return w->buf + (off - w->base);
}

/* The next offset after off (4096-aligned) with a valid header, or size when none. */
static uint64_t resync(struct win *w, uint64_t off)
{
	for (off += SSD_ALIGN; off + sizeof(struct rec_hdr) <= w->size; off += SSD_ALIGN) {
		const char *p = win_at(w, off, sizeof(struct rec_hdr), NULL);
		if (!p)
			break;
		struct rec_hdr h;
		memcpy(&h, p, sizeof(h));
		if (rec_hdr_ok(&h))
			return off;
	}
	return w->size;
}

static int hdr_zero(const struct rec_hdr *h)
{
	static const struct rec_hdr zero;
	return !memcmp(h, &zero, sizeof(zero));
}

/* Scan one segment into the map. A stretch of zeros to the end is the unwritten rest of a
 * preallocated segment: cut off, not counted as torn. Returns 0, or -1 with errno (ENOMEM, EIO from the window). */
static int scan_seg(struct win *w, uint32_t no, const char *dir, struct map *m, struct kv_ssd_stats *st)
{
	uint64_t off = 0;
	while (off < w->size) {
		const char *p = win_at(w, off, sizeof(struct rec_hdr), NULL);
		if (!p && w->err)
			goto io_error;
		struct rec_hdr h;
		if (p)
			memcpy(&h, p, sizeof(h));
		if (!p || !rec_hdr_ok(&h) || off + rec_extent(&h) > w->size) {
			uint64_t next = p && rec_hdr_ok(&h) ? w->size : resync(w, off);
			if (w->err)
				goto io_error;
			if (next == w->size && p && hdr_zero(&h)) {
				/* never written: the rest of a preallocated segment (kv_ssd.c) */
				if (ftruncate(w->fd, (off_t)off) != 0)
					mlog_warn("kv", "%s/" SSD_SEG_FMT ": cannot cut the unwritten tail: %s", dir, no,
						  strerror(errno));
				w->size = off;
				break;
			}
			st->torn_dropped++;
			mlog_warn("kv", "%s/" SSD_SEG_FMT ": bytes %llu..%llu hold no whole record (torn or never written): "
				  "dropped%s", dir, no, (unsigned long long)off, (unsigned long long)next,
				  next == w->size ? ", the file is cut there" : "");
			if (next == w->size) {
				if (ftruncate(w->fd, (off_t)off) != 0)
					mlog_warn("kv", "%s/" SSD_SEG_FMT ": cannot cut the torn tail: %s", dir, no,
						  strerror(errno));
				w->size = off;
				break;
			}
			off = next;
			continue;
		}
		uint64_t ext = rec_extent(&h);
		char key[KV_SSD_KEY_MAX];
		p = win_at(w, off, sizeof(h) + h.key_len, NULL);
		if (!p)
			goto io_error;
		memcpy(key, p + sizeof(h), h.key_len);
		struct rec_hdr z = h;
		z.data_crc = z.hdr_crc = 0;
		uint32_t c = ssd_crc(ssd_crc_init, &z, sizeof(z));
		/* the key, then the value (right after it, or at val_off) */
		for (int part = 0; part < 2; part++) {
			uint64_t pos = part ? off + rec_val_off(&h) : off + sizeof(h), left = part ? h.val_len : h.key_len;
			while (left) {
				uint64_t avail;
				p = win_at(w, pos, 1, &avail);
				if (!p)
					goto io_error;
				uint64_t n = avail < left ? avail : left;
				c = ssd_crc(c, p, n);
				pos += n;
				left -= n;
			}
		}
		if (ssd_crc_final(c) != h.data_crc) {
			st->crc_errors++;
			mlog_warn("kv", "%s/" SSD_SEG_FMT ": record at offset %llu (%llu value bytes) fails its checksum: "
				  "dropped", dir, no, (unsigned long long)off, (unsigned long long)h.val_len);
		} else if (map_put(m, &h, key, no, (uint32_t)(off / SSD_ALIGN), (uint32_t)(ext / SSD_ALIGN))) {
			errno = ENOMEM;
			return -1;
		}
		off += ext;
	}
	return 0;
io_error:
	errno = w->err ? w->err : EIO;
	return -1;
}

static int name_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

int ssd_scan(int dfd, const char *dir, int oflags, struct seg_table *t, struct kv_ssd_stats *st,
	     kv_ssd_found_cb found, void *arg, uint32_t *max_no, char *err, size_t errlen)
{
	int rc = MORI_ESYS;
	uint32_t *nos = NULL, n = 0, cap = 0;
	struct map m = {0};
	struct win w = {.fd = -1};
	int dfd2 = dup(dfd);
	DIR *d = dfd2 >= 0 ? fdopendir(dfd2) : NULL;
	if (!d) {
		snprintf(err, errlen, "cannot list %s: %s", dir, strerror(errno));
		if (dfd2 >= 0)
			close(dfd2);
		return MORI_ESYS;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		uint32_t no;
		if (seg_name_parse(de->d_name, &no))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			uint32_t *v = realloc(nos, cap * sizeof(*v));
			if (!v)
				goto nomem;
			nos = v;
		}
		nos[n++] = no;
	}
	if (n)
		qsort(nos, n, sizeof(*nos), name_cmp);
	*max_no = n ? nos[n - 1] : 0;
	w.buf = mmap(NULL, SSD_SCAN_WINDOW, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w.buf == MAP_FAILED) {
		w.buf = NULL;
		goto nomem;
	}
	for (uint32_t i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), SSD_SEG_FMT, nos[i]);
		int fd = openat(dfd, name, O_RDWR | O_CLOEXEC | oflags);
		struct stat sb;
		if (fd < 0 || fstat(fd, &sb) != 0) {
			snprintf(err, errlen, "cannot open %s/%s: %s", dir, name, strerror(errno));
			rc = errno == EACCES || errno == EROFS || errno == EPERM ? MORI_EPERM : MORI_ESYS;
			if (fd >= 0)
				close(fd);
			goto out;
		}
		struct seg *g = segs_add(t, nos[i], fd);
		if (!g) {
			close(fd);
			goto nomem;
		}
		w = (struct win){.fd = fd, .size = (uint64_t)sb.st_size, .buf = w.buf};
		if (scan_seg(&w, nos[i], dir, &m, st)) {
			if (errno == ENOMEM)
				goto nomem;
			snprintf(err, errlen, "cannot read %s/%s: %s", dir, name, strerror(errno));
			goto out;
		}
		g->end = w.size;
		g->sealed = 1; /* appends go to a new segment */
	}
	/* The live set: each key's winner, as entries of its segment, then told to the owner. */
	for (uint32_t i = 0; i < m.n; i++) {
		struct ment *e = &m.e[i];
		struct seg *g = segs_find(t, e->seg);
		if (seg_ent_push(g, e->blk, e->nblk, e->type == REC_TOMB ? ENT_TOMB : 0))
			goto nomem;
	}
	for (uint32_t i = 0; i < t->n; i++)
		seg_ent_sort(t->v[i]);
	for (uint32_t i = 0; i < m.n; i++) {
		struct ment *e = &m.e[i];
		if (e->type == REC_TOMB)
			continue;
		struct kv_ssd_loc loc = {.seg = e->seg, .off = (uint64_t)e->blk * SSD_ALIGN, .len = e->val_len};
		if (found)
			found(arg, m.arena + e->key_off, e->key_len, e->uid, e->gen, &loc);
	}
	rc = 0;
	goto out;
nomem:
	snprintf(err, errlen, "out of memory scanning %s", dir);
	rc = MORI_ENOMEM;
out:
	if (w.buf)
		munmap(w.buf, SSD_SCAN_WINDOW);
	map_free(&m);
	free(nos);
	closedir(d);
	return rc;
}
