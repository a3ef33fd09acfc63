/* MORI-VIZ trace buffer: the layout GPU kernels write (kernels/mori_viz.h) and the
 * host reads (tools/viz/viz.h, mori-viz). Plain C, included by CUDA/HIP kernels and host code.
 *
 *   struct mori_viz_header                         64 bytes, written by the host
 *   uint32_t head[warps]                           per warp: events written, free-running
 *   (padding to 16 bytes)
 *   struct mori_viz_event ring[warps][events_per_warp]
 *
 * Each warp owns one ring; its lane 0 writes an event (a timestamp of the GPU's global timer
 * and a meta word) at head % events_per_warp and advances head, so the newest events_per_warp
 * events survive. The meta word is ROCm/mori's: (warp << 16) | (slot << 2) | type, warp being
 * the launch's global warp index and slot the kernel's own enumeration of what it does (names
 * come from the host: mori-viz --slot). Block = warp / warps_per_block when the host says it.
 * A warp beyond `warps` records nothing (a launch bigger than the buffer loses traces, never
 * memory). Nothing here is trusted on the host: the reader clamps every count. */
#ifndef MORI_VIZ_LAYOUT_H
#define MORI_VIZ_LAYOUT_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MORI_VIZ_HD __host__ __device__ /* the helpers below run on both sides */
#else
#define MORI_VIZ_HD
#endif

#define MORI_VIZ_MAGIC 0x5a49564du /* "MVIZ" */
#define MORI_VIZ_VERSION 1u

enum mori_viz_type { MORI_VIZ_EV_BEGIN = 0, MORI_VIZ_EV_END = 1, MORI_VIZ_EV_INSTANT = 2 };
#define MORI_VIZ_MAX_SLOT 0x3fff

struct mori_viz_header {
	uint32_t magic;           /* MORI_VIZ_MAGIC */
	uint32_t version;         /* MORI_VIZ_VERSION */
	uint32_t warps;           /* rings in the buffer */
	uint32_t events_per_warp; /* a power of two */
	uint64_t clock_hz;        /* ticks per second of the timestamps (CUDA %globaltimer: 1e9) */
	uint32_t warps_per_block; /* of the traced launch; 0: unknown (tracks per warp only) */
	uint32_t enabled;         /* 0: the kernels' trace points return at once (compiled in, off) */
	uint64_t reserved[4];
};

struct mori_viz_event {
	int64_t ts;               /* GPU timer ticks */
	int64_t meta;             /* (warp << 16) | (slot << 2) | type */
};

MORI_VIZ_HD static inline int64_t mori_viz_meta(uint64_t warp, unsigned slot, unsigned type)
{
	return (int64_t)((warp << 16) | ((uint64_t)(slot & MORI_VIZ_MAX_SLOT) << 2) | (type & 3u));
}

MORI_VIZ_HD static inline size_t mori_viz_heads_off(void) { return sizeof(struct mori_viz_header); }
MORI_VIZ_HD static inline size_t mori_viz_events_off(uint32_t warps)
{
	return (sizeof(struct mori_viz_header) + (size_t)warps * 4 + 15) & ~(size_t)15;
}
MORI_VIZ_HD static inline size_t mori_viz_bytes(uint32_t warps, uint32_t events_per_warp)
{
	return mori_viz_events_off(warps) + (size_t)warps * events_per_warp * sizeof(struct mori_viz_event);
}
/* Initialise a host copy of a buffer (mori_viz_bytes(warps, events_per_warp) bytes, zeroed here):
 * events_per_warp a power of two. 0, or -1 for bad arguments. Used by tools/viz and by libmori's
 * traced copy kernel (libclient/gpu_viz.c). */
static inline int mori_viz_init(void *buf, size_t len, uint32_t warps, uint32_t epw, uint64_t clock_hz,
				uint32_t wpb, int enabled)
{
	if (!buf || !warps || !epw || (epw & (epw - 1)) || !clock_hz || len < mori_viz_bytes(warps, epw))
		return -1;
	memset(buf, 0, mori_viz_bytes(warps, epw));
	struct mori_viz_header *h = (struct mori_viz_header *)buf;
	h->magic = MORI_VIZ_MAGIC;
	h->version = MORI_VIZ_VERSION;
	h->warps = warps;
	h->events_per_warp = epw;
	h->clock_hz = clock_hz;
	h->warps_per_block = wpb;
	h->enabled = !!enabled;
	return 0;
}
#endif
