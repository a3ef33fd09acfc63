/* tests/ir_rdc_ring.cu (device half) and ir_rdc_ring_main.c (host half): what they share. */
#ifndef IR_RDC_RING_H
#define IR_RDC_RING_H
#include <stddef.h>
#include <stdint.h>

#define BLK 4096u /* bytes a round */
#define WORDS (BLK / 4)
/* what PE pe puts in word i of round r's block */
#define IR_RING_PATTERN(pe, r, i) ((unsigned)(pe) * 100000000u + (unsigned)(r) * 10000u + (unsigned)(i))

struct result {
	unsigned bad;      /* words that differed from the sender's pattern */
	int first_bad;     /* round of the first, -1 */
	int rc;            /* first failing device call's code, 0 */
	int rc_round;
	int who_pe, who_n; /* what the device API says */
};

#ifdef __cplusplus
extern "C" {
#endif
int ring_set_state(void *st, char *err, size_t cap);
int ring_run(uint64_t dst, uint64_t src, uint64_t sig, int rounds, int me, int n, struct result *out, float *ms,
	     void *host_dst, char *err, size_t cap);
#ifdef __cplusplus
}
#endif
#endif
