/* mori/device/gpu.h: the one portability header of mori's GPU kernels. CUDA (nvcc) and HIP (hipcc)
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

/* clang -x cuda -nocudainc (MORI-IR's bitcode, mk/ir.mk): no CUDA headers, whose newer
 * releases clang 16 cannot parse; clang's own builtins give the little of them used here.
 * (clang's CUDA wrapper header defines __CUDACC__; with -nocudainc nothing does.) */
#if defined(MORI_CUDA) && defined(__clang__) && defined(__CUDA__) && !defined(__CUDACC__)
#define MORI_BARE_CLANG 1
#include <__clang_cuda_builtin_vars.h> /* threadIdx, blockIdx, blockDim, gridDim */
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
struct __attribute__((aligned(16))) uint4 {
	unsigned int x, y, z, w;
};
typedef struct uint4 uint4;
static __device__ __forceinline__ uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
	uint4 v = {x, y, z, w};
	return v;
}
static __device__ __forceinline__ uint4 __ldcs(const uint4 *p)
{
	uint4 v;
	asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}
static __device__ __forceinline__ void __stcs(uint4 *p, uint4 v)
{
	asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
		     : "memory");
}
/* __syncthreads is a clang builtin */
static __device__ __forceinline__ int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
#define __syncthreads_or(p) __nvvm_bar0_or(p)
#define __syncwarp() __nvvm_bar_warp_sync(0xffffffffu)
#define __shfl_sync(mask, v, src) __nvvm_shfl_sync_idx_i32((mask), (v), (src), 0x1f)
static __device__ __forceinline__ void __threadfence_system(void) { asm volatile("membar.sys;" ::: "memory"); }
static __device__ __forceinline__ unsigned long long __ldg(const unsigned long long *p)
{
	unsigned long long v;
	asm("ld.global.nc.u64 %0, [%1];" : "=l"(v) : "l"(p));
	return v;
}
static __device__ __forceinline__ int __ldg(const int *p)
{
	int v;
	asm("ld.global.nc.s32 %0, [%1];" : "=r"(v) : "l"(p));
	return v;
}
/* Atomics as PTX text rather than NVVM intrinsics: inline asm reads the same in every later
 * LLVM that links this bitcode, whose intrinsic names change. Generic addresses, as CUDA's. */
#define MORI_BARE_AMO(name, scope, op, t32, t64)                                                       \
	static __device__ __forceinline__ unsigned int name(unsigned int *p, unsigned int v)             \
	{                                                                                                \
		unsigned int old;                                                                        \
		asm volatile("atom" scope "." op "." t32 " %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory"); \
		return old;                                                                              \
	}                                                                                                \
	static __device__ __forceinline__ unsigned long long name(unsigned long long *p, unsigned long long v) \
	{                                                                                                \
		unsigned long long old;                                                                  \
		asm volatile("atom" scope "." op "." t64 " %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory"); \
		return old;                                                                              \
	}
MORI_BARE_AMO(atomicAdd, "", "add", "u32", "u64")
MORI_BARE_AMO(atomicAdd_system, ".sys", "add", "u32", "u64")
MORI_BARE_AMO(atomicAnd_system, ".sys", "and", "b32", "b64")
MORI_BARE_AMO(atomicOr_system, ".sys", "or", "b32", "b64")
MORI_BARE_AMO(atomicXor_system, ".sys", "xor", "b32", "b64")
MORI_BARE_AMO(atomicExch_system, ".sys", "exch", "b32", "b64")
#undef MORI_BARE_AMO
#define MORI_BARE_CAS(name, scope)                                                                     \
	static __device__ __forceinline__ unsigned int name(unsigned int *p, unsigned int c, unsigned int v) \
	{                                                                                                \
		unsigned int old;                                                                        \
		asm volatile("atom" scope ".cas.b32 %0, [%1], %2, %3;" : "=r"(old) : "l"(p), "r"(c), "r"(v) : "memory"); \
		return old;                                                                              \
	}                                                                                                \
	static __device__ __forceinline__ unsigned long long name(unsigned long long *p, unsigned long long c, \
								   unsigned long long v)                 \
	{                                                                                                \
		unsigned long long old;                                                                  \
		asm volatile("atom" scope ".cas.b64 %0, [%1], %2, %3;" : "=l"(old) : "l"(p), "l"(c), "l"(v) : "memory"); \
		return old;                                                                              \
	}
MORI_BARE_CAS(atomicCAS, "")
MORI_BARE_CAS(atomicCAS_system, ".sys")
#undef MORI_BARE_CAS
#endif

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
 * Each helper says what it is for; the device API never places a bare fence. Most exist at two
 * scopes, defined once by MORI_ORDER_AT:
 *   _sys  the other side is another GPU, another process or the CPU (peers' heaps, the proxy ring
 *         in mapped host memory);
 *   _gpu  every thread the order is for runs on this GPU (other blocks, other processes' kernels
 *         under MPS): cheaper (no wait for the system-wide performance of earlier stores, no
 *         system-scope invalidation on acquire). The device API decides it once per peer
 *         (mori_shmem_state.peer_scope, .wait_scope) and calls the _scoped forms below.
 * For scope s:
 *   mori_release_store_s(flag, v)  publishing: every write this thread made before (to any memory)
 *                                  is visible at scope s before the flag is. Pairs with
 *                                  mori_acquire_load_s on the observer's side (or a CPU acquire
 *                                  load of the flag). 64-bit, and 32-bit (the proxy ring's
 *                                  `ready`, int waits).
 *   mori_acquire_load_s(flag)      observing a flag published so: reads after it see what was
 *                                  written before the release. 64- and 32-bit.
 *   mori_relaxed_load_s(p)         a word another agent may change at any time, with no ordering
 *                                  of other accesses (the abort word, a counter only compared):
 *                                  never served stale from this SM's L1. 64- and 32-bit.
 *   mori_release_add_s(sig, v)     a signal added after the data (put with SIGNAL_ADD): every write
 *                                  this thread made before, and every write ordered before them
 *                                  (a warp or block synchronisation), is visible to any observer
 *                                  that sees the addition.
 *   mori_acquire_after_wait_s()    a wait that observed a signal with relaxed loads (cheap polls):
 *                                  from here on, reads see what the signaller wrote before its
 *                                  release. (A relaxed load followed by an acquire fence is an
 *                                  acquire pattern in the PTX memory model.)
 * MORI_ORDER_AT's arguments: s, PTX's name of the scope; hs, HIP's memory scope; as, amdgcn's
 * fence scope ("" is system). */
#ifdef MORI_HIP
#define MORI_ORDER_HIP_acquire __ATOMIC_ACQUIRE
#define MORI_ORDER_HIP_relaxed __ATOMIC_RELAXED
#define MORI_ORDER_ST(s, hs, w, c) __hip_atomic_store(p, v, __ATOMIC_RELEASE, hs)
#define MORI_ORDER_LD(ord, s, hs, w, c) return __hip_atomic_load((const uint##w##_t *)p, MORI_ORDER_HIP_##ord, hs)
#define MORI_ORDER_ADD(s, hs) __hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, hs)
#define MORI_ORDER_ACQ_FENCE(s, as) __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, as)
#else
#define MORI_ORDER_ST(s, hs, w, c) asm volatile("st.release." #s ".global.u" #w " [%0], %1;" ::"l"(p), c(v) : "memory")
#define MORI_ORDER_LD(ord, s, hs, w, c)                                                                  \
	uint##w##_t v;                                                                                   \
	asm volatile("ld." #ord "." #s ".global.u" #w " %0, [%1];" : "=" c(v) : "l"(p) : "memory");      \
	return v
#define MORI_ORDER_ADD(s, hs) asm volatile("red.release." #s ".global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory")
#define MORI_ORDER_ACQ_FENCE(s, as) asm volatile("fence.acq_rel." #s ";" ::: "memory")
#endif
#define MORI_ORDER_AT(s, hs, as)                                                                         \
	MORI_DEVICE void mori_release_store_##s(uint64_t *p, uint64_t v) { MORI_ORDER_ST(s, hs, 64, "l"); } \
	MORI_DEVICE void mori_release_store_##s(uint32_t *p, uint32_t v) { MORI_ORDER_ST(s, hs, 32, "r"); } \
	MORI_DEVICE uint64_t mori_acquire_load_##s(const uint64_t *p) { MORI_ORDER_LD(acquire, s, hs, 64, "l"); } \
	MORI_DEVICE uint32_t mori_acquire_load_##s(const uint32_t *p) { MORI_ORDER_LD(acquire, s, hs, 32, "r"); } \
	MORI_DEVICE uint64_t mori_relaxed_load_##s(const volatile uint64_t *p) { MORI_ORDER_LD(relaxed, s, hs, 64, "l"); } \
	MORI_DEVICE uint32_t mori_relaxed_load_##s(const volatile uint32_t *p) { MORI_ORDER_LD(relaxed, s, hs, 32, "r"); } \
	MORI_DEVICE void mori_release_add_##s(uint64_t *p, uint64_t v) { MORI_ORDER_ADD(s, hs); }            \
	MORI_DEVICE void mori_acquire_after_wait_##s(void) { MORI_ORDER_ACQ_FENCE(s, as); }
MORI_ORDER_AT(sys, __HIP_MEMORY_SCOPE_SYSTEM, "")
MORI_ORDER_AT(gpu, __HIP_MEMORY_SCOPE_AGENT, "agent")
#undef MORI_ORDER_AT
#undef MORI_ORDER_ST
#undef MORI_ORDER_LD
#undef MORI_ORDER_ADD
#undef MORI_ORDER_ACQ_FENCE
#undef MORI_ORDER_HIP_acquire
#undef MORI_ORDER_HIP_relaxed

/* Before a plain store that tells the host "data written": orders this thread's data writes
 * (to device or mapped host memory) ahead of it for every observer. */
MORI_DEVICE void mori_fence_data_before_host_signal(void)
{
	__threadfence_system(); /* HIP provides it too */
}
/* quiet: every store and atomic this thread issued (to its own heap, to peers' heaps, to host
 * memory) is performed system-wide before any later access of this thread. */
MORI_DEVICE void mori_complete_stores_sys(void)
{
	__threadfence_system();
}
/* fence: this thread's earlier stores to a PE are visible there before its later ones. On the
 * direct path that is the same system-scope fence; proxy requests are ordered by the ring. */
MORI_DEVICE void mori_order_stores_sys(void)
{
	__threadfence_system();
}

/* The scope chosen at run time: gpu true for GPU scope, else system scope. */
MORI_DEVICE void mori_release_store_scoped(uint64_t *flag, uint64_t v, bool gpu)
{
	if (gpu)
		mori_release_store_gpu(flag, v);
	else
		mori_release_store_sys(flag, v);
}
MORI_DEVICE void mori_release_add_scoped(uint64_t *sig, uint64_t v, bool gpu)
{
	if (gpu)
		mori_release_add_gpu(sig, v);
	else
		mori_release_add_sys(sig, v);
}
MORI_DEVICE uint64_t mori_acquire_load_scoped(const uint64_t *flag, bool gpu)
{
	return gpu ? mori_acquire_load_gpu(flag) : mori_acquire_load_sys(flag);
}
MORI_DEVICE uint32_t mori_acquire_load_scoped(const uint32_t *flag, bool gpu)
{
	return gpu ? mori_acquire_load_gpu(flag) : mori_acquire_load_sys(flag);
}
/* quiet and fence (mori_complete_stores_sys, mori_order_stores_sys) where every PE is on this GPU. */
MORI_DEVICE void mori_complete_stores_scoped(bool gpu)
{
	if (!gpu) {
		__threadfence_system();
		return;
	}
#ifdef MORI_HIP
	__builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
#else
	asm volatile("fence.sc.gpu;" ::: "memory");
#endif
}

/* System-scope atomics on 32- and 64-bit words of any heap (peers' too), relaxed: OpenSHMEM
 * atomics order nothing by themselves (fence and quiet do). */
#ifdef MORI_HIP
#define MORI_AMO_SYS(op, p, v) __hip_atomic_##op(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM)
template <typename T> MORI_DEVICE T mori_atomic_add_sys(T *p, T v) { return MORI_AMO_SYS(fetch_add, p, v); }
template <typename T> MORI_DEVICE T mori_atomic_and_sys(T *p, T v) { return MORI_AMO_SYS(fetch_and, p, v); }
template <typename T> MORI_DEVICE T mori_atomic_or_sys(T *p, T v) { return MORI_AMO_SYS(fetch_or, p, v); }
template <typename T> MORI_DEVICE T mori_atomic_xor_sys(T *p, T v) { return MORI_AMO_SYS(fetch_xor, p, v); }
template <typename T> MORI_DEVICE T mori_atomic_swap_sys(T *p, T v) { return MORI_AMO_SYS(exchange, p, v); }
template <typename T> MORI_DEVICE T mori_atomic_cas_sys(T *p, T cmp, T v)
{
	__hip_atomic_compare_exchange_strong(p, &cmp, v, __ATOMIC_RELAXED, __ATOMIC_RELAXED,
					     __HIP_MEMORY_SCOPE_SYSTEM);
	return cmp; /* the old value, whether or not it matched */
}
#undef MORI_AMO_SYS
#else
/* CUDA's *_system atomics take unsigned int / unsigned long long; T is uint32_t or uint64_t. */
template <typename T> struct mori_amo_word;
template <> struct mori_amo_word<uint32_t> { typedef unsigned int type; };
template <> struct mori_amo_word<uint64_t> { typedef unsigned long long type; };
#define MORI_AMO_SYS(fn, p, ...) (T)fn((typename mori_amo_word<T>::type *)(p), __VA_ARGS__)
template <typename T> MORI_DEVICE T mori_atomic_add_sys(T *p, T v) { return MORI_AMO_SYS(atomicAdd_system, p, v); }
template <typename T> MORI_DEVICE T mori_atomic_and_sys(T *p, T v) { return MORI_AMO_SYS(atomicAnd_system, p, v); }
template <typename T> MORI_DEVICE T mori_atomic_or_sys(T *p, T v) { return MORI_AMO_SYS(atomicOr_system, p, v); }
template <typename T> MORI_DEVICE T mori_atomic_xor_sys(T *p, T v) { return MORI_AMO_SYS(atomicXor_system, p, v); }
template <typename T> MORI_DEVICE T mori_atomic_swap_sys(T *p, T v) { return MORI_AMO_SYS(atomicExch_system, p, v); }
template <typename T> MORI_DEVICE T mori_atomic_cas_sys(T *p, T cmp, T v) { return MORI_AMO_SYS(atomicCAS_system, p, cmp, v); }
#undef MORI_AMO_SYS
#endif

/* A load of data nothing writes while the kernel runs (the PE state and its peer table): the
 * read-only data path, which the fences of the waits and signals do not invalidate. */
MORI_DEVICE uint64_t mori_load_const(const uint64_t *p)
{
#ifdef MORI_HIP
	return *p;
#else
	return __ldg((const unsigned long long *)p);
#endif
}
MORI_DEVICE int32_t mori_load_const(const int32_t *p)
{
#ifdef MORI_HIP
	return *p;
#else
	return __ldg((const int *)p);
#endif
}

/* ---- warp and block cooperation ---- */
/* Every lane's earlier memory accesses are ordered before any lane's later ones, and the lanes
 * have all arrived: NVIDIA schedules lanes independently (Volta and later), so a warp-scope
 * call synchronises before its signalling lane signals. AMD waves run in lock step. */
MORI_DEVICE void mori_sync_warp(void)
{
#ifdef MORI_HIP
	__builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
	__builtin_amdgcn_wave_barrier();
	__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
	__syncwarp();
#endif
}
/* lane src's v, in every lane of the warp (all lanes call it). */
MORI_DEVICE int mori_warp_bcast(int v, int src)
{
#ifdef MORI_HIP
	return __shfl(v, src);
#else
	return __shfl_sync(0xffffffffu, v, src);
#endif
}
/* A bit a lane: bit i is lane i's p (all lanes call it). */
MORI_DEVICE uint64_t mori_warp_ballot(bool p)
{
#ifdef MORI_HIP
	return __ballot(p);
#elif defined(MORI_BARE_CLANG)
	return __nvvm_vote_ballot_sync(0xffffffffu, p);
#else
	return __ballot_sync(0xffffffffu, p);
#endif
}
/* 1 in every lane when p holds in every lane of the warp (all lanes call it). */
MORI_DEVICE int mori_warp_all(int p)
{
#ifdef MORI_HIP
	return __all(p);
#else
	int r; /* vote.sync: clang's IR build has no __all_sync */
	asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 p, %1, 0;\n\tvote.sync.all.pred q, p, 0xffffffff;\n\t"
		     "selp.u32 %0, 1, 0, q;\n\t}" : "=r"(r) : "r"(p));
	return r;
#endif
}
MORI_DEVICE unsigned mori_block_thread(void)
{
	return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
MORI_DEVICE unsigned mori_block_threads(void) { return blockDim.x * blockDim.y * blockDim.z; }
#endif
