/* The MORI-SHMEM kernels in libmori's embedded image (kernels/shmem.cu), for the host code that
 * launches them through the module API (as libclient/gpu_copy.c launches mori_copy_batch).
 * Plain C: libclient includes it.
 *
 *   MORI_SHMEM_BARRIER_KERNEL(const struct mori_shmem_state *st, int *rc)
 *       mori_shmem_barrier_on_stream: barrier_all across the group's PEs (quiet, then every PE's
 *       flag), one block of MORI_SHMEM_KERNEL_THREADS threads, grid 1.
 *   MORI_SHMEM_QUIET_KERNEL(const struct mori_shmem_state *st, int *rc)
 *       mori_shmem_quiet_on_stream: completes every proxy request this PE posted before it;
 *       grid 1, block 1 (more threads are allowed and idle).
 * st: the device address of the PE's state (mori_shmem_state(g)): an explicit argument, since
 * libmori's one module per device serves every group of the process. rc: a device-visible int
 * (device or mapped host memory) that gets 0 or the MORI_E* code (abort, proxy failure); NULL:
 * not reported. Both are passed as kernel parameters: void *params[] = {&st, &rc}. */
#ifndef MORI_SHMEM_KERNELS_H
#define MORI_SHMEM_KERNELS_H

#define MORI_SHMEM_BARRIER_KERNEL "mori_shmem_barrier_on_stream"
#define MORI_SHMEM_QUIET_KERNEL "mori_shmem_quiet_on_stream"
#define MORI_SHMEM_KERNEL_THREADS 128
#endif
