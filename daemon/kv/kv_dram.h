/* The DRAM tier of the KV store: memfd slabs morid makes and maps, each belonging to one uid
 * (its clients map them read-write: processes of one uid can already ptrace each other, so this
 * adds no trust; other uids never get them), and an allocator of runs of 64-byte granules inside
 * them, two-level segregated fit (TLSF): O(1) alloc and free, neighbours coalesced, a value never
 * rounded up to a page. Its bookkeeping lives in morid, never in the slabs: what a client writes
 * there cannot confuse it. A value over a quarter of a slab gets a memfd of its own ("dedicated",
 * its size rounded up to 4 KiB), freed with the value. */
#ifndef MORID_KV_DRAM_H
#define MORID_KV_DRAM_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define KV_GRANULE 64 /* bytes: the allocator's unit */

/* A run of granules in one slab, linked to its neighbours in address order. The run a value holds
 * is embedded in the store's entry; free runs are the allocator's own. */
struct kv_ext {
	struct kv_ext *prev, *next; /* neighbours in the slab (NULL at its ends) */
	uint32_t slab;              /* index in the tier's slab table */
	uint32_t off, len;          /* granules from the slab's start, granules */
	uint32_t free;              /* a free run (the allocator's), else a value's */
};

struct kv_slab {
	uint32_t id;      /* unique for the daemon's life: clients name mappings by it */
	uint32_t index;   /* in the slab table (reused after a slab is freed) */
	uid_t uid;
	int fd;           /* memfd, sealed against shrinking */
	uint8_t *base;    /* morid's own mapping */
	uint64_t bytes;
	int dedicated;
	uint64_t used;    /* granules held by values */
	struct kv_slab *next_of_uid;
};

struct kv_dram;

/* A tier making slabs of slab_bytes (a multiple of 4096), whose slabs together (regular and
 * dedicated) stay within limit_bytes. NULL on ENOMEM. */
struct kv_dram *kv_dram_new(uint64_t slab_bytes, uint64_t limit_bytes);
/* Frees every slab, values still in them too (their runs are the caller's to forget). */
void kv_dram_free(struct kv_dram *t);
/* Reserve bytes (>= 1) for uid: ext (the caller's, embedded in its entry) gets the run.
 * MORI_ENOMEM (no free run fits and no room for another slab: evict, then retry), MORI_ESYS
 * (memfd_create or mmap failed; errno kept). */
int kv_dram_alloc(struct kv_dram *t, uid_t uid, uint64_t bytes, struct kv_ext *ext);
/* The run is free again (coalesced; its pages stay). An emptied slab stays while the tier is
 * within its limit; an allocation that needs a slab and finds no room closes empty ones of any
 * uid (but a uid's last) first. ext is the caller's again. */
void kv_dram_release(struct kv_dram *t, struct kv_ext *ext);
static inline uint64_t kv_ext_bytes(const struct kv_ext *e) { return (uint64_t)e->len * KV_GRANULE; }
static inline uint64_t kv_ext_offset(const struct kv_ext *e) { return (uint64_t)e->off * KV_GRANULE; }
/* fn runs for every slab just before it is closed (freed, or the tier freed), before its
 * index can be reused: what others keep of it (a region over its fd) goes there. */
void kv_dram_on_close(struct kv_dram *t, void (*fn)(void *arg, const struct kv_slab *s), void *arg);
struct kv_slab *kv_dram_slab(const struct kv_dram *t, uint32_t index);
/* Slots of the slab table (for clients' per-slab records). */
uint32_t kv_dram_slots(const struct kv_dram *t);

struct kv_dram_stats {
	uint64_t slabs, slab_bytes;    /* memfds open and their sizes */
	uint64_t allocated;            /* bytes in runs held by values */
	uint64_t free_runs;
	uint64_t meta_bytes;           /* the allocator's own memory */
};
void kv_dram_stats_get(const struct kv_dram *t, struct kv_dram_stats *out);
#endif
