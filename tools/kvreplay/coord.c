/* mori-kvreplay: how the decode and prefill sides talk. Messages over the side channel (a
 * SEQPACKET socketpair when one command forks both, one TCP connection between two commands
 * with --role), the hello both sides must agree on, and --coord's listen and connect. */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvreplay.h"

static size_t msg_len(const struct msg *m)
{
	return offsetof(struct msg, blk) + (size_t)m->n * sizeof(struct job_block);
}

/* The side channel is a SEQPACKET socketpair (one message per packet) when one process forks
 * both sides, a TCP connection between the roles (--role): then messages are read by length. */
int msg_stream;

int msg_send(int fd, const struct msg *m)
{
	size_t len = msg_len(m), done = 0;
	while (done < len) {
		ssize_t w = send(fd, (const char *)m + done, len - done, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0 || (!msg_stream && (size_t)w != len))
			return -1;
		done += (size_t)w;
	}
	return 0;
}

int msg_recv(int fd, struct msg *m, int64_t timeout_ms, pid_t parent_pid, const char **why)
{
	uint64_t deadline = timeout_ms >= 0 ? now_us() + (uint64_t)timeout_ms * 1000 : 0;
	const size_t head = offsetof(struct msg, blk);
	size_t got = 0, want = msg_stream ? head : sizeof(*m);
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int wait_ms = 1000;
		if (deadline) {
			uint64_t t = now_us();
			if (t >= deadline) {
				*why = "timed out waiting for the other process";
				return -1;
			}
			wait_ms = (int)((deadline - t + 999) / 1000);
			if (wait_ms > 1000)
				wait_ms = 1000;
		}
		int rc = poll(&pfd, 1, wait_ms);
		if (rc < 0 && errno != EINTR) {
			*why = "poll failed";
			return -1;
		}
		if (rc > 0) {
			ssize_t r = recv(fd, (char *)m + got, want - got, 0);
			if (r < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (r == 0 || (r < 0 && errno == ECONNRESET)) {
				*why = "the other process has gone";
				return -1;
			}
			if (r < 0) {
				*why = "receive failed";
				return -1;
			}
			if (msg_stream) {
				got += (size_t)r;
				if (got == head && m->n <= JOB_MAX_BLOCKS)
					want = msg_len(m);
				if (got < want)
					continue;
				r = (ssize_t)got;
			}
			if (r < (ssize_t)offsetof(struct msg, blk) || m->n > JOB_MAX_BLOCKS ||
			    (size_t)r != msg_len(m)) {
				*why = "malformed message from the other process";
				return -1;
			}
			m->a[sizeof(m->a) - 1] = m->b[sizeof(m->b) - 1] = 0;
			m->text[sizeof(m->text) - 1] = 0;
			return 0;
		}
		if (parent_pid > 0 && getppid() != parent_pid) {
			*why = "the decode process has gone";
			return -1;
		}
	}
}

void send_err(int fd, const char *fmt, ...)
{
	struct msg m = {.type = M_ERR};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m.text, sizeof(m.text), fmt, ap);
	va_end(ap);
	msg_send(fd, &m);
}

/* What both sides must agree on (they may be separate commands with --role): put in a hello,
 * checked against the other side's. */
void hello_geom(struct msg *m, const struct opts *o, const struct geom *g)
{
	m->u0 = g->bytes_per_block;
	m->u1 = g->pool_blocks;
	m->code = o->mode * 16 + o->mem_kind;
}

int hello_geom_differs(const struct msg *m, const struct opts *o, const struct geom *g, char *err,
		       size_t len)
{
	struct msg mine;
	hello_geom(&mine, o, g);
	if (m->u0 == mine.u0 && m->u1 == mine.u1 && m->code == mine.code)
		return 0;
	snprintf(err, len,
		 "prefill and decode disagree: %llu vs %llu bytes per block, %llu vs %llu pool blocks, "
		 "mode/memory %d vs %d (give both the same --model, --page-tokens, --pool-*, --mode, --mem)",
		 (unsigned long long)m->u0, (unsigned long long)mine.u0, (unsigned long long)m->u1,
		 (unsigned long long)mine.u1, m->code, mine.code);
	return -1;
}

/* Deadline of the set-up steps (allocation, warm-up): the transfer timeout plus 30 s per GiB
 * of pool, since touching a page the first time can cost tens of microseconds (a fault) and the
 * warm-up touches each page up to three times. */
int64_t setup_deadline_ms(const struct opts *o, const struct geom *g)
{
	return o->timeout_ms + 30000 * (int64_t)((g->pool_bytes + (1ull << 30) - 1) >> 30);
}

/* How long each role waits for the other at --coord: 120 s, or the set-up deadline if longer. */
int64_t coord_wait_ms(const struct opts *o, const struct geom *g)
{
	int64_t setup_ms = setup_deadline_ms(o, g);
	return setup_ms > 120000 ? setup_ms : 120000;
}

/* ---------------------------------------------------------------------------------------------
 * --role: prefill and decode as two commands (two machines), joined by one TCP connection
 */
static int coord_resolve(const char *spec, struct addrinfo **out, char *err, size_t len)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec || !colon[1] || (size_t)(colon - spec) >= sizeof(host)) {
		snprintf(err, len, "--coord %s: expected HOST:PORT", spec);
		return -1;
	}
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = 0;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
	int rc = getaddrinfo(host, colon + 1, &hints, out);
	if (rc) {
		snprintf(err, len, "--coord %s: %s", spec, gai_strerror(rc));
		return -1;
	}
	return 0;
}

static void coord_tune(int fd)
{
	int one = 1, idle = 10, intvl = 5, cnt = 3; /* a vanished peer is noticed within ~25 s */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* The prefill role: listen at spec and take one decode connection within timeout_ms. */
int coord_accept(const char *spec, int64_t timeout_ms, char *err, size_t len)
{
	struct addrinfo *ai;
	if (coord_resolve(spec, &ai, err, len))
		return -1;
	int one = 1, fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1)) {
		snprintf(err, len, "--coord %s: cannot listen: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	int rc = poll(&pfd, 1, timeout_ms > INT_MAX ? INT_MAX : (int)timeout_ms);
	int c = rc > 0 ? accept4(fd, NULL, NULL, SOCK_CLOEXEC) : -1;
	if (c < 0)
		snprintf(err, len, "--coord %s: no decode side connected within %lld ms", spec, (long long)timeout_ms);
	close(fd);
	if (c >= 0)
		coord_tune(c);
	return c;
}

/* The decode role: connect to the prefill role at spec, retrying until timeout_ms (it may start
 * after us). */
int coord_connect(const char *spec, int64_t timeout_ms, char *err, size_t len)
{
	uint64_t deadline = now_us() + (uint64_t)timeout_ms * 1000;
	for (;;) {
		struct addrinfo *ai;
		if (coord_resolve(spec, &ai, err, len))
			return -1;
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
		int e = errno;
		freeaddrinfo(ai);
		if (ok) {
			coord_tune(fd);
			return fd;
		}
		if (fd >= 0)
			close(fd);
		if (now_us() > deadline) {
			snprintf(err, len, "--coord %s: no prefill side within %lld ms (%s)", spec, (long long)timeout_ms,
				 strerror(e));
			return -1;
		}
		usleep(100000);
	}
}
