/* MORI-EP across nodes on the GPU (issue 14, acceptance 1 and 3, faults): morids on loopback play
 * the nodes (A the root, B, C), N forked processes on the one GPU are the N ranks of one group,
 * ranks r on node r / per (per ranks a node), VRAM heaps, MPS as in tests/test_gpu_ep. A rank maps
 * only its own node's heaps (checked), so every chunk to another node goes through the proxy.
 *
 * reference   layouts $MORI_EPX_LAYOUTS (default "1x4 2x4 2x1 3x2": nodes x ranks a node; 1x4 is
 *             the internode kernels forced on one node, no proxy), tests/test_gpu_ep's five shapes
 *             and its CPU reference (tests/ep_ref.h): bf16 normal and bf16 low-latency
 *             $MORI_EPX_ITERS (default 100) iterations each, fp8 with scales and bf16 quantised by
 *             dispatch (both modes) a quarter of that; routings random / round-robin / all to one
 *             rank / spread with -1 slots (a repeated expert in a row becomes -1: the dedupe), 0..max
 *             tokens; dispatch bit-exact, combine within 1e-2 (quantised 7e-2), odd seeds through the
 *             registered combine input. The bf16 shapes ask for the intranode types (mori_ep_create
 *             must pick the internode ones itself), the others force them.
 * graph       2x4, both modes: one CUDA graph of dispatch + combine replayed 200 times with new
 *             routing, every replay checked by the same reference.
 * faults      2x2: a config differing on a rank of node B: refused on every rank naming the field;
 *             then morid B killed while every rank loops dispatch + combine: every rank's operation
 *             ends with an error within two deadlines (timeout_us 2 s: dispatch's wait and combine's
 *             wait) plus 2 s, each saying which ended it (the abort word or the deadline).
 * Without a GPU or the EP kernels: "skipped: ..." (77). Compiled only so far: not yet run on a GPU. */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <sys/mman.h>

#include "gpu_harness.h"
#include "harness.h"
#include "node_harness.h"
#include "pe_harness.h"
#include "ep_ref.h"

#define MAXPE 8
#define MAXNODE 3
static struct test_node N[MAXNODE];
static const char *mps_note;
static int ITERS = 100;

struct shared {
	char msg[MAXPE][PE_MSG_LEN];
	long long checked[MAXPE];
	int rounds[MAXPE];
	double killed_at, waited[MAXPE];
	char why[MAXPE][240];
};
static struct shared *SH;

/* nodes x per ranks */
struct lay {
	int nodes, per;
	const char *name;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void setup(void)
{
	pe_shared_map(SH);
	ep_checked = SH->checked;
	for (int i = 0; i < MAXNODE; i++) {
		node_init(&N[i], "epx", NULL, NULL, 7300);
		ck_assert_int_eq(node_start(&N[i], NULL), 0);
	}
}
static void teardown(void)
{
	for (int i = 0; i < MAXNODE; i++) {
		if (N[i].pid > 0)
			node_stop(&N[i]);
		node_clean(&N[i]);
	}
	pe_shared_unmap(SH);
}

/* PE me of the layout: a client of its node's morid; the group's root is node A. The heaps of
 * ranks on other nodes must not be mapped here (so the test runs the proxy path). */
static int pe_join(struct pe *p, int me, int n, const struct lay *l, uint64_t heap, const char *tag)
{
	char name[48];
	snprintf(name, sizeof(name), "epx-%s-%s", tag, l->name);
	if (ep_pe_open(p, me, n, heap, N[me / l->per].dir, l->nodes > 1 ? N[0].addr : NULL, name))
		return 1;
	for (int r = 0; r < n; r++) {
		int mapped = mori_shmem_ptr_p2p(p->grp, mori_shmem_heap_base(p->grp), r) != NULL;
		PCHECK(me, mapped == (r / l->per == me / l->per), "rank %d's heap is %smapped here (node %d, this rank's %d)",
		       r, mapped ? "" : "not ", r / l->per, me / l->per);
	}
	return 0;
}

/* ---- acceptance 1 ---- */
static const struct shape ref_shapes[] = {
	{0, 2048, 64, 4, 8, MORI_BFLOAT16, MORI_EP_NORMAL, 0, 0},
	{0, 2048, 64, 4, 8, MORI_FLOAT8_E4M3, MORI_EP_NORMAL, 16, 0},
	{0, 2048, 32, 4, 8, MORI_BFLOAT16, MORI_EP_LOW_LATENCY, 0, 0},
	{0, 2048, 64, 4, 8, MORI_BFLOAT16, MORI_EP_NORMAL, 16, 1},      /* bf16 quantised to fp8 by dispatch */
	{0, 2048, 32, 4, 8, MORI_BFLOAT16, MORI_EP_LOW_LATENCY, 16, 1}, /* DeepEP's use_fp8 */
};
#define NREF (int)(sizeof(ref_shapes) / sizeof(ref_shapes[0]))

static int pe_reference(int me, int n, void *arg)
{
	const struct lay *l = arg;
	struct pe P, *p = &P;
	ep_kt_add = MORI_EP_INTERNODE; /* heap sized for the internode types */
	if (pe_join(p, me, n, l, heap_for(ref_shapes, NREF, n), "ref"))
		return 1;
	for (int i = 0; i < NREF; i++) {
		struct shape c = ref_shapes[i];
		c.W = n;
		const int plain = c.dtype == MORI_BFLOAT16 && !c.quant;
		/* the plain bf16 shapes ask for the intranode type; across nodes mori_ep_create picks the
		 * internode one (on one node, 1x4, they would run the intranode kernels: forced there) */
		ep_kt_add = plain && l->nodes > 1 ? 0 : MORI_EP_INTERNODE;
		mori_ep_config f = cfg_of(&c, me);
		ep_kt_add = MORI_EP_INTERNODE;
		mori_ep_handle *h;
		POK(me, mori_ep_create(p->grp, &f, &h));
		int iters = plain ? ITERS : ITERS / 4 + 1;
		for (int it = 0; it < iters; it++)
			if (round_trip(p, h, &c, (uint64_t)it * 131 + (uint64_t)i, NULL))
				return 1;
		POK(me, mori_ep_destroy(h));
	}
	pe_close(p);
	return 0;
}

START_TEST(reference_checks)
{
	const char *e = getenv("MORI_EPX_LAYOUTS");
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", e && *e ? e : "1x4 2x4 2x1 3x2");
	for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
		struct lay l = {0, 0, tok};
		if (sscanf(tok, "%dx%d", &l.nodes, &l.per) != 2 || l.nodes < 1 || l.nodes > MAXNODE || l.per < 1 ||
		    l.nodes * l.per > MAXPE)
			continue;
		memset(SH->checked, 0, sizeof(SH->checked));
		const int W = l.nodes * l.per;
		double dt = pe_run_all(W, pe_reference, &l, 280, 0);
		long long sum = 0;
		for (int i = 0; i < W; i++)
			sum += SH->checked[i];
		printf("reference: %d node%s x %d ranks (%s), internode kernels%s: bf16 normal and bf16 low-latency %d "
		       "iterations, fp8+scales normal and bf16 quantised to fp8 (normal, low-latency) %d; %lld dispatches "
		       "checked bit-exact, combines within 1e-2 (quantised 7e-2): %.1f s\n",
		       l.nodes, l.nodes > 1 ? "s" : "", l.per, mps_note, l.nodes > 1 ? " (picked for the bf16 shapes)" : " forced",
		       ITERS, ITERS / 4 + 1, sum, dt);
		fflush(stdout);
	}
}
END_TEST

/* ---- acceptance 1's graph: replayed 200 times with new routing ---- */
typedef int (*cu_begin_fn)(void *, int);
typedef int (*cu_end_fn)(void *, void **);
typedef int (*cu_inst_fn)(void **, void *, unsigned long long);
typedef int (*cu_launch_fn)(void *, void *);
#define REPLAYS 200

static int pe_graph(int me, int n, void *arg)
{
	static const struct lay l = {2, 4, "2x4"};
	struct shape c = {n, 512, 32, 4, 8, MORI_BFLOAT16, arg ? MORI_EP_LOW_LATENCY : MORI_EP_NORMAL, 0, 0};
	struct pe P, *p = &P;
	ep_kt_add = MORI_EP_INTERNODE;
	if (pe_join(p, me, n, &l, heap_for(&c, 1, n), arg ? "graph-ll" : "graph"))
		return 1;
	void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	PCHECK(me, cu, "libcuda not loaded");
	cu_begin_fn begin = (cu_begin_fn)dlsym(cu, "cuStreamBeginCapture_v2");
	cu_end_fn end = (cu_end_fn)dlsym(cu, "cuStreamEndCapture");
	cu_inst_fn inst = (cu_inst_fn)dlsym(cu, "cuGraphInstantiateWithFlags");
	cu_launch_fn glaunch = (cu_launch_fn)dlsym(cu, "cuGraphLaunch");
	PCHECK(me, begin && end && inst && glaunch, "graph entry points missing");
	mori_ep_config f = cfg_of(&c, me);
	mori_ep_handle *h;
	POK(me, mori_ep_create(p->grp, &f, &h));
	const int T = c.M; /* fixed in the graph: seeds with seed % 5 == 1 give every rank M tokens */
	mori_ep_recv r;
	mori_ep_recv_buffers(h, &r);
	GOK(me, begin(p->s, 2 /* relaxed */));
	POK(me, mori_ep_dispatch(h, (void *)(uintptr_t)p->in, (float *)(uintptr_t)p->w, NULL, (int32_t *)(uintptr_t)p->idx,
				 T, p->s, NULL));
	void *eo = r.tokens; /* identity experts: normal pushes the received rows */
	if (c.mode) {        /* low-latency: they are copied into the registered combine input */
		eo = mori_ep_get_registered_combine_input_buffer(h);
		GOK(me, p->g->memcpy_dtod_async((gpu_dptr)(uintptr_t)eo, (gpu_dptr)(uintptr_t)r.tokens,
						(size_t)r.max_recv * c.epr * c.H * 2, p->s));
	}
	POK(me, mori_ep_combine(h, MORI_BFLOAT16, eo, NULL, NULL, (void *)(uintptr_t)p->out, p->s));
	void *graph = NULL, *exec = NULL;
	GOK(me, end(p->s, &graph));
	GOK(me, inst(&exec, graph, 0));
	for (int it = 0; it < REPLAYS; it++) {
		const uint64_t seed = 1 + 5 * (uint64_t)it; /* seed % 4 walks the four routing kinds */
		PCHECK(me, tokens_of(&c, seed, me) == T, "seed %llu: not %d tokens", (unsigned long long)seed, T);
		make_input(p, &c, seed, me, T);
		if (upload(p, &c, T))
			return 1;
		GOK(me, glaunch(exec, p->s));
		GOK(me, p->g->stream_synchronize(p->s));
		if (check_dispatch(p, &c, &r, seed) || check_combine(p, &c, seed, T, NULL))
			return 1;
		POK(me, mori_ep_status(h, NULL));
	}
	POK(me, mori_ep_destroy(h));
	pe_close(p);
	return 0;
}

START_TEST(graph_replays)
{
	for (int ll = 0; ll < 2; ll++) {
		memset(SH->checked, 0, sizeof(SH->checked));
		double dt = pe_run_all(8, pe_graph, ll ? (void *)1 : NULL, 280, 0);
		printf("graph: 2 nodes x 4 ranks, %s: one CUDA graph of dispatch + combine replayed %d times with new "
		       "routing, %lld replays' dispatches and combines checked: %.1f s\n",
		       ll ? "low-latency (registered combine input)" : "normal (pushed combine)", REPLAYS, SH->checked[0], dt);
	}
}
END_TEST

/* ---- faults: a config differing across nodes; morid B killed mid-run ---- */
#define DEADLINE_US 2000000

static int pe_faults(int me, int n, void *arg)
{
	static const struct lay l = {2, 2, "2x2"};
	struct shape c = {n, 512, 16, 2, 4, MORI_BFLOAT16, MORI_EP_NORMAL, 0, 0};
	struct pe P, *p = &P;
	ep_kt_add = MORI_EP_INTERNODE;
	if (pe_join(p, me, n, &l, heap_for(&c, 1, n), "faults"))
		return 1;
	mori_ep_config f = cfg_of(&c, me);
	if (me == 3) /* a rank of node B */
		f.hidden_dim = 1024;
	mori_ep_handle *h = NULL;
	int rc = mori_ep_create(p->grp, &f, &h);
	PCHECK(me, rc == MORI_EINVAL && strstr(mori_client_last_error(p->c), "hidden_dim"), "create: %s (%s)",
	       mori_strerror(rc), mori_client_last_error(p->c));
	f = cfg_of(&c, me);
	f.timeout_us = DEADLINE_US;
	POK(me, mori_ep_create(p->grp, &f, &h));
	/* rounds until one ends with an error; rank 0 kills morid B once every rank has done 3 */
	const double t0 = now_s();
	for (uint64_t it = 0;; it++) {
		PCHECK(me, now_s() - t0 < 60, "no error 60 s into the run (%d rounds)", SH->rounds[me]);
		if (me == 0 && !SH->killed_at) {
			int least = SH->rounds[0];
			for (int i = 1; i < n; i++)
				least = SH->rounds[i] < least ? SH->rounds[i] : least;
			if (least >= 3) {
				SH->killed_at = now_s();
				kill(N[1].pid, SIGKILL); /* the parent reaps it (node_kill9) */
			}
		}
		const uint64_t seed = 2 + it;
		const int T = tokens_of(&c, seed, me);
		make_input(p, &c, seed, me, T);
		if (upload(p, &c, T))
			return 1;
		mori_ep_recv r;
		rc = mori_ep_dispatch(h, (void *)(uintptr_t)p->in, (float *)(uintptr_t)p->w, NULL,
				      (int32_t *)(uintptr_t)p->idx, T, p->s, &r);
		if (!rc)
			rc = mori_ep_combine(h, MORI_BFLOAT16, r.tokens, NULL, NULL, (void *)(uintptr_t)p->out, p->s);
		if (!rc) {
			GOK(me, p->g->stream_synchronize(p->s));
			rc = mori_ep_status(h, NULL);
		}
		if (rc) {
			PCHECK(me, SH->killed_at > 0, "round %llu failed before the kill: %s (%s)", (unsigned long long)it,
			       mori_strerror(rc), mori_client_last_error(p->c));
			SH->waited[me] = now_s() - SH->killed_at;
			snprintf(SH->why[me], sizeof(SH->why[me]), "%s: %s", mori_strerror(rc), mori_client_last_error(p->c));
			break;
		}
		SH->rounds[me]++;
	}
	/* a round has two waits on peers (dispatch's for the chunks, combine's for the answers), each
	 * bounded by the deadline: a rank whose peers' chunks never come ends within two of them */
	PCHECK(me, SH->waited[me] < 2 * DEADLINE_US * 1e-6 + 2.0, "the error came %.3f s after the kill (%s)",
	       SH->waited[me], SH->why[me]);
	return 0; /* the group is dead: leave without the collective destroy */
}

START_TEST(faults)
{
	double dt = pe_run_all(4, pe_faults, NULL, 120, 0);
	node_kill9(&N[1]); /* killed by rank 0: reaped here */
	double worst = 0;
	for (int i = 0; i < 4; i++) {
		worst = SH->waited[i] > worst ? SH->waited[i] : worst;
		printf("faults: rank %d (node %c) after %d rounds, %.0f ms after morid B was killed: %s\n", i, 'A' + i / 2,
		       SH->rounds[i], SH->waited[i] * 1e3, SH->why[i]);
	}
	printf("faults: a config differing on a rank of node B refused on every rank naming the field; morid B killed "
	       "mid-run: all 4 ranks' operations ended with an error within %.0f ms (deadline %d ms a wait): %.1f s\n",
	       worst * 1e3, DEADLINE_US / 1000, dt);
}
END_TEST

int main(void)
{
	gpu_skip_unless(1);
	const char *e = getenv("MORI_EPX_ITERS");
	if (e && atoi(e) > 0)
		ITERS = atoi(e);
	mps_note = gpu_mps_start();
	printf("MORI-EP across morids on one GPU, %s\n", mps_note);
	Suite *s = suite_create("gpu_ep_xnode");
	TCase *t = tcase_create("nodes");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 600);
	const char *only = getenv("MORI_EPX_CASES"); /* e.g. "reference faults" */
	if (!only || strstr(only, "reference"))
		tcase_add_test(t, reference_checks);
	if (!only || strstr(only, "graph"))
		tcase_add_test(t, graph_replays);
	if (!only || strstr(only, "faults"))
		tcase_add_test(t, faults);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
