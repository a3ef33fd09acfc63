/* Host all-to-all with more ranks than scratch allows (tester's defect 6): 257 ranks and
 * scratch_bytes 4096 (the host minimum) give each rank's chunk 4096/257 rounded down to 16 = 0
 * bytes, and the pull loop never advanced (barriers succeeding forever). Every rank must now get
 * MORI_EINVAL naming the numbers, within a bound (alarm), and the communicator stays usable: an
 * all-gather of one byte a rank afterwards gives every rank's byte. Public API; one morid. */
#include <check.h>
#include <signal.h>
#include <sys/wait.h>

#include "harness.h"
#include "mori_coll.h"
#include "mori_shmem.h"

#define N 257

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

/* One rank; exits 0 when the all-to-all is refused as it should be and the all-gather is right. */
static void rank_main(int r)
{
	alarm(120); /* the old behaviour: loops forever */
	mori_client *c;
	if (mori_client_open(D.dir, "a2a", &c))
		_exit(2);
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 4u << 20; /* the communicator's flags and tables for 257 ranks take about 2 MiB */
	o.timeout_us = 90000000;
	mori_group *g;
	int rc = mori_shmem_init(c, "a2a-scratch", r, N, &o, &g);
	if (rc) {
		fprintf(stderr, "rank %d: join: %s\n", r, mori_client_last_error(c));
		_exit(3);
	}
	mori_comm_opts co;
	mori_comm_opts_init(&co, sizeof(co));
	co.scratch_bytes = 4096;
	mori_comm *k;
	if ((rc = mori_comm_create(g, &co, &k))) {
		fprintf(stderr, "rank %d: comm create: %s\n", r, mori_client_last_error(c));
		_exit(4);
	}
	uint8_t s[N], d[N];
	memset(s, r & 0xff, sizeof(s));
	rc = mori_alltoall(k, s, d, 1, MORI_UINT8, NULL);
	const char *msg = mori_client_last_error(c);
	if (rc != MORI_EINVAL || !strstr(msg, "4096 bytes of scratch over 257 ranks") || !strstr(msg, ">= 4112")) {
		fprintf(stderr, "rank %d: alltoall gave %s (%s), want MORI_EINVAL naming 4096, 257 and 4112\n", r,
			mori_strerror(rc), msg);
		_exit(5);
	}
	uint8_t one = (uint8_t)(r * 7 + 1);
	if ((rc = mori_allgather(k, &one, d, 1, MORI_UINT8, NULL))) {
		fprintf(stderr, "rank %d: allgather after the refusal: %s\n", r, mori_client_last_error(c));
		_exit(6);
	}
	for (int i = 0; i < N; i++)
		if (d[i] != (uint8_t)(i * 7 + 1)) {
			fprintf(stderr, "rank %d: allgather d[%d] = %u, want %u\n", r, i, d[i], (uint8_t)(i * 7 + 1));
			_exit(7);
		}
	mori_comm_destroy(k);
	mori_shmem_finalize(g);
	mori_client_close(c);
	_exit(0);
}

START_TEST(a2a_small_scratch_refused)
{
	pid_t pids[N];
	for (int r = 0; r < N; r++) {
		pids[r] = fork();
		ck_assert_int_ge(pids[r], 0);
		if (pids[r] == 0)
			rank_main(r);
	}
	int bad = 0, first = -1, code = 0;
	for (int r = 0; r < N; r++) {
		int st;
		ck_assert_int_eq(waitpid(pids[r], &st, 0), pids[r]);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			if (first < 0) {
				first = r;
				code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
			}
			bad++;
		}
	}
	ck_assert_msg(!bad, "%d of %d ranks failed (first: rank %d, exit %d; %d = killed by the alarm: no progress)", bad,
		      N, first, code, -SIGALRM);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("coll_a2a_scratch");
	TCase *t = tcase_create("coll_a2a_scratch");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 180);
	tcase_add_test(t, a2a_small_scratch_refused);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
