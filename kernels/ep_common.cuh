// MORI-EP's device helpers, shared by the intranode kernels (ep.cu) and the internode ones
// (ep_internode.cu): the handle's parts, the status record, the bounded wait, the row copy, the
// per-bin scan, fp8 quantisation and the combine's sums. One source for CUDA and HIP through
// mori/device/gpu.h; peers' heaps are reached through the device API's peer table (same node).
#ifndef MORI_EP_COMMON_CUH
#define MORI_EP_COMMON_CUH
#include "mori/device/shmem.cuh"
#include "ep_kernels.h"
#include "ep_fp8.h"

namespace mori_ep_impl {
using namespace mori_shmem_impl;
typedef const struct mori_ep_kargs &args;

MORI_DEVICE uint8_t *local(args a, uint64_t part)
{
	return (uint8_t *)heap_base((state)a.st) + a.sym + part;
}
MORI_DEVICE uint8_t *peer(args a, int pe, uint64_t part)
{
	return peer_addr((state)a.st, a.sym + part, pe);
}
MORI_DEVICE int shfl(int v, int src)
{
	return mori_warp_bcast(v, src);
}
MORI_DEVICE int64_t shfl64(int64_t v, int src)
{
	uint32_t lo = (uint32_t)shfl((int)(uint32_t)v, src), hi = (uint32_t)shfl((int)(uint32_t)(v >> 32), src);
	return (int64_t)((uint64_t)hi << 32 | lo);
}
MORI_DEVICE float shflf(float v, int src)
{
	return __int_as_float(shfl(__float_as_int(v), src));
}

// The first failure sticks: code, what, a, b (mori_ep_status reads them).
MORI_DEVICE void fail(args a, int code, int what, int x, int y)
{
	int32_t *s = (int32_t *)local(a, a.L.status);
	if (atomicCAS((int *)s, 0, code) == 0) {
		s[1] = what;
		s[2] = x;
		s[3] = y;
		mori_fence_data_before_host_signal();
	}
}
// Wait until *w >= want (w written by peers with release): 0, or the abort's / the deadline's
// code (recorded). `kernel` and `who` name the wait in the record. The clock is read every 1024
// polls, the abort word every MORI_SHMEM_ABORT_POLL.
MORI_DEVICE int wait_ge(args a, const uint64_t *w, uint64_t want, int kernel, int who)
{
	mori_deadline dl;
	int rc = mori_wait_until(
		1024u, [&] { return mori_relaxed_load_sys((const volatile uint64_t *)w) >= want; },
		[&](unsigned k) {
			int r = k % MORI_SHMEM_ABORT_POLL ? 0 : abort_code((state)a.st);
			if (r) {
				fail(a, r, MORI_EP_ERR_ABORT, kernel, who);
				return r;
			}
			if (dl.passed(a.timeout_ns)) {
				fail(a, MORI_ETIMEDOUT, MORI_EP_ERR_TIMEOUT, kernel, who);
				return (int)MORI_ETIMEDOUT;
			}
			return 0;
		});
	if (rc)
		return rc;
	mori_acquire_after_wait_sys();
	return 0;
}
// Block-uniform: true when the handle is destroyed (a graph replayed after mori_ep_destroy). Read
// first, before any heap address is formed: the block and even the group may be gone.
MORI_DEVICE bool retired(args a)
{
	__shared__ int dead;
	if (mori_block_thread() == 0) {
		volatile uint64_t *g = (volatile uint64_t *)a.live + a.live_slot;
		dead = mori_relaxed_load_sys(g) != a.gen;
		if (dead) {
			struct mori_ep_live *L = (struct mori_ep_live *)a.live;
			*(volatile uint64_t *)&L->late_gen = a.gen;
			*(volatile uint64_t *)&L->late_count = *(volatile uint64_t *)&L->late_count + 1;
			mori_fence_data_before_host_signal();
		}
	}
	__syncthreads();
	return dead != 0;
}
MORI_DEVICE uint64_t epoch(args a)
{
	return *(volatile uint64_t *)local(a, a.L.epoch);
}
MORI_DEVICE int32_t *pos_tab(args a) { return (int32_t *)local(a, a.L.pos); }
MORI_DEVICE int32_t *base_tab(args a) { return (int32_t *)local(a, a.L.base); }

// One warp copies n bytes (a multiple of 16; both 16-byte aligned): 8, then 4 vectors in flight a
// lane (the loads of a step issue before its stores: memory-level parallelism bounds the rate).
template <int V> MORI_DEVICE void copy_row_step(mori_vec16 *d, const mori_vec16 *s, int nv, int &i)
{
	for (; i + (V - 1) * MORI_WARP_SIZE < nv; i += V * MORI_WARP_SIZE) {
		mori_vec16 v[V];
#pragma unroll
		for (int q = 0; q < V; q++)
			v[q] = s[i + q * MORI_WARP_SIZE];
#pragma unroll
		for (int q = 0; q < V; q++)
			mori_store_once16(d + i + q * MORI_WARP_SIZE, v[q]);
	}
}
MORI_DEVICE void copy_row(uint8_t *dst, const uint8_t *src, int n, unsigned lane)
{
	const mori_vec16 *s = (const mori_vec16 *)src;
	mori_vec16 *d = (mori_vec16 *)dst;
	int nv = n >> 4, i = (int)lane;
	copy_row_step<8>(d, s, nv, i);
	copy_row_step<4>(d, s, nv, i);
	for (; i < nv; i += MORI_WARP_SIZE)
		mori_store_once16(d + i, s[i]);
}

#define EP_MAX_WARPS (1024 / MORI_WARP_SIZE)
#define EP_MAX_LOCAL 1024 // EP_MAX_EXPERTS_PER_RANK (libclient/ep_int.h)

// Block b's scan of this rank's tokens for bin b (normal: rank b; low-latency: expert b): each
// token's position among this rank's rows for b, into the positions table; the count (in every
// thread). Index errors are recorded once, by block 0.
MORI_DEVICE int bin_scan(args a, int b)
{
	const int K = a.topk, E = a.world * a.epr, T = a.num_tokens, W = a.world;
	const bool ll = a.mode == MORI_EP_KMODE_LL;
	const int32_t *idx = (const int32_t *)a.indices;
	int32_t *pos = pos_tab(a);
	const unsigned tid = mori_block_thread();
	__shared__ int running;
	if (tid == 0)
		running = 0;
	__syncthreads();
	for (int t0 = 0; t0 < T; t0 += (int)mori_block_threads()) {
		int t = t0 + (int)tid, hitk = -1;
		bool hit = false;
		if (t < T)
			for (int k = 0; k < K; k++) {
				int v = idx[t * K + k];
				if (v < -1 || v >= E) {
					if (b == 0)
						fail(a, MORI_EINVAL, MORI_EP_ERR_INDEX, t * K + k, v);
					continue;
				}
				if (v < 0)
					continue;
				if (ll) {
					if (v == b) {
						if (hitk < 0)
							hitk = k;
						else
							pos[t * K + k] = -1; // a repeated expert: its first slot carries it
					}
				} else if (v / a.epr == b)
					hit = true;
			}
		if (ll)
			hit = hitk >= 0;
		int p = mori_block_rank(hit, &running);
		if (t < T) {
			if (ll) {
				if (hitk >= 0)
					pos[t * K + hitk] = p;
			} else
				pos[t * W + b] = hit ? p : -1;
		}
	}
	return running;
}
// Block 0 of the layout keeps combine's copy of the routing (and low-latency's default weights).
MORI_DEVICE void keep_routing(args a)
{
	const int32_t *idx = (const int32_t *)a.indices;
	int32_t *route = (int32_t *)local(a, a.L.route);
	float *rw = (float *)local(a, a.L.rweight);
	for (int i = (int)mori_block_thread(); i < a.num_tokens * a.topk; i += (int)mori_block_threads()) {
		route[i] = idx[i];
		rw[i] = a.weights ? ((const float *)a.weights)[i] : 0.f;
	}
}
// The bin of item j in the inclusive prefix pre[0..nl) of the bins' counts: the first l with
// pre[l] > j.
MORI_DEVICE int bin_of(const int *pre, int nl, int j)
{
	int lo = 0, hi = nl - 1;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (pre[mid] > j)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

// The block's inclusive prefix of the clamped per-bin counts, in pre[0..nl) (shared memory).
MORI_DEVICE int count_prefix(const int32_t *count, int nl, int cap, int *pre, int *tmp)
{
	const int tid = (int)mori_block_thread(), nt = (int)mori_block_threads();
	for (int i = tid; i < nl; i += nt) {
		int c = count[i];
		pre[i] = c < 0 ? 0 : c > cap ? cap : c;
	}
	__syncthreads();
	for (int off = 1; off < nl; off <<= 1) { // Hillis-Steele: log2(nl) steps
		for (int i = tid; i < nl; i += nt)
			tmp[i] = pre[i] + (i >= off ? pre[i - off] : 0);
		__syncthreads();
		for (int i = tid; i < nl; i += nt)
			pre[i] = tmp[i];
		__syncthreads();
	}
	return pre[nl - 1];
}

MORI_DEVICE float bf16_to_f32(uint32_t h) { return __int_as_float((int)(h << 16)); }
MORI_DEVICE uint32_t f32_to_bf16(float f)
{
	uint32_t u = (uint32_t)__float_as_int(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return 0x7fc0u; // NaN
	u += 0x7fffu + ((u >> 16) & 1u); // round to nearest even
	return u >> 16;
}
// Two floats to e4m3 bytes (lo in the low byte): the hardware conversion where there is one.
MORI_DEVICE uint32_t e4m3x2(float lo, float hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	unsigned short r;
	asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
	return r;
#else
	return ep_f32_to_e4m3(lo) | ep_f32_to_e4m3(hi) << 8;
#endif
}
// A lane's 8 channels at ch of a bf16 row (act: the lane has them), quantised by ep_fp8.h's rule
// (16 lanes x 8 channels a group of 128): the e4m3 bytes in lo, hi and the group's scale in sc.
// Every lane of the warp calls it.
MORI_DEVICE void quant8(const uint8_t *row, int ch, bool act, unsigned lane, uint32_t &lo, uint32_t &hi, float &sc)
{
	mori_vec16 v = {0, 0, 0, 0};
	if (act)
		v = *(const mori_vec16 *)(row + (size_t)ch * 2);
	const uint32_t u[4] = {v.x, v.y, v.z, v.w};
	float f[8], amax = 0.f;
#pragma unroll
	for (int e = 0; e < 4; e++) {
		f[2 * e] = bf16_to_f32(u[e] & 0xffffu);
		f[2 * e + 1] = bf16_to_f32(u[e] >> 16);
	}
#pragma unroll
	for (int i = 0; i < 8; i++)
		amax = fmaxf(amax, fabsf(f[i]));
#pragma unroll
	for (int off = 1; off < 16; off <<= 1) // the group's 16 lanes
		amax = fmaxf(amax, shflf(amax, (int)(lane ^ (unsigned)off)));
	const float mul = ep_fp8_mult(amax);
	sc = ep_fp8_scale(amax);
	lo = e4m3x2(f[0] * mul, f[1] * mul) | e4m3x2(f[2] * mul, f[3] * mul) << 16;
	hi = e4m3x2(f[4] * mul, f[5] * mul) | e4m3x2(f[6] * mul, f[7] * mul) << 16;
}

// Combine's indices, where the caller gives them, must be dispatch's: a difference is recorded.
MORI_DEVICE void check_route(args a, int t, unsigned lane, const int32_t *route)
{
	const int32_t *given = (const int32_t *)a.indices;
	const int K = a.topk;
	if (given && (int)lane < K && given[t * K + lane] != route[t * K + lane])
		fail(a, MORI_EINVAL, MORI_EP_ERR_ROUTE, t * K + (int)lane, given[t * K + lane]);
}
// The lanes' rows of a token (row and weight where ok), compacted in lane order into this warp's
// srow and swt (shared memory); their count. Every lane calls it.
MORI_DEVICE int gather_rows(uint64_t *srow, float *swt, bool ok, const uint8_t *row, float w, unsigned lane)
{
	const uint64_t m = mori_warp_ballot(ok);
	if (ok) {
		int at = __popcll(m & ((1ull << lane) - 1));
		srow[at] = (uint64_t)row;
		swt[at] = w;
	}
	mori_sync_warp();
	return __popcll(m);
}
// The combine's sums: row vector v (bf16 x 8 or f32 x 4) weighted wj into acc (fp32), and acc
// back to a vector of the output's dtype.
MORI_DEVICE void accumulate(float *acc, const mori_vec16 &v, float wj, bool bf)
{
	const uint32_t u[4] = {v.x, v.y, v.z, v.w};
	if (bf)
		for (int e2 = 0; e2 < 4; e2++) {
			acc[2 * e2] += wj * bf16_to_f32(u[e2] & 0xffffu);
			acc[2 * e2 + 1] += wj * bf16_to_f32(u[e2] >> 16);
		}
	else
		for (int e2 = 0; e2 < 4; e2++)
			acc[e2] += wj * __int_as_float((int)u[e2]);
}
MORI_DEVICE mori_vec16 pack_sum(const float *acc, bool bf)
{
	mori_vec16 r;
	if (bf) {
		r.x = f32_to_bf16(acc[0]) | f32_to_bf16(acc[1]) << 16;
		r.y = f32_to_bf16(acc[2]) | f32_to_bf16(acc[3]) << 16;
		r.z = f32_to_bf16(acc[4]) | f32_to_bf16(acc[5]) << 16;
		r.w = f32_to_bf16(acc[6]) | f32_to_bf16(acc[7]) << 16;
	} else {
		r.x = (uint32_t)__float_as_int(acc[0]);
		r.y = (uint32_t)__float_as_int(acc[1]);
		r.z = (uint32_t)__float_as_int(acc[2]);
		r.w = (uint32_t)__float_as_int(acc[3]);
	}
	return r;
}

// The combine's reduce, a warp per token: rows(t, lane, row, w) says where lane's row of token t
// is and its weight (false: the lane has none). The rows are summed in fp32, BATCH loads in
// flight, and written as a.dtype into out [T, H]. The caller has waited for every rank's rows.
template <int BATCH, typename Rows> MORI_DEVICE void reduce_tokens(args a, Rows rows)
{
	const bool bf = a.dtype == MORI_EP_KDTYPE_BF16;
	const unsigned lane = mori_lane(), wid = mori_block_thread() / MORI_WARP_SIZE;
	const int32_t *route = (const int32_t *)local(a, a.L.route);
	const int nv = a.tok_bytes >> 4;
	__shared__ uint64_t srow[EP_MAX_WARPS][32]; // the token's source rows (addresses), compacted
	__shared__ float swt[EP_MAX_WARPS][32];
	for (int t = (int)mori_global_warp(); t < a.num_tokens; t += (int)mori_grid_warps()) {
		check_route(a, t, lane, route);
		const uint8_t *row = nullptr;
		float w = 1.f;
		const bool ok = rows(t, lane, row, w);
		const int ns = gather_rows(srow[wid], swt[wid], ok, row, w, lane);
		uint8_t *o = (uint8_t *)a.out + (size_t)t * a.tok_bytes;
		for (int c = (int)lane; c < nv; c += MORI_WARP_SIZE) {
			float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
			for (int j0 = 0; j0 < ns; j0 += BATCH) { // BATCH loads in flight, then their sums
				mori_vec16 v[BATCH];
#pragma unroll
				for (int q = 0; q < BATCH; q++)
					if (j0 + q < ns)
						v[q] = ((const mori_vec16 *)srow[wid][j0 + q])[c];
#pragma unroll
				for (int q = 0; q < BATCH; q++) {
					if (j0 + q >= ns)
						break;
					accumulate(acc, v[q], swt[wid][j0 + q], bf);
				}
			}
			((mori_vec16 *)o)[c] = pack_sum(acc, bf);
		}
		mori_sync_warp(); // the next token's table overwrites this one
	}
}
} // namespace mori_ep_impl
#endif
