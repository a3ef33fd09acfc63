/* The cluster index in Redis (kv_cluster.h says what Redis holds): one hiredis connection on
 * morid's loop, the store's changes published in pipelined batches, a heartbeat that refreshes
 * the TTLs and reads the live nodes, a full resync on every (re)connect and whenever Redis has
 * lost this node, and lookups of many keys in one round trip. Redis down never stops the local
 * store: publishing is dropped (the next resync rebuilds it) and lookups fail at once. */
#include <arpa/inet.h>
#include <hiredis/adapters/libuv.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "invariant.h"
#include "kv/kv_cluster_int.h"
#include "log.h"

#define OPS_PER_CMD 1024    /* fields of one HSET or HDEL */
#define CMDS_PER_FLUSH 16   /* commands of one publish pipeline */
#define CMDS_IN_FLIGHT 8    /* publish pipelines unanswered before the queue waits */
#define BACKOFF_MAX_MS 2000

struct kvc *kvc_of(const struct kv_store *st)
{
	return st ? st->cluster : NULL;
}

int kv_cluster_on(const struct kv_store *st)
{
	return st && st->cluster && st->cluster->state != KVC_LOCAL;
}

/* Fresh, not the loop's cached time: a long turn of the loop (a resync's snapshot) must not
 * make commands sent at its end look old. */
uint64_t kvc_now_ms(const struct kvc *k)
{
	(void)k;
	return uv_hrtime() / 1000000;
}

size_t kvc_field(uid_t uid, const void *key, size_t klen, char *out)
{
	uint32_t be = htonl((uint32_t)uid);
	memcpy(out, &be, 4);
	memcpy(out + 4, key, klen);
	return klen + 4;
}

static const char *state_name(enum kvc_state s)
{
	static const char *const n[] = {"local", "connecting", "resyncing", "up", "down"};
	return n[s];
}

int kvc_ready(struct kvc *k, char *msg, size_t msglen)
{
	if (k->ac && (k->state == KVC_UP || k->state == KVC_RESYNCING))
		return MORI_OK;
	snprintf(msg, msglen, "cluster index %s is unreachable (%s)%s%s", k->url, state_name(k->state),
		 k->last_error[0] ? ": " : "", k->last_error);
	return MORI_ECONN;
}

/* ---- the connection ---- */

static void conn_lost(struct kvc *k, const char *why);

static void sent_push(struct kvc *k)
{
	if (k->sent_n == k->sent_cap) {
		uint32_t nc = k->sent_cap ? 2 * k->sent_cap : 256;
		uint64_t *ns = malloc(sizeof(*ns) * nc);
		MORI_REQUIRE(ns, "out of memory for the cluster index's send times");
		for (uint32_t i = 0; i < k->sent_n; i++)
			ns[i] = k->sent_ms[(k->sent_head + i) % k->sent_cap];
		free(k->sent_ms);
		k->sent_ms = ns, k->sent_head = 0, k->sent_cap = nc;
	}
	k->sent_ms[(k->sent_head + k->sent_n++) % k->sent_cap] = kvc_now_ms(k);
}

static void sent_pop(struct kvc *k)
{
	if (!k->sent_n)
		return;
	k->sent_head = (k->sent_head + 1) % k->sent_cap;
	k->sent_n--;
}

static void req_reply(redisAsyncContext *ac, void *rv, void *priv)
{
	struct kvc_req *q = priv;
	struct kvc *k = q->k;
	redisReply *r = rv;
	sent_pop(k);
	if (!r && q->status == MORI_OK) {
		q->status = k->timed_out ? MORI_ETIMEDOUT : MORI_ECONN;
		snprintf(q->msg, sizeof(q->msg), "cluster index %s: connection lost: %s", k->url,
			 k->last_error[0] ? k->last_error : (ac && ac->errstr[0] ? ac->errstr : "closed"));
	}
	if (r && r->type == REDIS_REPLY_ERROR) {
		k->errors++;
		mlog_ratelimited(MLOG_WARN, "kv", "cluster index %s: %.*s", k->url, (int)r->len, r->str);
	}
	k->last_reply_ms = kvc_now_ms(k);
	q->reply(q, q->got, r);
	if (++q->got == q->sent && !q->sending) {
		k->round_trips++;
		q->done(q);
	}
}

void kvc_send(struct kvc_req *q, int argc, const char **argv, const size_t *lens)
{
	struct kvc *k = q->k;
	q->sent++;
	if (!k->ac || redisAsyncCommandArgv(k->ac, req_reply, q, argc, argv, lens) != REDIS_OK) {
		/* counted as sent, answered as a lost connection */
		if (q->status == MORI_OK) {
			q->status = MORI_ECONN;
			snprintf(q->msg, sizeof(q->msg), "cluster index %s: cannot send: %s", k->url,
				 k->ac ? k->ac->errstr : "not connected");
		}
		q->reply(q, q->got, NULL);
		q->got++;
		return;
	}
	sent_push(k);
}

void kvc_sent(struct kvc_req *q)
{
	q->sending = 0;
	if (q->got == q->sent) {
		q->k->round_trips += q->sent > 0;
		q->done(q);
	}
}

static void resync(struct kvc *k);

/* A command whose answer nobody waits for (SELECT, SREM): its send time leaves the FIFO. */
static void fire_reply(redisAsyncContext *ac, void *rv, void *priv)
{
	struct kvc *k = priv;
	redisReply *r = rv;
	if (!ac->data)
		return;
	sent_pop(k);
	k->last_reply_ms = kvc_now_ms(k);
	if (r && r->type == REDIS_REPLY_ERROR) {
		k->errors++;
		mlog_ratelimited(MLOG_WARN, "kv", "cluster index %s: %.*s", k->url, (int)r->len, r->str);
	}
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct kvc *k = ac->data;
	if (!k || k->ac != ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees ac after this callback */
		k->ac = NULL;
		conn_lost(k, ac->errstr);
		return;
	}
	mlog_notice("kv", "cluster index %s connected: publishing %s (epoch %" PRIx64 ")", k->url, k->self, k->d->epoch);
	k->backoff_ms = 100;
	resync(k);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct kvc *k = ac->data;
	if (!k || k->ac != ac)
		return;
	k->ac = NULL; /* hiredis frees it */
	conn_lost(k, status == REDIS_OK ? "closed" : ac->errstr);
}

static void drop_ops(struct kvc *k)
{
	for (uint32_t i = k->ops_head; i < k->nops; i++)
		free(k->ops[i]);
	k->nops = k->ops_head = 0;
	k->ops_oldest_ms = 0;
}

/* Down: what was queued is dropped (the resync at the next connect publishes the whole store),
 * commands in flight are answered with NULL (hiredis calls them when ac goes). */
static void conn_lost(struct kvc *k, const char *why)
{
	if (k->state == KVC_DOWN && !k->ac)
		return;
	snprintf(k->last_error, sizeof(k->last_error), "%s", why && why[0] ? why : "connection lost");
	if (k->state != KVC_CONNECTING || k->errors == 0)
		mlog_warn("kv", "cluster index %s: %s; local operations go on, lookups fail until it is back", k->url,
			  k->last_error);
	k->errors++;
	k->state = KVC_DOWN;
	drop_ops(k);
	k->retry_at_ms = kvc_now_ms(k) + k->backoff_ms;
	k->backoff_ms = k->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : k->backoff_ms * 2;
	if (k->ac) {
		redisAsyncContext *ac = k->ac;
		k->ac = NULL;
		ac->data = NULL;
		redisAsyncFree(ac); /* pending callbacks run now with NULL */
	}
	k->sent_n = 0;
	k->b_n = 0;
	k->ops_inflight = 0;
	k->beat_inflight = 0;
}

static void connect_now(struct kvc *k)
{
	k->state = KVC_CONNECTING;
	k->connect_at_ms = kvc_now_ms(k);
	redisAsyncContext *ac = redisAsyncConnect(k->host, k->port);
	if (!ac || ac->err) {
		char why[200];
		snprintf(why, sizeof(why), "connect: %s", ac ? ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		conn_lost(k, why);
		return;
	}
	ac->data = k;
	if (redisLibuvAttach(ac, k->d->loop) != REDIS_OK) {
		redisAsyncFree(ac);
		conn_lost(k, "cannot attach to the loop");
		return;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	k->ac = ac;
	if (k->db) {
		char db[16];
		snprintf(db, sizeof(db), "%d", k->db);
		redisAsyncCommand(ac, fire_reply, k, "SELECT %s", db);
		sent_push(k);
	}
}

/* ---- publishing ---- */

void kvc_queue(struct kvc *k, enum kvc_hash h, uid_t uid, const void *key, size_t klen, const char *val)
{
	if (k->state != KVC_UP && k->state != KVC_RESYNCING)
		return; /* the resync at the next connect publishes it */
	size_t vlen = val ? strlen(val) : 0;
	struct kvc_op *op = malloc(sizeof(*op) + klen + 4 + vlen);
	if (op && k->nops == k->capops && k->ops_head) {
		memmove(k->ops, k->ops + k->ops_head, sizeof(*k->ops) * (k->nops - k->ops_head));
		k->nops -= k->ops_head;
		k->ops_head = 0;
	}
	if (op && k->nops == k->capops) {
		uint32_t nc = k->capops ? 2 * k->capops : 1024;
		struct kvc_op **no = realloc(k->ops, sizeof(*no) * nc);
		if (no)
			k->ops = no, k->capops = nc;
	}
	if (!op || k->nops == k->capops) {
		/* lost from the index until the next resync: counted, never wrong (a miss) */
		free(op);
		k->errors++;
		return;
	}
	op->hash = (uint8_t)h;
	op->del = !val;
	op->vlen = (uint8_t)vlen;
	op->flen = (uint16_t)kvc_field(uid, key, klen, op->b);
	memcpy(op->b + op->flen, val ? val : "", vlen);
	if (k->nops == k->ops_head)
		k->ops_oldest_ms = kvc_now_ms(k);
	k->ops[k->nops++] = op;
}

static void entry_val(const struct kv_entry *e, char *v, size_t len)
{
	snprintf(v, len, "%u %" PRIu64 " %" PRIu64, (unsigned)e->tier, e->size, e->gen);
}

void kv_cluster_publish(struct kv_store *st, const struct kv_entry *e)
{
	struct kvc *k = kvc_of(st);
	if (!k || k->state == KVC_LOCAL)
		return;
	char v[64];
	entry_val(e, v, sizeof(v));
	kvc_queue(k, KVC_H_KV, e->uid, e->key, e->key_len, v);
}

void kv_cluster_unpublish(struct kv_store *st, const struct kv_entry *e)
{
	struct kvc *k = kvc_of(st);
	if (k && k->state != KVC_LOCAL)
		kvc_queue(k, KVC_H_KV, e->uid, e->key, e->key_len, NULL);
}

static void flush_ops(struct kvc *k);

static void pub_reply(struct kvc_req *q, uint32_t i, redisReply *r)
{
}

static void pub_done(struct kvc_req *q)
{
	struct kvc *k = q->k;
	if (q->status == MORI_OK && k->b_n) {
		uint32_t n = k->batches[k->b_head].nops;
		k->b_head = (k->b_head + 1) % k->b_cap;
		k->b_n--;
		k->ops_inflight -= n;
	}
	free(q);
	flush_ops(k); /* the next slice, if any */
}

static void batch_push(struct kvc *k, uint32_t nops, uint64_t oldest)
{
	if (k->b_n == k->b_cap) {
		uint32_t nc = k->b_cap ? 2 * k->b_cap : 64;
		void *nb = malloc(sizeof(*k->batches) * nc);
		MORI_REQUIRE(nb, "out of memory for the cluster index's batches");
		for (uint32_t i = 0; i < k->b_n; i++)
			memcpy((char *)nb + i * sizeof(*k->batches), &k->batches[(k->b_head + i) % k->b_cap],
			       sizeof(*k->batches));
		free(k->batches);
		k->batches = nb, k->b_head = 0, k->b_cap = nc;
	}
	k->batches[(k->b_head + k->b_n) % k->b_cap].nops = nops;
	k->batches[(k->b_head + k->b_n) % k->b_cap].oldest_ms = oldest;
	k->b_n++;
	k->ops_inflight += nops;
}

/* Queued operations go out as HSET / HDEL commands of up to OPS_PER_CMD fields, in order (a put
 * then a remove of one key stay in that order), at most CMDS_PER_FLUSH commands a turn of the
 * loop and CMDS_IN_FLIGHT pipelines unanswered: a resync's million keys go out as Redis takes
 * them, the loop serving clients in between (each answer wakes it for the next slice). */
static void flush_ops(struct kvc *k)
{
	if (k->nops == k->ops_head || !k->ac || (k->state != KVC_UP && k->state != KVC_RESYNCING) ||
	    k->b_n >= CMDS_IN_FLIGHT)
		return;
	const char **argv = malloc(sizeof(*argv) * (2 + 2 * OPS_PER_CMD));
	size_t *lens = malloc(sizeof(*lens) * (2 + 2 * OPS_PER_CMD));
	struct kvc_req *p = calloc(1, sizeof(*p));
	if (!argv || !lens || !p) {
		free(argv), free(lens), free(p);
		return;
	}
	*p = (struct kvc_req){.k = k, .reply = pub_reply, .done = pub_done, .sending = 1};
	uint32_t i = k->ops_head, ncmd = 0;
	uint64_t oldest = k->ops_oldest_ms;
	while (i < k->nops && ncmd < CMDS_PER_FLUSH) {
		struct kvc_op *o = k->ops[i];
		int argc = 2;
		argv[0] = o->del ? "HDEL" : "HSET", lens[0] = 4;
		argv[1] = o->hash == KVC_H_KV ? k->kv_hash : k->ext_hash, lens[1] = strlen(argv[1]);
		uint32_t j = i;
		while (j < k->nops && j - i < OPS_PER_CMD && k->ops[j]->del == o->del && k->ops[j]->hash == o->hash) {
			struct kvc_op *x = k->ops[j++];
			argv[argc] = x->b, lens[argc++] = x->flen;
			if (!x->del)
				argv[argc] = x->b + x->flen, lens[argc++] = x->vlen;
		}
		kvc_send(p, argc, argv, lens);
		ncmd++;
		i = j;
	}
	for (uint32_t j = k->ops_head; j < i; j++)
		free(k->ops[j]);
	batch_push(k, i - k->ops_head, oldest);
	k->ops_head = i;
	if (k->ops_head == k->nops)
		k->ops_head = k->nops = 0, k->ops_oldest_ms = 0;
	free(argv), free(lens);
	kvc_sent(p); /* one pipeline, acknowledged as one batch after the last of its commands */
}

static void on_check(uv_check_t *h)
{
	flush_ops(h->data);
}

/* ---- resync and heartbeat ---- */

static int resync_entry(struct kv_entry *e, void *arg)
{
	kv_cluster_publish(((struct kvc *)arg)->st, e);
	return 0;
}

static void beat(struct kvc *k);

/* This node's liveness value: "epoch free capacity keys" (epoch in hex). */
static void live_value(struct kvc *k, char *v, size_t len)
{
	struct kv_dram_stats ds;
	kv_dram_stats_get(k->st->dram, &ds);
	uint64_t cap = (uint64_t)k->d->cfg.kv_dram_bytes;
	snprintf(v, len, "%" PRIx64 " %" PRIu64 " %" PRIu64 " %" PRIu64, k->d->epoch,
		 cap > ds.allocated ? cap - ds.allocated : 0, cap, k->st->dram_keys + k->st->ssd_keys);
}

static void resync_reply(struct kvc_req *q, uint32_t i, redisReply *r)
{
}

static void resync_done(struct kvc_req *q)
{
	struct kvc *k = q->k;
	if (q->status == MORI_OK && k->state == KVC_RESYNCING) {
		k->state = KVC_UP;
		mlog_info("kv", "cluster index %s: %" PRIu64 " keys of %s published", k->url,
			  k->st->dram_keys + k->st->ssd_keys, k->self);
		beat(k);
	}
	free(q);
}

/* The node's whole state again, replacing what Redis had of this epoch: UNLINK of its hashes and
 * its liveness key set, one pipeline; then every entry of the index and every external report
 * queued as an update (a copy each, no formatting: the loop is held only for that), going out
 * in slices behind it. Updates queued before are part of this snapshot and dropped. */
static void resync(struct kvc *k)
{
	k->resyncs++;
	k->state = KVC_RESYNCING;
	drop_ops(k);
	struct kvc_req *q = calloc(1, sizeof(*q));
	if (!q) {
		conn_lost(k, "out of memory for a resync");
		return;
	}
	*q = (struct kvc_req){.k = k, .reply = resync_reply, .done = resync_done, .sending = 1};
	/* UNLINK: freed in Redis's background, a million-field hash would stall it */
	const char *del[] = {"UNLINK", k->kv_hash, k->ext_hash};
	size_t dl[] = {6, strlen(k->kv_hash), strlen(k->ext_hash)};
	kvc_send(q, 3, del, dl);
	/* live from here: the first heartbeat finds this value */
	char live[128], ttl[24];
	live_value(k, live, sizeof(live));
	snprintf(ttl, sizeof(ttl), "%" PRIu64, k->ttl_ms);
	const char *set[] = {"SET", k->live_key, live, "PX", ttl};
	size_t setl[] = {3, strlen(k->live_key), strlen(live), 2, strlen(ttl)};
	kvc_send(q, 5, set, setl);
	kvc_sent(q);
	kv_index_each(&k->st->idx, resync_entry, k);
	if (k->ext_resync)
		k->ext_resync(k);
	flush_ops(k);
}

struct beatreq {
	struct kvc_req q;
	int phase;             /* 0: SET/PEXPIRE/SADD/HLEN/SMEMBERS, 1: MGET of the members */
	char **names;
	uint32_t nnames;
	int lost;              /* SET ... GET found no previous value: Redis lost this node */
};

static void beat_free(struct beatreq *b)
{
	for (uint32_t i = 0; i < b->nnames; i++)
		free(b->names[i]);
	free(b->names);
	free(b);
}

static int parse_live(const char *s, size_t len, struct kv_node_info *in)
{
	char buf[128];
	if (len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = 0;
	unsigned long long e, f, c, kk;
	if (sscanf(buf, "%llx %llu %llu %llu", &e, &f, &c, &kk) != 4)
		return -1;
	in->epoch = e, in->dram_free = f, in->dram_capacity = c, in->keys = kk;
	return 0;
}

int kvc_live_epoch(const redisReply *r, uint32_t j, uint64_t epoch)
{
	struct kv_node_info in;
	if (!r || r->type != REDIS_REPLY_ARRAY || j >= r->elements)
		return 0;
	const redisReply *e = r->element[j];
	return e->type == REDIS_REPLY_STRING && parse_live(e->str, e->len, &in) == 0 && in.epoch == epoch;
}

void kvc_live_all(const redisReply *r, const struct kvc_node *nodes, uint32_t nn, uint8_t *ok)
{
	for (uint32_t j = 0; j < nn; j++)
		ok[j] = (uint8_t)kvc_live_epoch(r, j, nodes[j].info.epoch);
}

int kvc_send_nodes(struct kvc_req *q, const char *kind, const struct kvc_node *nodes, uint32_t nn, char *const *fields,
		   size_t *flens, size_t n)
{
	const char **argv = malloc(sizeof(*argv) * (n + 2 > nn + 1 ? n + 2 : nn + 1));
	size_t *ml = malloc(sizeof(*ml) * (nn + 1));
	char (*lk)[KV_NODE_MAX + 20] = malloc(sizeof(*lk) * (nn ? nn : 1));
	if (!argv || !ml || !lk) {
		free(argv), free(ml), free(lk);
		return MORI_ENOMEM;
	}
	char hname[KV_NODE_MAX + 40];
	argv[0] = "HMGET", flens[0] = 5;
	for (size_t i = 0; i < n; i++)
		argv[i + 2] = fields[i];
	for (uint32_t j = 0; j < nn; j++) {
		snprintf(hname, sizeof(hname), "mori:%s:%s:%" PRIx64, kind, nodes[j].name, nodes[j].info.epoch);
		argv[1] = hname, flens[1] = strlen(hname);
		kvc_send(q, (int)n + 2, argv, flens);
	}
	if (nn) {
		argv[0] = "MGET", ml[0] = 4;
		for (uint32_t j = 0; j < nn; j++) {
			snprintf(lk[j], sizeof(lk[j]), "mori:node:%s", nodes[j].name);
			argv[j + 1] = lk[j], ml[j + 1] = strlen(lk[j]);
		}
		kvc_send(q, (int)nn + 1, argv, ml);
	} else {
		const char *ping[] = {"PING"};
		size_t pl[] = {4};
		kvc_send(q, 1, ping, pl);
	}
	free(argv), free(ml), free(lk);
	return MORI_OK;
}

static void beat_reply(struct kvc_req *q, uint32_t i, redisReply *r)
{
	struct beatreq *b = (struct beatreq *)q;
	struct kvc *k = q->k;
	if (!r)
		return;
	if (b->phase == 0) {
		if (i == 0 && r->type == REDIS_REPLY_NIL)
			b->lost = 1;
		else if (i == 3 && r->type == REDIS_REPLY_INTEGER)
			k->published = (uint64_t)r->integer;
		else if (i == 4 && r->type == REDIS_REPLY_ARRAY) {
			b->names = calloc(r->elements ? r->elements : 1, sizeof(char *));
			for (size_t j = 0; b->names && j < r->elements; j++)
				if (r->element[j]->type == REDIS_REPLY_STRING && r->element[j]->len < KV_NODE_MAX)
					b->names[b->nnames++] = strndup(r->element[j]->str, r->element[j]->len);
		}
		return;
	}
	/* phase 1: MGET of the liveness keys, in names' order */
	if (r->type != REDIS_REPLY_ARRAY)
		return;
	struct kvc_node *nn = calloc(b->nnames ? b->nnames : 1, sizeof(*nn));
	struct kv_node_info *ni = calloc(b->nnames ? b->nnames : 1, sizeof(*ni));
	if (!nn || !ni) {
		free(nn), free(ni);
		return;
	}
	uint32_t m = 0;
	for (uint32_t j = 0; j < b->nnames && j < r->elements; j++) {
		const redisReply *e = r->element[j];
		if (e->type != REDIS_REPLY_STRING || parse_live(e->str, e->len, &nn[m].info) != 0) {
			/* gone: out of the discovery set too (it adds itself back at its next heartbeat) */
			if (k->ac && redisAsyncCommand(k->ac, fire_reply, k, "SREM mori:nodes %s", b->names[j]) == REDIS_OK)
				sent_push(k);
			continue;
		}
		snprintf(nn[m].name, sizeof(nn[m].name), "%s", b->names[j]);
		m++;
	}
	for (uint32_t j = 0; j < m; j++) {
		ni[j] = nn[j].info;
		ni[j].node = nn[j].name;
		ni[j].self = !strcmp(nn[j].name, k->self);
	}
	free(k->nodes), free(k->infos);
	k->nodes = nn, k->infos = ni, k->nnodes = m;
}

static void beat_done(struct kvc_req *q)
{
	struct beatreq *b = (struct beatreq *)q;
	struct kvc *k = q->k;
	if (q->status != MORI_OK || b->phase == 1 || !k->ac) {
		k->beat_inflight = 0;
		beat_free(b);
		return;
	}
	if (b->lost && k->state == KVC_UP) {
		mlog_warn("kv", "cluster index %s had nothing of %s (restarted empty, or this node was silent past "
			  "kv_index_ttl_ms): publishing everything again", k->url, k->self);
		k->beat_inflight = 0;
		beat_free(b);
		resync(k);
		return;
	}
	/* phase 1: read the live nodes */
	b->phase = 1;
	q->sent = q->got = 0;
	q->sending = 1;
	const char **argv = malloc(sizeof(*argv) * (b->nnames + 1));
	size_t *lens = malloc(sizeof(*lens) * (b->nnames + 1));
	char (*keys)[KV_NODE_MAX + 20] = malloc(sizeof(*keys) * (b->nnames + 1));
	if (!argv || !lens || !keys || !b->nnames) {
		free(argv), free(lens), free(keys);
		k->beat_inflight = 0;
		beat_free(b);
		return;
	}
	argv[0] = "MGET", lens[0] = 4;
	for (uint32_t j = 0; j < b->nnames; j++) {
		snprintf(keys[j], sizeof(keys[j]), "mori:node:%s", b->names[j]);
		argv[j + 1] = keys[j], lens[j + 1] = strlen(keys[j]);
	}
	kvc_send(q, (int)b->nnames + 1, argv, lens);
	free(argv), free(lens), free(keys);
	kvc_sent(q);
}

/* The heartbeat: this node's liveness (SET ... PX ttl GET: no previous value means Redis lost
 * us), its hashes' TTLs, its place in mori:nodes, its published count, then the live nodes. */
static void beat(struct kvc *k)
{
	if (k->beat_inflight || !k->ac || k->state != KVC_UP)
		return;
	struct beatreq *b = calloc(1, sizeof(*b));
	if (!b)
		return;
	b->q = (struct kvc_req){.k = k, .reply = beat_reply, .done = beat_done, .sending = 1};
	k->beat_inflight = 1;
	k->next_beat_ms = kvc_now_ms(k) + k->ttl_ms / 3;
	char live[128], ttl[24];
	live_value(k, live, sizeof(live));
	snprintf(ttl, sizeof(ttl), "%" PRIu64, k->ttl_ms);
	const char *set[] = {"SET", k->live_key, live, "PX", ttl, "GET"};
	size_t setl[] = {3, strlen(k->live_key), strlen(live), 2, strlen(ttl), 3};
	kvc_send(&b->q, 6, set, setl);
	const char *px1[] = {"PEXPIRE", k->kv_hash, ttl}, *px2[] = {"PEXPIRE", k->ext_hash, ttl};
	size_t p1l[] = {7, strlen(k->kv_hash), strlen(ttl)}, p2l[] = {7, strlen(k->ext_hash), strlen(ttl)};
	kvc_send(&b->q, 3, px1, p1l);
	kvc_send(&b->q, 3, px2, p2l);
	const char *hlen[] = {"HLEN", k->kv_hash};
	size_t hl[] = {4, strlen(k->kv_hash)};
	kvc_send(&b->q, 2, hlen, hl);
	const char *sm[] = {"SMEMBERS", "mori:nodes"};
	size_t sml[] = {8, 10};
	kvc_send(&b->q, 2, sm, sml);
	const char *sadd[] = {"SADD", "mori:nodes", k->self};
	size_t sal[] = {4, 10, strlen(k->self)};
	kvc_send(&b->q, 3, sadd, sal);
	kvc_sent(&b->q);
}

/* Every tick: connect when due, take a connection down whose oldest command is past
 * kv_index_timeout_ms (or a connect that takes that long), heartbeat when due. */
static void on_tick(uv_timer_t *t)
{
	struct kvc *k = t->data;
	uint64_t now = kvc_now_ms(k);
	if (k->state == KVC_DOWN && now >= k->retry_at_ms) {
		connect_now(k);
		return;
	}
	if (k->state == KVC_CONNECTING && now - k->connect_at_ms > k->timeout_ms) {
		char why[100];
		snprintf(why, sizeof(why), "no connection within kv_index_timeout_ms (%" PRIu64 " ms)", k->timeout_ms);
		conn_lost(k, why);
		return;
	}
	uint64_t since = k->sent_n ? k->sent_ms[k->sent_head] : 0;
	since = since > k->last_reply_ms ? since : k->last_reply_ms;
	if (k->sent_n && now - since > k->timeout_ms) {
		char why[100];
		snprintf(why, sizeof(why), "no answer within kv_index_timeout_ms (%" PRIu64 " ms)", k->timeout_ms);
		k->timed_out = 1; /* what was in flight ends with MORI_ETIMEDOUT */
		conn_lost(k, why);
		k->timed_out = 0;
		return;
	}
	if (k->state == KVC_UP && now >= k->next_beat_ms)
		beat(k);
}

/* ---- lookups ---- */

struct locreq {
	struct kvc_req q;
	uid_t uid;
	unsigned flags;
	kv_locate_cb cb;
	void *arg;
	size_t n;
	uint32_t nn;                 /* nodes asked */
	struct kvc_node *nodes;      /* their snapshot */
	struct kv_holder *h;         /* n x nn */
	uint32_t *nh;                /* holders per key */
	uint8_t *node_ok;
	char **fields;               /* n fields */
	size_t *flens;
};

static void loc_free(struct locreq *l)
{
	for (size_t i = 0; l->fields && i < l->n; i++)
		free(l->fields[i]);
	free(l->fields), free(l->flens), free(l->nodes), free(l->h), free(l->nh), free(l->node_ok);
	free(l);
}

static void loc_reply(struct kvc_req *q, uint32_t i, redisReply *r)
{
	struct locreq *l = (struct locreq *)q;
	if (!r)
		return;
	if (i == l->nn) { /* the MGET of the nodes' liveness keys (or PING with none) */
		kvc_live_all(r, l->nodes, l->nn, l->node_ok);
		return;
	}
	for (size_t k = 0; k < l->n; k++) {
		unsigned tier;
		unsigned long long size, gen;
		char buf[64];
		if (!kvc_elem_str(r, k, buf, sizeof(buf)) || sscanf(buf, "%u %llu %llu", &tier, &size, &gen) != 3)
			continue;
		struct kv_holder *h = &l->h[k * l->nn + l->nh[k]++];
		*h = (struct kv_holder){.node = l->nodes[i].name, .epoch = l->nodes[i].info.epoch, .gen = gen,
					.size = size, .tier = (uint8_t)tier, .self = l->nodes[i].info.self};
	}
}

static void loc_done(struct kvc_req *q)
{
	struct locreq *l = (struct locreq *)q;
	struct kvc *k = q->k;
	k->lookups++;
	k->lookup_us_sum += (uint64_t)(uv_hrtime() / 1000) - q->t0_us;
	if (q->status != MORI_OK) {
		l->cb(l->arg, q->status, q->msg, NULL, 0);
		loc_free(l);
		return;
	}
	struct kv_located *res = calloc(l->n ? l->n : 1, sizeof(*res));
	if (!res) {
		l->cb(l->arg, MORI_ENOMEM, "out of memory", NULL, 0);
		loc_free(l);
		return;
	}
	size_t n = l->n;
	for (size_t i = 0; i < l->n; i++) {
		/* holders of nodes whose epoch is no longer live are dropped in place */
		struct kv_holder *h = &l->h[i * l->nn];
		uint32_t m = 0;
		for (uint32_t j = 0; j < l->nh[i]; j++) {
			uint32_t node = 0;
			while (node < l->nn && l->nodes[node].name != h[j].node)
				node++;
			if (node < l->nn && l->node_ok[node])
				h[m++] = h[j];
		}
		res[i].holders = h;
		res[i].n = m;
		if (!m && (l->flags & KV_LOCATE_CONSECUTIVE)) {
			n = i;
			break;
		}
	}
	l->cb(l->arg, MORI_OK, "", res, n);
	free(res);
	loc_free(l);
}

int kv_cluster_locate(struct morid *d, uid_t uid, const struct kv_key *keys, size_t n, unsigned flags,
		      kv_locate_cb cb, void *arg, char *msg, size_t msglen)
{
	struct kvc *k = kvc_of(d->kv);
	if (!k || k->state == KVC_LOCAL) {
		snprintf(msg, msglen, "kv_index is local: no cluster index to ask");
		return MORI_ENOTSUP;
	}
	if (n == 0 || n > KV_LOOKUP_MAX) {
		snprintf(msg, msglen, "lookup of %zu keys (1..%d)", n, KV_LOOKUP_MAX);
		return MORI_EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		if (!keys[i].len || keys[i].len > KV_KEY_MAX) {
			snprintf(msg, msglen, "key %zu of %zu bytes (keys have 1..%d)", i, keys[i].len, KV_KEY_MAX);
			return MORI_EINVAL;
		}
	int rc = kvc_ready(k, msg, msglen);
	if (rc != MORI_OK)
		return rc;
	struct locreq *l = calloc(1, sizeof(*l));
	uint32_t nn = 0;
	if (l)
		l->nodes = calloc(k->nnodes ? k->nnodes : 1, sizeof(*l->nodes));
	for (uint32_t j = 0; l && l->nodes && j < k->nnodes; j++)
		if (!((flags & KV_LOCATE_REMOTE) && k->infos[j].self))
			l->nodes[nn++] = k->nodes[j];
	for (uint32_t j = 0; l && l->nodes && j < nn; j++) {
		l->nodes[j].info.node = l->nodes[j].name;
		l->nodes[j].info.self = !strcmp(l->nodes[j].name, k->self);
	}
	if (l) {
		l->n = n, l->nn = nn, l->flags = flags, l->uid = uid, l->cb = cb, l->arg = arg;
		l->h = calloc(n * (nn ? nn : 1), sizeof(*l->h));
		l->nh = calloc(n, sizeof(*l->nh));
		l->node_ok = calloc(nn ? nn : 1, 1);
		l->fields = calloc(n, sizeof(*l->fields));
		l->flens = calloc(n + 2, sizeof(*l->flens));
	}
	int ok = l && l->nodes && l->h && l->nh && l->node_ok && l->fields && l->flens;
	for (size_t i = 0; ok && i < n; i++) {
		l->fields[i] = malloc(keys[i].len + 4);
		ok = l->fields[i] != NULL;
		if (ok)
			l->flens[i + 2] = kvc_field(uid, keys[i].data, keys[i].len, l->fields[i]);
	}
	if (ok)
		l->q = (struct kvc_req){.k = k, .reply = loc_reply, .done = loc_done, .t0_us = uv_hrtime() / 1000,
					.sending = 1};
	/* one pipeline, one round trip, however many keys and nodes */
	if (!ok || kvc_send_nodes(&l->q, "kv", l->nodes, nn, l->fields, l->flens, n) != MORI_OK) {
		if (l)
			loc_free(l);
		snprintf(msg, msglen, "out of memory for a lookup of %zu keys", n);
		return MORI_ENOMEM;
	}
	kvc_sent(&l->q);
	return MORI_OK;
}

int kv_cluster_nodes(struct morid *d, const struct kv_node_info **out, size_t *n)
{
	struct kvc *k = kvc_of(d->kv);
	*out = NULL, *n = 0;
	if (!k || k->state == KVC_LOCAL)
		return MORI_ENOTSUP;
	if (k->state != KVC_UP && k->state != KVC_RESYNCING)
		return MORI_ECONN;
	*out = k->infos;
	*n = k->nnodes;
	return MORI_OK;
}

/* ---- life cycle ---- */

static int parse_url(struct kvc *k, const char *u, char *err, size_t errlen)
{
	const char *p = u + strlen("redis://");
	const char *colon = strrchr(p, ':'), *slash = strchr(p, '/');
	size_t hl = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
	if (!hl || hl >= sizeof(k->host)) {
		snprintf(err, errlen, "kv_index %.200s: no host (redis://HOST:PORT/DB)", u);
		return -1;
	}
	memcpy(k->host, p, hl);
	k->host[hl] = 0;
	k->port = 6379;
	if (colon) {
		char *end;
		long v = strtol(colon + 1, &end, 10);
		if (end == colon + 1 || v < 1 || v > 65535 || (*end && *end != '/')) {
			snprintf(err, errlen, "kv_index %.200s: port is not 1..65535", u);
			return -1;
		}
		k->port = (int)v;
	}
	if (slash && slash[1]) {
		char *end;
		long v = strtol(slash + 1, &end, 10);
		if (*end || v < 0 || v > 1 << 20) {
			snprintf(err, errlen, "kv_index %.200s: database is not a number", u);
			return -1;
		}
		k->db = (int)v;
	}
	snprintf(k->url, sizeof(k->url), "redis://%s:%d/%d", k->host, k->port, k->db);
	return 0;
}

int kv_cluster_start(struct morid *d, struct kv_store *st)
{
	const struct config *cfg = &d->cfg;
	struct kvc *k = calloc(1, sizeof(*k));
	if (!k) {
		mlog_err("kv", "out of memory for the cluster index");
		return -1;
	}
	k->d = d, k->st = st;
	k->state = KVC_LOCAL;
	snprintf(k->url, sizeof(k->url), "local");
	st->cluster = k;
	if (!strcmp(cfg->kv_index, "local"))
		return 0;
	char err[300];
	if (strncmp(cfg->kv_index, "redis://", 8) != 0) {
		mlog_err("kv", "kv_index %s is neither local nor redis://HOST:PORT/DB", cfg->kv_index);
		return -1;
	}
	if (parse_url(k, cfg->kv_index, err, sizeof(err)) != 0) {
		mlog_err("kv", "%s", err);
		return -1;
	}
	const char *self = cfg->advertise[0] ? cfg->advertise : cfg->listen;
	if (!self[0]) {
		mlog_err("kv", "kv_index %s needs `listen` (or `advertise`): nodes are named by their peer address", k->url);
		return -1;
	}
	snprintf(k->self, sizeof(k->self), "%s", self);
	snprintf(k->kv_hash, sizeof(k->kv_hash), "mori:kv:%s:%" PRIx64, k->self, d->epoch);
	snprintf(k->ext_hash, sizeof(k->ext_hash), "mori:ext:%s:%" PRIx64, k->self, d->epoch);
	snprintf(k->live_key, sizeof(k->live_key), "mori:node:%s", k->self);
	k->ttl_ms = (uint64_t)cfg->kv_index_ttl_ms;
	k->timeout_ms = (uint64_t)cfg->kv_index_timeout_ms;
	k->backoff_ms = 100;
	k->state = KVC_DOWN;
	uv_timer_init(d->loop, &k->tick);
	k->tick.data = k;
	uint64_t period = k->timeout_ms / 4 < k->ttl_ms / 6 ? k->timeout_ms / 4 : k->ttl_ms / 6;
	uv_timer_start(&k->tick, on_tick, 0, period ? period : 1);
	uv_check_init(d->loop, &k->flush);
	k->flush.data = k;
	uv_check_start(&k->flush, on_check);
	mlog_info("kv", "cluster index %s: this node is %s, entries live %" PRIu64 " ms past its last heartbeat",
		  k->url, k->self, k->ttl_ms);
	connect_now(k);
	return 0;
}

static void handle_freed(uv_handle_t *h)
{
	struct kvc *k = h->data;
	if (--k->closing == 0)
		free(k);
}

void kv_cluster_stop(struct kv_store *st)
{
	struct kvc *k = kvc_of(st);
	if (!k)
		return;
	st->cluster = NULL;
	int remote = k->state != KVC_LOCAL;
	if (remote) {
		k->state = KVC_DOWN;
		snprintf(k->last_error, sizeof(k->last_error), "morid stopping");
		if (k->ac) {
			redisAsyncContext *ac = k->ac;
			k->ac = NULL;
			ac->data = NULL;
			redisAsyncFree(ac); /* pending requests end with NULL replies: ECONN */
		}
	}
	drop_ops(k);
	free(k->ops), free(k->sent_ms), free(k->batches), free(k->nodes), free(k->infos);
	if (!remote) {
		free(k);
		return;
	}
	k->closing = 2;
	uv_close((uv_handle_t *)&k->tick, handle_freed);
	uv_close((uv_handle_t *)&k->flush, handle_freed);
}

void kv_cluster_stats_get(const struct kv_store *st, struct kv_cluster_stats *s)
{
	struct kvc *k = kvc_of(st);
	memset(s, 0, sizeof(*s));
	if (!k) {
		s->backend = s->state = "local";
		s->last_error = "";
		return;
	}
	s->backend = k->url;
	s->state = state_name(k->state);
	s->last_error = k->state == KVC_UP || k->state == KVC_LOCAL ? "" : k->last_error;
	s->published = k->published;
	s->queued = (k->nops - k->ops_head) + k->ops_inflight;
	uint64_t oldest = k->b_n ? k->batches[k->b_head].oldest_ms : k->ops_oldest_ms;
	if (!k->b_n && k->nops == k->ops_head)
		oldest = 0;
	s->lag_ms = oldest ? kvc_now_ms(k) - oldest : 0;
	s->round_trips = k->round_trips, s->errors = k->errors, s->resyncs = k->resyncs;
	s->lookups = k->lookups, s->lookup_us_sum = k->lookup_us_sum;
	s->nodes = k->infos;
	s->nnodes = k->nnodes;
}
