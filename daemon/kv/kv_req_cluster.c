/* The KvRequests the cluster index answers (kv_cluster.h): EXISTS over every live node's keys
 * (kv_index redis), the external-KV operations, and the index's part of the stats. Lookups are
 * answered later (deferred replies), when Redis has. */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_cluster_int.h"
#include "kv/kv_store.h"
#include "log.h"

struct pend {
	struct morid *d;
	uint64_t client_id, req_id;
	size_t n, off;            /* keys asked; the first off were answered locally */
	int consecutive;
	uint8_t *present;         /* n: this node's store, then the index's */
};

static struct kv_key *keys_of(Mori__KvRequest *kq, size_t from, struct rctx *r)
{
	struct kv_key *k = rctx_alloc(r, sizeof(*k) * (kq->n_items ? kq->n_items : 1));
	for (size_t i = from; k && i < kq->n_items; i++)
		k[i - from] = (struct kv_key){kq->items[i]->key.data, kq->items[i]->key.len};
	return k;
}

static void pend_reply(struct pend *p, Mori__Reply *rep, struct rctx *r)
{
	struct client *c = client_find(p->d, p->client_id);
	if (c)
		client_reply(c, rep, r);
}

static void exists_done(void *arg, int status, const char *msg, const struct kv_located *res, size_t n)
{
	struct pend *p = arg;
	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	Mori__KvReply kr = MORI__KV_REPLY__INIT;
	protobuf_c_boolean *pr = calloc(p->n ? p->n : 1, sizeof(*pr));
	rep.id = p->req_id;
	if (status == MORI_OK && pr) {
		for (size_t i = 0; i < n; i++)
			if (res[i].n)
				p->present[p->off + i] = 1;
		int run = 1;
		for (size_t i = 0; i < p->n; i++) {
			pr[i] = p->present[i];
			run = run && pr[i];
			kr.count += (uint64_t)run;
		}
		kr.present = pr;
		kr.n_present = p->n;
		rep.body_case = MORI__REPLY__BODY_KV;
		rep.kv = &kr;
	} else {
		reply_error(&rep, pr ? status : MORI_ENOMEM, "%s", pr ? msg : "out of memory");
	}
	pend_reply(p, &rep, &r);
	rctx_free(&r);
	free(pr), free(p->present), free(p);
}

/* EXISTS with kv_index redis: this node's store first; the keys it lacks (from the first absent
 * one when consecutive) are looked up in the index in one round trip. */
static int do_exists(struct kv_store *st, struct client *c, Mori__KvRequest *kq, Mori__KvReply *kr,
		     Mori__Reply *rep, struct rctx *r)
{
	size_t n = kq->n_items, off = 0;
	for (size_t i = 0; i < n; i++)
		if (!kq->items[i]->key.len || kq->items[i]->key.len > KV_KEY_MAX) {
			reply_error(rep, MORI_EINVAL, "key %zu of %zu bytes (keys have 1..%d)", i, kq->items[i]->key.len,
				    KV_KEY_MAX);
			return 0;
		}
	struct pend *p = calloc(1, sizeof(*p));
	uint8_t *present = calloc(n ? n : 1, 1);
	if (!p || !present) {
		free(p), free(present);
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return 0;
	}
	size_t missing = 0;
	for (size_t i = 0; i < n; i++) {
		present[i] = kv_lookup(st, c->uid, kq->items[i]->key.data, kq->items[i]->key.len) != NULL;
		missing += !present[i];
	}
	while (off < n && present[off])
		off++;
	if (!missing) {
		kr->present = rctx_alloc(r, sizeof(*kr->present) * (n ? n : 1));
		if (!kr->present) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
		} else {
			for (size_t i = 0; i < n; i++)
				kr->present[i] = 1;
			kr->n_present = n;
			kr->count = n;
		}
		free(p), free(present);
		return 0;
	}
	*p = (struct pend){st->d, c->id, rep->id, n, off, kq->consecutive, present};
	char msg[300];
	struct kv_key *keys = keys_of(kq, off, r);
	/* this node's own keys are known exactly here: the index is asked about the others only */
	int rc = keys ? kv_cluster_locate(st->d, c->uid, keys, n - off, KV_LOCATE_REMOTE, exists_done, p, msg, sizeof(msg))
		      : (snprintf(msg, sizeof(msg), "out of memory"), MORI_ENOMEM);
	if (rc != MORI_OK) {
		free(p), free(present);
		rep->body_case = MORI__REPLY__BODY__NOT_SET;
		reply_error(rep, rc, "%s", msg);
		return 0;
	}
	rctx_free(r);
	return 1;
}

static void match_done(void *arg, int status, const char *msg, const struct kv_ext_match *m, size_t nn)
{
	struct pend *p = arg;
	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	Mori__KvReply kr = MORI__KV_REPLY__INIT;
	rep.id = p->req_id;
	Mori__KvNodeMatch *ms = calloc(nn ? nn : 1, sizeof(*ms));
	Mori__KvNodeMatch **mp = calloc(nn ? nn : 1, sizeof(*mp));
	if (status == MORI_OK && ms && mp) {
		for (size_t j = 0; j < nn; j++) {
			mori__kv_node_match__init(&ms[j]);
			ms[j].node = (char *)m[j].node;
			ms[j].masks.data = (uint8_t *)m[j].mask;
			ms[j].masks.len = p->n;
			ms[j].matched = m[j].matched;
			mp[j] = &ms[j];
		}
		kr.matches = mp;
		kr.n_matches = nn;
		rep.body_case = MORI__REPLY__BODY_KV;
		rep.kv = &kr;
	} else {
		reply_error(&rep, status != MORI_OK ? status : MORI_ENOMEM, "%s", status != MORI_OK ? msg : "out of memory");
	}
	pend_reply(p, &rep, &r);
	rctx_free(&r);
	free(ms), free(mp), free(p);
}

static void hits_done(void *arg, int status, const char *msg, const uint64_t *counts, const uint8_t *present, size_t n)
{
	struct pend *p = arg;
	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	Mori__KvReply kr = MORI__KV_REPLY__INIT;
	rep.id = p->req_id;
	protobuf_c_boolean *pr = calloc(n ? n : 1, sizeof(*pr));
	if (status == MORI_OK && pr) {
		for (size_t i = 0; i < n; i++)
			pr[i] = present[i];
		kr.hits = (uint64_t *)counts;
		kr.n_hits = n;
		kr.present = pr;
		kr.n_present = n;
		rep.body_case = MORI__REPLY__BODY_KV;
		rep.kv = &kr;
	} else {
		reply_error(&rep, status != MORI_OK ? status : MORI_ENOMEM, "%s", status != MORI_OK ? msg : "out of memory");
	}
	pend_reply(p, &rep, &r);
	rctx_free(&r);
	free(pr), free(p);
}

int kv_cluster_request(struct kv_store *st, struct client *c, Mori__KvRequest *kq, Mori__KvReply *kr,
		       Mori__Reply *rep, struct rctx *r)
{
	char msg[300] = "";
	int rc = MORI_OK;
	struct kv_key *keys = NULL;
	if (kq->op != MORI__KV_OP__KV_EXT_REVOKE_TIER && kq->op != MORI__KV_OP__KV_EXISTS &&
	    !(keys = keys_of(kq, 0, r))) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return 0;
	}
	switch (kq->op) {
	case MORI__KV_OP__KV_EXISTS:
		return do_exists(st, c, kq, kr, rep, r);
	case MORI__KV_OP__KV_EXT_REPORT:
		rc = kv_ext_report(st, c, c->uid, keys, kq->n_items, (int)kq->tier, msg, sizeof(msg));
		break;
	case MORI__KV_OP__KV_EXT_REVOKE:
		rc = kv_ext_revoke(st, c, c->uid, keys, kq->n_items, (int)kq->tier, msg, sizeof(msg));
		break;
	case MORI__KV_OP__KV_EXT_REVOKE_TIER:
		rc = kv_ext_revoke_tier(st, c, (int)kq->tier, &kr->count);
		if (rc != MORI_OK)
			snprintf(msg, sizeof(msg), "tier %u is not HBM (1), DRAM (2) or SSD (3)", kq->tier);
		break;
	case MORI__KV_OP__KV_EXT_MATCH:
	case MORI__KV_OP__KV_EXT_HITS: {
		struct pend *p = calloc(1, sizeof(*p));
		if (!p) {
			rc = MORI_ENOMEM, snprintf(msg, sizeof(msg), "out of memory");
			break;
		}
		*p = (struct pend){.d = st->d, .client_id = c->id, .req_id = rep->id, .n = kq->n_items};
		rc = kq->op == MORI__KV_OP__KV_EXT_MATCH
			     ? kv_ext_match(st->d, c->uid, keys, kq->n_items, kq->count_as_hit, match_done, p, msg, sizeof(msg))
			     : kv_ext_hit_counts(st->d, c->uid, keys, kq->n_items, hits_done, p, msg, sizeof(msg));
		if (rc == MORI_OK) {
			rctx_free(r);
			return 1;
		}
		free(p);
		break;
	}
	default:
		rc = MORI_EINVAL, snprintf(msg, sizeof(msg), "unknown KV op %d", (int)kq->op);
	}
	if (rc != MORI_OK) {
		rep->body_case = MORI__REPLY__BODY__NOT_SET;
		reply_error(rep, rc, "%s", msg);
	}
	return 0;
}

void kv_cluster_stats_fill(struct kv_store *st, Mori__KvStats *s, struct rctx *r)
{
	struct kv_cluster_stats cs;
	kv_cluster_stats_get(st, &cs);
	s->index_backend = rctx_strdup(r, cs.backend);
	s->index_state = rctx_strdup(r, cs.state);
	s->index_error = rctx_strdup(r, cs.last_error);
	s->index_published = cs.published;
	s->index_queued = cs.queued;
	s->index_lag_ms = cs.lag_ms;
	s->index_round_trips = cs.round_trips;
	s->index_errors = cs.errors;
	s->index_resyncs = cs.resyncs;
	s->index_lookups = cs.lookups;
	s->index_lookup_us = cs.lookup_us_sum;
	Mori__KvIndexNode **np = rctx_alloc(r, sizeof(*np) * (cs.nnodes ? cs.nnodes : 1));
	for (size_t i = 0; np && i < cs.nnodes; i++) {
		Mori__KvIndexNode *x = rctx_alloc(r, sizeof(*x));
		if (!x)
			break;
		mori__kv_index_node__init(x);
		x->node = rctx_strdup(r, cs.nodes[i].node);
		x->epoch = cs.nodes[i].epoch;
		x->dram_free = cs.nodes[i].dram_free;
		x->dram_capacity = cs.nodes[i].dram_capacity;
		x->keys = cs.nodes[i].keys;
		np[s->n_index_nodes++] = x;
	}
	s->index_nodes = np;
}
