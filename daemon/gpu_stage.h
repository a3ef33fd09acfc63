/* VRAM that morid itself reads and writes, for cross-node transfers over TCP (issue 5): the
 * daemon maps a client's VRAM region through the handle it brokers and copies between it and
 * pinned host buffers that the data streams send from and receive into. */
#ifndef MORID_GPU_STAGE_H
#define MORID_GPU_STAGE_H
#include <stddef.h>
#include <stdint.h>

struct region;

#define STAGE_BUF_BYTES (512u << 10) /* one pinned staging buffer: a TCP frame's largest payload */

/* Map r (kind VRAM) into morid once; later calls return at once. 0, or a MORI_E* code with
 * the reason in msg (no GPU here, unknown handle, the owner freed the memory...). */
int region_gpu_reach(struct region *r, char *msg, size_t len);
/* Copy len bytes between r at off and host memory buf (write: into r). Synchronous: returns
 * once the bytes have landed. 0 or a MORI_E* code. */
int region_gpu_copy(struct region *r, uint64_t off, void *buf, uint64_t len, int write);
/* Undo region_gpu_reach (the region is being freed; no copy runs on it). */
void region_gpu_release(struct region *r);

/* Host buffers of STAGE_BUF_BYTES pinned for fast GPU copies; stage_get falls back to plain
 * memory when pinning is impossible. Released with stage_put. */
void *stage_get(size_t len);
void stage_put(void *p);
/* Whether p came from the pinned pool (else the pool was empty: a slower, CPU-driven GPU copy). */
int stage_pinned(const void *p);
/* Pin (or unpin) a buffer the caller owns, e.g. a stream's receive buffer; best effort. */
int stage_pin(void *p, size_t len);
void stage_unpin(void *p);
/* Drop the cached pinned buffers and contexts (daemon exit). */
void gpu_stage_fini(void);
#endif
