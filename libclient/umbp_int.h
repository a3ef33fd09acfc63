/* What umbp_ext.c (external KV, the cluster's lookups) uses of umbp.c. */
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
#endif
