/* MORI-CCO's host side, no GPU: communicators of forked ranks over host-memory windows, on one
 * node and across two morids (ranks node-major: the first half on node A, the rest on B). Values
 * are checked against a pattern computed from the numbers alone; teams against lists built here
 * from the rank layout. Every fault of the API: a window registered by some ranks only (the others
 * time out naming it), requirements beyond what a device communicator holds or the heap has room
 * for, a device communicator used after its communicator is gone, a rank killed inside the host
 * barrier, two communicators over the same ranks used at once from two threads (no cross-talk).
 * The copy-engine queue server is driven by this test playing the kernel: it writes requests in
 * the layout of mori/device_host/cco_layout.h.
 *
 * Two nodes: by default two morids on loopback; tests/test_cco_netns.sh runs this binary with
 * MORI_XNODE_NS_A/B and MORI_XNODE_IP_A/B (network namespaces joined by veth). */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "harness.h"
#include "ctl_harness.h"
#include "node_harness.h"
#include "pe_harness.h"
#include "mori.h"
#include "mori_cco.h"

#define HEAP (4u << 20)
#define MAXPE 8
#define SLOT 4096 /* bytes each rank puts into each peer's window */

static struct test_node NA, NB;
static int two_nodes;

static void setup1(void)
{
	two_nodes = 0;
	ck_assert_int_eq(node_one_start(&NA, "cco"), 0);
}

static void setup2(void)
{
	two_nodes = 1;
	ck_assert_int_eq(node_two_start(&NA, &NB, "cco", 7300, 1), 0);
}

static void teardown(void)
{
	ck_assert_msg(node_pair_stop(&NA, &NB) == 0, "morid did not stop cleanly (above: which, and its log)");
}

struct shared {
	char msg[MAXPE][PE_MSG_LEN];
	mori_cco_unique_id uid[2];
	volatile int uid_ready;
	volatile int done[MAXPE];
	double secs[MAXPE];
};
static struct shared *SH;
static void shared_setup(void) { pe_shared_map(SH); }

/* Node-major: ranks [0, n/2) on A, the rest on B (one node: all on A). */
static int on_b(int pe, int n) { return two_nodes && pe >= n / 2; }
static struct test_node *node_of(int pe, int n) { return on_b(pe, n) ? &NB : &NA; }


/* Rank 0 makes k unique ids into SH->uid; every rank opens its client and waits for them. */
static int open_and_uids(int pe, int n, int k, mori_client **c)
{
	POK(pe, mori_client_open(node_of(pe, n)->dir, "cco", c));
	if (pe == 0) {
		for (int i = 0; i < k; i++)
			POK(pe, mori_cco_get_unique_id(*c, &SH->uid[i]));
		__atomic_store_n(&SH->uid_ready, 1, __ATOMIC_RELEASE);
	}
	while (!__atomic_load_n(&SH->uid_ready, __ATOMIC_ACQUIRE))
		usleep(1000);
	return 0;
}

static int create(int pe, int n, mori_client *c, int which, uint64_t heap, int64_t timeout_us, mori_cco_comm **k)
{
	mori_cco_comm_opts o;
	POK(pe, mori_cco_comm_opts_init(&o, sizeof(o)));
	o.per_rank_size = heap;
	o.timeout_us = timeout_us;
	POK(pe, mori_cco_comm_create(c, &SH->uid[which], n, pe, &o, k));
	return 0;
}

/* The group name inside a unique id (magic, version, root\0, name\0), read here independently. */
static const char *uid_group(const mori_cco_unique_id *id)
{
	const char *root = id->internal + 8;
	return root + strlen(root) + 1;
}

/* ---- windows, puts and gets, peer pointers, teams, the device communicator ---- */

/* The test plays a kernel: post one copy-engine request on queue q and wait (deadline) until the
 * server counted it done; returns the queue's error word. */
static int ce_post(const mori_cco_dev_comm *d, int q, uint64_t dst, uint64_t src, uint64_t bytes)
{
	struct mori_cco_ce_ctrl *c = (struct mori_cco_ce_ctrl *)(uintptr_t)d->ce_ctrl + q;
	struct mori_cco_ce_req *ring = (struct mori_cco_ce_req *)(uintptr_t)d->ce_ring + (size_t)q * d->ce_entries;
	uint64_t seq = __atomic_fetch_add(&c->head, 1, __ATOMIC_RELAXED);
	struct mori_cco_ce_req *r = &ring[seq & (d->ce_entries - 1)];
	r->dst = dst;
	r->src = src;
	r->bytes = bytes;
	__atomic_store_n(&r->ready, seq + 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 20000 && __atomic_load_n(&c->done, __ATOMIC_ACQUIRE) <= seq; i++)
		usleep(500);
	return __atomic_load_n(&c->done, __ATOMIC_ACQUIRE) > seq ? c->error : MORI_ETIMEDOUT;
}

static int pe_windows(int pe, int n, void *arg)
{
	(void)arg;
	mori_client *c;
	mori_cco_comm *k;
	if (open_and_uids(pe, n, 1, &c) || create(pe, n, c, 0, HEAP, 20000000, &k))
		return 1;
	PCHECK(pe, mori_cco_comm_rank(k) == pe && mori_cco_comm_size(k) == n, "rank %d size %d", mori_cco_comm_rank(k),
	       mori_cco_comm_size(k));
	const uint64_t salt = 0x5eed;
	const size_t wbytes = (size_t)n * SLOT;
	uint8_t *mem, *mem2;
	mori_cco_window *w, *w2;
	POK(pe, mori_cco_mem_alloc(k, wbytes, (void **)&mem));
	POK(pe, mori_cco_mem_alloc(k, wbytes, (void **)&mem2));
	POK(pe, mori_cco_window_register(k, mem, wbytes, &w));
	POK(pe, mori_cco_window_register(k, mem2, wbytes, &w2));
	PCHECK(pe, mori_cco_window_local_ptr(w) == mem, "local ptr %p, not %p", mori_cco_window_local_ptr(w), mem);
	mori_cco_win wd = mori_cco_window_dev(w);
	PCHECK(pe, wd.bytes == wbytes, "window of %llu bytes", (unsigned long long)wd.bytes);
	for (size_t i = 0; i < wbytes; i++)
		PCHECK(pe, mem[i] == 0 && mem2[i] == 0, "byte %zu of fresh memory is %u", i, mem[i]);
	POK(pe, mori_cco_barrier_all(k)); /* every rank saw its zeroes before any puts */

	/* every rank puts its slot into every rank's window (LSA by copy, others through morid) */
	uint8_t buf[SLOT];
	for (int to = 0; to < n; to++) {
		for (int i = 0; i < SLOT; i++)
			buf[i] = pe_pattern(pe, to, (uint64_t)i, salt);
		POK(pe, mori_cco_put(k, w, (uint64_t)pe * SLOT, buf, SLOT, to));
	}
	POK(pe, mori_cco_barrier_all(k));
	for (int from = 0; from < n; from++)
		for (int i = 0; i < SLOT; i++)
			PCHECK(pe, mem[(size_t)from * SLOT + i] == pe_pattern(from, pe, (uint64_t)i, salt),
			       "byte %d of rank %d's slot", i, from);
	/* gets: what rank q holds from rank (q+1)%n */
	for (int q = 0; q < n; q++) {
		int from = (q + 1) % n;
		POK(pe, mori_cco_get(k, buf, w, (uint64_t)from * SLOT, SLOT, q));
		for (int i = 0; i < SLOT; i++)
			PCHECK(pe, buf[i] == pe_pattern(from, q, (uint64_t)i, salt), "get from rank %d: byte %d", q, i);
	}
	/* out of the window: refused, nothing moved */
	PCHECK(pe, mori_cco_put(k, w, wbytes - 8, buf, 16, 0) == MORI_ERANGE, "put past the window's end");
	PCHECK(pe, mori_cco_put(k, w, 0, buf, 8, n) == MORI_EINVAL, "put to rank %d", n);

	/* the LSA team and peer pointers: independently, this node's ranks */
	int lo = on_b(pe, n) ? n / 2 : 0, cnt = two_nodes ? (on_b(pe, n) ? n - n / 2 : n / 2) : n;
	int ls, lr, ns;
	POK(pe, mori_cco_comm_lsa(k, &ls, &lr, &ns));
	PCHECK(pe, ls == cnt && lr == pe - lo && ns == lo, "lsa %d/%d from %d, expected %d/%d from %d", lr, ls, ns,
	       pe - lo, cnt, lo);
	for (int q = 0; q < n; q++) {
		uint8_t *p = mori_cco_get_peer_ptr(k, mem2, q);
		int lsa = q >= lo && q < lo + cnt;
		PCHECK(pe, (p != NULL) == lsa, "peer pointer of rank %d: %p (LSA: %d)", q, (void *)p, lsa);
		if (p) /* a store through the mapping into rank q's second window */
			for (int i = 0; i < SLOT; i++)
				p[(size_t)pe * SLOT + i] = pe_pattern(pe, q, (uint64_t)i, salt + 1);
	}
	POK(pe, mori_cco_barrier_all(k));
	for (int from = lo; from < lo + cnt; from++)
		for (int i = 0; i < SLOT; i++)
			PCHECK(pe, mem2[(size_t)from * SLOT + i] == pe_pattern(from, pe, (uint64_t)i, salt + 1),
			       "stored byte %d of rank %d", i, from);

	/* the device communicator: fields, teams, resources */
	mori_cco_dev_comm_reqs r;
	POK(pe, mori_cco_dev_comm_reqs_init(&r, sizeof(r)));
	PCHECK(pe, r.gda_connection_type == MORI_CCO_GDA_CONNECTION_CROSSNODE && r.gda_signal_count == 16 &&
			   r.gda_counter_count == 16, "defaults");
	r.lsa_barrier_count = 2;
	r.rail_gda_barrier_count = two_nodes ? 1 : 0;
	r.barrier_count = 1;
	r.ce_queue_count = 2;
	mori_cco_dev_comm d;
	POK(pe, mori_cco_dev_comm_create(k, &r, &d));
	POK(pe, mori_cco_dev_comm_check(&d));
	PCHECK(pe, d.magic == MORI_CCO_MAGIC && d.rank == pe && d.world_size == n && d.lsa_size == cnt &&
			   d.lsa_rank == pe - lo && d.node_start == lo && d.signal_count == 16 && d.ce_queue_count == 2,
	       "device communicator fields");
	mori_cco_team t = mori_cco_team_world(&d);
	for (int i = 0; i < n; i++)
		PCHECK(pe, mori_cco_team_to_world(&d, t, i) == i, "world team rank %d", i);
	t = mori_cco_team_lsa(&d);
	PCHECK(pe, t.n_ranks == cnt, "lsa team of %d", t.n_ranks);
	for (int i = 0; i < cnt; i++)
		PCHECK(pe, mori_cco_team_to_world(&d, t, i) == lo + i, "lsa team rank %d", i);
	t = mori_cco_team_cross_node(&d);
	PCHECK(pe, t.n_ranks == n - cnt, "cross-node team of %d", t.n_ranks);
	for (int i = 0, w2r = 0; i < n; i++) /* the ranks not on this node, ascending */
		if (i < lo || i >= lo + cnt)
			PCHECK(pe, mori_cco_team_to_world(&d, t, w2r++) == i, "cross-node team rank %d", w2r - 1);
	t = mori_cco_team_rail(&d);
	PCHECK(pe, t.n_ranks == (two_nodes ? 1 : 0), "rail team of %d", t.n_ranks);
	if (two_nodes)
		PCHECK(pe, mori_cco_team_to_world(&d, t, 0) == (on_b(pe, n) ? pe - n / 2 : pe + n / 2), "rail peer %d",
		       mori_cco_team_to_world(&d, t, 0));
	/* the resource area: inside the heap, past both windows' blocks, zero */
	uint64_t mo = (uint64_t)(mem - (uint8_t *)(uintptr_t)d.heap_base);
	PCHECK(pe, d.res_off >= 65536 && d.res_off + d.res_bytes <= d.heap_size &&
			   (d.res_off >= mo + 2 * wbytes || d.res_off + d.res_bytes <= mo), "resources at [%#llx, +%llu)",
	       (unsigned long long)d.res_off, (unsigned long long)d.res_bytes);
	PCHECK(pe, d.res_bytes >= 8ull * (16 + 16 + 2 * (1 + cnt) + (1 + n)), "resources of %llu bytes",
	       (unsigned long long)d.res_bytes);
	for (uint64_t i = 0; i < d.res_bytes; i++)
		PCHECK(pe, ((uint8_t *)(uintptr_t)(d.heap_base + d.res_off))[i] == 0, "resource byte %llu", (unsigned long long)i);
	for (int i = 0; i < 16; i++) {
		uint64_t v = 1;
		POK(pe, mori_cco_dev_comm_read_signal(&d, i, &v));
		PCHECK(pe, v == 0, "signal %d is %llu", i, (unsigned long long)v);
	}
	uint64_t v;
	PCHECK(pe, mori_cco_dev_comm_read_signal(&d, 16, &v) == MORI_ERANGE, "signal 16 of 16");
	POK(pe, mori_cco_barrier_all(k)); /* every rank saw its zeroes before any adds */
	/* a signal word is the same heap offset at every rank: an LSA peer's store shows in read_signal */
	uint64_t *mine = (uint64_t *)(uintptr_t)(d.heap_base + d.signal_off) + 3;
	uint64_t *next = mori_cco_get_peer_ptr(k, mine, lo + (pe - lo + 1) % cnt);
	__atomic_fetch_add(next, (uint64_t)pe + 1, __ATOMIC_RELEASE);
	POK(pe, mori_cco_barrier_all(k));
	POK(pe, mori_cco_dev_comm_read_signal(&d, 3, &v));
	int prev = lo + (pe - lo + cnt - 1) % cnt;
	PCHECK(pe, v == (uint64_t)prev + 1, "signal 3 holds %llu, rank %d added %d", (unsigned long long)v, prev, prev + 1);

	/* copy-engine queues: this rank (playing its kernel) copies its slot into the next LSA peer's
	 * third region through queue 1; a request outside the heaps is refused and still counted */
	uint8_t *mem3;
	POK(pe, mori_cco_mem_alloc(k, wbytes, (void **)&mem3));
	int to = lo + (pe - lo + 1) % cnt;
	for (int i = 0; i < SLOT; i++)
		mem3[(size_t)pe * SLOT + i] = pe_pattern(pe, to, (uint64_t)i, salt + 2);
	uint8_t *dst = mori_cco_get_peer_ptr(k, mem3, to);
	PCHECK(pe, dst != NULL, "no peer pointer for LSA rank %d", to);
	if (to != pe)
		POK(pe, ce_post(&d, 1, (uint64_t)(uintptr_t)(dst + (size_t)pe * SLOT), (uint64_t)(uintptr_t)(mem3 + (size_t)pe * SLOT), SLOT));
	int rc = ce_post(&d, 0, (uint64_t)(uintptr_t)buf, (uint64_t)(uintptr_t)mem3, 64);
	PCHECK(pe, rc == MORI_ERANGE, "a request to memory outside the heaps: %d", rc);
	POK(pe, mori_cco_barrier_all(k));
	int from = lo + (pe - lo + cnt - 1) % cnt;
	if (from != pe)
		for (int i = 0; i < SLOT; i++)
			PCHECK(pe, mem3[(size_t)from * SLOT + i] == pe_pattern(from, pe, (uint64_t)i, salt + 2),
			       "copy-engine byte %d from rank %d", i, from);

	POK(pe, mori_cco_dev_comm_destroy(&d));
	PCHECK(pe, mori_cco_dev_comm_check(&d) == MORI_ESTALE, "a destroyed device communicator is refused");
	PCHECK(pe, mori_cco_mem_free(k, mem) == MORI_EBUSY, "free under a window");
	POK(pe, mori_cco_window_deregister(k, w));
	POK(pe, mori_cco_mem_free(k, mem));
	POK(pe, mori_cco_barrier_all(k));
	POK(pe, mori_cco_comm_destroy(k));
	mori_client_close(c);
	return 0;
}

START_TEST(host_windows)
{
	pe_run_all(two_nodes ? 4 : 3, pe_windows, NULL, 120, 0);
}
END_TEST

/* ---- a window registered by some ranks only ---- */

static int pe_partial(int pe, int n, void *arg)
{
	(void)arg;
	mori_client *c;
	mori_cco_comm *k;
	if (open_and_uids(pe, n, 1, &c) || create(pe, n, c, 0, HEAP, 2000000, &k))
		return 1;
	void *p;
	POK(pe, mori_cco_mem_alloc(k, 8192, &p));
	if (pe != n - 1) {
		mori_cco_window *w;
		int rc = mori_cco_window_register(k, p, 8192, &w);
		const char *m = mori_client_last_error(c);
		PCHECK(pe, rc == MORI_ETIMEDOUT, "register without rank %d: %d (%s)", n - 1, rc, m);
		PCHECK(pe, strstr(m, "window_register(heap offset") && strstr(m, "8192 bytes") && strstr(m, "never made it"),
		       "the message names the window and the missing rank: %s", m);
		char who[16];
		snprintf(who, sizeof(who), "PE %d", n - 1);
		PCHECK(pe, strstr(m, who), "the message names %s: %s", who, m);
		mori_status st;
		PCHECK(pe, mori_cco_comm_status(k, &st) == MORI_ETIMEDOUT && st.pe == n - 1, "status %d pe %d", st.code, st.pe);
		PCHECK(pe, mori_cco_barrier_all(k) == MORI_ETIMEDOUT, "an aborted communicator stays aborted");
		__atomic_add_fetch(&SH->done[0], 1, __ATOMIC_RELEASE);
	} else {
		/* stays away until the others' deadline passed */
		for (int i = 0; i < 60000 && __atomic_load_n(&SH->done[0], __ATOMIC_ACQUIRE) < n - 1; i++)
			usleep(1000);
		PCHECK(pe, SH->done[0] == n - 1, "the others never returned");
	}
	POK(pe, mori_cco_comm_destroy(k));
	mori_client_close(c);
	return 0;
}

START_TEST(window_some_ranks)
{
	pe_run_all(3, pe_partial, NULL, 60, 0);
}
END_TEST

/* ---- requirements beyond the resources ---- */

static int pe_reqs(int pe, int n, void *arg)
{
	(void)arg;
	mori_client *c;
	mori_cco_comm *k;
	if (open_and_uids(pe, n, 1, &c) || create(pe, n, c, 0, 1u << 20, 20000000, &k))
		return 1;
	mori_cco_dev_comm_reqs r;
	mori_cco_dev_comm d;
	const char *m;
	int rc;
	mori_cco_dev_comm_reqs_init(&r, sizeof(r));
	r.gda_signal_count = MORI_CCO_MAX_SIGNALS + 1;
	rc = mori_cco_dev_comm_create(k, &r, &d);
	m = mori_client_last_error(c);
	PCHECK(pe, rc == MORI_EINVAL && strstr(m, "gda_signal_count 65537"), "%d %s", rc, m);
	PCHECK(pe, mori_cco_dev_comm_check(&d) == MORI_EINVAL, "a refused create leaves no device communicator");
	mori_cco_dev_comm_reqs_init(&r, sizeof(r));
	r.gda_counter_count = -1;
	rc = mori_cco_dev_comm_create(k, &r, &d);
	PCHECK(pe, rc == MORI_EINVAL && strstr(mori_client_last_error(c), "gda_counter_count -1"), "%d", rc);
	mori_cco_dev_comm_reqs_init(&r, sizeof(r));
	r.ce_queue_count = MORI_CCO_MAX_CE_QUEUES + 1;
	PCHECK(pe, mori_cco_dev_comm_create(k, &r, &d) == MORI_EINVAL, "too many copy-engine queues");
	mori_cco_dev_comm_reqs_init(&r, sizeof(r));
	r.gda_connection_type = (mori_cco_gda_connection)7;
	PCHECK(pe, mori_cco_dev_comm_create(k, &r, &d) == MORI_EINVAL, "connection type 7");
	mori_cco_dev_comm_reqs_init(&r, sizeof(r));
	r.gda_connection_type = MORI_CCO_GDA_CONNECTION_NONE;
	r.rail_gda_barrier_count = 1;
	rc = mori_cco_dev_comm_create(k, &r, &d);
	PCHECK(pe, rc == MORI_EINVAL && strstr(mori_client_last_error(c), "need a GDA connection"), "%d %s", rc,
	       mori_client_last_error(c));
	/* within the limits but past the heap (1 MiB, 64 KiB of it the library's): refused by every
	 * rank at create, sizes named, nothing allocated, the communicator fine */
	mori_cco_dev_comm_reqs_init(&r, sizeof(r));
	r.gda_signal_count = MORI_CCO_MAX_SIGNALS;
	r.gda_counter_count = MORI_CCO_MAX_COUNTERS;
	rc = mori_cco_dev_comm_create(k, &r, &d);
	m = mori_client_last_error(c);
	PCHECK(pe, rc == MORI_ENOMEM && strstr(m, "65536 signals") && strstr(m, "1048576 bytes of the communicator's heap"),
	       "%d %s", rc, m);
	POK(pe, mori_cco_barrier_all(k));
	mori_cco_dev_comm_reqs_init(&r, sizeof(r));
	POK(pe, mori_cco_dev_comm_create(k, &r, &d));
	/* an option struct from a newer library with a field set: not silently ignored */
	struct {
		mori_cco_dev_comm_reqs r;
		int newer;
	} big;
	memset(&big, 0, sizeof(big));
	mori_cco_dev_comm_reqs_init(&big.r, sizeof(big));
	big.newer = 1;
	PCHECK(pe, mori_cco_dev_comm_create(k, &big.r, &d) == MORI_ENOTSUP, "a newer struct's field");
	POK(pe, mori_cco_barrier_all(k));
	POK(pe, mori_cco_comm_destroy(k));
	mori_client_close(c);
	return 0;
}

START_TEST(reqs_beyond_resources)
{
	pe_run_all(2, pe_reqs, NULL, 60, 0);
}
END_TEST

/* ---- a device communicator after its communicator ---- */

static int pe_stale(int pe, int n, void *arg)
{
	(void)arg;
	mori_client *c;
	mori_cco_comm *k;
	if (open_and_uids(pe, n, 2, &c) || create(pe, n, c, 0, HEAP, 20000000, &k))
		return 1;
	mori_cco_dev_comm d, d2;
	POK(pe, mori_cco_dev_comm_create(k, NULL, &d));
	POK(pe, mori_cco_dev_comm_create(k, NULL, &d2));
	PCHECK(pe, d.live_slot != d2.live_slot && d.res_off != d2.res_off, "two device communicators share resources");
	const volatile uint64_t *live = (const volatile uint64_t *)(uintptr_t)d.live;
	PCHECK(pe, live[d.live_slot] == d.live_gen, "the word a kernel checks says live");
	POK(pe, mori_cco_barrier_all(k));
	POK(pe, mori_cco_comm_destroy(k));
	/* the communicator is gone: the host refuses its device communicators, and the word a
	 * kernel reads before every call no longer holds their generation */
	PCHECK(pe, mori_cco_dev_comm_check(&d) == MORI_ESTALE, "check after destroy");
	uint64_t v = 77;
	PCHECK(pe, mori_cco_dev_comm_read_signal(&d, 0, &v) == MORI_ESTALE && v == 77, "read after destroy");
	PCHECK(pe, mori_cco_dev_comm_read_counter(&d2, 0, &v) == MORI_ESTALE && v == 77, "read after destroy");
	PCHECK(pe, live[d.live_slot] != d.live_gen && live[d2.live_slot] != d2.live_gen, "liveness words unchanged");
	PCHECK(pe, mori_cco_dev_comm_destroy(&d) == MORI_OK, "destroy of a stale device communicator");
	mori_cco_dev_comm junk;
	memset(&junk, 0, sizeof(junk));
	PCHECK(pe, mori_cco_dev_comm_check(&junk) == MORI_EINVAL, "not a device communicator");
	/* a slot reused by a new communicator's device communicator keeps the old copy stale */
	mori_cco_comm *k2;
	if (create(pe, n, c, 1, HEAP, 20000000, &k2))
		return 1;
	mori_cco_dev_comm d3;
	POK(pe, mori_cco_dev_comm_create(k2, NULL, &d3));
	PCHECK(pe, mori_cco_dev_comm_check(&d) == MORI_ESTALE && mori_cco_dev_comm_check(&d3) == MORI_OK, "reused slot");
	PCHECK(pe, d3.live_gen != d.live_gen && d3.live_gen != d2.live_gen, "generations repeat");
	POK(pe, mori_cco_barrier_all(k2));
	mori_client_close(c); /* the communicator has a session of its own: it goes on */
	POK(pe, mori_cco_dev_comm_check(&d3));
	POK(pe, mori_cco_barrier_all(k2));
	POK(pe, mori_cco_comm_destroy(k2));
	PCHECK(pe, mori_cco_dev_comm_check(&d3) == MORI_ESTALE, "after its communicator");
	return 0;
}

START_TEST(dev_comm_after_destroy)
{
	pe_run_all(2, pe_stale, NULL, 60, 0);
}
END_TEST

/* ---- a rank killed inside the host barrier ---- */

static int pe_killed(int pe, int n, void *arg)
{
	(void)arg;
	mori_client *c;
	mori_cco_comm *k;
	/* a deadline far beyond how long death takes to show: EPEERDEAD proves the death was seen */
	if (open_and_uids(pe, n, 1, &c) || create(pe, n, c, 0, HEAP, 60000000, &k))
		return 1;
	POK(pe, mori_cco_barrier_all(k));
	if (pe == n - 1) {
		PCHECK(pe, ctl_wait_group_ranks(NA.dir, uid_group(&SH->uid[0]), "in call", n - 1, 20000),
		       "the other ranks never waited in the barrier");
		raise(SIGKILL);
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = mori_cco_barrier_all(k);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	SH->secs[pe] = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	PCHECK(pe, rc == MORI_EPEERDEAD, "barrier when rank %d died: %d (%s)", n - 1, rc, mori_client_last_error(c));
	mori_status st;
	PCHECK(pe, mori_cco_comm_status(k, &st) == MORI_EPEERDEAD && st.pe == n - 1, "status names rank %d", st.pe);
	mori_cco_dev_comm d;
	PCHECK(pe, mori_cco_dev_comm_create(k, NULL, &d) == MORI_EPEERDEAD, "create after the death");
	POK(pe, mori_cco_comm_destroy(k));
	mori_client_close(c);
	return 0;
}

START_TEST(rank_killed_in_barrier)
{
	int n = two_nodes ? 4 : 3;
	pe_run_all(n, pe_killed, NULL, 90, 1);
	for (int i = 0; i < n - 1; i++)
		printf("cco: rank %d's barrier returned MORI_EPEERDEAD %.3f s after it entered\n", i, SH->secs[i]);
}
END_TEST

/* ---- two communicators over the same ranks at once ---- */

struct twin {
	int pe, n, which, rounds;
	mori_cco_comm *k;
	char err[PE_MSG_LEN];
};

/* One thread's loop on its communicator: each round every rank puts a round- and communicator-
 * salted pattern into the next rank's window (the same heap offset in both communicators), then
 * checks what the previous rank put. */
static void *twin_run(void *arg)
{
	struct twin *t = arg;
	uint8_t *mem, buf[SLOT];
	mori_cco_window *w;
	int rc = mori_cco_mem_alloc(t->k, SLOT, (void **)&mem);
	if (!rc)
		rc = mori_cco_window_register(t->k, mem, SLOT, &w);
	int to = (t->pe + 1) % t->n, from = (t->pe + t->n - 1) % t->n;
	for (int r = 0; r < t->rounds && !rc; r++) {
		uint64_t salt = (uint64_t)t->which << 32 | (uint64_t)r;
		for (int i = 0; i < SLOT; i++)
			buf[i] = pe_pattern(t->pe, to, (uint64_t)i, salt);
		if ((rc = mori_cco_put(t->k, w, 0, buf, SLOT, to)) || (rc = mori_cco_barrier_all(t->k)))
			break;
		for (int i = 0; i < SLOT; i++)
			if (mem[i] != pe_pattern(from, t->pe, (uint64_t)i, salt)) {
				snprintf(t->err, sizeof(t->err), "communicator %d round %d byte %d: %u, expected %u", t->which,
					 r, i, mem[i], pe_pattern(from, t->pe, (uint64_t)i, salt));
				return NULL;
			}
		rc = mori_cco_barrier_all(t->k); /* nobody puts the next round before everyone checked */
	}
	if (rc)
		snprintf(t->err, sizeof(t->err), "communicator %d: %s", t->which, mori_strerror(rc));
	return NULL;
}

static int pe_twins(int pe, int n, void *arg)
{
	(void)arg;
	mori_client *c;
	mori_cco_comm *k[2];
	if (open_and_uids(pe, n, 2, &c) || create(pe, n, c, 0, HEAP, 20000000, &k[0]) ||
	    create(pe, n, c, 1, HEAP, 20000000, &k[1]))
		return 1;
	struct twin t[2];
	pthread_t th[2];
	for (int i = 0; i < 2; i++) {
		t[i] = (struct twin){pe, n, i, 100, k[i], ""};
		PCHECK(pe, pthread_create(&th[i], NULL, twin_run, &t[i]) == 0, "thread");
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	PCHECK(pe, !t[0].err[0] && !t[1].err[0], "%s %s", t[0].err, t[1].err);
	POK(pe, mori_cco_comm_destroy(k[0]));
	POK(pe, mori_cco_comm_destroy(k[1]));
	mori_client_close(c);
	return 0;
}

START_TEST(two_comms_at_once)
{
	pe_run_all(two_nodes ? 4 : 3, pe_twins, NULL, 300, 0);
}
END_TEST

static Suite *suite(int xnode)
{
	Suite *s = suite_create(xnode ? "cco-xnode" : "cco");
	TCase *t = tcase_create(xnode ? "two morids" : "one morid");
	tcase_add_checked_fixture(t, xnode ? setup2 : setup1, teardown);
	tcase_add_checked_fixture(t, shared_setup, NULL);
	tcase_set_timeout(t, 600);
	tcase_add_test(t, host_windows);
	tcase_add_test(t, rank_killed_in_barrier);
	tcase_add_test(t, two_comms_at_once);
	if (!xnode) {
		tcase_add_test(t, window_some_ranks);
		tcase_add_test(t, reqs_beyond_resources);
		tcase_add_test(t, dev_comm_after_destroy);
	}
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	/* MORI_CCO_ONLY=one|two runs one of the two suites (the netns script runs "two") */
	const char *only = getenv("MORI_CCO_ONLY");
	SRunner *r = srunner_create(NULL);
	if (!only || strcmp(only, "two"))
		srunner_add_suite(r, suite(0));
	if (!only || strcmp(only, "one"))
		srunner_add_suite(r, suite(1));
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
