/* mori/device/cco.cuh: MORI-CCO's device API. A kernel takes the device communicator
 * (struct mori_cco_dev_comm, mori/device_host/cco_layout.h, filled by mori_cco_dev_comm_create)
 * and windows (mori_cco_win, from mori_cco_window_dev) by value, and reaches peers three ways, as
 * ROCm/mori's CCO and NCCL 2.28's device API do:
 *   LSA   load/store into the heaps of this node's ranks: mori_cco_lsa_peer_ptr, the LSA barrier
 *         session;
 *   GDA   GPU-initiated put / get / signal-add / signal-inc / counter-inc and the GDA barrier
 *         session: a peer this process maps is written directly, any other one through morid's
 *         proxy ring (MORI-SHMEM's device paths, mori/device/shmem.cuh), so the same kernel
 *         works whether the peer is load/store-reachable or not;
 *   CE    copy-engine puts to LSA peers at thread / warp / block / grouped scope: the kernel posts
 *         (dst, src, bytes) to a queue served by libmori's copy-engine thread and goes on; drain
 *         waits for the queue.
 * Names follow ROCm/mori's (ccoGetLsaPeerPtr -> mori_cco_lsa_peer_ptr, ccoLsaBarrierSession ->
 * mori_cco_lsa_barrier_session, ccoGda put/get/signal/counter/flush -> mori_cco_gda_*,
 * ccoGdaBarrierSession -> mori_cco_gda_barrier_session, ccoSdma put/quiet -> mori_cco_ce_put /
 * mori_cco_ce_drain); the cooperative scopes ccoCoopThread / Warp / Block are MORI_CCO_THREAD /
 * WARP / BLOCK template arguments: _warp and _block calls are made by every thread of the warp or
 * block with the same arguments and return the same value in all of them.
 *
 * Peers: GDA calls take world ranks; LSA and CE calls take LSA ranks (0..lsa_size-1). Offsets are
 * bytes from the window's start. Signals and counters are uint64_t words of the device
 * communicator's resources (ids below signal_count / counter_count).
 *
 * Errors: every call returns 0 or a negative MORI_E* code, checked before anything is touched:
 * MORI_ESTALE once the device communicator or its communicator was destroyed (the liveness word
 * no longer holds its generation: no write lands anywhere), MORI_EINVAL (a peer or id out of
 * range, not a device communicator), MORI_ERANGE (a range outside its window), MORI_ENOTSUP (a GDA
 * peer the connection type does not reach, a CE call without queues). Every wait (barriers,
 * signal and counter waits, drains, a full queue) ends with 0, or with the abort word's code
 * (MORI_EPEERDEAD when a rank died, MORI_ECANCELED, MORI_ETIMEDOUT), or with MORI_ETIMEDOUT after
 * the communicator's deadline (timeout_ns), or MORI_ESTALE: nothing waits forever.
 *
 * MORI-SHMEM's device header is included for its proxy paths; it defines the module global
 * mori_shmem_state_ptr unless MORI_SHMEM_STATE_EXTERN is defined (CCO does not use that global:
 * the device communicator carries its group's state). */
#ifndef MORI_CCO_CUH
#define MORI_CCO_CUH
#include "shmem.cuh"
#include "../device_host/cco_layout.h"

#define MORI_CCO_POLL 1024u /* polls between two looks at the abort word, the liveness word and the clock */

enum mori_cco_scope { MORI_CCO_THREAD = mori_shmem_impl::THREAD, MORI_CCO_WARP = mori_shmem_impl::WARP,
		      MORI_CCO_BLOCK = mori_shmem_impl::BLOCK };

namespace mori_cco_impl {
typedef const mori_cco_dev_comm &dc_t;
using mori_shmem_impl::scope;

MORI_DEVICE mori_shmem_impl::state st(dc_t c) { return (mori_shmem_impl::state)c.shmem; }

/* 0 while the device communicator lives, else MORI_ESTALE (MORI_EINVAL: not one). */
MORI_DEVICE int live(dc_t c)
{
	if (c.magic != MORI_CCO_MAGIC || c.live_slot >= MORI_CCO_LIVE_SLOTS)
		return MORI_EINVAL;
	return mori_relaxed_load_sys((const uint64_t *)c.live + c.live_slot) == c.live_gen ? 0 : MORI_ESTALE;
}
MORI_DEVICE int abort_code(dc_t c) { return c.ctrl ? mori_abort_code((const struct mori_shmem_ctrl *)c.ctrl) : 0; }

/* The bounded wait of every CCO wait: ready() until it holds; every MORI_CCO_POLL polls the abort
 * word, the liveness word and the deadline. */
template <typename Ready> MORI_DEVICE int wait(dc_t c, Ready ready)
{
	mori_deadline dl;
	return mori_wait_until(MORI_CCO_POLL, ready, [&](unsigned) {
		int rc = abort_code(c);
		if (!rc)
			rc = live(c);
		if (!rc && dl.passed(c.timeout_ns))
			rc = MORI_ETIMEDOUT;
		return rc;
	});
}

/* This rank's heap address of window offset off (len bytes), or 0 when it leaves the window. */
MORI_DEVICE uint64_t own(dc_t c, mori_cco_win w, uint64_t off, uint64_t len)
{
	if (off > w.bytes || len > w.bytes - off || w.off + w.bytes > c.heap_size)
		return 0;
	return c.heap_base + w.off + off;
}
MORI_DEVICE uint64_t *word(dc_t c, uint64_t base_off, int i) { return (uint64_t *)(c.heap_base + base_off) + i; }

/* World rank of LSA rank p, or -1. */
MORI_DEVICE int lsa_world(dc_t c, int p) { return (unsigned)p < (unsigned)c.lsa_size ? c.node_start + p : -1; }

/* Rank w's address of own heap address a (w an LSA peer or this rank), else 0. */
MORI_DEVICE uint64_t peer_addr(dc_t c, uint64_t a, int w)
{
	if (w == c.rank)
		return a;
	uint64_t b = mori_shmem_impl::peer_base(st(c), w);
	return b ? a - c.heap_base + b : 0;
}

/* The common entry checks of a GDA call to world rank w. */
MORI_DEVICE int gda_check(dc_t c, int w)
{
	int rc = live(c);
	if (rc)
		return rc;
	if ((unsigned)w >= (unsigned)c.world_size)
		return MORI_EINVAL;
	return mori_cco_gda_reaches(&c, w) || w == c.rank ? 0 : MORI_ENOTSUP;
}

/* ---- barrier sessions (LSA by stores, GDA by AMO_SET through the shmem paths) ----
 * State at base_off: uint64_t epoch[n]; then inbox[n][slots]. Member i of the team writes its
 * generation into inbox[index][i] of every member; each waits until every inbox slot of its own
 * holds at least that generation. The epoch is kept in the heap between sessions (monotonic, so
 * stale inbox values never match). */
template <scope S> struct barrier_session {
	const mori_cco_dev_comm &c;
	uint64_t base_off;
	int n, me, slots, index, kind; /* kind 0: LSA, 1: rail, 2: world */
	uint64_t epoch;
	int rc;
	MORI_DEVICE barrier_session(dc_t cc, uint64_t off, int count, int slots_, int me_, int idx, int k)
		: c(cc), base_off(off), n(count), me(me_), slots(slots_), index(idx), kind(k), epoch(0), rc(0)
	{
		rc = live(c);
		if (!rc && (unsigned)idx >= (unsigned)count)
			rc = MORI_EINVAL;
		if (!rc)
			epoch = *(volatile uint64_t *)word(c, base_off, idx);
	}
	/* Every thread holds the same epoch here; the leader keeps it, and the group syncs after the
	 * store so that a next session on this index (its constructor reads the word) sees it. */
	MORI_DEVICE ~barrier_session()
	{
		if (!rc && mori_shmem_impl::tid<S>() == 0)
			*(volatile uint64_t *)word(c, base_off, index) = epoch;
		mori_shmem_impl::group_sync<S>();
	}
	MORI_DEVICE uint64_t inbox_off(int slot) const { return base_off + 8ull * ((uint64_t)n + (uint64_t)index * slots + slot); }
	/* Member m's world rank. */
	MORI_DEVICE int world_of(int m) const
	{
		if (kind == 0)
			return c.node_start + m;
		if (kind == 1)
			return m * c.lsa_size + c.lsa_rank;
		return m;
	}
	MORI_DEVICE int arrive()
	{
		mori_shmem_impl::group_sync<S>();
		if (rc)
			return rc;
		mori_fence_data_before_host_signal(); /* the group's writes before the inbox stores */
		uint64_t g = epoch + 1;
		int r = 0;
		for (int m = (int)mori_shmem_impl::tid<S>(); m < slots && !r; m += (int)mori_shmem_impl::nthr<S>()) {
			int w = world_of(m);
			uint64_t *mine = (uint64_t *)(c.heap_base + inbox_off(me));
			uint64_t a = peer_addr(c, (uint64_t)mine, w);
			if (a)
				mori_release_store_sys((uint64_t *)a, g);
			else
				r = mori_shmem_impl::amo<uint64_t>(st(c), mine, MORI_SHMEM_ATOMIC_SET, g, 0, w, nullptr);
		}
		return rc = mori_shmem_impl::group_any<S>(r);
	}
	MORI_DEVICE int wait()
	{
		if (rc)
			return rc;
		uint64_t g = epoch + 1;
		int r = 0;
		for (int m = (int)mori_shmem_impl::tid<S>(); m < slots && !r; m += (int)mori_shmem_impl::nthr<S>()) {
			const uint64_t *w = (const uint64_t *)(c.heap_base + inbox_off(m));
			r = mori_cco_impl::wait(c, [&] { return mori_acquire_load_sys(w) >= g; });
		}
		rc = mori_shmem_impl::group_any<S>(r);
		if (!rc)
			epoch = g;
		return rc;
	}
	MORI_DEVICE int sync()
	{
		int r = arrive();
		return r ? r : wait();
	}
};

/* ---- copy-engine queues ---- */
MORI_DEVICE int ce_post(dc_t c, int q, uint64_t dst, uint64_t src, uint64_t bytes)
{
	struct mori_cco_ce_ctrl *k = (struct mori_cco_ce_ctrl *)c.ce_ctrl + q;
	struct mori_cco_ce_req *ring = (struct mori_cco_ce_req *)c.ce_ring + (uint64_t)q * c.ce_entries;
	uint64_t seq = mori_atomic_add_sys((uint64_t *)&k->head, (uint64_t)1);
	int rc = wait(c, [&] { return seq - mori_relaxed_load_sys((const uint64_t *)&k->done) < c.ce_entries; });
	if (rc)
		return rc;
	mori_acquire_after_wait_sys(); /* the server copied the slot's last request out */
	struct mori_cco_ce_req *r = &ring[seq & (c.ce_entries - 1)];
	r->dst = dst;
	r->src = src;
	r->bytes = bytes;
	mori_release_store_sys((uint64_t *)&r->ready, seq + 1);
	return 0;
}
MORI_DEVICE int ce_args(dc_t c, int peer, mori_cco_win dw, uint64_t doff, mori_cco_win sw, uint64_t soff, uint64_t bytes,
			int q, uint64_t *dst, uint64_t *src)
{
	int rc = live(c);
	if (rc)
		return rc;
	if (!c.ce_queue_count || !c.ce_ring)
		return MORI_ENOTSUP;
	int w = lsa_world(c, peer);
	if (w < 0 || (unsigned)q >= (unsigned)c.ce_queue_count)
		return MORI_EINVAL;
	uint64_t d = own(c, dw, doff, bytes), s = own(c, sw, soff, bytes);
	if (!d || !s)
		return MORI_ERANGE;
	*dst = peer_addr(c, d, w);
	*src = s;
	return *dst ? 0 : MORI_EINVAL;
}
} /* namespace mori_cco_impl */

/* ---- queries and teams (the team functions are cco_layout.h's) ---- */
MORI_DEVICE int mori_cco_check(const mori_cco_dev_comm &c) { return mori_cco_impl::live(c); }
MORI_DEVICE int mori_cco_status(const mori_cco_dev_comm &c)
{
	int rc = mori_cco_impl::live(c);
	return rc ? rc : mori_cco_impl::abort_code(c);
}

/* ---- LSA ---- */
/* LSA rank peer's address of window offset `offset` (ROCm/mori's ccoGetLsaPeerPtr), or NULL (not
 * an LSA rank, outside the window, stale). */
MORI_DEVICE void *mori_cco_lsa_peer_ptr(const mori_cco_dev_comm &c, mori_cco_win w, int peer, uint64_t offset)
{
	int wr = mori_cco_impl::lsa_world(c, peer);
	uint64_t a = mori_cco_impl::own(c, w, offset, 0);
	if (wr < 0 || !a || mori_cco_impl::live(c))
		return nullptr;
	return (void *)mori_cco_impl::peer_addr(c, a, wr);
}
MORI_DEVICE void *mori_cco_local_ptr(const mori_cco_dev_comm &c, mori_cco_win w, uint64_t offset)
{
	return (void *)mori_cco_impl::own(c, w, offset, 0);
}

/* The LSA barrier session (ccoLsaBarrierSession): barrier `index` (< lsa_barrier_count) among the
 * LSA team; arrive() / wait() / sync() return 0 or a MORI_E*; one session per barrier index at a
 * time, every LSA rank in the same order. */
template <int S> struct mori_cco_lsa_barrier_session : mori_cco_impl::barrier_session<(mori_shmem_impl::scope)S> {
	MORI_DEVICE mori_cco_lsa_barrier_session(const mori_cco_dev_comm &c, int index)
		: mori_cco_impl::barrier_session<(mori_shmem_impl::scope)S>(c, c.lsa_bar_off, c.lsa_barrier_count, c.lsa_size,
									  c.lsa_rank, index, 0)
	{
	}
};

/* ---- GDA ---- */
/* bytes from this rank's src window at soff to world rank peer's dst window at doff; nbi: complete
 * after mori_cco_gda_flush. With a signal: signal `sig` of peer gets `value` added after the data. */
template <int S>
MORI_DEVICE int mori_cco_gda_put(const mori_cco_dev_comm &c, int peer, mori_cco_win dw, uint64_t doff, mori_cco_win sw,
				 uint64_t soff, uint64_t bytes)
{
	int rc = mori_cco_impl::gda_check(c, peer);
	uint64_t d = mori_cco_impl::own(c, dw, doff, bytes), s = mori_cco_impl::own(c, sw, soff, bytes);
	if (!rc && (!d || !s))
		rc = MORI_ERANGE;
	if (rc)
		return rc;
	return mori_shmem_impl::putmem_nbi<(mori_shmem_impl::scope)S>(mori_cco_impl::st(c), (void *)d, (const void *)s,
									 bytes, peer);
}
template <int S>
MORI_DEVICE int mori_cco_gda_put_signal_add(const mori_cco_dev_comm &c, int peer, mori_cco_win dw, uint64_t doff,
					    mori_cco_win sw, uint64_t soff, uint64_t bytes, int sig, uint64_t value)
{
	int rc = mori_cco_impl::gda_check(c, peer);
	uint64_t d = mori_cco_impl::own(c, dw, doff, bytes), s = mori_cco_impl::own(c, sw, soff, bytes);
	if (!rc && (!d || !s))
		rc = MORI_ERANGE;
	if (!rc && (unsigned)sig >= (unsigned)c.signal_count)
		rc = MORI_EINVAL;
	if (rc)
		return rc;
	return mori_shmem_impl::put_signal<(mori_shmem_impl::scope)S>(mori_cco_impl::st(c), (void *)d, (const void *)s, bytes,
								   mori_cco_impl::word(c, c.signal_off, sig), value,
								   MORI_SHMEM_SIGNAL_ADD, peer);
}
/* bytes of world rank peer's src window at soff into this rank's dst window at doff; blocking
 * (the bytes are here, for every thread of the scope, when it returns). */
template <int S>
MORI_DEVICE int mori_cco_gda_get(const mori_cco_dev_comm &c, int peer, mori_cco_win dw, uint64_t doff, mori_cco_win sw,
				 uint64_t soff, uint64_t bytes)
{
	int rc = mori_cco_impl::gda_check(c, peer);
	uint64_t d = mori_cco_impl::own(c, dw, doff, bytes), s = mori_cco_impl::own(c, sw, soff, bytes);
	if (!rc && (!d || !s))
		rc = MORI_ERANGE;
	if (rc)
		return rc;
	return mori_shmem_impl::getmem<(mori_shmem_impl::scope)S>(mori_cco_impl::st(c), (void *)d, (const void *)s, bytes,
								peer, true);
}
/* Signal `sig` of world rank peer += value (thread scope; ordered after this thread's earlier
 * puts to peer only through mori_cco_gda_flush or the _signal_add put form). */
MORI_DEVICE int mori_cco_gda_signal_add(const mori_cco_dev_comm &c, int peer, int sig, uint64_t value)
{
	int rc = mori_cco_impl::gda_check(c, peer);
	if (!rc && (unsigned)sig >= (unsigned)c.signal_count)
		rc = MORI_EINVAL;
	if (rc)
		return rc;
	return mori_shmem_impl::amo<uint64_t>(mori_cco_impl::st(c), mori_cco_impl::word(c, c.signal_off, sig),
					      MORI_SHMEM_ATOMIC_ADD, value, 0, peer, nullptr);
}
MORI_DEVICE int mori_cco_gda_signal_inc(const mori_cco_dev_comm &c, int peer, int sig)
{
	return mori_cco_gda_signal_add(c, peer, sig, 1);
}
/* Every GDA put and get this rank posted before has completed (at the target, or here). */
MORI_DEVICE int mori_cco_gda_flush(const mori_cco_dev_comm &c)
{
	int rc = mori_cco_impl::live(c);
	return rc ? rc : mori_shmem_impl::quiet(mori_cco_impl::st(c));
}
/* Counter `id` of this rank += 1 once every GDA put it posted before has left (flush, then the
 * add): a kernel counts its completed sends. */
MORI_DEVICE int mori_cco_gda_counter_inc(const mori_cco_dev_comm &c, int id)
{
	int rc = mori_cco_impl::live(c);
	if (!rc && (unsigned)id >= (unsigned)c.counter_count)
		rc = MORI_EINVAL;
	if (!rc)
		rc = mori_shmem_impl::quiet(mori_cco_impl::st(c));
	if (!rc)
		mori_atomic_add_sys(mori_cco_impl::word(c, c.counter_off, id), (uint64_t)1);
	return rc;
}
/* Read, wait for (>= least; bounded) and reset this rank's signal or counter id. */
MORI_DEVICE int mori_cco_gda_read_signal(const mori_cco_dev_comm &c, int sig, uint64_t *v)
{
	int rc = mori_cco_impl::live(c);
	if (!rc && (unsigned)sig >= (unsigned)c.signal_count)
		rc = MORI_EINVAL;
	if (!rc)
		*v = mori_acquire_load_sys(mori_cco_impl::word(c, c.signal_off, sig));
	return rc;
}
MORI_DEVICE int mori_cco_gda_wait_signal(const mori_cco_dev_comm &c, int sig, uint64_t least)
{
	int rc = mori_cco_impl::live(c);
	if (!rc && (unsigned)sig >= (unsigned)c.signal_count)
		rc = MORI_EINVAL;
	const uint64_t *w = mori_cco_impl::word(c, c.signal_off, sig);
	return rc ? rc : mori_cco_impl::wait(c, [&] { return mori_acquire_load_sys(w) >= least; });
}
MORI_DEVICE int mori_cco_gda_reset_signal(const mori_cco_dev_comm &c, int sig)
{
	int rc = mori_cco_impl::live(c);
	if (!rc && (unsigned)sig >= (unsigned)c.signal_count)
		rc = MORI_EINVAL;
	if (!rc)
		mori_release_store_sys(mori_cco_impl::word(c, c.signal_off, sig), (uint64_t)0);
	return rc;
}
MORI_DEVICE int mori_cco_gda_read_counter(const mori_cco_dev_comm &c, int id, uint64_t *v)
{
	int rc = mori_cco_impl::live(c);
	if (!rc && (unsigned)id >= (unsigned)c.counter_count)
		rc = MORI_EINVAL;
	if (!rc)
		*v = mori_acquire_load_sys(mori_cco_impl::word(c, c.counter_off, id));
	return rc;
}
MORI_DEVICE int mori_cco_gda_wait_counter(const mori_cco_dev_comm &c, int id, uint64_t least)
{
	int rc = mori_cco_impl::live(c);
	if (!rc && (unsigned)id >= (unsigned)c.counter_count)
		rc = MORI_EINVAL;
	const uint64_t *w = mori_cco_impl::word(c, c.counter_off, id);
	return rc ? rc : mori_cco_impl::wait(c, [&] { return mori_acquire_load_sys(w) >= least; });
}

/* The GDA barrier session (ccoGdaBarrierSession): barrier `index` over the rail team (rail: index <
 * rail_gda_barrier_count) or the world (index < barrier_count; LSA peers by store, the others
 * through the proxy). arrive() / wait() / sync() as the LSA session's. */
template <int S> struct mori_cco_gda_barrier_session : mori_cco_impl::barrier_session<(mori_shmem_impl::scope)S> {
	MORI_DEVICE mori_cco_gda_barrier_session(const mori_cco_dev_comm &c, int index, bool rail)
		: mori_cco_impl::barrier_session<(mori_shmem_impl::scope)S>(
			  c, rail ? c.rail_bar_off : c.bar_off, rail ? c.rail_gda_barrier_count : c.barrier_count,
			  rail ? c.world_size / c.lsa_size : c.world_size, rail ? c.rank / c.lsa_size : c.rank, index,
			  rail ? 1 : 2)
	{
	}
};

/* ---- CE (copy engines) ---- */
/* Post a copy of bytes from this rank's src window at soff to LSA rank peer's dst window at doff
 * on queue q (< ce_queue_count); returns once posted (the copy engines move the bytes meanwhile).
 * Thread scope: the calling thread posts; warp / block: the leader posts for the group. */
template <int S>
MORI_DEVICE int mori_cco_ce_put(const mori_cco_dev_comm &c, int peer, mori_cco_win dw, uint64_t doff, mori_cco_win sw,
				uint64_t soff, uint64_t bytes, int q)
{
	mori_shmem_impl::group_sync<(mori_shmem_impl::scope)S>(); /* the group's writes of src precede the post */
	int rc = 0;
	if (mori_shmem_impl::tid<(mori_shmem_impl::scope)S>() == 0) {
		uint64_t d, s;
		rc = mori_cco_impl::ce_args(c, peer, dw, doff, sw, soff, bytes, q, &d, &s);
		if (!rc) {
			mori_fence_data_before_host_signal(); /* src's bytes are visible to the copy engines */
			rc = mori_cco_impl::ce_post(c, q, d, s, bytes);
		}
	}
	return mori_shmem_impl::group_bcast<(mori_shmem_impl::scope)S>(rc);
}
/* Grouped (a warp, every lane its own copy): each active lane posts its own (peer, windows,
 * offsets, bytes, queue); the warp synchronises first and returns each lane's own code. */
MORI_DEVICE int mori_cco_ce_put_grouped(const mori_cco_dev_comm &c, int peer, mori_cco_win dw, uint64_t doff,
					mori_cco_win sw, uint64_t soff, uint64_t bytes, int q)
{
	mori_sync_warp();
	uint64_t d, s;
	int rc = mori_cco_impl::ce_args(c, peer, dw, doff, sw, soff, bytes, q, &d, &s);
	if (!rc) {
		mori_fence_data_before_host_signal();
		rc = mori_cco_impl::ce_post(c, q, d, s, bytes);
	}
	return rc;
}
/* Every copy posted on queue q before has landed (ccoSdma quiet), or the queue's first error. */
template <int S> MORI_DEVICE int mori_cco_ce_drain(const mori_cco_dev_comm &c, int q)
{
	int rc = 0;
	if (mori_shmem_impl::tid<(mori_shmem_impl::scope)S>() == 0) {
		rc = mori_cco_impl::live(c);
		if (!rc && (!c.ce_queue_count || !c.ce_ctrl))
			rc = MORI_ENOTSUP;
		else if (!rc && (unsigned)q >= (unsigned)c.ce_queue_count)
			rc = MORI_EINVAL;
		if (!rc) {
			struct mori_cco_ce_ctrl *k = (struct mori_cco_ce_ctrl *)c.ce_ctrl + q;
			uint64_t h = mori_relaxed_load_sys((const uint64_t *)&k->head);
			rc = mori_cco_impl::wait(c, [&] { return mori_acquire_load_sys((const uint64_t *)&k->done) >= h; });
			if (!rc)
				rc = *(volatile const int32_t *)&k->error;
		}
	}
	return mori_shmem_impl::group_bcast<(mori_shmem_impl::scope)S>(rc);
}

/* ---- MORI-IR: the device API as extern "C" functions (kernels/shmem.cu instantiates this table
 * into libmori_shmem_device.bc / .a beside MORI_SHMEM_API, mk/ir-table.sh lists it as
 * mori_cco_<name>). A compiler that cannot pass a struct by value (Triton) passes the device
 * communicator's address instead: `d` is a device (or GPU-mapped) address holding a copy of the
 * struct mori_cco_dev_comm (mori.cco's DevComm.device_copy() makes one); a window is its (off,
 * bytes) pair; pointers are uint64_t addresses; int returns are 0 or a negative MORI_E*. Scoped
 * calls come as _thread, _warp and _block, made by every thread of the scope; the barrier
 * sessions as one call (arrive then wait). Rows: ret, name, C++ parameters, ABI parameters, body,
 * as MORI_SHMEM_API's. */
namespace mori_cco_impl {
MORI_DEVICE const mori_cco_dev_comm &dref(uint64_t d) { return *(const mori_cco_dev_comm *)d; }
MORI_DEVICE mori_cco_win win(uint64_t off, uint64_t bytes)
{
	mori_cco_win w;
	w.off = off;
	w.bytes = bytes;
	return w;
}
template <int S> MORI_DEVICE int lsa_barrier(uint64_t d, int index)
{
	mori_cco_lsa_barrier_session<S> b(dref(d), index);
	return b.sync();
}
template <int S> MORI_DEVICE int gda_barrier(uint64_t d, int index, int rail)
{
	mori_cco_gda_barrier_session<S> b(dref(d), index, rail != 0);
	return b.sync();
}
template <typename F> MORI_DEVICE uint64_t read_word(F f, uint64_t d, int id)
{
	uint64_t v = 0;
	return f(dref(d), id, &v) ? 0 : v;
}
} /* namespace mori_cco_impl */

#define MORI_CCO_WIN_ARGS(p) uint64_t p##_off, uint64_t p##_bytes
#define MORI_CCO_WIN(p) mori_cco_impl::win(p##_off, p##_bytes)
#define MORI_CCO_SCOPED_API(X, sfx, S)                                                                         \
	X(int, gda_put_##sfx, (uint64_t d, int peer, MORI_CCO_WIN_ARGS(dw), uint64_t doff, MORI_CCO_WIN_ARGS(sw),     \
			       uint64_t soff, uint64_t bytes),                                                   \
	  (uint64_t d, int peer, MORI_CCO_WIN_ARGS(dw), uint64_t doff, MORI_CCO_WIN_ARGS(sw), uint64_t soff, uint64_t bytes), \
	  (mori_cco_gda_put<S>(mori_cco_impl::dref(d), peer, MORI_CCO_WIN(dw), doff, MORI_CCO_WIN(sw), soff, bytes)))   \
	X(int, gda_put_signal_add_##sfx, (uint64_t d, int peer, MORI_CCO_WIN_ARGS(dw), uint64_t doff,               \
					  MORI_CCO_WIN_ARGS(sw), uint64_t soff, uint64_t bytes, int sig, uint64_t value), \
	  (uint64_t d, int peer, MORI_CCO_WIN_ARGS(dw), uint64_t doff, MORI_CCO_WIN_ARGS(sw), uint64_t soff,         \
	   uint64_t bytes, int sig, uint64_t value),                                                                 \
	  (mori_cco_gda_put_signal_add<S>(mori_cco_impl::dref(d), peer, MORI_CCO_WIN(dw), doff, MORI_CCO_WIN(sw), soff, \
					  bytes, sig, value)))                                                       \
	X(int, gda_get_##sfx, (uint64_t d, int peer, MORI_CCO_WIN_ARGS(dw), uint64_t doff, MORI_CCO_WIN_ARGS(sw),     \
			       uint64_t soff, uint64_t bytes),                                                   \
	  (uint64_t d, int peer, MORI_CCO_WIN_ARGS(dw), uint64_t doff, MORI_CCO_WIN_ARGS(sw), uint64_t soff, uint64_t bytes), \
	  (mori_cco_gda_get<S>(mori_cco_impl::dref(d), peer, MORI_CCO_WIN(dw), doff, MORI_CCO_WIN(sw), soff, bytes)))   \
	X(int, ce_put_##sfx, (uint64_t d, int peer, MORI_CCO_WIN_ARGS(dw), uint64_t doff, MORI_CCO_WIN_ARGS(sw),      \
			      uint64_t soff, uint64_t bytes, int q),                                             \
	  (uint64_t d, int peer, MORI_CCO_WIN_ARGS(dw), uint64_t doff, MORI_CCO_WIN_ARGS(sw), uint64_t soff,         \
	   uint64_t bytes, int q),                                                                                   \
	  (mori_cco_ce_put<S>(mori_cco_impl::dref(d), peer, MORI_CCO_WIN(dw), doff, MORI_CCO_WIN(sw), soff, bytes, q)))  \
	X(int, ce_drain_##sfx, (uint64_t d, int q), (uint64_t d, int q), (mori_cco_ce_drain<S>(mori_cco_impl::dref(d), q))) \
	X(int, lsa_barrier_##sfx, (uint64_t d, int index), (uint64_t d, int index),                                   \
	  (mori_cco_impl::lsa_barrier<S>(d, index)))                                                                   \
	X(int, gda_barrier_##sfx, (uint64_t d, int index, int rail), (uint64_t d, int index, int rail),               \
	  (mori_cco_impl::gda_barrier<S>(d, index, rail)))

#define MORI_CCO_API(X)                                                                                        \
	X(int, check, (uint64_t d), (uint64_t d), (mori_cco_check(mori_cco_impl::dref(d))))                        \
	X(int, status, (uint64_t d), (uint64_t d), (mori_cco_status(mori_cco_impl::dref(d))))                      \
	X(int, rank, (uint64_t d), (uint64_t d), (mori_cco_impl::dref(d).rank))                                    \
	X(int, world_size, (uint64_t d), (uint64_t d), (mori_cco_impl::dref(d).world_size))                        \
	X(int, lsa_rank, (uint64_t d), (uint64_t d), (mori_cco_impl::dref(d).lsa_rank))                            \
	X(int, lsa_size, (uint64_t d), (uint64_t d), (mori_cco_impl::dref(d).lsa_size))                            \
	X(uint64_t, lsa_peer_ptr, (uint64_t d, MORI_CCO_WIN_ARGS(w), int peer, uint64_t offset),                   \
	  (uint64_t d, MORI_CCO_WIN_ARGS(w), int peer, uint64_t offset),                                           \
	  ((uint64_t)(uintptr_t)mori_cco_lsa_peer_ptr(mori_cco_impl::dref(d), MORI_CCO_WIN(w), peer, offset)))    \
	X(uint64_t, local_ptr, (uint64_t d, MORI_CCO_WIN_ARGS(w), uint64_t offset),                                \
	  (uint64_t d, MORI_CCO_WIN_ARGS(w), uint64_t offset),                                                     \
	  ((uint64_t)(uintptr_t)mori_cco_local_ptr(mori_cco_impl::dref(d), MORI_CCO_WIN(w), offset)))             \
	X(int, gda_signal_add, (uint64_t d, int peer, int sig, uint64_t value), (uint64_t d, int peer, int sig, uint64_t value), \
	  (mori_cco_gda_signal_add(mori_cco_impl::dref(d), peer, sig, value)))                                     \
	X(int, gda_signal_inc, (uint64_t d, int peer, int sig), (uint64_t d, int peer, int sig),                   \
	  (mori_cco_gda_signal_inc(mori_cco_impl::dref(d), peer, sig)))                                            \
	X(int, gda_flush, (uint64_t d), (uint64_t d), (mori_cco_gda_flush(mori_cco_impl::dref(d))))                \
	X(int, gda_counter_inc, (uint64_t d, int id), (uint64_t d, int id),                                        \
	  (mori_cco_gda_counter_inc(mori_cco_impl::dref(d), id)))                                                  \
	X(uint64_t, gda_signal_value, (uint64_t d, int sig), (uint64_t d, int sig),                                \
	  (mori_cco_impl::read_word(mori_cco_gda_read_signal, d, sig)))                                            \
	X(uint64_t, gda_counter_value, (uint64_t d, int id), (uint64_t d, int id),                                 \
	  (mori_cco_impl::read_word(mori_cco_gda_read_counter, d, id)))                                            \
	X(int, gda_wait_signal, (uint64_t d, int sig, uint64_t least), (uint64_t d, int sig, uint64_t least),      \
	  (mori_cco_gda_wait_signal(mori_cco_impl::dref(d), sig, least)))                                          \
	X(int, gda_wait_counter, (uint64_t d, int id, uint64_t least), (uint64_t d, int id, uint64_t least),       \
	  (mori_cco_gda_wait_counter(mori_cco_impl::dref(d), id, least)))                                          \
	X(int, gda_reset_signal, (uint64_t d, int sig), (uint64_t d, int sig),                                     \
	  (mori_cco_gda_reset_signal(mori_cco_impl::dref(d), sig)))                                                \
	X(int, ce_put_grouped, (uint64_t d, int peer, MORI_CCO_WIN_ARGS(dw), uint64_t doff, MORI_CCO_WIN_ARGS(sw), \
				uint64_t soff, uint64_t bytes, int q),                                           \
	  (uint64_t d, int peer, MORI_CCO_WIN_ARGS(dw), uint64_t doff, MORI_CCO_WIN_ARGS(sw), uint64_t soff,       \
	   uint64_t bytes, int q),                                                                                 \
	  (mori_cco_ce_put_grouped(mori_cco_impl::dref(d), peer, MORI_CCO_WIN(dw), doff, MORI_CCO_WIN(sw), soff, bytes, q))) \
	MORI_CCO_SCOPED_API(X, thread, MORI_CCO_THREAD)                                                            \
	MORI_CCO_SCOPED_API(X, warp, MORI_CCO_WARP)                                                                \
	MORI_CCO_SCOPED_API(X, block, MORI_CCO_BLOCK)
#endif
