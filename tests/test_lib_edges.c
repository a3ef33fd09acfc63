/* libmori edges the second tester found (defects 10, 12, 16), public API, one morid:
 *   - a transfer whose source and destination overlap (one region as both sides) was copied with
 *     memcpy in parallel chunks: 1024 of 2097152 words wrong at 8 MiB. Now memmove semantics
 *     (mori.h), checked word by word against the memmove'd pattern, both directions, small and
 *     split-sized;
 *   - mori_client_node(NULL) dereferenced NULL; mori_mem_publish_access with a NULL node entry
 *     crashed in protobuf-c's packer (now MORI_EINVAL, and nothing published);
 *   - mori_mem_open_remote(c, "no-port", ...) said MORI_ECONN (now MORI_EINVAL: not host:port);
 *     mori_mem_alloc(c, SIZE_MAX, HOST) said MORI_ESYS (now MORI_ENOMEM);
 *   - (defect 6) a communicator used or destroyed after its group left read the freed group (ASan:
 *     heap-use-after-free in shmem_check); now its calls say MORI_ESTALE and its destroy frees it,
 *     also after the client closed (run this test under ASan for the memory half). */
#include <check.h>
#include <stdint.h>

#include "harness.h"
#include "host_port_cases.h"
#include "mori_coll.h"
#include "mori_shmem.h"

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
	if (op == MORI_XFER_READ)
		OK(mori_xfer_read(m, dst, m, src, len, NULL, &x));
	else
		OK(mori_xfer_write(m, src, m, dst, len, NULL, &x));
	OK(mori_xfer_wait(x, 10000000));
	mori_xfer_free(x);
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < total / 4; i++)
		if (p[i] != want[i] && !bad++)
			first = i;
	ck_assert_msg(!bad, "%s of %zu bytes %zu -> %zu: %zu words differ from memmove's, first at %zu",
		      op == MORI_XFER_READ ? "read" : "write", len, src, dst, bad, first);
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
	overlap_case(c, MORI_XFER_READ, 4096, 0, 0);      /* onto itself */
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
	mori_access a = {.size = sizeof(a), .nodes = nodes, .n_nodes = 2};
	ck_assert_int_eq(mori_mem_publish_access(m, "edges/kv", &a), MORI_EINVAL);
	ck_assert_msg(strstr(mori_client_last_error(c), "node 1 is NULL"), "%s", mori_client_last_error(c));
	/* nothing was published: the name does not open */
	ck_assert_int_eq(mori_mem_open_remote(c, NULL, "edges/kv", &r), MORI_EUNREACH);
	a.n_nodes = 1;
	OK(mori_mem_publish_access(m, "edges/kv", &a));
	/* tests/host_port_cases.h, morid's rule (test_config checks the daemon's side): a refused node
	 * is MORI_EINVAL here; an accepted one goes to the daemon, which has no peer listener */
	char longer[HOST_PORT_MAX + 2];
	for (size_t i = 0; i <= HOST_PORT_NCASES; i++) {
		const char *node = i < HOST_PORT_NCASES ? host_port_cases[i].addr : host_port_long(longer, HOST_PORT_MAX + 1);
		int refused = i == HOST_PORT_NCASES || !host_port_cases[i].host;
		if (!node[0])
			continue; /* "" is this node */
		int rc = mori_mem_open_remote(c, node, "edges/kv", &r);
		ck_assert_ptr_null(r);
		if (!refused) {
			ck_assert_msg(rc != MORI_EINVAL, "node '%s': %s", node, mori_client_last_error(c));
			continue;
		}
		ck_assert_msg(rc == MORI_EINVAL, "node '%s': %s", node, mori_strerror(rc));
		ck_assert_msg(strstr(mori_client_last_error(c), "not host:port"), "%s: %s", node,
			      mori_client_last_error(c));
	}
	mori_mem *big = NULL;
	ck_assert_int_eq(mori_mem_alloc(c, SIZE_MAX, MORI_MEM_HOST, &big), MORI_ENOMEM);
	ck_assert_int_eq(mori_mem_alloc(c, (size_t)INT64_MAX + 1, MORI_MEM_HOST, &big), MORI_ENOMEM);
	ck_assert_ptr_null(big);
	OK(mori_mem_deregister(m));
	mori_client_close(c);
}
END_TEST

START_TEST(comm_after_leave)
{
	mori_client *c;
	OK(mori_client_open(D.dir, "leave", &c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 8u << 20;
	o.timeout_us = 5000000;
	mori_group *g;
	OK(mori_shmem_init(c, "lib-edges-leave", 0, 1, &o, &g));
	mori_comm_opts co;
	mori_comm_opts_init(&co, sizeof(co));
	co.scratch_bytes = 1u << 20;
	mori_comm *k1, *k2, *k3;
	OK(mori_comm_create(g, &co, &k1));
	OK(mori_comm_create(g, &co, &k2));
	OK(mori_comm_create(g, &co, &k3));
	float x[4] = {1, 2, 3, 4}, y[4] = {0};
	OK(mori_allreduce(k1, x, y, 4, MORI_FLOAT32, MORI_SUM, NULL));
	ck_assert(y[3] == 4.0f);
	mori_comm_destroy(k3); /* destroyed before the leave: as ever */
	mori_shmem_finalize(g);
	y[3] = 0;
	ck_assert_int_eq(mori_allreduce(k1, x, y, 4, MORI_FLOAT32, MORI_SUM, NULL), MORI_ESTALE);
	ck_assert_msg(strstr(mori_client_last_error(c), "has left"), "%s", mori_client_last_error(c));
	ck_assert(y[3] == 0.0f);
	mori_status st;
	ck_assert_int_eq(mori_comm_status(k1, &st), MORI_ESTALE);
	ck_assert_int_eq(st.code, MORI_ESTALE);
	mori_window *w = NULL;
	ck_assert_int_eq(mori_comm_window_register(k1, x, sizeof(x), &w), MORI_ESTALE);
	ck_assert_ptr_null(w);
	mori_shmem_finalize(g); /* a second leave while communicators live: nothing */
	mori_comm_destroy(k1);
	mori_client_close(c);
	mori_comm_destroy(k2); /* after the client too; the last one frees the group's shell */
	/* the name is free again: a new group of it forms (the daemon saw the leave) */
	OK(mori_client_open(D.dir, "leave2", &c));
	OK(mori_shmem_init(c, "lib-edges-leave", 0, 1, &o, &g));
	mori_shmem_finalize(g);
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
	tcase_add_test(t, comm_after_leave);
	suite_add_tcase(s, t);
	return run_suite(s);
}
