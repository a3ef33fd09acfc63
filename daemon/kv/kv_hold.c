/* Below the KV store's entries (kv_int.h): the uids' records, an entry's memory, and the holds of
 * clients: a put's reservation or a get's lease, named by an id that carries its slot in the
 * client's table, and their expiry after kv_lease_max_ms. */
#include <stdlib.h>
#include <string.h>

#include "invariant.h"
#include "kv/kv_int.h"
#include "log.h"

struct kv_uid *kv_uid_get(struct kv_store *st, uid_t uid)
{
	for (uint32_t i = 0; i < st->nuids; i++)
		if (st->uids[i].uid == uid)
			return &st->uids[i];
	struct kv_uid *nu = realloc(st->uids, sizeof(*nu) * (st->nuids + 1));
	MORI_REQUIRE(nu, "out of memory for a uid's record"); /* tens of bytes, once per uid */
	st->uids = nu;
	memset(&nu[st->nuids], 0, sizeof(*nu));
	nu[st->nuids].uid = uid;
	return &nu[st->nuids++];
}

void kv_entry_free(struct kv_store *st, struct kv_entry *e)
{
	struct kv_uid *u = kv_uid_get(st, e->uid);
	if (e->tier == KV_TIER_DRAM)
		kv_dram_release(st->dram, &e->u.ext);
	if (e->flags & KV_F_SPILLING)
		st->spilling -= kv_ext_bytes(&e->u.ext);
	MORI_REQUIRE(u->used >= e->size, "uid usage underflow");
	u->used -= e->size;
	if (e->state == KV_ZOMBIE)
		st->zombies--;
	st->entry_bytes -= sizeof(*e) + e->key_len;
	free(e);
}

static void timer_arm(struct kv_store *st);

int kv_hold_add(struct kv_store *st, struct kv_client *kc, int kind, struct kv_entry *e, uint64_t *id)
{
	if (kc->live >= KV_HOLDS_MAX)
		return MORI_EAGAIN;
	uint32_t idx;
	if (kc->nfree) {
		idx = kc->free_idx[--kc->nfree];
	} else {
		if (kc->nholds == kc->cap_holds) {
			uint32_t ncap = kc->cap_holds ? 2 * kc->cap_holds : 64;
			struct kv_hold **nh = realloc(kc->holds, sizeof(*nh) * ncap);
			if (!nh)
				return MORI_ENOMEM;
			kc->holds = nh;
			uint32_t *nf = realloc(kc->free_idx, sizeof(*nf) * ncap);
			if (!nf)
				return MORI_ENOMEM;
			kc->free_idx = nf;
			kc->cap_holds = ncap;
		}
		idx = kc->nholds++;
	}
	struct kv_hold *h = calloc(1, sizeof(*h));
	if (!h) {
		kc->free_idx[kc->nfree++] = idx;
		return MORI_ENOMEM;
	}
	h->id = (++st->hold_seq << HOLD_IDX_BITS) | idx;
	h->e = e;
	h->kc = kc;
	h->kind = (uint8_t)kind;
	h->deadline_ms = uv_now(st->d->loop) + (uint64_t)st->d->cfg.kv_lease_max_ms;
	list_add(&st->expiry, &h->link);
	kc->holds[idx] = h;
	kc->live++;
	if (kind == KV_HOLD_LEASE)
		st->leases++;
	else
		st->reservations++;
	*id = h->id;
	timer_arm(st);
	return MORI_OK;
}

/* kc's hold named id, of kind; NULL for an id that is not one of kc's (forged, another client's,
 * already ended). */
struct kv_hold *kv_hold_find(struct kv_client *kc, uint64_t id, int kind)
{
	uint32_t idx = (uint32_t)(id & ((1u << HOLD_IDX_BITS) - 1));
	if (idx >= kc->nholds || !kc->holds[idx] || kc->holds[idx]->id != id || kc->holds[idx]->kind != kind)
		return NULL;
	return kc->holds[idx];
}

/* What the hold kept ends: a reservation's slot is freed, a lease's version let go. */
static void hold_let_go(struct kv_store *st, struct kv_hold *h)
{
	struct kv_entry *e = h->e;
	if (!e)
		return;
	h->e = NULL;
	list_del(&h->link);
	if (h->kind == KV_HOLD_LEASE) {
		st->leases--;
		MORI_REQUIRE(e->refs > 0, "lease on an entry without references");
		if (--e->refs == 0 && e->state == KV_ZOMBIE)
			kv_entry_free(st, e);
	} else {
		st->reservations--;
		kv_entry_free(st, e);
	}
}

void kv_hold_drop(struct kv_store *st, struct kv_hold *h)
{
	struct kv_client *kc = h->kc;
	hold_let_go(st, h);
	uint32_t idx = (uint32_t)(h->id & ((1u << HOLD_IDX_BITS) - 1));
	kc->holds[idx] = NULL;
	kc->free_idx[kc->nfree++] = idx;
	kc->live--;
	free(h);
}

/* Holds past their deadline end: leases let their version go (a release then says it expired),
 * reservations free their slot (a commit then fails). */
static void on_expiry(uv_timer_t *t)
{
	struct kv_store *st = t->data;
	uint64_t now = uv_now(st->d->loop);
	st->timer_at = 0;
	while (st->expiry.next != &st->expiry) {
		struct kv_hold *h = list_entry(st->expiry.next, struct kv_hold, link);
		if (h->deadline_ms > now)
			break;
		mlog_info("kv", "client %llu: %s %llx expired after kv_lease_max_ms", (unsigned long long)h->kc->c->id,
			  h->kind == KV_HOLD_LEASE ? "lease" : "reservation", (unsigned long long)h->id);
		hold_let_go(st, h);
		h->expired = 1;
		st->expired++;
	}
	timer_arm(st);
}

static void timer_arm(struct kv_store *st)
{
	if (st->expiry.next == &st->expiry)
		return;
	struct kv_hold *h = list_entry(st->expiry.next, struct kv_hold, link);
	if (st->timer_at && st->timer_at <= h->deadline_ms)
		return;
	uint64_t now = uv_now(st->d->loop);
	st->timer_at = h->deadline_ms;
	uv_timer_start(&st->timer, on_expiry, h->deadline_ms > now ? h->deadline_ms - now : 0, 0);
}

/* ---- clients ---- */

struct kv_client *kv_client_of(struct kv_store *st, struct client *c)
{
	if (c->kv)
		return c->kv;
	struct kv_client *kc = calloc(1, sizeof(*kc));
	if (!kc)
		return NULL;
	kc->c = c;
	LIST_INIT(&kc->pgets);
	c->kv = kc;
	return kc;
}

void kv_client_reset(struct kv_store *st, struct kv_client *kc)
{
	list_each(it, &kc->pgets) { /* their reads land later, for nobody */
		struct kv_pget *g = list_entry(it, struct kv_pget, link);
		g->kc = NULL;
		list_del(&g->link);
	}
	for (uint32_t i = 0; i < kc->nholds; i++)
		if (kc->holds[i])
			kv_hold_drop(st, kc->holds[i]);
	free(kc->holds);
	free(kc->free_idx);
	free(kc->sent);
	kc->holds = NULL;
	kc->free_idx = NULL;
	kc->sent = NULL;
	kc->nholds = kc->cap_holds = kc->nfree = kc->live = kc->nsent = 0;
}

