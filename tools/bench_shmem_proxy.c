/* mori-bench shmem --proxy: MORI-SHMEM's proxy path on any machine (no GPU): two morids (started
 * here on loopback, or the ones named), a group of 4 host-heap PEs split across them (PEs 0, 2
 * on A; 1, 3 on B), each PE a forked process whose host function writes its proxy ring exactly
 * as a kernel does (common/shmem_ring_host.h). Measured through the ring, each beside a baseline
 * of the same run:
 *
 *   put+signal ping-pong, 8 bytes, PE 0 <-> PE 1: half the round trip, p50/p99/mean
 *     baseline: 8-byte TCP ping-pong between two local processes (TCP_NODELAY), half round trip
 *   large put+signal ping-pong, 64 KiB / 1 MiB / 4 MiB each way (more than fits the signal's
 *     message: a transfer, and its signal), PE 0 <-> PE 1: half the round trip p50/p99, GB/s
 *     baselines: one mori_write of the same size between the same heaps, waited for (what a
 *     put+signal costs at best: the data there and acknowledged), and the TCP stream's GB/s
 *   put bandwidth PE 0 -> PE 1, 4 KiB .. 16 MiB (puts back to back, then quiet)
 *     baselines: the same bytes as plain mori_write transfers between the same two heaps (what
 *     the proxy rides on: the daemons' transfer path), and a TCP stream between two processes
 *   EP chunks (issue 14's seam on the proxy): every PE one 8 MiB chunk a round to each PE of the
 *     other node as 4 MiB puts, the last a put+signal, interleaved in the ring as the EP post
 *     kernel's threads post them; both directions at once: GB/s crossing in all
 *     baseline: the TCP stream (4 MiB writes, one way)
 *   fetch-add rate: PEs 0 and 2 each fetch-add one 64-bit word of PE 1, each op waited for
 *     (exact total checked)
 *   barrier latency, 4 PEs: the device API's barrier_all (quiet, flag AMO_SET to every PE by
 *     proxy or by store, wait for every flag), p50/p99/mean
 *     baseline: the host API's mori_shmem_barrier_all (the daemons' control path), same PEs
 *   idle: each morid's CPU share over 2 s while the 4 PEs stay joined and post nothing
 *
 * Default run: about 10-20 s. --iters scales the latency loops, --max the largest put. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mori.h"
#include "mori_shmem.h"
#include "shmem_ring_host.h"

int bench_shmem_proxy_main(int argc, char **argv);

#define NPE 4
#define HEAP (48ull << 20)
#define PP_SIG (MORI_SHMEM_OFF_FREE)               /* ping-pong: the signal word each PE waits on */
#define PP_BUF (MORI_SHMEM_OFF_FREE + 64)          /* ping-pong: the 8 bytes */
#define CTR (MORI_SHMEM_OFF_FREE + 128)            /* fetch-add word */
#define SB_SIG (MORI_SHMEM_OFF_FREE + 192)         /* large put+signal ping-pong: the signal word */
#define NSB 3                                      /* its sizes: 64 KiB, 1 MiB, 4 MiB */
#define DST_OFF (1ull << 20)                       /* puts land here, 16 MiB */
#define SRC_OFF (DST_OFF + (16ull << 20))          /* puts' source, 16 MiB */
#define SPAN (16ull << 20)
#define NSIZES 7                                   /* 4 KiB .. 16 MiB, x4 */
#define WAIT_US 20000000ull
#define FADDS 1000
enum { ONLY_PP = 1, ONLY_PUT = 2, ONLY_FADD = 4, ONLY_BAR = 8, ONLY_IDLE = 16, ONLY_SB = 32, ONLY_CHUNK = 64, ONLY_ALL = 127 };
#define CH_PIECE (4ull << 20)                      /* chunks: the EP kernels' put size (MORI_EPX_PUT_MAX) */
#define CH_LEN (2 * CH_PIECE)                      /* chunks: one to each PE of the other node a round */
#define CH_SIG (MORI_SHMEM_OFF_FREE + 256)         /* chunks: + src x 8, SET to the round */
#define CH_ROUNDS 24
#define CH_TCP 5                                   /* chunks: the TCP baseline's size index of 4 MiB (4 KiB x 4^5) */
#define PP_PROF 4096                            /* rounds whose stages MORI_BENCH_PROF=FILE writes out */

struct shared {
	char err[NPE][300];
	char blob[NPE][MORI_MEM_BLOB_MAX];
	size_t blob_len[NPE];
	volatile int idle_go, idle_done;
	int iters, nsizes;
	int only;                       /* bit mask of the phases to run (ONLY_*) */
	double pp[3];                   /* put+signal half round trip p50 p99 mean, us */
	double sb[NSB][3], sbw[NSB][3]; /* large put+signal half round trip / mori_write waited, p50 p99 mean, us */
	int sb_n[NSB];
	double put[NSIZES], wr[NSIZES]; /* GB/s */
	int wr_ok;
	double fadd_rate, fadd_us;
	uint64_t fadd_total;
	double bar[3], hbar[3];         /* us */
	double chunk_us[3];             /* chunks: PE 0's time for CH_ROUNDS rounds, three trials */
	uint64_t pp_t[PP_PROF][3];      /* ping-pong round: PE 0 posts, PE 1 sees, PE 0 sees (us) */
};
static struct shared *SH;

#define PFAIL(pe, ...)                                                                             \
	do {                                                                                       \
		snprintf(SH->err[pe], sizeof(SH->err[pe]), __VA_ARGS__);                           \
		return 1;                                                                          \
	} while (0)
#define PCK(pe, x)                                                                                 \
	do {                                                                                       \
		int r_ = (x);                                                                      \
		if (r_)                                                                            \
			PFAIL(pe, "%s: %s (%s)", #x, mori_strerror(r_), mori_client_last_error(NULL)); \
	} while (0)

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}
static void stats(double *v, int n, double out[3])
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += v[i];
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	out[0] = v[n / 2];
	out[1] = v[(int)(0.99 * n) < n ? (int)(0.99 * n) : n - 1];
	out[2] = s / n;
}
static uint64_t size_of(int i) { return 4096ull << (2 * i); }
static const int sb_size_i[NSB] = {2, 4, 5}; /* size_of: 64 KiB, 1 MiB, 4 MiB */

/* ---- the daemons ---- */

struct node {
	pid_t pid;
	char dir[128], addr[64];
};

static int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(sa);
	int s = socket(AF_INET, SOCK_STREAM, 0), port = -1;
	if (s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 && getsockname(s, (struct sockaddr *)&sa, &l) == 0)
		port = ntohs(sa.sin_port);
	if (s >= 0)
		close(s);
	return port;
}

/* morid on loopback with its own runtime dir (removed by node_stop), its log in <dir>.log. */
static int node_start(struct node *n, const char *morid, const char *const *extra)
{
	snprintf(n->dir, sizeof(n->dir), "/tmp/mori-pbench-XXXXXX");
	if (!mkdtemp(n->dir))
		return -1;
	snprintf(n->addr, sizeof(n->addr), "127.0.0.1:%d", free_port());
	char sock[200], log[200];
	snprintf(sock, sizeof(sock), "%s/morid.sock", n->dir);
	snprintf(log, sizeof(log), "%s.log", n->dir);
	if ((n->pid = fork()) < 0)
		return -1;
	if (n->pid == 0) {
		const char *av[40] = {morid, "--runtime-dir", n->dir, "--listen", n->addr, "--log-level", "warn"};
		int k = 7;
		for (int i = 0; extra && extra[i] && k < 38; i++)
			av[k++] = extra[i];
		av[k] = NULL;
		if (!freopen(log, "a", stderr))
			_exit(127);
		unsetenv("NOTIFY_SOCKET");
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execv(morid, (char *const *)av);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		struct stat st;
		int status;
		if (stat(sock, &st) == 0) {
			usleep(50000); /* the peer listener binds right after the control socket */
			return 0;
		}
		if (waitpid(n->pid, &status, WNOHANG) == n->pid)
			break;
		usleep(10000);
	}
	fprintf(stderr, "mori-bench shmem --proxy: %s did not start (see %s)\n", morid, log);
	return -1;
}

static void node_stop(struct node *n)
{
	if (n->pid <= 0)
		return;
	kill(n->pid, SIGTERM);
	int st;
	for (int i = 0; i < 300 && waitpid(n->pid, &st, WNOHANG) == 0; i++)
		usleep(10000);
	if (waitpid(n->pid, &st, WNOHANG) == 0) {
		kill(n->pid, SIGKILL);
		waitpid(n->pid, &st, 0);
	}
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s.log'", n->dir, n->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "mori-bench shmem --proxy: could not remove %s\n", n->dir);
}

/* utime + stime of pid, in clock ticks */
static long long cpu_ticks(pid_t pid)
{
	char p[64], b[1024];
	snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return -1;
	size_t n = fread(b, 1, sizeof(b) - 1, f);
	fclose(f);
	b[n] = 0;
	char *s = strrchr(b, ')');
	unsigned long long ut, st;
	if (!s || sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (long long)(ut + st);
}

/* ---- the PEs ---- */

struct pe {
	mori_client *c;
	mori_group *g;
	struct shmem_ring_pe r;
	int me;
};

static const char *node_dir[NPE], *root_addr;

/* The device API's barrier_all on the host: quiet, this PE's flag to every PE (a store where
 * this PE maps the heap, else a proxy AMO_SET behind the ring's earlier requests), then every
 * flag of its own heap. */
static int dev_barrier(struct pe *e, uint64_t *epoch)
{
	int rc;
	uint64_t ep = ++*epoch;
	struct mori_shmem_ctrl *c = e->r.ctrl;
	if (__atomic_load_n(&c->head, __ATOMIC_RELAXED) != __atomic_load_n(&c->done, __ATOMIC_ACQUIRE) &&
	    (rc = shmem_ring_quiet(&e->r)))
		return rc;
	uint64_t flag = MORI_SHMEM_OFF_BAR_FLAG + 8ull * (uint64_t)e->me;
	for (int q = 0; q < NPE; q++) {
		uint64_t *w = q == e->me ? (uint64_t *)(e->r.heap + flag) : mori_shmem_ptr_p2p(e->g, e->r.heap + flag, q);
		if (w)
			__atomic_store_n(w, ep, __ATOMIC_RELEASE);
		else if ((rc = shmem_ring_post(&e->r, MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_SET, 8, q, flag, 0, 0, 0, ep, 0, NULL)))
			return rc;
	}
	for (int q = 0; q < NPE; q++)
		if ((rc = shmem_ring_wait_ge(&e->r, MORI_SHMEM_OFF_BAR_FLAG + 8ull * (uint64_t)q, ep)))
			return rc;
	return 0;
}

static int pe_pingpong(struct pe *e, int iters)
{
	int me = e->me, peer = 1 - me, warm = iters / 10 + 10;
	double *v = malloc(sizeof(double) * (size_t)iters);
	if (!v)
		PFAIL(me, "out of memory");
	for (int r = 1; r <= warm + iters; r++) {
		uint64_t t0 = shmem_ring_now_us();
		if (me == 1)
			PCK(me, shmem_ring_wait_ge(&e->r, PP_SIG, (uint64_t)r));
		if (r <= PP_PROF)
			SH->pp_t[r - 1][me] = shmem_ring_now_us();
		PCK(me, shmem_ring_post(&e->r, MORI_SHMEM_OP_PUT_SIGNAL, MORI_SHMEM_SIGNAL_SET, 8, peer, PP_BUF, PP_BUF, 8,
					PP_SIG, (uint64_t)r, 0, NULL));
		if (me == 0) {
			PCK(me, shmem_ring_wait_ge(&e->r, PP_SIG, (uint64_t)r));
			if (r <= PP_PROF)
				SH->pp_t[r - 1][2] = shmem_ring_now_us();
			if (r > warm)
				v[r - warm - 1] = (double)(shmem_ring_now_us() - t0) / 2;
		}
	}
	if (me == 0)
		stats(v, iters, SH->pp);
	free(v);
	return shmem_ring_quiet(&e->r);
}

/* PEs 0 and 1: put+signal ping-pong of size_of(sb_size_i[i]) bytes each way (a transfer and its
 * signal), the bytes' ends checked at each signal; then PE 0 alone: one mori_write of the same
 * size between the same heaps, waited for, as many times. */
static int pe_sigbig(struct pe *e, int iters)
{
	int me = e->me, peer = 1 - me;
	uint64_t r = 0;
	mori_mem *loc = NULL, *rem = NULL;
	int wr = me == 0 && mori_mem_register(e->c, e->r.heap, HEAP, MORI_MEM_HOST, &loc) == 0 &&
		 mori_mem_unpack(e->c, SH->blob[1], SH->blob_len[1], &rem) == 0;
	for (int i = 0; i < NSB; i++) {
		uint64_t b = size_of(sb_size_i[i]);
		int n = iters / (b <= (64u << 10) ? 5 : b <= (1u << 20) ? 20 : 50), warm = 5;
		n = n < 10 ? 10 : n;
		double *v = malloc(sizeof(double) * (size_t)n), *w = malloc(sizeof(double) * (size_t)n);
		if (!v || !w)
			PFAIL(me, "out of memory");
		for (int k = 0; k < warm + n; k++) {
			uint64_t t0 = shmem_ring_now_us();
			r++;
			if (me == 1)
				PCK(me, shmem_ring_wait_ge(&e->r, SB_SIG, r));
			if (me == 1 || k > 0) { /* the peer's bytes of this round, both ends, as its source holds them */
				const uint64_t *d = (const uint64_t *)(e->r.heap + DST_OFF);
				uint64_t last = b / 8 - 1;
				if (d[0] != (0 ^ (uint64_t)peer) || d[last] != ((last * 8) * 0x9E3779B97F4A7C15ull ^ (uint64_t)peer))
					PFAIL(me, "round %llu: the %llu bytes not there at their signal", (unsigned long long)r,
					      (unsigned long long)b);
			}
			PCK(me, shmem_ring_post(&e->r, MORI_SHMEM_OP_PUT_SIGNAL, MORI_SHMEM_SIGNAL_SET, 8, peer, DST_OFF, SRC_OFF, b,
						SB_SIG, r, 0, NULL));
			if (me == 0) {
				PCK(me, shmem_ring_wait_ge(&e->r, SB_SIG, r));
				if (k >= warm)
					v[k - warm] = (double)(shmem_ring_now_us() - t0) / 2;
			}
		}
		PCK(me, shmem_ring_quiet(&e->r));
		if (me == 0) {
			stats(v, n, SH->sb[i]);
			SH->sb_n[i] = n;
		}
		for (int k = 0; wr && k < warm + n; k++) {
			mori_desc d = {SRC_OFF, DST_OFF, b};
			mori_xfer *x = NULL;
			uint64_t t0 = shmem_ring_now_us();
			PCK(0, mori_xfer_batch(MORI_XFER_WRITE, loc, rem, &d, 1, NULL, &x));
			PCK(0, mori_xfer_wait(x, 10000000));
			mori_xfer_free(x);
			if (k >= warm)
				w[k - warm] = (double)(shmem_ring_now_us() - t0);
		}
		if (wr)
			stats(w, n, SH->sbw[i]);
		free(v);
		free(w);
		/* both PEs at this size's end before the next (PE 1 must not see the next size's first
		 * signal with this size's bytes) */
		if (me == 0)
			PCK(me, shmem_ring_post(&e->r, MORI_SHMEM_OP_AMO, MORI_SHMEM_AMO_SET, 8, 1, SB_SIG + 8, 0, 0, 0, r, 0, NULL));
		else
			PCK(me, shmem_ring_wait_ge(&e->r, SB_SIG + 8, r));
		PCK(me, shmem_ring_quiet(&e->r));
	}
	mori_mem_deregister(rem);
	mori_mem_deregister(loc);
	return 0;
}

/* PE 0's puts to PE 1, then the same bytes as mori_write transfers between the same heaps. */
static int pe_put(struct pe *e)
{
	mori_mem *loc = NULL, *rem = NULL;
	SH->wr_ok = mori_mem_register(e->c, e->r.heap, HEAP, MORI_MEM_HOST, &loc) == 0 &&
		    mori_mem_unpack(e->c, SH->blob[1], SH->blob_len[1], &rem) == 0;
	if (!SH->wr_ok)
		fprintf(stderr, "mori-bench shmem --proxy: no mori_write baseline: %s\n", mori_client_last_error(NULL));
	for (int i = 0; i < SH->nsizes; i++) {
		uint64_t b = size_of(i), total = b < (1u << 20) ? (8ull << 20) : 4 * b > (32ull << 20) ? 4 * b : 32ull << 20;
		uint64_t n = total / b;
		double t[3], w[3];
		for (int it = 0; it < 3; it++) {
			uint64_t t0 = shmem_ring_now_us();
			for (uint64_t k = 0; k < n; k++)
				PCK(0, shmem_ring_post(&e->r, MORI_SHMEM_OP_PUT, 0, 0, 1, DST_OFF + k * b % SPAN, SRC_OFF + k * b % SPAN,
						       b, 0, 0, 0, NULL));
			PCK(0, shmem_ring_quiet(&e->r));
			t[it] = (double)(shmem_ring_now_us() - t0);
			w[it] = 0;
			if (!SH->wr_ok)
				continue;
			/* as the proxy carries them: batches of up to 64 requests (16 MiB), 8 in flight */
			mori_xfer *x[8] = {0};
			mori_desc d[64];
			t0 = shmem_ring_now_us();
			uint64_t k = 0;
			for (int slot = 0; k < n; slot = (slot + 1) % 8) {
				if (x[slot]) {
					PCK(0, mori_xfer_wait(x[slot], 10000000));
					mori_xfer_free(x[slot]);
					x[slot] = NULL;
				}
				size_t nd = 0;
				for (uint64_t bytes = 0; k < n && nd < 64 && bytes + b <= (16ull << 20); k++, nd++, bytes += b)
					d[nd] = (mori_desc){SRC_OFF + k * b % SPAN, DST_OFF + k * b % SPAN, b};
				PCK(0, mori_xfer_batch(MORI_XFER_WRITE, loc, rem, d, nd, NULL, &x[slot]));
			}
			for (int s = 0; s < 8; s++)
				if (x[s]) {
					PCK(0, mori_xfer_wait(x[s], 10000000));
					mori_xfer_free(x[s]);
				}
			w[it] = (double)(shmem_ring_now_us() - t0);
		}
		qsort(t, 3, sizeof(double), cmp_d);
		qsort(w, 3, sizeof(double), cmp_d);
		SH->put[i] = (double)(n * b) / t[1] / 1e3;
		SH->wr[i] = SH->wr_ok ? (double)(n * b) / w[1] / 1e3 : 0;
	}
	mori_mem_deregister(rem);
	mori_mem_deregister(loc);
	return 0;
}

/* issue 14's traffic on the proxy (kernels/ep_internode.cu, seam_put_signal): every PE sends one
 * chunk a round to each PE of the other node, as 4 MiB puts then a put+signal SET of the round,
 * the two destinations interleaved in the ring as the post kernel's threads post them, then waits
 * for both chunks of the round from there. Both directions at once; the bytes are not checked
 * (test_ep_seam checks them), the signals are. */
static int pe_chunks(struct pe *e)
{
	const int me = e->me, peers[2] = {!(me & 1), 2 + !(me & 1)}; /* PEs 0, 2 on A; 1, 3 on B */
	uint64_t t0 = 0;
	for (uint64_t r = 1; r <= 3 * CH_ROUNDS; r++) { /* three trials of CH_ROUNDS */
		if (r % CH_ROUNDS == 1)
			t0 = shmem_ring_now_us();
		for (uint64_t o = 0; o < CH_LEN; o += CH_PIECE)
			for (int j = 0; j < 2; j++) {
				uint64_t src = SRC_OFF + (uint64_t)j * CH_LEN + o, dst = DST_OFF + (uint64_t)(me >> 1) * CH_LEN + o;
				if (o + CH_PIECE < CH_LEN)
					PCK(me, shmem_ring_post(&e->r, MORI_SHMEM_OP_PUT, 0, 0, peers[j], dst, src, CH_PIECE, 0, 0, 0, NULL));
				else
					PCK(me, shmem_ring_post(&e->r, MORI_SHMEM_OP_PUT_SIGNAL, MORI_SHMEM_SIGNAL_SET, 8, peers[j], dst, src,
								CH_PIECE, CH_SIG + 8ull * (uint64_t)me, r, 0, NULL));
			}
		for (int j = 0; j < 2; j++) {
			PCK(me, shmem_ring_wait_ge(&e->r, CH_SIG + 8ull * (uint64_t)peers[j], r));
			uint64_t v = __atomic_load_n((uint64_t *)(e->r.heap + CH_SIG + 8ull * (uint64_t)peers[j]), __ATOMIC_ACQUIRE);
			if (v > r + 1) /* a peer runs at most one round ahead (it waits for mine) */
				PFAIL(me, "chunks: round %llu: PE %d's signal says %llu", (unsigned long long)r, peers[j],
				      (unsigned long long)v);
		}
		if (me == 0 && r % CH_ROUNDS == 0)
			SH->chunk_us[r / CH_ROUNDS - 1] = (double)(shmem_ring_now_us() - t0);
	}
	PCK(me, shmem_ring_quiet(&e->r));
	return 0;
}

static int pe_fadd(struct pe *e)
{
	uint64_t t0 = shmem_ring_now_us(), old;
	for (int k = 0; k < FADDS; k++)
		PCK(e->me, shmem_ring_amo_fetch(&e->r, MORI_SHMEM_AMO_ADD, 8, 1, CTR, 1, 0, &old));
	if (e->me == 0) {
		SH->fadd_us = (double)(shmem_ring_now_us() - t0) / FADDS;
		SH->fadd_rate = 2e6 / SH->fadd_us; /* PE 2 runs alongside */
	}
	return 0;
}

static int pe_main(int me)
{
	struct pe e = {.me = me};
	char label[24];
	prctl(PR_SET_TIMERSLACK, 1); /* a PE plays a kernel that polls: its 20 us naps stay 20 us (default slack 50 us) */
	snprintf(label, sizeof(label), "bench%d", me);
	PCK(me, mori_client_open(node_dir[me], label, &e.c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = HEAP;
	o.root = root_addr;
	o.timeout_us = 20000000;
	PCK(me, mori_shmem_init(e.c, "proxybench", me, NPE, &o, &e.g));
	struct mori_shmem_state *st = mori_shmem_state(e.g);
	if (!st || !st->ctrl || !st->ring)
		PFAIL(me, "no proxy ring");
	e.r = (struct shmem_ring_pe){.ctrl = st->ctrl, .ring = st->ring, .heap = mori_shmem_heap_base(e.g), .my_pe = me,
				     .wait_us = WAIT_US};
	for (uint64_t i = 0; i < SPAN; i += 8)
		*(uint64_t *)(e.r.heap + SRC_OFF + i) = i * 0x9E3779B97F4A7C15ull ^ (uint64_t)me;
	mori_mem *mine = NULL;
	if (me == 1) { /* the mori_write baseline's target: this heap's bytes as a region */
		if (mori_mem_register(e.c, e.r.heap, HEAP, MORI_MEM_HOST, &mine) ||
		    mori_mem_pack(mine, SH->blob[1], sizeof(SH->blob[1]), &SH->blob_len[1]))
			SH->blob_len[1] = 0;
	}
	PCK(me, mori_shmem_barrier_all(e.g));
	if ((SH->only & ONLY_PP) && me < 2 && pe_pingpong(&e, SH->iters))
		return 1;
	PCK(me, mori_shmem_barrier_all(e.g));
	if ((SH->only & ONLY_SB) && me < 2 && pe_sigbig(&e, SH->iters))
		return 1;
	PCK(me, mori_shmem_barrier_all(e.g));
	if ((SH->only & ONLY_PUT) && me == 0 && pe_put(&e))
		return 1;
	PCK(me, mori_shmem_barrier_all(e.g));
	if ((SH->only & ONLY_CHUNK) && pe_chunks(&e))
		return 1;
	PCK(me, mori_shmem_barrier_all(e.g));
	if ((SH->only & ONLY_FADD) && (me == 0 || me == 2) && pe_fadd(&e))
		return 1;
	PCK(me, mori_shmem_barrier_all(e.g));
	if ((SH->only & ONLY_FADD) && me == 1) {
		SH->fadd_total = __atomic_load_n((uint64_t *)(e.r.heap + CTR), __ATOMIC_ACQUIRE);
		if (SH->fadd_total != 2 * FADDS)
			PFAIL(me, "fetch-add total %llu, expected %d", (unsigned long long)SH->fadd_total, 2 * FADDS);
	}
	/* barriers: the device API's through the proxy, then the host API's */
	int nb = !(SH->only & ONLY_BAR) ? 0 : SH->iters / 4 > 50 ? SH->iters / 4 : 50, warm = nb ? 20 : 0;
	double *v = malloc(sizeof(double) * (size_t)nb), *h = malloc(sizeof(double) * (size_t)nb);
	uint64_t epoch = 0;
	if (!v || !h)
		PFAIL(me, "out of memory");
	for (int i = 0; i < warm + nb; i++) {
		uint64_t t0 = shmem_ring_now_us();
		PCK(me, dev_barrier(&e, &epoch));
		if (i >= warm)
			v[i - warm] = (double)(shmem_ring_now_us() - t0);
	}
	for (int i = 0; i < warm + nb; i++) {
		uint64_t t0 = shmem_ring_now_us();
		PCK(me, mori_shmem_barrier_all(e.g));
		if (i >= warm)
			h[i - warm] = (double)(shmem_ring_now_us() - t0);
	}
	if (me == 0 && nb) {
		stats(v, nb, SH->bar);
		stats(h, nb, SH->hbar);
	}
	free(v);
	free(h);
	/* idle: joined, posting nothing, while the parent samples the daemons' CPU */
	__atomic_fetch_add(&SH->idle_go, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 1000 && (SH->only & ONLY_IDLE) && !SH->idle_done; i++)
		usleep(10000);
	PCK(me, mori_shmem_barrier_all(e.g));
	mori_mem_deregister(mine);
	mori_shmem_finalize(e.g);
	mori_client_close(e.c);
	return 0;
}

/* ---- TCP baselines: two local processes ---- */

static int tcp_pair(int *a, int *b)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(sa);
	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&sa, &l))
		return -1;
	*a = socket(AF_INET, SOCK_STREAM, 0);
	if (*a < 0 || connect(*a, (struct sockaddr *)&sa, sizeof(sa)) || (*b = accept(ls, NULL, NULL)) < 0)
		return -1;
	close(ls);
	setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

static int full(int fd, void *p, size_t n, int wr)
{
	for (size_t o = 0; o < n;) {
		ssize_t k = wr ? write(fd, (char *)p + o, n - o) : read(fd, (char *)p + o, n - o);
		if (k <= 0)
			return -1;
		o += (size_t)k;
	}
	return 0;
}

/* 8-byte ping-pong (half round trip, us) and a stream of each put size (GB/s), against a child
 * that echoes the small messages and acknowledges each stream with one byte. */
static int tcp_baseline(int iters, int nsizes, double pp[3], double *gbps)
{
	int a, b;
	if (tcp_pair(&a, &b))
		return -1;
	uint8_t *buf = malloc(16u << 20);
	pid_t pid = fork();
	if (pid == 0) {
		close(a);
		uint64_t x;
		for (int i = 0; i < iters + iters / 10 + 10; i++)
			if (full(b, &x, 8, 0) || full(b, &x, 8, 1))
				_exit(1);
		uint64_t len;
		while (full(b, &len, 8, 0) == 0) {
			for (uint64_t o = 0; o < len;) {
				ssize_t k = read(b, buf, len - o < (16u << 20) ? len - o : 16u << 20);
				if (k <= 0)
					_exit(1);
				o += (uint64_t)k;
			}
			if (full(b, &x, 1, 1))
				_exit(1);
		}
		_exit(0);
	}
	close(b);
	int warm = iters / 10 + 10, rc = 0;
	double *v = malloc(sizeof(double) * (size_t)iters);
	uint64_t x = 0;
	for (int i = 0; i < warm + iters && !rc; i++) {
		uint64_t t0 = shmem_ring_now_us();
		rc = full(a, &x, 8, 1) || full(a, &x, 8, 0);
		if (i >= warm)
			v[i - warm] = (double)(shmem_ring_now_us() - t0) / 2;
	}
	if (!rc)
		stats(v, iters, pp);
	memset(buf, 0x5a, 16u << 20);
	for (int i = 0; i < nsizes && !rc; i++) {
		uint64_t sz = size_of(i), total = sz < (1u << 20) ? (8ull << 20) : 4 * sz > (32ull << 20) ? 4 * sz : 32ull << 20;
		double t[3];
		for (int it = 0; it < 3 && !rc; it++) {
			uint64_t t0 = shmem_ring_now_us();
			rc = full(a, &total, 8, 1);
			for (uint64_t o = 0; o < total && !rc; o += sz)
				rc = full(a, buf, sz, 1);
			rc = rc || full(a, &x, 1, 0);
			t[it] = (double)(shmem_ring_now_us() - t0);
		}
		qsort(t, 3, sizeof(double), cmp_d);
		gbps[i] = (double)total / t[1] / 1e3;
	}
	close(a);
	int st;
	waitpid(pid, &st, 0);
	free(v);
	free(buf);
	return rc ? -1 : 0;
}

/* ---- the report ---- */

static void report(const struct shared *s, const double *tpp, const double *tbw, const double idle[2], int busy)
{
	if (s->only & ONLY_PP) {
		printf("# put+signal ping-pong, 8 bytes, PE 0 (A) <-> PE 1 (B), %d rounds: half the round trip (us)\n", s->iters);
		printf("#                                        p50      p99     mean\n");
		printf("  proxy (put+signal through the rings) %8.1f %8.1f %8.1f\n", s->pp[0], s->pp[1], s->pp[2]);
		printf("  baseline: TCP ping-pong, 2 processes %8.1f %8.1f %8.1f\n", tpp[0], tpp[1], tpp[2]);
	}
	if (s->only & ONLY_SB) {
		printf("# large put+signal ping-pong, PE 0 (A) <-> PE 1 (B): each way one put+signal SET of the size (a transfer "
		       "and its signal), half the round trip; baselines: one mori_write of the size between the same heaps, "
		       "waited for; the TCP stream of the same run\n");
		printf("#     size rounds  p50 us  p99 us  GB/s(p50) | mori_write p50 us  p99 us  GB/s(p50) | TCP stream GB/s\n");
		for (int i = 0; i < NSB; i++) {
			uint64_t b = size_of(sb_size_i[i]);
			if (sb_size_i[i] >= s->nsizes)
				continue;
			printf("  %7llu%s %6d %7.0f %7.0f %10.3f | %17.0f %7.0f %10.3f | %15.3f\n",
			       (unsigned long long)(b >= (1 << 20) ? b >> 20 : b >> 10), b >= (1 << 20) ? "M" : "K", s->sb_n[i],
			       s->sb[i][0], s->sb[i][1], (double)b / s->sb[i][0] / 1e3, s->sbw[i][0], s->sbw[i][1],
			       s->sbw[i][0] > 0 ? (double)b / s->sbw[i][0] / 1e3 : 0, tbw[sb_size_i[i]]);
		}
	}
	if (s->only & ONLY_PUT) {
		printf("# put bandwidth PE 0 (A) -> PE 1 (B), puts back to back then quiet (GB/s of payload; 8-32 MiB a trial, "
		       "median of 3)\n");
		printf("#     size   proxy  mori_write  TCP stream   proxy/mori_write\n");
		for (int i = 0; i < s->nsizes; i++) {
			uint64_t b = size_of(i);
			printf("  %7llu%s %7.3f %11.3f %11.3f %17.0f%%\n", (unsigned long long)(b >= (1 << 20) ? b >> 20 : b >> 10),
			       b >= (1 << 20) ? "M" : "K", s->put[i], s->wr[i], tbw[i], s->wr[i] > 0 ? 100 * s->put[i] / s->wr[i] : 0);
		}
	}
	if ((s->only & ONLY_CHUNK) && s->chunk_us[2] > 0) {
		double bytes = (double)NPE * 2 * CH_LEN * CH_ROUNDS; /* a trial: every PE to both PEs of the other node */
		double t[3] = {s->chunk_us[0], s->chunk_us[1], s->chunk_us[2]};
		qsort(t, 3, sizeof(double), cmp_d);
		printf("# EP chunks (issue 14's seam): every PE one %llu MiB chunk a round to each PE of the other node (4 MiB "
		       "puts, the last a put+signal, interleaved in the ring), both directions at once, %d rounds a trial, "
		       "median of 3; compared as mori-bench ep --nodes 2 does: bytes crossing in both directions against the "
		       "one-way stream\n", (unsigned long long)(CH_LEN >> 20), CH_ROUNDS);
		printf("  proxy: %.3f GB/s crossing in all (trials %.3f-%.3f, %.0f us a round); baseline: TCP stream %.3f GB/s "
		       "one way (4 MiB writes), %.0f%% of it\n", bytes / t[1] / 1e3, bytes / t[2] / 1e3, bytes / t[0] / 1e3,
		       t[1] / CH_ROUNDS, tbw[CH_TCP], tbw[CH_TCP] > 0 ? 100 * bytes / t[1] / 1e3 / tbw[CH_TCP] : 0);
	}
	if (s->only & ONLY_FADD) {
		printf("# fetch-add, 64-bit, PEs 0 and 2 (A) on one word of PE 1 (B), %d each, each op waited for: total %llu "
		       "(exact)\n", FADDS, (unsigned long long)s->fadd_total);
		printf("  proxy: %.0f ops/s (both PEs), %.1f us an op; baseline: TCP round trip %.1f us\n", s->fadd_rate,
		       s->fadd_us, 2 * tpp[0]);
	}
	if (s->only & ONLY_BAR) {
		printf("# barrier_all, 4 PEs (2 a morid) (us)                  p50      p99     mean\n");
		printf("  proxy (device API's barrier through the rings)  %8.1f %8.1f %8.1f\n", s->bar[0], s->bar[1], s->bar[2]);
		printf("  baseline: host mori_shmem_barrier_all (control) %8.1f %8.1f %8.1f\n", s->hbar[0], s->hbar[1],
		       s->hbar[2]);
	}
	if (busy)
		printf("# idle: morid A %.1f %%, morid B %.1f %% of a CPU over 2 s with 4 PEs joined posting nothing\n", idle[0],
		       idle[1]);
}

static void usage_exit(int code)
{
	fprintf(code ? stderr : stdout,
		"usage: mori-bench shmem --proxy [--iters 2000] [--max 16M] [--only pingpong,sigbig,put,chunks,fadd,barrier,idle]\n"
		"                                [--morid PATH] [--morid-arg ARG]...\n"
		"                                [--nodes DIR_A,DIR_B --root HOST:PORT]\n"
		"Two morids on loopback (started here; or the two whose runtime dirs --nodes names, A's peer\n"
		"listener at --root), 4 host-heap PEs split across them, every request through the proxy ring\n"
		"as a kernel writes it. Baselines in the same run: mori_write between the same heaps, and TCP\n"
		"between two local processes.\n");
	exit(code);
}

uint64_t parse_size(const char *s); /* tools/mori-bench.c: 1G, 64K, or bytes; exits 2 on junk */

/* --only: phase names separated by commas, each one of these */
static int parse_only(const char *v)
{
	static const char *const names[] = {"pingpong", "put", "fadd", "barrier", "idle", "sigbig", "chunks"};
	const int nnames = (int)(sizeof(names) / sizeof(names[0]));
	int only = 0;
	for (const char *p = v; *p;) {
		size_t n = strcspn(p, ",");
		int k = 0;
		while (k < nnames && !(strlen(names[k]) == n && !strncmp(p, names[k], n)))
			k++;
		if (k == nnames) {
			fprintf(stderr, "mori-bench shmem --proxy: --only: unknown phase '%.*s' (pingpong, sigbig, put, chunks, "
					"fadd, barrier, idle, separated by commas)\n", (int)n, p);
			exit(2);
		}
		only |= 1 << k; /* names[] is in ONLY_* order */
		p += n + (p[n] == ',');
	}
	if (!only) {
		fprintf(stderr, "mori-bench shmem --proxy: --only names no phase\n");
		exit(2);
	}
	return only;
}

int bench_shmem_proxy_main(int argc, char **argv)
{
	const char *morid = NULL, *nodes = NULL, *extra[16] = {0};
	int iters = 2000, nextra = 0, only = ONLY_ALL;
	uint64_t max = 16ull << 20;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--proxy"))
			continue;
		if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			usage_exit(0);
		if (!v) {
			fprintf(stderr, "mori-bench shmem --proxy: %s needs a value\n", a);
			usage_exit(2);
		}
		i++;
		if (!strcmp(a, "--iters")) {
			char *e;
			long x = strtol(v, &e, 10);
			if (e == v || *e || x < 10 || x > 1000000) {
				fprintf(stderr, "mori-bench shmem --proxy: --iters %s is not 10 .. 1000000\n", v);
				exit(2);
			}
			iters = (int)x;
		} else if (!strcmp(a, "--max"))
			max = parse_size(v);
		else if (!strcmp(a, "--morid"))
			morid = v;
		else if (!strcmp(a, "--morid-arg") && nextra < 15)
			extra[nextra++] = v;
		else if (!strcmp(a, "--nodes"))
			nodes = v;
		else if (!strcmp(a, "--root"))
			root_addr = v;
		else if (!strcmp(a, "--only"))
			only = parse_only(v);
		else {
			fprintf(stderr, "mori-bench shmem --proxy: unknown option %s\n", a);
			usage_exit(2);
		}
	}
	if (max < 4096 || max > (1ull << 30)) {
		fprintf(stderr, "mori-bench shmem --proxy: --max %llu is not 4K .. 1G\n", (unsigned long long)max);
		exit(2);
	}
	SH = mmap(NULL, sizeof(*SH), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (SH == MAP_FAILED)
		return 1;
	memset(SH, 0, sizeof(*SH));
	SH->iters = iters;
	SH->only = only;
	while (SH->nsizes < NSIZES && size_of(SH->nsizes) <= max)
		SH->nsizes++;
	struct node na = {0}, nb = {0};
	char self[512], dirs[512];
	if (nodes) { /* the user's daemons */
		snprintf(dirs, sizeof(dirs), "%s", nodes);
		char *comma = strchr(dirs, ',');
		if (!comma || !root_addr)
			usage_exit(2);
		*comma = 0;
		node_dir[0] = node_dir[2] = dirs;
		node_dir[1] = node_dir[3] = comma + 1;
	} else {
		if (!morid) { /* beside this program */
			ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 7);
			char *sl = n > 0 ? (self[n] = 0, strrchr(self, '/')) : NULL;
			if (!sl)
				return 1;
			strcpy(sl + 1, "morid");
			morid = self;
		}
		if (node_start(&na, morid, extra) || node_start(&nb, morid, extra)) {
			node_stop(&na);
			node_stop(&nb);
			return 1;
		}
		node_dir[0] = node_dir[2] = na.dir;
		node_dir[1] = node_dir[3] = nb.dir;
		root_addr = na.addr;
	}
	printf("# mori-bench shmem --proxy: 4 PEs (host heaps, forked processes) over two morids on loopback "
	       "(%s%s), every request through the proxy ring as a kernel writes it\n",
	       nodes ? "named: " : "started here", nodes ? nodes : "");
	char load[64] = "?";
	FILE *lf = fopen("/proc/loadavg", "r");
	if (lf) {
		if (!fgets(load, sizeof(load), lf))
			snprintf(load, sizeof(load), "?\n");
		fclose(lf);
	}
	printf("# load average before the run (other work on this machine skews every figure): %s", load);
	fflush(stdout);
	pid_t pids[NPE];
	for (int p = 0; p < NPE; p++) {
		if ((pids[p] = fork()) == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			alarm(120);
			_exit(pe_main(p));
		}
	}
	/* idle CPU once the PEs are joined and quiet (past the proxy's fast-poll window) */
	double idle[2] = {0, 0};
	int busy = 0, st[NPE] = {0}, reaped[NPE] = {0}, bad = 0;
	for (int i = 0; i < 12000 && SH->idle_go < NPE && !bad; i++) {
		for (int p = 0; p < NPE; p++)
			if (!reaped[p] && waitpid(pids[p], &st[p], WNOHANG) == pids[p])
				reaped[p] = bad = 1; /* a PE ended early: it failed */
		usleep(10000);
	}
	if (SH->idle_go == NPE && !nodes && (only & ONLY_IDLE)) {
		usleep(1500000);
		long long a0 = cpu_ticks(na.pid), b0 = cpu_ticks(nb.pid);
		uint64_t t0 = shmem_ring_now_us();
		usleep(2000000);
		long long a1 = cpu_ticks(na.pid), b1 = cpu_ticks(nb.pid);
		double sec = (double)(shmem_ring_now_us() - t0) / 1e6, hz = (double)sysconf(_SC_CLK_TCK);
		idle[0] = 100.0 * (double)(a1 - a0) / hz / sec;
		idle[1] = 100.0 * (double)(b1 - b0) / hz / sec;
		busy = 1;
	}
	SH->idle_done = 1;
	bad = 0;
	for (int p = 0; p < NPE; p++) {
		if (!reaped[p])
			waitpid(pids[p], &st[p], 0);
		if (!WIFEXITED(st[p]) || WEXITSTATUS(st[p])) {
			fprintf(stderr, "mori-bench shmem --proxy: PE %d failed: %s\n", p, SH->err[p][0] ? SH->err[p] : "(no message)");
			bad = 1;
		}
	}
	double tpp[3] = {0}, tbw[NSIZES] = {0};
	if (!bad && tcp_baseline(iters, (only & ONLY_CHUNK) && SH->nsizes <= CH_TCP ? CH_TCP + 1 : SH->nsizes, tpp, tbw))
		fprintf(stderr, "mori-bench shmem --proxy: the TCP baseline failed\n");
	if (!bad)
		report(SH, tpp, tbw, idle, busy);
	const char *prof = getenv("MORI_BENCH_PROF");
	FILE *pf = !bad && prof && (only & ONLY_PP) ? fopen(prof, "w") : NULL;
	for (int r = 0; pf && r < PP_PROF && r < iters; r++)
		fprintf(pf, "%d %llu %llu %llu\n", r + 1, (unsigned long long)SH->pp_t[r][0], (unsigned long long)SH->pp_t[r][1],
			(unsigned long long)SH->pp_t[r][2]);
	if (pf)
		fclose(pf);
	node_stop(&na);
	node_stop(&nb);
	return bad;
}
