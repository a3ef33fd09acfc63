/* The TCP transport's data streams: TCP connections between daemons (libuv), framed as struct
 * fhdr + payload (tcp_int.h). Frames received are handed up through tcp_node.on (transport_tcp.c
 * serves them), so this file calls nothing above it. Sending coalesces many frames into one write of up to BATCH_MAX payload bytes whose
 * large payloads are iovecs straight into the registered regions' mappings (no copy in user
 * space); receiving lands large payloads straight into the destination mapping (the read buffer
 * handed to libuv is the destination) and parses small frames out of a staging buffer. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "invariant.h"
#include "log.h"
#include "region/region.h"
#include "tcp_int.h"

struct batch {
	uv_write_t w;
	struct batch *next_free;
	struct stream *s;
	uint32_t nbuf, nfr, nregs, nowned, nserved;
	uint32_t stage_used, seg_start;
	uint64_t bytes, payload;
	struct batch *next_pend;
	uint64_t pend_us;          /* when it began to wait for its copies */
	struct stage_fence fence;  /* VRAM payloads staged into owned[] by copies still running */
	uint8_t *stage;
	uv_buf_t bufs[2 * BATCH_FRAMES + 2];
	struct region *regs[BATCH_FRAMES];
	void *owned[BATCH_FRAMES];
	struct { uint64_t xfer, bytes; } served[BATCH_FRAMES];
};

#define HDR ((uint32_t)sizeof(struct fhdr))

/* ---- batches ---- */

static struct batch *batch_new(struct stream *s)
{
	struct tcp_node *tn = tcp_node(s->P);
	struct batch *b = tn->batch_cache;
	if (b) {
		tn->batch_cache = b->next_free;
		tn->nbatch_cache--;
	} else {
		b = malloc(sizeof(*b));
		if (!b)
			return NULL;
		if (!(b->stage = malloc(STAGE_CAP))) {
			free(b);
			return NULL;
		}
	}
	uint8_t *stage = b->stage;
	memset(b, 0, offsetof(struct batch, bufs));
	b->stage = stage;
	b->s = s;
	return b;
}

static void batch_release(struct peers *P, struct batch *b)
{
	struct tcp_node *tn = tcp_node(P);
	stage_fence_drop(&b->fence); /* copies into owned[] end before the buffers go back */
	for (uint32_t i = 0; i < b->nregs; i++)
		region_put(b->regs[i]);
	for (uint32_t i = 0; i < b->nowned; i++)
		stage_put(b->owned[i]);
	if (tn->nbatch_cache < 16) {
		b->next_free = tn->batch_cache;
		tn->batch_cache = b;
		tn->nbatch_cache++;
	} else {
		free(b->stage);
		free(b);
	}
}

/* The node state goes with its last handle (streams, the listener, the transport itself):
 * batches come back to its cache until then. */
void tcp_node_release(struct peers *P)
{
	struct tcp_node *tn = tcp_node(P);
	MORI_REQUIRE(tn->handles > 0, "tcp transport handle count underflow");
	if (--tn->handles > 0)
		return;
	while (tn->batch_cache) {
		struct batch *b = tn->batch_cache;
		tn->batch_cache = b->next_free;
		free(b->stage);
		free(b);
	}
	free(tn);
	P->tp[TR_TCP] = NULL;
	peers_release(P);
}

/* Close the contiguous stage segment in progress as one iovec. */
static void seg_close(struct batch *b)
{
	if (b->stage_used > b->seg_start) {
		b->bufs[b->nbuf++] = uv_buf_init((char *)b->stage + b->seg_start, b->stage_used - b->seg_start);
		b->seg_start = b->stage_used;
	}
}

static void mark_dirty(struct stream *s)
{
	if (!s->dirty) {
		s->dirty = 1;
		list_add(&tcp_node(s->P)->dirty, &s->dlink);
	}
	peers_dirty(s->P);
}

static void on_written(uv_write_t *w, int status);
static void on_pend_idle(uv_idle_t *h);
static void rxq_drop(struct stream *s);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

/* A flushed batch that will not be written: its READ answers are lost. */
static void batch_fail(struct stream *s, struct batch *b)
{
	s->tx_queued -= b->bytes;
	for (uint32_t i = 0; i < b->nserved; i++)
		tcp_node(s->P)->on->read_served(s->P, s->src_epoch, b->served[i].xfer, b->served[i].bytes, 0);
	batch_release(s->P, b);
}

/* To the socket (its staging copies, if any, done). 0, or -1 when the write failed. */
static int batch_write(struct stream *s, struct batch *b)
{
	int rc = uv_write(&b->w, (uv_stream_t *)&s->tcp, b->bufs, b->nbuf, on_written);
	if (rc < 0) {
		mlog_info("peer", "write on data stream failed: %s", uv_strerror(rc));
		batch_fail(s, b);
		return -1;
	}
	return 0;
}

static void pend_add(struct stream *s)
{
	struct tcp_node *tn = tcp_node(s->P);
	if (!s->pend_on) {
		s->pend_on = 1;
		list_add(&tn->pending, &s->plink);
		uv_idle_start(&tn->pend_idle, on_pend_idle);
	}
}

void stream_flush(struct stream *s)
{
	struct batch *b = s->cur;
	if (!b)
		return;
	s->cur = NULL;
	if (s->closing || !b->nfr) {
		batch_release(s->P, b);
		return;
	}
	seg_close(b);
	b->w.data = b;
	s->tx_queued += b->bytes;
	if (b->fence.mask || s->pend_head) { /* copies running, or an earlier batch waits for its own */
		stage_fence_record(&b->fence); /* a failure shows when it is polled */
		b->pend_us = mori_now_us();
		if (s->pend_tail)
			s->pend_tail->next_pend = b;
		else
			s->pend_head = b;
		s->pend_tail = b;
		pend_add(s);
		return;
	}
	batch_write(s, b);
}

void streams_flush_dirty(struct peers *P)
{
	list_each(it, &tcp_node(P)->dirty) {
		struct stream *s = list_entry(it, struct stream, dlink);
		list_del(&s->dlink);
		s->dirty = 0;
		stream_flush(s);
	}
}

/* Room for one more frame with `stage_need` bytes in the stage and `bufs_need` iovecs? */
static struct batch *batch_room(struct stream *s, uint32_t stage_need, uint32_t bufs_need)
{
	struct batch *b = s->cur;
	if (b && (b->nfr >= BATCH_FRAMES || b->stage_used + stage_need > STAGE_CAP ||
		  b->nbuf + bufs_need + 1 > 2 * BATCH_FRAMES + 2 || b->payload >= BATCH_MAX)) {
		stream_flush(s);
		b = NULL;
	}
	if (!b) {
		if (!(b = s->cur = batch_new(s)))
			return NULL;
	}
	mark_dirty(s);
	return b;
}

uint64_t stream_batch_room(struct stream *s)
{
	if (!s->cur)
		return BATCH_MAX;
	if (s->cur->nfr >= BATCH_FRAMES || s->cur->payload >= BATCH_MAX)
		return 0;
	return BATCH_MAX - s->cur->payload;
}

void stream_frame(struct stream *s, const struct fhdr *h, const void *payload, uint32_t len)
{
	if (s->closing)
		return;
	struct batch *b = batch_room(s, HDR + len, 0);
	if (!b)
		return;
	struct fhdr hh = *h;
	hh.magic = FRAME_MAGIC;
	hh.len = len;
	memcpy(b->stage + b->stage_used, &hh, HDR);
	if (len)
		memcpy(b->stage + b->stage_used + HDR, payload, len);
	b->stage_used += HDR + len;
	b->nfr++;
	b->bytes += HDR + len;
}

int stream_frame_data(struct stream *s, const struct fhdr *h, struct region *g, uint64_t off,
		      uint32_t len, int *err)
{
	*err = 0;
	if (s->closing) {
		*err = MORI_EPEERDEAD;
		return -1;
	}
	int small = len < SMALL_COPY;
	struct batch *b = batch_room(s, HDR + (small ? len : 0), 2);
	if (!b) {
		*err = MORI_ENOMEM;
		return -1;
	}
	struct fhdr hh = *h;
	hh.magic = FRAME_MAGIC;
	hh.len = len;
	uint8_t *dst = b->stage + b->stage_used;
	memcpy(dst, &hh, HDR);
	if (small) {
		if (g->map) {
			memcpy(dst + HDR, (uint8_t *)g->map + off, len);
		} else if ((*err = region_copy(s->P->d, g, off, dst + HDR, len, 0)) != 0) {
			return -1;
		}
		b->stage_used += HDR + len;
	} else {
		void *src;
		if (g->map) {
			src = (uint8_t *)g->map + off;
			if (!b->nregs || b->regs[b->nregs - 1] != g) {
				g->inflight++; /* the mapping must outlive the write */
				b->regs[b->nregs++] = g;
			}
		} else {
			if (!(src = stage_get(len))) {
				*err = MORI_ENOMEM;
				return -1;
			}
			if (g->kind == MORI_MEM_VRAM && !stage_pinned(src))
				count(s->P->d, C_VRAM_UNPINNED, len);
			/* VRAM into a pinned buffer: started here, the batch written once it finished */
			if ((*err = region_copy_start(s->P->d, g, off, src, len, 0, &b->fence)) != 0) {
				stage_put(src);
				return -1;
			}
			b->owned[b->nowned++] = src;
			if (b->fence.mask && (!b->nregs || b->regs[b->nregs - 1] != g)) {
				g->inflight++; /* the mapping must outlive the copy */
				b->regs[b->nregs++] = g;
			}
		}
		b->stage_used += HDR;
		seg_close(b);
		b->bufs[b->nbuf++] = uv_buf_init(src, len);
	}
	b->nfr++;
	b->bytes += HDR + len;
	b->payload += len;
	if (h->type == F_RDATA && !s->outgoing) {
		b->served[b->nserved].xfer = h->xfer;
		b->served[b->nserved++].bytes = len;
	}
	return 0;
}

static void on_written(uv_write_t *w, int status)
{
	struct batch *b = w->data;
	struct stream *s = b->s;
	struct peers *P = s->P;
	s->tx_queued -= b->bytes;
	for (uint32_t i = 0; i < b->nserved; i++)
		tcp_node(P)->on->read_served(P, s->src_epoch, b->served[i].xfer, b->served[i].bytes, status == 0);
	if (status == 0) {
		count(P->d, C_BYTES_SENT, b->payload);
		if (s->p && !s->closing)
			s->p->bytes_sent += b->payload;
	}
	batch_release(P, b);
	if (s->closing)
		return;
	if (s->outgoing) {
		tcp_peer(s->p)->pump_needed = 1;
		peers_dirty(P);
	} else if (s->read_stopped && s->tx_queued < STREAM_WINDOW / 2) {
		s->read_stopped = 0;
		if (!s->rx_waiting) /* else pend_run restarts it when the frame's copy finished */
			uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read);
	}
}

/* ---- closing ---- */

static void on_stream_closed(uv_handle_t *h)
{
	struct stream *s = h->data;
	struct peers *P = s->P;
	if (s->rx_pinned > 0)
		stage_unpin(s->rxbuf);
	if (s->rx_stage)
		stage_put(s->rx_stage);
	free(s->rxbuf);
	free(s->rx_mbuf);
	free(s);
	tcp_node_release(P);
}

void stream_close(struct stream *s)
{
	if (s->closing)
		return;
	s->closing = 1;
	if (s->dirty) {
		list_del(&s->dlink);
		s->dirty = 0;
	}
	if (s->cur) {
		batch_release(s->P, s->cur);
		s->cur = NULL;
	}
	while (s->pend_head) {
		struct batch *b = s->pend_head;
		s->pend_head = b->next_pend;
		batch_release(s->P, b);
	}
	s->pend_tail = NULL;
	stage_fence_drop(&s->rx_fence); /* rx_stage goes back in on_stream_closed */
	s->rx_waiting = 0;
	rxq_drop(s);
	if (s->pend_on) {
		list_del(&s->plink);
		s->pend_on = 0;
	}
	if (s->rx_reg) {
		region_put(s->rx_reg);
		s->rx_reg = NULL;
	}
	if (!s->outgoing)
		list_del(&s->link);
	uv_close((uv_handle_t *)&s->tcp, on_stream_closed);
}

/* A stream broke: for ours, the peer is down (every stream goes, transfers on the wire fail);
 * for an accepted one, the initiator's state here goes with it. */
void stream_lost(struct stream *s, int code, const char *why)
{
	if (s->closing)
		return;
	if (s->outgoing) {
		struct peer *p = s->p;
		if (s->conn_gen == tcp_peer(p)->conn_gen)
			peer_down(p, code, "%s", why);
		else
			stream_close(s);
	} else {
		uint64_t e = s->src_epoch;
		mlog_info("peer", "data stream from %s closed: %s", s->p ? s->p->addr : "?", why);
		stream_close(s);
		if (e)
			tcp_node(s->P)->on->source_gone(s->P, e);
	}
}

/* ---- receiving ---- */

static void payload_end(struct stream *s);

static int proto_error(struct stream *s, const char *why)
{
	char m[200];
	snprintf(m, sizeof(m), "protocol error on data stream: %s", why);
	mlog_warn("peer", "%s%s%s", s->p ? s->p->addr : "", s->p ? ": " : "", m);
	stream_lost(s, MORI_EPROTO, m);
	return -1;
}

static int frame_begin(struct stream *s)
{
	struct fhdr *h = &s->h;
	if (h->magic != FRAME_MAGIC)
		return proto_error(s, "bad frame magic");
	s->rx_payload = 1;
	s->rx_left = h->len;
	s->rx_dst = NULL;
	s->rx_copy = 0;
	s->rx_flush = 0;
	s->rx_code = 0;
	s->rx_collect = 0;
	s->rx_msglen = 0;
	if (s->outgoing ? !s->ready && h->type != F_HELLO_ACK
			: (s->hs == 0 && h->type != F_HELLO) || (s->hs == 1 && h->type != F_AUTH)) {
		if (!s->outgoing)
			count(s->P->d, C_PEER_AUTH_REFUSED, 1);
		return proto_error(s, s->outgoing || s->hs == 0 ? "first frame is not a hello"
							    : "frame before authentication");
	}
	switch (h->type) {
	case F_HELLO:
	case F_HELLO_ACK:
	case F_DONE:
	case F_AUTH:
		if ((h->type == F_HELLO_ACK || h->type == F_DONE) != s->outgoing || h->len > sizeof(s->rx_msg) - 1 ||
		    (h->type == F_HELLO && s->hs != 0) || (h->type == F_HELLO_ACK && s->ready) ||
		    (h->type == F_AUTH && s->hs != 1))
			return proto_error(s, "unexpected control frame");
		s->rx_collect = 1;
		break;
	case F_WRITE:
		if (s->outgoing || h->len > CHUNK_MAX)
			return proto_error(s, "bad write frame");
		tcp_node(s->P)->on->write_hdr(s);
		break;
	case F_READ:
	case F_ABORT:
		if (s->outgoing || h->len)
			return proto_error(s, "bad read/abort frame");
		s->rx_payload = 0;
		s->rx_big = 0;
		if (h->type == F_READ)
			tcp_node(s->P)->on->read_req(s);
		else
			tcp_node(s->P)->on->abort(s);
		return 0;
	case F_MSG:
	case F_MSGREP:
		if ((h->type == F_MSGREP) != s->outgoing || !h->len || h->len > MSG_MAX)
			return proto_error(s, "bad message frame");
		free(s->rx_mbuf);
		s->rx_mhave = 0;
		if (!(s->rx_mbuf = malloc(h->len)))
			return proto_error(s, "out of memory for a message frame");
		break;
	case F_RDATA:
		if (!s->outgoing || h->len > CHUNK_MAX)
			return proto_error(s, "bad data frame");
		if (h->code) {
			if (h->len > sizeof(s->rx_msg) - 1)
				return proto_error(s, "bad error frame");
			s->rx_collect = 1;
		}
		tcp_node(s->P)->on->rdata_hdr(s);
		break;
	default:
		return proto_error(s, "unknown frame type");
	}
	if (!s->closing && s->rx_left == 0)
		payload_end(s);
	return s->closing ? -1 : 0;
}

/* The target: a HELLO (the initiator's nonce and node) is answered with our nonce and proof. */
static void on_hello_in(struct stream *s)
{
	struct peers *P = s->P;
	if (s->h.code != FRAME_VERSION || !s->h.xfer || s->rx_msglen < AUTH_NONCE_BYTES) {
		char why[96];
		snprintf(why, sizeof(why), "data stream hello of frame version %d refused (this daemon speaks %d)",
			 s->h.code, FRAME_VERSION);
		proto_error(s, why);
		return;
	}
	uint8_t ack[2 * AUTH_NONCE_BYTES + 128] = {0};
	size_t self = strlen(P->self);
	memcpy(s->peer_nonce, s->rx_msg, AUTH_NONCE_BYTES);
	uint32_t nl = s->rx_msglen - AUTH_NONCE_BYTES;
	nl = nl < sizeof(s->hello_node) - 1 ? nl : (uint32_t)sizeof(s->hello_node) - 1;
	memcpy(s->hello_node, s->rx_msg + AUTH_NONCE_BYTES, nl);
	s->hello_node[nl] = 0;
	auth_nonce(s->nonce);
	memcpy(ack, s->nonce, AUTH_NONCE_BYTES);
	if (P->key.on)
		auth_mac(&P->key, AUTH_DATA_TARGET, s->peer_nonce, s->nonce, ack + AUTH_NONCE_BYTES);
	memcpy(ack + 2 * AUTH_NONCE_BYTES, P->self, self < 127 ? self : 127);
	s->hello_epoch = s->h.xfer;
	s->hs = 1;
	struct fhdr a = {.type = F_HELLO_ACK, .code = FRAME_VERSION, .xfer = P->d->epoch};
	stream_frame(s, &a, ack, (uint32_t)(2 * AUTH_NONCE_BYTES + (self < 127 ? self : 127)));
}

/* The target: the initiator's proof; only now is anything it sends served. */
static void on_auth(struct stream *s)
{
	struct peers *P = s->P;
	if (P->key.on && !auth_check(&P->key, AUTH_DATA_INITIATOR, s->nonce, s->peer_nonce, (uint8_t *)s->rx_msg,
				     s->rx_msglen)) {
		count(P->d, C_PEER_AUTH_REFUSED, 1);
		mlog_ratelimited(MLOG_WARN, "peer", "refused a data stream: its initiator did not prove the cluster key");
		stream_lost(s, MORI_EPERM, "initiator not authenticated");
		return;
	}
	s->src_epoch = s->hello_epoch;
	s->hs = 2;
	/* the node it named in its hello, known for moractl once it authenticated */
	if (s->hello_node[0] && strcmp(s->hello_node, P->self) != 0)
		s->p = peer_get(P, s->hello_node, 1);
}

/* The initiator: check the target's proof, send ours; the stream carries transfers from now on. */
static void on_hello_ack(struct stream *s)
{
	struct peers *P = s->P;
	struct peer *p = s->p;
	struct tcp_peer *tp = tcp_peer(p);
	if (s->conn_gen != tp->conn_gen)
		return;
	if (s->h.xfer != p->epoch) {
		peer_down(p, MORI_EPEERDEAD, "restarted while connecting (epoch %llx, expected %llx)",
			  (unsigned long long)s->h.xfer, (unsigned long long)p->epoch);
		return;
	}
	const uint8_t *ns = (const uint8_t *)s->rx_msg;
	if (s->rx_msglen < 2 * AUTH_NONCE_BYTES ||
	    (P->key.on && !auth_check(&P->key, AUTH_DATA_TARGET, s->nonce, ns, ns + AUTH_NONCE_BYTES, AUTH_MAC_BYTES))) {
		count(P->d, C_PEER_AUTH_REFUSED, 1);
		peer_down(p, MORI_EPERM, "its data port did not prove the cluster key (%s)",
			  s->rx_msglen < 2 * AUTH_NONCE_BYTES ? "an older or foreign peer" : "another key, or none");
		return;
	}
	uint8_t mac[AUTH_MAC_BYTES] = {0};
	if (P->key.on)
		auth_mac(&P->key, AUTH_DATA_INITIATOR, ns, s->nonce, mac);
	struct fhdr a = {.type = F_AUTH};
	stream_frame(s, &a, mac, sizeof(mac));
	s->ready = 1;
	if (++tp->nready == tp->nout) {
		mlog_info("peer", "peer %s: %d data streams up", p->addr, tp->nready);
		tp->pump_needed = 1; /* what was queued while connecting goes now */
		peer_up(p);
	}
}

static void payload_finish(struct stream *s);

/* The frame's copy to VRAM must land before its end is acted on (write_end, FF_SIGNAL). Where
 * nothing was read past the payload (rx_direct) the copy is started, not waited for: a WRITE
 * frame's end is queued (rxq) and the stream reads on, any other frame's (or a WRITE once the
 * queue is full) stops the stream's reading until it finished; pend_run ends them. Else the copy
 * is done synchronously. */
static void payload_end(struct stream *s)
{
	s->rx_payload = 0;
	s->rx_big = s->h.len >= RX_DIRECT_MIN && s->rx_dst;
	if (s->rx_flush && !s->rx_code) {
		if (!s->rx_direct) {
			s->rx_code = region_copy(s->P->d, s->rx_reg, s->rx_addr, s->rx_stage, s->h.len, 1);
		} else {
			const int queue = s->h.type == F_WRITE && s->rxq_n < RXQ_MAX;
			struct rx_end *e = &s->rxq[(s->rxq_head + s->rxq_n) % RXQ_MAX];
			struct stage_fence *f = queue ? &e->fence : &s->rx_fence; /* empty: polled or dropped */
			s->rx_code = region_copy_start(s->P->d, s->rx_reg, s->rx_addr, s->rx_stage, s->h.len, 1, f);
			if (!s->rx_code && f->mask) {
				stage_fence_record(f);
				if (queue) {
					e->h = s->h, e->reg = s->rx_reg, e->stage = s->rx_stage, e->since_us = mori_now_us();
					s->rxq_n++;
					s->rx_reg = NULL, s->rx_stage = NULL, s->rx_flush = 0;
				} else {
					s->rx_waiting = 1;
					s->rx_wait_us = mori_now_us();
					uv_read_stop((uv_stream_t *)&s->tcp);
				}
				pend_add(s);
				return;
			}
		}
	}
	payload_finish(s);
}

static void payload_finish(struct stream *s)
{
	s->rx_flush = 0;
	if (s->rx_stage) { /* back to the pool (rx_dst still says where the payload went: rx_big) */
		stage_put(s->rx_stage);
		s->rx_stage = NULL;
	}
	switch (s->h.type) {
	case F_HELLO:
		on_hello_in(s);
		break;
	case F_HELLO_ACK:
		on_hello_ack(s);
		break;
	case F_AUTH:
		on_auth(s);
		break;
	case F_WRITE:
		tcp_node(s->P)->on->write_end(s);
		break;
	case F_DONE:
		s->rx_msg[s->rx_msglen] = 0;
		tcp_node(s->P)->on->done(s);
		break;
	case F_RDATA:
		s->rx_msg[s->rx_msglen] = 0;
		tcp_node(s->P)->on->rdata_end(s);
		break;
	case F_MSG:
	case F_MSGREP:
		if (s->h.type == F_MSG)
			tcp_node(s->P)->on->msg_in(s);
		else
			tcp_node(s->P)->on->msg_reply(s);
		free(s->rx_mbuf);
		s->rx_mbuf = NULL;
		break;
	}
	if (s->rx_reg) {
		region_put(s->rx_reg);
		s->rx_reg = NULL;
	}
}

static void payload_piece(struct stream *s, const uint8_t *p, uint64_t n)
{
	if (s->rx_mbuf) { /* frame_begin sized it: n never runs past h.len */
		memcpy(s->rx_mbuf + s->rx_mhave, p, n);
		s->rx_mhave += (uint32_t)n;
	} else if (s->rx_dst) {
		memcpy(s->rx_dst, p, n);
		s->rx_dst += n;
	} else if (s->rx_copy && !s->rx_code) {
		s->rx_code = region_copy(s->P->d, s->rx_reg, s->rx_addr, (void *)p, n, 1);
		s->rx_addr += n;
	} else if (s->rx_collect) {
		uint64_t room = sizeof(s->rx_msg) - 1 - s->rx_msglen;
		uint64_t k = n < room ? n : room;
		memcpy(s->rx_msg + s->rx_msglen, p, k);
		s->rx_msglen += (uint32_t)k;
	}
}

static void parse(struct stream *s, const uint8_t *p, uint64_t n)
{
	while (n > 0 && !s->closing) {
		if (!s->rx_payload) {
			uint32_t take = HDR - s->hhave;
			if (take > n)
				take = (uint32_t)n;
			memcpy(s->hbuf + s->hhave, p, take);
			s->hhave += take;
			p += take;
			n -= take;
			if (s->hhave < HDR)
				return;
			s->hhave = 0;
			memcpy(&s->h, s->hbuf, HDR);
			if (frame_begin(s) != 0)
				return;
		} else {
			uint64_t take = s->rx_left < n ? s->rx_left : n;
			payload_piece(s, p, take);
			s->rx_left -= take;
			p += take;
			n -= take;
			if (!s->rx_left)
				payload_end(s);
		}
	}
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct stream *s = h->data;
	if (s->rx_payload && s->rx_dst && s->rx_left >= RX_DIRECT_MIN) {
		/* Straight into the destination region: exactly the payload, nothing beyond it. */
		buf->base = (char *)s->rx_dst;
		buf->len = s->rx_left;
	} else if (!s->rx_payload && s->rx_big) {
		/* After a large payload another likely follows: take just its header, so that the
		 * payload lands directly instead of through the staging buffer. */
		buf->base = (char *)s->rxbuf;
		buf->len = HDR - s->hhave;
	} else {
		buf->base = (char *)s->rxbuf;
		buf->len = RX_BUF;
	}
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	struct stream *s = st->data;
	if (n < 0) {
		char m[160];
		snprintf(m, sizeof(m), "data stream %s", n == UV_EOF ? "closed by the other side" : uv_strerror((int)n));
		if (!s->outgoing && s->hs == 1) { /* it had our proof and gave none: it found ours wrong, or has none */
			count(s->P->d, C_PEER_AUTH_REFUSED, 1);
			mlog_ratelimited(MLOG_WARN, "peer", "a data stream from %s closed before its initiator proved the "
							    "cluster key", s->hello_node[0] ? s->hello_node : "?");
		}
		/* a link that went silent (nothing acknowledged for peer_dead_ms) is a stall: its
		 * transfers end at their deadlines (peer_down) */
		stream_lost(s, n == UV_EOF || n == UV_ECONNRESET ? MORI_EPEERDEAD : n == UV_ETIMEDOUT ? MORI_ETIMEDOUT : MORI_EIO, m);
		return;
	}
	if (n == 0 || s->closing)
		return;
	if (buf->base != (char *)s->rxbuf) {
		s->rx_dst += n;
		s->rx_left -= (uint64_t)n;
		if (!s->rx_left) {
			s->rx_direct = 1;
			payload_end(s);
			s->rx_direct = 0;
		}
	} else {
		parse(s, (const uint8_t *)buf->base, (uint64_t)n);
	}
	if (!s->closing && !s->outgoing && !s->read_stopped &&
	    s->tx_queued + (s->cur ? s->cur->bytes : 0) > STREAM_WINDOW) {
		/* Answers pile up faster than the initiator takes them: stop reading requests. */
		s->read_stopped = 1;
		uv_read_stop(st);
	}
}

/* ---- staging copies in flight (VRAM frames) ---- */

/* A queued WRITE frame's copy landed (or failed: code): its end, with the frame's own header,
 * region and stage in the stream's fields for the while (the frame being read keeps its own). */
static void rx_end_finish(struct stream *s, struct rx_end *e, int code)
{
	struct fhdr h = s->h;
	struct region *reg = s->rx_reg;
	uint8_t *stage = s->rx_stage;
	int rc = s->rx_code, flush = s->rx_flush;
	s->h = e->h, s->rx_reg = e->reg, s->rx_stage = e->stage, s->rx_code = code;
	payload_finish(s); /* puts the stage and the region */
	s->h = h, s->rx_reg = reg, s->rx_stage = stage, s->rx_code = rc, s->rx_flush = flush;
	if (s->closing && s->rx_reg) { /* it closed meanwhile: the frame being read keeps its region no more */
		region_put(s->rx_reg);
		s->rx_reg = NULL;
	}
}

/* A received frame's end waited for its copy into VRAM since `since` (vram_recv_wait*). */
static void rx_waited(struct stream *s, uint64_t since)
{
	count(s->P->d, C_VRAM_RX_WAITS, 1);
	count(s->P->d, C_VRAM_RX_WAIT_US, mori_now_us() - since);
}

/* Stream closing: the queued frames' copies waited for, their buffers and regions let go. */
static void rxq_drop(struct stream *s)
{
	for (; s->rxq_n; s->rxq_n--, s->rxq_head = (s->rxq_head + 1) % RXQ_MAX) {
		struct rx_end *e = &s->rxq[s->rxq_head];
		stage_fence_drop(&e->fence);
		stage_put(e->stage);
		region_put(e->reg);
	}
}

/* s's batches whose copies finished go to the socket, in order; a received frame whose copy
 * finished is acted on and reading resumes. 1 when it called out (the frame's end, a failure):
 * streams may have closed, so the caller starts its walk again. */
static int pend_run(struct stream *s)
{
	while (s->pend_head) {
		struct batch *b = s->pend_head;
		int r = stage_fence_poll(&b->fence);
		if (!r)
			break;
		if (!(s->pend_head = b->next_pend))
			s->pend_tail = NULL;
		count(s->P->d, C_VRAM_TX_WAITS, 1);
		count(s->P->d, C_VRAM_TX_WAIT_US, mori_now_us() - b->pend_us);
		if (r < 0) {
			batch_fail(s, b);
			stream_lost(s, MORI_EIO, "a GPU copy staging a frame failed");
			return 1;
		}
		if (batch_write(s, b) != 0) { /* the stream must not go on with frames missing */
			stream_lost(s, MORI_EIO, "write on data stream failed");
			return 1;
		}
	}
	int called_out = 0;
	while (s->rxq_n && !s->closing) {
		struct rx_end *e = &s->rxq[s->rxq_head];
		int r = stage_fence_poll(&e->fence);
		if (!r)
			break;
		s->rxq_head = (s->rxq_head + 1) % RXQ_MAX;
		s->rxq_n--;
		rx_waited(s, e->since_us);
		rx_end_finish(s, e, r < 0 ? r : 0);
		called_out = 1;
	}
	if (s->rx_waiting) {
		int r = stage_fence_poll(&s->rx_fence);
		if (!r)
			return called_out; /* queued frames' ends may have run: the walk starts again */
		s->rx_waiting = 0;
		rx_waited(s, s->rx_wait_us);
		if (r < 0 && !s->rx_code)
			s->rx_code = r;
		payload_finish(s);
		if (!s->closing && !s->read_stopped)
			uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read);
		return 1;
	}
	return called_out;
}

static void on_pend_idle(uv_idle_t *h)
{
	struct tcp_node *tn = tcp_node(h->data);
again:
	list_each(it, &tn->pending) {
		struct stream *s = list_entry(it, struct stream, plink);
		int called_out = pend_run(s);
		if (s->pend_on && !s->pend_head && !s->rx_waiting && !s->rxq_n) {
			list_del(&s->plink);
			s->pend_on = 0;
		}
		if (called_out)
			goto again;
	}
	if (tn->pending.next == &tn->pending)
		uv_idle_stop(h);
}

static void pend_idle_closed(uv_handle_t *h)
{
	tcp_node_release(h->data);
}

void streams_pend_init(struct peers *P)
{
	struct tcp_node *tn = tcp_node(P);
	LIST_INIT(&tn->pending);
	uv_idle_init(P->d->loop, &tn->pend_idle);
	tn->pend_idle.data = P;
	tn->handles++; /* let go in pend_idle_closed */
}

void streams_pend_stop(struct peers *P)
{
	uv_close((uv_handle_t *)&tcp_node(P)->pend_idle, pend_idle_closed);
}

void stream_setup(struct stream *s)
{
	uv_os_fd_t fd;
	uv_tcp_nodelay(&s->tcp, 1);
	/* A peer host that vanishes without a reset: idle streams notice through keepalives, busy
	 * ones when sent data stays unacknowledged this long (then the peer is marked down). */
	unsigned ut = (unsigned)s->P->d->cfg.peer_dead_ms;
	uv_tcp_keepalive(&s->tcp, 1, ut >= 2000 ? ut / 2000 : 1);
	if (uv_fileno((uv_handle_t *)&s->tcp, &fd) == 0)
		setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut));
	uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read);
}

/* ---- outgoing ---- */

struct stream *stream_new(struct peers *P)
{
	struct stream *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (!(s->rxbuf = malloc(RX_BUF))) {
		free(s);
		return NULL;
	}
	s->P = P;
	LIST_INIT(&s->link);
	LIST_INIT(&s->dlink);
	uv_tcp_init(P->d->loop, &s->tcp);
	s->tcp.data = s;
	tcp_node(P)->handles++; /* both let go in on_stream_closed: tcp_node_release */
	return s;
}
