/* The control socket (nng's req/rep wire protocol on ipc://<runtime_dir>/morid.sock, served
 * on the loop: see below) and the request dispatcher that session sockets share. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kv/kv_store.h"
#include "shmem/group.h"
#include "log.h"
#include "memory.h"
#include "core/morid.h"
#include "observe/observe.h"
#include "peer/peer.h"
#include "topo/rdma.h"
#include "transport/rdma/rdma_ctl.h"
#include "region/registry.h"

/* On the control socket a hello is a probe: versions and features, no session. */
void do_hello(struct morid *d, uid_t uid, Mori__Hello *h, Mori__Reply *rep, struct rctx *r)
{
	if (h->protocol_version != MORI_PROTOCOL_VERSION) {
		reply_error(rep, MORI_EVERSION, "protocol version %u not supported (daemon speaks %u)",
			    h->protocol_version, MORI_PROTOCOL_VERSION);
		return;
	}
	Mori__HelloReply *hr = rctx_alloc(r, sizeof(*hr));
	if (!hr) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__hello_reply__init(hr);
	hr->protocol_version = MORI_PROTOCOL_VERSION;
	hr->daemon_version = MORI_VERSION;
	hr->epoch = d->epoch;
	hr->node = rctx_strdup(r, d->cfg.advertise[0] ? d->cfg.advertise : d->cfg.listen);
	hr->transfer_timeout_ms = (uint32_t)d->cfg.transfer_timeout_ms;
	rep->body_case = MORI__REPLY__BODY_HELLO;
	rep->hello = hr;
}

static void do_status(struct morid *d, Mori__Reply *rep, struct rctx *r)
{
	Mori__StatusReply *s = rctx_alloc(r, sizeof(*s));
	Mori__Counter **cs = rctx_alloc(r, sizeof(*cs) * C_COUNT);
	if (!s || !cs) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__status_reply__init(s);
	s->version = MORI_VERSION;
	s->uptime_us = mori_now_us() - d->start_us;
	s->pid = getpid();
	s->config_path = d->config_from_file ? d->config_path : "(built-in defaults)";
	s->runtime_dir = d->cfg.runtime_dir;
	s->clients = d->nclients;
	s->regions = registry_count(d->reg, &s->registered_bytes);
	s->peers = peer_count(d);
	s->epoch = d->epoch;
	s->gpu = rctx_strdup(r, memory_gpu_summary(d));
	s->node = rctx_strdup(r, d->cfg.advertise[0] ? d->cfg.advertise : d->cfg.listen);
	s->transfers_in_flight = peer_transfers_in_flight(d);
	int unauth;
	s->peer_auth = (char *)peer_auth_status(d, &unauth);
	s->peers_unauthenticated = unauth;
	for (int i = 0; i < C_COUNT; i++) {
		cs[i] = rctx_alloc(r, sizeof(Mori__Counter));
		if (!cs[i]) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			return;
		}
		mori__counter__init(cs[i]);
		cs[i]->name = (char *)counter_names[i];
		cs[i]->value = d->counters[i];
	}
	s->n_counters = C_COUNT;
	s->counters = cs;
	rep->body_case = MORI__REPLY__BODY_STATUS;
	rep->status = s;
}

static void do_config(struct morid *d, Mori__Reply *rep, struct rctx *r)
{
	Mori__ConfigReply *cr = rctx_alloc(r, sizeof(*cr));
	Mori__ConfigEntry **es = rctx_alloc(r, sizeof(*es) * 96);
	if (!cr || !es) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__config_reply__init(cr);
	cr->path = d->config_from_file ? d->config_path : "(built-in defaults)";
	const char *name, *help;
	char value[1100];
	int reloadable, i;
	for (i = 0; i < 96 && config_entry(&d->cfg, i, &name, value, sizeof(value), &reloadable, &help); i++) {
		es[i] = rctx_alloc(r, sizeof(Mori__ConfigEntry));
		if (!es[i]) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			return;
		}
		mori__config_entry__init(es[i]);
		es[i]->name = (char *)name;
		es[i]->value = rctx_strdup(r, value);
		es[i]->reloadable = reloadable;
		es[i]->help = (char *)help;
	}
	cr->n_entries = (size_t)i;
	cr->entries = es;
	rep->body_case = MORI__REPLY__BODY_CONFIG;
	rep->config = cr;
}

static void do_list(struct morid *d, uid_t uid, Mori__ListRequest *lq, Mori__Reply *rep, struct rctx *r)
{
	Mori__ListReply *lr = rctx_alloc(r, sizeof(*lr));
	if (!lr) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__list_reply__init(lr);
	rep->body_case = MORI__REPLY__BODY_LIST;
	rep->list = lr;
	switch (lq->what) {
	case 1: {
		lr->clients = rctx_alloc(r, sizeof(void *) * (d->nclients + 1));
		list_each(it, &d->clients) {
			struct client *c = list_entry(it, struct client, link);
			Mori__ClientInfo *ci = rctx_alloc(r, sizeof(*ci));
			if (!lr->clients || !ci)
				break;
			mori__client_info__init(ci);
			ci->id = c->id;
			ci->pid = c->pid;
			ci->uid = c->uid;
			ci->name = c->name;
			list_each(rt, &c->regions) {
				ci->regions++;
				ci->bytes += list_entry(rt, struct region, owner_link)->size;
			}
			ci->connected_us = mori_now_us() - c->created_us;
			lr->clients[lr->n_clients++] = ci;
		}
		return;
	}
	case 2: {
		uint32_t n = registry_count(d->reg, NULL);
		lr->regions = rctx_alloc(r, sizeof(void *) * (n + 1));
		for (struct region *g = region_next(d, NULL); g && lr->regions; g = region_next(d, g)) {
			Mori__RegionInfo *ri = rctx_alloc(r, sizeof(*ri));
			if (!ri)
				break;
			mori__region_info__init(ri);
			ri->id = g->id;
			ri->owner_pid = g->pid;
			ri->owner_client = g->owner ? g->owner->id : 0;
			ri->kind = g->kind;
			ri->bytes = g->size;
			ri->name = g->name;
			list_each(ot, &g->openers)
				ri->opens++;
			ri->inflight = g->inflight;
			char acl[512];
			region_access_text(g, acl, sizeof(acl));
			ri->access = rctx_strdup(r, acl);
			lr->regions[lr->n_regions++] = ri;
		}
		return;
	}
	case 3:
		peer_list(d, lr, r);
		return;
	case 4:
		peer_list_transfers(d, lr, r);
		return;
	case 5:
		group_list(d, lr, r, uid);
		return;
	default:
		reply_error(rep, MORI_EINVAL, "list: unknown table %u (1 clients, 2 memory, 3 peers, 4 transfers, 5 groups)",
			    lq->what);
	}
}

int dispatch(struct morid *d, struct client *c, uid_t uid, Mori__Request *req, Mori__Reply *rep,
	     struct rctx *r, int *fds, int nfds)
{
	int deferred = 0;
	switch (req->body_case) {
	case MORI__REQUEST__BODY_HELLO:
		do_hello(d, uid, req->hello, rep, r);
		break;
	case MORI__REQUEST__BODY_STATUS:
		do_status(d, rep, r);
		break;
	case MORI__REQUEST__BODY_CONFIG:
		do_config(d, rep, r);
		break;
	case MORI__REQUEST__BODY_RELOAD: {
		char err[600];
		if (morid_reload(d, err, sizeof(err)) != 0)
			reply_error(rep, MORI_EINVAL, "reload failed, old config kept: %s", err);
		break;
	}
	case MORI__REQUEST__BODY_LIST:
		do_list(d, uid, req->list, rep, r);
		break;
	case MORI__REQUEST__BODY_MEM_REGISTER:
	case MORI__REQUEST__BODY_MEM_DEREGISTER:
	case MORI__REQUEST__BODY_MEM_PUBLISH:
	case MORI__REQUEST__BODY_MEM_LOOKUP:
	case MORI__REQUEST__BODY_MEM_OPEN:
	case MORI__REQUEST__BODY_MEM_CLOSE:
	case MORI__REQUEST__BODY_XFER_PREP:
	case MORI__REQUEST__BODY_XFER_UNPREP:
		if (!c) {
			reply_error(rep, MORI_EPROTO, "memory requests need an attached session");
			break;
		}
		deferred = memory_handle_request(d, c, req, rep, r, fds, nfds);
		return deferred;
	case MORI__REQUEST__BODY_PEER_HELLO:
		deferred = peer_handle_request(d, c, req, rep, r, fds, nfds);
		return deferred;
	case MORI__REQUEST__BODY_GROUP_JOIN: /* shmem/group.c */
	case MORI__REQUEST__BODY_GROUP_CALL:
	case MORI__REQUEST__BODY_GROUP_LEAVE:
		if (!c) {
			reply_error(rep, MORI_EPROTO, "group requests need an attached session");
			break;
		}
		return group_handle_request(d, c, req, rep, r, fds, nfds);
	case MORI__REQUEST__BODY_KV: /* kv/kv_req.c */
		deferred = kv_handle_request(d, c, uid, req->kv, rep, r);
		break;
	case MORI__REQUEST__BODY_NICS: /* transport/rdma/rdma_ctl.c */
		rdma_nics_reply(d, rep, r);
		break;
	case MORI__REQUEST__BODY_TOPO: /* observe/observe.c */
		observe_topo(d, rep, r);
		break;
	case MORI__REQUEST__BODY_DIAGNOSE:
		observe_diagnose(d, rep, r);
		break;
	case MORI__REQUEST__BODY_METRICS:
		observe_metrics(d, rep, r);
		break;
	default:
		count(d, C_BAD_REQUESTS, 1);
		reply_error(rep, MORI_EPROTO, "unknown request type %d", (int)req->body_case);
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return deferred;
}

/* ---- the control socket ----
 *
 * morid speaks nng's req/rep protocol over its ipc transport on this socket, so that moractl,
 * peers' tests and anything else built on nng_req0 can call it, but it serves the socket itself
 * on the loop instead of through libnng: nng 1.5.2 (Debian 12) stops accepting on a listener
 * for good when a client disconnects during the connection handshake (nng issue #1518, fixed
 * in 1.6), so a single `connect(); close();` on morid.sock would end the control plane; and its
 * rep0 refuses a non-blocking reply while the pipe's previous reply is still completing on an
 * nng thread, losing replies to clients that send their next request at once.
 *
 * The wire format, as nng's ipc transport and rep0 protocol define it:
 *   each side first sends 8 bytes: 00 'S' 'P' 00, its protocol (u16 big-endian: req0 0x30,
 *   rep0 0x31), 00 00; then messages: a byte 0x01, the length (u64 big-endian), the payload.
 *   A request's payload starts with its backtrace: 4-byte words, the last one with the high
 *   bit set (a req0 client sends one: its request id); the reply repeats them, then the body.
 * Like nng, a message over twice max_message_bytes, a bad header or a bad backtrace closes
 * the connection; everything else gets a reply. */
#define SP_PROTO_REQ0 0x30
#define SP_PROTO_REP0 0x31
#define SP_MAX_HOPS 8                 /* backtrace words accepted (nng's default max TTL) */
#define CTL_HANDSHAKE_MS 10000        /* to send the 8-byte header */
#define CTL_IDLE_MS 60000             /* a connection with no whole request for this long is closed */
#define CTL_MAX_CONNS 512             /* beyond it the longest-idle connection is closed */
#define CTL_DENIED_MAX (64u << 10)    /* largest request read from a uid not in allow_uids */
#define CTL_MAX_QUEUED (4u << 20)     /* unsent reply bytes before we stop reading */

struct cconn {
	struct list link;
	struct morid *d;
	uv_pipe_t pipe;
	uv_timer_t timer;
	uid_t uid;
	int have_uid;
	int handles;           /* libuv handles not yet closed: freed at 0 */
	int closing, reading;
	uint8_t head[9];       /* the 8-byte handshake, then each 9-byte message header */
	size_t head_got;
	int negotiated;
	uint64_t last_ms;      /* loop time of the handshake or the last whole request */
	uint8_t *msg;          /* the payload being received */
	uint64_t msg_len, msg_got;
	size_t queued;         /* reply bytes handed to uv_write, not yet written */
};

struct cwrite {
	uv_write_t req;
	struct cconn *k;
	size_t len;
	uint8_t data[];
};

static struct {
	uv_pipe_t listener;
	int listening;
	struct list conns;
	int nconns;
	char path[300];
} L;

static uint8_t read_buf[64 * 1024]; /* one read at a time on the loop */

static void conn_closed(uv_handle_t *h)
{
	struct cconn *k = h->data;
	if (--k->handles == 0) {
		free(k->msg);
		free(k);
	}
}

static void conn_close(struct cconn *k, const char *why)
{
	if (k->closing)
		return;
	k->closing = 1;
	if (why)
		mlog_info("control", "closing connection (uid %d): %s", k->have_uid ? (int)k->uid : -1, why);
	list_del(&k->link);
	L.nconns--;
	uv_close((uv_handle_t *)&k->pipe, conn_closed);
	uv_close((uv_handle_t *)&k->timer, conn_closed);
}

static void on_handshake_timeout(uv_timer_t *t)
{
	conn_close(t->data, "no handshake in time");
}

static void on_idle_timeout(uv_timer_t *t)
{
	conn_close(t->data, "idle (no request for 60 s)");
}

/* The connection that has waited longest for a request (handshaken or not). */
static struct cconn *longest_idle(void)
{
	struct cconn *best = NULL;
	list_each(it, &L.conns) {
		struct cconn *k = list_entry(it, struct cconn, link);
		if (!k->closing && (!best || k->last_ms < best->last_ms))
			best = k;
	}
	return best;
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	*buf = uv_buf_init((char *)read_buf, sizeof(read_buf));
}

static void conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void on_written(uv_write_t *req, int status)
{
	struct cwrite *w = (struct cwrite *)req;
	struct cconn *k = w->k;
	k->queued -= w->len;
	free(w);
	if (status < 0) {
		conn_close(k, uv_strerror(status));
		return;
	}
	if (!k->closing && !k->reading && k->queued < CTL_MAX_QUEUED / 2) {
		k->reading = 1;
		uv_read_start((uv_stream_t *)&k->pipe, on_alloc, conn_read);
	}
}

/* Queue len bytes (two pieces) for writing; takes no ownership. */
static void conn_write(struct cconn *k, const void *a, size_t alen, const void *b, size_t blen)
{
	struct cwrite *w = malloc(sizeof(*w) + alen + blen);
	if (!w) {
		conn_close(k, "out of memory for a reply");
		return;
	}
	memcpy(w->data, a, alen);
	if (blen)
		memcpy(w->data + alen, b, blen);
	w->k = k;
	w->len = alen + blen;
	uv_buf_t ub = uv_buf_init((char *)w->data, (unsigned)w->len);
	int rc = uv_write(&w->req, (uv_stream_t *)&k->pipe, &ub, 1, on_written);
	if (rc < 0) {
		free(w);
		conn_close(k, uv_strerror(rc));
		return;
	}
	k->queued += w->len;
	if (k->queued >= CTL_MAX_QUEUED && k->reading) {
		/* a client that does not read its replies gets no more requests served */
		k->reading = 0;
		uv_read_stop((uv_stream_t *)&k->pipe);
	}
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

/* Handle one complete message: backtrace, then the request. */
static void conn_message(struct cconn *k, const uint8_t *p, size_t len)
{
	struct morid *d = k->d;
	size_t bt = 0;
	for (;;) {
		if (bt + 4 > len || bt / 4 >= SP_MAX_HOPS) {
			count(d, C_BAD_REQUESTS, 1);
			conn_close(k, "message without a request id");
			return;
		}
		bt += 4;
		if (p[bt - 4] & 0x80)
			break;
	}
	const uint8_t *body = p + bt;
	size_t blen = len - bt;

	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	Mori__Request *req = NULL;
	count(d, C_REQUESTS, 1);
	if (!k->have_uid || !config_uid_allowed(&d->cfg, k->uid)) {
		count(d, C_DENIED, 1);
		mlog_ratelimited(MLOG_WARN, "control", "request from uid %d refused: not in allow_uids",
				 k->have_uid ? (int)k->uid : -1);
		reply_error(&rep, MORI_EPERM, "uid %d is not allowed (allow_uids)", k->have_uid ? (int)k->uid : -1);
	} else if (blen > (size_t)d->cfg.max_message_bytes) {
		count(d, C_OVERSIZE, 1);
		mlog_info("control", "message of %zu bytes over the cap", blen);
		reply_error(&rep, MORI_EMSGSIZE, "message of %zu bytes over max_message_bytes", blen);
	} else if (!(req = mori__request__unpack(NULL, blen, body))) {
		count(d, C_BAD_REQUESTS, 1);
		mlog_info("control", "malformed request of %zu bytes", blen);
		reply_error(&rep, MORI_EPROTO, "malformed request (%zu bytes)", blen);
	} else {
		rep.id = req->id;
		if (dispatch(d, NULL, k->uid, req, &rep, &r, NULL, 0) == 1) {
			/* nothing on the control socket may defer: there is no session to answer on */
			mlog_err("control", "request type %d deferred on the control socket", (int)req->body_case);
			reply_error(&rep, MORI_EPROTO, "request type %d needs a session", (int)req->body_case);
		}
	}
	size_t rlen = mori__reply__get_packed_size(&rep);
	uint8_t *out = malloc(9 + bt + rlen);
	if (out) {
		out[0] = 1;
		put_be64(out + 1, bt + rlen);
		memcpy(out + 9, p, bt); /* the backtrace routes the reply to its request */
		mori__reply__pack(&rep, out + 9 + bt);
		conn_write(k, out, 9 + bt + rlen, NULL, 0);
		free(out);
	} else {
		conn_close(k, "out of memory for a reply");
	}
	rctx_free(&r);
	if (req)
		mori__request__free_unpacked(req, NULL);
}

/* Feed received bytes through the state machine: handshake, header, payload. */
static void conn_feed(struct cconn *k, const uint8_t *p, size_t n)
{
	struct morid *d = k->d;
	while (n > 0 && !k->closing) {
		if (!k->negotiated) {
			size_t take = 8 - k->head_got < n ? 8 - k->head_got : n;
			memcpy(k->head + k->head_got, p, take);
			k->head_got += take, p += take, n -= take;
			if (k->head_got < 8)
				return;
			const uint8_t *h = k->head;
			if (h[0] != 0 || h[1] != 'S' || h[2] != 'P' || h[3] != 0 || h[6] != 0 || h[7] != 0) {
				count(d, C_BAD_REQUESTS, 1);
				conn_close(k, "not an SP handshake");
				return;
			}
			if (((h[4] << 8) | h[5]) != SP_PROTO_REQ0) {
				count(d, C_BAD_REQUESTS, 1);
				conn_close(k, "peer is not a req0 socket");
				return;
			}
			k->negotiated = 1;
			k->head_got = 0;
			k->last_ms = uv_now(d->loop);
			uv_timer_start(&k->timer, on_idle_timeout, CTL_IDLE_MS, 0);
			continue;
		}
		if (!k->msg) {
			size_t take = 9 - k->head_got < n ? 9 - k->head_got : n;
			memcpy(k->head + k->head_got, p, take);
			k->head_got += take, p += take, n -= take;
			if (k->head_got < 9)
				return;
			k->head_got = 0;
			uint64_t len = 0;
			for (int i = 1; i < 9; i++)
				len = len << 8 | k->head[i];
			if (k->head[0] != 1) {
				count(d, C_BAD_REQUESTS, 1);
				conn_close(k, "bad message header");
				return;
			}
			if (len > 2 * (uint64_t)d->cfg.max_message_bytes + 4 * SP_MAX_HOPS) {
				count(d, C_OVERSIZE, 1);
				mlog_info("control", "message of %llu bytes over twice the cap: dropping the connection",
					  (unsigned long long)len);
				conn_close(k, NULL);
				return;
			}
			if (len > CTL_DENIED_MAX && (!k->have_uid || !config_uid_allowed(&d->cfg, k->uid))) {
				/* not buffered for a uid that only gets EPERM back */
				count(d, C_DENIED, 1);
				conn_close(k, "large request from a uid not in allow_uids");
				return;
			}
			if (!(k->msg = malloc(len ? len : 1))) {
				conn_close(k, "out of memory for a request");
				return;
			}
			k->msg_len = len;
			k->msg_got = 0;
		}
		size_t take = k->msg_len - k->msg_got < n ? (size_t)(k->msg_len - k->msg_got) : n;
		memcpy(k->msg + k->msg_got, p, take);
		k->msg_got += take, p += take, n -= take;
		if (k->msg_got == k->msg_len) {
			uint8_t *m = k->msg;
			k->msg = NULL;
			k->last_ms = uv_now(d->loop);
			uv_timer_start(&k->timer, on_idle_timeout, CTL_IDLE_MS, 0);
			conn_message(k, m, (size_t)k->msg_len);
			free(m);
		}
	}
}

static void conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct cconn *k = s->data;
	if (n < 0) {
		conn_close(k, n == UV_EOF ? NULL : uv_strerror((int)n));
		return;
	}
	conn_feed(k, (const uint8_t *)buf->base, (size_t)n);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct morid *d = server->data;
	if (status < 0) {
		mlog_warn("control", "accept: %s", uv_strerror(status));
		return;
	}
	struct cconn *k = calloc(1, sizeof(*k));
	if (!k)
		return; /* the connection waits in the backlog; retried on the next one */
	k->d = d;
	uv_pipe_init(d->loop, &k->pipe, 0);
	uv_timer_init(d->loop, &k->timer);
	k->pipe.data = k->timer.data = k;
	k->handles = 2;
	LIST_INIT(&k->link);
	list_add(&L.conns, &k->link);
	L.nconns++;
	if (uv_accept(server, (uv_stream_t *)&k->pipe) != 0) {
		conn_close(k, NULL);
		return;
	}
	k->last_ms = uv_now(d->loop);
	if (L.nconns > CTL_MAX_CONNS) {
		/* make room by the connection that has waited longest: idle ones cannot lock others out */
		struct cconn *old = longest_idle();
		mlog_ratelimited(MLOG_WARN, "control", "more than %d control connections: closing the longest idle",
				 CTL_MAX_CONNS);
		conn_close(old ? old : k, NULL);
		if (k->closing)
			return;
	}
	uv_os_fd_t fd;
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	if (uv_fileno((uv_handle_t *)&k->pipe, &fd) == 0 &&
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
		k->uid = cred.uid;
		k->have_uid = 1;
	}
	static const uint8_t hello[8] = {0, 'S', 'P', 0, 0, SP_PROTO_REP0, 0, 0};
	conn_write(k, hello, sizeof(hello), NULL, 0);
	if (k->closing)
		return;
	uv_timer_start(&k->timer, on_handshake_timeout, CTL_HANDSHAKE_MS, 0);
	k->reading = 1;
	uv_read_start((uv_stream_t *)&k->pipe, on_alloc, conn_read);
}

int control_start(struct morid *d)
{
	int rc;
	snprintf(L.path, sizeof(L.path), "%s/morid.sock", d->cfg.runtime_dir);
	snprintf(d->control_url, sizeof(d->control_url), "ipc://%s", L.path);
	if (strlen(L.path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		mlog_err("control", "%s: path too long for a unix socket", L.path);
		return -1;
	}
	LIST_INIT(&L.conns);
	L.nconns = 0;
	unlink(L.path); /* we hold the lock: a socket left there is stale */
	uv_pipe_init(d->loop, &L.listener, 0);
	L.listener.data = d;
	L.listening = 1;
	if ((rc = uv_pipe_bind(&L.listener, L.path)) != 0 ||
	    (rc = uv_listen((uv_stream_t *)&L.listener, 128, on_connection)) != 0) {
		mlog_err("control", "cannot listen on %s: %s", L.path, uv_strerror(rc));
		control_stop(d);
		return -1;
	}
	if (chmod(L.path, (mode_t)d->cfg.socket_mode) != 0)
		mlog_warn("control", "chmod %s: %s", L.path, strerror(errno));
	return 0;
}

void control_stop(struct morid *d)
{
	if (!L.listening)
		return;
	L.listening = 0;
	uv_close((uv_handle_t *)&L.listener, NULL);
	list_each(it, &L.conns)
		conn_close(list_entry(it, struct cconn, link), NULL);
	unlink(L.path);
}
