/* The SSD tier of the KV store: values spilled from DRAM, kept in append-only segment files under
 * one directory, written and read with io_uring and O_DIRECT on morid's loop (no thread blocks
 * on the disk). Every record carries a CRC32C (ISA-L) over its header, key and value: a torn or
 * corrupted record is never returned, only counted and dropped. At open the directory is scanned
 * and every valid record is handed to the caller (the store rebuilds its index from them); the
 * latest generation of a key wins and tombstones remove keys, so a removed key never comes back.
 * Space is reclaimed by compacting segments whose live bytes fell low (their live records are
 * re-appended, then the file is deleted). */
#ifndef MORID_KV_SSD_H
#define MORID_KV_SSD_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct kv_ssd;

/* Where a record lives: opaque to the store, except that it is small and copyable. */
struct kv_ssd_loc {
	uint32_t seg;   /* segment number */
	uint32_t pad;
	uint64_t off;   /* byte offset of the record in the segment (a multiple of 4096) */
	uint64_t len;   /* value bytes */
};

/* A record found at open. key points into a buffer valid during the call. */
typedef void (*kv_ssd_found_cb)(void *arg, const void *key, size_t key_len, uint32_t uid,
				uint64_t gen, const struct kv_ssd_loc *loc);
/* An asynchronous operation ended: rc MORI_OK, or MORI_EIO (checksum or I/O error: msg says
 * which segment and offset), MORI_ENOSPC-like MORI_ENOMEM (the tier is full), MORI_ECANCELED
 * (closed before it ran). */
typedef void (*kv_ssd_done_cb)(void *arg, int rc, const struct kv_ssd_loc *loc, const char *msg);

struct kv_ssd_stats {
	uint64_t capacity, used_bytes, live_bytes, records, segments;
	uint64_t writes, write_bytes, reads, read_bytes;
	uint64_t crc_errors, torn_dropped, io_errors, compactions;
	int o_direct;   /* 1 when the filesystem took O_DIRECT, 0 when it fell back to buffered I/O */
};

/* Open (creating dir's segment files as needed) a tier of at most `bytes` on disk. Scans the
 * existing segments, calling found for each valid live record (torn and corrupt records are
 * counted in stats and logged). Errors (err gets a sentence naming the directory): MORI_ENOENT
 * (dir missing), MORI_EPERM (read-only or not writable), MORI_ESYS. */
int kv_ssd_open(uv_loop_t *loop, const char *dir, uint64_t bytes, kv_ssd_found_cb found, void *arg,
		struct kv_ssd **out, char *err, size_t errlen);

/* Append a record (key, uid, gen, the value's len bytes at src). src must stay valid and
 * unchanged until done runs (the store holds a lease on it). done gets the new location. */
int kv_ssd_write(struct kv_ssd *s, const void *key, size_t key_len, uint32_t uid, uint64_t gen,
		 const void *src, uint64_t len, kv_ssd_done_cb done, void *arg);

/* Read the value at loc into dst (loc->len bytes; any alignment), verifying the record's CRC and
 * that its key and gen match. done runs on the loop. */
int kv_ssd_read(struct kv_ssd *s, const struct kv_ssd_loc *loc, const void *key, size_t key_len,
		uint64_t gen, void *dst, kv_ssd_done_cb done, void *arg);

/* The record at loc is dead (evicted, replaced, removed): its space may be reclaimed. With
 * tombstone set a tombstone record for (key, uid, gen) is appended so a restart does not bring
 * the key back. */
int kv_ssd_remove(struct kv_ssd *s, const struct kv_ssd_loc *loc, const void *key, size_t key_len,
		  uint32_t uid, uint64_t gen, int tombstone);

/* done runs once every write issued before the call is durable (fdatasync). */
int kv_ssd_flush(struct kv_ssd *s, kv_ssd_done_cb done, void *arg);

/* Space the tier could still take (bytes), counting what compaction would reclaim. */
uint64_t kv_ssd_free_bytes(const struct kv_ssd *s);
void kv_ssd_stats_get(const struct kv_ssd *s, struct kv_ssd_stats *out);

/* Cancel pending operations (their done gets MORI_ECANCELED), close files; frees s once the loop
 * has run the closes. */
void kv_ssd_close(struct kv_ssd *s);

#endif
