/* Registration refuses ranges that wrap the address space or are not mapped in
 * the caller, with MORI_ERANGE and the range, in libmori and in morid (which never trusts the
 * library: raw MemRegister requests on the session socket get the same answer). Nothing refused
 * shows up in the daemon's tables (moractl memory once showed 16777216.0 TiB). */
#include <check.h>
#include <stdint.h>
#include <sys/mman.h>

#include "../libclient/internal.h" /* raw session requests */
#include "harness.h"
#include "ctl_harness.h"
#include "svc/ctl.h"

static struct test_daemon D;

static void setup(void) { ck_assert_int_eq(daemon_start(&D, NULL), 0); }
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

static void registered(uint32_t *regions, uint64_t *bytes)
{
	Mori__Reply *rep = ctl_status(D.dir);
	*regions = rep->status->regions;
	*bytes = rep->status->registered_bytes;
	mori__reply__free_unpacked(rep, NULL);
}

/* A MemRegister by hand (no fd: memory reached by cross-memory attach). */
static int raw_register(mori_client *c, uint64_t addr, uint64_t size, char *msg, size_t len)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__MemRegister mr = MORI__MEM_REGISTER__INIT;
	Mori__Reply *rep = NULL;
	mr.kind = MORI_MEM_HOST;
	mr.addr = addr;
	mr.size = size;
	req.body_case = MORI__REQUEST__BODY_MEM_REGISTER;
	req.mem_register = &mr;
	int rc = client_rpc(c, &req, NULL, 0, &rep, NULL, NULL);
	snprintf(msg, len, "%s", mori_client_last_error(c));
	if (rep)
		mori__reply__free_unpacked(rep, NULL);
	return rc;
}

START_TEST(library)
{
	mori_client *c;
	mori_mem *m, *m2;
	OK(mori_client_open(D.dir, "ranges", &c));
	uint8_t *buf = aligned_alloc(4096, 1 << 16);
	ck_assert_int_eq(mori_mem_register(c, buf, SIZE_MAX, MORI_MEM_HOST, &m), MORI_ERANGE);
	ck_assert_ptr_nonnull(strstr(mori_client_last_error(c), "wraps"));
	/* a second overlapping wrapped range: refused as well */
	ck_assert_int_eq(mori_mem_register(c, buf + 4096, SIZE_MAX - 100, MORI_MEM_HOST, &m2), MORI_ERANGE);
	/* a hole in the middle */
	uint8_t *p = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert(p != MAP_FAILED);
	ck_assert_int_eq(munmap(p + 4096, 4096), 0);
	ck_assert_int_eq(mori_mem_register(c, p, 3 * 4096, MORI_MEM_HOST, &m), MORI_ERANGE);
	ck_assert_ptr_nonnull(strstr(mori_client_last_error(c), "not mapped"));
	ck_assert_int_eq(mori_mem_register(c, p + 4096, 4096, MORI_MEM_HOST, &m), MORI_ERANGE);
	/* memory never mapped */
	ck_assert_int_eq(mori_mem_register(c, (void *)(uintptr_t)0x10000, 4096, MORI_MEM_HOST, &m), MORI_ERANGE);
	/* mapped ranges still register, across two adjacent mappings too */
	OK(mori_mem_register(c, p, 4096, MORI_MEM_HOST, &m));
	OK(mori_mem_deregister(m));
	uint8_t *q = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert(q != MAP_FAILED);
	ck_assert_int_eq(mprotect(q + 4096, 4096, PROT_READ), 0); /* two mappings, back to back */
	OK(mori_mem_register(c, q, 2 * 4096, MORI_MEM_HOST, &m));
	OK(mori_mem_deregister(m));
	OK(mori_mem_register(c, buf, 1 << 16, MORI_MEM_HOST, &m));
	uint32_t n;
	uint64_t bytes;
	registered(&n, &bytes);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(bytes, 1 << 16);
	OK(mori_mem_deregister(m));
	munmap(p, 4096);
	munmap(p + 2 * 4096, 4096);
	munmap(q, 2 * 4096);
	free(buf);
	mori_client_close(c);
}
END_TEST

START_TEST(daemon_checks)
{
	mori_client *c;
	char msg[512];
	OK(mori_client_open(D.dir, "raw", &c));
	/* what libmori would refuse, sent by hand */
	ck_assert_int_eq(raw_register(c, 0xfffffffffffff000ull, UINT64_MAX, msg, sizeof(msg)), MORI_ERANGE);
	ck_assert_msg(strstr(msg, "0xfffffffffffff000") && strstr(msg, "wraps"), "%s", msg);
	uint8_t *buf = aligned_alloc(4096, 1 << 16);
	ck_assert_int_eq(raw_register(c, (uint64_t)(uintptr_t)buf, UINT64_MAX - 10, msg, sizeof(msg)), MORI_ERANGE);
	uint8_t *p = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_int_eq(munmap(p + 4096, 4096), 0);
	ck_assert_int_eq(raw_register(c, (uint64_t)(uintptr_t)p, 3 * 4096, msg, sizeof(msg)), MORI_ERANGE);
	ck_assert_msg(strstr(msg, "not mapped in pid"), "%s", msg);
	ck_assert_int_eq(raw_register(c, 0x10000, 4096, msg, sizeof(msg)), MORI_ERANGE);
	ck_assert_int_eq(raw_register(c, 0, 4096, msg, sizeof(msg)), MORI_ERANGE);
	/* a mapped range by hand is fine */
	OK(raw_register(c, (uint64_t)(uintptr_t)buf, 1 << 16, msg, sizeof(msg)));
	uint32_t n;
	uint64_t bytes;
	registered(&n, &bytes);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(bytes, 1 << 16);
	munmap(p, 4096);
	munmap(p + 2 * 4096, 4096);
	mori_client_close(c);
	free(buf);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("register_range");
	TCase *t = tcase_create("register_range");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, library);
	tcase_add_test(t, daemon_checks);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
