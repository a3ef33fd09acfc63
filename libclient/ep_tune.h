/* MORI-EP's launch tuning table: rules generated at build time from
 * data/ep_tuning/ JSON files by tools/gen-ep-tuning (ROCm/mori's tuning_configs format), looked up
 * at mori_ep_create for the launch parameters the caller leaves 0. Host-only. */
#ifndef LIBMORI_EP_TUNE_H
#define LIBMORI_EP_TUNE_H
#include <stddef.h>

#include "mori_ep.h"

struct ep_tune_rule {
	const char *arch;   /* "sm_90", "gfx942" */
	mori_ep_kernel_type kernel_type;
	int ep_size;
	mori_dtype dtype;   /* of dispatch's input */
	int num_tokens;     /* max_num_inp_token_per_rank it was tuned for */
	int hidden_dim;
	int block_num;      /* > 0: absolute; 0: blocks_per_sm x the SMs the process may use */
	int blocks_per_sm;
	int warp_per_block;
	const char *file;   /* where it came from, for messages */
	int index;          /* its position in that file's rules */
};
extern const struct ep_tune_rule ep_tune_rules[];
extern const int ep_tune_nrules;

/* The rule of rules[0..n) for cfg on arch, or -1: same kernel type; arch exact, else its family
 * (the name less its last character: "sm_90" -> "sm_9*"); the nearest ep_size (ties: the smaller);
 * the same dtype when any rule has it; the nearest hidden_dim; the smallest num_tokens at or above
 * cfg's max_num_inp_token_per_rank, else the largest (ROCm/mori's ceiling-then-clamp). */
int ep_tune_pick(const struct ep_tune_rule *rules, int n, const char *arch, const mori_ep_config *cfg);

/* Fill cfg's warp_num_per_block / block_num where 0 (the caller's values stay) from the picked
 * rule, or the built-in default (16 warps, 4 blocks an SM) when none; sm: SMs the process may use
 * (block_num at most 1024). which (may be NULL) names the source. */
void ep_tune_resolve(mori_ep_config *cfg, const char *arch, int sm, const struct ep_tune_rule *rules, int n,
		     char *which, size_t cap);
#endif
