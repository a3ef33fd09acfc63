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
#include "core/sp_rep.h"
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
 * morid speaks nng's req/rep wire protocol over its ipc transport on this socket, so that moractl,
 * peers' tests and anything else built on nng_req0 can call it, served on the loop by sp_rep.c
 * (why not by libnng: sp_rep.h). */
#define CTL_HANDSHAKE_MS 10000        /* to send the 8-byte header */
#define CTL_IDLE_MS 60000             /* a connection with no whole request for this long is closed */
#define CTL_MAX_CONNS 512             /* beyond it the longest-idle connection is closed */
#define CTL_DENIED_MAX (64u << 10)    /* largest request read from a uid not in allow_uids */

static struct {
	struct sp_server *S;
	char path[300];
} L;

static int conn_allowed(struct morid *d, struct sp_conn *k, uid_t *uid)
{
	return sp_conn_uid(k, uid) == 0 && config_uid_allowed(&d->cfg, *uid);
}

/* Like nng, a message over twice max_message_bytes closes the connection. */
static const char *ctl_admit(struct sp_conn *k, uint64_t len)
{
	struct morid *d = sp_conn_arg(k);
	uid_t uid;
	if (len > 2 * (uint64_t)d->cfg.max_message_bytes + 4 * 8) {
		count(d, C_OVERSIZE, 1);
		mlog_info("control", "message of %llu bytes over twice the cap: dropping the connection",
			  (unsigned long long)len);
		return "message over twice max_message_bytes";
	}
	if (len > CTL_DENIED_MAX && !conn_allowed(d, k, &uid)) {
		/* not buffered for a uid that only gets EPERM back */
		count(d, C_DENIED, 1);
		return "large request from a uid not in allow_uids";
	}
	return NULL;
}

static void ctl_request(struct sp_conn *k, const uint8_t *body, size_t blen)
{
	struct morid *d = sp_conn_arg(k);
	Mori__Reply reply = MORI__REPLY__INIT, *rep = &reply;
	struct rctx rc = {0}, *r = &rc;
	Mori__Request *req = NULL;
	uid_t uid = (uid_t)-1;
	count(d, C_REQUESTS, 1);
	if (!conn_allowed(d, k, &uid)) {
		count(d, C_DENIED, 1);
		mlog_ratelimited(MLOG_WARN, "control", "request from uid %d refused: not in allow_uids", (int)uid);
		reply_error(rep, MORI_EPERM, "uid %d is not allowed (allow_uids)", (int)uid);
	} else if (blen > (size_t)d->cfg.max_message_bytes) {
		count(d, C_OVERSIZE, 1);
		mlog_info("control", "message of %zu bytes over the cap", blen);
		reply_error(rep, MORI_EMSGSIZE, "message of %zu bytes over max_message_bytes", blen);
	} else if (!(req = mori__request__unpack(NULL, blen, body))) {
		count(d, C_BAD_REQUESTS, 1);
		mlog_info("control", "malformed request of %zu bytes", blen);
		reply_error(rep, MORI_EPROTO, "malformed request (%zu bytes)", blen);
	} else {
		rep->id = req->id;
		if (dispatch(d, NULL, uid, req, rep, r, NULL, 0) == 1) {
			/* nothing on the control socket may defer: there is no session to answer on */
			mlog_err("control", "request type %d deferred on the control socket", (int)req->body_case);
			reply_error(rep, MORI_EPROTO, "request type %d needs a session", (int)req->body_case);
		}
	}
	sp_conn_reply(k, rep);
	rctx_free(r);
	if (req)
		mori__request__free_unpacked(req, NULL);
}

int control_start(struct morid *d)
{
	snprintf(L.path, sizeof(L.path), "%s/morid.sock", d->cfg.runtime_dir);
	snprintf(d->control_url, sizeof(d->control_url), "ipc://%s", L.path);
	if (strlen(L.path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		mlog_err("control", "%s: path too long for a unix socket", L.path);
		return -1;
	}
	unlink(L.path); /* we hold the lock: a socket left there is stale */
	const struct sp_rep_opts o = {
		.sub = "control",
		.max_conns = CTL_MAX_CONNS,
		.handshake_ms = CTL_HANDSHAKE_MS,
		.idle_ms = CTL_IDLE_MS,
		.trusted_at_accept = 1, /* the uid decides, request by request */
		.dropped = C_COUNT,
		.arg = d,
		.admit = ctl_admit,
		.request = ctl_request,
	};
	if (!(L.S = sp_rep_listen(d, &o, L.path)))
		return -1;
	if (chmod(L.path, (mode_t)d->cfg.socket_mode) != 0)
		mlog_warn("control", "chmod %s: %s", L.path, strerror(errno));
	return 0;
}

void control_stop(struct morid *d)
{
	if (!L.S)
		return;
	sp_rep_close(L.S);
	L.S = NULL;
	unlink(L.path);
}
