/* MORI-SHMEM VRAM heaps from the host side, on a GPU: N forked processes on one GPU
 * act as N PEs ($MORI_SHMEM_PES, default 4), under MPS (the caller's, else its own). Each PE's
 * heap is its own VMM allocation that morid holds and brokers: every local peer's heap is mapped
 * at the same offsets (device addresses from ptr_p2p), host puts/gets through the mappings are
 * checked byte for byte, calloc zeroes every PE's VRAM, the device state (struct
 * mori_shmem_state in device memory) is read back and checked field by field against the host's
 * view, mori_shmem_module_init fills a module's mori_shmem_state_ptr (a PTX module declaring it,
 * JIT-compiled by the driver: no nvcc needed), barrier_on_stream orders every PE's flag (set on
 * the stream before it) before every PE's reads after it, the control page is read through its
 * device address, and a PE killed sets the abort word every peer sees, through the GPU's mapping
 * too.
 * Without a GPU it says "skipped: no GPU" and exits 77. */
#include <check.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include "gpu.h"
#include "gpu_harness.h"
#include "ctl_harness.h"
#include "pe_harness.h"
#include "mori_shmem.h"
#include "shmem_layout.h"

#define HEAP (64u << 20)
#define MAXPE 16
#define SLOT (1u << 20)

static struct test_daemon D;
static int NPES = 4;
static const char *mps_note = "MPS off";

struct shared { char msg[MAXPE][PE_MSG_LEN]; };
static struct shared *SH;

static void setup(void)
{
	pe_shared_map(SH);
	ck_assert_int_eq(daemon_start(&D, NULL), 0);
}

static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

/* This process's context on GPU 0, current (mori's own calls push and pop theirs); one of n
 * PEs' share of the GPU under MPS. */
static const struct gpu_api *gpu_ctx(int n)
{
	gpu_mps_share(n);
	const struct gpu_api *g = gpu_api();
	gpu_device dev;
	gpu_context ctx;
	if (!g || g->device_get(&dev, 0) || g->primary_ctx_retain(&ctx, dev) || g->ctx_push_current(ctx))
		return NULL;
	return g;
}

static uint8_t pattern(int from, int to, uint64_t off)
{
	uint64_t x = (off + 7) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)from << 44) ^ ((uint64_t)to << 24);
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return (uint8_t)(x >> 40);
}

static int join_vram(int pe, int n, const char *name, mori_client **c, mori_group **g)
{
	POK(pe, mori_client_open(D.dir, "vram-pe", c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_kind = MORI_MEM_VRAM;
	o.heap_size = HEAP;
	o.gpu_device = 0;
	o.timeout_us = 60000000;
	POK(pe, mori_shmem_init(*c, name, pe, n, &o, g));
	return 0;
}

/* A module that declares the device API's state pointer (what include/mori/device/shmem.cuh defines). */
static const char ptx[] = ".version 7.0\n.target sm_80\n.address_size 64\n"
			  ".visible .global .align 8 .u64 mori_shmem_state_ptr;\n";

static int pe_vram(int pe, int n, void *arg)
{
	const struct gpu_api *api = gpu_ctx(n);
	PCHECK(pe, api != NULL, "no GPU context: %s", gpu_unavailable_reason());
	mori_client *c;
	mori_group *g;
	if (join_vram(pe, n, "vram", &c, &g))
		return 1;
	uint64_t base = (uint64_t)(uintptr_t)mori_shmem_heap_base(g);
	unsigned type = 0;
	GOK(pe, api->pointer_get_attribute(&type, GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, base));
	PCHECK(pe, type == GPU_MEMORYTYPE_DEVICE, "the heap is not device memory (%u)", type);
	PCHECK(pe, mori_shmem_heap_size(g) == HEAP, "heap %llu", (unsigned long long)mori_shmem_heap_size(g));
	/* the reserved area is zero (the device API's barrier words) but for GPU_ID: this GPU's PCI bus id */
	static uint8_t z[MORI_SHMEM_RESERVED];
	char bus[MORI_SHMEM_GPU_ID_BYTES] = {0};
	gpu_device dev;
	GOK(pe, api->device_get(&dev, 0));
	if (api->device_get_pci_bus_id)
		GOK(pe, api->device_get_pci_bus_id(bus, MORI_SHMEM_GPU_ID_BYTES - 1, dev));
	GOK(pe, api->memcpy_dtoh_async(z, base, sizeof(z), NULL));
	GOK(pe, api->stream_synchronize(NULL));
	for (size_t i = 0; i < sizeof(z); i++) {
		size_t k = i - MORI_SHMEM_OFF_GPU_ID;
		uint8_t want = k < MORI_SHMEM_GPU_ID_BYTES ? (uint8_t)bus[k] : 0;
		PCHECK(pe, z[i] == want, "reserved byte %zu is %u, not %u", i, z[i], want);
	}
	uint8_t *buf;
	POK(pe, mori_shmem_calloc(g, (size_t)n * SLOT, 4096, (void **)&buf));
	uint64_t boff = (uint64_t)mori_shmem_offset(g, buf);
	/* to every PE (oneself too), slot [pe]: host memory through the peer's mapping */
	uint8_t *h = malloc(SLOT), *back = malloc(SLOT);
	for (int to = 0; to < n; to++) {
		for (uint64_t k = 0; k < SLOT; k++)
			h[k] = pattern(pe, to, boff + (uint64_t)pe * SLOT + k);
		POK(pe, mori_shmem_putmem(g, buf + (uint64_t)pe * SLOT, h, SLOT, to));
	}
	POK(pe, mori_shmem_barrier_all(g));
	/* what landed in our VRAM, read by the driver directly */
	for (int from = 0; from < n; from++) {
		GOK(pe, api->memcpy_dtoh_async(back, (gpu_dptr)(uintptr_t)(buf + (uint64_t)from * SLOT), SLOT, NULL));
		GOK(pe, api->stream_synchronize(NULL));
		for (uint64_t k = 0; k < SLOT; k++)
			PCHECK(pe, back[k] == pattern(from, pe, boff + (uint64_t)from * SLOT + k), "slot %d byte %llu", from,
			       (unsigned long long)k);
	}
	/* every peer's VRAM through getmem, and through the ptr_p2p device address */
	for (int q = 0; q < n; q++) {
		int from = (q + 1) % n;
		POK(pe, mori_shmem_getmem(g, back, buf + (uint64_t)from * SLOT, SLOT, q));
		for (uint64_t k = 0; k < SLOT; k += 1)
			PCHECK(pe, back[k] == pattern(from, q, boff + (uint64_t)from * SLOT + k), "get PE %d byte %llu", q,
			       (unsigned long long)k);
		uint64_t p = (uint64_t)(uintptr_t)mori_shmem_ptr_p2p(g, buf + (uint64_t)from * SLOT, q);
		PCHECK(pe, p != 0, "ptr_p2p(PE %d) is NULL on one node", q);
		memset(back, 0, 4096);
		GOK(pe, api->memcpy_dtoh_async(back, p, 4096, NULL));
		GOK(pe, api->stream_synchronize(NULL));
		for (uint64_t k = 0; k < 4096; k++)
			PCHECK(pe, back[k] == pattern(from, q, boff + (uint64_t)from * SLOT + k), "p2p PE %d byte %llu", q,
			       (unsigned long long)k);
	}
	/* the device state, field by field */
	struct mori_shmem_state st;
	uint64_t sd = (uint64_t)(uintptr_t)mori_shmem_state(g);
	PCHECK(pe, sd != 0, "no device state");
	GOK(pe, api->memcpy_dtoh_async(&st, sd, sizeof(st), NULL));
	GOK(pe, api->stream_synchronize(NULL));
	PCHECK(pe, st.magic == MORI_SHMEM_MAGIC && st.my_pe == pe && st.n_pes == n && st.node_pes == n &&
		       st.heap_size == HEAP && st.heap_base == base,
	       "state header");
	uint64_t pb[MAXPE];
	int32_t team[MAXPE];
	GOK(pe, api->memcpy_dtoh_async(pb, (gpu_dptr)(uintptr_t)st.peer_base, sizeof(uint64_t) * (size_t)n, NULL));
	GOK(pe, api->memcpy_dtoh_async(team, (gpu_dptr)(uintptr_t)st.node_team, sizeof(int32_t) * (size_t)n, NULL));
	GOK(pe, api->stream_synchronize(NULL));
	for (int q = 0; q < n; q++) {
		PCHECK(pe, pb[q] == (uint64_t)(uintptr_t)mori_shmem_ptr_p2p(g, (void *)(uintptr_t)base, q), "peer_base[%d]", q);
		PCHECK(pe, team[q] == q, "node_team[%d] = %d", q, team[q]);
	}
	struct mori_shmem_ctrl k;
	GOK(pe, api->memcpy_dtoh_async(&k, (gpu_dptr)(uintptr_t)st.ctrl, sizeof(k), NULL));
	GOK(pe, api->stream_synchronize(NULL));
	PCHECK(pe, k.magic == MORI_SHMEM_MAGIC && k.abort == 0 && k.ring_entries >= 64 &&
		       (uint64_t)(uintptr_t)st.ring == (uint64_t)(uintptr_t)st.ctrl + MORI_SHMEM_CTRL_BYTES,
	       "control page through its device address");
	/* module init: the module's global points at our state */
	gpu_module mod;
	GOK(pe, api->module_load_data(&mod, ptx));
	POK(pe, mori_shmem_module_init(g, mod));
	gpu_dptr gp;
	size_t gb;
	uint64_t val = 0;
	PCHECK(pe, api->module_get_global != NULL, "no cuModuleGetGlobal");
	GOK(pe, api->module_get_global(&gp, &gb, mod, "mori_shmem_state_ptr"));
	GOK(pe, api->memcpy_dtoh_async(&val, gp, sizeof(val), NULL));
	GOK(pe, api->stream_synchronize(NULL));
	PCHECK(pe, val == sd, "mori_shmem_state_ptr = %#llx, state at %#llx", (unsigned long long)val, (unsigned long long)sd);
	api->module_unload(mod);
	/* the device API's barrier on a stream: a PE's flag set before it is seen by every PE after
	 * it, all in stream order with no host barrier in between */
	uint8_t *flags;
	POK(pe, mori_shmem_calloc(g, 64, 0, (void **)&flags));
	for (int round = 1; round <= 100; round++) {
		GOK(pe, api->memset_d8_async((gpu_dptr)(uintptr_t)(flags + pe), (unsigned char)round, 1, NULL));
		POK(pe, mori_shmem_barrier_on_stream(g, NULL));
		uint8_t seen[MAXPE];
		for (int q = 0; q < n; q++)
			GOK(pe, api->memcpy_dtoh_async(&seen[q], (gpu_dptr)(uintptr_t)mori_shmem_ptr_p2p(g, flags + q, q), 1, NULL));
		GOK(pe, api->stream_synchronize(NULL));
		for (int q = 0; q < n; q++)
			PCHECK(pe, seen[q] == round || seen[q] == round + 1, "round %d: PE %d's flag is %u", round, q, seen[q]);
	}
	POK(pe, mori_shmem_quiet_on_stream(g, NULL));
	GOK(pe, api->stream_synchronize(NULL));
	POK(pe, mori_shmem_status(g, NULL));
	int rc;
	/* faults: outside the heap */
	rc = mori_shmem_putmem(g, (void *)(uintptr_t)(base + HEAP - 4), h, 8, (pe + 1) % n);
	PCHECK(pe, rc == MORI_ERANGE, "put past the end: %d", rc);
	PCHECK(pe, mori_shmem_ptr_p2p(g, h, pe) == NULL, "ptr_p2p of host memory");
	POK(pe, mori_shmem_barrier_all(g));
	POK(pe, mori_shmem_free(g, buf));
	free(h);
	free(back);
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(vram_heaps)
{
	pe_run_all(NPES, pe_vram, NULL, 120, 0);
}
END_TEST

static int pe_vram_killed(int pe, int n, void *arg)
{
	const struct gpu_api *api = gpu_ctx(n);
	PCHECK(pe, api != NULL, "no GPU context");
	mori_client *c;
	mori_group *g;
	if (join_vram(pe, n, "vram-kill", &c, &g))
		return 1;
	POK(pe, mori_shmem_barrier_all(g));
	if (pe == n - 1) {
		PCHECK(pe, ctl_wait_group_ranks(D.dir, "vram-kill", "in call", n - 1, 20000),
		       "the other PEs never waited in the barrier");
		raise(SIGKILL);
	}
	int rc = mori_shmem_barrier_all(g);
	PCHECK(pe, rc == MORI_EPEERDEAD, "barrier: %d", rc);
	mori_status sst;
	PCHECK(pe, mori_shmem_status(g, &sst) == MORI_EPEERDEAD && sst.pe == n - 1, "status names %d", sst.pe);
	/* the abort word as a kernel sees it: through the control page's device address */
	struct mori_shmem_state st;
	struct mori_shmem_ctrl k;
	GOK(pe, api->memcpy_dtoh_async(&st, (gpu_dptr)(uintptr_t)mori_shmem_state(g), sizeof(st), NULL));
	GOK(pe, api->stream_synchronize(NULL));
	GOK(pe, api->memcpy_dtoh_async(&k, (gpu_dptr)(uintptr_t)st.ctrl, sizeof(k), NULL));
	GOK(pe, api->stream_synchronize(NULL));
	PCHECK(pe, k.abort == MORI_SHMEM_ABORT_PEER_DEAD && k.abort_pe == n - 1, "abort %u pe %d", k.abort, k.abort_pe);
	/* the dead PE's heap is still mapped here (morid holds its fd): reading it is safe */
	uint8_t b[64];
	uint64_t p = (uint64_t)(uintptr_t)mori_shmem_ptr_p2p(g, mori_shmem_heap_base(g), n - 1);
	GOK(pe, api->memcpy_dtoh_async(b, p, sizeof(b), NULL));
	GOK(pe, api->stream_synchronize(NULL));
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(vram_pe_killed)
{
	pe_run_all(NPES < 2 ? 2 : NPES, pe_vram_killed, NULL, 120, 1);
}
END_TEST

int main(void)
{
	const char *e = getenv("MORI_SHMEM_PES");
	if (e && atoi(e) > 0)
		NPES = atoi(e) > MAXPE ? MAXPE : atoi(e);
	gpu_skip_unless(0); /* in a child: a CUDA context does not survive fork */
	mps_note = gpu_mps_start();
	Suite *s = suite_create("gpu-heap");
	TCase *t = tcase_create("vram");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 300);
	tcase_add_test(t, vram_heaps);
	tcase_add_test(t, vram_pe_killed);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	fprintf(stderr, "# %d PEs on one GPU, %s\n", NPES, mps_note);
	return failed ? 1 : 0;
}
