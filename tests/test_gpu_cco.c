/* MORI-CCO's device API on a GPU: N forked processes on the one GPU ($MORI_CCO_RANKS, default 4)
 * are the N ranks of one communicator with VRAM windows, each launching the kernels of
 * tests/cco_dev_kernels.cu with its device communicator passed by value. Two layouts, the same
 * kernels:
 *   lsa    one morid: every rank maps every other's heap, every call takes the load/store path;
 *   proxy  two morids on loopback play two nodes (ranks node-major: the first half on A), a rank
 *          maps only its own node's heaps, so GDA calls and GDA barriers to the other half go
 *          through morid's proxy ring, and the LSA and copy-engine calls stay within the node.
 * Checked against the model here (tests/cco_dev.h's pattern, the rank layout): peer pointers and
 * the LSA barrier session (thread, warp and block scope, arrive/wait apart); a GDA ring of
 * put_signal_add / put + flush + signal_inc / put + counter_inc + signal_add, a blocking get,
 * signal adds and incs from every rank onto two ranks (exact totals, also read by the host);
 * GDA barrier sessions over the world, the LSA team and (two nodes) the rail; copy-engine puts at
 * thread, warp, block and grouped scope and drain; each call's code for bad arguments, for a
 * device communicator without GDA or queues, and for one destroyed (MORI_ESTALE); and a rank
 * killed while the others wait in a kernel's barrier session (they return MORI_EPEERDEAD within a
 * second). Every wait in the kernels is bounded (the abort word, the liveness word, the
 * communicator's deadline). Without a GPU: "skipped: no GPU" (77). MPS as in test_gpu_shmem. */
#include <check.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>

#include "gpu.h"
#include "gpu_harness.h"
#include "node_harness.h"
#include "pe_harness.h"
#include "mori_cco.h"
#include "cco_dev.h"

extern const unsigned char mori_kernels_ccotest_image[];
extern const size_t mori_kernels_ccotest_image_len;

#define HEAP (16u << 20)
#define MAXR 8
#define ROUNDS_LSA 30
#define ROUNDS_GDA 60
#define ROUNDS_BAR 20
#define ROUNDS_CE 20
#define ERR_CALLS 15

static struct test_node NA, NB;
static int NR = 4, two_nodes;
static const char *mps_note = "MPS off";

struct shared {
	char msg[MAXR][PE_MSG_LEN];
	mori_cco_unique_id uid;
	volatile int uid_ready;
	volatile int waiting;
	double killed_at, waited[MAXR];
	double t_lsa, t_gda, t_bar[3], t_ce;
};
static struct shared *SH;

static void setup_lsa(void)
{
	pe_shared_map(SH);
	two_nodes = 0;
	ck_assert_int_eq(node_one_start(&NA, "gcco"), 0);
}

static void setup_proxy(void)
{
	pe_shared_map(SH);
	two_nodes = 1;
	ck_assert_int_eq(node_two_start(&NA, &NB, "gcco", 7300, 0), 0);
}

static void teardown(void)
{
	node_pair_stop(&NA, &NB); /* (a morid that did not stop cleanly keeps its files, named) */
	pe_shared_unmap(SH);
}

/* The layout, computed here from the numbers: node-major, the first half on A. */
static int on_b(int r, int n) { return two_nodes && r >= n / 2; }
static int node_lo(int r, int n) { return on_b(r, n) ? n / 2 : 0; }
static int node_cnt(int r, int n) { return !two_nodes ? n : on_b(r, n) ? n - n / 2 : n / 2; }
static int same_node(int a, int b, int n) { return on_b(a, n) == on_b(b, n); }

/* ---- one rank ---- */

struct rank {
	int me, n;
	const struct gpu_api *g;
	mori_client *c;
	mori_cco_comm *k;
	mori_cco_window *dwin, *swin;
	mori_cco_dev_comm dc;
	gpu_module mod;
	gpu_stream s;
	gpu_dptr args_d, out_d;
	struct cdev_args a;
	long long out[CDEV_OUT_N];
};

/* Join the communicator (VRAM heap of `heap` bytes), allocate and register the receive and source
 * windows (dbytes, sbytes), create the device communicator, load the kernels. mps_pct: this
 * process's share of the SMs under MPS. */
static int rank_open_sized(struct rank *p, int me, int n, uint64_t heap, size_t dbytes, size_t sbytes, int mps_pct)
{
	char pct[16];
	snprintf(pct, sizeof(pct), "%d", mps_pct);
	setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct, 1);
	memset(p, 0, sizeof(*p));
	p->me = me;
	p->n = n;
	p->g = gpu_ctx_current(0);
	PCHECK(me, p->g, "no GPU context: %s", gpu_unavailable_reason());
	POK(me, mori_client_open(on_b(me, n) ? NB.dir : NA.dir, "cco-gpu", &p->c));
	if (me == 0) {
		POK(me, mori_cco_get_unique_id(p->c, &SH->uid));
		__atomic_store_n(&SH->uid_ready, 1, __ATOMIC_RELEASE);
	}
	while (!__atomic_load_n(&SH->uid_ready, __ATOMIC_ACQUIRE))
		usleep(1000);
	mori_cco_comm_opts o;
	POK(me, mori_cco_comm_opts_init(&o, sizeof(o)));
	o.per_rank_size = heap;
	o.mem_kind = MORI_MEM_VRAM;
	o.gpu_device = 0;
	o.timeout_us = 60000000;
	POK(me, mori_cco_comm_create(p->c, &SH->uid, n, me, &o, &p->k));
	int ls, lr, ns;
	POK(me, mori_cco_comm_lsa(p->k, &ls, &lr, &ns));
	PCHECK(me, ls == node_cnt(me, n) && lr == me - node_lo(me, n) && ns == node_lo(me, n),
	       "LSA team %d/%d from %d: not this layout's", lr, ls, ns);
	void *dm, *sm;
	POK(me, mori_cco_mem_alloc(p->k, dbytes, &dm));
	POK(me, mori_cco_mem_alloc(p->k, sbytes, &sm));
	POK(me, mori_cco_window_register(p->k, dm, dbytes, &p->dwin));
	POK(me, mori_cco_window_register(p->k, sm, sbytes, &p->swin));
	p->a.dw = mori_cco_window_dev(p->dwin);
	p->a.sw = mori_cco_window_dev(p->swin);
	mori_cco_dev_comm_reqs r;
	POK(me, mori_cco_dev_comm_reqs_init(&r, sizeof(r)));
	r.gda_connection_type = MORI_CCO_GDA_CONNECTION_FULL; /* LSA peers by GDA too: both paths */
	r.gda_signal_count = CDEV_SIGNALS;
	r.gda_counter_count = CDEV_COUNTERS;
	r.lsa_barrier_count = 2;
	r.rail_gda_barrier_count = two_nodes && n % 2 == 0 ? 2 : 0; /* rail: nodes of equal size */
	r.barrier_count = 2;
	r.ce_queue_count = 2;
	POK(me, mori_cco_dev_comm_create(p->k, &r, &p->dc));
	GOK(me, p->g->module_load_data(&p->mod, mori_kernels_ccotest_image));
	GOK(me, p->g->stream_create(&p->s, GPU_STREAM_NON_BLOCKING));
	GOK(me, p->g->mem_alloc(&p->args_d, sizeof(p->a)));
	GOK(me, p->g->mem_alloc(&p->out_d, sizeof(p->out)));
	return 0;
}

static int rank_open(struct rank *p, int me, int n)
{
	return rank_open_sized(p, me, n, HEAP, (size_t)n * CDEV_SLOT, (size_t)(n + 1) * CDEV_SLOT, 100 / n);
}

static void rank_close(struct rank *p)
{
	mori_cco_comm_destroy(p->k);
	mori_client_close(p->c);
}

/* Launch `name` with dc by value; out[] comes back on the stream after it unless `later`. */
static int launch(struct rank *p, const char *name, const mori_cco_dev_comm *dc, int later)
{
	gpu_function f;
	GOK(p->me, p->g->module_get_function(&f, p->mod, name));
	memset(p->out, 0, sizeof(p->out));
	p->a.out = p->out_d;
	mori_cco_dev_comm byval = *dc;
	GOK(p->me, p->g->memcpy_htod_async(p->out_d, p->out, sizeof(p->out), p->s));
	GOK(p->me, p->g->memcpy_htod_async(p->args_d, &p->a, sizeof(p->a), p->s));
	void *params[] = {&byval, &p->args_d};
	GOK(p->me, p->g->launch_kernel(f, 1, 1, 1, CDEV_THREADS, 1, 1, 0, p->s, params, NULL));
	if (!later)
		GOK(p->me, p->g->memcpy_dtoh_async(p->out, p->out_d, sizeof(p->out), p->s));
	return 0;
}

static int run(struct rank *p, const char *name, int rounds, int kind)
{
	p->a.rounds = rounds;
	p->a.kind = kind;
	if (launch(p, name, &p->dc, 0))
		return 1;
	GOK(p->me, p->g->stream_synchronize(p->s));
	PCHECK(p->me, p->out[CDEV_OUT_RC] == 0, "%s (kind %d): rc %lld (%s) at %lld", name, kind, p->out[CDEV_OUT_RC],
	       mori_strerror((int)p->out[CDEV_OUT_RC]), p->out[CDEV_OUT_WHERE]);
	PCHECK(p->me, p->out[CDEV_OUT_DONE] == 1, "%s did not finish", name);
	PCHECK(p->me, p->out[CDEV_OUT_BAD] == 0, "%s (kind %d): %lld wrong bytes (first at %lld)", name, kind,
	       p->out[CDEV_OUT_BAD], p->out[CDEV_OUT_FIRST_BAD] - 1);
	return 0;
}

/* The host's check of the receive window: slot `from` holds len bytes of pattern(from, to, r). */
static int check_slot(struct rank *p, int from, int to, int r, uint32_t len, const char *what)
{
	uint8_t buf[CDEV_SLOT];
	uint8_t *base = mori_cco_window_local_ptr(p->dwin);
	GOK(p->me, p->g->memcpy_dtoh_async(buf, (gpu_dptr)(uintptr_t)(base + (size_t)from * CDEV_SLOT), len, p->s));
	GOK(p->me, p->g->stream_synchronize(p->s));
	for (uint32_t i = 0; i < len; i++)
		PCHECK(p->me, buf[i] == cdev_pattern(from, to, r, i), "%s: byte %u of rank %d's slot is %u, the model %u",
		       what, i, from, buf[i], cdev_pattern(from, to, r, i));
	return 0;
}

static int check_signal(struct rank *p, int id, uint64_t want, const char *what)
{
	uint64_t v = ~0ull;
	POK(p->me, mori_cco_dev_comm_read_signal(&p->dc, id, &v));
	PCHECK(p->me, v == want, "signal %s: %llu, the model %llu", what, (unsigned long long)v, (unsigned long long)want);
	return 0;
}

/* The codes cdev_errors must see, for: 0 a FULL device communicator with queues, 1 one with GDA
 * connection NONE and no queues, 2 a destroyed one. */
static const long long err_expect[3][ERR_CALLS] = {
	{0, 0, 0, MORI_EINVAL, MORI_ERANGE, MORI_EINVAL, MORI_EINVAL, MORI_EINVAL, MORI_EINVAL, MORI_ERANGE,
	 MORI_EINVAL, MORI_EINVAL, 0, 0, 1},
	{0, 0, 0, MORI_EINVAL, MORI_ENOTSUP, MORI_ENOTSUP, MORI_EINVAL, MORI_ENOTSUP, MORI_ENOTSUP, MORI_ENOTSUP,
	 MORI_ENOTSUP, MORI_EINVAL, 0, MORI_ENOTSUP, 1},
	{0, 0, 0, MORI_ESTALE, MORI_ESTALE, MORI_ESTALE, MORI_ESTALE, MORI_ESTALE, MORI_ESTALE, MORI_ESTALE,
	 MORI_ESTALE, MORI_ESTALE, MORI_ESTALE, MORI_ESTALE, 0},
};

static int errors_as_expected(struct rank *p, const mori_cco_dev_comm *dc, int which)
{
	if (launch(p, "cdev_errors", dc, 0))
		return 1;
	GOK(p->me, p->g->stream_synchronize(p->s));
	PCHECK(p->me, p->out[CDEV_OUT_DONE] == 1, "cdev_errors did not finish");
	for (int i = 0; i < ERR_CALLS; i++)
		PCHECK(p->me, p->out[CDEV_OUT_VAL + i] == err_expect[which][i], "device communicator %d, call %d: %lld (%s), "
		       "expected %lld", which, i, p->out[CDEV_OUT_VAL + i], mori_strerror((int)p->out[CDEV_OUT_VAL + i]),
		       err_expect[which][i]);
	return 0;
}

static int rank_cases(int me, int n, void *arg)
{
	(void)arg;
	struct rank P, *p = &P;
	if (rank_open(p, me, n))
		return 1;
	int lo = node_lo(me, n), cnt = node_cnt(me, n), left = (me + n - 1) % n;
	double t0 = test_now_s();
	/* LSA: peer pointers and the LSA barrier session */
	if (run(p, "cdev_lsa", ROUNDS_LSA, 0))
		return 1;
	for (int q = lo; q < lo + cnt; q++)
		if (check_slot(p, q, me, ROUNDS_LSA - 1, CDEV_SLOT, "lsa"))
			return 1;
	if (me == 0)
		SH->t_lsa = (test_now_s() - t0) / ROUNDS_LSA;
	POK(me, mori_cco_barrier_all(p->k));
	/* GDA: the ring, get, signals, counters */
	t0 = test_now_s();
	if (run(p, "cdev_gda", ROUNDS_GDA, 0))
		return 1;
	if (me == 0)
		SH->t_gda = (test_now_s() - t0) / ROUNDS_GDA;
	long long ctr = 0;
	for (int r = 0; r < ROUNDS_GDA; r++)
		ctr += r % 3 == 2;
	PCHECK(me, p->out[CDEV_OUT_VAL] == ctr, "counter %lld in the kernel, the model %lld", p->out[CDEV_OUT_VAL], ctr);
	uint64_t v = 0;
	POK(me, mori_cco_dev_comm_read_counter(&p->dc, CDEV_CTR, &v));
	PCHECK(me, v == (uint64_t)ctr, "counter %llu on the host, the model %lld", (unsigned long long)v, ctr);
	if (check_slot(p, left, me, ROUNDS_GDA - 1, cdev_ring_len(ROUNDS_GDA - 1), "gda ring") ||
	    check_signal(p, CDEV_SIG_DATA, ROUNDS_GDA, "data") || check_signal(p, CDEV_SIG_ACK, ROUNDS_GDA, "ack"))
		return 1;
	uint64_t want[4] = {0, 0, 0, 0}; /* sum LSA, sum far, count LSA, count far */
	if (me == 0 || me == n - 1)
		for (int w = 0; w < n; w++) {
			int near = same_node(w, me, n);
			want[near ? 0 : 1] += (uint64_t)w + 1;
			want[near ? 2 : 3]++;
		}
	for (int s = 0; s < 4; s++) {
		if ((me == 0 || me == n - 1) && p->out[CDEV_OUT_VAL + 2 + s] != (long long)want[s])
			PCHECK(me, 0, "signal %d in the kernel: %lld, the model %llu", CDEV_SIG_SUM_LSA + s,
			       p->out[CDEV_OUT_VAL + 2 + s], (unsigned long long)want[s]);
		if (check_signal(p, CDEV_SIG_SUM_LSA + s, want[s], "sum/count"))
			return 1;
	}
	POK(me, mori_cco_barrier_all(p->k));
	/* barrier sessions with GDA puts: world, LSA, rail (two nodes of equal size) */
	for (int kind = CDEV_BAR_LSA; kind <= CDEV_BAR_WORLD; kind++) {
		if (kind == CDEV_BAR_RAIL && (!two_nodes || n % 2))
			continue;
		t0 = test_now_s();
		if (run(p, "cdev_bar", ROUNDS_BAR, kind))
			return 1;
		if (me == 0)
			SH->t_bar[kind] = (test_now_s() - t0) / ROUNDS_BAR;
		for (int w = 0; w < n; w++) {
			int member = kind == CDEV_BAR_WORLD || (kind == CDEV_BAR_LSA && same_node(w, me, n)) ||
				     (kind == CDEV_BAR_RAIL && w - node_lo(w, n) == me - lo);
			if (member && check_slot(p, w, kind, ROUNDS_BAR - 1, CDEV_SMALL, "barrier puts"))
				return 1;
		}
		POK(me, mori_cco_barrier_all(p->k));
	}
	/* copy-engine puts at every scope, and drain */
	t0 = test_now_s();
	if (run(p, "cdev_ce", ROUNDS_CE, 0))
		return 1;
	if (me == 0)
		SH->t_ce = (test_now_s() - t0) / ROUNDS_CE;
	for (int q = lo; q < lo + cnt; q++)
		if (check_slot(p, q, me, ROUNDS_CE - 1, CDEV_SLOT, "copy engines"))
			return 1;
	POK(me, mori_cco_barrier_all(p->k));
	/* codes: bad arguments; no GDA and no queues; destroyed */
	mori_cco_dev_comm_reqs r;
	mori_cco_dev_comm none;
	POK(me, mori_cco_dev_comm_reqs_init(&r, sizeof(r)));
	r.gda_connection_type = MORI_CCO_GDA_CONNECTION_NONE;
	POK(me, mori_cco_dev_comm_create(p->k, &r, &none));
	if (errors_as_expected(p, &p->dc, 0) || errors_as_expected(p, &none, 1))
		return 1;
	POK(me, mori_cco_dev_comm_destroy(&none));
	PCHECK(me, mori_cco_dev_comm_check(&none) == MORI_ESTALE, "check of a destroyed device communicator");
	if (errors_as_expected(p, &none, 2))
		return 1;
	POK(me, mori_cco_comm_status(p->k, NULL));
	POK(me, mori_cco_barrier_all(p->k)); /* nobody leaves before all are done */
	POK(me, mori_cco_dev_comm_destroy(&p->dc));
	rank_close(p);
	return 0;
}

START_TEST(device_api)
{
	double dt = pe_run_all(NR, rank_cases, NULL, 150, 0);
	printf("CCO device API, %d ranks on %s (%s): LSA stores + barrier %.0f us a round, GDA ring %.0f us a round, "
	       "barrier rounds (puts + 2 syncs) LSA %.0f us, world %.0f us%s, copy-engine round %.0f us; every code as "
	       "expected, stale refused; %.1f s in all\n",
	       NR, two_nodes ? "2 morids (the other node through the proxy)" : "one morid (load/store)", mps_note,
	       SH->t_lsa * 1e6, SH->t_gda * 1e6, SH->t_bar[CDEV_BAR_LSA] * 1e6, SH->t_bar[CDEV_BAR_WORLD] * 1e6,
	       two_nodes && NR % 2 == 0 ? ", rail checked" : "", SH->t_ce * 1e6, dt);
}
END_TEST

/* The last rank dies while every other waits in a kernel's world barrier session. */
static int rank_killed(int me, int n, void *arg)
{
	(void)arg;
	struct rank P, *p = &P;
	if (rank_open(p, me, n))
		return 1;
	POK(me, mori_cco_barrier_all(p->k));
	if (me == n - 1) {
		while (__atomic_load_n(&SH->waiting, __ATOMIC_ACQUIRE) < n - 1)
			usleep(1000);
		usleep(300000); /* their kernels are in the session */
		SH->killed_at = test_now_s();
		raise(SIGKILL);
	}
	p->a.kind = CDEV_BAR_WORLD;
	if (launch(p, "cdev_hang", &p->dc, 1))
		return 1;
	__atomic_fetch_add(&SH->waiting, 1, __ATOMIC_SEQ_CST);
	GOK(me, p->g->memcpy_dtoh_async(p->out, p->out_d, sizeof(p->out), p->s));
	GOK(me, p->g->stream_synchronize(p->s));
	SH->waited[me] = test_now_s() - SH->killed_at;
	PCHECK(me, p->out[CDEV_OUT_DONE] == 1 && p->out[CDEV_OUT_VAL] == MORI_EPEERDEAD, "the session returned %lld (%s)",
	       p->out[CDEV_OUT_VAL], mori_strerror((int)p->out[CDEV_OUT_VAL]));
	PCHECK(me, SH->killed_at > 0 && SH->waited[me] < 1.0, "the session ended %.3f s after the kill", SH->waited[me]);
	return 0;
}

START_TEST(rank_killed_in_barrier)
{
	pe_run_all(NR, rank_killed, NULL, 90, 1);
	double worst = 0;
	for (int i = 0; i < NR - 1; i++)
		worst = SH->waited[i] > worst ? SH->waited[i] : worst;
	printf("a rank killed inside the world barrier session (%s): the %d others' kernels returned MORI_EPEERDEAD "
	       "within %.0f ms\n", two_nodes ? "2 morids" : "one morid", NR - 1, worst * 1e3);
}
END_TEST

/* ---- overlap: copy-engine puts leave a concurrent GEMM more of the GPU than SM puts ----
 * Two ranks on one morid; rank 0 (all the SMs under MPS) runs OVL_GEMMS SGEMMs of GEMM_N^3
 * (mori-bench coll's kernel, tools/bench_coll_kernels.cu) alone, then beside a stream of puts of
 * XFER bytes to rank 1's window, by SM puts (SM_BLOCKS blocks) and by copy-engine puts, each long
 * enough to outlast the GEMMs; the median of OVL_TRIALS. Rank 1 checks the bytes that landed.
 * Figures are printed, not asserted (the machine may be shared). */
#define XFER (64u << 20)
#define OVL_GEMMS 5
#define GEMM_N 2048
#define SM_BLOCKS 32
#define OVL_TRIALS 3

extern const unsigned char mori_kernels_collbench_image[];
extern const size_t mori_kernels_collbench_image_len;

struct ovl {
	double gemm, sm, ce, gemm_sm, gemm_ce;
	int sm_rounds, ce_rounds;
};
static struct ovl *OV;

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}
static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmpd);
	return v[n / 2];
}

/* Seconds between two events recorded on s around what the caller enqueued. */
static int elapsed(struct rank *p, gpu_event e[2], double *t)
{
	float ms = 0;
	GOK(p->me, p->g->event_synchronize(e[1]));
	GOK(p->me, p->g->event_elapsed_time(&ms, e[0], e[1]));
	*t = ms * 1e-3;
	return 0;
}

static int gemms(struct rank *p, gpu_function fn, void **params, gpu_event e[2], double *t)
{
	GOK(p->me, p->g->event_record(e[0], p->s));
	for (int i = 0; i < OVL_GEMMS; i++)
		GOK(p->me, p->g->launch_kernel(fn, GEMM_N / 64, GEMM_N / 64, 1, 256, 1, 1, 0, p->s, params, NULL));
	GOK(p->me, p->g->event_record(e[1], p->s));
	if (elapsed(p, e, t))
		return 1;
	*t /= OVL_GEMMS;
	return 0;
}

/* Launch the transfer kernel `name` (rounds times the window) on s2 between events x. */
static int xfer(struct rank *p, const char *name, int rounds, gpu_stream s2, gpu_event x[2])
{
	gpu_function f;
	int sm = !strcmp(name, "cdev_sm_puts");
	GOK(p->me, p->g->module_get_function(&f, p->mod, name));
	memset(p->out, 0, sizeof(p->out));
	p->a.out = p->out_d;
	p->a.rounds = rounds;
	p->a.kind = 1;
	mori_cco_dev_comm byval = p->dc;
	GOK(p->me, p->g->memcpy_htod_async(p->out_d, p->out, sizeof(p->out), s2));
	GOK(p->me, p->g->memcpy_htod_async(p->args_d, &p->a, sizeof(p->a), s2));
	void *params[] = {&byval, &p->args_d};
	GOK(p->me, p->g->event_record(x[0], s2));
	GOK(p->me, p->g->launch_kernel(f, sm ? SM_BLOCKS : 1, 1, 1, CDEV_THREADS, 1, 1, 0, s2, params, NULL));
	GOK(p->me, p->g->event_record(x[1], s2));
	return 0;
}

static int xfer_done(struct rank *p, gpu_stream s2, const char *name)
{
	GOK(p->me, p->g->memcpy_dtoh_async(p->out, p->out_d, sizeof(p->out), s2));
	GOK(p->me, p->g->stream_synchronize(s2));
	PCHECK(p->me, p->out[CDEV_OUT_RC] == 0 && p->out[CDEV_OUT_DONE] == 1, "%s: rc %lld (%s) at %lld, done %lld", name,
	       p->out[CDEV_OUT_RC], mori_strerror((int)p->out[CDEV_OUT_RC]), p->out[CDEV_OUT_WHERE], p->out[CDEV_OUT_DONE]);
	return 0;
}

static int rank0_overlap(struct rank *p)
{
	int me = p->me;
	const struct gpu_api *g = p->g;
	gpu_module gm;
	gpu_function fn;
	gpu_stream s2;
	gpu_event e[2], x[2];
	GOK(me, g->module_load_data(&gm, mori_kernels_collbench_image));
	GOK(me, g->module_get_function(&fn, gm, "bench_sgemm"));
	GOK(me, g->stream_create(&s2, GPU_STREAM_NON_BLOCKING));
	for (int i = 0; i < 2; i++) {
		GOK(me, g->event_create(&e[i], 0));
		GOK(me, g->event_create(&x[i], 0));
	}
	size_t mb = (size_t)GEMM_N * GEMM_N * 4;
	gpu_dptr A, B, C;
	GOK(me, g->mem_alloc(&A, mb));
	GOK(me, g->mem_alloc(&B, mb));
	GOK(me, g->mem_alloc(&C, mb));
	GOK(me, g->memset_d8_async(A, 0x3c, mb, p->s));
	GOK(me, g->memset_d8_async(B, 0x3c, mb, p->s));
	int nn = GEMM_N;
	void *params[] = {&A, &B, &C, &nn};
	double t[OVL_TRIALS];
	for (int i = 0; i < OVL_TRIALS; i++)
		if (gemms(p, fn, params, e, &t[i]))
			return 1;
	OV->gemm = median(t, OVL_TRIALS);
	/* each transfer alone, then beside the GEMMs, outlasting them (twice their time alone) */
	const char *names[2] = {"cdev_sm_puts", "cdev_ce_puts"};
	for (int k = 0; k < 2; k++) {
		double alone;
		if (xfer(p, names[k], 1, s2, x) || xfer_done(p, s2, names[k]) || elapsed(p, x, &alone))
			return 1;
		int rounds = (int)(2.0 * OVL_GEMMS * OV->gemm / alone) + 1;
		for (int i = 0; i < OVL_TRIALS; i++) {
			if (xfer(p, names[k], rounds, s2, x) || gemms(p, fn, params, e, &t[i]) || xfer_done(p, s2, names[k]))
				return 1;
		}
		*(k ? &OV->ce : &OV->sm) = alone;
		*(k ? &OV->gemm_ce : &OV->gemm_sm) = median(t, OVL_TRIALS);
		*(k ? &OV->ce_rounds : &OV->sm_rounds) = rounds;
	}
	g->mem_free(A);
	g->mem_free(B);
	g->mem_free(C);
	g->stream_destroy(s2);
	return 0;
}

static int rank_overlap(int me, int n, void *arg)
{
	(void)arg;
	struct rank P, *p = &P;
	if (rank_open_sized(p, me, n, 4ull * XFER, XFER, XFER, 100))
		return 1;
	uint8_t *h = malloc(XFER);
	PCHECK(me, h, "no memory");
	for (size_t i = 0; i < XFER; i++)
		h[i] = cdev_pattern(0, 1, 0, i);
	if (me == 0) {
		GOK(me, p->g->memcpy_htod_async((gpu_dptr)(uintptr_t)mori_cco_window_local_ptr(p->swin), h, XFER, p->s));
		GOK(me, p->g->stream_synchronize(p->s));
	}
	POK(me, mori_cco_barrier_all(p->k));
	if (me == 0 && rank0_overlap(p))
		return 1;
	POK(me, mori_cco_barrier_all(p->k));
	if (me == 1) {
		uint8_t *got = malloc(XFER);
		PCHECK(me, got, "no memory");
		GOK(me, p->g->memcpy_dtoh_async(got, (gpu_dptr)(uintptr_t)mori_cco_window_local_ptr(p->dwin), XFER, p->s));
		GOK(me, p->g->stream_synchronize(p->s));
		long long d = gpu_first_diff(got, h, XFER);
		PCHECK(me, d < 0, "byte %lld of the window: %u, rank 0 put %u", d, got[d], h[d]);
		free(got);
	}
	free(h);
	POK(me, mori_cco_barrier_all(p->k));
	POK(me, mori_cco_dev_comm_destroy(&p->dc));
	rank_close(p);
	return 0;
}

START_TEST(overlap_ce_vs_sm)
{
	if (!mori_kernels_collbench_image_len) {
		printf("overlap: skipped (no GEMM kernel: built without nvcc)\n");
		return;
	}
	OV = pe_shared_alloc(sizeof(*OV));
	pe_run_all(2, rank_overlap, NULL, 170, 0);
	double gb = (double)XFER / 1e9;
	printf("overlap (%s): SGEMM %d^3 alone %.3f ms; beside SM puts (%d blocks, %u MiB to the LSA peer, %.1f GB/s "
	       "alone, x%d) %.3f ms (%+.1f%%); beside copy-engine puts (%llu MiB pieces on 2 queues, %.1f GB/s alone, x%d) "
	       "%.3f ms (%+.1f%%); median of %d runs of %d GEMMs\n",
	       mps_note, GEMM_N, OV->gemm * 1e3, SM_BLOCKS, XFER >> 20, gb / OV->sm, OV->sm_rounds, OV->gemm_sm * 1e3,
	       100 * (OV->gemm_sm / OV->gemm - 1), (unsigned long long)(CDEV_CE_CHUNK >> 20), gb / OV->ce,
	       OV->ce_rounds, OV->gemm_ce * 1e3, 100 * (OV->gemm_ce / OV->gemm - 1), OVL_TRIALS, OVL_GEMMS);
	munmap(OV, sizeof(*OV));
}
END_TEST

int main(void)
{
	mps_note = gpu_procs_start(mori_kernels_ccotest_image_len, "MORI_CCO_RANKS", &NR, MAXR);
	printf("%d ranks on one GPU, %s\n", NR, mps_note);
	Suite *s = suite_create("gpu_cco");
	TCase *t = suite_fixture_case(s, "lsa", setup_lsa, teardown, 200);
	tcase_add_test(t, device_api);
	tcase_add_test(t, rank_killed_in_barrier);
	t = suite_fixture_case(s, "proxy", setup_proxy, teardown, 200);
	tcase_add_test(t, device_api);
	tcase_add_test(t, rank_killed_in_barrier);
	t = suite_fixture_case(s, "overlap", setup_lsa, teardown, 200);
	tcase_add_test(t, overlap_ce_vs_sm);
	return run_suite(s);
}
