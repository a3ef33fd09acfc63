/* Cross-node service, what this node's clients ask of it: lookups and opens at other daemons
 * (answered when the peer answers), remote refs, prepared descriptor lists, transfer
 * submissions (validated and copied out of the arena at once, then handed to the transport
 * xfer_route picks), and forgetting everything of a client that goes. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "peer.h"
#include "peer_int.h"
#include "region/region.h"

/* The answer to a client's lookup or open at another daemon: a remote ref, or the error. */
static void open_done(struct rpc *q, struct peer *p, const Mori__Reply *rp, int code, const char *msg)
{
	struct peers *P = p->P;
	struct client *c = q->c;
	const Mori__Handle *h = NULL;
	if (!c)
		return; /* the client went away meanwhile */
	if (!code && rp->body_case == MORI__REPLY__BODY_MEM_LOOKUP && rp->mem_lookup)
		h = rp->mem_lookup->handle;
	else if (!code && rp->body_case == MORI__REPLY__BODY_MEM_OPEN && rp->mem_open)
		h = rp->mem_open->handle;
	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	rep.id = q->creq;
	if (code) {
		reply_error(&rep, code, "%s", msg);
	} else if (!h || !h->region_id || !h->epoch) {
		reply_error(&rep, MORI_EPROTO, "peer %s answered without a handle", p->addr);
	} else if (h->secret.len != REGION_SECRET_BYTES) {
		reply_error(&rep, MORI_EPROTO, "peer %s answered without the region's secret", p->addr);
	} else {
		struct rref *f = calloc(1, sizeof(*f));
		Mori__MemOpenReply *o = rctx_alloc(&r, sizeof(*o));
		Mori__Handle *hh = rctx_alloc(&r, sizeof(*hh));
		if (!f || !o || !hh) {
			free(f);
			reply_error(&rep, MORI_ENOMEM, "out of memory");
		} else {
			f->id = REF_TAG | ++P->next_ref;
			f->c = c;
			f->p = p;
			f->epoch = h->epoch;
			f->region = h->region_id;
			f->gen = h->generation;
			f->kind = h->kind;
			f->size = h->size;
			memcpy(f->secret, h->secret.data, sizeof(f->secret)); /* ours to name it with; never the client's */
			htab_add(&P->refs, f->id, &f->hlink);
			mori__mem_open_reply__init(o);
			mori__handle__init(hh);
			hh->node = rctx_strdup(&r, h->node && h->node[0] ? h->node : p->addr);
			hh->epoch = h->epoch;
			hh->region_id = h->region_id;
			hh->generation = h->generation;
			hh->size = h->size;
			hh->kind = h->kind;
			o->handle = hh;
			o->remote = 1;
			o->remote_ref = f->id;
			rep.body_case = MORI__REPLY__BODY_MEM_OPEN;
			rep.mem_open = o;
			mlog_debug("peer", "client %llu opened %s region %llu as ref %llx", (unsigned long long)c->id,
				   p->addr, (unsigned long long)h->region_id, (unsigned long long)f->id);
		}
	}
	client_reply(c, &rep, &r);
	rctx_free(&r);
}

/* ---- remote refs and prepared lists ---- */

/* Every descriptor of ds[0..n) non-empty and inside both regions, and the sum fits in 64 bits?
 * 0 with the sum in *total; else the code, with the bad index in *bad (n: the sum overflowed). */
static int descs_check(const mori_desc *ds, uint32_t n, uint64_t lsize, uint64_t rsize, uint32_t *bad,
		       uint64_t *total)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < n; i++) {
		const mori_desc *x = &ds[i];
		*bad = i;
		if (x->length == 0)
			return MORI_EINVAL;
		if (x->local_offset > lsize || x->length > lsize - x->local_offset ||
		    x->remote_offset > rsize || x->length > rsize - x->remote_offset)
			return MORI_ERANGE;
		sum += x->length;
		if (sum < x->length) {
			*bad = n;
			return MORI_EINVAL;
		}
	}
	*total = sum;
	return MORI_OK;
}

static int ref_close(struct peers *P, struct client *c, uint64_t id)
{
	list_each(it, htab_bucket(&P->refs, id)) {
		struct rref *f = list_entry(it, struct rref, hlink);
		if (f->id == id && f->c == c) {
			htab_del(&P->refs, &f->hlink);
			free(f);
			return 1;
		}
	}
	return 0;
}

int peer_close_ref(struct morid *d, struct client *c, uint64_t id)
{
	struct peers *P = d->peers;
	if (!P || !(id & REF_TAG))
		return 0;
	ref_close(P, c, id);
	return 1;
}

struct rref *peer_ref_find(struct peers *P, struct client *c, uint64_t id)
{
	list_each(it, htab_bucket(&P->refs, id)) {
		struct rref *f = list_entry(it, struct rref, hlink);
		if (f->id == id && f->c == c)
			return f;
	}
	return NULL;
}

struct plist *peer_list_find(struct client *c, uint64_t id)
{
	list_each(it, &c->lists) {
		struct plist *l = list_entry(it, struct plist, link);
		if (l->id == id)
			return l;
	}
	return NULL;
}

#define PREP_SYNC_BYTES (1u << 20) /* lists up to this are read and checked at once */
#define PREP_STEP_BYTES (1u << 20) /* larger ones this much per loop turn */

static void prep_reply(struct client *c, uint64_t req_id, struct plist *l, int code, const char *msg)
{
	Mori__Reply rep = MORI__REPLY__INIT;
	Mori__XferPrepReply pr = MORI__XFER_PREP_REPLY__INIT;
	struct rctx r = {0};
	rep.id = req_id;
	if (code) {
		reply_error(&rep, code, "%s", msg);
	} else {
		pr.list_id = l->id;
		rep.body_case = MORI__REPLY__BODY_XFER_PREP;
		rep.xfer_prep = &pr;
	}
	client_reply(c, &rep, &r);
	rctx_free(&r);
}

/* Read (pread: the client may still write to its memfd; we check our copy) and check
 * descriptors [j->done/24, +k): 0, or the code with the reason in msg. */
static int prep_chunk(struct prep_job *j, uint64_t bytes, char *msg, size_t len)
{
	uint64_t got = 0, first = j->done / sizeof(mori_desc);
	while (got < bytes) {
		ssize_t n = pread(j->fd, (char *)j->descs + j->done + got, bytes - got, (off_t)(j->done + got));
		if (n <= 0) {
			snprintf(msg, len, "prep: reading descriptors: %s", n < 0 ? strerror(errno) : "short file");
			return MORI_ESYS;
		}
		got += (uint64_t)n;
	}
	uint32_t k = (uint32_t)(bytes / sizeof(mori_desc)), i;
	uint64_t sum = 0;
	mori_desc *ds = j->descs + first;
	int code = descs_check(ds, k, j->lsize, j->rsize, &i, &sum);
	if (!code && j->total + sum < sum) {
		code = MORI_EINVAL;
		i = k;
	}
	if (code) {
		if (i == k)
			snprintf(msg, len, "prep: the descriptors add up to more than 2^64 bytes");
		else
			snprintf(msg, len, "prep: descriptor %llu (local %llu, remote %llu, length %llu) %s",
				 (unsigned long long)(first + i), (unsigned long long)ds[i].local_offset,
				 (unsigned long long)ds[i].remote_offset, (unsigned long long)ds[i].length,
				 code == MORI_EINVAL ? "has length 0" : "falls outside a region");
		return code;
	}
	j->total += sum;
	j->done += bytes;
	return MORI_OK;
}

/* j is read and checked (code 0: it becomes the client's list) or failed; it goes. Returns the
 * list, or NULL. */
static struct plist *prep_end(struct peers *P, struct prep_job *j, int code, const char *msg)
{
	struct plist *l = NULL;
	if (!code && !(l = calloc(1, sizeof(*l)))) {
		code = MORI_ENOMEM;
		msg = "prep: out of memory";
	}
	if (code) {
		j->c->list_bytes -= j->bytes;
		P->list_bytes -= j->bytes;
		P->nlists--;
		free(j->descs);
	} else {
		l->id = LIST_TAG | ++P->next_list;
		l->local_region = j->local_region;
		l->ref = j->ref;
		l->n = j->n;
		l->descs = j->descs; /* the list owns them now */
		list_add(&j->c->lists, &l->link);
	}
	if (j->req_id)
		prep_reply(j->c, j->req_id, l, code, msg);
	if (j->fd >= 0)
		close(j->fd);
	list_del(&j->link);
	free(j);
	return l;
}

/* One step of the first large list waiting; it then goes to the back (round robin). */
static void on_prep_idle(uv_idle_t *h)
{
	struct peers *P = h->data;
	if (P->preps.next == &P->preps) {
		uv_idle_stop(h);
		return;
	}
	struct prep_job *j = list_entry(P->preps.next, struct prep_job, link);
	char msg[300];
	uint64_t step = j->bytes - j->done < PREP_STEP_BYTES ? j->bytes - j->done : PREP_STEP_BYTES;
	step -= step % sizeof(mori_desc);
	int code = prep_chunk(j, step, msg, sizeof(msg));
	if (code || j->done == j->bytes) {
		prep_end(P, j, code, msg);
		return;
	}
	list_del(&j->link);
	list_add(&P->preps, &j->link);
}

/* The prepared lists a client may hold: counted (client_max_lists), per list
 * (client_max_list_descs) and in bytes (client_max_list_bytes, large ones in progress included);
 * and all clients' together (node_max_lists, node_max_list_bytes), so that many clients within
 * their own caps cannot take the node's memory. 0, or the code with the reason in rep. */
static int prep_caps(struct peers *P, struct client *c, uint32_t ndescs, uint64_t bytes, Mori__Reply *rep)
{
	struct morid *d = P->d;
	uint64_t held = 0;
	list_each(it, &c->lists)
		held++;
	if (ndescs == 0 || ndescs > (1u << 24)) {
		reply_error(rep, MORI_EINVAL, "prep: %u descriptors (1 .. 16777216)", ndescs);
		return MORI_EINVAL;
	}
	if ((int64_t)ndescs > d->cfg.client_max_list_descs) {
		reply_error(rep, MORI_ENOMEM, "prep: %u descriptors in one list, more than client_max_list_descs (%lld)",
			    ndescs, (long long)d->cfg.client_max_list_descs);
		return MORI_ENOMEM;
	}
	if (c->list_bytes + bytes > (uint64_t)d->cfg.client_max_list_bytes) {
		reply_error(rep, MORI_ENOMEM, "prep: %llu bytes of descriptors would make this client's lists %llu bytes, "
			    "more than client_max_list_bytes (%lld)", (unsigned long long)bytes,
			    (unsigned long long)(c->list_bytes + bytes), (long long)d->cfg.client_max_list_bytes);
		return MORI_ENOMEM;
	}
	if (held >= (uint64_t)d->cfg.client_max_lists) {
		reply_error(rep, MORI_ENOMEM, "prep: this client already holds %llu prepared lists (client_max_lists)",
			    (unsigned long long)held);
		return MORI_ENOMEM;
	}
	if (P->list_bytes + bytes > (uint64_t)d->cfg.node_max_list_bytes) {
		count(d, C_NODE_CAP_REFUSALS, 1);
		reply_error(rep, MORI_ENOMEM, "prep: %llu bytes of descriptors would make the prepared lists of all clients "
			    "%llu bytes, more than node_max_list_bytes (%lld)", (unsigned long long)bytes,
			    (unsigned long long)(P->list_bytes + bytes), (long long)d->cfg.node_max_list_bytes);
		return MORI_ENOMEM;
	}
	if (P->nlists >= (uint64_t)d->cfg.node_max_lists) {
		count(d, C_NODE_CAP_REFUSALS, 1);
		reply_error(rep, MORI_ENOMEM, "prep: all clients together hold %llu prepared lists, node_max_lists (%lld)",
			    (unsigned long long)P->nlists, (long long)d->cfg.node_max_lists);
		return MORI_ENOMEM;
	}
	return 0;
}

/* Returns 1 when the reply is deferred (a large list, read in steps); takes *fd then. */
static int prep_list(struct peers *P, struct client *c, Mori__XferPrep *xp, Mori__Reply *rep,
		     struct rctx *r, int *fd, uint64_t req_id)
{
	struct morid *d = P->d;
	struct region *g = region_find(d, xp->local_region);
	struct rref *f = peer_ref_find(P, c, xp->remote_ref);
	struct stat st;
	if (!g || g->owner != c) {
		reply_error(rep, MORI_ENOENT, "prep: region %llu is not registered by this client",
			    (unsigned long long)xp->local_region);
		return 0;
	}
	if (!f) {
		reply_error(rep, MORI_ENOENT, "prep: remote ref %llx is not a remote region this client opened",
			    (unsigned long long)xp->remote_ref);
		return 0;
	}
	uint64_t bytes = (uint64_t)xp->count * sizeof(mori_desc);
	if (prep_caps(P, c, xp->count, bytes, rep) != 0)
		return 0;
	if (*fd < 0 || fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < bytes) {
		reply_error(rep, MORI_EINVAL, "prep: the descriptors must come as a memfd of %llu bytes",
			    (unsigned long long)bytes);
		return 0;
	}
	struct prep_job *j = calloc(1, sizeof(*j));
	mori_desc *ds = j ? malloc(bytes) : NULL;
	if (!ds) {
		free(j);
		reply_error(rep, MORI_ENOMEM, "prep: out of memory for %u descriptors", xp->count);
		return 0;
	}
	*j = (struct prep_job){.c = c, .fd = *fd, .local_region = g->id, .ref = f->id, .lsize = g->size,
			       .rsize = f->size, .n = xp->count, .bytes = bytes, .descs = ds};
	*fd = -1; /* the job's */
	c->list_bytes += bytes;
	P->list_bytes += bytes;
	P->nlists++;
	list_add(&P->preps, &j->link);
	if (bytes > PREP_SYNC_BYTES) {
		j->req_id = req_id;
		if (!uv_is_active((uv_handle_t *)&P->prep_idle))
			uv_idle_start(&P->prep_idle, on_prep_idle);
		return 1;
	}
	char msg[300];
	int code = prep_chunk(j, bytes, msg, sizeof(msg));
	struct plist *l = prep_end(P, j, code, msg);
	if (code || !l) {
		reply_error(rep, code ? code : MORI_ENOMEM, "%s", code ? msg : "prep: out of memory");
		return 0;
	}
	Mori__XferPrepReply *pr = rctx_alloc(r, sizeof(*pr));
	if (!pr) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return 0;
	}
	mori__xfer_prep_reply__init(pr);
	pr->list_id = l->id;
	rep->body_case = MORI__REPLY__BODY_XFER_PREP;
	rep->xfer_prep = pr;
	return 0;
}

/* A client that goes takes its lists in progress with it (no reply: nobody to send it to). */
static void preps_client_gone(struct peers *P, struct client *c)
{
	list_each(it, &P->preps) {
		struct prep_job *j = list_entry(it, struct prep_job, link);
		if (j->c == c) {
			j->req_id = 0;
			prep_end(P, j, MORI_ECANCELED, "client gone");
		}
	}
}

void peers_prep_init(struct peers *P)
{
	LIST_INIT(&P->preps);
	uv_idle_init(P->d->loop, &P->prep_idle);
	P->prep_idle.data = P;
}

static void plist_free(struct peers *P, struct client *c, struct plist *l)
{
	c->list_bytes -= (uint64_t)l->n * sizeof(mori_desc);
	P->list_bytes -= (uint64_t)l->n * sizeof(mori_desc);
	P->nlists--;
	list_del(&l->link);
	free(l->descs);
	free(l);
}

int peer_handle_request(struct morid *d, struct client *c, Mori__Request *req, Mori__Reply *rep,
			struct rctx *r, int *fds, int nfds)
{
	struct peers *P = d->peers;
	int fd = nfds > 0 ? fds[0] : -1;
	for (int i = 1; i < nfds; i++)
		close(fds[i]);
	int deferred = 0;
	switch (req->body_case) {
	case MORI__REQUEST__BODY_PEER_HELLO: {
		/* On the control socket: the same answer a peer gets (a probe). */
		Mori__PeerHelloReply *hr = rctx_alloc(r, sizeof(*hr));
		if (!hr) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			break;
		}
		mori__peer_hello_reply__init(hr);
		hr->epoch = d->epoch;
		hr->node = P && P->on ? P->self : "";
		hr->data_port = P ? P->data_port : 0;
		rep->body_case = MORI__REPLY__BODY_PEER_HELLO;
		rep->peer_hello = hr;
		break;
	}
	case MORI__REQUEST__BODY_MEM_LOOKUP:
	case MORI__REQUEST__BODY_MEM_OPEN: {
		int lookup = req->body_case == MORI__REQUEST__BODY_MEM_LOOKUP;
		const char *node = lookup ? req->mem_lookup->node : (req->mem_open->handle ? req->mem_open->handle->node : "");
		if (!c) {
			reply_error(rep, MORI_EPROTO, "memory requests need an attached session");
			break;
		}
		if (!P || !P->on) {
			reply_error(rep, MORI_ECONN, "cannot reach %s: no peer listener configured here (set listen= in morid.conf)",
				    node);
			break;
		}
		if (lookup && (!req->mem_lookup->name || !req->mem_lookup->name[0] ||
			       strlen(req->mem_lookup->name) >= 128)) {
			reply_error(rep, MORI_EINVAL, "lookup: names are 1..127 bytes");
			break;
		}
		char pwhy[300];
		int pcode = MORI_EINVAL;
		struct peer *p = peer_get_client(P, node, &pcode, pwhy, sizeof(pwhy));
		if (!p) {
			reply_error(rep, pcode, "%s", pwhy);
			break;
		}
		Mori__Request fw = MORI__REQUEST__INIT;
		Mori__MemLookup ml = MORI__MEM_LOOKUP__INIT;
		Mori__MemOpen mo = MORI__MEM_OPEN__INIT;
		if (lookup) {
			ml.name = req->mem_lookup->name;
			ml.node = "";
			ml.from = P->self;
			fw.body_case = MORI__REQUEST__BODY_MEM_LOOKUP;
			fw.mem_lookup = &ml;
		} else {
			mo.handle = req->mem_open->handle;
			fw.body_case = MORI__REQUEST__BODY_MEM_OPEN;
			fw.mem_open = &mo;
		}
		struct rpc *q = peer_rpc(p, &fw, PEER_LOOKUP_TIMEOUT_MS, open_done, NULL);
		if (!q) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			break;
		}
		q->c = c;
		q->creq = req->id;
		peer_use(p);
		deferred = 1;
		break;
	}
	case MORI__REQUEST__BODY_MEM_CLOSE:
		if (c && P)
			ref_close(P, c, req->mem_close->region_id);
		break;
	case MORI__REQUEST__BODY_XFER_PREP:
		if (!c || !P || !P->on) {
			reply_error(rep, MORI_ECONN, "prep: no peer listener configured here (set listen= in morid.conf)");
			break;
		}
		deferred = prep_list(P, c, req->xfer_prep, rep, r, &fd, req->id);
		break;
	case MORI__REQUEST__BODY_XFER_UNPREP: {
		struct plist *l = c ? peer_list_find(c, req->xfer_unprep->list_id) : NULL;
		if (!l)
			reply_error(rep, MORI_ENOENT, "unprep: list %llx is not this client's",
				    (unsigned long long)req->xfer_unprep->list_id);
		else
			plist_free(P, c, l);
		break;
	}
	default:
		reply_error(rep, MORI_EPROTO, "not a cross-node request (%d)", (int)req->body_case);
	}
	if (fd >= 0)
		close(fd);
	return deferred;
}

/* ---- submissions, client death ---- */

void peer_submit(struct morid *d, struct client *c, const struct mori_sqe *e)
{
	struct peers *P = d->peers;
	if (!P || !P->on) {
		if (e->op == SQE_CANCEL)
			return;
		struct mori_cqe x = {.type = CQE_XFER_DONE, .code = MORI_ENOTSUP, .user_data = e->user_data};
		snprintf(x.msg, sizeof(x.msg), "no peer listener (listen=) here");
		client_post(c, &x);
		count(d, C_XFER_ERRORS, 1);
		return;
	}
	xfer_submit(P, c, e);
}

void peer_client_gone(struct morid *d, struct client *c)
{
	struct peers *P = d->peers;
	if (!P)
		return; /* no peer service: no lists */
	list_each(it, &c->lists)
		plist_free(P, c, list_entry(it, struct plist, link));
	preps_client_gone(P, c);
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		list_each(xt, &p->xfers) {
			struct xfer *x = list_entry(xt, struct xfer, plink);
			if (x->c != c)
				continue;
			x->c = NULL; /* nobody to tell */
			if (!x->notif_stage) /* its data landed: its notification still goes */
				xfer_complete(x, MORI_ECANCELED, "client gone");
		}
		list_each(qt, &p->rpcs) {
			struct rpc *q = list_entry(qt, struct rpc, link);
			if (q->c == c)
				q->c = NULL;
		}
	}
	for (int i = 0; i < HBUCKETS; i++)
		list_each(it, &P->refs.b[i]) {
			struct rref *f = list_entry(it, struct rref, hlink);
			if (f->c == c) {
				htab_del(&P->refs, &f->hlink);
				free(f);
			}
		}
}

/* ---- submissions ---- */

/* With the transport forced, why it cannot carry anything here (refused at submission). */
static const char *refused(struct peers *P)
{
	if (!P->forced)
		return NULL;
	if (!P->only)
		return "that transport is not built into this morid";
	return P->only->refuses ? P->only->refuses(P) : NULL;
}

static void xfer_go(struct peers *P, struct xfer *x);

static uint64_t user_key(uint64_t client_id, uint64_t user_data)
{
	return client_id * 0x9e3779b97f4a7c15ull ^ user_data;
}

static struct xfer *find_user(struct peers *P, uint64_t client_id, uint64_t user_data)
{
	list_each(it, htab_bucket(&P->byuser, user_key(client_id, user_data))) {
		struct xfer *x = list_entry(it, struct xfer, ulink);
		if (x->client_id == client_id && x->user_data == user_data)
			return x;
	}
	return NULL;
}

static void reject(struct morid *d, struct client *c, const struct mori_sqe *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void reject(struct morid *d, struct client *c, const struct mori_sqe *e, int code, const char *fmt, ...)
{
	struct mori_cqe x = {.type = CQE_XFER_DONE, .code = code, .user_data = e->user_data};
	char msg[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cqe_msg(&x, msg);
	client_post(c, &x);
	count(d, C_BAD_SQES, 1);
	count(d, C_XFER_ERRORS, 1);
	mlog_info("peer", "client %llu: transfer %llu refused: %s: %s", (unsigned long long)c->id,
		  (unsigned long long)e->user_data, mori_strerror(code), msg);
}

/* The submission's descriptors, copied out of the arena (or from prepared list l by index) and
 * checked against the local and remote region sizes; NULL after the submission was refused. */
static mori_desc *copy_descs(struct morid *d, struct client *c, const struct mori_sqe *e, const uint8_t *arena,
			     const struct plist *l, uint64_t lsize, uint64_t rsize, uint64_t *total_out)
{
	mori_desc *ds = malloc((size_t)e->count * sizeof(mori_desc));
	if (!ds) {
		reject(d, c, e, MORI_ENOMEM, "out of memory for %u descriptors", e->count);
		return NULL;
	}
	/* Copy first, then check the copy: the client may scribble on its arena meanwhile. */
	uint64_t total = 0;
	if (l) {
		for (uint32_t i = 0; i < e->count; i++) {
			uint32_t k;
			memcpy(&k, arena + (uint64_t)i * 4, 4);
			if (k >= l->n) {
				free(ds);
				reject(d, c, e, MORI_ERANGE, "index %u: %u >= list length %u", i, k, l->n);
				return NULL;
			}
			ds[i] = l->descs[k];
		}
	} else {
		memcpy(ds, arena, (size_t)e->count * sizeof(mori_desc));
	}
	uint32_t i;
	int code = descs_check(ds, e->count, lsize, rsize, &i, &total);
	if (code) {
		free(ds);
		if (i == e->count)
			reject(d, c, e, code, "batch larger than 2^64 bytes");
		else
			reject(d, c, e, code, "descriptor %u %s", i, code == MORI_EINVAL ? "has length 0" : "outside a region");
		return NULL;
	}
	*total_out = total;
	return ds;
}

void xfer_submit(struct peers *P, struct client *c, const struct mori_sqe *e)
{
	struct morid *d = P->d;
	if (e->op == SQE_CANCEL) {
		struct xfer *x = find_user(P, c->id, e->user_data);
		if (x)
			xfer_complete(x, MORI_ECANCELED, "cancelled");
		return;
	}
	int list = e->op == SQE_XFER_LIST;
	if (find_user(P, c->id, e->user_data)) {
		reject(d, c, e, MORI_EINVAL, "transfer id %llu is already in flight", (unsigned long long)e->user_data);
		return;
	}
	struct region *g = region_find(d, e->local_region);
	if (!g || g->owner != c) {
		reject(d, c, e, MORI_ENOENT, "local region %llu not yours", (unsigned long long)e->local_region);
		return;
	}
	const char *norm = refused(P);
	if (norm) {
		reject(d, c, e, MORI_ENOTSUP, "transport = %s, but %s", d->cfg.transport, norm);
		return;
	}
	char why[300];
	int rcode = region_reach(g, why, sizeof(why));
	if (rcode) {
		reject(d, c, e, rcode, "%s", why);
		return;
	}
	if (e->count == 0) {
		reject(d, c, e, MORI_EINVAL, "empty batch");
		return;
	}
	uint64_t esz = list ? sizeof(uint32_t) : sizeof(mori_desc);
	if (e->arg_off > c->lay.arena_bytes || (uint64_t)e->count * esz > c->lay.arena_bytes - e->arg_off) {
		reject(d, c, e, MORI_ERANGE, "arguments outside the arena");
		return;
	}
	const uint8_t *arena = (const uint8_t *)c->ring + c->lay.arena_off + e->arg_off;
	struct rref *f;
	struct plist *l = NULL;
	if (list) {
		if (!(l = peer_list_find(c, e->remote))) {
			reject(d, c, e, MORI_ENOENT, "unknown prepared list %llx", (unsigned long long)e->remote);
			return;
		}
		if (l->local_region != g->id) {
			reject(d, c, e, MORI_EINVAL, "list was prepared for region %llu", (unsigned long long)l->local_region);
			return;
		}
		f = peer_ref_find(P, c, l->ref);
	} else {
		f = peer_ref_find(P, c, e->remote);
	}
	if (!f) {
		reject(d, c, e, MORI_ENOENT, "remote region not open (ref %llx)", (unsigned long long)(list ? l->ref : e->remote));
		return;
	}
	uint64_t total;
	mori_desc *ds = copy_descs(d, c, e, arena, l, g->size, f->size, &total);
	if (!ds)
		return;
	struct xfer *x = calloc(1, sizeof(*x));
	if (!x) {
		free(ds);
		reject(d, c, e, MORI_ENOMEM, "out of memory");
		return;
	}
	struct peer *p = f->p;
	uint64_t now = mori_now_us();
	uint64_t tmo = e->timeout_us ? e->timeout_us : (uint64_t)d->cfg.transfer_timeout_ms * 1000;
	if (tmo >> 63)
		tmo = 1; /* a negative time left (the deadline passed before submission): expires now */
	else if (tmo > 86400ull * 1000000)
		tmo = 86400ull * 1000000;
	x->id = ++P->next_xfer;
	x->c = c;
	x->client_id = c->id;
	x->user_data = e->user_data;
	x->p = p;
	x->local = g;
	g->inflight++; /* deregistration waits for us (registry frees at zero) */
	x->rregion = f->region;
	x->rgen = f->gen;
	x->repoch = f->epoch;
	memcpy(x->rsecret, f->secret, sizeof(x->rsecret));
	x->read = (e->flags & SQE_F_READ) != 0;
	x->tag = e->tag;
	x->descs = ds;
	x->n = e->count;
	x->total = total;
	x->start_us = now;
	x->deadline_us = now + tmo;
	x->timeout_ms = (uint32_t)((tmo + 999) / 1000);
	LIST_INIT(&x->nlink);
	if ((e->flags & SQE_F_NOTIF) && xnotif_add(x) != MORI_OK) {
		region_put(g);
		free(ds);
		free(x);
		reject(d, c, e, MORI_ENOMEM, "out of memory");
		return;
	}
	xfer_go(P, x);
}

/* x is set up: into the tables, to a transport. */
static void xfer_go(struct peers *P, struct xfer *x)
{
	struct peer *p = x->p;
	htab_add(&P->xfers, x->id, &x->hlink);
	htab_add(&P->byuser, user_key(x->client_id, x->user_data), &x->ulink);
	list_add(&p->xfers, &x->plink);
	if (!xfer_route(x, NULL)) {
		p->nxfers++; /* xfer_complete counts it down */
		xfer_complete(x, MORI_ENOMEM, "no transport could take the transfer");
		return;
	}
	p->nxfers++;
	p->transfers++;
	count(P->d, C_XFERS, 1);
	if (x->deadline_us < P->next_deadline_us)
		P->next_deadline_us = x->deadline_us;
	peer_use(p);
	peers_kick(P);
	peers_dirty(P);
}

int peer_xfer_start(struct morid *d, const struct peer_xfer_args *a, uint64_t *id)
{
	struct peers *P = d->peers;
	char why[300];
	int rc;
	if (!P || !P->on) {
		free(a->descs);
		return MORI_ENOTSUP;
	}
	if (refused(P) || a->n == 0 || (rc = region_reach(a->local, why, sizeof(why))) != MORI_OK) {
		free(a->descs);
		return a->n == 0 ? MORI_EINVAL : MORI_ENOTSUP;
	}
	struct peer *p = peer_get(P, a->node, 1);
	struct xfer *x = p ? calloc(1, sizeof(*x)) : NULL;
	if (!x) {
		free(a->descs);
		return p ? MORI_ENOMEM : MORI_EINVAL;
	}
	uint64_t now = mori_now_us(), total = 0;
	for (uint32_t i = 0; i < a->n; i++)
		total += a->descs[i].length; /* the caller checked each against both regions */
	x->id = ++P->next_xfer;
	x->user_data = x->id; /* client 0: no client's ids collide */
	x->p = p;
	x->local = a->local;
	a->local->inflight++;
	x->rregion = a->region;
	x->rgen = a->gen;
	x->repoch = a->epoch;
	memcpy(x->rsecret, a->secret, sizeof(x->rsecret));
	x->read = a->read;
	x->descs = a->descs;
	x->n = a->n;
	x->total = total;
	x->start_us = now;
	x->deadline_us = now + (uint64_t)a->timeout_ms * 1000;
	x->timeout_ms = a->timeout_ms;
	x->on_done = a->done;
	x->done_arg = a->arg;
	if (!a->read && (a->sig == 1 || a->sig == 2)) {
		x->sig = a->sig;
		x->sig_off = a->sig_off;
		x->sig_value = a->sig_value;
	}
	LIST_INIT(&x->nlink);
	*id = x->id;
	xfer_go(P, x); /* may end x (and call done) before it returns */
	return MORI_OK;
}

int peer_xfer_signals(struct morid *d, const char *node, const struct region *local)
{
	struct peers *P = d->peers;
	struct peer *p = P && P->on ? peer_get(P, node, 1) : NULL;
	if (!p)
		return 0;
	/* The transport that would carry such a transfer now (xfer_route's order): the first one
	 * allowed that takes this memory and already carries p, else the last such one (it queues
	 * until its links are up). A faster path keeps its speed and the signal goes apart. */
	const struct transport *last = NULL;
	for (int i = 0; i < P->npref; i++) {
		const struct transport *t = P->pref[i];
		uint32_t lanes;
		if (peers_mode(P, t) == TM_OFF || (t->can_take && !t->can_take(p, local)))
			continue;
		if (t->carries && t->carries(p, &lanes))
			return t->signals;
		last = t;
	}
	return last && last->signals;
}

void peer_xfer_cancel(struct morid *d, uint64_t id)
{
	struct xfer *x = d->peers ? xfer_find(d->peers, id) : NULL;
	if (x && !x->c && x->on_done)
		xfer_complete(x, MORI_ECANCELED, "cancelled");
}

