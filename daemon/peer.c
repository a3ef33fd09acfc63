/* Cross-node service, control side: the peer table, nng tcp between daemons (rep0 listener at
 * `listen`, one req0 dialer per peer, both driven from the loop through nng's receive fds),
 * remote opens, prepared lists, listings, the deadline tick and reconnects with backoff.
 * The data path is in peer_stream.c (TCP streams) and peer_xfer.c (transfers). */
#include "peer.h"

#include <errno.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "region.h"
#include "peer_int.h"
#include "rdma.h"

enum rpc_kind { RPC_HELLO, RPC_LOOKUP, RPC_OPEN };

struct rpc {
	struct list link;
	int kind, sent;
	uint64_t id;
	struct client *c;         /* who waits for the answer; NULL: nobody (hello, or gone) */
	uint64_t creq;            /* the client's request id, kept for the deferred reply */
	uint64_t deadline_us;
	char name[128];
	Mori__Handle h;
	char hnode[128];
};

static void rpc_kick(struct peer *p);
static void peer_hello(struct peer *p);

static const char *state_name(enum pstate s)
{
	switch (s) {
	case PS_IDLE: return "idle";
	case PS_HELLO: return "hello";
	case PS_CONNECTING: return "connecting";
	case PS_UP: return "up";
	case PS_DOWN: return "down";
	}
	return "?";
}

/* ---- tick and end-of-turn work ---- */

static void on_prep(uv_prepare_t *h)
{
	struct peers *P = h->data;
	uv_prepare_stop(h);
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		if (p->pump_needed) {
			p->pump_needed = 0;
			peer_pump(p);
		}
	}
	streams_flush_dirty(P);
}

void peers_dirty(struct peers *P)
{
	if (P->on && !uv_is_active((uv_handle_t *)&P->prep))
		uv_prepare_start(&P->prep, on_prep);
}

static void rpc_free(struct rpc *q)
{
	list_del(&q->link);
	free(q);
}

static void rpc_finish(struct peer *p, struct rpc *q, int code, const char *msg, const Mori__Handle *h);

static void on_tick(uv_timer_t *t)
{
	struct peers *P = t->data;
	uint64_t now = mori_now_us();
	int busy = 0;
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		if (p->rpcs.next != &p->rpcs) {
			struct rpc *q = list_entry(p->rpcs.next, struct rpc, link);
			busy = 1;
			if (now >= q->deadline_us) {
				char m[300];
				if (q->sent)
					snprintf(m, sizeof(m), "peer daemon %s did not answer within %d ms", p->addr,
						 PEER_LOOKUP_TIMEOUT_MS);
				else
					snprintf(m, sizeof(m), "cannot reach peer daemon %s within %d ms", p->addr,
						 PEER_LOOKUP_TIMEOUT_MS);
				rpc_finish(p, q, q->sent ? MORI_ETIMEDOUT : MORI_ECONN, m, NULL);
				rpc_kick(p);
			} else if (!q->sent && now - p->rpc_try_us >= RPC_RETRY_MS * 1000ull) {
				rpc_kick(p);
			}
		}
		/* A peer once used is reconnected with backoff, so that it is up when needed. */
		if (p->state == PS_DOWN && now >= p->retry_at_us)
			peer_hello(p);
		if (p->state != PS_UP && p->state != PS_IDLE)
			busy = 1;
		if (p->nxfers)
			busy = 1;
	}
	if (P->xfers.n && now >= P->next_deadline_us)
		xfers_expire(P, now);
	if (P->inbound.n)
		inb_expire(P, now);
	if (!busy && !P->xfers.n && !P->inbound.n)
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
		if (strcmp(p->addr, addr) == 0)
			return p;
	}
	if (!create)
		return NULL;
	char host[128];
	int port;
	if (strlen(addr) >= sizeof(((struct peer *)0)->addr) || config_split_addr(addr, host, sizeof(host), &port) != 0)
		return NULL;
	struct peer *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->P = P;
	snprintf(p->addr, sizeof(p->addr), "%s", addr);
	snprintf(p->host, sizeof(p->host), "%s", host);
	LIST_INIT(&p->rpcs);
	LIST_INIT(&p->queue);
	LIST_INIT(&p->xfers);
	p->backoff_ms = PEER_BACKOFF_MIN_MS;
	p->out = calloc(16, sizeof(*p->out)); /* data_streams is at most 16 */
	if (!p->out) {
		free(p);
		return NULL;
	}
	p->handles = 1; /* the table's reference */
	P->handles++;   /* every peer holds the peers struct */
	list_add(&P->peers, &p->link);
	mlog_info("peer", "peer %s added", addr);
	return p;
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
	nng_socket_set_ms(p->req, NNG_OPT_RECONNMAXT, PEER_BACKOFF_MAX_MS);
	nng_socket_set_ms(p->req, NNG_OPT_REQ_RESENDTIME, 1000);
	nng_socket_set_size(p->req, NNG_OPT_RECVMAXSZ, 1 << 20);
	nng_socket_set_bool(p->req, NNG_OPT_TCP_KEEPALIVE, true);
	/* Non-blocking: nng keeps redialling in the background with the backoff above. */
	if ((rc = nng_dial(p->req, url, NULL, NNG_FLAG_NONBLOCK)) != 0 ||
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

void peer_up(struct peer *p)
{
	p->state = PS_UP;
	p->backoff_ms = PEER_BACKOFF_MIN_MS;
	p->why[0] = 0;
	mlog_notice("peer", "peer %s up (%s, epoch %llx, %d data streams)", p->addr, p->node,
		    (unsigned long long)p->epoch, p->nready);
	p->pump_needed = 1;
	peers_dirty(p->P);
}

static void close_out_streams(struct peer *p)
{
	p->conn_gen++;
	for (int i = 0; i < p->nout; i++) {
		if (p->out[i])
			stream_close(p->out[i]);
		p->out[i] = NULL;
	}
	p->nout = p->nready = 0;
}

void peer_down(struct peer *p, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->why, sizeof(p->why), fmt, ap);
	va_end(ap);
	if (p->state == PS_UP)
		mlog_warn("peer", "peer %s down: %s", p->addr, p->why);
	else
		mlog_info("peer", "peer %s: %s", p->addr, p->why);
	p->state = PS_DOWN;
	close_out_streams(p);
	/* Transfers on the wire cannot be resumed, and a peer whose connection broke has most
	 * likely restarted (new epoch: its regions are gone): fail them all now rather than at
	 * their deadlines. Submissions from now on wait for the reconnect. */
	list_each(it, &p->xfers)
		xfer_complete(list_entry(it, struct xfer, plink), code, "peer %s: %s", p->addr, p->why);
	p->retry_at_us = mori_now_us() + (uint64_t)p->backoff_ms * 1000;
	p->backoff_ms = p->backoff_ms * 2 > PEER_BACKOFF_MAX_MS ? PEER_BACKOFF_MAX_MS : p->backoff_ms * 2;
	peers_kick(p->P);
}

/* A peer is freed when its table entry, its nng poll handle and a pending address lookup have
 * all let go; the peers struct outlives every peer. */
static void peer_unref(struct peer *p)
{
	struct peers *P = p->P;
	if (--p->handles > 0)
		return;
	free(p->out);
	free(p);
	if (--P->handles == 0)
		peers_free(P);
}

static void resolved(struct peer *p, int status, struct addrinfo *res);

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
	struct peer *p = g->data;
	p->resolving = 0;
	resolved(p, status, res);
	peer_unref(p);
}

static void resolved(struct peer *p, int status, struct addrinfo *res)
{
	if (p->gone || p->state != PS_CONNECTING) {
		if (res)
			uv_freeaddrinfo(res);
		return;
	}
	if (status < 0 || !res) {
		peer_down(p, MORI_ECONN, "cannot resolve %s: %s", p->host, uv_strerror(status));
		return;
	}
	struct sockaddr_storage ss;
	memcpy(&ss, res->ai_addr, res->ai_addrlen);
	uv_freeaddrinfo(res);
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)p->data_port);
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)p->data_port);
	streams_connect(p, (struct sockaddr *)&ss);
}

static void hello_done(struct peer *p, const Mori__PeerHelloReply *hr)
{
	if (p->state != PS_HELLO)
		return;
	if (!hr->epoch || !hr->data_port || hr->data_port > 65535) {
		peer_down(p, MORI_EPROTO, "bad hello reply (epoch %llx, data port %u)",
			  (unsigned long long)hr->epoch, hr->data_port);
		return;
	}
	if (p->epoch && p->epoch != hr->epoch)
		mlog_notice("peer", "peer %s restarted: epoch %llx -> %llx", p->addr,
			    (unsigned long long)p->epoch, (unsigned long long)hr->epoch);
	p->epoch = hr->epoch;
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

/* ---- nng requests to a peer: one on the wire at a time (req0 cooked), the rest queued ---- */

static struct rpc *rpc_new(struct peer *p, int kind, struct client *c, uint64_t creq)
{
	struct rpc *q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->kind = kind;
	q->c = c;
	q->creq = creq;
	q->id = ++p->P->next_rpc;
	q->deadline_us = mori_now_us() + PEER_LOOKUP_TIMEOUT_MS * 1000ull;
	mori__handle__init(&q->h);
	q->h.node = q->hnode;
	return q;
}

/* Queue a filled-in request; it goes on the wire now if nothing is ahead of it. */
static void rpc_queue(struct peer *p, struct rpc *q)
{
	if (peer_dial(p) != 0) {
		mlog_warn("peer", "%s: %s", p->addr, p->why);
		q->deadline_us = 0; /* fails at the next tick, with the reason */
	}
	list_add(&p->rpcs, &q->link);
	peers_kick(p->P);
	if (p->rpcs.next == &q->link)
		rpc_kick(p);
}

static void rpc_kick(struct peer *p)
{
	if (p->rpcs.next == &p->rpcs)
		return;
	struct rpc *q = list_entry(p->rpcs.next, struct rpc, link);
	if (q->sent || !p->req_ok)
		return;
	p->rpc_try_us = mori_now_us();
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__PeerHello ph = MORI__PEER_HELLO__INIT;
	Mori__MemLookup ml = MORI__MEM_LOOKUP__INIT;
	Mori__MemOpen mo = MORI__MEM_OPEN__INIT;
	req.id = q->id;
	switch (q->kind) {
	case RPC_HELLO:
		ph.protocol_version = MORI_PROTOCOL_VERSION;
		ph.epoch = p->P->d->epoch;
		ph.node = p->P->self;
		ph.data_port = p->P->data_port;
		req.body_case = MORI__REQUEST__BODY_PEER_HELLO;
		req.peer_hello = &ph;
		break;
	case RPC_LOOKUP:
		ml.name = q->name;
		ml.node = "";
		req.body_case = MORI__REQUEST__BODY_MEM_LOOKUP;
		req.mem_lookup = &ml;
		break;
	default:
		mo.handle = &q->h;
		req.body_case = MORI__REQUEST__BODY_MEM_OPEN;
		req.mem_open = &mo;
		break;
	}
	size_t len = mori__request__get_packed_size(&req);
	nng_msg *m;
	if (nng_msg_alloc(&m, len) != 0)
		return; /* retried at the next tick */
	mori__request__pack(&req, nng_msg_body(m));
	int rc = nng_sendmsg(p->req, m, NNG_FLAG_NONBLOCK);
	if (rc != 0) {
		nng_msg_free(m); /* no connection yet (nng redials): the tick retries */
		return;
	}
	q->sent = 1;
}

static void rpc_finish(struct peer *p, struct rpc *q, int code, const char *msg, const Mori__Handle *h)
{
	struct peers *P = p->P;
	if (q->kind == RPC_HELLO) {
		rpc_free(q);
		if (code)
			peer_down(p, code, "%s", msg);
		return;
	}
	struct client *c = q->c;
	if (!c) {
		rpc_free(q);
		return;
	}
	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	rep.id = q->creq;
	if (code) {
		reply_error(&rep, code, "%s", msg);
	} else if (!h || !h->region_id || !h->epoch) {
		reply_error(&rep, MORI_EPROTO, "peer %s answered without a handle", p->addr);
	} else {
		struct rref *f = calloc(1, sizeof(*f));
		Mori__MemOpenReply *o = rctx_alloc(&r, sizeof(*o));
		Mori__Handle *hh = rctx_alloc(&r, sizeof(*hh));
		if (!f || !o || !hh) {
			free(f);
			reply_error(&rep, MORI_ENOMEM, "out of memory");
		} else {
			f->id = REF_TAG | ++P->next_ref;
			f->c = c;
			f->p = p;
			f->epoch = h->epoch;
			f->region = h->region_id;
			f->gen = h->generation;
			f->kind = h->kind;
			f->size = h->size;
			htab_add(&P->refs, f->id, &f->hlink);
			mori__mem_open_reply__init(o);
			mori__handle__init(hh);
			hh->node = rctx_strdup(&r, h->node && h->node[0] ? h->node : p->addr);
			hh->epoch = h->epoch;
			hh->region_id = h->region_id;
			hh->generation = h->generation;
			hh->size = h->size;
			hh->kind = h->kind;
			o->handle = hh;
			o->remote = 1;
			o->remote_ref = f->id;
			rep.body_case = MORI__REPLY__BODY_MEM_OPEN;
			rep.mem_open = o;
			mlog_debug("peer", "client %llu opened %s region %llu as ref %llx", (unsigned long long)c->id,
				   p->addr, (unsigned long long)h->region_id, (unsigned long long)f->id);
		}
	}
	client_reply(c, &rep, &r);
	rctx_free(&r);
	rpc_free(q);
}

static void req_readable(uv_poll_t *h, int status, int events)
{
	struct peer *p = h->data;
	for (int i = 0; i < 32; i++) {
		nng_msg *m;
		if (nng_recvmsg(p->req, &m, NNG_FLAG_NONBLOCK) != 0)
			return;
		Mori__Reply *rep = mori__reply__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
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
		char msg[300];
		snprintf(msg, sizeof(msg), "peer %s: %s", p->addr, rep->message ? rep->message : "");
		const Mori__Handle *hd = NULL;
		if (rep->code == 0) {
			if (q->kind == RPC_HELLO && rep->body_case == MORI__REPLY__BODY_PEER_HELLO) {
				rpc_free(q);
				hello_done(p, rep->peer_hello);
				mori__reply__free_unpacked(rep, NULL);
				rpc_kick(p);
				continue;
			}
			if (rep->body_case == MORI__REPLY__BODY_MEM_LOOKUP && rep->mem_lookup)
				hd = rep->mem_lookup->handle;
			else if (rep->body_case == MORI__REPLY__BODY_MEM_OPEN && rep->mem_open)
				hd = rep->mem_open->handle;
		}
		rpc_finish(p, q, rep->code ? rep->code : (hd ? 0 : MORI_EPROTO), msg, hd);
		mori__reply__free_unpacked(rep, NULL);
		rpc_kick(p);
	}
}

static void peer_hello(struct peer *p)
{
	if (p->state == PS_HELLO || p->state == PS_CONNECTING || p->state == PS_UP)
		return;
	p->state = PS_HELLO;
	struct rpc *q = rpc_new(p, RPC_HELLO, NULL, 0);
	if (!q)
		peer_down(p, MORI_ENOMEM, "out of memory");
	else
		rpc_queue(p, q);
}

/* Make sure a peer that work is waiting for is being connected. */
void peer_use(struct peer *p)
{
	if (p->state == PS_IDLE)
		peer_hello(p);
	else if (p->state == PS_DOWN)
		peers_kick(p->P);
}

/* ---- the listener side: requests from other daemons ---- */

static void serve_one(struct peers *P, nng_msg *m)
{
	struct morid *d = P->d;
	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	Mori__Request *req = mori__request__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
	if (!req) {
		reply_error(&rep, MORI_EPROTO, "malformed request (%zu bytes)", nng_msg_len(m));
	} else {
		rep.id = req->id;
		switch (req->body_case) {
		case MORI__REQUEST__BODY_PEER_HELLO: {
			Mori__PeerHello *ph = req->peer_hello;
			if (ph->protocol_version != MORI_PROTOCOL_VERSION) {
				reply_error(&rep, MORI_EVERSION, "peer protocol %u, this daemon speaks %u",
					    ph->protocol_version, MORI_PROTOCOL_VERSION);
				break;
			}
			Mori__PeerHelloReply *hr = rctx_alloc(&r, sizeof(*hr));
			if (!hr) {
				reply_error(&rep, MORI_ENOMEM, "out of memory");
				break;
			}
			mori__peer_hello_reply__init(hr);
			hr->epoch = d->epoch;
			hr->node = P->self;
			hr->data_port = P->data_port;
			rep.body_case = MORI__REPLY__BODY_PEER_HELLO;
			rep.peer_hello = hr;
			/* Known for moractl; connected only when a client here needs it. */
			if (ph->node && ph->node[0] && strcmp(ph->node, P->self) != 0)
				peer_get(P, ph->node, 1);
			break;
		}
		case MORI__REQUEST__BODY_MEM_LOOKUP: {
			struct region *g = region_lookup(d, req->mem_lookup->name);
			if (!g) {
				reply_error(&rep, MORI_EUNREACH, "name '%s' is not published at %s",
					    req->mem_lookup->name, P->self);
				break;
			}
			Mori__MemLookupReply *lr = rctx_alloc(&r, sizeof(*lr));
			if (!lr) {
				reply_error(&rep, MORI_ENOMEM, "out of memory");
				break;
			}
			mori__mem_lookup_reply__init(lr);
			lr->handle = region_handle(d, g, &r);
			rep.body_case = MORI__REPLY__BODY_MEM_LOOKUP;
			rep.mem_lookup = lr;
			break;
		}
		case MORI__REQUEST__BODY_MEM_OPEN: {
			Mori__Handle *h = req->mem_open->handle;
			struct region *g = NULL;
			if (!h) {
				reply_error(&rep, MORI_EPROTO, "open without a handle");
				break;
			}
			if (h->epoch != d->epoch) {
				reply_error(&rep, MORI_ESTALE, "handle is from epoch %llx of %s, which restarted (now %llx)",
					    (unsigned long long)h->epoch, P->self, (unsigned long long)d->epoch);
				break;
			}
			if (!(g = region_find(d, h->region_id)) || g->gen != h->generation) {
				reply_error(&rep, MORI_ESTALE, "region %llu is no longer registered at %s",
					    (unsigned long long)h->region_id, P->self);
				break;
			}
			Mori__MemOpenReply *o = rctx_alloc(&r, sizeof(*o));
			if (!o) {
				reply_error(&rep, MORI_ENOMEM, "out of memory");
				break;
			}
			mori__mem_open_reply__init(o);
			o->handle = region_handle(d, g, &r);
			rep.body_case = MORI__REPLY__BODY_MEM_OPEN;
			rep.mem_open = o;
			break;
		}
		default:
			if (rdma_serve(d, req, &rep, &r)) /* RdmaConnect, RdmaRegion (issue 7) */
				break;
			reply_error(&rep, MORI_EPROTO, "request %d is not served to peer daemons", (int)req->body_case);
		}
	}
	size_t len = mori__reply__get_packed_size(&rep);
	nng_msg_clear(m);
	if (nng_msg_realloc(m, len) == 0) {
		mori__reply__pack(&rep, nng_msg_body(m));
		if (nng_sendmsg(P->rep, m, NNG_FLAG_NONBLOCK) != 0)
			nng_msg_free(m);
	} else {
		nng_msg_free(m);
	}
	rctx_free(&r);
	if (req)
		mori__request__free_unpacked(req, NULL);
}

static void rep_readable(uv_poll_t *h, int status, int events)
{
	struct peers *P = h->data;
	for (int i = 0; i < 32; i++) {
		nng_msg *m;
		if (nng_recvmsg(P->rep, &m, NNG_FLAG_NONBLOCK) != 0)
			return;
		serve_one(P, m);
	}
}

/* ---- start and stop ---- */

static void handle_closed(uv_handle_t *h)
{
	struct peers *P = h->data;
	if (--P->handles == 0)
		peers_free(P);
}

static void peer_handle_closed(uv_handle_t *h)
{
	peer_unref(h->data);
}

int peers_start(struct morid *d)
{
	struct peers *P = calloc(1, sizeof(*P));
	if (!P)
		return -1;
	d->peers = P;
	P->d = d;
	LIST_INIT(&P->peers);
	LIST_INIT(&P->accepted);
	LIST_INIT(&P->dirty);
	htab_init(&P->xfers);
	htab_init(&P->byuser);
	htab_init(&P->inbound);
	htab_init(&P->refs);
	P->next_deadline_us = UINT64_MAX;
	uv_timer_init(d->loop, &P->tick);
	uv_prepare_init(d->loop, &P->prep);
	P->tick.data = P->prep.data = P;
	P->handles = 2;
	if (!d->cfg.listen[0]) {
		mlog_info("peer", "no listen address: cross-node service off");
		return 0;
	}
	snprintf(P->self, sizeof(P->self), "%s", d->cfg.advertise[0] ? d->cfg.advertise : d->cfg.listen);
	char host[128], url[160];
	int port, rc, fd;
	if (config_split_addr(d->cfg.listen, host, sizeof(host), &port) != 0) {
		mlog_err("peer", "listen = '%s' is not host:port", d->cfg.listen);
		return -1;
	}
	if (stream_listen(P, host) != 0)
		return -1;
	snprintf(url, sizeof(url), "tcp://%s", d->cfg.listen);
	if ((rc = nng_rep0_open(&P->rep)) != 0) {
		mlog_err("peer", "nng_rep0_open: %s", nng_strerror(rc));
		return -1;
	}
	P->rep_ok = 1;
	nng_socket_set_size(P->rep, NNG_OPT_RECVMAXSZ, 1 << 20);
	if ((rc = nng_listen(P->rep, url, NULL, 0)) != 0 ||
	    (rc = nng_socket_get_int(P->rep, NNG_OPT_RECVFD, &fd)) != 0) {
		mlog_err("peer", "cannot listen on %s: %s", url, nng_strerror(rc));
		return -1;
	}
	uv_poll_init(d->loop, &P->rep_poll, fd);
	P->rep_poll.data = P;
	uv_poll_start(&P->rep_poll, UV_READABLE, rep_readable);
	P->handles++;
	P->on = 1;
	mlog_notice("peer", "peer listener %s (node %s, data port %u)", url, P->self, P->data_port);
	/* Configured peers are connected now; the rest on first use. */
	peers_reload(d);
	return 0;
}

void peers_reload(struct morid *d)
{
	struct peers *P = d->peers;
	if (!P || !P->on)
		return;
	char list[sizeof(d->cfg.peers)];
	snprintf(list, sizeof(list), "%s", d->cfg.peers);
	for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		struct peer *p;
		if (strcmp(tok, P->self) == 0)
			continue;
		if (!(p = peer_get(P, tok, 1)))
			mlog_warn("peer", "peers: '%s' is not host:port, skipped", tok);
		else
			peer_use(p);
	}
}

void peers_stop(struct morid *d)
{
	struct peers *P = d->peers;
	if (!P)
		return;
	/* Clients were destroyed first (peer_client_gone). What is left is ours. */
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		list_each(xt, &p->xfers)
			xfer_complete(list_entry(xt, struct xfer, plink), MORI_ECANCELED, "daemon stopping");
		close_out_streams(p);
		list_each(qt, &p->rpcs)
			rpc_free(list_entry(qt, struct rpc, link));
		p->gone = 1;
		if (p->resolving)
			uv_cancel((uv_req_t *)&p->gai); /* its callback still comes, then lets go */
		if (p->req_ok)
			nng_close(p->req);
		list_del(&p->link);
		if (p->req_poll_on)
			uv_close((uv_handle_t *)&p->req_poll, peer_handle_closed);
		peer_unref(p); /* the table's reference */
	}
	list_each(it, &P->accepted)
		stream_close(list_entry(it, struct stream, link));
	inb_expire(P, UINT64_MAX);
	for (int i = 0; i < HBUCKETS; i++)
		list_each(it, &P->refs.b[i])
			free(list_entry(it, struct rref, hlink));
	if (P->lsn_on) {
		P->handles++;
		uv_close((uv_handle_t *)&P->lsn, handle_closed);
	}
	if (P->rep_ok) {
		if (P->on)
			uv_close((uv_handle_t *)&P->rep_poll, handle_closed);
		nng_close(P->rep);
	}
	P->on = 0;
	uv_close((uv_handle_t *)&P->tick, handle_closed);
	uv_close((uv_handle_t *)&P->prep, handle_closed);
	d->peers = NULL;
}

/* ---- requests from this node's clients ---- */

static int ref_close(struct peers *P, struct client *c, uint64_t id)
{
	list_each(it, htab_bucket(&P->refs, id)) {
		struct rref *f = list_entry(it, struct rref, hlink);
		if (f->id == id && f->c == c) {
			htab_del(&P->refs, &f->hlink);
			free(f);
			return 1;
		}
	}
	return 0;
}

int peer_close_ref(struct morid *d, struct client *c, uint64_t id)
{
	struct peers *P = d->peers;
	if (!P || !(id & REF_TAG))
		return 0;
	ref_close(P, c, id);
	return 1;
}

struct rref *peer_ref_find(struct peers *P, struct client *c, uint64_t id)
{
	list_each(it, htab_bucket(&P->refs, id)) {
		struct rref *f = list_entry(it, struct rref, hlink);
		if (f->id == id && f->c == c)
			return f;
	}
	return NULL;
}

struct plist *peer_list_find(struct client *c, uint64_t id)
{
	list_each(it, &c->lists) {
		struct plist *l = list_entry(it, struct plist, link);
		if (l->id == id)
			return l;
	}
	return NULL;
}

static void prep_list(struct peers *P, struct client *c, Mori__XferPrep *xp, Mori__Reply *rep,
		      struct rctx *r, int fd)
{
	struct morid *d = P->d;
	struct region *g = region_find(d, xp->local_region);
	struct rref *f = peer_ref_find(P, c, xp->remote_ref);
	struct stat st;
	if (!g || g->owner != c) {
		reply_error(rep, MORI_ENOENT, "prep: region %llu is not registered by this client",
			    (unsigned long long)xp->local_region);
		return;
	}
	if (!f) {
		reply_error(rep, MORI_ENOENT, "prep: remote ref %llx is not a remote region this client opened",
			    (unsigned long long)xp->remote_ref);
		return;
	}
	if (xp->count == 0 || xp->count > (1u << 24)) {
		reply_error(rep, MORI_EINVAL, "prep: %u descriptors (1 .. 16777216)", xp->count);
		return;
	}
	uint64_t bytes = (uint64_t)xp->count * sizeof(mori_desc);
	if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size < bytes) {
		reply_error(rep, MORI_EINVAL, "prep: the descriptors must come as a memfd of %llu bytes",
			    (unsigned long long)bytes);
		return;
	}
	uint64_t held = 0;
	list_each(it, &c->lists)
		held++;
	if (held >= (uint64_t)d->cfg.client_max_lists) {
		reply_error(rep, MORI_ENOMEM, "prep: this client already holds %llu prepared lists (client_max_lists)",
			    (unsigned long long)held);
		return;
	}
	struct plist *l = calloc(1, sizeof(*l));
	mori_desc *ds = malloc(bytes);
	if (!l || !ds) {
		free(l);
		free(ds);
		reply_error(rep, MORI_ENOMEM, "prep: out of memory for %u descriptors", xp->count);
		return;
	}
	uint64_t done = 0;
	while (done < bytes) {
		ssize_t n = pread(fd, (char *)ds + done, bytes - done, (off_t)done);
		if (n <= 0) {
			reply_error(rep, MORI_ESYS, "prep: reading descriptors: %s", n < 0 ? strerror(errno) : "short file");
			free(l);
			free(ds);
			return;
		}
		done += (uint64_t)n;
	}
	for (uint32_t i = 0; i < xp->count; i++) {
		const mori_desc *e = &ds[i];
		int code = 0;
		if (e->length == 0)
			code = MORI_EINVAL;
		else if (e->local_offset > g->size || e->length > g->size - e->local_offset ||
			 e->remote_offset > f->size || e->length > f->size - e->remote_offset)
			code = MORI_ERANGE;
		if (code) {
			reply_error(rep, code, "prep: descriptor %u (local %llu, remote %llu, length %llu) %s", i,
				    (unsigned long long)e->local_offset, (unsigned long long)e->remote_offset,
				    (unsigned long long)e->length,
				    code == MORI_EINVAL ? "has length 0" : "falls outside a region");
			free(l);
			free(ds);
			return;
		}
	}
	l->id = LIST_TAG | ++P->next_list;
	l->local_region = g->id;
	l->ref = f->id;
	l->n = xp->count;
	l->descs = ds;
	list_add(&c->lists, &l->link);
	Mori__XferPrepReply *pr = rctx_alloc(r, sizeof(*pr));
	if (!pr) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__xfer_prep_reply__init(pr);
	pr->list_id = l->id;
	rep->body_case = MORI__REPLY__BODY_XFER_PREP;
	rep->xfer_prep = pr;
}

static void plist_free(struct plist *l)
{
	list_del(&l->link);
	free(l->descs);
	free(l);
}

int peer_handle_request(struct morid *d, struct client *c, Mori__Request *req, Mori__Reply *rep,
			struct rctx *r, int *fds, int nfds)
{
	struct peers *P = d->peers;
	int fd = nfds > 0 ? fds[0] : -1;
	for (int i = 1; i < nfds; i++)
		close(fds[i]);
	int deferred = 0;
	switch (req->body_case) {
	case MORI__REQUEST__BODY_PEER_HELLO: {
		/* On the control socket: the same answer a peer gets (a probe). */
		Mori__PeerHelloReply *hr = rctx_alloc(r, sizeof(*hr));
		if (!hr) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			break;
		}
		mori__peer_hello_reply__init(hr);
		hr->epoch = d->epoch;
		hr->node = P && P->on ? P->self : "";
		hr->data_port = P ? P->data_port : 0;
		rep->body_case = MORI__REPLY__BODY_PEER_HELLO;
		rep->peer_hello = hr;
		break;
	}
	case MORI__REQUEST__BODY_MEM_LOOKUP:
	case MORI__REQUEST__BODY_MEM_OPEN: {
		int lookup = req->body_case == MORI__REQUEST__BODY_MEM_LOOKUP;
		const char *node = lookup ? req->mem_lookup->node : (req->mem_open->handle ? req->mem_open->handle->node : "");
		if (!c) {
			reply_error(rep, MORI_EPROTO, "memory requests need an attached session");
			break;
		}
		if (!P || !P->on) {
			reply_error(rep, MORI_ECONN, "cannot reach %s: no peer listener configured here (set listen= in morid.conf)",
				    node);
			break;
		}
		if (lookup && (!req->mem_lookup->name || !req->mem_lookup->name[0] ||
			       strlen(req->mem_lookup->name) >= sizeof(((struct rpc *)0)->name))) {
			reply_error(rep, MORI_EINVAL, "lookup: names are 1..127 bytes");
			break;
		}
		struct peer *p = peer_get(P, node, 1);
		if (!p) {
			reply_error(rep, MORI_EINVAL, "node '%s' is not host:port", node);
			break;
		}
		struct rpc *q = rpc_new(p, lookup ? RPC_LOOKUP : RPC_OPEN, c, req->id);
		if (!q) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			break;
		}
		if (lookup) {
			snprintf(q->name, sizeof(q->name), "%s", req->mem_lookup->name);
		} else {
			Mori__Handle *h = req->mem_open->handle;
			snprintf(q->hnode, sizeof(q->hnode), "%s", h->node);
			q->h.epoch = h->epoch;
			q->h.region_id = h->region_id;
			q->h.generation = h->generation;
			q->h.size = h->size;
			q->h.kind = h->kind;
		}
		rpc_queue(p, q);
		peer_use(p);
		deferred = 1;
		break;
	}
	case MORI__REQUEST__BODY_MEM_CLOSE:
		if (c && P)
			ref_close(P, c, req->mem_close->region_id);
		break;
	case MORI__REQUEST__BODY_XFER_PREP:
		if (!c || !P || !P->on) {
			reply_error(rep, MORI_ECONN, "prep: no peer listener configured here (set listen= in morid.conf)");
			break;
		}
		prep_list(P, c, req->xfer_prep, rep, r, fd);
		break;
	case MORI__REQUEST__BODY_XFER_UNPREP: {
		struct plist *l = c ? peer_list_find(c, req->xfer_unprep->list_id) : NULL;
		if (!l)
			reply_error(rep, MORI_ENOENT, "unprep: list %llx is not this client's",
				    (unsigned long long)req->xfer_unprep->list_id);
		else
			plist_free(l);
		break;
	}
	default:
		reply_error(rep, MORI_EPROTO, "not a cross-node request (%d)", (int)req->body_case);
	}
	if (fd >= 0)
		close(fd);
	return deferred;
}

/* ---- submissions, client death ---- */

void peer_submit(struct morid *d, struct client *c, const struct mori_sqe *e)
{
	struct peers *P = d->peers;
	if (!P || !P->on) {
		if (e->op == SQE_CANCEL)
			return;
		struct mori_cqe x = {.type = CQE_XFER_DONE, .code = MORI_ENOTSUP, .user_data = e->user_data};
		snprintf(x.msg, sizeof(x.msg), "no peer listener (listen=) here");
		client_post(c, &x);
		count(d, C_XFER_ERRORS, 1);
		return;
	}
	xfer_submit(P, c, e);
}

void peer_client_gone(struct morid *d, struct client *c)
{
	struct peers *P = d->peers;
	list_each(it, &c->lists)
		plist_free(list_entry(it, struct plist, link));
	if (!P)
		return;
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		list_each(xt, &p->xfers) {
			struct xfer *x = list_entry(xt, struct xfer, plink);
			if (x->c == c) {
				x->c = NULL; /* nobody to tell */
				xfer_complete(x, MORI_ECANCELED, "client gone");
			}
		}
		list_each(qt, &p->rpcs) {
			struct rpc *q = list_entry(qt, struct rpc, link);
			if (q->c == c)
				q->c = NULL;
		}
	}
	for (int i = 0; i < HBUCKETS; i++)
		list_each(it, &P->refs.b[i]) {
			struct rref *f = list_entry(it, struct rref, hlink);
			if (f->c == c) {
				htab_del(&P->refs, &f->hlink);
				free(f);
			}
		}
}

/* ---- listings ---- */

uint32_t peer_count(struct morid *d)
{
	uint32_t n = 0;
	if (d->peers)
		list_each(it, &d->peers->peers)
			n++;
	return n;
}

void peer_list(struct morid *d, Mori__ListReply *lr, struct rctx *r)
{
	uint32_t n = peer_count(d);
	if (!n)
		return;
	lr->peers = rctx_alloc(r, sizeof(void *) * n);
	if (!lr->peers)
		return;
	list_each(it, &d->peers->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		Mori__PeerInfo *pi = rctx_alloc(r, sizeof(*pi));
		if (!pi)
			return;
		mori__peer_info__init(pi);
		pi->address = p->addr;
		char st[300];
		if (p->why[0] && p->state != PS_UP)
			snprintf(st, sizeof(st), "%s (%s)", state_name(p->state), p->why);
		else
			snprintf(st, sizeof(st), "%s", state_name(p->state));
		pi->state = rctx_strdup(r, st);
		pi->bytes_sent = p->bytes_sent;
		pi->bytes_received = p->bytes_received;
		pi->transfers = p->transfers;
		pi->errors = p->errors;
		pi->transport = (char *)rdma_transport(d, p->addr); /* issue 7 */
		pi->streams = (uint32_t)p->nready;
		lr->peers[lr->n_peers++] = pi;
	}
}

uint32_t peer_transfers_in_flight(struct morid *d)
{
	return d->peers ? d->peers->xfers.n : 0;
}

void peer_list_transfers(struct morid *d, Mori__ListReply *lr, struct rctx *r)
{
	struct peers *P = d->peers;
	if (!P || !P->xfers.n)
		return;
	lr->xfers = rctx_alloc(r, sizeof(void *) * P->xfers.n);
	if (!lr->xfers)
		return;
	uint64_t now = mori_now_us();
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		list_each(xt, &p->xfers) {
			struct xfer *x = list_entry(xt, struct xfer, plink);
			Mori__XferInfo *xi = rctx_alloc(r, sizeof(*xi));
			if (!xi || lr->n_xfers >= P->xfers.n)
				return;
			mori__xfer_info__init(xi);
			xi->id = x->user_data;
			xi->client = x->client_id;
			xi->peer = p->addr;
			xi->op = x->read ? "read" : "write";
			xi->bytes = x->total;
			xi->bytes_done = x->done;
			xi->age_us = now - x->start_us;
			lr->xfers[lr->n_xfers++] = xi;
		}
	}
}
