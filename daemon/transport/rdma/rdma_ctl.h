/* What the rest of morid asks of the RDMA transport (transport/rdma/): moractl nics and its
 * line in the metrics. Apart from topo/rdma.h, the device discovery below every transport. */
#ifndef MORID_RDMA_CTL_H
#define MORID_RDMA_CTL_H
#include <stddef.h>

struct morid;
struct rctx;
struct Mori__Reply;
struct rdma_stats;

/* The NicsRequest of moractl: fills rep (rdma_ctl.c). */
void rdma_nics_reply(struct morid *d, struct Mori__Reply *rep, struct rctx *r);

/* For moractl nics and metrics: the port in use (or why none), the transport option, engine
 * counters (rdma_node.c). */
void rdma_node_info(struct morid *d, char *in_use, size_t len, const char **transport,
		    struct rdma_stats *st);
#endif
