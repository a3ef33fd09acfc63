/* MORI-EP's launch tuning lookup (libclient/ep_tune.h); the table itself is generated from
 * data/ep_tuning/ JSON files (tools/gen-ep-tuning). Host-only: tests/test_ep_tuning runs it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep_int.h"
#include "ep_tune.h"

static int family_of(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	return la > 1 && la == lb && strncmp(a, b, la - 1) == 0;
}

/* The value of field get() among live[] nearest to want (ties: the smaller). */
static int nearest(const struct ep_tune_rule *r, const int *live, int n, int (*get)(const struct ep_tune_rule *),
		   int want)
{
	int best = -1;
	for (int i = 0; i < n; i++) {
		if (!live[i])
			continue;
		int v = get(&r[i]), d = abs(v - want), bd = abs(best - want);
		if (best < 0 || d < bd || (d == bd && v < best))
			best = v;
	}
	return best;
}
static int ep_of(const struct ep_tune_rule *r) { return r->ep_size; }
static int hidden_of(const struct ep_tune_rule *r) { return r->hidden_dim; }

int ep_tune_pick(const struct ep_tune_rule *r, int n, const char *arch, const mori_ep_config *cfg)
{
	if (!r || n <= 0 || !arch || !cfg)
		return -1;
	int *live = calloc((size_t)n, sizeof(int)), any = 0;
	if (!live)
		return -1;
	for (int pass = 0; pass < 2 && !any; pass++) /* exact architecture, then its family */
		for (int i = 0; i < n; i++) {
			int ok = r[i].kernel_type == cfg->kernel_type &&
				 (pass ? family_of(r[i].arch, arch) : strcmp(r[i].arch, arch) == 0);
			live[i] = ok;
			any |= ok;
		}
	int pick = -1;
	if (any) {
		int ep = nearest(r, live, n, ep_of, cfg->world_size), has_dt = 0;
		for (int i = 0; i < n; i++) {
			live[i] = live[i] && r[i].ep_size == ep;
			has_dt |= live[i] && r[i].dtype == cfg->data_type;
		}
		for (int i = 0; i < n; i++)
			live[i] = live[i] && (!has_dt || r[i].dtype == cfg->data_type);
		int h = nearest(r, live, n, hidden_of, cfg->hidden_dim);
		int M = cfg->max_num_inp_token_per_rank, ceil_i = -1, max_i = -1;
		for (int i = 0; i < n; i++) {
			if (!live[i] || r[i].hidden_dim != h)
				continue;
			if (r[i].num_tokens >= M && (ceil_i < 0 || r[i].num_tokens < r[ceil_i].num_tokens))
				ceil_i = i;
			if (max_i < 0 || r[i].num_tokens > r[max_i].num_tokens)
				max_i = i;
		}
		pick = ceil_i >= 0 ? ceil_i : max_i;
	}
	free(live);
	return pick;
}

void ep_tune_resolve(mori_ep_config *cfg, const char *arch, int sm, const struct ep_tune_rule *r, int n,
		     char *which, size_t cap)
{
	int i = ep_tune_pick(r, n, arch, cfg);
	int wpb = i >= 0 ? r[i].warp_per_block : EP_DEFAULT_WARPS;
	long bn = i >= 0 && r[i].block_num ? r[i].block_num
					    : (long)(i >= 0 ? r[i].blocks_per_sm : EP_BLOCKS_PER_SM) * (sm < 1 ? 1 : sm);
	if (bn > EP_MAX_DEFAULT_BLOCKS)
		bn = EP_MAX_DEFAULT_BLOCKS;
	if (!cfg->warp_num_per_block)
		cfg->warp_num_per_block = wpb;
	if (!cfg->block_num)
		cfg->block_num = (int)bn;
	if (which && cap) {
		if (i >= 0)
			snprintf(which, cap, "%s rule %d", r[i].file, r[i].index);
		else
			snprintf(which, cap, "built-in default (no rule for %s %s)", arch ? arch : "?",
				 cfg->kernel_type == MORI_EP_LOW_LATENCY ? "IntraNodeLL"
				 : cfg->kernel_type == MORI_EP_INTERNODE ? "InterNode"
				 : cfg->kernel_type == MORI_EP_INTERNODE_LL ? "InterNodeLL" : "IntraNode");
	}
}

int mori_ep_tuning_lookup(mori_ep_config *cfg, const char *arch, int sm_count, char *which, size_t cap)
{
	if (!cfg || !arch)
		return MORI_EINVAL;
	mori_ep_config own;
	int rc = ep_config_take(cfg, &own, NULL, 0);
	if (rc)
		return rc;
	ep_tune_resolve(&own, arch, sm_count, ep_tune_rules, ep_tune_nrules, which, cap);
	cfg->warp_num_per_block = own.warp_num_per_block; /* the only fields it sets */
	cfg->block_num = own.block_num;
	return MORI_OK;
}
