/* A stub libamdhip64.so for tests/test_gpu_hip_stub.c: every HIP entry point common/gpu.c's
 * table asks for, with HIP's own signatures (tests/test_gpu_hip_stub.sh compiles this file
 * against hip/hip_runtime_api.h where it is installed, so a signature that differs from HIP's
 * is a compile error), answering as a ROCm 6 runtime with two MI300X (gfx942) would on host
 * memory: device memory is host memory the stub tracks, VMM allocations are memfds mapped into
 * reserved ranges (what one mapping writes the other reads), hipModuleLoadData picks the code
 * object for its arch out of a clang offload bundle and hipModuleGetFunction finds the kernel's
 * descriptor in that ELF. Each entry checks its arguments as the runtime would (a device
 * pointer must be one, a handle must be the stub's), so arguments in the wrong order fail.
 * hip_stub_calls() lists the entries called. Environment: HIP_STUB_VERSION (hipDriverGetVersion,
 * default 60443483: ROCm 6.4, whose hipMemImportFromShareableHandle takes a pointer to the fd;
 * from 70100000 the fd's value), HIP_STUB_ARCH (default gfx942). */
#define _GNU_SOURCE
#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef HIP_STUB_WITH_HEADERS
#include <hip/hip_runtime_api.h>
#else
typedef int hipError_t;
typedef int hipDevice_t;
typedef struct ihipCtx_t *hipCtx_t;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
typedef struct ihipModule_t *hipModule_t;
typedef struct ihipModuleSymbol_t *hipFunction_t;
typedef void *hipDeviceptr_t;
typedef struct { char reserved[64]; } hipIpcMemHandle_t;
typedef struct ihipMemGenericAllocationHandle *hipMemGenericAllocationHandle_t;
typedef int hipPointer_attribute;
typedef int hipMemAllocationHandleType;
typedef int hipMemAllocationGranularity_flags;
typedef struct { int type; int id; } hipMemLocation;
typedef struct {
	int type;
	int requestedHandleType;
	hipMemLocation location;
	void *win32HandleMetaData;
	struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; } allocFlags;
} hipMemAllocationProp;
typedef struct { hipMemLocation location; int flags; } hipMemAccessDesc;
#endif

/* hipError_t values (the same numbers as CUresult's for these) */
enum { OK = 0, EINVAL_ = 1, ENOMEM_ = 2, ENODEV_ = 100, ENOBIN = 209, EHANDLE = 400, ENOTFOUND = 500 };
#define NDEV 2
#define GRAN (2u << 20)

/* ---- the calls made ---- */
static char called[96][48];
static int ncalled;
static void note(const char *fn)
{
	for (int i = 0; i < ncalled; i++)
		if (!strcmp(called[i], fn))
			return;
	if (ncalled < 96)
		snprintf(called[ncalled++], sizeof(called[0]), "%s", fn);
}
#define CALL note(__func__)
/* The names of the entries called so far, space-separated. */
int hip_stub_calls(char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = 0;
	for (int i = 0; i < ncalled && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? " " : "", called[i]);
	return ncalled;
}

/* ---- memory the stub knows: device allocations, registered host memory, mapped VMM ---- */
enum { R_DEV = 1, R_HOST = 2, R_VMM = 3 };
struct region { char *p; size_t n; int kind, ipc_open, fd; }; /* fd: a VMM mapping's allocation */
static struct region regs[256];
static struct region *find(const void *p)
{
	for (int i = 0; i < 256; i++)
		if (regs[i].kind && (const char *)p >= regs[i].p && (const char *)p < regs[i].p + regs[i].n)
			return &regs[i];
	return NULL;
}
static int dev_range(const void *p, size_t n) /* n bytes at p are device-reachable */
{
	struct region *r = find(p);
	return r && (const char *)p + n <= r->p + r->n;
}
static struct region *add(void *p, size_t n, int kind)
{
	for (int i = 0; i < 256; i++)
		if (!regs[i].kind) {
			regs[i] = (struct region){(char *)p, n, kind, 0, -1};
			return &regs[i];
		}
	return NULL;
}

hipError_t hipInit(unsigned int flags) { CALL; return flags ? EINVAL_ : OK; }
hipError_t hipDriverGetVersion(int *v)
{
	CALL;
	const char *e = getenv("HIP_STUB_VERSION");
	*v = e ? atoi(e) : 60443483;
	return OK;
}
hipError_t hipGetDeviceCount(int *n) { CALL; *n = NDEV; return OK; }
hipError_t hipDeviceGet(hipDevice_t *d, int ordinal)
{
	CALL;
	if (!d || ordinal < 0 || ordinal >= NDEV)
		return ENODEV_;
	*d = ordinal;
	return OK;
}
hipError_t hipDeviceGetName(char *name, int len, hipDevice_t d)
{
	CALL;
	if (!name || len <= 0 || d < 0 || d >= NDEV)
		return EINVAL_;
	snprintf(name, (size_t)len, "AMD Instinct MI300X (stub %d)", d);
	return OK;
}
static int ctx_of[NDEV]; /* a context is the address of its device's slot */
hipError_t hipDevicePrimaryCtxRetain(hipCtx_t *c, hipDevice_t d)
{
	CALL;
	if (!c || d < 0 || d >= NDEV)
		return EINVAL_;
	*c = (hipCtx_t)&ctx_of[d];
	return OK;
}
hipError_t hipDevicePrimaryCtxRelease(hipDevice_t d) { CALL; return d < 0 || d >= NDEV ? EINVAL_ : OK; }
static hipCtx_t ctx_stack[16];
static int nctx;
hipError_t hipCtxPushCurrent(hipCtx_t c)
{
	CALL;
	if ((int *)c < ctx_of || (int *)c >= ctx_of + NDEV || nctx == 16)
		return EINVAL_;
	ctx_stack[nctx++] = c;
	return OK;
}
hipError_t hipCtxPopCurrent(hipCtx_t *c)
{
	CALL;
	if (!nctx)
		return EINVAL_;
	hipCtx_t top = ctx_stack[--nctx];
	if (c)
		*c = top;
	return OK;
}

hipError_t hipMalloc(void **p, size_t n)
{
	CALL;
	if (!p || !n || !(*p = aligned_alloc(256, (n + 255) & ~(size_t)255)))
		return !p || !n ? EINVAL_ : ENOMEM_;
	add(*p, n, R_DEV);
	return OK;
}
hipError_t hipFree(void *p)
{
	CALL;
	struct region *r = find(p);
	if (!r || r->kind != R_DEV || r->p != p)
		return EINVAL_;
	free(p);
	r->kind = 0;
	return OK;
}
hipError_t hipHostMalloc(void **p, size_t n, unsigned int flags)
{
	CALL;
	if (!p || !n || flags > 0xf || !(*p = calloc(1, n)))
		return EINVAL_;
	add(*p, n, R_HOST);
	return OK;
}
hipError_t hipHostFree(void *p)
{
	CALL;
	struct region *r = find(p);
	if (!r || r->kind != R_HOST || r->p != p)
		return EINVAL_;
	free(p);
	r->kind = 0;
	return OK;
}
hipError_t hipHostRegister(void *p, size_t n, unsigned int flags)
{
	CALL;
	if (!p || !n || flags > 0xf || find(p))
		return EINVAL_;
	add(p, n, R_HOST);
	return OK;
}
hipError_t hipHostUnregister(void *p)
{
	CALL;
	struct region *r = find(p);
	if (!r || r->kind != R_HOST || r->p != p)
		return EINVAL_;
	r->kind = 0;
	return OK;
}
hipError_t hipHostGetDevicePointer(void **d, void *h, unsigned int flags)
{
	CALL;
	struct region *r = find(h);
	if (!d || flags || !r || r->kind != R_HOST)
		return EINVAL_;
	*d = h; /* the same address on both sides, as with a unified address space */
	return OK;
}
hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void *src, size_t n, hipStream_t s)
{
	CALL;
	(void)s;
	if (!dev_range(dst, n) || !src)
		return EINVAL_;
	memcpy(dst, src, n);
	return OK;
}
hipError_t hipMemcpyDtoHAsync(void *dst, hipDeviceptr_t src, size_t n, hipStream_t s)
{
	CALL;
	(void)s;
	if (!dev_range(src, n) || !dst)
		return EINVAL_;
	memcpy(dst, src, n);
	return OK;
}
hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t n, hipStream_t s)
{
	CALL;
	(void)s;
	if (!dev_range(dst, n) || !dev_range(src, n))
		return EINVAL_;
	memmove(dst, src, n);
	return OK;
}
hipError_t hipMemsetD8Async(hipDeviceptr_t dst, unsigned char v, size_t n, hipStream_t s)
{
	CALL;
	(void)s;
	if (!dev_range(dst, n))
		return EINVAL_;
	memset(dst, v, n);
	return OK;
}
/* HIP_POINTER_ATTRIBUTE_* (CUDA's numbers); memory types as ROCm 6 numbers them (CUDA's) */
static hipError_t attr1(void *data, int attr, hipDeviceptr_t p)
{
	struct region *r = find(p);
	if (!data)
		return EINVAL_;
	if (!r)
		return attr == 2 ? EINVAL_ : (memset(data, 0, attr >= 11 && attr <= 12 ? 8 : 4), EINVAL_);
	switch (attr) {
	case 2: *(unsigned *)data = r->kind == R_HOST ? 1 : 2; return OK;               /* MEMORY_TYPE */
	case 8: *(int *)data = 0; return OK;                                          /* IS_MANAGED */
	case 9: *(int *)data = 0; return OK;                                          /* DEVICE_ORDINAL */
	case 10: *(int *)data = r->kind == R_DEV; return OK;                          /* IS_LEGACY_IPC_CAPABLE */
	case 11: *(void **)data = r->p; return OK;                                    /* RANGE_START_ADDR */
	case 12: *(size_t *)data = r->n; return OK;                                   /* RANGE_SIZE */
	case 13: *(int *)data = 1; return OK;                                         /* MAPPED */
	case 14: *(unsigned long long *)data = r->kind == R_VMM ? 1 : 0; return OK;   /* ALLOWED_HANDLE_TYPES */
	default: return EINVAL_;
	}
}
hipError_t hipPointerGetAttribute(void *data, hipPointer_attribute attr, hipDeviceptr_t p)
{
	CALL;
	return attr1(data, (int)attr, p);
}
hipError_t hipDrvPointerGetAttributes(unsigned int n, hipPointer_attribute *attrs, void **data, hipDeviceptr_t p)
{
	CALL;
	if (!attrs || !data || !find(p))
		return EINVAL_;
	for (unsigned i = 0; i < n; i++)
		if ((int)attr1(data[i], (int)attrs[i], p) != OK)
			return EINVAL_;
	return OK;
}
hipError_t hipMemGetAddressRange(hipDeviceptr_t *base, size_t *size, hipDeviceptr_t p)
{
	CALL;
	struct region *r = find(p);
	if (!r || r->kind == R_HOST)
		return ENOTFOUND;
	if (base)
		*base = r->p;
	if (size)
		*size = r->n;
	return OK;
}

/* ---- IPC: a handle names the allocation base (this stub serves one process) ---- */
#define IPC_MAGIC "STUBIPC"
hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *h, void *p)
{
	CALL;
	struct region *r = find(p);
	if (!h || !r || r->kind != R_DEV || r->p != p)
		return EINVAL_;
	memset(h, 0, sizeof(*h));
	memcpy((char *)h, IPC_MAGIC, 8);
	memcpy((char *)h + 8, &r->p, sizeof(r->p));
	memcpy((char *)h + 16, &r->n, sizeof(r->n));
	return OK;
}
hipError_t hipIpcOpenMemHandle(void **p, hipIpcMemHandle_t h, unsigned int flags)
{
	CALL;
	char *base;
	memcpy(&base, (char *)&h + 8, sizeof(base));
	struct region *r = find(base);
	if (!p || flags != 1 /* hipIpcMemLazyEnablePeerAccess */ || memcmp(&h, IPC_MAGIC, 8) || !r || r->p != base)
		return EINVAL_;
	r->ipc_open++;
	*p = base;
	return OK;
}
hipError_t hipIpcCloseMemHandle(void *p)
{
	CALL;
	struct region *r = find(p);
	if (!r || !r->ipc_open)
		return EINVAL_;
	r->ipc_open--;
	return OK;
}

/* ---- VMM: an allocation is a memfd; a reservation an inaccessible range it maps into ---- */
struct vmm { int fd; size_t n; int magic; };
#define VMM_MAGIC 0x564d4d
static struct vmm *vmm_of(hipMemGenericAllocationHandle_t h)
{
	struct vmm *v = (struct vmm *)h;
	return v && v->magic == VMM_MAGIC ? v : NULL;
}
static int prop_ok(const hipMemAllocationProp *p)
{
	/* pinned, POSIX fd, on a device */
	return p && p->type == 1 && p->requestedHandleType == 1 && p->location.type == 1 && p->location.id >= 0 &&
	       p->location.id < NDEV;
}
hipError_t hipMemGetAllocationGranularity(size_t *g, const hipMemAllocationProp *prop,
					  hipMemAllocationGranularity_flags option)
{
	CALL;
	if (!g || !prop_ok(prop) || (int)option < 0 || (int)option > 1)
		return EINVAL_;
	*g = GRAN;
	return OK;
}
static hipMemGenericAllocationHandle_t vmm_new(int fd, size_t n)
{
	struct vmm *v = malloc(sizeof(*v));
	*v = (struct vmm){fd, n, VMM_MAGIC};
	return (hipMemGenericAllocationHandle_t)v;
}
hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *h, size_t n, const hipMemAllocationProp *prop,
			unsigned long long flags)
{
	CALL;
	if (!h || !n || n % GRAN || flags || !prop_ok(prop))
		return EINVAL_;
	int fd = memfd_create("hip-stub-vmm", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)n))
		return ENOMEM_;
	*h = vmm_new(fd, n);
	return OK;
}
hipError_t hipMemRelease(hipMemGenericAllocationHandle_t h)
{
	CALL;
	struct vmm *v = vmm_of(h);
	if (!v)
		return EINVAL_;
	close(v->fd);
	v->magic = 0;
	free(v);
	return OK;
}
hipError_t hipMemExportToShareableHandle(void *out, hipMemGenericAllocationHandle_t h,
					 hipMemAllocationHandleType type, unsigned long long flags)
{
	CALL;
	struct vmm *v = vmm_of(h);
	if (!out || !v || type != 1 || flags)
		return EINVAL_;
	*(int *)out = dup(v->fd);
	return OK;
}
hipError_t hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *h, void *os, hipMemAllocationHandleType type)
{
	CALL;
	const char *e = getenv("HIP_STUB_VERSION");
	int by_value = e && atoi(e) >= 70100000;
	struct stat st;
	if (!h || type != 1 || (!by_value && (uintptr_t)os < 4096))
		return EINVAL_;
	int fd = by_value ? (int)(uintptr_t)os : *(int *)os;
	if (fstat(fd, &st) || !st.st_size || st.st_size % GRAN)
		return EINVAL_;
	*h = vmm_new(dup(fd), (size_t)st.st_size);
	return OK;
}
hipError_t hipMemAddressReserve(void **p, size_t n, size_t align, void *addr, unsigned long long flags)
{
	CALL;
	if (!p || !n || n % GRAN || (align & (align - 1)) || flags)
		return EINVAL_;
	void *m = mmap(addr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return ENOMEM_;
	*p = m;
	return OK;
}
hipError_t hipMemAddressFree(void *p, size_t n)
{
	CALL;
	if (!p || !n || n % GRAN)
		return EINVAL_;
	return munmap(p, n) ? EINVAL_ : OK;
}
hipError_t hipMemMap(void *p, size_t n, size_t off, hipMemGenericAllocationHandle_t h, unsigned long long flags)
{
	CALL;
	struct vmm *v = vmm_of(h);
	if (!p || !v || off || n != v->n || flags || find(p))
		return EINVAL_;
	if (mmap(p, n, PROT_NONE, MAP_SHARED | MAP_FIXED, v->fd, 0) == MAP_FAILED)
		return ENOMEM_;
	add(p, n, R_VMM)->fd = dup(v->fd);
	return OK;
}
hipError_t hipMemUnmap(void *p, size_t n)
{
	CALL;
	struct region *r = find(p);
	if (!r || r->kind != R_VMM || r->p != p || r->n != n)
		return EINVAL_;
	mmap(p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	close(r->fd);
	r->kind = 0;
	return OK;
}
hipError_t hipMemSetAccess(void *p, size_t n, const hipMemAccessDesc *d, size_t count)
{
	CALL;
	if (!p || !d || !count || !dev_range(p, n))
		return EINVAL_;
	for (size_t i = 0; i < count; i++)
		if (d[i].location.type != 1 || d[i].location.id < 0 || d[i].location.id >= NDEV || d[i].flags != 3)
			return EINVAL_;
	return mprotect(p, n, PROT_READ | PROT_WRITE) ? EINVAL_ : OK;
}
hipError_t hipMemRetainAllocationHandle(hipMemGenericAllocationHandle_t *h, void *addr)
{
	CALL;
	struct region *r = find(addr);
	if (!h || !r || r->kind != R_VMM)
		return EINVAL_;
	*h = vmm_new(dup(r->fd), r->n);
	return OK;
}

/* ---- modules: the code object for this arch out of a clang offload bundle (or a bare ELF) ---- */
struct function { struct module *m; char name[64]; int magic; };
struct module { const unsigned char *elf; size_t n; int magic, nfn; struct function *fn[64]; }; /* owns its functions */
static const char *arch(void)
{
	const char *a = getenv("HIP_STUB_ARCH");
	return a ? a : "gfx942";
}
static int mach(const char *a) /* EF_AMDGPU_MACH */
{
	return !strcmp(a, "gfx90a") ? 0x3f : !strcmp(a, "gfx942") ? 0x4c : !strcmp(a, "gfx950") ? 0x4f : -1;
}
static int elf_ok(const unsigned char *p, size_t n)
{
	const Elf64_Ehdr *e = (const Elf64_Ehdr *)p;
	return n > sizeof(*e) && !memcmp(p, ELFMAG, SELFMAG) && e->e_machine == 0xe0 /* EM_AMDGPU */ &&
	       (int)(e->e_flags & 0xff) == mach(arch()) && e->e_shoff + (size_t)e->e_shnum * sizeof(Elf64_Shdr) <= n;
}
/* The symbol's value and size in the code object's .symtab, or -1. */
static long sym(const struct module *m, const char *name, int type, size_t *size)
{
	const Elf64_Ehdr *e = (const Elf64_Ehdr *)m->elf;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(m->elf + e->e_shoff);
	for (int i = 0; i < e->e_shnum; i++) {
		if (sh[i].sh_type != SHT_SYMTAB)
			continue;
		const Elf64_Sym *s = (const Elf64_Sym *)(m->elf + sh[i].sh_offset);
		const char *str = (const char *)m->elf + sh[sh[i].sh_link].sh_offset;
		for (size_t k = 0; k < sh[i].sh_size / sizeof(*s); k++)
			if (ELF64_ST_TYPE(s[k].st_info) == type && !strcmp(str + s[k].st_name, name)) {
				if (size)
					*size = s[k].st_size;
				return (long)s[k].st_value;
			}
	}
	return -1;
}
hipError_t hipModuleLoadData(hipModule_t *mod, const void *image)
{
	CALL;
	const unsigned char *p = image;
	if (!mod || !p)
		return EINVAL_;
	const unsigned char *co = NULL;
	size_t con = 0;
	if (!memcmp(p, "__CLANG_OFFLOAD_BUNDLE__", 24)) {
		uint64_t n, off, size, idn;
		memcpy(&n, p + 24, 8);
		const unsigned char *q = p + 32;
		char want[96];
		snprintf(want, sizeof(want), "hipv4-amdgcn-amd-amdhsa--%s", arch());
		for (uint64_t i = 0; i < n && n < 64; i++) {
			memcpy(&off, q, 8);
			memcpy(&size, q + 8, 8);
			memcpy(&idn, q + 16, 8);
			if (idn < 96 && (idn == strlen(want) || (idn > strlen(want) && q[24 + strlen(want)] == ':')) &&
			    !memcmp(q + 24, want, strlen(want)))
				co = p + off, con = size;
			q += 24 + idn;
		}
	} else if (!memcmp(p, ELFMAG, SELFMAG)) {
		co = p, con = (size_t)1 << 30; /* a bare code object: its length is not given */
	}
	if (!co || !elf_ok(co, con))
		return ENOBIN;
	struct module *m = calloc(1, sizeof(*m));
	*m = (struct module){co, con, VMM_MAGIC + 1, 0, {NULL}};
	*mod = (hipModule_t)m;
	return OK;
}
hipError_t hipModuleUnload(hipModule_t mod)
{
	CALL;
	struct module *m = (struct module *)mod;
	if (!m || m->magic != VMM_MAGIC + 1)
		return EHANDLE;
	m->magic = 0;
	for (int i = 0; i < m->nfn; i++)
		free(m->fn[i]);
	free(m);
	return OK;
}
hipError_t hipModuleGetFunction(hipFunction_t *f, hipModule_t mod, const char *name)
{
	CALL;
	struct module *m = (struct module *)mod;
	char kd[80];
	if (!f || !m || m->magic != VMM_MAGIC + 1 || !name)
		return EINVAL_;
	snprintf(kd, sizeof(kd), "%s.kd", name); /* the kernel descriptor a dispatch points at */
	if (strlen(name) >= 64 || sym(m, kd, STT_OBJECT, NULL) < 0)
		return ENOTFOUND;
	if (m->nfn == 64)
		return ENOMEM_;
	struct function *fn = m->fn[m->nfn++] = malloc(sizeof(*fn));
	*fn = (struct function){m, "", VMM_MAGIC + 2};
	snprintf(fn->name, sizeof(fn->name), "%s", name);
	*f = (hipFunction_t)fn;
	return OK;
}
hipError_t hipModuleGetGlobal(hipDeviceptr_t *p, size_t *bytes, hipModule_t mod, const char *name)
{
	CALL;
	struct module *m = (struct module *)mod;
	size_t n = 0;
	if (!m || m->magic != VMM_MAGIC + 1 || !name)
		return EINVAL_;
	if (sym(m, name, STT_OBJECT, &n) < 0)
		return ENOTFOUND;
	void *g = NULL;
	if ((int)hipMalloc(&g, n ? n : 8) != OK) /* the global's storage, zeroed as a loaded module's is */
		return ENOMEM_;
	memset(g, 0, n ? n : 8);
	if (p)
		*p = g;
	if (bytes)
		*bytes = n;
	return OK;
}
/* The last launch, for the test: kernel name, grid and block sizes, dynamic shared memory. */
char hip_stub_last_kernel[64];
unsigned hip_stub_last_dims[7];
hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				 unsigned int by, unsigned int bz, unsigned int shmem, hipStream_t s, void **params,
				 void **extra)
{
	CALL;
	struct function *fn = (struct function *)f;
	(void)s;
	if (!fn || fn->magic != VMM_MAGIC + 2 || !gx || !gy || !gz || !bx || !by || !bz ||
	    (unsigned long long)bx * by * bz > 1024 || shmem > 65536 || (!params == !extra))
		return EINVAL_;
	snprintf(hip_stub_last_kernel, sizeof(hip_stub_last_kernel), "%s", fn->name);
	unsigned d[7] = {gx, gy, gz, bx, by, bz, shmem};
	memcpy(hip_stub_last_dims, d, sizeof(d));
	return OK;
}

/* ---- streams and events: work completes at once ---- */
struct stream { int magic; };
struct event { int magic; unsigned flags; int recorded; struct timespec t; };
hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned int flags)
{
	CALL;
	if (!s || flags > 1 /* hipStreamNonBlocking */)
		return EINVAL_;
	struct stream *st = malloc(sizeof(*st));
	st->magic = VMM_MAGIC + 3;
	*s = (hipStream_t)st;
	return OK;
}
static int stream_ok(hipStream_t s) { return !s || ((struct stream *)s)->magic == VMM_MAGIC + 3; }
hipError_t hipStreamDestroy(hipStream_t s)
{
	CALL;
	if (!s || !stream_ok(s))
		return EHANDLE;
	((struct stream *)s)->magic = 0;
	free(s);
	return OK;
}
hipError_t hipStreamSynchronize(hipStream_t s) { CALL; return stream_ok(s) ? OK : EHANDLE; }
hipError_t hipStreamQuery(hipStream_t s) { CALL; return stream_ok(s) ? OK : EHANDLE; }
static struct event *ev(hipEvent_t e)
{
	struct event *x = (struct event *)e;
	return x && x->magic == VMM_MAGIC + 4 ? x : NULL;
}
hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned int flags)
{
	CALL;
	return stream_ok(s) && ev(e) && !flags ? OK : EINVAL_;
}
hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned int flags)
{
	CALL;
	if (!e || flags > 7) /* BlockingSync 1, DisableTiming 2, Interprocess 4 */
		return EINVAL_;
	struct event *x = calloc(1, sizeof(*x));
	x->magic = VMM_MAGIC + 4;
	x->flags = flags;
	*e = (hipEvent_t)x;
	return OK;
}
hipError_t hipEventDestroy(hipEvent_t e)
{
	CALL;
	struct event *x = ev(e);
	if (!x)
		return EHANDLE;
	x->magic = 0;
	free(x);
	return OK;
}
hipError_t hipEventRecord(hipEvent_t e, hipStream_t s)
{
	CALL;
	struct event *x = ev(e);
	if (!x || !stream_ok(s))
		return EHANDLE;
	x->recorded = 1;
	clock_gettime(CLOCK_MONOTONIC, &x->t);
	return OK;
}
hipError_t hipEventQuery(hipEvent_t e) { CALL; return ev(e) ? OK : EHANDLE; }
hipError_t hipEventSynchronize(hipEvent_t e) { CALL; return ev(e) ? OK : EHANDLE; }
hipError_t hipEventElapsedTime(float *ms, hipEvent_t a, hipEvent_t b)
{
	CALL;
	struct event *x = ev(a), *y = ev(b);
	if (!ms || !x || !y)
		return EHANDLE;
	if (!x->recorded || !y->recorded || (x->flags & 2) || (y->flags & 2))
		return EHANDLE;
	*ms = (float)((y->t.tv_sec - x->t.tv_sec) * 1e3 + (y->t.tv_nsec - x->t.tv_nsec) / 1e6);
	return OK;
}

/* ---- topology and errors ---- */
hipError_t hipDeviceGetPCIBusId(char *id, int len, int d)
{
	CALL;
	if (!id || len < 13 || d < 0 || d >= NDEV)
		return EINVAL_;
	snprintf(id, (size_t)len, "0000:%02x:00.0", 0x0c + 0x10 * d);
	return OK;
}
hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t d)
{
	CALL;
	if (!bytes || d < 0 || d >= NDEV)
		return EINVAL_;
	*bytes = (size_t)192 << 30;
	return OK;
}
hipError_t hipDeviceCanAccessPeer(int *can, int d, int peer)
{
	CALL;
	if (!can || d < 0 || d >= NDEV || peer < 0 || peer >= NDEV)
		return EINVAL_;
	*can = d != peer;
	return OK;
}
hipError_t hipExtGetLinkTypeAndHopCount(int d1, int d2, uint32_t *type, uint32_t *hops)
{
	CALL;
	if (!type || !hops || d1 < 0 || d1 >= NDEV || d2 < 0 || d2 >= NDEV || d1 == d2)
		return EINVAL_;
	*type = 4; /* HSA_AMD_LINK_INFO_TYPE_XGMI */
	*hops = 1;
	return OK;
}
const char *hipGetErrorString(hipError_t e)
{
	CALL;
	switch ((int)e) {
	case OK: return "hipSuccess";
	case EINVAL_: return "hipErrorInvalidValue";
	case ENOMEM_: return "hipErrorOutOfMemory";
	case ENODEV_: return "hipErrorNoDevice";
	case ENOBIN: return "hipErrorNoBinaryForGpu";
	case EHANDLE: return "hipErrorInvalidHandle";
	case ENOTFOUND: return "hipErrorNotFound";
	default: return "hipErrorUnknown";
	}
}
