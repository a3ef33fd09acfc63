/* MORI-SHMEM's host side, no GPU: groups of forked PEs on one node and
 * across two morids, symmetric allocation (1 000 random calls: equal offsets on every PE,
 * checked across processes against an independent model of live blocks), divergent calls
 * refused naming the PE, host puts/gets checked byte for byte against an independent pattern,
 * barrier_all 10 000 times with counters that catch a PE passing early, and every fault: no
 * room, addresses outside the heap, PEs out of range, join deadlines naming missing ranks, a PE
 * killed, heaps freed with the last PE, a name reused while its group lives, one client in two
 * groups.
 *
 * Two nodes: by default two morids on loopback; tests/test_shmem_netns.sh runs this binary with
 * MORI_XNODE_NS_A/B and MORI_XNODE_IP_A/B (network namespaces joined by veth), the daemons then
 * run inside them and the PEs stay outside, reaching them through their runtime dirs. */
#include <check.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "../daemon/shmem/symalloc.h"
#include "harness.h"
#include "ctl_harness.h"
#include "node_harness.h"
#include "pe_harness.h"
#include "mori.h"
#include "mori_shmem.h"
#include "shmem_layout.h"
#include "svc/ctl.h"
#include "wire.h"

#define HEAP (8u << 20)
#define MAXPE 8

/* ---- nodes: one or two morids ---- */

static struct test_node NA, NB;
static int two_nodes;

/* One node without a peer listener (the single-node tests). */
static void setup1(void)
{
	two_nodes = 0;
	ck_assert_int_eq(node_one_start(&NA, "shmem"), 0);
}

/* Two nodes; PEs on B name A's daemon as the root. */
static void setup2(void)
{
	two_nodes = 1;
	ck_assert_int_eq(node_two_start(&NA, &NB, "shmem", 7100, 1), 0);
}

/* Both must exit 0 (every handle closed, nothing leaked); their files stay when one did not. */
static void teardown(void)
{
	ck_assert_msg(node_pair_stop(&NA, &NB) == 0, "morid did not stop cleanly (above: which, and its log)");
}

/* ---- PEs: forked processes ---- */

struct shared {
	char msg[MAXPE][PE_MSG_LEN]; /* a PE's failure */
	int rc[MAXPE];            /* a PE's result, when a test wants one */
	uint8_t uid[MORI_SHMEM_UID_BYTES];
	size_t uid_len;
	volatile int uid_ready;
	uint64_t offs[MAXPE][1100]; /* per PE: offsets malloc gave, in call order */
	uint32_t aligns[1100];
	uint64_t sizes[1100];
	int nops;
};
static struct shared *SH;

/* The node PE pe runs on: A, or B for odd PEs when two nodes run. */
static struct test_node *node_of(int pe) { return two_nodes && (pe & 1) ? &NB : &NA; }

static void opts_for(mori_shmem_opts *o, uint64_t heap)
{
	mori_shmem_opts_init(o, sizeof(*o));
	o->heap_size = heap;
	o->root = two_nodes ? NA.addr : NULL;
	o->timeout_us = 20000000;
}

static int join(int pe, int n, const char *name, mori_client **c, mori_group **g)
{
	char label[32];
	snprintf(label, sizeof(label), "pe%d", pe);
	POK(pe, mori_client_open(node_of(pe)->dir, label, c));
	mori_shmem_opts o;
	opts_for(&o, HEAP);
	POK(pe, mori_shmem_init(*c, name, pe, n, &o, g));
	return 0;
}

static void shared_setup(void) { pe_shared_map(SH); }

/* The groups a daemon lists (moractl groups' request), and its region count. */
static size_t daemon_groups(struct test_node *n, uint32_t *regions)
{
	Mori__Reply *rep = ctl_list(n->dir, 5);
	size_t ng = rep->list->n_groups;
	mori__reply__free_unpacked(rep, NULL);
	if (regions) {
		rep = ctl_list(n->dir, 2);
		*regions = (uint32_t)rep->list->n_regions;
		mori__reply__free_unpacked(rep, NULL);
	}
	return ng;
}

/* Nothing left: no group, no region, on every daemon (waits a little: the last leave is async). */
static void assert_all_released(void)
{
	struct test_node *ns[2] = {&NA, &NB};
	for (int k = 0; k < 1 + two_nodes; k++) {
		uint32_t regions = 1;
		size_t ng = 1;
		for (int i = 0; i < 200 && (ng || regions); i++) {
			ng = daemon_groups(ns[k], &regions);
			if (ng || regions)
				usleep(10000);
		}
		ck_assert_msg(ng == 0 && regions == 0, "node %c still lists %zu groups and %u regions", 'A' + k, ng, regions);
	}
}

/* ---- the allocator alone ---- */

START_TEST(symalloc_unit)
{
	struct symheap h;
	char msg[300];
	uint64_t a, b, c, d;
	ck_assert_int_eq(symheap_init(&h, 1 << 20, MORI_SHMEM_RESERVED), 0);
	ck_assert_int_eq(symheap_alloc(&h, 100, 0, &a, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(a, MORI_SHMEM_RESERVED); /* first fit, 256-aligned */
	ck_assert_int_eq(symheap_alloc(&h, 1, 4096, &b, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(b, MORI_SHMEM_RESERVED + 4096);
	ck_assert_int_eq(symheap_alloc(&h, 10, 0, &c, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(c, MORI_SHMEM_RESERVED + 256); /* in the gap before b (a took 128 bytes), 256-aligned */
	ck_assert_int_eq(symheap_alloc(&h, 0, 0, &d, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(d, 0);
	ck_assert_int_eq(symheap_alloc(&h, 8, 3, &d, msg, sizeof(msg)), MORI_EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "power of two"));
	ck_assert_int_eq(symheap_alloc(&h, 1 << 20, 0, &d, msg, sizeof(msg)), MORI_ENOMEM);
	ck_assert_msg(strstr(msg, "1048576") && strstr(msg, "free"), "%s", msg);
	ck_assert_int_eq(symheap_free(&h, b + 64, msg, sizeof(msg)), MORI_EINVAL);
	ck_assert_int_eq(symheap_free(&h, b, msg, sizeof(msg)), 0);
	ck_assert_int_eq(symheap_free(&h, b, msg, sizeof(msg)), MORI_EINVAL); /* twice */
	ck_assert_int_eq(symheap_free(&h, a, msg, sizeof(msg)), 0);
	ck_assert_int_eq(symheap_free(&h, c, msg, sizeof(msg)), 0);
	uint64_t largest, free_b = symheap_free_bytes(&h, &largest);
	ck_assert_uint_eq(free_b, (1 << 20) - MORI_SHMEM_RESERVED); /* everything coalesced */
	ck_assert_uint_eq(largest, free_b);
	ck_assert_uint_eq(h.nfree, 1);
	ck_assert_int_eq(symheap_alloc(&h, (1 << 20) - MORI_SHMEM_RESERVED, 0, &d, msg, sizeof(msg)), 0);
	ck_assert_uint_eq(d, MORI_SHMEM_RESERVED);
	symheap_fini(&h);
}
END_TEST

/* ---- groups of 1, 2, 3, 8 PEs ---- */

static int pe_basic(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	if (join(pe, n, (const char *)arg, &c, &g))
		return 1;
	PCHECK(pe, mori_shmem_my_pe(g) == pe && mori_shmem_n_pes(g) == n, "my_pe %d n_pes %d", mori_shmem_my_pe(g),
	       mori_shmem_n_pes(g));
	PCHECK(pe, mori_shmem_heap_size(g) == HEAP, "heap %llu", (unsigned long long)mori_shmem_heap_size(g));
	uint8_t *base = mori_shmem_heap_base(g);
	PCHECK(pe, base != NULL, "no heap");
	const int *team;
	int tn;
	POK(pe, mori_shmem_team_node(g, &team, &tn));
	int want = two_nodes ? (pe & 1 ? n / 2 : (n + 1) / 2) : n;
	PCHECK(pe, tn == want, "node team of %d, not %d", tn, want);
	for (int i = 0; i < tn; i++)
		PCHECK(pe, (i == 0 || team[i] > team[i - 1]) && (!two_nodes || (team[i] & 1) == (pe & 1)), "team[%d] = %d", i,
		       team[i]);
	/* the reserved area is zero; our first allocation follows it */
	for (uint32_t i = 0; i < MORI_SHMEM_RESERVED; i += 512)
		PCHECK(pe, base[i] == 0, "reserved byte %u is %u", i, base[i]);
	uint64_t *w;
	POK(pe, mori_shmem_malloc(g, 64 * sizeof(uint64_t), 0, (void **)&w));
	PCHECK(pe, mori_shmem_offset(g, w) == MORI_SHMEM_RESERVED, "first allocation at %lld",
	       (long long)mori_shmem_offset(g, w));
	w[0] = 0xabc000u + (uint64_t)pe;
	POK(pe, mori_shmem_barrier_all(g));
	/* every PE of this node is mapped here at the same offsets; the others are not */
	for (int q = 0; q < n; q++) {
		uint64_t *p = mori_shmem_ptr_p2p(g, w, q);
		int local = !two_nodes || (q & 1) == (pe & 1);
		PCHECK(pe, (p != NULL) == local, "ptr_p2p(PE %d) = %p", q, (void *)p);
		if (p)
			PCHECK(pe, p[0] == 0xabc000u + (uint64_t)q, "PE %d's word reads %#llx", q, (unsigned long long)p[0]);
	}
	PCHECK(pe, mori_shmem_ptr_p2p(g, w, pe) == w, "ptr_p2p of oneself");
	/* the device API's state (host copy for host heaps) says the same */
	const struct mori_shmem_state *s = mori_shmem_state(g);
	PCHECK(pe, s && s->magic == MORI_SHMEM_MAGIC && s->my_pe == pe && s->n_pes == n && s->node_pes == tn &&
		       s->heap_size == HEAP && s->heap_base == (uint64_t)(uintptr_t)base,
	       "state");
	for (int q = 0; q < n; q++) {
		void *p = mori_shmem_ptr_p2p(g, base, q);
		PCHECK(pe, s->peer_base[q] == (uint64_t)(uintptr_t)p, "state peer_base[%d]", q);
	}
	for (int i = 0; i < tn; i++)
		PCHECK(pe, s->node_team[i] == team[i], "state node_team[%d]", i);
	PCHECK(pe, s->ctrl && s->ctrl->magic == MORI_SHMEM_MAGIC && s->ctrl->abort == 0 && s->ctrl->ring_entries == 1024 &&
		       (void *)s->ring == (char *)s->ctrl + MORI_SHMEM_CTRL_BYTES,
	       "control page");
	mori_status sst;
	PCHECK(pe, mori_shmem_status(g, &sst) == 0 && sst.pe == -1 && !strcmp(sst.message, ""), "status %d", sst.pe);
	POK(pe, mori_shmem_module_init(g, (void *)1) == MORI_ENOTSUP ? MORI_OK : MORI_EINVAL);
	POK(pe, mori_shmem_barrier_all(g));
	POK(pe, mori_shmem_free(g, w));
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(groups_of_sizes)
{
	static const int sizes[] = {1, 2, 3, 8};
	for (int i = 0; i < 4; i++) {
		char name[32];
		snprintf(name, sizeof(name), "basic-%d", sizes[i]);
		pe_run_all(sizes[i], pe_basic, name, 60, 0);
	}
	assert_all_released();
}
END_TEST

/* ---- 1 000 random symmetric calls ---- */

static int pe_random(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	if (join(pe, n, "random", &c, &g))
		return 1;
	uint64_t seed = *(uint64_t *)arg; /* the same sequence on every PE */
	void *live[64] = {0};
	uint64_t lsize[64] = {0};
	uint8_t *base = mori_shmem_heap_base(g);
	for (int i = 0; i < SH->nops; i++) {
		uint64_t r = test_rand(&seed);
		int slot = (int)(r % 64);
		if (live[slot]) {
			/* our tag is intact: no later allocation overlapped this block */
			uint8_t *p = live[slot];
			for (uint64_t k = 0; k < lsize[slot]; k += 1 + lsize[slot] / 7)
				PCHECK(pe, p[k] == (uint8_t)(slot * 7 + pe), "block of slot %d overwritten at %llu", slot,
				       (unsigned long long)k);
			POK(pe, mori_shmem_free(g, live[slot]));
			live[slot] = NULL;
			SH->offs[pe][i] = 0;
			continue;
		}
		uint64_t size = 1 + test_rand(&seed) % (32 << 10);
		size_t align = (size_t)1 << (test_rand(&seed) % 16); /* 1 .. 32 KiB */
		if (test_rand(&seed) % 5 == 0)
			align = 0;
		if (pe == 0) {
			SH->sizes[i] = size;
			SH->aligns[i] = (uint32_t)align;
		}
		void *p;
		POK(pe, mori_shmem_malloc(g, size, align, &p));
		live[slot] = p;
		lsize[slot] = size;
		SH->offs[pe][i] = (uint64_t)((uint8_t *)p - base);
		memset(p, slot * 7 + pe, size);
	}
	POK(pe, mori_shmem_barrier_all(g));
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(random_malloc_free)
{
	uint64_t seed = test_seed();
	int n = two_nodes ? 4 : 3;
	SH->nops = 1000;
	pe_run_all(n, pe_random, &seed, 120, 0);
	/* Every PE got the same offsets, and they are what an independent model accepts: inside
	 * the heap past the reserved bytes, aligned, never overlapping a block still live. */
	uint64_t s = seed, lo[64] = {0}, hi[64] = {0};
	int live = 0, allocs = 0;
	for (int i = 0; i < SH->nops; i++) {
		int slot = (int)(test_rand(&s) % 64);
		for (int pe = 1; pe < n; pe++)
			ck_assert_msg(SH->offs[pe][i] == SH->offs[0][i], "call %d: PE %d got %#llx, PE 0 %#llx", i, pe,
				      (unsigned long long)SH->offs[pe][i], (unsigned long long)SH->offs[0][i]);
		if (hi[slot]) {
			hi[slot] = lo[slot] = 0;
			live--;
			continue;
		}
		test_rand(&s), test_rand(&s), test_rand(&s); /* size, align, align-0 draws */
		uint64_t off = SH->offs[0][i], size = SH->sizes[i], al = SH->aligns[i] ? SH->aligns[i] : 256;
		ck_assert_msg(off >= MORI_SHMEM_RESERVED && off + size <= HEAP, "call %d: [%#llx, +%llu) outside", i,
			      (unsigned long long)off, (unsigned long long)size);
		ck_assert_msg(off % al == 0, "call %d: %#llx not aligned to %llu", i, (unsigned long long)off,
			      (unsigned long long)al);
		for (int k = 0; k < 64; k++)
			ck_assert_msg(!hi[k] || off + size <= lo[k] || hi[k] <= off, "call %d overlaps slot %d", i, k);
		lo[slot] = off;
		hi[slot] = off + size;
		live++;
		allocs++;
	}
	ck_assert_int_gt(allocs, SH->nops / 3);
	assert_all_released();
}
END_TEST

/* ---- divergent calls ---- */

static int pe_divergent(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	if (join(pe, n, "diverge", &c, &g))
		return 1;
	void *p;
	int rc = mori_shmem_malloc(g, pe == 2 ? 8192 : 4096, 0, &p);
	PCHECK(pe, rc == MORI_EINVAL && p == NULL, "rc %d", rc);
	const char *m = mori_client_last_error(c);
	/* call #1 is the barrier that ends the join: the first malloc is #2 */
	PCHECK(pe, strstr(m, "PE 2 calls malloc(8192") && strstr(m, "PE 0 calls malloc(4096") && strstr(m, "#2 "), "%s", m);
	/* the call counted everywhere: the next one lines up */
	void *first;
	POK(pe, mori_shmem_malloc(g, 4096, 0, &first));
	PCHECK(pe, mori_shmem_offset(g, first) == MORI_SHMEM_RESERVED, "nothing was allocated by the refused call");
	/* a PE that calls a barrier where the others allocate */
	rc = pe == 1 ? mori_shmem_barrier_all(g) : mori_shmem_malloc(g, 64, 0, &p);
	PCHECK(pe, rc == MORI_EINVAL, "rc %d", rc);
	m = mori_client_last_error(c);
	PCHECK(pe, strstr(m, "PE 1 calls barrier_all") && strstr(m, "#4 "), "%s", m);
	/* free of something malloc never returned: refused on every PE, the same way */
	rc = mori_shmem_free(g, (uint8_t *)mori_shmem_heap_base(g) + MORI_SHMEM_RESERVED + 64);
	PCHECK(pe, rc == MORI_EINVAL && strstr(mori_client_last_error(c), "not the start"), "rc %d %s", rc,
	       mori_client_last_error(c));
	rc = mori_shmem_free(g, (void *)&rc); /* not in the heap: refused here, before any call */
	PCHECK(pe, rc == MORI_EINVAL, "rc %d", rc);
	POK(pe, mori_shmem_free(g, first));
	POK(pe, mori_shmem_barrier_all(g));
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(divergent_calls)
{
	pe_run_all(3, pe_divergent, NULL, 60, 0);
	assert_all_released();
}
END_TEST

/* ---- host puts and gets ---- */

#define SLOT_BYTES (256u << 10)

static int pe_putget(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	if (join(pe, n, "putget", &c, &g))
		return 1;
	uint64_t salt = *(uint64_t *)arg;
	uint8_t *buf, *stage;
	POK(pe, mori_shmem_calloc(g, (size_t)n * SLOT_BYTES, 4096, (void **)&buf));
	POK(pe, mori_shmem_malloc(g, SLOT_BYTES, 0, (void **)&stage));
	uint64_t boff = (uint64_t)mori_shmem_offset(g, buf);
	uint8_t *priv = malloc(SLOT_BYTES); /* memory outside the heap */
	/* to every PE (this one included): slot [pe] of its buffer, in pieces of random sizes and
	 * offsets, from private memory and from our own heap */
	uint64_t r = salt ^ (uint64_t)pe;
	for (int to = 0; to < n; to++) {
		uint64_t base = boff + (uint64_t)pe * SLOT_BYTES;
		for (uint64_t o = 0; o < SLOT_BYTES;) {
			uint64_t len = 1 + test_rand(&r) % 40000;
			if (len > SLOT_BYTES - o)
				len = SLOT_BYTES - o;
			uint8_t *src = (test_rand(&r) & 1) ? priv : stage;
			for (uint64_t k = 0; k < len; k++)
				src[k] = pe_pattern(pe, to, base + o + k, salt);
			POK(pe, mori_shmem_putmem(g, buf + (uint64_t)pe * SLOT_BYTES + o, src, len, to));
			o += len;
		}
	}
	POK(pe, mori_shmem_barrier_all(g));
	/* what landed here, byte for byte */
	for (int from = 0; from < n; from++)
		for (uint64_t k = 0; k < SLOT_BYTES; k++) {
			uint64_t off = boff + (uint64_t)from * SLOT_BYTES + k;
			PCHECK(pe, buf[off - boff] == pe_pattern(from, pe, off, salt), "slot of PE %d, byte %llu", from,
			       (unsigned long long)k);
		}
	/* and what every PE holds, read back with gets (into private memory and into our heap) */
	for (int q = 0; q < n; q++) {
		int from = (q + pe) % n;
		uint8_t *dst = (q & 1) ? priv : stage;
		memset(dst, 0, SLOT_BYTES);
		POK(pe, mori_shmem_getmem(g, dst, buf + (uint64_t)from * SLOT_BYTES, SLOT_BYTES, q));
		for (uint64_t k = 0; k < SLOT_BYTES; k++) {
			uint64_t off = boff + (uint64_t)from * SLOT_BYTES + k;
			PCHECK(pe, dst[k] == pe_pattern(from, q, off, salt), "get from PE %d, slot %d, byte %llu", q, from,
			       (unsigned long long)k);
		}
	}
	/* faults: outside the heap, PE out of range; nothing stray is written */
	uint8_t *base = mori_shmem_heap_base(g);
	uint8_t before = base[HEAP - 1];
	int rc = mori_shmem_putmem(g, base + HEAP - 8, priv, 16, (pe + 1) % n);
	PCHECK(pe, rc == MORI_ERANGE, "put past the end: %d", rc);
	rc = mori_shmem_putmem(g, priv, priv, 16, pe);
	PCHECK(pe, rc == MORI_ERANGE && strstr(mori_client_last_error(c), "not inside"), "put outside: %d", rc);
	rc = mori_shmem_getmem(g, priv, base - 1, 1, pe);
	PCHECK(pe, rc == MORI_ERANGE, "get before the start: %d", rc);
	rc = mori_shmem_putmem(g, buf, priv, 16, n);
	PCHECK(pe, rc == MORI_EINVAL && strstr(mori_client_last_error(c), "out of range"), "PE n: %d", rc);
	rc = mori_shmem_getmem(g, priv, buf, 16, -1);
	PCHECK(pe, rc == MORI_EINVAL, "PE -1: %d", rc);
	PCHECK(pe, mori_shmem_ptr_p2p(g, priv, pe) == NULL, "ptr_p2p outside the heap");
	PCHECK(pe, mori_shmem_ptr_p2p(g, base + HEAP, pe) == NULL, "ptr_p2p one past the heap");
	PCHECK(pe, mori_shmem_ptr_p2p(g, buf, n) == NULL && mori_shmem_ptr_p2p(g, buf, -1) == NULL, "ptr_p2p PE out of range");
	PCHECK(pe, mori_shmem_offset(g, priv) == -1, "offset outside");
	POK(pe, mori_shmem_barrier_all(g));
	PCHECK(pe, base[HEAP - 1] == before, "a refused put wrote");
	free(priv);
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(put_get)
{
	uint64_t salt = test_seed();
	pe_run_all(3, pe_putget, &salt, 120, 0);
	assert_all_released();
}
END_TEST

/* ---- barriers ---- */

struct bar_arg { int iters; };

static int pe_barrier(int pe, int n, void *arg)
{
	struct bar_arg *a = arg;
	mori_client *c;
	mori_group *g;
	if (join(pe, n, "barrier", &c, &g))
		return 1;
	volatile uint64_t *cnt;
	POK(pe, mori_shmem_calloc(g, sizeof(uint64_t), 0, (void **)&cnt));
	volatile uint64_t *peer[MAXPE];
	for (int q = 0; q < n; q++)
		peer[q] = mori_shmem_ptr_p2p(g, (void *)cnt, q);
	uint64_t t0 = mori_now_us();
	for (int i = 0; i < a->iters; i++) {
		*cnt = (uint64_t)i + 1; /* arrived at barrier i */
		POK(pe, mori_shmem_barrier_all(g));
		/* nobody passed early: every PE has arrived at barrier i, none is past i + 1 */
		for (int q = 0; q < n; q++) {
			uint64_t v;
			if (peer[q])
				v = *peer[q];
			else if (i % 97 == 0)
				POK(pe, mori_shmem_getmem(g, &v, (void *)cnt, sizeof(v), q));
			else
				continue;
			PCHECK(pe, v >= (uint64_t)i + 1 && v <= (uint64_t)i + 2, "barrier %d: PE %d's counter is %llu", i, q,
			       (unsigned long long)v);
		}
	}
	POK(pe, mori_shmem_barrier_all(g));
	if (pe == 0)
		fprintf(stderr, "# %d PEs: %d barriers in %.2f s\n", n, a->iters, (double)(mori_now_us() - t0) / 1e6);
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(barrier_many)
{
	struct bar_arg a = {10000};
	pe_run_all(3, pe_barrier, &a, 280, 0);
	a.iters = 1000;
	pe_run_all(8, pe_barrier, &a, 200, 0);
	assert_all_released();
}
END_TEST

/* A PE that never comes to the barrier: the others' barrier ends at the deadline, naming it; the
 * group is aborted (TIMEOUT) for everyone, the late PE included. */
static int pe_bar_timeout(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	POK(pe, mori_client_open(node_of(pe)->dir, "slow", &c));
	mori_shmem_opts o;
	opts_for(&o, HEAP);
	o.timeout_us = 500000;
	POK(pe, mori_shmem_init(c, "slowpoke", pe, n, &o, &g));
	if (pe == n - 1) /* comes only once the others' barrier timed out */
		PCHECK(pe, WAIT_UNTIL(mori_shmem_status(g, NULL) != MORI_OK, 30000), "the group never timed out");
	uint64_t t0 = mori_now_us();
	int rc = mori_shmem_barrier_all(g);
	const char *m = mori_client_last_error(c);
	PCHECK(pe, rc == MORI_ETIMEDOUT, "barrier: %d (%s)", rc, m);
	char want[32];
	snprintf(want, sizeof(want), "PE %d never made it", n - 1);
	PCHECK(pe, strstr(m, want), "%s", m);
	if (pe != n - 1) /* ended by its 0.5 s deadline (a loose bound: a loaded machine is slow) */
		PCHECK(pe, mori_now_us() - t0 < 4500000, "the barrier took %llu us",
		       (unsigned long long)(mori_now_us() - t0));
	mori_status sst;
	PCHECK(pe, mori_shmem_status(g, &sst) == MORI_ETIMEDOUT && sst.code == MORI_ETIMEDOUT && sst.pe == n - 1,
	       "status names PE %d", sst.pe);
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(barrier_timeout)
{
	pe_run_all(3, pe_bar_timeout, NULL, 60, 0);
	assert_all_released();
}
END_TEST

/* ---- calloc and no room ---- */

static int pe_calloc(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	if (join(pe, n, "calloc", &c, &g))
		return 1;
	uint8_t *p, *q;
	POK(pe, mori_shmem_malloc(g, 1 << 20, 0, (void **)&p));
	memset(p, 0xa5, 1 << 20);
	POK(pe, mori_shmem_free(g, p));
	POK(pe, mori_shmem_calloc(g, 1 << 20, 0, (void **)&q));
	PCHECK(pe, q == p, "the same call sequence gives the same offset");
	for (int k = 0; k < n; k++) { /* zero on every PE before anyone returns */
		uint8_t *z = mori_shmem_ptr_p2p(g, q, k), tmp[4096];
		for (uint64_t o = 0; o < (1 << 20); o += sizeof(tmp)) {
			if (z)
				memcpy(tmp, z + o, sizeof(tmp));
			else
				POK(pe, mori_shmem_getmem(g, tmp, q + o, sizeof(tmp), k));
			for (size_t b = 0; b < sizeof(tmp); b++)
				PCHECK(pe, tmp[b] == 0, "PE %d byte %llu is %u", k, (unsigned long long)(o + b), tmp[b]);
		}
	}
	/* no room: the message has the sizes */
	void *big;
	int rc = mori_shmem_malloc(g, HEAP, 0, &big);
	const char *m = mori_client_last_error(c);
	PCHECK(pe, rc == MORI_ENOMEM && big == NULL, "rc %d", rc);
	char want[64];
	snprintf(want, sizeof(want), "room for %u bytes", HEAP);
	PCHECK(pe, strstr(m, want) && strstr(m, "free") && strstr(m, "largest"), "%s", m);
	rc = mori_shmem_calloc(g, HEAP - MORI_SHMEM_RESERVED - (1 << 20) + 1, 0, &big);
	PCHECK(pe, rc == MORI_ENOMEM, "rc %d", rc);
	POK(pe, mori_shmem_malloc(g, 0, 0, &big));
	PCHECK(pe, big == NULL, "malloc(0) is NULL");
	POK(pe, mori_shmem_free(g, NULL));
	POK(pe, mori_shmem_free(g, q));
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(calloc_and_no_room)
{
	pe_run_all(3, pe_calloc, NULL, 60, 0);
	assert_all_released();
}
END_TEST

/* ---- joins refused ---- */

struct refuse_arg {
	const char *name;
	int world[MAXPE];
	uint64_t heap[MAXPE];
	int rank[MAXPE];
	int64_t timeout_us;
	int want;
	int late;                 /* this PE joins once the others' joins are at the root (the one that disagrees) */
	const char *words[3];
};

static int pe_refused(int pe, int n, void *arg)
{
	struct refuse_arg *a = arg;
	mori_client *c;
	mori_group *g = NULL;
	POK(pe, mori_client_open(node_of(pe)->dir, "refused", &c));
	if (a->late == pe)
		PCHECK(pe, ctl_wait_group_ranks(NA.dir, a->name, "joined", n - 1, 20000),
		       "the other PEs' joins of '%s' never reached the root", a->name);
	mori_shmem_opts o;
	opts_for(&o, a->heap[pe] ? a->heap[pe] : HEAP);
	if (a->timeout_us)
		o.timeout_us = a->timeout_us;
	int rc = mori_shmem_init(c, a->name, a->rank[pe] >= 0 ? a->rank[pe] : pe, a->world[pe] ? a->world[pe] : n, &o, &g);
	const char *m = mori_client_last_error(c);
	PCHECK(pe, rc == a->want && g == NULL, "join gave %d (%s)", rc, m);
	for (int i = 0; i < 3; i++)
		PCHECK(pe, !a->words[i] || strstr(m, a->words[i]), "'%s' not in: %s", a->words[i], m);
	mori_client_close(c);
	return 0;
}

START_TEST(joins_refused)
{
	/* the world size disagrees: every PE hears it */
	struct refuse_arg a = {.name = "w", .world = {3, 3, 4}, .rank = {-1, -1, -1}, .want = MORI_EINVAL, .late = 2,
			       .words = {"world size 4", "with 3"}};
	pe_run_all(3, pe_refused, &a, 60, 0);
	/* the heap size disagrees */
	struct refuse_arg b = {.name = "h", .heap = {HEAP, 2 * HEAP}, .rank = {-1, -1}, .want = MORI_EINVAL, .late = 1,
			       .words = {"heap of", "16777216"}};
	pe_run_all(2, pe_refused, &b, 60, 0);
	/* a rank twice */
	struct refuse_arg d = {.name = "dup", .rank = {0, 1, 1}, .want = MORI_EINVAL, .late = 2,
			       .words = {"rank 1 joins", "twice"}};
	pe_run_all(3, pe_refused, &d, 60, 0);
	/* PE out of range: refused before it reaches the daemon */
	struct refuse_arg r = {.name = "r", .rank = {5}, .world = {2}, .want = MORI_EINVAL, .late = -1,
			       .words = {"out of range"}};
	pe_run_all(1, pe_refused, &r, 30, 0);
	/* the deadline names the ranks that never came */
	struct refuse_arg t = {.name = "late", .rank = {0, 2}, .world = {5, 5}, .timeout_us = 600000, .want = MORI_ETIMEDOUT, .late = -1,
			       .words = {"timed out", "PEs 1, 3-4 never arrived", "2 of 5"}};
	pe_run_all(2, pe_refused, &t, 60, 0);
	assert_all_released();
}
END_TEST

/* ---- a PE killed ---- */

static int pe_killed(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	if (join(pe, n, "victim", &c, &g))
		return 1;
	POK(pe, mori_shmem_barrier_all(g));
	if (pe == n - 1) {
		PCHECK(pe, ctl_wait_group_ranks(NA.dir, "victim", "in call", n - 1, 20000),
		       "the other PEs never waited in the barrier");
		raise(SIGKILL);
	}
	int rc = mori_shmem_barrier_all(g);
	PCHECK(pe, rc == MORI_EPEERDEAD, "barrier after PE %d died: %d (%s)", n - 1, rc, mori_client_last_error(c));
	PCHECK(pe, strstr(mori_client_last_error(c), "died"), "%s", mori_client_last_error(c));
	mori_status sst;
	PCHECK(pe, mori_shmem_status(g, &sst) == MORI_EPEERDEAD && sst.pe == n - 1, "status names PE %d", sst.pe);
	const struct mori_shmem_state *s = mori_shmem_state(g);
	PCHECK(pe, s->ctrl->abort == MORI_SHMEM_ABORT_PEER_DEAD && s->ctrl->abort_pe == n - 1, "abort word %u pe %d",
	       s->ctrl->abort, s->ctrl->abort_pe);
	void *p;
	rc = mori_shmem_malloc(g, 64, 0, &p);
	PCHECK(pe, rc == MORI_EPEERDEAD, "the next call: %d", rc);
	uint64_t v = 1;
	rc = mori_shmem_putmem(g, mori_shmem_heap_base(g), &v, sizeof(v), 0);
	PCHECK(pe, rc == MORI_EPEERDEAD, "a put after the abort: %d", rc);
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(pe_killed_aborts)
{
	pe_run_all(3, pe_killed, NULL, 60, 1);
	assert_all_released();
}
END_TEST

/* ---- names, two groups, unique ids, listings ---- */

/* What morid and moractl list while both groups live (a PE runs it: a thread of the test process
 * would be mid-malloc when the PEs fork, and sanitizer allocators have no fork handler). */
static void list_groups(void)
{
	SH->rc[7] = (int)daemon_groups(&NA, NULL);
	char cmd[700];
	FILE *f;
	snprintf(cmd, sizeof(cmd), "%s/moractl --runtime-dir %s --json groups", build_dir(), NA.dir);
	if ((f = popen(cmd, "r"))) {
		size_t k = fread(SH->msg[7], 1, sizeof(SH->msg[7]) - 1, f);
		SH->msg[7][k] = 0;
		pclose(f);
	}
	snprintf(cmd, sizeof(cmd), "%s/moractl --runtime-dir %s groups", build_dir(), NA.dir);
	if ((f = popen(cmd, "r"))) {
		size_t k = fread(SH->msg[6], 1, sizeof(SH->msg[6]) - 1, f);
		SH->msg[6][k] = 0;
		pclose(f);
	}
}

static int pe_names(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g1, *g2, *x = NULL;
	if (join(pe, n, "first", &c, &g1))
		return 1;
	mori_shmem_opts o;
	opts_for(&o, HEAP / 2);
	POK(pe, mori_shmem_init(c, "second", pe, n, &o, &g2)); /* one client, two groups */
	int rc = mori_shmem_init(c, "first", pe, n, &o, &x);
	PCHECK(pe, rc == MORI_EBUSY && x == NULL && strstr(mori_client_last_error(c), "already"), "rejoin: %d", rc);
	/* a client of another process may not take a live group's name */
	if (pe == 0) {
		mori_client *c3;
		POK(pe, mori_client_open(node_of(0)->dir, "intruder", &c3));
		opts_for(&o, HEAP);
		rc = mori_shmem_init(c3, "first", 0, n, &o, &x);
		PCHECK(pe, rc == MORI_EEXIST && strstr(mori_client_last_error(c3), "still lives"), "name reuse: %d (%s)", rc,
		       mori_client_last_error(c3));
		mori_client_close(c3);
	}
	void *a, *b;
	POK(pe, mori_shmem_malloc(g1, 1000, 0, &a));
	POK(pe, mori_shmem_malloc(g2, 3000, 0, &b));
	POK(pe, mori_shmem_malloc(g2, 3000, 0, &b));
	POK(pe, mori_shmem_malloc(g1, 1000, 0, &a)); /* each group's sequence is its own */
	PCHECK(pe, mori_shmem_offset(g1, a) == MORI_SHMEM_RESERVED + 1024, "g1 offset %lld", (long long)mori_shmem_offset(g1, a));
	PCHECK(pe, mori_shmem_offset(g2, b) == MORI_SHMEM_RESERVED + 3072, "g2 offset %lld", (long long)mori_shmem_offset(g2, b));
	PCHECK(pe, mori_shmem_heap_size(g2) == HEAP / 2, "g2 heap");
	PCHECK(pe, mori_shmem_ptr_p2p(g1, b, pe) == NULL, "g2's address is not in g1's heap");
	POK(pe, mori_shmem_barrier_all(g1));
	SH->rc[pe] = 1;
	POK(pe, mori_shmem_barrier_all(g2));
	if (pe == 0)
		list_groups(); /* the other PE waits in the barrier */
	POK(pe, mori_shmem_barrier_all(g1));
	mori_shmem_finalize(g1);
	mori_shmem_finalize(g2);
	/* once every PE has left, the name is free again: the same PEs form it anew */
	__atomic_add_fetch(&SH->rc[5], 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&SH->rc[5], __ATOMIC_ACQUIRE) < n)
		usleep(1000);
	for (int i = 0; i < 500 && daemon_groups(&NA, NULL); i++)
		usleep(2000);
	opts_for(&o, HEAP);
	POK(pe, mori_shmem_init(c, "first", pe, n, &o, &g1));
	POK(pe, mori_shmem_malloc(g1, 64, 0, &a));
	PCHECK(pe, mori_shmem_offset(g1, a) == MORI_SHMEM_RESERVED, "a fresh allocator");
	mori_client_close(c); /* leaves g1 too */
	return 0;
}

START_TEST(names_and_two_groups)
{
	pe_run_all(2, pe_names, NULL, 60, 0);
	ck_assert_int_eq(SH->rc[7], 2);
	const char *j = SH->msg[7], *h = SH->msg[6];
	ck_assert_msg(strstr(j, "\"name\":\t\"first\"") && strstr(j, "\"name\":\t\"second\"") && strstr(j, "\"world_size\":\t2") &&
			      strstr(j, "\"heap_size\":\t8388608") && strstr(j, "\"state\":\t\"formed\"") && strstr(j, "\"ranks\""),
		      "moractl --json groups: %s", j);
	ck_assert_msg(strstr(h, "NAME") && strstr(h, "first") && strstr(h, "8.0 MiB") && strstr(h, "PE 1"), "moractl groups: %s", h);
	assert_all_released();
}
END_TEST

static int pe_uid(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	POK(pe, mori_client_open(node_of(pe)->dir, "uid", &c));
	if (pe == 0) {
		POK(pe, mori_shmem_get_unique_id(c, SH->uid, sizeof(SH->uid), &SH->uid_len));
		PCHECK(pe, SH->uid_len <= MORI_SHMEM_UID_BYTES, "uid of %zu bytes", SH->uid_len);
		__atomic_store_n(&SH->uid_ready, 1, __ATOMIC_RELEASE);
	}
	while (!__atomic_load_n(&SH->uid_ready, __ATOMIC_ACQUIRE))
		usleep(1000);
	mori_shmem_opts o;
	opts_for(&o, HEAP);
	o.root = NULL; /* the id names the root */
	POK(pe, mori_shmem_init_uid(c, SH->uid, SH->uid_len, pe, n, &o, &g));
	uint64_t *w;
	POK(pe, mori_shmem_malloc(g, 8, 0, (void **)&w));
	uint64_t v = 1000 + (uint64_t)pe;
	POK(pe, mori_shmem_putmem(g, w, &v, sizeof(v), (pe + 1) % n));
	POK(pe, mori_shmem_barrier_all(g));
	PCHECK(pe, *w == 1000 + (uint64_t)((pe + n - 1) % n), "got %llu", (unsigned long long)*w);
	int rc = mori_shmem_init_uid(c, "garbage!", 8, 0, 1, NULL, &g);
	PCHECK(pe, rc == MORI_EINVAL, "garbage uid: %d", rc);
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(unique_id)
{
	pe_run_all(two_nodes ? 4 : 3, pe_uid, NULL, 60, 0);
	assert_all_released();
}
END_TEST

/* ---- across two daemons only ---- */

START_TEST(xnode_basic)
{
	pe_run_all(2, pe_basic, "x2", 60, 0);
	pe_run_all(3, pe_basic, "x3", 60, 0);
	pe_run_all(8, pe_basic, "x8", 90, 0);
	assert_all_released();
}
END_TEST

START_TEST(xnode_killed_remote)
{
	/* PE 3 runs on node B (the root is A): its death reaches node A through the daemons */
	pe_run_all(4, pe_killed, NULL, 60, 1);
	assert_all_released();
}
END_TEST

/* This process itself is PE 0 (a forked child PE 1): under the sanitizers whatever libmori
 * leaks here fails the test when it exits. */
static int pe_inproc_peer(int pe, int n, void *arg)
{
	mori_client *c;
	mori_group *g;
	if (join(pe, n, "inproc", &c, &g))
		return 1;
	uint64_t *w;
	POK(pe, mori_shmem_calloc(g, 4096, 0, (void **)&w));
	POK(pe, mori_shmem_barrier_all(g));
	uint64_t v = 0;
	POK(pe, mori_shmem_getmem(g, &v, w, sizeof(v), 0));
	PCHECK(pe, v == 42, "PE 0 put %llu", (unsigned long long)v);
	POK(pe, mori_shmem_barrier_all(g));
	POK(pe, mori_shmem_free(g, w));
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(in_process_pe)
{
	pid_t kid = fork();
	if (kid == 0) {
		child_deadline(60);
		_exit(pe_inproc_peer(1, 2, NULL) ? 1 : 0);
	}
	mori_client *c;
	mori_group *g;
	mori_shmem_opts o;
	OK(mori_client_open(node_of(0)->dir, "pe0", &c));
	opts_for(&o, HEAP);
	OK(mori_shmem_init(c, "inproc", 0, 2, &o, &g));
	uint64_t *w, v = 42;
	OK(mori_shmem_calloc(g, 4096, 0, (void **)&w));
	OK(mori_shmem_putmem(g, w, &v, sizeof(v), 0));
	uint8_t big[9000];
	memset(big, 7, sizeof(big));
	OK(mori_shmem_putmem(g, w + 8, big, 3000, 1)); /* the other PE: mapped, or through morid */
	OK(mori_shmem_barrier_all(g));
	OK(mori_shmem_barrier_all(g));
	OK(mori_shmem_free(g, w));
	int st;
	ck_assert_int_eq(waitpid(kid, &st, 0), kid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "PE 1: %s", SH->msg[1]);
	mori_client_close(c); /* leaves g */
	assert_all_released();
}
END_TEST

static Suite *suite(int xnode)
{
	Suite *s = suite_create(xnode ? "shmem-xnode" : "shmem");
	TCase *t = tcase_create(xnode ? "two morids" : "one morid");
	tcase_add_checked_fixture(t, xnode ? setup2 : setup1, teardown);
	tcase_add_checked_fixture(t, shared_setup, NULL);
	tcase_set_timeout(t, 600);
	if (!xnode) {
		tcase_add_test(t, symalloc_unit);
		tcase_add_test(t, groups_of_sizes);
		tcase_add_test(t, calloc_and_no_room);
		tcase_add_test(t, names_and_two_groups);
	} else {
		tcase_add_test(t, xnode_basic);
		tcase_add_test(t, xnode_killed_remote);
	}
	tcase_add_test(t, joins_refused);
	tcase_add_test(t, barrier_timeout);
	tcase_add_test(t, random_malloc_free);
	tcase_add_test(t, divergent_calls);
	tcase_add_test(t, put_get);
	tcase_add_test(t, barrier_many);
	tcase_add_test(t, pe_killed_aborts);
	tcase_add_test(t, unique_id);
	tcase_add_test(t, in_process_pe);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	/* MORI_SHMEM_ONLY=one|two runs one of the two suites (the netns script runs "two") */
	const char *only = getenv("MORI_SHMEM_ONLY");
	SRunner *r = srunner_create(NULL);
	if (!only || strcmp(only, "two"))
		srunner_add_suite(r, suite(0));
	if (!only || strcmp(only, "one"))
		srunner_add_suite(r, suite(1));
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
