/* mori-bench: benchmarks of mori against baselines measured in the same run.
 *
 *   mori-bench io [options]          nixlbench-style loop over block sizes (same node, or cross node
 *                                    with --remote-runtime-dir / --node)
 *   mori-bench io-target [options]   the target side alone (for a target in another namespace)
 *
 * Each row prints mori's GB/s and batch latency p50/p99 beside the baseline: memcpy of the same
 * bytes (same node), or a plain TCP stream between the same two addresses (cross node).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mori.h"

#define MAX_TOTAL (1ull << 30) /* bytes per batch cap: large blocks get smaller batches */

struct opts {
	const char *rundir, *remote_rundir, *node, *name, *tcp;
	uint64_t block_min, block_max;
	size_t batch;
	int iters, warmup, depth;
	int op; /* MORI_OP_* */
	int check, json, mem;
	uint64_t region;
	size_t prep_descs;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t parse_size(const char *s)
{
	char *e;
	double v = strtod(s, &e);
	switch (*e) {
	case 'k': case 'K': v *= 1024; break;
	case 'm': case 'M': v *= 1024 * 1024; break;
	case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
	default: break;
	}
	return (uint64_t)v;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "mori-bench: %s: %s (%s)\n", what, mori_strerror(rc), mori_client_last_error(NULL));
	exit(1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
	if (n == 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	int i = (int)ceil(p / 100.0 * n) - 1;
	return v[i < 0 ? 0 : i];
}

/* ---- the target: owns the remote region, optional TCP sink for the baseline ---- */

static int tcp_listen(const char *host, int *port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	int one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s, 4) != 0)
		return -1;
	socklen_t l = sizeof(a);
	getsockname(s, (struct sockaddr *)&a, &l);
	*port = ntohs(a.sin_port);
	return s;
}

/* Drain the baseline stream; each connection ends with the client's shutdown. */
static void tcp_sink(int ls)
{
	static char buf[1 << 20];
	for (;;) {
		int s = accept(ls, NULL, NULL);
		if (s < 0)
			return;
		while (read(s, buf, sizeof(buf)) > 0) {
		}
		close(s);
	}
}

/* Serve as the target: publish a region of o->region bytes filled with a pattern, print
 * "READY node=<addr> tcp=<host:port>" and keep running until killed. */
static void target_main(const struct opts *o, int ready_fd)
{
	mori_client *c;
	mori_mem *m;
	int rc;
	if ((rc = mori_client_open(o->rundir, "bench-target", &c)))
		die("target: client_open", rc);
	if ((rc = mori_mem_alloc(c, o->region, MORI_MEM_HOST, &m)))
		die("target: mem_alloc", rc);
	uint8_t *p = mori_mem_ptr(m);
	for (uint64_t i = 0; i < o->region; i++)
		p[i] = (uint8_t)(i * 131 + 7);
	if ((rc = mori_mem_publish(m, o->name)))
		die("target: publish", rc);
	const char *node = mori_client_node(c);
	char host[128] = "127.0.0.1";
	if (node[0]) {
		snprintf(host, sizeof(host), "%s", node);
		char *colon = strrchr(host, ':');
		if (colon)
			*colon = 0;
	}
	int port = 0, ls = tcp_listen(host, &port);
	char line[400];
	int n = snprintf(line, sizeof(line), "READY node=%s tcp=%s:%d\n", node, host, port);
	if (write(ready_fd, line, (size_t)n) != n)
		exit(1);
	if (ls >= 0)
		tcp_sink(ls);
	pause();
	mori_client_close(c);
}

/* ---- baselines ---- */

static double memcpy_gbps(uint8_t *dst, const uint8_t *src, uint64_t block, size_t batch, int iters)
{
	double best = 0;
	for (int w = 0; w < 2; w++) { /* first pass warms pages and caches */
		double t0 = now_s();
		for (int it = 0; it < iters; it++)
			for (size_t i = 0; i < batch; i++)
				memcpy(dst + i * block, src + i * block, block);
		double dt = now_s() - t0;
		best = (double)block * (double)batch * iters / dt / 1e9;
	}
	return best;
}

static int tcp_connect(const char *hostport)
{
	char host[128];
	snprintf(host, sizeof(host), "%s", hostport);
	char *colon = strrchr(host, ':');
	if (!colon)
		return -1;
	*colon = 0;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		return -1;
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(s);
		return -1;
	}
	return s;
}

static double tcp_gbps(const char *hostport, const uint8_t *src, uint64_t bytes, int iters)
{
	int s = tcp_connect(hostport);
	if (s < 0)
		return -1;
	double t0 = now_s();
	for (int it = 0; it < iters; it++) {
		uint64_t done = 0;
		while (done < bytes) {
			size_t chunk = bytes - done > (4u << 20) ? (4u << 20) : (size_t)(bytes - done);
			ssize_t w = write(s, src + (done % (64u << 20)), chunk);
			if (w <= 0) {
				close(s);
				return -1;
			}
			done += (uint64_t)w;
		}
	}
	shutdown(s, SHUT_WR);
	char b;
	while (read(s, &b, 1) > 0) {
	}
	double dt = now_s() - t0;
	close(s);
	return (double)bytes * iters / dt / 1e9;
}

/* ---- the io benchmark ---- */

static void usage(void)
{
	fprintf(stderr,
		"usage: mori-bench io [--runtime-dir DIR] [--remote-runtime-dir DIR2 | --node HOST:PORT --name NAME --tcp HOST:PORT]\n"
		"                     [--op read|write] [--block-min 4K] [--block-max 64M] [--batch 256]\n"
		"                     [--iters 20] [--warmup 3] [--depth 1] [--region 1G] [--check] [--json]\n"
		"                     [--prep-descs 100000]\n"
		"       mori-bench io-target --runtime-dir DIR [--name NAME] [--region 1G]\n"
		"Same node (default): a forked target process publishes a region on the same morid; baseline\n"
		"memcpy of the same bytes. Cross node: the target is on another morid; baseline a plain TCP\n"
		"stream between the same two hosts.\n");
	exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(n) (!strcmp(a, n) && v && (i++, 1))
		if (ARG("--runtime-dir")) o->rundir = v;
		else if (ARG("--remote-runtime-dir")) o->remote_rundir = v;
		else if (ARG("--node")) o->node = v;
		else if (ARG("--name")) o->name = v;
		else if (ARG("--tcp")) o->tcp = v;
		else if (ARG("--op")) o->op = !strcmp(v, "read") ? MORI_OP_READ : MORI_OP_WRITE;
		else if (ARG("--block-min")) o->block_min = parse_size(v);
		else if (ARG("--block-max")) o->block_max = parse_size(v);
		else if (ARG("--block")) o->block_min = o->block_max = parse_size(v);
		else if (ARG("--batch")) o->batch = (size_t)atol(v);
		else if (ARG("--iters")) o->iters = atoi(v);
		else if (ARG("--warmup")) o->warmup = atoi(v);
		else if (ARG("--depth")) o->depth = atoi(v);
		else if (ARG("--region")) o->region = parse_size(v);
		else if (ARG("--prep-descs")) o->prep_descs = (size_t)atol(v);
		else if (!strcmp(a, "--check")) o->check = 1;
		else if (!strcmp(a, "--json")) o->json = 1;
		else usage();
#undef ARG
	}
	if (!o->block_min || o->block_max < o->block_min || !o->batch || o->iters < 1 || o->depth < 1)
		usage();
}

static uint8_t pattern(uint64_t off) { return (uint8_t)(off * 131 + 7); }

static int run_io(struct opts *o)
{
	int cross = o->remote_rundir || o->node;
	pid_t target = 0;
	char node[160] = "", tcp[160] = "";
	if (o->node) {
		snprintf(node, sizeof(node), "%s", o->node);
		if (o->tcp)
			snprintf(tcp, sizeof(tcp), "%s", o->tcp);
	} else {
		int p[2];
		if (pipe(p) != 0)
			return 1;
		struct opts to = *o;
		to.rundir = o->remote_rundir ? o->remote_rundir : o->rundir;
		target = fork();
		if (target == 0) {
			close(p[0]);
			target_main(&to, p[1]);
			_exit(0);
		}
		close(p[1]);
		char line[400] = "";
		ssize_t n = read(p[0], line, sizeof(line) - 1);
		close(p[0]);
		if (n <= 0) {
			fprintf(stderr, "mori-bench: the target process failed to start\n");
			return 1;
		}
		line[n] = 0;
		sscanf(line, "READY node=%159s tcp=%159s", node, tcp);
		if (!cross)
			node[0] = 0;
	}
	mori_client *c;
	mori_mem *l, *r, *base = NULL;
	int rc;
	if ((rc = mori_client_open(o->rundir, "bench", &c)))
		die("client_open", rc);
	uint64_t lsz = o->region;
	if ((rc = mori_mem_alloc(c, lsz, MORI_MEM_HOST, &l)))
		die("mem_alloc", rc);
	uint8_t *lp = mori_mem_ptr(l);
	memset(lp, 0x11, lsz);
	if ((rc = mori_mem_open_remote(c, cross ? node : NULL, o->name, &r)))
		die("mem_open_remote", rc);
	uint8_t *bp = NULL;
	if (!cross) {
		if ((rc = mori_mem_alloc(c, lsz, MORI_MEM_HOST, &base)))
			die("mem_alloc (baseline)", rc);
		bp = mori_mem_ptr(base);
		memset(bp, 0x22, lsz);
	}
	const char *opname = o->op == MORI_OP_READ ? "read" : "write";
	if (!o->json) {
		printf("# mori-bench io: %s, %s, batch %zu, iters %d (+%d warm-up), depth %d, region %llu MiB\n",
		       cross ? "cross node" : "same node", opname, o->batch, o->iters, o->warmup, o->depth,
		       (unsigned long long)(o->region >> 20));
		printf("# baseline: %s\n", cross ? "plain TCP stream to the same host (one connection)" :
						  "memcpy of the same bytes (one thread)");
		printf("%10s %7s %12s %10s %10s %10s %12s %8s\n", "block", "batch", "bytes/iter", "GB/s",
		       "p50_us", "p99_us", "base_GB/s", "ratio");
	} else {
		printf("{\"mode\": \"%s\", \"op\": \"%s\", \"rows\": [\n", cross ? "cross" : "same", opname);
	}
	int first = 1, bad = 0;
	mori_desc *d = malloc(sizeof(*d) * o->batch);
	mori_xfer **inflight = calloc((size_t)o->depth, sizeof(*inflight));
	double *lat = malloc(sizeof(double) * (size_t)(o->iters + o->warmup));
	double *t_sub = malloc(sizeof(double) * (size_t)o->depth);
	for (uint64_t block = o->block_min; block <= o->block_max; block *= 2) {
		size_t batch = o->batch;
		if (block * batch > MAX_TOTAL)
			batch = (size_t)(MAX_TOTAL / block);
		if (block * batch > lsz)
			batch = (size_t)(lsz / block);
		if (batch == 0) {
			fprintf(stderr, "mori-bench: block %llu larger than the region; stopping\n", (unsigned long long)block);
			break;
		}
		for (size_t i = 0; i < batch; i++)
			d[i] = (mori_desc){i * block, i * block, block};
		for (int w = 0; w < o->warmup; w++) {
			mori_xfer *x;
			if ((rc = mori_xfer_batch(o->op, l, r, d, batch, NULL, &x)) || (rc = mori_xfer_wait(x, 60000000)))
				die("warm-up transfer", rc);
			mori_xfer_free(x);
		}
		int nlat = 0, submitted = 0, done = 0;
		double t0 = now_s();
		while (done < o->iters) {
			while (submitted < o->iters && submitted - done < o->depth) {
				int slot = submitted % o->depth;
				t_sub[slot] = now_s();
				if ((rc = mori_xfer_batch(o->op, l, r, d, batch, NULL, &inflight[slot])))
					die("xfer_batch", rc);
				submitted++;
			}
			int slot = done % o->depth;
			if ((rc = mori_xfer_wait(inflight[slot], 60000000)))
				die("xfer_wait", rc);
			lat[nlat++] = (now_s() - t_sub[slot]) * 1e6;
			mori_xfer_free(inflight[slot]);
			done++;
		}
		double dt = now_s() - t0;
		double gbps = (double)block * (double)batch * o->iters / dt / 1e9;
		if (o->check && o->op == MORI_OP_READ) {
			for (size_t i = 0; i < batch * block; i++)
				if (lp[i] != pattern(i)) {
					bad++;
					break;
				}
		}
		double base_gbps = cross ? (tcp[0] ? tcp_gbps(tcp, lp, block * batch, o->iters) : -1)
					 : memcpy_gbps(bp, lp, block, batch, o->iters);
		double p50 = pct(lat, nlat, 50), p99 = pct(lat, nlat, 99);
		if (o->json) {
			printf("%s  {\"block\": %llu, \"batch\": %zu, \"bytes_per_iter\": %llu, \"gbps\": %.3f, "
			       "\"p50_us\": %.1f, \"p99_us\": %.1f, \"baseline_gbps\": %.3f}",
			       first ? "" : ",\n", (unsigned long long)block, batch,
			       (unsigned long long)(block * batch), gbps, p50, p99, base_gbps);
		} else {
			char bs[32];
			if (block >= (1u << 20))
				snprintf(bs, sizeof(bs), "%lluM", (unsigned long long)(block >> 20));
			else if (block >= 1024)
				snprintf(bs, sizeof(bs), "%lluK", (unsigned long long)(block >> 10));
			else
				snprintf(bs, sizeof(bs), "%llu", (unsigned long long)block);
			printf("%10s %7zu %12llu %10.2f %10.1f %10.1f %12.2f %7.0f%%\n", bs, batch,
			       (unsigned long long)(block * batch), gbps, p50, p99, base_gbps,
			       base_gbps > 0 ? 100 * gbps / base_gbps : 0);
		}
		fflush(stdout);
		first = 0;
	}
	/* A prepared list of many descriptors, submitted by index: how long until the daemon has
	 * the submission (cross node), or until it is done (same node: the copy runs here). */
	if (o->prep_descs) {
		size_t n = o->prep_descs;
		uint64_t blk = o->region / n >= 4096 ? 4096 : (o->region / n ? o->region / n : 1);
		mori_desc *pd = malloc(sizeof(*pd) * n);
		uint32_t *idx = malloc(sizeof(*idx) * n);
		for (size_t i = 0; i < n; i++) {
			pd[i] = (mori_desc){i * blk, i * blk, blk};
			idx[i] = (uint32_t)i;
		}
		mori_xfer_list *xl;
		mori_xfer *x;
		if ((rc = mori_xfer_prep(l, r, pd, n, &xl)))
			die("xfer_prep", rc);
		double best = 1e9, best_done = 1e9;
		for (int rep = 0; rep < 5; rep++) {
			double t = now_s();
			if ((rc = mori_xfer_submit(xl, o->op, idx, n, NULL, &x)))
				die("xfer_submit", rc);
			while (mori_client_sq_pending(c) > 0 && now_s() - t < 5) {
			}
			double reached = now_s() - t;
			if ((rc = mori_xfer_wait(x, 60000000)))
				die("xfer_wait (prepared list)", rc);
			double all = now_s() - t;
			mori_xfer_free(x);
			best = reached < best ? reached : best;
			best_done = all < best_done ? all : best_done;
		}
		if (o->json)
			printf(",\n  {\"prepared_descs\": %zu, \"block\": %llu, \"submit_to_daemon_ms\": %.3f, \"complete_ms\": %.3f}",
			       n, (unsigned long long)blk, best * 1e3, best_done * 1e3);
		else
			printf("# prepared list of %zu x %llu B descriptors: submission %s in %.3f ms, complete in %.3f ms (best of 5)\n",
			       n, (unsigned long long)blk, cross ? "reached the daemon" : "returned (same node: copy done in-process)",
			       best * 1e3, best_done * 1e3);
		mori_xfer_list_free(xl);
		free(pd);
		free(idx);
	}
	if (o->json)
		printf("\n], \"check_failures\": %d}\n", bad);
	else if (o->check)
		printf("# check: %s\n", bad ? "FAILED" : "read contents verified");
	free(d);
	free(inflight);
	free(lat);
	free(t_sub);
	mori_mem_deregister(r);
	mori_mem_deregister(l);
	if (base)
		mori_mem_deregister(base);
	mori_client_close(c);
	if (target > 0) {
		kill(target, SIGTERM);
		waitpid(target, NULL, 0);
	}
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct opts o = {
		.name = "bench/target", .block_min = 4096, .block_max = 64ull << 20, .batch = 256,
		.iters = 20, .warmup = 3, .depth = 1, .op = MORI_OP_WRITE, .region = 1ull << 30,
	};
	if (argc < 2)
		usage();
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(argv[1], "io")) {
		parse(argc, argv, &o);
		return run_io(&o);
	}
	if (!strcmp(argv[1], "io-target")) {
		parse(argc, argv, &o);
		target_main(&o, 1);
		return 0;
	}
	usage();
	return 2;
}
