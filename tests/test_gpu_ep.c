/* MORI-EP on the GPU (issue 13, acceptance 1-3 and faults): N forked processes on the one GPU are
 * the N ranks of a group formed through morid (VRAM heaps), under MPS with an equal SM share.
 *
 * reference   (ROCm/mori's checks) world sizes $MORI_EP_WORLDS (default 1 2 3 5 8), $MORI_EP_ITERS
 *             (default 200) iterations of each: all ranks derive every rank's tokens, weights,
 *             scales and routing from one seed; routings cycle random / round-robin / all to one
 *             rank / spread, with -1 slots, token counts 0..max per rank. Dispatch must be bit-exact
 *             (every slot equals its source token's row, weights, indices and scales; source
 *             positions unique; count = the expected number), combine = input x the number of
 *             distinct destination ranks (bf16 within 1e-2; fp8 dispatch, its rows decoded, the
 *             same). bf16 and fp8 (with per-128 scales) in normal mode, bf16 in low-latency mode;
 *             bf16 quantised to fp8 by dispatch (quant_type) in both modes: rows and scales equal
 *             the CPU's quantisation of the same rows byte for byte, combine within 7e-2.
 * deepep      (DeepEP's checks, at 4 ranks) H 16, 2048, 7168, 7680 x top-k 1, 8, 32 in both modes:
 *             the rows arrive exactly; per-expert counts equal the all-ranks count from the layout
 *             query, which equals the host reference; low-latency combine weighted, calc_diff < 1e-5.
 * graph       one CUDA graph of dispatch + combine captured once, replayed 1 000 times with new
 *             routing written into the same device buffer before each: every replay checked; then
 *             the handle destroyed, a new one made on the same heap, the old graph replayed: its
 *             kernels return at once (mori_ep_retired_status: MORI_ESTALE) and the new handle works.
 * inflight    num_in_flight 3 at 4 ranks, both modes: dispatch i, then combine i - 2 (three waiting),
 *             60 dispatches, each checked bit-exact and its combine checked; a fourth refused.
 * faults      tokens above the maximum (both numbers named), an expert index out of range (the
 *             status names token, slot and value), combine given dispatch's indices (refused),
 *             a config differing on one rank (refused on every rank naming the field), and a rank
 *             killed before its dispatch: the peers' kernels end within a second, MORI_EPEERDEAD.
 * Without a GPU or the EP kernels: "skipped: ..." (77). */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <sys/mman.h>

#include "gpu_harness.h"
#include "harness.h"
#include "mori_ep.h"
#include "pe_harness.h"
#include "ep_ref.h"

#define MAXPE 8
static struct test_daemon D;
static const char *mps_note;
static int ITERS = 200;

struct shared {
	char msg[MAXPE][PE_MSG_LEN];
	double killed_at, waited[MAXPE];
	long long checked[MAXPE];
};
static struct shared *SH;

static void setup(void)
{
	pe_shared_map(SH);
	ep_checked = SH->checked;
	ck_assert_int_eq(daemon_start(&D, NULL), 0);
}
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
	pe_shared_unmap(SH);
}
static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int pe_open(struct pe *p, int me, int n, uint64_t heap)
{
	char name[32];
	snprintf(name, sizeof(name), "ep-%d", n);
	return ep_pe_open(p, me, n, heap, D.dir, NULL, name);
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
	struct pe P, *p = &P;
	if (pe_open(p, me, n, heap_for(ref_shapes, NREF, n)))
		return 1;
	for (int i = 0; i < NREF; i++) {
		struct shape c = ref_shapes[i];
		c.W = n;
		mori_ep_config f = cfg_of(&c, me);
		mori_ep_handle *h;
		POK(me, mori_ep_create(p->grp, &f, &h));
		for (int it = 0; it < ITERS; it++) /* every shape the 200 iterations */
			if (round_trip(p, h, &c, (uint64_t)it * 131 + (uint64_t)i, NULL))
				return 1;
		POK(me, mori_ep_destroy(h));
	}
	pe_close(p);
	return 0;
}

START_TEST(reference_checks)
{
	const char *e = getenv("MORI_EP_WORLDS");
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", e && *e ? e : "1 2 3 5 8");
	for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
		int W = atoi(tok);
		if (W < 1 || W > MAXPE)
			continue;
		memset(SH->checked, 0, sizeof(SH->checked));
		double dt = pe_run_all(W, pe_reference, NULL, 280, 0);
		long long sum = 0;
		for (int i = 0; i < W; i++)
			sum += SH->checked[i];
		printf("reference: world %d (%s): bf16 normal, fp8+scales normal, bf16 low-latency and bf16 quantised to "
		       "fp8 by dispatch (normal, low-latency), %d iterations each; %lld dispatches checked bit-exact "
		       "(quantised: bytes and scales = the CPU's), combines within 1e-2 (quantised 7e-2): %.1f s\n",
		       W, mps_note, ITERS, sum, dt);
		fflush(stdout);
	}
}
END_TEST

/* ---- acceptance 2 (4 ranks) ---- */
static int pe_deepep(int me, int n, void *arg)
{
	static const int Hs[] = {16, 2048, 7168, 7680}, Ks[] = {1, 8, 32};
	struct shape cs[24];
	int nc = 0;
	for (int m = 0; m < 2; m++)
		for (int hi = 0; hi < 4; hi++)
			for (int ki = 0; ki < 3; ki++)
				cs[nc++] = (struct shape){n, Hs[hi], 32, 8, Ks[ki], MORI_BFLOAT16, m, 0, 0};
	struct pe P, *p = &P;
	if (pe_open(p, me, n, heap_for(cs, nc, n)))
		return 1;
	double worst = 0;
	for (int i = 0; i < nc; i++) {
		struct shape *c = &cs[i];
		mori_ep_config f = cfg_of(c, me);
		mori_ep_handle *h;
		POK(me, mori_ep_create(p->grp, &f, &h));
		for (int it = 0; it < 4; it++) {
			uint64_t seed = (uint64_t)it * 7 + 2 + (uint64_t)i * 1000; /* never the T = 0 / T = max seeds only */
			int T = tokens_of(c, seed, me);
			/* per-expert counts: the layout query against the host reference, summed over ranks */
			make_input(p, c, seed, me, T);
			if (upload(p, c, T))
				return 1;
			gpu_dptr q = p->eo; /* scratch: per_rank [W], per_expert [E], in_rank [T, W] */
			int E = n * c->epr;
			POK(me, mori_ep_get_dispatch_layout(h, (int32_t *)(uintptr_t)p->idx, T, (int32_t *)(uintptr_t)q,
							    (int32_t *)(uintptr_t)(q + 256), (uint8_t *)(uintptr_t)(q + 4096), p->s));
			int32_t gpr[MAXPE], gpe[256], rpr[MAXPE], rpe[256];
			uint8_t *gir = p->h_buf, *rir = p->h_buf + (1 << 20);
			GOK(me, p->g->memcpy_dtoh_async(gpr, q, 4 * (size_t)n, p->s));
			GOK(me, p->g->memcpy_dtoh_async(gpe, q + 256, 4 * (size_t)E, p->s));
			if (T)
				GOK(me, p->g->memcpy_dtoh_async(gir, q + 4096, (size_t)T * n, p->s));
			GOK(me, p->g->stream_synchronize(p->s));
			POK(me, mori_ep_layout_host(&f, p->h_idx, T, rpr, rpe, rir, NULL, 0));
			PCHECK(me, !memcmp(gpr, rpr, 4 * (size_t)n) && !memcmp(gpe, rpe, 4 * (size_t)E) &&
					   (!T || !memcmp(gir, rir, (size_t)T * n)),
			       "H %d K %d: layout query differs from the host reference", c->H, c->K);
			double d = 0;
			if (round_trip(p, h, c, seed, &d))
				return 1;
			worst = d > worst ? d : worst;
		}
		POK(me, mori_ep_destroy(h));
	}
	SH->waited[me] = worst;
	pe_close(p);
	return 0;
}

START_TEST(deepep_checks)
{
	int W = 4;
	double dt = pe_run_all(W, pe_deepep, NULL, 280, 0);
	double worst = 0;
	for (int i = 0; i < W; i++)
		worst = SH->waited[i] > worst ? SH->waited[i] : worst;
	printf("deepep: 4 ranks, H 16/2048/7168/7680 x top-k 1/8/32, normal and low-latency: rows exact, layout "
	       "query = host reference, combine worst calc_diff %.2e: %.1f s\n", worst, dt);
}
END_TEST

/* ---- acceptance 3: a graph replayed with new routing ---- */
typedef int (*cu_begin_fn)(void *, int);
typedef int (*cu_end_fn)(void *, void **);
typedef int (*cu_inst_fn)(void **, void *, unsigned long long);
typedef int (*cu_launch_fn)(void *, void *);

static int pe_graph(int me, int n, void *arg)
{
	struct shape c = {n, 512, 32, 4, 8, MORI_BFLOAT16, MORI_EP_NORMAL, 0, 0};
	if (arg)
		c.mode = MORI_EP_LOW_LATENCY;
	struct pe P, *p = &P;
	if (pe_open(p, me, n, heap_for(&c, 1, n)))
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
	const int T = c.M; /* the graph's token count is fixed; the routing changes */
	mori_ep_recv r;
	mori_ep_recv_buffers(h, &r);
	GOK(me, begin(p->s, 2 /* relaxed */));
	POK(me, mori_ep_dispatch(h, (void *)(uintptr_t)p->in, (float *)(uintptr_t)p->w, NULL, (int32_t *)(uintptr_t)p->idx,
				 T, p->s, NULL));
	void *eo = r.tokens;
	if (c.mode) { /* low-latency: the experts' outputs in the registered combine input, read in place */
		eo = mori_ep_get_registered_combine_input_buffer(h);
		GOK(me, p->g->memcpy_dtod_async((gpu_dptr)(uintptr_t)eo, (gpu_dptr)(uintptr_t)r.tokens,
						(size_t)r.max_recv * c.epr * c.H * 2, p->s));
	}
	POK(me, mori_ep_combine(h, MORI_BFLOAT16, eo, NULL, NULL, (void *)(uintptr_t)p->out, p->s));
	void *graph = NULL, *exec = NULL;
	GOK(me, end(p->s, &graph));
	GOK(me, inst(&exec, graph, 0));
	for (int it = 0; it < 1000; it++) {
		uint64_t seed = (uint64_t)it * 5 + 2 + (uint64_t)(it % 3); /* never seed % 5 == 0 or 1: T = M */
		if (seed % 5 < 2)
			seed += 2;
		make_input(p, &c, seed, me, T);
		routing(&c, seed, me, T, p->h_idx); /* this rank's: T = M for every rank in the graph */
		if (upload(p, &c, T))
			return 1;
		GOK(me, glaunch(exec, p->s));
		GOK(me, p->g->stream_synchronize(p->s));
		int32_t cnt[8];
		GOK(me, p->g->memcpy_dtoh_async(cnt, (gpu_dptr)(uintptr_t)r.count, 4 * (size_t)(c.mode ? c.epr : 1), p->s));
		GOK(me, p->g->stream_synchronize(p->s));
		long long want = 0, got = 0;
		for (int s = 0; s < n; s++) {
			routing(&c, seed, s, T, p->h_tmp);
			for (int t = 0; t < T; t++) {
				int hit = 0;
				for (int k = 0; k < c.K; k++)
					if (p->h_tmp[t * c.K + k] >= 0 && p->h_tmp[t * c.K + k] / c.epr == me)
						hit++, want += c.mode ? 1 : 0;
				want += !c.mode && hit;
			}
		}
		for (int l = 0; l < (c.mode ? c.epr : 1); l++)
			got += cnt[l];
		PCHECK(me, got == want, "replay %d: received %lld, expected %lld", it, got, want);
		/* combine: every token's output, as in check_combine (all ranks at T = M) */
		GOK(me, p->g->memcpy_dtoh_async(p->h_out, p->out, (size_t)T * c.H * 2, p->s));
		GOK(me, p->g->stream_synchronize(p->s));
		routing(&c, seed, me, T, p->h_tmp);
		for (int t = 0; t < T; t++) {
			uint32_t ranks = 0;
			double fw = 0;
			for (int k = 0; k < c.K; k++)
				if (p->h_tmp[t * c.K + k] >= 0)
					ranks |= 1u << (p->h_tmp[t * c.K + k] / c.epr), fw += wval(me, t, k);
			double fac = c.mode ? fw : __builtin_popcount(ranks);
			for (int hh = 0; hh < c.H; hh += 37) {
				uint16_t b;
				memcpy(&b, p->h_out + ((size_t)t * c.H + hh) * 2, 2);
				double want_v = xval(me, t, hh) * fac;
				PCHECK(me, fabs(bf2f(b) - want_v) <= 1e-2 * fabs(want_v) + 1e-2, "replay %d: out[%d][%d] %g, want %g",
				       it, t, hh, bf2f(b), want_v);
			}
		}
		SH->checked[me]++;
	}
	POK(me, mori_ep_status(h, NULL));
	POK(me, mori_ep_destroy(h));
	/* the graph replayed after the destroy, over a new handle on the same heap space: its kernels
	 * must find their handle retired and return, touching nothing (the new handle still works) */
	POK(me, mori_ep_retired_status_clear(p->c));
	POK(me, mori_ep_create(p->grp, &f, &h));
	GOK(me, glaunch(exec, p->s));
	GOK(me, p->g->stream_synchronize(p->s));
	mori_status st;
	int rc = mori_ep_retired_status(p->c, &st);
	PCHECK(me, rc == MORI_ESTALE && st.code == rc && strstr(st.message, "destroyed handle generation"),
	       "replay after destroy: %s (%s)", mori_strerror(rc), st.message);
	POK(me, mori_ep_retired_status_clear(p->c));
	POK(me, mori_ep_retired_status(p->c, NULL)); /* cleared */
	if (round_trip(p, h, &c, 7, NULL))
		return 1;
	POK(me, mori_ep_destroy(h));
	pe_close(p);
	return 0;
}

START_TEST(graph_replays)
{
	for (int ll = 0; ll < 2; ll++) {
		memset(SH->checked, 0, sizeof(SH->checked));
		double dt = pe_run_all(4, pe_graph, ll ? (void *)1 : NULL, 280, 0);
		printf("graph: 4 ranks, %s: one CUDA graph of dispatch + combine replayed %lld times with new routing, "
		       "every replay's counts and outputs checked; replayed after destroy: retired, "
		       "MORI_ESTALE, a new handle on the same heap unharmed: %.1f s\n", ll ? "low-latency (registered combine input)" : "normal (pushed combine)", SH->checked[0], dt);
	}
}
END_TEST

/* ---- several dispatches in flight ---- */
#define INFLIGHT 3
static int pe_inflight(int me, int n, void *arg)
{
	struct shape c = {n, 512, 32, 4, 8, MORI_BFLOAT16, arg ? MORI_EP_LOW_LATENCY : MORI_EP_NORMAL, 0, 0};
	struct pe P, *p = &P;
	mori_ep_config f = cfg_of(&c, me);
	f.num_in_flight = INFLIGHT;
	if (pe_open(p, me, n, heap_for(&c, 1, n) * INFLIGHT))
		return 1;
	mori_ep_handle *h;
	POK(me, mori_ep_create(p->grp, &f, &h));
	enum { N = 60 };
	mori_ep_recv r[N];
	uint64_t seed[N];
	int T[N];
	const gpu_dptr out0 = p->out;
	const size_t ob = (size_t)c.M * c.H * 2;
	/* dispatch i, then combine i - 2: three wait after each dispatch, the slots wrap 20 times */
	for (int i = 0; i < N + 2; i++) {
		if (i < N) {
			seed[i] = 2 + (uint64_t)i * 11 + (arg ? 5 : 0);
			T[i] = tokens_of(&c, seed[i], me);
			make_input(p, &c, seed[i], me, T[i]);
			if (upload(p, &c, T[i]))
				return 1;
			POK(me, mori_ep_dispatch(h, (void *)(uintptr_t)p->in, (float *)(uintptr_t)p->w, NULL,
						 (int32_t *)(uintptr_t)p->idx, T[i], p->s, &r[i]));
			PCHECK(me, r[i].slot == i % INFLIGHT, "dispatch %d in slot %d", i, r[i].slot);
			if (check_dispatch(p, &c, &r[i], seed[i]))
				return 1;
			if (i == INFLIGHT - 1) { /* a fourth is refused before anything is enqueued */
				int rc = mori_ep_dispatch(h, (void *)(uintptr_t)p->in, NULL, NULL, (int32_t *)(uintptr_t)p->idx,
							  T[i], p->s, NULL);
				PCHECK(me, rc == MORI_EINVAL && strstr(mori_client_last_error(p->c), "3 dispatches in flight"),
				       "fourth dispatch: %s (%s)", mori_strerror(rc), mori_client_last_error(p->c));
				PCHECK(me, mori_ep_get_registered_combine_input_buffer(h) == r[0].combine_input,
				       "the registered combine input is not the oldest dispatch's");
			}
		}
		if (i < 2)
			continue;
		const int j = i - 2;
		void *eo = r[j].tokens; /* identity experts: pushed (normal) or in place (low-latency) */
		if (c.mode) {
			eo = r[j].combine_input;
			GOK(me, p->g->memcpy_dtod_async((gpu_dptr)(uintptr_t)eo, (gpu_dptr)(uintptr_t)r[j].tokens,
							(size_t)r[j].max_recv * c.epr * c.H * 2, p->s));
		}
		p->out = out0 + (size_t)(j % INFLIGHT) * ob;
		POK(me, mori_ep_combine(h, MORI_BFLOAT16, eo, NULL, NULL, (void *)(uintptr_t)p->out, p->s));
		int bad = check_combine(p, &c, seed[j], T[j], NULL);
		p->out = out0;
		if (bad)
			return 1;
	}
	int rc = mori_ep_combine(h, MORI_BFLOAT16, r[0].tokens, NULL, NULL, (void *)(uintptr_t)p->out, p->s);
	PCHECK(me, rc == MORI_EINVAL && strstr(mori_client_last_error(p->c), "no dispatch to combine"),
	       "combine with none waiting: %s (%s)", mori_strerror(rc), mori_client_last_error(p->c));
	POK(me, mori_ep_status(h, NULL));
	POK(me, mori_ep_destroy(h));
	pe_close(p);
	return 0;
}

START_TEST(in_flight)
{
	for (int ll = 0; ll < 2; ll++) {
		memset(SH->checked, 0, sizeof(SH->checked));
		double dt = pe_run_all(4, pe_inflight, ll ? (void *)1 : NULL, 120, 0);
		printf("inflight: 4 ranks, %s, num_in_flight %d: 60 dispatches each combined two dispatches later, "
		       "%lld checked bit-exact and their combines, a fourth in flight refused: %.1f s\n",
		       ll ? "low-latency (each slot's registered combine input)" : "normal (pushed combine)", INFLIGHT,
		       SH->checked[0], dt);
	}
}
END_TEST

/* ---- faults ---- */
static int pe_faults(int me, int n, void *arg)
{
	struct shape c = {n, 256, 16, 2, 4, MORI_BFLOAT16, MORI_EP_NORMAL, 0, 0};
	struct pe P, *p = &P;
	if (pe_open(p, me, n, heap_for(&c, 1, n)))
		return 1;
	/* a config differing on rank 1: refused on every rank, naming the field */
	mori_ep_config f = cfg_of(&c, me);
	if (me == 1)
		f.hidden_dim = 512;
	mori_ep_handle *h = NULL;
	int rc = mori_ep_create(p->grp, &f, &h);
	PCHECK(me, rc == MORI_EINVAL && strstr(mori_client_last_error(p->c), "hidden_dim"), "create: %s (%s)",
	       mori_strerror(rc), mori_client_last_error(p->c));
	f = cfg_of(&c, me);
	POK(me, mori_ep_create(p->grp, &f, &h));
	/* more tokens than the maximum: refused before anything is enqueued */
	rc = mori_ep_dispatch(h, (void *)(uintptr_t)p->in, NULL, NULL, (int32_t *)(uintptr_t)p->idx, 17, p->s, NULL);
	PCHECK(me, rc == MORI_EINVAL && strstr(mori_client_last_error(p->c), "17 tokens") &&
			   strstr(mori_client_last_error(p->c), "16"),
	       "17 tokens: %s (%s)", mori_strerror(rc), mori_client_last_error(p->c));
	/* an expert index out of range on rank 0: its status names it; the others are unaffected */
	uint64_t seed = 2;
	int T = tokens_of(&c, seed, me);
	make_input(p, &c, seed, me, T);
	if (me == 0 && T > 0)
		p->h_idx[0] = n * c.epr + 3;
	if (upload(p, &c, T))
		return 1;
	mori_ep_recv r;
	POK(me, mori_ep_dispatch(h, (void *)(uintptr_t)p->in, NULL, NULL, (int32_t *)(uintptr_t)p->idx, T, p->s, &r));
	rc = mori_ep_combine(h, MORI_BFLOAT16, r.tokens, NULL, r.indices, (void *)(uintptr_t)p->out, p->s);
	PCHECK(me, rc == MORI_EINVAL && strstr(mori_client_last_error(p->c), "dispatch's received indices"),
	       "combine with dispatch's indices: %s (%s)", mori_strerror(rc), mori_client_last_error(p->c));
	POK(me, mori_ep_combine(h, MORI_BFLOAT16, r.tokens, NULL, NULL, (void *)(uintptr_t)p->out, p->s));
	GOK(me, p->g->stream_synchronize(p->s));
	rc = mori_ep_status(h, NULL);
	POK(me, mori_ep_status_clear(h));
	if (me == 0 && T > 0)
		PCHECK(me, rc == MORI_EINVAL && strstr(mori_client_last_error(p->c), "token 0 slot 0: expert index"),
		       "bad index: status %s (%s)", mori_strerror(rc), mori_client_last_error(p->c));
	else
		POK(me, rc);
	POK(me, mori_ep_status(h, NULL));
	POK(me, mori_shmem_barrier_all(p->grp));
	/* the last rank dies before its next dispatch: the others' kernels end with MORI_EPEERDEAD */
	if (me == n - 1) {
		usleep(300000);
		SH->killed_at = now_s();
		raise(SIGKILL);
	}
	seed = 3;
	T = tokens_of(&c, seed, me);
	make_input(p, &c, seed, me, T);
	if (upload(p, &c, T))
		return 1;
	rc = mori_ep_dispatch(h, (void *)(uintptr_t)p->in, NULL, NULL, (int32_t *)(uintptr_t)p->idx, T, p->s, &r);
	PCHECK(me, rc == MORI_OK || rc == MORI_EPEERDEAD, "dispatch: %s", mori_strerror(rc)); /* the abort may come first */
	GOK(me, p->g->stream_synchronize(p->s));
	SH->waited[me] = now_s() - SH->killed_at;
	rc = mori_ep_status(h, NULL);
	PCHECK(me, rc == MORI_EPEERDEAD, "after the kill: status %s (%s)", mori_strerror(rc), mori_client_last_error(p->c));
	PCHECK(me, SH->waited[me] < 1.0, "the dispatch ended %.3f s after the kill", SH->waited[me]);
	return 0; /* the group is dead: leave without the collective destroy */
}

START_TEST(faults)
{
	pe_run_all(4, pe_faults, NULL, 120, 1);
	double worst = 0;
	for (int i = 0; i < 3; i++)
		worst = SH->waited[i] > worst ? SH->waited[i] : worst;
	printf("faults: config difference named on every rank, 17 > 16 tokens refused, bad expert index in the status, "
	       "dispatch's indices refused in combine; a rank killed: the 3 peers' dispatches ended MORI_EPEERDEAD within "
	       "%.0f ms\n", worst * 1e3);
}
END_TEST

int main(void)
{
	gpu_skip_unless(1);
	const char *e = getenv("MORI_EP_ITERS");
	if (e && atoi(e) > 0)
		ITERS = atoi(e);
	mps_note = gpu_mps_start();
	printf("MORI-EP on one GPU, %s\n", mps_note);
	Suite *s = suite_create("gpu_ep");
	TCase *t = tcase_create("ranks");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 600);
	const char *only = getenv("MORI_EP_CASES"); /* e.g. "reference faults" */
	if (!only || strstr(only, "reference"))
		tcase_add_test(t, reference_checks);
	if (!only || strstr(only, "deepep"))
		tcase_add_test(t, deepep_checks);
	if (!only || strstr(only, "graph"))
		tcase_add_test(t, graph_replays);
	if (!only || strstr(only, "inflight"))
		tcase_add_test(t, in_flight);
	if (!only || strstr(only, "faults"))
		tcase_add_test(t, faults);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
