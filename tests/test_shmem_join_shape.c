/* MORI-SHMEM joins whose world sizes disagree (found by helper "tester"): a PE that joins a
 * forming group with a larger world size and a rank beyond the group's world (PE 0 joins "shape"
 * as 0 of 2, then PE 63 joins as 63 of 64) must be refused on both PEs with MORI_EINVAL naming
 * the world sizes, and morid must survive. daemon/group_root.c's root_join indexed the forming
 * group's rank table with the newcomer's rank before comparing world sizes (a heap read past the
 * table: AddressSanitizer aborts morid there, make check-asan). Also a smaller-rank variant and a
 * fresh group of the same name afterwards. One morid, PEs as forked processes with clients of
 * their own. */
#include <check.h>
#include <sys/wait.h>

#include "harness.h"
#include "ctl_harness.h"
#include "mori_shmem.h"
#include "wire.h"

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	int st = daemon_stop(&D);
	daemon_cleanup(&D);
	ck_assert_msg(st == 0, "morid did not stop cleanly (exit %d): see its log for a sanitizer report", st);
}

/* Join name as rank of world; the join's code. */
static int join(const char *name, int rank, int world, int64_t timeout_us, char *msg, size_t cap)
{
	mori_client *c;
	int rc = mori_client_open(D.dir, "shape", &c);
	if (rc)
		return rc;
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 1u << 20;
	o.timeout_us = timeout_us;
	mori_group *g = NULL;
	rc = mori_shmem_init(c, name, rank, world, &o, &g);
	snprintf(msg, cap, "%s", mori_client_last_error(c));
	if (g)
		mori_shmem_finalize(g);
	mori_client_close(c);
	return rc;
}

/* PE `first` of `w1` joins (in a child) and then PE `second` of `w2` (here). */
static void mismatch(const char *name, int first, int w1, int second, int w2)
{
	pid_t child = fork();
	if (child == 0) {
		char m[512];
		int rc = join(name, first, w1, 5000000, m, sizeof(m));
		_exit(rc == MORI_EINVAL && strstr(m, "world size") ? 0 : 1);
	}
	usleep(300000); /* the first join is at the root */
	char msg[512];
	int rc = join(name, second, w2, 5000000, msg, sizeof(msg));
	int st;
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	ck_assert_msg(rc == MORI_EINVAL && strstr(msg, "world size"), "PE %d of %d: %s (%s)", second, w2, mori_strerror(rc),
		      msg);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "PE %d of %d was not refused naming the world sizes",
		      first, w1);
	Mori__Reply *rep = ctl_status(D.dir); /* fails the test when morid no longer answers */
	mori__reply__free_unpacked(rep, NULL);
}

START_TEST(larger_world_later)
{
	mismatch("shape", 0, 2, 63, 64);
	mismatch("shape2", 1, 2, 1023, 1024);
}
END_TEST

START_TEST(smaller_world_later)
{
	mismatch("shape3", 3, 4, 1, 2);
	/* the name is free again: a group of the right shape forms */
	char msg[512];
	ck_assert_int_eq(join("shape3", 0, 1, 5000000, msg, sizeof(msg)), MORI_OK);
}
END_TEST

/* A join whose root daemon cannot be reached ends by its deadline (2 s here), not at the peer
 * request path's own 5 s (found by helper "tester": ECONN after 5.0 s for a 3 s deadline). */
START_TEST(unreachable_root_within_deadline)
{
	struct test_daemon L;
	char listen[64];
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", free_port());
	const char *extra[] = {"--listen", listen, NULL};
	ck_assert_int_eq(daemon_start(&L, extra), 0);
	mori_client *c;
	ck_assert_int_eq(mori_client_open(L.dir, "shape", &c), MORI_OK);
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 1u << 20;
	o.timeout_us = 2000000;
	o.root = "127.0.0.1:1"; /* nobody listens there */
	mori_group *g = NULL;
	uint64_t t0 = mori_now_us();
	int rc = mori_shmem_init(c, "noroot", 1, 2, &o, &g);
	uint64_t dt = mori_now_us() - t0;
	char msg[512];
	snprintf(msg, sizeof(msg), "%s", mori_client_last_error(c));
	mori_client_close(c);
	int st = daemon_stop(&L);
	daemon_cleanup(&L);
	ck_assert_msg(rc == MORI_ECONN || rc == MORI_ETIMEDOUT || rc == MORI_EUNREACH, "join: %s (%s)",
		      mori_strerror(rc), msg);
	ck_assert_msg(dt < 2900000, "the join with a 2 s deadline ended after %llu ms (%s)",
		      (unsigned long long)dt / 1000, msg);
	ck_assert_int_eq(st, 0);
}
END_TEST

/* client_max_groups (tester3's D9: one client's 1-PE groups took all of morid's descriptors,
 * then no client could join): with a cap of 3, a client's 4th join is MORI_EBUSY naming the
 * option, another client still joins, and a leave makes room again. */
static int join_one(mori_client *c, const char *name, mori_group **g)
{
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 1u << 20;
	o.timeout_us = 5000000;
	*g = NULL;
	return mori_shmem_init(c, name, 0, 1, &o, g);
}

START_TEST(client_group_cap)
{
	struct test_daemon L;
	const char *extra[] = {"--client-max-groups", "3", NULL};
	ck_assert_int_eq(daemon_start(&L, extra), 0);
	mori_client *c, *c2;
	mori_group *g[4], *o;
	char name[32];
	ck_assert_int_eq(mori_client_open(L.dir, "hog", &c), MORI_OK);
	ck_assert_int_eq(mori_client_open(L.dir, "other", &c2), MORI_OK);
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "cap%d", i);
		ck_assert_msg(join_one(c, name, &g[i]) == MORI_OK, "join %d: %s", i, mori_client_last_error(c));
	}
	int rc = join_one(c, "cap3", &g[3]);
	ck_assert_msg(rc == MORI_EBUSY && strstr(mori_client_last_error(c), "client_max_groups 3"), "4th join: %s (%s)",
		      mori_strerror(rc), mori_client_last_error(c));
	ck_assert_ptr_null(g[3]);
	ck_assert_msg(join_one(c2, "cap3", &o) == MORI_OK, "another client: %s", mori_client_last_error(c2));
	mori_shmem_finalize(g[1]);
	ck_assert_msg(join_one(c, "cap1", &g[1]) == MORI_OK, "after a leave: %s", mori_client_last_error(c));
	for (int i = 0; i < 3; i++)
		mori_shmem_finalize(g[i]);
	mori_shmem_finalize(o);
	mori_client_close(c2);
	mori_client_close(c);
	int st = daemon_stop(&L);
	daemon_cleanup(&L);
	ck_assert_int_eq(st, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shmem_join_shape");
	TCase *t = tcase_create("shmem_join_shape");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, larger_world_later);
	tcase_add_test(t, smaller_world_later);
	tcase_add_test(t, unreachable_root_within_deadline);
	tcase_add_test(t, client_group_cap);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
