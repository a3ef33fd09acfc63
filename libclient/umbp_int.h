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

/* umbp_reg.c: the ranges given to mori_umbp_register_memory, each also a mori region of the
 * client (mori_mem_register) that morid writes values fetched from other nodes straight into,
 * host memory pinned for the GPU copy engine where a GPU runtime is loaded. */
struct umbp_reg {
	uint8_t *ptr;
	size_t size;
	mori_mem *mem;                /* NULL: VRAM morid cannot map (copied through slots) */
	int pinned;
};
struct umbp_regs {
	pthread_rwlock_t lock;        /* read-held by a get while its request names their regions */
	struct umbp_reg *r;
	size_t n;
};
void umbp_regs_init(struct umbp_regs *R);
/* Every range dropped (forked: the parent's regions and pins are left alone), the table freed. */
void umbp_regs_fini(struct umbp_regs *R, mori_client *c, int forked);
/* As mori_umbp_register_memory and mori_umbp_deregister_memory (errors set on c). */
int umbp_regs_add(struct umbp_regs *R, mori_client *c, void *ptr, size_t size);
int umbp_regs_remove(struct umbp_regs *R, mori_client *c, void *ptr);
/* The range holding [p, p + len) whole, or NULL; R->lock held. */
const struct umbp_reg *umbp_regs_find(const struct umbp_regs *R, const void *p, size_t len);
#endif
