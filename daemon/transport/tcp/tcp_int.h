/* The TCP transport's internals (transport_tcp.c: streams and frames; tcp_xfer.c: transfers
 * over them, initiator and target side).
 *
 * Each daemon opens `data_streams` TCP connections (libuv) to a peer for the transfers it
 * initiates, framed as struct fhdr + payload. The initiator writes WRITE frames (the target
 * lands them and answers one DONE per transfer) or READ frames (the target answers each with
 * one RDATA frame carrying the bytes or an error); ABORT drops a transfer at the target. MSG
 * carries a short request of the request path on the data path instead (MORI-SHMEM's proxy
 * atomics and signals: no nng thread between the loops, a hand-off of tens of microseconds a hop under load),
 * answered by one MSGREP on the same stream. */
#ifndef MORID_TCP_INT_H
#define MORID_TCP_INT_H
#include "gpu/gpu_stage.h"
#include "peer/peer_int.h"

#define INB_SLACK_MS 2000             /* target keeps a transfer's state this long past its deadline */
#define INB_MAX_MS (3600u * 1000)     /* ... whatever deadline a peer claims */

#define CHUNK_MAX STAGE_BUF_BYTES     /* largest payload of one frame */
#define BATCH_MAX (2u << 20)          /* payload bytes coalesced into one socket write */
#define BATCH_FRAMES 512              /* frames per write (iovecs stay under IOV_MAX) */
#define SMALL_COPY 4096               /* payloads below this are copied beside their header */
#define STAGE_CAP (BATCH_FRAMES * 96 + (512u << 10))
#define STREAM_WINDOW (8u << 20)      /* bytes in flight per stream (queued writes + reads asked) */
#define RX_BUF (256u << 10)           /* per-stream receive staging */
#define RX_DIRECT_MIN (256u << 10)    /* larger payloads land straight in the region; smaller ones
                                       * through the staging buffer (a copy is cheaper than the
                                       * extra reads at these sizes) */

/* ---- frames on data streams (host byte order: both ends run this code on the same ABI) ----
 * A stream opens with the authentication exchange of auth.h: HELLO carries the initiator's nonce,
 * HELLO_ACK the target's nonce and its proof, AUTH the initiator's proof; the target serves
 * nothing before a valid AUTH (without a cluster key at either end the proofs are not checked:
 * a keyed end refuses an unkeyed one). Every frame naming a region carries its secret. */
#define FRAME_MAGIC 0x4d4f5249u /* "MORI" */
#define FRAME_VERSION 4 /* 3: MSG / MSGREP; 4: FF_SIGNAL on WRITE */
enum ftype {
	F_HELLO = 1,     /* initiator -> target: xfer = epoch, code = version, payload = nonce, node */
	F_HELLO_ACK = 2, /* target -> initiator: xfer = epoch, payload = nonce, proof, node */
	F_WRITE = 3,     /* payload lands at region+offset; total = transfer bytes; flags FF_SIGNAL or 0 */
	F_DONE = 4,      /* target -> initiator: a write finished (code, payload = message) */
	F_READ = 5,      /* ask for rlen bytes at region+offset, to land at the initiator's aux */
	F_RDATA = 6,     /* answer to one F_READ: code 0 and the bytes, or code and a message */
	F_ABORT = 7,     /* initiator gave up on xfer */
	F_AUTH = 8,      /* initiator -> target, right after HELLO_ACK: payload = proof */
	F_MSG = 9,       /* initiator -> target: payload = a packed Request (PeerShmemAmo only), xfer = its id */
	F_MSGREP = 10,   /* target -> initiator: payload = the packed Reply, xfer = the MSG's id */
};
#define MSG_MAX (64u << 10) /* largest MSG / MSGREP payload (a proxy message is at most ~20 KiB) */
/* Frame flags. Version 1's FF_NOTIF_V1 (the target notifies its region's owner after the data)
 * is refused (MORI_EPROTO): notifications travel on the control link from the initiator's daemon
 * (xnotif.c), in order, naming the region with its secret. FF_SIGNAL (version 4, WRITE frames
 * only): the transfer ends with a signal the target applies once every byte of it landed and
 * before its DONE: an 8-byte SET (pad = 1) or ADD (pad = 2) of `tag` at `aux` of the same region
 * (MORI-SHMEM's put+signal in one trip). Every WRITE frame of such a transfer carries the same
 * signal (the frames are striped over the streams: whichever comes first names it). */
#define FF_NOTIF_V1 1u
#define FF_SIGNAL 2u

struct fhdr {
	uint32_t magic;
	uint16_t type;
	uint16_t flags;
	uint32_t len;         /* payload bytes following */
	int32_t code;
	uint64_t xfer;        /* initiator's transfer id (HELLO: epoch) */
	uint64_t region;
	uint32_t gen;
	uint32_t rlen;        /* READ/RDATA: bytes asked for */
	uint64_t offset;      /* WRITE/READ: target offset; RDATA: initiator's local offset */
	uint64_t aux;         /* READ: initiator's local offset; WRITE with FF_SIGNAL: the signal word's offset */
	uint64_t total;       /* transfer bytes */
	uint64_t tag;         /* FF_SIGNAL: the signal's value; else zero (version 1: the notification's tag) */
	uint32_t deadline_ms; /* time left at sending */
	uint32_t pad;         /* FF_SIGNAL: 1 SET, 2 ADD; else zero */
	uint8_t key[REGION_SECRET_BYTES]; /* WRITE/READ: the region's secret */
};
_Static_assert(sizeof(struct fhdr) == 96, "frame header is 96 bytes");

/* The TCP transport's state for one peer (p->tp[TR_TCP]). */
struct tcp_peer {
	struct stream *out[16];   /* data streams opened by us (data_streams is at most 16) */
	int nout, nready;
	uint32_t conn_gen;        /* bumps at each teardown: late callbacks of old streams are ignored */
	struct list queue;        /* struct tcp_xfer.qlink: chunks left to send */
	int pump_needed;
	struct list msgs;         /* struct rpc.link: MSGs sent, waiting for their MSGREP */
};

/* ... for one transfer (x->tp). */
struct tcp_xfer {
	struct list qlink;        /* on tcp_peer.queue while chunks are left */
	int queued;
	int started;              /* its first frame went out: the target may hold state */
	int answered;             /* the target told us the end: nothing to abort there */
	struct chunk_cursor cur;
	uint64_t sent;
	struct xfer *x;
};

/* What the stream layer hands up (transport_tcp.c serves it). */
struct tcp_frames {
	void (*write_hdr)(struct stream *s);
	void (*write_end)(struct stream *s);
	void (*read_req)(struct stream *s);
	void (*abort)(struct stream *s);
	void (*done)(struct stream *s);
	void (*rdata_hdr)(struct stream *s);
	void (*rdata_end)(struct stream *s);
	/* bytes of a READ answer were written (ok) or lost with the stream */
	void (*read_served)(struct peers *P, uint64_t src_epoch, uint64_t xfer, uint64_t bytes, int ok);
	/* an accepted stream closed: what its initiator had running here goes */
	void (*source_gone)(struct peers *P, uint64_t src_epoch);
	/* a MSG (target) / MSGREP (initiator) arrived whole, in s->rx_mbuf (s->h.len bytes) */
	void (*msg_in)(struct stream *s);
	void (*msg_reply)(struct stream *s);
};

/* ... for the whole node (P->tp[TR_TCP]). */
struct tcp_node {
	const struct tcp_frames *on;
	int handles;                  /* streams, the listener, the transport itself */
	uv_tcp_t lsn;
	int lsn_on;
	struct list accepted;
	struct list dirty;
	struct htab inbound;
	uint64_t next_inb_scan_us;
	struct batch *batch_cache;    /* freed batches kept for reuse (they are large) */
	int nbatch_cache;
	struct list pending;          /* streams waiting for staging copies (stream.plink) */
	uv_idle_t pend_idle;          /* polls them each loop turn while any waits (the loop must not sleep) */
};

static inline struct tcp_peer *tcp_peer(struct peer *p) { return p->tp[TR_TCP]; }
static inline struct tcp_node *tcp_node(struct peers *P) { return P->tp[TR_TCP]; }

struct batch;

/* A received WRITE frame whose copy into VRAM runs: its end (write_end: the bytes counted, the
 * transfer's signal and DONE once all landed) waits for the copy while the stream reads on.
 * Each frame is counted only after its own bytes landed, so ends of one stream may come out of
 * order (a transfer completes when the last of its frames lands, on whatever stream). */
#define RXQ_MAX 4
struct rx_end {
	struct fhdr h;
	struct region *reg;       /* inflight reference, as rx_reg */
	uint8_t *stage;           /* the pinned buffer the copy reads */
	uint64_t since_us;
	struct stage_fence fence;
};

struct stream {
	struct list link;         /* P->accepted (accepted streams) */
	struct peers *P;
	struct peer *p;           /* outgoing: owner; accepted: the initiator's entry (may be NULL) */
	int outgoing, ready, closing, dirty;
	uint32_t conn_gen;
	uint64_t src_epoch;       /* accepted: initiator's epoch, once it authenticated */
	int hs;                   /* accepted: 0 waiting for HELLO, 1 for AUTH, 2 serving */
	uint64_t accepted_us;     /* accepted: when; it must reach hs 2 by HS_DEADLINE_MS after */
	uint64_t hello_epoch;     /* accepted: the epoch its HELLO claimed */
	uint8_t nonce[AUTH_NONCE_BYTES], peer_nonce[AUTH_NONCE_BYTES];
	char hello_node[128];     /* accepted: the node its HELLO named */
	uv_tcp_t tcp;
	uv_connect_t connreq;
	/* tx */
	struct batch *cur;
	struct batch *pend_head, *pend_tail; /* flushed, waiting for their VRAM staging copies (in order) */
	uint64_t tx_queued;       /* bytes flushed (written or pending), not yet written */
	uint64_t rd_outstanding;  /* outgoing: READ bytes asked and not yet answered */
	int read_stopped;
	/* rx */
	int rx_payload;           /* 0: header; 1: payload */
	uint8_t hbuf[sizeof(struct fhdr)];
	uint32_t hhave;
	struct fhdr h;
	uint64_t rx_left;
	uint8_t *rx_dst;          /* mapped destination of the payload, NULL: discard/CMA/message */
	struct region *rx_reg;    /* inflight reference for the payload's duration */
	int rx_copy;              /* destination reached by region_copy (CMA or VRAM), at rx_addr */
	int rx_pinned;            /* rxbuf pinned for GPU copies: 1 yes, -1 tried and failed */
	uint8_t *rx_stage;        /* a VRAM payload lands here whole (pinned, STAGE_BUF_BYTES), then one copy;
	                           * from the stage pool for one frame (NULL between frames) */
	int rx_flush;             /* at the payload's end: rx_stage -> rx_reg at rx_addr (payload_end) */
	int rx_direct;            /* payload_end called with nothing read past the payload (it may wait) */
	int rx_waiting;           /* the frame's copy runs (rx_fence): reading stopped, its end not acted on */
	uint64_t rx_wait_us;      /* since when */
	struct stage_fence rx_fence;
	struct rx_end rxq[RXQ_MAX]; /* WRITE frames whose copies run, oldest at rxq_head */
	int rxq_head, rxq_n;
	uint64_t rx_addr;
	int rx_code;              /* nonzero: payload is discarded */
	int rx_big;               /* the last payload was large and direct */
	int rx_collect;           /* payload is a message: kept in rx_msg */
	char rx_msg[256];
	uint32_t rx_msglen;
	uint8_t *rx_mbuf;         /* MSG / MSGREP payload being received (malloc'd, h.len bytes) */
	uint32_t rx_mhave;
	uint8_t *rxbuf;
	struct list dlink;        /* P->dirty */
	struct list plink;        /* tcp_node.pending, while pend_on */
	int pend_on;
};

/* State at the target for a transfer another daemon initiated. */
struct inb {
	struct list hlink;
	uint64_t src_epoch, xfer;
	struct region *r;         /* inflight reference held; NULL after failure or abort */
	int read, aborted, replied;
	int code;
	uint64_t total, got;
	uint64_t expire_us;
	int sig;                  /* FF_SIGNAL: 1 SET, 2 ADD of sig_value at sig_off after the data; 0 none */
	uint64_t sig_off, sig_value;
	struct peer *p;           /* for counters; may be NULL */
};

/* tcp_stream.c */
int stream_listen(struct peers *P, const char *host);
void streams_connect(struct peer *p, const struct sockaddr *sa);
void streams_flush_dirty(struct peers *P);
void stream_close(struct stream *s);
/* A stream of P's, not yet connected or accepted (tcp_connect.c); stream_setup starts reading a
 * connected one. */
struct stream *stream_new(struct peers *P);
void stream_setup(struct stream *s);
/* A stream broke: for ours, the peer is down (every stream goes, transfers on the wire fail);
 * for an accepted one, the initiator's state here goes with it. */
void stream_lost(struct stream *s, int code, const char *why);
/* Accepted streams that have not authenticated (hs < 2) get HS_DEADLINE_MS, and at most
 * HS_MAX_PENDING of them are held (the oldest goes for a new one): a data port reachable by
 * anyone must not let idle connections pile up to morid's descriptor limit. Closes the late
 * ones; returns how many still wait (the tick runs while any does). */
#define HS_DEADLINE_MS 5000
#define HS_MAX_PENDING 128
int streams_expire_handshakes(struct peers *P, uint64_t now);
void stream_frame(struct stream *s, const struct fhdr *h, const void *payload, uint32_t len);
/* Add a frame whose payload stays in region g's memory until written (holds a reference). */
int stream_frame_data(struct stream *s, const struct fhdr *h, struct region *g, uint64_t off,
		      uint32_t len, int *err);
uint64_t stream_batch_room(struct stream *s);
void stream_flush(struct stream *s);
/* The staging poller (tcp_node.pend_idle): set up at the transport's start, closed at its stop. */
void streams_pend_init(struct peers *P);
void streams_pend_stop(struct peers *P);
/* Let go of a reference to the node state; the last frees it (and its batch cache). */
void tcp_node_release(struct peers *P);

/* transport_tcp.c */
void tcp_pump(struct peer *p);
void inb_expire(struct peers *P, uint64_t now);
void inb_drop_epoch(struct peers *P, uint64_t src_epoch);
#endif
