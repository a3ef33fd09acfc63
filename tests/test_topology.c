/* Topology below the hardware line: fake sysfs trees and a fake GPU table.
 *   two GPUs and two NICs on two NUMA nodes: the GPU x GPU and GPU x NIC matrices and each
 *     GPU's NIC ranking (speed, then PCI distance, then NUMA), the assignment of distinct NICs;
 *   no GPU (the NICs and NUMA nodes still listed, no ranking); no NIC (GPUs, empty ranking);
 *   topo_pci_distance's classes on paths alone. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../daemon/topo/topology.h"

static char root[256];

static void mkdirs(const char *rel)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	for (char *s = p + strlen(root) + 1; *s; s++)
		if (*s == '/') {
			*s = 0;
			mkdir(p, 0755);
			*s = '/';
		}
	mkdir(p, 0755);
}

static void put(const char *rel, const char *text)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	FILE *f = fopen(p, "w");
	ck_assert_msg(f, "%s: %s", p, strerror(errno));
	fputs(text, f);
	fclose(f);
}

static void link_to(const char *rel, const char *target)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	ck_assert_int_eq(symlink(target, p), 0);
}

/* A PCI function at devices/<path> with its numa_node, reachable as bus/pci/devices/<bdf>. */
static void pci_dev(const char *path, const char *bdf, int numa)
{
	char rel[400], tgt[400], n[16];
	snprintf(rel, sizeof(rel), "devices/%s", path);
	mkdirs(rel);
	snprintf(rel, sizeof(rel), "devices/%s/numa_node", path);
	snprintf(n, sizeof(n), "%d\n", numa);
	put(rel, n);
	snprintf(rel, sizeof(rel), "bus/pci/devices/%s", bdf);
	snprintf(tgt, sizeof(tgt), "../../../devices/%s", path);
	link_to(rel, tgt);
}

/* An RDMA device whose parent is the PCI function at devices/<path>. */
static void ib_dev(const char *name, const char *path)
{
	char rel[400], tgt[400];
	snprintf(rel, sizeof(rel), "class/infiniband/%s", name);
	mkdirs(rel);
	snprintf(rel, sizeof(rel), "class/infiniband/%s/device", name);
	snprintf(tgt, sizeof(tgt), "../../../devices/%s", path);
	link_to(rel, tgt);
}

#define GPU0 "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"
#define NIC0 "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"
#define GPU1 "pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:00.0/0000:83:00.0"
#define NIC1 "pci0000:80/0000:80:01.0/0000:81:00.0/0000:82:01.0/0000:84:00.0"

/* Two sockets: node0 with GPU0 and mlx5_0 behind one PCIe switch, node1 with GPU1 and mlx5_1. */
static void make_tree(void)
{
	snprintf(root, sizeof(root), "/tmp/mori-topo-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	mkdirs("bus/pci/devices");
	mkdirs("class/infiniband");
	mkdirs("devices/system/cpu");
	put("devices/system/cpu/online", "0-31\n");
	mkdirs("devices/system/node/node0");
	mkdirs("devices/system/node/node1");
	put("devices/system/node/node0/cpulist", "0-15\n");
	put("devices/system/node/node1/cpulist", "16-31\n");
	put("devices/system/node/node0/meminfo", "Node 0 MemTotal:       16777216 kB\nNode 0 MemFree: 1 kB\n");
	put("devices/system/node/node1/meminfo", "Node 1 MemTotal:       8388608 kB\n");
	pci_dev(GPU0, "0000:03:00.0", 0);
	pci_dev(NIC0, "0000:04:00.0", 0);
	pci_dev(GPU1, "0000:83:00.0", 1);
	pci_dev(NIC1, "0000:84:00.0", 1);
	ib_dev("mlx5_0", NIC0);
	ib_dev("mlx5_1", NIC1);
}

static void rm_tree(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	ck_assert_int_eq(system(cmd), 0);
}

/* ---- the fake GPU table ---- */
static int fake_peer[2][2] = {{0, 1}, {1, 0}};
static int f_get(gpu_device *d, int i) { *d = i; return 0; }
static int f_name(char *n, int len, gpu_device d) { snprintf(n, (size_t)len, "Fake H200 %d", d); return 0; }
static int f_bus(char *b, int len, gpu_device d)
{
	/* upper case and NVML's 8-digit domain for GPU1: both normalised */
	snprintf(b, (size_t)len, "%s", d ? "00000000:83:00.0" : "0000:03:00.0");
	return 0;
}
static int f_mem(size_t *m, gpu_device d) { *m = (size_t)141 << 30; return 0; }
static int f_peer(int *c, gpu_device a, gpu_device b) { *c = fake_peer[a][b]; return 0; }
static int f_p2p(int *v, int attr, gpu_device a, gpu_device b)
{
	*v = attr == GPU_P2P_ATTRIBUTE_PERFORMANCE_RANK ? 0 : fake_peer[a][b];
	return 0;
}
static int f_attr(int *v, int attr, gpu_device d)
{
	*v = attr == GPU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : 0;
	return 0;
}

static struct gpu_api fake_gpus(void)
{
	struct gpu_api g;
	memset(&g, 0, sizeof(g));
	g.backend = GPU_BACKEND_CUDA;
	g.name = "CUDA";
	g.device_count = 2;
	g.device_get = f_get;
	g.device_get_name = f_name;
	g.device_get_attribute = f_attr;
	g.device_get_pci_bus_id = f_bus;
	g.device_total_mem = f_mem;
	g.device_can_access_peer = f_peer;
	g.device_get_p2p_attribute = f_p2p;
	return g;
}

static void nic(struct rdma_nic *e, const char *dev, double gbps, int usable)
{
	memset(e, 0, sizeof(*e));
	snprintf(e->device, sizeof(e->device), "%s", dev);
	e->port = 1;
	e->gbps = gbps;
	e->usable = usable;
	e->active = usable;
	snprintf(e->state, sizeof(e->state), "%s", usable ? "ACTIVE" : "DOWN");
}

static const char *cell(const struct topo *t, int a, int b) { return t->gg[a * t->ngpu + b].kind; }
static const char *gn(const struct topo *t, int g, int n) { return t->gn[g * t->nnic + n].kind; }

START_TEST(two_gpus_two_nics_two_numa)
{
	make_tree();
	struct gpu_api g = fake_gpus();
	struct rdma_nic v[2];
	nic(&v[0], "mlx5_0", 200, 1);
	nic(&v[1], "mlx5_1", 200, 1);
	struct topo *t;
	ck_assert_int_eq(topo_build(root, &g, "", v, 2, "", &t), 0);
	ck_assert_int_eq(t->ngpu, 2);
	ck_assert_int_eq(t->nnic, 2);
	ck_assert_int_eq(t->ncpu, 32);
	ck_assert_int_eq(t->nnuma, 2);
	ck_assert_str_eq(t->numa[0].cpus, "0-15");
	ck_assert_str_eq(t->numa[1].cpus, "16-31");
	ck_assert_uint_eq(t->numa[0].mem, 16ull << 30);
	/* GPUs: from the table, placed by sysfs */
	ck_assert_str_eq(t->gpu[0].name, "Fake H200 0");
	ck_assert_str_eq(t->gpu[0].arch, "sm_90");
	ck_assert_str_eq(t->gpu[1].pci, "0000:83:00.0");
	ck_assert_str_eq(t->gpu[0].path, GPU0);
	ck_assert_int_eq(t->gpu[0].numa, 0);
	ck_assert_int_eq(t->gpu[1].numa, 1);
	ck_assert_uint_eq(t->gpu[1].mem, 141ull << 30);
	/* NICs: PCI parent and NUMA node through rdma_sysfs_info */
	ck_assert_str_eq(t->nic[0].pci, "0000:04:00.0");
	ck_assert_str_eq(t->nic[1].path, NIC1);
	ck_assert_int_eq(t->nic[1].numa, 1);
	/* the GPU x GPU matrix: across sockets, peer access as the driver says */
	ck_assert_str_eq(cell(t, 0, 0), "X");
	ck_assert_str_eq(cell(t, 0, 1), "SYS");
	ck_assert_str_eq(cell(t, 1, 0), "SYS");
	ck_assert_int_eq(t->gg[1].p2p, 1);
	ck_assert_int_eq(t->gg[1].p2p_rank, 0);
	ck_assert_int_eq(t->gg[1].hops, 9);
	/* GPU x NIC: each GPU shares a switch with its socket's NIC */
	ck_assert_str_eq(gn(t, 0, 0), "PIX");
	ck_assert_str_eq(gn(t, 0, 1), "SYS");
	ck_assert_str_eq(gn(t, 1, 0), "SYS");
	ck_assert_str_eq(gn(t, 1, 1), "PIX");
	ck_assert_int_eq(t->gn[0].hops, 3);
	/* ranking: same speed, so PCI distance decides; each GPU its own NIC */
	ck_assert_int_eq(t->rank[0], 0);
	ck_assert_int_eq(t->rank[1], 1);
	ck_assert_int_eq(t->rank[2], 1);
	ck_assert_int_eq(t->rank[3], 0);
	ck_assert_int_eq(topo_nic_for_gpu(t, 0), 0);
	ck_assert_int_eq(topo_nic_for_gpu(t, 1), 1);
	ck_assert_int_eq(topo_nic_for_gpu(t, 2), -1);
	topo_free(t);

	/* speed first: a 400 Gb/s mlx5_1 heads both rankings; GPU0 takes it, GPU1 the one left */
	nic(&v[1], "mlx5_1", 400, 1);
	ck_assert_int_eq(topo_build(root, &g, "", v, 2, "", &t), 0);
	ck_assert_int_eq(t->rank[0], 1);
	ck_assert_int_eq(t->rank[2], 1);
	ck_assert_int_eq(topo_nic_for_gpu(t, 0), 1);
	ck_assert_int_eq(topo_nic_for_gpu(t, 1), 0);
	topo_free(t);

	/* a port that is down ranks last and is never chosen: both GPUs share the other */
	nic(&v[1], "mlx5_1", 400, 0);
	ck_assert_int_eq(topo_build(root, &g, "", v, 2, "", &t), 0);
	ck_assert_int_eq(t->rank[2], 0);
	ck_assert_int_eq(t->rank[3], 1);
	ck_assert_int_eq(topo_nic_for_gpu(t, 0), 0);
	ck_assert_int_eq(topo_nic_for_gpu(t, 1), 0);
	topo_free(t);

	/* no peer access reported as such */
	fake_peer[0][1] = fake_peer[1][0] = 0;
	ck_assert_int_eq(topo_build(root, &g, "", v, 2, "", &t), 0);
	ck_assert_int_eq(t->gg[1].p2p, 0);
	fake_peer[0][1] = fake_peer[1][0] = 1;
	topo_free(t);
	rm_tree();
}
END_TEST

START_TEST(no_gpu)
{
	make_tree();
	struct rdma_nic v[2];
	nic(&v[0], "mlx5_0", 100, 1);
	nic(&v[1], "mlx5_1", 100, 1);
	struct topo *t;
	ck_assert_int_eq(topo_build(root, NULL, "libcuda.so.1 not found", v, 2, "", &t), 0);
	ck_assert_int_eq(t->ngpu, 0);
	ck_assert_int_eq(t->nnic, 2);
	ck_assert_int_eq(t->nnuma, 2);
	ck_assert_str_eq(t->gpu_note, "libcuda.so.1 not found");
	ck_assert_int_eq(t->nic[0].numa, 0);
	ck_assert_int_eq(topo_nic_for_gpu(t, 0), -1); /* rdma_node.c's pick() keeps its own choice */
	topo_free(t);
	rm_tree();
}
END_TEST

START_TEST(no_nic)
{
	make_tree();
	struct gpu_api g = fake_gpus();
	struct topo *t;
	ck_assert_int_eq(topo_build(root, &g, "", NULL, 0, "no RDMA devices", &t), 0);
	ck_assert_int_eq(t->ngpu, 2);
	ck_assert_int_eq(t->nnic, 0);
	ck_assert_str_eq(t->nic_note, "no RDMA devices");
	ck_assert_str_eq(cell(t, 0, 1), "SYS");
	ck_assert_int_eq(topo_nic_for_gpu(t, 0), -1);
	ck_assert_int_eq(topo_nic_for_gpu(t, 1), -1);
	topo_free(t);
	/* a tree with nothing in it: still a topology, of what can be seen */
	struct rdma_nic v;
	nic(&v, "rxe0", 10, 1); /* Soft-RoCE: no PCI parent */
	ck_assert_int_eq(topo_build("/nonexistent", &g, "", &v, 1, "", &t), 0);
	ck_assert_int_eq(t->nnuma, 0);
	ck_assert_str_eq(t->gpu[0].path, "");
	ck_assert_str_eq(gn(t, 0, 0), "?");
	ck_assert_int_eq(topo_nic_for_gpu(t, 0), 0);
	topo_free(t);
	rm_tree();
}
END_TEST

START_TEST(distance_classes)
{
	int h;
	ck_assert_int_eq(topo_pci_distance(GPU0, 0, GPU0, 0, &h), TD_SELF);
	ck_assert_int_eq(topo_pci_distance(GPU0, 0, NIC0, 0, &h), TD_PIX);
	/* two switches below a third: several bridges, no host bridge */
	ck_assert_int_eq(topo_pci_distance("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0",
					   0, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:06:00.0/0000:07:00.0/0000:08:00.0",
					   0, &h),
			 TD_PXB);
	ck_assert_int_eq(h, 7);
	/* two root ports of one root complex */
	ck_assert_int_eq(topo_pci_distance("pci0000:00/0000:00:01.0/0000:01:00.0", 0, "pci0000:00/0000:00:02.0/0000:02:00.0", 0, &h),
			 TD_PHB);
	ck_assert_int_eq(h, 3);
	/* two root complexes of one socket, and of two */
	ck_assert_int_eq(topo_pci_distance(GPU0, 0, "pci0000:40/0000:40:01.0/0000:41:00.0", 0, &h), TD_NODE);
	ck_assert_int_eq(topo_pci_distance(GPU0, 0, GPU1, 1, &h), TD_SYS);
	ck_assert_int_eq(topo_pci_distance(GPU0, -1, GPU1, -1, &h), TD_NODE); /* no NUMA: one node */
	ck_assert_int_eq(topo_pci_distance(GPU0, 0, "", 0, &h), TD_UNKNOWN);
	ck_assert_int_eq(h, -1);
	ck_assert_int_eq(topo_pci_distance(GPU0, 0, "virtual/net/eth0", 0, &h), TD_UNKNOWN);
	ck_assert_str_eq(topo_dist_name(TD_PXB), "PXB");
	ck_assert_str_eq(topo_dist_name(99), "?");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("topology");
	TCase *tc = tcase_create("topology");
	tcase_add_test(tc, two_gpus_two_nics_two_numa);
	tcase_add_test(tc, no_gpu);
	tcase_add_test(tc, no_nic);
	tcase_add_test(tc, distance_classes);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
