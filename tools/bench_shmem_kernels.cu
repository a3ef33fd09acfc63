// The kernels of `mori-bench shmem` (tools/bench_shmem.c): the patterns tools/bench_nvshmem.cu
// runs through NVSHMEM, here through MORI-SHMEM's device API. One module instance per PE.
#include "mori/device/shmem.cuh"

__device__ long long globaltimer_ns(void)
{
	long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* bytes from src (this PE) to the symmetric dst at pe, the grid's blocks each putting their
 * slice at block scope, reps times, each rep at the next `bytes` of a span-byte window (so that
 * repeated small puts are not served from L2), then quiet. */
extern "C" __global__ void b_put(uint64_t dst, uint64_t src, uint64_t bytes, int pe, int reps, uint64_t span)
{
	uint64_t chunk = (bytes + gridDim.x - 1) / gridDim.x, off = chunk * blockIdx.x;
	uint64_t len = off >= bytes ? 0 : (chunk < bytes - off ? chunk : bytes - off);
	for (int r = 0; r < reps && len; r++) {
		uint64_t w = (uint64_t)r * bytes % span + off;
		mori_shmem_putmem_nbi_block((void *)(dst + w), (const void *)(src + w), len, pe);
	}
	if (threadIdx.x == 0)
		mori_shmem_quiet_thread();
}

/* Many messages in flight (as ib_write_bw or NCCL measure a message size): each warp puts whole
 * messages of `bytes` at warp scope, msgs of them one after another, then quiet. Warp w's message
 * k starts at (w * lane + k * bytes) % win, win = warps * lane (the buffers hold win + bytes):
 * the warps in flight work on bytes `lane` apart, and a byte is touched again only once every
 * warp has moved `lane` further, i.e. after `win` bytes of traffic (win >> L2: no reuse). */
extern "C" __global__ void b_put_warp(uint64_t dst, uint64_t src, uint64_t bytes, int pe, int msgs, uint64_t lane)
{
	uint64_t wpb = blockDim.x / 32, nw = gridDim.x * wpb, w = blockIdx.x * wpb + threadIdx.x / 32;
	uint64_t win = nw * lane;
	for (int k = 0; k < msgs; k++) {
		uint64_t o = (w * lane + (uint64_t)k * bytes) % win;
		mori_shmem_putmem_nbi_warp((void *)(dst + o), (const void *)(src + o), bytes, pe);
	}
	__syncthreads();
	if (threadIdx.x == 0)
		mori_shmem_quiet_thread();
}

/* One hop of the ping-pong: 8 bytes and a SET signal to peer. mode 0: the API (its ordering
 * scope the state's: the host runs it with GPU and with system scope). 1-4 take it apart (peer
 * addresses from mori_shmem_ptr): the same stores and a release store at system scope (1, 3) or
 * at GPU scope (2, 4; formally enough only when the peer is on this GPU, as here). 5: no data, a
 * p of the value and the peer's uint64_wait_until on it (the API). */
__device__ void hop_put(int mode, uint8_t *b, uint64_t *s, uint64_t v, int peer)
{
	if (mode == 0) {
		mori_shmem_putmem_nbi_signal_thread(b, b + 64, 8, s, v, MORI_SHMEM_SIGNAL_SET, peer);
		return;
	}
	if (mode == 5) {
		mori_shmem_uint64_p(s, v, peer);
		return;
	}
	*(uint64_t *)mori_shmem_ptr((uint64_t)b, peer) = *(const uint64_t *)(b + 64);
	uint64_t *ps = (uint64_t *)mori_shmem_ptr((uint64_t)s, peer);
	if (mode == 2 || mode == 4)
		mori_release_store_gpu(ps, v);
	else
		mori_release_store_sys(ps, v);
}
/* mode 0: the API's signal_wait_until; 5: its uint64_wait_until; 1, 2: relaxed polls then an
 * acquire fence at GPU scope; 3, 4: no acquire at all (volatile polls, as NVSHMEM's
 * signal_wait_until). */
__device__ void hop_wait(int mode, uint64_t *s, uint64_t v)
{
	if (mode == 0) {
		mori_shmem_signal_wait_until(s, MORI_SHMEM_CMP_GE, v);
		return;
	}
	if (mode == 5) {
		mori_shmem_uint64_wait_until(s, MORI_SHMEM_CMP_GE, v);
		return;
	}
	while (mori_relaxed_load_sys(s) < v)
		;
	if (mode == 1 || mode == 2)
		mori_acquire_after_wait_gpu();
}

/* PE 0 and PE 1: 8 bytes with a SET signal there and back, thread scope. cyc[i]: cycles of
 * round trip i; cyc[iters], cyc[iters + 1]: cycles and nanoseconds of the whole loop. The signal
 * word counts on across modes (base). */
extern "C" __global__ void b_pingpong(uint64_t buf, uint64_t sig, int iters, long long *cyc, int mode, uint64_t base)
{
	if (threadIdx.x)
		return;
	int me = mori_shmem_my_pe(), peer = 1 - me;
	uint8_t *b = (uint8_t *)buf;
	uint64_t *s = (uint64_t *)sig;
	long long c0 = clock64(), n0 = globaltimer_ns();
	for (int i = 0; i < iters; i++) {
		long long t0 = clock64();
		uint64_t v = base + (uint64_t)i + 1;
		if (me == 0) {
			hop_put(mode, b, s, v, peer);
			hop_wait(mode, s, v);
		} else {
			hop_wait(mode, s, v);
			hop_put(mode, b, s, v, peer);
		}
		cyc[i] = clock64() - t0;
	}
	cyc[iters] = clock64() - c0;
	cyc[iters + 1] = globaltimer_ns() - n0;
}

/* every thread: iters fetch-adds on the symmetric word ctr at pe. span[0] gets the earliest
 * start and span[1] the latest end (globaltimer ns, one clock for every process on the GPU), so
 * the throughput of all PEs together is their ops over max(end) - min(start). */
extern "C" __global__ void b_fadd(uint64_t ctr, int pe, int iters, unsigned long long *span)
{
	if (threadIdx.x == 0)
		atomicMin(&span[0], (unsigned long long)globaltimer_ns());
	uint64_t acc = 0;
	for (int i = 0; i < iters; i++)
		acc += mori_shmem_uint64_atomic_fetch_add((uint64_t *)ctr, 1, pe);
	if (acc == ~0ull)
		((uint64_t *)ctr)[1] = acc; /* keep the results live */
	__syncthreads();
	if (threadIdx.x == 0)
		atomicMax(&span[1], (unsigned long long)globaltimer_ns());
}

/* barrier_all_block iters times; cyc as b_pingpong's */
extern "C" __global__ void b_barrier(int iters, long long *cyc)
{
	long long c0 = clock64(), n0 = globaltimer_ns();
	for (int i = 0; i < iters; i++) {
		long long t0 = clock64();
		mori_shmem_barrier_all_block();
		if (threadIdx.x == 0)
			cyc[i] = clock64() - t0;
	}
	if (threadIdx.x == 0) {
		cyc[iters] = clock64() - c0;
		cyc[iters + 1] = globaltimer_ns() - n0;
	}
}
