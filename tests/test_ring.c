/* The shared-memory ring (common/ring.h): FIFO order, full and empty, 32-bit counter wrap,
 * untrusted indices, and the sleep/doorbell protocol under two threads. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ring.h"

#define CAP 64u

struct ring {
	struct ring_hdr h;
	uint8_t guard_lo[64];
	struct mori_sqe e[CAP];
	uint8_t guard_hi[64];
};

static struct ring *ring_new(uint32_t start)
{
	struct ring *r = aligned_alloc(RING_LINE, sizeof(struct ring));
	ck_assert_ptr_nonnull(r);
	memset(r, 0, sizeof(*r));
	memset(r->guard_lo, 0xA5, sizeof(r->guard_lo));
	memset(r->guard_hi, 0x5A, sizeof(r->guard_hi));
	atomic_store(&r->h.head, start);
	atomic_store(&r->h.tail, start);
	r->h.capacity = CAP;
	return r;
}

static void guards_intact(const struct ring *r)
{
	for (size_t i = 0; i < sizeof(r->guard_lo); i++) {
		ck_assert_uint_eq(r->guard_lo[i], 0xA5);
		ck_assert_uint_eq(r->guard_hi[i], 0x5A);
	}
}

static struct mori_sqe sqe(uint64_t seq)
{
	struct mori_sqe e;
	memset(&e, 0, sizeof(e));
	e.op = SQE_NOP;
	e.user_data = seq;
	e.tag = ~seq;
	return e;
}

START_TEST(layout)
{
	/* head, tail and sleeping on their own cache lines: no false sharing between the sides */
	ck_assert_uint_eq(offsetof(struct ring_hdr, head) / RING_LINE, 0);
	ck_assert_uint_eq(offsetof(struct ring_hdr, tail) / RING_LINE, 1);
	ck_assert_uint_eq(offsetof(struct ring_hdr, sleeping) / RING_LINE, 2);
	ck_assert_uint_eq(sizeof(struct ring_hdr) % RING_LINE, 0);
	struct ring_layout l;
	ring_layout_compute(&l, 4096, 1024, 1 << 20);
	ck_assert_uint_eq(l.sq_off, 2 * sizeof(struct ring_hdr));
	ck_assert_uint_eq(l.cq_off, l.sq_off + 4096 * 64);
	ck_assert_uint_eq(l.arena_off, l.cq_off + 1024 * 128); /* completions are 128 bytes */
	ck_assert_uint_eq(l.total, l.arena_off + (1 << 20));
	ck_assert_uint_eq(l.sq_off % RING_LINE, 0);
}
END_TEST

START_TEST(push_pop_fifo)
{
	struct ring *r = ring_new(0);
	struct mori_sqe out;
	ck_assert(ring_empty(&r->h));
	ck_assert_int_eq(ring_pop(&r->h, r->e, CAP, sizeof(out), &out), -1);
	for (uint64_t i = 0; i < 10; i++) {
		struct mori_sqe in = sqe(i);
		ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), 0);
	}
	ck_assert(!ring_empty(&r->h));
	for (uint64_t i = 0; i < 10; i++) {
		ck_assert_int_eq(ring_pop(&r->h, r->e, CAP, sizeof(out), &out), 0);
		ck_assert_uint_eq(out.user_data, i);
		ck_assert_uint_eq(out.tag, ~i);
	}
	ck_assert_int_eq(ring_pop(&r->h, r->e, CAP, sizeof(out), &out), -1);
	ck_assert(ring_empty(&r->h));
	ck_assert_uint_eq(atomic_load(&r->h.head), 10);
	ck_assert_uint_eq(atomic_load(&r->h.tail), 10);
	guards_intact(r);
	free(r);
}
END_TEST

START_TEST(full)
{
	struct ring *r = ring_new(0);
	struct mori_sqe in, out;
	for (uint64_t i = 0; i < CAP; i++) {
		in = sqe(i);
		ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), 0);
	}
	in = sqe(999);
	ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), -1); /* full: nothing overwritten */
	ck_assert_uint_eq(atomic_load(&r->h.tail), CAP);
	ck_assert_int_eq(ring_pop(&r->h, r->e, CAP, sizeof(out), &out), 0);
	ck_assert_uint_eq(out.user_data, 0);
	ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), 0); /* one slot freed, one accepted */
	ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), -1);
	for (uint64_t i = 1; i < CAP; i++) {
		ck_assert_int_eq(ring_pop(&r->h, r->e, CAP, sizeof(out), &out), 0);
		ck_assert_uint_eq(out.user_data, i);
	}
	ck_assert_int_eq(ring_pop(&r->h, r->e, CAP, sizeof(out), &out), 0);
	ck_assert_uint_eq(out.user_data, 999);
	guards_intact(r);
	free(r);
}
END_TEST

/* The counters are free-running: crossing 2^32 must change nothing. */
START_TEST(wrap_around)
{
	const uint32_t start = UINT32_MAX - 5;
	struct ring *r = ring_new(start);
	struct mori_sqe in, out;
	for (uint64_t i = 0; i < CAP; i++) {
		in = sqe(i);
		ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), 0);
	}
	ck_assert_uint_lt(atomic_load(&r->h.tail), start); /* tail wrapped past zero */
	in = sqe(7777);
	ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), -1); /* still full across the wrap */
	/* the slot index follows the counter: entry i sits at (start + i) mod CAP */
	for (uint64_t i = 0; i < CAP; i++)
		ck_assert_uint_eq(r->e[(uint32_t)(start + i) & (CAP - 1)].user_data, i);
	uint64_t next = 0;
	for (int round = 0; round < 5 * (int)CAP; round++) {
		ck_assert_int_eq(ring_pop(&r->h, r->e, CAP, sizeof(out), &out), 0);
		ck_assert_uint_eq(out.user_data, next++);
		in = sqe(next + CAP - 1);
		ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), 0);
	}
	while (ring_pop(&r->h, r->e, CAP, sizeof(out), &out) == 0)
		ck_assert_uint_eq(out.user_data, next++);
	ck_assert_uint_eq(next, 6 * CAP);
	ck_assert_uint_eq(atomic_load(&r->h.head), (uint32_t)(start + 6 * CAP));
	guards_intact(r);
	free(r);
}
END_TEST

/* Indices written by the other side are untrusted: a garbage tail or head must never make
 * either side touch memory outside the entry array, and the producer must refuse to write
 * when the distance is impossible. */
START_TEST(corrupt_indices)
{
	struct ring *r = ring_new(100);
	struct mori_sqe in, out;
	for (uint64_t i = 0; i < CAP; i++) {
		r->e[i] = sqe(1000 + i);
	}
	/* consumer: tail far ahead of head (distance > capacity): the distance is clamped, so the
	 * consumer takes at most one ring's worth, each at the slot its masked head names */
	uint32_t tail = 100 + 0x80000000u;
	atomic_store(&r->h.tail, tail);
	for (uint32_t i = 0; i < CAP; i++) {
		ck_assert_int_eq(ring_pop(&r->h, r->e, CAP, sizeof(out), &out), 0);
		ck_assert_uint_eq(out.user_data, 1000 + ((tail - CAP + i) & (CAP - 1)));
	}
	ck_assert_int_eq(ring_pop(&r->h, r->e, CAP, sizeof(out), &out), -1);
	guards_intact(r);
	/* producer: head beyond tail (consumer claims more than was produced) */
	atomic_store(&r->h.head, 50);
	atomic_store(&r->h.tail, 40);
	in = sqe(1);
	ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), -1);
	ck_assert_uint_eq(atomic_load(&r->h.tail), 40);
	/* producer: head far behind tail */
	atomic_store(&r->h.head, 0);
	atomic_store(&r->h.tail, 0x10000);
	ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), -1);
	for (uint64_t i = 0; i < CAP; i++)
		ck_assert_uint_eq(r->e[i].user_data, 1000 + i); /* nothing was overwritten */
	guards_intact(r);
	free(r);
}
END_TEST

START_TEST(sleep_flag)
{
	struct ring *r = ring_new(0);
	struct mori_sqe in = sqe(1), out;
	ck_assert(!ring_needs_wakeup(&r->h));
	ck_assert_int_eq(ring_prepare_sleep(&r->h), 1); /* empty: may block */
	ck_assert(ring_needs_wakeup(&r->h));
	ring_awake(&r->h);
	ck_assert(!ring_needs_wakeup(&r->h));
	ck_assert_int_eq(ring_push(&r->h, r->e, CAP, sizeof(*(&in)), &in), 0);
	ck_assert_int_eq(ring_prepare_sleep(&r->h), 0); /* not empty: must not block */
	ck_assert(!ring_needs_wakeup(&r->h));           /* and did not leave the flag set */
	ck_assert_int_eq(ring_pop(&r->h, r->e, CAP, sizeof(out), &out), 0);
	free(r);
}
END_TEST

/* Two threads move N entries through a small ring with the real protocol: the consumer sleeps
 * on an eventfd only after ring_prepare_sleep, the producer rings only when ring_needs_wakeup.
 * A lost wake-up shows as a consumer blocked with entries waiting: each sleep has a deadline,
 * and a timed-out sleep with a non-empty ring is counted as lost. */
#define N_MOVE 1000000u
#define SLEEP_DEADLINE_MS 2000

struct two {
	struct ring *r;
	int efd;
	uint64_t doorbells, sleeps, lost, full_spins, received, sum, out_of_order;
};

static void *producer(void *arg)
{
	struct two *t = arg;
	for (uint64_t i = 0; i < N_MOVE; i++) {
		struct mori_sqe e = sqe(i);
		e.arg_off = i * 2654435761u; /* payload for the checksum */
		while (ring_push(&t->r->h, t->r->e, CAP, sizeof(*(&e)), &e) != 0) {
			t->full_spins++;
			sched_yield();
		}
		if (ring_needs_wakeup(&t->r->h)) {
			uint64_t one = 1;
			if (write(t->efd, &one, sizeof(one)) != sizeof(one))
				abort();
			t->doorbells++;
		}
	}
	return NULL;
}

static void *consumer(void *arg)
{
	struct two *t = arg;
	uint64_t expect = 0;
	while (t->received < N_MOVE) {
		struct mori_sqe e;
		if (ring_pop(&t->r->h, t->r->e, CAP, sizeof(e), &e) == 0) {
			if (e.user_data != expect)
				t->out_of_order++;
			expect = e.user_data + 1;
			t->sum += e.arg_off ^ e.tag;
			t->received++;
			continue;
		}
		if (!ring_prepare_sleep(&t->r->h))
			continue;
		t->sleeps++;
		struct pollfd p = {.fd = t->efd, .events = POLLIN};
		int n = poll(&p, 1, SLEEP_DEADLINE_MS);
		uint64_t v;
		if (n == 1 && read(t->efd, &v, sizeof(v)) != sizeof(v))
			abort();
		if (n == 0 && !ring_empty(&t->r->h))
			t->lost++; /* entries waited while no doorbell came */
		if (n == 0 && ring_empty(&t->r->h)) {
			t->lost++; /* the producer stalled or stopped early: also a failure */
			ring_awake(&t->r->h);
			break;
		}
		ring_awake(&t->r->h);
	}
	return NULL;
}

START_TEST(two_threads_no_loss)
{
	struct two t = {.r = ring_new(UINT32_MAX - 1000)}; /* wraps during the run */
	t.efd = eventfd(0, EFD_CLOEXEC);
	ck_assert_int_ge(t.efd, 0);
	pthread_t pt, ct;
	ck_assert_int_eq(pthread_create(&ct, NULL, consumer, &t), 0);
	ck_assert_int_eq(pthread_create(&pt, NULL, producer, &t), 0);
	pthread_join(pt, NULL);
	pthread_join(ct, NULL);
	/* the checksum, computed independently of what went through the ring */
	uint64_t want = 0;
	for (uint64_t i = 0; i < N_MOVE; i++)
		want += (i * 2654435761u) ^ ~i;
	ck_assert_uint_eq(t.lost, 0);
	ck_assert_uint_eq(t.received, N_MOVE);
	ck_assert_uint_eq(t.out_of_order, 0);
	ck_assert_uint_eq(t.sum, want);
	ck_assert(ring_empty(&t.r->h));
	/* ring.h rings whenever `sleeping` is set, and the consumer clears it only after it
	 * wakes, so several pushes in that window each ring: bounded by pushes, not by sleeps */
	ck_assert_uint_le(t.doorbells, N_MOVE);
	ck_assert_uint_ge(t.doorbells, t.sleeps > 0 ? 1 : 0);
	fprintf(stderr, "ring: %u entries, %llu sleeps, %llu doorbells, %llu full spins\n", N_MOVE,
		(unsigned long long)t.sleeps, (unsigned long long)t.doorbells,
		(unsigned long long)t.full_spins);
	guards_intact(t.r);
	close(t.efd);
	free(t.r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ring");
	TCase *tc = tcase_create("single");
	tcase_add_test(tc, layout);
	tcase_add_test(tc, push_pop_fifo);
	tcase_add_test(tc, full);
	tcase_add_test(tc, wrap_around);
	tcase_add_test(tc, corrupt_indices);
	tcase_add_test(tc, sleep_flag);
	suite_add_tcase(s, tc);
	TCase *tt = tcase_create("threads");
	tcase_set_timeout(tt, 60);
	tcase_add_test(tt, two_threads_no_loss);
	suite_add_tcase(s, tt);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
