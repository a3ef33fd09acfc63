/* The RDMA engine on real verbs devices (Soft-RoCE in the VM: tests/test_rdma_vm.sh).
 *
 * Two processes: the initiator A (this one) on one device, the target B (a child) on another
 * (default: the first two RoCE devices, or one device twice). They exchange their QP ends and
 * B's region key over a TCP socket, then A runs, with B checking every notification:
 *   1. random batches (1 B .. 4 MiB blocks, random offsets, some contiguous), reads and writes,
 *      striped over 2 QPs, each with a notification; B verifies a write's data when its
 *      notification arrives, A verifies read data; every notification arrives exactly once;
 *   2. throughput of 1 MiB writes and reads (emulation speed in the VM);
 *   3. a bad remote key: MORI_EPERM "remote access error", then new work goes through;
 *   4. B deregisters its region: the old key fails (MORI_EPERM); re-registered, it works;
 *   5. B's QP forced into error while transfers are in flight: they are re-posted and succeed;
 *   6. B frozen (SIGSTOP) so its receive buffers run out: notified transfers end by their
 *      deadline (MORI_ETIMEDOUT), none stays in progress; after SIGCONT work goes through;
 *   7. B killed mid-transfer: everything ends by its deadline with MORI_EIO or MORI_ETIMEDOUT.
 * Without RDMA devices it prints "skipped: ..." and exits 77.
 *
 * Usage: test_rdma_verbs [--dev-a NAME] [--dev-b NAME] [--batches N] [--mib N] [--json FILE]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../daemon/transport/rdma/rdma_core.h"
#include "../daemon/transport/rdma/rdma_verbs.h"

#define SIZE (128u << 20)        /* each side's region */
#define HALF (SIZE / 2)          /* [0, HALF): write area at B; [HALF, SIZE): read area */
#define K 8                      /* transfers in flight in phase 1 */
#define SLICE (HALF / K)
#define NQP 2
#define MAXD 16

static uint64_t now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static int failures;
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "FAIL: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	failures++;
}

/* ---- patterns: a write's bytes are a function of (seq, destination offset); the read area
 * holds a fixed function of its offset ---- */
static inline uint8_t wpat(uint64_t seq, uint64_t x)
{
	return (uint8_t)(x * 7 + (x >> 8) * 13 + (x >> 16) + seq * 101 + 1);
}
static inline uint8_t rpat(uint64_t x)
{
	return (uint8_t)(x * 11 + (x >> 10) * 3 + (x >> 20) * 5 + 77);
}

static uint64_t sm(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The batch of sequence number seq: both processes derive it, so B can check a write's data
 * knowing only seq. Slot seq % K owns [slot * SLICE, +SLICE) locally and remotely. */
static void gen_batch(uint64_t seq, int *read, mori_desc *d, uint32_t *n)
{
	uint64_t s = seq * 0x2545f4914f6cdd1dull + 12345;
	*read = (int)(sm(&s) & 1);
	uint32_t want = 1 + (uint32_t)(sm(&s) % 8);
	uint64_t base = (seq % K) * SLICE;
	uint64_t lo = sm(&s) % 4096, ro = sm(&s) % 4096;
	uint32_t k = 0;
	for (uint32_t i = 0; i < want; i++) {
		/* log-uniform 1 B .. 4 MiB */
		unsigned bits = (unsigned)(sm(&s) % 23);
		uint64_t len = (1ull << bits) + sm(&s) % (1ull << bits);
		if (len > (4u << 20))
			len = 4u << 20;
		if (sm(&s) % 3) { /* a gap; else contiguous with the previous one (merged) */
			lo += sm(&s) % 65536;
			ro += sm(&s) % 65536;
		}
		if (lo + len > SLICE || ro + len > SLICE)
			break;
		d[k++] = (mori_desc){base + lo, (*read ? HALF : 0) + base + ro, len};
		lo += len;
		ro += len;
	}
	if (k == 0)
		d[k++] = (mori_desc){base, (*read ? HALF : 0) + base, 1 + seq % 100};
	*n = k;
}

/* ---- the control socket ---- */
enum { M_HELLO = 1, M_CONNECT, M_ACK, M_REPORT, M_CMD, M_BYE };
enum { CMD_KILL_QP = 1, CMD_DEREG, CMD_REREG, CMD_QUIT };
struct cmsg {
	uint32_t type, idx;
	struct rdma_ep ep;
	uint64_t a, b, c;
	int32_t code;
	char text[60];
};

struct side {
	const char *who;
	struct rdma_vdev *v;
	struct rdma_eng *e;
	struct rdma_conn *c;
	int sock;
	uint8_t rbuf[sizeof(struct cmsg) * 64];
	size_t rlen;
	uint8_t *mem;
	void *mr;
	uint32_t lkey, rkey;
	/* A: the peer's region */
	uint64_t raddr, rsize;
	uint32_t prkey;
	int have_hello;
	int peer_gone;
	/* B */
	int quit;
	uint64_t notifs, bad;
};

static void send_msg(struct side *s, const struct cmsg *m)
{
	if (s->peer_gone)
		return;
	const char *p = (const char *)m;
	size_t left = sizeof(*m);
	while (left) {
		ssize_t w = send(s->sock, p, left, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			s->peer_gone = 1;
			return;
		}
		p += w;
		left -= (size_t)w;
	}
}

static void cb_send_connect(void *arg, struct rdma_conn *c, int idx, const struct rdma_ep *ep, int ack)
{
	struct side *s = arg;
	struct cmsg m = {.type = ack ? M_ACK : M_CONNECT, .idx = (uint32_t)idx, .ep = *ep};
	send_msg(s, &m);
}

static void cb_event(void *arg, struct rdma_conn *c, int idx, const char *what, const char *why)
{
	struct side *s = arg;
	const struct rdma_qp *q = rdma_conn_qp(c, idx);
	if (getenv("VERBOSE")) /* the QP ends too: what a reset or a re-pairing went through */
		fprintf(stderr, "  [%s] %.3f qp %d %s%s%s (qpn 0x%x psn 0x%x inc %u, peer qpn 0x%x psn 0x%x)\n",
			s->who, now_us() / 1e6, idx, what, why[0] ? ": " : "", why, q->qpn, q->psn, q->inc,
			q->remote.qpn, q->remote.psn);
	else if (strcmp(what, "up"))
		fprintf(stderr, "  [%s] qp %d %s%s%s\n", s->who, idx, what, why[0] ? ": " : "", why);
}

struct notif { uint32_t magic, op; uint64_t seq; };
#define NMAGIC 0x4d4f5249u

/* B: a notification arrived; for a write its data must already be in place. */
static void b_notif(void *arg, struct rdma_conn *c, const void *msg, uint32_t len)
{
	struct side *s = arg;
	struct notif n;
	struct cmsg m = {.type = M_REPORT};
	s->notifs++;
	if (len != sizeof(n)) {
		m.code = -1;
		snprintf(m.text, sizeof(m.text), "notification of %u bytes", len);
		s->bad++;
		send_msg(s, &m);
		return;
	}
	memcpy(&n, msg, sizeof(n));
	m.a = n.seq;
	if (n.magic != NMAGIC) {
		m.code = -1;
		snprintf(m.text, sizeof(m.text), "bad magic");
	} else if (n.op == 1) { /* a random batch: check the write's bytes */
		int read;
		mori_desc d[MAXD];
		uint32_t nd;
		gen_batch(n.seq, &read, d, &nd);
		for (uint32_t i = 0; !read && i < nd && !m.code; i++)
			for (uint64_t b = 0; b < d[i].length; b++)
				if (s->mem[d[i].remote_offset + b] != wpat(n.seq, d[i].remote_offset + b)) {
					m.code = -1;
					snprintf(m.text, sizeof(m.text), "seq %llu desc %u byte %llu not there",
						 (unsigned long long)n.seq, i, (unsigned long long)b);
					break;
				}
	} else if (n.op == 2) { /* a 1 MiB write at b: first and last bytes carry seq */
		uint64_t off = n.seq % 32 * (1u << 20);
		if (s->mem[off] != wpat(n.seq, off) || s->mem[off + (1u << 20) - 1] != wpat(n.seq, off + (1u << 20) - 1)) {
			m.code = -1;
			snprintf(m.text, sizeof(m.text), "1 MiB write %llu not there", (unsigned long long)n.seq);
		}
	}
	if (m.code)
		s->bad++;
	send_msg(s, &m);
}

static void (*on_report)(struct side *s, const struct cmsg *m);
static void (*on_cmd)(struct side *s, const struct cmsg *m);

static void dispatch(struct side *s, const struct cmsg *m)
{
	char err[200];
	switch (m->type) {
	case M_HELLO:
		s->raddr = m->a;
		s->prkey = (uint32_t)m->b;
		s->rsize = m->c;
		s->have_hello = 1;
		break;
	case M_CONNECT:
	case M_ACK:
		if (rdma_conn_remote(s->c, (int)m->idx, &m->ep, m->type == M_ACK, now_us(), err, sizeof(err)))
			fprintf(stderr, "  [%s] pairing slot %u: %s\n", s->who, m->idx, err);
		break;
	case M_REPORT:
		if (on_report)
			on_report(s, m);
		break;
	case M_CMD:
		if (on_cmd)
			on_cmd(s, m);
		break;
	case M_BYE:
		s->quit = 1;
		break;
	}
}

/* One turn of the loop: wait (up to max_ms, less if the engine has a timer) for the socket or
 * the completion channel, then handle both and run the engine. */
static void turn(struct side *s, int max_ms)
{
	uint64_t now = now_us(), t = rdma_eng_next_timer(s->e);
	int ms = max_ms;
	if (t != UINT64_MAX) {
		uint64_t w = t > now ? (t - now + 999) / 1000 : 0;
		if (w < (uint64_t)ms)
			ms = (int)w;
	}
	struct pollfd p[2] = {{s->sock, POLLIN, 0}, {rdma_vdev_fd(s->v), POLLIN, 0}};
	int np = s->peer_gone ? 0 : 1;
	if (poll(s->peer_gone ? &p[1] : p, (nfds_t)(np + 1), ms) < 0 && errno != EINTR)
		return;
	if (p[1].revents & POLLIN)
		rdma_vdev_events(s->v);
	if (!s->peer_gone && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
		ssize_t r = recv(s->sock, s->rbuf + s->rlen, sizeof(s->rbuf) - s->rlen, MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
			s->peer_gone = 1;
		} else if (r > 0) {
			s->rlen += (size_t)r;
			size_t off = 0;
			while (s->rlen - off >= sizeof(struct cmsg)) {
				struct cmsg m;
				memcpy(&m, s->rbuf + off, sizeof(m));
				off += sizeof(m);
				dispatch(s, &m);
			}
			memmove(s->rbuf, s->rbuf + off, s->rlen - off);
			s->rlen -= off;
		}
	}
	while (rdma_eng_progress(s->e, now_us()) > 0)
		;
}

static int side_open(struct side *s, const char *dev, int is_b, uint8_t timeout, uint8_t retry)
{
	char err[200];
	int rc = rdma_vdev_open(dev, 1, -1, 4096, &s->v, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "[%s] %s\n", s->who, err);
		return rc;
	}
	struct rdma_cfg cfg;
	rdma_cfg_defaults(&cfg);
	cfg.sq_depth = 64;
	cfg.rq_depth = 64;
	cfg.chunk = 1u << 20;
	cfg.timeout = timeout;
	cfg.retry_cnt = retry;
	rdma_vdev_cfg(s->v, &cfg);
	s->e = rdma_eng_new(&rdma_verbs_ops, s->v, &cfg);
	s->mem = aligned_alloc(4096, SIZE);
	if (!s->e || !s->mem)
		return MORI_ENOMEM;
	for (uint64_t i = 0; i < SIZE; i++)
		s->mem[i] = is_b && i >= HALF ? rpat(i) : 0;
	rc = rdma_vdev_reg(s->v, s->mem, SIZE, 1, &s->lkey, &s->rkey, &s->mr, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "[%s] %s\n", s->who, err);
		return rc;
	}
	struct rdma_conn_cb cb = {cb_send_connect, is_b ? b_notif : NULL, cb_event, s};
	s->c = rdma_conn_new(s->e, NQP, &cb, now_us(), err, sizeof(err));
	if (!s->c) {
		fprintf(stderr, "[%s] %s\n", s->who, err);
		return MORI_EIO;
	}
	const struct rdma_vinfo *vi = rdma_vdev_info(s->v);
	fprintf(stderr, "[%s] %s port %u gid %d (%s) mtu %u max_msg %u, region %u MiB rkey 0x%x\n",
		s->who, vi->name, vi->port, vi->gid_index, vi->address, vi->mtu, vi->max_msg, SIZE >> 20,
		s->rkey);
	return 0;
}

static void send_hello(struct side *s)
{
	struct cmsg m = {.type = M_HELLO, .a = (uint64_t)(uintptr_t)s->mem, .b = s->rkey, .c = SIZE};
	send_msg(s, &m);
}

/* ---- B ---- */
static void b_cmd(struct side *s, const struct cmsg *m)
{
	char err[200];
	switch (m->a) {
	case CMD_KILL_QP:
		rdma_conn_kill_qp(s->c, (int)m->b, "test: forced into error", now_us());
		break;
	case CMD_DEREG:
		rdma_vdev_dereg(s->mr);
		s->mr = NULL;
		break;
	case CMD_REREG:
		if (rdma_vdev_reg(s->v, s->mem, SIZE, 1, &s->lkey, &s->rkey, &s->mr, err, sizeof(err)))
			fprintf(stderr, "[B] %s\n", err);
		send_hello(s);
		break;
	case CMD_QUIT:
		s->quit = 1;
		break;
	}
}

static int run_b(int lsn, const char *dev)
{
	struct side s = {.who = "B"};
	s.sock = accept(lsn, NULL, NULL);
	close(lsn);
	if (s.sock < 0)
		return 2;
	int one = 1;
	setsockopt(s.sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (side_open(&s, dev, 1, 12, 3) != 0)
		return 2;
	on_cmd = b_cmd;
	send_hello(&s);
	while (!s.quit && !s.peer_gone)
		turn(&s, 100);
	fprintf(stderr, "[B] %llu notifications, %llu bad\n", (unsigned long long)s.notifs,
		(unsigned long long)s.bad);
	rdma_eng_free(s.e);
	rdma_vdev_dereg(s.mr);
	rdma_vdev_close(s.v);
	return s.bad ? 1 : 0;
}

/* ---- A ---- */
struct slot {
	int busy, done, code, need_report, reported, report_code;
	uint64_t seq;
	int read;
	mori_desc d[MAXD];
	uint32_t n;
	struct notif nm;
	char msg[128], rmsg[64];
	uint64_t bytes, t_done;
};
static struct slot slots[256];
static uint64_t reports_total, reports_bad;

static void a_report(struct side *s, const struct cmsg *m)
{
	reports_total++;
	struct slot *x = NULL;
	for (int i = 0; i < 256 && !x; i++)
		if (slots[i].busy && slots[i].seq == m->a)
			x = &slots[i];
	if (!x) {
		fail("report for seq %llu that is not in flight", (unsigned long long)m->a);
		return;
	}
	if (x->reported)
		fail("second report for seq %llu", (unsigned long long)m->a);
	x->reported = 1;
	x->report_code = m->code;
	snprintf(x->rmsg, sizeof(x->rmsg), "%.59s", m->text);
	if (m->code) {
		reports_bad++;
		fail("B: %s", m->text);
	}
}

static void a_done(void *arg, uint32_t id, int code, const char *msg)
{
	struct slot *x = arg;
	if (x->done)
		fail("seq %llu completed twice", (unsigned long long)x->seq);
	x->done = 1;
	x->code = code;
	x->t_done = now_us();
	snprintf(x->msg, sizeof(x->msg), "%s", msg);
}

static int start(struct side *s, struct slot *x, int read, uint32_t rkey, int notif_op,
		 uint64_t timeout_us)
{
	struct rdma_xfer_args a = {0};
	a.read = read;
	a.laddr = (uint64_t)(uintptr_t)s->mem;
	a.lkey = s->lkey;
	a.raddr = s->raddr;
	a.rkey = rkey;
	a.descs = x->d;
	a.n = x->n;
	if (notif_op) {
		x->nm = (struct notif){NMAGIC, (uint32_t)notif_op, x->seq};
		a.notif = &x->nm;
		a.notif_len = sizeof(x->nm);
	}
	a.deadline_us = now_us() + timeout_us;
	a.done = a_done;
	a.arg = x;
	x->busy = 1;
	x->done = x->reported = x->code = x->report_code = 0;
	x->need_report = notif_op != 0;
	x->read = read;
	x->bytes = 0;
	for (uint32_t i = 0; i < x->n; i++)
		x->bytes += x->d[i].length;
	uint32_t id;
	int rc = rdma_xfer_start(s->c, &a, now_us(), &id);
	if (rc) {
		x->busy = 0;
		fail("rdma_xfer_start: %s", mori_strerror(rc));
	}
	return rc;
}

static int finished(const struct slot *x)
{
	return x->done && (!x->need_report || x->code || x->reported);
}

/* Turn until every busy slot among the first n is finished, or deadline. */
static int wait_slots(struct side *s, int n, uint64_t max_us)
{
	uint64_t end = now_us() + max_us;
	for (;;) {
		int all = 1;
		for (int i = 0; i < n; i++)
			if (slots[i].busy && !finished(&slots[i]))
				all = 0;
		if (all)
			return 0;
		if (now_us() > end)
			return -1;
		turn(s, 50);
	}
}

static void cmd(struct side *s, uint64_t c, uint64_t b)
{
	struct cmsg m = {.type = M_CMD, .a = c, .b = b};
	send_msg(s, &m);
}

static int wait_ready(struct side *s, uint64_t max_us)
{
	uint64_t end = now_us() + max_us;
	while (rdma_conn_ready(s->c) < NQP || !s->have_hello) {
		if (now_us() > end)
			return -1;
		turn(s, 20);
	}
	return 0;
}

static void fill_write(struct side *s, struct slot *x)
{
	for (uint32_t i = 0; i < x->n; i++)
		for (uint64_t b = 0; b < x->d[i].length; b++)
			s->mem[x->d[i].local_offset + b] = wpat(x->seq, x->d[i].remote_offset + b);
}

static void poison_read(struct side *s, struct slot *x)
{
	for (uint32_t i = 0; i < x->n; i++)
		for (uint64_t b = 0; b < x->d[i].length; b++)
			s->mem[x->d[i].local_offset + b] = (uint8_t)~rpat(x->d[i].remote_offset + b);
}

static int check_read(struct side *s, struct slot *x)
{
	for (uint32_t i = 0; i < x->n; i++)
		for (uint64_t b = 0; b < x->d[i].length; b++)
			if (s->mem[x->d[i].local_offset + b] != rpat(x->d[i].remote_offset + b))
				return -1;
	return 0;
}

int main(int argc, char **argv)
{
	const char *dev_a = NULL, *dev_b = NULL, *json = NULL;
	int batches = 300, mib = 256;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dev-a") && i + 1 < argc)
			dev_a = argv[++i];
		else if (!strcmp(argv[i], "--dev-b") && i + 1 < argc)
			dev_b = argv[++i];
		else if (!strcmp(argv[i], "--batches") && i + 1 < argc)
			batches = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			mib = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--dev-a NAME] [--dev-b NAME] [--batches N] [--mib N] [--json FILE]\n", argv[0]);
			return 2;
		}
	}
	/* Pick devices: RoCE ports that are active. */
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		printf("skipped: no RDMA devices (%s)\n", list ? "none listed" : strerror(errno));
		if (list)
			ibv_free_device_list(list);
		return 77;
	}
	static char names[2][64];
	int found = 0;
	for (int i = 0; i < n && found < 2; i++) {
		struct ibv_context *c = ibv_open_device(list[i]);
		struct ibv_port_attr pa;
		if (c && ibv_query_port(c, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE &&
		    pa.link_layer == IBV_LINK_LAYER_ETHERNET)
			snprintf(names[found++], 64, "%s", ibv_get_device_name(list[i]));
		if (c)
			ibv_close_device(c);
	}
	ibv_free_device_list(list);
	if (!found) {
		printf("skipped: no active RoCE port\n");
		return 77;
	}
	if (!dev_a)
		dev_a = names[0];
	if (!dev_b)
		dev_b = found > 1 ? names[1] : names[0];
	printf("devices: A %s, B %s\n", dev_a, dev_b);
	fflush(stdout);

	int lsn = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	if (lsn < 0 || bind(lsn, (struct sockaddr *)&sa, sizeof(sa)) || listen(lsn, 1) ||
	    getsockname(lsn, (struct sockaddr *)&sa, &sl)) {
		perror("listen");
		return 2;
	}
	pid_t b = fork();
	if (b == 0)
		_exit(run_b(lsn, dev_b));
	close(lsn);
	struct side s = {.who = "A"};
	s.sock = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(s.sock, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		perror("connect");
		return 2;
	}
	int one = 1;
	setsockopt(s.sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* A's timeout 12 (16.8 ms) and 3 retries: a dead peer is noticed in well under a second */
	if (side_open(&s, dev_a, 0, 12, 3) != 0) {
		kill(b, SIGKILL);
		return 1;
	}
	on_report = a_report;
	uint64_t t0 = now_us();
	if (wait_ready(&s, 10000000) != 0) {
		fail("QPs not paired within 10 s (%d of %d ready)", rdma_conn_ready(s.c), NQP);
		kill(b, SIGKILL);
		return 1;
	}
	printf("paired %d QPs in %.1f ms\n", NQP, (now_us() - t0) / 1000.0);

	/* 1. random batches */
	uint64_t bytes = 0, nr = 0, nw = 0;
	t0 = now_us();
	uint64_t next = 0;
	int inflight = 0;
	while (next < (uint64_t)batches || inflight) {
		for (int k = 0; k < K; k++) {
			struct slot *x = &slots[k];
			if (x->busy && finished(x)) {
				if (x->code)
					fail("batch %llu: %s: %s", (unsigned long long)x->seq, mori_strerror(x->code), x->msg);
				else if (x->read && check_read(&s, x))
					fail("batch %llu: read data differs", (unsigned long long)x->seq);
				bytes += x->bytes;
				x->busy = 0;
				inflight--;
			}
			if (!x->busy && next < (uint64_t)batches && next % K == (uint64_t)k) {
				x->seq = next++;
				gen_batch(x->seq, &x->read, x->d, &x->n);
				if (x->read) {
					poison_read(&s, x);
					nr++;
				} else {
					fill_write(&s, x);
					nw++;
				}
				if (start(&s, x, x->read, s.prkey, 1, 30000000) == 0)
					inflight++;
			}
		}
		if (now_us() - t0 > 240000000) {
			fail("phase 1 stuck: %d in flight after 240 s", inflight);
			break;
		}
		turn(&s, 50);
	}
	double secs = (now_us() - t0) / 1e6;
	printf("1. %d random batches (%llu reads, %llu writes), %.1f MiB verified, %llu notifications checked at B: %.1f s\n",
	       batches, (unsigned long long)nr, (unsigned long long)nw, bytes / 1048576.0,
	       (unsigned long long)reports_total, secs);
	if (reports_total != (uint64_t)batches)
		fail("%llu reports for %d notified batches", (unsigned long long)reports_total, batches);
	const struct rdma_stats *st = rdma_eng_stats(s.e);
	printf("   engine: %llu chunks, %llu work requests (%llu signalled), %llu waits for send-queue room, %llu QP resets (%llu stalls), %llu re-posted\n",
	       (unsigned long long)st->chunks, (unsigned long long)st->wrs_posted,
	       (unsigned long long)st->wrs_signaled, (unsigned long long)st->sq_full_waits,
	       (unsigned long long)st->qp_resets, (unsigned long long)st->stalls,
	       (unsigned long long)st->requeued);

	/* 2. throughput: 1 MiB writes (notified, checked at B), then 1 MiB reads */
	double wr_mbs = 0, rd_mbs = 0;
	for (int pass = 0; pass < 2; pass++) {
		int total = mib, started = 0, ended = 0, depth = 16;
		uint64_t base = 1000000;
		t0 = now_us();
		while (ended < total) {
			for (int k = 0; k < depth; k++) {
				struct slot *x = &slots[k];
				if (x->busy && finished(x)) {
					if (x->code)
						fail("1 MiB %s %llu: %s", pass ? "read" : "write", (unsigned long long)x->seq, x->msg);
					x->busy = 0;
					ended++;
				}
				if (!x->busy && started < total) {
					x->seq = base + (uint64_t)started;
					/* seq % 32 picks the 1 MiB slot; k < 16 and seq advances by 1: no reuse in flight */
					uint64_t off = x->seq % 32 * (1u << 20);
					x->n = 1;
					x->d[0] = (mori_desc){off, pass ? HALF + off : off, 1u << 20};
					if (!pass) {
						s.mem[off] = wpat(x->seq, off);
						s.mem[off + (1u << 20) - 1] = wpat(x->seq, off + (1u << 20) - 1);
					}
					start(&s, x, pass, s.prkey, pass ? 0 : 2, 30000000);
					started++;
				}
			}
			if (now_us() - t0 > 120000000) {
				fail("phase 2 stuck");
				break;
			}
			turn(&s, 50);
		}
		double mbs = (double)total * 1.048576 / ((now_us() - t0) / 1e6);
		if (pass)
			rd_mbs = mbs;
		else
			wr_mbs = mbs;
	}
	printf("2. 1 MiB x %d: write %.1f MB/s (notified, checked at B), read %.1f MB/s, 16 in flight, 2 QPs\n",
	       mib, wr_mbs, rd_mbs);
	memset(slots, 0, sizeof(slots));

	/* 3. a bad remote key */
	struct slot *x = &slots[0], *y = &slots[1];
	x->seq = 2000000;
	x->n = 1;
	x->d[0] = (mori_desc){0, 0, 4096};
	start(&s, x, 0, s.prkey ^ 0x5a5a00u, 0, 5000000);
	wait_slots(&s, 1, 10000000);
	if (!x->done || x->code != MORI_EPERM || strcmp(x->msg, "remote access error"))
		fail("bad rkey: %s (%s), want MORI_EPERM remote access error", mori_strerror(x->code), x->msg);
	else
		printf("3. bad rkey: %s \"%s\"\n", mori_strerror(x->code), x->msg);
	x->busy = 0;
	if (wait_ready(&s, 5000000))
		fail("QPs not re-paired after the access error");
	y->seq = 2000001;
	gen_batch(y->seq, &y->read, y->d, &y->n);
	y->read ? poison_read(&s, y) : fill_write(&s, y);
	start(&s, y, y->read, s.prkey, 1, 10000000);
	wait_slots(&s, 2, 15000000);
	if (!finished(y) || y->code || (y->read && check_read(&s, y)))
		fail("transfer after bad rkey: %s %s", mori_strerror(y->code), y->msg);
	else
		printf("   then a verified %s of %llu bytes: ok\n", y->read ? "read" : "write", (unsigned long long)y->bytes);
	y->busy = 0;

	/* 4. B deregisters its region: the key no longer matches */
	cmd(&s, CMD_DEREG, 0);
	for (int i = 0; i < 20; i++)
		turn(&s, 10);
	x->seq = 2000002;
	x->n = 1;
	x->d[0] = (mori_desc){0, HALF, 65536};
	start(&s, x, 1, s.prkey, 0, 5000000);
	wait_slots(&s, 1, 10000000);
	if (x->code != MORI_EPERM)
		fail("deregistered region: %s (%s), want MORI_EPERM", mori_strerror(x->code), x->msg);
	else
		printf("4. region deregistered at B: %s \"%s\"\n", mori_strerror(x->code), x->msg);
	x->busy = 0;
	s.have_hello = 0;
	cmd(&s, CMD_REREG, 0);
	if (wait_ready(&s, 5000000))
		fail("no new key / QPs after re-registration");
	x->seq = 2000003;
	poison_read(&s, x);
	start(&s, x, 1, s.prkey, 0, 5000000);
	wait_slots(&s, 1, 10000000);
	if (x->code || check_read(&s, x))
		fail("read with the new key: %s %s", mori_strerror(x->code), x->msg);
	else
		printf("   re-registered (rkey 0x%x): verified read ok\n", s.prkey);
	x->busy = 0;

	/* 5. B's QP 0 forced into error while 32 notified 1 MiB writes are in flight */
	uint64_t resets0 = rdma_eng_stats(s.e)->qp_resets, req0 = rdma_eng_stats(s.e)->requeued;
	for (int k = 0; k < 32; k++) {
		struct slot *z = &slots[k];
		z->seq = 3000000 + (uint64_t)k;
		uint64_t off = z->seq % 32 * (1u << 20);
		z->n = 1;
		z->d[0] = (mori_desc){off, off, 1u << 20};
		s.mem[off] = wpat(z->seq, off);
		s.mem[off + (1u << 20) - 1] = wpat(z->seq, off + (1u << 20) - 1);
		start(&s, z, 0, s.prkey, 2, 20000000);
	}
	turn(&s, 1);
	cmd(&s, CMD_KILL_QP, 0);
	if (wait_slots(&s, 32, 30000000))
		fail("phase 5: transfers still in flight after 30 s");
	/* B's CONNECT for its new QP may come after the writes (when they were quicker than the
	 * command): A re-creates its end when it arrives */
	for (uint64_t end5 = now_us() + 5000000; rdma_eng_stats(s.e)->qp_resets == resets0 && now_us() < end5;)
		turn(&s, 20);
	wait_ready(&s, 5000000);
	int ok5 = 0;
	for (int k = 0; k < 32; k++) {
		if (slots[k].code == 0 && slots[k].reported && !slots[k].report_code)
			ok5++;
		else
			fail("phase 5 transfer %d: %s %s", k, mori_strerror(slots[k].code), slots[k].msg);
		slots[k].busy = 0;
	}
	uint64_t resets5 = rdma_eng_stats(s.e)->qp_resets - resets0;
	printf("5. B's QP forced into error under 32 writes: %d/32 completed and verified at B (%llu QP resets, %llu requests re-posted at A)\n",
	       ok5, (unsigned long long)resets5, (unsigned long long)(rdma_eng_stats(s.e)->requeued - req0));
	if (resets5 == 0)
		fail("phase 5: A never re-created its end of the QP B reset");

	/* 6. B frozen: its 64 receive buffers per QP run out; notified writes past them wait for a
	 * receiver that never comes (RNR retried forever) until their deadline */
	kill(b, SIGSTOP);
	int nfz = 200, to6 = 0, ok6 = 0, other6 = 0;
	uint64_t dl = 3000000;
	uint64_t t6 = now_us();
	for (int k = 0; k < nfz; k++) {
		struct slot *z = &slots[k];
		z->seq = 4000000 + (uint64_t)k;
		z->n = 1;
		z->d[0] = (mori_desc){(uint64_t)k * 64, (uint64_t)k * 64, 64};
		start(&s, z, 0, s.prkey, 3, dl);
	}
	/* A waits for completions only (B cannot report while frozen) */
	uint64_t end6 = now_us() + dl + 2000000;
	for (;;) {
		int all = 1;
		for (int k = 0; k < nfz; k++)
			all &= slots[k].done;
		if (all || now_us() > end6)
			break;
		turn(&s, 20);
	}
	uint64_t last6 = 0;
	for (int k = 0; k < nfz; k++) {
		struct slot *z = &slots[k];
		if (!z->done)
			fail("phase 6: transfer %d still in progress %.1f s after its deadline", k, (now_us() - t6 - dl) / 1e6);
		else if (z->code == MORI_ETIMEDOUT)
			to6++;
		else if (z->code == 0)
			ok6++;
		else
			other6++;
		if (z->t_done > last6)
			last6 = z->t_done;
	}
	printf("6. B frozen (SIGSTOP), %d notified writes, deadline %.1f s: %d completed, %d MORI_ETIMEDOUT, %d other; last ended %.2f s after start\n",
	       nfz, dl / 1e6, ok6, to6, other6, (last6 - t6) / 1e6);
	for (int k = 0; k < nfz; k++)
		if (slots[k].done && slots[k].code) {
			printf("   e.g. %s: %s\n", mori_strerror(slots[k].code), slots[k].msg);
			break;
		}
	if (to6 + other6 == 0)
		fail("phase 6: expected failures once B's receive buffers ran out");
	for (int k = 0; k < nfz; k++)
		if (slots[k].done && slots[k].code && slots[k].code != MORI_ETIMEDOUT && slots[k].code != MORI_EIO)
			fail("phase 6: transfer %d: %s %s", k, mori_strerror(slots[k].code), slots[k].msg);
	if (last6 - t6 > dl + 1000000)
		fail("phase 6: a transfer ended %.2f s after start, past its deadline + 1 s", (last6 - t6) / 1e6);
	kill(b, SIGCONT);
	if (wait_ready(&s, 10000000))
		fail("QPs not re-paired after B resumed");
	/* B now handles the notifications that landed while it was stopped: each completed
	 * transfer gets exactly one report (checked at B), the timed-out ones none. */
	uint64_t end_r = now_us() + 10000000;
	int rep6 = 0;
	for (;;) {
		rep6 = 0;
		for (int k = 0; k < nfz; k++)
			rep6 += slots[k].reported;
		if (rep6 >= ok6 || now_us() > end_r)
			break;
		turn(&s, 20);
	}
	for (int i = 0; i < 20; i++) /* late extra reports would show up here */
		turn(&s, 10);
	rep6 = 0;
	int wrong6 = 0;
	for (int k = 0; k < nfz; k++) {
		rep6 += slots[k].reported;
		wrong6 += slots[k].reported && slots[k].code;
		slots[k].busy = 0;
	}
	printf("   B resumed: %d reports for the %d completed (each notification once, data checked at B)\n",
	       rep6, ok6);
	if (rep6 != ok6 || wrong6)
		fail("phase 6: %d reports for %d completed transfers (%d for failed ones)", rep6, ok6, wrong6);
	x->seq = 5000000;
	gen_batch(x->seq, &x->read, x->d, &x->n);
	x->read ? poison_read(&s, x) : fill_write(&s, x);
	start(&s, x, x->read, s.prkey, 1, 10000000);
	wait_slots(&s, 1, 15000000);
	if (!finished(x) || x->code || (x->read && check_read(&s, x)))
		fail("after SIGCONT: %s %s", mori_strerror(x->code), x->msg);
	else
		printf("   B resumed: a verified, notified %s goes through\n", x->read ? "read" : "write");
	x->busy = 0;

	/* 7. B killed with transfers in flight */
	int n7 = 64, eio7 = 0, to7 = 0, ok7 = 0;
	for (int k = 0; k < n7; k++) {
		struct slot *z = &slots[k];
		z->seq = 6000000 + (uint64_t)k;
		z->n = 1;
		z->d[0] = (mori_desc){(uint64_t)(k % 32) << 20, (uint64_t)(k % 32) << 20, 1u << 20};
		start(&s, z, k % 2, s.prkey, 0, 5000000);
	}
	uint64_t t7 = now_us();
	kill(b, SIGKILL);
	int status;
	waitpid(b, &status, 0);
	end6 = now_us() + 8000000;
	uint64_t last7 = 0;
	for (;;) {
		int all = 1;
		for (int k = 0; k < n7; k++)
			all &= slots[k].done;
		if (all || now_us() > end6)
			break;
		turn(&s, 20);
	}
	for (int k = 0; k < n7; k++) {
		struct slot *z = &slots[k];
		if (!z->done)
			fail("phase 7: transfer %d still in progress", k);
		else if (z->code == MORI_EIO)
			eio7++;
		else if (z->code == MORI_ETIMEDOUT)
			to7++;
		else if (z->code == 0)
			ok7++;
		if (z->t_done > last7)
			last7 = z->t_done;
	}
	printf("7. B killed under %d transfers: %d completed before, %d MORI_EIO, %d MORI_ETIMEDOUT; all ended within %.2f s\n",
	       n7, ok7, eio7, to7, (last7 - t7) / 1e6);
	for (int k = 0; k < n7; k++)
		if (slots[k].done && slots[k].code) {
			printf("   e.g. %s: %s\n", mori_strerror(slots[k].code), slots[k].msg);
			break;
		}
	if (last7 - t7 > 5000000 + 1000000)
		fail("phase 7: a transfer ended past its deadline + 1 s");
	if (ok7 + eio7 + to7 != n7)
		fail("phase 7: unexpected codes");

	if (json) {
		FILE *f = fopen(json, "w");
		if (f) {
			fprintf(f, "{\"batches\": %d, \"write_mbs\": %.1f, \"read_mbs\": %.1f, \"failures\": %d}\n",
				batches, wr_mbs, rd_mbs, failures);
			fclose(f);
		}
	}
	rdma_eng_free(s.e);
	rdma_vdev_dereg(s.mr);
	rdma_vdev_close(s.v);
	free(s.mem);
	printf("%s (%d failures)\n", failures ? "FAILED" : "ok", failures);
	return failures ? 1 : 0;
}
