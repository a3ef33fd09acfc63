/* The KV store's SSD tier (daemon/kv/kv_ssd.c) on a real libuv loop, in a temporary directory on
 * a real filesystem ($TMPDIR, else $B, else /tmp): values of 1 B .. 64 MiB checked byte for byte
 * against a pattern computed from (key, seed); flush; the live set rebuilt at reopen; tombstones;
 * a torn tail; a flipped bit; a full tier and a full filesystem; a read-only and a missing
 * directory; compaction; the buffered fallback where O_DIRECT is refused. Where a private mount
 * (a tiny tmpfs, a ramfs) cannot be made the case says so and checks what it can. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "mori_types.h"
#include "kv/kv_ssd.h"
#include "observe/diagnose.h"

#define MIB (1ull << 20)
#define MAXREC 512

static uv_loop_t loop;
static uv_timer_t tick;
static char base[1024]; /* this case's temporary directory */

/* ---- the reference ---- */

static uint64_t key_seed(const char *key, uint64_t seed)
{
	uint64_t h = 0xcbf29ce484222325ull ^ seed;
	for (const char *c = key; *c; c++)
		h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
	return h;
}

static void pattern(uint8_t *p, uint64_t n, const char *key, uint64_t seed)
{
	uint64_t x = key_seed(key, seed);
	for (uint64_t i = 0; i < n; i += 8) {
		x += 0x9e3779b97f4a7c15ull; /* splitmix64 */
		uint64_t z = x;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(p + i, &z, n - i < 8 ? n - i : 8);
	}
}

/* What the test believes the tier holds. */
struct rec {
	char key[48];
	uint64_t gen, len, seed;
	struct kv_ssd_loc loc;
	int live, found, moved;
	int revivable; /* removed without a tombstone: a reopen may bring it back where it was */
	uint8_t *val; /* the written bytes, kept until the write answers */
};
static struct rec recs[MAXREC];
static int aligned_src; /* put's values page-aligned: the tier writes them straight (version 2) */
static int nrec;

static struct rec *rec_by_key(const void *key, size_t len)
{
	for (int i = 0; i < nrec; i++)
		if (strlen(recs[i].key) == len && !memcmp(recs[i].key, key, len))
			return &recs[i];
	return NULL;
}

/* ---- the loop ---- */

static void on_tick(uv_timer_t *t)
{
}

static void loop_setup(void)
{
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	uv_timer_init(&loop, &tick);
	uv_timer_start(&tick, on_tick, 20, 20); /* wakes the loop while a wait polls its condition */
	const char *t = getenv("TMPDIR");
	const char *b = getenv("B");
	char parent[900];
	if (t && t[0])
		snprintf(parent, sizeof(parent), "%s", t);
	else if (b && b[0] && access(b, W_OK) == 0)
		snprintf(parent, sizeof(parent), "%s", b);
	else
		snprintf(parent, sizeof(parent), "/tmp");
	snprintf(base, sizeof(base), "%s/kvssd-XXXXXX", parent);
	ck_assert_ptr_nonnull(mkdtemp(base));
	chmod(base, 0755);
	nrec = 0;
	aligned_src = 0;
	memset(recs, 0, sizeof(recs));
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
	chmod(p, 0700);
	return remove(p);
}

static void loop_teardown(void)
{
	for (int i = 0; i < nrec; i++)
		free(recs[i].val);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	chmod(base, 0755);
	nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Run the loop until *count reaches want, or fail after 120 s. */
static void wait_for(const int *count, int want, const char *what)
{
	uint64_t end = uv_now(&loop) + 120000;
	while (*count < want) {
		ck_assert_msg(uv_now(&loop) < end, "timed out waiting for %s (%d of %d)", what, *count, want);
		uv_run(&loop, UV_RUN_ONCE);
	}
}

/* ---- the tier ---- */

static int n_found, n_moved;

static void on_found(void *arg, const void *key, size_t key_len, uint32_t uid, uint64_t gen,
		     const struct kv_ssd_loc *loc)
{
	struct rec *r = rec_by_key(key, key_len);
	ck_assert_msg(r != NULL, "found an unknown key %.*s", (int)key_len, (const char *)key);
	ck_assert_msg(!r->found, "found %s twice", r->key);
	ck_assert_uint_eq(uid, 1000);
	ck_assert_uint_eq(gen, r->gen);
	ck_assert_uint_eq(loc->len, r->len);
	r->found = 1;
	r->loc = *loc;
	n_found++;
}

static void on_moved(void *arg, const void *key, size_t key_len, uint32_t uid, uint64_t gen,
		     const struct kv_ssd_loc *old, const struct kv_ssd_loc *now)
{
	struct rec *r = rec_by_key(key, key_len);
	ck_assert_ptr_nonnull(r);
	ck_assert_msg(r->live && r->loc.seg == old->seg && r->loc.off == old->off, "moved %s from where it was not",
		      r->key);
	ck_assert_ptr_nonnull(now);
	ck_assert_uint_eq(now->len, r->len);
	r->loc = *now;
	r->moved++;
	n_moved++;
}

static struct kv_ssd *tier_open(const char *dir, uint64_t bytes)
{
	char err[300];
	struct kv_ssd *s = NULL;
	n_found = 0;
	for (int i = 0; i < nrec; i++)
		recs[i].found = 0;
	int rc = kv_ssd_open(&loop, dir, bytes, on_found, on_moved, NULL, &s, err, sizeof(err));
	ck_assert_msg(rc == MORI_OK, "kv_ssd_open %s: %d %s", dir, rc, err);
	return s;
}

static void tier_close(struct kv_ssd *s)
{
	kv_ssd_close(s);
	uv_timer_stop(&tick);
	uv_run(&loop, UV_RUN_DEFAULT); /* until the tier's handle is closed */
	uv_timer_start(&tick, on_tick, 20, 20);
}

struct wait {
	int n, rc_bad, last_rc;
	char msg[400];
};

static void on_write(void *arg, int rc, const struct kv_ssd_loc *loc, const char *msg)
{
	struct rec *r = arg;
	extern struct wait W;
	if (rc == MORI_OK) {
		r->loc = *loc;
		r->live = 1;
	} else {
		W.rc_bad++;
		W.last_rc = rc;
		snprintf(W.msg, sizeof(W.msg), "%s", msg);
	}
	free(r->val);
	r->val = NULL;
	W.n++;
}
struct wait W;

static void on_read(void *arg, int rc, const struct kv_ssd_loc *loc, const char *msg)
{
	if (rc != MORI_OK) {
		W.rc_bad++;
		W.last_rc = rc;
		snprintf(W.msg, sizeof(W.msg), "%s", msg);
	}
	W.n++;
}

/* Start writing a value of len bytes under key (a new record of the table). */
static struct rec *put(struct kv_ssd *s, const char *key, uint64_t len, uint64_t gen, int *rc)
{
	ck_assert_int_lt(nrec, MAXREC);
	struct rec *r = &recs[nrec];
	snprintf(r->key, sizeof(r->key), "%s", key);
	r->gen = gen;
	r->len = len;
	r->seed = gen * 7919;
	r->val = aligned_src ? aligned_alloc(4096, (len + 4095) & ~4095ull) : malloc(len);
	ck_assert_ptr_nonnull(r->val);
	pattern(r->val, len, key, r->seed);
	*rc = kv_ssd_write(s, key, strlen(key), 1000, gen, r->val, len, on_write, r);
	if (*rc != MORI_OK) {
		free(r->val);
		r->val = NULL;
		return NULL;
	}
	nrec++;
	return r;
}

/* Bits `mask` of the byte at `at` of r's segment file flipped on disk (synced). */
static void flip_in_segment(const struct rec *r, off_t at, uint8_t mask)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/seg-%08u.kv", base, r->loc.seg);
	int fd = open(p, O_RDWR);
	ck_assert_int_ge(fd, 0);
	uint8_t b;
	ck_assert_int_eq(pread(fd, &b, 1, at), 1);
	b ^= mask;
	ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
	ck_assert_int_eq(fsync(fd), 0);
	close(fd);
}

/* r read back into dst and waited for; its code in W.last_rc. */
static void read_into(struct kv_ssd *s, const struct rec *r, uint8_t *dst)
{
	W = (struct wait){0};
	ck_assert_int_eq(kv_ssd_read(s, &r->loc, r->key, strlen(r->key), r->gen, dst, on_read, NULL), MORI_OK);
	wait_for(&W.n, 1, "read");
}

/* n values keyed PREFIX0.. PREFIX(n-1), value i of size0 + i * step bytes, put and written. */
static void put_n(struct kv_ssd *s, const char *prefix, int n, uint64_t size0, uint64_t step, uint64_t gen)
{
	for (int i = 0; i < n; i++) {
		char key[16];
		int rc;
		snprintf(key, sizeof(key), "%s%d", prefix, i);
		put(s, key, size0 + (uint64_t)i * step, gen, &rc);
		ck_assert_int_eq(rc, MORI_OK);
	}
	wait_for(&W.n, n, "writes");
}


/* Read every live record of the table at once and compare each with its pattern. */
static void check_all(struct kv_ssd *s)
{
	uint8_t *got[MAXREC] = {0};
	int n = 0;
	W = (struct wait){0};
	for (int i = 0; i < nrec; i++) {
		struct rec *r = &recs[i];
		if (!r->live)
			continue;
		got[i] = malloc(r->len + 2);
		ck_assert_ptr_nonnull(got[i]);
		got[i][r->len + 1] = 0xee; /* nothing past the value is written */
		/* dst unaligned on purpose */
		int rc = kv_ssd_read(s, &r->loc, r->key, strlen(r->key), r->gen, got[i] + 1, on_read, r);
		ck_assert_msg(rc == MORI_OK, "read %s: %d", r->key, rc);
		n++;
	}
	wait_for(&W.n, n, "reads");
	ck_assert_msg(W.rc_bad == 0, "%d reads failed, last %d: %s", W.rc_bad, W.last_rc, W.msg);
	for (int i = 0; i < nrec; i++) {
		struct rec *r = &recs[i];
		if (!r->live)
			continue;
		uint8_t *want = malloc(r->len);
		pattern(want, r->len, r->key, r->seed);
		ck_assert_msg(!memcmp(got[i] + 1, want, r->len), "%s (%llu bytes) differs", r->key,
			      (unsigned long long)r->len);
		ck_assert_uint_eq(got[i][r->len + 1], 0xee);
		free(want);
		free(got[i]);
	}
}

static int flush_rc, flush_n;
static void on_flush(void *arg, int rc, const struct kv_ssd_loc *loc, const char *msg)
{
	flush_rc = rc;
	flush_n++;
}

static void flush(struct kv_ssd *s)
{
	flush_n = 0;
	ck_assert_int_eq(kv_ssd_flush(s, on_flush, NULL), MORI_OK);
	ck_assert_int_eq(flush_n, 0); /* never answered inside the call */
	wait_for(&flush_n, 1, "flush");
	ck_assert_int_eq(flush_rc, MORI_OK);
}

static void check_found(void)
{
	int live = 0;
	for (int i = 0; i < nrec; i++) {
		if (recs[i].found && !recs[i].live && recs[i].revivable) {
			recs[i].live = 1; /* checked byte for byte with the rest */
			recs[i].revivable = 0;
		}
		ck_assert_msg(recs[i].found == recs[i].live, "%s: found %d, live %d", recs[i].key, recs[i].found,
			      recs[i].live);
		live += recs[i].live;
	}
	ck_assert_int_eq(n_found, live);
}

static int odirect_works(const char *dir)
{
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/odirect-probe", dir);
	int fd = open(p, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd >= 0) {
		close(fd);
		unlink(p);
	}
	return fd >= 0;
}

/* ---- cases ---- */

START_TEST(roundtrip_and_reopen)
{
	static const uint64_t sizes[] = {1, 2, 7, 100, 4032 - 6, 4032 - 5, 4096, 4097, 65536 + 3, 1 * MIB,
					 3 * MIB + 1, 64 * MIB};
	struct kv_ssd *s = tier_open(base, 1024 * MIB);
	int rc, n = 0;
	W = (struct wait){0};
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char key[32];
		snprintf(key, sizeof(key), "size-%u", i);
		ck_assert_ptr_nonnull(put(s, key, sizes[i], 1, &rc));
		n++;
	}
	for (int i = 0; i < 150; i++) { /* many small and middling ones, all in flight together */
		char key[32];
		snprintf(key, sizeof(key), "many/%d", i);
		ck_assert_ptr_nonnull(put(s, key, 1 + (uint64_t)(i * 7919) % (200 * 1024), 1, &rc));
		n++;
	}
	wait_for(&W.n, n, "writes");
	ck_assert_msg(W.rc_bad == 0, "%d writes failed: %s", W.rc_bad, W.msg);
	flush(s);
	check_all(s);
	/* a replacement: the newer generation wins at reopen */
	struct rec *old = rec_by_key("many/3", 6);
	struct kv_ssd_loc oldloc = old->loc;
	old->live = 0;
	old->key[0] = 0; /* the table's new record of the key is the one looked up */
	W = (struct wait){0};
	ck_assert_ptr_nonnull(put(s, "many/3", 5000, 2, &rc));
	wait_for(&W.n, 1, "replacement");
	ck_assert_int_eq(kv_ssd_remove(s, &oldloc, "many/3", 6, 1000, 1, 0), MORI_OK);
	struct kv_ssd_stats st;
	kv_ssd_stats_get(s, &st);
	ck_assert_int_eq(st.o_direct, odirect_works(base));
	ck_assert_uint_eq(st.records, (uint64_t)n);
	ck_assert_uint_le(st.used_bytes, st.capacity);
	ck_assert_uint_ge(st.write_bytes, 64 * MIB);
	flush(s);
	tier_close(s);
	s = tier_open(base, 1024 * MIB);
	check_found();
	check_all(s);
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_eq(st.crc_errors + st.torn_dropped, 0);
	ck_assert_uint_eq(st.records, (uint64_t)n);
	/* a second open of the same directory is refused while this one holds it */
	char err[300];
	struct kv_ssd *t = NULL;
	ck_assert_int_eq(kv_ssd_open(&loop, base, MIB * 64, NULL, NULL, NULL, &t, err, sizeof(err)), MORI_EBUSY);
	tier_close(s);
}
END_TEST

START_TEST(tombstones)
{
	struct kv_ssd *s = tier_open(base, 256 * MIB);
	W = (struct wait){0};
	put_n(s, "k", 10, 10000, 1, 5);
	ck_assert_int_eq(kv_ssd_remove(s, &recs[3].loc, "k3", 2, 1000, 5, 1), MORI_OK);
	ck_assert_int_eq(kv_ssd_remove(s, &recs[5].loc, "k5", 2, 1000, 5, 1), MORI_OK);
	recs[3].live = recs[5].live = 0;
	/* the removed location reads as gone at once */
	static uint8_t one[10003];
	ck_assert_int_eq(kv_ssd_read(s, &recs[3].loc, "k3", 2, 5, one, on_read, NULL), MORI_ENOENT);
	flush(s);
	tier_close(s);
	for (int round = 0; round < 2; round++) { /* tombstones stay across more than one reopen */
		s = tier_open(base, 256 * MIB);
		check_found();
		check_all(s);
		tier_close(s);
	}
}
END_TEST

START_TEST(torn_tail)
{
	struct kv_ssd *s = tier_open(base, 256 * MIB);
	int rc;
	W = (struct wait){0};
	put_n(s, "t", 20, 100000, 0, 1);
	flush(s);
	tier_close(s);
	struct rec *last = &recs[0];
	for (int i = 0; i < 20; i++)
		if (recs[i].loc.seg > last->loc.seg || (recs[i].loc.seg == last->loc.seg && recs[i].loc.off > last->loc.off))
			last = &recs[i];
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/seg-%08u.kv", base, last->loc.seg);
	ck_assert_int_eq(truncate(p, (off_t)(last->loc.off + 50000)), 0); /* mid-value */
	last->live = 0;
	s = tier_open(base, 256 * MIB);
	struct kv_ssd_stats st;
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_eq(st.torn_dropped, 1);
	ck_assert_uint_eq(st.crc_errors, 0);
	check_found();
	check_all(s);
	/* the torn tail was cut: appends after it and another reopen see no tear */
	W = (struct wait){0};
	put(s, "after", 3000, 1, &rc);
	wait_for(&W.n, 1, "write");
	flush(s);
	tier_close(s);
	s = tier_open(base, 256 * MIB);
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_eq(st.torn_dropped, 0);
	check_found();
	check_all(s);
	tier_close(s);
}
END_TEST

START_TEST(flipped_bit)
{
	struct kv_ssd *s = tier_open(base, 256 * MIB);
	W = (struct wait){0};
	put_n(s, "f", 10, 20000, 0, 1);
	flush(s);
	struct rec *r = &recs[4];
	flip_in_segment(r, (off_t)(r->loc.off + 64 + strlen(r->key) + 1234), 0x10);
	uint8_t *dst = malloc(r->len);
	read_into(s, r, dst);
	ck_assert_int_eq(W.last_rc, MORI_EIO);
	char want[64];
	snprintf(want, sizeof(want), "seg-%08u.kv: record at offset %llu", r->loc.seg, (unsigned long long)r->loc.off);
	ck_assert_msg(strstr(W.msg, want), "message '%s' does not name '%s'", W.msg, want);
	free(dst);
	/* a read naming another key or generation at that place fails too */
	W = (struct wait){0};
	dst = malloc(recs[5].len);
	ck_assert_int_eq(kv_ssd_read(s, &recs[5].loc, recs[5].key, strlen(recs[5].key), 99, dst, on_read, NULL), MORI_OK);
	wait_for(&W.n, 1, "read");
	ck_assert_int_eq(W.last_rc, MORI_EIO);
	free(dst);
	struct kv_ssd_stats st;
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_eq(st.crc_errors, 2);
	r->live = 0;
	tier_close(s);
	s = tier_open(base, 256 * MIB);
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_eq(st.crc_errors, 1); /* the scan drops it */
	check_found();
	check_all(s);
	tier_close(s);
}
END_TEST

START_TEST(tier_full)
{
	struct kv_ssd *s = tier_open(base, 24 * MIB);
	int rc = MORI_OK, ok = 0;
	W = (struct wait){0};
	for (int i = 0; i < 40 && rc == MORI_OK; i++) {
		char key[16];
		snprintf(key, sizeof(key), "full%d", i);
		if (put(s, key, MIB, 1, &rc))
			ok++;
	}
	ck_assert_int_eq(rc, MORI_ENOMEM);
	ck_assert_int_ge(ok, 10);
	wait_for(&W.n, ok, "writes");
	ck_assert_int_eq(W.rc_bad, 0);
	struct kv_ssd_stats st;
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_le(st.used_bytes, 24 * MIB);
	ck_assert_uint_lt(kv_ssd_free_bytes(s), 2 * MIB);
	check_all(s);
	tier_close(s);
}
END_TEST

/* A private mount of fstype at dir (this forked test's own mount namespace), or -1 saying why. */
static int private_mount(const char *fstype, const char *opts, const char *dir)
{
	if (getenv("CK_FORK") && !strcmp(getenv("CK_FORK"), "no"))
		return fprintf(stderr, "no private mount: CK_FORK=no\n"), -1;
	uid_t uid = getuid();
	gid_t gid = getgid();
	if (unshare(CLONE_NEWNS) != 0) {
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
			return fprintf(stderr, "no private mount namespace: %s\n", strerror(errno)), -1;
		char m[64];
		int fd = open("/proc/self/setgroups", O_WRONLY);
		if (fd >= 0) {
			ck_assert_int_gt(write(fd, "deny", 4), 0);
			close(fd);
		}
		snprintf(m, sizeof(m), "0 %u 1", (unsigned)uid);
		fd = open("/proc/self/uid_map", O_WRONLY);
		if (fd < 0 || write(fd, m, strlen(m)) < 0)
			return fprintf(stderr, "no uid map: %s\n", strerror(errno)), -1;
		close(fd);
		snprintf(m, sizeof(m), "0 %u 1", (unsigned)gid);
		fd = open("/proc/self/gid_map", O_WRONLY);
		if (fd < 0 || write(fd, m, strlen(m)) < 0)
			return fprintf(stderr, "no gid map: %s\n", strerror(errno)), -1;
		close(fd);
	}
	if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 || mount(fstype, dir, fstype, 0, opts) != 0)
		return fprintf(stderr, "cannot mount %s: %s\n", fstype, strerror(errno)), -1;
	return 0;
}

START_TEST(filesystem_full)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/tiny", base);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	if (private_mount("tmpfs", "size=8m", dir) != 0) {
		printf("skipped: filesystem_full: no tiny tmpfs can be mounted here (tier_full covers the capacity limit)\n");
		return;
	}
	struct kv_ssd *s = tier_open(dir, 1024 * MIB); /* more than the filesystem has */
	int rc = MORI_OK, ok = 0;
	W = (struct wait){0};
	for (int i = 0; i < 16; i++) {
		char key[16];
		snprintf(key, sizeof(key), "fs%d", i);
		if (put(s, key, MIB, 1, &rc))
			ok++;
		wait_for(&W.n, ok, "write"); /* one at a time: which ones failed is then plain */
		if (W.rc_bad)
			break;
	}
	ck_assert_msg(W.rc_bad >= 1, "the 8 MiB filesystem took 16 MiB");
	ck_assert_int_eq(W.last_rc, MORI_ENOMEM);
	ck_assert_msg(strstr(W.msg, "No space left"), "%s", W.msg);
	ck_assert_int_ge(ok - W.rc_bad, 4);
	check_all(s);
	struct kv_ssd_stats st;
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_ge(st.io_errors, 1);
	tier_close(s);
	s = tier_open(dir, 1024 * MIB); /* and what was stored is whole after a reopen */
	check_found();
	check_all(s);
	tier_close(s);
	umount2(dir, MNT_DETACH);
}
END_TEST

START_TEST(buffered_fallback)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/ram", base);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	if (private_mount("ramfs", NULL, dir) != 0) {
		if (odirect_works("/dev/shm")) {
			printf("skipped: buffered_fallback: no ramfs can be mounted here and /dev/shm takes O_DIRECT\n");
			return;
		}
		snprintf(dir, sizeof(dir), "/dev/shm/kvssd-%d", (int)getpid());
		ck_assert_int_eq(mkdir(dir, 0755), 0);
	}
	ck_assert_msg(!odirect_works(dir), "%s takes O_DIRECT", dir);
	struct kv_ssd *s = tier_open(dir, 256 * MIB);
	struct kv_ssd_stats st;
	kv_ssd_stats_get(s, &st);
	ck_assert_int_eq(st.o_direct, 0);
	W = (struct wait){0};
	put_n(s, "b", 12, 1, 77777, 1);
	ck_assert_int_eq(W.rc_bad, 0);
	flush(s);
	check_all(s);
	tier_close(s);
	s = tier_open(dir, 256 * MIB);
	check_found();
	check_all(s);
	tier_close(s);
	if (!strncmp(dir, "/dev/shm/", 9))
		nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	else
		umount2(dir, MNT_DETACH);
}
END_TEST

START_TEST(bad_directories)
{
	char dir[PATH_MAX], err[300];
	struct kv_ssd *s = NULL;
	snprintf(dir, sizeof(dir), "%s/missing", base);
	ck_assert_int_eq(kv_ssd_open(&loop, dir, MIB * 64, NULL, NULL, NULL, &s, err, sizeof(err)), MORI_ENOENT);
	ck_assert_msg(strstr(err, dir), "%s", err);
	ck_assert_ptr_null(s);
	snprintf(dir, sizeof(dir), "%s/file", base);
	close(open(dir, O_CREAT | O_WRONLY, 0600));
	ck_assert_int_eq(kv_ssd_open(&loop, dir, MIB * 64, NULL, NULL, NULL, &s, err, sizeof(err)), MORI_EINVAL);
	snprintf(dir, sizeof(dir), "%s/ro", base);
	ck_assert_int_eq(mkdir(dir, 0555), 0);
	if (geteuid() == 0) /* root writes anywhere: be somebody else (this test runs in its own process) */
		ck_assert_int_eq(seteuid(65534), 0);
	ck_assert_int_eq(kv_ssd_open(&loop, dir, MIB * 64, NULL, NULL, NULL, &s, err, sizeof(err)), MORI_EPERM);
	ck_assert_msg(strstr(err, dir) && strstr(err, "not writable"), "%s", err);
	if (getuid() == 0)
		ck_assert_int_eq(seteuid(0), 0);
}
END_TEST

START_TEST(compaction)
{
	struct kv_ssd *s = tier_open(base, 64 * MIB); /* 4 MiB segments */
	n_moved = 0;
	W = (struct wait){0};
	put_n(s, "c", 60, 256 * 1024, 1, 1);
	struct kv_ssd_stats st;
	kv_ssd_stats_get(s, &st);
	uint64_t segs = st.segments;
	ck_assert_uint_ge(segs, 3);
	for (int i = 0; i < 60; i++) /* three of every four go, one with a tombstone */
		if (i % 4) {
			ck_assert_int_eq(kv_ssd_remove(s, &recs[i].loc, recs[i].key, strlen(recs[i].key), 1000, 1, i % 4 == 2),
					 MORI_OK);
			recs[i].live = 0;
			recs[i].revivable = i % 4 != 2;
		}
	/* compaction runs on its own; wait for every closed segment to go */
	uint64_t end = uv_now(&loop) + 120000;
	for (;;) {
		kv_ssd_stats_get(s, &st);
		if (st.compactions >= segs - 1)
			break;
		ck_assert_msg(uv_now(&loop) < end, "%llu compactions of %llu segments", (unsigned long long)st.compactions,
			      (unsigned long long)segs);
		uv_run(&loop, UV_RUN_ONCE);
	}
	ck_assert_int_gt(n_moved, 0);
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_eq(st.records, 15);
	ck_assert_uint_le(st.used_bytes, 2 * 4 * MIB + 15 * 264 * 1024);
	check_all(s);
	flush(s);
	tier_close(s);
	s = tier_open(base, 64 * MIB);
	check_found(); /* at the moved locations */
	check_all(s);
	tier_close(s);
}
END_TEST

START_TEST(diagnose_dir)
{
	struct diag_check out[4];
	int n = diagnose_kv_ssd(base, 64 * MIB, out, 4);
	ck_assert_int_eq(n, 3);
	for (int i = 0; i < n; i++)
		ck_assert_msg(out[i].verdict == DIAG_OK || out[i].verdict == DIAG_WARNING, "%s: %s %s", out[i].name,
			      diag_verdict_name(out[i].verdict), out[i].detail);
	ck_assert_str_eq(out[0].name, "kv_ssd_odirect");
	ck_assert_int_eq(out[0].verdict, odirect_works(base) ? DIAG_OK : DIAG_WARNING);
	ck_assert_str_eq(out[2].name, "kv_ssd_write_bw");
	ck_assert_msg(strstr(out[2].detail, "MB/s"), "%s", out[2].detail);
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/missing", base);
	n = diagnose_kv_ssd(dir, 64 * MIB, out, 4);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(out[0].verdict, DIAG_PROBLEM);
	ck_assert_msg(strstr(out[0].detail, dir), "%s", out[0].detail);
	/* nothing left behind */
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/.mori-diagnose-probe", base);
	ck_assert_int_ne(access(p, F_OK), 0);
}
END_TEST

/* A segment is preallocated whole; a stop without a clean close (kill -9) leaves the unwritten
 * rest as zeros: the reopen cuts it off, counting nothing torn, every record whole. */
START_TEST(preallocated_tail)
{
	struct kv_ssd *s = tier_open(base, 256 * MIB);
	W = (struct wait){0};
	put_n(s, "p", 5, 30000, 1, 1);
	flush(s);
	char p[PATH_MAX], cmd[2 * PATH_MAX + 64];
	snprintf(p, sizeof(p), "%s/seg-%08u.kv", base, recs[0].loc.seg);
	struct stat sb;
	ck_assert_int_eq(stat(p, &sb), 0);
	printf("# preallocated_tail: the open segment is %llu bytes on disk with 5 records in it\n",
	       (unsigned long long)sb.st_size);
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s.crash'", p, p);
	ck_assert_int_eq(system(cmd), 0); /* the file as a kill -9 now would leave it */
	tier_close(s);
	uint64_t end = 0;
	for (int i = 0; i < 5; i++)
		end = recs[i].loc.off + ((64 + 2 + recs[i].len + 4095) & ~4095ull) > end ?
			      recs[i].loc.off + ((64 + 2 + recs[i].len + 4095) & ~4095ull) : end;
	ck_assert_int_eq(stat(p, &sb), 0);
	ck_assert_uint_eq((uint64_t)sb.st_size, end); /* a clean close cuts the unwritten rest */
	snprintf(cmd, sizeof(cmd), "mv '%s.crash' '%s'", p, p);
	ck_assert_int_eq(system(cmd), 0);
	s = tier_open(base, 256 * MIB);
	struct kv_ssd_stats st;
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_eq(st.torn_dropped, 0);
	ck_assert_uint_eq(st.crc_errors, 0);
	check_found();
	check_all(s);
	ck_assert_int_eq(stat(p, &sb), 0);
	ck_assert_uint_eq((uint64_t)sb.st_size, end);
	tier_close(s);
}
END_TEST

/* The version of the record at loc, as on disk. */
static int rec_version(const struct kv_ssd_loc *loc)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/seg-%08u.kv", base, loc->seg);
	int fd = open(p, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	uint16_t v = 0;
	ck_assert_int_eq(pread(fd, &v, 2, (off_t)loc->off + 4), 2);
	close(fd);
	return v;
}

/* Page-aligned values of 64 KiB and more go to the disk straight from the caller's memory, their
 * value at 4096 in the record (version 2): whole after a reopen, a flipped bit in one is an error
 * naming it and dropped by the scan, a torn one is cut. Smaller ones keep version 1. */
START_TEST(direct_records)
{
	static const uint64_t sizes[] = {65536, MIB, MIB + 100, 200000, 4096 * 16 + 1, 60000, 3 * MIB + 7};
	enum { NS = sizeof(sizes) / sizeof(sizes[0]) };
	aligned_src = 1;
	struct kv_ssd *s = tier_open(base, 256 * MIB);
	int rc;
	W = (struct wait){0};
	for (int i = 0; i < NS; i++) {
		char key[16];
		snprintf(key, sizeof(key), "d%d", i);
		ck_assert_ptr_nonnull(put(s, key, sizes[i], 1, &rc));
	}
	wait_for(&W.n, NS, "writes");
	ck_assert_msg(W.rc_bad == 0, "%d writes failed: %s", W.rc_bad, W.msg);
	flush(s);
	check_all(s);
	for (int i = 0; i < NS; i++)
		ck_assert_int_eq(rec_version(&recs[i].loc), sizes[i] >= 65536 ? 2 : 1);
	tier_close(s);
	s = tier_open(base, 256 * MIB);
	struct kv_ssd_stats st;
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_eq(st.crc_errors + st.torn_dropped, 0);
	check_found();
	check_all(s);
	/* a flipped bit in the value of d2 (version 2: the value starts at 4096) */
	struct rec *r = &recs[2];
	flip_in_segment(r, (off_t)(r->loc.off + 4096 + 777), 0x01);
	uint8_t *dst = malloc(r->len);
	read_into(s, r, dst);
	ck_assert_int_eq(W.last_rc, MORI_EIO);
	free(dst);
	r->live = 0;
	tier_close(s);
	/* the last record cut mid-value */
	struct rec *last = &recs[NS - 1];
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/seg-%08u.kv", base, last->loc.seg);
	ck_assert_int_eq(truncate(p, (off_t)(last->loc.off + 4096 + MIB)), 0);
	last->live = 0;
	s = tier_open(base, 256 * MIB);
	kv_ssd_stats_get(s, &st);
	ck_assert_uint_eq(st.crc_errors, 1);
	ck_assert_uint_eq(st.torn_dropped, 1);
	check_found();
	check_all(s);
	tier_close(s);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("kv_ssd");
	TCase *tc = tcase_create("kv_ssd");
	tcase_set_timeout(tc, 240);
	tcase_add_checked_fixture(tc, loop_setup, loop_teardown);
	tcase_add_test(tc, roundtrip_and_reopen);
	tcase_add_test(tc, tombstones);
	tcase_add_test(tc, torn_tail);
	tcase_add_test(tc, preallocated_tail);
	tcase_add_test(tc, direct_records);
	tcase_add_test(tc, flipped_bit);
	tcase_add_test(tc, tier_full);
	tcase_add_test(tc, filesystem_full);
	tcase_add_test(tc, buffered_fallback);
	tcase_add_test(tc, bad_directories);
	tcase_add_test(tc, compaction);
	tcase_add_test(tc, diagnose_dir);
	suite_add_tcase(su, tc);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
