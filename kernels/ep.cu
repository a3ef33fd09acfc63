// MORI-EP: MoE dispatch and combine on the symmetric heap (kernels/ep_kernels.h has the plan and
// the argument block; include/mori_ep.h the semantics). One source for CUDA and HIP through
// mori/device/gpu.h; the helpers both EP kernel sets use are in ep_common.cuh.
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
#include "ep_common.cuh"

namespace mori_ep_impl {
// Token t's bf16 row, quantised once (ep_fp8.h's rule), to every destination of mask m (lane j
// holds destination j's owner and slot): fp8 bytes into the receive row, each group's scale into
// the receive scales.
MORI_DEVICE void quant_rows(args a, int t, uint64_t m, int owner, int64_t slot, unsigned lane)
{
	const int H = a.hidden;
	const uint8_t *row = (const uint8_t *)a.input + (size_t)t * H * 2;
	for (int c0 = 0; c0 < H; c0 += MORI_WARP_SIZE * 8) {
		const int ch = c0 + (int)lane * 8;
		const bool act = ch < H; // H % 128 == 0: a group's 16 lanes are all in or all out
		uint32_t lo, hi;
		float sc;
		quant8(row, ch, act, lane, lo, hi, sc);
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
} // namespace mori_ep_impl

using namespace mori_ep_impl;

// grid = L.bins, block = MORI_EP_LAYOUT_THREADS. Block b: which tokens go to bin b (normal: rank
// b; low-latency: expert b), their positions among this rank's rows for b, the count to b's
// owner, and where this rank's rows start there (the lower ranks' counts).
MORI_KERNEL void __launch_bounds__(MORI_EP_LAYOUT_THREADS) mori_ep_layout(const struct mori_ep_kargs a)
{
	if (retired(a))
		return;
	const int b = blockIdx.x, W = a.world;
	const bool ll = a.mode == MORI_EP_KMODE_LL;
	const int owner = ll ? b / a.epr : b, bl = ll ? b % a.epr : 0;
	const uint64_t e = epoch(a) + 1;
	const unsigned tid = mori_block_thread();
	__shared__ int basesum;
	if (tid == 0)
		basesum = 0;
	const int running = bin_scan(a, b);
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
	if (b == 0)
		keep_routing(a);
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
		uint64_t m = mori_warp_ballot(ok);
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
		const int l = bin_of(pre, nl, j), i = j - (l ? pre[l - 1] : 0);
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
	const bool ll = a.mode == MORI_EP_KMODE_LL;
	const uint64_t e = epoch(a);
	const int tid = (int)mori_block_thread();
	const uint64_t *cd = (const uint64_t *)local(a, a.L.cdone);
	if (tid < W)
		wait_ge(a, cd + tid, e * (uint64_t)a.nblocks, 5, tid);
	__syncthreads();
	mori_acquire_after_wait_sys();
	const int32_t *pos = pos_tab(a), *route = (const int32_t *)local(a, a.L.route);
	const float *rw = a.weights ? (const float *)a.weights : (const float *)local(a, a.L.rweight);
	const uint8_t *comb = local(a, a.L.comb);
	const int32_t *base = base_tab(a);
	const int P = ll ? K : W;
	reduce_tokens<8>(a, [&](int t, unsigned lane, const uint8_t *&row, float &w) {
		bool ok = false;
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
		return ok;
	});
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
