/* MORI-SHMEM after fork() (found by helper "tester"): README's rule for clients ("in a child after
 * fork() every call on it fails with MORI_ESTALE and touches nothing of the parent's") must hold
 * for a group too. A child that inherited the parent's mori_group must not act as the parent's PE:
 * its collective calls (barrier_all, malloc) are refused with MORI_ESTALE, and its
 * mori_shmem_finalize (or the group's teardown in the child) does not tear the parent's group down.
 * The parent's group keeps working afterwards. Public API only; one morid, a 1-PE host group. */
#include <check.h>
#include <sys/wait.h>

#include "harness.h"
#include "pe_harness.h"
#include "mori_coll.h"
#include "mori_shmem.h"

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

/* In the child: the call must fail with MORI_ESTALE; else exit with `code`. */
#define STALE(call, code)                                                                              \
	do {                                                                                           \
		int _r = (call);                                                                       \
		if (_r != MORI_ESTALE) {                                                               \
			fprintf(stderr, "child: %s gave %s (%s), want MORI_ESTALE\n", #call, mori_strerror(_r), \
				mori_client_last_error(NULL));                                         \
			_exit(code);                                                                   \
		}                                                                                      \
	} while (0)

START_TEST(child_calls_refused)
{
	mori_client *c;
	OK(mori_client_open(D.dir, "parent", &c));
	mori_group *g = join_alone(c, "forkcalls", 4u << 20);
	pid_t child = fork();
	if (child == 0) {
		void *p;
		STALE(mori_shmem_barrier_all(g), 10);
		STALE(mori_shmem_malloc(g, 4096, 0, &p), 11);
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child's collective calls were not refused (exit %d)",
		      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	/* the parent's call sequence is its own: its first call after the join is call #2 (the
	 * join's closing barrier is #1) and works */
	void *p = NULL;
	OK(mori_shmem_malloc(g, 4096, 0, &p));
	OK(mori_shmem_barrier_all(g));
	mori_shmem_finalize(g);
	mori_client_close(c);
}
END_TEST

START_TEST(child_leave_is_local)
{
	mori_client *c;
	OK(mori_client_open(D.dir, "parent", &c));
	mori_group *g = join_alone(c, "forkleave", 4u << 20);
	pid_t child = fork();
	if (child == 0) {
		mori_shmem_finalize(g); /* the child's copy only */
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	mori_status sst;
	ck_assert_msg(mori_shmem_status(g, &sst) == MORI_OK, "the parent's group was aborted by the child's leave (PE %d)",
		      sst.pe);
	int rc = mori_shmem_barrier_all(g);
	ck_assert_msg(rc == MORI_OK, "parent's barrier after the child's leave: %s (%s)", mori_strerror(rc),
		      mori_client_last_error(c));
	mori_shmem_finalize(g);
	mori_client_close(c);
}
END_TEST

/* The rest of the group's surface in the child: puts, status, a communicator on the group (CCL)
 * and its destroy; the message names both pids. The parent's communicator works afterwards. */
START_TEST(child_rma_and_ccl_refused)
{
	mori_client *c;
	OK(mori_client_open(D.dir, "parent", &c));
	mori_group *g = join_alone(c, "forkccl", 4u << 20);
	mori_comm *k = NULL;
	OK(mori_comm_create(g, NULL, &k));
	float *a = NULL, *b = NULL;
	OK(mori_shmem_malloc(g, 64 * sizeof(float), 0, (void **)&a));
	OK(mori_shmem_malloc(g, 64 * sizeof(float), 0, (void **)&b));
	for (int i = 0; i < 64; i++)
		a[i] = (float)i;
	pid_t parent = getpid();
	pid_t child = fork();
	if (child == 0) {
		float x = 1;
		STALE(mori_shmem_putmem(g, b, &x, sizeof(x), 0), 20);
		STALE(mori_shmem_status(g, NULL), 21);
		STALE(mori_allreduce(k, a, b, 64, MORI_FLOAT32, MORI_SUM, NULL), 22);
		char want[64];
		snprintf(want, sizeof(want), "pid %d, used in pid %d", (int)parent, (int)getpid());
		if (!strstr(mori_client_last_error(NULL), want)) {
			fprintf(stderr, "child: message '%s' lacks '%s'\n", mori_client_last_error(NULL), want);
			_exit(23);
		}
		mori_comm *k2 = NULL;
		STALE(mori_comm_create(g, NULL, &k2), 24);
		mori_comm_destroy(k); /* the child's copy only */
		mori_shmem_finalize(g);
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child's RMA/CCL calls were not refused (exit %d)",
		      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	int rc = mori_allreduce(k, a, b, 64, MORI_FLOAT32, MORI_SUM, NULL);
	ck_assert_msg(rc == MORI_OK, "parent's allreduce after the child: %s (%s)", mori_strerror(rc),
		      mori_client_last_error(c));
	for (int i = 0; i < 64; i++)
		ck_assert_msg(b[i] == (float)i, "b[%d] = %g, want %d (one rank: the sum is the input)", i, b[i], i);
	mori_comm_destroy(k);
	mori_shmem_finalize(g);
	mori_client_close(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shmem_fork");
	TCase *t = tcase_create("shmem_fork");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, child_calls_refused);
	tcase_add_test(t, child_leave_is_local);
	tcase_add_test(t, child_rma_and_ccl_refused);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
