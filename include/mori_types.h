/* mori_types.h: the types and constants libmori's host API and mori's GPU code share.
 *
 * Only types, enums and constants: no function declarations, nothing host-only, so a kernel may
 * include it without the host API's names (NVSHMEM's device_host split). include/mori.h and the
 * subsystem headers include it; C, C++, CUDA and HIP compile it.
 *
 * Enum values are part of the ABI: they never change once released, and new ones take new numbers.
 * Where a type mirrors NCCL's it keeps NCCL's numbers, so a port converts by name and by value.
 */
#ifndef MORI_TYPES_H
#define MORI_TYPES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes, shared by morid, libmori, moractl and the kernels' status words. Every function
 * that can fail returns MORI_OK or one of these (negative); mori_strerror() names it. */
typedef enum mori_err {
	MORI_OK = 0,
	MORI_EINVAL = -1,       /* an argument is invalid (null, zero length, empty batch, bad kind) */
	MORI_ENOMEM = -2,       /* out of memory (host, GPU, a daemon-side table), or a per-client cap of morid (client_max_*) */
	MORI_ENOENT = -3,       /* unknown handle, region, list or client */
	MORI_ERANGE = -4,       /* offset + length falls outside a region or list */
	MORI_ETIMEDOUT = -5,    /* a deadline expired; the message names which */
	MORI_ECANCELED = -6,    /* the transfer was cancelled */
	MORI_EPROTO = -7,       /* malformed or unknown message */
	MORI_EVERSION = -8,     /* protocol version mismatch between client and daemon */
	MORI_ECONN = -9,        /* the daemon or a peer daemon cannot be reached */
	MORI_EPERM = -10,       /* the caller's uid is not allowed, or access denied */
	MORI_EBUSY = -11,       /* range already registered, or region still in use */
	MORI_EAGAIN = -12,      /* a ring or queue is full; retry after completions */
	MORI_ESTALE = -13,      /* the handle belongs to an earlier daemon epoch or a freed region (or is forged), or the client to the parent of a fork */
	MORI_EPEERDEAD = -14,   /* the process or daemon owning the other side has gone */
	MORI_EIO = -15,         /* transport failure while moving data */
	MORI_ENOTSUP = -16,     /* not supported here (kind, transport, feature) */
	MORI_EMSGSIZE = -17,    /* a message exceeds the configured size cap */
	MORI_EEXIST = -18,      /* a name is already published */
	MORI_ENOGPU = -19,      /* no GPU runtime or device */
	MORI_ENOKERNEL = -20,   /* no GPU kernel for this device's architecture */
	MORI_EINPROGRESS = -21, /* status only: the transfer has not finished */
	MORI_ESYS = -22,        /* a system call failed; the message has errno's text */
	MORI_EUNREACH = -23,    /* the name is not published (at that node) */
} mori_err;

/* Element types, numbered as NCCL's ncclDataType_t (ncclFloat8e4m3 as NCCL 2.24 numbers it).
 * Which functions take which is said where they are declared: collectives (mori_coll.h) move
 * every type and reduce F16, F32 and BF16; EP (mori_ep.h) dispatches BF16, F32 and FP8 E4M3 and
 * combines BF16 and F32. Numbers NCCL has and mori does not yet move are not listed, and are
 * never reused for anything else (11 is ncclFloat8e5m2). */
typedef enum mori_dtype {
	MORI_UINT8 = 1,
	MORI_INT32 = 2,
	MORI_FLOAT16 = 6,
	MORI_FLOAT32 = 7,
	MORI_BFLOAT16 = 9,
	MORI_FLOAT8_E4M3 = 10,
} mori_dtype;

/* Reduction operators, numbered as NCCL's ncclRedOp_t. */
typedef enum mori_redop {
	MORI_SUM = 0,
	MORI_MAX = 2,
	MORI_MIN = 3,
} mori_redop;

/* Where a region's bytes live. */
typedef enum mori_mem_kind {
	MORI_MEM_HOST = 0, /* host memory */
	MORI_MEM_VRAM = 1, /* GPU memory (cudaMalloc/hipMalloc or VMM); needs the GPU runtime */
} mori_mem_kind;

/* Direction of a transfer, seen from the initiator. */
typedef enum mori_xfer_op {
	MORI_XFER_READ = 0,  /* remote bytes into the local region */
	MORI_XFER_WRITE = 1, /* local bytes into the remote region */
} mori_xfer_op;

/* MORI-SHMEM: bytes at the start of every heap the library keeps (the device API's state, the
 * collective allocator's words), and the largest unique-id blob. */
#define MORI_SHMEM_RESERVED (64u << 10)
#define MORI_SHMEM_UID_BYTES 128

/* MORI-EP limits. */
#define MORI_EP_MAX_WORLD 32     /* EP ranks of one handle (a warp lane per destination) */
#define MORI_EP_MAX_TOPK 32      /* experts per token */
#define MORI_EP_MAX_IN_FLIGHT 16 /* dispatches waiting for their combine, per handle */

/* MORI-EP kernel types. NORMAL: ROCm/mori's IntraNode kernels: a token bound for several experts
 * of one rank travels to that rank once; the receive buffer is token-major, [slots, H] with slots
 * 0..count-1 filled; combine sums the expert outputs over the token's destination ranks,
 * unweighted. LOW_LATENCY: DeepEP's low-latency layout: one copy per (token, expert), receive
 * buffer expert-major [num_experts_per_rank, world x max tokens, H] with per-expert counts;
 * combine sums the expert outputs weighted by the token's top-k weights. */
typedef enum mori_ep_kernel_type {
	MORI_EP_NORMAL = 0,
	MORI_EP_LOW_LATENCY = 1,
	/* Across nodes (ROCm/mori's InterNode kinds): the same layouts and semantics as NORMAL and
	 * LOW_LATENCY; ranks of this node are written directly, ranks of other nodes through the
	 * proxy (one chunk per destination rank and call, docs/ep.md). mori_ep_create picks them for a
	 * group that spans nodes when NORMAL / LOW_LATENCY is asked (the resolved type is the one
	 * compared across ranks); the caller may force them on one node too. They take more heap than
	 * the intranode types: size it with mori_ep_heap_bytes of the internode type. */
	MORI_EP_INTERNODE = 2,
	MORI_EP_INTERNODE_LL = 3,
} mori_ep_kernel_type;

/* MORI-EP quantisation of dispatch's input (mori_ep_config.quant_type). */
typedef enum mori_ep_quant {
	MORI_EP_QUANT_NONE = 0,
	MORI_EP_QUANT_FP8_BLOCK128 = 1,
} mori_ep_quant;

#ifdef __cplusplus
}
#endif
#endif /* MORI_TYPES_H */
