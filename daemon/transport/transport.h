/* The interface every byte-moving transport between daemons implements (in the spirit of nng's
 * transport ops and rdma-core's verbs_context_ops). The peer service (peer.c, xfer.c) owns the
 * one peer table, the one transfer record and the request path to other daemons; a transport
 * owns its data path: per peer state in p->tp[id], per transfer state in x->tp.
 *
 * Calls go one way: the core calls a transport only through these ops (main.c hands the table
 * to peers_start); a transport calls down into the core (xfer_complete, xfer_fallback,
 * peer_up/peer_down, peer_rpc, peers_kick/peers_dirty) and never into another transport.
 * Every op runs on morid's loop; none may end a transfer from inside take().
 *
 * Choosing a transport is data, as NCCL's canConnect loop: the table main.c hands over is in
 * order of preference, and a transfer goes to the first transport the transport option allows
 * whose can_take and take both say yes (xfer_route). The choice names no transport; a new one
 * is an id and a row of that table. */
#ifndef MORID_TRANSPORT_H
#define MORID_TRANSPORT_H
#include "core/morid.h"

struct peers;
struct peer;
struct xfer;
struct rctx;
struct rpc;

enum transport_id { TR_TCP = 0, TR_RDMA = 1, TR_MAX };

/* What the transport option (auto, or a transport's name) means for one transport: it carries
 * what it takes among the others (auto), it alone carries every transfer and what it cannot
 * carry fails (its name was given), or it carries nothing (another's name was given). */
enum transport_mode { TM_AUTO, TM_ONLY, TM_OFF };

struct transport {
	const char *name;
	enum transport_id id;
	/* Before the peer listener is bound (0, or -1 to fail start-up) / at daemon stop, after the
	 * core ended every transfer and request: free every p->tp[id] and P->tp[id] (or let its
	 * last handle do it). A transport that cannot run (no device) starts "off" and says why in
	 * refuses; that is not a failure. */
	int (*start)(struct peers *P);
	void (*stop)(struct peers *P);
	/* Peer p answered our hello (its epoch, node and data port are known): bring up the data
	 * path; the transport calls peer_up(p) when p can carry transfers. NULL: nothing to do. */
	void (*peer_start)(struct peer *p, const struct sockaddr *data_addr);
	/* p went down (every transfer on it was already ended): close what its data path had
	 * open; p->tp[id] stays (stop frees it). NULL: nothing to do. */
	void (*peer_down)(struct peer *p);
	/* Whether it takes transfers of region `local` to or from p at all (the memory it reaches,
	 * its mode), without side effects and whether or not its links to p are up yet: asked before
	 * take(), and to learn who would carry a transfer (peer_xfer_signals). NULL: any. */
	int (*can_take)(struct peer *p, const struct region *local);
	/* Run x: 1 when taken (x->t and x->tp set; it ends later, through xfer_complete), 0 when
	 * this transport cannot carry x now. Never ends x before returning. */
	int (*take)(struct xfer *x);
	/* x ends (done, failed, cancelled, expired) while this transport holds it: stop its work
	 * (tell the target to drop it where the protocol has a way), free x->tp. `code` is why. */
	void (*cancel)(struct xfer *x, int code);
	/* End of a loop turn with work queued: push what was coalesced. NULL: nothing to do. */
	void (*flush)(struct peers *P);
	/* Deadline tick (every PEER_TICK_MS while work exists): expire target-side state. Returns
	 * nonzero while it still holds such state. NULL: none kept. */
	int (*tick)(struct peers *P, uint64_t now);
	/* A request from another daemon for this transport's control plane: 1 when served (rep
	 * filled), 0 when not one of its requests. NULL: none. */
	int (*serve)(struct peers *P, const Mori__Request *req, Mori__Reply *rep, struct rctx *r);
	/* With the transport forced to this one: why it cannot carry transfers here (no usable
	 * device), else NULL. */
	const char *(*refuses)(struct peers *P);
	/* For moractl peers: does it carry p's transfers now, and over how many streams or QPs. */
	int (*carries)(struct peer *p, uint32_t *lanes);
	/* Carry request q of the request path (packed: q->msg, q->len; q->id, deadline set) on the
	 * data path, which the loop drives itself: 1 when taken (q->done runs later, exactly once,
	 * and frees nothing of q), 0 when it cannot now (peer_rpc_fast then uses the request path).
	 * NULL: never. */
	int (*rpc)(struct peer *p, struct rpc *q);
	/* 1: it carries a transfer's signal after the data (x->sig: the target applies it once every
	 * byte landed, before it answers; TCP's FF_SIGNAL). A transfer with a signal goes only to such
	 * a transport (xfer_route); the proxy sends its signal apart where none carries
	 * the transfer (peer_xfer_signals). */
	int signals;
};

extern const struct transport transport_tcp, transport_rdma;
#endif
