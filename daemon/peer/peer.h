/* Links to other nodes' daemons: nng tcp control, transports (TCP streams, RDMA), cross-node
 * transfers. Implemented by peers.c, peer.c, peer_client.c and xfer.c. */
#ifndef MORID_PEER_H
#define MORID_PEER_H
#include "core/morid.h"

struct transport;
struct peers;
struct region;
/* Start the cross-node service with the transports built in (tr[0..ntr), transport.h). */
int peers_start(struct morid *d, const struct transport *const *tr, int ntr);
void peers_stop(struct morid *d);
/* After a configuration reload: connect peers newly listed in `peers` (none are dropped). */
void peers_reload(struct morid *d);
uint32_t peer_count(struct morid *d);
/* A cross-node submission (SQE_XFER, SQE_XFER_LIST, SQE_CANCEL) from client c. */
void peer_submit(struct morid *d, struct client *c, const struct mori_sqe *e);
/* A transfer morid starts itself (the MORI-SHMEM proxy, shmem_proxy.c), between its region
 * `local` and region (epoch, region, gen, secret) of the daemon at node (host:port): the same
 * transports, deadlines and counters as a client's. descs are the caller's checked batch
 * (local_offset in local, remote_offset in the remote region) and are taken, failure included.
 * done runs once on the loop (maybe before this returns): code 0 once every byte landed (a
 * write is acknowledged by the target), else the failure. 0 with *id set, or MORI_ENOTSUP (no
 * peer service, or the region unreachable), MORI_EINVAL, MORI_ENOMEM: then done never runs. */
struct peer_xfer_args {
	struct region *local;
	const char *node;
	uint64_t epoch, region;
	uint32_t gen;
	const uint8_t *secret;            /* REGION_SECRET_BYTES */
	int read;                         /* 1: remote -> local */
	mori_desc *descs;
	uint32_t n;
	uint32_t timeout_ms;
	void (*done)(void *arg, int code, const char *msg);
	void *arg;
	/* A write may end with a signal the target applies once all its bytes landed, before it
	 * answers (done then means both): 0 none, 1 SET, 2 ADD of sig_value at sig_off of the remote
	 * region (8 bytes, aligned). Only where peer_xfer_signals says so. */
	int sig;
	uint64_t sig_off, sig_value;
};
int peer_xfer_start(struct morid *d, const struct peer_xfer_args *a, uint64_t *id);
/* 1 when a write from local to node would go by a transport that carries its signal after the
 * data (TCP; not RDMA, which takes host memory where it reaches the peer): peer_xfer_start may
 * be given one. 0: send the signal apart once the write is done. */
int peer_xfer_signals(struct morid *d, const char *node, const struct region *local);
/* End transfer id (from peer_xfer_start) with MORI_ECANCELED now, done included; none: nothing. */
void peer_xfer_cancel(struct morid *d, uint64_t id);
/* Fail and forget everything of c's. */
void peer_client_gone(struct morid *d, struct client *c);
/* Requests that touch other nodes; each returns 1 when the reply is deferred. */
int peer_handle_request(struct morid *d, struct client *c, Mori__Request *req, Mori__Reply *rep,
			struct rctx *r, int *fds, int nfds);
/* MemClose of a remote ref (ids with REF_TAG, bit 62): forget it. Returns 1 if id was a remote
 * ref (handled), 0 if it is a local region id. */
int peer_close_ref(struct morid *d, struct client *c, uint64_t id);
void peer_list(struct morid *d, Mori__ListReply *lr, struct rctx *r);
uint32_t peer_transfers_in_flight(struct morid *d);
void peer_list_transfers(struct morid *d, Mori__ListReply *lr, struct rctx *r);
/* Requests of the group service (PeerGroup, shmem/group_link.c) from other daemons: set by the
 * layer above while it runs; from is the node the sender authenticated as (NULL without a
 * cluster key); 1 when it answered rep. */
extern int (*peers_group_serve)(struct peers *P, const Mori__Request *req, const char *from, Mori__Reply *rep,
				struct rctx *r);
/* PeerShmemAmo requests (signals and atomics of MORI-SHMEM's proxy, shmem/shmem_proxy.c): set
 * by the layer above while it runs; 1 when it answered rep. */
extern int (*peers_shmem_serve)(struct peers *P, const Mori__Request *req, const char *from, Mori__Reply *rep,
				struct rctx *r);
/* PeerKv requests (UMBP across nodes, kv/kv_remote.c): set by the layer above while it runs; 1
 * when it answered rep. */
extern int (*peers_kv_serve)(struct peers *P, const Mori__Request *req, const char *from, Mori__Reply *rep,
			     struct rctx *r);
/* A transfer's signal after the data (peer_xfer_args.sig) at the target: the 8-byte SET (add 0)
 * or ADD of value at off of g (checked: inside g, aligned), applied as the proxy applies its
 * atomics; set by shmem/shmem_proxy.c while it runs (NULL: such transfers are refused). */
extern int (*peers_signal_apply)(struct region *g, int add, uint64_t off, uint64_t value);
/* How peers are authenticated here, for moractl status; *unauth: 1 when a listener runs
 * without a cluster key (said loudly). */
const char *peer_auth_status(struct morid *d, int *unauth);
#endif
