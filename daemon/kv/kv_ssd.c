/* The SSD tier (kv_ssd.h): operations on morid's loop, at the disk through one io_uring whose
 * completions ring an eventfd polled by libuv. Writes reserve their place at the call (the end of
 * the open segment) and copy the record into an aligned buffer when they go to the disk; at most
 * SSD_RING operations and SSD_INFLIGHT_BYTES of buffers are at the disk at once, the rest wait in
 * FIFO order. A flush waits for the writes before it, then syncs what they touched. Compaction
 * moves one segment at a time through the same path. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "mori_types.h"
#include "kv/kv_ssd_int.h"

#define SSD_CHUNK (1u << 30)   /* bytes of one read or write submission (io_uring takes 32 bits) */
#define SSD_MOVES 4            /* records compaction moves at once */
#define SSD_OFFLOAD_MIN (64u << 10) /* records this big are copied and checksummed on libuv's threads */

enum op_kind { OP_WRITE, OP_TOMB, OP_READ, OP_SYNC, OP_CREAD, OP_CWRITE };
enum { FL_WAITING, FL_SYNCING, FL_DONE };

struct flush {
	struct flush *next;
	uint64_t upto; /* the writes it waits for: seq <= upto */
	int state, pending, rc;
	kv_ssd_done_cb done; /* NULL: compaction's own */
	void *arg;
};

struct op {
	struct op *next;           /* the wait queue */
	struct op *wprev, *wnext;  /* writes not yet answered, in seq order */
	int kind;
	struct seg *seg;           /* the file it reads or writes */
	uint64_t off, len, moved;  /* the I/O: offset, bytes, bytes done so far */
	char *buf;
	size_t bufcap;
	uint64_t seq;
	const void *src;           /* OP_WRITE: the value */
	int direct;                /* OP_WRITE of a version-2 record: buf holds its header page and
				    * its value's last partial page; the rest goes from src */
	void *dst;                 /* OP_READ */
	uint32_t uid;
	uint64_t gen;
	uint32_t key_len;
	struct kv_ssd_loc loc;     /* the record's (new) location */
	struct kv_ssd_loc old;     /* OP_CREAD/OP_CWRITE: where it is moved from */
	uint32_t old_flags;
	struct flush *fl;          /* OP_SYNC */
	kv_ssd_done_cb done;
	void *arg;
	struct kv_ssd *s;          /* for the work on libuv's threads */
	uv_work_t work;
	const char *why;           /* OP_READ checked off the loop: what was wrong, NULL when whole */
	unsigned char key[KV_SSD_KEY_MAX];
};

struct compact {
	struct seg *g;
	struct seg_ent *snap; /* its entries when it began */
	uint32_t nsnap, next;
	int moving, failed, syncing;
};


static void pump(struct kv_ssd *s);
static void op_finish(struct kv_ssd *s, struct op *o, int res);
static void compact_step(struct kv_ssd *s);
static void flush_advance(struct kv_ssd *s);
static void maybe_free(struct kv_ssd *s);

static int mori_of_errno(int e)
{
	return e == ENOSPC || e == EDQUOT ? MORI_ENOMEM : MORI_EIO;
}

/* ---- segments ---- */

void ssd_seg_release(struct kv_ssd *s, struct seg *g)
{
	if (g->fd >= 0)
		close(g->fd);
	s->used -= g->end;
	if (s->active == g)
		s->active = NULL;
	segs_del(&s->segs, g);
}

/* The open segment with room for ext more bytes (a new one when the open one is past its limit),
 * or NULL (errno set). */
static struct seg *seg_for(struct kv_ssd *s, uint64_t ext)
{
	struct seg *g = s->active;
	if (g && !g->sealed && (g->end == 0 || g->end + ext <= s->seg_max))
		return g;
	if (g)
		g->sealed = 1;
	char name[32];
	uint32_t no = s->next_no;
	snprintf(name, sizeof(name), SSD_SEG_FMT, no);
	int fd = openat(s->dfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | (s->odirect ? O_DIRECT : 0), 0600);
	if (fd < 0) {
		int e = errno;
		mlog_ratelimited(MLOG_ERR, "kv", "%s/%s: cannot create a segment: %s", s->dir, name, strerror(e));
		errno = e;
		return NULL;
	}
	/* The whole segment allocated up front: appends then write inside the file's size, which
	 * ext4 runs in parallel (writes that extend a file take its inode lock one at a time). A
	 * filesystem that cannot (no fallocate, short of space) gets plain appends. */
	if (fallocate(fd, 0, 0, (off_t)s->seg_max) != 0 && ftruncate(fd, 0) != 0)
		mlog_ratelimited(MLOG_WARN, "kv", "%s/%s: cannot drop a partial preallocation: %s", s->dir, name,
				 strerror(errno));
	g = segs_add(&s->segs, no, fd);
	if (!g) {
		close(fd);
		unlinkat(s->dfd, name, 0);
		errno = ENOMEM;
		return NULL;
	}
	s->next_no++;
	s->active = g;
	s->dir_dirty = 1;
	return g;
}

/* Reserve ext bytes at the end of the open segment for a record; its entry is pending. */
static int reserve_at(struct kv_ssd *s, uint64_t ext, uint32_t flags, struct seg **gp, uint64_t *off)
{
	struct seg *g = seg_for(s, ext);
	if (!g)
		return errno == ENOSPC || errno == EDQUOT ? MORI_ENOMEM : errno == ENOMEM ? MORI_ENOMEM : MORI_EIO;
	if (seg_ent_add(g, (uint32_t)(g->end / SSD_ALIGN), (uint32_t)(ext / SSD_ALIGN), flags | ENT_PENDING))
		return MORI_ENOMEM;
	*gp = g;
	*off = g->end;
	g->end += ext;
	s->used += ext;
	return MORI_OK;
}

static int older_than(const struct kv_ssd *s, const struct seg *g)
{
	return s->segs.n && s->segs.v[0]->no < g->no;
}

/* ---- submission ---- */

static void wlist_add(struct kv_ssd *s, struct op *o)
{
	o->seq = ++s->seq;
	o->wprev = s->w_tail;
	o->wnext = NULL;
	if (s->w_tail)
		s->w_tail->wnext = o;
	else
		s->w_head = o;
	s->w_tail = o;
}

static void wlist_del(struct kv_ssd *s, struct op *o)
{
	if (o->wprev)
		o->wprev->wnext = o->wnext;
	else
		s->w_head = o->wnext;
	if (o->wnext)
		o->wnext->wprev = o->wprev;
	else
		s->w_tail = o->wprev;
}

static int is_write(const struct op *o)
{
	return o->kind == OP_WRITE || o->kind == OP_TOMB || o->kind == OP_CWRITE;
}

/* Put the next piece of o's I/O on the ring (it has a slot). */
static void submit(struct kv_ssd *s, struct op *o)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
	if (!sqe) { /* cannot happen: at most SSD_RING operations hold slots */
		op_finish(s, o, -EBUSY);
		return;
	}
	if (o->kind == OP_SYNC) {
		if (o->seg)
			io_uring_prep_fsync(sqe, o->seg->fd, IORING_FSYNC_DATASYNC);
		else if (o->off)
			io_uring_prep_fsync(sqe, s->dfd, 0);
		else
			io_uring_prep_nop(sqe);
	} else {
		uint64_t n = o->len - o->moved;
		char *p = o->buf + o->moved;
		if (o->direct) { /* header page, the value's whole pages from src, its last page */
			uint64_t whole = o->loc.len & ~(uint64_t)(SSD_ALIGN - 1);
			if (o->moved < SSD_ALIGN)
				n = SSD_ALIGN - o->moved;
			else if (o->moved < SSD_ALIGN + whole)
				p = (char *)o->src + (o->moved - SSD_ALIGN), n = SSD_ALIGN + whole - o->moved;
			else
				p = o->buf + SSD_ALIGN + (o->moved - SSD_ALIGN - whole);
		}
		if (n > SSD_CHUNK)
			n = SSD_CHUNK;
		if (is_write(o))
			io_uring_prep_write(sqe, o->seg->fd, p, (unsigned)n, o->off + o->moved);
		else
			io_uring_prep_read(sqe, o->seg->fd, p, (unsigned)n, o->off + o->moved);
	}
	io_uring_sqe_set_data(sqe, o);
	int r = io_uring_submit(&s->ring);
	if (r < 0) /* the kernel took nothing: answer the op as failed */
		mlog_ratelimited(MLOG_ERR, "kv", "%s: io_uring_submit: %s", s->dir, strerror(-r));
}

/* A write's record image in its buffer: header, key, value, zeros to the extent's end. */
static void rec_image(struct op *o)
{
	struct rec_hdr *h = (struct rec_hdr *)o->buf;
	if (o->direct) { /* only the header page and the value's last partial page are copied */
		uint64_t len = o->loc.len, tail = len % SSD_ALIGN;
		memset(o->buf, 0, 2 * SSD_ALIGN);
		memcpy(o->buf + sizeof(*h), o->key, o->key_len);
		if (tail)
			memcpy(o->buf + SSD_ALIGN, (const char *)o->src + len - tail, tail);
		rec_fill(h, REC_VALUE, o->uid, o->gen, o->buf + sizeof(*h), o->key_len, o->src, len, SSD_ALIGN);
		return;
	}
	char *k = o->buf + sizeof(*h), *v = k + o->key_len;
	memcpy(k, o->key, o->key_len);
	uint64_t vlen = o->kind == OP_WRITE ? o->loc.len : 0;
	if (vlen)
		memcpy(v, o->src, vlen);
	memset(v + vlen, 0, o->len - sizeof(*h) - o->key_len - vlen);
	rec_fill(h, o->kind == OP_WRITE ? REC_VALUE : REC_TOMB, o->uid, o->gen, k, o->key_len, v, vlen, 0);
}

/* On a libuv thread: touches only o's own buffer and its (leased) source. */
static void fill_work(uv_work_t *w)
{
	rec_image(w->data);
}

/* Back on the loop: to the disk, or answered as cancelled once the tier is closing. */
static void fill_done(uv_work_t *w, int status)
{
	struct op *o = w->data;
	struct kv_ssd *s = o->s;
	if (s->closing || status) {
		op_finish(s, o, -ECANCELED);
		maybe_free(s);
		return;
	}
	submit(s, o);
}

/* Take a slot and a buffer and go to the disk, or 0 when o must wait. */
static int start(struct kv_ssd *s, struct op *o)
{
	size_t need = o->kind == OP_SYNC || o->kind == OP_CWRITE ? 0 : o->direct ? 2 * SSD_ALIGN : o->len;
	if (s->inflight >= SSD_RING || (s->inflight && s->inflight_bytes + need > SSD_INFLIGHT_BYTES))
		return 0;
	if (need) {
		o->buf = pool_get(&s->pool, need, &o->bufcap);
		if (!o->buf)
			return 0; /* retried when a buffer comes back */
	}
	s->inflight++;
	s->inflight_bytes += o->bufcap;
	if (o->seg)
		o->seg->inflight++;
	if (o->kind == OP_WRITE && o->len >= SSD_OFFLOAD_MIN) {
		/* the copy and the checksum off the loop, which meanwhile serves clients and the disk */
		o->s = s;
		o->work.data = o;
		if (uv_queue_work(s->loop, &o->work, fill_work, fill_done) == 0)
			return 1;
	}
	if (o->kind == OP_WRITE || o->kind == OP_TOMB)
		rec_image(o);
	submit(s, o);
	return 1;
}

static void run(struct kv_ssd *s, struct op *o)
{
	if (s->wait_head || !start(s, o)) {
		o->next = NULL;
		if (s->wait_tail)
			s->wait_tail->next = o;
		else
			s->wait_head = o;
		s->wait_tail = o;
	}
}

static void pump(struct kv_ssd *s)
{
	while (s->wait_head && !s->closing) {
		struct op *o = s->wait_head;
		if (!start(s, o))
			break;
		s->wait_head = o->next;
		if (!s->wait_head)
			s->wait_tail = NULL;
	}
}

/* ---- completion ---- */

static void release(struct kv_ssd *s, struct op *o)
{
	if (o->buf)
		pool_put(&s->pool, o->buf, o->bufcap);
	free(o);
}

/* A pending entry of o's record: made live (ok) or dropped. */
static void settle_entry(struct seg *g, uint64_t off, int ok)
{
	int i = seg_ent_find(g, (uint32_t)(off / SSD_ALIGN));
	if (i < 0)
		return;
	if (ok)
		g->ent[i].flags &= ~(uint32_t)ENT_PENDING;
	else
		seg_ent_del(g, i);
}

static void write_failed(struct kv_ssd *s, struct op *o, int e, char *msg, size_t len)
{
	s->st.io_errors++;
	o->seg->sealed = 1; /* a hole: later records go to a new segment */
	snprintf(msg, len, "%s/" SSD_SEG_FMT ": write of %llu bytes at offset %llu failed: %s", s->dir, o->seg->no,
		 (unsigned long long)o->len, (unsigned long long)o->off, strerror(e));
	mlog_ratelimited(MLOG_ERR, "kv", "%s", msg);
}

/* A read record checked (header, key, generation, checksum) and, whole, its value copied to
 * o->dst: NULL, or what was wrong. Touches only o (runs on a libuv thread for big records). */
static const char *read_check(struct op *o)
{
	struct rec_hdr h;
	memcpy(&h, o->buf, sizeof(h));
	if (!rec_hdr_ok(&h) || h.type != REC_VALUE)
		return "no valid record header";
	if (h.key_len != o->key_len || memcmp(o->buf + sizeof(h), o->key, o->key_len))
		return "another key's record";
	if (h.gen != o->gen || h.val_len != o->loc.len)
		return "another generation or length";
	if (rec_extent(&h) != o->len || !rec_data_ok(o->buf))
		return "checksum mismatch";
	memcpy(o->dst, o->buf + rec_val_off(&h), h.val_len);
	return NULL;
}

static void read_work(uv_work_t *w)
{
	struct op *o = w->data;
	o->why = read_check(o);
}

static void read_done(struct kv_ssd *s, struct op *o, int e, int checked);

static void read_work_done(uv_work_t *w, int status)
{
	struct op *o = w->data;
	struct kv_ssd *s = o->s;
	s->working--;
	if (status) /* not run (cannot happen: nothing cancels it): checked here */
		o->why = read_check(o);
	read_done(s, o, 0, 1);
	release(s, o);
	maybe_free(s);
}

/* o's read answered (e: errno); checked: read_check ran already (o->why). */
static void read_done(struct kv_ssd *s, struct op *o, int e, int checked)
{
	char msg[400] = "";
	int rc = MORI_OK;
	if (e) {
		s->st.io_errors++;
		rc = MORI_EIO;
		snprintf(msg, sizeof(msg), "%s/" SSD_SEG_FMT ": read at offset %llu failed: %s", s->dir, o->seg->no,
			 (unsigned long long)o->off, strerror(e));
	} else {
		const char *why = checked ? o->why : read_check(o);
		if (why) {
			s->st.crc_errors++;
			rc = MORI_EIO;
			snprintf(msg, sizeof(msg), "%s/" SSD_SEG_FMT ": record at offset %llu: %s", s->dir, o->seg->no,
				 (unsigned long long)o->off, why);
			mlog_ratelimited(MLOG_WARN, "kv", "%s", msg);
		} else {
			s->st.reads++;
			s->st.read_bytes += o->len;
		}
	}
	if (o->done)
		o->done(o->arg, rc, &o->loc, msg);
}

static void compact_read_done(struct kv_ssd *s, struct op *o, int e)
{
	struct compact *c = s->cp;
	struct rec_hdr h;
	memcpy(&h, o->buf, sizeof(h));
	if (e || s->closing) {
		if (e)
			s->st.io_errors++;
		c->failed = 1;
	} else if (!rec_hdr_ok(&h) || rec_extent(&h) != o->len || !rec_data_ok(o->buf)) {
		s->st.crc_errors++;
		mlog_warn("kv", "%s/" SSD_SEG_FMT ": record at offset %llu fails its checksum while compacted: dropped",
			  s->dir, o->seg->no, (unsigned long long)o->off);
		int i = seg_ent_find(c->g, (uint32_t)(o->off / SSD_ALIGN));
		if (i >= 0) {
			seg_ent_del(c->g, i);
			if (!(o->old_flags & ENT_TOMB) && s->moved && rec_hdr_ok(&h))
				s->moved(s->arg, o->buf + sizeof(h), h.key_len, h.uid, h.gen, &o->old, NULL);
		}
	} else {
		/* the same bytes, re-appended: the image carries no location */
		struct seg *g;
		uint64_t off;
		if (s->used + o->len > s->capacity || reserve_at(s, o->len, o->old_flags, &g, &off) != MORI_OK) {
			c->failed = 1;
		} else {
			o->kind = OP_CWRITE; /* op_finish gave back its slot: take one again */
			o->seg = g;
			o->off = off;
			o->moved = 0;
			o->loc = (struct kv_ssd_loc){.seg = g->no, .off = off, .len = h.val_len};
			g->writes_inflight++;
			g->inflight++;
			wlist_add(s, o);
			s->inflight++;
			s->inflight_bytes += o->bufcap;
			submit(s, o);
			return;
		}
	}
	c->moving--;
	release(s, o);
}

static void compact_write_done(struct kv_ssd *s, struct op *o, int e)
{
	struct compact *c = s->cp;
	char msg[400];
	if (e) {
		write_failed(s, o, e, msg, sizeof(msg));
		settle_entry(o->seg, o->off, 0);
		c->failed = 1;
	} else {
		s->st.writes++;
		s->st.write_bytes += o->len;
		int i = seg_ent_find(c->g, (uint32_t)(o->old.off / SSD_ALIGN));
		if (i < 0) {
			settle_entry(o->seg, o->off, 0); /* removed meanwhile: the copy is dead */
		} else {
			seg_ent_del(c->g, i);
			settle_entry(o->seg, o->off, 1);
			if (!(o->old_flags & ENT_TOMB) && s->moved && !s->closing) { /* the owner may be gone once closed */
				struct rec_hdr h;
				memcpy(&h, o->buf, sizeof(h));
				s->moved(s->arg, o->buf + sizeof(h), h.key_len, h.uid, h.gen, &o->old, &o->loc);
			}
		}
	}
	c->moving--;
	release(s, o);
}

static void flush_sync_done(struct kv_ssd *s, struct op *o, int e)
{
	struct flush *f = o->fl;
	if (e) {
		s->st.io_errors++;
		f->rc = MORI_EIO;
		mlog_ratelimited(MLOG_ERR, "kv", "%s: sync of %s failed: %s", s->dir, o->seg ? "a segment" : "the directory",
				 strerror(e));
	}
	if (--f->pending == 0)
		f->state = FL_DONE;
	free(o);
}

/* o's I/O answered res (bytes or -errno). */
static void op_finish(struct kv_ssd *s, struct op *o, int res)
{
	if (res >= 0 && o->kind != OP_SYNC && o->moved + (uint64_t)res < o->len) {
		if (res > 0) { /* short: the rest again */
			o->moved += (uint64_t)res;
			submit(s, o);
			return;
		}
		res = -EIO; /* past the end of the file */
	}
	if (res == -EAGAIN || res == -EINTR) {
		submit(s, o);
		return;
	}
	int e = res < 0 ? -res : 0;
	s->inflight--;
	s->inflight_bytes -= o->bufcap;
	struct seg *g = o->seg;
	if (g)
		g->inflight--;
	if (is_write(o)) {
		g->writes_inflight--;
		wlist_del(s, o);
		if (!e)
			g->dirty = 1;
	}
	char msg[400] = "";
	switch (o->kind) {
	case OP_WRITE:
	case OP_TOMB:
		if (e) {
			write_failed(s, o, e, msg, sizeof(msg));
			settle_entry(g, o->off, 0);
		} else {
			s->st.writes++;
			s->st.write_bytes += o->len;
			settle_entry(g, o->off, 1);
		}
		if (o->done)
			o->done(o->arg, e ? mori_of_errno(e) : MORI_OK, e ? NULL : &o->loc, msg);
		release(s, o);
		break;
	case OP_READ:
		if (!e && o->len >= SSD_OFFLOAD_MIN) { /* checked and copied off the loop */
			o->s = s;
			o->work.data = o;
			if (uv_queue_work(s->loop, &o->work, read_work, read_work_done) == 0) {
				s->working++;
				break;
			}
		}
		read_done(s, o, e, 0);
		release(s, o);
		break;
	case OP_SYNC:
		flush_sync_done(s, o, e);
		break;
	case OP_CREAD:
		compact_read_done(s, o, e);
		break;
	case OP_CWRITE:
		compact_write_done(s, o, e);
		break;
	}
	if (g && g->doomed && !g->inflight)
		ssd_seg_release(s, g);
}

/* ---- flush ---- */

static void flush_start(struct kv_ssd *s, struct flush *f)
{
	f->state = FL_SYNCING;
	for (uint32_t i = 0; i <= s->segs.n; i++) {
		struct seg *g = i < s->segs.n ? s->segs.v[i] : NULL;
		int dir = i == s->segs.n;
		if (g ? !g->dirty || g->doomed : !s->dir_dirty)
			continue;
		struct op *o = calloc(1, sizeof(*o));
		if (!o) {
			f->rc = MORI_ENOMEM;
			break;
		}
		if (g)
			g->dirty = 0;
		else
			s->dir_dirty = 0;
		o->kind = OP_SYNC;
		o->seg = g;
		o->off = dir; /* with no segment: 1 syncs the directory, 0 is a no-op */
		o->fl = f;
		f->pending++;
		run(s, o);
	}
	if (!f->pending) { /* nothing to sync: a no-op keeps the answer off the caller's stack */
		struct op *o = calloc(1, sizeof(*o));
		if (!o) {
			f->rc = MORI_ENOMEM;
			f->state = FL_DONE;
			return;
		}
		o->kind = OP_SYNC;
		o->fl = f;
		f->pending = 1;
		run(s, o);
	}
}

static void compact_synced(struct kv_ssd *s, int rc);

/* Start the flushes whose writes have all answered, and answer finished ones in order (a later
 * flush may have found nothing left to sync that an earlier one is still syncing). */
static void flush_advance(struct kv_ssd *s)
{
	for (struct flush *f = s->fl_head; f; f = f->next) {
		if (f->state != FL_WAITING)
			continue;
		if (s->w_head && s->w_head->seq <= f->upto)
			break;
		flush_start(s, f);
	}
	while (s->fl_head && s->fl_head->state == FL_DONE) {
		struct flush *f = s->fl_head;
		s->fl_head = f->next;
		if (!s->fl_head)
			s->fl_tail = NULL;
		if (f->done)
			f->done(f->arg, f->rc, NULL, f->rc ? "a sync failed (the log names the file)" : "");
		else
			compact_synced(s, f->rc);
		free(f);
	}
}

static int flush_add(struct kv_ssd *s, kv_ssd_done_cb done, void *arg)
{
	struct flush *f = calloc(1, sizeof(*f));
	if (!f)
		return MORI_ENOMEM;
	f->upto = s->seq;
	f->done = done;
	f->arg = arg;
	if (s->fl_tail)
		s->fl_tail->next = f;
	else
		s->fl_head = f;
	s->fl_tail = f;
	flush_advance(s);
	return MORI_OK;
}

int kv_ssd_flush(struct kv_ssd *s, kv_ssd_done_cb done, void *arg)
{
	if (!s || s->closing || !done)
		return MORI_EINVAL;
	return flush_add(s, done, arg);
}

/* ---- compaction ---- */

static void compact_end(struct kv_ssd *s)
{
	struct compact *c = s->cp;
	c->g->compacting = 0;
	free(c->snap);
	free(c);
	s->cp = NULL;
}

/* The moved copies are durable: the old segment can go. */
static void compact_synced(struct kv_ssd *s, int rc)
{
	struct compact *c = s->cp;
	if (!c) /* ended by a close */
		return;
	struct seg *g = c->g;
	if (rc || s->closing || g->nent) {
		compact_end(s);
		return;
	}
	char name[32];
	snprintf(name, sizeof(name), SSD_SEG_FMT, g->no);
	if (unlinkat(s->dfd, name, 0) != 0) {
		mlog_ratelimited(MLOG_ERR, "kv", "%s/%s: cannot delete a compacted segment: %s", s->dir, name,
				 strerror(errno));
		compact_end(s);
		return;
	}
	s->dir_dirty = 1;
	s->st.compactions++;
	compact_end(s);
	g->doomed = 1;
	if (!g->inflight)
		ssd_seg_release(s, g);
	ssd_compact_maybe(s, 0);
}

static void compact_step(struct kv_ssd *s)
{
	struct compact *c = s->cp;
	if (c->syncing)
		return;
	while (!c->failed && !s->closing && c->moving < SSD_MOVES && c->next < c->nsnap) {
		struct seg_ent e = c->snap[c->next++];
		int i = seg_ent_find(c->g, e.blk);
		if (i < 0)
			continue; /* removed since */
		if ((e.flags & ENT_TOMB) && !older_than(s, c->g)) {
			seg_ent_del(c->g, i); /* nothing older left for it to hide */
			continue;
		}
		struct op *o = calloc(1, sizeof(*o));
		if (!o) {
			c->failed = 1;
			break;
		}
		o->kind = OP_CREAD;
		o->seg = c->g;
		o->off = (uint64_t)e.blk * SSD_ALIGN;
		o->len = (uint64_t)e.nblk * SSD_ALIGN;
		o->old = (struct kv_ssd_loc){.seg = c->g->no, .off = o->off};
		o->old_flags = e.flags & ENT_TOMB;
		c->moving++;
		run(s, o);
	}
	if (c->moving)
		return;
	if (c->failed || s->closing || c->g->nent) {
		compact_end(s);
		return;
	}
	c->syncing = 1; /* all moved: sync them before the old file goes */
	if (flush_add(s, NULL, NULL) != MORI_OK)
		compact_end(s);
}

/* Start compacting the closed segment with the least live fraction, when it is below
 * SSD_COMPACT_LIVE percent (pressed: the tier is full, below 90 percent). */
void ssd_compact_maybe(struct kv_ssd *s, int pressed)
{
	if (s->cp || s->closing)
		return;
	struct seg *best = NULL;
	uint64_t best_pct = pressed ? 90 : SSD_COMPACT_LIVE;
	for (uint32_t i = 0; i < s->segs.n; i++) {
		struct seg *g = s->segs.v[i];
		if (!g->sealed || g->doomed || g->writes_inflight || !g->end)
			continue;
		uint64_t live = g->live_bytes + (older_than(s, g) ? g->tomb_bytes : 0);
		uint64_t pct = live * 100 / g->end;
		if (pct < best_pct) {
			best_pct = pct;
			best = g;
		}
	}
	if (!best)
		return;
	struct compact *c = calloc(1, sizeof(*c));
	if (!c)
		return;
	c->snap = malloc((best->nent ? best->nent : 1) * sizeof(*c->snap));
	if (!c->snap) {
		free(c);
		return;
	}
	memcpy(c->snap, best->ent, best->nent * sizeof(*c->snap));
	c->nsnap = best->nent;
	c->g = best;
	best->compacting = 1;
	s->cp = c;
	compact_step(s);
}

/* ---- the loop side ---- */


void ssd_on_poll(uv_poll_t *h, int status, int events)
{
	struct kv_ssd *s = h->data;
	uint64_t v;
	if (read(s->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		mlog_ratelimited(MLOG_WARN, "kv", "%s: eventfd read: %s", s->dir, strerror(errno));
	s->in_poll = 1;
	struct io_uring_cqe *cqe;
	int n = 0;
	while (n < 4 * (int)SSD_RING && io_uring_peek_cqe(&s->ring, &cqe) == 0) {
		struct op *o = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&s->ring, cqe);
		op_finish(s, o, res);
		n++;
	}
	if (n == 4 * (int)SSD_RING) /* more left: come back on the next turn (level-triggered) */
		eventfd_write(s->efd, 1);
	pump(s);
	if (s->cp)
		compact_step(s);
	flush_advance(s);
	s->in_poll = 0;
	maybe_free(s);
}

void ssd_on_closed(uv_handle_t *h)
{
	struct kv_ssd *s = h->data;
	close(s->efd);
	free(s);
}

static void maybe_free(struct kv_ssd *s)
{
	if (!s->closing || s->inflight || s->working || s->in_poll || s->freed)
		return;
	s->freed = 1;
	struct seg *a = s->active;
	struct stat sb;
	if (a && !a->doomed && a->fd >= 0 && fstat(a->fd, &sb) == 0 && (uint64_t)sb.st_size > a->end &&
	    ftruncate(a->fd, (off_t)a->end) != 0) /* its preallocated rest */
		mlog_ratelimited(MLOG_WARN, "kv", "%s/" SSD_SEG_FMT ": cannot cut the unwritten tail: %s", s->dir, a->no,
				 strerror(errno));
	while (s->segs.n)
		ssd_seg_release(s, s->segs.v[s->segs.n - 1]);
	free(s->segs.v);
	io_uring_queue_exit(&s->ring);
	pool_drain(&s->pool);
	close(s->lockfd);
	close(s->dfd);
	uv_close((uv_handle_t *)&s->poll, ssd_on_closed);
}

void kv_ssd_close(struct kv_ssd *s)
{
	if (!s || s->closing)
		return;
	s->closing = 1;
	s->in_poll++; /* no free inside the callbacks below */
	while (s->wait_head) {
		struct op *o = s->wait_head;
		s->wait_head = o->next;
		if (is_write(o)) {
			wlist_del(s, o);
			o->seg->writes_inflight--;
			settle_entry(o->seg, o->off, 0);
		}
		if (o->kind == OP_SYNC) {
			o->fl->rc = MORI_ECANCELED;
			if (--o->fl->pending == 0)
				o->fl->state = FL_DONE;
		} else if (o->kind == OP_CREAD) {
			s->cp->moving--;
		} else if (o->done) {
			o->done(o->arg, MORI_ECANCELED, NULL, "the SSD tier was closed");
		}
		if (o->kind == OP_SYNC)
			free(o);
		else
			release(s, o);
	}
	s->wait_tail = NULL;
	for (struct flush *f = s->fl_head; f; f = f->next)
		if (f->state == FL_WAITING) {
			f->rc = MORI_ECANCELED;
			f->state = FL_DONE;
		}
	/* flushes answer in order: the syncing ones first */
	for (struct flush *f = s->fl_head; f; f = f->next)
		if (f->state != FL_DONE)
			goto wait;
	flush_advance(s);
wait:
	if (s->cp && !s->cp->moving)
		compact_end(s);
	s->in_poll--;
	maybe_free(s);
}

/* ---- the operations ---- */

static int key_ok(const void *key, size_t key_len)
{
	return key && key_len >= 1 && key_len <= KV_SSD_KEY_MAX;
}

static struct op *write_op(struct kv_ssd *s, int kind, const void *key, size_t key_len, uint32_t uid,
			   uint64_t gen, uint64_t len, int direct, uint64_t room, int *rc)
{
	uint64_t ext = direct ? ssd_extent_direct(len) : ssd_extent(key_len, len);
	if (s->used + ext > room) {
		ssd_compact_maybe(s, 1);
		*rc = MORI_ENOMEM;
		return NULL;
	}
	struct op *o = calloc(1, sizeof(*o));
	struct seg *g;
	uint64_t off;
	*rc = o ? reserve_at(s, ext, kind == OP_TOMB ? ENT_TOMB : 0, &g, &off) : MORI_ENOMEM;
	if (*rc) {
		free(o);
		return NULL;
	}
	o->kind = kind;
	o->direct = direct;
	o->seg = g;
	o->off = off;
	o->len = ext;
	o->uid = uid;
	o->gen = gen;
	o->key_len = (uint32_t)key_len;
	memcpy(o->key, key, key_len);
	o->loc = (struct kv_ssd_loc){.seg = g->no, .off = off, .len = len};
	g->writes_inflight++;
	wlist_add(s, o);
	return o;
}

int kv_ssd_write(struct kv_ssd *s, const void *key, size_t key_len, uint32_t uid, uint64_t gen,
		 const void *src, uint64_t len, kv_ssd_done_cb done, void *arg)
{
	if (!s || s->closing || !key_ok(key, key_len) || !src || !len || len > (1ull << 44))
		return MORI_EINVAL;
	int rc;
	uint64_t room = s->capacity > s->reserve ? s->capacity - s->reserve : 0;
	/* a page-aligned value of some size goes to the disk straight from src (version 2) */
	int direct = !((uintptr_t)src % SSD_ALIGN) && len >= SSD_OFFLOAD_MIN;
	struct op *o = write_op(s, OP_WRITE, key, key_len, uid, gen, len, direct, room, &rc);
	if (!o)
		return rc;
	o->src = src;
	o->done = done;
	o->arg = arg;
	run(s, o);
	return MORI_OK;
}

/* The index of loc's live record in its segment (*gp), or -1. */
static int live_ent(const struct kv_ssd *s, const struct kv_ssd_loc *loc, size_t key_len, struct seg **gp)
{
	struct seg *g = segs_find(&s->segs, loc->seg);
	int i = g && !(loc->off % SSD_ALIGN) && !g->doomed ? seg_ent_find(g, (uint32_t)(loc->off / SSD_ALIGN)) : -1;
	uint64_t ext = i < 0 ? 0 : (uint64_t)g->ent[i].nblk * SSD_ALIGN;
	if (i < 0 || (g->ent[i].flags & (ENT_TOMB | ENT_PENDING)) ||
	    (ext != ssd_extent(key_len, loc->len) && ext != ssd_extent_direct(loc->len)))
		return -1;
	*gp = g;
	return i;
}

int kv_ssd_live(const struct kv_ssd *s, const struct kv_ssd_loc *loc, size_t key_len)
{
	struct seg *g;
	return s && !s->closing && loc && live_ent(s, loc, key_len, &g) >= 0;
}

int kv_ssd_read(struct kv_ssd *s, const struct kv_ssd_loc *loc, const void *key, size_t key_len,
		uint64_t gen, void *dst, kv_ssd_done_cb done, void *arg)
{
	if (!s || s->closing || !loc || !key_ok(key, key_len) || (!dst && loc->len))
		return MORI_EINVAL;
	struct seg *g;
	int i = live_ent(s, loc, key_len, &g);
	if (i < 0)
		return MORI_ENOENT;
	struct op *o = calloc(1, sizeof(*o));
	if (!o)
		return MORI_ENOMEM;
	o->kind = OP_READ;
	o->seg = g;
	o->off = loc->off;
	o->len = (uint64_t)g->ent[i].nblk * SSD_ALIGN;
	o->loc = *loc;
	o->gen = gen;
	o->key_len = (uint32_t)key_len;
	memcpy(o->key, key, key_len);
	o->dst = dst;
	o->done = done;
	o->arg = arg;
	run(s, o);
	return MORI_OK;
}

int kv_ssd_remove(struct kv_ssd *s, const struct kv_ssd_loc *loc, const void *key, size_t key_len,
		  uint32_t uid, uint64_t gen, int tombstone)
{
	if (!s || s->closing || !loc || (tombstone && !key_ok(key, key_len)))
		return MORI_EINVAL;
	int rc = MORI_ENOENT;
	struct seg *g = segs_find(&s->segs, loc->seg);
	int i = g && !(loc->off % SSD_ALIGN) ? seg_ent_find(g, (uint32_t)(loc->off / SSD_ALIGN)) : -1;
	if (i >= 0 && !(g->ent[i].flags & (ENT_TOMB | ENT_PENDING))) {
		seg_ent_del(g, i);
		rc = MORI_OK;
	}
	if (tombstone) {
		int wrc;
		struct op *o = write_op(s, OP_TOMB, key, key_len, uid, gen, 0, 0, s->capacity, &wrc);
		if (!o)
			return wrc;
		run(s, o);
	}
	ssd_compact_maybe(s, 0);
	return rc;
}
