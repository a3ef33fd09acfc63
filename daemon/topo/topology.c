/* The node's topology (see topology.h): GPUs, NIC ports, CPUs and NUMA nodes placed in sysfs's
 * PCI tree, the GPU x GPU and GPU x NIC matrices, and each GPU's NICs ranked. Below the RDMA
 * transport (rdma_node.c picks its port through it) and above rdma_dev.c's discovery. */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mori.h"
#include "topology.h"

const char *topo_dist_name(int dist)
{
	static const char *const names[] = {"X", "PIX", "PXB", "PHB", "NODE", "SYS", "?"};
	return dist >= 0 && dist <= TD_UNKNOWN ? names[dist] : "?";
}

/* ---- sysfs ---- */

static int read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	char *ok = fgets(buf, (int)len, f);
	fclose(f);
	if (!ok)
		return -1;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

static int read_int(const char *path, int dflt)
{
	char b[32];
	return read_line(path, b, sizeof(b)) == 0 && (isdigit((unsigned char)b[0]) || b[0] == '-') ? atoi(b) : dflt;
}

/* Path below .../devices/ of a resolved sysfs link ("" when it does not resolve). */
static void devices_path(const char *link, char *out, size_t len)
{
	char real[PATH_MAX];
	snprintf(out, len, "%s", "");
	if (!realpath(link, real))
		return;
	const char *below = strstr(real, "/devices/");
	if (below)
		snprintf(out, len, "%s", below + 9);
}

/* Count the CPUs of a cpulist ("0-3,8,10-11" -> 7). */
static int cpulist_count(const char *s)
{
	int n = 0;
	while (*s) {
		char *end;
		long a = strtol(s, &end, 10);
		if (end == s)
			break;
		long b = a;
		if (*end == '-')
			b = strtol(end + 1, &end, 10);
		if (b >= a)
			n += (int)(b - a + 1);
		s = *end == ',' ? end + 1 : end;
		if (*s && !isdigit((unsigned char)*s))
			break;
	}
	return n;
}

static int numa_cmp(const void *a, const void *b)
{
	return ((const struct topo_numa *)a)->id - ((const struct topo_numa *)b)->id;
}

static int load_numa(struct topo *t, const char *root)
{
	char p[PATH_MAX], line[256];
	snprintf(p, sizeof(p), "%s/devices/system/cpu/online", root);
	if (read_line(p, line, sizeof(line)) == 0)
		t->ncpu = cpulist_count(line);
	snprintf(p, sizeof(p), "%s/devices/system/node", root);
	DIR *dir = opendir(p);
	if (!dir)
		return 0;
	struct dirent *e;
	int cap = 0;
	while ((e = readdir(dir))) {
		if (strncmp(e->d_name, "node", 4) || !isdigit((unsigned char)e->d_name[4]))
			continue;
		if (t->nnuma == cap) {
			int nc = cap ? cap * 2 : 4;
			struct topo_numa *nv = realloc(t->numa, (size_t)nc * sizeof(*nv));
			if (!nv) {
				closedir(dir);
				return MORI_ENOMEM;
			}
			t->numa = nv;
			cap = nc;
		}
		struct topo_numa *m = &t->numa[t->nnuma++];
		memset(m, 0, sizeof(*m));
		m->id = atoi(e->d_name + 4);
		snprintf(p, sizeof(p), "%s/devices/system/node/%s/cpulist", root, e->d_name);
		read_line(p, m->cpus, sizeof(m->cpus));
		snprintf(p, sizeof(p), "%s/devices/system/node/%s/meminfo", root, e->d_name);
		FILE *f = fopen(p, "re");
		while (f && fgets(line, sizeof(line), f)) {
			const char *k = strstr(line, "MemTotal:");
			if (k) {
				m->mem = strtoull(k + 9, NULL, 10) * 1024;
				break;
			}
		}
		if (f)
			fclose(f);
	}
	closedir(dir);
	qsort(t->numa, (size_t)t->nnuma, sizeof(*t->numa), numa_cmp);
	return 0;
}

/* ---- PCI distance ---- */

#define MAX_DEPTH 32

static int split_path(const char *path, char *buf, size_t len, char **comp)
{
	snprintf(buf, len, "%s", path);
	int n = 0;
	for (char *save, *tok = strtok_r(buf, "/", &save); tok && n < MAX_DEPTH; tok = strtok_r(NULL, "/", &save))
		comp[n++] = tok;
	return n;
}

int topo_pci_distance(const char *a, int numa_a, const char *b, int numa_b, int *hops)
{
	char ba[512], bb[512], *ca[MAX_DEPTH], *cb[MAX_DEPTH];
	*hops = -1;
	if (!a || !b || !a[0] || !b[0])
		return TD_UNKNOWN;
	int na = split_path(a, ba, sizeof(ba), ca), nb = split_path(b, bb, sizeof(bb), cb);
	if (na < 2 || nb < 2 || strncmp(ca[0], "pci", 3) || strncmp(cb[0], "pci", 3))
		return TD_UNKNOWN; /* not below a PCI root */
	int k = 0;
	while (k < na && k < nb && !strcmp(ca[k], cb[k]))
		k++;
	if (k == na && k == nb) {
		*hops = 0;
		return TD_SELF;
	}
	if (k == 0) {
		/* different host bridges: through the virtual root joining them */
		*hops = na + nb - 1;
		return numa_a == numa_b ? TD_NODE : TD_SYS;
	}
	*hops = (na - k) + (nb - k) - 1;
	if (k == 1)
		return TD_PHB; /* the common ancestor is the host bridge itself */
	return na - k <= 2 && nb - k <= 2 ? TD_PIX : TD_PXB;
}

/* ---- GPUs ---- */

/* "00000000:17:00.0" / "0000:17:00.0" in any case -> "0000:17:00.0". */
static void norm_bdf(const char *in, char *out, size_t len)
{
	size_t n = strlen(in);
	const char *s = n > 12 ? in + n - 12 : in;
	size_t i = 0;
	for (; s[i] && i + 1 < len; i++)
		out[i] = (char)tolower((unsigned char)s[i]);
	out[i] = 0;
}

static void load_gpus(struct topo *t, const char *root, const struct gpu_api *g)
{
	char p[PATH_MAX], bus[64];
	for (int i = 0; i < t->ngpu; i++) {
		struct topo_gpu *G = &t->gpu[i];
		gpu_device dev = i;
		G->index = i;
		G->numa = -1;
		if (g->device_get && g->device_get(&dev, i) != 0)
			dev = i;
		if (g->device_get_name(G->name, (int)sizeof(G->name), dev) != 0)
			snprintf(G->name, sizeof(G->name), "%s", "?");
		gpu_arch_name(g, dev, G->arch, sizeof(G->arch));
		size_t mem = 0;
		if (g->device_total_mem && g->device_total_mem(&mem, dev) == 0)
			G->mem = mem;
		if (g->device_get_pci_bus_id && g->device_get_pci_bus_id(bus, (int)sizeof(bus), dev) == 0) {
			norm_bdf(bus, G->pci, sizeof(G->pci));
			snprintf(p, sizeof(p), "%s/bus/pci/devices/%s", root, G->pci);
			devices_path(p, G->path, sizeof(G->path));
			snprintf(p, sizeof(p), "%s/bus/pci/devices/%s/numa_node", root, G->pci);
			G->numa = read_int(p, -1);
		}
	}
}

static void gpu_pair(struct topo *t, const struct gpu_api *g, int a, int b)
{
	struct topo_cell *c = &t->gg[a * t->ngpu + b];
	c->p2p = c->p2p_rank = c->atomics = -1;
	c->dist = topo_pci_distance(t->gpu[a].path, t->gpu[a].numa, t->gpu[b].path, t->gpu[b].numa, &c->hops);
	snprintf(c->kind, sizeof(c->kind), "%s", topo_dist_name(c->dist));
	if (a == b)
		return;
	int v;
	if (g->device_can_access_peer && g->device_can_access_peer(&v, a, b) == 0)
		c->p2p = !!v;
	if (g->device_get_p2p_attribute) {
		if (g->device_get_p2p_attribute(&v, GPU_P2P_ATTRIBUTE_ACCESS_SUPPORTED, a, b) == 0 && c->p2p < 0)
			c->p2p = !!v;
		if (g->device_get_p2p_attribute(&v, GPU_P2P_ATTRIBUTE_PERFORMANCE_RANK, a, b) == 0)
			c->p2p_rank = v;
		if (g->device_get_p2p_attribute(&v, GPU_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, a, b) == 0)
			c->atomics = !!v;
	}
	unsigned type, hops;
	if (g->ext_get_link_type_and_hop_count && g->ext_get_link_type_and_hop_count(a, b, &type, &hops) == 0 &&
	    type == GPU_HIP_LINK_XGMI)
		snprintf(c->kind, sizeof(c->kind), "XGMI");
}

/* ---- ranking ---- */

struct rank_ctx { const struct topo *t; int g; };
static __thread struct rank_ctx rank_by; /* qsort has no context argument */

static int nic_better(int x, int y)
{
	const struct topo *t = rank_by.t;
	const struct topo_nic *a = &t->nic[x], *b = &t->nic[y];
	const struct topo_cell *ca = &t->gn[rank_by.g * t->nnic + x], *cb = &t->gn[rank_by.g * t->nnic + y];
	int gnuma = t->gpu[rank_by.g].numa;
	if (a->usable != b->usable)
		return a->usable ? -1 : 1;
	if (a->gbps != b->gbps)
		return a->gbps > b->gbps ? -1 : 1;
	if (ca->dist != cb->dist)
		return ca->dist < cb->dist ? -1 : 1;
	unsigned ha = (unsigned)ca->hops, hb = (unsigned)cb->hops; /* -1 sorts last */
	if (ha != hb)
		return ha < hb ? -1 : 1;
	int la = gnuma >= 0 && a->numa == gnuma, lb = gnuma >= 0 && b->numa == gnuma;
	if (la != lb)
		return la ? -1 : 1;
	int c = strcmp(a->device, b->device);
	if (c)
		return c;
	return a->port < b->port ? -1 : a->port > b->port;
}

static int rank_cmp(const void *x, const void *y) { return nic_better(*(const int *)x, *(const int *)y); }

/* Each GPU takes the best usable NIC no GPU before it took; once every usable one is taken,
 * GPU g shares the (g mod usable)-th of its own ranking (ROCm/mori's MatchAllGpusAndNics). */
static void assign(struct topo *t)
{
	char *taken = calloc((size_t)t->nnic + 1, 1);
	for (int g = 0; g < t->ngpu; g++) {
		int *r = &t->rank[g * t->nnic], nusable = 0;
		t->chosen[g] = -1;
		for (int i = 0; i < t->nnic; i++)
			nusable += t->nic[r[i]].usable;
		for (int i = 0; i < nusable && t->chosen[g] < 0; i++)
			if (!taken || !taken[r[i]])
				t->chosen[g] = r[i];
		if (t->chosen[g] < 0 && nusable)
			t->chosen[g] = r[g % nusable];
		if (taken && t->chosen[g] >= 0)
			taken[t->chosen[g]] = 1;
	}
	free(taken);
}

static void rank_nics(struct topo *t)
{
	for (int g = 0; g < t->ngpu; g++) {
		for (int n = 0; n < t->nnic; n++) {
			struct topo_cell *c = &t->gn[g * t->nnic + n];
			c->p2p = c->p2p_rank = c->atomics = -1;
			c->dist = topo_pci_distance(t->gpu[g].path, t->gpu[g].numa, t->nic[n].path, t->nic[n].numa,
						    &c->hops);
			snprintf(c->kind, sizeof(c->kind), "%s", topo_dist_name(c->dist));
			t->rank[g * t->nnic + n] = n;
		}
		rank_by = (struct rank_ctx){t, g};
		qsort(&t->rank[g * t->nnic], (size_t)t->nnic, sizeof(int), rank_cmp);
	}
	assign(t);
}

/* ---- building ---- */

static void load_nics(struct topo *t, const char *root, const struct rdma_nic *nics)
{
	for (int i = 0; i < t->nnic; i++) {
		struct topo_nic *N = &t->nic[i];
		const struct rdma_nic *e = &nics[i];
		snprintf(N->device, sizeof(N->device), "%s", e->device);
		N->port = e->port;
		N->gbps = e->gbps;
		N->usable = e->usable;
		snprintf(N->state, sizeof(N->state), "%s", e->state);
		snprintf(N->netdev, sizeof(N->netdev), "%s", e->netdev);
		rdma_sysfs_info(root, e->device, &N->numa, N->pci, sizeof(N->pci), N->path, sizeof(N->path));
	}
}

void topo_free(struct topo *t)
{
	if (!t)
		return;
	free(t->gpu);
	free(t->nic);
	free(t->numa);
	free(t->gg);
	free(t->gn);
	free(t->rank);
	free(t->chosen);
	free(t);
}

int topo_build(const char *root, const struct gpu_api *g, const char *gpu_note, const struct rdma_nic *nics,
	       int nnic, const char *nic_note, struct topo **out)
{
	struct topo *t = calloc(1, sizeof(*t));
	*out = NULL;
	if (!t)
		return MORI_ENOMEM;
	t->ngpu = g && g->device_count > 0 ? g->device_count : 0;
	t->nnic = nnic > 0 ? nnic : 0;
	snprintf(t->gpu_note, sizeof(t->gpu_note), "%s", !t->ngpu && gpu_note ? gpu_note : "");
	snprintf(t->nic_note, sizeof(t->nic_note), "%s", !t->nnic && nic_note ? nic_note : "");
	size_t ng = (size_t)t->ngpu, nn = (size_t)t->nnic;
	t->gpu = calloc(ng + 1, sizeof(*t->gpu));
	t->nic = calloc(nn + 1, sizeof(*t->nic));
	t->gg = calloc(ng * ng + 1, sizeof(*t->gg));
	t->gn = calloc(ng * nn + 1, sizeof(*t->gn));
	t->rank = calloc(ng * nn + 1, sizeof(int));
	t->chosen = calloc(ng + 1, sizeof(int));
	if (!t->gpu || !t->nic || !t->gg || !t->gn || !t->rank || !t->chosen || load_numa(t, root) != 0) {
		topo_free(t);
		return MORI_ENOMEM;
	}
	if (t->ngpu)
		load_gpus(t, root, g);
	load_nics(t, root, nics);
	for (int a = 0; a < t->ngpu; a++)
		for (int b = 0; b < t->ngpu; b++)
			gpu_pair(t, g, a, b);
	rank_nics(t);
	*out = t;
	return 0;
}

int topo_discover(const struct config *cfg, struct topo **out)
{
	struct rdma_nic *v = NULL;
	int n = 0;
	char note[160];
	*out = NULL;
	if (rdma_discover(cfg, &v, &n, note, sizeof(note)) != 0)
		return MORI_ENOMEM;
	const struct gpu_api *g = gpu_api();
	int rc = topo_build("/sys", g, g ? "" : gpu_unavailable_reason(), v, n, note, out);
	free(v);
	return rc;
}
