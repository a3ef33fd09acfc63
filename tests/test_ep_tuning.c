/* MORI-EP's launch tuning table (issue 13), no GPU: the lookup against a table made here (nearest
 * shape: ep size, dtype, hidden size, the token ceiling then the clamp; the architecture's family
 * when the exact one has no file, the built-in default when neither has; the caller's non-zero
 * launch parameters kept) and the table compiled from kernels/ep_tuning/ JSON files (its H200 rules
 * found for the shapes mori-bench ep measured; an unknown architecture gets the default). */
#include <check.h>
#include <string.h>

#include "../libclient/ep_int.h"
#include "../libclient/ep_tune.h"
#include "harness.h"
#include "mori_ep.h"

/* arch, kernel type, ep, dtype, tokens, hidden, block_num, blocks/SM, warps, file, index */
static const struct ep_tune_rule T[] = {
	{"sm_90", 0, 8, MORI_BFLOAT16, 128, 7168, 64, 0, 8, "a", 0},
	{"sm_90", 0, 8, MORI_BFLOAT16, 1024, 7168, 128, 0, 12, "a", 1},
	{"sm_90", 0, 8, MORI_BFLOAT16, 4096, 7168, 0, 3, 16, "a", 2},
	{"sm_90", 0, 8, MORI_BFLOAT16, 1024, 2048, 32, 0, 4, "a", 3},
	{"sm_90", 0, 8, MORI_FLOAT8_E4M3, 1024, 7168, 96, 0, 10, "a", 4},
	{"sm_90", 0, 2, MORI_BFLOAT16, 1024, 7168, 16, 0, 2, "b", 0},
	{"sm_90", 1, 8, MORI_BFLOAT16, 128, 7168, 200, 0, 20, "c", 0},
	{"sm_80", 0, 4, MORI_BFLOAT16, 512, 4096, 40, 0, 6, "d", 0},
	{"gfx942", 0, 8, MORI_BFLOAT16, 512, 7168, 80, 0, 14, "e", 0},
};
#define NT (int)(sizeof(T) / sizeof(T[0]))

static mori_ep_config cfg(int W, int M, int H, int dtype, int kt)
{
	mori_ep_config c;
	mori_ep_config_init(&c, sizeof(c));
	c.rank = 0, c.world_size = W, c.max_num_inp_token_per_rank = M, c.hidden_dim = H, c.data_type = dtype;
	c.kernel_type = kt, c.num_experts_per_rank = 4, c.num_experts_per_token = 2;
	if (dtype == MORI_FLOAT32)
		c.max_token_type_size = 4;
	return c;
}
static int pick(const char *arch, int W, int M, int H, int dtype, int kt)
{
	mori_ep_config c = cfg(W, M, H, dtype, kt);
	return ep_tune_pick(T, NT, arch, &c);
}

START_TEST(nearest_shape)
{
	ck_assert_int_eq(pick("sm_90", 8, 128, 7168, MORI_BFLOAT16, 0), 0);  /* exact */
	ck_assert_int_eq(pick("sm_90", 8, 100, 7168, MORI_BFLOAT16, 0), 0);  /* ceiling 128 */
	ck_assert_int_eq(pick("sm_90", 8, 129, 7168, MORI_BFLOAT16, 0), 1);  /* ceiling 1024 */
	ck_assert_int_eq(pick("sm_90", 8, 4096, 7168, MORI_BFLOAT16, 0), 2);
	ck_assert_int_eq(pick("sm_90", 8, 9000, 7168, MORI_BFLOAT16, 0), 2); /* above all: the largest */
	ck_assert_int_eq(pick("sm_90", 8, 128, 2560, MORI_BFLOAT16, 0), 3);  /* nearest hidden 2048 */
	ck_assert_int_eq(pick("sm_90", 8, 128, 6000, MORI_BFLOAT16, 0), 0);  /* nearest hidden 7168 */
	ck_assert_int_eq(pick("sm_90", 8, 64, 7168, MORI_FLOAT8_E4M3, 0), 4); /* its dtype */
	ck_assert_int_eq(pick("sm_90", 8, 64, 7168, MORI_FLOAT32, 0), 0);   /* no fp32 rule: any dtype */
	ck_assert_int_eq(pick("sm_90", 3, 64, 7168, MORI_BFLOAT16, 0), 5);   /* nearest ep 2 */
	ck_assert_int_eq(pick("sm_90", 5, 64, 7168, MORI_BFLOAT16, 0), 5);   /* 2 and 8 are 3 away: the smaller */
	ck_assert_int_eq(pick("sm_90", 6, 64, 7168, MORI_BFLOAT16, 0), 0);   /* nearest ep 8 */
	ck_assert_int_eq(pick("sm_90", 8, 64, 7168, MORI_BFLOAT16, 1), 6);   /* low-latency has its own */
}
END_TEST

START_TEST(architecture_fallback)
{
	ck_assert_int_eq(pick("sm_90", 4, 512, 4096, MORI_BFLOAT16, 0), 5); /* sm_90's own, not sm_80's */
	ck_assert_int_eq(pick("sm_86", 4, 512, 4096, MORI_BFLOAT16, 0), 7); /* sm_8* family: sm_80 */
	ck_assert_int_eq(pick("sm_92", 8, 128, 7168, MORI_BFLOAT16, 0), 0); /* sm_9* family: sm_90 */
	ck_assert_int_eq(pick("gfx942", 8, 64, 7168, MORI_BFLOAT16, 0), 8);
	ck_assert_int_eq(pick("gfx950", 8, 64, 7168, MORI_BFLOAT16, 0), -1); /* gfx95* has none */
	ck_assert_int_eq(pick("sm_100", 8, 64, 7168, MORI_BFLOAT16, 0), -1);
	ck_assert_int_eq(pick("sm_80", 4, 512, 4096, MORI_BFLOAT16, 1), -1); /* no sm_8* low-latency rule */
	mori_ep_config c = cfg(8, 64, 7168, MORI_BFLOAT16, 0);
	char which[120];
	ep_tune_resolve(&c, "sm_100", 132, T, NT, which, sizeof(which)); /* the built-in default */
	ck_assert_int_eq(c.warp_num_per_block, EP_DEFAULT_WARPS);
	ck_assert_int_eq(c.block_num, EP_BLOCKS_PER_SM * 132);
	ck_assert_str_eq(which, "built-in default (no rule for sm_100 IntraNode)");
	c = cfg(8, 64, 7168, MORI_BFLOAT16, 0);
	ep_tune_resolve(&c, "sm_100", 1000, T, NT, NULL, 0);
	ck_assert_int_eq(c.block_num, EP_MAX_DEFAULT_BLOCKS); /* capped */
}
END_TEST

START_TEST(caller_override)
{
	char which[120];
	mori_ep_config c = cfg(8, 4096, 7168, MORI_BFLOAT16, 0);
	ep_tune_resolve(&c, "sm_90", 16, T, NT, which, sizeof(which)); /* rule 2: 3 blocks an SM */
	ck_assert_int_eq(c.warp_num_per_block, 16);
	ck_assert_int_eq(c.block_num, 48);
	ck_assert_str_eq(which, "a rule 2");
	c = cfg(8, 128, 7168, MORI_BFLOAT16, 0);
	c.block_num = 7; /* the caller's: kept; the zero one from the rule */
	ep_tune_resolve(&c, "sm_90", 16, T, NT, NULL, 0);
	ck_assert_int_eq(c.block_num, 7);
	ck_assert_int_eq(c.warp_num_per_block, 8);
	c = cfg(8, 128, 7168, MORI_BFLOAT16, 0);
	c.warp_num_per_block = 3;
	ep_tune_resolve(&c, "sm_90", 16, T, NT, NULL, 0);
	ck_assert_int_eq(c.warp_num_per_block, 3);
	ck_assert_int_eq(c.block_num, 64);
}
END_TEST

/* The compiled table (kernels/ep_tuning/ JSON files through tools/gen-ep-tuning). */
START_TEST(compiled_table)
{
	ck_assert_int_ge(ep_tune_nrules, 6);
	char which[120];
	for (int W = 2; W <= 8; W *= 2)
		for (int ll = 0; ll < 2; ll++) {
			mori_ep_config c = cfg(W, ll ? 128 : 4096, 7168, MORI_FLOAT8_E4M3, ll);
			ck_assert_int_eq(mori_ep_tuning_lookup(&c, "sm_90", 132 / W, which, sizeof(which)), MORI_OK);
			char want[80];
			snprintf(want, sizeof(want), "sm_90_h200_%s_ep%d.json rule 0", ll ? "IntraNodeLL" : "IntraNode", W);
			ck_assert_str_eq(which, want);
			ck_assert_int_eq(c.warp_num_per_block, 16); /* what mori-bench ep ran */
			ck_assert_int_eq(c.block_num, 4 * (132 / W));
			ck_assert_int_eq(mori_ep_config_check(&c, NULL, 0), MORI_OK);
		}
	mori_ep_config c = cfg(8, 4096, 7168, MORI_BFLOAT16, 0);
	ck_assert_int_eq(mori_ep_tuning_lookup(&c, "sm_120", 100, which, sizeof(which)), MORI_OK);
	ck_assert_ptr_nonnull(strstr(which, "built-in default"));
	ck_assert_int_eq(mori_ep_tuning_lookup(NULL, "sm_90", 1, NULL, 0), MORI_EINVAL);
	ck_assert_int_eq(mori_ep_tuning_lookup(&c, NULL, 1, NULL, 0), MORI_EINVAL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ep_tuning");
	TCase *t = tcase_create("lookup");
	tcase_add_test(t, nearest_shape);
	tcase_add_test(t, architecture_fallback);
	tcase_add_test(t, caller_override);
	tcase_add_test(t, compiled_table);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
