// The kernels of tests/test_gpu_cco.c: each rank launches them in one block of CDEV_THREADS with
// its device communicator passed by value, as an application kernel takes it, and calls the
// device API of mori/device/cco.cuh. Every peer's bytes are checked here against cdev_pattern,
// round by round; the host checks the windows' final contents and the signals and counters
// against its own model. Reads of bytes a peer (or morid) wrote are volatile: the barrier or
// signal that announced them orders them, no cached line may answer.
#include "mori/device/cco.cuh"
#include "../tests/cco_dev.h"

#define OUT(a) ((long long *)(uintptr_t)(a)->out)
typedef const mori_cco_dev_comm &dc;

__device__ void note_rc(const struct cdev_args *a, int rc, long long where)
{
	if (rc && atomicCAS((unsigned long long *)&OUT(a)[CDEV_OUT_RC], 0ull, (unsigned long long)(long long)rc) == 0)
		OUT(a)[CDEV_OUT_WHERE] = where;
}

__device__ void note_bad(const struct cdev_args *a, long long bad, long long where)
{
	if (!bad)
		return;
	atomicAdd((unsigned long long *)&OUT(a)[CDEV_OUT_BAD], (unsigned long long)bad);
	atomicCAS((unsigned long long *)&OUT(a)[CDEV_OUT_FIRST_BAD], 0ull, (unsigned long long)(where + 1));
}

/* Any thread's rc (noted at `where`) in every thread of the block. */
__device__ int block_rc(const struct cdev_args *a, int rc, long long where)
{
	__shared__ int word;
	note_rc(a, rc, where);
	if (threadIdx.x == 0)
		word = 0;
	__syncthreads();
	if (rc)
		word = rc;
	__syncthreads();
	int r = word;
	__syncthreads();
	return r;
}

__device__ void done(const struct cdev_args *a)
{
	__syncthreads();
	if (threadIdx.x == 0)
		OUT(a)[CDEV_OUT_DONE] = 1;
}

/* Bytes [0, len) of slot `from` of this rank's window w that are not what `from` sent in round r
 * (to = this rank, or the tag the sender used). */
__device__ long long count_bad(dc c, mori_cco_win w, int from, int to, int r, uint32_t len)
{
	const volatile uint8_t *p = (const volatile uint8_t *)mori_cco_local_ptr(c, w, (uint64_t)from * CDEV_SLOT);
	long long bad = 0;
	for (uint32_t i = threadIdx.x; i < len; i += blockDim.x)
		bad += p[i] != cdev_pattern(from, to, r, i);
	return bad;
}

/* ---- barrier sessions at a scope: THREAD (thread 0), WARP (warp 0), BLOCK; split: arrive, then
 * wait ---- */
template <int S> __device__ int sync_at(dc c, int kind, int index, bool split)
{
	if (kind == CDEV_BAR_LSA) {
		mori_cco_lsa_barrier_session<S> b(c, index);
		int rc = b.arrive();
		return rc ? rc : b.wait();
	}
	mori_cco_gda_barrier_session<S> b(c, index, kind == CDEV_BAR_RAIL);
	if (!split)
		return b.sync();
	int rc = b.arrive();
	return rc ? rc : b.wait();
}

__device__ int team_sync(const struct cdev_args *a, dc c, int kind, int index, int scope, bool split, long long where)
{
	__syncthreads();
	int rc = 0;
	if (scope == MORI_CCO_BLOCK)
		rc = sync_at<MORI_CCO_BLOCK>(c, kind, index, split);
	else if (scope == MORI_CCO_WARP && threadIdx.x < MORI_WARP_SIZE)
		rc = sync_at<MORI_CCO_WARP>(c, kind, index, split);
	else if (scope == MORI_CCO_THREAD && threadIdx.x == 0)
		rc = sync_at<MORI_CCO_THREAD>(c, kind, index, split);
	return block_rc(a, rc, where);
}

/* ---- LSA: peer pointers and the LSA barrier session ----
 * Round r: this rank stores pattern(me, p, r) through the peer pointer into slot `me` of every LSA
 * peer p's receive window; an LSA barrier (index r % 2, scope r % 3); every LSA slot checked; a
 * second barrier before the next round's stores. */
extern "C" __global__ void cdev_lsa(mori_cco_dev_comm c, const struct cdev_args *a)
{
	int me = c.rank, rc = 0;
	for (int r = 0; r < a->rounds && !rc; r++) {
		for (int p = 0; p < c.lsa_size && !rc; p++) {
			uint8_t *d = (uint8_t *)mori_cco_lsa_peer_ptr(c, a->dw, p, (uint64_t)me * CDEV_SLOT);
			if (!d) {
				rc = MORI_EINVAL;
				break;
			}
			for (uint32_t i = threadIdx.x; i < CDEV_SLOT; i += blockDim.x)
				d[i] = cdev_pattern(me, c.node_start + p, r, i);
		}
		if ((rc = block_rc(a, rc, r * 100 + 1)))
			break;
		if ((rc = team_sync(a, c, CDEV_BAR_LSA, r & 1, r % 3, false, r * 100 + 2)))
			break;
		long long bad = 0;
		for (int p = 0; p < c.lsa_size; p++)
			bad += count_bad(c, a->dw, c.node_start + p, me, r, CDEV_SLOT);
		note_bad(a, bad, r * 100 + 3);
		rc = team_sync(a, c, CDEV_BAR_LSA, r & 1, (r + 1) % 3, false, r * 100 + 4);
	}
	done(a);
}

/* ---- GDA: put / put-with-signal / signal-add / signal-inc / counter-inc / flush / get ----
 * A ring over the world: round r puts cdev_ring_len(r) bytes of pattern(me, right, r) into slot
 * `me` of the right neighbour's receive window, in one of three forms (r % 3): put_signal_add at
 * block scope; put at warp scope, flush, signal_inc; put at thread scope, counter_inc, signal_add.
 * The right neighbour waits for its data signal, checks, and acks (signal_inc) so that the next
 * round may overwrite. Then a blocking get of what the right neighbour holds from this rank, and
 * signal adds of (rank + 1) and signal incs onto ranks 0 and n-1 (LSA senders and the other
 * node's on different signals: the proxy's atomics are not atomic against the GPU's own), which
 * those two wait for and report. out[VAL]: the counter, the get's wrong bytes, then (ranks 0
 * and n-1) the four sums. */
extern "C" __global__ void cdev_gda(mori_cco_dev_comm c, const struct cdev_args *a)
{
	int me = c.rank, n = c.world_size, right = (me + 1) % n, left = (me + n - 1) % n, rc = 0;
	uint8_t *src = (uint8_t *)mori_cco_local_ptr(c, a->sw, 0);
	uint64_t doff = (uint64_t)me * CDEV_SLOT;
	for (int r = 0; r < a->rounds && !rc; r++) {
		uint32_t len = cdev_ring_len(r);
		if (r > 0 && threadIdx.x == 0)
			rc = mori_cco_gda_wait_signal(c, CDEV_SIG_ACK, (uint64_t)r);
		if ((rc = block_rc(a, rc, r * 100 + 1)))
			break;
		for (uint32_t i = threadIdx.x; i < len; i += blockDim.x)
			src[i] = cdev_pattern(me, right, r, i);
		__syncthreads();
		switch (r % 3) {
		case 0:
			rc = mori_cco_gda_put_signal_add<MORI_CCO_BLOCK>(c, right, a->dw, doff, a->sw, 0, len, CDEV_SIG_DATA, 1);
			break;
		case 1:
			if (threadIdx.x < MORI_WARP_SIZE)
				rc = mori_cco_gda_put<MORI_CCO_WARP>(c, right, a->dw, doff, a->sw, 0, len);
			if ((rc = block_rc(a, rc, r * 100 + 2)))
				break;
			if (threadIdx.x == 0 && !(rc = mori_cco_gda_flush(c)))
				rc = mori_cco_gda_signal_inc(c, right, CDEV_SIG_DATA);
			break;
		default:
			if (threadIdx.x == 0 && !(rc = mori_cco_gda_put<MORI_CCO_THREAD>(c, right, a->dw, doff, a->sw, 0, len)) &&
			    !(rc = mori_cco_gda_counter_inc(c, CDEV_CTR)))
				rc = mori_cco_gda_signal_add(c, right, CDEV_SIG_DATA, 1);
		}
		if ((rc = block_rc(a, rc, r * 100 + 3)))
			break;
		if (threadIdx.x == 0)
			rc = mori_cco_gda_wait_signal(c, CDEV_SIG_DATA, (uint64_t)r + 1);
		if ((rc = block_rc(a, rc, r * 100 + 4)))
			break;
		note_bad(a, count_bad(c, a->dw, left, me, r, len), r * 100 + 5);
		__syncthreads();
		if (threadIdx.x == 0)
			rc = mori_cco_gda_signal_inc(c, left, CDEV_SIG_ACK);
		rc = block_rc(a, rc, r * 100 + 6);
	}
	/* the right neighbour checked the last round: its slot `me` holds it, unchanged from now on */
	if (!rc && threadIdx.x == 0)
		rc = mori_cco_gda_wait_signal(c, CDEV_SIG_ACK, (uint64_t)a->rounds);
	rc = block_rc(a, rc, 9001);
	int last = a->rounds - 1;
	uint32_t len = cdev_ring_len(last);
	uint64_t scratch = (uint64_t)n * CDEV_SLOT;
	if (!rc)
		rc = block_rc(a, mori_cco_gda_get<MORI_CCO_BLOCK>(c, right, a->sw, scratch, a->dw, doff, len), 9002);
	if (!rc) {
		const volatile uint8_t *g = (const volatile uint8_t *)mori_cco_local_ptr(c, a->sw, scratch);
		long long bad = 0;
		for (uint32_t i = threadIdx.x; i < len; i += blockDim.x)
			bad += g[i] != cdev_pattern(me, right, last, i);
		note_bad(a, bad, 9003);
		if (bad)
			atomicAdd((unsigned long long *)&OUT(a)[CDEV_OUT_VAL + 1], (unsigned long long)bad);
	}
	/* signal adds and incs onto ranks 0 and n-1 */
	if (!rc && threadIdx.x == 0) {
		int targets[2] = {0, n - 1};
		for (int t = 0; t < (n > 1 ? 2 : 1) && !rc; t++) {
			int far = !mori_cco_is_lsa(&c, targets[t]);
			rc = mori_cco_gda_signal_add(c, targets[t], far ? CDEV_SIG_SUM_FAR : CDEV_SIG_SUM_LSA, (uint64_t)me + 1);
			if (!rc)
				rc = mori_cco_gda_signal_inc(c, targets[t], far ? CDEV_SIG_CNT_FAR : CDEV_SIG_CNT_LSA);
		}
	}
	rc = block_rc(a, rc, 9004);
	if (!rc && threadIdx.x == 0 && (me == 0 || me == n - 1)) {
		uint64_t lsa_sum = 0, far_sum = 0;
		for (int w = 0; w < n; w++)
			*(mori_cco_is_lsa(&c, w) ? &lsa_sum : &far_sum) += (uint64_t)w + 1;
		uint64_t lsa_cnt = (uint64_t)c.lsa_size, far_cnt = (uint64_t)(n - c.lsa_size);
		if (!(rc = mori_cco_gda_wait_signal(c, CDEV_SIG_SUM_LSA, lsa_sum)) &&
		    !(rc = mori_cco_gda_wait_signal(c, CDEV_SIG_SUM_FAR, far_sum)) &&
		    !(rc = mori_cco_gda_wait_signal(c, CDEV_SIG_CNT_LSA, lsa_cnt)))
			rc = mori_cco_gda_wait_signal(c, CDEV_SIG_CNT_FAR, far_cnt);
		for (int s = 0; s < 4 && !rc; s++) {
			uint64_t v = 0;
			rc = mori_cco_gda_read_signal(c, CDEV_SIG_SUM_LSA + s, &v);
			OUT(a)[CDEV_OUT_VAL + 2 + s] = (long long)v;
		}
	}
	if (!rc && threadIdx.x == 0) {
		uint64_t v = 0;
		rc = mori_cco_gda_read_counter(c, CDEV_CTR, &v);
		OUT(a)[CDEV_OUT_VAL] = (long long)v;
	}
	block_rc(a, rc, 9005);
	done(a);
}

/* ---- barrier sessions over a team (LSA, rail, world) with GDA puts ----
 * Round r: this rank puts CDEV_SMALL bytes of pattern(me, kind, r) into slot `me` of every
 * member's receive window (block scope; direct or through the proxy), flushes, syncs the team
 * (barrier 0, scope r % 3, arrive and wait apart in odd rounds), checks every member's slot, and
 * syncs again (barrier 1) before the next round overwrites. */
__device__ int member_world(dc c, int kind, int m)
{
	return kind == CDEV_BAR_LSA ? c.node_start + m : kind == CDEV_BAR_RAIL ? m * c.lsa_size + c.lsa_rank : m;
}

extern "C" __global__ void cdev_bar(mori_cco_dev_comm c, const struct cdev_args *a)
{
	int me = c.rank, kind = a->kind, rc = 0;
	int members = kind == CDEV_BAR_LSA ? c.lsa_size : kind == CDEV_BAR_RAIL ? c.world_size / c.lsa_size : c.world_size;
	uint8_t *src = (uint8_t *)mori_cco_local_ptr(c, a->sw, 0);
	for (int r = 0; r < a->rounds && !rc; r++) {
		for (uint32_t i = threadIdx.x; i < CDEV_SMALL; i += blockDim.x)
			src[i] = cdev_pattern(me, kind, r, i);
		__syncthreads();
		for (int m = 0; m < members && !rc; m++)
			rc = mori_cco_gda_put<MORI_CCO_BLOCK>(c, member_world(c, kind, m), a->dw, (uint64_t)me * CDEV_SLOT, a->sw,
							      0, CDEV_SMALL);
		if ((rc = block_rc(a, rc, r * 100 + 1)))
			break;
		if (threadIdx.x == 0)
			rc = mori_cco_gda_flush(c);
		if ((rc = block_rc(a, rc, r * 100 + 2)))
			break;
		if ((rc = team_sync(a, c, kind, 0, r % 3, r & 1, r * 100 + 3)))
			break;
		long long bad = 0;
		for (int m = 0; m < members; m++)
			bad += count_bad(c, a->dw, member_world(c, kind, m), kind, r, CDEV_SMALL);
		note_bad(a, bad, r * 100 + 4);
		rc = team_sync(a, c, kind, 1, (r + 2) % 3, false, r * 100 + 5);
	}
	done(a);
}

/* ---- copy-engine puts at every scope, and drain ----
 * Round r: this rank writes pattern(me, p, r) into source slot p for every LSA peer p, then posts
 * the CDEV_SLOT bytes to slot `me` of p's receive window in four parts: thread scope (thread 0),
 * warp scope (warp 1), block scope, grouped (warp 0, each lane 1/32 of the part, on queue
 * lane % queues); the whole slot on queue p % queues otherwise. Then drains every queue, syncs
 * the LSA team, checks every LSA peer's slot and syncs again. */
extern "C" __global__ void cdev_ce(mori_cco_dev_comm c, const struct cdev_args *a)
{
	int me = c.rank, nq = c.ce_queue_count, rc = 0;
	const uint32_t part = CDEV_SLOT / 4, sub = part / MORI_WARP_SIZE;
	uint64_t doff = (uint64_t)me * CDEV_SLOT;
	for (int r = 0; r < a->rounds && !rc; r++) {
		for (int p = 0; p < c.lsa_size; p++) {
			uint8_t *s = (uint8_t *)mori_cco_local_ptr(c, a->sw, (uint64_t)p * CDEV_SLOT);
			for (uint32_t i = threadIdx.x; i < CDEV_SLOT; i += blockDim.x)
				s[i] = cdev_pattern(me, c.node_start + p, r, i);
		}
		__syncthreads();
		for (int p = 0; p < c.lsa_size && !rc; p++) {
			int q = nq ? p % nq : 0;
			uint64_t soff = (uint64_t)p * CDEV_SLOT;
			if (threadIdx.x == 0)
				rc = mori_cco_ce_put<MORI_CCO_THREAD>(c, p, a->dw, doff, a->sw, soff, part, q);
			if (threadIdx.x >= MORI_WARP_SIZE && threadIdx.x < 2 * MORI_WARP_SIZE) {
				int r2 = mori_cco_ce_put<MORI_CCO_WARP>(c, p, a->dw, doff + part, a->sw, soff + part, part, q);
				rc = rc ? rc : r2;
			}
			int r3 = mori_cco_ce_put<MORI_CCO_BLOCK>(c, p, a->dw, doff + 2 * part, a->sw, soff + 2 * part, part, q);
			rc = rc ? rc : r3;
			if (threadIdx.x < MORI_WARP_SIZE) {
				uint64_t o = 3 * part + threadIdx.x * sub;
				int r4 = mori_cco_ce_put_grouped(c, p, a->dw, doff + o, a->sw, soff + o, sub,
								 (int)(threadIdx.x % (unsigned)(nq ? nq : 1)));
				rc = rc ? rc : r4;
			}
			rc = block_rc(a, rc, r * 100 + 1);
		}
		if (rc)
			break;
		for (int q = 0; q < nq && !rc; q++)
			rc = block_rc(a, mori_cco_ce_drain<MORI_CCO_BLOCK>(c, q), r * 100 + 2);
		if (rc || (rc = team_sync(a, c, CDEV_BAR_LSA, 0, r % 3, false, r * 100 + 3)))
			break;
		long long bad = 0;
		for (int p = 0; p < c.lsa_size; p++)
			bad += count_bad(c, a->dw, c.node_start + p, me, r, CDEV_SLOT);
		note_bad(a, bad, r * 100 + 4);
		rc = team_sync(a, c, CDEV_BAR_LSA, 1, (r + 1) % 3, false, r * 100 + 5);
	}
	done(a);
}

/* ---- what each call returns for bad arguments, without a resource, and once stale ----
 * out[VAL + i]: the i-th call's code (pointers: 0 for NULL, 1 otherwise); the host holds the
 * expected list for each device communicator it passes (test_gpu_cco.c: err_expect). Thread 0
 * only; no call here writes a peer's byte (each is refused, but for a get into the scratch slot). */
extern "C" __global__ void cdev_errors(mori_cco_dev_comm c, const struct cdev_args *a)
{
	if (threadIdx.x != 0)
		return;
	long long *o = OUT(a) + CDEV_OUT_VAL;
	int n = c.world_size, other = (c.rank + 1) % n;
	mori_cco_win dw = a->dw, sw = a->sw;
	o[0] = mori_cco_lsa_peer_ptr(c, dw, c.lsa_size, 0) != nullptr;
	o[1] = mori_cco_lsa_peer_ptr(c, dw, -1, 0) != nullptr;
	o[2] = mori_cco_lsa_peer_ptr(c, dw, 0, dw.bytes + 1) != nullptr;
	o[3] = mori_cco_gda_put<MORI_CCO_THREAD>(c, n, dw, 0, sw, 0, 16);
	o[4] = mori_cco_gda_put<MORI_CCO_THREAD>(c, other, dw, dw.bytes - 8, sw, 0, 16);
	o[5] = mori_cco_gda_signal_add(c, other, c.signal_count, 1);
	o[6] = mori_cco_gda_counter_inc(c, c.counter_count);
	o[7] = mori_cco_ce_put<MORI_CCO_THREAD>(c, c.lsa_size, dw, 0, sw, 0, 64, 0);
	o[8] = mori_cco_ce_put<MORI_CCO_THREAD>(c, 0, dw, 0, sw, 0, 64, c.ce_queue_count);
	o[9] = mori_cco_ce_put<MORI_CCO_THREAD>(c, 0, dw, dw.bytes - 8, sw, 0, 64, 0);
	o[10] = mori_cco_ce_drain<MORI_CCO_THREAD>(c, c.ce_queue_count);
	o[11] = mori_cco_gda_wait_signal(c, -1, 0);
	o[12] = mori_cco_check(c);
	/* a valid get into this rank's scratch slot (NONE: ENOTSUP) */
	o[13] = mori_cco_gda_get<MORI_CCO_THREAD>(c, other, sw, (uint64_t)n * CDEV_SLOT, dw, 0, 16);
	o[14] = mori_cco_lsa_peer_ptr(c, dw, 0, 0) != nullptr;
	OUT(a)[CDEV_OUT_DONE] = 1;
}

/* ---- a rank that dies inside a barrier session ----
 * Every rank but the last enters the world barrier (index 0, block scope) or the LSA one
 * (a->kind); the last never comes (the test kills it). out[RC]: what the session returned. */
extern "C" __global__ void cdev_hang(mori_cco_dev_comm c, const struct cdev_args *a)
{
	int rc = team_sync(a, c, a->kind, 0, MORI_CCO_BLOCK, false, 1);
	if (threadIdx.x == 0)
		OUT(a)[CDEV_OUT_VAL] = rc;
	done(a);
}

/* ---- the overlap benchmark's transfers (test_gpu_cco's overlap case) ----
 * a->rounds times, the whole source window to world rank a->kind's receive window (an LSA peer;
 * the windows are the same size): by SM puts (every block its share, mori_cco_gda_put at block
 * scope: the direct path's copy), or by copy-engine puts (thread 0 posts CDEV_CE_CHUNK pieces
 * round-robin over the queues, then drains them all). */
extern "C" __global__ void cdev_sm_puts(mori_cco_dev_comm c, const struct cdev_args *a)
{
	uint64_t bytes = a->sw.bytes, share = (bytes / gridDim.x) & ~(uint64_t)15, off = blockIdx.x * share;
	uint64_t len = blockIdx.x == gridDim.x - 1 ? bytes - off : share;
	int rc = 0;
	for (int r = 0; r < a->rounds && !rc; r++)
		rc = mori_cco_gda_put<MORI_CCO_BLOCK>(c, a->kind, a->dw, off, a->sw, off, len);
	note_rc(a, rc, 1);
	__syncthreads();
	if (threadIdx.x == 0) {
		note_rc(a, mori_cco_gda_flush(c), 2);
		if (blockIdx.x == 0)
			OUT(a)[CDEV_OUT_DONE] = 1;
	}
}

extern "C" __global__ void cdev_ce_puts(mori_cco_dev_comm c, const struct cdev_args *a)
{
	if (threadIdx.x != 0)
		return;
	int peer = a->kind - c.node_start, nq = c.ce_queue_count, rc = 0;
	uint64_t bytes = a->sw.bytes, k = 0;
	for (int r = 0; r < a->rounds && !rc; r++)
		for (uint64_t off = 0; off < bytes && !rc; off += CDEV_CE_CHUNK, k++) {
			uint64_t len = bytes - off < CDEV_CE_CHUNK ? bytes - off : CDEV_CE_CHUNK;
			rc = mori_cco_ce_put<MORI_CCO_THREAD>(c, peer, a->dw, off, a->sw, off, len, (int)(k % (uint64_t)nq));
		}
	for (int q = 0; q < nq && !rc; q++)
		rc = mori_cco_ce_drain<MORI_CCO_THREAD>(c, q);
	note_rc(a, rc, 1);
	OUT(a)[CDEV_OUT_DONE] = 1;
}
