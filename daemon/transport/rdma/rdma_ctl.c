/* The NicsRequest of moractl: the device list as rdma_discover() sees it now. Apart
 * from rdma_dev.c so that programs using discovery need not link the control plane. */
#include <stdlib.h>

#include "core/morid.h"
#include "topo/rdma.h"
#include "rdma_ctl.h"
#include "rdma_core.h"

void rdma_nics_reply(struct morid *d, Mori__Reply *rep, struct rctx *r)
{
	struct rdma_nic *v;
	int n;
	char note[160];
	if (rdma_discover(&d->cfg, &v, &n, note, sizeof(note)) != 0) {
		reply_error(rep, MORI_ENOMEM, "rdma: out of memory listing devices");
		return;
	}
	Mori__NicsReply *nr = rctx_alloc(r, sizeof(*nr));
	Mori__NicInfo **arr = rctx_alloc(r, sizeof(*arr) * (size_t)(n + 1));
	if (!nr || !arr) {
		free(v);
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return;
	}
	mori__nics_reply__init(nr);
	nr->note = rctx_strdup(r, note);
	nr->nics = arr;
	for (int i = 0; i < n; i++) {
		struct rdma_nic *e = &v[i];
		Mori__NicInfo *ni = rctx_alloc(r, sizeof(*ni));
		if (!ni)
			break;
		mori__nic_info__init(ni);
		ni->device = rctx_strdup(r, e->device);
		ni->port = e->port;
		ni->state = rctx_strdup(r, e->state);
		ni->link_layer = rctx_strdup(r, e->link_layer);
		ni->active_mtu = e->active_mtu;
		ni->max_mtu = e->max_mtu;
		ni->speed = rctx_strdup(r, e->speed);
		ni->gbps = e->gbps;
		ni->max_msg = e->max_msg;
		ni->gid_index = e->gid_index;
		ni->gid = rctx_strdup(r, e->gid);
		ni->gid_type = rctx_strdup(r, e->gid_type);
		ni->address = rctx_strdup(r, e->address);
		ni->netdev = rctx_strdup(r, e->netdev);
		ni->numa_node = e->numa_node;
		ni->pci = rctx_strdup(r, e->pci);
		ni->pci_path = rctx_strdup(r, e->pci_path);
		ni->usable = e->usable;
		ni->reason = rctx_strdup(r, e->reason);
		ni->fw = rctx_strdup(r, e->fw);
		ni->max_qp_wr = e->max_qp_wr;
		arr[nr->n_nics++] = ni;
	}
	free(v);
	/* the transport's side: the port in use and the engine's counters */
	char in_use[200];
	const char *transport;
	struct rdma_stats st;
	rdma_node_info(d, in_use, sizeof(in_use), &transport, &st);
	nr->in_use = rctx_strdup(r, in_use);
	nr->transport = rctx_strdup(r, transport);
	static const char *const names[] = {"transfers", "transfer_errors", "bytes", "work_requests",
		"signalled", "chunks", "qp_resets", "qp_stalls", "reposted", "sq_full_waits", "timeouts",
		"notifications_in", "notification_copies_dropped"};
	uint64_t vals[] = {st.xfers, st.xfer_errors, st.bytes, st.wrs_posted, st.wrs_signaled, st.chunks,
			   st.qp_resets, st.stalls, st.requeued, st.sq_full_waits, st.timeouts, st.notifs_rx,
			   st.notifs_dup};
	size_t nc = sizeof(vals) / sizeof(vals[0]);
	Mori__Counter **cs = rctx_alloc(r, sizeof(*cs) * nc);
	for (size_t i = 0; cs && i < nc; i++) {
		cs[i] = rctx_alloc(r, sizeof(Mori__Counter));
		if (!cs[i])
			break;
		mori__counter__init(cs[i]);
		cs[i]->name = (char *)names[i];
		cs[i]->value = vals[i];
		nr->n_counters = i + 1;
	}
	nr->counters = cs;
	rep->body_case = MORI__REPLY__BODY_NICS;
	rep->nics = nr;
}
