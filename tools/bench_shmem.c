/* mori-bench shmem: MORI-SHMEM's device API on one GPU, with NVSHMEM's figures for the same
 * patterns in the same run.
 *
 * mori rows: N PEs (2, 4, 8) are N heaps of this process, each PE's state in device memory with
 * every other heap mapped (the direct path) and, as libmori decides for PEs on one GPU, GPU
 * ordering scope towards each (mori_shmem_state.peer_scope), each PE its own module instance of the bench
 * kernels (tools/bench_shmem_kernels.cu) and its own stream; kernels of the PEs run concurrently.
 * nvshmem rows (--nvshmem PATH, tools/bench_nvshmem.cu): N processes, one PE each, started here
 * after the mori rows (several on one GPU: under MPS, each given 100/N percent of the SMs).
 *
 *   put bandwidth, block scope, PE 0 -> PE 1, 4 KiB..64 MiB, beside the copy ceiling (one
 *     cuMemcpyDtoDAsync of the same bytes between the same heaps, measured now): NVSHMEM
 *     perftest's shape, one put split over the grid's blocks per rep (latency-bound below 16 MiB)
 *   put bandwidth, many messages in flight: every warp of the grid puts whole messages of the
 *     size at warp scope, 8 and 32 warps per SM (how ib_write_bw or NCCL measure a message size)
 *   put+signal ping-pong, 8 bytes, thread scope: half the round trip, p50/p99/mean, with the
 *     ordering scope libmori gives PEs on one GPU (GPU) and the one towards another GPU (system),
 *     and the hop taken apart; then the same with a p and wait_until (no data)
 *   fetch-add throughput: every PE's 4 x 256 threads on one word at PE 0
 *   barrier_all_block latency for 2, 4, 8 PEs: p50/p99/mean
 *
 * The group API (mori_shmem_init) is not used: this measures the device functions alone. */
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../libclient/gpu_int.h"
#include "shmem_layout.h"

extern const unsigned char mori_kernels_shmembench_image[];
extern const size_t mori_kernels_shmembench_image_len;
int bench_shmem_main(int argc, char **argv);
int nvshmem_run(const char *path, const char *mode, int npes, const char *const *tail, int ntail, int timeout_s,
		void (*line)(const char *, void *), void *arg);

#define MAXPE 8
#define HEAP (160ull << 20)
#define BUF_OFF MORI_SHMEM_RESERVED          /* put destination, 64 MiB */
#define SRC_OFF (BUF_OFF + (64ull << 20))    /* put source, 64 MiB */
#define WORD_OFF (SRC_OFF + (64ull << 20))   /* ping-pong buffer, signal, counter */
#define MANY_OFF HEAP /* b_put_warp's destination then source, many_bytes() each (2-PE rig only) */
enum { B_PUT, B_PUT_WARP, B_PINGPONG, B_FADD, B_BARRIER, B_N };
static const char *const bnames[B_N] = {"b_put", "b_put_warp", "b_pingpong", "b_fadd", "b_barrier"};

static const struct gpu_api *g;
static int (*get_global)(gpu_dptr *, size_t *, gpu_module, const char *);
static int sms; /* the GPU's SMs: b_put_warp's grid */

struct bpe {
	gpu_module mod;
	gpu_function fn[B_N];
	gpu_stream s;
	gpu_event e0, e1;
	gpu_dptr heap, state, peers, scope;
	void *ctrl;
	gpu_dptr ctrl_d;
};
struct brig {
	int n;
	uint64_t heap;
	struct bpe pe[MAXPE];
};

#define CK(x)                                                                                      \
	do {                                                                                       \
		int r_ = (x);                                                                      \
		if (r_) {                                                                          \
			fprintf(stderr, "mori-bench shmem: %s: %s\n", #x, gpu_strerror(r_));       \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}
static double pct(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_d);
	size_t i = (size_t)(p * (double)n);
	return v[i < n ? i : n - 1];
}

/* Every PE's state, ordering at `scope` (enum mori_shmem_scope) towards every PE and in its waits:
 * GPU is what libmori decides for PEs on one GPU, SYS what it decides towards another GPU. */
static void rig_scope(struct brig *r, int scope)
{
	int32_t sc[MAXPE];
	for (int q = 0; q < MAXPE; q++)
		sc[q] = scope;
	for (int p = 0; p < r->n; p++) {
		struct bpe *e = &r->pe[p];
		CK(g->memcpy_htod_async(e->scope, sc, sizeof(sc), NULL));
		struct mori_shmem_state st = {
			.magic = MORI_SHMEM_MAGIC, .my_pe = p, .n_pes = r->n, .node_pes = r->n, .heap_size = r->heap,
			.heap_base = e->heap, .peer_base = (uint64_t *)(uintptr_t)e->peers,
			.ctrl = (struct mori_shmem_ctrl *)(uintptr_t)e->ctrl_d,
			.peer_scope = (int32_t *)(uintptr_t)e->scope, .wait_scope = scope,
		};
		CK(g->memcpy_htod_async(e->state, &st, sizeof(st), NULL));
	}
	CK(g->stream_synchronize(NULL));
}

/* n PEs of heap bytes each, every heap mapped by every PE; the control page gives the abort
 * word (no proxy ring) */
static void rig_open(struct brig *r, int n, uint64_t heap)
{
	memset(r, 0, sizeof(*r));
	r->n = n;
	for (int p = 0; p < n; p++) {
		struct bpe *e = &r->pe[p];
		CK(g->mem_alloc(&e->heap, heap));
		CK(g->memset_d8_async(e->heap, 0, MORI_SHMEM_RESERVED, NULL));
		CK(g->memset_d8_async(e->heap + SRC_OFF, 0x5a, 64ull << 20, NULL));
		CK(g->mem_host_alloc(&e->ctrl, MORI_SHMEM_CTRL_BYTES, GPU_MEMHOSTALLOC_PORTABLE | GPU_MEMHOSTALLOC_DEVICEMAP));
		memset(e->ctrl, 0, MORI_SHMEM_CTRL_BYTES);
		((struct mori_shmem_ctrl *)e->ctrl)->magic = MORI_SHMEM_MAGIC;
		CK(g->mem_host_get_device_pointer(&e->ctrl_d, e->ctrl, 0));
		CK(g->module_load_data(&e->mod, mori_kernels_shmembench_image));
		for (int k = 0; k < B_N; k++)
			CK(g->module_get_function(&e->fn[k], e->mod, bnames[k]));
		CK(g->stream_create(&e->s, GPU_STREAM_NON_BLOCKING));
		CK(g->event_create(&e->e0, GPU_EVENT_DEFAULT));
		CK(g->event_create(&e->e1, GPU_EVENT_DEFAULT));
	}
	uint64_t peers[MAXPE];
	for (int q = 0; q < n; q++)
		peers[q] = r->pe[q].heap;
	for (int p = 0; p < n; p++) {
		struct bpe *e = &r->pe[p];
		CK(g->mem_alloc(&e->peers, sizeof(peers)));
		CK(g->mem_alloc(&e->scope, sizeof(int32_t) * MAXPE));
		CK(g->mem_alloc(&e->state, sizeof(struct mori_shmem_state)));
		CK(g->memcpy_htod_async(e->peers, peers, sizeof(peers), NULL));
		gpu_dptr gp;
		size_t gsz;
		CK(get_global(&gp, &gsz, e->mod, "mori_shmem_state_ptr"));
		CK(g->memcpy_htod_async(gp, &e->state, sizeof(e->state), NULL));
	}
	r->heap = heap;
	rig_scope(r, MORI_SHMEM_SCOPE_GPU);
}

static void rig_close(struct brig *r)
{
	for (int p = 0; p < r->n; p++) {
		struct bpe *e = &r->pe[p];
		g->stream_synchronize(e->s);
		g->event_destroy(e->e0);
		g->event_destroy(e->e1);
		g->stream_destroy(e->s);
		g->module_unload(e->mod);
		g->mem_free(e->heap);
		g->mem_free(e->state);
		g->mem_free(e->peers);
		g->mem_free(e->scope);
		g->mem_free_host(e->ctrl);
	}
}

static void launch(struct bpe *e, int k, unsigned grid, unsigned block, void **params)
{
	CK(g->launch_kernel(e->fn[k], grid, 1, 1, block, 1, 1, 0, e->s, params, NULL));
}

/* ---- the patterns ---- */

#define NSIZES 8 /* 4 KiB .. 64 MiB, x4 */
#define PP_ROWS 7 /* ping-pong rows (pp_rows) */
#define SPAN (64ull << 20) /* puts and copies rotate through this much of source and destination */
#define NDEPTH 2 /* b_put_warp at 8 and 32 warps per SM */
#define LANE (256ull << 10) /* b_put_warp: bytes between neighbouring warps' messages */
#define MANY_TOTAL (1ull << 30) /* b_put_warp: at least this many bytes a kernel */
static const int wps[NDEPTH] = {8, 32};
struct results {
	double put[NSIZES], ceil[NSIZES], nv_put[NSIZES], ceiling; /* ceiling: one 64 MiB copy */
	double warp[NDEPTH][NSIZES], nv_warp[NDEPTH][NSIZES];
	double pp[PP_ROWS][3], nv_pp[3], nv_wpp[3]; /* [row] p50 p99 mean, us (pp_rows) */
	double fadd[3], nv_fadd[3];    /* M ops/s for 2, 4, 8 PEs */
	double bar[3][3], nv_bar[3][3]; /* [npes 2 4 8][p50 p99 mean] */
};

static float elapsed(struct bpe *e)
{
	float ms;
	CK(g->event_synchronize(e->e1));
	CK(g->event_elapsed_time(&ms, e->e0, e->e1));
	return ms;
}

static void put_bw(struct brig *r, struct results *res, int reps)
{
	struct bpe *e = &r->pe[0];
	for (int i = 0; i < NSIZES; i++) {
		uint64_t b = 4096ull << (2 * i);
		unsigned grid = (unsigned)(b / (8 << 10)); /* as tools/bench_nvshmem.cu */
		grid = grid < 1 ? 1 : grid > 528 ? 528 : grid;
		int rr = b >= (16u << 20) ? (reps / 50 > 4 ? reps / 50 : 4) : reps;
		uint64_t dst = e->heap + BUF_OFF, src = e->heap + SRC_OFF, span = SPAN;
		int pe = 1;
		void *params[] = {&dst, &src, &b, &pe, &rr, &span};
		double t[6], c[6];
		for (int it = 0; it < 6; it++) {
			CK(g->event_record(e->e0, e->s));
			launch(e, B_PUT, grid, 512, params);
			CK(g->event_record(e->e1, e->s));
			t[it] = elapsed(e);
			CK(g->event_record(e->e0, e->s));
			for (int k = 0; k < rr; k++)
				CK(g->memcpy_dtod_async(r->pe[1].heap + BUF_OFF + k * b % SPAN, src + k * b % SPAN, b, e->s));
			CK(g->event_record(e->e1, e->s));
			c[it] = elapsed(e);
		}
		res->put[i] = (double)b * rr / (pct(t + 1, 5, 0.5) * 1e-3) / 1e9;
		res->ceil[i] = (double)b * rr / (pct(c + 1, 5, 0.5) * 1e-3) / 1e9;
	}
	res->ceiling = res->ceil[NSIZES - 1];
}

/* b_put_warp's window at the deepest grid plus the largest message (tools/bench_nvshmem.cu alike) */
static uint64_t many_bytes(void)
{
	return (uint64_t)sms * 32 * LANE + SPAN;
}

/* 16 bytes of PE 1's destination at off, all put? */
static int put_landed(struct brig *r, uint64_t off)
{
	uint8_t h[16];
	CK(g->memcpy_dtoh_async(h, r->pe[1].heap + MANY_OFF + off, sizeof(h), r->pe[0].s));
	CK(g->stream_synchronize(r->pe[0].s));
	for (size_t i = 0; i < sizeof(h); i++)
		if (h[i] != 0x5a)
			return 0;
	return 1;
}

/* b_put_warp, blocks of 8 warps: GB/s of all messages over the kernel's time, median of the runs
 * after a warm-up; the first and the last warp's last bytes checked at PE 1 */
static void put_warp(struct brig *r, struct results *res)
{
	struct bpe *e = &r->pe[0];
	uint64_t dst = e->heap + MANY_OFF, src = dst + many_bytes(), lane = LANE;
	CK(g->memset_d8_async(src, 0x5a, many_bytes(), e->s));
	for (int d = 0; d < NDEPTH; d++) {
		unsigned grid = (unsigned)(sms * wps[d] / 8);
		uint64_t nw = (uint64_t)grid * 8, win = nw * LANE;
		for (int i = 0; i < NSIZES; i++) {
			uint64_t b = 4096ull << (2 * i);
			int msgs = (int)((MANY_TOTAL + nw * b - 1) / (nw * b)), pe = 1;
			int runs = b >= (16u << 20) ? 4 : 6; /* 16 MiB: 8.6 GiB+ a kernel */
			void *params[] = {&dst, &src, &b, &pe, &msgs, &lane};
			double t[6];
			CK(g->memset_d8_async(r->pe[1].heap + MANY_OFF, 0, many_bytes(), e->s));
			for (int it = 0; it < runs; it++) {
				CK(g->event_record(e->e0, e->s));
				launch(e, B_PUT_WARP, grid, 256, params);
				CK(g->event_record(e->e1, e->s));
				t[it] = elapsed(e);
			}
			res->warp[d][i] = (double)b * msgs * nw / (pct(t + 1, (size_t)runs - 1, 0.5) * 1e-3) / 1e9;
			uint64_t last = ((nw - 1) * LANE + (uint64_t)(msgs - 1) * b) % win + b - 16;
			if (!put_landed(r, 0) || !put_landed(r, last))
				fprintf(stderr, "mori-bench shmem: b_put_warp of %llu bytes: PE 1 lacks bytes it should have\n",
					(unsigned long long)b);
		}
	}
}

/* per-iteration cycles -> us with the loop's own cycles/ns ratio; [p50 p99 mean] of v * scale */
static void lat_stats(const long long *cyc, int iters, double scale, double out[3])
{
	double *us = malloc(sizeof(double) * (size_t)iters);
	double per = cyc[iters] > 0 ? (double)cyc[iters + 1] / (double)cyc[iters] / 1e3 : 0;
	int n = 0;
	for (int i = iters / 10; i < iters; i++)
		us[n++] = (double)cyc[i] * per * scale;
	out[2] = (double)cyc[iters + 1] / 1e3 / iters * scale;
	out[1] = pct(us, (size_t)n, 0.99);
	out[0] = pct(us, (size_t)n, 0.5);
	free(us);
}

/* The ping-pong's rows: b_pingpong's mode and the rig's scope */
static const struct {
	int mode, scope;
	const char *what;
} pp_rows[PP_ROWS] = {
	{0, MORI_SHMEM_SCOPE_GPU, "mori put+signal (the API, GPU scope: this GPU)"},
	{0, MORI_SHMEM_SCOPE_SYS, "mori put+signal, system scope (another GPU)"},
	{1, MORI_SHMEM_SCOPE_GPU, "  taken apart: release sys, acquire gpu"},
	{2, MORI_SHMEM_SCOPE_GPU, "  taken apart: release gpu, acquire gpu"},
	{3, MORI_SHMEM_SCOPE_GPU, "  taken apart: release sys, no acquire"},
	{4, MORI_SHMEM_SCOPE_GPU, "  taken apart: release gpu, no acquire"},
	{5, MORI_SHMEM_SCOPE_GPU, "mori p + wait_until (the API, GPU scope)"},
};

static void pingpong(struct brig *r, struct results *res, int iters)
{
	gpu_dptr cyc[2];
	long long *h = malloc(sizeof(long long) * (size_t)(iters + 2));
	for (int p = 0; p < 2; p++) {
		struct bpe *e = &r->pe[p];
		CK(g->mem_alloc(&cyc[p], sizeof(long long) * (size_t)(iters + 2)));
		CK(g->memset_d8_async(e->heap + WORD_OFF, 0, 4096, NULL));
	}
	CK(g->stream_synchronize(NULL));
	for (int row = 0; row < PP_ROWS; row++) {
		int mode = pp_rows[row].mode;
		uint64_t base = (uint64_t)row * (uint64_t)iters;
		rig_scope(r, pp_rows[row].scope);
		for (int p = 1; p >= 0; p--) { /* the responder first: it waits */
			struct bpe *e = &r->pe[p];
			uint64_t buf = e->heap + WORD_OFF, sig = e->heap + WORD_OFF + 1024;
			void *params[] = {&buf, &sig, &iters, &cyc[p], &mode, &base};
			launch(e, B_PINGPONG, 1, 32, params);
		}
		CK(g->stream_synchronize(r->pe[0].s));
		CK(g->stream_synchronize(r->pe[1].s));
		CK(g->memcpy_dtoh_async(h, cyc[0], sizeof(long long) * (size_t)(iters + 2), NULL));
		CK(g->stream_synchronize(NULL));
		lat_stats(h, iters, 0.5, res->pp[row]);
	}
	rig_scope(r, MORI_SHMEM_SCOPE_GPU);
	g->mem_free(cyc[0]);
	g->mem_free(cyc[1]);
	free(h);
}

/* all PEs' ops over the span from the first kernel's start to the last one's end (globaltimer) */
static double fadd(struct brig *r, int iters)
{
	uint64_t span_h[2] = {~0ull, 0};
	gpu_dptr span;
	CK(g->mem_alloc(&span, sizeof(span_h)));
	CK(g->memcpy_htod_async(span, span_h, sizeof(span_h), NULL));
	CK(g->memset_d8_async(r->pe[0].heap + WORD_OFF + 2048, 0, 64, NULL));
	CK(g->stream_synchronize(NULL));
	for (int p = 0; p < r->n; p++) {
		uint64_t ctr = r->pe[p].heap + WORD_OFF + 2048;
		int pe = 0;
		void *params[] = {&ctr, &pe, &iters, &span};
		launch(&r->pe[p], B_FADD, 4, 256, params);
	}
	for (int p = 0; p < r->n; p++)
		CK(g->stream_synchronize(r->pe[p].s));
	CK(g->memcpy_dtoh_async(span_h, span, sizeof(span_h), NULL));
	CK(g->stream_synchronize(NULL));
	g->mem_free(span);
	double dt = (double)(span_h[1] - span_h[0]) * 1e-9;
	uint64_t total;
	CK(g->memcpy_dtoh_async(&total, r->pe[0].heap + WORD_OFF + 2048, 8, NULL));
	CK(g->stream_synchronize(NULL));
	uint64_t want = (uint64_t)r->n * 4 * 256 * (uint64_t)iters;
	if (total != want)
		fprintf(stderr, "mori-bench shmem: fetch-add total %llu, expected %llu\n", (unsigned long long)total,
			(unsigned long long)want);
	return (double)want / dt / 1e6;
}

static void barrier(struct brig *r, int iters, double out[3])
{
	gpu_dptr cyc[MAXPE];
	for (int p = 0; p < r->n; p++)
		CK(g->mem_alloc(&cyc[p], sizeof(long long) * (size_t)(iters + 2)));
	for (int p = 0; p < r->n; p++) {
		void *params[] = {&iters, &cyc[p]};
		launch(&r->pe[p], B_BARRIER, 1, 128, params);
	}
	for (int p = 0; p < r->n; p++)
		CK(g->stream_synchronize(r->pe[p].s));
	long long *h = malloc(sizeof(long long) * (size_t)(iters + 2));
	CK(g->memcpy_dtoh_async(h, cyc[0], sizeof(long long) * (size_t)(iters + 2), NULL));
	CK(g->stream_synchronize(NULL));
	lat_stats(h, iters, 1.0, out);
	free(h);
	for (int p = 0; p < r->n; p++)
		g->mem_free(cyc[p]);
}

/* ---- NVSHMEM: npes processes of tools/bench_nvshmem.cu, their lines parsed ---- */

static void nv_line(const char *l, struct results *res, double *fadd_ops, uint64_t span[2])
{
	unsigned long long b, ops, t0, t1;
	double x, y, z;
	int rank, np;
	if (sscanf(l, "nvshmem put_bw %llu %lf", &b, &x) == 2) {
		for (int i = 0; i < NSIZES; i++)
			if (b == 4096ull << (2 * i))
				res->nv_put[i] = x;
	} else if (sscanf(l, "nvshmem put_warp %d %llu %lf", &np, &b, &x) == 3) {
		for (int d = 0; d < NDEPTH; d++)
			for (int i = 0; i < NSIZES; i++)
				if (np == wps[d] && b == 4096ull << (2 * i))
					res->nv_warp[d][i] = x;
	} else if (sscanf(l, "nvshmem pingpong %lf %lf %lf", &x, &y, &z) == 3) {
		res->nv_pp[0] = x, res->nv_pp[1] = y, res->nv_pp[2] = z;
	} else if (sscanf(l, "nvshmem waitpp %lf %lf %lf", &x, &y, &z) == 3) {
		res->nv_wpp[0] = x, res->nv_wpp[1] = y, res->nv_wpp[2] = z;
	} else if (sscanf(l, "nvshmem fadd %d %d %llu %llu %llu", &rank, &np, &ops, &t0, &t1) == 5) {
		*fadd_ops += (double)ops;
		if (t0 < span[0])
			span[0] = t0;
		if (t1 > span[1])
			span[1] = t1;
	} else if (sscanf(l, "nvshmem barrier %d %lf %lf %lf", &np, &x, &y, &z) == 4) {
		int k = np == 2 ? 0 : np == 4 ? 1 : 2;
		res->nv_bar[k][0] = x, res->nv_bar[k][1] = y, res->nv_bar[k][2] = z;
	}
}

/* The shmem rows' parse state */
struct nv_shmem_ctx {
	struct results *res;
	double ops;
	uint64_t span[2];
};
static void nv_shmem_line(const char *l, void *arg)
{
	struct nv_shmem_ctx *x = arg;
	nv_line(l, x->res, &x->ops, x->span);
}

/* npes processes of tools/bench_nvshmem.cu: `path [mode] RANK NPES UID_FILE tail...` each (mode
 * NULL: the shmem rows; "coll": mori-bench coll's), under MPS with 100 / npes percent of the SMs
 * each, NVLink multicast off, each ended after timeout_s; every line of their stdout goes to
 * line(l, arg). 0, or -1 when one failed (its stderr went to ours). */
int nvshmem_run(const char *path, const char *mode, int npes, const char *const *tail, int ntail, int timeout_s,
		void (*line)(const char *, void *), void *arg)
{
	char dir[] = "/tmp/mori-nvshmem.XXXXXX", uid[64], arg_r[16], arg_n[16], pctv[16], tmo[16];
	if (npes > MAXPE || ntail > 4 || !mkdtemp(dir))
		return -1;
	snprintf(uid, sizeof(uid), "%s/uid", dir);
	snprintf(arg_n, sizeof(arg_n), "%d", npes);
	snprintf(pctv, sizeof(pctv), "%d", 100 / npes);
	snprintf(tmo, sizeof(tmo), "%d", timeout_s);
	int fds[MAXPE];
	pid_t pids[MAXPE];
	for (int p = 0; p < npes; p++) {
		int pp[2];
		if (pipe(pp))
			return -1;
		snprintf(arg_r, sizeof(arg_r), "%d", p);
		pids[p] = fork();
		if (pids[p] == 0) {
			dup2(pp[1], 1);
			close(pp[0]);
			close(pp[1]);
			setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pctv, 1);
			setenv("NVSHMEM_DISABLE_NVLS", "1", 1); /* never NVLink multicast */
			const char *av[16];
			int k = 0;
			av[k++] = "timeout", av[k++] = "-k", av[k++] = "5", av[k++] = tmo, av[k++] = path;
			if (mode)
				av[k++] = mode;
			av[k++] = arg_r, av[k++] = arg_n, av[k++] = uid;
			for (int i = 0; i < ntail; i++)
				av[k++] = tail[i];
			av[k] = NULL;
			execvp("timeout", (char *const *)av);
			_exit(127);
		}
		close(pp[1]);
		fds[p] = pp[0];
	}
	int bad = 0;
	for (int p = 0; p < npes; p++) {
		FILE *f = fdopen(fds[p], "r");
		char l[256];
		while (f && fgets(l, sizeof(l), f))
			line(l, arg);
		if (f)
			fclose(f);
		int st;
		waitpid(pids[p], &st, 0);
		bad |= !WIFEXITED(st) || WEXITSTATUS(st);
	}
	unlink(uid);
	rmdir(dir);
	return bad ? -1 : 0;
}

static int run_nvshmem(const char *path, int npes, int reps, struct results *res)
{
	char arg_reps[16], arg_sms[16];
	snprintf(arg_reps, sizeof(arg_reps), "%d", reps);
	snprintf(arg_sms, sizeof(arg_sms), "%d", sms); /* under MPS it may see fewer */
	const char *tail[] = {arg_reps, arg_sms};
	struct nv_shmem_ctx x = {res, 0, {~0ull, 0}};
	int rc = nvshmem_run(path, NULL, npes, tail, 2, 90, nv_shmem_line, &x);
	if (x.span[1] > x.span[0])
		res->nv_fadd[npes == 2 ? 0 : npes == 4 ? 1 : 2] = x.ops / ((double)(x.span[1] - x.span[0]) * 1e-9) / 1e6;
	if (rc)
		fprintf(stderr, "mori-bench shmem: NVSHMEM with %d PEs failed (its stderr is above)\n", npes);
	return rc;
}

/* ---- the report ---- */

static void col(double v, const char *fmt)
{
	if (v > 0)
		printf(fmt, v);
	else
		printf("%*s", (int)strtol(fmt + 1, NULL, 10), "-");
}

static void report(const struct results *r, int nv)
{
	if (r->ceiling <= 0) /* --lat: no put rows */
		goto lat;
	printf("# put bandwidth, block scope, PE 0 -> PE 1 (GB/s of payload). cuMemcpy: cuMemcpyDtoDAsync of the same "
	       "bytes between the same heaps (one call per put: launch-bound below 1 MiB); ceiling: the 64 MiB copy, "
	       "%.1f GB/s. Each rep moves the next bytes of a 64 MiB window (no L2 reuse)\n",
	       r->ceiling);
	printf("#     size     mori  cuMemcpy  mori/ceiling  nvshmem  nvshmem/ceiling\n");
	for (int i = 0; i < NSIZES; i++) {
		uint64_t b = 4096ull << (2 * i);
		printf("  %7llu%s %8.1f %9.1f %12.0f%% ", (unsigned long long)(b >= (1 << 20) ? b >> 20 : b >> 10),
		       b >= (1 << 20) ? "M" : "K", r->put[i], r->ceil[i], 100 * r->put[i] / r->ceiling);
		col(r->nv_put[i], "%8.1f");
		if (r->nv_put[i] > 0)
			printf(" %15.0f%%", 100 * r->nv_put[i] / r->ceiling);
		printf("\n");
	}
	printf("# put bandwidth, many messages in flight (warp scope, %d or %d warps): every warp puts whole messages of "
	       "the size (mori_shmem_putmem_nbi_warp; nvshmemx_putmem_nbi_warp), 256 KiB apart, >= 1 GiB a kernel, "
	       "then quiet. GB/s of payload over the kernel's time; ceiling as above\n",
	       sms * wps[0], sms * wps[NDEPTH - 1]);
	printf("#     size  warps/SM     mori  mori/ceiling  nvshmem  nvshmem/ceiling\n");
	for (int d = 0; d < NDEPTH; d++)
		for (int i = 0; i < NSIZES; i++) {
			uint64_t b = 4096ull << (2 * i);
			printf("  %7llu%s %9d %8.1f %12.0f%% ", (unsigned long long)(b >= (1 << 20) ? b >> 20 : b >> 10),
			       b >= (1 << 20) ? "M" : "K", wps[d], r->warp[d][i], 100 * r->warp[d][i] / r->ceiling);
			col(r->nv_warp[d][i], "%8.1f");
			if (r->nv_warp[d][i] > 0)
				printf(" %15.0f%%", 100 * r->nv_warp[d][i] / r->ceiling);
			printf("\n");
		}
lat:
	printf("# put+signal ping-pong, 8 bytes, thread scope, PE 0 <-> PE 1: half the round trip (us)\n");
	printf("#                                                       p50      p99     mean\n");
	for (int m = 0; m < PP_ROWS; m++) {
		printf("  %-48s %8.2f %8.2f %8.2f\n", pp_rows[m].what, r->pp[m][0], r->pp[m][1], r->pp[m][2]);
		if (nv && m == PP_ROWS - 2)
			printf("  %-48s %8.2f %8.2f %8.2f\n", "nvshmem put+signal", r->nv_pp[0], r->nv_pp[1], r->nv_pp[2]);
	}
	if (nv)
		printf("  %-48s %8.2f %8.2f %8.2f\n", "nvshmem p + wait_until", r->nv_wpp[0], r->nv_wpp[1], r->nv_wpp[2]);
	printf("# fetch-add throughput, every PE's 4 x 256 threads on one 64-bit word at PE 0 (M ops/s: all PEs' ops "
	       "over first start to last end, globaltimer)\n");
	printf("#  PEs     mori  nvshmem\n");
	for (int k = 0; k < 3; k++) {
		printf("  %4d %8.1f ", 2 << k, r->fadd[k]);
		col(r->nv_fadd[k], "%8.1f");
		printf("\n");
	}
	printf("# barrier_all_block latency (us)\n");
	printf("#  PEs  mori p50      p99     mean   nvshmem p50      p99     mean\n");
	for (int k = 0; k < 3; k++) {
		printf("  %4d %9.2f %8.2f %8.2f   ", 2 << k, r->bar[k][0], r->bar[k][1], r->bar[k][2]);
		col(r->nv_bar[k][0], "%11.2f");
		col(r->nv_bar[k][1], "%9.2f");
		col(r->nv_bar[k][2], "%9.2f");
		printf("\n");
	}
}

int bench_shmem_proxy_main(int argc, char **argv); /* tools/bench_shmem_proxy.c */

int bench_shmem_main(int argc, char **argv)
{
	const char *nvshmem = NULL;
	int reps = 200, lat = 0;
	for (int i = 2; i < argc; i++)
		if (!strcmp(argv[i], "--proxy"))
			return bench_shmem_proxy_main(argc, argv); /* the proxy path, no GPU */
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--nvshmem") && i + 1 < argc)
			nvshmem = argv[++i];
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--lat"))
			lat = 1; /* the latency rows only: ping-pong, fetch-add, barrier */
		else {
			fprintf(stderr, "usage: mori-bench shmem [--nvshmem PATH/bench_nvshmem] [--reps 200] [--lat]\n"
					"       mori-bench shmem --proxy [--help]   (the proxy path, no GPU)\n");
			return 2;
		}
	}
	static mori_client C;
	struct gpu_ctx *x;
	struct gpu_dev *d;
	if (!(g = gpu_api()) || gpu_ctx_get(&C, &x) || gpu_dev_get(&C, x, 0, &d) || gpu_push(g, d)) {
		printf("skipped: no GPU (%s)\n", g ? mori_client_last_error(&C) : gpu_unavailable_reason());
		return 77;
	}
	sms = d->sm_count;
	void *lib = dlopen(g->library, RTLD_NOW | RTLD_NOLOAD);
	*(void **)&get_global = lib ? dlsym(lib, "cuModuleGetGlobal_v2") : NULL;
	if (!mori_kernels_shmembench_image_len || !get_global) {
		printf("skipped: no bench kernels (built without nvcc) or no cuModuleGetGlobal\n");
		return 77;
	}
	char desc[256];
	gpu_describe(desc, sizeof(desc));
	printf("# mori-bench shmem on %s\n", desc);
	printf("# mori: N PEs = N heaps and N concurrent kernels of this process, every heap mapped (direct path)\n");
	struct results res;
	memset(&res, 0, sizeof(res));
	struct brig r;
	for (int k = 0; k < 3; k++) {
		int n = 2 << k;
		rig_open(&r, n, n == 2 ? HEAP + 2 * many_bytes() : HEAP);
		if (n == 2 && !lat) {
			put_bw(&r, &res, reps);
			put_warp(&r, &res);
		}
		if (n == 2)
			pingpong(&r, &res, 20000);
		fadd(&r, 100); /* warm-up */
		res.fadd[k] = fadd(&r, 1000);
		barrier(&r, 500, res.bar[k]);
		barrier(&r, 5000, res.bar[k]);
		rig_close(&r);
	}
	gpu_pop(g);
	if (nvshmem) {
		printf("# nvshmem: %s, one process per PE under MPS (100/N %% of the SMs each)\n", nvshmem);
		fflush(stdout);
		for (int k = 0; k < 3; k++)
			run_nvshmem(nvshmem, 2 << k, lat ? 0 : reps, &res); /* reps 0: no put rows */
	}
	report(&res, nvshmem != NULL);
	gpu_ctx_free(&C);
	return 0;
}
