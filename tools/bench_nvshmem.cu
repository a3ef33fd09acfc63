// The NVSHMEM side of `mori-bench shmem`: the same patterns through NVSHMEM, one process per PE
// (several PEs on one GPU need MPS), for the rows beside mori's in the same run. Not built by
// make (it needs NVSHMEM's headers and static device library, which the device machine's
// nvidia-nvshmem-cu13 wheel ships); tests/device-shmem.sh builds it there:
//   nvcc -rdc=true -O3 -std=c++17 -arch=sm_90 -I$NV/include tools/bench_nvshmem.cu \
//        -L$NV/lib -l:libnvshmem_host.so.3 -lnvshmem_device -lcuda -o bench_nvshmem
// mori-bench shmem --nvshmem PATH starts it: `bench_nvshmem RANK NPES UID_FILE [reps [sms]]` per PE
// (reps 0: no put rows)
// (sms: the GPU's SMs as mori-bench sees them, for k_put_warp's grid; MPS may show fewer here).
// Rank 0 makes the unique id and writes it to UID_FILE; the others read it. Each rank prints
// lines "nvshmem <what> ..." on stdout that mori-bench shmem reads:
//   nvshmem put_bw BYTES GBPS            (rank 0, two PEs: PE 0 -> PE 1, block scope)
//   nvshmem put_warp WARPS_PER_SM BYTES GBPS (rank 0, two PEs: many messages, warp scope)
//   nvshmem pingpong P50_US P99_US MEAN_US (rank 0, two PEs: put+signal, half the round trip)
//   nvshmem waitpp P50_US P99_US MEAN_US (the same with a p and wait_until, no data)
//   nvshmem fadd RANK NPES OPS START_NS END_NS (every rank: fetch-adds on PE 0's word; globaltimer)
//   nvshmem barrier NPES P50_US P99_US   (rank 0: barrier_all_block)
// The side of `mori-bench coll --nvshmem PATH`: `bench_nvshmem coll RANK NPES UID_FILE MAX_BYTES
// ITERS`: NVSHMEM's team collectives on NVSHMEM_TEAM_WORLD, f32, of the sizes mori-bench coll
// measures (8 B .. MAX_BYTES, x8; size as nccl-tests gives it), each host-initiated on a stream
// (nvshmemx_*_on_stream; p50 of ITERS calls, events around each) and from a kernel (one block of
// 1024 threads calling nvshmemx_*_block ITERS times in a loop, launched collectively: time per
// call; up to DEV_MAX bytes, a block's collective being slow beyond):
//   nvshmem coll KIND FORM NPES BYTES P50_US (rank 0; KIND allreduce|allgather|alltoall|broadcast|
//                                               reducescatter (host only, NVSHMEM 3.2 on), FORM host|kernel)
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                                                     \
	do {                                                                                      \
		cudaError_t e_ = (x);                                                             \
		if (e_ != cudaSuccess) {                                                          \
			fprintf(stderr, "bench_nvshmem: %s: %s\n", #x, cudaGetErrorString(e_));   \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)

/* as tools/bench_shmem_kernels.cu's b_put */
__global__ void k_put(uint8_t *dst, const uint8_t *src, uint64_t bytes, int pe, int reps, uint64_t span)
{
	uint64_t chunk = (bytes + gridDim.x - 1) / gridDim.x, off = chunk * blockIdx.x;
	uint64_t len = off >= bytes ? 0 : (chunk < bytes - off ? chunk : bytes - off);
	for (int r = 0; r < reps && len; r++) {
		uint64_t w = (uint64_t)r * bytes % span + off;
		nvshmemx_putmem_nbi_block(dst + w, src + w, len, pe);
	}
	if (threadIdx.x == 0)
		nvshmem_quiet();
}

/* as tools/bench_shmem_kernels.cu's b_put_warp */
__global__ void k_put_warp(uint8_t *dst, const uint8_t *src, uint64_t bytes, int pe, int msgs, uint64_t lane)
{
	uint64_t wpb = blockDim.x / 32, nw = gridDim.x * wpb, w = blockIdx.x * wpb + threadIdx.x / 32;
	uint64_t win = nw * lane;
	for (int k = 0; k < msgs; k++) {
		uint64_t o = (w * lane + (uint64_t)k * bytes) % win;
		nvshmemx_putmem_nbi_warp(dst + o, src + o, bytes, pe);
	}
	__syncthreads();
	if (threadIdx.x == 0)
		nvshmem_quiet();
}

__device__ long long globaltimer_ns(void)
{
	long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* cyc[0..iters): cycles of each iteration; cyc[iters], cyc[iters + 1]: cycles and nanoseconds
 * of the whole loop (the host converts cycles with their ratio: the clock the SM really ran). */
__global__ void k_pingpong(uint8_t *buf, uint64_t *sig, int iters, long long *cyc, int mode)
{
	if (threadIdx.x)
		return;
	int me = nvshmem_my_pe(), peer = 1 - me;
	long long c0 = clock64(), n0 = globaltimer_ns();
	for (int i = 0; i < iters; i++) {
		long long t0 = clock64();
		uint64_t v = (uint64_t)i + 1;
		if (mode == 1) { /* a p of the value, the peer's wait_until */
			if (me == 0) {
				nvshmem_uint64_p(sig, v, peer);
				nvshmem_uint64_wait_until(sig, NVSHMEM_CMP_GE, v);
			} else {
				nvshmem_uint64_wait_until(sig, NVSHMEM_CMP_GE, v);
				nvshmem_uint64_p(sig, v, peer);
			}
		} else if (me == 0) {
			nvshmem_putmem_signal_nbi(buf, buf + 64, 8, sig, v, NVSHMEM_SIGNAL_SET, peer);
			nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, v);
		} else {
			nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, v);
			nvshmem_putmem_signal_nbi(buf, buf + 64, 8, sig, v, NVSHMEM_SIGNAL_SET, peer);
		}
		cyc[i] = clock64() - t0;
	}
	cyc[iters] = clock64() - c0;
	cyc[iters + 1] = globaltimer_ns() - n0;
}

/* as b_fadd: span[0] earliest start, span[1] latest end (globaltimer ns) */
__global__ void k_fadd(uint64_t *ctr, int iters, unsigned long long *span)
{
	if (threadIdx.x == 0)
		atomicMin(&span[0], (unsigned long long)globaltimer_ns());
	uint64_t acc = 0;
	for (int i = 0; i < iters; i++)
		acc += nvshmem_uint64_atomic_fetch_add(ctr, 1, 0);
	if (acc == 0xffffffffffffffffull)
		ctr[1] = acc; /* keep the results live */
	__syncthreads();
	if (threadIdx.x == 0)
		atomicMax(&span[1], (unsigned long long)globaltimer_ns());
}

__global__ void k_barrier(int iters, long long *cyc)
{
	long long c0 = clock64(), n0 = globaltimer_ns();
	for (int i = 0; i < iters; i++) {
		long long t0 = clock64();
		nvshmemx_barrier_all_block();
		if (threadIdx.x == 0)
			cyc[i] = clock64() - t0;
	}
	if (threadIdx.x == 0) {
		cyc[iters] = clock64() - c0;
		cyc[iters + 1] = globaltimer_ns() - n0;
	}
}

static double pct(std::vector<double> v, double p)
{
	std::sort(v.begin(), v.end());
	return v[std::min(v.size() - 1, (size_t)(p * (double)v.size()))];
}

/* milliseconds of what launch() enqueues on s */
template <typename F> static float time_ms(cudaStream_t s, F launch)
{
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	CK(cudaEventRecord(a, s));
	launch();
	CK(cudaGetLastError());
	CK(cudaEventRecord(b, s));
	CK(cudaEventSynchronize(b));
	float ms;
	CK(cudaEventElapsedTime(&ms, a, b));
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return ms;
}

static void collective(const void *fn, unsigned grid, unsigned block, void **args, cudaStream_t s)
{
	if (nvshmemx_collective_launch(fn, dim3(grid), dim3(block), args, 0, s) != 0 || cudaGetLastError() != cudaSuccess) {
		fprintf(stderr, "bench_nvshmem: collective launch failed\n");
		exit(1);
	}
}

static void put_bw(int me, cudaStream_t s, int reps)
{
	const uint64_t maxb = 64ull << 20;
	uint8_t *dst = (uint8_t *)nvshmem_malloc(maxb), *src = (uint8_t *)nvshmem_malloc(maxb);
	CK(cudaMemset(src, 7, maxb));
	CK(cudaDeviceSynchronize());
	nvshmem_barrier_all();
	for (uint64_t b = 4096; b <= maxb; b *= 4) {
		unsigned grid = (unsigned)std::max<uint64_t>(1, std::min<uint64_t>(b / (8 << 10), 528));
		int r = b >= (16u << 20) ? std::max(4, reps / 50) : reps;
		std::vector<double> t;
		if (me == 0)
			for (int it = 0; it < 6; it++)
				t.push_back(time_ms(s, [&] { k_put<<<grid, 512, 0, s>>>(dst, src, b, 1, r, maxb); }));
		nvshmem_barrier_all();
		if (me == 0) {
			t.erase(t.begin()); /* warm-up */
			printf("nvshmem put_bw %llu %.1f\n", (unsigned long long)b, (double)b * r / (pct(t, 0.5) * 1e-3) / 1e9);
			fflush(stdout);
		}
	}
	nvshmem_free(dst);
	nvshmem_free(src);
}

/* as tools/bench_shmem.c's put_warp: 8 and 32 warps per SM, messages 256 KiB apart, >= 1 GiB a kernel */
static const uint64_t LANE = 256 << 10, MAXB = 64ull << 20;
static uint64_t many_bytes(int sms)
{
	return (uint64_t)sms * 32 * LANE + MAXB;
}
static void put_warp(int me, cudaStream_t s, int sms)
{
	uint64_t len = many_bytes(sms);
	uint8_t *dst = (uint8_t *)nvshmem_malloc(len), *src = (uint8_t *)nvshmem_malloc(len);
	if (!dst || !src) {
		fprintf(stderr, "bench_nvshmem: no %llu bytes of symmetric heap for put_warp\n", 2ull * len);
		exit(1);
	}
	CK(cudaMemset(src, 0x5a, len));
	CK(cudaDeviceSynchronize());
	nvshmem_barrier_all();
	for (int wps : {8, 32}) {
		unsigned grid = (unsigned)(sms * wps / 8);
		uint64_t nw = (uint64_t)grid * 8;
		for (uint64_t b = 4096; b <= MAXB; b *= 4) {
			int msgs = (int)(((1ull << 30) + nw * b - 1) / (nw * b)), runs = b >= (16u << 20) ? 4 : 6;
			std::vector<double> t;
			if (me == 0)
				for (int it = 0; it < runs; it++)
					t.push_back(time_ms(s, [&] { k_put_warp<<<grid, 256, 0, s>>>(dst, src, b, 1, msgs, LANE); }));
			nvshmem_barrier_all();
			if (me == 0) {
				t.erase(t.begin()); /* warm-up */
				printf("nvshmem put_warp %d %llu %.1f\n", wps, (unsigned long long)b,
				       (double)b * msgs * nw / (pct(t, 0.5) * 1e-3) / 1e9);
				fflush(stdout);
			}
		}
	}
	nvshmem_free(dst);
	nvshmem_free(src);
}

/* microseconds per cycle, from the loop's totals (see k_pingpong) */
static double us_per_cycle(const std::vector<long long> &c, int iters)
{
	return c[iters] > 0 ? (double)c[iters + 1] / (double)c[iters] / 1e3 : 0;
}

/* mode 0: put+signal ("nvshmem pingpong"), 1: p + wait_until ("nvshmem waitpp") */
static void pingpong(int me, cudaStream_t s, int iters, int mode)
{
	uint8_t *buf = (uint8_t *)nvshmem_malloc(4096);
	uint64_t *sig = (uint64_t *)nvshmem_malloc(64);
	long long *cyc;
	CK(cudaMemset(sig, 0, 64));
	CK(cudaMalloc(&cyc, sizeof(long long) * (iters + 2)));
	CK(cudaDeviceSynchronize());
	nvshmem_barrier_all();
	void *args[] = {&buf, &sig, &iters, &cyc, &mode};
	float ms = time_ms(s, [&] { collective((const void *)k_pingpong, 1, 32, args, s); });
	std::vector<long long> c(iters + 2);
	CK(cudaMemcpy(c.data(), cyc, sizeof(long long) * (iters + 2), cudaMemcpyDeviceToHost));
	if (me == 0) {
		std::vector<double> us;
		for (int i = iters / 10; i < iters; i++)
			us.push_back(c[i] * us_per_cycle(c, iters) / 2);
		printf("nvshmem %s %.2f %.2f %.2f\n", mode ? "waitpp" : "pingpong", pct(us, 0.5), pct(us, 0.99),
		       ms * 1e3 / iters / 2);
		fflush(stdout);
	}
	nvshmem_barrier_all();
	cudaFree(cyc);
	nvshmem_free(buf);
	nvshmem_free(sig);
}

static void fadd(int me, int npes, cudaStream_t s, int iters)
{
	uint64_t *ctr = (uint64_t *)nvshmem_malloc(64);
	CK(cudaMemset(ctr, 0, 64));
	CK(cudaDeviceSynchronize());
	nvshmem_barrier_all();
	const unsigned grid = 4, block = 256;
	unsigned long long *span, h[2] = {~0ull, 0};
	CK(cudaMalloc(&span, sizeof(h)));
	CK(cudaMemcpy(span, h, sizeof(h), cudaMemcpyHostToDevice));
	nvshmem_barrier_all();
	k_fadd<<<grid, block, 0, s>>>(ctr, iters, span);
	CK(cudaStreamSynchronize(s));
	nvshmem_barrier_all();
	uint64_t total = 0;
	if (me == 0)
		CK(cudaMemcpy(&total, ctr, 8, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(h, span, sizeof(h), cudaMemcpyDeviceToHost));
	cudaFree(span);
	printf("nvshmem fadd %d %d %llu %llu %llu%s\n", me, npes, (unsigned long long)grid * block * iters, h[0], h[1],
	       me == 0 && total != (uint64_t)npes * grid * block * iters ? " WRONG-TOTAL" : "");
	fflush(stdout);
	nvshmem_free(ctr);
}

static void barrier(int me, int npes, cudaStream_t s, int iters)
{
	long long *cyc;
	CK(cudaMalloc(&cyc, sizeof(long long) * (iters + 2)));
	nvshmem_barrier_all();
	void *args[] = {&iters, &cyc};
	float ms = time_ms(s, [&] { collective((const void *)k_barrier, 1, 128, args, s); });
	std::vector<long long> c(iters + 2);
	CK(cudaMemcpy(c.data(), cyc, sizeof(long long) * (iters + 2), cudaMemcpyDeviceToHost));
	if (me == 0) {
		std::vector<double> us;
		for (int i = iters / 10; i < iters; i++)
			us.push_back(c[i] * us_per_cycle(c, iters));
		printf("nvshmem barrier %d %.2f %.2f %.2f\n", npes, pct(us, 0.5), pct(us, 0.99), ms * 1e3 / iters);
		fflush(stdout);
	}
	cudaFree(cyc);
}

/* ---- team collectives (mori-bench coll --nvshmem) ---- */
/* reduce-scatter (host-initiated only) where this NVSHMEM has it (3.2 on) */
#if defined(NVSHMEM_VENDOR_MAJOR_VERSION) && defined(NVSHMEM_VENDOR_MINOR_VERSION) &&                     \
	(NVSHMEM_VENDOR_MAJOR_VERSION > 3 || (NVSHMEM_VENDOR_MAJOR_VERSION == 3 && NVSHMEM_VENDOR_MINOR_VERSION >= 2))
#define NV_HAS_RS 1
#else
#define NV_HAS_RS 0
#endif
enum { C_AR, C_AG, C_A2A, C_BC, C_RS, C_N };
static const char *const cnames[C_N] = {"allreduce", "allgather", "alltoall", "broadcast", "reducescatter"};
static const uint64_t DEV_MAX = 64ull << 20;

/* elements each call passes for size S (nccl-tests' size: all-reduce and broadcast buffer,
 * all-gather's output, all-to-all's buffer) */
static size_t coll_elems(int kind, uint64_t S, int npes)
{
	return kind == C_AR || kind == C_BC ? S / 4 : S / 4 / (uint64_t)npes; /* reduce-scatter: each PE's output */
}

__global__ void k_coll(int kind, float *dst, const float *src, size_t nelems, int iters)
{
	for (int i = 0; i < iters; i++) {
		switch (kind) {
		case C_AR: nvshmemx_float_sum_reduce_block(NVSHMEM_TEAM_WORLD, dst, src, nelems); break;
		case C_AG: nvshmemx_float_fcollect_block(NVSHMEM_TEAM_WORLD, dst, src, nelems); break;
		case C_A2A: nvshmemx_float_alltoall_block(NVSHMEM_TEAM_WORLD, dst, src, nelems); break;
		default: nvshmemx_float_broadcast_block(NVSHMEM_TEAM_WORLD, dst, src, nelems, 0); break;
		}
	}
}

static void coll_host(int kind, float *dst, const float *src, size_t nelems, cudaStream_t s)
{
	switch (kind) {
	case C_AR: nvshmemx_float_sum_reduce_on_stream(NVSHMEM_TEAM_WORLD, dst, src, nelems, s); break;
	case C_AG: nvshmemx_float_fcollect_on_stream(NVSHMEM_TEAM_WORLD, dst, src, nelems, s); break;
	case C_A2A: nvshmemx_float_alltoall_on_stream(NVSHMEM_TEAM_WORLD, dst, src, nelems, s); break;
#if NV_HAS_RS
	case C_RS: nvshmemx_float_sum_reducescatter_on_stream(NVSHMEM_TEAM_WORLD, dst, src, nelems, s); break;
#endif
	default: nvshmemx_float_broadcast_on_stream(NVSHMEM_TEAM_WORLD, dst, src, nelems, 0, s); break;
	}
}

static void colls(int me, int npes, cudaStream_t s, uint64_t maxb, int iters)
{
	float *src = (float *)nvshmem_malloc(maxb), *dst = (float *)nvshmem_malloc(maxb);
	if (!src || !dst) {
		fprintf(stderr, "bench_nvshmem: no 2 x %llu bytes of symmetric heap\n", (unsigned long long)maxb);
		exit(1);
	}
	CK(cudaMemset(src, 0, maxb));
	CK(cudaDeviceSynchronize());
	nvshmem_barrier_all();
	std::vector<cudaEvent_t> ev(2 * (size_t)iters);
	for (auto &e : ev)
		CK(cudaEventCreate(&e));
	for (int kind = 0; kind < C_N; kind++)
		for (uint64_t S = 8; S <= (kind == C_AR ? maxb : maxb / 4) && (kind != C_RS || NV_HAS_RS); S *= 8) {
			size_t ne = coll_elems(kind, S, npes);
			if (!ne)
				continue;
			int it = S <= (1u << 20) ? iters : S <= (64u << 20) ? 10 : 3;
			for (int w = 0; w < 2; w++)
				coll_host(kind, dst, src, ne, s);
			CK(cudaStreamSynchronize(s));
			nvshmem_barrier_all();
			for (int i = 0; i < it; i++) {
				CK(cudaEventRecord(ev[2 * i], s));
				coll_host(kind, dst, src, ne, s);
				CK(cudaEventRecord(ev[2 * i + 1], s));
			}
			CK(cudaStreamSynchronize(s));
			std::vector<double> t;
			for (int i = 0; i < it; i++) {
				float ms;
				CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
				t.push_back(ms * 1e3);
			}
			if (me == 0) {
				printf("nvshmem coll %s host %d %llu %.2f\n", cnames[kind], npes, (unsigned long long)S, pct(t, 0.5));
				fflush(stdout);
			}
			if (S > DEV_MAX || kind == C_RS)
				continue;
			int kit = it, k = kind;
			void *args[] = {&k, &dst, &src, &ne, &kit};
			/* the widest block that fits an SM (a collective launch refuses one that cannot be
			 * resident, and a refused launch must not print a figure) */
			unsigned kb = 1024;
			for (int nb = 0; kb >= 128; kb /= 2)
				if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k_coll, (int)kb, 0) == cudaSuccess && nb > 0)
					break;
			if (kb < 128) {
				if (me == 0)
					printf("nvshmem coll %s kernel %d %llu launch-refused\n", cnames[kind], npes, (unsigned long long)S);
				continue;
			}
			collective((const void *)k_coll, 1, kb, args, s); /* warm */
			CK(cudaStreamSynchronize(s));
			nvshmem_barrier_all();
			float ms = time_ms(s, [&] { collective((const void *)k_coll, 1, kb, args, s); });
			if (me == 0) {
				printf("nvshmem coll %s kernel %d %llu %.2f\n", cnames[kind], npes, (unsigned long long)S,
				       ms * 1e3 / kit);
				fflush(stdout);
			}
			nvshmem_barrier_all();
		}
	for (auto &e : ev)
		cudaEventDestroy(e);
	nvshmem_free(dst);
	nvshmem_free(src);
}

int main(int argc, char **argv)
{
	int coll_mode = argc > 1 && !strcmp(argv[1], "coll");
	uint64_t coll_max = 0;
	int coll_iters = 20;
	if (coll_mode) { /* bench_nvshmem coll RANK NPES UID_FILE MAX_BYTES ITERS */
		if (argc < 7) {
			fprintf(stderr, "usage: bench_nvshmem coll RANK NPES UID_FILE MAX_BYTES ITERS\n");
			return 2;
		}
		coll_max = strtoull(argv[5], NULL, 10);
		coll_iters = atoi(argv[6]);
		if (coll_iters < 1)
			coll_iters = 1;
		argv++;
		argc = 4;
	}
	if (argc < 4) {
		fprintf(stderr, "usage: bench_nvshmem RANK NPES UID_FILE [reps]\n");
		return 2;
	}
	int rank = atoi(argv[1]), npes = atoi(argv[2]);
	const char *uidf = argv[3];
	int reps = argc > 4 ? atoi(argv[4]) : 200, sms = argc > 5 ? atoi(argv[5]) : 0;
	CK(cudaSetDevice(0));
	if (sms <= 0)
		CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	if (coll_mode) { /* the two buffers; set before anything of NVSHMEM reads its options */
		char v[32];
		unsigned long long need = 2 * coll_max + (512ull << 20);
		snprintf(v, sizeof(v), "%lluG", (need + (1ull << 30) - 1) >> 30);
		setenv("NVSHMEM_SYMMETRIC_SIZE", v, 1);
	} else if (npes == 2) { /* put_warp's two buffers; set before anything of NVSHMEM reads its options */
		char v[32];
		unsigned long long need = 2 * many_bytes(sms) + (256ull << 20); /* + NVSHMEM's own */
		snprintf(v, sizeof(v), "%lluG", (need + (1ull << 30) - 1) >> 30);
		setenv("NVSHMEM_SYMMETRIC_SIZE", v, 1);
	}
	nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
	if (rank == 0) {
		nvshmemx_get_uniqueid(&id);
		char tmp[512];
		snprintf(tmp, sizeof(tmp), "%s.tmp", uidf);
		FILE *f = fopen(tmp, "wb");
		if (!f || fwrite(&id, sizeof(id), 1, f) != 1 || fclose(f) || rename(tmp, uidf)) {
			perror("bench_nvshmem: unique id file");
			return 1;
		}
	} else {
		FILE *f = NULL;
		for (int i = 0; i < 600 && !(f = fopen(uidf, "rb")); i++)
			usleep(50000);
		if (!f || fread(&id, sizeof(id), 1, f) != 1) {
			fprintf(stderr, "bench_nvshmem: no unique id in %s\n", uidf);
			return 1;
		}
		fclose(f);
	}
	nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
	nvshmemx_set_attr_uniqueid_args(rank, npes, &id, &attr);
	if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) {
		fprintf(stderr, "bench_nvshmem: init failed\n");
		return 1;
	}
	int me = nvshmem_my_pe();
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	if (coll_mode) {
		colls(me, npes, s, coll_max, coll_iters);
		nvshmem_barrier_all();
		nvshmem_finalize();
		return 0;
	}
	if (npes == 2) {
		if (reps > 0) { /* reps 0: the latency rows only (mori-bench shmem --lat) */
			put_bw(me, s, reps);
			put_warp(me, s, sms);
		}
		pingpong(me, s, 20000, 0);
		pingpong(me, s, 20000, 1);
	}
	fadd(me, npes, s, 1000);
	barrier(me, npes, s, 5000);
	nvshmem_barrier_all();
	nvshmem_finalize();
	return 0;
}
