/* morid killed under a group (tester's defect 5): nobody but morid wrote the control page's abort
 * word, so after kill -9 mori_shmem_status said healthy and a kernel waiting on a VRAM heap would
 * wait forever. libmori's hang-up watcher must set it: mori_shmem_status gives MORI_ECANCELED
 * with PE -1 (include/mori_shmem.h: "its root daemon went away") within 2 s, while the PE's
 * thread makes no call at all. A clean leave with morid alive sets nothing. Public API; a 1-PE
 * host group. */
#include <check.h>
#include <time.h>

#include "harness.h"
#include "pe_harness.h"
#include "mori_shmem.h"

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

START_TEST(kill9_sets_abort)
{
	mori_client *c;
	OK(mori_client_open(D.dir, "gone", &c));
	mori_group *g = join_alone(c, "gone1", 1u << 20);
	mori_group *g2 = join_alone(c, "gone2", 1u << 20);
	int pe = -2;
	ck_assert_int_eq(mori_shmem_status(g, &pe), MORI_OK);
	ck_assert_int_eq(pe, -1);
	usleep(200000);
	ck_assert_msg(mori_shmem_status(g, NULL) == MORI_OK, "aborted while morid is alive");
	daemon_kill9(&D);
	uint64_t t0 = now_ms();
	int rc;
	while ((rc = mori_shmem_status(g, &pe)) == MORI_OK && now_ms() - t0 < 2000)
		usleep(1000);
	ck_assert_msg(rc == MORI_ECANCELED, "2 s after kill -9 of morid: status %s, want MORI_ECANCELED",
		      mori_strerror(rc));
	ck_assert_int_eq(pe, -1);
	ck_assert_int_eq(mori_shmem_status(g2, &pe), MORI_ECANCELED); /* every group of the client */
	ck_assert_int_eq(pe, -1);
	rc = mori_shmem_barrier_all(g);
	ck_assert_int_eq(rc, MORI_ECANCELED);
	ck_assert_msg(strstr(mori_client_last_error(c), "went away"), "message: %s", mori_client_last_error(c));
	mori_group_leave(g);
	mori_group_leave(g2);
	mori_client_close(c);
}
END_TEST

/* The watcher leaves groups alone while morid lives, and a client closed with groups open stops
 * it without aborting anything another client holds. */
START_TEST(alive_no_abort)
{
	mori_client *c, *c2;
	OK(mori_client_open(D.dir, "alive", &c));
	OK(mori_client_open(D.dir, "other", &c2));
	mori_group *g = join_alone(c, "alive1", 1u << 20);
	mori_group *h = join_alone(c2, "alive2", 1u << 20);
	mori_client_close(c2); /* leaves h and stops c2's watcher */
	usleep(200000);
	int pe = -2;
	ck_assert_int_eq(mori_shmem_status(g, &pe), MORI_OK);
	OK(mori_shmem_barrier_all(g));
	mori_group_leave(g);
	mori_client_close(c);
	(void)h;
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shmem_daemon_gone");
	TCase *t = tcase_create("shmem_daemon_gone");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 30);
	tcase_add_test(t, kill9_sets_abort);
	tcase_add_test(t, alive_no_abort);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
