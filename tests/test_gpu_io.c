/* MORI-IO on GPU memory through the public API, two processes on one GPU (issue 5, acceptance
 * 1): a target registers cudaMalloc memory (two sub-ranges of one allocation, at odd offsets),
 * VMM memory (cuMemCreate, POSIX fd) at an offset, and host memory; the initiator runs random
 * batches GPU-to-GPU, GPU-to-host and host-to-GPU in both directions, and every byte is checked
 * against a host model (local bytes directly, the target's by a hash it computes itself).
 * Plus the faults: a target that dies while mapped, and memory of the wrong kind. Each test
 * runs its own morid; the whole file skips (77) without a GPU or kernels. */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "mori.h"

#define LEG_ALLOC (12u << 20)          /* the target's cudaMalloc allocation */
#define LEG_OFF ((1u << 20) + 3)       /* region 0 inside it */
#define LEG_SZ (8u << 20)
#define LEG2_OFF (LEG_OFF + LEG_SZ + 13) /* region 3: a second sub-range of the same allocation */
#define LEG2_SZ (1u << 20)
#define VMM_ALLOC (8u << 20)
#define VMM_OFF ((1u << 20) + 12345)   /* region 1 inside the VMM allocation */
#define VMM_SZ (4u << 20)
#define HOST_SZ (8u << 20)             /* region 2: host memory (memfd) */
#define LOCAL_SZ (8u << 20)
#define NREG 4

static const uint64_t reg_size[NREG] = {LEG_SZ, VMM_SZ, HOST_SZ, LEG2_SZ};
static const char *const reg_name[NREG] = {"t/legacy", "t/vmm", "t/host", "t/legacy2"};

static struct test_daemon D, D2; /* D2: the target's node in the cross-node case */
static const struct gpu_api *g;
static const char *target_dir;    /* the runtime dir the target's client uses */

/* Every morid here has a peer listener on loopback, so that cross_node can pair two. */
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

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed | 1;
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(test_rand(&s) >> 56);
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

/* ---- the target: owns the four regions, hashes ranges of them on request ---- */

struct hreq {
	uint32_t which; /* region; UINT32_MAX: exit */
	uint32_t pad;
	uint64_t off, len;
};

static void target_main(int rfd, int wfd, uint64_t seed)
{
	mori_client *c;
	mori_mem *m[NREG];
	if (ctx_up() || mori_client_open(target_dir, "target", &c) != MORI_OK)
		_exit(10);
	gpu_dptr leg, vmm;
	gpu_memhandle h;
	struct gpu_mem_prop prop;
	gpu_vmm_prop(&prop, 0);
	struct gpu_access_desc acc = {{GPU_MEM_LOCATION_TYPE_DEVICE, 0}, GPU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	if (g->mem_alloc(&leg, LEG_ALLOC) || g->mem_create(&h, VMM_ALLOC, &prop, 0) ||
	    g->mem_address_reserve(&vmm, VMM_ALLOC, 0, 0, 0) || g->mem_map(vmm, VMM_ALLOC, 0, h, 0) ||
	    g->mem_set_access(vmm, VMM_ALLOC, &acc, 1))
		_exit(11);
	gpu_dptr dev[NREG] = {leg + LEG_OFF, vmm + VMM_OFF, 0, leg + LEG2_OFF};
	uint8_t *buf = malloc(LEG_SZ);
	for (int i = 0; i < NREG; i++) {
		int rc = i == 2 ? mori_mem_alloc(c, HOST_SZ, MORI_MEM_HOST, &m[i])
				: mori_mem_register(c, (void *)(uintptr_t)dev[i], reg_size[i], MORI_MEM_VRAM, &m[i]);
		if (rc != MORI_OK) {
			fprintf(stderr, "target: register %s: %s\n", reg_name[i], mori_client_last_error(c));
			_exit(12);
		}
		fill_random(buf, reg_size[i], seed + (uint64_t)i);
		if (i == 2)
			memcpy(mori_mem_ptr(m[i]), buf, HOST_SZ);
		else if (g->memcpy_htod_async(dev[i], buf, reg_size[i], NULL) || g->stream_synchronize(NULL))
			_exit(13);
		if (mori_mem_publish(m[i], reg_name[i]))
			_exit(14);
	}
	char ready = 'r';
	if (write(wfd, &ready, 1) != 1)
		_exit(15);
	for (;;) {
		struct hreq q;
		if (read(rfd, &q, sizeof(q)) != sizeof(q))
			_exit(16);
		if (q.which == UINT32_MAX)
			break;
		if (q.which >= NREG || q.off + q.len > reg_size[q.which])
			_exit(17);
		const uint8_t *p = buf;
		if (q.which == 2)
			p = (uint8_t *)mori_mem_ptr(m[2]) + q.off;
		else if (g->memcpy_dtoh_async(buf, dev[q.which] + q.off, q.len, NULL) || g->stream_synchronize(NULL))
			_exit(18);
		uint64_t hv = test_hash(0, p, q.len);
		if (write(wfd, &hv, 8) != 8)
			_exit(19);
	}
	for (int i = 0; i < NREG; i++)
		mori_mem_deregister(m[i]);
	mori_client_close(c);
	_exit(0);
}

struct target { pid_t pid; int to, from; };

static void target_start(struct target *t, uint64_t seed)
{
	int to_t[2], from_t[2];
	ck_assert(pipe(to_t) == 0 && pipe(from_t) == 0);
	t->pid = fork(); /* before this process touches the GPU: a CUDA context does not survive fork */
	if (t->pid == 0) {
		close(to_t[1]);
		close(from_t[0]);
		target_main(to_t[0], from_t[1], seed);
	}
	close(to_t[0]);
	close(from_t[1]);
	t->to = to_t[1];
	t->from = from_t[0];
	char ready;
	ck_assert_msg(read(t->from, &ready, 1) == 1, "target did not start (see %s)", D.log);
}

static uint64_t target_hash(struct target *t, uint32_t which, uint64_t off, uint64_t len)
{
	struct hreq q = {which, 0, off, len};
	uint64_t hv;
	ck_assert(write(t->to, &q, sizeof(q)) == sizeof(q));
	ck_assert(read(t->from, &hv, 8) == 8);
	return hv;
}

static void target_stop(struct target *t)
{
	struct hreq q = {UINT32_MAX, 0, 0, 0};
	ck_assert(write(t->to, &q, sizeof(q)) == sizeof(q));
	int st;
	waitpid(t->pid, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "target exit status %d", st);
	close(t->to);
	close(t->from);
}

/* Random verified batches between the initiator (VRAM sub-range and host memory, on D) and
 * the target's four regions, opened on node (NULL: the same node). */
static void batches(const char *node, int nbatches)
{
	uint64_t seed = test_seed();
	struct target t;
	target_start(&t, seed);
	ck_assert_int_eq(ctx_up(), 0);

	mori_client *c;
	OK(mori_client_open(D.dir, "initiator", &c));
	/* locals: VRAM as a sub-range of a larger allocation, and host memory */
	gpu_dptr lalloc;
	ck_assert_int_eq(g->mem_alloc(&lalloc, LOCAL_SZ + (1u << 20)), 0);
	gpu_dptr lv = lalloc + 524289;
	mori_mem *loc[2], *rem[NREG];
	OK(mori_mem_register(c, (void *)(uintptr_t)lv, LOCAL_SZ, MORI_MEM_VRAM, &loc[0]));
	OK(mori_mem_alloc(c, LOCAL_SZ, MORI_MEM_HOST, &loc[1]));
	uint8_t *lmodel[2], *rmodel[NREG], *got = malloc(LOCAL_SZ);
	for (int i = 0; i < 2; i++) {
		lmodel[i] = malloc(LOCAL_SZ);
		fill_random(lmodel[i], LOCAL_SZ, seed + 100 + (uint64_t)i);
	}
	ck_assert_int_eq(g->memcpy_htod_async(lv, lmodel[0], LOCAL_SZ, NULL), 0);
	ck_assert_int_eq(g->stream_synchronize(NULL), 0);
	memcpy(mori_mem_ptr(loc[1]), lmodel[1], LOCAL_SZ);
	for (int i = 0; i < NREG; i++) {
		OK(mori_mem_open_remote(c, node, reg_name[i], &rem[i]));
		ck_assert_uint_eq(mori_mem_size(rem[i]), reg_size[i]);
		rmodel[i] = malloc(reg_size[i]);
		fill_random(rmodel[i], reg_size[i], seed + (uint64_t)i);
	}
	if (!node) {
		/* two sub-ranges of one cudaMalloc allocation share one mapping (ROCm/mori issue 415) */
		ck_assert_ptr_nonnull(rem[0]->gpu_priv);
		ck_assert_ptr_eq(rem[0]->gpu_priv, rem[3]->gpu_priv);
		ck_assert_uint_eq(rem[3]->dptr - rem[0]->dptr, LEG2_OFF - LEG_OFF);
	}

	int batches = nbatches;
	uint64_t t_start = mori_now_us();
	size_t cap = 20000;
	struct gpu_move *mv = malloc(cap * sizeof(*mv));
	mori_desc *d = malloc(cap * sizeof(*d));
	uint64_t bytes = 0, kinds[3] = {0, 0, 0};
	int writes_since_check = 0;
	for (int it = 0; it < batches; it++) {
		int ri = (int)(test_rand(&seed) % NREG), li = (int)(test_rand(&seed) & 1);
		if (ri == 2 && li == 1)
			li = 0; /* host to host is the host path, not this test's */
		int op = test_rand(&seed) & 1 ? MORI_XFER_WRITE : MORI_XFER_READ;
		uint64_t k = test_rand(&seed) % 100;
		size_t n = k < 70 ? 1 + test_rand(&seed) % 16 : k < 97 ? 17 + test_rand(&seed) % 500 : 16385 + test_rand(&seed) % 3000;
		const uint64_t maxlens[] = {64, 4096, 65536, 1u << 20};
		uint64_t maxlen = maxlens[test_rand(&seed) % 4];
		uint64_t ls = LOCAL_SZ, rs = reg_size[ri];
		if (op == MORI_XFER_WRITE)
			gpu_random_moves(&seed, mv, n, ls, rs, maxlen);
		else
			gpu_random_moves(&seed, mv, n, rs, ls, maxlen);
		gpu_moves_to_descs(mv, n, op, d);
		mori_xfer *x;
		if (n == 1 && (k & 1))
			OK(op == MORI_XFER_WRITE ? mori_xfer_write(loc[li], d[0].local_offset, rem[ri], d[0].remote_offset, d[0].length, NULL, &x)
					       : mori_xfer_read(loc[li], d[0].local_offset, rem[ri], d[0].remote_offset, d[0].length, NULL, &x));
		else
			OK(mori_xfer_batch(op, loc[li], rem[ri], d, n, NULL, &x));
		int rc = mori_xfer_wait(x, 10000000);
		ck_assert_msg(rc == MORI_OK, "batch %d (op %d, local %d, remote %s, n %zu): %s (%s)", it, op, li, reg_name[ri], n,
			      mori_strerror(rc), mori_client_last_error(c));
		bytes += mori_xfer_bytes(x);
		mori_xfer_free(x);
		kinds[ri == 2 ? (op == MORI_XFER_WRITE ? 1 : 2) : li == 0 ? 0 : (op == MORI_XFER_WRITE ? 2 : 1)]++;
		if (op == MORI_XFER_WRITE) {
			gpu_model_apply(mv, n, lmodel[li], rmodel[ri]);
			if (it < 300 || ++writes_since_check >= 50) {
				writes_since_check = 0;
				for (int r = 0; r < NREG; r++)
					ck_assert_msg(target_hash(&t, (uint32_t)r, 0, reg_size[r]) == test_hash(0, rmodel[r], reg_size[r]),
						      "after batch %d (write to %s, n %zu): region %s differs from the model", it,
						      reg_name[ri], n, reg_name[r]);
			}
		} else {
			gpu_model_apply(mv, n, rmodel[ri], lmodel[li]);
			const uint8_t *have = mori_mem_ptr(loc[1]);
			if (li == 0) {
				ck_assert_int_eq(g->memcpy_dtoh_async(got, lv, LOCAL_SZ, NULL), 0);
				ck_assert_int_eq(g->stream_synchronize(NULL), 0);
				have = got;
			}
			long long at = gpu_first_diff(have, lmodel[li], LOCAL_SZ);
			ck_assert_msg(at < 0, "batch %d (read from %s into local %d, n %zu): first wrong byte at %lld", it,
				      reg_name[ri], li, n, at);
		}
	}
	for (int r = 0; r < NREG; r++)
		ck_assert_msg(target_hash(&t, (uint32_t)r, 0, reg_size[r]) == test_hash(0, rmodel[r], reg_size[r]),
			      "at the end: region %s differs from the model", reg_name[r]);
	fprintf(stderr, "# %s: %d batches, %llu bytes verified: %llu GPU-GPU, %llu GPU-host, %llu host-GPU (%.1f s)\n",
		node ? "cross node" : "same node", batches, (unsigned long long)bytes, (unsigned long long)kinds[0],
		(unsigned long long)kinds[1], (unsigned long long)kinds[2], (mori_now_us() - t_start) / 1e6);
	for (int r = 0; r < NREG; r++)
		OK(mori_mem_deregister(rem[r]));
	OK(mori_mem_deregister(loc[0]));
	OK(mori_mem_deregister(loc[1]));
	mori_client_close(c);
	target_stop(&t);
	g->mem_free(lalloc);
}

START_TEST(random_batches)
{
	batches(NULL, gpu_batches(10000));
}
END_TEST

/* The same through two morids on loopback (issue 5: cross-node VRAM staged through the
 * daemons' pinned buffers over the TCP data streams); the target is a client of D2. */
START_TEST(cross_node)
{
	char addr[64];
	ck_assert_int_eq(start_node(&D2, addr, sizeof(addr)), 0);
	target_dir = D2.dir;
	batches(addr, gpu_batches(10000) / 10);
	/* both daemons staged VRAM: the initiator's for what it sent, D2's for what it received */
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "%s/moractl --runtime-dir %s status --json | grep -q '\"vram_bytes_staged\":[[:space:]]*[1-9]'",
		 build_dir(), D2.dir);
	ck_assert_msg(system(cmd) == 0, "morid of the target node staged no VRAM bytes");
}
END_TEST


/* The target dies while its VRAM is mapped here: transfers on it fail with a clear code within
 * two seconds, never hang, and closing the handles releases the mappings. */
START_TEST(target_dies)
{
	struct target t;
	target_start(&t, 7);
	ck_assert_int_eq(ctx_up(), 0);
	mori_client *c;
	OK(mori_client_open(D.dir, "survivor", &c));
	gpu_dptr lv;
	ck_assert_int_eq(g->mem_alloc(&lv, 1u << 20), 0);
	mori_mem *l, *r0, *r1;
	mori_xfer *x;
	OK(mori_mem_register(c, (void *)(uintptr_t)lv, 1u << 20, MORI_MEM_VRAM, &l));
	OK(mori_mem_open_remote(c, NULL, "t/legacy", &r0));
	OK(mori_mem_open_remote(c, NULL, "t/vmm", &r1));
	OK(mori_xfer_write(l, 0, r0, 0, 4096, NULL, &x));
	OK(mori_xfer_wait(x, 1000000));
	mori_xfer_free(x);
	kill(t.pid, SIGKILL); /* the target, with both regions */
	waitpid(t.pid, NULL, 0);
	int rc = write_until_refused(l, r1, 2000000);
	ck_assert_msg(rc == MORI_ESTALE || rc == MORI_EPEERDEAD, "after the target died: %s", mori_strerror(rc));
	ck_assert_int_ne(mori_xfer_write(l, 0, r0, 0, 4096, NULL, &x), MORI_OK);
	OK(mori_mem_deregister(r0));
	OK(mori_mem_deregister(r1));
	ck_assert_ptr_null(c->gpu->maps); /* both mappings released */
	OK(mori_mem_deregister(l));
	mori_client_close(c);
	close(t.to);
	close(t.from);
	g->mem_free(lv);
}
END_TEST

/* Memory of the wrong kind, freed memory, ranges past the allocation: clear errors. */
START_TEST(wrong_kinds)
{
	ck_assert_int_eq(ctx_up(), 0);
	mori_client *c;
	mori_mem *m;
	OK(mori_client_open(D.dir, "kinds", &c));
	char *host = malloc(1 << 16);
	ck_assert_int_eq(mori_mem_register(c, host, 1 << 16, MORI_MEM_VRAM, &m), MORI_EINVAL);
	gpu_dptr p;
	ck_assert_int_eq(g->mem_alloc(&p, 1u << 20), 0);
	ck_assert_int_eq(mori_mem_register(c, (void *)(uintptr_t)p, 1u << 20, MORI_MEM_HOST, &m), MORI_EINVAL);
	ck_assert_int_eq(mori_mem_register(c, (void *)(uintptr_t)(p + 4096), 1u << 20, MORI_MEM_VRAM, &m), MORI_ERANGE);
	OK(mori_mem_register(c, (void *)(uintptr_t)(p + 4096), (1u << 20) - 4096, MORI_MEM_VRAM, &m));
	OK(mori_mem_deregister(m));
	g->mem_free(p);
	ck_assert_int_eq(mori_mem_register(c, (void *)(uintptr_t)p, 4096, MORI_MEM_VRAM, &m), MORI_EINVAL);
	free(host);
	mori_client_close(c);
}
END_TEST

int main(void)
{
	gpu_skip_unless_ready();
	Suite *s = suite_create("gpu_io");
	TCase *t = tcase_create("gpu_io");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 400);
	const char *only = getenv("MORI_TEST_ONLY");
#define ADD(fn) if (!only || !strcmp(only, #fn)) tcase_add_test(t, fn)
	ADD(wrong_kinds);
	ADD(target_dies);
	ADD(random_batches);
	ADD(cross_node);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
