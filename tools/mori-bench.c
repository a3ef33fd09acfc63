/* mori-bench: benchmarks of mori against baselines measured in the same run.
 *
 *   mori-bench io [options]          nixlbench-style loop over block sizes (same node, or cross node
 *                                    with --remote-runtime-dir / --node)
 *   mori-bench io-target [options]   the target side alone (for a target in another namespace)
 *   mori-bench kv [options]          UMBP, the KV-cache store (tools/bench_kv.c)
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
#define BATCH_MAX (1u << 20)   /* descriptors per batch: its windows' array is 1.5 GiB at most */

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

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "64K", "1M", "1G", or bytes; also for the subcommands (tools/bench_coll.c) */
uint64_t parse_size(const char *s)
{
	char *e;
	double v = strtod(s, &e);
	int bad = e == s; /* no number at all */
	switch (*e) {
	case 'k': case 'K': v *= 1024; e++; break;
	case 'm': case 'M': v *= 1024 * 1024; e++; break;
	case 'g': case 'G': v *= 1024.0 * 1024 * 1024; e++; break;
	case 't': case 'T': v *= 1024.0 * 1024 * 1024 * 1024; e++; break;
	default: break;
	}
	if (bad || *e || !(v >= 0 && v <= (double)(1ull << 48))) { /* also NaN; a negative double cast to uint64_t is undefined */
		fprintf(stderr, "mori-bench: size '%s' is not a number of bytes from 0 to 256T (suffixes K, M, G, T)\n", s);
		exit(2);
	}
	return (uint64_t)v;
}

static void die(const char *what, int rc)
{
	fprintf(stderr, "mori-bench: %s: %s (%s)\n", what, mori_strerror(rc), mori_client_last_error(NULL));
	exit(1);
}

/* A transfer that failed: its own reason (the client's last error is not about it). */
static void die_xfer(const char *what, mori_xfer *x, int rc)
{
	mori_status st;
	mori_xfer_status(x, &st);
	fprintf(stderr, "mori-bench: %s: %s (%s)\n", what, mori_strerror(rc), *st.message ? st.message : "no reason given");
	exit(1);
}

/* n * size bytes, or exit 1 naming what could not be had (no size reaches here unchecked, but a
 * machine may still lack the memory). */
static void *xcalloc(size_t n, size_t size, const char *what)
{
	void *p = n && size ? calloc(n, size) : NULL;
	if (!p && n && size) {
		fprintf(stderr, "mori-bench: out of memory for %s (%zu x %zu bytes)\n", what, n, size);
		exit(1);
	}
	return p;
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
	int rc = op == MORI_XFER_WRITE ? mori_xfer_write(s, 0, m, off, len, NULL, &x) : mori_xfer_read(s, 0, m, off, len, NULL, &x);
	if (rc)
		die("staging transfer", rc);
	if ((rc = mori_xfer_wait(x, 60000000)))
		die_xfer("staging transfer", x, rc);
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
		stage_move(s, m, off, n, MORI_XFER_WRITE);
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
		stage_move(s, m, off, n, MORI_XFER_READ);
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
	char host[160]; /* as long as the HOST:PORT it copies (struct io_run's tcp) */
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

static void usage_exit(int code)
{
	fprintf(code ? stderr : stdout, /* --help: the usage is the answer, on stdout, exit 0 */
		"usage: mori-bench io [--runtime-dir DIR] [--remote-runtime-dir DIR2 | --node HOST:PORT --name NAME --tcp HOST:PORT]\n"
		"                     [--op read|write] [--block-min 4K] [--block-max 64M] [--batch 256]\n"
		"                     [--iters 20] [--warmup 3] [--depth 1] [--region 1G] [--check] [--json]\n"
		"                     [--prep-descs 100000] [--prep] [--no-rotate]\n"
		"                     [--mem host|vram | --local-mem host|vram --remote-mem host|vram]\n"
		"                     [--trace FILE | --trace-off]\n"
		"       mori-bench io-target --runtime-dir DIR [--name NAME] [--region 1G]\n"
		"       mori-bench shmem [--nvshmem PATH/bench_nvshmem] [--reps 200] [--lat]   (tools/bench_shmem.c)\n"
		"       mori-bench shmem --proxy [--iters 2000] [--max 16M] [--only PHASES]   (the proxy path, no GPU: tools/bench_shmem_proxy.c)\n"
		"       mori-bench coll [--dir RUNTIME_DIR] [--pes \"2 4 8\"] [--max 1G] [--min 8] [--iters 40] [--only LABEL] [--nvshmem PATH] [--no-overlap]   (tools/bench_coll.c)\n"
		"       mori-bench ep [--dir RUNTIME_DIR] [--pes \"2 4 8\"] [--mode normal|ll|both] [--iters 30]   (tools/bench_ep.c)\n"
		"       mori-bench kv --sim TRACE|synthetic [--capacity 1000,10000,50000] [--policy NAME,...|all]\n"
		"                     (the KV store's eviction policies on a trace, offline: tools/bench_kv_sim.c)\n"
		"       mori-bench flood --node HOST:PORT [--runtime-dir DIR] [--conns 2000] [--seconds 10]   (tools/bench_flood.c)\n"
		"       mori-bench flood --lists N --node HOST:PORT --peer-dir DIR2 [--runtime-dir DIR] [--clients 8] [--descs 1048576]\n"
		"       mori-bench kv [--runtime-dir DIR] [--ssd-dir DIR] [--profile P [--record FILE] | --replay FILE]   (UMBP: tools/bench_kv.c; --help)\n"
		"Same node (default): a forked target process publishes a region on the same morid; baseline\n"
		"memcpy of the same bytes. Cross node: the target is on another morid; baseline a plain TCP\n"
		"stream between the same two hosts.\n"
		"--mem vram (or mixed kinds): regions in GPU memory (device $MORI_GPU_DEVICE,\n"
		"else 0); baselines one cuMemcpy*Async of the batch's bytes (ceiling) and one per block.\n"
		"--prep: each iteration submits all indices of a prepared list of the batch's descriptors.\n"
		"--trace FILE: GPU copies run the MORI-VIZ traced kernel into FILE (mori-viz FILE -o trace.json);\n"
		"--trace-off: the traced kernel with tracing off (what compiling the trace points in costs).\n");
	exit(code);
}

static void usage(void) { usage_exit(2); }

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
		else if (ARG("--op")) o->op = !strcmp(v, "read") ? MORI_XFER_READ : MORI_XFER_WRITE;
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
		else if (ARG("--trace")) setenv("MORI_VIZ_TRACE", v, 1); /* read by libmori (libclient/gpu_viz.c) */
		else if (!strcmp(a, "--trace-off")) setenv("MORI_VIZ_KERNEL", "1", 1);
		else if (!strcmp(a, "--prep")) o->prep = 1;
		else if (!strcmp(a, "--check")) o->check = 1;
		else if (!strcmp(a, "--no-rotate")) o->no_rotate = 1;
		else if (!strcmp(a, "--json")) o->json = 1;
		else usage();
#undef ARG
	}
	if (!o->block_min || o->block_max < o->block_min || !o->batch || o->iters < 1 || o->depth < 1)
		usage();
	if (o->block_min > o->region) { /* no row would fit: say so rather than print none and exit 0 */
		fprintf(stderr, "mori-bench: --block-min %llu is larger than --region %llu\n",
			(unsigned long long)o->block_min, (unsigned long long)o->region);
		exit(2);
	}
	/* bounds far past any useful run, so that the arrays sized by them (batch x 64 windows of
	 * descriptors, iters + warmup latencies) stay small enough to allocate */
	if (o->batch > BATCH_MAX || o->prep_descs > BATCH_MAX * MAX_WINDOWS || o->iters > 100000000 ||
	    o->warmup < 0 || o->warmup > 100000000 || o->depth > 4096) {
		fprintf(stderr, "mori-bench: --batch at most %u, --prep-descs %u, --iters and --warmup 0..100000000, "
				"--depth 1..4096\n", (unsigned)BATCH_MAX, (unsigned)(BATCH_MAX * MAX_WINDOWS));
		exit(2);
	}
}

/* One io run: the target, the regions and what the baselines and the rows work with. */
struct io_run {
	int cross; /* the target is on another morid */
	int vram;  /* VRAM on either side */
	int gpu;   /* VRAM on the same node: GPU baselines (cross node, VRAM is staged through the
		    * daemons and the baseline stays the TCP stream) */
	pid_t target; /* the forked target process, if any */
	char node[160], tcp[160];
	mori_client *c;
	mori_mem *l, *r, *base; /* local, remote, the baseline's copy of the remote side */
	uint64_t lsz;
	uint8_t *lp, *bp;
	struct gbase gb;
	uint8_t *tsrc, *tbuf; /* what the TCP baseline sends; tbuf: host bytes standing in for VRAM */
	mori_desc *d;         /* every window's descriptors */
	mori_xfer **inflight; /* o->depth slots */
	double *lat, *t_sub;
	uint32_t *all; /* --prep: the indices 0..batch*MAX_WINDOWS-1 */
	int first, bad;
};

/* One row: a block size, its batch and what was measured. */
struct io_row {
	uint64_t block;
	size_t batch;
	int windows;
	double gbps, p50, p99, base_gbps, blk_gbps;
};

/* The target: given by --node, else forked here on the remote (or the same) morid. */
static int io_start_target(const struct opts *o, struct io_run *io)
{
	if (o->node) {
		snprintf(io->node, sizeof(io->node), "%s", o->node);
		if (o->tcp)
			snprintf(io->tcp, sizeof(io->tcp), "%s", o->tcp);
		return 0;
	}
	int p[2];
	if (pipe(p) != 0)
		return 1;
	struct opts to = *o;
	to.rundir = o->remote_rundir ? o->remote_rundir : o->rundir;
	io->target = fork();
	if (io->target == 0) {
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
	sscanf(line, "READY node=%159s tcp=%159s", io->node, io->tcp);
	if (!io->cross)
		io->node[0] = 0;
	return 0;
}

/* The client, the local and remote regions, the baselines' buffers and the rows' scratch. */
static void io_open(const struct opts *o, struct io_run *io)
{
	int rc;
	if ((rc = mori_client_open(o->rundir, "bench", &io->c)))
		die("client_open", rc);
	io->lsz = o->region;
	if ((rc = mori_mem_alloc(io->c, io->lsz, o->lmem, &io->l)))
		die("mem_alloc", rc);
	io->lp = mori_mem_ptr(io->l);
	if (o->lmem == MORI_MEM_HOST)
		memset(io->lp, 0x11, io->lsz);
	if ((rc = mori_mem_open_remote(io->c, io->cross ? io->node : NULL, o->name, &io->r)))
		die("mem_open_remote", rc);
	if (!io->cross) {
		/* the baseline's copy of the remote side, of the same kind, in this process */
		if ((rc = mori_mem_alloc(io->c, io->lsz, o->rmem, &io->base)))
			die("mem_alloc (baseline)", rc);
		io->bp = mori_mem_ptr(io->base);
		if (o->rmem == MORI_MEM_HOST)
			memset(io->bp, 0x22, io->lsz);
	}
	if (io->gpu) {
		gbase_init(&io->gb, (uint64_t)(uintptr_t)(o->lmem == MORI_MEM_VRAM ? io->lp : io->bp));
		/* pinned, as libmori pins host regions that GPU copies touch */
		if (o->rmem == MORI_MEM_HOST)
			gk(io->gb.g->mem_host_register(io->bp, io->lsz, GPU_MEMHOSTREGISTER_PORTABLE),
			   "cuMemHostRegister");
	}
	/* what the TCP baseline sends: the local region, or host bytes of the same size for VRAM */
	io->tsrc = io->lp;
	if (io->cross && o->lmem == MORI_MEM_VRAM) {
		io->tbuf = xcalloc(1, io->lsz, "the TCP baseline's buffer");
		memset(io->tbuf, 0x11, io->lsz);
		io->tsrc = io->tbuf;
	}
	io->d = xcalloc(o->batch * MAX_WINDOWS, sizeof(*io->d), "the descriptors");
	io->inflight = xcalloc((size_t)o->depth, sizeof(*io->inflight), "the transfers in flight");
	io->lat = xcalloc((size_t)o->iters + (size_t)o->warmup, sizeof(double), "the latencies");
	io->t_sub = xcalloc((size_t)o->depth, sizeof(double), "the submission times");
	if (o->prep) {
		io->all = xcalloc(o->batch * MAX_WINDOWS, sizeof(*io->all), "the indices");
		for (size_t i = 0; i < o->batch * MAX_WINDOWS; i++)
			io->all[i] = (uint32_t)i;
	}
}

static void io_header(const struct opts *o, const struct io_run *io)
{
	const char *opname = o->op == MORI_XFER_READ ? "read" : "write";
	if (o->json) {
		printf("{\"mode\": \"%s\", \"op\": \"%s\", \"rows\": [\n", io->cross ? "cross" : "same", opname);
		return;
	}
	printf("# mori-bench io: %s, %s, batch %zu, iters %d (+%d warm-up), depth %d, region %llu MiB\n",
	       io->cross ? "cross node" : "same node", opname, o->batch, o->iters, o->warmup, o->depth,
	       (unsigned long long)(o->region >> 20));
	if (io->gpu) {
		const char *k = o->lmem == o->rmem ? "DtoD"
			      : (o->op == MORI_XFER_WRITE) == (o->lmem == MORI_MEM_HOST) ? "HtoD" : "DtoH";
		printf("# memory: local %s, remote %s%s\n", mem_name(o->lmem), mem_name(o->rmem),
		       o->prep ? "; submitted as all indices of a prepared list" : "");
		printf("# baselines: ceil = one cuMemcpy%sAsync of the batch's bytes; blk = one cuMemcpy%sAsync per block\n",
		       k, k);
		printf("%10s %7s %12s %10s %10s %10s %10s %7s %10s %9s\n", "block", "batch", "bytes/iter", "GB/s",
		       "p50_us", "p99_us", "ceil_GB/s", "%ceil", "blk_GB/s", "x_blk");
		return;
	}
	printf("# baseline: %s\n", io->cross ? "plain TCP stream to the same host (one connection)" :
						"memcpy of the same bytes (one thread)");
	if (io->vram)
		printf("# memory: local %s, remote %s (VRAM staged through the daemons' pinned buffers)\n",
		       mem_name(o->lmem), mem_name(o->rmem));
	printf("# working set: %s\n", o->no_rotate ? "the same batch window every iteration (--no-rotate)" :
	       "iterations rotate over up to 64 batch-sized windows of the region (mori and baseline alike)");
	printf("%10s %7s %12s %10s %10s %10s %12s %8s\n", "block", "batch", "bytes/iter", "GB/s",
	       "p50_us", "p99_us", "base_GB/s", "ratio");
}

/* The row's batch (smaller for large blocks; 0: the block does not fit the region) and its
 * windows' descriptors. Host rows rotate through the region, one window of the batch's bytes
 * per iteration, so that they measure memory rather than a cache-resident 64 MiB (VRAM rows
 * keep one window: their baselines are measured that way). */
static int row_plan(const struct opts *o, struct io_run *io, struct io_row *w)
{
	w->batch = o->batch;
	if (w->block * w->batch > MAX_TOTAL)
		w->batch = (size_t)(MAX_TOTAL / w->block);
	if (w->block * w->batch > io->lsz)
		w->batch = (size_t)(io->lsz / w->block);
	if (w->batch == 0)
		return -1;
	uint64_t bpi = w->block * w->batch;
	w->windows = io->gpu || o->no_rotate ? 1 : (int)(io->lsz / bpi < MAX_WINDOWS ? io->lsz / bpi : MAX_WINDOWS);
	if (w->windows < 1)
		w->windows = 1;
	for (int k = 0; k < w->windows; k++)
		for (size_t i = 0; i < w->batch; i++) {
			uint64_t off = (uint64_t)k * bpi + i * w->block;
			io->d[(size_t)k * w->batch + i] = (mori_desc){off, off, w->block};
		}
	return 0;
}

/* Iteration `it` moves window it % windows: by index into the prepared list xl, or as a batch. */
static int row_submit(const struct opts *o, const struct io_run *io, const struct io_row *w,
		      mori_xfer_list *xl, int it, mori_xfer **xp)
{
	size_t first = (size_t)(it % w->windows) * w->batch;
	if (xl)
		return mori_xfer_submit(xl, o->op, io->all + first, w->batch, NULL, xp);
	return mori_xfer_batch(o->op, io->l, io->r, io->d + first, w->batch, NULL, xp);
}

/* mori's rate and batch latencies: every window warmed, then o->iters batches, o->depth in
 * flight. */
static void row_measure(const struct opts *o, struct io_run *io, struct io_row *w)
{
	int rc;
	mori_xfer_list *xl = NULL;
	if (o->prep && (rc = mori_xfer_prep(io->l, io->r, io->d, w->batch * (size_t)w->windows, &xl)))
		die("xfer_prep", rc);
	/* Warm every window once (first touches through a mapping cost a fault per page). */
	int warm = o->warmup > w->windows ? o->warmup : w->windows;
	for (int k = 0; k < warm; k++) {
		mori_xfer *x;
		if ((rc = row_submit(o, io, w, xl, k, &x)))
			die("warm-up transfer", rc);
		if ((rc = mori_xfer_wait(x, 60000000)))
			die_xfer("warm-up transfer", x, rc);
		mori_xfer_free(x);
	}
	int nlat = 0, submitted = 0, done = 0;
	double t0 = now_s();
	while (done < o->iters) {
		while (submitted < o->iters && submitted - done < o->depth) {
			int slot = submitted % o->depth;
			io->t_sub[slot] = now_s();
			if ((rc = row_submit(o, io, w, xl, submitted, &io->inflight[slot])))
				die(xl ? "xfer_submit" : "xfer_batch", rc);
			submitted++;
		}
		int slot = done % o->depth;
		if ((rc = mori_xfer_wait(io->inflight[slot], 60000000)))
			die_xfer("xfer_wait", io->inflight[slot], rc);
		io->lat[nlat++] = (now_s() - io->t_sub[slot]) * 1e6;
		mori_xfer_free(io->inflight[slot]);
		done++;
	}
	double dt = now_s() - t0;
	w->gbps = (double)w->block * (double)w->batch * o->iters / dt / 1e9;
	mori_xfer_list_free(xl);
	w->p50 = pct(io->lat, nlat, 50);
	w->p99 = pct(io->lat, nlat, 99);
}

/* The row's baselines: the GPU's ceiling and per-block copies, a TCP stream, or memcpy. */
static void row_baselines(const struct opts *o, const struct io_run *io, struct io_row *w)
{
	w->blk_gbps = 0;
	if (io->gpu) {
		/* a write copies local -> remote, a read remote -> local */
		int wr = o->op == MORI_XFER_WRITE;
		uint64_t la = (uint64_t)(uintptr_t)io->lp, ba = (uint64_t)(uintptr_t)io->bp;
		int dk = wr ? o->rmem : o->lmem, sk = wr ? o->lmem : o->rmem;
		uint64_t dst = wr ? ba : la, src = wr ? la : ba;
		w->base_gbps = gpu_ceiling_gbps(&io->gb, dk, dst, sk, src, w->block * w->batch, o->iters, o->depth);
		w->blk_gbps = gpu_perblock_gbps(&io->gb, dk, dst, sk, src, w->block, w->batch);
	} else {
		w->base_gbps = io->cross ? (io->tcp[0] ? tcp_gbps(io->tcp, io->tsrc, w->block * w->batch, o->iters) : -1)
					 : memcpy_gbps(io->bp, io->lp, w->block, w->batch, o->iters, w->windows);
	}
}

static void row_print(const struct opts *o, struct io_run *io, const struct io_row *w)
{
	unsigned long long block = (unsigned long long)w->block, bytes = block * w->batch;
	if (o->json && io->gpu) {
		printf("%s  {\"block\": %llu, \"batch\": %zu, \"bytes_per_iter\": %llu, \"gbps\": %.3f, "
		       "\"p50_us\": %.2f, \"p99_us\": %.2f, \"baseline_gbps\": %.3f, \"ceiling_gbps\": %.3f, "
		       "\"perblock_gbps\": %.3f}",
		       io->first ? "" : ",\n", block, w->batch, bytes, w->gbps, w->p50, w->p99, w->base_gbps,
		       w->base_gbps, w->blk_gbps);
	} else if (o->json) {
		printf("%s  {\"block\": %llu, \"batch\": %zu, \"bytes_per_iter\": %llu, \"gbps\": %.3f, "
		       "\"p50_us\": %.1f, \"p99_us\": %.1f, \"baseline_gbps\": %.3f}",
		       io->first ? "" : ",\n", block, w->batch, bytes, w->gbps, w->p50, w->p99, w->base_gbps);
	} else {
		char bs[32];
		if (block >= (1u << 20))
			snprintf(bs, sizeof(bs), "%lluM", block >> 20);
		else if (block >= 1024)
			snprintf(bs, sizeof(bs), "%lluK", block >> 10);
		else
			snprintf(bs, sizeof(bs), "%llu", block);
		double ratio = w->base_gbps > 0 ? 100 * w->gbps / w->base_gbps : 0;
		if (io->gpu)
			printf("%10s %7zu %12llu %10.2f %10.2f %10.2f %10.2f %6.1f%% %10.3f %8.1fx\n", bs, w->batch,
			       bytes, w->gbps, w->p50, w->p99, w->base_gbps, ratio, w->blk_gbps,
			       w->blk_gbps > 0 ? w->gbps / w->blk_gbps : 0);
		else
			printf("%10s %7zu %12llu %10.2f %10.1f %10.1f %12.2f %7.0f%%\n", bs, w->batch, bytes, w->gbps,
			       w->p50, w->p99, w->base_gbps, ratio);
	}
	fflush(stdout);
	io->first = 0;
}

/* A prepared list of many descriptors, submitted by index: how long until the daemon has the
 * submission (cross node), or until it is done (same node: the copy runs here). */
static void io_prep_list(const struct opts *o, const struct io_run *io)
{
	int rc;
	size_t n = o->prep_descs;
	uint64_t blk = o->region / n >= 4096 ? 4096 : (o->region / n ? o->region / n : 1);
	mori_desc *pd = xcalloc(n, sizeof(*pd), "the prepared descriptors");
	uint32_t *idx = xcalloc(n, sizeof(*idx), "the prepared indices");
	for (size_t i = 0; i < n; i++) {
		pd[i] = (mori_desc){i * blk, i * blk, blk};
		idx[i] = (uint32_t)i;
	}
	mori_xfer_list *xl;
	mori_xfer *x;
	if ((rc = mori_xfer_prep(io->l, io->r, pd, n, &xl)))
		die("xfer_prep", rc);
	double best = 1e9, best_done = 1e9;
	for (int rep = 0; rep < 5; rep++) {
		double t = now_s();
		if ((rc = mori_xfer_submit(xl, o->op, idx, n, NULL, &x)))
			die("xfer_submit", rc);
		while (mori_client_sq_pending(io->c) > 0 && now_s() - t < 5) {
		}
		double reached = now_s() - t;
		if ((rc = mori_xfer_wait(x, 60000000)))
			die_xfer("xfer_wait (prepared list)", x, rc);
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
		       n, (unsigned long long)blk, io->cross ? "reached the daemon" : "returned (same node: copy done in-process)",
		       best * 1e3, best_done * 1e3);
	mori_xfer_list_free(xl);
	free(pd);
	free(idx);
}

/* Release what io_open took, then stop the target. */
static void io_close(const struct opts *o, struct io_run *io)
{
	free(io->d);
	free(io->inflight);
	free(io->lat);
	free(io->t_sub);
	free(io->all);
	free(io->tbuf);
	if (io->gpu) {
		if (o->rmem == MORI_MEM_HOST)
			io->gb.g->mem_host_unregister(io->bp);
		io->gb.g->stream_destroy(io->gb.s);
	}
	mori_mem_deregister(io->r);
	mori_mem_deregister(io->l);
	if (io->base)
		mori_mem_deregister(io->base);
	mori_client_close(io->c);
	if (io->target > 0) {
		kill(io->target, SIGTERM);
		waitpid(io->target, NULL, 0);
	}
}

static int run_io(struct opts *o)
{
	struct io_run io = {.first = 1};
	io.cross = o->remote_rundir || o->node;
	io.vram = o->lmem == MORI_MEM_VRAM || o->rmem == MORI_MEM_VRAM;
	io.gpu = io.vram && !io.cross;
	if (io_start_target(o, &io))
		return 1;
	io_open(o, &io);
	io_header(o, &io);
	for (uint64_t block = o->block_min; block <= o->block_max; block *= 2) {
		struct io_row w = {.block = block};
		if (row_plan(o, &io, &w)) {
			fprintf(stderr, "mori-bench: block %llu larger than the region; stopping\n", (unsigned long long)block);
			break;
		}
		row_measure(o, &io, &w);
		if (o->check && o->op == MORI_XFER_READ && !region_check(io.c, io.l, o->lmem, w.batch * block))
			io.bad++;
		row_baselines(o, &io, &w);
		row_print(o, &io, &w);
	}
	if (o->prep_descs)
		io_prep_list(o, &io);
	if (o->json)
		printf("\n], \"check_failures\": %d}\n", io.bad);
	else if (o->check)
		printf("# check: %s\n", io.bad ? "FAILED" : "read contents verified");
	io_close(o, &io);
	return io.bad ? 1 : 0;
}

int bench_shmem_main(int argc, char **argv);
int bench_ep_main(int argc, char **argv);
int bench_coll_main(int argc, char **argv);
int bench_kv_sim_main(int argc, char **argv);
int bench_flood_main(int argc, char **argv);
int bench_kv_main(int argc, char **argv);

int main(int argc, char **argv)
{
	struct opts o = {
		.name = "bench/target", .block_min = 4096, .block_max = 64ull << 20, .batch = 256,
		.iters = 20, .warmup = 3, .depth = 1, .op = MORI_XFER_WRITE, .region = 1ull << 30,
	};
	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
		usage_exit(0);
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(argv[1], "io")) {
		parse(argc, argv, &o);
		return run_io(&o);
	}
	if (!strcmp(argv[1], "shmem"))
		return bench_shmem_main(argc, argv); /* tools/bench_shmem.c */
	if (!strcmp(argv[1], "ep"))
		return bench_ep_main(argc, argv); /* tools/bench_ep.c */
	if (!strcmp(argv[1], "coll"))
		return bench_coll_main(argc, argv); /* tools/bench_coll.c */
	if (!strcmp(argv[1], "kv") && argc > 2 && !strcmp(argv[2], "--sim"))
		return bench_kv_sim_main(argc, argv); /* tools/bench_kv_sim.c */
	if (!strcmp(argv[1], "flood"))
		return bench_flood_main(argc, argv); /* tools/bench_flood.c */
	if (!strcmp(argv[1], "kv"))
		return bench_kv_main(argc, argv); /* tools/bench_kv.c */
	if (!strcmp(argv[1], "io-target")) {
		parse(argc, argv, &o);
		target_main(&o, 1);
		return 0;
	}
	usage();
	return 2;
}
