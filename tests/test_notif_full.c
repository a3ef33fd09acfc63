/* A region owner that does not take its notifications, notified from another node (tester's
 * defect 3, the cross-node side): morid on the owner's node keeps its completion queue and half
 * of client_max_backlog, drops the rest and answers the sending daemon MORI_EAGAIN, so the
 * initiator's transfer fails naming the full queue; the owner is never detached, gets the kept
 * notifications in order, and is notified again once it has room. Two morids on loopback with
 * one cluster key; the owner's has client_max_backlog 1024 and 64-entry rings. */
#include <check.h>

#include "harness.h"
#include "ctl_harness.h"
#include "node_harness.h"
#include "peer_harness.h"
#include "mori.h"

enum { CQ = 64, BACKLOG = 1024, KEPT = CQ + BACKLOG / 2, SENT = KEPT + 100 };

static struct test_node NA, NB;
static char kpath[64];
static struct auth_key K;
static const char *args[] = {"--cluster-key-file", kpath, NULL};
static const char *owner_args[] = {"--client-max-backlog", "1024", "--ring-entries", "64", NULL};

static void setup(void)
{
	snprintf(kpath, sizeof(kpath), "/tmp/mori-notif-key-%d", (int)getpid());
	ck_assert_int_eq(key_write(kpath, &K), 0);
	node_pair_init(&NA, &NB, "notif", 7100, 0);
	NA.args = NB.args = args;
	ck_assert_int_eq(node_pair_start(&NA, &NB, owner_args), 0);
}

static void teardown(void)
{
	int rc = node_pair_stop(&NA, &NB);
	unlink(kpath);
	ck_assert_msg(rc == 0, "morid did not stop cleanly (above: which, and its log)");
}

START_TEST(owner_not_detached)
{
	mori_client *owner, *c;
	mori_mem *mb, *l, *r;
	OK(mori_client_open(NB.dir, "owner", &owner));
	OK(mori_mem_alloc(owner, 4096, MORI_MEM_HOST, &mb));
	OK(mori_mem_publish(mb, "owner/kv"));
	OK(mori_client_open(NA.dir, "flooder", &c));
	OK(mori_mem_alloc(c, 4096, MORI_MEM_HOST, &l));
	OK(mori_mem_open_remote(c, NB.addr, "owner/kv", &r));
	mori_xfer_opts o = {.size = sizeof(o), .has_notif = 1};
	int ok = 0, again = 0;
	char msg[300] = "";
	for (int i = 0; i < SENT; i++) {
		mori_xfer *x;
		o.notif_tag = (uint64_t)i;
		OK(mori_xfer_write(l, 0, r, 0, 64, &o, &x));
		int rc = mori_xfer_wait(x, 5000000);
		mori_status st;
		mori_xfer_status(x, &st);
		if (rc == MORI_EAGAIN && !again++)
			snprintf(msg, sizeof(msg), "%s", st.message);
		ok += rc == MORI_OK;
		ck_assert_msg(rc == MORI_OK || rc == MORI_EAGAIN, "write %d: %s (%s)", i, mori_strerror(rc), st.message);
		mori_xfer_free(x);
	}
	ck_assert_int_eq(ok, KEPT);
	ck_assert_int_eq(again, SENT - KEPT);
	ck_assert_msg(strstr(msg, "completion queue is full"), "the sender was told: %s", msg);
	ck_assert_uint_eq(ctl_counter(NB.dir, "notifications_dropped"), SENT - KEPT);
	/* the owner is attached and gets the kept ones, in order */
	static mori_notif n[SENT];
	int got = 0, k;
	uint64_t t0 = mori_now_us();
	while (got < KEPT && mori_now_us() - t0 < 5000000)
		if ((k = mori_notif_poll(owner, n + got, (size_t)(SENT - got), 100000)) > 0)
			got += k;
		else
			ck_assert_msg(k == 0, "owner's poll: %s (%s)", mori_strerror(k), mori_client_last_error(owner));
	ck_assert_int_eq(got, KEPT);
	for (int i = 0; i < KEPT; i++)
		ck_assert_uint_eq(n[i].tag, (uint64_t)i);
	/* with room again, a notification goes through */
	mori_xfer *x;
	o.notif_tag = 4242;
	OK(mori_xfer_write(l, 0, r, 0, 64, &o, &x));
	OK(mori_xfer_wait(x, 5000000));
	mori_xfer_free(x);
	ck_assert_int_eq(mori_notif_poll(owner, n, 1, 5000000), 1);
	ck_assert_uint_eq(n[0].tag, 4242);
	mori_client_close(c);
	mori_client_close(owner);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("notif_full");
	TCase *t = tcase_create("notif_full");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 120);
	tcase_add_test(t, owner_not_detached);
	suite_add_tcase(s, t);
	return run_suite(s);
}
