/* The KV store's replies that a deferred get completes too (kv_store.c's reads land here): the
 * slot of a value with its slab's descriptor when the client lacks it, and the deferred send.
 * Below kv_store.c and kv_req.c, which both call it. */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_int.h"

void kv_first_error(Mori__Reply *rep, struct rctx *r, const char *msg)
{
	if (!rep->message || !rep->message[0])
		rep->message = rctx_strdup(r, msg);
}

int kv_slab_send(struct kv_client *kc, const struct kv_slab *s)
{
	if (s->dedicated)
		return 1; /* the client maps it for one copy and lets it go */
	if (s->index >= kc->nsent) {
		uint32_t n = s->index + 16;
		uint32_t *ns = realloc(kc->sent, sizeof(*ns) * n);
		if (!ns)
			return MORI_ENOMEM;
		memset(ns + kc->nsent, 0, sizeof(*ns) * (n - kc->nsent));
		kc->sent = ns;
		kc->nsent = n;
	}
	if (kc->sent[s->index] == s->id)
		return 0;
	kc->sent[s->index] = s->id;
	return 1;
}

/* The slot of e for the reply, with its slab's fd when the client does not have it. MORI_EAGAIN
 * when the reply carries as many fds as one message can (the client asks again). */
int kv_fill_slot(struct kv_store *st, struct kv_client *kc, Mori__Reply *rep, struct rctx *r, Mori__KvSlot *sl,
		 struct kv_entry *e)
{
	Mori__KvReply *kr = rep->kv;
	struct kv_slab *s = kv_dram_slab(st->dram, e->u.ext.slab);
	int send = kv_slab_send(kc, s);
	if (send < 0)
		return MORI_ENOMEM;
	if (send) {
		if (r->nfds >= WIRE_MAX_FDS) {
			if (!s->dedicated)
				kc->sent[s->index] = 0;
			return MORI_EAGAIN;
		}
		Mori__KvSlab *ks = rctx_alloc(r, sizeof(*ks));
		if (!ks || rctx_dup_fd(r, rep, s->fd) != 0) {
			if (!s->dedicated)
				kc->sent[s->index] = 0;
			rep->code = 0; /* rctx_dup_fd's error is this item's */
			return MORI_ESYS;
		}
		mori__kv_slab__init(ks);
		ks->id = s->id;
		ks->bytes = s->bytes;
		ks->dedicated = s->dedicated;
		kr->slabs[kr->n_slabs++] = ks;
	}
	sl->slab = s->id;
	sl->offset = kv_ext_offset(&e->u.ext);
	sl->len = e->size;
	sl->tier = KV_TIER_DRAM;
	return MORI_OK;
}

void kv_pget_done(struct kv_store *st, struct kv_pget *g)
{
	if (g->kc) {
		list_del(&g->link);
		for (size_t i = 0; i < g->rep.kv->n_slots; i++)
			if (g->rep.kv->slots[i]->status != MORI_OK && g->rep.kv->slots[i]->status != MORI_ENOENT)
				kv_first_error(&g->rep, &g->r, mori_strerror(g->rep.kv->slots[i]->status));
		client_reply(g->kc->c, &g->rep, &g->r);
	}
	rctx_free(&g->r);
	free(g);
}
