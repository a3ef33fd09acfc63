/* The TCP transport (transport.h) over the data streams of tcp_stream.c: the pump that cuts
 * queued transfers into frames over a peer's streams (least-loaded stream first, large
 * transfers striped, small ones coalesced), the initiator's answers, and the target side:
 * landing written bytes, serving reads. Notifications are not theirs: xnotif.c sends them on the
 * control link once the data is done. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "host_port.h"
#include "log.h"
#include "peer/peer.h" /* peers_shmem_serve: MSG frames */
#include "region/region.h"
#include "tcp_int.h"

/* ---- initiator: transfers ---- */

static struct stream *any_ready(struct peer *p)
{
	struct tcp_peer *tp = tcp_peer(p);
	if (p->state != PS_UP || !tp)
		return NULL;
	for (int i = 0; i < tp->nout; i++)
		if (tp->out[i] && tp->out[i]->ready && !tp->out[i]->closing)
			return tp->out[i];
	return NULL;
}

/* The stream of p with the least in flight, if it has room. */
static struct stream *pick(struct peer *p)
{
	struct tcp_peer *tp = tcp_peer(p);
	struct stream *best = NULL;
	uint64_t bl = 0;
	for (int i = 0; i < tp->nout; i++) {
		struct stream *s = tp->out[i];
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

/* Cut queued transfers into frames: one batch per stream at a time, least-loaded stream first,
 * so a large transfer stripes over the streams and small ones coalesce into one write. */
void tcp_pump(struct peer *p)
{
	struct tcp_peer *tp = tcp_peer(p);
	if (p->state != PS_UP || !tp)
		return;
	while (tp->queue.next != &tp->queue) {
		struct stream *s = pick(p);
		if (!s)
			return;
		uint64_t budget = BATCH_MAX;
		int frames = 0;
		while (tp->queue.next != &tp->queue && budget > 0 && frames < BATCH_FRAMES &&
		       s->rd_outstanding < STREAM_WINDOW && !s->closing) {
			struct tcp_xfer *tx = list_entry(tp->queue.next, struct tcp_xfer, qlink);
			struct xfer *x = tx->x;
			if (!tx->started) {
				if (x->repoch != p->epoch) {
					xfer_complete(x, MORI_ESTALE, "peer restarted since region was opened");
					continue;
				}
				if (x->local->dead) {
					xfer_complete(x, MORI_ECANCELED, "local region deregistered");
					continue;
				}
				tx->started = 1;
			}
			uint64_t lo, ro;
			struct chunk_cursor next = tx->cur;
			uint32_t len = (uint32_t)chunk_next(x->descs, x->n, &next, CHUNK_MAX, &lo, &ro);
			uint64_t now = mori_now_us();
			struct fhdr h = {
				.type = x->read ? F_READ : F_WRITE,
				.xfer = x->id,
				.region = x->rregion,
				.gen = x->rgen,
				.offset = ro,
				.total = x->total,
				.deadline_ms = x->deadline_us > now ? (uint32_t)((x->deadline_us - now) / 1000 + 1) : 1,
			};
			memcpy(h.key, x->rsecret, sizeof(h.key));
			if (x->sig) { /* in every frame: the frames of one transfer land in any order */
				h.flags = FF_SIGNAL;
				h.aux = x->sig_off;
				h.tag = x->sig_value;
				h.pad = (uint32_t)x->sig;
			}
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
				tx->sent += len;
			}
			budget = budget > len ? budget - len : 0;
			frames++;
			tx->cur = next;
			uint64_t l2, r2;
			struct chunk_cursor peek = next;
			if (!chunk_next(x->descs, x->n, &peek, 1, &l2, &r2)) {
				list_del(&tx->qlink);
				tx->queued = 0;
			}
		}
		stream_flush(s);
		/* Round robin at batch granularity: a large transfer does not hold back small ones
		 * queued behind it. */
		if (tp->queue.next != &tp->queue && tp->queue.next != tp->queue.prev) {
			struct list *h = tp->queue.next;
			list_del(h);
			list_add(&tp->queue, h);
		}
	}
}

/* ---- initiator: answers from the target ---- */

/* x ended at the target too (it answered): nothing to abort there. */
static void end_answered(struct xfer *x, int code, const char *msg)
{
	struct tcp_xfer *tx = x->tp;
	if (tx)
		tx->answered = 1;
	xfer_complete(x, code, "%s", msg);
}

static void rx_done(struct stream *s)
{
	struct xfer *x = xfer_find(s->P, s->h.xfer);
	if (!x || x->p != s->p || x->read || x->t != &transport_tcp)
		return;
	if (s->h.code == 0) {
		x->done = x->total;
		end_answered(x, 0, "");
	} else {
		end_answered(x, s->h.code, s->rx_msglen ? s->rx_msg : "failed at the target");
	}
}

/* Where the payload now arriving on s goes: straight into g's mapping; for VRAM, whole into a
 * pinned frame buffer from the stage pool and then one synchronous GPU copy at its end
 * (payload_end, which gives the buffer back: a stream holds none between frames) rather than one
 * per socket read of tens of KiB; else through region_copy piece by piece (cross-memory attach;
 * VRAM when no frame buffer could be had). */
static void rx_into(struct stream *s, struct region *g, uint64_t off)
{
	if (g->map) {
		s->rx_dst = (uint8_t *)g->map + off;
		return;
	}
	if (g->kind == MORI_MEM_VRAM && s->h.len <= STAGE_BUF_BYTES && (s->rx_stage = stage_get(STAGE_BUF_BYTES))) {
		s->rx_dst = s->rx_stage;
		s->rx_flush = 1;
		if (!stage_pinned(s->rx_stage))
			count(s->P->d, C_VRAM_UNPINNED, s->h.len);
		s->rx_addr = off;
		return;
	}
	s->rx_copy = 1;
	s->rx_addr = off;
	if (g->kind == MORI_MEM_VRAM && !s->rx_pinned)
		s->rx_pinned = stage_pin(s->rxbuf, RX_BUF) == 0 ? 1 : -1;
}

static void rx_rdata_hdr(struct stream *s)
{
	struct fhdr *h = &s->h;
	s->rd_outstanding -= h->rlen < s->rd_outstanding ? h->rlen : s->rd_outstanding;
	tcp_peer(s->p)->pump_needed = 1;
	peers_dirty(s->P);
	if (h->code)
		return; /* the payload is the message */
	struct xfer *x = xfer_find(s->P, h->xfer);
	if (!x || x->p != s->p || !x->read || x->t != &transport_tcp)
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

static void rx_rdata_end(struct stream *s)
{
	struct xfer *x = xfer_find(s->P, s->h.xfer);
	if (!x || x->p != s->p || !x->read || x->t != &transport_tcp)
		return;
	if (s->h.code) {
		end_answered(x, s->h.code, s->rx_msglen ? s->rx_msg : "failed at the target");
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
		end_answered(x, 0, "");
}

/* ---- target side ---- */

static uint64_t inb_key(uint64_t epoch, uint64_t xfer)
{
	return epoch * 0x9e3779b97f4a7c15ull ^ xfer;
}

static struct inb *inb_find(struct peers *P, uint64_t epoch, uint64_t xfer)
{
	list_each(it, htab_bucket(&tcp_node(P)->inbound, inb_key(epoch, xfer))) {
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
	htab_del(&tcp_node(P)->inbound, &b->hlink);
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
	int sig = h->flags == FF_SIGNAL ? (int)h->pad : 0;
	if (b) {
		/* every frame of a transfer names the same region, with its secret, and the same signal */
		if (b->r && (h->region != b->r->id || h->gen != b->r->gen || !region_secret_ok(b->r, h->key, sizeof(h->key))))
			inb_fail(s, b, MORI_EPERM, "a frame of transfer %llu names another region",
				 (unsigned long long)h->xfer);
		else if (b->r && (sig != b->sig || (sig && (h->aux != b->sig_off || h->tag != b->sig_value))))
			inb_fail(s, b, MORI_EPROTO, "a frame of transfer %llu names another signal",
				 (unsigned long long)h->xfer);
		return b;
	}
	if (!(b = calloc(1, sizeof(*b))))
		return NULL;
	uint64_t now = mori_now_us();
	b->src_epoch = s->src_epoch;
	b->xfer = h->xfer;
	b->read = read;
	b->total = h->total;
	b->p = s->p;
	b->expire_us = now + (uint64_t)(h->deadline_ms < INB_MAX_MS ? h->deadline_ms : INB_MAX_MS) * 1000 +
		       INB_SLACK_MS * 1000ull;
	htab_add(&tcp_node(P)->inbound, inb_key(b->src_epoch, b->xfer), &b->hlink);
	if (b->expire_us < tcp_node(P)->next_inb_scan_us || !tcp_node(P)->next_inb_scan_us)
		tcp_node(P)->next_inb_scan_us = b->expire_us;
	peers_kick(P);
	struct region *g = region_find(P->d, h->region);
	char why[300];
	int code;
	if (h->flags && (read || h->flags != FF_SIGNAL)) {
		inb_fail(s, b, MORI_EPROTO, "frame flags 0x%x refused at %s: %s", h->flags, P->self,
			 h->flags & FF_NOTIF_V1 ? "notifications travel on the control link since frame version 2"
						: "frame version 4 has only FF_SIGNAL, on writes");
	} else if (h->flags && ((sig != 1 && sig != 2) || !peers_signal_apply)) {
		inb_fail(s, b, MORI_EPROTO, "a signal after the data refused at %s: %s", P->self,
			 sig != 1 && sig != 2 ? "unknown signal op" : "MORI-SHMEM's proxy is not served here");
	} else if (!g || g->gen != h->gen || !region_secret_ok(g, h->key, sizeof(h->key))) {
		inb_fail(s, b, MORI_ESTALE, "region %llu is no longer registered at %s",
			 (unsigned long long)h->region, P->self);
	} else if (sig && (g->size < 8 || h->aux > g->size - 8 || h->aux % 8)) {
		inb_fail(s, b, MORI_ERANGE, "signal word at %llu outside region %llu (%llu bytes) or unaligned",
			 (unsigned long long)h->aux, (unsigned long long)g->id, (unsigned long long)g->size);
	} else if ((code = region_reach(g, why, sizeof(why))) != 0) {
		inb_fail(s, b, code, "at %s: %s", P->self, why);
	} else {
		b->r = g;
		g->inflight++;
		b->sig = sig;
		b->sig_off = h->aux;
		b->sig_value = h->tag;
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
		} else if (!b->read) {
			/* every byte landed (got == total, no failure, not aborted): only now its signal, and
			 * DONE answers both; a transfer that fails or is cut off never gets here */
			int rc = b->sig ? peers_signal_apply ? peers_signal_apply(g, b->sig == 2, b->sig_off, b->sig_value)
							    : MORI_ENOTSUP
					: 0;
			if (rc) {
				inb_fail(s, b, rc, "the signal after the data at %s: %s", P->self, mori_strerror(rc));
			} else {
				b->replied = 1;
				send_done(s, b->xfer, 0, "");
			}
		}
	}
	inb_free(P, b);
}

static void rx_write_hdr(struct stream *s)
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

static void rx_write_end(struct stream *s)
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

static void rx_read_req(struct stream *s)
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
		snprintf(msg, sizeof(msg), "%s",
			 b->code == MORI_ESTALE   ? "region no longer registered"
			 : b->code == MORI_EPROTO ? "frame flags refused at the target (reads take none)"
						  : "failed at the target");
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

static void rx_read_served(struct peers *P, uint64_t src_epoch, uint64_t xfer, uint64_t bytes, int ok)
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
		inb_free(P, b);
	}
}

static void rx_abort(struct stream *s)
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
		htab_add(&tcp_node(P)->inbound, inb_key(b->src_epoch, b->xfer), &b->hlink);
		peers_kick(P);
	}
	b->aborted = 1;
	inb_release(b);
}

void inb_expire(struct peers *P, uint64_t now)
{
	if (now != UINT64_MAX && now < tcp_node(P)->next_inb_scan_us)
		return;
	uint64_t next = UINT64_MAX;
	for (int i = 0; i < HBUCKETS && tcp_node(P)->inbound.n; i++)
		list_each(it, &tcp_node(P)->inbound.b[i]) {
			struct inb *b = list_entry(it, struct inb, hlink);
			if (b->expire_us <= now)
				inb_free(P, b);
			else if (b->expire_us < next)
				next = b->expire_us;
		}
	tcp_node(P)->next_inb_scan_us = next;
}

void inb_drop_epoch(struct peers *P, uint64_t src_epoch)
{
	for (int i = 0; i < HBUCKETS && tcp_node(P)->inbound.n; i++)
		list_each(it, &tcp_node(P)->inbound.b[i]) {
			struct inb *b = list_entry(it, struct inb, hlink);
			if (b->src_epoch == src_epoch)
				inb_free(P, b);
		}
}
/* ---- messages on the data path (MSG / MSGREP) ----
 * A short request of the request path (peer_rpc_fast) travels on a data stream: the loops write
 * and read it themselves, where the request path hands each message to nng's threads and back
 * (tens of microseconds each way under load). The target serves only what a data stream may
 * carry (PeerShmemAmo, whose handlers check the heap's secret as every data frame does); its
 * stream authenticated before any frame was served. */

/* The target: serve the MSG, answer on the same stream. */
static void rx_msg_in(struct stream *s)
{
	struct peers *P = s->P;
	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	Mori__Request *req = mori__request__unpack(NULL, s->h.len, s->rx_mbuf);
	if (!req)
		reply_error(&rep, MORI_EPROTO, "malformed message on a data stream (%u bytes)", s->h.len);
	else if (rep.id = req->id, req->body_case != MORI__REQUEST__BODY_PEER_SHMEM_AMO)
		reply_error(&rep, MORI_EPROTO, "request %d is not served on data streams", (int)req->body_case);
	else if (!peers_shmem_serve || !peers_shmem_serve(P, req, s->p ? s->p->addr : NULL, &rep, &r))
		reply_error(&rep, MORI_ENOTSUP, "MORI-SHMEM's proxy is not served at %s", P->self);
	size_t len = mori__reply__get_packed_size(&rep);
	uint8_t *out = len <= MSG_MAX ? malloc(len ? len : 1) : NULL;
	if (out) {
		mori__reply__pack(&rep, out);
		struct fhdr h = {.type = F_MSGREP, .xfer = s->h.xfer};
		stream_frame(s, &h, out, (uint32_t)len);
		free(out);
	} /* else the initiator's deadline ends it */
	rctx_free(&r);
	if (req)
		mori__request__free_unpacked(req, NULL);
}

static void msg_end(struct peer *p, struct rpc *q, const Mori__Reply *rep, int code, const char *msg)
{
	list_del(&q->link);
	q->done(q, p, rep, code, msg);
	free(q->msg);
	free(q);
}

/* The initiator: the answer to one of ours. */
static void rx_msg_reply(struct stream *s)
{
	struct tcp_peer *tp = s->p ? tcp_peer(s->p) : NULL;
	if (!tp || s->conn_gen != tp->conn_gen)
		return;
	list_each(it, &tp->msgs) {
		struct rpc *q = list_entry(it, struct rpc, link);
		if (q->id != s->h.xfer)
			continue;
		Mori__Reply *rep = mori__reply__unpack(NULL, s->h.len, s->rx_mbuf);
		char msg[300];
		snprintf(msg, sizeof(msg), "peer %s: %s", s->p->addr, rep && rep->message ? rep->message : "malformed reply");
		msg_end(s->p, q, rep, rep ? rep->code : MORI_EPROTO, msg);
		if (rep)
			mori__reply__free_unpacked(rep, NULL);
		return;
	}
}

/* Every message of p not answered ends with code (its streams went, or the daemon stops). */
static void msgs_fail(struct peer *p, int code, const char *why)
{
	struct tcp_peer *tp = tcp_peer(p);
	if (!tp)
		return;
	char msg[400];
	snprintf(msg, sizeof(msg), "peer %s: %s", p->addr, why);
	while (tp->msgs.next != &tp->msgs) /* one at a time: a callback may touch the list */
		msg_end(p, list_entry(tp->msgs.next, struct rpc, link), NULL, code, msg);
}

/* Carry q (packed) on the least-loaded data stream of p: 1 taken, 0 no stream is up. */
static int tcp_rpc(struct peer *p, struct rpc *q)
{
	struct tcp_peer *tp = tcp_peer(p);
	struct stream *s = p->state == PS_UP && tp ? pick(p) : NULL;
	if (!s || q->len > MSG_MAX || !q->len)
		return 0;
	struct fhdr h = {.type = F_MSG, .xfer = q->id, .deadline_ms = q->timeout_ms};
	stream_frame(s, &h, q->msg, (uint32_t)q->len); /* lost only with the stream, or out of memory: the deadline */
	q->sent = 1;
	list_add(&tp->msgs, &q->link);
	peers_kick(p->P); /* the deadline tick */
	return 1;
}

/* ---- the transport ---- */

static const struct tcp_frames frames = {
	.write_hdr = rx_write_hdr,
	.write_end = rx_write_end,
	.read_req = rx_read_req,
	.abort = rx_abort,
	.done = rx_done,
	.rdata_hdr = rx_rdata_hdr,
	.rdata_end = rx_rdata_end,
	.read_served = rx_read_served,
	.source_gone = inb_drop_epoch,
	.msg_in = rx_msg_in,
	.msg_reply = rx_msg_reply,
};

static struct tcp_peer *tcp_peer_get(struct peer *p)
{
	struct tcp_peer *tp = p->tp[TR_TCP];
	if (!tp && (tp = calloc(1, sizeof(*tp)))) {
		LIST_INIT(&tp->queue);
		LIST_INIT(&tp->msgs);
		p->tp[TR_TCP] = tp;
	}
	return tp;
}

static int tcp_start(struct peers *P)
{
	struct tcp_node *tn = calloc(1, sizeof(*tn));
	if (!tn)
		return -1;
	LIST_INIT(&tn->accepted);
	LIST_INIT(&tn->dirty);
	htab_init(&tn->inbound);
	tn->on = &frames;
	tn->handles = 1; /* the transport's own, let go at stop */
	P->tp[TR_TCP] = tn;
	streams_pend_init(P);
	peers_hold(P);
	const char *listen = P->d->cfg.listen;
	char host[128];
	int port;
	if (!listen[0])
		return 0;
	if (host_port_split(listen, host, sizeof(host), &port) != 0) {
		mlog_err("peer", "listen = '%s' is not host:port", listen);
		return -1;
	}
	return stream_listen(P, host);
}

static void close_out_streams(struct peer *p)
{
	struct tcp_peer *tp = tcp_peer(p);
	if (!tp)
		return;
	tp->conn_gen++;
	for (int i = 0; i < tp->nout; i++) {
		if (tp->out[i])
			stream_close(tp->out[i]);
		tp->out[i] = NULL;
	}
	tp->nout = tp->nready = 0;
}

static void lsn_closed(uv_handle_t *h)
{
	tcp_node_release(h->data);
}

static void tcp_stop(struct peers *P)
{
	struct tcp_node *tn = tcp_node(P);
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		msgs_fail(p, MORI_ECANCELED, "daemon stopping");
		close_out_streams(p);
		free(p->tp[TR_TCP]);
		p->tp[TR_TCP] = NULL;
	}
	list_each(it, &tn->accepted)
		stream_close(list_entry(it, struct stream, link));
	inb_expire(P, UINT64_MAX);
	streams_pend_stop(P);
	if (tn->lsn_on)
		uv_close((uv_handle_t *)&tn->lsn, lsn_closed);
	tcp_node_release(P); /* the transport's own: the streams and the listener may still hold it */
}

static void tcp_peer_start(struct peer *p, const struct sockaddr *sa)
{
	if (!tcp_peer_get(p)) {
		peer_down(p, MORI_ENOMEM, "out of memory for data streams");
		return;
	}
	streams_connect(p, sa);
}

static int tcp_take(struct xfer *x)
{
	struct tcp_peer *tp = tcp_peer_get(x->p);
	struct tcp_xfer *tx = calloc(1, sizeof(*tx));
	if (!tp || !tx) {
		free(tx);
		return 0;
	}
	tx->x = x;
	tx->queued = 1;
	list_add(&tp->queue, &tx->qlink);
	x->t = &transport_tcp;
	x->tp = tx;
	tp->pump_needed = 1;
	peers_dirty(x->p->P);
	peers_kick(x->p->P); /* deadlines */
	return 1;
}

/* Tell the target to drop x if bytes went out and it does not know the end yet. */
static void tcp_cancel(struct xfer *x, int code)
{
	struct tcp_xfer *tx = x->tp;
	if (code && tx->started && !tx->answered) {
		struct stream *s = any_ready(x->p);
		if (s) {
			struct fhdr h = {.type = F_ABORT, .xfer = x->id, .deadline_ms = x->timeout_ms};
			stream_frame(s, &h, NULL, 0);
		}
	}
	if (tx->queued)
		list_del(&tx->qlink);
	free(tx);
	x->tp = NULL;
}

static void tcp_peer_down(struct peer *p)
{
	close_out_streams(p);
	msgs_fail(p, MORI_ECONN, p->why[0] ? p->why : "its data streams went down");
}

static void tcp_flush(struct peers *P)
{
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		struct tcp_peer *tp = tcp_peer(p);
		if (tp && tp->pump_needed) {
			tp->pump_needed = 0;
			tcp_pump(p);
		}
	}
	streams_flush_dirty(P);
}

static int tcp_tick(struct peers *P, uint64_t now)
{
	struct tcp_node *tn = tcp_node(P);
	if (tn->inbound.n)
		inb_expire(P, now);
	int msgs = streams_expire_handshakes(P, now) > 0;
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		struct tcp_peer *tp = tcp_peer(p);
		if (!tp)
			continue;
		struct list late;
		LIST_INIT(&late);
		list_each(jt, &tp->msgs) {
			struct rpc *q = list_entry(jt, struct rpc, link);
			if (now < q->deadline_us) {
				msgs = 1;
				continue;
			}
			list_del(&q->link);
			list_add(&late, &q->link);
		}
		while (late.next != &late) { /* ended outside the walk: a callback may touch the list */
			struct rpc *q = list_entry(late.next, struct rpc, link);
			char m[300];
			snprintf(m, sizeof(m), "peer daemon %s did not answer within %u ms", p->addr, q->timeout_ms);
			msg_end(p, q, NULL, MORI_ETIMEDOUT, m);
		}
	}
	return tn->inbound.n != 0 || msgs;
}

static int tcp_carries(struct peer *p, uint32_t *lanes)
{
	struct tcp_peer *tp = tcp_peer(p);
	*lanes = tp ? (uint32_t)tp->nready : 0;
	return p->state == PS_UP && *lanes > 0;
}

const struct transport transport_tcp = {
	.name = "tcp",
	.id = TR_TCP,
	.start = tcp_start,
	.stop = tcp_stop,
	.peer_start = tcp_peer_start,
	.peer_down = tcp_peer_down,
	.take = tcp_take,
	.cancel = tcp_cancel,
	.flush = tcp_flush,
	.tick = tcp_tick,
	.carries = tcp_carries,
	.rpc = tcp_rpc,
	.signals = 1,
};
