/* UMBP across nodes: placement of puts past the high watermark (kv_place.c). */
#ifndef MORID_KV_PLACE_H
#define MORID_KV_PLACE_H
#include "kv/kv_int.h"

/* After kv_remote_start: puts past the high watermark may be placed (make_room asks). */
void kv_place_start(struct kv_store *st);
/* Before kv_remote_stop: placements in flight end (their values stay here). */
void kv_place_stop(struct kv_store *st);
/* Placement, after e was committed here: with the cluster index on and this node's DRAM tier past
 * its high watermark, e is sent to the live node with the most free DRAM that stays under its
 * own high watermark with it (PeerKv PUT_ALLOC, a write over a transport, PUT_COMMIT), and
 * dropped here once committed there (a version replaced meanwhile stays). No such node (a full
 * cluster), a hard pin, or a failure on the way: e stays here and this node evicts as always. */
void kv_place_put(struct kv_store *st, struct kv_entry *e);
#endif
