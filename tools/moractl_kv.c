/* moractl kv: the node's KV store (UMBP) as morid holds it: keys and bytes per tier, capacity,
 * hits and misses, evictions, spills, promotions, leases, and each uid's usage and quota. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moractl_obs.h"
#include "mori.h"

#define STATS_FIELDS                                                                                          \
	"dram_keys dram_bytes dram_capacity dram_allocated dram_slab_bytes ssd_keys ssd_bytes ssd_capacity hits " \
	"misses evictions spills promotions leases reservations expired_leases puts zombies ssd_errors "       \
	"index_bytes policy index_backend index_state index_error index_published index_queued index_lag_ms "     \
	"index_round_trips index_errors index_resyncs index_lookups index_lookup_us remote_fetched "             \
	"remote_fetched_bytes remote_misses remote_errors remote_served remote_served_bytes remote_leases placed " \
	"placed_bytes place_failed placed_here remote_delivered remote_served_ssd"
#define NODE_FIELDS "node epoch dram_free dram_capacity keys"
#define UID_FIELDS                                                                                            \
	"uid keys used_bytes quota_bytes hard_pinned_bytes dram_keys dram_bytes ssd_keys ssd_bytes hits misses " \
	"evictions spills promotions"

static double pct(uint64_t a, uint64_t b)
{
	return b ? 100.0 * (double)a / (double)b : 0.0;
}

int moractl_kv(const char *url, int timeout_ms, int json)
{
	Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
	kq.op = MORI__KV_OP__KV_STATS;
	kq.node = 1;
	Mori__Request req = MORI__REQUEST__INIT;
	req.body_case = MORI__REQUEST__BODY_KV;
	req.kv = &kq;
	char err[512];
	Mori__Reply *rep = moractl_ask(url, timeout_ms, &req, MORI__REPLY__BODY_KV, err, sizeof(err));
	if (!rep) {
		fprintf(stderr, "moractl: %s\n", err);
		return 1;
	}
	const Mori__KvStats *s = rep->kv->stats;
	if (!s) {
		fprintf(stderr, "moractl: morid's reply has no KV statistics\n");
		mori__reply__free_unpacked(rep, NULL);
		return 1;
	}
	if (json) {
		cJSON *o = cJSON_CreateObject();
		moractl_json_fields(o, &s->base, STATS_FIELDS);
		cJSON *arr = cJSON_AddArrayToObject(o, "uids");
		for (size_t i = 0; i < s->n_uids; i++)
			moractl_json_row(arr, &s->uids[i]->base, UID_FIELDS);
		cJSON *nodes = cJSON_AddArrayToObject(o, "index_nodes");
		for (size_t i = 0; i < s->n_index_nodes; i++)
			moractl_json_row(nodes, &s->index_nodes[i]->base, NODE_FIELDS);
		moractl_print_json(o);
		mori__reply__free_unpacked(rep, NULL);
		return 0;
	}
	uint64_t gets = s->hits + s->misses;
	printf("policy       %s\n", s->policy);
	printf("DRAM         %" PRIu64 " keys, %" PRIu64 " bytes (%" PRIu64 " allocated, %.1f %% of %" PRIu64
	       "); slabs %" PRIu64 " bytes\n",
	       s->dram_keys, s->dram_bytes, s->dram_allocated, pct(s->dram_allocated, s->dram_capacity), s->dram_capacity,
	       s->dram_slab_bytes);
	if (s->ssd_capacity)
		printf("SSD          %" PRIu64 " keys, %" PRIu64 " bytes of %" PRIu64 " (%" PRIu64 " values dropped on errors)\n",
		       s->ssd_keys, s->ssd_bytes, s->ssd_capacity, s->ssd_errors);
	else
		printf("SSD          none (kv_ssd_dir unset)\n");
	printf("gets         %" PRIu64 " hits, %" PRIu64 " misses (%.1f %% hit)\n", s->hits, s->misses, pct(s->hits, gets));
	printf("puts         %" PRIu64 "; evictions %" PRIu64 ", spills %" PRIu64 ", promotions %" PRIu64 "\n", s->puts,
	       s->evictions, s->spills, s->promotions);
	printf("held now     %" PRIu64 " leases, %" PRIu64 " reservations, %" PRIu64 " old versions still read; %" PRIu64
	       " leases expired\n",
	       s->leases, s->reservations, s->zombies, s->expired_leases);
	printf("index        %" PRIu64 " bytes of morid's memory\n", s->index_bytes);
	if (s->index_backend && strcmp(s->index_backend, "local") != 0) {
		printf("cluster      %s: %s%s%s; %" PRIu64 " keys published, %" PRIu64 " updates queued (lag %" PRIu64
		       " ms)\n",
		       s->index_backend, s->index_state, s->index_error && s->index_error[0] ? ": " : "",
		       s->index_error ? s->index_error : "", s->index_published, s->index_queued, s->index_lag_ms);
		printf("             %" PRIu64 " round trips, %" PRIu64 " errors, %" PRIu64 " resyncs, %" PRIu64
		       " lookups (mean %.0f us)\n",
		       s->index_round_trips, s->index_errors, s->index_resyncs, s->index_lookups,
		       s->index_lookups ? (double)s->index_lookup_us / (double)s->index_lookups : 0.0);
		printf("across nodes %" PRIu64 " values fetched (%" PRIu64 " bytes, %" PRIu64 " into registered regions), %"
		       PRIu64 " misses, %" PRIu64 " errors; %" PRIu64 " served to others (%" PRIu64 " bytes, %" PRIu64
		       " from SSD, %" PRIu64 " leases held)\n",
		       s->remote_fetched, s->remote_fetched_bytes, s->remote_delivered, s->remote_misses, s->remote_errors,
		       s->remote_served, s->remote_served_bytes, s->remote_served_ssd, s->remote_leases);
		printf("placement    %" PRIu64 " puts placed on other nodes (%" PRIu64 " bytes), %" PRIu64 " stayed here; %"
		       PRIu64 " of theirs placed here\n", s->placed, s->placed_bytes, s->place_failed, s->placed_here);
		if (s->n_index_nodes)
			printf("%-28s %16s %10s %16s %16s\n", "  node", "epoch", "keys", "DRAM free", "DRAM capacity");
		for (size_t i = 0; i < s->n_index_nodes; i++) {
			const Mori__KvIndexNode *x = s->index_nodes[i];
			printf("  %-26s %16" PRIx64 " %10" PRIu64 " %16" PRIu64 " %16" PRIu64 "\n", x->node, x->epoch, x->keys,
			       x->dram_free, x->dram_capacity);
		}
	} else {
		printf("cluster      none (kv_index local)\n");
	}
	if (s->n_uids) {
		printf("\n%8s %10s %14s %14s %12s %10s %10s %10s %8s %8s\n", "uid", "keys", "used", "quota", "hard-pinned",
		       "hits", "misses", "evictions", "spills", "promoted");
		for (size_t i = 0; i < s->n_uids; i++) {
			const Mori__KvUidStats *u = s->uids[i];
			char q[32];
			if (u->quota_bytes)
				snprintf(q, sizeof(q), "%" PRIu64, u->quota_bytes);
			else
				snprintf(q, sizeof(q), "none");
			printf("%8u %10" PRIu64 " %14" PRIu64 " %14s %12" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64
			       " %8" PRIu64 " %8" PRIu64 "\n",
			       u->uid, u->keys, u->used_bytes, q, u->hard_pinned_bytes, u->hits, u->misses, u->evictions,
			       u->spills, u->promotions);
		}
	}
	mori__reply__free_unpacked(rep, NULL);
	return 0;
}
