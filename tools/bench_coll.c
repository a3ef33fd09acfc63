/* mori-bench coll: MORI-CCL's collectives (include/mori_coll.h) with N processes on one GPU as the
 * N ranks of a group formed through morid (VRAM heaps), under MPS when the caller started it (each
 * process gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / N). Buffers are heap windows (read in
 * place at peers), f32 elements.
 *
 *   Per collective, algorithm and size (8 B .. --max, x8 steps; size as nccl-tests gives it: the
 *   all-reduce/broadcast buffer, all-gather's output, reduce-scatter's input, all-to-all's buffer):
 *   latency p50 over the iterations (events around each on rank 0), algorithm bandwidth size / t
 *   and bus bandwidth algbw x (2(n-1)/n all-reduce, (n-1)/n all-gather / reduce-scatter /
 *   all-to-all, 1 broadcast), as nccl-tests defines them.
 *   Baseline in the same run: the copy ceiling C, every rank making CEIL_COPIES cuMemcpyDtoDAsync of
 *   256 MiB between two heap buffers at once, all ranks' bytes over the window from the first start
 *   to the last end (rank 0 alone is printed beside). All ranks share one GPU's memory, so the bound
 *   of an algorithm is the bytes all ranks must read and write (n x T per rank; a copy of B bytes is
 *   2B of traffic) at the ceiling: t_bound = n T / 2C; "bound" is size / t_bound and "%" what the
 *   run reached of it. T per rank of size S: one-shot all-reduce (n+1)S, two-shot (3n-1)S/n,
 *   all-gather / all-to-all / broadcast 2S, reduce-scatter (n+1)S/n.
 *   Overlap: every rank runs 2048^3 SGEMMs (tools/bench_coll_kernels.cu) alone, then beside a stream
 *   of 64 MiB all-gathers that outlasts them on a second stream of the highest priority (where the
 *   driver has priorities), copy-engine and kernel forms: the GEMM's slowdown, median of three runs,
 *   and how many all-gathers completed while the GEMMs ran (a form the GEMM starves slows it little
 *   because it barely runs).
 *
 *   NVSHMEM beside (--nvshmem PATH, tools/bench_nvshmem.cu built as tests/device-shmem.sh builds
 *   it): after mori's rows for N ranks, N processes of NVSHMEM (MPS shares as mori's) run its team
 *   collectives (sum reduce, fcollect, alltoall, broadcast, reducescatter where it has one) of the
 *   same sizes, host-initiated on a stream and from a kernel (one block); rows "nv <coll> host" and
 *   "nv <coll> kernel", with the bound of the matching mori row (all-reduce: two-shot's traffic).
 *
 * mori-bench coll [--dir RUNTIME_DIR] [--pes "2 4 8"] [--max BYTES] [--iters N] [--min BYTES] [--only LABEL]
 *                 [--nvshmem PATH] [--no-overlap]
 *   --only: the rows whose label starts with LABEL (e.g. "allreduce twoshot") and no graph or overlap
 *   rows; --min: sizes from BYTES (to compare kernel settings, $MORI_COLL_*, in one call). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include "../libclient/gpu_int.h"
#include "mori_coll.h"

extern const unsigned char mori_kernels_collbench_image[];
extern const size_t mori_kernels_collbench_image_len;
int bench_coll_main(int argc, char **argv);
int nvshmem_run(const char *path, const char *mode, int npes, const char *const *tail, int ntail, int timeout_s,
		void (*line)(const char *, void *), void *arg); /* tools/bench_shmem.c */

#define MAXIT 60
#define GEMM_N 2048
#define OVL_BYTES (64ull << 20)
#define OVL_GEMMS 5
#define OVL_TRIALS 3
#define OVL_MARKS 64 /* marker events in the all-gather stream: its progress when the GEMMs end */
#define OVL_EV 8     /* the markers are ev[OVL_EV ..] */
#define CEIL_COPIES 8 /* copies of 256 MiB each rank makes for the concurrent ceiling */

#define MOK(x)                                                                                               \
	do {                                                                                                 \
		int r_ = (x);                                                                                \
		if (r_) {                                                                                    \
			fprintf(stderr, "rank %d: %s: %s (%s)\n", me, #x, mori_strerror(r_), mori_client_last_error(NULL)); \
			return 1;                                                                            \
		}                                                                                            \
	} while (0)
#define GK(x)                                                                                                \
	do {                                                                                                 \
		int r_ = (x);                                                                                \
		if (r_) {                                                                                    \
			fprintf(stderr, "rank %d: %s: driver %d\n", me, #x, r_);                             \
			return 1;                                                                            \
		}                                                                                            \
	} while (0)

enum { B_AR, B_AG, B_RS, B_A2A, B_BC };
struct spec { int coll; const char *algo, *label; };
static const struct spec specs[] = {
	{B_AR, "allreduce=oneshot", "allreduce oneshot"}, {B_AR, "allreduce=twoshot", "allreduce twoshot"},
	{B_AG, "allgather=kernel", "allgather kernel"},   {B_AG, "allgather=ce", "allgather ce"},
	{B_RS, "reducescatter=kernel", "reducescatter"},  {B_A2A, "alltoall=kernel", "alltoall kernel"},
	{B_A2A, "alltoall=ce", "alltoall ce"},            {B_BC, "broadcast=kernel", "broadcast kernel"},
	{B_BC, "broadcast=ce", "broadcast ce"},
};

static double *shared_t; /* MAP_SHARED: [1] the copy ceiling rank 0 measured (bytes/s), [8] overlap's
			  * all-gather count, [16+rank] and [32+rank] each rank's start and end of the
			  * concurrent ceiling's copies */
static const char *only;  /* --only LABEL */
static uint64_t minb;     /* --min BYTES */
static int no_overlap;    /* --no-overlap: no overlap rows */
#define NSPECS (sizeof(specs) / sizeof(specs[0]))
/* Row k runs: no --only, or its label starts with it. */
static int picked(size_t k) { return !only || !strncmp(specs[k].label, only, strlen(only)); }
uint64_t parse_size(const char *s); /* tools/mori-bench.c: 1G, 64K, or bytes */
double now_s(void);               /* tools/mori-bench.c: CLOCK_MONOTONIC, seconds */

struct rk {
	int me, n;
	const struct gpu_api *g;
	mori_comm *k;
	mori_group *grp;
	gpu_stream s, s2;
	gpu_event ev[2 * MAXIT + 2];
	uint8_t *A, *B; /* windows of maxb bytes each */
};

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int coll_once(struct rk *r, int coll, uint64_t S, gpu_stream s)
{
	uint64_t n = (uint64_t)r->n;
	switch (coll) {
	case B_AR: return mori_allreduce(r->k, r->A, r->B, S / 4, MORI_FLOAT32, MORI_SUM, s);
	case B_AG: return mori_allgather(r->k, r->A, r->B, S / 4 / n, MORI_FLOAT32, s);
	case B_RS: return mori_reducescatter(r->k, r->A, r->B, S / 4 / n, MORI_FLOAT32, MORI_SUM, s);
	case B_A2A: return mori_alltoall(r->k, r->A, r->B, S / 4 / n, MORI_FLOAT32, s);
	default: return mori_broadcast(r->k, r->A, r->B, S / 4, MORI_FLOAT32, 0, s);
	}
}

/* bytes every rank must read + write for size S (see the header comment) */
static double traffic(int coll, const char *algo, double S, double n)
{
	switch (coll) {
	case B_AR: return strstr(algo, "oneshot") ? (n + 1) * S : (3 * n - 1) * S / n;
	case B_RS: return (n + 1) * S / n;
	default: return 2 * S;
	}
}
static double busf(int coll, double n)
{
	return coll == B_AR ? 2 * (n - 1) / n : coll == B_BC ? 1 : (n - 1) / n;
}

/* One result row: label, ranks, size, p50, then algbw, busbw, the bound and the share of it */
static void print_row(const char *label, int coll, const char *algo, int n, uint64_t S, double p50, double ceil_bps)
{
	double alg = S / p50 / 1e9, bound = S / (n * traffic(coll, algo, (double)S, n) / (2 * ceil_bps)) / 1e9;
	printf("  %-18s %2d %11llu %10.1f %9.2f %9.2f %9.1f %5.0f%%\n", label, n, (unsigned long long)S, p50 * 1e6, alg,
	       alg * busf(coll, n), bound, 100 * alg / bound);
	fflush(stdout);
}

static int row(struct rk *r, const struct spec *sp, uint64_t S, int iters, double ceil_bps)
{
	int me = r->me;
	const struct gpu_api *g = r->g;
	MOK(mori_comm_set_algo(r->k, sp->algo));
	for (int w = 0; w < 2; w++)
		MOK(coll_once(r, sp->coll, S, r->s));
	GK(g->stream_synchronize(r->s));
	MOK(mori_shmem_barrier_all(r->grp));
	for (int i = 0; i < iters; i++) {
		GK(g->event_record(r->ev[2 * i], r->s));
		MOK(coll_once(r, sp->coll, S, r->s));
		GK(g->event_record(r->ev[2 * i + 1], r->s));
	}
	GK(g->stream_synchronize(r->s));
	mori_status st;
	int rc = mori_comm_status(r->k, &st);
	if (rc) {
		fprintf(stderr, "rank %d: %s %llu: %s (%s)\n", me, sp->label, (unsigned long long)S, mori_strerror(rc),
			st.message);
		return 1;
	}
	double t[MAXIT];
	for (int i = 0; i < iters; i++) {
		float ms = 0;
		GK(g->event_elapsed_time(&ms, r->ev[2 * i], r->ev[2 * i + 1]));
		t[i] = ms * 1e-3;
	}
	qsort(t, (size_t)iters, sizeof(double), cmpd);
	if (me == 0)
		print_row(sp->label, sp->coll, sp->algo, r->n, S, t[iters / 2], ceil_bps);
	return 0;
}

/* OVL_GEMMS SGEMMs on r->s: the time of one on this rank */
static int gemm_time(struct rk *r, gpu_function fn, void **params, double *t)
{
	int me = r->me;
	const struct gpu_api *g = r->g;
	GK(g->event_record(r->ev[0], r->s));
	for (int i = 0; i < OVL_GEMMS; i++)
		GK(g->launch_kernel(fn, GEMM_N / 64, GEMM_N / 64, 1, 256, 1, 1, 0, r->s, params, NULL));
	GK(g->event_record(r->ev[1], r->s));
	GK(g->stream_synchronize(r->s));
	float ms;
	GK(g->event_elapsed_time(&ms, r->ev[0], r->ev[1]));
	*t = ms * 1e-3 / OVL_GEMMS;
	return 0;
}

static double median3(const double *v)
{
	double s[OVL_TRIALS];
	memcpy(s, v, sizeof(s));
	qsort(s, OVL_TRIALS, sizeof(double), cmpd);
	return s[OVL_TRIALS / 2];
}

/* The GEMM alone, then beside a stream of all-gathers in each form, OVL_TRIALS times each, the
 * median on rank 0. The stream must outlast the GEMMs or the slowdown is diluted by the part that
 * ran alone, so rank 0 times one all-gather of the form and sets the count (twice the GEMMs' time
 * alone) for every rank through shared_t[8]. */
static int overlap(struct rk *r)
{
	int me = r->me;
	const struct gpu_api *g = r->g;
	if (!mori_kernels_collbench_image_len) {
		if (me == 0)
			printf("  overlap: skipped (built without nvcc: no GEMM kernel)\n");
		return 0;
	}
	gpu_module mod;
	gpu_function fn;
	GK(g->module_load_data(&mod, mori_kernels_collbench_image));
	GK(g->module_get_function(&fn, mod, "bench_sgemm"));
	gpu_dptr a, b, c;
	size_t mb = (size_t)GEMM_N * GEMM_N * 4;
	GK(g->mem_alloc(&a, mb));
	GK(g->mem_alloc(&b, mb));
	GK(g->mem_alloc(&c, mb));
	GK(g->memset_d8_async(a, 0, mb, r->s));
	GK(g->memset_d8_async(b, 0, mb, r->s));
	int nn = GEMM_N;
	void *params[] = {&a, &b, &c, &nn};
	double t[OVL_TRIALS], base;
	for (int i = 0; i < OVL_TRIALS; i++) {
		MOK(mori_shmem_barrier_all(r->grp));
		if (gemm_time(r, fn, params, &t[i]))
			return 1;
	}
	base = median3(t);
	if (me == 0) {
		printf("  overlap %d ranks: SGEMM %d^3 alone %.2f ms (%.1f TFLOP/s a rank; median of %d runs of %d)\n", r->n,
		       GEMM_N, base * 1e3, 2.0 * GEMM_N * GEMM_N * GEMM_N / base / 1e12, OVL_TRIALS, OVL_GEMMS);
		fflush(stdout);
	}
	const char *forms[] = {"allgather=ce", "allgather=kernel"};
	for (int f = 0; f < 2; f++) {
		MOK(mori_comm_set_algo(r->k, forms[f]));
		MOK(coll_once(r, B_AG, OVL_BYTES, r->s2)); /* warm */
		GK(g->stream_synchronize(r->s2));
		MOK(mori_shmem_barrier_all(r->grp));
		GK(g->event_record(r->ev[2], r->s2));
		for (int i = 0; i < 4; i++)
			MOK(coll_once(r, B_AG, OVL_BYTES, r->s2));
		GK(g->event_record(r->ev[3], r->s2));
		GK(g->stream_synchronize(r->s2));
		float ms;
		GK(g->event_elapsed_time(&ms, r->ev[2], r->ev[3]));
		double tag = ms * 1e-3 / 4;
		if (me == 0) {
			double k = 2 * OVL_GEMMS * base / tag + 1;
			shared_t[8] = k < 8 ? 8 : k > 2000 ? 2000 : (int)k;
		}
		MOK(mori_shmem_barrier_all(r->grp));
		int K = (int)shared_t[8];
		MOK(mori_shmem_barrier_all(r->grp)); /* read before rank 0 writes the next form's */
		int every = (K + OVL_MARKS - 1) / OVL_MARKS, done[OVL_TRIALS];
		for (int i = 0; i < OVL_TRIALS; i++) {
			MOK(mori_shmem_barrier_all(r->grp));
			for (int j = 0; j < K; j++) { /* queued first; a marker event after every `every`-th */
				MOK(coll_once(r, B_AG, OVL_BYTES, r->s2));
				if ((j + 1) % every == 0)
					GK(g->event_record(r->ev[OVL_EV + (j + 1) / every - 1], r->s2));
			}
			if (gemm_time(r, fn, params, &t[i]))
				return 1;
			/* the GEMMs just ended: how many all-gathers had (markers completed, rounded down) */
			done[i] = 0;
			for (int m = 0; m < K / every && g->event_query(r->ev[OVL_EV + m]) == 0; m++)
				done[i] = (m + 1) * every;
			GK(g->stream_synchronize(r->s2));
		}
		mori_status st;
		int rc = mori_comm_status(r->k, &st);
		if (rc) {
			fprintf(stderr, "rank %d: overlap %s: %s (%s)\n", me, forms[f], mori_strerror(rc), st.message);
			return 1;
		}
		if (me == 0) {
			double m = median3(t);
			double d[OVL_TRIALS];
			for (int i = 0; i < OVL_TRIALS; i++)
				d[i] = done[i];
			printf("  overlap %d ranks: SGEMM beside %d x %llu MiB all-gather %-6s (%.3f ms each alone) %.2f ms: %+.1f%% "
			       "slower (runs %+.1f %+.1f %+.1f %%); all-gathers done while the GEMMs ran: %.0f (%.0f%% of the rate "
			       "alone)\n", r->n, K, (unsigned long long)(OVL_BYTES >> 20), forms[f] + 10, tag * 1e3, m * 1e3,
			       100 * (m / base - 1), 100 * (t[0] / base - 1), 100 * (t[1] / base - 1), 100 * (t[2] / base - 1),
			       median3(d), 100 * median3(d) * tag / (OVL_GEMMS * m));
			fflush(stdout);
		}
	}
	g->mem_free(a);
	g->mem_free(b);
	g->mem_free(c);
	g->module_unload(mod);
	return 0;
}

/* Small all-reduces with no launch in the loop: 20 captured in a CUDA graph, the graph replayed;
 * the time per all-reduce (what launches cost is out of it). */
typedef int (*fn_begin)(void *, int);
typedef int (*fn_end)(void *, void **);
typedef int (*fn_inst)(void **, void *, unsigned long long);
typedef int (*fn_launch)(void *, void *);
static int graph_rows(struct rk *r)
{
	int me = r->me;
	const struct gpu_api *g = r->g;
	void *cu = dlopen("libcuda.so.1", RTLD_NOW);
	fn_begin begin = cu ? (fn_begin)dlsym(cu, "cuStreamBeginCapture_v2") : NULL;
	fn_end end = cu ? (fn_end)dlsym(cu, "cuStreamEndCapture") : NULL;
	fn_inst inst = cu ? (fn_inst)dlsym(cu, "cuGraphInstantiateWithFlags") : NULL;
	fn_launch glaunch = cu ? (fn_launch)dlsym(cu, "cuGraphLaunch") : NULL;
	if (!begin || !end || !inst || !glaunch)
		return 0;
	MOK(mori_comm_set_algo(r->k, "allreduce=auto"));
	static const uint64_t sz[] = {8, 4096, 65536, 1u << 20};
	for (int i = 0; i < 4; i++) {
		void *graph, *exec;
		GK(begin(r->s, 0));
		for (int j = 0; j < 20; j++)
			MOK(coll_once(r, B_AR, sz[i], r->s));
		GK(end(r->s, &graph));
		GK(inst(&exec, graph, 0));
		GK(glaunch(exec, r->s));
		GK(g->stream_synchronize(r->s));
		MOK(mori_shmem_barrier_all(r->grp));
		GK(g->event_record(r->ev[0], r->s));
		for (int k = 0; k < 10; k++)
			GK(glaunch(exec, r->s));
		GK(g->event_record(r->ev[1], r->s));
		GK(g->stream_synchronize(r->s));
		float ms;
		GK(g->event_elapsed_time(&ms, r->ev[0], r->ev[1]));
		if (me == 0) {
			const char *alg = "";
			mori_comm_algo(r->k, "allreduce", sz[i], &alg);
			printf("  allreduce %-8s %2d %11llu %10.1f us a collective, 20 a CUDA graph (launches out of it)\n", alg,
			       r->n, (unsigned long long)sz[i], ms * 1e3 / 200);
			fflush(stdout);
		}
	}
	return 0;
}

/* r->s2, the collectives' side stream of the overlap row, at the device's highest priority where
 * the driver offers it (CUDA), as communication streams are: at equal priority a kernel
 * all-gather's blocks wait behind the GEMM's queued blocks and overlap little. */
typedef int (*fn_prange)(int *, int *);
typedef int (*fn_screate)(void **, unsigned, int);
static int comm_stream(struct rk *r)
{
	int me = r->me, lo = 0, hi = 0;
	const struct gpu_api *g = r->g;
	void *cu = g->backend == GPU_BACKEND_CUDA ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) : NULL;
	fn_prange range = cu ? (fn_prange)dlsym(cu, "cuCtxGetStreamPriorityRange") : NULL;
	fn_screate create = cu ? (fn_screate)dlsym(cu, "cuStreamCreateWithPriority") : NULL;
	if (range && create && range(&lo, &hi) == 0 && create((void **)&r->s2, GPU_STREAM_NON_BLOCKING, hi) == 0)
		return 0;
	GK(g->stream_create(&r->s2, GPU_STREAM_NON_BLOCKING));
	return 0;
}

static int one_rank(int me, int n, const char *dir, uint64_t maxb, int iters)
{
	char pct[16];
	snprintf(pct, sizeof(pct), "%d", 100 / n);
	setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct, 1);
	struct rk R = {.me = me, .n = n}, *r = &R;
	gpu_device dev;
	gpu_context ctx;
	r->g = gpu_api();
	if (!r->g || r->g->device_get(&dev, 0) || r->g->primary_ctx_retain(&ctx, dev) || r->g->ctx_push_current(ctx)) {
		fprintf(stderr, "rank %d: no GPU: %s\n", me, gpu_unavailable_reason());
		return 1;
	}
	const struct gpu_api *g = r->g;
	mori_client *c;
	MOK(mori_client_open(dir, "bench-coll", &c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_kind = MORI_MEM_VRAM;
	o.gpu_device = 0;
	o.heap_size = 2 * maxb + (80ull << 20);
	o.timeout_us = 60000000;
	char name[64];
	snprintf(name, sizeof(name), "bench-coll-%d-%d", n, (int)getppid());
	MOK(mori_shmem_init(c, name, me, n, &o, &r->grp));
	MOK(mori_comm_create(r->grp, NULL, &r->k));
	MOK(mori_shmem_malloc(r->grp, maxb, 4096, (void **)&r->A));
	MOK(mori_shmem_malloc(r->grp, maxb, 4096, (void **)&r->B));
	mori_window *wa, *wb;
	MOK(mori_comm_window_register(r->k, r->A, maxb, &wa));
	MOK(mori_comm_window_register(r->k, r->B, maxb, &wb));
	GK(g->stream_create(&r->s, GPU_STREAM_NON_BLOCKING));
	if (comm_stream(r))
		return 1;
	for (int i = 0; i < 2 * MAXIT + 2; i++)
		GK(g->event_create(&r->ev[i], 0));
	/* the copy ceiling: rank 0 alone */
	double ceil_bps = 0;
	uint64_t cb = maxb < (256ull << 20) ? maxb : 256ull << 20;
	MOK(mori_shmem_barrier_all(r->grp));
	if (me == 0) {
		for (int i = 0; i < 6; i++) {
			GK(g->event_record(r->ev[0], r->s));
			GK(g->memcpy_dtod_async((gpu_dptr)(uintptr_t)r->B, (gpu_dptr)(uintptr_t)r->A, cb, r->s));
			GK(g->event_record(r->ev[1], r->s));
			GK(g->stream_synchronize(r->s));
			float ms;
			GK(g->event_elapsed_time(&ms, r->ev[0], r->ev[1]));
			if (i && cb / (ms * 1e-3) > ceil_bps)
				ceil_bps = cb / (ms * 1e-3);
		}
	}
	/* and every rank copying at once (the GPU's memory shared as the collectives share it): the
	 * bytes of all ranks over one window from the first rank's start to the last rank's end (host
	 * clock; each rank's own best would add up copies that did not overlap) */
	double win = 1e9;
	for (int i = 0; i < 4; i++) {
		MOK(mori_shmem_barrier_all(r->grp));
		shared_t[16 + me] = now_s();
		for (int j = 0; j < CEIL_COPIES; j++)
			GK(g->memcpy_dtod_async((gpu_dptr)(uintptr_t)r->B, (gpu_dptr)(uintptr_t)r->A, cb, r->s));
		GK(g->stream_synchronize(r->s));
		shared_t[32 + me] = now_s();
		MOK(mori_shmem_barrier_all(r->grp));
		double t0 = 1e30, t1 = 0;
		for (int k = 0; k < n; k++) {
			t0 = shared_t[16 + k] < t0 ? shared_t[16 + k] : t0;
			t1 = shared_t[32 + k] > t1 ? shared_t[32 + k] : t1;
		}
		if (i && t1 - t0 < win) /* the first is a warm-up */
			win = t1 - t0;
	}
	if (me == 0) {
		double alone = ceil_bps;
		ceil_bps = (double)n * CEIL_COPIES * (double)cb / win;
		shared_t[1] = ceil_bps;
		printf("# %d ranks on one GPU; copy ceiling (cuMemcpyDtoDAsync %llu MiB): every rank at once %.0f GB/s in all "
		       "(rank 0 alone %.0f GB/s); the bound below uses the former\n", n, (unsigned long long)(cb >> 20),
		       ceil_bps / 1e9, alone / 1e9);
		printf("  %-18s %2s %11s %10s %9s %9s %9s %6s\n", "collective", "n", "bytes", "p50 us", "algbw", "busbw",
		       "bound", "of it");
		fflush(stdout);
	}
	MOK(mori_shmem_barrier_all(r->grp));
	for (size_t si = 0; si < NSPECS; si++) {
		uint64_t lim = specs[si].coll == B_AR ? maxb : maxb / 4;
		if (!picked(si))
			continue;
		for (uint64_t S = 8; S <= lim; S *= 8) {
			if (S < minb)
				continue;
			if (specs[si].coll != B_AR && specs[si].coll != B_BC && S < 4ull * (uint64_t)n)
				continue;
			int it = S <= (1u << 20) ? iters : S <= (64u << 20) ? 10 : 3;
			if (row(r, &specs[si], S, it, ceil_bps ? ceil_bps : 1e12))
				return 1;
		}
	}
	if (!only && (graph_rows(r) || (!no_overlap && overlap(r))))
		return 1;
	MOK(mori_comm_window_deregister(r->k, wa));
	MOK(mori_comm_window_deregister(r->k, wb));
	mori_comm_destroy(r->k);
	mori_shmem_finalize(r->grp);
	mori_client_close(c);
	return 0;
}

/* NVSHMEM's rows: rank 0's "nvshmem coll KIND FORM NPES BYTES P50_US" lines (tools/bench_nvshmem.cu) */
static void nv_coll_line(const char *l, void *arg)
{
	(void)arg;
	char kind[32], form[16], label[64];
	int np;
	unsigned long long S;
	double us;
	if (sscanf(l, "nvshmem coll %31s %15s %d %llu %lf", kind, form, &np, &S, &us) != 5 || us <= 0)
		return;
	static const struct { const char *name; int coll; } k[] = {
		{"allreduce", B_AR}, {"allgather", B_AG}, {"alltoall", B_A2A}, {"broadcast", B_BC}, {"reducescatter", B_RS}};
	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		if (!strcmp(kind, k[i].name)) {
			snprintf(label, sizeof(label), "nv %s %s", kind, form);
			print_row(label, k[i].coll, "twoshot", np, S, us * 1e-6, shared_t[1] > 0 ? shared_t[1] : 1e12);
		}
}

int bench_coll_main(int argc, char **argv)
{
	const char *dir = getenv("MORI_RUNTIME_DIR"), *pes = "2 4 8", *nvshmem = NULL;
	uint64_t maxb = 1ull << 30;
	int iters = 40;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--pes") && i + 1 < argc)
			pes = argv[++i];
		else if (!strcmp(argv[i], "--max") && i + 1 < argc)
			maxb = parse_size(argv[++i]);
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
			char *e;
			long v = strtol(argv[++i], &e, 10);
			if (e == argv[i] || *e || v < 1 || v > MAXIT) {
				fprintf(stderr, "mori-bench coll: --iters %s is not 1 .. %d\n", argv[i], MAXIT);
				return 2;
			}
			iters = (int)v;
		}
		else if (!strcmp(argv[i], "--min") && i + 1 < argc)
			minb = parse_size(argv[++i]);
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--nvshmem") && i + 1 < argc)
			nvshmem = argv[++i];
		else if (!strcmp(argv[i], "--no-overlap"))
			no_overlap = 1;
		else {
			int help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
			fprintf(help ? stdout : stderr, "usage: mori-bench coll [--dir RUNTIME_DIR] [--pes \"2 4 8\"] [--max BYTES] "
					"[--iters 1..%d] [--min BYTES] [--only LABEL] [--nvshmem PATH/bench_nvshmem] [--no-overlap]   "
					"(BYTES: 4096, 64K, 1G...)\n", MAXIT);
			return help ? 0 : 2;
		}
	}
	int ns[16], nn = 0; /* --pes: rank counts 1 .. 8, separated by spaces or commas */
	for (const char *p = pes;;) {
		while (*p == ' ' || *p == ',')
			p++;
		if (!*p)
			break;
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || (*end && *end != ' ' && *end != ',') || v < 1 || v > 8 || nn == 16) {
			fprintf(stderr, "mori-bench coll: --pes \"%s\": rank counts 1 .. 8 (at most 16 of them), separated by "
					"spaces or commas\n", pes);
			return 2;
		}
		ns[nn++] = (int)v;
		p = end;
	}
	if (!nn) {
		fprintf(stderr, "mori-bench coll: --pes names no rank count\n");
		return 2;
	}
	if (only) { /* a label no row starts with would measure nothing and exit 0 */
		size_t k = 0;
		while (k < NSPECS && !picked(k))
			k++;
		if (!*only || k == NSPECS) {
			fprintf(stderr, "mori-bench coll: --only \"%s\" starts no row's label (", only);
			for (k = 0; k < NSPECS; k++)
				fprintf(stderr, "%s\"%s\"", k ? ", " : "", specs[k].label);
			fprintf(stderr, ")\n");
			return 2;
		}
	}
	if (minb > maxb) {
		fprintf(stderr, "mori-bench coll: --min %llu is above --max %llu\n", (unsigned long long)minb,
			(unsigned long long)maxb);
		return 2;
	}
	if (maxb < (1u << 20)) { /* the graph rows' sizes (up to 1 MiB) must fit the windows */
		fprintf(stderr, "mori-bench coll: --max raised to 1 MiB (the windows hold the graph rows' sizes)\n");
		maxb = 1u << 20;
	}
	/* the driver's library, without initialising it here (the ranks are forked from this process) */
	void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (!drv)
		drv = dlopen("libamdhip64.so", RTLD_LAZY | RTLD_LOCAL);
	if (!drv) {
		printf("skipped: no GPU (neither libcuda.so.1 nor libamdhip64.so is installed)\n");
		return 77;
	}
	printf("# mori-bench coll: MORI-CCL, N processes on one GPU as the ranks (MPS: %s), f32, heap windows\n",
	       getenv("CUDA_MPS_PIPE_DIRECTORY") ? "on" : "off (kernels of the ranks time-slice)");
	shared_t = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared_t == MAP_FAILED)
		return 1;
	int fails = 0;
	for (int ni = 0; ni < nn; ni++) {
		const int n = ns[ni];
		fflush(stdout);
		pid_t pids[8];
		for (int i = 0; i < n; i++) {
			pids[i] = fork();
			if (pids[i] == 0) {
				prctl(PR_SET_PDEATHSIG, SIGKILL);
				alarm(300);
				_exit(one_rank(i, (int)n, dir, maxb, iters));
			}
		}
		for (int i = 0; i < n; i++) {
			int st;
			waitpid(pids[i], &st, 0);
			if (!WIFEXITED(st) || WEXITSTATUS(st))
				fails++;
		}
		if (nvshmem && n > 1) {
			char mb[24], it[16];
			snprintf(mb, sizeof(mb), "%llu", (unsigned long long)maxb);
			snprintf(it, sizeof(it), "%d", iters);
			const char *tail[] = {mb, it};
			printf("# NVSHMEM's team collectives, %d PEs (processes, as mori's ranks), f32, the same sizes\n", n);
			fflush(stdout);
			if (nvshmem_run(nvshmem, "coll", n, tail, 2, 280, nv_coll_line, NULL)) {
				fprintf(stderr, "mori-bench coll: NVSHMEM with %d PEs failed (its stderr is above)\n", n);
				fails++;
			}
		}
	}
	return fails ? 1 : 0;
}
