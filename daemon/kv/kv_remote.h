/* UMBP across nodes (kv_remote.c, the asker; kv_serve.c, the holder): gets of values another
 * node's daemon holds, and serving this node's values to other daemons. Everything runs on
 * morid's loop. */
#ifndef MORID_KV_REMOTE_H
#define MORID_KV_REMOTE_H
#include "kv/kv_int.h"

/* Serve PeerKv requests and keep regions over the DRAM tier's slabs for peers' reads. 0 or
 * MORI_ENOMEM. */
int kv_remote_start(struct kv_store *st);
/* Before the store is freed: fetches end (MORI_ECANCELED), peers' leases end, the slabs' regions go. */
void kv_remote_stop(struct kv_store *st);

/* One key of a remote get: where its answer goes (a slot of g's reply), its bytes (copied), the
 * generation the index named (0: any), and where the bytes go: region (a region g's client
 * registered; 0: a temporary DRAM slot leased to the client), at region_off, at most cap bytes. */
struct kv_remote_key {
	Mori__KvSlot *sl;
	ProtobufCBinaryData key;
	uint64_t gen;
	uint64_t region, region_off, cap;
};
/* Fetch keys[0..n) of uid from node's daemon (host:port; epoch: the one the index named, 0 any)
 * into the client's regions where keys name one (the slot then says delivered; a region that is
 * not the client's, or a range outside it, is MORI_EINVAL for that key, a value over cap
 * MORI_EMSGSIZE with its length), else into temporary DRAM slots leased to g's client, the whole
 * within timeout_ms. MORI_EINPROGRESS:
 * g->waiting counts it and each slot is filled (status MORI_OK, MORI_ENOENT for a miss or a stale
 * entry, or the error, the reason naming the node in g's reply) before g completes. Else nothing
 * started: MORI_ENOTSUP (no peer service), MORI_ENOENT (node is this one), MORI_ENOMEM, or the
 * peer table's refusal (MORI_EINVAL, MORI_EBUSY), the slots' statuses set to it. */
int kv_remote_get(struct kv_store *st, struct kv_pget *g, uid_t uid, const char *node, uint64_t epoch,
		  const struct kv_remote_key *keys, uint32_t n, uint32_t timeout_ms);

/* The same for keys this node lacks, their holders asked of the cluster index (kv_cluster.h):
 * each key from one holder (one with it in DRAM first, else one that reads it back from its SSD),
 * a holder's keys in one request, holders in parallel;
 * keys no other node holds stay misses. MORI_EINPROGRESS as kv_remote_get; else nothing started:
 * MORI_ENOTSUP (kv_index local: the slots untouched), or the index's failure (MORI_ECONN naming
 * Redis, MORI_EINVAL, MORI_ENOMEM) set on the slots. */
int kv_remote_locate_get(struct kv_store *st, struct kv_pget *g, uid_t uid, const struct kv_remote_key *keys,
			 uint32_t n, uint32_t timeout_ms);

struct kv_remote_stats {
	uint64_t fetched, fetched_bytes, fetch_misses, fetch_errors; /* as the asker */
	uint64_t served, served_bytes, peer_leases, expired;         /* as the holder */
	uint64_t placed, placed_bytes, place_failed, placed_here;    /* placement: sent, refused, taken */
	uint64_t delivered, served_ssd; /* of fetched: into clients' regions; of served: read from SSD */
};
void kv_remote_stats(const struct kv_store *st, struct kv_remote_stats *out);
#endif
