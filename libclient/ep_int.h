/* libmori MORI-EP internals: shared by ep_layout.c (host-only: config, layout) and
 * ep.c (handles, launches). */
#ifndef LIBMORI_EP_INT_H
#define LIBMORI_EP_INT_H
#include <stddef.h>
#include <stdint.h>

#include "mori_ep.h"

struct mori_ep_layout;
struct mori_epx_layout;

#define EP_DEFAULT_TIMEOUT_US 10000000 /* device-side waits: 10 s */
#define EP_MAX_EXPERTS_PER_RANK 1024
#define EP_MAX_TOKENS (1 << 20)
#define EP_MAX_HIDDEN (1 << 16)
#define EP_XCHG_BYTES 4096             /* the config exchange at creation */
#define EP_DEFAULT_WARPS 16
#define EP_BLOCKS_PER_SM 4          /* default block_num: 4 blocks of 16 warps on every SM */
#define EP_MAX_DEFAULT_BLOCKS 1024

int ep_dtype_size(mori_dtype dtype);
/* The caller's cfg (cfg->size bytes of it) over the defaults, into *own: MORI_OK, or MORI_EINVAL
 * (NULL) / MORI_ENOTSUP (size: conv.h) with the reason in msg (may be NULL); *own the defaults then. */
int ep_config_take(const mori_ep_config *cfg, mori_ep_config *own, char *msg, size_t cap);
/* mori_ep_config_check of a config this library filled (its own struct). */
int ep_config_valid(const mori_ep_config *cfg, char *msg, size_t cap);
/* Slots of a valid cfg: num_in_flight, 0 meaning 1. */
static inline int ep_in_flight(const mori_ep_config *cfg) { return cfg->num_in_flight ? cfg->num_in_flight : 1; }
/* The block layout of a valid cfg (MORI_EINVAL otherwise). */
int ep_layout(const mori_ep_config *cfg, struct mori_ep_layout *L);
/* The receive layout is low-latency's (expert-major) / the kernels are the internode ones. */
static inline int ep_ll(int kernel_type) { return kernel_type == MORI_EP_LOW_LATENCY || kernel_type == MORI_EP_INTERNODE_LL; }
static inline int ep_xnode(int kernel_type) { return kernel_type == MORI_EP_INTERNODE || kernel_type == MORI_EP_INTERNODE_LL; }
/* The internode parts of a valid internode cfg's slot, after L's (MORI_EINVAL for another type). */
int epx_layout(const mori_ep_config *cfg, const struct mori_ep_layout *L, struct mori_epx_layout *X);
void epx_records(struct mori_epx_layout *X, int32_t row_bytes, int32_t K, int32_t scale_stride);
/* Bytes of one slot (one in-flight dispatch's buffers) of a valid cfg; 0 when invalid. */
uint64_t ep_slot_bytes(const mori_ep_config *cfg);

struct ep_field {
	const char *name;
	size_t off, size;
};
extern const struct ep_field ep_fields[];
/* 0 when a and b (ranks ra, rb) agree on every field but rank; else MORI_EINVAL naming the first. */
int ep_config_diff(const mori_ep_config *a, const mori_ep_config *b, char *msg, size_t cap, int ra, int rb);
#endif
