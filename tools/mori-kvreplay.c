/* mori-kvreplay: replay an LLM serving trace as prefill-to-decode KV-cache transfers.
 *
 * Two processes, each a libmori client with a paged KV pool laid out as vLLM lays it out
 * ([layer][K|V][page][page_tokens x kv_heads x head_dim x elem]): the decode process (the parent)
 * schedules the trace, keeps an LRU prefix cache of 512-token hash blocks and verifies every byte
 * it receives; the prefill process (a forked child) fills pages with content derived from
 * (hash id, layer, K/V, offset) and moves them. One prepared descriptor list covers the whole
 * pool (one descriptor per (layer, K/V, page), as vLLM's NIXL connector does); a transfer
 * submits the indices of a request's pages, with a notification to the target.
 *
 * mori_xfer_prep pairs a local and a remote offset in each descriptor, so page i of one pool is
 * moved to page i of the other: the prefill side uses the page ids the decode side allocated
 * (its pool has the same geometry) rather than running an allocator of its own.
 *
 * Exit status: 0 all transfers verified, 1 verification failures or failed transfers, 2 bad
 * input or setup failure.
 */
#include <cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
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

#include "mori.h"

#define TRACE_BLOCK_TOKENS 512
#define DEFAULT_TRACE "../shared/data/mooncake_conversation_trace.jsonl"
#define JOB_MAX_BLOCKS 1024 /* a longer request is moved in several jobs */

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t t_prog;  /* start of the program, for --verbose */
static int verbose;

static void vlog(const char *role, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vlog(const char *role, const char *fmt, ...)
{
	if (!verbose)
		return;
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "[%8.3f s] %s: %s\n", (now_us() - t_prog) / 1e6, role, buf);
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p) {
		fprintf(stderr, "mori-kvreplay: out of memory (%zu x %zu bytes)\n", n, size);
		exit(2);
	}
	return p;
}

static void *xrealloc(void *p, size_t size)
{
	p = realloc(p, size ? size : 1);
	if (!p) {
		fprintf(stderr, "mori-kvreplay: out of memory (%zu bytes)\n", size);
		exit(2);
	}
	return p;
}

/* ---------------------------------------------------------------------------------------------
 * Model presets and pool geometry
 */
struct preset {
	const char *name;
	int layers;
	int kv_heads;     /* per rank */
	int head_dim;     /* elements per head (MLA: the latent) */
	int elem_bytes;
	int kv;           /* 2: separate K and V pages; 1: one latent (MLA) */
	int page_tokens;
	const char *what;
};

static const struct preset presets[] = {
	{"llama3-8b", 32, 8, 128, 2, 2, 16, "Llama-3-8B, bf16, 8 KV heads"},
	{"llama3-70b-tp8", 80, 1, 128, 2, 2, 16, "Llama-3-70B, bf16, one TP-8 rank (1 KV head)"},
	{"qwen3-8b", 36, 8, 128, 2, 2, 16, "Qwen3-8B, bf16, 8 KV heads"},
	{"deepseek-v3-mla", 61, 1, 576, 2, 1, 64, "DeepSeek-V3, bf16 MLA latent (512+64)"},
	{"tiny", 2, 1, 64, 2, 2, 16, "test model: 2 layers, 1 KV head of 64"},
};

struct geom {
	const struct preset *p;
	int layers, kv, page_tokens;
	uint64_t page_bytes;       /* one (layer, K/V) page */
	uint32_t pages_per_block;  /* per 512-token trace block */
	uint64_t descs_per_block;  /* layers x kv x pages_per_block */
	uint64_t bytes_per_block;
	uint32_t pool_blocks;
	uint64_t pool_pages;       /* per (layer, K/V) */
	uint64_t pool_descs;
	uint64_t pool_bytes;
};

static const struct preset *preset_find(const char *name)
{
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		if (!strcmp(presets[i].name, name))
			return &presets[i];
	return NULL;
}

/* Fill g from a preset. page_tokens 0 keeps the preset's. Pool size from pool_blocks, else
 * pool_mib (rounded down to whole blocks). Returns 0, or -1 with a reason in err. */
static int geom_init(struct geom *g, const struct preset *p, int page_tokens, uint64_t pool_blocks,
		     uint64_t pool_mib, char *err, size_t errlen)
{
	memset(g, 0, sizeof(*g));
	g->p = p;
	g->layers = p->layers;
	g->kv = p->kv;
	g->page_tokens = page_tokens ? page_tokens : p->page_tokens;
	if (g->page_tokens <= 0 || g->page_tokens > TRACE_BLOCK_TOKENS ||
	    TRACE_BLOCK_TOKENS % g->page_tokens) {
		snprintf(err, errlen, "page tokens %d must divide %d", g->page_tokens,
			 TRACE_BLOCK_TOKENS);
		return -1;
	}
	g->page_bytes = (uint64_t)g->page_tokens * p->kv_heads * p->head_dim * p->elem_bytes;
	if (g->page_bytes % 8) {
		snprintf(err, errlen, "page of %" PRIu64 " bytes is not a multiple of 8",
			 g->page_bytes);
		return -1;
	}
	g->pages_per_block = TRACE_BLOCK_TOKENS / g->page_tokens;
	g->descs_per_block = (uint64_t)g->layers * g->kv * g->pages_per_block;
	g->bytes_per_block = g->descs_per_block * g->page_bytes;
	if (!pool_blocks)
		pool_blocks = (pool_mib << 20) / g->bytes_per_block;
	if (pool_blocks < 1) {
		snprintf(err, errlen,
			 "the pool holds no whole block (%" PRIu64 " MiB per block with %s)",
			 g->bytes_per_block >> 20, p->name);
		return -1;
	}
	if (pool_blocks > UINT32_MAX / 2) {
		snprintf(err, errlen, "pool of %" PRIu64 " blocks is too large", pool_blocks);
		return -1;
	}
	g->pool_blocks = (uint32_t)pool_blocks;
	g->pool_pages = (uint64_t)g->pool_blocks * g->pages_per_block;
	g->pool_descs = (uint64_t)g->layers * g->kv * g->pool_pages;
	g->pool_bytes = g->pool_descs * g->page_bytes;
	if (g->pool_descs > UINT32_MAX) {
		snprintf(err, errlen, "pool of %" PRIu64 " pages exceeds 32-bit descriptor indices",
			 g->pool_descs);
		return -1;
	}
	return 0;
}

/* Index of the descriptor (and page slot) for (layer, kv, page) in the vLLM layout. */
static inline uint32_t desc_index(const struct geom *g, int layer, int kv, uint64_t page)
{
	return (uint32_t)(((uint64_t)layer * g->kv + kv) * g->pool_pages + page);
}

/* ---------------------------------------------------------------------------------------------
 * Content derivation: word i of page (hash, layer, kv, page-in-block) is seed + i * GOLDEN, with
 * the seed a 64-bit mix of the four. A page landing in the wrong slot, a shifted or torn copy
 * and a stale page all fail the check; writing and checking run at memory speed.
 */
#define GOLDEN 0x9e3779b97f4a7c15ull

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t page_seed(uint64_t hash, int layer, int kv, uint32_t page_in_block)
{
	return mix64(mix64(hash + GOLDEN) ^ ((uint64_t)layer << 33 | (uint64_t)kv << 32 |
					      page_in_block));
}

static void fill_page(uint64_t *p, uint64_t words, uint64_t seed)
{
	for (uint64_t i = 0; i < words; i++)
		p[i] = seed + i * GOLDEN;
}

/* Returns the number of mismatching words. */
static uint64_t check_page(const uint64_t *p, uint64_t words, uint64_t seed)
{
	uint64_t bad = 0;
	for (uint64_t i = 0; i < words; i++)
		bad += p[i] != seed + i * GOLDEN;
	return bad;
}

/* Fill (or check) every page of one block in a pool mapped at base. check: returns the count of
 * pages that differ. */
static uint64_t block_pages(const struct geom *g, uint8_t *base, uint64_t hash, uint32_t slot,
			    int check)
{
	uint64_t words = g->page_bytes / 8, badpages = 0;
	for (int l = 0; l < g->layers; l++)
		for (int k = 0; k < g->kv; k++)
			for (uint32_t p = 0; p < g->pages_per_block; p++) {
				uint64_t page = (uint64_t)slot * g->pages_per_block + p;
				uint64_t *w = (uint64_t *)(base + (uint64_t)desc_index(g, l, k, page) *
									  g->page_bytes);
				uint64_t seed = page_seed(hash, l, k, p);
				if (check)
					badpages += check_page(w, words, seed) != 0;
				else
					fill_page(w, words, seed);
			}
	return badpages;
}

/* ---------------------------------------------------------------------------------------------
 * Trace
 */
struct request {
	uint64_t ts_ms;
	uint32_t input_len, output_len;
	uint32_t nh;
	uint64_t h0; /* index of the first hash id in trace.hash */
};

struct trace {
	struct request *req;
	size_t n, cap;
	uint64_t *hash;
	size_t nhash, caphash;
	size_t bad_lines;    /* skipped with skip_bad */
	int synthetic;
};

static void trace_free(struct trace *t)
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
		if (at && *at)
			snprintf(err, errlen, "malformed JSON at column %zu, near \"%.24s\"",
				 (size_t)(at - line) + 1, at);
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

/* Read up to max requests (0: all) from f. A bad line is an error naming it, unless skip_bad
 * (then counted in t->bad_lines). Blank lines are ignored. Returns 0, or -1 with err set. */
static int trace_read(struct trace *t, FILE *f, const char *path, size_t max, int skip_bad,
		      char *err, size_t errlen)
{
	char *line = NULL, why[256];
	size_t cap = 0, lineno = 0;
	ssize_t len;
	int rc = 0;
	while ((max == 0 || t->n < max) && (len = getline(&line, &cap, f)) >= 0) {
		lineno++;
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

static void trace_synthetic(struct trace *t, size_t n)
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

/* ---------------------------------------------------------------------------------------------
 * Block pool: hash id -> block slot, LRU over unpinned held blocks (linear-probing map with
 * backward-shift deletion, so no tombstones).
 */
#define NIL UINT32_MAX

struct pool {
	uint32_t nblocks;
	uint64_t *slot_hash;
	uint32_t *pin;            /* in-flight jobs holding the slot */
	uint32_t *prev, *next;    /* LRU list (unpinned held slots) */
	uint8_t *held;
	uint32_t lru_head, lru_tail; /* head: least recently used */
	uint32_t *free_stack;
	uint32_t nfree;
	/* map */
	uint64_t *mkey;
	uint32_t *mval;           /* NIL: empty */
	uint64_t mmask;
	uint64_t evictions;
};

static uint64_t map_hash(uint64_t k)
{
	return mix64(k + 0x632be59bd9b4e019ull);
}

static void pool_init(struct pool *p, uint32_t nblocks)
{
	memset(p, 0, sizeof(*p));
	p->nblocks = nblocks;
	p->slot_hash = xcalloc(nblocks, sizeof(uint64_t));
	p->pin = xcalloc(nblocks, sizeof(uint32_t));
	p->prev = xcalloc(nblocks, sizeof(uint32_t));
	p->next = xcalloc(nblocks, sizeof(uint32_t));
	p->held = xcalloc(nblocks, 1);
	p->free_stack = xcalloc(nblocks, sizeof(uint32_t));
	for (uint32_t i = 0; i < nblocks; i++)
		p->free_stack[i] = nblocks - 1 - i; /* slot 0 first */
	p->nfree = nblocks;
	p->lru_head = p->lru_tail = NIL;
	uint64_t cap = 16;
	while (cap < (uint64_t)nblocks * 2)
		cap <<= 1;
	p->mkey = xcalloc(cap, sizeof(uint64_t));
	p->mval = xcalloc(cap, sizeof(uint32_t));
	memset(p->mval, 0xff, cap * sizeof(uint32_t));
	p->mmask = cap - 1;
}

static void pool_free(struct pool *p)
{
	free(p->slot_hash);
	free(p->pin);
	free(p->prev);
	free(p->next);
	free(p->held);
	free(p->free_stack);
	free(p->mkey);
	free(p->mval);
	memset(p, 0, sizeof(*p));
}

static uint32_t map_get(const struct pool *p, uint64_t k)
{
	for (uint64_t i = map_hash(k) & p->mmask;; i = (i + 1) & p->mmask) {
		if (p->mval[i] == NIL)
			return NIL;
		if (p->mkey[i] == k)
			return p->mval[i];
	}
}

static void map_put(struct pool *p, uint64_t k, uint32_t v)
{
	uint64_t i = map_hash(k) & p->mmask;
	while (p->mval[i] != NIL && p->mkey[i] != k)
		i = (i + 1) & p->mmask;
	p->mkey[i] = k;
	p->mval[i] = v;
}

static void map_del(struct pool *p, uint64_t k)
{
	uint64_t i = map_hash(k) & p->mmask;
	while (p->mval[i] != NIL && p->mkey[i] != k)
		i = (i + 1) & p->mmask;
	if (p->mval[i] == NIL)
		return;
	/* backward-shift: move later entries of the cluster into the hole when allowed */
	for (uint64_t j = i;;) {
		p->mval[i] = NIL;
		for (;;) {
			j = (j + 1) & p->mmask;
			if (p->mval[j] == NIL)
				return;
			uint64_t home = map_hash(p->mkey[j]) & p->mmask;
			/* entry j may move to i if its home is not cyclically in (i, j] */
			if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
				break;
		}
		p->mkey[i] = p->mkey[j];
		p->mval[i] = p->mval[j];
		i = j;
	}
}

static void lru_unlink(struct pool *p, uint32_t s)
{
	if (p->prev[s] != NIL)
		p->next[p->prev[s]] = p->next[s];
	else
		p->lru_head = p->next[s];
	if (p->next[s] != NIL)
		p->prev[p->next[s]] = p->prev[s];
	else
		p->lru_tail = p->prev[s];
	p->prev[s] = p->next[s] = NIL;
}

static void lru_push_mru(struct pool *p, uint32_t s)
{
	p->prev[s] = p->lru_tail;
	p->next[s] = NIL;
	if (p->lru_tail != NIL)
		p->next[p->lru_tail] = s;
	else
		p->lru_head = s;
	p->lru_tail = s;
}

/* The slot holding hash (touched as most recently used), or NIL. */
static uint32_t pool_lookup(struct pool *p, uint64_t hash)
{
	uint32_t s = map_get(p, hash);
	if (s != NIL && !p->pin[s]) {
		lru_unlink(p, s);
		lru_push_mru(p, s);
	}
	return s;
}

/* A slot for hash, pinned: a free one, else the least recently used unpinned block is evicted.
 * NIL when every slot is pinned. */
static uint32_t pool_alloc(struct pool *p, uint64_t hash)
{
	uint32_t s;
	if (p->nfree) {
		s = p->free_stack[--p->nfree];
	} else {
		s = p->lru_head;
		if (s == NIL)
			return NIL;
		lru_unlink(p, s);
		map_del(p, p->slot_hash[s]);
		p->evictions++;
	}
	p->slot_hash[s] = hash;
	p->held[s] = 1;
	p->pin[s] = 1;
	p->prev[s] = p->next[s] = NIL;
	map_put(p, hash, s);
	return s;
}

/* The job that pinned s finished: ok keeps the block as cached content, else it is dropped. */
static void pool_unpin(struct pool *p, uint32_t s, int ok)
{
	if (--p->pin[s])
		return;
	if (ok) {
		lru_push_mru(p, s);
	} else {
		map_del(p, p->slot_hash[s]);
		p->held[s] = 0;
		p->free_stack[p->nfree++] = s;
	}
}

/* ---------------------------------------------------------------------------------------------
 * Statistics
 */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n); 0 when n == 0. */
static uint64_t percentile(const uint64_t *v, size_t n, double pct)
{
	if (!n)
		return 0;
	size_t rank = (size_t)ceil(pct / 100.0 * (double)n);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

/* ---------------------------------------------------------------------------------------------
 * Options and the run's results
 */
enum mode { MODE_PUSH = 0, MODE_PULL = 1 };

struct opts {
	const char *trace_path;
	int trace_explicit, force_synthetic;
	const char *model;
	int page_tokens;
	uint64_t pool_mib, pool_blocks;
	int mem_kind;
	size_t requests;
	double speedup;
	int afap;
	int window;
	uint64_t batch;
	int mode;
	const char *prefill_rt, *decode_rt;
	const char *prefill_node, *decode_node;
	int64_t timeout_ms;
	int skip_bad, json, progress, dry_run, warmup, io_baseline;
	uint64_t verify_every; /* fill and verify job ids that are multiples of this (1: all) */
	int role;              /* ROLE_BOTH: fork both sides; else this process is one of them */
	const char *coord;     /* --coord HOST:PORT: the side channel between the two roles */
	int role_cross;        /* role mode: the two sides' daemons differ (set at the hello) */
};
enum { ROLE_BOTH = 0, ROLE_PREFILL, ROLE_DECODE };

struct results {
	uint64_t requests, requests_cached, jobs;
	uint64_t blocks_total, blocks_moved, blocks_skipped;
	uint64_t bytes_moved, bytes_verified, descriptors;
	uint64_t verify_failures, transfer_errors, notif_missing;
	uint64_t evictions;
	uint64_t setup_us, run_us, xfer_busy_us, fill_us, verify_us;
	uint64_t io_batch, io_bytes, io_us; /* the streaming reference (--no-io-baseline: 0) */
	uint64_t *lat;
	size_t nlat, caplat;
	char first_error[256];
};

static void lat_push(struct results *r, uint64_t us)
{
	if (r->nlat == r->caplat) {
		r->caplat = r->caplat ? r->caplat * 2 : 1024;
		r->lat = xrealloc(r->lat, r->caplat * sizeof(uint64_t));
	}
	r->lat[r->nlat++] = us;
}

static void note_error(struct results *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_error(struct results *r, const char *fmt, ...)
{
	if (r->first_error[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->first_error, sizeof(r->first_error), fmt, ap);
	va_end(ap);
	fprintf(stderr, "mori-kvreplay: %s\n", r->first_error);
}

/* ---------------------------------------------------------------------------------------------
 * Messages between the decode (parent) and prefill (child) processes, over a SEQPACKET
 * socketpair: the out-of-band side channel a serving system has anyway (vLLM uses ZMQ).
 */
enum msg_type {
	M_HELLO = 1, /* node address and published pool name */
	M_READY,     /* set-up done (remote pool open, list prepared) */
	M_ERR,       /* set-up failed: text */
	M_JOB,       /* decode -> prefill: fill these blocks (and, push mode, move them) */
	M_DONE,      /* prefill -> decode: push: moved (code, times); pull: filled */
	M_END,       /* decode -> prefill: no more jobs; n = transfers that should have notified */
	M_STATS,     /* prefill -> decode: its counters */
	M_BENCH,     /* decode -> prefill: stream the pool (u0 batch, u1 bytes); reply: t0 bytes,
			t1 microseconds, code */
};

struct job_block {
	uint64_t hash;
	uint32_t slot;
	uint32_t pad;
};

struct msg {
	uint32_t type, job, n;
	int32_t code;
	uint64_t t0, t1, bytes, u0, u1;
	char a[128], b[128], text[192];
	struct job_block blk[JOB_MAX_BLOCKS];
};

static size_t msg_len(const struct msg *m)
{
	return offsetof(struct msg, blk) + (size_t)m->n * sizeof(struct job_block);
}

/* The side channel is a SEQPACKET socketpair (one message per packet) when one process forks
 * both sides, a TCP connection between the roles (--role): then messages are read by length. */
static int msg_stream;

static int msg_send(int fd, const struct msg *m)
{
	size_t len = msg_len(m), done = 0;
	while (done < len) {
		ssize_t w = send(fd, (const char *)m + done, len - done, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0 || (!msg_stream && (size_t)w != len))
			return -1;
		done += (size_t)w;
	}
	return 0;
}

/* Receive one message within timeout_ms (< 0: wait, checking every second that the parent
 * process still lives when parent_pid > 0). Returns 0, or -1 with why set. */
static int msg_recv(int fd, struct msg *m, int64_t timeout_ms, pid_t parent_pid, const char **why)
{
	uint64_t deadline = timeout_ms >= 0 ? now_us() + (uint64_t)timeout_ms * 1000 : 0;
	const size_t head = offsetof(struct msg, blk);
	size_t got = 0, want = msg_stream ? head : sizeof(*m);
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int wait_ms = 1000;
		if (deadline) {
			uint64_t t = now_us();
			if (t >= deadline) {
				*why = "timed out waiting for the other process";
				return -1;
			}
			wait_ms = (int)((deadline - t + 999) / 1000);
			if (wait_ms > 1000)
				wait_ms = 1000;
		}
		int rc = poll(&pfd, 1, wait_ms);
		if (rc < 0 && errno != EINTR) {
			*why = "poll failed";
			return -1;
		}
		if (rc > 0) {
			ssize_t r = recv(fd, (char *)m + got, want - got, 0);
			if (r < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (r == 0 || (r < 0 && errno == ECONNRESET)) {
				*why = "the other process has gone";
				return -1;
			}
			if (r < 0) {
				*why = "receive failed";
				return -1;
			}
			if (msg_stream) {
				got += (size_t)r;
				if (got == head && m->n <= JOB_MAX_BLOCKS)
					want = msg_len(m);
				if (got < want)
					continue;
				r = (ssize_t)got;
			}
			if (r < (ssize_t)offsetof(struct msg, blk) || m->n > JOB_MAX_BLOCKS ||
			    (size_t)r != msg_len(m)) {
				*why = "malformed message from the other process";
				return -1;
			}
			m->a[sizeof(m->a) - 1] = m->b[sizeof(m->b) - 1] = 0;
			m->text[sizeof(m->text) - 1] = 0;
			return 0;
		}
		if (parent_pid > 0 && getppid() != parent_pid) {
			*why = "the decode process has gone";
			return -1;
		}
	}
}

static void send_err(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void send_err(int fd, const char *fmt, ...)
{
	struct msg m = {.type = M_ERR};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m.text, sizeof(m.text), fmt, ap);
	va_end(ap);
	msg_send(fd, &m);
}

/* ---------------------------------------------------------------------------------------------
 * One side's libmori objects
 */
struct side {
	const char *role;
	mori_client *c;
	mori_mem *pool, *peer;
	mori_xfer_list *list;
	uint8_t *base;        /* where pages are filled and verified: the pool, or its shadow */
	/* VRAM pools: a host shadow of the same geometry and a prepared list pairing its page i
	 * with the pool's page i; pages move between the two by same-client transfers */
	mori_mem *shadow;
	mori_xfer_list *stage;
	char name[128];
};

static void side_close(struct side *s)
{
	mori_xfer_list_free(s->stage);
	mori_mem_deregister(s->shadow);
	mori_xfer_list_free(s->list);
	mori_mem_deregister(s->peer);
	mori_mem_deregister(s->pool);
	mori_client_close(s->c);
	memset(s, 0, sizeof(*s));
}

/* Open the client and allocate and publish the pool. Returns 0, or -1 with err set. */
static int side_open(struct side *s, const char *role, const char *rt, const struct geom *g,
		     int mem_kind, char *err, size_t errlen)
{
	char label[64];
	int rc;
	s->role = role;
	snprintf(label, sizeof(label), "kvreplay-%s", role);
	rc = mori_client_open(rt, label, &s->c);
	if (rc) {
		snprintf(err, errlen, "%s: cannot connect to morid (runtime dir %s): %s", role,
			 rt ? rt : getenv("MORI_RUNTIME_DIR") ? getenv("MORI_RUNTIME_DIR")
							      : "/run/mori",
			 mori_strerror(rc));
		return -1;
	}
	rc = mori_mem_alloc(s->c, g->pool_bytes, mem_kind, &s->pool);
	if (rc) {
		if (mem_kind == MORI_MEM_VRAM && (rc == MORI_ENOGPU || rc == MORI_ENOKERNEL))
			snprintf(err, errlen, "%s: --mem vram: no usable GPU here (%s: %s)", role,
				 mori_strerror(rc), mori_client_last_error(s->c));
		else if (mem_kind == MORI_MEM_VRAM)
			snprintf(err, errlen,
				 "%s: --mem vram: libmori cannot allocate a %.1f GiB VRAM pool (%s: %s)",
				 role, g->pool_bytes / 1073741824.0, mori_strerror(rc),
				 mori_client_last_error(s->c));
		else
			snprintf(err, errlen, "%s: cannot allocate a %.1f GiB pool: %s (%s)", role,
				 g->pool_bytes / 1073741824.0, mori_strerror(rc),
				 mori_client_last_error(s->c));
		return -1;
	}
	vlog(role, "allocated %" PRIu64 " bytes", g->pool_bytes);
	s->base = mori_mem_ptr(s->pool);
	if (mem_kind == MORI_MEM_VRAM) {
		mori_desc *d = xcalloc(g->pool_descs, sizeof(*d));
		for (uint64_t i = 0; i < g->pool_descs; i++) {
			d[i].local_offset = d[i].remote_offset = i * g->page_bytes;
			d[i].length = g->page_bytes;
		}
		rc = mori_mem_alloc(s->c, g->pool_bytes, MORI_MEM_HOST, &s->shadow);
		if (rc == MORI_OK)
			rc = mori_xfer_prep(s->shadow, s->pool, d, g->pool_descs, &s->stage);
		free(d);
		if (rc) {
			snprintf(err, errlen, "%s: cannot set up the %.1f GiB host shadow of the VRAM pool: %s (%s)",
				 role, g->pool_bytes / 1073741824.0, mori_strerror(rc),
				 mori_client_last_error(s->c));
			return -1;
		}
		/* the first GPU copy touching the shadow pins it (seconds for GiBs): do it now */
		uint32_t first = 0;
		mori_xfer *x = NULL;
		rc = mori_xfer_submit(s->stage, MORI_OP_READ, &first, 1, NULL, &x);
		if (rc == MORI_OK)
			rc = mori_xfer_wait(x, 60000000);
		mori_xfer_free(x);
		if (rc) {
			snprintf(err, errlen, "%s: cannot stage a page out of the VRAM pool: %s (%s)", role,
				 mori_strerror(rc), mori_client_last_error(s->c));
			return -1;
		}
		s->base = mori_mem_ptr(s->shadow);
		vlog(role, "host shadow of the VRAM pool ready");
	}
	snprintf(s->name, sizeof(s->name), "kvreplay.%d.%s", (int)getpid(), role);
	rc = mori_mem_publish(s->pool, s->name);
	if (rc) {
		snprintf(err, errlen, "%s: cannot publish the pool as %s: %s (%s)", role, s->name,
			 mori_strerror(rc), mori_client_last_error(s->c));
		return -1;
	}
	return 0;
}

/* The initiator opens the target's pool and prepares one descriptor per (layer, K/V, page),
 * pairing page i with page i. node: the target's daemon address, NULL/"" for this node. */
static int side_connect(struct side *s, const struct geom *g, const char *node, const char *name,
			char *err, size_t errlen)
{
	int rc = mori_mem_open_remote(s->c, node, name, &s->peer);
	if (rc) {
		snprintf(err, errlen, "%s: cannot open %s at %s: %s (%s)", s->role, name,
			 node && *node ? node : "this node", mori_strerror(rc),
			 mori_client_last_error(s->c));
		return -1;
	}
	mori_desc *d = xcalloc(g->pool_descs, sizeof(*d));
	for (uint64_t i = 0; i < g->pool_descs; i++) {
		d[i].local_offset = d[i].remote_offset = i * g->page_bytes;
		d[i].length = g->page_bytes;
	}
	vlog(s->role, "opened %s at %s", name, node && *node ? node : "this node");
	rc = mori_xfer_prep(s->pool, s->peer, d, g->pool_descs, &s->list);
	free(d);
	vlog(s->role, "prepared %" PRIu64 " descriptors", g->pool_descs);
	if (rc) {
		snprintf(err, errlen, "%s: cannot prepare %" PRIu64 " descriptors: %s (%s)", s->role,
			 g->pool_descs, mori_strerror(rc), mori_client_last_error(s->c));
		return -1;
	}
	return 0;
}

/* Touch every page of the local pool once, writing or only reading. The first access to a page
 * through a mapping costs a fault (in this VM 3 to 25 us per 4 KiB page, more than copying it,
 * and a first write after a read faults again); a serving system's long-lived pool is past that,
 * so the replay measures from the warm state. */
static void side_warm_local(struct side *s, const struct geom *g, int write)
{
	volatile uint8_t *b = s->base;
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t sum = 0;
	for (uint64_t o = 0; o < g->pool_bytes; o += (uint64_t)(pg > 0 ? pg : 4096)) {
		if (write)
			b[o] = 0;
		else
			sum += b[o];
	}
	(void)sum;
	vlog(s->role, "touched the pool (%s)", write ? "write" : "read");
}

/* The initiator's mapping of the peer pool is warmed the only way the API allows: one transfer
 * over the whole prepared list (no notification). Returns a MORI code. */
static int side_warm_peer(struct side *s, const struct geom *g, int op, int64_t timeout_ms,
			  char *err, size_t errlen)
{
	/* 256 MiB per submission: each well inside its deadline even at first-touch speed */
	size_t per = (size_t)((256ull << 20) / g->page_bytes);
	if (per < 1)
		per = 1;
	uint32_t *idx = xcalloc(per, sizeof(uint32_t));
	mori_xfer_opts xo = {.timeout_us = timeout_ms * 1000};
	int rc = MORI_OK;
	for (uint64_t i = 0; i < g->pool_descs && rc == MORI_OK; i += per) {
		size_t n = g->pool_descs - i < per ? (size_t)(g->pool_descs - i) : per;
		mori_xfer *x = NULL;
		for (size_t k = 0; k < n; k++)
			idx[k] = (uint32_t)(i + k);
		rc = mori_xfer_submit(s->list, op, idx, n, &xo, &x);
		if (rc == MORI_OK)
			rc = mori_xfer_wait(x, timeout_ms * 1000);
		if (rc)
			snprintf(err, errlen, "%s: warm-up transfer failed: %s (%s)", s->role,
				 mori_strerror(rc), mori_client_last_error(s->c));
		mori_xfer_free(x);
	}
	free(idx);
	vlog(s->role, "warm-up transfer over the whole pool done");
	return rc;
}

/* The reference for the replay's transfer rate, through the same library, list, pages and batch
 * size: stream the whole pool in pool order, `batch` descriptors per submission, one submission
 * at a time (mori-bench io's loop, which however reuses the same bytes each iteration), until
 * `target` bytes have moved. Returns a MORI code; bytes and microseconds through the pointers. */
static int side_sweep(struct side *s, const struct geom *g, int op, uint64_t batch, uint64_t target,
		      int64_t timeout_ms, uint64_t *bytes, uint64_t *us)
{
	if (batch > g->pool_descs)
		batch = g->pool_descs;
	uint32_t *idx = xcalloc(batch, sizeof(uint32_t));
	mori_xfer_opts xo = {.timeout_us = timeout_ms * 1000};
	uint64_t pos = 0, t0 = 0;
	int rc = MORI_OK;
	*bytes = 0;
	for (int warm = 1; rc == MORI_OK && (warm || *bytes < target); warm = 0) {
		for (uint64_t k = 0; k < batch; k++)
			idx[k] = (uint32_t)((pos + k) % g->pool_descs);
		pos = (pos + batch) % g->pool_descs;
		mori_xfer *x = NULL;
		if (!warm && !t0)
			t0 = now_us();
		rc = mori_xfer_submit(s->list, op, idx, batch, &xo, &x);
		if (rc == MORI_OK)
			rc = mori_xfer_wait(x, timeout_ms * 1000);
		if (rc == MORI_OK && !warm)
			*bytes += mori_xfer_bytes(x);
		mori_xfer_free(x);
	}
	*us = t0 ? now_us() - t0 : 0;
	free(idx);
	return rc;
}

/* Indices of every page of the job's blocks, layer-major (vLLM's per-layer K and V tensors). */
static size_t job_indices(const struct geom *g, const struct msg *m, uint32_t *idx)
{
	size_t n = 0;
	for (int l = 0; l < g->layers; l++)
		for (int k = 0; k < g->kv; k++)
			for (uint32_t b = 0; b < m->n; b++)
				for (uint32_t p = 0; p < g->pages_per_block; p++)
					idx[n++] = desc_index(g, l, k,
							      (uint64_t)m->blk[b].slot *
									  g->pages_per_block +
								  p);
	return n;
}

/* VRAM pools: move the job's pages from the host shadow into the pool (op WRITE, after a fill)
 * or from the pool into the shadow (op READ, before verifying). Returns a MORI code. */
static int side_stage(struct side *s, const struct geom *g, const struct opts *o, int op,
		      const struct msg *m, uint32_t *idx, char *msg, size_t msglen)
{
	if (!s->stage)
		return MORI_OK;
	size_t n = job_indices(g, m, idx);
	mori_xfer_opts xo = {.timeout_us = o->timeout_ms * 1000};
	mori_xfer *x = NULL;
	int rc = mori_xfer_submit(s->stage, op, idx, n, &xo, &x);
	if (rc == MORI_OK)
		rc = mori_xfer_wait(x, o->timeout_ms * 1000);
	if (rc)
		snprintf(msg, msglen, "%s: staging %s the VRAM pool: %s (%s)", s->role,
			 op == MORI_OP_WRITE ? "into" : "out of", mori_strerror(rc), mori_client_last_error(s->c));
	mori_xfer_free(x);
	return rc;
}

/* Is job `id` one whose bytes are filled and verified? */
static int job_sampled(const struct opts *o, uint32_t id)
{
	return o->verify_every <= 1 || id % o->verify_every == 0;
}

/* Submit the job's pages (in parts of at most batch indices) and wait for all of them.
 * Returns a MORI code; t0 and t1 get the submission and completion times. */
static int move_job(struct side *s, const struct geom *g, const struct opts *o, int op,
		    const struct msg *m, uint32_t *idx, uint64_t *t0, uint64_t *t1, uint64_t *bytes,
		    char *msg, size_t msglen)
{
	size_t n = job_indices(g, m, idx);
	size_t per = o->batch ? o->batch : n;
	size_t nx = (n + per - 1) / per;
	mori_xfer **xs = xcalloc(nx, sizeof(*xs));
	int rc = MORI_OK;
	size_t done = 0;
	*bytes = 0;
	*t0 = now_us();
	for (size_t i = 0; i < nx; i++) {
		size_t cnt = n - i * per < per ? n - i * per : per;
		/* the notification goes with the last part: it arrives after all parts landed only
		 * if the parts complete in order, so the parts before it are waited for first */
		mori_xfer_opts xo = {.timeout_us = o->timeout_ms * 1000};
		if (i == nx - 1) {
			if (nx > 1) {
				rc = mori_xfer_wait_all(xs, i, o->timeout_ms * 1000);
				if (rc)
					break;
			}
			xo.has_notif = 1;
			xo.notif_tag = m->job;
		}
		uint64_t dl = now_us() + (uint64_t)o->timeout_ms * 1000;
		for (;;) {
			rc = mori_xfer_submit(s->list, op, idx + i * per, cnt, &xo, &xs[i]);
			if (rc != MORI_EAGAIN || now_us() > dl)
				break;
			/* submission ring full: let earlier parts finish first */
			if (i > 0)
				mori_xfer_wait(xs[i - 1], 1000);
			else
				usleep(100);
		}
		if (rc)
			break;
		done = i + 1;
	}
	if (rc == MORI_OK)
		rc = mori_xfer_wait_all(xs, done, o->timeout_ms * 1000);
	*t1 = now_us();
	if (rc) {
		const char *why = NULL;
		for (size_t i = 0; i < done && !why; i++)
			if (mori_xfer_status(xs[i], &why) == MORI_OK)
				why = NULL;
		snprintf(msg, msglen, "job %u (%zu descriptors): %s: %s", m->job, n,
			 mori_strerror(rc), why ? why : mori_client_last_error(s->c));
	}
	for (size_t i = 0; i < done; i++) {
		if (rc == MORI_OK)
			*bytes += mori_xfer_bytes(xs[i]);
		mori_xfer_free(xs[i]);
	}
	free(xs);
	return rc;
}

/* Take notifications until one with tag arrives (others are kept in pend). Returns 0, or -1 on
 * timeout or error. */
struct tagset {
	uint64_t *v;
	size_t n, cap;
};

static int tagset_take(struct tagset *t, uint64_t tag)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->v[i] == tag) {
			t->v[i] = t->v[--t->n];
			return 1;
		}
	return 0;
}

static void tagset_add(struct tagset *t, uint64_t tag)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 64;
		t->v = xrealloc(t->v, t->cap * sizeof(uint64_t));
	}
	t->v[t->n++] = tag;
}

/* Poll notifications into t, waiting up to wait_us for the first. Returns count or error. */
static int notif_collect(mori_client *c, struct tagset *t, int64_t wait_us)
{
	mori_notif nb[64];
	int k = mori_notif_poll(c, nb, 64, wait_us);
	for (int i = 0; i < k; i++)
		tagset_add(t, nb[i].tag);
	return k;
}

static int notif_wait(mori_client *c, struct tagset *t, uint64_t tag, int64_t timeout_ms)
{
	uint64_t deadline = now_us() + (uint64_t)timeout_ms * 1000;
	while (!tagset_take(t, tag)) {
		uint64_t now = now_us();
		if (now >= deadline)
			return MORI_ETIMEDOUT;
		int k = notif_collect(c, t, (int64_t)(deadline - now));
		if (k < 0)
			return k;
	}
	return MORI_OK;
}

/* Deadline of the set-up steps (allocation, warm-up): the transfer timeout plus 30 s per GiB
 * of pool, since touching a page the first time costs up to about 25 us on this VM and the
 * warm-up touches each page up to three times. */
/* What both sides must agree on (they may be separate commands with --role): put in a hello,
 * checked against the other side's. */
static void hello_geom(struct msg *m, const struct opts *o, const struct geom *g)
{
	m->u0 = g->bytes_per_block;
	m->u1 = g->pool_blocks;
	m->code = o->mode * 16 + o->mem_kind;
}

static int hello_geom_differs(const struct msg *m, const struct opts *o, const struct geom *g, char *err,
			      size_t len)
{
	struct msg mine;
	hello_geom(&mine, o, g);
	if (m->u0 == mine.u0 && m->u1 == mine.u1 && m->code == mine.code)
		return 0;
	snprintf(err, len,
		 "prefill and decode disagree: %llu vs %llu bytes per block, %llu vs %llu pool blocks, "
		 "mode/memory %d vs %d (give both the same --model, --page-tokens, --pool-*, --mode, --mem)",
		 (unsigned long long)m->u0, (unsigned long long)mine.u0, (unsigned long long)m->u1,
		 (unsigned long long)mine.u1, m->code, mine.code);
	return -1;
}

static int64_t setup_deadline_ms(const struct opts *o, const struct geom *g)
{
	return o->timeout_ms + 30000 * (int64_t)((g->pool_bytes + (1ull << 30) - 1) >> 30);
}

/* ---------------------------------------------------------------------------------------------
 * The prefill process
 */
static int run_prefill(const struct opts *o, const struct geom *g, int fd, pid_t parent)
{
	struct side s = {0};
	struct msg *m = xcalloc(1, sizeof(*m));
	char err[512];
	const char *why;
	uint32_t *idx = xcalloc((size_t)g->descs_per_block * JOB_MAX_BLOCKS, sizeof(uint32_t));
	struct tagset notifs = {0};
	uint64_t fill_us = 0, xfers = 0;
	int rc = 2;

	if (side_open(&s, "prefill", o->prefill_rt, g, o->mem_kind, err, sizeof(err))) {
		send_err(fd, "%s", err);
		goto out;
	}
	memset(m, 0, offsetof(struct msg, blk));
	m->type = M_HELLO;
	snprintf(m->a, sizeof(m->a), "%s", mori_client_node(s.c));
	snprintf(m->b, sizeof(m->b), "%s", s.name);
	hello_geom(m, o, g);
	if (msg_send(fd, m))
		goto out;
	if (msg_recv(fd, m, setup_deadline_ms(o, g), parent, &why) || m->type != M_HELLO)
		goto out; /* the decode side reports its own failure */
	if (hello_geom_differs(m, o, g, err, sizeof(err))) {
		fprintf(stderr, "mori-kvreplay: prefill: %s\n", err);
		goto out; /* decode found the same and says so */
	}
	/* warm-up, overlapping the decode side's: prefill writes its pool (fill) through its own
	 * mapping, and in push mode the decode pool through its mapping of it */
	if (o->warmup)
		side_warm_local(&s, g, 1);
	if (o->mode == MODE_PUSH) {
		/* the decode pool is opened at its daemon's address when that is another daemon */
		int cross = o->role != ROLE_BOTH ? strcmp(m->a, mori_client_node(s.c)) != 0
						 : strcmp(o->prefill_rt ? o->prefill_rt : "",
							  o->decode_rt ? o->decode_rt : "") != 0;
		const char *node = o->decode_node ? o->decode_node : cross ? m->a : NULL;
		if (node && !*node) {
			send_err(fd, "prefill: the decode daemon reports no peer address (set listen= "
				     "in its config, or --decode-node)");
			goto out;
		}
		if (side_connect(&s, g, node, m->b, err, sizeof(err)) ||
		    (o->warmup &&
		     side_warm_peer(&s, g, MORI_OP_WRITE, o->timeout_ms, err, sizeof(err)))) {
			send_err(fd, "%s", err);
			goto out;
		}
	}
	memset(m, 0, offsetof(struct msg, blk));
	m->type = M_READY;
	if (msg_send(fd, m))
		goto out;

	for (;;) {
		if (msg_recv(fd, m, -1, parent, &why)) {
			fprintf(stderr, "mori-kvreplay: prefill: %s\n", why);
			goto out;
		}
		if (m->type == M_END)
			break;
		if (m->type == M_BENCH && o->mode == MODE_PUSH) {
			struct msg *r = xcalloc(1, offsetof(struct msg, blk));
			r->type = M_BENCH;
			r->code = side_sweep(&s, g, MORI_OP_WRITE, m->u0, m->u1, o->timeout_ms, &r->t0,
					     &r->t1);
			int srv = msg_send(fd, r);
			free(r);
			if (srv)
				goto out;
			continue;
		}
		if (m->type != M_JOB)
			goto out;
		uint32_t job = m->job;
		uint64_t t = now_us();
		for (uint32_t b = 0; b < m->n; b++) {
			if (m->blk[b].slot >= g->pool_blocks) {
				fprintf(stderr, "mori-kvreplay: prefill: slot out of range\n");
				goto out;
			}
			if (job_sampled(o, job))
				block_pages(g, s.base, m->blk[b].hash, m->blk[b].slot, 0);
		}
		struct msg *r = xcalloc(1, offsetof(struct msg, blk));
		r->type = M_DONE;
		r->job = job;
		if (job_sampled(o, job))
			r->code = side_stage(&s, g, o, MORI_OP_WRITE, m, idx, r->text, sizeof(r->text));
		fill_us += now_us() - t;
		if (r->code) {
			/* reported as this job's transfer failure */
		} else if (o->mode == MODE_PUSH) {
			r->code = move_job(&s, g, o, MORI_OP_WRITE, m, idx, &r->t0, &r->t1, &r->bytes,
					   r->text, sizeof(r->text));
			xfers++;
		} else {
			notif_collect(s.c, &notifs, 0);
		}
		int srv = msg_send(fd, r);
		free(r);
		if (srv)
			goto out;
	}
	/* pull mode: every successful read should have notified us */
	uint64_t expect = m->u0;
	uint64_t deadline = now_us() + (uint64_t)o->timeout_ms * 1000;
	if (o->mode == MODE_PULL)
		while (notifs.n < expect && now_us() < deadline)
			if (notif_collect(s.c, &notifs, (int64_t)(deadline - now_us())) < 0)
				break;
	memset(m, 0, offsetof(struct msg, blk));
	m->type = M_STATS;
	m->u0 = fill_us;
	m->u1 = o->mode == MODE_PULL ? (notifs.n < expect ? expect - notifs.n : 0) : 0;
	m->t0 = xfers;
	rc = msg_send(fd, m) ? 2 : 0;
out:
	side_close(&s);
	free(notifs.v);
	free(idx);
	free(m);
	return rc;
}

/* ---------------------------------------------------------------------------------------------
 * The decode process: scheduling, prefix cache, verification
 */
struct job {
	uint32_t id;
	size_t req;          /* request index */
	int last_of_req;
	struct msg *m;
};

struct sched {
	const struct opts *o;
	const struct geom *g;
	const struct trace *t;
	struct pool pool;
	struct side s;
	int fd;              /* to prefill; -1 in dry-run */
	struct job *q;       /* in-flight jobs, FIFO ring of o->window */
	size_t qhead, qn;
	uint32_t next_job;
	uint32_t *idx;
	struct tagset notifs;
	uint64_t *req_t0;    /* first submit per request (0: none yet) */
	uint64_t *req_t1;
	uint32_t *req_jobs_left;
	uint8_t *req_dispatched; /* all of the request's jobs have been sent */
	uint64_t pull_ok;    /* pull: successful reads that should have notified prefill */
	struct results *res;
	uint64_t t_start, last_progress;
	int fatal;
};

static void progress(struct sched *sc, size_t done, int final)
{
	uint64_t t = now_us();
	if (!sc->o->progress || (!final && t - sc->last_progress < 200000))
		return;
	sc->last_progress = t;
	size_t total = sc->t->n, w = 30, fillw = total ? done * w / total : w;
	double s = (t - sc->t_start) / 1e6;
	char bar[64];
	for (size_t i = 0; i < w; i++)
		bar[i] = i < fillw ? '#' : '.';
	bar[w] = 0;
	fprintf(stderr, "\r[%s] %zu/%zu requests  %.2f GB  %.2f GB/s  %" PRIu64 " verify failures%s",
		bar, done, total, sc->res->bytes_moved / 1e9,
		s > 0 ? sc->res->bytes_moved / 1e9 / s : 0.0, sc->res->verify_failures,
		final ? "\n" : "");
}

/* A request's last transfer has completed: its latency is first submission to last completion. */
static void req_finished(struct sched *sc, size_t req)
{
	if (sc->req_t0[req] && sc->fd >= 0)
		lat_push(sc->res, sc->req_t1[req] - sc->req_t0[req]);
}

/* Finish the oldest in-flight job: push: its completion and notification, then verification;
 * pull: the prefill side has filled it, now read it and verify. */
static int complete_oldest(struct sched *sc)
{
	const struct opts *o = sc->o;
	const struct geom *g = sc->g;
	struct results *res = sc->res;
	struct job *j = &sc->q[sc->qhead];
	struct msg *m = j->m, r;
	const char *why = "unexpected message";
	r.type = 0;
	int code = MORI_OK;
	uint64_t t0 = 0, t1 = 0, bytes = 0;

	if (sc->fd >= 0) {
		if (msg_recv(sc->fd, &r, o->timeout_ms, 0, &why) || r.type != M_DONE ||
		    r.job != j->id) {
			note_error(res, "decode: no completion for job %u from prefill: %s", j->id,
				   why);
			sc->fatal = 1;
			return -1;
		}
		if (o->mode == MODE_PUSH) {
			code = r.code;
			t0 = r.t0;
			t1 = r.t1;
			bytes = r.bytes;
			if (code) {
				note_error(res, "transfer failed: %s", r.text);
			} else if ((code = notif_wait(sc->s.c, &sc->notifs, j->id, o->timeout_ms))) {
				note_error(res, "job %u: no notification within %" PRId64 " ms (%s)",
					   j->id, o->timeout_ms, mori_strerror(code));
				res->notif_missing++;
			}
		} else if (r.code) {
			code = r.code; /* prefill could not stage the pages into its VRAM pool */
			note_error(res, "%s", r.text);
		} else {
			char text[192];
			code = move_job(&sc->s, g, o, MORI_OP_READ, m, sc->idx, &t0, &t1, &bytes,
					text, sizeof(text));
			if (code)
				note_error(res, "transfer failed: %s", text);
			else
				sc->pull_ok++;
		}
	}
	if (code == MORI_OK) {
		res->jobs++;
		res->bytes_moved += bytes;
		res->xfer_busy_us += t1 - t0;
		if (sc->fd >= 0 && job_sampled(o, j->id)) {
			uint64_t tv = now_us();
			char text[192];
			int src = side_stage(&sc->s, g, o, MORI_OP_READ, m, sc->idx, text, sizeof(text));
			if (src) {
				note_error(res, "%s", text);
				res->transfer_errors++;
			}
			for (uint32_t b = 0; b < m->n && !src; b++) {
				uint64_t bad =
					block_pages(g, sc->s.base, m->blk[b].hash, m->blk[b].slot, 1);
				if (bad && !res->verify_failures)
					fprintf(stderr,
						"mori-kvreplay: job %u: block %" PRIu64
						" (slot %u): %" PRIu64 " pages differ from the derivation\n",
						j->id, m->blk[b].hash, m->blk[b].slot, bad);
				res->verify_failures += bad;
			}
			res->verify_us += now_us() - tv;
			if (!src)
				res->bytes_verified += (uint64_t)m->n * g->bytes_per_block;
		}
		res->blocks_moved += m->n;
		res->descriptors += (uint64_t)m->n * g->descs_per_block;
		if (!sc->req_t0[j->req] || t0 < sc->req_t0[j->req])
			sc->req_t0[j->req] = t0;
		if (t1 > sc->req_t1[j->req])
			sc->req_t1[j->req] = t1;
	} else {
		res->transfer_errors++;
	}
	for (uint32_t b = 0; b < m->n; b++)
		pool_unpin(&sc->pool, m->blk[b].slot, code == MORI_OK);
	if (--sc->req_jobs_left[j->req] == 0 && sc->req_dispatched[j->req])
		req_finished(sc, j->req);
	free(j->m);
	j->m = NULL;
	sc->qhead = (sc->qhead + 1) % (size_t)o->window;
	sc->qn--;
	return 0;
}

static int dispatch(struct sched *sc, struct msg *m, size_t req)
{
	struct job *j = &sc->q[(sc->qhead + sc->qn) % (size_t)sc->o->window];
	m->type = M_JOB;
	m->job = sc->next_job++;
	j->id = m->job;
	j->req = req;
	j->m = m;
	sc->qn++;
	sc->req_jobs_left[req]++;
	if (sc->fd >= 0 && msg_send(sc->fd, m)) {
		note_error(sc->res, "decode: cannot send a job to prefill: %s", strerror(errno));
		sc->fatal = 1;
		return -1;
	}
	return 0;
}

static struct msg *new_job_msg(void)
{
	struct msg *m = xcalloc(1, sizeof(*m));
	return m;
}

/* Replay the trace: the scheduling is the same with or without a daemon (dry run). */
static void schedule(struct sched *sc)
{
	const struct opts *o = sc->o;
	const struct trace *t = sc->t;
	struct results *res = sc->res;
	sc->t_start = now_us();
	for (size_t i = 0; i < t->n && !sc->fatal; i++) {
		const struct request *rq = &t->req[i];
		if (!o->afap && !o->dry_run) {
			uint64_t rel = rq->ts_ms > t->req[0].ts_ms ? rq->ts_ms - t->req[0].ts_ms : 0;
			uint64_t due = sc->t_start + (uint64_t)((double)rel * 1000.0 / o->speedup);
			/* idle until the arrival: finish what is in flight first */
			while (now_us() < due && sc->qn && !sc->fatal)
				complete_oldest(sc);
			for (uint64_t n; (n = now_us()) < due;) {
				uint64_t d = due - n;
				struct timespec ts = {.tv_sec = (time_t)(d / 1000000),
						      .tv_nsec = (long)(d % 1000000) * 1000};
				nanosleep(&ts, NULL);
			}
		}
		res->requests++;
		res->blocks_total += rq->nh;
		struct msg *m = new_job_msg();
		uint64_t moved_before = res->blocks_skipped;
		for (uint32_t k = 0; k < rq->nh && !sc->fatal; k++) {
			uint64_t h = t->hash[rq->h0 + k];
			if (pool_lookup(&sc->pool, h) != NIL) {
				res->blocks_skipped++;
				continue;
			}
			uint32_t s;
			while ((s = pool_alloc(&sc->pool, h)) == NIL && !sc->fatal) {
				/* every slot is pinned by in-flight jobs (this one included) */
				if (m->n) {
					if (dispatch(sc, m, i))
						break;
					m = new_job_msg();
				}
				if (!sc->qn) {
					note_error(res, "pool of %u blocks cannot make progress",
						   sc->pool.nblocks);
					sc->fatal = 1;
					break;
				}
				complete_oldest(sc);
			}
			if (s == NIL)
				break;
			m->blk[m->n].hash = h;
			m->blk[m->n].slot = s;
			if (++m->n == JOB_MAX_BLOCKS) {
				if (dispatch(sc, m, i))
					break;
				m = new_job_msg();
			}
			while (sc->qn >= (size_t)o->window && !sc->fatal)
				complete_oldest(sc);
		}
		if (m->n && !sc->fatal) {
			dispatch(sc, m, i);
		} else {
			free(m);
		}
		/* a request moved in several jobs may have finished some already */
		sc->req_dispatched[i] = 1;
		if (sc->req_jobs_left[i] == 0)
			req_finished(sc, i);
		if (res->blocks_skipped - moved_before == rq->nh)
			res->requests_cached++;
		while (sc->qn >= (size_t)o->window && !sc->fatal)
			complete_oldest(sc);
		progress(sc, i + 1, 0);
	}
	while (sc->qn && !sc->fatal)
		complete_oldest(sc);
	res->run_us = now_us() - sc->t_start;
	res->evictions = sc->pool.evictions;
	progress(sc, t->n, 1);
}

static void sched_init(struct sched *sc, const struct opts *o, const struct geom *g,
		       const struct trace *t, struct results *res)
{
	memset(sc, 0, sizeof(*sc));
	sc->o = o;
	sc->g = g;
	sc->t = t;
	sc->res = res;
	sc->fd = -1;
	pool_init(&sc->pool, g->pool_blocks);
	sc->q = xcalloc((size_t)o->window, sizeof(*sc->q));
	sc->req_t0 = xcalloc(t->n, sizeof(uint64_t));
	sc->req_t1 = xcalloc(t->n, sizeof(uint64_t));
	sc->req_jobs_left = xcalloc(t->n, sizeof(uint32_t));
	sc->req_dispatched = xcalloc(t->n, 1);
}

static void sched_fini(struct sched *sc)
{
	for (size_t i = 0; i < sc->qn; i++)
		free(sc->q[(sc->qhead + i) % (size_t)sc->o->window].m);
	free(sc->q);
	free(sc->req_t0);
	free(sc->req_t1);
	free(sc->req_jobs_left);
	free(sc->req_dispatched);
	free(sc->idx);
	free(sc->notifs.v);
	pool_free(&sc->pool);
}

/* ---------------------------------------------------------------------------------------------
 * Output
 */
static const char *topology(const struct opts *o)
{
	if (o->dry_run)
		return "dry-run";
	if (o->role != ROLE_BOTH)
		return o->role_cross ? "cross-node" : "same-node";
	return strcmp(o->prefill_rt ? o->prefill_rt : "", o->decode_rt ? o->decode_rt : "")
		       ? "cross-node"
		       : "same-node";
}

static void report(const struct opts *o, const struct geom *g, const struct trace *t,
		   struct results *r, const char *source)
{
	if (r->nlat) /* lat is NULL when no request moved anything: qsort(NULL, 0) is undefined */
		qsort(r->lat, r->nlat, sizeof(uint64_t), cmp_u64);
	double s = r->run_us / 1e6, xs = r->xfer_busy_us / 1e6;
	double gbps = s > 0 ? r->bytes_moved / 1e9 / s : 0, xgbps = xs > 0 ? r->bytes_moved / 1e9 / xs : 0;
	double dps = s > 0 ? r->descriptors / s : 0;
	double iog = r->io_us ? r->io_bytes / 1e9 / (r->io_us / 1e6) : 0;
	uint64_t p50 = percentile(r->lat, r->nlat, 50), p90 = percentile(r->lat, r->nlat, 90);
	uint64_t p99 = percentile(r->lat, r->nlat, 99), pmax = r->nlat ? r->lat[r->nlat - 1] : 0;
	const char *mode = o->mode == MODE_PUSH ? "push" : "pull";
	if (o->json) {
		cJSON *j = cJSON_CreateObject(), *lat = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "tool", "mori-kvreplay");
		cJSON_AddStringToObject(j, "version", mori_version());
		cJSON_AddStringToObject(j, "trace", source);
		cJSON_AddBoolToObject(j, "synthetic", t->synthetic);
		cJSON_AddNumberToObject(j, "bad_lines_skipped", (double)t->bad_lines);
		cJSON_AddStringToObject(j, "model", g->p->name);
		cJSON_AddNumberToObject(j, "page_tokens", g->page_tokens);
		cJSON_AddNumberToObject(j, "page_bytes", (double)g->page_bytes);
		cJSON_AddNumberToObject(j, "descriptors_per_block", (double)g->descs_per_block);
		cJSON_AddNumberToObject(j, "bytes_per_block", (double)g->bytes_per_block);
		cJSON_AddNumberToObject(j, "pool_blocks", g->pool_blocks);
		cJSON_AddNumberToObject(j, "pool_bytes", (double)g->pool_bytes);
		cJSON_AddStringToObject(j, "topology", topology(o));
		cJSON_AddStringToObject(j, "mode", mode);
		cJSON_AddStringToObject(j, "mem", o->mem_kind == MORI_MEM_VRAM ? "vram" : "host");
		cJSON_AddNumberToObject(j, "window", o->window);
		cJSON_AddNumberToObject(j, "batch", (double)o->batch);
		if (o->afap || o->dry_run)
			cJSON_AddStringToObject(j, "pace", "as-fast-as-possible");
		else
			cJSON_AddNumberToObject(j, "speedup", o->speedup);
		cJSON_AddNumberToObject(j, "requests", (double)r->requests);
		cJSON_AddNumberToObject(j, "requests_fully_cached", (double)r->requests_cached);
		cJSON_AddNumberToObject(j, "transfers", (double)r->jobs);
		cJSON_AddNumberToObject(j, "blocks_total", (double)r->blocks_total);
		cJSON_AddNumberToObject(j, "blocks_moved", (double)r->blocks_moved);
		cJSON_AddNumberToObject(j, "blocks_skipped", (double)r->blocks_skipped);
		cJSON_AddNumberToObject(j, "evictions", (double)r->evictions);
		cJSON_AddNumberToObject(j, "bytes_moved", (double)r->bytes_moved);
		cJSON_AddNumberToObject(j, "bytes_verified", (double)r->bytes_verified);
		cJSON_AddNumberToObject(j, "verify_every", (double)o->verify_every);
		cJSON_AddNumberToObject(j, "descriptors", (double)r->descriptors);
		cJSON_AddBoolToObject(j, "warmup", o->warmup && !o->dry_run);
		cJSON_AddNumberToObject(j, "setup_s", r->setup_us / 1e6);
		cJSON_AddNumberToObject(j, "run_s", s);
		cJSON_AddNumberToObject(j, "transfer_busy_s", xs);
		cJSON_AddNumberToObject(j, "fill_s", r->fill_us / 1e6);
		cJSON_AddNumberToObject(j, "verify_s", r->verify_us / 1e6);
		cJSON_AddNumberToObject(j, "gbps_run", gbps);
		cJSON_AddNumberToObject(j, "gbps_transfer", xgbps);
		cJSON_AddNumberToObject(j, "descriptors_per_s", dps);
		if (r->io_us) {
			cJSON_AddNumberToObject(j, "io_baseline_batch", (double)r->io_batch);
			cJSON_AddNumberToObject(j, "io_baseline_bytes", (double)r->io_bytes);
			cJSON_AddNumberToObject(j, "io_baseline_gbps", iog);
			cJSON_AddNumberToObject(j, "transfer_vs_io_baseline", iog > 0 ? xgbps / iog : 0);
		}
		cJSON_AddNumberToObject(lat, "count", (double)r->nlat);
		cJSON_AddNumberToObject(lat, "p50", (double)p50);
		cJSON_AddNumberToObject(lat, "p90", (double)p90);
		cJSON_AddNumberToObject(lat, "p99", (double)p99);
		cJSON_AddNumberToObject(lat, "max", (double)pmax);
		cJSON_AddItemToObject(j, "latency_us", lat);
		cJSON_AddNumberToObject(j, "verification_failures", (double)r->verify_failures);
		cJSON_AddNumberToObject(j, "transfer_errors", (double)r->transfer_errors);
		cJSON_AddNumberToObject(j, "notifications_missing", (double)r->notif_missing);
		cJSON_AddStringToObject(j, "first_error", r->first_error);
		char *txt = cJSON_Print(j);
		puts(txt);
		free(txt);
		cJSON_Delete(j);
		return;
	}
	if (t->synthetic)
		printf("NOTE: %s; replaying the built-in SYNTHETIC workload (same statistics: median "
		       "~6 900 tokens, ~37%% repeated blocks), not the real trace\n", source);
	printf("mori-kvreplay %s: %s, %s (%s), %s memory, %s%s\n", mori_version(),
	       t->synthetic ? "synthetic workload" : source, topology(o),
	       o->mode == MODE_PUSH ? "push: prefill writes" : "pull: decode reads",
	       o->mem_kind == MORI_MEM_VRAM ? "GPU" : "host",
	       o->afap || o->dry_run ? "as fast as possible" : "paced",
	       t->bad_lines ? ", bad lines skipped" : "");
	printf("  model            %s: %d layers x %s, %d-token pages of %" PRIu64 " B, %.1f MiB "
	       "per 512-token block (%" PRIu64 " descriptors)\n",
	       g->p->name, g->layers, g->kv == 2 ? "K+V" : "latent", g->page_tokens,
	       g->page_bytes, g->bytes_per_block / 1048576.0, g->descs_per_block);
	printf("  pool             %u blocks (%.2f GiB) per side, window %d, batch %s\n",
	       g->pool_blocks, g->pool_bytes / 1073741824.0, o->window,
	       o->batch ? "limited" : "whole request");
	if (t->bad_lines)
		printf("  bad lines        %zu skipped\n", t->bad_lines);
	printf("  requests         %" PRIu64 " (%" PRIu64 " fully cached at decode)\n", r->requests,
	       r->requests_cached);
	printf("  blocks           %" PRIu64 " moved, %" PRIu64 " skipped by prefix reuse (of %" PRIu64
	       "), %" PRIu64 " evicted\n",
	       r->blocks_moved, r->blocks_skipped, r->blocks_total, r->evictions);
	printf("  bytes moved      %" PRIu64 " (%.2f GB), %" PRIu64 " verified", r->bytes_moved,
	       r->bytes_moved / 1e9, r->bytes_verified);
	if (o->verify_every > 1)
		printf(" (filled and verified: one transfer in %" PRIu64 ")", o->verify_every);
	printf("\n");
	printf("  run time         %.2f s (transfers %.2f s, fill %.2f s, verify %.2f s); set-up "
	       "%.2f s%s\n",
	       s, xs, r->fill_us / 1e6, r->verify_us / 1e6, r->setup_us / 1e6,
	       o->warmup && !o->dry_run ? " with warm-up" : "");
	printf("  throughput       %.2f GB/s over the run, %.2f GB/s inside transfers\n", gbps,
	       xgbps);
	printf("  descriptors      %" PRIu64 " (%.0f per second over the run)\n", r->descriptors,
	       dps);
	if (r->io_us)
		printf("  io baseline      %.2f GB/s streaming the same pool through the same list, %" PRIu64
		       " descriptors per submission; the replay's transfers ran at %.0f%% of it\n",
		       iog, r->io_batch, iog > 0 ? 100 * xgbps / iog : 0.0);
	printf("  latency (us)     p50 %" PRIu64 "  p90 %" PRIu64 "  p99 %" PRIu64 "  max %" PRIu64
	       "  (%zu requests with a transfer, submit to completion)\n",
	       p50, p90, p99, pmax, r->nlat);
	printf("  verification     %" PRIu64 " failures%s\n", r->verify_failures,
	       r->verify_failures ? " (pages whose bytes differ)" : "");
	if (r->transfer_errors || r->notif_missing)
		printf("  errors           %" PRIu64 " failed transfers, %" PRIu64
		       " missing notifications; first: %s\n",
		       r->transfer_errors, r->notif_missing, r->first_error);
	else if (r->first_error[0])
		printf("  error            %s\n", r->first_error);
}

/* ---------------------------------------------------------------------------------------------
 * main
 */
/* ---------------------------------------------------------------------------------------------
 * --role: prefill and decode as two commands (two machines), joined by one TCP connection
 */
static int coord_resolve(const char *spec, struct addrinfo **out, char *err, size_t len)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec || !colon[1] || (size_t)(colon - spec) >= sizeof(host)) {
		snprintf(err, len, "--coord %s: expected HOST:PORT", spec);
		return -1;
	}
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = 0;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
	int rc = getaddrinfo(host, colon + 1, &hints, out);
	if (rc) {
		snprintf(err, len, "--coord %s: %s", spec, gai_strerror(rc));
		return -1;
	}
	return 0;
}

static void coord_tune(int fd)
{
	int one = 1, idle = 10, intvl = 5, cnt = 3; /* a vanished peer is noticed within ~25 s */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* The prefill role: listen at spec and take one decode connection within timeout_ms. */
static int coord_accept(const char *spec, int64_t timeout_ms, char *err, size_t len)
{
	struct addrinfo *ai;
	if (coord_resolve(spec, &ai, err, len))
		return -1;
	int one = 1, fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1)) {
		snprintf(err, len, "--coord %s: cannot listen: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	int rc = poll(&pfd, 1, timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms);
	int c = rc > 0 ? accept4(fd, NULL, NULL, SOCK_CLOEXEC) : -1;
	if (c < 0)
		snprintf(err, len, "--coord %s: no decode side connected within %lld ms", spec, (long long)timeout_ms);
	close(fd);
	if (c >= 0)
		coord_tune(c);
	return c;
}

/* The decode role: connect to the prefill role at spec, retrying until timeout_ms (it may start
 * after us). */
static int coord_connect(const char *spec, int64_t timeout_ms, char *err, size_t len)
{
	uint64_t deadline = now_us() + (uint64_t)timeout_ms * 1000;
	for (;;) {
		struct addrinfo *ai;
		if (coord_resolve(spec, &ai, err, len))
			return -1;
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
		int e = errno;
		freeaddrinfo(ai);
		if (ok) {
			coord_tune(fd);
			return fd;
		}
		if (fd >= 0)
			close(fd);
		if (now_us() > deadline) {
			snprintf(err, len, "--coord %s: no prefill side within %lld ms (%s)", spec, (long long)timeout_ms,
				 strerror(e));
			return -1;
		}
		usleep(100000);
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mori-kvreplay [options]\n"
		"Replays an LLM serving trace as KV-cache transfers from a prefill client to a decode\n"
		"client through morid, verifying every byte received.\n"
		"  --trace PATH           JSONL trace (default " DEFAULT_TRACE
		";\n"
		"                         when the default is absent a synthetic workload is used)\n"
		"  --synthetic            use the built-in synthetic workload\n"
		"  --requests N           replay the first N requests (default: all)\n"
		"  --model NAME           llama3-8b (default), llama3-70b-tp8, qwen3-8b,\n"
		"                         deepseek-v3-mla, tiny\n"
		"  --page-tokens N        tokens per page (default: the model's; must divide 512)\n"
		"  --pool-mib N           pool size per side in MiB (default 4096)\n"
		"  --pool-blocks N        pool size per side in 512-token blocks (overrides --pool-mib)\n"
		"  --mem host|vram        pool memory (default host)\n"
		"  --speedup X            arrivals at trace time / X (default 1)\n"
		"  --as-fast-as-possible  ignore timestamps\n"
		"  --window N             transfers in flight (default 2)\n"
		"  --batch N              at most N descriptors per submission (default: whole request)\n"
		"  --mode push|pull       push: prefill writes, notifies decode (default);\n"
		"                         pull: decode reads (vLLM NIXL), notifies prefill\n"
		"  --runtime-dir DIR      morid runtime dir of both clients (default $MORI_RUNTIME_DIR)\n"
		"  --prefill-runtime-dir DIR, --decode-runtime-dir DIR\n"
		"                         one daemon per side (cross node)\n"
		"  --prefill-node H:P, --decode-node H:P\n"
		"                         peer address to open that side's pool at (default: what its\n"
		"                         daemon reports when the runtime dirs differ)\n"
		"  --timeout-ms N         deadline of each transfer and wait (default 30000)\n"
		"  --role prefill|decode  run only that side, as its own command (e.g. on another\n"
		"                         machine, each with --runtime-dir of its node's morid); the\n"
		"                         two sides meet at --coord. Both need the same --model,\n"
		"                         --page-tokens, --pool-*, --mode and --mem (checked); the\n"
		"                         decode side reads the trace and prints the summary\n"
		"  --coord HOST:PORT      where the prefill role listens and the decode role connects\n"
		"                         (each waits up to 120 s, or the set-up deadline if longer)\n"
		"  --skip-bad-lines       skip malformed trace lines (counted) instead of failing\n"
		"  --json                 print the summary as JSON\n"
		"  --progress, --no-progress  progress bar on stderr (default: when stderr is a tty)\n"
		"  --dry-run              schedule only (prefix cache and counts), no daemon\n"
		"  --verbose              set-up steps with times on stderr\n"
		"  --no-io-baseline       skip the reference after the replay: the same list streamed\n"
		"                         through the whole pool in pool order, same batch size\n"
		"  --verify-every N       fill and verify every byte of one transfer in N (default 1:\n"
		"                         all); the others move the pool's current bytes unchecked.\n"
		"                         For runs whose bytes the CPU cannot generate and check in\n"
		"                         time (the whole trace on GPU memory: ~18 TB for llama3-8b)\n"
		"  --no-warmup            skip the warm-up before the replay (each side touches its\n"
		"                         pool, then one transfer over the whole pool): without it the\n"
		"                         first use of each page pays a page fault\n"
		"Exit: 0 all verified, 1 verification failures or failed transfers, 2 bad input or "
		"set-up failure.\n");
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

#ifndef KVREPLAY_NO_MAIN
int main(int argc, char **argv)
{
	struct opts o = {
		.trace_path = DEFAULT_TRACE,
		.model = "llama3-8b",
		.pool_mib = 4096,
		.speedup = 1.0,
		.window = 2,
		.timeout_ms = 30000,
		.progress = -1,
		.mem_kind = MORI_MEM_HOST,
		.warmup = 1,
		.io_baseline = 1,
		.verify_every = 1,
	};
	const char *rt = NULL;
	enum { O_TRACE = 256, O_SYN, O_REQ, O_MODEL, O_PT, O_PMIB, O_PBLK, O_MEM, O_SPEED, O_AFAP,
	       O_WIN, O_BATCH, O_MODE, O_RT, O_PRT, O_DRT, O_PN, O_DN, O_TMO, O_SKIP, O_JSON,
	       O_PROG, O_NOPROG, O_DRY, O_NOWARM, O_VERB, O_NOIOB, O_HELP, O_VEVERY, O_ROLE, O_COORD };
	static const struct option lo[] = {
		{"trace", 1, 0, O_TRACE}, {"synthetic", 0, 0, O_SYN}, {"requests", 1, 0, O_REQ},
		{"model", 1, 0, O_MODEL}, {"page-tokens", 1, 0, O_PT}, {"pool-mib", 1, 0, O_PMIB},
		{"pool-blocks", 1, 0, O_PBLK}, {"mem", 1, 0, O_MEM}, {"speedup", 1, 0, O_SPEED},
		{"as-fast-as-possible", 0, 0, O_AFAP}, {"window", 1, 0, O_WIN},
		{"batch", 1, 0, O_BATCH}, {"mode", 1, 0, O_MODE}, {"runtime-dir", 1, 0, O_RT},
		{"prefill-runtime-dir", 1, 0, O_PRT}, {"decode-runtime-dir", 1, 0, O_DRT},
		{"prefill-node", 1, 0, O_PN}, {"decode-node", 1, 0, O_DN},
		{"timeout-ms", 1, 0, O_TMO}, {"skip-bad-lines", 0, 0, O_SKIP}, {"json", 0, 0, O_JSON},
		{"progress", 0, 0, O_PROG}, {"no-progress", 0, 0, O_NOPROG}, {"dry-run", 0, 0, O_DRY},
		{"no-warmup", 0, 0, O_NOWARM}, {"verbose", 0, 0, O_VERB}, {"no-io-baseline", 0, 0, O_NOIOB}, {"help", 0, 0, O_HELP},
		{"verify-every", 1, 0, O_VEVERY}, {"role", 1, 0, O_ROLE}, {"coord", 1, 0, O_COORD}, {0, 0, 0, 0}};
	uint64_t v;
	int c;
	t_prog = now_us();
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case O_TRACE: o.trace_path = optarg; o.trace_explicit = 1; break;
		case O_SYN: o.force_synthetic = 1; break;
		case O_REQ:
			if (parse_u64(optarg, 1, SIZE_MAX, &v))
				goto badarg;
			o.requests = v;
			break;
		case O_MODEL: o.model = optarg; break;
		case O_PT:
			if (parse_u64(optarg, 1, TRACE_BLOCK_TOKENS, &v))
				goto badarg;
			o.page_tokens = (int)v;
			break;
		case O_PMIB:
			if (parse_u64(optarg, 1, (uint64_t)1 << 30, &o.pool_mib))
				goto badarg;
			break;
		case O_PBLK:
			if (parse_u64(optarg, 1, UINT32_MAX / 2, &o.pool_blocks))
				goto badarg;
			break;
		case O_MEM:
			if (!strcmp(optarg, "host"))
				o.mem_kind = MORI_MEM_HOST;
			else if (!strcmp(optarg, "vram"))
				o.mem_kind = MORI_MEM_VRAM;
			else
				goto badarg;
			break;
		case O_SPEED: {
			char *end;
			o.speedup = strtod(optarg, &end);
			if (*end || !(o.speedup > 0) || isinf(o.speedup))
				goto badarg;
			break;
		}
		case O_AFAP: o.afap = 1; break;
		case O_WIN:
			if (parse_u64(optarg, 1, 64, &v))
				goto badarg;
			o.window = (int)v;
			break;
		case O_BATCH:
			if (parse_u64(optarg, 1, UINT32_MAX, &o.batch))
				goto badarg;
			break;
		case O_MODE:
			if (!strcmp(optarg, "push"))
				o.mode = MODE_PUSH;
			else if (!strcmp(optarg, "pull"))
				o.mode = MODE_PULL;
			else
				goto badarg;
			break;
		case O_RT: rt = optarg; break;
		case O_PRT: o.prefill_rt = optarg; break;
		case O_DRT: o.decode_rt = optarg; break;
		case O_PN: o.prefill_node = optarg; break;
		case O_DN: o.decode_node = optarg; break;
		case O_TMO:
			if (parse_u64(optarg, 1, 3600000, &v))
				goto badarg;
			o.timeout_ms = (int64_t)v;
			break;
		case O_SKIP: o.skip_bad = 1; break;
		case O_JSON: o.json = 1; break;
		case O_PROG: o.progress = 1; break;
		case O_NOPROG: o.progress = 0; break;
		case O_DRY: o.dry_run = 1; break;
		case O_VERB: verbose = 1; break;
		case O_NOIOB: o.io_baseline = 0; break;
		case O_NOWARM: o.warmup = 0; break;
		case O_VEVERY:
			if (parse_u64(optarg, 1, UINT32_MAX, &v))
				goto badarg;
			o.verify_every = v;
			break;
		case O_ROLE:
			if (!strcmp(optarg, "prefill"))
				o.role = ROLE_PREFILL;
			else if (!strcmp(optarg, "decode"))
				o.role = ROLE_DECODE;
			else if (!strcmp(optarg, "both"))
				o.role = ROLE_BOTH;
			else
				goto badarg;
			break;
		case O_COORD: o.coord = optarg; break;
		case O_HELP:
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		continue;
	badarg:
		fprintf(stderr, "mori-kvreplay: bad value for --%s: \"%s\"\n",
			lo[c - O_TRACE].name, optarg);
		return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "mori-kvreplay: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if ((o.role != ROLE_BOTH) != (o.coord != NULL) || (o.role != ROLE_BOTH && o.dry_run)) {
		fprintf(stderr, "mori-kvreplay: --role prefill|decode and --coord HOST:PORT go together%s\n",
			o.dry_run ? " (and not with --dry-run)" : "");
		return 2;
	}
	if (!o.prefill_rt)
		o.prefill_rt = rt;
	if (!o.decode_rt)
		o.decode_rt = rt;
	if (o.progress < 0)
		o.progress = isatty(2);
	/* the pull-mode notification goes to prefill, which counts them; push needs decode's */
	const struct preset *p = preset_find(o.model);
	if (!p) {
		fprintf(stderr, "mori-kvreplay: unknown model \"%s\" (llama3-8b, llama3-70b-tp8, "
				"qwen3-8b, deepseek-v3-mla, tiny)\n", o.model);
		return 2;
	}
	struct geom g;
	char err[512];
	if (geom_init(&g, p, o.page_tokens, o.pool_blocks, o.pool_mib, err, sizeof(err))) {
		fprintf(stderr, "mori-kvreplay: %s\n", err);
		return 2;
	}

	int64_t setup_ms = setup_deadline_ms(&o, &g);
	int64_t coord_ms = setup_ms > 120000 ? setup_ms : 120000;
	if (o.role == ROLE_PREFILL) {
		msg_stream = 1;
		int fd = coord_accept(o.coord, coord_ms, err, sizeof(err));
		if (fd < 0) {
			fprintf(stderr, "mori-kvreplay: prefill: %s\n", err);
			return 2;
		}
		int prc = run_prefill(&o, &g, fd, 0);
		close(fd);
		if (!o.json)
			fprintf(stderr, "mori-kvreplay: prefill: %s\n", prc ? "stopped early (the decode side reports why)" : "done");
		return prc;
	}

	/* the workload */
	struct trace t = {0};
	char source[600];
	FILE *f = o.force_synthetic ? NULL : fopen(o.trace_path, "r");
	if (!f && !o.force_synthetic && (o.trace_explicit || errno != ENOENT)) {
		fprintf(stderr, "mori-kvreplay: cannot open trace %s: %s\n", o.trace_path,
			strerror(errno));
		return 2;
	}
	if (f) {
		int rc = trace_read(&t, f, o.trace_path, o.requests, o.skip_bad, err, sizeof(err));
		fclose(f);
		if (rc || !t.n) {
			if (rc)
				fprintf(stderr, "mori-kvreplay: %s\n", err);
			else
				fprintf(stderr, "mori-kvreplay: %s holds no requests\n", o.trace_path);
			trace_free(&t);
			return 2;
		}
		snprintf(source, sizeof(source), "%s", o.trace_path);
	} else {
		trace_synthetic(&t, o.requests ? o.requests : 12031);
		if (o.force_synthetic)
			snprintf(source, sizeof(source), "synthetic workload requested");
		else
			snprintf(source, sizeof(source), "trace %s not found", o.trace_path);
		if (!o.json)
			fprintf(stderr, "mori-kvreplay: %s: using the built-in SYNTHETIC workload\n",
				source);
	}

	struct results res = {0};
	struct sched sc;
	sched_init(&sc, &o, &g, &t, &res);
	int rc = 0;
	pid_t child = -1;
	int sv[2] = {-1, -1};
	struct msg *m = NULL;
	uint64_t t_setup = now_us();
	if (!o.dry_run) {
		if (o.role == ROLE_DECODE) {
			msg_stream = 1;
			if ((sv[0] = coord_connect(o.coord, coord_ms, err, sizeof(err))) < 0) {
				fprintf(stderr, "mori-kvreplay: decode: %s\n", err);
				rc = 2;
				goto done;
			}
		} else {
			fflush(NULL);
			if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
				fprintf(stderr, "mori-kvreplay: socketpair: %s\n", strerror(errno));
				rc = 2;
				goto done;
			}
			pid_t me = getpid();
			/* fork before any libmori call: the library's threads do not survive fork */
			child = fork();
			if (child < 0) {
				fprintf(stderr, "mori-kvreplay: fork: %s\n", strerror(errno));
				close(sv[0]);
				close(sv[1]);
				rc = 2;
				goto done;
			}
			if (child == 0) {
				close(sv[0]);
				_exit(run_prefill(&o, &g, sv[1], me));
			}
			close(sv[1]);
		}
		sc.fd = sv[0];
		sc.idx = xcalloc((size_t)g.descs_per_block * JOB_MAX_BLOCKS, sizeof(uint32_t));
		m = xcalloc(1, sizeof(*m));
		const char *why;
		if (side_open(&sc.s, "decode", o.decode_rt, &g, o.mem_kind, err, sizeof(err))) {
			fprintf(stderr, "mori-kvreplay: %s\n", err);
			rc = 2;
			goto done;
		}
		if (msg_recv(sc.fd, m, setup_ms, 0, &why)) {
			fprintf(stderr, "mori-kvreplay: prefill set-up: %s\n", why);
			rc = 2;
			goto done;
		}
		if (m->type != M_HELLO) {
			fprintf(stderr, "mori-kvreplay: %s\n", m->type == M_ERR ? m->text : "prefill "
											 "set-up failed");
			rc = 2;
			goto done;
		}
		char pnode[128], pname[128];
		snprintf(pnode, sizeof(pnode), "%s", m->a);
		snprintf(pname, sizeof(pname), "%s", m->b);
		int differs = hello_geom_differs(m, &o, &g, err, sizeof(err));
		o.role_cross = strcmp(pnode, mori_client_node(sc.s.c)) != 0;
		memset(m, 0, offsetof(struct msg, blk));
		m->type = M_HELLO;
		snprintf(m->a, sizeof(m->a), "%s", mori_client_node(sc.s.c));
		snprintf(m->b, sizeof(m->b), "%s", sc.s.name);
		hello_geom(m, &o, &g);
		if (differs) {
			msg_send(sc.fd, m); /* prefill sees the same difference and stops */
			fprintf(stderr, "mori-kvreplay: %s\n", err);
			rc = 2;
			goto done;
		}
		if (msg_send(sc.fd, m)) {
			fprintf(stderr, "mori-kvreplay: prefill has gone\n");
			rc = 2;
			goto done;
		}
		/* push: decode only reads its pool (verification); pull: the warm-up read writes it */
		if (o.warmup && o.mode == MODE_PUSH)
			side_warm_local(&sc.s, &g, 0);
		if (o.mode == MODE_PULL) {
			const char *node = o.prefill_node ? o.prefill_node
					   : !strcmp(topology(&o), "cross-node") ? pnode
										  : NULL;
			if (node && !*node) {
				fprintf(stderr, "mori-kvreplay: decode: the prefill daemon reports no "
						"peer address (set listen= in its config, or "
						"--prefill-node)\n");
				rc = 2;
				goto done;
			}
			if (side_connect(&sc.s, &g, node, pname, err, sizeof(err)) ||
			    (o.warmup && side_warm_peer(&sc.s, &g, MORI_OP_READ, o.timeout_ms, err,
							sizeof(err)))) {
				fprintf(stderr, "mori-kvreplay: %s\n", err);
				rc = 2;
				goto done;
			}
		}
		m->type = 0;
		if (msg_recv(sc.fd, m, setup_ms, 0, &why) || m->type != M_READY) {
			fprintf(stderr, "mori-kvreplay: %s%s\n", m->type == M_ERR ? "" : "prefill set-up: ",
				m->type == M_ERR ? m->text : why);
			rc = 2;
			goto done;
		}
		free(m);
		m = NULL;
	}
	res.setup_us = now_us() - t_setup;

	schedule(&sc);

	if (!o.dry_run && !sc.fatal && o.io_baseline) {
		/* batch: the replay's, else one 512-token block's descriptors */
		uint64_t batch = o.batch ? o.batch : g.descs_per_block;
		uint64_t target = 2 * g.pool_bytes < (4ull << 30) ? 4ull << 30 : 2 * g.pool_bytes;
		int code;
		const char *why = "unexpected message";
		res.io_batch = batch;
		if (o.mode == MODE_PUSH) {
			m = xcalloc(1, sizeof(*m));
			m->type = M_BENCH;
			m->u0 = batch;
			m->u1 = target;
			if (msg_send(sc.fd, m) || msg_recv(sc.fd, m, 4 * o.timeout_ms, 0, &why) ||
			    m->type != M_BENCH) {
				note_error(&res, "prefill did not run the io baseline: %s", why);
				res.transfer_errors++;
				code = MORI_OK;
			} else {
				code = m->code;
				res.io_bytes = m->t0;
				res.io_us = m->t1;
			}
			free(m);
			m = NULL;
		} else {
			code = side_sweep(&sc.s, &g, MORI_OP_READ, batch, target, o.timeout_ms,
					  &res.io_bytes, &res.io_us);
		}
		if (code) {
			note_error(&res, "io baseline transfer failed: %s", mori_strerror(code));
			res.transfer_errors++;
		}
	}

	if (!o.dry_run && !sc.fatal) {
		const char *why;
		m = xcalloc(1, sizeof(*m));
		m->type = M_END;
		m->u0 = sc.pull_ok; /* pull: the notifications prefill should have had */
		if (msg_send(sc.fd, m) || msg_recv(sc.fd, m, 2 * o.timeout_ms, 0, &why) ||
		    m->type != M_STATS) {
			note_error(&res, "prefill did not report its counters");
			res.transfer_errors++;
		} else {
			res.fill_us = m->u0;
			res.notif_missing += m->u1;
		}
	}
	report(&o, &g, &t, &res, source);
	rc = res.verify_failures || res.transfer_errors || res.notif_missing || sc.fatal ? 1 : 0;
done:
	free(m);
	side_close(&sc.s);
	if (child > 0) {
		close(sc.fd);
		sc.fd = -1;
		/* the child exits on EOF; give it the deadline, then stop it */
		uint64_t deadline = now_us() + 10000000;
		int st;
		while (waitpid(child, &st, WNOHANG) == 0) {
			if (now_us() > deadline) {
				kill(child, SIGKILL);
				waitpid(child, &st, 0);
				break;
			}
			usleep(10000);
		}
	} else if (sc.fd >= 0) {
		close(sc.fd); /* --role decode: prefill ends on EOF */
		sc.fd = -1;
	}
	sched_fini(&sc);
	free(res.lat);
	trace_free(&t);
	return rc;
}
#endif
