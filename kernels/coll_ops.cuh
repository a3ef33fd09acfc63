// MORI-CCL's data movement, shared by the intranode kernels (coll.cu) and the cross-node one
// (coll_xnode.cu): the block's copy and the reductions (f32 accumulation, one rounding).
#ifndef MORI_COLL_OPS_CUH
#define MORI_COLL_OPS_CUH
#include "mori/device/coll.cuh"
#include "coll_kernels.h"
#ifdef MORI_HIP
#include <hip/hip_fp16.h>
#else
#include <cuda_fp16.h>
#endif

namespace mori_coll {
/* L2-coherent loads (never a stale L1 line from an earlier chunk or another rank's write). */
MORI_DEVICE mori_vec16 ld16(const void *p)
{
#ifdef MORI_HIP
	return mori_load_once16((const mori_vec16 *)p);
#else
	return __ldcg((const uint4 *)p);
#endif
}
template <typename T> MORI_DEVICE T ldg(const T *p)
{
#ifdef MORI_HIP
	return __builtin_nontemporal_load(p);
#else
	return __ldcg(p);
#endif
}

/* The block's ranges [lo, hi) of [0, len), len <= full, in units of `al` (elements per 16 bytes,
 * or 16 bytes): tiles of T units, block b owning tiles b, b + G, b + 2G, ... (G the grid). T is
 * `tu` (a.tile in those units: the grid sweeps the buffer together, few pages at a time), or with
 * tu 0 the whole share ceil(full / G) (one contiguous range a block). Ownership depends on full, G
 * and T only, the same in every chunk or round of a kernel, so a block owns the same scratch bytes
 * throughout: its barrier (with the same block of its peers) is all that orders their reuse.
 * The loop's condition depends on blockIdx alone: every thread of a block runs the same tiles. */
MORI_DEVICE uint64_t tile_len(uint64_t full, uint64_t al, uint64_t tu)
{
	uint64_t per = tu ? tu : (full + gridDim.x - 1) / gridDim.x;
	per = (per + al - 1) / al * al;
	return per ? per : al;
}
#define FOR_TILES(full, len, al, tu, lo, hi)                                                                     \
	for (uint64_t T_ = tile_len(full, al, tu), lo = T_ * blockIdx.x, hi = 0;                                      \
	     lo < (len) && ((hi = lo + T_ < (len) ? lo + T_ : (len)), true); lo += T_ * gridDim.x)

/* copy() and the reductions are calls of their own, not inlined into the kernel's one body:
 * each gets its registers (inlined into every collective's path they spilled at 128). */
#define COLL_CALL __device__ __noinline__

/* ---- copies: the block's threads over [0, len) bytes ---- */
COLL_CALL void copy(uint8_t *dst, const uint8_t *src, uint64_t len)
{
	if (dst == src || !len)
		return;
	unsigned t = threadIdx.x, nt = blockDim.x;
	uint64_t i = 0;
	if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
		uint64_t nv = len / 16;
		uint64_t j = t;
		for (; j + 7ull * nt < nv; j += 8ull * nt) { /* 8 loads in flight a thread */
			mori_vec16 v[8];
#pragma unroll
			for (int u = 0; u < 8; u++)
				v[u] = ld16(src + 16 * (j + (uint64_t)u * nt));
#pragma unroll
			for (int u = 0; u < 8; u++)
				((mori_vec16 *)dst)[j + (uint64_t)u * nt] = v[u];
		}
		for (; j < nv; j += nt)
			((mori_vec16 *)dst)[j] = ld16(src + 16 * j);
		i = nv * 16;
	} else if ((((uintptr_t)dst | (uintptr_t)src) & 3) == 0) {
		uint64_t nw = len / 4;
		for (uint64_t j = t; j < nw; j += nt)
			((uint32_t *)dst)[j] = ldg((const unsigned *)src + j);
		i = nw * 4;
	}
	for (uint64_t j = i + t; j < len; j += nt)
		dst[j] = ldg((const unsigned char *)src + j);
}

/* ---- reductions ---- */
template <typename T> struct cvt;
template <> struct cvt<float> {
	static MORI_DEVICE float in(float v) { return v; }
	static MORI_DEVICE float out(float v) { return v; }
	static MORI_DEVICE float load(const float *p) { return ldg(p); }
};
template <> struct cvt<__half> {
	static MORI_DEVICE float in(__half v) { return __half2float(v); }
	static MORI_DEVICE __half out(float v) { return __float2half_rn(v); }
	static MORI_DEVICE __half load(const __half *p)
	{
		unsigned short b = ldg((const unsigned short *)p);
		return *(__half *)&b;
	}
};
struct bf16 { uint16_t b; };
template <> struct cvt<bf16> {
	static MORI_DEVICE float in(bf16 v) { return __uint_as_float((uint32_t)v.b << 16); }
	static MORI_DEVICE bf16 out(float v) /* round to nearest even; NaN stays NaN */
	{
		uint32_t u = __float_as_uint(v);
		bf16 r;
		if ((u & 0x7fffffffu) > 0x7f800000u)
			r.b = (uint16_t)((u >> 16) | 0x40);
		else
			r.b = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
		return r;
	}
	static MORI_DEVICE bf16 load(const bf16 *p)
	{
		bf16 r;
		r.b = ldg((const unsigned short *)p);
		return r;
	}
};
MORI_DEVICE float rop(int op, float a, float b)
{
	return op == MORI_COLL_OP_MAX ? fmaxf(a, b) : op == MORI_COLL_OP_MIN ? fminf(a, b) : a + b;
}
/* acc = v's elements (first source) or acc op v's; then acc converted to T, stored at vector j of
 * dst (and of dst2 when non-NULL). Inlined into every reduction loop. */
template <typename T> MORI_DEVICE void fold16(int op, float *acc, const mori_vec16 &v, bool first)
{
	const T *e = (const T *)&v;
#pragma unroll
	for (unsigned k = 0; k < 16 / sizeof(T); k++)
		acc[k] = first ? cvt<T>::in(e[k]) : rop(op, acc[k], cvt<T>::in(e[k]));
}
/* element i of the reduction, one at a time (tails, unaligned buffers) */
template <typename T>
MORI_DEVICE void reduce1(int op, int n, T *dst, T *dst2, const uint64_t *srcs, uint64_t soff, uint64_t i)
{
	float x = 0;
	for (int q = 0; q < n; q++) {
		float v = cvt<T>::in(cvt<T>::load((const T *)((const uint8_t *)srcs[q] + soff) + i));
		x = q ? rop(op, x, v) : v;
	}
	dst[i] = cvt<T>::out(x);
	if (dst2)
		dst2[i] = dst[i];
}
template <typename T> MORI_DEVICE void store16(T *dst, T *dst2, uint64_t j, const float *acc)
{
	mori_vec16 o;
	T *oe = (T *)&o;
#pragma unroll
	for (unsigned k = 0; k < 16 / sizeof(T); k++)
		oe[k] = cvt<T>::out(acc[k]);
	((mori_vec16 *)dst)[j] = o;
	if (dst2)
		((mori_vec16 *)dst2)[j] = o;
}

/* V vectors of 16 bytes a thread, each from Q <= 8 sources (n <= Q), all V x Q loads issued before
 * any is used: with few ranks a thread still has 8 loads in flight. */
template <typename T, int V, int Q>
COLL_CALL void reduce_vq(int op, int n, T *dst, T *dst2, const uint64_t *srcs, uint64_t soff, uint64_t nv)
{
	const unsigned t = threadIdx.x, nt = blockDim.x;
	constexpr unsigned per = 16 / sizeof(T);
	for (uint64_t j0 = t; j0 < nv; j0 += (uint64_t)V * nt) {
		mori_vec16 v[V][Q];
#pragma unroll
		for (int x = 0; x < V; x++)
#pragma unroll
			for (int q = 0; q < Q; q++)
				if (q < n && j0 + (uint64_t)x * nt < nv)
					v[x][q] = ld16((const uint8_t *)srcs[q] + soff + 16 * (j0 + (uint64_t)x * nt));
#pragma unroll
		for (int x = 0; x < V; x++) {
			uint64_t j = j0 + (uint64_t)x * nt;
			if (j >= nv)
				break;
			float acc[per];
#pragma unroll
			for (int q = 0; q < Q; q++) {
				if (q >= n)
					break;
				fold16<T>(op, acc, v[x][q], q == 0);
			}
			store16<T>(dst, dst2, j, acc);
		}
	}
}

/* dst[i] = op over q < n of src_q[i], i in [0, m), src_q = srcs[q] + soff bytes; also to dst2 when
 * non-NULL. One vector a thread at a time (8 sources' loads in flight), or with vec
 * (MORI_COLL_F_VEC) several at 2 and 4 ranks (measured no better: docs/ccl.md). */
#define QB 8
template <typename T>
COLL_CALL void reduce(dev_t *d, int op, T *dst, T *dst2, const uint64_t *srcs, uint64_t soff, uint64_t m, bool vec)
{
	const int n = d->n;
	const unsigned t = threadIdx.x, nt = blockDim.x;
	const unsigned per = 16 / sizeof(T);
	uintptr_t al = (uintptr_t)dst | (uintptr_t)dst2 | (uintptr_t)soff;
	for (int q = 0; q < n; q++)
		al |= (uintptr_t)srcs[q];
	uint64_t i0 = 0;
	if ((al & 15) == 0) {
		uint64_t nv = m / per;
		if (n <= 2 && vec)
			reduce_vq<T, 4, 2>(op, n, dst, dst2, srcs, soff, nv);
		else if (n <= 4 && vec)
			reduce_vq<T, 2, 4>(op, n, dst, dst2, srcs, soff, nv);
		else if (n <= 8)
			reduce_vq<T, 1, 8>(op, n, dst, dst2, srcs, soff, nv);
		else
			for (uint64_t j = t; j < nv; j += nt) {
				float acc[16 / sizeof(T)];
				/* up to QB sources' loads issued before any is used */
				for (int q0 = 0; q0 < n; q0 += QB) {
					mori_vec16 v[QB];
#pragma unroll
					for (int u = 0; u < QB; u++)
						if (q0 + u < n)
							v[u] = ld16((const uint8_t *)srcs[q0 + u] + soff + 16 * j);
#pragma unroll
					for (int u = 0; u < QB; u++) {
						if (q0 + u >= n)
							break;
						fold16<T>(op, acc, v[u], q0 + u == 0);
					}
				}
				store16<T>(dst, dst2, j, acc);
			}
		i0 = nv * per;
	}
	for (uint64_t i = i0 + t; i < m; i += nt)
		reduce1<T>(op, n, dst, dst2, srcs, soff, i);
}

MORI_DEVICE int esize(uint32_t dt) { return dt == MORI_COLL_DT_F32 ? 4 : 2; }

/* A: mori_coll_args or mori_coll_flat_args (their dtype, op and flags) */
template <typename T, typename A>
MORI_DEVICE void reduce_dt(dev_t *d, const A &a, uint64_t dst, uint64_t dst2, const uint64_t *srcs, uint64_t soff,
			   uint64_t m)
{
	reduce<T>(d, (int)a.op, (T *)dst, (T *)dst2, srcs, soff, m, a.flags & MORI_COLL_F_VEC);
}
template <typename A>
MORI_DEVICE void reduce_any(dev_t *d, const A &a, uint64_t dst, uint64_t dst2, const uint64_t *srcs, uint64_t soff,
			    uint64_t m)
{
	if (a.dtype == MORI_COLL_DT_F32)
		reduce_dt<float>(d, a, dst, dst2, srcs, soff, m);
	else if (a.dtype == MORI_COLL_DT_F16)
		reduce_dt<__half>(d, a, dst, dst2, srcs, soff, m);
	else
		reduce_dt<bf16>(d, a, dst, dst2, srcs, soff, m);
}
} // namespace mori_coll
#endif
