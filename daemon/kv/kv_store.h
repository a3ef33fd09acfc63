/* UMBP in morid: the node's tiered KV store (include/mori_umbp.h is the client's view; docs/umbp.md
 * the model). Files, bottom up (none calls one above it):
 *   kv_policy.c  eviction policies (kv_policy.h)
 *   kv_dram.c    the DRAM tier: memfd slabs per uid and the allocator inside them
 *   kv_ssd*.c    the SSD tier (kv_ssd.h)
 *   kv_index.c   the hash table from (uid, key) to entries, grown incrementally
 *   kv_hold.c    uids' records, entries' memory, clients' reservations and leases and their expiry
 *   kv_reply.c   slots in replies (a slab's fd where the client lacks it), deferred replies
 *   kv_store.c   entries and their versions, eviction, spills, pins, quotas
 *   kv_clear.c   clear, a slice of the index a loop turn
 *   kv_cluster.c the cluster index in Redis (kv_cluster.h), kv_ext.c external KV reports
 *   kv_remote.c  gets from other nodes' stores and serving ours (kv_remote.h), kv_place.c placement
 *   kv_req*.c    the KvRequest messages of sessions and moractl, and the stats
 * What the layers above call is here. Everything runs on morid's loop. */
#ifndef MORID_KV_STORE_H
#define MORID_KV_STORE_H
#include "core/morid.h"

/* Start the store from d->cfg (kv_dram_bytes 0: none, and KvRequests get MORI_ENOTSUP). 0, or -1
 * after logging why (a bad kv_policy, the SSD tier's directory unusable). */
int kv_start(struct morid *d);
/* Ends every lease and reservation and frees the tiers' memory (the SSD tier's files stay). */
void kv_stop(struct morid *d);
/* A KvRequest: on a session (c its client) or on the control socket (c NULL: STATS only).
 * 1 when the reply is deferred (sent later through client_reply), else 0 with rep filled. */
int kv_handle_request(struct morid *d, struct client *c, uid_t uid, Mori__KvRequest *kq, Mori__Reply *rep,
		      struct rctx *r);
/* c's session ended: its reservations are freed, its leases end. */
void kv_client_gone(struct morid *d, struct client *c);
/* Node-wide counters for the Prometheus metrics; 0 when there is no store. */
int kv_stats_fill(struct morid *d, Mori__KvStats *st, struct rctx *r, int all_uids, uid_t uid);
#endif
