/* libmori's MORI-CCO internals: the communicator behind mori_cco_comm (cco.c: creation, memory,
 * windows, device communicators, the host calls) and the copy-engine server of a device
 * communicator's queues (cco_ce.c, below cco.c: it knows only the queues and the group). */
#ifndef LIBMORI_CCO_INT_H
#define LIBMORI_CCO_INT_H
#include <pthread.h>

#include "mori_cco.h"
#include "shmem_int.h"

struct cco_ce; /* cco_ce.c */

/* cco_ce.c: serve n queues of `entries` requests each (mori/device_host/cco_layout.h) for a device
 * communicator of g: *ctrl_addr and *ring_addr get the addresses its kernels use (device
 * addresses of pinned host memory for VRAM groups). MORI_ENOMEM, a driver error, MORI_ESYS (no
 * thread). */
int cco_ce_start(mori_group *g, int n, uint32_t entries, struct cco_ce **out, uint64_t *ctrl_addr,
		 uint64_t *ring_addr);
/* Stop the server (requests not yet served are dropped: done stops) and free the queues. */
void cco_ce_stop(struct cco_ce *ce);
#endif
