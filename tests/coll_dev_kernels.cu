// tests/test_gpu_coll's fused kernel: MORI-CCL's device API (mori/device/coll.cuh) from a module
// of the test's own, as an application's kernel would use it. One block a rank: each round it writes 1024
// words into the next rank's buffer through mori_coll_peer_ptr, barriers, checks the words the
// previous rank wrote into its own, barriers again (the next round overwrites them).
//   out[0]: 0 or the first MORI_E* code; out[1]: wrong words; out[2]: 1 once finished.
#include "mori/device/coll.cuh"

MORI_KERNEL void cdev_ring(const struct mori_coll_dev *d, uint64_t *buf, int rounds, long long *out)
{
	int me = mori_coll_rank(d), n = mori_coll_size(d);
	int prev = (me + n - 1) % n;
	uint64_t *to = (uint64_t *)mori_coll_peer_ptr(d, buf, (me + 1) % n);
	__shared__ unsigned long long bad;
	if (threadIdx.x == 0)
		bad = 0;
	__syncthreads();
	int rc = to ? 0 : MORI_EINVAL;
	for (int r = 0; r < rounds && !rc; r++) {
		for (unsigned i = threadIdx.x; i < 1024; i += blockDim.x)
			to[i] = (uint64_t)me << 32 | (uint64_t)(r * 1024 + i);
		if ((rc = mori_coll_barrier_block(d)))
			break;
		for (unsigned i = threadIdx.x; i < 1024; i += blockDim.x)
			if (((volatile uint64_t *)buf)[i] != ((uint64_t)prev << 32 | (uint64_t)(r * 1024 + i)))
				atomicAdd(&bad, 1ull);
		rc = mori_coll_barrier_block(d);
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		out[0] = rc;
		out[1] = (long long)bad;
		out[2] = 1;
	}
}
