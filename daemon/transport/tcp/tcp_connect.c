/* The TCP transport's data streams, connecting: ours to a peer (data_streams of them, each
 * opening with a HELLO), and the listener's accepted ones, which must authenticate within
 * HS_DEADLINE_MS (at most HS_MAX_PENDING wait). tcp_stream.c moves the frames. */
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "tcp_int.h"

static void on_connect(uv_connect_t *req, int status)
{
	struct stream *s = req->data;
	struct peer *p = s->p;
	if (s->closing)
		return;
	if (status < 0) {
		char m[200];
		snprintf(m, sizeof(m), "data connection to %s port %u: %s", p->host, p->data_port, uv_strerror(status));
		stream_lost(s, status == UV_ETIMEDOUT ? MORI_ETIMEDOUT : MORI_ECONN, m);
		return;
	}
	stream_setup(s);
	uint8_t hello[AUTH_NONCE_BYTES + 128];
	size_t self = strlen(s->P->self);
	auth_nonce(s->nonce);
	memcpy(hello, s->nonce, AUTH_NONCE_BYTES);
	memcpy(hello + AUTH_NONCE_BYTES, s->P->self, self < 127 ? self : 127);
	struct fhdr h = {.type = F_HELLO, .code = FRAME_VERSION, .xfer = s->P->d->epoch};
	stream_frame(s, &h, hello, (uint32_t)(AUTH_NONCE_BYTES + (self < 127 ? self : 127)));
}

void streams_connect(struct peer *p, const struct sockaddr *sa)
{
	struct peers *P = p->P;
	struct tcp_peer *tp = tcp_peer(p);
	int n = (int)P->d->cfg.data_streams;
	if (n < 1)
		n = 1;
	if (n > 16)
		n = 16;
	tp->nout = tp->nready = 0;
	for (int i = 0; i < n; i++) {
		struct stream *s = stream_new(P);
		if (!s) {
			peer_down(p, MORI_ENOMEM, "out of memory for data streams");
			return;
		}
		s->outgoing = 1;
		s->p = p;
		s->conn_gen = tp->conn_gen;
		tp->out[tp->nout++] = s;
		s->connreq.data = s;
		int rc = uv_tcp_connect(&s->connreq, &s->tcp, sa, on_connect);
		if (rc < 0) {
			peer_down(p, MORI_ECONN, "data connection to %s: %s", p->host, uv_strerror(rc));
			return;
		}
	}
}

/* ---- accepting ---- */

static void handshake_dropped(struct stream *s, int evicted)
{
	count(s->P->d, C_DATA_HANDSHAKES_DROPPED, 1);
	if (evicted)
		mlog_ratelimited(MLOG_WARN, "peer", "closed an unauthenticated data connection: %d were waiting to "
				 "authenticate", HS_MAX_PENDING);
	else
		mlog_ratelimited(MLOG_WARN, "peer", "closed an unauthenticated data connection: no authenticated hello "
				 "within %d ms", HS_DEADLINE_MS);
	stream_close(s);
}

int streams_expire_handshakes(struct peers *P, uint64_t now)
{
	int waiting = 0;
	list_each(it, &tcp_node(P)->accepted) {
		struct stream *s = list_entry(it, struct stream, link);
		if (s->hs == 2 || s->closing)
			continue;
		if (now - s->accepted_us >= HS_DEADLINE_MS * 1000ull)
			handshake_dropped(s, 0);
		else
			waiting++;
	}
	return waiting;
}

static void on_connection(uv_stream_t *server, int status)
{
	struct peers *P = server->data;
	if (status < 0)
		return;
	struct stream *s = stream_new(P);
	if (!s)
		return;
	/* the oldest unauthenticated stream goes when too many wait (accepted is oldest first): a
	 * real peer's handshake takes a round trip, an idle one stays until its deadline */
	int waiting = 0;
	struct stream *oldest = NULL;
	list_each(it, &tcp_node(P)->accepted) {
		struct stream *q = list_entry(it, struct stream, link);
		if (q->hs != 2 && !q->closing && !waiting++)
			oldest = q;
	}
	if (waiting >= HS_MAX_PENDING && oldest)
		handshake_dropped(oldest, 1);
	list_add(&tcp_node(P)->accepted, &s->link);
	s->accepted_us = mori_now_us();
	if (uv_accept(server, (uv_stream_t *)&s->tcp) != 0) {
		stream_close(s);
		return;
	}
	stream_setup(s);
	peers_kick(P); /* the tick enforces the deadline */
}

int stream_listen(struct peers *P, const char *host)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res = NULL;
	int rc = getaddrinfo(strcmp(host, "*") == 0 ? NULL : host, "0", &hints, &res);
	if (rc != 0 || !res) {
		mlog_err("peer", "listen host '%s': %s", host, gai_strerror(rc));
		return -1;
	}
	struct tcp_node *tn = tcp_node(P);
	uv_tcp_init(P->d->loop, &tn->lsn);
	tn->lsn.data = P;
	tn->lsn_on = 1;
	tn->handles++; /* let go when the listener is closed (tcp_stop) */
	rc = uv_tcp_bind(&tn->lsn, res->ai_addr, 0);
	freeaddrinfo(res);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&tn->lsn, 128, on_connection);
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	if (rc == 0)
		rc = uv_tcp_getsockname(&tn->lsn, (struct sockaddr *)&ss, &len);
	if (rc != 0) {
		mlog_err("peer", "data listener on %s: %s", host, uv_strerror(rc));
		return -1;
	}
	P->data_port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
						    : ((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}
