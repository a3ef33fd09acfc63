/* Why a peer daemon cannot be reached. nng's dialer redials in the background and never says
 * why it failed, so a request to a wrong port or an unknown host used to end after its deadline
 * with a bare "cannot reach". While a request waits unsent, morid resolves the peer's address and
 * opens a TCP connection of its own to it, at most every PROBE_EVERY_MS; what fails (the lookup,
 * or the connect: refused, unreachable, no answer) is kept in p->probe_why for the request's
 * error message and moractl. A connect that succeeds is closed at once (the peer's listener sees
 * a connection without a handshake, which nng drops). Only while a client waits for the peer
 * (morid's own hellos to a peer that stays down would probe it every second for ever). A numeric
 * address is connected to at once; a name is looked up first, in libuv's thread pool, which a
 * stopping morid waits for (a lookup cannot be cancelled once it runs). A probe is an object of
 * its own: a peer that goes (peer_probe_stop) detaches from it, and its callbacks free it
 * without touching the peer again, so it never holds a peer alive. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_port.h"
#include "peer_int.h"

#define PROBE_AFTER_MS 200    /* a request unsent this long starts a probe */
#define PROBE_EVERY_MS 1000   /* and again at most this often */
#define PROBE_CONNECT_MS 2000 /* a connect unanswered this long: a host that drops SYNs */

struct probe {
	uv_getaddrinfo_t gai;
	uv_tcp_t tcp;
	uv_connect_t conn;
	struct peer *p; /* NULL once the peer let go */
	int connecting;
	uint64_t started_us;
};

static void __attribute__((format(printf, 2, 3))) why(struct probe *pr, const char *fmt, ...)
{
	if (!pr->p)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pr->p->probe_why, sizeof(pr->p->probe_why), fmt, ap);
	va_end(ap);
}

static void probe_closed(uv_handle_t *h)
{
	struct probe *pr = h->data;
	if (pr->p)
		pr->p->probe = NULL;
	free(pr);
}

static void probe_close(struct probe *pr)
{
	if (!uv_is_closing((uv_handle_t *)&pr->tcp))
		uv_close((uv_handle_t *)&pr->tcp, probe_closed);
}

static void probe_connected(uv_connect_t *c, int status)
{
	struct probe *pr = c->data;
	if (status == UV_ECANCELED)
		return; /* closed by probe_close: probe_closed frees it */
	if (status < 0)
		why(pr, "connect: %s", uv_strerror(status));
	else if (pr->p)
		pr->p->probe_why[0] = 0;
	probe_close(pr);
}

/* Connect to sa; 0, or a libuv error with pr left to the caller (nothing started). */
static int probe_connect(struct probe *pr, const struct sockaddr *sa)
{
	int rc = uv_tcp_init(pr->p->P->d->loop, &pr->tcp);
	if (rc)
		return rc;
	pr->tcp.data = pr;
	pr->conn.data = pr;
	pr->connecting = 1;
	pr->started_us = mori_now_us();
	if ((rc = uv_tcp_connect(&pr->conn, &pr->tcp, sa, probe_connected)) != 0) {
		why(pr, "connect: %s", uv_strerror(rc));
		probe_close(pr); /* probe_closed frees it */
	}
	return 0;
}

static void probe_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
	struct probe *pr = g->data;
	int rc = status;
	if (rc >= 0 && pr->p && res) {
		rc = probe_connect(pr, res->ai_addr);
		uv_freeaddrinfo(res);
		if (rc == 0)
			return;
		why(pr, "socket: %s", uv_strerror(rc));
	} else {
		if (res)
			uv_freeaddrinfo(res);
		if (pr->p && rc != UV_ECANCELED)
			why(pr, "cannot resolve %s: %s", pr->p->host, uv_strerror(rc));
	}
	if (pr->p)
		pr->p->probe = NULL;
	free(pr);
}

void peer_probe(struct peer *p, uint64_t since, uint64_t now)
{
	struct probe *pr = p->probe;
	if (pr) {
		if (pr->connecting && now - pr->started_us > PROBE_CONNECT_MS * 1000ull) {
			snprintf(p->probe_why, sizeof(p->probe_why), "connect: no answer within %d ms", PROBE_CONNECT_MS);
			peer_probe_stop(p);
		}
		return;
	}
	if (p->gone || now < p->probe_at_us || now - since < PROBE_AFTER_MS * 1000ull)
		return;
	char host[128], svc[16];
	int port;
	if (host_port_split(p->addr, host, sizeof(host), &port) != 0 || !(pr = calloc(1, sizeof(*pr))))
		return; /* peer_get refused such an address already; out of memory: no reason, as before */
	snprintf(svc, sizeof(svc), "%d", port);
	pr->p = p;
	p->probe_at_us = now + PROBE_EVERY_MS * 1000ull;
	struct sockaddr_storage ss;
	if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) == 0 || uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) == 0) {
		int rc = probe_connect(pr, (struct sockaddr *)&ss); /* numeric: no lookup */
		if (rc) {
			snprintf(p->probe_why, sizeof(p->probe_why), "socket: %s", uv_strerror(rc));
			free(pr);
		} else {
			p->probe = pr; /* until probe_closed (already on its way when the connect failed at once) */
		}
		return;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	pr->gai.data = pr;
	int rc = uv_getaddrinfo(p->P->d->loop, &pr->gai, probe_resolved, host, svc, &hints);
	if (rc < 0) {
		snprintf(p->probe_why, sizeof(p->probe_why), "cannot resolve %s: %s", host, uv_strerror(rc));
		free(pr);
		return;
	}
	p->probe = pr;
}

void peer_probe_stop(struct peer *p)
{
	struct probe *pr = p->probe;
	if (!pr)
		return;
	pr->p = NULL;
	p->probe = NULL;
	if (pr->connecting)
		probe_close(pr); /* probe_closed frees it */
	else
		uv_cancel((uv_req_t *)&pr->gai); /* probe_resolved still comes, then frees it */
}
