/* A morid's control socket from a Check test: what moractl asks (status, listings, counters) of
 * the daemon whose runtime dir is dir. No answer, or an error reply, fails the test. Replies are
 * the caller's (mori__reply__free_unpacked). Include after check.h. */
#ifndef MORI_TEST_CTL_HARNESS_H
#define MORI_TEST_CTL_HARNESS_H
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "svc/ctl.h"

/* req to dir's daemon (10 s: the sanitizer builds are slow); its reply, code 0. */
static inline Mori__Reply *ctl_ask(const char *dir, const Mori__Request *req)
{
	char url[400], err[256];
	Mori__Reply *rep = NULL;
	ctl_url(url, sizeof(url), dir);
	int rc = ctl_call(url, req, &rep, 10000, err, sizeof(err));
	ck_assert_msg(rc == MORI_OK, "control request to %s: %s", dir, err);
	ck_assert_msg(rep->code == 0, "control request to %s: %s (%d)", dir, rep->message, rep->code);
	return rep;
}

/* moractl status's reply. */
static inline Mori__Reply *ctl_status(const char *dir)
{
	Mori__Request req;
	ProtobufCMessage empty;
	ctl_request_empty(&req, MORI__REQUEST__BODY_STATUS, &empty);
	Mori__Reply *rep = ctl_ask(dir, &req);
	ck_assert_int_eq(rep->body_case, MORI__REPLY__BODY_STATUS);
	return rep;
}

/* Ask dir's daemon every 20 ms, within_ms at most, until its status lists exactly clients clients
 * and, where regions >= 0, exactly that many regions. 1 when it did, 0 when the deadline came
 * first; the last counts it listed go to *got_clients and *got_regions (either may be NULL), for
 * the caller's message. */
static inline int ctl_wait_clients(const char *dir, uint32_t clients, int64_t regions, unsigned within_ms,
				   uint32_t *got_clients, uint32_t *got_regions)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		Mori__Reply *rep = ctl_status(dir);
		uint32_t c = rep->status->clients, r = rep->status->regions;
		mori__reply__free_unpacked(rep, NULL);
		if (got_clients)
			*got_clients = c;
		if (got_regions)
			*got_regions = r;
		if (c == clients && (regions < 0 || r == regions))
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= (long)within_ms)
			return 0;
		usleep(20000);
	}
}

/* A listing (ListRequest.what: 1 clients, 2 regions, 3 peers, 4 transfers, 5 groups). */
static inline Mori__Reply *ctl_list(const char *dir, uint32_t what)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__ListRequest lq = MORI__LIST_REQUEST__INIT;
	lq.what = what;
	req.body_case = MORI__REQUEST__BODY_LIST;
	req.list = &lq;
	Mori__Reply *rep = ctl_ask(dir, &req);
	ck_assert_int_eq(rep->body_case, MORI__REPLY__BODY_LIST);
	return rep;
}

/* moractl groups' reply from dir's daemon, NULL when it did not answer. Asserts nothing, so a PE
 * (a forked process) may ask too. */
static inline Mori__Reply *ctl_try_groups(const char *dir)
{
	char url[400], err[256];
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__ListRequest lq = MORI__LIST_REQUEST__INIT;
	lq.what = 5;
	req.body_case = MORI__REQUEST__BODY_LIST;
	req.list = &lq;
	Mori__Reply *rep = NULL;
	ctl_url(url, sizeof(url), dir);
	if (ctl_call(url, &req, &rep, 10000, err, sizeof(err)) != MORI_OK)
		return NULL;
	if (rep->code == 0 && rep->body_case == MORI__REPLY__BODY_LIST)
		return rep;
	mori__reply__free_unpacked(rep, NULL);
	return NULL;
}

/* How many groups dir's daemon lists; -1 when it did not answer. */
static inline int ctl_group_count(const char *dir)
{
	Mori__Reply *rep = ctl_try_groups(dir);
	if (!rep)
		return -1;
	int n = (int)rep->list->n_groups;
	mori__reply__free_unpacked(rep, NULL);
	return n;
}

/* How many ranks of group name dir's daemon lists in state: "joined" (at the root, while the
 * group forms), "in call" (waiting in a collective call), "member", ...; -1 when it did not
 * answer. Asserts nothing. */
static inline int ctl_group_ranks(const char *dir, const char *name, const char *state)
{
	Mori__Reply *rep = ctl_try_groups(dir);
	if (!rep)
		return -1;
	int n = 0;
	for (size_t i = 0; i < rep->list->n_groups; i++) {
		const Mori__GroupInfo *g = rep->list->groups[i];
		for (size_t k = 0; !strcmp(g->name, name) && k < g->n_ranks; k++)
			n += !strcmp(g->ranks[k]->state, state);
	}
	mori__reply__free_unpacked(rep, NULL);
	return n;
}

/* Ask dir's daemon every 10 ms, within_ms at most, until it lists at least n ranks of group name
 * in state (ctl_group_ranks). 1 when it did, 0 when the deadline came first. */
static inline int ctl_wait_group_ranks(const char *dir, const char *name, const char *state, int n, unsigned within_ms)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (ctl_group_ranks(dir, name, state) >= n)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >= (long)within_ms)
			return 0;
		usleep(10000);
	}
}

/* One of the daemon's counters (moractl status's list); the test fails if it has none so named. */
static inline uint64_t ctl_counter(const char *dir, const char *name)
{
	Mori__Reply *rep = ctl_status(dir);
	uint64_t v = 0;
	int found = 0;
	for (size_t i = 0; i < rep->status->n_counters; i++)
		if (!strcmp(rep->status->counters[i]->name, name)) {
			v = rep->status->counters[i]->value;
			found = 1;
		}
	mori__reply__free_unpacked(rep, NULL);
	ck_assert_msg(found, "no counter %s", name);
	return v;
}
#endif
