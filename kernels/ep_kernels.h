/* MORI-EP's kernels in libmori's image (kernels/ep.cu) and the one argument block they take by
 * value, shared with the host code that launches them (libclient/ep.c). Plain C.
 *
 * A handle owns one symmetric allocation (`sym`, the same heap offset on every PE) laid out as
 * struct mori_ep_layout says (libclient/ep_layout.c computes it; offsets from sym):
 *   meta[bins_local][world]  u64  written by source rank s: (epoch << 32) | tokens s sends to this
 *                                 bin (normal: the bin is this rank; low-latency: a local expert)
 *   ddone[world], cdone[world] u64 monotonic: +1 per block of source s's dispatch / combine send
 *   recv tokens/weights/indices/scales/src_pos (mori_ep.h's mori_ep_recv)
 *   comb  normal [world][max_tok][token bytes] (rank d's outputs for my tokens), low-latency
 *         [max_tok][K][token bytes]
 *   local (never written by peers): epoch, status, counts, bases, positions, routing copy.
 * Combine either pushes (the caller's expert outputs: combine_send copies each row into its home
 * rank's comb, then cdone) or, when the outputs are already in the registered buffer cin, only
 * signals (cdone += nblocks, grid 1) and the home ranks' reduce reads the rows from cin directly.
 * Kernels: layout (grid = bins, counts and positions per bin, meta to the bin's owner, the bases
 * from the lower ranks' meta), dispatch_send (grid = block_num: tokens to every destination,
 * then +1 on each destination's ddone[me]), dispatch_recv (grid 1: waits ddone, counts), combine_send
 * (grid = block_num: outputs back to the tokens' home ranks, +1 on their cdone[me]), combine_reduce
 * (grid = block_num: waits cdone, sums), layout_query (DeepEP's get_dispatch_layout). */
#ifndef MORI_EP_KERNELS_H
#define MORI_EP_KERNELS_H
#include <stdint.h>

#define MORI_EP_K_LAYOUT "mori_ep_layout"
#define MORI_EP_K_DISPATCH_SEND "mori_ep_dispatch_send"
#define MORI_EP_K_DISPATCH_RECV "mori_ep_dispatch_recv"
#define MORI_EP_K_COMBINE_SEND "mori_ep_combine_send"
#define MORI_EP_K_COMBINE_REDUCE "mori_ep_combine_reduce"
#define MORI_EP_K_QUERY "mori_ep_layout_query"
#define MORI_EP_LAYOUT_THREADS 1024 /* most threads of a layout block (256 for up to 256 tokens) */
/* include/mori_ep.h's values the kernels need (that header's host functions would clash with the
 * device API's names in device code); libclient/ep.c checks they agree. */
#define MORI_EP_KMODE_LL 1     /* MORI_EP_LOW_LATENCY */
#define MORI_EP_KDTYPE_BF16 9  /* MORI_BFLOAT16 (mori_types.h) */

/* The table of live handles, one per device in its memory (allocated at the device's first
 * mori_ep_create in its primary context, which libmori keeps retained, and never freed, so a CUDA
 * graph replayed after mori_ep_destroy still reads valid memory): gen[slot] is the handle's
 * generation while it lives, 0 after (the host writes it). Every EP kernel reads its handle's
 * entry first; on a mismatch it touches nothing else, records the generation in late_gen /
 * late_count (plain stores, racing blocks may lose counts) and returns. */
#define MORI_EP_LIVE_SLOTS 1024
struct mori_ep_live {
	uint64_t gen[MORI_EP_LIVE_SLOTS];
	uint64_t late_gen;   /* the last retired generation a kernel ran for */
	uint64_t late_count; /* blocks that found their handle retired (approximate: racing stores) */
};

/* Offsets (bytes from the handle's symmetric block) of its parts; every part 256-aligned. */
struct mori_ep_layout {
	uint64_t meta, ddone, cdone;
	uint64_t tok, w, idx, scale, src, comb;
	uint64_t cin;                 /* the registered combine input: the receive layout, read by peers */
	uint64_t local;               /* start of the local part: */
	uint64_t epoch, status, count, base, pos, route, rweight;
	uint64_t total;               /* bytes of the whole block */
	int64_t recv_slots;           /* normal: world x max_tok; low-latency: epr x world x max_tok */
	int32_t bins;                 /* normal: world; low-latency: world x epr */
	int32_t bins_local;           /* normal: 1; low-latency: epr */
	int32_t pos_cols;             /* normal: world (per destination rank); low-latency: K */
	int32_t token_stride;         /* bytes per receive/comb row: H x max_token_type_size */
	int32_t scale_stride;         /* scale_dim x scale_type_size rounded up to 16 */
	int32_t pad;
};

/* status word at layout.status (int32 x 4): code (0 or MORI_E*), what, a, b. */
enum mori_ep_what {
	MORI_EP_ERR_INDEX = 1,   /* a = token x K + slot, b = the expert index */
	MORI_EP_ERR_ROUTE = 2,   /* combine's indices differ: a = token x K + slot, b = the value */
	MORI_EP_ERR_ABORT = 3,   /* the group aborted during a wait (code says why) */
	MORI_EP_ERR_TIMEOUT = 4, /* a wait passed the deadline: a = the kernel (1..5), b = the rank */
};

struct mori_ep_kargs {
	uint64_t st;              /* const struct mori_shmem_state * (device) */
	uint64_t sym;             /* heap offset of the handle's block */
	struct mori_ep_layout L;
	uint64_t input, weights, scales, indices; /* caller's device pointers (dispatch; combine: */
	uint64_t out;                             /* weights / indices the caller's, out [T, H]) */
	uint64_t timeout_ns;
	uint64_t live;            /* struct mori_ep_live * (device address of the mapped table) */
	uint64_t gen;             /* this handle's generation: live->gen[live_slot] while it lives */
	int32_t rank, world, hidden, max_tok, epr, topk, mode;
	int32_t nblocks;          /* grid of the send/reduce kernels: what each ddone/cdone adds per call */
	int32_t num_tokens;
	int32_t tok_bytes;        /* this call's bytes per token (dispatch dtype or combine dtype) */
	int32_t scale_bytes;      /* scale_dim x scale_type_size */
	int32_t dtype;            /* combine: MORI_BFLOAT16 / MORI_FLOAT32 */
	int32_t pull;             /* combine: the outputs are in L.cin; home ranks read them there */
	int32_t live_slot;
	int32_t quant;            /* dispatch: bf16 input quantised to fp8 e4m3 rows + a float scale per 128 */
	int32_t pad3;
};
#endif
