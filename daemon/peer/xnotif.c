/* Notifications of cross-node transfers: after the data, in submission order.
 *
 * A client's transfers to one peer may finish in any order (large ones stripe over several
 * streams or QPs, small ones overtake them), so the target cannot be left to notify when each
 * transfer's bytes have landed. The transports run a transfer without its notification; when
 * its data is done (xfer_complete, stage 1) it waits in its client's queue to that peer (struct
 * nq) until every notifying transfer the client submitted to that peer before it has had its
 * notification sent or has failed; then its notification joins a batch (stage 2), one
 * PeerNotify request on the peer's request path, which carries one request at a time in order.
 * The transfer completes when the target answers (the notification is then posted there), with
 * the target's code for it. So, per initiating client and target node, notifications reach
 * their targets in the order the client submitted the transfers. */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "peer_int.h"

#define NOTIFY_BATCH 4096 /* notifications per request (well under the peers' 1 MiB message cap) */

static struct nq *nq_get(struct peer *p, uint64_t client_id, int create)
{
	list_each(it, &p->nqs) {
		struct nq *q = list_entry(it, struct nq, link);
		if (q->client_id == client_id)
			return q;
	}
	struct nq *q = create ? calloc(1, sizeof(*q)) : NULL;
	if (q) {
		q->client_id = client_id;
		LIST_INIT(&q->xs);
		list_add(&p->nqs, &q->link);
	}
	return q;
}

int xnotif_add(struct xfer *x)
{
	struct nq *q = nq_get(x->p, x->client_id, 1);
	if (!q)
		return MORI_ENOMEM;
	x->want_notif = 1;
	x->nq = q;
	list_add(&q->xs, &x->nlink);
	return MORI_OK;
}

static void batch_done(struct rpc *r, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	uint64_t batch = (uint64_t)(uintptr_t)r->arg;
	const Mori__PeerNotifyReply *nr = !code && rep && rep->body_case == MORI__REPLY__BODY_PEER_NOTIFY ? rep->peer_notify
												 : NULL;
	if (p->nbatch == batch)
		p->nbatch = 0;
	list_each(it, &p->nwire) {
		struct xfer *x = list_entry(it, struct xfer, nlink);
		if (x->nbatch != batch)
			break; /* later batches are behind it, in order */
		int c = code;
		if (!c && (!nr || x->nidx >= nr->n_codes))
			c = MORI_EPROTO;
		else if (!c)
			c = nr->codes[x->nidx];
		if (code)
			xfer_complete(x, c, "notification not delivered: %s", msg);
		else if (c == MORI_EAGAIN)
			xfer_complete(x, c, "peer %s dropped the notification: the receiver's completion queue is full "
				      "(it is not taking its notifications)", p->addr);
		else if (c)
			xfer_complete(x, c, "peer %s refused the notification (region gone there?)", p->addr);
		else
			xfer_complete(x, 0, "%s", "");
	}
	peers_dirty(p->P); /* the next batch may go */
}

/* Move what may go now from the clients' queues into a batch and put it on the request path. */
static void pump(struct peer *p)
{
	if (p->nbatch)
		return; /* one batch at a time: the next is sent when it is answered */
	Mori__PeerNotif **ns = NULL;
	size_t n = 0;
	static uint64_t next_batch;
	uint64_t batch = ++next_batch;
	list_each(it, &p->nqs) {
		struct nq *q = list_entry(it, struct nq, link);
		while (q->xs.next != &q->xs && n < NOTIFY_BATCH) {
			struct xfer *x = list_entry(q->xs.next, struct xfer, nlink);
			if (x->notif_stage != 1)
				break; /* its data is still moving: the ones behind it wait */
			if (!ns && !(ns = calloc(NOTIFY_BATCH, sizeof(*ns))))
				return;
			Mori__PeerNotif *e = malloc(sizeof(*e));
			if (!e)
				break;
			mori__peer_notif__init(e);
			e->epoch = x->repoch;
			e->region_id = x->rregion;
			e->generation = x->rgen;
			e->secret.data = x->rsecret;
			e->secret.len = sizeof(x->rsecret);
			e->tag = x->tag;
			list_del(&x->nlink);
			list_add(&p->nwire, &x->nlink);
			x->nq = NULL;
			x->notif_stage = 2;
			x->nbatch = batch;
			x->nidx = (uint32_t)n;
			ns[n++] = e;
		}
		if (q->xs.next == &q->xs) {
			list_del(&q->link);
			free(q);
		}
	}
	if (!n) {
		free(ns);
		return;
	}
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__PeerNotify pn = MORI__PEER_NOTIFY__INIT;
	pn.n_notifs = n;
	pn.notifs = ns;
	req.body_case = MORI__REQUEST__BODY_PEER_NOTIFY;
	req.peer_notify = &pn;
	struct rpc *r = peer_rpc(p, &req, PEER_LOOKUP_TIMEOUT_MS, batch_done, (void *)(uintptr_t)batch);
	for (size_t i = 0; i < n; i++)
		free(ns[i]);
	free(ns);
	if (!r) {
		list_each(it, &p->nwire) {
			struct xfer *x = list_entry(it, struct xfer, nlink);
			if (x->nbatch == batch)
				xfer_complete(x, MORI_ENOMEM, "out of memory for its notification");
		}
		return;
	}
	p->nbatch = batch;
	peer_use(p);
}

static void on_ready(struct xfer *x)
{
	peers_dirty(x->p->P); /* batched at the end of the loop turn */
}

static void on_unlink(struct xfer *x)
{
	if (x->notif_stage == 2 || x->nq) {
		list_del(&x->nlink);
		if (x->nq && x->nq->xs.next == &x->nq->xs) {
			list_del(&x->nq->link);
			free(x->nq);
		}
		x->nq = NULL;
	}
	x->want_notif = 0;
	peers_dirty(x->p->P); /* the one behind it may go now */
}

static void on_flush(struct peers *P)
{
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		if (p->nqs.next != &p->nqs)
			pump(p);
	}
}

void xnotif_hooks(struct peers *P)
{
	P->notif_ready = on_ready;
	P->notif_unlink = on_unlink;
	P->notif_flush = on_flush;
}

/* ---- the target ---- */

void xnotif_serve(struct peers *P, const Mori__PeerNotify *pn, Mori__Reply *rep, struct rctx *r)
{
	struct morid *d = P->d;
	Mori__PeerNotifyReply *nr = rctx_alloc(r, sizeof(*nr));
	int32_t *codes = rctx_alloc(r, sizeof(*codes) * (pn->n_notifs ? pn->n_notifs : 1));
	if (!nr || !codes) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__peer_notify_reply__init(nr);
	for (size_t i = 0; i < pn->n_notifs; i++) {
		const Mori__PeerNotif *e = pn->notifs[i];
		struct region *g = e->epoch == d->epoch ? region_find(d, e->region_id) : NULL;
		if (!g || g->gen != e->generation || !region_secret_ok(g, e->secret.data, e->secret.len) || !g->owner) {
			codes[i] = MORI_ESTALE;
			continue;
		}
		codes[i] = xfer_notify_target(d, g, e->tag);
	}
	nr->n_codes = pn->n_notifs;
	nr->codes = codes;
	rep->body_case = MORI__REPLY__BODY_PEER_NOTIFY;
	rep->peer_notify = nr;
}
