/* RDMA devices, below the RDMA transport and the topology: which verbs devices and ports this
 * node has, their state, MTU, link speed, the RoCEv2 GID to use, NUMA node and PCI path,
 * filtered by the rdma_* options. Discovery is cheap (open, query, close) and is redone at each
 * `moractl nics`, so the list shows ports going down and devices disappearing without a
 * restart. A machine without RDMA devices (or without the kernel's uverbs) has an empty list;
 * nothing else in morid depends on it. */
#ifndef MORID_RDMA_H
#define MORID_RDMA_H
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"

struct morid;

/* One GID table entry, as discovery reads it (the pickers below are pure functions). */
enum rdma_gid_type { RDMA_GID_IB = 0, RDMA_GID_ROCE_V1 = 1, RDMA_GID_ROCE_V2 = 2 };
struct rdma_gid {
	uint32_t index;
	uint8_t raw[16];
	int type;                /* enum rdma_gid_type */
	char ndev[32];           /* netdev the GID belongs to ("" for IB) */
};

/* One (device, port). */
struct rdma_nic {
	char device[64];
	uint32_t port;
	char state[16];          /* ACTIVE, DOWN, INIT, ARMED, ... */
	int active;
	char link_layer[16];     /* Ethernet or InfiniBand */
	uint32_t active_mtu;     /* bytes */
	uint32_t max_mtu;        /* bytes */
	char speed[24];          /* "25 Gb/s x4" */
	double gbps;             /* lane speed times width */
	uint32_t max_msg;        /* largest message a work request may carry, bytes */
	uint32_t max_qp_wr;      /* deepest send queue */
	char fw[64];
	int gid_index;           /* chosen GID, -1 when none */
	char gid[48];            /* "fe80:0000:..." form of the chosen GID */
	char gid_type[12];       /* "RoCEv2", "RoCEv1", "IB" */
	char address[64];        /* the IP address the GID carries ("" for IB) */
	char netdev[32];
	int numa_node;           /* -1 when unknown (virtual devices) */
	char pci[32];            /* "0000:03:00.0"; "" for virtual devices */
	char pci_path[160];      /* sysfs path below /sys/devices */
	int usable;              /* ACTIVE, selected by the configuration, with a GID */
	char reason[96];         /* why not usable */
};

/* List every verbs device port, applying cfg's rdma_device, rdma_port, rdma_gid_index,
 * rdma_include and rdma_exclude. *out (malloc'd, caller frees) gets *n entries; with no device
 * *out is NULL, *n is 0, and note explains ("no RDMA devices (libibverbs: ...)").
 * Returns 0, or MORI_ENOMEM. */
int rdma_discover(const struct config *cfg, struct rdma_nic **out, int *n, char *note, size_t len);

/* Choose a GID from table t[0..n) for a port of link layer `ethernet` (1) or InfiniBand (0).
 * want_index >= 0: that index, which must be in the table. Else on Ethernet the RoCEv2 GID whose
 * address equals want_addr (an IP literal; NULL or "" for any), else the first RoCEv2 GID of an
 * IPv4 address, else of a global IPv6 address, else of a link-local one; on InfiniBand index 0.
 * Returns the position in t, or -1 with the reason in why. */
int rdma_gid_pick(const struct rdma_gid *t, int n, int ethernet, int want_index,
		  const char *want_addr, char *why, size_t len);

/* The IP address a RoCE GID carries ("192.168.77.1", "fd00::1"). Returns 0, or -1 for a zero GID. */
int rdma_gid_addr(const uint8_t raw[16], char *buf, size_t len);

/* Does name match the comma list of names or shell globs ("mlx5_*,rxe0")? An empty list matches
 * nothing. */
int rdma_name_listed(const char *list, const char *name);

/* NUMA node and PCI address of device `dev` under sysfs root (normally "/sys"): numa -1 and
 * pci "" for a device with no PCI parent (Soft-RoCE, virtual functions behind none). */
void rdma_sysfs_info(const char *root, const char *dev, int *numa, char *pci, size_t pcilen,
		     char *path, size_t pathlen);

/* Link speed text and Gb/s from ibv_port_attr's active_speed and active_width codes. */
double rdma_link_gbps(unsigned speed_code, unsigned width_code, char *text, size_t len);

/* The GID table of a port of an open verbs device (struct ibv_context *), as rdma_gid entries
 * in *out (malloc'd; caller frees). tbl_len is the port's gid_tbl_len, nports the device's
 * port count. Returns the count (0 on failure, *out then NULL or empty). */
int rdma_read_gids(void *ibv_ctx, uint32_t port, int tbl_len, int nports, struct rdma_gid **out);

/* Log the devices once at start ("rdma: no RDMA devices" or one line per port). */
void rdma_log_devices(const struct config *cfg);

#endif
