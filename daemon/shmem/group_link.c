/* Messages between a group's member daemons and its root daemon (group_link.h). */
#include "group_link.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "peer/peer.h"
#include "peer/peer_int.h"

struct qmsg {
	struct qmsg *next;
	size_t len;
	uint8_t data[];
};

/* What a failed remote send tells the group layer: the message itself, packed. */
struct sent {
	char node[128];
	size_t len;
	uint8_t data[];
};

static struct {
	struct morid *d;
	glink_recv_fn recv;
	glink_fail_fn fail;
	glink_known_fn known;
	uv_idle_t idle;
	int on;
	struct qmsg *head, **tail;
} L;

static void deliver(uv_idle_t *h)
{
	/* Take the queue as it is now: what handling adds runs on the next turn. */
	struct qmsg *q = L.head;
	L.head = NULL;
	L.tail = &L.head;
	uv_idle_stop(h);
	while (q) {
		struct qmsg *n = q->next;
		Mori__PeerGroup *m = mori__peer_group__unpack(NULL, q->len, q->data);
		if (m) {
			L.recv(L.d, m);
			mori__peer_group__free_unpacked(m, NULL);
		}
		free(q);
		q = n;
	}
}

static int enqueue(const Mori__PeerGroup *m)
{
	size_t len = mori__peer_group__get_packed_size(m);
	struct qmsg *q = malloc(sizeof(*q) + len + 1);
	if (!q)
		return MORI_ENOMEM;
	q->next = NULL;
	q->len = len;
	mori__peer_group__pack(m, q->data);
	*L.tail = q;
	L.tail = &q->next;
	if (L.on && !uv_is_active((uv_handle_t *)&L.idle))
		uv_idle_start(&L.idle, deliver);
	return MORI_OK;
}

/* A PeerGroup from another daemon (the peer listener, through peers_group_serve): answered at
 * once, handled on a later turn. Delivery is at least once (a reply the listener loses makes the
 * sender resend it a second later): the group layer drops repeats. */
static int serve(struct peers *P, const Mori__Request *req, const char *from, Mori__Reply *rep, struct rctx *r)
{
	if (req->body_case != MORI__REQUEST__BODY_PEER_GROUP)
		return 0;
	const Mori__PeerGroup *m = req->peer_group;
	if (!L.on) {
		reply_error(rep, MORI_ECANCELED, "daemon stopping");
	} else if (m->kind < GL_JOIN || m->kind > GL_EVENT || !m->node || !m->node[0]) {
		reply_error(rep, MORI_EPROTO, "group message of kind %u without its sender", m->kind);
	} else if (from && strcmp(from, m->node)) {
		mlog_ratelimited(MLOG_WARN, "group", "a daemon authenticated as %s sent a group message as %s: refused",
				 from, m->node);
		reply_error(rep, MORI_EPERM, "authenticated as %s, not %s", from, m->node);
	} else if (m->kind == GL_EVENT && L.known && !L.known(m->member_gid, m->root_gid)) {
		reply_error(rep, MORI_ENOENT, "%s holds no PE of group '%s' (member group %llu): it restarted, or they "
			    "left", glink_self(L.d), m->name ? m->name : "?", (unsigned long long)m->member_gid);
	} else if (enqueue(m) != MORI_OK) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
	}
	return 1;
}

static void sent_done(struct rpc *q, struct peer *p, const Mori__Reply *rep, int code, const char *msg)
{
	struct sent *s = q->arg;
	if (code != MORI_OK && code != MORI_ECANCELED && L.on) {
		Mori__PeerGroup *m = mori__peer_group__unpack(NULL, s->len, s->data);
		if (m) {
			mlog_warn("group", "group message (kind %u, group '%s') to %s failed: %s", m->kind, m->name,
				  s->node, msg);
			L.fail(L.d, s->node, m, code, msg);
			mori__peer_group__free_unpacked(m, NULL);
		}
	}
	free(s);
}

const char *glink_self(struct morid *d)
{
	return d->peers ? d->peers->self : "";
}

int glink_is_self(struct morid *d, const char *node)
{
	return !node || !node[0] || strcmp(node, glink_self(d)) == 0;
}

int glink_can_reach(struct morid *d, char *msg, size_t len)
{
	if (d->peers && d->peers->on && glink_self(d)[0])
		return MORI_OK;
	snprintf(msg, len, "this morid has no peer listener (option listen): groups across nodes need one");
	return MORI_ENOTSUP;
}

int glink_send(struct morid *d, const char *node, Mori__PeerGroup *m)
{
	if (!L.on)
		return MORI_ECANCELED;
	m->node = (char *)glink_self(d);
	if (glink_is_self(d, node))
		return enqueue(m);
	char why[160];
	if (glink_can_reach(d, why, sizeof(why)) != MORI_OK)
		return MORI_ENOTSUP;
	struct peer *p = peer_get(d->peers, node, 1);
	if (!p)
		return MORI_EINVAL;
	Mori__Request req = MORI__REQUEST__INIT;
	req.body_case = MORI__REQUEST__BODY_PEER_GROUP;
	req.peer_group = m;
	size_t len = mori__peer_group__get_packed_size(m);
	struct sent *s = malloc(sizeof(*s) + len + 1);
	if (!s)
		return MORI_ENOMEM;
	snprintf(s->node, sizeof(s->node), "%s", node);
	s->len = len;
	mori__peer_group__pack(m, s->data);
	/* a join is sent as it starts: reaching the root is bounded by its deadline too */
	uint32_t ms = m->kind == GL_JOIN && m->timeout_ms && m->timeout_ms < PEER_LOOKUP_TIMEOUT_MS ? m->timeout_ms
											     : PEER_LOOKUP_TIMEOUT_MS;
	if (!peer_rpc(p, &req, ms, sent_done, s)) {
		free(s);
		return MORI_ENOMEM;
	}
	return MORI_OK;
}

int glink_start(struct morid *d, glink_recv_fn recv, glink_fail_fn fail, glink_known_fn known)
{
	L.d = d;
	L.recv = recv;
	L.fail = fail;
	L.known = known;
	L.head = NULL;
	L.tail = &L.head;
	uv_idle_init(d->loop, &L.idle);
	L.on = 1;
	peers_group_serve = serve;
	return 0;
}

void glink_stop(struct morid *d)
{
	if (!L.on)
		return;
	L.on = 0;
	peers_group_serve = NULL;
	uv_close((uv_handle_t *)&L.idle, NULL);
	while (L.head) {
		struct qmsg *n = L.head->next;
		free(L.head);
		L.head = n;
	}
	L.tail = &L.head;
}
