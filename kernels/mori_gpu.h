/* mori_gpu.h: the one portability header of mori's GPU kernels. CUDA (nvcc) and HIP (hipcc)
 * compile the same kernel source through it: thread geometry, warp size, vector types, loads
 * and stores with cache hints, and memory-order helpers named for what they are for (as
 * rdma-core names its barriers), never a bare fence at the call site. */
#ifndef MORI_GPU_KERNEL_H
#define MORI_GPU_KERNEL_H

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__)
#define MORI_HIP 1
#include <hip/hip_runtime.h>
#else
#define MORI_CUDA 1
#endif
#include <stdint.h>

#define MORI_DEVICE __device__ __forceinline__
#define MORI_KERNEL extern "C" __global__

/* Lanes that execute in lock step: 32 on NVIDIA, 64 on the AMD Instinct parts mori targets
 * (gfx942/gfx950 run wave64). */
#ifdef MORI_HIP
#define MORI_WARP_SIZE 64
#else
#define MORI_WARP_SIZE 32
#endif

/* ---- geometry ---- */
MORI_DEVICE unsigned mori_lane(void) { return threadIdx.x & (MORI_WARP_SIZE - 1); }
MORI_DEVICE uint64_t mori_global_warp(void)
{
	return ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / MORI_WARP_SIZE;
}
MORI_DEVICE uint64_t mori_grid_warps(void)
{
	return (uint64_t)gridDim.x * blockDim.x / MORI_WARP_SIZE;
}

/* ---- 16-byte vectors and streaming copies ----
 * Bytes a copy kernel moves are read once and written once: the streaming hints keep them
 * from evicting data the application's own kernels want in L2. */
typedef uint4 mori_vec16;
#ifdef MORI_HIP
/* clang's nontemporal builtins take native vectors, not HIP's uint4 wrapper struct */
typedef unsigned int mori_native16 __attribute__((ext_vector_type(4)));
#endif

MORI_DEVICE mori_vec16 mori_load_once16(const mori_vec16 *p)
{
#ifdef MORI_HIP
	mori_native16 n = __builtin_nontemporal_load((const mori_native16 *)p);
	return make_uint4(n.x, n.y, n.z, n.w);
#else
	return __ldcs(p);
#endif
}
MORI_DEVICE void mori_store_once16(mori_vec16 *p, mori_vec16 v)
{
#ifdef MORI_HIP
	mori_native16 n = {v.x, v.y, v.z, v.w};
	__builtin_nontemporal_store(n, (mori_native16 *)p);
#else
	__stcs(p, v);
#endif
}

/* ---- memory order, by purpose ----
 * Publishing to another process or to the CPU: every write this thread made before (to any
 * memory) is visible system-wide before the flag is. Pairs with mori_acquire_load_sys on the
 * observer's side (or with a CPU acquire load of the flag). */
MORI_DEVICE void mori_release_store_sys(uint64_t *flag, uint64_t v)
{
#ifdef MORI_HIP
	__hip_atomic_store(flag, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
	asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(v) : "memory");
#endif
}
/* Observing a flag another process or the CPU published: reads after it see what was written
 * before the release. */
MORI_DEVICE uint64_t mori_acquire_load_sys(const uint64_t *flag)
{
#ifdef MORI_HIP
	return __hip_atomic_load(flag, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
#else
	uint64_t v;
	asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(flag) : "memory");
	return v;
#endif
}
/* The same between blocks of kernels on this one GPU (cheaper: no system-scope fence). */
MORI_DEVICE void mori_release_store_gpu(uint64_t *flag, uint64_t v)
{
#ifdef MORI_HIP
	__hip_atomic_store(flag, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
#else
	asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(flag), "l"(v) : "memory");
#endif
}
MORI_DEVICE uint64_t mori_acquire_load_gpu(const uint64_t *flag)
{
#ifdef MORI_HIP
	return __hip_atomic_load(flag, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_AGENT);
#else
	uint64_t v;
	asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(flag) : "memory");
	return v;
#endif
}
/* Before a plain store that tells the host "data written": orders this thread's data writes
 * (to device or mapped host memory) ahead of it for every observer. */
MORI_DEVICE void mori_fence_data_before_host_signal(void)
{
	__threadfence_system(); /* HIP provides it too */
}
#endif
