/* MORI-SHMEM in morid (issue 11): groups of PEs formed through the daemons, one symmetric heap
 * per PE, the control page morid sets the abort word in. What the layers above call: the
 * session and control requests, a client's death, moractl groups, start and stop.
 *
 * Files, top down (no file calls one above it; callbacks up go through function pointers):
 *   group.c      the PEs of this node: session requests, heaps and control pages, what the
 *                root daemon's events do to them, listings
 *   group_root.c the root side of a group: membership, the comparison of collective calls,
 *                the allocator (symalloc.c), deadlines, aborts
 *   group_link.c the messages between the two sides (PeerGroup): on one node through a local
 *                queue, across nodes over the peer service's request path (peer_rpc)
 *   heap.c       a PE's heap (a memfd morid makes, or the PE's VRAM) as a region, control pages
 *   symalloc.c   the allocator */
#ifndef MORID_GROUP_H
#define MORID_GROUP_H
#include "morid.h"

int groups_start(struct morid *d);
void groups_stop(struct morid *d);
/* GroupJoin, GroupCall and GroupLeave on a session: 1 when the reply is deferred (joins and
 * calls are answered once every PE got there). fds are the callee's. */
int group_handle_request(struct morid *d, struct client *c, Mori__Request *req, Mori__Reply *rep,
			 struct rctx *r, int *fds, int nfds);
/* c's session closed: each of its PEs dies (peers' abort words set, the root told). Called before
 * c's regions are removed. */
void group_client_gone(struct morid *d, struct client *c);
/* moractl groups (ListRequest what = 5). */
void group_list(struct morid *d, Mori__ListReply *lr, struct rctx *r);
#endif
