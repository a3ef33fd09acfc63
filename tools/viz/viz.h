/* MORI-VIZ host side: set up a trace buffer (common/viz_layout.h), read what kernels
 * wrote into it, and export Chrome/Perfetto trace JSON (one process per block, one thread per
 * warp, events named per slot, microseconds). Used by mori-viz (tools/viz/main.c) and, on the GPU
 * machine, by mori-bench --trace. The buffer is untrusted input: every count is clamped. */
#ifndef MORI_VIZ_HOST_H
#define MORI_VIZ_HOST_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "viz_layout.h"

/* Initialise buf (mori_viz_bytes(warps, events_per_warp) bytes, zeroed here). events_per_warp
 * must be a power of two. Returns 0, or -1 for bad arguments. */
int viz_init(void *buf, size_t len, uint32_t warps, uint32_t events_per_warp, uint64_t clock_hz,
	     uint32_t warps_per_block, int enabled);

struct viz_event {
	uint64_t warp;
	uint32_t block;           /* warp / warps_per_block (0 when unknown) */
	uint32_t slot;
	int type;                 /* enum mori_viz_type */
	int64_t ts;               /* ticks */
};

struct viz_trace {
	struct viz_event *ev;     /* by warp, oldest first within each warp */
	size_t n;
	uint64_t clock_hz;
	uint32_t warps_per_block;
	uint64_t lost;            /* events overwritten by newer ones (ring wrapped) */
	uint64_t bad;             /* events whose meta word named another warp or an unknown type */
};

/* Read a buffer of len bytes. 0 with *t filled (free with viz_trace_free), or -1 with err. */
int viz_read(const void *buf, size_t len, struct viz_trace *t, char *err, size_t errlen);
void viz_trace_free(struct viz_trace *t);

/* Slot names: names[slot] or NULL ("slot N"). */
struct viz_names {
	const char *name[MORI_VIZ_MAX_SLOT + 1];
};
/* "N=NAME": set one. 0, or -1 when malformed. */
int viz_name_set(struct viz_names *nm, const char *spec);
/* The copy kernel's slot names (kernels/mori_viz.h). */
void viz_names_mori(struct viz_names *nm);

struct viz_stats { size_t spans, instants, unmatched; };
/* Write Chrome trace JSON: begin/end pairs per warp and slot become complete ("X") events,
 * instants "i" events, times in microseconds from the earliest event; an END without its
 * BEGIN (lost to the ring) or a BEGIN never ended is counted in st->unmatched and left out.
 * Returns 0, or -1 on a write error or out of memory. */
int viz_write_chrome(FILE *f, const struct viz_trace *t, const struct viz_names *nm, struct viz_stats *st);
#endif
