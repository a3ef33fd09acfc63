// The batched copy kernel: one launch moves a whole batch of (a offset, b offset, length)
// descriptors between two bases (gather/scatter), each warp copying whole chunks of one
// descriptor with the shared byte copy: 16-byte vector loads and stores where source and
// destination agree modulo 16 (after a short head), narrower ones where they agree on less,
// bytes at the tail.
// Two kernels from one body: mori_copy_batch, and mori_copy_batch_viz with MORI-VIZ trace points
// (kernels/mori_viz.h) that record into args.viz when it is set and enabled (libclient/gpu_viz.c).
#include "mori/device/prims.cuh"
#include "mori_copy.h"
#include "mori_viz.h"

// The descriptor that owns chunk c: the last i with first[i] <= c (first[0] == 0).
MORI_DEVICE uint32_t find_desc(const uint32_t *first, uint32_t n, uint64_t c)
{
	uint32_t lo = 0, hi = n; // answer in [lo, hi)
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (first[mid] <= c)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

// Descriptor i of a batch: descs[index[i]] for a prepared list, else descs[i].
MORI_DEVICE struct mori_copy_desc desc_at(const struct mori_copy_args &a, uint64_t i)
{
	const struct mori_copy_desc *descs = reinterpret_cast<const struct mori_copy_desc *>(a.descs);
	const uint32_t *index = reinterpret_cast<const uint32_t *>(a.index);
	return descs[index ? index[i] : i];
}

// Chunk c's descriptor and its byte offset in it, when the block did not load it for the warp.
MORI_DEVICE void chunk_desc(const struct mori_copy_args &a, uint64_t c, struct mori_copy_desc *d, uint64_t *off)
{
	uint32_t di;
	if (a.descs) {
		const uint32_t *first = reinterpret_cast<const uint32_t *>(a.first_chunk);
		di = find_desc(first, a.n, c);
		*off = (c - first[di]) << a.chunk_shift;
		*d = desc_at(a, di);
		return;
	}
	// Inline batch: a short unrolled scan keeps the parameters in constant memory.
	di = 0;
#pragma unroll
	for (uint32_t k = 1; k < MORI_COPY_INLINE; k++)
		if (k < a.n && a.inl_first[k] <= c)
			di = k;
	*off = (c - a.inl_first[di]) << a.chunk_shift;
	*d = a.inl[0];
#pragma unroll
	for (uint32_t k = 1; k < MORI_COPY_INLINE; k++)
		if (k == di)
			*d = a.inl[k];
}

// The host launches a warp per chunk (gpu_copy_grid): the block scheduler balances the tail and
// neighbouring warps copy neighbouring bytes. The loop covers a capped grid (the traced kernel).
// With equal chunk counts (`uniform`), the block's first threads read its warps' descriptors in
// one request into shared memory: staged indices or descriptors may sit in pinned host memory.
// TRACE: a warp's batch (begin/end), each chunk it copies (begin/end) and its last chunk's end
// (instant). Without TRACE the body has no trace code at all.
template <bool TRACE> MORI_DEVICE void copy_batch(const struct mori_copy_args &a)
{
	__shared__ struct mori_copy_desc block_desc[MORI_COPY_BLOCK_THREADS / 32];
	// a.viz stays in the parameter bank: off (0) costs a compare per point and no register
	struct mori_viz_header *viz = reinterpret_cast<struct mori_viz_header *>(a.viz);
	if (TRACE && viz)
		mori_viz_log_at(viz, MORI_VIZ_SLOT_COPY_BATCH, MORI_VIZ_EV_BEGIN);
	const unsigned lane = mori_lane(), wpb = blockDim.x / MORI_WARP_SIZE, w = threadIdx.x / MORI_WARP_SIZE;
	const uint64_t step = (uint64_t)gridDim.x * wpb;
	const bool shared_descs = a.descs && a.uniform;
	for (uint64_t base = (uint64_t)blockIdx.x * wpb; base < a.total_chunks; base += step) {
		const uint64_t c = base + w;
		struct mori_copy_desc d;
		uint64_t off;
		if (shared_descs) {
			if (threadIdx.x < wpb && base + threadIdx.x < a.total_chunks) {
				uint64_t ct = base + threadIdx.x;
				block_desc[threadIdx.x] = desc_at(a, a.uniform == 1 ? ct : ct / a.uniform);
			}
			__syncthreads();
			d = block_desc[w];
			uint64_t di = a.uniform == 1 ? c : c / a.uniform;
			off = (c - di * a.uniform) << a.chunk_shift;
		} else if (c < a.total_chunks) {
			chunk_desc(a, c, &d, &off);
		}
		if (c < a.total_chunks) {
			uint64_t src_off = a.swap ? d.b_off : d.a_off;
			uint64_t dst_off = a.swap ? d.a_off : d.b_off;
			const uint8_t *src = reinterpret_cast<const uint8_t *>(a.swap ? a.b_base : a.a_base) + src_off + off;
			uint8_t *dst = reinterpret_cast<uint8_t *>(a.swap ? a.a_base : a.b_base) + dst_off + off;
			uint64_t left = d.len - off, chunk = 1ull << a.chunk_shift;
			if (TRACE && viz)
				mori_viz_log_at(viz, MORI_VIZ_SLOT_COPY_DESC, MORI_VIZ_EV_BEGIN);
			mori_copy_bytes<MORI_COPY_STREAM>(dst, src, left < chunk ? left : chunk, lane, MORI_WARP_SIZE);
			if (TRACE && viz)
				mori_viz_log_at(viz, MORI_VIZ_SLOT_COPY_DESC, MORI_VIZ_EV_END);
		}
		if (shared_descs && base + step < a.total_chunks)
			__syncthreads(); // every warp has its descriptor before the next round overwrites them
	}
	if (TRACE && viz) {
		mori_viz_log_at(viz, MORI_VIZ_SLOT_COPY_TAIL, MORI_VIZ_EV_INSTANT);
		mori_viz_log_at(viz, MORI_VIZ_SLOT_COPY_BATCH, MORI_VIZ_EV_END);
	}
}

MORI_KERNEL void __launch_bounds__(MORI_COPY_BLOCK_THREADS, MORI_COPY_BLOCKS_PER_SM) mori_copy_batch(const struct mori_copy_args a)
{
	copy_batch<false>(a);
}

MORI_KERNEL void __launch_bounds__(MORI_COPY_BLOCK_THREADS, MORI_COPY_BLOCKS_PER_SM) mori_copy_batch_viz(const struct mori_copy_args a)
{
	copy_batch<true>(a);
}
