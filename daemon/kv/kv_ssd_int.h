/* Inside the SSD tier (kv_ssd.h): the record format, segments and their entries, shared by the
 * I/O path (kv_ssd.c), the open-time scan (kv_ssd_scan.c) and the helpers below them
 * (kv_ssd_seg.c). */
#ifndef MORID_KV_SSD_INT_H
#define MORID_KV_SSD_INT_H
#include <liburing.h>
#include <stdint.h>
#include <uv.h>

#include "kv/kv_ssd.h"

#define SSD_ALIGN 4096u               /* record alignment: O_DIRECT's and a page */
#define SSD_SEG_MAX (128ull << 20)    /* a segment is closed past this many bytes */
#define SSD_SEG_MIN (4ull << 20)      /* smallest segment limit (small tiers: capacity / 16) */
#define SSD_RING 64u                  /* io_uring entries: the most operations at the disk */
#define SSD_INFLIGHT_BYTES (256u << 20) /* bounce-buffer bytes at the disk at once */
#define SSD_POOL_BYTES (128u << 20)   /* idle bounce buffers kept for reuse */
#define SSD_SCAN_WINDOW (8u << 20)    /* bytes the open-time scan reads at once */
#define SSD_COMPACT_LIVE 50           /* compact a closed segment below this live percentage */

/* The on-disk record: this header, the key, the value, zeros up to the next multiple of 4096
 * (version 1); or (version 2, val_off 4096) header, key, zeros to 4096, then the value from
 * there, zeros to the next multiple of 4096: a value whose DRAM run is page-aligned is then
 * written straight from it, with no copy. Little-endian. data_crc covers the header (both CRC
 * fields zero), key and value; hdr_crc the header alone (hdr_crc zero), so a scan can trust a
 * record's length and step over it even when its value is damaged. */
#define SSD_MAGIC 0x3153564bu /* "KVS1" */
#define SSD_VERSION 1
#define SSD_VERSION_DIRECT 2
enum { REC_VALUE = 1, REC_TOMB = 2 };
struct rec_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t uid;
	uint32_t key_len;
	uint64_t gen;
	uint64_t val_len;
	uint32_t data_crc;
	uint32_t hdr_crc;
	uint32_t val_off; /* version 2: the value's offset in the record (4096); 0 in version 1 */
	uint8_t reserved[20];
};
_Static_assert(sizeof(struct rec_hdr) == 64, "record header is 64 bytes");

static inline uint64_t ssd_extent(uint64_t key_len, uint64_t val_len)
{
	return (sizeof(struct rec_hdr) + key_len + val_len + SSD_ALIGN - 1) & ~(uint64_t)(SSD_ALIGN - 1);
}

/* A version-2 record's extent: its header page, the value, zeros to a multiple of 4096. */
static inline uint64_t ssd_extent_direct(uint64_t val_len)
{
	return SSD_ALIGN + ((val_len + SSD_ALIGN - 1) & ~(uint64_t)(SSD_ALIGN - 1));
}
/* The extent and the value's offset of the record h heads (h passed rec_hdr_ok). */
static inline uint64_t rec_extent(const struct rec_hdr *h)
{
	return h->val_off ? ssd_extent_direct(h->val_len) : ssd_extent(h->key_len, h->val_len);
}
static inline uint64_t rec_val_off(const struct rec_hdr *h)
{
	return h->val_off ? h->val_off : sizeof(*h) + h->key_len;
}

/* CRC32C (Castagnoli, as iSCSI and ext4): running state starts at ssd_crc_init, ends with
 * ssd_crc_final. */
#define ssd_crc_init 0xffffffffu
uint32_t ssd_crc(uint32_t state, const void *p, uint64_t n);
static inline uint32_t ssd_crc_final(uint32_t state)
{
	return ~state;
}
/* Fill h and compute both CRCs over h, key and value (value may be NULL for a tombstone); val_off
 * 0 (version 1) or SSD_ALIGN (version 2). */
void rec_fill(struct rec_hdr *h, int type, uint32_t uid, uint64_t gen, const void *key, uint32_t key_len,
	      const void *val, uint64_t val_len, uint32_t val_off);
/* 1 when h has the magic, the version, a known type, sane lengths and a good hdr_crc. */
int rec_hdr_ok(const struct rec_hdr *h);
/* data_crc of a whole record image at p (either version) matches. */
int rec_data_ok(const void *p);

/* A record a segment holds, in offset order: a live value or a tombstone (dead records are not
 * kept: their bytes only count in the segment's end). */
enum { ENT_TOMB = 1, ENT_PENDING = 2 /* its write is still at the disk */ };
struct seg_ent {
	uint32_t blk;  /* offset / SSD_ALIGN */
	uint32_t nblk; /* extent / SSD_ALIGN */
	uint32_t flags;
};

struct seg {
	uint32_t no;
	int fd;
	uint64_t end;        /* next append offset: the bytes the file takes (or will once writes land) */
	uint64_t live_bytes; /* extents of live values */
	uint64_t tomb_bytes; /* extents of tombstones */
	struct seg_ent *ent;
	uint32_t nent, cap;
	uint32_t inflight;   /* operations at the disk on fd */
	uint32_t writes_inflight;
	uint8_t sealed, dirty, doomed, compacting;
};

/* Segment number -> file name "seg-%08u.kv" under dir. */
#define SSD_SEG_FMT "seg-%08u.kv"
int seg_name_parse(const char *name, uint32_t *no);

/* The segment table, sorted by number. */
struct seg_table {
	struct seg **v;
	uint32_t n, cap;
};
struct seg *segs_find(const struct seg_table *t, uint32_t no);
/* Add a segment with a number above every other (NULL on ENOMEM), or (sorted insert) any. */
struct seg *segs_add(struct seg_table *t, uint32_t no, int fd);
void segs_del(struct seg_table *t, struct seg *g); /* frees g (fd left to the caller) */

/* Entries: the index of the entry at blk, or -1. */
int seg_ent_find(const struct seg *g, uint32_t blk);
int seg_ent_add(struct seg *g, uint32_t blk, uint32_t nblk, uint32_t flags); /* -1 on ENOMEM */
int seg_ent_push(struct seg *g, uint32_t blk, uint32_t nblk, uint32_t flags); /* at the end, unsorted */
void seg_ent_del(struct seg *g, int i);
void seg_ent_sort(struct seg *g);

/* Aligned buffers: a small pool of idle ones so that big values do not fault fresh pages in for
 * every operation. */
struct buf_pool {
	struct pbuf {
		void *p;
		size_t size;
	} idle[SSD_RING]; /* as many as can be at the disk at once */
	int n;
	size_t bytes;
};
void *pool_get(struct buf_pool *bp, size_t size, size_t *got); /* NULL on ENOMEM */
void pool_put(struct buf_pool *bp, void *p, size_t size);
void pool_drain(struct buf_pool *bp);

/* The tier (kv_ssd.h). */
struct op;
struct flush;
struct compact;
struct kv_ssd {
	uv_loop_t *loop;
	char dir[256];
	int dfd, lockfd, efd, odirect;
	struct io_uring ring;
	uv_poll_t poll;
	struct seg_table segs;
	struct seg *active;
	uint32_t next_no;
	uint64_t capacity, seg_max, reserve, used;
	uint32_t inflight;
	uint64_t inflight_bytes, seq;
	struct op *wait_head, *wait_tail;
	struct op *w_head, *w_tail;
	struct flush *fl_head, *fl_tail;
	struct compact *cp;
	struct buf_pool pool;
	uint32_t working;           /* reads being checked on libuv's threads */
	int dir_dirty, closing, in_poll, freed;
	kv_ssd_moved_cb moved;
	void *arg;
	struct kv_ssd_stats st;
};

/* kv_ssd.c's, for kv_ssd_open.c: the loop's handlers, closing a segment, a compaction's start. */
void ssd_on_poll(uv_poll_t *h, int status, int events);
void ssd_on_closed(uv_handle_t *h);
void ssd_seg_release(struct kv_ssd *s, struct seg *g);
void ssd_compact_maybe(struct kv_ssd *s, int pressed);

/* The open-time scan: reads every segment file of dir (open at dfd), verifying every record,
 * into t (each segment's entries: the live set, sorted), and calls found for each live record.
 * Counts into st. Opens each segment with oflags. 0, or a MORI_E* with err. */
int ssd_scan(int dfd, const char *dir, int oflags, struct seg_table *t, struct kv_ssd_stats *st,
	     kv_ssd_found_cb found, void *arg, uint32_t *max_no, char *err, size_t errlen);

#endif
