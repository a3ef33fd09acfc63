/* The GPU runtime layer shared by morid and libmori: the vendor driver API (libcuda.so.1, or
 * libamdhip64.so) loaded with dlopen behind one table, so mori builds and runs without a GPU.
 *
 * No CUDA or HIP header is needed to build: the few types and constants used are restated
 * below with the driver's ABI values (kernels/abi_check.c compares them with cuda.h whenever
 * nvcc is present). Every table function returns the driver's own status (0 = success); turn
 * it into a MORI_E* code and a message with gpu_err(). HIP entry points are mapped by name and
 * only compile-checked (no AMD GPU has run this code). */
#ifndef MORI_GPU_H
#define MORI_GPU_H
#include <stddef.h>
#include <stdint.h>

typedef uint64_t gpu_dptr;             /* CUdeviceptr / hipDeviceptr_t */
typedef int gpu_device;                /* CUdevice */
typedef void *gpu_context;             /* CUcontext */
typedef void *gpu_stream;              /* CUstream */
typedef void *gpu_event;               /* CUevent */
typedef void *gpu_module;              /* CUmodule */
typedef void *gpu_function;            /* CUfunction */
typedef unsigned long long gpu_memhandle; /* CUmemGenericAllocationHandle */

#define GPU_IPC_HANDLE_SIZE 64
struct gpu_ipc_handle { unsigned char data[GPU_IPC_HANDLE_SIZE]; }; /* CUipcMemHandle */

struct gpu_mem_location { int type; int id; };                    /* CUmemLocation */
struct gpu_mem_prop {                                                /* CUmemAllocationProp */
	int type;                      /* GPU_MEM_ALLOCATION_TYPE_PINNED */
	int requested_handle_types;    /* GPU_MEM_HANDLE_TYPE_* bits */
	struct gpu_mem_location location;
	void *win32_metadata;
	struct {
		unsigned char compression_type;
		unsigned char gpu_direct_rdma_capable;
		unsigned short usage;
		unsigned char reserved[4];
	} alloc_flags;
};
struct gpu_access_desc { struct gpu_mem_location location; int flags; }; /* CUmemAccessDesc */

/* Driver status values mori looks at (CUresult; hipError_t uses the same numbers for these). */
enum {
	GPU_SUCCESS = 0,
	GPU_ERROR_INVALID_VALUE = 1,
	GPU_ERROR_OUT_OF_MEMORY = 2,
	GPU_ERROR_NOT_INITIALIZED = 3,
	GPU_ERROR_NO_DEVICE = 100,
	GPU_ERROR_INVALID_CONTEXT = 201,
	GPU_ERROR_ALREADY_MAPPED = 208,
	GPU_ERROR_NO_BINARY_FOR_GPU = 209,
	GPU_ERROR_NOT_FOUND = 500,
	GPU_ERROR_NOT_READY = 600,
	GPU_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	GPU_ERROR_NOT_SUPPORTED = 801,
};
/* Pointer attributes (CUpointer_attribute). */
enum {
	GPU_POINTER_ATTRIBUTE_CONTEXT = 1,
	GPU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
	GPU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
	GPU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
	GPU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
	GPU_POINTER_ATTRIBUTE_IS_LEGACY_IPC_CAPABLE = 10,
	GPU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
	GPU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
	GPU_POINTER_ATTRIBUTE_MAPPED = 13,
	GPU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES = 14,
	GPU_POINTER_ATTRIBUTE_MAPPING_SIZE = 18,
	GPU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR = 19,
};
enum { GPU_MEMORYTYPE_HOST = 1, GPU_MEMORYTYPE_DEVICE = 2 };         /* CUmemorytype */
enum {                                                              /* CUdevice_attribute */
	GPU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
	GPU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
	GPU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
	GPU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
	GPU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
	GPU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FD_SUPPORTED = 103,
	GPU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
	GPU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,
};
enum {                                                              /* CUdevice_P2PAttribute */
	GPU_P2P_ATTRIBUTE_PERFORMANCE_RANK = 1,
	GPU_P2P_ATTRIBUTE_ACCESS_SUPPORTED = 2,
	GPU_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED = 3,
};
/* HIP's link types (hsa_amd_link_info_type_t) from ext_get_link_type_and_hop_count. */
enum { GPU_HIP_LINK_PCIE = 2, GPU_HIP_LINK_XGMI = 4 };
enum { GPU_MEM_HANDLE_TYPE_NONE = 0, GPU_MEM_HANDLE_TYPE_POSIX_FD = 1 };
enum { GPU_MEM_ALLOCATION_TYPE_PINNED = 1 };
enum { GPU_MEM_LOCATION_TYPE_DEVICE = 1 };
enum { GPU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 };
enum { GPU_MEM_ALLOC_GRANULARITY_MINIMUM = 0, GPU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1 };
enum { GPU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1 };
enum { GPU_STREAM_NON_BLOCKING = 1 };
enum { GPU_EVENT_DEFAULT = 0, GPU_EVENT_DISABLE_TIMING = 2 };
enum { GPU_MEMHOSTALLOC_PORTABLE = 1, GPU_MEMHOSTALLOC_DEVICEMAP = 2 };
enum { GPU_MEMHOSTREGISTER_PORTABLE = 1, GPU_MEMHOSTREGISTER_DEVICEMAP = 2 };

enum gpu_backend { GPU_BACKEND_NONE = 0, GPU_BACKEND_CUDA = 1, GPU_BACKEND_HIP = 2 };

/* The driver API, one pointer per entry point. Signatures are the CUDA driver API's. */
struct gpu_api {
	enum gpu_backend backend;
	const char *name;       /* "CUDA" or "HIP" */
	const char *library;    /* the file dlopen found */
	int driver_version;     /* e.g. 13000 */
	int device_count;       /* >= 1 once gpu_api() succeeded */

	int (*init)(unsigned flags);
	int (*driver_get_version)(int *v);
	int (*device_get)(gpu_device *d, int ordinal);
	int (*device_get_count)(int *n);
	int (*device_get_name)(char *name, int len, gpu_device d);
	int (*device_get_attribute)(int *v, int attr, gpu_device d); /* NULL on HIP (other enum) */
	int (*primary_ctx_retain)(gpu_context *ctx, gpu_device d);
	int (*primary_ctx_release)(gpu_device d);
	int (*ctx_push_current)(gpu_context ctx);
	int (*ctx_pop_current)(gpu_context *ctx);

	int (*mem_alloc)(gpu_dptr *p, size_t bytes);
	int (*mem_free)(gpu_dptr p);
	int (*mem_host_alloc)(void **p, size_t bytes, unsigned flags);
	int (*mem_free_host)(void *p);
	int (*mem_host_register)(void *p, size_t bytes, unsigned flags);
	int (*mem_host_unregister)(void *p);
	int (*mem_host_get_device_pointer)(gpu_dptr *d, void *p, unsigned flags);
	int (*memcpy_htod_async)(gpu_dptr dst, const void *src, size_t bytes, gpu_stream s);
	int (*memcpy_dtoh_async)(void *dst, gpu_dptr src, size_t bytes, gpu_stream s);
	int (*memcpy_dtod_async)(gpu_dptr dst, gpu_dptr src, size_t bytes, gpu_stream s);
	int (*memset_d8_async)(gpu_dptr dst, unsigned char v, size_t bytes, gpu_stream s);
	int (*pointer_get_attribute)(void *data, int attr, gpu_dptr p);
	int (*pointer_get_attributes)(unsigned n, int *attrs, void **data, gpu_dptr p);
	int (*mem_get_address_range)(gpu_dptr *base, size_t *size, gpu_dptr p);

	int (*ipc_get_mem_handle)(struct gpu_ipc_handle *h, gpu_dptr p);
	int (*ipc_open_mem_handle)(gpu_dptr *p, struct gpu_ipc_handle h, unsigned flags);
	int (*ipc_close_mem_handle)(gpu_dptr p);

	int (*mem_create)(gpu_memhandle *h, size_t bytes, const struct gpu_mem_prop *prop,
			  unsigned long long flags);
	int (*mem_release)(gpu_memhandle h);
	int (*mem_export_to_shareable_handle)(void *out, gpu_memhandle h, int type,
					      unsigned long long flags);
	int (*mem_import_from_shareable_handle)(gpu_memhandle *h, void *os_handle, int type);
	int (*mem_address_reserve)(gpu_dptr *p, size_t bytes, size_t align, gpu_dptr addr,
				   unsigned long long flags);
	int (*mem_address_free)(gpu_dptr p, size_t bytes);
	int (*mem_map)(gpu_dptr p, size_t bytes, size_t offset, gpu_memhandle h,
		       unsigned long long flags);
	int (*mem_unmap)(gpu_dptr p, size_t bytes);
	int (*mem_set_access)(gpu_dptr p, size_t bytes, const struct gpu_access_desc *d, size_t n);
	int (*mem_get_allocation_granularity)(size_t *g, const struct gpu_mem_prop *prop, int option);
	int (*mem_retain_allocation_handle)(gpu_memhandle *h, void *addr);

	int (*module_load_data)(gpu_module *m, const void *image);
	int (*module_unload)(gpu_module m);
	int (*module_get_function)(gpu_function *f, gpu_module m, const char *name);
	int (*module_get_global)(gpu_dptr *p, size_t *bytes, gpu_module m, const char *name); /* NULL: none */
	int (*launch_kernel)(gpu_function f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			     unsigned by, unsigned bz, unsigned shmem, gpu_stream s, void **params,
			     void **extra);

	int (*stream_create)(gpu_stream *s, unsigned flags);
	int (*stream_destroy)(gpu_stream s);
	int (*stream_synchronize)(gpu_stream s);
	int (*stream_query)(gpu_stream s);
	int (*stream_wait_event)(gpu_stream s, gpu_event e, unsigned flags);
	int (*event_create)(gpu_event *e, unsigned flags);
	int (*event_destroy)(gpu_event e);
	int (*event_record)(gpu_event e, gpu_stream s);
	int (*event_query)(gpu_event e);
	int (*event_synchronize)(gpu_event e);
	int (*event_elapsed_time)(float *ms, gpu_event start, gpu_event end);

	/* topology (daemon/topo/topology.c); NULL where the driver lacks them */
	int (*device_get_pci_bus_id)(char *bus_id, int len, gpu_device d);
	int (*device_total_mem)(size_t *bytes, gpu_device d);
	int (*device_can_access_peer)(int *can, gpu_device d, gpu_device peer);
	int (*device_get_p2p_attribute)(int *v, int attr, gpu_device src, gpu_device dst); /* CUDA */
	int (*ext_get_link_type_and_hop_count)(int d1, int d2, unsigned *type, unsigned *hops); /* HIP */

	/* raw error-string entry points; use gpu_strerror() */
	int (*cu_get_error_string)(int rc, const char **s);
	const char *(*hip_get_error_string)(int rc);
};

/* The loaded runtime, or NULL when none is usable here (no library, no device, init failed;
 * gpu_unavailable_reason() says which). Loads and initialises the driver once per process
 * (cuInit; no context is created). $MORI_GPU=none pretends there is none (tests); =cuda or
 * =hip picks one runtime. Thread-safe. */
const struct gpu_api *gpu_api(void);
const char *gpu_unavailable_reason(void);
/* Entry i of the table gpu_api() fills: the exported name(s) backend b's library is asked for
 * ("a|b": the first found), "" where b has none, NULL past the last; *off its offset in struct
 * gpu_api, *optional whether the runtime may lack it (either pointer may be NULL). */
const char *gpu_api_entry(enum gpu_backend b, size_t i, size_t *off, int *optional);

/* The driver's name for a status ("CUDA_ERROR_INVALID_VALUE: invalid argument"). Static. */
const char *gpu_strerror(int rc);

/* Map a driver status to a MORI_E* code, writing "<what>: <driver error>" into msg (may be
 * NULL). GPU_SUCCESS gives MORI_OK. */
int gpu_err(int rc, const char *what, char *msg, size_t len);

/* Architecture name of a device ("sm_90"; "gfx?" on HIP, where it is not queried). */
void gpu_arch_name(const struct gpu_api *g, gpu_device d, char *buf, size_t len);

/* Is the runtime already loaded in this process (by the application or by mori)? Never loads
 * it: a process that has not loaded the runtime cannot hold device memory. */
int gpu_runtime_loaded(void);

/* One line: "no GPU (reason)" or "N x <name> (CUDA driver X.Y)". Never creates a context. */
void gpu_describe(char *buf, size_t len);
/* How a GPU region is shared between processes (gpu_handle_type in MemRegister / MemOpenReply).
 * LEGACY_IPC: cudaMalloc memory, the IPC handle of its allocation base (64 bytes) and the
 * region's offset in it. POSIX_FD: a VMM allocation (cuMemCreate), its gpu_vmm_blob; the fd
 * itself travels with SCM_RIGHTS. POSIX_FDS: a range over several VMM allocations mapped back
 * to back (PyTorch's expandable segments): a gpu_vmm_blob of version 2 whose alloc_size is the
 * span from the first allocation's start to the last's end; the pieces (offset in the span,
 * size) travel in the messages' vmm_pieces, one fd each, in batches of at most WIRE_MAX_FDS. */
enum { GPU_HANDLE_NONE = 0, GPU_HANDLE_LEGACY_IPC = 1, GPU_HANDLE_POSIX_FD = 2, GPU_HANDLE_POSIX_FDS = 3 };
#define GPU_VMM_MAGIC 0x4d4d564du /* "MVMM" */
struct gpu_vmm_blob {
	uint32_t magic;
	uint32_t version;      /* 1: one allocation; 2: several (GPU_HANDLE_POSIX_FDS) */
	uint64_t alloc_size;   /* bytes of the physical allocation (mapping) the region lies in; v2: the span */
	uint64_t owner_base;   /* owner's address of that mapping (v2: of the first piece; diagnostics) */
};
#define GPU_SPAN_MAX_PIECES (1u << 20) /* pieces of one range (20 TiB of 20 MiB segments) */

/* The properties of a shareable VMM allocation on device `ordinal`: pinned device memory
 * exportable as a POSIX fd (what mori_mem_alloc makes and gpu_import maps). */
void gpu_vmm_prop(struct gpu_mem_prop *prop, int ordinal);

/* Map into this process an allocation another process shared: type GPU_HANDLE_*, blob its
 * gpu_ipc bytes, fd the VMM fd (not closed here). The caller has made device `ordinal`'s
 * context current. On success *base and *size give the whole allocation's mapping (the
 * region lies at its offset inside). A MORI_E* code and msg on failure; a legacy handle the
 * driver refuses gives MORI_ESTALE (its owner freed it or exited). */
int gpu_import(const struct gpu_api *g, int ordinal, int type, const void *blob, size_t blob_len,
	       int fd, gpu_dptr *base, size_t *size, char *msg, size_t len);
/* Undo gpu_import (context current, no copy touching it still running). */
void gpu_unimport(const struct gpu_api *g, int type, gpu_dptr base, size_t size);

/* A peer's range of several VMM allocations (GPU_HANDLE_POSIX_FDS) mapped into this process:
 * one reserved span, each piece imported from its fd and mapped at its offset, so the range is
 * contiguous here too. Pieces are mapped in order, each starting where the previous ended. */
struct gpu_vmm_range {
	gpu_dptr base;             /* the reservation (0: none) */
	size_t size;               /* its bytes */
	uint32_t n, mapped;        /* pieces expected; pieces mapped so far (0..mapped-1) */
	uint64_t *off, *len;       /* each piece's offset in the span and size (n entries) */
	int ordinal;
};
/* Reserve `span` bytes for n pieces (1 <= n <= GPU_SPAN_MAX_PIECES) on device `ordinal`, whose
 * context the caller made current. 0, or a MORI_E* code with msg (s is then empty). */
int gpu_vmm_reserve(const struct gpu_api *g, int ordinal, size_t span, uint32_t n, struct gpu_vmm_range *s, char *msg,
		     size_t len);
/* Import the next piece (`bytes` at offset `off` of the span: where the previous ended) from fd
 * (not closed here), map it and make it accessible. 0, or a MORI_E* code with msg. */
int gpu_vmm_map(const struct gpu_api *g, struct gpu_vmm_range *s, uint64_t off, uint64_t bytes, int fd, char *msg,
		 size_t len);
/* Is the span complete (every piece mapped, the last ending at the span's end)? */
int gpu_vmm_complete(const struct gpu_vmm_range *s);
/* Unmap every mapped piece and free the reservation (context current, no copy running). */
void gpu_vmm_free(const struct gpu_api *g, struct gpu_vmm_range *s);
#endif
