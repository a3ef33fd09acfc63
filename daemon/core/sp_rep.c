/* nng's req/rep wire protocol, rep0 side, on the loop (sp_rep.h says why not libnng).
 *
 * The wire format, as nng's transports and rep0 protocol define it:
 *   each side first sends 8 bytes: 00 'S' 'P' 00, its protocol (u16 big-endian: req0 0x30,
 *   rep0 0x31), 00 00; then messages: over ipc a byte 0x01 and the length (u64 big-endian),
 *   over tcp the length alone, then the payload. A request's payload starts with its backtrace:
 *   4-byte words, the last one with the high bit set (a req0 client sends one: its request id);
 *   the reply repeats them, then the body.
 * Like nng, a message the admit hook refuses, a bad header or a bad backtrace closes the
 * connection; everything else gets a reply. */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "host_port.h"
#include "log.h"
#include "sp_rep.h"

#define SP_PROTO_REQ0 0x30
#define SP_PROTO_REP0 0x31
#define SP_MAX_HOPS 8              /* backtrace words accepted (nng's default max TTL) */
#define SP_MAX_QUEUED (4u << 20)   /* unsent reply bytes before we stop reading */

struct sp_server {
	struct morid *d;
	struct sp_rep_opts o;
	union {
		uv_pipe_t pipe;
		uv_tcp_t tcp;
	} lsn;
	int listening;
	int handles;               /* the listener's, plus one while open: freed at 0 */
	struct list conns;         /* oldest accept first */
	int nconns, nuntrusted;
	uint32_t next_id;
};

struct sp_conn {
	struct list link;
	struct sp_server *S;
	union {
		uv_pipe_t pipe;
		uv_tcp_t tcp;
		uv_stream_t stream;
	} h;
	uv_timer_t timer;
	uint32_t id;
	uid_t uid;
	int have_uid;
	int trusted;
	int handles;               /* libuv handles not yet closed: freed at 0 */
	int closing, reading;
	uint8_t head[9];           /* the 8-byte handshake, then each message header */
	size_t head_got;
	int negotiated;
	uint64_t accepted_ms;      /* loop time of the accept */
	uint64_t last_ms;          /* loop time of the handshake or the last whole request */
	uint8_t *msg;              /* the payload being received */
	uint64_t msg_len, msg_got;
	const uint8_t *bt;         /* the backtrace of the request being handled */
	size_t bt_len;
	size_t queued;             /* reply bytes handed to uv_write, not yet written */
};

struct sp_write {
	uv_write_t req;
	struct sp_conn *k;
	size_t len;
	uint8_t data[];
};

static uint8_t read_buf[64 * 1024]; /* one read at a time on the loop */

static void server_unref(struct sp_server *S)
{
	if (--S->handles == 0)
		free(S);
}

static void conn_closed(uv_handle_t *h)
{
	struct sp_conn *k = h->data;
	if (--k->handles == 0) {
		struct sp_server *S = k->S;
		free(k->msg);
		free(k);
		server_unref(S);
	}
}

void sp_conn_close(struct sp_conn *k, const char *why)
{
	struct sp_server *S = k->S;
	if (k->closing)
		return;
	k->closing = 1;
	if (why)
		mlog_info(S->o.sub, "closing connection %u%s: %s", k->id, k->trusted ? "" : " (untrusted)", why);
	if (S->o.closed)
		S->o.closed(k);
	list_del(&k->link);
	S->nconns--;
	if (!k->trusted)
		S->nuntrusted--;
	uv_close((uv_handle_t *)&k->h, conn_closed);
	uv_close((uv_handle_t *)&k->timer, conn_closed);
}

/* An untrusted connection closed by the rules of the server (cap, deadline, descriptors). */
static void drop_untrusted(struct sp_conn *k, const char *why)
{
	struct sp_server *S = k->S;
	if (S->o.dropped != C_COUNT)
		count(S->d, S->o.dropped, 1);
	mlog_every(10, MLOG_WARN, S->o.sub, "closed an unauthenticated %s connection: %s", S->o.sub, why);
	sp_conn_close(k, NULL);
}

static void arm(struct sp_conn *k);

static void on_timer(uv_timer_t *t)
{
	struct sp_conn *k = t->data;
	uint64_t now = uv_now(k->S->d->loop);
	const struct sp_rep_opts *o = &k->S->o;
	if (!k->trusted && o->trust_ms && now - k->accepted_ms >= o->trust_ms)
		drop_untrusted(k, "not authenticated in time");
	else if (!k->negotiated && now - k->accepted_ms >= o->handshake_ms)
		sp_conn_close(k, "no handshake in time");
	else if (k->negotiated && o->idle_ms && now - k->last_ms >= o->idle_ms)
		sp_conn_close(k, "idle (no request in time)");
	else
		arm(k);
}

/* The timer at the first of k's deadlines. */
static void arm(struct sp_conn *k)
{
	const struct sp_rep_opts *o = &k->S->o;
	uint64_t due = UINT64_MAX;
	if (!k->trusted && o->trust_ms)
		due = k->accepted_ms + o->trust_ms;
	if (!k->negotiated && k->accepted_ms + o->handshake_ms < due)
		due = k->accepted_ms + o->handshake_ms;
	if (k->negotiated && o->idle_ms && k->last_ms + o->idle_ms < due)
		due = k->last_ms + o->idle_ms;
	if (due == UINT64_MAX) {
		uv_timer_stop(&k->timer);
		return;
	}
	uint64_t now = uv_now(k->S->d->loop);
	uv_timer_start(&k->timer, on_timer, due > now ? due - now : 0, 0);
}

void sp_conn_trust(struct sp_conn *k)
{
	if (k->trusted || k->closing)
		return;
	k->trusted = 1;
	k->S->nuntrusted--;
	arm(k);
}

uint32_t sp_conn_id(const struct sp_conn *k)
{
	return k->id;
}

int sp_conn_uid(const struct sp_conn *k, uid_t *uid)
{
	if (!k->have_uid)
		return -1;
	*uid = k->uid;
	return 0;
}

void *sp_conn_arg(const struct sp_conn *k)
{
	return k->S->o.arg;
}

int sp_rep_conns(const struct sp_server *S, int *untrusted)
{
	if (untrusted)
		*untrusted = S ? S->nuntrusted : 0;
	return S ? S->nconns : 0;
}

/* The oldest untrusted connection, or where trusted is set, the one that has waited longest
 * for a request. */
static struct sp_conn *oldest(struct sp_server *S, int any)
{
	struct sp_conn *best = NULL;
	list_each(it, &S->conns) {
		struct sp_conn *k = list_entry(it, struct sp_conn, link);
		if (k->closing || (!any && k->trusted))
			continue;
		if (!any)
			return k; /* the list is in accept order */
		if (!best || k->last_ms < best->last_ms)
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
	struct sp_write *w = (struct sp_write *)req;
	struct sp_conn *k = w->k;
	k->queued -= w->len;
	free(w);
	if (status < 0) {
		sp_conn_close(k, uv_strerror(status));
		return;
	}
	if (!k->closing && !k->reading && k->queued < SP_MAX_QUEUED / 2) {
		k->reading = 1;
		uv_read_start(&k->h.stream, on_alloc, conn_read);
	}
}

/* Queue len bytes for writing; takes no ownership. */
static void conn_write(struct sp_conn *k, const void *a, size_t len)
{
	struct sp_write *w = malloc(sizeof(*w) + len);
	if (!w) {
		sp_conn_close(k, "out of memory for a reply");
		return;
	}
	memcpy(w->data, a, len);
	w->k = k;
	w->len = len;
	uv_buf_t ub = uv_buf_init((char *)w->data, (unsigned)w->len);
	int rc = uv_write(&w->req, &k->h.stream, &ub, 1, on_written);
	if (rc < 0) {
		free(w);
		sp_conn_close(k, uv_strerror(rc));
		return;
	}
	k->queued += w->len;
	if (k->queued >= SP_MAX_QUEUED && k->reading) {
		/* a client that does not read its replies gets no more requests served */
		k->reading = 0;
		uv_read_stop(&k->h.stream);
	}
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

/* One complete message: backtrace, then the request. */
static void conn_message(struct sp_conn *k, const uint8_t *p, size_t len)
{
	struct sp_server *S = k->S;
	size_t bt = 0;
	for (;;) {
		if (bt + 4 > len || bt / 4 >= SP_MAX_HOPS) {
			count(S->d, C_BAD_REQUESTS, 1);
			sp_conn_close(k, "message without a request id");
			return;
		}
		bt += 4;
		if (p[bt - 4] & 0x80)
			break;
	}
	k->bt = p;
	k->bt_len = bt;
	S->o.request(k, p + bt, len - bt);
	k->bt = NULL;
}

void sp_conn_reply(struct sp_conn *k, const Mori__Reply *rep)
{
	if (k->closing || !k->bt)
		return;
	size_t hl = k->S->o.tcp ? 8 : 9, bt = k->bt_len, rlen = mori__reply__get_packed_size(rep);
	uint8_t *out = malloc(hl + bt + rlen);
	if (!out) {
		sp_conn_close(k, "out of memory for a reply");
		return;
	}
	out[0] = 1;
	put_be64(out + hl - 8, bt + rlen);
	memcpy(out + hl, k->bt, bt); /* the backtrace routes the reply to its request */
	mori__reply__pack(rep, out + hl + bt);
	k->bt = NULL; /* one reply per request */
	conn_write(k, out, hl + bt + rlen);
	free(out);
}

/* Feed received bytes through the state machine: handshake, header, payload. */
static void conn_feed(struct sp_conn *k, const uint8_t *p, size_t n)
{
	struct sp_server *S = k->S;
	struct morid *d = S->d;
	size_t hl = S->o.tcp ? 8 : 9;
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
				sp_conn_close(k, "not an SP handshake");
				return;
			}
			if (((h[4] << 8) | h[5]) != SP_PROTO_REQ0) {
				count(d, C_BAD_REQUESTS, 1);
				sp_conn_close(k, "peer is not a req0 socket");
				return;
			}
			k->negotiated = 1;
			k->head_got = 0;
			k->last_ms = uv_now(d->loop);
			arm(k);
			continue;
		}
		if (!k->msg) {
			size_t take = hl - k->head_got < n ? hl - k->head_got : n;
			memcpy(k->head + k->head_got, p, take);
			k->head_got += take, p += take, n -= take;
			if (k->head_got < hl)
				return;
			k->head_got = 0;
			uint64_t len = 0;
			for (size_t i = hl - 8; i < hl; i++)
				len = len << 8 | k->head[i];
			if (!S->o.tcp && k->head[0] != 1) {
				count(d, C_BAD_REQUESTS, 1);
				sp_conn_close(k, "bad message header");
				return;
			}
			const char *why = !k->trusted && S->o.untrusted_max_msg && len > S->o.untrusted_max_msg
						  ? "large message before authenticating"
						  : S->o.admit ? S->o.admit(k, len) : NULL;
			if (why) {
				sp_conn_close(k, why);
				return;
			}
			if (!(k->msg = malloc(len ? len : 1))) {
				sp_conn_close(k, "out of memory for a request");
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
			conn_message(k, m, (size_t)k->msg_len);
			free(m);
			if (!k->closing)
				arm(k);
		}
	}
}

static void conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct sp_conn *k = s->data;
	if (n < 0) {
		sp_conn_close(k, n == UV_EOF ? NULL : uv_strerror((int)n));
		return;
	}
	conn_feed(k, (const uint8_t *)buf->base, (size_t)n);
}

/* Fewer than keep_fds_pct of the descriptor limit free? Descriptors are handed out lowest
 * first, so one numbered fd means at least fd + 1 in use. */
static int fds_short(const struct sp_server *S, int fd)
{
	struct rlimit rl;
	if (!S->o.keep_fds_pct || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	uint64_t keep = (uint64_t)rl.rlim_cur * (uint64_t)S->o.keep_fds_pct / 100;
	return (uint64_t)fd + 1 + keep > (uint64_t)rl.rlim_cur;
}

static void on_connection(uv_stream_t *server, int status)
{
	struct sp_server *S = server->data;
	struct morid *d = S->d;
	if (status < 0) {
		mlog_ratelimited(MLOG_WARN, S->o.sub, "accept: %s", uv_strerror(status));
		return;
	}
	struct sp_conn *k = calloc(1, sizeof(*k));
	if (!k)
		return; /* the connection waits in the backlog; retried on the next one */
	k->S = S;
	if (S->o.tcp)
		uv_tcp_init(d->loop, &k->h.tcp);
	else
		uv_pipe_init(d->loop, &k->h.pipe, 0);
	uv_timer_init(d->loop, &k->timer);
	k->h.stream.data = k->timer.data = k;
	k->handles = 2;
	S->handles++;
	if (!++S->next_id)
		S->next_id = 1;
	k->id = S->next_id;
	list_add(&S->conns, &k->link);
	S->nconns++;
	S->nuntrusted++;
	k->accepted_ms = k->last_ms = uv_now(d->loop);
	if (uv_accept(server, &k->h.stream) != 0) {
		sp_conn_close(k, NULL);
		return;
	}
	if (S->o.trusted_at_accept)
		sp_conn_trust(k);
	uv_os_fd_t fd = -1;
	uv_fileno((uv_handle_t *)&k->h, &fd);
	if (!k->trusted) {
		/* room for it comes from the oldest untrusted one (k itself when it is the only one) */
		const char *why = NULL;
		if (S->o.max_untrusted && S->nuntrusted > S->o.max_untrusted)
			why = "more than the cap wait to authenticate: the oldest goes";
		else if (fd >= 0 && fds_short(S, fd))
			why = "descriptors are kept for local sessions and moractl";
		if (why) {
			struct sp_conn *old = oldest(S, 0);
			drop_untrusted(old ? old : k, why);
		}
		if (k->closing)
			return;
	}
	if (S->nconns > S->o.max_conns) {
		/* make room by the connection that has waited longest: idle ones cannot lock others out */
		struct sp_conn *old = oldest(S, 1);
		mlog_ratelimited(MLOG_WARN, S->o.sub, "more than %d %s connections: closing the longest idle",
				 S->o.max_conns, S->o.sub);
		sp_conn_close(old ? old : k, NULL);
		if (k->closing)
			return;
	}
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	if (!S->o.tcp && fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
		k->uid = cred.uid;
		k->have_uid = 1;
	}
	static const uint8_t hello[8] = {0, 'S', 'P', 0, 0, SP_PROTO_REP0, 0, 0};
	conn_write(k, hello, sizeof(hello));
	if (k->closing)
		return;
	arm(k);
	k->reading = 1;
	uv_read_start(&k->h.stream, on_alloc, conn_read);
}

static void listener_closed(uv_handle_t *h)
{
	server_unref(h->data);
}

static int bind_tcp(struct sp_server *S, const char *addr)
{
	char host[256], ports[16];
	int port, rc;
	if (host_port_split(addr, host, sizeof(host), &port) != 0) {
		mlog_err(S->o.sub, "'%s' is not host:port", addr);
		return -1;
	}
	snprintf(ports, sizeof(ports), "%d", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
	if ((rc = getaddrinfo(strcmp(host, "*") ? host : NULL, ports, &hints, &ai)) != 0) { /* once, at start-up */
		mlog_err(S->o.sub, "%s: %s", addr, gai_strerror(rc));
		return -1;
	}
	uv_tcp_init(S->d->loop, &S->lsn.tcp);
	S->listening = 1;
	rc = uv_tcp_bind(&S->lsn.tcp, ai->ai_addr, 0);
	freeaddrinfo(ai);
	return rc;
}

struct sp_server *sp_rep_listen(struct morid *d, const struct sp_rep_opts *opts, const char *addr)
{
	struct sp_server *S = calloc(1, sizeof(*S));
	int rc;
	if (!S)
		return NULL;
	S->d = d;
	S->o = *opts;
	S->handles = 2; /* the listener's and the server's own */
	LIST_INIT(&S->conns);
	if (S->o.tcp) {
		rc = bind_tcp(S, addr);
	} else {
		uv_pipe_init(d->loop, &S->lsn.pipe, 0);
		S->listening = 1;
		rc = uv_pipe_bind(&S->lsn.pipe, addr);
	}
	S->lsn.tcp.data = S;
	if (!S->listening) {
		free(S);
		return NULL;
	}
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&S->lsn, 128, on_connection);
	if (rc != 0) {
		mlog_err(S->o.sub, "cannot listen on %s: %s", addr, uv_strerror(rc));
		sp_rep_close(S);
		return NULL;
	}
	return S;
}

void sp_rep_close(struct sp_server *S)
{
	if (!S || !S->listening)
		return;
	S->listening = 0;
	uv_close((uv_handle_t *)&S->lsn, listener_closed);
	list_each(it, &S->conns)
		sp_conn_close(list_entry(it, struct sp_conn, link), NULL);
	server_unref(S);
}
