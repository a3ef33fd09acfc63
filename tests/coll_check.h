/* MORI-CCL's checks shared by tests/test_coll_host.c (host heaps) and tests/test_gpu_coll.c (VRAM
 * heaps, one GPU): every rank's input is a function of (rank, element, seed), so each rank
 * computes every collective's expected output itself, independently of libmori: reductions in
 * f32 in rank order and one rounding (f16 through the compiler's _Float16, bf16 by integer
 * rounding), data movement as byte patterns. Outputs carry guard bytes after them that must stay.
 * Include after pe_harness.h (PCHECK / POK) and mori_coll.h. */
#ifndef MORI_TEST_COLL_CHECK_H
#define MORI_TEST_COLL_CHECK_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CC_GUARD 64

enum { CC_AR, CC_AG, CC_RS, CC_A2A, CC_A2AV, CC_BC, CC_NCOLL };
static const char *const cc_names[CC_NCOLL] = {"allreduce", "allgather", "reducescatter", "alltoall", "alltoallv",
					       "broadcast"};

/* Where a case's buffers live and how bytes get there: host memory, or device memory + copies. */
struct cc_io {
	void *(*alloc)(struct cc_io *io, size_t bytes);  /* NULL: out of memory */
	void (*release)(struct cc_io *io, void *p);
	int (*put)(struct cc_io *io, void *dst, const void *host, size_t bytes);
	int (*get)(struct cc_io *io, void *host, const void *src, size_t bytes);
	int (*sync)(struct cc_io *io);                     /* the stream has run every collective */
	void *stream;
	void *priv;
};

static inline uint32_t cc_hash(uint32_t r, uint64_t i, uint32_t seed)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)r << 40) ^ ((uint64_t)seed << 20);
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return (uint32_t)x;
}
static inline float cc_valf(uint32_t r, uint64_t i, uint32_t seed)
{
	return (float)((int)(cc_hash(r, i, seed) % 2001u) - 1000) / 64.0f;
}
static inline uint16_t cc_bf16(float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}
static inline float cc_bf16f(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}
/* Element i of rank r's input as stored (dtype es bytes at p), and read back as a float. */
static inline void cc_store(mori_dtype dt, void *p, size_t i, float v)
{
	if (dt == MORI_FLOAT32)
		((float *)p)[i] = v;
	else if (dt == MORI_FLOAT16)
		((_Float16 *)p)[i] = (_Float16)v;
	else
		((uint16_t *)p)[i] = cc_bf16(v);
}
static inline float cc_load(mori_dtype dt, const void *p, size_t i)
{
	return dt == MORI_FLOAT32 ? ((const float *)p)[i]
	       : dt == MORI_FLOAT16 ? (float)((const _Float16 *)p)[i]
				    : cc_bf16f(((const uint16_t *)p)[i]);
}
static inline int cc_is_float(mori_dtype dt)
{
	return dt == MORI_FLOAT32 || dt == MORI_FLOAT16 || dt == MORI_BFLOAT16;
}
/* Elements [first, first + n_el) of rank r's input (dtype) into h. */
static inline void cc_fill_range(mori_dtype dt, void *h, size_t first, size_t n_el, uint32_t r, uint32_t seed)
{
	size_t es = mori_dtype_size(dt);
	if (cc_is_float(dt))
		for (size_t i = 0; i < n_el; i++)
			cc_store(dt, h, i, cc_valf(r, first + i, seed));
	else
		for (size_t i = 0; i < n_el * es; i++)
			((uint8_t *)h)[i] = (uint8_t)cc_hash(r, first * es + i, seed);
}
static inline void cc_fill(mori_dtype dt, void *h, size_t n_el, uint32_t r, uint32_t seed)
{
	cc_fill_range(dt, h, 0, n_el, r, seed);
}
static inline float cc_op(mori_redop op, float a, float b)
{
	return op == MORI_SUM ? a + b : op == MORI_MAX ? (a > b ? a : b) : (a < b ? a : b);
}

/* The a2av counts of the case: rank s sends (s + 2 * d + count) % (count + 3) elements to d. */
static inline size_t cc_vcount(int s, int d, size_t count) { return ((size_t)s + 2 * (size_t)d + count) % (count + 3); }

/* Run one collective on rank `me` of n and check its output. win: buffers from the heap and
 * registered as windows (the caller passes heap buffers via io). Returns 0 or the line (PCHECK). */
static int cc_case(int me, int n, mori_comm *k, struct cc_io *io, int coll, mori_dtype dt, mori_redop op, size_t count,
		   int inplace, uint32_t seed, char *what, size_t wlen)
{
	size_t es = mori_dtype_size(dt), N = (size_t)n;
	size_t in_el = coll == CC_RS || coll == CC_A2A ? N * count : coll == CC_A2AV ? 0 : count;
	size_t out_el = coll == CC_AG || coll == CC_A2A ? N * count : count;
	size_t scnt[64], sdis[64], rcnt[64], rdis[64];
	if (coll == CC_A2AV) {
		size_t so = 0, ro = 0;
		for (int d = 0; d < n; d++) {
			scnt[d] = cc_vcount(me, d, count);
			sdis[d] = so + (size_t)d; /* gaps between the segments */
			so += scnt[d] + (size_t)d;
			rcnt[d] = cc_vcount(d, me, count);
			rdis[d] = ro;
			ro += rcnt[d] + 1;
		}
		in_el = so + 1;
		out_el = ro + 1;
		inplace = 0;
	}
	snprintf(what, wlen, "%s dtype %d op %d count %zu n %d%s", cc_names[coll], (int)dt, (int)op, count, n,
		 inplace ? " in place" : "");
	/* in place: one buffer of the larger size */
	size_t buf_el = inplace ? (in_el > out_el ? in_el : out_el) : out_el;
	uint8_t *hin = malloc(in_el * es + 1), *hout = malloc(buf_el * es + CC_GUARD), *exp = malloc(out_el * es + 1);
	size_t tmp_el = in_el > out_el ? in_el : out_el;
	for (int r = 0; coll == CC_A2AV && r < n; r++) { /* the longest input of any rank */
		size_t rin = 1;
		for (int d = 0; d < n; d++)
			rin += cc_vcount(r, d, count) + (size_t)d;
		tmp_el = rin > tmp_el ? rin : tmp_el;
	}
	uint8_t *tmp = malloc(tmp_el * es + 1);
	PCHECK(me, hin && hout && exp && tmp, "out of memory");
	uint8_t *dbuf = io->alloc(io, buf_el * es + CC_GUARD);
	uint8_t *dsrc = inplace ? dbuf : io->alloc(io, in_el * es + 1);
	PCHECK(me, dbuf && dsrc, "%s: no buffer", what);
	/* my input: in place for all-gather it sits at my slot of the output */
	cc_fill(dt, hin, in_el, (uint32_t)me, seed);
	uint8_t *srcp = dsrc;
	if (inplace && coll == CC_AG)
		srcp = dbuf + (size_t)me * count * es;
	memset(hout, 0xa5, buf_el * es + CC_GUARD);
	if (inplace && coll == CC_AG)
		memcpy(hout + (size_t)me * count * es, hin, count * es);
	else if (inplace)
		memcpy(hout, hin, in_el * es);
	POK(me, io->put(io, dbuf, hout, buf_el * es + CC_GUARD));
	if (!inplace)
		POK(me, io->put(io, dsrc, hin, in_el * es));
	uint8_t *dst = dbuf;
	if (inplace && coll == CC_RS)
		dst = dbuf + (size_t)me * count * es;
	int root = (int)(seed % (uint32_t)n);
	int rc;
	switch (coll) {
	case CC_AR: rc = mori_allreduce(k, srcp, dst, count, dt, op, io->stream); break;
	case CC_AG: rc = mori_allgather(k, srcp, dst, count, dt, io->stream); break;
	case CC_RS: rc = mori_reducescatter(k, srcp, dst, count, dt, op, io->stream); break;
	case CC_A2A: rc = mori_alltoall(k, srcp, dst, count, dt, io->stream); break;
	case CC_A2AV: rc = mori_alltoallv(k, srcp, scnt, sdis, dst, rcnt, rdis, dt, io->stream); break;
	default: rc = mori_broadcast(k, srcp, dst, count, dt, root, io->stream); break;
	}
	PCHECK(me, rc == 0, "%s: %s (%s)", what, mori_strerror(rc), mori_client_last_error(NULL));
	POK(me, io->sync(io));
	mori_status st;
	rc = mori_comm_status(k, &st);
	PCHECK(me, rc == 0, "%s: status %s pe %d (%s)", what, mori_strerror(rc), st.pe, st.message);
	POK(me, io->get(io, hout, dbuf, buf_el * es + CC_GUARD));
	/* the expected output, from every rank's input regenerated here */
	memset(exp, 0xa5, out_el * es + 1);
	if (coll == CC_AR || coll == CC_RS) {
		size_t base = coll == CC_RS ? (size_t)me * count : 0;
		float *acc = calloc(count, sizeof(float));
		PCHECK(me, acc, "out of memory");
		for (int r = 0; r < n; r++) {
			cc_fill_range(dt, tmp, base, count, (uint32_t)r, seed); /* the part this rank reduces */
			for (size_t i = 0; i < count; i++) {
				float v = cc_load(dt, tmp, i);
				acc[i] = r ? cc_op(op, acc[i], v) : v;
			}
		}
		for (size_t i = 0; i < count; i++)
			cc_store(dt, exp, i, acc[i]);
		free(acc);
	} else {
		for (int r = 0; r < n; r++) {
			if (coll == CC_BC && r != root)
				continue;
			/* the part of rank r's input this rank receives */
			size_t first = coll == CC_A2A ? (size_t)me * count : 0, len = count, at = (size_t)r * count;
			if (coll == CC_BC)
				at = 0;
			if (coll == CC_A2AV) { /* after its segments for 0..me-1 and their gaps */
				for (int d = 0; d < me; d++)
					first += cc_vcount(r, d, count) + (size_t)d;
				first += (size_t)me;
				len = rcnt[r];
				at = rdis[r];
			}
			cc_fill_range(dt, exp + at * es, first, len, (uint32_t)r, seed);
		}
	}
	/* compare what was written (a2av's gaps must keep 0xa5), then the guard after it */
	size_t bad = 0, first = 0, off = (size_t)(dst - dbuf);
	for (size_t b = 0; b < out_el * es; b++)
		if (hout[off + b] != exp[b] && !bad++)
			first = b;
	size_t end = inplace ? buf_el * es : out_el * es;
	for (size_t b = end; b < end + CC_GUARD; b++)
		if (hout[b] != 0xa5 && !bad++)
			first = b - off;
	PCHECK(me, bad == 0, "%s: %zu bytes wrong, first at byte %zu of the output (got 0x%02x want 0x%02x)", what, bad,
	       first, hout[off + first], first < out_el * es ? exp[first] : 0xa5);
	io->release(io, dbuf);
	if (!inplace)
		io->release(io, dsrc);
	free(hin);
	free(hout);
	free(exp);
	free(tmp);
	return 0;
}

/* The case matrix both tests run through io: every collective, dtype and count (1000003 only
 * when big), in place and out, all-reduce under both algorithms. algos: two settings of the
 * data-movement collectives to run each of those under (NULL: the daemon's choice, once);
 * big_f32_minmax: the largest count reduces with max and min on f32 alone (sum on every float
 * dtype). *cases counts the cases passed. Returns 0, or 1 with the failure in the PE's message. */
static inline int cc_all_cases(int pe, int n, mori_comm *k, struct cc_io *io, int big, const char *const algos[2],
			       int big_f32_minmax, int *cases)
{
	static const size_t counts[] = {1, 7, 1023, 4096, 1000003};
	static const mori_dtype fdt[] = {MORI_FLOAT32, MORI_FLOAT16, MORI_BFLOAT16};
	static const mori_dtype mdt[] = {MORI_UINT8, MORI_FLOAT16, MORI_INT32};
	char what[200];
	uint32_t seed = 1;
	for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		size_t cnt = counts[ci];
		if (cnt > 5000 && !big)
			continue;
		for (int ip = 0; ip < 2; ip++) {
			for (int d = 0; d < 3; d++)
				for (int op = 0; op < 3; op++) {
					if (cnt > 5000 && op && d && big_f32_minmax)
						continue;
					mori_redop o = op == 0 ? MORI_SUM : op == 1 ? MORI_MAX : MORI_MIN;
					for (int alg = 0; alg < 2; alg++) {
						POK(pe, mori_comm_set_algo(k, alg ? "allreduce=twoshot" : "allreduce=oneshot"));
						if (cc_case(pe, n, k, io, CC_AR, fdt[d], o, cnt, ip, seed++, what, sizeof(what)))
							return 1;
						(*cases)++;
					}
					if (cc_case(pe, n, k, io, CC_RS, fdt[d], o, cnt, ip, seed++, what, sizeof(what)))
						return 1;
					(*cases)++;
				}
			for (int d = 0; d < 3; d++)
				for (int alg = 0; alg < (algos ? 2 : 1); alg++) {
					if (algos)
						POK(pe, mori_comm_set_algo(k, algos[alg]));
					for (int coll = CC_AG; coll < CC_NCOLL; coll++) {
						if (coll == CC_RS || (coll == CC_A2AV && (ip || alg)))
							continue;
						if (cc_case(pe, n, k, io, coll, mdt[d], MORI_SUM, cnt, ip, seed++, what, sizeof(what)))
							return 1;
						(*cases)++;
					}
				}
		}
	}
	return 0;
}
#endif
