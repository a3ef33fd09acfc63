// MORI-IR's -rdc ring, the device half: a CUDA kernel that links the device API as the static
// device library (nvcc -rdc=true ... -lmori_shmem_device, declarations from the generated
// mori_shmem_device.h) rather than including mori/device/shmem.cuh, and runs the ring: each PE
// puts a block into its neighbour's heap with a signal per round, waits for its own round's
// signal, and checks the block its other neighbour sent; ROUNDS rounds in one kernel. The host
// half (tests/ir_rdc_ring_main.c) joins the group and checks every byte again. A translation
// unit includes mori_shmem_device.h or mori_shmem.h, not both: my_pe, n_pes, ptr_p2p and status
// are names of both the host (group) functions and the device ones (docs/ir.md).
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "mori_shmem_device.h"
#include "ir_rdc_ring.h"

static __device__ inline unsigned pattern(int pe, int r, unsigned i) { return IR_RING_PATTERN(pe, r, i); }

__global__ void ring(uint64_t dst, uint64_t src, uint64_t sig, int rounds, int me, int n, struct result *res)
{
	unsigned t = threadIdx.x;
	int next = (me + 1) % n, prev = (me + n - 1) % n;
	if (t == 0) {
		res->who_pe = mori_shmem_my_pe();
		res->who_n = mori_shmem_n_pes();
	}
	for (int r = 0; r < rounds; r++) {
		unsigned *s = (unsigned *)(src + (uint64_t)r * BLK);
		for (unsigned i = t; i < WORDS; i += blockDim.x)
			s[i] = pattern(me, r, i);
		// block scope: every thread calls, the function synchronises the block first
		int rc = mori_shmem_putmem_nbi_signal_block(dst + (uint64_t)r * BLK, src + (uint64_t)r * BLK, BLK,
							    sig + 8u * r, (uint64_t)r + 1, MORI_SHMEM_SIGNAL_SET, next, 0);
		uint64_t v = mori_shmem_signal_wait_until(sig + 8u * r, MORI_SHMEM_CMP_EQ, (uint64_t)r + 1);
		if (t == 0 && !res->rc && (rc || v != (uint64_t)r + 1)) {
			res->rc = rc ? rc : mori_shmem_status();
			res->rc_round = r;
		}
		if (v != (uint64_t)r + 1)
			return; /* aborted: the status says why */
		const unsigned *d = (const unsigned *)(dst + (uint64_t)r * BLK);
		for (unsigned i = t; i < WORDS; i += blockDim.x)
			if (d[i] != pattern(prev, r, i) && atomicAdd(&res->bad, 1u) == 0)
				res->first_bad = r;
	}
	if (t == 0) {
		int rc = mori_shmem_quiet_thread();
		if (rc && !res->rc)
			res->rc = rc;
	}
}

extern "C" int ring_set_state(void *st, char *err, size_t cap)
{
	// the module set-up of an -rdc program: the state global of the linked library
	cudaError_t e = cudaSetDevice(0);
	if (e == cudaSuccess)
		e = cudaMemcpyToSymbol(mori_shmem_state_ptr, &st, sizeof(st));
	if (e != cudaSuccess)
		snprintf(err, cap, "set mori_shmem_state_ptr: %s", cudaGetErrorString(e));
	return e != cudaSuccess;
}

extern "C" int ring_run(uint64_t dst, uint64_t src, uint64_t sig, int rounds, int me, int n, struct result *out,
			float *ms, void *host_dst, char *err, size_t cap)
{
	struct result *res;
	cudaEvent_t e0, e1;
	cudaError_t e;
	const char *what = "cudaMalloc";
	struct result h;
	memset(&h, 0, sizeof(h));
	h.first_bad = h.rc_round = -1;
	if ((e = cudaMalloc(&res, sizeof(*res))) || (what = "cudaMemcpy", e = cudaMemcpy(res, &h, sizeof(h), cudaMemcpyHostToDevice)) ||
	    (what = "cudaEventCreate", e = cudaEventCreate(&e0)) || (e = cudaEventCreate(&e1)) || (e = cudaEventRecord(e0)))
		goto out;
	ring<<<1, 256>>>(dst, src, sig, rounds, me, n, res);
	what = "the ring kernel";
	if ((e = cudaGetLastError()) || (e = cudaEventRecord(e1)) || (e = cudaDeviceSynchronize()) ||
	    (e = cudaEventElapsedTime(ms, e0, e1)) || (what = "copy back", e = cudaMemcpy(out, res, sizeof(*out), cudaMemcpyDeviceToHost)) ||
	    (e = cudaMemcpy(host_dst, (void *)dst, (size_t)rounds * BLK, cudaMemcpyDeviceToHost)))
		goto out;
	return 0;
out:
	snprintf(err, cap, "%s: %s", what, cudaGetErrorString(e));
	return 1;
}
