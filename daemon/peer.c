/* Cross-node service. */
#include "peer.h"

#include <unistd.h>

#include "log.h"

int peers_start(struct morid *d) { return 0; }
void peers_stop(struct morid *d) {}
uint32_t peer_count(struct morid *d) { return 0; }
void peer_submit(struct morid *d, struct client *c, const struct mori_sqe *e)
{
	if (e->op == SQE_CANCEL)
		return;
	struct mori_cqe x = {.type = CQE_XFER_DONE, .code = MORI_ENOTSUP, .user_data = e->user_data};
	snprintf(x.msg, sizeof(x.msg), "cross-node transfers not enabled");
	client_post(c, &x);
}
void peer_client_gone(struct morid *d, struct client *c) {}
int peer_handle_request(struct morid *d, struct client *c, Mori__Request *req, Mori__Reply *rep,
			struct rctx *r, int *fds, int nfds)
{
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	reply_error(rep, MORI_ECONN, "no peer listener configured (set listen= in morid.conf)");
	return 0;
}
void peer_list(struct morid *d, Mori__ListReply *lr, struct rctx *r) {}
uint32_t peer_transfers_in_flight(struct morid *d) { return 0; }
void peer_list_transfers(struct morid *d, Mori__ListReply *lr, struct rctx *r) {}
