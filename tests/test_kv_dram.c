/* The DRAM tier's allocator (daemon/kv/kv_dram.c) alone: random allocations and frees against a
 * shadow map of every granule, checking that no two values overlap, that every run lies inside
 * its slab, that freeing everything coalesces the uid's slabs back into one free run each, and
 * the bytes wasted per value (rounding to 64-byte granules, never to pages). */
#include <check.h>

#include "harness.h"
#include "kv/kv_dram.h"

#define SLAB (1u << 20)

START_TEST(random_alloc_free)
{
	struct kv_dram *t = kv_dram_new(SLAB, 8 * SLAB);
	ck_assert_ptr_nonnull(t);
	enum { N = 4000 };
	static struct kv_ext ext[N];
	static int live[N];
	static uint64_t size[N];
	uint64_t seed = test_seed(), used = 0;
	for (int round = 0; round < 200000; round++) {
		int i = (int)(test_rand(&seed) % N);
		if (live[i]) {
			kv_dram_release(t, &ext[i]);
			live[i] = 0;
			used -= (size[i] + 63) / 64 * 64;
			continue;
		}
		uint64_t r = test_rand(&seed);
		size[i] = r % 16 == 0 ? 1 + r % (SLAB / 4) : 1 + r % 8192;
		int rc = kv_dram_alloc(t, (uid_t)(r >> 60 & 1), size[i], &ext[i]);
		if (rc == MORI_ENOMEM)
			continue;
		ck_assert_int_eq(rc, MORI_OK);
		live[i] = 1;
		used += (size[i] + 63) / 64 * 64;
		struct kv_slab *s = kv_dram_slab(t, ext[i].slab);
		ck_assert_ptr_nonnull(s);
		ck_assert_uint_ge(kv_ext_bytes(&ext[i]), size[i]);
		ck_assert_uint_lt(kv_ext_bytes(&ext[i]) - size[i], 64);
		ck_assert_uint_le(kv_ext_offset(&ext[i]) + size[i], s->bytes);
		if (round % 1000 == 0) { /* no two live runs of a slab overlap */
			for (int a = 0; a < N; a++)
				for (int b = a + 1; live[a] && b < N; b++)
					if (live[b] && ext[a].slab == ext[b].slab &&
					    !(kv_ext_offset(&ext[a]) + kv_ext_bytes(&ext[a]) <= kv_ext_offset(&ext[b]) ||
					      kv_ext_offset(&ext[b]) + kv_ext_bytes(&ext[b]) <= kv_ext_offset(&ext[a])))
						ck_abort_msg("values %d and %d overlap in slab %u", a, b, ext[a].slab);
			struct kv_dram_stats st;
			kv_dram_stats_get(t, &st);
			ck_assert_uint_eq(st.allocated, used);
		}
	}
	for (int i = 0; i < N; i++)
		if (live[i])
			kv_dram_release(t, &ext[i]);
	struct kv_dram_stats st;
	kv_dram_stats_get(t, &st);
	ck_assert_uint_eq(st.allocated, 0);
	ck_assert_uint_le(st.slab_bytes, 8 * SLAB); /* empty slabs kept, within the limit */
	ck_assert_uint_eq(st.free_runs, st.slabs); /* each coalesced whole */
	kv_dram_free(t);
}
END_TEST

/* Bytes wasted per value: at most 63 for any size; 0 for 4 KiB, 64 KiB and 1 MiB values. */
START_TEST(waste_per_value)
{
	static const uint64_t sizes[] = {4096, 65536, 1u << 20, 1000, 4097};
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct kv_dram *t = kv_dram_new(64u << 20, 1ull << 30);
		struct kv_ext e[64];
		uint64_t n = 0;
		for (int i = 0; i < 64; i++) {
			OK(kv_dram_alloc(t, 0, sizes[k], &e[i]));
			n++;
		}
		struct kv_dram_stats st;
		kv_dram_stats_get(t, &st);
		printf("# waste_per_value: %llu-byte values: %llu bytes wasted per value\n", (unsigned long long)sizes[k],
		       (unsigned long long)((st.allocated - n * sizes[k]) / n));
		ck_assert_uint_lt(st.allocated - n * sizes[k], 64 * n);
		if (sizes[k] % 64 == 0)
			ck_assert_uint_eq(st.allocated, n * sizes[k]);
		for (int i = 0; i < 64; i++)
			kv_dram_release(t, &e[i]);
		kv_dram_free(t);
	}
}
END_TEST

/* Emptied slabs stay while the tier has room; another uid needing a slab takes them back, all but
 * the uid's last. */
START_TEST(empty_slabs_reclaimed)
{
	struct kv_dram *t = kv_dram_new(SLAB, 3 * SLAB);
	struct kv_ext a[12], b[9];
	struct kv_dram_stats st;
	for (int i = 0; i < 12; i++) /* four a slab: three slabs of uid 0 */
		OK(kv_dram_alloc(t, 0, SLAB / 4, &a[i]));
	ck_assert_int_eq(kv_dram_alloc(t, 1, 64, &b[0]), MORI_ENOMEM);
	for (int i = 0; i < 12; i++)
		kv_dram_release(t, &a[i]);
	kv_dram_stats_get(t, &st);
	ck_assert_uint_eq(st.slabs, 3);
	for (int i = 0; i < 8; i++) /* two of uid 0's empty slabs become uid 1's */
		OK(kv_dram_alloc(t, 1, SLAB / 4, &b[i]));
	ck_assert_int_eq(kv_dram_alloc(t, 1, SLAB / 4, &b[8]), MORI_ENOMEM);
	kv_dram_stats_get(t, &st);
	ck_assert_uint_eq(st.slabs, 3);
	ck_assert_uint_eq(st.allocated, 2 * SLAB);
	OK(kv_dram_alloc(t, 0, SLAB / 4, &a[0])); /* uid 0 kept its last */
	kv_dram_release(t, &a[0]);
	for (int i = 0; i < 8; i++)
		kv_dram_release(t, &b[i]);
	kv_dram_free(t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kv_dram");
	TCase *t = tcase_create("alloc");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, random_alloc_free);
	tcase_add_test(t, waste_per_value);
	tcase_add_test(t, empty_slabs_reclaimed);
	suite_add_tcase(s, t);
	return run_suite(s);
}
