/* Issue 18, acceptance 1: region handles are capabilities. A region its owner never published
 * and never packed is unreachable: blobs forged with any region id, epoch and generation (the
 * region's true ones read from the owner's own handle, the old guessable scheme epoch ^ id *
 * 2654435761, or random) are refused on the same node and across nodes, through libmori and by
 * hand on the wire (session requests, an authenticated peer's MemOpen and PeerNotify, data
 * frames); 10 000 random forgeries each way are all refused. Only the owner's blob opens, and no
 * listing shows the secret. A published name is a grant, narrowed by an access list
 * (mori_mem_publish_access): nodes and uids it does not name are refused; moractl memory shows it.
 * Two morids on loopback, with a cluster key (tests/peer_harness.h plays a peer daemon). */
#include <check.h>
#include <pwd.h>
#include <sys/prctl.h>

#include "../libclient/internal.h" /* the owner's true handle fields, and raw session requests */
#include "harness.h"
#include "ctl_harness.h"
#include "peer_harness.h"
#include "svc/ctl.h"
#include "wire.h"

#define NFORGE 10000

static struct test_daemon DA, DB;
static char addrA[64], addrB[64], keyp[64];
static struct auth_key K;
static int nokey; /* MORI_TEST_NO_KEY=1: daemons without a cluster key (to run against a morid older than it) */

static int start_node(struct test_daemon *t, char *addr, const char *const *more)
{
	const char *extra[24] = {"--listen", addr, "--cluster-key-file", keyp};
	int n = nokey ? 2 : 4;
	snprintf(addr, 64, "127.0.0.1:%d", free_port());
	for (int i = 0; more && more[i] && n < 22; i++)
		extra[n++] = more[i];
	extra[n] = NULL;
	if (daemon_start(t, extra) != 0)
		return -1;
	usleep(50000); /* the peer listener binds right after the session socket */
	return 0;
}

static void setup(void)
{
	snprintf(keyp, sizeof(keyp), "/tmp/mori-forge-key-%d", (int)getpid());
	nokey = getenv("MORI_TEST_NO_KEY") != NULL;
	ck_assert_int_eq(key_write(keyp, &K), 0);
	if (nokey)
		K.on = 0;
	ck_assert_int_eq(start_node(&DA, addrA, NULL), 0);
	ck_assert_int_eq(start_node(&DB, addrB, NULL), 0);
}

static void teardown(void)
{
	daemon_stop(&DA);
	daemon_stop(&DB);
	daemon_cleanup(&DA);
	daemon_cleanup(&DB);
	unlink(keyp);
}

/* A blob of handle h, as anyone can make one. */
static size_t blob_of(const Mori__Handle *h, uint8_t blob[MORI_MEM_BLOB_MAX])
{
	size_t n = mori__handle__get_packed_size(h);
	ck_assert_uint_lt(n + 1, MORI_MEM_BLOB_MAX + 1);
	blob[0] = WIRE_BLOB_MAGIC;
	mori__handle__pack(h, blob + 1);
	return n + 1;
}

/* The handle region m's owner would pack, without (secret NULL) or with the given secret. */
static void handle_of(const mori_mem *m, const char *node, uint64_t epoch, const uint8_t *secret, Mori__Handle *h)
{
	mori__handle__init(h);
	h->node = (char *)node;
	h->epoch = epoch;
	h->region_id = m->region_id;
	h->generation = m->generation;
	h->size = m->size;
	h->kind = (uint32_t)m->kind;
	if (secret) {
		h->secret.data = (uint8_t *)secret;
		h->secret.len = REGION_SECRET_BYTES;
	}
}

/* Open by handle through libmori (the blob path); a region opened by mistake is closed again. */
static int try_blob(mori_client *c, const Mori__Handle *h)
{
	uint8_t blob[MORI_MEM_BLOB_MAX];
	mori_mem *m = NULL;
	int rc = mori_mem_unpack(c, blob, blob_of(h, blob), &m);
	if (rc == MORI_OK)
		mori_mem_deregister(m);
	return rc;
}

/* Open by handle on the session socket by hand: what a client that skips libmori's checks sends. */
static int try_raw(mori_client *c, Mori__Handle *h)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__MemOpen mo = MORI__MEM_OPEN__INIT;
	Mori__Reply *rep = NULL;
	int fds[WIRE_MAX_FDS], nfds = 0;
	mo.handle = h;
	req.body_case = MORI__REQUEST__BODY_MEM_OPEN;
	req.mem_open = &mo;
	int rc = client_rpc(c, &req, NULL, 0, &rep, fds, &nfds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (rep) {
		if (rep->body_case == MORI__REPLY__BODY_MEM_OPEN && rep->mem_open->remote) {
			Mori__Request cl = MORI__REQUEST__INIT;
			Mori__MemClose mc = MORI__MEM_CLOSE__INIT;
			Mori__Reply *r2;
			mc.region_id = rep->mem_open->remote_ref;
			cl.body_case = MORI__REQUEST__BODY_MEM_CLOSE;
			cl.mem_close = &mc;
			if (client_rpc(c, &cl, NULL, 0, &r2, NULL, NULL) == MORI_OK)
				mori__reply__free_unpacked(r2, NULL);
		}
		mori__reply__free_unpacked(rep, NULL);
	}
	return rc;
}

static void assert_refused(int rc, const char *what, uint64_t i)
{
	ck_assert_msg(rc == MORI_ESTALE || rc == MORI_EPERM || rc == MORI_ENOENT,
		      "%s %llu was not refused: %s (%s)", what, (unsigned long long)i, mori_strerror(rc),
		      mori_client_last_error(NULL));
}

/* No listing of the daemon carries the secret: its bytes appear nowhere in moractl's replies. */
static void assert_not_listed(struct test_daemon *t, const uint8_t *secret)
{
	for (uint32_t what = 1; what <= 4; what++) {
		Mori__Reply *rep = ctl_list(t->dir, what);
		size_t n = mori__reply__get_packed_size(rep);
		uint8_t *b = malloc(n);
		mori__reply__pack(rep, b);
		ck_assert_msg(!memmem(b, n, secret, REGION_SECRET_BYTES), "list %u shows a region's secret", what);
		free(b);
		mori__reply__free_unpacked(rep, NULL);
	}
}

START_TEST(same_node)
{
	uint64_t seed = test_seed();
	mori_client *owner, *att;
	mori_mem *r, *mine;
	OK(mori_client_open(DA.dir, "owner", &owner));
	OK(mori_client_open(DA.dir, "attacker", &att));
	OK(mori_mem_alloc(owner, 1 << 20, MORI_MEM_HOST, &r)); /* never published, never packed */
	memset(mori_mem_ptr(r), 0x5a, 1 << 20);
	OK(mori_mem_alloc(att, 4096, MORI_MEM_HOST, &mine));
	uint64_t epoch = mine->epoch;
	const char *node = mine->node;
	Mori__Handle h;
	uint8_t wrong[REGION_SECRET_BYTES];
	/* the true id, generation, size and kind, without the secret or with a wrong one */
	handle_of(r, node, epoch, NULL, &h);
	assert_refused(try_raw(att, &h), "true id and generation, no secret", 0);
	ck_assert_int_eq(try_blob(att, &h), MORI_EPERM); /* libmori knows a secretless blob opens nothing */
	memcpy(wrong, r->secret, sizeof(wrong));
	wrong[7] ^= 0x80;
	handle_of(r, node, epoch, wrong, &h);
	assert_refused(try_blob(att, &h), "true id and generation, one bit of the secret off", 0);
	/* the old scheme: sequential ids around the attacker's own, generation epoch ^ id * 2654435761 */
	for (uint64_t id = mine->region_id > 64 ? mine->region_id - 64 : 1; id < mine->region_id + 64; id++) {
		mori_mem fake = *r;
		fake.region_id = id;
		fake.generation = (uint32_t)(epoch ^ (id * 2654435761u)) | 1u;
		handle_of(&fake, node, epoch, NULL, &h);
		if (id != mine->region_id)
			assert_refused(try_raw(att, &h), "computed handle of region", id);
		fake.region_id = id == mine->region_id ? r->region_id : id;
		handle_of(&fake, node, epoch, NULL, &h);
		assert_refused(try_raw(att, &h), "computed handle of region", id);
	}
	/* ids are not small and sequential */
	ck_assert_uint_gt(r->region_id > mine->region_id ? r->region_id - mine->region_id : mine->region_id - r->region_id,
			  1000);
	/* 10 000 random forgeries: random ids (small or any), generations and secrets */
	for (int i = 0; i < NFORGE; i++) {
		mori_mem fake = *r;
		uint8_t sec[REGION_SECRET_BYTES];
		for (int k = 0; k < REGION_SECRET_BYTES; k += 8) {
			uint64_t v = test_rand(&seed);
			memcpy(sec + k, &v, 8);
		}
		fake.region_id = i % 3 == 0 ? r->region_id : i % 3 == 1 ? 1 + test_rand(&seed) % 100000 : test_rand(&seed) >> 3;
		fake.generation = i % 5 == 0 ? r->generation : (uint32_t)test_rand(&seed);
		handle_of(&fake, node, epoch, i & 1 ? sec : NULL, &h);
		assert_refused(i & 1 ? try_blob(att, &h) : try_raw(att, &h), "random forgery", (uint64_t)i);
	}
	/* the owner's blob opens (the secret is what grants), and it names size and kind exactly */
	ck_assert_uint_eq(r->secret_len, REGION_SECRET_BYTES);
	uint8_t blob[MORI_MEM_BLOB_MAX];
	size_t bl;
	mori_mem *o;
	OK(mori_mem_pack(r, blob, sizeof(blob), &bl));
	OK(mori_mem_unpack(att, blob, bl, &o));
	mori_xfer *x;
	OK(mori_xfer_read(mine, 0, o, 100, 8, NULL, &x));
	OK(mori_xfer_wait(x, 5000000));
	mori_xfer_free(x);
	ck_assert_uint_eq(((uint8_t *)mori_mem_ptr(mine))[3], 0x5a);
	OK(mori_mem_deregister(o));
	handle_of(r, node, epoch, r->secret, &h);
	OK(try_raw(att, &h));
	h.size = r->size + 4096; /* a larger size than registered: refused */
	assert_refused(try_raw(att, &h), "true handle with a larger size", 0);
	h.size = r->size;
	h.kind = MORI_MEM_VRAM;
	assert_refused(try_raw(att, &h), "true handle of another kind", 0);
	/* and the opener's own blob of it opens nothing */
	OK(mori_mem_unpack(att, blob, bl, &o));
	OK(mori_mem_pack(o, blob, sizeof(blob), &bl));
	ck_assert_int_eq(mori_mem_unpack(owner, blob, bl, &mine), MORI_EPERM);
	OK(mori_mem_deregister(o));
	assert_not_listed(&DA, r->secret);
	mori_client_close(att);
	mori_client_close(owner);
}
END_TEST

START_TEST(cross_node)
{
	uint64_t seed = test_seed();
	mori_client *owner, *att;
	mori_mem *r, *decoy, *l;
	OK(mori_client_open(DB.dir, "owner", &owner));
	OK(mori_mem_alloc(owner, 1 << 20, MORI_MEM_HOST, &r)); /* never published, never packed */
	memset(mori_mem_ptr(r), 0x5a, 1 << 20);
	OK(mori_mem_alloc(owner, 4096, MORI_MEM_HOST, &decoy));
	OK(mori_mem_publish(decoy, "forge/decoy"));
	OK(mori_client_open(DA.dir, "attacker", &att));
	OK(mori_mem_alloc(att, 1 << 20, MORI_MEM_HOST, &l));
	mori_mem *d;
	OK(mori_mem_open_remote(att, addrB, "forge/decoy", &d)); /* B's epoch and node, as any opener knows them */
	uint64_t epoch = d->epoch;
	Mori__Handle h;
	uint8_t wrong[REGION_SECRET_BYTES];
	memcpy(wrong, r->secret, sizeof(wrong));
	wrong[0] ^= 1;
	handle_of(r, addrB, epoch, wrong, &h);
	assert_refused(try_blob(att, &h), "true id and generation across nodes, wrong secret", 0);
	handle_of(r, addrB, epoch, NULL, &h);
	assert_refused(try_raw(att, &h), "true id and generation across nodes, no secret", 0);
	for (int i = 0; i < NFORGE; i++) {
		mori_mem fake = *r;
		uint8_t sec[REGION_SECRET_BYTES];
		for (int k = 0; k < REGION_SECRET_BYTES; k += 8) {
			uint64_t v = test_rand(&seed);
			memcpy(sec + k, &v, 8);
		}
		fake.region_id = i % 3 == 0 ? r->region_id : i % 3 == 1 ? 1 + test_rand(&seed) % 100000 : test_rand(&seed) >> 3;
		fake.generation = i % 5 == 0 ? r->generation : (uint32_t)(epoch ^ (fake.region_id * 2654435761u)) | 1u;
		handle_of(&fake, addrB, epoch, i & 1 ? sec : NULL, &h);
		assert_refused(i & 1 ? try_blob(att, &h) : try_raw(att, &h), "random cross-node forgery", (uint64_t)i);
	}
	/* an authenticated peer daemon by hand: MemOpen, PeerNotify and data frames name regions by
	 * their secret too */
	char url[96];
	struct pctl pc;
	snprintf(url, sizeof(url), "tcp://%s", addrB);
	ck_assert_int_eq(pctl_open(&pc, url, K.on ? &K : NULL, "127.0.0.1:1"), MORI_OK);
	uint64_t bep;
	uint32_t dport = pctl_data_port(&pc, &bep);
	ck_assert_uint_eq(bep, epoch);
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__MemOpen mo = MORI__MEM_OPEN__INIT;
	handle_of(r, addrB, epoch, wrong, &h);
	mo.handle = &h;
	req.id = 10;
	req.body_case = MORI__REQUEST__BODY_MEM_OPEN;
	req.mem_open = &mo;
	Mori__Reply *rep = pctl_call(&pc, &req, 3000);
	ck_assert_ptr_nonnull(rep);
	ck_assert_int_eq(rep->code, MORI_ESTALE);
	mori__reply__free_unpacked(rep, NULL);
	handle_of(r, addrB, epoch, r->secret, &h); /* the real secret: served */
	rep = pctl_call(&pc, &req, 3000);
	ck_assert_int_eq(rep->code, 0);
	mori__reply__free_unpacked(rep, NULL);
	Mori__PeerNotif pn = MORI__PEER_NOTIF__INIT, *pns[1] = {&pn};
	Mori__PeerNotify pny = MORI__PEER_NOTIFY__INIT;
	pn.epoch = epoch;
	pn.region_id = r->region_id;
	pn.generation = r->generation;
	pn.secret.data = wrong;
	pn.secret.len = sizeof(wrong);
	pn.tag = 99;
	pny.n_notifs = 1;
	pny.notifs = pns;
	Mori__Request nreq = MORI__REQUEST__INIT;
	nreq.id = 11;
	nreq.body_case = MORI__REQUEST__BODY_PEER_NOTIFY;
	nreq.peer_notify = &pny;
	rep = pctl_call(&pc, &nreq, 3000);
	ck_assert_ptr_nonnull(rep);
	ck_assert_int_eq(rep->code, 0);
	ck_assert_uint_eq(rep->body_case, MORI__REPLY__BODY_PEER_NOTIFY);
	ck_assert_int_eq(rep->peer_notify->codes[0], MORI_ESTALE);
	mori__reply__free_unpacked(rep, NULL);
	mori_notif nb[4];
	ck_assert_int_eq(mori_notif_poll(owner, nb, 4, 200000), 0); /* the owner got nothing */
	pctl_close(&pc);
	int s = data_dial("127.0.0.1", dport);
	ck_assert_int_ge(s, 0);
	ck_assert_int_eq(data_handshake(s, &K, 0x1234, "127.0.0.1:1"), 0);
	uint8_t junk[512];
	memset(junk, 0xee, sizeof(junk));
	struct fhdr w = {.type = F_WRITE, .xfer = 1, .region = r->region_id, .gen = r->generation, .len = sizeof(junk),
			 .total = sizeof(junk), .deadline_ms = 5000};
	memcpy(w.key, wrong, sizeof(w.key));
	ck_assert_int_eq(data_write(s, &w, junk), 0);
	struct fhdr a = data_read(s, NULL, 0);
	ck_assert_int_eq(a.type, F_DONE);
	ck_assert_int_eq(a.code, MORI_ESTALE);
	struct fhdr rd = {.type = F_READ, .xfer = 2, .region = r->region_id, .gen = r->generation, .rlen = 64,
			  .total = 64, .deadline_ms = 5000};
	memcpy(rd.key, wrong, sizeof(rd.key));
	ck_assert_int_eq(data_write(s, &rd, NULL), 0);
	a = data_read(s, NULL, 0);
	ck_assert_int_eq(a.type, F_RDATA);
	ck_assert_int_eq(a.code, MORI_ESTALE);
	close(s);
	for (int i = 0; i < 1 << 20; i += 4096) /* nothing landed */
		ck_assert_uint_eq(((uint8_t *)mori_mem_ptr(r))[i], 0x5a);
	assert_not_listed(&DB, r->secret);
	assert_not_listed(&DA, r->secret);
	OK(mori_mem_deregister(d));
	mori_client_close(att);
	mori_client_close(owner);
}
END_TEST

/* As uid `uid` (a forked child, root only): open `name` on the node of runtime dir `dir`. */
static int open_as(uid_t uid, const char *dir, const char *name)
{
	pid_t p = fork();
	if (p == 0) {
		mori_client *c;
		mori_mem *m;
		if (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)
			_exit(100);
		int rc = mori_client_open(dir, "other-uid", &c);
		if (rc == MORI_OK)
			rc = mori_mem_open_remote(c, NULL, name, &m);
		_exit(-rc);
	}
	int st;
	waitpid(p, &st, 0);
	return WIFEXITED(st) ? -WEXITSTATUS(st) : -100;
}

START_TEST(access_list)
{
	mori_client *owner, *ca;
	mori_mem *a, *b, *c, *m;
	OK(mori_client_open(DB.dir, "owner", &owner));
	OK(mori_mem_alloc(owner, 4096, MORI_MEM_HOST, &a));
	OK(mori_mem_alloc(owner, 4096, MORI_MEM_HOST, &b));
	OK(mori_mem_alloc(owner, 4096, MORI_MEM_HOST, &c));
	const char *only_a[] = {addrA};
	mori_access acc_a = {.size = sizeof(acc_a), .nodes = only_a, .n_nodes = 1};
	mori_access acc_owner = {.size = sizeof(acc_owner)};
	OK(mori_mem_publish_access(a, "acl/a-only", &acc_a));
	OK(mori_mem_publish_access(b, "acl/owner", &acc_owner));
	OK(mori_mem_publish(c, "acl/all"));
	OK(mori_client_open(DA.dir, "node-a", &ca));
	OK(mori_mem_open_remote(ca, addrB, "acl/a-only", &m));
	OK(mori_mem_deregister(m));
	OK(mori_mem_open_remote(ca, addrB, "acl/all", &m));
	OK(mori_mem_deregister(m));
	ck_assert_int_eq(mori_mem_open_remote(ca, addrB, "acl/owner", &m), MORI_EPERM);
	ck_assert_ptr_nonnull(strstr(mori_client_last_error(ca), "not granted"));
	/* a third node, with the key but not on the list */
	struct test_daemon DC;
	char addrC[64];
	ck_assert_int_eq(start_node(&DC, addrC, NULL), 0);
	mori_client *cc;
	OK(mori_client_open(DC.dir, "node-c", &cc));
	ck_assert_int_eq(mori_mem_open_remote(cc, addrB, "acl/a-only", &m), MORI_EPERM);
	OK(mori_mem_open_remote(cc, addrB, "acl/all", &m));
	OK(mori_mem_deregister(m));
	mori_client_close(cc);
	daemon_stop(&DC);
	daemon_cleanup(&DC);
	/* on the owner's node: its own uid may; publishing again replaces the list */
	mori_client *cb;
	OK(mori_client_open(DB.dir, "same-uid", &cb));
	OK(mori_mem_open_remote(cb, NULL, "acl/owner", &m));
	OK(mori_mem_deregister(m));
	const char *none[] = {"127.0.0.1:1"};
	mori_access acc_other = {.size = sizeof(acc_other), .nodes = none, .n_nodes = 1};
	OK(mori_mem_publish_access(c, "acl/all", &acc_other));
	ck_assert_int_eq(mori_mem_open_remote(ca, addrB, "acl/all", &m), MORI_EPERM);
	/* moractl memory shows each grant */
	Mori__Reply *rep = ctl_list(DB.dir, 2);
	int seen = 0;
	for (size_t i = 0; i < rep->list->n_regions; i++) {
		Mori__RegionInfo *g = rep->list->regions[i];
		if (!strcmp(g->name, "acl/a-only")) {
			ck_assert_ptr_nonnull(strstr(g->access, addrA));
			seen++;
		} else if (!strcmp(g->name, "acl/owner")) {
			ck_assert_str_eq(g->access, "owner");
			seen++;
		}
	}
	ck_assert_int_eq(seen, 2);
	mori__reply__free_unpacked(rep, NULL);
	mori_client_close(cb);
	mori_client_close(ca);
	mori_client_close(owner);
}
END_TEST

/* uids: a daemon that lets uid 65534 connect, a name granted to another uid (root only). */
START_TEST(access_uids)
{
	if (getuid() != 0) {
		fprintf(stderr, "# skipped: the uid checks need root (to act as another uid)\n");
		return;
	}
	struct test_daemon D;
	const char *extra[] = {"--allow-uids", "0,65534", "--socket-mode", "0666", NULL};
	ck_assert_int_eq(daemon_start(&D, extra), 0);
	chmod(D.dir, 0755);
	mori_client *owner;
	mori_mem *a, *b;
	OK(mori_client_open(D.dir, "owner", &owner));
	OK(mori_mem_alloc(owner, 4096, MORI_MEM_HOST, &a));
	OK(mori_mem_alloc(owner, 4096, MORI_MEM_HOST, &b));
	uint32_t nobody = 65534, other = 4242;
	mori_access to_nobody = {.size = sizeof(to_nobody), .uids = &nobody, .n_uids = 1}, to_other = {.size = sizeof(to_other), .uids = &other, .n_uids = 1};
	OK(mori_mem_publish_access(a, "uid/nobody", &to_nobody));
	OK(mori_mem_publish_access(b, "uid/other", &to_other));
	ck_assert_int_eq(open_as(65534, D.dir, "uid/nobody"), MORI_OK);
	ck_assert_int_eq(open_as(65534, D.dir, "uid/other"), MORI_EPERM);
	mori_client_close(owner);
	daemon_stop(&D);
	daemon_cleanup(&D);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("forge");
	TCase *t = tcase_create("forge");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 240);
	tcase_add_test(t, same_node);
	tcase_add_test(t, cross_node);
	tcase_add_test(t, access_list);
	tcase_add_test(t, access_uids);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
