/* libmori: connecting to morid, the session socket, and the ring pair. The bottom of libclient/:
 * it calls no file above it; what those files do when a client closes, a completion or a
 * revocation arrives or morid hangs up, they register as hooks here (internal.h). */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

#define RPC_TIMEOUT_MS 15000  /* a remote lookup may wait on another node's daemon */
#define CLIENT_NAME_MAX 63    /* what morid keeps of a client's name (moractl clients) */

/* Bumped in the child of every fork(): a client belongs to the process that opened it. The
 * session socket and the rings are shared with the parent after a fork, and anything the child
 * sent on them would act for the parent (register the child's addresses under the parent's pid,
 * take the parent's completions), so a child's calls fail instead. */
static _Atomic unsigned fork_gen;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* The open clients, for the child handler: a client's session socket and ring fds copied into a
 * child would keep morid's client (its regions, names, PEs) alive after the parent exits, so the
 * child lets go of them at once. Lock-free slots, since after fork() the child may not take a
 * lock or allocate; past CLIENT_SLOTS open clients the rest are not closed in children (morid
 * still ends such a client when its process exits, by pidfd). */
#define CLIENT_SLOTS 64
static mori_client *_Atomic client_slot[CLIENT_SLOTS];

static void slot_add(mori_client *c)
{
	for (int i = 0; i < CLIENT_SLOTS; i++) {
		mori_client *none = NULL;
		if (atomic_compare_exchange_strong(&client_slot[i], &none, c))
			return;
	}
}

static void slot_remove(mori_client *c)
{
	for (int i = 0; i < CLIENT_SLOTS; i++) {
		mori_client *me = c;
		if (atomic_compare_exchange_strong(&client_slot[i], &me, NULL))
			return;
	}
}

/* In the child, only close() and plain stores: async-signal-safe after a fork of a threaded
 * process. The child's copy of each client forgets the fds, so close_in_child later cannot
 * close a number the child has since reused; the parent's fds are untouched (its own table). */
static void on_fork_child(void)
{
	atomic_fetch_add(&fork_gen, 1);
	for (int i = 0; i < CLIENT_SLOTS; i++) {
		mori_client *c = atomic_load(&client_slot[i]);
		if (!c)
			continue;
		atomic_store(&client_slot[i], NULL); /* the child's table; the parent keeps its own */
		int *fds[] = {&c->sock, &c->ring_fd, &c->sq_efd, &c->cq_efd};
		for (int j = 0; j < 4; j++)
			if (*fds[j] >= 0) {
				close(*fds[j]);
				*fds[j] = -1;
			}
		if (c->hup_on) {
			close(c->hup_efd); /* the watcher thread itself did not survive the fork */
			c->hup_on = 0;
		}
	}
}
static void fork_watch(void) { pthread_atfork(NULL, NULL, on_fork_child); }

/* ---- hooks of the files above ---- */

static struct {
	void (*close[CLOSE_STEPS])(mori_client *c);
	void (*xfer_done)(mori_client *c, uint64_t id, int code, const char *msg);
	void (*revoked)(mori_client *c, uint64_t region_id);
	void (*session_lost)(mori_client *c);
} hooks;

void client_on_close(enum client_close_step step, void (*fn)(mori_client *c)) { hooks.close[step] = fn; }
void client_on_xfer_done(void (*fn)(mori_client *c, uint64_t id, int code, const char *msg)) { hooks.xfer_done = fn; }
void client_on_revoked(void (*fn)(mori_client *c, uint64_t region_id)) { hooks.revoked = fn; }
void client_on_session_lost(void (*fn)(mori_client *c)) { hooks.session_lost = fn; }

int client_forked(const mori_client *c)
{
	return c->fork_gen != atomic_load_explicit(&fork_gen, memory_order_relaxed) || c->pid != getpid();
}

static __thread char last_error[512];

int set_error(mori_client *c, int code, const char *fmt, ...)
{
	(void)c;
	/* formatted aside first: callers wrap the previous message ("...: %s", last_error) */
	char buf[sizeof(last_error)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	memcpy(last_error, buf, sizeof(buf));
	return code;
}

const char *mori_client_last_error(mori_client *c)
{
	(void)c;
	return last_error;
}

const char *mori_client_node(mori_client *c) { return c ? c->node : NULL; } /* NULL as the other getters */

int client_check(mori_client *c)
{
	if (!c)
		return set_error(NULL, MORI_EINVAL, "NULL client");
	if (c->fork_gen == atomic_load_explicit(&fork_gen, memory_order_relaxed))
		return MORI_OK;
	return set_error(c, MORI_ESTALE, "client opened by pid %d, used in pid %d: open a new client after fork",
			 (int)c->pid, (int)getpid());
}

/* Wait for the socket to be readable until deadline; 0, or MORI_ETIMEDOUT/MORI_ECONN. */
static int wait_readable(int fd, uint64_t deadline_us)
{
	for (;;) {
		uint64_t now = mori_now_us();
		if (now >= deadline_us)
			return MORI_ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n = poll(&p, 1, (int)((deadline_us - now + 999) / 1000));
		if (n > 0)
			return (p.revents & POLLIN) ? MORI_OK : MORI_ECONN;
		if (n < 0 && errno != EINTR)
			return MORI_ECONN;
	}
}

/* morid's goodbye (an unsolicited reply, id 0, sent before it detaches a client): keep why. */
static void keep_goodbye(mori_client *c, const Mori__Reply *r)
{
	if (r && r->id == 0 && r->code != 0 && r->message && !c->gone_why[0]) {
		snprintf(c->gone_why, sizeof(c->gone_why), "%s", r->message);
		c->gone_code = r->code;
	}
}

/* Has morid closed our session (it detached us, or it stopped)? Never consumes a reply another
 * thread waits for: the goodbye is read with MSG_PEEK. */
int client_session_gone(mori_client *c)
{
	struct pollfd p = {.fd = c->sock, .events = POLLIN};
	if (c->sock < 0 || poll(&p, 1, 0) != 1 || !(p.revents & (POLLHUP | POLLERR)))
		return 0;
	uint8_t buf[1024];
	ssize_t n = recv(c->sock, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
	Mori__Reply *r = n > 0 ? mori__reply__unpack(NULL, (size_t)n, buf) : NULL;
	keep_goodbye(c, r);
	if (r)
		mori__reply__free_unpacked(r, NULL);
	return 1;
}

/* The session is gone: morid's code and reason when it gave them (MORI_EPERM for a uid it
 * refuses, MORI_ECONN when it detached us), else MORI_ECONN and `fallback`. */
static int session_lost(mori_client *c, const char *fallback)
{
	/* A unix socket whose peer closed with our request unread reports ECONNRESET once, ahead
	 * of what is still queued for us: morid's goodbye may come after that error. */
	for (int i = 0; i < 4 && !c->gone_why[0] && c->sock >= 0; i++) {
		uint8_t buf[1024];
		ssize_t n = recv(c->sock, buf, sizeof(buf), MSG_DONTWAIT);
		if (n <= 0 && (n == 0 || (errno != ECONNRESET && errno != EINTR)))
			break;
		Mori__Reply *r = n > 0 ? mori__reply__unpack(NULL, (size_t)n, buf) : NULL;
		keep_goodbye(c, r);
		if (r)
			mori__reply__free_unpacked(r, NULL);
	}
	if (c->gone_code && c->gone_code != MORI_ECONN)
		return set_error(c, c->gone_code, "%s", c->gone_why);
	return set_error(c, MORI_ECONN, "session with morid lost: %s", c->gone_why[0] ? c->gone_why : fallback);
}

static int rpc_locked(mori_client *c, Mori__Request *req, const int *fds_out, int nfds_out,
		      Mori__Reply **rep, int *fds_in, int *nfds_in, int timeout_ms)
{
	uint8_t *buf;
	size_t len;
	int fds[WIRE_MAX_FDS], nfds = 0;
	*rep = NULL;
	if (nfds_in)
		*nfds_in = 0;
	req->id = ++c->next_req;
	if (wire_pack_request(req, &buf, &len) != MORI_OK)
		return set_error(c, MORI_ENOMEM, "out of memory");
	int rc = wire_send(c->sock, buf, len, fds_out, nfds_out);
	free(buf);
	if (rc == -EMSGSIZE) /* a bad argument, not a lost daemon: the session is intact */
		return set_error(c, MORI_EMSGSIZE, "request of %zu bytes is larger than the session socket carries", len);
	if (rc < 0) {
		client_session_gone(c); /* picks up morid's goodbye, if it said one */
		return session_lost(c, strerror(-rc));
	}
	uint64_t deadline = mori_now_us() + (uint64_t)timeout_ms * 1000ull;
	uint8_t *in = malloc(WIRE_SEQPACKET_MAX);
	if (!in)
		return set_error(c, MORI_ENOMEM, "out of memory");
	for (;;) {
		rc = wait_readable(c->sock, deadline);
		if (rc == MORI_ETIMEDOUT) {
			free(in);
			return set_error(c, rc, "morid did not reply within %d ms", timeout_ms);
		}
		ssize_t n = wire_recv(c->sock, in, WIRE_SEQPACKET_MAX, fds, &nfds);
		if (n == -EAGAIN)
			continue;
		if (n <= 0) {
			free(in);
			return session_lost(c, n == 0 ? "closed" : strerror((int)-n));
		}
		if (nfds < 0) {
			free(in);
			return set_error(c, MORI_ESYS, "morid's reply came with file descriptors this process could "
						       "not receive: it is out of descriptors (RLIMIT_NOFILE)");
		}
		Mori__Reply *r = mori__reply__unpack(NULL, (size_t)n, in);
		keep_goodbye(c, r);
		if (!r || r->id != req->id) {
			/* a late reply to a request that timed out earlier: drop it */
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
			if (r)
				mori__reply__free_unpacked(r, NULL);
			continue;
		}
		free(in);
		if (fds_in) {
			memcpy(fds_in, fds, sizeof(int) * (size_t)nfds);
			*nfds_in = nfds;
		} else {
			for (int i = 0; i < nfds; i++)
				close(fds[i]);
		}
		if (r->code != 0) {
			rc = set_error(c, r->code, "morid: %s", r->message);
			mori__reply__free_unpacked(r, NULL);
			if (fds_in) {
				for (int i = 0; i < *nfds_in; i++)
					close(fds_in[i]);
				*nfds_in = 0;
			}
			return rc;
		}
		*rep = r;
		return MORI_OK;
	}
}

int client_rpc(mori_client *c, Mori__Request *req, const int *fds_out, int nfds_out,
	       Mori__Reply **rep, int *fds_in, int *nfds_in)
{
	return client_rpc_timeout(c, req, fds_out, nfds_out, rep, fds_in, nfds_in, RPC_TIMEOUT_MS);
}

int client_rpc_timeout(mori_client *c, Mori__Request *req, const int *fds_out, int nfds_out,
		       Mori__Reply **rep, int *fds_in, int *nfds_in, int timeout_ms)
{
	pthread_mutex_lock(&c->rpc_lock);
	int rc = rpc_locked(c, req, fds_out, nfds_out, rep, fds_in, nfds_in, timeout_ms);
	pthread_mutex_unlock(&c->rpc_lock);
	return rc;
}

/* Connect the session socket and say hello on it: the daemon creates our client, whose life is
 * this socket's, and hands over the ring pair. (No nng in the library: nng cannot be used again
 * in a child after fork, and serving frameworks fork.) */
static int do_hello(mori_client *c, const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/morid.session", c->runtime_dir);
	if (n >= (int)sizeof(sa.sun_path))
		return set_error(c, MORI_EINVAL, "runtime dir path too long");
	c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->sock < 0)
		return set_error(c, MORI_ESYS, "socket: %s", strerror(errno));
	if (connect(c->sock, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		return set_error(c, MORI_ECONN, "no morid at %s: %s", sa.sun_path, strerror(errno));
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__Hello h = MORI__HELLO__INIT;
	Mori__Reply *rep;
	int fds[WIRE_MAX_FDS], nfds = 0;
	h.protocol_version = MORI_PROTOCOL_VERSION;
	h.name = (char *)(name ? name : "");
	h.pid = getpid();
	h.features = WIRE_FEAT_OWNER_PIDFD;
	req.body_case = MORI__REQUEST__BODY_HELLO;
	req.hello = &h;
	int rc = client_rpc(c, &req, NULL, 0, &rep, fds, &nfds);
	if (rc != MORI_OK)
		return rc;
	if (rep->body_case != MORI__REPLY__BODY_HELLO || nfds != 3) {
		mori__reply__free_unpacked(rep, NULL);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return set_error(c, MORI_EPROTO, "hello reply without the ring (%d fds)", nfds);
	}
	Mori__HelloReply *hr = rep->hello;
	uint32_t sq = hr->sq_entries, cq = hr->cq_entries;
	uint64_t total = hr->ring_bytes;
	c->id = hr->client_id;
	c->epoch = hr->epoch;
	c->default_timeout_ms = hr->transfer_timeout_ms ? hr->transfer_timeout_ms : 30000;
	snprintf(c->node, sizeof(c->node), "%s", hr->node);
	mori__reply__free_unpacked(rep, NULL);
	c->ring_fd = fds[0];
	c->sq_efd = fds[1];
	c->cq_efd = fds[2];
	/* The daemon's word on the layout, checked against our own computation. */
	uint64_t fixed = 2 * sizeof(struct ring_hdr) + (uint64_t)sq * sizeof(struct mori_sqe) +
			 (uint64_t)cq * sizeof(struct mori_cqe);
	if (!sq || (sq & (sq - 1)) || !cq || (cq & (cq - 1)) || total < fixed)
		return set_error(c, MORI_EPROTO, "hello reply with an impossible ring layout");
	ring_layout_compute(&c->lay, sq, cq, total - fixed);
	c->ring = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, c->ring_fd, 0);
	if (c->ring == MAP_FAILED) {
		c->ring = NULL;
		return set_error(c, MORI_ESYS, "mmap ring: %s", strerror(errno));
	}
	c->sqh = (struct ring_hdr *)c->ring;
	c->cqh = c->sqh + 1;
	c->sqe = (char *)c->ring + c->lay.sq_off;
	c->cqe = (char *)c->ring + c->lay.cq_off;
	return MORI_OK;
}

int mori_client_open(const char *runtime_dir, const char *name, mori_client **out)
{
	if (!out)
		return set_error(NULL, MORI_EINVAL, "out is NULL");
	*out = NULL;
	if (name && strlen(name) > CLIENT_NAME_MAX)
		return set_error(NULL, MORI_EINVAL, "client name of %zu bytes: at most %d", strlen(name), CLIENT_NAME_MAX);
	pthread_once(&fork_once, fork_watch);
	mori_client *c = calloc(1, sizeof(*c));
	if (!c)
		return set_error(NULL, MORI_ENOMEM, "out of memory");
	if (!runtime_dir || !runtime_dir[0])
		runtime_dir = getenv("MORI_RUNTIME_DIR");
	if (!runtime_dir || !runtime_dir[0])
		runtime_dir = "/run/mori";
	snprintf(c->runtime_dir, sizeof(c->runtime_dir), "%s", runtime_dir);
	c->sock = c->ring_fd = c->sq_efd = c->cq_efd = -1;
	c->pid = getpid();
	c->fork_gen = atomic_load(&fork_gen);
	pthread_mutex_init(&c->rpc_lock, NULL);
	pthread_mutex_init(&c->sq_lock, NULL);
	pthread_mutex_init(&c->cq_lock, NULL);
	pthread_mutex_init(&c->arena_lock, NULL);
	pthread_mutex_init(&c->xfer_lock, NULL);
	pthread_mutex_init(&c->mem_lock, NULL);
	pthread_mutex_init(&c->group_lock, NULL);
	int rc = do_hello(c, name);
	if (rc == MORI_OK && (rc = arena_init(c)) != MORI_OK)
		set_error(c, rc, "out of memory");
	if (rc != MORI_OK) {
		char keep[sizeof(last_error)];
		memcpy(keep, last_error, sizeof(keep));
		mori_client_close(c);
		memcpy(last_error, keep, sizeof(keep));
		return rc;
	}
	slot_add(c);
	*out = c;
	return MORI_OK;
}

/* ---- morid's hang-up, for MORI-SHMEM; revocations for idle openers ----
 * A host thread idle between calls, or a kernel waiting on a VRAM heap, never reads the session,
 * so a dead morid (kill -9) would leave the group's abort word unset and those waits without end:
 * morid alone writes it. This thread polls the session for hang-up only (events 0: no reads, the
 * replies stay for their callers) and then aborts the client's groups. It costs one sleeping
 * thread per client with groups; a child after fork has none (threads are not inherited).
 * A client that opened memory reached by cross-memory attach owes the owner an acknowledgement
 * when it is freed (the revoked hook), which it sends when it reaps its completion queue: an opener
 * idle between calls would hold every deregistration of that memory for morid's 5 s deadline.
 * With hup_reap set, the thread reaps every 100 ms as well (client_reap takes the
 * queue's lock with a trylock: a caller reaping at the same time does the work). */
static void *hup_main(void *arg)
{
	mori_client *c = arg;
	struct pollfd p[2] = {{.fd = c->sock, .events = 0}, {.fd = c->hup_efd, .events = POLLIN}};
	for (;;) {
		int n = poll(p, 2, atomic_load(&c->hup_reap) ? 100 : -1);
		if (n == 0) {
			client_reap(c);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0 && p[1].revents && !atomic_load(&c->hup_stopping)) {
			uint64_t v; /* a wake to read hup_reap again (cma_watch), not a stop */
			if (read(c->hup_efd, &v, sizeof(v)) < 0) {
				/* EAGAIN: another wake took it */
			}
			continue;
		}
		if (n < 0 || p[1].revents)
			return NULL; /* mori_client_close stops us */
		if (p[0].revents & (POLLHUP | POLLERR | POLLNVAL)) {
			if (hooks.session_lost)
				hooks.session_lost(c);
			return NULL;
		}
	}
}

int client_hup_watch(mori_client *c)
{
	if (c->hup_on)
		return MORI_OK;
	c->hup_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->hup_efd < 0)
		return set_error(c, MORI_ESYS, "eventfd: %s", strerror(errno));
	atomic_store(&c->hup_stopping, 0); /* before the thread reads it */
	int e = pthread_create(&c->hup_thread, NULL, hup_main, c);
	if (e) {
		close(c->hup_efd);
		return set_error(c, MORI_ESYS, "hang-up watcher thread: %s", strerror(e));
	}
	c->hup_on = 1;
	return MORI_OK;
}

static void hup_stop(mori_client *c)
{
	if (!c->hup_on)
		return;
	atomic_store(&c->hup_stopping, 1);
	uint64_t one = 1;
	if (write(c->hup_efd, &one, sizeof(one)) == sizeof(one))
		pthread_join(c->hup_thread, NULL);
	close(c->hup_efd);
	c->hup_on = 0;
}

/* In a child after fork: let go of the child's copies of the descriptors and mappings, and
 * nothing else (the parent's client, its regions and transfers, stay as they are). */
static void close_in_child(mori_client *c)
{
	if (c->ring)
		munmap(c->ring, c->lay.total);
	int fds[] = {c->sock, c->ring_fd, c->sq_efd, c->cq_efd, c->hup_on ? c->hup_efd : -1};
	for (int i = 0; i < 5; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

int mori_client_close(mori_client *c)
{
	if (!c)
		return MORI_OK;
	if (client_forked(c)) {
		close_in_child(c);
		return MORI_OK;
	}
	slot_remove(c); /* first: a fork from here on leaves the child nothing to close */
	hup_stop(c); /* before the goodbye and close: our own hang-up is no abort */
	for (int i = 0; i < CLOSE_STEPS; i++) /* in step order: groups first, the GPU context last */
		if (hooks.close[i])
			hooks.close[i](c);
	if (c->ring) {
		/* a clean close, not a death (morid counts clients_died): the ring is drained as the
		 * session ends, so the goodbye is read however full it was */
		struct mori_sqe bye = {.op = SQE_BYE};
		for (int i = 0; i < 100 && client_submit(c, &bye) == MORI_EAGAIN; i++) {
			client_reap(c);
			usleep(1000);
		}
		munmap(c->ring, c->lay.total);
	}
	arena_fini(c);
	if (c->sock >= 0)
		close(c->sock); /* the daemon frees what is left when the session closes */
	if (c->ring_fd >= 0)
		close(c->ring_fd);
	if (c->sq_efd >= 0)
		close(c->sq_efd);
	if (c->cq_efd >= 0)
		close(c->cq_efd);
	free(c->pending);
	free(c->notifs);
	free(c);
	return MORI_OK;
}

/* ---- rings ---- */

int client_submit(mori_client *c, const struct mori_sqe *e)
{
	pthread_mutex_lock(&c->sq_lock);
	int full = ring_push(c->sqh, c->sqe, c->lay.sq_entries, sizeof(*e), e) != 0;
	pthread_mutex_unlock(&c->sq_lock);
	if (full)
		return set_error(c, MORI_EAGAIN, "submission ring full (%u entries)", c->lay.sq_entries);
	if (ring_needs_wakeup(c->sqh)) {
		uint64_t one = 1;
		if (write(c->sq_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			return set_error(c, MORI_ECONN, "doorbell: %s", strerror(errno));
	}
	return MORI_OK;
}

void client_ack_revoke(mori_client *c, const mori_mem *m)
{
	struct mori_sqe e = {.op = SQE_REVOKE_ACK, .local_region = m->region_id};
	if (client_submit(c, &e) != MORI_OK) {
		/* a full ring: the daemon's deadline (5 s) covers a lost acknowledgement */
	}
}

void client_reap(mori_client *c)
{
	if (pthread_mutex_trylock(&c->cq_lock) != 0)
		return; /* another thread is reaping; it will complete ours too */
	struct mori_cqe e;
	int drained = 0;
	while (ring_pop(c->cqh, c->cqe, c->lay.cq_entries, sizeof(e), &e) == 0) {
		drained++;
		e.msg[CQE_MSG - 1] = 0;
		switch (e.type) {
		case CQE_XFER_DONE:
			if (hooks.xfer_done)
				hooks.xfer_done(c, e.user_data, e.code, e.msg);
			break;
		case CQE_NOTIF:
			pthread_mutex_lock(&c->xfer_lock);
			if (c->nnotif == c->cap_notif) {
				size_t ncap = c->cap_notif ? 2 * c->cap_notif : 64;
				void *p = realloc(c->notifs, ncap * sizeof(*c->notifs));
				if (p) {
					c->notifs = p;
					c->cap_notif = ncap;
				}
			}
			if (c->nnotif < c->cap_notif)
				c->notifs[c->nnotif++] = (mori_notif){.tag = e.user_data, .region_id = e.value,
								      .from_pid = e.code};
			pthread_mutex_unlock(&c->xfer_lock);
			break;
		case CQE_REVOKED:
			if (hooks.revoked)
				hooks.revoked(c, e.value);
			break;
		default:
			break;
		}
	}
	int overflow = atomic_load_explicit(&c->cqh->overflow, memory_order_acquire);
	pthread_mutex_unlock(&c->cq_lock);
	if (drained && overflow) {
		struct mori_sqe s = {.op = SQE_CQ_SPACE};
		client_submit(c, &s);
	}
}

unsigned mori_client_sq_pending(mori_client *c)
{
	if (!c || !c->sqh || client_forked(c))
		return 0;
	uint32_t tail = atomic_load_explicit(&c->sqh->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&c->sqh->head, memory_order_acquire);
	return tail - head;
}

void client_sleep(mori_client *c, int64_t timeout_us)
{
	if (timeout_us <= 0)
		return;
	if (!ring_prepare_sleep(c->cqh))
		return;
	struct pollfd p = {.fd = c->cq_efd, .events = POLLIN};
	int ms = (int)((timeout_us + 999) / 1000);
	if (poll(&p, 1, ms > 100 ? 100 : ms) > 0) {
		uint64_t v;
		if (read(c->cq_efd, &v, sizeof(v)) < 0) {
			/* another thread took the count: fine, the ring is what we read */
		}
	}
	ring_awake(c->cqh);
}

int mori_notif_poll(mori_client *c, mori_notif *out, size_t max, int64_t timeout_us)
{
	if (!c || (!out && max))
		return set_error(c, MORI_EINVAL, "notif_poll: NULL argument");
	int rc = client_check(c);
	if (rc != MORI_OK)
		return rc;
	uint64_t deadline = mori_now_us() + (timeout_us > 0 ? (uint64_t)timeout_us : 0);
	for (int spin = 0;; spin++) {
		client_reap(c);
		pthread_mutex_lock(&c->xfer_lock);
		size_t n = c->nnotif < max ? c->nnotif : max;
		if (n) {
			memcpy(out, c->notifs, n * sizeof(*out));
			memmove(c->notifs, c->notifs + n, (c->nnotif - n) * sizeof(*out));
			c->nnotif -= n;
		}
		pthread_mutex_unlock(&c->xfer_lock);
		if (n || max == 0)
			return (int)n;
		uint64_t now = mori_now_us();
		if (now >= deadline || (spin > 64 && client_session_gone(c)))
			/* a lost session ends the wait at once instead of sleeping the whole timeout,
			 * checked before each sleep (of 100 ms at most) */
			return client_session_gone(c) ? session_lost(c, "closed") : 0;
		if (spin > 64)
			client_sleep(c, (int64_t)(deadline - now));
	}
}
