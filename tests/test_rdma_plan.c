/* RDMA plans below the hardware line: work-request id encoding, descriptor merging and
 * chunking (checked against a byte-by-byte model), completion status -> MORI code mapping. */
#include <check.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#include "../daemon/transport/rdma/rdma_core.h"

START_TEST(wrid_roundtrip)
{
	srandom(7);
	for (int i = 0; i < 100000; i++) {
		uint32_t x = (uint32_t)random() ^ ((uint32_t)random() << 16);
		uint32_t ch = (uint32_t)random();
		uint8_t g = (uint8_t)random();
		unsigned k = (unsigned)random() % 16;
		uint64_t w = wrid_make(x, ch, g, k);
		ck_assert_uint_eq(wrid_xfer(w), x);
		ck_assert_uint_eq(wrid_chunk(w), ch % (1u << 20));
		ck_assert_uint_eq(wrid_gen(w), g);
		ck_assert_uint_eq(wrid_kind(w), k);
	}
	/* the fields do not bleed into each other at their extremes */
	uint64_t w = wrid_make(0xffffffffu, 0xfffffu, 0xff, 0xf);
	ck_assert_uint_eq(w, UINT64_MAX);
	w = wrid_make(0, 0, 0, WRK_RECV);
	ck_assert_uint_eq(w, 3);
	ck_assert_uint_eq(wrid_make(1, 0, 0, 0), 1ull << 32);
	ck_assert_uint_eq(wrid_make(0, 1, 0, 0), 1ull << 12);
	ck_assert_uint_eq(wrid_make(0, 0, 1, 0), 1ull << 4);
	ck_assert_uint_eq(wrid_chunk(wrid_make(5, 1u << 20, 0, 1)), 0); /* wraps, documented */
}
END_TEST

static uint32_t collect(const mori_desc *d, uint32_t n, uint64_t max, mori_desc *out, uint32_t cap)
{
	struct chunk_cursor c = {0, 0};
	uint64_t lo, ro, len;
	uint32_t k = 0;
	while ((len = chunk_next(d, n, &c, max, &lo, &ro))) {
		ck_assert_uint_lt(k, cap);
		out[k++] = (mori_desc){lo, ro, len};
	}
	return k;
}

START_TEST(chunk_cases)
{
	mori_desc out[64];
	/* one 10 MiB descriptor at 1 MiB: ten chunks, offsets advancing on both sides */
	mori_desc one = {100, 7000, 10u << 20};
	ck_assert_uint_eq(collect(&one, 1, 1u << 20, out, 64), 10);
	for (int i = 0; i < 10; i++) {
		ck_assert_uint_eq(out[i].local_offset, 100 + ((uint64_t)i << 20));
		ck_assert_uint_eq(out[i].remote_offset, 7000 + ((uint64_t)i << 20));
		ck_assert_uint_eq(out[i].length, 1u << 20);
	}
	/* contiguous on both sides: merged */
	mori_desc two[] = {{0, 0, 4096}, {4096, 4096, 4096}, {8192, 8192, 100}};
	ck_assert_uint_eq(collect(two, 3, 1u << 20, out, 64), 1);
	ck_assert_uint_eq(out[0].length, 8292);
	/* contiguous locally only: not merged */
	mori_desc loc[] = {{0, 0, 4096}, {4096, 8192, 4096}};
	ck_assert_uint_eq(collect(loc, 2, 1u << 20, out, 64), 2);
	/* contiguous remotely only: not merged */
	mori_desc rem[] = {{0, 0, 4096}, {8192, 4096, 4096}};
	ck_assert_uint_eq(collect(rem, 2, 1u << 20, out, 64), 2);
	/* a zero-length descriptor inside a run does not break it */
	mori_desc z[] = {{0, 0, 10}, {999, 999, 0}, {10, 10, 10}};
	ck_assert_uint_eq(collect(z, 3, 100, out, 64), 1);
	ck_assert_uint_eq(out[0].length, 20);
	/* all empty */
	mori_desc e[] = {{0, 0, 0}, {5, 5, 0}};
	ck_assert_uint_eq(collect(e, 2, 100, out, 64), 0);
	ck_assert_uint_eq(rdma_count_chunks(e, 2, 100), 0);
	/* a merged run is cut at max, the cut lands inside the second descriptor */
	mori_desc cut[] = {{0, 0, 60}, {60, 60, 60}};
	ck_assert_uint_eq(collect(cut, 2, 100, out, 64), 2);
	ck_assert_uint_eq(out[0].length, 100);
	ck_assert_uint_eq(out[1].local_offset, 100);
	ck_assert_uint_eq(out[1].length, 20);
	/* reversed order is not contiguous (we merge in submission order only) */
	mori_desc rev[] = {{4096, 4096, 4096}, {0, 0, 4096}};
	ck_assert_uint_eq(collect(rev, 2, 1u << 20, out, 64), 2);
	/* one byte at a time */
	mori_desc b1 = {3, 5, 7};
	ck_assert_uint_eq(collect(&b1, 1, 1, out, 64), 7);
}
END_TEST

/* Against a model: the union of chunks maps exactly the bytes the descriptors map, no chunk is
 * over max, and a chunk shorter than max is never followed by one that continues it (merging
 * is maximal). Chunk counts equal an independent count: merge runs first, then divide. */
START_TEST(chunk_model)
{
	srandom(11);
	enum { SPACE = 1 << 16 };
	static int64_t want[SPACE], got[SPACE];
	static mori_desc d[400], out[20000];
	for (int iter = 0; iter < 300; iter++) {
		uint32_t n = 1 + (uint32_t)random() % 300;
		uint64_t lo = (uint64_t)random() % 64, ro = (uint64_t)random() % 64;
		/* non-overlapping locally (a cursor over the local space), arbitrary remote */
		uint32_t k = 0;
		for (uint32_t i = 0; i < n; i++) {
			uint64_t len = random() % 8 == 0 ? 0 : 1 + (uint64_t)random() % 200;
			if (lo + len >= SPACE)
				break;
			int contiguous = random() % 3 != 0;
			if (!contiguous) {
				lo += (uint64_t)random() % 50;
				ro = (uint64_t)random() % (SPACE / 2);
			}
			d[k++] = (mori_desc){lo, ro, len};
			lo += len;
			ro += len;
		}
		n = k;
		uint64_t max = 1 + (uint64_t)random() % 512;
		for (int i = 0; i < SPACE; i++)
			want[i] = got[i] = -1;
		for (uint32_t i = 0; i < n; i++)
			for (uint64_t b = 0; b < d[i].length; b++)
				want[d[i].local_offset + b] = (int64_t)(d[i].remote_offset + b);
		uint32_t m = collect(d, n, max, out, 20000);
		for (uint32_t i = 0; i < m; i++) {
			ck_assert_uint_ge(out[i].length, 1);
			ck_assert_uint_le(out[i].length, max);
			for (uint64_t b = 0; b < out[i].length; b++) {
				ck_assert_int_eq(got[out[i].local_offset + b], -1); /* no byte twice */
				got[out[i].local_offset + b] = (int64_t)(out[i].remote_offset + b);
			}
			if (i + 1 < m && out[i].length < max)
				ck_assert(!(out[i + 1].local_offset == out[i].local_offset + out[i].length &&
					    out[i + 1].remote_offset == out[i].remote_offset + out[i].length));
		}
		ck_assert(memcmp(want, got, sizeof(want)) == 0);
		/* independent count: runs of non-empty descriptors contiguous on both sides */
		uint64_t expect = 0, run = 0, rl = 0, rr = 0;
		for (uint32_t i = 0; i < n; i++) {
			if (!d[i].length)
				continue;
			if (run && d[i].local_offset == rl && d[i].remote_offset == rr) {
				run += d[i].length;
			} else {
				expect += (run + max - 1) / max;
				run = d[i].length;
			}
			rl = d[i].local_offset + d[i].length;
			rr = d[i].remote_offset + d[i].length;
		}
		expect += (run + max - 1) / max;
		ck_assert_uint_eq(m, expect);
		ck_assert_uint_eq(rdma_count_chunks(d, n, max), expect);
	}
}
END_TEST

START_TEST(wc_mapping)
{
	const char *m;
	ck_assert_int_eq(rdma_wc_error(IBV_WC_SUCCESS, &m), MORI_OK);
	ck_assert_int_eq(rdma_wc_error(IBV_WC_REM_ACCESS_ERR, &m), MORI_EPERM);
	ck_assert_str_eq(m, "remote access error");
	ck_assert_int_eq(rdma_wc_error(IBV_WC_RETRY_EXC_ERR, &m), MORI_EIO);
	ck_assert_str_eq(m, "retry exceeded");
	ck_assert_int_eq(rdma_wc_error(IBV_WC_RNR_RETRY_EXC_ERR, &m), MORI_EIO);
	ck_assert_str_eq(m, "receiver not ready, retry exceeded");
	ck_assert_int_eq(rdma_wc_error(IBV_WC_LOC_PROT_ERR, &m), MORI_EPERM);
	ck_assert_str_eq(m, "local protection error");
	ck_assert_int_eq(rdma_wc_error(IBV_WC_LOC_LEN_ERR, &m), MORI_EINVAL);
	ck_assert_int_eq(rdma_wc_error(IBV_WC_WR_FLUSH_ERR, &m), MORI_EIO);
	ck_assert_str_eq(m, "flushed: QP in error");
	ck_assert_int_eq(rdma_wc_error(IBV_WC_REM_INV_REQ_ERR, &m), MORI_EIO);
	ck_assert_str_eq(m, "remote invalid request");
	ck_assert_int_eq(rdma_wc_error(IBV_WC_RESP_TIMEOUT_ERR, &m), MORI_ETIMEDOUT);
	ck_assert_int_eq(rdma_wc_error(IBV_WC_FATAL_ERR, &m), MORI_EIO);
	ck_assert_str_eq(m, "fatal device error");
	ck_assert_int_eq(rdma_wc_error(12345, &m), MORI_EIO);
	ck_assert_str_eq(m, "unknown completion status");
	ck_assert(rdma_wc_transient(IBV_WC_WR_FLUSH_ERR));
	ck_assert(rdma_wc_transient(IBV_WC_RETRY_EXC_ERR));
	ck_assert(rdma_wc_transient(IBV_WC_RNR_RETRY_EXC_ERR));
	ck_assert(rdma_wc_transient(IBV_WC_REM_INV_REQ_ERR)); /* QP state, not the request */
	ck_assert(!rdma_wc_transient(IBV_WC_REM_ACCESS_ERR));
	ck_assert(!rdma_wc_transient(IBV_WC_LOC_PROT_ERR));
	ck_assert(!rdma_wc_transient(IBV_WC_LOC_LEN_ERR));
	ck_assert(!rdma_wc_transient(IBV_WC_SUCCESS));
	/* every status has a message and a code that is not OK */
	for (int s = 1; s <= IBV_WC_TM_RNDV_INCOMPLETE + 2; s++) {
		m = NULL;
		ck_assert_int_lt(rdma_wc_error(s, &m), 0);
		ck_assert_ptr_nonnull(m);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rdma_plan");
	TCase *t = tcase_create("plan");
	tcase_set_timeout(t, 60);
	tcase_add_test(t, wrid_roundtrip);
	tcase_add_test(t, chunk_cases);
	tcase_add_test(t, chunk_model);
	tcase_add_test(t, wc_mapping);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
