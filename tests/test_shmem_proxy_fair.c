/* MORI-SHMEM's proxy must not take morid's event loop away from everything else (found by helper
 * "tester"). A PE whose requests morid serves by copying between two heaps of this node (the
 * proxy's local path: local_copy runs on the loop) keeps its ring full of 16 MiB puts, as a fast
 * kernel would (claim on head, wait while full, write, publish). Meanwhile the control socket must
 * keep answering: every `moractl status` within 1 s. daemon/shmem_proxy.c's pump() served the
 * ring in one loop turn for as long as requests were published, so with a producer that keeps up
 * morid answered nothing at all (a systemd watchdog of 10 s kills it). One morid, a 1-PE host
 * group, the PE a forked process that posts to itself. */
#include <check.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "harness.h"
#include "ctl_harness.h"
#include "mori_shmem.h"
#include "shmem_layout.h"
#include "wire.h"

#define HEAP (32u << 20)
#define LEN (16u << 20)

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

struct shared {
	volatile int ready, stop;
	volatile uint64_t posted;
};

static int flood(struct shared *sh)
{
	mori_client *c;
	if (mori_client_open(D.dir, "flood", &c))
		return 1;
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = HEAP;
	o.timeout_us = 30000000;
	mori_group *g;
	if (mori_shmem_init(c, "fair", 0, 1, &o, &g))
		return 2;
	struct mori_shmem_state *st = mori_shmem_state(g);
	struct mori_shmem_ctrl *ct = st->ctrl;
	uint8_t *heap = mori_shmem_heap_base(g);
	uint32_t n = ct->ring_entries;
	*(volatile uint64_t *)(heap + MORI_SHMEM_OFF_PROXY_USED) = 1;
	sh->ready = 1;
	while (!sh->stop) {
		uint64_t seq = __atomic_fetch_add((uint64_t *)&ct->head, 1, __ATOMIC_SEQ_CST);
		while (seq - __atomic_load_n(&ct->done, __ATOMIC_ACQUIRE) >= n) {
			if (sh->stop || ct->abort)
				return 0; /* exit: morid drops the PE with the session */
			usleep(50);
		}
		volatile uint64_t *w = (volatile uint64_t *)&st->ring[seq & (n - 1)];
		w[1] = 0;           /* pe: itself, a PE of this node reached through morid */
		w[2] = 1u << 20;    /* dst */
		w[3] = HEAP - LEN;  /* src */
		w[4] = LEN;
		w[5] = w[6] = w[7] = 0;
		__atomic_store_n((uint64_t *)w, (uint64_t)(uint32_t)(seq + 1) | (uint64_t)MORI_SHMEM_OP_PUT << 32,
				 __ATOMIC_RELEASE);
		sh->posted++;
	}
	return 0;
}

START_TEST(control_answers_during_local_flood)
{
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sh, MAP_FAILED);
	memset((void *)sh, 0, sizeof(*sh));
	pid_t pe = fork();
	if (pe == 0) {
		child_deadline(60);
		_exit(flood(sh));
	}
	for (int i = 0; i < 1000 && !sh->ready; i++)
		usleep(10000);
	ck_assert_msg(sh->ready, "the PE did not join");
	usleep(500000); /* the ring is full by now */
	char url[400], err[256];
	ctl_url(url, sizeof(url), D.dir);
	uint64_t worst = 0;
	int failed = 0;
	for (int i = 0; i < 5; i++) {
		Mori__Request req = MORI__REQUEST__INIT;
		Mori__StatusRequest sr = MORI__STATUS_REQUEST__INIT;
		req.body_case = MORI__REQUEST__BODY_STATUS;
		req.status = &sr;
		Mori__Reply *rep = NULL;
		uint64_t t0 = mori_now_us();
		int rc = ctl_call(url, &req, &rep, 1000, err, sizeof(err));
		uint64_t dt = mori_now_us() - t0;
		worst = dt > worst ? dt : worst;
		if (rc != MORI_OK)
			failed++;
		else
			mori__reply__free_unpacked(rep, NULL);
	}
	sh->stop = 1;
	int st;
	ck_assert_int_eq(waitpid(pe, &st, 0), pe);
	fprintf(stderr, "# %llu 16 MiB self-puts posted; status: %d of 5 unanswered within 1 s, slowest %llu ms\n",
		(unsigned long long)sh->posted, failed, (unsigned long long)worst / 1000);
	ck_assert_msg(failed == 0, "%d of 5 status requests got no answer within 1 s while one PE's ring was served "
		      "(slowest %llu ms)", failed, (unsigned long long)worst / 1000);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the PE failed (exit %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	munmap((void *)sh, sizeof(*sh));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shmem_proxy_fair");
	TCase *t = tcase_create("shmem_proxy_fair");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 120);
	tcase_add_test(t, control_answers_during_local_flood);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
