/* Protocol fuzz: 10 000 random and mutated messages at a running morid, on the nng control
 * socket (random bytes, truncated and bit-flipped valid requests, envelopes with unknown oneof
 * numbers, oversize messages, hellos with bad versions, raw bytes below nng's handshake,
 * messages over twice the cap, which must drop the connection) and
 * on the SEQPACKET session socket (garbage, requests before attach, bad attaches, stray fds).
 * Afterwards a valid status request is answered, the daemon's RSS and fd count are back within
 * a small bound, and it still exits 0 on SIGTERM (under ASan: with no leak report).
 * The seed is printed; MORI_FUZZ_SEED=N repeats a run. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "mori.h"
#include "mori.pb-c.h"
#include "wire.h"
#include "svc/nng_close.h"

#define N_MESSAGES 10000
#define MAX_MSG 65536 /* --max-message-bytes for the daemon under test */

#ifdef __SANITIZE_ADDRESS__
#define SLOW 4
#define RSS_BOUND_KIB (48 * 1024) /* shadow memory and allocator caches */
#else
#define SLOW 1
#define RSS_BOUND_KIB (8 * 1024)
#endif
#define REPLY_TIMEOUT_MS (2000 * SLOW)

static char dir[64], morid_path[PATH_MAX], ctl_url[128], session_path[128], log_path[128];
static pid_t daemon_pid;
static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* xorshift64*: deterministic for a seed, independent of libc */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static uint32_t rnd_below(uint32_t n) { return (uint32_t)(rnd() % n); }

static void rnd_bytes(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rnd();
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- the daemon under test ---- */

static void print_log_tail(void)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "tail -n 30 %s >&2", log_path);
	if (system(cmd) != 0) {
	}
}

static void start_daemon(void)
{
	/* build/tests/test_fuzz_control -> build/morid */
	char self[PATH_MAX - 16];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	ck_assert_int_gt(n, 0);
	self[n] = 0;
	*strrchr(self, '/') = 0;
	snprintf(morid_path, sizeof(morid_path), "%s/../morid", self);
	ck_assert_msg(access(morid_path, X_OK) == 0, "no %s", morid_path);

	strcpy(dir, "/tmp/mori-fuzz-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char conf[96];
	snprintf(conf, sizeof(conf), "%s/morid.conf", dir);
	FILE *f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "[morid]\nmax_message_bytes = %d\n", MAX_MSG);
	fclose(f);
	char run[96];
	snprintf(run, sizeof(run), "%s/run", dir);
	snprintf(log_path, sizeof(log_path), "%s/morid.log", dir);
	snprintf(ctl_url, sizeof(ctl_url), "ipc://%s/morid.sock", run);
	snprintf(session_path, sizeof(session_path), "%s/morid.session", run);

	daemon_pid = fork();
	ck_assert_int_ge(daemon_pid, 0);
	if (daemon_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
		int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		unsetenv("NOTIFY_SOCKET");
		/* a small quarantine keeps ASan's RSS about what the daemon really holds */
		char asan[512];
		const char *old = getenv("ASAN_OPTIONS");
		snprintf(asan, sizeof(asan), "%s%squarantine_size_mb=4", old ? old : "", old && old[0] ? ":" : "");
		setenv("ASAN_OPTIONS", asan, 1);
		execl(morid_path, morid_path, "--foreground", "--config", conf, "--runtime-dir", run,
		      "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
}

/* SIGTERM, wait up to 5 s (x SLOW); returns the exit status, or -1 if it had to be killed. */
static int stop_daemon(void)
{
	if (daemon_pid <= 0)
		return -1;
	kill(daemon_pid, SIGTERM);
	int status = 0;
	uint64_t deadline = now_ms() + 5000 * SLOW;
	while (waitpid(daemon_pid, &status, WNOHANG) == 0) {
		if (now_ms() > deadline) {
			kill(daemon_pid, SIGKILL);
			waitpid(daemon_pid, &status, 0);
			daemon_pid = 0;
			return -1;
		}
		usleep(5000);
	}
	daemon_pid = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void cleanup(void)
{
	if (daemon_pid > 0) {
		kill(daemon_pid, SIGKILL);
		waitpid(daemon_pid, NULL, 0);
		daemon_pid = 0;
	}
	if (dir[0]) {
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd) != 0) {
		}
		dir[0] = 0;
	}
}

/* ---- the control socket ---- */

/* One req socket for the whole run: libnng 1.5.2 can hang in nng_close() on a req socket whose
 * dialer is reconnecting, so the cases that make the daemon drop a connection use plain
 * sockets (raw_oversize_one) instead of closing and redialling this one. */
struct ctl {
	nng_socket s;
};

static void ctl_open(struct ctl *c, int recv_ms)
{
	ck_assert_int_eq(nng_req0_open(&c->s), 0);
	nng_socket_set_ms(c->s, NNG_OPT_SENDTIMEO, REPLY_TIMEOUT_MS);
	nng_socket_set_ms(c->s, NNG_OPT_RECVTIMEO, recv_ms);
	nng_socket_set_ms(c->s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_socket_set_size(c->s, NNG_OPT_RECVMAXSZ, 0);
	/* non-blocking: nng keeps redialling until the daemon listens; sends wait for it */
	int rc = nng_dial(c->s, ctl_url, NULL, NNG_FLAG_NONBLOCK);
	ck_assert_msg(rc == 0, "dial %s: %s", ctl_url, nng_strerror(rc));
}

/* Send len bytes; return the unpacked reply, or NULL on timeout (*rc has nng's code). */
static Mori__Reply *ctl_send(struct ctl *c, const void *buf, size_t len, int *rc)
{
	nng_msg *m;
	ck_assert_int_eq(nng_msg_alloc(&m, len), 0);
	if (len)
		memcpy(nng_msg_body(m), buf, len);
	if ((*rc = nng_sendmsg(c->s, m, 0)) != 0) {
		nng_msg_free(m);
		return NULL;
	}
	if ((*rc = nng_recvmsg(c->s, &m, 0)) != 0)
		return NULL;
	Mori__Reply *rep = mori__reply__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
	ck_assert_msg(rep != NULL, "the daemon sent a reply that does not unpack (%zu bytes)", nng_msg_len(m));
	nng_msg_free(m);
	return rep;
}

static int is_known_code(int code)
{
	return code == 0 || strncmp(mori_strerror(code), "MORI_E?", 7) != 0;
}

/* A valid request of a random kind, packed into buf (cap bytes). Returns the length. */
static size_t valid_request(uint8_t *buf, size_t cap, uint64_t id)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__StatusRequest st = MORI__STATUS_REQUEST__INIT;
	Mori__ConfigRequest cf = MORI__CONFIG_REQUEST__INIT;
	Mori__Hello h = MORI__HELLO__INIT;
	Mori__ListRequest l = MORI__LIST_REQUEST__INIT;
	Mori__MemLookup ml = MORI__MEM_LOOKUP__INIT;
	Mori__Attach at = MORI__ATTACH__INIT;
	req.id = id;
	switch (rnd_below(6)) {
	case 0:
		req.body_case = MORI__REQUEST__BODY_STATUS;
		req.status = &st;
		break;
	case 1:
		req.body_case = MORI__REQUEST__BODY_CONFIG;
		req.config = &cf;
		break;
	case 2:
		h.protocol_version = MORI_PROTOCOL_VERSION;
		h.name = "fuzz";
		h.pid = 0; /* a probe: creates no session */
		req.body_case = MORI__REQUEST__BODY_HELLO;
		req.hello = &h;
		break;
	case 3:
		l.what = rnd_below(6);
		req.body_case = MORI__REQUEST__BODY_LIST;
		req.list = &l;
		break;
	case 4:
		ml.name = "no-such-name";
		req.body_case = MORI__REQUEST__BODY_MEM_LOOKUP;
		req.mem_lookup = &ml;
		break;
	default:
		at.client_id = rnd();
		at.token = rnd();
		req.body_case = MORI__REQUEST__BODY_ATTACH;
		req.attach = &at;
		break;
	}
	size_t n = mori__request__get_packed_size(&req);
	ck_assert_uint_le(n, cap);
	mori__request__pack(&req, buf);
	return n;
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	do {
		p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return n;
}

/* An envelope with a valid id and a body field whose number is not in the oneof: any number
 * the Request descriptor does not know (so fields added later are skipped too). */
static size_t unknown_oneof(uint8_t *buf, uint64_t id)
{
	uint32_t field;
	do
		field = rnd_below(4) ? 2 + rnd_below(200) : 2 + rnd_below((1u << 29) - 3);
	while (protobuf_c_message_descriptor_get_field(&mori__request__descriptor, field) != NULL ||
	       (field >= 19000 && field <= 19999)); /* reserved by protobuf */
	size_t n = 0;
	buf[n++] = 0x08; /* field 1, varint */
	n += put_varint(buf + n, id);
	uint32_t len = rnd_below(64);
	n += put_varint(buf + n, ((uint64_t)field << 3) | 2); /* length-delimited */
	n += put_varint(buf + n, len);
	rnd_bytes(buf + n, len);
	return n + len;
}

struct tally {
	int sent, replies, dropped, eproto, eversion, emsgsize, ok, other;
};

static void check_reply(Mori__Reply *rep, struct tally *t)
{
	t->replies++;
	ck_assert_msg(is_known_code(rep->code), "reply code %d is not a MORI_E* code", rep->code);
	ck_assert_msg(rep->code == 0 || (rep->message && rep->message[0]), "error %d without a message", rep->code);
	if (rep->code == 0)
		t->ok++;
	else if (rep->code == MORI_EPROTO)
		t->eproto++;
	else if (rep->code == MORI_EVERSION)
		t->eversion++;
	else if (rep->code == MORI_EMSGSIZE)
		t->emsgsize++;
	else
		t->other++;
}

/* One fuzz message of the given category on the control socket. */
static void control_one(struct ctl *c, int cat, uint64_t id, struct tally *t, uint8_t *buf)
{
	size_t len = 0;
	int rc;
	int want_code = INT_MIN;
	switch (cat) {
	case 0: /* random bytes */
		len = rnd_below(rnd_below(8) ? 256 : 4096);
		rnd_bytes(buf, len);
		break;
	case 1: /* a valid request, truncated */
		len = valid_request(buf, 4096, id);
		len = len ? rnd_below((uint32_t)len) : 0;
		break;
	case 2: { /* a valid request with bytes flipped, inserted or cut */
		len = valid_request(buf, 4096, id);
		int edits = 1 + (int)rnd_below(4);
		for (int e = 0; e < edits; e++) {
			uint32_t at = len ? rnd_below((uint32_t)len) : 0;
			switch (rnd_below(3)) {
			case 0:
				if (len)
					buf[at] ^= (uint8_t)(1u << rnd_below(8));
				break;
			case 1:
				memmove(buf + at + 1, buf + at, len - at);
				buf[at] = (uint8_t)rnd();
				len++;
				break;
			default:
				if (len) {
					memmove(buf + at, buf + at + 1, len - at - 1);
					len--;
				}
			}
		}
		break;
	}
	case 3: /* an envelope with an unknown oneof number */
		len = unknown_oneof(buf, id);
		want_code = MORI_EPROTO;
		break;
	case 4: { /* a valid hello with a bad protocol version */
		Mori__Request req = MORI__REQUEST__INIT;
		Mori__Hello h = MORI__HELLO__INIT;
		do
			h.protocol_version = (uint32_t)rnd();
		while (h.protocol_version == MORI_PROTOCOL_VERSION);
		if (rnd_below(4) == 0)
			h.protocol_version = MORI_PROTOCOL_VERSION + 1 + rnd_below(3);
		h.pid = (int32_t)rnd_below(2) * getpid();
		h.name = "bad-version";
		req.id = id;
		req.body_case = MORI__REQUEST__BODY_HELLO;
		req.hello = &h;
		len = mori__request__get_packed_size(&req);
		mori__request__pack(&req, buf);
		want_code = MORI_EVERSION;
		break;
	}
	case 5: /* over max_message_bytes but within nng's 2x: an EMSGSIZE reply */
		len = MAX_MSG + 1 + rnd_below(MAX_MSG - 1);
		rnd_bytes(buf, len);
		want_code = MORI_EMSGSIZE;
		break;
	default:
		ck_abort_msg("category %d is not a control message", cat);
	}
	t->sent++;
	Mori__Reply *rep = ctl_send(c, buf, len, &rc);
	if (!rep) {
		print_log_tail();
		ck_abort_msg("no reply within %d ms to message %d (category %d, %zu bytes): %s",
			     REPLY_TIMEOUT_MS, t->sent, cat, len, nng_strerror(rc));
	}
	check_reply(rep, t);
	if (want_code != INT_MIN)
		ck_assert_msg(rep->code == want_code, "category %d: code %d (%s), expected %d", cat,
			      rep->code, rep->message, want_code);
	if (cat == 3 || cat == 4)
		ck_assert_uint_eq(rep->id, id); /* the envelope parsed: its id is echoed */
	mori__reply__free_unpacked(rep, NULL);
}

/* A unix socket connected to path; every blocking call on it has a deadline. */
static int unix_connect(const char *path, int type)
{
	int s = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(s, 0);
	struct timeval tv = {.tv_sec = REPLY_TIMEOUT_MS / 1000, .tv_usec = REPLY_TIMEOUT_MS % 1000 * 1000};
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)); /* bounds connect() too */
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	ck_assert_msg(connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect %s: %s", path, strerror(errno));
	return s;
}

/* Wait until the peer closes s (EOF or reset); fails after the deadline. */
static void expect_closed(int s, const char *what)
{
	uint8_t junk[4096];
	uint64_t deadline = now_ms() + REPLY_TIMEOUT_MS;
	for (;;) {
		ssize_t n = recv(s, junk, sizeof(junk), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return;
		ck_assert_msg(now_ms() < deadline, "%s: the daemon did not close the connection", what);
	}
}

/* Over twice max_message_bytes: like nng, the daemon drops the connection at the header. */
static void raw_oversize_one(uint8_t *buf)
{
	int s = unix_connect(ctl_url + strlen("ipc://"), SOCK_STREAM);
	const uint8_t hello[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
	uint8_t theirs[8];
	ck_assert_int_eq(send(s, hello, 8, MSG_NOSIGNAL), 8);
	ck_assert_int_eq(recv(s, theirs, 8, MSG_WAITALL), 8);
	ck_assert_msg(theirs[1] == 'S' && theirs[2] == 'P' && theirs[5] == 0x31, "not a rep0 handshake");
	/* morid allows 2x the cap plus a full backtrace (8 hops of 4 bytes), as nng does */
	uint64_t len = 2 * MAX_MSG + 4 * 8 + 1 + rnd_below(MAX_MSG);
	buf[0] = 1;
	for (int i = 0; i < 8; i++)
		buf[1 + i] = (uint8_t)(len >> (56 - 8 * i));
	buf[9] = 0x80; /* a request id */
	size_t n = 13 + rnd_below(4096);
	rnd_bytes(buf + 13, n - 13);
	if (send(s, buf, n, MSG_NOSIGNAL) < 0) {
	}
	expect_closed(s, "message over twice the cap");
	close(s);
}

/* Raw bytes on the control socket's stream, below nng's SP handshake. */
static void raw_ipc_one(uint8_t *buf)
{
	int s = unix_connect(ctl_url + strlen("ipc://"), SOCK_STREAM);
	size_t len = 1 + rnd_below(512);
	rnd_bytes(buf, len);
	if (rnd_below(2)) {
		/* a valid SP header for rep0's peer (req0 = 0x30), then a bogus frame length */
		const uint8_t hdr[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
		memcpy(buf, hdr, 8);
		len = len < 8 ? 8 : len;
	}
	if (send(s, buf, len, MSG_NOSIGNAL) < 0) {
	}
	close(s);
}

/* ---- the session socket ---- */

static int session_connect(void)
{
	return unix_connect(session_path, SOCK_SEQPACKET);
}

/* Wait for one reply or the close. Returns 1 reply, 0 closed; fails on a timeout. */
static int session_wait(int s, uint8_t *buf, size_t cap)
{
	struct pollfd p = {.fd = s, .events = POLLIN};
	int n = poll(&p, 1, REPLY_TIMEOUT_MS);
	ck_assert_msg(n == 1, "session socket: neither a reply nor a close within %d ms", REPLY_TIMEOUT_MS);
	int fds[WIRE_MAX_FDS], nfds = 0;
	ssize_t len = wire_recv(s, buf, cap, fds, &nfds);
	ck_assert_int_ge(nfds, 0);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (len <= 0)
		return 0;
	Mori__Reply *rep = mori__reply__unpack(NULL, (size_t)len, buf);
	ck_assert_msg(rep != NULL, "session reply does not unpack");
	/* code 0 is fine: a valid hello opens a session (its fds were closed above) */
	ck_assert(is_known_code(rep->code));
	mori__reply__free_unpacked(rep, NULL);
	return 1;
}

/* One session connection with up to 3 messages, mostly bad; the daemon answers each and
 * closes the session after a failed hello. Returns the messages sent. */
static int session_one(uint8_t *buf, uint8_t *rbuf)
{
	int s = session_connect();
	int sent = 0, rounds = 1 + (int)rnd_below(3);
	for (int r = 0; r < rounds; r++) {
		size_t len;
		int fds[2], nfds = 0;
		switch (rnd_below(4)) {
		case 0:
			len = rnd_below(1024);
			rnd_bytes(buf, len);
			break;
		case 1: /* a valid request before attach, maybe with fds the daemon must close */
			len = valid_request(buf, 4096, rnd());
			if (rnd_below(2)) {
				fds[0] = eventfd(0, EFD_CLOEXEC);
				fds[1] = eventfd(0, EFD_CLOEXEC);
				nfds = 2;
			}
			break;
		case 2: { /* an attach with a made-up token (not a hello: refused) */
			Mori__Request req = MORI__REQUEST__INIT;
			Mori__Attach at = MORI__ATTACH__INIT;
			at.client_id = rnd_below(4);
			at.token = rnd();
			req.body_case = MORI__REQUEST__BODY_ATTACH;
			req.attach = &at;
			len = mori__request__get_packed_size(&req);
			mori__request__pack(&req, buf);
			break;
		}
		default: /* over the cap */
			len = MAX_MSG + 1 + rnd_below(MAX_MSG);
			rnd_bytes(buf, len);
			break;
		}
		int rc = wire_send(s, buf, len, fds, nfds);
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		if (rc != 0)
			break; /* the daemon closed it already */
		sent++;
		if (!session_wait(s, rbuf, WIRE_SEQPACKET_MAX))
			break;
	}
	close(s);
	return sent;
}

/* ---- the test ---- */

static int session_count(int n, int *total)
{
	*total += n;
	return n ? n : 1;
}

static int status_ok(struct ctl *c, Mori__StatusReply **out, Mori__Reply **keep)
{
	uint8_t buf[64];
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__StatusRequest st = MORI__STATUS_REQUEST__INIT;
	req.id = 4242;
	req.body_case = MORI__REQUEST__BODY_STATUS;
	req.status = &st;
	size_t len = mori__request__get_packed_size(&req);
	mori__request__pack(&req, buf);
	int rc;
	Mori__Reply *rep = ctl_send(c, buf, len, &rc);
	if (!rep)
		return 0;
	if (rep->code != 0 || rep->body_case != MORI__REPLY__BODY_STATUS || rep->id != 4242) {
		mori__reply__free_unpacked(rep, NULL);
		return 0;
	}
	*out = rep->status;
	*keep = rep;
	return 1;
}

static uint64_t counter(Mori__StatusReply *s, const char *name)
{
	for (size_t i = 0; i < s->n_counters; i++)
		if (!strcmp(s->counters[i]->name, name))
			return s->counters[i]->value;
	ck_abort_msg("no counter %s", name);
	return 0;
}

/* The message mix: mostly cheap categories, a few oversize ones (each costs a redial). */
static int pick_category(void)
{
	uint32_t r = rnd_below(1000);
	/* 6: over 2x the cap, 7: raw bytes below the handshake, 8: a session connection */
	if (r < 250) return 0;
	if (r < 450) return 1;
	if (r < 650) return 2;
	if (r < 800) return 3;
	if (r < 950) return 4;
	if (r < 985) return 5;
	if (r < 988) return 6;
	return r < 994 ? 7 : 8;
}

START_TEST(fuzz_control)
{
	const char *seed = getenv("MORI_FUZZ_SEED");
	rng_state = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	if (!rng_state)
		rng_state = 1;
	fprintf(stderr, "fuzz: seed %llu (MORI_FUZZ_SEED to repeat)\n", (unsigned long long)rng_state);
	start_daemon();

	struct ctl c = {0};
	ctl_open(&c, REPLY_TIMEOUT_MS);
	Mori__StatusReply *st;
	Mori__Reply *keep;
	uint64_t deadline = now_ms() + 10000 * SLOW;
	/* the dial retries in the background until morid listens */
	while (!status_ok(&c, &st, &keep)) {
		ck_assert_msg(now_ms() < deadline, "morid did not answer within %d s", 10 * SLOW);
		ck_assert_msg(waitpid(daemon_pid, NULL, WNOHANG) == 0, "morid exited at start-up");
		usleep(20000);
	}
	mori__reply__free_unpacked(keep, NULL);

	uint8_t *buf = malloc(4 * MAX_MSG), *rbuf = malloc(WIRE_SEQPACKET_MAX);
	ck_assert(buf && rbuf);
	struct tally t = {0};
	int session_msgs = 0, raw = 0;
	/* one message of category cat (evaluated more than once); counts as 1, or a session's messages */
#define FUZZ_ONE(cat)                                                   \
	((cat) == 6   ? (raw_oversize_one(buf), t.dropped++, 1)         \
	 : (cat) == 7 ? (raw_ipc_one(buf), raw++, 1)                    \
	 : (cat) == 8 ? session_count(session_one(buf, rbuf), &session_msgs) \
		      : (control_one(&c, (cat), rnd(), &t, buf), 1))
	/* warm-up: the same mix, so the allocator reaches its steady state */
	for (int i = 0; i < 1000; i++) {
		int cat = pick_category();
		FUZZ_ONE(cat);
	}
	usleep(200000); /* the warm-up's connections close: a baseline taken before only loosens the bound below */
	long rss0 = proc_rss_kib(daemon_pid);
	int fds0 = proc_fds(daemon_pid);
	ck_assert(rss0 > 0 && fds0 > 0);
	memset(&t, 0, sizeof(t));
	session_msgs = raw = 0;

	uint64_t t0 = now_ms();
	int total = 0;
	for (int cat = 0; cat <= 8; cat++) /* every category at least once */
		total += FUZZ_ONE(cat);
	while (total < N_MESSAGES) {
		int cat = pick_category();
		total += FUZZ_ONE(cat);
		ck_assert_msg(waitpid(daemon_pid, NULL, WNOHANG) == 0, "morid died after %d messages", total);
	}
	uint64_t ms = now_ms() - t0;

	/* still serving, on a new connection too (the listener survived), and the counters saw it */
	struct ctl c2 = {0};
	ctl_open(&c2, REPLY_TIMEOUT_MS);
	ck_assert_msg(status_ok(&c2, &st, &keep), "no status reply on a new connection after the fuzz");
	mori__reply__free_unpacked(keep, NULL);
	ck_assert_msg(status_ok(&c, &st, &keep), "no status reply after the fuzz");
	uint64_t bad = counter(st, "bad_requests"), over = counter(st, "oversize");
	ck_assert_uint_ge(bad, (uint64_t)(t.eproto));
	ck_assert_uint_ge(over, (uint64_t)(t.emsgsize + t.dropped));

	/* fds and sessions close asynchronously; give them a moment */
	int fds1 = proc_fds(daemon_pid);
	for (int i = 0; i < 500 * SLOW && fds1 > fds0 + 2; i++) {
		usleep(20000);
		fds1 = proc_fds(daemon_pid);
	}
	long rss1 = proc_rss_kib(daemon_pid);
	fprintf(stderr,
		"fuzz: %d messages in %llu ms: %d on the control socket (%d replies: %d ok, %d EPROTO, "
		"%d EVERSION, %d EMSGSIZE, %d other), %d over 2x the cap (connection dropped), "
		"%d raw-byte connections, %d on session sockets\n"
		"fuzz: daemon RSS %ld -> %ld KiB (%+ld), fds %d -> %d; counters bad_requests %llu oversize %llu\n",
		total, (unsigned long long)ms, t.sent, t.replies, t.ok, t.eproto, t.eversion, t.emsgsize,
		t.other, t.dropped, raw, session_msgs, rss0, rss1, rss1 - rss0, fds0, fds1,
		(unsigned long long)bad, (unsigned long long)over);
	mori__reply__free_unpacked(keep, NULL);
	ck_assert_msg(fds1 <= fds0 + 2, "daemon fds %d -> %d", fds0, fds1); /* fewer is no leak */
	ck_assert_msg(rss1 - rss0 < RSS_BOUND_KIB, "daemon RSS grew by %ld KiB (bound %d KiB)", rss1 - rss0,
		      RSS_BOUND_KIB);
	ck_assert_int_ge(t.eproto, 1);
	ck_assert_int_ge(t.eversion, 1);
	ck_assert_int_ge(t.emsgsize, 1);
	ck_assert_int_ge(t.dropped, 1);

	svc_nng_close(c2.s, 5000, "a test control socket");
	svc_nng_close(c.s, 5000, "a test control socket");
	free(buf);
	free(rbuf);
	int rc = stop_daemon();
	if (rc != 0)
		print_log_tail();
	ck_assert_msg(rc == 0, "morid exited %d after SIGTERM", rc);
}
END_TEST

/* Connections that finish the SP handshake and then say nothing must not lock moractl out:
 * past 512 the daemon closes the longest idle one, so a request on a new connection is served
 * and the first idle connection is the one dropped. */
START_TEST(idle_flood)
{
	enum { FLOOD = 600 };
	start_daemon();
	struct ctl c;
	ctl_open(&c, REPLY_TIMEOUT_MS);
	Mori__StatusReply *st;
	Mori__Reply *keep;
	ck_assert_msg(status_ok(&c, &st, &keep), "no status before the flood (see %s)", log_path);
	mori__reply__free_unpacked(keep, NULL);
	static int fds[FLOOD];
	const uint8_t hello[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
	for (int i = 0; i < FLOOD; i++) {
		fds[i] = unix_connect(ctl_url + strlen("ipc://"), SOCK_STREAM);
		uint8_t theirs[8];
		ck_assert_int_eq(send(fds[i], hello, 8, MSG_NOSIGNAL), 8);
		ck_assert_msg(recv(fds[i], theirs, 8, MSG_WAITALL) == 8, "connection %d: no handshake", i);
	}
	/* a fresh client still gets its answer (its own req socket was opened before the flood and
	 * is now among the oldest: it is closed and redials, which is what nng clients do) */
	struct ctl c2;
	ctl_open(&c2, REPLY_TIMEOUT_MS);
	ck_assert_msg(status_ok(&c2, &st, &keep), "status refused after %d idle connections (see %s)", FLOOD, log_path);
	mori__reply__free_unpacked(keep, NULL);
	expect_closed(fds[0], "the longest idle connection");
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	svc_nng_close(c2.s, 5000, "a test control socket");
	ck_assert_int_eq(stop_daemon(), 0);
}
END_TEST

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	Suite *s = suite_create("fuzz_control");
	TCase *tc = tcase_create("fuzz");
	tcase_set_timeout(tc, 300);
	tcase_add_checked_fixture(tc, NULL, cleanup);
	tcase_add_test(tc, fuzz_control);
	tcase_add_test(tc, idle_flood);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
