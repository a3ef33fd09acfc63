/* The root side of a group (group_root.h): membership, collective calls compared and answered
 * together, the allocator, deadlines, aborts. Everything it learns comes from member daemons
 * (this one included) as PeerGroup messages; everything it decides goes back as events, one per
 * (member daemon, member group), naming the ranks it is for. */
#include "group_root.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group_link.h"
#include "log.h"
#include "shmem_layout.h"
#include "shmem_wire.h"
#include "symalloc.h"

enum rstate { RG_FORMING, RG_FORMED, RG_ABORTED };
enum rrstate { RR_NONE, RR_JOINED, RR_LEFT, RR_DEAD };

struct rrank {
	enum rrstate state;
	char node[128];           /* its daemon ("" or ours: this node) */
	uint64_t member_gid;      /* that daemon's group */
	int32_t pid;
	uint8_t *heap;            /* its heap's packed Handle */
	size_t heap_len;
	int arrived;              /* its call number g->seq is here */
	uint32_t op;
	uint64_t size, align, offset;
};

struct rgroup {
	struct list link;
	uint64_t gid;
	char name[SHMEM_NAME_MAX + 1];
	int world;
	uint64_t heap_size;
	uint32_t kind;
	uint32_t timeout_ms;
	uint32_t uid;             /* its owner: groups are keyed by (uid, name) */
	enum rstate state;
	int joined, live;
	uint64_t created_us, deadline_us;
	struct rrank *ranks;
	struct symheap heap;
	uint64_t seq;             /* the call being gathered: every PE's call number seq */
	int arrived;
	uint64_t call_deadline_us;
	uint32_t call_timeout_ms;     /* the shortest deadline a PE gave the call (at most timeout_ms) */
	uint64_t calls;           /* calls completed */
	uint32_t abort;
	int32_t abort_pe;
	char why[300];
};

static struct {
	struct morid *d;
	struct list groups;
	uint64_t next_gid;
	int on;
} R;

void root_start(struct morid *d)
{
	R.d = d;
	LIST_INIT(&R.groups);
	R.next_gid = 1;
	R.on = 1;
}

static void group_free(struct rgroup *g)
{
	list_del(&g->link);
	for (int i = 0; i < g->world; i++)
		free(g->ranks[i].heap);
	free(g->ranks);
	if (g->state != RG_FORMING)
		symheap_fini(&g->heap);
	free(g);
}

void root_stop(struct morid *d)
{
	if (!R.on)
		return;
	R.on = 0;
	list_each(it, &R.groups)
		group_free(list_entry(it, struct rgroup, link));
}

static struct rgroup *by_gid(uint64_t gid)
{
	list_each(it, &R.groups) {
		struct rgroup *g = list_entry(it, struct rgroup, link);
		if (g->gid == gid)
			return g;
	}
	return NULL;
}

/* Names are per uid: uid A's "job" and uid B's "job" are two groups (else another uid could
 * take a job's name first). uid is the PEs' uid as their daemon saw it (PeerGroup.uid). */
static struct rgroup *by_name(uint32_t uid, const char *name)
{
	list_each(it, &R.groups) {
		struct rgroup *g = list_entry(it, struct rgroup, link);
		if (g->uid == uid && !strcmp(g->name, name))
			return g;
	}
	return NULL;
}

int root_has(struct morid *d, uint64_t gid)
{
	return R.on && by_gid(gid) != NULL;
}

uint32_t root_count(struct morid *d)
{
	uint32_t n = 0;
	if (R.on)
		list_each(it, &R.groups)
			n++;
	return n;
}

/* "1, 3-5, 9": the ranks of g for which want() holds, at most len bytes. */
static void rank_list(const struct rgroup *g, int (*want)(const struct rrank *), char *buf, size_t len)
{
	size_t o = 0;
	buf[0] = 0;
	for (int i = 0; i < g->world && o + 24 < len; i++) {
		if (!want(&g->ranks[i]))
			continue;
		int j = i;
		while (j + 1 < g->world && want(&g->ranks[j + 1]))
			j++;
		o += (size_t)snprintf(buf + o, len - o, o ? ", %d" : "%d", i);
		if (j > i)
			o += (size_t)snprintf(buf + o, len - o, "-%d", j);
		i = j;
	}
	if (o + 24 >= len && len > 4)
		snprintf(buf + len - 5, 5, "...");
}

static int is_joined(const struct rrank *k) { return k->state == RR_JOINED; }
static int is_missing(const struct rrank *k) { return k->state == RR_NONE; }
static int not_arrived(const struct rrank *k) { return k->state == RR_JOINED && !k->arrived; }

/* Send a copy of tmpl to every member daemon with ranks for which want() holds, each copy
 * naming its ranks. */
static void send_events(struct rgroup *g, Mori__PeerGroup *tmpl, int (*want)(const struct rrank *))
{
	char *done = calloc((size_t)g->world, 1);
	int32_t *ranks = malloc(sizeof(int32_t) * (size_t)g->world);
	if (!done || !ranks) {
		mlog_err("group", "group '%s': out of memory for its events", g->name);
		free(done);
		free(ranks);
		return;
	}
	tmpl->kind = GL_EVENT;
	tmpl->name = g->name;
	tmpl->root_gid = g->gid;
	for (int i = 0; i < g->world; i++) {
		struct rrank *a = &g->ranks[i];
		if (done[i] || !want(a))
			continue;
		size_t n = 0;
		for (int j = i; j < g->world; j++) {
			struct rrank *b = &g->ranks[j];
			if (!done[j] && want(b) && b->member_gid == a->member_gid && !strcmp(b->node, a->node)) {
				ranks[n++] = j;
				done[j] = 1;
			}
		}
		tmpl->member_gid = a->member_gid;
		tmpl->ranks = ranks;
		tmpl->n_ranks = n;
		int rc = glink_send(R.d, a->node, tmpl);
		if (rc != MORI_OK)
			mlog_warn("group", "group '%s': event %u to %s not sent: %s", g->name, tmpl->event,
				  a->node[0] ? a->node : "this node", mori_strerror(rc));
	}
	tmpl->ranks = NULL;
	tmpl->n_ranks = 0;
	free(done);
	free(ranks);
}

/* One event to the daemon of one PE that is not (or no longer) part of g's bookkeeping. */
static void tell_one(const Mori__PeerGroup *m, uint32_t event, int code, const char *msg, uint64_t root_gid)
{
	Mori__PeerGroup e = MORI__PEER_GROUP__INIT;
	int32_t rank = m->rank;
	e.kind = GL_EVENT;
	e.event = event;
	e.name = m->name;
	e.root_gid = root_gid;
	e.member_gid = m->member_gid;
	e.code = code;
	e.message = (char *)msg;
	e.seq = m->seq;
	e.ranks = &rank;
	e.n_ranks = 1;
	mlog_info("group", "group '%s': PE %d (%s): %s", m->name, m->rank, m->node[0] ? m->node : "this node", msg);
	glink_send(R.d, m->node, &e);
}

/* The whole forming group fails: every PE that joined hears why, then it is gone. */
static void forming_fail(struct rgroup *g, int code, const char *msg)
{
	Mori__PeerGroup e = MORI__PEER_GROUP__INIT;
	e.event = GE_REFUSED;
	e.code = code;
	e.message = (char *)msg;
	mlog_notice("group", "group '%s' not formed: %s", g->name, msg);
	send_events(g, &e, is_joined);
	group_free(g);
}

static void abort_group(struct rgroup *g, uint32_t why, int32_t pe, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void abort_group(struct rgroup *g, uint32_t why, int32_t pe, const char *fmt, ...)
{
	if (g->state == RG_ABORTED)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g->why, sizeof(g->why), fmt, ap);
	va_end(ap);
	g->state = RG_ABORTED;
	g->abort = why;
	g->abort_pe = pe;
	mlog_notice("group", "group '%s' aborted: %s", g->name, g->why);
	Mori__PeerGroup e = MORI__PEER_GROUP__INIT;
	e.event = GE_ABORT;
	e.code = glink_abort_code(why);
	e.message = g->why;
	e.abort = why;
	e.abort_pe = pe;
	send_events(g, &e, is_joined);
	for (int i = 0; i < g->world; i++)
		g->ranks[i].arrived = 0;
	g->arrived = 0;
}

static void formed(struct rgroup *g)
{
	if (symheap_init(&g->heap, g->heap_size, MORI_SHMEM_RESERVED) != MORI_OK) {
		forming_fail(g, MORI_ENOMEM, "morid is out of memory for the group's allocator");
		return;
	}
	g->state = RG_FORMED;
	g->live = g->world;
	g->seq = 1;
	Mori__GroupMember *mem = calloc((size_t)g->world, sizeof(*mem));
	Mori__GroupMember **mp = calloc((size_t)g->world, sizeof(*mp));
	if (!mem || !mp) {
		free(mem);
		free(mp);
		abort_group(g, MORI_SHMEM_ABORT_TEARDOWN, -1, "morid is out of memory for the group's member table");
		return;
	}
	for (int i = 0; i < g->world; i++) {
		mori__group_member__init(&mem[i]);
		mem[i].rank = i;
		mem[i].node = g->ranks[i].node;
		mem[i].pid = g->ranks[i].pid;
		mem[i].heap.data = g->ranks[i].heap;
		mem[i].heap.len = g->ranks[i].heap_len;
		mp[i] = &mem[i];
	}
	Mori__PeerGroup e = MORI__PEER_GROUP__INIT;
	e.event = GE_FORMED;
	e.members = mp;
	e.n_members = (size_t)g->world;
	e.heap_size = g->heap_size;
	e.world_size = g->world;
	mlog_notice("group", "group '%s' formed: %d PEs, heaps of %llu bytes (%s)", g->name, g->world,
		    (unsigned long long)g->heap_size, g->kind == MORI_MEM_VRAM ? "VRAM" : "host");
	send_events(g, &e, is_joined);
	free(mem);
	free(mp);
}

/* Does join m fit forming group g? 0, or the reason in msg. */
static int compatible(const struct rgroup *g, const Mori__PeerGroup *m, char *msg, size_t len)
{
	int first = 0;
	while (first < g->world && g->ranks[first].state != RR_JOINED)
		first++;
	if (m->world_size != g->world)
		snprintf(msg, len, "PE %d joins group '%s' with world size %d, PE %d with %d", m->rank, g->name,
			 m->world_size, first, g->world);
	else if (m->heap_size != g->heap_size)
		snprintf(msg, len, "PE %d joins group '%s' with a heap of %llu bytes, PE %d with %llu", m->rank, g->name,
			 (unsigned long long)m->heap_size, first, (unsigned long long)g->heap_size);
	else if (m->heap_kind != g->kind)
		snprintf(msg, len, "PE %d joins group '%s' with a %s heap, PE %d with a %s one", m->rank, g->name,
			 m->heap_kind == MORI_MEM_VRAM ? "VRAM" : "host", first,
			 g->kind == MORI_MEM_VRAM ? "VRAM" : "host");
	else if (g->ranks[m->rank].state == RR_JOINED)
		snprintf(msg, len, "rank %d joins group '%s' twice (pid %d on %s, and pid %d on %s)", m->rank, g->name,
			 g->ranks[m->rank].pid, g->ranks[m->rank].node[0] ? g->ranks[m->rank].node : "the root's node",
			 m->pid, m->node[0] ? m->node : "the root's node");
	else
		return 0;
	return -1;
}

static struct rgroup *forming_new(const Mori__PeerGroup *m)
{
	struct rgroup *g = calloc(1, sizeof(*g));
	if (!g || !(g->ranks = calloc((size_t)m->world_size, sizeof(*g->ranks)))) {
		free(g);
		return NULL;
	}
	g->gid = R.next_gid++;
	snprintf(g->name, sizeof(g->name), "%s", m->name);
	g->world = m->world_size;
	g->heap_size = m->heap_size;
	g->kind = m->heap_kind;
	g->timeout_ms = m->timeout_ms ? m->timeout_ms : SHMEM_DEFAULT_TIMEOUT_MS;
	g->uid = m->uid;
	g->created_us = mori_now_us();
	g->deadline_us = g->created_us + g->timeout_ms * 1000ull;
	g->abort_pe = -1;
	list_add(&R.groups, &g->link);
	return g;
}

void root_join(struct morid *d, const Mori__PeerGroup *m)
{
	char msg[600];
	if (!m->name || !m->name[0] || m->world_size < 1 || m->world_size > MORI_SHMEM_MAX_PES || m->rank < 0 ||
	    m->rank >= m->world_size || !m->member_gid || !m->heap.len || m->heap_size <= MORI_SHMEM_RESERVED) {
		snprintf(msg, sizeof(msg), "malformed join (PE %d of %d, heap of %llu bytes)", m->rank, m->world_size,
			 (unsigned long long)m->heap_size);
		tell_one(m, GE_REFUSED, MORI_EINVAL, msg, 0);
		return;
	}
	struct rgroup *g = by_name(m->uid, m->name);
	if (g && g->state != RG_FORMING) {
		snprintf(msg, sizeof(msg),
			 "group '%s' still lives (%s, %d PEs, %d still in it): a name is free again once every PE of the "
			 "old group has left", g->name, g->state == RG_FORMED ? "formed" : "aborted", g->world, g->live);
		tell_one(m, GE_REFUSED, MORI_EEXIST, msg, 0);
		return;
	}
	if (!g && !(g = forming_new(m))) {
		tell_one(m, GE_REFUSED, MORI_ENOMEM, "morid is out of memory for the group", 0);
		return;
	}
	/* m->rank was checked against m's world size only: index the table once the sizes agree */
	struct rrank *k = m->world_size == g->world ? &g->ranks[m->rank] : NULL;
	if (k && k->state == RR_JOINED && k->member_gid == m->member_gid && k->pid == m->pid) {
		/* the same join again: the peer request path delivers at least once (a lost reply is
		 * resent), so a repeat is dropped, never taken for a second PE */
		mlog_info("group", "group '%s': PE %d's join came twice; the repeat is dropped", g->name, m->rank);
		return;
	}
	if (compatible(g, m, msg, sizeof(msg)) != 0) {
		/* refused on every PE: the ones waiting and the one that does not fit */
		tell_one(m, GE_REFUSED, MORI_EINVAL, msg, 0);
		forming_fail(g, MORI_EINVAL, msg);
		return;
	}
	k = &g->ranks[m->rank];
	if (!(k->heap = malloc(m->heap.len))) {
		tell_one(m, GE_REFUSED, MORI_ENOMEM, "morid is out of memory for the group", 0);
		return;
	}
	memcpy(k->heap, m->heap.data, m->heap.len);
	k->heap_len = m->heap.len;
	k->state = RR_JOINED;
	snprintf(k->node, sizeof(k->node), "%s", glink_is_self(d, m->node) ? "" : m->node);
	k->member_gid = m->member_gid;
	k->pid = m->pid;
	g->joined++;
	mlog_info("group", "group '%s': PE %d joined (pid %d%s%s), %d of %d", g->name, m->rank, m->pid,
		  k->node[0] ? " on " : "", k->node, g->joined, g->world);
	if (g->joined == g->world)
		formed(g);
}

static const char *op_name(uint32_t op)
{
	switch (op) {
	case SHMEM_CALL_MALLOC: return "malloc";
	case SHMEM_CALL_CALLOC: return "calloc";
	case SHMEM_CALL_FREE: return "free";
	case SHMEM_CALL_BARRIER: return "barrier_all";
	}
	return "an unknown call";
}

static void describe(const struct rrank *k, char *buf, size_t len)
{
	if (k->op == SHMEM_CALL_MALLOC || k->op == SHMEM_CALL_CALLOC)
		snprintf(buf, len, "%s(%llu, align %llu)", op_name(k->op), (unsigned long long)k->size,
			 (unsigned long long)k->align);
	else if (k->op == SHMEM_CALL_FREE)
		snprintf(buf, len, "free(heap offset %#llx)", (unsigned long long)k->offset);
	else if (k->op == SHMEM_CALL_BARRIER)
		shmem_coll_describe(buf, len, k->size, k->align);
	else
		snprintf(buf, len, "%s", op_name(k->op));
}

static int same_call(const struct rrank *a, const struct rrank *b)
{
	if (a->op != b->op)
		return 0;
	if (a->op == SHMEM_CALL_MALLOC || a->op == SHMEM_CALL_CALLOC)
		return a->size == b->size && a->align == b->align;
	if (a->op == SHMEM_CALL_FREE)
		return a->offset == b->offset;
	return a->size == b->size && a->align == b->align; /* a collective's arguments (shmem_coll_tag) */
}

/* Every PE made call g->seq: compare them, run it, answer them all. */
static void complete_call(struct rgroup *g)
{
	char msg[700] = "", a[96], b[96];
	int code = MORI_OK;
	uint64_t off = 0;
	const struct rrank *ref = &g->ranks[0];
	for (int i = 1; i < g->world && code == MORI_OK; i++) {
		if (same_call(ref, &g->ranks[i]))
			continue;
		describe(&g->ranks[i], a, sizeof(a));
		describe(ref, b, sizeof(b));
		code = MORI_EINVAL;
		snprintf(msg, sizeof(msg),
			 "symmetric call #%llu of group '%s' differs: PE %d calls %s, PE 0 calls %s (PE %d is the first "
			 "that differs; nothing was done)", (unsigned long long)g->seq, g->name, i, a, b, i);
	}
	if (code == MORI_OK) {
		char why[300];
		describe(ref, a, sizeof(a));
		if (ref->op == SHMEM_CALL_MALLOC || ref->op == SHMEM_CALL_CALLOC)
			code = symheap_alloc(&g->heap, ref->size, ref->align, &off, why, sizeof(why));
		else if (ref->op == SHMEM_CALL_FREE)
			code = symheap_free(&g->heap, ref->offset, why, sizeof(why));
		else if (ref->op != SHMEM_CALL_BARRIER) {
			code = MORI_EINVAL;
			snprintf(why, sizeof(why), "unknown op %u", ref->op);
		}
		if (code != MORI_OK)
			snprintf(msg, sizeof(msg), "group '%s', call #%llu, %s: %s", g->name, (unsigned long long)g->seq, a,
				 why);
	}
	Mori__PeerGroup e = MORI__PEER_GROUP__INIT;
	e.event = GE_DONE;
	e.seq = g->seq;
	e.code = code;
	e.message = msg;
	e.offset = off;
	send_events(g, &e, is_joined);
	for (int i = 0; i < g->world; i++)
		g->ranks[i].arrived = 0;
	g->arrived = 0;
	g->seq++;
	g->calls++;
}

void root_call(struct morid *d, const Mori__PeerGroup *m)
{
	char msg[600];
	struct rgroup *g = by_gid(m->root_gid);
	if (!g || g->uid != m->uid || g->state == RG_FORMING || m->rank < 0 || m->rank >= g->world ||
	    g->ranks[m->rank].member_gid != m->member_gid) {
		snprintf(msg, sizeof(msg), "group '%s' (%llu) has no PE %d at this root", m->name,
			 (unsigned long long)m->root_gid, m->rank);
		tell_one(m, GE_DONE, MORI_ENOENT, msg, m->root_gid);
		return;
	}
	struct rrank *k = &g->ranks[m->rank];
	if (g->state == RG_ABORTED || k->state != RR_JOINED) {
		tell_one(m, GE_DONE, glink_abort_code(g->abort), g->why, g->gid);
		return;
	}
	if (m->seq < g->seq || (m->seq == g->seq && k->arrived && k->op == m->op && k->size == m->size &&
				 k->align == m->align && k->offset == m->offset)) {
		/* a repeat of a call already counted (at-least-once delivery): dropped */
		mlog_info("group", "group '%s': PE %d's call #%llu came twice; the repeat is dropped", g->name, m->rank,
			  (unsigned long long)m->seq);
		return;
	}
	if (m->seq != g->seq || k->arrived) {
		snprintf(msg, sizeof(msg), "PE %d's call #%llu of group '%s' is out of order (the group is at call #%llu)",
			 m->rank, (unsigned long long)m->seq, g->name, (unsigned long long)g->seq);
		tell_one(m, GE_DONE, MORI_EINVAL, msg, g->gid);
		return;
	}
	k->arrived = 1;
	k->op = m->op;
	k->size = m->size;
	k->align = m->align;
	k->offset = m->offset;
	/* the call ends at the shortest deadline any PE gave it (a communicator's own) */
	uint32_t t = m->timeout_ms && m->timeout_ms < g->timeout_ms ? m->timeout_ms : g->timeout_ms;
	uint64_t due = mori_now_us() + t * 1000ull;
	if (g->arrived++ == 0 || due < g->call_deadline_us) {
		g->call_deadline_us = due;
		g->call_timeout_ms = t;
	}
	if (g->arrived == g->world)
		complete_call(g);
}

/* A rank is gone from a group that formed: the group aborts (the first reason sticks); the
 * group is freed once nobody is left in it. */
static void rank_gone(struct rgroup *g, int rank, int dead, const char *why)
{
	struct rrank *k = &g->ranks[rank];
	if (k->state != RR_JOINED)
		return;
	k->state = dead ? RR_DEAD : RR_LEFT;
	g->live--;
	if (dead)
		abort_group(g, MORI_SHMEM_ABORT_PEER_DEAD, rank, "PE %d of group '%s' died (%s)", rank, g->name, why);
	else
		abort_group(g, MORI_SHMEM_ABORT_TEARDOWN, rank, "PE %d left group '%s': the group is torn down", rank,
			    g->name);
	if (g->live == 0) {
		mlog_notice("group", "group '%s': every PE has left; gone", g->name);
		group_free(g);
	}
}

void root_leave(struct morid *d, const Mori__PeerGroup *m)
{
	struct rgroup *g = m->root_gid ? by_gid(m->root_gid) : by_name(m->uid, m->name);
	if (!g || g->uid != m->uid || m->rank < 0 || m->rank >= g->world ||
	    g->ranks[m->rank].member_gid != m->member_gid)
		return;
	if (g->state == RG_FORMING) {
		struct rrank *k = &g->ranks[m->rank];
		if (k->state != RR_JOINED)
			return;
		/* before the group formed: forgotten, as if it never came */
		free(k->heap);
		memset(k, 0, sizeof(*k));
		if (--g->joined == 0)
			group_free(g);
		return;
	}
	rank_gone(g, m->rank, m->dead, m->dead ? "its session closed" : "left");
}

void root_node_lost(struct morid *d, const char *node, uint64_t root_gid, int code, const char *why)
{
	struct rgroup *g = by_gid(root_gid);
	if (!g)
		return;
	const char *n = glink_is_self(d, node) ? "" : node;
	char msg[300];
	snprintf(msg, sizeof(msg), "its daemon %s cannot be reached: %s", node, why);
	for (int i = 0; i < g->world; i++) {
		struct rrank *k = &g->ranks[i];
		if (k->state != RR_JOINED || strcmp(k->node, n))
			continue;
		if (g->state == RG_FORMING) {
			free(k->heap);
			memset(k, 0, sizeof(*k));
			if (--g->joined == 0) {
				group_free(g);
				return;
			}
			continue;
		}
		int last = g->live == 1;
		rank_gone(g, i, 1, msg);
		if (last)
			return; /* freed */
	}
}

int root_tick(struct morid *d, uint64_t now)
{
	int busy = 0;
	char ranks[200];
	list_each(it, &R.groups) {
		struct rgroup *g = list_entry(it, struct rgroup, link);
		if (g->state == RG_FORMING) {
			if (now < g->deadline_us) {
				busy = 1;
				continue;
			}
			char msg[600];
			rank_list(g, is_missing, ranks, sizeof(ranks));
			snprintf(msg, sizeof(msg), "join of group '%s' timed out after %u ms: PE%s %s never arrived (%d of %d joined)",
				 g->name, g->timeout_ms, strchr(ranks, ',') || strchr(ranks, '-') ? "s" : "", ranks,
				 g->joined, g->world);
			forming_fail(g, MORI_ETIMEDOUT, msg);
		} else if (g->state == RG_FORMED && g->arrived) {
			if (now < g->call_deadline_us) {
				busy = 1;
				continue;
			}
			int first = 0;
			while (first < g->world && !not_arrived(&g->ranks[first]))
				first++;
			char what[96];
			int i0 = 0;
			while (i0 < g->world && !g->ranks[i0].arrived)
				i0++;
			describe(&g->ranks[i0 < g->world ? i0 : 0], what, sizeof(what));
			rank_list(g, not_arrived, ranks, sizeof(ranks));
			abort_group(g, MORI_SHMEM_ABORT_TIMEOUT, first,
				    "call #%llu (%s) of group '%s' timed out after %u ms: PE%s %s never made it (%d of %d did)",
				    (unsigned long long)g->seq, what, g->name, g->call_timeout_ms,
				    strchr(ranks, ',') || strchr(ranks, '-') ? "s" : "", ranks, g->arrived, g->world);
		}
	}
	return busy;
}

static const char *rank_state(const struct rgroup *g, const struct rrank *k)
{
	switch (k->state) {
	case RR_NONE: return "missing";
	case RR_JOINED: return g->state == RG_FORMING ? "joined" : k->arrived ? "in call" : "member";
	case RR_LEFT: return "left";
	case RR_DEAD: return "dead";
	}
	return "?";
}

void root_list(struct morid *d, Mori__ListReply *lr, struct rctx *r, size_t cap, uid_t uid)
{
	if (!R.on)
		return;
	list_each(it, &R.groups) {
		struct rgroup *g = list_entry(it, struct rgroup, link);
		if (uid != 0 && uid != g->uid)
			continue; /* another uid's (group_list) */
		Mori__GroupInfo *gi = rctx_alloc(r, sizeof(*gi));
		Mori__GroupRankInfo **rs = rctx_alloc(r, sizeof(*rs) * (size_t)g->world);
		if (!gi || !rs || lr->n_groups >= cap)
			return;
		mori__group_info__init(gi);
		gi->name = g->name;
		gi->uid = g->uid;
		gi->root = "";
		char st[340];
		snprintf(st, sizeof(st), "%s%s%s", g->state == RG_FORMING ? "joining" : g->state == RG_FORMED ? "formed" : "aborted (",
			 g->state == RG_ABORTED ? g->why : "", g->state == RG_ABORTED ? ")" : "");
		gi->state = rctx_strdup(r, st);
		gi->world_size = g->world;
		gi->joined = (uint32_t)(g->state == RG_FORMING ? g->joined : g->live);
		gi->heap_size = g->heap_size;
		gi->heap_kind = g->kind;
		gi->age_us = mori_now_us() - g->created_us;
		gi->calls = g->calls;
		if (g->state != RG_FORMING) {
			gi->heap_used = g->heap.used_bytes + g->heap.base;
			gi->allocations = (uint32_t)g->heap.nused;
		}
		int local = 0;
		for (int i = 0; i < g->world; i++) {
			Mori__GroupRankInfo *ri = rctx_alloc(r, sizeof(*ri));
			if (!ri)
				return;
			mori__group_rank_info__init(ri);
			ri->rank = i;
			ri->node = g->ranks[i].node[0] ? g->ranks[i].node : (char *)glink_self(d);
			ri->pid = g->ranks[i].pid;
			ri->state = (char *)rank_state(g, &g->ranks[i]);
			local |= g->ranks[i].state != RR_NONE && !g->ranks[i].node[0];
			rs[i] = ri;
		}
		gi->ranks = rs;
		gi->n_ranks = (size_t)g->world;
		gi->role = local ? "root+member" : "root";
		lr->groups[lr->n_groups++] = gi;
	}
}
