/* MORI-IO across nodes (issue 3): two morids, each with its own runtime dir and peer listener,
 * a target client on node B and an initiator on node A. Random verified batches, and the fault
 * cases: unpublished name, unreachable node, deadline, cancel, region freed, peer daemon killed
 * mid-transfer and restarted (new epoch: old handles are stale, new ones work).
 *
 * By default both daemons run on loopback. tests/test_xnode_netns.sh runs the same binary with
 * MORI_XNODE_NS_A/B (network namespaces) and MORI_XNODE_IP_A/B (their veth addresses): the
 * daemons then run inside the namespaces (`ip netns exec`), the clients stay outside and reach
 * them through their runtime dirs. */
#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "../daemon/tcp_int.h"      /* the data-stream frame, to play a misbehaving peer */
#include "../libclient/internal.h" /* raw ring access: the daemon must check what the library would */
#include "svc/ctl.h"
#include "harness.h"
#include "ctl_harness.h"
#include "node_harness.h"
#include "io_target.h"
#include "peer_harness.h"
#include "mori.h"
#include "wire.h"

#define LOCAL_SZ (64u << 20)

static struct test_node NA, NB;
/* The cluster key both daemons share (issue 18: every cross-node test runs authenticated);
 * MORI_XNODE_NO_KEY=1 runs them without (loopback only). */
static struct auth_key XKEY;
static char xkey_path[64];
static const char *xnode_args[] = {"--transfer-timeout-ms", "10000", "--cluster-key-file", xkey_path, NULL};

static void setup(void)
{
	node_pair_init(&NA, &NB, "xnode", 7100, 1);
	if (!XKEY.on)
		xnode_args[2] = NULL;
	NA.args = NB.args = xnode_args;
	ck_assert_int_eq(node_pair_start(&NA, &NB, NULL), 0);
}

/* (a morid that did not stop cleanly keeps its files, named; these tests do not judge that) */
static void teardown(void) { node_pair_stop(&NA, &NB); }

/* A control-socket status field of a node. */
static Mori__Reply *node_list(struct test_node *n, uint32_t what) { return ctl_list(n->dir, what); }

/* A client of node A named label with a host region of lsz bytes (*l) and node B's region
 * `name` open (*r). */
static mori_client *initiator(const char *label, size_t lsz, const char *name, mori_mem **l, mori_mem **r)
{
	mori_client *c;
	OK(mori_client_open(NA.dir, label, &c));
	OK(mori_mem_alloc(c, lsz, MORI_MEM_HOST, l));
	OK(mori_mem_open_remote(c, NB.addr, name, r));
	return c;
}

/* x must succeed within 5 s; freed. */
static void xfer_done(mori_xfer *x)
{
	OK(mori_xfer_wait(x, 5000000));
	mori_xfer_free(x);
}

/* ---- tests ---- */

START_TEST(random_batches)
{
	uint64_t seed = test_seed();
	struct target t;
	target_start(&t, NB.dir, 1, seed);
	mori_client *c;
	mori_mem *lm, *lc, *ra, *rb;
	OK(mori_client_open(NA.dir, "initiator", &c));
	ck_assert_str_eq(mori_client_node(c), NA.addr);
	OK(mori_mem_alloc(c, LOCAL_SZ, MORI_MEM_HOST, &lm)); /* the daemon maps it */
	uint8_t *cp = aligned_alloc(4096, LOCAL_SZ);          /* the daemon uses CMA */
	ck_assert_ptr_nonnull(cp);
	OK(mori_mem_register(c, cp, LOCAL_SZ, MORI_MEM_HOST, &lc));
	fill_random(mori_mem_ptr(lm), LOCAL_SZ, seed + 2);
	fill_random(cp, LOCAL_SZ, seed + 3);
	OK(mori_mem_open_remote(c, NB.addr, "target/a", &ra));
	OK(mori_mem_open_remote(c, NB.addr, "target/b", &rb));
	ck_assert_uint_eq(mori_mem_size(ra), REGION_A);
	ck_assert_uint_eq(mori_mem_size(rb), REGION_B);

	mori_desc slots[BATCH_SLOTS];
	rand_slots(&seed, slots);
	mori_xfer_list *lists[2][2];
	mori_mem *locals[2] = {lm, lc}, *remotes[2] = {ra, rb};
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++)
			OK(mori_xfer_prep(locals[i], remotes[j], slots, BATCH_SLOTS, &lists[i][j]));

	const char *env = getenv("MORI_TEST_BATCHES");
	int batches = env ? atoi(env) : 10000;
	uint64_t bytes = 0, notifs = 0, tagsum = 0;
	for (int it = 0; it < batches; it++) {
		int which = (int)(test_rand(&seed) & 1), li = (int)(test_rand(&seed) & 1);
		uint8_t *lp = li ? cp : mori_mem_ptr(lm);
		struct rand_xfer rx;
		rand_xfer_draw(&seed, &rx, which, 1, slots, LOCAL_SZ);
		uint64_t before = rand_xfer_hash(&t, which, lp, &rx, 0);
		mori_xfer *x;
		rand_xfer_submit(&rx, locals[li], remotes[which], lists[li][which], &x);
		int rc = mori_xfer_wait(x, 10000000);
		mori_status st;
		mori_xfer_status(x, &st);
		const char *msg = st.message;
		ck_assert_msg(rc == MORI_OK, "batch %d: %s (%s)", it, mori_strerror(rc), msg);
		bytes += mori_xfer_bytes(x);
		mori_xfer_free(x);
		uint64_t after = rand_xfer_hash(&t, which, lp, &rx, 1);
		ck_assert_msg(before == after, "batch %d (op %d form %d local %d region %d n %zu): contents differ",
			      it, rx.op, rx.form, li, which, rx.n);
		if (rx.o.has_notif) {
			notifs++;
			tagsum += rx.o.notif_tag;
		}
	}
	/* Notifications reach the target's client after their data; give the last one a moment. */
	target_end_expect(&t, 50000, notifs, tagsum);
	/* moractl peers: node A knows B as up, with the bytes it moved */
	Mori__Reply *rep = node_list(&NA, 3);
	ck_assert_uint_ge(rep->list->n_peers, 1);
	Mori__PeerInfo *pi = rep->list->peers[0];
	ck_assert_str_eq(pi->address, NB.addr);
	ck_assert_str_eq(pi->state, "up");
	/* tcp here; rdma where both nodes have usable verbs devices (transport = auto) */
	ck_assert_msg(!strcmp(pi->transport, "tcp") || !strcmp(pi->transport, "rdma"), "transport %s", pi->transport);
	ck_assert_uint_ge(pi->bytes_sent + pi->bytes_received, bytes / 2);
	ck_assert_uint_eq(pi->transfers, (uint64_t)batches);
	ck_assert_uint_eq(pi->errors, 0);
	mori__reply__free_unpacked(rep, NULL);
	fprintf(stderr, "# %d cross-node batches, %llu bytes, %llu notifications verified\n", batches,
		(unsigned long long)bytes, (unsigned long long)notifs);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++)
			mori_xfer_list_free(lists[i][j]);
	mori_client_close(c);
	free(cp);
}
END_TEST

/* Bad names and nodes, bad handles, a region freed under an open handle. */
/* transport = rdma where RDMA cannot be used (here: a device that does not exist): cross-node
 * transfers are refused with MORI_ENOTSUP naming why, never sent by TCP behind the user's back. */
START_TEST(forced_rdma_without_device)
{
	node_stop(&NA);
	const char *extra[] = {"--transport", "rdma", "--rdma-device", "nosuch0", NULL};
	ck_assert_int_eq(node_start(&NA, extra), 0);
	struct target t;
	target_start(&t, NB.dir, 1, 11);
	mori_client *c;
	mori_mem *l, *ra;
	mori_xfer *x;
	c = initiator("forced", 1 << 20, "target/a", &l, &ra);
	char why[300] = "";
	int rc = mori_xfer_write(l, 0, ra, 0, 4096, NULL, &x);
	if (rc == MORI_OK) {
		mori_status st;
		rc = mori_xfer_wait(x, 5000000);
		mori_xfer_status(x, &st);
		snprintf(why, sizeof(why), "%s", st.message);
		mori_xfer_free(x);
	} else {
		snprintf(why, sizeof(why), "%s", mori_client_last_error(c));
	}
	ck_assert_msg(rc == MORI_ENOTSUP, "forced RDMA without a device gave %s (%s)", mori_strerror(rc), why);
	ck_assert_msg(strstr(why, "transport = rdma"), "error: %s", why);
	/* the whole reason arrives (completion entries have room for it), not its first 40 bytes */
	ck_assert_msg(strstr(why, "no RDMA device") || strstr(why, "nosuch0"), "reason cut short: %s", why);
	OK(mori_mem_deregister(ra));
	mori_client_close(c);
	target_end(&t, NULL, NULL);
}
END_TEST

START_TEST(bad_input)
{
	struct target t;
	target_start(&t, NB.dir, 1, 1);
	mori_client *c;
	mori_mem *l, *m, *ra;
	mori_xfer *x;
	OK(mori_client_open(NA.dir, "bad", &c));
	OK(mori_mem_alloc(c, 1 << 20, MORI_MEM_HOST, &l));
	ck_assert_int_eq(mori_mem_open_remote(c, NB.addr, "nobody/kv", &m), MORI_EUNREACH);
	ck_assert_ptr_nonnull(strstr(mori_client_last_error(c), "nobody/kv"));
	/* a node where no daemon listens: MORI_ECONN naming it, within the 5 s lookup deadline */
	char dead[96];
	snprintf(dead, sizeof(dead), "%s:%d", NB.ns ? NB.ip : "127.0.0.1", NB.ns ? 7199 : free_port());
	uint64_t t0 = mori_now_us();
	int rc = mori_mem_open_remote(c, dead, "target/a", &m);
	ck_assert_msg(rc == MORI_ECONN, "unreachable node gave %s", mori_strerror(rc));
	ck_assert_ptr_nonnull(strstr(mori_client_last_error(c), dead));
	/* and why: morid's own probe beside nng's dialer (daemon/peer_probe.c) */
	ck_assert_msg(strstr(mori_client_last_error(c), "connection refused"), "no reason: %s", mori_client_last_error(c));
	ck_assert_uint_lt(mori_now_us() - t0, 7000000);
	ck_assert_int_eq(mori_mem_open_remote(c, "no-port", "target/a", &m), MORI_EINVAL);
	/* ranges are checked (the library checks first; the daemon checks its copy again) */
	OK(mori_mem_open_remote(c, NB.addr, "target/a", &ra));
	ck_assert_int_eq(mori_xfer_write(l, 0, ra, REGION_A - 10, 11, NULL, &x), MORI_ERANGE);
	ck_assert_int_eq(mori_xfer_read(l, (1 << 20) - 1, ra, 0, 2, NULL, &x), MORI_ERANGE);
	ck_assert_int_eq(mori_xfer_write(l, 0, ra, 0, 0, NULL, &x), MORI_EINVAL);
	/* the owner's blob of a remote region opens by handle; an opener's opens nothing (it was
	 * granted the region, not the right to pass it on) */
	uint8_t blob[MORI_MEM_BLOB_MAX];
	size_t bl;
	OK(mori_mem_pack(ra, blob, sizeof(blob), &bl));
	ck_assert_int_eq(mori_mem_unpack(c, blob, bl, &m), MORI_EPERM);
	bl = ask_blob(&t, 0, blob);
	OK(mori_mem_unpack(c, blob, bl, &m));
	OK(mori_xfer_write(l, 0, m, 4096, 4096, NULL, &x));
	xfer_done(x);
	OK(mori_mem_deregister(m));
	/* the owner deregisters A: the open handle is stale at its next transfer, and so is a blob */
	struct hreq h = {HREQ_DEREG, 0};
	ck_assert(write(t.to, &h, sizeof(h)) == sizeof(h));
	ck_assert(read(t.from, &rc, sizeof(rc)) == sizeof(rc));
	OK(rc);
	OK(mori_xfer_write(l, 0, ra, 0, 4096, NULL, &x));
	rc = mori_xfer_wait(x, 5000000);
	ck_assert_msg(rc == MORI_ESTALE, "write to a freed region gave %s", mori_strerror(rc));
	mori_xfer_free(x);
	OK(mori_xfer_read(l, 0, ra, 0, 4096, NULL, &x));
	ck_assert_int_eq(mori_xfer_wait(x, 5000000), MORI_ESTALE);
	mori_xfer_free(x);
	ck_assert_int_eq(mori_mem_unpack(c, blob, bl, &m), MORI_ESTALE);
	OK(mori_mem_deregister(ra));
	target_end(&t, NULL, NULL);
	mori_client_close(c);
}
END_TEST

/* A peer daemon that stops answering (SIGSTOP): transfers end with MORI_ETIMEDOUT at their
 * deadline, naming the peer; cancellation ends one with MORI_ECANCELED. */
START_TEST(deadline_and_cancel)
{
	struct target t;
	target_start(&t, NB.dir, 1, 2);
	mori_client *c;
	mori_mem *l, *ra;
	mori_xfer *x, *y;
	c = initiator("deadline", 16 << 20, "target/a", &l, &ra);
	OK(mori_xfer_write(l, 0, ra, 0, 4096, NULL, &x)); /* the streams are up */
	xfer_done(x);
	kill(NB.pid, SIGSTOP);
	mori_xfer_opts o = {.size = sizeof(o), .timeout_us = 300000};
	uint64_t t0 = mori_now_us();
	OK(mori_xfer_write(l, 0, ra, 0, 16 << 20, &o, &x));
	OK(mori_xfer_read(l, 0, ra, 0, 16 << 20, NULL, &y));
	int rc = mori_xfer_wait(x, 3000000);
	uint64_t dt = mori_now_us() - t0;
	mori_status st;
	mori_xfer_status(x, &st);
	const char *msg = st.message;
	ck_assert_msg(rc == MORI_ETIMEDOUT, "stopped peer gave %s (%s)", mori_strerror(rc), msg);
	ck_assert_ptr_nonnull(strstr(msg, "300"));
	ck_assert_uint_ge(dt, 290000);
	ck_assert_uint_lt(dt, 1000000);
	OK(mori_xfer_cancel(y));
	ck_assert_int_eq(mori_xfer_wait(y, 1000000), MORI_ECANCELED);
	mori_xfer_free(x);
	mori_xfer_free(y);
	kill(NB.pid, SIGCONT);
	/* the peer is still usable afterwards, and the daemon has nothing left in flight */
	memset(mori_mem_ptr(l), 0x5a, 8192);
	OK(mori_xfer_write(l, 0, ra, 100, 8192, NULL, &x));
	xfer_done(x);
	memset(mori_mem_ptr(l), 0, 8192);
	OK(mori_xfer_read(l, 0, ra, 100, 8192, NULL, &x));
	xfer_done(x);
	for (int i = 0; i < 8192; i++)
		ck_assert_uint_eq(((uint8_t *)mori_mem_ptr(l))[i], 0x5a);
	Mori__Reply *rep = node_list(&NA, 4);
	ck_assert_uint_eq(rep->list->n_xfers, 0);
	mori__reply__free_unpacked(rep, NULL);
	OK(mori_mem_deregister(ra));
	target_end(&t, NULL, NULL);
	mori_client_close(c);
}
END_TEST

/* A local region deregistered while a cross-node transfer on it is stalled (peer stopped): the
 * deregistration returns after its 1 s wait, the transfer ends MORI_ECANCELED, and nothing the
 * daemon sends later touches the freed region (ASan watches the library's side). */
START_TEST(deregister_stalled_transfer)
{
	struct target t;
	target_start(&t, NB.dir, 1, 2);
	mori_client *c;
	mori_mem *l, *ra;
	mori_xfer *x;
	c = initiator("dereg-stalled", 16 << 20, "target/a", &l, &ra);
	OK(mori_xfer_write(l, 0, ra, 0, 4096, NULL, &x)); /* the streams are up */
	xfer_done(x);
	kill(NB.pid, SIGSTOP);
	OK(mori_xfer_read(l, 0, ra, 0, 16 << 20, NULL, &x));
	uint64_t t0 = mori_now_us();
	OK(mori_mem_deregister(l));
	uint64_t dt = mori_now_us() - t0;
	ck_assert_uint_ge(dt, 900000);
	ck_assert_uint_lt(dt, 5000000);
	mori_status st;
	ck_assert_int_eq(mori_xfer_status(x, &st), MORI_ECANCELED);
	const char *msg = st.message;
	ck_assert_ptr_nonnull(strstr(msg, "deregistered"));
	kill(NB.pid, SIGCONT);
	/* the daemon's answer to the dropped transfer arrives later: the client keeps working */
	mori_mem *l2;
	OK(mori_mem_alloc(c, 1 << 20, MORI_MEM_HOST, &l2));
	memset(mori_mem_ptr(l2), 0x3c, 4096);
	mori_xfer *y;
	OK(mori_xfer_write(l2, 0, ra, 0, 4096, NULL, &y));
	xfer_done(y);
	mori_xfer_free(x);
	OK(mori_mem_deregister(l2));
	OK(mori_mem_deregister(ra));
	target_end(&t, NULL, NULL);
	mori_client_close(c);
}
END_TEST

/* The peer daemon is killed (SIGKILL) in the middle of a stream of transfers: each ends (OK if it
 * finished before, else an error) within its deadline; after a restart (new epoch) the old handle
 * is MORI_ESTALE and a new open works, without restarting anything on node A. */
START_TEST(peer_killed)
{
	struct target t;
	target_start(&t, NB.dir, 1, 3);
	mori_client *c;
	mori_mem *l, *ra;
	c = initiator("survivor", 64 << 20, "target/a", &l, &ra);
	uint8_t blob[MORI_MEM_BLOB_MAX];
	size_t bl = ask_blob(&t, 0, blob);
	enum { N = 64 };
	mori_xfer *xs[N];
	mori_xfer_opts o = {.size = sizeof(o), .timeout_us = 3000000};
	for (int i = 0; i < N; i++) {
		if (i & 1)
			OK(mori_xfer_read(l, 0, ra, 0, 64 << 20, &o, &xs[i]));
		else
			OK(mori_xfer_write(l, 0, ra, 0, 64 << 20, &o, &xs[i]));
	}
	usleep(30000);
	uint64_t t0 = mori_now_us();
	node_kill9(&NB);
	int ok = 0, failed = 0;
	for (int i = 0; i < N; i++) {
		int rc = mori_xfer_wait(xs[i], 5000000);
		mori_status st;
		mori_xfer_status(xs[i], &st);
		const char *msg = st.message;
		ck_assert_msg(rc == MORI_OK || rc == MORI_EPEERDEAD || rc == MORI_EIO || rc == MORI_ETIMEDOUT ||
				      rc == MORI_ESTALE || rc == MORI_ECONN,
			      "transfer %d: %s (%s)", i, mori_strerror(rc), msg);
		ok += rc == MORI_OK;
		failed += rc != MORI_OK;
		mori_xfer_free(xs[i]);
	}
	uint64_t dt = mori_now_us() - t0;
	fprintf(stderr, "# peer killed: %d transfers done before, %d failed, all ended after %llu ms\n", ok,
		failed, (unsigned long long)(dt / 1000));
	ck_assert_int_gt(failed, 0);
	ck_assert_uint_lt(dt, 3500000);
	target_kill(&t); /* the target lost its daemon */

	/* restart B: same address, new epoch */
	ck_assert_int_eq(node_start(&NB, NULL), 0);
	mori_xfer *x;
	OK(mori_xfer_write(l, 0, ra, 0, 4096, NULL, &x));
	int rc = mori_xfer_wait(x, 5000000);
	ck_assert_msg(rc == MORI_ESTALE, "old handle after restart gave %s", mori_strerror(rc));
	mori_xfer_free(x);
	mori_mem *m;
	ck_assert_int_eq(mori_mem_unpack(c, blob, bl, &m), MORI_ESTALE);
	OK(mori_mem_deregister(ra));
	target_start(&t, NB.dir, 1, 4);
	OK(mori_mem_open_remote(c, NB.addr, "target/a", &ra));
	fill_random(mori_mem_ptr(l), 1 << 20, 99);
	mori_desc d = {0, 12345, 1 << 20};
	uint64_t want = local_hash(mori_mem_ptr(l), &d, NULL, 1);
	OK(mori_xfer_write(l, 0, ra, 12345, 1 << 20, NULL, &x));
	xfer_done(x);
	ck_assert_uint_eq(ask_hash(&t, 0, &d, NULL, 1), want);
	target_end(&t, NULL, NULL);
	mori_client_close(c);
}
END_TEST

/* The initiating client dies with transfers in flight: both daemons free everything. */
START_TEST(initiator_killed)
{
	struct target t;
	target_start(&t, NB.dir, 1, 5);
	pid_t child = fork();
	if (child == 0) {
		mori_client *k;
		mori_mem *l, *r;
		mori_xfer *x;
		if (mori_client_open(NA.dir, "doomed", &k) || mori_mem_alloc(k, 32 << 20, MORI_MEM_HOST, &l) ||
		    mori_mem_open_remote(k, NB.addr, "target/a", &r))
			_exit(1);
		for (;;)
			if (mori_xfer_write(l, 0, r, 0, 32 << 20, NULL, &x) == MORI_OK)
				(void)x; /* never waited for, never freed: the process dies with them */
	}
	usleep(300000);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	uint64_t t0 = mori_now_us();
	uint32_t left = 1;
	while (left && mori_now_us() - t0 < 3000000) {
		Mori__Reply *rep = node_list(&NA, 4);
		left = (uint32_t)rep->list->n_xfers;
		mori__reply__free_unpacked(rep, NULL);
		usleep(10000);
	}
	ck_assert_uint_eq(left, 0);
	/* node B still serves */
	mori_client *c;
	mori_mem *l, *ra;
	mori_xfer *x;
	c = initiator("next", 4096, "target/a", &l, &ra);
	OK(mori_xfer_read(l, 0, ra, 0, 4096, NULL, &x));
	xfer_done(x);
	target_end(&t, NULL, NULL);
	mori_client_close(c);
}
END_TEST

/* The owner deregisters its caller-allocated region while writes stream into it: every transfer
 * ends (done, or MORI_ESTALE), and no byte lands in the memory after the deregistration returned. */
START_TEST(deregister_under_traffic)
{
	struct target t;
	target_start(&t, NB.dir, 1, 7);
	mori_client *c;
	mori_mem *l, *rb;
	OK(mori_client_open(NA.dir, "writer", &c));
	OK(mori_mem_alloc(c, REGION_B, MORI_MEM_HOST, &l));
	fill_random(mori_mem_ptr(l), REGION_B, 42);
	OK(mori_mem_open_remote(c, NB.addr, "target/b", &rb));
	enum { N = 24 };
	mori_xfer *xs[N];
	for (int i = 0; i < N; i++)
		OK(mori_xfer_write(l, 0, rb, 0, REGION_B, NULL, &xs[i]));
	usleep(20000);
	struct hreq h = {HREQ_DEREG_B_UNDER_TRAFFIC, 1};
	ck_assert(write(t.to, &h, sizeof(h)) == sizeof(h));
	int ok = 0, stale = 0;
	for (int i = 0; i < N; i++) {
		int rc = mori_xfer_wait(xs[i], 10000000);
		mori_status st;
		mori_xfer_status(xs[i], &st);
		const char *msg = st.message;
		ck_assert_msg(rc == MORI_OK || rc == MORI_ESTALE, "transfer %d: %s (%s)", i, mori_strerror(rc), msg);
		ok += rc == MORI_OK;
		stale += rc == MORI_ESTALE;
		mori_xfer_free(xs[i]);
	}
	int64_t out[2];
	ck_assert(read(t.from, out, sizeof(out)) == sizeof(out));
	OK((int)out[0]);
	ck_assert_msg(out[1] == 0, "%lld bytes changed after deregistration", (long long)out[1]);
	fprintf(stderr, "# deregistered under traffic: %d writes done, %d stale, 0 bytes landed after\n", ok, stale);
	ck_assert_int_gt(stale, 0);
	target_end(&t, NULL, NULL);
	mori_client_close(c);
}
END_TEST

/* Both daemons stop (SIGTERM) in the middle of traffic both ways: each closes every stream,
 * timer and transfer and exits 0 (its loop closed to zero). */
START_TEST(stop_mid_transfer)
{
	struct target t;
	target_start(&t, NB.dir, 1, 10);
	mori_client *c;
	mori_mem *l, *ra;
	c = initiator("stopping", REGION_A, "target/a", &l, &ra);
	mori_xfer *xs[16];
	for (int i = 0; i < 16; i++) {
		if (i & 1)
			OK(mori_xfer_read(l, 0, ra, 0, REGION_A, NULL, &xs[i]));
		else
			OK(mori_xfer_write(l, 0, ra, 0, REGION_A, NULL, &xs[i]));
	}
	usleep(50000);
	ck_assert_int_eq(node_stop(&NB), 0);
	ck_assert_int_eq(node_stop(&NA), 0);
	target_kill(&t);
	for (int i = 0; i < 16; i++)
		mori_xfer_free(xs[i]);
	mori_client_close(c);
}
END_TEST

/* A small transfer queued behind a large one does not wait for all of it. */
START_TEST(small_behind_large)
{
	struct target t;
	target_start(&t, NB.dir, 1, 9);
	mori_client *c;
	mori_mem *l, *ra;
	mori_xfer *big, *small;
	c = initiator("mixed", REGION_A, "target/a", &l, &ra);
	OK(mori_xfer_write(l, 0, ra, 0, 4096, NULL, &small)); /* the streams are up */
	xfer_done(small);
	mori_desc d[16];
	for (int i = 0; i < 16; i++)
		d[i] = (mori_desc){0, 0, REGION_A}; /* 1 GiB in all */
	uint64_t t0 = mori_now_us();
	OK(mori_xfer_batch(MORI_XFER_WRITE, l, ra, d, 16, NULL, &big));
	OK(mori_xfer_read(l, 0, ra, 4096, 4096, NULL, &small));
	OK(mori_xfer_wait(small, 10000000));
	uint64_t t_small = mori_now_us() - t0;
	OK(mori_xfer_wait(big, 30000000));
	uint64_t t_big = mori_now_us() - t0;
	fprintf(stderr, "# 4 KiB read behind a 1 GiB write: done after %llu us, the write after %llu us\n",
		(unsigned long long)t_small, (unsigned long long)t_big);
	/* In order it would finish with the write; behind one window of batches per stream it
	 * finishes early (about 1/8 of the write here, 1/3 under a sanitizer on a loaded host). */
	ck_assert_msg(t_small * 2 < t_big, "the 4 KiB read waited for most of the 1 GiB write");
	mori_xfer_free(small);
	mori_xfer_free(big);
	target_end(&t, NULL, NULL);
	mori_client_close(c);
}
END_TEST

/* ---- the daemon's own checks, with the library's bypassed: raw entries on the ring ---- */

static struct mori_cqe raw_wait(mori_client *c, uint64_t user_data, int timeout_ms)
{
	struct mori_cqe e;
	uint64_t t0 = mori_now_us();
	while (mori_now_us() - t0 < (uint64_t)timeout_ms * 1000) {
		while (ring_pop(c->cqh, c->cqe, c->lay.cq_entries, sizeof(e), &e) == 0)
			if (e.type == CQE_XFER_DONE) {
				ck_assert_msg(e.user_data == user_data, "completion for %llu while waiting for %llu",
					      (unsigned long long)e.user_data, (unsigned long long)user_data);
				return e;
			}
		usleep(1000);
	}
	ck_abort_msg("no completion for %llu within %d ms", (unsigned long long)user_data, timeout_ms);
	return e;
}

static int raw_xfer(mori_client *c, uint16_t op, uint16_t flags, uint64_t id, uint64_t local, uint64_t remote,
		    uint64_t arg_off, uint32_t count, char *msg, size_t msglen)
{
	struct mori_sqe e = {.op = op, .flags = flags, .count = count, .user_data = id, .local_region = local,
			     .remote = remote, .arg_off = arg_off};
	OK(client_submit(c, &e));
	struct mori_cqe q = raw_wait(c, id, 5000);
	if (msg)
		snprintf(msg, msglen, "%s", q.msg);
	return q.code;
}

START_TEST(raw_submissions)
{
	struct target t;
	target_start(&t, NB.dir, 1, 6);
	mori_client *c, *other;
	mori_mem *l, *ra, *ol;
	OK(mori_client_open(NA.dir, "raw", &c));
	OK(mori_client_open(NA.dir, "other", &other));
	OK(mori_mem_alloc(c, 1 << 20, MORI_MEM_HOST, &l));
	OK(mori_mem_alloc(other, 4096, MORI_MEM_HOST, &ol));
	OK(mori_mem_open_remote(c, NB.addr, "target/a", &ra));
	uint64_t ref = ra->remote_ref, lr = l->region_id;
	uint8_t *arena = (uint8_t *)c->ring + c->lay.arena_off;
	uint64_t off = c->lay.arena_bytes - 4096; /* far from what the library hands out */
	mori_desc *d = (mori_desc *)(arena + off);
	char msg[CQE_MSG];
	uint64_t id = 1000;
	/* a good one first */
	d[0] = (mori_desc){0, 0, 4096};
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, ref, off, 1, NULL, 0), MORI_OK);
	/* arguments outside the arena, empty batch */
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, ref, c->lay.arena_bytes - 8, 1, msg, sizeof(msg)), MORI_ERANGE);
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, ref, UINT64_MAX - 8, 1, msg, sizeof(msg)), MORI_ERANGE);
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, ref, off, UINT32_MAX, msg, sizeof(msg)), MORI_ERANGE);
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, ref, off, 0, msg, sizeof(msg)), MORI_EINVAL);
	/* regions: unknown, another client's, a ref this client never opened */
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, 9999, ref, off, 1, msg, sizeof(msg)), MORI_ENOENT);
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, ol->region_id, ref, off, 1, msg, sizeof(msg)), MORI_ENOENT);
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, ref + 1, off, 1, msg, sizeof(msg)), MORI_ENOENT);
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, 0, off, 1, msg, sizeof(msg)), MORI_ENOENT);
	/* descriptors: zero length, outside the local region, outside the remote one, overflow */
	d[0] = (mori_desc){0, 0, 0};
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, ref, off, 1, msg, sizeof(msg)), MORI_EINVAL);
	d[0] = (mori_desc){(1 << 20) - 1, 0, 2};
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, SQE_F_READ, ++id, lr, ref, off, 1, msg, sizeof(msg)), MORI_ERANGE);
	d[0] = (mori_desc){0, REGION_A, 1};
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, ref, off, 1, msg, sizeof(msg)), MORI_ERANGE);
	d[0] = (mori_desc){0, 16, UINT64_MAX - 8};
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, ref, off, 1, msg, sizeof(msg)), MORI_ERANGE);
	d[0] = (mori_desc){0, 0, 8};
	d[1] = (mori_desc){8, UINT64_MAX, 8};
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, ++id, lr, ref, off, 2, msg, sizeof(msg)), MORI_ERANGE);
	/* prepared lists: unknown list, index past its end, a list of another region */
	mori_desc slots[4] = {{0, 0, 100}, {100, 100, 100}, {200, 200, 100}, {300, 300, 100}};
	mori_xfer_list *pl;
	OK(mori_xfer_prep(l, ra, slots, 4, &pl));
	uint32_t *ix = (uint32_t *)(arena + off);
	ix[0] = 3;
	ck_assert_int_eq(raw_xfer(c, SQE_XFER_LIST, 0, ++id, lr, pl->list_id, off, 1, NULL, 0), MORI_OK);
	ix[1] = 4;
	ck_assert_int_eq(raw_xfer(c, SQE_XFER_LIST, 0, ++id, lr, pl->list_id, off, 2, msg, sizeof(msg)), MORI_ERANGE);
	ck_assert_int_eq(raw_xfer(c, SQE_XFER_LIST, 0, ++id, lr, pl->list_id + 1, off, 1, msg, sizeof(msg)), MORI_ENOENT);
	ck_assert_int_eq(raw_xfer(c, SQE_XFER_LIST, 0, ++id, lr, 0, off, 1, msg, sizeof(msg)), MORI_ENOENT);
	/* XferPrep at the daemon: no memfd, a short one, an unknown ref, a bad descriptor */
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__XferPrep xp = MORI__XFER_PREP__INIT;
	Mori__Reply *rep;
	req.body_case = MORI__REQUEST__BODY_XFER_PREP;
	req.xfer_prep = &xp;
	xp.local_region = lr;
	xp.remote_ref = ref;
	xp.count = 4;
	ck_assert_int_eq(client_rpc(c, &req, NULL, 0, &rep, NULL, NULL), MORI_EINVAL);
	int fd = memfd_create("descs", 0);
	ck_assert(write(fd, slots, sizeof(slots)) == (ssize_t)sizeof(slots));
	xp.count = 5;
	ck_assert_int_eq(client_rpc(c, &req, &fd, 1, &rep, NULL, NULL), MORI_EINVAL);
	xp.count = 4;
	xp.remote_ref = ref + 7;
	ck_assert_int_eq(client_rpc(c, &req, &fd, 1, &rep, NULL, NULL), MORI_ENOENT);
	xp.remote_ref = ref;
	xp.local_region = ol->region_id;
	ck_assert_int_eq(client_rpc(c, &req, &fd, 1, &rep, NULL, NULL), MORI_ENOENT);
	xp.local_region = lr;
	slots[2].remote_offset = REGION_A - 50;
	ck_assert(pwrite(fd, slots, sizeof(slots), 0) == (ssize_t)sizeof(slots));
	ck_assert_int_eq(client_rpc(c, &req, &fd, 1, &rep, NULL, NULL), MORI_ERANGE);
	close(fd);
	/* a duplicate id while the first is in flight; cancel; an unknown cancel is ignored */
	kill(NB.pid, SIGSTOP);
	d[0] = (mori_desc){0, 0, 1 << 20};
	struct mori_sqe e = {.op = SQE_XFER, .count = 1, .user_data = 77, .local_region = lr, .remote = ref,
			     .arg_off = off, .timeout_us = 10000000};
	OK(client_submit(c, &e));
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, 0, 77, lr, ref, off, 1, msg, sizeof(msg)), MORI_EINVAL);
	struct mori_sqe k = {.op = SQE_CANCEL, .user_data = 78};
	OK(client_submit(c, &k));
	k.user_data = 77;
	OK(client_submit(c, &k));
	struct mori_cqe q = raw_wait(c, 77, 2000);
	ck_assert_int_eq(q.code, MORI_ECANCELED);
	OK(client_submit(c, &k)); /* cancelling again: nothing more */
	kill(NB.pid, SIGCONT);
	/* exactly one completion per submission: nothing else arrives */
	usleep(200000);
	struct mori_cqe extra;
	ck_assert_int_eq(ring_pop(c->cqh, c->cqe, c->lay.cq_entries, sizeof(extra), &extra), -1);
	/* and the daemon still works */
	d[0] = (mori_desc){0, 0, 4096};
	ck_assert_int_eq(raw_xfer(c, SQE_XFER, SQE_F_READ, ++id, lr, ref, off, 1, NULL, 0), MORI_OK);
	mori_xfer_list_free(pl);
	target_end(&t, NULL, NULL);
	mori_client_close(other);
	mori_client_close(c);
}
END_TEST

/* ---- a misbehaving peer on B's data port: garbage, wrong direction, bad ranges ---- */

static int data_connect(struct test_node *n, uint32_t port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	ck_assert(inet_pton(AF_INET, n->ip, &sa.sin_addr) == 1);
	ck_assert_msg(connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect data port %u", port);
	struct timeval tv = {.tv_sec = 3};
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return s;
}

static uint8_t frame_secret[REGION_SECRET_BYTES]; /* what send_frame names its region with */
static uint16_t frame_flags;                         /* ... and its flags */
static uint64_t frame_aux, frame_tag;                /* ... FF_SIGNAL's word and value */
static uint32_t frame_pad;                           /* ... and its op */

static void send_frame(int s, uint16_t type, int32_t code, uint64_t xfer, uint64_t region, uint32_t gen,
		       uint64_t offset, uint32_t len, uint32_t rlen, uint64_t total, const void *payload)
{
	struct fhdr h = {.magic = FRAME_MAGIC, .type = type, .flags = frame_flags, .len = len, .code = code, .xfer = xfer,
			 .region = region, .gen = gen, .rlen = rlen, .offset = offset, .aux = frame_aux, .total = total,
			 .tag = frame_tag, .deadline_ms = 5000, .pad = frame_pad};
	memcpy(h.key, frame_secret, sizeof(h.key));
	ck_assert(write(s, &h, sizeof(h)) == (ssize_t)sizeof(h));
	if (len && payload)
		ck_assert(write(s, payload, len) == (ssize_t)len);
}

static void hello(int s)
{
	ck_assert_int_eq(data_handshake(s, &XKEY, 777, "fuzz"), 0);
}

START_TEST(misbehaving_peer)
{
	if (NB.ns)
		return; /* the data port is inside B's namespace: the loopback run covers this */
	struct target t;
	target_start(&t, NB.dir, 1, 8);
	char url[200];
	struct pctl pc;
	uint64_t epoch;
	snprintf(url, sizeof(url), "tcp://%s", NB.addr);
	ck_assert_int_eq(pctl_open(&pc, url, XKEY.on ? &XKEY : NULL, "fuzz"), MORI_OK);
	uint32_t port = pctl_data_port(&pc, &epoch);
	ck_assert_uint_ne(port, 0);
	ck_assert_uint_ne(epoch, 0);
	pctl_close(&pc);
	/* the region's handle, as a well-behaved peer would know it (from its owner's blob) */
	mori_client *c;
	mori_mem *ra, *l;
	OK(mori_client_open(NA.dir, "fuzz", &c));
	OK(mori_mem_open_remote(c, NB.addr, "target/a", &ra));
	uint8_t blob[MORI_MEM_BLOB_MAX];
	Mori__Handle *hd = blob_handle(blob, ask_blob(&t, 0, blob));
	ck_assert(hd && hd->secret.len == REGION_SECRET_BYTES);
	uint64_t region = hd->region_id;
	uint32_t gen = hd->generation;
	memcpy(frame_secret, hd->secret.data, REGION_SECRET_BYTES);
	mori__handle__free_unpacked(hd, NULL);
	ck_assert_uint_ne(region, 0);

	uint8_t junk[4096];
	fill_random(junk, sizeof(junk), 5);
	int s = data_connect(&NB, port); /* garbage: closed */
	ck_assert(write(s, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
	ck_assert_int_eq(data_read(s, NULL, 0).type, 0);
	close(s);
	s = data_connect(&NB, port); /* wrong version: closed */
	send_frame(s, F_HELLO, 99, 777, 0, 0, 0, 0, 0, 0, NULL);
	ck_assert_int_eq(data_read(s, NULL, 0).type, 0);
	close(s);
	s = data_connect(&NB, port); /* data before hello: closed */
	send_frame(s, F_WRITE, 0, 1, region, gen, 0, 16, 0, 16, junk);
	ck_assert_int_eq(data_read(s, NULL, 0).type, 0);
	close(s);
	s = data_connect(&NB, port);
	hello(s);
	send_frame(s, F_WRITE, 0, 1, 9999, 1, 0, 100, 0, 100, junk); /* unknown region */
	{
		struct fhdr a0 = data_read(s, NULL, 0);
		ck_assert_int_eq(a0.type, F_DONE);
		ck_assert_int_eq(a0.code, MORI_ESTALE);
	}
	frame_secret[3] ^= 1; /* the right region and generation, a wrong secret */
	send_frame(s, F_WRITE, 0, 10, region, gen, 0, 100, 0, 100, junk);
	frame_secret[3] ^= 1;
	struct fhdr a = data_read(s, NULL, 0);
	ck_assert_int_eq(a.type, F_DONE);
	ck_assert_int_eq(a.code, MORI_ESTALE);
	send_frame(s, F_WRITE, 0, 2, region, gen + 1, 0, 100, 0, 100, junk); /* wrong generation */
	a = data_read(s, NULL, 0);
	ck_assert_int_eq(a.code, MORI_ESTALE);
	send_frame(s, F_WRITE, 0, 3, region, gen, REGION_A - 10, 100, 0, 100, junk); /* past the end */
	a = data_read(s, NULL, 0);
	ck_assert_int_eq(a.type, F_DONE);
	ck_assert_int_eq(a.code, MORI_ERANGE);
	send_frame(s, F_WRITE, 0, 4, region, gen, UINT64_MAX - 10, 100, 0, 100, junk); /* wrapping */
	ck_assert_int_eq(data_read(s, NULL, 0).code, MORI_ERANGE);
	send_frame(s, F_READ, 0, 5, region, gen, REGION_A, 0, 100, 100, NULL);
	a = data_read(s, NULL, 0);
	ck_assert_int_eq(a.type, F_RDATA);
	ck_assert_int_eq(a.code, MORI_ERANGE);
	ck_assert_uint_eq(a.rlen, 100);
	send_frame(s, F_READ, 0, 6, region, gen, 0, 0, CHUNK_MAX + 1, CHUNK_MAX + 1, NULL); /* too large */
	ck_assert_int_eq(data_read(s, NULL, 0).code, MORI_ERANGE);
	send_frame(s, F_ABORT, 0, 12345, 0, 0, 0, 0, 0, 0, NULL); /* unknown: ignored */
	send_frame(s, F_READ, 0, 7, region, gen, 64, 0, 8, 8, NULL); /* a good read still works */
	a = data_read(s, NULL, 0);
	ck_assert_int_eq(a.type, F_RDATA);
	ck_assert_int_eq(a.code, 0);
	ck_assert_uint_eq(a.len, 8);
	/* frame version 1's notification flag (the target notified after the data): refused with a
	 * reason, nothing lands, nothing is read, no notification reaches the region's owner */
	mori_desc dn = {0, 4096, 100};
	uint64_t before = ask_hash(&t, 0, &dn, NULL, 1);
	char why[200] = "";
	frame_flags = FF_NOTIF_V1;
	send_frame(s, F_WRITE, 0, 11, region, gen, 4096, 100, 0, 100, junk);
	a = data_read(s, why, sizeof(why) - 1);
	ck_assert_int_eq(a.type, F_DONE);
	ck_assert_int_eq(a.code, MORI_EPROTO);
	ck_assert_msg(strstr(why, "control link"), "the refusal says: %s", why);
	send_frame(s, F_READ, 0, 12, region, gen, 64, 0, 8, 8, NULL);
	a = data_read(s, NULL, 0);
	ck_assert_int_eq(a.type, F_RDATA);
	ck_assert_int_eq(a.code, MORI_EPROTO);
	frame_flags = 0;
	ck_assert_uint_eq(ask_hash(&t, 0, &dn, NULL, 1), before);
	/* frame version 4's signal after the data: a word outside the region, an unknown op, a read
	 * with it: refused with their codes, nothing lands; a good one: the data, then the word, then
	 * DONE */
	frame_flags = FF_SIGNAL;
	frame_pad = 1;
	frame_tag = 0x5157u;
	frame_aux = REGION_A;
	send_frame(s, F_WRITE, 0, 13, region, gen, 4096, 100, 0, 100, junk);
	ck_assert_int_eq(data_read(s, NULL, 0).code, MORI_ERANGE);
	frame_aux = 8196; /* unaligned */
	send_frame(s, F_WRITE, 0, 14, region, gen, 4096, 100, 0, 100, junk);
	ck_assert_int_eq(data_read(s, NULL, 0).code, MORI_ERANGE);
	frame_aux = 8192;
	frame_pad = 3;
	send_frame(s, F_WRITE, 0, 15, region, gen, 4096, 100, 0, 100, junk);
	ck_assert_int_eq(data_read(s, NULL, 0).code, MORI_EPROTO);
	frame_pad = 1;
	send_frame(s, F_READ, 0, 16, region, gen, 64, 0, 8, 8, NULL);
	a = data_read(s, NULL, 0);
	ck_assert_int_eq(a.type, F_RDATA);
	ck_assert_int_eq(a.code, MORI_EPROTO);
	ck_assert_uint_eq(ask_hash(&t, 0, &dn, NULL, 1), before);
	mori_desc dw = {0, 8192, 8};
	uint64_t want = 0x5157u;
	ck_assert_uint_ne(ask_hash(&t, 0, &dw, NULL, 1), local_hash((uint8_t *)&want, &dw, NULL, 1));
	send_frame(s, F_WRITE, 0, 17, region, gen, 4096, 100, 0, 100, junk);
	a = data_read(s, NULL, 0);
	ck_assert_int_eq(a.type, F_DONE);
	ck_assert_int_eq(a.code, 0);
	ck_assert_uint_eq(ask_hash(&t, 0, &dw, NULL, 1), local_hash((uint8_t *)&want, &dw, NULL, 1));
	mori_desc dj = {0, 4096, 100};
	ck_assert_uint_eq(ask_hash(&t, 0, &dn, NULL, 1), local_hash(junk, &dj, NULL, 1));
	frame_flags = 0;
	frame_pad = 0;
	frame_aux = frame_tag = 0;
	send_frame(s, F_WRITE, 0, 8, region, gen, 0, CHUNK_MAX + 1, 0, CHUNK_MAX + 1, NULL); /* oversized */
	ck_assert_int_eq(data_read(s, NULL, 0).type, 0);
	close(s);
	s = data_connect(&NB, port); /* a frame only the initiator may receive: closed */
	hello(s);
	send_frame(s, F_RDATA, 0, 1, 0, 0, 0, 0, 0, 0, NULL);
	ck_assert_int_eq(data_read(s, NULL, 0).type, 0);
	close(s);
	s = data_connect(&NB, port); /* a peer that sends half a transfer and vanishes */
	hello(s);
	send_frame(s, F_WRITE, 0, 9, region, gen, 0, 100, 0, 1 << 20, junk);
	close(s);
	/* B is still well: a real transfer works and nothing is pinned by the dropped state */
	OK(mori_mem_alloc(c, 4096, MORI_MEM_HOST, &l));
	memset(mori_mem_ptr(l), 0x33, 4096);
	mori_xfer *x;
	OK(mori_xfer_write(l, 0, ra, 8192, 4096, NULL, &x));
	xfer_done(x);
	mori_desc d = {0, 8192, 4096};
	ck_assert_uint_eq(ask_hash(&t, 0, &d, NULL, 1), local_hash(mori_mem_ptr(l), &d, NULL, 1));
	Mori__Reply *mr = node_list(&NB, 2);
	for (size_t i = 0; i < mr->list->n_regions; i++)
		ck_assert_uint_eq(mr->list->regions[i]->inflight, 0);
	mori__reply__free_unpacked(mr, NULL);
	uint64_t notifs = 1;
	target_end(&t, &notifs, NULL);
	ck_assert_uint_eq(notifs, 0);
	mori_client_close(c);
}
END_TEST

int main(void)
{
	snprintf(xkey_path, sizeof(xkey_path), "/tmp/mori-xnode-key-%d", (int)getpid());
	if (!getenv("MORI_XNODE_NO_KEY") && key_write(xkey_path, &XKEY) != 0) {
		fprintf(stderr, "cannot write a cluster key at %s\n", xkey_path);
		return 1;
	}
	Suite *s = suite_create("xnode");
	TCase *t = tcase_create("xnode");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 600);
	tcase_add_test(t, random_batches);
	tcase_add_test(t, bad_input);
	tcase_add_test(t, forced_rdma_without_device);
	tcase_add_test(t, deadline_and_cancel);
	tcase_add_test(t, deregister_stalled_transfer);
	tcase_add_test(t, peer_killed);
	tcase_add_test(t, initiator_killed);
	tcase_add_test(t, raw_submissions);
	tcase_add_test(t, deregister_under_traffic);
	tcase_add_test(t, misbehaving_peer);
	tcase_add_test(t, small_behind_large);
	tcase_add_test(t, stop_mid_transfer);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	if (XKEY.on)
		unlink(xkey_path);
	return failed ? 1 : 0;
}
