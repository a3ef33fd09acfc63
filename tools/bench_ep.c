/* mori-bench ep: MORI-EP dispatch and combine (include/mori_ep.h) with N processes on one GPU as the
 * N ranks of a group formed through morid (VRAM heaps), under MPS when the caller started it (each
 * process gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / N).
 *
 *   normal mode: 4096 tokens per rank; low-latency mode: 128 tokens per rank; H = 7168, top-8 of
 *   256 experts, fp8 e4m3 dispatch with 56 float scales per token, bf16 combine (the experts'
 *   outputs are the received rows read as bf16: the bytes move the same), uniform random routing.
 *   Per rank: dispatch and combine latency p50/p99 (events around each, a barrier on the stream
 *   before every iteration), bandwidth as ROCm/mori computes it (received tokens x H x element size
 *   / time), and the aggregate of all ranks (sum of received bytes / the slowest rank's time).
 *   Combine reads the experts' outputs from the registered combine input (ROCm/mori's
 *   get_registered_combine_input_buffer) in place; "push p50" times the other path (a buffer of
 *   their own, copied to the home ranks). Then one CUDA graph of dispatch + combine replayed.
 *   Baseline in the same run: cuMemcpyDtoD of 1 GiB in one process (the copy ceiling). All ranks
 *   share one GPU's memory: these are not NVLink figures.
 *
 *   --quant: bf16 input quantised to fp8 by dispatch itself (quant_type; rows "nrm-q" / "ll-q").
 *
 *   --nodes K --dirs "DIR_A DIR_B ..." --root HOST:PORT (issue 14): the ranks split over K morids
 *   (rank r on node r / (N / K); the group's root is the first), so the internode kernels run: each
 *   shape three times, with every token's experts drawn from its own node only ("intra": the
 *   intranode part's bandwidth), from the other nodes only ("cross": the part that goes through the
 *   proxy), and from all ("mixed"). Baseline in the same run beside the copy ceiling: a TCP stream
 *   over loopback between two processes (1 GiB in 4 MiB writes), what the daemons' streams ride on.
 *
 * mori-bench ep [--dir RUNTIME_DIR] [--pes "2 4 8"] [--mode normal|ll|both] [--iters 30] [--quant]
 *               [--nodes K --dirs "DIR ..." --root HOST:PORT] */
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../libclient/gpu_int.h"
#include "mori_ep.h"

int bench_ep_main(int argc, char **argv);

#define MAXPE 8
#define MAXIT 200
#define H 7168
#define TOPK 8
#define NEXP 256

struct rank_res {
	int ok;
	char err[300];
	double disp_us[MAXIT], comb_us[MAXIT], push_us[MAXIT], graph_us[MAXIT];
	long long recv[MAXIT];
	int graph_n;
};
struct shared {
	struct rank_res r[MAXPE];
	double ceiling_gbs;
	double tcp_gbs; /* --nodes: the TCP stream baseline */
	char desc[256];
};
static struct shared *SH;
static int QUANT; /* --quant */
#define MAXNODE 4
static int NODES = 1;            /* --nodes */
static const char *DIRS[MAXNODE], *ROOT; /* --dirs, --root */
enum { ROUTE_ALL, ROUTE_INTRA, ROUTE_CROSS };
static int ROUTE;                /* with --nodes: where a token's experts are drawn from */
static const char *const route_name[] = {"mixed", "intra", "cross"};

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}
static double pct(const double *v, int n, double p)
{
	double s[MAXIT];
	memcpy(s, v, sizeof(double) * (size_t)n);
	qsort(s, (size_t)n, sizeof(double), cmp_d);
	int i = (int)(p * n);
	return s[i < n ? i : n - 1];
}
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

#define FAIL(...)                                                                                   \
	do {                                                                                        \
		snprintf(R->err, sizeof(R->err), __VA_ARGS__);                                       \
		return 1;                                                                           \
	} while (0)
#define MOK(x)                                                                                      \
	do {                                                                                        \
		int r_ = (x);                                                                       \
		if (r_)                                                                             \
			FAIL("%s: %s (%s)", #x, mori_strerror(r_), mori_client_last_error(NULL));         \
	} while (0)
#define GCK(x)                                                                                      \
	do {                                                                                        \
		int r_ = (x);                                                                       \
		if (r_)                                                                             \
			FAIL("%s: %s", #x, gpu_strerror(r_));                                              \
	} while (0)

typedef int (*cu_begin_fn)(void *, int);
typedef int (*cu_end_fn)(void *, void **);
typedef int (*cu_inst_fn)(void **, void *, unsigned long long);
typedef int (*cu_launch_fn)(void *, void *);

static int one_rank(int me, int n, int ll, int iters, const char *dir)
{
	struct rank_res *R = &SH->r[me];
	char pct_s[16];
	snprintf(pct_s, sizeof(pct_s), "%d", 100 / n);
	setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct_s, 1);
	const struct gpu_api *g = gpu_api();
	gpu_device dev;
	gpu_context ctx;
	if (!g || g->device_get(&dev, 0) || g->primary_ctx_retain(&ctx, dev) || g->ctx_push_current(ctx))
		FAIL("no GPU: %s", gpu_unavailable_reason());
	const int T = ll ? 128 : 4096;
	mori_ep_config f;
	mori_ep_config_init(&f, sizeof(f));
	f.rank = me, f.world_size = n, f.hidden_dim = H, f.max_num_inp_token_per_rank = T;
	f.num_experts_per_rank = NEXP / n, f.num_experts_per_token = TOPK, f.data_type = MORI_FLOAT8_E4M3;
	f.max_token_type_size = 2, f.scale_dim = H / 128, f.scale_type_size = 4;
	f.kernel_type = ll ? MORI_EP_LOW_LATENCY : MORI_EP_NORMAL;
	if (NODES > 1) /* what mori_ep_create picks for a group over several nodes; the heap is sized for it */
		f.kernel_type = ll ? MORI_EP_INTERNODE_LL : MORI_EP_INTERNODE;
	const int per = n / NODES, node = me / per, span = NEXP / NODES; /* the experts of one node */
	if (QUANT)
		f.data_type = MORI_BFLOAT16, f.quant_type = MORI_EP_QUANT_FP8_BLOCK128;
	const size_t in_es = QUANT ? 2 : 1;
	mori_client *c;
	MOK(mori_client_open(NODES > 1 ? DIRS[node] : dir, "bench-ep", &c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_kind = MORI_MEM_VRAM;
	o.heap_size = (mori_ep_heap_bytes(&f) + (8u << 20) + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
	o.gpu_device = 0;
	o.timeout_us = 120000000;
	o.root = NODES > 1 ? ROOT : NULL;
	char name[64];
	snprintf(name, sizeof(name), "bench-ep-%d-%s-%d-%d", n, ll ? "ll" : "normal", ROUTE, (int)getppid());
	mori_group *grp;
	MOK(mori_shmem_init(c, name, me, n, &o, &grp));
	mori_ep_handle *h;
	MOK(mori_ep_create(grp, &f, &h));
	gpu_stream s;
	GCK(g->stream_create(&s, GPU_STREAM_NON_BLOCKING));
	gpu_dptr in, w, sc, idx, out;
	GCK(g->mem_alloc(&in, (size_t)T * H * in_es));
	GCK(g->mem_alloc(&w, (size_t)T * TOPK * 4));
	GCK(g->mem_alloc(&sc, (size_t)T * (H / 128) * 4));
	GCK(g->mem_alloc(&idx, (size_t)T * TOPK * 4));
	GCK(g->mem_alloc(&out, (size_t)T * H * 2));
	GCK(g->memset_d8_async(in, QUANT ? 0x3f : 0x38, (size_t)T * H * in_es, s)); /* fp8 1.0; bf16 0.75 */
	GCK(g->memset_d8_async(sc, 0, (size_t)T * (H / 128) * 4, s));
	GCK(g->memset_d8_async(w, 0, (size_t)T * TOPK * 4, s));
	int32_t *hidx = malloc((size_t)T * TOPK * 4);
	if (!hidx)
		FAIL("malloc");
	for (int t = 0; t < T; t++) /* uniform random distinct experts */
		for (int k = 0; k < TOPK; k++) {
			int v, dup;
			uint64_t r = mix((uint64_t)me << 32 | (uint64_t)(t * TOPK + k));
			do {
				v = (int)(r % NEXP);
				if (ROUTE == ROUTE_INTRA) /* an expert of this node */
					v = node * span + (int)(r % (uint64_t)span);
				else if (ROUTE == ROUTE_CROSS) /* an expert of another node */
					v = (node + 1 + (int)(r % (uint64_t)(NODES - 1))) % NODES * span +
					    (int)((r >> 16) % (uint64_t)span);
				r = mix(r);
				dup = 0;
				for (int j = 0; j < k; j++)
					dup |= hidx[t * TOPK + j] == v;
			} while (dup);
			hidx[t * TOPK + k] = v;
		}
	GCK(g->memcpy_htod_async(idx, hidx, (size_t)T * TOPK * 4, s));
	free(hidx);
	mori_ep_recv rb;
	mori_ep_recv_buffers(h, &rb);
	gpu_event e0, e1, e2;
	GCK(g->event_create(&e0, 0));
	GCK(g->event_create(&e1, 0));
	GCK(g->event_create(&e2, 0));
	/* pass 0: the experts' outputs in the registered combine input (read in place by the home
	 * ranks); pass 1: in a buffer of their own (the receive rows, pushed to the home ranks) */
	void *cin = mori_ep_get_registered_combine_input_buffer(h);
	for (int pass = 0; pass < 2; pass++)
	for (int it = -3; it < iters; it++) {
		MOK(mori_shmem_barrier_on_stream(grp, s)); /* every rank starts the iteration together */
		GCK(g->event_record(e0, s));
		MOK(mori_ep_dispatch(h, (void *)(uintptr_t)in, (float *)(uintptr_t)w, QUANT ? NULL : (void *)(uintptr_t)sc,
				     (int32_t *)(uintptr_t)idx, T, s, NULL));
		GCK(g->event_record(e1, s));
		/* the experts' outputs: the received rows read as bf16 (H x 2 bytes = the row stride) */
		MOK(mori_ep_combine(h, MORI_BFLOAT16, pass ? rb.tokens : cin, NULL, NULL, (void *)(uintptr_t)out, s));
		GCK(g->event_record(e2, s));
		GCK(g->stream_synchronize(s));
		if (it < 0)
			continue;
		if (pass) {
			float b;
			GCK(g->event_elapsed_time(&b, e1, e2));
			R->push_us[it] = b * 1e3;
			continue;
		}
		float a, b;
		GCK(g->event_elapsed_time(&a, e0, e1));
		GCK(g->event_elapsed_time(&b, e1, e2));
		int32_t cnt[NEXP];
		int nl = ll ? NEXP / n : 1;
		GCK(g->memcpy_dtoh_async(cnt, (gpu_dptr)(uintptr_t)rb.count, 4 * (size_t)nl, s));
		GCK(g->stream_synchronize(s));
		long long sum = 0;
		for (int l = 0; l < nl; l++)
			sum += cnt[l];
		R->disp_us[it] = a * 1e3, R->comb_us[it] = b * 1e3, R->recv[it] = sum;
	}
	MOK(mori_ep_status(h, NULL));
	/* a graph of dispatch + combine, replayed */
	void *cu = dlopen(g->library, RTLD_NOW | RTLD_NOLOAD);
	cu_begin_fn begin = cu ? (cu_begin_fn)dlsym(cu, "cuStreamBeginCapture_v2") : NULL;
	cu_end_fn end = cu ? (cu_end_fn)dlsym(cu, "cuStreamEndCapture") : NULL;
	cu_inst_fn inst = cu ? (cu_inst_fn)dlsym(cu, "cuGraphInstantiateWithFlags") : NULL;
	cu_launch_fn glaunch = cu ? (cu_launch_fn)dlsym(cu, "cuGraphLaunch") : NULL;
	if (begin && end && inst && glaunch) {
		void *graph = NULL, *exec = NULL;
		GCK(begin(s, 2));
		MOK(mori_ep_dispatch(h, (void *)(uintptr_t)in, (float *)(uintptr_t)w, QUANT ? NULL : (void *)(uintptr_t)sc,
				     (int32_t *)(uintptr_t)idx, T, s, NULL));
		MOK(mori_ep_combine(h, MORI_BFLOAT16, cin, NULL, NULL, (void *)(uintptr_t)out, s));
		GCK(end(s, &graph));
		GCK(inst(&exec, graph, 0));
		for (int it = -3; it < iters; it++) {
			MOK(mori_shmem_barrier_on_stream(grp, s));
			GCK(g->event_record(e0, s));
			GCK(glaunch(exec, s));
			GCK(g->event_record(e1, s));
			GCK(g->stream_synchronize(s));
			float a;
			GCK(g->event_elapsed_time(&a, e0, e1));
			if (it >= 0)
				R->graph_us[it] = a * 1e3;
		}
		R->graph_n = iters;
	}
	MOK(mori_ep_status(h, NULL));
	MOK(mori_ep_destroy(h));
	mori_shmem_finalize(grp);
	mori_client_close(c);
	R->ok = 1;
	return 0;
}

/* The copy ceiling, in its own process with the whole GPU: GB/s of one cuMemcpyDtoD of 1 GiB. */
static int ceiling(void)
{
	setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100", 1);
	const struct gpu_api *g = gpu_api();
	gpu_device dev;
	gpu_context ctx;
	if (!g || g->device_get(&dev, 0) || g->primary_ctx_retain(&ctx, dev) || g->ctx_push_current(ctx))
		return 1;
	size_t len = 1ull << 30;
	gpu_dptr a, b;
	gpu_event e0, e1;
	if (g->mem_alloc(&a, len) || g->mem_alloc(&b, len) || g->event_create(&e0, 0) || g->event_create(&e1, 0))
		return 1;
	double best = 0;
	for (int i = 0; i < 8; i++) {
		float ms;
		g->event_record(e0, NULL);
		g->memcpy_dtod_async(b, a, len, NULL);
		g->event_record(e1, NULL);
		g->event_synchronize(e1);
		g->event_elapsed_time(&ms, e0, e1);
		double gbs = (double)len / (ms * 1e-3) / 1e9;
		if (i > 0 && gbs > best) /* the first is a warm-up */
			best = gbs;
	}
	SH->ceiling_gbs = best;
	gpu_describe(SH->desc, sizeof(SH->desc));
	return 0;
}

/* The TCP baseline (--nodes): GB/s of a 1 GiB stream in 4 MiB writes between two processes over
 * loopback (what the daemons' TCP streams ride on). 0 when it could not be measured. */
static double tcp_stream(void)
{
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &al))
		return 0;
	const size_t chunk = 4u << 20, total = 1ull << 30;
	pid_t p = fork();
	if (p == 0) { /* the sender */
		int s = socket(AF_INET, SOCK_STREAM, 0);
		char *buf = calloc(1, chunk);
		if (s < 0 || !buf || connect(s, (struct sockaddr *)&a, sizeof(a)))
			_exit(1);
		for (size_t o = 0; o < total;) {
			ssize_t w = write(s, buf, chunk);
			if (w <= 0)
				_exit(1);
			o += (size_t)w;
		}
		close(s);
		_exit(0);
	}
	int c = accept(l, NULL, NULL);
	char *buf = malloc(chunk);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	size_t got = 0;
	while (c >= 0 && buf && got < total) {
		ssize_t r = read(c, buf, chunk);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	int st;
	waitpid(p, &st, 0);
	free(buf);
	if (c >= 0)
		close(c);
	close(l);
	double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	return got == total && dt > 0 ? (double)total / dt / 1e9 : 0;
}

static int run_procs(int n, int ll, int iters, const char *dir)
{
	pid_t pids[MAXPE];
	memset(SH->r, 0, sizeof(SH->r));
	for (int i = 0; i < n; i++) {
		if ((pids[i] = fork()) == 0) {
			alarm(300);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(one_rank(i, n, ll, iters, dir));
		}
	}
	int bad = 0;
	for (int i = 0; i < n; i++) {
		int st;
		waitpid(pids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) || !SH->r[i].ok) {
			fprintf(stderr, "mori-bench ep: rank %d of %d (%s): %s\n", i, n, ll ? "low-latency" : "normal",
				SH->r[i].err[0] ? SH->r[i].err : "died");
			bad = 1;
		}
	}
	return bad;
}

static void report(int n, int ll, int iters)
{
	const int T = ll ? 128 : 4096;
	double dmax50 = 0, dmax99 = 0, cmax50 = 0, cmax99 = 0, gmax50 = 0, pmax50 = 0, dbw = 0, cbw = 0;
	long long recv = 0;
	double agg_d[MAXIT], agg_c[MAXIT];
	for (int it = 0; it < iters; it++) {
		double bytes = 0, td = 0, tc = 0;
		for (int i = 0; i < n; i++) {
			bytes += (double)SH->r[i].recv[it] * H;
			td = SH->r[i].disp_us[it] > td ? SH->r[i].disp_us[it] : td;
			tc = SH->r[i].comb_us[it] > tc ? SH->r[i].comb_us[it] : tc;
		}
		agg_d[it] = bytes / (td * 1e-6) / 1e9;
		agg_c[it] = 2 * bytes / (tc * 1e-6) / 1e9;
	}
	for (int i = 0; i < n; i++) {
		struct rank_res *r = &SH->r[i];
		double d50 = pct(r->disp_us, iters, 0.5), c50 = pct(r->comb_us, iters, 0.5);
		dmax50 = fmax(dmax50, d50), dmax99 = fmax(dmax99, pct(r->disp_us, iters, 0.99));
		cmax50 = fmax(cmax50, c50), cmax99 = fmax(cmax99, pct(r->comb_us, iters, 0.99));
		pmax50 = fmax(pmax50, pct(r->push_us, iters, 0.5));
		if (r->graph_n)
			gmax50 = fmax(gmax50, pct(r->graph_us, r->graph_n, 0.5));
		recv += r->recv[0];
		/* ROCm/mori's per-rank bandwidth: received tokens x H x element size / time */
		dbw += (double)r->recv[0] * H * 1 / (d50 * 1e-6) / 1e9 / n;
		cbw += (double)r->recv[0] * H * 2 / (c50 * 1e-6) / 1e9 / n;
	}
	double ad = pct(agg_d, iters, 0.5), ac = pct(agg_c, iters, 0.5);
	char label[32];
	snprintf(label, sizeof(label), "%s%s%s", ll ? (QUANT ? "ll-q" : "ll") : (QUANT ? "nrm-q" : "normal"),
		 NODES > 1 ? "/" : "", NODES > 1 ? route_name[ROUTE] : "");
	printf("  %-6s %5d %6d %8lld %9.1f %8.1f %9.1f %9.1f %8.1f %9.1f %9.1f %9.1f %6.0f%% %6.0f%% %9.1f %9.1f\n",
	       label, n, T, recv / n, dmax50, dmax99, dbw, cmax50, cmax99, cbw, ad, ac,
	       100 * ad / SH->ceiling_gbs, 100 * ac / SH->ceiling_gbs, gmax50, pmax50);
	if (NODES > 1 && ROUTE == ROUTE_CROSS && SH->tcp_gbs > 0)
		printf("  %-6s cross-node part: aggregate dispatch %.2f GB/s, combine %.2f GB/s = %.0f%% / %.0f%% of the "
		       "TCP stream (%.2f GB/s)\n", label, ad, ac, 100 * ad / SH->tcp_gbs, 100 * ac / SH->tcp_gbs, SH->tcp_gbs);
	fflush(stdout);
}

int bench_ep_main(int argc, char **argv)
{
	const char *dir = getenv("MORI_RUNTIME_DIR"), *pes = "2 4 8", *mode = "both", *dirs = NULL;
	int iters = 30;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--pes") && i + 1 < argc)
			pes = argv[++i];
		else if (!strcmp(argv[i], "--mode") && i + 1 < argc)
			mode = argv[++i];
		else if (!strcmp(argv[i], "--quant"))
			QUANT = 1;
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--nodes") && i + 1 < argc)
			NODES = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--dirs") && i + 1 < argc)
			dirs = argv[++i];
		else if (!strcmp(argv[i], "--root") && i + 1 < argc)
			ROOT = argv[++i];
		else {
			int help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
			fprintf(help ? stdout : stderr, "usage: mori-bench ep [--dir RUNTIME_DIR] [--pes \"2 4 8\"] [--mode normal|ll|both] "
					"[--iters 30] [--quant] [--nodes K --dirs \"DIR ...\" --root HOST:PORT]\n");
			return help ? 0 : 2;
		}
	}
	static char dirbuf[1024];
	int nd = 0;
	snprintf(dirbuf, sizeof(dirbuf), "%s", dirs ? dirs : "");
	for (char *tok = strtok(dirbuf, " "); tok && nd < MAXNODE; tok = strtok(NULL, " "))
		DIRS[nd++] = tok;
	if (NODES < 1 || NODES > MAXNODE || (NODES > 1 && (nd != NODES || !ROOT))) {
		fprintf(stderr, "mori-bench ep: --nodes %d needs --dirs with %d runtime dirs and --root\n", NODES, NODES);
		return 2;
	}
	if (iters < 1 || iters > MAXIT)
		iters = 30;
	SH = mmap(NULL, sizeof(*SH), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (SH == MAP_FAILED)
		return 1;
	memset(SH, 0, sizeof(*SH));
	pid_t p = fork(); /* this process never starts the driver: the ranks are forked */
	if (p == 0)
		_exit(ceiling());
	int st;
	waitpid(p, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) || SH->ceiling_gbs <= 0) {
		printf("skipped: no GPU for the copy ceiling\n");
		return 77;
	}
	printf("# mori-bench ep on %s; MPS %s\n", SH->desc, getenv("CUDA_MPS_PIPE_DIRECTORY") ? "on" : "off");
	printf("# N processes on ONE GPU (100/N %% of the SMs each) share its memory: not NVLink figures.\n");
	printf("# H %d, top-%d of %d experts, %s (+%d float scales/token), bf16 combine, uniform random "
	       "routing, %d iterations\n", H, TOPK, NEXP, QUANT ? "bf16 input quantised to fp8 e4m3 by dispatch" :
	       "fp8 e4m3 dispatch", H / 128, iters);
	printf("# copy ceiling (same run): cuMemcpyDtoD 1 GiB, one process: %.0f GB/s\n", SH->ceiling_gbs);
	if (NODES > 1) {
		SH->tcp_gbs = tcp_stream();
		printf("# %d nodes (morids %s, root %s): rank r on node r / (ranks / %d); rows per route: intra (experts of "
		       "the token's own node: the intranode part), cross (other nodes only: the proxy part), mixed (all)\n",
		       NODES, dirs, ROOT, NODES);
		printf("# TCP stream (same run): 1 GiB over loopback between two processes, 4 MiB writes: %.2f GB/s\n",
		       SH->tcp_gbs);
	}
	printf("# latency us: slowest rank's p50/p99; GB/s/rank: ROCm/mori's recv tokens x H x elem / p50, mean of "
	       "ranks;\n# aggregate: all ranks' received bytes / slowest rank's time (combine: x2 for bf16), p50 over "
	       "iterations; graph: one replay of dispatch+combine, p50\n# comb: the experts' outputs in the registered combine "
	       "input (read in place); push p50: in a buffer of their own (copied to the home ranks, then summed)\n");
	printf("# mode  ranks tok/rk recv/rk  disp p50      p99  GB/s/rk  comb p50      p99  GB/s/rk  agg disp  agg comb "
	       "%%ceil-d %%ceil-c graph p50  push p50\n");
	int bad = 0;
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", pes);
	for (int m = 0; m < 2; m++) {
		if ((m == 0 && !strcmp(mode, "ll")) || (m == 1 && !strcmp(mode, "normal")))
			continue;
		char b2[64];
		memcpy(b2, buf, sizeof(b2));
		for (char *tok = strtok(b2, " "); tok; tok = strtok(NULL, " ")) {
			int n = atoi(tok);
			if (n < 1 || n > MAXPE || NEXP % n || n % NODES || (NODES > 1 && n < NODES))
				continue;
			static const int routes[] = {ROUTE_INTRA, ROUTE_CROSS, ROUTE_ALL};
			for (int ri = NODES > 1 ? 0 : 2; ri < 3; ri++) { /* one node: uniform routing only, as before */
				ROUTE = routes[ri];
				if (run_procs(n, m, iters, dir)) {
					bad = 1;
					continue;
				}
				report(n, m, iters);
			}
		}
	}
	return bad;
}
