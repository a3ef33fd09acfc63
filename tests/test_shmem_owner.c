/* MORI-SHMEM groups are per uid. Tester's defect 1: a process of another allowed uid could join
 * a forming group as its missing rank, get every heap of the job mapped and read or write it, and
 * `moractl groups` showed every group's name to every allowed uid. Then a group became its first
 * PE's uid's, and tester3's D12 found the hole that left: names were still global to the node,
 * so another uid could take a job's (predictable) name first and the job's PEs got MORI_EPERM.
 * Now names are scoped by uid, on each node and at the root daemon (keyed by (uid, name), the uid
 * as the joiner's daemon saw it): uid A's "job" and uid B's "job" are two groups that form side
 * by side, with their own heaps and allocators; another uid's join (root's too) never reaches a
 * group, and a listing shows another uid only its own groups (root sees all, with their uids).
 * PEs are forked processes that drop to uids 65534 and 65533; the test is skipped unless it runs
 * as root. The test process starts no threads before it forks (no nng here: listings go through
 * moractl in a child). */
#include <check.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness.h"
#include "mori_shmem.h"
#include "wire.h"

#define OWNER 65534
#define OTHER 65533
#define NRES 8

static const char *const allow[] = {"--allow-uids", "0,65534,65533", "--socket-mode", "0666", NULL};

struct result {
	int rc;
	int groups;        /* groups a listing showed */
	int64_t off_a, off_b; /* pair(): offsets of its allocations (-1: none) */
	int bad;           /* pair(): bytes of the peer's put that were not this uid's */
	char msg[512];
};
static struct result *RES; /* [NRES], shared with the children */
static volatile int *READY, *GO; /* pair(): PEs formed and checked; the parent's go to leave */

/* Join name as rank of 2 at the daemon of dir (root: the root daemon's address, or NULL); the
 * join's code and message into *res; when it succeeded, a barrier with the other PE, then leave. */
static void join_n(const char *dir, const char *root, const char *name, int rank, int world, int64_t timeout_us,
		   struct result *res)
{
	mori_client *c;
	res->rc = mori_client_open(dir, "owner", &c);
	if (res->rc) {
		snprintf(res->msg, sizeof(res->msg), "open: %s", mori_strerror(res->rc));
		return;
	}
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 1u << 20;
	o.timeout_us = timeout_us;
	o.root = root;
	mori_group *g = NULL;
	res->rc = mori_shmem_init(c, name, rank, world, &o, &g);
	if (res->rc == MORI_OK) /* both PEs mapped each other's heap before either leaves */
		res->rc = mori_shmem_barrier_all(g);
	snprintf(res->msg, sizeof(res->msg), "%s", mori_client_last_error(c));
	if (g)
		mori_shmem_finalize(g);
	mori_client_close(c);
}

static int uid_byte(uid_t uid)
{
	return (int)(uid & 0xff) ^ 0x5a;
}

/* PE rank of 2 of uid's group name: allocations that differ by uid (OWNER 4 KiB then 8 KiB, any
 * other uid 8 KiB only: mixed into one allocator they would disagree, or land at one offset),
 * rank 0 puts uid_byte(uid) over rank 1's 8 KiB, rank 1 counts the bytes that are not that; then
 * it reports, waits for the parent's go (the groups stay while the parent lists them), leaves. */
static void pair(const char *dir, const char *root, const char *name, int rank, uid_t uid, struct result *res)
{
	mori_client *c;
	mori_group *g = NULL;
	void *a = NULL, *b = NULL;
	res->off_a = res->off_b = -1;
	res->bad = -1;
	if ((res->rc = mori_client_open(dir, "pair", &c)) != MORI_OK) {
		snprintf(res->msg, sizeof(res->msg), "open: %s", mori_strerror(res->rc));
		return;
	}
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 1u << 20;
	o.timeout_us = 20000000;
	o.root = root;
	res->rc = mori_shmem_init(c, name, rank, 2, &o, &g);
	if (res->rc == MORI_OK && uid == OWNER && (res->rc = mori_shmem_malloc(g, 4096, 0, &a)) == MORI_OK)
		res->off_a = mori_shmem_offset(g, a);
	if (res->rc == MORI_OK && (res->rc = mori_shmem_malloc(g, 8192, 0, &b)) == MORI_OK) {
		res->off_b = mori_shmem_offset(g, b);
		memset(b, 0, 8192);
		res->rc = mori_shmem_barrier_all(g);
	}
	if (res->rc == MORI_OK && rank == 0) {
		static unsigned char src[8192];
		memset(src, uid_byte(uid), sizeof(src));
		res->rc = mori_shmem_putmem(g, b, src, sizeof(src), 1);
	}
	if (res->rc == MORI_OK)
		res->rc = mori_shmem_barrier_all(g); /* rank 0's put is complete at rank 1 */
	if (res->rc == MORI_OK) {
		res->bad = 0;
		for (int i = 0; i < 8192 && rank == 1; i++)
			res->bad += ((unsigned char *)b)[i] != uid_byte(uid);
	}
	snprintf(res->msg, sizeof(res->msg), "%s", res->rc ? mori_client_last_error(c) : "");
	__atomic_add_fetch(READY, 1, __ATOMIC_SEQ_CST);
	while (!__atomic_load_n(GO, __ATOMIC_ACQUIRE))
		usleep(5000); /* bounded by the child's deadline */
	if (g)
		mori_shmem_finalize(g);
	mori_client_close(c);
}

static pid_t pair_as(uid_t uid, const char *dir, const char *root, const char *name, int rank, struct result *res)
{
	pid_t p = child_as_uid(uid, uid, 60, NULL);
	if (p == 0) {
		pair(dir, root, name, rank, uid, res);
		_exit(0);
	}
	return p;
}

/* How often want occurs in what `moractl [--json] groups` shows to uid (a child execs moractl:
 * this process runs no nng, whose threads would be in its forks). */
static int moractl_count(uid_t uid, const char *dir, int json, const char *want)
{
	char out[] = "/tmp/mori-test-owner-XXXXXX", moractl[512];
	int fd = mkstemp(out);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fchmod(fd, 0666), 0);
	snprintf(moractl, sizeof(moractl), "%s/moractl", build_dir());
	pid_t p = child_as_uid(uid, uid, 30, NULL);
	if (p == 0) {
		dup2(fd, 1);
		if (json)
			execl(moractl, moractl, "--runtime-dir", dir, "--json", "groups", (char *)NULL);
		else
			execl(moractl, moractl, "--runtime-dir", dir, "groups", (char *)NULL);
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
	int k = 0;
	for (const char *q = buf; (q = strstr(q, want)); q++)
		k++;
	return k;
}

/* How many groups named name `moractl --json groups` shows to uid. */
static int listed_as(uid_t uid, const char *dir, const char *name)
{
	char want[160];
	snprintf(want, sizeof(want), "\"%s\"", name);
	return moractl_count(uid, dir, 1, want);
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
	for (int i = 0; i < 100 && listed_as(0, dir, name) == 0; i++)
		usleep(50000);
	ck_assert_int_ge(listed_as(0, dir, name), 1);
}

/* Until n pair() PEs reported (30 s at most). */
static void wait_ready(int n)
{
	for (int i = 0; i < 3000 && __atomic_load_n(READY, __ATOMIC_ACQUIRE) < n; i++)
		usleep(10000);
	ck_assert_int_eq(__atomic_load_n(READY, __ATOMIC_ACQUIRE), n);
}

/* Each uid's pair formed its own group: both succeeded, OWNER's second allocation sits after its
 * first, the other uid's first at the same offset as OWNER's first (a fresh allocator each), and
 * rank 1 of each saw only its own uid's bytes. */
static void pairs_separate(const struct result *own, const struct result *oth)
{
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(own[i].rc == MORI_OK, "uid %d PE %d: %s (%s)", OWNER, i, mori_strerror(own[i].rc), own[i].msg);
		ck_assert_msg(oth[i].rc == MORI_OK, "uid %d PE %d: %s (%s)", OTHER, i, mori_strerror(oth[i].rc), oth[i].msg);
		ck_assert_int_ge(own[i].off_a, 0);
		ck_assert_int_ge(own[i].off_b, own[i].off_a + 4096);
		ck_assert_int_eq(oth[i].off_b, own[i].off_a);
	}
	ck_assert_int_eq(own[1].bad, 0);
	ck_assert_int_eq(oth[1].bad, 0);
}

static void setup(void)
{
	if (getuid() != 0) {
		printf("skipped: needs root (PEs run as uids %d and %d)\n", OWNER, OTHER);
		exit(77);
	}
	size_t len = NRES * sizeof(*RES) + 2 * sizeof(int);
	RES = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(RES, MAP_FAILED);
	memset(RES, 0, len);
	READY = (volatile int *)(RES + NRES);
	GO = READY + 1;
}

/* A child as uid that joins name as rank of world (join_n); returns its pid. */
static pid_t join_n_as(uid_t uid, const char *dir, const char *root, const char *name, int rank, int world,
		       int64_t timeout_us, struct result *res)
{
	pid_t p = child_as_uid(uid, uid, 60, NULL);
	if (p == 0) {
		join_n(dir, root, name, rank, world, timeout_us, res);
		_exit(0);
	}
	return p;
}

/* A child as uid that joins name as rank of 2 (join_n_as); returns its pid. */
static pid_t join_as(uid_t uid, const char *dir, const char *root, const char *name, int rank, int64_t timeout_us,
		     struct result *res)
{
	return join_n_as(uid, dir, root, name, rank, 2, timeout_us, res);
}

static void reset(void)
{
	memset(RES, 0, NRES * sizeof(*RES));
	*READY = 0;
	*GO = 0;
}

/* Both PEs of a world-size mismatch are refused, and the reason names the world sizes. */
static void mismatch_refused(const struct result *r)
{
	for (int i = 0; i < 2; i++)
		ck_assert_msg(r[i].rc == MORI_EINVAL && strstr(r[i].msg, "world size"),
			      "PE %d of a world-size mismatch: %s (%s)", i, mori_strerror(r[i].rc), r[i].msg);
}

/* One node. uid 65533 takes the name "own" first (tester3's squat) and root joins "own" too:
 * each is a group of its own uid, hidden from uid 65534, whose two PEs then form their "own".
 * Meanwhile both uids form a "job" side by side, each with its own allocations and bytes. */
START_TEST(same_name_per_uid)
{
	struct test_daemon D;
	reset();
	ck_assert_int_eq(daemon_start(&D, allow), 0);
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	pid_t sq = join_as(OTHER, D.dir, NULL, "own", 0, 4000000, &RES[6]);
	pid_t rt = join_as(0, D.dir, NULL, "own", 1, 4000000, &RES[7]);
	wait_listed(D.dir, "own");
	ck_assert_int_eq(listed_as(OWNER, D.dir, "own"), 0); /* the squatter's is not uid 65534's business */
	pid_t p[6] = {pair_as(OWNER, D.dir, NULL, "job", 0, &RES[0]), pair_as(OTHER, D.dir, NULL, "job", 0, &RES[2]),
		      pair_as(OTHER, D.dir, NULL, "job", 1, &RES[3]), pair_as(OWNER, D.dir, NULL, "job", 1, &RES[1]),
		      join_as(OWNER, D.dir, NULL, "own", 0, 10000000, &RES[4]),
		      join_as(OWNER, D.dir, NULL, "own", 1, 10000000, &RES[5])};
	wait_ready(4);
	ck_assert_int_eq(listed_as(0, D.dir, "job"), 2);     /* root sees both uids' */
	ck_assert_int_eq(listed_as(OWNER, D.dir, "job"), 1); /* each uid its own */
	ck_assert_int_eq(listed_as(OTHER, D.dir, "job"), 1);
	/* the table says whose a group is where it is not the caller's */
	ck_assert_int_eq(moractl_count(0, D.dir, 0, "job (uid 65534)"), 1);
	ck_assert_int_eq(moractl_count(0, D.dir, 0, "job (uid 65533)"), 1);
	ck_assert_int_eq(moractl_count(OWNER, D.dir, 0, "(uid "), 0);
	ck_assert_int_eq(moractl_count(OWNER, D.dir, 0, "job "), 1);
	*GO = 1;
	for (int i = 0; i < 6; i++)
		wait_ok(p[i]);
	wait_ok(sq);
	wait_ok(rt);
	pairs_separate(&RES[0], &RES[2]);
	for (int i = 4; i < 6; i++)
		ck_assert_msg(RES[i].rc == MORI_OK, "uid %d's 'own' PE %d beside a squatter: %s (%s)", OWNER, i - 4,
			      mori_strerror(RES[i].rc), RES[i].msg);
	/* nobody of the squatter's uid or of root came: their groups never formed */
	ck_assert_msg(RES[6].rc == MORI_ETIMEDOUT, "the squatter: %s (%s)", mori_strerror(RES[6].rc), RES[6].msg);
	ck_assert_msg(RES[7].rc == MORI_ETIMEDOUT, "root's 'own': %s (%s)", mori_strerror(RES[7].rc), RES[7].msg);
	reset();
	pid_t m0 = join_n_as(OWNER, D.dir, NULL, "mis", 0, 2, 10000000, &RES[0]);
	wait_listed(D.dir, "mis");
	pid_t m1 = join_n_as(OWNER, D.dir, NULL, "mis", 1, 3, 10000000, &RES[1]);
	wait_ok(m0);
	wait_ok(m1);
	mismatch_refused(RES);
	int st = daemon_stop(&D);
	daemon_cleanup(&D);
	ck_assert_int_eq(st, 0);
}
END_TEST

/* Two daemons, A the root: both uids form "xjob" with a PE on each node at once; the root keys
 * them by (uid, name), so both form, apart. A world-size mismatch across nodes names its reason. */
START_TEST(same_name_per_uid_across_nodes)
{
	struct test_daemon A, B;
	char la[64], lb[64], addr[64];
	reset();
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
	pid_t p[4] = {pair_as(OTHER, B.dir, addr, "xjob", 1, &RES[3]), pair_as(OWNER, A.dir, addr, "xjob", 0, &RES[0]),
		      pair_as(OWNER, B.dir, addr, "xjob", 1, &RES[1]), pair_as(OTHER, A.dir, addr, "xjob", 0, &RES[2])};
	wait_ready(4);
	ck_assert_int_eq(listed_as(0, A.dir, "xjob"), 2);
	ck_assert_int_eq(listed_as(OTHER, A.dir, "xjob"), 1);
	*GO = 1;
	for (int i = 0; i < 4; i++)
		wait_ok(p[i]);
	pairs_separate(&RES[0], &RES[2]);
	reset();
	pid_t m0 = join_n_as(OWNER, A.dir, addr, "xmis", 0, 2, 10000000, &RES[0]);
	wait_listed(A.dir, "xmis");
	pid_t m1 = join_n_as(OWNER, B.dir, addr, "xmis", 1, 3, 10000000, &RES[1]);
	wait_ok(m0);
	wait_ok(m1);
	mismatch_refused(RES);
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
	tcase_add_test(t, same_name_per_uid);
	tcase_add_test(t, same_name_per_uid_across_nodes);
	suite_add_tcase(s, t);
	return run_suite(s);
}
