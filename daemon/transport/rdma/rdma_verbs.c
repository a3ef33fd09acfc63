/* The hardware line, for real: struct rdma_ops over libibverbs (rdma_core.h), one device port
 * with its protection domain, one completion queue and its completion channel.
 * RoCE only (every address vector is global, built from GIDs); InfiniBand ports would also need
 * LIDs in the exchanged ends. */
#include "rdma_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/rdma.h"

#define ACK_BATCH 64 /* CQ events acknowledged together: ibv_ack_cq_events takes a mutex */

struct rdma_vdev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct rdma_vinfo info;
	unsigned unacked;
	int max_rd_atom;
};

static enum ibv_mtu mtu_enum(uint32_t b)
{
	return b >= 4096 ? IBV_MTU_4096 : b >= 2048 ? IBV_MTU_2048 : b >= 1024 ? IBV_MTU_1024
	       : b >= 512 ? IBV_MTU_512 : IBV_MTU_256;
}

int rdma_vdev_open(const char *name, int port, int gid_index, uint32_t cq_depth,
		   struct rdma_vdev **out, char *err, size_t len)
{
	*out = NULL;
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		if (list)
			ibv_free_device_list(list);
		snprintf(err, len, "no RDMA devices");
		return MORI_ENOTSUP;
	}
	struct ibv_device *dev = NULL;
	for (int i = 0; i < n; i++)
		if (!name || !name[0] || strcmp(ibv_get_device_name(list[i]), name) == 0) {
			dev = list[i];
			break;
		}
	if (!dev) {
		ibv_free_device_list(list);
		snprintf(err, len, "RDMA device %s not found", name);
		return MORI_ENOENT;
	}
	struct rdma_vdev *v = calloc(1, sizeof(*v));
	if (!v) {
		ibv_free_device_list(list);
		snprintf(err, len, "out of memory");
		return MORI_ENOMEM;
	}
	snprintf(v->info.name, sizeof(v->info.name), "%s", ibv_get_device_name(dev));
	v->ctx = ibv_open_device(dev);
	ibv_free_device_list(list);
	int rc = MORI_EIO;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	if (!v->ctx) {
		snprintf(err, len, "%s: cannot open: %s", v->info.name, strerror(errno));
		goto fail;
	}
	if (ibv_query_device(v->ctx, &da) != 0) {
		snprintf(err, len, "%s: ibv_query_device: %s", v->info.name, strerror(errno));
		goto fail;
	}
	if (port <= 0)
		port = 1;
	if (port > da.phys_port_cnt || ibv_query_port(v->ctx, (uint8_t)port, &pa) != 0) {
		snprintf(err, len, "%s: no port %d", v->info.name, port);
		goto fail;
	}
	if (pa.state != IBV_PORT_ACTIVE) {
		snprintf(err, len, "%s port %d is not active", v->info.name, port);
		goto fail;
	}
	if (pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
		snprintf(err, len, "%s port %d: only RoCE (Ethernet link layer) is supported", v->info.name, port);
		rc = MORI_ENOTSUP;
		goto fail;
	}
	struct rdma_gid *gids;
	int ng = rdma_read_gids(v->ctx, (uint32_t)port, pa.gid_tbl_len, da.phys_port_cnt, &gids);
	char why[128];
	int k = rdma_gid_pick(gids, ng, 1, gid_index, NULL, why, sizeof(why));
	if (k < 0) {
		free(gids);
		snprintf(err, len, "%s port %d: %s", v->info.name, port, why);
		goto fail;
	}
	v->info.gid_index = (int)gids[k].index;
	memcpy(v->info.gid, gids[k].raw, 16);
	rdma_gid_addr(gids[k].raw, v->info.address, sizeof(v->info.address));
	free(gids);
	v->info.port = (uint8_t)port;
	v->info.mtu = 128u << pa.active_mtu;
	v->info.max_msg = pa.max_msg_sz;
	v->info.max_qp_wr = da.max_qp_wr > 0 ? (uint32_t)da.max_qp_wr : 0;
	v->max_rd_atom = da.max_qp_rd_atom;
	if (cq_depth > (uint32_t)da.max_cqe)
		cq_depth = (uint32_t)da.max_cqe;
	if (!(v->pd = ibv_alloc_pd(v->ctx))) {
		snprintf(err, len, "%s: ibv_alloc_pd: %s", v->info.name, strerror(errno));
		goto fail;
	}
	if (!(v->ch = ibv_create_comp_channel(v->ctx))) {
		snprintf(err, len, "%s: ibv_create_comp_channel: %s", v->info.name, strerror(errno));
		goto fail;
	}
	/* The loop reads events without blocking (level-triggered, spurious wake-ups tolerated). */
	int fl = fcntl(v->ch->fd, F_GETFL);
	if (fl < 0 || fcntl(v->ch->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
		snprintf(err, len, "%s: completion channel: %s", v->info.name, strerror(errno));
		goto fail;
	}
	if (!(v->cq = ibv_create_cq(v->ctx, (int)cq_depth, v, v->ch, 0))) {
		snprintf(err, len, "%s: ibv_create_cq(%u): %s", v->info.name, cq_depth, strerror(errno));
		goto fail;
	}
	if (ibv_req_notify_cq(v->cq, 0) != 0) {
		snprintf(err, len, "%s: ibv_req_notify_cq: %s", v->info.name, strerror(errno));
		goto fail;
	}
	*out = v;
	return MORI_OK;
fail:
	rdma_vdev_close(v);
	return rc;
}

void rdma_vdev_close(struct rdma_vdev *v)
{
	if (!v)
		return;
	/* Release in reverse: events acknowledged before the CQ goes (or destroy blocks). */
	if (v->cq) {
		if (v->unacked)
			ibv_ack_cq_events(v->cq, v->unacked);
		ibv_destroy_cq(v->cq);
	}
	if (v->ch)
		ibv_destroy_comp_channel(v->ch);
	if (v->pd)
		ibv_dealloc_pd(v->pd);
	if (v->ctx)
		ibv_close_device(v->ctx);
	free(v);
}

const struct rdma_vinfo *rdma_vdev_info(const struct rdma_vdev *v) { return &v->info; }

void rdma_vdev_cfg(const struct rdma_vdev *v, struct rdma_cfg *c)
{
	c->port = v->info.port;
	c->gid_index = v->info.gid_index;
	memcpy(c->gid, v->info.gid, 16);
	c->mtu = v->info.mtu;
	if (v->info.max_msg && c->chunk > v->info.max_msg)
		c->chunk = v->info.max_msg;
	if (v->info.max_qp_wr && c->sq_depth > v->info.max_qp_wr)
		c->sq_depth = v->info.max_qp_wr;
	if (v->max_rd_atom > 0 && c->max_rd_atomic > v->max_rd_atom)
		c->max_rd_atomic = (uint8_t)v->max_rd_atom;
}

int rdma_vdev_fd(const struct rdma_vdev *v) { return v->ch->fd; }

int rdma_vdev_events(struct rdma_vdev *v)
{
	struct ibv_cq *cq;
	void *cq_ctx;
	int n = 0;
	while (ibv_get_cq_event(v->ch, &cq, &cq_ctx) == 0) {
		n++;
		if (++v->unacked >= ACK_BATCH) {
			ibv_ack_cq_events(v->cq, v->unacked);
			v->unacked = 0;
		}
	}
	/* Re-arm before the caller polls: a completion after the poll then raises a new event. */
	if (ibv_req_notify_cq(v->cq, 0) != 0)
		return -1;
	return n;
}

int rdma_vdev_reg(struct rdma_vdev *v, void *addr, size_t len, int remote, uint32_t *lkey,
		  uint32_t *rkey, void **mr, char *err, size_t errlen)
{
	int access = IBV_ACCESS_LOCAL_WRITE;
	if (remote)
		access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *m = ibv_reg_mr(v->pd, addr, len, access);
	if (!m) {
		snprintf(err, errlen, "ibv_reg_mr(%zu bytes): %s", len, strerror(errno));
		return errno == ENOMEM ? MORI_ENOMEM : MORI_ESYS;
	}
	*lkey = m->lkey;
	if (rkey)
		*rkey = m->rkey;
	*mr = m;
	return MORI_OK;
}

void rdma_vdev_dereg(void *mr)
{
	if (mr)
		ibv_dereg_mr(mr);
}

/* ---- the ops ---- */
static int v_qp_create(void *ctx, struct rdma_qp *q, uint32_t depth, uint32_t rq_depth, char *err,
		       size_t len)
{
	struct rdma_vdev *v = ctx;
	struct ibv_qp_init_attr a = {
		.send_cq = v->cq,
		.recv_cq = v->cq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
		.cap = {.max_send_wr = depth, .max_recv_wr = rq_depth, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp *qp = ibv_create_qp(v->pd, &a);
	if (!qp) {
		snprintf(err, len, "ibv_create_qp: %s", strerror(errno));
		return errno == ENOMEM ? MORI_ENOMEM : MORI_EIO;
	}
	q->hw = qp;
	q->qpn = qp->qp_num;
	return MORI_OK;
}

static int v_qp_modify(void *ctx, struct rdma_qp *q, const struct rdma_qp_attr *a, char *err, size_t len)
{
	struct rdma_vdev *v = ctx;
	struct ibv_qp_attr x;
	int mask = IBV_QP_STATE;
	memset(&x, 0, sizeof(x));
	switch (a->to) {
	case QPS_INIT:
		x.qp_state = IBV_QPS_INIT;
		x.pkey_index = 0;
		x.port_num = a->port;
		x.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		break;
	case QPS_RTR:
		x.qp_state = IBV_QPS_RTR;
		x.path_mtu = mtu_enum(a->path_mtu);
		x.dest_qp_num = a->dest_qpn;
		x.rq_psn = a->rq_psn;
		x.max_dest_rd_atomic = a->max_rd_atomic;
		x.min_rnr_timer = a->min_rnr_timer;
		x.ah_attr.is_global = 1;
		memcpy(x.ah_attr.grh.dgid.raw, a->dgid, 16);
		x.ah_attr.grh.sgid_index = (uint8_t)a->gid_index;
		x.ah_attr.grh.hop_limit = 64;
		x.ah_attr.port_num = a->port;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		break;
	case QPS_RTS:
		x.qp_state = IBV_QPS_RTS;
		x.timeout = a->timeout;
		x.retry_cnt = a->retry_cnt;
		x.rnr_retry = a->rnr_retry;
		x.sq_psn = a->sq_psn;
		x.max_rd_atomic = a->max_rd_atomic;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			IBV_QP_MAX_QP_RD_ATOMIC;
		break;
	case QPS_ERR:
		x.qp_state = IBV_QPS_ERR;
		break;
	default:
		snprintf(err, len, "no such QP state %d", a->to);
		return MORI_EINVAL;
	}
	(void)v;
	int rc = ibv_modify_qp(q->hw, &x, mask);
	if (rc) {
		snprintf(err, len, "ibv_modify_qp(%s): %s", rdma_qps_name(a->to), strerror(rc));
		return MORI_EIO;
	}
	return MORI_OK;
}

static void v_qp_destroy(void *ctx, struct rdma_qp *q)
{
	if (q->hw)
		ibv_destroy_qp(q->hw);
	q->hw = NULL;
}

static int v_mr_reg(void *ctx, void *addr, size_t len, uint32_t *lkey, void **handle, char *err,
		    size_t errlen)
{
	return rdma_vdev_reg(ctx, addr, len, 0, lkey, NULL, handle, err, errlen);
}

static void v_mr_dereg(void *ctx, void *handle)
{
	rdma_vdev_dereg(handle);
}

static int v_post_send(void *ctx, struct rdma_qp *q, const struct rdma_wr *w, int n, char *err, size_t len)
{
	struct ibv_send_wr wr[32];
	struct ibv_sge sg[32];
	int done = 0;
	while (done < n) {
		int k = n - done < 32 ? n - done : 32;
		for (int i = 0; i < k; i++) {
			const struct rdma_wr *s = &w[done + i];
			sg[i] = (struct ibv_sge){.addr = s->laddr, .length = s->len, .lkey = s->lkey};
			memset(&wr[i], 0, sizeof(wr[i]));
			wr[i].wr_id = s->wr_id;
			wr[i].sg_list = &sg[i];
			wr[i].num_sge = 1;
			wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
			wr[i].opcode = s->op == RDMA_WRITE  ? IBV_WR_RDMA_WRITE
				       : s->op == RDMA_READ ? IBV_WR_RDMA_READ
							    : IBV_WR_SEND;
			wr[i].send_flags = (s->signaled ? IBV_SEND_SIGNALED : 0) | (s->fence ? IBV_SEND_FENCE : 0);
			if (s->op != RDMA_SEND) {
				wr[i].wr.rdma.remote_addr = s->raddr;
				wr[i].wr.rdma.rkey = s->rkey;
			}
		}
		struct ibv_send_wr *bad = NULL;
		int rc = ibv_post_send(q->hw, wr, &bad);
		if (rc) {
			snprintf(err, len, "ibv_post_send: %s (%d of %d posted)", strerror(rc),
				 done + (bad ? (int)(bad - wr) : 0), n);
			return MORI_EIO;
		}
		done += k;
	}
	return MORI_OK;
}

static int v_post_recv(void *ctx, struct rdma_qp *q, uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sg = {.addr = addr, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sg, .num_sge = 1}, *bad;
	return ibv_post_recv(q->hw, &wr, &bad) ? MORI_EIO : MORI_OK;
}

static int v_poll(void *ctx, struct rdma_wc *out, int max)
{
	struct rdma_vdev *v = ctx;
	struct ibv_wc wc[32];
	if (max > 32)
		max = 32;
	int n = ibv_poll_cq(v->cq, max, wc);
	if (n < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].qpn = wc[i].qp_num;
		out[i].status = wc[i].status;
		/* opcode is valid only for successful completions; the engine reads the kind from
		 * the wr id for the others */
		out[i].recv = wc[i].status == IBV_WC_SUCCESS && (wc[i].opcode & IBV_WC_RECV);
		out[i].byte_len = wc[i].byte_len;
		out[i].vendor_err = wc[i].vendor_err;
	}
	return n;
}

const struct rdma_ops rdma_verbs_ops = {
	.qp_create = v_qp_create, .qp_modify = v_qp_modify, .qp_destroy = v_qp_destroy,
	.mr_reg = v_mr_reg, .mr_dereg = v_mr_dereg, .post_send = v_post_send,
	.post_recv = v_post_recv, .poll = v_poll,
};
