/* mori-bench kv: UMBP, the node's KV-cache store (include/mori_umbp.h), against baselines measured
 * in the same run.
 *
 *   bw       put and get GB/s per value size (single calls and batches) on the DRAM tier, beside
 *            memcpy of the same bytes in this process
 *   ssd      with --ssd-dir (morid's kv_ssd_dir): puts while DRAM is full (every put spills to
 *            SSD) and gets of the spilled values, beside raw O_DIRECT sequential writes and reads
 *            of the same bytes in that directory
 *   clients  small-value put/get ops/s and p50/p99 latency with 1, 8 and 64 clients (threads,
 *            each with its own client of morid), beside exists() (a round trip that moves no
 *            value) and memcpy of the value
 *   --profile / --replay: the tier profiles and their traces (tools/bench_kv_trace.c)
 *   --sim: the eviction-policy simulator (tools/bench_kv_sim.c)
 *
 * The keys it puts are its own ("mori-bench/..."), removed at the end of each row; the store's
 * other keys stay, though rows that fill DRAM evict them like any other values.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_kv.h"

int bench_kv_sim_main(int argc, char **argv); /* tools/bench_kv_sim.c */

#define KEYLEN 96

void kv_die(const char *what, int rc)
{
	const char *m = mori_client_last_error(NULL);
	fprintf(stderr, "mori-bench kv: %s: %s%s%s\n", what, mori_strerror(rc), m && *m ? ": " : "", m ? m : "");
	exit(1);
}

void *kv_alloc(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, n ? n : 1)) {
		fprintf(stderr, "mori-bench kv: out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

mori_umbp *kv_open(const char *rundir, const char *name, mori_client **c)
{
	mori_umbp *u;
	mori_umbp_opts o;
	int rc = mori_client_open(rundir, name, c);
	if (rc)
		kv_die("connect to morid", rc);
	mori_umbp_opts_init(&o, sizeof(o));
	if ((rc = mori_umbp_open(*c, &o, &u)))
		kv_die("open the UMBP store", rc);
	return u;
}

void kv_close(mori_umbp *u, mori_client *c)
{
	mori_umbp_close(u);
	mori_client_close(c);
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

void kv_fill(uint8_t *dst, size_t len, const char *key, size_t key_len, uint64_t seed)
{
	uint64_t x = 0xcbf29ce484222325ull; /* FNV-1a of the key, then the seed */
	for (size_t i = 0; i < key_len; i++)
		x = (x ^ (uint8_t)key[i]) * 0x100000001b3ull;
	x ^= seed * 0xD6E8FEB86659FD93ull;
	size_t i = 0;
	for (; i + 8 <= len; i += 8) {
		uint64_t v = splitmix(&x);
		memcpy(dst + i, &v, 8);
	}
	if (i < len) {
		uint64_t v = splitmix(&x);
		memcpy(dst + i, &v, len - i);
	}
}

double kv_memcpy_gbps(uint8_t *dst, const uint8_t *src, size_t len, uint64_t total)
{
	uint64_t reps = total / len ? total / len : 1;
	memcpy(dst, src, len); /* fault the pages in */
	double t0 = now_s();
	for (uint64_t r = 0; r < reps; r++) {
		memcpy(dst, src, len);
		__asm__ volatile("" ::: "memory");
	}
	return (double)len * (double)reps / (now_s() - t0) / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double kv_pct(double *v, size_t n, double p)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_d);
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

static const char *hsize(uint64_t b, char *buf)
{
	if (b >= (1ull << 20) && !(b % (1ull << 20)))
		sprintf(buf, "%lluM", (unsigned long long)(b >> 20));
	else if (b >= 1024 && !(b % 1024))
		sprintf(buf, "%lluK", (unsigned long long)(b >> 10));
	else
		sprintf(buf, "%llu", (unsigned long long)b);
	return buf;
}

static void row_keys(char (*keys)[KEYLEN], size_t n, const char *what, uint64_t size)
{
	for (size_t i = 0; i < n; i++)
		snprintf(keys[i], KEYLEN, "mori-bench/%s/%llu/%zu", what, (unsigned long long)size, i);
}

static void remove_keys(mori_umbp *u, char (*keys)[KEYLEN], size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int rc = mori_umbp_remove(u, keys[i], strlen(keys[i]));
		if (rc && rc != MORI_ENOENT)
			kv_die("remove", rc);
	}
}

static void items_of(mori_umbp_item *it, char (*keys)[KEYLEN], size_t n, uint8_t *buf, uint64_t size)
{
	memset(it, 0, n * sizeof(*it));
	for (size_t i = 0; i < n; i++) {
		it[i].key.data = keys[i];
		it[i].key.len = strlen(keys[i]);
		it[i].buf = buf + i * size;
		it[i].size = size;
		it[i].depth = -1;
	}
}

/* One batch call over n items; exits unless every item succeeded. */
static void batch(mori_umbp *u, int put, mori_umbp_item *it, size_t n, const char *what)
{
	size_t ok = 0;
	int rc = put ? mori_umbp_batch_put(u, it, n, &ok) : mori_umbp_batch_get(u, it, n, &ok);
	if (rc)
		kv_die(what, rc);
	if (ok != n) {
		for (size_t i = 0; i < n; i++)
			if (it[i].status)
				fprintf(stderr, "mori-bench kv: %s: item %zu (%.*s): %s\n", what, i, (int)it[i].key.len,
					(const char *)it[i].key.data, mori_strerror(it[i].status));
		exit(1);
	}
}

/* ---- bw: the DRAM tier beside memcpy ---- */

static void run_bw(const struct kvo *o, mori_umbp *u, const mori_umbp_stats *st)
{
	uint64_t budget = o->budget ? o->budget : st->dram_capacity / 4;
	if (!o->budget && budget > (256ull << 20))
		budget = 256ull << 20;
	printf("# bw: DRAM tier of %llu MiB. Each row: n values of SIZE bytes (n*SIZE <= %llu MiB, n <= %zu), put then "
	       "got back %d times, one call per value (single) and one call for all n (batch); GB/s = bytes / time "
	       "(1 GB = 1e9 bytes), after an untimed first pass (single puts, then a batch put) whose single puts are "
	       "cold put GB/s: the first write of this process to the slab pages. Baseline: memcpy of the same n*SIZE "
	       "bytes in this process (pages touched first). p50: one single call.\n",
	       (unsigned long long)(st->dram_capacity >> 20), (unsigned long long)(budget >> 20), o->batch, o->iters);
	printf("%8s %6s %10s %10s %10s %10s %10s %10s %10s %10s\n", "size", "n", "put GB/s", "get GB/s", "bput GB/s",
	       "bget GB/s", "memcpy GB/s", "put p50us", "get p50us", "cold put");
	for (uint64_t s = o->min; s <= o->max; s *= 4) {
		size_t n = (size_t)(budget / s);
		n = n < 1 ? 1 : n > o->batch ? o->batch : n;
		if (n * s > st->dram_capacity / 2) {
			char b[32];
			printf("%8s  skipped: %zu x %s is over half the DRAM tier\n", hsize(s, b), n, b);
			continue;
		}
		char (*keys)[KEYLEN] = calloc(n, KEYLEN);
		uint8_t *src = kv_alloc(n * s), *dst = kv_alloc(n * s);
		mori_umbp_item *it = calloc(n, sizeof(*it));
		double *lp = calloc(n * (size_t)o->iters, sizeof(double)), *lg = calloc(n * (size_t)o->iters, sizeof(double));
		row_keys(keys, n, "bw", s);
		for (size_t i = 0; i < n; i++)
			kv_fill(src + i * s, s, keys[i], strlen(keys[i]), o->seed);
		memset(dst, 0, n * s);
		/* Untimed first pass, reported apart: the first write of this process to a slab page
		 * faults it into its mapping (on some VMs tens of us a page); a serving process pays it
		 * once, and the memcpy baseline is timed on touched pages too. The batch put lands in
		 * the other runs an overwrite cycles through. */
		double tc = now_s();
		for (size_t i = 0; i < n; i++) {
			int rc = mori_umbp_put(u, keys[i], strlen(keys[i]), src + i * s, s);
			if (rc)
				kv_die("put", rc);
		}
		tc = now_s() - tc;
		items_of(it, keys, n, src, s);
		batch(u, 1, it, n, "batch put");
		double tp = 0, tg = 0, tbp = 0, tbg = 0;
		for (int r = 0; r < o->iters; r++) {
			for (size_t i = 0; i < n; i++) {
				double t0 = now_s();
				int rc = mori_umbp_put(u, keys[i], strlen(keys[i]), src + i * s, s);
				double t1 = now_s();
				if (rc)
					kv_die("put", rc);
				lp[r * n + i] = t1 - t0;
				tp += t1 - t0;
			}
			for (size_t i = 0; i < n; i++) {
				size_t len = 0;
				double t0 = now_s();
				int rc = mori_umbp_get(u, keys[i], strlen(keys[i]), dst + i * s, s, &len);
				double t1 = now_s();
				if (rc || len != s)
					kv_die("get", rc ? rc : MORI_EPROTO);
				lg[r * n + i] = t1 - t0;
				tg += t1 - t0;
			}
			items_of(it, keys, n, src, s);
			double t0 = now_s();
			batch(u, 1, it, n, "batch put");
			tbp += now_s() - t0;
			memset(dst, 0, n * s);
			items_of(it, keys, n, dst, s);
			t0 = now_s();
			batch(u, 0, it, n, "batch get");
			tbg += now_s() - t0;
			if (memcmp(src, dst, n * s)) {
				fprintf(stderr, "mori-bench kv: bw %llu: the bytes got differ from the bytes put\n",
					(unsigned long long)s);
				exit(1);
			}
		}
		double bytes = (double)n * (double)s * o->iters;
		double mc = kv_memcpy_gbps(dst, src, n * s, (uint64_t)bytes);
		char b[32];
		printf("%8s %6zu %10.2f %10.2f %10.2f %10.2f %10.2f %10.1f %10.1f %10.2f\n", hsize(s, b), n, bytes / tp / 1e9,
		       bytes / tg / 1e9, bytes / tbp / 1e9, bytes / tbg / 1e9, mc, kv_pct(lp, n * o->iters, 0.5) * 1e6,
		       kv_pct(lg, n * o->iters, 0.5) * 1e6, (double)n * (double)s / tc / 1e9);
		fflush(stdout);
		remove_keys(u, keys, n);
		free(keys), free(src), free(dst), free(it), free(lp), free(lg);
	}
}

/* ---- ssd: spills and reads of the SSD tier beside raw O_DIRECT ---- */

/* Sequential O_DIRECT writes (then fdatasync) and reads of total bytes in blocks of block
 * bytes, in a scratch file of dir; GB/s of each into *w and *r. */
static int raw_probe(const char *dir, uint64_t block, uint64_t total, double *w, double *r)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/.mori-bench-probe.%d", dir, (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
	if (fd < 0) {
		fprintf(stderr, "mori-bench kv: %s: %s (O_DIRECT probe)\n", path, strerror(errno));
		return -1;
	}
	unlink(path);
	block = (block + 4095) & ~4095ull;
	uint8_t *buf = kv_alloc(block);
	kv_fill(buf, block, "probe", 5, 1);
	uint64_t n = (total + block - 1) / block;
	double t0 = now_s();
	for (uint64_t i = 0; i < n; i++)
		if (pwrite(fd, buf, block, (off_t)(i * block)) != (ssize_t)block)
			goto fail;
	if (fdatasync(fd))
		goto fail;
	*w = (double)(n * block) / (now_s() - t0) / 1e9;
	t0 = now_s();
	for (uint64_t i = 0; i < n; i++)
		if (pread(fd, buf, block, (off_t)(i * block)) != (ssize_t)block)
			goto fail;
	*r = (double)(n * block) / (now_s() - t0) / 1e9;
	close(fd);
	free(buf);
	return 0;
fail:
	fprintf(stderr, "mori-bench kv: O_DIRECT probe in %s: %s\n", dir, strerror(errno));
	close(fd);
	free(buf);
	return -1;
}

static void run_ssd(const struct kvo *o, mori_umbp *u, const mori_umbp_stats *st)
{
	uint64_t spill = o->ssd_bytes ? o->ssd_bytes : st->ssd_capacity / 2;
	if (!o->ssd_bytes && spill > (512ull << 20))
		spill = 512ull << 20;
	printf("# ssd: SSD tier of %llu MiB under %llu MiB of DRAM, directory %s. Each row: DRAM filled with values of "
	       "SIZE bytes (untimed), then %llu MiB more put in batches (each put spills as much to SSD) and flushed: "
	       "put GB/s = those bytes / (batch calls + flush); then the values still in DRAM removed (untimed) and the "
	       "first %llu MiB (spilled) got back in batches: get GB/s for those that fit in 3/4 of the DRAM tier (SSD "
	       "reads into free room), evict GB/s for the rest (each promotion spills a value), and how much of each came "
	       "from SSD. Every byte got is checked. Baseline: O_DIRECT sequential "
	       "write+fdatasync and read of the same bytes in blocks of SIZE (at least 4 KiB) in that directory.\n",
	       (unsigned long long)(st->ssd_capacity >> 20), (unsigned long long)(st->dram_capacity >> 20), o->ssd_dir,
	       (unsigned long long)(spill >> 20), (unsigned long long)(spill >> 20));
	printf("%8s %8s %12s %12s %9s %12s %9s %12s %12s\n", "size", "values", "put GB/s", "get GB/s", "from SSD",
	       "evict GB/s", "from SSD", "raw wr GB/s", "raw rd GB/s");
	for (uint64_t s = o->min; s <= o->max; s *= 4) {
		size_t nspill = (size_t)((spill + s - 1) / s), nfill = (size_t)(st->dram_capacity / s) + 1;
		size_t n = nspill + nfill, b = (size_t)((16ull << 20) / s);
		b = b < 1 ? 1 : b > o->batch ? o->batch : b;
		char (*keys)[KEYLEN] = calloc(n, KEYLEN);
		uint8_t *buf = kv_alloc(b * s), *want = kv_alloc(s);
		mori_umbp_item *it = calloc(b, sizeof(*it));
		row_keys(keys, n, "ssd", s);
		double tput = 0, tget = 0;
		uint64_t from_ssd = 0;
		for (size_t i = 0; i < n; i += b) {
			size_t m = n - i < b ? n - i : b;
			for (size_t j = 0; j < m; j++)
				kv_fill(buf + j * s, s, keys[i + j], strlen(keys[i + j]), o->seed);
			items_of(it, keys + i, m, buf, s);
			double t0 = now_s();
			batch(u, 1, it, m, "ssd put");
			if (i >= nfill)
				tput += now_s() - t0;
		}
		double t0 = now_s();
		int rc = mori_umbp_flush(u);
		if (rc)
			kv_die("flush", rc);
		tput += now_s() - t0;
		/* The values still in DRAM go (untimed): the first gets read from SSD into free room, as
		 * a read alone; the rest evict (spill) values as they promote. */
		remove_keys(u, keys + nspill, nfill);
		size_t nroom = (size_t)(st->dram_capacity / 4 * 3 / s);
		nroom = nroom < nspill ? nroom : nspill;
		double troom = 0;
		uint64_t room_ssd = 0;
		for (size_t i = 0; i < nspill; i += b) {
			size_t m = nspill - i < b ? nspill - i : b;
			if (i < nroom && i + m > nroom)
				m = nroom - i;
			items_of(it, keys + i, m, buf, s);
			t0 = now_s();
			batch(u, 0, it, m, "ssd get");
			*(i < nroom ? &troom : &tget) += now_s() - t0;
			for (size_t j = 0; j < m; j++) {
				*(i < nroom ? &room_ssd : &from_ssd) += it[j].tier == MORI_UMBP_TIER_SSD;
				kv_fill(want, s, keys[i + j], strlen(keys[i + j]), o->seed);
				if (it[j].len != s || memcmp(want, buf + j * s, s)) {
					fprintf(stderr, "mori-bench kv: ssd: %s came back with other bytes\n", keys[i + j]);
					exit(1);
				}
			}
		}
		double rw = 0, rr = 0;
		int probe = raw_probe(o->ssd_dir, s, (uint64_t)nspill * s, &rw, &rr);
		char h[32];
		double bytes = (double)(n - nfill) * (double)s;
		size_t nev = nspill - nroom;
		printf("%8s %8zu %12.2f %12.2f %8.1f%% %12.2f %8.1f%% ", hsize(s, h), nspill, bytes / tput / 1e9,
		       nroom ? (double)nroom * (double)s / troom / 1e9 : 0.0, nroom ? 100.0 * (double)room_ssd / (double)nroom : 0.0,
		       nev ? (double)nev * (double)s / tget / 1e9 : 0.0, nev ? 100.0 * (double)from_ssd / (double)nev : 0.0);
		if (probe)
			printf("%12s %12s\n", "-", "-");
		else
			printf("%12.2f %12.2f\n", rw, rr);
		fflush(stdout);
		remove_keys(u, keys, n);
		free(keys), free(buf), free(want), free(it);
	}
}

/* ---- clients: small values, 1..64 clients ---- */

struct cl {
	const struct kvo *o;
	int id, ops;
	double *lat[3];
	pthread_barrier_t *bar;
};

static void *cl_run(void *arg)
{
	struct cl *w = arg;
	mori_client *c;
	char name[32], key[KEYLEN];
	snprintf(name, sizeof(name), "bench-kv-%d", w->id);
	mori_umbp *u = kv_open(w->o->rundir, name, &c);
	uint64_t s = w->o->small;
	uint8_t *buf = kv_alloc(s);
	for (int phase = 0; phase < 3; phase++) {
		pthread_barrier_wait(w->bar);
		for (int i = 0; i < w->ops; i++) {
			snprintf(key, sizeof(key), "mori-bench/cl/%d/%d", w->id, i);
			size_t kl = strlen(key), len;
			int rc;
			if (phase == 0)
				kv_fill(buf, s, key, kl, w->o->seed);
			double t0 = now_s();
			rc = phase == 0 ? mori_umbp_put(u, key, kl, buf, s) :
			     phase == 1 ? mori_umbp_get(u, key, kl, buf, s, &len) : mori_umbp_exists(u, key, kl);
			w->lat[phase][i] = now_s() - t0;
			if (rc < 0 || (phase == 2 && rc != 1))
				kv_die(phase == 0 ? "put" : phase == 1 ? "get" : "exists", rc < 0 ? rc : MORI_EPROTO);
		}
		pthread_barrier_wait(w->bar);
	}
	for (int i = 0; i < w->ops; i++) {
		snprintf(key, sizeof(key), "mori-bench/cl/%d/%d", w->id, i);
		mori_umbp_remove(u, key, strlen(key));
	}
	kv_close(u, c);
	free(buf);
	return NULL;
}

static void run_clients(const struct kvo *o)
{
	char h[32];
	uint8_t *a = kv_alloc(o->small), *b = kv_alloc(o->small);
	kv_fill(a, o->small, "m", 1, 1);
	double mc = kv_memcpy_gbps(b, a, o->small, 1ull << 30);
	printf("# clients: %d operations of each kind over all clients (threads, each with its own client of morid), "
	       "values of %s bytes, each client its own keys: puts, then gets of them, then exists. ops/s = operations "
	       "/ wall time of the phase; latency of one call. Baselines: exists (a round trip that moves no value) and "
	       "memcpy of one value: %.0f ns (%.2f GB/s).\n", o->ops, hsize(o->small, h),
	       (double)o->small / mc, mc);
	printf("%7s %7s %10s %9s %9s %10s %9s %9s %10s %9s %9s\n", "clients", "ops", "put op/s", "p50 us", "p99 us",
	       "get op/s", "p50 us", "p99 us", "exist op/s", "p50 us", "p99 us");
	for (int k = 0; k < o->n_clients; k++) {
		int nc = o->clients[k], per = o->ops / nc > 0 ? o->ops / nc : 1;
		pthread_barrier_t bar;
		pthread_barrier_init(&bar, NULL, (unsigned)nc + 1);
		struct cl *w = calloc((size_t)nc, sizeof(*w));
		pthread_t *t = calloc((size_t)nc, sizeof(*t));
		double *all[3];
		for (int p = 0; p < 3; p++)
			all[p] = calloc((size_t)nc * (size_t)per, sizeof(double));
		for (int i = 0; i < nc; i++) {
			w[i] = (struct cl){ .o = o, .id = i, .ops = per, .bar = &bar };
			for (int p = 0; p < 3; p++)
				w[i].lat[p] = all[p] + (size_t)i * (size_t)per;
			if (pthread_create(&t[i], NULL, cl_run, &w[i])) {
				fprintf(stderr, "mori-bench kv: cannot start client thread %d\n", i);
				exit(1);
			}
		}
		double wall[3];
		for (int p = 0; p < 3; p++) {
			pthread_barrier_wait(&bar);
			double t0 = now_s();
			pthread_barrier_wait(&bar);
			wall[p] = now_s() - t0;
		}
		for (int i = 0; i < nc; i++)
			pthread_join(t[i], NULL);
		size_t tot = (size_t)nc * (size_t)per;
		printf("%7d %7zu", nc, tot);
		for (int p = 0; p < 3; p++)
			printf(" %10.0f %9.1f %9.1f", (double)tot / wall[p], kv_pct(all[p], tot, 0.5) * 1e6,
			       kv_pct(all[p], tot, 0.99) * 1e6);
		printf("\n");
		fflush(stdout);
		pthread_barrier_destroy(&bar);
		for (int p = 0; p < 3; p++)
			free(all[p]);
		free(w), free(t);
	}
	free(a), free(b);
}

/* ---- options ---- */

static void usage_kv(int code)
{
	fprintf(code ? stderr : stdout,
		"usage: mori-bench kv [--runtime-dir DIR] [--ssd-dir DIR] [--only bw|ssd|clients]\n"
		"                     [--min 4K] [--max 64M] [--iters 3] [--batch 64] [--budget BYTES] [--ssd-bytes BYTES]\n"
		"                     [--small 4K] [--clients \"1 8 64\"] [--ops 20000] [--seed 1]\n"
		"       mori-bench kv --profile uniform|zipf|raw|pressure [--keys N] [--ops N] [--value 64K] [--seed S]\n"
		"                     [--record FILE]\n"
		"       mori-bench kv --replay FILE\n"
		"       mori-bench kv --sim ...   (the eviction-policy simulator, tools/bench_kv_sim.c)\n"
		"Sections (all by default): bw (DRAM put/get beside memcpy), ssd (with --ssd-dir, morid's kv_ssd_dir:\n"
		"spills and SSD gets beside raw O_DIRECT of that directory), clients (small values, 1/8/64 clients).\n"
		"--profile runs a tier profile through the store, verifying every get's bytes, and with --record\n"
		"writes its trace; --replay runs a trace again, verifying every get's bytes from (key, seed).\n");
	exit(code);
}

static void bad(const char *opt, const char *why)
{
	fprintf(stderr, "mori-bench kv: %s %s (--help)\n", opt, why);
	exit(2);
}

static long num(const char *opt, const char *v, long lo, long hi)
{
	char *e;
	long n = strtol(v, &e, 10);
	if (e == v || *e || n < lo || n > hi) {
		fprintf(stderr, "mori-bench kv: %s '%s' is not a number from %ld to %ld\n", opt, v, lo, hi);
		exit(2);
	}
	return n;
}

static void parse_kv(int argc, char **argv, struct kvo *o)
{
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(n) (!strcmp(a, n) && v && (i++, 1))
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage_kv(0);
		else if (ARG("--runtime-dir")) o->rundir = v;
		else if (ARG("--ssd-dir")) o->ssd_dir = v;
		else if (ARG("--only")) o->only = v;
		else if (ARG("--profile")) o->profile = v;
		else if (ARG("--record")) o->record = v;
		else if (ARG("--replay")) o->replay = v;
		else if (ARG("--min")) o->min = parse_size(v);
		else if (ARG("--max")) o->max = parse_size(v);
		else if (ARG("--budget")) o->budget = parse_size(v);
		else if (ARG("--ssd-bytes")) o->ssd_bytes = parse_size(v);
		else if (ARG("--small")) o->small = parse_size(v);
		else if (ARG("--value")) o->value = parse_size(v);
		else if (ARG("--iters")) o->iters = (int)num(a, v, 1, 100000);
		else if (ARG("--batch")) o->batch = (size_t)num(a, v, 1, 65536);
		else if (ARG("--ops")) o->ops = (int)num(a, v, 1, 100000000);
		else if (ARG("--keys")) o->keys = (int)num(a, v, 0, 100000000);
		else if (ARG("--seed")) o->seed = (uint64_t)num(a, v, 0, 0x7fffffffffffffffL);
		else if (ARG("--clients")) {
			char *e, *p = (char *)v;
			o->n_clients = 0;
			while (*p) {
				long n = strtol(p, &e, 10);
				if (e == p || n < 1 || n > 1024 || o->n_clients == 8)
					bad("--clients", "takes up to 8 counts from 1 to 1024 (\"1 8 64\")");
				o->clients[o->n_clients++] = (int)n;
				p = e;
				while (*p == ' ' || *p == ',')
					p++;
			}
		} else {
			fprintf(stderr, "mori-bench kv: unknown option or missing value: %s (--help)\n", a);
			exit(2);
		}
#undef ARG
	}
	if (!o->min || o->max < o->min || o->max > (1ull << 32))
		bad("--min/--max", "must be 1 <= min <= max <= 4G bytes");
	if (!o->small || o->small > (64ull << 20))
		bad("--small", "must be 1 byte to 64M");
	if (!o->value || o->value > (1ull << 30))
		bad("--value", "must be 1 byte to 1G");
	if (!o->n_clients)
		bad("--clients", "names no count");
	if (o->only && strcmp(o->only, "bw") && strcmp(o->only, "ssd") && strcmp(o->only, "clients"))
		bad("--only", "is bw, ssd or clients");
	if (o->profile && strcmp(o->profile, "uniform") && strcmp(o->profile, "zipf") && strcmp(o->profile, "raw") &&
	    strcmp(o->profile, "pressure"))
		bad("--profile", "is uniform, zipf, raw or pressure");
	if (o->record && o->replay)
		bad("--record", "and --replay exclude each other");
	if (o->record && !o->profile)
		bad("--record", "needs --profile");
}

int bench_kv_main(int argc, char **argv)
{
	for (int i = 2; i < argc; i++)
		if (!strcmp(argv[i], "--sim")) /* anywhere on the line */
			return bench_kv_sim_main(argc, argv);
	struct kvo o = {
		.min = 4096, .max = 64ull << 20, .iters = 3, .batch = 64, .small = 4096, .value = 64 << 10,
		.clients = { 1, 8, 64 }, .n_clients = 3, .ops = 20000, .seed = 1,
	};
	parse_kv(argc, argv, &o);
	if (o.profile || o.replay)
		return kv_trace_main(&o);
	mori_client *c;
	mori_umbp *u = kv_open(o.rundir, "bench-kv", &c);
	mori_umbp_stats st = { .size = sizeof(st) };
	int rc = mori_umbp_stats_get(u, &st);
	if (rc)
		kv_die("stats", rc);
	printf("# mori-bench kv: libmori %s, store: DRAM %llu MiB, SSD %llu MiB\n", mori_version(),
	       (unsigned long long)(st.dram_capacity >> 20), (unsigned long long)(st.ssd_capacity >> 20));
	if (!o.only || !strcmp(o.only, "bw"))
		run_bw(&o, u, &st);
	if (!o.only || !strcmp(o.only, "ssd")) {
		if (o.ssd_dir && st.ssd_capacity)
			run_ssd(&o, u, &st);
		else
			printf("# ssd: skipped (%s)\n", !o.ssd_dir ? "no --ssd-dir: give morid's kv_ssd_dir" :
			       "morid runs without an SSD tier");
	}
	if (!o.only || !strcmp(o.only, "clients"))
		run_clients(&o);
	kv_close(u, c);
	return 0;
}
