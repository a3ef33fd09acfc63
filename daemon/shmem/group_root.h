/* The root side of a group (MORI-SHMEM): the daemon named by the group's root holds
 * its membership (which rank is where, each heap's handle), compares every PE's collective call
 * (sequence number, op, size, alignment) and answers them together, runs the allocator, keeps
 * the deadlines, and tells every member daemon (group_link.h events) when the group forms, a
 * join is refused, a call ends, or the group aborts. */
#ifndef MORID_GROUP_ROOT_H
#define MORID_GROUP_ROOT_H
#include "core/morid.h"

void root_start(struct morid *d);
void root_stop(struct morid *d);
/* Messages from member daemons (GL_JOIN, GL_CALL, GL_LEAVE). */
void root_join(struct morid *d, const Mori__PeerGroup *m);
void root_call(struct morid *d, const Mori__PeerGroup *m);
void root_leave(struct morid *d, const Mori__PeerGroup *m);
/* An event for group root_gid never reached node: its PEs there are lost. */
void root_node_lost(struct morid *d, const char *node, uint64_t root_gid, int code, const char *why);
/* Deadlines (joins, calls). Nonzero while anything waits. */
int root_tick(struct morid *d, uint64_t now);
/* Is group gid one of this daemon's (a member daemon on the root's node lists it once)? */
int root_has(struct morid *d, uint64_t gid);
/* moractl groups: append the groups this daemon is the root of. */
void root_list(struct morid *d, Mori__ListReply *lr, struct rctx *r, size_t cap, uid_t uid);
uint32_t root_count(struct morid *d);
#endif
