/* Idle, unauthenticated connections to the peer listener (the `listen` port): anyone who reaches
 * it may open connections and never authenticate. With a lowered descriptor limit (RLIMIT_NOFILE
 * 200 for morid) a flood of N idle connections, half that never send a byte and half that finish
 * the SP handshake and stop there, must not cost morid its local clients or moractl: at most 128
 * unauthenticated connections are held (a new one closes the oldest), each is closed by the
 * deadline, and a share of the descriptors is never taken by the peer listener. A key holder
 * still gets in and is served meanwhile. */
#include <check.h>
#include <fcntl.h>
#include <errno.h>
#include <poll.h>
#include <sys/resource.h>

#include "harness.h"
#include "ctl_harness.h"
#include "peer_harness.h"

#define UNAUTH_MAX 128   /* PEER_UNAUTH_MAX, restated: the documented figure */
#define DEADLINE_S 10    /* PEER_AUTH_DEADLINE_MS / 1000 */
#define MORID_NOFILE 200       /* morid's descriptor limit in this test */
#define N 600            /* idle connections: three times morid's limit */

static char kpath[64];
static struct auth_key K;

/* Has morid closed s? What it sent first (its SP header) is read and dropped. */
static int closed_by_peer(int s)
{
	char b[64];
	for (;;) {
		ssize_t n = recv(s, b, sizeof(b), MSG_DONTWAIT);
		if (n == 0)
			return 1;
		if (n < 0)
			return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
	}
}

static int count_closed(const int *s, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		k += s[i] < 0 || closed_by_peer(s[i]);
	return k;
}

/* A connection that is established but not yet accepted is fine: the flood is what the kernel
 * queues and morid accepts. Non-blocking, so a full backlog does not stall the test. */
static int dial(const struct sockaddr_in *a)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -1;
	if (connect(s, (const struct sockaddr *)a, sizeof(*a)) != 0 && errno != EINPROGRESS) {
		close(s);
		return -1;
	}
	return s;
}

/* A local client and moractl status, both served while the flood is held. */
static void local_ok(const char *dir)
{
	mori_client *c;
	int rc = mori_client_open(dir, "local", &c);
	ck_assert_msg(rc == MORI_OK, "a local client during the flood: %s", mori_strerror(rc));
	mori_client_close(c);
	Mori__Reply *st = ctl_status(dir);
	mori__reply__free_unpacked(st, NULL);
}

START_TEST(flood_leaves_local_service)
{
	snprintf(kpath, sizeof(kpath), "/tmp/mori-flood-key-%d", (int)getpid());
	ck_assert_int_eq(key_write(kpath, &K), 0);
	struct test_daemon A;
	char addr[64], url[96];
	int port = free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	snprintf(url, sizeof(url), "tcp://%s", addr);
	const char *extra[] = {"--listen", addr, "--cluster-key-file", kpath, NULL};
	struct rlimit old, low;
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	ck_assert_uint_ge(old.rlim_max, N + 200);
	low = old;
	low.rlim_cur = MORID_NOFILE; /* inherited by morid; ours goes back up at once */
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	int st = daemon_start(&A, extra);
	old.rlim_cur = old.rlim_max;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	ck_assert_int_eq(st, 0);
	local_ok(A.dir);

	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	static int s[N];
	static const uint8_t sp_req0[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
	uint64_t t_dial = test_now_ms();
	for (int i = 0; i < N; i++) {
		s[i] = dial(&sa);
		ck_assert_int_ge(s[i], 0);
		if (i % 2) { /* half finish the SP handshake, once connected */
			struct pollfd p = {.fd = s[i], .events = POLLOUT};
			if (poll(&p, 1, 100) == 1 && !(p.revents & (POLLERR | POLLHUP)))
				(void)!send(s[i], sp_req0, sizeof(sp_req0), MSG_NOSIGNAL);
		}
	}
	/* no more than the cap are held: the rest were closed to make room */
	int want = N - UNAUTH_MAX;
	int ok = WAIT_UNTIL(count_closed(s, N) >= want, 20000);
	ck_assert_msg(ok, "%d of %d idle connections closed, %d wanted", count_closed(s, N), N, want);
	ck_assert(closed_by_peer(s[0]));

	/* local clients and moractl are served while the flood is held */
	local_ok(A.dir);
	ck_assert_int_lt(proc_fds(A.pid), MORID_NOFILE);

	/* a key holder gets in and is served */
	struct pctl pc;
	ck_assert_int_eq(pctl_open(&pc, url, &K, "127.0.0.1:9"), MORI_OK);
	ck_assert_uint_ne(pctl_data_port(&pc, NULL), 0);

	/* by the deadline every idle one is closed; the authenticated one stays and is served */
	ok = WAIT_UNTIL(count_closed(s, N) == N, (DEADLINE_S + 30) * 1000);
	ck_assert_msg(ok, "%d of %d idle connections still open %llu ms after the flood", N - count_closed(s, N), N,
		      (unsigned long long)(test_now_ms() - t_dial));
	ck_assert_msg(test_now_ms() - t_dial >= DEADLINE_S * 1000ull, "idle connections closed before the deadline");
	ck_assert_uint_ne(pctl_data_port(&pc, NULL), 0);
	pctl_close(&pc);
	ck_assert_uint_ge(ctl_counter(A.dir, "peer_connections_dropped"), N);
	local_ok(A.dir);
	for (int i = 0; i < N; i++)
		close(s[i]);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "grep -q 'closed an unauthenticated peer connection' %s", A.log);
	ck_assert_msg(system(cmd) == 0, "morid's log does not say it closed them (%s)", A.log);
	st = daemon_stop(&A);
	daemon_cleanup(&A);
	unlink(kpath);
	ck_assert_int_eq(st, 0);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("peer_flood");
	TCase *t = tcase_create("peer_flood");
	tcase_set_timeout(t, 90);
	tcase_add_test(t, flood_leaves_local_service);
	suite_add_tcase(su, t);
	return run_suite(su);
}
