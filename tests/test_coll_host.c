/* MORI-CCL on host heaps, no GPU: forked processes as the ranks of a
 * communicator over a group on one morid (and, with two nodes, odd PEs on a second morid: every
 * peer read then goes through the daemons; tests/test_coll_netns.sh runs that across two network
 * namespaces). Every collective against a reference each rank computes itself
 * (tests/coll_check.h) for world sizes 1, 2, 3, 4, 8, counts 1, 7, 1023, 4096, 1000003, every
 * dtype, in place and out, both all-reduce algorithms; windows (heap buffers read in place) and
 * their size check, a count past a window's end (MORI_ERANGE); bad input refused without running; a rank that does not call: its peers end
 * with MORI_ETIMEDOUT naming it. */
#include <check.h>
#include <sys/mman.h>

#include "harness.h"
#include "node_harness.h"
#include "pe_harness.h"
#include "mori_coll.h"
#include "coll_check.h"
#include "../libclient/coll_int.h" /* the communicator's own area, where the reserved-area case aims */

#define HEAP (24u << 20)
#define SCRATCH (1u << 20) /* 1 MiB: the largest counts go in several chunks */
#define MAXPE 8

static struct test_node NA, NB;
static int two_nodes;

struct shared {
	char msg[MAXPE][PE_MSG_LEN];
	int cases[MAXPE];
	int ended[MAXPE]; /* comm_deadline: this rank's call has returned */
};
static struct shared *SH;

static void setup(void)
{
	pe_shared_map(SH);
	two_nodes = getenv("MORI_COLL_TWO") != NULL;
	if (!two_nodes) {
		node_init(&NA, "coll", NULL, NULL, 0);
		ck_assert_int_eq(node_start(&NA, NULL), 0);
		return;
	}
	node_pair_init(&NA, &NB, "coll", 7300, 1);
	node_pair_insecure_in_ns(&NA, &NB);
	ck_assert_int_eq(node_pair_start(&NA, &NB, NULL), 0);
}

static void teardown(void)
{
	int rc = node_pair_stop(&NA, &NB); /* B: never started with one node */
	pe_shared_unmap(SH);
	ck_assert_msg(rc == 0, "morid did not stop cleanly (above: which, and its log)");
}

/* ---- host buffers ---- */
static void *h_alloc(struct cc_io *io, size_t b) { return malloc(b); }
static void h_release(struct cc_io *io, void *p) { free(p); }
static int h_put(struct cc_io *io, void *d, const void *s, size_t b) { memcpy(d, s, b); return 0; }
static int h_get(struct cc_io *io, void *d, const void *s, size_t b) { memcpy(d, s, b); return 0; }
static int h_sync(struct cc_io *io) { return 0; }

/* heap buffers for window cases: two fixed slots of one registered window (the same offsets on
 * every rank whatever the case's sizes) */
struct harena { uint8_t *base; size_t half; int next; };
static void *w_alloc(struct cc_io *io, size_t b)
{
	struct harena *a = io->priv;
	if (b > a->half)
		return NULL;
	return a->base + (a->next++ & 1) * a->half;
}
static void w_release(struct cc_io *io, void *p) { ((struct harena *)io->priv)->next = 0; }

static int open_pe(int pe, int n, const char *name, int64_t timeout_us, mori_client **c, mori_group **g,
		   mori_comm **k)
{
	struct test_node *nd = two_nodes && (pe & 1) ? &NB : &NA;
	POK(pe, mori_client_open(nd->dir, "coll-pe", c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = HEAP;
	o.root = two_nodes ? NA.addr : NULL;
	o.timeout_us = timeout_us;
	POK(pe, mori_shmem_init(*c, name, pe, n, &o, g));
	mori_comm_opts co;
	mori_comm_opts_init(&co, sizeof(co));
	co.scratch_bytes = SCRATCH;
	POK(pe, mori_comm_create(*g, &co, k));
	PCHECK(pe, mori_comm_rank(*k) == pe && mori_comm_size(*k) == n, "rank %d size %d", mori_comm_rank(*k),
	       mori_comm_size(*k));
	return 0;
}

/* Every collective, dtype, count, in place and out, through io; returns 0 or 1. */
static int all_cases(int pe, int n, mori_comm *k, struct cc_io *io, int big)
{
	return cc_all_cases(pe, n, k, io, big, NULL, 1, &SH->cases[pe]);
}

static int pe_all(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	mori_comm *k;
	if (open_pe(pe, n, "coll-all", 30000000, &c, &g, &k))
		return 1;
	struct cc_io io = {h_alloc, h_release, h_put, h_get, h_sync, NULL, NULL};
	if (all_cases(pe, n, k, &io, n <= 3)) /* 1000003: on 1-3 ranks (2 cores; the GPU test runs all) */
		return 1;
	mori_comm_destroy(k);
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

static int pe_windows(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	mori_comm *k;
	if (open_pe(pe, n, "coll-win", 30000000, &c, &g, &k))
		return 1;
	struct harena a = {0};
	a.half = 2u << 20;
	POK(pe, mori_shmem_malloc(g, 2 * a.half, 4096, (void **)&a.base));
	mori_window *w;
	POK(pe, mori_comm_window_register(k, a.base, 2 * a.half, &w));
	struct cc_io io = {w_alloc, w_release, h_put, h_get, h_sync, NULL, &a};
	if (all_cases(pe, n, k, &io, 0))
		return 1;
	POK(pe, mori_comm_window_deregister(k, w));
	/* sizes that differ: refused on every rank, naming the rank that differs */
	int rc = mori_comm_window_register(k, a.base, pe == n - 1 ? a.half : 2 * a.half, &w);
	const char *m = mori_client_last_error(c);
	char want[32];
	snprintf(want, sizeof(want), "rank %d gave", n - 1);
	PCHECK(pe, rc == MORI_EINVAL && strstr(m, want), "mismatched window: %s (%s)", mori_strerror(rc), m);
	/* a window whose size wraps past the end of the address space: refused by every rank */
	rc = mori_comm_window_register(k, a.base, SIZE_MAX, &w);
	PCHECK(pe, rc == MORI_ERANGE && strstr(mori_client_last_error(c), "not inside its heap"),
	       "window of SIZE_MAX bytes: %s (%s)", mori_strerror(rc), mori_client_last_error(c));
	/* a count larger than the window: refused before anything runs */
	POK(pe, mori_comm_window_register(k, a.base, 4096, &w));
	rc = mori_allreduce(k, a.base, a.base + 8192, 2048, MORI_FLOAT32, MORI_SUM, NULL);
	m = mori_client_last_error(c);
	PCHECK(pe, rc == MORI_ERANGE && strstr(m, "past the end of its window"), "8 KiB from a 4 KiB window: %s (%s)",
	       mori_strerror(rc), m);
	POK(pe, mori_allreduce(k, a.base, a.base + 8192, 1024, MORI_FLOAT32, MORI_SUM, NULL)); /* still works */
	POK(pe, mori_comm_window_deregister(k, w));
	mori_comm_destroy(k);
	POK(pe, mori_shmem_free(g, a.base));
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

/* Bad input is refused before anything runs (the next collective still works); then the last
 * rank skips an all-reduce: the others' end at the deadline naming it. */
static int pe_faults(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	mori_comm *k;
	if (open_pe(pe, n, "coll-faults", 1500000, &c, &g, &k))
		return 1;
	float x[16] = {1}, y[16];
	PCHECK(pe, mori_allreduce(k, x, y, 16, MORI_UINT8, MORI_MAX, NULL) == MORI_EINVAL, "max on uint8 accepted");
	PCHECK(pe, strstr(mori_client_last_error(c), "no max reduction"), "%s", mori_client_last_error(c));
	PCHECK(pe, mori_allreduce(k, x, y, 16, (mori_dtype)42, MORI_SUM, NULL) == MORI_EINVAL, "dtype 42 accepted");
	PCHECK(pe, mori_allreduce(k, x, y, 16, MORI_FLOAT32, (mori_redop)1, NULL) == MORI_EINVAL, "op 1 accepted");
	PCHECK(pe, mori_allreduce(k, NULL, y, 16, MORI_FLOAT32, MORI_SUM, NULL) == MORI_EINVAL, "NULL accepted");
	PCHECK(pe, mori_broadcast(k, x, y, 16, MORI_FLOAT32, n, NULL) == MORI_EINVAL, "root %d accepted", n);
	/* counts whose byte length overflows: refused, not wrapped to a small length */
	PCHECK(pe, mori_allreduce(k, x, y, SIZE_MAX, MORI_FLOAT32, MORI_SUM, NULL) == MORI_ERANGE &&
		       strstr(mori_client_last_error(c), "overflows"), "allreduce count SIZE_MAX: %s",
	       mori_client_last_error(c));
	PCHECK(pe, mori_allgather(k, x, y, SIZE_MAX / 4 + 1, MORI_UINT8, NULL) == MORI_ERANGE, "allgather x ranks wraps");
	PCHECK(pe, mori_alltoall(k, x, y, (size_t)1 << 62, MORI_UINT8, NULL) == MORI_ERANGE, "alltoall x ranks wraps");
	PCHECK(pe, mori_reducescatter(k, x, y, SIZE_MAX / 2, MORI_FLOAT16, MORI_SUM, NULL) == MORI_ERANGE,
	       "reducescatter wraps");
	PCHECK(pe, mori_broadcast(k, x, y, SIZE_MAX / 2 + 1, MORI_FLOAT16, 0, NULL) == MORI_ERANGE, "broadcast wraps");
	{
		size_t cnt[8] = {0}, dsp[8] = {0};
		cnt[0] = 16, dsp[0] = SIZE_MAX - 8; /* displacement + count wraps past zero */
		PCHECK(pe, mori_alltoallv(k, x, cnt, dsp, y, cnt, dsp, MORI_UINT8, NULL) == MORI_ERANGE,
		       "alltoallv displacement wraps: %s", mori_client_last_error(c));
	}
	PCHECK(pe, mori_comm_set_algo(k, "kernel_max=-1") == MORI_EINVAL, "kernel_max=-1 accepted");
	PCHECK(pe, mori_comm_set_algo(k, "allreduce.oneshot_max=99999999999999999999") == MORI_EINVAL,
	       "an over-range byte count accepted");
	{ /* scratch that would wrap the communicator's area: refused on every rank, nothing allocated */
		mori_comm_opts co;
		mori_comm_opts_init(&co, sizeof(co));
		co.scratch_bytes = UINT64_MAX - 255;
		mori_comm *k2 = NULL;
		int rc = mori_comm_create(g, &co, &k2);
		PCHECK(pe, rc == MORI_ENOMEM && !k2 && strstr(mori_client_last_error(c), "scratch_bytes"),
		       "scratch_bytes near 2^64: %s (%s)", mori_strerror(rc), mori_client_last_error(c));
	}
	PCHECK(pe, mori_comm_set_algo(k, "allreduce=ce") == MORI_EINVAL, "allreduce=ce accepted");
	PCHECK(pe, mori_comm_set_algo(k, "bogus=kernel") == MORI_EINVAL, "bogus accepted");
	{ /* the group's reserved area and the communicator's own (flags, scratch) are refused */
		uint8_t *hb = mori_shmem_heap_base(g);
		int rv = mori_allreduce(k, x, hb + 4096, 16, MORI_FLOAT32, MORI_SUM, NULL);
		PCHECK(pe, rv == MORI_ERANGE && strstr(mori_client_last_error(c), "reserved area"), "recvbuf in the reserved "
		       "area: %s (%s)", mori_strerror(rv), mori_client_last_error(c));
		rv = mori_allreduce(k, x, k->area + k->area_bytes / 2, 16, MORI_FLOAT32, MORI_SUM, NULL);
		PCHECK(pe, rv == MORI_ERANGE && strstr(mori_client_last_error(c), "communicator's own area"),
		       "recvbuf over the communicator's area: %s (%s)", mori_strerror(rv), mori_client_last_error(c));
	}
	{ /* all-to-all-v whose counts disagree on one rank only (rank 1 expects 3 from rank 0, which
	   * sends 4): every rank refuses, naming the pair, and the communicator stays in step */
		size_t sc[8], sd[8], rc[8], rd[8];
		for (int r = 0; r < n; r++)
			sc[r] = rc[r] = 4, sd[r] = rd[r] = 4 * (size_t)r;
		if (pe == 1)
			rc[0] = 3;
		int rv = mori_alltoallv(k, x, sc, sd, y, rc, rd, MORI_UINT8, NULL);
		PCHECK(pe, rv == MORI_EINVAL && strstr(mori_client_last_error(c), "rank 0 sends 4 elements to rank 1"),
		       "a mismatch on rank 1 only: %s (%s)", mori_strerror(rv), mori_client_last_error(c));
	}
	POK(pe, mori_allreduce(k, x, y, 16, MORI_FLOAT32, MORI_SUM, NULL));
	PCHECK(pe, y[0] == (float)n, "sum %g of %d ranks", y[0], n);
	if (pe == n - 1) {
		/* never calls; waits until the others' call timed out and aborted the group */
		PCHECK(pe, WAIT_UNTIL(mori_comm_status(k, NULL) != MORI_OK, 30000), "the group was never aborted");
		PCHECK(pe, mori_comm_status(k, NULL) == MORI_ETIMEDOUT, "status %d", mori_comm_status(k, NULL));
	} else {
		int rc = mori_allreduce(k, x, y, 16, MORI_FLOAT32, MORI_SUM, NULL);
		const char *m = mori_client_last_error(c);
		char want[32];
		snprintf(want, sizeof(want), "PE %d", n - 1);
		PCHECK(pe, rc == MORI_ETIMEDOUT && strstr(m, want), "missing rank: %s (%s)", mori_strerror(rc), m);
		rc = mori_allreduce(k, x, y, 16, MORI_FLOAT32, MORI_SUM, NULL);
		PCHECK(pe, rc == MORI_ETIMEDOUT, "after the timeout: %s", mori_strerror(rc));
	}
	mori_comm_destroy(k);
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

/* A well-formed all-reduce after a refused call: every rank in step, the right sum. */
static int in_step(int pe, int n, mori_comm *k)
{
	float x[64], y[64];
	for (int i = 0; i < 64; i++)
		x[i] = (float)(pe + 1), y[i] = -1;
	POK(pe, mori_allreduce(k, x, y, 64, MORI_FLOAT32, MORI_SUM, NULL));
	for (int i = 0; i < 64; i++)
		PCHECK(pe, y[i] == (float)(n * (n + 1) / 2), "y[%d] = %g after a refused call, want %d", i, y[i],
		       n * (n + 1) / 2);
	return 0;
}

/* Each rank's collective differs on rank 1 only (the operation, the count, the dtype, the root,
 * the reduction): every rank refuses it with MORI_EINVAL naming PE 1 and what it called, nothing
 * is moved, and the next collective is right. */
static int pe_mismatch(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	mori_comm *k;
	if (open_pe(pe, n, "coll-mismatch", 20000000, &c, &g, &k))
		return 1;
	size_t big = 1000000; /* more chunks than the scratch holds (1 MiB) */
	float *x = calloc(big * (size_t)n, sizeof(float)), *y = calloc(big * (size_t)n, sizeof(float));
	PCHECK(pe, x && y, "out of memory");
	for (size_t i = 0; i < big; i++)
		x[i] = 1;
	struct {
		const char *what, *want;
	} cases[] = {
		{"allreduce count 100 / 4000", "count 4000"},
		{"allreduce count 100 / 1000000", "count 1000000"},
		{"allgather float32 / uint8", "uint8"},
		{"broadcast root 0 / 1", "root 1"},
		{"allreduce sum / max", "max"},
		{"alltoall / allgather", "allgather"},
		{"reducescatter count 64 / 65", "count 65"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int odd = pe == 1, rv = MORI_OK;
		switch (i) {
		case 0: rv = mori_allreduce(k, x, y, odd ? 4000 : 100, MORI_FLOAT32, MORI_SUM, NULL); break;
		case 1: rv = mori_allreduce(k, x, y, odd ? big : 100, MORI_FLOAT32, MORI_SUM, NULL); break;
		case 2: rv = mori_allgather(k, x, y, 64, odd ? MORI_UINT8 : MORI_FLOAT32, NULL); break;
		case 3: rv = mori_broadcast(k, x, y, 64, MORI_FLOAT32, odd ? 1 : 0, NULL); break;
		case 4: rv = mori_allreduce(k, x, y, 64, MORI_FLOAT32, odd ? MORI_MAX : MORI_SUM, NULL); break;
		case 5: rv = odd ? mori_allgather(k, x, y, 64, MORI_FLOAT32, NULL)
				 : mori_alltoall(k, x, y, 64, MORI_FLOAT32, NULL); break;
		case 6: rv = mori_reducescatter(k, x, y, odd ? 65 : 64, MORI_FLOAT32, MORI_SUM, NULL); break;
		}
		const char *m = mori_client_last_error(c);
		PCHECK(pe, rv == MORI_EINVAL && strstr(m, "PE 1 calls") && strstr(m, cases[i].want),
		       "%s: %s (%s)", cases[i].what, mori_strerror(rv), m);
		if (in_step(pe, n, k))
			return 1;
	}
	free(x);
	free(y);
	mori_comm_destroy(k);
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

/* The communicator's own deadline (1.5 s) ends its waits, not the group's (20 s): the last rank
 * never calls, and exits only once the others' call has returned; theirs ends in MORI_ETIMEDOUT
 * naming it and the communicator's deadline, never in MORI_ECANCELED at its exit. */
static int pe_comm_deadline(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	mori_comm *k;
	if (open_pe(pe, n, "coll-deadline", 20000000, &c, &g, &k))
		return 1;
	mori_comm_destroy(k);
	mori_comm_opts co;
	mori_comm_opts_init(&co, sizeof(co));
	co.scratch_bytes = SCRATCH;
	co.timeout_us = 1500000;
	POK(pe, mori_comm_create(g, &co, &k));
	float x[16] = {1}, y[16];
	if (pe == n - 1) {
		/* the others have returned (or 15 s passed: they waited past the communicator's deadline) */
		WAIT_UNTIL(({
				   int all = 1;
				   for (int r = 0; r < n - 1; r++)
					   all &= __atomic_load_n(&SH->ended[r], __ATOMIC_ACQUIRE);
				   all;
			   }),
			   15000);
		_exit(0); /* gone without a word: its session closes */
	}
	int rc = mori_allreduce(k, x, y, 16, MORI_FLOAT32, MORI_SUM, NULL);
	__atomic_store_n(&SH->ended[pe], 1, __ATOMIC_RELEASE);
	const char *m = mori_client_last_error(c);
	char want[32];
	snprintf(want, sizeof(want), "PE %d", n - 1);
	PCHECK(pe, rc == MORI_ETIMEDOUT && strstr(m, want) && strstr(m, "1500 ms"),
	       "a rank that never calls, communicator deadline 1.5 s, group's 20 s: %s (%s)", mori_strerror(rc), m);
	mori_comm_destroy(k);
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(mismatch)
{
	pe_run_all(3, pe_mismatch, NULL, 120, 0);
}
END_TEST

START_TEST(comm_deadline)
{
	memset(SH->ended, 0, sizeof(SH->ended));
	pe_run_all(3, pe_comm_deadline, NULL, 60, 0);
}
END_TEST

START_TEST(every_collective)
{
	static const int sizes[] = {1, 2, 3, 4, 8};
	int n = sizes[_i];
	if (two_nodes && n == 1)
		return;
	double dt = pe_run_all(n, pe_all, NULL, 280, 0);
	printf("coll host%s: %d ranks, %d cases each checked against the reference: %.1f s\n",
	       two_nodes ? " (two morids)" : "", n, SH->cases[0], dt);
}
END_TEST

START_TEST(windows)
{
	double dt = pe_run_all(3, pe_windows, NULL, 200, 0);
	printf("coll host windows: 3 ranks, %d cases in place at peers, a mismatched size refused: %.1f s\n",
	       SH->cases[0], dt);
}
END_TEST

START_TEST(faults)
{
	pe_run_all(3, pe_faults, NULL, 60, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("coll_host");
	TCase *t = tcase_create("host heaps");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 300);
	tcase_add_loop_test(t, every_collective, 0, 5);
	tcase_add_test(t, windows);
	tcase_add_test(t, faults);
	tcase_add_test(t, mismatch);
	tcase_add_test(t, comm_deadline);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
