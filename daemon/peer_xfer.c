/* Cross-node transfers: submissions from clients (validated and copied out of the arena at
 * once), the pump that cuts them into frames over a peer's data streams, completions (exactly
 * one CQE per accepted submission), deadlines and cancellation; and the target side: landing
 * written bytes, serving reads, notifications after the data has landed. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_stage.h"
#include "log.h"
#include "peer_int.h"
#include "region.h"
#include "rdma.h"

/* ---- initiator: transfers ---- */

/* CQE messages are short: keep the head of a longer one. */
static void cqe_msg(struct mori_cqe *e, const char *msg)
{
	size_t n = strlen(msg);
	if (n >= sizeof(e->msg))
		n = sizeof(e->msg) - 1;
	memcpy(e->msg, msg, n);
	e->msg[n] = 0;
}

static uint64_t user_key(uint64_t client_id, uint64_t user_data)
{
	return client_id * 0x9e3779b97f4a7c15ull ^ user_data;
}

struct xfer *xfer_find(struct peers *P, uint64_t id)
{
	list_each(it, htab_bucket(&P->xfers, id)) {
		struct xfer *x = list_entry(it, struct xfer, hlink);
		if (x->id == id)
			return x;
	}
	return NULL;
}

static struct xfer *xfer_find_user(struct peers *P, uint64_t client_id, uint64_t user_data)
{
	list_each(it, htab_bucket(&P->byuser, user_key(client_id, user_data))) {
		struct xfer *x = list_entry(it, struct xfer, ulink);
		if (x->client_id == client_id && x->user_data == user_data)
			return x;
	}
	return NULL;
}

static struct stream *any_ready(struct peer *p)
{
	if (p->state != PS_UP)
		return NULL;
	for (int i = 0; i < p->nout; i++)
		if (p->out[i] && p->out[i]->ready && !p->out[i]->closing)
			return p->out[i];
	return NULL;
}

/* Finish x: post its one completion (unless its client is gone), tell the target to drop it if
 * bytes went out and the target does not know the end yet, release everything. */
static void xfer_end(struct xfer *x, int code, const char *msg, int abort_target)
{
	struct peers *P = x->p->P;
	struct morid *d = P->d;
	rdma_drop(d, x); /* issue 7: cancel its RDMA work, if any */
	if (x->c) {
		struct mori_cqe e = {.type = CQE_XFER_DONE, .code = code, .user_data = x->user_data};
		cqe_msg(&e, code ? msg : "");
		client_post(x->c, &e);
	}
	if (code) {
		count(d, C_XFER_ERRORS, 1);
		x->p->errors++;
		mlog_info("peer", "transfer %llu of client %llu (%s %llu bytes, %s): %s: %s",
			  (unsigned long long)x->user_data, (unsigned long long)x->client_id,
			  x->read ? "read" : "write", (unsigned long long)x->total, x->p->addr,
			  mori_strerror(code), msg);
	}
	if (code && abort_target && x->started) {
		struct stream *s = any_ready(x->p);
		if (s) {
			struct fhdr h = {.type = F_ABORT, .xfer = x->id, .deadline_ms = x->timeout_ms};
			stream_frame(s, &h, NULL, 0);
		}
	}
	htab_del(&P->xfers, &x->hlink);
	htab_del(&P->byuser, &x->ulink);
	list_del(&x->plink);
	if (x->queued_link)
		list_del(&x->qlink);
	x->p->nxfers--;
	region_put(x->local);
	free(x->descs);
	free(x);
}

void xfer_complete(struct xfer *x, int code, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	xfer_end(x, code, msg, 1);
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

void xfer_submit(struct peers *P, struct client *c, const struct mori_sqe *e)
{
	struct morid *d = P->d;
	if (e->op == SQE_CANCEL) {
		struct xfer *x = xfer_find_user(P, c->id, e->user_data);
		if (x)
			xfer_complete(x, MORI_ECANCELED, "cancelled");
		return;
	}
	int list = e->op == SQE_XFER_LIST;
	if (xfer_find_user(P, c->id, e->user_data)) {
		reject(d, c, e, MORI_EINVAL, "transfer id %llu is already in flight", (unsigned long long)e->user_data);
		return;
	}
	struct region *g = region_find(d, e->local_region);
	if (!g || g->owner != c) {
		reject(d, c, e, MORI_ENOENT, "local region %llu not yours", (unsigned long long)e->local_region);
		return;
	}
	const char *norm = rdma_refuses(d);
	if (norm) {
		reject(d, c, e, MORI_ENOTSUP, "transport = rdma, but %s", norm);
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
	mori_desc *ds = malloc((size_t)e->count * sizeof(mori_desc));
	if (!ds) {
		reject(d, c, e, MORI_ENOMEM, "out of memory for %u descriptors", e->count);
		return;
	}
	/* Copy first, then check the copy: the client may scribble on its arena meanwhile. */
	uint64_t total = 0;
	if (list) {
		for (uint32_t i = 0; i < e->count; i++) {
			uint32_t k;
			memcpy(&k, arena + (uint64_t)i * 4, 4);
			if (k >= l->n) {
				free(ds);
				reject(d, c, e, MORI_ERANGE, "index %u: %u >= list length %u", i, k, l->n);
				return;
			}
			ds[i] = l->descs[k];
		}
	} else {
		memcpy(ds, arena, (size_t)e->count * sizeof(mori_desc));
	}
	for (uint32_t i = 0; i < e->count; i++) {
		const mori_desc *x = &ds[i];
		int code = 0;
		if (x->length == 0)
			code = MORI_EINVAL;
		else if (x->local_offset > g->size || x->length > g->size - x->local_offset ||
			 x->remote_offset > f->size || x->length > f->size - x->remote_offset)
			code = MORI_ERANGE;
		if (code) {
			free(ds);
			reject(d, c, e, code, "descriptor %u %s", i, code == MORI_EINVAL ? "has length 0" : "outside a region");
			return;
		}
		total += x->length;
		if (total < x->length) {
			free(ds);
			reject(d, c, e, MORI_EINVAL, "batch larger than 2^64 bytes");
			return;
		}
	}
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
	x->read = (e->flags & SQE_F_READ) != 0;
	x->notif = (e->flags & SQE_F_NOTIF) != 0;
	x->tag = e->tag;
	x->descs = ds;
	x->n = e->count;
	x->total = total;
	x->start_us = now;
	x->deadline_us = now + tmo;
	x->timeout_ms = (uint32_t)((tmo + 999) / 1000);
	htab_add(&P->xfers, x->id, &x->hlink);
	htab_add(&P->byuser, user_key(x->client_id, x->user_data), &x->ulink);
	list_add(&p->xfers, &x->plink);
	if (!rdma_take(d, x)) { /* RDMA transport (rdma_peer.c, issue 7) runs it, else TCP */
		list_add(&p->queue, &x->qlink);
		x->queued_link = 1;
	}
	p->nxfers++;
	p->transfers++;
	count(d, C_XFERS, 1);
	if (x->deadline_us < P->next_deadline_us)
		P->next_deadline_us = x->deadline_us;
	peer_use(p);
	peers_kick(P);
	p->pump_needed = 1;
	peers_dirty(P);
}

void xfers_expire(struct peers *P, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		list_each(xt, &p->xfers) {
			struct xfer *x = list_entry(xt, struct xfer, plink);
			if (x->deadline_us <= now) {
				const char *st = p->state == PS_UP ? "" : p->state == PS_DOWN ? " (down)" : " (connecting)";
				mlog_info("peer", "transfer %llu: deadline of %u ms expired waiting for %s%s%s%s",
					  (unsigned long long)x->user_data, x->timeout_ms, p->addr, st,
					  p->why[0] ? ": " : "", p->why);
				xfer_complete(x, MORI_ETIMEDOUT, "timed out after %ums: %s", x->timeout_ms, p->addr);
			} else if (x->deadline_us < next) {
				next = x->deadline_us;
			}
		}
	}
	P->next_deadline_us = next;
}

/* The stream of p with the least in flight, if it has room. */
static struct stream *pick(struct peer *p)
{
	struct stream *best = NULL;
	uint64_t bl = 0;
	for (int i = 0; i < p->nout; i++) {
		struct stream *s = p->out[i];
		if (!s || !s->ready || s->closing)
			continue;
		uint64_t load = s->tx_queued + s->rd_outstanding + (s->cur ? BATCH_MAX - stream_batch_room(s) : 0);
		if (load >= STREAM_WINDOW)
			continue;
		if (!best || load < bl) {
			best = s;
			bl = load;
		}
	}
	return best;
}

/* The next chunk of x from its position: up to CHUNK_MAX bytes, running on into following
 * descriptors that continue both ranges (adjacent KV blocks travel as one frame). The position
 * after it goes to ncur and noff; x is not changed. */
static uint32_t next_chunk(const struct xfer *x, uint64_t *lo, uint64_t *ro, uint32_t *ncur, uint64_t *noff)
{
	uint32_t cur = x->cur;
	uint64_t off = x->cur_off, len = 0;
	const mori_desc *d = &x->descs[cur];
	*lo = d->local_offset + off;
	*ro = d->remote_offset + off;
	for (;;) {
		uint64_t left = d->length - off;
		uint64_t take = CHUNK_MAX - len < left ? CHUNK_MAX - len : left;
		len += take;
		off += take;
		if (off < d->length || ++cur == x->n || len == CHUNK_MAX) {
			if (off == d->length)
				off = 0;
			break;
		}
		off = 0;
		d = &x->descs[cur];
		if (d->local_offset != *lo + len || d->remote_offset != *ro + len)
			break;
	}
	*ncur = cur;
	*noff = off;
	return (uint32_t)len;
}

/* Cut queued transfers into frames: one batch per stream at a time, least-loaded stream first,
 * so a large transfer stripes over the streams and small ones coalesce into one write. */
void peer_pump(struct peer *p)
{
	if (p->state != PS_UP)
		return;
	while (p->queue.next != &p->queue) {
		struct stream *s = pick(p);
		if (!s)
			return;
		uint64_t budget = BATCH_MAX;
		int frames = 0;
		while (p->queue.next != &p->queue && budget > 0 && frames < BATCH_FRAMES &&
		       s->rd_outstanding < STREAM_WINDOW && !s->closing) {
			struct xfer *x = list_entry(p->queue.next, struct xfer, qlink);
			if (!x->started) {
				if (x->repoch != p->epoch) {
					xfer_end(x, MORI_ESTALE, "peer restarted since region was opened", 0);
					continue;
				}
				if (x->local->dead) {
					xfer_end(x, MORI_ECANCELED, "local region deregistered", 0);
					continue;
				}
				x->started = 1;
			}
			uint64_t lo, ro, noff;
			uint32_t ncur;
			uint32_t len = next_chunk(x, &lo, &ro, &ncur, &noff);
			uint64_t now = mori_now_us();
			struct fhdr h = {
				.type = x->read ? F_READ : F_WRITE,
				.flags = x->notif ? FF_NOTIF : 0,
				.xfer = x->id,
				.region = x->rregion,
				.gen = x->rgen,
				.offset = ro,
				.total = x->total,
				.tag = x->tag,
				.deadline_ms = x->deadline_us > now ? (uint32_t)((x->deadline_us - now) / 1000 + 1) : 1,
			};
			if (x->read) {
				h.aux = lo;
				h.rlen = len;
				stream_frame(s, &h, NULL, 0);
				s->rd_outstanding += len;
			} else {
				int err;
				if (stream_frame_data(s, &h, x->local, lo, len, &err) != 0) {
					xfer_complete(x, err, err == MORI_EPEERDEAD ? "cannot read local memory (owner gone)"
							      : err == MORI_ESTALE ? "local region deregistered"
										   : "out of memory");
					continue;
				}
				x->sent += len;
			}
			budget = budget > len ? budget - len : 0;
			frames++;
			x->cur = ncur;
			x->cur_off = noff;
			if (x->cur == x->n) {
				list_del(&x->qlink);
				x->queued_link = 0;
			}
		}
		stream_flush(s);
		/* Round robin at batch granularity: a large transfer does not hold back small ones
		 * queued behind it. */
		if (p->queue.next != &p->queue && p->queue.next != p->queue.prev) {
			struct list *h = p->queue.next;
			list_del(h);
			list_add(&p->queue, h);
		}
	}
}

/* ---- initiator: answers from the target ---- */

void rx_done(struct stream *s)
{
	struct xfer *x = xfer_find(s->P, s->h.xfer);
	if (!x || x->p != s->p || x->read)
		return;
	if (s->h.code == 0) {
		x->done = x->total;
		xfer_end(x, 0, "", 0);
	} else {
		xfer_end(x, s->h.code, s->rx_msglen ? s->rx_msg : "failed at the target", 0);
	}
}

/* Where the payload now arriving on s goes: straight into g's mapping, or through region_copy
 * (cross-memory attach, or VRAM from the receive buffer, pinned for it once). */
static void rx_into(struct stream *s, struct region *g, uint64_t off)
{
	if (g->map) {
		s->rx_dst = (uint8_t *)g->map + off;
		return;
	}
	s->rx_copy = 1;
	s->rx_addr = off;
	if (g->kind == MORI_MEM_VRAM && !s->rx_pinned)
		s->rx_pinned = stage_pin(s->rxbuf, RX_BUF) == 0 ? 1 : -1;
}

void rx_rdata_hdr(struct stream *s)
{
	struct fhdr *h = &s->h;
	s->rd_outstanding -= h->rlen < s->rd_outstanding ? h->rlen : s->rd_outstanding;
	s->p->pump_needed = 1;
	peers_dirty(s->P);
	if (h->code)
		return; /* the payload is the message */
	struct xfer *x = xfer_find(s->P, h->xfer);
	if (!x || x->p != s->p || !x->read)
		return; /* cancelled meanwhile: discard */
	struct region *g = x->local;
	if (h->offset > g->size || h->len > g->size - h->offset || h->len != h->rlen) {
		xfer_complete(x, MORI_EPROTO, "peer sent bytes outside the asked range");
		return;
	}
	if (g->dead) {
		xfer_complete(x, MORI_ECANCELED, "local region deregistered");
		return;
	}
	g->inflight++;
	s->rx_reg = g; /* released after the payload (payload_end) */
	rx_into(s, g, h->offset);
}

void rx_rdata_end(struct stream *s)
{
	struct xfer *x = xfer_find(s->P, s->h.xfer);
	if (!x || x->p != s->p || !x->read)
		return;
	if (s->h.code) {
		xfer_end(x, s->h.code, s->rx_msglen ? s->rx_msg : "failed at the target", 0);
		return;
	}
	if (s->rx_code) {
		xfer_complete(x, s->rx_code, s->rx_code == MORI_ESTALE ? "local region deregistered"
								      : "cannot write local memory (owner gone)");
		return;
	}
	x->done += s->h.len;
	s->p->bytes_received += s->h.len;
	count(s->P->d, C_BYTES_RECEIVED, s->h.len);
	if (x->done >= x->total)
		xfer_end(x, 0, "", 0);
}

/* ---- target side ---- */

static uint64_t inb_key(uint64_t epoch, uint64_t xfer)
{
	return epoch * 0x9e3779b97f4a7c15ull ^ xfer;
}

static struct inb *inb_find(struct peers *P, uint64_t epoch, uint64_t xfer)
{
	list_each(it, htab_bucket(&P->inbound, inb_key(epoch, xfer))) {
		struct inb *b = list_entry(it, struct inb, hlink);
		if (b->src_epoch == epoch && b->xfer == xfer)
			return b;
	}
	return NULL;
}

static void inb_release(struct inb *b)
{
	if (b->r) {
		region_put(b->r);
		b->r = NULL;
	}
}

static void inb_free(struct peers *P, struct inb *b)
{
	inb_release(b);
	htab_del(&P->inbound, &b->hlink);
	free(b);
}

static void send_done(struct stream *s, uint64_t xfer, int code, const char *msg)
{
	struct fhdr h = {.type = F_DONE, .code = code, .xfer = xfer};
	stream_frame(s, &h, msg, (uint32_t)strlen(msg));
}

/* First failure of an inbound transfer: release the region, tell the initiator (writes get one
 * DONE; reads learn it from each RDATA answer). */
static void inb_fail(struct stream *s, struct inb *b, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void inb_fail(struct stream *s, struct inb *b, int code, const char *fmt, ...)
{
	if (b->code)
		return;
	char msg[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	b->code = code;
	inb_release(b);
	mlog_info("peer", "inbound %s %llu from %s failed: %s", b->read ? "read" : "write",
		  (unsigned long long)b->xfer, s->p ? s->p->addr : "?", msg);
	if (!b->read && !b->aborted && !b->replied) {
		b->replied = 1;
		send_done(s, b->xfer, code, msg);
	}
}

static struct inb *inb_get(struct stream *s, int read)
{
	struct peers *P = s->P;
	struct fhdr *h = &s->h;
	struct inb *b = inb_find(P, s->src_epoch, h->xfer);
	if (b)
		return b;
	if (!(b = calloc(1, sizeof(*b))))
		return NULL;
	uint64_t now = mori_now_us();
	b->src_epoch = s->src_epoch;
	b->xfer = h->xfer;
	b->read = read;
	b->notif = (h->flags & FF_NOTIF) != 0;
	b->tag = h->tag;
	b->total = h->total;
	b->p = s->p;
	b->expire_us = now + (uint64_t)(h->deadline_ms < INB_MAX_MS ? h->deadline_ms : INB_MAX_MS) * 1000 +
		       INB_SLACK_MS * 1000ull;
	htab_add(&P->inbound, inb_key(b->src_epoch, b->xfer), &b->hlink);
	if (b->expire_us < P->next_inb_scan_us || !P->next_inb_scan_us)
		P->next_inb_scan_us = b->expire_us;
	peers_kick(P);
	struct region *g = region_find(P->d, h->region);
	char why[300];
	int code;
	if (!g || g->gen != h->gen) {
		inb_fail(s, b, MORI_ESTALE, "region %llu is no longer registered at %s",
			 (unsigned long long)h->region, P->self);
	} else if ((code = region_reach(g, why, sizeof(why))) != 0) {
		inb_fail(s, b, code, "at %s: %s", P->self, why);
	} else {
		b->r = g;
		g->inflight++;
	}
	return b;
}

static void inb_finish(struct stream *s, struct inb *b)
{
	struct peers *P = s->P;
	if (!b->code && !b->aborted) {
		struct region *g = b->r;
		if (!g || g->dead) {
			if (!b->read)
				inb_fail(s, b, MORI_ESTALE, "region deregistered at %s during the transfer", P->self);
		} else {
			if (b->notif && g->owner) {
				struct mori_cqe n = {.type = CQE_NOTIF, .code = 0, .user_data = b->tag, .value = g->id};
				client_post(g->owner, &n);
				count(P->d, C_NOTIFS, 1);
			}
			if (!b->read) {
				b->replied = 1;
				send_done(s, b->xfer, 0, "");
			}
		}
	}
	inb_free(P, b);
}

void rx_write_hdr(struct stream *s)
{
	struct fhdr *h = &s->h;
	struct inb *b = inb_get(s, 0);
	if (!b) {
		s->rx_code = MORI_ENOMEM;
		return;
	}
	if (b->code || b->aborted) {
		s->rx_code = b->code ? b->code : MORI_ECANCELED;
		return;
	}
	struct region *g = b->r;
	if (h->offset > g->size || h->len > g->size - h->offset) {
		inb_fail(s, b, MORI_ERANGE, "write [%llu, +%u) outside region %llu (%llu bytes)",
			 (unsigned long long)h->offset, h->len, (unsigned long long)g->id, (unsigned long long)g->size);
		s->rx_code = MORI_ERANGE;
		return;
	}
	if (g->dead) {
		inb_fail(s, b, MORI_ESTALE, "region %llu deregistered at %s", (unsigned long long)g->id, s->P->self);
		s->rx_code = MORI_ESTALE;
		return;
	}
	g->inflight++;
	s->rx_reg = g; /* released after the payload */
	rx_into(s, g, h->offset);
}

void rx_write_end(struct stream *s)
{
	struct inb *b = inb_find(s->P, s->src_epoch, s->h.xfer);
	if (!b)
		return;
	if (s->rx_code && !b->code && !b->aborted)
		inb_fail(s, b, s->rx_code, "region at %s %s", s->P->self,
			 s->rx_code == MORI_ESTALE ? "deregistered during the transfer" : "unreachable (owner gone)");
	if (!s->rx_code) {
		count(s->P->d, C_BYTES_RECEIVED, s->h.len);
		if (s->p)
			s->p->bytes_received += s->h.len;
	}
	b->got += s->h.len;
	if (b->got >= b->total)
		inb_finish(s, b);
}

void rx_read_req(struct stream *s)
{
	struct peers *P = s->P;
	struct fhdr *h = &s->h;
	struct inb *b = inb_get(s, 1);
	int code = 0;
	char msg[200] = "";
	if (!b) {
		code = MORI_ENOMEM;
		snprintf(msg, sizeof(msg), "out of memory at %s", P->self);
	} else if (b->code || b->aborted) {
		code = b->code ? b->code : MORI_ECANCELED;
		snprintf(msg, sizeof(msg), "%s", b->code == MORI_ESTALE ? "region no longer registered" : "failed at the target");
	} else if (h->offset > b->r->size || h->rlen > b->r->size - h->offset || !h->rlen || h->rlen > CHUNK_MAX) {
		code = MORI_ERANGE;
		snprintf(msg, sizeof(msg), "read [%llu, +%u) outside region %llu (%llu bytes)",
			 (unsigned long long)h->offset, h->rlen, (unsigned long long)b->r->id,
			 (unsigned long long)b->r->size);
		inb_fail(s, b, code, "%s", msg);
	} else if (b->r->dead) {
		code = MORI_ESTALE;
		snprintf(msg, sizeof(msg), "region %llu deregistered at %s", (unsigned long long)b->r->id, P->self);
		inb_fail(s, b, code, "%s", msg);
	}
	struct fhdr a = {.type = F_RDATA, .xfer = h->xfer, .offset = h->aux, .rlen = h->rlen, .total = h->total};
	if (!code) {
		int err;
		if (stream_frame_data(s, &a, b->r, h->offset, h->rlen, &err) == 0)
			return; /* counted when written (rx_read_served) */
		code = err;
		snprintf(msg, sizeof(msg), "region at %s %s", P->self,
			 err == MORI_ESTALE ? "deregistered during the transfer" : "unreachable (owner gone)");
		inb_fail(s, b, code, "%s", msg);
	}
	a.code = code;
	a.rlen = h->rlen;
	stream_frame(s, &a, msg, (uint32_t)strlen(msg));
	if (b) {
		b->got += h->rlen;
		if (b->got >= b->total)
			inb_finish(s, b);
	}
}

void rx_read_served(struct peers *P, uint64_t src_epoch, uint64_t xfer, uint64_t bytes, int ok)
{
	struct inb *b = inb_find(P, src_epoch, xfer);
	if (!b)
		return;
	if (!ok && !b->code) {
		b->code = MORI_EIO;
		inb_release(b);
	}
	b->got += bytes;
	if (b->got >= b->total) {
		/* Everything was handed to the socket: the data has been read from the region. */
		if (!b->code && !b->aborted && b->notif && b->r && !b->r->dead && b->r->owner) {
			struct mori_cqe n = {.type = CQE_NOTIF, .code = 0, .user_data = b->tag, .value = b->r->id};
			client_post(b->r->owner, &n);
			count(P->d, C_NOTIFS, 1);
		}
		inb_free(P, b);
	}
}

void rx_abort(struct stream *s)
{
	struct peers *P = s->P;
	struct inb *b = inb_find(P, s->src_epoch, s->h.xfer);
	if (!b) {
		/* Chunks still on other streams may follow: keep a tombstone until they are due. */
		if (!(b = calloc(1, sizeof(*b))))
			return;
		b->src_epoch = s->src_epoch;
		b->xfer = s->h.xfer;
		b->total = UINT64_MAX;
		b->expire_us = mori_now_us() + (uint64_t)(s->h.deadline_ms < INB_MAX_MS ? s->h.deadline_ms : INB_MAX_MS) * 1000 +
			       INB_SLACK_MS * 1000ull;
		htab_add(&P->inbound, inb_key(b->src_epoch, b->xfer), &b->hlink);
		peers_kick(P);
	}
	b->aborted = 1;
	inb_release(b);
}

void inb_expire(struct peers *P, uint64_t now)
{
	if (now != UINT64_MAX && now < P->next_inb_scan_us)
		return;
	uint64_t next = UINT64_MAX;
	for (int i = 0; i < HBUCKETS && P->inbound.n; i++)
		list_each(it, &P->inbound.b[i]) {
			struct inb *b = list_entry(it, struct inb, hlink);
			if (b->expire_us <= now)
				inb_free(P, b);
			else if (b->expire_us < next)
				next = b->expire_us;
		}
	P->next_inb_scan_us = next;
}

void inb_drop_epoch(struct peers *P, uint64_t src_epoch)
{
	for (int i = 0; i < HBUCKETS && P->inbound.n; i++)
		list_each(it, &P->inbound.b[i]) {
			struct inb *b = list_entry(it, struct inb, hlink);
			if (b->src_epoch == src_epoch)
				inb_free(P, b);
		}
}
