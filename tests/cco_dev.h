/* What tests/test_gpu_cco.c (host, C) and tests/cco_dev_kernels.cu (the kernels each rank runs)
 * share: fixed-width fields only. Every kernel takes the device communicator by value and a
 * pointer to these arguments, runs in one block of CDEV_THREADS, checks what it reads against
 * cdev_pattern and writes what it saw to out[] for the host, which checks the final contents of
 * the windows against the same model. */
#ifndef MORI_TEST_CCO_DEV_H
#define MORI_TEST_CCO_DEV_H
#include <stdint.h>

#include "mori/device_host/cco_layout.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define CDEV_HD __host__ __device__
#else
#define CDEV_HD
#endif

#define CDEV_THREADS 256 /* block size of every kernel */
#define CDEV_SLOT 4096u  /* bytes of one rank's slot in a window */
#define CDEV_SMALL 256u  /* bytes each member puts in a barrier round */
#define CDEV_CE_CHUNK (4ull << 20) /* the overlap benchmark's copy-engine pieces */

/* Signals and counters the kernels use (the test asks for CDEV_SIGNALS and CDEV_COUNTERS). */
enum {
	CDEV_SIG_DATA = 0,  /* ring: the left neighbour's data landed (one writer) */
	CDEV_SIG_ACK,       /* ring: the right neighbour checked it (one writer) */
	CDEV_SIG_SUM_LSA,   /* sum of (rank + 1) added by LSA ranks */
	CDEV_SIG_SUM_FAR,   /* ... by the ranks of the other node (the proxy applies those) */
	CDEV_SIG_CNT_LSA,   /* signal_inc by LSA ranks */
	CDEV_SIG_CNT_FAR,   /* ... by the others */
	CDEV_SIGNALS
};
#define CDEV_CTR 0
#define CDEV_COUNTERS 2

/* Which barrier a kernel exercises (cdev_bar's `kind`). */
enum { CDEV_BAR_LSA = 0, CDEV_BAR_RAIL = 1, CDEV_BAR_WORLD = 2 };

/* out[] slots (int64). */
enum {
	CDEV_OUT_RC = 0,    /* first non-zero return code */
	CDEV_OUT_WHERE,     /* where it came (round * 100 + step) */
	CDEV_OUT_BAD,       /* bytes or values found wrong */
	CDEV_OUT_FIRST_BAD, /* where the first wrong one was (round * 100 + step) + 1 */
	CDEV_OUT_DONE,      /* 1 when the kernel reached its end */
	CDEV_OUT_VAL,       /* kernel-specific values follow */
	CDEV_OUT_N = CDEV_OUT_VAL + 16
};

struct cdev_args {
	mori_cco_win dw;     /* receive window: CDEV_SLOT per world rank, slot r written by rank r */
	mori_cco_win sw;     /* source window: CDEV_SLOT per world rank (ce: slot p for LSA peer p),
	                      * then one scratch slot (gda get) */
	int32_t rounds;
	int32_t kind;        /* cdev_bar: CDEV_BAR_*; cdev_hang: the barrier it waits in */
	uint64_t out;        /* int64 out[CDEV_OUT_N] */
};

/* byte i of what rank `from` sends rank `to` in round r */
CDEV_HD static inline uint8_t cdev_pattern(int from, int to, int r, uint64_t i)
{
	uint64_t x = (uint64_t)(from + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(to + 7) * 0xD6E8FEB86659FD93ull ^
		     (uint64_t)(r + 3) * 0xC2B2AE3D27D4EB4Full ^ i * 0x165667B19E3779F9ull;
	x ^= x >> 29;
	return (uint8_t)(x ^ (x >> 11));
}
/* bytes the GDA ring moves in round r (1 .. CDEV_SLOT) */
CDEV_HD static inline uint32_t cdev_ring_len(int r) { return 1 + (uint32_t)((r * 7919u + 13u) % CDEV_SLOT); }
#endif
