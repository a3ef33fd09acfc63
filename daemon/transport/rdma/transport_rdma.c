/* The RDMA transport (transport/transport.h), over rdma_node.c and the engine.
 *
 * One verbs device port per daemon (rdma_device, else the usable port whose RoCE address is the
 * listen address, else the first usable one) with one engine (rdma_core.h) on the daemon's
 * loop: its completion channel is a uv_poll, its timers one uv_timer. Per peer daemon a
 * connection of rdma_qps_per_peer RC QPs, paired through RdmaConnect requests on the peer
 * service's request path (peer_rpc); the peer's service hands them to our serve op.
 *
 * A transfer the peer service accepted (struct xfer) is taken here (the take op) when the peer's
 * QPs are up and both regions are reachable by the device: the local region is registered
 * lazily and cached, the peer's region key comes from an RdmaRegion request (cached per region
 * generation). With transport = auto, anything not ready yet goes by TCP, and a peer without
 * RDMA is TCP for good; with transport = rdma it waits for RDMA until its deadline.
 * Notifications do not travel here: the initiator's daemon sends each on the control link once
 * the data is done (xnotif.c), for TCP and RDMA alike; a SEND from a peer is dropped (cb_notif).
 *
 * Memory: the engine holds a job's local region (inflight reference, so deregistration waits
 * for its work requests); a region that is removed loses its remote-access registration at
 * once (the registry tells region_gone), so a peer's late RDMA write fails with a remote access error instead
 * of landing in memory its owner gave up. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rdma_int.h"
#include "rdma_verbs.h"

#define RPC_TIMEOUT_MS 3000
#define HOUSEKEEP_MS 1000
#define ENGINE_SLACK_US 1000000ull /* the engine's deadline trails the transfer's: peer.c ends it */

/* ---- time and the loop ---- */
static void arm(struct rnode *N);

static void progress(struct rnode *N)
{
	if (!N->e)
		return;
	uint64_t now = mori_now_us();
	int dead = rdma_eng_dead(N->e) != NULL;
	for (int i = 0; i < 64 && rdma_eng_progress(N->e, now) > 0; i++)
		;
	if (!dead && rdma_eng_dead(N->e)) {
		snprintf(N->why, sizeof(N->why), "%s: %s; TCP carries on until morid restarts",
			 rdma_vdev_info(N->v)->name, rdma_eng_dead(N->e));
		mlog_err("rdma", "%s", N->why);
	}
	arm(N);
}

static void on_cq(uv_poll_t *h, int status, int events)
{
	struct rnode *N = h->data;
	if (rdma_vdev_events(N->v) < 0)
		mlog_warn("rdma", "completion channel: cannot re-arm the CQ");
	progress(N);
}

static void try_waiting(struct rnode *N);

static void on_timer(uv_timer_t *t)
{
	struct rnode *N = t->data;
	progress(N);
	if (N->kick)
		try_waiting(N);
	progress(N);
}

static void on_spin(uv_idle_t *h)
{
	progress(h->data);
}

static void arm(struct rnode *N)
{
	if (N->stopping || !N->e)
		return;
	/* busy polling runs only while there is something to wait for */
	if (N->d->cfg.rdma_busy_poll && rdma_xfers_in_flight(N->e) > 0)
		uv_idle_start(&N->spin, on_spin);
	else
		uv_idle_stop(&N->spin);
	if (N->kick) {
		uv_timer_start(&N->timer, on_timer, 0, 0);
		return;
	}
	uint64_t now = mori_now_us(), t = rdma_eng_next_timer(N->e);
	uint64_t ms = HOUSEKEEP_MS;
	if (t != UINT64_MAX)
		ms = t <= now ? 0 : (t - now + 999) / 1000;
	if (ms > HOUSEKEEP_MS)
		ms = HOUSEKEEP_MS;
	uv_timer_start(&N->timer, on_timer, ms, 0);
}

static void ask_key(struct rpeer *rp, uint64_t region, uint32_t gen, uint64_t epoch, const uint8_t *secret);
static void kick(struct rnode *N);

/* ---- jobs ---- */

/* j lets go of its transfer, which ends now or is being handed back. */
static struct xfer *job_detach(struct job *j)
{
	struct xfer *x = j->x;
	if (x) {
		x->t = NULL; /* xfer_complete must not call our cancel for it */
		x->tp = NULL;
		j->x = NULL;
	}
	return x;
}

static void job_free(struct rnode *N, struct job *j)
{
	job_detach(j);
	list_del(&j->link);
	if (j->m && --j->m->users == 0 && j->m->gone)
		rmr_free(j->m);
	region_put(j->local);
	free(j->descs);
	free(j);
}

/* End the transfer of j with code (unless it ended already) and free j. */
static void job_end(struct rnode *N, struct job *j, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void job_end(struct rnode *N, struct job *j, int code, const char *fmt, ...)
{
	struct xfer *x = job_detach(j);
	if (x) {
		char msg[256];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		if (!code) {
			x->done = x->total;
			if (x->read) {
				x->p->bytes_received += x->total;
				count(N->d, C_BYTES_RECEIVED, x->total);
			} else {
				x->p->bytes_sent += x->total;
				count(N->d, C_BYTES_SENT, x->total);
			}
			j->rp->bytes += x->total;
		} else {
			j->rp->errors++;
		}
		xfer_complete(x, code, "%s", msg);
	}
	job_free(N, j);
}

/* Give j's transfer back to the peer service for the next transport (nothing of it went over RDMA). */
static void job_hand_back(struct rnode *N, struct job *j, const char *why)
{
	struct xfer *x = job_detach(j);
	job_free(N, j);
	if (x)
		xfer_fallback(x, &transport_rdma, why);
}

static void on_job_done(void *arg, uint32_t id, int code, const char *msg)
{
	struct job *j = arg;
	struct rnode *N = j->rp->N;
	j->eid = 0;
	if (j->starting) { /* rdma_xfer_start has not returned yet: job_try finishes it */
		j->ended = 1;
		j->end_code = code;
		snprintf(j->end_msg, sizeof(j->end_msg), "%s", msg);
		return;
	}
	if (code == MORI_EPERM) {
		/* The key no longer matches (region deregistered there?): forget it, and ask once
		 * more. The answer says what happened (MORI_ESTALE: the region is gone), or gives a
		 * new key to run the transfer again with (nothing of it landed: access failed). */
		list_each(it, &j->rp->rkeys) {
			struct rkey *k = list_entry(it, struct rkey, link);
			if (k->region == j->rregion && k->gen == j->rgen) {
				list_del(&k->link);
				free(k);
			}
		}
		if (!j->rekeyed && j->x) {
			j->rekeyed = 1;
			list_del(&j->link);
			list_add(&j->rp->waiting, &j->link);
			kick(N);
			return;
		}
	}
	if (code)
		job_end(N, j, code, "rdma: %s", msg);
	else
		job_end(N, j, 0, "%s", "");
}

static struct rkey *rkey_find(struct rpeer *rp, uint64_t region, uint32_t gen, uint64_t epoch)
{
	list_each(it, &rp->rkeys) {
		struct rkey *k = list_entry(it, struct rkey, link);
		if (k->region == region && k->gen == gen && k->epoch == epoch)
			return k;
	}
	return NULL;
}

/* Put j on the engine if its QPs and key are there; else it keeps waiting. */
static void job_try(struct rnode *N, struct job *j)
{
	struct rpeer *rp = j->rp;
	if (rp->no_rdma || !j->m) {
		/* only with transport = rdma: auto sends these by TCP from the start */
		job_end(N, j, MORI_ENOTSUP, "transport = rdma, but %s",
			rp->no_rdma ? rp->why : "the local region is not reachable by the NIC");
		return;
	}
	if (!rp->c || rdma_conn_ready(rp->c) == 0)
		return;
	struct rkey *k = rkey_find(rp, j->rregion, j->rgen, j->repoch);
	if (!k) {
		ask_key(rp, j->rregion, j->rgen, j->repoch, j->rsecret);
		return;
	}
	if (k->state == 0)
		return;
	if (k->state < 0) {
		if (N->mode == TM_AUTO && k->code == MORI_ENOTSUP)
			job_hand_back(N, j, k->why);
		else
			job_end(N, j, k->code, "%s", k->why);
		return;
	}
	struct xfer *x = j->x;
	struct rdma_xfer_args a = {0};
	if (!j->descs) { /* the engine borrows them until it is done, which may be after x ends */
		j->descs = x->descs;
		x->descs = NULL;
	}
	a.read = x->read;
	a.laddr = j->m->addr;
	a.lkey = j->m->lkey;
	a.raddr = k->addr;
	a.rkey = k->rkey;
	a.descs = j->descs;
	a.n = x->n;
	a.deadline_us = x->deadline_us + ENGINE_SLACK_US;
	a.done = on_job_done;
	a.arg = j;
	list_del(&j->link);
	list_add(&N->running, &j->link);
	uint32_t eid;
	j->starting = 1;
	int rc = rdma_xfer_start(rp->c, &a, mori_now_us(), &eid);
	j->starting = 0;
	if (rc) {
		job_end(N, j, rc, "rdma: cannot start: %s", mori_strerror(rc));
		return;
	}
	rp->jobs++;
	if (j->ended) {
		if (j->end_code)
			job_end(N, j, j->end_code, "rdma: %s", j->end_msg);
		else
			job_end(N, j, 0, "%s", "");
		return;
	}
	j->eid = eid;
}

/* Look at every waiting job (from the timer: job_try may end transfers, which must not happen
 * inside the engine or inside the peer service's submission path). */
static void kick(struct rnode *N)
{
	if (N->stopping)
		return;
	N->kick = 1;
	uv_timer_start(&N->timer, on_timer, 0, 0);
}

static void try_waiting(struct rnode *N)
{
	N->kick = 0;
	list_each(pt, &N->peers) {
		struct rpeer *rp = list_entry(pt, struct rpeer, link);
		list_each(it, &rp->waiting)
			job_try(N, list_entry(it, struct job, link));
	}
}

/* ---- requests to a peer daemon (the peer service's request path) ---- */
static void rpeer_reset(struct rpeer *rp, int code, const char *why);

static struct rpc *send_request(struct rpeer *rp, Mori__Request *req, int kind, int64_t key,
				 rpc_done_fn done, void *arg)
{
	struct rpc *q = peer_rpc(rp->p, req, RPC_TIMEOUT_MS, done, arg);
	if (q) {
		q->kind = kind;
		q->key = key;
	}
	return q;
}

static void connect_answer(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	struct rpeer *rp = p->tp[TR_RDMA];
	if (code == MORI_ECANCELED || !rp)
		return;
	if (!code && rep->body_case == MORI__REPLY__BODY_RDMA_CONNECT) {
		Mori__RdmaConnectReply *cr = rep->rdma_connect;
		if (!cr->rdma) {
			rp->no_rdma = 1;
			snprintf(rp->why, sizeof(rp->why), "peer has no RDMA: %s", cr->why);
			mlog_notice("rdma", "%s: %s; TCP it is", rp->addr, rp->why);
			rpeer_reset(rp, MORI_ENOTSUP, rp->why);
		} else if (rp->epoch && cr->epoch != rp->epoch) {
			char why[120];
			snprintf(why, sizeof(why), "peer daemon restarted (epoch %llx)", (unsigned long long)cr->epoch);
			rpeer_reset(rp, MORI_EPEERDEAD, why);
			rp->epoch = cr->epoch;
		} else {
			rp->epoch = cr->epoch;
		}
	} else if (rep && code) {
		mlog_info("rdma", "%s: connect refused: %s", rp->addr, msg);
		if (code == MORI_EPROTO || code == MORI_ENOTSUP) {
			rp->no_rdma = 1;
			snprintf(rp->why, sizeof(rp->why), "%s", rep->message ? rep->message : msg);
			rpeer_reset(rp, MORI_ENOTSUP, rp->why);
		}
	}
	/* a lost CONNECT is fine: the engine sends it again */
	progress(rp->N);
}

static void region_answer(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	struct rkey_ask *ask = q->arg;
	struct rpeer *rp = p->tp[TR_RDMA];
	struct rkey *k = rp && code != MORI_ECANCELED ? rkey_find(rp, ask->region, ask->gen, ask->epoch) : NULL;
	free(ask);
	if (!k)
		return;
	if (!rep) {
		/* no answer in time: forget the attempt; waiting jobs ask again */
		list_del(&k->link);
		free(k);
	} else if (code) {
		k->state = -1;
		k->code = code;
		snprintf(k->why, sizeof(k->why), "%s (at %s)", rep->message ? rep->message : "", rp->addr);
	} else if (rep->body_case != MORI__REPLY__BODY_RDMA_REGION) {
		k->state = -1;
		k->code = MORI_EPROTO;
		snprintf(k->why, sizeof(k->why), "peer %s answered without a key", rp->addr);
	} else {
		k->state = 1;
		k->addr = rep->rdma_region->addr;
		k->rkey = rep->rdma_region->rkey;
		k->size = rep->rdma_region->size;
	}
	/* Everything waiting for this peer may go (or ask again). */
	kick(rp->N);
}

/* Ask the peer for its key of a region (once: the entry marks it asked). */
static void ask_key(struct rpeer *rp, uint64_t region, uint32_t gen, uint64_t epoch, const uint8_t *secret)
{
	struct rkey *k = calloc(1, sizeof(*k));
	struct rkey_ask *ask = calloc(1, sizeof(*ask));
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__RdmaRegion rr = MORI__RDMA_REGION__INIT;
	struct rpc *q;
	if (!k || !ask) {
		free(k);
		free(ask);
		kick(rp->N); /* out of memory: the next look tries again */
		return;
	}
	*k = (struct rkey){.region = region, .gen = gen, .epoch = epoch};
	*ask = (struct rkey_ask){.region = region, .gen = gen, .epoch = epoch};
	rr.epoch = epoch;
	rr.region_id = region;
	rr.generation = gen;
	rr.secret.data = (uint8_t *)secret;
	rr.secret.len = REGION_SECRET_BYTES;
	req.body_case = MORI__REQUEST__BODY_RDMA_REGION;
	req.rdma_region = &rr;
	if (!(q = send_request(rp, &req, R_REGION, 0, region_answer, ask))) {
		free(k);
		free(ask);
		kick(rp->N);
		return;
	}
	list_add(&rp->rkeys, &k->link);
}

/* ---- per-peer connections ---- */
/* Unsent CONNECT/ACK messages of slot idx (all slots: -1) are void once a newer one exists or
 * the connection is gone: a queue of outdated QP ends reaching the peer after a pause would
 * make it pair with QPs that no longer exist, one after the other. */
static void cb_send_connect(void *arg, struct rdma_conn *c, int idx, const struct rdma_ep *ep, int ack)
{
	struct rpeer *rp = arg;
	struct rnode *N = rp->N;
	peer_rpc_drop(rp->p, R_CONNECT, idx);
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__RdmaConnect rc = MORI__RDMA_CONNECT__INIT;
	rc.epoch = N->d->epoch;
	rc.node = N->P->self;
	rc.slot = (uint32_t)idx;
	rc.nqp = (uint32_t)N->d->cfg.rdma_qps_per_peer;
	rc.qpn = ep->qpn;
	rc.psn = ep->psn;
	rc.mtu = ep->mtu;
	rc.gid.data = (uint8_t *)ep->gid;
	rc.gid.len = 16;
	rc.peer_qpn = ep->peer_qpn;
	rc.peer_psn = ep->peer_psn;
	rc.ack = ack;
	rc.inc = ep->inc;
	rc.conn_nonce = ep->nonce;
	req.body_case = MORI__REQUEST__BODY_RDMA_CONNECT;
	req.rdma_connect = &rc;
	send_request(rp, &req, R_CONNECT, idx, connect_answer, NULL); /* lost: the engine sends it again */
}

static void cb_notif(void *arg, struct rdma_conn *c, const void *msg, uint32_t len)
{
	struct rpeer *rp = arg;
	/* Notifications travel over the control link, in order and naming the region with its
	 * secret (xnotif.c): a SEND naming a region by id and generation alone grants nothing. */
	count(rp->N->d, C_BAD_REQUESTS, 1);
	mlog_info("rdma", "%s: notification of %u bytes over RDMA dropped (they come by the control link)", rp->addr,
		  len);
}

static void cb_event(void *arg, struct rdma_conn *c, int idx, const char *what, const char *why)
{
	struct rpeer *rp = arg;
	if (!strcmp(what, "up")) {
		mlog_info("rdma", "%s: QP %d up", rp->addr, idx);
		kick(rp->N); /* jobs waiting for QPs (not from inside the engine) */
	} else {
		mlog_info("rdma", "%s: QP %d %s: %s", rp->addr, idx, what, why);
	}
}

static int rpeer_conn(struct rpeer *rp)
{
	if (rp->c || rp->no_rdma || !rp->N->on)
		return rp->c ? 0 : -1;
	char err[200];
	struct rdma_conn_cb cb = {cb_send_connect, cb_notif, cb_event, rp};
	rp->c = rdma_conn_new(rp->N->e, (int)rp->N->d->cfg.rdma_qps_per_peer, &cb, mori_now_us(), err,
			      sizeof(err));
	if (!rp->c) {
		snprintf(rp->why, sizeof(rp->why), "%s", err);
		mlog_warn("rdma", "%s: %s", rp->addr, err);
		return -1;
	}
	progress(rp->N); /* sends the CONNECTs */
	return 0;
}

/* Our state for peer p, made on first use. */
static struct rpeer *rpeer_get(struct rnode *N, struct peer *p, int create)
{
	struct rpeer *rp = p->tp[TR_RDMA];
	if (rp || !create)
		return rp;
	if (!(rp = calloc(1, sizeof(*rp))))
		return NULL;
	rp->N = N;
	rp->p = p;
	rp->addr = p->addr;
	LIST_INIT(&rp->rkeys);
	LIST_INIT(&rp->waiting);
	list_add(&N->peers, &rp->link);
	p->tp[TR_RDMA] = rp;
	return rp;
}

/* The peer restarted or does no RDMA: drop its QPs and keys; waiting jobs go to TCP (auto) or
 * fail; running ones end with code through the engine. */
static void rpeer_reset(struct rpeer *rp, int code, const char *why)
{
	struct rnode *N = rp->N;
	if (rp->c) {
		struct rdma_conn *c = rp->c;
		rp->c = NULL;
		rdma_conn_free(c, code, why);
	}
	peer_rpc_drop(rp->p, R_CONNECT, -1);
	list_each(it, &rp->rkeys) {
		struct rkey *k = list_entry(it, struct rkey, link);
		list_del(&k->link);
		free(k);
	}
	list_each(it, &rp->waiting) {
		struct job *j = list_entry(it, struct job, link);
		if (N->mode == TM_AUTO)
			job_hand_back(N, j, why);
		else
			job_end(N, j, code, "rdma: %s", why);
	}
	if (!rp->no_rdma && N->on && !N->stopping)
		rpeer_conn(rp); /* a restarted peer: pair again */
}

/* ---- the transport ops ---- */

static const char *rdma_refuses(struct peers *P)
{
	struct rnode *N = P->tp[TR_RDMA];
	if (!N)
		return "RDMA is not set up in this morid";
	if (!N->on)
		return N->why[0] ? N->why : "no usable RDMA device";
	if (rdma_eng_dead(N->e))
		return N->why;
	return NULL;
}

/* A new job for x, waiting for QPs and the peer's key. */
static struct job *job_new(struct rpeer *rp, struct xfer *x, struct rmr *m)
{
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->rp = rp;
	j->x = x;
	j->local = x->local;
	x->local->inflight++; /* deregistration waits for the engine to let go */
	j->m = m;
	if (m)
		m->users++;
	j->rregion = x->rregion;
	memcpy(j->rsecret, x->rsecret, sizeof(j->rsecret));
	j->rgen = x->rgen;
	j->repoch = x->repoch;
	x->t = &transport_rdma;
	x->tp = j;
	list_add(&rp->waiting, &j->link);
	return j;
}

/* auto: host memory its NIC reaches (VRAM goes by another transport until RDMA carries it);
 * transport = rdma: everything, and what it cannot carry fails in job_try, saying why. */
static int rdma_can_take(struct peer *p, const struct region *local)
{
	struct rnode *N = p->P->tp[TR_RDMA];
	return (N && N->mode == TM_ONLY) || local->kind == MORI_MEM_HOST;
}

static int rdma_take(struct xfer *x)
{
	struct rnode *N = x->p->P->tp[TR_RDMA];
	if (!N || !N->on || N->mode == TM_OFF)
		return 0;
	if (rdma_eng_dead(N->e)) /* the device failed: TCP carries on (the log said why) */
		return 0;
	struct rpeer *rp = rpeer_get(N, x->p, 1);
	if (!rp)
		return 0;
	if (x->p->epoch && rp->epoch && x->p->epoch != rp->epoch) {
		/* The peer service saw it restart: our QPs are paired with a dead daemon's. */
		char why[120];
		snprintf(why, sizeof(why), "peer daemon restarted (epoch %llx)", (unsigned long long)x->p->epoch);
		rp->epoch = x->p->epoch;
		rpeer_reset(rp, MORI_EPEERDEAD, why);
	}
	if (x->p->epoch && !rp->epoch)
		rp->epoch = x->p->epoch;
	int code;
	char why[200];
	struct rmr *m = NULL;
	if (N->mode == TM_AUTO) {
		if (rp->no_rdma || (!rp->c && rpeer_conn(rp) != 0))
			return 0;
		if (rdma_conn_ready(rp->c) == 0)
			return 0; /* TCP until the QPs are up */
		if (!(m = rmr_get(N, x->local, 0, &code, why, sizeof(why))))
			return 0; /* the TCP path can reach it (cross-memory attach) */
	} else {
		/* transport = rdma: never TCP; what cannot go by RDMA fails (in job_try) */
		if (!rp->no_rdma && !rp->c)
			rpeer_conn(rp);
		m = rmr_get(N, x->local, 0, &code, why, sizeof(why));
	}
	struct job *j = job_new(rp, x, m);
	if (!j)
		return 0;
	if (m && !rp->no_rdma && !rkey_find(rp, j->rregion, j->rgen, j->repoch))
		ask_key(rp, j->rregion, j->rgen, j->repoch, j->rsecret);
	kick(N); /* never ends x here: the submission still holds it */
	return 1;
}

static void rdma_cancel(struct xfer *x, int code)
{
	struct rnode *N = x->p->P->tp[TR_RDMA];
	struct job *j = x->tp;
	job_detach(j);
	if (j->eid)
		rdma_xfer_cancel(N->e, j->eid, mori_now_us()); /* on_job_done frees it */
	else
		job_free(N, j);
}

static int rdma_carries(struct peer *p, uint32_t *lanes)
{
	struct rnode *N = p->P->tp[TR_RDMA];
	struct rpeer *rp = p->tp[TR_RDMA];
	*lanes = 0;
	if (!N || !N->on || N->mode == TM_OFF || rdma_eng_dead(N->e) || !rp || !rp->c)
		return 0;
	*lanes = (uint32_t)rdma_conn_ready(rp->c);
	return *lanes > 0;
}

/* RdmaConnect and RdmaRegion from another daemon. */
static int rdma_serve(struct peers *P, const Mori__Request *req, Mori__Reply *rep, struct rctx *r)
{
	struct morid *d = P->d;
	struct rnode *N = P->tp[TR_RDMA];
	char err[200];
	if (req->body_case == MORI__REQUEST__BODY_RDMA_CONNECT) {
		const Mori__RdmaConnect *m = req->rdma_connect;
		Mori__RdmaConnectReply *cr = rctx_alloc(r, sizeof(*cr));
		if (!cr) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			return 1;
		}
		mori__rdma_connect_reply__init(cr);
		cr->epoch = d->epoch;
		rep->body_case = MORI__REPLY__BODY_RDMA_CONNECT;
		rep->rdma_connect = cr;
		if (!N || !N->on || N->mode == TM_OFF) {
			cr->rdma = 0;
			cr->why = rctx_strdup(r, N ? N->why : "no RDMA");
			return 1;
		}
		if (!m->node || !m->node[0] || m->gid.len != 16) {
			reply_error(rep, MORI_EPROTO, "RdmaConnect without a node or a 16-byte GID");
			return 1;
		}
		if (m->nqp != (uint32_t)d->cfg.rdma_qps_per_peer) {
			reply_error(rep, MORI_ENOTSUP, "rdma_qps_per_peer differs (%u at %s, %lld here)", m->nqp,
				    m->node, (long long)d->cfg.rdma_qps_per_peer);
			return 1;
		}
		struct peer *p = peer_get(P, m->node, 1);
		struct rpeer *rp = p ? rpeer_get(N, p, 1) : NULL;
		if (!rp) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			return 1;
		}
		if (rp->epoch && m->epoch != rp->epoch) {
			char why[120];
			snprintf(why, sizeof(why), "peer daemon restarted (epoch %llx)", (unsigned long long)m->epoch);
			rp->epoch = m->epoch;
			rpeer_reset(rp, MORI_EPEERDEAD, why);
		}
		rp->epoch = m->epoch;
		rp->no_rdma = 0;
		if (!rp->c && rpeer_conn(rp) != 0) {
			cr->rdma = 0;
			cr->why = rctx_strdup(r, rp->why);
			return 1;
		}
		struct rdma_ep ep = {.qpn = m->qpn, .psn = m->psn, .mtu = m->mtu, .peer_qpn = m->peer_qpn,
				     .peer_psn = m->peer_psn, .inc = m->inc, .nonce = m->conn_nonce};
		memcpy(ep.gid, m->gid.data, 16);
		int rc = rdma_conn_remote(rp->c, (int)m->slot, &ep, m->ack, mori_now_us(), err, sizeof(err));
		if (rc) {
			reply_error(rep, rc, "%s", err);
			return 1;
		}
		cr->rdma = 1;
		progress(N);
		return 1;
	}
	if (req->body_case == MORI__REQUEST__BODY_RDMA_REGION) {
		const Mori__RdmaRegion *m = req->rdma_region;
		if (!N || !N->on) {
			reply_error(rep, MORI_ENOTSUP, "no RDMA here");
			return 1;
		}
		if (m->epoch != d->epoch) {
			reply_error(rep, MORI_ESTALE, "handle is from epoch %llx; this daemon restarted (now %llx)",
				    (unsigned long long)m->epoch, (unsigned long long)d->epoch);
			return 1;
		}
		struct region *g = region_find(d, m->region_id);
		if (!g || g->gen != m->generation || g->dead || !region_secret_ok(g, m->secret.data, m->secret.len)) {
			reply_error(rep, MORI_ESTALE, "region %llu is no longer registered",
				    (unsigned long long)m->region_id);
			return 1;
		}
		int code;
		struct rmr *mr = rmr_get(N, g, 1, &code, err, sizeof(err));
		if (!mr) {
			reply_error(rep, code, "%s", err);
			return 1;
		}
		Mori__RdmaRegionReply *rr = rctx_alloc(r, sizeof(*rr));
		if (!rr) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			return 1;
		}
		mori__rdma_region_reply__init(rr);
		rr->addr = mr->addr;
		rr->rkey = mr->rkey;
		rr->size = mr->size;
		rep->body_case = MORI__REPLY__BODY_RDMA_REGION;
		rep->rdma_region = rr;
		return 1;
	}
	return 0;
}

/* ---- start and stop ---- */

static void handle_closed(uv_handle_t *h)
{
	struct rnode *N = h->data;
	if (--N->handles == 0)
		free(N);
}

/* Open the device port and the engine, per the transport option. Never fails the daemon:
 * without a usable device RDMA is off (said in the log and by moractl nics) and TCP serves,
 * unless transport = rdma: then cross-node transfers are refused (refuses). */
static int rdma_start(struct peers *P)
{
	struct morid *d = P->d;
	struct rnode *N = calloc(1, sizeof(*N));
	if (!N)
		return -1;
	N->d = d;
	N->P = P;
	N->gone = (struct region_listener){.removed = rdma_region_gone, .arg = N};
	LIST_INIT(&N->peers);
	LIST_INIT(&N->mrs);
	LIST_INIT(&N->running);
	P->tp[TR_RDMA] = N;
	const char *t = d->cfg.transport;
	N->mode = peers_mode(P, &transport_rdma);
	N->handles = 1; /* the node itself, let go at stop */
	if (N->mode == TM_OFF) {
		snprintf(N->why, sizeof(N->why), "transport = %s", t);
		return 0;
	}
	if (!d->cfg.listen[0]) {
		snprintf(N->why, sizeof(N->why), "no peer listener");
		return 0;
	}
	if (rdma_device_open(N) != 0)
		return 0; /* off, N->why says why */
	uv_poll_init(d->loop, &N->cq_poll, rdma_vdev_fd(N->v));
	N->cq_poll.data = N;
	uv_poll_start(&N->cq_poll, UV_READABLE, on_cq);
	uv_timer_init(d->loop, &N->timer);
	N->timer.data = N;
	uv_idle_init(d->loop, &N->spin);
	N->spin.data = N;
	N->handles += 3;
	N->on = 1;
	registry_listen(d, &N->gone);
	const struct rdma_vinfo *vi = rdma_vdev_info(N->v);
	snprintf(N->why, sizeof(N->why), "%s port %u (%s, gid %d, mtu %u)", vi->name, vi->port, vi->address,
		 vi->gid_index, vi->mtu);
	mlog_notice("rdma", "RDMA transport on %s, transport = %s, %lld QPs per peer", N->why, t,
		    (long long)d->cfg.rdma_qps_per_peer);
	arm(N);
	return 0;
}

static void rdma_stop(struct peers *P)
{
	struct rnode *N = P->tp[TR_RDMA];
	if (!N || N->stopping)
		return;
	N->stopping = 1;
	/* The peer service ended every transfer (our cancel ran for each); what is left are jobs
	 * the engine still holds, and the peers' state. */
	list_each(it, &N->peers) {
		struct rpeer *rp = list_entry(it, struct rpeer, link);
		rp->no_rdma = 1;
		rpeer_reset(rp, MORI_ECANCELED, "shutting down");
	}
	if (N->e) {
		rdma_eng_free(N->e); /* ends what still runs: the jobs free themselves */
		N->e = NULL;
	}
	list_each(it, &N->running)
		job_free(N, list_entry(it, struct job, link));
	list_each(it, &N->mrs)
		rmr_free(list_entry(it, struct rmr, link));
	list_each(it, &N->peers) {
		struct rpeer *rp = list_entry(it, struct rpeer, link);
		list_del(&rp->link);
		rp->p->tp[TR_RDMA] = NULL;
		free(rp);
	}
	if (N->on) {
		registry_unlisten(&N->gone);
		uv_close((uv_handle_t *)&N->cq_poll, handle_closed);
		uv_close((uv_handle_t *)&N->timer, handle_closed);
		uv_close((uv_handle_t *)&N->spin, handle_closed);
		rdma_vdev_close(N->v); /* its fd stays open until here; the poll handle is closing */
		N->v = NULL;
		N->on = 0;
	}
	P->tp[TR_RDMA] = NULL;
	if (--N->handles == 0)
		free(N);
}

const struct transport transport_rdma = {
	.name = "rdma",
	.id = TR_RDMA,
	.start = rdma_start,
	.stop = rdma_stop,
	.take = rdma_take,
	.cancel = rdma_cancel,
	.serve = rdma_serve,
	.refuses = rdma_refuses,
	.can_take = rdma_can_take,
	.carries = rdma_carries,
};
