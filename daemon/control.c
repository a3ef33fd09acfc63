/* The control socket (nng rep0 on ipc://<runtime_dir>/morid.sock, driven from the loop through
 * nng's receive fd) and the request dispatcher that session sockets share. */
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "memory.h"
#include "morid.h"
#include "peer.h"
#include "rdma.h"
#include "registry.h"

#define RECV_BATCH 32 /* requests per wake-up; level-triggered, the rest wait a turn */

const char *const counter_names[C_COUNT] = {
	"requests", "bad_requests", "denied", "oversize", "clients_total", "clients_died",
	"regions_total", "notifications", "submissions", "bad_submissions", "transfers",
	"transfer_errors", "bytes_sent", "bytes_received", "reloads", "reload_failures",
	"cq_overflows",
};

int morid_reload(struct morid *d, char *err, size_t errlen);

void *rctx_alloc(struct rctx *r, size_t size)
{
	if (r->n == r->cap) {
		size_t ncap = r->cap ? 2 * r->cap : 16;
		void **p = realloc(r->ptrs, ncap * sizeof(*p));
		if (!p)
			return NULL;
		r->ptrs = p;
		r->cap = ncap;
	}
	void *m = calloc(1, size ? size : 1);
	if (m)
		r->ptrs[r->n++] = m;
	return m;
}

char *rctx_strdup(struct rctx *r, const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = rctx_alloc(r, n);
	if (p)
		memcpy(p, s, n);
	return p ? p : (char *)"";
}

void rctx_free(struct rctx *r)
{
	for (int i = 0; i < r->nfds && !r->keep_fds; i++)
		close(r->fds[i]);
	r->nfds = 0;
	for (size_t i = 0; i < r->n; i++)
		free(r->ptrs[i]);
	free(r->ptrs);
	r->ptrs = NULL;
	r->n = r->cap = 0;
}

void reply_error(Mori__Reply *rep, int code, const char *fmt, ...)
{
	static char buf[512]; /* one reply is built at a time on the loop */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	rep->code = code;
	rep->message = buf;
	rep->body_case = MORI__REPLY__BODY__NOT_SET;
}

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
	Mori__ConfigEntry **es = rctx_alloc(r, sizeof(*es) * 64);
	if (!cr || !es) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__config_reply__init(cr);
	cr->path = d->config_from_file ? d->config_path : "(built-in defaults)";
	const char *name, *help;
	char value[1100];
	int reloadable, i;
	for (i = 0; i < 64 && config_entry(&d->cfg, i, &name, value, sizeof(value), &reloadable, &help); i++) {
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

static void do_list(struct morid *d, Mori__ListRequest *lq, Mori__Reply *rep, struct rctx *r)
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
	default:
		reply_error(rep, MORI_EINVAL, "list: unknown table %u (1 clients, 2 memory, 3 peers, 4 transfers)",
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
		do_list(d, req->list, rep, r);
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
	case MORI__REQUEST__BODY_NICS: /* rdma_dev.c (issue 7) */
		rdma_nics_reply(d, rep, r);
		break;
	default:
		count(d, C_BAD_REQUESTS, 1);
		reply_error(rep, MORI_EPROTO, "unknown request type %d", (int)req->body_case);
	}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return deferred;
}

/* ---- nng rep socket ---- */

static int pipe_uid(nng_msg *m, uid_t *uid)
{
	nng_pipe p = nng_msg_get_pipe(m);
	uint64_t v;
	if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &v) != 0)
		return -1;
	*uid = (uid_t)v;
	return 0;
}

static void control_one(struct morid *d, nng_msg *m)
{
	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	Mori__Request *req = NULL;
	uid_t uid = (uid_t)-1;
	count(d, C_REQUESTS, 1);
	if (pipe_uid(m, &uid) != 0 || !config_uid_allowed(&d->cfg, uid)) {
		count(d, C_DENIED, 1);
		mlog_warn("control", "request from uid %d refused: not in allow_uids", (int)uid);
		reply_error(&rep, MORI_EPERM, "uid %d is not allowed (allow_uids)", (int)uid);
	} else if (nng_msg_len(m) > (size_t)d->cfg.max_message_bytes) {
		count(d, C_OVERSIZE, 1);
		mlog_info("control", "message of %zu bytes over the cap", nng_msg_len(m));
		reply_error(&rep, MORI_EMSGSIZE, "message of %zu bytes over max_message_bytes", nng_msg_len(m));
	} else if (!(req = mori__request__unpack(NULL, nng_msg_len(m), nng_msg_body(m)))) {
		count(d, C_BAD_REQUESTS, 1);
		mlog_info("control", "malformed request of %zu bytes", nng_msg_len(m));
		reply_error(&rep, MORI_EPROTO, "malformed request (%zu bytes)", nng_msg_len(m));
	} else {
		rep.id = req->id;
		dispatch(d, NULL, uid, req, &rep, &r, NULL, 0);
	}
	size_t len = mori__reply__get_packed_size(&rep);
	nng_msg_clear(m);
	if (nng_msg_realloc(m, len) == 0) {
		mori__reply__pack(&rep, nng_msg_body(m));
		if (nng_sendmsg(d->rep, m, NNG_FLAG_NONBLOCK) != 0)
			nng_msg_free(m);
	} else {
		nng_msg_free(m);
	}
	rctx_free(&r);
	if (req)
		mori__request__free_unpacked(req, NULL);
}

static void control_readable(uv_poll_t *p, int status, int events)
{
	struct morid *d = p->data;
	for (int i = 0; i < RECV_BATCH; i++) {
		nng_msg *m;
		if (nng_recvmsg(d->rep, &m, NNG_FLAG_NONBLOCK) != 0)
			return;
		control_one(d, m);
	}
}

int control_start(struct morid *d)
{
	char sockpath[300];
	int rc, fd;
	snprintf(sockpath, sizeof(sockpath), "%s/morid.sock", d->cfg.runtime_dir);
	snprintf(d->control_url, sizeof(d->control_url), "ipc://%s", sockpath);
	unlink(sockpath); /* we hold the lock: a socket left there is stale */
	if ((rc = nng_rep0_open(&d->rep)) != 0) {
		mlog_err("control", "nng_rep0_open: %s", nng_strerror(rc));
		return -1;
	}
	/* nng drops (and closes the pipe of) anything larger; a bit of slack lets us answer
	 * moderately oversized messages with an error instead. */
	nng_socket_set_size(d->rep, NNG_OPT_RECVMAXSZ, (size_t)d->cfg.max_message_bytes * 2);
	if ((rc = nng_listen(d->rep, d->control_url, NULL, 0)) != 0) {
		mlog_err("control", "cannot listen on %s: %s", d->control_url, nng_strerror(rc));
		nng_close(d->rep);
		return -1;
	}
	if (chmod(sockpath, (mode_t)d->cfg.socket_mode) != 0)
		mlog_warn("control", "chmod %s: %s", sockpath, strerror(errno));
	if ((rc = nng_socket_get_int(d->rep, NNG_OPT_RECVFD, &fd)) != 0) {
		mlog_err("control", "nng recv fd: %s", nng_strerror(rc));
		nng_close(d->rep);
		return -1;
	}
	uv_poll_init(d->loop, &d->rep_poll, fd);
	d->rep_poll.data = d;
	uv_poll_start(&d->rep_poll, UV_READABLE, control_readable);
	return 0;
}

void control_stop(struct morid *d)
{
	uv_close((uv_handle_t *)&d->rep_poll, NULL);
	nng_close(d->rep);
	char sockpath[300];
	snprintf(sockpath, sizeof(sockpath), "%s/morid.sock", d->cfg.runtime_dir);
	unlink(sockpath);
}
