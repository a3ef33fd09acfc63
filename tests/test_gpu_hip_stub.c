/* The HIP side of the GPU runtime table (common/gpu.c) below the hardware line: libmori's code
 * loads tests/hip_stub.c's libamdhip64.so (built beside this test, found through
 * LD_LIBRARY_PATH: main re-executes itself with it set, and MORI_GPU=hip) and drives every HIP
 * entry of the table through it: the load itself, memory and copies, IPC handles, VMM
 * allocations shared by fd (gpu_import, gpu_vmm_*), streams and events, the module loader on
 * libmori's embedded AMD code objects, the topology queries. The stub checks each call's
 * arguments as the runtime would, so a misspelt symbol (the table would not load, or an optional
 * entry stays NULL) or arguments in the wrong order fail here. The last test runs them all in one
 * process, prints the HIP entries the stub saw, and compares them with the table. */
#include <check.h>
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu.h"
#include "mori.h"
#include "../kernels/mori_copy.h"

extern const unsigned char mori_kernels_hip_image[];
extern const size_t mori_kernels_hip_image_len;
extern const char mori_kernels_hip_archs[];

static const struct gpu_api *load(void)
{
	const struct gpu_api *g = gpu_api();
	ck_assert_msg(g, "the stub runtime did not load: %s", gpu_unavailable_reason());
	return g;
}

static void run_device(void)
{
	const struct gpu_api *g = load();
	ck_assert_int_eq(g->backend, GPU_BACKEND_HIP);
	ck_assert_str_eq(g->library, "libamdhip64.so");
	ck_assert_int_eq(g->device_count, 2);
	ck_assert_int_eq(g->driver_version, getenv("HIP_STUB_VERSION") ? atoi(getenv("HIP_STUB_VERSION")) : 60443483);
	ck_assert_ptr_null(g->device_get_attribute); /* CUDA-only: HIP's attribute enum differs */
	gpu_device d;
	char name[64], bus[32];
	ck_assert_int_eq(g->device_get(&d, 1), 0);
	ck_assert_int_eq(g->device_get_name(name, sizeof(name), d), 0);
	ck_assert_str_eq(name, "AMD Instinct MI300X (stub 1)");
	ck_assert_int_eq(g->device_get(&d, 2), GPU_ERROR_NO_DEVICE);
	gpu_context c, popped;
	ck_assert_int_eq(g->primary_ctx_retain(&c, 1), 0);
	ck_assert_int_eq(g->ctx_push_current(c), 0);
	ck_assert_int_eq(g->ctx_pop_current(&popped), 0);
	ck_assert_ptr_eq(c, popped);
	ck_assert_int_eq(g->primary_ctx_release(1), 0);
	ck_assert_int_eq(g->device_get_pci_bus_id(bus, sizeof(bus), 1), 0);
	ck_assert_str_eq(bus, "0000:1c:00.0");
	size_t mem = 0;
	ck_assert_int_eq(g->device_total_mem(&mem, 0), 0);
	ck_assert_uint_eq(mem, (size_t)192 << 30);
	int can = -1;
	ck_assert_int_eq(g->device_can_access_peer(&can, 0, 1), 0);
	ck_assert_int_eq(can, 1);
	unsigned type = 0, hops = 0;
	ck_assert_int_eq(g->ext_get_link_type_and_hop_count(0, 1, &type, &hops), 0);
	ck_assert_uint_eq(type, 4);
	ck_assert_uint_eq(hops, 1);
	ck_assert_ptr_nonnull(strstr(gpu_strerror(GPU_ERROR_NO_BINARY_FOR_GPU), "hipErrorNoBinaryForGpu"));
	char desc[160];
	gpu_describe(desc, sizeof(desc));
	ck_assert_msg(strstr(desc, "2 x AMD Instinct MI300X") && strstr(desc, "HIP"), "%s", desc);
}

static void run_memory(void)
{
	const struct gpu_api *g = load();
	gpu_dptr a = 0, b = 0;
	unsigned char src[4096], back[4096];
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (unsigned char)(i * 7 + 1);
	ck_assert_int_eq(g->mem_alloc(&a, sizeof(src)), 0);
	ck_assert_int_eq(g->mem_alloc(&b, sizeof(src)), 0);
	ck_assert_int_eq(g->memcpy_htod_async(a, src, sizeof(src), NULL), 0);
	ck_assert_int_eq(g->memcpy_dtod_async(b, a, sizeof(src), NULL), 0);
	ck_assert_int_eq(g->memset_d8_async(b, 0xab, 16, NULL), 0);
	ck_assert_int_eq(g->memcpy_dtoh_async(back, b, sizeof(back), NULL), 0);
	ck_assert_int_eq(back[15], 0xab);
	ck_assert_int_eq(memcmp(back + 16, src + 16, sizeof(src) - 16), 0);
	unsigned mt = 0;
	int ord = -1;
	ck_assert_int_eq(g->pointer_get_attribute(&mt, GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 100), 0);
	ck_assert_uint_eq(mt, GPU_MEMORYTYPE_DEVICE);
	int attrs[2] = {GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, GPU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
	void *data[2] = {&mt, &ord};
	ck_assert_int_eq(g->pointer_get_attributes(2, attrs, data, a), 0);
	ck_assert_int_eq(ord, 0);
	gpu_dptr base = 0;
	size_t sz = 0;
	ck_assert_int_eq(g->mem_get_address_range(&base, &sz, a + 5), 0);
	ck_assert(base == a && sz == sizeof(src));
	void *h = NULL;
	ck_assert_int_eq(g->mem_host_alloc(&h, 8192, 0), 0);
	ck_assert_int_eq(g->pointer_get_attribute(&mt, GPU_POINTER_ATTRIBUTE_MEMORY_TYPE, (gpu_dptr)(uintptr_t)h), 0);
	ck_assert_uint_eq(mt, GPU_MEMORYTYPE_HOST);
	ck_assert_int_eq(g->mem_free_host(h), 0);
	static char reg[8192];
	gpu_dptr dv = 0;
	ck_assert_int_eq(g->mem_host_register(reg, sizeof(reg), 0), 0);
	ck_assert_int_eq(g->mem_host_get_device_pointer(&dv, reg, 0), 0);
	ck_assert_int_eq(g->memcpy_dtod_async(dv, a, 64, NULL), 0);
	ck_assert_int_eq(memcmp(reg, src, 64), 0);
	ck_assert_int_eq(g->mem_host_unregister(reg), 0);
	/* IPC: a handle of a's allocation opened through gpu_import, the bytes seen there */
	struct gpu_ipc_handle ih;
	ck_assert_int_eq(g->ipc_get_mem_handle(&ih, a), 0);
	char msg[160];
	ck_assert_int_eq(gpu_import(g, 0, GPU_HANDLE_LEGACY_IPC, &ih, sizeof(ih), -1, &base, &sz, msg, sizeof(msg)), 0);
	ck_assert(base == a && sz == sizeof(src));
	gpu_unimport(g, GPU_HANDLE_LEGACY_IPC, base, sz);
	ck_assert_int_eq(g->ipc_close_mem_handle(a), GPU_ERROR_INVALID_VALUE); /* closed once already */
	ck_assert_int_eq(g->mem_free(a), 0);
	ck_assert_int_eq(g->mem_free(b), 0);
}

/* A shareable VMM allocation of n bytes, exported as an fd, mapped here by its owner. */
static int vmm_export(const struct gpu_api *g, size_t n, gpu_memhandle *h, gpu_dptr *va)
{
	struct gpu_mem_prop prop;
	gpu_vmm_prop(&prop, 0);
	size_t gran = 0;
	ck_assert_int_eq(g->mem_get_allocation_granularity(&gran, &prop, GPU_MEM_ALLOC_GRANULARITY_MINIMUM), 0);
	ck_assert_uint_eq(n % gran, 0);
	ck_assert_int_eq(g->mem_create(h, n, &prop, 0), 0);
	ck_assert_int_eq(g->mem_address_reserve(va, n, gran, 0, 0), 0);
	ck_assert_int_eq(g->mem_map(*va, n, 0, *h, 0), 0);
	struct gpu_access_desc acc = {{GPU_MEM_LOCATION_TYPE_DEVICE, 0}, GPU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	ck_assert_int_eq(g->mem_set_access(*va, n, &acc, 1), 0);
	int fd = -1;
	ck_assert_int_eq(g->mem_export_to_shareable_handle(&fd, *h, GPU_MEM_HANDLE_TYPE_POSIX_FD, 0), 0);
	ck_assert_int_ge(fd, 0);
	return fd;
}

static void run_vmm(void)
{
	const struct gpu_api *g = load();
	const size_t n = 4u << 20;
	gpu_memhandle h, r;
	gpu_dptr va;
	int fd = vmm_export(g, n, &h, &va);
	ck_assert_int_eq(g->mem_retain_allocation_handle(&r, (void *)(uintptr_t)(va + 4096)), 0);
	ck_assert_int_eq(g->mem_release(r), 0);
	/* the importer's mapping is the same memory: what the owner writes it reads */
	struct gpu_vmm_blob blob = {GPU_VMM_MAGIC, 1, n, va};
	gpu_dptr base = 0;
	size_t sz = 0;
	char msg[160];
	ck_assert_msg(gpu_import(g, 0, GPU_HANDLE_POSIX_FD, &blob, sizeof(blob), fd, &base, &sz, msg, sizeof(msg)) == 0,
		      "gpu_import: %s", msg);
	ck_assert(base != va && sz == n);
	((volatile unsigned *)(uintptr_t)va)[1000] = 0x5eed;
	ck_assert_uint_eq(((volatile unsigned *)(uintptr_t)base)[1000], 0x5eed);
	gpu_unimport(g, GPU_HANDLE_POSIX_FD, base, sz);
	/* a span of two allocations mapped back to back */
	gpu_memhandle h2;
	gpu_dptr va2;
	int fd2 = vmm_export(g, 2u << 20, &h2, &va2);
	((volatile unsigned *)(uintptr_t)va2)[7] = 0xfeed;
	struct gpu_vmm_range s;
	ck_assert_msg(gpu_vmm_reserve(g, 0, n + (2u << 20), 2, &s, msg, sizeof(msg)) == 0, "%s", msg);
	ck_assert_msg(gpu_vmm_map(g, &s, 0, n, fd, msg, sizeof(msg)) == 0, "%s", msg);
	ck_assert_msg(gpu_vmm_map(g, &s, n, 2u << 20, fd2, msg, sizeof(msg)) == 0, "%s", msg);
	ck_assert(gpu_vmm_complete(&s));
	ck_assert_uint_eq(((volatile unsigned *)(uintptr_t)(s.base + n))[7], 0xfeed);
	ck_assert_uint_eq(((volatile unsigned *)(uintptr_t)s.base)[1000], 0x5eed);
	gpu_vmm_free(g, &s);
	close(fd);
	close(fd2);
	ck_assert_int_eq(g->mem_unmap(va, n), 0);
	ck_assert_int_eq(g->mem_address_free(va, n), 0);
	ck_assert_int_eq(g->mem_release(h), 0);
	ck_assert_int_eq(g->mem_unmap(va2, 2u << 20), 0);
	ck_assert_int_eq(g->mem_address_free(va2, 2u << 20), 0);
	ck_assert_int_eq(g->mem_release(h2), 0);
}

static void run_streams(void)
{
	const struct gpu_api *g = load();
	gpu_stream s;
	gpu_event a, b, nt;
	ck_assert_int_eq(g->stream_create(&s, GPU_STREAM_NON_BLOCKING), 0);
	ck_assert_int_eq(g->event_create(&a, 0), 0);
	ck_assert_int_eq(g->event_create(&b, 0), 0);
	ck_assert_int_eq(g->event_create(&nt, GPU_EVENT_DISABLE_TIMING), 0);
	ck_assert_int_eq(g->event_record(a, s), 0);
	ck_assert_int_eq(g->event_record(b, s), 0);
	ck_assert_int_eq(g->event_record(nt, s), 0);
	ck_assert_int_eq(g->stream_wait_event(s, nt, 0), 0);
	ck_assert_int_eq(g->event_query(b), 0);
	ck_assert_int_eq(g->event_synchronize(b), 0);
	float ms = -1;
	ck_assert_int_eq(g->event_elapsed_time(&ms, a, b), 0);
	ck_assert(ms >= 0);
	ck_assert_int_ne(g->event_elapsed_time(&ms, a, nt), 0); /* timing disabled */
	ck_assert_int_eq(g->stream_query(s), 0);
	ck_assert_int_eq(g->stream_synchronize(s), 0);
	ck_assert_int_eq(g->event_destroy(a), 0);
	ck_assert_int_eq(g->event_destroy(b), 0);
	ck_assert_int_eq(g->event_destroy(nt), 0);
	ck_assert_int_eq(g->stream_destroy(s), 0);
}

/* libmori's embedded AMD image: the stub (a gfx942 device) picks its code object and finds the
 * copy kernel; a gfx950 device finds none. Without AMD kernels built here, the loader is still
 * called and answers "no binary", as a runtime does for an empty image. */
static void run_module(void)
{
	const struct gpu_api *g = load();
	gpu_module m;
	gpu_function f;
	if (!mori_kernels_hip_image_len) {
		fprintf(stderr, "# module: no AMD kernels embedded (no hipcc or clang-19 at build time)\n");
		ck_assert_int_eq(g->module_load_data(&m, "not a code object"), GPU_ERROR_NO_BINARY_FOR_GPU);
		ck_assert_int_ne(g->module_get_function(&f, NULL, MORI_COPY_KERNEL), 0);
		ck_assert_int_ne(g->module_get_global(NULL, NULL, NULL, "x"), 0);
		ck_assert_int_ne(g->launch_kernel(NULL, 1, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL), 0);
		ck_assert_int_ne(g->module_unload(NULL), 0);
		return;
	}
	const char *arch = getenv("HIP_STUB_ARCH") ? getenv("HIP_STUB_ARCH") : "gfx942";
	if (!strstr(mori_kernels_hip_archs, arch)) {
		ck_assert_int_eq(g->module_load_data(&m, mori_kernels_hip_image), GPU_ERROR_NO_BINARY_FOR_GPU);
		return;
	}
	ck_assert_int_eq(g->module_load_data(&m, mori_kernels_hip_image), 0);
	ck_assert_int_eq(g->module_get_function(&f, m, MORI_COPY_KERNEL), 0);
	ck_assert_int_eq(g->module_get_function(&f, m, "mori_no_such_kernel"), GPU_ERROR_NOT_FOUND);
	ck_assert_int_eq(g->module_get_function(&f, m, MORI_COPY_SERVICE_KERNEL), 0);
	gpu_dptr gp = 0;
	size_t gsz = 0;
	ck_assert_int_eq(g->module_get_global(&gp, &gsz, m, "mori_no_such_global"), GPU_ERROR_NOT_FOUND);
	int arg = 0;
	void *params[] = {&arg};
	ck_assert_int_eq(g->launch_kernel(f, 3, 1, 1, 256, 1, 1, 128, NULL, params, NULL), 0);
	void *h = dlopen("libamdhip64.so", RTLD_NOW | RTLD_NOLOAD);
	ck_assert_ptr_nonnull(h);
	const unsigned *dims = dlsym(h, "hip_stub_last_dims");
	ck_assert_str_eq((const char *)dlsym(h, "hip_stub_last_kernel"), MORI_COPY_SERVICE_KERNEL);
	ck_assert(dims[0] == 3 && dims[1] == 1 && dims[2] == 1 && dims[3] == 256 && dims[4] == 1 && dims[5] == 1 &&
		  dims[6] == 128);
	ck_assert_int_eq(g->module_unload(m), 0);
}

START_TEST(test_device) { run_device(); }
END_TEST
START_TEST(test_memory_ipc) { run_memory(); }
END_TEST
START_TEST(test_vmm_fd_pointer)
{
	/* ROCm before 7.1: hipMemImportFromShareableHandle reads the fd through a pointer */
	setenv("HIP_STUB_VERSION", "60443483", 1);
	run_vmm();
}
END_TEST
START_TEST(test_vmm_fd_value)
{
	/* ROCm 7.1 on: the fd's value, as CUDA takes it */
	setenv("HIP_STUB_VERSION", "70100000", 1);
	run_vmm();
}
END_TEST
START_TEST(test_streams_events) { run_streams(); }
END_TEST
START_TEST(test_module) { run_module(); }
END_TEST
START_TEST(test_module_other_arch)
{
	setenv("HIP_STUB_ARCH", "gfx950", 1);
	gpu_module m;
	ck_assert_int_eq(load()->module_load_data(&m, mori_kernels_hip_image_len ? (const void *)mori_kernels_hip_image
										   : "none"),
			 GPU_ERROR_NO_BINARY_FOR_GPU);
}
END_TEST

/* Table entries (HIP names) whose pointer stayed NULL: the stub exports every HIP name, so a
 * misspelt one shows here (a required one fails the load before). */
static void unresolved(const struct gpu_api *g, char *out, size_t len, int *entries)
{
	const char *name;
	size_t off;
	out[0] = 0;
	*entries = 0;
	for (size_t i = 0; (name = gpu_api_entry(GPU_BACKEND_HIP, i, &off, NULL)); i++) {
		if (!*name)
			continue; /* CUDA-only */
		++*entries;
		void *p;
		memcpy(&p, (const char *)g + off, sizeof(p));
		if (!p)
			snprintf(out + strlen(out), len - strlen(out), " %s", name);
	}
}

START_TEST(test_table_resolves)
{
	static char bad[2048];
	int entries;
	unresolved(load(), bad, sizeof(bad), &entries);
	ck_assert_msg(!bad[0], "table entries the stub libamdhip64 does not export:%s", bad);
	ck_assert_int_gt(entries, 50);
}
END_TEST

/* Everything in one process, then: every HIP entry of the table called. */
START_TEST(test_every_entry)
{
	static char seen[8192], missing[2048], bad[2048];
	int entries;
	unresolved(load(), bad, sizeof(bad), &entries);
	ck_assert_msg(!bad[0], "table entries the stub libamdhip64 does not export:%s", bad);
	run_device();
	run_memory();
	run_vmm();
	run_streams();
	run_module();
	void *h = dlopen("libamdhip64.so", RTLD_NOW | RTLD_NOLOAD);
	int (*calls)(char *, size_t) = (int (*)(char *, size_t))dlsym(h, "hip_stub_calls");
	ck_assert_ptr_nonnull(calls);
	int n = calls(seen, sizeof(seen));
	fprintf(stderr, "# HIP entries exercised (%d): %s\n", n, seen);
	fprintf(stderr, "# the table's HIP entries: %d\n", entries);
	missing[0] = 0;
	const char *name;
	for (size_t i = 0; (name = gpu_api_entry(GPU_BACKEND_HIP, i, NULL, NULL)); i++) {
		char pat[80], hay[sizeof(seen) + 2];
		snprintf(pat, sizeof(pat), " %s ", name);
		snprintf(hay, sizeof(hay), " %s ", seen);
		if (*name && !strstr(hay, pat))
			snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %s", name);
	}
	ck_assert_msg(!missing[0], "table entries no test called:%s", missing);
	ck_assert_int_eq(n, entries);
}
END_TEST

int main(int argc, char **argv)
{
	(void)argc;
	if (!getenv("MORI_HIP_STUB_DIR")) {
		/* the stub must be what dlopen("libamdhip64.so") finds: set before the process starts */
		char exe[PATH_MAX], dir[PATH_MAX + 16];
		ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (k <= 0)
			return 99;
		exe[k] = 0;
		snprintf(dir, sizeof(dir), "%s/hipstub", dirname(exe));
		const char *old = getenv("LD_LIBRARY_PATH");
		char path[2 * PATH_MAX];
		snprintf(path, sizeof(path), "%s%s%s", dir, old && *old ? ":" : "", old ? old : "");
		setenv("LD_LIBRARY_PATH", path, 1);
		setenv("MORI_HIP_STUB_DIR", dir, 1);
		setenv("MORI_GPU", "hip", 1);
		execv("/proc/self/exe", argv);
		perror("execv");
		return 99;
	}
	Suite *s = suite_create("gpu_hip_stub");
	TCase *t = tcase_create("hip");
	tcase_add_test(t, test_table_resolves);
	tcase_add_test(t, test_device);
	tcase_add_test(t, test_memory_ipc);
	tcase_add_test(t, test_vmm_fd_pointer);
	tcase_add_test(t, test_vmm_fd_value);
	tcase_add_test(t, test_streams_events);
	tcase_add_test(t, test_module);
	tcase_add_test(t, test_module_other_arch);
	tcase_add_test(t, test_every_entry);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_set_fork_status(r, CK_FORK); /* each test loads the runtime afresh (env set per test) */
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
