/* MORI-SHMEM in morid, the PEs of this node (group.h): GroupJoin / GroupCall / GroupLeave from
 * sessions, each PE's heap region and control page, the root daemon's events applied to them,
 * a PE's death, moractl groups.
 *
 * A member group (struct lgroup) is this daemon's part of one group: its PEs here. It is made
 * by the first local join of a name and root, names itself to the root by its id (member_gid),
 * and is freed once every PE of it here has left or died; the heaps' and control pages' fds it
 * holds are closed then (not before: a PE of this node may still map a peer that left). Every
 * join and call is forwarded to the root daemon (group_root.c, maybe this one) and answered when
 * its event comes back; a backstop deadline answers it if the root never does. */
#include "group.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group_link.h"
#include "group_root.h"
#include "heap.h"
#include "host_port.h"
#include "log.h"
#include "region/region.h"
#include "shmem_layout.h"
#include "shmem_wire.h"

#define GROUP_TICK_MS 20
#define BACKSTOP_MS 3000        /* beyond the root's own deadline: the root never answered */
#define HEAP_MAX (1ull << 40)

enum pestate { PE_JOINING, PE_MEMBER, PE_GONE };
enum lgstate { LG_JOINING, LG_FORMED, LG_ABORTED };
enum { W_NONE, W_JOIN, W_CALL };

struct lgroup;

struct gpe {
	struct list link;          /* lg->pes */
	struct lgroup *g;
	struct client *c;          /* NULL once gone */
	uint64_t id;               /* GroupJoinReply.group_id */
	int rank;
	int32_t pid;
	enum pestate state;
	struct region *heap;       /* owned by c; NULL once removed */
	int heap_fd;               /* held for the member group's life */
	struct heap_ctrl ctrl;
	int waiting;               /* W_*: a deferred reply is owed */
	uint64_t wait_req, wait_seq, wait_deadline_us;
};

struct gmember {
	int32_t pid;
	char node[128];
	uint8_t *heap;
	size_t heap_len;
};

struct lgroup {
	struct list link;
	uint64_t id;               /* member_gid */
	char name[SHMEM_NAME_MAX + 1];
	char root[128];            /* as the PEs named it ("": this daemon) */
	uint64_t root_gid;         /* 0 until formed */
	int world;
	uint64_t heap_size;
	uint32_t kind;
	uint32_t timeout_ms;
	uid_t uid;                 /* its owner: names are per uid, so only its uid's PEs are in it */
	enum lgstate state;
	uint32_t abort;
	int32_t abort_pe;
	int abort_code;
	char why[400];
	struct list pes;           /* struct gpe, gone ones included */
	int live;                  /* PEs not gone */
	struct gmember *members;   /* [world] once formed */
	uint64_t created_us;
};

static struct {
	struct morid *d;
	struct list groups;
	uint64_t next_id, next_pe;
	uv_timer_t tick;
	int on;
	struct group_hooks hooks;  /* the proxy's */
} G;

static void tick_arm(void);

/* ---- member groups ---- */

static void lg_free(struct lgroup *g)
{
	list_each(it, &g->pes) {
		struct gpe *p = list_entry(it, struct gpe, link);
		heap_fd_close(p->heap_fd);
		heap_ctrl_free(&p->ctrl);
		free(p);
	}
	if (g->members)
		for (int i = 0; i < g->world; i++)
			free(g->members[i].heap);
	free(g->members);
	list_del(&g->link);
	mlog_info("group", "group '%s': no PE left on this node; heaps released", g->name);
	free(g);
}

static struct lgroup *lg_find(uint64_t id)
{
	list_each(it, &G.groups) {
		struct lgroup *g = list_entry(it, struct lgroup, link);
		if (g->id == id)
			return g;
	}
	return NULL;
}

static struct gpe *pe_find(struct client *c, uint64_t id)
{
	list_each(it, &G.groups) {
		struct lgroup *g = list_entry(it, struct lgroup, link);
		list_each(pt, &g->pes) {
			struct gpe *p = list_entry(pt, struct gpe, link);
			if (p->id == id && p->c == c && p->state != PE_GONE)
				return p;
		}
	}
	return NULL;
}

static struct gpe *pe_of_rank(struct lgroup *g, int rank)
{
	list_each(it, &g->pes) {
		struct gpe *p = list_entry(it, struct gpe, link);
		if (p->rank == rank && p->state != PE_GONE)
			return p;
	}
	return NULL;
}

/* Answer a PE's deferred join or call with an error. */
static void answer_error(struct gpe *p, int code, const char *msg)
{
	if (!p->waiting || !p->c)
		return;
	Mori__Reply rep = MORI__REPLY__INIT;
	struct rctx r = {0};
	rep.id = p->wait_req;
	reply_error(&rep, code, "%s", msg);
	p->waiting = W_NONE;
	client_reply(p->c, &rep, &r);
	rctx_free(&r);
}

static void answer_call(struct gpe *p, uint64_t offset)
{
	Mori__Reply rep = MORI__REPLY__INIT;
	Mori__GroupCallReply cr = MORI__GROUP_CALL_REPLY__INIT;
	struct rctx r = {0};
	rep.id = p->wait_req;
	cr.offset = offset;
	rep.body_case = MORI__REPLY__BODY_GROUP_CALL;
	rep.group_call = &cr;
	p->waiting = W_NONE;
	client_reply(p->c, &rep, &r);
	rctx_free(&r);
}

/* The group aborts here (first reason sticks): every local PE's abort word, every waiting call. */
static void lg_abort(struct lgroup *g, uint32_t why, int32_t pe, int code, const char *msg)
{
	if (g->state == LG_ABORTED)
		return;
	g->state = LG_ABORTED;
	g->abort = why;
	g->abort_pe = pe;
	g->abort_code = code;
	snprintf(g->why, sizeof(g->why), "%s", msg);
	list_each(it, &g->pes) {
		struct gpe *p = list_entry(it, struct gpe, link);
		heap_ctrl_abort(&p->ctrl, why, pe);
		if (p->state != PE_GONE)
			answer_error(p, code, msg);
	}
}

static void send_root(struct lgroup *g, Mori__PeerGroup *m)
{
	m->name = g->name;
	m->uid = (uint32_t)g->uid; /* the root keys groups by (uid, name) */
	m->root_gid = g->root_gid;
	m->member_gid = g->id;
	int rc = glink_send(G.d, g->root, m);
	if (rc != MORI_OK)
		mlog_warn("group", "group '%s': message %u to the root %s not sent: %s", g->name, m->kind,
			  g->root[0] ? g->root : "(this daemon)", mori_strerror(rc));
}

/* A PE is gone (left, died, refused): its heap region goes now, its fds with the member group;
 * the root hears of it unless it never knew (refused). */
static void pe_gone(struct gpe *p, int dead, int tell_root, const char *why)
{
	struct lgroup *g = p->g;
	if (p->state == PE_GONE)
		return;
	int was = p->state;
	if (was == PE_MEMBER && G.hooks.pe_gone)
		G.hooks.pe_gone(G.hooks.arg, p->id); /* the proxy lets go of its ring and heap first */
	if (!dead)
		answer_error(p, MORI_ECANCELED, "the PE left its group");
	p->waiting = W_NONE;
	p->state = PE_GONE;
	if (p->heap)
		region_remove(G.d, p->heap, why);
	p->heap = NULL;
	p->c = NULL;
	g->live--;
	if (tell_root) {
		Mori__PeerGroup m = MORI__PEER_GROUP__INIT;
		m.kind = GL_LEAVE;
		m.rank = p->rank;
		m.dead = dead;
		send_root(g, &m);
	}
	if (was == PE_MEMBER && g->state == LG_FORMED) {
		char msg[400];
		snprintf(msg, sizeof(msg), dead ? "PE %d of group '%s' died (its session closed)"
					      : "PE %d left group '%s': the group is torn down", p->rank, g->name);
		lg_abort(g, dead ? MORI_SHMEM_ABORT_PEER_DEAD : MORI_SHMEM_ABORT_TEARDOWN, p->rank,
			 dead ? MORI_EPEERDEAD : MORI_ECANCELED, msg);
	}
	if (g->live == 0)
		lg_free(g);
}

void group_client_gone(struct morid *d, struct client *c)
{
	if (!G.on)
		return;
	list_each(it, &G.groups) {
		struct lgroup *g = list_entry(it, struct lgroup, link);
		int last = 0;
		if (d->stopping) {
			/* morid stops, its PEs live on (else each would read 'PE n died' about
			 * itself): this node's PEs see the teardown mori_shmem.h documents, ECANCELED with
			 * PE -1. The first reason sticks, so pe_gone's PEER_DEAD below changes nothing
			 * here; the root still hears of a dead PE (other nodes: EPEERDEAD, a node went down). */
			list_each(pt, &g->pes) {
				struct gpe *p = list_entry(pt, struct gpe, link);
				if (p->c == c && p->state != PE_GONE) {
					char msg[400];
					snprintf(msg, sizeof(msg), "group '%s': this node's morid is stopping", g->name);
					lg_abort(g, MORI_SHMEM_ABORT_TEARDOWN, -1, MORI_ECANCELED, msg);
					break;
				}
			}
		}
		list_each(pt, &g->pes) {
			struct gpe *p = list_entry(pt, struct gpe, link);
			if (p->c != c || p->state == PE_GONE)
				continue;
			last = g->live == 1;
			pe_gone(p, 1, 1, "its PE died");
			if (last)
				break; /* g is freed */
		}
	}
}

/* ---- joins ---- */

static int name_ok(const char *n)
{
	size_t len = n ? strlen(n) : 0;
	if (len == 0 || len > SHMEM_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)n[i] < 0x21 || (unsigned char)n[i] > 0x7e)
			return 0;
	return 1;
}

/* The member group a join goes into: the one of c's uid still joining under this name and root
 * with the same shape, else a new one (a PE that disagrees gets a member group of its own here, and the
 * root refuses them all, naming the disagreement). */
static struct lgroup *lg_for_join(const struct client *c, const Mori__GroupJoin *j, const char *root,
				 uint64_t heap_size)
{
	list_each(it, &G.groups) {
		struct lgroup *g = list_entry(it, struct lgroup, link);
		if (g->state == LG_JOINING && g->uid == c->uid && !strcmp(g->name, j->name) && !strcmp(g->root, root) &&
		    g->world == j->world_size && g->heap_size == heap_size && g->kind == j->heap_kind)
			return g;
	}
	struct lgroup *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->id = G.next_id++;
	snprintf(g->name, sizeof(g->name), "%s", j->name);
	snprintf(g->root, sizeof(g->root), "%s", root);
	g->world = j->world_size;
	g->heap_size = heap_size;
	g->kind = j->heap_kind;
	g->uid = c->uid;
	g->timeout_ms = j->timeout_ms ? j->timeout_ms : SHMEM_DEFAULT_TIMEOUT_MS;
	g->abort_pe = -1;
	g->created_us = mori_now_us();
	LIST_INIT(&g->pes);
	list_add(&G.groups, &g->link);
	return g;
}

/* What a join asks for, checked before anything is made. 0, or the code with rep filled. */
static int join_check(struct client *c, const Mori__GroupJoin *j, int fd, uint64_t *heap_size, const char **root,
		      Mori__Reply *rep)
{
	struct morid *d = G.d;
	char why[200];
	*root = j->root && !glink_is_self(d, j->root) ? j->root : "";
	if (!name_ok(j->name)) {
		reply_error(rep, MORI_EINVAL, "group names are 1..%d printable bytes without spaces", SHMEM_NAME_MAX);
		return MORI_EINVAL;
	}
	if (j->world_size < 1 || j->world_size > MORI_SHMEM_MAX_PES || j->rank < 0 || j->rank >= j->world_size) {
		reply_error(rep, MORI_EINVAL, "join of '%s': PE %d of %d (world sizes 1..%d, ranks 0..world-1)", j->name,
			    j->rank, j->world_size, MORI_SHMEM_MAX_PES);
		return MORI_EINVAL;
	}
	if (j->heap_kind != MORI_MEM_HOST && j->heap_kind != MORI_MEM_VRAM) {
		reply_error(rep, MORI_EINVAL, "join of '%s': heap kind %u is neither HOST nor VRAM", j->name, j->heap_kind);
		return MORI_EINVAL;
	}
	char host[128];
	int port;
	if ((*root)[0] && host_port_split(*root, host, sizeof(host), &port) != 0) {
		reply_error(rep, MORI_EINVAL, "join of '%s': root '%s' is not host:port", j->name, *root);
		return MORI_EINVAL;
	}
	if ((*root)[0] && glink_can_reach(d, why, sizeof(why)) != MORI_OK) {
		reply_error(rep, MORI_ENOTSUP, "join of '%s' with root %s: %s", j->name, *root, why);
		return MORI_ENOTSUP;
	}
	if (j->heap_kind == MORI_MEM_VRAM && (fd < 0 || !j->heap_size)) {
		reply_error(rep, MORI_EINVAL, "join of '%s': a VRAM heap comes as the PE's VMM allocation (fd and size)",
			    j->name);
		return MORI_EINVAL;
	}
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t sz = j->heap_size ? j->heap_size : (uint64_t)d->cfg.shmem_heap_size;
	if (sz > HEAP_MAX || sz <= MORI_SHMEM_RESERVED) {
		reply_error(rep, MORI_EINVAL, "join of '%s': a heap of %llu bytes (more than %u reserved, at most %llu)",
			    j->name, (unsigned long long)sz, MORI_SHMEM_RESERVED, (unsigned long long)HEAP_MAX);
		return MORI_EINVAL;
	}
	*heap_size = (sz + (uint64_t)pg - 1) & ~(uint64_t)(pg - 1);
	list_each(it, &G.groups) {
		struct lgroup *g = list_entry(it, struct lgroup, link);
		/* Names are per uid (with one name space another uid could take a job's
		 * name first and its PEs would get MORI_EPERM): another uid's group of this name is another
		 * group, root's included, and root joins only its own. A PE still maps only its own
		 * uid's heaps. */
		if (g->uid != c->uid || strcmp(g->name, j->name))
			continue;
		list_each(pt, &g->pes) {
			struct gpe *p = list_entry(pt, struct gpe, link);
			if (p->c == c && p->state != PE_GONE) {
				reply_error(rep, MORI_EBUSY, "this client already is PE %d of group '%s' (%s)", p->rank, g->name,
					    p->state == PE_JOINING ? "joining" : "member");
				return MORI_EBUSY;
			}
		}
	}
	/* one client must not take morid's whole descriptor budget (thousands of 1-PE
	 * groups of one client would leave nobody able to join anything) */
	int mine = 0;
	list_each(it, &G.groups) {
		struct lgroup *g = list_entry(it, struct lgroup, link);
		list_each(pt, &g->pes) {
			struct gpe *p = list_entry(pt, struct gpe, link);
			mine += p->c == c && p->state != PE_GONE;
		}
	}
	if (mine >= d->cfg.client_max_groups) {
		reply_error(rep, MORI_EBUSY, "join of '%s': this client already is a PE of %d groups (client_max_groups %lld)",
			    j->name, mine, (long long)d->cfg.client_max_groups);
		return MORI_EBUSY;
	}
	if (heap_fds_left(d, why, sizeof(why)) != MORI_OK) {
		reply_error(rep, MORI_ENOMEM, "join of '%s': %s", j->name, why);
		return MORI_ENOMEM;
	}
	return MORI_OK;
}

/* Make the PE: heap region, control page. fd (VRAM) is taken. NULL with rep filled. */
static struct gpe *pe_new(struct client *c, struct lgroup *g, const Mori__GroupJoin *j, int fd, Mori__Reply *rep)
{
	char why[300];
	int rc;
	struct gpe *p = calloc(1, sizeof(*p));
	if (!p) {
		if (fd >= 0)
			close(fd);
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return NULL;
	}
	p->heap_fd = -1;
	p->ctrl.fd = -1;
	if (g->kind == MORI_MEM_HOST)
		rc = heap_host_new(G.d, c, g->heap_size, &p->heap, &p->heap_fd, why, sizeof(why));
	else
		rc = heap_vram_new(G.d, c, g->heap_size, fd, j->gpu_ipc.data, j->gpu_ipc.len, j->gpu_addr, j->gpu_device,
				   &p->heap, &p->heap_fd, why, sizeof(why)); /* takes fd */
	if (rc == MORI_OK)
		rc = heap_ctrl_new(&p->ctrl, (uint32_t)G.d->cfg.shmem_ring_entries, why, sizeof(why));
	if (rc != MORI_OK) {
		if (p->heap)
			region_remove(G.d, p->heap, "join failed");
		heap_fd_close(p->heap_fd);
		free(p);
		reply_error(rep, rc, "join of '%s': %s", g->name, why);
		return NULL;
	}
	p->g = g;
	p->c = c;
	p->id = G.next_pe++;
	p->rank = j->rank;
	p->pid = c->pid;
	p->state = PE_JOINING;
	list_add(&g->pes, &p->link);
	g->live++;
	return p;
}

static int do_join(struct client *c, const Mori__Request *req, Mori__Reply *rep, int fd)
{
	const Mori__GroupJoin *j = req->group_join;
	uint64_t heap_size = 0;
	const char *root;
	if (join_check(c, j, fd, &heap_size, &root, rep) != MORI_OK) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	if (j->heap_kind == MORI_MEM_VRAM)
		heap_size = j->heap_size; /* the PE's allocation: granularity-rounded already */
	else if (fd >= 0)
		close(fd), fd = -1;
	struct lgroup *g = lg_for_join(c, j, root, heap_size);
	if (!g) {
		if (fd >= 0)
			close(fd);
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return 0;
	}
	struct gpe *p = pe_new(c, g, j, fd, rep);
	if (!p) {
		if (g->live == 0)
			lg_free(g);
		return 0;
	}
	struct rctx hr = {0}; /* the session does not free r of a deferred request */
	Mori__Handle *h = region_handle(G.d, p->heap, &hr, 1);
	size_t hl = h ? mori__handle__get_packed_size(h) : 0;
	uint8_t *hb = h ? rctx_alloc(&hr, hl + 1) : NULL;
	if (!hb) {
		rctx_free(&hr);
		pe_gone(p, 0, 0, "out of memory");
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return 0;
	}
	mori__handle__pack(h, hb);
	Mori__PeerGroup m = MORI__PEER_GROUP__INIT;
	m.kind = GL_JOIN;
	m.rank = j->rank;
	m.world_size = j->world_size;
	m.heap_size = heap_size;
	m.heap_kind = j->heap_kind;
	m.pid = c->pid;
	m.heap.data = hb;
	m.heap.len = hl;
	m.timeout_ms = g->timeout_ms;
	p->waiting = W_JOIN;
	p->wait_req = req->id;
	p->wait_deadline_us = mori_now_us() + (g->timeout_ms + BACKSTOP_MS) * 1000ull;
	send_root(g, &m);
	rctx_free(&hr);
	tick_arm();
	mlog_info("group", "client %llu (pid %d) joins group '%s' as PE %d of %d (heap %llu bytes, %s; root %s)",
		  (unsigned long long)c->id, c->pid, g->name, j->rank, j->world_size, (unsigned long long)heap_size,
		  j->heap_kind == MORI_MEM_VRAM ? "VRAM" : "host", root[0] ? root : "this daemon");
	return 1;
}

/* The group formed: every joining PE here gets the member table, its control page and (host
 * heaps) its heap's memfd. */
static void answer_join(struct gpe *p)
{
	struct lgroup *g = p->g;
	Mori__Reply rep = MORI__REPLY__INIT;
	Mori__GroupJoinReply jr = MORI__GROUP_JOIN_REPLY__INIT;
	struct rctx r = {0};
	rep.id = p->wait_req;
	p->waiting = W_NONE;
	Mori__GroupMember *mem = rctx_alloc(&r, sizeof(*mem) * (size_t)g->world);
	Mori__GroupMember **mp = rctx_alloc(&r, sizeof(*mp) * (size_t)g->world);
	int cfd = fcntl(p->ctrl.fd, F_DUPFD_CLOEXEC, 0);
	int hfd = g->kind == MORI_MEM_HOST ? fcntl(p->heap_fd, F_DUPFD_CLOEXEC, 0) : -1;
	if (!mem || !mp || cfd < 0 || (g->kind == MORI_MEM_HOST && hfd < 0)) {
		if (cfd >= 0)
			close(cfd);
		if (hfd >= 0)
			close(hfd);
		reply_error(&rep, MORI_ENOMEM, "out of memory or descriptors for the join's reply");
	} else {
		for (int i = 0; i < g->world; i++) {
			mori__group_member__init(&mem[i]);
			mem[i].rank = i;
			mem[i].node = g->members[i].node;
			mem[i].pid = g->members[i].pid;
			mem[i].heap.data = g->members[i].heap;
			mem[i].heap.len = g->members[i].heap_len;
			mem[i].local = glink_is_self(G.d, g->members[i].node);
			mp[i] = &mem[i];
		}
		jr.group_id = p->id;
		jr.rank = p->rank;
		jr.world_size = g->world;
		jr.heap_size = g->heap_size;
		jr.heap_kind = g->kind;
		jr.members = mp;
		jr.n_members = (size_t)g->world;
		jr.ring_entries = p->ctrl.entries;
		jr.ctrl_bytes = p->ctrl.len;
		rep.body_case = MORI__REPLY__BODY_GROUP_JOIN;
		rep.group_join = &jr;
		r.fds[r.nfds++] = cfd; /* closed by rctx_free once sent */
		if (hfd >= 0)
			r.fds[r.nfds++] = hfd;
	}
	client_reply(p->c, &rep, &r);
	rctx_free(&r);
}

static void ev_formed(struct lgroup *g, const Mori__PeerGroup *m)
{
	if (g->state != LG_JOINING || m->n_members != (size_t)g->world)
		return;
	if (!(g->members = calloc((size_t)g->world, sizeof(*g->members)))) {
		lg_abort(g, MORI_SHMEM_ABORT_TEARDOWN, -1, MORI_ENOMEM, "morid is out of memory for the member table");
		return;
	}
	for (size_t i = 0; i < m->n_members; i++) {
		const Mori__GroupMember *x = m->members[i];
		if (x->rank < 0 || x->rank >= g->world || g->members[x->rank].heap)
			continue;
		struct gmember *e = &g->members[x->rank];
		e->pid = x->pid;
		snprintf(e->node, sizeof(e->node), "%s", x->node && x->node[0] ? x->node : m->node);
		if ((e->heap = malloc(x->heap.len + 1))) {
			memcpy(e->heap, x->heap.data, x->heap.len);
			e->heap_len = x->heap.len;
		}
	}
	g->root_gid = m->root_gid;
	g->state = LG_FORMED;
	list_each(it, &g->pes) {
		struct gpe *p = list_entry(it, struct gpe, link);
		if (p->state != PE_JOINING)
			continue;
		const struct gmember *e = &g->members[p->rank];
		if (!e->heap || e->pid != p->pid || !glink_is_self(G.d, e->node)) {
			answer_error(p, MORI_EPROTO, "the root's member table does not list this PE");
			if (lg_find(g->id) == g && g->live == 1) {
				pe_gone(p, 0, 1, "not in the member table"); /* frees g */
				return;
			}
			pe_gone(p, 0, 1, "not in the member table");
			continue;
		}
		p->state = PE_MEMBER;
		answer_join(p);
		if (G.hooks.pe_ready)
			G.hooks.pe_ready(G.hooks.arg, p->id);
	}
}

static void ev_refused(struct lgroup *g, const Mori__PeerGroup *m)
{
	for (size_t i = 0; i < m->n_ranks && lg_find(m->member_gid) == g; i++) {
		struct gpe *p = pe_of_rank(g, m->ranks[i]);
		if (!p || p->state != PE_JOINING)
			continue;
		answer_error(p, m->code ? m->code : MORI_EINVAL, m->message);
		pe_gone(p, 0, 0, "join refused");
	}
}

static void ev_done(struct lgroup *g, const Mori__PeerGroup *m)
{
	for (size_t i = 0; i < m->n_ranks; i++) {
		struct gpe *p = pe_of_rank(g, m->ranks[i]);
		if (!p || p->waiting != W_CALL || p->wait_seq != m->seq)
			continue;
		if (m->code)
			answer_error(p, m->code, m->message);
		else
			answer_call(p, m->offset);
	}
}

/* A message of the link: events for our member groups, the rest for the root side. */
static void on_message(struct morid *d, const Mori__PeerGroup *m)
{
	if (!G.on)
		return;
	switch (m->kind) {
	case GL_JOIN:
		root_join(d, m);
		break;
	case GL_CALL:
		root_call(d, m);
		break;
	case GL_LEAVE:
		root_leave(d, m);
		break;
	case GL_EVENT: {
		struct lgroup *g = lg_find(m->member_gid);
		if (!g || (g->root_gid && m->root_gid != g->root_gid))
			break; /* gone meanwhile, or an older group's */
		if (m->event == GE_FORMED)
			ev_formed(g, m);
		else if (m->event == GE_REFUSED)
			ev_refused(g, m);
		else if (m->event == GE_DONE)
			ev_done(g, m);
		else if (m->event == GE_ABORT)
			lg_abort(g, m->abort, m->abort_pe, m->code ? m->code : glink_abort_code(m->abort), m->message);
		break;
	}
	}
	tick_arm();
}

static int holds(uint64_t member_gid, uint64_t root_gid)
{
	struct lgroup *g = lg_find(member_gid);
	return g && (!g->root_gid || root_gid == g->root_gid);
}

/* Something this daemon sent never arrived: to the root (our PEs lose it), or, as the root, to
 * a member daemon (its PEs are lost to the group). */
static void on_failure(struct morid *d, const char *node, const Mori__PeerGroup *m, int code, const char *why)
{
	if (!G.on)
		return;
	if (m->kind == GL_EVENT) {
		root_node_lost(d, node, m->root_gid, code, why);
		return;
	}
	struct lgroup *g = lg_find(m->member_gid);
	if (!g || m->kind == GL_LEAVE)
		return;
	char msg[700];
	snprintf(msg, sizeof(msg), "group '%s': the root daemon %s cannot be reached: %s", g->name, node, why);
	if (g->state == LG_JOINING) {
		struct gpe *p = pe_of_rank(g, m->rank);
		if (p && p->state == PE_JOINING) {
			answer_error(p, code, msg);
			pe_gone(p, 0, 0, "root unreachable");
		}
		return;
	}
	lg_abort(g, MORI_SHMEM_ABORT_TEARDOWN, -1, code, msg);
}

/* ---- calls and leaves ---- */

static int do_call(struct client *c, const Mori__Request *req, Mori__Reply *rep)
{
	const Mori__GroupCall *q = req->group_call;
	struct gpe *p = pe_find(c, q->group_id);
	if (!p) {
		reply_error(rep, MORI_ENOENT, "this client has no group %llu", (unsigned long long)q->group_id);
		return 0;
	}
	struct lgroup *g = p->g;
	if (g->state == LG_ABORTED) {
		reply_error(rep, g->abort_code, "%s", g->why);
		return 0;
	}
	if (p->state != PE_MEMBER || p->waiting) {
		reply_error(rep, MORI_EBUSY, "group '%s': PE %d %s", g->name, p->rank,
			    p->waiting ? "already waits for a call" : "has not joined yet");
		return 0;
	}
	Mori__PeerGroup m = MORI__PEER_GROUP__INIT;
	m.kind = GL_CALL;
	m.rank = p->rank;
	m.seq = q->seq;
	m.op = q->op;
	m.size = q->size;
	m.align = q->align;
	m.offset = q->offset;
	m.timeout_ms = q->timeout_ms;
	p->waiting = W_CALL;
	p->wait_req = req->id;
	p->wait_seq = q->seq;
	p->wait_deadline_us = mori_now_us() + (g->timeout_ms + BACKSTOP_MS) * 1000ull;
	send_root(g, &m);
	tick_arm();
	return 1;
}

int group_handle_request(struct morid *d, struct client *c, Mori__Request *req, Mori__Reply *rep,
			 struct rctx *r, int *fds, int nfds)
{
	int fd = -1;
	for (int i = 0; i < nfds; i++) {
		if (i == 0 && req->body_case == MORI__REQUEST__BODY_GROUP_JOIN)
			fd = fds[0];
		else
			close(fds[i]);
	}
	if (!G.on) {
		if (fd >= 0)
			close(fd);
		reply_error(rep, MORI_ECANCELED, "daemon stopping");
		return 0;
	}
	switch (req->body_case) {
	case MORI__REQUEST__BODY_GROUP_JOIN:
		return do_join(c, req, rep, fd);
	case MORI__REQUEST__BODY_GROUP_CALL:
		return do_call(c, req, rep);
	case MORI__REQUEST__BODY_GROUP_LEAVE: {
		struct gpe *p = pe_find(c, req->group_leave->group_id);
		if (!p)
			reply_error(rep, MORI_ENOENT, "this client has no group %llu",
				    (unsigned long long)req->group_leave->group_id);
		else
			pe_gone(p, 0, 1, "its PE left the group");
		return 0;
	}
	default:
		reply_error(rep, MORI_EPROTO, "not a group request");
		return 0;
	}
}

/* ---- deadlines ---- */

static void on_tick(uv_timer_t *t)
{
	uint64_t now = mori_now_us();
	int busy = root_tick(G.d, now);
	list_each(it, &G.groups) {
		struct lgroup *g = list_entry(it, struct lgroup, link);
		int last = 0;
		list_each(pt, &g->pes) {
			struct gpe *p = list_entry(pt, struct gpe, link);
			if (!p->waiting)
				continue;
			uint32_t ab = p->ctrl.page ? __atomic_load_n(&p->ctrl.page->abort, __ATOMIC_ACQUIRE) : 0;
			if (p->waiting == W_CALL && ab != MORI_SHMEM_ABORT_NONE) {
				/* the proxy set it (a node of the group went down): the call ends now, with the
				 * word's reason, not at the deadline with a second one */
				char msg[400];
				int32_t who = p->ctrl.page->abort_pe;
				snprintf(msg, sizeof(msg), "group '%s': aborted (%s, PE %d) while PE %d waited for the root "
					 "daemon %s", g->name, mori_strerror(glink_abort_code(ab)), who, p->rank,
					 g->root[0] ? g->root : "(this one)");
				lg_abort(g, ab, who, glink_abort_code(ab), msg);
				break; /* it answered every waiting PE of g */
			}
			if (now < p->wait_deadline_us) {
				busy = 1;
				continue;
			}
			char msg[400];
			snprintf(msg, sizeof(msg), "group '%s': no answer from the root daemon %s within %u ms", g->name,
				 g->root[0] ? g->root : "(this one)", g->timeout_ms + BACKSTOP_MS);
			if (p->waiting == W_JOIN) {
				last = g->live == 1;
				answer_error(p, MORI_ETIMEDOUT, msg);
				pe_gone(p, 0, 1, "join timed out");
				if (last)
					break;
			} else {
				lg_abort(g, MORI_SHMEM_ABORT_TIMEOUT, -1, MORI_ETIMEDOUT, msg);
			}
		}
	}
	if (!busy)
		uv_timer_stop(t);
}

static void tick_arm(void)
{
	if (G.on && !uv_is_active((uv_handle_t *)&G.tick))
		uv_timer_start(&G.tick, on_tick, GROUP_TICK_MS, GROUP_TICK_MS);
}

/* ---- listings ---- */

/* Root sees every group; another uid its own (every PE of a group is its owner's uid). */
static int lg_listed_for(struct lgroup *g, uid_t uid)
{
	return uid == 0 || uid == g->uid;
}

void group_list(struct morid *d, Mori__ListReply *lr, struct rctx *r, uid_t uid)
{
	if (!G.on)
		return;
	size_t cap = root_count(d);
	list_each(it, &G.groups)
		cap++;
	if (!cap || !(lr->groups = rctx_alloc(r, sizeof(void *) * cap)))
		return;
	root_list(d, lr, r, cap, uid);
	list_each(it, &G.groups) {
		struct lgroup *g = list_entry(it, struct lgroup, link);
		if (!lg_listed_for(g, uid))
			continue; /* another uid's: none of this one's business */
		if (!g->root[0] && g->root_gid && root_has(d, g->root_gid))
			continue; /* the root's entry lists every rank, ours included */
		Mori__GroupInfo *gi = rctx_alloc(r, sizeof(*gi));
		Mori__GroupRankInfo **rs = rctx_alloc(r, sizeof(*rs) * (size_t)(g->live + 1));
		if (!gi || !rs || lr->n_groups >= cap)
			return;
		mori__group_info__init(gi);
		gi->name = g->name;
		gi->uid = (uint32_t)g->uid;
		gi->role = "member";
		gi->root = g->root;
		char st[440];
		snprintf(st, sizeof(st), "%s%s%s", g->state == LG_JOINING ? "joining" : g->state == LG_FORMED ? "formed" : "aborted (",
			 g->state == LG_ABORTED ? g->why : "", g->state == LG_ABORTED ? ")" : "");
		gi->state = rctx_strdup(r, st);
		gi->world_size = g->world;
		gi->joined = (uint32_t)g->live;
		gi->heap_size = g->heap_size;
		gi->heap_kind = g->kind;
		gi->age_us = mori_now_us() - g->created_us;
		list_each(pt, &g->pes) {
			struct gpe *p = list_entry(pt, struct gpe, link);
			Mori__GroupRankInfo *ri = rctx_alloc(r, sizeof(*ri));
			if (!ri || p->state == PE_GONE || gi->n_ranks >= (size_t)g->live)
				continue;
			mori__group_rank_info__init(ri);
			ri->rank = p->rank;
			ri->node = (char *)glink_self(d);
			ri->pid = p->pid;
			ri->state = p->state == PE_JOINING ? "joining" : p->waiting ? "in call" : "member";
			rs[gi->n_ranks++] = ri;
		}
		gi->ranks = rs;
		lr->groups[lr->n_groups++] = gi;
	}
}

/* ---- for the proxy ---- */

void group_set_hooks(const struct group_hooks *h)
{
	if (h)
		G.hooks = *h;
	else
		memset(&G.hooks, 0, sizeof(G.hooks));
}

static struct gpe *member(uint64_t id)
{
	list_each(it, &G.groups) {
		struct lgroup *g = list_entry(it, struct lgroup, link);
		list_each(pt, &g->pes) {
			struct gpe *p = list_entry(pt, struct gpe, link);
			if (p->id == id && p->state == PE_MEMBER)
				return p;
		}
	}
	return NULL;
}

int group_pe(uint64_t pe, int *rank, int *n_pes, struct heap_ctrl **ctrl, struct region **heap)
{
	struct gpe *p = G.on ? member(pe) : NULL;
	if (!p)
		return MORI_ENOENT;
	*rank = p->rank;
	*n_pes = p->g->world;
	*ctrl = &p->ctrl;
	*heap = p->heap;
	return MORI_OK;
}

int group_peer(uint64_t pe, int rank, const char **node, const uint8_t **handle, size_t *len,
	       struct region **heap)
{
	struct gpe *p = G.on ? member(pe) : NULL;
	if (!p)
		return MORI_ENOENT;
	struct lgroup *g = p->g;
	if (rank < 0 || rank >= g->world || !g->members)
		return MORI_EINVAL;
	const struct gmember *e = &g->members[rank];
	*node = glink_is_self(G.d, e->node) ? NULL : e->node;
	*handle = e->heap;
	*len = e->heap_len;
	*heap = NULL;
	if (!*node) {
		struct gpe *q = pe_of_rank(g, rank);
		*heap = q ? q->heap : NULL;
	}
	return MORI_OK;
}

/* ---- life cycle ---- */

int groups_start(struct morid *d)
{
	G.d = d;
	LIST_INIT(&G.groups);
	G.next_id = G.next_pe = 1;
	uv_timer_init(d->loop, &G.tick);
	G.on = 1;
	root_start(d);
	return glink_start(d, on_message, on_failure, holds);
}

void groups_stop(struct morid *d)
{
	if (!G.on)
		return;
	/* the clients went first (session_stop): what is left has no PE */
	glink_stop(d);
	root_stop(d);
	G.on = 0;
	list_each(it, &G.groups)
		lg_free(list_entry(it, struct lgroup, link));
	uv_close((uv_handle_t *)&G.tick, NULL);
}
