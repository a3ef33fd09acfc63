/* RDMA device discovery: verbs devices and ports, their state, MTU and speed, the GID
 * to use, NUMA node and PCI path from sysfs. See rdma.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "core/morid.h"
#include "rdma.h"

int rdma_name_listed(const char *list, const char *name)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", list ? list : "");
	for (char *save, *tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save))
		if (fnmatch(tok, name, 0) == 0)
			return 1;
	return 0;
}

static int is_v4_mapped(const uint8_t g[16])
{
	static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(g, pre, 12) == 0;
}

static int is_zero(const uint8_t g[16])
{
	for (int i = 0; i < 16; i++)
		if (g[i])
			return 0;
	return 1;
}

static int is_link_local6(const uint8_t g[16])
{
	return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

int rdma_gid_addr(const uint8_t raw[16], char *buf, size_t len)
{
	if (is_zero(raw)) {
		snprintf(buf, len, "%s", "");
		return -1;
	}
	char tmp[INET6_ADDRSTRLEN];
	if (is_v4_mapped(raw))
		inet_ntop(AF_INET, raw + 12, tmp, sizeof(tmp));
	else
		inet_ntop(AF_INET6, raw, tmp, sizeof(tmp));
	snprintf(buf, len, "%s", tmp);
	return 0;
}

/* Parse an IP literal into GID form (IPv4 mapped into ::ffff:0:0/96). */
static int addr_to_gid(const char *s, uint8_t g[16])
{
	memset(g, 0, 16);
	if (inet_pton(AF_INET, s, g + 12) == 1) {
		g[10] = g[11] = 0xff;
		return 0;
	}
	return inet_pton(AF_INET6, s, g) == 1 ? 0 : -1;
}

int rdma_gid_pick(const struct rdma_gid *t, int n, int ethernet, int want_index,
		  const char *want_addr, char *why, size_t len)
{
	if (want_index >= 0) {
		for (int i = 0; i < n; i++)
			if ((int)t[i].index == want_index && !is_zero(t[i].raw))
				return i;
		snprintf(why, len, "rdma_gid_index %d is not in the GID table", want_index);
		return -1;
	}
	if (!ethernet) {
		for (int i = 0; i < n; i++)
			if (t[i].index == 0 && !is_zero(t[i].raw))
				return i;
		snprintf(why, len, "no GID at index 0");
		return -1;
	}
	uint8_t want[16];
	int have_want = want_addr && want_addr[0] && addr_to_gid(want_addr, want) == 0;
	/* Preference classes, best first: the wanted address, IPv4, global IPv6, link-local. */
	int best = -1, best_class = 4;
	for (int i = 0; i < n; i++) {
		if (t[i].type != RDMA_GID_ROCE_V2 || is_zero(t[i].raw))
			continue;
		int cls = have_want && memcmp(t[i].raw, want, 16) == 0 ? 0
			  : is_v4_mapped(t[i].raw)                     ? 1
			  : !is_link_local6(t[i].raw)                  ? 2
								       : 3;
		if (cls < best_class) {
			best = i;
			best_class = cls;
		}
	}
	if (best < 0)
		snprintf(why, len, "no RoCEv2 GID (no IP address on the port's netdev?)");
	return best;
}

double rdma_link_gbps(unsigned speed_code, unsigned width_code, char *text, size_t len)
{
	double lane;
	switch (speed_code) {
	case 1: lane = 2.5; break;    /* SDR */
	case 2: lane = 5; break;      /* DDR */
	case 4: lane = 10; break;     /* QDR */
	case 8: lane = 10; break;     /* FDR10 (Soft-RoCE reports this) */
	case 16: lane = 14; break;    /* FDR */
	case 32: lane = 25; break;    /* EDR */
	case 64: lane = 50; break;    /* HDR */
	case 128: lane = 100; break;  /* NDR */
	default: lane = 0;
	}
	unsigned width;
	switch (width_code) {
	case 1: width = 1; break;
	case 2: width = 4; break;
	case 4: width = 8; break;
	case 8: width = 12; break;
	case 16: width = 2; break;
	default: width = 0;
	}
	if (!lane || !width) {
		snprintf(text, len, "unknown (speed %u, width %u)", speed_code, width_code);
		return 0;
	}
	snprintf(text, len, "%g Gb/s x%u", lane, width);
	return lane * width;
}

static int read_int_file(const char *path, int *v)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	int ok = fscanf(f, "%d", v) == 1;
	fclose(f);
	return ok ? 0 : -1;
}

void rdma_sysfs_info(const char *root, const char *dev, int *numa, char *pci, size_t pcilen,
		     char *path, size_t pathlen)
{
	char p[PATH_MAX], real[PATH_MAX];
	*numa = -1;
	snprintf(pci, pcilen, "%s", "");
	snprintf(path, pathlen, "%s", "");
	snprintf(p, sizeof(p), "%s/class/infiniband/%s/device", root, dev);
	if (!realpath(p, real))
		return; /* virtual device (rxe, siw): no parent */
	const char *below = strstr(real, "/devices/");
	snprintf(path, pathlen, "%s", below ? below + 9 : real);
	/* The parent is a PCI function when its name is domain:bus:dev.fn. */
	const char *base = strrchr(real, '/');
	base = base ? base + 1 : real;
	unsigned a, b, c, e;
	char tail;
	if (sscanf(base, "%x:%x:%x.%x%c", &a, &b, &c, &e, &tail) == 4)
		snprintf(pci, pcilen, "%s", base);
	snprintf(p, sizeof(p), "%s/class/infiniband/%s/device/numa_node", root, dev);
	int v;
	if (read_int_file(p, &v) == 0)
		*numa = v;
}

static const char *port_state_name(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_NOP: return "NOP";
	case IBV_PORT_DOWN: return "DOWN";
	case IBV_PORT_INIT: return "INIT";
	case IBV_PORT_ARMED: return "ARMED";
	case IBV_PORT_ACTIVE: return "ACTIVE";
	case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
	default: return "UNKNOWN";
	}
}

static uint32_t mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

static void gid_text(const uint8_t g[16], char *buf, size_t len)
{
	size_t o = 0;
	for (int i = 0; i < 16 && o < len; i += 2)
		o += (size_t)snprintf(buf + o, len - o, "%02x%02x%s", g[i], g[i + 1], i < 14 ? ":" : "");
}

int rdma_read_gids(void *ibv_ctx, uint32_t port, int tbl_len, int nports, struct rdma_gid **out)
{
	struct ibv_context *ctx = ibv_ctx;
	*out = NULL;
	if (tbl_len <= 0)
		return 0;
	size_t all = (size_t)tbl_len * (size_t)(nports > 0 ? nports : 1);
	struct ibv_gid_entry *e = calloc(all, sizeof(*e));
	struct rdma_gid *g = calloc((size_t)tbl_len, sizeof(*g));
	if (!e || !g) {
		free(e);
		free(g);
		return 0;
	}
	int n = 0;
	/* ibv_query_gid_table covers every port; keep ours. Fall back to one query per index for
	 * providers without it. */
	ssize_t got = ibv_query_gid_table(ctx, e, all, 0);
	if (got >= 0) {
		for (ssize_t i = 0; i < got && n < tbl_len; i++) {
			if (e[i].port_num != port)
				continue;
			g[n].index = e[i].gid_index;
			memcpy(g[n].raw, e[i].gid.raw, 16);
			g[n].type = e[i].gid_type == IBV_GID_TYPE_ROCE_V2   ? RDMA_GID_ROCE_V2
				    : e[i].gid_type == IBV_GID_TYPE_ROCE_V1 ? RDMA_GID_ROCE_V1
									    : RDMA_GID_IB;
			if (e[i].ndev_ifindex)
				if_indextoname(e[i].ndev_ifindex, g[n].ndev);
			n++;
		}
	} else {
		for (int i = 0; i < tbl_len; i++) {
			struct ibv_gid_entry one;
			if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &one, 0) != 0)
				continue;
			g[n].index = one.gid_index;
			memcpy(g[n].raw, one.gid.raw, 16);
			g[n].type = one.gid_type == IBV_GID_TYPE_ROCE_V2   ? RDMA_GID_ROCE_V2
				    : one.gid_type == IBV_GID_TYPE_ROCE_V1 ? RDMA_GID_ROCE_V1
									   : RDMA_GID_IB;
			if (one.ndev_ifindex)
				if_indextoname(one.ndev_ifindex, g[n].ndev);
			n++;
		}
	}
	free(e);
	*out = g;
	return n;
}

/* The host part of listen ("10.0.0.1:7100" -> "10.0.0.1"; "[fd00::1]:7100" -> "fd00::1"). */
static void listen_host(const struct config *cfg, char *buf, size_t len)
{
	const char *l = cfg->advertise[0] ? cfg->advertise : cfg->listen;
	snprintf(buf, len, "%s", "");
	if (!l[0])
		return;
	if (l[0] == '[') {
		const char *e = strchr(l, ']');
		if (e)
			snprintf(buf, len, "%.*s", (int)(e - l - 1), l + 1);
		return;
	}
	const char *c = strrchr(l, ':');
	snprintf(buf, len, "%.*s", c ? (int)(c - l) : (int)strlen(l), l);
}

static int add_port(struct rdma_nic **v, int *n, int *cap, struct rdma_nic *e)
{
	if (*n == *cap) {
		int nc = *cap ? *cap * 2 : 8;
		struct rdma_nic *nv = realloc(*v, (size_t)nc * sizeof(*nv));
		if (!nv)
			return -1;
		*v = nv;
		*cap = nc;
	}
	(*v)[(*n)++] = *e;
	return 0;
}

int rdma_discover(const struct config *cfg, struct rdma_nic **out, int *nout, char *note, size_t len)
{
	*out = NULL;
	*nout = 0;
	snprintf(note, len, "%s", "");
	int ndev = 0;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&ndev);
	if (!list) {
		snprintf(note, len, "no RDMA devices (libibverbs: %s)",
			 errno ? strerror(errno) : "no device list");
		return 0;
	}
	if (ndev == 0) {
		ibv_free_device_list(list);
		snprintf(note, len, "no RDMA devices");
		return 0;
	}
	char want_addr[128];
	listen_host(cfg, want_addr, sizeof(want_addr));
	struct rdma_nic *v = NULL;
	int n = 0, cap = 0, rc = 0;
	for (int i = 0; i < ndev && rc == 0; i++) {
		const char *name = ibv_get_device_name(list[i]);
		struct rdma_nic base = {0};
		snprintf(base.device, sizeof(base.device), "%s", name);
		base.gid_index = -1;
		rdma_sysfs_info("/sys", name, &base.numa_node, base.pci, sizeof(base.pci), base.pci_path,
				sizeof(base.pci_path));
		/* Configuration filters: a filtered device is listed, not used. */
		const char *filtered = NULL;
		if (cfg->rdma_device[0] && strcmp(cfg->rdma_device, name) != 0)
			filtered = "not rdma_device";
		else if (cfg->rdma_include[0] && !rdma_name_listed(cfg->rdma_include, name))
			filtered = "not in rdma_include";
		else if (rdma_name_listed(cfg->rdma_exclude, name))
			filtered = "in rdma_exclude";
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;
		if (!ctx || ibv_query_device(ctx, &da) != 0) {
			base.port = 1;
			snprintf(base.state, sizeof(base.state), "%s", "UNKNOWN");
			snprintf(base.reason, sizeof(base.reason), "cannot open: %s", strerror(errno));
			if (ctx)
				ibv_close_device(ctx);
			rc = add_port(&v, &n, &cap, &base);
			continue;
		}
		snprintf(base.fw, sizeof(base.fw), "%s", da.fw_ver);
		base.max_qp_wr = da.max_qp_wr > 0 ? (uint32_t)da.max_qp_wr : 0;
		for (uint32_t port = 1; port <= da.phys_port_cnt && rc == 0; port++) {
			struct rdma_nic e = base;
			struct ibv_port_attr pa;
			e.port = port;
			if (ibv_query_port(ctx, (uint8_t)port, &pa) != 0) {
				snprintf(e.state, sizeof(e.state), "%s", "UNKNOWN");
				snprintf(e.reason, sizeof(e.reason), "ibv_query_port: %s", strerror(errno));
				rc = add_port(&v, &n, &cap, &e);
				continue;
			}
			snprintf(e.state, sizeof(e.state), "%s", port_state_name(pa.state));
			e.active = pa.state == IBV_PORT_ACTIVE;
			int eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
			snprintf(e.link_layer, sizeof(e.link_layer), "%s", eth ? "Ethernet" : "InfiniBand");
			e.active_mtu = mtu_bytes(pa.active_mtu);
			e.max_mtu = mtu_bytes(pa.max_mtu);
			e.max_msg = pa.max_msg_sz;
			e.gbps = rdma_link_gbps(pa.active_speed, pa.active_width, e.speed, sizeof(e.speed));
			struct rdma_gid *gids;
			int ng = rdma_read_gids(ctx, port, pa.gid_tbl_len, da.phys_port_cnt, &gids);
			char why[96] = "";
			int k = rdma_gid_pick(gids, ng, eth, (int)cfg->rdma_gid_index, want_addr, why,
					      sizeof(why));
			if (k >= 0) {
				e.gid_index = (int)gids[k].index;
				gid_text(gids[k].raw, e.gid, sizeof(e.gid));
				snprintf(e.gid_type, sizeof(e.gid_type), "%s",
					 gids[k].type == RDMA_GID_ROCE_V2   ? "RoCEv2"
					 : gids[k].type == RDMA_GID_ROCE_V1 ? "RoCEv1"
									    : "IB");
				if (eth)
					rdma_gid_addr(gids[k].raw, e.address, sizeof(e.address));
				snprintf(e.netdev, sizeof(e.netdev), "%s", gids[k].ndev);
			} else if (eth && ng > 0) {
				/* show the netdev even when no GID fits */
				snprintf(e.netdev, sizeof(e.netdev), "%s", gids[0].ndev);
			}
			free(gids);
			if (filtered)
				snprintf(e.reason, sizeof(e.reason), "%s", filtered);
			else if (cfg->rdma_port && (int64_t)port != cfg->rdma_port)
				snprintf(e.reason, sizeof(e.reason), "not rdma_port %lld",
					 (long long)cfg->rdma_port);
			else if (!e.active)
				snprintf(e.reason, sizeof(e.reason), "port %s", e.state);
			else if (k < 0)
				snprintf(e.reason, sizeof(e.reason), "%s", why);
			else
				e.usable = 1;
			rc = add_port(&v, &n, &cap, &e);
		}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	if (rc != 0) {
		free(v);
		return MORI_ENOMEM;
	}
	if (cfg->rdma_device[0]) {
		int found = 0;
		for (int i = 0; i < n; i++)
			found |= strcmp(v[i].device, cfg->rdma_device) == 0;
		if (!found)
			snprintf(note, len, "rdma_device '%s' not found", cfg->rdma_device);
	}
	*out = v;
	*nout = n;
	return 0;
}

void rdma_log_devices(const struct config *cfg)
{
	struct rdma_nic *v;
	int n;
	char note[160];
	if (rdma_discover(cfg, &v, &n, note, sizeof(note)) != 0) {
		mlog_warn("rdma", "device discovery: out of memory");
		return;
	}
	if (note[0])
		mlog_notice("rdma", "%s", note);
	for (int i = 0; i < n; i++) {
		struct rdma_nic *e = &v[i];
		if (e->usable)
			mlog_notice("rdma", "%s port %u: %s %s, mtu %u, %s, gid %d %s (%s), numa %d%s%s",
				    e->device, e->port, e->state, e->link_layer, e->active_mtu, e->speed,
				    e->gid_index, e->address[0] ? e->address : e->gid, e->gid_type,
				    e->numa_node, e->pci[0] ? ", pci " : "", e->pci);
		else
			mlog_notice("rdma", "%s port %u: not used: %s", e->device, e->port, e->reason);
	}
	free(v);
}
