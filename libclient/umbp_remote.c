/* UMBP across nodes, the client's calls (include/mori_umbp.h): gets of keys held by another
 * node's daemon, named by the caller. morid does the asking and the transfer (daemon/kv/
 * kv_remote.c); here the node is checked and handed to umbp.c's get. */
#include <string.h>

#include "umbp_int.h"

static int check_node(mori_umbp *u, const char *node)
{
	const char *colon = node ? strrchr(node, ':') : NULL;
	if (!node || !node[0] || !colon || colon == node || !colon[1] || strlen(node) >= 128)
		return set_error(umbp_client(u), MORI_EINVAL, "node '%s' is not host:port", node ? node : "(null)");
	return MORI_OK;
}

int mori_umbp_get_from(mori_umbp *u, const char *node_address, const void *key, size_t key_len, void *dst,
		       size_t cap, size_t *len)
{
	if (!u)
		return MORI_EINVAL;
	int rc = check_node(u, node_address);
	return rc != MORI_OK ? rc : umbp_get_one(u, node_address, key, key_len, dst, cap, len);
}

int mori_umbp_batch_get_from(mori_umbp *u, const char *node_address, mori_umbp_item *items, size_t n, size_t *n_ok)
{
	if (!u)
		return MORI_EINVAL;
	int rc = check_node(u, node_address);
	return rc != MORI_OK ? rc : umbp_batch(u, items, n, n_ok, 0, node_address);
}
