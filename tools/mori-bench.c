/* mori-bench: benchmarks of mori against baselines measured in the same run.
 *
 *   mori-bench io [options]          nixlbench-style loop over block sizes (same node, or cross node
 *                                    with --remote-runtime-dir / --node)
 *   mori-bench io-target [options]   the target side alone (for a target in another namespace)
 *
 * Each row prints mori's GB/s and batch latency p50/p99 beside the baseline: memcpy of the same
 * bytes (same node), or a plain TCP stream between the same two addresses (cross node).
 * With VRAM on either side (--mem vram, or --local-mem/--remote-mem) on the same node, the
 * baselines are the GPU's: one cuMemcpy*Async of the batch's bytes (the copy ceiling) and one
 * cuMemcpy*Async per block, both between buffers of the same kinds in this process. Across
 * nodes VRAM is staged through the daemons and the baseline stays the TCP stream.
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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu.h" /* the driver table inside libmori.a, for the GPU baselines */
#include "mori.h"

#define MAX_TOTAL (1ull << 30) /* bytes per batch cap: large blocks get smaller batches */
#define MAX_WINDOWS 64         /* host rows rotate over up to this many batch-sized windows */

struct opts {
	const char *rundir, *remote_rundir, *node, *name, *tcp;
	uint64_t block_min, block_max;
	size_t batch;
	int iters, warmup, depth;
	int op; /* MORI_OP_* */
	int check, json, mem;
	int no_rotate; /* host rows: copy the same window every iteration (cache-hot) */
	uint64_t region;
	size_t prep_descs;
	int lmem, rmem; /* MORI_MEM_* of the initiator's and the target's regions */
	int prep;       /* submit every iteration as all indices of a prepared list */
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

static uint8_t pattern(uint64_t off) { return (uint8_t)(off * 131 + 7); }

#define STAGE_MAX (64ull << 20)

/* VRAM regions are filled and read through a host region of the same client (a same-client
 * transfer), so the bench needs no GPU code for its data. Returns the staging region. */
static mori_mem *stage_for(mori_client *c, uint64_t len)
{
	mori_mem *s;
	int rc = mori_mem_alloc(c, len < STAGE_MAX ? len : STAGE_MAX, MORI_MEM_HOST, &s);
	if (rc)
		die("mem_alloc (staging)", rc);
	return s;
}

static void stage_move(mori_mem *s, mori_mem *m, uint64_t off, uint64_t len, int op)
{
	mori_xfer *x;
	int rc = op == MORI_OP_WRITE ? mori_write(s, 0, m, off, len, NULL, &x) : mori_read(s, 0, m, off, len, NULL, &x);
	if (rc || (rc = mori_xfer_wait(x, 60000000)))
		die("staging transfer", rc);
	mori_xfer_free(x);
}

/* Fill [0, len) of region m (of kind `kind`) with pattern(offset). */
static void region_fill(mori_client *c, mori_mem *m, int kind, uint64_t len)
{
	if (kind == MORI_MEM_HOST) {
		uint8_t *p = mori_mem_ptr(m);
		for (uint64_t i = 0; i < len; i++)
			p[i] = pattern(i);
		return;
	}
	mori_mem *s = stage_for(c, len);
	uint8_t *sp = mori_mem_ptr(s);
	for (uint64_t off = 0; off < len; off += mori_mem_size(s)) {
		uint64_t n = len - off < mori_mem_size(s) ? len - off : mori_mem_size(s);
		for (uint64_t i = 0; i < n; i++)
			sp[i] = pattern(off + i);
		stage_move(s, m, off, n, MORI_OP_WRITE);
	}
	mori_mem_deregister(s);
}

/* Does [0, len) of region m hold pattern(offset)? */
static int region_check(mori_client *c, mori_mem *m, int kind, uint64_t len)
{
	if (kind == MORI_MEM_HOST) {
		const uint8_t *p = mori_mem_ptr(m);
		for (uint64_t i = 0; i < len; i++)
			if (p[i] != pattern(i))
				return 0;
		return 1;
	}
	mori_mem *s = stage_for(c, len);
	const uint8_t *sp = mori_mem_ptr(s);
	int ok = 1;
	for (uint64_t off = 0; ok && off < len; off += mori_mem_size(s)) {
		uint64_t n = len - off < mori_mem_size(s) ? len - off : mori_mem_size(s);
		stage_move(s, m, off, n, MORI_OP_READ);
		for (uint64_t i = 0; i < n; i++)
			if (sp[i] != pattern(off + i)) {
				ok = 0;
				break;
			}
	}
	mori_mem_deregister(s);
	return ok;
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
	if ((rc = mori_mem_alloc(c, o->region, o->rmem, &m)))
		die("target: mem_alloc", rc);
	region_fill(c, m, o->rmem, o->region);
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

/* Iteration it copies window it % windows, as the mori rows do. */
static double memcpy_gbps(uint8_t *dst, const uint8_t *src, uint64_t block, size_t batch, int iters,
			  int windows)
{
	double best = 0;
	uint64_t bpi = block * batch;
	for (int w = 0; w < 2; w++) { /* first pass warms pages and caches */
		double t0 = now_s();
		for (int it = 0; it < iters; it++) {
			uint64_t off = (uint64_t)(it % windows) * bpi;
			for (size_t i = 0; i < batch; i++)
				memcpy(dst + off + i * block, src + off + i * block, block);
		}
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

/* ---- GPU baselines (rows with VRAM on either side), through libmori's driver table ---- */

struct gbase {
	const struct gpu_api *g;
	gpu_device dev;
	gpu_stream s;
};

static void gk(int r, const char *what)
{
	if (r) {
		fprintf(stderr, "mori-bench: GPU baseline: %s: %s\n", what, gpu_strerror(r));
		exit(1);
	}
}

/* Make the primary context of the device holding dptr current on this thread (libmori's). */
static void gbase_init(struct gbase *b, uint64_t dptr)
{
	int ord = 0;
	gpu_context ctx;
	b->g = gpu_api();
	if (!b->g) {
		fprintf(stderr, "mori-bench: no GPU: %s\n", gpu_unavailable_reason());
		exit(1);
	}
	gk(b->g->pointer_get_attribute(&ord, GPU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr), "device of the region");
	gk(b->g->device_get(&b->dev, ord), "cuDeviceGet");
	gk(b->g->primary_ctx_retain(&ctx, b->dev), "cuDevicePrimaryCtxRetain");
	gk(b->g->ctx_push_current(ctx), "cuCtxPushCurrent");
	gk(b->g->stream_create(&b->s, GPU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

/* One cuMemcpy{DtoD,HtoD,DtoH}Async as the two kinds ask (addresses: device or host). */
static int gcopy(const struct gbase *b, int dk, uint64_t dst, int sk, uint64_t src, size_t n)
{
	if (dk == MORI_MEM_VRAM && sk == MORI_MEM_VRAM)
		return b->g->memcpy_dtod_async(dst, src, n, b->s);
	if (dk == MORI_MEM_VRAM)
		return b->g->memcpy_htod_async(dst, (const void *)(uintptr_t)src, n, b->s);
	return b->g->memcpy_dtoh_async((void *)(uintptr_t)dst, src, n, b->s);
}

/* The copy ceiling: one copy of block * batch bytes per iteration, each waited for as mori's
 * loop waits for each batch at depth 1; at a greater depth, queued back to back and waited for
 * once at the end (the stream's own best). */
static double gpu_ceiling_gbps(const struct gbase *b, int dk, uint64_t dst, int sk, uint64_t src,
			       uint64_t bytes, int iters, int depth)
{
	gk(gcopy(b, dk, dst, sk, src, bytes), "ceiling copy");
	gk(b->g->stream_synchronize(b->s), "cuStreamSynchronize");
	double t0 = now_s();
	for (int it = 0; it < iters; it++) {
		gk(gcopy(b, dk, dst, sk, src, bytes), "ceiling copy");
		if (depth == 1 || it == iters - 1)
			gk(b->g->stream_synchronize(b->s), "cuStreamSynchronize");
	}
	return (double)bytes * iters / (now_s() - t0) / 1e9;
}

/* One copy per block (what UCX cuda_ipc and most engines do), one sync per batch. At 16 KiB
 * this runs near 3 GB/s, so it is timed over one pass of the batch. */
static double gpu_perblock_gbps(const struct gbase *b, int dk, uint64_t dst, int sk, uint64_t src,
				uint64_t block, size_t batch)
{
	for (size_t i = 0; i < (batch < 64 ? batch : 64); i++)
		gk(gcopy(b, dk, dst + i * block, sk, src + i * block, block), "per-block copy");
	gk(b->g->stream_synchronize(b->s), "cuStreamSynchronize");
	int reps = batch >= 1024 ? 1 : (int)(4096 / batch);
	double t0 = now_s();
	for (int r = 0; r < reps; r++) {
		for (size_t i = 0; i < batch; i++)
			gk(gcopy(b, dk, dst + i * block, sk, src + i * block, block), "per-block copy");
		gk(b->g->stream_synchronize(b->s), "cuStreamSynchronize");
	}
	return (double)block * (double)batch * reps / (now_s() - t0) / 1e9;
}

static int parse_mem(const char *v)
{
	if (!strcmp(v, "host"))
		return MORI_MEM_HOST;
	if (!strcmp(v, "vram"))
		return MORI_MEM_VRAM;
	fprintf(stderr, "mori-bench: memory kind '%s' is not host or vram\n", v);
	exit(2);
}

static const char *mem_name(int k) { return k == MORI_MEM_VRAM ? "vram" : "host"; }

/* ---- the io benchmark ---- */

static void usage(void)
{
	fprintf(stderr,
		"usage: mori-bench io [--runtime-dir DIR] [--remote-runtime-dir DIR2 | --node HOST:PORT --name NAME --tcp HOST:PORT]\n"
		"                     [--op read|write] [--block-min 4K] [--block-max 64M] [--batch 256]\n"
		"                     [--iters 20] [--warmup 3] [--depth 1] [--region 1G] [--check] [--json]\n"
		"                     [--prep-descs 100000] [--prep] [--no-rotate]\n"
		"                     [--mem host|vram | --local-mem host|vram --remote-mem host|vram]\n"
		"       mori-bench io-target --runtime-dir DIR [--name NAME] [--region 1G]\n"
		"Same node (default): a forked target process publishes a region on the same morid; baseline\n"
		"memcpy of the same bytes. Cross node: the target is on another morid; baseline a plain TCP\n"
		"stream between the same two hosts.\n"
		"--mem vram (or mixed kinds): regions in GPU memory (device $MORI_GPU_DEVICE,\n"
		"else 0); baselines one cuMemcpy*Async of the batch's bytes (ceiling) and one per block.\n"
		"--prep: each iteration submits all indices of a prepared list of the batch's descriptors.\n");
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
		else if (ARG("--mem")) o->lmem = o->rmem = parse_mem(v);
		else if (ARG("--local-mem")) o->lmem = parse_mem(v);
		else if (ARG("--remote-mem")) o->rmem = parse_mem(v);
		else if (!strcmp(a, "--prep")) o->prep = 1;
		else if (!strcmp(a, "--check")) o->check = 1;
		else if (!strcmp(a, "--no-rotate")) o->no_rotate = 1;
		else if (!strcmp(a, "--json")) o->json = 1;
		else usage();
#undef ARG
	}
	if (!o->block_min || o->block_max < o->block_min || !o->batch || o->iters < 1 || o->depth < 1)
		usage();
	if (o->batch > UINT32_MAX) {
		fprintf(stderr, "mori-bench: --batch %zu is too large\n", o->batch);
		exit(2);
	}
}

static int run_io(struct opts *o)
{
	int cross = o->remote_rundir || o->node;
	/* cross node, VRAM is staged through the daemons and the baseline stays the TCP stream */
	int vram = o->lmem == MORI_MEM_VRAM || o->rmem == MORI_MEM_VRAM;
	int gpu = vram && !cross;
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
			prctl(PR_SET_PDEATHSIG, SIGKILL); /* a bench that dies must not leave its name published */
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
	if ((rc = mori_mem_alloc(c, lsz, o->lmem, &l)))
		die("mem_alloc", rc);
	uint8_t *lp = mori_mem_ptr(l);
	if (o->lmem == MORI_MEM_HOST)
		memset(lp, 0x11, lsz);
	if ((rc = mori_mem_open_remote(c, cross ? node : NULL, o->name, &r)))
		die("mem_open_remote", rc);
	uint8_t *bp = NULL;
	struct gbase gb = {0};
	if (!cross) {
		/* the baseline's copy of the remote side, of the same kind, in this process */
		if ((rc = mori_mem_alloc(c, lsz, o->rmem, &base)))
			die("mem_alloc (baseline)", rc);
		bp = mori_mem_ptr(base);
		if (o->rmem == MORI_MEM_HOST)
			memset(bp, 0x22, lsz);
	}
	if (gpu) {
		gbase_init(&gb, (uint64_t)(uintptr_t)(o->lmem == MORI_MEM_VRAM ? lp : bp));
		/* pinned, as libmori pins host regions that GPU copies touch */
		if (o->rmem == MORI_MEM_HOST)
			gk(gb.g->mem_host_register(bp, lsz, GPU_MEMHOSTREGISTER_PORTABLE), "cuMemHostRegister");
	}
	/* what the TCP baseline sends: the local region, or host bytes of the same size for VRAM */
	uint8_t *tsrc = lp, *tbuf = NULL;
	if (cross && o->lmem == MORI_MEM_VRAM) {
		if (!(tbuf = malloc(lsz)))
			die("malloc", MORI_ENOMEM);
		memset(tbuf, 0x11, lsz);
		tsrc = tbuf;
	}
	const char *opname = o->op == MORI_OP_READ ? "read" : "write";
	if (!o->json) {
		printf("# mori-bench io: %s, %s, batch %zu, iters %d (+%d warm-up), depth %d, region %llu MiB\n",
		       cross ? "cross node" : "same node", opname, o->batch, o->iters, o->warmup, o->depth,
		       (unsigned long long)(o->region >> 20));
		if (gpu) {
			const char *k = o->lmem == o->rmem ? "DtoD"
				      : (o->op == MORI_OP_WRITE) == (o->lmem == MORI_MEM_HOST) ? "HtoD" : "DtoH";
			printf("# memory: local %s, remote %s%s\n", mem_name(o->lmem), mem_name(o->rmem),
			       o->prep ? "; submitted as all indices of a prepared list" : "");
			printf("# baselines: ceil = one cuMemcpy%sAsync of the batch's bytes; blk = one cuMemcpy%sAsync per block\n",
			       k, k);
			printf("%10s %7s %12s %10s %10s %10s %10s %7s %10s %9s\n", "block", "batch", "bytes/iter", "GB/s",
			       "p50_us", "p99_us", "ceil_GB/s", "%ceil", "blk_GB/s", "x_blk");
		} else {
			printf("# baseline: %s\n", cross ? "plain TCP stream to the same host (one connection)" :
							  "memcpy of the same bytes (one thread)");
			if (vram)
				printf("# memory: local %s, remote %s (VRAM staged through the daemons' pinned buffers)\n",
				       mem_name(o->lmem), mem_name(o->rmem));
			printf("# working set: %s\n", o->no_rotate ? "the same batch window every iteration (--no-rotate)" :
			       "iterations rotate over up to 64 batch-sized windows of the region (mori and baseline alike)");
			printf("%10s %7s %12s %10s %10s %10s %12s %8s\n", "block", "batch", "bytes/iter", "GB/s",
			       "p50_us", "p99_us", "base_GB/s", "ratio");
		}
	} else {
		printf("{\"mode\": \"%s\", \"op\": \"%s\", \"rows\": [\n", cross ? "cross" : "same", opname);
	}
	int first = 1, bad = 0;
	mori_desc *d = malloc(sizeof(*d) * o->batch * MAX_WINDOWS);
	mori_xfer **inflight = calloc((size_t)o->depth, sizeof(*inflight));
	double *lat = malloc(sizeof(double) * (size_t)(o->iters + o->warmup));
	double *t_sub = malloc(sizeof(double) * (size_t)o->depth);
	uint32_t *all = NULL;
	if (o->prep) {
		all = malloc(sizeof(*all) * o->batch * MAX_WINDOWS);
		for (size_t i = 0; i < o->batch * MAX_WINDOWS; i++)
			all[i] = (uint32_t)i;
	}
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
		/* Host rows rotate through the region, one window of the batch's bytes per iteration,
		 * so that they measure memory rather than a cache-resident 64 MiB (VRAM rows keep one
		 * window: their baselines are measured that way). */
		uint64_t bpi = block * batch;
		int windows = gpu || o->no_rotate ? 1 : (int)(lsz / bpi < MAX_WINDOWS ? lsz / bpi : MAX_WINDOWS);
		if (windows < 1)
			windows = 1;
		for (int w = 0; w < windows; w++)
			for (size_t i = 0; i < batch; i++) {
				uint64_t off = (uint64_t)w * bpi + i * block;
				d[(size_t)w * batch + i] = (mori_desc){off, off, block};
			}
		mori_xfer_list *xl = NULL;
		if (o->prep && (rc = mori_xfer_prep(l, r, d, batch * (size_t)windows, &xl)))
			die("xfer_prep", rc);
#define SUBMIT(it, xp) (xl ? mori_xfer_submit(xl, o->op, all + (size_t)((it) % windows) * batch, batch, NULL, (xp)) \
			   : mori_xfer_batch(o->op, l, r, d + (size_t)((it) % windows) * batch, batch, NULL, (xp)))
		/* Warm every window once (first touches through a mapping cost a fault per page). */
		int warm = o->warmup > windows ? o->warmup : windows;
		for (int w = 0; w < warm; w++) {
			mori_xfer *x;
			if ((rc = SUBMIT(w, &x)) || (rc = mori_xfer_wait(x, 60000000)))
				die("warm-up transfer", rc);
			mori_xfer_free(x);
		}
		int nlat = 0, submitted = 0, done = 0;
		double t0 = now_s();
		while (done < o->iters) {
			while (submitted < o->iters && submitted - done < o->depth) {
				int slot = submitted % o->depth;
				t_sub[slot] = now_s();
				if ((rc = SUBMIT(submitted, &inflight[slot])))
					die(xl ? "xfer_submit" : "xfer_batch", rc);
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
#undef SUBMIT
		mori_xfer_list_free(xl);
		if (o->check && o->op == MORI_OP_READ && !region_check(c, l, o->lmem, batch * block))
			bad++;
		double base_gbps, blk_gbps = 0;
		if (gpu) {
			/* a write copies local -> remote, a read remote -> local */
			int wr = o->op == MORI_OP_WRITE;
			uint64_t la = (uint64_t)(uintptr_t)lp, ba = (uint64_t)(uintptr_t)bp;
			int dk = wr ? o->rmem : o->lmem, sk = wr ? o->lmem : o->rmem;
			uint64_t dst = wr ? ba : la, src = wr ? la : ba;
			base_gbps = gpu_ceiling_gbps(&gb, dk, dst, sk, src, block * batch, o->iters, o->depth);
			blk_gbps = gpu_perblock_gbps(&gb, dk, dst, sk, src, block, batch);
		} else {
			base_gbps = cross ? (tcp[0] ? tcp_gbps(tcp, tsrc, block * batch, o->iters) : -1)
					  : memcpy_gbps(bp, lp, block, batch, o->iters, windows);
		}
		double p50 = pct(lat, nlat, 50), p99 = pct(lat, nlat, 99);
		if (o->json && gpu) {
			printf("%s  {\"block\": %llu, \"batch\": %zu, \"bytes_per_iter\": %llu, \"gbps\": %.3f, "
			       "\"p50_us\": %.2f, \"p99_us\": %.2f, \"baseline_gbps\": %.3f, \"ceiling_gbps\": %.3f, "
			       "\"perblock_gbps\": %.3f}",
			       first ? "" : ",\n", (unsigned long long)block, batch,
			       (unsigned long long)(block * batch), gbps, p50, p99, base_gbps, base_gbps, blk_gbps);
		} else if (o->json) {
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
			if (gpu)
				printf("%10s %7zu %12llu %10.2f %10.2f %10.2f %10.2f %6.1f%% %10.3f %8.1fx\n", bs, batch,
				       (unsigned long long)(block * batch), gbps, p50, p99, base_gbps,
				       base_gbps > 0 ? 100 * gbps / base_gbps : 0, blk_gbps, blk_gbps > 0 ? gbps / blk_gbps : 0);
			else
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
	free(all);
	free(tbuf);
	if (gpu) {
		if (o->rmem == MORI_MEM_HOST)
			gb.g->mem_host_unregister(bp);
		gb.g->stream_destroy(gb.s);
	}
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
