/* MORI-CCL on the GPU: N processes on the one GPU are the ranks of a
 * communicator over a group with VRAM heaps, formed through morid (its own MPS daemon where
 * nvidia-cuda-mps-control exists, each PE given 100 / N percent of the SMs). Every collective
 * against a reference each rank computes itself (tests/coll_check.h: independent of libmori) for
 * world sizes 1, 2, 3, 4, 8 ($MORI_COLL_SIZES), counts 1, 7, 1023, 4096, 1000003, every dtype, in
 * place and out, both all-reduce algorithms, kernel and copy-engine data movement ($MORI_COLL_HUGE:
 * also 64 Mi elements, all-reduce and all-gather at 2 and 8 ranks); buffers
 * registered as windows (read in place at peers); 1000 replays of a CUDA graph of one small
 * all-reduce with new inputs before each, every result checked; a rank that does not call (its
 * peers' kernels end at the deadline, MORI_ETIMEDOUT naming it), a rank killed mid-collective and
 * an all-reduce whose count differs on one rank (MORI_EINVAL naming it on every rank, enqueued and
 * in graphs, then a well-formed one on the same communicator);
 * the device API (include/mori/device/coll.cuh) from a kernel of the test's own (tests/coll_dev_kernels.cu)
 * (MORI_EPEERDEAD). Without a GPU: "skipped: no GPU" (77). */
#include <check.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>

#include "gpu.h"
#include "wire.h"
#include "harness.h"
#include "gpu_harness.h"
#include "node_harness.h"
#include "pe_harness.h"
#include "mori_coll.h"
#include "coll_check.h"

extern const unsigned char mori_kernels_colltest_image[];
extern const size_t mori_kernels_colltest_image_len;

#define HEAP (128u << 20)
#define SCRATCH (4u << 20)
#define MAXPE 8

static struct test_node NA;
static const char *mps_note = "MPS off";

struct shared {
	char msg[MAXPE][PE_MSG_LEN];
	int cases[MAXPE];
	double waited[MAXPE];
	int missed_done; /* the PEs whose call missed the last rank and were checked */
};
static struct shared *SH;

static void setup(void)
{
	pe_shared_map(SH);
	node_init(&NA, "gcoll", NULL, NULL, 0);
	ck_assert_int_eq(node_start(&NA, NULL), 0);
}

static void teardown(void)
{
	node_stop(&NA);
	node_clean(&NA);
	pe_shared_unmap(SH);
}

/* ---- a PE: driver context, group with a VRAM heap, communicator, a stream ---- */
struct gpe {
	const struct gpu_api *g;
	mori_client *c;
	mori_group *grp;
	mori_comm *k;
	gpu_stream s;
};

static int gpe_open(struct gpe *p, int me, int n, const char *name, int64_t timeout_us)
{
	char pct[16];
	snprintf(pct, sizeof(pct), "%d", 100 / n);
	setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct, 1);
	memset(p, 0, sizeof(*p));
	p->g = gpu_ctx_current(0);
	PCHECK(me, p->g, "no GPU context: %s", gpu_unavailable_reason());
	POK(me, mori_client_open(NA.dir, "coll-gpu", &p->c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_kind = MORI_MEM_VRAM;
	o.heap_size = HEAP;
	o.gpu_device = 0;
	o.timeout_us = 60000000;
	POK(me, mori_shmem_init(p->c, name, me, n, &o, &p->grp));
	mori_comm_opts co;
	mori_comm_opts_init(&co, sizeof(co));
	co.scratch_bytes = SCRATCH;
	co.timeout_us = timeout_us;
	POK(me, mori_comm_create(p->grp, &co, &p->k));
	GOK(me, p->g->stream_create(&p->s, GPU_STREAM_NON_BLOCKING));
	return 0;
}
static void gpe_close(struct gpe *p)
{
	p->g->stream_destroy(p->s);
	mori_comm_destroy(p->k);
	mori_shmem_finalize(p->grp);
	mori_client_close(p->c);
}

/* device buffers, or two fixed slots of a heap window */
struct gio { const struct gpu_api *g; uint8_t *win; size_t half; int next; };
static void *d_alloc(struct cc_io *io, size_t b)
{
	struct gio *x = io->priv;
	if (x->win)
		return b > x->half ? NULL : x->win + (x->next++ & 1) * x->half;
	gpu_dptr p = 0;
	return x->g->mem_alloc(&p, b) ? NULL : (void *)(uintptr_t)p;
}
static void d_release(struct cc_io *io, void *p)
{
	struct gio *x = io->priv;
	if (x->win)
		x->next = 0;
	else
		x->g->mem_free((gpu_dptr)(uintptr_t)p);
}
static int d_put(struct cc_io *io, void *d, const void *h, size_t b)
{
	struct gio *x = io->priv;
	return x->g->memcpy_htod_async((gpu_dptr)(uintptr_t)d, h, b, io->stream) ? MORI_EIO : 0;
}
static int d_get(struct cc_io *io, void *h, const void *d, size_t b)
{
	struct gio *x = io->priv;
	if (x->g->memcpy_dtoh_async(h, (gpu_dptr)(uintptr_t)d, b, io->stream))
		return MORI_EIO;
	return x->g->stream_synchronize(io->stream) ? MORI_EIO : 0;
}
static int d_sync(struct cc_io *io)
{
	return ((struct gio *)io->priv)->g->stream_synchronize(io->stream) ? MORI_EIO : 0;
}

/* Every collective, dtype, count, in place and out, through io, the data-movement ones under
 * the kernel and the copy-engine paths; returns 0 or 1. */
static int all_cases(int pe, int n, mori_comm *k, struct cc_io *io, int big)
{
	static const char *const algos[2] = {"allgather=kernel,alltoall=kernel,broadcast=kernel",
					     "allgather=ce,alltoall=ce,broadcast=ce"};
	return cc_all_cases(pe, n, k, io, big, algos, 0, &SH->cases[pe]);
}

static int pe_all(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcoll-all", 10000000))
		return 1;
	struct gio x = {P.g, NULL, 0, 0};
	struct cc_io io = {d_alloc, d_release, d_put, d_get, d_sync, P.s, &x};
	if (all_cases(pe, n, P.k, &io, 1))
		return 1;
	gpe_close(&P);
	return 0;
}

/* 64 Mi elements: all-reduce (one-shot and two-shot f32 sum, two-shot bf16 max) and all-gather */
#define HUGE_COUNT (64ull << 20)
static int pe_huge(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcoll-huge", 20000000))
		return 1;
	struct gio x = {P.g, NULL, 0, 0};
	struct cc_io io = {d_alloc, d_release, d_put, d_get, d_sync, P.s, &x};
	char what[200];
	static const char *const alg[] = {"allreduce=oneshot", "allreduce=twoshot"};
	for (int a = 0; a < 2; a++) {
		POK(pe, mori_comm_set_algo(P.k, alg[a]));
		if (cc_case(pe, n, P.k, &io, CC_AR, MORI_FLOAT32, MORI_SUM, HUGE_COUNT, 0, 77 + a, what, sizeof(what)))
			return 1;
		SH->cases[pe]++;
	}
	if (cc_case(pe, n, P.k, &io, CC_AR, MORI_BFLOAT16, MORI_MAX, HUGE_COUNT, 1, 79, what, sizeof(what)) ||
	    cc_case(pe, n, P.k, &io, CC_AG, MORI_FLOAT32, MORI_SUM, HUGE_COUNT, 0, 80, what, sizeof(what)))
		return 1;
	SH->cases[pe] += 2;
	gpe_close(&P);
	return 0;
}

static int pe_windows(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcoll-win", 20000000))
		return 1;
	struct gio x = {P.g, NULL, 8u << 20, 0};
	POK(pe, mori_shmem_malloc(P.grp, 2 * x.half, 4096, (void **)&x.win));
	mori_window *w;
	POK(pe, mori_comm_window_register(P.k, x.win, 2 * x.half, &w));
	struct cc_io io = {d_alloc, d_release, d_put, d_get, d_sync, P.s, &x};
	if (all_cases(pe, n, P.k, &io, 0))
		return 1;
	POK(pe, mori_comm_window_deregister(P.k, w));
	gpe_close(&P);
	return 0;
}

/* ---- a CUDA graph of one all-reduce, replayed 1000 times with new inputs ---- */
typedef int (*fn_begin)(void *, int);
typedef int (*fn_end)(void *, void **);
typedef int (*fn_inst)(void **, void *, unsigned long long);
typedef int (*fn_launch)(void *, void *);
#define GRAPH_N 1024
#define REPLAYS 1000

static int pe_graph(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcoll-graph", 20000000))
		return 1;
	void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!cu)
		cu = dlopen("libcuda.so.1", RTLD_NOW);
	fn_begin begin = cu ? (fn_begin)dlsym(cu, "cuStreamBeginCapture_v2") : NULL;
	fn_end end = cu ? (fn_end)dlsym(cu, "cuStreamEndCapture") : NULL;
	fn_inst inst = cu ? (fn_inst)dlsym(cu, "cuGraphInstantiateWithFlags") : NULL;
	fn_launch glaunch = cu ? (fn_launch)dlsym(cu, "cuGraphLaunch") : NULL;
	PCHECK(pe, begin && end && inst && glaunch, "libcuda has no graph API: %s", dlerror());
	gpu_dptr din, dout;
	GOK(pe, P.g->mem_alloc(&din, GRAPH_N * 4));
	GOK(pe, P.g->mem_alloc(&dout, GRAPH_N * 4));
	POK(pe, mori_comm_set_algo(P.k, (const char *)arg));
	void *graph = NULL, *exec = NULL;
	GOK(pe, begin(P.s, 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */));
	int rc = mori_allreduce(P.k, (void *)(uintptr_t)din, (void *)(uintptr_t)dout, GRAPH_N, MORI_FLOAT32, MORI_SUM, P.s);
	GOK(pe, end(P.s, &graph));
	POK(pe, rc);
	GOK(pe, inst(&exec, graph, 0));
	float in[GRAPH_N], out[GRAPH_N];
	for (uint32_t it = 0; it < REPLAYS; it++) {
		for (int i = 0; i < GRAPH_N; i++)
			in[i] = cc_valf((uint32_t)pe, (uint64_t)i, it + 7);
		GOK(pe, P.g->memcpy_htod_async(din, in, sizeof(in), P.s));
		GOK(pe, glaunch(exec, P.s));
		GOK(pe, P.g->memcpy_dtoh_async(out, dout, sizeof(out), P.s));
		GOK(pe, P.g->stream_synchronize(P.s));
		for (int i = 0; i < GRAPH_N; i++) {
			float e = 0;
			for (int r = 0; r < n; r++)
				e = r ? e + cc_valf((uint32_t)r, (uint64_t)i, it + 7) : cc_valf(0, (uint64_t)i, it + 7);
			PCHECK(pe, out[i] == e, "replay %u element %d: %g, want %g", it, i, out[i], e);
		}
	}
	mori_status st;
	PCHECK(pe, mori_comm_status(P.k, &st) == 0, "status %d", st.pe);
	SH->cases[pe] = REPLAYS;
	P.g->mem_free(din);
	P.g->mem_free(dout);
	gpe_close(&P);
	return 0;
}

/* ---- the device API from a fused kernel of our own (tests/coll_dev_kernels.cu) ---- */
#define FUSED_ROUNDS 500
static int pe_fused(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcoll-fused", 10000000))
		return 1;
	gpu_module mod;
	gpu_function fn;
	GOK(pe, P.g->module_load_data(&mod, mori_kernels_colltest_image));
	GOK(pe, P.g->module_get_function(&fn, mod, "cdev_ring"));
	uint64_t *buf;
	POK(pe, mori_shmem_calloc(P.grp, 8192, 4096, (void **)&buf));
	gpu_dptr out;
	long long o[3] = {0, 0, 0};
	GOK(pe, P.g->mem_alloc(&out, sizeof(o)));
	GOK(pe, P.g->memcpy_htod_async(out, o, sizeof(o), P.s));
	gpu_dptr dev = (gpu_dptr)(uintptr_t)mori_comm_device_state(P.k), b = (gpu_dptr)(uintptr_t)buf;
	PCHECK(pe, dev != 0, "no device state");
	int rounds = FUSED_ROUNDS;
	void *params[] = {&dev, &b, &rounds, &out};
	GOK(pe, P.g->launch_kernel(fn, 1, 1, 1, 256, 1, 1, 0, P.s, params, NULL));
	GOK(pe, P.g->memcpy_dtoh_async(o, out, sizeof(o), P.s));
	GOK(pe, P.g->stream_synchronize(P.s));
	PCHECK(pe, o[2] == 1 && o[0] == 0 && o[1] == 0, "fused ring: done %lld rc %lld, %lld words wrong", o[2], o[0],
	       o[1]);
	/* the library's collectives after the user's barriers: the generations of both kept apart */
	struct gio x = {P.g, NULL, 0, 0};
	struct cc_io io = {d_alloc, d_release, d_put, d_get, d_sync, P.s, &x};
	char what[200];
	if (cc_case(pe, n, P.k, &io, CC_AR, MORI_FLOAT32, MORI_SUM, 4096, 0, 5, what, sizeof(what)))
		return 1;
	P.g->mem_free(out);
	P.g->module_unload(mod);
	gpe_close(&P);
	return 0;
}

/* ---- a collective whose count differs on the last rank ---- */
#define MM_N 1024

/* The call's arguments differ: every rank gets MORI_EINVAL naming the last rank, recvbuf is as
 * it was (the call ended before its data moved). */
static int mm_expect(int pe, int n, struct gpe *P, gpu_dptr dout, const char *form)
{
	float out[MM_N];
	GOK(pe, P->g->memcpy_dtoh_async(out, dout, sizeof(out), P->s));
	GOK(pe, P->g->stream_synchronize(P->s));
	mori_status st;
	int rc = mori_comm_status(P->k, &st);
	const char *m = mori_client_last_error(P->c);
	char want[32];
	snprintf(want, sizeof(want), "rank %d calls", n - 1);
	PCHECK(pe, rc == MORI_EINVAL && st.pe == n - 1 && strstr(m, want), "%s: status %s pe %d (%s)", form,
	       mori_strerror(rc), st.pe, m);
	for (int i = 0; i < MM_N; i++)
		PCHECK(pe, out[i] == -7.0f, "%s: recvbuf[%d] = %g after a refused call", form, i, out[i]);
	return 0;
}

/* A well-formed all-reduce on the same communicator after it: each element against the sum in
 * rank order computed here; exec: a graph of it to launch, else enqueued. */
static int mm_after(int pe, int n, struct gpe *P, gpu_dptr din, gpu_dptr dout, uint32_t seed, void *exec,
		    fn_launch glaunch, const char *form)
{
	float in[MM_N], out[MM_N];
	for (int i = 0; i < MM_N; i++)
		in[i] = cc_valf((uint32_t)pe, (uint64_t)i, seed);
	GOK(pe, P->g->memcpy_htod_async(din, in, sizeof(in), P->s));
	if (exec)
		GOK(pe, glaunch(exec, P->s));
	else
		POK(pe, mori_allreduce(P->k, (void *)(uintptr_t)din, (void *)(uintptr_t)dout, MM_N, MORI_FLOAT32, MORI_SUM,
				       P->s));
	GOK(pe, P->g->memcpy_dtoh_async(out, dout, sizeof(out), P->s));
	GOK(pe, P->g->stream_synchronize(P->s));
	for (int i = 0; i < MM_N; i++) {
		float e = 0;
		for (int r = 0; r < n; r++)
			e = r ? e + cc_valf((uint32_t)r, (uint64_t)i, seed) : cc_valf(0, (uint64_t)i, seed);
		PCHECK(pe, out[i] == e, "%s: the all-reduce after it: element %d %g, want %g", form, i, out[i], e);
	}
	return 0;
}

static int mm_fill(int pe, struct gpe *P, gpu_dptr dout)
{
	float s[MM_N];
	for (int i = 0; i < MM_N; i++)
		s[i] = -7.0f;
	GOK(pe, P->g->memcpy_htod_async(dout, s, sizeof(s), P->s));
	return 0;
}

/* arg "stream": the mismatched all-reduce enqueued, under the one-shot (one kernel) and the
 * two-shot (barrier kernels around flat kernels) forms, each followed by a well-formed one; then
 * counts whose grids differ (the communicator fails, its blocks end without the deadline).
 * arg "graph": the mismatched and a well-formed all-reduce each captured in a CUDA graph. */
static int pe_mismatch(int pe, int n, void *arg)
{
	const int graph = !strcmp((const char *)arg, "graph");
	struct gpe P;
	if (gpe_open(&P, pe, n, graph ? "gcoll-mmg" : "gcoll-mm", 20000000))
		return 1;
	gpu_dptr din, dout;
	GOK(pe, P.g->mem_alloc(&din, 4u << 20));
	GOK(pe, P.g->mem_alloc(&dout, 4u << 20));
	void *vi = (void *)(uintptr_t)din, *vo = (void *)(uintptr_t)dout;
	const size_t bad = pe == n - 1 ? MM_N - 24 : MM_N; /* one grid either way */
	if (graph) {
		void *cu = dlopen("libcuda.so.1", RTLD_NOW);
		fn_begin begin = cu ? (fn_begin)dlsym(cu, "cuStreamBeginCapture_v2") : NULL;
		fn_end end = cu ? (fn_end)dlsym(cu, "cuStreamEndCapture") : NULL;
		fn_inst inst = cu ? (fn_inst)dlsym(cu, "cuGraphInstantiateWithFlags") : NULL;
		fn_launch glaunch = cu ? (fn_launch)dlsym(cu, "cuGraphLaunch") : NULL;
		PCHECK(pe, begin && end && inst && glaunch, "libcuda has no graph API: %s", dlerror());
		void *g1 = NULL, *g2 = NULL, *e1 = NULL, *e2 = NULL;
		GOK(pe, begin(P.s, 0));
		int rc = mori_allreduce(P.k, vi, vo, bad, MORI_FLOAT32, MORI_SUM, P.s);
		GOK(pe, end(P.s, &g1));
		POK(pe, rc);
		GOK(pe, begin(P.s, 0));
		rc = mori_allreduce(P.k, vi, vo, MM_N, MORI_FLOAT32, MORI_SUM, P.s);
		GOK(pe, end(P.s, &g2));
		POK(pe, rc);
		GOK(pe, inst(&e1, g1, 0));
		GOK(pe, inst(&e2, g2, 0));
		for (uint32_t it = 0; it < 3; it++) { /* the check is the graph's own: every replay finds it */
			if (mm_fill(pe, &P, dout))
				return 1;
			GOK(pe, glaunch(e1, P.s));
			if (mm_expect(pe, n, &P, dout, "graph") || mm_after(pe, n, &P, din, dout, 40 + it, e2, glaunch, "graph"))
				return 1;
		}
		SH->cases[pe] = 3;
	} else {
		static const char *const forms[] = {"allreduce=oneshot", "allreduce=twoshot"};
		for (int f = 0; f < 2; f++) {
			POK(pe, mori_comm_set_algo(P.k, forms[f]));
			if (mm_fill(pe, &P, dout))
				return 1;
			POK(pe, mori_allreduce(P.k, vi, vo, bad, MORI_FLOAT32, MORI_SUM, P.s));
			if (mm_expect(pe, n, &P, dout, forms[f]) || mm_after(pe, n, &P, din, dout, 30 + f, NULL, NULL, forms[f]))
				return 1;
			PCHECK(pe, mori_comm_status(P.k, NULL) == 0, "%s: status after the well-formed call", forms[f]);
		}
		/* grids of 1 and 8 blocks (one-shot, 128 KiB a block): the last rank's extra blocks wait
		 * for nobody; the mismatch ends them and fails the communicator */
		POK(pe, mori_comm_set_algo(P.k, "allreduce=oneshot"));
		double t0 = mori_now_us();
		POK(pe, mori_allreduce(P.k, vi, vo, pe == n - 1 ? 256u << 10 : MM_N, MORI_FLOAT32, MORI_SUM, P.s));
		GOK(pe, P.g->stream_synchronize(P.s));
		SH->waited[pe] = (mori_now_us() - t0) * 1e-6;
		mori_status st;
		int rc = mori_comm_status(P.k, &st);
		const char *m = mori_client_last_error(P.c);
		PCHECK(pe, rc == MORI_EINVAL && st.pe == n - 1 && strstr(m, "different grids"), "grids: %s pe %d (%s)",
		       mori_strerror(rc), st.pe, m);
		PCHECK(pe, SH->waited[pe] < 10, "grids: the kernels ended after %.1f s (deadline 20 s)", SH->waited[pe]);
		rc = mori_allreduce(P.k, vi, vo, MM_N, MORI_FLOAT32, MORI_SUM, P.s);
		PCHECK(pe, rc == MORI_EINVAL, "grids: the failed communicator took a collective: %s", mori_strerror(rc));
		SH->cases[pe] = 3;
	}
	P.g->mem_free(din);
	P.g->mem_free(dout);
	gpe_close(&P);
	return 0;
}

/* ---- faults ---- */
static int pe_missing(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcoll-miss", 1500000))
		return 1;
	gpu_dptr b;
	GOK(pe, P.g->mem_alloc(&b, 4096));
	POK(pe, mori_allreduce(P.k, (void *)(uintptr_t)b, (void *)(uintptr_t)b, 1024, MORI_FLOAT32, MORI_SUM, P.s));
	GOK(pe, P.g->stream_synchronize(P.s));
	PCHECK(pe, mori_comm_status(P.k, NULL) == 0, "first all-reduce failed");
	POK(pe, mori_shmem_barrier_all(P.grp));
	if (pe == n - 1) {
		/* never calls the second one; stays in the group until the others' checks are done */
		PCHECK(pe, WAIT_UNTIL(__atomic_load_n(&SH->missed_done, __ATOMIC_ACQUIRE) == n - 1, 50000),
		       "the others' all-reduce never ended");
	} else {
		double t0 = mori_now_us();
		POK(pe, mori_allreduce(P.k, (void *)(uintptr_t)b, (void *)(uintptr_t)b, 1024, MORI_FLOAT32, MORI_SUM, P.s));
		GOK(pe, P.g->stream_synchronize(P.s));
		SH->waited[pe] = (mori_now_us() - t0) * 1e-6;
		mori_status st;
		int rc = mori_comm_status(P.k, &st), who = st.pe;
		const char *m = mori_client_last_error(P.c);
		char want[32];
		snprintf(want, sizeof(want), "rank %d never", n - 1);
		PCHECK(pe, rc == MORI_ETIMEDOUT && who == n - 1 && strstr(m, want), "status %s pe %d (%s)", mori_strerror(rc),
		       who, m);
		rc = mori_allreduce(P.k, (void *)(uintptr_t)b, (void *)(uintptr_t)b, 1024, MORI_FLOAT32, MORI_SUM, P.s);
		PCHECK(pe, rc == MORI_ETIMEDOUT, "a failed communicator took a collective: %s", mori_strerror(rc));
		__atomic_add_fetch(&SH->missed_done, 1, __ATOMIC_ACQ_REL);
	}
	P.g->mem_free(b);
	gpe_close(&P);
	return 0;
}

static int pe_killed(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcoll-kill", 30000000))
		return 1;
	gpu_dptr b;
	GOK(pe, P.g->mem_alloc(&b, 4096));
	POK(pe, mori_shmem_barrier_all(P.grp));
	if (pe == n - 1) {
		usleep(500000);
		kill(getpid(), SIGKILL);
	}
	double t0 = mori_now_us();
	POK(pe, mori_allreduce(P.k, (void *)(uintptr_t)b, (void *)(uintptr_t)b, 1024, MORI_FLOAT32, MORI_SUM, P.s));
	GOK(pe, P.g->stream_synchronize(P.s));
	SH->waited[pe] = (mori_now_us() - t0) * 1e-6;
	mori_status st;
	int rc = mori_comm_status(P.k, &st), who = st.pe;
	PCHECK(pe, rc == MORI_EPEERDEAD && who == n - 1, "status %s pe %d (%s)", mori_strerror(rc), who,
	       mori_client_last_error(P.c));
	PCHECK(pe, SH->waited[pe] < 10, "the kernel returned after %.1f s", SH->waited[pe]);
	gpe_close(&P);
	return 0;
}

static int sizes[8] = {1, 2, 3, 4, 8}, nsizes = 5;

START_TEST(every_collective)
{
	int n = sizes[_i];
	double dt = pe_run_all(n, pe_all, NULL, 280, 0);
	printf("coll gpu: %d ranks on one GPU (%s), %d cases each against the reference: %.1f s\n", n, mps_note,
	       SH->cases[0], dt);
}
END_TEST

START_TEST(huge_counts)
{
	static const int hn[] = {2, 8};
	double dt = pe_run_all(hn[_i], pe_huge, NULL, 280, 0);
	printf("coll gpu: %d ranks, %d cases of %llu elements (all-reduce f32 one-/two-shot, bf16 max in place, "
	       "all-gather) against the reference: %.1f s\n", hn[_i], SH->cases[0], (unsigned long long)HUGE_COUNT, dt);
}
END_TEST

START_TEST(windows)
{
	double dt = pe_run_all(4, pe_windows, NULL, 200, 0);
	printf("coll gpu windows: 4 ranks, %d cases read in place at peers: %.1f s\n", SH->cases[0], dt);
}
END_TEST

START_TEST(graph_replays)
{
	double dt = pe_run_all(4, pe_graph, "allreduce=oneshot", 200, 0);
	printf("coll gpu graph: 4 ranks, one-shot all-reduce of %d f32 captured once, %d replays with new inputs, "
	       "every element checked: %.1f s\n", GRAPH_N, REPLAYS, dt);
	dt = pe_run_all(4, pe_graph, "allreduce=twoshot", 200, 0);
	printf("coll gpu graph: the same with two-shot: %.1f s\n", dt);
}
END_TEST

START_TEST(fused_kernel)
{
	if (!mori_kernels_colltest_image_len) {
		printf("coll gpu fused kernel: skipped (no test kernels: built without nvcc)\n");
		return;
	}
	double dt = pe_run_all(4, pe_fused, NULL, 60, 0);
	printf("coll gpu: a kernel of the test's own with mori_coll_peer_ptr and mori_coll_barrier_block, 4 ranks, "
	       "%d rounds of 1024 words around the ring, every word checked, then an all-reduce: %.1f s\n", FUSED_ROUNDS,
	       dt);
}
END_TEST

START_TEST(missing_rank)
{
	pe_run_all(3, pe_missing, NULL, 60, 0);
	printf("coll gpu: a rank that does not call: its peers' kernels ended after %.2f s (deadline 1.5 s), "
	       "MORI_ETIMEDOUT naming it\n", SH->waited[0]);
}
END_TEST

START_TEST(mismatched_args)
{
	double dt = pe_run_all(3, pe_mismatch, "stream", 120, 0);
	printf("coll gpu: an all-reduce whose count differs on rank 2 of 3: MORI_EINVAL naming it on every rank, "
	       "recvbuf untouched, under one-shot and two-shot, then a well-formed all-reduce checked; different "
	       "grids: the communicator failed, kernels ended after %.2f s: %.1f s\n", SH->waited[0], dt);
	dt = pe_run_all(3, pe_mismatch, "graph", 120, 0);
	printf("coll gpu: the same captured in CUDA graphs, 3 replays of each: %.1f s\n", dt);
}
END_TEST

START_TEST(killed_rank)
{
	pe_run_all(3, pe_killed, NULL, 60, 1);
	printf("coll gpu: a rank killed mid-collective: its peers' kernels returned after %.2f s, MORI_EPEERDEAD\n",
	       SH->waited[0]);
}
END_TEST

/* our own MPS control daemon (own pipe and log directories), unless the caller gave one */
static char mps_pipe[64];
static pid_t mps_owner;
static void mps_stop(void)
{
	if (!mps_pipe[0] || getpid() != mps_owner)
		return;
	FILE *f = popen("nvidia-cuda-mps-control", "w");
	if (f) {
		fputs("quit\n", f);
		pclose(f);
	}
}
static void mps_start(void)
{
	if (getenv("CUDA_MPS_PIPE_DIRECTORY")) {
		mps_note = "MPS on: the caller's daemon";
		return;
	}
	if (system("command -v nvidia-cuda-mps-control >/dev/null 2>&1") != 0) {
		mps_note = "MPS off: no nvidia-cuda-mps-control";
		return;
	}
	char log[64];
	snprintf(mps_pipe, sizeof(mps_pipe), "/tmp/mori-mps-pipe.%d", (int)getpid());
	snprintf(log, sizeof(log), "/tmp/mori-mps-log.%d", (int)getpid());
	mkdir(mps_pipe, 0700);
	mkdir(log, 0700);
	setenv("CUDA_MPS_PIPE_DIRECTORY", mps_pipe, 1);
	setenv("CUDA_MPS_LOG_DIRECTORY", log, 1);
	if (system("nvidia-cuda-mps-control -d") != 0) {
		mps_pipe[0] = 0;
		unsetenv("CUDA_MPS_PIPE_DIRECTORY");
		unsetenv("CUDA_MPS_LOG_DIRECTORY");
		mps_note = "MPS off: its control daemon did not start";
		return;
	}
	mps_owner = getpid();
	atexit(mps_stop);
	mps_note = "MPS on";
}

int main(void)
{
	fflush(stdout);
	pid_t pid = fork(); /* the probe in a child: this process never starts the driver */
	if (pid == 0) {
		if (gpu_api())
			_exit(0);
		printf("skipped: no GPU (%s)\n", gpu_unavailable_reason());
		fflush(stdout);
		_exit(77);
	}
	int st;
	waitpid(pid, &st, 0);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
		return 77;
	const char *e = getenv("MORI_COLL_SIZES");
	if (e) {
		nsizes = 0;
		for (char *s = (char *)e; *s && nsizes < 8;) {
			long v = strtol(s, &s, 10);
			if (v >= 1 && v <= MAXPE)
				sizes[nsizes++] = (int)v;
			while (*s == ' ' || *s == ',')
				s++;
		}
	}
	mps_start();
	printf("coll gpu: %s\n", mps_note);
	Suite *s = suite_create("gpu_coll");
	TCase *t = tcase_create("processes");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 300);
	tcase_add_loop_test(t, every_collective, 0, nsizes);
	if (getenv("MORI_COLL_HUGE"))
		tcase_add_loop_test(t, huge_counts, 0, 2);
	tcase_add_test(t, windows);
	tcase_add_test(t, graph_replays);
	tcase_add_test(t, fused_kernel);
	tcase_add_test(t, missing_rank);
	tcase_add_test(t, killed_rank);
	tcase_add_test(t, mismatched_args);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
