/* mori/device/shmem.cuh: MORI-SHMEM's device API. GPU kernels (CUDA and HIP, one source through
 * mori/device/gpu.h) move data between the PEs' symmetric heaps from inside the kernel:
 * ROCm/mori's mori_shmem_* device functions (names, argument orders, SIGNAL_SET = 9 and
 * SIGNAL_ADD = 10, the atomic-type numbers) with OpenSHMEM 1.5 semantics, plus OpenSHMEM's own
 * atomic, wait and sync forms.
 *
 * State. Every function reads this PE's struct mori_shmem_state (mori/device_host/shmem_layout.h) through
 * the module global `mori_shmem_state_ptr`, which the host fills once per module
 * (mori_shmem_module_init, or mori_shmem_state() + cudaMemcpyToSymbol). A CUDA program built
 * with -rdc defines it in one translation unit and defines MORI_SHMEM_STATE_EXTERN in the others.
 *
 * Addresses. `dest`/`source` arguments that name a symmetric object are addresses in this PE's
 * own heap (what mori_shmem_malloc returned); the same offset is used at the target PE. Where
 * the state maps the target's heap (peer_base[pe] != 0: same node) the call loads and stores it
 * directly; otherwise it posts a request to morid through the proxy ring, and then the local side
 * of a put (source) or get (dest) must lie in this PE's heap too (morid reaches only heaps).
 *
 * Scopes. _thread: any one thread calls it. _warp: all lanes of a full warp call it with the same
 * arguments. _block: all threads of the block do. Warp and block calls synchronise the group
 * (__syncwarp / __syncthreads) on entry (the group's writes to the source are seen), before one
 * lane signals or posts (so they are correct under NVIDIA's independent thread scheduling), and
 * blocking gets on return (the bytes are there for every thread); they return the same value in
 * every thread.
 *
 * Completion. _nbi puts and gets return at once: the bytes are visible at the target (or here)
 * after quiet. Blocking gets return with the bytes here. A put with signal makes the signal
 * visible only after its data. fence orders a thread's puts to one PE; quiet completes them.
 * Atomics are relaxed (they order nothing); a lock built on compare_swap uses fence after taking
 * it and before giving it back.
 *
 * Ordering scope, decided once per peer when libmori builds the state (mori_shmem_state's
 * peer_scope and wait_scope, device_host/shmem_layout.h), never per call: a signal or barrier
 * flag to a PE whose heap lives on this GPU is released at GPU scope, to any other PE (another
 * GPU, or the proxy) at system scope. Waits on this PE's own words (wait_until, signal_wait_until,
 * test, signal_fetch) acquire at GPU scope when every PE of the group is on this GPU, else at
 * system scope (the writer may be another GPU or morid); a barrier acquires each PE's flag at
 * that PE's scope; quiet and fence complete stores at the wait scope. A release at GPU scope
 * paired with an acquire at system scope (or the reverse) is still a synchronisation when both
 * sides run on this GPU, so a group mixing both kinds of peer stays correct.
 *
 * Errors. Functions returning int return 0 or a negative MORI_E* code: MORI_EINVAL (PE out of
 * range, bad op, no state), MORI_ERANGE (a symmetric range outside the heap), MORI_ENOTSUP (a PE
 * to reach through the proxy when this PE has no ring), and, from every wait (wait_until,
 * barriers, quiet, a full ring), MORI_EPEERDEAD / MORI_ECANCELED / MORI_ETIMEDOUT once morid
 * sets the abort word. Nothing on the GPU waits forever while the abort word can end it.
 * Functions returning a value (fetching atomics, _g, wait_until_greater_than,
 * signal_wait_until) return the last value seen, or 0, on error: mori_shmem_status() says why.
 *
 * qp_id arguments (ROCm/mori's queue pair) are accepted and ignored: no NIC is driven here.
 *
 * The whole API is one table, MORI_SHMEM_API(X) below: each row gives the return type, the name
 * (after mori_shmem_), the C++ parameters (typed pointers), the ABI parameters (pointers as
 * uint64_t, as MORI-IR's bitcode exports them) and the body. This header instantiates it as
 * inline C++ device functions; kernels/shmem.cu instantiates it as the extern "C" wrapper set.
 */
#ifndef MORI_SHMEM_CUH
#define MORI_SHMEM_CUH
#include "prims.cuh"

#ifdef MORI_SHMEM_STATE_EXTERN
extern __device__ struct mori_shmem_state *mori_shmem_state_ptr;
#else
__device__ struct mori_shmem_state *mori_shmem_state_ptr;
#endif

/* How many polls of a wait between two reads of the abort word. That word is in host memory: a
 * read crosses PCIe, and thousands of waiting threads (an EP combine's reduce grid: every block's
 * waiters) reading it often starve the copy engines' DMA to and from the host, where morid stages
 * VRAM for the network (docs/benchmarks.md has the EP combine across morids measured at 128 and
 * at 4096). A poll of a VRAM word is ~0.5 us, so an abort is still seen within a few ms. */
#define MORI_SHMEM_ABORT_POLL 4096u

namespace mori_shmem_impl {
typedef const struct mori_shmem_state *state;
enum scope { THREAD, WARP, BLOCK };

/* ---- the calling group: its threads, their index, synchronisation, a broadcast ---- */
template <scope S> MORI_DEVICE unsigned tid(void)
{
	return S == THREAD ? 0 : S == WARP ? mori_block_thread() % MORI_WARP_SIZE : mori_block_thread();
}
template <scope S> MORI_DEVICE unsigned nthr(void)
{
	return S == THREAD ? 1 : S == WARP ? MORI_WARP_SIZE : mori_block_threads();
}
template <scope S> MORI_DEVICE void group_sync(void)
{
	if (S == WARP)
		mori_sync_warp();
	else if (S == BLOCK)
		__syncthreads();
}
/* The leader's (tid 0's) v in every thread of the group; every thread calls it. */
template <scope S> MORI_DEVICE int group_bcast(int v)
{
	if (S == THREAD)
		return v;
	if (S == WARP)
		return mori_warp_bcast(v, 0);
	__shared__ int word;
	if (tid<S>() == 0)
		word = v;
	__syncthreads();
	int r = word;
	__syncthreads();
	return r;
}
/* Any thread's non-zero rc (the first one seen) in every thread of the group. */
template <scope S> MORI_DEVICE int group_any(int rc)
{
	if (S == THREAD)
		return rc;
	if (S == BLOCK && !__syncthreads_or(rc))
		return 0; /* the common case: one barrier */
	if (S == WARP) {
		for (int l = 0; l < MORI_WARP_SIZE; l++) {
			int r = mori_warp_bcast(rc, l);
			if (r)
				return r;
		}
		return 0;
	}
	__shared__ int word;
	if (tid<S>() == 0)
		word = 0;
	__syncthreads();
	if (rc)
		word = rc; /* racing writers: any of them will do */
	__syncthreads();
	int r = word;
	__syncthreads();
	return r;
}

/* ---- state, abort, addresses ----
 * The state does not change while kernels run: its fields are read through the read-only path,
 * so a wait's or a signal's fence does not send the next call back to L2 for them. */
MORI_DEVICE uint64_t heap_base(state st) { return mori_load_const(&st->heap_base); }
MORI_DEVICE uint64_t heap_size(state st) { return mori_load_const(&st->heap_size); }
MORI_DEVICE int st_my_pe(state st) { return mori_load_const(&st->my_pe); }
MORI_DEVICE int st_n_pes(state st) { return mori_load_const(&st->n_pes); }
MORI_DEVICE struct mori_shmem_ctrl *ctrl(state st)
{
	return (struct mori_shmem_ctrl *)mori_load_const((const uint64_t *)&st->ctrl);
}
MORI_DEVICE struct mori_shmem_preq *ring(state st)
{
	return (struct mori_shmem_preq *)mori_load_const((const uint64_t *)&st->ring);
}
MORI_DEVICE uint64_t peer_base(state st, int pe)
{
	const uint64_t *pb = (const uint64_t *)mori_load_const((const uint64_t *)&st->peer_base);
	return mori_load_const(pb + pe);
}
MORI_DEVICE uint8_t *reserved(state st, unsigned off) { return (uint8_t *)heap_base(st) + off; }
/* The scopes the state decided: towards pe (true: GPU scope, its heap is on this GPU), and of
 * waits on this PE's heap, quiet and fence (true: every PE is on this GPU). */
MORI_DEVICE bool gpu_scope_to(state st, int pe)
{
	const int32_t *t = (const int32_t *)mori_load_const((const uint64_t *)&st->peer_scope);
	return t && mori_load_const(t + pe) == MORI_SHMEM_SCOPE_GPU;
}
MORI_DEVICE bool gpu_scope_here(state st)
{
	return st && mori_load_const(&st->wait_scope) == MORI_SHMEM_SCOPE_GPU;
}

/* 0, or the MORI_E* code of the abort morid set (the group is dead or torn down). */
MORI_DEVICE int abort_code(state st)
{
	struct mori_shmem_ctrl *c = st ? ctrl(st) : nullptr;
	return c ? mori_abort_code(c) : 0;
}
/* Polls ready() until it holds (0) or the abort word is set (its code), which it reads every
 * MORI_SHMEM_ABORT_POLL polls only. */
template <typename Ready> MORI_DEVICE int wait_abortable(state st, Ready ready)
{
	return mori_wait_until(MORI_SHMEM_ABORT_POLL, ready, [&](unsigned) { return abort_code(st); });
}

MORI_DEVICE int check_pe(state st, int pe)
{
	return st && (unsigned)pe < (unsigned)st_n_pes(st) ? 0 : MORI_EINVAL;
}
/* The heap offset of [p, p + len) in this PE's heap, or MORI_ERANGE. */
MORI_DEVICE int heap_off(state st, const void *p, uint64_t len, uint64_t *off)
{
	uint64_t o = (uint64_t)p - heap_base(st); /* wraps above heap_size when p is below */
	if (o > heap_size(st) || len > heap_size(st) - o)
		return MORI_ERANGE;
	*off = o;
	return 0;
}
/* pe's address of heap offset off where this PE maps pe's heap, else NULL (the proxy). */
MORI_DEVICE uint8_t *peer_addr(state st, uint64_t off, int pe)
{
	uint64_t b = pe == st_my_pe(st) ? heap_base(st) : peer_base(st, pe);
	return b ? (uint8_t *)(b + off) : nullptr;
}

/* ---- copies: the group's threads interleaved (mori/device/prims.cuh) ---- */
MORI_DEVICE void copy_bytes(uint8_t *dst, const uint8_t *src, uint64_t len, unsigned t, unsigned nt)
{
	mori_copy_bytes<MORI_COPY_PLAIN>(dst, src, len, t, nt);
}

/* ---- the proxy ring (mori/device_host/shmem_layout.h) ----
 * Claim a sequence number on ctrl->head, wait (abort-checked) until morid has completed the
 * request that used the slot one lap earlier, write the entry's last 56 bytes, then publish its
 * first 8 (ready = seq + 1, op, amo, width) with one release store at system scope. */
struct preq {
	uint16_t op;
	uint8_t amo, width;
	int pe;
	uint64_t dst, src, len, sig, value, cmp;
};
MORI_DEVICE int proxy_post(state st, const preq &r, uint64_t *seq_out)
{
	struct mori_shmem_ctrl *c = ctrl(st);
	if (!c || !ring(st))
		return MORI_ENOTSUP;
	uint32_t n = *(volatile uint32_t *)&c->ring_entries;
	if (!n || (n & (n - 1)))
		return MORI_ENOTSUP;
	*(volatile uint64_t *)reserved(st, MORI_SHMEM_OFF_PROXY_USED) = 1;
	uint64_t seq = mori_atomic_add_sys((uint64_t *)&c->head, (uint64_t)1);
	int rc = wait_abortable(st, [&] { return seq - mori_relaxed_load_sys(&c->done) < n; });
	if (rc)
		return rc; /* morid stopped serving: the group is aborting anyway */
	mori_acquire_after_wait_sys(); /* morid has copied the old entry out before we overwrite it */
	volatile uint64_t *w = (volatile uint64_t *)&ring(st)[seq & (n - 1)];
	w[1] = (uint32_t)r.pe;
	w[2] = r.dst;
	w[3] = r.src;
	w[4] = r.len;
	w[5] = r.sig;
	w[6] = r.value;
	w[7] = r.cmp;
	uint64_t first = (uint64_t)(uint32_t)(seq + 1) | (uint64_t)r.op << 32 | (uint64_t)r.amo << 48 |
			 (uint64_t)r.width << 56;
	mori_release_store_sys((uint64_t *)w, first);
	*seq_out = seq;
	return 0;
}
/* Wait (abort-checked) until morid completed request seq; then what it wrote (a get's bytes, a
 * fetched value) is visible here. Its first failure, if any, is the result. */
MORI_DEVICE int proxy_wait(state st, uint64_t seq)
{
	struct mori_shmem_ctrl *c = ctrl(st);
	int rc = wait_abortable(st, [&] { return mori_relaxed_load_sys(&c->done) > seq; });
	if (rc)
		return rc;
	mori_acquire_after_wait_sys();
	return *(volatile int32_t *)&c->error;
}
/* Post one request for the group: synchronise (so every thread's earlier writes, to the source
 * too, precede the publish), the leader posts (and waits when asked), all get its code. */
template <scope S> MORI_DEVICE int proxy_group(state st, const preq &r, bool wait)
{
	group_sync<S>();
	int rc = 0;
	if (tid<S>() == 0) {
		uint64_t seq;
		rc = proxy_post(st, r, &seq);
		if (!rc && wait)
			rc = proxy_wait(st, seq);
	}
	return group_bcast<S>(rc);
}

/* The proxy's part of quiet: when this PE ever used the proxy, every request posted before (by
 * any thread) has completed. */
MORI_DEVICE int quiet_proxy(state st)
{
	if (!st)
		return MORI_EINVAL;
	if (!ctrl(st) || !*(volatile uint64_t *)reserved(st, MORI_SHMEM_OFF_PROXY_USED))
		return 0;
	struct mori_shmem_ctrl *c = ctrl(st);
	if (mori_relaxed_load_sys(&c->head) == mori_acquire_load_sys((const uint64_t *)&c->done))
		return *(volatile int32_t *)&c->error;
	preq r = {MORI_SHMEM_OP_QUIET, 0, 0, st_my_pe(st), 0, 0, 0, 0, 0, 0};
	uint64_t seq;
	int rc = proxy_post(st, r, &seq);
	return rc ? rc : proxy_wait(st, seq);
}
/* quiet: this thread's direct stores are performed at the wait scope (system-wide unless every
 * PE is on this GPU), and the proxy's part. */
MORI_DEVICE int quiet(state st)
{
	mori_complete_stores_scoped(gpu_scope_here(st));
	return quiet_proxy(st);
}
MORI_DEVICE int fence(state st)
{
	mori_complete_stores_scoped(gpu_scope_here(st)); /* this thread's direct stores, in order */
	if (!st)
		return MORI_EINVAL;
	/* morid carries consecutive puts of the ring as one transfer whose parts land in any order:
	 * a fence in the ring ends that batch (posted, not waited for). */
	if (!ctrl(st) || !*(volatile uint64_t *)reserved(st, MORI_SHMEM_OFF_PROXY_USED))
		return 0;
	preq r = {MORI_SHMEM_OP_FENCE, 0, 0, st_my_pe(st), 0, 0, 0, 0, 0, 0};
	uint64_t seq;
	return proxy_post(st, r, &seq);
}

/* ---- puts and gets ---- */
template <scope S> MORI_DEVICE int putmem_nbi(state st, void *dest, const void *source, uint64_t bytes, int pe)
{
	uint64_t off, soff;
	int rc = check_pe(st, pe);
	if (rc || (rc = heap_off(st, dest, bytes, &off)))
		return rc;
	uint8_t *r = peer_addr(st, off, pe);
	if (r) {
		group_sync<S>(); /* the group's own writes to source precede every thread's copy */
		copy_bytes(r, (const uint8_t *)source, bytes, tid<S>(), nthr<S>());
		return 0; /* nbi: source may be reused after quiet (which every thread calls) */
	}
	if ((rc = heap_off(st, source, bytes, &soff)))
		return rc;
	preq q = {MORI_SHMEM_OP_PUT, 0, 0, pe, off, soff, bytes, 0, 0, 0};
	return proxy_group<S>(st, q, false);
}
/* blocking: the bytes are here, for every thread of the group, when it returns. */
template <scope S>
MORI_DEVICE int getmem(state st, void *dest, const void *source, uint64_t bytes, int pe, bool blocking)
{
	uint64_t off, doff;
	int rc = check_pe(st, pe);
	if (rc || (rc = heap_off(st, source, bytes, &off)))
		return rc;
	const uint8_t *r = peer_addr(st, off, pe);
	if (r) {
		group_sync<S>();
		copy_bytes((uint8_t *)dest, r, bytes, tid<S>(), nthr<S>());
		if (blocking)
			group_sync<S>(); /* every byte is here, for every thread of the group */
		return 0;
	}
	if ((rc = heap_off(st, dest, bytes, &doff)))
		return rc;
	preq q = {MORI_SHMEM_OP_GET, 0, 0, pe, doff, off, bytes, 0, 0, 0};
	return proxy_group<S>(st, q, blocking);
}
/* The data, then (after it, for every observer) sig_op (SET or ADD) of value on pe's word. */
template <scope S>
MORI_DEVICE int put_signal(state st, void *dest, const void *source, uint64_t bytes, uint64_t *sig, uint64_t value,
			   int sig_op, int pe)
{
	uint64_t off, soff, sig_off;
	int rc = check_pe(st, pe);
	if (rc || (rc = heap_off(st, dest, bytes, &off)) || (rc = heap_off(st, sig, 8, &sig_off)))
		return rc;
	if (sig_op != MORI_SHMEM_SIGNAL_SET && sig_op != MORI_SHMEM_SIGNAL_ADD)
		return MORI_EINVAL;
	uint8_t *r = peer_addr(st, off, pe);
	if (r) {
		group_sync<S>();
		copy_bytes(r, (const uint8_t *)source, bytes, tid<S>(), nthr<S>());
		group_sync<S>(); /* every thread's bytes precede the leader's signal */
		if (tid<S>() == 0) {
			uint64_t *rs = (uint64_t *)peer_addr(st, sig_off, pe);
			bool gpu = gpu_scope_to(st, pe);
			if (sig_op == MORI_SHMEM_SIGNAL_SET)
				mori_release_store_scoped(rs, value, gpu);
			else
				mori_release_add_scoped(rs, value, gpu);
		}
		return 0;
	}
	if ((rc = heap_off(st, source, bytes, &soff)))
		return rc;
	preq q = {MORI_SHMEM_OP_PUT_SIGNAL, (uint8_t)sig_op, 8, pe, off, soff, bytes, sig_off, value, 0};
	return proxy_group<S>(st, q, false);
}
/* Immediate put of 1, 2, 4 or 8 bytes held at val (a register copy: val need not stay valid).
 * Through the proxy it is an AMO_SET of that width (4 or 8 bytes only). */
MORI_DEVICE int put_imm(state st, void *dest, const void *val, uint64_t bytes, int pe)
{
	uint64_t off;
	int rc = check_pe(st, pe);
	if (rc || (rc = heap_off(st, dest, bytes, &off)))
		return rc;
	if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8)
		return MORI_EINVAL;
	uint8_t *r = peer_addr(st, off, pe);
	uint64_t v = 0;
	for (uint64_t i = 0; i < bytes; i++)
		v |= (uint64_t)((const uint8_t *)val)[i] << (8 * i);
	if (r) {
		switch (bytes) {
		case 1: *(volatile uint8_t *)r = (uint8_t)v; break;
		case 2: *(volatile uint16_t *)r = (uint16_t)v; break;
		case 4: *(volatile uint32_t *)r = (uint32_t)v; break;
		default: *(volatile uint64_t *)r = v; break;
		}
		return 0;
	}
	if (bytes < 4)
		return MORI_ENOTSUP;
	preq q = {MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_SET, (uint8_t)bytes, pe, off, 0, 0, 0, v, 0};
	return proxy_group<THREAD>(st, q, false);
}
template <typename T> MORI_DEVICE int p(state st, T *dest, T v, int pe) { return put_imm(st, dest, &v, sizeof(T), pe); }

/* ---- atomics ---- */
/* ROCm/mori's atomic type -> the proxy's AMO code (with MORI_SHMEM_AMO_FETCH when it fetches),
 * or 0 for an unknown type. */
MORI_DEVICE int amo_code(int op)
{
	switch (op) {
	case MORI_SHMEM_ATOMIC_INC: return MORI_SHMEM_AMO_INC;
	case MORI_SHMEM_ATOMIC_SET: case MORI_SHMEM_SIGNAL_SET: return MORI_SHMEM_AMO_SET;
	case MORI_SHMEM_ATOMIC_ADD: case MORI_SHMEM_SIGNAL_ADD: return MORI_SHMEM_AMO_ADD;
	case MORI_SHMEM_ATOMIC_AND: return MORI_SHMEM_AMO_AND;
	case MORI_SHMEM_ATOMIC_OR: return MORI_SHMEM_AMO_OR;
	case MORI_SHMEM_ATOMIC_XOR: return MORI_SHMEM_AMO_XOR;
	case MORI_SHMEM_ATOMIC_FETCH: return MORI_SHMEM_AMO_OR | MORI_SHMEM_AMO_FETCH; /* or 0 */
	case MORI_SHMEM_ATOMIC_FETCH_INC: return MORI_SHMEM_AMO_INC | MORI_SHMEM_AMO_FETCH;
	case MORI_SHMEM_ATOMIC_FETCH_ADD: return MORI_SHMEM_AMO_ADD | MORI_SHMEM_AMO_FETCH;
	case MORI_SHMEM_ATOMIC_FETCH_AND: return MORI_SHMEM_AMO_AND | MORI_SHMEM_AMO_FETCH;
	case MORI_SHMEM_ATOMIC_FETCH_OR: return MORI_SHMEM_AMO_OR | MORI_SHMEM_AMO_FETCH;
	case MORI_SHMEM_ATOMIC_FETCH_XOR: return MORI_SHMEM_AMO_XOR | MORI_SHMEM_AMO_FETCH;
	case MORI_SHMEM_ATOMIC_SWAP: return MORI_SHMEM_AMO_SWAP | MORI_SHMEM_AMO_FETCH;
	case MORI_SHMEM_ATOMIC_COMPARE_SWAP: return MORI_SHMEM_AMO_CSWAP | MORI_SHMEM_AMO_FETCH;
	default: return 0;
	}
}
/* The AMO on a word this PE maps (system scope, relaxed); the old value. */
template <typename T> MORI_DEVICE T amo_direct(T *w, int code, T v, T cmp)
{
	switch (code & ~MORI_SHMEM_AMO_FETCH) {
	case MORI_SHMEM_AMO_INC: return mori_atomic_add_sys(w, (T)1);
	case MORI_SHMEM_AMO_ADD: return mori_atomic_add_sys(w, v);
	case MORI_SHMEM_AMO_AND: return mori_atomic_and_sys(w, v);
	case MORI_SHMEM_AMO_OR: return mori_atomic_or_sys(w, v);
	case MORI_SHMEM_AMO_XOR: return mori_atomic_xor_sys(w, v);
	case MORI_SHMEM_AMO_CSWAP: return mori_atomic_cas_sys(w, cmp, v);
	default: return mori_atomic_swap_sys(w, v); /* SET, SWAP */
	}
}
/* A fetching AMO through the proxy: hold a result slot of this PE's reserved area, post with
 * src naming it, wait for completion, read the value, give the slot back. */
template <typename T> MORI_DEVICE int amo_proxy_fetch(state st, preq &q, T *out)
{
	uint64_t *ticket = (uint64_t *)reserved(st, MORI_SHMEM_OFF_AMO_TICKET);
	unsigned i = (unsigned)(atomicAdd((unsigned long long *)ticket, 1ull) % MORI_SHMEM_AMO_SLOTS);
	uint64_t *busy = (uint64_t *)reserved(st, MORI_SHMEM_OFF_AMO_BUSY) + i;
	int rc = wait_abortable(st, [&] { return atomicCAS((unsigned long long *)busy, 0ull, 1ull) == 0ull; });
	if (rc)
		return rc;
	q.src = MORI_SHMEM_OFF_AMO_VALUE + 8ull * i;
	uint64_t seq;
	if (!(rc = proxy_post(st, q, &seq)) && !(rc = proxy_wait(st, seq)))
		*out = (T)mori_acquire_load_sys((const uint64_t *)reserved(st, (unsigned)q.src));
	mori_release_store_gpu(busy, 0); /* after the read */
	return rc;
}
/* The generic atomic (thread scope); *old gets the previous value when the op fetches. */
template <typename T> MORI_DEVICE int amo(state st, void *dest, int op, T v, T cmp, int pe, T *old)
{
	uint64_t off;
	int rc = check_pe(st, pe);
	if (rc || (rc = heap_off(st, dest, sizeof(T), &off)))
		return rc;
	int code = amo_code(op);
	if (!code)
		return MORI_EINVAL;
	if (op == MORI_SHMEM_ATOMIC_FETCH)
		v = 0; /* a fetch is an OR of nothing */
	T *w = (T *)peer_addr(st, off, pe);
	if (w) {
		T o = amo_direct(w, code, v, cmp);
		if (old)
			*old = o;
		return 0;
	}
	preq q = {MORI_SHMEM_OP_AMO, (uint8_t)code, (uint8_t)sizeof(T), pe, off, 0, 0, 0, (uint64_t)v, (uint64_t)cmp};
	if (!(code & MORI_SHMEM_AMO_FETCH)) {
		uint64_t seq;
		return proxy_post(st, q, &seq);
	}
	T o = 0;
	rc = amo_proxy_fetch(st, q, &o);
	if (old)
		*old = o;
	return rc;
}
/* Fetching form for the API table: the old value (0 on error; mori_shmem_status says why). */
template <typename T> MORI_DEVICE T amo_fetch(state st, void *dest, int op, T v, T cmp, int pe)
{
	T old = 0;
	amo<T>(st, dest, op, v, cmp, pe, &old);
	return old;
}
/* A single-element get: a load where pe is mapped, else a fetching AMO (OR 0) of its 4 or 8
 * bytes through the proxy. 0 on error. */
template <typename T> MORI_DEVICE T g(state st, const T *source, int pe)
{
	uint64_t off;
	if (check_pe(st, pe) || heap_off(st, source, sizeof(T), &off))
		return (T)0;
	const T *r = (const T *)peer_addr(st, off, pe);
	if (r)
		return *(const volatile T *)r;
	union {
		T v;
		uint32_t w4;
		uint64_t w8;
	} u;
	u.w8 = 0;
	if (sizeof(T) == 8)
		u.w8 = amo_fetch<uint64_t>(st, (void *)source, MORI_SHMEM_ATOMIC_FETCH, 0, 0, pe);
	else if (sizeof(T) == 4)
		u.w4 = amo_fetch<uint32_t>(st, (void *)source, MORI_SHMEM_ATOMIC_FETCH, 0, 0, pe);
	return u.v;
}
MORI_DEVICE int amo_size(state st, void *dest, const void *val, uint64_t bytes, int op, int pe)
{
	if (bytes == 4)
		return amo<uint32_t>(st, dest, op, *(const uint32_t *)val, 0, pe, nullptr);
	if (bytes == 8)
		return amo<uint64_t>(st, dest, op, *(const uint64_t *)val, 0, pe, nullptr);
	return MORI_EINVAL;
}

/* ---- waits on this PE's own memory ---- */
template <typename T> MORI_DEVICE bool cmp_true(T v, int cmp, T x)
{
	switch (cmp) {
	case MORI_SHMEM_CMP_EQ: return v == x;
	case MORI_SHMEM_CMP_NE: return v != x;
	case MORI_SHMEM_CMP_GT: return v > x;
	case MORI_SHMEM_CMP_GE: return v >= x;
	case MORI_SHMEM_CMP_LT: return v < x;
	default: return v <= x; /* LE */
	}
}
/* An acquire load of a word of this PE's heap, at the scope of its writers (gpu: all on this GPU). */
template <typename T> MORI_DEVICE T load_acquire(const T *p, bool gpu)
{
	if (sizeof(T) == 8)
		return (T)mori_acquire_load_scoped((const uint64_t *)p, gpu);
	return (T)mori_acquire_load_scoped((const uint32_t *)p, gpu);
}
template <typename T> MORI_DEVICE T load_acquire(state st, const T *p) { return load_acquire(p, gpu_scope_here(st)); }
/* Until *ivar cmp x holds (0), or the abort word is set (its code); *seen: the last value read.
 * gpu: every writer of *ivar runs on this GPU (GPU-scope acquires). */
template <typename T> MORI_DEVICE int wait_until_scoped(state st, T *ivar, int cmp, T x, T *seen, bool gpu)
{
	if ((unsigned)cmp > MORI_SHMEM_CMP_LE)
		return MORI_EINVAL;
	/* Every poll an acquire load: relaxed polls and one acquire fence after them cost more a
	 * wait (a fence orders everything, an acquire load only what follows it). */
	T v;
	int rc = wait_abortable(st, [&] {
		v = load_acquire(ivar, gpu);
		return cmp_true(v, cmp, x);
	});
	if (!gpu)
		mori_acquire_after_wait_sys();
	if (seen)
		*seen = v;
	return rc;
}
template <typename T> MORI_DEVICE int wait_until(state st, T *ivar, int cmp, T x, T *seen)
{
	return wait_until_scoped(st, ivar, cmp, x, seen, gpu_scope_here(st));
}
template <typename T> MORI_DEVICE T wait_value(state st, T *ivar, int cmp, T x)
{
	T v = 0;
	wait_until(st, ivar, cmp, x, &v);
	return v;
}

/* ---- barriers ----
 * Generation e = this PE's BAR_EPOCH + 1. Each PE writes e into BAR_FLAG[my_pe] of every PE
 * (a release store, or a proxy AMO_SET after the ring's earlier requests), then waits until its
 * own BAR_FLAG[q] >= e for every q. barrier_all first completes this PE's puts (quiet), so they
 * are visible everywhere before any PE leaves; sync_all does not. The group's threads share the
 * PEs among them. Collective: every PE calls the same sequence, one group (thread or block) per
 * PE at a time. */
template <scope S> MORI_DEVICE int barrier(state st, bool complete_puts)
{
	if (!st)
		return MORI_EINVAL;
	unsigned t = tid<S>(), nt = nthr<S>();
	volatile uint64_t *epoch = (volatile uint64_t *)reserved(st, MORI_SHMEM_OFF_BAR_EPOCH);
	uint64_t *flag = (uint64_t *)reserved(st, MORI_SHMEM_OFF_BAR_FLAG);
	group_sync<S>();
	uint64_t e = *epoch + 1;
	int rc = 0;
	/* Completing the direct puts needs no fence of its own: the flags' release stores below come
	 * after this synchronisation and are cumulative over every thread's earlier stores. */
	if (t == 0 && complete_puts)
		rc = quiet_proxy(st);
	group_sync<S>(); /* every thread has read the epoch; the proxy's puts are complete */
	if (t == 0)
		*epoch = e;
	for (int q = (int)t; q < st_n_pes(st) && !rc; q += (int)nt) {
		uint64_t *w = (uint64_t *)peer_addr(st, MORI_SHMEM_OFF_BAR_FLAG + 8ull * st_my_pe(st), q);
		if (w) {
			mori_release_store_scoped(w, e, gpu_scope_to(st, q));
		} else {
			preq r = {MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_SET, 8, q, MORI_SHMEM_OFF_BAR_FLAG + 8ull * st_my_pe(st),
				  0, 0, 0, e, 0};
			uint64_t seq;
			rc = proxy_post(st, r, &seq);
		}
	}
	/* flag[q] is written by q only: acquired at q's scope */
	for (int q = (int)t; q < st_n_pes(st) && !rc; q += (int)nt)
		rc = wait_until_scoped<uint64_t>(st, flag + q, MORI_SHMEM_CMP_GE, e, nullptr, gpu_scope_to(st, q));
	return group_any<S>(rc);
}

MORI_DEVICE int my_pe(state st) { return st ? st_my_pe(st) : -1; }
MORI_DEVICE int n_pes(state st) { return st ? st_n_pes(st) : 0; }
/* pe's address of the object at dest (an address in my_pe's heap), or 0 (not mapped, outside). */
MORI_DEVICE uint64_t ptr_p2p(state st, uint64_t dest, int me, int pe)
{
	if (me == pe)
		return dest;
	uint64_t off;
	if (check_pe(st, pe) || heap_off(st, (const void *)dest, 1, &off))
		return 0;
	return (uint64_t)peer_addr(st, off, pe);
}
MORI_DEVICE int status(state st)
{
	int rc = abort_code(st);
	return rc ? rc : st && ctrl(st) ? *(volatile int32_t *)&ctrl(st)->error : st ? 0 : MORI_EINVAL;
}
} /* namespace mori_shmem_impl */

#define MORI_SHMEM_ST ((mori_shmem_impl::state)mori_load_const((const uint64_t *)&mori_shmem_state_ptr))
#define MORI_SHMEM_I mori_shmem_impl

/* ---- the API table ----
 * X(return type, name after mori_shmem_, (C++ parameters), (ABI parameters), (body)). Bodies cast
 * their arguments C-style, so that they compile against either parameter list. */
#define MORI_SHMEM_API_SCOPE(X, SC, S)                                                                       \
	X(int, putmem_nbi_##SC, (void *dest, const void *source, size_t bytes, int pe, int qp_id = 0),        \
	  (uint64_t dest, uint64_t source, uint64_t bytes, int pe, int qp_id),                              \
	  (MORI_SHMEM_I::putmem_nbi<MORI_SHMEM_I::S>(MORI_SHMEM_ST, (void *)dest, (const void *)source, bytes, pe)))  \
	X(int, getmem_nbi_##SC, (void *dest, const void *source, size_t bytes, int pe, int qp_id = 0),        \
	  (uint64_t dest, uint64_t source, uint64_t bytes, int pe, int qp_id),                              \
	  (MORI_SHMEM_I::getmem<MORI_SHMEM_I::S>(MORI_SHMEM_ST, (void *)dest, (const void *)source, bytes, pe, false))) \
	X(int, getmem_##SC, (void *dest, const void *source, size_t bytes, int pe, int qp_id = 0),            \
	  (uint64_t dest, uint64_t source, uint64_t bytes, int pe, int qp_id),                              \
	  (MORI_SHMEM_I::getmem<MORI_SHMEM_I::S>(MORI_SHMEM_ST, (void *)dest, (const void *)source, bytes, pe, true))) \
	X(int, putmem_nbi_signal_##SC,                                                                       \
	  (void *dest, const void *source, size_t bytes, void *sig_addr, uint64_t signal_value, int signal_op, \
	   int pe, int qp_id = 0),                                                                           \
	  (uint64_t dest, uint64_t source, uint64_t bytes, uint64_t sig_addr, uint64_t signal_value,         \
	   int signal_op, int pe, int qp_id),                                                                \
	  (MORI_SHMEM_I::put_signal<MORI_SHMEM_I::S>(MORI_SHMEM_ST, (void *)dest, (const void *)source, bytes,   \
						     (uint64_t *)sig_addr, signal_value, signal_op, pe)))    \
	MORI_SHMEM_API_TYPED(X, SC, S, uint32, uint32_t)                                                     \
	MORI_SHMEM_API_TYPED(X, SC, S, uint64, uint64_t)                                                     \
	MORI_SHMEM_API_TYPED(X, SC, S, float, float)                                                         \
	MORI_SHMEM_API_TYPED(X, SC, S, double, double)

#define MORI_SHMEM_API_TYPED(X, SC, S, TN, T)                                                                \
	X(int, put_##TN##_nbi_##SC, (T *dest, const T *source, size_t nelems, int pe, int qp_id = 0),       \
	  (uint64_t dest, uint64_t source, uint64_t nelems, int pe, int qp_id),                              \
	  (MORI_SHMEM_I::putmem_nbi<MORI_SHMEM_I::S>(MORI_SHMEM_ST, (void *)dest, (const void *)source,      \
						     nelems * sizeof(T), pe)))                               \
	X(int, get_##TN##_nbi_##SC, (T *dest, const T *source, size_t nelems, int pe, int qp_id = 0),       \
	  (uint64_t dest, uint64_t source, uint64_t nelems, int pe, int qp_id),                              \
	  (MORI_SHMEM_I::getmem<MORI_SHMEM_I::S>(MORI_SHMEM_ST, (void *)dest, (const void *)source,          \
						 nelems * sizeof(T), pe, false)))                            \
	X(int, get_##TN##_##SC, (T *dest, const T *source, size_t nelems, int pe, int qp_id = 0),           \
	  (uint64_t dest, uint64_t source, uint64_t nelems, int pe, int qp_id),                              \
	  (MORI_SHMEM_I::getmem<MORI_SHMEM_I::S>(MORI_SHMEM_ST, (void *)dest, (const void *)source,          \
						 nelems * sizeof(T), pe, true)))

/* Immediate puts (p) and single-element gets (g). */
#define MORI_SHMEM_API_PG(X, TN, T, AT)                                                                      \
	X(int, TN##_p, (T *dest, T val, int pe, int qp_id = 0), (uint64_t dest, AT val, int pe, int qp_id),  \
	  (MORI_SHMEM_I::p<T>(MORI_SHMEM_ST, (T *)dest, (T)val, pe)))                                       \
	X(T, TN##_g, (const T *source, int pe), (uint64_t source, int pe),                                  \
	  (MORI_SHMEM_I::g<T>(MORI_SHMEM_ST, (const T *)source, pe)))

/* ROCm/mori's atomics for one type (T as the API sees it, U the unsigned word). */
#define MORI_SHMEM_API_AMO_ROCM(X, TN, T, U)                                                                 \
	X(int, atomic_##TN##_nonfetch_thread, (T *dest, T val, int amo_type, int pe, int qp_id = 0),        \
	  (uint64_t dest, T val, int amo_type, int pe, int qp_id),                                          \
	  (MORI_SHMEM_I::amo<U>(MORI_SHMEM_ST, (void *)dest, amo_type, (U)val, (U)0, pe, nullptr)))        \
	X(T, atomic_##TN##_fetch_thread, (T *dest, T val, T compare, int amo_type, int pe, int qp_id = 0), \
	  (uint64_t dest, T val, T compare, int amo_type, int pe, int qp_id),                               \
	  ((T)MORI_SHMEM_I::amo_fetch<U>(MORI_SHMEM_ST, (void *)dest, amo_type, (U)val, (U)compare, pe)))  \
	X(int, TN##_atomic_add_thread, (T *dest, T val, int pe, int qp_id = 0),                             \
	  (uint64_t dest, T val, int pe, int qp_id),                                                        \
	  (MORI_SHMEM_I::amo<U>(MORI_SHMEM_ST, (void *)dest, MORI_SHMEM_ATOMIC_ADD, (U)val, (U)0, pe, nullptr))) \
	X(T, TN##_atomic_fetch_add_thread, (T *dest, T val, int pe, int qp_id = 0),                         \
	  (uint64_t dest, T val, int pe, int qp_id),                                                        \
	  ((T)MORI_SHMEM_I::amo_fetch<U>(MORI_SHMEM_ST, (void *)dest, MORI_SHMEM_ATOMIC_FETCH_ADD, (U)val, (U)0, pe)))

/* OpenSHMEM 1.5's atomics and point-to-point synchronisation for one type. */
#define MORI_SHMEM_AMO_NF(X, TN, T, U, OP, CODE)                                                            \
	X(int, TN##_atomic_##OP, (T *dest, T val, int pe), (uint64_t dest, T val, int pe),                  \
	  (MORI_SHMEM_I::amo<U>(MORI_SHMEM_ST, (void *)dest, CODE, (U)val, (U)0, pe, nullptr)))
#define MORI_SHMEM_AMO_F(X, TN, T, U, OP, CODE)                                                             \
	X(T, TN##_atomic_##OP, (T *dest, T val, int pe), (uint64_t dest, T val, int pe),                    \
	  ((T)MORI_SHMEM_I::amo_fetch<U>(MORI_SHMEM_ST, (void *)dest, CODE, (U)val, (U)0, pe)))
#define MORI_SHMEM_API_AMO_SHMEM(X, TN, T, U)                                                                \
	MORI_SHMEM_AMO_NF(X, TN, T, U, set, MORI_SHMEM_ATOMIC_SET)                                           \
	MORI_SHMEM_AMO_NF(X, TN, T, U, add, MORI_SHMEM_ATOMIC_ADD)                                           \
	MORI_SHMEM_AMO_NF(X, TN, T, U, and, MORI_SHMEM_ATOMIC_AND)                                           \
	MORI_SHMEM_AMO_NF(X, TN, T, U, or, MORI_SHMEM_ATOMIC_OR)                                             \
	MORI_SHMEM_AMO_NF(X, TN, T, U, xor, MORI_SHMEM_ATOMIC_XOR)                                           \
	X(int, TN##_atomic_inc, (T *dest, int pe), (uint64_t dest, int pe),                                 \
	  (MORI_SHMEM_I::amo<U>(MORI_SHMEM_ST, (void *)dest, MORI_SHMEM_ATOMIC_INC, (U)0, (U)0, pe, nullptr))) \
	MORI_SHMEM_AMO_F(X, TN, T, U, fetch_add, MORI_SHMEM_ATOMIC_FETCH_ADD)                                \
	MORI_SHMEM_AMO_F(X, TN, T, U, fetch_and, MORI_SHMEM_ATOMIC_FETCH_AND)                                \
	MORI_SHMEM_AMO_F(X, TN, T, U, fetch_or, MORI_SHMEM_ATOMIC_FETCH_OR)                                  \
	MORI_SHMEM_AMO_F(X, TN, T, U, fetch_xor, MORI_SHMEM_ATOMIC_FETCH_XOR)                                \
	MORI_SHMEM_AMO_F(X, TN, T, U, swap, MORI_SHMEM_ATOMIC_SWAP)                                          \
	X(T, TN##_atomic_fetch_inc, (T *dest, int pe), (uint64_t dest, int pe),                             \
	  ((T)MORI_SHMEM_I::amo_fetch<U>(MORI_SHMEM_ST, (void *)dest, MORI_SHMEM_ATOMIC_FETCH_INC, (U)0, (U)0, pe))) \
	X(T, TN##_atomic_fetch, (const T *source, int pe), (uint64_t source, int pe),                       \
	  ((T)MORI_SHMEM_I::amo_fetch<U>(MORI_SHMEM_ST, (void *)source, MORI_SHMEM_ATOMIC_FETCH, (U)0, (U)0, pe))) \
	X(T, TN##_atomic_compare_swap, (T *dest, T cond, T val, int pe), (uint64_t dest, T cond, T val, int pe), \
	  ((T)MORI_SHMEM_I::amo_fetch<U>(MORI_SHMEM_ST, (void *)dest, MORI_SHMEM_ATOMIC_COMPARE_SWAP, (U)val, (U)cond, pe))) \
	X(int, TN##_wait_until, (T *ivar, int cmp, T cmp_value), (uint64_t ivar, int cmp, T cmp_value),     \
	  (MORI_SHMEM_I::wait_until<T>(MORI_SHMEM_ST, (T *)ivar, cmp, cmp_value, nullptr)))                 \
	X(int, TN##_test, (T *ivar, int cmp, T cmp_value), (uint64_t ivar, int cmp, T cmp_value),           \
	  ((int)MORI_SHMEM_I::cmp_true<T>(MORI_SHMEM_I::load_acquire<T>(MORI_SHMEM_ST, (const T *)ivar), cmp,      \
					  cmp_value)))                                                      \
	X(T, TN##_wait_until_greater_than, (T *addr, T val), (uint64_t addr, T val),                        \
	  (MORI_SHMEM_I::wait_value<T>(MORI_SHMEM_ST, (T *)addr, MORI_SHMEM_CMP_GT, val)))                  \
	X(int, TN##_wait_until_equals, (T *addr, T val), (uint64_t addr, T val),                            \
	  (MORI_SHMEM_I::wait_until<T>(MORI_SHMEM_ST, (T *)addr, MORI_SHMEM_CMP_EQ, val, nullptr)))

#define MORI_SHMEM_API(X)                                                                                    \
	X(int, my_pe, (), (), (MORI_SHMEM_I::my_pe(MORI_SHMEM_ST)))                                          \
	X(int, n_pes, (), (), (MORI_SHMEM_I::n_pes(MORI_SHMEM_ST)))                                          \
	X(uint64_t, ptr_p2p, (uint64_t dest, int my_pe, int dest_pe), (uint64_t dest, int my_pe, int dest_pe), \
	  (MORI_SHMEM_I::ptr_p2p(MORI_SHMEM_ST, dest, my_pe, dest_pe)))                                      \
	X(uint64_t, ptr, (uint64_t dest, int dest_pe), (uint64_t dest, int dest_pe),                        \
	  (MORI_SHMEM_I::ptr_p2p(MORI_SHMEM_ST, dest, MORI_SHMEM_I::my_pe(MORI_SHMEM_ST), dest_pe)))        \
	X(int, status, (), (), (MORI_SHMEM_I::status(MORI_SHMEM_ST)))                                        \
	X(int, quiet_thread, (), (), (MORI_SHMEM_I::quiet(MORI_SHMEM_ST)))                                   \
	X(int, quiet_thread_pe, (int pe), (int pe), (MORI_SHMEM_I::quiet(MORI_SHMEM_ST)))                    \
	X(int, quiet_thread_pe_qp, (int pe, int qp_id), (int pe, int qp_id), (MORI_SHMEM_I::quiet(MORI_SHMEM_ST))) \
	X(int, fence_thread, (), (), (MORI_SHMEM_I::fence(MORI_SHMEM_ST)))                                   \
	X(int, fence_thread_pe, (int pe), (int pe), (MORI_SHMEM_I::fence(MORI_SHMEM_ST)))                    \
	X(int, fence_thread_pe_qp, (int pe, int qp_id), (int pe, int qp_id), (MORI_SHMEM_I::fence(MORI_SHMEM_ST))) \
	X(int, barrier_all_thread, (), (), (MORI_SHMEM_I::barrier<MORI_SHMEM_I::THREAD>(MORI_SHMEM_ST, true))) \
	X(int, barrier_all_block, (), (), (MORI_SHMEM_I::barrier<MORI_SHMEM_I::BLOCK>(MORI_SHMEM_ST, true)))  \
	X(int, sync_all_thread, (), (), (MORI_SHMEM_I::barrier<MORI_SHMEM_I::THREAD>(MORI_SHMEM_ST, false)))  \
	X(int, sync_all_block, (), (), (MORI_SHMEM_I::barrier<MORI_SHMEM_I::BLOCK>(MORI_SHMEM_ST, false)))    \
	MORI_SHMEM_API_SCOPE(X, thread, THREAD)                                                              \
	MORI_SHMEM_API_SCOPE(X, warp, WARP)                                                                  \
	MORI_SHMEM_API_SCOPE(X, block, BLOCK)                                                                \
	X(int, put_size_imm_nbi_thread, (void *dest, void *val, size_t bytes, int pe, int qp_id = 0),       \
	  (uint64_t dest, uint64_t val, uint64_t bytes, int pe, int qp_id),                                 \
	  (MORI_SHMEM_I::put_imm(MORI_SHMEM_ST, (void *)dest, (const void *)val, bytes, pe)))               \
	MORI_SHMEM_API_PG(X, int32, int32_t, int32_t)                                                        \
	MORI_SHMEM_API_PG(X, int64, int64_t, int64_t)                                                        \
	MORI_SHMEM_API_PG(X, uint32, uint32_t, uint32_t)                                                     \
	MORI_SHMEM_API_PG(X, uint64, uint64_t, uint64_t)                                                     \
	MORI_SHMEM_API_PG(X, int, int, int)                                                                  \
	MORI_SHMEM_API_PG(X, float, float, float)                                                            \
	MORI_SHMEM_API_PG(X, double, double, double)                                                         \
	X(int, atomic_size_nonfetch_thread, (void *dest, void *val, size_t bytes, int amo_type, int pe, int qp_id = 0), \
	  (uint64_t dest, uint64_t val, uint64_t bytes, int amo_type, int pe, int qp_id),                   \
	  (MORI_SHMEM_I::amo_size(MORI_SHMEM_ST, (void *)dest, (const void *)val, bytes, amo_type, pe)))    \
	MORI_SHMEM_API_AMO_ROCM(X, uint32, uint32_t, uint32_t)                                               \
	MORI_SHMEM_API_AMO_ROCM(X, uint64, uint64_t, uint64_t)                                               \
	MORI_SHMEM_API_AMO_ROCM(X, int64, int64_t, uint64_t)                                                 \
	MORI_SHMEM_API_AMO_SHMEM(X, int32, int32_t, uint32_t)                                                \
	MORI_SHMEM_API_AMO_SHMEM(X, uint32, uint32_t, uint32_t)                                              \
	MORI_SHMEM_API_AMO_SHMEM(X, int64, int64_t, uint64_t)                                                \
	MORI_SHMEM_API_AMO_SHMEM(X, uint64, uint64_t, uint64_t)                                              \
	X(uint64_t, signal_fetch, (const uint64_t *sig_addr), (uint64_t sig_addr),                          \
	  (MORI_SHMEM_I::load_acquire<uint64_t>(MORI_SHMEM_ST, (const uint64_t *)sig_addr)))                 \
	X(uint64_t, signal_wait_until, (uint64_t *sig_addr, int cmp, uint64_t cmp_value),                   \
	  (uint64_t sig_addr, int cmp, uint64_t cmp_value),                                                 \
	  (MORI_SHMEM_I::wait_value<uint64_t>(MORI_SHMEM_ST, (uint64_t *)sig_addr, cmp, cmp_value)))

/* The C++ device API: inline functions named mori_shmem_<name>, typed pointers, qp_id optional.
 * kernels/shmem.cu defines MORI_SHMEM_NO_CXX_API and instantiates the same table as extern "C"
 * functions with uint64_t pointers instead (the two cannot share one translation unit). */
#ifndef MORI_SHMEM_NO_CXX_API
#define MORI_SHMEM_CXX_FN(ret, name, cxx, abi, body) MORI_DEVICE ret mori_shmem_##name cxx { return body; }
MORI_SHMEM_API(MORI_SHMEM_CXX_FN)
#undef MORI_SHMEM_CXX_FN
#endif
#endif
