/* Test harness for C tests that need a running morid: start one in a fresh runtime dir, wait
 * until it serves, stop it. Header-only so every test binary stays one file. */
#ifndef MORI_TEST_HARNESS_H
#define MORI_TEST_HARNESS_H
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mori.h"

struct test_daemon {
	pid_t pid;
	char dir[256];
	char log[300];
};

static inline const char *build_dir(void)
{
	const char *b = getenv("B");
	return b && b[0] ? b : "build";
}

/* Milliseconds on the monotonic clock. */
static inline uint64_t test_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}
/* Seconds on the monotonic clock, for durations. */
static inline double test_now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Evaluate cond every millisecond until it holds or within_ms passed; whether it held. A test
 * waits for the state it needs, never a fixed time: a loaded machine may take long to get there. */
#define WAIT_UNTIL(cond, within_ms)                                                                  \
	({                                                                                           \
		uint64_t _wu_t0 = test_now_ms();                                                     \
		int _wu_ok;                                                                          \
		while (!(_wu_ok = !!(cond)) && test_now_ms() - _wu_t0 < (uint64_t)(within_ms))       \
			usleep(1000);                                                                \
		_wu_ok;                                                                              \
	})

/* Does something accept TCP connections at a (IPv4)? */
static inline int tcp_accepts(const struct sockaddr_in *a)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	int ok = s >= 0 && connect(s, (const struct sockaddr *)a, sizeof(*a)) == 0;
	if (s >= 0)
		close(s);
	return ok;
}

/* Start build/morid --runtime-dir <fresh dir> plus extra args (NULL-terminated). Waits up to
 * 5 s for its session socket, and for its peer listener where extra has --listen IPv4:port.
 * Returns 0 or -1. */
static inline int daemon_start_in(struct test_daemon *t, const char *dir, const char *const *extra)
{
	char morid[512], sock[300];
	snprintf(morid, sizeof(morid), "%s/morid", build_dir());
	if (dir) {
		snprintf(t->dir, sizeof(t->dir), "%s", dir);
	} else {
		snprintf(t->dir, sizeof(t->dir), "/tmp/mori-test-XXXXXX");
		if (!mkdtemp(t->dir))
			return -1;
	}
	snprintf(t->log, sizeof(t->log), "%s.log", t->dir);
	snprintf(sock, sizeof(sock), "%s/morid.session", t->dir);
	unlink(sock);
	t->pid = fork();
	if (t->pid < 0)
		return -1;
	if (t->pid == 0) {
		const char *argv[32] = {morid, "--runtime-dir", t->dir, "--log-level", "info"};
		int n = 5;
		for (int i = 0; extra && extra[i] && n < 30; i++)
			argv[n++] = extra[i];
		argv[n] = NULL;
		FILE *f = freopen(t->log, "a", stderr);
		(void)f;
		unsetenv("NOTIFY_SOCKET");
		execv(morid, (char *const *)argv);
		_exit(127);
	}
	/* morid opens its peer listener (--listen host:port) a little after its session socket:
	 * a test that dials it at once must not race that */
	struct sockaddr_in la = {.sin_family = AF_INET};
	int want_listen = 0;
	for (int i = 0; extra && extra[i] && extra[i + 1]; i++) {
		char host[64];
		int port;
		if (!strcmp(extra[i], "--listen") && sscanf(extra[i + 1], "%63[0-9.]:%d", host, &port) == 2 &&
		    inet_pton(AF_INET, host, &la.sin_addr) == 1) {
			la.sin_port = htons((uint16_t)port);
			want_listen = 1;
		}
	}
	for (int i = 0; i < 500; i++) {
		struct stat st;
		if (stat(sock, &st) == 0 && (!want_listen || tcp_accepts(&la)))
			return 0;
		int status;
		if (waitpid(t->pid, &status, WNOHANG) == t->pid) {
			t->pid = 0;
			return -1;
		}
		usleep(10000);
	}
	return -1;
}

static inline int daemon_start(struct test_daemon *t, const char *const *extra)
{
	return daemon_start_in(t, NULL, extra);
}

static inline void daemon_cleanup(struct test_daemon *t)
{
	char cmd[700];
	if (getenv("MORI_TEST_KEEP") || !t->dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", t->dir, t->log);
	if (system(cmd) != 0)
		fprintf(stderr, "# could not remove %s\n", t->dir);
}

/* SIGTERM and reap (SIGKILL after 3 s). Returns the exit status or -1. */
static inline int daemon_stop(struct test_daemon *t)
{
	if (t->pid <= 0)
		return -1;
	kill(t->pid, SIGTERM);
	for (int i = 0; i < 300; i++) {
		int status;
		if (waitpid(t->pid, &status, WNOHANG) == t->pid) {
			t->pid = 0;
			return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		}
		usleep(10000);
	}
	kill(t->pid, SIGKILL);
	waitpid(t->pid, NULL, 0);
	t->pid = 0;
	return -1;
}

static inline void daemon_kill9(struct test_daemon *t)
{
	if (t->pid > 0) {
		kill(t->pid, SIGKILL);
		waitpid(t->pid, NULL, 0);
		t->pid = 0;
	}
}

/* First call in a test's forked child (a PE, a flooder): end it alone after secs seconds, and
 * with SIGKILL when the test process dies. Check's SIGALRM handler, inherited through fork,
 * would otherwise SIGKILL the whole test's process group and report only "signal 9", hiding
 * which child hung. */
static inline void child_deadline(unsigned secs)
{
	signal(SIGALRM, SIG_DFL);
	alarm(secs);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
}

/* Two pipes between a test and a child it forks: the child writes up[1] and reads go[0], the test
 * reads up[0] and writes go[1]. */
struct child_pipes {
	int up[2], go[2];
};

/* fork() for a child of a test that starts with child_deadline(secs). With p, the two pipes are
 * made first and each side closes the ends the other one uses. Returns as fork() does: the
 * child's pid in the test, 0 in the child; -1 when a pipe or the fork failed. */
static inline pid_t child_fork(unsigned secs, struct child_pipes *p)
{
	if (p && (pipe(p->up) != 0 || pipe(p->go) != 0))
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		child_deadline(secs);
		if (p) {
			close(p->up[0]);
			close(p->go[1]);
		}
	} else if (pid > 0 && p) {
		close(p->up[1]);
		close(p->go[0]);
	}
	return pid;
}

#define CHILD_UID_EXIT 9 /* child_as_uid's child could not take its uid */

/* child_fork() for a child that runs as uid (root only): no supplementary groups, gid and uid
 * uid, its saved set-user-ID saved_uid (0 lets it seteuid(0) later, as a setuid exec would);
 * the child _exits CHILD_UID_EXIT where it cannot. */
static inline pid_t child_as_uid(uid_t uid, uid_t saved_uid, unsigned secs, struct child_pipes *p)
{
	pid_t pid = child_fork(secs, p);
	if (pid == 0 &&
	    (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, saved_uid) != 0))
		_exit(CHILD_UID_EXIT);
	return pid;
}

/* xorshift64*: the tests' own random numbers, seeded from MORI_TEST_SEED or the clock. */
static inline uint64_t test_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static inline uint64_t test_seed(void)
{
	const char *e = getenv("MORI_TEST_SEED");
	uint64_t s = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
	if (!e)
		fprintf(stderr, "# MORI_TEST_SEED=%llu\n", (unsigned long long)s);
	return s ? s : 1;
}

/* port on loopback if a socket binds to it now (0: the kernel's pick), else -1. */
static inline int bind_loopback(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)port)};
	socklen_t l = sizeof(sa);
	int s = socket(AF_INET, SOCK_STREAM, 0), got = -1;
	if (s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 && getsockname(s, (struct sockaddr *)&sa, &l) == 0)
		got = ntohs(sa.sin_port);
	if (s >= 0)
		close(s);
	return got;
}

/* A loopback port nobody listens on now, below the kernel's ephemeral range: a port the kernel
 * hands out (bind to 0) can go to an outgoing connection (the data streams of the very daemons
 * under test) before the daemon meant to listen on it starts, which then failed "Address in
 * use" (seen with test_xnode under check-asan). Random, so that tests running at once rarely
 * pick alike; the bind catches the rest. The kernel's pick when none below the range binds;
 * -1 if that fails too. */
static inline int free_port(void)
{
	int lo = 32768, hi = 60999, port = -1;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2)
			lo = 32768;
		fclose(f);
	}
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t r = ((uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32)) | 1;
	for (int i = 0; i < 200 && lo > 11024 && port < 0; i++)
		port = bind_loopback(10000 + (int)(test_rand(&r) % (uint64_t)(lo - 10000)));
	return port >= 0 ? port : bind_loopback(0);
}

/* A checksum independent of every mori code path: FNV-1a over 8-byte words, then the tail. */
static inline uint64_t test_hash(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	if (!h)
		h = 1469598103934665603ull;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, b + i, 8);
		h = (h ^ w) * 1099511628211ull;
	}
	for (; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* In a Check test: a call that must succeed, with the library's reason when it does not. */
#define OK(x)                                                                                    \
	do {                                                                                     \
		int _r = (x);                                                                    \
		ck_assert_msg(_r == MORI_OK, "%s -> %s (%s)", #x, mori_strerror(_r),            \
			      mori_client_last_error(NULL));                                    \
	} while (0)

#ifdef CHECK_H
/* A test binary's main: run the suite, exit 1 if any test failed. */
static inline int run_suite(Suite *s)
{
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}

/* A case of suite s, its tests (added by the caller) each between setup and teardown in the
 * test's own process (a checked fixture) and ended after timeout_s seconds. */
static inline TCase *suite_fixture_case(Suite *s, const char *name, void (*setup)(void), void (*teardown)(void),
					double timeout_s)
{
	TCase *t = tcase_create(name);
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, timeout_s);
	suite_add_tcase(s, t);
	return t;
}
#endif

/* 4 KiB writes from l to r, one after another, until one fails (r's owner died: its handle goes
 * stale) or within_us passed. The failing code, MORI_OK if none failed. */
static inline int write_until_refused(mori_mem *l, mori_mem *r, uint64_t within_us)
{
	struct timespec t0, t;
	int rc = MORI_OK;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		mori_xfer *x;
		rc = mori_xfer_write(l, 0, r, 0, 4096, NULL, &x);
		if (rc == MORI_OK) {
			rc = mori_xfer_wait(x, 1000000);
			mori_xfer_free(x);
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (rc != MORI_OK ||
		    (uint64_t)(t.tv_sec - t0.tv_sec) * 1000000u + (uint64_t)(t.tv_nsec - t0.tv_nsec) / 1000 >= within_us)
			return rc;
		usleep(1000);
	}
}

/* test_hash over the local side of descriptors (idx NULL: descriptors in order). */
static inline uint64_t local_hash(const uint8_t *base, const mori_desc *d, const uint32_t *idx, size_t n)
{
	uint64_t hv = 0;
	for (size_t i = 0; i < n; i++) {
		const mori_desc *e = &d[idx ? idx[i] : i];
		hv = test_hash(hv, base + e->local_offset, e->length);
	}
	return hv;
}

/* What a process holds, to see that a daemon does not grow under a fuzzer: its resident memory
 * (VmRSS, KiB) and its open descriptors; -1 when /proc cannot say. */
static inline long proc_rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static inline int proc_fds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* TCP connections pid has not finished with: its sockets whose far end closed (CLOSE_WAIT) and
 * connections waiting in its listeners' accept queues; -1 when /proc cannot say. 0 means every
 * connection a peer made and dropped has been read to its end (and counted) by pid. */
static inline int proc_tcp_unfinished(pid_t pid)
{
	char path[300], link[64];
	unsigned long inodes[1024];
	int ni = 0;
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d)) && ni < 1024;) {
		char fdp[600];
		snprintf(fdp, sizeof(fdp), "%s/%s", path, e->d_name);
		ssize_t n = readlink(fdp, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = 0;
			if (sscanf(link, "socket:[%lu]", &inodes[ni]) == 1)
				ni++;
		}
	}
	closedir(d);
	int unfinished = 0;
	static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	for (int t = 0; t < 2; t++) {
		FILE *f = fopen(tables[t], "r");
		char line[512];
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f)) {
			unsigned st, txq, rxq;
			unsigned long inode;
			/* sl local rem st tx_queue:rx_queue tr:when retrnsmt uid timeout inode */
			if (sscanf(line, " %*s %*s %*s %x %x:%x %*s %*s %*s %*s %lu", &st, &txq, &rxq, &inode) != 4)
				continue;
			for (int i = 0; i < ni; i++)
				if (inodes[i] == inode) {
					if (st == 0x08) /* CLOSE_WAIT */
						unfinished++;
					else if (st == 0x0A) /* LISTEN: rx_queue is the accept queue */
						unfinished += (int)rxq;
				}
		}
		fclose(f);
	}
	return unfinished;
}
#endif
