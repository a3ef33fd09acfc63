/* Idle, unauthenticated connections to the data port: a morid that accepted a TCP stream and
 * waited for its hello forever would let 1100 idle connections from anyone who could reach the
 * port take every descriptor it had (RLIMIT_NOFILE 1024) and cut off its local clients and
 * moractl. So an accepted stream must authenticate within 5 s (HS_DEADLINE_MS), and at most
 * 128 (HS_MAX_PENDING) wait at once: a new one closes the oldest. Both are counted
 * (data_handshakes_dropped). An authenticated stream is not touched by either rule. */
#include <check.h>
#include <poll.h>

#include "harness.h"
#include "ctl_harness.h"
#include "peer_harness.h"

#define PENDING 128   /* HS_MAX_PENDING, restated: the documented figure */
#define DEADLINE_S 5  /* HS_DEADLINE_MS / 1000 */
#define EXTRA 50
#define N (PENDING + EXTRA)

static char kpath[64];
static struct auth_key K;

/* Has the daemon closed s (EOF or reset waiting, nothing else sent)? */
static int closed_by_peer(int s)
{
	struct pollfd p = {.fd = s, .events = POLLIN};
	if (poll(&p, 1, 0) != 1)
		return 0;
	char b;
	ssize_t n = recv(s, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n <= 0;
}

static int count_closed(const int *s, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		k += closed_by_peer(s[i]);
	return k;
}

/* One authenticated read: served (an F_RDATA answer, ESTALE for no such region). */
static int served(int s)
{
	struct fhdr rd = {.type = F_READ, .xfer = 1, .region = 1, .gen = 1, .rlen = 8, .total = 8, .deadline_ms = 1000};
	return data_write(s, &rd, NULL) == 0 && data_read(s, NULL, 0).type == F_RDATA;
}

START_TEST(idle_connections_are_bounded)
{
	snprintf(kpath, sizeof(kpath), "/tmp/mori-idle-key-%d", (int)getpid());
	ck_assert_int_eq(key_write(kpath, &K), 0);
	struct test_daemon A;
	char addr[64], url[96];
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", free_port());
	const char *extra[] = {"--listen", addr, "--cluster-key-file", kpath, NULL};
	ck_assert_int_eq(daemon_start(&A, extra), 0);
	snprintf(url, sizeof(url), "tcp://%s", addr);
	struct pctl pc;
	ck_assert_int_eq(pctl_open(&pc, url, &K, "127.0.0.1:9"), MORI_OK);
	uint32_t dport = pctl_data_port(&pc, NULL);
	pctl_close(&pc);
	ck_assert_uint_ne(dport, 0);
	uint64_t dropped0 = ctl_counter(A.dir, "data_handshakes_dropped");

	/* N idle connections: the oldest EXTRA are closed to make room, PENDING stay */
	static int s[N];
	uint64_t t_dial = mori_now_us(); /* every one was accepted after this */
	for (int i = 0; i < N; i++) {
		s[i] = data_dial("127.0.0.1", dport);
		ck_assert_int_ge(s[i], 0);
	}
	uint64_t t0 = mori_now_us();
	while (ctl_counter(A.dir, "data_handshakes_dropped") - dropped0 < EXTRA && mori_now_us() - t0 < 3000000)
		usleep(10000);
	ck_assert_uint_eq(ctl_counter(A.dir, "data_handshakes_dropped") - dropped0, EXTRA);
	/* counted when morid closed them: the closes reach this end a moment later */
	WAIT_UNTIL(count_closed(s, N) >= EXTRA, 10000);
	ck_assert_int_eq(count_closed(s, N), EXTRA);
	ck_assert(closed_by_peer(s[0])); /* the oldest went */
	ck_assert(!closed_by_peer(s[N - 1]));

	/* a real peer still gets in (its accept closes one more idle one) and is served */
	int good = data_dial("127.0.0.1", dport);
	ck_assert_int_ge(good, 0);
	ck_assert_int_eq(data_handshake(good, &K, 0x77, "127.0.0.1:9"), 0);
	ck_assert(served(good));
	/* the daemon answers its local clients and moractl meanwhile */
	mori_client *c;
	OK(mori_client_open(A.dir, "local", &c));
	mori_client_close(c);

	/* by the deadline every idle one is closed; the authenticated stream stays and serves */
	int closed = count_closed(s, N);
	if (mori_now_us() - t_dial < DEADLINE_S * 1000000ull) /* a loaded machine may be past it by now */
		ck_assert_int_lt(closed, N);
	while (count_closed(s, N) < N && mori_now_us() - t_dial < (DEADLINE_S + 20) * 1000000ull)
		usleep(20000);
	uint64_t dt = mori_now_us() - t_dial;
	ck_assert_int_eq(count_closed(s, N), N);
	ck_assert_msg(dt >= DEADLINE_S * 1000000ull, "idle connections all closed %llu ms after they were dialled, "
		      "before the %d s deadline", (unsigned long long)dt / 1000, DEADLINE_S);
	ck_assert_uint_eq(ctl_counter(A.dir, "data_handshakes_dropped") - dropped0, N);
	ck_assert(!closed_by_peer(good));
	ck_assert(served(good));
	close(good);
	for (int i = 0; i < N; i++)
		close(s[i]);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "grep -q 'closed an unauthenticated data connection' %s", A.log);
	ck_assert_msg(system(cmd) == 0, "morid's log does not say it closed them (%s)", A.log);
	int st = daemon_stop(&A);
	daemon_cleanup(&A);
	unlink(kpath);
	ck_assert_int_eq(st, 0);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("data_port_idle");
	TCase *t = tcase_create("data_port_idle");
	tcase_set_timeout(t, 60);
	tcase_add_test(t, idle_connections_are_bounded);
	suite_add_tcase(su, t);
	return run_suite(su);
}
