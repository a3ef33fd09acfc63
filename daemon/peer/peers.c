/* Cross-node service, life cycle and the listener: start (transports, then the nng rep0
 * listener at `listen` that other daemons' requests arrive on), reload, stop, serving those
 * requests (hello, lookups, opens, and each transport's own), and the listings moractl shows. */
#include <nng/nng.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "core/mstats.h"
#include "core/sp_rep.h"
#include "peer.h"
#include "peer_int.h"
#include "svc/nng_close.h"
#include "region/region.h"

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

/* A request for one of the transports' control planes (RdmaConnect, RdmaRegion). */
static int transports_serve(struct peers *P, const Mori__Request *req, Mori__Reply *rep, struct rctx *r)
{
	for (int i = 0; i < TR_MAX; i++)
		if (P->tr[i] && P->tr[i]->serve && P->tr[i]->serve(P, req, rep, r))
			return 1;
	return 0;
}

/* ---- the listener side: requests from other daemons ---- */

int (*peers_signal_apply)(struct region *g, int add, uint64_t off, uint64_t value);
int (*peers_shmem_serve)(struct peers *P, const Mori__Request *req, const char *from, Mori__Reply *rep,
			 struct rctx *r);
int (*peers_group_serve)(struct peers *P, const Mori__Request *req, const char *from, Mori__Reply *rep,
			 struct rctx *r);
int (*peers_kv_serve)(struct peers *P, const Mori__Request *req, const char *from, Mori__Reply *rep,
		      struct rctx *r);

/* A request from another daemon (or anyone who reached the listener) on connection k. */
static void serve_one(struct sp_conn *k, const uint8_t *body, size_t len)
{
	struct peers *P = sp_conn_arg(k);
	struct morid *d = P->d;
	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	Mori__Request *req = mori__request__unpack(NULL, len, body);
	const char *from = NULL; /* the node the sender authenticated as */
	if (!req) {
		count(d, C_BAD_REQUESTS, 1);
		reply_error(&rep, MORI_EPROTO, "malformed request (%zu bytes)", len);
	} else if (rep.id = req->id, !peer_auth_gate(P, sp_conn_id(k), req, &rep, &r, &from)) {
		struct peer *p = from && strcmp(from, P->self) ? peer_get(P, from, 1) : NULL;
		if (from) /* it just authenticated: the untrusted rules end for k */
			sp_conn_trust(k);
		if (p) /* known for moractl peers */
			p->auth_in = 1;
	} else {
		sp_conn_trust(k);
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
			hr->wall_us = mstats_wall_us(); /* the dialer's clock skew (moractl diagnose) */
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
			/* the grant: the authenticated node (without a key, the one the request claims) */
			const char *asker = from ? from : req->mem_lookup->from;
			if (!region_grants_node(g, asker)) {
				count(d, C_DENIED, 1);
				reply_error(&rep, MORI_EPERM, "name '%s' at %s is not granted to node %s", req->mem_lookup->name,
					    P->self, asker && asker[0] ? asker : "(unnamed)");
				break;
			}
			Mori__MemLookupReply *lr = rctx_alloc(&r, sizeof(*lr));
			if (!lr) {
				reply_error(&rep, MORI_ENOMEM, "out of memory");
				break;
			}
			mori__mem_lookup_reply__init(lr);
			lr->handle = region_handle(d, g, &r, 1); /* the asking daemon keeps the secret */
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
			if (!(g = region_find(d, h->region_id)) || g->gen != h->generation || g->size != h->size ||
			    g->kind != h->kind || !region_secret_ok(g, h->secret.data, h->secret.len)) {
				/* forged and freed look the same */
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
			o->handle = region_handle(d, g, &r, 1);
			rep.body_case = MORI__REPLY__BODY_MEM_OPEN;
			rep.mem_open = o;
			break;
		}
		case MORI__REQUEST__BODY_PEER_GROUP:
			if (!peers_group_serve || !peers_group_serve(P, req, from, &rep, &r))
				reply_error(&rep, MORI_ENOTSUP, "groups are not served at %s", P->self);
			break;
		case MORI__REQUEST__BODY_PEER_SHMEM_AMO:
			if (!peers_shmem_serve || !peers_shmem_serve(P, req, from, &rep, &r))
				reply_error(&rep, MORI_ENOTSUP, "MORI-SHMEM's proxy is not served at %s", P->self);
			break;
		case MORI__REQUEST__BODY_PEER_KV:
			if (!peers_kv_serve || !peers_kv_serve(P, req, from, &rep, &r))
				reply_error(&rep, MORI_ENOTSUP, "the KV store is not served at %s", P->self);
			break;
		case MORI__REQUEST__BODY_PEER_NOTIFY:
			xnotif_serve(P, req->peer_notify, &rep, &r);
			break;
		default:
			if (!transports_serve(P, req, &rep, &r))
				reply_error(&rep, MORI_EPROTO, "request %d is not served to peer daemons",
					    (int)req->body_case);
		}
	}
	sp_conn_reply(k, &rep);
	rctx_free(&r);
	if (req)
		mori__request__free_unpacked(req, NULL);
}

/* ---- start and stop ---- */

static void handle_closed(uv_handle_t *h)
{
	peers_release(h->data);
}

static const char *peer_admit(struct sp_conn *k, uint64_t len)
{
	return len > PEER_MAX_MSG ? "message over 1 MiB" : NULL;
}

static void peer_conn_closed(struct sp_conn *k)
{
	peer_auth_forget(sp_conn_arg(k), sp_conn_id(k));
}

static int listen_requests(struct peers *P)
{
	struct morid *d = P->d;
	const struct sp_rep_opts o = {
		.sub = "peer",
		.tcp = 1,
		.max_conns = PEER_MAX_CONNS,
		.max_untrusted = PEER_UNAUTH_MAX,
		.untrusted_max_msg = PEER_UNAUTH_MAX_MSG,
		.trust_ms = PEER_AUTH_DEADLINE_MS,
		.handshake_ms = PEER_AUTH_DEADLINE_MS,
		.keep_fds_pct = (int)d->cfg.local_fds_pct,
		.dropped = C_PEER_CONNS_DROPPED,
		.arg = P,
		.admit = peer_admit,
		.request = serve_one,
		.closed = peer_conn_closed,
	};
	if (!(P->lsn = sp_rep_listen(d, &o, d->cfg.listen)))
		return -1;
	P->on = 1;
	mlog_notice("peer", "peer listener tcp://%s (node %s, data port %u; at most %d unauthenticated connections, "
		    "%d ms each; %d %% of the descriptors kept for local sessions)", d->cfg.listen, P->self,
		    P->data_port, PEER_UNAUTH_MAX, PEER_AUTH_DEADLINE_MS, (int)d->cfg.local_fds_pct);
	return 0;
}

int peers_start(struct morid *d, const struct transport *const *tr, int ntr)
{
	struct peers *P = calloc(1, sizeof(*P));
	if (!P)
		return -1;
	d->peers = P;
	P->d = d;
	LIST_INIT(&P->peers);
	htab_init(&P->xfers);
	htab_init(&P->byuser);
	htab_init(&P->refs);
	P->next_deadline_us = UINT64_MAX;
	const char *t = d->cfg.transport;
	P->forced = strcmp(t, "auto") != 0;
	for (int i = 0; i < ntr && P->npref < TR_MAX; i++) {
		P->tr[tr[i]->id] = tr[i];
		P->pref[P->npref++] = tr[i];
		if (P->forced && !strcmp(t, tr[i]->name))
			P->only = tr[i];
	}
	xnotif_hooks(P);
	if (peer_auth_start(P) != 0)
		return -1;
	uv_timer_init(d->loop, &P->tick);
	uv_prepare_init(d->loop, &P->prep);
	P->tick.data = P->prep.data = P;
	peers_prep_init(P);
	P->handles = 3;
	snprintf(P->self, sizeof(P->self), "%s", d->cfg.advertise[0] ? d->cfg.advertise : d->cfg.listen);
	if (!d->cfg.listen[0])
		mlog_info("peer", "no listen address: cross-node service off");
	/* Transports first: the hello tells peers the TCP transport's data port. Each starts
	 * "off" where it cannot run (no listener, no device). */
	for (int i = 0; i < TR_MAX; i++)
		if (P->tr[i] && P->tr[i]->start(P) != 0)
			return -1;
	if (!d->cfg.listen[0])
		return 0;
	if (listen_requests(P) != 0)
		return -1;
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
	/* Clients were destroyed first (peer_client_gone). What is left is ours: transfers end,
	 * then requests (their callbacks see MORI_ECANCELED), then the transports let go. */
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		list_each(xt, &p->xfers)
			xfer_complete(list_entry(xt, struct xfer, plink), MORI_ECANCELED, "daemon stopping");
		peer_rpcs_stop(p);
	}
	for (int i = TR_MAX - 1; i >= 0; i--)
		if (P->tr[i])
			P->tr[i]->stop(P);
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		p->gone = 1;
		if (p->resolving)
			uv_cancel((uv_req_t *)&p->gai); /* its callback still comes, then lets go */
		peer_close_requests(p);
		list_del(&p->link);
		peer_unref(p); /* the table's reference */
	}
	for (int i = 0; i < HBUCKETS; i++)
		list_each(it, &P->refs.b[i])
			free(list_entry(it, struct rref, hlink));
	sp_rep_close(P->lsn); /* its connections' close hooks reach the auth tables: before those go */
	P->lsn = NULL;
	P->on = 0;
	peer_auth_stop(P);
	uv_close((uv_handle_t *)&P->tick, handle_closed);
	uv_close((uv_handle_t *)&P->prep, handle_closed);
	uv_close((uv_handle_t *)&P->prep_idle, handle_closed);
	d->peers = NULL;
}

/* moractl peers: which transport carries p's transfers now, over how many lanes. */
static void describe(struct peer *p, Mori__PeerInfo *pi)
{
	struct peers *P = p->P;
	uint32_t lanes = 0;
	/* none carries p yet: the last resort will */
	pi->transport = P->npref ? (char *)P->pref[P->npref - 1]->name : "";
	for (int i = 0; i < P->npref; i++) {
		if (P->pref[i]->carries && P->pref[i]->carries(p, &lanes)) {
			pi->transport = (char *)P->pref[i]->name;
			break;
		}
	}
	/* the reply's streams field counts TCP data streams, whoever carries transfers */
	if (P->tr[TR_TCP] && P->tr[TR_TCP]->carries && !P->tr[TR_TCP]->carries(p, &pi->streams))
		pi->streams = 0;
}

/* ---- listings ---- */

const char *peer_auth_status(struct morid *d, int *unauth)
{
	struct peers *P = d->peers;
	*unauth = P && P->on && !P->key.on;
	return P ? peer_auth_describe(P) : "no peer service";
}

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
		describe(p, pi);
		if (!d->peers->key.on)
			pi->auth = "off (no cluster key)";
		else if (p->auth == PA_DONE)
			pi->auth = "yes";
		else if (p->auth_in)
			pi->auth = "yes (it dialled us)";
		else
			pi->auth = p->state == PS_DOWN && p->why[0] ? "no" : "not yet";
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
