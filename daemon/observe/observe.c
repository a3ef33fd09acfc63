/* moractl topo, diagnose and metrics: the control replies over topology.c,
 * diagnose.c and metrics.c. Top layer, called by control.c's dispatch only. */
#include <stdlib.h>
#include <string.h>

#include "diagnose.h"
#include "metrics.h"
#include "core/morid.h"
#include "observe.h"
#include "topo/rdma.h"
#include "transport/rdma/rdma_ctl.h"
#include "transport/rdma/rdma_core.h"
#include "topo/topology.h"

static Mori__TopoLink *link_of(struct rctx *r, int a, int b, const struct topo_cell *c)
{
	Mori__TopoLink *l = rctx_alloc(r, sizeof(*l));
	if (!l)
		return NULL;
	mori__topo_link__init(l);
	l->a = a;
	l->b = b;
	l->kind = rctx_strdup(r, c->kind);
	l->hops = c->hops;
	l->p2p = c->p2p;
	l->p2p_rank = c->p2p_rank;
	l->atomics = c->atomics;
	return l->kind ? l : NULL;
}

static int topo_fill(Mori__TopoReply *tr, const struct topo *t, struct rctx *r)
{
	size_t ng = (size_t)t->ngpu, nn = (size_t)t->nnic;
	tr->gpus = rctx_alloc(r, sizeof(void *) * (ng + 1));
	tr->nics = rctx_alloc(r, sizeof(void *) * (nn + 1));
	tr->numa = rctx_alloc(r, sizeof(void *) * ((size_t)t->nnuma + 1));
	tr->gpu_gpu = rctx_alloc(r, sizeof(void *) * (ng * ng + 1));
	tr->gpu_nic = rctx_alloc(r, sizeof(void *) * (ng * nn + 1));
	tr->ranking = rctx_alloc(r, sizeof(void *) * (ng + 1));
	if (!tr->gpus || !tr->nics || !tr->numa || !tr->gpu_gpu || !tr->gpu_nic || !tr->ranking)
		return -1;
	for (int i = 0; i < t->ngpu; i++) {
		Mori__TopoGpu *g = rctx_alloc(r, sizeof(*g));
		if (!g)
			return -1;
		mori__topo_gpu__init(g);
		g->index = t->gpu[i].index;
		g->name = rctx_strdup(r, t->gpu[i].name);
		g->pci = rctx_strdup(r, t->gpu[i].pci);
		g->arch = rctx_strdup(r, t->gpu[i].arch);
		g->numa_node = t->gpu[i].numa;
		g->memory_bytes = t->gpu[i].mem;
		tr->gpus[tr->n_gpus++] = g;
		Mori__TopoRank *k = rctx_alloc(r, sizeof(*k));
		int32_t *order = rctx_alloc(r, sizeof(int32_t) * (nn + 1));
		if (!k || !order)
			return -1;
		mori__topo_rank__init(k);
		k->gpu = i;
		for (size_t j = 0; j < nn; j++)
			order[j] = t->rank[(size_t)i * nn + j];
		k->nics = order;
		k->n_nics = nn;
		k->chosen = t->chosen[i];
		tr->ranking[tr->n_ranking++] = k;
		for (int b = 0; b < t->ngpu; b++)
			if (!(tr->gpu_gpu[tr->n_gpu_gpu++] = link_of(r, i, b, &t->gg[i * t->ngpu + b])))
				return -1;
		for (int n = 0; n < t->nnic; n++)
			if (!(tr->gpu_nic[tr->n_gpu_nic++] = link_of(r, i, n, &t->gn[i * t->nnic + n])))
				return -1;
	}
	for (int i = 0; i < t->nnic; i++) {
		Mori__TopoNic *n = rctx_alloc(r, sizeof(*n));
		if (!n)
			return -1;
		mori__topo_nic__init(n);
		n->device = rctx_strdup(r, t->nic[i].device);
		n->port = t->nic[i].port;
		n->pci = rctx_strdup(r, t->nic[i].pci);
		n->numa_node = t->nic[i].numa;
		n->gbps = t->nic[i].gbps;
		n->usable = t->nic[i].usable;
		n->state = rctx_strdup(r, t->nic[i].state);
		n->netdev = rctx_strdup(r, t->nic[i].netdev);
		tr->nics[tr->n_nics++] = n;
	}
	for (int i = 0; i < t->nnuma; i++) {
		Mori__TopoNuma *m = rctx_alloc(r, sizeof(*m));
		if (!m)
			return -1;
		mori__topo_numa__init(m);
		m->id = t->numa[i].id;
		m->cpus = rctx_strdup(r, t->numa[i].cpus);
		m->memory_bytes = t->numa[i].mem;
		tr->numa[tr->n_numa++] = m;
	}
	tr->cpus = (uint32_t)t->ncpu;
	tr->gpu_note = rctx_strdup(r, t->gpu_note);
	tr->nic_note = rctx_strdup(r, t->nic_note);
	return tr->gpu_note && tr->nic_note ? 0 : -1;
}

void observe_topo(struct morid *d, Mori__Reply *rep, struct rctx *r)
{
	struct topo *t;
	Mori__TopoReply *tr = rctx_alloc(r, sizeof(*tr));
	if (!tr || topo_discover(&d->cfg, &t) != 0) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__topo_reply__init(tr);
	int rc = topo_fill(tr, t, r);
	topo_free(t);
	char in_use[200];
	const char *transport;
	struct rdma_stats st;
	rdma_node_info(d, in_use, sizeof(in_use), &transport, &st);
	tr->rdma_in_use = rctx_strdup(r, in_use);
	if (rc != 0 || !tr->rdma_in_use) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	rep->body_case = MORI__REPLY__BODY_TOPO;
	rep->topo = tr;
}

void observe_diagnose(struct morid *d, Mori__Reply *rep, struct rctx *r)
{
	struct diag_check *c = calloc(DIAG_MAX, sizeof(*c));
	Mori__DiagnoseReply *dr = rctx_alloc(r, sizeof(*dr));
	Mori__DiagCheck **cs = rctx_alloc(r, sizeof(*cs) * DIAG_MAX);
	if (!c || !dr || !cs) {
		free(c);
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__diagnose_reply__init(dr);
	int n = diagnose_run(d, "/sys", "/proc", c);
	for (int i = 0; i < n; i++) {
		Mori__DiagCheck *k = rctx_alloc(r, sizeof(*k));
		if (!k)
			break;
		mori__diag_check__init(k);
		k->name = rctx_strdup(r, c[i].name);
		k->verdict = (uint32_t)c[i].verdict;
		k->detail = rctx_strdup(r, c[i].detail);
		k->remedy = rctx_strdup(r, c[i].remedy);
		if (!k->name || !k->detail || !k->remedy)
			break;
		cs[dr->n_checks++] = k;
	}
	free(c);
	dr->checks = cs;
	rep->body_case = MORI__REPLY__BODY_DIAGNOSE;
	rep->diagnose = dr;
}

void observe_metrics(struct morid *d, Mori__Reply *rep, struct rctx *r)
{
	size_t len;
	Mori__MetricsReply *mr = rctx_alloc(r, sizeof(*mr));
	char *text = metrics_render(d, &len);
	char *kept = text ? rctx_strdup(r, text) : NULL;
	free(text);
	if (!mr || !kept) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__metrics_reply__init(mr);
	mr->text = kept;
	rep->body_case = MORI__REPLY__BODY_METRICS;
	rep->metrics = mr;
}
