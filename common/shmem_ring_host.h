/* The device side of MORI-SHMEM's proxy ring, written on the host: what include/mori/device/shmem.cuh's
 * proxy_post / proxy_wait do, for host functions that play a kernel (tests/test_shmem_proxy.c,
 * tools/bench_shmem_proxy.c). One copy, so that the tests and the benchmark write the ring the
 * same way the GPU does: claim a sequence on `head`, wait while the ring is full, write the last
 * 56 bytes, then the first 8 (ready = seq + 1, op, amo, width) with one release store; wait for
 * `done` to pass the sequence (acquire). Every wait is bounded by the caller's deadline and ends
 * early when morid sets the abort word. Header-only (static inline): libmori does not carry it. */
#ifndef MORI_SHMEM_RING_HOST_H
#define MORI_SHMEM_RING_HOST_H
#include <sched.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "mori.h" /* the MORI_E* codes */
#include "shmem_layout.h"

/* One PE's ring as this process sees it: from mori_shmem_state() (ctrl and ring are this
 * process's addresses for host-memory heaps) and mori_shmem_heap_base(). */
struct shmem_ring_pe {
	struct mori_shmem_ctrl *ctrl;
	struct mori_shmem_preq *ring;
	uint8_t *heap;
	int my_pe;
	uint64_t wait_us;           /* no wait longer than this: MORI_ETIMEDOUT */
};

static inline uint64_t shmem_ring_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A GPU's spin costs the host nothing; a host PE's spin must leave the CPUs to the daemons
 * (the machines these run on may have two): yield a while, then sleep briefly. */
static inline void shmem_ring_backoff(unsigned *i)
{
	if (++*i < 64)
		sched_yield();
	else
		usleep(20);
}

/* The abort word as the device API's waits read it: 0, or the code the wait returns. */
static inline int shmem_ring_aborted(const struct mori_shmem_ctrl *c)
{
	uint32_t a = __atomic_load_n(&c->abort, __ATOMIC_ACQUIRE);
	return a == MORI_SHMEM_ABORT_NONE ? 0 : a == MORI_SHMEM_ABORT_PEER_DEAD ? MORI_EPEERDEAD
						 : a == MORI_SHMEM_ABORT_TIMEOUT ? MORI_ETIMEDOUT : MORI_ECANCELED;
}

/* The one wait all three use: until the 64-bit word at w reads >= v (acquire), bounded by
 * e->wait_us (MORI_ETIMEDOUT) and ended early by the abort word. */
static inline int shmem_ring_wait_word(const struct shmem_ring_pe *e, const uint64_t *w, uint64_t v)
{
	uint64_t t0 = shmem_ring_now_us();
	unsigned spins = 0;
	while (__atomic_load_n(w, __ATOMIC_ACQUIRE) < v) {
		int rc = shmem_ring_aborted(e->ctrl);
		if (rc)
			return rc;
		if (shmem_ring_now_us() - t0 > e->wait_us)
			return MORI_ETIMEDOUT;
		shmem_ring_backoff(&spins);
	}
	return 0;
}

/* proxy_post: publish one request; its sequence in *seq_out (may be NULL). */
static inline int shmem_ring_post(const struct shmem_ring_pe *e, uint16_t op, uint8_t amo, uint8_t width, int pe,
				  uint64_t dst, uint64_t src, uint64_t len, uint64_t sig, uint64_t value, uint64_t cmp,
				  uint64_t *seq_out)
{
	struct mori_shmem_ctrl *c = e->ctrl;
	uint32_t n = c->ring_entries;
	*(volatile uint64_t *)(e->heap + MORI_SHMEM_OFF_PROXY_USED) = 1;
	uint64_t seq = __atomic_fetch_add((uint64_t *)&c->head, 1, __ATOMIC_SEQ_CST);
	/* room when seq - done < n, i.e. done >= seq + 1 - n */
	int rc = shmem_ring_wait_word(e, (const uint64_t *)&c->done, seq + 1 > n ? seq + 1 - n : 0);
	if (rc)
		return rc;
	__atomic_thread_fence(__ATOMIC_ACQUIRE); /* morid copied the old entry out before we overwrite it */
	volatile uint64_t *w = (volatile uint64_t *)&e->ring[seq & (n - 1)];
	w[1] = (uint32_t)pe;
	w[2] = dst;
	w[3] = src;
	w[4] = len;
	w[5] = sig;
	w[6] = value;
	w[7] = cmp;
	uint64_t first = (uint64_t)(uint32_t)(seq + 1) | (uint64_t)op << 32 | (uint64_t)amo << 48 | (uint64_t)width << 56;
	__atomic_store_n((uint64_t *)w, first, __ATOMIC_RELEASE);
	if (seq_out)
		*seq_out = seq;
	return 0;
}

/* proxy_wait: until morid completed request seq; then the ring's sticky error (0 none). */
static inline int shmem_ring_wait(const struct shmem_ring_pe *e, uint64_t seq)
{
	struct mori_shmem_ctrl *c = e->ctrl;
	int rc = shmem_ring_wait_word(e, (const uint64_t *)&c->done, seq + 1);
	return rc ? rc : c->error;
}

/* quiet_proxy: an OP_QUIET, waited for. */
static inline int shmem_ring_quiet(const struct shmem_ring_pe *e)
{
	uint64_t seq;
	int rc = shmem_ring_post(e, MORI_SHMEM_OP_QUIET, 0, 0, e->my_pe, 0, 0, 0, 0, 0, 0, &seq);
	return rc ? rc : shmem_ring_wait(e, seq);
}

/* A fetching atomic through the first result slot, as amo_proxy_fetch does: the old value in *old. */
static inline int shmem_ring_amo_fetch(const struct shmem_ring_pe *e, int code, int width, int pe, uint64_t off,
				       uint64_t v, uint64_t cmp, uint64_t *old)
{
	uint64_t seq, src = MORI_SHMEM_OFF_AMO_VALUE;
	int rc = shmem_ring_post(e, MORI_SHMEM_OP_AMO, (uint8_t)(code | MORI_SHMEM_AMO_FETCH), (uint8_t)width, pe, off,
				 src, 0, 0, v, cmp, &seq);
	if (!rc && !(rc = shmem_ring_wait(e, seq)))
		*old = __atomic_load_n((uint64_t *)(e->heap + src), __ATOMIC_ACQUIRE);
	return rc;
}

/* Wait (bounded, abort-checked) until the 64-bit word at heap offset off is >= v: the device
 * API's wait_until(GE) on this PE's own heap. */
static inline int shmem_ring_wait_ge(const struct shmem_ring_pe *e, uint64_t off, uint64_t v)
{
	return shmem_ring_wait_word(e, (const uint64_t *)(e->heap + off), v);
}
#endif
