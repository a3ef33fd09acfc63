/* Why a peer daemon cannot be reached. nng's dialer redials in the background and never says
 * why it failed, so a request to a wrong port or an unknown host used to end after its deadline
 * with a bare "cannot reach". While a request waits unsent, morid resolves the peer's address and
 * opens a TCP connection of its own to it, at most every PROBE_EVERY_MS; what fails (the lookup,
 * or the connect: refused, unreachable, no answer) is kept in p->probe_why for the request's
 * error message and moractl. A connect that succeeds is closed at once (the peer's listener sees
 * a connection without a handshake, which nng drops). */
#include <stdio.h>
#include <string.h>

#include "host_port.h"
#include "peer_int.h"

#define PROBE_AFTER_MS 200    /* a request unsent this long starts a probe */
#define PROBE_EVERY_MS 1000   /* and again at most this often */
#define PROBE_CONNECT_MS 2000 /* a connect unanswered this long: a host that drops SYNs */

enum { PR_IDLE, PR_RESOLVING, PR_CONNECTING };

static void probe_closed(uv_handle_t *h)
{
	struct peer *p = h->data;
	p->probing = PR_IDLE;
	peer_unref(p);
}

static void probe_close(struct peer *p)
{
	if (!uv_is_closing((uv_handle_t *)&p->probe_tcp))
		uv_close((uv_handle_t *)&p->probe_tcp, probe_closed);
}

static void probe_connected(uv_connect_t *c, int status)
{
	struct peer *p = c->data;
	if (status == UV_ECANCELED)
		return; /* closed by probe_close: its callback lets go */
	if (status < 0)
		snprintf(p->probe_why, sizeof(p->probe_why), "connect: %s", uv_strerror(status));
	else
		p->probe_why[0] = 0;
	probe_close(p);
}

static void probe_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
	struct peer *p = g->data;
	int rc = status;
	if (rc >= 0 && !p->gone && res && (rc = uv_tcp_init(p->P->d->loop, &p->probe_tcp)) == 0) {
		p->probe_tcp.data = p;
		p->probe_conn.data = p;
		p->probing = PR_CONNECTING;
		p->probe_at_us = mori_now_us(); /* the connect's start, for its deadline */
		if ((rc = uv_tcp_connect(&p->probe_conn, &p->probe_tcp, res->ai_addr, probe_connected)) != 0) {
			snprintf(p->probe_why, sizeof(p->probe_why), "connect: %s", uv_strerror(rc));
			probe_close(p);
		}
		uv_freeaddrinfo(res);
		return; /* the handle's close lets go of p */
	}
	if (res)
		uv_freeaddrinfo(res);
	if (!p->gone && rc != UV_ECANCELED)
		snprintf(p->probe_why, sizeof(p->probe_why), "cannot resolve %s: %s", p->host, uv_strerror(rc));
	p->probe_at_us = mori_now_us() + PROBE_EVERY_MS * 1000ull;
	p->probing = PR_IDLE;
	peer_unref(p);
}

void peer_probe(struct peer *p, uint64_t since, uint64_t now)
{
	if (p->probing == PR_CONNECTING && now - p->probe_at_us > PROBE_CONNECT_MS * 1000ull &&
	    !uv_is_closing((uv_handle_t *)&p->probe_tcp)) {
		snprintf(p->probe_why, sizeof(p->probe_why), "connect: no answer within %d ms", PROBE_CONNECT_MS);
		p->probe_at_us = now + PROBE_EVERY_MS * 1000ull;
		probe_close(p);
		return;
	}
	if (p->probing || p->gone || now < p->probe_at_us || now - since < PROBE_AFTER_MS * 1000ull)
		return;
	char host[128];
	int port;
	if (host_port_split(p->addr, host, sizeof(host), &port) != 0)
		return; /* peer_get refused such an address already */
	char svc[16];
	snprintf(svc, sizeof(svc), "%d", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	p->probe_gai.data = p;
	p->probe_at_us = now + PROBE_EVERY_MS * 1000ull;
	int rc = uv_getaddrinfo(p->P->d->loop, &p->probe_gai, probe_resolved, host, svc, &hints);
	if (rc < 0) {
		snprintf(p->probe_why, sizeof(p->probe_why), "cannot resolve %s: %s", host, uv_strerror(rc));
		return;
	}
	p->probing = PR_RESOLVING;
	p->handles++; /* let go when the lookup, or the connection's handle, is done */
}

void peer_probe_stop(struct peer *p)
{
	if (p->probing == PR_RESOLVING)
		uv_cancel((uv_req_t *)&p->probe_gai); /* its callback still comes, then lets go */
	else if (p->probing == PR_CONNECTING)
		probe_close(p);
}
