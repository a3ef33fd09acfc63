/* MORI-SHMEM's device API between processes: N forked processes on the one GPU are N PEs of a
 * group formed through morid ($MORI_SHMEM_PES, default 8), VRAM heaps that morid brokers, each PE
 * loading the test kernels (tests/shmem_dev_kernels.cu) and filling their mori_shmem_state_ptr
 * with mori_shmem_module_init, as an application would. Checked: put+signal around the ring
 * (1 000 rounds, every PE checking its neighbour's bytes at the signal), every PE fetch-adding
 * one word 100 000 times (exact total, no value fetched twice), the atomics against a model, a
 * compare-swap lock, wait_until on every comparison, barriers, and a PE killed while its peers
 * wait: their kernels return MORI_EPEERDEAD within a second. Ordering (sdev_order): the scopes the
 * state chose (GPU towards PEs on this GPU, system otherwise: checked against which device each PE
 * opened) and 20 000 rounds of data then flag, the reader checking every word at the flag, on one
 * GPU and, where the machine has several, with the PEs spread over them.
 * Kernels of different processes run concurrently only under MPS: the test starts its own MPS
 * control daemon (its own pipe and log directories) where nvidia-cuda-mps-control exists and none
 * was given ($CUDA_MPS_PIPE_DIRECTORY), gives each PE CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / N,
 * and says whether MPS ran. Without a GPU: "skipped: no GPU" (77). */
#include <check.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>

#include "gpu.h"
#include "gpu_harness.h"
#include "pe_harness.h"
#include "mori_shmem.h"
#include "shmem_dev.h"
#include "shmem_layout.h"

extern const unsigned char mori_kernels_shmemtest_image[];
extern const size_t mori_kernels_shmemtest_image_len;

#define HEAP (32u << 20)
#define MAXPE 8
#define AREA (1u << 20) /* one symmetric allocation holds every case's words */
#define A_RBUF 0
#define A_RSRC (64u << 10)
#define A_SIG (128u << 10)
#define A_ACK (A_SIG + 64)
#define A_C64 (A_SIG + 128)
#define A_C32 (A_SIG + 192)
#define A_CNF (A_SIG + 256)
#define A_WAIT (A_SIG + 4096)
#define A_AMO (A_SIG + 8192)
#define A_BAR (A_SIG + 12288)
#define A_OSIG (A_SIG + 320) /* ordering: its signal and ack words (zero until then) */
#define A_OACK (A_SIG + 384)
#define ORDER_ROUNDS 20000
#define ORDER_WORDS 512
#define A_BITS (256u << 10)  /* fetch-add bitmap: 8 x 100 000 bits */
#define FADD_PER_PE 100000

static struct test_daemon D;
static int NPES = 8;
static const char *mps_note = "MPS off";

struct shared {
	char msg[MAXPE][PE_MSG_LEN];
	double killed_at;
	double waited[MAXPE];
	int gpus; /* devices the PEs saw (the ordering case across GPUs) */
};
static struct shared *SH;

static void setup(void)
{
	pe_shared_map(SH);
	ck_assert_int_eq(daemon_start(&D, NULL), 0);
}

static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
	pe_shared_unmap(SH);
}

/* ---- one PE ---- */

struct pe {
	int me, n;
	const struct gpu_api *g;
	mori_client *c;
	mori_group *grp;
	gpu_module mod;
	gpu_stream s;
	uint8_t *area;   /* symmetric: this PE's address of the case words */
	gpu_dptr args_d, out_d;
	long long out[SDEV_OUT_N];
};

static int pe_open_on(struct pe *p, int me, int n, const char *name, int ordinal)
{
	gpu_mps_share(n); /* before the driver starts */
	memset(p, 0, sizeof(*p));
	p->me = me;
	p->n = n;
	p->g = gpu_ctx_current(ordinal);
	PCHECK(me, p->g, "no GPU context: %s", gpu_unavailable_reason());
	POK(me, mori_client_open(D.dir, "shmem-pe", &p->c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_kind = MORI_MEM_VRAM;
	o.heap_size = HEAP;
	o.gpu_device = ordinal;
	o.timeout_us = 60000000;
	POK(me, mori_shmem_init(p->c, name, me, n, &o, &p->grp));
	GOK(me, p->g->module_load_data(&p->mod, mori_kernels_shmemtest_image));
	POK(me, mori_shmem_module_init(p->grp, p->mod)); /* the module's mori_shmem_state_ptr */
	POK(me, mori_shmem_calloc(p->grp, AREA, 4096, (void **)&p->area));
	GOK(me, p->g->stream_create(&p->s, GPU_STREAM_NON_BLOCKING));
	GOK(me, p->g->mem_alloc(&p->args_d, sizeof(struct sdev_args)));
	GOK(me, p->g->mem_alloc(&p->out_d, sizeof(p->out)));
	return 0;
}

static int pe_open(struct pe *p, int me, int n, const char *name) { return pe_open_on(p, me, n, name, 0); }

static uint64_t A(const struct pe *p, uint64_t off) { return (uint64_t)(uintptr_t)(p->area + off); }

/* Run kernel `name` with args a on this PE's stream and wait (bounded: the abort word would end
 * a hang, and alarm() ends the process). */
static int pe_run(struct pe *p, const char *name, unsigned grid, struct sdev_args *a)
{
	gpu_function f;
	GOK(p->me, p->g->module_get_function(&f, p->mod, name));
	memset(p->out, 0, sizeof(p->out));
	a->out = p->out_d;
	GOK(p->me, p->g->memcpy_htod_async(p->out_d, p->out, sizeof(p->out), p->s));
	GOK(p->me, p->g->memcpy_htod_async(p->args_d, a, sizeof(*a), p->s));
	void *params[] = {&p->args_d};
	GOK(p->me, p->g->launch_kernel(f, grid, 1, 1, SDEV_THREADS, 1, 1, 0, p->s, params, NULL));
	GOK(p->me, p->g->memcpy_dtoh_async(p->out, p->out_d, sizeof(p->out), p->s));
	GOK(p->me, p->g->stream_synchronize(p->s));
	PCHECK(p->me, p->out[SDEV_OUT_RC] == 0, "%s: rc %lld (%s) at %lld", name, p->out[SDEV_OUT_RC],
	       mori_strerror((int)p->out[SDEV_OUT_RC]), p->out[SDEV_OUT_WHERE]);
	PCHECK(p->me, p->out[SDEV_OUT_DONE] == 1, "%s did not finish", name);
	PCHECK(p->me, p->out[SDEV_OUT_BAD] == 0, "%s: %lld wrong (first in round %lld)", name, p->out[SDEV_OUT_BAD],
	       p->out[SDEV_OUT_FIRST_BAD] - 1);
	return 0;
}

/* ---- the cases, as one PE runs them ---- */

static int pe_cases(int me, int n, void *arg)
{
	struct pe P, *p = &P;
	if (pe_open(p, me, n, "dev-api"))
		return 1;
	int target = n - 1;
	struct sdev_args a = {.rounds = 1000, .buf = A(p, A_RBUF), .src = A(p, A_RSRC), .sig = A(p, A_SIG),
			      .ack = A(p, A_ACK), .maxlen = 64u << 10};
	if (pe_run(p, "sdev_ring", 1, &a))
		return 1;
	/* fetch-add: the bitmap is target's, reached through this process's mapping of its heap */
	uint64_t bits = (uint64_t)(uintptr_t)mori_shmem_ptr_p2p(p->grp, p->area + A_BITS, target);
	PCHECK(me, bits != 0, "no mapping of PE %d's heap", target);
	a = (struct sdev_args){.target_pe = target, .ctr64 = A(p, A_C64), .ctr32 = A(p, A_C32), .ctr_nf = A(p, A_CNF),
			       .bitmap = bits, .total = FADD_PER_PE, .maxlen = (FADD_PER_PE * MAXPE + 31) / 32};
	POK(me, mori_shmem_barrier_all(p->grp));
	if (pe_run(p, "sdev_fadd", 2, &a))
		return 1;
	PCHECK(me, p->out[SDEV_OUT_DUPS] == 0, "fadd: %lld values fetched twice", p->out[SDEV_OUT_DUPS]);
	POK(me, mori_shmem_barrier_all(p->grp));
	if (me == target) {
		uint64_t c[3];
		uint32_t *b = malloc((FADD_PER_PE * MAXPE + 31) / 32 * 4);
		GOK(me, p->g->memcpy_dtoh_async(c, A(p, A_C64), 8, NULL));
		GOK(me, p->g->memcpy_dtoh_async(&c[1], A(p, A_C32), 8, NULL));
		GOK(me, p->g->memcpy_dtoh_async(&c[2], A(p, A_CNF), 8, NULL));
		GOK(me, p->g->memcpy_dtoh_async(b, A(p, A_BITS), (FADD_PER_PE * (size_t)n + 31) / 32 * 4, NULL));
		GOK(me, p->g->stream_synchronize(NULL));
		uint64_t total = (uint64_t)n * FADD_PER_PE;
		PCHECK(me, c[0] == total && (uint32_t)c[1] == total && c[2] == 2 * total, "totals %llu %llu %llu of %llu",
		       (unsigned long long)c[0], (unsigned long long)(uint32_t)c[1], (unsigned long long)c[2],
		       (unsigned long long)total);
		for (uint64_t v = 0; v < total; v++)
			PCHECK(me, b[v / 32] >> (v % 32) & 1, "value %llu never fetched", (unsigned long long)v);
		free(b);
	}
	/* the lock on target's words (counter C64 is reset first, the lock word is A_ACK + 8) */
	POK(me, mori_shmem_barrier_all(p->grp));
	if (me == target)
		GOK(me, p->g->memset_d8_async(A(p, A_C64), 0, 8, NULL));
	GOK(me, p->g->stream_synchronize(NULL));
	POK(me, mori_shmem_barrier_all(p->grp));
	a = (struct sdev_args){.rounds = 500, .target_pe = target, .ctr64 = A(p, A_C64), .ctr32 = A(p, A_ACK + 8)};
	if (pe_run(p, "sdev_lock", 1, &a))
		return 1;
	POK(me, mori_shmem_barrier_all(p->grp));
	if (me == target) {
		uint64_t c;
		GOK(me, p->g->memcpy_dtoh_async(&c, A(p, A_C64), 8, NULL));
		GOK(me, p->g->stream_synchronize(NULL));
		PCHECK(me, c == (uint64_t)n * 500, "lock: counter %llu of %d", (unsigned long long)c, n * 500);
	}
	/* barriers in the kernel: 200 rounds */
	a = (struct sdev_args){.rounds = 200, .words = A(p, A_BAR)};
	if (pe_run(p, "sdev_barrier", 1, &a))
		return 1;
	/* libmori's barrier on a stream, between kernels */
	POK(me, mori_shmem_barrier_on_stream(p->grp, p->s));
	POK(me, mori_shmem_quiet_on_stream(p->grp, p->s));
	GOK(me, p->g->stream_synchronize(p->s));
	POK(me, mori_shmem_status(p->grp, NULL));
	mori_shmem_finalize(p->grp);
	mori_client_close(p->c);
	return 0;
}

/* Ordering: PE q on device q % gpus (gpus 1: all on device 0). The state says GPU scope towards
 * exactly the PEs on this PE's device and waits at GPU scope only when all are; then sdev_order. */
static int pe_order(int me, int n, void *arg)
{
	int gpus = *(const int *)arg;
	if (gpus > 1) {
		int cnt = 0;
		const struct gpu_api *g = gpu_api();
		PCHECK(me, g && !g->device_get_count(&cnt), "no GPU: %s", gpu_unavailable_reason());
		SH->gpus = cnt;
		if (cnt < 2)
			return 0; /* one GPU: the case is skipped (main says so) */
		gpus = cnt < n ? cnt : n;
	}
	struct pe P, *p = &P;
	if (pe_open_on(p, me, n, gpus > 1 ? "dev-order-gpus" : "dev-order", me % gpus))
		return 1;
	struct mori_shmem_state st;
	int32_t scope[MAXPE];
	GOK(me, p->g->memcpy_dtoh_async(&st, (gpu_dptr)(uintptr_t)mori_shmem_state(p->grp), sizeof(st), NULL));
	GOK(me, p->g->stream_synchronize(NULL));
	PCHECK(me, st.peer_scope != NULL, "the state has no peer_scope table");
	GOK(me, p->g->memcpy_dtoh_async(scope, (gpu_dptr)(uintptr_t)st.peer_scope, sizeof(int32_t) * (size_t)n, NULL));
	GOK(me, p->g->stream_synchronize(NULL));
	for (int q = 0; q < n; q++) {
		int want = q % gpus == me % gpus ? MORI_SHMEM_SCOPE_GPU : MORI_SHMEM_SCOPE_SYS;
		PCHECK(me, scope[q] == want, "peer_scope[%d] = %d, want %d (PE %d on device %d, this one on %d)", q,
		       scope[q], want, q, q % gpus, me % gpus);
	}
	int want = gpus == 1 ? MORI_SHMEM_SCOPE_GPU : MORI_SHMEM_SCOPE_SYS;
	PCHECK(me, st.wait_scope == want, "wait_scope = %d, want %d", st.wait_scope, want);
	POK(me, mori_shmem_barrier_all(p->grp));
	struct sdev_args a = {.rounds = ORDER_ROUNDS, .buf = A(p, A_RBUF), .src = A(p, A_RSRC), .sig = A(p, A_OSIG),
			      .ack = A(p, A_OACK), .maxlen = ORDER_WORDS};
	if (pe_run(p, "sdev_order", 1, &a))
		return 1;
	POK(me, mori_shmem_barrier_all(p->grp));
	mori_shmem_finalize(p->grp);
	mori_client_close(p->c);
	return 0;
}

/* A PE killed while the others wait on a word nobody sets: their kernels end, MORI_EPEERDEAD. */
static int pe_killed(int me, int n, void *arg)
{
	struct pe P, *p = &P;
	if (pe_open(p, me, n, "dev-kill"))
		return 1;
	POK(me, mori_shmem_barrier_all(p->grp));
	if (me == n - 1) {
		usleep(500000); /* the others' kernels are waiting by now */
		SH->killed_at = test_now_s();
		raise(SIGKILL);
	}
	gpu_function f;
	GOK(me, p->g->module_get_function(&f, p->mod, "sdev_abort"));
	struct sdev_args a = {.which = 0, .words = A(p, A_WAIT)};
	a.out = p->out_d;
	memset(p->out, 0, sizeof(p->out));
	GOK(me, p->g->memcpy_htod_async(p->out_d, p->out, sizeof(p->out), p->s));
	GOK(me, p->g->memcpy_htod_async(p->args_d, &a, sizeof(a), p->s));
	void *params[] = {&p->args_d};
	GOK(me, p->g->launch_kernel(f, 1, 1, 1, SDEV_THREADS, 1, 1, 0, p->s, params, NULL));
	GOK(me, p->g->memcpy_dtoh_async(p->out, p->out_d, sizeof(p->out), p->s));
	GOK(me, p->g->stream_synchronize(p->s));
	SH->waited[me] = test_now_s() - SH->killed_at;
	PCHECK(me, p->out[SDEV_OUT_RC] == MORI_EPEERDEAD, "the wait returned %lld", p->out[SDEV_OUT_RC]);
	PCHECK(me, SH->killed_at > 0 && SH->waited[me] < 1.0, "the wait ended %.3f s after the kill", SH->waited[me]);
	return 0;
}

START_TEST(device_api_across_processes)
{
	double dt = pe_run_all(NPES, pe_cases, NULL, 150, 0);
	printf("device API, %d processes as PEs (%s): ring 1000 rounds, %d x %d fetch-adds exact, lock, "
	       "barriers, barrier_on_stream: %.1f s\n",
	       NPES, mps_note, NPES, FADD_PER_PE, dt);
}
END_TEST

START_TEST(ordering_one_gpu)
{
	int gpus = 1;
	double dt = pe_run_all(NPES, pe_order, &gpus, 150, 0);
	printf("ordering, %d processes as PEs on one GPU (%s): scopes GPU, %d rounds of %d words then a flag, "
	       "every word right at the flag: %.1f s\n", NPES, mps_note, ORDER_ROUNDS, ORDER_WORDS, dt);
}
END_TEST

START_TEST(ordering_across_gpus)
{
	int gpus = 2;
	SH->gpus = 0;
	double dt = pe_run_all(NPES, pe_order, &gpus, 150, 0);
	if (SH->gpus < 2)
		printf("ordering across GPUs: skipped (%d GPU on this machine)\n", SH->gpus);
	else
		printf("ordering, %d processes as PEs over %d GPUs (%s): scopes GPU / system as placed, %d rounds "
		       "every word right at the flag: %.1f s\n", NPES, SH->gpus < NPES ? SH->gpus : NPES, mps_note,
		       ORDER_ROUNDS, dt);
}
END_TEST

START_TEST(pe_killed_ends_waits)
{
	pe_run_all(NPES, pe_killed, NULL, 150, 1);
	double worst = 0;
	for (int i = 0; i < NPES - 1; i++)
		worst = SH->waited[i] > worst ? SH->waited[i] : worst;
	printf("a PE killed: the %d peers' waiting kernels returned MORI_EPEERDEAD within %.0f ms (%s)\n", NPES - 1,
	       worst * 1e3, mps_note);
}
END_TEST

int main(void)
{
	mps_note = gpu_procs_start(mori_kernels_shmemtest_image_len, "MORI_SHMEM_PES", &NPES, MAXPE);
	printf("%d PEs on one GPU, %s\n", NPES, mps_note);
	Suite *s = suite_create("gpu_shmem");
	TCase *t = suite_fixture_case(s, "processes", setup, teardown, 200);
	tcase_add_test(t, device_api_across_processes);
	tcase_add_test(t, pe_killed_ends_waits);
	TCase *o = suite_fixture_case(s, "ordering", setup, teardown, 200); /* CK_RUN_CASE=ordering runs it alone */
	tcase_add_test(o, ordering_one_gpu);
	tcase_add_test(o, ordering_across_gpus);
	return run_suite(s);
}
