// MORI-SHMEM in libmori's image: the kernels the host API launches on a stream
// (kernels/mori_shmem_kernels.h), and the device API as extern "C" functions with ROCm/mori's
// names and MORI-IR's ABI (pointers as uint64_t, int32 status returns), instantiated from the
// one table in mori/device/shmem.cuh. In libmori's whole-program image the wrappers are unused and
// dropped; built with -rdc (static device library) or as bitcode (MORI-IR) they are the exports.
// They order as the inline API does: at the scope the PE's state chose per peer (GPU scope towards
// heaps on this GPU, system scope otherwise: "Ordering scope" in mori/device/shmem.cuh).
#define MORI_SHMEM_NO_CXX_API
#include "mori/device/shmem.cuh"
#include "mori_shmem_kernels.h"

/* MORI-IR's builds (mk/ir.mk) export the device API alone: these kernels' host stubs would
 * clash with libmori's host functions of the same names in a program linking both. */
#ifndef MORI_SHMEM_NO_KERNELS
MORI_KERNEL void __launch_bounds__(MORI_SHMEM_KERNEL_THREADS)
	mori_shmem_barrier_on_stream(const struct mori_shmem_state *st, int *rc)
{
	/* the stream's earlier kernels' stores: performed system-wide before any flag is set */
	mori_complete_stores_sys();
	int r = mori_shmem_impl::barrier<mori_shmem_impl::BLOCK>(st, true);
	if (rc && mori_block_thread() == 0)
		*(volatile int *)rc = r;
}

MORI_KERNEL void mori_shmem_quiet_on_stream(const struct mori_shmem_state *st, int *rc)
{
	if (mori_block_thread() != 0)
		return;
	int r = mori_shmem_impl::quiet(st);
	if (rc)
		*(volatile int *)rc = r;
}
#endif

#ifndef MORI_SHMEM_NO_WRAPPERS
#define MORI_SHMEM_ABI_FN(ret, name, cxx, abi, body)                                                       \
	extern "C" __device__ __attribute__((visibility("default"))) ret mori_shmem_##name abi { return body; }
MORI_SHMEM_API(MORI_SHMEM_ABI_FN)
#undef MORI_SHMEM_ABI_FN
#endif

/* MORI-CCL's device API for fused kernels (mori/device/coll.cuh's MORI_COLL_API: the
 * communicator's state, from mori_comm_device_state(), as a uint64_t argument) in the same
 * exports. */
#include "mori/device/coll.cuh"
#ifndef MORI_SHMEM_NO_WRAPPERS
#define MORI_COLL_ABI_FN(ret, name, cxx, abi, body)                                                        \
	extern "C" __device__ __attribute__((visibility("default"))) ret mori_coll_##name abi { return body; }
MORI_COLL_API(MORI_COLL_ABI_FN)
#undef MORI_COLL_ABI_FN
#endif

/* MORI-CCO's device API (mori/device/cco.cuh's MORI_CCO_API: the device communicator's address
 * and windows as (offset, bytes) pairs) in the same exports. */
#include "mori/device/cco.cuh"
#ifndef MORI_SHMEM_NO_WRAPPERS
#define MORI_CCO_ABI_FN(ret, name, cxx, abi, body)                                                         \
	extern "C" __device__ __attribute__((visibility("default"))) ret mori_cco_##name abi { return body; }
MORI_CCO_API(MORI_CCO_ABI_FN)
#undef MORI_CCO_ABI_FN
#endif
