/* Cross-node service, the peer table: each peer's state (hello, connecting through the
 * transports, up, down with backoff), the deadline tick and end-of-turn work, and the one
 * request path to a peer's daemon (nng req0, one request on the wire at a time, the rest
 * queued, each with a deadline). Life cycle and the listener are in peers.c; client requests
 * in peer_client.c; transfer records in xfer.c; bytes in the transports (transport.h). */
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "host_port.h"
#include "invariant.h"
#include "log.h"
#include "core/mstats.h"
#include "peer_int.h"
#include "svc/nng_close.h"

static void rpc_kick(struct peer *p);
static void peer_hello(struct peer *p);
static void auth_begin(struct peer *p);

/* ---- holding the peers struct ---- */

void peers_hold(struct peers *P)
{
	P->handles++;
}

void peers_release(struct peers *P)
{
	MORI_REQUIRE(P->handles > 0, "peer service handle count underflow");
	if (--P->handles == 0)
		free(P);
}

/* ---- tick and end-of-turn work ---- */

static void on_prep(uv_prepare_t *h)
{
	struct peers *P = h->data;
	uv_prepare_stop(h);
	if (P->notif_flush)
		P->notif_flush(P);
	for (int i = 0; i < TR_MAX; i++)
		if (P->tr[i] && P->tr[i]->flush)
			P->tr[i]->flush(P);
}

void peers_dirty(struct peers *P)
{
	if (P->on && !uv_is_active((uv_handle_t *)&P->prep))
		uv_prepare_start(&P->prep, on_prep);
}

static void peers_expire(struct peers *P, uint64_t now);

static void on_tick(uv_timer_t *t)
{
	struct peers *P = t->data;
	uint64_t now = mori_now_us();
	int busy = 0;
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		if (p->rpcs.next != &p->rpcs) {
			busy = 1;
			peer_rpcs_tick(p, now);
		}
		/* A peer once used is reconnected with backoff, so that it is up when needed. */
		if (p->state == PS_DOWN && now >= p->retry_at_us)
			peer_hello(p);
		if ((p->state != PS_UP && p->state != PS_IDLE) || p->nxfers)
			busy = 1;
	}
	if (P->xfers.n && now >= P->next_deadline_us)
		xfers_expire(P, now);
	if (now >= P->next_expire_us) {
		P->next_expire_us = now + 1000000;
		peers_expire(P, now);
	}
	for (int i = 0; i < TR_MAX; i++)
		if (P->tr[i] && P->tr[i]->tick && P->tr[i]->tick(P, now))
			busy = 1;
	if (!busy && !P->xfers.n)
		uv_timer_stop(t);
}

void peers_kick(struct peers *P)
{
	if (P->on && !uv_is_active((uv_handle_t *)&P->tick))
		uv_timer_start(&P->tick, on_tick, PEER_TICK_MS, PEER_TICK_MS);
}

/* ---- peers ---- */

static void req_readable(uv_poll_t *h, int status, int events);

struct peer *peer_get(struct peers *P, const char *addr, int create)
{
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		if (strcmp(p->addr, addr) == 0) {
			if (create)
				p->client_made = 0; /* named by morid itself now (a group, a peer, a transport) */
			return p;
		}
	}
	if (!create)
		return NULL;
	uint32_t n = 0;
	list_each(it, &P->peers)
		n++;
	if (n >= PEERS_MAX) { /* peers name themselves: a table that anyone could grow is a leak */
		mlog_ratelimited(MLOG_WARN, "peer", "peer table full (%d): %s not added", PEERS_MAX, addr);
		return NULL;
	}
	char host[128];
	int port;
	if (strlen(addr) >= sizeof(((struct peer *)0)->addr) || host_port_split(addr, host, sizeof(host), &port) != 0)
		return NULL;
	struct peer *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->P = P;
	snprintf(p->addr, sizeof(p->addr), "%s", addr);
	snprintf(p->host, sizeof(p->host), "%s", host);
	LIST_INIT(&p->rpcs);
	LIST_INIT(&p->xfers);
	LIST_INIT(&p->nqs);
	LIST_INIT(&p->nwire);
	p->backoff_ms = PEER_BACKOFF_MIN_MS;
	p->handles = 1; /* the table's reference */
	peers_hold(P);  /* every peer holds the peers struct */
	list_add(&P->peers, &p->link);
	mlog_info("peer", "peer %s added", addr);
	return p;
}

static int hello_or_auth(const struct rpc *q);

static void peer_free_client_made(struct peer *p)
{
	mlog_info("peer", "peer %s dropped: made for a client's open, never reached, unused for %d ms (%s)", p->addr,
		  PEER_CLIENT_IDLE_MS, p->why[0] ? p->why : "no answer");
	p->gone = 1;
	peer_rpcs_stop(p); /* only its own hello or authentication (peer_expirable) */
	peer_close_requests(p);
	list_del(&p->link);
	peer_unref(p); /* the table's reference */
}

/* A client-made peer nobody uses that never came up: no rref, transfer, notification, request
 * of anyone's or transport state names it (those who keep a struct peer got it through
 * peer_get, which made it no longer client-made). */
static int peer_expirable(struct peer *p, uint64_t now)
{
	if (!p->client_made || p->ever_up || p->state == PS_UP || p->nxfers || p->resolving ||
	    p->nqs.next != &p->nqs || p->nwire.next != &p->nwire || now - p->used_us < PEER_CLIENT_IDLE_MS * 1000ull)
		return 0;
	for (int i = 0; i < TR_MAX; i++)
		if (p->tp[i])
			return 0;
	list_each(it, &p->rpcs)
		if (!hello_or_auth(list_entry(it, struct rpc, link)))
			return 0;
	for (int i = 0; i < HBUCKETS; i++)
		list_each(it, &p->P->refs.b[i])
			if (list_entry(it, struct rref, hlink)->p == p)
				return 0;
	return 1;
}

static void peers_expire(struct peers *P, uint64_t now)
{
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		if (peer_expirable(p, now))
			peer_free_client_made(p);
	}
}

static void peer_redial(struct peer *p);

struct peer *peer_get_client(struct peers *P, const char *addr, int *code, char *why, size_t n)
{
	uint64_t now = mori_now_us();
	struct peer *p = peer_get(P, addr, 0);
	if (!p) {
		uint32_t made = 0;
		peers_expire(P, now);
		list_each(it, &P->peers)
			made += list_entry(it, struct peer, link)->client_made;
		if (made >= (uint32_t)P->d->cfg.max_client_peers) {
			*code = MORI_EBUSY;
			snprintf(why, n, "%u peers made for clients' opens are not reached yet (max_client_peers): %s not "
				 "added; each goes %d s after its last use", made, addr, PEER_CLIENT_IDLE_MS / 1000);
			mlog_ratelimited(MLOG_WARN, "peer", "%s", why);
			return NULL;
		}
		if (!(p = peer_get(P, addr, 1))) {
			*code = MORI_EINVAL;
			snprintf(why, n, "node '%s' is not host:port (or the peer table is full)", addr);
			return NULL;
		}
		p->client_made = 1;
	} else if (p->state == PS_DOWN && p->backoff_ms > PEER_BACKOFF_MIN_MS) {
		peer_redial(p); /* a client waits now: not the background's backoff */
	}
	p->used_us = now;
	return p;
}

void peer_up(struct peer *p)
{
	p->state = PS_UP;
	p->ever_up = 1;
	p->auth_fails = 0;
	p->backoff_ms = PEER_BACKOFF_MIN_MS;
	p->why[0] = 0;
	p->probe_why[0] = 0;
	mlog_notice("peer", "peer %s up (%s, epoch %llx)", p->addr, p->node, (unsigned long long)p->epoch);
	peers_dirty(p->P);
}

void peer_down(struct peer *p, int code, const char *fmt, ...)
{
	struct peers *P = p->P;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->why, sizeof(p->why), fmt, ap);
	va_end(ap);
	if (p->state == PS_UP)
		mlog_warn("peer", "peer %s down: %s", p->addr, p->why);
	else
		mlog_info("peer", "peer %s: %s", p->addr, p->why);
	p->state = PS_DOWN;
	/* Transfers on the wire cannot be resumed, and a peer whose connection broke has most
	 * likely restarted (new epoch: its regions are gone): fail them all now rather than at
	 * their deadlines. Submissions from now on wait for the reconnect. A link that stalled
	 * (MORI_ETIMEDOUT: no answer, nothing acknowledged) is not a verdict on the transfers: they
	 * stop moving and end at their deadlines with MORI_ETIMEDOUT, naming the peer and why. */
	list_each(it, &p->xfers) {
		struct xfer *x = list_entry(it, struct xfer, plink);
		if (code != MORI_ETIMEDOUT) {
			xfer_complete(x, code, "peer %s: %s", p->addr, p->why);
			continue;
		}
		if (x->t) {
			const struct transport *t = x->t;
			x->t = NULL;
			t->cancel(x, code);
		}
		snprintf(x->stalled, sizeof(x->stalled), "%s", p->why);
	}
	for (int i = 0; i < TR_MAX; i++)
		if (P->tr[i] && P->tr[i]->peer_down)
			P->tr[i]->peer_down(p);
	p->retry_at_us = mori_now_us() + (uint64_t)p->backoff_ms * 1000;
	p->backoff_ms = p->backoff_ms * 2 > PEER_BACKOFF_MAX_MS ? PEER_BACKOFF_MAX_MS : p->backoff_ms * 2;
	peers_kick(P);
}

/* A peer is freed when its table entry, its nng poll handle and a pending address lookup have
 * all let go; the peers struct outlives every peer. */
void peer_unref(struct peer *p)
{
	struct peers *P = p->P;
	MORI_REQUIRE(p->handles > 0, "peer %s: handle count underflow", p->addr);
	if (--p->handles > 0)
		return;
	free(p);
	peers_release(P);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
	struct peer *p = g->data;
	struct peers *P = p->P;
	p->resolving = 0;
	if (p->gone || p->state != PS_CONNECTING) {
		if (res)
			uv_freeaddrinfo(res);
	} else if (status < 0 || !res) {
		peer_down(p, MORI_ECONN, "cannot resolve %s: %s", p->host, uv_strerror(status));
	} else {
		struct sockaddr_storage ss;
		memcpy(&ss, res->ai_addr, res->ai_addrlen);
		uv_freeaddrinfo(res);
		if (ss.ss_family == AF_INET)
			((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)p->data_port);
		else
			((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)p->data_port);
		for (int i = 0; i < TR_MAX && p->state == PS_CONNECTING; i++)
			if (P->tr[i] && P->tr[i]->peer_start)
				P->tr[i]->peer_start(p, (struct sockaddr *)&ss);
	}
	peer_unref(p);
}

static void hello_done(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	if (code == MORI_ECANCELED || p->state != PS_HELLO)
		return;
	if (code) {
		peer_down(p, code, "%s", msg);
		return;
	}
	const Mori__PeerHelloReply *hr = rep->body_case == MORI__REPLY__BODY_PEER_HELLO ? rep->peer_hello : NULL;
	if (!hr || !hr->epoch || !hr->data_port || hr->data_port > 65535) {
		peer_down(p, MORI_EPROTO, "bad hello reply (epoch %llx, data port %u)",
			  hr ? (unsigned long long)hr->epoch : 0ull, hr ? hr->data_port : 0);
		return;
	}
	if (p->epoch && p->epoch != hr->epoch)
		mlog_notice("peer", "peer %s restarted: epoch %llx -> %llx", p->addr,
			    (unsigned long long)p->epoch, (unsigned long long)hr->epoch);
	p->epoch = hr->epoch;
	if (hr->wall_us && p->hello_wall_us) {
		uint64_t now = mstats_wall_us();
		p->clock_rtt_us = now > p->hello_wall_us ? now - p->hello_wall_us : 0;
		p->clock_skew_us = (int64_t)(hr->wall_us - (p->hello_wall_us + p->clock_rtt_us / 2));
		p->clock_known = 1;
	}
	snprintf(p->node, sizeof(p->node), "%s", hr->node ? hr->node : "");
	p->data_port = hr->data_port;
	p->state = PS_CONNECTING;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	p->gai.data = p;
	int rc = uv_getaddrinfo(p->P->d->loop, &p->gai, on_resolved, p->host, NULL, &hints);
	if (rc < 0) {
		peer_down(p, MORI_ECONN, "cannot resolve %s: %s", p->host, uv_strerror(rc));
	} else {
		p->resolving = 1;
		p->handles++;
	}
}

static void peer_hello(struct peer *p)
{
	if (p->state == PS_HELLO || p->state == PS_CONNECTING || p->state == PS_UP)
		return;
	p->state = PS_HELLO;
	struct peers *P = p->P;
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__PeerHello ph = MORI__PEER_HELLO__INIT;
	ph.protocol_version = MORI_PROTOCOL_VERSION;
	ph.epoch = P->d->epoch;
	ph.node = P->self;
	ph.data_port = P->data_port;
	ph.wall_us = p->hello_wall_us = mstats_wall_us();
	req.body_case = MORI__REQUEST__BODY_PEER_HELLO;
	req.peer_hello = &ph;
	if (!peer_rpc(p, &req, PEER_LOOKUP_TIMEOUT_MS, hello_done, NULL))
		peer_down(p, MORI_ENOMEM, "out of memory");
}

/* Make sure a peer that work is waiting for is being connected. */
void peer_use(struct peer *p)
{
	if (p->state == PS_IDLE)
		peer_hello(p);
	else if (p->state == PS_DOWN)
		peers_kick(p->P);
}

/* ---- the request path: nng req0, one request on the wire at a time (req0 cooked) ---- */

static void peer_poll_closed(uv_handle_t *h)
{
	peer_unref(h->data);
}

/* The nng req0 dialer to p, made when the first request needs it (a peer that only contacted us
 * is listed but not dialled). Returns 0, or -1 with p->why set. */
static int peer_dial(struct peer *p)
{
	char url[160];
	int rc, fd;
	if (p->req_ok)
		return 0;
	snprintf(url, sizeof(url), "tcp://%s", p->addr);
	if ((rc = nng_req0_open(&p->req)) != 0) {
		snprintf(p->why, sizeof(p->why), "nng_req0_open: %s", nng_strerror(rc));
		return -1;
	}
	nng_socket_set_ms(p->req, NNG_OPT_RECONNMINT, PEER_BACKOFF_MIN_MS);
	nng_socket_set_ms(p->req, NNG_OPT_RECONNMAXT, PEER_BACKOFF_MAX_MS); /* its redials back off as ours do */
	nng_socket_set_ms(p->req, NNG_OPT_REQ_RESENDTIME, 1000);
	nng_socket_set_size(p->req, NNG_OPT_RECVMAXSZ, 1 << 20);
	nng_socket_set_bool(p->req, NNG_OPT_TCP_KEEPALIVE, true);
	/* Non-blocking: nng keeps redialling in the background with the backoff above. */
	if ((rc = nng_dial(p->req, url, &p->dialer, NNG_FLAG_NONBLOCK)) != 0 ||
	    (rc = nng_socket_get_int(p->req, NNG_OPT_RECVFD, &fd)) != 0) {
		snprintf(p->why, sizeof(p->why), "cannot dial %s: %s", url, nng_strerror(rc));
		nng_close(p->req);
		return -1;
	}
	p->req_ok = 1;
	p->handles++; /* the poll handle, let go in its close callback */
	uv_poll_init(p->P->d->loop, &p->req_poll, fd);
	p->req_poll.data = p;
	uv_poll_start(&p->req_poll, UV_READABLE, req_readable);
	p->req_poll_on = 1;
	return 0;
}

/* Dial p now, not at the end of its backoff (nng's dialer may wait up to PEER_BACKOFF_MAX_MS):
 * a new dialer connects at once; the old one and its pipes close. */
static void peer_redial(struct peer *p)
{
	char url[160];
	p->retry_at_us = mori_now_us();
	peers_kick(p->P);
	if (!p->req_ok)
		return;
	snprintf(url, sizeof(url), "tcp://%s", p->addr);
	nng_dialer_close(p->dialer);
	if (nng_dial(p->req, url, &p->dialer, NNG_FLAG_NONBLOCK) != 0)
		mlog_info("peer", "peer %s: cannot dial again", p->addr); /* the next peer_get_client tries */
}

/* The request path closes with the peer (daemon stopping). */
void peer_close_requests(struct peer *p)
{
	peer_probe_stop(p);
	if (p->req_ok)
		svc_nng_close(p->req, PEER_CLOSE_WAIT_MS, p->addr);
	if (p->req_poll_on)
		uv_close((uv_handle_t *)&p->req_poll, peer_poll_closed);
	p->req_ok = p->req_poll_on = 0;
}

/* q leaves the queue; done runs once, after which q is freed. */
static void rpc_end(struct peer *p, struct rpc *q, const Mori__Reply *rep, int code, const char *msg)
{
	list_del(&q->link);
	q->done(q, p, rep, code, msg);
	free(q->msg);
	free(q);
}

/* q for req (packed now, its id and deadline set), on no queue yet. */
static struct rpc *rpc_alloc(struct peers *P, Mori__Request *req, uint32_t timeout_ms, rpc_done_fn done, void *arg)
{
	struct rpc *q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->id = req->id = ++P->next_rpc;
	q->len = mori__request__get_packed_size(req);
	if (!(q->msg = malloc(q->len ? q->len : 1))) {
		free(q);
		return NULL;
	}
	mori__request__pack(req, q->msg);
	q->timeout_ms = timeout_ms;
	q->deadline_us = mori_now_us() + timeout_ms * 1000ull;
	q->done = done;
	q->arg = arg;
	return q;
}

/* q is for the request path: dial p if need be (a failed dial fails q at the next tick, with the reason). */
static void rpc_dial(struct peer *p, struct rpc *q)
{
	if (peer_dial(p) != 0) {
		mlog_warn("peer", "%s: %s", p->addr, p->why);
		q->deadline_us = 0;
	}
}

static struct rpc *rpc_new(struct peer *p, Mori__Request *req, uint32_t timeout_ms, rpc_done_fn done, void *arg)
{
	struct rpc *q = rpc_alloc(p->P, req, timeout_ms, done, arg);
	if (q)
		rpc_dial(p, q);
	return q;
}

/* q at the end of p's request path queue. */
static struct rpc *rpc_queue(struct peer *p, struct rpc *q)
{
	list_add(&p->rpcs, &q->link);
	peers_kick(p->P);
	if (p->rpcs.next == &q->link)
		rpc_kick(p);
	return q;
}

struct rpc *peer_rpc(struct peer *p, Mori__Request *req, uint32_t timeout_ms, rpc_done_fn done, void *arg)
{
	struct rpc *q = rpc_new(p, req, timeout_ms, done, arg);
	return q ? rpc_queue(p, q) : NULL;
}

/* Like peer_rpc, on a transport's data path when p's is up (no nng thread on the way: MORI-SHMEM's
 * proxy atomics and signals), else on the request path. Not for requests that must stay in order
 * with the request path's (each path is in order on its own). */
struct rpc *peer_rpc_fast(struct peer *p, Mori__Request *req, uint32_t timeout_ms, rpc_done_fn done, void *arg)
{
	struct peers *P = p->P;
	struct rpc *q = rpc_alloc(P, req, timeout_ms, done, arg);
	if (!q)
		return NULL;
	for (int i = 0; i < TR_MAX && p->state == PS_UP; i++) {
		uint32_t lanes;
		const struct transport *t = P->tr[i];
		if (t && t->rpc && t->carries && t->carries(p, &lanes) && t->rpc(p, q))
			return q;
	}
	rpc_dial(p, q); /* no data path took it (a declining transport keeps nothing of q) */
	return rpc_queue(p, q);
}

/* ---- authentication of the request path (the exchange: auth.h, peer_auth.c) ---- */

/* p did not prove the key, or refused ours: every request waiting for it fails, and so does p. */
static void auth_fail(struct peer *p, const char *why)
{
	char m[400];
	snprintf(m, sizeof(m), "peer %s failed authentication: %s", p->addr, why);
	count(p->P->d, C_PEER_AUTH_REFUSED, 1);
	/* the first at warning, then one line per PEER_AUTH_LOG_S with the count: it is retried
	 * (with backoff) for as long as both run */
	unsigned long long now_s = mori_log_now_s();
	if (++p->auth_fails == 1 || now_s - p->auth_log_s >= PEER_AUTH_LOG_S) {
		mlog_warn("peer", "%s (%u times since it was last up; retried with backoff up to %d s)", m, p->auth_fails,
			  PEER_BACKOFF_MAX_MS / 1000);
		p->auth_log_s = now_s;
	}
	p->auth = PA_NONE;
	list_each(it, &p->rpcs) {
		struct rpc *q = list_entry(it, struct rpc, link);
		if (!q->sent)
			rpc_end(p, q, NULL, MORI_EPERM, m);
	}
	if (p->state != PS_DOWN && p->state != PS_IDLE)
		peer_down(p, MORI_EPERM, "authentication failed: %s", why);
}

/* An authentication step that never got an answer (the peer is unreachable, or silent): no
 * verdict on the key; what waited behind it fails the way it would have alone. */
static int auth_unanswered(struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	if (rep || (code != MORI_ECONN && code != MORI_ETIMEDOUT))
		return 0;
	p->auth = PA_NONE;
	list_each(it, &p->rpcs) {
		struct rpc *q = list_entry(it, struct rpc, link);
		if (!q->sent)
			rpc_end(p, q, NULL, code, msg);
	}
	return 1;
}

static void auth_push(struct peer *p, Mori__PeerAuth *pa, int step, rpc_done_fn done)
{
	Mori__Request req = MORI__REQUEST__INIT;
	req.body_case = MORI__REQUEST__BODY_PEER_AUTH;
	req.peer_auth = pa;
	struct rpc *q = rpc_new(p, &req, PEER_LOOKUP_TIMEOUT_MS, done, NULL);
	if (!q) {
		p->auth = PA_NONE;
		return; /* the tick retries */
	}
	q->auth_step = step;
	list_add(p->rpcs.next, &q->link); /* ahead of every request waiting */
	peers_kick(p->P);
}

static void auth_step2_done(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	if (code == MORI_ECANCELED || auth_unanswered(p, rep, code, msg))
		return;
	if (code) {
		auth_fail(p, msg);
		return;
	}
	p->auth = PA_DONE;
	p->auth_pipe = p->last_pipe;
	mlog_info("peer", "authenticated to peer %s", p->addr);
}

/* The listener was told its proof failed (it refuses us in turn): nothing to learn from its answer. */
static void auth_refusal_sent(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
}

static void auth_step1_done(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	char why[200];
	uint8_t mac[AUTH_MAC_BYTES];
	Mori__PeerAuth pa = MORI__PEER_AUTH__INIT;
	if (code == MORI_ECANCELED || auth_unanswered(p, rep, code, msg))
		return;
	if (code == MORI_ENOTSUP) {
		auth_fail(p, "it has no cluster key (it runs with unauthenticated peers)");
		return;
	}
	if (code) {
		auth_fail(p, msg);
		return;
	}
	if (peer_auth_step2(p->P, p->auth_nc, rep, &pa, mac, why, sizeof(why)) != 0) {
		auth_fail(p, why);
		auth_push(p, &pa, 2, auth_refusal_sent); /* after auth_fail: it ends what is not sent */
		return;
	}
	auth_push(p, &pa, 2, auth_step2_done);
}

static void auth_begin(struct peer *p)
{
	Mori__PeerAuth pa = MORI__PEER_AUTH__INIT;
	p->auth = PA_BUSY;
	peer_auth_step1(p->P, &pa, p->auth_nc);
	auth_push(p, &pa, 1, auth_step1_done);
}

void peer_rpc_drop(struct peer *p, int kind, int64_t key)
{
	list_each(it, &p->rpcs) {
		struct rpc *q = list_entry(it, struct rpc, link);
		if (!q->sent && q->kind == kind && (key < 0 || q->key == key)) {
			list_del(&q->link);
			free(q->msg);
			free(q);
		}
	}
}

static void rpc_kick(struct peer *p)
{
	if (p->rpcs.next == &p->rpcs)
		return;
	struct rpc *q = list_entry(p->rpcs.next, struct rpc, link);
	if (q->sent || !p->req_ok)
		return;
	if (p->P->key.on && !q->auth_step && p->auth != PA_DONE) {
		if (p->auth == PA_NONE)
			auth_begin(p);
		q = list_entry(p->rpcs.next, struct rpc, link);
		if (!q->auth_step)
			return;
	}
	p->rpc_try_us = mori_now_us();
	nng_msg *m;
	if (nng_msg_alloc(&m, q->len) != 0)
		return; /* retried at the next tick */
	memcpy(nng_msg_body(m), q->msg, q->len);
	if (nng_sendmsg(p->req, m, NNG_FLAG_NONBLOCK) != 0) {
		nng_msg_free(m); /* no connection yet (nng redials): the tick retries */
		return;
	}
	q->sent = 1;
}

/* A client waits for an answer from p (its request is queued): worth finding out why p is silent. */
static int client_waits(struct peer *p)
{
	list_each(it, &p->rpcs)
		if (list_entry(it, struct rpc, link)->c)
			return 1;
	return 0;
}

void peer_rpcs_tick(struct peer *p, uint64_t now)
{
	if (p->rpcs.next == &p->rpcs)
		return;
	/* requests queued behind the head (one is on the wire at a time) keep their own deadlines */
	for (struct list *it = p->rpcs.next->next, *nx; it != &p->rpcs; it = nx) {
		struct rpc *w = list_entry(it, struct rpc, link);
		nx = it->next;
		if (!w->sent && !w->auth_step && now >= w->deadline_us) {
			char m[600];
			if (p->state == PS_UP)
				snprintf(m, sizeof(m), "peer daemon %s did not take the request within %u ms (requests "
					 "before it were still waiting for answers)", p->addr, w->timeout_ms);
			else /* as the head's: the probe's reason, then the link's */
				snprintf(m, sizeof(m), "cannot reach peer daemon %s within %u ms%s%s%s%s%s", p->addr,
					 w->timeout_ms, p->probe_why[0] ? " (" : "", p->probe_why, p->probe_why[0] ? ")" : "",
					 p->why[0] && (!p->probe_why[0] || !strstr(p->why, p->probe_why)) ? ": " : "",
					 p->why[0] && (!p->probe_why[0] || !strstr(p->why, p->probe_why)) ? p->why : "");
			rpc_end(p, w, NULL, p->state == PS_UP ? MORI_ETIMEDOUT : MORI_ECONN, m);
			nx = p->rpcs.next->next; /* done may have queued or ended others: walk again */
		}
	}
	if (p->rpcs.next == &p->rpcs)
		return;
	struct rpc *q = list_entry(p->rpcs.next, struct rpc, link);
	if (now >= q->deadline_us) {
		char m[600];
		if (q->sent)
			snprintf(m, sizeof(m), "peer daemon %s did not answer within %u ms", p->addr, q->timeout_ms);
		else { /* the hello's own failure becomes p->why: not nested in itself; the
			* probe's reason once (p->why, the hello's failure, may carry it already) */
			int pw = p->probe_why[0] && (hello_or_auth(q) || !strstr(p->why, p->probe_why));
			snprintf(m, sizeof(m), "cannot reach peer daemon %s within %u ms%s%s%s%s%s", p->addr,
				 q->timeout_ms, pw ? " (" : "", pw ? p->probe_why : "", pw ? ")" : "",
				 p->why[0] && !hello_or_auth(q) ? ": " : "", hello_or_auth(q) ? "" : p->why);
		}
		rpc_end(p, q, NULL, q->sent ? MORI_ETIMEDOUT : MORI_ECONN, m);
		rpc_kick(p);
	} else if (!q->sent) {
		if (now - p->rpc_try_us >= RPC_RETRY_MS * 1000ull)
			rpc_kick(p);
		if (!q->sent && client_waits(p))
			peer_probe(p, q->deadline_us - q->timeout_ms * 1000ull, now);
	}
}

/* q is p's own hello or an authentication step (no client waits for it). */
static int hello_or_auth(const struct rpc *q)
{
	return q->done == hello_done || q->auth_step;
}

void peer_rpcs_stop(struct peer *p)
{
	list_each(it, &p->rpcs)
		rpc_end(p, list_entry(it, struct rpc, link), NULL, MORI_ECANCELED, "daemon stopping");
}

static void req_readable(uv_poll_t *h, int status, int events)
{
	struct peer *p = h->data;
	for (int i = 0; i < 32 && p->req_ok; i++) {
		nng_msg *m;
		if (nng_recvmsg(p->req, &m, NNG_FLAG_NONBLOCK) != 0)
			return;
		Mori__Reply *rep = mori__reply__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
		p->last_pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(m));
		nng_msg_free(m);
		if (!rep) {
			mlog_info("peer", "%s: malformed reply", p->addr);
			continue;
		}
		struct rpc *q = p->rpcs.next != &p->rpcs ? list_entry(p->rpcs.next, struct rpc, link) : NULL;
		if (!q || !q->sent || rep->id != q->id) {
			mori__reply__free_unpacked(rep, NULL); /* an answer to an abandoned request */
			continue;
		}
		if (rep->code == MORI_EPERM && rep->body_case == MORI__REPLY__BODY_PEER_AUTH && rep->peer_auth->required &&
		    !q->auth_step && p->P->key.on && ++q->auth_retries <= 2) {
			/* a new connection (nng redialled) that has not authenticated: do, then resend */
			mori__reply__free_unpacked(rep, NULL);
			q->sent = 0;
			if (p->auth == PA_DONE)
				p->auth = PA_NONE;
			rpc_kick(p);
			continue;
		}
		char msg[300];
		snprintf(msg, sizeof(msg), "peer %s: %s", p->addr, rep->message ? rep->message : "");
		rpc_end(p, q, rep, rep->code, msg);
		mori__reply__free_unpacked(rep, NULL);
		rpc_kick(p);
	}
}
