/* What umbp_ext.c (external KV, the cluster's lookups) and umbp_remote.c (gets from a named node)
 * use of umbp.c. */
#ifndef MORI_UMBP_INT_H
#define MORI_UMBP_INT_H
#include "internal.h"
#include "mori_umbp.h"

#define UMBP_LOOKUP_BYTES (192u << 10) /* key bytes of one lookup request (a session message is 256 KiB) */

/* One KvRequest, its reply in *rep (the caller frees it) when MORI_OK. */
int umbp_kv_rpc(mori_umbp *u, Mori__KvRequest *kq, Mori__Reply **rep, int *fds, int *nfds);
/* MORI_EINVAL for NULL, MORI_ESTALE after fork, else MORI_OK. */
int umbp_call_check(mori_umbp *u);
/* How many of keys[0..n) go in one lookup request (>= 1 for n >= 1). */
size_t umbp_lookup_round(mori_umbp *u, const mori_umbp_key *keys, size_t n);
mori_client *umbp_client(mori_umbp *u);
/* For umbp_remote.c: a batch put or get (holder: the node whose daemon the get's misses are
 * asked of, NULL none), and one get; as mori_umbp_batch_get and mori_umbp_get. */
int umbp_batch(mori_umbp *u, mori_umbp_item *items, size_t n, size_t *n_ok, int put, const char *holder);
int umbp_get_one(mori_umbp *u, const char *holder, const void *key, size_t key_len, void *dst, size_t cap,
		 size_t *len);
#endif
