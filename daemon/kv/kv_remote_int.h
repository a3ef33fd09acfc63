/* What kv_remote.c shares with kv_place.c, which sits above it: the state of the store's work
 * across nodes, and the regions over the DRAM tier's slabs that transports read and write. */
#ifndef MORID_KV_REMOTE_INT_H
#define MORID_KV_REMOTE_INT_H
#include "kv/kv_int.h"
#include "peer/peer_int.h"

#define LEASE_BUCKETS 1024
#define LIST_EMPTY(l) ((l)->next == (l))
#define PEER_KV_MAX 512 /* keys of one PeerKv request (kv_batch_max's bound) */

/* A value of this node that a peer reads: a reference on its version until released or expired. */
struct plea {
	struct list hlink, elink;
	uint64_t id;
	uint64_t deadline_ms;     /* loop time */
	struct kv_entry *e;
};

struct slab_region {
	uint32_t slab_id;         /* the slab it maps (slab ids are never reused) */
	struct region *g;
};

struct kv_remote {
	struct kv_store *st;
	struct morid *d;
	struct slab_region *sr;   /* by slab index */
	uint32_t nsr;
	struct list lb[LEASE_BUCKETS];
	struct list expiry;       /* struct plea by deadline */
	uint64_t lease_seq, nleases;
	uv_timer_t timer;
	struct list rgets;        /* the asker's fetches in flight */
	struct list rputs;        /* placements in flight */
	struct list preads;       /* the holder's reads from SSD for peers' leases (struct pread) */
	struct list early;        /* READYs that came before their lease reply (struct early) */
	uint32_t nearly;
	/* counters (moractl kv, metrics) */
	uint64_t fetched, fetched_bytes, fetch_misses, fetch_errors, served, served_bytes, expired;
	uint64_t placed, placed_bytes, place_failed, placed_here;
	uint64_t delivered, served_ssd; /* fetched into clients' regions; served from SSD */
	uint32_t placing;         /* placements in flight */
	/* the asker's side (kv_remote.c), called by kv_serve.c: a READY from a holder; its first
	 * deadline (loop ms, UINT64_MAX none); its deadlines' work when the timer fires */
	void (*asker_ready)(struct kv_remote *R, const Mori__PeerKv *q, const char *from, Mori__PeerKvReply *kr,
			    Mori__Reply *rep, struct rctx *r);
	uint64_t (*asker_first_ms)(struct kv_remote *R);
	void (*asker_tick)(struct kv_remote *R);
};

/* kv_serve.c: the holder's side, started and stopped by kv_remote_start / kv_remote_stop (stop
 * closes the timer, which frees R); (re)arm the timer for the first deadline of either side. */
void kv_serve_start(struct kv_remote *R);
void kv_serve_stop(struct kv_remote *R);
void kv_remote_arm(struct kv_remote *R);

/* The region over slab index (where a value's run lies), made on first use and removed when the
 * slab closes; NULL out of memory. */
struct region *kv_slab_region(struct kv_remote *R, uint32_t index);
/* Bytes this node's DRAM tier has below its high watermark. */
uint64_t kv_dram_room(struct kv_store *st);
#endif
