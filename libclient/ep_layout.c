/* libmori MORI-EP, the host-only part: configuration defaults and checks, the layout
 * of a handle's symmetric block (kernels/ep_kernels.h), and DeepEP's dispatch layout computed
 * on host memory. No GPU, no daemon: tests/test_ep_layout runs it everywhere. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/ep_internode.h"
#include "../kernels/ep_kernels.h"
#include "conv.h"
#include "ep_int.h"

static const mori_ep_config ep_defaults = {
	.size = sizeof(mori_ep_config),
	.data_type = MORI_BFLOAT16,
	.max_token_type_size = 2,
	.kernel_type = MORI_EP_NORMAL,
	.scale_type_size = 4,
	.timeout_us = EP_DEFAULT_TIMEOUT_US,
};

int mori_ep_config_init(mori_ep_config *cfg, size_t size)
{
	return opts_init(cfg, size, OPTS_MIN_EP, &ep_defaults, sizeof(ep_defaults));
}

int ep_dtype_size(mori_dtype dtype)
{
	switch (dtype) {
	case MORI_BFLOAT16: return 2;
	case MORI_FLOAT32: return 4;
	case MORI_FLOAT8_E4M3: return 1;
	default: return 0;
	}
}

static int bad(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *msg, size_t cap, const char *fmt, ...)
{
	if (msg && cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, cap, fmt, ap);
		va_end(ap);
	}
	return MORI_EINVAL;
}

int ep_config_take(const mori_ep_config *cfg, mori_ep_config *own, char *msg, size_t cap)
{
	*own = ep_defaults;
	if (!cfg)
		return bad(msg, cap, "config is NULL");
	int rc = opts_take(own, sizeof(*own), cfg, OPTS_MIN_EP);
	if (rc) {
		bad(msg, cap, "cfg->size %zu is not a mori_ep_config this library reads (%zu bytes): call "
			      "mori_ep_config_init", cfg->size, sizeof(*own));
		*own = ep_defaults;
	}
	return rc;
}

int mori_ep_config_check(const mori_ep_config *cfg, char *msg, size_t cap)
{
	mori_ep_config own;
	int rc = ep_config_take(cfg, &own, msg, cap);
	return rc ? rc : ep_config_valid(&own, msg, cap);
}

int ep_config_valid(const mori_ep_config *c, char *msg, size_t cap)
{
	if (c->world_size < 1 || c->world_size > MORI_EP_MAX_WORLD)
		return bad(msg, cap, "world_size %d is outside 1..%d", c->world_size, MORI_EP_MAX_WORLD);
	if (c->rank < 0 || c->rank >= c->world_size)
		return bad(msg, cap, "rank %d is outside 0..%d", c->rank, c->world_size - 1);
	if (c->num_experts_per_token < 1 || c->num_experts_per_token > MORI_EP_MAX_TOPK)
		return bad(msg, cap, "num_experts_per_token %d is outside 1..%d", c->num_experts_per_token,
			   MORI_EP_MAX_TOPK);
	if (c->num_experts_per_rank < 1 || c->num_experts_per_rank > EP_MAX_EXPERTS_PER_RANK)
		return bad(msg, cap, "num_experts_per_rank %d is outside 1..%d", c->num_experts_per_rank,
			   EP_MAX_EXPERTS_PER_RANK);
	if (c->max_num_inp_token_per_rank < 1 || c->max_num_inp_token_per_rank > EP_MAX_TOKENS)
		return bad(msg, cap, "max_num_inp_token_per_rank %d is outside 1..%d", c->max_num_inp_token_per_rank,
			   EP_MAX_TOKENS);
	int es = ep_dtype_size(c->data_type);
	if (!es)
		return bad(msg, cap, "data_type %d is none of bf16 (%d), fp32 (%d), fp8 e4m3 (%d)", (int)c->data_type,
			   MORI_BFLOAT16, MORI_FLOAT32, MORI_FLOAT8_E4M3);
	if (c->kernel_type < MORI_EP_NORMAL || c->kernel_type > MORI_EP_INTERNODE_LL)
		return bad(msg, cap, "kernel_type %d is none of normal (0), low-latency (1), internode (2), internode "
			   "low-latency (3)", c->kernel_type);
	if (c->max_token_type_size != 1 && c->max_token_type_size != 2 && c->max_token_type_size != 4)
		return bad(msg, cap, "max_token_type_size %d is not 1, 2 or 4 bytes", c->max_token_type_size);
	if (es > c->max_token_type_size)
		return bad(msg, cap, "data_type's %d-byte elements exceed max_token_type_size %d", es,
			   c->max_token_type_size);
	if (c->hidden_dim < 1 || c->hidden_dim > EP_MAX_HIDDEN)
		return bad(msg, cap, "hidden_dim %d is outside 1..%d", c->hidden_dim, EP_MAX_HIDDEN);
	if ((c->hidden_dim * es) % 16)
		return bad(msg, cap, "hidden_dim %d x %d bytes is not a multiple of 16 bytes", c->hidden_dim, es);
	if ((c->hidden_dim * c->max_token_type_size) % 16)
		return bad(msg, cap, "hidden_dim %d x max_token_type_size %d is not a multiple of 16 bytes", c->hidden_dim,
			   c->max_token_type_size);
	if (c->scale_dim < 0 || c->scale_dim > c->hidden_dim)
		return bad(msg, cap, "scale_dim %d is outside 0..hidden_dim (%d)", c->scale_dim, c->hidden_dim);
	if (c->scale_dim && c->scale_type_size != 4 && c->scale_type_size != 8)
		return bad(msg, cap, "scale_type_size %d is not 4 or 8 bytes", c->scale_type_size);
	if (c->warp_num_per_block < 0 || c->warp_num_per_block > 32)
		return bad(msg, cap, "warp_num_per_block %d is outside 0..32", c->warp_num_per_block);
	if (c->block_num < 0 || c->block_num > 1024)
		return bad(msg, cap, "block_num %d is outside 0..1024", c->block_num);
	if (c->num_in_flight < 0 || c->num_in_flight > MORI_EP_MAX_IN_FLIGHT)
		return bad(msg, cap, "num_in_flight %d is outside 0..%d", c->num_in_flight, MORI_EP_MAX_IN_FLIGHT);
	if (c->quant_type != MORI_EP_QUANT_NONE && c->quant_type != MORI_EP_QUANT_FP8_BLOCK128)
		return bad(msg, cap, "quant_type %d is neither none (0) nor fp8 per 128 channels (1)", c->quant_type);
	if (c->quant_type) {
		if (c->data_type != MORI_BFLOAT16)
			return bad(msg, cap, "quant_type fp8 quantises bf16 input, but data_type is %d", c->data_type);
		if (c->hidden_dim % 128)
			return bad(msg, cap, "quant_type fp8: hidden_dim %d is not a multiple of 128", c->hidden_dim);
		if (c->scale_dim != c->hidden_dim / 128 || c->scale_type_size != 4)
			return bad(msg, cap, "quant_type fp8: scale_dim must be hidden_dim / 128 = %d floats (scale_dim %d, "
				   "scale_type_size %d)", c->hidden_dim / 128, c->scale_dim, c->scale_type_size);
	}
	if (c->timeout_us < 0)
		return bad(msg, cap, "timeout_us %lld is negative", (long long)c->timeout_us);
	/* source positions are int32: (world x max tokens) x K must fit */
	if ((int64_t)c->world_size * c->max_num_inp_token_per_rank * c->num_experts_per_token >= (1ll << 31))
		return bad(msg, cap, "world_size x max_num_inp_token_per_rank x num_experts_per_token exceeds 2^31");
	return MORI_OK;
}

static uint64_t up(uint64_t v) { return (v + 255) & ~(uint64_t)255; }

int ep_layout(const mori_ep_config *c, struct mori_ep_layout *L)
{
	if (ep_config_valid(c, NULL, 0))
		return MORI_EINVAL;
	memset(L, 0, sizeof(*L));
	const uint64_t W = (uint64_t)c->world_size, M = (uint64_t)c->max_num_inp_token_per_rank,
		       K = (uint64_t)c->num_experts_per_token, epr = (uint64_t)c->num_experts_per_rank;
	const int ll = ep_ll(c->kernel_type);
	L->bins = (int32_t)(ll ? W * epr : W);
	L->bins_local = (int32_t)(ll ? epr : 1);
	L->pos_cols = (int32_t)(ll ? K : W);
	L->token_stride = c->hidden_dim * c->max_token_type_size;
	L->scale_stride = (int32_t)((c->scale_dim * c->scale_type_size + 15) & ~15);
	L->recv_slots = (int64_t)(ll ? epr * W * M : W * M);
	const uint64_t R = (uint64_t)L->recv_slots;
	uint64_t o = 0;
	L->meta = o, o = up(o + 8 * (uint64_t)L->bins_local * W);
	L->ddone = o, o = up(o + 8 * W);
	L->cdone = o, o = up(o + 8 * W);
	L->tok = o, o = up(o + R * (uint64_t)L->token_stride);
	L->w = o, o = up(o + R * K * 4);
	L->idx = o, o = up(o + R * K * 4);
	L->scale = o, o = up(o + R * (uint64_t)L->scale_stride);
	L->src = o, o = up(o + R * 4);
	L->comb = o, o = up(o + (ll ? M * K : W * M) * (uint64_t)L->token_stride);
	L->cin = o, o = up(o + R * (uint64_t)L->token_stride);
	L->local = o;
	L->epoch = o, o = up(o + 8);
	L->status = o, o = up(o + 16);
	L->count = o, o = up(o + 4 * (uint64_t)L->bins_local);
	L->base = o, o = up(o + 4 * (uint64_t)L->bins);
	L->pos = o, o = up(o + 4 * M * (uint64_t)L->pos_cols);
	L->route = o, o = up(o + 4 * M * K);
	L->rweight = o, o = up(o + 4 * M * K);
	L->total = o;
	return MORI_OK;
}

/* A dispatch record's offsets for rows of row_bytes: the row (16-aligned), weights [K], indices
 * [K], scales (scale_stride bytes), src_pos, bin and position. Chunks are sized for the largest
 * row (token_stride); the records are packed by the dispatch's own row, so an fp8 dispatch under
 * a bf16-sized config sends half the bytes across nodes, not padding. */
void epx_records(struct mori_epx_layout *X, int32_t row_bytes, int32_t K, int32_t scale_stride)
{
	X->rec_w = (row_bytes + 15) & ~15;
	X->rec_idx = X->rec_w + 4 * K;
	X->rec_scale = X->rec_idx + 4 * K;
	X->rec_src = X->rec_scale + scale_stride;
	X->rec = (X->rec_src + 12 + 15) & ~15;
}

/* The internode kernel types' parts, after the intranode ones in the same slot (ep_internode.h):
 * landing and staging areas of one chunk per rank in each direction, and the local tables. */
int epx_layout(const mori_ep_config *c, const struct mori_ep_layout *L, struct mori_epx_layout *X)
{
	memset(X, 0, sizeof(*X));
	if (!ep_xnode(c->kernel_type))
		return MORI_EINVAL;
	const uint64_t W = (uint64_t)c->world_size, M = (uint64_t)c->max_num_inp_token_per_rank,
		       K = (uint64_t)c->num_experts_per_token, epr = (uint64_t)c->num_experts_per_rank;
	/* records one source sends one rank: each token once (normal), or once per distinct expert of
	 * that rank among its top-k (low-latency) */
	const uint64_t rows = ep_ll(c->kernel_type) ? M * (K < epr ? K : epr) : M;
	X->rows_cap = (int32_t)rows;
	X->hdr = (int32_t)up(16 + 4 * (uint64_t)L->bins_local);
	epx_records(X, L->token_stride, (int32_t)K, L->scale_stride); /* the largest: what a chunk holds */
	X->crow = L->token_stride;
	X->cap = up((uint64_t)X->hdr + rows * (uint64_t)X->rec);
	/* what a dispatch sends: its own rows (fp8 after quantisation, else data_type's), packed */
	epx_records(X, c->quant_type ? c->hidden_dim : c->hidden_dim * ep_dtype_size(c->data_type), (int32_t)K,
		    L->scale_stride);
	X->ccap = up(MORI_EPX_CHDR + rows * (uint64_t)X->crow);
	uint64_t o = L->total;
	X->xsig = o, o = up(o + 8 * W);
	X->xcsig = o, o = up(o + 8 * W);
	X->land = o, o += W * X->cap;
	X->cland = o, o += W * X->ccap;
	X->stage = o, o += W * X->cap;
	X->cstage = o, o += W * X->ccap;
	X->xcnt = o, o = up(o + 4 * (uint64_t)L->bins);
	X->xoff = o, o = up(o + 4 * (uint64_t)L->bins);
	X->xtot = o, o = up(o + 4 * W);
	X->xbase = o, o = up(o + 4 * (uint64_t)L->bins_local * W);
	X->xpre = o, o = up(o + 4 * (uint64_t)L->bins_local * W);
	X->xrows = o, o = up(o + 4 * W);
	X->end = o;
	return MORI_OK;
}

uint64_t ep_slot_bytes(const mori_ep_config *cfg)
{
	struct mori_ep_layout L;
	struct mori_epx_layout X;
	if (ep_layout(cfg, &L))
		return 0;
	return ep_xnode(cfg->kernel_type) && !epx_layout(cfg, &L, &X) ? X.end : L.total;
}

uint64_t mori_ep_heap_bytes(const mori_ep_config *caller_cfg)
{
	mori_ep_config own;
	if (ep_config_take(caller_cfg, &own, NULL, 0))
		return 0;
	uint64_t s = ep_slot_bytes(&own);
	return s ? s * (uint64_t)ep_in_flight(&own) + EP_XCHG_BYTES : 0;
}

int mori_ep_layout_host(const mori_ep_config *caller_cfg, const int32_t *indices, int num_tokens, int32_t *per_rank,
			int32_t *per_expert, uint8_t *in_rank, char *msg, size_t cap)
{
	mori_ep_config own;
	const mori_ep_config *cfg = &own;
	int rc = mori_ep_config_check(caller_cfg, msg, cap);
	if (rc)
		return rc;
	ep_config_take(caller_cfg, &own, NULL, 0); /* checked just now: cannot fail */
	if (num_tokens < 0 || num_tokens > cfg->max_num_inp_token_per_rank)
		return bad(msg, cap, "%d tokens, more than max_num_inp_token_per_rank %d", num_tokens,
			   cfg->max_num_inp_token_per_rank);
	if (num_tokens && !indices)
		return bad(msg, cap, "indices is NULL");
	const int W = cfg->world_size, K = cfg->num_experts_per_token, epr = cfg->num_experts_per_rank, E = W * epr;
	for (int i = 0; i < num_tokens * K; i++)
		if (indices[i] < -1 || indices[i] >= E)
			return bad(msg, cap, "token %d slot %d: expert index %d is outside -1..%d", i / K, i % K, indices[i],
				   E - 1);
	if (per_rank)
		memset(per_rank, 0, sizeof(*per_rank) * (size_t)W);
	if (per_expert)
		memset(per_expert, 0, sizeof(*per_expert) * (size_t)E);
	for (int t = 0; t < num_tokens; t++) {
		uint32_t ranks = 0; /* W <= 32 */
		for (int k = 0; k < K; k++) {
			int v = indices[t * K + k];
			if (v < 0)
				continue;
			if (per_expert)
				per_expert[v]++;
			ranks |= 1u << (v / epr);
		}
		for (int d = 0; d < W; d++) {
			int in = ranks >> d & 1;
			if (per_rank)
				per_rank[d] += in;
			if (in_rank)
				in_rank[(size_t)t * W + d] = (uint8_t)in;
		}
	}
	return MORI_OK;
}

/* The fields every rank must agree on, for the comparison at creation (rank excluded). */
const struct ep_field ep_fields[] = {
#define F(name) {#name, offsetof(mori_ep_config, name), sizeof(((mori_ep_config *)0)->name)}
	F(world_size), F(hidden_dim), F(scale_dim), F(scale_type_size), F(max_token_type_size),
	F(max_num_inp_token_per_rank), F(num_experts_per_rank), F(num_experts_per_token), F(data_type),
	F(kernel_type), F(warp_num_per_block), F(block_num), F(timeout_us), F(num_in_flight), F(quant_type),
#undef F
	{NULL, 0, 0},
};

int ep_config_diff(const mori_ep_config *a, const mori_ep_config *b, char *msg, size_t cap, int ra, int rb)
{
	for (const struct ep_field *f = ep_fields; f->name; f++) {
		const char *pa = (const char *)a + f->off, *pb = (const char *)b + f->off;
		if (memcmp(pa, pb, f->size) == 0)
			continue;
		long long va = f->size == 8 ? *(const int64_t *)pa : *(const int32_t *)pa;
		long long vb = f->size == 8 ? *(const int64_t *)pb : *(const int32_t *)pb;
		return bad(msg, cap, "config field %s differs: rank %d has %lld, rank %d has %lld", f->name, ra, va, rb, vb);
	}
	return MORI_OK;
}
