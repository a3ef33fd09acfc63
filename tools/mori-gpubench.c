/* mori-gpubench: VRAM copy figures on one GPU, all in one run so the ratios are fair.
 *
 *   mori-gpubench [--block BYTES] [--count N] [--iters N] [--lat-iters N] [--device N]
 *                 [--runtime-dir DIR]
 *
 * Moves count blocks of `block` bytes (default 16 KiB x 65 536 = 1 GiB) from random places in
 * one device buffer to consecutive places in another (a gather), and prints:
 *   ceiling     one cuMemcpyDtoDAsync of the same total bytes
 *   kernel      the batched copy kernel, descriptors already on the device
 *   gpu_xfer    libmori's GPU path below the daemon: staging, upload, launch, event polled
 *   per-block   one cuMemcpyDtoDAsync per block (what UCX cuda_ipc and most engines do)
 * then the kernel-only time of a one-descriptor 4 KiB copy (events) and its end-to-end time
 * through gpu_xfer (host clock, submit to completion seen). With --runtime-dir (a running
 * morid), a second process registers VRAM and publishes it, and this one measures the same
 * through the public API: mori_xfer_batch GB/s and mori_write 4 KiB latency.
 * Exit 77 with "skipped: ..." where there is no GPU or no kernel. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../kernels/mori_copy.h"
#include "../libclient/gpu_int.h"
#include "../libclient/internal.h"

static const struct gpu_api *g;

#define CK(call)                                                                               \
	do {                                                                                   \
		int r_ = (call);                                                               \
		if (r_) {                                                                      \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, gpu_strerror(r_)); \
			exit(1);                                                               \
		}                                                                              \
	} while (0)
#define MK(call)                                                                               \
	do {                                                                                   \
		int r_ = (call);                                                               \
		if (r_) {                                                                      \
			fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, mori_strerror(r_), \
				mori_client_last_error(NULL));                                 \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}
static double pct(double *v, int n, double p)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	int i = (int)(p * (n - 1) + 0.5);
	return v[i];
}

static uint64_t rng = 88172645463325252ull;
static uint64_t xs(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* ---- the peer process of --runtime-dir mode ---- */
static int peer_main(const char *dir, uint64_t bytes, int dev)
{
	mori_client *c;
	MK(mori_client_open(dir, "gpubench-peer", &c));
	const struct gpu_api *pg = gpu_api();
	gpu_device d;
	gpu_context ctx;
	CK(pg->device_get(&d, dev));
	CK(pg->primary_ctx_retain(&ctx, d));
	CK(pg->ctx_push_current(ctx));
	gpu_dptr p;
	CK(pg->mem_alloc(&p, bytes));
	mori_mem *m;
	MK(mori_mem_register(c, (void *)(uintptr_t)p, bytes, MORI_MEM_VRAM, &m));
	MK(mori_mem_publish(m, "gpubench/peer"));
	printf("ready\n");
	fflush(stdout);
	char b[16];
	while (read(0, b, sizeof(b)) > 0)
		;
	mori_mem_deregister(m);
	mori_client_close(c);
	return 0;
}

static void lib_mode(const char *dir, uint64_t block, uint64_t count, int iters, int lat_iters, int dev,
		     gpu_dptr src, const mori_desc *descs, double ceiling)
{
	uint64_t total = block * count;
	int to_peer[2], from_peer[2];
	if (pipe(to_peer) || pipe(from_peer))
		exit(1);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(to_peer[0], 0);
		dup2(from_peer[1], 1);
		close(to_peer[1]);
		close(from_peer[0]);
		char b[32], dv[16];
		snprintf(b, sizeof(b), "%" PRIu64, total);
		snprintf(dv, sizeof(dv), "%d", dev);
		execl("/proc/self/exe", "mori-gpubench", "--peer", dir, b, dv, (char *)NULL);
		_exit(127);
	}
	close(to_peer[0]);
	close(from_peer[1]);
	char line[32] = "";
	FILE *f = fdopen(from_peer[0], "r");
	if (!f || !fgets(line, sizeof(line), f) || strncmp(line, "ready", 5)) {
		fprintf(stderr, "gpubench: peer did not start\n");
		exit(1);
	}
	mori_client *c;
	MK(mori_client_open(dir, "gpubench", &c));
	mori_mem *l, *r;
	MK(mori_mem_register(c, (void *)(uintptr_t)src, total, MORI_MEM_VRAM, &l));
	MK(mori_mem_open_remote(c, NULL, "gpubench/peer", &r));
	double *t = calloc((size_t)(iters > lat_iters ? iters : lat_iters), sizeof(double));
	for (int i = -1; i < iters; i++) { /* -1: warm-up */
		mori_xfer *x;
		double t0 = now_us();
		MK(mori_xfer_batch(MORI_OP_WRITE, l, r, descs, count, NULL, &x));
		MK(mori_xfer_wait(x, 10000000));
		double t1 = now_us();
		mori_xfer_free(x);
		if (i >= 0)
			t[i] = t1 - t0;
	}
	double med = pct(t, iters, 0.5);
	printf("%-34s %10.1f us %9.1f GB/s  %5.1f%% of ceiling\n", "library mori_xfer_batch (2 procs)", med,
	       total / med / 1e3, 100.0 * (total / med / 1e3) / ceiling);
	for (int i = -10; i < lat_iters; i++) {
		mori_xfer *x;
		double t0 = now_us();
		MK(mori_write(l, 0, r, 0, 4096, NULL, &x));
		MK(mori_xfer_wait(x, 1000000));
		double t1 = now_us();
		mori_xfer_free(x);
		if (i >= 0)
			t[i] = t1 - t0;
	}
	double p50 = pct(t, lat_iters, 0.5), p99 = pct(t, lat_iters, 0.99);
	printf("%-34s p50 %6.2f us  p99 %6.2f us\n", "library mori_write 4 KiB e2e", p50, p99);
	free(t);
	mori_mem_deregister(r);
	mori_mem_deregister(l);
	mori_client_close(c);
	close(to_peer[1]);
	int st;
	waitpid(pid, &st, 0);
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "--peer") == 0)
		return peer_main(argv[2], strtoull(argv[3], NULL, 0), atoi(argv[4]));
	uint64_t block = 16384, count = 65536;
	int iters = 10, lat_iters = 2000, dev = 0;
	const char *dir = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v) {
			fprintf(stderr, "usage: mori-gpubench [--block B] [--count N] [--iters N] [--lat-iters N] "
					"[--device N] [--runtime-dir DIR]\n");
			return 2;
		}
		if (!strcmp(a, "--block"))
			block = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--count"))
			count = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--iters"))
			iters = atoi(v);
		else if (!strcmp(a, "--lat-iters"))
			lat_iters = atoi(v);
		else if (!strcmp(a, "--device"))
			dev = atoi(v);
		else if (!strcmp(a, "--runtime-dir"))
			dir = v;
		else {
			fprintf(stderr, "mori-gpubench: unknown option %s\n", a);
			return 2;
		}
		i++;
	}
	if (!block || !count || iters < 1 || lat_iters < 1 || count > (1u << 24)) {
		fprintf(stderr, "mori-gpubench: bad sizes\n");
		return 2;
	}
	if (!(g = gpu_api())) {
		printf("skipped: no GPU (%s)\n", gpu_unavailable_reason());
		return 77;
	}
	static mori_client c; /* only its GPU state is used below the daemon */
	struct gpu_ctx *x;
	struct gpu_dev *d;
	gpu_function fn;
	int sm;
	MK(gpu_ctx_get(&c, &x));
	MK(gpu_dev_get(&c, x, dev, &d));
	int rc = gpu_copy_kernel(&c, dev, &fn, &sm);
	if (rc == MORI_ENOKERNEL) {
		printf("skipped: %s\n", mori_client_last_error(NULL));
		return 77;
	}
	MK(rc);
	char desc[256];
	gpu_describe(desc, sizeof(desc));
	uint64_t total = block * count;
	printf("mori-gpubench: %s; %d SMs\n", desc, sm);
	printf("gather of %" PRIu64 " blocks x %" PRIu64 " B = %.3f GiB, device to device, same GPU; median of %d\n",
	       count, block, total / 1073741824.0, iters);
	CK(gpu_push(g, d));

	gpu_dptr src, dst;
	CK(g->mem_alloc(&src, total));
	CK(g->mem_alloc(&dst, total));
	gpu_stream s;
	gpu_event e0, e1;
	CK(g->stream_create(&s, GPU_STREAM_NON_BLOCKING));
	CK(g->event_create(&e0, 0));
	CK(g->event_create(&e1, 0));
	/* random source bytes: never time or test on zeros */
	uint64_t chunk = 64u << 20;
	uint64_t *h = malloc(chunk);
	for (uint64_t off = 0; off < total; off += chunk) {
		uint64_t n = total - off < chunk ? total - off : chunk;
		for (uint64_t i = 0; i < (n + 7) / 8; i++)
			h[i] = xs();
		CK(g->memcpy_htod_async(src + off, h, n, s));
		CK(g->stream_synchronize(s));
	}
	free(h);
	/* gather pattern: block i comes from a random permutation slot */
	mori_desc *descs = malloc(count * sizeof(*descs));
	uint32_t *perm = malloc(count * sizeof(*perm));
	for (uint64_t i = 0; i < count; i++)
		perm[i] = (uint32_t)i;
	for (uint64_t i = count - 1; i > 0; i--) {
		uint64_t j = xs() % (i + 1);
		uint32_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	for (uint64_t i = 0; i < count; i++)
		descs[i] = (mori_desc){perm[i] * block, i * block, block};
	double *t = calloc((size_t)(iters > lat_iters ? iters : lat_iters), sizeof(double));
	float ms;

	/* ceiling */
	for (int i = -1; i < iters; i++) {
		CK(g->event_record(e0, s));
		CK(g->memcpy_dtod_async(dst, src, total, s));
		CK(g->event_record(e1, s));
		CK(g->event_synchronize(e1));
		CK(g->event_elapsed_time(&ms, e0, e1));
		if (i >= 0)
			t[i] = ms * 1e3;
	}
	double ceil_us = pct(t, iters, 0.5), ceiling = total / ceil_us / 1e3;
	printf("%-34s %10.1f us %9.1f GB/s\n", "ceiling: one cuMemcpyDtoDAsync", ceil_us, ceiling);

	/* kernel, descriptors resident */
	struct mori_copy_args a;
	memset(&a, 0, sizeof(a));
	a.a_base = src;
	a.b_base = dst;
	a.chunk_shift = gpu_copy_chunk_shift(total, sm);
	uint64_t per = (block + (1ull << a.chunk_shift) - 1) >> a.chunk_shift;
	gpu_dptr ddesc;
	CK(g->mem_alloc(&ddesc, count * sizeof(*descs)));
	CK(g->memcpy_htod_async(ddesc, descs, count * sizeof(*descs), s));
	CK(g->stream_synchronize(s));
	a.uniform = (uint32_t)per; /* one block size: chunk c is in descriptor c / per */
	a.descs = ddesc;
	a.n = (uint32_t)count;
	a.total_chunks = count * per;
	void *params[] = {&a};
	unsigned grid = gpu_copy_grid(a.total_chunks, sm);
	CK(g->memset_d8_async(dst, 0xa5, total, s));
	for (int i = -1; i < iters; i++) {
		CK(g->event_record(e0, s));
		CK(g->launch_kernel(fn, grid, 1, 1, MORI_COPY_BLOCK_THREADS, 1, 1, 0, s, params, NULL));
		CK(g->event_record(e1, s));
		CK(g->event_synchronize(e1));
		CK(g->event_elapsed_time(&ms, e0, e1));
		if (i >= 0)
			t[i] = ms * 1e3;
	}
	double k_us = pct(t, iters, 0.5), kbw = total / k_us / 1e3;
	/* verify a sample of blocks against the source (the tests verify every byte) */
	uint8_t *hs = malloc(block), *hd = malloc(block);
	int bad = 0;
	for (int k = 0; k < 256; k++) {
		uint64_t i = xs() % count;
		CK(g->memcpy_dtoh_async(hs, src + descs[i].local_offset, block, s));
		CK(g->memcpy_dtoh_async(hd, dst + descs[i].remote_offset, block, s));
		CK(g->stream_synchronize(s));
		bad += memcmp(hs, hd, block) != 0;
	}
	printf("%-34s %10.1f us %9.1f GB/s  %5.1f%% of ceiling  (grid %u x %d, chunk %u B)%s\n",
	       "kernel (descriptors on device)", k_us, kbw, 100 * kbw / ceiling, grid, MORI_COPY_BLOCK_THREADS,
	       1u << a.chunk_shift, bad ? "  VERIFY FAILED" : "");

	/* gpu_xfer: the library's path under the daemon */
	mori_mem L = {.c = &c, .local = 1, .kind = MORI_MEM_VRAM, .size = total, .dptr = src, .gpu_device = dev};
	mori_mem R = {.c = &c, .kind = MORI_MEM_VRAM, .size = total, .dptr = dst, .gpu_device = dev};
	double *sub = calloc((size_t)iters, sizeof(double));
	for (int i = -1; i < iters; i++) {
		struct mori_xfer xf = {.c = &c};
		xf.deadline_us = mori_now_us() + 10000000;
		double t0 = now_us();
		MK(gpu_xfer(&c, MORI_OP_WRITE, &L, &R, descs, count, NULL, &xf));
		double ts = now_us();
		while ((rc = gpu_xfer_poll(&xf)) == MORI_EINPROGRESS)
			;
		double t1 = now_us();
		MK(rc);
		if (i >= 0) {
			t[i] = t1 - t0;
			sub[i] = ts - t0;
		}
	}
	double x_us = pct(t, iters, 0.5), xbw = total / x_us / 1e3;
	printf("%-34s %10.1f us %9.1f GB/s  %5.1f%% of ceiling  (submit returns after %.1f us)\n",
	       "gpu_xfer batch (descs staged)", x_us, xbw, 100 * xbw / ceiling, pct(sub, iters, 0.5));

	/* a prepared list: descriptors uploaded once, each submission stages 4-byte indices */
	struct mori_xfer_list lst = {.local = &L, .remote = &R, .descs = descs, .n = count};
	MK(gpu_list_prep(&c, &lst));
	uint32_t *ident = malloc(count * sizeof(*ident));
	for (uint64_t i = 0; i < count; i++)
		ident[i] = (uint32_t)i;
	const char *lname[2] = {"gpu_xfer_list (all, in order)", "gpu_xfer_list (all, shuffled)"};
	for (int pass = 0; pass < 2; pass++) {
		const uint32_t *ix = pass ? perm : ident;
		CK(g->memset_d8_async(dst, 0x5a, total, s));
		CK(g->stream_synchronize(s));
		for (int i = -1; i < iters; i++) {
			struct mori_xfer xf = {.c = &c};
			xf.deadline_us = mori_now_us() + 10000000;
			double t0 = now_us();
			MK(gpu_xfer_list(&c, MORI_OP_WRITE, &lst, ix, count, NULL, &xf));
			double ts = now_us();
			while ((rc = gpu_xfer_poll(&xf)) == MORI_EINPROGRESS)
				;
			double t1 = now_us();
			MK(rc);
			if (i >= 0) {
				t[i] = t1 - t0;
				sub[i] = ts - t0;
			}
		}
		int lbad = 0;
		for (int k = 0; k < 64; k++) {
			uint64_t i = xs() % count;
			CK(g->memcpy_dtoh_async(hs, src + descs[i].local_offset, block, s));
			CK(g->memcpy_dtoh_async(hd, dst + descs[i].remote_offset, block, s));
			CK(g->stream_synchronize(s));
			lbad += memcmp(hs, hd, block) != 0;
		}
		bad += lbad;
		double l_us = pct(t, iters, 0.5), lbw = total / l_us / 1e3;
		printf("%-34s %10.1f us %9.1f GB/s  %5.1f%% of ceiling  (submit returns after %.1f us)%s\n", lname[pass], l_us,
		       lbw, 100 * lbw / ceiling, pct(sub, iters, 0.5), lbad ? "  VERIFY FAILED" : "");
	}
	gpu_list_free(&c, &lst);
	free(ident);
	free(sub);

	/* one copy per block */
	int per_iters = iters < 3 ? iters : 3;
	for (int i = 0; i < per_iters; i++) {
		CK(g->event_record(e0, s));
		for (uint64_t b = 0; b < count; b++)
			CK(g->memcpy_dtod_async(dst + descs[b].remote_offset, src + descs[b].local_offset, block, s));
		CK(g->event_record(e1, s));
		CK(g->event_synchronize(e1));
		CK(g->event_elapsed_time(&ms, e0, e1));
		t[i] = ms * 1e3;
	}
	double p_us = pct(t, per_iters, 0.5), pbw = total / p_us / 1e3;
	printf("%-34s %10.1f us %9.1f GB/s  kernel is %.0fx faster\n", "per-block cuMemcpyDtoDAsync", p_us, pbw,
	       kbw / pbw);

	/* one 4 KiB descriptor: kernel only (events), then through gpu_xfer (host clock) */
	struct mori_copy_args one;
	memset(&one, 0, sizeof(one));
	one.a_base = src;
	one.b_base = dst;
	one.n = 1;
	one.chunk_shift = gpu_copy_chunk_shift(4096, sm);
	one.inl[0] = (struct mori_copy_desc){0, 0, 4096};
	one.inl_first[1] = (uint32_t)((4096 + (1u << one.chunk_shift) - 1) >> one.chunk_shift);
	one.total_chunks = one.inl_first[1];
	void *p1[] = {&one};
	unsigned g1 = gpu_copy_grid(one.total_chunks, sm);
	for (int i = -10; i < lat_iters; i++) {
		CK(g->event_record(e0, s));
		CK(g->launch_kernel(fn, g1, 1, 1, MORI_COPY_BLOCK_THREADS, 1, 1, 0, s, p1, NULL));
		CK(g->event_record(e1, s));
		CK(g->event_synchronize(e1));
		CK(g->event_elapsed_time(&ms, e0, e1));
		if (i >= 0)
			t[i] = ms * 1e3;
	}
	printf("%-34s p50 %6.2f us  p99 %6.2f us  (%llu warps)\n", "kernel only, 1 x 4 KiB (events)",
	       pct(t, lat_iters, 0.5), pct(t, lat_iters, 0.99), (unsigned long long)one.total_chunks);
	mori_desc d4 = {0, 0, 4096};
	for (int i = -10; i < lat_iters; i++) {
		struct mori_xfer xf = {.c = &c};
		xf.deadline_us = mori_now_us() + 1000000;
		double t0 = now_us();
		MK(gpu_xfer(&c, MORI_OP_WRITE, &L, &R, &d4, 1, NULL, &xf));
		while ((rc = gpu_xfer_poll(&xf)) == MORI_EINPROGRESS)
			;
		double t1 = now_us();
		MK(rc);
		if (i >= 0)
			t[i] = t1 - t0;
	}
	printf("%-34s p50 %6.2f us  p99 %6.2f us\n", "gpu_xfer 1 x 4 KiB submit->done", pct(t, lat_iters, 0.5),
	       pct(t, lat_iters, 0.99));
	free(t);
	gpu_pop(g);
	if (dir)
		lib_mode(dir, block, count, iters, lat_iters, dev, src, descs, ceiling);
	CK(gpu_push(g, d));
	g->mem_free(ddesc);
	g->mem_free(src);
	g->mem_free(dst);
	gpu_pop(g);
	gpu_ctx_free(&c);
	free(descs);
	free(perm);
	free(hs);
	free(hd);
	return bad ? 1 : 0;
}
