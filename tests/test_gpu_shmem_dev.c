/* MORI-SHMEM's device API on one GPU, without groups or morid: one process allocates N heaps
 * (N = 2..8), builds N PE states in device memory whose peer_base point at the other heaps (all
 * mapped in this process), loads the test kernels once per PE (each module its own
 * mori_shmem_state_ptr) and runs one kernel per PE concurrently, on separate streams. Every
 * device function is checked against a model on the CPU: puts and gets of random sizes and
 * alignments at each scope, put+signal around a ring (1 000 rounds), fetch-add on one counter
 * (100 000 per PE, exact total, no value fetched twice), the atomics' results, a compare-swap
 * lock, wait_until on every comparison, barriers, the abort word ending waits within a second.
 * The proxy path: PEs split over two "nodes" (no peer_base across them), a host thread playing
 * morid serves each PE's ring (common/shmem_layout.h) with copies and a one-thread AMO kernel.
 * Each state orders as libmori would decide it: GPU scope towards the PEs of its own "node" (all
 * heaps are on the one GPU), system scope towards the other; waits at GPU scope without a split.
 * Skips (77) without a GPU or without nvcc-built kernels. */
#include <check.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../kernels/mori_shmem_kernels.h"
#include "gpu_harness.h"
#include "shmem_dev.h"
#include "shmem_layout.h"

extern const unsigned char mori_kernels_shmemtest_image[];
extern const size_t mori_kernels_shmemtest_image_len;

#define MAXPE 8
#define HEAP (8u << 20)
#define RING 64 /* proxy ring entries: small, so the ring wraps and fills */
/* heap layout after the reserved area */
#define SRC_OFF MORI_SHMEM_RESERVED
#define SRC_SIZE (1u << 20)
#define SLOT (256u << 10)
#define RECV_OFF (SRC_OFF + SRC_SIZE)
#define GETB_OFF (RECV_OFF + MAXPE * SLOT)
#define GETB_SIZE (2u << 20)
#define MISC_OFF (GETB_OFF + GETB_SIZE)
#define RBUF_OFF MISC_OFF               /* ring buffer, 64 KiB */
#define RSRC_OFF (MISC_OFF + (64u << 10)) /* ring source, 64 KiB */
#define WORDS_OFF (MISC_OFF + (128u << 10)) /* sig, ack, counters, wait words: 4 KiB each */
#define SIG_OFF WORDS_OFF
#define ACK_OFF (WORDS_OFF + 64)
#define C64_OFF (WORDS_OFF + 128)
#define C32_OFF (WORDS_OFF + 192)
#define CNF_OFF (WORDS_OFF + 256)
#define WAITW_OFF (WORDS_OFF + 4096)
#define AMO_OFF (WORDS_OFF + 8192)      /* 32 bytes per PE */
#define BARW_OFF (WORDS_OFF + 12288)
_Static_assert(BARW_OFF + 4096 <= HEAP, "heap layout");

enum { K_OPS, K_RING, K_FADD, K_AMO, K_LOCK, K_WAIT, K_BARRIER, K_ABORT, K_AMO_EXEC, K_N };
static const char *const knames[K_N] = {"sdev_ops", "sdev_ring", "sdev_fadd", "sdev_amo", "sdev_lock",
					"sdev_wait", "sdev_barrier", "sdev_abort", "sdev_amo_exec"};

struct pe {
	gpu_module mod;
	gpu_function fn[K_N];
	gpu_stream s;
	gpu_dptr heap, state, peers, team, scope, args_d, out_d;
	struct mori_shmem_ctrl *ctrl; /* host address; ring follows at +MORI_SHMEM_CTRL_BYTES */
	gpu_dptr ctrl_d;
	struct sdev_args a;
	long long out[SDEV_OUT_N];
	uint64_t served;              /* fake morid: requests completed */
};
struct rig {
	int n, split;                 /* PEs [0, split) on node A, [split, n) on node B */
	struct pe pe[MAXPE];
	pthread_t morid;
	volatile int stop, running;
	gpu_stream ms;                /* fake morid's stream */
	uint64_t ops_by_kind[8];
};

static const struct gpu_api *g;
static mori_client C;
static struct gpu_ctx *X;
static struct gpu_dev *D;
static int (*get_global)(gpu_dptr *, size_t *, gpu_module, const char *);

#define CKR(call)                                                                          \
	do {                                                                               \
		int r_ = (call);                                                           \
		ck_assert_msg(r_ == 0, "%s: %s", #call, gpu_strerror(r_));                 \
	} while (0)

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void setup(void)
{
	g = gpu_api();
	ck_assert_ptr_nonnull(g);
	ck_assert_int_eq(gpu_ctx_get(&C, &X), MORI_OK);
	ck_assert_int_eq(gpu_dev_get(&C, X, 0, &D), MORI_OK);
	ck_assert_int_eq(gpu_push(g, D), 0);
	void *lib = dlopen(g->library, RTLD_NOW | RTLD_NOLOAD);
	ck_assert_ptr_nonnull(lib);
	*(void **)&get_global = dlsym(lib, "cuModuleGetGlobal_v2");
	ck_assert_ptr_nonnull(get_global);
}

static void teardown(void)
{
	gpu_pop(g);
	gpu_ctx_free(&C);
}

/* ---- the rig: heaps, states, control pages, one module per PE ---- */

static int same_node(const struct rig *r, int a, int b) { return (a < r->split) == (b < r->split); }

static void pe_state(struct rig *r, int p)
{
	struct pe *e = &r->pe[p];
	uint64_t peers[MAXPE];
	int32_t team[MAXPE], scope[MAXPE];
	int nt = 0;
	for (int q = 0; q < r->n; q++) {
		peers[q] = same_node(r, p, q) ? r->pe[q].heap : 0;
		scope[q] = same_node(r, p, q) ? MORI_SHMEM_SCOPE_GPU : MORI_SHMEM_SCOPE_SYS;
		if (same_node(r, p, q))
			team[nt++] = q;
	}
	CKR(g->mem_alloc(&e->peers, sizeof(peers)));
	CKR(g->mem_alloc(&e->team, sizeof(team)));
	CKR(g->mem_alloc(&e->scope, sizeof(scope)));
	CKR(g->memcpy_htod_async(e->scope, scope, sizeof(scope), NULL));
	CKR(g->mem_alloc(&e->state, sizeof(struct mori_shmem_state)));
	CKR(g->memcpy_htod_async(e->peers, peers, sizeof(peers), NULL));
	CKR(g->memcpy_htod_async(e->team, team, sizeof(team), NULL));
	struct mori_shmem_state st = {
		.magic = MORI_SHMEM_MAGIC, .my_pe = p, .n_pes = r->n, .node_pes = nt, .heap_size = HEAP,
		.heap_base = e->heap, .peer_base = (uint64_t *)(uintptr_t)e->peers,
		.node_team = (int32_t *)(uintptr_t)e->team, .ctrl = (struct mori_shmem_ctrl *)(uintptr_t)e->ctrl_d,
		.ring = (struct mori_shmem_preq *)(uintptr_t)(e->ctrl_d + MORI_SHMEM_CTRL_BYTES),
		.peer_scope = (int32_t *)(uintptr_t)e->scope,
		.wait_scope = nt == r->n ? MORI_SHMEM_SCOPE_GPU : MORI_SHMEM_SCOPE_SYS,
	};
	CKR(g->memcpy_htod_async(e->state, &st, sizeof(st), NULL));
	gpu_dptr gp;
	size_t gsz;
	CKR(get_global(&gp, &gsz, e->mod, "mori_shmem_state_ptr"));
	ck_assert_uint_eq(gsz, sizeof(void *));
	CKR(g->memcpy_htod_async(gp, &e->state, sizeof(e->state), NULL));
}

static void rig_open(struct rig *r, int n, int split)
{
	memset(r, 0, sizeof(*r));
	r->n = n;
	r->split = split;
	size_t cbytes = MORI_SHMEM_CTRL_BYTES + RING * sizeof(struct mori_shmem_preq);
	for (int p = 0; p < n; p++) {
		struct pe *e = &r->pe[p];
		CKR(g->mem_alloc(&e->heap, HEAP));
		CKR(g->memset_d8_async(e->heap, 0, HEAP, NULL));
		CKR(g->mem_alloc(&e->args_d, sizeof(struct sdev_args)));
		CKR(g->mem_alloc(&e->out_d, sizeof(e->out)));
		void *h;
		CKR(g->mem_host_alloc(&h, cbytes, GPU_MEMHOSTALLOC_PORTABLE | GPU_MEMHOSTALLOC_DEVICEMAP));
		memset(h, 0, cbytes);
		e->ctrl = h;
		e->ctrl->magic = MORI_SHMEM_MAGIC;
		e->ctrl->ring_entries = RING;
		e->ctrl->abort_pe = -1;
		CKR(g->mem_host_get_device_pointer(&e->ctrl_d, h, 0));
		CKR(g->module_load_data(&e->mod, mori_kernels_shmemtest_image));
		for (int k = 0; k < K_N; k++)
			CKR(g->module_get_function(&e->fn[k], e->mod, knames[k]));
		CKR(g->stream_create(&e->s, GPU_STREAM_NON_BLOCKING));
	}
	for (int p = 0; p < n; p++)
		pe_state(r, p);
	CKR(g->stream_synchronize(NULL));
}

static void rig_close(struct rig *r)
{
	if (r->running) {
		r->stop = 1;
		pthread_join(r->morid, NULL);
	}
	for (int p = 0; p < r->n; p++) {
		struct pe *e = &r->pe[p];
		g->stream_synchronize(e->s);
		g->stream_destroy(e->s);
		g->module_unload(e->mod);
		g->mem_free(e->heap);
		g->mem_free(e->state);
		g->mem_free(e->peers);
		g->mem_free(e->team);
		g->mem_free(e->scope);
		g->mem_free(e->args_d);
		g->mem_free(e->out_d);
		g->mem_free_host(e->ctrl);
	}
	if (r->ms)
		g->stream_destroy(r->ms);
}

static gpu_dptr sym(const struct rig *r, int p, uint64_t off) { return r->pe[p].heap + off; }

/* ---- the fake morid: serves every PE's ring in order ---- */

static void amo_exec(struct rig *r, gpu_dptr w, int code, int width, uint64_t v, uint64_t cmp, gpu_dptr old)
{
	void *params[] = {&w, &code, &width, &v, &cmp, &old};
	if (g->launch_kernel(r->pe[0].fn[K_AMO_EXEC], 1, 1, 1, 1, 1, 1, 0, r->ms, params, NULL) ||
	    g->stream_synchronize(r->ms))
		fprintf(stderr, "fake morid: AMO kernel failed\n");
}

static int in_heap(uint64_t off, uint64_t len) { return off <= HEAP && len <= HEAP - off; }

/* One request of PE p's ring, copied out of shared memory first, then checked. */
static int serve(struct rig *r, int p, const struct mori_shmem_preq *q)
{
	if (q->pe < 0 || q->pe >= r->n)
		return MORI_EINVAL;
	gpu_dptr mine = r->pe[p].heap, theirs = r->pe[q->pe].heap;
	int code = q->amo & ~MORI_SHMEM_AMO_FETCH;
	if (q->op < 8)
		r->ops_by_kind[q->op]++;
	switch (q->op) {
	case MORI_SHMEM_OP_PUT:
	case MORI_SHMEM_OP_PUT_SIGNAL:
		if (!in_heap(q->dst, q->len) || !in_heap(q->src, q->len))
			return MORI_ERANGE;
		if (q->len && (g->memcpy_dtod_async(theirs + q->dst, mine + q->src, q->len, r->ms) ||
			       g->stream_synchronize(r->ms)))
			return MORI_EIO;
		if (q->op == MORI_SHMEM_OP_PUT_SIGNAL) {
			if (!in_heap(q->sig, 8))
				return MORI_ERANGE;
			amo_exec(r, theirs + q->sig, q->amo == MORI_SHMEM_SIGNAL_SET ? MORI_SHMEM_AMO_SET : MORI_SHMEM_AMO_ADD,
				 8, q->value, 0, 0);
		}
		return 0;
	case MORI_SHMEM_OP_GET:
		if (!in_heap(q->dst, q->len) || !in_heap(q->src, q->len))
			return MORI_ERANGE;
		if (q->len && (g->memcpy_dtod_async(mine + q->dst, theirs + q->src, q->len, r->ms) ||
			       g->stream_synchronize(r->ms)))
			return MORI_EIO;
		return 0;
	case MORI_SHMEM_OP_AMO:
		if ((q->width != 4 && q->width != 8) || !in_heap(q->dst, q->width) || code < MORI_SHMEM_AMO_SET ||
		    code > MORI_SHMEM_AMO_CSWAP || ((q->amo & MORI_SHMEM_AMO_FETCH) && !in_heap(q->src, 8)))
			return MORI_EINVAL;
		amo_exec(r, theirs + q->dst, code, q->width, q->value, q->cmp,
			 q->amo & MORI_SHMEM_AMO_FETCH ? mine + q->src : 0);
		return 0;
	case MORI_SHMEM_OP_QUIET:
	case MORI_SHMEM_OP_FENCE:
		return 0;
	default:
		return MORI_EPROTO;
	}
}

static void *morid_main(void *arg)
{
	struct rig *r = arg;
	if (gpu_push(g, D))
		return NULL;
	while (!r->stop) {
		int busy = 0;
		for (int p = 0; p < r->n; p++) {
			struct pe *e = &r->pe[p];
			struct mori_shmem_preq *ring = (void *)((char *)e->ctrl + MORI_SHMEM_CTRL_BYTES);
			struct mori_shmem_preq *slot = &ring[e->served & (RING - 1)];
			if (__atomic_load_n(&slot->ready, __ATOMIC_ACQUIRE) != (uint32_t)(e->served + 1))
				continue;
			struct mori_shmem_preq q;
			memcpy(&q, slot, sizeof(q)); /* copy, then check */
			int rc = serve(r, p, &q);
			if (rc && !e->ctrl->error)
				e->ctrl->error = rc;
			e->served++;
			__atomic_store_n(&e->ctrl->done, e->served, __ATOMIC_RELEASE); /* after the bytes */
			busy = 1;
		}
		if (!busy)
			sched_yield();
	}
	gpu_pop(g);
	return NULL;
}

static void morid_start(struct rig *r)
{
	CKR(g->stream_create(&r->ms, GPU_STREAM_NON_BLOCKING));
	ck_assert_int_eq(pthread_create(&r->morid, NULL, morid_main, r), 0);
	r->running = 1;
}

/* ---- launching ---- */

/* Launch kernel k on every PE in `who` (a bit mask) with its args, then wait: a kernel still
 * running after limit_s gets the abort word, so a hang fails the test instead of wedging it. */
static double run_all(struct rig *r, int k, unsigned grid, unsigned who, double limit_s)
{
	for (int p = 0; p < r->n; p++) {
		struct pe *e = &r->pe[p];
		if (!(who >> p & 1))
			continue;
		memset(e->out, 0, sizeof(e->out));
		e->a.out = e->out_d;
		CKR(g->memcpy_htod_async(e->out_d, e->out, sizeof(e->out), e->s));
		CKR(g->memcpy_htod_async(e->args_d, &e->a, sizeof(e->a), e->s));
		CKR(g->stream_synchronize(e->s));
	}
	double t0 = now_s();
	for (int p = 0; p < r->n; p++) {
		if (!(who >> p & 1))
			continue;
		void *params[] = {&r->pe[p].args_d};
		CKR(g->launch_kernel(r->pe[p].fn[k], grid, 1, 1, SDEV_THREADS, 1, 1, 0, r->pe[p].s, params, NULL));
	}
	int aborted = 0;
	for (int p = 0; p < r->n; p++) {
		if (!(who >> p & 1))
			continue;
		int q;
		while ((q = g->stream_query(r->pe[p].s)) == GPU_ERROR_NOT_READY) {
			if (!aborted && now_s() - t0 > limit_s) {
				for (int i = 0; i < r->n; i++)
					r->pe[i].ctrl->abort = MORI_SHMEM_ABORT_TIMEOUT;
				aborted = 1;
			}
			usleep(100);
		}
		CKR(q);
	}
	double dt = now_s() - t0;
	for (int p = 0; p < r->n; p++)
		if (who >> p & 1)
			CKR(g->memcpy_dtoh_async(r->pe[p].out, r->pe[p].out_d, sizeof(r->pe[p].out), NULL));
	CKR(g->stream_synchronize(NULL));
	ck_assert_msg(!aborted, "%s: still running after %.0f s (aborted)", knames[k], limit_s);
	return dt;
}

static void expect_clean(const struct rig *r, const char *what)
{
	for (int p = 0; p < r->n; p++) {
		const long long *o = r->pe[p].out;
		ck_assert_msg(o[SDEV_OUT_RC] == 0, "%s: PE %d: rc %lld at %lld", what, p, o[SDEV_OUT_RC], o[SDEV_OUT_WHERE]);
		ck_assert_msg(o[SDEV_OUT_DONE] == 1, "%s: PE %d did not finish", what, p);
		ck_assert_msg(o[SDEV_OUT_BAD] == 0, "%s: PE %d: %lld wrong (first in round %lld)", what, p,
			      o[SDEV_OUT_BAD], o[SDEV_OUT_FIRST_BAD] - 1);
	}
	for (int p = 0; p < r->n; p++)
		ck_assert_msg(r->pe[p].ctrl->error == 0, "%s: PE %d: proxy error %d", what, p, r->pe[p].ctrl->error);
}

static unsigned all(const struct rig *r) { return (1u << r->n) - 1; }

/* ---- puts and gets of random sizes and alignments at each scope ---- */

static const unsigned tsize[4] = {4, 8, 4, 8};

/* A script of nops ops for PE p; every destination range is its own (puts land in slot p of
 * the target's receive area, gets in p's get area), sources are the PEs' source areas. The
 * model: recv[t] and getb[p] images, applied as the ops are generated. */
static void make_ops(const struct rig *r, int p, uint64_t *seed, struct sdev_op *ops, int nops, int proxy_ok,
		     uint8_t **src, uint8_t **recv, uint8_t **getb)
{
	uint64_t pcur[MAXPE] = {0}, gcur = 0;
	for (int i = 0; i < nops; i++) {
		struct sdev_op o = {.kind = (uint32_t)(test_rand(seed) % SDEV_KINDS), .scope = (uint32_t)(test_rand(seed) % 3),
				    .type = (uint32_t)(test_rand(seed) % 4)};
		do
			o.pe = (int)(test_rand(seed) % r->n);
		while (!proxy_ok && !same_node(r, p, o.pe));
		int typed = o.kind >= SDEV_PUT_T_NBI, single = o.kind >= SDEV_P_T;
		unsigned es = typed ? tsize[o.type] : 1;
		if (single)
			o.scope = SDEV_THREAD;
		uint64_t len = single ? es : 1 + test_rand(seed) % (test_rand(seed) & 1 ? 64 : 48u << 10);
		len = (len + es - 1) / es * es;
		uint64_t so = test_rand(seed) % (SRC_SIZE - len) / es * es;
		int put = o.kind == SDEV_PUTMEM_NBI || o.kind == SDEV_PUT_T_NBI || o.kind == SDEV_P_T;
		uint64_t *cur = put ? &pcur[o.pe] : &gcur;
		uint64_t limit = put ? SLOT : GETB_SIZE;
		uint64_t d = (*cur + test_rand(seed) % 64 + es - 1) / es * es;
		if (d + len > limit)
			break; /* the area is full: the script ends here */
		*cur = d + len;
		if (put) {
			o.dst = sym(r, p, RECV_OFF + (uint64_t)p * SLOT + d); /* symmetric: names o.pe's */
			o.src = sym(r, p, SRC_OFF + so);
			memcpy(recv[o.pe] + (uint64_t)p * SLOT + d, src[p] + so, len);
		} else {
			o.dst = sym(r, p, GETB_OFF + d);
			o.src = sym(r, p, SRC_OFF + so);
			memcpy(getb[p] + d, src[o.pe] + so, len);
		}
		o.len = typed && !single ? len / es : len;
		ops[i] = o;
	}
}

static void check_ops(int n, int split, int nops, uint64_t seed)
{
	struct rig r;
	rig_open(&r, n, split);
	if (split < n)
		morid_start(&r);
	uint8_t *src[MAXPE], *recv[MAXPE], *getb[MAXPE], *got = malloc(GETB_SIZE > MAXPE * SLOT ? GETB_SIZE : MAXPE * SLOT);
	for (int p = 0; p < n; p++) {
		src[p] = malloc(SRC_SIZE);
		recv[p] = calloc(1, MAXPE * SLOT);
		getb[p] = calloc(1, GETB_SIZE);
		for (size_t i = 0; i < SRC_SIZE; i++)
			src[p][i] = (uint8_t)(test_rand(&seed) >> 56);
		CKR(g->memcpy_htod_async(sym(&r, p, SRC_OFF), src[p], SRC_SIZE, NULL));
	}
	struct sdev_op *ops = calloc((size_t)nops, sizeof(*ops));
	gpu_dptr ops_d[MAXPE];
	for (int p = 0; p < n; p++) {
		memset(ops, 0, (size_t)nops * sizeof(*ops));
		make_ops(&r, p, &seed, ops, nops, split < n, src, recv, getb);
		int k = 0;
		while (k < nops && ops[k].len)
			k++;
		CKR(g->mem_alloc(&ops_d[p], (size_t)nops * sizeof(*ops)));
		CKR(g->memcpy_htod_async(ops_d[p], ops, (size_t)nops * sizeof(*ops), NULL));
		r.pe[p].a = (struct sdev_args){.ops = ops_d[p], .n_ops = (uint32_t)k};
	}
	CKR(g->stream_synchronize(NULL));
	double dt = run_all(&r, K_OPS, 1, all(&r), 60);
	expect_clean(&r, "ops");
	for (int p = 0; p < n; p++) {
		CKR(g->memcpy_dtoh_async(got, sym(&r, p, RECV_OFF), MAXPE * SLOT, NULL));
		CKR(g->stream_synchronize(NULL));
		long long d = gpu_first_diff(got, recv[p], MAXPE * SLOT);
		ck_assert_msg(d < 0, "ops: PE %d receive area differs at slot %lld +%lld", p, d / SLOT, d % SLOT);
		CKR(g->memcpy_dtoh_async(got, sym(&r, p, GETB_OFF), GETB_SIZE, NULL));
		CKR(g->stream_synchronize(NULL));
		d = gpu_first_diff(got, getb[p], GETB_SIZE);
		ck_assert_msg(d < 0, "ops: PE %d get area differs at %lld", p, d);
		g->mem_free(ops_d[p]);
		free(src[p]);
		free(recv[p]);
		free(getb[p]);
	}
	printf("ops: %d PEs (%s), %d ops each, checked in %.3f s\n", n, split < n ? "proxy across 2 nodes" : "direct",
	       nops, dt);
	free(ops);
	free(got);
	rig_close(&r);
}

START_TEST(ops_direct)
{
	uint64_t seed = test_seed();
	for (int n = 2; n <= MAXPE; n += 3)
		check_ops(n, n, 96, seed + (uint64_t)n);
}
END_TEST

START_TEST(ops_proxy)
{
	check_ops(4, 2, 64, test_seed());
}
END_TEST

/* ---- put+signal around the ring ---- */

static void check_ring(int n, int split, int rounds)
{
	struct rig r;
	rig_open(&r, n, split);
	if (split < n)
		morid_start(&r);
	for (int p = 0; p < n; p++)
		r.pe[p].a = (struct sdev_args){.rounds = rounds, .buf = sym(&r, p, RBUF_OFF), .src = sym(&r, p, RSRC_OFF),
					       .sig = sym(&r, p, SIG_OFF), .ack = sym(&r, p, ACK_OFF),
					       .maxlen = 64u << 10};
	double dt = run_all(&r, K_RING, 1, all(&r), 120);
	expect_clean(&r, "ring");
	printf("ring: %d PEs (%s), %d rounds of put+signal, every byte checked: %.3f s (%.1f us a round)\n", n,
	       split < n ? "proxy" : "direct", rounds, dt, dt * 1e6 / rounds);
	rig_close(&r);
}

START_TEST(ring_direct)
{
	for (int n = 2; n <= MAXPE; n++)
		check_ring(n, n, 1000);
}
END_TEST

START_TEST(ring_proxy)
{
	check_ring(4, 2, 1000);
}
END_TEST

/* ---- fetch-add: every PE on one counter ---- */

static void check_fadd(int n, int split, uint64_t per_pe, unsigned grid)
{
	struct rig r;
	rig_open(&r, n, split);
	if (split < n)
		morid_start(&r);
	uint64_t total = per_pe * (uint64_t)n, words = (total + 31) / 32;
	gpu_dptr bitmap;
	CKR(g->mem_alloc(&bitmap, words * 4));
	CKR(g->memset_d8_async(bitmap, 0, words * 4, NULL));
	int target = n - 1; /* on node B when split: node A's PEs reach it through the proxy */
	for (int p = 0; p < n; p++)
		r.pe[p].a = (struct sdev_args){.target_pe = target, .ctr64 = sym(&r, p, C64_OFF), .ctr32 = sym(&r, p, C32_OFF),
					       .ctr_nf = sym(&r, p, CNF_OFF), .bitmap = bitmap, .total = per_pe,
					       .maxlen = (uint32_t)words};
	double dt = run_all(&r, K_FADD, grid, all(&r), 120);
	expect_clean(&r, "fadd");
	uint64_t c[5];
	CKR(g->memcpy_dtoh_async(c, sym(&r, target, C64_OFF), 8, NULL));
	CKR(g->memcpy_dtoh_async(&c[1], sym(&r, target, C32_OFF), 8, NULL));
	CKR(g->memcpy_dtoh_async(&c[2], sym(&r, target, CNF_OFF), 8, NULL));
	uint32_t *bits = malloc(words * 4);
	CKR(g->memcpy_dtoh_async(bits, bitmap, words * 4, NULL));
	CKR(g->stream_synchronize(NULL));
	ck_assert_uint_eq(c[0], total);
	ck_assert_uint_eq((uint32_t)c[1], total);
	ck_assert_uint_eq(c[2], 2 * total);
	long long dups = 0;
	for (int p = 0; p < n; p++)
		dups += r.pe[p].out[SDEV_OUT_DUPS];
	ck_assert_msg(dups == 0, "fadd: %lld values fetched twice", dups);
	for (uint64_t v = 0; v < total; v++)
		ck_assert_msg(bits[v / 32] >> (v % 32) & 1, "fadd: value %llu never fetched", (unsigned long long)v);
	printf("fadd: %d PEs (%s) x %llu fetch-adds (64 and 32 bit) + adds on one word: exact total %llu, each "
	       "value fetched once, %.3f s (%.2f M fetch-adds/s)\n",
	       n, split < n ? "proxy" : "direct", (unsigned long long)per_pe, (unsigned long long)total, dt,
	       total / dt / 1e6);
	free(bits);
	g->mem_free(bitmap);
	rig_close(&r);
}

START_TEST(fadd_direct)
{
	check_fadd(8, 8, 100000, 4);
	check_fadd(3, 3, 100000, 2);
}
END_TEST

START_TEST(fadd_proxy)
{
	check_fadd(4, 2, 2000, 1);
}
END_TEST

/* ---- the atomics' results, against a model ---- */

struct amo_step { int op, width; uint64_t v, cmp; };
static const struct amo_step amo_steps[] = {
	{MORI_SHMEM_ATOMIC_SET, 8, 5, 0},         {MORI_SHMEM_ATOMIC_FETCH_ADD, 8, 3, 0},
	{MORI_SHMEM_ATOMIC_ADD, 8, 10, 0},        {MORI_SHMEM_ATOMIC_INC, 8, 0, 0},
	{MORI_SHMEM_ATOMIC_FETCH_INC, 8, 0, 0},   {MORI_SHMEM_ATOMIC_FETCH_AND, 8, 0xfc, 0},
	{MORI_SHMEM_ATOMIC_OR, 8, 0x100, 0},      {MORI_SHMEM_ATOMIC_FETCH_XOR, 8, 0xff, 0},
	{MORI_SHMEM_ATOMIC_SWAP, 8, 1ull << 40, 0}, {MORI_SHMEM_ATOMIC_COMPARE_SWAP, 8, 7, 99},
	{MORI_SHMEM_ATOMIC_COMPARE_SWAP, 8, 7, 1ull << 40}, {MORI_SHMEM_ATOMIC_FETCH, 8, 0, 0},
	{MORI_SHMEM_ATOMIC_SET, 4, 0xfffffff0u, 0}, {MORI_SHMEM_ATOMIC_FETCH_ADD, 4, 0x20, 0},
	{MORI_SHMEM_ATOMIC_AND, 4, 0xf0, 0},      {MORI_SHMEM_ATOMIC_FETCH_OR, 4, 0x0f, 0},
	{MORI_SHMEM_ATOMIC_XOR, 4, 0x3, 0},       {MORI_SHMEM_ATOMIC_FETCH_INC, 4, 0, 0},
	{MORI_SHMEM_ATOMIC_COMPARE_SWAP, 4, 42, 0xfd}, {MORI_SHMEM_ATOMIC_FETCH, 4, 0, 0},
};
#define NSTEPS ((int)(sizeof(amo_steps) / sizeof(amo_steps[0])))
_Static_assert(NSTEPS == SDEV_AMO_STEPS, "steps");

/* The model: apply step s to *w (width 4 or 8); the value the step returns (0 when it does not
 * fetch: the non-fetch forms return their status). */
static uint64_t model_step(const struct amo_step *s, uint64_t *w64, uint32_t *w32)
{
	int fetch = s->op >= MORI_SHMEM_ATOMIC_FETCH;
	uint64_t old = s->width == 8 ? *w64 : *w32, v = s->v, nv = old;
	switch (s->op) {
	case MORI_SHMEM_ATOMIC_SET: case MORI_SHMEM_ATOMIC_SWAP: nv = v; break;
	case MORI_SHMEM_ATOMIC_ADD: case MORI_SHMEM_ATOMIC_FETCH_ADD: nv = old + v; break;
	case MORI_SHMEM_ATOMIC_INC: case MORI_SHMEM_ATOMIC_FETCH_INC: nv = old + 1; break;
	case MORI_SHMEM_ATOMIC_AND: case MORI_SHMEM_ATOMIC_FETCH_AND: nv = old & v; break;
	case MORI_SHMEM_ATOMIC_OR: case MORI_SHMEM_ATOMIC_FETCH_OR: nv = old | v; break;
	case MORI_SHMEM_ATOMIC_XOR: case MORI_SHMEM_ATOMIC_FETCH_XOR: nv = old ^ v; break;
	case MORI_SHMEM_ATOMIC_COMPARE_SWAP: nv = old == s->cmp ? v : old; break;
	default: break; /* FETCH */
	}
	if (s->width == 8)
		*w64 = nv;
	else
		*w32 = (uint32_t)nv;
	return fetch ? old : 0;
}

static void check_amo(int n, int split)
{
	struct rig r;
	rig_open(&r, n, split);
	if (split < n)
		morid_start(&r);
	struct sdev_wait st[SDEV_WAITS] = {{0}};
	for (int i = 0; i < NSTEPS; i++)
		st[i] = (struct sdev_wait){.type = (uint32_t)amo_steps[i].width, .cmp = amo_steps[i].op,
					   .init = (int64_t)amo_steps[i].v, .value = (int64_t)amo_steps[i].cmp};
	gpu_dptr st_d, f_d[MAXPE];
	CKR(g->mem_alloc(&st_d, sizeof(st)));
	CKR(g->memcpy_htod_async(st_d, st, sizeof(st), NULL));
	for (int p = 0; p < n; p++) {
		CKR(g->mem_alloc(&f_d[p], 32 * 8));
		r.pe[p].a = (struct sdev_args){.rounds = NSTEPS, .waits = st_d, .target_pe = (p + 1) % n,
					       .amo = sym(&r, p, AMO_OFF + 32ull * p), .fetched = f_d[p]};
	}
	run_all(&r, K_AMO, 1, all(&r), 60);
	expect_clean(&r, "amo");
	for (int p = 0; p < n; p++) {
		uint64_t f[32], w[3];
		CKR(g->memcpy_dtoh_async(f, f_d[p], sizeof(f), NULL));
		CKR(g->memcpy_dtoh_async(w, sym(&r, (p + 1) % n, AMO_OFF + 32ull * p), sizeof(w), NULL));
		CKR(g->stream_synchronize(NULL));
		uint64_t m64 = 0;
		uint32_t m32 = 0;
		for (int i = 0; i < NSTEPS; i++) {
			uint64_t want = model_step(&amo_steps[i], &m64, &m32);
			ck_assert_msg(f[i] == want, "amo: PE %d step %d (op %d, %d bytes): got %#llx, model %#llx", p, i,
				      amo_steps[i].op, amo_steps[i].width, (unsigned long long)f[i], (unsigned long long)want);
		}
		ck_assert_uint_eq(w[0], m64);
		ck_assert_uint_eq((uint32_t)w[1], m32);
		ck_assert_int_eq((int64_t)f[NSTEPS], -5);
		ck_assert_int_eq((int64_t)f[NSTEPS + 1], -2);
		ck_assert_int_eq((int64_t)f[NSTEPS + 2], -9);
		ck_assert_int_eq((int64_t)w[2], -9);
		g->mem_free(f_d[p]);
	}
	printf("amo: %d PEs (%s): %d atomics (set add inc and or xor swap compare-swap fetch*, 32 and 64 bit, "
	       "generic and OpenSHMEM forms) + signed 64-bit: every result as the model\n",
	       n, split < n ? "proxy" : "direct", NSTEPS);
	g->mem_free(st_d);
	rig_close(&r);
}

START_TEST(amo_direct)
{
	check_amo(4, 4);
}
END_TEST

START_TEST(amo_proxy)
{
	check_amo(4, 2);
}
END_TEST

/* ---- a compare-swap lock ---- */

static void check_lock(int n, int split, int iters)
{
	struct rig r;
	rig_open(&r, n, split);
	if (split < n)
		morid_start(&r);
	int target = n - 1;
	for (int p = 0; p < n; p++)
		r.pe[p].a = (struct sdev_args){.rounds = iters, .target_pe = target, .ctr64 = sym(&r, p, C64_OFF),
					       .ctr32 = sym(&r, p, C32_OFF)};
	double dt = run_all(&r, K_LOCK, 1, all(&r), 120);
	expect_clean(&r, "lock");
	uint64_t c, l;
	CKR(g->memcpy_dtoh_async(&c, sym(&r, target, C64_OFF), 8, NULL));
	CKR(g->memcpy_dtoh_async(&l, sym(&r, target, C32_OFF), 8, NULL));
	CKR(g->stream_synchronize(NULL));
	ck_assert_uint_eq(c, (uint64_t)n * iters);
	ck_assert_uint_eq(l, 0);
	printf("lock: %d PEs (%s) x %d compare-swap lock rounds (get, put, quiet, swap): counter exact, %.3f s "
	       "(%.1f us a hand-over)\n",
	       n, split < n ? "proxy" : "direct", iters, dt, dt * 1e6 / ((double)n * iters));
	rig_close(&r);
}

START_TEST(lock_direct)
{
	check_lock(8, 8, 2000);
}
END_TEST

START_TEST(lock_proxy)
{
	check_lock(4, 2, 100);
}
END_TEST

/* ---- wait_until on each comparison ---- */

static void wait_table(struct sdev_wait *w)
{
	/* per comparison: start, value, the writes (only the last satisfies) */
	static const int64_t base[6][6] = {
		{0, 5, 1, 2, 5, 3},       /* EQ: start 0, wait == 5, writes 1 2 5 */
		{7, 7, 7, 8, 0, 2},       /* NE: start 7, wait != 7, writes 7 8 */
		{-3, 10, 5, 10, 11, 3},   /* GT */
		{-3, 10, 9, 10, 0, 2},    /* GE */
		{20, -4, 15, -4, -5, 3},  /* LT */
		{20, 10, 11, 10, 0, 2},   /* LE */
	};
	for (int t = 0; t < 4; t++)
		for (int c = 0; c < 6; c++) {
			struct sdev_wait *x = &w[t * 6 + c];
			const int64_t *b = base[c];
			int unsig = t == 1 || t == 3;
			*x = (struct sdev_wait){.type = (uint32_t)t, .cmp = c, .init = b[0], .value = b[1],
						.nseq = (uint32_t)b[5]};
			for (int k = 0; k < 3; k++)
				x->seq[k] = b[2 + k];
			if (unsig) { /* no negative numbers for the unsigned words: shift everything up */
				x->init += 100;
				x->value += 100;
				for (int k = 0; k < 3; k++)
					x->seq[k] += 100;
			}
		}
}

static void check_wait(int n, int split)
{
	struct rig r;
	rig_open(&r, n, split);
	if (split < n)
		morid_start(&r);
	struct sdev_wait w[SDEV_WAITS];
	wait_table(w);
	gpu_dptr w_d;
	CKR(g->mem_alloc(&w_d, sizeof(w)));
	CKR(g->memcpy_htod_async(w_d, w, sizeof(w), NULL));
	for (int p = 0; p < n; p++) {
		uint8_t img[256] = {0};
		for (int i = 0; i < SDEV_WAITS; i++) {
			if (w[i].type == 0) {
				int32_t v = (int32_t)w[i].init;
				memcpy(img + 4 * i, &v, 4);
			} else {
				memcpy(img + 64 + 8 * i, &w[i].init, 8);
			}
		}
		CKR(g->memcpy_htod_async(sym(&r, p, WAITW_OFF), img, sizeof(img), NULL));
		r.pe[p].a = (struct sdev_args){.waits = w_d, .words = sym(&r, p, WAITW_OFF)};
	}
	CKR(g->stream_synchronize(NULL));
	run_all(&r, K_WAIT, 1, all(&r), 60);
	expect_clean(&r, "wait");
	for (int p = 0; p < n; p++)
		for (int i = 0; i < SDEV_WAITS; i++) {
			int64_t want = w[i].seq[w[i].nseq - 1], got = r.pe[p].out[SDEV_OUT_SEEN + i];
			ck_assert_msg(got == want, "wait: PE %d case %d (type %u cmp %d): saw %lld, expected %lld", p, i,
				      w[i].type, w[i].cmp, (long long)got, (long long)want);
		}
	printf("wait: %d PEs (%s): wait_until EQ NE GT GE LT LE on int32 (also the ROCm forms), uint64, int64 "
	       "and signal_wait_until: each ended on the one satisfying write\n",
	       n, split < n ? "proxy" : "direct");
	g->mem_free(w_d);
	rig_close(&r);
}

START_TEST(wait_direct)
{
	check_wait(3, 3);
}
END_TEST

START_TEST(wait_proxy)
{
	check_wait(4, 2);
}
END_TEST

/* ---- barriers ---- */

static void check_barrier(int n, int split, int rounds)
{
	struct rig r;
	rig_open(&r, n, split);
	if (split < n)
		morid_start(&r);
	for (int p = 0; p < n; p++)
		r.pe[p].a = (struct sdev_args){.rounds = rounds, .words = sym(&r, p, BARW_OFF)};
	double dt = run_all(&r, K_BARRIER, 1, all(&r), 120);
	expect_clean(&r, "barrier");
	printf("barrier: %d PEs (%s): %d rounds of put, barrier_all (block/thread), check, sync_all: %.1f us a "
	       "round\n",
	       n, split < n ? "proxy" : "direct", rounds, dt * 1e6 / rounds);
	rig_close(&r);
}

START_TEST(barrier_direct)
{
	for (int n = 2; n <= MAXPE; n *= 2)
		check_barrier(n, n, 500);
}
END_TEST

START_TEST(barrier_proxy)
{
	check_barrier(4, 2, 50);
}
END_TEST

/* ---- the abort word ends every wait ---- */

static void check_abort(int which, int split, enum mori_shmem_abort why, int want)
{
	struct rig r;
	rig_open(&r, 2, split);
	for (int p = 0; p < 2; p++)
		r.pe[p].a = (struct sdev_args){.which = which, .words = sym(&r, p, WAITW_OFF), .target_pe = 1};
	struct pe *e = &r.pe[0];
	memset(e->out, 0, sizeof(e->out));
	e->a.out = e->out_d;
	CKR(g->memcpy_htod_async(e->out_d, e->out, sizeof(e->out), NULL));
	CKR(g->memcpy_htod_async(e->args_d, &e->a, sizeof(e->a), NULL));
	CKR(g->stream_synchronize(NULL));
	void *params[] = {&e->args_d};
	CKR(g->launch_kernel(e->fn[K_ABORT], 1, 1, 1, SDEV_THREADS, 1, 1, 0, e->s, params, NULL));
	usleep(300000);
	ck_assert_msg(g->stream_query(e->s) == GPU_ERROR_NOT_READY, "abort %d: the wait ended by itself", which);
	double t0 = now_s();
	e->ctrl->abort_pe = 1;
	__atomic_store_n(&e->ctrl->abort, (uint32_t)why, __ATOMIC_RELEASE);
	int q;
	while ((q = g->stream_query(e->s)) == GPU_ERROR_NOT_READY && now_s() - t0 < 10)
		usleep(50);
	double dt = now_s() - t0;
	CKR(q);
	CKR(g->memcpy_dtoh_async(e->out, e->out_d, sizeof(e->out), NULL));
	CKR(g->stream_synchronize(NULL));
	static const char *const what[] = {"wait_until", "barrier_all_block", "quiet on the proxy"};
	ck_assert_msg(dt < 1.0, "abort: %s took %.3f s to end", what[which], dt);
	ck_assert_int_eq(e->out[SDEV_OUT_DONE], 1);
	ck_assert_msg(e->out[SDEV_OUT_RC] == want, "abort: %s returned %lld, expected %d", what[which],
		      e->out[SDEV_OUT_RC], want);
	printf("abort: %s ended %.1f ms after the abort word was set, returning %s\n", what[which], dt * 1e3,
	       mori_strerror(want));
	rig_close(&r);
}

START_TEST(abort_waits)
{
	check_abort(0, 2, MORI_SHMEM_ABORT_PEER_DEAD, MORI_EPEERDEAD);
	check_abort(1, 2, MORI_SHMEM_ABORT_TEARDOWN, MORI_ECANCELED);
	check_abort(2, 1, MORI_SHMEM_ABORT_TIMEOUT, MORI_ETIMEDOUT); /* PE 1 on another node, no morid */
}
END_TEST

/* ---- libmori's kernels: barrier_on_stream and quiet_on_stream (state as an argument) ---- */

static void check_stream_kernels(int n, int split, int rounds)
{
	struct rig r;
	rig_open(&r, n, split);
	if (split < n)
		morid_start(&r);
	gpu_function fn, bar, quiet;
	int sm;
	ck_assert_int_eq(gpu_copy_kernel(&C, 0, &fn, &sm), MORI_OK); /* loads libmori's image */
	CKR(g->module_get_function(&bar, D->module, MORI_SHMEM_BARRIER_KERNEL));
	CKR(g->module_get_function(&quiet, D->module, MORI_SHMEM_QUIET_KERNEL));
	gpu_dptr rc_d;
	int rcs[2 * MAXPE];
	memset(rcs, 0xff, sizeof(rcs));
	CKR(g->mem_alloc(&rc_d, sizeof(rcs)));
	CKR(g->memcpy_htod_async(rc_d, rcs, sizeof(rcs), NULL));
	CKR(g->stream_synchronize(NULL));
	double t0 = now_s();
	for (int i = 0; i < rounds; i++)
		for (int p = 0; p < n; p++) {
			gpu_dptr rp = rc_d + 4ull * p;
			void *params[] = {&r.pe[p].state, &rp};
			CKR(g->launch_kernel(bar, 1, 1, 1, MORI_SHMEM_KERNEL_THREADS, 1, 1, 0, r.pe[p].s, params, NULL));
		}
	for (int p = 0; p < n; p++) {
		gpu_dptr rp = rc_d + 4ull * (MAXPE + p);
		void *params[] = {&r.pe[p].state, &rp};
		CKR(g->launch_kernel(quiet, 1, 1, 1, 1, 1, 1, 0, r.pe[p].s, params, NULL));
	}
	for (int p = 0; p < n; p++)
		CKR(g->stream_synchronize(r.pe[p].s));
	double dt = now_s() - t0;
	CKR(g->memcpy_dtoh_async(rcs, rc_d, sizeof(rcs), NULL));
	CKR(g->stream_synchronize(NULL));
	for (int p = 0; p < n; p++) {
		uint64_t epoch;
		CKR(g->memcpy_dtoh_async(&epoch, sym(&r, p, MORI_SHMEM_OFF_BAR_EPOCH), 8, NULL));
		CKR(g->stream_synchronize(NULL));
		ck_assert_msg(rcs[p] == 0 && rcs[MAXPE + p] == 0, "PE %d: barrier_on_stream %d, quiet_on_stream %d", p,
			      rcs[p], rcs[MAXPE + p]);
		ck_assert_uint_eq(epoch, (uint64_t)rounds);
	}
	printf("stream kernels: %d PEs (%s): %d x %s then %s, each launch from libmori's image: %.1f us a "
	       "barrier (launch included)\n",
	       n, split < n ? "proxy" : "direct", rounds, MORI_SHMEM_BARRIER_KERNEL, MORI_SHMEM_QUIET_KERNEL,
	       dt * 1e6 / rounds);
	g->mem_free(rc_d);
	rig_close(&r);
}

START_TEST(stream_kernels)
{
	check_stream_kernels(4, 4, 200);
	check_stream_kernels(4, 2, 20);
}
END_TEST

/* Without a GPU or without nvcc-built test kernels, say so and skip. */
static void skip_unless_kernels(void)
{
	gpu_skip_unless_ready();
	if (!mori_kernels_shmemtest_image_len) {
		printf("skipped: no test kernels (built without nvcc)\n");
		exit(77);
	}
}

int main(int argc, char **argv)
{
	skip_unless_kernels();
	Suite *s = suite_create("gpu_shmem_dev");
	TCase *t = tcase_create("direct");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 300);
	tcase_add_test(t, ops_direct);
	tcase_add_test(t, ring_direct);
	tcase_add_test(t, fadd_direct);
	tcase_add_test(t, amo_direct);
	tcase_add_test(t, lock_direct);
	tcase_add_test(t, wait_direct);
	tcase_add_test(t, barrier_direct);
	tcase_add_test(t, abort_waits);
	suite_add_tcase(s, t);
	TCase *px = tcase_create("proxy");
	tcase_add_checked_fixture(px, setup, teardown);
	tcase_set_timeout(px, 300);
	tcase_add_test(px, ops_proxy);
	tcase_add_test(px, ring_proxy);
	tcase_add_test(px, fadd_proxy);
	tcase_add_test(px, amo_proxy);
	tcase_add_test(px, lock_proxy);
	tcase_add_test(px, wait_proxy);
	tcase_add_test(px, barrier_proxy);
	tcase_add_test(px, stream_kernels);
	suite_add_tcase(s, px);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	(void)argc;
	(void)argv;
	return failed ? 1 : 0;
}
