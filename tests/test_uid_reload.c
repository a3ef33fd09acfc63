/* allow_uids admits sessions: a reload that removes a uid from it detaches that
 * uid's live clients (their calls end with MORI_ECONN naming the reason, their published names
 * go) and leaves the others alone. Root only (it drops a client to uid 65534). */
#include <check.h>

#include "harness.h"
#include "mori.h"

START_TEST(reload_detaches_removed_uid)
{
	if (geteuid() != 0) {
		printf("# reload_detaches_removed_uid: skipped: needs root (to drop a client to uid 65534)\n");
		return;
	}
	char conf[64];
	snprintf(conf, sizeof(conf), "/tmp/mori-uidreload-%d.conf", (int)getpid());
	FILE *f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[morid]\nallow_uids = 0, 65534\nsocket_mode = 0666\n");
	fclose(f);
	const char *extra[] = {"--config", conf, NULL};
	struct test_daemon D;
	ck_assert_int_eq(daemon_start(&D, extra), 0);
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	struct child_pipes P;
	pid_t kid = child_as_uid(65534, 65534, 30, &P);
	ck_assert_int_ge(kid, 0);
	if (kid == 0) {
		mori_client *c;
		mori_mem *m, *m2 = NULL;
		char x;
		if (mori_client_open(D.dir, "removed", &c) || mori_mem_alloc(c, 4096, MORI_MEM_HOST, &m) ||
		    mori_mem_publish(m, "uidreload/a"))
			_exit(10);
		if (write(P.up[1], "r", 1) != 1 || read(P.go[0], &x, 1) != 1)
			_exit(11);
		int rc = mori_mem_alloc(c, 4096, MORI_MEM_HOST, &m2);
		const char *why = mori_client_last_error(c);
		_exit(rc == MORI_ECONN && strstr(why, "allow_uids") ? 0 : 12);
	}
	char x;
	ck_assert_int_eq(read(P.up[0], &x, 1), 1);
	mori_client *me;
	mori_mem *mine;
	OK(mori_client_open(D.dir, "stays", &me));
	OK(mori_mem_alloc(me, 4096, MORI_MEM_HOST, &mine));
	f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[morid]\nallow_uids = 0\nsocket_mode = 0666\n");
	fclose(f);
	kill(D.pid, SIGHUP);
	/* the name goes with its owner */
	mori_mem *r = NULL;
	int gone = 0;
	for (int i = 0; i < 200 && !gone; i++) {
		if (mori_mem_open_remote(me, NULL, "uidreload/a", &r) == MORI_OK) {
			mori_mem_deregister(r);
			usleep(20000);
		} else {
			gone = 1;
		}
	}
	ck_assert_int_eq(write(P.go[1], "g", 1), 1);
	int st;
	ck_assert_int_eq(waitpid(kid, &st, 0), kid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "the removed uid's client: exit %d (12: its call after the reload did not fail with ECONN naming "
		      "allow_uids)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	ck_assert_msg(gone, "the removed uid's name still opens 4 s after the reload");
	mori_mem *more;
	OK(mori_mem_alloc(me, 4096, MORI_MEM_HOST, &more)); /* root's client is untouched */
	mori_mem_deregister(more);
	mori_mem_deregister(mine);
	mori_client_close(me);
	ck_assert_int_eq(daemon_stop(&D), 0);
	daemon_cleanup(&D);
	unlink(conf);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("uid_reload");
	TCase *t = tcase_create("uid_reload");
	tcase_set_timeout(t, 60);
	tcase_add_test(t, reload_detaches_removed_uid);
	suite_add_tcase(s, t);
	return run_suite(s);
}
