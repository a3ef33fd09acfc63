/* UMBP, the KV store of morid, through its client API (mori_umbp.h) and raw KvRequests: values
 * byte-exact at every size, batches with per-item statuses, exists, remove, clear, versions
 * readers keep, pins, quotas, eviction under the watermarks, clients dying between the steps of a
 * put or a get, forged ids, and a million keys. Expected bytes come from the tests' own generator
 * and checksum (harness.h), never from libmori. */
#include <dirent.h>
#include <pthread.h>
#include <sys/stat.h>
#include <check.h>
#include <sys/mman.h>

#include "harness.h"
#include "../libclient/internal.h" /* raw KvRequests: a lease held across other calls, forged ids */
#include "mori_umbp.h"

#define MIB (1u << 20)

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed | 1;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = test_rand(&s);
		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

static int same(const uint8_t *p, size_t n, uint64_t seed)
{
	uint8_t *want = malloc(n);
	fill(want, n, seed);
	int ok = !memcmp(p, want, n);
	free(want);
	return ok;
}

struct env {
	struct test_daemon D;
	mori_client *c;
	mori_umbp *u;
};

static void env_up(struct env *e, const char *const *extra)
{
	ck_assert_int_eq(daemon_start(&e->D, extra), 0);
	OK(mori_client_open(e->D.dir, "umbp-test", &e->c));
	OK(mori_umbp_open(e->c, NULL, &e->u));
}

static void env_down(struct env *e)
{
	OK(mori_umbp_close(e->u));
	mori_client_close(e->c);
	ck_assert_int_eq(daemon_stop(&e->D), 0);
	daemon_cleanup(&e->D);
}

/* A raw KvRequest with keys (or ids); the reply's fds closed. The reply is the caller's. */
static Mori__Reply *raw(mori_client *c, Mori__KvOp op, const char *const *keys, size_t n, const uint64_t *ids,
			size_t nids, int *fds, int *nfds)
{
	Mori__KvItem it[16], *ip[16];
	for (size_t i = 0; i < n; i++) {
		mori__kv_item__init(&it[i]);
		it[i].key.data = (uint8_t *)keys[i];
		it[i].key.len = strlen(keys[i]);
		it[i].size = 4096;
		ip[i] = &it[i];
	}
	Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
	kq.op = op;
	kq.n_items = n;
	kq.items = ip;
	kq.n_ids = nids;
	kq.ids = (uint64_t *)ids;
	Mori__Request req = MORI__REQUEST__INIT;
	req.body_case = MORI__REQUEST__BODY_KV;
	req.kv = &kq;
	Mori__Reply *rep = NULL;
	int rc = client_rpc(c, &req, NULL, 0, &rep, fds, nfds);
	ck_assert_msg(rc == MORI_OK, "raw KV op %d: %s (%s)", op, mori_strerror(rc), mori_client_last_error(c));
	return rep;
}

static mori_umbp_stats stats(mori_umbp *u)
{
	mori_umbp_stats s = {.size = sizeof(s)};
	OK(mori_umbp_stats_get(u, &s));
	return s;
}

static Mori__KvStats *node_stats(mori_client *c, Mori__Reply **keep)
{
	Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
	kq.op = MORI__KV_OP__KV_STATS;
	kq.node = 1;
	Mori__Request req = MORI__REQUEST__INIT;
	req.body_case = MORI__REQUEST__BODY_KV;
	req.kv = &kq;
	OK(client_rpc(c, &req, NULL, 0, keep, NULL, NULL));
	return (*keep)->kv->stats;
}

START_TEST(roundtrip_sizes)
{
	struct env e;
	const char *extra[] = {"--kv-dram-bytes", "268435456", NULL};
	env_up(&e, extra);
	static const size_t sizes[] = {1, 4096, MIB, 64 * MIB};
	for (size_t i = 0; i < 4; i++) {
		size_t n = sizes[i];
		uint8_t *src = malloc(n), *dst = malloc(n + 64);
		fill(src, n, 100 + i);
		char key[32];
		snprintf(key, sizeof(key), "size-%zu", n);
		OK(mori_umbp_put(e.u, key, strlen(key), src, n));
		memset(dst, 0xA5, n + 64);
		size_t len = 0;
		OK(mori_umbp_get(e.u, key, strlen(key), dst, n + 64, &len));
		ck_assert_uint_eq(len, n);
		ck_assert_msg(same(dst, n, 100 + i), "value of %zu bytes came back different", n);
		for (size_t g = n; g < n + 64; g++)
			ck_assert_uint_eq(dst[g], 0xA5); /* nothing past the value */
		ck_assert_int_eq(mori_umbp_exists(e.u, key, strlen(key)), 1);
		free(src);
		free(dst);
	}
	mori_umbp_stats s = stats(e.u);
	ck_assert_uint_eq(s.dram_keys, 4);
	ck_assert_uint_eq(s.dram_bytes, 1 + 4096 + MIB + 64 * MIB);
	ck_assert_uint_eq(s.hits, 4);
	env_down(&e);
}
END_TEST

START_TEST(batches_and_keys)
{
	struct env e;
	const char *extra[] = {"--kv-dram-bytes", "67108864", NULL};
	env_up(&e, extra);
	enum { N = 600 }; /* over kv_batch_max (256): the library splits */
	static char keys[N][24];
	static uint8_t vals[N][100], out[N][100];
	mori_umbp_item it[N];
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "blk/%05d", i);
		fill(vals[i], sizeof(vals[i]), 7000 + (uint64_t)i);
		it[i] = (mori_umbp_item){.key = {keys[i], strlen(keys[i])}, .buf = vals[i], .size = 10 + (size_t)i % 90,
					 .depth = i};
	}
	size_t ok = 0;
	OK(mori_umbp_batch_put(e.u, it, N, &ok));
	ck_assert_uint_eq(ok, N);
	/* gets: every other key, a miss, a buffer too small */
	for (int i = 0; i < N; i++)
		it[i] = (mori_umbp_item){.key = {keys[i], strlen(keys[i])}, .buf = out[i], .size = sizeof(out[i])};
	it[3].key = (mori_umbp_key){"absent", 6};
	it[5].size = 4;
	OK(mori_umbp_batch_get(e.u, it, N, &ok));
	ck_assert_uint_eq(ok, N - 2);
	ck_assert_int_eq(it[3].status, MORI_ENOENT);
	ck_assert_int_eq(it[5].status, MORI_EMSGSIZE);
	ck_assert_uint_eq(it[5].len, 10 + 5 % 90);
	for (int i = 0; i < N; i++) {
		if (i == 3 || i == 5)
			continue;
		ck_assert_int_eq(it[i].status, MORI_OK);
		ck_assert_uint_eq(it[i].len, 10 + (size_t)i % 90);
		ck_assert_uint_eq(it[i].tier, MORI_UMBP_TIER_DRAM);
		ck_assert_msg(!memcmp(out[i], vals[i], it[i].len), "item %d's bytes differ", i);
	}
	/* moractl kv says the same, in JSON and in its table */
	char cmd[600], line[4096];
	snprintf(cmd, sizeof(cmd), "%s/moractl --runtime-dir %s --json kv", build_dir(), e.D.dir);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t got = fread(line, 1, sizeof(line) - 1, p);
	line[got] = 0;
	ck_assert_int_eq(pclose(p), 0);
	ck_assert_msg(strstr(line, "\"dram_keys\":\t600") || strstr(line, "\"dram_keys\": 600"), "moractl kv --json: %s", line);
	ck_assert_msg(strstr(line, "\"hits\":\t599") || strstr(line, "\"hits\": 599"), "moractl kv --json: %s", line);
	snprintf(cmd, sizeof(cmd), "%s/moractl --runtime-dir %s kv", build_dir(), e.D.dir);
	p = popen(cmd, "r");
	got = fread(line, 1, sizeof(line) - 1, p);
	line[got] = 0;
	ck_assert_int_eq(pclose(p), 0);
	ck_assert_msg(strstr(line, "600 keys"), "moractl kv: %s", line);
	/* exists */
	mori_umbp_key ks[N];
	uint8_t present[N];
	for (int i = 0; i < N; i++)
		ks[i] = (mori_umbp_key){keys[i], strlen(keys[i])};
	ks[400] = (mori_umbp_key){"nope", 4};
	OK(mori_umbp_batch_exists(e.u, ks, N, present));
	for (int i = 0; i < N; i++)
		ck_assert_uint_eq(present[i], i != 400);
	size_t cnt = 0;
	OK(mori_umbp_batch_exists_consecutive(e.u, ks, N, &cnt));
	ck_assert_uint_eq(cnt, 400);
	/* remove, clear */
	OK(mori_umbp_remove(e.u, keys[0], strlen(keys[0])));
	ck_assert_int_eq(mori_umbp_remove(e.u, keys[0], strlen(keys[0])), MORI_ENOENT);
	ck_assert_int_eq(mori_umbp_exists(e.u, keys[0], strlen(keys[0])), 0);
	uint8_t b[8];
	ck_assert_int_eq(mori_umbp_get(e.u, keys[0], strlen(keys[0]), b, 8, NULL), MORI_ENOENT);
	ck_assert_uint_eq(stats(e.u).dram_keys, N - 1);
	OK(mori_umbp_clear(e.u));
	ck_assert_uint_eq(stats(e.u).dram_keys, 0);
	ck_assert_uint_eq(stats(e.u).used_bytes, 0);
	ck_assert_int_eq(mori_umbp_exists(e.u, keys[9], strlen(keys[9])), 0);
	/* a second client of the uid shares the keys */
	mori_client *c2;
	mori_umbp *u2;
	OK(mori_client_open(e.D.dir, "second", &c2));
	OK(mori_umbp_open(c2, NULL, &u2));
	OK(mori_umbp_put(e.u, "shared", 6, vals[1], 77));
	size_t len;
	OK(mori_umbp_get(u2, "shared", 6, out[0], 100, &len));
	ck_assert_uint_eq(len, 77);
	ck_assert(!memcmp(out[0], vals[1], 77));
	OK(mori_umbp_put(u2, "shared", 6, vals[2], 55)); /* and replaces them */
	OK(mori_umbp_get(e.u, "shared", 6, out[0], 100, &len));
	ck_assert_uint_eq(len, 55);
	ck_assert(!memcmp(out[0], vals[2], 55));
	OK(mori_umbp_close(u2));
	mori_client_close(c2);
	env_down(&e);
}
END_TEST

START_TEST(bad_input)
{
	struct env e;
	const char *extra[] = {"--kv-dram-bytes", "134217728", NULL};
	env_up(&e, extra);
	char big[300];
	memset(big, 'k', sizeof(big));
	uint8_t v[16] = {1};
	ck_assert_int_eq(mori_umbp_put(e.u, big, 0, v, 16), MORI_EINVAL);
	ck_assert_int_eq(mori_umbp_put(e.u, big, 257, v, 16), MORI_EINVAL);
	OK(mori_umbp_put(e.u, big, 256, v, 16)); /* the longest key */
	ck_assert_int_eq(mori_umbp_put(e.u, "k", 1, v, 0), MORI_EINVAL);
	uint8_t *huge = malloc(64 * MIB + 1);
	ck_assert_int_eq(mori_umbp_put(e.u, "k", 1, huge, 64 * MIB + 1), MORI_EMSGSIZE); /* over kv_value_max */
	free(huge);
	size_t len = 0;
	uint8_t small[4];
	ck_assert_int_eq(mori_umbp_get(e.u, big, 256, small, 4, &len), MORI_EMSGSIZE);
	ck_assert_uint_eq(len, 16);
	/* the daemon checks too: raw requests with a bad key, size, or ids not this client's */
	const char *empty[] = {""};
	Mori__Reply *rep = raw(e.c, MORI__KV_OP__KV_PUT_ALLOC, empty, 1, NULL, 0, NULL, NULL);
	ck_assert_int_eq(rep->kv->slots[0]->status, MORI_EINVAL);
	mori__reply__free_unpacked(rep, NULL);
	uint64_t forged[] = {12345, (1ull << 24) | 1, ~0ull};
	rep = raw(e.c, MORI__KV_OP__KV_RELEASE, NULL, 0, forged, 3, NULL, NULL);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(rep->kv->status[i], MORI_EINVAL);
	mori__reply__free_unpacked(rep, NULL);
	rep = raw(e.c, MORI__KV_OP__KV_PUT_COMMIT, NULL, 0, forged, 3, NULL, NULL);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(rep->kv->status[i], MORI_EINVAL);
	mori__reply__free_unpacked(rep, NULL);
	/* another client's reservation and lease cannot be committed or released */
	mori_client *c2;
	OK(mori_client_open(e.D.dir, "other", &c2));
	const char *k1[] = {"theirs"};
	int fds[WIRE_MAX_FDS], nfds = 0;
	rep = raw(c2, MORI__KV_OP__KV_PUT_ALLOC, k1, 1, NULL, 0, fds, &nfds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	uint64_t res = rep->kv->slots[0]->id;
	mori__reply__free_unpacked(rep, NULL);
	rep = raw(e.c, MORI__KV_OP__KV_PUT_COMMIT, NULL, 0, &res, 1, NULL, NULL);
	ck_assert_int_eq(rep->kv->status[0], MORI_EINVAL);
	mori__reply__free_unpacked(rep, NULL);
	ck_assert_int_eq(mori_umbp_exists(e.u, "theirs", 6), 0); /* uncommitted: invisible */
	rep = raw(c2, MORI__KV_OP__KV_PUT_COMMIT, NULL, 0, &res, 1, NULL, NULL);
	ck_assert_int_eq(rep->kv->status[0], MORI_OK);
	mori__reply__free_unpacked(rep, NULL);
	ck_assert_int_eq(mori_umbp_exists(e.u, "theirs", 6), 1);
	mori_client_close(c2);
	/* a batch over kv_batch_max is refused whole (lookups, EXISTS, go by MORI_UMBP_LOOKUP_MAX) */
	Mori__KvItem it[300], *ip[300];
	for (int i = 0; i < 300; i++) {
		mori__kv_item__init(&it[i]);
		it[i].key.data = (uint8_t *)"x";
		it[i].key.len = 1;
		ip[i] = &it[i];
	}
	Mori__KvRequest kq = MORI__KV_REQUEST__INIT;
	kq.op = MORI__KV_OP__KV_REMOVE;
	kq.n_items = 300;
	kq.items = ip;
	Mori__Request req = MORI__REQUEST__INIT;
	req.body_case = MORI__REQUEST__BODY_KV;
	req.kv = &kq;
	ck_assert_int_eq(client_rpc(e.c, &req, NULL, 0, &rep, NULL, NULL), MORI_EINVAL);
	env_down(&e);
}
END_TEST

/* A reader's lease keeps the version it read: a put over the key and eviction pressure leave its
 * bytes intact, and a remove too. */
START_TEST(lease_keeps_version)
{
	struct env e;
	const char *extra[] = {"--kv-dram-bytes", "8388608", "--kv-slab-bytes", "4194304", NULL};
	env_up(&e, extra);
	uint8_t v[65536];
	fill(v, sizeof(v), 1);
	OK(mori_umbp_put(e.u, "old", 3, v, sizeof(v)));
	const char *k[] = {"old"};
	int fds[WIRE_MAX_FDS], nfds = 0;
	Mori__Reply *rep = raw(e.c, MORI__KV_OP__KV_GET, k, 1, NULL, 0, fds, &nfds);
	Mori__KvSlot *sl = rep->kv->slots[0];
	ck_assert_int_eq(sl->status, MORI_OK);
	/* the library's handle may have the slab; this raw request on the same client may not get it again */
	uint8_t *base = NULL;
	uint64_t bytes = 0;
	for (size_t i = 0; i < rep->kv->n_slabs; i++)
		if (rep->kv->slabs[i]->id == sl->slab) {
			bytes = rep->kv->slabs[i]->bytes;
			base = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fds[i], 0);
		}
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (!base) {
		struct umbp_maps_peek { /* libclient/umbp.c's struct umbp_maps, its first fields */ pthread_mutex_t lock; struct { uint32_t id; uint8_t *base; uint64_t bytes; int r; } *m; size_t n; } *s = (void *)e.c->umbp;
		for (size_t i = 0; i < s->n; i++)
			if (s->m[i].id == sl->slab)
				base = s->m[i].base;
	}
	ck_assert_ptr_nonnull(base);
	ck_assert(base != MAP_FAILED);
	const uint8_t *old = base + sl->offset;
	uint8_t w[65536];
	fill(w, sizeof(w), 2);
	OK(mori_umbp_put(e.u, "old", 3, w, sizeof(w))); /* a new version */
	for (int i = 0; i < 200; i++) { /* pressure: 12 MiB through an 8 MiB tier */
		char key[16];
		snprintf(key, sizeof(key), "fill%d", i);
		OK(mori_umbp_put(e.u, key, strlen(key), w, sizeof(w)));
	}
	ck_assert_msg(same(old, sizeof(v), 1), "the leased version changed under its reader");
	uint8_t got[65536];
	size_t len;
	int rc = mori_umbp_get(e.u, "old", 3, got, sizeof(got), &len); /* the new version, or evicted */
	ck_assert(rc == MORI_OK || rc == MORI_ENOENT);
	if (rc == MORI_OK)
		ck_assert(same(got, sizeof(got), 2));
	Mori__Reply *sr;
	Mori__KvStats *ns = node_stats(e.c, &sr);
	ck_assert_uint_eq(ns->zombies, 1);
	ck_assert_uint_gt(ns->evictions, 0);
	mori__reply__free_unpacked(sr, NULL);
	uint64_t lease = sl->id;
	mori__reply__free_unpacked(rep, NULL);
	rep = raw(e.c, MORI__KV_OP__KV_RELEASE, NULL, 0, &lease, 1, NULL, NULL);
	ck_assert_int_eq(rep->kv->status[0], MORI_OK);
	mori__reply__free_unpacked(rep, NULL);
	ns = node_stats(e.c, &sr);
	ck_assert_uint_eq(ns->zombies, 0);
	ck_assert_uint_eq(ns->leases, 0);
	ck_assert_uint_le(ns->dram_allocated, 8388608);
	mori__reply__free_unpacked(sr, NULL);
	env_down(&e);
}
END_TEST

/* A client killed between the steps: its reservation (nothing visible) and its lease are freed. */
START_TEST(client_killed_mid_put_and_get)
{
	struct env e;
	const char *extra[] = {"--kv-dram-bytes", "67108864", NULL};
	env_up(&e, extra);
	uint8_t v[4096];
	fill(v, sizeof(v), 3);
	OK(mori_umbp_put(e.u, "held", 4, v, sizeof(v)));
	uint64_t used0 = stats(e.u).used_bytes;
	for (int mode = 0; mode < 2; mode++) {
		struct child_pipes P;
		pid_t kid = child_fork(30, &P);
		ck_assert_int_ge(kid, 0);
		if (kid == 0) {
			mori_client *c;
			if (mori_client_open(e.D.dir, "dies", &c))
				_exit(10);
			const char *k[] = {mode ? "held" : "never"};
			int fds[WIRE_MAX_FDS], nfds = 0;
			Mori__Reply *rep = raw(c, mode ? MORI__KV_OP__KV_GET : MORI__KV_OP__KV_PUT_ALLOC, k, 1, NULL, 0, fds, &nfds);
			if (rep->kv->slots[0]->status != MORI_OK)
				_exit(11);
			if (write(P.up[1], "r", 1) != 1)
				_exit(12);
			pause();
			_exit(0);
		}
		char x;
		ck_assert_int_eq(read(P.up[0], &x, 1), 1);
		Mori__Reply *sr;
		Mori__KvStats *ns = node_stats(e.c, &sr);
		ck_assert_uint_eq(mode ? ns->leases : ns->reservations, 1);
		mori__reply__free_unpacked(sr, NULL);
		if (!mode)
			ck_assert_uint_eq(stats(e.u).used_bytes, used0 + 4096); /* the reservation holds room */
		ck_assert_int_eq(mori_umbp_exists(e.u, "never", 5), 0);
		kill(kid, SIGKILL);
		waitpid(kid, NULL, 0);
		close(P.up[0]);
		close(P.go[1]);
		int freed = 0;
		uint64_t t0 = test_now_ms();
		while (!freed && test_now_ms() - t0 < 10000) {
			ns = node_stats(e.c, &sr);
			freed = ns->leases == 0 && ns->reservations == 0;
			mori__reply__free_unpacked(sr, NULL);
			if (!freed)
				usleep(2000);
		}
		ck_assert_msg(freed, "mode %d: the dead client's hold was not freed within 10 s", mode);
		ck_assert_uint_eq(stats(e.u).used_bytes, used0);
		ck_assert_int_eq(mori_umbp_exists(e.u, "never", 5), 0);
	}
	env_down(&e);
}
END_TEST

/* A lease that outlives kv_lease_max_ms: its release says so, and a get returns ETIMEDOUT then. */
START_TEST(lease_expiry)
{
	struct env e;
	const char *extra[] = {"--kv-dram-bytes", "67108864", "--kv-lease-max-ms", "50", NULL};
	env_up(&e, extra);
	uint8_t v[100] = {9};
	/* The first put maps the slab (its pages populated): on a busy machine that can outlast the
	 * 50 ms reservation, which then expires as it should; the next put finds the slab mapped. */
	int prc = MORI_ETIMEDOUT;
	for (uint64_t t0 = test_now_ms(); prc == MORI_ETIMEDOUT && test_now_ms() - t0 < 10000;)
		prc = mori_umbp_put(e.u, "k", 1, v, sizeof(v));
	ck_assert_msg(prc == MORI_OK, "put: %s: %s", mori_strerror(prc), mori_client_last_error(e.c));
	const char *k[] = {"k"};
	Mori__Reply *sr0;
	uint64_t before = node_stats(e.c, &sr0)->expired_leases; /* the first puts' reservations may count */
	mori__reply__free_unpacked(sr0, NULL);
	int fds[WIRE_MAX_FDS], nfds = 0;
	Mori__Reply *rep = raw(e.c, MORI__KV_OP__KV_GET, k, 1, NULL, 0, fds, &nfds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	uint64_t lease = rep->kv->slots[0]->id;
	mori__reply__free_unpacked(rep, NULL);
	int expired = 0;
	uint64_t t0 = test_now_ms();
	while (!expired && test_now_ms() - t0 < 10000) {
		Mori__Reply *sr;
		expired = node_stats(e.c, &sr)->expired_leases == before + 1;
		mori__reply__free_unpacked(sr, NULL);
		usleep(2000);
	}
	ck_assert(expired);
	rep = raw(e.c, MORI__KV_OP__KV_RELEASE, NULL, 0, &lease, 1, NULL, NULL);
	ck_assert_int_eq(rep->kv->status[0], MORI_ETIMEDOUT);
	mori__reply__free_unpacked(rep, NULL);
	env_down(&e);
}
END_TEST

/* Eviction under the watermarks, LRU order, pins: hard never goes, soft goes last. */
START_TEST(eviction_and_pins)
{
	struct env e;
	const char *extra[] = {"--kv-dram-bytes", "4194304", "--kv-slab-bytes", "1048576", "--kv-high-watermark", "90",
			       "--kv-low-watermark", "50", "--kv-policy", "lru", NULL};
	env_up(&e, extra);
	enum { V = 65536, N = 200 };
	uint8_t *v = malloc(V);
	mori_umbp_item it = {.buf = v, .size = V, .depth = -1};
	fill(v, V, 11);
	it.key = (mori_umbp_key){"hard", 4};
	it.pin = MORI_UMBP_PIN_HARD;
	OK(mori_umbp_batch_put(e.u, &it, 1, NULL));
	ck_assert_int_eq(it.status, MORI_OK);
	it.key = (mori_umbp_key){"soft", 4};
	it.pin = MORI_UMBP_PIN_SOFT;
	OK(mori_umbp_batch_put(e.u, &it, 1, NULL));
	ck_assert_int_eq(it.status, MORI_OK);
	char key[N][16];
	for (int i = 0; i < N; i++) {
		snprintf(key[i], sizeof(key[i]), "v%03d", i);
		fill(v, V, 1000 + (uint64_t)i);
		OK(mori_umbp_put(e.u, key[i], strlen(key[i]), v, V));
		mori_umbp_stats s = stats(e.u);
		ck_assert_uint_le(s.dram_bytes, 4194304u);
	}
	mori_umbp_stats s = stats(e.u);
	ck_assert_uint_gt(s.evictions, 0);
	ck_assert_int_eq(mori_umbp_exists(e.u, "hard", 4), 1);
	ck_assert_int_eq(mori_umbp_exists(e.u, "soft", 4), 1);
	ck_assert_int_eq(mori_umbp_exists(e.u, key[0], strlen(key[0])), 0); /* the oldest went first */
	ck_assert_int_eq(mori_umbp_exists(e.u, key[N - 1], strlen(key[N - 1])), 1);
	/* at the low watermark after the last eviction round: between 50 % and 90 % */
	ck_assert_uint_le(s.dram_bytes, 4194304u * 90 / 100);
	/* the newest values are intact */
	size_t len;
	OK(mori_umbp_get(e.u, key[N - 1], strlen(key[N - 1]), v, V, &len));
	ck_assert(same(v, V, 1000 + N - 1));
	/* a tier full of hard pins refuses puts, and soft pins go when nothing else can */
	OK(mori_umbp_clear(e.u));
	int pinned = 0;
	for (int i = 0; i < 64; i++) {
		it.key = (mori_umbp_key){key[i], strlen(key[i])};
		it.pin = i < 40 ? MORI_UMBP_PIN_HARD : MORI_UMBP_PIN_SOFT;
		OK(mori_umbp_batch_put(e.u, &it, 1, NULL));
		if (it.status == MORI_OK && i < 40)
			pinned++;
	}
	ck_assert_int_eq(pinned, 40);
	for (int i = 0; i < 40; i++)
		ck_assert_int_eq(mori_umbp_exists(e.u, key[i], strlen(key[i])), 1);
	ck_assert_uint_gt(stats(e.u).evictions, s.evictions); /* soft pins made room */
	for (int i = 0; i < 40; i++)
		OK(mori_umbp_pin(e.u, key[i], strlen(key[i]), MORI_UMBP_PIN_HARD));
	/* 40 x 64 KiB hard-pinned = 2.5 MiB; 2 MiB more cannot fit */
	uint8_t *big = malloc(2 * MIB);
	ck_assert_int_eq(mori_umbp_put(e.u, "big", 3, big, 2 * MIB), MORI_ENOMEM);
	OK(mori_umbp_pin(e.u, key[0], strlen(key[0]), MORI_UMBP_PIN_NONE));
	ck_assert_int_eq(mori_umbp_pin(e.u, "nokey", 5, MORI_UMBP_PIN_SOFT), MORI_ENOENT);
	free(big);
	free(v);
	env_down(&e);
}
END_TEST

/* A uid at its quota evicts its own values, never another uid's. Root only (a client as 65534). */
START_TEST(quota_per_uid)
{
	if (geteuid() != 0) {
		printf("# quota_per_uid: skipped: needs root (to run a client as uid 65534)\n");
		return;
	}
	struct env e;
	const char *extra[] = {"--kv-dram-bytes", "67108864", "--kv-uid-quota-bytes", "1048576", "--allow-uids", "0,65534",
			       "--socket-mode", "0666", NULL};
	env_up(&e, extra);
	ck_assert_int_eq(chmod(e.D.dir, 0755), 0);
	uint8_t v[65536];
	fill(v, sizeof(v), 5);
	for (int i = 0; i < 8; i++) {
		char k[16];
		snprintf(k, sizeof(k), "root%d", i);
		OK(mori_umbp_put(e.u, k, strlen(k), v, sizeof(v)));
	}
	pid_t kid = child_as_uid(65534, 65534, 30, NULL);
	ck_assert_int_ge(kid, 0);
	if (kid == 0) {
		mori_client *c;
		mori_umbp *u;
		if (mori_client_open(e.D.dir, "nobody", &c) || mori_umbp_open(c, NULL, &u))
			_exit(10);
		for (int i = 0; i < 32; i++) { /* 2 MiB through a 1 MiB quota */
			char k[16];
			snprintf(k, sizeof(k), "nb%d", i);
			if (mori_umbp_put(u, k, strlen(k), v, sizeof(v)))
				_exit(11);
		}
		if (mori_umbp_exists(u, "root0", 5) != 0) /* another uid's keys are not seen */
			_exit(12);
		mori_umbp_stats s = {.size = sizeof(s)};
		if (mori_umbp_stats_get(u, &s) || s.used_bytes > 1048576 || s.evictions == 0 || s.quota_bytes != 1048576)
			_exit(13);
		if (mori_umbp_exists(u, "nb31", 4) != 1 || mori_umbp_exists(u, "nb0", 3) != 0)
			_exit(14);
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(kid, &st, 0), kid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "uid 65534's client: exit %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	for (int i = 0; i < 8; i++) {
		char k[16];
		snprintf(k, sizeof(k), "root%d", i);
		ck_assert_int_eq(mori_umbp_exists(e.u, k, strlen(k)), 1);
	}
	ck_assert_uint_eq(stats(e.u).evictions, 0);
	ck_assert_int_eq(mori_umbp_exists(e.u, "nb31", 4), 0);
	env_down(&e);
}
END_TEST

struct clear_arg {
	mori_umbp *u;
	int rc, done;
};

static void *clear_thread(void *arg)
{
	struct clear_arg *a = arg;
	a->rc = mori_umbp_clear(a->u);
	__atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* A million small keys: morid's memory per key, and the loop keeps answering others meanwhile. */
START_TEST(million_keys)
{
	struct env e;
	const char *extra[] = {"--kv-dram-bytes", "2147483648", NULL};
	env_up(&e, extra);
	mori_client *c2;
	mori_umbp *u2;
	OK(mori_client_open(e.D.dir, "watcher", &c2));
	OK(mori_umbp_open(c2, NULL, &u2));
	enum { B = 256 };
	/* a million, in whole batches; MORI_TEST_UMBP_KEYS sets another count (the 10 million run) */
	const char *ev = getenv("MORI_TEST_UMBP_KEYS");
	const int N = (ev ? atoi(ev) : 1000192) / B * B;
	long rss0 = proc_rss_kib(e.D.pid);
	uint64_t worst = 0, t_start = test_now_ms();
	static char keys[B][40];
	static uint64_t vals[B][2];
	mori_umbp_item it[B];
	for (int at = 0; at < N; at += B) {
		for (int i = 0; i < B; i++) {
			snprintf(keys[i], sizeof(keys[i]), "blockhash-%022d", at + i);
			vals[i][0] = (uint64_t)(at + i);
			vals[i][1] = ~(uint64_t)(at + i);
			it[i] = (mori_umbp_item){.key = {keys[i], strlen(keys[i])}, .buf = vals[i], .size = 16, .depth = -1};
		}
		size_t ok;
		OK(mori_umbp_batch_put(e.u, it, B, &ok));
		ck_assert_uint_eq(ok, B);
		if (at % (B * 64) == 0) { /* another client is answered while the index grows (printed, not asserted) */
			uint64_t t0 = test_now_ms();
			ck_assert_int_eq(mori_umbp_exists(u2, keys[0], strlen(keys[0])), 1);
			uint64_t dt = test_now_ms() - t0;
			worst = dt > worst ? dt : worst;
		}
	}
	long rss1 = proc_rss_kib(e.D.pid);
	ck_assert_uint_eq(stats(e.u).dram_keys, (uint64_t)N);
	printf("# million_keys: morid RSS %ld -> %ld KiB: %.1f bytes per key (32-byte keys, 16-byte values)\n", rss0,
	       rss1, (double)(rss1 - rss0) * 1024.0 / N);
	fflush(stdout);
	printf("# million_keys: %d keys put in %llu ms (batches of %d); another client's exists answered within %llu ms "
	       "at worst\n", N, (unsigned long long)(test_now_ms() - t_start), B, (unsigned long long)worst);
	fflush(stdout);
	uint64_t got[2];
	size_t len;
	char k[40];
	snprintf(k, sizeof(k), "blockhash-%022d", 777777);
	OK(mori_umbp_get(u2, k, strlen(k), got, sizeof(got), &len));
	ck_assert_uint_eq(got[0], 777777);
	ck_assert_uint_eq(got[1], ~(uint64_t)777777);
	/* Clearing them goes a slice a loop turn: the watcher's stats, asked while the clear runs,
	 * are answered with part of the keys gone (counted; the clear takes many turns). */
	struct clear_arg ca = {.u = e.u};
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, clear_thread, &ca), 0);
	uint64_t mid = 0, asked = 0;
	while (!__atomic_load_n(&ca.done, __ATOMIC_ACQUIRE)) {
		uint64_t n = stats(u2).dram_keys;
		asked++;
		mid += n > 0 && n < (uint64_t)N;
	}
	pthread_join(th, NULL);
	ck_assert_int_eq(ca.rc, MORI_OK);
	ck_assert_uint_eq(stats(u2).dram_keys, 0);
	ck_assert_int_eq(mori_umbp_get(u2, k, strlen(k), got, sizeof(got), &len), MORI_ENOENT);
	printf("# million_keys: clear of %d keys: %llu of %llu stats requests answered mid-clear\n", N,
	       (unsigned long long)mid, (unsigned long long)asked);
	fflush(stdout);
	ck_assert_msg(mid > 0, "no stats request was answered while the clear ran (%llu asked)", (unsigned long long)asked);
	OK(mori_umbp_close(u2));
	mori_client_close(c2);
	env_down(&e);
}
END_TEST

/* With an SSD tier: evicted values spill, gets read them back byte-exact (promoted, or not), flush,
 * and a restart finds what was on SSD (DRAM contents are lost; a removed key stays removed). */
START_TEST(ssd_tier)
{
	char ssd[] = "/tmp/mori-kvssd-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(ssd));
	for (int promote = 1; promote >= 0; promote--) {
		struct env e;
		const char *extra[] = {"--kv-dram-bytes", "4194304", "--kv-slab-bytes", "1048576", "--kv-ssd-dir", ssd,
				       "--kv-ssd-bytes", "268435456", "--kv-promote-on-read", promote ? "1" : "0", NULL};
		env_up(&e, extra);
		enum { V = 65536, N = 160 };
		uint8_t *v = malloc(V);
		char key[N][16];
		for (int i = 0; i < N; i++) {
			snprintf(key[i], sizeof(key[i]), "s%03d", i);
			fill(v, V, 500 + (uint64_t)i);
			OK(mori_umbp_put(e.u, key[i], strlen(key[i]), v, V));
		}
		OK(mori_umbp_flush(e.u));
		mori_umbp_stats s = stats(e.u);
		ck_assert_uint_gt(s.spills, 0);
		ck_assert_uint_gt(s.ssd_keys, 0);
		ck_assert_uint_eq(s.dram_keys + s.ssd_keys, N);
		int from_ssd = 0;
		for (int i = 0; i < N; i++) {
			mori_umbp_item it = {.key = {key[i], strlen(key[i])}, .buf = v, .size = V};
			OK(mori_umbp_batch_get(e.u, &it, 1, NULL));
			ck_assert_msg(it.status == MORI_OK, "get %s: %s", key[i], mori_strerror(it.status));
			ck_assert_uint_eq(it.len, V);
			ck_assert_msg(same(v, V, 500 + (uint64_t)i), "%s came back different (tier %d)", key[i], it.tier);
			from_ssd += it.tier == MORI_UMBP_TIER_SSD;
		}
		ck_assert_int_gt(from_ssd, 0);
		mori_umbp_stats s2 = stats(e.u);
		if (promote)
			ck_assert_uint_gt(s2.promotions, 0);
		else
			ck_assert_uint_eq(s2.promotions, 0);
		OK(mori_umbp_remove(e.u, key[0], strlen(key[0])));
		OK(mori_umbp_flush(e.u));
		uint64_t on_ssd = stats(e.u).ssd_keys;
		free(v);
		env_down(&e);
		/* again on the same directory: what was on SSD is found */
		env_up(&e, extra);
		mori_umbp_stats s3 = stats(e.u);
		ck_assert_uint_eq(s3.dram_keys, 0);
		ck_assert_uint_ge(s3.ssd_keys, on_ssd);
		ck_assert_int_eq(mori_umbp_exists(e.u, key[0], strlen(key[0])), 0);
		OK(mori_umbp_clear(e.u)); /* both tiers, for the next round */
		OK(mori_umbp_flush(e.u));
		ck_assert_uint_eq(stats(e.u).ssd_keys, 0);
		env_down(&e);
	}
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ssd);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Bytes of the SSD tier's segment files under dir (after a clean stop: what was written). */
static uint64_t seg_bytes(const char *dir)
{
	DIR *d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	uint64_t n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		char p[PATH_MAX];
		struct stat sb;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (!strncmp(de->d_name, "seg-", 4) && stat(p, &sb) == 0)
			n += (uint64_t)sb.st_size;
	}
	closedir(d);
	return n;
}

static int get_one(mori_umbp *u, const char *key, uint8_t *v, size_t cap, int *tier)
{
	mori_umbp_item it = {.key = {key, strlen(key)}, .buf = v, .size = cap};
	OK(mori_umbp_batch_get(u, &it, 1, NULL));
	if (it.status == MORI_OK) {
		ck_assert_uint_eq(it.len, cap);
		*tier = it.tier;
	}
	return it.status;
}

/* A value read back from SSD keeps its record while its DRAM copy is unchanged: evicting it again
 * writes nothing, and after a restart it is still whole. One overwritten or removed after it was
 * read back never returns its old bytes after a restart. */
START_TEST(ssd_clean_copies)
{
	char ssd[] = "/tmp/mori-kvssd-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(ssd));
	struct env e;
	const char *extra[] = {"--kv-dram-bytes", "4194304", "--kv-slab-bytes", "1048576", "--kv-ssd-dir", ssd,
			       "--kv-ssd-bytes", "268435456", NULL};
	enum { V = 65536, N = 160 };
	uint8_t *v = malloc(V);
	char key[N][16];
	env_up(&e, extra);
	for (int i = 0; i < N; i++) {
		snprintf(key[i], sizeof(key[i]), "c%03d", i);
		fill(v, V, 900 + (uint64_t)i);
		OK(mori_umbp_put(e.u, key[i], strlen(key[i]), v, V));
	}
	OK(mori_umbp_flush(e.u));
	env_down(&e);
	uint64_t written = seg_bytes(ssd);
	/* after a restart every kept key is on SSD (DRAM's are lost); two rounds of gets promote each
	 * and evict the others again and again */
	env_up(&e, extra);
	mori_umbp_stats s = stats(e.u);
	uint64_t kept = s.ssd_keys;
	ck_assert_uint_gt(kept, 80);
	ck_assert_uint_eq(s.dram_keys, 0);
	int present[N], tier, from_ssd = 0;
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < N; i++) {
			int rc = get_one(e.u, key[i], v, V, &tier);
			present[i] = rc == MORI_OK;
			ck_assert_msg(rc == MORI_OK || rc == MORI_ENOENT, "get %s: %s", key[i], mori_strerror(rc));
			if (rc == MORI_OK) {
				ck_assert_msg(same(v, V, 900 + (uint64_t)i), "%s came back different (tier %d)", key[i], tier);
				from_ssd += tier == MORI_UMBP_TIER_SSD;
			}
		}
	ck_assert_int_gt(from_ssd, (int)kept); /* the second round read back values the first evicted */
	ck_assert_uint_gt(stats(e.u).promotions, kept);
	/* the last two present keys: read back once more, then one overwritten, one removed */
	int x = -1, y = -1;
	for (int i = N - 1; i >= 0 && y < 0; i--)
		if (present[i])
			*(x < 0 ? &x : &y) = i;
	ck_assert_int_ge(y, 0);
	ck_assert_int_eq(get_one(e.u, key[x], v, V, &tier), MORI_OK);
	fill(v, V, 7777);
	OK(mori_umbp_put(e.u, key[x], strlen(key[x]), v, V));
	ck_assert_int_eq(get_one(e.u, key[y], v, V, &tier), MORI_OK);
	OK(mori_umbp_remove(e.u, key[y], strlen(key[y])));
	OK(mori_umbp_flush(e.u));
	env_down(&e);
	/* evicting an unchanged copy wrote nothing: only the two tombstones (a page each) were added */
	uint64_t after = seg_bytes(ssd);
	ck_assert_msg(after <= written + 16384, "segments grew from %llu to %llu bytes", (unsigned long long)written,
		      (unsigned long long)after);
	env_up(&e, extra);
	ck_assert_uint_eq(stats(e.u).ssd_keys, kept - 2);
	ck_assert_int_eq(get_one(e.u, key[x], v, V, &tier), MORI_ENOENT); /* its new value was in DRAM only */
	ck_assert_int_eq(get_one(e.u, key[y], v, V, &tier), MORI_ENOENT);
	for (int i = 0; i < N; i++) {
		if (!present[i] || i == x || i == y)
			continue;
		ck_assert_int_eq(get_one(e.u, key[i], v, V, &tier), MORI_OK);
		ck_assert_msg(same(v, V, 900 + (uint64_t)i), "%s came back different after a restart", key[i]);
	}
	env_down(&e);
	free(v);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ssd);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(no_store)
{
	struct test_daemon D;
	const char *extra[] = {"--kv-dram-bytes", "0", NULL};
	ck_assert_int_eq(daemon_start(&D, extra), 0);
	mori_client *c;
	mori_umbp *u = NULL;
	OK(mori_client_open(D.dir, "none", &c));
	ck_assert_int_eq(mori_umbp_open(c, NULL, &u), MORI_ENOTSUP);
	ck_assert_ptr_null(u);
	mori_client_close(c);
	ck_assert_int_eq(daemon_stop(&D), 0);
	daemon_cleanup(&D);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("umbp");
	/* one case per test: CK_RUN_CASE=name runs one alone */
	const struct {
		const char *name;
		const TTest *fn;
	} tests[] = {
		{"roundtrip_sizes", roundtrip_sizes}, {"batches_and_keys", batches_and_keys}, {"bad_input", bad_input},
		{"lease_keeps_version", lease_keeps_version}, {"client_killed_mid_put_and_get", client_killed_mid_put_and_get},
		{"lease_expiry", lease_expiry}, {"eviction_and_pins", eviction_and_pins}, {"quota_per_uid", quota_per_uid},
		{"million_keys", million_keys}, {"ssd_tier", ssd_tier}, {"ssd_clean_copies", ssd_clean_copies},
		{"no_store", no_store},
	};
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		TCase *t = tcase_create(tests[i].name);
		tcase_set_timeout(t, 240);
		tcase_add_test(t, tests[i].fn);
		suite_add_tcase(s, t);
	}
	return run_suite(s);
}
