/* MORI-IO on host memory, same node: random verified batches between two processes, and the
 * bad-input and fault cases (issue 3). Each test runs its own morid. */
#include <check.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/un.h>

#include "svc/ctl.h"
#include "wire.h"
#include "harness.h"
#include "ctl_harness.h"
#include "io_target.h"
#include "mori.h"

#define LOCAL_SZ (64u << 20)

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

static uint32_t daemon_regions(void)
{
	Mori__Reply *rep = ctl_status(D.dir);
	uint32_t n = rep->status->regions;
	mori__reply__free_unpacked(rep, NULL);
	return n;
}

START_TEST(random_batches)
{
	uint64_t seed = test_seed();
	struct target t;
	target_start(&t, D.dir, 0, seed);

	mori_client *c;
	mori_mem *l, *ra, *rb;
	OK(mori_client_open(D.dir, "initiator", &c));
	OK(mori_mem_alloc(c, LOCAL_SZ, MORI_MEM_HOST, &l));
	uint8_t *lp = mori_mem_ptr(l);
	fill_random(lp, LOCAL_SZ, seed + 2);
	OK(mori_mem_open_remote(c, NULL, "target/a", &ra));
	OK(mori_mem_open_remote(c, NULL, "target/b", &rb));
	ck_assert_uint_eq(mori_mem_size(ra), REGION_A);

	/* prepared lists: 512 disjoint slots of up to 64 KiB */
	mori_desc slots[BATCH_SLOTS];
	rand_slots(&seed, slots);
	mori_xfer_list *la, *lb;
	OK(mori_xfer_prep(l, ra, slots, BATCH_SLOTS, &la));
	OK(mori_xfer_prep(l, rb, slots, BATCH_SLOTS, &lb));

	const char *env = getenv("MORI_TEST_BATCHES");
	int batches = env ? atoi(env) : 10000;
	uint64_t bytes = 0, notifs = 0, tagsum = 0;
	for (int it = 0; it < batches; it++) {
		int which = (int)(test_rand(&seed) & 1);
		struct rand_xfer rx;
		rand_xfer_draw(&seed, &rx, which, 0, slots, LOCAL_SZ);
		uint64_t before = rand_xfer_hash(&t, which, lp, &rx, 0);
		mori_xfer *x;
		rand_xfer_submit(&rx, l, which ? rb : ra, which ? lb : la, &x);
		OK(mori_xfer_wait(x, 5000000));
		bytes += mori_xfer_bytes(x);
		mori_xfer_free(x);
		uint64_t after = rand_xfer_hash(&t, which, lp, &rx, 1);
		ck_assert_msg(before == after, "batch %d (op %d form %d region %d n %zu): contents differ", it, rx.op,
			      rx.form, which, rx.n);
		if (rx.o.has_notif) {
			notifs++;
			tagsum += rx.o.notif_tag;
		}
	}
	/* The target counts the notifications it received; they arrive after their data. */
	target_end_expect(&t, 20000, notifs, tagsum);
	fprintf(stderr, "# %d batches, %llu bytes, %llu notifications verified\n", batches,
		(unsigned long long)bytes, (unsigned long long)notifs);
	mori_xfer_list_free(la);
	mori_xfer_list_free(lb);
	mori_client_close(c);
}
END_TEST

START_TEST(bad_input)
{
	mori_client *c;
	mori_mem *a, *b, *m, *dup;
	mori_xfer *x = NULL;
	OK(mori_client_open(D.dir, "bad", &c));
	OK(mori_mem_alloc(c, 1 << 20, MORI_MEM_HOST, &a));
	OK(mori_mem_alloc(c, 1 << 20, MORI_MEM_HOST, &b));
	/* ranges and lengths */
	ck_assert_int_eq(mori_xfer_write(a, 0, b, (1 << 20) - 10, 11, NULL, &x), MORI_ERANGE);
	ck_assert_int_eq(mori_xfer_write(a, 1 << 20, b, 0, 1, NULL, &x), MORI_ERANGE);
	ck_assert_int_eq(mori_xfer_write(a, UINT64_MAX, b, 0, 2, NULL, &x), MORI_ERANGE);
	ck_assert_int_eq(mori_xfer_write(a, 0, b, 0, 0, NULL, &x), MORI_EINVAL);
	mori_desc d = {0, 0, 16};
	ck_assert_int_eq(mori_xfer_batch(MORI_XFER_WRITE, a, b, &d, 0, NULL, &x), MORI_EINVAL);
	ck_assert_int_eq(mori_xfer_batch(7, a, b, &d, 1, NULL, &x), MORI_EINVAL);
	mori_xfer_list *l;
	OK(mori_xfer_prep(a, b, &d, 1, &l));
	uint32_t bad_idx = 1;
	ck_assert_int_eq(mori_xfer_submit(l, MORI_XFER_WRITE, &bad_idx, 1, NULL, &x), MORI_ERANGE);
	ck_assert_int_eq(mori_xfer_submit(l, MORI_XFER_WRITE, &bad_idx, 0, NULL, &x), MORI_EINVAL);
	mori_xfer_list_free(l);
	/* the index check runs in blocks of 16 and a tail (idx_copy_below): a bad index anywhere is
	 * refused with its position, and a good array moves exactly its blocks */
	mori_desc pd[100];
	for (int i = 0; i < 100; i++)
		pd[i] = (mori_desc){(uint64_t)i * 64, (uint64_t)(99 - i) * 64, 64};
	OK(mori_xfer_prep(a, b, pd, 100, &l));
	uint32_t idx[53];
	static const int at[] = {0, 15, 16, 31, 47, 48, 52};
	for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++)
		for (int v = 0; v < 2; v++) {
			for (int i = 0; i < 53; i++)
				idx[i] = (uint32_t)(i * 37 % 100);
			idx[at[k]] = v ? UINT32_MAX : 100;
			x = NULL;
			ck_assert_int_eq(mori_xfer_submit(l, MORI_XFER_WRITE, idx, 53, NULL, &x), MORI_ERANGE);
			ck_assert_ptr_null(x);
			char want[32];
			snprintf(want, sizeof(want), "at %d >=", at[k]);
			ck_assert_msg(strstr(mori_client_last_error(c), want), "error \"%s\" does not name position %d",
				      mori_client_last_error(c), at[k]);
		}
	uint8_t *pa = mori_mem_ptr(a), *pb = mori_mem_ptr(b);
	for (int i = 0; i < 100 * 64; i++)
		pa[i] = (uint8_t)(i * 7 + 1);
	memset(pb, 0, 100 * 64);
	for (int i = 0; i < 53; i++)
		idx[i] = (uint32_t)(i * 37 % 100);
	OK(mori_xfer_submit(l, MORI_XFER_WRITE, idx, 53, NULL, &x));
	OK(mori_xfer_wait(x, 5000000));
	mori_xfer_free(x);
	int moved[100] = {0};
	for (int i = 0; i < 53; i++)
		moved[idx[i]] = 1;
	for (int i = 0; i < 100; i++)
		for (int j = 0; j < 64; j++)
			ck_assert_int_eq(pb[(99 - i) * 64 + j], moved[i] ? (uint8_t)((i * 64 + j) * 7 + 1) : 0);
	mori_xfer_list_free(l);
	/* names and blobs */
	ck_assert_int_eq(mori_mem_open_remote(c, NULL, "nobody/kv", &m), MORI_EUNREACH);
	OK(mori_mem_publish(a, "bad/a"));
	ck_assert_int_eq(mori_mem_publish(b, "bad/a"), MORI_EEXIST);
	ck_assert_int_eq(mori_mem_publish(b, "has space"), MORI_EINVAL);
	ck_assert_int_eq(mori_mem_publish(b, ""), MORI_EINVAL);
	uint8_t blob[MORI_MEM_BLOB_MAX];
	size_t bl;
	ck_assert_int_eq(mori_mem_unpack(c, "garbage!", 8, &m), MORI_EPROTO);
	OK(mori_mem_pack(b, blob, sizeof(blob), &bl));
	ck_assert_int_eq(mori_mem_pack(b, blob, 3, &bl), MORI_EMSGSIZE);
	blob[bl - 1] ^= 0x55; /* corrupt the generation or size */
	int rc = mori_mem_unpack(c, blob, bl, &m);
	ck_assert_msg(rc == MORI_ESTALE || rc == MORI_EPROTO, "corrupt blob gave %s", mori_strerror(rc));
	/* overlapping registration of caller memory */
	uint8_t *p = aligned_alloc(4096, 1 << 16);
	OK(mori_mem_register(c, p, 1 << 16, MORI_MEM_HOST, &m));
	ck_assert_int_eq(mori_mem_register(c, p + 4096, 100, MORI_MEM_HOST, &dup), MORI_EBUSY);
	ck_assert_int_eq(mori_mem_register(c, p, 1 << 16, 9, &dup), MORI_EINVAL);
	rc = mori_mem_register(c, p, 1 << 16, MORI_MEM_VRAM, &dup);
	ck_assert_msg(rc == MORI_EINVAL || rc == MORI_ENOGPU, "host memory as VRAM gave %s", mori_strerror(rc));
	OK(mori_mem_deregister(m));
	free(p);
	/* a deregistered region's blob is stale */
	OK(mori_mem_pack(b, blob, sizeof(blob), &bl));
	OK(mori_mem_deregister(b));
	ck_assert_int_eq(mori_mem_unpack(c, blob, bl, &m), MORI_ESTALE);
	ck_assert_int_eq(daemon_regions(), 1);
	mori_client_close(c);
}
END_TEST

START_TEST(stale_epoch)
{
	mori_client *c;
	mori_mem *a, *m;
	uint8_t blob[MORI_MEM_BLOB_MAX];
	size_t bl;
	OK(mori_client_open(D.dir, "epoch", &c));
	OK(mori_mem_alloc(c, 4096, MORI_MEM_HOST, &a));
	OK(mori_mem_pack(a, blob, sizeof(blob), &bl));
	mori_client_close(c);
	char dir[256];
	snprintf(dir, sizeof(dir), "%s", D.dir);
	ck_assert_int_eq(daemon_stop(&D), 0);
	ck_assert_int_eq(daemon_start_in(&D, dir, NULL), 0);
	OK(mori_client_open(D.dir, "epoch2", &c));
	ck_assert_int_eq(mori_mem_unpack(c, blob, bl, &m), MORI_ESTALE);
	ck_assert_str_ne(mori_client_last_error(c), "");
	mori_client_close(c);
}
END_TEST

/* The owner of a region dies (SIGKILL): the daemon frees its registrations, and a peer's next
 * transfer on it fails with a clear code well within its deadline. Both sharing paths. */
static void owner_dies(int use_cma)
{
	int p[2];
	ck_assert(pipe(p) == 0);
	pid_t child = fork();
	if (child == 0) {
		mori_client *c;
		mori_mem *m;
		if (mori_client_open(D.dir, "victim", &c))
			_exit(1);
		if (use_cma) {
			uint8_t *b = aligned_alloc(4096, 1 << 20);
			if (!b || mori_mem_register(c, b, 1 << 20, MORI_MEM_HOST, &m))
				_exit(2);
		} else if (mori_mem_alloc(c, 1 << 20, MORI_MEM_HOST, &m)) {
			_exit(2);
		}
		if (mori_mem_publish(m, "victim/kv"))
			_exit(3);
		char r = 'r';
		if (write(p[1], &r, 1) != 1)
			_exit(4);
		pause();
		_exit(0);
	}
	char r;
	ck_assert_int_eq(read(p[0], &r, 1), 1);
	mori_client *c;
	mori_mem *l, *v;
	mori_xfer *x;
	OK(mori_client_open(D.dir, "survivor", &c));
	OK(mori_mem_alloc(c, 1 << 20, MORI_MEM_HOST, &l));
	OK(mori_mem_open_remote(c, NULL, "victim/kv", &v));
	OK(mori_xfer_write(l, 0, v, 0, 4096, NULL, &x));
	OK(mori_xfer_wait(x, 1000000));
	mori_xfer_free(x);
	ck_assert_int_eq(daemon_regions(), 2);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	uint64_t t0 = mori_now_us();
	int rc = write_until_refused(l, v, 2000000);
	ck_assert_msg(rc == MORI_ESTALE || rc == MORI_EPEERDEAD, "after the owner died: %s", mori_strerror(rc));
	ck_assert_uint_lt(mori_now_us() - t0, 2000000);
	ck_assert_int_eq(daemon_regions(), 1);
	OK(mori_mem_deregister(v));
	mori_client_close(c);
}

START_TEST(owner_killed_memfd) { owner_dies(0); }
END_TEST
START_TEST(owner_killed_cma) { owner_dies(1); }
END_TEST

/* An initiator killed in the middle of a stream of transfers: the target and the daemon carry on. */
START_TEST(initiator_killed)
{
	mori_client *c;
	mori_mem *t;
	OK(mori_client_open(D.dir, "target", &c));
	OK(mori_mem_alloc(c, 16 << 20, MORI_MEM_HOST, &t));
	OK(mori_mem_publish(t, "t/kv"));
	pid_t child = fork();
	if (child == 0) {
		mori_client *k;
		mori_mem *l, *r;
		mori_xfer *x;
		if (mori_client_open(D.dir, "doomed", &k) || mori_mem_alloc(k, 16 << 20, MORI_MEM_HOST, &l) ||
		    mori_mem_open_remote(k, NULL, "t/kv", &r))
			_exit(1);
		mori_xfer_opts o = {.size = sizeof(o), .has_notif = 1, .notif_tag = 7};
		for (;;) {
			if (mori_xfer_write(l, 0, r, 0, 16 << 20, &o, &x) == MORI_OK) {
				mori_xfer_wait(x, 1000000);
				mori_xfer_free(x);
			}
		}
	}
	mori_notif n;
	ck_assert_int_eq(mori_notif_poll(c, &n, 1, 5000000), 1); /* it is really running */
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	usleep(100000);
	ck_assert_int_eq(daemon_regions(), 1);
	/* the target still works */
	mori_mem *l2;
	mori_xfer *x;
	OK(mori_mem_alloc(c, 4096, MORI_MEM_HOST, &l2));
	memset(mori_mem_ptr(l2), 0xab, 4096);
	OK(mori_xfer_write(l2, 0, t, 100, 4096, NULL, &x));
	OK(mori_xfer_wait(x, 1000000));
	mori_xfer_free(x);
	ck_assert_int_eq(((uint8_t *)mori_mem_ptr(t))[100 + 4095], 0xab);
	mori_client_close(c);
}
END_TEST

/* A full submission ring: transfers report MORI_EAGAIN instead of blocking forever, and nothing
 * queued is lost once the daemon drains the ring. */
START_TEST(ring_full)
{
	char dir[256];
	snprintf(dir, sizeof(dir), "%s", D.dir);
	daemon_stop(&D);
	const char *extra[] = {"--ring-entries", "64", NULL};
	ck_assert_int_eq(daemon_start_in(&D, dir, extra), 0);
	mori_client *a, *b;
	mori_mem *ma, *mb, *rb;
	mori_xfer *x;
	OK(mori_client_open(D.dir, "a", &a));
	OK(mori_client_open(D.dir, "b", &b));
	OK(mori_mem_alloc(a, 4096, MORI_MEM_HOST, &ma));
	OK(mori_mem_alloc(b, 4096, MORI_MEM_HOST, &mb));
	OK(mori_mem_publish(mb, "b/kv"));
	OK(mori_mem_open_remote(a, NULL, "b/kv", &rb));
	kill(D.pid, SIGSTOP);
	mori_xfer_opts o = {.size = sizeof(o), .has_notif = 1};
	int ok = 0, again = 0;
	for (int i = 0; i < 65; i++) {
		o.notif_tag = (uint64_t)i;
		OK(mori_xfer_write(ma, 0, rb, 0, 64, &o, &x));
		int rc = mori_xfer_wait(x, 3000000);
		ok += rc == MORI_OK;
		again += rc == MORI_EAGAIN;
		mori_xfer_free(x);
	}
	kill(D.pid, SIGCONT);
	ck_assert_int_eq(ok, 64);
	ck_assert_int_eq(again, 1);
	mori_notif n[128];
	int got = 0, k;
	uint64_t t0 = mori_now_us();
	while (got < 64 && mori_now_us() - t0 < 3000000)
		if ((k = mori_notif_poll(b, n + got, (size_t)(128 - got), 100000)) > 0)
			got += k;
	ck_assert_int_eq(got, 64);
	for (int i = 0; i < 64; i++)
		ck_assert_uint_eq(n[i].tag, (uint64_t)i); /* in order */
	mori_client_close(a);
	mori_client_close(b);
}
END_TEST

/* Per-client caps: a client cannot make morid hold unbounded state. Registering past
 * client_max_regions is refused with the option's name (and allowed again after a
 * deregistration). A region's owner that does not take its notifications is not detached
 * because of them (an opener could otherwise get it detached at will, tester's defect 3): once
 * its queue is full and half of client_max_backlog waits, further notifications are dropped and
 * counted, the owner stays attached and gets the ones kept, in order. */
START_TEST(client_caps)
{
	char dir[256];
	snprintf(dir, sizeof(dir), "%s", D.dir);
	daemon_stop(&D);
	const char *extra[] = {"--client-max-regions", "4", "--client-max-backlog", "1024", "--ring-entries", "64", NULL};
	ck_assert_int_eq(daemon_start_in(&D, dir, extra), 0);
	mori_client *a, *b;
	mori_mem *m[5], *mb, *rb;
	OK(mori_client_open(D.dir, "a", &a));
	for (int i = 0; i < 4; i++)
		OK(mori_mem_alloc(a, 4096, MORI_MEM_HOST, &m[i]));
	ck_assert_int_eq(mori_mem_alloc(a, 4096, MORI_MEM_HOST, &m[4]), MORI_ENOMEM);
	ck_assert_msg(strstr(mori_client_last_error(a), "client_max_regions"), "error: %s", mori_client_last_error(a));
	OK(mori_mem_deregister(m[3]));
	OK(mori_mem_alloc(a, 4096, MORI_MEM_HOST, &m[3]));

	OK(mori_client_open(D.dir, "b", &b));
	OK(mori_mem_alloc(b, 4096, MORI_MEM_HOST, &mb));
	OK(mori_mem_publish(mb, "b/kv"));
	OK(mori_mem_open_remote(a, NULL, "b/kv", &rb));
	/* b never polls while a floods: 64 notifications fill its queue, 512 (half the backlog cap)
	 * wait behind it, the other 1288 - 576 are dropped */
	enum { SENT = 64 + 1024 + 200, KEPT = 64 + 1024 / 2 };
	uint64_t dropped0 = ctl_counter(D.dir, "notifications_dropped");
	mori_xfer_opts o = {.size = sizeof(o), .has_notif = 1};
	for (int i = 0; i < SENT; i++) {
		mori_xfer *x;
		o.notif_tag = (uint64_t)i;
		OK(mori_xfer_write(m[0], 0, rb, 0, 64, &o, &x));
		OK(mori_xfer_wait(x, 3000000));
		mori_xfer_free(x);
	}
	uint64_t t0 = mori_now_us(), dropped = 0;
	while ((dropped = ctl_counter(D.dir, "notifications_dropped") - dropped0) < SENT - KEPT &&
	       mori_now_us() - t0 < 5000000)
		usleep(10000);
	ck_assert_uint_eq(dropped, SENT - KEPT);
	/* b is still attached and gets the kept ones, oldest first */
	static mori_notif nb[SENT];
	int got = 0, k;
	t0 = mori_now_us();
	while (got < KEPT && mori_now_us() - t0 < 5000000)
		if ((k = mori_notif_poll(b, nb + got, (size_t)(SENT - got), 100000)) > 0)
			got += k;
		else
			ck_assert_msg(k == 0, "b's poll: %s (%s)", mori_strerror(k), mori_client_last_error(b));
	ck_assert_int_eq(got, KEPT);
	for (int i = 0; i < KEPT; i++)
		ck_assert_uint_eq(nb[i].tag, (uint64_t)i);
	ck_assert_int_eq(mori_notif_poll(b, nb, 1, 100000), 0); /* nothing more: the rest was dropped */
	/* with room again, notifications flow as before */
	mori_xfer *x;
	o.notif_tag = 777777;
	OK(mori_xfer_write(m[0], 0, rb, 0, 64, &o, &x));
	OK(mori_xfer_wait(x, 3000000));
	mori_xfer_free(x);
	ck_assert_int_eq(mori_notif_poll(b, nb, 1, 3000000), 1);
	ck_assert_uint_eq(nb[0].tag, 777777);
	mori_mem *mx;
	OK(mori_mem_alloc(b, 4096, MORI_MEM_HOST, &mx));
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "grep -q 'notifications dropped: its completion queue is full' %s", D.log);
	ck_assert_msg(system(cmd) == 0, "morid's log does not say that b's notifications were dropped (%s)", D.log);
	mori_client_close(b);
	mori_client_close(a);
}
END_TEST

/* Notified writes whose notifications are still in the initiator's ring when it goes (killed
 * here; mori_client_close does not wait for morid to read the ring either): morid takes what is left in the ring, so every notification of a write
 * that completed reaches the target, in order. The daemon is stopped while the writes run, so
 * all of them are still queued when the initiator goes. */
START_TEST(notifs_at_kill)
{
	enum { N = 1000 };
	mori_client *b;
	mori_mem *mb;
	OK(mori_client_open(D.dir, "b", &b));
	OK(mori_mem_alloc(b, 4096, MORI_MEM_HOST, &mb));
	OK(mori_mem_publish(mb, "b/kv"));
	int up[2], down[2];
	ck_assert(pipe(up) == 0 && pipe(down) == 0);
	pid_t a = fork();
	if (a == 0) {
		mori_client *c;
		mori_mem *ma, *rb;
		char go;
		if (mori_client_open(D.dir, "a", &c) || mori_mem_alloc(c, 4096, MORI_MEM_HOST, &ma) ||
		    mori_mem_open_remote(c, NULL, "b/kv", &rb) || write(up[1], "r", 1) != 1 || read(down[0], &go, 1) != 1)
			_exit(10);
		mori_xfer_opts o = {.size = sizeof(o), .has_notif = 1};
		uint32_t done = 0;
		for (int i = 0; i < N; i++) {
			mori_xfer *x;
			o.notif_tag = (uint64_t)i;
			if (mori_xfer_write(ma, 0, rb, 0, 64, &o, &x) || mori_xfer_wait(x, 3000000))
				break;
			mori_xfer_free(x);
			done++;
		}
		uint32_t pending = mori_client_sq_pending(c);
		if (write(up[1], &done, 4) != 4 || write(up[1], &pending, 4) != 4)
			_exit(11);
		pause(); /* killed here */
		_exit(0);
	}
	char r;
	ck_assert_int_eq(read(up[0], &r, 1), 1);
	kill(D.pid, SIGSTOP);
	ck_assert_int_eq(write(down[1], "g", 1), 1);
	uint32_t done = 0, pending = 0;
	ck_assert_int_eq(read(up[0], &done, 4), 4);
	ck_assert_int_eq(read(up[0], &pending, 4), 4);
	ck_assert_uint_eq(done, N);
	ck_assert_uint_eq(pending, N); /* every notification still in a's ring */
	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	kill(D.pid, SIGCONT);
	static mori_notif n[N + 64];
	int got = 0, k;
	uint64_t t0 = mori_now_us();
	while (got < N && mori_now_us() - t0 < 3000000)
		if ((k = mori_notif_poll(b, n + got, (size_t)(N + 64 - got), 100000)) > 0)
			got += k;
	ck_assert_msg(got == N, "%d of %d notifications arrived after the initiator went", got, N);
	for (int i = 0; i < got; i++)
		ck_assert_uint_eq(n[i].tag, (uint64_t)i);
	mori_client_close(b);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}
END_TEST

/* Sessions that connect and never say hello cannot lock clients out: past 256 of them the
 * daemon closes the oldest, so a real client still attaches at once. */
START_TEST(silent_sessions)
{
	enum { FLOOD = 300 };
	static int s[FLOOD];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	ck_assert_uint_lt(strlen(D.dir) + strlen("/morid.session"), sizeof(sa.sun_path));
	strcpy(sa.sun_path, D.dir);
	strcat(sa.sun_path, "/morid.session");
	for (int i = 0; i < FLOOD; i++) {
		s[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		ck_assert_msg(connect(s[i], (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect %d: %s", i, strerror(errno));
	}
	mori_client *c;
	uint64_t t0 = mori_now_us();
	OK(mori_client_open(D.dir, "late", &c));
	ck_assert_msg(mori_now_us() - t0 < 2000000, "attaching took %llu us", (unsigned long long)(mori_now_us() - t0));
	/* the oldest silent one was closed by the daemon */
	struct timeval tv = {.tv_sec = 2};
	setsockopt(s[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char b[64];
	ck_assert_int_eq(recv(s[0], b, sizeof(b), 0), 0);
	for (int i = 0; i < FLOOD; i++)
		close(s[i]);
	mori_client_close(c);
}
END_TEST

/* Deregistering memory that an idle peer opened by cross-memory attach (it read once, then makes
 * no call): its library acknowledges from its watcher thread, so the owner does not wait for
 * morid's 5 s deadline (tester5: 5.00 s for every such deregistration and close). */
START_TEST(dereg_with_idle_cma_opener)
{
	mori_client *c;
	mori_mem *m;
	OK(mori_client_open(D.dir, "owner", &c));
	static uint8_t buf[1 << 16];
	OK(mori_mem_register(c, buf, sizeof(buf), MORI_MEM_HOST, &m));
	OK(mori_mem_publish(m, "owner/idle"));
	struct child_pipes cp;
	pid_t child = child_fork(30, &cp);
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		mori_client *k;
		mori_mem *l, *r;
		mori_xfer *x;
		if (mori_client_open(D.dir, "idle", &k) || mori_mem_alloc(k, 4096, MORI_MEM_HOST, &l) ||
		    mori_mem_open_remote(k, NULL, "owner/idle", &r) || mori_xfer_read(l, 0, r, 0, 16, NULL, &x) ||
		    mori_xfer_wait(x, 5000000))
			_exit(1);
		mori_xfer_free(x);
		char go = 'g';
		if (write(cp.up[1], &go, 1) != 1)
			_exit(2);
		(void)!read(cp.go[0], &go, 1); /* idle: no libmori call until the owner is done */
		_exit(0);
	}
	char go;
	ck_assert_int_eq(read(cp.up[0], &go, 1), 1);
	uint64_t t0 = mori_now_us();
	OK(mori_mem_deregister(m));
	uint64_t took = mori_now_us() - t0;
	ck_assert_int_eq(write(cp.go[1], &go, 1), 1);
	int st;
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "opener: %d", st);
	ck_assert_msg(took < 1000000, "deregister waited %llu us for an idle opener", (unsigned long long)took);
	mori_client_close(c);
}
END_TEST

/* Deregistering memory that a peer is writing by cross-memory attach: the call returns only
 * once the peer has no copy running, so no byte lands after it (no use-after-free). */
START_TEST(dereg_during_cma_writes)
{
	enum { SZ = 32 << 20 };
	mori_client *c;
	mori_mem *m;
	OK(mori_client_open(D.dir, "owner", &c));
	uint8_t *buf = aligned_alloc(4096, SZ);
	memset(buf, 0, SZ);
	OK(mori_mem_register(c, buf, SZ, MORI_MEM_HOST, &m));
	OK(mori_mem_publish(m, "owner/cma"));
	int p[2];
	ck_assert(pipe(p) == 0);
	pid_t child = fork();
	if (child == 0) {
		mori_client *k;
		mori_mem *l, *r;
		mori_xfer *x;
		if (mori_client_open(D.dir, "writer", &k) || mori_mem_alloc(k, SZ, MORI_MEM_HOST, &l) ||
		    mori_mem_open_remote(k, NULL, "owner/cma", &r))
			_exit(1);
		memset(mori_mem_ptr(l), 0x77, SZ);
		char go = 'g';
		if (write(p[1], &go, 1) != 1)
			_exit(2);
		int rc = MORI_OK;
		for (int i = 0; i < 100000 && rc == MORI_OK; i++) {
			rc = mori_xfer_write(l, 0, r, 0, SZ, NULL, &x);
			if (rc == MORI_OK) {
				rc = mori_xfer_wait(x, 5000000);
				mori_xfer_free(x);
			}
		}
		_exit(rc == MORI_ESTALE ? 0 : 3);
	}
	char go;
	ck_assert_int_eq(read(p[0], &go, 1), 1);
	usleep(50000); /* let it copy a few times */
	uint64_t t0 = mori_now_us();
	OK(mori_mem_deregister(m));
	uint64_t took = mori_now_us() - t0;
	memset(buf, 0xee, SZ);
	usleep(200000);
	size_t late = 0;
	for (size_t i = 0; i < SZ; i++)
		late += buf[i] != 0xee;
	int st;
	waitpid(child, &st, 0);
	ck_assert_msg(late == 0, "%zu bytes written after deregistration returned", late);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer did not end with MORI_ESTALE (status %d)", st);
	ck_assert_uint_lt(took, 5000000);
	fprintf(stderr, "# deregistration with a running peer copy took %llu us\n", (unsigned long long)took);
	free(buf);
	mori_client_close(c);
}
END_TEST

/* An owner that shrinks the file behind a region must not crash its peers (SIGBUS): memory from
 * mori_mem_alloc is sealed against shrinking, and a file that cannot be sealed is served by
 * cross-memory attach, where a vanished page is an error, not a signal. */
START_TEST(owner_truncates)
{
	enum { SZ = 1 << 20 };
	mori_client *c;
	mori_mem *sealed, *plain, *l, *r1, *r2;
	mori_xfer *x;
	OK(mori_client_open(D.dir, "owner", &c));
	OK(mori_mem_alloc(c, SZ, MORI_MEM_HOST, &sealed));
	int fd = memfd_create("unsealable", MFD_CLOEXEC); /* no MFD_ALLOW_SEALING */
	ck_assert(fd >= 0 && ftruncate(fd, SZ) == 0);
	uint8_t *p = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert(p != MAP_FAILED);
	OK(mori_mem_register(c, p, SZ, MORI_MEM_HOST, &plain));
	OK(mori_mem_publish(sealed, "o/sealed"));
	OK(mori_mem_publish(plain, "o/plain"));
	pid_t child = fork();
	if (child == 0) {
		mori_client *k;
		if (mori_client_open(D.dir, "peer", &k) || mori_mem_alloc(k, SZ, MORI_MEM_HOST, &l) ||
		    mori_mem_open_remote(k, NULL, "o/sealed", &r1) || mori_mem_open_remote(k, NULL, "o/plain", &r2))
			_exit(1);
		usleep(200000); /* the owner truncates meanwhile */
		int rc1 = mori_xfer_write(l, 0, r1, 0, SZ, NULL, &x);
		if (rc1 == MORI_OK) {
			rc1 = mori_xfer_wait(x, 1000000);
			mori_xfer_free(x);
		}
		int rc2 = mori_xfer_write(l, 0, r2, 0, SZ, NULL, &x);
		if (rc2 == MORI_OK) {
			rc2 = mori_xfer_wait(x, 1000000);
			mori_xfer_free(x);
		}
		/* sealed: still whole, the write succeeds; unsealable: a clean error */
		_exit(rc1 == MORI_OK && rc2 != MORI_OK ? 0 : 2);
	}
	usleep(100000);
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	int st;
	waitpid(child, &st, 0);
	ck_assert_msg(WIFEXITED(st), "the peer died of signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	ck_assert_int_eq(WEXITSTATUS(st), 0);
	munmap(p, SZ);
	close(fd);
	mori_client_close(c);
}
END_TEST

START_TEST(no_daemon)
{
	mori_client *c;
	daemon_stop(&D);
	ck_assert_int_eq(mori_client_open(D.dir, "x", &c), MORI_ECONN);
	ck_assert_ptr_nonnull(strstr(mori_client_last_error(NULL), "morid"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("io");
	TCase *t = tcase_create("io");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 300);
	const char *only = getenv("MORI_TEST_ONLY");
#define ADD(fn) if (!only || !strcmp(only, #fn)) tcase_add_test(t, fn)
	ADD(random_batches);
	ADD(bad_input);
	ADD(stale_epoch);
	ADD(owner_killed_memfd);
	ADD(owner_killed_cma);
	ADD(initiator_killed);
	ADD(ring_full);
	ADD(client_caps);
	ADD(silent_sessions);
	ADD(notifs_at_kill);
	ADD(dereg_during_cma_writes);
	ADD(dereg_with_idle_cma_opener);
	ADD(owner_truncates);
	ADD(no_daemon);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
