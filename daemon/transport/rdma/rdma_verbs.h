/* libibverbs behind struct rdma_ops (rdma_verbs.c): one device port, a protection domain,
 * one completion queue with its completion channel (an fd for the loop). */
#ifndef MORID_RDMA_VERBS_H
#define MORID_RDMA_VERBS_H
#include <stddef.h>
#include <stdint.h>

#include "rdma_core.h"

struct rdma_vdev;

struct rdma_vinfo {
	char name[64];
	uint8_t port;
	int gid_index;
	uint8_t gid[16];
	char address[64];    /* the IP address of the GID */
	uint32_t mtu;        /* active MTU, bytes */
	uint32_t max_msg;    /* bytes */
	uint32_t max_qp_wr;
};

/* Open device `name` (NULL or "": the first one), port (<= 0: 1), GID index (< 0: the RoCEv2
 * GID of the first IPv4, else IPv6, address), with a CQ of cq_depth entries.
 * Errors: MORI_ENOTSUP (no devices, not RoCE), MORI_ENOENT (no such device), MORI_EIO (port
 * down, no usable GID, a verbs call failed), MORI_ENOMEM; err says which. */
int rdma_vdev_open(const char *name, int port, int gid_index, uint32_t cq_depth,
		   struct rdma_vdev **out, char *err, size_t len);
void rdma_vdev_close(struct rdma_vdev *v); /* after every QP and MR of it is gone */
const struct rdma_vinfo *rdma_vdev_info(const struct rdma_vdev *v);
/* Fill the device-given fields of an engine configuration (port, GID, MTU) and clamp chunk,
 * send-queue depth and RDMA-read depth to what the device allows. */
void rdma_vdev_cfg(const struct rdma_vdev *v, struct rdma_cfg *c);

/* The completion channel's fd (non-blocking): readable when a completion arrived. */
int rdma_vdev_fd(const struct rdma_vdev *v);
/* After the fd turned readable: consume its events (acknowledged in batches) and re-arm the CQ.
 * Then poll (rdma_eng_progress) until empty. Returns the number of events, -1 on error. */
int rdma_vdev_events(struct rdma_vdev *v);

/* Register memory for transfers: local write always, remote read/write when remote != 0.
 * Errors: MORI_ENOMEM, MORI_ESYS (err has ibv_reg_mr's reason). */
int rdma_vdev_reg(struct rdma_vdev *v, void *addr, size_t len, int remote, uint32_t *lkey,
		  uint32_t *rkey, void **mr, char *err, size_t errlen);
void rdma_vdev_dereg(void *mr);

extern const struct rdma_ops rdma_verbs_ops; /* ctx: struct rdma_vdev * */
#endif
