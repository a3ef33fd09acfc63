/* PEs as forked processes, for the MORI-SHMEM tests (test_shmem, test_gpu_heap, test_gpu_shmem):
 * each runs a function; a failed check in it writes where and why into a shared page and ends
 * the PE; the parent waits for all and fails the test naming each PE that failed. Also the
 * test's page shared with its PEs (pe_shared_map) and join_alone, a group of one PE. Include
 * after check.h and harness.h. */
#ifndef MORI_TEST_PE_HARNESS_H
#define MORI_TEST_PE_HARNESS_H
#include <sys/mman.h>
#include <time.h>

#include "mori_shmem.h"

#define PE_MSG_LEN 600

/* Where the PEs say why they failed: one message per PE, in memory the test maps MAP_SHARED
 * before forking (a field `char msg[MAXPE][PE_MSG_LEN]` of its shared page). */
static char (*pe_msg)[PE_MSG_LEN];

/* bytes of memory the PEs forked after this share with the test (MAP_SHARED; zero, as every
 * anonymous mapping starts). */
static inline void *pe_shared_alloc(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	return p;
}
/* The test's shared struct: sp = a fresh one, and pe_msg = its msg field; unmapped by
 * pe_shared_unmap(sp). */
#define pe_shared_map(sp) ((sp) = pe_shared_alloc(sizeof(*(sp))), pe_msg = (sp)->msg)
#define pe_shared_unmap(sp) munmap((void *)(sp), sizeof(*(sp)))

/* In a PE: a failed check records where and why, and ends the PE (returns the line). */
#define PCHECK(pe, cond, ...)                                                                        \
	do {                                                                                         \
		if (!(cond)) {                                                                       \
			int _o = snprintf(pe_msg[pe], PE_MSG_LEN, "PE %d line %d: %s: ", pe, __LINE__, #cond); \
			snprintf(pe_msg[pe] + _o, PE_MSG_LEN - (size_t)_o, __VA_ARGS__);             \
			return __LINE__;                                                              \
		}                                                                                    \
	} while (0)
/* In a PE: a libmori call that must succeed. */
#define POK(pe, x)                                                                                   \
	do {                                                                                         \
		int _r = (x);                                                                        \
		PCHECK(pe, _r == MORI_OK, "%s (%s)", mori_strerror(_r), mori_client_last_error(NULL));      \
	} while (0)
/* In a PE: a GPU driver call (common/gpu.h) that must succeed. */
#define GOK(pe, x)                                                                                   \
	do {                                                                                         \
		int _r = (x);                                                                        \
		PCHECK(pe, _r == 0, "driver: %s", gpu_strerror(_r));                                 \
	} while (0)

/* A PE's body: 0 for success, else the failed check's line (pe_msg[pe] says why). */
typedef int (*pe_fn)(int pe, int n, void *arg);

/* Fork n PEs (n <= 64) running fn(pe, n, arg), each ended by SIGALRM after timeout_s and by
 * SIGKILL if this process dies; their pids in pids[n]. Clears the n messages first. */
static inline void pe_fork_all(int n, pe_fn fn, void *arg, int timeout_s, pid_t *pids)
{
	ck_assert_int_le(n, 64);
	memset(pe_msg, 0, (size_t)n * PE_MSG_LEN);
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			child_deadline((unsigned)timeout_s);
			_exit(fn(i, n, arg) ? 1 : 0);
		}
	}
}

/* Wait for PEs first, first + step, ... below n of pids[n] (pe_fork_all's): each must exit 0,
 * except, with last_killed, PE n-1, which must die of SIGKILL (it kills itself to play a crash).
 * Fails the test with each failed PE's message or how it ended. */
static inline void pe_wait_all(int n, const pid_t *pids, int first, int step, int last_killed)
{
	char why[4096] = "";
	size_t o = 0;
	int bad = 0, waited = 0;
	for (int i = first; i < n; i += step) {
		int st;
		waited++;
		ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
		int killed = last_killed && i == n - 1;
		if (killed ? WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL : WIFEXITED(st) && WEXITSTATUS(st) == 0)
			continue;
		bad++;
		o += (size_t)snprintf(why + o, sizeof(why) - o, "[PE %d %s%s %d: %s] ", i, killed ? "was to be killed, " : "",
				      WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
				      pe_msg[i][0] ? pe_msg[i] : "-");
		if (o >= sizeof(why))
			o = sizeof(why) - 1;
	}
	ck_assert_msg(bad == 0, "%d of %d PEs failed: %s", bad, waited, why);
}

/* pe_fork_all, then pe_wait_all for every PE. Returns the seconds it took. */
static inline double pe_run_all(int n, pe_fn fn, void *arg, int timeout_s, int last_killed)
{
	pid_t pids[64];
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pe_fork_all(n, fn, arg, timeout_s, pids);
	pe_wait_all(n, pids, 0, 1, last_killed);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

/* Byte i of what rank `from` puts to rank `to` (salt: a round or a case): computed from the
 * numbers alone, nothing of mori's; the tests' model of every transfer. */
static inline uint8_t pe_pattern(int from, int to, uint64_t i, uint64_t salt)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)from << 40) ^ ((uint64_t)to << 20) ^ salt;
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return (uint8_t)x;
}

/* A MORI-SHMEM group of one PE (rank 0 of 1) with a host heap of heap_size bytes; must be
 * joined within 5 s. */
static inline mori_group *join_alone(mori_client *c, const char *name, uint64_t heap_size)
{
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = heap_size;
	o.timeout_us = 5000000;
	mori_group *g = NULL;
	OK(mori_shmem_init(c, name, 0, 1, &o, &g));
	return g;
}
#endif
