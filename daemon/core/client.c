/* The client table and what the layers below the session send a client: completions on its
 * ring (with a backlog when the CQ is full) and deferred replies on its session socket. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "morid.h"

struct client *client_new(struct morid *d, pid_t pid, uid_t uid, const char *name)
{
	struct client *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->d = d;
	c->id = d->next_client_id++;
	c->pid = pid;
	c->uid = uid;
	snprintf(c->name, sizeof(c->name), "%s", name ? name : "");
	for (char *q = c->name; *q; q++)
		if ((unsigned char)*q < 0x20 || *q == 0x7f)
			*q = '?'; /* names go into logs and moractl's table: no control characters */
	c->created_us = mori_now_us();
	c->ring_fd = c->sq_efd = c->cq_efd = c->sock = c->pidfd = -1;
	LIST_INIT(&c->regions);
	LIST_INIT(&c->opens);
	LIST_INIT(&c->lists);
	list_add(&d->clients, &c->link);
	d->nclients++;
	count(d, C_CLIENTS_TOTAL, 1);
	return c;
}

struct client *client_find(struct morid *d, uint64_t id)
{
	list_each(it, &d->clients) {
		struct client *c = list_entry(it, struct client, link);
		if (c->id == id && !c->dying)
			return c;
	}
	return NULL;
}

void client_flush_backlog(struct client *c)
{
	size_t i = 0;
	while (i < c->backlog_n && ring_push(c->cqh, c->cqe, c->lay.cq_entries, sizeof(c->cq_backlog[i]), &c->cq_backlog[i]) == 0)
		i++;
	if (i) {
		memmove(c->cq_backlog, c->cq_backlog + i, (c->backlog_n - i) * sizeof(*c->cq_backlog));
		c->backlog_n -= i;
	}
	atomic_store_explicit(&c->cqh->overflow, c->backlog_n ? 1 : 0, memory_order_release);
	if (i && ring_needs_wakeup(c->cqh)) {
		uint64_t one = 1; /* the refilled entries would otherwise wait for the next post */
		if (write(c->cq_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			mlog_warn("client", "client %llu: doorbell: %s", (unsigned long long)c->id, strerror(errno));
	}
}

void client_post(struct client *c, const struct mori_cqe *e)
{
	if (c->dying || !c->ring)
		return;
	if (c->backlog_n)
		client_flush_backlog(c);
	if (c->backlog_n || ring_push(c->cqh, c->cqe, c->lay.cq_entries, sizeof(*e), e) != 0) {
		if (c->backlog_n >= (size_t)c->d->cfg.client_max_backlog) {
			/* it stopped taking completions: holding them all would let it exhaust morid */
			c->d->client_kill(c, "completion queue full and backlog at client_max_backlog");
			return;
		}
		if (c->backlog_n == c->backlog_cap) {
			size_t ncap = c->backlog_cap ? 2 * c->backlog_cap : 64;
			void *p = realloc(c->cq_backlog, ncap * sizeof(*e));
			if (!p) {
				c->d->client_kill(c, "out of memory for its completion backlog");
				return;
			}
			c->cq_backlog = p;
			c->backlog_cap = ncap;
		}
		c->cq_backlog[c->backlog_n++] = *e;
		atomic_store_explicit(&c->cqh->overflow, 1, memory_order_release);
		count(c->d, C_CQ_OVERFLOWS, 1);
	}
	if (ring_needs_wakeup(c->cqh)) {
		uint64_t one = 1;
		if (write(c->cq_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			mlog_warn("client", "client %llu: doorbell: %s", (unsigned long long)c->id, strerror(errno));
	}
}

int client_post_notif(struct client *c, const struct mori_cqe *e, pid_t sender_pid)
{
	if (c->dying || !c->ring)
		return MORI_ECONN;
	if (c->backlog_n)
		client_flush_backlog(c);
	/* The other half of the backlog stays for the completions c caused itself: notifications
	 * alone never reach client_max_backlog, the detach limit. */
	if (c->backlog_n >= (size_t)c->d->cfg.client_max_backlog / 2) {
		c->notifs_dropped++;
		count(c->d, C_NOTIFS_DROPPED, 1);
		if ((c->notifs_dropped & (c->notifs_dropped - 1)) == 0) /* 1, 2, 4, ...: bounded log */
			mlog_warn("client", "client %llu (pid %d, %s): %llu notification%s dropped: its completion queue "
				  "is full and %zu entries wait (half of client_max_backlog); the last from %s%d",
				  (unsigned long long)c->id, c->pid, c->name, (unsigned long long)c->notifs_dropped,
				  c->notifs_dropped == 1 ? "" : "s", c->backlog_n, sender_pid ? "pid " : "another node",
				  sender_pid ? sender_pid : 0);
		return MORI_EAGAIN;
	}
	client_post(c, e);
	return MORI_OK;
}

/* ---- replies on the session socket ---- */

void wire_reply(int sock, pid_t pid, Mori__Reply *rep, struct rctx *r)
{
	uint8_t *buf;
	size_t len;
	if (wire_pack_reply(rep, &buf, &len) != MORI_OK)
		return;
	int rc = wire_send(sock, buf, len, r->fds, r->nfds);
	if (rc < 0)
		mlog_info("session", "pid %d: reply not sent: %s", pid, strerror(-rc));
	free(buf);
}

void client_reply(struct client *c, Mori__Reply *rep, struct rctx *r)
{
	if (c->sock >= 0)
		wire_reply(c->sock, c->pid, rep, r);
}
