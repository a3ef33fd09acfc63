/* MORI-SHMEM in morid: groups of PEs formed through the daemons, one symmetric heap
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
#include "core/morid.h"

int groups_start(struct morid *d);
void groups_stop(struct morid *d);
/* GroupJoin, GroupCall and GroupLeave on a session: 1 when the reply is deferred (joins and
 * calls are answered once every PE got there). fds are the callee's. */
int group_handle_request(struct morid *d, struct client *c, Mori__Request *req, Mori__Reply *rep,
			 struct rctx *r, int *fds, int nfds);
/* c's session closed: each of its PEs dies (peers' abort words set, the root told). Called before
 * c's regions are removed. */
void group_client_gone(struct morid *d, struct client *c);
/* moractl groups (ListRequest what = 5) for a caller of uid `uid`: root sees every group, any
 * other uid only the groups its own uid owns (a group's name is what a join needs). */
void group_list(struct morid *d, Mori__ListReply *lr, struct rctx *r, uid_t uid);

/* ---- for the proxy (morid serving each PE's ring; a file above this one, to come) ----
 * A PE of this node is named by its id (GroupJoinReply.group_id). hooks: called on the loop when
 * a PE's group has formed (its ring may carry requests from now on) and when the PE is gone (left,
 * died, its group freed): the proxy stops touching its control page and heap before returning. */
struct heap_ctrl;
struct region;
struct group_hooks {
	void (*pe_ready)(void *arg, uint64_t pe);
	void (*pe_gone)(void *arg, uint64_t pe);
	void *arg;
};
void group_set_hooks(const struct group_hooks *h); /* NULL: none */
/* PE pe of this node: its rank, its group's size, its control page (ring after it) and heap
 * region. 0, or MORI_ENOENT when no such member PE is here. */
int group_pe(uint64_t pe, int *rank, int *n_pes, struct heap_ctrl **ctrl, struct region **heap);
/* Where PE `rank` of local PE pe's group is: its node (NULL: this node), its heap's packed Handle,
 * and, when it is a PE of this node still here, its heap region. 0, or MORI_ENOENT / MORI_EINVAL. */
int group_peer(uint64_t pe, int rank, const char **node, const uint8_t **handle, size_t *len,
	       struct region **heap);
#endif
