/* libmori MORI-CCL on host heaps: the GPU kernels' algorithms (kernels/coll.cu) run by
 * the calling thread, for machines without a GPU and for make check. The same scratch layout and
 * the same steps (stage into this rank's scratch, barrier, read the peers' scratch, barrier);
 * barriers are the group's (mori_shmem_barrier_all: its deadline names the PEs that never came),
 * a peer's scratch is read through this process's mapping of its heap, or through morid
 * (mori_shmem_getmem) when it is on another node. Inputs are always staged (windows are checked
 * and recorded, but peers do not read them in place here). Reductions in f32, in rank order. */
#include <stdlib.h>
#include <string.h>

#include "coll_int.h"
#include "shmem_wire.h"

_Static_assert(MORI_COLL_K_AR_ONESHOT == 2 && MORI_COLL_K_AR_TWOSHOT == 3 && MORI_COLL_K_REDSCAT == 4 &&
		       MORI_COLL_K_ALLGATHER == 5 && MORI_COLL_K_ALLTOALL == 6 && MORI_COLL_K_BCAST == 7 &&
		       MORI_COLL_K_ALLTOALLV == 8, "shmem_coll_describe (common/shmem_wire.h) names these values");

/* The group's barrier at the communicator's deadline; the first of a call carries its arguments
 * (k->tag), which the root compares across the ranks. */
static int bar(mori_comm *k)
{
	uint64_t tag = k->tag, count = k->tag_count;
	k->tag = 0;
	return shmem_barrier_coll(k->g, count, tag, k->timeout_us);
}

/* len bytes at `own` (an address in this rank's heap) of rank r, into dst. */
static int rd(mori_comm *k, void *dst, const uint8_t *own, size_t len, int r)
{
	if (!len)
		return MORI_OK;
	const void *p = r == k->rank ? own : mori_shmem_ptr_p2p(k->g, own, k->pe_of[r]);
	if (p) {
		memcpy(dst, p, len);
		return MORI_OK;
	}
	return mori_shmem_getmem(k->g, dst, own, len, k->pe_of[r]);
}

/* ---- element conversions (round to nearest even) ---- */
static float f_in(mori_dtype dt, const void *p, size_t i)
{
	if (dt == MORI_FLOAT32)
		return ((const float *)p)[i];
	if (dt == MORI_FLOAT16)
		return (float)((const _Float16 *)p)[i];
	uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static void f_out(mori_dtype dt, void *p, size_t i, float v)
{
	if (dt == MORI_FLOAT32) {
		((float *)p)[i] = v;
	} else if (dt == MORI_FLOAT16) {
		((_Float16 *)p)[i] = (_Float16)v;
	} else {
		uint32_t u;
		memcpy(&u, &v, 4);
		((uint16_t *)p)[i] = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)(u >> 16 | 0x40)
								      : (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
	}
}
static float op_f(mori_redop op, float a, float b)
{
	if (op == MORI_SUM)
		return a + b;
	if (a != a || b != b) /* as fmaxf / fminf (the kernels'): a NaN loses */
		return a != a ? b : a;
	return op == MORI_MAX ? (a > b ? a : b) : (a < b ? a : b);
}

/* acc[0..m) (op)= rank r's m elements at `own` (its scratch part); tmp: m elements. */
static int fold(mori_comm *k, const struct coll_call *cc, float *acc, uint8_t *tmp, const uint8_t *own, size_t m, int r)
{
	int rc = rd(k, tmp, own, m * cc->es, r);
	for (size_t i = 0; i < m && !rc; i++) {
		float v = f_in(cc->dtype, tmp, i);
		acc[i] = r ? op_f(cc->op, acc[i], v) : v;
	}
	return rc;
}

/* ---- the collectives ---- */

static int host_reduce(mori_comm *k, const struct coll_call *cc, float *acc, uint8_t *tmp)
{
	const int n = k->n, me = k->rank;
	const size_t es = cc->es;
	uint8_t *scr = k->area + k->off_scratch;
	const uint8_t *src = cc->src;
	uint8_t *dst = cc->dst;
	size_t S = k->scratch_bytes / es;
	size_t chunk = cc->kind == MORI_COLL_K_REDSCAT ? S / (size_t)n : S;
	int rc = MORI_OK;
	for (size_t c0 = 0; c0 < cc->count && !rc; c0 += chunk) {
		size_t m = cc->count - c0 < chunk ? cc->count - c0 : chunk;
		if (cc->kind == MORI_COLL_K_REDSCAT) {
			for (int r = 0; r < n; r++)
				memcpy(scr + (size_t)r * m * es, src + ((size_t)r * cc->count + c0) * es, m * es);
			if ((rc = bar(k)))
				break;
			for (int r = 0; r < n && !rc; r++)
				rc = fold(k, cc, acc, tmp, scr + (size_t)me * m * es, m, r);
			for (size_t i = 0; i < m && !rc; i++)
				f_out(cc->dtype, dst, c0 + i, acc[i]);
		} else if (cc->kind == MORI_COLL_K_AR_ONESHOT) {
			memcpy(scr, src + c0 * es, m * es);
			if ((rc = bar(k)))
				break;
			for (int r = 0; r < n && !rc; r++)
				rc = fold(k, cc, acc, tmp, scr, m, r);
			for (size_t i = 0; i < m && !rc; i++)
				f_out(cc->dtype, dst, c0 + i, acc[i]);
		} else { /* two-shot: reduce my part, then gather the others' */
			size_t P = (m + (size_t)n - 1) / (size_t)n;
			memcpy(scr, src + c0 * es, m * es);
			if ((rc = bar(k)))
				break;
			size_t lo = (size_t)me * P < m ? (size_t)me * P : m, hi = lo + P < m ? lo + P : m;
			for (int r = 0; r < n && !rc; r++)
				rc = fold(k, cc, acc, tmp, scr + lo * es, hi - lo, r);
			for (size_t i = 0; i < hi - lo && !rc; i++) {
				f_out(cc->dtype, dst, c0 + lo + i, acc[i]);
				f_out(cc->dtype, scr, lo + i, acc[i]);
			}
			if (!rc)
				rc = bar(k);
			for (int r = 0; r < n && !rc; r++) {
				size_t l2 = (size_t)r * P < m ? (size_t)r * P : m, h2 = l2 + P < m ? l2 + P : m;
				if (r != me)
					rc = rd(k, dst + (c0 + l2) * es, scr + l2 * es, (h2 - l2) * es, r);
			}
		}
		if (!rc)
			rc = bar(k);
	}
	return rc;
}

/* The all-to-all-v tables, through the meta area: every rank publishes what it sends (displacement,
 * bytes) and what it expects from each rank, then reads every rank's tables. *total: the longest
 * segment of any rank (the rounds). All ranks check every pair, so a mismatch anywhere is found
 * by all, the same one first, and every rank returns MORI_EINVAL in step (a rank whose counts
 * were right would otherwise go on and move bytes its peer does not expect). */
static int a2av_meta(mori_comm *k, const struct coll_call *cc, uint64_t *total)
{
	const int n = k->n;
	uint64_t *meta = (uint64_t *)(k->area + k->off_meta);
	for (int r = 0; r < n; r++) {
		meta[2 * r] = cc->sdispl[r] * cc->es;
		meta[2 * r + 1] = cc->scount[r] * cc->es;
		meta[2 * n + r] = cc->rcount[r] * cc->es;
	}
	int rc = bar(k);
	uint64_t *t = malloc(24 * (size_t)n * (size_t)n);
	if (!t)
		return set_error(k->c, MORI_ENOMEM, "out of memory");
	*total = 0;
	for (int r = 0; r < n && !rc; r++) /* t + 3n r: rank r's tables */
		rc = rd(k, t + 3 * (size_t)n * (size_t)r, (const uint8_t *)meta, 24 * (size_t)n, r);
	for (int s = 0; s < n && !rc; s++)
		for (int d = 0; d < n && !rc; d++) {
			uint64_t sent = t[3 * (size_t)n * (size_t)s + 2 * (size_t)d + 1];
			uint64_t want = t[3 * (size_t)n * (size_t)d + 2 * (size_t)n + (size_t)s];
			*total = sent > *total ? sent : *total;
			if (sent != want)
				rc = set_error(k->c, MORI_EINVAL, "alltoallv: rank %d sends %llu elements to rank %d, whose "
								  "recvcounts[%d] is %llu", s, (unsigned long long)(sent / cc->es), d, s,
					       (unsigned long long)(want / cc->es));
		}
	free(t);
	return rc;
}

static int host_pulls(mori_comm *k, const struct coll_call *cc)
{
	const int n = k->n, me = k->rank, kind = cc->kind;
	const size_t es = cc->es;
	uint8_t *scr = k->area + k->off_scratch;
	const uint8_t *src = cc->src;
	uint8_t *dst = cc->dst;
	int nseg = kind == MORI_COLL_K_ALLTOALL || kind == MORI_COLL_K_ALLTOALLV ? n : 1;
	uint64_t total = cc->count * es, W = (k->scratch_bytes / (uint64_t)nseg) & ~15ull;
	int rc = MORI_OK;
	if (!W) /* a chunk of 0 bytes would never finish: every rank refuses alike, before any barrier */
		return set_error(k->c, MORI_EINVAL, "all-to-all: %llu bytes of scratch over %d ranks is under 16 bytes a "
				 "rank: create the communicator with scratch_bytes >= %llu", (unsigned long long)k->scratch_bytes,
				 nseg, 16ull * (unsigned long long)nseg);
	if (kind == MORI_COLL_K_ALLTOALLV && (rc = a2av_meta(k, cc, &total))) {
		bar(k); /* every rank finds the same mismatch (a2av_meta), and ends the call together */
		return rc;
	}
	for (uint64_t k0 = 0; (k0 < total || k0 == 0) && !rc; k0 += W) {
		if (kind != MORI_COLL_K_BCAST || me == cc->root)
			for (int s = 0; s < nseg; s++) {
				uint64_t off = kind == MORI_COLL_K_ALLTOALL ? (uint64_t)s * total
					       : kind == MORI_COLL_K_ALLTOALLV ? cc->sdispl[s] * es : 0;
				uint64_t len = kind == MORI_COLL_K_ALLTOALLV ? cc->scount[s] * es : total;
				len = len > k0 ? (len - k0 < W ? len - k0 : W) : 0;
				memcpy(scr + (uint64_t)s * W, src + off + k0, len);
			}
		if ((rc = bar(k)))
			break;
		for (int j = 0; j < n && !rc; j++) {
			int r = (me + j) % n;
			if (kind == MORI_COLL_K_BCAST && r != cc->root)
				continue;
			uint64_t len = kind == MORI_COLL_K_ALLTOALLV ? cc->rcount[r] * es : total;
			uint64_t doff = kind == MORI_COLL_K_ALLTOALLV ? cc->rdispl[r] * es
					: kind == MORI_COLL_K_BCAST ? 0 : (uint64_t)r * total;
			uint64_t soff = nseg > 1 ? (uint64_t)me * W : 0;
			len = len > k0 ? (len - k0 < W ? len - k0 : W) : 0;
			rc = rd(k, dst + doff + k0, scr + soff, len, r);
		}
		if (!rc)
			rc = bar(k);
	}
	return rc;
}

int coll_host_run(mori_comm *k, const struct coll_call *cc)
{
	if (k->n != k->g->n_pes)
		return set_error(k->c, MORI_ENOTSUP, "coll: host-heap communicators span the whole group (a node team "
						     "of %d of %d PEs needs a VRAM heap)", k->n, k->g->n_pes);
	/* all-to-all-v's counts are compared pair by pair (a2av_meta); the rest here */
	k->tag = shmem_coll_tag((unsigned)cc->kind, (unsigned)cc->dtype, (unsigned)cc->op, cc->root);
	k->tag_count = cc->kind == MORI_COLL_K_ALLTOALLV ? 0 : cc->count;
	if (cc->kind != MORI_COLL_K_AR_ONESHOT && cc->kind != MORI_COLL_K_AR_TWOSHOT && cc->kind != MORI_COLL_K_REDSCAT)
		return host_pulls(k, cc);
	size_t m = k->scratch_bytes / cc->es;
	float *acc = malloc(m * sizeof(float));
	uint8_t *tmp = malloc(m * cc->es);
	int rc = acc && tmp ? host_reduce(k, cc, acc, tmp) : set_error(k->c, MORI_ENOMEM, "out of memory");
	free(acc);
	free(tmp);
	return rc;
}
