/* libmori edges the second tester found (defects 10, 12, 16), public API, one morid:
 *   - a transfer whose source and destination overlap (one region as both sides) was copied with
 *     memcpy in parallel chunks: 1024 of 2097152 words wrong at 8 MiB. Now memmove semantics
 *     (mori.h), checked word by word against the memmove'd pattern, both directions, small and
 *     split-sized;
 *   - mori_client_node(NULL) dereferenced NULL; mori_mem_publish_access with a NULL node entry
 *     crashed in protobuf-c's packer (now MORI_EINVAL, and nothing published);
 *   - mori_mem_open_remote(c, "no-port", ...) said MORI_ECONN (now MORI_EINVAL: not host:port);
 *     mori_mem_alloc(c, SIZE_MAX, HOST) said MORI_ESYS (now MORI_ENOMEM). */
#include <check.h>
#include <stdint.h>

#include "harness.h"

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

/* One region, words 0..n-1; a transfer of len bytes from byte src to byte dst inside it (read:
 * local dst <- remote src; write: remote dst <- local src); then every word equals what memmove
 * would have left. */
static void overlap_case(mori_client *c, int op, size_t len, size_t src, size_t dst)
{
	size_t total = len + (src > dst ? src : dst);
	mori_mem *m;
	OK(mori_mem_alloc(c, total, MORI_MEM_HOST, &m));
	uint32_t *p = mori_mem_ptr(m), *want = malloc(total);
	ck_assert_ptr_nonnull(want);
	for (size_t i = 0; i < total / 4; i++)
		p[i] = want[i] = (uint32_t)(i * 2654435761u);
	memmove((uint8_t *)want + dst, (uint8_t *)want + src, len); /* the reference */
	mori_xfer *x;
	if (op == MORI_OP_READ)
		OK(mori_read(m, dst, m, src, len, NULL, &x));
	else
		OK(mori_write(m, src, m, dst, len, NULL, &x));
	OK(mori_xfer_wait(x, 10000000));
	mori_xfer_free(x);
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < total / 4; i++)
		if (p[i] != want[i] && !bad++)
			first = i;
	ck_assert_msg(!bad, "%s of %zu bytes %zu -> %zu: %zu words differ from memmove's, first at %zu",
		      op == MORI_OP_READ ? "read" : "write", len, src, dst, bad, first);
	free(want);
	OK(mori_mem_deregister(m));
}

START_TEST(overlap_is_memmove)
{
	mori_client *c;
	OK(mori_client_open(D.dir, "overlap", &c));
	/* 8 MiB: the batch the pool splits across threads (the tester's case); 64 KiB: one thread */
	size_t lens[] = {8u << 20, 64u << 10};
	for (int op = 0; op < 2; op++)
		for (int i = 0; i < 2; i++) {
			overlap_case(c, op, lens[i], 0, 4096);  /* destination above the source */
			overlap_case(c, op, lens[i], 4096, 0);  /* below */
			overlap_case(c, op, lens[i], 0, 4);     /* by one word */
		}
	overlap_case(c, MORI_OP_READ, 4096, 0, 0);      /* onto itself */
	mori_client_close(c);
}
END_TEST

START_TEST(null_and_bad_arguments)
{
	ck_assert_ptr_null(mori_client_node(NULL));
	mori_client *c;
	OK(mori_client_open(D.dir, "edges", &c));
	ck_assert_ptr_nonnull(mori_client_node(c));
	mori_mem *m, *r = NULL;
	OK(mori_mem_alloc(c, 4096, MORI_MEM_HOST, &m));
	const char *nodes[2] = {"127.0.0.1:7100", NULL};
	mori_access a = {.nodes = nodes, .n_nodes = 2};
	ck_assert_int_eq(mori_mem_publish_access(m, "edges/kv", &a), MORI_EINVAL);
	ck_assert_msg(strstr(mori_client_last_error(c), "node 1 is NULL"), "%s", mori_client_last_error(c));
	/* nothing was published: the name does not open */
	ck_assert_int_eq(mori_mem_open_remote(c, NULL, "edges/kv", &r), MORI_EUNREACH);
	a.n_nodes = 1;
	OK(mori_mem_publish_access(m, "edges/kv", &a));
	const char *bad[] = {"no-port", "host:", ":7100", "host:0", "host:65536", "host:-1", "host:12x"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(mori_mem_open_remote(c, bad[i], "edges/kv", &r) == MORI_EINVAL, "node '%s'", bad[i]);
		ck_assert_msg(strstr(mori_client_last_error(c), "not host:port"), "%s: %s", bad[i],
			      mori_client_last_error(c));
		ck_assert_ptr_null(r);
	}
	mori_mem *big = NULL;
	ck_assert_int_eq(mori_mem_alloc(c, SIZE_MAX, MORI_MEM_HOST, &big), MORI_ENOMEM);
	ck_assert_int_eq(mori_mem_alloc(c, (size_t)INT64_MAX + 1, MORI_MEM_HOST, &big), MORI_ENOMEM);
	ck_assert_ptr_null(big);
	OK(mori_mem_deregister(m));
	mori_client_close(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lib_edges");
	TCase *t = tcase_create("lib_edges");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, overlap_is_memmove);
	tcase_add_test(t, null_and_bad_arguments);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
