/* MORI-EP across nodes: the internode kernels (kernels/ep_internode.cu) and their argument
 * block, shared with the host code that launches them (libclient/ep_internode.c). Plain C.
 *
 * The internode kernel types (MORI_EP_INTERNODE, MORI_EP_INTERNODE_LL) keep the intranode
 * receive layout (kernels/ep_kernels.h's parts of the slot: tok, w, idx, scale, src, cin, count,
 * pos, route, rweight, epoch, status) and add, after it in the same slot (offsets from the
 * slot's start, like the intranode parts; L.total is where they begin):
 *
 *   written by peers (directly on this node, through the proxy from other nodes):
 *     xsig[world]  u64   dispatch: source s's chunk for this rank has landed: = epoch (SET)
 *     xcsig[world] u64   combine: rank d's chunk of expert outputs for this rank has landed
 *     land[world]  chunk dispatch chunk of source s (what s sends to this rank)
 *     cland[world] cchunk combine chunk of rank d (the outputs of this rank's tokens at d)
 *   local (peers never write them; the proxy reads stage and cstage):
 *     stage[world], cstage[world]  this rank's outgoing chunks for ranks of other nodes
 *     xcnt[bins]   my rows to each bin; xoff[bins] their first record in the destination's chunk;
 *     xtot[world]  records in my chunk to each rank
 *     xbase[bins_local][world]  source s's first slot for local bin l (the lower sources' counts)
 *     xpre[bins_local][world]   source s's first record of bin l in its chunk
 *     xrows[world] records in source s's chunk
 *
 * A dispatch chunk is a header (epoch u64, records u32, then u32 counts per bin of the
 * destination: bins_local of them) and `records` fixed-size records, grouped by the destination's
 * local bin in bin order, each: the row (this call's row bytes, 16-aligned), weights [K] f32,
 * indices [K] i32, scales (scale_stride bytes), then src_pos, bin, position (i32 each). A combine
 * chunk is a header (epoch) and one row (crow: this call's row bytes, 16-aligned) per record of
 * the dispatch chunk it answers, in the same order. The chunks are sized for the largest row
 * (token_stride); rec* follow the dispatch's own row (libclient/ep_layout.c epx_records) and the
 * host sets crow per combine call, so only the bytes of the rows cross nodes. */
#ifndef MORI_EP_INTERNODE_H
#define MORI_EP_INTERNODE_H
#include "ep_kernels.h"

#define MORI_EPX_K_LAYOUT "mori_epx_layout"
#define MORI_EPX_K_PREFIX "mori_epx_prefix"
#define MORI_EPX_K_DSEND "mori_epx_dispatch_send"
#define MORI_EPX_K_DPOST "mori_epx_dispatch_post"
#define MORI_EPX_K_DRECV "mori_epx_dispatch_recv"
#define MORI_EPX_K_DCOPY "mori_epx_dispatch_copy"
#define MORI_EPX_K_CSEND "mori_epx_combine_send"
#define MORI_EPX_K_CPOST "mori_epx_combine_post"
#define MORI_EPX_K_CREDUCE "mori_epx_combine_reduce"

/* The most bytes one proxy request carries (daemon/shmem/shmem_proxy.c takes up to 16 MiB): a chunk
 * goes as puts of this size, the last one with the signal. */
#define MORI_EPX_PUT_MAX (4ull << 20)
#define MORI_EPX_CHDR 256 /* a combine chunk's header: the epoch */
#define MORI_EP_MAX_WORLD_K 32 /* mori_ep.h's MORI_EP_MAX_WORLD (libclient/ep_internode.c checks) */

/* The kernels' numbers in the status word's wait records (MORI_EP_ERR_TIMEOUT / _ABORT: a). */
enum mori_epx_kernel {
	MORI_EPX_W_DPOST = 11, /* a proxy post of dispatch failed (b = the destination rank) */
	MORI_EPX_W_DRECV = 12, /* dispatch's wait for source b's chunk */
	MORI_EPX_W_CPOST = 13, /* a proxy post of combine failed */
	MORI_EPX_W_CRED = 14,  /* combine's wait for rank b's chunk */
	MORI_EPX_W_CHUNK = 15, /* a chunk with a wrong epoch or counts (b = its sender): MORI_EPROTO */
};

struct mori_epx_layout {
	uint64_t xsig, xcsig, land, cland;  /* written by peers */
	uint64_t stage, cstage;             /* local, read by the proxy */
	uint64_t xcnt, xoff, xtot, xbase, xpre, xrows; /* local tables */
	uint64_t end;                       /* the slot's bytes (intranode parts included) */
	uint64_t cap, ccap;                 /* bytes of one dispatch / combine chunk */
	int32_t hdr;                        /* dispatch chunk header bytes (records start there) */
	int32_t rec;                        /* bytes of one dispatch record */
	int32_t rows_cap;                   /* records one source may send to one rank */
	int32_t rec_w, rec_idx, rec_scale, rec_src; /* offsets inside a record */
	int32_t crow;                       /* bytes of one combine chunk row (the call's row, 16-aligned) */
};

struct mori_epx_kargs {
	struct mori_ep_kargs a; /* the intranode block: a.mode is the layout (0 normal, 1 low-latency) */
	struct mori_epx_layout X;
};
#endif
