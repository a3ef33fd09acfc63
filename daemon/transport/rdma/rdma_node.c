/* The RDMA transport's node: the device port and engine it opens, and the regions it has
 * registered with the device (for our own transfers, and separately for peers' access, which
 * ends the moment the registry says a region is gone). Below transport_rdma.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rdma_int.h"
#include "rdma_verbs.h"
#include "topo/topology.h"

/* ---- local registrations ---- */
static struct rmr *rmr_find(struct rnode *N, uint64_t region, uint32_t gen)
{
	list_each(it, &N->mrs) {
		struct rmr *m = list_entry(it, struct rmr, link);
		if (m->region == region && m->gen == gen && !m->gone)
			return m;
	}
	return NULL;
}

/* The registration of g (made on first use). remote: also for peers' access.
 * Returns NULL with a code and reason when the device cannot reach it. */
struct rmr *rmr_get(struct rnode *N, struct region *g, int remote, int *code, char *why,
			   size_t len)
{
	struct rmr *m = rmr_find(N, g->id, g->gen);
	if (!m) {
		if (g->kind != MORI_MEM_HOST) {
			*code = MORI_ENOTSUP;
			snprintf(why, len, "region %llu is not host memory", (unsigned long long)g->id);
			return NULL;
		}
		void *base = g->fd >= 0 ? region_map(g) : NULL;
		if (!base) {
			*code = MORI_ENOTSUP;
			snprintf(why, len, "region %llu is reachable only by cross-memory attach, not by the NIC",
				 (unsigned long long)g->id);
			return NULL;
		}
		if (!(m = calloc(1, sizeof(*m)))) {
			*code = MORI_ENOMEM;
			snprintf(why, len, "out of memory");
			return NULL;
		}
		m->region = g->id;
		m->gen = g->gen;
		m->addr = (uint64_t)(uintptr_t)base;
		m->size = g->size;
		list_add(&N->mrs, &m->link);
	}
	void **slot = remote ? &m->tmr : &m->lmr;
	if (!*slot) {
		char err[200];
		uint32_t lkey, rkey;
		int rc = rdma_vdev_reg(N->v, (void *)(uintptr_t)m->addr, m->size, remote, &lkey, &rkey, slot,
				       err, sizeof(err));
		if (rc) {
			*code = rc;
			snprintf(why, len, "registering region %llu with %.60s: %.100s", (unsigned long long)g->id,
				 rdma_vdev_info(N->v)->name, err);
			return NULL;
		}
		if (remote)
			m->rkey = rkey;
		else
			m->lkey = lkey;
	}
	return m;
}

void rmr_free(struct rmr *m)
{
	rdma_vdev_dereg(m->lmr);
	rdma_vdev_dereg(m->tmr);
	list_del(&m->link);
	free(m);
}

void rdma_region_gone(void *arg, struct region *g)
{
	struct rnode *N = arg;
	if (!N->on)
		return;
	list_each(it, &N->mrs) {
		struct rmr *m = list_entry(it, struct rmr, link);
		if (m->region != g->id || m->gen != g->gen)
			continue;
		/* Peers lose access now; our own jobs on it still run (they hold the region). */
		rdma_vdev_dereg(m->tmr);
		m->tmr = NULL;
		m->gone = 1;
		if (!m->users)
			rmr_free(m);
	}
}

/* With GPUs and several usable ports: the port the topology ranks first for GPU 0 (the one
 * engine serves the node; topology.h says how). -1 without a GPU: the caller's choice stays. */
static int pick_by_topology(const struct rdma_nic *v, int n)
{
	const struct gpu_api *g = gpu_api();
	struct topo *t;
	if (!g || topo_build("/sys", g, "", v, n, "", &t) != 0)
		return -1;
	int best = topo_nic_for_gpu(t, 0);
	if (best >= 0)
		mlog_notice("rdma", "%s port %u: ranked first for GPU 0 (%s, %s, %g Gb/s)", v[best].device,
			    v[best].port, t->gpu[0].pci[0] ? t->gpu[0].pci : "?",
			    topo_dist_name(t->gn[best].dist), v[best].gbps);
	topo_free(t);
	return best;
}

/* The device port to use: rdma_device, else the usable one whose address is ours, else with
 * GPUs the one the topology ranks first for GPU 0, else the first usable one. */
static int pick(struct rnode *N, char *name, size_t nlen, int *port, int *gidx)
{
	struct rdma_nic *v;
	int n;
	char note[160];
	if (rdma_discover(&N->d->cfg, &v, &n, note, sizeof(note)) != 0) {
		snprintf(N->why, sizeof(N->why), "out of memory");
		return -1;
	}
	const char *l = N->d->cfg.advertise[0] ? N->d->cfg.advertise : N->d->cfg.listen;
	int best = -1, usable = 0, ours = 0;
	for (int i = 0; i < n; i++) {
		if (!v[i].usable)
			continue;
		usable++;
		if (best < 0)
			best = i;
		size_t al = strlen(v[i].address);
		if (!ours && al && !strncmp(l, v[i].address, al) && l[al] == ':') {
			best = i;
			ours = 1;
		}
	}
	if (!ours && usable > 1) {
		int t = pick_by_topology(v, n);
		if (t >= 0)
			best = t;
	}
	if (best < 0) {
		snprintf(N->why, sizeof(N->why), "%s", note[0] ? note : n ? "no usable RDMA port" : "no RDMA devices");
		free(v);
		return -1;
	}
	snprintf(name, nlen, "%s", v[best].device);
	*port = (int)v[best].port;
	*gidx = v[best].gid_index;
	free(v);
	return 0;
}

/* Open the port pick() chose and an engine on it. 0, or -1 with N->why set (RDMA stays off). */
int rdma_device_open(struct rnode *N)
{
	struct morid *d = N->d;
	char name[64], err[200];
	int port, gidx;
	if (pick(N, name, sizeof(name), &port, &gidx) != 0) {
		if (N->mode == TM_ONLY)
			mlog_warn("rdma", "transport = rdma, but %s: cross-node transfers will be refused", N->why);
		else
			mlog_notice("rdma", "RDMA transport off: %s", N->why);
		return -1;
	}
	if (rdma_vdev_open(name, port, gidx, 8192, &N->v, err, sizeof(err)) != 0) {
		snprintf(N->why, sizeof(N->why), "%s", err);
		mlog_warn("rdma", "RDMA transport off: %s", err);
		return -1;
	}
	struct rdma_cfg cfg;
	rdma_cfg_defaults(&cfg);
	cfg.sq_depth = 128;
	cfg.rq_depth = 128;
	cfg.timeout = (uint8_t)d->cfg.rdma_qp_timeout;
	cfg.retry_cnt = (uint8_t)d->cfg.rdma_retry_cnt;
	cfg.rnr_retry = (uint8_t)d->cfg.rdma_rnr_retry;
	rdma_vdev_cfg(N->v, &cfg);
	if (!(N->e = rdma_eng_new(&rdma_verbs_ops, N->v, &cfg))) {
		rdma_vdev_close(N->v);
		N->v = NULL;
		snprintf(N->why, sizeof(N->why), "out of memory");
		return -1;
	}
	return 0;
}

static struct rnode *node(struct morid *d) { return d->peers ? d->peers->tp[TR_RDMA] : NULL; }

/* For moractl nics: the port in use and the engine's counters. */
void rdma_node_info(struct morid *d, char *in_use, size_t len, const char **transport,
		    struct rdma_stats *st)
{
	struct rnode *N = node(d);
	memset(st, 0, sizeof(*st));
	*transport = d->cfg.transport;
	if (!N) {
		snprintf(in_use, len, "%s", "");
		return;
	}
	snprintf(in_use, len, "%s%s", N->on ? "" : "off: ", N->why);
	if (N->e)
		*st = *rdma_eng_stats(N->e);
}

