/* MORI-SHMEM's device API through the proxy morid serves:
 * two morids on loopback (A the root, B) play two nodes, N forked processes on the one GPU are
 * the N PEs of one group ($MORI_SHMEM_PES, default 4), even PEs on A and odd ones on B, VRAM
 * heaps. A PE maps only the heaps of its own node, so every call to a PE of the other node goes
 * through its ring to its morid, which moves the bytes over the daemons' transports (staging VRAM
 * through pinned buffers) and has the target's morid apply signals and atomics after the data.
 * Checked: put+signal around the ring (every hop crosses the daemons: each PE checks its left
 * neighbour's bytes at the signal, acks with a proxy atomic after a fence), fetch-adds of the PEs
 * of node A on one word of PE n-1 (node B): exact totals, every value fetched once across PEs,
 * barrier_all / sync_all in the kernel and libmori's barrier_on_stream / quiet_on_stream; a PE
 * killed while the others wait in a kernel (MORI_EPEERDEAD within a second), and morid B killed
 * while node A's PEs wait on a word only B's PEs would set (their kernels return MORI_EPEERDEAD).
 * Atomics morid applies to VRAM are atomic among themselves (one loop applies them), not against a
 * kernel's own atomics on the same word, so only node A's PEs add (shmem.md says so).
 * Without a GPU: "skipped: no GPU" (77). MPS as in test_gpu_shmem. */
#include <check.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>

#include "gpu.h"
#include "gpu_harness.h"
#include "node_harness.h"
#include "pe_harness.h"
#include "mori_shmem.h"
#include "shmem_dev.h"
#include "shmem_layout.h"

extern const unsigned char mori_kernels_shmemtest_image[];
extern const size_t mori_kernels_shmemtest_image_len;

#define HEAP (32u << 20)
#define MAXPE 8
#define AREA (1u << 20)
#define A_RBUF 0
#define A_RSRC (64u << 10)
#define A_SIG (128u << 10)
#define A_ACK (A_SIG + 64)
#define A_C64 (A_SIG + 128)
#define A_C32 (A_SIG + 192)
#define A_CNF (A_SIG + 256)
#define A_WAIT (A_SIG + 4096)
#define A_BAR (A_SIG + 12288)
#define A_OSIG (A_SIG + 320) /* ordering: its signal and ack words (zero until then) */
#define A_OACK (A_SIG + 384)
#define ORDER_ROUNDS 200
#define A_BITS (256u << 10)  /* this PE's own bitmap of the values it fetched */
#define FADD_PER_PE 3000
#define BITWORDS ((FADD_PER_PE * MAXPE + 31) / 32)
#define RING_ROUNDS 300

static struct test_node NA, NB;
static int NPES = 4;
static const char *mps_note = "MPS off";

struct shared {
	char msg[MAXPE][PE_MSG_LEN];
	uint32_t bits[MAXPE][BITWORDS];
	double killed_at;
	double waited[MAXPE];
	volatile int waiting;
	double ring_s, fadd_s, bar_s;
};
static struct shared *SH;

static void setup(void)
{
	pe_shared_map(SH);
	node_pair_init(&NA, &NB, "gproxy", 7300, 0);
	ck_assert_int_eq(node_pair_start(&NA, &NB, NULL), 0);
}

static void teardown(void)
{
	node_pair_stop(&NA, &NB); /* (a morid that did not stop cleanly keeps its files, named) */
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
	uint8_t *area;
	gpu_dptr args_d, out_d;
	long long out[SDEV_OUT_N];
};

static int pe_open(struct pe *p, int me, int n, const char *name)
{
	gpu_mps_share(n);
	memset(p, 0, sizeof(*p));
	p->me = me;
	p->n = n;
	p->g = gpu_ctx_current(0);
	PCHECK(me, p->g, "no GPU context: %s", gpu_unavailable_reason());
	POK(me, mori_client_open(me & 1 ? NB.dir : NA.dir, "proxy-pe", &p->c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_kind = MORI_MEM_VRAM;
	o.heap_size = HEAP;
	o.gpu_device = 0;
	o.root = NA.addr;
	o.timeout_us = 60000000;
	POK(me, mori_shmem_init(p->c, name, me, n, &o, &p->grp));
	int right = (me + 1) % n;
	PCHECK(me, n < 2 || !mori_shmem_ptr_p2p(p->grp, mori_shmem_heap_base(p->grp), right),
	       "PE %d's heap is mapped here: not the proxy path", right);
	GOK(me, p->g->module_load_data(&p->mod, mori_kernels_shmemtest_image));
	POK(me, mori_shmem_module_init(p->grp, p->mod));
	POK(me, mori_shmem_calloc(p->grp, AREA, 4096, (void **)&p->area));
	GOK(me, p->g->stream_create(&p->s, GPU_STREAM_NON_BLOCKING));
	GOK(me, p->g->mem_alloc(&p->args_d, sizeof(struct sdev_args)));
	GOK(me, p->g->mem_alloc(&p->out_d, sizeof(p->out)));
	return 0;
}

static uint64_t A(const struct pe *p, uint64_t off) { return (uint64_t)(uintptr_t)(p->area + off); }

/* Launch; the results come back on the stream after it unless `later` (the copy to pageable
 * memory blocks the host until the kernel ends: a caller that must say it launched goes first). */
static int pe_launch2(struct pe *p, const char *name, unsigned grid, struct sdev_args *a, int later)
{
	gpu_function f;
	GOK(p->me, p->g->module_get_function(&f, p->mod, name));
	memset(p->out, 0, sizeof(p->out));
	a->out = p->out_d;
	GOK(p->me, p->g->memcpy_htod_async(p->out_d, p->out, sizeof(p->out), p->s));
	GOK(p->me, p->g->memcpy_htod_async(p->args_d, a, sizeof(*a), p->s));
	void *params[] = {&p->args_d};
	GOK(p->me, p->g->launch_kernel(f, grid, 1, 1, SDEV_THREADS, 1, 1, 0, p->s, params, NULL));
	if (!later)
		GOK(p->me, p->g->memcpy_dtoh_async(p->out, p->out_d, sizeof(p->out), p->s));
	return 0;
}

static int pe_launch(struct pe *p, const char *name, unsigned grid, struct sdev_args *a)
{
	return pe_launch2(p, name, grid, a, 0);
}

static int pe_run(struct pe *p, const char *name, unsigned grid, struct sdev_args *a)
{
	if (pe_launch(p, name, grid, a))
		return 1;
	GOK(p->me, p->g->stream_synchronize(p->s));
	PCHECK(p->me, p->out[SDEV_OUT_RC] == 0, "%s: rc %lld (%s) at %lld", name, p->out[SDEV_OUT_RC],
	       mori_strerror((int)p->out[SDEV_OUT_RC]), p->out[SDEV_OUT_WHERE]);
	PCHECK(p->me, p->out[SDEV_OUT_DONE] == 1, "%s did not finish", name);
	PCHECK(p->me, p->out[SDEV_OUT_BAD] == 0, "%s: %lld wrong (first in round %lld)", name, p->out[SDEV_OUT_BAD],
	       p->out[SDEV_OUT_FIRST_BAD] - 1);
	return 0;
}

/* ---- the cases ---- */

static int pe_cases(int me, int n, void *arg)
{
	(void)arg;
	struct pe P, *p = &P;
	if (pe_open(p, me, n, "proxy-api"))
		return 1;
	int target = n - 1; /* on node B */
	double t0 = test_now_s();
	struct sdev_args a = {.rounds = RING_ROUNDS, .buf = A(p, A_RBUF), .src = A(p, A_RSRC), .sig = A(p, A_SIG),
			      .ack = A(p, A_ACK), .maxlen = 16u << 10};
	if (pe_run(p, "sdev_ring", 1, &a))
		return 1;
	if (me == 0)
		SH->ring_s = test_now_s() - t0;
	/* ordering: the state orders at system scope towards the other node's PEs (the proxy) and
	 * waits at system scope; then data-then-flag rounds, every hop through the proxy */
	struct mori_shmem_state st;
	int32_t scope[MAXPE];
	GOK(me, p->g->memcpy_dtoh_async(&st, (gpu_dptr)(uintptr_t)mori_shmem_state(p->grp), sizeof(st), NULL));
	GOK(me, p->g->stream_synchronize(NULL));
	GOK(me, p->g->memcpy_dtoh_async(scope, (gpu_dptr)(uintptr_t)st.peer_scope, sizeof(int32_t) * (size_t)n, NULL));
	GOK(me, p->g->stream_synchronize(NULL));
	for (int q = 0; q < n; q++)
		PCHECK(me, scope[q] == ((q & 1) == (me & 1) ? MORI_SHMEM_SCOPE_GPU : MORI_SHMEM_SCOPE_SYS),
		       "peer_scope[%d] = %d", q, scope[q]);
	PCHECK(me, st.wait_scope == MORI_SHMEM_SCOPE_SYS, "wait_scope = %d with PEs behind the proxy", st.wait_scope);
	POK(me, mori_shmem_barrier_all(p->grp));
	a = (struct sdev_args){.rounds = ORDER_ROUNDS, .buf = A(p, A_RBUF), .src = A(p, A_RSRC), .sig = A(p, A_OSIG),
			       .ack = A(p, A_OACK), .maxlen = 512};
	if (pe_run(p, "sdev_order", 1, &a))
		return 1;
	/* fetch-adds: node A's PEs on target's words; each marks its own bitmap */
	POK(me, mori_shmem_barrier_all(p->grp));
	int adder = !(me & 1);
	a = (struct sdev_args){.target_pe = target, .ctr64 = A(p, A_C64), .ctr32 = A(p, A_C32), .ctr_nf = A(p, A_CNF),
			       .bitmap = A(p, A_BITS), .total = adder ? FADD_PER_PE : 0, .maxlen = BITWORDS};
	t0 = test_now_s();
	if (pe_run(p, "sdev_fadd", 2, &a))
		return 1;
	if (me == 0)
		SH->fadd_s = test_now_s() - t0;
	PCHECK(me, p->out[SDEV_OUT_DUPS] == 0, "fadd: %lld values fetched twice here", p->out[SDEV_OUT_DUPS]);
	GOK(me, p->g->memcpy_dtoh_async(SH->bits[me], A(p, A_BITS), sizeof(SH->bits[me]), NULL));
	GOK(me, p->g->stream_synchronize(NULL));
	POK(me, mori_shmem_barrier_all(p->grp));
	if (me == target) {
		int adders = (n + 1) / 2;
		uint64_t c[3], total = (uint64_t)adders * FADD_PER_PE;
		GOK(me, p->g->memcpy_dtoh_async(c, A(p, A_C64), 8, NULL));
		GOK(me, p->g->memcpy_dtoh_async(&c[1], A(p, A_C32), 8, NULL));
		GOK(me, p->g->memcpy_dtoh_async(&c[2], A(p, A_CNF), 8, NULL));
		GOK(me, p->g->stream_synchronize(NULL));
		PCHECK(me, c[0] == total && (uint32_t)c[1] == total && c[2] == 2 * total, "totals %llu %llu %llu of %llu",
		       (unsigned long long)c[0], (unsigned long long)(uint32_t)c[1], (unsigned long long)c[2],
		       (unsigned long long)total);
		for (uint64_t v = 0; v < total; v++) {
			int owners = 0;
			for (int q = 0; q < n; q++)
				owners += SH->bits[q][v / 32] >> (v % 32) & 1;
			PCHECK(me, owners == 1, "value %llu fetched by %d PEs", (unsigned long long)v, owners);
		}
	}
	/* barriers in the kernel, through the proxy's AMO_SET flags */
	t0 = test_now_s();
	a = (struct sdev_args){.rounds = 50, .words = A(p, A_BAR)};
	if (pe_run(p, "sdev_barrier", 1, &a))
		return 1;
	if (me == 0)
		SH->bar_s = (test_now_s() - t0) / 50;
	POK(me, mori_shmem_barrier_on_stream(p->grp, p->s));
	POK(me, mori_shmem_quiet_on_stream(p->grp, p->s));
	GOK(me, p->g->stream_synchronize(p->s));
	/* The status before the last barrier: after it a peer may already have left, tearing the group
	 * down under the call. */
	POK(me, mori_shmem_status(p->grp, NULL));
	POK(me, mori_shmem_barrier_all(p->grp)); /* nobody leaves before all are done */
	mori_shmem_finalize(p->grp);
	mori_client_close(p->c);
	return 0;
}

START_TEST(device_api_through_the_proxy)
{
	double dt = pe_run_all(NPES, pe_cases, NULL, 80, 0);
	printf("device API through morid's proxy, %d PEs on 2 morids (%s): ring %d rounds %.1f ms a round, ordering "
	       "%d rounds at system scope, %d x %d fetch-adds exact (%.2f s), barrier_all %.0f us, barrier_on_stream: %.1f s in all\n",
	       NPES, mps_note, RING_ROUNDS, SH->ring_s * 1e3 / RING_ROUNDS, ORDER_ROUNDS, (NPES + 1) / 2, FADD_PER_PE, SH->fadd_s,
	       SH->bar_s * 1e6, dt);
}
END_TEST

/* A PE (on B) killed while the others wait on a word nobody sets. */
static int pe_wait(struct pe *p, int me)
{
	struct sdev_args a = {.which = 0, .words = A(p, A_WAIT)};
	if (pe_launch2(p, "sdev_abort", 1, &a, 1))
		return 1;
	__atomic_fetch_add(&SH->waiting, 1, __ATOMIC_SEQ_CST);
	GOK(me, p->g->memcpy_dtoh_async(p->out, p->out_d, sizeof(p->out), p->s));
	GOK(me, p->g->stream_synchronize(p->s));
	SH->waited[me] = test_now_s() - SH->killed_at;
	PCHECK(me, p->out[SDEV_OUT_RC] == MORI_EPEERDEAD, "the wait returned %lld", p->out[SDEV_OUT_RC]);
	PCHECK(me, SH->killed_at > 0 && SH->waited[me] < 1.0, "the wait ended %.3f s after the kill", SH->waited[me]);
	return 0;
}

static int pe_killed(int me, int n, void *arg)
{
	(void)arg;
	struct pe P, *p = &P;
	if (pe_open(p, me, n, "proxy-kill"))
		return 1;
	POK(me, mori_shmem_barrier_all(p->grp));
	if (me == n - 1) {
		usleep(500000);
		SH->killed_at = test_now_s();
		raise(SIGKILL);
	}
	return pe_wait(p, me);
}

START_TEST(pe_killed_ends_waits)
{
	pe_run_all(NPES, pe_killed, NULL, 60, 1);
	double worst = 0;
	for (int i = 0; i < NPES - 1; i++)
		worst = SH->waited[i] > worst ? SH->waited[i] : worst;
	printf("a PE on B killed: the %d peers' waiting kernels (both nodes) returned MORI_EPEERDEAD within %.0f ms\n",
	       NPES - 1, worst * 1e3);
}
END_TEST

/* morid B killed while node A's PEs wait in a kernel; B's PEs are killed after it. */
static int pe_daemon_gone(int me, int n, void *arg)
{
	(void)arg;
	struct pe P, *p = &P;
	if (pe_open(p, me, n, "proxy-daemon"))
		return 1;
	POK(me, mori_shmem_barrier_all(p->grp));
	if (me & 1)
		for (;;)
			pause();
	return pe_wait(p, me);
}

START_TEST(daemon_killed_ends_waits)
{
	pid_t pids[MAXPE];
	int na = (NPES + 1) / 2;
	pe_fork_all(NPES, pe_daemon_gone, NULL, 60, pids);
	double t0 = test_now_s();
	while (SH->waiting < na && test_now_s() - t0 < 30)
		usleep(1000);
	printf("# daemon_killed: %d of %d kernels waiting after %.1f s; killing morid B (pid %d)\n", SH->waiting, na,
	       test_now_s() - t0, (int)NB.pid);
	fflush(stdout);
	ck_assert_int_eq(SH->waiting, na);
	usleep(200000); /* the kernels are waiting */
	SH->killed_at = test_now_s();
	ck_assert_int_gt(NB.pid, 1);
	node_kill9(&NB);
	printf("# daemon_killed: morid B killed\n");
	fflush(stdout);
	pe_wait_all(NPES, pids, 0, 2, 0); /* node A's; B's wait in pause() until killed here */
	for (int i = 1; i < NPES; i += 2) {
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
	}
	double worst = 0;
	for (int i = 0; i < NPES; i += 2)
		worst = SH->waited[i] > worst ? SH->waited[i] : worst;
	printf("morid B killed: node A's %d waiting kernels returned MORI_EPEERDEAD within %.0f ms\n", na, worst * 1e3);
}
END_TEST

int main(void)
{
	mps_note = gpu_procs_start(mori_kernels_shmemtest_image_len, "MORI_SHMEM_PES", &NPES, MAXPE);
	printf("%d PEs on one GPU over 2 morids, %s\n", NPES, mps_note);
	Suite *s = suite_create("gpu_shmem_proxy");
	TCase *t = suite_fixture_case(s, "proxy", setup, teardown, 100);
	tcase_add_test(t, device_api_through_the_proxy);
	tcase_add_test(t, pe_killed_ends_waits);
	tcase_add_test(t, daemon_killed_ends_waits);
	return run_suite(s);
}
