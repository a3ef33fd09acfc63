/* Reaching a region's bytes from morid itself (cross-node transports), one backend per kind of
 * memory: a memfd morid maps, the owner's memory by cross-memory attach, VRAM through the GPU
 * table (gpu_stage.c). Every transport uses these; none reaches memory another way. */
#ifndef MORID_REGION_H
#define MORID_REGION_H
#include "registry.h"

/* Can morid read and write g's bytes (mapping a memfd or VRAM on first use)? 0, or a MORI_E*
 * code and the reason in msg. After it, g->map is set for memory morid maps directly. */
int region_reach(struct region *g, char *msg, size_t len);
/* Copy len bytes between g at off and buf (write: into g), whatever the backend. 0, or
 * MORI_ESTALE (deregistered), MORI_EPEERDEAD (owner gone), or the GPU's error. VRAM bytes are
 * counted in d's vram_bytes_staged. The caller checked [off, off+len) against g->size. */
int region_copy(struct morid *d, struct region *g, uint64_t off, void *buf, uint64_t len, int write);
/* The same, started rather than finished where it can be (VRAM and a pinned stage buffer: queued
 * on the device's staging stream, f noting it; buf untouched until f completes); else done
 * synchronously as region_copy. Same codes. */
struct stage_fence;
int region_copy_start(struct morid *d, struct region *g, uint64_t off, void *buf, uint64_t len, int write,
		      struct stage_fence *f);
/* The start of g in morid's own mapping (a memfd mapped on first use), or NULL when g's
 * backend has none (cross-memory attach, VRAM). */
void *region_map(struct region *g);
/* Fill a Handle naming region g of this daemon (allocated in r). with_secret: it carries g's
 * secret (the owner's registration reply, and answers to other daemons, which keep it to
 * themselves); never in what an opener's client gets (it cannot pass the region on). */
Mori__Handle *region_handle(struct morid *d, struct region *g, struct rctx *r, int with_secret);
#endif
