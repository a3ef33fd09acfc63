/* The SSD tier of the KV store: values spilled from DRAM, kept in append-only segment files under
 * one directory, written and read with io_uring and O_DIRECT on morid's loop (no thread blocks
 * on the disk). Every record carries a CRC32C (ISA-L) over its header, key and value: a torn or
 * corrupted record is never returned, only counted and dropped. At open the directory is scanned
 * and every valid live record is handed to the caller (the store rebuilds its index from them);
 * the latest generation of a key wins and tombstones remove keys, so a removed key never comes
 * back. Space is reclaimed by compacting segments whose live bytes fell low (their live records
 * are re-appended, made durable, then the file is deleted; the owner learns each new location).
 *
 * Loop thread only: every function and callback runs on the loop given to kv_ssd_open. Callbacks
 * never run inside the call that started the operation, except at kv_ssd_close. */
#ifndef MORID_KV_SSD_H
#define MORID_KV_SSD_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "mori_umbp.h"

struct kv_ssd;

#define KV_SSD_KEY_MAX MORI_UMBP_KEY_MAX /* bytes of a key */

/* Where a record lives: opaque to the store, except that it is small and copyable. */
struct kv_ssd_loc {
	uint32_t seg;   /* segment number */
	uint32_t pad;
	uint64_t off;   /* byte offset of the record in the segment (a multiple of 4096) */
	uint64_t len;   /* value bytes */
};

/* A live record found at open (the final set: each (uid, key) once, at its latest generation,
 * none a tombstone removed). key points into a buffer valid during the call. */
typedef void (*kv_ssd_found_cb)(void *arg, const void *key, size_t key_len, uint32_t uid,
				uint64_t gen, const struct kv_ssd_loc *loc);
/* Compaction re-wrote the live record (key, uid, gen) from old to now (the same bytes; old is
 * gone once the compacted segment is deleted, and reads of old issued before this call still
 * complete). now NULL: the record failed its checksum while being moved and is dropped (counted
 * in crc_errors): the owner forgets it. The owner updates its index only where it still holds
 * old for that key (it may have removed or replaced it meanwhile). */
typedef void (*kv_ssd_moved_cb)(void *arg, const void *key, size_t key_len, uint32_t uid,
				uint64_t gen, const struct kv_ssd_loc *old, const struct kv_ssd_loc *now);
/* An asynchronous operation ended: rc MORI_OK, or MORI_EIO (checksum or I/O error: msg says
 * which segment and offset), MORI_ENOMEM (the filesystem ran out of space: ENOSPC),
 * MORI_ECANCELED (closed before it finished). loc: where the record is (write), or was read
 * from (read); NULL for a flush. msg: a sentence, "" on success; valid during the call. */
typedef void (*kv_ssd_done_cb)(void *arg, int rc, const struct kv_ssd_loc *loc, const char *msg);

struct kv_ssd_stats {
	uint64_t capacity;    /* bytes the tier may take on disk */
	uint64_t used_bytes;  /* bytes of segment files (records, dead ones and padding included) */
	uint64_t live_bytes;  /* bytes of live records (their 4096-aligned extents) */
	uint64_t records;     /* live records */
	uint64_t segments;    /* segment files */
	uint64_t writes, write_bytes; /* records written (compaction's included) and the bytes the disk took */
	uint64_t reads, read_bytes;   /* records read (compaction's included) and the bytes the disk gave */
	uint64_t crc_errors;  /* records whose checksum, key or generation did not match (reads, scan, compaction) */
	uint64_t torn_dropped; /* torn or unreadable stretches dropped at open (a tail cut mid-record) */
	uint64_t io_errors;   /* failed reads, writes and syncs */
	uint64_t compactions; /* segments compacted and deleted */
	int o_direct;   /* 1 when the filesystem took O_DIRECT, 0 when it fell back to buffered I/O */
};

/* Open (creating dir's segment files as needed) a tier of at most `bytes` on disk (0: 90 % of
 * the filesystem's free space now, plus what the segments already take). Scans the existing
 * segments synchronously (it reads them whole, verifying every checksum), calling found for each
 * live record (torn and corrupt records are counted in stats and logged; a torn tail is cut off).
 * moved (may be NULL) is told of compaction's moves; arg goes to found and moved.
 * Errors (err gets a sentence naming the directory): MORI_ENOENT (dir missing), MORI_EINVAL (not
 * a directory), MORI_EPERM (read-only or not writable), MORI_EBUSY (another process has it open),
 * MORI_ENOMEM, MORI_ESYS (io_uring or another system call failed: errno's text). */
int kv_ssd_open(uv_loop_t *loop, const char *dir, uint64_t bytes, kv_ssd_found_cb found,
		kv_ssd_moved_cb moved, void *arg, struct kv_ssd **out, char *err, size_t errlen);

/* Append a record (key of 1..KV_SSD_KEY_MAX bytes, copied; uid, gen, the value's len >= 1 bytes
 * at src). src must stay valid and unchanged until done runs (the store holds a lease on it): a
 * page-aligned src of 64 KiB or more goes to the disk straight from there, others are copied.
 * done gets the new location. Returns MORI_OK (done will run), or without calling done:
 * MORI_EINVAL (key or len out of range, s closing), MORI_ENOMEM (the tier is full: no room
 * within capacity even after compaction; kv_ssd_free_bytes says how much there is). */
int kv_ssd_write(struct kv_ssd *s, const void *key, size_t key_len, uint32_t uid, uint64_t gen,
		 const void *src, uint64_t len, kv_ssd_done_cb done, void *arg);

/* Read the value at loc into dst (loc->len bytes; any alignment), verifying the record's CRC and
 * that its key and gen match. done runs on the loop; on an error dst's contents are undefined.
 * Returns MORI_OK (done will run), or without calling done: MORI_EINVAL (s closing, bad key),
 * MORI_ENOENT (loc names no record this tier holds). */
int kv_ssd_read(struct kv_ssd *s, const struct kv_ssd_loc *loc, const void *key, size_t key_len,
		uint64_t gen, void *dst, kv_ssd_done_cb done, void *arg);

/* The record at loc is dead (evicted, replaced, removed): its space may be reclaimed. With
 * tombstone set a tombstone record for (key, uid, gen) is appended so a restart does not bring
 * the key back (gen: the removed record's generation or later; at equal generations a tombstone
 * wins). MORI_OK, MORI_ENOENT (loc was not live: nothing changed, still writes the tombstone),
 * MORI_ENOMEM (no room for the tombstone: the record is dead, but a restart may revive it). */
int kv_ssd_remove(struct kv_ssd *s, const struct kv_ssd_loc *loc, const void *key, size_t key_len,
		  uint32_t uid, uint64_t gen, int tombstone);

/* done runs once every write issued before the call is durable (fdatasync of the segments written,
 * fsync of the directory when segments were added). MORI_OK, or MORI_EINVAL (s closing). */
int kv_ssd_flush(struct kv_ssd *s, kv_ssd_done_cb done, void *arg);

/* 1 when loc names a live record of value_len bytes with a key of key_len bytes (its write has
 * landed, it is not removed), else 0. */
int kv_ssd_live(const struct kv_ssd *s, const struct kv_ssd_loc *loc, size_t key_len);

/* Space the tier could still take (bytes), counting what compaction would reclaim. */
uint64_t kv_ssd_free_bytes(const struct kv_ssd *s);
void kv_ssd_stats_get(const struct kv_ssd *s, struct kv_ssd_stats *out);

/* Cancel pending operations (their done gets MORI_ECANCELED, queued ones inside this call, those
 * already at the disk when the disk answers), close files; frees s once the loop has run the
 * closes. */
void kv_ssd_close(struct kv_ssd *s);

#endif
