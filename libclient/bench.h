/* libmori's GPU copy path below the daemon, for mori-gpubench: the one header a tool may use
 * besides mori.h (tools never include libclient internals). In libmori.a only, not in
 * libmori.so. One device, one transfer at a time, between two device buffers of this process
 * seen as a local and a remote VRAM region. Errors are MORI_E* codes, with the detail in
 * mori_client_last_error(NULL). */
#ifndef LIBMORI_BENCH_H
#define LIBMORI_BENCH_H
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"
#include "mori.h"

struct bench_gpu;

/* Device `dev`'s primary context and copy kernel, without a daemon. MORI_ENOGPU, MORI_EINVAL
 * (no such device), MORI_ENOKERNEL (no kernel for its architecture), MORI_ENOMEM. */
int bench_gpu_open(int dev, struct bench_gpu **out);
/* Frees everything bench_gpu_open made (not the caller's buffers). NULL is a no-op. */
void bench_gpu_close(struct bench_gpu *b);

gpu_function bench_gpu_kernel(const struct bench_gpu *b);
/* The copy kernel built with MORI-VIZ trace points (mori_copy_batch_viz; args.viz = 0 runs it
 * with tracing off), or NULL when the image lacks it. */
gpu_function bench_gpu_kernel_viz(const struct bench_gpu *b);
int bench_gpu_sms(const struct bench_gpu *b);
/* Make the device's context current on this thread / undo it. */
int bench_gpu_push(struct bench_gpu *b);
void bench_gpu_pop(struct bench_gpu *b);
/* The launch geometry gpu_xfer picks: chunk size (log2 bytes) for `total` bytes, and the grid
 * for total_chunks chunks, on this device. */
uint32_t bench_gpu_chunk_shift(const struct bench_gpu *b, uint64_t total);
unsigned bench_gpu_grid(const struct bench_gpu *b, uint64_t total_chunks);

/* src (the local side) and dst (the remote side), both `size` bytes on this device: what the
 * writes below copy between. */
void bench_gpu_regions(struct bench_gpu *b, gpu_dptr src, gpu_dptr dst, uint64_t size);
/* Start a write of n descriptors through libmori's gpu_xfer (staging, upload, launch), with a
 * deadline timeout_us from now; then call bench_gpu_poll until it is not MORI_EINPROGRESS. */
int bench_gpu_write(struct bench_gpu *b, const mori_desc *descs, size_t n, int64_t timeout_us);
/* The same through a prepared list: bench_gpu_list_prep uploads descs once (they must stay
 * valid until bench_gpu_list_free), each bench_gpu_list_write stages only 4-byte indices. */
int bench_gpu_list_prep(struct bench_gpu *b, const mori_desc *descs, size_t n);
int bench_gpu_list_write(struct bench_gpu *b, const uint32_t *idx, size_t n, int64_t timeout_us);
void bench_gpu_list_free(struct bench_gpu *b);
/* MORI_EINPROGRESS, MORI_OK or the write's error. */
int bench_gpu_poll(struct bench_gpu *b);
#endif
