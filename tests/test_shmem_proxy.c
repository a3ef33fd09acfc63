/* MORI-SHMEM's proxy served by morid (issue 11), no GPU: two morids on loopback (A the root, B),
 * forked PEs with host-memory heaps, even PEs on A and odd ones on B. In each PE a host function
 * plays the kernel: it writes ring requests exactly as kernels/mori_shmem.cuh's proxy_post does
 * (claim on head, wait while the ring is full, the last 56 bytes, then `ready` with a release
 * store) and waits on `done` as proxy_wait does. Checked against independent models: puts and
 * gets of random sizes byte for byte, put+signal SET and ADD up to 4 MiB (the data of round v is
 * there when the signal shows v), fetch and non-fetch atomics (exact counts, every fetched value
 * once, every op against a model), quiet, thousands of requests through a small ring kept full,
 * malformed requests answered with their error (morid unharmed), and a peer morid killed
 * mid-stream, also under a 4 MiB put+signal (an error before a deadline; that signal never
 * shows). A PE of the same node reached
 * through the ring (not through its mapping) exercises morid's local path. */
#include <check.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "harness.h"
#include "node_harness.h"
#include "pe_harness.h"
#include "mori.h"
#include "mori_shmem.h"
#include "shmem_layout.h"
#include "shmem_ring_host.h"

#define HEAP (8u << 20)
#define MAXPE 4
#define AREA (1u << 20)          /* each PE's receive area per source PE starts at AREA_OFF + src * AREA */
#define AREA_OFF (1u << 20)
#define SRC_OFF (6u << 20)        /* each PE's source bytes, 1 MiB */

static struct test_node NA, NB;
static const char *const small_ring[] = {"--shmem-ring-entries", "64", NULL};

static void setup(void)
{
	node_pair_init(&NA, &NB, "proxy", 7200, 0);
	NA.args = NB.args = small_ring; /* the ring wraps and fills */
	ck_assert_int_eq(node_pair_start(&NA, &NB, NULL), 0);
}

static void teardown(void)
{
	/* Let the last group messages be answered first: nng 1.5.2's nng_close can deadlock on a req
	 * socket closed with a request in flight (nng issue 1543; seen here in peers_stop, 1 stop in
	 * ~10): that is a daemon bug outside this test, not what it checks. */
	usleep(300000);
	ck_assert_msg(node_pair_stop(&NA, &NB) == 0, "morid did not stop cleanly (above: which, and its log)");
}

/* ---- PEs: forked processes ---- */

struct shared {
	char msg[MAXPE][PE_MSG_LEN];
	uint8_t seen[MAXPE * 4096];   /* fetch-add: each value fetched once */
	volatile int stage;
	volatile uint64_t kill_us;    /* when the parent killed morid B (CLOCK_MONOTONIC) */
	volatile int idle_done;       /* peer_killed: PE 2 saw its abort word */
	double figures[8];
};
static struct shared *SH;
static struct test_node *node_of(int pe) { return pe & 1 ? &NB : &NA; }

static void shared_setup(void) { pe_shared_map(SH); } /* pe_msg: where the PEs say why they failed */

struct pe {
	mori_client *c;
	mori_group *g;
	struct mori_shmem_state *st;  /* host copy: ctrl and ring are this process's addresses */
	uint8_t *heap;
};

static int join(int pe, int n, const char *name, struct pe *e)
{
	char label[32];
	snprintf(label, sizeof(label), "pe%d", pe);
	POK(pe, mori_client_open(node_of(pe)->dir, label, &e->c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = HEAP;
	o.root = NA.addr;
	o.timeout_us = 20000000;
	POK(pe, mori_shmem_init(e->c, name, pe, n, &o, &e->g));
	e->st = mori_shmem_state(e->g);
	PCHECK(pe, e->st && e->st->ctrl && e->st->ring, "no host state");
	e->heap = mori_shmem_heap_base(e->g);
	return 0;
}

/* ---- the kernel's side of the ring: common/shmem_ring_host.h, as kernels/mori_shmem.cuh does it ---- */

#define WAIT_US 15000000ull /* no wait of the test longer: the proxy must answer well before */

static uint64_t now_us(void) { return shmem_ring_now_us(); }
static int aborted(const struct mori_shmem_ctrl *c) { return shmem_ring_aborted(c); }

static struct shmem_ring_pe ring_of(const struct pe *e)
{
	return (struct shmem_ring_pe){.ctrl = e->st->ctrl, .ring = e->st->ring, .heap = e->heap, .my_pe = e->st->my_pe,
				      .wait_us = WAIT_US};
}

static int post(struct pe *e, uint16_t op, uint8_t amo, uint8_t width, int pe, uint64_t dst, uint64_t src, uint64_t len,
		uint64_t sig, uint64_t value, uint64_t cmp, uint64_t *seq_out)
{
	struct shmem_ring_pe r = ring_of(e);
	return shmem_ring_post(&r, op, amo, width, pe, dst, src, len, sig, value, cmp, seq_out);
}

static int wait_seq(struct pe *e, uint64_t seq)
{
	struct shmem_ring_pe r = ring_of(e);
	return shmem_ring_wait(&r, seq);
}

static int quiet(struct pe *e)
{
	struct shmem_ring_pe r = ring_of(e);
	return shmem_ring_quiet(&r);
}

static int amo_fetch(struct pe *e, int code, int width, int pe, uint64_t off, uint64_t v, uint64_t cmp, uint64_t *old)
{
	struct shmem_ring_pe r = ring_of(e);
	return shmem_ring_amo_fetch(&r, code, width, pe, off, v, cmp, old);
}

static uint8_t pattern(int from, int to, uint64_t off, uint64_t salt)
{
	uint64_t x = (uint64_t)from * 0x9E3779B97F4A7C15ull ^ (uint64_t)to * 0xC2B2AE3D27D4EB4Full ^ off * 0x165667B19E3779F9ull ^
		     salt * 0x27D4EB2F165667C5ull;
	x ^= x >> 29;
	return (uint8_t)(x ^ (x >> 13));
}

/* ---- puts and gets ---- */

#define NPUTS 1500

/* PE pe's k-th put to `to`: its offset and length inside pe's area at `to` (an independent model). */
static void put_shape(int pe, int to, int k, uint64_t *off, uint64_t *len)
{
	uint64_t s = (uint64_t)pe * 1000003u + (uint64_t)to * 7919u + (uint64_t)k * 104729u + 1;
	s = test_rand(&s);
	*len = k % 50 == 0 ? 1 + s % (192u << 10) : 1 + s % 700; /* mostly small, a few large */
	*off = (s >> 20) % (AREA - *len);
}

static int pe_rma(int pe, int n, void *arg)
{
	(void)arg;
	struct pe e;
	if (join(pe, n, "rma", &e))
		return 1;
	for (uint64_t i = 0; i < (1u << 20); i++)
		e.heap[SRC_OFF + i] = pattern(pe, 0, i, 1);
	POK(pe, mori_shmem_barrier_all(e.g));
	/* every other PE through the ring: the two of the other node, and the same-node one */
	uint64_t t0 = now_us();
	int nreq = 0;
	for (int k = 0; k < NPUTS; k++)
		for (int to = 0; to < n; to++) {
			if (to == pe)
				continue;
			uint64_t off, len;
			put_shape(pe, to, k, &off, &len);
			POK(pe, post(&e, MORI_SHMEM_OP_PUT, 0, 0, to, AREA_OFF + (uint64_t)pe * AREA + off, SRC_OFF + off,
				     len, 0, 0, 0, NULL));
			nreq++;
		}
	POK(pe, quiet(&e));
	double dt = (double)(now_us() - t0) / 1e6;
	if (pe == 0)
		SH->figures[0] = nreq / dt;
	POK(pe, mori_shmem_barrier_all(e.g));
	/* the model of what landed here: replay every source's puts in order (later ones win) */
	uint8_t *model = calloc(1, AREA);
	uint8_t *wrote = calloc(1, AREA);
	PCHECK(pe, model && wrote, "oom");
	for (int from = 0; from < n; from++) {
		if (from == pe)
			continue;
		memset(wrote, 0, AREA);
		for (int k = 0; k < NPUTS; k++) {
			uint64_t off, len;
			put_shape(from, pe, k, &off, &len);
			for (uint64_t i = off; i < off + len; i++)
				model[i] = pattern(from, 0, i, 1), wrote[i] = 1;
		}
		const uint8_t *got = e.heap + AREA_OFF + (uint64_t)from * AREA;
		for (uint64_t i = 0; i < AREA; i++)
			PCHECK(pe, got[i] == (wrote[i] ? model[i] : 0), "byte %llu from PE %d: %u, want %u",
			       (unsigned long long)i, from, got[i], wrote[i] ? model[i] : 0);
	}
	/* gets: a range of each other PE's source, into this PE's area of itself */
	for (int from = 0; from < n; from++) {
		if (from == pe)
			continue;
		uint64_t off = (uint64_t)from * 4099, len = 60000 + (uint64_t)pe * 333;
		uint64_t dst = AREA_OFF + (uint64_t)pe * AREA + off, seq;
		memset(e.heap + dst, 0, len);
		POK(pe, post(&e, MORI_SHMEM_OP_GET, 0, 0, from, dst, SRC_OFF + off, len, 0, 0, 0, &seq));
		POK(pe, wait_seq(&e, seq));
		for (uint64_t i = 0; i < len; i++)
			PCHECK(pe, e.heap[dst + i] == pattern(from, 0, off + i, 1), "get from PE %d byte %llu", from,
			       (unsigned long long)i);
	}
	PCHECK(pe, e.st->ctrl->error == 0, "ring error %d", e.st->ctrl->error);
	POK(pe, mori_shmem_barrier_all(e.g));
	free(model);
	free(wrote);
	mori_shmem_finalize(e.g);
	mori_client_close(e.c);
	return 0;
}

START_TEST(puts_gets)
{
	pe_run_all(4, pe_rma, NULL, 120, 0);
	printf("puts/gets: 4 PEs on 2 morids, %d puts each (1 B..192 KiB) to the 3 others through a 64-entry ring, "
	       "every byte checked: PE 0 at %.0f requests/s\n", NPUTS * 3, SH->figures[0]);
}
END_TEST

/* ---- put+signal ---- */

#define ROUNDS 600
#define SLOT 256
#define BIG (24u << 10)   /* every 10th round: more than morid carries inside the signal's message */

/* Round r's bytes: where in the area (and in the source), how many. */
static void round_shape(int r, uint64_t *off, uint64_t *len)
{
	if (r % 10 == 9) {
		*off = (uint64_t)ROUNDS * SLOT + (uint64_t)(r / 10) * BIG;
		*len = BIG - (uint64_t)(r % 7);
	} else {
		*off = (uint64_t)r * SLOT;
		*len = 1 + (uint64_t)(r * 37) % SLOT;
	}
}
#define SIG_ADD_OFF (SRC_OFF - 64)
#define SIG_SET_OFF (SRC_OFF - 128)

/* PE 0 (A) sends to PE 1 (B): round r's bytes to slot r, signal ADD 1 (rounds even) or SET r+1. */
static int pe_signal(int pe, int n, void *arg)
{
	(void)arg;
	struct pe e;
	if (join(pe, n, "signal", &e))
		return 1;
	for (uint64_t i = 0; i < (uint64_t)ROUNDS * SLOT + (uint64_t)(ROUNDS / 10) * BIG; i++)
		e.heap[SRC_OFF + i] = pattern(pe, 1, i, 2);
	POK(pe, mori_shmem_barrier_all(e.g));
	uint64_t t0 = now_us();
	if (pe == 0) {
		for (int r = 0; r < ROUNDS; r++) {
			uint64_t len, off;
			round_shape(r, &off, &len);
			int add = r % 2 == 0;
			POK(pe, post(&e, MORI_SHMEM_OP_PUT_SIGNAL, add ? MORI_SHMEM_SIGNAL_ADD : MORI_SHMEM_SIGNAL_SET, 8, 1,
				     AREA_OFF + off, SRC_OFF + off, len, add ? SIG_ADD_OFF : SIG_SET_OFF,
				     add ? 1 : (uint64_t)r + 1, 0, NULL));
		}
		POK(pe, quiet(&e));
		SH->figures[1] = (double)(now_us() - t0) / ROUNDS;
	} else if (pe == 1) {
		/* the signals' values say which rounds' bytes must be there already */
		volatile uint64_t *sa = (uint64_t *)(e.heap + SIG_ADD_OFF), *ss = (uint64_t *)(e.heap + SIG_SET_OFF);
		uint64_t checks = 0;
		while (*sa < ROUNDS / 2 || *ss < ROUNDS) {
			uint64_t a = __atomic_load_n(sa, __ATOMIC_ACQUIRE), s = __atomic_load_n(ss, __ATOMIC_ACQUIRE);
			/* ADD: a adds seen -> rounds 0, 2, .., 2(a-1) landed; SET s -> round s-1 landed */
			int rs[2] = {a ? (int)(2 * (a - 1)) : -1, s ? (int)s - 1 : -1};
			for (int j = 0; j < 2; j++) {
				if (rs[j] < 0)
					continue;
				uint64_t len, off;
				round_shape(rs[j], &off, &len);
				for (uint64_t i = 0; i < len; i++)
					PCHECK(pe, e.heap[AREA_OFF + off + i] == pattern(0, 1, off + i, 2),
					       "round %d byte %llu not there when its signal was", rs[j], (unsigned long long)i);
				checks++;
			}
			PCHECK(pe, now_us() - t0 < WAIT_US, "signals stuck at add %llu set %llu", (unsigned long long)a,
			       (unsigned long long)s);
		}
		PCHECK(pe, *sa == ROUNDS / 2 && *ss == ROUNDS, "final signals add %llu set %llu",
		       (unsigned long long)*sa, (unsigned long long)*ss);
		PCHECK(pe, checks > 0, "nothing checked");
	}
	POK(pe, mori_shmem_barrier_all(e.g));
	mori_shmem_finalize(e.g);
	mori_client_close(e.c);
	return 0;
}

START_TEST(put_signal)
{
	pe_run_all(2, pe_signal, NULL, 60, 0);
	printf("put+signal: %d rounds A -> B (1 B..24 KiB: in the signal's message and as transfers), SET and ADD, the round's bytes there whenever its signal was: "
	       "%.1f us a round posted back to back\n", ROUNDS, SH->figures[1]);
}
END_TEST

/* ---- large put+signal: the data as a transfer, the signal with it (one trip) or after it ---- */

#define LB_OFF (1u << 20)           /* PE 1's landing area and PE 0's source, 4 MiB each */
#define LB_MAX (4u << 20)
#define LB_MIN (17u << 10)          /* more than the signal's own message carries */
#define LSIG (SRC_OFF - 1536)       /* at PE 1: round r landed (SET r) */
#define LACK (SRC_OFF - 1600)       /* at PE 0: PE 1 checked round r (SET r) */
#define LROUNDS 40

static void lround_shape(int r, uint64_t *off, uint64_t *len)
{
	uint64_t s = (uint64_t)r * 0x9E3779B97F4A7C15ull + 77;
	s = test_rand(&s);
	*len = r == 1 ? LB_MAX : r == 2 ? LB_MIN : LB_MIN + s % (LB_MAX - LB_MIN + 1);
	*off = (s >> 24) % (LB_MAX - *len + 1);
}

/* PE 0 (A) sends round r's bytes (17 KiB..4 MiB at a random offset, every third round as a put and
 * a put+signal in one batch) with signal SET r (odd rounds) or ADD 1 (even: r then too) to PE 1
 * (B), which checks every byte at the signal and answers with an atomic; PE 0 reuses its source
 * only then. */
static int pe_lsignal(int pe, int n, void *arg)
{
	(void)arg;
	struct pe e;
	if (join(pe, n, "lsignal", &e))
		return 1;
	POK(pe, mori_shmem_barrier_all(e.g));
	uint64_t t0 = now_us(), bytes = 0;
	for (int r = 1; r <= LROUNDS; r++) {
		uint64_t off, len;
		lround_shape(r, &off, &len);
		if (pe == 0) {
			for (uint64_t i = 0; i < len; i++)
				e.heap[LB_OFF + off + i] = pattern(0, 1, off + i, (uint64_t)r + 100);
			uint64_t a = r % 3 == 0 ? len / 2 : 0; /* a plain put of the first part, in the same batch */
			if (a)
				POK(pe, post(&e, MORI_SHMEM_OP_PUT, 0, 0, 1, LB_OFF + off, LB_OFF + off, a, 0, 0, 0, NULL));
			POK(pe, post(&e, MORI_SHMEM_OP_PUT_SIGNAL, r % 2 ? MORI_SHMEM_SIGNAL_SET : MORI_SHMEM_SIGNAL_ADD, 8, 1,
				     LB_OFF + off + a, LB_OFF + off + a, len - a, LSIG, r % 2 ? (uint64_t)r : 1, 0, NULL));
			struct shmem_ring_pe R = ring_of(&e);
			POK(pe, shmem_ring_wait_ge(&R, LACK, (uint64_t)r));
			bytes += len;
		} else if (pe == 1) {
			struct shmem_ring_pe R = ring_of(&e);
			POK(pe, shmem_ring_wait_ge(&R, LSIG, (uint64_t)r));
			uint64_t v = __atomic_load_n((uint64_t *)(e.heap + LSIG), __ATOMIC_ACQUIRE);
			PCHECK(pe, v == (uint64_t)r, "round %d: signal %llu", r, (unsigned long long)v);
			for (uint64_t i = 0; i < len; i++)
				PCHECK(pe, e.heap[LB_OFF + off + i] == pattern(0, 1, off + i, (uint64_t)r + 100),
				       "round %d (%llu bytes at %llu): byte %llu not there when its signal was", r,
				       (unsigned long long)len, (unsigned long long)off, (unsigned long long)i);
			POK(pe, post(&e, MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_SET, 8, 0, LACK, 0, 0, 0, (uint64_t)r, 0, NULL));
		}
	}
	if (pe == 0) {
		SH->figures[3] = (double)(now_us() - t0) / LROUNDS;
		SH->figures[4] = (double)bytes;
	}
	PCHECK(pe, e.st->ctrl->error == 0, "ring error %d", e.st->ctrl->error);
	POK(pe, quiet(&e));
	POK(pe, mori_shmem_barrier_all(e.g));
	mori_shmem_finalize(e.g);
	mori_client_close(e.c);
	return 0;
}

START_TEST(put_signal_large)
{
	pe_run_all(2, pe_lsignal, NULL, 120, 0);
	printf("large put+signal: %d rounds A -> B of 17 KiB..4 MiB at random offsets (%.0f MiB), every byte there "
	       "when its signal was: %.0f us a round (with the check and the answer)\n",
	       LROUNDS, SH->figures[4] / (1 << 20), SH->figures[3]);
}
END_TEST

/* ---- morid B killed under a large put+signal ---- */

#define LTRIES 8

/* PE 0 sends 4 MiB put+signals (SET t) to PE 1 until one fails. PE 1 stops morid B (SIGSTOP: a
 * frozen picture of what B applied) as soon as the first bytes of try t landed: if the signal is
 * there, every byte must be (the transfer beat the stop; B goes on, next try); if not, the
 * parent kills B. The last try stops B before PE 0 posts. PE 0's ring must end with
 * MORI_EPEERDEAD within 2 s of the kill, and the signal of that try never shows at PE 1. */
static int pe_lkilled(int pe, int n, void *arg)
{
	(void)arg;
	struct pe e;
	if (join(pe, n, "lkilled", &e))
		return 1;
	POK(pe, mori_shmem_barrier_all(e.g));
	volatile uint64_t *sig = (volatile uint64_t *)(e.heap + LSIG);
	for (int t = 1; t <= LTRIES; t++) {
		if (pe == 0) {
			for (uint64_t i = 0; i < LB_MAX; i++)
				e.heap[LB_OFF + i] = pattern(0, 1, i, (uint64_t)t + 500);
			while (t == LTRIES && SH->stage != 3)
				usleep(1000); /* the last try: B stopped first */
			uint64_t seq;
			POK(pe, post(&e, MORI_SHMEM_OP_PUT_SIGNAL, MORI_SHMEM_SIGNAL_SET, 8, 1, LB_OFF, LB_OFF, LB_MAX, LSIG,
				     (uint64_t)t, 0, &seq));
			int rc = wait_seq(&e, seq);
			if (!rc) {
				PCHECK(pe, SH->stage == 0 || SH->stage == 3, "try %d done after the kill", t);
				while (SH->stage == 0 && SH->figures[5] < t)
					usleep(100); /* PE 1 looked at try t */
				continue;
			}
			uint64_t waited = SH->kill_us ? now_us() - SH->kill_us : 0;
			PCHECK(pe, SH->stage == 2, "try %d failed (%s) before the kill", t, mori_strerror(rc));
			PCHECK(pe, rc == MORI_EPEERDEAD, "try %d ended with %s", t, mori_strerror(rc));
			PCHECK(pe, waited < 2000000, "the error came %llu us after the kill", (unsigned long long)waited);
			SH->figures[0] = waited;
			SH->figures[1] = t;
			mori_client_close(e.c);
			return 0;
		}
		uint8_t first[8];
		for (int i = 0; i < 8; i++)
			first[i] = pattern(0, 1, (uint64_t)i, (uint64_t)t + 500);
		if (t == LTRIES) {
			kill(NB.pid, SIGSTOP);
			SH->stage = 3;
			usleep(300000); /* PE 0's proxy has taken it and sent what the sockets hold */
		} else {
			uint64_t t0 = now_us();
			while (memcmp(e.heap + LB_OFF, first, 8) && *sig != (uint64_t)t && now_us() - t0 < WAIT_US)
				;
			kill(NB.pid, SIGSTOP);
		}
		uint64_t v = __atomic_load_n(sig, __ATOMIC_ACQUIRE);
		if (v == (uint64_t)t) { /* it beat the stop: then it is whole */
			for (uint64_t i = 0; i < LB_MAX; i++)
				PCHECK(pe, e.heap[LB_OFF + i] == pattern(0, 1, i, (uint64_t)t + 500),
				       "try %d: signal there, byte %llu not", t, (unsigned long long)i);
			kill(NB.pid, SIGCONT);
			SH->figures[5] = t;
			continue;
		}
		uint64_t have = 0;
		for (uint64_t i = 0; i < LB_MAX; i += 4096)
			have += e.heap[LB_OFF + i] == pattern(0, 1, i, (uint64_t)t + 500);
		SH->figures[6] = (double)have * 4096;
		SH->stage = 1; /* the parent kills B now */
		while (SH->stage != 2)
			usleep(1000);
		usleep(1500000);
		PCHECK(pe, *sig != (uint64_t)t, "try %d: signal applied after the kill", t);
		SH->figures[7] = t;
		break;
	}
	PCHECK(pe, pe != 1 || SH->figures[7] > 0, "no try was caught in flight");
	mori_client_close(e.c);
	return 0;
}

START_TEST(peer_killed_put_signal)
{
	pid_t pids[2];
	memset(SH->msg, 0, sizeof(SH->msg));
	memset(SH->figures, 0, sizeof(SH->figures));
	SH->stage = 0;
	SH->kill_us = 0;
	for (int i = 0; i < 2; i++)
		if ((pids[i] = fork()) == 0) {
			child_deadline(90);
			_exit(pe_lkilled(i, 2, NULL) ? 1 : 0);
		}
	uint64_t t0 = now_us();
	while (SH->stage != 1 && now_us() - t0 < 80000000) {
		int st;
		if (waitpid(pids[1], &st, WNOHANG) == pids[1]) { /* PE 1 failed */
			pids[1] = -1;
			break;
		}
		usleep(500);
	}
	SH->kill_us = now_us();
	SH->stage = 2; /* before the kill: PE 0's error may come before node_kill9 returns */
	node_kill9(&NB);
	int st;
	for (int i = 0; i < 2; i++) {
		if (pids[i] < 0)
			continue;
		ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "PE %d: %s", i, SH->msg[i]);
	}
	ck_assert_msg(pids[1] > 0, "PE 1: %s", SH->msg[1]);
	printf("peer killed under a 4 MiB put+signal: caught at try %.0f (of %d; %s), %.0f KiB of it had landed; PE 0's "
	       "ring ended with MORI_EPEERDEAD %.0f ms after the kill; its signal never showed at PE 1\n", SH->figures[7],
	       LTRIES, SH->figures[7] == LTRIES ? "B stopped before the post" : "B stopped once its first bytes landed",
	       SH->figures[6] / 1024, SH->figures[0] / 1000);
}
END_TEST

/* ---- atomics ---- */

#define NFADD 700
#define CTR64 (SRC_OFF - 256)
#define CTR32 (SRC_OFF - 512)
#define CTRNF (SRC_OFF - 768)
#define SEQW (SRC_OFF - 1024)

struct amo_step {
	int code, width;
	uint64_t v, cmp;
};
static const struct amo_step steps[] = {
	{MORI_SHMEM_AMO_SET, 8, 0x1111000011110000ull, 0}, {MORI_SHMEM_AMO_ADD, 8, 0x0f0f, 0},
	{MORI_SHMEM_AMO_INC, 8, 0, 0},                     {MORI_SHMEM_AMO_AND, 8, 0xff00ff00ff00ff00ull, 0},
	{MORI_SHMEM_AMO_OR, 8, 0x00000000000000ffull, 0},  {MORI_SHMEM_AMO_XOR, 8, 0xffffffffffffffffull, 0},
	{MORI_SHMEM_AMO_SWAP, 8, 42, 0},                   {MORI_SHMEM_AMO_CSWAP, 8, 7, 41},
	{MORI_SHMEM_AMO_CSWAP, 8, 7, 42},                  {MORI_SHMEM_AMO_SET, 4, 0xfffffff0u, 0},
	{MORI_SHMEM_AMO_ADD, 4, 0x20, 0},                  {MORI_SHMEM_AMO_INC, 4, 0, 0},
	{MORI_SHMEM_AMO_XOR, 4, 0x5a5a5a5a, 0},            {MORI_SHMEM_AMO_CSWAP, 4, 9, 0x5a5a5a4b},
};
#define NSTEPS (int)(sizeof(steps) / sizeof(steps[0]))

static uint64_t model_step(uint64_t *w, const struct amo_step *s)
{
	uint64_t mask = s->width == 4 ? 0xffffffffull : ~0ull, old = *w & mask, v = s->v & mask, n;
	switch (s->code) {
	case MORI_SHMEM_AMO_ADD: n = old + v; break;
	case MORI_SHMEM_AMO_INC: n = old + 1; break;
	case MORI_SHMEM_AMO_AND: n = old & v; break;
	case MORI_SHMEM_AMO_OR: n = old | v; break;
	case MORI_SHMEM_AMO_XOR: n = old ^ v; break;
	case MORI_SHMEM_AMO_CSWAP: n = old == (s->cmp & mask) ? v : old; break;
	default: n = v;
	}
	*w = (*w & ~mask) | (n & mask);
	return old;
}

/* Every PE fetch-adds PE 1's counters NFADD times (PE 3 is on PE 1's node: morid's local path),
 * then PE 0 runs every op on PE 1's SEQW word against a model. */
static int pe_amo(int pe, int n, void *arg)
{
	(void)arg;
	struct pe e;
	if (join(pe, n, "amo", &e))
		return 1;
	POK(pe, mori_shmem_barrier_all(e.g));
	uint64_t t0 = now_us();
	if (pe != 1)
		for (int k = 0; k < NFADD; k++) {
			uint64_t old = ~0ull, old32 = ~0ull;
			POK(pe, amo_fetch(&e, MORI_SHMEM_AMO_ADD, 8, 1, CTR64, 1, 0, &old));
			PCHECK(pe, old < (uint64_t)MAXPE * NFADD, "fetched %llu", (unsigned long long)old);
			PCHECK(pe, __atomic_fetch_add(&SH->seen[old], 1, __ATOMIC_SEQ_CST) == 0, "value %llu fetched twice",
			       (unsigned long long)old);
			POK(pe, amo_fetch(&e, MORI_SHMEM_AMO_ADD, 4, 1, CTR32, 3, 0, &old32));
			PCHECK(pe, old32 % 3 == 0 && old32 < 3ull * MAXPE * NFADD, "fetched32 %llu", (unsigned long long)old32);
			POK(pe, post(&e, MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_ADD, 8, 1, CTRNF, 0, 0, 0, 5, 0, NULL));
		}
	POK(pe, quiet(&e));
	if (pe == 0)
		SH->figures[2] = (double)(now_us() - t0) / (3.0 * NFADD);
	POK(pe, mori_shmem_barrier_all(e.g));
	int adders = n - 1;
	if (pe == 1) {
		uint64_t c64 = *(volatile uint64_t *)(e.heap + CTR64), nf = *(volatile uint64_t *)(e.heap + CTRNF);
		uint32_t c32 = *(volatile uint32_t *)(e.heap + CTR32);
		PCHECK(pe, c64 == (uint64_t)adders * NFADD, "64-bit counter %llu, want %llu", (unsigned long long)c64,
		       (unsigned long long)adders * NFADD);
		PCHECK(pe, c32 == 3u * adders * NFADD, "32-bit counter %u, want %u", c32, 3u * adders * NFADD);
		PCHECK(pe, nf == 5ull * adders * NFADD, "non-fetch counter %llu", (unsigned long long)nf);
		for (int i = 0; i < adders * NFADD; i++)
			PCHECK(pe, SH->seen[i] == 1, "value %d fetched %u times", i, SH->seen[i]);
	}
	if (pe == 0) {
		uint64_t model = 0;
		for (int i = 0; i < NSTEPS; i++) {
			uint64_t old = 0, want = model_step(&model, &steps[i]);
			POK(pe, amo_fetch(&e, steps[i].code, steps[i].width, 1, SEQW, steps[i].v, steps[i].cmp, &old));
			PCHECK(pe, old == want, "step %d (op %d, %d bytes): old %llx, model %llx", i, steps[i].code,
			       steps[i].width, (unsigned long long)old, (unsigned long long)want);
		}
		SH->figures[3] = (double)model;
	}
	POK(pe, mori_shmem_barrier_all(e.g));
	if (pe == 1)
		PCHECK(pe, *(volatile uint64_t *)(e.heap + SEQW) == (uint64_t)SH->figures[3], "final word %llx",
		       (unsigned long long)*(volatile uint64_t *)(e.heap + SEQW));
	mori_shmem_finalize(e.g);
	mori_client_close(e.c);
	return 0;
}

START_TEST(atomics)
{
	pe_run_all(4, pe_amo, NULL, 120, 0);
	printf("atomics: 3 PEs x %d fetch-adds (64- and 32-bit) and non-fetch adds on PE 1 (2 across the daemons, "
	       "1 through morid's local path): exact totals, every value once; %d ops against a model; PE 0: %.0f us "
	       "an atomic\n", NFADD, NSTEPS, SH->figures[2]);
}
END_TEST

/* ---- a full ring, and its latency ---- */

static int pe_full(int pe, int n, void *arg)
{
	(void)arg;
	struct pe e;
	if (join(pe, n, "full", &e))
		return 1;
	POK(pe, mori_shmem_barrier_all(e.g));
	if (pe == 0) {
		uint32_t entries = e.st->ctrl->ring_entries;
		PCHECK(pe, entries == 64, "ring of %u entries", entries);
		/* 40 laps of the ring, 8-byte puts, never waiting but for room */
		int total = (int)entries * 40, full = 0;
		uint64_t t0 = now_us();
		for (int k = 0; k < total; k++) {
			uint64_t v = 0x1000000ull + (uint64_t)k;
			memcpy(e.heap + SRC_OFF + 8ull * (k % 4096), &v, 8);
			struct mori_shmem_ctrl *c = e.st->ctrl;
			full += c->head - c->done >= entries;
			POK(pe, post(&e, MORI_SHMEM_OP_PUT, 0, 0, 1, AREA_OFF + 8ull * k, SRC_OFF + 8ull * (k % 4096), 8, 0, 0, 0,
				     NULL));
		}
		POK(pe, quiet(&e));
		SH->figures[4] = total / ((double)(now_us() - t0) / 1e6);
		SH->figures[5] = full;
		PCHECK(pe, full > 0, "the ring never filled");
		/* one request at a time: after back-to-back use, and after the proxy went idle */
		uint64_t seq, hot = 0, cold = 0;
		for (int i = 0; i < 20; i++) {
			uint64_t t = now_us();
			POK(pe, post(&e, MORI_SHMEM_OP_PUT, 0, 0, 1, AREA_OFF, SRC_OFF, 8, 0, 0, 0, &seq));
			POK(pe, wait_seq(&e, seq));
			hot += now_us() - t;
		}
		for (int i = 0; i < 10; i++) {
			usleep(20000);
			uint64_t t = now_us();
			POK(pe, post(&e, MORI_SHMEM_OP_PUT, 0, 0, 1, AREA_OFF, SRC_OFF, 8, 0, 0, 0, &seq));
			POK(pe, wait_seq(&e, seq));
			cold += now_us() - t;
		}
		SH->figures[6] = hot / 20.0;
		SH->figures[7] = cold / 10.0;
		SH->stage = total;
	}
	POK(pe, mori_shmem_barrier_all(e.g));
	if (pe == 1)
		for (int k = 20; k < SH->stage; k++) {
			uint64_t v;
			memcpy(&v, e.heap + AREA_OFF + 8ull * k, 8);
			PCHECK(pe, v == 0x1000000ull + (uint64_t)k, "put %d: %llx", k, (unsigned long long)v);
		}
	mori_shmem_finalize(e.g);
	mori_client_close(e.c);
	return 0;
}

START_TEST(full_ring)
{
	pe_run_all(2, pe_full, NULL, 90, 0);
	printf("full ring: %d puts of 8 B through a 64-entry ring (found full %.0f times), every one checked: %.0f "
	       "requests/s; one put waited for: %.0f us back to back, %.0f us after 20 ms idle\n",
	       SH->stage, SH->figures[5], SH->figures[4], SH->figures[6], SH->figures[7]);
}
END_TEST

/* ---- malformed requests ---- */

struct bad {
	const char *what;
	uint16_t op;
	uint8_t amo, width;
	int pe;
	uint64_t dst, src, len, sig;
	int code;
};
static const struct bad bads[] = {
	{"PE out of range", MORI_SHMEM_OP_PUT, 0, 0, 2, AREA_OFF, SRC_OFF, 8, 0, MORI_EINVAL},
	{"negative PE", MORI_SHMEM_OP_GET, 0, 0, -1, AREA_OFF, SRC_OFF, 8, 0, MORI_EINVAL},
	{"put past the heap", MORI_SHMEM_OP_PUT, 0, 0, 1, HEAP - 8, SRC_OFF, 16, 0, MORI_ERANGE},
	{"length wraps", MORI_SHMEM_OP_PUT, 0, 0, 1, 64, 64, ~0ull - 32, 0, MORI_ERANGE},
	{"get source outside", MORI_SHMEM_OP_GET, 0, 0, 1, AREA_OFF, 1ull << 40, 8, 0, MORI_ERANGE},
	{"unknown op", 99, 0, 0, 1, AREA_OFF, SRC_OFF, 8, 0, MORI_EPROTO},
	{"AMO of 3 bytes", MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_ADD, 3, 1, AREA_OFF, 0, 0, 0, MORI_EINVAL},
	{"AMO unaligned", MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_ADD, 8, 1, AREA_OFF + 4, 0, 0, 0, MORI_EINVAL},
	{"AMO code 0x40", MORI_SHMEM_OP_AMO, 0x40, 8, 1, AREA_OFF, 0, 0, 0, MORI_EINVAL},
	{"fetch into nowhere", MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_ADD | MORI_SHMEM_AMO_FETCH, 8, 1, AREA_OFF, HEAP, 0, 0,
	 MORI_ERANGE},
	{"signal op 3", MORI_SHMEM_OP_PUT_SIGNAL, 3, 8, 1, AREA_OFF, SRC_OFF, 8, SIG_ADD_OFF, MORI_EINVAL},
	{"signal past the heap", MORI_SHMEM_OP_PUT_SIGNAL, MORI_SHMEM_SIGNAL_SET, 8, 1, AREA_OFF, SRC_OFF, 8, HEAP, MORI_EINVAL},
};
#define NBAD (int)(sizeof(bads) / sizeof(bads[0]))

/* One group per case (the ring's error is sticky): PE 0 posts the bad request (its wait gets the
 * code), then a good put and a good atomic, which still happen; PE 1 checks those. */
static int pe_bad(int pe, int n, void *arg)
{
	const struct bad *b = arg;
	struct pe e;
	char name[32];
	snprintf(name, sizeof(name), "bad%d", (int)(b - bads));
	if (join(pe, n, name, &e))
		return 1;
	uint64_t *ctr = (uint64_t *)(e.heap + CTR64);
	POK(pe, mori_shmem_barrier_all(e.g));
	if (pe == 0) {
		uint64_t seq, v = 0xabcdef0123ull;
		memcpy(e.heap + SRC_OFF, &v, 8);
		POK(pe, post(&e, b->op, b->amo, b->width, b->pe, b->dst, b->src, b->len, b->sig, 1, 0, &seq));
		int rc = wait_seq(&e, seq);
		PCHECK(pe, rc == b->code, "%s: %s, want %s", b->what, mori_strerror(rc), mori_strerror(b->code));
		POK(pe, post(&e, MORI_SHMEM_OP_PUT, 0, 0, 1, AREA_OFF + 64, SRC_OFF, 8, 0, 0, 0, NULL));
		POK(pe, post(&e, MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_ADD, 8, 1, CTR64, 0, 0, 0, 7, 0, NULL));
		rc = quiet(&e);
		PCHECK(pe, rc == b->code, "quiet after %s: %s (the first error sticks)", b->what, mori_strerror(rc));
	}
	POK(pe, mori_shmem_barrier_all(e.g));
	if (pe == 1) {
		uint64_t v;
		memcpy(&v, e.heap + AREA_OFF + 64, 8);
		PCHECK(pe, v == 0xabcdef0123ull && *ctr == 7, "%s: the good put / AMO after it: %llx, %llu", b->what,
		       (unsigned long long)v, (unsigned long long)*ctr);
		if (b->op == MORI_SHMEM_OP_PUT && b->pe == 1) {
			/* nothing of the refused put was written */
			for (uint64_t i = HEAP - 8; i < HEAP; i++)
				PCHECK(pe, e.heap[i] == 0, "byte %llu written", (unsigned long long)i);
		}
	}
	mori_shmem_finalize(e.g);
	mori_client_close(e.c);
	return 0;
}

START_TEST(malformed)
{
	for (int i = 0; i < NBAD; i++)
		pe_run_all(2, pe_bad, (void *)&bads[i], 30, 0);
	printf("malformed: %d kinds of bad request, each answered with its code; the good requests after each "
	       "still done; both morids stop cleanly\n", NBAD);
}
END_TEST

/* ---- the peer morid killed mid-stream ---- */

static int pe_killed(int pe, int n, void *arg)
{
	(void)arg;
	struct pe e;
	if (join(pe, n, "killed", &e))
		return 1;
	POK(pe, mori_shmem_barrier_all(e.g));
	if (pe == 1) {
		for (;;)
			pause(); /* its morid dies under it */
	}
	if (pe == 2) { /* posts nothing: waits as wait_until would, on a word only PE 1 sets */
		uint64_t t0 = now_us();
		int rc;
		while (!(rc = aborted(e.st->ctrl)) && now_us() - t0 < WAIT_US)
			usleep(100);
		uint64_t waited = SH->kill_us ? now_us() - SH->kill_us : 0;
		PCHECK(pe, rc == MORI_EPEERDEAD && e.st->ctrl->abort_pe == 1, "abort word: %s (PE %d)", mori_strerror(rc),
		       e.st->ctrl->abort_pe);
		PCHECK(pe, SH->stage == 2 && waited < 2000000, "aborted %llu us after the kill", (unsigned long long)waited);
		SH->figures[2] = waited;
		SH->idle_done = 1;
		mori_client_close(e.c);
		return 0;
	}
	/* stream puts (each waited for now and then) until one fails; with arg, fetching atomics,
	 * each waited for (they travel as messages on the data streams, not as transfers) */
	uint64_t seq = 0, old = 0;
	int rc = 0;
	for (int k = 0; k < 1000000 && !rc; k++) {
		if (k == 200)
			SH->stage = 1; /* the parent kills B now */
		if (arg) {
			rc = amo_fetch(&e, MORI_SHMEM_AMO_ADD, 8, 1, AREA_OFF, 1, 0, &old);
			continue;
		}
		rc = post(&e, MORI_SHMEM_OP_PUT, 0, 0, 1, AREA_OFF + 8ull * (k % 1000), SRC_OFF, 4096, 0, 0, 0, &seq);
		if (!rc && k % 16 == 0)
			rc = wait_seq(&e, seq);
	}
	uint64_t waited = SH->kill_us ? now_us() - SH->kill_us : 0;
	PCHECK(pe, SH->stage == 2, "the ring failed (%s) before the kill", mori_strerror(rc));
	PCHECK(pe, rc == MORI_EPEERDEAD || rc == MORI_ETIMEDOUT || rc == MORI_ECONN || rc == MORI_ECANCELED,
	       "ended with %s", mori_strerror(rc));
	PCHECK(pe, waited < 12000000, "the error took %llu us after the kill", (unsigned long long)waited);
	/* a message on the dead node's data stream ends when the stream does, not at its deadline */
	PCHECK(pe, !arg || (rc == MORI_EPEERDEAD && waited < 2000000), "atomics ended with %s %llu us after the kill",
	       mori_strerror(rc), (unsigned long long)waited);
	SH->figures[0] = waited;
	SH->figures[1] = rc;
	for (int i = 0; i < 5000 && !SH->idle_done; i++)
		usleep(1000); /* PE 0 leaving would tear the group down: PE 2 would see that first */
	mori_client_close(e.c);
	return 0;
}

static void run_killed(void *amo)
{
	pid_t pids[3];
	memset(SH->msg, 0, sizeof(SH->msg));
	SH->stage = 0;
	SH->kill_us = 0;
	SH->idle_done = 0;
	for (int i = 0; i < 3; i++)
		if ((pids[i] = fork()) == 0) {
			child_deadline(60);
			_exit(pe_killed(i, 3, amo) ? 1 : 0);
		}
	while (SH->stage == 0)
		usleep(1000);
	SH->kill_us = now_us();
	SH->stage = 2;
	node_kill9(&NB);
	kill(pids[1], SIGKILL);
	int st;
	ck_assert_int_eq(waitpid(pids[1], &st, 0), pids[1]);
	ck_assert_int_eq(waitpid(pids[0], &st, 0), pids[0]);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "PE 0: %s", SH->msg[0]);
	ck_assert_int_eq(waitpid(pids[2], &st, 0), pids[2]);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "PE 2: %s", SH->msg[2]);
	printf("peer killed: morid B killed mid-stream of %s; PE 0's ring ended with %s %.0f ms after the kill; PE 2 "
	       "(posting nothing) saw the abort word (PEER_DEAD, PE 1) %.0f ms after it\n",
	       amo ? "fetching atomics" : "puts", mori_strerror((int)SH->figures[1]), SH->figures[0] / 1000,
	       SH->figures[2] / 1000);
}

START_TEST(peer_killed) { run_killed(NULL); }
END_TEST

START_TEST(peer_killed_amo) { run_killed((void *)1); }
END_TEST

/* ---- the peer morid killed while nothing flows ---- */

/* PEs 0 and 2 (A) post nothing and wait as wait_until would; morid B is killed: both see their
 * abort word (PEER_DEAD) within 2 s, though no transfer was under way to notice it. */
static int pe_idle_kill(int pe, int n, void *arg)
{
	(void)arg;
	struct pe e;
	if (join(pe, n, "idle", &e))
		return 1;
	POK(pe, mori_shmem_barrier_all(e.g));
	if (pe & 1)
		for (;;)
			pause();
	__atomic_fetch_add(&SH->stage, 1, __ATOMIC_SEQ_CST);
	uint64_t t0 = now_us();
	int rc;
	while (!(rc = aborted(e.st->ctrl)) && now_us() - t0 < WAIT_US)
		usleep(100);
	uint64_t waited = SH->kill_us ? now_us() - SH->kill_us : 0;
	PCHECK(pe, rc == MORI_EPEERDEAD && SH->kill_us, "abort word: %s (PE %d)", mori_strerror(rc), e.st->ctrl->abort_pe);
	PCHECK(pe, waited < 2000000, "aborted %llu us after the kill", (unsigned long long)waited);
	SH->figures[pe] = waited;
	mori_client_close(e.c);
	return 0;
}

START_TEST(peer_killed_idle)
{
	pid_t pids[3];
	memset(SH->msg, 0, sizeof(SH->msg));
	SH->stage = 0;
	SH->kill_us = 0;
	for (int i = 0; i < 3; i++)
		if ((pids[i] = fork()) == 0) {
			child_deadline(60);
			_exit(pe_idle_kill(i, 3, NULL) ? 1 : 0);
		}
	uint64_t t0 = now_us();
	while (SH->stage < 2 && now_us() - t0 < 30000000)
		usleep(1000);
	usleep(100000);
	SH->kill_us = now_us();
	node_kill9(&NB);
	int st;
	kill(pids[1], SIGKILL);
	ck_assert_int_eq(waitpid(pids[1], &st, 0), pids[1]);
	for (int i = 0; i < 3; i += 2) {
		ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "PE %d: %s", i, SH->msg[i]);
	}
	printf("peer killed while idle: PEs 0 and 2 (posting nothing) saw the abort word %.0f and %.0f ms after morid B "
	       "was killed\n", SH->figures[0] / 1000, SH->figures[2] / 1000);
}
END_TEST

/* ---- the root's morid killed under a pending barrier ---- */

/* PE 1 (B) waits in a host barrier PE 0 (A, the root's node) never joins; morid A is killed: B's
 * proxy sets PE 1's abort word (PEER_DEAD, PE 0) within ms, and the pending call must end with
 * it then, not at its deadline (20 s) plus the 3 s backstop with another code (found by helper
 * "tester"). */
static int pe_root_killed(int pe, int n, void *arg)
{
	(void)arg;
	struct pe e;
	if (join(pe, n, "rootkill", &e))
		return 1;
	POK(pe, mori_shmem_barrier_all(e.g));
	if (pe == 0) {
		SH->stage = 1;
		for (;;)
			pause(); /* its morid dies under it */
	}
	int rc = mori_shmem_barrier_all(e.g);
	uint64_t waited = SH->kill_us ? now_us() - SH->kill_us : 0;
	mori_status sst;
	int st = mori_shmem_status(e.g, &sst), who = sst.pe;
	PCHECK(pe, SH->stage == 2, "the barrier ended (%s) before the kill", mori_strerror(rc));
	PCHECK(pe, rc == MORI_EPEERDEAD, "the barrier ended with %s (%s)", mori_strerror(rc), mori_client_last_error(e.c));
	PCHECK(pe, st == rc && who == 0, "status %s naming PE %d, the barrier %s", mori_strerror(st), who,
	       mori_strerror(rc));
	PCHECK(pe, waited < 3000000, "the barrier ended %llu ms after the kill", (unsigned long long)waited / 1000);
	SH->figures[1] = waited;
	mori_client_close(e.c);
	return 0;
}

START_TEST(root_killed_ends_call)
{
	pid_t pids[2];
	memset(SH->msg, 0, sizeof(SH->msg));
	SH->stage = 0;
	SH->kill_us = 0;
	for (int i = 0; i < 2; i++)
		if ((pids[i] = fork()) == 0) {
			child_deadline(60);
			_exit(pe_root_killed(i, 2, NULL) ? 1 : 0);
		}
	while (SH->stage == 0)
		usleep(1000);
	usleep(300000); /* PE 1's barrier is at the root */
	SH->kill_us = now_us();
	SH->stage = 2;
	node_kill9(&NA);
	kill(pids[0], SIGKILL);
	int st;
	ck_assert_int_eq(waitpid(pids[0], &st, 0), pids[0]);
	ck_assert_int_eq(waitpid(pids[1], &st, 0), pids[1]);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "PE 1: %s", SH->msg[1]);
	printf("root killed: PE 1's pending barrier ended with MORI_EPEERDEAD (PE 0) %.0f ms after morid A was killed\n",
	       SH->figures[1] / 1000);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("shmem_proxy");
	TCase *t = tcase_create("proxy");
	tcase_add_unchecked_fixture(t, shared_setup, NULL);
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 180);
	tcase_add_test(t, puts_gets);
	tcase_add_test(t, put_signal);
	tcase_add_test(t, put_signal_large);
	tcase_add_test(t, atomics);
	tcase_add_test(t, full_ring);
	tcase_add_test(t, malformed);
	tcase_add_test(t, peer_killed);
	tcase_add_test(t, peer_killed_amo);
	tcase_add_test(t, peer_killed_put_signal);
	tcase_add_test(t, peer_killed_idle);
	tcase_add_test(t, root_killed_ends_call);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *r = srunner_create(suite());
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
