/* mori/device/prims.cuh: the device primitives mori's kernels share, each written once: the
 * clock, the abort word's code, a bounded wait, the byte copy and a block's running rank of
 * flagged threads. CUDA and HIP through gpu.h; the device API (shmem.cuh, coll.cuh) and libmori's
 * kernels (copy, EP, CCL) all use these. */
#ifndef MORI_DEVICE_PRIMS_CUH
#define MORI_DEVICE_PRIMS_CUH
#include "gpu.h"
#include "../device_host/shmem_layout.h"
#include "../../mori.h"

/* ---- the clock: nanoseconds, for deadlines (not for ordering) ---- */
MORI_DEVICE uint64_t mori_now_ns(void)
{
#ifdef MORI_HIP
	return wall_clock64() * 10ull; /* the 100 MHz constant clock of gfx9 parts */
#else
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
#endif
}

/* ---- the abort word ----
 * 0, or the MORI_E* code of the abort morid set in the group's control page (the group is dead
 * or torn down). */
MORI_DEVICE int mori_abort_code(const struct mori_shmem_ctrl *c)
{
	uint32_t a = mori_relaxed_load_sys(&c->abort);
	if (!a)
		return 0;
	return a == MORI_SHMEM_ABORT_PEER_DEAD ? MORI_EPEERDEAD
	       : a == MORI_SHMEM_ABORT_TIMEOUT ? MORI_ETIMEDOUT
					       : MORI_ECANCELED;
}

/* ---- the bounded wait ----
 * Nothing on the GPU waits forever: every wait polls its condition and, every `every` polls,
 * lets the caller look at what may end it (the abort word, a deadline, a status word). Those
 * looks are rare because the words live in host memory: a read crosses PCIe. */

/* A wait's deadline: passed() reads the clock; its first call starts the wait's time. The limit
 * is read at each call (not kept in a register through the wait). */
struct mori_deadline {
	uint64_t t0;
	MORI_DEVICE mori_deadline() : t0(0) {}
	MORI_DEVICE bool passed(uint64_t limit_ns)
	{
		uint64_t now = mori_now_ns();
		bool late = t0 && now - t0 > limit_ns;
		if (!t0)
			t0 = now;
		return late;
	}
};

/* Polls ready() until it holds (0). At every `every`-th poll k that did not see it, check(k) is
 * asked; a non-zero code from it ends the wait with that code. (MORI-CCL's flag wait writes
 * this loop out, mori/device/coll.cuh says why.) */
template <typename Ready, typename Check> MORI_DEVICE int mori_wait_until(unsigned every, Ready ready, Check check)
{
	for (unsigned k = 1;; k++) {
		if (ready())
			return 0;
		if (k % every)
			continue;
		int rc = check(k);
		if (rc)
			return rc;
	}
}

/* ---- the byte copy ----
 * nt threads (the caller is thread t) copy len bytes: the widest element w in {16, 8, 4, 2, 1}
 * on which src and dst agree modulo w, after a head of at most w - 1 bytes; the tail is under w
 * bytes. Elements are interleaved over the threads (coalesced), four loads in flight a thread
 * before their stores. Two flavours of the one copy:
 *   MORI_COPY_STREAM  a warp (nt >= 16), as the copy kernels use it: the 16-byte vectors with
 *                     streaming hints (bytes read once and written once keep out of the way of
 *                     what the application's kernels want in L2), the rest element by element.
 *   MORI_COPY_PLAIN   any group (one thread, a warp, a block), as the device API's puts and gets
 *                     use it: plain loads and stores; the rest (at most 3 a thread) loads first,
 *                     then stores (one memory round trip); one thread copies the tail in the
 *                     widest steps it allows (an 8-byte put is one store). */
enum mori_copy_kind { MORI_COPY_PLAIN, MORI_COPY_STREAM };

template <int K> struct mori_copy_io {
	template <typename T> static MORI_DEVICE T load(const T *p) { return *p; }
	template <typename T> static MORI_DEVICE void store(T *p, T v) { *p = v; }
	static MORI_DEVICE mori_vec16 load(const mori_vec16 *p) { return K == MORI_COPY_STREAM ? mori_load_once16(p) : *p; }
	static MORI_DEVICE void store(mori_vec16 *p, mori_vec16 v)
	{
		if (K == MORI_COPY_STREAM)
			mori_store_once16(p, v);
		else
			*p = v;
	}
};

template <int K, typename T> MORI_DEVICE void mori_copy_elems(T *d, const T *s, uint64_t n, unsigned t, unsigned nt)
{
	typedef mori_copy_io<K> io;
	uint64_t i = t;
	for (; i + 3ull * nt < n; i += 4ull * nt) {
		T v0 = io::load(s + i), v1 = io::load(s + i + nt);
		T v2 = io::load(s + i + 2ull * nt), v3 = io::load(s + i + 3ull * nt);
		io::store(d + i, v0);
		io::store(d + i + nt, v1);
		io::store(d + i + 2ull * nt, v2);
		io::store(d + i + 3ull * nt, v3);
	}
	if (K == MORI_COPY_STREAM) {
		for (; i < n; i += nt)
			io::store(d + i, io::load(s + i));
	} else if (i < n) {
		bool b1 = i + nt < n, b2 = i + 2ull * nt < n;
		T v0 = s[i], v1, v2;
		if (b1)
			v1 = s[i + nt];
		if (b2)
			v2 = s[i + 2ull * nt];
		d[i] = v0;
		if (b1)
			d[i + nt] = v1;
		if (b2)
			d[i + 2ull * nt] = v2;
	}
}

template <int K> MORI_DEVICE void mori_copy_bytes(uint8_t *dst, const uint8_t *src, uint64_t len, unsigned t, unsigned nt)
{
	uintptr_t diff = (uintptr_t)src ^ (uintptr_t)dst;
	unsigned w = 16;
	while (w > 1 && (diff & (w - 1)))
		w >>= 1;
	uint64_t head = (w - ((uintptr_t)src & (w - 1))) & (w - 1);
	if (head > len)
		head = len;
	if (K == MORI_COPY_STREAM) {
		if (t < head) /* head < 16 <= nt */
			dst[t] = src[t];
	} else {
		for (uint64_t i = t; i < head; i += nt)
			dst[i] = src[i];
	}
	src += head;
	dst += head;
	len -= head;
	uint64_t n = len / w;
	switch (w) {
	case 16: mori_copy_elems<K>((mori_vec16 *)dst, (const mori_vec16 *)src, n, t, nt); break;
	case 8: mori_copy_elems<K>((uint64_t *)dst, (const uint64_t *)src, n, t, nt); break;
	case 4: mori_copy_elems<K>((uint32_t *)dst, (const uint32_t *)src, n, t, nt); break;
	case 2: mori_copy_elems<K>((uint16_t *)dst, (const uint16_t *)src, n, t, nt); break;
	default: mori_copy_elems<K>(dst, src, n, t, nt); break;
	}
	uint64_t i = n * w;
	if (K == MORI_COPY_STREAM) {
		if (t < len - i) /* the tail is under w <= 16 <= nt bytes */
			dst[i + t] = src[i + t];
		return;
	}
	if (nt == 1)
		for (unsigned k = w >> 1; k; k >>= 1)
			if (len - i >= k) {
				switch (k) {
				case 8: *(uint64_t *)(dst + i) = *(const uint64_t *)(src + i); break;
				case 4: *(uint32_t *)(dst + i) = *(const uint32_t *)(src + i); break;
				case 2: *(uint16_t *)(dst + i) = *(const uint16_t *)(src + i); break;
				default: dst[i] = src[i]; break;
				}
				i += k;
			}
	for (i += t; i < len; i += nt)
		dst[i] = src[i];
}

/* ---- a block's running rank of flagged threads ----
 * Round after round (every thread of the block calls it once a round): this thread's position
 * among the threads flagged so far, in thread order within a round, after the *running flagged
 * in earlier rounds; *running (shared memory) then advances by the round's count. */
MORI_DEVICE int mori_block_rank(bool hit, int *running)
{
	const unsigned tid = mori_block_thread(), lane = tid % MORI_WARP_SIZE, wid = tid / MORI_WARP_SIZE;
	const unsigned nwarp = mori_block_threads() / MORI_WARP_SIZE;
	__shared__ int wcnt[1024 / 32]; /* a count per warp of the largest block */
	uint64_t m = mori_warp_ballot(hit);
	int before = __popcll(m & ((1ull << lane) - 1));
	if (lane == 0)
		wcnt[wid] = __popcll(m);
	__syncthreads();
	int wbase = 0, total = 0;
	for (unsigned i = 0; i < nwarp; i++) {
		wbase += i < wid ? wcnt[i] : 0;
		total += wcnt[i];
	}
	int p = *running + wbase + before;
	__syncthreads(); /* every thread has read wcnt and *running */
	if (tid == 0)
		*running += total;
	__syncthreads();
	return p;
}
#endif
