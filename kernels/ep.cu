// MORI-EP: MoE dispatch and combine on the symmetric heap (kernels/ep_kernels.h has the plan and
// the argument block; include/mori_ep.h the semantics). One source for CUDA and HIP through
// mori_gpu.h; peers' heaps are reached through the device API's peer table (same node).
//
// Ordering, per call of epoch e (the handle's local epoch word + 1 during dispatch):
//   layout:   meta[bin][me] at the bin's owner := e << 32 | n (release); the base of my rows at
//             the owner is the sum of lower ranks' n, read after their tag reads e (acquire).
//   send:     rows and their metadata to the owners, then +1 on every rank's ddone[me] per block
//             (release, after a system-scope fence of every thread: the block's stores first).
//   recv:     waits ddone[s] >= e x nblocks for every s (acquire), sums meta into count, epoch := e.
//   combine:  the same with cdone: rows go back to their home ranks, which wait and sum.
// A peer's next write to a buffer needs a signal this rank sends only after it has finished
// reading that buffer (see docs/ep.md, "why no buffer is overwritten early").
#include "mori_shmem.cuh"
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
MORI_DEVICE uint64_t now_ns(void)
{
#ifdef MORI_HIP
	return wall_clock64() * 10; // 100 MHz constant clock on gfx942/gfx950
#else
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
#endif
}
MORI_DEVICE uint64_t warp_ballot(bool p)
{
#ifdef MORI_HIP
	return __warp_ballot(p);
#else
	return __ballot_sync(0xffffffffu, p);
#endif
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
// code (recorded). `kernel` and `who` name the wait in the record.
MORI_DEVICE int wait_ge(args a, const uint64_t *w, uint64_t want, int kernel, int who)
{
	spin s;
	uint64_t t0 = 0;
	while (mori_relaxed_load_sys((const volatile uint64_t *)w) < want) {
		int rc = s.poll((state)a.st);
		if (rc) {
			fail(a, rc, MORI_EP_ERR_ABORT, kernel, who);
			return rc;
		}
		if ((s.n & 1023u) == 0) {
			uint64_t t = now_ns();
			if (!t0)
				t0 = t;
			else if (t - t0 > a.timeout_ns) {
				fail(a, MORI_ETIMEDOUT, MORI_EP_ERR_TIMEOUT, kernel, who);
				return MORI_ETIMEDOUT;
			}
		}
	}
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
MORI_DEVICE void copy_row(uint8_t *dst, const uint8_t *src, int n, unsigned lane)
{
	const mori_vec16 *s = (const mori_vec16 *)src;
	mori_vec16 *d = (mori_vec16 *)dst;
	int nv = n >> 4, i = (int)lane;
	for (; i + 7 * MORI_WARP_SIZE < nv; i += 8 * MORI_WARP_SIZE) {
		mori_vec16 v[8];
#pragma unroll
		for (int q = 0; q < 8; q++)
			v[q] = s[i + q * MORI_WARP_SIZE];
#pragma unroll
		for (int q = 0; q < 8; q++)
			mori_store_once16(d + i + q * MORI_WARP_SIZE, v[q]);
	}
	for (; i + 3 * MORI_WARP_SIZE < nv; i += 4 * MORI_WARP_SIZE) {
		mori_vec16 v[4];
#pragma unroll
		for (int q = 0; q < 4; q++)
			v[q] = s[i + q * MORI_WARP_SIZE];
#pragma unroll
		for (int q = 0; q < 4; q++)
			mori_store_once16(d + i + q * MORI_WARP_SIZE, v[q]);
	}
	for (; i < nv; i += MORI_WARP_SIZE)
		mori_store_once16(d + i, s[i]);
}

#define EP_MAX_WARPS (1024 / MORI_WARP_SIZE)
#define EP_MAX_LOCAL 1024 // EP_MAX_EXPERTS_PER_RANK (libclient/ep_int.h)

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

// Every thread's stores of this block are performed system-wide, then threads 0..world-1 add 1
// to word `part`[me] of rank tid (the block's share of the per-call signal).
MORI_DEVICE void signal_all(args a, uint64_t part)
{
	mori_complete_stores_sys();
	__syncthreads();
	int t = (int)mori_block_thread();
	if (t < a.world)
		mori_release_add_sys((uint64_t *)peer(a, t, part) + a.rank, 1);
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

// Token t's bf16 row, quantised once (ep_fp8.h's rule: 16 lanes x 8 channels a group of 128), to
// every destination of mask m (lane j holds destination j's owner and slot): fp8 bytes into the
// receive row, each group's scale into the receive scales.
MORI_DEVICE void quant_rows(args a, int t, uint64_t m, int owner, int64_t slot, unsigned lane)
{
	const int H = a.hidden;
	const uint8_t *row = (const uint8_t *)a.input + (size_t)t * H * 2;
	for (int c0 = 0; c0 < H; c0 += MORI_WARP_SIZE * 8) {
		const int ch = c0 + (int)lane * 8;
		const bool act = ch < H; // H % 128 == 0: a group's 16 lanes are all in or all out
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
		const float mul = ep_fp8_mult(amax), sc = ep_fp8_scale(amax);
		const uint32_t lo = e4m3x2(f[0] * mul, f[1] * mul) | e4m3x2(f[2] * mul, f[3] * mul) << 16;
		const uint32_t hi = e4m3x2(f[4] * mul, f[5] * mul) | e4m3x2(f[6] * mul, f[7] * mul) << 16;
		for (uint64_t mm = m; mm; mm &= mm - 1) {
			const int j = __ffsll((long long)mm) - 1, o = shfl(owner, j);
			const int64_t sl = shfl64(slot, j);
			if (act) {
				*(uint2 *)(peer(a, o, a.L.tok) + sl * a.L.token_stride + ch) = make_uint2(lo, hi);
				if ((lane & 15u) == 0)
					((float *)(peer(a, o, a.L.scale) + sl * a.L.scale_stride))[ch / EP_FP8_GROUP] = sc;
			}
		}
	}
}
} // namespace mori_ep_impl

using namespace mori_ep_impl;

// grid = L.bins, block = MORI_EP_LAYOUT_THREADS. Block b: which tokens go to bin b (normal: rank
// b; low-latency: expert b), their positions among this rank's rows for b, the count to b's
// owner, and where this rank's rows start there (the lower ranks' counts).
MORI_KERNEL void __launch_bounds__(MORI_EP_LAYOUT_THREADS) mori_ep_layout(const struct mori_ep_kargs a)
{
	if (retired(a))
		return;
	const int b = blockIdx.x, K = a.topk, E = a.world * a.epr, T = a.num_tokens, W = a.world;
	const bool ll = a.mode == MORI_EP_KMODE_LL;
	const int owner = ll ? b / a.epr : b, bl = ll ? b % a.epr : 0;
	const uint64_t e = epoch(a) + 1;
	const int32_t *idx = (const int32_t *)a.indices;
	int32_t *pos = pos_tab(a);
	const unsigned tid = mori_block_thread(), lane = tid % MORI_WARP_SIZE, wid = tid / MORI_WARP_SIZE;
	const unsigned nwarp = mori_block_threads() / MORI_WARP_SIZE;
	__shared__ int wcnt[MORI_EP_LAYOUT_THREADS / 32];
	__shared__ int running, basesum;
	if (tid == 0)
		running = basesum = 0;
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
		uint64_t m = warp_ballot(hit);
		int before = __popcll(m & ((1ull << lane) - 1));
		if (lane == 0)
			wcnt[wid] = __popcll(m);
		__syncthreads();
		int wbase = 0, total = 0;
		for (unsigned i = 0; i < nwarp; i++) {
			wbase += i < wid ? wcnt[i] : 0;
			total += wcnt[i];
		}
		int p = running + wbase + before;
		if (t < T) {
			if (ll) {
				if (hitk >= 0)
					pos[t * K + hitk] = p;
			} else
				pos[t * W + b] = hit ? p : -1;
		}
		__syncthreads();
		if (tid == 0)
			running += total;
		__syncthreads();
	}
	if (tid == 0)
		mori_release_store_sys((uint64_t *)peer(a, owner, a.L.meta) + (size_t)bl * W + a.rank, e << 32 | (uint32_t)running);
	for (int s = (int)tid; s < a.rank; s += (int)mori_block_threads()) {
		const uint64_t *m = (const uint64_t *)peer(a, owner, a.L.meta) + (size_t)bl * W + s;
		if (wait_ge(a, m, e << 32, 1, s) == 0)
			atomicAdd(&basesum, (int)(uint32_t)mori_relaxed_load_sys((const volatile uint64_t *)m));
	}
	__syncthreads();
	if (tid == 0)
		base_tab(a)[b] = basesum;
	if (b == 0) { // combine's copy of the routing (and low-latency's default weights)
		int32_t *route = (int32_t *)local(a, a.L.route);
		float *rw = (float *)local(a, a.L.rweight);
		for (int i = (int)tid; i < T * K; i += (int)mori_block_threads()) {
			route[i] = idx[i];
			rw[i] = a.weights ? ((const float *)a.weights)[i] : 0.f;
		}
	}
}

// grid = nblocks: a warp per token; each destination (lane j: rank j, or top-k slot j) gets the
// row once, with its weights, indices, scales and source position.
MORI_KERNEL void __launch_bounds__(1024) mori_ep_dispatch_send(const struct mori_ep_kargs a)
{
	if (retired(a))
		return;
	const int K = a.topk, W = a.world, M = a.max_tok, E = W * a.epr;
	const bool ll = a.mode == MORI_EP_KMODE_LL;
	const unsigned lane = mori_lane();
	const int P = ll ? K : W;
	const int32_t *idx = (const int32_t *)a.indices, *pos = pos_tab(a), *base = base_tab(a);
	const uint8_t *in = (const uint8_t *)a.input;
	const float *wt = (const float *)a.weights;
	const int scw = a.scale_bytes / 4; // scale bytes are a multiple of 4 (checked at creation)
	for (int t = (int)mori_global_warp(); t < a.num_tokens; t += (int)mori_grid_warps()) {
		bool ok = false;
		int owner = 0, src = 0;
		int64_t slot = 0;
		if ((int)lane < P) {
			if (!ll) {
				int p = pos[t * W + lane];
				if (p >= 0) {
					ok = true;
					owner = (int)lane;
					slot = (int64_t)base[lane] + p;
					src = a.rank * M + t;
				}
			} else {
				int v = idx[t * K + lane];
				int p = v >= 0 && v < E ? pos[t * K + lane] : -1;
				if (p >= 0) {
					ok = true;
					owner = v / a.epr;
					slot = (int64_t)(v % a.epr) * W * M + base[v] + p;
					src = (a.rank * M + t) * K + (int)lane;
				}
			}
			if (ok && (slot < 0 || slot >= a.L.recv_slots))
				ok = false; // a base from a peer that failed: never write outside the buffer
		}
		uint64_t m = warp_ballot(ok);
		if (a.quant)
			quant_rows(a, t, m, owner, slot, lane);
		while (m) {
			int j = __ffsll((long long)m) - 1;
			m &= m - 1;
			int o = shfl(owner, j), sp = shfl(src, j);
			int64_t sl = shfl64(slot, j);
			if (!a.quant)
				copy_row(peer(a, o, a.L.tok) + sl * a.L.token_stride, in + (size_t)t * a.tok_bytes, a.tok_bytes,
					 lane);
			if ((int)lane < K) {
				((float *)peer(a, o, a.L.w))[sl * K + lane] = wt ? wt[t * K + lane] : 0.f;
				((int32_t *)peer(a, o, a.L.idx))[sl * K + lane] = idx[t * K + lane];
			}
			if (scw && !a.quant) {
				uint32_t *ds = (uint32_t *)(peer(a, o, a.L.scale) + sl * a.L.scale_stride);
				const uint32_t *ss = (const uint32_t *)((const uint8_t *)a.scales + (size_t)t * a.scale_bytes);
				for (int i = (int)lane; i < scw; i += MORI_WARP_SIZE)
					ds[i] = ss[i];
			}
			if (lane == 0)
				((int32_t *)peer(a, o, a.L.src))[sl] = sp;
		}
	}
	signal_all(a, a.L.ddone);
}

// grid 1: every source's blocks have landed here; the counts; the epoch advances.
MORI_KERNEL void mori_ep_dispatch_recv(const struct mori_ep_kargs a)
{
	if (retired(a))
		return;
	const uint64_t e = epoch(a) + 1;
	const int W = a.world, tid = (int)mori_block_thread(), nt = (int)mori_block_threads();
	const uint64_t *dd = (const uint64_t *)local(a, a.L.ddone);
	for (int s = tid; s < W; s += nt)
		wait_ge(a, dd + s, e * (uint64_t)a.nblocks, 3, s);
	__syncthreads();
	const uint64_t *meta = (const uint64_t *)local(a, a.L.meta);
	int32_t *count = (int32_t *)local(a, a.L.count);
	for (int l = tid; l < a.L.bins_local; l += nt) {
		int64_t sum = 0;
		for (int s = 0; s < W; s++) {
			uint64_t v = mori_relaxed_load_sys((const volatile uint64_t *)(meta + (size_t)l * W + s));
			uint32_t n = (uint32_t)v;
			if (v >> 32 == e && n <= (uint32_t)a.max_tok)
				sum += n;
		}
		count[l] = (int32_t)sum;
	}
	__syncthreads();
	if (tid == 0)
		*(volatile uint64_t *)local(a, a.L.epoch) = e;
}

// grid = nblocks: a warp per received row; the row goes back to its source token's home rank.
MORI_KERNEL void __launch_bounds__(1024) mori_ep_combine_send(const struct mori_ep_kargs a)
{
	if (retired(a))
		return;
	const int K = a.topk, W = a.world, M = a.max_tok;
	const bool ll = a.mode == MORI_EP_KMODE_LL;
	const unsigned lane = mori_lane();
	const int32_t *count = (const int32_t *)local(a, a.L.count), *srcp = (const int32_t *)local(a, a.L.src);
	const uint8_t *eo = (const uint8_t *)a.input;
	const int64_t per = (int64_t)W * M;
	if (a.pull) { // grid 1: the rows stay in cin (the stream's earlier kernels wrote them); say so
		mori_complete_stores_sys();
		__syncthreads();
		int t = (int)mori_block_thread();
		if (t < W)
			mori_release_add_sys((uint64_t *)peer(a, t, a.L.cdone) + a.rank, (uint64_t)a.nblocks);
		return;
	}
	__shared__ int pre[EP_MAX_LOCAL], tmp[EP_MAX_LOCAL];
	const int nl = a.L.bins_local, total = count_prefix(count, nl, (int)per, pre, tmp);
	// every received row of every local expert is one item, spread over all warps
	for (int j = (int)mori_global_warp(); j < total; j += (int)mori_grid_warps()) {
		int lo = 0, hi = nl - 1; // the first l with pre[l] > j
		while (lo < hi) {
			int mid = (lo + hi) / 2;
			if (pre[mid] > j)
				hi = mid;
			else
				lo = mid + 1;
		}
		const int l = lo, i = j - (l ? pre[l - 1] : 0);
		int64_t slot = ll ? l * per + i : i;
		int sp = srcp[slot], s, row;
		if (!ll) {
			s = sp / M;
			row = a.rank * M + sp % M;
		} else {
			s = sp / (M * K);
			row = sp % (M * K); // token x K + k
		}
		if (sp < 0 || s >= W)
			continue; // never written (a failed peer): nothing to send back
		copy_row(peer(a, s, a.L.comb) + (int64_t)row * a.L.token_stride, eo + slot * a.tok_bytes, a.tok_bytes, lane);
	}
	signal_all(a, a.L.cdone);
}

// grid = nblocks: waits for every rank's rows, then a warp per token sums them (fp32), weighted
// in low-latency mode, and writes out [T, H] of a.dtype.
MORI_KERNEL void __launch_bounds__(1024) mori_ep_combine_reduce(const struct mori_ep_kargs a)
{
	if (retired(a))
		return;
	const int K = a.topk, W = a.world, M = a.max_tok, E = W * a.epr;
	const bool ll = a.mode == MORI_EP_KMODE_LL, bf = a.dtype == MORI_EP_KDTYPE_BF16;
	const uint64_t e = epoch(a);
	const int tid = (int)mori_block_thread();
	const uint64_t *cd = (const uint64_t *)local(a, a.L.cdone);
	if (tid < W)
		wait_ge(a, cd + tid, e * (uint64_t)a.nblocks, 5, tid);
	__syncthreads();
	mori_acquire_after_wait_sys();
	const unsigned lane = mori_lane();
	const int32_t *pos = pos_tab(a), *route = (const int32_t *)local(a, a.L.route);
	const float *rw = a.weights ? (const float *)a.weights : (const float *)local(a, a.L.rweight);
	const int32_t *given = (const int32_t *)a.indices;
	const uint8_t *comb = local(a, a.L.comb);
	const int32_t *base = base_tab(a);
	const int P = ll ? K : W, nv = a.tok_bytes >> 4;
	const unsigned wid = mori_block_thread() / MORI_WARP_SIZE;
	__shared__ uint64_t srow[EP_MAX_WARPS][32]; // the token's source rows (addresses), compacted
	__shared__ float swt[EP_MAX_WARPS][32];
	for (int t = (int)mori_global_warp(); t < a.num_tokens; t += (int)mori_grid_warps()) {
		if (given && (int)lane < K && given[t * K + lane] != route[t * K + lane])
			fail(a, MORI_EINVAL, MORI_EP_ERR_ROUTE, t * K + (int)lane, given[t * K + lane]);
		bool ok = false;
		const uint8_t *row = nullptr;
		float w = 1.f;
		if ((int)lane < P) {
			if (!ll) {
				int p = pos[t * W + lane];
				ok = p >= 0;
				if (ok)
					row = a.pull ? peer(a, (int)lane, a.L.cin) + ((int64_t)base[lane] + p) * a.L.token_stride
						     : comb + ((int64_t)lane * M + t) * a.L.token_stride;
			} else {
				int v = route[t * K + lane];
				int p = v >= 0 && v < E ? pos[t * K + lane] : -1;
				ok = p >= 0;
				if (ok)
					row = a.pull ? peer(a, v / a.epr, a.L.cin) +
							       ((int64_t)(v % a.epr) * W * M + base[v] + p) * a.L.token_stride
						     : comb + ((int64_t)t * K + lane) * a.L.token_stride;
				w = rw[t * K + lane];
			}
			if (ok && a.pull && (row < peer(a, ll ? route[t * K + lane] / a.epr : (int)lane, a.L.cin) ||
					     row >= peer(a, ll ? route[t * K + lane] / a.epr : (int)lane, a.L.cin) +
							    a.L.recv_slots * a.L.token_stride))
				ok = false; // a base from a peer that failed: never read outside its buffer
		}
		const uint64_t m = warp_ballot(ok);
		const int ns = __popcll(m);
		if (ok) {
			int at = __popcll(m & ((1ull << lane) - 1));
			srow[wid][at] = (uint64_t)row;
			swt[wid][at] = w;
		}
		mori_sync_warp();
		uint8_t *o = (uint8_t *)a.out + (size_t)t * a.tok_bytes;
		for (int c = (int)lane; c < nv; c += MORI_WARP_SIZE) {
			float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
			for (int j0 = 0; j0 < ns; j0 += 8) { // 8 loads in flight, then their sums
				mori_vec16 v[8];
#pragma unroll
				for (int q = 0; q < 8; q++)
					if (j0 + q < ns)
						v[q] = ((const mori_vec16 *)srow[wid][j0 + q])[c];
#pragma unroll
				for (int q = 0; q < 8; q++) {
					if (j0 + q >= ns)
						break;
					const float wj = swt[wid][j0 + q];
					const uint32_t u[4] = {v[q].x, v[q].y, v[q].z, v[q].w};
					if (bf)
						for (int e2 = 0; e2 < 4; e2++) {
							acc[2 * e2] += wj * bf16_to_f32(u[e2] & 0xffffu);
							acc[2 * e2 + 1] += wj * bf16_to_f32(u[e2] >> 16);
						}
					else
						for (int e2 = 0; e2 < 4; e2++)
							acc[e2] += wj * __int_as_float((int)u[e2]);
				}
			}
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
			((mori_vec16 *)o)[c] = r;
		}
		mori_sync_warp(); // the next token's table overwrites this one
	}
}

// DeepEP's get_dispatch_layout: a thread per token. The outputs' counters were zeroed on the
// stream before (the host enqueues the memsets).
MORI_KERNEL void mori_ep_layout_query(const int32_t *idx, int T, int K, int W, int epr, int32_t *per_rank,
				      int32_t *per_expert, uint8_t *in_rank)
{
	int t = (int)(blockIdx.x * blockDim.x + threadIdx.x);
	if (t >= T)
		return;
	const int E = W * epr;
	uint64_t ranks = 0;
	for (int k = 0; k < K; k++) {
		int v = idx[t * K + k];
		if (v < 0 || v >= E)
			continue;
		if (per_expert)
			atomicAdd(per_expert + v, 1);
		ranks |= 1ull << (v / epr);
	}
	for (int d = 0; d < W; d++) {
		bool in = ranks >> d & 1;
		if (in && per_rank)
			atomicAdd(per_rank + d, 1);
		if (in_rank)
			in_rank[(size_t)t * W + d] = in;
	}
}
