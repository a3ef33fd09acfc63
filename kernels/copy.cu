// The batched copy kernel: one launch moves a whole batch of (a offset, b offset, length)
// descriptors between two bases (gather/scatter), each warp copying whole chunks of one
// descriptor. 16-byte vector loads and stores where source and destination agree modulo 16
// (after a short head), narrower ones where they agree on less, bytes at the tail.
// Two kernels from one body: mori_copy_batch, and mori_copy_batch_viz with MORI-VIZ trace points
// (kernels/mori_viz.h) that record into args.viz when it is set and enabled (libclient/gpu_viz.c).
#include "mori_gpu.h"
#include "mori_copy.h"
#include "mori_viz.h"

template <typename T> MORI_DEVICE T load_once(const T *p) { return *p; }
template <typename T> MORI_DEVICE void store_once(T *p, T v) { *p = v; }
template <> MORI_DEVICE mori_vec16 load_once<mori_vec16>(const mori_vec16 *p) { return mori_load_once16(p); }
template <> MORI_DEVICE void store_once<mori_vec16>(mori_vec16 *p, mori_vec16 v) { mori_store_once16(p, v); }

// n elements of T, lanes interleaved (coalesced); four loads in flight per lane before the
// stores, so one warp keeps 4 * 32 * sizeof(T) bytes moving.
template <typename T>
MORI_DEVICE void copy_elems(uint8_t *dst, const uint8_t *src, uint64_t n, unsigned lane)
{
	const T *s = reinterpret_cast<const T *>(src);
	T *d = reinterpret_cast<T *>(dst);
	const uint64_t W = MORI_WARP_SIZE;
	uint64_t i = lane;
	for (; i + 3 * W < n; i += 4 * W) {
		T v0 = load_once(s + i), v1 = load_once(s + i + W);
		T v2 = load_once(s + i + 2 * W), v3 = load_once(s + i + 3 * W);
		store_once(d + i, v0);
		store_once(d + i + W, v1);
		store_once(d + i + 2 * W, v2);
		store_once(d + i + 3 * W, v3);
	}
	for (; i < n; i += W)
		store_once(d + i, load_once(s + i));
}

// One warp copies len bytes. The widest element w in {16, 8, 4, 2, 1} on which src and dst
// agree modulo w is used after a head of at most w - 1 bytes; the tail is under w bytes.
MORI_DEVICE void copy_piece(uint8_t *dst, const uint8_t *src, uint64_t len, unsigned lane)
{
	uintptr_t diff = (uintptr_t)src ^ (uintptr_t)dst;
	unsigned w = 16;
	while (w > 1 && (diff & (w - 1)))
		w >>= 1;
	uint64_t head = (w - ((uintptr_t)src & (w - 1))) & (w - 1);
	if (head > len)
		head = len;
	if (lane < head) // head < 16 <= warp size
		dst[lane] = src[lane];
	src += head;
	dst += head;
	len -= head;
	uint64_t n = len / w;
	switch (w) {
	case 16: copy_elems<mori_vec16>(dst, src, n, lane); break;
	case 8: copy_elems<uint2>(dst, src, n, lane); break;
	case 4: copy_elems<uint32_t>(dst, src, n, lane); break;
	case 2: copy_elems<uint16_t>(dst, src, n, lane); break;
	default: copy_elems<uint8_t>(dst, src, n, lane); break;
	}
	uint64_t done = n * w, tail = len - done;
	if (lane < tail)
		dst[done + lane] = src[done + lane];
}

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
			copy_piece(dst, src, left < chunk ? left : chunk, lane);
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
