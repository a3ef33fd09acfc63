// MORI-EP across nodes: the internode kernel types' kernels (kernels/ep_internode.h has the chunk
// layout and the argument block; docs/ep.md "Across nodes" the design). They share ep.cu's helpers
// (ep_common.cuh: wait_ge, fail, copy_row, retired, bin_scan, ...).
//
// Every source rank s sends every rank d one chunk per call (dispatch: s's rows for d with their
// weights, indices, scales and source positions, behind a header of counts; combine: d's expert
// outputs for s's tokens, in the order of the dispatch chunk). A chunk for a rank whose heap is
// mapped here (same node) is written directly into its landing area land[s] and signalled with a
// release store; a chunk for a rank of another node is written into this rank's staging area and
// sent by the NETWORK SEAM below (today: the device API's proxy put, then put+signal). The
// receiver waits for every source's signal (abort word and deadline), then places the rows in the
// intranode receive layout itself (slots by source rank, then position: the counts are in the
// chunks' headers, so no count exchange precedes the data).
//
// Ordering, per call of epoch e (the slot's epoch word + 1 during dispatch):
//   layout, prefix: positions and counts of my rows per bin (local only), the records' offsets.
//   send:   records into the chunks (peer memory, or staging), then a system-scope fence.
//   post:   (grid 1, a thread per rank d) the header, then xsig[me] at d := e: a release store
//           after a fence (mapped), or the proxy put(s) + put+signal SET e (the proxy applies a
//           signal only after every earlier put of that ring to that PE has landed).
//   recv:   waits xsig[s] >= e for every s (acquire), checks each header, bases and counts.
//   copy:   the records into the receive slots.
//   combine: the same with cland/xcsig; the reduce waits xcsig[d] >= e.
// Reuse: a rank writes d's land[me] (and its own stage[d], which the proxy may still read) for
// call e+1 only after its combine of call e waited for d's xcsig e, which d posts after its
// dispatch e copied land[me] out; d writes cland at s for e+1 only after its dispatch e+1 waited
// s's xsig e+1, which s posts after its combine e reduce read cland.
#include "ep_common.cuh"
#include "ep_internode.h"

namespace mori_epx_impl {
using namespace mori_ep_impl;
typedef const struct mori_epx_kargs &xargs;

// ---- the network seam ----
// The one place the internode kernels reach a rank of another node: "send the bytes of this
// rank's heap at [src, src + bytes) to rank pe's heap at dst (same symmetric offsets), then
// signal: pe's word at sig := value, visible only after every byte". One thread calls it; 0 or
// the MORI_E* code. Today the proxy: puts of MORI_EPX_PUT_MAX, the last one with the signal, all
// in ring order to one PE (daemon/shmem/shmem_proxy.c keeps a PE's puts before its put+signal). An
// IBGDA version posts RDMA writes and an atomic (or write-with-immediate) to the same offsets
// instead; the receiver's side (a wait on a word of its own heap) stays as it is (docs/ep.md).
MORI_DEVICE int seam_put_signal(xargs x, int pe, uint64_t src, uint64_t dst, uint64_t bytes, uint64_t sig,
				uint64_t value)
{
	const state st = (state)x.a.st;
	uint8_t *base = (uint8_t *)heap_base(st);
	int rc = 0;
	uint64_t o = 0;
	for (; bytes - o > MORI_EPX_PUT_MAX && !rc; o += MORI_EPX_PUT_MAX)
		rc = putmem_nbi<THREAD>(st, base + dst + o, base + src + o, MORI_EPX_PUT_MAX, pe);
	if (!rc)
		rc = put_signal<THREAD>(st, base + dst + o, base + src + o, bytes - o, (uint64_t *)(base + sig), value,
					MORI_SHMEM_SIGNAL_SET, pe);
	return rc;
}

MORI_DEVICE bool mapped(xargs x, int d) { return peer(x.a, d, 0) != nullptr; }
// My chunk for rank d: in d's land[me] where d's heap is mapped here, else in my stage[d].
MORI_DEVICE uint8_t *dchunk(xargs x, int d)
{
	uint8_t *r = peer(x.a, d, x.X.land + (uint64_t)x.a.rank * x.X.cap);
	return r ? r : local(x.a, x.X.stage + (uint64_t)d * x.X.cap);
}
MORI_DEVICE uint8_t *cchunk(xargs x, int s)
{
	uint8_t *r = peer(x.a, s, x.X.cland + (uint64_t)x.a.rank * x.X.ccap);
	return r ? r : local(x.a, x.X.cstage + (uint64_t)s * x.X.ccap);
}
MORI_DEVICE int32_t *tab(xargs x, uint64_t part) { return (int32_t *)local(x.a, part); }
// Source s's landing chunk here, and its header's count for local bin l.
MORI_DEVICE const uint8_t *land(xargs x, int s) { return local(x.a, x.X.land + (uint64_t)s * x.X.cap); }
MORI_DEVICE uint32_t land_cnt(xargs x, int s, int l)
{
	return *(const volatile uint32_t *)(land(x, s) + 16 + 4 * (size_t)l);
}

// Token t's bf16 row quantised once (kernels/ep_fp8.h's rule, as ep.cu's quant_rows) into the
// records of mask m's destinations (lane j holds destination j's record address).
MORI_DEVICE void quant_recs(xargs x, int t, uint64_t m, uint8_t *rec, unsigned lane)
{
	const int H = x.a.hidden;
	const uint8_t *row = (const uint8_t *)x.a.input + (size_t)t * H * 2;
	for (int c0 = 0; c0 < H; c0 += MORI_WARP_SIZE * 8) {
		const int ch = c0 + (int)lane * 8;
		const bool act = ch < H;
		uint32_t lo, hi;
		float sc;
		quant8(row, ch, act, lane, lo, hi, sc);
		for (uint64_t mm = m; mm; mm &= mm - 1) {
			const int j = __ffsll((long long)mm) - 1;
			uint8_t *r = (uint8_t *)(uintptr_t)shfl64((int64_t)(uintptr_t)rec, j);
			if (act) {
				*(uint2 *)(r + ch) = make_uint2(lo, hi);
				if ((lane & 15u) == 0)
					((float *)(r + x.X.rec_scale))[ch / EP_FP8_GROUP] = sc;
			}
		}
	}
}
} // namespace mori_epx_impl

using namespace mori_epx_impl;

// grid = L.bins: as mori_ep_layout (ep.cu) without its peer traffic: block b finds which of my
// tokens go to bin b and their positions; the count stays here (xcnt[b]).
MORI_KERNEL void __launch_bounds__(MORI_EP_LAYOUT_THREADS) mori_epx_layout(const struct mori_epx_kargs x)
{
	const struct mori_ep_kargs &a = x.a;
	if (retired(a))
		return;
	const int b = blockIdx.x;
	const int running = bin_scan(a, b);
	if (mori_block_thread() == 0)
		tab(x, x.X.xcnt)[b] = running;
	if (b == 0)
		keep_routing(a);
}

// grid 1: each destination's records, bin after bin: xoff[bin] (the bin's first record), xtot[d].
MORI_KERNEL void mori_epx_prefix(const struct mori_epx_kargs x)
{
	const struct mori_ep_kargs &a = x.a;
	if (retired(a))
		return;
	const int nl = a.L.bins_local;
	const int32_t *cnt = tab(x, x.X.xcnt);
	int32_t *off = tab(x, x.X.xoff), *tot = tab(x, x.X.xtot);
	for (int d = (int)mori_block_thread(); d < a.world; d += (int)mori_block_threads()) {
		int sum = 0;
		for (int l = 0; l < nl; l++) {
			off[d * nl + l] = sum; // bin d x nl + l: normal (nl 1) bin d, low-latency expert d x epr + l
			sum += cnt[d * nl + l];
		}
		tot[d] = sum;
	}
}

// grid = nblocks: a warp per token; each destination (lane j: rank j, or top-k slot j) gets one
// record in its chunk: the row (copied, or quantised once), weights, indices, scales, source
// position, bin and position.
MORI_KERNEL void __launch_bounds__(1024) mori_epx_dispatch_send(const struct mori_epx_kargs x)
{
	const struct mori_ep_kargs &a = x.a;
	if (retired(a))
		return;
	const int K = a.topk, W = a.world, M = a.max_tok, E = W * a.epr;
	const bool ll = a.mode == MORI_EP_KMODE_LL;
	const unsigned lane = mori_lane();
	const int P = ll ? K : W;
	const int32_t *idx = (const int32_t *)a.indices, *pos = pos_tab(a);
	const int32_t *xcnt = tab(x, x.X.xcnt), *xoff = tab(x, x.X.xoff);
	const uint8_t *in = (const uint8_t *)a.input;
	const float *wt = (const float *)a.weights;
	const int scw = a.scale_bytes / 4;
	for (int t = (int)mori_global_warp(); t < a.num_tokens; t += (int)mori_grid_warps()) {
		bool ok = false;
		int bin = 0, p = -1, src = 0;
		uint8_t *rec = nullptr;
		if ((int)lane < P) {
			if (!ll) {
				p = pos[t * W + lane];
				bin = (int)lane;
				src = a.rank * M + t;
			} else {
				int v = idx[t * K + lane];
				p = v >= 0 && v < E ? pos[t * K + lane] : -1;
				bin = v;
				src = (a.rank * M + t) * K + (int)lane;
			}
			ok = p >= 0 && p < xcnt[bin];
			const int r = ok ? xoff[bin] + p : 0, d = ll ? bin / a.epr : bin;
			ok = ok && r < x.X.rows_cap;
			if (ok)
				rec = dchunk(x, d) + x.X.hdr + (size_t)r * x.X.rec;
		}
		uint64_t m = mori_warp_ballot(ok);
		if (a.quant)
			quant_recs(x, t, m, rec, lane);
		while (m) {
			int j = __ffsll((long long)m) - 1;
			m &= m - 1;
			uint8_t *r = (uint8_t *)(uintptr_t)shfl64((int64_t)(uintptr_t)rec, j);
			const int sp = shfl(src, j), bj = shfl(bin, j), pj = shfl(p, j);
			if (!a.quant)
				copy_row(r, in + (size_t)t * a.tok_bytes, a.tok_bytes, lane);
			if ((int)lane < K) {
				((float *)(r + x.X.rec_w))[lane] = wt ? wt[t * K + lane] : 0.f;
				((int32_t *)(r + x.X.rec_idx))[lane] = idx[t * K + lane];
			}
			if (scw && !a.quant) {
				uint32_t *ds = (uint32_t *)(r + x.X.rec_scale);
				const uint32_t *ss = (const uint32_t *)((const uint8_t *)a.scales + (size_t)t * a.scale_bytes);
				for (int i = (int)lane; i < scw; i += MORI_WARP_SIZE)
					ds[i] = ss[i];
			}
			if (lane == 0) {
				int32_t *tail = (int32_t *)(r + x.X.rec_src);
				tail[0] = sp;
				tail[1] = ll ? bj % a.epr : 0; // the destination's local bin
				tail[2] = pj;
			}
		}
	}
	mori_complete_stores_sys(); // every record is performed system-wide before post signals
}

// grid 1, a thread per destination rank d: the chunk's header, then its signal (mapped: a release
// store; another node: the seam).
MORI_KERNEL void mori_epx_dispatch_post(const struct mori_epx_kargs x)
{
	const struct mori_ep_kargs &a = x.a;
	if (retired(a))
		return;
	const uint64_t e = epoch(a) + 1;
	const int nl = a.L.bins_local, me = a.rank;
	const int32_t *xcnt = tab(x, x.X.xcnt), *xtot = tab(x, x.X.xtot);
	for (int d = (int)mori_block_thread(); d < a.world; d += (int)mori_block_threads()) {
		uint8_t *c = dchunk(x, d);
		const uint32_t n = (uint32_t)xtot[d];
		*(volatile uint64_t *)c = e;
		((volatile uint32_t *)c)[2] = n;
		for (int l = 0; l < nl; l++)
			((volatile uint32_t *)(c + 16))[l] = (uint32_t)xcnt[d * nl + l];
		if (mapped(x, d)) {
			mori_complete_stores_sys();
			mori_release_store_sys((uint64_t *)peer(a, d, x.X.xsig) + me, e);
		} else {
			mori_complete_stores_sys(); // the header (and the send kernel's records) before the ring entry
			int rc = seam_put_signal(x, d, a.sym + x.X.stage + (uint64_t)d * x.X.cap,
						 a.sym + x.X.land + (uint64_t)me * x.X.cap, (uint64_t)x.X.hdr + (uint64_t)n * x.X.rec,
						 a.sym + x.X.xsig + 8ull * (uint64_t)me, e);
			if (rc)
				fail(a, rc, MORI_EP_ERR_ABORT, MORI_EPX_W_DPOST, d);
		}
	}
}

// grid 1: every source's chunk has landed (or its wait ended: then it counts as empty); the
// headers checked; bases, record offsets and counts; the epoch advances.
MORI_KERNEL void mori_epx_dispatch_recv(const struct mori_epx_kargs x)
{
	const struct mori_ep_kargs &a = x.a;
	if (retired(a))
		return;
	const uint64_t e = epoch(a) + 1;
	const int W = a.world, nl = a.L.bins_local, tid = (int)mori_block_thread(), nt = (int)mori_block_threads();
	__shared__ int good[MORI_EP_MAX_WORLD_K];
	const uint64_t *sig = (const uint64_t *)local(a, x.X.xsig);
	for (int s = tid; s < W; s += nt) {
		int ok = wait_ge(a, sig + s, e, MORI_EPX_W_DRECV, s) == 0;
		if (ok) { // the header: this call's, counts within bounds and adding up
			const uint8_t *h = land(x, s);
			uint64_t sum = 0;
			bool fine = *(const volatile uint64_t *)h == e;
			const uint32_t n = ((const volatile uint32_t *)h)[2];
			for (int l = 0; l < nl && fine; l++) {
				uint32_t c = land_cnt(x, s, l);
				fine = c <= (uint32_t)a.max_tok;
				sum += c;
			}
			if (!fine || sum != n || n > (uint32_t)x.X.rows_cap) {
				fail(a, MORI_EPROTO, MORI_EP_ERR_ABORT, MORI_EPX_W_CHUNK, s);
				ok = 0;
			}
		}
		good[s] = ok;
	}
	__syncthreads();
	int32_t *base = tab(x, x.X.xbase), *pre = tab(x, x.X.xpre), *rows = tab(x, x.X.xrows);
	int32_t *count = (int32_t *)local(a, a.L.count);
	for (int l = tid; l < nl; l += nt) { // slots of local bin l: by source, then position
		int sum = 0;
		for (int s = 0; s < W; s++) {
			base[l * W + s] = sum;
			sum += good[s] ? (int)land_cnt(x, s, l) : 0;
		}
		count[l] = sum;
	}
	for (int s = tid; s < W; s += nt) { // records of source s's chunk: bin after bin
		int sum = 0;
		for (int l = 0; l < nl; l++) {
			pre[l * W + s] = sum;
			sum += good[s] ? (int)land_cnt(x, s, l) : 0;
		}
		rows[s] = sum;
	}
	__syncthreads();
	if (tid == 0)
		*(volatile uint64_t *)local(a, a.L.epoch) = e;
}

// grid = nblocks: a warp per landed record, into its receive slot (the intranode layout).
MORI_KERNEL void __launch_bounds__(1024) mori_epx_dispatch_copy(const struct mori_epx_kargs x)
{
	const struct mori_ep_kargs &a = x.a;
	if (retired(a))
		return;
	const int K = a.topk, W = a.world, M = a.max_tok, nl = a.L.bins_local;
	const bool ll = a.mode == MORI_EP_KMODE_LL;
	const unsigned lane = mori_lane();
	const int32_t *base = tab(x, x.X.xbase), *pre = tab(x, x.X.xpre), *rows = tab(x, x.X.xrows);
	__shared__ int first[MORI_EP_MAX_WORLD_K + 1];
	if (mori_block_thread() == 0) {
		first[0] = 0;
		for (int s = 0; s < W; s++)
			first[s + 1] = first[s] + rows[s];
	}
	__syncthreads();
	const int rb = a.quant ? a.hidden : a.tok_bytes, scw = a.scale_bytes / 4;
	uint8_t *tok = local(a, a.L.tok), *sc = local(a, a.L.scale);
	float *w = (float *)local(a, a.L.w);
	int32_t *ix = (int32_t *)local(a, a.L.idx), *srcp = (int32_t *)local(a, a.L.src);
	for (int j = (int)mori_global_warp(); j < first[W]; j += (int)mori_grid_warps()) {
		int s = 0;
		while (first[s + 1] <= j)
			s++;
		const int i = j - first[s];
		const uint8_t *r = land(x, s) + x.X.hdr + (size_t)i * x.X.rec;
		const int32_t *tail = (const int32_t *)(r + x.X.rec_src);
		const int l = tail[1], p = tail[2];
		// the record must sit where its bin and position say (a chunk is this call's, checked)
		if (l < 0 || l >= nl || p < 0 || p != i - pre[l * W + s] || p >= (int)land_cnt(x, s, l))
			continue;
		const int64_t slot = (ll ? (int64_t)l * W * M : 0) + base[l * W + s] + p;
		if (slot < 0 || slot >= a.L.recv_slots)
			continue;
		copy_row(tok + slot * a.L.token_stride, r, rb, lane);
		if ((int)lane < K) {
			w[slot * K + lane] = ((const float *)(r + x.X.rec_w))[lane];
			ix[slot * K + lane] = ((const int32_t *)(r + x.X.rec_idx))[lane];
		}
		for (int q = (int)lane; q < scw; q += MORI_WARP_SIZE)
			((uint32_t *)(sc + slot * a.L.scale_stride))[q] = ((const uint32_t *)(r + x.X.rec_scale))[q];
		if (lane == 0)
			srcp[slot] = tail[0];
	}
}

// grid = nblocks: a warp per received slot; its expert output goes into the combine chunk of its
// source's rank, at the record the source's dispatch chunk had for it.
MORI_KERNEL void __launch_bounds__(1024) mori_epx_combine_send(const struct mori_epx_kargs x)
{
	const struct mori_ep_kargs &a = x.a;
	if (retired(a))
		return;
	const int K = a.topk, W = a.world, M = a.max_tok;
	const bool ll = a.mode == MORI_EP_KMODE_LL;
	const unsigned lane = mori_lane();
	const int32_t *count = (const int32_t *)local(a, a.L.count), *srcp = (const int32_t *)local(a, a.L.src);
	const int32_t *base = tab(x, x.X.xbase), *pre = tab(x, x.X.xpre);
	const uint8_t *eo = (const uint8_t *)a.input;
	const int64_t per = (int64_t)W * M, stride = a.pull ? a.L.token_stride : a.tok_bytes;
	__shared__ int cpre[EP_MAX_LOCAL], tmp[EP_MAX_LOCAL];
	const int nl = a.L.bins_local, total = count_prefix(count, nl, (int)per, cpre, tmp);
	for (int j = (int)mori_global_warp(); j < total; j += (int)mori_grid_warps()) {
		const int l = bin_of(cpre, nl, j), i = j - (l ? cpre[l - 1] : 0);
		const int64_t slot = ll ? l * per + i : i;
		const int sp = srcp[slot], s = ll ? sp / (M * K) : sp / M;
		if (sp < 0 || s >= W)
			continue;
		const int p = i - base[l * W + s];
		if (p < 0 || p >= (int)land_cnt(x, s, l))
			continue;
		uint8_t *dst = cchunk(x, s) + MORI_EPX_CHDR + (int64_t)(pre[l * W + s] + p) * x.X.crow;
		copy_row(dst, eo + slot * stride, a.tok_bytes, lane);
	}
	mori_complete_stores_sys();
}

// grid 1, a thread per home rank s: the header (epoch), then the signal (as dispatch_post).
MORI_KERNEL void mori_epx_combine_post(const struct mori_epx_kargs x)
{
	const struct mori_ep_kargs &a = x.a;
	if (retired(a))
		return;
	const uint64_t e = epoch(a);
	const int me = a.rank;
	const int32_t *rows = tab(x, x.X.xrows);
	for (int s = (int)mori_block_thread(); s < a.world; s += (int)mori_block_threads()) {
		uint8_t *c = cchunk(x, s);
		*(volatile uint64_t *)c = e;
		if (mapped(x, s)) {
			mori_complete_stores_sys();
			mori_release_store_sys((uint64_t *)peer(a, s, x.X.xcsig) + me, e);
		} else {
			mori_complete_stores_sys();
			int rc = seam_put_signal(x, s, a.sym + x.X.cstage + (uint64_t)s * x.X.ccap,
						 a.sym + x.X.cland + (uint64_t)me * x.X.ccap,
						 MORI_EPX_CHDR + (uint64_t)rows[s] * (uint64_t)x.X.crow,
						 a.sym + x.X.xcsig + 8ull * (uint64_t)me, e);
			if (rc)
				fail(a, rc, MORI_EP_ERR_ABORT, MORI_EPX_W_CPOST, s);
		}
	}
}

// grid = nblocks: waits for every rank's combine chunk, then a warp per token sums its rows
// (fp32; weighted in low-latency mode) as mori_ep_combine_reduce does.
MORI_KERNEL void __launch_bounds__(1024) mori_epx_combine_reduce(const struct mori_epx_kargs x)
{
	const struct mori_ep_kargs &a = x.a;
	if (retired(a))
		return;
	const int K = a.topk, W = a.world, E = W * a.epr;
	const bool ll = a.mode == MORI_EP_KMODE_LL;
	const uint64_t e = epoch(a);
	const int tid = (int)mori_block_thread();
	const uint64_t *cs = (const uint64_t *)local(a, x.X.xcsig);
	if (tid < W)
		wait_ge(a, cs + tid, e, MORI_EPX_W_CRED, tid);
	__syncthreads();
	mori_acquire_after_wait_sys();
	const int32_t *pos = pos_tab(a), *route = (const int32_t *)local(a, a.L.route);
	const int32_t *xoff = tab(x, x.X.xoff), *xtot = tab(x, x.X.xtot);
	const float *rw = a.weights ? (const float *)a.weights : (const float *)local(a, a.L.rweight);
	const int P = ll ? K : W;
	reduce_tokens<1>(a, [&](int t, unsigned lane, const uint8_t *&row, float &w) {
		bool ok = false;
		if ((int)lane < P) {
			int d = (int)lane, r = -1;
			if (!ll) {
				r = pos[t * W + lane];
			} else {
				int v = route[t * K + lane];
				int p = v >= 0 && v < E ? pos[t * K + lane] : -1;
				if (p >= 0)
					d = v / a.epr, r = xoff[v] + p;
				w = rw[t * K + lane];
			}
			ok = r >= 0 && r < xtot[d]; // a record of my chunk to d: d's answer has it
			if (ok)
				row = local(a, x.X.cland + (uint64_t)d * x.X.ccap) + MORI_EPX_CHDR + (int64_t)r * x.X.crow;
		}
		return ok;
	});
}
