/* MORI-SHMEM edges the tester found (defects 9, 10): a unique id with bytes after its end was
 * taken (only zero padding may follow), a call mismatch printed "align 0" for the default 256,
 * and a message wrapping libmori's previous one ("comm create: ...: %s") came out doubled and
 * garbled (set_error formatted into the buffer it read). Public API; one morid. */
#include <check.h>
#include <pthread.h>

#include "harness.h"
#include "mori_coll.h"
#include "mori_shmem.h"

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

static mori_shmem_opts opts(void)
{
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = 1u << 20;
	o.timeout_us = 5000000;
	return o;
}

START_TEST(uid_trailing_bytes)
{
	mori_client *c;
	OK(mori_client_open(D.dir, "uid", &c));
	uint8_t uid[128] = {0}; /* MORI_SHMEM_UID_BYTES (common/shmem_layout.h) */
	size_t len = 0;
	OK(mori_shmem_get_unique_id(c, uid, sizeof(uid), &len));
	ck_assert_uint_lt(len, sizeof(uid));
	mori_shmem_opts o = opts();
	mori_group *g = NULL;
	uid[len] = 'x';
	ck_assert_int_eq(mori_shmem_init_uid(c, uid, len + 1, 0, 1, &o, &g), MORI_EINVAL);
	ck_assert_ptr_null(g);
	ck_assert_msg(strstr(mori_client_last_error(c), "after the id's end"), "%s", mori_client_last_error(c));
	uid[len] = 0; /* a fixed-size, zero-padded id buffer joins */
	OK(mori_shmem_init_uid(c, uid, sizeof(uid), 0, 1, &o, &g));
	OK(mori_shmem_barrier_all(g));
	mori_shmem_finalize(g);
	mori_client_close(c);
}
END_TEST

struct pe {
	int rank;
	size_t size;
	int rc;
	char msg[512];
};

static void *pe_main(void *arg)
{
	struct pe *p = arg;
	mori_client *c;
	mori_shmem_opts o = opts();
	mori_group *g;
	p->rc = -999;
	if (mori_client_open(D.dir, "mm", &c))
		return NULL;
	if (mori_shmem_init(c, "mismatch", p->rank, 2, &o, &g) == MORI_OK) {
		void *ptr;
		p->rc = mori_shmem_malloc(g, p->size, 0, &ptr);
		snprintf(p->msg, sizeof(p->msg), "%s", mori_client_last_error(c));
		mori_shmem_finalize(g);
	}
	mori_client_close(c);
	return NULL;
}

START_TEST(mismatch_names_align_256)
{
	struct pe p[2] = {{.rank = 0, .size = 4096}, {.rank = 1, .size = 8192}};
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, pe_main, &p[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(p[i].rc == MORI_EINVAL, "PE %d: %d (%s)", i, p[i].rc, p[i].msg);
		ck_assert_msg(strstr(p[i].msg, "malloc(4096, align 256)") && strstr(p[i].msg, "malloc(8192, align 256)"),
			      "PE %d's message lacks both calls with align 256: %s", i, p[i].msg);
	}
}
END_TEST

static int count_of(const char *s, const char *w)
{
	int n = 0;
	for (const char *q = s; (q = strstr(q, w)); q += strlen(w))
		n++;
	return n;
}

START_TEST(wrapped_message_not_doubled)
{
	mori_client *c;
	OK(mori_client_open(D.dir, "wrap", &c));
	mori_shmem_opts o = opts();
	mori_group *g;
	OK(mori_shmem_init(c, "wrap", 0, 1, &o, &g));
	mori_comm_opts co;
	mori_comm_opts_init(&co, sizeof(co));
	co.scratch_bytes = 4u << 20; /* more than the 1 MiB heap */
	mori_comm *k = NULL;
	int rc = mori_comm_create(g, &co, &k);
	const char *m = mori_client_last_error(c);
	ck_assert_msg(rc == MORI_ENOMEM, "comm create: %s (%s)", mori_strerror(rc), m);
	ck_assert_msg(count_of(m, "comm create") == 1, "'comm create' %d times: %s", count_of(m, "comm create"), m);
	ck_assert_msg(strstr(m, "no room"), "the heap's reason is lost: %s", m);
	mori_shmem_finalize(g);
	mori_client_close(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shmem_edges");
	TCase *t = tcase_create("shmem_edges");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 30);
	tcase_add_test(t, uid_trailing_bytes);
	tcase_add_test(t, mismatch_names_align_256);
	tcase_add_test(t, wrapped_message_not_doubled);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
