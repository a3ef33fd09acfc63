/* RDMA as the cross-node transport beside TCP (issue 7, layer 4).
 *
 * One verbs device port per daemon (rdma_device, else the usable port whose RoCE address is the
 * listen address, else the first usable one) with one engine (rdma_core.h) on the daemon's
 * loop: its completion channel is a uv_poll, its timers one uv_timer. Per peer daemon a
 * connection of rdma_qps_per_peer RC QPs, paired through RdmaConnect requests on this module's
 * own nng req socket to the peer's listener (the peer service serves them: rdma_serve).
 *
 * A transfer the peer service accepted (struct xfer) is taken here (rdma_take) when the peer's
 * QPs are up and both regions are reachable by the device: the local region is registered
 * lazily and cached, the peer's region key comes from an RdmaRegion request (cached per region
 * generation). With transport = auto, anything not ready yet goes by TCP, and a peer without
 * RDMA is TCP for good; with transport = rdma it waits for RDMA until its deadline.
 * The notification travels after the data (engine) and reaches the owner of the target region
 * here (CQE_NOTIF), exactly as the TCP path delivers it.
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

#include "peer.h" /* before nng's protocol header, which needs nng.h */
#include <nng/protocol/reqrep0/req.h>

#include "log.h"
#include "peer_int.h"
#include "region.h"
#include "rdma.h"
#include "rdma_core.h"
#include "rdma_verbs.h"
#include "registry.h"

#define RPC_TIMEOUT_US 3000000ull
#define HOUSEKEEP_MS 1000
#define NOTIF_MAGIC 0x4d524e31u /* "MRN1" */
#define ENGINE_SLACK_US 1000000ull /* the engine's deadline trails the transfer's: peer.c ends it */

enum mode { M_AUTO, M_TCP, M_RDMA };

/* The message a notification carries (<= RDMA_NOTIF_MAX). */
struct rnotif {
	uint32_t magic, gen;
	uint64_t epoch;          /* the target daemon's epoch, as the initiator knew it */
	uint64_t region, tag;
};
_Static_assert(sizeof(struct rnotif) <= RDMA_NOTIF_MAX, "notification fits");

/* A local region registered with the device: for our own transfers (lkey) and, separately,
 * for peers' (rkey: dropped the moment the region goes). */
struct rmr {
	struct list link;
	uint64_t region;
	uint32_t gen;
	void *lmr, *tmr;
	uint32_t lkey, rkey;
	uint64_t addr, size;
	uint32_t users;          /* jobs using lmr */
	int gone;                /* region removed: free when users drop to 0 */
};

/* A peer's region as our device reaches it. */
struct rkey {
	struct list link;
	uint64_t region, epoch;
	uint32_t gen;
	int state;               /* 0 asked, 1 known, -1 refused */
	int code;
	char why[160];
	uint64_t addr, size;
	uint32_t rkey;
};

enum { R_CONNECT, R_REGION };
struct rrpc {
	struct list link;
	int kind, sent;
	uint64_t id, deadline_us;
	int slot, ack;
	struct rdma_ep ep;
	uint64_t region, epoch;
	uint32_t gen;
};

struct rnode;

struct rpeer {
	struct list link;
	struct rnode *N;
	char addr[128];          /* the peer's listen address, as struct peer names it */
	uint64_t epoch;          /* the peer daemon's (0: not known yet) */
	int no_rdma;
	char why[200];
	struct rdma_conn *c;
	nng_socket req;
	int req_ok;
	uv_poll_t poll;
	struct list rpcs;        /* the head is on the wire */
	struct list rkeys;
	struct list waiting;     /* jobs waiting for QPs or a key */
	uint64_t next_rpc;
	uint64_t jobs, bytes, errors;
};

struct job {
	struct list link;        /* rp->waiting, or N->running once on the engine */
	struct list hlink;       /* N->byx while its xfer lives */
	struct rpeer *rp;
	uint64_t xid;            /* the struct xfer (P->xfers); 0 once it ended */
	struct region *local;    /* inflight reference */
	struct rmr *m;
	uint64_t rregion, repoch;
	uint32_t rgen;
	int read, notif;
	uint64_t tag;
	mori_desc *descs;
	uint32_t n;
	uint64_t total, deadline_us;
	uint32_t eid;            /* engine transfer, 0 before it started */
	int starting;            /* inside rdma_xfer_start: an end then is kept for after it */
	int rekeyed;             /* it got a remote access error once and asked for the key again */
	int ended, end_code;
	char end_msg[160];
	struct rnotif nm;
};

struct rnode {
	struct morid *d;
	int mode;
	int on;
	char why[200];           /* why RDMA is off, or the device in use */
	struct rdma_vdev *v;
	struct rdma_eng *e;
	uv_poll_t cq_poll;
	uv_timer_t timer;
	uv_idle_t spin;          /* rdma_busy_poll: polls the CQ every loop turn while work is out */
	int handles;
	int stopping;
	int kick;                /* waiting jobs to look at (at the next timer, never re-entrant) */
	struct list peers, mrs, running;
	struct htab byx;
	struct region_listener gone; /* registered while on */
};

static struct rnode *node(struct morid *d) { return d->rdma; }

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

static void rpc_expire(struct rnode *N, uint64_t now);

static void try_waiting(struct rnode *N);

static void on_timer(uv_timer_t *t)
{
	struct rnode *N = t->data;
	rpc_expire(N, mori_now_us());
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

/* ---- local registrations ---- */
static struct rmr *rmr_find(struct rnode *N, uint64_t region, uint32_t gen)
{
	list_each(it, &N->mrs) {
		struct rmr *m = list_entry(it, struct rmr, link);
		if (m->region == region && m->gen == gen && !m->gone)
			return m;
	}
	return NULL;
}

/* The registration of g (made on first use). remote: also for peers' access.
 * Returns NULL with a code and reason when the device cannot reach it. */
static struct rmr *rmr_get(struct rnode *N, struct region *g, int remote, int *code, char *why,
			   size_t len)
{
	struct rmr *m = rmr_find(N, g->id, g->gen);
	if (!m) {
		if (g->kind != MORI_MEM_HOST) {
			*code = MORI_ENOTSUP;
			snprintf(why, len, "region %llu is not host memory", (unsigned long long)g->id);
			return NULL;
		}
		void *base = g->fd >= 0 ? region_map(g) : NULL;
		if (!base) {
			*code = MORI_ENOTSUP;
			snprintf(why, len, "region %llu is reachable only by cross-memory attach, not by the NIC",
				 (unsigned long long)g->id);
			return NULL;
		}
		if (!(m = calloc(1, sizeof(*m)))) {
			*code = MORI_ENOMEM;
			snprintf(why, len, "out of memory");
			return NULL;
		}
		m->region = g->id;
		m->gen = g->gen;
		m->addr = (uint64_t)(uintptr_t)base;
		m->size = g->size;
		list_add(&N->mrs, &m->link);
	}
	void **slot = remote ? &m->tmr : &m->lmr;
	if (!*slot) {
		char err[200];
		uint32_t lkey, rkey;
		int rc = rdma_vdev_reg(N->v, (void *)(uintptr_t)m->addr, m->size, remote, &lkey, &rkey, slot,
				       err, sizeof(err));
		if (rc) {
			*code = rc;
			snprintf(why, len, "registering region %llu with %.60s: %.100s", (unsigned long long)g->id,
				 rdma_vdev_info(N->v)->name, err);
			return NULL;
		}
		if (remote)
			m->rkey = rkey;
		else
			m->lkey = lkey;
	}
	return m;
}

static void rmr_free(struct rmr *m)
{
	rdma_vdev_dereg(m->lmr);
	rdma_vdev_dereg(m->tmr);
	list_del(&m->link);
	free(m);
}

static void region_gone(void *arg, struct region *g)
{
	struct rnode *N = arg;
	if (!N->on)
		return;
	list_each(it, &N->mrs) {
		struct rmr *m = list_entry(it, struct rmr, link);
		if (m->region != g->id || m->gen != g->gen)
			continue;
		/* Peers lose access now; our own jobs on it still run (they hold the region). */
		rdma_vdev_dereg(m->tmr);
		m->tmr = NULL;
		m->gone = 1;
		if (!m->users)
			rmr_free(m);
	}
}

static void rpc_add(struct rpeer *rp, struct rrpc *q);
static void kick(struct rnode *N);

/* ---- jobs ---- */
static struct job *job_of(struct rnode *N, uint64_t xid)
{
	list_each(it, htab_bucket(&N->byx, xid)) {
		struct job *j = list_entry(it, struct job, hlink);
		if (j->xid == xid)
			return j;
	}
	return NULL;
}

/* The job lets go of its xfer (which ended or is being handed back). */
static void job_unlink(struct rnode *N, struct job *j)
{
	if (j->xid) {
		htab_del(&N->byx, &j->hlink);
		j->xid = 0;
	}
}

static void job_free(struct rnode *N, struct job *j)
{
	job_unlink(N, j);
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
	struct peers *P = N->d->peers;
	struct xfer *x = j->xid ? xfer_find(P, j->xid) : NULL;
	job_unlink(N, j); /* before xfer_complete, whose rdma_drop must not find us */
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

/* Hand j's transfer back to the TCP path (nothing of it went over RDMA). */
static void job_to_tcp(struct rnode *N, struct job *j, const char *why)
{
	struct peers *P = N->d->peers;
	struct xfer *x = j->xid ? xfer_find(P, j->xid) : NULL;
	job_unlink(N, j);
	if (x && !x->queued_link) {
		mlog_debug("rdma", "transfer %llu to %s goes by TCP: %s", (unsigned long long)x->user_data,
			   x->p->addr, why);
		list_add(&x->p->queue, &x->qlink);
		x->queued_link = 1;
		x->p->pump_needed = 1;
		peers_dirty(P);
		peers_kick(P);
	}
	job_free(N, j);
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
		if (!j->rekeyed && j->xid) {
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
		struct rrpc *q = calloc(1, sizeof(*q));
		if (!q || !(k = calloc(1, sizeof(*k)))) {
			free(q);
			return; /* out of memory: the next look tries again */
		}
		*k = (struct rkey){.region = j->rregion, .gen = j->rgen, .epoch = j->repoch};
		list_add(&rp->rkeys, &k->link);
		q->kind = R_REGION;
		q->region = j->rregion;
		q->gen = j->rgen;
		q->epoch = j->repoch;
		rpc_add(rp, q);
		return;
	}
	if (k->state == 0)
		return;
	if (k->state < 0) {
		if (N->mode == M_AUTO && k->code == MORI_ENOTSUP)
			job_to_tcp(N, j, k->why);
		else
			job_end(N, j, k->code, "%s", k->why);
		return;
	}
	struct rdma_xfer_args a = {0};
	a.read = j->read;
	a.laddr = j->m->addr;
	a.lkey = j->m->lkey;
	a.raddr = k->addr;
	a.rkey = k->rkey;
	a.descs = j->descs;
	a.n = j->n;
	if (j->notif) {
		a.notif = &j->nm;
		a.notif_len = sizeof(j->nm);
	}
	a.deadline_us = j->deadline_us + ENGINE_SLACK_US;
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

/* ---- requests to a peer daemon (own req socket) ---- */
static void rpc_kick(struct rpeer *rp);
static void peer_readable(uv_poll_t *h, int status, int events);

static int rpeer_dial(struct rpeer *rp)
{
	if (rp->req_ok)
		return 0;
	char url[160];
	int rc, fd;
	snprintf(url, sizeof(url), "tcp://%s", rp->addr);
	if ((rc = nng_req0_open(&rp->req)) != 0) {
		snprintf(rp->why, sizeof(rp->why), "nng_req0_open: %s", nng_strerror(rc));
		return -1;
	}
	nng_socket_set_ms(rp->req, NNG_OPT_RECONNMINT, PEER_BACKOFF_MIN_MS);
	nng_socket_set_ms(rp->req, NNG_OPT_RECONNMAXT, PEER_BACKOFF_MAX_MS);
	nng_socket_set_ms(rp->req, NNG_OPT_REQ_RESENDTIME, 1000);
	nng_socket_set_size(rp->req, NNG_OPT_RECVMAXSZ, 1 << 16);
	if ((rc = nng_dial(rp->req, url, NULL, NNG_FLAG_NONBLOCK)) != 0 ||
	    (rc = nng_socket_get_int(rp->req, NNG_OPT_RECVFD, &fd)) != 0) {
		snprintf(rp->why, sizeof(rp->why), "cannot dial %s: %s", url, nng_strerror(rc));
		nng_close(rp->req);
		return -1;
	}
	rp->req_ok = 1;
	rp->N->handles++;
	uv_poll_init(rp->N->d->loop, &rp->poll, fd);
	rp->poll.data = rp;
	uv_poll_start(&rp->poll, UV_READABLE, peer_readable);
	return 0;
}

static void rpc_add(struct rpeer *rp, struct rrpc *q)
{
	q->id = ++rp->next_rpc;
	q->deadline_us = mori_now_us() + RPC_TIMEOUT_US;
	list_add(&rp->rpcs, &q->link);
	if (rpeer_dial(rp) != 0)
		mlog_warn("rdma", "%s: %s", rp->addr, rp->why);
	rpc_kick(rp);
}

static void rpc_kick(struct rpeer *rp)
{
	if (!rp->req_ok || rp->rpcs.next == &rp->rpcs)
		return;
	struct rrpc *q = list_entry(rp->rpcs.next, struct rrpc, link);
	if (q->sent)
		return;
	struct rnode *N = rp->N;
	struct peers *P = N->d->peers;
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__RdmaConnect rc = MORI__RDMA_CONNECT__INIT;
	Mori__RdmaRegion rr = MORI__RDMA_REGION__INIT;
	req.id = q->id;
	if (q->kind == R_CONNECT) {
		rc.epoch = N->d->epoch;
		rc.node = P->self;
		rc.slot = (uint32_t)q->slot;
		rc.nqp = (uint32_t)N->d->cfg.rdma_qps_per_peer;
		rc.qpn = q->ep.qpn;
		rc.psn = q->ep.psn;
		rc.mtu = q->ep.mtu;
		rc.gid.data = q->ep.gid;
		rc.gid.len = 16;
		rc.peer_qpn = q->ep.peer_qpn;
		rc.peer_psn = q->ep.peer_psn;
		rc.ack = q->ack;
		rc.inc = q->ep.inc;
		rc.conn_nonce = q->ep.nonce;
		req.body_case = MORI__REQUEST__BODY_RDMA_CONNECT;
		req.rdma_connect = &rc;
	} else {
		rr.epoch = q->epoch;
		rr.region_id = q->region;
		rr.generation = q->gen;
		req.body_case = MORI__REQUEST__BODY_RDMA_REGION;
		req.rdma_region = &rr;
	}
	size_t len = mori__request__get_packed_size(&req);
	nng_msg *m;
	if (nng_msg_alloc(&m, len) != 0)
		return; /* the timer tries again */
	mori__request__pack(&req, nng_msg_body(m));
	if (nng_sendmsg(rp->req, m, NNG_FLAG_NONBLOCK) != 0) {
		nng_msg_free(m); /* not connected yet: the timer tries again */
		return;
	}
	q->sent = 1;
}

static void rpeer_reset(struct rpeer *rp, int code, const char *why);
static void region_answer(struct rpeer *rp, struct rrpc *q, const Mori__Reply *rep);

static void rpc_done(struct rpeer *rp, struct rrpc *q, const Mori__Reply *rep)
{
	struct rnode *N = rp->N;
	list_del(&q->link);
	if (q->kind == R_CONNECT) {
		if (rep && rep->code == 0 && rep->body_case == MORI__REPLY__BODY_RDMA_CONNECT) {
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
		} else if (rep && rep->code) {
			mlog_info("rdma", "%s: connect refused: %s", rp->addr, rep->message);
			if (rep->code == MORI_EPROTO || rep->code == MORI_ENOTSUP) {
				rp->no_rdma = 1;
				snprintf(rp->why, sizeof(rp->why), "%s", rep->message);
				rpeer_reset(rp, MORI_ENOTSUP, rp->why);
			}
		}
		/* a lost CONNECT is fine: the engine sends it again */
	} else {
		region_answer(rp, q, rep);
	}
	free(q);
	(void)N;
}

static void region_answer(struct rpeer *rp, struct rrpc *q, const Mori__Reply *rep)
{
	struct rkey *k = rkey_find(rp, q->region, q->gen, q->epoch);
	if (!k)
		return;
	if (!rep) {
		/* no answer in time: forget the attempt; waiting jobs ask again */
		list_del(&k->link);
		free(k);
	} else if (rep->code) {
		k->state = -1;
		k->code = rep->code;
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

static void peer_readable(uv_poll_t *h, int status, int events)
{
	struct rpeer *rp = h->data;
	for (int i = 0; i < 32; i++) {
		nng_msg *m;
		if (nng_recvmsg(rp->req, &m, NNG_FLAG_NONBLOCK) != 0)
			break;
		Mori__Reply *rep = mori__reply__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
		nng_msg_free(m);
		if (!rep)
			continue;
		struct rrpc *q = rp->rpcs.next != &rp->rpcs ? list_entry(rp->rpcs.next, struct rrpc, link) : NULL;
		if (q && q->sent && rep->id == q->id)
			rpc_done(rp, q, rep);
		mori__reply__free_unpacked(rep, NULL);
		rpc_kick(rp);
	}
	progress(rp->N);
}

static void rpc_expire(struct rnode *N, uint64_t now)
{
	list_each(it, &N->peers) {
		struct rpeer *rp = list_entry(it, struct rpeer, link);
		if (rp->rpcs.next == &rp->rpcs)
			continue;
		struct rrpc *q = list_entry(rp->rpcs.next, struct rrpc, link);
		if (q->deadline_us <= now) {
			rpc_done(rp, q, NULL); /* frees q */
			rpc_kick(rp);
		} else if (!q->sent) {
			rpc_kick(rp);
		}
	}
}

/* ---- per-peer connections ---- */
/* Unsent CONNECT/ACK messages of slot idx (all slots: -1) are void once a newer one exists or
 * the connection is gone: a queue of outdated QP ends reaching the peer after a pause would
 * make it pair with QPs that no longer exist, one after the other. */
static void rpc_drop_connects(struct rpeer *rp, int idx)
{
	list_each(it, &rp->rpcs) {
		struct rrpc *q = list_entry(it, struct rrpc, link);
		if (q->kind == R_CONNECT && !q->sent && (idx < 0 || q->slot == idx)) {
			list_del(&q->link);
			free(q);
		}
	}
}

static void cb_send_connect(void *arg, struct rdma_conn *c, int idx, const struct rdma_ep *ep, int ack)
{
	struct rpeer *rp = arg;
	rpc_drop_connects(rp, idx);
	struct rrpc *q = calloc(1, sizeof(*q));
	if (!q)
		return; /* the engine sends it again */
	q->kind = R_CONNECT;
	q->slot = idx;
	q->ack = ack;
	q->ep = *ep;
	rpc_add(rp, q);
}

static void cb_notif(void *arg, struct rdma_conn *c, const void *msg, uint32_t len)
{
	struct rpeer *rp = arg;
	struct morid *d = rp->N->d;
	struct rnotif n;
	if (len != sizeof(n)) {
		mlog_info("rdma", "%s: notification of %u bytes dropped", rp->addr, len);
		return;
	}
	memcpy(&n, msg, sizeof(n));
	struct region *g = n.magic == NOTIF_MAGIC && n.epoch == d->epoch ? region_find(d, n.region) : NULL;
	if (!g || g->gen != n.gen || g->dead || !g->owner) {
		mlog_info("rdma", "%s: notification for region %llu, which is gone", rp->addr,
			  (unsigned long long)n.region);
		return;
	}
	struct mori_cqe e = {.type = CQE_NOTIF, .code = 0, .user_data = n.tag, .value = g->id};
	client_post(g->owner, &e);
	count(d, C_NOTIFS, 1);
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

static struct rpeer *rpeer_get(struct rnode *N, const char *addr, int create)
{
	list_each(it, &N->peers) {
		struct rpeer *rp = list_entry(it, struct rpeer, link);
		if (!strcmp(rp->addr, addr))
			return rp;
	}
	if (!create)
		return NULL;
	struct rpeer *rp = calloc(1, sizeof(*rp));
	if (!rp)
		return NULL;
	rp->N = N;
	snprintf(rp->addr, sizeof(rp->addr), "%s", addr);
	LIST_INIT(&rp->rpcs);
	LIST_INIT(&rp->rkeys);
	LIST_INIT(&rp->waiting);
	list_add(&N->peers, &rp->link);
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
	rpc_drop_connects(rp, -1);
	list_each(it, &rp->rkeys) {
		struct rkey *k = list_entry(it, struct rkey, link);
		list_del(&k->link);
		free(k);
	}
	list_each(it, &rp->waiting) {
		struct job *j = list_entry(it, struct job, link);
		if (N->mode == M_AUTO)
			job_to_tcp(N, j, why);
		else
			job_end(N, j, code, "rdma: %s", why);
	}
	if (!rp->no_rdma && N->on && !N->stopping)
		rpeer_conn(rp); /* a restarted peer: pair again */
}

/* ---- the hooks ---- */
const char *rdma_refuses(struct morid *d)
{
	struct rnode *N = node(d);
	if (strcmp(d->cfg.transport, "rdma") || (N && N->mode != M_RDMA))
		return NULL;
	if (!N)
		return "RDMA is not set up in this morid";
	if (!N->on)
		return N->why[0] ? N->why : "no usable RDMA device";
	if (rdma_eng_dead(N->e))
		return N->why;
	return NULL;
}

int rdma_take(struct morid *d, struct xfer *x)
{
	struct rnode *N = node(d);
	if (!N || !N->on || N->mode == M_TCP)
		return 0;
	if (rdma_eng_dead(N->e)) /* the device failed: TCP carries on (the log said why) */
		return 0;
	struct rpeer *rp = rpeer_get(N, x->p->addr, 1);
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
	if (N->mode == M_AUTO) {
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
	struct job *j = calloc(1, sizeof(*j));
	mori_desc *ds = malloc((size_t)x->n * sizeof(*ds));
	if (!j || !ds) {
		free(j);
		free(ds);
		return 0;
	}
	/* The engine borrows the descriptors until it is done, which may be after x is gone. */
	memcpy(ds, x->descs, (size_t)x->n * sizeof(*ds));
	j->rp = rp;
	j->xid = x->id;
	j->local = x->local;
	x->local->inflight++; /* deregistration waits for the engine to let go */
	j->m = m;
	if (m)
		m->users++;
	j->rregion = x->rregion;
	j->rgen = x->rgen;
	j->repoch = x->repoch;
	j->read = x->read;
	j->notif = x->notif;
	j->tag = x->tag;
	j->descs = ds;
	j->n = x->n;
	j->total = x->total;
	j->deadline_us = x->deadline_us;
	j->nm = (struct rnotif){NOTIF_MAGIC, x->rgen, x->repoch, x->rregion, x->tag};
	htab_add(&N->byx, x->id, &j->hlink);
	list_add(&rp->waiting, &j->link);
	if (m && !rp->no_rdma && !rkey_find(rp, j->rregion, j->rgen, j->repoch)) {
		struct rrpc *q = calloc(1, sizeof(*q));
		struct rkey *k = calloc(1, sizeof(*k));
		if (!q || !k) {
			free(q);
			free(k);
			kick(N); /* job_try asks again */
			return 1;
		}
		*k = (struct rkey){.region = j->rregion, .gen = j->rgen, .epoch = j->repoch};
		list_add(&rp->rkeys, &k->link);
		q->kind = R_REGION;
		q->region = j->rregion;
		q->gen = j->rgen;
		q->epoch = j->repoch;
		rpc_add(rp, q);
	}
	kick(N); /* never ends x here: xfer_submit still holds it */
	return 1;
}

void rdma_drop(struct morid *d, struct xfer *x)
{
	struct rnode *N = node(d);
	if (!N)
		return;
	struct job *j = job_of(N, x->id);
	if (!j)
		return;
	job_unlink(N, j);
	if (j->eid)
		rdma_xfer_cancel(N->e, j->eid, mori_now_us()); /* on_job_done frees it */
	else
		job_free(N, j);
}

const char *rdma_transport(struct morid *d, const char *addr)
{
	struct rnode *N = node(d);
	if (!N || !N->on || N->mode == M_TCP || rdma_eng_dead(N->e))
		return "tcp";
	struct rpeer *rp = rpeer_get(N, addr, 0);
	if (!rp || !rp->c)
		return "tcp";
	return rdma_conn_ready(rp->c) ? "rdma" : "tcp";
}

/* RdmaConnect and RdmaRegion from another daemon. */
int rdma_serve(struct morid *d, const Mori__Request *req, Mori__Reply *rep, struct rctx *r)
{
	struct rnode *N = node(d);
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
		if (!N || !N->on || N->mode == M_TCP) {
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
		struct rpeer *rp = rpeer_get(N, m->node, 1);
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
		if (!g || g->gen != m->generation || g->dead) {
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

/* The device port to use: rdma_device, else the usable one whose address is ours, else the
 * first usable one. */
static int pick(struct rnode *N, char *name, size_t nlen, int *port, int *gidx)
{
	struct rdma_nic *v;
	int n;
	char note[160];
	if (rdma_discover(&N->d->cfg, &v, &n, note, sizeof(note)) != 0) {
		snprintf(N->why, sizeof(N->why), "out of memory");
		return -1;
	}
	const char *l = N->d->cfg.advertise[0] ? N->d->cfg.advertise : N->d->cfg.listen;
	int best = -1;
	for (int i = 0; i < n; i++) {
		if (!v[i].usable)
			continue;
		if (best < 0)
			best = i;
		size_t al = strlen(v[i].address);
		if (al && !strncmp(l, v[i].address, al) && l[al] == ':') {
			best = i;
			break;
		}
	}
	if (best < 0) {
		snprintf(N->why, sizeof(N->why), "%s", note[0] ? note : n ? "no usable RDMA port" : "no RDMA devices");
		free(v);
		return -1;
	}
	snprintf(name, nlen, "%s", v[best].device);
	*port = (int)v[best].port;
	*gidx = v[best].gid_index;
	free(v);
	return 0;
}

static void handle_closed(uv_handle_t *h)
{
	struct rnode *N = h->data;
	if (--N->handles == 0)
		free(N);
}

int rdma_node_start(struct morid *d)
{
	struct rnode *N = calloc(1, sizeof(*N));
	if (!N)
		return -1;
	N->d = d;
	LIST_INIT(&N->peers);
	LIST_INIT(&N->mrs);
	LIST_INIT(&N->running);
	htab_init(&N->byx);
	d->rdma = N;
	const char *t = d->cfg.transport;
	N->mode = !strcmp(t, "tcp") ? M_TCP : !strcmp(t, "rdma") ? M_RDMA : M_AUTO;
	N->handles = 1; /* the node itself, let go at stop */
	if (N->mode == M_TCP) {
		snprintf(N->why, sizeof(N->why), "transport = tcp");
		return 0;
	}
	if (!d->cfg.listen[0]) {
		snprintf(N->why, sizeof(N->why), "no peer listener");
		return 0;
	}
	char name[64], err[200];
	int port, gidx;
	if (pick(N, name, sizeof(name), &port, &gidx) != 0) {
		if (N->mode == M_RDMA)
			mlog_warn("rdma", "transport = rdma, but %s: cross-node transfers will be refused", N->why);
		else
			mlog_notice("rdma", "RDMA transport off: %s", N->why);
		return 0;
	}
	if (rdma_vdev_open(name, port, gidx, 8192, &N->v, err, sizeof(err)) != 0) {
		snprintf(N->why, sizeof(N->why), "%s", err);
		mlog_warn("rdma", "RDMA transport off: %s", err);
		return 0;
	}
	struct rdma_cfg cfg;
	rdma_cfg_defaults(&cfg);
	cfg.sq_depth = 128;
	cfg.rq_depth = 128;
	cfg.timeout = (uint8_t)d->cfg.rdma_qp_timeout;
	cfg.retry_cnt = (uint8_t)d->cfg.rdma_retry_cnt;
	cfg.rnr_retry = (uint8_t)d->cfg.rdma_rnr_retry;
	rdma_vdev_cfg(N->v, &cfg);
	if (!(N->e = rdma_eng_new(&rdma_verbs_ops, N->v, &cfg))) {
		rdma_vdev_close(N->v);
		N->v = NULL;
		snprintf(N->why, sizeof(N->why), "out of memory");
		return 0;
	}
	uv_poll_init(d->loop, &N->cq_poll, rdma_vdev_fd(N->v));
	N->cq_poll.data = N;
	uv_poll_start(&N->cq_poll, UV_READABLE, on_cq);
	uv_timer_init(d->loop, &N->timer);
	N->timer.data = N;
	uv_idle_init(d->loop, &N->spin);
	N->spin.data = N;
	N->handles += 3;
	N->on = 1;
	N->gone = (struct region_listener){.removed = region_gone, .arg = N};
	registry_listen(d, &N->gone);
	const struct rdma_vinfo *vi = rdma_vdev_info(N->v);
	snprintf(N->why, sizeof(N->why), "%s port %u (%s, gid %d, mtu %u)", vi->name, vi->port, vi->address,
		 vi->gid_index, vi->mtu);
	mlog_notice("rdma", "RDMA transport on %s, transport = %s, %lld QPs per peer", N->why, t,
		    (long long)d->cfg.rdma_qps_per_peer);
	arm(N);
	return 0;
}

static void peer_poll_closed(uv_handle_t *h)
{
	struct rpeer *rp = h->data;
	struct rnode *N = rp->N;
	nng_close(rp->req);
	free(rp);
	if (--N->handles == 0)
		free(N);
}

void rdma_node_stop(struct morid *d)
{
	struct rnode *N = node(d);
	if (!N || N->stopping)
		return;
	N->stopping = 1;
	/* Our jobs' transfers are ended by peers_stop; let go of them first. */
	for (int b = 0; b < HBUCKETS; b++)
		list_each(it, &N->byx.b[b])
			job_unlink(N, list_entry(it, struct job, hlink));
	list_each(it, &N->peers) {
		struct rpeer *rp = list_entry(it, struct rpeer, link);
		rp->no_rdma = 1;
		rpeer_reset(rp, MORI_ECANCELED, "shutting down");
		list_each(qt, &rp->rpcs) {
			struct rrpc *q = list_entry(qt, struct rrpc, link);
			list_del(&q->link);
			free(q);
		}
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
		if (rp->req_ok) {
			uv_close((uv_handle_t *)&rp->poll, peer_poll_closed);
		} else {
			free(rp);
		}
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
	d->rdma = NULL;
	if (--N->handles == 0)
		free(N);
}

/* For moractl nics: the port in use and the engine's counters. */
void rdma_node_info(struct morid *d, char *in_use, size_t len, const char **transport,
		    struct rdma_stats *st)
{
	struct rnode *N = node(d);
	memset(st, 0, sizeof(*st));
	*transport = d->cfg.transport;
	if (!N) {
		snprintf(in_use, len, "%s", "");
		return;
	}
	snprintf(in_use, len, "%s%s", N->on ? "" : "off: ", N->why);
	if (N->e)
		*st = *rdma_eng_stats(N->e);
}
