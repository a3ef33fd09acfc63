/* MORI-EP's host-only parts (issue 13, acceptance 5), no GPU: configuration checks (each bad
 * field refused with a message naming it), the comparison between ranks' configurations (the
 * first differing field named with both values), the heap size a handle needs, and DeepEP's
 * dispatch layout (tokens per rank, per expert, token-in-rank mask) from mori_ep_layout_host
 * against an independent reference (each token's experts sorted, mapped to ranks, duplicates
 * dropped) over seeded random routings with -1 slots, world sizes 1..32 and top-k 1..32; and
 * mori_ep_create on a group of host memory (a morid here): refused, MORI_ENOTSUP, nothing kept. */
#include <check.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "../kernels/ep_fp8.h"
#include "../kernels/ep_internode.h"
#include "../kernels/ep_kernels.h"
#include "../libclient/ep_int.h"
#include "harness.h"
#include "mori_ep.h"

static mori_ep_config base_cfg(void)
{
	mori_ep_config c;
	mori_ep_config_init(&c, sizeof(c));
	c.rank = 1;
	c.world_size = 8;
	c.hidden_dim = 7168;
	c.max_num_inp_token_per_rank = 4096;
	c.num_experts_per_rank = 32;
	c.num_experts_per_token = 8;
	return c;
}

static void refused(mori_ep_config c, const char *word)
{
	char msg[300] = "";
	ck_assert_int_eq(mori_ep_config_check(&c, msg, sizeof(msg)), MORI_EINVAL);
	ck_assert_msg(strstr(msg, word), "message '%s' does not name '%s'", msg, word);
	ck_assert_uint_eq(mori_ep_heap_bytes(&c), 0);
}

START_TEST(config_checks)
{
	mori_ep_config c = base_cfg();
	char msg[300] = "";
	ck_assert_int_eq(mori_ep_config_check(&c, msg, sizeof(msg)), MORI_OK);
	ck_assert_int_eq(mori_ep_config_check(NULL, msg, sizeof(msg)), MORI_EINVAL);
	c.hidden_dim = 100; /* 200 bytes */
	refused(c, "multiple of 16");
	c = base_cfg(), c.hidden_dim = 16; /* 32 bytes: fine in bf16 */
	ck_assert_int_eq(mori_ep_config_check(&c, NULL, 0), MORI_OK);
	c.data_type = MORI_FLOAT8_E4M3, c.hidden_dim = 8, c.max_token_type_size = 2; /* 8 fp8 bytes */
	refused(c, "multiple of 16");
	c = base_cfg(), c.num_experts_per_token = 33;
	refused(c, "num_experts_per_token 33");
	c.num_experts_per_token = 32;
	ck_assert_int_eq(mori_ep_config_check(&c, NULL, 0), MORI_OK);
	c = base_cfg(), c.world_size = 0;
	refused(c, "world_size 0");
	c = base_cfg(), c.world_size = MORI_EP_MAX_WORLD + 1;
	refused(c, "world_size");
	c = base_cfg(), c.rank = 8;
	refused(c, "rank 8");
	c = base_cfg(), c.data_type = (mori_dtype)8; /* ncclFloat64's number: no mori_dtype */
	refused(c, "data_type 8");
	c = base_cfg(), c.data_type = MORI_FLOAT32; /* 4-byte elements, max_token_type_size 2 */
	refused(c, "max_token_type_size");
	c = base_cfg(), c.kernel_type = 4;
	refused(c, "kernel_type 4");
	c = base_cfg(), c.max_num_inp_token_per_rank = 0;
	refused(c, "max_num_inp_token_per_rank 0");
	c = base_cfg(), c.num_experts_per_rank = 0;
	refused(c, "num_experts_per_rank 0");
	c = base_cfg(), c.scale_dim = 56, c.scale_type_size = 3;
	refused(c, "scale_type_size 3");
	c = base_cfg(), c.timeout_us = -1;
	refused(c, "timeout_us");
	c = base_cfg(), c.quant_type = MORI_EP_QUANT_FP8_BLOCK128, c.scale_dim = 56;
	ck_assert_int_eq(mori_ep_config_check(&c, msg, sizeof(msg)), MORI_OK);
	c.quant_type = 2;
	refused(c, "quant_type 2");
	c = base_cfg(), c.quant_type = MORI_EP_QUANT_FP8_BLOCK128, c.scale_dim = 0;
	refused(c, "scale_dim must be hidden_dim / 128 = 56");
	c.scale_dim = 56, c.data_type = MORI_FLOAT8_E4M3;
	refused(c, "quantises bf16 input");
	c.data_type = MORI_BFLOAT16, c.hidden_dim = 7168 + 64, c.scale_dim = 56;
	refused(c, "not a multiple of 128");
	c = base_cfg(), c.num_in_flight = MORI_EP_MAX_IN_FLIGHT + 1;
	refused(c, "num_in_flight 17");
	c = base_cfg(), c.num_in_flight = -1;
	refused(c, "num_in_flight -1");
	/* the size field: a struct smaller than this release's is refused; a newer caller's larger
	 * struct is read up to what this library knows, its unknown tail must be zero */
	ck_assert_int_eq(mori_ep_config_init(&c, offsetof(mori_ep_config, quant_type)), MORI_EINVAL);
	c = base_cfg(), c.size = offsetof(mori_ep_config, quant_type);
	ck_assert_int_eq(mori_ep_config_check(&c, NULL, 0), MORI_EINVAL);
	struct {
		mori_ep_config c;
		int64_t newer;
	} big;
	memset(&big, 0xff, sizeof(big));
	ck_assert_int_eq(mori_ep_config_init(&big.c, sizeof(big)), MORI_OK);
	ck_assert_int_eq(big.newer, 0);
	ck_assert_uint_eq(big.c.size, sizeof(big));
	ck_assert_int_eq(big.c.data_type, MORI_BFLOAT16);
	big.c = base_cfg(), big.c.size = sizeof(big);
	ck_assert_int_eq(mori_ep_config_check(&big.c, NULL, 0), MORI_OK);
	big.newer = 1;
	ck_assert_int_eq(mori_ep_config_check(&big.c, NULL, 0), MORI_ENOTSUP);
}
END_TEST

START_TEST(config_differences_named)
{
	mori_ep_config a = base_cfg(), b = base_cfg();
	char msg[300] = "";
	b.rank = 5; /* rank is allowed to differ */
	ck_assert_int_eq(ep_config_diff(&a, &b, msg, sizeof(msg), 0, 5), MORI_OK);
	b.hidden_dim = 4096;
	ck_assert_int_eq(ep_config_diff(&a, &b, msg, sizeof(msg), 0, 5), MORI_EINVAL);
	ck_assert_str_eq(msg, "config field hidden_dim differs: rank 0 has 7168, rank 5 has 4096");
	b = a, b.timeout_us = 5;
	ck_assert_int_eq(ep_config_diff(&a, &b, msg, sizeof(msg), 0, 2), MORI_EINVAL);
	ck_assert_str_eq(msg, "config field timeout_us differs: rank 0 has 10000000, rank 2 has 5");
	b = a, b.kernel_type = MORI_EP_LOW_LATENCY;
	ck_assert_int_eq(ep_config_diff(&a, &b, msg, sizeof(msg), 0, 1), MORI_EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "kernel_type"));
	b = a, b.num_in_flight = 2;
	ck_assert_int_eq(ep_config_diff(&a, &b, msg, sizeof(msg), 0, 3), MORI_EINVAL);
	ck_assert_str_eq(msg, "config field num_in_flight differs: rank 0 has 0, rank 3 has 2");
}
END_TEST

/* The block holds what mori_ep.h promises: receive rows for every source's every token (normal)
 * or every (expert, source, token) (low-latency), and the combine rows. */
START_TEST(heap_sizes)
{
	mori_ep_config c = base_cfg();
	struct mori_ep_layout L;
	ck_assert_int_eq(ep_layout(&c, &L), MORI_OK);
	ck_assert_int_eq(L.recv_slots, 8 * 4096);
	ck_assert_int_eq(L.token_stride, 7168 * 2);
	uint64_t rows = (uint64_t)L.recv_slots * L.token_stride;
	ck_assert_uint_ge(L.total, 2 * rows); /* receive + combine rows, at least */
	ck_assert_uint_ge(L.comb - L.tok, rows);
	ck_assert_uint_ge(L.total - L.comb, (uint64_t)8 * 4096 * L.token_stride);
	ck_assert_uint_eq(mori_ep_heap_bytes(&c), L.total + EP_XCHG_BYTES);
	/* num_in_flight: one buffer set (the whole block layout) per dispatch in flight; 0 and 1 alike */
	c.num_in_flight = 1;
	ck_assert_uint_eq(mori_ep_heap_bytes(&c), L.total + EP_XCHG_BYTES);
	c.num_in_flight = 5;
	ck_assert_uint_eq(mori_ep_heap_bytes(&c), 5 * L.total + EP_XCHG_BYTES);
	c.num_in_flight = 0;
	c.kernel_type = MORI_EP_LOW_LATENCY;
	c.max_num_inp_token_per_rank = 128;
	ck_assert_int_eq(ep_layout(&c, &L), MORI_OK);
	ck_assert_int_eq(L.recv_slots, 32 * 8 * 128);
	ck_assert_int_eq(L.bins, 256);
	ck_assert_int_eq(L.pos_cols, 8);
	/* every part 256-aligned and in order */
	uint64_t parts[] = {L.meta, L.ddone, L.cdone, L.tok, L.w, L.idx, L.scale, L.src, L.comb, L.cin, L.epoch, L.status,
			    L.count, L.base, L.pos, L.route, L.rweight, L.total};
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		ck_assert_uint_eq(parts[i] % 256, 0);
		if (i)
			ck_assert_uint_ge(parts[i], parts[i - 1]);
	}
}
END_TEST

/* The internode kernel types (issue 14): the intranode layout unchanged at the slot's start, the
 * internode parts after it, disjoint, aligned, large enough for the most records a source can
 * send one rank (normal: every token once; low-latency: once per distinct local expert), each
 * chunk within its area, and mori_ep_heap_bytes of the internode type covering all of it. */
START_TEST(internode_sizes)
{
	for (int ll = 0; ll < 2; ll++)
		for (int K = 1; K <= 32; K *= 4) {
			mori_ep_config c = base_cfg(), x;
			c.kernel_type = ll ? MORI_EP_LOW_LATENCY : MORI_EP_NORMAL;
			c.max_num_inp_token_per_rank = 128, c.num_experts_per_token = K, c.num_experts_per_rank = 4;
			c.scale_dim = 56;
			x = c, x.kernel_type += 2;
			ck_assert_int_eq(mori_ep_config_check(&x, NULL, 0), MORI_OK);
			struct mori_ep_layout L, LX;
			struct mori_epx_layout X;
			ck_assert_int_eq(ep_layout(&c, &L), MORI_OK);
			ck_assert_int_eq(ep_layout(&x, &LX), MORI_OK);
			ck_assert_int_eq(memcmp(&L, &LX, sizeof(L)), 0); /* the same receive layout */
			ck_assert_int_eq(epx_layout(&c, &L, &X), MORI_EINVAL); /* an intranode type has none */
			ck_assert_int_eq(epx_layout(&x, &LX, &X), MORI_OK);
			const uint64_t W = 8, rows = ll ? 128u * (uint64_t)(K < 4 ? K : 4) : 128u;
			ck_assert_int_eq(X.rows_cap, (int)rows);
			ck_assert_int_ge(X.rec_w, L.token_stride);
			ck_assert_int_ge(X.rec_scale, X.rec_idx + 4 * K);
			ck_assert_int_ge(X.rec, X.rec_src + 12);
			ck_assert_int_eq(X.rec % 16, 0);
			ck_assert_int_ge(X.hdr, 16 + 4 * L.bins_local);
			ck_assert_uint_ge(X.cap, (uint64_t)X.hdr + rows * X.rec);
			ck_assert_uint_ge(X.ccap, MORI_EPX_CHDR + rows * (uint64_t)L.token_stride);
			ck_assert_int_eq(X.crow, L.token_stride);
			/* a call's own rows (an fp8 row under this bf16-sized config): packed, within the chunk */
			struct mori_epx_layout P = X;
			const int32_t row = c.hidden_dim; /* 1-byte elements */
			epx_records(&P, row, K, L.scale_stride);
			ck_assert_int_eq(P.rec_w, (row + 15) & ~15);
			ck_assert_int_eq(P.rec_idx, P.rec_w + 4 * K);
			ck_assert_int_eq(P.rec_scale, P.rec_idx + 4 * K);
			ck_assert_int_eq(P.rec_src, P.rec_scale + L.scale_stride);
			ck_assert_int_eq(P.rec, (P.rec_src + 12 + 15) & ~15);
			ck_assert_int_lt(P.rec, X.rec);
			ck_assert_uint_ge(X.cap, (uint64_t)X.hdr + rows * P.rec);
			/* an fp8 dispatch under the same bf16-sized config: epx_layout packs its records so */
			mori_ep_config f8 = x;
			f8.data_type = MORI_FLOAT8_E4M3;
			struct mori_ep_layout LF;
			struct mori_epx_layout XF;
			ck_assert_int_eq(mori_ep_config_check(&f8, NULL, 0), MORI_OK);
			ck_assert_int_eq(ep_layout(&f8, &LF), MORI_OK);
			ck_assert_int_eq(epx_layout(&f8, &LF, &XF), MORI_OK);
			ck_assert_int_eq(XF.rec_w, (row + 15) & ~15);
			ck_assert_int_eq(XF.rec, P.rec);
			ck_assert_uint_eq(XF.cap, X.cap); /* chunks still hold the largest rows */
			ck_assert_int_eq(XF.crow, LF.token_stride);
			uint64_t parts[] = {L.total, X.xsig, X.xcsig, X.land, X.cland, X.stage, X.cstage, X.xcnt, X.xoff,
					    X.xtot, X.xbase, X.xpre, X.xrows, X.end};
			uint64_t need[] = {0, 8 * W, 8 * W, W * X.cap, W * X.ccap, W * X.cap, W * X.ccap, 4 * (uint64_t)L.bins,
					   4 * (uint64_t)L.bins, 4 * W, 4 * W * L.bins_local, 4 * W * L.bins_local, 4 * W, 0};
			for (size_t i = 1; i < sizeof(parts) / sizeof(parts[0]); i++) {
				ck_assert_uint_eq(parts[i] % 256, 0);
				ck_assert_uint_ge(parts[i], parts[i - 1] + need[i - 1]);
			}
			ck_assert_uint_eq(mori_ep_heap_bytes(&x), X.end + EP_XCHG_BYTES);
			ck_assert_uint_gt(mori_ep_heap_bytes(&x), mori_ep_heap_bytes(&c));
			x.num_in_flight = 3;
			ck_assert_uint_eq(mori_ep_heap_bytes(&x), 3 * X.end + EP_XCHG_BYTES);
		}
}
END_TEST

/* fp8 e4m3 (kernels/ep_fp8.h) against an independent reference: every code decoded, the nearest
 * taken (a tie to the even code), saturating at 448. */
static float e4m3_value(int code)
{
	int e = code >> 3 & 15, m = code & 7;
	float v = e ? ldexpf(1.f + m / 8.f, e - 7) : ldexpf(m / 8.f, -6);
	return code & 0x80 ? -v : v;
}
static uint32_t e4m3_nearest(float f)
{
	float a = fabsf(f);
	int best = 0;
	for (int c = 1; c <= 0x7e; c++) {
		float d = fabsf(e4m3_value(c) - a), bd = fabsf(e4m3_value(best) - a);
		if (d < bd || (d == bd && !(c & 1)))
			best = c;
	}
	return (uint32_t)best | (signbit(f) ? 0x80u : 0u);
}

START_TEST(fp8_rounding)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	long n = 0;
	for (int i = 0; i < 200000; i++) {
		float f;
		if (i < 65536) { /* every bf16 pattern that is finite */
			uint32_t u = (uint32_t)i << 16;
			memcpy(&f, &u, 4);
			if (!isfinite(f))
				continue;
		} else { /* random floats over the e4m3 range and around it, midpoints included */
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			f = ldexpf((float)(x % 1000000) / 1e6f + 1.f, (int)(x >> 40) % 24 - 14) * ((x >> 60) & 1 ? -1.f : 1.f);
			if (i % 7 == 0) /* exact midpoints between neighbouring codes */
				f = (e4m3_value((int)(x >> 20) % 0x7e) + e4m3_value((int)(x >> 20) % 0x7e + 1)) / 2;
		}
		ck_assert_msg(ep_f32_to_e4m3(f) == e4m3_nearest(f), "%a: %#x, nearest %#x", (double)f, ep_f32_to_e4m3(f),
			      e4m3_nearest(f));
		n++;
	}
	ck_assert_int_gt(n, 190000);
	ck_assert_uint_eq(ep_f32_to_e4m3(1e9f), 0x7e);
	ck_assert_uint_eq(ep_f32_to_e4m3(-INFINITY), 0xfe);
	ck_assert_uint_eq(ep_f32_to_e4m3(NAN) & 0x7f, 0x7f);
	/* the scale rule: amax 3.5 -> x 128 each, scale 3.5 / 448; tiny groups use 1e-4 */
	ck_assert(ep_fp8_mult(3.5f) == 448.f / 3.5f && ep_fp8_scale(3.5f) == 3.5f / 448.f);
	ck_assert(ep_fp8_mult(0.f) == 448.f / 1e-4f && ep_fp8_scale(0.f) == 1e-4f / 448.f);
}
END_TEST

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Independent reference: sort the row, walk distinct ranks. */
static void reference(int W, int epr, int K, int T, const int32_t *idx, int32_t *pr, int32_t *pe, uint8_t *ir)
{
	memset(pr, 0, sizeof(*pr) * (size_t)W);
	memset(pe, 0, sizeof(*pe) * (size_t)W * (size_t)epr);
	memset(ir, 0, (size_t)T * (size_t)W);
	int row[MORI_EP_MAX_TOPK];
	for (int t = 0; t < T; t++) {
		int n = 0;
		for (int k = 0; k < K; k++)
			if (idx[t * K + k] >= 0)
				row[n++] = idx[t * K + k];
		qsort(row, (size_t)n, sizeof(int), cmp_int);
		int last_rank = -1;
		for (int i = 0; i < n; i++) {
			pe[row[i]]++;
			int r = row[i] / epr;
			if (r != last_rank) {
				pr[r]++;
				ir[t * W + r] = 1;
				last_rank = r;
			}
		}
	}
}

START_TEST(layout_against_reference)
{
	srand(1234);
	int cases = 0;
	for (int W = 1; W <= 32; W += (W < 8 ? 1 : 8)) {
		for (int K = 1; K <= 32; K = K < 8 ? K + 3 : K * 2) {
			int epr = 1 + rand() % 8, E = W * epr, T = rand() % 300;
			mori_ep_config c = base_cfg();
			c.rank = 0, c.world_size = W, c.num_experts_per_rank = epr, c.num_experts_per_token = K;
			c.max_num_inp_token_per_rank = 300;
			int32_t *idx = malloc(sizeof(int32_t) * (size_t)(T * K + 1));
			for (int i = 0; i < T * K; i++) /* one in five slots empty; repeats allowed */
				idx[i] = rand() % 5 == 0 ? -1 : rand() % E;
			int32_t pr[32], pe[32 * 8], rpr[32], rpe[32 * 8];
			uint8_t *ir = malloc((size_t)T * W + 1), *rir = malloc((size_t)T * W + 1);
			char msg[200];
			ck_assert_int_eq(mori_ep_layout_host(&c, idx, T, pr, pe, ir, msg, sizeof(msg)), MORI_OK);
			reference(W, epr, K, T, idx, rpr, rpe, rir);
			ck_assert_mem_eq(pr, rpr, sizeof(int32_t) * (size_t)W);
			ck_assert_mem_eq(pe, rpe, sizeof(int32_t) * (size_t)E);
			if (T)
				ck_assert_mem_eq(ir, rir, (size_t)T * W);
			free(idx), free(ir), free(rir);
			cases++;
		}
	}
	ck_assert_int_ge(cases, 40);
}
END_TEST

START_TEST(layout_refusals)
{
	mori_ep_config c = base_cfg();
	c.world_size = 2, c.rank = 0, c.num_experts_per_rank = 4, c.num_experts_per_token = 2;
	c.max_num_inp_token_per_rank = 3;
	int32_t idx[8] = {0, 1, 7, -1, 8, 2, 3, 3};
	int32_t pr[2];
	char msg[200] = "";
	ck_assert_int_eq(mori_ep_layout_host(&c, idx, 3, pr, NULL, NULL, msg, sizeof(msg)), MORI_EINVAL);
	ck_assert_str_eq(msg, "token 2 slot 0: expert index 8 is outside -1..7");
	ck_assert_int_eq(mori_ep_layout_host(&c, idx, 4, pr, NULL, NULL, msg, sizeof(msg)), MORI_EINVAL);
	ck_assert_str_eq(msg, "4 tokens, more than max_num_inp_token_per_rank 3");
	ck_assert_int_eq(mori_ep_layout_host(&c, idx, 2, pr, NULL, NULL, msg, sizeof(msg)), MORI_OK);
	ck_assert_int_eq(pr[0], 1);
	ck_assert_int_eq(pr[1], 1);
	ck_assert_int_eq(mori_ep_layout_host(&c, NULL, 0, pr, NULL, NULL, msg, sizeof(msg)), MORI_OK);
	ck_assert_int_eq(pr[0] + pr[1], 0);
}
END_TEST

/* A handle needs a VRAM heap: on a host-memory group creation is refused before anything is
 * allocated (and bad arguments before that); the group stays usable. */
START_TEST(create_refused_on_host_heap)
{
	struct test_daemon d;
	ck_assert_int_eq(daemon_start(&d, NULL), 0);
	mori_client *c;
	ck_assert_int_eq(mori_client_open(d.dir, "ep-host", &c), MORI_OK);
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_kind = MORI_MEM_HOST;
	o.heap_size = 4u << 20;
	mori_group *g;
	ck_assert_int_eq(mori_shmem_init(c, "ep-host", 0, 1, &o, &g), MORI_OK);
	mori_ep_config cfg = base_cfg();
	cfg.rank = 0, cfg.world_size = 1;
	mori_ep_handle *h = (mori_ep_handle *)&cfg;
	ck_assert_int_eq(mori_ep_create(g, NULL, &h), MORI_EINVAL);
	ck_assert_int_eq(mori_ep_create(g, &cfg, &h), MORI_ENOTSUP);
	ck_assert_ptr_null(h);
	ck_assert_ptr_nonnull(strstr(mori_client_last_error(c), "host heap"));
	ck_assert_int_eq(mori_ep_destroy(NULL), MORI_OK);
	ck_assert_int_eq(mori_ep_status(NULL, NULL), MORI_EINVAL);
	void *p = NULL;
	ck_assert_int_eq(mori_shmem_malloc(g, 4096, 0, &p), MORI_OK); /* the group still works */
	ck_assert_ptr_nonnull(p);
	mori_shmem_finalize(g);
	mori_client_close(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ep_layout");
	TCase *t = tcase_create("host");
	tcase_add_test(t, config_checks);
	tcase_add_test(t, config_differences_named);
	tcase_add_test(t, heap_sizes);
	tcase_add_test(t, internode_sizes);
	tcase_add_test(t, layout_against_reference);
	tcase_add_test(t, layout_refusals);
	tcase_add_test(t, create_refused_on_host_heap);
	tcase_add_test(t, fp8_rounding);
	tcase_set_timeout(t, 30);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
