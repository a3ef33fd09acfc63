/* Internals of the RDMA transport (transport_rdma.c over rdma_node.c). */
#ifndef MORID_RDMA_INT_H
#define MORID_RDMA_INT_H
#include "peer/peer_int.h"
#include "topo/rdma.h"
#include "rdma_ctl.h"
#include "rdma_core.h"
#include "region/region.h"

/* A local region registered with the device: for our own transfers (lkey) and, separately,
 * for peers' (rkey: dropped the moment the region goes). */
struct rmr {
	struct list link;
	uint64_t region;
	uint32_t gen;
	void *lmr, *tmr;
	uint32_t lkey, rkey;
	uint64_t addr, size;
	uint32_t users;          /* jobs using lmr */
	int gone;                /* region removed: free when users drop to 0 */
};

/* A peer's region as our device reaches it. */
struct rkey {
	struct list link;
	uint64_t region, epoch;
	uint32_t gen;
	int state;               /* 0 asked, 1 known, -1 refused */
	int code;
	char why[160];
	uint64_t addr, size;
	uint32_t rkey;
};

enum { R_CONNECT = 1, R_REGION = 2 }; /* our tags on the peer service's requests */
struct rkey_ask {                      /* what an RdmaRegion request is for */
	uint64_t region, epoch;
	uint32_t gen;
};

struct rnode;

/* The transport's state for one peer (p->tp[TR_RDMA]). */
struct rpeer {
	struct list link;
	struct rnode *N;
	struct peer *p;
	const char *addr;        /* p->addr */
	uint64_t epoch;          /* the peer daemon's (0: not known yet) */
	int no_rdma;
	char why[200];
	struct rdma_conn *c;
	struct list rkeys;
	struct list waiting;     /* jobs waiting for QPs or a key */
	uint64_t jobs, bytes, errors;
};

/* The transport's state for one transfer (x->tp). The engine may still hold it after x ended
 * (a cancel completes later): it keeps what the engine borrows (descriptors, the local region)
 * and the remote region's identity (its key cache entry). */
struct job {
	struct list link;        /* rp->waiting, or N->running once on the engine */
	struct rpeer *rp;
	struct xfer *x;          /* NULL once x ended */
	struct region *local;    /* inflight reference of the job's own */
	struct rmr *m;
	uint64_t rregion, repoch;
	uint32_t rgen;
	uint8_t rsecret[REGION_SECRET_BYTES]; /* named in the RdmaRegion request */
	mori_desc *descs;        /* x's, taken over at start (the engine borrows them) */
	uint32_t eid;            /* engine transfer, 0 before it started */
	int starting;            /* inside rdma_xfer_start: an end then is kept for after it */
	int rekeyed;             /* it got a remote access error once and asked for the key again */
	int ended, end_code;
	char end_msg[160];
};

/* The transport's node-wide state (P->tp[TR_RDMA]). */
struct rnode {
	struct morid *d;
	struct peers *P;
	int mode;                /* peers_mode(P, &transport_rdma) */
	int on;
	char why[200];           /* why RDMA is off, or the device in use */
	struct rdma_vdev *v;
	struct rdma_eng *e;
	uv_poll_t cq_poll;
	uv_timer_t timer;
	uv_idle_t spin;          /* rdma_busy_poll: polls the CQ every loop turn while work is out */
	int handles;
	int stopping;
	int kick;                /* waiting jobs to look at (at the next timer, never re-entrant) */
	struct list peers, mrs, running;
	struct region_listener gone; /* registered while on */
};

/* ---- rdma_node.c ---- */
/* Open the device port (rdma_device, else the usable one whose address is ours, else the
 * first usable one) and an engine on it. 0, or -1 with N->why set: RDMA stays off. */
int rdma_device_open(struct rnode *N);
/* The registration of g (made on first use; remote: also for peers' access). NULL with a
 * code and the reason when the device cannot reach it. */
struct rmr *rmr_get(struct rnode *N, struct region *g, int remote, int *code, char *why, size_t len);
void rmr_free(struct rmr *m);
/* The registry's listener (N->gone): peers lose remote access to g now. */
void rdma_region_gone(void *arg, struct region *g);
#endif
