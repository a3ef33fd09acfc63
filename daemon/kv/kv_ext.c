/* External KV (kv_cluster.h): the blocks serving processes report holding in their own GPU or
 * host caches. Each report belongs to its session (a client's death ends it); the node's view
 * is the union over its sessions, a tier mask per (uid, key), published to Redis as the
 * mori:ext:N:E hash (kv_index redis) or answered from here alone (kv_index local). Hit counters
 * (match_external_kv with count_as_hit) live in Redis (mori:hits:..., 2 h after their last hit),
 * or here for kv_index local. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_cluster_int.h"
#include "log.h"

#define HIT_TTL_MS (2ull * 3600 * 1000) /* ROCm/mori's UMBP_HIT_INDEX_TTL_SEC default */
#define TIERS 4

/* The node's view of one (uid, key): how many sessions report it on each tier; its hits. */
struct xnode {
	struct xnode *next;
	uint64_t hash;
	uint32_t cnt[TIERS];
	uint64_t hits, hit_ms;   /* kv_index local only */
	uid_t uid;
	uint16_t klen;
	uint8_t key[];
};

/* One session's report of one (uid, key): the tiers it reported. */
struct xrep {
	struct xrep *next;       /* table chain */
	struct list clink;       /* its session's reports */
	struct xnode *n;
	const struct client *c;
	uint64_t hash;
	uint8_t mask;
};

/* A session's reports. */
struct xcli {
	struct xcli *next;
	const struct client *c;
	struct list reps;
};

struct kv_xkv {
	struct kvc *k;
	struct xnode **nt;
	struct xrep **rt;
	uint64_t nnb, nrb, nn, nr;
	struct xcli *clis;
};

static uint64_t key_hash(struct kvc *k, uid_t uid, const void *key, size_t len)
{
	return kv_index_hash(&k->st->idx, uid, key, len);
}

static uint64_t rep_hash(uint64_t h, const struct client *c)
{
	uint64_t x = h ^ ((uintptr_t)c * 0x9E3779B97F4A7C15ull);
	return x ^ (x >> 29);
}

/* Double a table of *nb chains (next at offset 0, hash at off) when it holds as many entries. */
static void grow(void ***t, uint64_t *nb, uint64_t count, size_t next_off, size_t hash_off)
{
	if (count < *nb)
		return;
	uint64_t nn = *nb * 2;
	void **nt = calloc(nn, sizeof(*nt));
	if (!nt)
		return; /* chains get longer, nothing is lost */
	for (uint64_t i = 0; i < *nb; i++)
		for (void *e = (*t)[i], *nx; e; e = nx) {
			nx = *(void **)((char *)e + next_off);
			uint64_t b = *(uint64_t *)((char *)e + hash_off) & (nn - 1);
			*(void **)((char *)e + next_off) = nt[b];
			nt[b] = e;
		}
	free(*t);
	*t = nt;
	*nb = nn;
}

static void ext_resync(struct kvc *k);

int kv_ext_start(struct kv_store *st)
{
	struct kvc *k = kvc_of(st);
	struct kv_xkv *x = calloc(1, sizeof(*x));
	if (!x) {
		mlog_err("kv", "out of memory for the external KV table");
		return -1;
	}
	x->k = k;
	x->nnb = x->nrb = 1024;
	x->nt = calloc(x->nnb, sizeof(*x->nt));
	x->rt = calloc(x->nrb, sizeof(*x->rt));
	if (!x->nt || !x->rt) {
		free(x->nt), free(x->rt), free(x);
		mlog_err("kv", "out of memory for the external KV table");
		return -1;
	}
	k->ext = x;
	k->ext_resync = ext_resync;
	return 0;
}

void kv_ext_stop(struct kv_store *st)
{
	struct kvc *k = kvc_of(st);
	struct kv_xkv *x = k ? k->ext : NULL;
	if (!x)
		return;
	k->ext_resync = NULL;
	for (uint64_t i = 0; i < x->nnb; i++)
		for (struct xnode *n = x->nt[i], *nx; n; n = nx)
			nx = n->next, free(n);
	for (uint64_t i = 0; i < x->nrb; i++)
		for (struct xrep *r = x->rt[i], *nx; r; r = nx)
			nx = r->next, free(r);
	for (struct xcli *c = x->clis, *nx; c; c = nx)
		nx = c->next, free(c);
	free(x->nt), free(x->rt), free(x);
	k->ext = NULL;
}

static struct xnode *node_find(struct kv_xkv *x, uint64_t h, uid_t uid, const void *key, size_t len)
{
	for (struct xnode *n = x->nt[h & (x->nnb - 1)]; n; n = n->next)
		if (n->hash == h && n->uid == uid && n->klen == len && !memcmp(n->key, key, len))
			return n;
	return NULL;
}

static uint8_t node_mask(const struct xnode *n)
{
	uint8_t m = 0;
	for (int t = 1; t < TIERS; t++)
		if (n->cnt[t])
			m |= (uint8_t)(1u << t);
	return m;
}

static void node_unlink(struct kv_xkv *x, struct xnode *n)
{
	struct xnode **pp = &x->nt[n->hash & (x->nnb - 1)];
	while (*pp != n)
		pp = &(*pp)->next;
	*pp = n->next;
	x->nn--;
	free(n);
}

/* The node's mask of n changed from old: published, and n freed when nothing holds it. */
static void node_changed(struct kv_xkv *x, struct xnode *n, uint8_t old)
{
	uint8_t m = node_mask(n);
	if (m != old && x->k->state != KVC_LOCAL) {
		char v[8];
		snprintf(v, sizeof(v), "%u", m);
		kvc_queue(x->k, KVC_H_EXT, n->uid, n->key, n->klen, m ? v : NULL);
	}
	if (!m && (!n->hits || x->k->state != KVC_LOCAL))
		node_unlink(x, n);
}

static struct xcli *cli_get(struct kv_xkv *x, const struct client *c, int make)
{
	for (struct xcli *e = x->clis; e; e = e->next)
		if (e->c == c)
			return e;
	if (!make)
		return NULL;
	struct xcli *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->c = c;
	LIST_INIT(&e->reps);
	e->next = x->clis;
	x->clis = e;
	return e;
}

static struct xrep *rep_find(struct kv_xkv *x, uint64_t rh, const struct client *c, uid_t uid, const void *key,
			     size_t len)
{
	for (struct xrep *r = x->rt[rh & (x->nrb - 1)]; r; r = r->next)
		if (r->hash == rh && r->c == c && r->n->uid == uid && r->n->klen == len && !memcmp(r->n->key, key, len))
			return r;
	return NULL;
}

/* r loses the tiers in mask; r goes when it has none left. */
static void rep_clear(struct kv_xkv *x, struct xrep *r, uint8_t mask)
{
	struct xnode *n = r->n;
	uint8_t old = node_mask(n), drop = r->mask & mask;
	for (int t = 1; t < TIERS; t++)
		if (drop & (1u << t))
			n->cnt[t]--;
	r->mask &= (uint8_t)~drop;
	if (!r->mask) {
		struct xrep **pp = &x->rt[r->hash & (x->nrb - 1)];
		while (*pp != r)
			pp = &(*pp)->next;
		*pp = r->next;
		list_del(&r->clink);
		x->nr--;
		free(r);
	}
	if (drop)
		node_changed(x, n, old);
}

static int check(const struct kv_key *keys, size_t n, int tier, char *msg, size_t msglen)
{
	if (tier < 1 || tier >= TIERS) {
		snprintf(msg, msglen, "tier %d is not HBM (1), DRAM (2) or SSD (3)", tier);
		return MORI_EINVAL;
	}
	if (n > KV_LOOKUP_MAX) {
		snprintf(msg, msglen, "%zu keys in one call (at most %d)", n, KV_LOOKUP_MAX);
		return MORI_EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		if (!keys[i].len || keys[i].len > KV_KEY_MAX) {
			snprintf(msg, msglen, "key %zu of %zu bytes (keys have 1..%d)", i, keys[i].len, KV_KEY_MAX);
			return MORI_EINVAL;
		}
	return MORI_OK;
}

int kv_ext_report(struct kv_store *st, struct client *c, uid_t uid, const struct kv_key *keys, size_t n, int tier,
		  char *msg, size_t msglen)
{
	struct kvc *k = kvc_of(st);
	struct kv_xkv *x = k->ext;
	int rc = check(keys, n, tier, msg, msglen);
	if (rc != MORI_OK)
		return rc;
	struct xcli *xc = cli_get(x, c, 1);
	if (!xc)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		uint64_t h = key_hash(k, uid, keys[i].data, keys[i].len), rh = rep_hash(h, c);
		struct xrep *r = rep_find(x, rh, c, uid, keys[i].data, keys[i].len);
		if (r && (r->mask & (1u << tier)))
			continue;
		struct xnode *nd = r ? r->n : node_find(x, h, uid, keys[i].data, keys[i].len);
		if (!nd) {
			if (!(nd = calloc(1, sizeof(*nd) + keys[i].len)))
				goto nomem;
			nd->hash = h, nd->uid = uid, nd->klen = (uint16_t)keys[i].len;
			memcpy(nd->key, keys[i].data, keys[i].len);
			nd->next = x->nt[h & (x->nnb - 1)];
			x->nt[h & (x->nnb - 1)] = nd;
			x->nn++;
			grow((void ***)&x->nt, &x->nnb, x->nn, offsetof(struct xnode, next), offsetof(struct xnode, hash));
		}
		if (!r) {
			if (!(r = calloc(1, sizeof(*r)))) {
				uint8_t old = node_mask(nd);
				node_changed(x, nd, old); /* frees a node made just now */
				goto nomem;
			}
			r->n = nd, r->c = c, r->hash = rh;
			r->next = x->rt[rh & (x->nrb - 1)];
			x->rt[rh & (x->nrb - 1)] = r;
			list_add(&xc->reps, &r->clink);
			x->nr++;
			grow((void ***)&x->rt, &x->nrb, x->nr, offsetof(struct xrep, next), offsetof(struct xrep, hash));
		}
		uint8_t old = node_mask(nd);
		r->mask |= (uint8_t)(1u << tier);
		nd->cnt[tier]++;
		node_changed(x, nd, old);
	}
	return MORI_OK;
nomem:
	snprintf(msg, msglen, "out of memory for external KV reports (the keys before it were recorded)");
	return MORI_ENOMEM;
}

int kv_ext_revoke(struct kv_store *st, struct client *c, uid_t uid, const struct kv_key *keys, size_t n, int tier,
		  char *msg, size_t msglen)
{
	struct kvc *k = kvc_of(st);
	int rc = check(keys, n, tier, msg, msglen);
	if (rc != MORI_OK)
		return rc;
	for (size_t i = 0; i < n; i++) {
		uint64_t h = key_hash(k, uid, keys[i].data, keys[i].len);
		struct xrep *r = rep_find(k->ext, rep_hash(h, c), c, uid, keys[i].data, keys[i].len);
		if (r)
			rep_clear(k->ext, r, (uint8_t)(1u << tier));
	}
	return MORI_OK;
}

int kv_ext_revoke_tier(struct kv_store *st, struct client *c, int tier, uint64_t *count)
{
	struct kv_xkv *x = kvc_of(st)->ext;
	struct xcli *xc = cli_get(x, c, 0);
	uint64_t n = 0;
	if (tier < 1 || tier >= TIERS)
		return MORI_EINVAL;
	if (xc)
		list_each(it, &xc->reps) {
			struct xrep *r = list_entry(it, struct xrep, clink);
			if (r->mask & (1u << tier)) {
				n++;
				rep_clear(x, r, (uint8_t)(1u << tier));
			}
		}
	if (count)
		*count = n;
	return MORI_OK;
}

void kv_ext_client_gone(struct kv_store *st, struct client *c)
{
	struct kvc *k = kvc_of(st);
	if (!k || !k->ext)
		return;
	struct kv_xkv *x = k->ext;
	struct xcli **pp = &x->clis;
	while (*pp && (*pp)->c != c)
		pp = &(*pp)->next;
	struct xcli *xc = *pp;
	if (!xc)
		return;
	list_each(it, &xc->reps) rep_clear(x, list_entry(it, struct xrep, clink), 0xff);
	*pp = xc->next;
	free(xc);
}

/* Every node-level entry queued again (a full resync). */
static void ext_resync(struct kvc *k)
{
	struct kv_xkv *x = k->ext;
	char v[8];
	for (uint64_t i = 0; i < x->nnb; i++)
		for (struct xnode *n = x->nt[i]; n; n = n->next) {
			uint8_t m = node_mask(n);
			snprintf(v, sizeof(v), "%u", m);
			if (m)
				kvc_queue(k, KVC_H_EXT, n->uid, n->key, n->klen, v);
		}
}

/* ---- match and hit counts ---- */

struct matchreq {
	struct kvc_req q;
	uv_timer_t later;        /* kv_index local: the answer on the next loop turn */
	uid_t uid;
	int count_as_hit;
	size_t n;
	uint32_t nn;
	struct kvc_node *nodes;
	uint8_t *masks;          /* nn x n */
	uint8_t *node_ok;
	char **fields;
	size_t *flens;
	kv_match_cb mcb;
	kv_hits_cb hcb;
	void *arg;
	uint64_t *counts;
	uint8_t *present;
};

static void mq_free(struct matchreq *m)
{
	for (size_t i = 0; m->fields && i < m->n; i++)
		free(m->fields[i]);
	free(m->fields), free(m->flens), free(m->nodes), free(m->masks), free(m->node_ok), free(m->counts);
	free(m->present), free(m);
}

static void mq_closed(uv_handle_t *h)
{
	mq_free(h->data);
}

static void hit_reply(redisAsyncContext *ac, void *r, void *priv)
{
}

/* Hits of the keys some node holds: INCR and PEXPIRE, answered by nobody (a lost increment is
 * a counter one short, never a wrong match). */
static void count_hits(struct matchreq *m, const uint8_t *any)
{
	struct kvc *k = m->q.k;
	char ttl[24];
	snprintf(ttl, sizeof(ttl), "%" PRIu64, (uint64_t)HIT_TTL_MS);
	for (size_t i = 0; i < m->n && k->ac; i++) {
		if (!any[i])
			continue;
		char key[KV_KEY_MAX + 4 + 16];
		memcpy(key, "mori:hits:", 10);
		memcpy(key + 10, m->fields[i], m->flens[i + 2]);
		size_t kl = 10 + m->flens[i + 2];
		const char *inc[] = {"INCR", key}, *px[] = {"PEXPIRE", key, ttl};
		size_t il[] = {4, kl}, pl[] = {7, kl, strlen(ttl)};
		redisAsyncCommandArgv(k->ac, hit_reply, NULL, 2, inc, il);
		redisAsyncCommandArgv(k->ac, hit_reply, NULL, 3, px, pl);
	}
}

static void match_answer(struct matchreq *m)
{
	struct kv_ext_match *res = calloc(m->nn ? m->nn : 1, sizeof(*res));
	uint8_t *any = calloc(m->n ? m->n : 1, 1);
	if (!res || !any) {
		free(res), free(any);
		m->mcb(m->arg, MORI_ENOMEM, "out of memory", NULL, 0);
		return;
	}
	size_t nres = 0;
	for (uint32_t j = 0; j < m->nn; j++) {
		if (!m->node_ok[j])
			continue;
		uint32_t matched = 0;
		for (size_t i = 0; i < m->n; i++)
			if (m->masks[j * m->n + i])
				matched++, any[i] = 1;
		if (!matched)
			continue;
		res[nres++] = (struct kv_ext_match){.node = m->nodes[j].name, .mask = &m->masks[j * m->n],
						    .matched = matched};
	}
	if (m->count_as_hit && m->q.k->state != KVC_LOCAL)
		count_hits(m, any);
	else if (m->count_as_hit) {
		struct kv_xkv *x = m->q.k->ext;
		for (size_t i = 0; i < m->n; i++) {
			if (!any[i])
				continue;
			uint64_t h = key_hash(m->q.k, m->uid, m->fields[i] + 4, m->flens[i + 2] - 4);
			struct xnode *nd = node_find(x, h, m->uid, m->fields[i] + 4, m->flens[i + 2] - 4);
			if (nd)
				nd->hits++, nd->hit_ms = kvc_now_ms(m->q.k);
		}
	}
	m->mcb(m->arg, MORI_OK, "", res, nres);
	free(res), free(any);
}

static void hits_answer_local(struct matchreq *m)
{
	struct kv_xkv *x = m->q.k->ext;
	uint64_t now = kvc_now_ms(m->q.k);
	for (size_t i = 0; i < m->n; i++) {
		uint64_t h = key_hash(m->q.k, m->uid, m->fields[i] + 4, m->flens[i + 2] - 4);
		struct xnode *nd = node_find(x, h, m->uid, m->fields[i] + 4, m->flens[i + 2] - 4);
		if (nd && nd->hits && now - nd->hit_ms < HIT_TTL_MS)
			m->counts[i] = nd->hits, m->present[i] = 1;
	}
	m->hcb(m->arg, MORI_OK, "", m->counts, m->present, m->n);
}

static void on_later(uv_timer_t *t)
{
	struct matchreq *m = t->data;
	if (m->mcb)
		match_answer(m);
	else
		hits_answer_local(m);
	uv_close((uv_handle_t *)&m->later, mq_closed);
}

static void mq_reply(struct kvc_req *q, uint32_t i, redisReply *r)
{
	struct matchreq *m = (struct matchreq *)q;
	if (!r)
		return;
	char b[32];
	if (m->hcb) { /* MGET of the hit counters */
		for (size_t k = 0; k < m->n; k++)
			if (kvc_elem_str(r, k, b, sizeof(b))) {
				m->counts[k] = strtoull(b, NULL, 10);
				m->present[k] = 1;
			}
		return;
	}
	if (i == m->nn) {
		kvc_live_all(r, m->nodes, m->nn, m->node_ok);
		return;
	}
	for (size_t k = 0; k < m->n; k++)
		if (kvc_elem_str(r, k, b, 4) && b[0])
			m->masks[i * m->n + k] = (uint8_t)atoi(b) & 0x0e;
}

static void mq_done(struct kvc_req *q)
{
	struct matchreq *m = (struct matchreq *)q;
	q->k->lookups++;
	q->k->lookup_us_sum += (uint64_t)(uv_hrtime() / 1000) - q->t0_us;
	if (q->status != MORI_OK) {
		if (m->mcb)
			m->mcb(m->arg, q->status, q->msg, NULL, 0);
		else
			m->hcb(m->arg, q->status, q->msg, NULL, NULL, 0);
	} else if (m->mcb) {
		match_answer(m);
	} else {
		m->hcb(m->arg, MORI_OK, "", m->counts, m->present, m->n);
	}
	mq_free(m);
}

static struct matchreq *mq_new(struct kvc *k, uid_t uid, const struct kv_key *keys, size_t n, char *msg,
			       size_t msglen, int *rc)
{
	*rc = check(keys, n, 1, msg, msglen);
	if (*rc == MORI_OK && !n) {
		snprintf(msg, msglen, "no keys");
		*rc = MORI_EINVAL;
	}
	if (*rc != MORI_OK)
		return NULL;
	struct matchreq *m = calloc(1, sizeof(*m));
	int ok = m && (m->fields = calloc(n, sizeof(*m->fields))) && (m->flens = calloc(n + 2, sizeof(*m->flens)));
	if (ok)
		m->n = n, m->uid = uid;
	for (size_t i = 0; ok && i < n; i++) {
		ok = (m->fields[i] = malloc(keys[i].len + 4)) != NULL;
		if (ok)
			m->flens[i + 2] = kvc_field(uid, keys[i].data, keys[i].len, m->fields[i]);
	}
	if (!ok) {
		if (m)
			mq_free(m);
		snprintf(msg, msglen, "out of memory for %zu keys", n);
		*rc = MORI_ENOMEM;
		return NULL;
	}
	m->q = (struct kvc_req){.k = k, .reply = mq_reply, .done = mq_done, .t0_us = uv_hrtime() / 1000, .sending = 1};
	return m;
}

static void later(struct matchreq *m, struct kvc *k)
{
	uv_timer_init(k->d->loop, &m->later);
	m->later.data = m;
	uv_timer_start(&m->later, on_later, 0, 0);
}

int kv_ext_match(struct morid *d, uid_t uid, const struct kv_key *keys, size_t n, int count_as_hit, kv_match_cb cb,
		 void *arg, char *msg, size_t msglen)
{
	struct kvc *k = kvc_of(d->kv);
	int rc;
	if (!k) {
		snprintf(msg, msglen, "morid runs without a KV store");
		return MORI_ENOTSUP;
	}
	if (k->state != KVC_LOCAL && (rc = kvc_ready(k, msg, msglen)) != MORI_OK)
		return rc;
	struct matchreq *m = mq_new(k, uid, keys, n, msg, msglen, &rc);
	if (!m)
		return rc;
	m->mcb = cb, m->arg = arg, m->count_as_hit = count_as_hit;
	m->nn = k->state == KVC_LOCAL ? 1 : k->nnodes;
	m->nodes = calloc(m->nn ? m->nn : 1, sizeof(*m->nodes));
	m->masks = calloc((m->nn ? m->nn : 1) * n, 1);
	m->node_ok = calloc(m->nn ? m->nn : 1, 1);
	if (!m->nodes || !m->masks || !m->node_ok) {
		mq_free(m);
		snprintf(msg, msglen, "out of memory for a match of %zu keys", n);
		return MORI_ENOMEM;
	}
	if (k->state == KVC_LOCAL) {
		const char *self = d->cfg.advertise[0] ? d->cfg.advertise : d->cfg.listen[0] ? d->cfg.listen : "local";
		snprintf(m->nodes[0].name, sizeof(m->nodes[0].name), "%s", self);
		m->node_ok[0] = 1;
		for (size_t i = 0; i < n; i++) {
			uint64_t h = key_hash(k, uid, keys[i].data, keys[i].len);
			struct xnode *nd = node_find(k->ext, h, uid, keys[i].data, keys[i].len);
			m->masks[i] = nd ? node_mask(nd) : 0;
		}
		later(m, k);
		return MORI_OK;
	}
	for (uint32_t j = 0; j < m->nn; j++)
		m->nodes[j] = k->nodes[j];
	if (kvc_send_nodes(&m->q, "ext", m->nodes, m->nn, m->fields, m->flens, n) != MORI_OK) {
		mq_free(m);
		snprintf(msg, msglen, "out of memory for a match of %zu keys", n);
		return MORI_ENOMEM;
	}
	kvc_sent(&m->q);
	return MORI_OK;
}

int kv_ext_hit_counts(struct morid *d, uid_t uid, const struct kv_key *keys, size_t n, kv_hits_cb cb, void *arg,
		      char *msg, size_t msglen)
{
	struct kvc *k = kvc_of(d->kv);
	int rc;
	if (!k) {
		snprintf(msg, msglen, "morid runs without a KV store");
		return MORI_ENOTSUP;
	}
	if (k->state != KVC_LOCAL && (rc = kvc_ready(k, msg, msglen)) != MORI_OK)
		return rc;
	struct matchreq *m = mq_new(k, uid, keys, n, msg, msglen, &rc);
	if (!m)
		return rc;
	m->hcb = cb, m->arg = arg;
	m->counts = calloc(n, sizeof(*m->counts));
	m->present = calloc(n, 1);
	if (!m->counts || !m->present) {
		mq_free(m);
		snprintf(msg, msglen, "out of memory for %zu keys", n);
		return MORI_ENOMEM;
	}
	if (k->state == KVC_LOCAL) {
		later(m, k);
		return MORI_OK;
	}
	const char **argv = malloc(sizeof(*argv) * (n + 1));
	char **names = calloc(n, sizeof(*names));
	size_t *l = malloc(sizeof(*l) * (n + 1));
	int ok = argv && names && l;
	for (size_t i = 0; ok && i < n; i++) {
		ok = (names[i] = malloc(10 + m->flens[i + 2])) != NULL;
		if (ok) {
			memcpy(names[i], "mori:hits:", 10);
			memcpy(names[i] + 10, m->fields[i], m->flens[i + 2]);
			argv[i + 1] = names[i], l[i + 1] = 10 + m->flens[i + 2];
		}
	}
	if (ok) {
		argv[0] = "MGET", l[0] = 4;
		kvc_send(&m->q, (int)n + 1, argv, l);
	}
	for (size_t i = 0; names && i < n; i++)
		free(names[i]);
	free(argv), free(names), free(l);
	if (!ok) {
		mq_free(m);
		snprintf(msg, msglen, "out of memory for %zu keys", n);
		return MORI_ENOMEM;
	}
	kvc_sent(&m->q);
	return MORI_OK;
}
