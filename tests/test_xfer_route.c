/* The transport of a transfer comes from the table in order of preference (xfer_route): the
 * first transport the transport option allows, that carries the signal if there is one, and
 * whose can_take and take say yes. Two fake transports stand in for RDMA (preferred, host memory
 * only, no signals) and TCP (any memory, signals); the real RDMA transport's can_take is checked
 * for the rule it states under auto. */
#include <check.h>

#include "../daemon/peer/peer_int.h"
#include "harness.h"

static int a_accepts, took_a, took_b;
static const struct transport fake_a, fake_b;

static int a_can_take(struct peer *p, const struct region *local)
{
	(void)p;
	return local->kind == MORI_MEM_HOST;
}

static int a_take(struct xfer *x)
{
	if (!a_accepts)
		return 0;
	took_a++;
	x->t = &fake_a;
	return 1;
}

static int b_take(struct xfer *x)
{
	took_b++;
	x->t = &fake_b;
	return 1;
}

static const struct transport fake_a = {.name = "a", .id = TR_RDMA, .can_take = a_can_take, .take = a_take};
static const struct transport fake_b = {.name = "b", .id = TR_TCP, .take = b_take, .signals = 1};

static struct peers P;
static struct peer p;
static struct region host = {.kind = MORI_MEM_HOST}, vram = {.kind = MORI_MEM_VRAM};

/* Route a transfer of `local` (signal or not, after `after`): which fake took it, 'a', 'b',
 * or 0 for none. */
static char route(struct region *local, int sig, const struct transport *after)
{
	struct xfer x = {.p = &p, .local = local, .sig = sig};
	took_a = took_b = 0;
	int rc = xfer_route(&x, after);
	ck_assert_int_eq(took_a + took_b, rc);
	return !rc ? 0 : x.t == &fake_a ? 'a' : 'b';
}

static void setup(void)
{
	memset(&P, 0, sizeof(P));
	memset(&p, 0, sizeof(p));
	p.P = &P;
	P.pref[0] = &fake_a;
	P.pref[1] = &fake_b;
	P.npref = 2;
	a_accepts = 1;
}

START_TEST(auto_takes_the_first_that_says_yes)
{
	ck_assert_int_eq(route(&host, 0, NULL), 'a');
	ck_assert_int_eq(route(&vram, 0, NULL), 'b'); /* a's can_take: host memory only */
	a_accepts = 0;
	ck_assert_int_eq(route(&host, 0, NULL), 'b'); /* a declines now (say its links are down) */
}
END_TEST

START_TEST(signal_only_where_applied_after_the_data)
{
	ck_assert_int_eq(route(&host, 1, NULL), 'b');
	P.forced = 1;
	P.only = &fake_a;
	ck_assert_int_eq(route(&host, 1, NULL), 0);
}
END_TEST

START_TEST(handed_back_goes_to_the_next)
{
	ck_assert_int_eq(route(&host, 0, &fake_a), 'b');
	ck_assert_int_eq(route(&host, 0, &fake_b), 0);
}
END_TEST

START_TEST(forced_transport_alone)
{
	P.forced = 1;
	P.only = &fake_b;
	ck_assert_int_eq(route(&host, 0, NULL), 'b'); /* a would take it under auto */
	P.only = &fake_a;
	ck_assert_int_eq(route(&host, 0, NULL), 'a');
	a_accepts = 0;
	ck_assert_int_eq(route(&host, 0, NULL), 0); /* never b */
	P.only = NULL; /* the option names a transport that is not built in */
	ck_assert_int_eq(route(&host, 0, NULL), 0);
}
END_TEST

START_TEST(rdma_takes_host_memory_under_auto)
{
	ck_assert_ptr_nonnull(transport_rdma.can_take);
	ck_assert_int_eq(transport_rdma.can_take(&p, &host), 1);
	ck_assert_int_eq(transport_rdma.can_take(&p, &vram), 0);
	ck_assert_ptr_null(transport_tcp.can_take); /* any memory */
	ck_assert_int_eq(peers_mode(&P, &transport_rdma), TM_AUTO);
	P.forced = 1;
	P.only = &transport_tcp;
	ck_assert_int_eq(peers_mode(&P, &transport_rdma), TM_OFF);
	ck_assert_int_eq(peers_mode(&P, &transport_tcp), TM_ONLY);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xfer_route");
	TCase *t = tcase_create("xfer_route");
	tcase_add_checked_fixture(t, setup, NULL);
	tcase_add_test(t, auto_takes_the_first_that_says_yes);
	tcase_add_test(t, signal_only_where_applied_after_the_data);
	tcase_add_test(t, handed_back_goes_to_the_next);
	tcase_add_test(t, forced_transport_alone);
	tcase_add_test(t, rdma_takes_host_memory_under_auto);
	suite_add_tcase(s, t);
	return run_suite(s);
}
