/* The messages between a group's member daemons and its root daemon (PeerGroup, kinds 1..4):
 * to this daemon through a local queue served on the next loop turn, to another over the peer
 * service's request path (peer_rpc: one request on the wire at a time per peer, each answered
 * at once by the receiver with its code). Either way the receiver handles the message on a
 * loop turn of its own, never inside the sender's call. Across nodes a message may arrive twice
 * (the request path resends when the listener lost its reply): receivers drop repeats. */
#ifndef MORID_GROUP_LINK_H
#define MORID_GROUP_LINK_H
#include "core/morid.h"

enum { GL_JOIN = 1, GL_CALL = 2, GL_LEAVE = 3, GL_EVENT = 4 };
enum { GE_FORMED = 1, GE_REFUSED = 2, GE_DONE = 3, GE_ABORT = 4 };

/* The code a PE's calls get once its group aborted for `why` (enum mori_shmem_abort). */
static inline int glink_abort_code(uint32_t why)
{
	return why == 1 ? MORI_EPEERDEAD : why == 3 ? MORI_ETIMEDOUT : MORI_ECANCELED;
}

/* A message for this daemon (from itself or another). m is the link's: valid during the call. */
typedef void (*glink_recv_fn)(struct morid *d, const Mori__PeerGroup *m);
/* A message this daemon sent to node never reached it (or was refused): code and why. */
typedef void (*glink_fail_fn)(struct morid *d, const char *node, const Mori__PeerGroup *m, int code,
			      const char *why);

/* Does this daemon hold the member group an event is for (member_gid, of the root's root_gid)? */
typedef int (*glink_known_fn)(uint64_t member_gid, uint64_t root_gid);

/* known: an event for a member group this daemon does not hold is refused (MORI_ENOENT), so that
 * a root whose member daemon restarted (and lost its groups) learns it from its next event. */
int glink_start(struct morid *d, glink_recv_fn recv, glink_fail_fn fail, glink_known_fn known);
void glink_stop(struct morid *d);
/* This daemon's peer address ("" without a peer listener). */
const char *glink_self(struct morid *d);
/* Is node this daemon ("" or its own address)? */
int glink_is_self(struct morid *d, const char *node);
/* Can groups span nodes here? 0, or MORI_ENOTSUP with the reason. */
int glink_can_reach(struct morid *d, char *msg, size_t len);
/* Send m (its node field is set here) to node. 0, or MORI_ENOMEM / MORI_ENOTSUP / MORI_EINVAL
 * (not host:port) with nothing sent; a later failure comes through fail. */
int glink_send(struct morid *d, const char *node, Mori__PeerGroup *m);
#endif
