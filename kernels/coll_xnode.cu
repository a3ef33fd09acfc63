// MORI-CCL across nodes: the kernel for GPU communicators of which some rank's heap is not mapped
// in this process (a rank on another node). It uses MORI-SHMEM's device API (which reaches
// unmapped PEs through the proxy ring morid serves) and coll_ops.cuh (copy, the reductions).
// Intranode communicators never launch it: their kernels are coll.cu's.
//
// One form for every collective, chosen for being obviously right rather than fast (the bytes to
// other nodes go through morid anyway): a gather into slots. The scratch holds n receive slots of
// W bytes (slot r: what rank r sent this rank this round) and, for all-to-all and reduce-scatter,
// n send slots after them. Each round of W bytes a segment:
//   1. barrier: flags[0][me] of every rank set to the round's generation g (a release store where
//      mapped, else a proxy AMO_SET), then wait for flags[0][q] >= g from every q: every peer has
//      finished reading its slots of the last round (or call), so they may be written again, and
//      every proxied put of mine of the last round has landed (its target saw its signal);
//   2. stage: my data into my receive slot me (the same to every peer: all-reduce, all-gather,
//      broadcast's root) or my segment for q into send slot q (all-to-all, reduce-scatter);
//   3. push: for every peer q, the segment into q's receive slot me with a signal after it
//      (mori_shmem's put_signal, block scope: direct stores and a release store where mapped, the
//      proxy otherwise, which applies the signal only after its data landed) setting q's
//      flags[1][me] = g;
//   4. wait for flags[1][q] >= g from every peer that sends to me;
//   5. compute from my own slots only: reduce slots 0..n-1 in rank order (coll.cu's reduce: f32
//      accumulation, one rounding; the same bits as the intranode kernels and the CPU reference)
//      or copy each slot to its place in dst.
// The call's first barrier also carries its signature (coll_dev.h), into every rank's
// sigs[0][g & 1][me] before the flag (a proxied AMO_SET, ordered before the flag's, where
// unmapped); a rank whose signature differs from rank 0's ends the call there on every rank
// (MORI_EINVAL naming it, coll.cuh's sig_check), the generations in step.
// Every wait polls with acquire loads and, every MORI_COLL_POLL polls, reads the group's abort
// word, the ring's error word, the status word and the clock against dev->timeout_ns; a wait that
// fails records its code in the status word (a rank that never came: MORI_ETIMEDOUT and its bit
// in missing[]), as coll.cuh's barrier does (the same wait_flag), and the kernel returns. One
// block of MORI_COLL_THREADS threads; flags slot 0 and 1 and gens[0] are this kernel's (no
// intranode kernel runs on such a communicator). The state of the group's device API is the third argument.
#include "mori/device/shmem.cuh"
#include "coll_ops.cuh"

namespace mori_coll {
namespace xnode {
typedef const struct mori_shmem_state *sst_t;

#define XN_SLOT_BAR 0u /* flags[0][q]: rank q reached round g's barrier */
#define XN_SLOT_SIG 1u /* flags[1][q]: rank q's data of round g is in my receive slot q */

/* Threads t < n whose bit is set in `mask` wait until their flags[slot][t] >= g. Every thread
 * calls it; 0, or the MORI_E* code it recorded in the status word. */
MORI_DEVICE int wait_flags(dev_t *d, unsigned slot, uint64_t g, uint64_t mask)
{
	__shared__ int rc_s;
	unsigned t = threadIdx.x;
	if (t == 0)
		rc_s = 0;
	__syncthreads();
	if ((int)t < d->n && (mask >> t & 1)) {
		int rc = wait_flag(d, flag(d, slot, (int)t), g, t, true);
		if (rc)
			rc_s = rc;
	}
	__syncthreads();
	return rc_s;
}

/* Set rank t's word at heap offset off to v: a store where mapped (ordered before a later
 * release store of the thread), else a proxy AMO_SET, which morid applies at rank t after every
 * earlier request of mine to it. 0 or the proxy's error (recorded). */
MORI_DEVICE int set_word(dev_t *d, sst_t st, int t, uint64_t off, uint64_t v, bool release)
{
	if (d->peer_base[t]) {
		if (release)
			mori_release_store_sys((uint64_t *)(d->peer_base[t] + off), v);
		else
			*(volatile uint64_t *)(d->peer_base[t] + off) = v;
		return 0;
	}
	mori_shmem_impl::preq r = {MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_SET, 8, d->pe_of[t], off, 0, 0, 0, v, 0};
	uint64_t seq;
	int rc = mori_shmem_impl::proxy_post(st, r, &seq);
	if (rc)
		fail(d, rc, d->pe_of[t]);
	return rc;
}

/* Round g's barrier among all ranks (step 1); sig (the call's first round): its signature, into
 * every rank's sigs[0][g & 1][me] before the flag, compared after (coll.cuh's sig_check). */
MORI_DEVICE int barrier(dev_t *d, sst_t st, uint64_t g, uint64_t sig)
{
	__shared__ int rc_s;
	unsigned t = threadIdx.x;
	const int n = d->n;
	if (t == 0)
		rc_s = 0;
	__syncthreads(); /* every thread's reads of the slots precede the flags (release: cumulative) */
	if ((int)t < n) {
		uint64_t off = (uint64_t)flag(d, XN_SLOT_BAR, d->rank) - d->heap_base;
		uint64_t soff = (uint64_t)sig_word(d, XN_SLOT_BAR, g, d->rank) - d->heap_base;
		int rc = sig ? set_word(d, st, (int)t, soff, sig, false) : 0;
		if (!rc)
			rc = set_word(d, st, (int)t, off, g, true);
		if (rc)
			rc_s = rc;
	}
	__syncthreads();
	if (rc_s)
		return rc_s;
	int rc = wait_flags(d, XN_SLOT_BAR, g, n == 64 ? ~0ull : (1ull << n) - 1);
	if (rc || !sig)
		return rc;
	/* thread t acquired rank t's flag in wait_flags: its word is there */
	uint64_t w = (int)t < n ? *(volatile uint64_t *)sig_word(d, XN_SLOT_BAR, g, (int)t) : 0;
	return sig_check(d, w);
}

/* a.count: bytes of the segment each rank sends each peer; a.chunk: W, bytes a slot (16-byte
 * multiple). */
MORI_DEVICE void run(dev_t *d, sst_t st, const mori_coll_args &a, uint64_t *gen)
{
	const int n = d->n, me = d->rank;
	const unsigned t = threadIdx.x;
	const uint64_t W = a.chunk, L = a.count;
	const bool per_dest = a.kind == MORI_COLL_K_ALLTOALL || a.kind == MORI_COLL_K_REDSCAT;
	const bool reduce = a.kind == MORI_COLL_K_AR_ONESHOT || a.kind == MORI_COLL_K_AR_TWOSHOT ||
			    a.kind == MORI_COLL_K_REDSCAT;
	const bool bcast = a.kind == MORI_COLL_K_BCAST;
	const uint64_t all = n == 64 ? ~0ull : (1ull << n) - 1;
	uint8_t *recv = (uint8_t *)d->scratch, *send = recv + (uint64_t)n * W;
	uint64_t *sig = flag(d, XN_SLOT_SIG, me); /* at the target: its flags[1][me] */
	__shared__ uint64_t srcs[MORI_COLL_MAX_RANKS];
	for (uint64_t k0 = 0; k0 < L; k0 += W) {
		const uint64_t len = L - k0 < W ? L - k0 : W, g = ++*gen;
		if (barrier(d, st, g, k0 ? 0 : a.sig))
			return;
		uint8_t *mine = recv + (uint64_t)me * W;
		if (!bcast || me == a.root) {
			if (per_dest)
				for (int s = 0; s < n; s++)
					copy(s == me ? mine : send + (uint64_t)s * W, (const uint8_t *)a.src + (uint64_t)s * L + k0, len);
			else
				copy(mine, (const uint8_t *)a.src + k0, len);
			/* put_signal synchronises the block on entry: the staged bytes are every thread's */
			for (int j = 1; j < n; j++) {
				int q = (me + j) % n;
				const uint8_t *from = per_dest ? send + (uint64_t)q * W : mine;
				int rc = mori_shmem_impl::put_signal<mori_shmem_impl::BLOCK>(
					st, mine, from, len, sig, g, MORI_SHMEM_SIGNAL_SET, d->pe_of[q]);
				if (rc) { /* the same rc in every thread (block scope) */
					if (t == 0)
						fail(d, rc, d->pe_of[q]);
					return;
				}
			}
		}
		uint64_t from_mask = bcast ? (me == a.root ? 0 : 1ull << a.root) : all & ~(1ull << me);
		if (wait_flags(d, XN_SLOT_SIG, g, from_mask))
			return;
		if (reduce) { /* every rank's slot in rank order, as the intranode kernels reduce */
			if ((int)t < n)
				srcs[t] = (uint64_t)(recv + (uint64_t)t * W);
			__syncthreads();
			reduce_any(d, a, a.dst + k0, 0, srcs, 0, len / esize(a.dtype));
		} else if (bcast) {
			copy((uint8_t *)a.dst + k0, recv + (uint64_t)a.root * W, len);
		} else {
			for (int r = 0; r < n; r++)
				copy((uint8_t *)a.dst + (uint64_t)r * L + k0, recv + (uint64_t)r * W, len);
		}
		/* the next round's barrier synchronises the block before its flags */
	}
}
} // namespace xnode
} // namespace mori_coll

MORI_KERNEL void __launch_bounds__(MORI_COLL_THREADS, 1)
	mori_coll_xnode_kernel(const struct mori_coll_dev *d, struct mori_coll_args a, const struct mori_shmem_state *st)
{
	using namespace mori_coll;
	__shared__ uint64_t gen_s;
	__shared__ int failed_s;
	uint64_t *gens = (uint64_t *)d->gens;
	if (threadIdx.x == 0) {
		gen_s = gens[0];
		failed_s = status_code(d);
	}
	__syncthreads();
	if (failed_s)
		return; /* a failed communicator runs nothing that waits */
	uint64_t g = gen_s;
	xnode::run(d, st, a, &g);
	if (threadIdx.x == 0)
		gens[0] = g; /* every thread counted the same rounds; replays of a graph continue from here */
}
