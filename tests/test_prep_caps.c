/* What one client can make morid hold with prepared cross-node descriptor lists is capped in
 * bytes as well as counts, and a large list is read and checked in steps on the loop, so other
 * clients' requests are served meanwhile. Eight raw 384 MiB XferPrep requests (the same memfd,
 * sent together on one session) would take morid to 3 GiB, and read at once they would block its
 * loop for seconds each:
 *   - with the default caps they are refused (MORI_ENOMEM naming client_max_list_descs) and
 *     morid's RSS does not move;
 *   - with the caps raised to let them in, a status request on the control socket sent after
 *     the eight is answered before the first of them is (the steps go round robin, so the
 *     first ends near the last); the latencies are printed, not asserted (a loaded machine);
 *   - client_max_list_bytes counts every list of a client, those being read included; a bad
 *     descriptor at the end of a large list is still found (MORI_ERANGE with its index);
 *   - the caps change at reload;
 *   - node-wide caps (node_max_list_bytes, node_max_lists, node_max_regions): several clients,
 *     each within its own caps, are refused when together they would cross one (MORI_ENOMEM
 *     naming it and its value), every list already taken still moves the right bytes, and
 *     room freed is taken again. */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "../libclient/internal.h" /* raw session requests */
#include "harness.h"
#include "ctl_harness.h"
#include "svc/ctl.h"
#include "wire.h"
#include "svc/nng_close.h"

#define BIG_DESCS (1u << 24) /* 384 MiB of descriptors */
#ifdef __SANITIZE_ADDRESS__
#define SLOW 4
#else
#define SLOW 1
#endif

static struct test_daemon A, B;
static char aa[64], ab[64];

static void start_pair(const char *const *more)
{
	const char *xa[16] = {"--listen", aa};
	int n = 2;
	for (int i = 0; more && more[i]; i++)
		xa[n++] = more[i];
	xa[n] = NULL;
	const char *xb[] = {"--listen", ab, NULL};
	snprintf(aa, sizeof(aa), "127.0.0.1:%d", free_port());
	snprintf(ab, sizeof(ab), "127.0.0.1:%d", free_port());
	ck_assert_int_eq(daemon_start(&A, xa), 0);
	ck_assert_int_eq(daemon_start(&B, xb), 0); /* both accept on --listen by now */
}

static void stop_pair(void)
{
	daemon_stop(&A);
	daemon_stop(&B);
	daemon_cleanup(&A);
	daemon_cleanup(&B);
}

struct side {
	mori_client *c, *ct;
	mori_mem *l, *r, *rr;
};

static void side_open(struct side *s)
{
	OK(mori_client_open(B.dir, "target", &s->ct));
	OK(mori_mem_alloc(s->ct, 1 << 20, MORI_MEM_HOST, &s->r));
	OK(mori_mem_publish(s->r, "caps/r"));
	OK(mori_client_open(A.dir, "preparer", &s->c));
	OK(mori_mem_alloc(s->c, 1 << 20, MORI_MEM_HOST, &s->l));
	OK(mori_mem_open_remote(s->c, ab, "caps/r", &s->rr));
}

static void side_close(struct side *s)
{
	mori_mem_deregister(s->rr);
	mori_client_close(s->c);
	mori_client_close(s->ct);
}

/* A memfd of n descriptors (4 KiB blocks inside the 1 MiB regions); the last one out of range
 * when bad_last. */
static int desc_memfd(uint32_t n, int bad_last)
{
	int fd = memfd_create("descs", MFD_CLOEXEC);
	size_t bytes = (size_t)n * sizeof(mori_desc);
	ck_assert_int_eq(ftruncate(fd, (off_t)bytes), 0);
	mori_desc *d = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert(d != MAP_FAILED);
	for (uint32_t i = 0; i < n; i++)
		d[i] = (mori_desc){(i % 256) * 4096ull, (i % 256) * 4096ull, 4096};
	if (bad_last)
		d[n - 1].remote_offset = 1 << 20;
	munmap(d, bytes);
	return fd;
}

/* Send a XferPrep of n descriptors from fd with request id `id`, without waiting for its reply. */
static void prep_send(struct side *s, int fd, uint32_t n, uint64_t id)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__XferPrep xp = MORI__XFER_PREP__INIT;
	xp.local_region = s->l->region_id;
	xp.remote_ref = s->rr->remote_ref;
	xp.count = n;
	req.id = id;
	req.body_case = MORI__REQUEST__BODY_XFER_PREP;
	req.xfer_prep = &xp;
	uint8_t *buf;
	size_t len;
	ck_assert_int_eq(wire_pack_request(&req, &buf, &len), MORI_OK);
	ck_assert_int_eq(wire_send(s->c->sock, buf, len, &fd, 1), 0);
	free(buf);
}

/* The next reply on the session (its code; list id in *list). */
static int prep_reply(struct side *s, uint64_t *id, uint64_t *list, char *msg, size_t len, int timeout_ms)
{
	uint8_t *in = malloc(WIRE_SEQPACKET_MAX);
	int fds[WIRE_MAX_FDS], nfds = 0;
	struct pollfd pf = {.fd = s->c->sock, .events = POLLIN};
	ssize_t n = poll(&pf, 1, timeout_ms) == 1 ? wire_recv(s->c->sock, in, WIRE_SEQPACKET_MAX, fds, &nfds) : -ETIMEDOUT;
	ck_assert_msg(n > 0, "no reply within %d ms (%zd)", timeout_ms, n);
	Mori__Reply *rep = mori__reply__unpack(NULL, (size_t)n, in);
	free(in);
	ck_assert_ptr_nonnull(rep);
	int code = rep->code;
	*id = rep->id;
	*list = rep->body_case == MORI__REPLY__BODY_XFER_PREP ? rep->xfer_prep->list_id : 0;
	snprintf(msg, len, "%s", rep->message ? rep->message : "");
	mori__reply__free_unpacked(rep, NULL);
	return code;
}

static int prep_sync(struct side *s, int fd, uint32_t n, uint64_t *list, char *msg, size_t len)
{
	static uint64_t id = 1000000;
	uint64_t got;
	prep_send(s, fd, n, ++id);
	int rc = prep_reply(s, &got, list, msg, len, 30000 * SLOW);
	ck_assert_uint_eq(got, id);
	return rc;
}

static void unprep(struct side *s, uint64_t list)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__XferUnprep u = MORI__XFER_UNPREP__INIT;
	Mori__Reply *rep;
	u.list_id = list;
	req.body_case = MORI__REQUEST__BODY_XFER_UNPREP;
	req.xfer_unprep = &u;
	OK(client_rpc(s->c, &req, NULL, 0, &rep, NULL, NULL));
	mori__reply__free_unpacked(rep, NULL);
}

/* ---- status latency, measured from another thread ---- */

struct probe {
	char url[400];
	volatile int stop, ready;
	uint64_t lat[200000], at[200000]; /* latency, and when it started */
	volatile size_t n;
};

static void *probe_main(void *arg)
{
	struct probe *p = arg;
	nng_socket s; /* one connection, as a monitoring client keeps: the daemon's latency, not nng's set-up */
	ck_assert_int_eq(nng_req0_open(&s), 0);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000);
	nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	ck_assert_int_eq(nng_dial(s, p->url, NULL, 0), 0);
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__StatusRequest sr = MORI__STATUS_REQUEST__INIT;
	req.body_case = MORI__REQUEST__BODY_STATUS;
	req.status = &sr;
	size_t len = mori__request__get_packed_size(&req);
	int first = 1;
	while (!p->stop && p->n < sizeof(p->lat) / sizeof(p->lat[0])) {
		nng_msg *m;
		uint64_t t = mori_now_us();
		if (nng_msg_alloc(&m, len) == 0) {
			mori__request__pack(&req, nng_msg_body(m));
			if (nng_sendmsg(s, m, 0) != 0)
				nng_msg_free(m);
			else if (nng_recvmsg(s, &m, 0) == 0)
				nng_msg_free(m);
		}
		if (first) { /* the first one also waited for the connection */
			first = 0;
			p->ready = 1;
		} else {
			p->at[p->n] = t;
			p->lat[p->n++] = mori_now_us() - t;
		}
		usleep(2000);
	}
	svc_nng_close(s, 5000, "the status probe socket");
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

START_TEST(default_caps_refuse)
{
	start_pair(NULL);
	struct side s;
	side_open(&s);
	int fd = desc_memfd(BIG_DESCS, 0);
	long rss0 = proc_rss_kib(A.pid);
	uint64_t t0 = mori_now_us(), id, list;
	char msg[300];
	for (int i = 0; i < 8; i++)
		prep_send(&s, fd, BIG_DESCS, 100 + (uint64_t)i);
	for (int i = 0; i < 8; i++) {
		int rc = prep_reply(&s, &id, &list, msg, sizeof(msg), 10000);
		ck_assert_msg(rc == MORI_ENOMEM && strstr(msg, "client_max_list_descs"), "prep %d: %s %s", i,
			      mori_strerror(rc), msg);
	}
	uint64_t dt = mori_now_us() - t0;
	long rss1 = proc_rss_kib(A.pid);
	fprintf(stderr, "# default caps: eight 384 MiB preps refused in %llu us; morid RSS %ld -> %ld KiB\n",
		(unsigned long long)dt, rss0, rss1);
	ck_assert_int_lt(rss1 - rss0, 32 * 1024);
	close(fd);
	side_close(&s);
	stop_pair();
}
END_TEST

START_TEST(big_lists_keep_latency)
{
	const char *more[] = {"--client-max-list-descs", "16777216", "--client-max-list-bytes", "4294967296",
			      "--node-max-list-bytes", "4294967296", NULL};
	start_pair(getenv("MORI_TEST_OLD_DAEMON") ? NULL : more); /* a morid without these options took them all */
	struct side s;
	side_open(&s);
	int fd = desc_memfd(BIG_DESCS, 0);
	struct probe *p = calloc(1, sizeof(*p));
	ctl_url(p->url, sizeof(p->url), A.dir);
	pthread_t th;
	pthread_create(&th, NULL, probe_main, p);
	for (uint64_t until = mori_now_us() + 30000000ull * SLOW; !p->ready && mori_now_us() < until;)
		usleep(1000);
	ck_assert_msg(p->ready, "the status probe never got a reply");
	uint64_t t0 = mori_now_us(), t_first = 0, id, lists[8];
	char msg[300];
	for (int i = 0; i < 8; i++)
		prep_send(&s, fd, BIG_DESCS, 200 + (uint64_t)i);
	for (int i = 0; i < 8; i++) {
		int rc = prep_reply(&s, &id, &lists[i], msg, sizeof(msg), 120000 * SLOW);
		ck_assert_msg(rc == MORI_OK, "prep %d: %s %s", i, mori_strerror(rc), msg);
		if (i == 0)
			t_first = mori_now_us();
	}
	uint64_t dt = mori_now_us() - t0;
	long rss = proc_rss_kib(A.pid);
	p->stop = 1;
	pthread_join(th, NULL);
	size_t served = 0; /* status requests sent after the preps and answered before the first */
	for (size_t i = 0; i < p->n; i++)
		served += p->at[i] >= t0 && p->at[i] + p->lat[i] <= t_first;
	for (size_t i = 0; i < p->n; i++)
		if (p->lat[i] > 20000)
			fprintf(stderr, "# slow status request: %.1f ms, %.3f s after the preps were sent\n", p->lat[i] / 1e3,
				((double)p->at[i] - (double)t0) / 1e6);
	qsort(p->lat, p->n, sizeof(p->lat[0]), cmp_u64);
	uint64_t p50 = p->lat[p->n / 2], p99 = p->lat[p->n * 99 / 100], mx = p->lat[p->n - 1];
	fprintf(stderr, "# eight 384 MiB preps accepted in %.2f s (morid RSS %ld MiB); status latency meanwhile: "
		"p50 %.2f ms, p99 %.2f ms, max %.2f ms over %zu requests, %zu of them answered before the first prep\n",
		dt / 1e6, rss / 1024, p50 / 1e3, p99 / 1e3, mx / 1e3, (size_t)p->n, served);
	ck_assert_msg(served > 0, "no status request was answered while the preps were read");
	/* lists still prepare while those are held */
	mori_xfer_list *pl;
	mori_desc d = {0, 0, 4096};
	OK(mori_xfer_prep(s.l, s.rr, &d, 1, &pl));
	for (int i = 0; i < 8; i++)
		unprep(&s, lists[i]);
	long after = proc_rss_kib(A.pid);
	fprintf(stderr, "# after unprep: morid RSS %ld MiB\n", after / 1024);
	ck_assert_int_lt(after, rss - 2 * 1024 * 1024); /* the 3 GiB went */
	mori_xfer_list_free(pl);
	free(p);
	close(fd);
	side_close(&s);
	stop_pair();
}
END_TEST

START_TEST(bytes_per_client)
{
	const char *more[] = {"--client-max-list-descs", "16777216", "--client-max-list-bytes", "67108864", NULL};
	start_pair(more);
	struct side s;
	side_open(&s);
	uint32_t n = 1u << 20; /* 24 MiB: two fit in 64 MiB, a third does not */
	int fd = desc_memfd(n, 0);
	uint64_t l1, l2, l3;
	char msg[300];
	OK(prep_sync(&s, fd, n, &l1, msg, sizeof(msg)));
	OK(prep_sync(&s, fd, n, &l2, msg, sizeof(msg)));
	int rc = prep_sync(&s, fd, n, &l3, msg, sizeof(msg));
	ck_assert_msg(rc == MORI_ENOMEM && strstr(msg, "client_max_list_bytes"), "third: %s %s", mori_strerror(rc), msg);
	unprep(&s, l1);
	OK(prep_sync(&s, fd, n, &l3, msg, sizeof(msg)));
	/* two sent together: the second is counted while the first is still being read */
	unprep(&s, l2);
	unprep(&s, l3);
	uint64_t id, la = 0, lb = 0;
	prep_send(&s, fd, n, 301);
	prep_send(&s, fd, n, 302);
	prep_send(&s, fd, n, 303);
	int codes[3];
	for (int i = 0; i < 3; i++) {
		uint64_t l;
		int c = prep_reply(&s, &id, &l, msg, sizeof(msg), 30000 * SLOW);
		codes[id - 301] = c;
		if (id == 301)
			la = l;
		if (id == 302)
			lb = l;
	}
	ck_assert_int_eq(codes[0], MORI_OK);
	ck_assert_int_eq(codes[1], MORI_OK);
	ck_assert_int_eq(codes[2], MORI_ENOMEM);
	unprep(&s, la);
	unprep(&s, lb);
	close(fd);
	/* a large list is checked to its last descriptor, in steps */
	fd = desc_memfd(2u << 20, 1);
	rc = prep_sync(&s, fd, 2u << 20, &l1, msg, sizeof(msg));
	ck_assert_msg(rc == MORI_ERANGE && strstr(msg, "descriptor 2097151"), "bad last: %s %s", mori_strerror(rc), msg);
	close(fd);
	side_close(&s);
	stop_pair();
}
END_TEST

/* ---- node-wide caps: many clients, each within its own caps ---- */

#define NODE_CLIENTS 4
#define NODE_DESCS 65536u /* 1.5 MiB of descriptors a list: read in steps */
#define NODE_LIST_BYTES ((uint64_t)NODE_DESCS * sizeof(mori_desc))

/* A list of NODE_DESCS 16-byte blocks covering the 1 MiB regions once, shifted by `shift` blocks. */
static mori_desc *node_descs(uint32_t shift)
{
	mori_desc *d = malloc(NODE_DESCS * sizeof(*d));
	for (uint32_t i = 0; i < NODE_DESCS; i++)
		d[i] = (mori_desc){(uint64_t)i * 16, (uint64_t)((i + shift) % NODE_DESCS) * 16, 16};
	return d;
}

/* Read remote through list (all of it) into l, and check l against the remote bytes as the
 * list maps them (the target region holds byte (i * 7 + 3) at offset i). */
static void node_read_check(mori_xfer_list *list, mori_mem *l, uint32_t shift)
{
	uint32_t *idx = malloc(NODE_DESCS * sizeof(*idx));
	for (uint32_t i = 0; i < NODE_DESCS; i++)
		idx[i] = i;
	uint8_t *p = mori_mem_ptr(l);
	memset(p, 0, 1 << 20);
	mori_xfer *x;
	OK(mori_xfer_submit(list, MORI_XFER_READ, idx, NODE_DESCS, NULL, &x));
	OK(mori_xfer_wait(x, 60000000ll * SLOW));
	mori_xfer_free(x);
	for (uint32_t i = 0; i < (1u << 20); i++) {
		uint32_t r = (((i / 16) + shift) % NODE_DESCS) * 16 + i % 16;
		ck_assert_msg(p[i] == (uint8_t)(r * 7 + 3), "byte %u after the read: %u, want %u", i, p[i],
			      (uint8_t)(r * 7 + 3));
	}
	free(idx);
}

START_TEST(node_caps)
{
	char bytes_cap[32], lists_cap[32], regions_cap[32];
	/* room for 7 lists of 1.5 MiB in bytes, 9 in count; each client alone may hold far more */
	snprintf(bytes_cap, sizeof(bytes_cap), "%llu", (unsigned long long)(7 * NODE_LIST_BYTES));
	snprintf(lists_cap, sizeof(lists_cap), "9");
	snprintf(regions_cap, sizeof(regions_cap), "%d", NODE_CLIENTS + 2);
	const char *more[] = {"--node-max-list-bytes", bytes_cap, "--node-max-lists", lists_cap,
			      "--node-max-regions", regions_cap, NULL};
	start_pair(more);
	mori_client *ct, *c[NODE_CLIENTS];
	mori_mem *r, *l[NODE_CLIENTS], *rr[NODE_CLIENTS];
	OK(mori_client_open(B.dir, "target", &ct));
	OK(mori_mem_alloc(ct, 1 << 20, MORI_MEM_HOST, &r));
	uint8_t *rp = mori_mem_ptr(r);
	for (uint32_t i = 0; i < (1u << 20); i++)
		rp[i] = (uint8_t)(i * 7 + 3);
	OK(mori_mem_publish(r, "node/r"));
	for (int i = 0; i < NODE_CLIENTS; i++) {
		char name[32];
		snprintf(name, sizeof(name), "preparer-%d", i);
		OK(mori_client_open(A.dir, name, &c[i]));
		OK(mori_mem_alloc(c[i], 1 << 20, MORI_MEM_HOST, &l[i]));
		OK(mori_mem_open_remote(c[i], ab, "node/r", &rr[i]));
	}
	/* two lists a client, in turn: the 8th crosses node_max_list_bytes; client 3 is refused,
	 * well within its own client_max_list_bytes */
	mori_xfer_list *ls[NODE_CLIENTS][2] = {{0}};
	mori_desc *ds[NODE_CLIENTS][2];
	int held = 0;
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < NODE_CLIENTS; i++) {
			ds[i][k] = node_descs((uint32_t)(i * 2 + k) * 977);
			int rc = mori_xfer_prep(l[i], rr[i], ds[i][k], NODE_DESCS, &ls[i][k]);
			if (held < 7) {
				ck_assert_msg(rc == MORI_OK, "list %d of client %d: %s %s", k, i, mori_strerror(rc),
					      mori_client_last_error(c[i]));
				held++;
				continue;
			}
			ck_assert_msg(rc == MORI_ENOMEM && strstr(mori_client_last_error(c[i]), "node_max_list_bytes") &&
					      strstr(mori_client_last_error(c[i]), bytes_cap),
				      "the list over the node's bytes: %s %s", mori_strerror(rc), mori_client_last_error(c[i]));
			ls[i][k] = NULL;
		}
	ck_assert_uint_eq(ctl_counter(A.dir, "node_cap_refusals"), 1);
	/* nothing was lost for the others: every list taken moves the right bytes */
	for (int i = 0; i < NODE_CLIENTS; i++)
		for (int k = 0; k < 2; k++)
			if (ls[i][k])
				node_read_check(ls[i][k], l[i], (uint32_t)(i * 2 + k) * 977);
	/* freed, the room comes back: the refused list is taken now */
	OK(mori_xfer_list_free(ls[0][0]));
	ls[0][0] = NULL;
	OK(mori_xfer_prep(l[3], rr[3], ds[3][1], NODE_DESCS, &ls[3][1]));
	node_read_check(ls[3][1], l[3], 7 * 977);
	for (int i = 0; i < NODE_CLIENTS; i++)
		for (int k = 0; k < 2; k++) {
			mori_xfer_list_free(ls[i][k]);
			free(ds[i][k]);
			ls[i][k] = NULL;
		}
	/* in count: nine small lists over the clients, the tenth refused naming node_max_lists */
	mori_desc one = {0, 0, 4096};
	mori_xfer_list *small[10];
	for (int n = 0; n < 9; n++)
		OK(mori_xfer_prep(l[n % NODE_CLIENTS], rr[n % NODE_CLIENTS], &one, 1, &small[n]));
	int rc = mori_xfer_prep(l[1], rr[1], &one, 1, &small[9]);
	ck_assert_msg(rc == MORI_ENOMEM && strstr(mori_client_last_error(c[1]), "node_max_lists (9)"), "tenth: %s %s",
		      mori_strerror(rc), mori_client_last_error(c[1]));
	OK(mori_xfer_list_free(small[4]));
	OK(mori_xfer_prep(l[1], rr[1], &one, 1, &small[4]));
	for (int n = 0; n < 9; n++)
		OK(mori_xfer_list_free(small[n]));
	/* registrations: NODE_CLIENTS regions held, two more fit, the next is refused */
	mori_mem *extra[3];
	OK(mori_mem_alloc(c[0], 4096, MORI_MEM_HOST, &extra[0]));
	OK(mori_mem_alloc(c[1], 4096, MORI_MEM_HOST, &extra[1]));
	rc = mori_mem_alloc(c[2], 4096, MORI_MEM_HOST, &extra[2]);
	ck_assert_msg(rc == MORI_ENOMEM && strstr(mori_client_last_error(c[2]), "node_max_regions") &&
			      strstr(mori_client_last_error(c[2]), regions_cap),
		      "a registration over the node's count: %s %s", mori_strerror(rc), mori_client_last_error(c[2]));
	OK(mori_mem_deregister(extra[0]));
	OK(mori_mem_alloc(c[2], 4096, MORI_MEM_HOST, &extra[2]));
	OK(mori_mem_deregister(extra[1]));
	OK(mori_mem_deregister(extra[2]));
	ck_assert_uint_eq(ctl_counter(A.dir, "node_cap_refusals"), 3);
	for (int i = 0; i < NODE_CLIENTS; i++) {
		mori_mem_deregister(rr[i]);
		mori_client_close(c[i]);
	}
	mori_client_close(ct);
	stop_pair();
}
END_TEST

START_TEST(caps_reload)
{
	char conf[128];
	snprintf(conf, sizeof(conf), "/tmp/mori-caps-%d.conf", (int)getpid());
	FILE *f = fopen(conf, "w");
	fprintf(f, "[morid]\nclient_max_list_descs = 1000\n");
	fclose(f);
	const char *more[] = {"--config", conf, NULL};
	start_pair(more);
	struct side s;
	side_open(&s);
	int fd = desc_memfd(2000, 0);
	uint64_t l;
	char msg[300];
	int rc = prep_sync(&s, fd, 2000, &l, msg, sizeof(msg));
	ck_assert_msg(rc == MORI_ENOMEM && strstr(msg, "client_max_list_descs (1000)"), "%s %s", mori_strerror(rc), msg);
	f = fopen(conf, "w");
	fprintf(f, "[morid]\nclient_max_list_descs = 4000\n");
	fclose(f);
	kill(A.pid, SIGHUP);
	/* the reload is done when the list fits (refused until then) */
	uint64_t until = mori_now_us() + 30000000ull * SLOW;
	while ((rc = prep_sync(&s, fd, 2000, &l, msg, sizeof(msg))) == MORI_ENOMEM && mori_now_us() < until)
		usleep(20000);
	ck_assert_msg(rc == MORI_OK, "after reload: %s %s", mori_strerror(rc), msg);
	close(fd);
	side_close(&s);
	stop_pair();
	unlink(conf);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("prep_caps");
	TCase *t = tcase_create("prep_caps");
	tcase_set_timeout(t, 300);
	tcase_add_test(t, default_caps_refuse);
	tcase_add_test(t, big_lists_keep_latency);
	tcase_add_test(t, bytes_per_client);
	tcase_add_test(t, caps_reload);
	tcase_add_test(t, node_caps);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
