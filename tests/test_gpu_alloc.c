/* mori_mem_alloc(MORI_MEM_VRAM): VMM (default) and cudaMalloc (MORI_VRAM_ALLOC=malloc) memory,
 * zero-filled, filled and read back from the host through same-client transfers with a host
 * region, opened by name and read by a second process, freed at deregister; bad device
 * numbers. The MORI_ENOGPU case runs everywhere; the rest skips (77) without a GPU or kernels. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "mori.h"

#define SIZE ((5u << 20) + 4099) /* not a multiple of the VMM granularity */

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

/* Move len bytes between host region h (at 0) and region v (at off): op WRITE h -> v. */
static void move(mori_mem *h, mori_mem *v, uint64_t off, uint64_t len, int op)
{
	mori_xfer *x;
	OK(mori_xfer_batch(op, h, v, &(mori_desc){0, off, len}, 1, NULL, &x));
	OK(mori_xfer_wait(x, 10000000));
	mori_xfer_free(x);
}

START_TEST(no_gpu)
{
	setenv("MORI_GPU", "none", 1);
	mori_client *c;
	mori_mem *m = NULL;
	OK(mori_client_open(D.dir, "t", &c));
	ck_assert_int_eq(mori_mem_alloc(c, 4096, MORI_MEM_VRAM, &m), MORI_ENOGPU);
	ck_assert_ptr_null(m);
	ck_assert_int_eq(mori_mem_alloc(c, 4096, 7, &m), MORI_EINVAL);
	ck_assert_int_eq(mori_mem_alloc(c, 0, MORI_MEM_VRAM, &m), MORI_EINVAL);
	mori_client_close(c);
}
END_TEST

/* The peer: waits for a go byte, opens "t/vram", reads it whole into its own host region and
 * writes the hash back. Forked before this process touches the GPU. */
static pid_t peer_start(int *go, int *res)
{
	int a[2], b[2];
	ck_assert_int_eq(pipe(a), 0);
	ck_assert_int_eq(pipe(b), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(a[1]);
		close(b[0]);
		char ch;
		mori_client *c;
		mori_mem *r, *h;
		if (read(a[0], &ch, 1) != 1 || mori_client_open(D.dir, "peer", &c) ||
		    mori_mem_open_remote(c, NULL, "t/vram", &r) || mori_mem_alloc(c, SIZE, MORI_MEM_HOST, &h))
			_exit(10);
		mori_xfer *x;
		if (mori_xfer_read(h, 0, r, 0, SIZE, NULL, &x) || mori_xfer_wait(x, 10000000))
			_exit(11);
		uint64_t hash = test_hash(0, mori_mem_ptr(h), SIZE);
		if (write(b[1], &hash, sizeof(hash)) != sizeof(hash))
			_exit(12);
		mori_xfer_free(x);
		mori_client_close(c);
		_exit(0);
	}
	close(a[0]);
	close(b[1]);
	*go = a[1];
	*res = b[0];
	return pid;
}

static void alloc_roundtrip(int legacy_expected)
{
	int go, res;
	pid_t peer = peer_start(&go, &res);
	mori_client *c;
	mori_mem *v, *h, *h2;
	OK(mori_client_open(D.dir, "t", &c));
	OK(mori_mem_alloc(c, SIZE, MORI_MEM_VRAM, &v));
	ck_assert_uint_eq(mori_mem_size(v), SIZE);
	uint64_t dptr = (uint64_t)(uintptr_t)mori_mem_ptr(v);
	ck_assert(dptr != 0);
	const struct gpu_api *g = gpu_api();
	unsigned type = 0, legacy = 7;
	ck_assert_int_eq(g->pointer_get_attribute(&type, GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr), 0);
	ck_assert_uint_eq(type, GPU_MEMORYTYPE_DEVICE);
	ck_assert_int_eq(g->pointer_get_attribute(&legacy, GPU_POINTER_ATTRIBUTE_IS_LEGACY_IPC_CAPABLE, dptr), 0);
	ck_assert_uint_eq(legacy, (unsigned)legacy_expected);

	OK(mori_mem_alloc(c, SIZE, MORI_MEM_HOST, &h));
	OK(mori_mem_alloc(c, SIZE, MORI_MEM_HOST, &h2));
	uint8_t *hp = mori_mem_ptr(h), *h2p = mori_mem_ptr(h2);
	/* zero-filled: read it back over a host region full of 0xff */
	memset(h2p, 0xff, SIZE);
	move(h2, v, 0, SIZE, MORI_XFER_READ);
	for (size_t i = 0; i < SIZE; i++)
		ck_assert_msg(h2p[i] == 0, "byte %zu of a fresh VRAM region is %u", i, h2p[i]);
	/* fill from the host in three uneven pieces, read back whole */
	uint64_t seed = test_seed();
	for (size_t i = 0; i < SIZE; i++)
		hp[i] = (uint8_t)(test_rand(&seed) >> 56);
	move(h, v, 0, 1000003, MORI_XFER_WRITE);
	mori_xfer *x;
	OK(mori_xfer_batch(MORI_XFER_WRITE, h, v, (mori_desc[]){{1000003, 1000003, 3}, {1000006, 1000006, SIZE - 1000006}},
			   2, NULL, &x));
	OK(mori_xfer_wait(x, 10000000));
	mori_xfer_free(x);
	memset(h2p, 0, SIZE);
	move(h2, v, 0, SIZE, MORI_XFER_READ);
	long long diff = gpu_first_diff(hp, h2p, SIZE);
	ck_assert_msg(diff < 0, "VRAM differs from what was written at byte %lld", diff);

	/* another process opens it by name and reads the same bytes */
	OK(mori_mem_publish(v, "t/vram"));
	char ch = 'g';
	ck_assert_int_eq(write(go, &ch, 1), 1);
	uint64_t got = 0;
	ck_assert_int_eq(read(res, &got, sizeof(got)), sizeof(got));
	ck_assert_uint_eq(got, test_hash(0, hp, SIZE));
	int st = 0;
	waitpid(peer, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	/* deregister frees the device memory */
	OK(mori_mem_deregister(v));
	ck_assert_int_ne(g->pointer_get_attribute(&type, GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr), 0);
	mori_client_close(c);
	close(go);
	close(res);
}

START_TEST(alloc_vmm)
{
	unsetenv("MORI_VRAM_ALLOC");
	alloc_roundtrip(0);
}
END_TEST

START_TEST(alloc_malloc)
{
	setenv("MORI_VRAM_ALLOC", "malloc", 1);
	alloc_roundtrip(1);
}
END_TEST

START_TEST(bad_device)
{
	mori_client *c;
	mori_mem *m = NULL;
	OK(mori_client_open(D.dir, "t", &c));
	setenv("MORI_GPU_DEVICE", "99", 1);
	ck_assert_int_eq(mori_mem_alloc(c, 4096, MORI_MEM_VRAM, &m), MORI_EINVAL);
	ck_assert_msg(strstr(mori_client_last_error(c), "MORI_GPU_DEVICE=99"), "%s", mori_client_last_error(c));
	setenv("MORI_GPU_DEVICE", "zero", 1);
	ck_assert_int_eq(mori_mem_alloc(c, 4096, MORI_MEM_VRAM, &m), MORI_EINVAL);
	setenv("MORI_GPU_DEVICE", "0", 1);
	OK(mori_mem_alloc(c, 4096, MORI_MEM_VRAM, &m));
	OK(mori_mem_deregister(m));
	mori_client_close(c);
}
END_TEST

static int run(Suite *s)
{
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed;
}

int main(void)
{
	Suite *s = suite_create("gpu_alloc_nogpu");
	TCase *t = tcase_create("no_gpu");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, no_gpu);
	suite_add_tcase(s, t);
	if (run(s))
		return 1;
	gpu_skip_unless_ready();
	s = suite_create("gpu_alloc");
	t = tcase_create("gpu_alloc");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, alloc_vmm);
	tcase_add_test(t, alloc_malloc);
	tcase_add_test(t, bad_device);
	suite_add_tcase(s, t);
	return run(s) ? 1 : 0;
}
