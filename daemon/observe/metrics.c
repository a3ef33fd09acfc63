/* Prometheus metrics: rendering and the HTTP endpoint, both on the loop (see metrics.h). Above the peer service (it lists peers), below control.c. */
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "host_port.h"
#include "kv/kv_store.h"
#include "log.h"
#include "metrics.h"
#include "core/morid.h"
#include "core/mstats.h"
#include "peer/peer.h"
#include "topo/rdma.h"
#include "transport/rdma/rdma_ctl.h"
#include "transport/rdma/rdma_core.h"
#include "region/registry.h"

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

/* The KV store (UMBP): node-wide gauges and counters, then each uid's. */
static void render_kv(struct buf *b, struct morid *d)
{
	Mori__KvStats s;
	struct rctx r = {0};
	if (kv_stats_fill(d, &s, &r, 1, 0) <= 0) {
		rctx_free(&r);
		return;
	}
	const struct { const char *name, *type, *help; uint64_t v; } e[] = {
		{"mori_kv_dram_keys", "gauge", "Keys whose value is in the KV store's DRAM tier.", s.dram_keys},
		{"mori_kv_dram_bytes", "gauge", "Bytes of values in the DRAM tier.", s.dram_bytes},
		{"mori_kv_dram_allocated_bytes", "gauge", "DRAM tier bytes the values take (64-byte granules).", s.dram_allocated},
		{"mori_kv_dram_capacity_bytes", "gauge", "The DRAM tier's capacity (kv_dram_bytes).", s.dram_capacity},
		{"mori_kv_ssd_keys", "gauge", "Keys whose value is only on the SSD tier.", s.ssd_keys},
		{"mori_kv_ssd_bytes", "gauge", "Bytes of values on the SSD tier.", s.ssd_bytes},
		{"mori_kv_ssd_capacity_bytes", "gauge", "The SSD tier's capacity.", s.ssd_capacity},
		{"mori_kv_leases", "gauge", "Leases of gets held now.", s.leases},
		{"mori_kv_reservations", "gauge", "Puts allocated and not yet committed.", s.reservations},
		{"mori_kv_hits_total", "counter", "Gets that found their key.", s.hits},
		{"mori_kv_misses_total", "counter", "Gets that did not.", s.misses},
		{"mori_kv_puts_total", "counter", "Values committed.", s.puts},
		{"mori_kv_evictions_total", "counter", "Values evicted from DRAM (spilled or dropped).", s.evictions},
		{"mori_kv_spills_total", "counter", "Values written to the SSD tier on eviction.", s.spills},
		{"mori_kv_promotions_total", "counter", "Values read back from SSD into DRAM.", s.promotions},
		{"mori_kv_expired_leases_total", "counter", "Leases and reservations ended by kv_lease_max_ms.", s.expired_leases},
		{"mori_kv_ssd_errors_total", "counter", "Values dropped after SSD checksum or I/O errors.", s.ssd_errors},
		{"mori_kv_index_up", "gauge", "1 when the cluster index (kv_index) answers or is local, else 0.",
		 s.index_state && (!strcmp(s.index_state, "up") || !strcmp(s.index_state, "local"))},
		{"mori_kv_index_published_keys", "gauge", "This node's keys in the cluster index (as of its last heartbeat).",
		 s.index_published},
		{"mori_kv_index_queued", "gauge", "Index updates not yet acknowledged by Redis.", s.index_queued},
		{"mori_kv_index_lag_ms", "gauge", "Age of the oldest index update not yet acknowledged, milliseconds.",
		 s.index_lag_ms},
		{"mori_kv_index_nodes", "gauge", "Live nodes in the cluster index.", s.n_index_nodes},
		{"mori_kv_index_round_trips_total", "counter", "Pipelines answered by the cluster index (Redis).",
		 s.index_round_trips},
		{"mori_kv_index_errors_total", "counter", "Cluster index errors: error replies and lost connections.",
		 s.index_errors},
		{"mori_kv_index_resyncs_total", "counter", "Full publications of this node's keys (connects, Redis restarts).",
		 s.index_resyncs},
		{"mori_kv_index_lookups_total", "counter", "Lookups answered by the cluster index.", s.index_lookups},
		{"mori_kv_index_lookup_seconds_total", "counter", "Time of those lookups, seconds (with _lookups_total: the mean).",
		 0},
	};
	for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
		family(b, e[i].name, e[i].type, e[i].help);
		if (!strcmp(e[i].name, "mori_kv_index_lookup_seconds_total"))
			bprintf(b, "%s %.6f\n", e[i].name, (double)s.index_lookup_us / 1e6);
		else
			bprintf(b, "%s %llu\n", e[i].name, (unsigned long long)e[i].v);
	}
	static const struct { const char *name, *type, *help; } fam[] = {
		{"mori_kv_uid_keys", "gauge", "Keys of the uid in the KV store."},
		{"mori_kv_uid_used_bytes", "gauge", "Bytes the uid's values take, both tiers."},
		{"mori_kv_uid_quota_bytes", "gauge", "The uid's quota (0: none)."},
		{"mori_kv_uid_hits_total", "counter", "The uid's gets that found their key."},
		{"mori_kv_uid_misses_total", "counter", "The uid's gets that did not."},
		{"mori_kv_uid_evictions_total", "counter", "The uid's values evicted from DRAM."},
	};
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		family(b, fam[f].name, fam[f].type, fam[f].help);
		for (size_t i = 0; i < s.n_uids; i++) {
			const Mori__KvUidStats *u = s.uids[i];
			uint64_t v = f == 0 ? u->keys : f == 1 ? u->used_bytes : f == 2 ? u->quota_bytes : f == 3 ? u->hits
				   : f == 4 ? u->misses : u->evictions;
			bprintf(b, "%s{uid=\"%u\"} %llu\n", fam[f].name, u->uid, (unsigned long long)v);
		}
	}
	rctx_free(&r);
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
	render_kv(&b, d);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	*len = b.len;
	return b.p;
}

/* ---- the HTTP endpoint ---- */

/* Served on the loop by a small HTTP/1.1 responder of our own (one request per connection,
 * then close), not nng's HTTP server: nng 1.5.2's has no idle deadline and no connection cap,
 * and anyone who reaches the port could hold connections up to morid's descriptor limit
 * (tens of thousands of idle ones cut off moractl and every client). Here a connection has
 * HTTP_DEADLINE_MS for its request and the reply, and at most HTTP_MAX_CONNS are open (a new
 * one closes the oldest), as the data port does for unauthenticated streams. */
#define HTTP_MAX_CONNS 64
#define HTTP_DEADLINE_MS 5000
#define HTTP_MAX_REQ 4096

struct hconn {
	struct list link; /* M.conns, oldest first */
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_write_t wr;
	int closing, handles; /* handles still open: freed when the last closes */
	size_t len;
	char req[HTTP_MAX_REQ];
	char head[256];
	char *body; /* the reply's body while it is written (ours) */
};

static struct {
	int on;
	struct morid *d;
	uv_tcp_t lsn;
	struct list conns;
	int nconns;
} M;

static void hconn_closed(uv_handle_t *h)
{
	struct hconn *c = h->data;
	if (--c->handles == 0) {
		free(c->body);
		free(c);
	}
}

static void hconn_close(struct hconn *c)
{
	if (c->closing)
		return;
	c->closing = 1;
	list_del(&c->link);
	M.nconns--;
	uv_close((uv_handle_t *)&c->timer, hconn_closed);
	uv_close((uv_handle_t *)&c->tcp, hconn_closed);
}

static void hconn_dropped(struct hconn *c, int evicted)
{
	count(M.d, C_METRICS_CONNS_DROPPED, 1);
	if (evicted)
		mlog_ratelimited(MLOG_WARN, "metrics", "closed the oldest metrics connection: %d were open", HTTP_MAX_CONNS);
	else
		mlog_ratelimited(MLOG_WARN, "metrics", "closed a metrics connection: no complete request and reply "
				 "within %d ms", HTTP_DEADLINE_MS);
	hconn_close(c);
}

static void on_deadline(uv_timer_t *t)
{
	hconn_dropped(t->data, 0);
}

static void on_written(uv_write_t *w, int status)
{
	(void)status;
	hconn_close(w->data); /* one request per connection: the reply said Connection: close */
}

static void reply(struct hconn *c, int status, const char *reason, const char *type, char *body, size_t len,
		  int head_only)
{
	uv_read_stop((uv_stream_t *)&c->tcp);
	c->body = body; /* c owns body from here */
	int n = snprintf(c->head, sizeof(c->head),
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
			 status, reason, type, len);
	uv_buf_t b[2] = {uv_buf_init(c->head, (unsigned)n), uv_buf_init(body, head_only ? 0 : (unsigned)len)};
	c->wr.data = c;
	if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, b, head_only || !len ? 1 : 2, on_written) != 0)
		hconn_close(c);
}

static void reply_text(struct hconn *c, int status, const char *reason, const char *text)
{
	char *body = strdup(text);
	if (!body) {
		hconn_close(c); /* out of memory: no answer beats a wrong one */
		return;
	}
	reply(c, status, reason, "text/plain; charset=utf-8", body, strlen(text), 0);
}

/* The request line of a complete head: GET (or HEAD) /metrics, a query string allowed. */
static void serve(struct hconn *c)
{
	char *sp = memchr(c->req, ' ', c->len);
	int get = sp && sp - c->req == 3 && !memcmp(c->req, "GET", 3);
	int head = sp && sp - c->req == 4 && !memcmp(c->req, "HEAD", 4);
	if (!get && !head) {
		reply_text(c, 405, "Method Not Allowed", "only GET /metrics is served\n");
		return;
	}
	const char *path = sp + 1;
	size_t plen = strcspn(path, " ?\r\n");
	if (plen != 8 || memcmp(path, "/metrics", 8) != 0) {
		reply_text(c, 404, "Not Found", "only GET /metrics is served\n");
		return;
	}
	size_t len = 0;
	char *t = metrics_render(M.d, &len);
	if (!t) {
		reply_text(c, 500, "Internal Server Error", "out of memory\n");
		return;
	}
	reply(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", t, len, head);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	(void)hint;
	struct hconn *c = h->data;
	*buf = uv_buf_init(c->req + c->len, (unsigned)(sizeof(c->req) - c->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	(void)buf;
	struct hconn *c = s->data;
	if (c->closing)
		return;
	if (n < 0) {
		hconn_close(c); /* EOF or error before a whole request */
		return;
	}
	size_t from = c->len >= 3 ? c->len - 3 : 0;
	c->len += (size_t)n;
	for (size_t i = from; i + 1 < c->len; i++) /* the head ends at an empty line */
		if ((c->req[i] == '\n' && c->req[i + 1] == '\n') ||
		    (i + 3 < c->len && !memcmp(c->req + i, "\r\n\r\n", 4))) {
			serve(c);
			return;
		}
	if (c->len == sizeof(c->req))
		reply_text(c, 431, "Request Header Fields Too Large", "request head over 4096 bytes\n");
}

static void on_connection(uv_stream_t *server, int status)
{
	if (status < 0) {
		mlog_ratelimited(MLOG_WARN, "metrics", "accept: %s", uv_strerror(status));
		return;
	}
	struct hconn *c = calloc(1, sizeof(*c));
	if (!c)
		return; /* libuv keeps it pending; it is accepted when memory is back or dropped with the listener */
	if (M.nconns >= HTTP_MAX_CONNS) /* the oldest goes: a scraper's request takes a round trip */
		hconn_dropped(list_entry(M.conns.next, struct hconn, link), 1);
	uv_tcp_init(M.d->loop, &c->tcp);
	uv_timer_init(M.d->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	c->handles = 2;
	list_add(&M.conns, &c->link);
	M.nconns++;
	if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0 ||
	    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
		hconn_close(c);
		return;
	}
	uv_timer_start(&c->timer, on_deadline, HTTP_DEADLINE_MS, 0);
}

int metrics_start(struct morid *d)
{
	char host[256], url[300], ports[16];
	int port, rc;
	if (!d->cfg.metrics_listen[0])
		return 0;
	if (host_port_split(d->cfg.metrics_listen, host, sizeof(host), &port) != 0) {
		mlog_err("metrics", "metrics_listen '%s' is not host:port", d->cfg.metrics_listen);
		return -1;
	}
	snprintf(url, sizeof(url), strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host, port);
	snprintf(ports, sizeof(ports), "%d", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
	if ((rc = getaddrinfo(host, ports, &hints, &ai)) != 0) { /* once, at start-up */
		mlog_err("metrics", "%s: %s", url, gai_strerror(rc));
		return -1;
	}
	M.d = d;
	LIST_INIT(&M.conns);
	M.nconns = 0;
	uv_tcp_init(d->loop, &M.lsn);
	M.lsn.data = &M;
	if ((rc = uv_tcp_bind(&M.lsn, ai->ai_addr, 0)) != 0 || (rc = uv_listen((uv_stream_t *)&M.lsn, 128, on_connection)) != 0) {
		freeaddrinfo(ai);
		mlog_err("metrics", "cannot listen on %s: %s", url, uv_strerror(rc));
		uv_close((uv_handle_t *)&M.lsn, NULL);
		return -1;
	}
	freeaddrinfo(ai);
	M.on = 1;
	mlog_notice("metrics", "Prometheus metrics on %s/metrics (at most %d connections, %d ms each)", url,
		    HTTP_MAX_CONNS, HTTP_DEADLINE_MS);
	return 0;
}

void metrics_stop(struct morid *d)
{
	(void)d;
	if (!M.on)
		return;
	M.on = 0;
	uv_close((uv_handle_t *)&M.lsn, NULL);
	list_each(it, &M.conns)
		hconn_close(list_entry(it, struct hconn, link));
}
