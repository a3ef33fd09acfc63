/* Issue 18, acceptance 4: the peer side fuzzed as the control socket is (test_fuzz_control.c).
 * A morid with a cluster key takes 10 000 random and mutated messages on its peer listener before
 * authenticating and 10 000 after, and 10 000 random and mutated frames on its data port before
 * authenticating (each on a fresh stream: the first bad frame closes it) and 10 000 after (valid
 * frames of every type mutated: offsets, lengths, types, secrets, truncations; garbage; a stream
 * that breaks off mid-payload). Every message gets an answer or closes its link; afterwards the
 * daemon still serves (status, a real verified transfer from another morid), its RSS and fd count
 * are back within a bound, the refusals were counted, and it exits 0 on SIGTERM (under ASan: no
 * leak report). The seed is printed; MORI_TEST_SEED=N repeats a run. */
#include <check.h>
#include <poll.h>
#include <sys/prctl.h>

#include "harness.h"
#include "ctl_harness.h"
#include "peer_harness.h"
#include "svc/ctl.h"

#define N_EACH 10000
#ifdef __SANITIZE_ADDRESS__
#define SLOW 4
#define RSS_BOUND_KIB (96 * 1024)
#else
#define SLOW 1
#define RSS_BOUND_KIB (24 * 1024)
#endif

static struct test_daemon T, A;
static char at[64], aa[64], keyp[64];
static struct auth_key K;
static uint64_t rng;
static uint64_t region_id, region_size;
static uint32_t region_gen;
static uint8_t region_secret[REGION_SECRET_BYTES];

static uint64_t rnd(void) { return test_rand(&rng); }
static uint32_t below(uint32_t n) { return (uint32_t)(rnd() % n); }
static void rnd_bytes(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rnd();
}

static uint64_t counter(struct test_daemon *t, const char *name) { return ctl_counter(t->dir, name); }

/* ---- the peer listener ---- */

/* A valid request of a random kind (what a peer daemon sends), packed into buf. */
static size_t valid_request(uint8_t *buf, size_t cap, uint64_t id)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__PeerHello ph = MORI__PEER_HELLO__INIT;
	Mori__MemLookup ml = MORI__MEM_LOOKUP__INIT;
	Mori__MemOpen mo = MORI__MEM_OPEN__INIT;
	Mori__Handle h = MORI__HANDLE__INIT;
	Mori__PeerAuth pa = MORI__PEER_AUTH__INIT;
	Mori__PeerNotify pn = MORI__PEER_NOTIFY__INIT;
	Mori__PeerNotif n1 = MORI__PEER_NOTIF__INIT, *ns[1] = {&n1};
	Mori__RdmaRegion rr = MORI__RDMA_REGION__INIT;
	Mori__RdmaConnect rc = MORI__RDMA_CONNECT__INIT;
	Mori__StatusRequest st = MORI__STATUS_REQUEST__INIT;
	uint8_t nonce[AUTH_NONCE_BYTES + 8], gid[16];
	rnd_bytes(nonce, sizeof(nonce));
	rnd_bytes(gid, sizeof(gid));
	req.id = id;
	h.epoch = rnd();
	h.region_id = below(4) ? region_id : rnd();
	h.generation = below(2) ? region_gen : (uint32_t)rnd();
	h.size = region_size;
	h.secret.data = region_secret;
	h.secret.len = below(4) ? REGION_SECRET_BYTES : below(REGION_SECRET_BYTES);
	switch (below(9)) {
	case 0:
		ph.protocol_version = below(3) ? MORI_PROTOCOL_VERSION : (uint32_t)rnd();
		ph.epoch = rnd();
		ph.node = below(2) ? "127.0.0.1:1" : "fuzz";
		req.body_case = MORI__REQUEST__BODY_PEER_HELLO;
		req.peer_hello = &ph;
		break;
	case 1:
		ml.name = below(2) ? "fuzz/r" : "nothing";
		ml.from = "127.0.0.1:2";
		req.body_case = MORI__REQUEST__BODY_MEM_LOOKUP;
		req.mem_lookup = &ml;
		break;
	case 2:
		mo.handle = below(8) ? &h : NULL;
		req.body_case = MORI__REQUEST__BODY_MEM_OPEN;
		req.mem_open = &mo;
		break;
	case 3:
		pa.step = below(4);
		pa.nonce.data = nonce;
		pa.nonce.len = below(3) ? AUTH_NONCE_BYTES : below(AUTH_NONCE_BYTES + 8);
		pa.mac.data = nonce;
		pa.mac.len = below(2) ? AUTH_MAC_BYTES : 3;
		pa.node = "127.0.0.1:3";
		req.body_case = MORI__REQUEST__BODY_PEER_AUTH;
		req.peer_auth = &pa;
		break;
	case 4:
		n1.epoch = rnd();
		n1.region_id = h.region_id;
		n1.generation = h.generation;
		n1.secret = h.secret;
		n1.tag = rnd();
		pn.n_notifs = 1;
		pn.notifs = ns;
		req.body_case = MORI__REQUEST__BODY_PEER_NOTIFY;
		req.peer_notify = &pn;
		break;
	case 5:
		rr.epoch = rnd();
		rr.region_id = h.region_id;
		rr.generation = h.generation;
		rr.secret = h.secret;
		req.body_case = MORI__REQUEST__BODY_RDMA_REGION;
		req.rdma_region = &rr;
		break;
	case 6:
		rc.epoch = rnd();
		rc.node = "127.0.0.1:4";
		rc.slot = below(64);
		rc.nqp = below(20);
		rc.qpn = (uint32_t)rnd();
		rc.gid.data = gid;
		rc.gid.len = below(2) ? 16 : 5;
		req.body_case = MORI__REQUEST__BODY_RDMA_CONNECT;
		req.rdma_connect = &rc;
		break;
	case 7: /* a client's request on the peer listener */
		req.body_case = MORI__REQUEST__BODY_STATUS;
		req.status = &st;
		break;
	default:
		req.body_case = MORI__REQUEST__BODY_NICS;
		break;
	}
	Mori__NicsRequest nr = MORI__NICS_REQUEST__INIT;
	if (req.body_case == MORI__REQUEST__BODY_NICS)
		req.nics = &nr;
	size_t n = mori__request__get_packed_size(&req);
	if (n > cap)
		return 0;
	mori__request__pack(&req, buf);
	return n;
}

/* One random or mutated message; 1 when it was answered. */
static int listener_one(struct pctl *pc, uint64_t id, uint8_t *buf)
{
	size_t n;
	switch (below(4)) {
	case 0: /* random bytes */
		n = below(512);
		rnd_bytes(buf, n);
		break;
	case 1: /* a valid request, bit-flipped */
		n = valid_request(buf, 4096, id);
		for (uint32_t k = below(6) + 1; k && n; k--)
			buf[below((uint32_t)n)] ^= (uint8_t)(1u << below(8));
		break;
	case 2: /* a valid request, truncated or extended with junk */
		n = valid_request(buf, 4096, id);
		if (below(2) && n)
			n = below((uint32_t)n);
		else {
			uint32_t more = below(64);
			rnd_bytes(buf + n, more);
			n += more;
		}
		break;
	default:
		n = valid_request(buf, 4096, id);
	}
	Mori__Reply *rep = pctl_raw(pc, buf, n, 2000 * SLOW);
	if (!rep)
		return 0;
	mori__reply__free_unpacked(rep, NULL);
	return 1;
}

static void fuzz_listener(int authenticated, int *answered)
{
	char url[96];
	struct pctl pc;
	snprintf(url, sizeof(url), "tcp://%s", at);
	ck_assert_int_eq(pctl_open(&pc, url, authenticated ? &K : NULL, "127.0.0.1:5"), MORI_OK);
	/* a reply nng loses is asked again (rep0's known refusal of a fast second reply) */
	nng_socket_set_ms(pc.s, NNG_OPT_REQ_RESENDTIME, 200);
	uint8_t *buf = malloc(8192);
	*answered = 0;
	for (int i = 0; i < N_EACH; i++)
		*answered += listener_one(&pc, 1000 + (uint64_t)i, buf);
	free(buf);
	pctl_close(&pc);
}

/* ---- the data port ---- */

static uint32_t dport;

/* Take whatever the daemon sent (answers pile up otherwise); -1 when it closed the stream. */
static int drain(int s)
{
	uint8_t junk[65536];
	for (;;) {
		struct pollfd p = {.fd = s, .events = POLLIN};
		if (poll(&p, 1, 0) != 1)
			return 0;
		ssize_t n = recv(s, junk, sizeof(junk), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return -1;
		if (n < 0)
			return 0;
	}
}

static int fresh_stream(int authenticated)
{
	int s = data_dial("127.0.0.1", dport);
	ck_assert_int_ge(s, 0);
	if (authenticated)
		ck_assert_int_eq(data_handshake(s, &K, 0xf00d, "127.0.0.1:6"), 0);
	return s;
}

/* A frame: a valid one of a random type, mutated, or garbage. Returns 0, or -1 if the write failed. */
static int frame_one(int s, int authenticated)
{
	uint8_t payload[8192];
	struct fhdr h = {0};
	static const uint16_t types[] = {F_WRITE, F_READ, F_ABORT, F_HELLO, F_AUTH,   F_DONE,
					 F_RDATA, F_HELLO_ACK, 0,     99,      F_MSG, F_MSGREP};
	h.type = types[below(authenticated ? 10 : 5) < 4 ? below(3) : below(12)];
	h.xfer = below(4) ? below(64) + 1 : rnd();
	h.region = below(3) ? region_id : rnd();
	h.gen = below(3) ? region_gen : (uint32_t)rnd();
	memcpy(h.key, region_secret, sizeof(h.key));
	if (!below(4))
		h.key[below(16)] ^= 1;
	h.offset = below(2) ? below((uint32_t)region_size) : rnd();
	h.total = below(2) ? below(1 << 20) + 1 : rnd();
	h.deadline_ms = below(2) ? 2000 : (uint32_t)rnd();
	h.flags = (uint16_t)below(4);
	if (h.flags & FF_SIGNAL) { /* frame version 4's signal after the data: its op, word and value */
		h.pad = below(4) ? below(3) + 1 : (uint32_t)rnd();
		h.aux = below(4) ? below((uint32_t)region_size / 8) * 8 : below(2) ? below((uint32_t)region_size) : rnd();
		h.tag = rnd();
	}
	h.code = below(4) ? 0 : (int32_t)rnd();
	uint32_t len = below(4) ? below(4096) : below(sizeof(payload));
	if (h.type == F_READ) {
		h.rlen = below(8) ? below(4096) + 1 : (uint32_t)rnd();
		len = below(8) ? 0 : len;
	}
	if (h.type == F_ABORT)
		len = below(8) ? 0 : len;
	h.len = len;
	rnd_bytes(payload, len);
	if (!below(16)) { /* garbage in place of a header */
		uint8_t g[sizeof(h)];
		rnd_bytes(g, sizeof(g));
		return write(s, g, sizeof(g)) == (ssize_t)sizeof(g) ? 0 : -1;
	}
	if (!below(32)) { /* a header that promises more payload than comes: the stream breaks off */
		h.len = len + 1000;
		if (data_write(s, &h, NULL) != 0)
			return -1;
		return write(s, payload, len) == (ssize_t)len ? -1 : -1; /* the caller starts a new stream */
	}
	return data_write(s, &h, payload);
}

static void fuzz_data(int authenticated, int *streams)
{
	int s = fresh_stream(authenticated);
	*streams = 1;
	for (int i = 0; i < N_EACH; i++) {
		if (!authenticated) {
			/* each attempt on its own stream: a hello (sometimes), then a frame that must not be
			 * served before a valid proof */
			if (below(2)) {
				uint8_t hello[AUTH_NONCE_BYTES + 8];
				rnd_bytes(hello, sizeof(hello));
				struct fhdr hh = {.type = F_HELLO, .code = FRAME_VERSION, .xfer = rnd() | 1, .len = sizeof(hello)};
				data_write(s, &hh, hello);
			}
		}
		int bad = frame_one(s, authenticated) != 0 || drain(s) < 0;
		if (!authenticated || bad) {
			close(s);
			s = fresh_stream(authenticated);
			(*streams)++;
		}
	}
	close(s);
}

/* ---- the run ---- */

static void setup(void)
{
	signal(SIGPIPE, SIG_IGN); /* the daemon closes streams under our writes: that is the point */
	rng = test_seed();
	char asan[512];
	const char *old = getenv("ASAN_OPTIONS");
	snprintf(asan, sizeof(asan), "%s%squarantine_size_mb=4", old ? old : "", old && old[0] ? ":" : "");
	setenv("ASAN_OPTIONS", asan, 1);
	snprintf(keyp, sizeof(keyp), "/tmp/mori-fuzzp-key-%d", (int)getpid());
	ck_assert_int_eq(key_write(keyp, &K), 0);
	snprintf(at, sizeof(at), "127.0.0.1:%d", free_port());
	snprintf(aa, sizeof(aa), "127.0.0.1:%d", free_port());
	const char *xt[] = {"--listen", at, "--cluster-key-file", keyp, "--log-level", "warn", NULL};
	const char *xa[] = {"--listen", aa, "--cluster-key-file", keyp, NULL};
	ck_assert_int_eq(daemon_start(&T, xt), 0);
	ck_assert_int_eq(daemon_start(&A, xa), 0);
	usleep(50000);
}

static void teardown(void)
{
	daemon_stop(&A);
	daemon_stop(&T);
	daemon_cleanup(&A);
	daemon_cleanup(&T);
	unlink(keyp);
}

START_TEST(fuzz_peer)
{
	mori_client *owner;
	mori_mem *r;
	OK(mori_client_open(T.dir, "target", &owner));
	OK(mori_mem_alloc(owner, 1 << 20, MORI_MEM_HOST, &r));
	OK(mori_mem_publish(r, "fuzz/r"));
	uint8_t blob[MORI_MEM_BLOB_MAX];
	size_t bl;
	OK(mori_mem_pack(r, blob, sizeof(blob), &bl));
	Mori__Handle *h = blob_handle(blob, bl);
	region_id = h->region_id;
	region_gen = h->generation;
	region_size = h->size;
	memcpy(region_secret, h->secret.data, REGION_SECRET_BYTES);
	mori__handle__free_unpacked(h, NULL);
	char url[96];
	struct pctl pc;
	snprintf(url, sizeof(url), "tcp://%s", at);
	ck_assert_int_eq(pctl_open(&pc, url, &K, "127.0.0.1:5"), MORI_OK);
	dport = pctl_data_port(&pc, NULL);
	ck_assert_uint_ne(dport, 0);
	pctl_close(&pc);
	long rss0 = proc_rss_kib(T.pid);
	int fds0 = proc_fds(T.pid);
	uint64_t refused0 = counter(&T, "peer_auth_refused"), dropped0 = counter(&T, "data_handshakes_dropped");
	int ans_unauth, ans_auth, st_unauth, st_auth;
	fuzz_listener(0, &ans_unauth);
	fuzz_listener(1, &ans_auth);
	fuzz_data(0, &st_unauth);
	fuzz_data(1, &st_auth);
	usleep(300000 * SLOW);
	uint64_t refused = counter(&T, "peer_auth_refused") - refused0;
	/* a slow daemon (ASan) holds at most 128 unauthenticated streams: the oldest are dropped,
	 * counted as data_handshakes_dropped, before their early frame is refused */
	uint64_t dropped = counter(&T, "data_handshakes_dropped") - dropped0;
	long rss1 = proc_rss_kib(T.pid);
	int fds1 = proc_fds(T.pid);
	fprintf(stderr, "# peer listener: %d/%d answered unauthenticated, %d/%d authenticated; data port: %d streams "
		"unauthenticated, %d authenticated; %llu refusals and %llu unauthenticated streams dropped counted; RSS "
		"%ld -> %ld KiB, fds %d -> %d\n",
		ans_unauth, N_EACH, ans_auth, N_EACH, st_unauth, st_auth, (unsigned long long)refused,
		(unsigned long long)dropped, rss0, rss1, fds0, fds1);
	ck_assert_int_ge(ans_unauth, N_EACH * 95 / 100);
	ck_assert_int_ge(ans_auth, N_EACH * 95 / 100);
	ck_assert_uint_ge(refused + dropped, N_EACH); /* every unauthenticated request, every early frame */
	ck_assert_msg(rss1 - rss0 < RSS_BOUND_KIB, "RSS grew by %ld KiB", rss1 - rss0);
	ck_assert_msg(fds1 <= fds0 + 4, "fds %d -> %d", fds0, fds1);
	/* still serving: a real peer's verified transfer, with its notification */
	mori_client *c;
	mori_mem *l, *m;
	OK(mori_client_open(A.dir, "after", &c));
	OK(mori_mem_alloc(c, 1 << 20, MORI_MEM_HOST, &l));
	for (int i = 0; i < 1 << 20; i++)
		((uint8_t *)mori_mem_ptr(l))[i] = (uint8_t)(i * 7);
	OK(mori_mem_open_remote(c, at, "fuzz/r", &m));
	mori_xfer *x;
	mori_xfer_opts o = {.size = sizeof(o), .has_notif = 1, .notif_tag = 4242};
	OK(mori_xfer_write(l, 0, m, 0, 1 << 20, &o, &x));
	OK(mori_xfer_wait(x, 10000000));
	mori_xfer_free(x);
	ck_assert_int_eq(memcmp(mori_mem_ptr(l), mori_mem_ptr(r), 1 << 20), 0);
	mori_notif nb[64];
	int got = 0, k;
	uint64_t until = mori_now_us() + 3000000;
	while (mori_now_us() < until && (k = mori_notif_poll(owner, nb, 64, 100000)) >= 0)
		for (int i = 0; i < k; i++)
			got += nb[i].tag == 4242;
	ck_assert_int_eq(got, 1);
	mori_client_close(c);
	mori_client_close(owner);
	ck_assert_int_eq(daemon_stop(&T), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fuzz_peer");
	TCase *t = tcase_create("fuzz_peer");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 600);
	tcase_add_test(t, fuzz_peer);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
