/* Cross-node transfer records (peer_int.h): finding and ending them (exactly one CQE per
 * accepted submission), deadlines, choosing the transport (xfer_route) and handing a transfer
 * from one transport to the next, the target-side notification.
 * Submission (validation) is in peer_client.c; the bytes move in the transports. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "invariant.h"
#include "log.h"
#include "core/mstats.h"
#include "peer_int.h"

struct xfer *xfer_find(struct peers *P, uint64_t id)
{
	list_each(it, htab_bucket(&P->xfers, id)) {
		struct xfer *x = list_entry(it, struct xfer, hlink);
		if (x->id == id)
			return x;
	}
	return NULL;
}

void cqe_msg(struct mori_cqe *e, const char *msg)
{
	size_t n = strlen(msg);
	if (n < sizeof(e->msg)) {
		memcpy(e->msg, msg, n + 1);
		return;
	}
	/* too long: cut at a word's end and say so, rather than mid-word */
	size_t room = sizeof(e->msg) - 4;
	n = room;
	while (n > room / 2 && msg[n] != ' ')
		n--;
	if (msg[n] != ' ')
		n = room;
	while (n > 0 && (msg[n - 1] == ' ' || msg[n - 1] == ':' || msg[n - 1] == ','))
		n--;
	memcpy(e->msg, msg, n);
	memcpy(e->msg + n, "...", 4);
}

/* "peer A: ... A ..." names A twice: drop the prefix, so the room goes to the cause */
void msg_drop_repeated_peer(char *msg, const char *addr)
{
	size_t pl = strlen(addr);
	if (pl && !strncmp(msg, "peer ", 5) && !strncmp(msg + 5, addr, pl) && !strncmp(msg + 5 + pl, ": ", 2) &&
	    strstr(msg + 7 + pl, addr))
		memmove(msg, msg + 7 + pl, strlen(msg + 7 + pl) + 1);
}

void xfer_complete(struct xfer *x, int code, const char *fmt, ...)
{
	struct peers *P = x->p->P;
	struct morid *d = P->d;
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	msg_drop_repeated_peer(msg, x->p->addr);
	if (x->t) {
		const struct transport *t = x->t;
		x->t = NULL; /* cancel must not find it running */
		t->cancel(x, code);
	}
	if (code == 0 && x->want_notif && x->notif_stage == 0) {
		/* The data is done: the notification goes next, in its turn (xnotif.c), and x ends
		 * when the target has it. */
		x->notif_stage = 1;
		x->done = x->total;
		P->notif_ready(x);
		return;
	}
	if (x->want_notif && P->notif_unlink)
		P->notif_unlink(x);
	if (x->on_done)
		x->on_done(x->done_arg, code, code ? msg : "");
	if (x->c) {
		struct mori_cqe e = {.type = CQE_XFER_DONE, .code = code, .user_data = x->user_data};
		cqe_msg(&e, code ? msg : "");
		client_post(x->c, &e);
	}
	mstats_xfer(x->c, x->read, x->total, mori_now_us() - x->start_us, code);
	if (code) {
		count(d, C_XFER_ERRORS, 1);
		x->p->errors++;
		mlog_info("peer", "transfer %llu of client %llu (%s %llu bytes, %s): %s: %s",
			  (unsigned long long)x->user_data, (unsigned long long)x->client_id,
			  x->read ? "read" : "write", (unsigned long long)x->total, x->p->addr,
			  mori_strerror(code), msg);
	}
	htab_del(&P->xfers, &x->hlink);
	htab_del(&P->byuser, &x->ulink);
	list_del(&x->plink);
	MORI_REQUIRE(x->p->nxfers > 0, "peer %s: transfer count underflow", x->p->addr);
	x->p->nxfers--;
	region_put(x->local);
	free(x->descs);
	free(x);
}

/* The one place a transport is chosen for a transfer: the transports in order of preference,
 * each asked whether it takes x (NCCL's canConnect loop). The transport option leaves all of
 * them (auto) or the one it names; that one alone then carries x or x fails there, saying why. */
int xfer_route(struct xfer *x, const struct transport *after)
{
	struct peers *P = x->p->P;
	int i = 0;
	if (after) {
		while (i < P->npref && P->pref[i] != after)
			i++;
		i++;
	}
	for (; i < P->npref; i++) {
		const struct transport *t = P->pref[i];
		if (peers_mode(P, t) == TM_OFF)
			continue;
		if (x->sig && !t->signals) /* only one that applies the signal after the data */
			continue;
		if (t->can_take && !t->can_take(x->p, x->local))
			continue;
		if (t->take(x))
			return 1;
	}
	return 0;
}

void xfer_fallback(struct xfer *x, const struct transport *t, const char *why)
{
	MORI_REQUIRE(!x->t, "transfer %llu handed back while still running", (unsigned long long)x->id);
	mlog_debug("peer", "transfer %llu to %s handed on by %s: %s", (unsigned long long)x->user_data, x->p->addr,
		   t->name, why);
	if (!xfer_route(x, t))
		xfer_complete(x, MORI_ENOMEM, "no transport could take it: %s", why);
}

void xfers_expire(struct peers *P, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	list_each(it, &P->peers) {
		struct peer *p = list_entry(it, struct peer, link);
		list_each(xt, &p->xfers) {
			struct xfer *x = list_entry(xt, struct xfer, plink);
			if (x->deadline_us <= now) {
				const char *st = p->state == PS_UP ? "" : p->state == PS_DOWN ? " (down)" : " (connecting)";
				const char *why = x->stalled[0] ? x->stalled : p->state != PS_UP ? p->why : "";
				mlog_info("peer", "transfer %llu: deadline of %u ms expired waiting for %s%s%s%s",
					  (unsigned long long)x->user_data, x->timeout_ms, p->addr, st,
					  p->why[0] ? ": " : "", p->why);
				xfer_complete(x, MORI_ETIMEDOUT, "timed out after %ums waiting for peer %s%s%s%s", x->timeout_ms,
					      p->addr, x->notif_stage ? " (its notification)" : "", why[0] ? ": " : "", why);
			} else if (x->deadline_us < next) {
				next = x->deadline_us;
			}
		}
	}
	P->next_deadline_us = next;
}

int xfer_notify_target(struct morid *d, struct region *g, uint64_t tag)
{
	if (!g || g->dead || !g->owner)
		return MORI_ESTALE;
	struct mori_cqe n = {.type = CQE_NOTIF, .code = 0, .user_data = tag, .value = g->id};
	int rc = client_post_notif(g->owner, &n, 0);
	if (rc == MORI_OK)
		count(d, C_NOTIFS, 1);
	return rc;
}
