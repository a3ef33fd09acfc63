/* mori_ep.h: MORI-EP, MoE dispatch and combine on MORI-SHMEM's symmetric heap (part of libmori).
 *
 * A mixture-of-experts layer sends each token to its top-k experts (dispatch) and sums the
 * experts' outputs back at the token's home rank (combine). The EP ranks are the PEs of one
 * MORI-SHMEM group (include/mori_shmem.h) with a VRAM heap: rank = mori_shmem_my_pe, world size =
 * mori_shmem_n_pes (1..MORI_EP_MAX_WORLD). Expert e lives on rank e / num_experts_per_rank.
 * Kernels write peers' heaps directly (same node: every heap is mapped into every PE); ranks on
 * other nodes are reached through the proxy (MORI_EP_INTERNODE*, picked when the group spans nodes).
 *
 * Mirrors ROCm/mori's MORI-EP (EpDispatchCombineConfig, EpDispatchCombineHandle,
 * EpDispatchCombineOp.dispatch / combine, kernel types IntraNode and low-latency) with DeepEP's
 * layout query (Buffer.get_dispatch_layout) and low-latency layout (Buffer.low_latency_dispatch /
 * low_latency_combine: expert-major receive buffers, per-expert counts, weighted combine).
 *
 * Ordering. dispatch and combine are enqueued on the caller's stream; the host never waits for
 * the GPU and nothing is synchronised between ranks on the host: per-destination head counters
 * in the heap (release on publish, acquire on consume, epoch-tagged) order every phase, so the
 * pair can be captured in a CUDA graph and replayed with new routing (the routing is read from
 * device memory at run time). Up to config.num_in_flight dispatches may wait for their combine;
 * combines take them in dispatch order (a further dispatch, or a combine with none waiting:
 * MORI_EINVAL). The receive buffers dispatch n returns stay valid until dispatch n +
 * num_in_flight runs (with the default 1: until the next dispatch).
 *
 * Conventions as in mori.h (names mori_ep_*, where ROCm/mori's and DeepEP's names are kept in
 * mori_ep_get_registered_combine_input_buffer and mori_ep_get_dispatch_layout; an option struct
 * with a size; status; int-returning destroy). Errors: 0 or a negative MORI_E*;
 * mori_client_last_error() of the group's client has the detail. What only the GPU can see (an expert index out of range, combine
 * given other routing than dispatch's, a peer dead, a wait past its deadline) is recorded in the
 * handle's status word and reported by mori_ep_status; the kernels then still signal their
 * peers, so no rank waits forever: every device-side wait ends on the group's abort word
 * (MORI_EPEERDEAD, MORI_ECANCELED) or on its deadline (config.timeout_us, MORI_ETIMEDOUT).
 */
#ifndef MORI_EP_H
#define MORI_EP_H

#include "mori_shmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits (MORI_EP_MAX_WORLD, MORI_EP_MAX_TOPK, MORI_EP_MAX_IN_FLIGHT), kernel types (enum
 * mori_ep_kernel_type: MORI_EP_NORMAL, MORI_EP_LOW_LATENCY, MORI_EP_INTERNODE, MORI_EP_INTERNODE_LL)
 * and quantisation (enum mori_ep_quant) are in mori_types.h, shared with the kernels. Element types
 * are mori_types.h's mori_dtype: dispatch moves MORI_BFLOAT16, MORI_FLOAT32 and MORI_FLOAT8_E4M3
 * (the scales travel beside fp8 rows, scale_dim per token); combine sums MORI_BFLOAT16 and
 * MORI_FLOAT32. */

/* The handle's configuration (ROCm/mori's EpDispatchCombineConfig; field names theirs). Every
 * rank must pass the same values except rank (mori_ep_create refuses a difference on every rank,
 * naming the field and the ranks). */
typedef struct mori_ep_config {
	size_t size;                    /* sizeof(mori_ep_config) as the caller compiled it (mori_ep_config_init) */
	int rank;                       /* this PE (must equal mori_shmem_my_pe) */
	int world_size;                 /* EP ranks (must equal mori_shmem_n_pes) */
	int hidden_dim;                 /* H, elements per token; H x element size a multiple of 16 bytes */
	int scale_dim;                  /* scales per token (fp8: H / 128), 0: none */
	int scale_type_size;            /* bytes per scale (4 for float) */
	int max_token_type_size;        /* bytes of the widest element dispatch or combine moves (2 bf16, 4 fp32) */
	int max_num_inp_token_per_rank; /* most tokens one rank dispatches in one call (>= 1) */
	int num_experts_per_rank;       /* local experts (>= 1) */
	int num_experts_per_token;      /* top-k, 1..MORI_EP_MAX_TOPK */
	mori_dtype data_type;           /* dispatch's input: MORI_BFLOAT16, MORI_FLOAT32 or MORI_FLOAT8_E4M3 */
	mori_ep_kernel_type kernel_type;
	int warp_num_per_block;         /* launch shape; 0: the tuning table's (mori_ep_tuning_lookup) */
	int block_num;                  /* 0: the tuning table's (at most 1024) */
	int64_t timeout_us;             /* deadline of every device-side wait; 0: 10 s */
	/* Dispatches that may be in flight (dispatched, not yet combined), each with its own buffers
	 * (a slot): dispatch n uses slot n mod num_in_flight, combines take them in dispatch order;
	 * 0: 1, at most MORI_EP_MAX_IN_FLIGHT. The heap a handle takes grows with it. DeepEP's
	 * low-latency mode has two such buffers (fixed), ROCm/mori's ops one: this generalises
	 * DeepEP's double buffering. */
	int32_t num_in_flight;
	/* MORI_EP_QUANT_FP8_BLOCK128 makes dispatch quantise its bf16 input
	 * (data_type bf16) into fp8 e4m3 rows and one float scale per 128 channels (scale_dim =
	 * hidden_dim / 128, scale_type_size 4, hidden_dim a multiple of 128): the rows arrive as fp8,
	 * the scales beside them, x ~ fp8 value x scale. The rule is DeepEP's low-latency dispatch with
	 * use_fp8: amax = max |x| of the 128 (at least 1e-4), x -> e4m3(x x 448 / amax) rounded to
	 * nearest even and saturated, scale = amax / 448 (kernels/ep_fp8.h). ROCm/mori's field name;
	 * its Fp8DirectCast (no scale) is not offered. */
	mori_ep_quant quant_type;
} mori_ep_config;

/* Defaults: bf16, normal mode, launch shape 0 (chosen at creation), timeout 10 s; the shape
 * fields zero (the caller fills rank, world size, H, tokens, experts and top-k); cfg->size = size
 * (sizeof(*cfg)). MORI_EINVAL for NULL or a size below 1.0's struct. Every function taking a
 * config reads only cfg->size bytes (mori.h's conventions): MORI_EINVAL / MORI_ENOTSUP for a bad
 * size, named in msg or the client's last error. */
MORI_API int mori_ep_config_init(mori_ep_config *cfg, size_t size);

/* Check cfg alone (no group): 0, or MORI_EINVAL with the reason in msg ("hidden_dim 100 x 2
 * bytes is not a multiple of 16"). msg may be NULL. */
MORI_API int mori_ep_config_check(const mori_ep_config *cfg, char *msg, size_t cap);

/* Bytes of symmetric heap one handle of cfg allocates on every PE (size the group's heap with
 * it: MORI_SHMEM_RESERVED plus this plus what else the application allocates). 0 when cfg is
 * invalid. */
MORI_API uint64_t mori_ep_heap_bytes(const mori_ep_config *cfg);

/* The launch parameters the tuning table gives cfg on a GPU of architecture arch ("sm_90" as
 * CUDA's compute capability, "gfx942") with sm_count SMs this process may use: cfg's
 * warp_num_per_block and block_num, where 0, from the nearest rule (same kernel type; arch exact,
 * else its family "sm_9*"; nearest ep_size; same dtype; nearest hidden_dim; the smallest
 * num_tokens at or above max_num_inp_token_per_rank, else the largest: ROCm/mori's lookup), or the
 * built-in default (16 warps, 4 blocks an SM). Non-zero fields are the caller's and stay. The
 * table is kernels/ep_tuning/ JSON files (ROCm/mori's tuning_configs format), compiled in at build
 * time; mori_ep_create does this with the device's arch. which (may be NULL, cap bytes) names the
 * rule ("sm_90_h200_IntraNode_ep8.json rule 0") or the default. 0, or MORI_EINVAL for NULL. */
MORI_API int mori_ep_tuning_lookup(mori_ep_config *cfg, const char *arch, int sm_count, char *which, size_t cap);

typedef struct mori_ep_handle mori_ep_handle;

/* Collective over the group (every PE, same order as its other collective calls): check cfg,
 * compare it with every rank's (through the heap: each rank's copy is read by all), allocate the
 * buffers on the group's heap, zero them and barrier, so no rank writes a peer's buffer before
 * that peer has zeroed it. MORI_EINVAL with the reason on every rank when cfg is invalid or
 * differs ("config field hidden_dim differs: rank 0 has 7168, rank 3 has 4096"); MORI_ENOTSUP for
 * a host heap; MORI_ENOMEM when the heap has no room (sizes named); MORI_ENOKERNEL without EP
 * kernels for the device. The handle is the caller's until mori_ep_destroy (ROCm/mori's
 * EpDispatchCombineHandle constructor). */
MORI_API int mori_ep_create(mori_group *g, const mori_ep_config *cfg, mori_ep_handle **out);

/* Collective: wait (bounded) for the handle's kernels, free its heap buffers, free h. Returns the
 * free's code (MORI_ETIMEDOUT / MORI_EPEERDEAD when the group is gone: h is freed anyway); NULL is
 * a no-op returning MORI_OK. */
MORI_API int mori_ep_destroy(mori_ep_handle *h);

/* What dispatch produced (device addresses on this PE's heap; fixed for the handle's life, so
 * a captured graph's consumers may read them too). Normal mode: slot i in 0..*count-1 of
 *   tokens  [max_recv, H] of the dispatch dtype (row stride H x element size)
 *   weights [max_recv, K] float, indices [max_recv, K] int32: the source token's whole top-k
 *   scales  [max_recv, scale_dim] of scale_type_size bytes
 *   src_pos [max_recv] int32: source rank x max_num_inp_token_per_rank + token index (ROCm/mori's
 *           srcTokenPos)
 *   count   device int32 scalar: the slots filled (ROCm/mori's totalRecvTokenNum)
 * where max_recv = world x max_num_inp_token_per_rank. Low-latency mode: slots are
 * [num_experts_per_rank][world x max tokens] (expert-major, DeepEP's packed_recv_x), slot j of
 * local expert l at l x world x max + j, j in 0..count[l]-1; count has num_experts_per_rank
 * entries (DeepEP's packed_recv_count); src_pos is (source rank x max + token) x K + k. */
typedef struct mori_ep_recv {
	void *tokens;
	float *weights;
	int32_t *indices;
	void *scales;
	int32_t *src_pos;
	int32_t *count;
	int64_t max_recv;  /* slots (normal) or slots per local expert (low-latency) */
	void *combine_input; /* this slot's registered combine input (see below) */
	int32_t slot;        /* which of the num_in_flight buffer sets (0..num_in_flight-1) */
} mori_ep_recv;
/* The buffers the next combine takes (the oldest dispatch not yet combined), or when none waits,
 * those the next dispatch fills. */
MORI_API int mori_ep_recv_buffers(const mori_ep_handle *h, mori_ep_recv *out);

/* Dispatch num_tokens (0..max_num_inp_token_per_rank; more: MORI_EINVAL naming both numbers,
 * before anything is enqueued) tokens on stream (CUstream / hipStream_t; NULL the default):
 *   input   [num_tokens, H] of cfg.data_type, device memory
 *   weights [num_tokens, K] float (may be NULL: zeros arrive)
 *   scales  [num_tokens, scale_dim] x scale_type_size bytes (NULL when scale_dim is 0, and with
 *           quant_type set: dispatch computes them; the rows then arrive as fp8 e4m3)
 *   indices [num_tokens, K] int32 expert ids; -1: no expert for that slot. An id outside
 *           -1..world x num_experts_per_rank-1 is skipped and recorded (mori_ep_status:
 *           MORI_EINVAL naming the token, slot and value).
 * Returns once enqueued; out (may be NULL) gets the receive buffers, filled when the stream
 * reaches the end of the dispatch. Mirrors ROCm/mori's EpDispatchCombineOp.dispatch (normal)
 * and DeepEP's low_latency_dispatch (low-latency). */
MORI_API int mori_ep_dispatch(mori_ep_handle *h, const void *input, const float *weights, const void *scales,
			      const int32_t *indices, int num_tokens, void *stream, mori_ep_recv *out);

/* The registered combine input (ROCm/mori's get_registered_combine_input_buffer) of the slot the
 * next combine takes (as mori_ep_recv_buffers; each dispatch's own is in its mori_ep_recv): a buffer
 * on this PE's heap in the receive layout (normal [max_recv, H], low-latency [num_experts_per_rank, world x
 * max, H]; row stride H x max_token_type_size bytes whatever the combine dtype). Experts that write
 * their outputs there and pass it to mori_ep_combine as expert_out save a copy: the home ranks read
 * the rows in place (one pass instead of a copy to the home rank and a read there). */
MORI_API void *mori_ep_get_registered_combine_input_buffer(const mori_ep_handle *h);

/* Combine on stream: expert_out holds the expert outputs in the receive layout (normal:
 * [max_recv, H], rows 0..count-1; low-latency: [num_experts_per_rank, world x max, H]; dense rows of
 * H x element size, or the registered combine input with its row stride) of dtype
 * (MORI_BFLOAT16 or MORI_FLOAT32, element size <= max_token_type_size, H x element size a multiple of
 * 16 bytes: else MORI_EINVAL); out gets [num_tokens, H]
 * of dtype for the num_tokens of the preceding dispatch: normal: the sum over the token's
 * distinct destination ranks (unweighted, ROCm/mori); low-latency: sum over k of weights[t][k] x
 * the output of expert indices[t][k] (DeepEP), weights the caller's [T, K] float (NULL: dispatch's).
 * indices: the caller's own [T, K] routing, as passed to dispatch (NULL: dispatch's is used).
 * Dispatch's returned indices are refused (MORI_EINVAL); other routing than dispatch's is seen on
 * the GPU (mori_ep_status: MORI_EINVAL) and the sums still follow dispatch's routing. Mirrors
 * ROCm/mori's EpDispatchCombineOp.combine and DeepEP's low_latency_combine. */
MORI_API int mori_ep_combine(mori_ep_handle *h, mori_dtype dtype, const void *expert_out, const float *weights,
			     const int32_t *indices, void *out, void *stream);

/* DeepEP's Buffer.get_dispatch_layout on the GPU, on stream: for indices [num_tokens, K]
 * (int32, -1 skipped): tokens_per_rank [world] int32 (tokens with at least one expert on the
 * rank), tokens_per_expert [world x num_experts_per_rank] int32, token_in_rank [num_tokens,
 * world] uint8 (0/1). Any output may be NULL. */
MORI_API int mori_ep_get_dispatch_layout(mori_ep_handle *h, const int32_t *indices, int num_tokens,
					 int32_t *tokens_per_rank, int32_t *tokens_per_expert,
					 uint8_t *token_in_rank, void *stream);

/* The same computation on host memory (checks, CPU paths): MORI_EINVAL for an index out of
 * range (naming it); outputs as above, any may be NULL. */
MORI_API int mori_ep_layout_host(const mori_ep_config *cfg, const int32_t *indices, int num_tokens,
				 int32_t *tokens_per_rank, int32_t *tokens_per_expert, uint8_t *token_in_rank,
				 char *msg, size_t cap);

/* code 0, or the first error the handle's kernels recorded, message its detail (also in
 * mori_client_last_error); then the group's abort status (as mori_shmem_status, pe included).
 * Synchronise the stream the handle's work ran on first: the word is read through the legacy
 * default stream, which does not wait for non-blocking streams. Codes: MORI_EINVAL (bad expert
 * index, other routing in combine), MORI_EPEERDEAD / MORI_ECANCELED (the group aborted),
 * MORI_ETIMEDOUT (a wait passed config.timeout_us). The word stays set until
 * mori_ep_status_clear. Returns the code; MORI_EINVAL for NULL h, MORI_ESTALE after fork. */
MORI_API int mori_ep_status(mori_ep_handle *h, mori_status *out);
/* Reset the word mori_ep_status reads (every slot's), so a later error shows. MORI_OK, or the
 * driver's error (message in mori_client_last_error). */
MORI_API int mori_ep_status_clear(mori_ep_handle *h);

/* Kernels of a destroyed handle (a CUDA graph captured on it and replayed after mori_ep_destroy)
 * find the handle's generation retired in a per-device table that is never freed, return at
 * once without touching any buffer, and leave a record: code MORI_ESTALE with a message naming
 * the generation and the count of such launches (also in mori_client_last_error(c); c may be
 * NULL), or 0 when none ran; pe -1. Scope: this process, every handle; synchronise the replay's
 * stream first. The record stays until mori_ep_retired_status_clear. While the client that
 * created the handle is open (mori_client_close unloads the kernels: what a replay does then is
 * the driver's answer). Returns the code, or the driver's error reading the record. */
MORI_API int mori_ep_retired_status(mori_client *c, mori_status *out);
MORI_API int mori_ep_retired_status_clear(mori_client *c);

#ifdef __cplusplus
}
#endif
#endif
