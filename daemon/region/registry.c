#include "registry.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu/gpu_stage.h"
#include "invariant.h"
#include "log.h"
#include "mori.pb-c.h"

struct registry {
	struct list regions;
	struct list listeners;    /* struct region_listener */
	uint32_t n;
	uint64_t next_id;
};

static uint32_t region_fds; /* descriptors regions hold (one morid per process) */

uint32_t registry_fds(struct morid *d)
{
	(void)d;
	return region_fds;
}

struct registry *registry_new(void)
{
	struct registry *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	LIST_INIT(&g->regions);
	LIST_INIT(&g->listeners);
	g->next_id = 1;
	return g;
}

static void access_clear(struct region *r)
{
	for (uint32_t i = 0; i < r->nacl_nodes; i++)
		free(r->acl_nodes[i]);
	free(r->acl_nodes);
	free(r->acl_uids);
	r->acl_nodes = NULL;
	r->acl_uids = NULL;
	r->nacl_nodes = r->nacl_uids = 0;
	r->has_access = 0;
}

static void region_free(struct region *r)
{
	access_clear(r);
	if (r->gpu_map_base)
		region_gpu_release(r);
	if (r->map_base)
		munmap(r->map_base, r->map_len);
	if (r->fd >= 0) {
		close(r->fd);
		MORI_REQUIRE(region_fds > 0, "region descriptor count underflow");
		region_fds--;
	}
	for (uint32_t i = 0; i < r->vmm_have; i++) {
		close(r->vmm_fds[i]);
		MORI_REQUIRE(region_fds > 0, "region descriptor count underflow");
		region_fds--;
	}
	free(r->vmm_fds);
	free(r->vmm_off);
	free(r->vmm_len);
	free(r);
}

int region_vmm_init(struct region *r, uint32_t n)
{
	MORI_REQUIRE(!r->vmm_n && n > 0, "region %llu: VMM pieces set up twice", (unsigned long long)r->id);
	r->vmm_fds = calloc(n, sizeof(*r->vmm_fds));
	r->vmm_off = calloc(n, sizeof(*r->vmm_off));
	r->vmm_len = calloc(n, sizeof(*r->vmm_len));
	if (!r->vmm_fds || !r->vmm_off || !r->vmm_len) {
		free(r->vmm_fds);
		free(r->vmm_off);
		free(r->vmm_len);
		r->vmm_fds = NULL;
		r->vmm_off = r->vmm_len = NULL;
		return MORI_ENOMEM;
	}
	r->vmm_n = n;
	r->vmm_have = 0;
	r->vmm_pending = 1;
	return MORI_OK;
}

void region_vmm_add(struct region *r, int fd, uint64_t off, uint64_t len)
{
	MORI_REQUIRE(r->vmm_have < r->vmm_n && fd >= 0, "region %llu: VMM piece %u of %u", (unsigned long long)r->id,
		     r->vmm_have, r->vmm_n);
	r->vmm_fds[r->vmm_have] = fd;
	r->vmm_off[r->vmm_have] = off;
	r->vmm_len[r->vmm_have] = len;
	r->vmm_have++;
	region_fds++;
}

void registry_free(struct registry *g)
{
	if (!g)
		return;
	list_each(it, &g->regions) {
		struct region *r = list_entry(it, struct region, link);
		list_del(&r->link);
		region_free(r);
	}
	free(g);
}

void registry_listen(struct morid *d, struct region_listener *l)
{
	list_add(&d->reg->listeners, &l->link);
}

void registry_unlisten(struct region_listener *l)
{
	list_del(&l->link);
}

uint32_t registry_live(struct morid *d)
{
	return d->reg->n;
}

uint32_t registry_count(struct registry *g, uint64_t *bytes)
{
	uint32_t n = 0;
	uint64_t b = 0;
	list_each(it, &g->regions) {
		struct region *r = list_entry(it, struct region, link);
		if (r->dead)
			continue;
		n++;
		b += r->size;
	}
	if (bytes)
		*bytes = b;
	return n;
}

struct region *region_add(struct morid *d, struct client *owner, uint32_t kind, uint64_t size,
			  int fd, uint64_t fd_offset, uint64_t addr)
{
	struct region *r = calloc(1, sizeof(*r));
	if (!r) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	/* Ids and generations are random (ids below LIST_TAG and REF_TAG, bits 61 and 62, which
	 * name lists and remote refs): neither can be guessed, and the secret is what grants. */
	do {
		uint64_t v;
		if (auth_random(&v, sizeof(v)) != 0 || auth_random(&r->gen, sizeof(r->gen)) != 0 ||
		    auth_random(r->secret, sizeof(r->secret)) != 0) {
			if (fd >= 0)
				close(fd);
			free(r);
			return NULL;
		}
		r->id = v & ((1ull << 61) - 1);
	} while (r->id == 0 || region_find(d, r->id));
	r->gen |= 1u;
	r->owner = owner;
	r->kind = kind;
	r->size = size;
	r->fd = fd;
	if (fd >= 0)
		region_fds++;
	r->fd_offset = fd_offset;
	r->addr = addr;
	r->pid = owner ? owner->pid : 0;
	r->pidfd = owner ? owner->pidfd : -1;
	r->owner_uid = owner ? owner->uid : 0;
	r->gpu_device = -1;
	LIST_INIT(&r->openers);
	list_add(&d->reg->regions, &r->link);
	if (owner) {
		list_add(&owner->regions, &r->owner_link);
		owner->nregions++;
	}
	else
		LIST_INIT(&r->owner_link);
	d->reg->n++;
	count(d, C_REGIONS_TOTAL, 1);
	return r;
}

struct region *region_find(struct morid *d, uint64_t id)
{
	list_each(it, &d->reg->regions) {
		struct region *r = list_entry(it, struct region, link);
		if (r->id == id && !r->dead)
			return r;
	}
	return NULL;
}

struct region *region_next(struct morid *d, struct region *prev)
{
	struct list *p = prev ? prev->link.next : d->reg->regions.next;
	for (; p != &d->reg->regions; p = p->next) {
		struct region *r = list_entry(p, struct region, link);
		if (!r->dead)
			return r;
	}
	return NULL;
}

void region_put(struct region *r)
{
	MORI_REQUIRE(r->inflight > 0, "region %llu: reference count underflow", (unsigned long long)r->id);
	r->inflight--;
	if (r->dead && r->inflight == 0) {
		list_del(&r->link);
		region_free(r);
	}
}

void region_remove(struct morid *d, struct region *r, const char *why)
{
	if (r->dead)
		return;
	mlog_info("memory", "region %llu (%llu bytes, %s) removed: %s", (unsigned long long)r->id,
		  (unsigned long long)r->size, r->name[0] ? r->name : "unnamed", why);
	r->dead = 1;
	if (r->kind == MORI_MEM_VRAM) /* a frame's copy started before must not land after the answer */
		region_gpu_quiesce(r);
	list_each(it, &d->reg->listeners) { /* transports: peers lose remote access now */
		struct region_listener *l = list_entry(it, struct region_listener, link);
		l->removed(l->arg, r);
	}
	r->name[0] = 0;
	if (r->owner) {
		MORI_REQUIRE(r->owner->nregions > 0, "client %llu: region count underflow",
			     (unsigned long long)r->owner->id);
		r->owner->nregions--;
	}
	list_del(&r->owner_link);
	list_each(it, &r->openers) {
		struct open_ref *o = list_entry(it, struct open_ref, region_link);
		struct mori_cqe e = {.type = CQE_REVOKED, .code = MORI_ESTALE, .value = r->id};
		snprintf(e.msg, sizeof(e.msg), "region %llu freed: %.20s", (unsigned long long)r->id, why);
		client_post(o->client, &e);
		list_del(&o->region_link);
		list_del(&o->client_link);
		free(o);
	}
	MORI_REQUIRE(d->reg->n > 0, "registry count underflow");
	d->reg->n--;
	r->inflight++;
	region_put(r);
}

int region_publish(struct morid *d, struct region *r, const char *name, int has_access, const uint32_t *uids,
		   size_t nuids, char *const *nodes, size_t nnodes)
{
	size_t n = strlen(name);
	if (n == 0 || n >= sizeof(r->name))
		return MORI_EINVAL;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x21 || (unsigned char)name[i] > 0x7e)
			return MORI_EINVAL;
	if (nuids > ACCESS_MAX || nnodes > ACCESS_MAX)
		return MORI_EINVAL;
	for (size_t i = 0; i < nnodes; i++)
		if (!nodes[i] || !nodes[i][0] || strlen(nodes[i]) >= 128)
			return MORI_EINVAL;
	struct region *other = region_lookup(d, name);
	if (other && other != r)
		return MORI_EEXIST;
	uint32_t *u = nuids ? malloc(nuids * sizeof(*u)) : NULL;
	char **nd = nnodes ? calloc(nnodes, sizeof(*nd)) : NULL;
	int oom = (nuids && !u) || (nnodes && !nd);
	for (size_t i = 0; i < nnodes && !oom; i++)
		oom = !(nd[i] = strdup(nodes[i]));
	if (oom) {
		for (size_t i = 0; nd && i < nnodes; i++)
			free(nd[i]);
		free(nd);
		free(u);
		return MORI_ENOMEM;
	}
	if (nuids)
		memcpy(u, uids, nuids * sizeof(*u));
	access_clear(r);
	r->has_access = has_access;
	r->acl_uids = u;
	r->nacl_uids = (uint32_t)nuids;
	r->acl_nodes = nd;
	r->nacl_nodes = (uint32_t)nnodes;
	memcpy(r->name, name, n + 1);
	return MORI_OK;
}

int region_grants_uid(const struct region *r, uid_t uid)
{
	if (!r->has_access || (r->owner && r->owner->uid == uid))
		return 1;
	for (uint32_t i = 0; i < r->nacl_uids; i++)
		if (r->acl_uids[i] == uid)
			return 1;
	return 0;
}

int region_grants_node(const struct region *r, const char *node)
{
	if (!r->has_access)
		return 1;
	for (uint32_t i = 0; node && node[0] && i < r->nacl_nodes; i++)
		if (strcmp(r->acl_nodes[i], node) == 0)
			return 1;
	return 0;
}

void region_access_text(const struct region *r, char *buf, size_t len)
{
	size_t n = 0;
	if (!r->has_access) {
		snprintf(buf, len, "%s", r->name[0] ? "all" : "");
		return;
	}
	n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "owner");
	for (uint32_t i = 0; i < r->nacl_uids && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%u", i ? "," : "; uids ", r->acl_uids[i]);
	for (uint32_t i = 0; i < r->nacl_nodes && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? "," : "; nodes ", r->acl_nodes[i]);
}

int region_secret_ok(const struct region *r, const uint8_t *secret, size_t len)
{
	return auth_equal(r->secret, secret, len, sizeof(r->secret));
}

struct region *region_lookup(struct morid *d, const char *name)
{
	list_each(it, &d->reg->regions) {
		struct region *r = list_entry(it, struct region, link);
		if (!r->dead && strcmp(r->name, name) == 0)
			return r;
	}
	return NULL;
}

uint32_t region_openers(struct region *r)
{
	uint32_t n = 0;
	list_each(it, &r->openers)
		n++;
	return n;
}

static void ack_timer_closed(uv_handle_t *h) { free(h); }

/* Send the deferred deregister reply and let the region go. */
static void dereg_finish(struct region *r, const char *why)
{
	if (r->dereg_waiter) {
		Mori__Reply rep = MORI__REPLY__INIT;
		struct rctx rc = {0};
		rep.id = r->dereg_req;
		if (why)
			mlog_warn("memory", "region %llu: %s", (unsigned long long)r->id, why);
		client_reply(r->dereg_waiter, &rep, &rc);
		rctx_free(&rc);
		r->dereg_waiter = NULL;
	}
	if (r->ack_timer) {
		uv_timer_stop(r->ack_timer);
		uv_close((uv_handle_t *)r->ack_timer, ack_timer_closed);
		r->ack_timer = NULL;
	}
	r->acks_pending = 0;
	free(r->ack_from);
	r->ack_from = NULL;
	region_put(r);
}

static void ack_deadline(uv_timer_t *t)
{
	dereg_finish(t->data, "openers did not acknowledge the revocation within 5 s; deregistered anyway");
}

/* Count an acknowledgement only from an opener that owes one: another client cannot hurry a
 * deregistration while a real opener is still copying. */
static void take_ack(struct region *r, uint64_t client_id)
{
	for (uint32_t i = 0; i < r->acks_pending; i++) {
		if (r->ack_from[i] != client_id)
			continue;
		r->ack_from[i] = r->ack_from[--r->acks_pending];
		if (r->acks_pending == 0)
			dereg_finish(r, NULL);
		return;
	}
}

void region_revoke_ack(struct morid *d, struct client *c, uint64_t id)
{
	list_each(it, &d->reg->regions) {
		struct region *r = list_entry(it, struct region, link);
		if (r->id == id && r->dead && r->acks_pending) {
			take_ack(r, c->id);
			return;
		}
	}
}

/* A client that goes away no longer copies: it owes nothing, and waits for nothing. */
void region_forget_waiter(struct morid *d, struct client *c)
{
	list_each(it, &d->reg->regions) {
		struct region *r = list_entry(it, struct region, link);
		if (r->dereg_waiter == c)
			r->dereg_waiter = NULL;
		if (r->acks_pending)
			take_ack(r, c->id); /* may free r: the iteration has already saved the next */
	}
}

int region_reachable_by(struct region *r, struct client *c)
{
	if (r->owner == c)
		return 1;
	list_each(it, &r->openers) {
		if (list_entry(it, struct open_ref, region_link)->client == c)
			return 1;
	}
	return 0;
}

/* Deregister with a deferred reply when peers reach the bytes by cross-memory attach: the owner
 * may free the memory as soon as we answer, so every opener must first confirm it has no copy
 * running. Returns 1 if the reply is deferred. */
int region_deregister(struct morid *d, struct client *c, struct region *r, uint64_t req_id)
{
	uint32_t n = r->fd < 0 && r->kind == MORI_MEM_HOST ? region_openers(r) : 0;
	if (n == 0) {
		region_remove(d, r, "deregistered");
		return 0;
	}
	uv_timer_t *t = malloc(sizeof(*t));
	uint64_t *from = malloc(sizeof(*from) * n);
	if (!t || !from) {
		free(t);
		free(from);
		region_remove(d, r, "deregistered");
		return 0;
	}
	uint32_t k = 0;
	list_each(it, &r->openers)
		from[k++] = list_entry(it, struct open_ref, region_link)->client->id;
	r->inflight++; /* keep it until the acks are in */
	r->acks_pending = n;
	r->ack_from = from;
	r->dereg_waiter = c;
	r->dereg_req = req_id;
	r->ack_timer = t;
	uv_timer_init(d->loop, t);
	t->data = r;
	uv_timer_start(t, ack_deadline, 5000, 0);
	region_remove(d, r, "deregistered");
	return 1;
}

int region_open(struct client *c, struct region *r)
{
	list_each(it, &r->openers) {
		if (list_entry(it, struct open_ref, region_link)->client == c)
			return MORI_OK;
	}
	struct open_ref *o = calloc(1, sizeof(*o));
	if (!o)
		return MORI_ENOMEM;
	o->client = c;
	o->region = r;
	list_add(&r->openers, &o->region_link);
	list_add(&c->opens, &o->client_link);
	return MORI_OK;
}

void region_close(struct client *c, struct region *r)
{
	list_each(it, &r->openers) {
		struct open_ref *o = list_entry(it, struct open_ref, region_link);
		if (o->client != c)
			continue;
		list_del(&o->region_link);
		list_del(&o->client_link);
		free(o);
		return;
	}
}

void client_drop_opens(struct client *c)
{
	list_each(it, &c->opens) {
		struct open_ref *o = list_entry(it, struct open_ref, client_link);
		list_del(&o->region_link);
		list_del(&o->client_link);
		free(o);
	}
}
