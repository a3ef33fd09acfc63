/* mori/device/coll.cuh: MORI-CCL's device side shared by libmori's collective kernels
 * (kernels/coll.cu, kernels/coll_xnode.cu) and fused kernels of applications: the communicator
 * state (struct mori_coll_dev, mori/device_host/coll_dev.h), peers' addresses, the status word,
 * the abort word, the flag wait and the block barrier.
 *
 * The device API for fused kernels (NCCL's device API: a window's peer pointer, a barrier among
 * the ranks; ROCm/mori's CCO), at the end of this file, takes the state's device address that
 * mori_comm_device_state() returns (pass it as a kernel argument):
 *   mori_coll_peer_ptr(d, p, rank)  where this process reaches rank's copy of the object at p (an
 *                                   address in this rank's heap, e.g. in a window), NULL when not
 *   mori_coll_barrier_block(d)      every thread of one block a rank: every rank's block arrives,
 *                                   and its writes before are visible to the others after; 0, or
 *                                   MORI_ETIMEDOUT / MORI_EPEERDEAD (recorded as mori_comm_status
 *                                   reports it). One block a rank at a time uses it (slot
 *                                   MORI_COLL_SLOT_USER), in the same order on every rank.
 *   mori_coll_rank(d), mori_coll_size(d)
 * The same four are in MORI-IR's bitcode and its JSON table (kernels/shmem.cu instantiates
 * MORI_COLL_API below as extern "C" functions: mori_coll_rank(uint64_t d), ..., the state and
 * pointers as uint64_t addresses, mk/ir-table.sh lists them). */
#ifndef MORI_COLL_CUH
#define MORI_COLL_CUH
#include "prims.cuh"
#include "../device_host/coll_dev.h"

namespace mori_coll {
typedef const struct mori_coll_dev dev_t;

MORI_DEVICE uint64_t peer(dev_t *d, uint64_t own, int q)
{
	return own - d->heap_base + d->peer_base[q];
}

/* ---- status and abort ---- */
MORI_DEVICE int status_code(dev_t *d)
{
	return ((volatile struct mori_coll_status *)d->status)->code;
}
MORI_DEVICE void fail(dev_t *d, int code, int pe)
{
	struct mori_coll_status *s = (struct mori_coll_status *)d->status;
	if (atomicCAS_system((unsigned int *)&s->code, 0u, (unsigned int)code) == 0)
		s->pe = pe;
	mori_fence_data_before_host_signal();
}
MORI_DEVICE int abort_code(dev_t *d)
{
	return d->ctrl ? mori_abort_code((const struct mori_shmem_ctrl *)d->ctrl) : 0;
}
/* This rank's own heap address of its flag word flags[slot][q]; the same offset at every rank. */
MORI_DEVICE uint64_t *flag(dev_t *d, unsigned slot, int q)
{
	return (uint64_t *)d->flags + (uint64_t)slot * (uint64_t)d->n + (uint64_t)q;
}

/* Thread t waits until its flag word *w >= g (acquire): 0, or the code that ended the wait,
 * recorded in the status word. Every MORI_COLL_POLL polls it reads the abort word (the dead PE
 * recorded), with ring_errors the group's proxy error word (a proxied request of this rank
 * failed: its data or flag will not come), then the clock against dev->timeout_ns and the status
 * word: past the deadline, or after another thread's (or block's) failure, rank t is late as
 * well (its bit in missing[]). The abort code and the deadline are prims.cuh's; the loop is
 * written out rather than through mori_wait_until: inlined into mori_coll_kernel's body, whose
 * registers are at their limit, the callback form moved ptxas's spills (the copy and reduce
 * calls' included), this form leaves them as they were. */
MORI_DEVICE int wait_flag(dev_t *d, const uint64_t *w, uint64_t g, unsigned t, bool ring_errors)
{
	mori_deadline dl;
	for (unsigned k = 1;; k++) {
		if (mori_acquire_load_sys(w) >= g)
			return 0;
		if (k % MORI_COLL_POLL)
			continue;
		const struct mori_shmem_ctrl *c = (const struct mori_shmem_ctrl *)d->ctrl;
		int a = abort_code(d);
		if (a) {
			fail(d, a, c->abort_pe);
			return a;
		}
		int e = ring_errors && c ? *(volatile const int32_t *)&c->error : 0;
		if (e) {
			fail(d, e, d->pe_of[d->rank]);
			return e;
		}
		bool late = dl.passed(d->timeout_ns);
		int sc = status_code(d);
		if (late || sc) {
			struct mori_coll_status *s = (struct mori_coll_status *)d->status;
			atomicOr_system((unsigned long long *)&s->missing[t / 64], 1ull << (t % 64));
			fail(d, MORI_ETIMEDOUT, (int)t);
			return sc ? sc : (int)MORI_ETIMEDOUT;
		}
	}
}

/* This rank's own heap address of its signature word sigs[slot][g & 1][q] (coll_dev.h). */
MORI_DEVICE uint64_t *sig_word(dev_t *d, unsigned slot, uint64_t g, int q)
{
	return (uint64_t *)d->sigs + ((uint64_t)slot * 2 + (g & 1)) * (uint64_t)d->n + (uint64_t)q;
}

/* After a call's first barrier (every thread; thread t < n read rank t's signature word, w, after
 * its own acquire of t's flag): 0, or MORI_EINVAL when some rank's signature differs from rank 0's, the
 * first such rank recorded in the status word's mismatch record (and in code where the grids
 * differ: coll_dev.h). Out of line: only a call's first barrier runs it. */
static __device__ __noinline__ int sig_check(dev_t *d, uint64_t w)
{
	__shared__ uint64_t ws[MORI_COLL_MAX_RANKS];
	const unsigned t = threadIdx.x;
	const int n = d->n;
	if ((int)t < n)
		ws[t] = w;
	__syncthreads();
	if (!__syncthreads_or((int)t < n && w != ws[0]))
		return 0;
	if (t == 0) { /* a mismatch: off the fast path, one thread finds the first */
		int q = 1;
		while (ws[q] == ws[0])
			q++;
		struct mori_coll_status *s = (struct mori_coll_status *)d->status;
		if (atomicCAS_system((unsigned int *)&s->mm_state, 0u, 1u) == 0) {
			s->mm_pe = q;
			s->mm_sig = ws[q];
			s->mm_ref = ws[0];
			mori_fence_data_before_host_signal();
			s->mm_state = 2;
		}
		if (MORI_COLL_SIG_GRID(ws[q]) != MORI_COLL_SIG_GRID(ws[0]))
			fail(d, MORI_EINVAL, q); /* blocks some rank lacks wait for nobody: end them */
		mori_fence_data_before_host_signal();
	}
	return MORI_EINVAL;
}

/* Block barrier on slot `slot` (see coll_dev.h). Every thread calls it; 0 or a MORI_E*. sig
 * (nonzero on a call's first barrier): the call's signature, compared among the ranks. */
MORI_DEVICE int barrier(dev_t *d, unsigned slot, uint64_t *gen, uint64_t sig = 0)
{
	__shared__ int rc_s;
	unsigned t = threadIdx.x;
	int n = d->n;
	if (t == 0)
		rc_s = 0;
	__syncthreads(); /* every thread's writes precede the flags' release stores (cumulative) */
	uint64_t *flags = (uint64_t *)d->flags + (uint64_t)slot * (uint64_t)n;
	uint64_t g = ++*gen, w = 0;
	if ((int)t < n) {
		if (sig) /* before the flag: the release store below orders it */
			*(volatile uint64_t *)peer(d, (uint64_t)sig_word(d, slot, g, d->rank), (int)t) = sig;
		mori_release_store_sys((uint64_t *)peer(d, (uint64_t)(flags + d->rank), (int)t), g);
		int rc = wait_flag(d, flags + t, g, t, false);
		if (rc)
			rc_s = rc;
		else if (sig) /* peer t's, after my acquire of its flag */
			w = *(volatile uint64_t *)sig_word(d, slot, g, (int)t);
	}
	__syncthreads();
	int rc = rc_s;
	if (sig && !rc) /* rc_s is the block's: every thread or none */
		rc = sig_check(d, w);
	return rc;
}

} // namespace mori_coll

/* ---- the device API for fused kernels ---- */
MORI_DEVICE int mori_coll_rank(const struct mori_coll_dev *d) { return d->rank; }
MORI_DEVICE int mori_coll_size(const struct mori_coll_dev *d) { return d->n; }
MORI_DEVICE void *mori_coll_peer_ptr(const struct mori_coll_dev *d, const void *p, int rank)
{
	uint64_t o = (uint64_t)p - d->heap_base;
	if ((unsigned)rank >= (unsigned)d->n || (uint64_t)p < d->heap_base || !d->peer_base[rank])
		return nullptr;
	return (void *)(o + d->peer_base[rank]);
}
MORI_DEVICE int mori_coll_barrier_block(const struct mori_coll_dev *d)
{
	__shared__ uint64_t gen;
	uint64_t *gens = (uint64_t *)d->gens;
	if (mori_block_thread() == 0)
		gen = gens[MORI_COLL_SLOT_USER];
	__syncthreads();
	uint64_t g = gen;
	int rc = mori_coll::status_code(d);
	if (!rc)
		rc = mori_coll::barrier(d, MORI_COLL_SLOT_USER, &g);
	if (mori_block_thread() == 0)
		gens[MORI_COLL_SLOT_USER] = g;
	__syncthreads();
	return rc;
}

/* The device API as one table in MORI_SHMEM_API's row format (return type, name after mori_coll_,
 * C++ parameters, ABI parameters with pointers as uint64_t, body): kernels/shmem.cu instantiates
 * it as MORI-IR's extern "C" functions, which overload the C++ ones above by their uint64_t
 * parameters; mk/ir-table.sh puts the rows in the JSON table. */
#define MORI_COLL_API(X)                                                                                     \
	X(int, rank, (const struct mori_coll_dev *d), (uint64_t d), (mori_coll_rank((const struct mori_coll_dev *)d))) \
	X(int, size, (const struct mori_coll_dev *d), (uint64_t d), (mori_coll_size((const struct mori_coll_dev *)d))) \
	X(uint64_t, peer_ptr, (const struct mori_coll_dev *d, const void *p, int rank), (uint64_t d, uint64_t p, int rank), \
	  ((uint64_t)(uintptr_t)mori_coll_peer_ptr((const struct mori_coll_dev *)d, (const void *)p, rank)))  \
	X(int, barrier_block, (const struct mori_coll_dev *d), (uint64_t d),                                  \
	  (mori_coll_barrier_block((const struct mori_coll_dev *)d)))
#endif
