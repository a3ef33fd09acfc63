/* VRAM ranges over several VMM allocations, below the GPU line: libclient's walk over
 * the allocations backing a range (holes, foreign memory, another device, the driver without the
 * mapping attributes) over a fake driver table; and, against a real morid, the whole protocol with
 * memfds standing in for the allocations' POSIX fds: upload in batches of WIRE_MAX_FDS, commit,
 * open by a second client with the rest of the pieces fetched batch by batch and each mapped at
 * its offset in one reserved span, morid's descriptor count (held per piece, released with the
 * region, on refusals and when a client dies mid-upload), its descriptor budget, and every
 * refusal of a malformed upload. tests/test_gpu_vmm_span.c does the same on a real GPU. */
#include <check.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "../libclient/gpu_int.h"
#include "harness.h"
#include "mori.h"

#define SEG (20ull << 20)         /* PyTorch's expandable segment */
#define GRAN (2ull << 20)
#define BASE 0x100000000000ull    /* the owner's fake addresses */
#define MAXF 1024

/* ---- the fake driver: the owner's mappings, the importer's reservations and maps ---- */

struct fmap { gpu_dptr base; uint64_t size; int vmm, posix, dev; };
static struct fmap F[MAXF];
static int NF, attrs_ok;
struct fimp { gpu_dptr va; uint64_t size; uint32_t idx; };
static struct fimp IM[MAXF];
static int NIM, bad_unmaps;
static uint64_t reserved;
static gpu_dptr next_va = 0x7f0000000000ull;

static struct fmap *find(gpu_dptr a)
{
	for (int i = 0; i < NF; i++)
		if (a >= F[i].base && a - F[i].base < F[i].size)
			return &F[i];
	return NULL;
}

static int f_attr(void *data, int attr, gpu_dptr p)
{
	struct fmap *m = find(p);
	if (!m)
		return GPU_ERROR_INVALID_VALUE;
	switch (attr) {
	case GPU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data = GPU_MEMORYTYPE_DEVICE; return 0;
	case GPU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: if (!attrs_ok) break; *(uint64_t *)data = m->base; return 0;
	case GPU_POINTER_ATTRIBUTE_MAPPING_SIZE: if (!attrs_ok) break; *(uint64_t *)data = m->size; return 0;
	case GPU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: *(uint64_t *)data = m->posix ? GPU_MEM_HANDLE_TYPE_POSIX_FD : 0; return 0;
	case GPU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = m->dev; return 0;
	default: break;
	}
	return GPU_ERROR_INVALID_VALUE;
}
static int f_range(gpu_dptr *b, size_t *s, gpu_dptr p)
{
	struct fmap *m = find(p);
	if (!m)
		return GPU_ERROR_INVALID_VALUE;
	*b = m->base;
	*s = m->size;
	return 0;
}
static int f_retain(gpu_memhandle *h, void *addr)
{
	struct fmap *m = find((gpu_dptr)(uintptr_t)addr);
	if (!m || !m->vmm)
		return GPU_ERROR_NOT_SUPPORTED;
	*h = (gpu_memhandle)(m - F) + 1;
	return 0;
}
static int f_release(gpu_memhandle h) { (void)h; return 0; }
static int f_gran(size_t *g, const struct gpu_mem_prop *p, int o) { (void)p; (void)o; *g = GRAN; return 0; }
/* An allocation's "POSIX fd": a memfd holding its index. */
static int f_export(void *out, gpu_memhandle h, int type, unsigned long long fl)
{
	(void)type; (void)fl;
	int fd = memfd_create("fake-vmm", MFD_CLOEXEC);
	uint32_t idx = (uint32_t)(h - 1);
	if (fd < 0 || pwrite(fd, &idx, 4, 0) != 4)
		return GPU_ERROR_OUT_OF_MEMORY;
	*(int *)out = fd;
	return 0;
}
static int f_import(gpu_memhandle *h, void *os, int type)
{
	(void)type;
	uint32_t idx;
	if (pread((int)(uintptr_t)os, &idx, 4, 0) != 4)
		return GPU_ERROR_INVALID_VALUE;
	*h = idx + 1;
	return 0;
}
static int f_reserve(gpu_dptr *p, size_t bytes, size_t align, gpu_dptr addr, unsigned long long fl)
{
	(void)align; (void)addr; (void)fl;
	*p = next_va;
	next_va += bytes + GRAN;
	reserved += bytes;
	return 0;
}
static int f_afree(gpu_dptr p, size_t bytes) { (void)p; reserved -= bytes; return 0; }
static int f_map(gpu_dptr p, size_t bytes, size_t off, gpu_memhandle h, unsigned long long fl)
{
	(void)off; (void)fl;
	if (NIM == MAXF)
		return GPU_ERROR_OUT_OF_MEMORY;
	IM[NIM++] = (struct fimp){p, bytes, (uint32_t)(h - 1)};
	return 0;
}
static int f_unmap(gpu_dptr p, size_t bytes)
{
	for (int i = 0; i < NIM; i++)
		if (IM[i].va == p && IM[i].size == bytes) {
			IM[i] = IM[--NIM];
			return 0;
		}
	bad_unmaps++;
	return GPU_ERROR_INVALID_VALUE;
}
static int f_access(gpu_dptr p, size_t bytes, const struct gpu_access_desc *d, size_t n)
{
	(void)p; (void)bytes; (void)d; (void)n;
	return 0;
}

static struct gpu_api fake = {
	.backend = GPU_BACKEND_CUDA, .name = "fake", .device_count = 1,
	.pointer_get_attribute = f_attr, .mem_get_address_range = f_range,
	.mem_retain_allocation_handle = f_retain, .mem_release = f_release,
	.mem_get_allocation_granularity = f_gran, .mem_export_to_shareable_handle = f_export,
	.mem_import_from_shareable_handle = f_import, .mem_address_reserve = f_reserve,
	.mem_address_free = f_afree, .mem_map = f_map, .mem_unmap = f_unmap, .mem_set_access = f_access,
};

/* n segments back to back from BASE (sizes alternate SEG and 2*SEG when mixed). */
static void segments(int n, int mixed)
{
	gpu_dptr a = BASE;
	NF = 0;
	for (int i = 0; i < n; i++) {
		uint64_t s = mixed && (i & 1) ? 2 * SEG : SEG;
		F[NF++] = (struct fmap){a, s, 1, 1, 0};
		a += s;
	}
	attrs_ok = 1;
	NIM = 0;
	bad_unmaps = 0;
	reserved = 0;
}

/* ---- the walk ---- */

START_TEST(walk_pieces)
{
	char msg[300];
	struct gpu_piece *pc;
	uint32_t n;
	for (attrs_ok = 1; attrs_ok >= 0; attrs_ok--) {
		int a = attrs_ok;
		segments(6, 1);
		attrs_ok = a; /* 0: the driver has no mapping attributes; cuMemGetAddressRange does */
		gpu_dptr end = F[5].base + F[5].size;
		ck_assert_int_eq(gpu_span_walk(&fake, 0, BASE + 12345, end - 777 - BASE - 12345, &pc, &n, msg, sizeof(msg)), MORI_OK);
		ck_assert_uint_eq(n, 6);
		for (uint32_t i = 0; i < n; i++) {
			ck_assert_uint_eq(pc[i].base, F[i].base);
			ck_assert_uint_eq(pc[i].size, F[i].size);
		}
		free(pc);
		/* inside pieces 1..3, ending exactly at the end of 3 */
		ck_assert_int_eq(gpu_span_walk(&fake, 0, F[1].base + 1, F[4].base - F[1].base - 1, &pc, &n, msg, sizeof(msg)), MORI_OK);
		ck_assert_uint_eq(n, 3);
		ck_assert_uint_eq(pc[0].base, F[1].base);
		ck_assert_uint_eq(pc[2].base, F[3].base);
		free(pc);
		/* one byte of each of two pieces */
		ck_assert_int_eq(gpu_span_walk(&fake, 0, F[2].base - 1, 2, &pc, &n, msg, sizeof(msg)), MORI_OK);
		ck_assert_uint_eq(n, 2);
		free(pc);
	}
	/* thousands of segments: a KV cache of tens of GiB */
	segments(MAXF, 0);
	ck_assert_int_eq(gpu_span_walk(&fake, 0, BASE, MAXF * SEG, &pc, &n, msg, sizeof(msg)), MORI_OK);
	ck_assert_uint_eq(n, MAXF);
	free(pc);
}
END_TEST

START_TEST(walk_hole)
{
	char msg[300], want[100];
	struct gpu_piece *pc;
	uint32_t n;
	segments(4, 0);
	F[2].base += 3 * GRAN; /* unmapped: [BASE + 2 SEG, +3 granules) */
	F[3].base += 3 * GRAN;
	ck_assert_int_eq(gpu_span_walk(&fake, 0, BASE + 100, 4 * SEG, &pc, &n, msg, sizeof(msg)), MORI_EINVAL);
	snprintf(want, sizeof(want), "[%#llx, %#llx)", (unsigned long long)(BASE + 2 * SEG),
		 (unsigned long long)(BASE + 2 * SEG + 3 * GRAN));
	ck_assert_msg(strstr(msg, want) && strstr(msg, "not mapped"), "hole message '%s' lacks %s", msg, want);
	/* a range running past the last mapping: the hole is the rest of the range */
	segments(2, 0);
	ck_assert_int_eq(gpu_span_walk(&fake, 0, BASE, 2 * SEG + 4096, &pc, &n, msg, sizeof(msg)), MORI_EINVAL);
	snprintf(want, sizeof(want), "[%#llx, %#llx) (4096 bytes", (unsigned long long)(BASE + 2 * SEG),
		 (unsigned long long)(BASE + 2 * SEG + 4096));
	ck_assert_msg(strstr(msg, want), "hole message '%s' lacks %s", msg, want);
}
END_TEST

START_TEST(walk_refusals)
{
	char msg[300];
	struct gpu_piece *pc;
	uint32_t n;
	segments(3, 0);
	F[1].vmm = 0; /* e.g. cudaMalloc memory right after a VMM mapping */
	ck_assert_int_eq(gpu_span_walk(&fake, 0, BASE, 3 * SEG, &pc, &n, msg, sizeof(msg)), MORI_ENOTSUP);
	ck_assert_ptr_nonnull(strstr(msg, "not a VMM allocation"));
	segments(3, 0);
	F[2].posix = 0;
	ck_assert_int_eq(gpu_span_walk(&fake, 0, BASE, 3 * SEG, &pc, &n, msg, sizeof(msg)), MORI_ENOTSUP);
	ck_assert_ptr_nonnull(strstr(msg, "POSIX fd"));
	segments(3, 0);
	F[2].dev = 1;
	ck_assert_int_eq(gpu_span_walk(&fake, 0, BASE, 3 * SEG, &pc, &n, msg, sizeof(msg)), MORI_EINVAL);
	ck_assert_ptr_nonnull(strstr(msg, "GPU 1"));
	ck_assert_int_eq(gpu_span_walk(&fake, 0, BASE, 0, &pc, &n, msg, sizeof(msg)), MORI_ERANGE);
}
END_TEST

/* ---- the protocol, against morid ---- */

static struct test_daemon D;
static void setup(void)
{
	setenv("MORI_GPU", "none", 1); /* libmori's own GPU paths must not find a real one */
	ck_assert_int_eq(daemon_start(&D, NULL), 0);
}
static void teardown(void)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
}

static int count_fds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *dir = opendir(path);
	ck_assert_ptr_nonnull(dir);
	int n = 0;
	for (struct dirent *e; (e = readdir(dir));)
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

/* Register [p, +len) over the fake segments as mem.c does: upload, then the commit. */
static int span_register(mori_client *c, gpu_dptr p, size_t len, Mori__Handle **h)
{
	Mori__MemRegister mr = MORI__MEM_REGISTER__INIT;
	uint8_t buf[128];
	int rc = gpu_span_register(c, &fake, 0, p, len, &mr, buf, sizeof(buf));
	if (rc)
		return rc;
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__Reply *rep;
	req.body_case = MORI__REQUEST__BODY_MEM_REGISTER;
	req.mem_register = &mr;
	if ((rc = client_rpc(c, &req, NULL, 0, &rep, NULL, NULL)))
		return rc;
	ck_assert_int_eq(rep->body_case, MORI__REPLY__BODY_MEM_REGISTER);
	ck_assert_ptr_nonnull(rep->mem_register->handle);
	*h = rep->mem_register->handle;
	rep->mem_register->handle = NULL; /* the caller's */
	mori__reply__free_unpacked(rep, NULL);
	return MORI_OK;
}

static int raw_open(mori_client *c, const Mori__Handle *h, uint32_t from, Mori__Reply **rep, int *fds, int *nfds)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__MemOpen mo = MORI__MEM_OPEN__INIT;
	mo.handle = (Mori__Handle *)h;
	mo.vmm_from = from;
	req.body_case = MORI__REQUEST__BODY_MEM_OPEN;
	req.mem_open = &mo;
	return client_rpc(c, &req, NULL, 0, rep, fds, nfds);
}

static void deregister(mori_client *c, uint64_t id)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__MemDeregister d = MORI__MEM_DEREGISTER__INIT;
	Mori__Reply *rep;
	d.region_id = id;
	req.body_case = MORI__REQUEST__BODY_MEM_DEREGISTER;
	req.mem_deregister = &d;
	OK(client_rpc(c, &req, NULL, 0, &rep, NULL, NULL));
	mori__reply__free_unpacked(rep, NULL);
}

/* morid's descriptors settle (a deregistration is handled after its reply) */
static void fds_become(int want)
{
	for (int i = 0; i < 200 && count_fds(D.pid) != want; i++)
		usleep(10000);
	ck_assert_int_eq(count_fds(D.pid), want);
}

START_TEST(register_and_open)
{
	int npieces = 2 * WIRE_MAX_FDS + 22; /* three batches each way */
	segments(npieces, 1);
	mori_client *a, *b;
	OK(mori_client_open(D.dir, "owner", &a));
	OK(mori_client_open(D.dir, "opener", &b));
	int base_fds = count_fds(D.pid), mine = count_fds(getpid());
	ck_assert_int_gt(base_fds, 0);
	gpu_dptr end = F[npieces - 1].base + F[npieces - 1].size, p = BASE + 4097;
	size_t len = end - 12 - p;
	Mori__Handle *h;
	OK(span_register(a, p, len, &h));
	ck_assert_uint_eq(h->size, len);
	ck_assert_int_eq(count_fds(D.pid), base_fds + npieces); /* morid holds one per allocation */
	ck_assert_int_eq(count_fds(getpid()), mine);            /* the owner none */

	/* the opener: the first batch with the open reply, the rest fetched, one span */
	Mori__Reply *rep;
	int fds[WIRE_MAX_FDS], nfds = 0;
	OK(raw_open(b, h, 0, &rep, fds, &nfds));
	Mori__MemOpenReply *o = rep->mem_open;
	ck_assert_int_eq(o->gpu_handle_type, GPU_HANDLE_POSIX_FDS);
	ck_assert_uint_eq(o->vmm_total, npieces);
	ck_assert_int_eq(nfds, WIRE_MAX_FDS);
	ck_assert_uint_eq(o->fd_offset, p - BASE);
	struct gpu_dev dev = {.ordinal = 0};
	struct gpu_map mp = {.type = GPU_HANDLE_POSIX_FDS, .d = &dev};
	OK(gpu_span_import(b, &fake, &mp, o, fds, nfds));
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	mori__reply__free_unpacked(rep, NULL);
	ck_assert_uint_eq(mp.size, end - BASE);
	ck_assert_uint_eq(reserved, end - BASE);
	ck_assert_int_eq(NIM, npieces);
	for (int i = 0; i < NIM; i++) { /* each allocation at its own offset of the one span */
		struct fimp *q = &IM[i];
		ck_assert_uint_lt(q->idx, (uint32_t)npieces);
		ck_assert_uint_eq(q->va - mp.base, F[q->idx].base - BASE);
		ck_assert_uint_eq(q->size, F[q->idx].size);
	}
	ck_assert_int_eq(count_fds(getpid()), mine); /* every imported fd closed */
	gpu_vmm_free(&fake, &mp.span);
	ck_assert_int_eq(NIM, 0);
	ck_assert_int_eq(bad_unmaps, 0);
	ck_assert_uint_eq(reserved, 0);

	/* libmori's own open path owns the fds it gets: without a GPU it fails, closing them all */
	mori_mem *m;
	ck_assert_int_eq(mem_open_handle(b, h, &m), MORI_ENOGPU);
	ck_assert_int_eq(count_fds(getpid()), mine);
	/* a client that has not opened it cannot fetch its pieces */
	mori_client *x;
	OK(mori_client_open(D.dir, "stranger", &x));
	ck_assert_int_eq(raw_open(x, h, 1, &rep, fds, &nfds), MORI_ESTALE);
	mori_client_close(x);

	fds_become(base_fds + npieces); /* the stranger's session is gone */
	deregister(a, h->region_id);
	fds_become(base_fds);
	mori__handle__free_unpacked(h, NULL);
	mori_client_close(b);
	mori_client_close(a);
}
END_TEST

/* One raw batch: pieces (offset, size) with fresh memfds; returns the code, *upload the id. */
static uint64_t raw_len; /* the range's bytes at offset 50 (0: the span less 100) */
static int raw_batch(mori_client *c, uint32_t total, uint32_t first, uint64_t *upload, const uint64_t *off,
		     const uint64_t *size, int n, uint64_t span)
{
	struct gpu_vmm_blob b = {GPU_VMM_MAGIC, 2, span, BASE};
	Mori__MemRegister m = MORI__MEM_REGISTER__INIT;
	Mori__VmmPiece pv[WIRE_MAX_FDS], *pp[WIRE_MAX_FDS];
	int fds[WIRE_MAX_FDS];
	for (int i = 0; i < n; i++) {
		mori__vmm_piece__init(&pv[i]);
		pv[i].offset = off[i];
		pv[i].size = size[i];
		pp[i] = &pv[i];
		fds[i] = memfd_create("raw", MFD_CLOEXEC);
	}
	m.kind = MORI_MEM_VRAM;
	m.size = raw_len ? raw_len : span - 100;
	m.addr = BASE + 50;
	m.fd_offset = 50;
	m.has_fd = n > 0;
	m.gpu_handle_type = GPU_HANDLE_POSIX_FDS;
	m.gpu_ipc.data = (uint8_t *)&b;
	m.gpu_ipc.len = sizeof(b);
	m.vmm_pieces = pp;
	m.n_vmm_pieces = (size_t)n;
	m.vmm_total = total;
	m.vmm_first = first;
	m.vmm_upload = *upload;
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__Reply *rep;
	req.body_case = MORI__REQUEST__BODY_MEM_REGISTER;
	req.mem_register = &m;
	int rc = client_rpc(c, &req, fds, n, &rep, NULL, NULL);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	if (rc == MORI_OK) {
		if (rep->mem_register->vmm_upload)
			*upload = rep->mem_register->vmm_upload;
		mori__reply__free_unpacked(rep, NULL);
	}
	return rc;
}

START_TEST(upload_refusals)
{
	mori_client *c;
	OK(mori_client_open(D.dir, "raw", &c));
	int base_fds = count_fds(D.pid);
	uint64_t gap[3] = {0, SEG, 3 * SEG}, off[3] = {0, SEG, 2 * SEG}, size[3] = {SEG, SEG, SEG}, up = 0;
	/* pieces that leave a gap between them */
	ck_assert_int_eq(raw_batch(c, 3, 0, &up, gap, size, 3, 4 * SEG), MORI_EINVAL);
	ck_assert_ptr_nonnull(strstr(mori_client_last_error(c), "must follow each other"));
	fds_become(base_fds);
	/* a commit before every piece came removes the upload */
	up = 0;
	OK(raw_batch(c, 3, 0, &up, off, size, 2, 3 * SEG));
	ck_assert_uint_ne(up, 0);
	ck_assert_int_eq(count_fds(D.pid), base_fds + 2);
	ck_assert_int_eq(raw_batch(c, 3, 3, &up, NULL, NULL, 0, 3 * SEG), MORI_EINVAL);
	fds_become(base_fds);
	ck_assert_int_eq(raw_batch(c, 3, 2, &up, off + 1, size, 1, 3 * SEG), MORI_ENOENT); /* it is gone */
	/* a batch out of order, more pieces than announced */
	up = 0;
	OK(raw_batch(c, 2, 0, &up, off, size, 1, 2 * SEG));
	ck_assert_int_eq(raw_batch(c, 2, 0, &up, off, size, 1, 2 * SEG), MORI_EINVAL);
	up = 0;
	ck_assert_int_eq(raw_batch(c, 1, 0, &up, off, size, 2, 2 * SEG), MORI_EINVAL);
	fds_become(base_fds);
	/* a range that does not reach its last piece, or starts past its first */
	raw_len = SEG;
	up = 0;
	OK(raw_batch(c, 3, 0, &up, off, size, 3, 3 * SEG));
	ck_assert_int_eq(raw_batch(c, 3, 3, &up, NULL, NULL, 0, 3 * SEG), MORI_EINVAL);
	ck_assert_ptr_nonnull(strstr(mori_client_last_error(c), "end in the last"));
	fds_become(base_fds);
	/* a well-formed one commits, and its pieces stay with the region */
	raw_len = 0;
	up = 0;
	OK(raw_batch(c, 3, 0, &up, off, size, 3, 3 * SEG));
	OK(raw_batch(c, 3, 3, &up, NULL, NULL, 0, 3 * SEG));
	ck_assert_int_eq(count_fds(D.pid), base_fds + 3);
	/* a client that dies mid-upload leaves nothing behind */
	int before = count_fds(D.pid);
	mori_client *d;
	OK(mori_client_open(D.dir, "dies", &d));
	int session = count_fds(D.pid) - before;
	up = 0;
	OK(raw_batch(d, 3, 0, &up, off, size, 2, 3 * SEG));
	ck_assert_int_eq(count_fds(D.pid), before + session + 2);
	mori_client_close(d);
	fds_become(before);
	mori_client_close(c);
}
END_TEST

/* morid counts every allocation of a range against its descriptor budget (RLIMIT_NOFILE less
 * the 256 it keeps for sessions and peers), before it takes any. */
START_TEST(fd_budget)
{
	daemon_stop(&D);
	daemon_cleanup(&D);
	struct rlimit lim = {700, 700};
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &lim), 0); /* morid inherits it: soft = hard */
	ck_assert_int_eq(daemon_start(&D, NULL), 0);
	segments(MAXF / 2, 0);
	mori_client *c;
	OK(mori_client_open(D.dir, "budget", &c));
	int base_fds = count_fds(D.pid);
	Mori__Handle *h;
	ck_assert_int_eq(span_register(c, BASE, MAXF / 2 * SEG, &h), MORI_ENOMEM);
	ck_assert_msg(strstr(mori_client_last_error(c), "512 more") && strstr(mori_client_last_error(c), "700"),
		      "%s", mori_client_last_error(c));
	fds_become(base_fds);
	segments(300, 0);
	OK(span_register(c, BASE, 300 * SEG, &h));
	ck_assert_int_eq(count_fds(D.pid), base_fds + 300);
	deregister(c, h->region_id);
	mori__handle__free_unpacked(h, NULL);
	fds_become(base_fds);
	mori_client_close(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("vmm_span");
	TCase *w = tcase_create("walk");
	tcase_add_test(w, walk_pieces);
	tcase_add_test(w, walk_hole);
	tcase_add_test(w, walk_refusals);
	suite_add_tcase(s, w);
	TCase *t = tcase_create("protocol");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, register_and_open);
	tcase_add_test(t, upload_refusals);
	tcase_add_test(t, fd_budget);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
