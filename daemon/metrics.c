/* Prometheus metrics: rendering on the loop and the HTTP endpoint on nng's threads (see
 * metrics.h). Above the peer service (it lists peers), below control.c. */
#include <errno.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_port.h"
#include "log.h"
#include "metrics.h"
#include "morid.h"
#include "mstats.h"
#include "peer.h"
#include "rdma.h"
#include "rdma_core.h"
#include "registry.h"

/* ---- a growing text buffer ---- */

struct buf {
	char *p;
	size_t len, cap;
	int oom;
};

static void bprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(struct buf *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t nc = b->cap * 2 + (size_t)n + 1;
		char *np = realloc(b->p, nc);
		if (!np) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = nc;
	}
}

/* A label value with \, " and newlines escaped (the format's rule). */
static const char *esc(const char *s, char *out, size_t len)
{
	size_t o = 0;
	for (; s && *s && o + 3 < len; s++) {
		if (*s == '\\' || *s == '"') {
			out[o++] = '\\';
			out[o++] = *s;
		} else if (*s == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *s;
		}
	}
	out[o] = 0;
	return out;
}

static void family(struct buf *b, const char *name, const char *type, const char *help)
{
	bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- the families ---- */

static void render_daemon(struct buf *b, struct morid *d)
{
	char node[300];
	family(b, "mori_info", "gauge", "morid's version and node address (value 1).");
	bprintf(b, "mori_info{version=\"%s\",node=\"%s\"} 1\n", MORI_VERSION,
		esc(d->cfg.advertise[0] ? d->cfg.advertise : d->cfg.listen, node, sizeof(node)));
	family(b, "mori_uptime_seconds", "gauge", "Seconds since morid started.");
	bprintf(b, "mori_uptime_seconds %.3f\n", (double)(mori_now_us() - d->start_us) / 1e6);
	for (int i = 0; i < C_COUNT; i++) {
		char name[96];
		size_t l = strlen(counter_names[i]); /* clients_total: not clients_total_total */
		int has = l > 6 && !strcmp(counter_names[i] + l - 6, "_total");
		snprintf(name, sizeof(name), "mori_%s%s", counter_names[i], has ? "" : "_total");
		family(b, name, "counter", "morid counter (as moractl status shows it).");
		bprintf(b, "%s %llu\n", name, (unsigned long long)d->counters[i]);
	}
	uint64_t bytes = 0;
	uint32_t regions = registry_count(d->reg, &bytes);
	family(b, "mori_clients", "gauge", "Attached clients.");
	bprintf(b, "mori_clients %u\n", d->nclients);
	family(b, "mori_regions", "gauge", "Registered memory regions.");
	bprintf(b, "mori_regions %u\n", regions);
	family(b, "mori_registered_bytes", "gauge", "Bytes of registered memory.");
	bprintf(b, "mori_registered_bytes %llu\n", (unsigned long long)bytes);
	family(b, "mori_transfers_in_flight", "gauge", "Cross-node transfers in flight.");
	bprintf(b, "mori_transfers_in_flight %u\n", peer_transfers_in_flight(d));
}

static void render_latency(struct buf *b)
{
	family(b, "mori_transfer_latency_seconds", "histogram",
	       "Cross-node transfers from submission to completion, by operation.");
	for (int rd = 1; rd >= 0; rd--) {
		const struct mstats_hist *h = mstats_latency(rd);
		const char *op = rd ? "read" : "write";
		uint64_t cum = 0;
		for (int i = 0; i < MSTATS_NBUCKETS; i++) {
			cum += h->bucket[i];
			bprintf(b, "mori_transfer_latency_seconds_bucket{op=\"%s\",le=\"%g\"} %llu\n", op,
				mstats_bounds[i], (unsigned long long)cum);
		}
		bprintf(b, "mori_transfer_latency_seconds_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", op,
			(unsigned long long)h->count);
		bprintf(b, "mori_transfer_latency_seconds_sum{op=\"%s\"} %.9f\n", op, h->sum);
		bprintf(b, "mori_transfer_latency_seconds_count{op=\"%s\"} %llu\n", op, (unsigned long long)h->count);
	}
	family(b, "mori_transfers_ended_total", "counter", "Cross-node transfers ended, by operation and outcome.");
	for (int rd = 1; rd >= 0; rd--)
		for (int ok = 1; ok >= 0; ok--)
			bprintf(b, "mori_transfers_ended_total{op=\"%s\",outcome=\"%s\"} %llu\n", rd ? "read" : "write",
				ok ? "ok" : "error", (unsigned long long)mstats_count(rd, ok));
	family(b, "mori_transfer_bytes_total", "counter", "Bytes of cross-node transfers that succeeded, by operation.");
	for (int rd = 1; rd >= 0; rd--)
		bprintf(b, "mori_transfer_bytes_total{op=\"%s\"} %llu\n", rd ? "read" : "write",
			(unsigned long long)mstats_bytes(rd));
}

static void render_peers(struct buf *b, struct morid *d)
{
	Mori__ListReply lr = MORI__LIST_REPLY__INIT;
	struct rctx r = {0};
	peer_list(d, &lr, &r);
	static const struct { const char *name, *type, *help; } fam[] = {
		{"mori_peer_up", "gauge", "1 while the link to the peer daemon is up."},
		{"mori_peer_bytes_sent_total", "counter", "Bytes sent to the peer daemon."},
		{"mori_peer_bytes_received_total", "counter", "Bytes received from the peer daemon."},
		{"mori_peer_transfers_total", "counter", "Transfers with the peer daemon."},
		{"mori_peer_errors_total", "counter", "Transfers with the peer daemon that failed."},
	};
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		family(b, fam[f].name, fam[f].type, fam[f].help);
		for (size_t i = 0; i < lr.n_peers; i++) {
			const Mori__PeerInfo *p = lr.peers[i];
			char a[300];
			uint64_t v = f == 0 ? !strncmp(p->state, "up", 2) : f == 1 ? p->bytes_sent : f == 2 ? p->bytes_received
						   : f == 3 ? p->transfers : p->errors;
			bprintf(b, "%s{peer=\"%s\"} %llu\n", fam[f].name, esc(p->address, a, sizeof(a)), (unsigned long long)v);
		}
	}
	rctx_free(&r);
}

static uint32_t ring_used(const struct ring_hdr *h, uint32_t cap)
{
	/* the client writes one of the two indices: clamp what it says */
	uint32_t n = atomic_load_explicit(&h->tail, memory_order_relaxed) -
		     atomic_load_explicit(&h->head, memory_order_relaxed);
	return n > cap ? cap : n;
}

static void render_clients(struct buf *b, struct morid *d)
{
	static const struct { const char *name, *type, *help; } fam[] = {
		{"mori_client_transfers_total", "counter", "Cross-node transfers of the client that ended."},
		{"mori_client_bytes_total", "counter", "Bytes of the client's cross-node transfers that succeeded."},
		{"mori_client_errors_total", "counter", "The client's cross-node transfers that failed."},
		{"mori_client_regions", "gauge", "Regions the client has registered."},
		{"mori_client_sq_used", "gauge", "Entries in the client's submission ring."},
		{"mori_client_cq_used", "gauge", "Entries in the client's completion ring."},
		{"mori_client_cq_backlog", "gauge", "Completions waiting for room in the client's completion ring."},
		{"mori_client_ring_entries", "gauge", "Capacity of each of the client's rings."},
	};
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		family(b, fam[f].name, fam[f].type, fam[f].help);
		list_each(it, &d->clients) {
			struct client *c = list_entry(it, struct client, link);
			char nm[200];
			uint64_t v = 0;
			switch (f) {
			case 0: v = c->xfers; break;
			case 1: v = c->xfer_bytes; break;
			case 2: v = c->xfer_errors; break;
			case 3: v = c->nregions; break;
			case 4: v = c->sqh ? ring_used(c->sqh, c->lay.sq_entries) : 0; break;
			case 5: v = c->cqh ? ring_used(c->cqh, c->lay.cq_entries) : 0; break;
			case 6: v = c->backlog_n; break;
			default: v = c->lay.sq_entries;
			}
			bprintf(b, "%s{client=\"%llu\",pid=\"%d\",name=\"%s\"} %llu\n", fam[f].name,
				(unsigned long long)c->id, (int)c->pid, esc(c->name, nm, sizeof(nm)), (unsigned long long)v);
		}
	}
}

static void render_rdma(struct buf *b, struct morid *d)
{
	char in_use[200];
	const char *transport;
	struct rdma_stats st;
	rdma_node_info(d, in_use, sizeof(in_use), &transport, &st);
	const struct { const char *name; uint64_t v; } e[] = {
		{"xfers", st.xfers}, {"xfer_errors", st.xfer_errors}, {"bytes", st.bytes},
		{"wrs_posted", st.wrs_posted}, {"qp_resets", st.qp_resets}, {"requeued", st.requeued},
		{"sq_full_waits", st.sq_full_waits}, {"timeouts", st.timeouts}, {"stalls", st.stalls},
	};
	for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
		char name[64];
		snprintf(name, sizeof(name), "mori_rdma_%s_total", e[i].name);
		family(b, name, "counter", "RDMA engine counter (moractl nics).");
		bprintf(b, "%s %llu\n", name, (unsigned long long)e[i].v);
	}
}

char *metrics_render(struct morid *d, size_t *len)
{
	struct buf b = {.p = malloc(16384), .cap = 16384};
	if (!b.p)
		return NULL;
	b.p[0] = 0;
	render_daemon(&b, d);
	render_latency(&b);
	render_peers(&b, d);
	render_clients(&b, d);
	render_rdma(&b, d);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	*len = b.len;
	return b.p;
}

/* ---- the HTTP endpoint ---- */

static struct {
	int on;
	struct morid *d;
	nng_http_server *srv;
	nng_http_handler *h;
	uv_async_t async;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t asked, rendered; /* requests for a rendering, renderings done (under mu) */
	char *text;               /* the latest rendering (under mu) */
	size_t len;
	int stopping;
} M = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* Loop thread: render what was asked for. */
static void on_async(uv_async_t *a)
{
	pthread_mutex_lock(&M.mu);
	uint64_t want = M.asked;
	pthread_mutex_unlock(&M.mu);
	if (want == M.rendered)
		return; /* coalesced wake-up */
	size_t len = 0;
	char *t = metrics_render(M.d, &len);
	pthread_mutex_lock(&M.mu);
	free(M.text);
	M.text = t; /* M owns it from here; NULL: out of memory, answered 500 */
	M.len = len;
	M.rendered = want;
	pthread_cond_broadcast(&M.cv);
	pthread_mutex_unlock(&M.mu);
}

/* A response with body (copied), or NULL when out of memory. */
static nng_http_res *make_res(uint16_t status, const char *type, const char *body, size_t len)
{
	nng_http_res *res;
	if (nng_http_res_alloc(&res) != 0)
		return NULL;
	if (nng_http_res_set_status(res, status) != 0 || nng_http_res_set_header(res, "Content-Type", type) != 0 ||
	    nng_http_res_copy_data(res, body, len) != 0) {
		nng_http_res_free(res);
		return NULL;
	}
	return res;
}

static void finish(nng_aio *aio, nng_http_res *res)
{
	if (!res) {
		nng_aio_finish(aio, NNG_ENOMEM);
		return;
	}
	nng_aio_set_output(aio, 0, res); /* nng owns res from here */
	nng_aio_finish(aio, 0);
}

/* nng thread: ask the loop for a fresh rendering and wait for it (2 s at most). */
static void on_http(nng_aio *aio)
{
	static const char busy[] = "morid is stopping, or its loop did not answer in 2 s\n";
	static const char oom[] = "out of memory\n";
	static const char plain[] = "text/plain; charset=utf-8";
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	pthread_mutex_lock(&M.mu);
	uint64_t mine = ++M.asked;
	int rc = 0;
	if (!M.stopping)
		uv_async_send(&M.async); /* the one libuv call that is safe off the loop thread */
	while (!M.stopping && M.rendered < mine && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&M.cv, &M.mu, &until);
	nng_http_res *res;
	if (M.stopping || M.rendered < mine)
		res = make_res(503, plain, busy, sizeof(busy) - 1);
	else if (!M.text)
		res = make_res(500, plain, oom, sizeof(oom) - 1);
	else /* copied under the lock: the loop may replace the text once we let go */
		res = make_res(200, "text/plain; version=0.0.4; charset=utf-8", M.text, M.len);
	pthread_mutex_unlock(&M.mu);
	finish(aio, res);
}

int metrics_start(struct morid *d)
{
	char host[256], url[300];
	int port, rc;
	if (!d->cfg.metrics_listen[0])
		return 0;
	if (host_port_split(d->cfg.metrics_listen, host, sizeof(host), &port) != 0) {
		mlog_err("metrics", "metrics_listen '%s' is not host:port", d->cfg.metrics_listen);
		return -1;
	}
	snprintf(url, sizeof(url), strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host, port);
	nng_url *u = NULL;
	M.d = d;
	M.stopping = 0;
	M.asked = M.rendered = 0;
	if ((rc = nng_url_parse(&u, url)) != 0 || (rc = nng_http_server_hold(&M.srv, u)) != 0) {
		mlog_err("metrics", "%s: %s", url, nng_strerror(rc));
		if (u)
			nng_url_free(u);
		return -1;
	}
	nng_url_free(u);
	if ((rc = nng_http_handler_alloc(&M.h, "/metrics", on_http)) != 0 ||
	    (rc = nng_http_server_add_handler(M.srv, M.h)) != 0) {
		if (M.h)
			nng_http_handler_free(M.h); /* not added: still ours */
		nng_http_server_release(M.srv);
		mlog_err("metrics", "%s: %s", url, nng_strerror(rc));
		return -1;
	}
	/* the server owns the handler from here */
	uv_async_init(d->loop, &M.async, on_async);
	if ((rc = nng_http_server_start(M.srv)) != 0) {
		mlog_err("metrics", "cannot listen on %s: %s", url, nng_strerror(rc));
		nng_http_server_release(M.srv);
		uv_close((uv_handle_t *)&M.async, NULL);
		return -1;
	}
	M.on = 1;
	mlog_notice("metrics", "Prometheus metrics on %s/metrics", url);
	return 0;
}

void metrics_stop(struct morid *d)
{
	if (!M.on)
		return;
	M.on = 0;
	pthread_mutex_lock(&M.mu);
	M.stopping = 1; /* handlers waiting for the loop answer 503 now: the loop is busy here */
	pthread_cond_broadcast(&M.cv);
	pthread_mutex_unlock(&M.mu);
	nng_http_server_stop(M.srv);
	nng_http_server_release(M.srv);
	uv_close((uv_handle_t *)&M.async, NULL);
	pthread_mutex_lock(&M.mu);
	free(M.text);
	M.text = NULL;
	pthread_mutex_unlock(&M.mu);
}
