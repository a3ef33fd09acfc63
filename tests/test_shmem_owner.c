/* MORI-SHMEM groups belong to a uid (tester's defect 1): a process of another allowed uid could
 * join a forming group as its missing rank, get every heap of the job mapped and read or write
 * it, and `moractl groups` showed every group's name (the unique-id form's random names too) to
 * every allowed uid. Now the uid of a group's first PE owns it: a join by another uid is refused
 * with MORI_EPERM naming the owner (on the joiner's node, and by the root daemon for a joiner on
 * another node, the group forming on), root may join any group, and a listing shows another
 * uid only its own groups. PEs are forked processes that drop to uids 65534 and 65533; the test
 * is skipped unless it runs as root. */
#include <check.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness.h"
#include "ctl_harness.h"
#include "mori_shmem.h"
#include "wire.h"

#define OWNER 65534
#define OTHER 65533

static const char *const allow[] = {"--allow-uids", "0,65534,65533", "--socket-mode", "0666", NULL};

struct result {
	int rc;
	int groups;        /* groups a listing showed */
	char msg[512];
};
static struct result *RES; /* [4], shared with the children */

static void drop_to(uid_t uid)
{
	if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)
		_exit(99);
}

/* Join name as rank of 2 at the daemon of dir (root: the root daemon's address, or NULL); the
 * join's code and message into *res; when it succeeded, a barrier with the other PE, then leave. */
static void join(const char *dir, const char *root, const char *name, int rank, int64_t timeout_us,
		 struct result *res)
{
	mori_client *c;
	res->rc = mori_client_open(dir, "owner", &c);
	if (res->rc) {
		snprintf(res->msg, sizeof(res->msg), "open: %s", mori_strerror(res->rc));
		return;
	}
	mori_group_opts o;
	mori_group_opts_init(&o);
	o.heap_size = 1u << 20;
	o.timeout_us = timeout_us;
	o.root = root;
	mori_group *g = NULL;
	res->rc = mori_group_join(c, name, rank, 2, &o, &g);
	if (res->rc == MORI_OK) /* both PEs mapped each other's heap before either leaves */
		res->rc = mori_shmem_barrier_all(g);
	snprintf(res->msg, sizeof(res->msg), "%s", mori_client_last_error(c));
	if (g)
		mori_group_leave(g);
	mori_client_close(c);
}

/* How many groups of name dir's daemon lists to this process. */
static int listed(const char *dir, const char *name)
{
	Mori__Reply *rep = ctl_list(dir, 5);
	int n = 0;
	for (size_t i = 0; i < rep->list->n_groups; i++)
		n += !strcmp(rep->list->groups[i]->name, name);
	mori__reply__free_unpacked(rep, NULL);
	return n;
}

/* A child as uid that joins name as rank (dir, root as join()); returns its pid. */
static pid_t join_as(uid_t uid, const char *dir, const char *root, const char *name, int rank, int64_t timeout_us,
		     struct result *res)
{
	pid_t p = fork();
	if (p == 0) {
		drop_to(uid);
		join(dir, root, name, rank, timeout_us, res);
		_exit(0);
	}
	return p;
}

/* How many groups named name `moractl --json groups` shows to uid (a child execs moractl: nng,
 * which this process used, does not run in a forked child). */
static int listed_as(uid_t uid, const char *dir, const char *name)
{
	char out[] = "/tmp/mori-test-owner-XXXXXX", moractl[512], want[128];
	int fd = mkstemp(out);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fchmod(fd, 0666), 0);
	snprintf(moractl, sizeof(moractl), "%s/moractl", build_dir());
	pid_t p = fork();
	if (p == 0) {
		drop_to(uid);
		dup2(fd, 1);
		execl(moractl, moractl, "--runtime-dir", dir, "--json", "groups", (char *)NULL);
		_exit(127);
	}
	int st;
	ck_assert_int_eq(waitpid(p, &st, 0), p);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "moractl groups as uid %u: status %d", uid, st);
	static char buf[65536];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	unlink(out);
	ck_assert_int_ge(n, 0);
	buf[n] = 0;
	snprintf(want, sizeof(want), "\"%s\"", name);
	int k = 0;
	for (const char *q = buf; (q = strstr(q, want)); q++)
		k++;
	return k;
}

static void wait_ok(pid_t p)
{
	int st;
	ck_assert_int_eq(waitpid(p, &st, 0), p);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child exited with status %d", st);
}

/* Wait (5 s at most) until root sees the group forming at dir's daemon. */
static void wait_listed(const char *dir, const char *name)
{
	for (int i = 0; i < 500 && listed(dir, name) == 0; i++)
		usleep(10000);
	ck_assert_int_ge(listed(dir, name), 1);
}

static void setup(void)
{
	if (getuid() != 0) {
		printf("skipped: needs root (PEs run as uids %d and %d)\n", OWNER, OTHER);
		exit(77);
	}
	RES = mmap(NULL, 4 * sizeof(*RES), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(RES, MAP_FAILED);
	memset(RES, 0, 4 * sizeof(*RES));
}

/* One node: uid 65534's forming group refuses uid 65533 and stays hidden from it; root joins. */
START_TEST(local_join_refused)
{
	struct test_daemon D;
	ck_assert_int_eq(daemon_start(&D, allow), 0);
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	pid_t a = join_as(OWNER, D.dir, NULL, "own", 0, 15000000, &RES[0]);
	wait_listed(D.dir, "own");
	ck_assert_int_eq(listed_as(OTHER, D.dir, "own"), 0);
	ck_assert_int_ge(listed_as(OWNER, D.dir, "own"), 1); /* the root's entry, and the member group's while forming */
	pid_t b = join_as(OTHER, D.dir, NULL, "own", 1, 3000000, &RES[1]);
	wait_ok(b);
	ck_assert_msg(RES[1].rc == MORI_EPERM && strstr(RES[1].msg, "belongs to uid 65534"),
		      "uid %d's join of uid %d's group: %s (%s)", OTHER, OWNER, mori_strerror(RES[1].rc), RES[1].msg);
	/* the group is unharmed: root completes it */
	join(D.dir, NULL, "own", 1, 10000000, &RES[2]);
	wait_ok(a);
	ck_assert_msg(RES[2].rc == MORI_OK, "root's join: %s (%s)", mori_strerror(RES[2].rc), RES[2].msg);
	ck_assert_msg(RES[0].rc == MORI_OK, "the owner's join: %s (%s)", mori_strerror(RES[0].rc), RES[0].msg);
	int st = daemon_stop(&D);
	daemon_cleanup(&D);
	ck_assert_int_eq(st, 0);
}
END_TEST

/* Two daemons: the intruder joins at B, where nothing of the group is; the root (A) refuses it. */
START_TEST(remote_join_refused_by_root)
{
	struct test_daemon A, B;
	char la[64], lb[64], addr[64];
	int pa = free_port(), pb = free_port();
	while (pb == pa)
		pb = free_port();
	snprintf(la, sizeof(la), "127.0.0.1:%d", pa);
	snprintf(lb, sizeof(lb), "127.0.0.1:%d", pb);
	snprintf(addr, sizeof(addr), "%s", la);
	const char *ea[] = {"--allow-uids", "0,65534,65533", "--socket-mode", "0666", "--listen", la, NULL};
	const char *eb[] = {"--allow-uids", "0,65534,65533", "--socket-mode", "0666", "--listen", lb, NULL};
	ck_assert_int_eq(daemon_start(&A, ea), 0);
	ck_assert_int_eq(daemon_start(&B, eb), 0);
	ck_assert_int_eq(chmod(A.dir, 0755), 0);
	ck_assert_int_eq(chmod(B.dir, 0755), 0);
	pid_t a = join_as(OWNER, A.dir, addr, "xown", 0, 20000000, &RES[0]);
	wait_listed(A.dir, "xown");
	pid_t b = join_as(OTHER, B.dir, addr, "xown", 1, 5000000, &RES[1]);
	wait_ok(b);
	ck_assert_msg(RES[1].rc == MORI_EPERM && strstr(RES[1].msg, "belongs to uid 65534"),
		      "uid %d's join on another node: %s (%s)", OTHER, mori_strerror(RES[1].rc), RES[1].msg);
	ck_assert_int_eq(listed_as(OTHER, A.dir, "xown"), 0);
	join(B.dir, addr, "xown", 1, 15000000, &RES[2]);
	wait_ok(a);
	ck_assert_msg(RES[2].rc == MORI_OK, "root's join from B: %s (%s)", mori_strerror(RES[2].rc), RES[2].msg);
	ck_assert_msg(RES[0].rc == MORI_OK, "the owner's join: %s (%s)", mori_strerror(RES[0].rc), RES[0].msg);
	int sa = daemon_stop(&A), sb = daemon_stop(&B);
	daemon_cleanup(&A);
	daemon_cleanup(&B);
	ck_assert_int_eq(sa, 0);
	ck_assert_int_eq(sb, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shmem_owner");
	TCase *t = tcase_create("shmem_owner");
	tcase_add_unchecked_fixture(t, setup, NULL);
	tcase_set_timeout(t, 90);
	tcase_add_test(t, local_join_refused);
	tcase_add_test(t, remote_join_refused_by_root);
	suite_add_tcase(s, t);
	return run_suite(s);
}
