/* Two morids over RDMA (issue 7, layer 4), run in the Soft-RoCE VM by tests/test_rdma_vm.sh:
 * daemon A on the first RoCE device's address, daemon B on the second's, both with
 * transport = rdma (so nothing may fall back to TCP silently). Clients through libmori:
 *   1. random batches (1 B .. 4 MiB blocks, random offsets), reads and writes, each with a
 *      notification: the target client checks a write's bytes when its notification arrives,
 *      the initiator checks read data; moractl peers says "rdma", moractl nics counts them;
 *   2. garbage QP ends sent to B's listener are refused (MORI_EPROTO) and B keeps serving;
 *   3. the target deregisters its region: transfers to it end with a clear code;
 *   4. daemon B killed mid-transfer: everything ends by its deadline with a clear code; B
 *      restarted (new epoch): a new handle works over RDMA again, without restarting A.
 * Without two RoCE devices it prints "skipped: ..." and exits 77.
 *   test_rdma_daemons [--batches N]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "svc/ctl.h"
#include "mori.h"
#include "mori.pb-c.h"
#include "../daemon/config.h"
#include "../daemon/rdma.h"
#include "node_harness.h"
#include "peer_harness.h" /* a peer daemon by hand, authenticated with the suite's key */

#define REGION (64u << 20)
#define HALF (REGION / 2)
#define K 8
#define SLICE (HALF / K)
#define MAXD 16
#define PORT 7140

static int failures;
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stdout, "FAIL: ");
	vfprintf(stdout, fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
	fflush(stdout);
	failures++;
}

static uint64_t now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}


/* ---- data: a write's bytes are a function of (seq, target offset); the read half is fixed ---- */
static inline uint8_t wpat(uint64_t seq, uint64_t x) { return (uint8_t)(x * 7 + (x >> 9) * 3 + seq * 131 + 1); }
static inline uint8_t rpat(uint64_t x) { return (uint8_t)(x * 13 + (x >> 11) * 5 + 29); }

static uint64_t sm(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The batch of seq, derived the same way by initiator and target. Slot seq % K owns a slice of
 * each half on both sides; blocks are log-uniform 1 B .. 4 MiB at random offsets. */
static void gen_batch(uint64_t seq, int *read, mori_desc *d, size_t *n)
{
	uint64_t s = seq * 0x2545f4914f6cdd1dull + 777;
	*read = (int)(sm(&s) & 1);
	unsigned want = 1 + (unsigned)(sm(&s) % MAXD);
	uint64_t base = (seq % K) * SLICE, lo = sm(&s) % 8192, ro = sm(&s) % 8192;
	size_t k = 0;
	for (unsigned i = 0; i < want; i++) {
		unsigned bits = (unsigned)(sm(&s) % 23);
		uint64_t len = (1ull << bits) + sm(&s) % (1ull << bits);
		if (len > (4u << 20))
			len = 4u << 20;
		if (sm(&s) % 3) {
			lo += sm(&s) % 100000;
			ro += sm(&s) % 100000;
		}
		if (lo + len > SLICE || ro + len > SLICE)
			break;
		d[k++] = (mori_desc){base + lo, (*read ? HALF : 0) + base + ro, len};
		lo += len;
		ro += len;
	}
	if (!k)
		d[k++] = (mori_desc){base, (*read ? HALF : 0) + base, 1 + seq % 1000};
	*n = k;
}

/* ---- daemons ---- */
static struct test_node A, B;
static char devA[64], devB[64];

/* Both daemons on RDMA only, with a cluster key where the suite made one (issue 18: cross-node
 * tests run authenticated; without one a non-loopback listen needs insecure_peers). */
static void node_setup(struct test_node *n, const char *name, const char *dev)
{
	static const char *args[2][20];
	const char **a = args[n == &B];
	const char *key = getenv("MORI_CLUSTER_KEY");
	const char *v[] = {"--transport", "rdma", "--rdma-device", dev, "--log-target", "stderr",
			   "--transfer-timeout-ms", "8000", "--rdma-qp-timeout", "14", "--rdma-retry-cnt", "3",
			   key ? "--cluster-key-file" : "--insecure-peers", key ? key : "true", NULL};
	memcpy(a, v, sizeof(v));
	n->name = name;
	n->port = PORT;
	n->args = a;
	snprintf(n->dir, sizeof(n->dir), "/tmp/mori-%s.%d", name, getpid());
}

/* SIGTERM must end it cleanly (exit 0). */
static void node_stop_checked(struct test_node *n)
{
	int rc = n->pid > 0 ? node_stop(n) : 0;
	if (rc)
		fail("morid %s did not exit cleanly (status %d)", n->addr, rc);
}

/* The output of a shell command (static storage). */
static const char *sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *sh(const char *fmt, ...)
{
	static char out[16384];
	char cmd[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	out[0] = 0;
	FILE *p = popen(cmd, "r");
	if (!p)
		return out;
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	pclose(p);
	return out;
}

/* ---- the target client (a child process, on B) ---- */
enum { T_READY = 1, T_REPORT, T_GONE };
struct tmsg { uint32_t type; int32_t code; uint64_t seq; char text[160]; };

static void target(int up, int down, const char *rundir)
{
	mori_client *c;
	mori_mem *m;
	int rc;
	struct tmsg t = {.type = T_READY};
	if ((rc = mori_client_open(rundir, "rdma-target", &c)) || (rc = mori_mem_alloc(c, REGION, MORI_MEM_HOST, &m))) {
		t.code = rc;
		snprintf(t.text, sizeof(t.text), "target: %s", mori_strerror(rc));
		if (write(up, &t, sizeof(t)) < 0)
			_exit(1);
		_exit(1);
	}
	uint8_t *p = mori_mem_ptr(m);
	for (uint64_t i = 0; i < REGION; i++)
		p[i] = i >= HALF ? rpat(i) : 0;
	if ((rc = mori_mem_publish(m, "rdma-target")))
		t.code = rc;
	if (write(up, &t, sizeof(t)) < 0)
		_exit(1);
	for (;;) {
		/* a command from the initiator: deregister */
		char cmd;
		if (read(down, &cmd, 1) == 1 && cmd == 'D') {
			mori_mem_deregister(m);
			m = NULL;
			struct tmsg g = {.type = T_GONE};
			if (write(up, &g, sizeof(g)) < 0)
				_exit(1);
		}
		mori_notif nb[64];
		int k = mori_notif_poll(c, nb, 64, 20000);
		if (k < 0)
			_exit(2);
		for (int i = 0; i < k; i++) {
			struct tmsg r = {.type = T_REPORT, .seq = nb[i].tag};
			int read;
			mori_desc d[MAXD];
			size_t n;
			gen_batch(nb[i].tag, &read, d, &n);
			for (size_t j = 0; m && !read && j < n && !r.code; j++)
				for (uint64_t b = 0; b < d[j].length; b++)
					if (p[d[j].remote_offset + b] != wpat(nb[i].tag, d[j].remote_offset + b)) {
						r.code = -1;
						snprintf(r.text, sizeof(r.text), "seq %llu desc %zu byte %llu not there at notification",
							 (unsigned long long)nb[i].tag, j, (unsigned long long)b);
						break;
					}
			if (write(up, &r, sizeof(r)) < 0)
				_exit(1);
		}
	}
}

struct tproc { pid_t pid; int up, down; };

static int target_start(struct tproc *t, const char *rundir)
{
	int u[2], dn[2];
	if (pipe(u) || pipe(dn))
		return -1;
	t->pid = fork();
	if (t->pid == 0) {
		close(u[0]);
		close(dn[1]);
		fcntl(dn[0], F_SETFL, O_NONBLOCK);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		target(u[1], dn[0], rundir);
		_exit(0);
	}
	close(u[1]);
	close(dn[0]);
	t->up = u[0];
	t->down = dn[1];
	struct tmsg m;
	if (read(t->up, &m, sizeof(m)) != sizeof(m) || m.type != T_READY || m.code) {
		fail("target did not start: %s", m.text);
		return -1;
	}
	fcntl(t->up, F_SETFL, O_NONBLOCK);
	return 0;
}

static void target_stop(struct tproc *t)
{
	if (t->pid > 0) {
		kill(t->pid, SIGKILL);
		waitpid(t->pid, NULL, 0);
	}
	close(t->up);
	close(t->down);
	t->pid = 0;
}

/* ---- the initiator ---- */
struct slot {
	int busy, reported, report_code, read;
	uint64_t seq;
	mori_xfer *x;
	mori_desc d[MAXD];
	size_t n;
	uint64_t bytes;
};
static struct slot slots[K];
static uint64_t reports;

static void drain_reports(struct tproc *t)
{
	struct tmsg m;
	while (read(t->up, &m, sizeof(m)) == sizeof(m)) {
		if (m.type != T_REPORT)
			continue;
		reports++;
		struct slot *s = NULL;
		for (int i = 0; i < K; i++)
			if (slots[i].busy && slots[i].seq == m.seq)
				s = &slots[i];
		if (!s) {
			fail("report for seq %llu not in flight", (unsigned long long)m.seq);
			continue;
		}
		if (s->reported)
			fail("second notification for seq %llu", (unsigned long long)m.seq);
		s->reported = 1;
		s->report_code = m.code;
		if (m.code)
			fail("target: %s", m.text);
	}
}

static int count_rdma_peers(const char *dir)
{
	const char *o = sh("%s/moractl --runtime-dir %s peers --json", build_dir(), dir);
	int n = 0;
	for (const char *p = o; (p = strstr(p, "\"transport\":")); p++)
		if (strstr(p, "\"rdma\"") == p + 12 || !strncmp(p + 12, "\t\"rdma\"", 7) || !strncmp(p + 12, " \"rdma\"", 7))
			n++;
	return n;
}

/* A raw RdmaConnect to B's listener, as a broken peer would send it (one that holds the cluster
 * key: the garbage must be judged, not refused for want of authentication). Returns the reply's
 * code. */
static int garbage_connect(const char *addr, uint32_t qpn, int gid_len, uint32_t mtu, char *msg, size_t len)
{
	char url[160];
	snprintf(url, sizeof(url), "tcp://%s", addr);
	uint8_t gid[16] = {0};
	gid[15] = 9;
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__RdmaConnect rc = MORI__RDMA_CONNECT__INIT;
	rc.epoch = 12345;
	rc.node = "10.9.9.9:1";
	rc.slot = 0;
	rc.nqp = 2;
	rc.qpn = qpn;
	rc.psn = 1;
	rc.mtu = mtu;
	rc.gid.data = gid;
	rc.gid.len = (size_t)gid_len;
	req.body_case = MORI__REQUEST__BODY_RDMA_CONNECT;
	req.rdma_connect = &rc;
	struct auth_key k = {0};
	struct pctl pc;
	char err[256];
	const char *kf = getenv("MORI_CLUSTER_KEY");
	if (kf && auth_load_key(kf, &k, err, sizeof(err)) != 0) {
		snprintf(msg, len, "%s", err);
		return MORI_EINVAL;
	}
	int code = pctl_open(&pc, url, k.on ? &k : NULL, "10.9.9.9:1");
	Mori__Reply *rep = code ? NULL : pctl_call(&pc, &req, 3000);
	pctl_close(&pc);
	if (!rep) {
		snprintf(msg, len, "no answer from %s (%s)", url, code ? mori_strerror(code) : "timed out");
		return code ? code : MORI_ETIMEDOUT;
	}
	code = rep->code;
	snprintf(msg, len, "%s", rep->message ? rep->message : "");
	mori__reply__free_unpacked(rep, NULL);
	return code;
}

static int pick_devices(void)
{
	struct config cfg;
	config_defaults(&cfg);
	struct rdma_nic *v;
	int n, k = 0;
	char note[160];
	if (rdma_discover(&cfg, &v, &n, note, sizeof(note)) != 0)
		return -1;
	for (int i = 0; i < n && k < 2; i++) {
		if (!v[i].usable || !v[i].address[0] || strchr(v[i].address, ':'))
			continue;
		struct test_node *x = k ? &B : &A;
		char *dev = k ? devB : devA;
		snprintf(dev, sizeof(devA), "%s", v[i].device);
		snprintf(x->ip, sizeof(x->ip), "%s", v[i].address);
		k++;
	}
	free(v);
	if (k < 2) {
		printf("skipped: needs two RoCE devices with IPv4 addresses (%d found%s%s)\n", k, note[0] ? "; " : "", note);
		return 77;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int batches = 1000;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--batches") && i + 1 < argc)
			batches = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--batches N]\n", argv[0]);
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	int rc = pick_devices();
	if (rc)
		return rc == 77 ? 77 : 1;
	node_setup(&A, "rdma-a", devA);
	node_setup(&B, "rdma-b", devB);
	printf("daemons: A %s on %s, B %s on %s (transport = rdma)\n", A.ip, devA, B.ip, devB);
	if (node_start(&A, NULL) || node_start(&B, NULL)) {
		fail("a daemon did not start (logs %s, %s)", A.log, B.log);
		return 1;
	}
	struct tproc T;
	if (target_start(&T, B.dir))
		return 1;
	mori_client *c;
	mori_mem *l, *r;
	if ((rc = mori_client_open(A.dir, "rdma-initiator", &c)) || (rc = mori_mem_alloc(c, REGION, MORI_MEM_HOST, &l))) {
		fail("initiator: %s", mori_strerror(rc));
		return 1;
	}
	uint8_t *lp = mori_mem_ptr(l);
	if ((rc = mori_mem_open_remote(c, B.addr, "rdma-target", &r))) {
		fail("open_remote %s: %s (%s)", B.addr, mori_strerror(rc), mori_client_last_error(c));
		return 1;
	}

	/* 1. random batches, K in flight */
	uint64_t t0 = now_us(), bytes = 0, next = 0;
	int inflight = 0, nr = 0, nw = 0;
	while ((int)next < batches || inflight) {
		drain_reports(&T);
		for (int k = 0; k < K; k++) {
			struct slot *s = &slots[k];
			if (s->busy) {
				int st = mori_xfer_status(s->x, NULL);
				if (st == MORI_EINPROGRESS || (!st && !s->reported))
					continue;
				mori_status xs;
				st = mori_xfer_status(s->x, &xs);
				const char *msg = xs.message;
				if (st)
					fail("batch %llu (%s): %s: %s", (unsigned long long)s->seq, s->read ? "read" : "write",
					     mori_strerror(st), msg);
				else if (s->read)
					for (size_t i = 0; i < s->n; i++)
						for (uint64_t b = 0; b < s->d[i].length; b++)
							if (lp[s->d[i].local_offset + b] != rpat(s->d[i].remote_offset + b)) {
								fail("batch %llu: read data differs", (unsigned long long)s->seq);
								i = s->n;
								break;
							}
				bytes += s->bytes;
				mori_xfer_free(s->x);
				s->busy = 0;
				inflight--;
			}
			if ((int)next < batches && next % K == (uint64_t)k) {
				s->seq = next++;
				gen_batch(s->seq, &s->read, s->d, &s->n);
				s->bytes = 0;
				for (size_t i = 0; i < s->n; i++) {
					s->bytes += s->d[i].length;
					for (uint64_t b = 0; b < s->d[i].length; b++)
						lp[s->d[i].local_offset + b] = s->read ? (uint8_t)~rpat(s->d[i].remote_offset + b)
									: wpat(s->seq, s->d[i].remote_offset + b);
				}
				s->read ? nr++ : nw++;
				mori_xfer_opts o = {.size = sizeof(o), .notif_tag = s->seq, .has_notif = 1, .timeout_us = 30000000};
				rc = mori_xfer_batch(s->read ? MORI_XFER_READ : MORI_XFER_WRITE, l, r, s->d, s->n, &o, &s->x);
				if (rc) {
					fail("submit %llu: %s", (unsigned long long)s->seq, mori_strerror(rc));
					continue;
				}
				s->busy = 1;
				s->reported = 0;
				inflight++;
			}
		}
		if (now_us() - t0 > 400000000) {
			fail("phase 1 stuck (%d in flight)", inflight);
			break;
		}
		usleep(200);
	}
	double secs = (now_us() - t0) / 1e6;
	printf("1. %d batches (%d reads, %d writes) over RDMA, %.1f MiB verified, %llu notifications checked at the target: %.1f s, %.1f MB/s\n",
	       batches, nr, nw, bytes / 1048576.0, (unsigned long long)reports, secs, bytes / secs / 1e6);
	if ((int)reports != batches)
		fail("%llu notifications for %d batches", (unsigned long long)reports, batches);
	int rp = count_rdma_peers(A.dir);
	if (rp < 1)
		fail("moractl peers at A does not say rdma: %s", sh("%s/moractl --runtime-dir %s peers", build_dir(), A.dir));
	printf("   moractl peers (A): %s", sh("%s/moractl --runtime-dir %s peers | tail -n +2", build_dir(), A.dir));
	const char *nics = sh("%s/moractl --runtime-dir %s nics", build_dir(), A.dir);
	printf("   moractl nics (A), RDMA part:\n%s", strstr(nics, "transport") ? strstr(nics, "transport") : nics);

	/* 2. garbage QP ends */
	char msg[300];
	int g1 = garbage_connect(B.addr, 0, 16, 1024, msg, sizeof(msg));
	printf("2. RdmaConnect with QP number 0: %s (%s)\n", mori_strerror(g1), msg);
	if (g1 != MORI_EPROTO)
		fail("garbage QP number: %s, want MORI_EPROTO", mori_strerror(g1));
	int g2 = garbage_connect(B.addr, 0x123, 3, 1024, msg, sizeof(msg));
	printf("   RdmaConnect with a 3-byte GID: %s (%s)\n", mori_strerror(g2), msg);
	if (g2 != MORI_EPROTO)
		fail("garbage GID: %s, want MORI_EPROTO", mori_strerror(g2));
	int g3 = garbage_connect(B.addr, 0x1000000, 16, 777, msg, sizeof(msg));
	printf("   RdmaConnect with QP number 2^24 and MTU 777: %s (%s)\n", mori_strerror(g3), msg);
	if (g3 != MORI_EPROTO)
		fail("garbage QP/MTU: %s, want MORI_EPROTO", mori_strerror(g3));
	{ /* B still serves */
		mori_desc d = {0, HALF, 65536};
		mori_xfer *x;
		memset(lp, 0, 65536);
		if ((rc = mori_xfer_batch(MORI_XFER_READ, l, r, &d, 1, NULL, &x)) || (rc = mori_xfer_wait(x, 20000000)))
			fail("read after garbage: %s", mori_strerror(rc));
		else if (lp[100] != rpat(HALF + 100) || lp[65535] != rpat(HALF + 65535))
			fail("read after garbage: wrong data");
		else
			printf("   B keeps serving: a verified 64 KiB read\n");
		mori_xfer_free(x);
	}

	/* 3. the target deregisters its region */
	if (write(T.down, "D", 1) != 1)
		fail("cannot ask the target to deregister");
	for (int i = 0; i < 500; i++) {
		struct tmsg m;
		if (read(T.up, &m, sizeof(m)) == sizeof(m) && m.type == T_GONE)
			break;
		usleep(10000);
	}
	{
		mori_desc d = {0, 0, 1u << 20};
		mori_xfer *x;
		mori_status xs = {.message = ""};
		const char *em = xs.message;
		rc = mori_xfer_batch(MORI_XFER_WRITE, l, r, &d, 1, NULL, &x);
		if (!rc) {
			rc = mori_xfer_wait(x, 20000000);
			mori_xfer_status(x, &xs);
			em = xs.message;
		}
		printf("3. write to a region deregistered at the target: %s (%s)\n", mori_strerror(rc), em);
		if (rc != MORI_ESTALE && rc != MORI_EPERM && rc != MORI_ENOENT)
			fail("deregistered region: %s, want MORI_ESTALE or MORI_EPERM", mori_strerror(rc));
		if (!rc || x)
			mori_xfer_free(x);
	}
	mori_mem_deregister(r);
	target_stop(&T);

	/* 4. B killed mid-transfer, then restarted */
	if (target_start(&T, B.dir))
		return 1;
	if ((rc = mori_mem_open_remote(c, B.addr, "rdma-target", &r))) {
		fail("open_remote again: %s", mori_strerror(rc));
		return 1;
	}
	mori_xfer *xs[16];
	mori_desc dk[16];
	for (int i = 0; i < 16; i++) {
		dk[i] = (mori_desc){(uint64_t)i << 21, (uint64_t)i << 21, 2u << 20};
		mori_xfer_opts o = {.size = sizeof(o), .timeout_us = 6000000};
		if ((rc = mori_xfer_batch(i % 2 ? MORI_XFER_READ : MORI_XFER_WRITE, l, r, &dk[i], 1, &o, &xs[i])))
			fail("submit %d: %s", i, mori_strerror(rc));
	}
	uint64_t tk = now_us();
	node_kill9(&B);
	int codes[32] = {0}, late = 0;
	for (int i = 0; i < 16; i++) {
		rc = mori_xfer_wait(xs[i], 15000000);
		if (rc == MORI_EINPROGRESS || (rc == MORI_ETIMEDOUT && mori_xfer_status(xs[i], NULL) == MORI_EINPROGRESS))
			late++;
		codes[-rc < 32 ? -rc : 0]++;
		mori_xfer_free(xs[i]);
	}
	double tend = (now_us() - tk) / 1e6;
	printf("4. B killed under 16 transfers (deadline 6 s): %d ok, %d MORI_ETIMEDOUT, %d MORI_EIO, %d MORI_EPEERDEAD, %d MORI_ECONN; all ended in %.1f s\n",
	       codes[0], codes[-MORI_ETIMEDOUT], codes[-MORI_EIO], codes[-MORI_EPEERDEAD], codes[-MORI_ECONN], tend);
	if (late)
		fail("%d transfers still in progress after their deadline", late);
	target_stop(&T);
	mori_mem_deregister(r);
	if (node_start(&B, NULL)) {
		fail("B did not restart");
		return 1;
	}
	if (target_start(&T, B.dir))
		return 1;
	if ((rc = mori_mem_open_remote(c, B.addr, "rdma-target", &r))) {
		fail("open_remote after B restarted: %s (%s)", mori_strerror(rc), mori_client_last_error(c));
	} else {
		int ok = 0;
		for (int i = 0; i < 20; i++) {
			uint64_t seq = 9000000 + (uint64_t)i;
			mori_desc d = {0, (uint64_t)i * 4096, 4096};
			for (uint64_t b = 0; b < 4096; b++)
				lp[b] = wpat(seq, d.remote_offset + b);
			mori_xfer *x = NULL;
			mori_xfer_opts o = {.size = sizeof(o), .timeout_us = 20000000};
			int wr = mori_xfer_batch(MORI_XFER_WRITE, l, r, &d, 1, &o, &x);
			if (!wr)
				wr = mori_xfer_wait(x, 25000000);
			if (!wr) {
				ok++;
			} else {
				mori_status xs = {.message = ""};
				if (x)
					mori_xfer_status(x, &xs);
				const char *em = xs.message;
				printf("   write %d after the restart: %s (%s)\n", i, mori_strerror(wr), em);
			}
			mori_xfer_free(x);
		}
		int rdma_now = count_rdma_peers(A.dir);
		printf("   B restarted (new epoch): %d/20 writes through a new handle, A sees %d peer(s) on rdma\n", ok, rdma_now);
		if (ok != 20)
			fail("after B restarted: %d/20 writes", ok);
		if (rdma_now < 1)
			fail("after B restarted, A does not use RDMA again: %s", sh("%s/moractl --runtime-dir %s peers", build_dir(), A.dir));
		mori_mem_deregister(r);
	}
	target_stop(&T);
	mori_mem_deregister(l);
	mori_client_close(c);
	node_stop_checked(&A);
	node_stop_checked(&B);
	if (failures) {
		printf("logs: %s %s\n", A.log, B.log);
		printf("--- A\n%s", sh("tail -n 25 %s", A.log));
		printf("--- B\n%s", sh("tail -n 25 %s", B.log));
	}
	printf("%s (%d failures)\n", failures ? "FAILED" : "ok", failures);
	return failures ? 1 : 0;
}
