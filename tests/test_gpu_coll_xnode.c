/* MORI-CCL on the GPU across nodes: two morids on loopback (A the root,
 * B) play two nodes; N processes on the one GPU are the ranks of one group with VRAM heaps, the
 * first ceil(N/2) on A and the rest on B (4 + 4, 1 + 1, 2 + 1: $MORI_COLL_XNODE_SIZES, default
 * "8 2 3"). A rank maps only its own node's heaps, so its communicator takes the cross-node path
 * (kernels/coll_xnode.cu): direct stores to the ranks of its node, morid's proxy to the others.
 * Checked against the reference each rank computes itself (tests/coll_check.h, as test_gpu_coll):
 * all-reduce (sum, max, min; f32, f16, bf16), reduce-scatter, all-gather, all-to-all and broadcast
 * (uint8, f16, int32), counts 1, 7, 1023, 4096, 1 000 003, in place and out, with a 4 MiB scratch
 * (so the large counts run in rounds) and again a few with the smallest scratch (hundreds of
 * rounds); the refusals (all-to-all-v, the fused-kernel device state); a CUDA graph of one
 * all-reduce replayed with new inputs; a rank that never calls (MORI_ETIMEDOUT naming it, within
 * the deadline), a rank killed before a collective (MORI_EPEERDEAD, or the deadline) and an
 * all-reduce whose count differs on one rank (MORI_EINVAL naming it everywhere, then a good one).
 * The device-buffer helpers are test_gpu_coll's (kept apart so that test stays as it ran).
 * Without a GPU: "skipped: no GPU" (77). MPS as in the other GPU tests. */
#include <check.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>

#include "gpu.h"
#include "gpu_harness.h"
#include "node_harness.h"
#include "pe_harness.h"
#include "mori_coll.h"
/* (its whole-matrix helper runs all-to-all-v, which has no cross-node form: this test has its own) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "coll_check.h"
#pragma GCC diagnostic pop

#define HEAP (128u << 20)
#define SCRATCH (4u << 20)
#define SCRATCH_MIN (68u << 10) /* libmori's least for a GPU communicator: hundreds of rounds */
#define MAXPE 8

static struct test_node NA, NB;
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
	node_pair_init(&NA, &NB, "gcollx", 7300, 0);
	ck_assert_int_eq(node_pair_start(&NA, &NB, NULL), 0);
}

static void teardown(void)
{
	node_pair_stop(&NA, &NB); /* (a morid that did not stop cleanly keeps its files, named) */
	pe_shared_unmap(SH);
}

static int on_a(int pe, int n) { return pe < (n + 1) / 2; }

/* ---- a rank: driver context, group over both morids, communicator, a stream ---- */
struct gpe {
	const struct gpu_api *g;
	mori_client *c;
	mori_group *grp;
	mori_comm *k;
	gpu_stream s;
};

static int gpe_open(struct gpe *p, int me, int n, const char *name, size_t scratch, int64_t timeout_us)
{
	gpu_mps_share(n);
	memset(p, 0, sizeof(*p));
	p->g = gpu_ctx_current(0);
	PCHECK(me, p->g, "no GPU context: %s", gpu_unavailable_reason());
	POK(me, mori_client_open(on_a(me, n) ? NA.dir : NB.dir, "coll-xnode", &p->c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_kind = MORI_MEM_VRAM;
	o.heap_size = HEAP;
	o.gpu_device = 0;
	o.root = NA.addr;
	o.timeout_us = 60000000;
	POK(me, mori_shmem_init(p->c, name, me, n, &o, &p->grp));
	/* the other node's heaps are not mapped here: the path under test */
	for (int q = 0; q < n; q++)
		PCHECK(me, !mori_shmem_ptr_p2p(p->grp, mori_shmem_heap_base(p->grp), q) == (on_a(q, n) != on_a(me, n)),
		       "PE %d's heap is %smapped here", q, on_a(q, n) != on_a(me, n) ? "" : "not ");
	mori_comm_opts co;
	mori_comm_opts_init(&co, sizeof(co));
	co.scratch_bytes = scratch;
	co.timeout_us = timeout_us;
	POK(me, mori_comm_create(p->grp, &co, &p->k));
	PCHECK(me, n < 2 || mori_comm_device_state(p->k) == NULL,
	       "a communicator across nodes gave a device state for fused kernels (they reach peers by mapping only)");
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

/* device buffers from cuMemAlloc (outside the heap: the path stages them) */
static void *d_alloc(struct cc_io *io, size_t b)
{
	gpu_dptr p = 0;
	return ((const struct gpu_api *)io->priv)->mem_alloc(&p, b) ? NULL : (void *)(uintptr_t)p;
}
static void d_release(struct cc_io *io, void *p)
{
	((const struct gpu_api *)io->priv)->mem_free((gpu_dptr)(uintptr_t)p);
}
static int d_put(struct cc_io *io, void *d, const void *h, size_t b)
{
	const struct gpu_api *g = io->priv;
	return g->memcpy_htod_async((gpu_dptr)(uintptr_t)d, h, b, io->stream) ? MORI_EIO : 0;
}
static int d_get(struct cc_io *io, void *h, const void *d, size_t b)
{
	const struct gpu_api *g = io->priv;
	if (g->memcpy_dtoh_async(h, (gpu_dptr)(uintptr_t)d, b, io->stream))
		return MORI_EIO;
	return g->stream_synchronize(io->stream) ? MORI_EIO : 0;
}
static int d_sync(struct cc_io *io)
{
	return ((const struct gpu_api *)io->priv)->stream_synchronize(io->stream) ? MORI_EIO : 0;
}

static const size_t counts[] = {1, 7, 1023, 4096, 1000003};
static const mori_dtype fdt[] = {MORI_FLOAT32, MORI_FLOAT16, MORI_BFLOAT16};
static const mori_dtype mdt[] = {MORI_UINT8, MORI_FLOAT16, MORI_INT32};

static int all_cases(int pe, int n, mori_comm *k, struct cc_io *io)
{
	char what[200];
	uint32_t seed = 1;
	for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		size_t cnt = counts[ci];
		for (int ip = 0; ip < 2; ip++) {
			for (int d = 0; d < 3; d++)
				for (int op = 0; op < 3; op++) {
					mori_redop o = op == 0 ? MORI_SUM : op == 1 ? MORI_MAX : MORI_MIN;
					if (cc_case(pe, n, k, io, CC_AR, fdt[d], o, cnt, ip, seed++, what, sizeof(what)))
						return 1;
					SH->cases[pe]++;
					if (cnt > 5000 && op) /* reduce-scatter: every op at small counts, sum at the large */
						continue;
					if (cc_case(pe, n, k, io, CC_RS, fdt[d], o, cnt, ip, seed++, what, sizeof(what)))
						return 1;
					SH->cases[pe]++;
				}
			for (int d = 0; d < 3; d++)
				for (int coll = CC_AG; coll < CC_NCOLL; coll++) {
					if (coll == CC_RS || coll == CC_A2AV)
						continue;
					if (cc_case(pe, n, k, io, coll, mdt[d], MORI_SUM, cnt, ip, seed++, what, sizeof(what)))
						return 1;
					SH->cases[pe]++;
				}
		}
	}
	return 0;
}

static int pe_all(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcollx-all", SCRATCH, 20000000))
		return 1;
	struct cc_io io = {d_alloc, d_release, d_put, d_get, d_sync, P.s, (void *)P.g};
	if (all_cases(pe, n, P.k, &io))
		return 1;
	/* refused before anything runs: all-to-all-v has no cross-node form */
	size_t cnt[MAXPE], dis[MAXPE];
	for (int r = 0; r < n; r++) {
		cnt[r] = 1;
		dis[r] = (size_t)r;
	}
	void *x = io.alloc(&io, 64), *y = io.alloc(&io, 64);
	PCHECK(pe, x && y, "no buffer");
	int rc = mori_alltoallv(P.k, x, cnt, dis, y, cnt, dis, MORI_FLOAT32, P.s);
	PCHECK(pe, n < 2 || (rc == MORI_ENOTSUP && strstr(mori_client_last_error(P.c), "across nodes")),
	       "alltoallv across nodes: %s (%s)", mori_strerror(rc), mori_client_last_error(P.c));
	io.release(&io, x);
	io.release(&io, y);
	PCHECK(pe, mori_comm_status(P.k, NULL) == 0, "the refusal failed the communicator");
	gpe_close(&P);
	return 0;
}

/* the smallest scratch: slots of a few hundred bytes at 8 ranks, so each case runs many rounds */
static int pe_rounds(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcollx-rounds", SCRATCH_MIN, 20000000))
		return 1;
	struct cc_io io = {d_alloc, d_release, d_put, d_get, d_sync, P.s, (void *)P.g};
	char what[200];
	static const size_t rc_counts[] = {4095, 40001};
	for (int ci = 0; ci < 2; ci++)
		for (int ip = 0; ip < 2; ip++) {
			size_t c = rc_counts[ci];
			if (cc_case(pe, n, P.k, &io, CC_AR, MORI_FLOAT32, MORI_SUM, c, ip, 100 + ci, what, sizeof(what)) ||
			    cc_case(pe, n, P.k, &io, CC_AR, MORI_BFLOAT16, MORI_MIN, c, ip, 110 + ci, what, sizeof(what)) ||
			    cc_case(pe, n, P.k, &io, CC_RS, MORI_FLOAT16, MORI_MAX, c, ip, 120 + ci, what, sizeof(what)) ||
			    cc_case(pe, n, P.k, &io, CC_AG, MORI_UINT8, MORI_SUM, c, ip, 130 + ci, what, sizeof(what)) ||
			    cc_case(pe, n, P.k, &io, CC_A2A, MORI_INT32, MORI_SUM, c, ip, 140 + ci, what, sizeof(what)) ||
			    cc_case(pe, n, P.k, &io, CC_BC, MORI_FLOAT16, MORI_SUM, c, ip, 150 + ci, what, sizeof(what)))
				return 1;
			SH->cases[pe] += 6;
		}
	gpe_close(&P);
	return 0;
}

/* ---- a CUDA graph of one all-reduce across nodes, replayed with new inputs ---- */
typedef int (*fn_begin)(void *, int);
typedef int (*fn_end)(void *, void **);
typedef int (*fn_inst)(void **, void *, unsigned long long);
typedef int (*fn_launch)(void *, void *);
#define GRAPH_N 1031
#define REPLAYS 50

static int pe_graph(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcollx-graph", SCRATCH, 20000000))
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
	void *graph = NULL, *exec = NULL;
	GOK(pe, begin(P.s, 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */));
	int rc = mori_allreduce(P.k, (void *)(uintptr_t)din, (void *)(uintptr_t)dout, GRAPH_N, MORI_FLOAT32, MORI_MAX, P.s);
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
			float e = cc_valf(0, (uint64_t)i, it + 7);
			for (int r = 1; r < n; r++)
				e = cc_op(MORI_MAX, e, cc_valf((uint32_t)r, (uint64_t)i, it + 7));
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

/* ---- faults ---- */
#define DEADLINE_US 2000000

static int pe_missing(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcollx-miss", SCRATCH, DEADLINE_US))
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
		PCHECK(pe, SH->waited[pe] < DEADLINE_US * 1e-6 + 1.5, "the kernel returned after %.2f s (deadline %.1f s)",
		       SH->waited[pe], DEADLINE_US * 1e-6);
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
	if (gpe_open(&P, pe, n, "gcollx-kill", SCRATCH, DEADLINE_US))
		return 1;
	gpu_dptr b;
	GOK(pe, P.g->mem_alloc(&b, 4096));
	POK(pe, mori_shmem_barrier_all(P.grp));
	if (pe == n - 1) {
		usleep(300000);
		kill(getpid(), SIGKILL);
	}
	double t0 = mori_now_us();
	POK(pe, mori_allreduce(P.k, (void *)(uintptr_t)b, (void *)(uintptr_t)b, 1024, MORI_FLOAT32, MORI_SUM, P.s));
	GOK(pe, P.g->stream_synchronize(P.s));
	SH->waited[pe] = (mori_now_us() - t0) * 1e-6;
	mori_status st;
	int rc = mori_comm_status(P.k, &st), who = st.pe;
	/* morid's abort (the PE's session closed) normally comes first; the deadline is the bound */
	PCHECK(pe, (rc == MORI_EPEERDEAD || rc == MORI_ETIMEDOUT) && who == n - 1, "status %s pe %d (%s)",
	       mori_strerror(rc), who, mori_client_last_error(P.c));
	PCHECK(pe, SH->waited[pe] < DEADLINE_US * 1e-6 + 1.5, "the kernel returned after %.2f s (deadline %.1f s)",
	       SH->waited[pe], DEADLINE_US * 1e-6);
	SH->cases[pe] = rc;
	gpe_close(&P);
	return 0;
}

/* An all-reduce whose count differs on the last rank (on B): MORI_EINVAL naming it on every
 * rank (the signature reached A's ranks through the proxy), recvbuf untouched; then a
 * well-formed one on the same communicator, each element against the sum in rank order. */
#define MM_N 1024
static int pe_mismatch(int pe, int n, void *arg)
{
	struct gpe P;
	if (gpe_open(&P, pe, n, "gcollx-mm", SCRATCH, 20000000))
		return 1;
	gpu_dptr din, dout;
	GOK(pe, P.g->mem_alloc(&din, MM_N * 4));
	GOK(pe, P.g->mem_alloc(&dout, MM_N * 4));
	float in[MM_N], out[MM_N];
	for (int i = 0; i < MM_N; i++)
		out[i] = -7.0f;
	GOK(pe, P.g->memcpy_htod_async(dout, out, sizeof(out), P.s));
	POK(pe, mori_allreduce(P.k, (void *)(uintptr_t)din, (void *)(uintptr_t)dout, pe == n - 1 ? MM_N - 24 : MM_N,
			       MORI_FLOAT32, MORI_SUM, P.s));
	GOK(pe, P.g->memcpy_dtoh_async(out, dout, sizeof(out), P.s));
	GOK(pe, P.g->stream_synchronize(P.s));
	mori_status st;
	int rc = mori_comm_status(P.k, &st);
	const char *m = mori_client_last_error(P.c);
	char want[32];
	snprintf(want, sizeof(want), "rank %d calls", n - 1);
	PCHECK(pe, rc == MORI_EINVAL && st.pe == n - 1 && strstr(m, want), "status %s pe %d (%s)", mori_strerror(rc),
	       st.pe, m);
	for (int i = 0; i < MM_N; i++)
		PCHECK(pe, out[i] == -7.0f, "recvbuf[%d] = %g after a refused call", i, out[i]);
	for (int i = 0; i < MM_N; i++)
		in[i] = cc_valf((uint32_t)pe, (uint64_t)i, 50);
	GOK(pe, P.g->memcpy_htod_async(din, in, sizeof(in), P.s));
	POK(pe, mori_allreduce(P.k, (void *)(uintptr_t)din, (void *)(uintptr_t)dout, MM_N, MORI_FLOAT32, MORI_SUM, P.s));
	GOK(pe, P.g->memcpy_dtoh_async(out, dout, sizeof(out), P.s));
	GOK(pe, P.g->stream_synchronize(P.s));
	for (int i = 0; i < MM_N; i++) {
		float e = 0;
		for (int r = 0; r < n; r++)
			e = r ? e + cc_valf((uint32_t)r, (uint64_t)i, 50) : cc_valf(0, (uint64_t)i, 50);
		PCHECK(pe, out[i] == e, "the all-reduce after it: element %d %g, want %g", i, out[i], e);
	}
	PCHECK(pe, mori_comm_status(P.k, NULL) == 0, "status after the well-formed call");
	P.g->mem_free(din);
	P.g->mem_free(dout);
	gpe_close(&P);
	return 0;
}

static int sizes[8] = {8, 2, 3}, nsizes = 3;

static const char *split(int n)
{
	static char s[32];
	snprintf(s, sizeof(s), "%d + %d", (n + 1) / 2, n / 2);
	return s;
}

START_TEST(every_collective)
{
	int n = sizes[_i];
	double dt = pe_run_all(n, pe_all, NULL, 280, 0);
	printf("coll gpu xnode: %d ranks (%s over 2 morids, %s), %d cases each against the reference: %.1f s\n", n,
	       split(n), mps_note, SH->cases[0], dt);
}
END_TEST

START_TEST(many_rounds)
{
	double dt = pe_run_all(8, pe_rounds, NULL, 200, 0);
	printf("coll gpu xnode: 8 ranks (4 + 4), scratch %u bytes (slots of a few KiB: many rounds), %d cases: %.1f s\n",
	       SCRATCH_MIN, SH->cases[0], dt);
}
END_TEST

START_TEST(graph_replays)
{
	double dt = pe_run_all(8, pe_graph, NULL, 120, 0);
	printf("coll gpu xnode graph: 8 ranks (4 + 4), all-reduce max of %d f32 captured once, %d replays with new "
	       "inputs, every element checked: %.1f s\n", GRAPH_N, REPLAYS, dt);
}
END_TEST

START_TEST(missing_rank)
{
	pe_run_all(8, pe_missing, NULL, 60, 0);
	double worst = 0;
	for (int i = 0; i < 7; i++)
		worst = SH->waited[i] > worst ? SH->waited[i] : worst;
	printf("coll gpu xnode: a rank (on B) that does not call: its 7 peers' kernels ended within %.2f s (deadline "
	       "%.1f s), MORI_ETIMEDOUT naming it\n", worst, DEADLINE_US * 1e-6);
}
END_TEST

START_TEST(killed_rank)
{
	pe_run_all(8, pe_killed, NULL, 60, 1);
	double worst = 0;
	int dead = 0;
	for (int i = 0; i < 7; i++) {
		worst = SH->waited[i] > worst ? SH->waited[i] : worst;
		dead += SH->cases[i] == MORI_EPEERDEAD;
	}
	printf("coll gpu xnode: a rank (on B) killed: its 7 peers' kernels returned within %.2f s, %d with "
	       "MORI_EPEERDEAD, %d at the deadline (%.1f s)\n", worst, dead, 7 - dead, DEADLINE_US * 1e-6);
}
END_TEST

START_TEST(mismatched_args)
{
	double dt = pe_run_all(8, pe_mismatch, NULL, 120, 0);
	printf("coll gpu xnode: an all-reduce whose count differs on rank 7 of 8 (4 + 4): MORI_EINVAL naming it on "
	       "every rank, recvbuf untouched, then a well-formed all-reduce checked: %.1f s\n", dt);
}
END_TEST

int main(void)
{
	gpu_skip_unless(0);
	const char *e = getenv("MORI_COLL_XNODE_SIZES");
	if (e) {
		nsizes = 0;
		for (char *s = (char *)e; *s && nsizes < 8;) {
			long v = strtol(s, &s, 10);
			if (v >= 2 && v <= MAXPE)
				sizes[nsizes++] = (int)v;
			while (*s == ' ' || *s == ',')
				s++;
		}
	}
	mps_note = gpu_mps_start();
	printf("coll gpu xnode: %s\n", mps_note);
	Suite *s = suite_create("gpu_coll_xnode");
	TCase *t = tcase_create("two_morids");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 300);
	tcase_add_loop_test(t, every_collective, 0, nsizes);
	tcase_add_test(t, many_rounds);
	tcase_add_test(t, graph_replays);
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
