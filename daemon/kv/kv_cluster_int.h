/* The cluster index's internals shared by kv_cluster.c (connection, publishing, heartbeat,
 * lookups) and kv_ext.c (external KV). */
#ifndef MORID_KV_CLUSTER_INT_H
#define MORID_KV_CLUSTER_INT_H
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "kv/kv_cluster.h"
#include "kv/kv_int.h"

enum kvc_state { KVC_LOCAL = 0, KVC_CONNECTING, KVC_RESYNCING, KVC_UP, KVC_DOWN };
enum kvc_hash { KVC_H_KV = 0, KVC_H_EXT = 1 };

/* A pipeline of commands whose replies arrive in order: reply(i) for each (r NULL: the
 * connection went, the first such sets status), then done once after the last. */
struct kvc_req {
	struct kvc *k;
	uint32_t sent, got;
	int sending;             /* commands are still being added: done waits */
	int status;
	char msg[700];
	uint64_t t0_us;
	void (*reply)(struct kvc_req *q, uint32_t i, redisReply *r);
	void (*done)(struct kvc_req *q);
};

/* A publish operation waiting for its batch. */
struct kvc_op {
	uint8_t hash;            /* enum kvc_hash */
	uint8_t del;             /* 1: HDEL, else HSET field val */
	uint8_t vlen;
	uint16_t flen;
	char b[];                /* field (uid + key), then val */
};

struct kvc_node {
	char name[KV_NODE_MAX];
	struct kv_node_info info;
};

struct kvc {
	struct morid *d;
	struct kv_store *st;
	enum kvc_state state;
	char url[300], host[256];
	int port, db;
	char self[KV_NODE_MAX];
	char kv_hash[KV_NODE_MAX + 40], ext_hash[KV_NODE_MAX + 40], live_key[KV_NODE_MAX + 20];
	char last_error[300];
	redisAsyncContext *ac;
	uv_timer_t tick;
	uint64_t connect_at_ms, retry_at_ms, next_beat_ms, ttl_ms, timeout_ms, last_reply_ms;
	uint32_t backoff_ms;
	/* commands in flight, oldest first (their send times): a reply later than timeout_ms
	 * takes the connection down */
	uint64_t *sent_ms;
	uint32_t sent_head, sent_n, sent_cap;
	/* publishing */
	struct kvc_op **ops;     /* ops[ops_head..nops) wait, oldest first */
	uint32_t ops_head, nops, capops;
	uint64_t ops_oldest_ms;
	struct { uint32_t nops; uint64_t oldest_ms; } *batches; /* publish batches in flight, FIFO */
	uint32_t b_head, b_n, b_cap;
	uint64_t ops_inflight;
	uv_check_t flush;
	int beat_inflight;
	/* live nodes (heartbeat) */
	struct kvc_node *nodes;
	uint32_t nnodes;
	struct kv_node_info *infos;
	/* counters */
	uint64_t published, round_trips, errors, resyncs, lookups, lookup_us_sum;
	int closing;
	int timed_out;           /* conn_lost from a command's deadline */
	/* external KV (kv_ext.c, above this file: it sets these) */
	struct kv_xkv *ext;
	void (*ext_resync)(struct kvc *k);
};

struct kvc *kvc_of(const struct kv_store *st);
/* MORI_OK when commands can be sent now, else MORI_ECONN with msg naming the Redis address. */
int kvc_ready(struct kvc *k, char *msg, size_t msglen);
/* Send one command of q's pipeline (argv copied by hiredis). */
void kvc_send(struct kvc_req *q, int argc, const char **argv, const size_t *lens);
/* q's commands are all sent: done runs once the last reply came (maybe at once). */
void kvc_sent(struct kvc_req *q);
/* Queue a publish of field (uid + key) in hash h: val NULL deletes it. */
void kvc_queue(struct kvc *k, enum kvc_hash h, uid_t uid, const void *key, size_t klen, const char *val);
/* field = uid (4 bytes, big endian) + key into out (KV_KEY_MAX + 4 bytes); its length. */
size_t kvc_field(uid_t uid, const void *key, size_t klen, char *out);
/* Node j of the table is current: the MGET reply r (its liveness values, in table order) says
 * its epoch is still snap's. */
int kvc_live_epoch(const redisReply *r, uint32_t j, uint64_t epoch);
uint64_t kvc_now_ms(const struct kvc *k);
/* The liveness MGET's reply r: ok[j] for node j of nodes[0..nn) (kvc_live_epoch of each). */
void kvc_live_all(const redisReply *r, const struct kvc_node *nodes, uint32_t nn, uint8_t *ok);
/* Element k of array reply r as a C string in buf (cap bytes): 1, or 0 where it is absent, not a
 * string, or does not fit. */
static inline int kvc_elem_str(const redisReply *r, size_t k, char *buf, size_t cap)
{
	if (!r || r->type != REDIS_REPLY_ARRAY || k >= r->elements)
		return 0;
	const redisReply *e = r->element[k];
	if (e->type != REDIS_REPLY_STRING || e->len >= cap)
		return 0;
	memcpy(buf, e->str, e->len);
	buf[e->len] = 0;
	return 1;
}
/* A lookup's pipeline in q: one HMGET of fields[0..n) (their lengths in flens[2..n + 2); flens[0]
 * and [1] are used here) per node of nodes[0..nn) from its hash "mori:KIND:NODE:EPOCH", then one
 * MGET of those nodes' liveness keys (a PING with none): replies 0..nn-1 are the nodes', reply nn
 * the liveness. MORI_OK, or MORI_ENOMEM with nothing sent. */
int kvc_send_nodes(struct kvc_req *q, const char *kind, const struct kvc_node *nodes, uint32_t nn, char *const *fields,
		   size_t *flens, size_t n);




#endif
