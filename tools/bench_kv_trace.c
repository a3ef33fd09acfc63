/* mori-bench kv --profile / --replay: UMBP's tier profiles as traces, run against the store with
 * every get's bytes verified.
 *
 * A trace is text, one operation a line, after a header line starting with '#':
 *   P KEY LEN SEED    put LEN bytes, the value of (KEY, SEED) (kv_fill)
 *   G KEY LEN SEED    get KEY: a hit must be LEN bytes equal to the value of (KEY, SEED)
 * Profiles (KEYS distinct keys of VALUE bytes, OPS operations after the first puts):
 *   uniform   every key put once, then gets of keys drawn uniformly (1 in 10 a put of a new
 *             version instead)
 *   zipf      the same with keys drawn from a Zipf law (s = 1.1): a hot set
 *   raw       read after write: each operation puts a new key and gets it back, and every fourth
 *             gets one of the last 64 again
 *   pressure  capacity pressure: keys put in order until 3x the DRAM tier (KEYS default; OPS is
 *             not used), each put followed by a get of a key drawn from all put so far (half from
 *             the last 64):
 *             old keys are evicted (misses without an SSD tier, SSD hits with one)
 * A miss is counted, not a failure (the store may evict); a hit with other bytes or another
 * length is a failure, and the run exits 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_kv.h"

#define LINE_MAX_ 512

static uint64_t rnd(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double rnd01(uint64_t *x) { return (double)(rnd(x) >> 11) / 9007199254740992.0; }

struct gen {
	FILE *f;
	const char *profile;
	uint64_t value;
	uint64_t *ver; /* per key: the seed of its latest put (0: never put) */
};

static void op(struct gen *g, char what, int k)
{
	if (what == 'P')
		g->ver[k] = g->ver[k] * 1000003 + 1 + (uint64_t)k;
	fprintf(g->f, "%c mori-bench/trace/%s/%d %llu %llu\n", what, g->profile, k, (unsigned long long)g->value,
		(unsigned long long)g->ver[k]);
}

/* Write the trace of o->profile to f; its key count into *keys_out. -1 for an unknown profile. */
static int generate(const struct kvo *o, const mori_umbp_stats *st, FILE *f, int *keys_out)
{
	const char *p = o->profile;
	int keys = o->keys;
	if (!keys)
		keys = !strcmp(p, "raw") ? o->ops : !strcmp(p, "pressure") ? (int)(3 * st->dram_capacity / o->value) + 1 :
		       1000;
	struct gen g = { .f = f, .profile = p, .value = o->value, .ver = calloc((size_t)keys + 1, sizeof(uint64_t)) };
	uint64_t x = o->seed;
	fprintf(f, "# mori-bench kv trace v1 profile=%s keys=%d ops=%d value=%llu seed=%llu\n", p, keys, o->ops,
		(unsigned long long)o->value, (unsigned long long)o->seed);
	if (!strcmp(p, "uniform") || !strcmp(p, "zipf")) {
		double *cdf = NULL;
		if (p[0] == 'z') {
			cdf = malloc((size_t)keys * sizeof(double));
			double s = 0;
			for (int k = 0; k < keys; k++)
				cdf[k] = s += 1.0 / pow(k + 1, 1.1);
			for (int k = 0; k < keys; k++)
				cdf[k] /= s;
		}
		for (int k = 0; k < keys; k++)
			op(&g, 'P', k);
		for (int i = 0; i < o->ops; i++) {
			int k;
			if (cdf) {
				double u = rnd01(&x);
				int lo = 0, hi = keys - 1;
				while (lo < hi) {
					int mid = (lo + hi) / 2;
					if (cdf[mid] < u)
						lo = mid + 1;
					else
						hi = mid;
				}
				k = lo;
			} else
				k = (int)(rnd(&x) % (uint64_t)keys);
			op(&g, rnd(&x) % 10 ? 'G' : 'P', k);
		}
		free(cdf);
	} else if (!strcmp(p, "raw")) {
		for (int i = 0; i < o->ops && i < keys; i++) {
			op(&g, 'P', i);
			op(&g, 'G', i);
			if (i % 4 == 3)
				op(&g, 'G', i - (int)(rnd(&x) % (uint64_t)(i < 64 ? i + 1 : 64)));
		}
	} else if (!strcmp(p, "pressure")) {
		for (int i = 0; i < keys; i++) { /* every key: the pressure is the point, --ops does not cut it */
			op(&g, 'P', i);
			int k = rnd(&x) % 2 ? i - (int)(rnd(&x) % (uint64_t)(i < 64 ? i + 1 : 64)) :
			                      (int)(rnd(&x) % (uint64_t)(i + 1));
			op(&g, 'G', k);
		}
	} else {
		free(g.ver);
		return -1;
	}
	free(g.ver);
	*keys_out = keys;
	return fflush(f) ? -1 : 0;
}

struct tally {
	uint64_t ops, puts, gets, hits_dram, hits_ssd, misses, refused, dropped, failures, bytes;
	double t;
	double *lat;
	size_t n_lat, cap_lat;
};

static void lat(struct tally *r, double v)
{
	if (r->n_lat == r->cap_lat) {
		r->cap_lat = r->cap_lat ? 2 * r->cap_lat : 4096;
		r->lat = realloc(r->lat, r->cap_lat * sizeof(double));
	}
	r->lat[r->n_lat++] = v;
	r->t += v;
}

static int replay(mori_umbp *u, FILE *f, const char *name)
{
	char line[LINE_MAX_], key[LINE_MAX_], hdr[LINE_MAX_] = "";
	struct tally r = { 0 };
	size_t cap = 0;
	uint8_t *buf = NULL, *want = NULL;
	unsigned long lineno = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (line[0] == '#') {
			if (!hdr[0])
				snprintf(hdr, sizeof(hdr), "%s", line + 2);
			continue;
		}
		char what;
		unsigned long long len, seed;
		if (sscanf(line, "%c %511s %llu %llu", &what, key, &len, &seed) != 4 || (what != 'P' && what != 'G') ||
		    !len || len > (1ull << 32)) {
			fprintf(stderr, "mori-bench kv: %s:%lu: not an operation (P|G KEY LEN SEED): %s", name, lineno, line);
			free(buf), free(want), free(r.lat);
			return 2;
		}
		if (len > cap) {
			free(buf), free(want);
			cap = len;
			buf = kv_alloc(cap), want = kv_alloc(cap);
		}
		size_t kl = strlen(key);
		r.ops++;
		if (what == 'P') {
			kv_fill(buf, len, key, kl, seed);
			double t0 = now_s();
			int rc = mori_umbp_put(u, key, kl, buf, len);
			lat(&r, now_s() - t0);
			r.puts++;
			if (rc == MORI_ENOMEM)
				r.refused++;
			else if (rc)
				kv_die("put", rc);
			else
				r.bytes += len;
			continue;
		}
		mori_umbp_item it = { .key = { key, kl }, .buf = buf, .size = len, .depth = -1 };
		memset(buf, 0, len);
		double t0 = now_s();
		int rc = mori_umbp_batch_get(u, &it, 1, NULL);
		lat(&r, now_s() - t0);
		if (rc)
			kv_die("get", rc);
		r.gets++;
		if (it.status == MORI_ENOENT) {
			r.misses++;
			continue;
		}
		if (it.status == MORI_EIO) { /* dropped for a bad checksum: never returned with wrong bytes */
			r.dropped++;
			continue;
		}
		kv_fill(want, len, key, kl, seed);
		if (it.status || it.len != len || memcmp(want, buf, len)) {
			if (r.failures++ < 5) {
				if (it.status)
					fprintf(stderr, "mori-bench kv: %s:%lu: get %s: %s\n", name, lineno, key,
						mori_strerror(it.status));
				else
					fprintf(stderr, "mori-bench kv: %s:%lu: get %s: %zu bytes, want %llu%s\n", name, lineno,
						key, it.len, len, it.len == len ? ", other bytes than (key, seed)'s" : "");
			}
			continue;
		}
		r.bytes += len;
		if (it.tier == MORI_UMBP_TIER_SSD)
			r.hits_ssd++;
		else
			r.hits_dram++;
	}
	double mc = cap ? kv_memcpy_gbps(want, buf, cap, r.bytes) : 0;
	printf("# replay of %s: %s", name, hdr[0] ? hdr : "(no header)\n");
	printf("# every get's bytes checked against the value of (key, seed); times: the store calls alone. "
	       "Baseline: memcpy of the same bytes (%llu) in this process.\n", (unsigned long long)r.bytes);
	printf("result: ops=%llu puts=%llu gets=%llu hits=%llu (dram=%llu ssd=%llu) misses=%llu refused=%llu "
	       "dropped=%llu failures=%llu\n", (unsigned long long)r.ops, (unsigned long long)r.puts,
	       (unsigned long long)r.gets, (unsigned long long)(r.hits_dram + r.hits_ssd), (unsigned long long)r.hits_dram,
	       (unsigned long long)r.hits_ssd, (unsigned long long)r.misses, (unsigned long long)r.refused,
	       (unsigned long long)r.dropped, (unsigned long long)r.failures);
	if (r.ops)
		printf("speed: %.0f ops/s, %.3f GB/s of values moved (%llu bytes in %.3f s), op latency p50 %.1f us, "
		       "p99 %.1f us; memcpy %.2f GB/s\n", (double)r.ops / r.t, (double)r.bytes / r.t / 1e9,
		       (unsigned long long)r.bytes, r.t, kv_pct(r.lat, r.n_lat, 0.5) * 1e6, kv_pct(r.lat, r.n_lat, 0.99) * 1e6,
		       mc);
	/* the trace's keys out of the store */
	rewind(f);
	while (fgets(line, sizeof(line), f))
		if (line[0] == 'P' && sscanf(line, "P %511s", key) == 1)
			mori_umbp_remove(u, key, strlen(key));
	free(buf), free(want), free(r.lat);
	return r.failures ? 1 : 0;
}

int kv_trace_main(const struct kvo *o)
{
	mori_client *c;
	mori_umbp *u = kv_open(o->rundir, "bench-kv-trace", &c);
	FILE *f;
	int rc;
	const char *name;
	if (o->replay) {
		name = o->replay;
		if (!(f = fopen(name, "r"))) {
			perror(name);
			kv_close(u, c);
			return 2;
		}
	} else {
		mori_umbp_stats st = { .size = sizeof(st) };
		if ((rc = mori_umbp_stats_get(u, &st)))
			kv_die("stats", rc);
		name = o->record ? o->record : "(the profile's trace)";
		f = o->record ? fopen(o->record, "w+") : tmpfile();
		if (!f) {
			perror(name);
			kv_close(u, c);
			return 2;
		}
		int keys;
		if (generate(o, &st, f, &keys)) {
			fprintf(stderr, "mori-bench kv: profile '%s' is not uniform, zipf, raw or pressure (or %s: write "
				"failed)\n", o->profile, name);
			fclose(f);
			kv_close(u, c);
			return 2;
		}
		rewind(f);
	}
	rc = replay(u, f, name);
	fclose(f);
	kv_close(u, c);
	return rc;
}
