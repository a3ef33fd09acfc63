/* The GPU runtime table: dlopen of the vendor driver library and dlsym of each entry point
 * into struct gpu_api. See gpu.h. */
#include "gpu.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mori.h"

/* One entry point: where it goes in the table and its exported names. Versioned CUDA names
 * come first (cuda.h maps cuMemAlloc to cuMemAlloc_v2 and so on); "|" separates fallbacks
 * for older drivers. A NULL hip name means the entry is CUDA-only. */
struct sym {
	size_t off;
	const char *cuda;
	const char *hip;
	int optional;
};
#define S(field, cu, hip) {offsetof(struct gpu_api, field), cu, hip, 0}
#define OPT(field, cu, hip) {offsetof(struct gpu_api, field), cu, hip, 1}

static const struct sym syms[] = {
	S(init, "cuInit", "hipInit"),
	S(driver_get_version, "cuDriverGetVersion", "hipDriverGetVersion"),
	S(device_get, "cuDeviceGet", "hipDeviceGet"),
	S(device_get_count, "cuDeviceGetCount", "hipGetDeviceCount"),
	S(device_get_name, "cuDeviceGetName", "hipDeviceGetName"),
	OPT(device_get_attribute, "cuDeviceGetAttribute", NULL),
	S(primary_ctx_retain, "cuDevicePrimaryCtxRetain", "hipDevicePrimaryCtxRetain"),
	S(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2|cuDevicePrimaryCtxRelease",
	  "hipDevicePrimaryCtxRelease"),
	S(ctx_push_current, "cuCtxPushCurrent_v2", "hipCtxPushCurrent"),
	S(ctx_pop_current, "cuCtxPopCurrent_v2", "hipCtxPopCurrent"),
	S(mem_alloc, "cuMemAlloc_v2", "hipMalloc"),
	S(mem_free, "cuMemFree_v2", "hipFree"),
	S(mem_host_alloc, "cuMemHostAlloc", "hipHostMalloc"),
	S(mem_free_host, "cuMemFreeHost", "hipHostFree"),
	S(mem_host_register, "cuMemHostRegister_v2", "hipHostRegister"),
	S(mem_host_unregister, "cuMemHostUnregister", "hipHostUnregister"),
	S(mem_host_get_device_pointer, "cuMemHostGetDevicePointer_v2", "hipHostGetDevicePointer"),
	S(memcpy_htod_async, "cuMemcpyHtoDAsync_v2", "hipMemcpyHtoDAsync"),
	S(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2", "hipMemcpyDtoHAsync"),
	S(memcpy_dtod_async, "cuMemcpyDtoDAsync_v2", "hipMemcpyDtoDAsync"),
	S(memset_d8_async, "cuMemsetD8Async", "hipMemsetD8Async"),
	S(pointer_get_attribute, "cuPointerGetAttribute", "hipPointerGetAttribute"),
	OPT(pointer_get_attributes, "cuPointerGetAttributes", "hipDrvPointerGetAttributes"),
	S(mem_get_address_range, "cuMemGetAddressRange_v2", "hipMemGetAddressRange"),
	S(ipc_get_mem_handle, "cuIpcGetMemHandle", "hipIpcGetMemHandle"),
	S(ipc_open_mem_handle, "cuIpcOpenMemHandle_v2|cuIpcOpenMemHandle", "hipIpcOpenMemHandle"),
	S(ipc_close_mem_handle, "cuIpcCloseMemHandle", "hipIpcCloseMemHandle"),
	OPT(mem_create, "cuMemCreate", "hipMemCreate"),
	OPT(mem_release, "cuMemRelease", "hipMemRelease"),
	OPT(mem_export_to_shareable_handle, "cuMemExportToShareableHandle", "hipMemExportToShareableHandle"),
	OPT(mem_import_from_shareable_handle, "cuMemImportFromShareableHandle",
	    "hipMemImportFromShareableHandle"),
	OPT(mem_address_reserve, "cuMemAddressReserve", "hipMemAddressReserve"),
	OPT(mem_address_free, "cuMemAddressFree", "hipMemAddressFree"),
	OPT(mem_map, "cuMemMap", "hipMemMap"),
	OPT(mem_unmap, "cuMemUnmap", "hipMemUnmap"),
	OPT(mem_set_access, "cuMemSetAccess", "hipMemSetAccess"),
	OPT(mem_get_allocation_granularity, "cuMemGetAllocationGranularity", "hipMemGetAllocationGranularity"),
	OPT(mem_retain_allocation_handle, "cuMemRetainAllocationHandle", "hipMemRetainAllocationHandle"),
	S(module_load_data, "cuModuleLoadData", "hipModuleLoadData"),
	S(module_unload, "cuModuleUnload", "hipModuleUnload"),
	S(module_get_function, "cuModuleGetFunction", "hipModuleGetFunction"),
	OPT(module_get_global, "cuModuleGetGlobal_v2", "hipModuleGetGlobal"),
	S(launch_kernel, "cuLaunchKernel", "hipModuleLaunchKernel"),
	S(stream_create, "cuStreamCreate", "hipStreamCreateWithFlags"),
	S(stream_destroy, "cuStreamDestroy_v2", "hipStreamDestroy"),
	S(stream_synchronize, "cuStreamSynchronize", "hipStreamSynchronize"),
	S(stream_query, "cuStreamQuery", "hipStreamQuery"),
	S(stream_wait_event, "cuStreamWaitEvent", "hipStreamWaitEvent"),
	S(event_create, "cuEventCreate", "hipEventCreateWithFlags"),
	S(event_destroy, "cuEventDestroy_v2", "hipEventDestroy"),
	S(event_record, "cuEventRecord", "hipEventRecord"),
	S(event_query, "cuEventQuery", "hipEventQuery"),
	S(event_synchronize, "cuEventSynchronize", "hipEventSynchronize"),
	S(event_elapsed_time, "cuEventElapsedTime_v2|cuEventElapsedTime", "hipEventElapsedTime"),
	OPT(device_get_pci_bus_id, "cuDeviceGetPCIBusId", "hipDeviceGetPCIBusId"),
	OPT(device_total_mem, "cuDeviceTotalMem_v2", "hipDeviceTotalMem"),
	OPT(device_can_access_peer, "cuDeviceCanAccessPeer", "hipDeviceCanAccessPeer"),
	OPT(device_get_p2p_attribute, "cuDeviceGetP2PAttribute", NULL),
	OPT(ext_get_link_type_and_hop_count, NULL, "hipExtGetLinkTypeAndHopCount"),
	OPT(cu_get_error_string, "cuGetErrorString", NULL),
	OPT(hip_get_error_string, NULL, "hipGetErrorString"),
};

static struct gpu_api api;
static const struct gpu_api *loaded;
static char reason[320] = "not probed";
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *const cuda_libs[] = {"libcuda.so.1", "libcuda.so", NULL};
static const char *const hip_libs[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", NULL};

/* Resolve "a|b|c": the first name the library exports. */
static void *resolve(void *h, const char *names)
{
	char buf[128];
	while (names && *names) {
		const char *bar = strchr(names, '|');
		size_t n = bar ? (size_t)(bar - names) : strlen(names);
		if (n >= sizeof(buf))
			return NULL;
		memcpy(buf, names, n);
		buf[n] = 0;
		void *p = dlsym(h, buf);
		if (p)
			return p;
		names = bar ? bar + 1 : NULL;
	}
	return NULL;
}

const char *gpu_api_entry(enum gpu_backend b, size_t i, size_t *off, int *optional)
{
	if (i >= sizeof(syms) / sizeof(syms[0]))
		return NULL;
	if (off)
		*off = syms[i].off;
	if (optional)
		*optional = syms[i].optional;
	const char *n = b == GPU_BACKEND_CUDA ? syms[i].cuda : syms[i].hip;
	return n ? n : "";
}

/* hipMemImportFromShareableHandle takes a POSIX fd by value (the pointer's bits, as CUDA does)
 * from HIP 7.1 on and a pointer to it before: the table keeps CUDA's form, this adapts. */
#define HIP_IMPORT_FD_BY_VALUE 70100000
static int (*hip_import_real)(gpu_memhandle *h, void *os_handle, int type);
static int hip_import_fd_by_pointer(gpu_memhandle *h, void *os_handle, int type)
{
	int fd = (int)(uintptr_t)os_handle;
	return hip_import_real(h, type == GPU_MEM_HANDLE_TYPE_POSIX_FD ? (void *)&fd : os_handle, type);
}

/* Fill the table from one library. Returns 0, or -1 with reason set. The library stays
 * loaded on failure too: dlclose of a GPU driver is not safe once it has run. */
static int load_one(enum gpu_backend b, const char *const *libs)
{
	void *h = NULL;
	const char *lib = NULL;
	for (int i = 0; libs[i] && !h; i++)
		if ((h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL)))
			lib = libs[i];
	if (!h) {
		snprintf(reason, sizeof(reason), "%s not found", libs[0]);
		return -1;
	}
	struct gpu_api t;
	memset(&t, 0, sizeof(t));
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		const char *names = b == GPU_BACKEND_CUDA ? syms[i].cuda : syms[i].hip;
		void *p = resolve(h, names);
		if (!p && names && !syms[i].optional) {
			snprintf(reason, sizeof(reason), "%s lacks %s (driver too old?)", lib, names);
			return -1;
		}
		memcpy((char *)&t + syms[i].off, &p, sizeof(p));
	}
	t.backend = b;
	t.name = b == GPU_BACKEND_CUDA ? "CUDA" : "HIP";
	t.library = lib;
	int rc = t.init(0);
	if (rc != 0) {
		snprintf(reason, sizeof(reason), "%s driver present, init failed (%d%s)", t.name, rc,
			 rc == GPU_ERROR_NO_DEVICE ? ": no device" : "");
		return -1;
	}
	if (t.device_get_count(&t.device_count) != 0 || t.device_count <= 0) {
		snprintf(reason, sizeof(reason), "%s driver present, no usable device", t.name);
		return -1;
	}
	t.driver_get_version(&t.driver_version);
	if (b == GPU_BACKEND_HIP && t.mem_import_from_shareable_handle && t.driver_version < HIP_IMPORT_FD_BY_VALUE) {
		hip_import_real = t.mem_import_from_shareable_handle;
		t.mem_import_from_shareable_handle = hip_import_fd_by_pointer;
	}
	api = t;
	return 0;
}

static void load(void)
{
	const char *want = getenv("MORI_GPU");
	if (want && strcmp(want, "none") == 0) {
		snprintf(reason, sizeof(reason), "disabled by MORI_GPU=none");
		return;
	}
	int try_cuda = !want || !*want || strcmp(want, "cuda") == 0;
	int try_hip = !want || !*want || strcmp(want, "hip") == 0;
	if (!try_cuda && !try_hip) {
		snprintf(reason, sizeof(reason), "MORI_GPU=%s is not none, cuda or hip", want);
		return;
	}
	char first[sizeof(reason)] = "";
	if (try_cuda && load_one(GPU_BACKEND_CUDA, cuda_libs) == 0) {
		loaded = &api;
		return;
	}
	if (try_cuda)
		snprintf(first, sizeof(first), "%s", reason);
	if (try_hip && load_one(GPU_BACKEND_HIP, hip_libs) == 0) {
		loaded = &api;
		return;
	}
	/* The CUDA reason alone when HIP is not installed either, else both. */
	if (first[0] && strstr(reason, "not found")) {
		snprintf(reason, sizeof(reason), "%s", first);
	} else if (first[0]) {
		char hip[sizeof(reason)];
		snprintf(hip, sizeof(hip), "%s", reason);
		snprintf(reason, sizeof(reason), "%.150s; %.150s", first, hip);
	}
}

const struct gpu_api *gpu_api(void)
{
	pthread_once(&once, load);
	return loaded;
}

const char *gpu_unavailable_reason(void)
{
	pthread_once(&once, load);
	return loaded ? "available" : reason;
}

static int runtime_seen(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	const char *base = slash ? slash + 1 : info->dlpi_name ? info->dlpi_name : "";
	return !strncmp(base, "libcuda.so", 10) || !strncmp(base, "libamdhip64.so", 14);
}

/* A walk of the loaded objects in memory: no dlopen probe, which searches the library path with
 * a system call per directory and is too slow to ask once a call. Once loaded, a runtime stays. */
int gpu_runtime_loaded(void)
{
	static _Atomic int seen;
	if (seen)
		return 1;
	if (dl_iterate_phdr(runtime_seen, NULL)) {
		seen = 1;
		return 1;
	}
	return 0;
}

const char *gpu_strerror(int rc)
{
	static __thread char buf[160];
	const char *s = NULL;
	if (loaded && loaded->cu_get_error_string && loaded->cu_get_error_string(rc, &s) != 0)
		s = NULL;
	if (loaded && loaded->hip_get_error_string)
		s = loaded->hip_get_error_string(rc);
	snprintf(buf, sizeof(buf), "%s (%d)", s ? s : "unknown GPU error", rc);
	return buf;
}

int gpu_err(int rc, const char *what, char *msg, size_t len)
{
	if (rc == GPU_SUCCESS)
		return MORI_OK;
	if (msg && len)
		snprintf(msg, len, "%s: %s", what, gpu_strerror(rc));
	switch (rc) {
	case GPU_ERROR_OUT_OF_MEMORY:
		return MORI_ENOMEM;
	case GPU_ERROR_INVALID_VALUE:
		return MORI_EINVAL;
	case GPU_ERROR_NO_DEVICE:
	case GPU_ERROR_NOT_INITIALIZED:
		return MORI_ENOGPU;
	case GPU_ERROR_NO_BINARY_FOR_GPU:
		return MORI_ENOKERNEL;
	case GPU_ERROR_NOT_READY:
		return MORI_EINPROGRESS;
	case GPU_ERROR_NOT_SUPPORTED:
		return MORI_ENOTSUP;
	default:
		return MORI_EIO;
	}
}

void gpu_arch_name(const struct gpu_api *g, gpu_device d, char *buf, size_t len)
{
	int major = 0, minor = 0;
	if (g && g->backend == GPU_BACKEND_CUDA && g->device_get_attribute &&
	    g->device_get_attribute(&major, GPU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) == 0 &&
	    g->device_get_attribute(&minor, GPU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d) == 0)
		snprintf(buf, len, "sm_%d%d", major, minor);
	else
		snprintf(buf, len, "%s", g && g->backend == GPU_BACKEND_HIP ? "gfx?" : "unknown");
}

void gpu_describe(char *buf, size_t len)
{
	const struct gpu_api *g = gpu_api();
	if (!g) {
		snprintf(buf, len, "no GPU (%s)", reason);
		return;
	}
	char name[128] = "?", arch[16];
	gpu_device d = 0;
	if (g->device_get(&d, 0) == 0)
		g->device_get_name(name, sizeof(name), d);
	gpu_arch_name(g, d, arch, sizeof(arch));
	int v = g->driver_version;
	if (g->backend == GPU_BACKEND_CUDA)
		snprintf(buf, len, "%d x %s, %s (CUDA driver %d.%d)", g->device_count, name, arch,
			 v / 1000, (v % 1000) / 10);
	else
		snprintf(buf, len, "%d x %s (HIP driver %d)", g->device_count, name, v);
}
