/* UMBP's external KV (include/mori_umbp.h, "Across nodes"): reports, revokes, matches and hit
 * counters, each a KvRequest of keys to morid in rounds of at most MORI_UMBP_LOOKUP_MAX keys
 * (umbp_lookup_round), which answers from its own table or the cluster index. */
#include <stdlib.h>
#include <string.h>

#include "umbp_int.h"

static int check_keys(mori_umbp *u, const char *what, const mori_umbp_key *keys, size_t n)
{
	int rc = umbp_call_check(u);
	if (rc != MORI_OK)
		return rc;
	if (!keys || n == 0)
		return set_error(umbp_client(u), MORI_EINVAL, "%s: keys NULL or 0 keys", what);
	for (size_t i = 0; i < n; i++)
		if (!keys[i].data || keys[i].len == 0 || keys[i].len > MORI_UMBP_KEY_MAX)
			return set_error(umbp_client(u), MORI_EINVAL, "%s: key %zu of %zu bytes (keys have 1..%d)", what, i,
					 keys[i].len, MORI_UMBP_KEY_MAX);
	return MORI_OK;
}

static int check_tier(mori_umbp *u, const char *what, mori_umbp_tier tier)
{
	if (tier < MORI_UMBP_TIER_HBM || tier > MORI_UMBP_TIER_SSD)
		return set_error(umbp_client(u), MORI_EINVAL, "%s: tier %d is not HBM (1), DRAM (2) or SSD (3)", what,
				 (int)tier);
	return MORI_OK;
}

/* One round: keys[0..n) as items of op. *out gets the reply (the caller frees it). */
static int round_rpc(mori_umbp *u, Mori__KvOp op, const mori_umbp_key *keys, size_t n, uint32_t tier, int hit,
		     Mori__Reply **out)
{
	Mori__KvItem *ki = calloc(n ? n : 1, sizeof(*ki));
	Mori__KvItem **kp = calloc(n ? n : 1, sizeof(*kp));
	if (!ki || !kp) {
		free(ki), free(kp);
		return set_error(umbp_client(u), MORI_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		mori__kv_item__init(&ki[i]);
		ki[i].key.data = (uint8_t *)keys[i].data;
		ki[i].key.len = keys[i].len;
		kp[i] = &ki[i];
	}
	Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
	kq.op = op;
	kq.n_items = n;
	kq.items = kp;
	kq.tier = tier;
	kq.count_as_hit = hit != 0;
	int rc = umbp_kv_rpc(u, &kq, out, NULL, NULL);
	free(ki), free(kp);
	return rc;
}

static int report_or_revoke(mori_umbp *u, Mori__KvOp op, const char *what, const mori_umbp_key *keys, size_t n,
			    mori_umbp_tier tier)
{
	int rc = check_keys(u, what, keys, n);
	if (rc == MORI_OK)
		rc = check_tier(u, what, tier);
	for (size_t at = 0, k; rc == MORI_OK && at < n; at += k) {
		k = umbp_lookup_round(u, keys + at, n - at);
		Mori__Reply *rep;
		if ((rc = round_rpc(u, op, keys + at, k, (uint32_t)tier, 0, &rep)) == MORI_OK)
			mori__reply__free_unpacked(rep, NULL);
	}
	return rc;
}

int mori_umbp_report_external_kv_blocks(mori_umbp *u, const mori_umbp_key *keys, size_t n, mori_umbp_tier tier)
{
	return report_or_revoke(u, MORI__KV_OP__KV_EXT_REPORT, "report_external_kv_blocks", keys, n, tier);
}

int mori_umbp_revoke_external_kv_blocks(mori_umbp *u, const mori_umbp_key *keys, size_t n, mori_umbp_tier tier)
{
	return report_or_revoke(u, MORI__KV_OP__KV_EXT_REVOKE, "revoke_external_kv_blocks", keys, n, tier);
}

int mori_umbp_revoke_all_at_tier(mori_umbp *u, mori_umbp_tier tier, size_t *count)
{
	int rc = umbp_call_check(u);
	if (rc == MORI_OK)
		rc = check_tier(u, "revoke_all_at_tier", tier);
	Mori__Reply *rep;
	if (rc == MORI_OK && (rc = round_rpc(u, MORI__KV_OP__KV_EXT_REVOKE_TIER, NULL, 0, (uint32_t)tier, 0, &rep)) ==
				     MORI_OK) {
		if (count)
			*count = (size_t)rep->kv->count;
		mori__reply__free_unpacked(rep, NULL);
	}
	return rc;
}

void mori_umbp_external_kv_match_free(mori_umbp_external_kv_match *m, size_t n)
{
	for (size_t i = 0; m && i < n; i++)
		free(m[i].tier_mask), free(m[i].node_id);
	free(m);
}

/* Add round reply kr (keys at..at+k of n) to the matches, one per node. */
static int merge(mori_umbp_external_kv_match **m, size_t *nm, const Mori__KvReply *kr, size_t at, size_t k, size_t n)
{
	for (size_t j = 0; j < kr->n_matches; j++) {
		const Mori__KvNodeMatch *x = kr->matches[j];
		if (!x->node || x->masks.len != k)
			return MORI_EPROTO;
		size_t i = 0;
		while (i < *nm && strcmp((*m)[i].node_id, x->node))
			i++;
		if (i == *nm) {
			mori_umbp_external_kv_match *g = realloc(*m, sizeof(*g) * (*nm + 1));
			if (!g)
				return MORI_ENOMEM;
			*m = g;
			memset(&g[i], 0, sizeof(g[i]));
			(*nm)++; /* freed with the rest from here */
			if (!(g[i].node_id = strndup(x->node, MORI_UMBP_NODE_MAX - 1)) || !(g[i].tier_mask = calloc(n, 1)))
				return MORI_ENOMEM;
		}
		for (size_t q = 0; q < k; q++) {
			uint8_t b = x->masks.data[q] & 0x0e;
			if (b && !(*m)[i].tier_mask[at + q])
				(*m)[i].matched++;
			(*m)[i].tier_mask[at + q] |= b;
		}
	}
	return MORI_OK;
}

int mori_umbp_match_external_kv(mori_umbp *u, const mori_umbp_key *keys, size_t n, int count_as_hit,
				mori_umbp_external_kv_match **out, size_t *n_out)
{
	int rc = check_keys(u, "match_external_kv", keys, n);
	if (rc != MORI_OK)
		return rc;
	if (!out || !n_out)
		return set_error(umbp_client(u), MORI_EINVAL, "match_external_kv: out or n_out is NULL");
	mori_umbp_external_kv_match *m = NULL;
	size_t nm = 0;
	for (size_t at = 0, k; rc == MORI_OK && at < n; at += k) {
		k = umbp_lookup_round(u, keys + at, n - at);
		Mori__Reply *rep;
		if ((rc = round_rpc(u, MORI__KV_OP__KV_EXT_MATCH, keys + at, k, 0, count_as_hit, &rep)) != MORI_OK)
			break;
		rc = merge(&m, &nm, rep->kv, at, k, n);
		mori__reply__free_unpacked(rep, NULL);
		if (rc != MORI_OK)
			rc = set_error(umbp_client(u), rc, rc == MORI_ENOMEM ? "out of memory" : "bad match reply from morid");
	}
	if (rc != MORI_OK) {
		mori_umbp_external_kv_match_free(m, nm);
		return rc;
	}
	*out = m;
	*n_out = nm;
	return MORI_OK;
}

int mori_umbp_get_external_kv_hit_counts(mori_umbp *u, const mori_umbp_key *keys, size_t n, uint64_t *counts,
					 uint8_t *present)
{
	int rc = check_keys(u, "get_external_kv_hit_counts", keys, n);
	if (rc != MORI_OK)
		return rc;
	if (!counts || !present)
		return set_error(umbp_client(u), MORI_EINVAL, "get_external_kv_hit_counts: counts or present is NULL");
	for (size_t at = 0, k; rc == MORI_OK && at < n; at += k) {
		k = umbp_lookup_round(u, keys + at, n - at);
		Mori__Reply *rep;
		if ((rc = round_rpc(u, MORI__KV_OP__KV_EXT_HITS, keys + at, k, 0, 0, &rep)) != MORI_OK)
			break;
		if (rep->kv->n_hits != k || rep->kv->n_present != k)
			rc = set_error(umbp_client(u), MORI_EPROTO, "bad hit-count reply from morid");
		for (size_t i = 0; rc == MORI_OK && i < k; i++) {
			counts[at + i] = rep->kv->hits[i];
			present[at + i] = rep->kv->present[i] != 0;
		}
		mori__reply__free_unpacked(rep, NULL);
	}
	return rc;
}
