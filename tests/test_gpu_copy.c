/* GPU layer below the daemon, one process: the runtime table, registration of each kind of
 * memory (and refusal of the wrong kinds), and the batched copy kernel through gpu_xfer on
 * random batches, every destination byte checked against a host model. Skips (77) without a
 * GPU or without kernels. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_harness.h"

static const struct gpu_api *g;
static mori_client C;
static struct gpu_ctx *X;
static struct gpu_dev *D;

static void setup(void)
{
	g = gpu_api();
	ck_assert_ptr_nonnull(g);
	ck_assert_int_eq(gpu_ctx_get(&C, &X), MORI_OK);
	ck_assert_int_eq(gpu_dev_get(&C, X, 0, &D), MORI_OK);
	ck_assert_int_eq(gpu_push(g, D), 0);
}

static void teardown(void)
{
	gpu_pop(g);
	gpu_ctx_free(&C);
}

#define CKR(call)                                                                          \
	do {                                                                               \
		int r_ = (call);                                                           \
		ck_assert_msg(r_ == 0, "%s: %s", #call, gpu_strerror(r_));                 \
	} while (0)

static void fill_random(uint64_t *seed, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(test_rand(seed) >> 56);
}

static int run_xfer(int op, mori_mem *l, mori_mem *r, const mori_desc *d, size_t n)
{
	struct mori_xfer x = {.c = &C};
	x.deadline_us = mori_now_us() + 10000000;
	int rc = gpu_xfer(&C, op, l, r, d, n, NULL, &x);
	if (rc)
		return rc;
	while ((rc = gpu_xfer_poll(&x)) == MORI_EINPROGRESS)
		;
	return rc;
}

START_TEST(describe_and_arch)
{
	char buf[256];
	gpu_describe(buf, sizeof(buf));
	ck_assert_msg(strstr(buf, " x ") && strstr(buf, "CUDA driver"), "describe: %s", buf);
	ck_assert_msg(strncmp(D->arch, "sm_", 3) == 0, "arch %s", D->arch);
	ck_assert_int_gt(D->sm_count, 0);
	ck_assert_int_eq(gpu_ptr_is_device(buf), 0);
}
END_TEST

/* Two VRAM regions of `size` random bytes, A (local) and B (remote), with host models ma, mb. */
struct vram_pair {
	uint64_t size;
	gpu_dptr A, B;
	uint8_t *ma, *mb, *got;
	mori_mem L, R;
};

static void pair_setup(struct vram_pair *p, uint64_t *seed, uint64_t size)
{
	p->size = size;
	CKR(g->mem_alloc(&p->A, size));
	CKR(g->mem_alloc(&p->B, size));
	p->ma = malloc(size);
	p->mb = malloc(size);
	p->got = malloc(size);
	fill_random(seed, p->ma, size);
	fill_random(seed, p->mb, size);
	CKR(g->memcpy_htod_async(p->A, p->ma, size, NULL));
	CKR(g->memcpy_htod_async(p->B, p->mb, size, NULL));
	CKR(g->stream_synchronize(NULL));
	p->L = (mori_mem){.c = &C, .local = 1, .kind = MORI_MEM_VRAM, .size = size, .dptr = p->A, .region_id = 1};
	p->R = (mori_mem){.c = &C, .kind = MORI_MEM_VRAM, .size = size, .dptr = p->B, .region_id = 2};
}

static void pair_free(struct vram_pair *p)
{
	free(p->ma);
	free(p->mb);
	free(p->got);
	g->mem_free(p->A);
	g->mem_free(p->B);
}

/* VRAM <-> VRAM, both directions, inline, staged and sliced batches. */
START_TEST(random_batches_vram)
{
	uint64_t seed = test_seed();
	struct vram_pair P;
	pair_setup(&P, &seed, 16u << 20);
	const uint64_t size = P.size;
	gpu_dptr A = P.A, B = P.B;
	uint8_t *ma = P.ma, *mb = P.mb, *got = P.got;
	mori_mem L = P.L, R = P.R;
	size_t cap = 40000;
	struct gpu_move *mv = malloc(cap * sizeof(*mv));
	mori_desc *d = malloc(cap * sizeof(*d));
	int batches = gpu_batches(400);
	for (int b = 0; b < batches; b++) {
		uint64_t k = test_rand(&seed) % 100;
		size_t n = k < 30 ? 1 + test_rand(&seed) % MORI_COPY_INLINE     /* inline */
			 : k < 90 ? 1 + test_rand(&seed) % 3000                  /* one slice */
				  : 16385 + test_rand(&seed) % (cap - 16385);     /* several slices */
		uint64_t maxlen = k % 3 == 0 ? (4u << 20) : k % 3 == 1 ? 65536 : 300;
		int op = test_rand(&seed) & 1 ? MORI_XFER_WRITE : MORI_XFER_READ;
		uint8_t *msrc = op == MORI_XFER_WRITE ? ma : mb, *mdst = op == MORI_XFER_WRITE ? mb : ma;
		gpu_dptr ddst = op == MORI_XFER_WRITE ? B : A;
		gpu_random_moves(&seed, mv, n, size, size, maxlen);
		gpu_moves_to_descs(mv, n, op, d);
		int rc = run_xfer(op, &L, &R, d, n);
		ck_assert_msg(rc == MORI_OK, "batch %d (n=%zu): %s: %s", b, n, mori_strerror(rc), mori_client_last_error(&C));
		gpu_model_apply(mv, n, msrc, mdst);
		CKR(g->memcpy_dtoh_async(got, ddst, size, NULL));
		CKR(g->stream_synchronize(NULL));
		long long at = gpu_first_diff(got, mdst, size);
		ck_assert_msg(at < 0, "batch %d (op %d, n=%zu, maxlen %llu): first wrong byte at %lld", b, op, n,
			      (unsigned long long)maxlen, at);
	}
	free(mv);
	free(d);
	pair_free(&P);
}
END_TEST

/* VRAM <-> host (malloc'd, pinned by the library on first use and unpinned at close). */
START_TEST(random_batches_host)
{
	uint64_t seed = test_seed();
	const uint64_t size = 8u << 20;
	gpu_dptr A;
	CKR(g->mem_alloc(&A, size));
	uint8_t *ma = malloc(size), *host = aligned_alloc(4096, size + 4096), *mh = malloc(size), *got = malloc(size);
	uint8_t *hp = host + 100; /* not page aligned: pinning rounds to pages */
	fill_random(&seed, ma, size);
	fill_random(&seed, hp, size);
	memcpy(mh, hp, size);
	CKR(g->memcpy_htod_async(A, ma, size, NULL));
	CKR(g->stream_synchronize(NULL));
	mori_mem L = {.c = &C, .local = 1, .kind = MORI_MEM_VRAM, .size = size, .dptr = A, .region_id = 1};
	mori_mem H = {.c = &C, .kind = MORI_MEM_HOST, .size = size, .ptr = hp, .region_id = 3};
	struct gpu_move mv[600];
	mori_desc d[600];
	for (int b = 0; b < gpu_batches(400) / 2; b++) {
		size_t n = 1 + test_rand(&seed) % 600;
		int op = test_rand(&seed) & 1 ? MORI_XFER_WRITE : MORI_XFER_READ; /* write: GPU -> host */
		gpu_random_moves(&seed, mv, n, size, size, 40000);
		gpu_moves_to_descs(mv, n, op, d);
		int rc = run_xfer(op, &L, &H, d, n);
		ck_assert_msg(rc == MORI_OK, "batch %d: %s: %s", b, mori_strerror(rc), mori_client_last_error(&C));
		if (op == MORI_XFER_WRITE) {
			gpu_model_apply(mv, n, ma, mh);
			long long at = gpu_first_diff(hp, mh, size);
			ck_assert_msg(at < 0, "GPU->host batch %d: first wrong byte at %lld", b, at);
		} else {
			gpu_model_apply(mv, n, mh, ma);
			CKR(g->memcpy_dtoh_async(got, A, size, NULL));
			CKR(g->stream_synchronize(NULL));
			long long at = gpu_first_diff(got, ma, size);
			ck_assert_msg(at < 0, "host->GPU batch %d: first wrong byte at %lld", b, at);
		}
	}
	ck_assert_ptr_nonnull(H.gpu_priv);
	gpu_mem_close(&C, &H);
	ck_assert_ptr_null(H.gpu_priv);
	/* unpinned: registering the same pages again succeeds */
	CKR(g->mem_host_register(host, size, 0));
	CKR(g->mem_host_unregister(host));
	free(ma);
	free(mh);
	free(got);
	free(host);
	g->mem_free(A);
}
END_TEST

/* Every byte of a copy between mutually misaligned addresses, lengths 1..600 (head, narrow
 * body, tail), against the model. */
START_TEST(alignment_edges)
{
	uint64_t seed = test_seed();
	struct vram_pair P;
	pair_setup(&P, &seed, 1u << 20);
	struct gpu_move mv[256];
	mori_desc d[256];
	for (unsigned s = 0; s < 16; s++)
		for (unsigned t = 0; t < 16; t++) {
			size_t i = s * 16 + t;
			uint64_t len = 1 + test_rand(&seed) % 600;
			mv[i] = (struct gpu_move){4096 * i + s, 4096 * i + t, len};
		}
	gpu_moves_to_descs(mv, 256, MORI_XFER_WRITE, d);
	ck_assert_int_eq(run_xfer(MORI_XFER_WRITE, &P.L, &P.R, d, 256), MORI_OK);
	gpu_model_apply(mv, 256, P.ma, P.mb);
	CKR(g->memcpy_dtoh_async(P.got, P.B, P.size, NULL));
	CKR(g->stream_synchronize(NULL));
	long long at = gpu_first_diff(P.got, P.mb, P.size);
	ck_assert_msg(at < 0, "first wrong byte at %lld", at);
	pair_free(&P);
}
END_TEST

/* Prepared lists (descriptors on the GPU, indices staged): random subsets in random order,
 * lists of one block size (uniform chunking) and of mixed sizes (first-chunk table), small
 * (inline) and large (several slices) submissions. */
START_TEST(random_lists)
{
	uint64_t seed = test_seed();
	struct vram_pair P;
	pair_setup(&P, &seed, 16u << 20);
	const uint64_t size = P.size;
	gpu_dptr A = P.A, B = P.B;
	uint8_t *ma = P.ma, *mb = P.mb, *got = P.got;
	mori_mem L = P.L, R = P.R;
	const size_t N = 30000;
	struct gpu_move *mv = malloc(N * sizeof(*mv)), *sel = malloc(N * sizeof(*sel));
	mori_desc *d = malloc(N * sizeof(*d));
	uint32_t *idx = malloc(N * sizeof(*idx)), *perm = malloc(N * sizeof(*perm));
	for (int round = 0; round < 12; round++) {
		/* uniform: one block size; bucket: sizes that differ but split into the same number of
		 * chunks (the kernel's uniform case without a list-wide length) */
		int uniform = round % 3 == 1, bucket = round % 3 == 2;
		size_t n = round < 6 ? (bucket ? 4000 : N) : 1 + test_rand(&seed) % 500;
		int op = (round / 3) & 1 ? MORI_XFER_READ : MORI_XFER_WRITE;
		uint64_t src_size = size, dst_size = size;
		gpu_random_moves(&seed, mv, n, src_size, dst_size, 70000);
		if (uniform || bucket) { /* in shuffled slots (>= 512 bytes; >= 3 KiB for buckets) */
			uint64_t slot = dst_size / n;
			for (size_t i = 0; i < n; i++) {
				uint64_t len = uniform ? 512 : 2561 + test_rand(&seed) % 512; /* 3 chunks of 1 KiB */
				uint64_t where = mv[i].dst / slot; /* keep the shuffle, redo the placement */
				mv[i] = (struct gpu_move){test_rand(&seed) % (src_size - len + 1),
							  where * slot + test_rand(&seed) % (slot - len + 1), len};
			}
		}
		gpu_moves_to_descs(mv, n, op, d);
		struct mori_xfer_list lst = {.local = &L, .remote = &R, .descs = d, .n = n};
		ck_assert_int_eq(gpu_list_prep(&C, &lst), MORI_OK);
		ck_assert_ptr_nonnull(lst.gpu_priv);
		for (int sub = 0; sub < 10; sub++) {
			size_t k = sub < 3 ? 1 + test_rand(&seed) % MORI_COPY_INLINE : 1 + test_rand(&seed) % n;
			if (k > n) /* a short list (n from 1) has fewer indices than the inline batch */
				k = n;
			for (size_t i = 0; i < n; i++)
				perm[i] = (uint32_t)i;
			for (size_t i = 0; i < k; i++) { /* k distinct indices: destinations stay disjoint */
				size_t j = i + test_rand(&seed) % (n - i);
				uint32_t t = perm[i];
				perm[i] = perm[j];
				perm[j] = t;
				idx[i] = perm[i];
				sel[i] = mv[perm[i]];
			}
			struct mori_xfer x = {.c = &C};
			x.deadline_us = mori_now_us() + 10000000;
			int rc = gpu_xfer_list(&C, op, &lst, idx, k, NULL, &x);
			if (rc == MORI_OK)
				while ((rc = gpu_xfer_poll(&x)) == MORI_EINPROGRESS)
					;
			ck_assert_msg(rc == MORI_OK, "round %d sub %d: %s: %s", round, sub, mori_strerror(rc), mori_client_last_error(&C));
			uint8_t *msrc = op == MORI_XFER_WRITE ? ma : mb, *mdst = op == MORI_XFER_WRITE ? mb : ma;
			gpu_model_apply(sel, k, msrc, mdst);
			CKR(g->memcpy_dtoh_async(got, op == MORI_XFER_WRITE ? B : A, size, NULL));
			CKR(g->stream_synchronize(NULL));
			long long at = gpu_first_diff(got, mdst, size);
			ck_assert_msg(at < 0, "round %d (uniform %d, bucket %d, op %d) sub %d (k=%zu of %zu): first wrong byte at %lld",
				      round, uniform, bucket, op, sub, k, n, at);
		}
		idx[0] = (uint32_t)n; /* out of the list */
		struct mori_xfer x = {.c = &C};
		ck_assert_int_eq(gpu_xfer_list(&C, op, &lst, idx, 1, NULL, &x), MORI_ERANGE);
		gpu_list_free(&C, &lst);
		ck_assert_ptr_null(lst.gpu_priv);
	}
	free(mv);
	free(sel);
	free(d);
	free(idx);
	free(perm);
	pair_free(&P);
}
END_TEST

/* The copy service (small batches without a stream): jobs after its block left (idle 200 us),
 * bursts past its 16 slots (the rest launch), one and several descriptors, every byte checked. */
START_TEST(copy_service)
{
	uint64_t seed = test_seed();
	struct vram_pair P;
	pair_setup(&P, &seed, 4u << 20);
	enum { BURST = 40 };
	struct gpu_move mv[BURST][4];
	mori_desc d[BURST][4];
	struct mori_xfer x[BURST];
	size_t nd[BURST];
	uint64_t jobs0 = 0;
	for (int round = 0; round < 8; round++) {
		int burst = round % 2 ? BURST : 1;
		int op = round & 2 ? MORI_XFER_READ : MORI_XFER_WRITE;
		uint8_t *msrc = op == MORI_XFER_WRITE ? P.ma : P.mb, *mdst = op == MORI_XFER_WRITE ? P.mb : P.ma;
		for (int i = 0; i < burst; i++) { /* disjoint destinations: each burst entry its own slot */
			nd[i] = 1 + test_rand(&seed) % 3;
			uint64_t slot = P.size / BURST;
			gpu_random_moves(&seed, mv[i], nd[i], P.size, slot, 16384);
			for (size_t k = 0; k < nd[i]; k++)
				mv[i][k].dst += slot * (uint64_t)i;
			gpu_moves_to_descs(mv[i], nd[i], op, d[i]);
			x[i] = (struct mori_xfer){.c = &C, .deadline_us = mori_now_us() + 10000000};
			int rc = gpu_xfer(&C, op, &P.L, &P.R, d[i], nd[i], NULL, &x[i]);
			ck_assert_msg(rc == MORI_OK, "round %d entry %d: %s", round, i, mori_client_last_error(&C));
		}
		for (int i = 0; i < burst; i++) {
			int rc;
			while ((rc = gpu_xfer_poll(&x[i])) == MORI_EINPROGRESS)
				;
			ck_assert_msg(rc == MORI_OK, "round %d entry %d: %s", round, i, mori_client_last_error(&C));
			gpu_model_apply(mv[i], nd[i], msrc, mdst);
		}
		CKR(g->memcpy_dtoh_async(P.got, op == MORI_XFER_WRITE ? P.B : P.A, P.size, NULL));
		CKR(g->stream_synchronize(NULL));
		long long at = gpu_first_diff(P.got, mdst, P.size);
		ck_assert_msg(at < 0, "round %d (burst %d, op %d): first wrong byte at %lld", round, burst, op, at);
		if (round == 0)
			jobs0 = gpu_service_jobs(D);
		if (round % 2 == 0)
			usleep(30000); /* past the block's idle limit: the next job launches it again */
	}
	ck_assert_msg(jobs0 >= 1, "the first small batch did not go to the copy service");
	ck_assert_msg(gpu_service_jobs(D) > jobs0 + 4, "the service took %llu jobs after the first",
		      (unsigned long long)(gpu_service_jobs(D) - jobs0));
	pair_free(&P);
}
END_TEST

START_TEST(register_kinds)
{
	uint8_t buf[128];
	int fd;
	mori_mem m = {.c = &C};
	gpu_dptr A;
	CKR(g->mem_alloc(&A, 3u << 20));
	/* cudaMalloc memory: legacy handle of the allocation base, offset of the range */
	Mori__MemRegister r0 = MORI__MEM_REGISTER__INIT, r1 = MORI__MEM_REGISTER__INIT;
	ck_assert_int_eq(gpu_mem_register(&C, &m, (void *)(uintptr_t)A, 1u << 20, &r0, buf, sizeof(buf), &fd), MORI_OK);
	ck_assert_int_eq(r0.gpu_handle_type, GPU_HANDLE_LEGACY_IPC);
	ck_assert_int_eq(r0.fd_offset, 0);
	ck_assert_int_eq(fd, -1);
	ck_assert_int_eq(r0.gpu_ipc.len, 64);
	uint8_t h0[64];
	memcpy(h0, r0.gpu_ipc.data, 64);
	ck_assert_int_eq(gpu_mem_register(&C, &m, (void *)(uintptr_t)(A + 1000003), 1u << 20, &r1, buf, sizeof(buf), &fd),
			 MORI_OK);
	ck_assert_int_eq(r1.fd_offset, 1000003);
	ck_assert_int_eq(memcmp(h0, r1.gpu_ipc.data, 64), 0);
	ck_assert_int_eq(m.dptr, A + 1000003);
	/* past the end of the allocation */
	Mori__MemRegister r2 = MORI__MEM_REGISTER__INIT;
	ck_assert_int_eq(gpu_mem_register(&C, &m, (void *)(uintptr_t)(A + (2u << 20)), 2u << 20, &r2, buf, sizeof(buf), &fd),
			 MORI_ERANGE);
	/* host memory, pinned host memory, freed memory */
	char *plain = malloc(4096);
	ck_assert_int_eq(gpu_mem_register(&C, &m, plain, 4096, &r2, buf, sizeof(buf), &fd), MORI_EINVAL);
	ck_assert_msg(strstr(mori_client_last_error(&C), "not GPU memory"), "%s", mori_client_last_error(&C));
	ck_assert_int_eq(gpu_ptr_is_device(plain), 0);
	ck_assert_int_eq(gpu_ptr_is_device((void *)(uintptr_t)A), 1);
	free(plain);
	void *pinned;
	CKR(g->mem_host_alloc(&pinned, 4096, 0));
	ck_assert_int_eq(gpu_mem_register(&C, &m, pinned, 4096, &r2, buf, sizeof(buf), &fd), MORI_EINVAL);
	ck_assert_msg(strstr(mori_client_last_error(&C), "host memory"), "%s", mori_client_last_error(&C));
	g->mem_free_host(pinned);
	g->mem_free(A);
	ck_assert_int_eq(gpu_mem_register(&C, &m, (void *)(uintptr_t)A, 4096, &r2, buf, sizeof(buf), &fd), MORI_EINVAL);
}
END_TEST

static int vmm_alloc(size_t size, int handle_types, gpu_dptr *va, gpu_memhandle *h)
{
	struct gpu_mem_prop prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = GPU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requested_handle_types = handle_types;
	prop.location.type = GPU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	int rc;
	if ((rc = g->mem_create(h, size, &prop, 0)) || (rc = g->mem_address_reserve(va, size, 0, 0, 0)) ||
	    (rc = g->mem_map(*va, size, 0, *h, 0)))
		return rc;
	struct gpu_access_desc a = {{GPU_MEM_LOCATION_TYPE_DEVICE, 0}, GPU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	return g->mem_set_access(*va, size, &a, 1);
}

static void vmm_free(size_t size, gpu_dptr va, gpu_memhandle h)
{
	g->mem_unmap(va, size);
	g->mem_address_free(va, size);
	g->mem_release(h);
}

START_TEST(register_vmm)
{
	const size_t size = 4u << 20;
	gpu_dptr va, vb;
	gpu_memhandle ha, hb;
	CKR(vmm_alloc(size, GPU_MEM_HANDLE_TYPE_POSIX_FD, &va, &ha));
	uint8_t buf[128];
	int fd = -1;
	mori_mem m = {.c = &C};
	Mori__MemRegister r = MORI__MEM_REGISTER__INIT;
	ck_assert_int_eq(gpu_mem_register(&C, &m, (void *)(uintptr_t)(va + 12345), 1u << 20, &r, buf, sizeof(buf), &fd),
			 MORI_OK);
	ck_assert_int_eq(r.gpu_handle_type, GPU_HANDLE_POSIX_FD);
	ck_assert_int_eq(r.fd_offset, 12345);
	ck_assert_int_ge(fd, 0);
	struct gpu_vmm_blob b;
	memcpy(&b, r.gpu_ipc.data, sizeof(b));
	ck_assert_int_eq(b.alloc_size, size);
	ck_assert_int_eq(b.owner_base, va);
	/* the fd imports: the same allocation, mapped a second time here */
	gpu_memhandle h2;
	CKR(g->mem_import_from_shareable_handle(&h2, (void *)(uintptr_t)fd, GPU_MEM_HANDLE_TYPE_POSIX_FD));
	g->mem_release(h2);
	close(fd);
	/* a range running past the allocation into unmapped addresses: refused, naming the hole
	 * (a range over several allocations mapped back to back registers: test_gpu_vmm_span) */
	ck_assert_int_eq(gpu_mem_register(&C, &m, (void *)(uintptr_t)(va + size - 10), 100, &r, buf, sizeof(buf), &fd),
			 MORI_EINVAL);
	ck_assert_msg(strstr(mori_client_last_error(&C), "hole"), "%s", mori_client_last_error(&C));
	/* VMM memory created without POSIX fd handles cannot be shared */
	CKR(vmm_alloc(size, GPU_MEM_HANDLE_TYPE_NONE, &vb, &hb));
	ck_assert_int_eq(gpu_mem_register(&C, &m, (void *)(uintptr_t)vb, 4096, &r, buf, sizeof(buf), &fd), MORI_ENOTSUP);
	ck_assert_msg(strstr(mori_client_last_error(&C), "POSIX fd"), "%s", mori_client_last_error(&C));
	vmm_free(size, va, ha);
	vmm_free(size, vb, hb);
}
END_TEST

START_TEST(bad_transfers)
{
	gpu_dptr A;
	CKR(g->mem_alloc(&A, 1u << 20));
	mori_mem L = {.c = &C, .local = 1, .kind = MORI_MEM_VRAM, .size = 1u << 20, .dptr = A};
	mori_mem R = {.c = &C, .kind = MORI_MEM_VRAM, .size = 4096, .dptr = A + 8192};
	mori_desc d = {0, 4000, 97};
	ck_assert_int_eq(run_xfer(MORI_XFER_WRITE, &L, &R, &d, 1), MORI_ERANGE);
	d = (mori_desc){UINT64_MAX - 10, 0, 20};
	ck_assert_int_eq(run_xfer(MORI_XFER_WRITE, &L, &R, &d, 1), MORI_ERANGE);
	ck_assert_int_eq(run_xfer(MORI_XFER_WRITE, &L, &R, &d, 0), MORI_EINVAL);
	/* a host region with no mapping here (cross-memory attach) cannot be reached by the GPU */
	mori_mem H = {.c = &C, .kind = MORI_MEM_HOST, .size = 4096, .ptr = NULL};
	d = (mori_desc){0, 0, 64};
	ck_assert_int_eq(run_xfer(MORI_XFER_WRITE, &L, &H, &d, 1), MORI_ENOTSUP);
	g->mem_free(A);
}
END_TEST

int main(void)
{
	gpu_skip_unless_ready();
	Suite *s = suite_create("gpu_copy");
	TCase *t = tcase_create("gpu");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 300);
	tcase_add_test(t, describe_and_arch);
	tcase_add_test(t, register_kinds);
	tcase_add_test(t, register_vmm);
	tcase_add_test(t, bad_transfers);
	tcase_add_test(t, alignment_edges);
	tcase_add_test(t, random_batches_vram);
	tcase_add_test(t, random_batches_host);
	tcase_add_test(t, random_lists);
	tcase_add_test(t, copy_service);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
