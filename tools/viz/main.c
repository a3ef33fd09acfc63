/* mori-viz: MORI-VIZ trace buffers to Chrome/Perfetto trace JSON (ui.perfetto.dev, or
 * chrome://tracing, opens the file).
 *   mori-viz [--slot N=NAME]... [-o OUT.json] BUFFER
 *   mori-viz --synthetic [--blocks N] [--warps-per-block N] [--descs N] -o BUFFER
 * --synthetic writes a buffer like the one a traced copy-kernel launch leaves (for docs and
 * tests: no GPU needed). Exit 0, 1 on a bad buffer or an I/O error, 2 on a usage error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viz.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: mori-viz [--slot N=NAME]... [-o OUT.json] BUFFER\n"
		   "       mori-viz --synthetic [--blocks N] [--warps-per-block N] [--descs N] -o BUFFER\n"
		   "Slots 0-2 are named as mori's copy kernel names them (copy_batch, copy_desc, copy_tail).\n");
}

static int read_all(const char *path, void **buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	size_t cap = 1 << 20, n = 0;
	char *p = malloc(cap);
	while (p) {
		n += fread(p + n, 1, cap - n, f);
		if (n < cap)
			break;
		char *np = realloc(p, cap * 2);
		if (!np) {
			free(p);
			p = NULL;
			break;
		}
		p = np;
		cap *= 2;
	}
	int bad = ferror(f);
	fclose(f);
	if (!p || bad) {
		free(p);
		return -1;
	}
	*buf = p;
	*len = n;
	return 0;
}

/* What a copy-kernel launch of blocks x wpb warps over `descs` descriptors each would record:
 * a batch span per warp, a span per descriptor (lengths varying), an instant at the tail.
 * Timestamps in ns (CUDA's %globaltimer). */
static int synthetic(const char *out, uint32_t blocks, uint32_t wpb, uint32_t descs)
{
	uint32_t warps = blocks * wpb, epw = 1;
	while (epw < 2 * descs + 3)
		epw <<= 1;
	size_t len = mori_viz_bytes(warps, epw);
	char *buf = malloc(len);
	if (!buf || viz_init(buf, len, warps, epw, 1000000000ull, wpb, 1) != 0) {
		free(buf);
		return -1;
	}
	uint32_t *heads = (uint32_t *)(buf + mori_viz_heads_off());
	struct mori_viz_event *ring = (void *)(buf + mori_viz_events_off(warps));
	uint64_t seed = 12345;
	for (uint32_t w = 0; w < warps; w++) {
		struct mori_viz_event *e = ring + (size_t)w * epw;
		int64_t t = 1000000 + (int64_t)(w / wpb) * 700 + (int64_t)(w % wpb) * 40;
		uint32_t k = 0;
		e[k++] = (struct mori_viz_event){t, mori_viz_meta(w, 0, MORI_VIZ_EV_BEGIN)};
		for (uint32_t i = 0; i < descs; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			int64_t dur = 1500 + (int64_t)(seed >> 33) % 2500; /* 1.5-4 us per 16 KiB block */
			e[k++] = (struct mori_viz_event){t += 200, mori_viz_meta(w, 1, MORI_VIZ_EV_BEGIN)};
			e[k++] = (struct mori_viz_event){t += dur, mori_viz_meta(w, 1, MORI_VIZ_EV_END)};
		}
		e[k++] = (struct mori_viz_event){t += 150, mori_viz_meta(w, 2, MORI_VIZ_EV_INSTANT)};
		e[k++] = (struct mori_viz_event){t += 100, mori_viz_meta(w, 0, MORI_VIZ_EV_END)};
		heads[w] = k;
	}
	FILE *f = fopen(out, "wb");
	int rc = f && fwrite(buf, 1, len, f) == len ? 0 : -1;
	if (f && fclose(f) != 0)
		rc = -1;
	free(buf);
	return rc;
}

static int parse_u32(const char *s, uint32_t *v, uint32_t max)
{
	char *end;
	unsigned long x = strtoul(s, &end, 10);
	if (end == s || *end || x == 0 || x > max)
		return -1;
	*v = (uint32_t)x;
	return 0;
}

int main(int argc, char **argv)
{
	static struct viz_names names;
	const char *out = NULL, *in = NULL;
	int synth = 0;
	uint32_t blocks = 4, wpb = 4, descs = 8;
	viz_names_mori(&names);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--synthetic")) {
			synth = 1;
		} else if (!strcmp(a, "-o") && v) {
			out = v, i++;
		} else if (!strcmp(a, "--slot") && v && viz_name_set(&names, v) == 0) {
			i++;
		} else if (!strcmp(a, "--blocks") && v && parse_u32(v, &blocks, 4096) == 0) {
			i++;
		} else if (!strcmp(a, "--warps-per-block") && v && parse_u32(v, &wpb, 32) == 0) {
			i++;
		} else if (!strcmp(a, "--descs") && v && parse_u32(v, &descs, 100000) == 0) {
			i++;
		} else if (a[0] != '-' && !in) {
			in = a;
		} else {
			fprintf(stderr, "mori-viz: bad argument %s\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (synth) {
		if (!out) {
			usage(stderr);
			return 2;
		}
		if (synthetic(out, blocks, wpb, descs) != 0) {
			fprintf(stderr, "mori-viz: cannot write %s: %s\n", out, strerror(errno));
			return 1;
		}
		return 0;
	}
	if (!in) {
		usage(stderr);
		return 2;
	}
	void *buf;
	size_t len;
	if (read_all(in, &buf, &len) != 0) {
		fprintf(stderr, "mori-viz: cannot read %s: %s\n", in, strerror(errno));
		return 1;
	}
	struct viz_trace t;
	char err[256];
	int rc = viz_read(buf, len, &t, err, sizeof(err));
	free(buf);
	if (rc != 0) {
		fprintf(stderr, "mori-viz: %s: %s\n", in, err);
		return 1;
	}
	FILE *f = out ? fopen(out, "w") : stdout;
	struct viz_stats st;
	rc = f ? viz_write_chrome(f, &t, &names, &st) : -1;
	if (f && f != stdout && fclose(f) != 0)
		rc = -1;
	if (rc != 0) {
		fprintf(stderr, "mori-viz: cannot write %s\n", out ? out : "stdout");
		viz_trace_free(&t);
		return 1;
	}
	fprintf(stderr, "mori-viz: %zu spans, %zu instants, %zu unmatched, %llu lost to the ring, %llu bad\n", st.spans,
		st.instants, st.unmatched, (unsigned long long)t.lost, (unsigned long long)t.bad);
	viz_trace_free(&t);
	return 0;
}
