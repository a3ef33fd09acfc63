/* The memory layout MORI-SHMEM's three sides agree on: libmori (host API), the device API
 * (include/mori/device/shmem.cuh, CUDA and HIP) and morid (which owns the heaps, the abort word and
 * serves the proxy ring). Plain C, no GPU headers: the device side includes it as it is.
 *
 *  - The PE state (struct mori_shmem_state): what a kernel needs to turn an address of its own
 *    heap into a peer's, to reach the proxy and to see an abort. libmori builds it in device
 *    memory once per group and a module's global `mori_shmem_state_ptr` points at it
 *    (mori_shmem_module_init, or mori_shmem_state() + cudaMemcpyToSymbol).
 *  - The control page (struct mori_shmem_ctrl): one 4 KiB page of host memory per PE, a memfd
 *    morid made and both map; the GPU reaches it through cuMemHostRegister. It holds the abort
 *    word morid sets when a PE of the group dies or the group is torn down, and the proxy
 *    ring's indices. The proxy ring's entries follow it in the same memfd.
 *  - The heap: `heap_size` bytes per PE; the first MORI_SHMEM_RESERVED bytes are the group's
 *    own (barrier and signal words of the device API), user allocations start after them.
 *
 * Ordering: the GPU publishes a proxy entry by writing it, then a release store of `ready`
 * (system scope); morid reads `ready` with acquire, copies the entry out, then checks it (the
 * GPU side is untrusted in the same way a client's ring is). Completion counters are written by
 * morid (release) and read by the GPU (acquire, system scope).
 */
#ifndef MORI_SHMEM_LAYOUT_H
#define MORI_SHMEM_LAYOUT_H
#include <stdint.h>

/* C11's _Static_assert is not C++ (the device side compiles this header as CUDA/HIP C++). */
#ifdef __cplusplus
#define MORI_SHMEM_STATIC_ASSERT static_assert
#else
#define MORI_SHMEM_STATIC_ASSERT _Static_assert
#endif

#define MORI_SHMEM_MAGIC 0x4d534831u     /* "MSH1" */
#define MORI_SHMEM_MAX_PES 1024          /* a group's largest world size */
#define MORI_SHMEM_RESERVED (64u << 10)  /* bytes at the start of every heap the library keeps */
#define MORI_SHMEM_UID_BYTES 128         /* mori_shmem_uniqueid: at most this many bytes */

/* The reserved area (the first MORI_SHMEM_RESERVED bytes of every heap), as the device API
 * (include/mori/device/shmem.cuh) uses it. Offsets from the heap's start; every word is 8 bytes. The
 * host side zeroes a PE's reserved area and writes its GPU_ID before that PE's join completes (a
 * peer may write its barrier flag there as soon as the group exists) and never touches it afterwards.
 *   BAR_EPOCH      barriers (barrier_all, sync_all, barrier_on_stream) this PE has entered;
 *                  written by this PE only.
 *   PROXY_USED     non-zero once this PE posted a proxy request: until then quiet skips the ring.
 *   AMO_TICKET     hands out AMO result slots round-robin.
 *   GPU_ID         the PCI bus id of the GPU the heap lives on (a NUL-terminated string), written
 *                  by its owner before it joins: a PE that maps the heap compares it with its own
 *                  GPU's to choose the ordering scope towards that PE (mori_shmem_state.peer_scope).
 *   BAR_FLAG[q]    the last barrier generation PE q reached, written by PE q (a release store, or
 *                  a proxy AMO_SET); q < MORI_SHMEM_MAX_PES.
 *   AMO_BUSY[i]    result slot i is held by a thread waiting for a fetching proxy AMO.
 *   AMO_VALUE[i]   where morid writes that AMO's fetched value (8 bytes, zero-extended from 4),
 *                  before it advances `done` past the request; the request's `src` names it.
 * From MORI_SHMEM_OFF_FREE to MORI_SHMEM_RESERVED: unused (EP and CCL signal words later). */
#define MORI_SHMEM_OFF_BAR_EPOCH 0x0000u
#define MORI_SHMEM_OFF_PROXY_USED 0x0040u
#define MORI_SHMEM_OFF_AMO_TICKET 0x0080u
#define MORI_SHMEM_OFF_GPU_ID 0x00c0u                        /* [MORI_SHMEM_GPU_ID_BYTES] */
#define MORI_SHMEM_GPU_ID_BYTES 32u
#define MORI_SHMEM_OFF_BAR_FLAG 0x1000u                      /* [MORI_SHMEM_MAX_PES] */
#define MORI_SHMEM_AMO_SLOTS 512u
#define MORI_SHMEM_OFF_AMO_BUSY 0x3000u                      /* [MORI_SHMEM_AMO_SLOTS] */
#define MORI_SHMEM_OFF_AMO_VALUE 0x4000u                     /* [MORI_SHMEM_AMO_SLOTS] */
#define MORI_SHMEM_OFF_FREE 0x5000u
MORI_SHMEM_STATIC_ASSERT(MORI_SHMEM_OFF_GPU_ID + MORI_SHMEM_GPU_ID_BYTES <= MORI_SHMEM_OFF_BAR_FLAG &&
	       MORI_SHMEM_OFF_BAR_FLAG + 8u * MORI_SHMEM_MAX_PES <= MORI_SHMEM_OFF_AMO_BUSY &&
	       MORI_SHMEM_OFF_AMO_BUSY + 8u * MORI_SHMEM_AMO_SLOTS <= MORI_SHMEM_OFF_AMO_VALUE &&
	       MORI_SHMEM_OFF_AMO_VALUE + 8u * MORI_SHMEM_AMO_SLOTS <= MORI_SHMEM_OFF_FREE &&
	       MORI_SHMEM_OFF_FREE <= MORI_SHMEM_RESERVED, "reserved area layout");

/* Why the abort word was set (0: not set). A device-side wait that sees it returns. */
enum mori_shmem_abort {
	MORI_SHMEM_ABORT_NONE = 0,
	MORI_SHMEM_ABORT_PEER_DEAD = 1,  /* a PE of the group died (abort_pe names it) */
	MORI_SHMEM_ABORT_TEARDOWN = 2,   /* the group is being destroyed */
	MORI_SHMEM_ABORT_TIMEOUT = 3,    /* a host-side deadline (barrier, join) expired */
};

/* Signal and atomic operations, numbered as ROCm/mori and NVSHMEM number the signal ops. */
enum mori_shmem_sigop {
	MORI_SHMEM_SIGNAL_SET = 9,
	MORI_SHMEM_SIGNAL_ADD = 10,
};

/* amo_type of the device API's generic atomics (include/mori/device/shmem.cuh): ROCm/mori's atomicType
 * numbers. SIGNAL_SET (9) and
 * SIGNAL_ADD (10) (enum mori_shmem_sigop) are accepted as SET and ADD. */
enum mori_shmem_atomic_type {
	MORI_SHMEM_ATOMIC_INC = 2,
	MORI_SHMEM_ATOMIC_SET = 3,
	MORI_SHMEM_ATOMIC_ADD = 4,
	MORI_SHMEM_ATOMIC_AND = 5,
	MORI_SHMEM_ATOMIC_OR = 6,
	MORI_SHMEM_ATOMIC_XOR = 7,
	MORI_SHMEM_ATOMIC_FETCH = 12,
	MORI_SHMEM_ATOMIC_FETCH_INC = 13,
	MORI_SHMEM_ATOMIC_FETCH_ADD = 14,
	MORI_SHMEM_ATOMIC_FETCH_AND = 15,
	MORI_SHMEM_ATOMIC_FETCH_OR = 16,
	MORI_SHMEM_ATOMIC_FETCH_XOR = 17,
	MORI_SHMEM_ATOMIC_SWAP = 18,
	MORI_SHMEM_ATOMIC_COMPARE_SWAP = 19,
};

/* wait_until comparisons (OpenSHMEM's SHMEM_CMP_* values). */
enum mori_shmem_cmp {
	MORI_SHMEM_CMP_EQ = 0,
	MORI_SHMEM_CMP_NE = 1,
	MORI_SHMEM_CMP_GT = 2,
	MORI_SHMEM_CMP_GE = 3,
	MORI_SHMEM_CMP_LT = 4,
	MORI_SHMEM_CMP_LE = 5,
};

/* A proxy request (64 bytes): what the GPU asks morid to do for a PE it has no mapping of. */
enum mori_shmem_pop {
	MORI_SHMEM_OP_PUT = 1,        /* len bytes from my heap at src to pe's heap at dst */
	MORI_SHMEM_OP_GET = 2,        /* len bytes from pe's heap at src to my heap at dst */
	MORI_SHMEM_OP_PUT_SIGNAL = 3, /* PUT, then sigop(value) on pe's 64-bit word at sig, after the data */
	MORI_SHMEM_OP_AMO = 4,        /* an atomic on pe's word at dst: amo, value, cmp; fetched value to my heap at src */
	MORI_SHMEM_OP_QUIET = 5,      /* completes once every earlier request of this ring has */
	MORI_SHMEM_OP_FENCE = 6,      /* puts after it land after the puts before it (posted, not waited) */
};

enum mori_shmem_amo {
	MORI_SHMEM_AMO_SET = 1, MORI_SHMEM_AMO_ADD, MORI_SHMEM_AMO_INC, MORI_SHMEM_AMO_AND,
	MORI_SHMEM_AMO_OR, MORI_SHMEM_AMO_XOR, MORI_SHMEM_AMO_SWAP, MORI_SHMEM_AMO_CSWAP,
	MORI_SHMEM_AMO_FETCH = 0x80, /* or'ed in: return the old value */
};

struct mori_shmem_preq {
	uint32_t ready;      /* the request's sequence number + 1, stored last (release) */
	uint16_t op;         /* enum mori_shmem_pop */
	uint8_t amo;         /* enum mori_shmem_amo (OP_AMO), or sigop (OP_PUT_SIGNAL) */
	uint8_t width;       /* AMO operand bytes: 4 or 8 */
	int32_t pe;
	uint32_t pad;
	uint64_t dst;        /* heap offsets (bytes from the heap's start), never addresses */
	uint64_t src;
	uint64_t len;
	uint64_t sig;
	uint64_t value;
	uint64_t cmp;
};
MORI_SHMEM_STATIC_ASSERT(sizeof(struct mori_shmem_preq) == 64, "proxy requests are 64 bytes");

/* The control page. The ring of `ring_entries` (a power of two) requests follows it. */
struct mori_shmem_ctrl {
	uint32_t magic;
	uint32_t ring_entries;
	volatile uint32_t abort;        /* enum mori_shmem_abort; written by morid, and by libmori once when its session hangs up */
	volatile int32_t abort_pe;      /* the PE that died, or -1 */
	uint8_t pad0[48];
	volatile uint64_t head;         /* next sequence the GPU claims (atomicAdd, system scope) */
	uint8_t pad1[56];
	volatile uint64_t done;         /* requests morid has completed, in order (its release) */
	volatile int32_t error;         /* first failed request's MORI_E* code, 0 none */
	uint8_t pad2[52];
};
MORI_SHMEM_STATIC_ASSERT(sizeof(struct mori_shmem_ctrl) == 192, "control header layout");
#define MORI_SHMEM_CTRL_BYTES 4096u /* the page the header sits in; the ring follows */

/* The memory-model scope the device API orders at towards a peer (mori_shmem_state.peer_scope,
 * .wait_scope). SYS is the zero value: a state that does not say orders at system scope. */
enum mori_shmem_scope {
	MORI_SHMEM_SCOPE_SYS = 0, /* another GPU, the host, or morid's proxy may be the other side */
	MORI_SHMEM_SCOPE_GPU = 1, /* the other side runs on this GPU (another process's kernel under MPS too) */
};

/* What a kernel sees of its PE (device memory, built by libmori). peer_base has n_pes entries:
 * this PE's address of each PE's heap where it maps it (same node), else 0: that PE is
 * reached through the proxy. Heaps are symmetric: the object at heap offset o of PE a is at
 * offset o of every PE.
 * Scopes, decided once when the state is built: peer_scope[pe] is MORI_SHMEM_SCOPE_GPU where pe's
 * heap is mapped and lives on this PE's GPU (signals and barrier flags to pe release at GPU
 * scope), else SYS; NULL means SYS for every PE. wait_scope is GPU when every PE of the group is
 * (so no other GPU and no proxy writes this PE's heap): waits on this PE's words acquire, and
 * quiet and fence complete stores, at GPU scope; else SYS. */
struct mori_shmem_state {
	uint32_t magic;                 /* MORI_SHMEM_MAGIC */
	int32_t my_pe, n_pes;
	int32_t node_pes;               /* PEs on this node (the node team) */
	uint64_t heap_size;
	uint64_t heap_base;             /* this PE's own heap, in this process */
	uint64_t *peer_base;            /* device array [n_pes] */
	int32_t *node_team;             /* device array [node_pes]: the PE numbers of this node, ascending */
	struct mori_shmem_ctrl *ctrl;   /* device address of the control page (mapped host memory) */
	struct mori_shmem_preq *ring;   /* device address of the proxy ring */
	uint64_t barrier_epoch;         /* device-side barrier generation (block/grid barriers) */
	int32_t *peer_scope;            /* device array [n_pes]: enum mori_shmem_scope per PE, or NULL (all SYS) */
	int32_t wait_scope;             /* enum mori_shmem_scope of waits on this PE's heap, quiet and fence */
	int32_t pad;
};
#endif
