/* RDMA transport below the hardware line: pure C, driven through a table of
 * operations that libibverbs implements for real (rdma_verbs.c) and a fake implements in tests.
 *
 *  - work-request ids: transfer id, chunk index, QP generation and kind packed in 64 bits;
 *  - descriptor plans: (local, remote, length) lists walked as chunks, merging descriptors that
 *    are contiguous on both sides and cutting at the port's largest message;
 *  - queue pairs: RESET -> INIT -> RTR -> RTS with the configured timeout, retry count and RNR
 *    retry; a QP in error is destroyed and re-created, and the two ends re-pair through a small
 *    CONNECT/ACK exchange that the owner carries over its control link;
 *  - the engine: transfers striped over a connection's QPs, never more work requests posted
 *    than a send queue holds (the rest waits in the engine, it does not fail), selective
 *    signalling, a notification (SEND) that reaches the target only after the data, error
 *    completions mapped to MORI codes, and deadlines: a transfer whose work requests are still
 *    out at its deadline has its QP killed, so no lost acknowledgement leaves it in progress.
 *
 * Everything runs on one thread (the daemon's loop); nothing here blocks or sleeps.
 * Times are microseconds on the caller's monotonic clock; sizes are bytes.
 */
#ifndef MORID_RDMA_CORE_H
#define MORID_RDMA_CORE_H
#include <stddef.h>
#include <stdint.h>

#include "core/chunk.h"
#include "mori.h"

/* ---- work-request ids ----
 * bits 63..32 transfer id, 31..12 chunk index (modulo 2^20: for diagnostics; the engine matches
 * completions by position in the send queue), 11..4 QP generation (completions of an earlier QP
 * in the same slot are ignored), 3..0 kind. */
enum rdma_wrk { WRK_DATA = 1, WRK_NOTIF = 2, WRK_RECV = 3 };
#define WRID_CHUNK_MASK 0xfffffu
static inline uint64_t wrid_make(uint32_t xfer, uint32_t chunk, uint8_t gen, unsigned kind)
{
	return (uint64_t)xfer << 32 | (uint64_t)(chunk & WRID_CHUNK_MASK) << 12 |
	       (uint64_t)gen << 4 | (kind & 0xfu);
}
static inline uint32_t wrid_xfer(uint64_t w) { return (uint32_t)(w >> 32); }
static inline uint32_t wrid_chunk(uint64_t w) { return (uint32_t)(w >> 12) & WRID_CHUNK_MASK; }
static inline uint8_t wrid_gen(uint64_t w) { return (uint8_t)(w >> 4); }
static inline unsigned wrid_kind(uint64_t w) { return (unsigned)(w & 0xfu); }

/* ---- descriptor plans ---- */
/* How many chunks chunk_next (chunk.h) yields for the whole list. */
uint64_t rdma_count_chunks(const mori_desc *d, uint32_t n, uint64_t max);

/* ---- completion status -> MORI code ---- */
/* Map an ibv_wc_status value to a MORI code and a short message ("remote access error").
 * IBV_WC_SUCCESS maps to MORI_OK. Unknown values map to MORI_EIO. msg is static storage. */
int rdma_wc_error(int wc_status, const char **msg);
/* Is the status a failure of the path (flushed behind another failure, peer QP gone, receiver
 * not ready, the two ends' QP state out of step, device hiccup) rather than of the request
 * itself (bad key, bad local length)? The
 * engine re-posts the former on a new QP, bounded by RDMA_MAX_REQUEUES and the deadline, and
 * fails the transfer at once on the latter. */
int rdma_wc_transient(int wc_status);

/* ---- the hardware line ---- */
enum rdma_qps { QPS_NONE = 0, QPS_RESET, QPS_INIT, QPS_RTR, QPS_RTS, QPS_ERR };
const char *rdma_qps_name(int s);

enum rdma_op { RDMA_WRITE = 1, RDMA_READ = 2, RDMA_SEND = 3 };

struct rdma_wr {
	uint64_t wr_id;
	int op;                 /* enum rdma_op */
	uint64_t laddr;
	uint32_t lkey, len;
	uint64_t raddr;         /* WRITE/READ */
	uint32_t rkey;
	int signaled;
	int fence;              /* wait for earlier READs (a notification after read data) */
};

#define RDMA_WC_FLUSH 5  /* IBV_WC_WR_FLUSH_ERR (checked in rdma_plan.c) */
struct rdma_wc {
	uint64_t wr_id;
	uint32_t qpn;
	int status;             /* ibv_wc_status */
	int recv;               /* a receive completion */
	uint32_t byte_len;
	uint32_t vendor_err;
};

/* One end of a QP pair, as exchanged between the two engines' owners. */
struct rdma_ep {
	uint32_t qpn;           /* 24 bits */
	uint32_t psn;           /* 24 bits */
	uint32_t mtu;           /* active MTU, bytes */
	uint8_t gid[16];
	uint32_t peer_qpn;      /* in an ACK: the QP end the sender paired with; else 0 */
	uint32_t peer_psn;
	uint32_t inc;           /* the slot's incarnation at the sender: +1 for each QP it makes */
	uint64_t nonce;         /* the sender's connection (a new one after a peer restart) */
};
/* A QP end is (qpn, psn): devices reuse QP numbers at once (Soft-RoCE does), and a new QP
 * always gets a new random PSN. Messages about QPs travel late and twice; the incarnation
 * tells an old one (dropped) from news (the peer made a new QP: ours, paired with its old
 * one, is replaced). Each side makes one QP per incarnation, so two crossing resets meet in
 * the middle instead of chasing each other. */

/* Attributes of one state change. */
struct rdma_qp_attr {
	int to;                 /* QPS_INIT, QPS_RTR, QPS_RTS or QPS_ERR */
	uint8_t port;
	int gid_index;
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer;
	uint8_t max_rd_atomic;
	uint32_t path_mtu;      /* bytes */
	uint32_t sq_psn, rq_psn;
	uint32_t dest_qpn;
	uint8_t dgid[16];
};

struct rdma_qp;

struct rdma_ops {
	/* Create a QP (RESET) with room for depth send and rq_depth receive requests; sets q->qpn
	 * and q->hw. Returns 0 or a MORI code with a reason. */
	int (*qp_create)(void *ctx, struct rdma_qp *q, uint32_t depth, uint32_t rq_depth, char *err,
			 size_t len);
	int (*qp_modify)(void *ctx, struct rdma_qp *q, const struct rdma_qp_attr *a, char *err,
			 size_t len);
	void (*qp_destroy)(void *ctx, struct rdma_qp *q); /* the device stops touching memory */
	/* Register len bytes at addr for local access; *handle is passed to mr_dereg. */
	int (*mr_reg)(void *ctx, void *addr, size_t len, uint32_t *lkey, void **handle, char *err,
		      size_t errlen);
	void (*mr_dereg)(void *ctx, void *handle);
	/* Post n send requests in order. Returns 0, or a MORI code when any was refused (the QP is
	 * then treated as failed: the engine re-posts everything after re-creating it). */
	int (*post_send)(void *ctx, struct rdma_qp *q, const struct rdma_wr *w, int n, char *err,
			 size_t len);
	int (*post_recv)(void *ctx, struct rdma_qp *q, uint64_t wr_id, uint64_t addr, uint32_t len,
			 uint32_t lkey);
	/* Up to max completions from the engine's CQ; < 0 when the device failed. */
	int (*poll)(void *ctx, struct rdma_wc *wc, int max);
};

/* ---- engine ---- */
/* A notification on the wire: a header (the sender connection's nonce, the notification's id,
 * the lowest id the sender may still send) and the caller's message. A notification whose
 * acknowledgement was lost is sent again on a new QP; the receiver drops the copy by its id, so
 * each is delivered at most once, and (while its transfer succeeds) exactly once. */
#define RDMA_NOTIF_WIRE 64
#define RDMA_NOTIF_HDR 24
#define RDMA_NOTIF_MAX (RDMA_NOTIF_WIRE - RDMA_NOTIF_HDR) /* bytes of the caller's message */
#define RDMA_MAX_QPS 16
#define RDMA_MAX_REQUEUES 4 /* times a transfer's work may be re-posted after QP failures */
#define RDMA_DRAIN_US 1000000 /* a QP being reset is destroyed by then even if not drained */

struct rdma_cfg {
	uint32_t sq_depth;      /* send requests per QP */
	uint32_t rq_depth;      /* receive buffers per QP (notifications) */
	uint32_t sig_every;     /* signal at least every n send requests */
	uint64_t chunk;         /* largest work request, bytes (<= the port's max message) */
	uint32_t mtu;           /* local active MTU, bytes */
	uint8_t port;
	int gid_index;
	uint8_t gid[16];
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer, max_rd_atomic;
	uint32_t connect_retry_us; /* resend CONNECT while a slot waits for its peer */
	/* A QP with requests out and no completion for this long is reset and its work re-posted
	 * (0: four times the transport's own retry budget, 4.096 us * 2^timeout * (retry_cnt + 1),
	 * plus 2 s). Seen on Soft-RoCE under load: a QP that neither completes nor fails. */
	uint32_t stall_us;
};
void rdma_cfg_defaults(struct rdma_cfg *c);

struct rdma_eng;
struct rdma_conn;

/* What the owner of a connection provides. */
struct rdma_conn_cb {
	/* Carry CONNECT(idx, ep) to the peer, whose owner calls rdma_conn_remote(); an answer comes
	 * back as an ACK the same way. Loss is fine: the engine resends. */
	void (*send_connect)(void *arg, struct rdma_conn *c, int idx, const struct rdma_ep *ep,
			     int ack);
	/* A notification message arrived (only after the data it follows). */
	void (*on_notif)(void *arg, struct rdma_conn *c, const void *msg, uint32_t len);
	/* A slot went down and came back, for counters and logs (reason says why). */
	void (*on_qp_event)(void *arg, struct rdma_conn *c, int idx, const char *what,
			    const char *reason);
	void *arg;
};

struct rdma_fifo_ent {
	uint64_t wr_id;
	uint32_t xfer;
	uint8_t kind;
	uint8_t signaled;
	uint32_t len;
	uint64_t loff, roff;
};

struct rdma_qp {
	struct rdma_conn *conn;
	int idx;
	void *hw;               /* the ops' own QP object */
	uint32_t qpn;
	int state;              /* enum rdma_qps */
	uint8_t gen;
	uint32_t psn;
	struct rdma_ep remote;  /* valid from RTR */
	uint64_t connect_sent_us;
	uint64_t progress_us;   /* last completion, or when work went out on an idle QP */
	/* send queue accounting: entries [head, tail) are posted and not retired */
	struct rdma_fifo_ent *fifo;
	uint32_t depth, head, tail;
	uint32_t unsignaled;    /* unsignaled requests since the last signalled one */
	/* receive buffers and notification send slots, registered once per QP */
	uint8_t *ctrl;
	uint32_t ctrl_lkey;
	void *ctrl_mr;
	uint32_t rq_posted;
	uint64_t posted, completed, errors;
	char why[192];          /* last failure */
	/* reset: ERR, drained (every request and receive completed), then destroyed */
	int draining;
	uint64_t drain_start;
	int drain_code;
	uint64_t reset_id;
	struct rdma_ep pending; /* the peer's new end, to pair with once our new QP exists */
	int pending_valid;
	uint32_t inc;           /* our incarnation of this slot */
	uint32_t remote_inc;    /* the newest incarnation seen from the peer */
};

static inline uint32_t rdma_qp_outstanding(const struct rdma_qp *q) { return q->tail - q->head; }

struct rdma_xfer_args {
	int read;               /* 1: remote -> local, 0: local -> remote */
	uint64_t laddr;         /* local region base (descriptors' local offsets are from it) */
	uint32_t lkey;
	uint64_t raddr;         /* remote region base */
	uint32_t rkey;
	const mori_desc *descs; /* borrowed until done is called */
	uint32_t n;
	const void *notif;      /* message sent after the data; NULL for none */
	uint32_t notif_len;     /* <= RDMA_NOTIF_MAX */
	uint64_t deadline_us;   /* absolute */
	/* Called exactly once, after every work request of the transfer has left the device. */
	void (*done)(void *arg, uint32_t id, int code, const char *msg);
	void *arg;
};

struct rdma_stats {
	uint64_t xfers, xfer_errors, bytes, wrs_posted, wrs_signaled, chunks, merged;
	uint64_t qp_resets, requeued, stale_wcs, sq_full_waits, timeouts, notifs_rx, stalls;
	uint64_t notifs_dup, notifs_bad;
};

/* Create an engine over ops/ctx. Returns NULL when out of memory. */
struct rdma_eng *rdma_eng_new(const struct rdma_ops *ops, void *ctx, const struct rdma_cfg *cfg);
/* Fail every transfer (MORI_ECANCELED, "shutting down"), destroy every QP, free. */
void rdma_eng_free(struct rdma_eng *e);
const struct rdma_stats *rdma_eng_stats(const struct rdma_eng *e);
void rdma_eng_set_cfg(struct rdma_eng *e, const struct rdma_cfg *cfg); /* for new QPs */
/* NULL while the engine works; after its device failed (a completion poll error), the reason.
 * A dead engine has ended every transfer with MORI_EIO and refuses new ones (MORI_EIO): its
 * owner frees it and builds a new one when the device is back. */
const char *rdma_eng_dead(const struct rdma_eng *e);

/* A connection of nqp QPs (1..RDMA_MAX_QPS) to one peer engine. The QPs are created and moved
 * to INIT; each is paired when rdma_conn_remote() brings the peer's end. Returns NULL with a
 * reason in err. */
struct rdma_conn *rdma_conn_new(struct rdma_eng *e, int nqp, const struct rdma_conn_cb *cb,
				uint64_t now, char *err, size_t len);
/* Fail the connection's transfers with code/msg, destroy its QPs, free it. */
void rdma_conn_free(struct rdma_conn *c, int code, const char *msg);
int rdma_conn_nqp(const struct rdma_conn *c);
const struct rdma_qp *rdma_conn_qp(const struct rdma_conn *c, int idx);
/* This end of slot idx, to send to the peer in the first exchange. */
int rdma_conn_local(const struct rdma_conn *c, int idx, struct rdma_ep *ep);
/* The peer's end of slot idx arrived (first exchange, CONNECT or ACK). Pairs the slot (INIT ->
 * RTR -> RTS), or, when the peer has a newer QP than the one we are paired with, re-creates
 * ours first. A CONNECT (ack 0) is answered through cb.send_connect(ack 1). A garbage end (QP
 * number 0 or over 24 bits, zero GID, bad MTU) is refused with MORI_EPROTO. */
int rdma_conn_remote(struct rdma_conn *c, int idx, const struct rdma_ep *ep, int ack, uint64_t now,
		     char *err, size_t len);
/* Slots in RTS. */
int rdma_conn_ready(const struct rdma_conn *c);
/* Force slot idx into error, as a device would (tests, fault injection, `moractl`). */
void rdma_conn_kill_qp(struct rdma_conn *c, int idx, const char *why, uint64_t now);

/* Start a transfer on c. Returns MORI_OK with *id, or MORI_EINVAL (empty, bad notification size).
 * The transfer always ends through args->done, by its deadline at the latest. */
int rdma_xfer_start(struct rdma_conn *c, const struct rdma_xfer_args *a, uint64_t now,
		    uint32_t *id);
/* End a transfer with MORI_ECANCELED (its QPs are killed if it has work out). MORI_ENOENT if
 * it is not known (already done). */
int rdma_xfer_cancel(struct rdma_eng *e, uint32_t id, uint64_t now);
uint32_t rdma_xfers_in_flight(const struct rdma_eng *e);

/* Poll completions, post waiting work, expire deadlines, resend CONNECTs. Returns the number of
 * completions handled (callers loop while > 0 when busy-polling). */
int rdma_eng_progress(struct rdma_eng *e, uint64_t now);
/* Earliest time progress must run again without a completion event (UINT64_MAX: none). */
uint64_t rdma_eng_next_timer(const struct rdma_eng *e);

/* ---- QP state machine (exposed for tests) ----
 * Move q to `to`, checking the transition is legal (RESET->INIT, INIT->RTR, RTR->RTS, any->ERR).
 * Returns MORI_OK, MORI_EINVAL for an illegal transition, or the ops' code; q->state is
 * unchanged on failure and err says why. */
int rdma_qp_modify(struct rdma_eng *e, struct rdma_qp *q, int to, const struct rdma_ep *remote,
		   char *err, size_t len);
/* Is this remote end acceptable? MORI_OK or MORI_EPROTO with a reason. */
int rdma_ep_check(const struct rdma_ep *ep, char *err, size_t len);
#endif
