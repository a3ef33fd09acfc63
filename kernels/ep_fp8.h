/* MORI-EP's fp8 e4m3 (OCP e4m3fn: bias 7, no infinities, 0x7f/0xff NaN, largest finite 448)
 * quantisation, one definition for the GPU (kernels/ep.cu, where the hardware conversion is
 * absent) and the host (tests/test_ep_layout checks it against a nearest-code search). Plain C
 * or CUDA/HIP C++.
 *
 * The scale rule (DeepEP's low-latency dispatch with use_fp8): per group of 128 channels, amax =
 * max |x| (at least 1e-4); each x becomes e4m3(x * (448 / amax)), rounded to nearest even and
 * saturated at +-448; the group's float scale is amax / 448 (x ~ e4m3 value x scale). */
#ifndef MORI_EP_FP8_H
#define MORI_EP_FP8_H
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define EP_FP8_HD __host__ __device__ __forceinline__
#else
#include <math.h>
#define EP_FP8_HD static inline
#endif

#define EP_FP8_GROUP 128
#define EP_FP8_MAX 448.0f
#define EP_FP8_AMAX_MIN 1e-4f

/* f to e4m3, round to nearest even, saturating (NaN stays NaN: 0x7f with f's sign). */
EP_FP8_HD uint32_t ep_f32_to_e4m3(float f)
{
	union { float f; uint32_t u; } b;
	b.f = f;
	const uint32_t sign = (b.u >> 24) & 0x80u, mag = b.u & 0x7fffffffu;
	if (mag > 0x7f800000u)
		return sign | 0x7fu;
	b.u = mag;
	const float a = b.f;
	if (a >= EP_FP8_MAX) /* 448 and above (inf too): the largest finite */
		return sign | 0x7eu;
	if (a < 0.015625f) /* below 2^-6: subnormal steps of 2^-9; 8 steps is the smallest normal */
		return sign | (uint32_t)rintf(a * 512.0f);
	int e = (int)(mag >> 23) - 127;        /* -6..8 */
	uint32_t m = (mag >> 20) & 7u, rest = mag & 0xfffffu;
	if (rest > 0x80000u || (rest == 0x80000u && (m & 1u)))
		m++;
	if (m == 8u)
		m = 0, e++;
	if (e > 8 || (e == 8 && m == 7u)) /* 480 and up: saturate (only reachable by rounding up) */
		return sign | 0x7eu;
	return sign | (uint32_t)(e + 7) << 3 | m;
}

/* The group's multiplier and scale from its amax (as the rule above). */
EP_FP8_HD float ep_fp8_mult(float amax) { return EP_FP8_MAX / (amax < EP_FP8_AMAX_MIN ? EP_FP8_AMAX_MIN : amax); }
EP_FP8_HD float ep_fp8_scale(float amax) { return (amax < EP_FP8_AMAX_MIN ? EP_FP8_AMAX_MIN : amax) / EP_FP8_MAX; }
#endif
