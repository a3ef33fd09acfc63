/* A client lives as long as its process, not its session socket (tester3 D0, D0b): fork()
 * copies the socket, and a copy kept by a child must not keep a dead client's PEs, regions and
 * names alive (nor leave morid reaching a reused pid by cross-memory attach). The holder here
 * is a raw clone (no atfork handlers, as a hostile or exotic child), so morid's pidfd alone
 * must see the death; a plain fork() child must hold none of the client's descriptors. A
 * same-node opener of memory reached by cross-memory attach gets the owner's pidfd from morid. */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "harness.h"
#include "ctl_harness.h"
#include "node_harness.h"
#include "mori_shmem.h"

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A process that keeps all its parent's descriptors (the session socket among them) and runs
 * none of libmori's fork handling: a raw clone. It sleeps until killed, 30 s at most (alarm,
 * not child_deadline: PDEATHSIG would end it with its parent, the very case under test). */
static pid_t holder(void)
{
	pid_t h = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	if (h == 0) {
		signal(SIGALRM, SIG_DFL);
		alarm(30);
		for (;;)
			pause();
	}
	return h;
}

static void daemon_counts(uint32_t *clients, uint32_t *regions)
{
	Mori__Reply *rep = ctl_status(D.dir);
	*clients = rep->status->clients;
	*regions = rep->status->regions;
	mori__reply__free_unpacked(rep, NULL);
}

static int log_has(const char *what)
{
	static char buf[1 << 20];
	int fd = open(D.log, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return strstr(buf, what) != NULL;
}

/* Mark the open descriptors below FD_SCAN in open; with was, return the one open now that was
 * not then (-1 if none). */
#define FD_SCAN 1024
static int fds_new(char *open, const char *was)
{
	int got = -1;
	for (int fd = 0; fd < FD_SCAN; fd++) {
		open[fd] = fcntl(fd, F_GETFD) != -1;
		if (was && open[fd] && !was[fd])
			got = fd;
	}
	return got;
}

static int fdinfo_has(int fd, const char *what)
{
	char p[64], buf[1024];
	snprintf(p, sizeof(p), "/proc/self/fdinfo/%d", fd);
	int f = open(p, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return 0;
	ssize_t n = read(f, buf, sizeof(buf) - 1);
	close(f);
	buf[n > 0 ? n : 0] = 0;
	return strstr(buf, what) != NULL;
}

/* In an owner's child: byte j of buf is j * mul + add; a client "owner" at dir's daemon registers
 * buf and publishes it as name. Not 0 when a step failed. */
static int publish_pattern(const char *dir, uint8_t *buf, size_t len, unsigned mul, unsigned add, const char *name)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(i * mul + add);
	mori_client *c;
	mori_mem *m;
	return mori_client_open(dir, "owner", &c) || mori_mem_register(c, buf, len, MORI_MEM_HOST, &m) ||
	       mori_mem_publish(m, name);
}

/* Read len bytes at off of r (publish_pattern's buffer, byte j being j * mul + add) into mine, the
 * buffer of l, waiting wait_us at most; every byte must be the owner's. */
static void read_checked(mori_mem *l, const uint8_t *mine, size_t len, mori_mem *r, uint64_t off, int64_t wait_us,
			 unsigned mul, unsigned add)
{
	mori_xfer *x;
	OK(mori_xfer_read(l, 0, r, off, len, NULL, &x));
	OK(mori_xfer_wait(x, wait_us));
	mori_xfer_free(x);
	for (size_t i = 0; i < len; i++)
		ck_assert_msg(mine[i] == (uint8_t)((i + off) * mul + add), "byte %zu: %u", i, mine[i]);
}

/* D0b: PE 1 registers and publishes memory, leaves a holder of its socket behind and dies; PE 0's
 * barrier ends with MORI_EPEERDEAD at once (not at the group's 20 s deadline), and morid lists
 * neither the client nor its region and name any more, while the holder still has the socket. */
START_TEST(pe_dies_while_socket_held)
{
	int pfd[2];
	ck_assert_int_eq(pipe(pfd), 0);
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 1u << 20;
	o.timeout_us = 20000000;
	pid_t pe1 = fork();
	if (pe1 == 0) {
		child_deadline(30);
		close(pfd[0]);
		static char buf[65536];
		mori_client *c;
		mori_group *g;
		mori_mem *m;
		if (mori_client_open(D.dir, "pe1", &c) || mori_shmem_init(c, "pidfd", 1, 2, &o, &g))
			_exit(10);
		if (mori_mem_register(c, buf, sizeof(buf), MORI_MEM_HOST, &m) || mori_mem_publish(m, "pidfd/pe1"))
			_exit(11);
		pid_t h = holder();
		if (h < 0 || write(pfd[1], &h, sizeof(h)) != sizeof(h))
			_exit(12);
		_exit(0); /* a death: no leave, no close */
	}
	close(pfd[1]);
	mori_client *c;
	mori_group *g;
	OK(mori_client_open(D.dir, "pe0", &c));
	OK(mori_shmem_init(c, "pidfd", 0, 2, &o, &g));
	pid_t h = 0;
	ck_assert_int_eq(read(pfd[0], &h, sizeof(h)), sizeof(h));
	int st;
	ck_assert_int_eq(waitpid(pe1, &st, 0), pe1);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "PE 1 failed before dying (exit %d)",
		      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	double t0 = now_s();
	int rc = mori_shmem_barrier_all(g);
	double dt = now_s() - t0;
	int held = kill(h, 0) == 0; /* the socket really was still open elsewhere */
	ck_assert_msg(rc == MORI_EPEERDEAD && dt < 3.0, "barrier: %s after %.1f s (%s); want MORI_EPEERDEAD within 3 s",
		      mori_strerror(rc), dt, mori_client_last_error(c));
	ck_assert_msg(held, "the holder %d was gone: the test proved nothing", (int)h);
	mori_mem *m = NULL;
	rc = mori_mem_open_remote(c, NULL, "pidfd/pe1", &m);
	ck_assert_msg(rc != MORI_OK, "the dead PE's published name still opens");
	mori_shmem_finalize(g);
	uint32_t clients, regions; /* its region goes with it; ours (the heap) went with leave */
	int gone = ctl_wait_clients(D.dir, 1, 0, 2000, &clients, &regions);
	kill(h, SIGKILL);
	ck_assert_msg(gone, "morid still lists %u clients, %u regions (want 1, 0)", clients, regions);
	ck_assert_msg(log_has("its session socket is still open in another process"), "no log line for the exit");
	mori_client_close(c);
}
END_TEST

/* D0: an owner of memory reached by cross-memory attach (no fd) exits while a holder keeps its
 * socket: its region is dropped then, so nothing reaches that pid again (after reuse it would be
 * another process). Before, a read sees the owner's bytes; after, reads fail and the name is gone. */
START_TEST(cma_owner_exits_while_socket_held)
{
	struct child_pipes P;
	pid_t owner = child_fork(30, &P);
	ck_assert_int_ge(owner, 0);
	if (owner == 0) {
		static uint8_t buf[65536];
		if (publish_pattern(D.dir, buf, sizeof(buf), 7, 3, "pidfd/cma"))
			_exit(10);
		pid_t h = holder();
		char x;
		if (h < 0 || write(P.up[1], &h, sizeof(h)) != sizeof(h) || read(P.go[0], &x, 1) != 1)
			_exit(12);
		_exit(0);
	}
	pid_t h = 0;
	ck_assert_int_eq(read(P.up[0], &h, sizeof(h)), sizeof(h));
	mori_client *c;
	mori_mem *r, *l;
	static uint8_t mine[4096];
	OK(mori_client_open(D.dir, "reader", &c));
	OK(mori_mem_register(c, mine, sizeof(mine), MORI_MEM_HOST, &l));
	static char was[FD_SCAN], now[FD_SCAN];
	fds_new(was, NULL);
	OK(mori_mem_open_remote(c, NULL, "pidfd/cma", &r));
	/* the opener copies by cross-memory attach itself: morid gave it a pidfd of the owner (beside
	 * it, the eventfd of the library's watcher thread, which acknowledges revocations) */
	ck_assert_msg(fds_new(now, was) >= 0, "no descriptor came with the open reply");
	char want[32];
	snprintf(want, sizeof(want), "Pid:\t%d\n", (int)owner);
	int pfd = -1;
	for (int fd = 0; fd < FD_SCAN && pfd < 0; fd++)
		if (now[fd] && !was[fd] && fdinfo_has(fd, want))
			pfd = fd;
	ck_assert_msg(pfd >= 0, "no new descriptor is a pidfd of the owner %d", (int)owner);
	read_checked(l, mine, sizeof(mine), r, 100, 5000000, 7, 3);
	ck_assert_int_eq(write(P.go[1], "x", 1), 1);
	int st;
	ck_assert_int_eq(waitpid(owner, &st, 0), owner);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "owner failed (exit %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	uint32_t clients, regions;
	int gone = ctl_wait_clients(D.dir, 1, 1, 2000, &clients, &regions);
	int held = kill(h, 0) == 0;
	kill(h, SIGKILL);
	ck_assert_msg(held, "the holder %d was gone: the test proved nothing", (int)h);
	ck_assert_msg(gone, "morid still lists %u clients, %u regions (want 1, 1: ours)", clients, regions);
	mori_xfer *x;
	int rc = mori_xfer_read(l, 0, r, 0, sizeof(mine), NULL, &x);
	if (rc == MORI_OK) {
		rc = mori_xfer_wait(x, 5000000);
		mori_xfer_free(x);
	}
	ck_assert_msg(rc == MORI_ESTALE || rc == MORI_EPEERDEAD, "read after the owner's exit: %s (%s)",
		      mori_strerror(rc), mori_client_last_error(c));
	mori_mem *again = NULL;
	ck_assert_msg(mori_mem_open_remote(c, NULL, "pidfd/cma", &again) != MORI_OK, "the name still opens");
	mori_mem_deregister(r);
	ck_assert_msg(fcntl(pfd, F_GETFD) == -1, "the owner's pidfd %d stays open after the close", pfd);
	mori_mem_deregister(l);
	mori_client_close(c);
}
END_TEST

/* libmori's fork handler: a plain fork() child holds none of the client's descriptors (socket,
 * ring, doorbells), its calls stay MORI_ESTALE, and its mori_client_close closes nothing the
 * child opened since (numbers reused); the parent's client works on. */
START_TEST(fork_child_lets_go)
{
	enum { SCAN = 1024 };
	static char before[SCAN];
	for (int fd = 0; fd < SCAN; fd++)
		before[fd] = fcntl(fd, F_GETFD) != -1;
	mori_client *c;
	OK(mori_client_open(D.dir, "parent", &c));
	int mine[SCAN], n = 0;
	for (int fd = 0; fd < SCAN; fd++)
		if (!before[fd] && fcntl(fd, F_GETFD) != -1)
			mine[n++] = fd;
	ck_assert_msg(n >= 4, "the client holds %d descriptors, want at least 4 (socket, ring, 2 doorbells)", n);
	pid_t child = fork();
	if (child == 0) {
		child_deadline(10);
		for (int i = 0; i < n; i++)
			if (fcntl(mine[i], F_GETFD) != -1)
				_exit(20 + i);
		mori_mem *m;
		if (mori_mem_alloc(c, 4096, MORI_MEM_HOST, &m) != MORI_ESTALE)
			_exit(30);
		int p[2];
		if (pipe(p) != 0)
			_exit(31);
		mori_client_close(c); /* the child's copy: must not close p (likely a reused number) */
		if (fcntl(p[0], F_GETFD) == -1 || fcntl(p[1], F_GETFD) == -1)
			_exit(32);
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: exit %d (20+i: descriptor i still open; 30: not "
							 "ESTALE; 32: its close closed the child's own fds)",
		      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	mori_mem *m;
	OK(mori_mem_alloc(c, 4096, MORI_MEM_HOST, &m));
	uint32_t clients, regions;
	daemon_counts(&clients, &regions);
	ck_assert_msg(clients == 1 && regions == 1, "after the child: %u clients, %u regions (want 1, 1)", clients,
		      regions);
	mori_mem_deregister(m);
	mori_client_close(c);
}
END_TEST

/* A CMA owner of uid 65534 comes to run as root, as a setuid exec would make it (its socket kept
 * open; here seteuid(0) with the saved uid root it was started with): morid, root with ptrace
 * rights, must stop reaching it by cross-memory attach, since uid 65534 could not. A cross-node
 * read (morid B copies from the owner) works, then fails. */
START_TEST(cma_owner_changes_uid)
{
	if (geteuid() != 0) {
		printf("# cma_owner_changes_uid: skipped: needs root (to drop the owner to uid 65534)\n");
		return;
	}
	static const char *const allow[] = {"--allow-uids", "0,65534", "--socket-mode", "0666", NULL};
	struct test_node A, B;
	node_pair_init(&A, &B, "pidfd", 7100, 0);
	A.args = B.args = allow;
	ck_assert_int_eq(node_pair_start(&A, &B, NULL), 0);
	ck_assert_int_eq(chmod(B.dir, 0755), 0); /* the owner's uid reaches B's socket */
	struct child_pipes P;
	pid_t owner = child_as_uid(65534, 0, 30, &P);
	ck_assert_int_ge(owner, 0);
	if (owner == 0) {
		static uint8_t buf[65536];
		if (publish_pattern(B.dir, buf, sizeof(buf), 5, 1, "pidfd/nd"))
			_exit(10);
		char x;
		if (write(P.up[1], "r", 1) != 1 || read(P.go[0], &x, 1) != 1 || seteuid(0) != 0 ||
		    write(P.up[1], "n", 1) != 1 || read(P.go[0], &x, 1) != 1)
			_exit(11);
		_exit(0);
	}
	char x;
	if (read(P.up[0], &x, 1) != 1) {
		int st = 0;
		waitpid(owner, &st, 0);
		ck_abort_msg("the owner (uid 65534) did not register: exit %d (%d setresuid, 10 client/register/"
			     "publish)", WIFEXITED(st) ? WEXITSTATUS(st) : -1, CHILD_UID_EXIT);
	}
	mori_client *c;
	mori_mem *l, *r;
	static uint8_t mine[4096];
	OK(mori_client_open(A.dir, "reader", &c));
	OK(mori_mem_register(c, mine, sizeof(mine), MORI_MEM_HOST, &l));
	OK(mori_mem_open_remote(c, B.addr, "pidfd/nd", &r));
	read_checked(l, mine, sizeof(mine), r, 64, 10000000, 5, 1);
	ck_assert_int_eq(write(P.go[1], "g", 1), 1);
	ck_assert_int_eq(read(P.up[0], &x, 1), 1); /* the owner runs as root now, and lives */
	memset(mine, 0, sizeof(mine));
	mori_xfer *t;
	int rc = mori_xfer_read(l, 0, r, 64, sizeof(mine), NULL, &t);
	if (rc == MORI_OK) {
		rc = mori_xfer_wait(t, 10000000);
		mori_xfer_free(t);
	}
	int untouched = 1;
	for (size_t i = 0; i < sizeof(mine); i++)
		untouched &= mine[i] == 0;
	ck_assert_int_eq(write(P.go[1], "e", 1), 1);
	int st;
	ck_assert_int_eq(waitpid(owner, &st, 0), owner);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "owner failed (exit %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	ck_assert_msg(rc == MORI_EPEERDEAD, "read from the owner now root: %s (%s)", mori_strerror(rc),
		      mori_client_last_error(c));
	ck_assert_msg(untouched, "bytes of the owner now root arrived");
	char line[128];
	snprintf(line, sizeof(line), "no longer runs as uid 65534");
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "grep -q '%s' '%s'", line, B.log);
	ck_assert_msg(system(cmd) == 0, "morid B's log does not say why (%s)", B.log);
	mori_mem_deregister(r);
	mori_mem_deregister(l);
	mori_client_close(c);
	ck_assert_int_eq(node_pair_stop(&A, &B), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("client_pidfd");
	TCase *t = tcase_create("client_pidfd");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, pe_dies_while_socket_held);
	tcase_add_test(t, cma_owner_exits_while_socket_held);
	tcase_add_test(t, fork_child_lets_go);
	suite_add_tcase(s, t);
	TCase *x = tcase_create("two nodes");
	tcase_set_timeout(x, 60);
	tcase_add_test(x, cma_owner_changes_uid);
	suite_add_tcase(s, x);
	return run_suite(s);
}
