/* VRAM ranges over several VMM allocations mapped back to back (PyTorch's expandable
 * segments): the registration's pieces arrive in batches of up to WIRE_MAX_FDS fds, then a
 * commit; openers on this node get them back batch by batch. */
#ifndef MORID_VMM_H
#define MORID_VMM_H
#include "core/morid.h"

struct region;

/* The first batch of a registration, once memory.c's checks passed and made region g (no fd):
 * takes fds[0..nfds) (closed on failure too; g is then removed). Replies with the upload id. */
int vmm_register_start(struct morid *d, struct region *g, const Mori__MemRegister *m, Mori__Reply *rep,
		       struct rctx *r, int *fds, int nfds);
/* A later batch, or the commit (no pieces), of the upload m->vmm_upload of client c. Takes the
 * fds. Returns the region once a commit found every piece in place (no longer pending: the
 * caller replies with its handle, as for any registration); else NULL with the reply set (the
 * upload id for the next batch, or the error: a refused upload is removed). */
struct region *vmm_register_more(struct morid *d, struct client *c, const Mori__MemRegister *m, Mori__Reply *rep,
				 struct rctx *r, int *fds, int nfds);
/* Put g's pieces from `from` on (as many as a message carries, their fds dup'd into r) into an
 * open reply. 0, or a MORI_E* code with rep's error set. */
int vmm_open_fill(struct region *g, Mori__MemOpenReply *o, uint32_t from, Mori__Reply *rep, struct rctx *r);
/* MemOpen with vmm_from: the next batch of a region c owns or has opened (the reply's pieces and
 * fds; it does not repeat the handle). */
void vmm_open_more(struct morid *d, struct client *c, const Mori__MemOpen *mo, Mori__Reply *rep, struct rctx *r);
#endif
