/* mori-kvreplay: the trace (Mooncake's JSONL: timestamp, input and output lengths, one hash id
 * per 512-token block) and the built-in synthetic workload with its statistics. */
#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvreplay.h"

void trace_free(struct trace *t)
{
	free(t->req);
	free(t->hash);
	memset(t, 0, sizeof(*t));
}

static void trace_push_hash(struct trace *t, uint64_t h)
{
	if (t->nhash == t->caphash) {
		t->caphash = t->caphash ? t->caphash * 2 : 4096;
		t->hash = xrealloc(t->hash, t->caphash * sizeof(*t->hash));
	}
	t->hash[t->nhash++] = h;
}

static struct request *trace_push_req(struct trace *t)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 1024;
		t->req = xrealloc(t->req, t->cap * sizeof(*t->req));
	}
	struct request *r = &t->req[t->n++];
	memset(r, 0, sizeof(*r));
	r->h0 = t->nhash;
	return r;
}

/* At most n bytes of s for a message, every byte outside printable ASCII (and " and \\) as
 * \xNN, so that a binary trace cannot write escape sequences to the terminal. */
static void escape_snippet(char *out, size_t cap, const char *s, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n && s[i] && o + 5 < cap; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
			out[o++] = (char)ch;
		else
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
	}
	out[o] = 0;
}

/* A non-negative integer that fits max, from a JSON number. */
static int json_uint(const cJSON *v, uint64_t max, uint64_t *out)
{
	if (!cJSON_IsNumber(v))
		return -1;
	double d = v->valuedouble;
	if (!(d >= 0) || d > (double)max || d != floor(d))
		return -1;
	*out = (uint64_t)d;
	return 0;
}

/* Parse one line into t (appending). Returns 0, or -1 with the reason in err (t unchanged). */
static int trace_parse_line(struct trace *t, const char *line, char *err, size_t errlen)
{
	cJSON *o = cJSON_Parse(line);
	size_t nhash0 = t->nhash;
	uint64_t ts, in, out, h;
	const char *why = NULL;
	if (!o) {
		const char *at = cJSON_GetErrorPtr();
		char near[24 * 4 + 1];
		if (at && *at) {
			escape_snippet(near, sizeof(near), at, 24);
			snprintf(err, errlen, "malformed JSON at column %zu, near \"%s\"",
				 (size_t)(at - line) + 1, near);
		}
		else
			snprintf(err, errlen, "malformed JSON: the line ends inside the object "
					      "(truncated?)");
		return -1;
	}
	if (!cJSON_IsObject(o)) {
		why = "not a JSON object";
		goto bad;
	}
	if (json_uint(cJSON_GetObjectItemCaseSensitive(o, "timestamp"), UINT64_MAX >> 12, &ts)) {
		why = "\"timestamp\" missing or not a non-negative integer";
		goto bad;
	}
	if (json_uint(cJSON_GetObjectItemCaseSensitive(o, "input_length"), UINT32_MAX, &in)) {
		why = "\"input_length\" missing or not a non-negative integer";
		goto bad;
	}
	if (json_uint(cJSON_GetObjectItemCaseSensitive(o, "output_length"), UINT32_MAX, &out)) {
		why = "\"output_length\" missing or not a non-negative integer";
		goto bad;
	}
	const cJSON *ids = cJSON_GetObjectItemCaseSensitive(o, "hash_ids"), *v;
	if (!cJSON_IsArray(ids)) {
		why = "\"hash_ids\" missing or not an array";
		goto bad;
	}
	cJSON_ArrayForEach(v, ids)
	{
		if (json_uint(v, (uint64_t)1 << 53, &h)) {
			why = "\"hash_ids\" holds something other than a non-negative integer";
			goto bad;
		}
		trace_push_hash(t, h);
	}
	uint64_t want = (in + TRACE_BLOCK_TOKENS - 1) / TRACE_BLOCK_TOKENS;
	if (t->nhash - nhash0 != want) {
		snprintf(err, errlen,
			 "\"hash_ids\" has %zu entries but input_length %" PRIu64
			 " needs %" PRIu64 " (512-token blocks)",
			 t->nhash - nhash0, in, want);
		t->nhash = nhash0;
		cJSON_Delete(o);
		return -1;
	}
	struct request *r = trace_push_req(t);
	r->h0 = nhash0;
	r->ts_ms = ts;
	r->input_len = (uint32_t)in;
	r->output_len = (uint32_t)out;
	r->nh = (uint32_t)want;
	cJSON_Delete(o);
	return 0;
bad:
	t->nhash = nhash0;
	snprintf(err, errlen, "%s", why);
	cJSON_Delete(o);
	return -1;
}

/* One line of f (its newline kept) into *buf, at most TRACE_LINE_MAX bytes: getline would read an
 * endless line (/dev/zero, a runaway writer) into memory without bound (gigabytes in
 * seconds). Its length, -1 at the end of f, -2 when the line is longer than the cap. */
static ssize_t read_line(FILE *f, char **buf, size_t *cap)
{
	size_t n = 0;
	int ch = EOF;
	while ((ch = getc(f)) != EOF) {
		if (n >= TRACE_LINE_MAX)
			return -2;
		if (n + 2 > *cap) {
			*cap = *cap ? *cap * 2 : 4096;
			*buf = xrealloc(*buf, *cap);
		}
		(*buf)[n++] = (char)ch;
		if (ch == '\n')
			break;
	}
	if (n == 0)
		return -1;
	(*buf)[n] = 0;
	return (ssize_t)n;
}

int trace_read(struct trace *t, FILE *f, const char *path, size_t max, int skip_bad,
	       char *err, size_t errlen)
{
	char *line = NULL, why[256];
	size_t cap = 0, lineno = 0;
	ssize_t len;
	int rc = 0;
	while ((max == 0 || t->n < max) && (len = read_line(f, &line, &cap)) != -1) {
		lineno++;
		if (len == -2) { /* not even --skip-bad-lines goes on: where the next line starts is unknown */
			snprintf(err, errlen, "%s:%zu: line longer than %d bytes (a Mooncake line is under 10 KB)",
				 path, lineno, TRACE_LINE_MAX);
			rc = -1;
			break;
		}
		int complete = len > 0 && line[len - 1] == '\n';
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = 0;
		if (strspn(line, " \t") == (size_t)len)
			continue;
		if (trace_parse_line(t, line, why, sizeof(why)) == 0)
			continue;
		if (skip_bad) {
			t->bad_lines++;
			continue;
		}
		snprintf(err, errlen, "%s:%zu: %s%s", path, lineno, why,
			 complete ? "" : " (last line has no newline: truncated file?)");
		rc = -1;
		break;
	}
	if (rc == 0 && ferror(f)) {
		snprintf(err, errlen, "%s: read error after line %zu: %s", path, lineno,
			 strerror(errno));
		rc = -1;
	}
	free(line);
	return rc;
}

/* Built-in workload with the statistics of the Mooncake conversation trace: every request starts
 * with the shared system-prompt block 0; a third continue an earlier conversation (one of the
 * last 2 000 requests: its blocks as a prefix plus a new turn of median 1 200 tokens); fresh
 * prompts are log-normal around 5 800 tokens; Poisson arrivals at 3.4 requests/s. That gives a
 * median near 6 900 tokens and about 37% repeated block ids over 12 031 requests, as the real
 * trace has. Deterministic (fixed seed). */
static uint64_t rng_state;
static uint64_t rng_next(void)
{
	rng_state += GOLDEN;
	return mix64(rng_state);
}
static double rng_unit(void) /* (0, 1) */
{
	return ((double)(rng_next() >> 11) + 0.5) / 9007199254740992.0;
}
static double rng_gauss(void)
{
	return sqrt(-2 * log(rng_unit())) * cos(2 * M_PI * rng_unit());
}

void trace_synthetic(struct trace *t, size_t n)
{
	uint64_t next_id = 1, ts = 0;
	rng_state = 42;
	t->synthetic = 1;
	for (size_t i = 0; i < n; i++) {
		size_t parent = SIZE_MAX;
		double len;
		if (i > 0 && rng_unit() < 0.33)
			parent = i - 1 - rng_next() % (i < 2000 ? i : 2000);
		if (parent != SIZE_MAX)
			len = t->req[parent].input_len + exp(log(1200.0) + rng_gauss());
		else
			len = exp(log(5800.0) + 1.15 * rng_gauss());
		uint32_t in = len < 64 ? 64 : len > 126195 ? 126195 : (uint32_t)len;
		uint32_t nb = (in + TRACE_BLOCK_TOKENS - 1) / TRACE_BLOCK_TOKENS;
		ts += (uint64_t)(-log(rng_unit()) * 294.0);
		struct request *r = trace_push_req(t);
		r->ts_ms = ts;
		r->input_len = in;
		r->output_len = 1 + (uint32_t)(rng_next() % 800);
		r->nh = nb;
		uint32_t k = 0;
		if (parent != SIZE_MAX) {
			const struct request *p = &t->req[parent];
			for (; k < nb && k < p->nh; k++)
				trace_push_hash(t, t->hash[p->h0 + k]);
		} else {
			trace_push_hash(t, 0);
			k = 1;
		}
		for (; k < nb; k++)
			trace_push_hash(t, next_id++);
	}
}
