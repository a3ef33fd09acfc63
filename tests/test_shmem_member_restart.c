/* A group must not outlive a member daemon that was SIGKILLed and restarted: PE 0 on the root's
 * node A, PE 1 on node B; B's morid is killed and started again (a new epoch, no groups), PE 1's
 * process goes, and PE 0's next call fails (the group aborts). Once PE 0 has left too, nobody is
 * in the group: the root must forget it (moractl groups lists none) and a new group of the same
 * name must form, instead of the root holding "aborted, 1 PE member" and refusing the name with
 * MORI_EEXIST until it restarts. Two morids on loopback. */
#include <check.h>

#include "harness.h"
#include "ctl_harness.h"
#include "node_harness.h"
#include "mori_shmem.h"

#define NAME "member-restart"

static struct test_node A, B;

static int join(const char *dir, int rank, mori_client **c, mori_group **g)
{
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 1 << 20;
	o.root = A.addr;
	o.timeout_us = 3000000;
	int rc = mori_client_open(dir, "pe", c);
	return rc ? rc : mori_shmem_init(*c, NAME, rank, 2, &o, g);
}

/* PE 1 on B in a child: joins (and with barrier, calls a barrier), writes its result to *res, then waits for a byte on *go (or its
 * end) and exits without leaving (its daemon may be gone). */
static pid_t pe1_start(int *res, int *go, int barrier)
{
	int up[2], down[2];
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(60);
		close(up[0]);
		close(down[1]); /* its read ends when the test closes *go */
		mori_client *c;
		mori_group *g;
		int r = join(B.dir, 1, &c, &g);
		if (r == MORI_OK && barrier)
			r = mori_shmem_barrier_all(g);
		char rc = (char)-r;
		(void)!write(up[1], &rc, 1);
		char b;
		(void)!read(down[0], &b, 1);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	*res = up[0];
	*go = down[1];
	return pid;
}

static void pe1_joined(int res)
{
	char rc = 1;
	ck_assert_int_eq(read(res, &rc, 1), 1);
	close(res);
	ck_assert_msg(rc == 0, "PE 1's join: %s", mori_strerror(-rc));
}

START_TEST(group_goes_with_restarted_member)
{
	node_pair_init(&A, &B, "mrestart", 7310, 0);
	ck_assert_int_eq(node_pair_start(&A, &B, NULL), 0);
	mori_client *c;
	mori_group *g;
	int res, go, st;
	pid_t k1 = pe1_start(&res, &go, 0);
	int rc = join(A.dir, 0, &c, &g);
	ck_assert_msg(rc == MORI_OK, "PE 0's join: %s (%s)", mori_strerror(rc), mori_client_last_error(c));
	pe1_joined(res);
	ck_assert_int_eq(ctl_group_count(A.dir), 1);

	/* B's morid dies without a word and comes back on the same port with a new epoch */
	node_kill9(&B);
	kill(k1, SIGKILL);
	waitpid(k1, &st, 0);
	close(go);
	ck_assert_int_eq(node_start(&B, NULL), 0);

	/* PE 0's next call fails (PE 1 never comes); then it leaves */
	rc = mori_shmem_barrier_all(g);
	ck_assert_msg(rc == MORI_ETIMEDOUT || rc == MORI_EPEERDEAD, "barrier without PE 1: %s", mori_strerror(rc));
	mori_shmem_finalize(g);
	mori_client_close(c);

	/* nobody is left in the group: the root forgets it */
	ck_assert_msg(WAIT_UNTIL(ctl_group_count(A.dir) == 0, 20000),
		      "the root still lists the group after every PE ended (its member daemon restarted)");
	/* and the name forms again, with PE 1 on the restarted B */
	pid_t k2 = pe1_start(&res, &go, 1);
	rc = join(A.dir, 0, &c, &g);
	ck_assert_msg(rc == MORI_OK, "the name again: %s (%s)", mori_strerror(rc), mori_client_last_error(c));
	ck_assert_int_eq(mori_shmem_barrier_all(g), MORI_OK);
	pe1_joined(res);
	close(go);
	ck_assert_int_eq(waitpid(k2, &st, 0), k2);
	mori_shmem_finalize(g);
	mori_client_close(c);
	ck_assert_int_eq(node_pair_stop(&A, &B), 0);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("shmem_member_restart");
	TCase *t = tcase_create("member_restart");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, group_goes_with_restarted_member);
	suite_add_tcase(su, t);
	return run_suite(su);
}
