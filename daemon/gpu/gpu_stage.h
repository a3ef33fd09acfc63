/* VRAM that morid itself reads and writes, for cross-node transfers over TCP: the
 * daemon maps a client's VRAM region through the handle it brokers and copies between it and
 * pinned host buffers that the data streams send from and receive into. */
#ifndef MORID_GPU_STAGE_H
#define MORID_GPU_STAGE_H
#include <stddef.h>
#include <stdint.h>

struct region;

#define STAGE_BUF_BYTES (512u << 10) /* one pinned staging buffer: a TCP frame's largest payload */
#define STAGE_DEVICES 16

/* Map r (kind VRAM) into morid once; later calls return at once. 0, or a MORI_E* code with
 * the reason in msg (no GPU here, unknown handle, the owner freed the memory...). */
int region_gpu_reach(struct region *r, char *msg, size_t len);
/* Copy len bytes between r at off and host memory buf (write: into r). Synchronous: returns
 * once the bytes have landed. 0 or a MORI_E* code. */
int region_gpu_copy(struct region *r, uint64_t off, void *buf, uint64_t len, int write);
/* The same copy started, not waited for: queued on the staging stream of r's device (copies run
 * in the order started), the device noted in f. buf must be pinned (stage_get's, stage_pinned)
 * and stay untouched until f completes (stage_fence_poll, or stage_fence_drop). 0 or MORI_E*. */
struct stage_fence;
int region_gpu_copy_start(struct region *r, uint64_t off, void *buf, uint64_t len, int write, struct stage_fence *f);
/* Wait until no started copy of r's device runs (any region's: the streams are per device): the
 * owner may reuse the memory once its deregistration is answered. */
void region_gpu_quiesce(struct region *r);
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
/* Completion of asynchronous copies (region_gpu_copy_start): one event per device they used,
 * recorded after them. Zeroed (`= {0}`) is empty. The loop polls it (a copy of 512 KiB takes
 * ~10-40 us at the PCIe rate) instead of blocking in a synchronous copy, so the data streams'
 * sockets keep moving meanwhile. */
struct stage_fence {
	uint32_t mask;                 /* devices with copies started, not yet recorded */
	uint32_t recorded;             /* devices whose event is recorded */
	uint8_t write;                 /* the copies' direction: 1 to VRAM, 0 to host (one a fence) */
	void *ev[STAGE_DEVICES];       /* gpu_event per device */
};
/* Record the events after every copy started under f (the copies themselves are already queued). */
int stage_fence_record(struct stage_fence *f);
/* 1: every copy under f finished (its events go back to the pool, f is empty again); 0: not yet;
 * a MORI_E* code (negative): a copy failed (f is empty again). Records first where needed. */
int stage_fence_poll(struct stage_fence *f);
/* Wait for f's copies (whatever their result) and empty it: before its buffers are reused. */
void stage_fence_drop(struct stage_fence *f);
/* Drop the cached pinned buffers and contexts (daemon exit). */
void gpu_stage_fini(void);
#endif
