/* Error codes: every MORI_E* code has its own name in mori_strerror, and the name starts with
 * the enum identifier, so a log line can be grepped for the code. */
#include <check.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mori.h"

#define E(x) {x, #x}
static const struct { int code; const char *ident; } codes[] = {
	E(MORI_OK), E(MORI_EINVAL), E(MORI_ENOMEM), E(MORI_ENOENT), E(MORI_ERANGE),
	E(MORI_ETIMEDOUT), E(MORI_ECANCELED), E(MORI_EPROTO), E(MORI_EVERSION), E(MORI_ECONN),
	E(MORI_EPERM), E(MORI_EBUSY), E(MORI_EAGAIN), E(MORI_ESTALE), E(MORI_EPEERDEAD),
	E(MORI_EIO), E(MORI_ENOTSUP), E(MORI_EMSGSIZE), E(MORI_EEXIST), E(MORI_ENOGPU),
	E(MORI_ENOKERNEL), E(MORI_EINPROGRESS), E(MORI_ESYS), E(MORI_EUNREACH),
};
#define NCODES (sizeof(codes) / sizeof(codes[0]))
#define UNKNOWN_PREFIX "MORI_E?"

START_TEST(names_start_with_identifier)
{
	for (size_t i = 0; i < NCODES; i++) {
		const char *s = mori_strerror(codes[i].code);
		ck_assert_ptr_nonnull(s);
		size_t n = strlen(codes[i].ident);
		ck_assert_msg(strncmp(s, codes[i].ident, n) == 0 && s[n] == ':',
			      "mori_strerror(%d) = '%s', expected '%s: ...'", codes[i].code, s, codes[i].ident);
		ck_assert_msg(strlen(s) > n + 2, "code %s has no description", codes[i].ident);
	}
}
END_TEST

START_TEST(codes_and_names_distinct)
{
	for (size_t i = 0; i < NCODES; i++)
		for (size_t j = i + 1; j < NCODES; j++) {
			ck_assert_int_ne(codes[i].code, codes[j].code);
			ck_assert_str_ne(mori_strerror(codes[i].code), mori_strerror(codes[j].code));
		}
}
END_TEST

/* Codes added later than this test: every code the table names (scanning well past the last)
 * must still be distinct, and the known range must have no hole. */
START_TEST(table_has_no_duplicates_or_holes)
{
	const char *seen[256];
	int n = 0, last_known = 0;
	for (int code = 0; code > -256; code--) {
		const char *s = mori_strerror(code);
		if (strncmp(s, UNKNOWN_PREFIX, strlen(UNKNOWN_PREFIX)) == 0)
			continue;
		ck_assert_msg(last_known == code + 1 || code == 0, "hole in the error table before %d", code);
		last_known = code;
		for (int k = 0; k < n; k++)
			ck_assert_msg(strcmp(seen[k], s) != 0, "code %d repeats the name '%s'", code, s);
		seen[n++] = s;
	}
	ck_assert_int_ge(n, (int)NCODES);
}
END_TEST

START_TEST(unknown_codes)
{
	const int bad[] = {1, 42, INT_MAX, INT_MIN, -1000};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *s = mori_strerror(bad[i]);
		ck_assert_ptr_nonnull(s);
		ck_assert_msg(strncmp(s, UNKNOWN_PREFIX, strlen(UNKNOWN_PREFIX)) == 0,
			      "mori_strerror(%d) = '%s', expected unknown", bad[i], s);
	}
}
END_TEST

START_TEST(version_string)
{
	ck_assert_str_eq(mori_version(), MORI_VERSION);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("errors");
	TCase *tc = tcase_create("strerror");
	tcase_add_test(tc, names_start_with_identifier);
	tcase_add_test(tc, codes_and_names_distinct);
	tcase_add_test(tc, table_has_no_duplicates_or_holes);
	tcase_add_test(tc, unknown_codes);
	tcase_add_test(tc, version_string);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
