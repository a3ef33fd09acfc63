/* The host-memory target process shared by tests/test_io.c (same node) and tests/test_xnode.c
 * (across nodes): a client that owns region A (memfd: peers map it) and region B (malloc'd:
 * reached by cross-memory attach), filled with known random bytes and published as "target/a"
 * and "target/b". Over a pipe it hashes ranges of them on request (an independent check of
 * what landed), counts the notifications it received, and deregisters on request. Plus the
 * random batches both tests draw. Include after harness.h and check.h. */
#ifndef MORI_TEST_IO_TARGET_H
#define MORI_TEST_IO_TARGET_H
#include <sys/wait.h>

#define REGION_A (64u << 20)
#define REGION_B (32u << 20)

static inline void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed | 1;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = test_rand(&s);
		memcpy(p + i, &v, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)test_rand(&s);
}

/* A request to the target: n ranges to hash follow as (offset, length) pairs, or a command. */
enum { HREQ_END = 0, HREQ_BLOB = UINT32_MAX - 2, HREQ_DEREG_B_UNDER_TRAFFIC = UINT32_MAX - 1, HREQ_DEREG = UINT32_MAX };
struct hreq {
	uint32_t n;     /* ranges, or HREQ_*; HREQ_END: report notifications and exit */
	uint32_t which; /* 0 = A, 1 = B */
};

/* The target's life; `cross`: its notifications must come from another node (from_pid 0). */
static void target_main(const char *dir, int cross, int rfd, int wfd, uint64_t seed)
{
	mori_client *c;
	mori_mem *a, *b;
	if (mori_client_open(dir, "target", &c) != MORI_OK)
		_exit(10);
	if (mori_mem_alloc(c, REGION_A, MORI_MEM_HOST, &a) != MORI_OK)
		_exit(11);
	uint8_t *bp = aligned_alloc(4096, REGION_B);
	if (!bp || mori_mem_register(c, bp, REGION_B, MORI_MEM_HOST, &b) != MORI_OK)
		_exit(12);
	fill_random(mori_mem_ptr(a), REGION_A, seed);
	fill_random(bp, REGION_B, seed + 1);
	if (mori_mem_publish(a, "target/a") || mori_mem_publish(b, "target/b"))
		_exit(13);
	uint64_t notifs = 0, tagsum = 0;
	char ready = 'r';
	if (write(wfd, &ready, 1) != 1)
		_exit(14);
	for (;;) {
		struct hreq h;
		if (read(rfd, &h, sizeof(h)) != sizeof(h))
			_exit(15);
		mori_notif nb[64];
		int k;
		while ((k = mori_notif_poll(c, nb, 64, 0)) > 0)
			for (int i = 0; i < k; i++) {
				notifs++;
				tagsum += nb[i].tag;
				if ((cross ? nb[i].from_pid != 0 : nb[i].from_pid == 0) || nb[i].region_id == 0)
					_exit(19);
			}
		if (h.n == HREQ_END) {
			uint64_t out[2] = {notifs, tagsum};
			if (write(wfd, out, sizeof(out)) != sizeof(out))
				_exit(16);
			break;
		}
		if (h.n == HREQ_DEREG_B_UNDER_TRAFFIC) {
			/* Deregister B (caller memory) under traffic, then check that nothing lands in it
			 * afterwards: the daemon must not touch addresses it gave up. */
			int64_t out[2] = {mori_mem_deregister(b), 0};
			memset(bp, 0xEE, REGION_B);
			usleep(300000);
			for (size_t i = 0; i < REGION_B; i++)
				out[1] += bp[i] != 0xEE;
			if (write(wfd, out, sizeof(out)) != sizeof(out))
				_exit(21);
			continue;
		}
		if (h.n == HREQ_BLOB) { /* the owner's blob of A or B: length (8 bytes), then the blob */
			uint8_t blob[8 + MORI_MEM_BLOB_MAX];
			size_t bl = 0;
			if (mori_mem_pack(h.which ? b : a, blob + 8, MORI_MEM_BLOB_MAX, &bl) != MORI_OK)
				bl = 0;
			memcpy(blob, &(uint64_t){bl}, 8);
			if (write(wfd, blob, 8 + bl) != (ssize_t)(8 + bl))
				_exit(22);
			continue;
		}
		if (h.n == HREQ_DEREG) {
			int rc = mori_mem_deregister(h.which ? b : a);
			if (write(wfd, &rc, sizeof(rc)) != sizeof(rc))
				_exit(20);
			continue;
		}
		uint64_t *r = malloc(h.n * 16);
		if (!r || read(rfd, r, h.n * 16) != (ssize_t)(h.n * 16))
			_exit(17);
		uint8_t *base = h.which ? bp : mori_mem_ptr(a);
		uint64_t hv = 0;
		for (uint32_t i = 0; i < h.n; i++)
			hv = test_hash(hv, base + r[2 * i], r[2 * i + 1]);
		free(r);
		if (write(wfd, &hv, 8) != 8)
			_exit(18);
	}
	mori_client_close(c);
	_exit(0);
}

struct target {
	pid_t pid;
	int to, from;
};

/* Fork the target as a client of the morid at dir; returns once its regions are published. */
static void target_start(struct target *t, const char *dir, int cross, uint64_t seed)
{
	int to_t[2], from_t[2];
	ck_assert(pipe(to_t) == 0 && pipe(from_t) == 0);
	t->pid = fork();
	if (t->pid == 0) {
		close(to_t[1]);
		close(from_t[0]);
		target_main(dir, cross, to_t[0], from_t[1], seed);
	}
	close(to_t[0]);
	close(from_t[1]);
	t->to = to_t[1];
	t->from = from_t[0];
	char ready;
	if (read(t->from, &ready, 1) != 1) {
		int st = 0;
		waitpid(t->pid, &st, 0);
		ck_abort_msg("target process failed to start: exit %d (see target_main)", WEXITSTATUS(st));
	}
}

/* Stop the target; it reports the notifications it received (count and sum of tags). */
static void target_end(struct target *t, uint64_t *notifs, uint64_t *tagsum)
{
	struct hreq h = {HREQ_END, 0};
	uint64_t got[2] = {0, 0};
	ck_assert(write(t->to, &h, sizeof(h)) == sizeof(h));
	ck_assert(read(t->from, got, sizeof(got)) == sizeof(got));
	if (notifs)
		*notifs = got[0];
	if (tagsum)
		*tagsum = got[1];
	int st;
	waitpid(t->pid, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "target %s %d", WIFEXITED(st) ? "exited with" : "killed by signal",
		      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	close(t->to);
	close(t->from);
}

/* The target process killed (its daemon died under it, or a test ends it rudely). */
static inline void target_kill(struct target *t)
{
	kill(t->pid, SIGKILL);
	waitpid(t->pid, NULL, 0);
	close(t->to);
	close(t->from);
}

/* The owner's packed blob of region `which` (0 A, 1 B); its length. */
static inline size_t ask_blob(struct target *t, uint32_t which, uint8_t blob[MORI_MEM_BLOB_MAX])
{
	struct hreq h = {HREQ_BLOB, which};
	uint64_t bl;
	ck_assert(write(t->to, &h, sizeof(h)) == sizeof(h));
	ck_assert(read(t->from, &bl, 8) == 8 && bl > 0 && bl <= MORI_MEM_BLOB_MAX);
	ck_assert(read(t->from, blob, bl) == (ssize_t)bl);
	return (size_t)bl;
}

/* The target's hash of the remote ranges of d (in idx order, or all when idx is NULL). */
static uint64_t ask_hash(struct target *t, uint32_t which, const mori_desc *d, const uint32_t *idx, size_t n)
{
	struct hreq h = {(uint32_t)n, which};
	uint64_t *r = malloc(n * 16), hv;
	for (size_t i = 0; i < n; i++) {
		const mori_desc *e = &d[idx ? idx[i] : i];
		r[2 * i] = e->remote_offset;
		r[2 * i + 1] = e->length;
	}
	ck_assert(write(t->to, &h, sizeof(h)) == sizeof(h));
	ck_assert(write(t->to, r, n * 16) == (ssize_t)(n * 16));
	ck_assert(read(t->from, &hv, 8) == 8);
	free(r);
	return hv;
}

/* Log-uniform block size in [1, 4 MiB]. */
static uint64_t rand_len(uint64_t *s)
{
	int bits = (int)(test_rand(s) % 23);
	uint64_t lo = 1ull << bits;
	uint64_t v = lo + test_rand(s) % lo;
	return v > (4u << 20) ? (4u << 20) : v;
}

/* k descriptors, disjoint on both sides, random offsets and gaps (a quarter of them adjacent on
 * both sides: runs the transports may merge). */
static size_t rand_batch(uint64_t *s, mori_desc *d, size_t k, uint64_t lsz, uint64_t rsz)
{
	uint64_t lc = test_rand(s) % 4096, rc = test_rand(s) % 4096;
	size_t n = 0;
	for (size_t i = 0; i < k; i++) {
		uint64_t len = rand_len(s);
		uint64_t lg = test_rand(s) % 65536, rg = test_rand(s) % 65536;
		if ((test_rand(s) & 3) == 0)
			lg = rg = 0;
		if (lc + lg + len > lsz || rc + rg + len > rsz)
			break;
		d[n++] = (mori_desc){lc + lg, rc + rg, len};
		lc += lg + len;
		rc += rg + len;
	}
	if (n == 0)
		d[n++] = (mori_desc){0, 0, 1};
	return n;
}

/* n distinct slot numbers below slots (n <= slots), by rejection. */
static void rand_distinct(uint64_t *s, uint32_t *idx, size_t n, uint32_t slots)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t v;
		int dup;
		do {
			v = (uint32_t)(test_rand(s) % slots);
			dup = 0;
			for (size_t j = 0; j < i; j++)
				dup |= idx[j] == v;
		} while (dup);
		idx[i] = v;
	}
}

/* The random_batches tests (test_io same node, test_xnode across nodes): BATCH_SLOTS slots of
 * up to 64 KiB, at the same offsets on both sides, for prepared lists. */
enum { BATCH_SLOTS = 512, BATCH_SLOT = 64 << 10 };
static void rand_slots(uint64_t *s, mori_desc slots[BATCH_SLOTS])
{
	for (int i = 0; i < BATCH_SLOTS; i++)
		slots[i] = (mori_desc){(uint64_t)i * BATCH_SLOT, (uint64_t)i * BATCH_SLOT, 1 + test_rand(s) % BATCH_SLOT};
}

/* One random transfer of theirs: form 0 a single read or write, 1 a batch of up to 8
 * descriptors, 2 up to 64 of the slots through a prepared list. */
struct rand_xfer {
	int op, form;
	size_t n;
	mori_desc d[8];
	uint32_t idx[64];
	const mori_desc *dd; /* what it moves: d, or the slots idx names */
	const uint32_t *ii;
	mori_xfer_opts o;
};

/* Draw x, to the target's region `which` from a local region of lsz bytes; a notification on
 * a quarter of them (of the writes alone unless notify_reads). */
static void rand_xfer_draw(uint64_t *s, struct rand_xfer *x, int which, int notify_reads, const mori_desc *slots,
			   uint64_t lsz)
{
	x->op = (test_rand(s) & 1) ? MORI_XFER_WRITE : MORI_XFER_READ;
	x->form = (int)(test_rand(s) % 3);
	x->o = (mori_xfer_opts){.size = sizeof(mori_xfer_opts)};
	if ((notify_reads || x->op == MORI_XFER_WRITE) && (test_rand(s) & 3) == 0) {
		x->o.has_notif = 1;
		x->o.notif_tag = test_rand(s);
	}
	x->dd = x->d;
	x->ii = NULL;
	if (x->form == 2) {
		x->n = 1 + test_rand(s) % 64;
		rand_distinct(s, x->idx, x->n, BATCH_SLOTS);
		x->dd = slots;
		x->ii = x->idx;
	} else {
		x->n = rand_batch(s, x->d, x->form == 0 ? 1 : 1 + test_rand(s) % 8, lsz, which ? REGION_B : REGION_A);
	}
}

/* Submit x from l to r (list: l's prepared list of the slots to r, for form 2). */
static void rand_xfer_submit(struct rand_xfer *x, mori_mem *l, mori_mem *r, mori_xfer_list *list, mori_xfer **out)
{
	const mori_desc *d = &x->d[0];
	if (x->form == 2)
		OK(mori_xfer_submit(list, x->op, x->idx, x->n, &x->o, out));
	else if (x->form == 0 && x->op == MORI_XFER_WRITE)
		OK(mori_xfer_write(l, d->local_offset, r, d->remote_offset, d->length, &x->o, out));
	else if (x->form == 0)
		OK(mori_xfer_read(l, d->local_offset, r, d->remote_offset, d->length, &x->o, out));
	else
		OK(mori_xfer_batch(x->op, l, r, x->d, x->n, &x->o, out));
}

/* The hash of x's ranges on the side it reads from (dst 0) or writes to (dst 1): the target's
 * region `which`, or local memory at lp. Equal before and after: the bytes arrived. */
static uint64_t rand_xfer_hash(struct target *t, int which, const uint8_t *lp, const struct rand_xfer *x, int dst)
{
	if ((x->op == MORI_XFER_WRITE) == dst)
		return ask_hash(t, (uint32_t)which, x->dd, x->ii, x->n);
	return local_hash(lp, x->dd, x->ii, x->n);
}

/* Stop the target once the notifications (they arrive after their data) had settle_us more:
 * it must have received notifs of them, with tags summing to tagsum. */
static void target_end_expect(struct target *t, useconds_t settle_us, uint64_t notifs, uint64_t tagsum)
{
	uint64_t got_n, got_sum;
	usleep(settle_us);
	target_end(t, &got_n, &got_sum);
	ck_assert_uint_eq(got_n, notifs);
	ck_assert_uint_eq(got_sum, tagsum);
}
#endif
