/* What tests/test_gpu_shmem_dev.c (host, C) and tests/shmem_dev_kernels.cu (the kernels it runs,
 * one per PE) share: fixed-width fields only. Addresses are device addresses: "sym" ones lie in
 * the running PE's own heap and name the same object at every PE. */
#ifndef MORI_TEST_SHMEM_DEV_H
#define MORI_TEST_SHMEM_DEV_H
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SDEV_HD __host__ __device__
#else
#define SDEV_HD
#endif

#define SDEV_THREADS 256 /* block size of every test kernel */

enum sdev_scope { SDEV_THREAD = 0, SDEV_WARP = 1, SDEV_BLOCK = 2 };
enum sdev_kind {
	SDEV_PUTMEM_NBI = 0, /* putmem_nbi: dst sym (at pe), src local, len bytes */
	SDEV_GETMEM_NBI,     /* getmem_nbi: dst local, src sym (at pe) */
	SDEV_GETMEM,         /* blocking getmem */
	SDEV_PUT_T_NBI,      /* put_<type>_nbi: len elements of type t */
	SDEV_GET_T_NBI,
	SDEV_GET_T,
	SDEV_P_T,            /* <type>_p of the value at src (thread scope) */
	SDEV_G_T,            /* <type>_g into dst (thread scope) */
	SDEV_KINDS
};
enum sdev_type { SDEV_U32 = 0, SDEV_U64, SDEV_F32, SDEV_F64 };

struct sdev_op {
	uint32_t kind, scope, type;
	int32_t pe;
	uint64_t dst, src, len; /* len: bytes for *MEM*, elements for *_T */
};

/* One wait_until case: the word starts at `init` (host), the setter writes seq[0..nseq) to it
 * (only the last satisfies `cmp` against `value`), the waiter waits and reports what it saw. */
struct sdev_wait {
	uint32_t type; /* 0 int32, 1 uint64, 2 int64, 3 signal (uint64, signal_wait_until) */
	int32_t cmp;
	int64_t init, value;
	int64_t seq[4];
	uint32_t nseq, pad;
};
#define SDEV_WAITS 24

/* out[] slots each kernel writes (int64). */
enum {
	SDEV_OUT_RC = 0,     /* first non-zero return code */
	SDEV_OUT_WHERE,      /* the op / round it came at */
	SDEV_OUT_BAD,        /* bytes or values found wrong */
	SDEV_OUT_DUPS,       /* fetched values seen twice */
	SDEV_OUT_FIRST_BAD,  /* round of the first wrong byte */
	SDEV_OUT_DONE,       /* 1 when the kernel reached its end */
	SDEV_OUT_SEEN,       /* wait: values seen follow from here */
	SDEV_OUT_N = SDEV_OUT_SEEN + SDEV_WAITS + 2
};

struct sdev_args {
	uint64_t ops;        /* struct sdev_op[n_ops] */
	uint32_t n_ops;
	int32_t rounds;      /* ring rounds, barrier rounds, lock iterations */
	uint64_t buf, sig, ack, src; /* sym: ring buffer, its signal, ack word, source area */
	uint32_t maxlen;     /* ring: most bytes per round */
	int32_t target_pe;   /* fadd, lock: the PE holding the words */
	uint64_t ctr64, ctr32, ctr_nf; /* sym: counters */
	uint64_t bitmap;     /* fadd: one bit per fetched value (shared by all PEs) */
	uint64_t total;      /* fadd: how many this PE adds */
	uint64_t words;      /* sym: wait words (int32 [6] at 0, uint64 [18] at 64) / barrier slots */
	uint64_t waits;      /* struct sdev_wait[SDEV_WAITS] */
	uint64_t amo;        /* amo sequence: sym 64-bit word, 32-bit word at +8 */
	int32_t which;       /* abort: what to wait on */
	int32_t pad;
	uint64_t out;        /* int64 out[SDEV_OUT_N] */
	uint64_t fetched;    /* amo sequence: fetched values (uint64 [32]) */
};

/* The amo sequence both sides replay (kernel on the GPU, the test on its model). */
#define SDEV_AMO_STEPS 20

/* byte i of the ring's round r from PE p */
SDEV_HD static inline uint8_t sdev_pattern(int p, int r, uint64_t i)
{
	uint64_t x = (uint64_t)p * 0x9E3779B97F4A7C15ull ^ (uint64_t)r * 0xC2B2AE3D27D4EB4Full ^ i * 0x165667B19E3779F9ull;
	x ^= x >> 29;
	return (uint8_t)(x ^ (x >> 11));
}
SDEV_HD static inline uint32_t sdev_ring_len(int r, uint32_t maxlen) { return 1 + (uint32_t)((r * 7919u + 13u) % maxlen); }
#endif
