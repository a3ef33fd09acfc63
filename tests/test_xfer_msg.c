/* What a failed transfer's completion says: the reason fits the completion's 104
 * bytes cut at a word's end with "...", not mid-word, and "peer A: ... A ..." loses the
 * repeated prefix so the room goes to the cause. */
#include <check.h>

#include "../daemon/peer/peer_int.h"
#include "harness.h"

START_TEST(cut_at_a_word)
{
	struct mori_cqe e;
	cqe_msg(&e, "region 6 is gone");
	ck_assert_str_eq(e.msg, "region 6 is gone");
	const char *lng = "cannot reach peer daemon 127.0.0.1:17402 within 5000 ms: data stream connection refused "
			  "by 127.0.0.1:17402 after three tries of the hello";
	cqe_msg(&e, lng);
	size_t n = strlen(e.msg);
	ck_assert_uint_lt(n, sizeof(e.msg));
	ck_assert_msg(n > 3 && !strcmp(e.msg + n - 3, "..."), "no ellipsis: '%s'", e.msg);
	ck_assert_msg(!strncmp(e.msg, lng, n - 3), "not a prefix: '%s'", e.msg);
	ck_assert_msg(lng[n - 3] == ' ' || lng[n - 3] == ':' || lng[n - 3] == ',', "cut mid-word: '%s'", e.msg);
	char nospace[300];
	memset(nospace, 'x', sizeof(nospace) - 1);
	nospace[sizeof(nospace) - 1] = 0;
	cqe_msg(&e, nospace);
	ck_assert_uint_eq(strlen(e.msg), sizeof(e.msg) - 1);
	ck_assert_str_eq(e.msg + sizeof(e.msg) - 4, "...");
}
END_TEST

START_TEST(peer_named_once)
{
	char m[200] = "peer 127.0.0.1:17402: cannot reach peer daemon 127.0.0.1:17402 within 5000 ms";
	msg_drop_repeated_peer(m, "127.0.0.1:17402");
	ck_assert_str_eq(m, "cannot reach peer daemon 127.0.0.1:17402 within 5000 ms");
	char k[200] = "peer 127.0.0.1:17402: region 9 is no longer registered";
	msg_drop_repeated_peer(k, "127.0.0.1:17402");
	ck_assert_str_eq(k, "peer 127.0.0.1:17402: region 9 is no longer registered");
	char o[200] = "peer 10.0.0.1:7100: cannot reach peer daemon 127.0.0.1:17402";
	msg_drop_repeated_peer(o, "127.0.0.1:17402");
	ck_assert_str_eq(o, "peer 10.0.0.1:7100: cannot reach peer daemon 127.0.0.1:17402");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xfer_msg");
	TCase *t = tcase_create("xfer_msg");
	tcase_add_test(t, cut_at_a_word);
	tcase_add_test(t, peer_named_once);
	suite_add_tcase(s, t);
	return run_suite(s);
}
