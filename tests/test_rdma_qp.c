/* The QP state machine and the pairing of two engines' QPs, driven by the fake fabric:
 * RESET -> INIT -> RTR -> RTS with the configured attributes, illegal transitions refused,
 * garbage peer ends refused, a failing state change recovered, a QP re-created on one side
 * re-paired on the other, stale answers ignored. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "test_rdma_fake.h"

/* The recorded state changes of the QP numbered qpn, in order. */
static int mods_of(struct fake_dev *d, uint32_t qpn, struct rdma_qp_attr *out, int cap)
{
	int n = 0;
	for (int i = 0; i < d->nmods; i++)
		if (d->mod_qpn[i] == qpn && n < cap)
			out[n++] = d->mods[i];
	return n;
}

START_TEST(pairing_attributes)
{
	struct rdma_cfg a, b;
	rdma_cfg_defaults(&a);
	rdma_cfg_defaults(&b);
	a.timeout = 17, a.retry_cnt = 5, a.rnr_retry = 3, a.mtu = 4096, a.port = 2, a.gid_index = 3;
	b.timeout = 9, b.retry_cnt = 2, b.rnr_retry = 7, b.mtu = 1024;
	struct pair *p = pair_new(3, &a, &b);
	ck_assert_int_eq(pair_connect(p, 100), 0);
	for (int i = 0; i < 3; i++) {
		const struct rdma_qp *qa = rdma_conn_qp(p->ca, i), *qb = rdma_conn_qp(p->cb, i);
		ck_assert_int_eq(qa->state, QPS_RTS);
		ck_assert_int_eq(qb->state, QPS_RTS);
		ck_assert_uint_eq(qa->remote.qpn, qb->qpn);
		ck_assert_uint_eq(qb->remote.qpn, qa->qpn);
		struct rdma_qp_attr m[8];
		int n = mods_of(&p->da, qa->qpn, m, 8);
		ck_assert_int_eq(n, 3);
		ck_assert_int_eq(m[0].to, QPS_INIT);
		ck_assert_int_eq(m[0].port, 2);
		ck_assert_int_eq(m[1].to, QPS_RTR);
		ck_assert_uint_eq(m[1].dest_qpn, qb->qpn);
		ck_assert_uint_eq(m[1].rq_psn, qb->psn);     /* we receive from the peer's send PSN */
		ck_assert_uint_eq(m[1].path_mtu, 1024);      /* the smaller of the two MTUs */
		ck_assert_int_eq(m[1].gid_index, 3);
		ck_assert_uint_eq(m[1].dgid[15], 2);
		ck_assert_int_eq(m[2].to, QPS_RTS);
		ck_assert_uint_eq(m[2].timeout, 17);
		ck_assert_uint_eq(m[2].retry_cnt, 5);
		ck_assert_uint_eq(m[2].rnr_retry, 3);
		ck_assert_uint_eq(m[2].sq_psn, qa->psn);
		n = mods_of(&p->db, qb->qpn, m, 8);
		ck_assert_int_eq(n, 3);
		ck_assert_uint_eq(m[2].timeout, 9);
		ck_assert_uint_eq(m[2].retry_cnt, 2);
		ck_assert_uint_eq(m[2].rnr_retry, 7);
		ck_assert_uint_eq(m[1].path_mtu, 1024);
		ck_assert_uint_le(qa->psn, 0xffffffu);
	}
	pair_free(p);
}
END_TEST

START_TEST(illegal_transitions)
{
	struct pair *p = pair_new(1, NULL, NULL);
	ck_assert_int_eq(pair_connect(p, 100), 0);
	struct rdma_qp *q = (struct rdma_qp *)rdma_conn_qp(p->ca, 0);
	char err[160];
	int nm = p->da.nmods;
	ck_assert_int_eq(rdma_qp_modify(p->a, q, QPS_INIT, NULL, err, sizeof(err)), MORI_EINVAL);
	ck_assert_str_eq(err, "illegal QP transition RTS -> INIT");
	ck_assert_int_eq(rdma_qp_modify(p->a, q, QPS_RTR, NULL, err, sizeof(err)), MORI_EINVAL);
	ck_assert_int_eq(q->state, QPS_RTS);
	ck_assert_int_eq(p->da.nmods, nm); /* nothing reached the device */
	ck_assert_int_eq(rdma_qp_modify(p->a, q, QPS_ERR, NULL, err, sizeof(err)), MORI_OK);
	ck_assert_int_eq(q->state, QPS_ERR);
	ck_assert_int_eq(rdma_qp_modify(p->a, q, QPS_RTS, NULL, err, sizeof(err)), MORI_EINVAL);
	ck_assert_str_eq(err, "illegal QP transition ERR -> RTS");
	pair_free(p);
}
END_TEST

START_TEST(garbage_peer)
{
	struct pair *p = pair_new(1, NULL, NULL);
	/* no progress yet: slot 0 of A waits in INIT */
	ck_assert_int_eq(rdma_conn_qp(p->ca, 0)->state, QPS_INIT);
	char err[160];
	struct rdma_ep ep = {.qpn = 0x123, .psn = 5, .mtu = 1024};
	ep.gid[15] = 9;
	struct rdma_ep bad = ep;
	bad.qpn = 0;
	ck_assert_int_eq(rdma_conn_remote(p->ca, 0, &bad, 0, p->now, err, sizeof(err)), MORI_EPROTO);
	ck_assert_str_eq(err, "peer QP number 0 is not a 24-bit QP number");
	bad = ep;
	bad.qpn = 0x1000000;
	ck_assert_int_eq(rdma_conn_remote(p->ca, 0, &bad, 0, p->now, err, sizeof(err)), MORI_EPROTO);
	bad = ep;
	bad.psn = 0x1000000;
	ck_assert_int_eq(rdma_conn_remote(p->ca, 0, &bad, 0, p->now, err, sizeof(err)), MORI_EPROTO);
	bad = ep;
	memset(bad.gid, 0, 16);
	ck_assert_int_eq(rdma_conn_remote(p->ca, 0, &bad, 0, p->now, err, sizeof(err)), MORI_EPROTO);
	ck_assert_str_eq(err, "peer GID is zero");
	bad = ep;
	bad.mtu = 1500;
	ck_assert_int_eq(rdma_conn_remote(p->ca, 0, &bad, 0, p->now, err, sizeof(err)), MORI_EPROTO);
	ck_assert_str_eq(err, "peer MTU 1500 is not 256..4096");
	ck_assert_int_eq(rdma_conn_remote(p->ca, 7, &ep, 0, p->now, err, sizeof(err)), MORI_EPROTO);
	/* none of it touched the slot */
	ck_assert_int_eq(rdma_conn_qp(p->ca, 0)->state, QPS_INIT);
	/* a well-formed end of a QP that does not exist pairs (nothing can tell yet) and the first
	 * transfer fails with "retry exceeded", not a hang */
	ck_assert_int_eq(rdma_conn_remote(p->ca, 0, &ep, 0, p->now, err, sizeof(err)), MORI_OK);
	ck_assert_int_eq(rdma_conn_qp(p->ca, 0)->state, QPS_RTS);
	pair_free(p);
}
END_TEST

START_TEST(modify_failure_recovers)
{
	struct pair *p = pair_new(1, NULL, NULL);
	p->da.fail_modify_to = QPS_RTR;
	uint8_t gen0 = rdma_conn_qp(p->ca, 0)->gen;
	ck_assert_int_eq(pair_connect(p, 20000), 0);
	/* the refused RTR reset the slot (a new QP, a new generation), then pairing went through */
	ck_assert_uint_ne(rdma_conn_qp(p->ca, 0)->gen, gen0);
	ck_assert_uint_eq(rdma_conn_qp(p->ca, 0)->remote.qpn, rdma_conn_qp(p->cb, 0)->qpn);
	ck_assert_uint_eq(rdma_conn_qp(p->cb, 0)->remote.qpn, rdma_conn_qp(p->ca, 0)->qpn);
	pair_free(p);
}
END_TEST

START_TEST(create_failure_retries)
{
	struct pair *p = pair_new(2, NULL, NULL);
	ck_assert_int_eq(pair_connect(p, 100), 0);
	p->da.fail_create = 1;
	rdma_conn_kill_qp(p->ca, 1, "test", p->now);
	ck_assert_int_eq(rdma_conn_qp(p->ca, 1)->state, QPS_ERR); /* draining */
	ck_assert_int_eq(rdma_conn_qp(p->ca, 1)->draining, 1);
	pair_step(p);
	ck_assert_int_eq(rdma_conn_qp(p->ca, 1)->state, QPS_NONE);
	ck_assert_int_eq(rdma_conn_qp(p->ca, 1)->draining, 0);
	ck_assert_ptr_nonnull(strstr(rdma_conn_qp(p->ca, 1)->why, "fake: create refused"));
	for (int i = 0; i < 100; i++)
		pair_step(p);
	ck_assert_int_eq(rdma_conn_ready(p->ca), 1);
	p->da.fail_create = 0;
	ck_assert_int_eq(pair_connect(p, 20000), 0); /* retried after connect_retry_us */
	pair_free(p);
}
END_TEST

START_TEST(repair_after_peer_recreates)
{
	struct pair *p = pair_new(2, NULL, NULL);
	ck_assert_int_eq(pair_connect(p, 100), 0);
	uint32_t old_a = rdma_conn_qp(p->ca, 1)->qpn, old_b = rdma_conn_qp(p->cb, 1)->qpn;
	uint32_t old_psn_a = rdma_conn_qp(p->ca, 1)->psn;
	rdma_conn_kill_qp(p->cb, 1, "test: B's QP dies", p->now);
	ck_assert_int_eq(rdma_conn_qp(p->cb, 1)->state, QPS_ERR); /* drains first */
	pair_step(p);
	ck_assert_int_eq(rdma_conn_qp(p->cb, 1)->state, QPS_INIT);
	ck_assert_int_eq(pair_connect(p, 100), 0);
	const struct rdma_qp *qa = rdma_conn_qp(p->ca, 1), *qb = rdma_conn_qp(p->cb, 1);
	/* the fake, like rxe, hands the freed numbers out again: only the PSNs tell the QPs apart */
	ck_assert_uint_eq(qb->qpn, old_b);
	(void)old_a;
	ck_assert_uint_eq(qa->remote.psn, qb->psn);
	ck_assert_uint_eq(qb->remote.psn, qa->psn);
	ck_assert_uint_eq(qa->remote.qpn, qb->qpn);
	ck_assert_uint_eq(qb->remote.qpn, qa->qpn);
	ck_assert_uint_ne(qa->psn, old_psn_a); /* A re-created its end too */
	/* slot 0 was not touched */
	ck_assert_uint_eq(rdma_conn_qp(p->ca, 0)->remote.qpn, rdma_conn_qp(p->cb, 0)->qpn);
	/* both sides dying at once converge as well */
	rdma_conn_kill_qp(p->ca, 0, "test", p->now);
	rdma_conn_kill_qp(p->cb, 0, "test", p->now);
	ck_assert_int_eq(pair_connect(p, 100), 0);
	qa = rdma_conn_qp(p->ca, 0), qb = rdma_conn_qp(p->cb, 0);
	ck_assert_uint_eq(qa->remote.qpn, qb->qpn);
	ck_assert_uint_eq(qb->remote.qpn, qa->qpn);
	pair_free(p);
}
END_TEST

START_TEST(stale_ack_ignored)
{
	struct pair *p = pair_new(1, NULL, NULL);
	ck_assert_int_eq(pair_connect(p, 100), 0);
	const struct rdma_qp *qa = rdma_conn_qp(p->ca, 0);
	uint32_t paired = qa->remote.qpn;
	struct rdma_ep ep = {.qpn = 0x777, .psn = 1, .mtu = 1024, .peer_qpn = 0x999};
	ep.gid[15] = 2;
	char err[160];
	/* an ACK addressed to a QP of ours that no longer exists changes nothing */
	ck_assert_int_eq(rdma_conn_remote(p->ca, 0, &ep, 1, p->now, err, sizeof(err)), MORI_OK);
	ck_assert_uint_eq(qa->remote.qpn, paired);
	ck_assert_int_eq(qa->state, QPS_RTS);
	/* a repeated CONNECT of the QP we are paired with is answered, not acted on */
	struct rdma_ep same;
	rdma_conn_local(p->cb, 0, &same);
	same.peer_qpn = 0;
	uint64_t sent = p->ctl.sent;
	uint32_t q_before = qa->qpn;
	ck_assert_int_eq(rdma_conn_remote(p->ca, 0, &same, 0, p->now, err, sizeof(err)), MORI_OK);
	ck_assert_uint_eq(p->ctl.sent, sent + 1);
	ck_assert_uint_eq(qa->qpn, q_before);
	pair_free(p);
}
END_TEST

/* Control messages late, out of order and doubled, while QPs of both sides die again and again:
 * the slots still end up paired with each other's newest QPs, and once the killing stops they
 * settle (no endless re-creation: crossing news meets in the middle). */
START_TEST(pairing_under_chaos)
{
	srandom(4242);
	for (int round = 0; round < 20; round++) {
		struct pair *p = pair_new(3, NULL, NULL);
		p->ctl.chaos = 1;
		for (int s = 0; s < 4000; s++) {
			if (s < 2000 && random() % 97 == 0) {
				int side = (int)(random() % 2), idx = (int)(random() % 3);
				rdma_conn_kill_qp(side ? p->cb : p->ca, idx, "chaos", p->now);
			}
			pair_step(p);
		}
		/* settled: paired with each other's current ends, and quiet */
		ck_assert_msg(pair_connect(p, 20000) == 0, "round %d: not paired", round);
		for (int i = 0; i < 100; i++)
			pair_step(p);
		uint64_t ra = rdma_eng_stats(p->a)->qp_resets, rb = rdma_eng_stats(p->b)->qp_resets;
		for (int i = 0; i < 20000; i++) /* 1 s with resends of stale messages still around */
			pair_step(p);
		ck_assert_uint_eq(rdma_eng_stats(p->a)->qp_resets, ra);
		ck_assert_uint_eq(rdma_eng_stats(p->b)->qp_resets, rb);
		for (int i = 0; i < 3; i++) {
			const struct rdma_qp *qa = rdma_conn_qp(p->ca, i), *qb = rdma_conn_qp(p->cb, i);
			ck_assert_int_eq(qa->state, QPS_RTS);
			ck_assert_uint_eq(qa->remote.qpn, qb->qpn);
			ck_assert_uint_eq(qa->remote.psn, qb->psn);
			ck_assert_uint_eq(qb->remote.qpn, qa->qpn);
			ck_assert_uint_eq(qb->remote.psn, qa->psn);
		}
		pair_free(p);
	}
}
END_TEST

START_TEST(connect_resent_when_lost)
{
	struct pair *p = pair_new(1, NULL, NULL);
	p->ctl.drop = 1;
	for (int i = 0; i < 20000; i++) /* 1 s of fake time */
		pair_step(p);
	ck_assert_int_eq(rdma_conn_ready(p->ca), 0);
	ck_assert_uint_ge(p->ctl.sent, 8); /* resent every connect_retry_us (200 ms) by each */
	p->ctl.drop = 0;
	ck_assert_int_eq(pair_connect(p, 20000), 0);
	pair_free(p);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rdma_qp");
	TCase *t = tcase_create("qp");
	tcase_set_timeout(t, 60);
	tcase_add_test(t, pairing_attributes);
	tcase_add_test(t, illegal_transitions);
	tcase_add_test(t, garbage_peer);
	tcase_add_test(t, modify_failure_recovers);
	tcase_add_test(t, create_failure_retries);
	tcase_add_test(t, repair_after_peer_recreates);
	tcase_add_test(t, stale_ack_ignored);
	tcase_add_test(t, connect_resent_when_lost);
	tcase_add_test(t, pairing_under_chaos);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
