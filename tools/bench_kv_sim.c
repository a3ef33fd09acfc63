/* mori-bench kv --sim: the eviction policies of the KV store (daemon/kv/kv_policy.c) on a request
 * trace, offline, beside the exact references computed here: LRU, Belady's MIN (evict the block
 * whose next use is farthest, from next-use times known in advance) and an infinite cache.
 *
 *   mori-bench kv --sim TRACE [--capacity 1000,10000,50000] [--policy lru,s3fifo,...|all]
 *   mori-bench kv --sim synthetic ...     (a built-in multi-turn workload, when no trace is at hand)
 *   mori-bench kv --sim TRACE --store RUNDIR --policy P   (also through morid, its policy P)
 *
 * TRACE: JSON lines with a "hash_ids" array per request (the Mooncake trace format: ids of the
 * prompt's blocks, equal ids = shared prefix). Capacities count blocks.
 *
 * The references treat the trace as one sequence of block ids, each one reference (a miss
 * inserts it). The policies see only what a serving system tells the store, in its order: per
 * request a BatchExistsConsecutive over its ids (k found), gets of those k (hits), then one batch
 * put of the rest in chain order, depth = index, parent = the previous item of that batch (the
 * only predecessor a store knows); a put of a block still present replaces it in place (a hit).
 * Rates, both in % of all block references:
 *   per-block  the block was in the cache when referenced (the references' definition);
 *   prefix     the block lies in its request's leading run of found blocks (what a prefix match
 *              reuses: a block after the first miss is recomputed anyway). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_kv.h"
#include "kv/kv_policy.h"

struct trace {
	uint32_t *id;  /* dense block ids, request after request */
	size_t nref;
	size_t *off;   /* request r: id[off[r] .. off[r+1]) */
	size_t nreq;
	uint32_t nuniq;
};

struct rates {
	uint64_t block, prefix; /* hits of each definition */
};

static void *xalloc(size_t n)
{
	void *p = calloc(n ? n : 1, 1);
	if (!p) {
		fprintf(stderr, "mori-bench kv: out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

static void *xgrow(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p) {
		fprintf(stderr, "mori-bench kv: out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

/* ---- the trace ---- */

/* Raw ids to dense 0..n-1 (open addressing; the table doubles at half load). */
struct idmap {
	uint64_t *key;
	uint32_t *val;
	size_t cap, n;
};

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint32_t idmap_get(struct idmap *m, uint64_t raw)
{
	if (2 * (m->n + 1) > m->cap) {
		struct idmap o = *m;
		m->cap = o.cap ? o.cap * 2 : 1024;
		m->key = xalloc(m->cap * sizeof(*m->key));
		m->val = xalloc(m->cap * sizeof(*m->val));
		m->n = 0;
		for (size_t i = 0; i < o.cap; i++)
			if (o.key[i]) {
				size_t j = mix64(o.key[i]) & (m->cap - 1);
				while (m->key[j])
					j = (j + 1) & (m->cap - 1);
				m->key[j] = o.key[i];
				m->val[j] = o.val[i];
				m->n++;
			}
		free(o.key);
		free(o.val);
	}
	uint64_t k = raw + 1; /* 0 marks an empty slot */
	size_t j = mix64(k) & (m->cap - 1);
	while (m->key[j] && m->key[j] != k)
		j = (j + 1) & (m->cap - 1);
	if (!m->key[j]) {
		m->key[j] = k;
		m->val[j] = (uint32_t)m->n++;
	}
	return m->val[j];
}

static void push_ref(struct trace *t, size_t *cap, uint32_t id)
{
	if (t->nref == *cap) {
		*cap = *cap ? *cap * 2 : 4096;
		t->id = xgrow(t->id, *cap * sizeof(*t->id));
	}
	t->id[t->nref++] = id;
}

static void end_request(struct trace *t, size_t *cap)
{
	if ((t->nreq + 2) > *cap) {
		*cap = *cap ? *cap * 2 : 1024;
		t->off = xgrow(t->off, *cap * sizeof(*t->off));
	}
	if (!t->nreq)
		t->off[0] = 0;
	t->off[++t->nreq] = t->nref;
}

/* JSON lines, one request per line; a line that is not an object with an array of non-negative
 * integer hash_ids is an error naming the line. Blank lines are skipped. */
static int load_trace(const char *path, struct trace *t)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "mori-bench kv: %s: %s\n", path, strerror(errno));
		return -1;
	}
	struct idmap m = {0};
	size_t refcap = 0, reqcap = 0, linecap = 0, lineno = 0;
	char *line = NULL;
	ssize_t len;
	int rc = 0;
	while ((len = getline(&line, &linecap, f)) >= 0) {
		lineno++;
		if (strspn(line, " \t\r\n") == (size_t)len)
			continue;
		cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
		const cJSON *ids = o ? cJSON_GetObjectItemCaseSensitive(o, "hash_ids") : NULL;
		const char *bad = !o ? "not JSON" : !cJSON_IsArray(ids) ? "no hash_ids array" : NULL;
		const cJSON *e, *each = bad ? (const cJSON *)0 : ids;
		cJSON_ArrayForEach(e, each) {
			double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
			if (!(v >= 0 && v < 9007199254740992.0 && v == (double)(uint64_t)v)) {
				bad = "a hash id is not a non-negative integer";
				break;
			}
			push_ref(t, &refcap, idmap_get(&m, (uint64_t)v));
		}
		cJSON_Delete(o);
		if (bad) {
			fprintf(stderr, "mori-bench kv: %s:%zu: %s\n", path, lineno, bad);
			rc = -1;
			break;
		}
		end_request(t, &reqcap);
	}
	if (!rc && ferror(f)) {
		fprintf(stderr, "mori-bench kv: %s: read error\n", path);
		rc = -1;
	}
	if (!rc && !t->nref) {
		fprintf(stderr, "mori-bench kv: %s: no block references\n", path);
		rc = -1;
	}
	free(line);
	fclose(f);
	t->nuniq = (uint32_t)m.n;
	free(m.key);
	free(m.val);
	return rc;
}

/* A multi-turn chat workload: sessions share a system prompt of SYS blocks; each turn's prompt
 * is the previous one plus 1..4 new blocks (the old last block is partial, so it changes), the
 * sessions interleaved at random; a fixed seed, so every run sees the same sequence. */
static void synthetic_trace(struct trace *t)
{
	enum { SESSIONS = 400, ACTIVE = 24, TURNS_MAX = 12, SYS = 2 };
	size_t refcap = 0, reqcap = 0;
	uint64_t rng = 42, next_id = SYS;
	struct sess { uint32_t len, turns, ids[TURNS_MAX * 4 + 8]; } *s = xalloc(sizeof(*s) * ACTIVE);
	unsigned started = 0;
	for (unsigned a = 0; a < ACTIVE; a++, started++)
		s[a].len = 0, s[a].turns = 0;
	while (1) {
		rng = mix64(rng);
		unsigned a = (unsigned)(rng % ACTIVE);
		struct sess *x = &s[a];
		if (x->turns == 0) { /* a new session: the system prompt, then its first message */
			x->ids[0] = 0, x->ids[1] = 1, x->len = SYS;
		} else {
			x->len--; /* the previous partial block is not reused */
		}
		unsigned add = 1 + (unsigned)((rng >> 20) % 4);
		for (unsigned i = 0; i < add; i++)
			x->ids[x->len++] = (uint32_t)next_id++;
		for (unsigned i = 0; i < x->len; i++)
			push_ref(t, &refcap, x->ids[i]);
		end_request(t, &reqcap);
		if (++x->turns >= 1 + (rng >> 40) % TURNS_MAX) {
			if (started >= SESSIONS)
				break;
			x->turns = 0, started++;
		}
	}
	t->nuniq = (uint32_t)next_id;
	free(s);
}

/* ---- the references ---- */

/* Prefix hits from per-reference hit flags: each request's leading run. */
static uint64_t prefix_hits(const struct trace *t, const uint8_t *hit)
{
	uint64_t h = 0;
	for (size_t r = 0; r < t->nreq; r++)
		for (size_t i = t->off[r]; i < t->off[r + 1] && hit[i]; i++)
			h++;
	return h;
}

static uint64_t count(const uint8_t *hit, size_t n)
{
	uint64_t h = 0;
	for (size_t i = 0; i < n; i++)
		h += hit[i];
	return h;
}

/* Exact LRU over the id sequence: a doubly linked list of dense ids, most recent at the head. */
static struct rates ref_lru(const struct trace *t, uint64_t cap, uint8_t *hit)
{
	uint32_t none = UINT32_MAX, head = none, tail = none;
	uint32_t *prev = xalloc(t->nuniq * sizeof(*prev)), *next = xalloc(t->nuniq * sizeof(*next));
	uint8_t *in = xalloc(t->nuniq);
	uint64_t used = 0;
	for (size_t i = 0; i < t->nref; i++) {
		uint32_t x = t->id[i];
		hit[i] = in[x];
		if (in[x]) { /* unlink */
			if (prev[x] != none) next[prev[x]] = next[x]; else head = next[x];
			if (next[x] != none) prev[next[x]] = prev[x]; else tail = prev[x];
		} else {
			if (used == cap) {
				uint32_t v = tail;
				tail = prev[v];
				if (tail != none) next[tail] = none; else head = none;
				in[v] = 0;
				used--;
			}
			in[x] = 1;
			used++;
		}
		prev[x] = none, next[x] = head;
		if (head != none) prev[head] = x; else tail = x;
		head = x;
	}
	free(prev), free(next), free(in);
	return (struct rates){count(hit, t->nref), prefix_hits(t, hit)};
}

/* Belady's MIN: on a miss with the cache full, evict the resident block used again farthest in
 * the future (never = farthest of all). A max-heap of (next use, id) with stale entries dropped
 * when they surface. */
struct hent { uint64_t at; uint32_t id; };

static void heap_push(struct hent *h, size_t *n, struct hent e)
{
	size_t i = (*n)++;
	while (i && h[(i - 1) / 2].at < e.at) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = e;
}

static struct hent heap_pop(struct hent *h, size_t *n)
{
	struct hent top = h[0], e = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1].at > h[c].at)
			c++;
		if (h[c].at <= e.at)
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = e;
	return top;
}

static struct rates ref_belady(const struct trace *t, uint64_t cap, uint8_t *hit)
{
	const uint64_t never = UINT64_MAX;
	uint64_t *nextuse = xalloc(t->nref * sizeof(*nextuse)), *cur = xalloc(t->nuniq * sizeof(*cur));
	for (uint32_t x = 0; x < t->nuniq; x++)
		cur[x] = never;
	for (size_t i = t->nref; i-- > 0;) {
		nextuse[i] = cur[t->id[i]];
		cur[t->id[i]] = i;
	}
	uint8_t *in = xalloc(t->nuniq);
	struct hent *h = xalloc((t->nref + 1) * sizeof(*h));
	size_t hn = 0;
	uint64_t used = 0;
	for (size_t i = 0; i < t->nref; i++) {
		uint32_t x = t->id[i];
		hit[i] = in[x];
		if (!in[x]) {
			if (used == cap) {
				for (;;) { /* an entry is current when it still names its id's next use */
					struct hent e = heap_pop(h, &hn);
					if (in[e.id] && cur[e.id] == e.at) {
						in[e.id] = 0;
						break;
					}
				}
				used--;
			}
			in[x] = 1;
			used++;
		}
		cur[x] = nextuse[i];
		heap_push(h, &hn, (struct hent){nextuse[i], x});
	}
	free(nextuse), free(cur), free(in), free(h);
	return (struct rates){count(hit, t->nref), prefix_hits(t, hit)};
}

static struct rates ref_infinite(const struct trace *t, uint8_t *hit)
{
	uint8_t *in = xalloc(t->nuniq);
	for (size_t i = 0; i < t->nref; i++) {
		hit[i] = in[t->id[i]];
		in[t->id[i]] = 1;
	}
	free(in);
	return (struct rates){count(hit, t->nref), prefix_hits(t, hit)};
}

/* ---- a policy of kv_policy.c, fed as a store feeds it ---- */

struct simnode {
	struct kv_pnode pn; /* first: a kv_pnode pointer is its simnode's */
	uint8_t in;
};

static struct rates sim_policy(const struct trace *t, enum kv_policy_kind kind, uint64_t cap, enum kv_policy_kind *ran)
{
	struct kv_policy *p = kv_policy_new(kind, cap);
	if (!p) {
		fprintf(stderr, "mori-bench kv: kv_policy_new(%s): out of memory\n", kv_policy_name(kind));
		exit(1);
	}
	*ran = kv_policy_kind_of(p);
	struct simnode *nd = xalloc(t->nuniq * sizeof(*nd));
	uint64_t used = 0;
	struct rates r = {0, 0};
	for (size_t q = 0; q < t->nreq; q++) {
		const uint32_t *ids = t->id + t->off[q];
		size_t n = t->off[q + 1] - t->off[q], k = 0;
		while (k < n && nd[ids[k]].in) /* BatchExistsConsecutive */
			k++;
		for (size_t i = 0; i < k; i++) /* BatchGet of the found prefix */
			kv_policy_hit(p, &nd[ids[i]].pn);
		r.prefix += k;
		r.block += k;
		for (size_t i = k; i < n; i++) { /* BatchPutWithDepth of the rest */
			struct simnode *x = &nd[ids[i]];
			if (x->in) {
				kv_policy_hit(p, &x->pn);
				r.block++;
				continue;
			}
			kv_policy_expect(p, mix64(ids[i]));
			while (used + 1 > cap) {
				struct kv_pnode *v = kv_policy_victim(p, NULL, NULL);
				if (!v) {
					fprintf(stderr, "mori-bench kv: %s gave no victim in a full cache\n", kv_policy_name(kind));
					exit(1);
				}
				kv_policy_evicted(p, v);
				((struct simnode *)v)->in = 0;
				used--;
			}
			struct simnode *par = i > k && nd[ids[i - 1]].in ? &nd[ids[i - 1]] : NULL;
			kv_policy_insert(p, &x->pn, mix64(ids[i]), 1, (int)i, par ? &par->pn : NULL);
			x->in = 1;
			used++;
		}
	}
	free(nd);
	kv_policy_free(p);
	return r;
}

/* ---- the same requests through morid ---- */

struct store_run {
	mori_umbp *u;
	uint64_t vbytes;
	uint8_t *bufs;              /* a value's room per position of the longest request */
	char (*keys)[24];
	mori_umbp_item *it;
	uint64_t get_errors;
};

static void store_key(struct store_run *s, size_t at, uint32_t id, mori_umbp_item *it, int32_t depth)
{
	snprintf(s->keys[at], sizeof(s->keys[at]), "mooncake/%u", id);
	memset(it, 0, sizeof(*it));
	it->key = (mori_umbp_key){s->keys[at], strlen(s->keys[at])};
	it->buf = s->bufs + at * s->vbytes;
	it->size = s->vbytes;
	it->depth = depth;
}

/* Puts ids[from..to) (positions in the request), each value its id repeated. */
static void store_put(struct store_run *s, const uint32_t *ids, const size_t *pos, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		store_key(s, i, ids[pos[i]], &s->it[i], (int32_t)pos[i]);
		for (size_t b = 0; b + 4 <= s->vbytes; b += 4)
			memcpy((uint8_t *)s->it[i].buf + b, &ids[pos[i]], 4);
	}
	size_t ok = 0;
	int rc = n ? mori_umbp_batch_put(s->u, s->it, n, &ok) : MORI_OK;
	if (rc || ok != n)
		kv_die("store replay: batch put", rc ? rc : s->it[0].status);
}

/* The trace through a running morid, fed as sim_policy feeds a policy: per request an exists of
 * its ids, then in request order gets of the runs found (a get that finds the key is the hit:
 * the store's policy sees it as a use) and puts of the rest with depths; a key found by the
 * exists but evicted before its get (by this request's own puts) is a miss and put. Every got
 * value is checked against its id. */
static struct rates store_replay(const struct trace *t, const char *rundir, uint64_t vbytes, uint64_t *cap)
{
	struct store_run s = {.vbytes = vbytes};
	mori_client *c;
	s.u = kv_open(rundir, "bench-kv-store-replay", &c);
	mori_umbp_stats st = {.size = sizeof(st)};
	int rc = mori_umbp_stats_get(s.u, &st);
	if (rc)
		kv_die("store stats", rc);
	if (st.dram_keys || st.ssd_keys) {
		fprintf(stderr, "mori-bench kv: --store: the store holds %llu keys already: start from an empty one\n",
			(unsigned long long)(st.dram_keys + st.ssd_keys));
		exit(1);
	}
	*cap = st.dram_capacity / vbytes;
	size_t longest = 0;
	for (size_t q = 0; q < t->nreq; q++)
		longest = t->off[q + 1] - t->off[q] > longest ? t->off[q + 1] - t->off[q] : longest;
	s.bufs = xalloc(longest * vbytes);
	s.keys = xalloc(longest * sizeof(*s.keys));
	s.it = xalloc(longest * sizeof(*s.it));
	mori_umbp_key *ks = xalloc(longest * sizeof(*ks));
	uint8_t *present = xalloc(longest), *hit = xalloc(longest);
	size_t *pos = xalloc(longest * sizeof(*pos));
	struct rates r = {0, 0};
	for (size_t q = 0; q < t->nreq; q++) {
		const uint32_t *ids = t->id + t->off[q];
		size_t n = t->off[q + 1] - t->off[q];
		if (!n)
			continue;
		for (size_t i = 0; i < n; i++) {
			store_key(&s, i, ids[i], &s.it[i], (int32_t)i);
			ks[i] = s.it[i].key;
		}
		if ((rc = mori_umbp_batch_exists(s.u, ks, n, present)))
			kv_die("store replay: batch exists", rc);
		memset(hit, 0, n);
		for (size_t i = 0; i < n;) {
			size_t j = i;
			while (j < n && present[j] == present[i])
				j++;
			size_t np = 0;
			if (present[i]) {
				for (size_t k = i; k < j; k++)
					store_key(&s, k - i, ids[k], &s.it[k - i], (int32_t)k);
				size_t ok;
				rc = mori_umbp_batch_get(s.u, s.it, j - i, &ok);
				if (rc)
					kv_die("store replay: batch get", rc);
				for (size_t k = i; k < j; k++) {
					const mori_umbp_item *g = &s.it[k - i];
					uint32_t v = 0;
					if (g->status == MORI_OK)
						memcpy(&v, g->buf, 4);
					if (g->status == MORI_OK && g->len == vbytes && v == ids[k])
						hit[k] = 1;
					else if (g->status == MORI_ENOENT)
						pos[np++] = k;
					else
						s.get_errors++;
				}
			} else {
				for (size_t k = i; k < j; k++)
					pos[np++] = k;
			}
			store_put(&s, ids, pos, np);
			i = j;
		}
		size_t k = 0;
		while (k < n && hit[k])
			k++;
		r.prefix += k;
		for (size_t i = 0; i < n; i++)
			r.block += hit[i];
	}
	if (s.get_errors) {
		fprintf(stderr, "mori-bench kv: store replay: %llu gets failed or returned wrong bytes\n",
			(unsigned long long)s.get_errors);
		exit(1);
	}
	if ((rc = mori_umbp_clear(s.u)))
		kv_die("store replay: clear", rc);
	free(s.bufs), free(s.keys), free(s.it), free(ks), free(present), free(hit), free(pos);
	kv_close(s.u, c);
	return r;
}

/* ---- the command ---- */

static void usage(int code)
{
	fprintf(code ? stderr : stdout,
		"usage: mori-bench kv --sim TRACE|synthetic [--capacity N[,N...]] [--policy NAME[,NAME...]|all]\n"
		"  TRACE: JSON lines with hash_ids (the Mooncake trace format); capacities in blocks\n"
		"  (default 1000,10000,50000); policies of the KV store: lru, default, s3fifo, tinylfu,\n"
		"  prefix-lru, prefix-slru, arc (default all).\n"
		"  --store RUNDIR [--value-bytes 64]: the requests also go through the morid of RUNDIR (its store\n"
		"  empty, its policy named by --policy; capacity: its DRAM tier / value bytes, so run it with\n"
		"  --kv-high-watermark 100 --kv-low-watermark 100 and kv_dram_bytes = blocks x value bytes).\n");
	exit(code);
}

static size_t parse_list(const char *s, uint64_t *out, size_t max, int policies)
{
	size_t n = 0;
	char *dup = strdup(s), *save = NULL;
	for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *e;
		long long v = policies ? kv_policy_parse(tok) : strtoll(tok, &e, 10);
		if (n == max || v < (policies ? 0 : 1) || (!policies && *e)) {
			fprintf(stderr, "mori-bench kv: bad %s '%s' (%s)\n", policies ? "policy" : "capacity", tok,
				n == max ? "too many" : policies ? "lru, default, s3fifo, tinylfu, prefix-lru, prefix-slru, arc" : "a block count >= 1");
			exit(2);
		}
		out[n++] = (uint64_t)v;
	}
	free(dup);
	return n;
}

int bench_kv_sim_main(int argc, char **argv)
{
	const char *path = NULL, *store = NULL;
	uint64_t vbytes = 64;
	uint64_t caps[16] = {1000, 10000, 50000}, pol[KV_POLICY_NKINDS * 2];
	size_t ncap = 3, npol = 0;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			usage(0);
		else if (!strcmp(a, "--sim") && v)
			path = v, i++;
		else if (!strcmp(a, "--capacity") && v)
			ncap = parse_list(v, caps, 16, 0), i++;
		else if (!strcmp(a, "--store") && v)
			store = v, i++;
		else if (!strcmp(a, "--value-bytes") && v && (vbytes = strtoull(v, NULL, 10)) >= 4)
			i++;
		else if (!strcmp(a, "--policy") && v)
			npol = strcmp(v, "all") ? parse_list(v, pol, KV_POLICY_NKINDS * 2, 1) : 0, i++;
		else
			usage(2);
	}
	if (!path)
		usage(2);
	if (!npol)
		for (int k = 0; k < KV_POLICY_NKINDS; k++)
			pol[npol++] = (uint64_t)k;

	struct trace t = {0};
	if (!strcmp(path, "synthetic")) {
		synthetic_trace(&t);
		printf("# trace: built-in synthetic multi-turn workload (no trace file given)\n");
	} else if (load_trace(path, &t)) {
		return 1;
	} else {
		printf("# trace: %s\n", path);
	}
	printf("# %zu requests, %zu block references, %u distinct blocks\n", t.nreq, t.nref, t.nuniq);
	printf("# per-block: %% of references found (a miss inserts); prefix: %% of references in their\n"
	       "# request's leading found run. References: exact LRU, Belady's MIN, infinite, over the id\n"
	       "# sequence; policies: kv_policy.c fed exists/get/put per request as a store sees them.\n");
	uint8_t *hit = xalloc(t.nref);
	double N = (double)t.nref / 100.0;
	struct rates sr;
	if (store) {
		/* the store's capacity decides the only capacity, its policy the only policy */
		if (npol != 1) {
			fprintf(stderr, "mori-bench kv: --store needs --policy naming morid's kv_policy\n");
			return 2;
		}
		double t0 = now_s();
		sr = store_replay(&t, store, vbytes, &caps[0]);
		ncap = 1;
		printf("# store: morid of %s, %llu-byte values: capacity %llu blocks; %.1f s, %.0f block references/s\n",
		       store, (unsigned long long)vbytes, (unsigned long long)caps[0], now_s() - t0,
		       (double)t.nref / (now_s() - t0));
	}
	printf("%-16s %-22s %12s %12s\n", "capacity/blocks", "policy", "per-block/%", "prefix/%");
	for (size_t c = 0; c < ncap; c++) {
		struct rates r;
		r = ref_lru(&t, caps[c], hit);
		printf("%-16llu %-22s %12.2f %12.2f\n", (unsigned long long)caps[c], "ref: lru (exact)", r.block / N, r.prefix / N);
		r = ref_belady(&t, caps[c], hit);
		printf("%-16llu %-22s %12.2f %12.2f\n", (unsigned long long)caps[c], "ref: belady (MIN)", r.block / N, r.prefix / N);
		r = ref_infinite(&t, hit);
		printf("%-16llu %-22s %12.2f %12.2f\n", (unsigned long long)caps[c], "ref: infinite", r.block / N, r.prefix / N);
		for (size_t k = 0; k < npol; k++) {
			enum kv_policy_kind ran;
			char label[64];
			r = sim_policy(&t, (enum kv_policy_kind)pol[k], caps[c], &ran);
			if (pol[k] == KV_POLICY_DEFAULT)
				snprintf(label, sizeof(label), "default (%s)", kv_policy_name(ran));
			else
				snprintf(label, sizeof(label), "%s", kv_policy_name(ran));
			printf("%-16llu %-22s %12.2f %12.2f\n", (unsigned long long)caps[c], label, r.block / N, r.prefix / N);
			if (store) {
				snprintf(label, sizeof(label), "morid: %s", kv_policy_name(ran));
				printf("%-16llu %-22s %12.2f %12.2f\n", (unsigned long long)caps[c], label, sr.block / N,
				       sr.prefix / N);
			}
		}
	}
	free(hit);
	free(t.id);
	free(t.off);
	return 0;
}
