// mori-bench coll's compute load for the overlap row: a plain tiled SGEMM (C = A x B, n x n,
// row-major), 64 x 64 tiles, 256 threads, 4 x 4 outputs a thread. cuBLAS is not linked; this is
// the kernel the copy-engine and kernel all-gathers run beside.
#include "mori/device/gpu.h"

#define TS 64
#define TK 16
MORI_KERNEL void __launch_bounds__(256) bench_sgemm(const float *A, const float *B, float *C, int n)
{
	__shared__ float As[TK][TS], Bs[TK][TS];
	int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
	int row0 = blockIdx.y * TS, col0 = blockIdx.x * TS;
	float acc[4][4] = {};
	for (int k0 = 0; k0 < n; k0 += TK) {
		for (int i = threadIdx.x; i < TK * TS; i += 256) {
			int r = i / TK, c = i % TK; /* A tile: TS rows x TK cols */
			As[c][r] = A[(size_t)(row0 + r) * n + k0 + c];
			int br = i / TS, bc = i % TS; /* B tile: TK rows x TS cols */
			Bs[br][bc] = B[(size_t)(k0 + br) * n + col0 + bc];
		}
		__syncthreads();
		for (int k = 0; k < TK; k++) {
			float a[4], b[4];
			for (int i = 0; i < 4; i++) {
				a[i] = As[k][ty * 4 + i];
				b[i] = Bs[k][tx * 4 + i];
			}
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 4; j++)
					acc[i][j] += a[i] * b[j];
		}
		__syncthreads();
	}
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++)
			C[(size_t)(row0 + ty * 4 + i) * n + col0 + tx * 4 + j] = acc[i][j];
}
