/* mori-kvreplay's logic without a daemon: model geometry, trace parsing and its errors, the
 * synthetic workload's statistics, the LRU block pool, content derivation and checking,
 * percentiles, and the scheduler's counts (dry run) on hand-computed traces and on the real one.
 * Linked with the tool's objects (tools/kvreplay/, all but main.o). */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/kvreplay/kvreplay.h"

#define REAL_TRACE "../shared/data/mooncake_conversation_trace.jsonl"

static struct geom geom_of(const char *model, uint64_t pool_blocks)
{
	struct geom g;
	char err[256];
	const struct preset *p = preset_find(model);
	ck_assert_ptr_nonnull(p);
	ck_assert_msg(geom_init(&g, p, 0, pool_blocks, 0, err, sizeof(err)) == 0, "%s", err);
	return g;
}

START_TEST(presets_geometry)
{
	/* bytes per page = page tokens x KV heads x head dim x 2 (bf16); per 512-token block:
	 * layers x (K and V, or one latent) x 512 / page tokens pages */
	struct geom g = geom_of("llama3-8b", 1);
	ck_assert_uint_eq(g.page_bytes, 32768);          /* 16 x 8 x 128 x 2 */
	ck_assert_uint_eq(g.pages_per_block, 32);
	ck_assert_uint_eq(g.descs_per_block, 2048);      /* 32 x 2 x 32 */
	ck_assert_uint_eq(g.bytes_per_block, 64u << 20); /* 128 KiB per token x 512 */
	g = geom_of("llama3-70b-tp8", 1);
	ck_assert_uint_eq(g.page_bytes, 4096);           /* 16 x 1 x 128 x 2 */
	ck_assert_uint_eq(g.descs_per_block, 5120);      /* 80 x 2 x 32 */
	ck_assert_uint_eq(g.bytes_per_block, 20u << 20);
	g = geom_of("qwen3-8b", 1);
	ck_assert_uint_eq(g.descs_per_block, 2304);      /* 36 x 2 x 32 */
	ck_assert_uint_eq(g.bytes_per_block, 72u << 20);
	g = geom_of("deepseek-v3-mla", 1);
	ck_assert_uint_eq(g.page_bytes, 73728);          /* 64 x 576 x 2 */
	ck_assert_uint_eq(g.pages_per_block, 8);
	ck_assert_uint_eq(g.descs_per_block, 488);       /* 61 x 1 x 8 */
	ck_assert_uint_eq(g.bytes_per_block, 35979264);  /* 61 x 576 x 2 x 512 */
	g = geom_of("tiny", 10);
	ck_assert_uint_eq(g.page_bytes, 2048);
	ck_assert_uint_eq(g.descs_per_block, 128);
	ck_assert_uint_eq(g.bytes_per_block, 262144);
	ck_assert_uint_eq(g.pool_bytes, 2621440);
	ck_assert_uint_eq(g.pool_descs, 1280);
	/* the last page of the last (layer, K/V) ends exactly at the pool's end */
	ck_assert_uint_eq(((uint64_t)desc_index(&g, 1, 1, g.pool_pages - 1) + 1) * g.page_bytes,
			  g.pool_bytes);
	ck_assert_uint_eq(desc_index(&g, 0, 1, 0), g.pool_pages);
}
END_TEST

START_TEST(presets_errors)
{
	struct geom g;
	char err[256];
	const struct preset *p = preset_find("llama3-8b");
	ck_assert_ptr_null(preset_find("llama4"));
	ck_assert_int_eq(geom_init(&g, p, 0, 0, 4096, err, sizeof(err)), 0);
	ck_assert_uint_eq(g.pool_blocks, 64); /* 4 GiB / 64 MiB */
	ck_assert_int_eq(geom_init(&g, p, 0, 0, 63, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "no whole block"), "%s", err);
	ck_assert_int_eq(geom_init(&g, p, 24, 4, 0, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "divide"), "%s", err);
	ck_assert_int_eq(geom_init(&g, p, 32, 4, 0, err, sizeof(err)), 0);
	ck_assert_uint_eq(g.pages_per_block, 16);
	ck_assert_uint_eq(g.bytes_per_block, 64u << 20); /* same bytes, fewer larger pages */
}
END_TEST

/* Parse text as a trace file. Returns trace_read's result; err gets its message. */
static int parse_text(struct trace *t, const char *text, size_t max, int skip, char *err,
		      size_t errlen)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	ck_assert_ptr_nonnull(f);
	memset(t, 0, sizeof(*t));
	int rc = trace_read(t, f, "t.jsonl", max, skip, err, errlen);
	fclose(f);
	return rc;
}

#define L1 "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
#define L2 "{\"timestamp\": 7, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [0]}\n"

START_TEST(trace_good)
{
	struct trace t;
	char err[512] = "";
	ck_assert_int_eq(parse_text(&t, L1 "\n   \n" L2, 0, 0, err, sizeof(err)), 0);
	ck_assert_uint_eq(t.n, 2);
	ck_assert_uint_eq(t.req[0].nh, 2);
	ck_assert_uint_eq(t.req[0].input_len, 600);
	ck_assert_uint_eq(t.req[1].ts_ms, 7);
	ck_assert_uint_eq(t.hash[t.req[0].h0 + 1], 1);
	ck_assert_uint_eq(t.hash[t.req[1].h0], 0);
	trace_free(&t);
	ck_assert_int_eq(parse_text(&t, L1 L2 L1, 2, 0, err, sizeof(err)), 0);
	ck_assert_uint_eq(t.n, 2); /* --requests stops reading */
	trace_free(&t);
}
END_TEST

static void expect_bad(const char *text, const char *where, const char *why)
{
	struct trace t;
	char err[512] = "";
	ck_assert_int_eq(parse_text(&t, text, 0, 0, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, where), "error \"%s\" does not name %s", err, where);
	ck_assert_msg(strstr(err, why), "error \"%s\" does not say %s", err, why);
	trace_free(&t);
}

START_TEST(trace_bad_lines)
{
	expect_bad(L1 L2 "{\"timestamp\": 1, \"input_length\": 5\n", "t.jsonl:3:", "malformed");
	expect_bad(L1 L2 "{\"timestamp\": 1, \"input_len", "t.jsonl:3:", "truncated");
	expect_bad(L1 "[1, 2]\n", "t.jsonl:2:", "not a JSON object");
	expect_bad("{\"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n", "t.jsonl:1:",
		   "timestamp");
	expect_bad("{\"timestamp\": -1, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n",
		   ":1:", "timestamp");
	expect_bad("{\"timestamp\": 1, \"input_length\": 5.5, \"output_length\": 1, \"hash_ids\": [1]}\n",
		   ":1:", "input_length");
	expect_bad(L2 "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": 3}\n",
		   ":2:", "hash_ids");
	expect_bad("{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [\"a\"]}\n",
		   ":1:", "hash_ids");
	expect_bad("{\"timestamp\": 1, \"input_length\": 1025, \"output_length\": 1, \"hash_ids\": [1, 2]}\n",
		   ":1:", "needs 3");
}
END_TEST

START_TEST(trace_skip_bad)
{
	struct trace t;
	char err[512] = "";
	ck_assert_int_eq(parse_text(&t, L1 "garbage\n" L2 "{\"timestamp\": 1,", 0, 1, err,
				    sizeof(err)),
			 0);
	ck_assert_uint_eq(t.n, 2);
	ck_assert_uint_eq(t.bad_lines, 2);
	ck_assert_uint_eq(t.nhash, 3); /* nothing of the bad lines was kept */
	trace_free(&t);
}
END_TEST

START_TEST(synthetic_statistics)
{
	struct trace t = {0};
	trace_synthetic(&t, 12031);
	ck_assert_uint_eq(t.n, 12031);
	ck_assert(t.synthetic);
	uint64_t *len = xcalloc(t.n, sizeof(uint64_t)), *ids = xcalloc(t.nhash, sizeof(uint64_t));
	for (size_t i = 0; i < t.n; i++) {
		len[i] = t.req[i].input_len;
		ck_assert_uint_eq(t.req[i].nh, (t.req[i].input_len + 511) / 512);
		ck_assert_uint_eq(t.hash[t.req[i].h0], 0); /* shared system prompt */
		if (i)
			ck_assert_uint_ge(t.req[i].ts_ms, t.req[i - 1].ts_ms);
	}
	qsort(len, t.n, sizeof(uint64_t), cmp_u64);
	uint64_t median = len[t.n / 2];
	memcpy(ids, t.hash, t.nhash * sizeof(uint64_t));
	qsort(ids, t.nhash, sizeof(uint64_t), cmp_u64);
	size_t uniq = 0;
	for (size_t i = 0; i < t.nhash; i++)
		uniq += i == 0 || ids[i] != ids[i - 1];
	double repeated = 1.0 - (double)uniq / (double)t.nhash;
	/* the real trace: median 6 909 tokens, 36.6% of block ids repeat, about an hour */
	ck_assert_msg(median > 6000 && median < 8000, "median %" PRIu64, median);
	fprintf(stderr, "synthetic: median %" PRIu64 " tokens, %.1f%% repeated, p99 %" PRIu64 "\n", median,
		100 * repeated, len[t.n * 99 / 100]);
	ck_assert_msg(repeated > 0.30 && repeated < 0.44, "repeated %.3f", repeated);
	ck_assert_msg(t.req[t.n - 1].ts_ms > 3000000 && t.req[t.n - 1].ts_ms < 4200000, "span %" PRIu64,
		      t.req[t.n - 1].ts_ms);
	free(len);
	free(ids);
	trace_free(&t);
}
END_TEST

START_TEST(pool_lru)
{
	struct pool p;
	pool_init(&p, 3);
	uint32_t a = pool_alloc(&p, 100), b = pool_alloc(&p, 200), c = pool_alloc(&p, 300);
	ck_assert(a != NIL && b != NIL && c != NIL && a != b && b != c && a != c);
	ck_assert_uint_eq(pool_alloc(&p, 400), NIL); /* all pinned */
	pool_unpin(&p, a, 1);
	pool_unpin(&p, b, 1);
	pool_unpin(&p, c, 1); /* LRU order: 100, 200, 300 */
	ck_assert_uint_eq(pool_lookup(&p, 100), a); /* now 200, 300, 100 */
	uint32_t d = pool_alloc(&p, 400);
	ck_assert_uint_eq(d, b); /* 200 was least recently used */
	ck_assert_uint_eq(p.evictions, 1);
	ck_assert_uint_eq(pool_lookup(&p, 200), NIL);
	ck_assert_uint_eq(pool_lookup(&p, 300), c); /* 100, 300 (400 pinned) */
	pool_unpin(&p, d, 0); /* a failed transfer: 400 is dropped, its slot freed */
	ck_assert_uint_eq(pool_lookup(&p, 400), NIL);
	ck_assert_uint_eq(pool_alloc(&p, 500), d); /* the free slot before any eviction */
	ck_assert_uint_eq(p.evictions, 1);
	ck_assert_uint_eq(pool_alloc(&p, 600), a); /* then 100 */
	ck_assert_uint_eq(p.evictions, 2);
	pool_free(&p);
}
END_TEST

START_TEST(pool_map_churn)
{
	/* backward-shift deletion under churn, against a plain array */
	enum { N = 64, KEYS = 4096 };
	struct pool p;
	uint32_t ref[KEYS];
	memset(ref, 0xff, sizeof(ref));
	pool_init(&p, N);
	uint64_t s = 7;
	for (int i = 0; i < 50000; i++) {
		s = mix64(s + i);
		uint64_t k = s % KEYS;
		uint32_t got = pool_lookup(&p, k);
		ck_assert_uint_eq(got, ref[k]);
		if (got != NIL)
			continue;
		uint32_t slot = pool_alloc(&p, k);
		ck_assert_uint_ne(slot, NIL);
		for (int j = 0; j < KEYS; j++)
			if (ref[j] == slot)
				ref[j] = NIL; /* evicted */
		ref[k] = slot;
		pool_unpin(&p, slot, (s >> 40) % 7 != 0); /* sometimes drop it */
		if ((s >> 40) % 7 == 0)
			ref[k] = NIL;
	}
	for (uint64_t k = 0; k < KEYS; k++)
		ck_assert_uint_eq(pool_peek(&p, k), ref[k]);
	pool_free(&p);
}
END_TEST

START_TEST(content_derivation)
{
	struct geom g = geom_of("tiny", 4);
	uint8_t *pool = xcalloc(1, g.pool_bytes);
	block_pages(&g, pool, 12345, 2, 0);
	ck_assert_uint_eq(block_pages(&g, pool, 12345, 2, 1), 0);
	/* another hash, another slot: every page differs */
	ck_assert_uint_eq(block_pages(&g, pool, 12346, 2, 1), g.descs_per_block);
	ck_assert_uint_eq(block_pages(&g, pool, 12345, 1, 1), g.descs_per_block);
	/* one flipped byte in one page */
	pool[(uint64_t)desc_index(&g, 1, 0, 2 * g.pages_per_block + 5) * g.page_bytes + 77] ^= 1;
	ck_assert_uint_eq(block_pages(&g, pool, 12345, 2, 1), 1);
	/* (layer, K/V, page) all enter the derivation */
	ck_assert_uint_ne(page_seed(1, 0, 0, 0), page_seed(1, 1, 0, 0));
	ck_assert_uint_ne(page_seed(1, 0, 0, 0), page_seed(1, 0, 1, 0));
	ck_assert_uint_ne(page_seed(1, 0, 0, 0), page_seed(1, 0, 0, 1));
	ck_assert_uint_ne(page_seed(1, 0, 0, 0), page_seed(2, 0, 0, 0));
	/* a page copied to the neighbouring page of the same block is caught */
	block_pages(&g, pool, 9, 0, 0);
	memcpy(pool + g.page_bytes, pool, g.page_bytes);
	ck_assert_uint_eq(block_pages(&g, pool, 9, 0, 1), 1);
	free(pool);
}
END_TEST

START_TEST(percentiles)
{
	uint64_t v[100];
	for (int i = 0; i < 100; i++)
		v[i] = (uint64_t)i + 1;
	ck_assert_uint_eq(percentile(v, 100, 50), 50);
	ck_assert_uint_eq(percentile(v, 100, 90), 90);
	ck_assert_uint_eq(percentile(v, 100, 99), 99);
	ck_assert_uint_eq(percentile(v, 100, 100), 100);
	ck_assert_uint_eq(percentile(v, 1, 99), 1);
	ck_assert_uint_eq(percentile(v, 0, 50), 0);
	uint64_t w[3] = {30, 10, 20};
	qsort(w, 3, sizeof(uint64_t), cmp_u64);
	ck_assert_uint_eq(percentile(w, 3, 50), 20);
}
END_TEST

/* Dry-run the scheduler on a parsed trace. */
static void dry_run(const char *text, const char *model, uint32_t pool_blocks, int window,
		    struct results *res)
{
	struct trace t;
	char err[512] = "";
	ck_assert_msg(parse_text(&t, text, 0, 0, err, sizeof(err)) == 0, "%s", err);
	struct opts o = {.window = window, .afap = 1, .dry_run = 1};
	struct geom g = geom_of(model, pool_blocks);
	struct sched sc;
	memset(res, 0, sizeof(*res));
	sched_init(&sc, &o, &g, &t, res);
	schedule(&sc);
	ck_assert(!sc.fatal);
	sched_fini(&sc);
	trace_free(&t);
}

#define R(ids, n) "{\"timestamp\": 0, \"input_length\": " #n ", \"output_length\": 1, \"hash_ids\": " ids "}\n"

START_TEST(schedule_small_pool)
{
	/* pool of 3 blocks, one transfer in flight; worked by hand:
	 * [1,2] moves 2                         LRU 1 2
	 * [1,3] 1 cached, 3 moves               LRU 2 1 3 (3 was pinned until its transfer ended)
	 * [4]   evicts 2                        LRU 1 3 4
	 * [2,1] 2 evicts 1, then 1 evicts 3     LRU 4 2 1
	 * [4,1,2] all cached */
	struct results r;
	dry_run(R("[1, 2]", 1000) R("[1, 3]", 1000) R("[4]", 10) R("[2, 1]", 1000)
			R("[4, 1, 2]", 1500),
		"tiny", 3, 1, &r);
	ck_assert_uint_eq(r.requests, 5);
	ck_assert_uint_eq(r.blocks_total, 10);
	ck_assert_uint_eq(r.blocks_moved, 6);
	ck_assert_uint_eq(r.blocks_skipped, 4);
	ck_assert_uint_eq(r.evictions, 3);
	ck_assert_uint_eq(r.requests_cached, 1);
	ck_assert_uint_eq(r.descriptors, 6 * 128);
}
END_TEST

START_TEST(schedule_request_larger_than_pool)
{
	/* 4 blocks through a 2-block pool: two transfers; the second evicts the first's blocks */
	struct results r;
	dry_run(R("[10, 11, 12, 13]", 2000), "tiny", 2, 2, &r);
	ck_assert_uint_eq(r.blocks_moved, 4);
	ck_assert_uint_eq(r.jobs, 2);
	ck_assert_uint_eq(r.evictions, 2);
	/* a repeated id inside one request is held after its first occurrence */
	dry_run(R("[5, 6, 5]", 1500), "tiny", 8, 2, &r);
	ck_assert_uint_eq(r.blocks_moved, 2);
	ck_assert_uint_eq(r.blocks_skipped, 1);
}
END_TEST

START_TEST(schedule_real_trace)
{
	FILE *f = fopen(REAL_TRACE, "r");
	if (!f) {
		fprintf(stderr, "schedule_real_trace: skipped: %s absent\n", REAL_TRACE);
		return;
	}
	struct trace t = {0};
	char err[512];
	ck_assert_msg(trace_read(&t, f, REAL_TRACE, 200, 0, err, sizeof(err)) == 0, "%s", err);
	fclose(f);
	ck_assert_uint_eq(t.n, 200);
	/* independent count: distinct ids among the first 200 requests */
	uint64_t *ids = xcalloc(t.nhash, sizeof(uint64_t));
	memcpy(ids, t.hash, t.nhash * sizeof(uint64_t));
	qsort(ids, t.nhash, sizeof(uint64_t), cmp_u64);
	size_t uniq = 0;
	for (size_t i = 0; i < t.nhash; i++)
		uniq += i == 0 || ids[i] != ids[i - 1];
	free(ids);
	struct opts o = {.window = 2, .afap = 1, .dry_run = 1};
	struct geom g = geom_of("tiny", uniq);
	struct results r = {0};
	struct sched sc;
	sched_init(&sc, &o, &g, &t, &r);
	schedule(&sc);
	ck_assert_uint_eq(r.evictions, 0);
	ck_assert_uint_eq(r.blocks_moved, uniq);
	ck_assert_uint_eq(r.blocks_skipped, t.nhash - uniq);
	ck_assert_uint_eq(r.blocks_total, t.nhash);
	sched_fini(&sc);
	/* one block less: something must be evicted, and more moved */
	memset(&r, 0, sizeof(r));
	g = geom_of("tiny", uniq - 1);
	sched_init(&sc, &o, &g, &t, &r);
	schedule(&sc);
	ck_assert_uint_ge(r.evictions, 1);
	ck_assert_uint_ge(r.blocks_moved, uniq);
	ck_assert_uint_eq(r.blocks_moved + r.blocks_skipped, t.nhash);
	sched_fini(&sc);
	trace_free(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kvreplay");
	TCase *tc = tcase_create("logic");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, presets_geometry);
	tcase_add_test(tc, presets_errors);
	tcase_add_test(tc, trace_good);
	tcase_add_test(tc, trace_bad_lines);
	tcase_add_test(tc, trace_skip_bad);
	tcase_add_test(tc, synthetic_statistics);
	tcase_add_test(tc, pool_lru);
	tcase_add_test(tc, pool_map_churn);
	tcase_add_test(tc, content_derivation);
	tcase_add_test(tc, percentiles);
	tcase_add_test(tc, schedule_small_pool);
	tcase_add_test(tc, schedule_request_larger_than_pool);
	tcase_add_test(tc, schedule_real_trace);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
