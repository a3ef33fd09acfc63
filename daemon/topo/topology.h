/* The node's topology: GPUs from the GPU runtime table (common/gpu.h), RDMA NIC
 * ports from rdma_discover (rdma.h), CPUs and NUMA nodes, all placed in the PCI tree that sysfs
 * shows, and for each GPU its NICs ranked best first, the way ROCm/mori's topology matches GPUs
 * and NICs. Pure functions of a sysfs root, a GPU table and a NIC list, so tests feed fake trees
 * and a fake table; no libuv, no protobuf here (observe/observe.c builds moractl's reply).
 *
 * PCI distance, nvidia-smi topo -m's classes, from the two devices' paths below /sys/devices:
 *   PIX   both below one PCIe switch (or one bridge): at most two levels under their common bridge
 *   PXB   below one bridge, deeper (several switches), never through the host bridge
 *   PHB   through the PCIe host bridge of one root complex
 *   NODE  across root complexes of one NUMA node
 *   SYS   across NUMA nodes (the SMP interconnect)
 *   ?     unknown (a device with no PCI parent: Soft-RoCE, a GPU sysfs does not show) */
#ifndef MORID_TOPOLOGY_H
#define MORID_TOPOLOGY_H
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "gpu.h"
#include "rdma.h"

enum topo_dist { TD_SELF = 0, TD_PIX, TD_PXB, TD_PHB, TD_NODE, TD_SYS, TD_UNKNOWN };
const char *topo_dist_name(int dist); /* "X", "PIX", ..., "?" */

struct topo_gpu {
	int index;               /* the driver's ordinal */
	char name[96];
	char arch[16];           /* "sm_90" */
	char pci[32];            /* "0000:17:00.0", lower case; "" when the driver does not say */
	char path[256];          /* sysfs path below /sys/devices ("" when not found) */
	int numa;                /* -1 unknown */
	uint64_t mem;            /* bytes; 0 unknown */
};

struct topo_nic {            /* one (device, port), as rdma_discover lists them */
	char device[64];
	uint32_t port;
	char pci[32];
	char path[256];
	int numa;
	double gbps;
	int usable;
	char state[16];
	char netdev[32];
};

struct topo_numa {
	int id;
	char cpus[128];          /* its cpulist ("0-15,32-47") */
	uint64_t mem;            /* bytes */
};

struct topo_cell {
	int dist;                /* enum topo_dist */
	int hops;                /* PCI devices between the two; -1 unknown */
	int p2p;                 /* GPU pairs: peer access 1, none 0, unknown -1 */
	int p2p_rank;            /* the driver's performance rank (CUDA), -1 unknown */
	int atomics;             /* native atomics over the link: 1, 0, -1 unknown */
	char kind[8];            /* the driver's link ("XGMI"), else the PCI class name */
};

struct topo {
	int ngpu, nnic, nnuma, ncpu;
	struct topo_gpu *gpu;
	struct topo_nic *nic;
	struct topo_numa *numa;
	struct topo_cell *gg;    /* ngpu x ngpu: gg[a * ngpu + b] */
	struct topo_cell *gn;    /* ngpu x nnic: gn[g * nnic + n] */
	int *rank;               /* ngpu x nnic: NIC indices best first for each GPU */
	int *chosen;             /* ngpu: the NIC each GPU uses (-1: none usable) */
	char gpu_note[200];      /* why there are no GPUs */
	char nic_note[160];      /* why there are no NICs */
};

/* Build the topology from sysfs under sysroot ("/sys"), the GPU table g (NULL: no GPU; the
 * reason goes in gpu_note) and NIC ports nics[0..nnic) (copied). Returns 0 with *out (free
 * with topo_free), or MORI_ENOMEM. */
int topo_build(const char *sysroot, const struct gpu_api *g, const char *gpu_note,
	       const struct rdma_nic *nics, int nnic, const char *nic_note, struct topo **out);
/* The same from this machine: gpu_api() and rdma_discover(cfg). */
int topo_discover(const struct config *cfg, struct topo **out);
void topo_free(struct topo *t);

/* The distance between two devices from their sysfs paths below /sys/devices and NUMA nodes;
 * *hops gets the PCI devices between them (-1 unknown). */
int topo_pci_distance(const char *a, int numa_a, const char *b, int numa_b, int *hops);

/* The NIC port (index into t->nic) GPU gpu uses, or -1. */
static inline int topo_nic_for_gpu(const struct topo *t, int gpu)
{
	return gpu >= 0 && gpu < t->ngpu ? t->chosen[gpu] : -1;
}
#endif
