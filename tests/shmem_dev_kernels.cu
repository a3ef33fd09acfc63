// The kernels of tests/test_gpu_shmem_dev.c: one launch per PE (each PE's own module instance,
// so each has its own mori_shmem_state_ptr), blocks of SDEV_THREADS. They call the C++ device API
// of mori/device/shmem.cuh exactly as an application kernel would, and write what they saw to
// out[] for the host to check against its model.
#include "mori/device/shmem.cuh"
#include "../tests/shmem_dev.h"

#define OUT(a) ((long long *)(uintptr_t)(a)->out)

__device__ void note_rc(const struct sdev_args *a, int rc, long long where)
{
	if (rc && atomicCAS((unsigned long long *)&OUT(a)[SDEV_OUT_RC], 0ull, (unsigned long long)(long long)rc) == 0)
		OUT(a)[SDEV_OUT_WHERE] = where;
}

/* One op of the put/get script at its scope; threads outside the scope's group skip it. */
__device__ int run_op(const struct sdev_op &o)
{
	unsigned t = threadIdx.x;
	if ((o.scope == SDEV_THREAD && t != 0) || (o.scope == SDEV_WARP && t >= MORI_WARP_SIZE))
		return 0;
	void *d = (void *)(uintptr_t)o.dst;
	const void *s = (const void *)(uintptr_t)o.src;
#define SCOPED(fn, ...)                                                                            \
	(o.scope == SDEV_THREAD ? mori_shmem_##fn##_thread(__VA_ARGS__)                             \
	 : o.scope == SDEV_WARP ? mori_shmem_##fn##_warp(__VA_ARGS__) : mori_shmem_##fn##_block(__VA_ARGS__))
#define TYPED(pre, post, ...)                                                                      \
	(o.type == SDEV_U32   ? SCOPED(pre##uint32##post, (uint32_t *)d, (const uint32_t *)s, __VA_ARGS__) \
	 : o.type == SDEV_U64 ? SCOPED(pre##uint64##post, (uint64_t *)d, (const uint64_t *)s, __VA_ARGS__) \
	 : o.type == SDEV_F32 ? SCOPED(pre##float##post, (float *)d, (const float *)s, __VA_ARGS__)      \
			      : SCOPED(pre##double##post, (double *)d, (const double *)s, __VA_ARGS__))
	switch (o.kind) {
	case SDEV_PUTMEM_NBI: return SCOPED(putmem_nbi, d, s, o.len, o.pe);
	case SDEV_GETMEM_NBI: return SCOPED(getmem_nbi, d, s, o.len, o.pe);
	case SDEV_GETMEM: return SCOPED(getmem, d, s, o.len, o.pe);
	case SDEV_PUT_T_NBI: return TYPED(put_, _nbi, o.len, o.pe);
	case SDEV_GET_T_NBI: return TYPED(get_, _nbi, o.len, o.pe);
	case SDEV_GET_T: return TYPED(get_, , o.len, o.pe);
	case SDEV_P_T:
		switch (o.type) {
		case SDEV_U32: return mori_shmem_uint32_p((uint32_t *)d, *(const uint32_t *)s, o.pe);
		case SDEV_U64: return mori_shmem_uint64_p((uint64_t *)d, *(const uint64_t *)s, o.pe);
		case SDEV_F32: return mori_shmem_float_p((float *)d, *(const float *)s, o.pe);
		default: return mori_shmem_double_p((double *)d, *(const double *)s, o.pe);
		}
	case SDEV_G_T:
		switch (o.type) {
		case SDEV_U32: *(uint32_t *)d = mori_shmem_uint32_g((const uint32_t *)s, o.pe); return 0;
		case SDEV_U64: *(uint64_t *)d = mori_shmem_uint64_g((const uint64_t *)s, o.pe); return 0;
		case SDEV_F32: *(float *)d = mori_shmem_float_g((const float *)s, o.pe); return 0;
		default: *(double *)d = mori_shmem_double_g((const double *)s, o.pe); return 0;
		}
	}
#undef TYPED
#undef SCOPED
	return MORI_EINVAL;
}

/* The put/get script, then quiet and barrier_all: every PE's puts have landed when it ends. */
extern "C" __global__ void sdev_ops(const struct sdev_args *a)
{
	const struct sdev_op *ops = (const struct sdev_op *)(uintptr_t)a->ops;
	for (uint32_t i = 0; i < a->n_ops; i++) {
		struct sdev_op o = ops[i];
		note_rc(a, run_op(o), i);
		__syncthreads();
	}
	note_rc(a, mori_shmem_quiet_thread(), -1);
	note_rc(a, mori_shmem_barrier_all_block(), -2);
	if (threadIdx.x == 0)
		OUT(a)[SDEV_OUT_DONE] = 1;
}

/* put+signal around the ring: round r puts sdev_ring_len(r) bytes of pattern(me, r) to the right
 * neighbour at scope r % 3 and signals it (SET r + 1 or ADD 1 alternately); each PE waits for its
 * own signal to reach r + 1, checks its left neighbour's bytes, and acks the left one (its ack
 * word, an atomic add) so that it may overwrite the buffer in the next round. */
extern "C" __global__ void sdev_ring(const struct sdev_args *a)
{
	int me = mori_shmem_my_pe(), n = mori_shmem_n_pes();
	int right = (me + 1) % n, left = (me + n - 1) % n;
	uint8_t *src = (uint8_t *)(uintptr_t)a->src, *buf = (uint8_t *)(uintptr_t)a->buf;
	uint64_t *sig = (uint64_t *)(uintptr_t)a->sig, *ack = (uint64_t *)(uintptr_t)a->ack;
	__shared__ unsigned long long bad;
	if (threadIdx.x == 0)
		bad = 0;
	for (int r = 0; r < a->rounds; r++) {
		uint32_t len = sdev_ring_len(r, a->maxlen);
		for (uint32_t i = threadIdx.x; i < len; i += blockDim.x)
			src[i] = sdev_pattern(me, r, i);
		__syncthreads();
		int op = r & 1 ? MORI_SHMEM_SIGNAL_ADD : MORI_SHMEM_SIGNAL_SET;
		uint64_t v = r & 1 ? 1 : (uint64_t)r + 1;
		int rc = 0;
		switch (r % 3) {
		case 0:
			if (threadIdx.x == 0)
				rc = mori_shmem_putmem_nbi_signal_thread(buf, src, len, sig, v, op, right);
			break;
		case 1:
			if (threadIdx.x < MORI_WARP_SIZE)
				rc = mori_shmem_putmem_nbi_signal_warp(buf, src, len, sig, v, op, right);
			break;
		default: rc = mori_shmem_putmem_nbi_signal_block(buf, src, len, sig, v, op, right); break;
		}
		note_rc(a, rc, r);
		if (threadIdx.x == 0) {
			uint64_t got = mori_shmem_signal_wait_until(sig, MORI_SHMEM_CMP_GE, (uint64_t)r + 1);
			note_rc(a, mori_shmem_status(), r);
			if (got != (uint64_t)r + 1)
				note_rc(a, -1000, r);
		}
		__syncthreads();
		unsigned long long b = 0;
		for (uint32_t i = threadIdx.x; i < len; i += blockDim.x)
			b += buf[i] != sdev_pattern(left, r, i);
		if (b) {
			atomicAdd(&bad, b);
			atomicCAS((unsigned long long *)&OUT(a)[SDEV_OUT_FIRST_BAD], 0ull, (unsigned long long)r + 1);
		}
		__syncthreads(); /* every thread has read the buffer (and the source may be rewritten) */
		if (threadIdx.x == 0) {
			note_rc(a, mori_shmem_fence_thread(), r);
			note_rc(a, mori_shmem_uint64_atomic_add(ack, 1, left), r);
			note_rc(a, mori_shmem_uint64_wait_until(ack, MORI_SHMEM_CMP_GE, (uint64_t)r + 1), r);
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		OUT(a)[SDEV_OUT_BAD] = (long long)bad;
		OUT(a)[SDEV_OUT_DONE] = 1;
	}
}

/* Ordering, hammered: each round r (1..rounds) every PE writes maxlen 64-bit words of value r into
 * its right neighbour's buf and then tells it, one of four ways by r % 4: put_signal SET r at
 * block scope; putmem_nbi at warp scope, the block synchronised, thread 0's fence, then its p of
 * r into the signal; put_signal ADD 1 at thread scope; putmem_nbi at block scope then barrier_all
 * (the signal follows by p, unordered, and is not what the reader waits on). The reader waits (signal_wait_until, or the barrier) and
 * then reads every word with plain loads, which L1 may serve from the previous round: a word
 * that is not r is a flag (or barrier) seen before its data, i.e. ordering at too weak a scope.
 * The reader acks the writer (an atomic add after a fence) before the writer's next round. */
extern "C" __global__ void sdev_order(const struct sdev_args *a)
{
	int me = mori_shmem_my_pe(), n = mori_shmem_n_pes();
	int right = (me + 1) % n, left = (me + n - 1) % n;
	uint64_t *src = (uint64_t *)(uintptr_t)a->src, *buf = (uint64_t *)(uintptr_t)a->buf;
	uint64_t *sig = (uint64_t *)(uintptr_t)a->sig, *ack = (uint64_t *)(uintptr_t)a->ack;
	const uint32_t words = a->maxlen, bytes = words * 8;
	__shared__ unsigned long long bad;
	if (threadIdx.x == 0)
		bad = 0;
	__syncthreads();
	for (int r = 1; r <= a->rounds; r++) {
		const uint64_t v = (uint64_t)r;
		if (threadIdx.x == 0) /* the right neighbour has read round r - 1 */
			note_rc(a, mori_shmem_uint64_wait_until(ack, MORI_SHMEM_CMP_GE, v - 1), r);
		for (uint32_t i = threadIdx.x; i < words; i += blockDim.x)
			src[i] = v;
		__syncthreads();
		int rc = 0;
		switch (r % 4) {
		case 0: rc = mori_shmem_putmem_nbi_signal_block(buf, src, bytes, sig, v, MORI_SHMEM_SIGNAL_SET, right); break;
		case 1:
			if (threadIdx.x < MORI_WARP_SIZE)
				rc = mori_shmem_putmem_nbi_warp(buf, src, bytes, right);
			__syncthreads(); /* the warp's stores are thread 0's to fence */
			if (threadIdx.x == 0 && !rc && !(rc = mori_shmem_fence_thread()))
				rc = mori_shmem_uint64_p(sig, v, right);
			break;
		case 2:
			if (threadIdx.x == 0)
				rc = mori_shmem_putmem_nbi_signal_thread(buf, src, bytes, sig, 1, MORI_SHMEM_SIGNAL_ADD, right);
			break;
		default:
			rc = mori_shmem_putmem_nbi_block(buf, src, bytes, right);
			__syncthreads();
			if (threadIdx.x == 0 && !rc)
				rc = mori_shmem_uint64_p(sig, v, right);
			if (!rc)
				rc = mori_shmem_barrier_all_block();
			break;
		}
		note_rc(a, rc, r);
		if (threadIdx.x == 0 && r % 4 != 3) {
			uint64_t got = mori_shmem_signal_wait_until(sig, MORI_SHMEM_CMP_GE, v);
			note_rc(a, mori_shmem_status(), r);
			if (got != v)
				note_rc(a, -1000, r);
		}
		__syncthreads();
		unsigned long long b = 0;
		for (uint32_t i = threadIdx.x; i < words; i += blockDim.x)
			b += buf[i] != v; /* plain loads: L1 may still hold round r - 1 */
		if (b) {
			atomicAdd(&bad, b);
			atomicCAS((unsigned long long *)&OUT(a)[SDEV_OUT_FIRST_BAD], 0ull, (unsigned long long)r + 1);
		}
		__syncthreads(); /* every thread has read the buffer */
		if (threadIdx.x == 0) {
			note_rc(a, mori_shmem_fence_thread(), r);
			note_rc(a, mori_shmem_uint64_atomic_add(ack, 1, left), r);
		}
	}
	if (threadIdx.x == 0) {
		note_rc(a, mori_shmem_quiet_thread(), -1);
		OUT(a)[SDEV_OUT_BAD] = (long long)bad;
		OUT(a)[SDEV_OUT_DONE] = 1;
	}
}

/* Every thread of every block fetch-adds the 64- and 32-bit counters at target_pe (and adds to a
 * third without fetching); the fetched 64-bit values mark a bitmap shared by all PEs (maxlen
 * words), a bit seen set twice is a duplicate. The PE adds `total` in all. */
extern "C" __global__ void sdev_fadd(const struct sdev_args *a)
{
	uint64_t nt = (uint64_t)gridDim.x * blockDim.x, t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	uint64_t mine = a->total / nt + (t < a->total % nt);
	uint64_t *c64 = (uint64_t *)(uintptr_t)a->ctr64, *nf = (uint64_t *)(uintptr_t)a->ctr_nf;
	uint32_t *c32 = (uint32_t *)(uintptr_t)a->ctr32, *bits = (uint32_t *)(uintptr_t)a->bitmap;
	long long dups = 0;
	for (uint64_t i = 0; i < mine; i++) {
		uint64_t old = mori_shmem_uint64_atomic_fetch_add(c64, 1, a->target_pe);
		uint32_t bit = 1u << (old & 31);
		if ((old >> 5) >= a->maxlen || (atomicOr(&bits[old >> 5], bit) & bit))
			dups++; /* beyond every PE's total, or seen before */
		if (i & 1)
			mori_shmem_uint32_atomic_fetch_add_thread(c32, 1u, a->target_pe);
		else
			mori_shmem_atomic_uint32_fetch_thread(c32, 1u, 0u, MORI_SHMEM_ATOMIC_FETCH_ADD, a->target_pe);
		note_rc(a, i & 1 ? mori_shmem_uint64_atomic_add_thread(nf, 2, a->target_pe)
				 : mori_shmem_atomic_uint64_nonfetch_thread(nf, 2, MORI_SHMEM_ATOMIC_ADD, a->target_pe),
			(long long)i);
	}
	if (dups)
		atomicAdd((unsigned long long *)&OUT(a)[SDEV_OUT_DUPS], (unsigned long long)dups);
	note_rc(a, mori_shmem_quiet_thread(), -1);
	if (t == 0)
		OUT(a)[SDEV_OUT_DONE] = 1;
}

/* The fixed sequence of atomics (struct sdev_wait reused as steps: cmp = atomic type, type =
 * width 4/8, init = value, value = compare) on the PE's own slot at target_pe; fetched values to
 * fetched[]. Even steps use the generic (ROCm/mori) forms, odd ones OpenSHMEM's names. */
__device__ uint64_t amo_step(int i, int op, int w, uint64_t v, uint64_t c, void *dst, int pe)
{
	uint64_t *d64 = (uint64_t *)dst;
	uint32_t *d32 = (uint32_t *)dst, v32 = (uint32_t)v, c32 = (uint32_t)c;
	bool fetch = op >= MORI_SHMEM_ATOMIC_FETCH;
	if (!(i & 1)) {
		if (w == 8)
			return fetch ? mori_shmem_atomic_uint64_fetch_thread(d64, v, c, op, pe)
				     : (uint64_t)mori_shmem_atomic_uint64_nonfetch_thread(d64, v, op, pe);
		return fetch ? mori_shmem_atomic_uint32_fetch_thread(d32, v32, c32, op, pe)
			     : (uint64_t)mori_shmem_atomic_uint32_nonfetch_thread(d32, v32, op, pe);
	}
#define OPS(TN, d, vv, cc)                                                                         \
	switch (op) {                                                                              \
	case MORI_SHMEM_ATOMIC_SET: return mori_shmem_##TN##_atomic_set(d, vv, pe);                \
	case MORI_SHMEM_ATOMIC_ADD: return mori_shmem_##TN##_atomic_add(d, vv, pe);                \
	case MORI_SHMEM_ATOMIC_INC: return mori_shmem_##TN##_atomic_inc(d, pe);                    \
	case MORI_SHMEM_ATOMIC_AND: return mori_shmem_##TN##_atomic_and(d, vv, pe);                \
	case MORI_SHMEM_ATOMIC_OR: return mori_shmem_##TN##_atomic_or(d, vv, pe);                  \
	case MORI_SHMEM_ATOMIC_XOR: return mori_shmem_##TN##_atomic_xor(d, vv, pe);                \
	case MORI_SHMEM_ATOMIC_FETCH: return mori_shmem_##TN##_atomic_fetch(d, pe);                \
	case MORI_SHMEM_ATOMIC_FETCH_INC: return mori_shmem_##TN##_atomic_fetch_inc(d, pe);        \
	case MORI_SHMEM_ATOMIC_FETCH_ADD: return mori_shmem_##TN##_atomic_fetch_add(d, vv, pe);    \
	case MORI_SHMEM_ATOMIC_FETCH_AND: return mori_shmem_##TN##_atomic_fetch_and(d, vv, pe);    \
	case MORI_SHMEM_ATOMIC_FETCH_OR: return mori_shmem_##TN##_atomic_fetch_or(d, vv, pe);      \
	case MORI_SHMEM_ATOMIC_FETCH_XOR: return mori_shmem_##TN##_atomic_fetch_xor(d, vv, pe);    \
	case MORI_SHMEM_ATOMIC_SWAP: return mori_shmem_##TN##_atomic_swap(d, vv, pe);              \
	default: return mori_shmem_##TN##_atomic_compare_swap(d, cc, vv, pe);                      \
	}
	if (w == 8) {
		OPS(uint64, d64, v, c)
	}
	OPS(uint32, d32, v32, c32)
#undef OPS
}

extern "C" __global__ void sdev_amo(const struct sdev_args *a)
{
	if (threadIdx.x != 0)
		return;
	const struct sdev_wait *st = (const struct sdev_wait *)(uintptr_t)a->waits;
	uint64_t *f = (uint64_t *)(uintptr_t)a->fetched;
	for (int i = 0; i < a->rounds; i++) {
		int w = (int)st[i].type;
		void *dst = (void *)(uintptr_t)(a->amo + (w == 4 ? 8 : 0));
		f[i] = amo_step(i, st[i].cmp, w, (uint64_t)st[i].init, (uint64_t)st[i].value, dst, a->target_pe);
		note_rc(a, mori_shmem_status(), i);
	}
	/* signed 64-bit forms, on a word of their own (+16): -5 + 3 = -2, fetch, then -2 + (-7) */
	int64_t *s = (int64_t *)(uintptr_t)(a->amo + 16);
	note_rc(a, mori_shmem_int64_atomic_set(s, -5, a->target_pe), 100);
	f[a->rounds] = (uint64_t)mori_shmem_int64_atomic_fetch_add_thread(s, 3, a->target_pe);
	f[a->rounds + 1] = (uint64_t)mori_shmem_atomic_int64_fetch_thread(s, -7, 0, MORI_SHMEM_ATOMIC_FETCH_ADD,
									 a->target_pe);
	f[a->rounds + 2] = (uint64_t)mori_shmem_int64_atomic_fetch(s, a->target_pe);
	note_rc(a, mori_shmem_quiet_thread(), -1);
	OUT(a)[SDEV_OUT_DONE] = 1;
}

/* A compare-swap lock on target_pe's word: take it (compare_swap 0 -> me + 1), fence, read the
 * counter there, write it + 1, quiet, give the lock back (atomic set 0). `rounds` times. */
extern "C" __global__ void sdev_lock(const struct sdev_args *a)
{
	if (threadIdx.x != 0)
		return;
	int me = mori_shmem_my_pe(), pe = a->target_pe;
	uint64_t *lock = (uint64_t *)(uintptr_t)a->ctr32, *ctr = (uint64_t *)(uintptr_t)a->ctr64;
	for (int i = 0; i < a->rounds; i++) {
		unsigned spins = 0;
		while (mori_shmem_uint64_atomic_compare_swap(lock, 0, (uint64_t)me + 1, pe) != 0) {
			if (++spins % 1024 == 0 && mori_shmem_status()) {
				note_rc(a, mori_shmem_status(), i);
				return;
			}
		}
		mori_shmem_fence_thread();
		uint64_t v = mori_shmem_uint64_g(ctr, pe);
		note_rc(a, mori_shmem_uint64_p(ctr, v + 1, pe), i);
		note_rc(a, mori_shmem_quiet_thread(), i);
		uint64_t held = mori_shmem_uint64_atomic_swap(lock, 0, pe);
		if (held != (uint64_t)me + 1)
			note_rc(a, -1001, i);
	}
	OUT(a)[SDEV_OUT_DONE] = 1;
}

/* wait_until on every comparison: the waiter (thread 0) first tests that no word is satisfied,
 * then, after sync_all, waits on each in turn while the setter (thread 32) writes each word's
 * sequence to the right neighbour. */
__device__ int64_t wait_one(const struct sdev_wait &w, uint8_t *words, int i, int *rc)
{
	if (w.type == 0) {
		int32_t *p = (int32_t *)words + i, v = (int32_t)w.value, seen;
		if (w.cmp == MORI_SHMEM_CMP_GT) /* ROCm/mori's forms for GT and EQ */
			return mori_shmem_int32_wait_until_greater_than(p, v);
		if (w.cmp == MORI_SHMEM_CMP_EQ) {
			*rc = mori_shmem_int32_wait_until_equals(p, v);
			return *(volatile int32_t *)p;
		}
		*rc = mori_shmem_int32_wait_until(p, w.cmp, v);
		seen = *(volatile int32_t *)p;
		return seen;
	}
	uint64_t *p = (uint64_t *)(words + 64) + i;
	if (w.type == 1) {
		*rc = mori_shmem_uint64_wait_until(p, w.cmp, (uint64_t)w.value);
		return (int64_t)*(volatile uint64_t *)p;
	}
	if (w.type == 2) {
		*rc = mori_shmem_int64_wait_until((int64_t *)p, w.cmp, w.value);
		return *(volatile int64_t *)p;
	}
	return (int64_t)mori_shmem_signal_wait_until(p, w.cmp, (uint64_t)w.value);
}
__device__ int test_one(const struct sdev_wait &w, uint8_t *words, int i)
{
	if (w.type == 0)
		return mori_shmem_int32_test((int32_t *)words + i, w.cmp, (int32_t)w.value);
	uint64_t *p = (uint64_t *)(words + 64) + i;
	if (w.type == 2)
		return mori_shmem_int64_test((int64_t *)p, w.cmp, w.value);
	return mori_shmem_uint64_test(p, w.cmp, (uint64_t)w.value);
}
__device__ int set_one(const struct sdev_wait &w, uint8_t *words, int i, int64_t v, int pe)
{
	if (w.type == 0)
		return mori_shmem_int32_p((int32_t *)words + i, (int32_t)v, pe);
	return mori_shmem_uint64_p((uint64_t *)(words + 64) + i, (uint64_t)v, pe);
}

extern "C" __global__ void sdev_wait(const struct sdev_args *a)
{
	const struct sdev_wait *ws = (const struct sdev_wait *)(uintptr_t)a->waits;
	uint8_t *words = (uint8_t *)(uintptr_t)a->words;
	int right = (mori_shmem_my_pe() + 1) % mori_shmem_n_pes();
	if (threadIdx.x == 0) {
		for (int i = 0; i < SDEV_WAITS; i++)
			if (test_one(ws[i], words, i))
				note_rc(a, -1002, i);
	}
	__syncthreads();
	note_rc(a, mori_shmem_sync_all_block(), -3);
	if (threadIdx.x == 0) {
		for (int i = 0; i < SDEV_WAITS; i++) {
			int rc = 0;
			OUT(a)[SDEV_OUT_SEEN + i] = wait_one(ws[i], words, i, &rc);
			note_rc(a, rc, i);
			if (!test_one(ws[i], words, i))
				note_rc(a, -1003, i);
		}
	} else if (threadIdx.x == 32) {
		for (int i = 0; i < SDEV_WAITS; i++)
			for (uint32_t k = 0; k < ws[i].nseq; k++) {
				note_rc(a, set_one(ws[i], words, i, ws[i].seq[k], right), 100 + i);
				note_rc(a, mori_shmem_fence_thread(), 100 + i);
				__nanosleep(2000);
			}
		note_rc(a, mori_shmem_quiet_thread(), -1);
	}
	__syncthreads();
	note_rc(a, mori_shmem_barrier_all_block(), -2);
	if (threadIdx.x == 0)
		OUT(a)[SDEV_OUT_DONE] = 1;
}

/* barrier_all: round r, every PE writes r + 1 into its slot of every PE's words[] (p), then a
 * barrier (block or thread scope alternately), then checks that all n slots read r + 1, then
 * sync_all before the next round rewrites them. */
extern "C" __global__ void sdev_barrier(const struct sdev_args *a)
{
	int me = mori_shmem_my_pe(), n = mori_shmem_n_pes();
	uint64_t *slots = (uint64_t *)(uintptr_t)a->words;
	for (int r = 0; r < a->rounds; r++) {
		for (int q = threadIdx.x; q < n; q += blockDim.x)
			note_rc(a, mori_shmem_uint64_p(slots + me, (uint64_t)r + 1, q), r);
		if (r & 1) {
			note_rc(a, mori_shmem_barrier_all_block(), r);
		} else {
			for (int q = threadIdx.x; q < n; q += blockDim.x)
				note_rc(a, mori_shmem_quiet_thread(), r); /* each thread's own puts */
			__syncthreads();
			if (threadIdx.x == 0)
				note_rc(a, mori_shmem_barrier_all_thread(), r);
			__syncthreads();
		}
		for (int q = threadIdx.x; q < n; q += blockDim.x)
			if (*(volatile uint64_t *)(slots + q) != (uint64_t)r + 1)
				atomicAdd((unsigned long long *)&OUT(a)[SDEV_OUT_BAD], 1ull);
		__syncthreads();
		note_rc(a, mori_shmem_sync_all_block(), r);
	}
	if (threadIdx.x == 0)
		OUT(a)[SDEV_OUT_DONE] = 1;
}

/* A wait nothing will satisfy, ended by the abort word: 0 wait_until on the PE's own word,
 * 1 barrier_all_block that no other PE joins, 2 a quiet on a proxy request nobody serves. */
extern "C" __global__ void sdev_abort(const struct sdev_args *a)
{
	int rc = 0;
	uint64_t *w = (uint64_t *)(uintptr_t)a->words;
	if (a->which == 1) {
		rc = mori_shmem_barrier_all_block();
	} else if (threadIdx.x == 0) {
		if (a->which == 0) {
			rc = mori_shmem_uint64_wait_until(w, MORI_SHMEM_CMP_EQ, 1);
		} else {
			rc = mori_shmem_putmem_nbi_thread(w, w + 8, 64, a->target_pe);
			rc = rc ? rc : mori_shmem_quiet_thread();
		}
	}
	if (threadIdx.x == 0) {
		OUT(a)[SDEV_OUT_RC] = rc;
		OUT(a)[SDEV_OUT_DONE] = 1;
	}
}

/* The fake morid's AMO engine: one AMO (enum mori_shmem_amo code, width 4/8) on word w, the old
 * value to *old (when not NULL). Run by the test's host thread, grid 1, block 1. */
extern "C" __global__ void sdev_amo_exec(uint64_t w, int code, int width, uint64_t v, uint64_t cmp, uint64_t *old)
{
	uint64_t o;
	if (width == 4)
		o = mori_shmem_impl::amo_direct((uint32_t *)(uintptr_t)w, code, (uint32_t)v, (uint32_t)cmp);
	else
		o = mori_shmem_impl::amo_direct((uint64_t *)(uintptr_t)w, code, v, cmp);
	if (old)
		*old = o;
	mori_complete_stores_sys();
}
