/* Issue 18, item 6: deadlines. A cross-node transfer submitted without a timeout of its own gets
 * the daemon's transfer_timeout_ms (libmori used to send its own 30 s whatever morid said), and
 * every stall ends with MORI_ETIMEDOUT at the deadline, naming the peer: the peer daemon stopped
 * (SIGSTOP: its kernel still acknowledges, nothing answers), a read from it, and, in network
 * namespaces (tests/test_xnode_netns.sh sets MORI_XNODE_NS_A/B, MORI_XNODE_IP_A/B and
 * MORI_XNODE_VETH_B), the link going down under a transfer, which once ended with MORI_EIO "data
 * stream connection timed out" after 15.6 s of a 10 s deadline. Loopback otherwise. */
#include <check.h>

#include "harness.h"
#include "node_harness.h"
#include "wire.h"

#define DEADLINE_MS 1500

static struct test_node NA, NB;
static char deadline_ms[16];
static const char *deadline_args[8] = {"--transfer-timeout-ms", deadline_ms};

/* The morid process itself (under `ip netns exec` the child execs it, same pid). */
static void node_signal(struct test_node *n, int sig) { kill(n->pid, sig); }

static void setup(void)
{
	node_pair_init(&NA, &NB, "deadline", 7300, 1);
	snprintf(deadline_ms, sizeof(deadline_ms), "%d", DEADLINE_MS);
	const char *key = getenv("MORI_XNODE_KEY");
	int k = 2;
	if (key) {
		deadline_args[k++] = "--cluster-key-file";
		deadline_args[k++] = key;
	}
	/* peer_dead_ms (issue 18) only where the namespaces test the link: a loopback run also works
	 * against a morid that predates it */
	if (NA.ns) {
		deadline_args[k++] = "--peer-dead-ms";
		deadline_args[k++] = "1000";
	}
	deadline_args[k] = NULL;
	NA.args = NB.args = deadline_args;
	ck_assert_int_eq(node_pair_start(&NA, &NB, NULL), 0);
}

/* (a morid that did not stop cleanly keeps its files, named; these tests do not judge that) */
static void teardown(void) { node_pair_stop(&NA, &NB); }

struct pair {
	mori_client *ca, *cb;
	mori_mem *l, *r, *rr;
};

static void pair_open(struct pair *p, size_t size)
{
	OK(mori_client_open(NB.dir, "target", &p->cb));
	OK(mori_mem_alloc(p->cb, size, MORI_MEM_HOST, &p->r));
	OK(mori_mem_publish(p->r, "deadline/r"));
	OK(mori_client_open(NA.dir, "initiator", &p->ca));
	OK(mori_mem_alloc(p->ca, size, MORI_MEM_HOST, &p->l));
	OK(mori_mem_open_remote(p->ca, NB.addr, "deadline/r", &p->rr));
	mori_xfer *x; /* the data streams are up */
	OK(mori_xfer_write(p->l, 0, p->rr, 0, 4096, NULL, &x));
	OK(mori_xfer_wait(x, 5000000));
	mori_xfer_free(x);
}

static void pair_close(struct pair *p)
{
	mori_mem_deregister(p->rr);
	mori_client_close(p->ca);
	mori_client_close(p->cb);
}

/* Start op on the whole region (o: NULL for no timeout of its own); wait up to limit_ms. Returns
 * the code and the elapsed ms; msg gets the status message. */
static int timed(struct pair *p, int read, const mori_xfer_opts *o, int limit_ms, uint64_t *ms, char *msg, size_t len)
{
	mori_xfer *x;
	uint64_t t0 = mori_now_us();
	size_t n = mori_mem_size(p->l);
	OK(read ? mori_xfer_read(p->l, 0, p->rr, 0, n, o, &x) : mori_xfer_write(p->l, 0, p->rr, 0, n, o, &x));
	int rc = mori_xfer_wait(x, (int64_t)limit_ms * 1000);
	if (rc == MORI_ETIMEDOUT && mori_xfer_status(x, NULL) == MORI_EINPROGRESS)
		rc = MORI_EINPROGRESS; /* our wait gave up, not the transfer */
	*ms = (mori_now_us() - t0) / 1000;
	mori_status st;
	mori_xfer_status(x, &st);
	snprintf(msg, len, "%s", st.message);
	mori_xfer_free(x);
	return rc;
}

START_TEST(peer_stopped)
{
	struct pair p;
	pair_open(&p, 256 << 20);
	node_signal(&NB, SIGSTOP);
	char msg[256];
	uint64_t ms;
	/* no timeout of its own: the daemon's (1.5 s), not 30 s */
	int rc = timed(&p, 0, NULL, 8000, &ms, msg, sizeof(msg));
	fprintf(stderr, "# write to a stopped peer, daemon deadline %d ms: %s after %llu ms: %s\n", DEADLINE_MS,
		mori_strerror(rc), (unsigned long long)ms, msg);
	ck_assert_msg(rc == MORI_ETIMEDOUT, "write to a stopped peer gave %s after %llu ms", mori_strerror(rc),
		      (unsigned long long)ms);
	ck_assert_uint_ge(ms, DEADLINE_MS - 100);
	ck_assert_uint_lt(ms, DEADLINE_MS + 1500);
	ck_assert_msg(strstr(msg, NB.addr), "the message names no peer: %s", msg);
	/* a read, and a timeout of its own (shorter than the daemon's) */
	mori_xfer_opts o = {.size = sizeof(o), .timeout_us = 700000};
	rc = timed(&p, 1, &o, 8000, &ms, msg, sizeof(msg));
	ck_assert_msg(rc == MORI_ETIMEDOUT && ms >= 600 && ms < 2000, "read with 700 ms: %s after %llu ms", mori_strerror(rc),
		      (unsigned long long)ms);
	ck_assert_msg(strstr(msg, NB.addr), "the message names no peer: %s", msg);
	node_signal(&NB, SIGCONT);
	/* it serves again: 256 MiB with a timeout of its own (the daemon's 1.5 s is too short for that
	 * on a loaded machine, and the deadline was tested above) */
	mori_xfer_opts again = {.size = sizeof(again), .timeout_us = 15000000};
	rc = timed(&p, 0, &again, 20000, &ms, msg, sizeof(msg));
	ck_assert_msg(rc == MORI_OK, "after SIGCONT: %s (%s)", mori_strerror(rc), msg);
	pair_close(&p);
}
END_TEST

/* The veth goes down under a transfer: the data streams' TCP_USER_TIMEOUT (peer_dead_ms, 1 s
 * here) fires long before the deadline, which still decides: MORI_ETIMEDOUT at it. */
START_TEST(link_down)
{
	const char *veth = getenv("MORI_XNODE_VETH_B");
	if (!NB.ns || !veth) {
		fprintf(stderr, "# link_down runs in network namespaces only (tests/test_xnode_netns.sh)\n");
		return;
	}
	struct pair p;
	pair_open(&p, 256 << 20);
	char cmd[256], msg[256];
	uint64_t ms;
	mori_xfer *x;
	mori_xfer_opts o = {.size = sizeof(o), .timeout_us = 3000000};
	uint64_t t0 = mori_now_us();
	OK(mori_xfer_write(p.l, 0, p.rr, 0, 256 << 20, &o, &x));
	snprintf(cmd, sizeof(cmd), "ip -n %s link set %s down", NB.ns, veth);
	ck_assert_int_eq(system(cmd), 0);
	int rc = mori_xfer_wait(x, 10000000);
	ms = (mori_now_us() - t0) / 1000;
	mori_status st;
	mori_xfer_status(x, &st);
	snprintf(msg, sizeof(msg), "%s", st.message);
	mori_xfer_free(x);
	snprintf(cmd, sizeof(cmd), "ip -n %s link set %s up", NB.ns, veth);
	ck_assert_int_eq(system(cmd), 0);
	fprintf(stderr, "# link down under a write with a 3 s deadline: %s after %llu ms: %s\n", mori_strerror(rc),
		(unsigned long long)ms, msg);
	ck_assert_msg(rc == MORI_ETIMEDOUT, "link down gave %s after %llu ms (%s)", mori_strerror(rc),
		      (unsigned long long)ms, msg);
	ck_assert_uint_ge(ms, 2800);
	ck_assert_uint_lt(ms, 4500);
	ck_assert_msg(strstr(msg, NB.addr), "the message names no peer: %s", msg);
	/* with the link back, transfers go again (after the reconnect) */
	uint64_t until = mori_now_us() + 15000000;
	do {
		rc = timed(&p, 0, &o, 5000, &ms, msg, sizeof(msg));
	} while (rc != MORI_OK && mori_now_us() < until);
	ck_assert_msg(rc == MORI_OK, "after the link came back: %s (%s)", mori_strerror(rc), msg);
	pair_close(&p);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("deadline");
	TCase *t = tcase_create("deadline");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 120);
	tcase_add_test(t, peer_stopped);
	tcase_add_test(t, link_down);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
