/* The shared-memory ring pair between a client and morid (docs/architecture.md, "Rings").
 *
 * One memfd, created by the daemon and mapped by both: [SQ header][CQ header][SQ entries]
 * [CQ entries][argument arena]. Submissions are 64 bytes, completions 128 (room for an error's
 * reason); capacities are powers of two; head and
 * tail are free-running 32-bit counters on their own cache lines (DPDK rte_ring layout).
 * The producer writes the entry, then store-releases tail; the consumer load-acquires tail,
 * reads, then store-releases head. A consumer about to sleep sets `sleeping`, issues a full
 * fence and re-checks before blocking on its eventfd; a producer issues a full fence after
 * publishing and rings the doorbell only if `sleeping` is set (liburing's SQ wakeup rule), so no
 * wake-up is lost and a busy consumer costs no system calls.
 * Indices read from the other side are untrusted: consumers clamp (tail - head) to capacity.
 */
#ifndef MORI_RING_H
#define MORI_RING_H
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define RING_LINE 64

struct ring_hdr {
	_Alignas(RING_LINE) _Atomic uint32_t head;      /* written by the consumer */
	_Alignas(RING_LINE) _Atomic uint32_t tail;      /* written by the producer */
	_Alignas(RING_LINE) _Atomic uint32_t sleeping;  /* consumer is (about to be) blocked */
	_Atomic uint32_t overflow;                      /* producer has entries waiting for space */
	uint32_t capacity;                              /* set once by the daemon; re-checked */
};

/* Submission entry: client -> daemon. */
enum sqe_op {
	SQE_NOP = 0,
	SQE_NOTIFY = 1,   /* deliver tag to the owner of region_id (same node) */
	SQE_XFER = 2,     /* cross-node transfer: arena[arg_off .. +count] holds descriptors */
	SQE_XFER_LIST = 3,/* cross-node transfer of a prepared list: arena holds uint32 indices */
	SQE_CANCEL = 4,   /* cancel transfer user_data */
	SQE_CQ_SPACE = 5, /* the client drained its CQ after the daemon flagged overflow */
	SQE_REVOKE_ACK = 6, /* the client has no copy left on revoked region local_region */
	SQE_BYE = 7,      /* the client closes on purpose (a session ending without it: the client died) */
};
#define SQE_F_READ 1u
#define SQE_F_NOTIF 2u

struct mori_sqe {
	uint16_t op;
	uint16_t flags;
	uint32_t count;          /* descriptors or indices in the arena */
	uint64_t user_data;      /* transfer id, echoed in its completion */
	uint64_t local_region;   /* for NOTIFY: the target region */
	uint64_t remote;         /* remote handle id (cross node) or prepared list id */
	uint64_t arg_off;        /* byte offset of the arguments in the arena */
	uint64_t tag;            /* notification tag */
	uint64_t timeout_us;     /* deadline relative to the daemon's receipt */
	uint64_t reserved;
};

/* Completion entry: daemon -> client. */
enum cqe_type {
	CQE_XFER_DONE = 1, /* user_data finished with code */
	CQE_NOTIF = 2,     /* tag arrived for region value (the data has landed) */
	CQE_REVOKED = 3,   /* region value (opened by this client) was freed by its owner */
	CQE_ARENA = 4,     /* the daemon has copied the arguments of user_data out of the arena */
};
#define CQE_MSG 104 /* room for a whole reason: "region 6 is no longer registered at host:port" */
struct mori_cqe {
	uint16_t type;
	uint16_t pad;
	int32_t code;
	uint64_t user_data;
	uint64_t value;
	char msg[CQE_MSG];  /* short reason for an error; NUL-terminated */
};

_Static_assert(sizeof(struct mori_sqe) == 64, "sqe is one cache line");
_Static_assert(sizeof(struct mori_cqe) == 128, "cqe is two cache lines (the reason needs the room)");

struct ring_layout {
	uint32_t sq_entries, cq_entries;
	uint64_t sq_off, cq_off, arena_off, arena_bytes, total;
};

static inline void ring_layout_compute(struct ring_layout *l, uint32_t sq, uint32_t cq,
				       uint64_t arena)
{
	l->sq_entries = sq;
	l->cq_entries = cq;
	l->sq_off = 2 * sizeof(struct ring_hdr);
	l->cq_off = l->sq_off + (uint64_t)sq * sizeof(struct mori_sqe);
	l->arena_off = l->cq_off + (uint64_t)cq * sizeof(struct mori_cqe);
	l->arena_bytes = arena;
	l->total = l->arena_off + arena;
}

/* Producer side: reserve-free push of one entry of sz bytes. Returns 0, or -1 when full. */
static inline int ring_push(struct ring_hdr *h, void *entries, uint32_t cap, size_t sz, const void *e)
{
	uint32_t tail = atomic_load_explicit(&h->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&h->head, memory_order_acquire);
	if ((uint32_t)(tail - head) >= cap)
		return -1;
	memcpy((char *)entries + (uint64_t)(tail & (cap - 1)) * sz, e, sz);
	atomic_store_explicit(&h->tail, tail + 1, memory_order_release);
	return 0;
}

/* After publishing: does the consumer need its doorbell? The full fence orders our tail store
 * before the read of `sleeping` (pairs with the fence in ring_prepare_sleep). The producer that
 * finds it set also clears it, so one sleep costs one doorbell however many entries follow
 * (nng pollable.c: signal only on the false-to-true edge). */
static inline int ring_needs_wakeup(struct ring_hdr *h)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&h->sleeping, memory_order_relaxed))
		return 0;
	return atomic_exchange_explicit(&h->sleeping, 0, memory_order_relaxed) != 0;
}

/* Consumer side: pop one entry into e. Returns 0, or -1 when empty. A corrupt distance (the
 * other side wrote garbage) is clamped by treating the ring as holding `cap` entries. */
static inline int ring_pop(struct ring_hdr *h, const void *entries, uint32_t cap, size_t sz, void *e)
{
	uint32_t head = atomic_load_explicit(&h->head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&h->tail, memory_order_acquire);
	if (tail == head)
		return -1;
	if ((uint32_t)(tail - head) > cap)
		head = tail - cap; /* a corrupt tail: never read more than the ring holds */
	memcpy(e, (const char *)entries + (uint64_t)(head & (cap - 1)) * sz, sz);
	atomic_store_explicit(&h->head, head + 1, memory_order_release);
	return 0;
}

static inline int ring_empty(struct ring_hdr *h)
{
	return atomic_load_explicit(&h->tail, memory_order_acquire) ==
	       atomic_load_explicit(&h->head, memory_order_relaxed);
}

/* Consumer about to block: announce it, then re-check. Returns 1 if it may block. */
static inline int ring_prepare_sleep(struct ring_hdr *h)
{
	atomic_store_explicit(&h->sleeping, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	if (!ring_empty(h)) {
		atomic_store_explicit(&h->sleeping, 0, memory_order_relaxed);
		return 0;
	}
	return 1;
}

static inline void ring_awake(struct ring_hdr *h)
{
	atomic_store_explicit(&h->sleeping, 0, memory_order_relaxed);
}
#endif
