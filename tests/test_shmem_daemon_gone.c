/* morid killed under a group (tester's defect 5): nobody but morid wrote the control page's abort
 * word, so after kill -9 mori_shmem_status said healthy and a kernel waiting on a VRAM heap would
 * wait forever. libmori's hang-up watcher must set it: mori_shmem_status gives MORI_ECANCELED
 * with PE -1 (include/mori_shmem.h: "its root daemon went away") within 2 s, while the PE's
 * thread makes no call at all. A clean leave with morid alive sets nothing. Public API; a 1-PE
 * host group. */
#include <check.h>
#include <pthread.h>
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
	mori_status st;
	ck_assert_int_eq(mori_shmem_status(g, &st), MORI_OK);
	ck_assert_int_eq(st.pe, -1);
	usleep(200000);
	ck_assert_msg(mori_shmem_status(g, NULL) == MORI_OK, "aborted while morid is alive");
	daemon_kill9(&D);
	uint64_t t0 = now_ms();
	int rc;
	while ((rc = mori_shmem_status(g, &st)) == MORI_OK && now_ms() - t0 < 2000)
		usleep(1000);
	ck_assert_msg(rc == MORI_ECANCELED, "2 s after kill -9 of morid: status %s, want MORI_ECANCELED",
		      mori_strerror(rc));
	ck_assert_int_eq(st.pe, -1);
	ck_assert_int_eq(mori_shmem_status(g2, &st), MORI_ECANCELED); /* every group of the client */
	ck_assert_int_eq(st.pe, -1);
	rc = mori_shmem_barrier_all(g);
	ck_assert_int_eq(rc, MORI_ECANCELED);
	ck_assert_msg(strstr(mori_client_last_error(c), "went away"), "message: %s", mori_client_last_error(c));
	mori_shmem_finalize(g);
	mori_shmem_finalize(g2);
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
	ck_assert_int_eq(mori_shmem_status(g, NULL), MORI_OK);
	OK(mori_shmem_barrier_all(g));
	mori_shmem_finalize(g);
	mori_client_close(c);
	(void)h;
}
END_TEST

/* A clean stop of morid (SIGTERM, systemctl restart) with a PE alive (tester3's D2: status said
 * MORI_EPEERDEAD "PE 0 died" about the caller itself): the documented teardown, MORI_ECANCELED
 * with PE -1, in status and in the calls; and notif_poll on the lost session returns MORI_ECONN
 * at once, not after its timeout (tester3's D4: 2.00 s of a 2 s timeout). */
START_TEST(clean_stop_cancels)
{
	mori_client *c;
	OK(mori_client_open(D.dir, "stop", &c));
	mori_group *g = join_alone(c, "stop1", 1u << 20);
	ck_assert_int_eq(daemon_stop(&D), 0);
	mori_status st;
	int rc = mori_shmem_status(g, &st), pe = st.pe;
	ck_assert_msg(rc == MORI_ECANCELED && pe == -1, "after morid stopped: status %s, PE %d; want MORI_ECANCELED, -1",
		      mori_strerror(rc), pe);
	rc = mori_shmem_barrier_all(g);
	ck_assert_msg(rc == MORI_ECANCELED && strstr(mori_client_last_error(c), "went away"), "barrier: %s (%s)",
		      mori_strerror(rc), mori_client_last_error(c));
	mori_notif n[4];
	uint64_t t0 = now_ms();
	rc = mori_notif_poll(c, n, 4, 2000000);
	uint64_t dt = now_ms() - t0;
	ck_assert_msg(rc == MORI_ECONN, "notif_poll after morid stopped: %d (%s)", rc, mori_client_last_error(c));
	ck_assert_msg(dt < 500, "notif_poll on a lost session took %llu ms of its 2 s", (unsigned long long)dt);
	mori_shmem_finalize(g);
	mori_client_close(c);
}
END_TEST

/* morid killed while a PE waits in a barrier (tester3's D3: the barrier gave MORI_ECONN, not a
 * documented code, and status could still read healthy right after): the barrier returns
 * MORI_ECANCELED and, from that moment, status says the same with PE -1. PE 0 waits in a thread
 * (this test forks nothing once it has started one); PE 1 idles. */
struct bar {
	mori_group *g;
	int rc, st, pe;
};

static void *barrier_main(void *arg)
{
	struct bar *b = arg;
	b->rc = mori_shmem_barrier_all(b->g);
	mori_status st;
	b->st = mori_shmem_status(b->g, &st); /* right after: no waiting for the hang-up thread */
	b->pe = st.pe;
	return NULL;
}

struct joiner {
	mori_client *c;
	int rank, rc;
	mori_group *g;
};

static void *join_main(void *arg)
{
	struct joiner *j = arg;
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 1u << 20;
	o.timeout_us = 20000000;
	j->rc = mori_shmem_init(j->c, "killbar", j->rank, 2, &o, &j->g);
	return NULL;
}

START_TEST(kill9_in_barrier)
{
	struct joiner j[2] = {{.rank = 0}, {.rank = 1}};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		OK(mori_client_open(D.dir, "killbar", &j[i].c));
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, join_main, &j[i]), 0);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(j[i].rc == MORI_OK, "PE %d join: %s (%s)", i, mori_strerror(j[i].rc),
			      mori_client_last_error(j[i].c));
	}
	struct bar b = {.g = j[0].g, .pe = -2};
	ck_assert_int_eq(pthread_create(&t[0], NULL, barrier_main, &b), 0);
	usleep(300000); /* PE 0 waits at the barrier */
	daemon_kill9(&D);
	pthread_join(t[0], NULL);
	ck_assert_msg(b.rc == MORI_ECANCELED, "barrier when morid died: %s (%s)", mori_strerror(b.rc),
		      mori_client_last_error(j[0].c));
	ck_assert_msg(b.st == MORI_ECANCELED && b.pe == -1, "status right after: %s, PE %d", mori_strerror(b.st), b.pe);
	for (int i = 0; i < 2; i++) {
		mori_shmem_finalize(j[i].g);
		mori_client_close(j[i].c);
	}
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
	tcase_add_test(t, clean_stop_cancels);
	tcase_add_test(t, kill9_in_barrier);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
