/* Peers morid makes on its own. Unbounded, a client's mori_mem_open_remote to an address nobody
 * answers at would add a peer that morid redials forever (400 addresses: 403 peers, 35 -> 844
 * descriptors, half a core), with a failure reason that nests itself, and a peer with another
 * cluster key would be re-authenticated once a second, with a warning each time at both ends.
 * So: at most max_client_peers such peers wait to be reached (an open past it: MORI_EBUSY),
 * one never reached goes 10 s (PEER_CLIENT_IDLE_MS) after its last use, and every peer is
 * redialled with backoff (0.1 s doubling to 2 s), logging a refused key once per 5 minutes. */
#include <check.h>
#include <sys/wait.h>

#include "harness.h"
#include "ctl_harness.h"
#include "peer_harness.h"

#define CAP 8      /* --max-client-peers given below */
#define OPENERS 12 /* > CAP */
#define IDLE_S 10  /* PEER_CLIENT_IDLE_MS / 1000, restated: the documented figure */

static size_t npeers(const char *dir, int *nested)
{
	Mori__Reply *rep = ctl_list(dir, 3);
	size_t n = rep->list->n_peers;
	*nested = 0;
	for (size_t i = 0; i < n; i++) {
		const char *st = rep->list->peers[i]->state, *a = strstr(st, "cannot reach");
		if (a && strstr(a + 1, "cannot reach"))
			*nested = 1;
	}
	mori__reply__free_unpacked(rep, NULL);
	return n;
}

/* A child: open "x" at node; exits with the code's negation. */
static pid_t opener(const char *dir, const char *node)
{
	pid_t pid = fork();
	if (pid == 0) {
		child_deadline(30);
		mori_client *c;
		mori_mem *m = NULL;
		if (mori_client_open(dir, "opener", &c) != MORI_OK)
			_exit(100);
		int rc = mori_mem_open_remote(c, node, "x", &m);
		mori_client_close(c);
		_exit(rc < 0 ? -rc : 101);
	}
	return pid;
}

START_TEST(client_made_peers_are_capped_and_expire)
{
	struct test_daemon A;
	char addr[64], cap[16], nodes[OPENERS][64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", free_port());
	snprintf(cap, sizeof(cap), "%d", CAP);
	const char *extra[] = {"--listen", addr, "--max-client-peers", cap, NULL};
	ck_assert_int_eq(daemon_start(&A, extra), 0);
	usleep(100000); /* the harness's probe of the listener closes: a baseline with it only loosens the bounds */
	int fds0 = proc_fds(A.pid);
	pid_t kids[OPENERS];
	for (int i = 0; i < OPENERS; i++) { /* ports nobody listens on (some may be the same) */
		snprintf(nodes[i], sizeof(nodes[i]), "127.0.0.1:%d", 40000 + i * 7 + (int)(getpid() % 1000) * 13 % 20000);
		kids[i] = opener(A.dir, nodes[i]);
		ck_assert_int_gt(kids[i], 0);
	}
	int busy = 0, conn = 0;
	for (int i = 0; i < OPENERS; i++) {
		int st;
		ck_assert_int_eq(waitpid(kids[i], &st, 0), kids[i]);
		ck_assert(WIFEXITED(st));
		int code = -WEXITSTATUS(st);
		ck_assert_msg(code == MORI_EBUSY || code == MORI_ECONN, "opener %d: %d", i, code);
		busy += code == MORI_EBUSY;
		conn += code == MORI_ECONN;
	}
	/* only now threads (nng's, for the control requests): no fork below */
	ck_assert_int_eq(busy, OPENERS - CAP);
	ck_assert_int_eq(conn, CAP);
	/* the openers' own descriptors at morid (session, ring, doorbells, pidfd) go as morid sees
	 * each exit: count the peers' alone */
	uint32_t clients;
	ck_assert_msg(ctl_wait_clients(A.dir, 0, -1, 5000, &clients, NULL),
		      "morid still lists %u of the openers 5 s after they exited", clients);
	int nested, fds1 = proc_fds(A.pid);
	size_t n1 = npeers(A.dir, &nested);
	ck_assert_uint_eq(n1, CAP);
	ck_assert_msg(!nested, "a peer's reason nests itself");
	ck_assert_msg(fds1 <= fds0 + 4 * CAP + 2, "%d descriptors with %d client-made peers (before %d)", fds1, CAP, fds0);

	/* they go IDLE_S after the last use (the failed opens), and their descriptors with them */
	uint64_t t0 = mori_now_us();
	size_t n = n1;
	while ((n = npeers(A.dir, &nested)) > 0 && mori_now_us() - t0 < (IDLE_S + 5) * 1000000ull)
		usleep(100000);
	ck_assert_msg(n == 0, "%zu peers %llu ms after the opens failed", n, (unsigned long long)(mori_now_us() - t0) / 1000);
	int fds2 = proc_fds(A.pid);
	/* + 2: libnng's poller (an epoll and its eventfd) starts with the first dial and stays */
	ck_assert_msg(fds2 <= fds0 + 1 + 2, "%d descriptors after the peers went (before %d)", fds2, fds0);
	printf("# %d openers, cap %d: %d EBUSY, %d ECONN; peers %zu, fds %d -> %d -> %d (expired %.1f s after)\n",
	       OPENERS, CAP, busy, conn, n1, fds0, fds1, fds2, (mori_now_us() - t0) / 1e6);
	int st = daemon_stop(&A);
	daemon_cleanup(&A);
	ck_assert_int_eq(st, 0);
}
END_TEST

static char k1[64], k2[64];

/* C (key 2) has B (key 1) in peers=: refused each time, retried with backoff, logged once. */
START_TEST(refused_key_backs_off)
{
	struct auth_key K1, K2;
	snprintf(k1, sizeof(k1), "/tmp/mori-lim-k1-%d", (int)getpid());
	snprintf(k2, sizeof(k2), "/tmp/mori-lim-k2-%d", (int)getpid());
	ck_assert_int_eq(key_write(k1, &K1), 0);
	ck_assert_int_eq(key_write(k2, &K2), 0);
	struct test_daemon B, C;
	char ab[64], ac[64];
	snprintf(ab, sizeof(ab), "127.0.0.1:%d", free_port());
	snprintf(ac, sizeof(ac), "127.0.0.1:%d", free_port());
	const char *eb[] = {"--listen", ab, "--cluster-key-file", k1, NULL};
	const char *ec[] = {"--listen", ac, "--cluster-key-file", k2, "--peers", ab, NULL};
	ck_assert_int_eq(daemon_start(&B, eb), 0);
	ck_assert_int_eq(daemon_start(&C, ec), 0);
	/* no fork from here (nng's threads) */
	const int watch_s = 12;
	uint64_t t0 = mori_now_us();
	while (ctl_counter(C.dir, "peer_auth_refused") == 0 && mori_now_us() - t0 < 5000000)
		usleep(20000);
	uint64_t r0 = ctl_counter(C.dir, "peer_auth_refused");
	ck_assert_uint_ge(r0, 1);
	sleep(watch_s); /* a window: a loaded machine makes fewer attempts, never more, and 2 come surely */
	uint64_t r1 = ctl_counter(C.dir, "peer_auth_refused");
	/* doubling from 0.1 s to 2 s: attempts at 0.1, 0.3, 0.7, 1.5, 3.1, 5.1, 7.1, 9.1, 11.1 s after
	 * the first: about 9 in 12 s; redialling once a second would make 12 or more */
	ck_assert_msg(r1 - r0 >= 2 && r1 - r0 <= 11, "%llu refusals in %d s after the first (backoff: about 9)",
		      (unsigned long long)(r1 - r0), watch_s);
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "test $(grep -c 'warn .*failed authentication' %s) -eq 1", C.log);
	ck_assert_msg(system(cmd) == 0, "C's log does not have exactly one 'failed authentication' warning (%s)", C.log);
	snprintf(cmd, sizeof(cmd), "test $(grep -c 'warn .*refused a request from an unauthenticated peer' %s) -le 2", B.log);
	ck_assert_msg(system(cmd) == 0, "B's log has more than 2 refusal lines (%s)", B.log);
	printf("# key refused: %llu attempts in %d s after the first\n", (unsigned long long)(r1 - r0), watch_s);
	int sc = daemon_stop(&C), sb = daemon_stop(&B);
	daemon_cleanup(&C);
	daemon_cleanup(&B);
	unlink(k1);
	unlink(k2);
	ck_assert_int_eq(sc, 0);
	ck_assert_int_eq(sb, 0);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("peer_limits");
	TCase *t = tcase_create("peer_limits");
	tcase_set_timeout(t, 60);
	tcase_add_test(t, client_made_peers_are_capped_and_expire);
	tcase_add_test(t, refused_key_backs_off);
	suite_add_tcase(su, t);
	return run_suite(su);
}
