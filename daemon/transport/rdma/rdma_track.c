/* Transfer records of the RDMA engine: lookup by id, the end of a transfer (the first error
 * sticks; the callback runs once nothing of it is on a device), and what retiring a send-queue
 * entry means for its transfer. The lowest layer of the engine (rdma_eng_int.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_eng_int.h"

/* ---- lookups ---- */
struct rx *eng_xfind(struct rdma_eng *e, uint32_t id)
{
	for (struct rx *x = e->xh[id % XHASH]; x; x = x->hnext)
		if (x->id == id)
			return x;
	return NULL;
}

static void xhash_del(struct rdma_eng *e, struct rx *x)
{
	struct rx **pp = &e->xh[x->id % XHASH];
	while (*pp && *pp != x)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = x->hnext;
}

/* ---- transfer end ---- */
void eng_xfail(struct rx *x, int code, const char *fmt, ...)
{
	if (x->failed)
		return; /* the first error sticks */
	x->failed = 1;
	x->code = code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->msg, sizeof(x->msg), fmt, ap);
	va_end(ap);
	x->nretry = 0;
	x->plan_done = 1;
	if (x->ns != N_NONE && x->ns != N_POSTED)
		x->ns = N_DONE;
}

/* Is x finished (nothing on the device, nothing left to post)? Then queue its callback. */
void eng_xcheck(struct rx *x)
{
	if (x->on_done || x->out)
		return;
	if (!x->failed && (!x->plan_done || x->nretry || (x->ns != N_NONE && x->ns != N_DONE)))
		return;
	if (x->on_pend) {
		rl_del(&x->pend);
		x->on_pend = 0;
	}
	if (x->notif_id)
		rl_del(&x->nlink); /* it sends nothing more: the peer may forget its id */
	x->on_done = 1;
	rl_add(&x->c->e->done, &x->dlink);
}

void eng_xpend(struct rx *x)
{
	if (!x->on_pend && !x->on_done) {
		rl_add(&x->c->pending, &x->pend);
		x->on_pend = 1;
	}
}

/* Run due callbacks; they may start or cancel transfers. */
void eng_run_done(struct rdma_eng *e)
{
	if (e->in_done)
		return;
	e->in_done = 1;
	while (!rl_empty(&e->done)) {
		struct rx *x = rl_entry(e->done.next, struct rx, dlink);
		rl_del(&x->dlink);
		rl_del(&x->all);
		xhash_del(e, x);
		e->nxfers--;
		int code = x->failed ? x->code : MORI_OK;
		if (code) {
			e->st.xfer_errors++;
			if (code == MORI_ETIMEDOUT)
				e->st.timeouts++;
		} else {
			e->st.bytes += x->total;
		}
		e->st.xfers++;
		if (x->a.done)
			x->a.done(x->a.arg, x->id, code, code ? x->msg : "");
		free(x->retry);
		free(x);
	}
	e->in_done = 0;
}

/* ---- retiring send-queue entries ---- */
/* Retire fifo entry k of q without success: requeue its work, or fail its transfer. */
void eng_retire_lost(struct rdma_eng *e, struct rdma_qp *q, struct rdma_fifo_ent *f, int code,
		     const char *msg)
{
	struct rx *x = eng_xfind(e, f->xfer);
	if (!x || x->c == NULL)
		return;
	x->out--;
	if (f->kind == WRK_DATA)
		x->out_data--;
	if (!x->failed) {
		if (x->reset_mark != q->reset_id) { /* one count per QP reset, not per request */
			x->reset_mark = q->reset_id;
			x->requeues++;
		}
		snprintf(x->last_qp_err, sizeof(x->last_qp_err), "%s", msg);
		if (x->requeues > RDMA_MAX_REQUEUES) {
			eng_xfail(x, code, "%s (after %d QP resets)", msg, x->requeues - 1);
		} else if (f->kind == WRK_DATA) {
			if (x->nretry == x->capretry) {
				uint32_t nc = x->capretry ? 2 * x->capretry : 8;
				struct chunk *r = realloc(x->retry, nc * sizeof(*r));
				if (!r) {
					eng_xfail(x, MORI_ENOMEM, "out of memory requeueing after: %s", msg);
					goto out;
				}
				x->retry = r;
				x->capretry = nc;
			}
			x->retry[x->nretry++] = (struct chunk){f->loff, f->roff, f->len};
			x->single_qp = -2;
			e->st.requeued++;
			eng_xpend(x);
		} else if (f->kind == WRK_NOTIF) {
			/* Its data may be in the retry list (requeued just before it): the
			 * notification waits until every data request has completed again. */
			x->ns = N_WAIT;
			x->single_qp = -2;
			e->st.requeued++;
			eng_xpend(x);
		}
	}
out:
	eng_xcheck(x);
}

void eng_retire_ok(struct rdma_eng *e, struct rdma_fifo_ent *f)
{
	struct rx *x = eng_xfind(e, f->xfer);
	if (!x)
		return;
	x->out--;
	if (f->kind == WRK_DATA) {
		x->out_data--;
		x->moved += f->len;
		if (x->out_data == 0 && x->ns == N_WAIT && x->plan_done && !x->nretry && !x->failed) {
			x->ns = N_READY;
			eng_xpend(x);
		}
	} else if (f->kind == WRK_NOTIF) {
		x->ns = N_DONE;
	}
	eng_xcheck(x);
}
