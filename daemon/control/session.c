/* Clients and their session sockets (AF_UNIX SEQPACKET): attach, requests with fds, the ring
 * pair, and clean-up when a client goes: its socket closing, or its process exiting (a pidfd),
 * whichever comes first, is its death certificate. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kv/kv_store.h"
#include "shmem/group.h"
#include "invariant.h"
#include "log.h"
#include "core/morid.h"
#include "peer/peer.h"
#include "pidfd.h"
#include "region/registry.h"

#define ATTACH_DEADLINE_MS 10000 /* a session must say hello within this */
#define PENDING_MAX 256          /* sessions yet to say hello; past it the oldest is closed */
#define SQ_BATCH 256 /* entries taken per wake-up, so one client cannot starve the loop */

struct conn {
	struct morid *d;
	struct client *client;
	int sock;
	uid_t uid;
	pid_t pid;
	uv_poll_t poll;
	uv_timer_t timer;
	/* The connecting process (SO_PEERCRED's pid at connect): fork() copies the socket, so the
	 * socket alone can outlive the process; this polls readable when the process exits.
	 * -1 where the kernel has no pidfd_open (then the socket alone decides, as before). */
	int pidfd;
	uv_poll_t pid_poll;
	int closing, handles;
	uint8_t *buf;
	struct list plink;       /* on pending until its hello */
};

static struct list pending = {&pending, &pending};
static int npending;
static int spare_fd = -1;        /* given up to accept-and-close when out of descriptors */

static void pending_leave(struct conn *k)
{
	if (k->plink.next != &k->plink) {
		list_del(&k->plink);
		npending--;
	}
}

static void conn_close(struct conn *k);

/* ---- clients ---- */

static void client_free(struct client *c)
{
	if (c->ring)
		munmap(c->ring, c->lay.total);
	if (c->ring_fd >= 0)
		close(c->ring_fd);
	if (c->sq_efd >= 0)
		close(c->sq_efd);
	if (c->cq_efd >= 0)
		close(c->cq_efd);
	free(c->cq_backlog);
	free(c);
}

static void client_handle_closed(uv_handle_t *h)
{
	client_free(h->data);
}

static void handle_sqe(struct client *c, const struct mori_sqe *e);

/* What a client queued before its session closed still counts: a notification it submitted
 * after its data landed must reach the target, though mori_client_close does not wait for
 * morid to read the ring (and a killed client cannot). Transfers and cancels go with it. */
static void sq_drain_at_close(struct client *c)
{
	struct mori_sqe e;
	for (uint32_t n = 0; n < c->lay.sq_entries && ring_pop(c->sqh, c->sqe, c->lay.sq_entries, sizeof(e), &e) == 0; n++)
		if (e.op == SQE_NOTIFY || e.op == SQE_REVOKE_ACK || e.op == SQE_BYE)
			handle_sqe(c, &e);
}

void client_destroy(struct client *c, const char *why)
{
	struct morid *d = c->d;
	if (c->dying)
		return;
	if (c->attached && c->ring && !strcmp(why, "closed"))
		sq_drain_at_close(c);
	if (c->conn && !c->conn->closing && strcmp(why, "closed")) {
		/* detached by morid: the reason goes out as an unsolicited reply (id 0) that libmori
		 * reports once it sees the session end */
		Mori__Reply bye = MORI__REPLY__INIT;
		struct rctx r = {0};
		reply_error(&bye, MORI_ECONN, "detached by morid: %s", why);
		client_reply(c, &bye, &r);
		rctx_free(&r);
	}
	c->dying = 1;
	/* morid's own decision to detach a client is worth a warning: the client cannot log it */
	if (strcmp(why, "closed") && strcmp(why, "daemon stopping"))
		mlog_warn("client", "client %llu (pid %d, %s) detached: %s", (unsigned long long)c->id, c->pid,
			  c->name, why);
	else
		mlog_info("client", "client %llu (pid %d, %s) gone: %s", (unsigned long long)c->id, c->pid,
			  c->name, why);
	/* A session that ends without the client's goodbye (SIGKILL, a crash) is a death. */
	if (c->attached && !d->stopping)
		count(d, C_CLIENTS_DIED, strcmp(why, "closed") != 0 || !c->said_bye);
	group_client_gone(d, c); /* its PEs die before its regions (their heaps) go */
	peer_client_gone(d, c);
	kv_client_gone(d, c); /* its reservations freed, its leases ended */
	region_forget_waiter(d, c);
	list_each(it, &c->regions)
		region_remove(d, list_entry(it, struct region, owner_link), "owner gone");
	client_drop_opens(c);
	list_del(&c->link);
	MORI_REQUIRE(d->nclients > 0, "client count underflow");
	d->nclients--;
	if (c->conn) {
		c->conn->client = NULL;
		conn_close(c->conn);
		c->conn = NULL;
		c->sock = -1;
	}
	if (c->sq_efd >= 0 && uv_is_active((uv_handle_t *)&c->sq_poll))
		uv_close((uv_handle_t *)&c->sq_poll, client_handle_closed);
	else
		client_free(c);
}

/* ---- the submission queue ---- */

static void handle_sqe(struct client *c, const struct mori_sqe *e)
{
	struct morid *d = c->d;
	count(d, C_SQES, 1);
	switch (e->op) {
	case SQE_NOP:
	case SQE_CQ_SPACE:
		return;
	case SQE_NOTIFY: {
		struct region *r = region_find(d, e->local_region);
		if (!r || !r->owner || !region_reachable_by(r, c)) {
			/* only a client that opened (or owns) the region may notify its owner */
			count(d, C_BAD_SQES, 1);
			return;
		}
		struct mori_cqe n = {.type = CQE_NOTIF, .code = c->pid, .user_data = e->tag, .value = r->id};
		if (client_post_notif(r->owner, &n, c->pid) == MORI_OK)
			count(d, C_NOTIFS, 1);
		return;
	}
	case SQE_REVOKE_ACK:
		region_revoke_ack(d, c, e->local_region);
		return;
	case SQE_BYE:
		c->said_bye = 1;
		return;
	case SQE_XFER:
	case SQE_XFER_LIST:
	case SQE_CANCEL:
		peer_submit(d, c, e);
		return;
	default:
		count(d, C_BAD_SQES, 1);
		mlog_info("client", "client %llu: unknown submission op %u", (unsigned long long)c->id, e->op);
	}
}

static void sq_ready(uv_poll_t *p, int status, int events)
{
	struct client *c = p->data;
	uint64_t v;
	if (read(c->sq_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return;
	for (;;) {
		ring_awake(c->sqh);
		struct mori_sqe e;
		int n = 0;
		while (n < SQ_BATCH && !c->dying && ring_pop(c->sqh, c->sqe, c->lay.sq_entries, sizeof(e), &e) == 0) {
			handle_sqe(c, &e);
			n++;
		}
		if (c->dying)
			return;
		if (c->backlog_n)
			client_flush_backlog(c);
		if (n == SQ_BATCH) {
			/* more may wait: come back on the next loop turn via a self-doorbell */
			uint64_t one = 1;
			if (write(c->sq_efd, &one, sizeof(one)) < 0) {
			}
			return;
		}
		if (ring_prepare_sleep(c->sqh))
			return;
	}
}

static int client_setup_rings(struct client *c)
{
	struct morid *d = c->d;
	uint32_t n = (uint32_t)d->cfg.ring_entries;
	ring_layout_compute(&c->lay, n, n, (uint64_t)d->cfg.arena_mib << 20);
	c->ring_fd = memfd_create("mori-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (c->ring_fd < 0 || ftruncate(c->ring_fd, (off_t)c->lay.total) != 0)
		return MORI_ESYS;
	/* The client gets this fd read-write: sealed, it cannot shrink the ring under us (a SIGBUS
	 * in the daemon) or grow it. */
	if (fcntl(c->ring_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return MORI_ESYS;
	c->ring = mmap(NULL, c->lay.total, PROT_READ | PROT_WRITE, MAP_SHARED, c->ring_fd, 0);
	if (c->ring == MAP_FAILED) {
		c->ring = NULL;
		return MORI_ESYS;
	}
	c->sqh = (struct ring_hdr *)c->ring;
	c->cqh = c->sqh + 1;
	c->sqh->capacity = c->cqh->capacity = n;
	c->sqe = (char *)c->ring + c->lay.sq_off;
	c->cqe = (char *)c->ring + c->lay.cq_off;
	atomic_store(&c->sqh->sleeping, 1);
	c->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->cq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->sq_efd < 0 || c->cq_efd < 0)
		return MORI_ESYS;
	uv_poll_init(d->loop, &c->sq_poll, c->sq_efd);
	c->sq_poll.data = c;
	uv_poll_start(&c->sq_poll, UV_READABLE, sq_ready);
	return MORI_OK;
}

/* ---- session sockets ---- */

static void conn_handle_closed(uv_handle_t *h)
{
	struct conn *k = h->data;
	if (--k->handles > 0)
		return;
	close(k->sock);
	if (k->pidfd >= 0)
		close(k->pidfd); /* after the client: its regions borrowed it (registry.h) */
	free(k->buf);
	free(k);
}

static void conn_close(struct conn *k)
{
	if (k->closing)
		return;
	k->closing = 1;
	pending_leave(k);
	if (k->client) {
		struct client *c = k->client;
		k->client = NULL;
		c->conn = NULL;
		c->sock = -1;
		client_destroy(c, "closed");
	}
	uv_close((uv_handle_t *)&k->poll, conn_handle_closed);
	uv_close((uv_handle_t *)&k->timer, conn_handle_closed);
	if (k->pidfd >= 0)
		uv_close((uv_handle_t *)&k->pid_poll, conn_handle_closed);
}

/* The client's process exited while its session socket lives on elsewhere (a forked child
 * inherited it, or it was passed on): the client ends now, exactly as if the socket closed,
 * so its PEs abort their groups and nothing reaches its pid again. */
static void conn_process_exited(uv_poll_t *p, int status, int events)
{
	struct conn *k = p->data;
	if (k->closing)
		return;
	mlog_info("session", "pid %d exited; its session socket is still open in another process (a forked child?): "
			     "ending its client", k->pid);
	conn_close(k);
}

#if !defined(SO_PEERPIDFD) && (defined(__x86_64__) || defined(__aarch64__) || defined(__i386__))
#define SO_PEERPIDFD 77 /* asm-generic's; older libc headers lack it */
#endif

/* A pidfd of the process that connected socket s (SO_PEERCRED's pid), or -1; -2 when it is
 * already gone. SO_PEERPIDFD (Linux >= 6.5) names the very process that connected; pidfd_open
 * of the pid (>= 5.3) the one that has the pid at accept. Logged once if neither exists: clients
 * then live as long as their socket (diagnose says so). */
static int pidfd_of(int s, pid_t pid)
{
	static int warned;
#ifdef SO_PEERPIDFD
	int pfd = -1;
	socklen_t pl = sizeof(pfd);
	if (getsockopt(s, SOL_SOCKET, SO_PEERPIDFD, &pfd, &pl) == 0 && pfd >= 0)
		return pfd; /* close-on-exec already (pidfd_prepare) */
	if (errno == ESRCH)
		return -2;
#else
	(void)s;
#endif
	int fd = pidfd_open_pid(pid);
	if (fd >= 0)
		return fd; /* close-on-exec already */
	if (errno == ESRCH)
		return -2;
	if (errno != ENOSYS) {
		mlog_ratelimited(MLOG_WARN, "session", "pidfd_open(%d): %s: that client lives as long as its socket",
				 (int)pid, strerror(errno));
		return -1;
	}
	if (!warned++)
		mlog_warn("session", "no pidfd_open in this kernel (Linux >= 5.3): a client lives as long as its session "
				     "socket, so one whose forked child keeps the socket outlives its process");
	return -1;
}

/* The first message on a session socket is the hello: it creates the client, whose life is
 * this socket's, and hands over its ring pair. */
static int do_session_hello(struct conn *k, Mori__Hello *h, Mori__Reply *rep, struct rctx *r)
{
	struct morid *d = k->d;
	do_hello(d, k->uid, h, rep, r);
	if (rep->code != 0)
		return -1;
	if (d->nclients >= (uint32_t)d->cfg.max_clients) {
		reply_error(rep, MORI_EAGAIN, "too many clients (max_clients = %lld)", (long long)d->cfg.max_clients);
		return -1;
	}
	struct client *c = client_new(d, k->pid, k->uid, h->name);
	if (!c) {
		reply_error(rep, MORI_ENOMEM, "out of memory");
		return -1;
	}
	int rc = client_setup_rings(c);
	if (rc != MORI_OK) {
		reply_error(rep, rc, "ring setup failed: %s", strerror(errno));
		client_destroy(c, "ring setup failed");
		return -1;
	}
	c->attached = 1;
	c->attached_us = mori_now_us();
	c->conn = k;
	c->sock = k->sock;
	c->pidfd = k->pidfd; /* borrowed: the conn closes it after the client is gone */
	c->features = h->features;
	k->client = c;
	pending_leave(k);
	uv_timer_stop(&k->timer);
	Mori__HelloReply *hr = rep->hello;
	hr->client_id = c->id;
	hr->sq_entries = c->lay.sq_entries;
	hr->cq_entries = c->lay.cq_entries;
	hr->ring_bytes = c->lay.total;
	r->fds[0] = c->ring_fd;
	r->fds[1] = c->sq_efd;
	r->fds[2] = c->cq_efd;
	r->nfds = 3;
	r->keep_fds = 1; /* the client struct owns its ring fds */
	mlog_info("client", "client %llu attached: pid %d uid %u name '%s'", (unsigned long long)c->id,
		  c->pid, c->uid, c->name);
	return 0;
}

static void conn_readable(uv_poll_t *p, int status, int events)
{
	struct conn *k = p->data;
	struct morid *d = k->d;
	for (int round = 0; round < 16 && !k->closing; round++) {
		int fds[WIRE_MAX_FDS], nfds = 0;
		ssize_t n = wire_recv(k->sock, k->buf, WIRE_SEQPACKET_MAX, fds, &nfds);
		if (n == -EAGAIN)
			return;
		if (n == 0 || (n < 0 && n != -EMSGSIZE)) {
			conn_close(k);
			return;
		}
		count(d, C_REQUESTS, 1);
		Mori__Reply rep = MORI__REPLY__INIT;
		struct rctx r = {0};
		Mori__Request *req = NULL;
		if (n == -EMSGSIZE || (size_t)n > (size_t)d->cfg.max_message_bytes) {
			count(d, C_OVERSIZE, 1);
			reply_error(&rep, MORI_EMSGSIZE, "message over the size cap");
		} else if (!(req = mori__request__unpack(NULL, (size_t)n, k->buf))) {
			count(d, C_BAD_REQUESTS, 1);
			reply_error(&rep, MORI_EPROTO, "malformed request (%zd bytes)", n);
		} else if (nfds < 0) {
			nfds = 0;
			rep.id = req->id;
			mlog_warn("session", "pid %d: the descriptors sent with a request were lost: morid is out of "
					     "file descriptors (%u regions hold one each)", k->pid, registry_fds(d));
			reply_error(&rep, MORI_ESYS,
				    "morid is out of file descriptors (%u regions hold one each): the request's fds were "
				    "lost; raise morid's LimitNOFILE or lower client_max_regions", registry_fds(d));
		} else {
			rep.id = req->id;
			if (!k->client) {
				if (req->body_case == MORI__REQUEST__BODY_HELLO)
					do_session_hello(k, req->hello, &rep, &r);
				else
					reply_error(&rep, MORI_EPROTO, "first message on a session must be hello");
			} else if (dispatch(d, k->client, k->uid, req, &rep, &r, fds, nfds) == 1) {
				nfds = 0; /* deferred: the reply is sent later */
				mori__request__free_unpacked(req, NULL);
				continue;
			} else {
				nfds = 0; /* dispatch owns the fds */
			}
		}
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		wire_reply(k->sock, k->pid, &rep, &r);
		rctx_free(&r);
		if (req)
			mori__request__free_unpacked(req, NULL);
		if (rep.code != 0 && !k->client) {
			conn_close(k); /* a failed hello ends the session */
			return;
		}
	}
}

static void conn_attach_expired(uv_timer_t *t)
{
	struct conn *k = t->data;
	mlog_info("session", "pid %d: no hello within %d ms, closing", k->pid, ATTACH_DEADLINE_MS);
	conn_close(k);
}

static void session_accept(uv_poll_t *p, int status, int events)
{
	struct morid *d = p->data;
	for (int i = 0; i < 16; i++) {
		int s = accept4(d->session_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (s < 0 && (errno == EMFILE || errno == ENFILE) && spare_fd >= 0) {
			/* out of descriptors: take the connection on the spare one and close it, or the
			 * listener stays readable and the loop spins */
			close(spare_fd);
			s = accept4(d->session_fd, NULL, NULL, SOCK_CLOEXEC);
			if (s >= 0)
				close(s);
			spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
			count(d, C_DENIED, 1);
			mlog_warn("session", "refused a session: out of file descriptors");
			continue;
		}
		if (s < 0)
			return;
		struct ucred cred;
		socklen_t cl = sizeof(cred);
		if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 ||
		    !config_uid_allowed(&d->cfg, cred.uid)) {
			count(d, C_DENIED, 1);
			mlog_ratelimited(MLOG_WARN, "session", "refused session from uid %u pid %d: uid not in allow_uids",
				  cred.uid, cred.pid);
			/* say why before closing: libmori reports it as MORI_EPERM, not a lost session */
			Mori__Reply no = MORI__REPLY__INIT;
			struct rctx r = {0};
			reply_error(&no, MORI_EPERM, "uid %u is not allowed by morid (allow_uids in morid.conf)", cred.uid);
			wire_reply(s, cred.pid, &no, &r);
			close(s);
			continue;
		}
		if (d->nclients >= (uint32_t)d->cfg.max_clients + 16) {
			mlog_warn("session", "refused session from pid %d: too many clients", cred.pid);
			close(s);
			continue;
		}
		struct conn *k = calloc(1, sizeof(*k));
		if (k)
			k->buf = malloc(WIRE_SEQPACKET_MAX);
		if (!k || !k->buf) {
			if (k)
				free(k);
			close(s);
			continue;
		}
		int pidfd = pidfd_of(s, cred.pid);
		if (pidfd == -2) {
			/* it exited between connect and accept: nothing to serve */
			free(k->buf);
			free(k);
			close(s);
			continue;
		}
		if (npending >= PENDING_MAX) {
			struct conn *old = list_entry(pending.next, struct conn, plink);
			mlog_ratelimited(MLOG_WARN, "session", "more than %d sessions without a hello: closing the oldest (pid %d)",
				  PENDING_MAX, old->pid);
			conn_close(old);
		}
		list_add(&pending, &k->plink);
		npending++;
		k->d = d;
		k->sock = s;
		k->uid = cred.uid;
		k->pid = cred.pid;
		k->pidfd = pidfd;
		k->handles = 2;
		if (pidfd >= 0) {
			k->handles = 3;
			uv_poll_init(d->loop, &k->pid_poll, pidfd);
			k->pid_poll.data = k;
			uv_poll_start(&k->pid_poll, UV_READABLE, conn_process_exited);
		}
		uv_poll_init(d->loop, &k->poll, s);
		k->poll.data = k;
		uv_timer_init(d->loop, &k->timer);
		k->timer.data = k;
		uv_poll_start(&k->poll, UV_READABLE | UV_DISCONNECT, conn_readable);
		uv_timer_start(&k->timer, conn_attach_expired, ATTACH_DEADLINE_MS, 0);
	}
}

int session_start(struct morid *d)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(d->session_path, sizeof(d->session_path), "%s/morid.session", d->cfg.runtime_dir);
	if (strlen(d->session_path) >= sizeof(sa.sun_path)) {
		mlog_err("session", "runtime_dir too long for a unix socket path");
		return -1;
	}
	/* Bind under a temporary name and rename once listening, so that the socket appears only
	 * when a connect to it succeeds. */
	char tmp[sizeof(d->session_path) + 8]; /* room for any session_path: -O1 -Wformat-truncation */
	snprintf(tmp, sizeof(tmp), "%s.new", d->session_path);
	if (strlen(tmp) >= sizeof(sa.sun_path)) {
		mlog_err("session", "runtime_dir too long for a unix socket path");
		return -1;
	}
	strcpy(sa.sun_path, tmp);
	unlink(tmp);
	unlink(d->session_path); /* we hold the lock: any socket there is stale */
	if (spare_fd < 0)
		spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	d->session_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (d->session_fd < 0 || bind(d->session_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    chmod(tmp, (mode_t)d->cfg.socket_mode) != 0 || listen(d->session_fd, 128) != 0 ||
	    rename(tmp, d->session_path) != 0) {
		mlog_err("session", "cannot listen on %s: %s", d->session_path, strerror(errno));
		return -1;
	}
	uv_poll_init(d->loop, &d->session_poll, d->session_fd);
	d->session_poll.data = d;
	uv_poll_start(&d->session_poll, UV_READABLE, session_accept);
	d->client_kill = client_destroy;
	return 0;
}

void session_stop(struct morid *d)
{
	list_each(it, &d->clients)
		client_destroy(list_entry(it, struct client, link), "daemon stopping");
	list_each(it, &pending)
		conn_close(list_entry(it, struct conn, plink));
	if (spare_fd >= 0) {
		close(spare_fd);
		spare_fd = -1;
	}
	if (d->session_fd >= 0) {
		uv_close((uv_handle_t *)&d->session_poll, NULL);
		close(d->session_fd);
		d->session_fd = -1;
		unlink(d->session_path);
	}
}
