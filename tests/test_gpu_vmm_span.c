/* VRAM ranges over several VMM allocations mapped back to back (issue 17: what PyTorch's
 * expandable segments build), on a real GPU, two processes: a target builds a range of NPIECE
 * allocations of mixed sizes (more than one batch of descriptors) in one reserved VA range and
 * registers it as one region starting and ending inside allocations; the initiator registers a
 * range of its own made the same way, opens the target's (same node: one span mapped here with
 * every allocation at its offset; across two morids: each daemon maps its client's span to stage
 * it), and runs random batches plus batches whose every block crosses an allocation boundary on
 * both sides, reads and writes, every byte checked against a host model (the target hashes its
 * own bytes). And a range with a hole is refused naming the hole, while the allocations on either
 * side still register alone. Skips (77) without a GPU or kernels. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "mori.h"

#define NPIECE 68                      /* > WIRE_MAX_FDS: two batches each way */
#define LPIECE 9
#define R_OFF 12345                    /* the target's region starts inside its first allocation */
#define R_TAIL 5555                    /* ... and ends inside its last */
#define L_OFF 777
#define L_TAIL 99

static struct test_daemon D, D2;
static const struct gpu_api *g;
static const char *target_dir;

static int start_node(struct test_daemon *t, char *addr, size_t len)
{
	int port = free_port();
	snprintf(addr, len, "127.0.0.1:%d", port);
	const char *extra[] = {"--listen", addr, NULL};
	return port > 0 ? daemon_start(t, extra) : -1;
}
static void setup(void)
{
	char addr[64];
	ck_assert_int_eq(start_node(&D, addr, sizeof(addr)), 0);
	target_dir = D.dir;
}
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
	if (D2.pid) {
		daemon_stop(&D2);
		daemon_cleanup(&D2);
	}
}

static int ctx_up(void)
{
	gpu_device d;
	gpu_context ctx;
	g = gpu_api();
	if (!g || g->device_get(&d, 0) || g->primary_ctx_retain(&ctx, d) || g->ctx_push_current(ctx))
		return -1;
	return 0;
}

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed | 1;
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(test_rand(&s) >> 56);
}

/* Sizes of a range's allocations: 2 MiB, every fifth of 6 MiB, the local one's third 20 MiB
 * (PyTorch's segment). */
static uint64_t piece_size(int local, int i)
{
	if (local)
		return i == 2 ? 20u << 20 : 2u << 20;
	return i % 5 == 3 ? 6u << 20 : 2u << 20;
}

struct span { gpu_dptr base; uint64_t total; int n; uint64_t bound[NPIECE]; int nb; };

/* n allocations mapped back to back in one reservation; bound[] gets the boundaries between
 * them as offsets of a region that starts `off` bytes into the first. skip: leave that piece's
 * place unmapped (a hole), -1 none. */
static int make_span(struct span *s, int local, int n, uint64_t off, int skip)
{
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < n; i++)
		s->total += piece_size(local, i);
	if (g->mem_address_reserve(&s->base, s->total, 0, 0, 0))
		return -1;
	struct gpu_mem_prop prop;
	gpu_vmm_prop(&prop, 0);
	struct gpu_access_desc acc = {{GPU_MEM_LOCATION_TYPE_DEVICE, 0}, GPU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	uint64_t at = 0;
	for (int i = 0; i < n; i++) {
		uint64_t sz = piece_size(local, i);
		gpu_memhandle h;
		if (i != skip) {
			if (g->mem_create(&h, sz, &prop, 0) || g->mem_map(s->base + at, sz, 0, h, 0) ||
			    g->mem_set_access(s->base + at, sz, &acc, 1))
				return -1;
			g->mem_release(h); /* the mapping keeps it */
		}
		at += sz;
		if (i + 1 < n)
			s->bound[s->nb++] = at - off;
	}
	s->n = n;
	return 0;
}

/* ---- the target ---- */

struct hreq { uint64_t off, len; int quit; int pad; };

static void target_main(int rfd, int wfd, uint64_t seed)
{
	mori_client *c;
	mori_mem *m;
	struct span s;
	if (ctx_up() || mori_client_open(target_dir, "span-target", &c) != MORI_OK)
		_exit(10);
	if (make_span(&s, 0, NPIECE, R_OFF, -1))
		_exit(11);
	uint64_t rsz = s.total - R_OFF - R_TAIL;
	gpu_dptr r = s.base + R_OFF;
	if (mori_mem_register(c, (void *)(uintptr_t)r, rsz, MORI_MEM_VRAM, &m) != MORI_OK) {
		fprintf(stderr, "target: register the span: %s\n", mori_client_last_error(c));
		_exit(12);
	}
	uint8_t *buf = malloc(rsz);
	fill_random(buf, rsz, seed);
	if (g->memcpy_htod_async(r, buf, rsz, NULL) || g->stream_synchronize(NULL) || mori_mem_publish(m, "t/span"))
		_exit(13);
	uint64_t hdr[2] = {rsz, (uint64_t)s.nb};
	if (write(wfd, hdr, sizeof(hdr)) != sizeof(hdr) || write(wfd, s.bound, sizeof(uint64_t) * (size_t)s.nb) < 0)
		_exit(14);
	for (;;) {
		struct hreq q;
		if (read(rfd, &q, sizeof(q)) != sizeof(q))
			_exit(15);
		if (q.quit)
			break;
		if (q.off + q.len > rsz || g->memcpy_dtoh_async(buf, r + q.off, q.len, NULL) || g->stream_synchronize(NULL))
			_exit(16);
		uint64_t hv = test_hash(0, buf, q.len);
		if (write(wfd, &hv, 8) != 8)
			_exit(17);
	}
	mori_mem_deregister(m);
	mori_client_close(c);
	_exit(0);
}

struct target { pid_t pid; int to, from; uint64_t size; uint64_t bound[NPIECE]; int nb; };

static void target_start(struct target *t, uint64_t seed)
{
	int to_t[2], from_t[2];
	ck_assert(pipe(to_t) == 0 && pipe(from_t) == 0);
	t->pid = fork(); /* before this process touches the GPU */
	if (t->pid == 0) {
		close(to_t[1]);
		close(from_t[0]);
		target_main(to_t[0], from_t[1], seed);
	}
	close(to_t[0]);
	close(from_t[1]);
	t->to = to_t[1];
	t->from = from_t[0];
	uint64_t hdr[2];
	ck_assert_msg(read(t->from, hdr, sizeof(hdr)) == sizeof(hdr), "target did not start (see %s)", D.log);
	t->size = hdr[0];
	t->nb = (int)hdr[1];
	ck_assert_int_eq(read(t->from, t->bound, sizeof(uint64_t) * (size_t)t->nb), (ssize_t)(sizeof(uint64_t) * (size_t)t->nb));
}

static uint64_t target_hash(struct target *t, uint64_t off, uint64_t len)
{
	struct hreq q = {off, len, 0, 0};
	uint64_t hv;
	ck_assert(write(t->to, &q, sizeof(q)) == sizeof(q));
	ck_assert(read(t->from, &hv, 8) == 8);
	return hv;
}

static void target_stop(struct target *t)
{
	struct hreq q = {0, 0, 1, 0};
	ck_assert(write(t->to, &q, sizeof(q)) == sizeof(q));
	int st;
	waitpid(t->pid, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "target exit status %d", st);
	close(t->to);
	close(t->from);
}

/* One move per destination boundary (disjoint: boundaries are >= 2 MiB apart), each crossing
 * it, with a source that crosses a source boundary (cycling through them). */
static size_t boundary_moves(uint64_t *seed, struct gpu_move *mv, const uint64_t *db, int ndb, uint64_t dsz,
			     const uint64_t *sb, int nsb, uint64_t ssz)
{
	size_t n = 0;
	for (int i = 0; i < ndb; i++) {
		uint64_t x = 1 + test_rand(seed) % 65536, y = 1 + test_rand(seed) % 65536, len = x + y;
		uint64_t dst = db[i] - x;
		uint64_t b = sb[test_rand(seed) % (uint64_t)nsb], src = b - 1 - test_rand(seed) % (len - 1);
		if (dst + len > dsz || src + len > ssz || b < len)
			continue;
		mv[n++] = (struct gpu_move){src, dst, len};
	}
	return n;
}

static void span_batches(const char *node, int nbatches)
{
	uint64_t seed = test_seed();
	struct target t;
	target_start(&t, seed);
	ck_assert_int_eq(ctx_up(), 0);
	mori_client *c;
	OK(mori_client_open(D.dir, "span-initiator", &c));
	struct span ls;
	ck_assert_int_eq(make_span(&ls, 1, LPIECE, L_OFF, -1), 0);
	uint64_t lsz = ls.total - L_OFF - L_TAIL;
	gpu_dptr lv = ls.base + L_OFF;
	mori_mem *loc, *rem;
	OK(mori_mem_register(c, (void *)(uintptr_t)lv, lsz, MORI_MEM_VRAM, &loc));
	OK(mori_mem_open_remote(c, node, "t/span", &rem));
	ck_assert_uint_eq(mori_mem_size(rem), t.size);
	if (!node) { /* one span here, every allocation mapped at its offset */
		struct gpu_map *mp = rem->gpu_priv;
		ck_assert_ptr_nonnull(mp);
		ck_assert_int_eq(mp->type, GPU_HANDLE_POSIX_FDS);
		ck_assert_uint_eq(mp->span.n, NPIECE);
		ck_assert_uint_eq(mp->span.mapped, NPIECE);
		ck_assert_uint_eq(rem->dptr, mp->base + R_OFF);
	}
	uint8_t *lmodel = malloc(lsz), *rmodel = malloc(t.size), *got = malloc(lsz);
	fill_random(lmodel, lsz, seed + 100);
	fill_random(rmodel, t.size, seed);
	ck_assert_int_eq(g->memcpy_htod_async(lv, lmodel, lsz, NULL), 0);
	ck_assert_int_eq(g->stream_synchronize(NULL), 0);
	size_t cap = 4096;
	struct gpu_move *mv = malloc(cap * sizeof(*mv));
	mori_desc *d = malloc(cap * sizeof(*d));
	uint64_t bytes = 0, crossing = 0;
	for (int it = 0; it < nbatches; it++) {
		int op = test_rand(&seed) & 1 ? MORI_XFER_WRITE : MORI_XFER_READ, across = it & 1;
		size_t n;
		if (across) { /* every block crosses an allocation boundary on both sides */
			n = op == MORI_XFER_WRITE ? boundary_moves(&seed, mv, t.bound, t.nb, t.size, ls.bound, ls.nb, lsz)
						: boundary_moves(&seed, mv, ls.bound, ls.nb, lsz, t.bound, t.nb, t.size);
			crossing += n;
		} else {
			n = 1 + test_rand(&seed) % 600;
			const uint64_t maxlens[] = {4096, 65536, 1u << 20, 8u << 20};
			uint64_t maxlen = maxlens[test_rand(&seed) % 4];
			if (op == MORI_XFER_WRITE)
				gpu_random_moves(&seed, mv, n, lsz, t.size, maxlen);
			else
				gpu_random_moves(&seed, mv, n, t.size, lsz, maxlen);
		}
		ck_assert_uint_gt(n, 0);
		gpu_moves_to_descs(mv, n, op, d);
		mori_xfer *x;
		OK(mori_xfer_batch(op, loc, rem, d, n, NULL, &x));
		int rc = mori_xfer_wait(x, 20000000);
		ck_assert_msg(rc == MORI_OK, "batch %d (op %d, n %zu, %s): %s (%s)", it, op, n, across ? "crossing" : "random",
			      mori_strerror(rc), mori_client_last_error(c));
		bytes += mori_xfer_bytes(x);
		mori_xfer_free(x);
		if (op == MORI_XFER_WRITE) {
			gpu_model_apply(mv, n, lmodel, rmodel);
			if (it < 20 || it % 10 == 0)
				ck_assert_msg(target_hash(&t, 0, t.size) == test_hash(0, rmodel, t.size),
					      "after batch %d (write, n %zu, %s): the target's span differs from the model", it, n,
					      across ? "crossing" : "random");
		} else {
			gpu_model_apply(mv, n, rmodel, lmodel);
			ck_assert_int_eq(g->memcpy_dtoh_async(got, lv, lsz, NULL), 0);
			ck_assert_int_eq(g->stream_synchronize(NULL), 0);
			long long at = gpu_first_diff(got, lmodel, lsz);
			ck_assert_msg(at < 0, "batch %d (read, n %zu, %s): first wrong byte at %lld", it, n,
				      across ? "crossing" : "random", at);
		}
	}
	ck_assert_msg(target_hash(&t, 0, t.size) == test_hash(0, rmodel, t.size), "at the end: the target's span differs");
	fprintf(stderr, "# %s: %d batches over %d + %d VMM allocations, %llu bytes verified, %llu blocks crossing boundaries\n",
		node ? "cross node" : "same node", nbatches, NPIECE, LPIECE, (unsigned long long)bytes,
		(unsigned long long)crossing);
	OK(mori_mem_deregister(rem));
	OK(mori_mem_deregister(loc));
	if (!node)
		ck_assert_ptr_null(c->gpu->maps); /* the span unmapped */
	mori_client_close(c);
	target_stop(&t);
	free(lmodel);
	free(rmodel);
	free(got);
	free(mv);
	free(d);
}

START_TEST(span_same_node)
{
	span_batches(NULL, gpu_batches(400));
}
END_TEST

START_TEST(span_cross_node)
{
	char addr[64];
	ck_assert_int_eq(start_node(&D2, addr, sizeof(addr)), 0);
	target_dir = D2.dir;
	span_batches(addr, gpu_batches(400) / 5);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "%s/moractl --runtime-dir %s status --json | grep -q '\"vram_bytes_staged\":[[:space:]]*[1-9]'",
		 build_dir(), D2.dir);
	ck_assert_msg(system(cmd) == 0, "morid of the target node staged no VRAM bytes");
}
END_TEST

/* A range with an unmapped part is refused, naming the hole; each side of it registers alone. */
START_TEST(span_hole)
{
	ck_assert_int_eq(ctx_up(), 0);
	mori_client *c;
	mori_mem *m;
	OK(mori_client_open(D.dir, "span-hole", &c));
	struct span s;
	ck_assert_int_eq(make_span(&s, 0, 6, 0, 2), 0); /* allocation 2 (2 MiB at 4 MiB) unmapped */
	ck_assert_int_eq(mori_mem_register(c, (void *)(uintptr_t)(s.base + 100), s.total - 200, MORI_MEM_VRAM, &m),
			 MORI_EINVAL);
	char want[80];
	snprintf(want, sizeof(want), "[%#llx, %#llx)", (unsigned long long)(s.base + (4u << 20)),
		 (unsigned long long)(s.base + (6u << 20)));
	const char *why = mori_client_last_error(c);
	ck_assert_msg(strstr(why, "hole") && strstr(why, want), "refusal '%s' does not name the hole %s", why, want);
	fprintf(stderr, "# %s\n", why);
	OK(mori_mem_register(c, (void *)(uintptr_t)(s.base + 100), (4u << 20) - 200, MORI_MEM_VRAM, &m)); /* 0 and 1 */
	OK(mori_mem_deregister(m));
	OK(mori_mem_register(c, (void *)(uintptr_t)(s.base + (6u << 20)), s.total - (6u << 20), MORI_MEM_VRAM, &m));
	OK(mori_mem_deregister(m));
	/* ending past the reservation's last mapping: the rest is a hole too */
	ck_assert_int_eq(mori_mem_register(c, (void *)(uintptr_t)(s.base + (6u << 20)), s.total, MORI_MEM_VRAM, &m),
			 MORI_EINVAL);
	mori_client_close(c);
}
END_TEST

int main(void)
{
	gpu_skip_unless_ready();
	Suite *s = suite_create("gpu_vmm_span");
	TCase *t = tcase_create("gpu_vmm_span");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 300);
	const char *only = getenv("MORI_TEST_ONLY");
#define ADD(fn) if (!only || !strcmp(only, #fn)) tcase_add_test(t, fn)
	ADD(span_hole);
	ADD(span_same_node);
	ADD(span_cross_node);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
