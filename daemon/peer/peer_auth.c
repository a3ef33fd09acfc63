/* Authentication of the peer control link (the exchange is in auth.h). Requests from
 * other daemons arrive on the listener (core/sp_rep.h), each on the pipe (TCP connection) of its
 * sender's req0 socket: a pipe is authenticated once its dialer answered our challenge, and only
 * requests on such a pipe are served. The dialer's half (peer.c) re-authenticates whenever a
 * request is refused for want of it (nng redialled on a new connection).
 *
 * Two small tables, least recently used out: challenges in progress (which an unauthenticated
 * sender can fill, but only with its own) and authenticated pipes (only a key holder enters). */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "peer_int.h"

static struct pauth *slot(struct pauth *t, int n, uint32_t pipe, int take, uint64_t now)
{
	struct pauth *lru = &t[0];
	for (int i = 0; i < n; i++) {
		if (t[i].pipe == pipe && t[i].used)
			return &t[i];
		if (t[i].used < lru->used)
			lru = &t[i];
	}
	if (!take)
		return NULL;
	memset(lru, 0, sizeof(*lru));
	lru->pipe = pipe;
	lru->used = now;
	return lru;
}

int peer_auth_start(struct peers *P)
{
	struct morid *d = P->d;
	char err[400];
	if (auth_init() != 0) {
		mlog_err("peer", "libsodium failed to initialise");
		return -1;
	}
	if (!(P->pauth = calloc(1, sizeof(*P->pauth))))
		return -1;
	if (!d->cfg.cluster_key_file[0]) {
		if (d->cfg.listen[0])
			mlog_warn("peer", "PEERS ARE NOT AUTHENTICATED: no cluster_key_file is configured, so anyone who "
					  "reaches %s or its data port can use this node's published memory (make a key "
					  "with moractl keygen)", d->cfg.listen);
		return 0;
	}
	if (auth_load_key(d->cfg.cluster_key_file, &P->key, err, sizeof(err)) != 0) {
		mlog_err("peer", "%s", err);
		return -1;
	}
	mlog_notice("peer", "peers authenticate with the cluster key in %s (HMAC-SHA256 challenge-response)",
		    d->cfg.cluster_key_file);
	return 0;
}

void peer_auth_stop(struct peers *P)
{
	free(P->pauth);
	P->pauth = NULL;
	memset(&P->key, 0, sizeof(P->key));
}

const char *peer_auth_describe(struct peers *P)
{
	if (P->key.on)
		return "cluster key (HMAC-SHA256 challenge-response on the control link and every data stream)";
	if (!P->d->cfg.listen[0])
		return "no peer listener";
	return "NONE: peers are not authenticated (no cluster_key_file; make one with moractl keygen)";
}

static void refuse(struct peers *P, uint32_t pipe, Mori__Reply *rep, struct rctx *r, const char *why)
{
	Mori__PeerAuthReply *ar = rctx_alloc(r, sizeof(*ar));
	count(P->d, C_PEER_AUTH_REFUSED, 1);
	/* one line per 5 minutes: a peer with another key retries for as long as it runs */
	mlog_every(300, MLOG_WARN, "peer", "refused a request from an unauthenticated peer (pipe %u): %s", pipe, why);
	reply_error(rep, MORI_EPERM, "peer not authenticated at %s: %s", P->self, why);
	if (ar) {
		mori__peer_auth_reply__init(ar);
		ar->required = 1;
		rep->body_case = MORI__REPLY__BODY_PEER_AUTH;
		rep->peer_auth = ar;
	}
}

/* The listener's half of the exchange. */
static void serve_auth(struct peers *P, uint32_t pipe, const Mori__PeerAuth *pa, Mori__Reply *rep, struct rctx *r,
		       const char **node)
{
	struct pauth_table *t = P->pauth;
	uint64_t now = ++t->clock;
	if (pa->step == 1) {
		if (pa->nonce.len != AUTH_NONCE_BYTES || !pa->node || strlen(pa->node) >= sizeof(t->pending[0].node)) {
			refuse(P, pipe, rep, r, "malformed challenge");
			return;
		}
		struct pauth *e = slot(t->pending, PAUTH_PENDING, pipe, 1, now);
		Mori__PeerAuthReply *ar = rctx_alloc(r, sizeof(*ar));
		uint8_t *ns = rctx_alloc(r, AUTH_NONCE_BYTES), *mac = rctx_alloc(r, AUTH_MAC_BYTES);
		if (!ar || !ns || !mac) {
			reply_error(rep, MORI_ENOMEM, "out of memory");
			return;
		}
		e->used = now;
		memcpy(e->nc, pa->nonce.data, AUTH_NONCE_BYTES);
		auth_nonce(e->ns);
		snprintf(e->node, sizeof(e->node), "%s", pa->node);
		memcpy(ns, e->ns, AUTH_NONCE_BYTES);
		auth_mac(&P->key, AUTH_CTL_SERVER, e->nc, e->ns, mac);
		mori__peer_auth_reply__init(ar);
		ar->nonce.data = ns;
		ar->nonce.len = AUTH_NONCE_BYTES;
		ar->mac.data = mac;
		ar->mac.len = AUTH_MAC_BYTES;
		ar->node = P->self;
		rep->body_case = MORI__REPLY__BODY_PEER_AUTH;
		rep->peer_auth = ar;
		return;
	}
	struct pauth *e = pa->step == 2 ? slot(t->pending, PAUTH_PENDING, pipe, 0, now) : NULL;
	if (!e || !auth_check(&P->key, AUTH_CTL_CLIENT, e->ns, e->nc, pa->mac.data, pa->mac.len)) {
		if (e)
			memset(e, 0, sizeof(*e));
		/* an empty answer: the dialler found our proof wrong (peer.c says so, to be counted here) */
		refuse(P, pipe, rep, r,
		       !e ? "no challenge"
		       : !pa->mac.len ? "it found our proof of the cluster key wrong (another cluster key?)"
				      : "wrong answer to the challenge (another cluster key?)");
		return;
	}
	struct pauth *a = slot(t->authed, PAUTH_AUTHED, pipe, 1, now);
	*a = *e;
	a->used = now;
	memset(e, 0, sizeof(*e));
	*node = a->node;
	mlog_info("peer", "peer %s authenticated (pipe %u)", a->node, pipe);
}

void peer_auth_forget(struct peers *P, uint32_t pipe)
{
	struct pauth_table *t = P->pauth;
	if (!t)
		return;
	struct pauth *e = slot(t->pending, PAUTH_PENDING, pipe, 0, 0);
	if (e)
		memset(e, 0, sizeof(*e));
	if ((e = slot(t->authed, PAUTH_AUTHED, pipe, 0, 0)))
		memset(e, 0, sizeof(*e));
}

int peer_auth_gate(struct peers *P, uint32_t pipe, const Mori__Request *req, Mori__Reply *rep, struct rctx *r,
		   const char **node)
{
	*node = NULL;
	if (!P->key.on) {
		if (req->body_case == MORI__REQUEST__BODY_PEER_AUTH) {
			/* a peer with a key: refused here as the dialler refuses us, and counted on both sides */
			count(P->d, C_PEER_AUTH_REFUSED, 1);
			const char *who = req->peer_auth && req->peer_auth->node ? req->peer_auth->node : "?";
			mlog_ratelimited(MLOG_WARN, "peer", "refused to authenticate peer %s (pipe %u): no cluster key here",
					 who, pipe);
			reply_error(rep, MORI_ENOTSUP, "%s has no cluster key: its peers are not authenticated", P->self);
			return 0;
		}
		return 1;
	}
	if (req->body_case == MORI__REQUEST__BODY_PEER_AUTH) {
		serve_auth(P, pipe, req->peer_auth, rep, r, node);
		return 0;
	}
	struct pauth *a = slot(P->pauth->authed, PAUTH_AUTHED, pipe, 0, 0);
	if (!a) {
		refuse(P, pipe, rep, r, "authenticate first");
		return 0;
	}
	a->used = ++P->pauth->clock;
	*node = a->node;
	return 1;
}

/* ---- the dialer's half (peer.c sends them) ---- */

void peer_auth_step1(struct peers *P, Mori__PeerAuth *pa, uint8_t nc[AUTH_NONCE_BYTES])
{
	auth_nonce(nc);
	pa->step = 1;
	pa->nonce.data = nc;
	pa->nonce.len = AUTH_NONCE_BYTES;
	pa->node = P->self;
}

int peer_auth_step2(struct peers *P, const uint8_t nc[AUTH_NONCE_BYTES], const Mori__Reply *rep, Mori__PeerAuth *pa,
		    uint8_t mac[AUTH_MAC_BYTES], char *why, size_t len)
{
	const Mori__PeerAuthReply *ar = rep && rep->body_case == MORI__REPLY__BODY_PEER_AUTH ? rep->peer_auth : NULL;
	pa->step = 2;
	pa->node = P->self;
	if (!ar || ar->nonce.len != AUTH_NONCE_BYTES ||
	    !auth_check(&P->key, AUTH_CTL_SERVER, nc, ar->nonce.data, ar->mac.data, ar->mac.len)) {
		snprintf(why, len, "it did not prove the cluster key (another key?)");
		pa->mac.len = 0; /* no proof of ours to a listener that did not prove the key */
		return -1;
	}
	auth_mac(&P->key, AUTH_CTL_CLIENT, ar->nonce.data, nc, mac);
	pa->mac.data = mac;
	pa->mac.len = AUTH_MAC_BYTES;
	return 0;
}
