/* Descriptor plans and completion-status mapping (rdma_core.h). No verbs calls here; the
 * status values are libibverbs' enum, taken from its header. */
#include <infiniband/verbs.h>

#include "rdma_core.h"

_Static_assert(RDMA_WC_FLUSH == IBV_WC_WR_FLUSH_ERR, "flush status as libibverbs numbers it");

uint64_t rdma_count_chunks(const mori_desc *d, uint32_t n, uint64_t max)
{
	struct chunk_cursor c = {0, 0};
	uint64_t k = 0, lo, ro;
	while (chunk_next(d, n, &c, max, &lo, &ro))
		k++;
	return k;
}

int rdma_wc_error(int st, const char **msg)
{
	const char *m;
	int code;
	switch ((enum ibv_wc_status)st) {
	case IBV_WC_SUCCESS: m = "success"; code = MORI_OK; break;
	case IBV_WC_LOC_LEN_ERR: m = "local length error"; code = MORI_EINVAL; break;
	case IBV_WC_LOC_QP_OP_ERR: m = "local QP operation error"; code = MORI_EIO; break;
	case IBV_WC_LOC_EEC_OP_ERR: m = "local EE context error"; code = MORI_EIO; break;
	case IBV_WC_LOC_PROT_ERR: m = "local protection error"; code = MORI_EPERM; break;
	case IBV_WC_WR_FLUSH_ERR: m = "flushed: QP in error"; code = MORI_EIO; break;
	case IBV_WC_MW_BIND_ERR: m = "memory window bind error"; code = MORI_EIO; break;
	case IBV_WC_BAD_RESP_ERR: m = "bad response"; code = MORI_EIO; break;
	case IBV_WC_LOC_ACCESS_ERR: m = "local access error"; code = MORI_EPERM; break;
	case IBV_WC_REM_INV_REQ_ERR: m = "remote invalid request"; code = MORI_EIO; break;
	case IBV_WC_REM_ACCESS_ERR: m = "remote access error"; code = MORI_EPERM; break;
	case IBV_WC_REM_OP_ERR: m = "remote operation error"; code = MORI_EIO; break;
	case IBV_WC_RETRY_EXC_ERR: m = "retry exceeded"; code = MORI_EIO; break;
	case IBV_WC_RNR_RETRY_EXC_ERR: m = "receiver not ready, retry exceeded"; code = MORI_EIO; break;
	case IBV_WC_LOC_RDD_VIOL_ERR: m = "local RDD violation"; code = MORI_EIO; break;
	case IBV_WC_REM_INV_RD_REQ_ERR: m = "remote invalid RD request"; code = MORI_EIO; break;
	case IBV_WC_REM_ABORT_ERR: m = "remote aborted"; code = MORI_EIO; break;
	case IBV_WC_INV_EECN_ERR: m = "invalid EE context number"; code = MORI_EIO; break;
	case IBV_WC_INV_EEC_STATE_ERR: m = "invalid EE context state"; code = MORI_EIO; break;
	case IBV_WC_FATAL_ERR: m = "fatal device error"; code = MORI_EIO; break;
	case IBV_WC_RESP_TIMEOUT_ERR: m = "response timeout"; code = MORI_ETIMEDOUT; break;
	case IBV_WC_GENERAL_ERR: m = "general error"; code = MORI_EIO; break;
	default: m = "unknown completion status"; code = MORI_EIO; break;
	}
	if (msg)
		*msg = m;
	return code;
}

int rdma_wc_transient(int st)
{
	switch ((enum ibv_wc_status)st) {
	case IBV_WC_WR_FLUSH_ERR:
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
	case IBV_WC_BAD_RESP_ERR:
	case IBV_WC_FATAL_ERR:
	case IBV_WC_GENERAL_ERR:
	/* The responder saw a request it calls invalid (bad opcode sequence or length for the
	 * message it thinks is under way). The engine builds only well-formed requests (sizes cut
	 * to the port's largest message, notifications that fit the receive buffers, access flags
	 * set on every QP), so this is the two ends' QP state disagreeing, as BAD_RESP is the
	 * other way round: Soft-RoCE under load does it to plain 1 MiB writes after QP resets, and
	 * the same writes land when re-posted on a new pair. A request that is really invalid
	 * still fails, after RDMA_MAX_REQUEUES resets, with this reason. */
	case IBV_WC_REM_INV_REQ_ERR:
		return 1;
	default:
		return 0;
	}
}

const char *rdma_qps_name(int s)
{
	static const char *const names[] = {"NONE", "RESET", "INIT", "RTR", "RTS", "ERR"};
	return s >= 0 && s <= QPS_ERR ? names[s] : "?";
}
