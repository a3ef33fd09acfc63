/* MORI-VIZ trace points for mori's kernels: per-warp begin/end/instant events with the
 * GPU global timer into the buffer of common/viz_layout.h, written by lane 0.
 *
 * The macros compile in only with -DMORI_VIZ; without it every macro is ((void)0) and the kernel
 * is the untraced one. Compiled in, a launch given a NULL buffer or a header with enabled = 0 pays
 * one predictable branch per trace point. A source that builds a traced and an untraced kernel
 * from one body (kernels/copy.cu) calls the functions below under a template flag instead: in
 * GPU code they exist with or without -DMORI_VIZ.
 *
 *   MORI_VIZ_DECL(buf);            once per kernel: buf is a struct mori_viz_header * (or NULL)
 *   MORI_VIZ_BEGIN(slot); ... MORI_VIZ_END(slot);
 *   MORI_VIZ_INSTANT(slot);
 *
 * Slots: each kernel enumerates what it does (the copy kernel's are below); mori-viz names them.
 * Outside nvcc/hipcc (host unit tests) the same code runs with mori_viz_host_clock(). */
#ifndef MORI_VIZ_KERNEL_H
#define MORI_VIZ_KERNEL_H
#include "../common/viz_layout.h"

/* The copy kernel's slots (kernels/copy.cu): its batch and each descriptor it copies. */
enum mori_viz_copy_slot { MORI_VIZ_SLOT_COPY_BATCH = 0, MORI_VIZ_SLOT_COPY_DESC = 1, MORI_VIZ_SLOT_COPY_TAIL = 2 };

#if defined(MORI_VIZ) || defined(__CUDACC__) || defined(__HIPCC__)
#if defined(__CUDACC__) || defined(__HIPCC__)
#include "../include/mori/device/gpu.h"
#define MORI_VIZ_FN MORI_DEVICE
MORI_VIZ_FN int64_t mori_viz_clock(void)
{
#ifdef MORI_HIP
	return (int64_t)wall_clock64();
#else
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return (int64_t)t;
#endif
}
MORI_VIZ_FN uint64_t mori_viz_warp_id(void) { return mori_global_warp(); }
MORI_VIZ_FN int mori_viz_lane0(void) { return mori_lane() == 0; }
#else
/* host build (tests): the test provides the clock and the warp */
#define MORI_VIZ_FN static inline
int64_t mori_viz_host_clock(void);
extern uint64_t mori_viz_host_warp;
MORI_VIZ_FN int64_t mori_viz_clock(void) { return mori_viz_host_clock(); }
MORI_VIZ_FN uint64_t mori_viz_warp_id(void) { return mori_viz_host_warp; }
MORI_VIZ_FN int mori_viz_lane0(void) { return 1; }
#endif

struct mori_viz_warp {
	struct mori_viz_event *ring; /* NULL: this warp records nothing */
	uint32_t *head;
	uint32_t mask;
	uint64_t warp;
};

MORI_VIZ_FN struct mori_viz_warp mori_viz_open(struct mori_viz_header *h)
{
	struct mori_viz_warp w = {0, 0, 0, 0};
	if (!h || !h->enabled)
		return w;
	w.warp = mori_viz_warp_id();
	if (w.warp >= h->warps)
		return w;
	char *base = (char *)h;
	w.head = (uint32_t *)(base + mori_viz_heads_off()) + w.warp;
	w.ring = (struct mori_viz_event *)(base + mori_viz_events_off(h->warps)) + w.warp * h->events_per_warp;
	w.mask = h->events_per_warp - 1;
	return w;
}

MORI_VIZ_FN void mori_viz_log(struct mori_viz_warp *w, unsigned slot, unsigned type)
{
	if (!w->ring || !mori_viz_lane0())
		return;
	/* one writer per ring (lane 0 of its warp): plain stores; the host reads after the launch */
	uint32_t i = *w->head;
	struct mori_viz_event *e = &w->ring[i & w->mask];
	e->ts = mori_viz_clock();
	e->meta = mori_viz_meta(w->warp, slot, type);
	*w->head = i + 1;
}

/* One event without a per-warp handle: for kernels short of registers (the copy kernel) the
 * buffer's address stays in the launch parameters and each call finds the warp's ring itself. */
MORI_VIZ_FN void mori_viz_log_at(struct mori_viz_header *h, unsigned slot, unsigned type)
{
	struct mori_viz_warp w = mori_viz_open(h);
	mori_viz_log(&w, slot, type);
}
#endif

#ifdef MORI_VIZ
#define MORI_VIZ_DECL(buf) struct mori_viz_warp mori_viz_w_ = mori_viz_open(buf)
#define MORI_VIZ_BEGIN(slot) mori_viz_log(&mori_viz_w_, (slot), MORI_VIZ_EV_BEGIN)
#define MORI_VIZ_END(slot) mori_viz_log(&mori_viz_w_, (slot), MORI_VIZ_EV_END)
#define MORI_VIZ_INSTANT(slot) mori_viz_log(&mori_viz_w_, (slot), MORI_VIZ_EV_INSTANT)
#else
#define MORI_VIZ_DECL(buf) ((void)0)
#define MORI_VIZ_BEGIN(slot) ((void)0)
#define MORI_VIZ_END(slot) ((void)0)
#define MORI_VIZ_INSTANT(slot) ((void)0)
#endif
#endif
