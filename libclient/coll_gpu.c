/* libmori MORI-CCL on the GPU: the rank's device state (struct mori_coll_dev in device
 * memory, the status word in mapped host memory), and each collective as launches on the caller's
 * stream: kernels/coll.cu's mori_coll_kernel, or for the copy-engine forms cuMemcpyDtoDAsync
 * between peer-mapped heap addresses between two one-block barrier kernels. A communicator with
 * a rank whose heap is not mapped here (another node) runs kernels/coll_xnode.cu's one kernel
 * instead, for every collective (run_xnode); the paths above are then never launched. Nothing
 * here waits for the GPU: a stream capture records the same launches. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_int.h"
#include "gpu_int.h"
#include "shmem_wire.h"

enum { FLAT_OFF, FLAT_KERNEL, FLAT_CE };
#define FLAT_MAX_BLOCKS 1024u /* a block per FLAT_BLOCK_BYTES of a rank's work, at most */
#define FLAT_BLOCK_BYTES (64u << 10)

struct coll_gpu {
	struct gpu_dev *d;
	const struct gpu_api *api;
	gpu_function fn;
	gpu_function fn_flat;             /* mori_coll_flat_kernel */
	gpu_function fn_small;            /* mori_coll_small_kernel: a one-shot all-reduce in one launch */
	gpu_dptr dev;                     /* struct mori_coll_dev */
	struct mori_coll_status *st;      /* mapped host memory */
	gpu_dptr st_d;
	struct mori_coll_dev host;        /* what dev holds */
	struct mori_coll_args a;          /* the call being built (2 KiB: not on the stack) */
	int vec;                          /* $MORI_COLL_VEC=4: reductions several vectors a thread */
	int ce_gather;                    /* $MORI_COLL_AR_GATHER=ce: two-shot's gather by the copy engine */
	int flat;                         /* two-shot as flat kernels between barrier kernels: FLAT_* */
	unsigned flat_max;                /* their grid cap ($MORI_COLL_FLAT_BLOCKS) */
	int unmapped;                     /* some rank's heap is not mapped here (another node) */
	int xnode;                        /* the cross-node path (coll_gpu_xnode): kernels/coll_xnode.cu */
	gpu_function fn_x;
	gpu_dptr sst;                     /* the group's device API state (mori_shmem_state) */
};

static int push(mori_comm *k, struct coll_gpu *p)
{
	char msg[160];
	int rc = gpu_err(gpu_push(p->api, p->d), "push context", msg, sizeof(msg));
	return rc ? set_error(k->c, rc, "coll: cannot make GPU %d current: %s", p->d->ordinal, msg) : MORI_OK;
}

int coll_gpu_init(mori_comm *k)
{
	mori_group *g = k->g;
	struct coll_gpu *p = calloc(1, sizeof(*p));
	if (!p)
		return set_error(k->c, MORI_ENOMEM, "out of memory");
	k->gpu_priv = p;
	struct gpu_ctx *x;
	int sm, rc = gpu_ctx_get(k->c, &x);
	int ord = g->gpu_device < 0 ? 0 : g->gpu_device;
	if (rc || (rc = gpu_dev_get(k->c, x, ord, &p->d)))
		return rc;
	p->api = x->g;
	gpu_function copy_fn;
	if ((rc = gpu_copy_kernel(k->c, ord, &copy_fn, &sm))) /* loads libmori's image on the device */
		return rc;
	/* Data kernels' blocks wait for the same block of every peer. $MORI_COLL_RESIDENT=1 caps a
	 * grid at what is resident at once (bps blocks an SM of the SMs MPS gives this process); by
	 * default the cap is coll.c's, more than resident under small shares (waves: measured faster).
	 * coll.c then takes the smallest cap of all ranks (grids must be equal). */
	const char *pct = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), *bps_e = getenv("MORI_COLL_BPS");
	const char *res = getenv("MORI_COLL_RESIDENT");
	int usable = pct && atoi(pct) > 0 && atoi(pct) < 100 ? sm * atoi(pct) / 100 : sm;
	int bps = bps_e && atoi(bps_e) == 2 * MORI_COLL_BLOCKS_PER_SM ? 2 * MORI_COLL_BLOCKS_PER_SM : MORI_COLL_BLOCKS_PER_SM;
	if (res && atoi(res) == 1 && usable >= 1 && (unsigned)(bps * usable) < k->max_blocks && !getenv("MORI_COLL_BLOCKS"))
		k->max_blocks = (unsigned)(bps * usable);
	const char *vec = getenv("MORI_COLL_VEC");
	p->vec = vec && atoi(vec) > 1;
	const char *ag = getenv("MORI_COLL_AR_GATHER");
	p->ce_gather = ag && !strcmp(ag, "ce");
	/* $MORI_COLL_AR_FLAT: "kernel" (the default), "ce" (gather by the copy engine), "0" (the
	 * one-kernel forms with per-block barriers, as before: two-shot, reduce-scatter, all-gather,
	 * all-to-all and broadcast; one-shot from the large argument block) */
	const char *fl = getenv("MORI_COLL_AR_FLAT"), *fb = getenv("MORI_COLL_FLAT_BLOCKS");
	p->flat = !fl || !strcmp(fl, "kernel") ? FLAT_KERNEL : !strcmp(fl, "ce") ? FLAT_CE : FLAT_OFF;
	p->flat_max = fb && atoi(fb) > 0 && atoi(fb) <= 65535 ? (unsigned)atoi(fb) : FLAT_MAX_BLOCKS;
	struct mori_coll_dev *h = &p->host;
	h->magic = MORI_COLL_MAGIC;
	h->rank = k->rank;
	h->n = k->n;
	h->timeout_ns = (uint64_t)k->timeout_us * 1000ull;
	uint64_t base = (uint64_t)(uintptr_t)k->area;
	h->heap_base = g->base;
	h->flags = base + k->off_flags;
	h->sigs = base + k->off_sigs;
	h->gens = base + k->off_gens;
	h->skip = base + k->off_gens + 8ull * MORI_COLL_SLOTS;
	h->meta = base + k->off_meta;
	h->scratch = base + k->off_scratch;
	h->scratch_bytes = k->scratch_bytes;
	/* a rank whose heap is not mapped here (another node) keeps peer_base 0: the cross-node path */
	for (int r = 0; r < k->n; r++) {
		void *pb = mori_shmem_ptr_p2p(g, (void *)(uintptr_t)g->base, k->pe_of[r]);
		p->unmapped |= !pb;
		h->peer_base[r] = (uint64_t)(uintptr_t)pb;
		h->pe_of[r] = k->pe_of[r];
	}
	p->sst = (gpu_dptr)(uintptr_t)mori_shmem_state(g);
	if ((rc = push(k, p)))
		return rc;
	char msg[160] = "";
	const struct gpu_api *a = p->api;
	/* the abort word: the device address of the control page, from the shmem state */
	struct mori_shmem_state sst;
	rc = gpu_err(a->memcpy_dtoh_async(&sst, (gpu_dptr)(uintptr_t)mori_shmem_state(g), sizeof(sst), NULL),
		     "read the shmem state", msg, sizeof(msg));
	if (!rc)
		rc = gpu_err(a->stream_synchronize(NULL), "read the shmem state", msg, sizeof(msg));
	h->ctrl = (uint64_t)(uintptr_t)sst.ctrl;
	void *sp = NULL;
	if (!rc)
		rc = gpu_err(a->mem_host_alloc(&sp, sizeof(*p->st), GPU_MEMHOSTALLOC_PORTABLE | GPU_MEMHOSTALLOC_DEVICEMAP),
			     "cuMemHostAlloc", msg, sizeof(msg));
	if (!rc) {
		p->st = sp;
		memset(sp, 0, sizeof(*p->st));
		rc = gpu_err(a->mem_host_get_device_pointer(&p->st_d, sp, 0), "cuMemHostGetDevicePointer", msg, sizeof(msg));
	}
	h->status = p->st_d;
	if (!rc)
		rc = gpu_err(a->mem_alloc(&p->dev, sizeof(*h)), "cuMemAlloc", msg, sizeof(msg));
	if (!rc)
		rc = gpu_err(a->memcpy_htod_async(p->dev, h, sizeof(*h), NULL), "upload the state", msg, sizeof(msg));
	if (!rc)
		rc = gpu_err(a->stream_synchronize(NULL), "upload the state", msg, sizeof(msg));
	if (!rc)
		rc = gpu_err(a->module_get_function(&p->fn, p->d->module,
						    bps == MORI_COLL_BLOCKS_PER_SM ? MORI_COLL_KERNEL_NAME : MORI_COLL_KERNEL_NAME_O4),
			     "cuModuleGetFunction", msg, sizeof(msg));
	if (!rc)
		rc = gpu_err(a->module_get_function(&p->fn_flat, p->d->module, MORI_COLL_FLAT_KERNEL_NAME),
			     "cuModuleGetFunction", msg, sizeof(msg));
	if (!rc)
		rc = gpu_err(a->module_get_function(&p->fn_small, p->d->module, MORI_COLL_SMALL_KERNEL_NAME),
			     "cuModuleGetFunction", msg, sizeof(msg));
	gpu_pop(a);
	if (rc)
		return set_error(k->c, rc == MORI_EINVAL ? MORI_ENOKERNEL : rc, "coll: device state: %s", msg);
	return MORI_OK;
}

int coll_gpu_unmapped(const mori_comm *k)
{
	const struct coll_gpu *p = k->gpu_priv;
	return p && p->unmapped;
}

/* Every rank takes the cross-node path when any rank has a peer it does not map (coll.c asks all
 * ranks): the kernels of both paths cannot meet. */
int coll_gpu_xnode(mori_comm *k)
{
	struct coll_gpu *p = k->gpu_priv;
	if (p->xnode)
		return MORI_OK;
	if (!p->sst)
		return set_error(k->c, MORI_ENOTSUP, "coll: a communicator across nodes needs the group's device state");
	int rc = push(k, p);
	if (rc)
		return rc;
	char msg[160] = "";
	rc = gpu_err(p->api->module_get_function(&p->fn_x, p->d->module, MORI_COLL_XNODE_KERNEL_NAME),
		     "cuModuleGetFunction", msg, sizeof(msg));
	gpu_pop(p->api);
	if (rc)
		return set_error(k->c, rc == MORI_EINVAL ? MORI_ENOKERNEL : rc, "coll: %s: %s", MORI_COLL_XNODE_KERNEL_NAME,
				 msg);
	p->xnode = 1;
	return MORI_OK;
}

void coll_gpu_fini(mori_comm *k)
{
	struct coll_gpu *p = k->gpu_priv;
	if (!p)
		return;
	if (p->api && p->d && gpu_push(p->api, p->d) == 0) {
		if (p->dev)
			p->api->mem_free(p->dev);
		if (p->st)
			p->api->mem_free_host(p->st);
		gpu_pop(p->api);
	}
	free(p);
	k->gpu_priv = NULL;
}

void *mori_comm_device_state(const mori_comm *k)
{
	const struct coll_gpu *p = k && k->gpu ? k->gpu_priv : NULL;
	/* coll.cuh's device API reaches peers through their mappings only: none across nodes */
	return p && !p->xnode ? (void *)(uintptr_t)p->dev : NULL;
}

/* "allreduce (one-shot)(count 100, float32, sum)" for a signature (MORI_COLL_SIG) */
static void sig_describe(char *buf, size_t len, uint64_t sig)
{
	shmem_coll_describe(buf, len, MORI_COLL_SIG_COUNT(sig),
			    shmem_coll_tag(MORI_COLL_SIG_KIND(sig), MORI_COLL_SIG_DTYPE(sig), MORI_COLL_SIG_OP(sig),
					   MORI_COLL_SIG_ROOT(sig)));
}

int coll_gpu_status(mori_comm *k, int *pe, int take_mismatch)
{
	struct coll_gpu *p = k->gpu_priv;
	if (!p || !p->st)
		return MORI_OK;
	int code = __atomic_load_n(&p->st->code, __ATOMIC_ACQUIRE);
	/* a mismatch that left the communicator in step (code 0) is reported once; one that failed
	 * it (code MORI_EINVAL) every time */
	if ((code == MORI_EINVAL || (!code && take_mismatch)) && __atomic_load_n(&p->st->mm_state, __ATOMIC_ACQUIRE) == 2) {
		int q = p->st->mm_pe;
		char a[128], b[128];
		sig_describe(a, sizeof(a), p->st->mm_sig);
		sig_describe(b, sizeof(b), p->st->mm_ref);
		if (!code) /* the device records the next mismatch only once this one is taken */
			__atomic_store_n(&p->st->mm_state, 0, __ATOMIC_RELEASE);
		if (pe)
			*pe = q;
		return set_error(k->c, MORI_EINVAL, "coll: a collective's arguments differ: rank %d calls %s, rank 0 calls "
						     "%s (rank %d is the first that differs; the call ended before its data "
						     "moved)%s", q, a, b, q,
				 code ? "; the ranks launched different grids, so the communicator failed: destroy it" : "");
	}
	if (!code)
		return MORI_OK;
	int who = p->st->pe;
	if (code == MORI_ETIMEDOUT) {
		char list[400];
		size_t o = 0;
		list[0] = 0;
		for (int r = 0; r < k->n && o + 8 < sizeof(list); r++)
			if (p->st->missing[r / 64] >> (r % 64) & 1)
				o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%d", o ? ", " : "", r);
		if (pe)
			*pe = who;
		return set_error(k->c, code, "coll: a collective's barrier passed its deadline (%lld us): rank%s %s never "
					     "reached it", (long long)k->timeout_us, strchr(list, ',') ? "s" : "", list);
	}
	if (pe)
		*pe = who;
	if (code == MORI_EPEERDEAD)
		return set_error(k->c, code, "coll: PE %d died during a collective", who);
	if (code == MORI_EINVAL)
		return set_error(k->c, code, "coll: all-to-all-v: rank %d sends a count that differs from recvcounts[%d]",
				 who, who);
	return set_error(k->c, code, "coll: a collective ended: %s", mori_strerror(code));
}

/* ---- launches ---- */

static unsigned grid_for(const mori_comm *k, uint64_t bytes)
{
	uint64_t g = (bytes + (128u << 10) - 1) / (128u << 10); /* a block per 128 KiB */
	return g < 1 ? 1 : g > k->max_blocks ? k->max_blocks : (unsigned)g;
}

static int launch(mori_comm *k, struct coll_gpu *p, unsigned grid, void *stream)
{
	char msg[160];
	gpu_dptr dev = p->dev;
	void *params[] = {&dev, &p->a};
	int rc = gpu_err(p->api->launch_kernel(p->fn, grid, 1, 1, MORI_COLL_THREADS, 1, 1, 0, stream, params, NULL),
			 "launch mori_coll_kernel", msg, sizeof(msg));
	return rc ? set_error(k->c, rc, "coll: %s", msg) : MORI_OK;
}

/* The call's signature (coll_dev.h) for its first barrier; grid: a one-kernel form's, else 0. */
static uint64_t call_sig(const struct coll_call *cc, unsigned grid)
{
	return MORI_COLL_SIG((unsigned)cc->kind, (unsigned)cc->dtype, (unsigned)cc->op,
			     cc->kind == MORI_COLL_K_BCAST ? (unsigned)cc->root : 0u, grid,
			     cc->kind == MORI_COLL_K_ALLTOALLV ? 0 : (uint64_t)cc->count);
}

/* A one-block barrier kernel. *sig nonzero: the call's first, which compares the signature
 * (*sig is then 0: the call's later ones, which do nothing after a mismatch); sig NULL: neither. */
static int barrier_kernel(mori_comm *k, struct coll_gpu *p, void *stream, uint64_t *sig)
{
	memset(&p->a, 0, offsetof(struct mori_coll_args, sdispl));
	p->a.kind = MORI_COLL_K_BARRIER;
	p->a.slot = MORI_COLL_SLOT_BAR;
	if (sig && *sig)
		p->a.sig = *sig;
	else if (sig)
		p->a.flags = MORI_COLL_F_LATER;
	if (sig)
		*sig = 0;
	return launch(k, p, 1, stream);
}

static int dtod(mori_comm *k, struct coll_gpu *p, uint64_t dst, uint64_t src, uint64_t len, void *stream)
{
	if (!len || dst == src)
		return MORI_OK;
	char msg[160];
	int rc = gpu_err(p->api->memcpy_dtod_async(dst, src, len, stream), "cuMemcpyDtoDAsync", msg, sizeof(msg));
	return rc ? set_error(k->c, rc, "coll: %s", msg) : MORI_OK;
}

/* Copy-engine forms of all-gather, all-to-all and broadcast: per round of W bytes a segment, the
 * rank's segments copied into its scratch (none with a window), a barrier kernel, one copy per
 * peer from its segment, a barrier kernel (peers are done reading before the next round). */
static int run_ce(mori_comm *k, struct coll_gpu *p, const struct coll_call *cc)
{
	const struct mori_coll_dev *h = &p->host;
	int n = k->n, me = k->rank, nseg = cc->kind == MORI_COLL_K_ALLTOALL ? n : 1;
	uint64_t bytes = cc->count * cc->es, src = (uint64_t)(uintptr_t)cc->src, dst = (uint64_t)(uintptr_t)cc->dst;
	int win = cc->src_win;
	uint64_t W = win ? bytes : (k->scratch_bytes / (uint64_t)nseg) & ~15ull, sig = call_sig(cc, 0);
	int rc = MORI_OK;
	for (uint64_t k0 = 0; k0 < bytes && !rc; k0 += W) {
		uint64_t len = bytes - k0 < W ? bytes - k0 : W;
		if (!win && (cc->kind != MORI_COLL_K_BCAST || me == cc->root))
			for (int s = 0; s < nseg && !rc; s++)
				rc = dtod(k, p, h->scratch + (uint64_t)s * W, src + (uint64_t)s * bytes + k0, len, cc->stream);
		if (!rc)
			rc = barrier_kernel(k, p, cc->stream, &sig);
		for (int j = 0; j < n && !rc; j++) {
			int r = (me + j) % n;
			if (cc->kind == MORI_COLL_K_BCAST && r != cc->root)
				continue;
			uint64_t soff = cc->kind == MORI_COLL_K_ALLTOALL ? (win ? (uint64_t)me * bytes : (uint64_t)me * W) : 0;
			uint64_t doff = cc->kind == MORI_COLL_K_BCAST ? 0 : (uint64_t)r * bytes;
			uint64_t from = (win ? src : h->scratch) - h->heap_base + h->peer_base[r] + soff + (win ? k0 : 0);
			rc = dtod(k, p, dst + doff + k0, from, len, cc->stream);
		}
		if (!rc)
			rc = barrier_kernel(k, p, cc->stream, &sig);
	}
	return rc;
}

/* Two-shot's gather by the copy engine: one copy per peer r of its reduced part r (of a chunk of
 * m elements, parts of P) from rbase (an address in this rank's heap: the peers' copy of it)
 * into dst, the chunk's output here. */
static int ce_gather_parts(mori_comm *k, struct coll_gpu *p, uint64_t dst, uint64_t rbase, uint64_t m, uint64_t P,
			   uint64_t es, void *stream)
{
	const struct mori_coll_dev *h = &p->host;
	const uint64_t n = (uint64_t)k->n;
	int rc = MORI_OK;
	for (uint64_t j = 1; j < n && !rc; j++) {
		uint64_t r = ((uint64_t)k->rank + j) % n, o = r * P * es;
		rc = dtod(k, p, dst + o, rbase - h->heap_base + h->peer_base[r] + o, MORI_COLL_PART_LEN(r, P, m) * es, stream);
	}
	return rc;
}

/* Two-shot all-reduce whose gather is the copy engine's ($MORI_COLL_AR_GATHER=ce; src and dst
 * windows, one chunk): the kernel reduces part r on rank r into dst and ends at the barrier after
 * it, then one copy per peer of its reduced part from its dst, then a barrier kernel (peers are
 * done reading my dst before the call is). Parts as the kernel cuts them. */
static int twoshot_ce_gather(mori_comm *k, struct coll_gpu *p, const struct coll_call *cc)
{
	uint64_t es = cc->es, m = cc->count, dst = (uint64_t)(uintptr_t)cc->dst;
	int rc = ce_gather_parts(k, p, dst, dst, m, MORI_COLL_PART_SIZE(m, (uint64_t)k->n, 16 / es), es, cc->stream);
	return rc ? rc : barrier_kernel(k, p, cc->stream, NULL); /* after the kernel's own barriers */
}

/* mori_coll_flat_kernel with a block per FLAT_BLOCK_BYTES of the rank's work, at most flat_max */
static int flat_launch(mori_comm *k, struct coll_gpu *p, struct mori_coll_flat_args *f, uint64_t work, void *stream)
{
	char msg[160];
	uint64_t g = work / FLAT_BLOCK_BYTES + 1;
	unsigned grid = g > p->flat_max ? p->flat_max : (unsigned)g;
	gpu_dptr dev = p->dev;
	void *params[] = {&dev, f};
	int rc = gpu_err(p->api->launch_kernel(p->fn_flat, grid, 1, 1, MORI_COLL_THREADS, 1, 1, 0, stream, params, NULL),
			 "launch " MORI_COLL_FLAT_KERNEL_NAME, msg, sizeof(msg));
	return rc ? set_error(k->c, rc, "coll: %s", msg) : MORI_OK;
}

/* The flat two-shot all-reduce: per chunk (the whole count between windows), the input staged
 * into the scratch by the copy engine (none from a window), a barrier kernel, the reduce kernel
 * (part `rank` of every rank's input into dst, and into the scratch when dst is not a window), a
 * barrier kernel, the gather (a kernel, or one copy-engine copy per peer), a barrier kernel
 * (peers are done reading before the next chunk or the caller's next write). Neither data kernel
 * waits for a peer, so their grids need not match the peers' and may exceed what is resident. */
static int twoshot_flat(mori_comm *k, struct coll_gpu *p, const struct coll_call *cc)
{
	const struct mori_coll_dev *h = &p->host;
	const uint64_t n = (uint64_t)k->n, es = cc->es, al = 16 / es;
	const int swin = cc->src_win, dwin = cc->dst_win;
	const uint64_t chunk = swin && dwin ? cc->count : (k->scratch_bytes / es - n * al) / (n * al) * (n * al);
	const uint64_t src = (uint64_t)(uintptr_t)cc->src, dst = (uint64_t)(uintptr_t)cc->dst;
	uint64_t sig = call_sig(cc, 0);
	int rc = MORI_OK;
	for (uint64_t c0 = 0; c0 < cc->count && !rc; c0 += chunk) {
		const uint64_t m = cc->count - c0 < chunk ? cc->count - c0 : chunk;
		const uint64_t P = MORI_COLL_PART_SIZE(m, n, al);
		if (!swin)
			rc = dtod(k, p, h->scratch, src + c0 * es, m * es, cc->stream);
		if (!rc)
			rc = barrier_kernel(k, p, cc->stream, &sig);
		struct mori_coll_flat_args f = {.kind = MORI_COLL_K_AR_PART, .dtype = (uint32_t)cc->dtype,
						.op = (uint32_t)cc->op, .flags = dwin ? MORI_COLL_F_DST_WIN : 0u,
						.src = swin ? src + c0 * es : h->scratch, .dst = dst + c0 * es, .count = m};
		if (!rc)
			rc = flat_launch(k, p, &f, P * es, cc->stream);
		if (!rc)
			rc = barrier_kernel(k, p, cc->stream, &sig);
		if (!rc && p->flat == FLAT_CE)
			rc = ce_gather_parts(k, p, dst + c0 * es, dwin ? dst + c0 * es : h->scratch, m, P, es, cc->stream);
		else if (!rc) {
			f.kind = MORI_COLL_K_AR_GATHER;
			rc = flat_launch(k, p, &f, (n - 1) * P * es, cc->stream);
		}
		if (!rc)
			rc = barrier_kernel(k, p, cc->stream, &sig);
	}
	return rc;
}

/* The flat reduce-scatter: per chunk of m of the count elements, every rank's m-element slice for
 * each rank r staged into the scratch at r x M (none from a window), a barrier kernel, the reduce
 * kernel (slice `rank` of every rank into dst), a barrier kernel. */
static int redscat_flat(mori_comm *k, struct coll_gpu *p, const struct coll_call *cc)
{
	const struct mori_coll_dev *h = &p->host;
	const uint64_t n = (uint64_t)k->n, es = cc->es, al = 16 / es, me = (uint64_t)k->rank;
	const int win = cc->src_win;
	const uint64_t M = win ? cc->count : k->scratch_bytes / (n * es) / al * al;
	const uint64_t src = (uint64_t)(uintptr_t)cc->src, dst = (uint64_t)(uintptr_t)cc->dst;
	if (!M)
		return set_error(k->c, MORI_ENOMEM, "coll: %llu bytes of scratch hold no slice for %d ranks",
				 (unsigned long long)k->scratch_bytes, k->n);
	uint64_t sig = call_sig(cc, 0);
	int rc = MORI_OK;
	for (uint64_t c0 = 0; c0 < cc->count && !rc; c0 += M) {
		const uint64_t m = cc->count - c0 < M ? cc->count - c0 : M;
		for (uint64_t r = 0; r < n && !win && !rc; r++)
			rc = dtod(k, p, h->scratch + r * M * es, src + (r * cc->count + c0) * es, m * es, cc->stream);
		if (!rc)
			rc = barrier_kernel(k, p, cc->stream, &sig);
		struct mori_coll_flat_args f = {.kind = MORI_COLL_K_REDSCAT, .dtype = (uint32_t)cc->dtype,
						.op = (uint32_t)cc->op, .flags = MORI_COLL_F_DST_WIN /* no second copy */,
						.src = win ? src : h->scratch, .dst = dst + c0 * es, .count = m,
						.soff = win ? (me * cc->count + c0) * es : me * M * es};
		if (!rc)
			rc = flat_launch(k, p, &f, m * es * n, cc->stream);
		if (!rc)
			rc = barrier_kernel(k, p, cc->stream, &sig);
	}
	return rc;
}

/* The flat all-gather, all-to-all and broadcast: per round of W bytes a segment, the rank's
 * segments staged into its scratch (none from a window; broadcast: the root's only), a barrier
 * kernel, the copy kernel (each rank's segment for this rank into dst), a barrier kernel (peers
 * are done reading before the next round or the caller's next write). */
static int pulls_flat(mori_comm *k, struct coll_gpu *p, const struct coll_call *cc)
{
	const struct mori_coll_dev *h = &p->host;
	const int n = k->n, me = k->rank, a2a = cc->kind == MORI_COLL_K_ALLTOALL, bc = cc->kind == MORI_COLL_K_BCAST;
	const int nseg = a2a ? n : 1, win = cc->src_win;
	const uint64_t bytes = cc->count * cc->es, src = (uint64_t)(uintptr_t)cc->src, dst = (uint64_t)(uintptr_t)cc->dst;
	const uint64_t W = win ? bytes : (k->scratch_bytes / (uint64_t)nseg) & ~15ull;
	if (!W && bytes)
		return set_error(k->c, MORI_ENOMEM, "coll: %llu bytes of scratch hold no segment for %d ranks",
				 (unsigned long long)k->scratch_bytes, n);
	uint64_t sig = call_sig(cc, 0);
	int rc = MORI_OK;
	for (uint64_t k0 = 0; k0 < bytes && !rc; k0 += W) {
		const uint64_t len = bytes - k0 < W ? bytes - k0 : W;
		for (int s = 0; s < nseg && !win && (!bc || me == cc->root) && !rc; s++)
			rc = dtod(k, p, h->scratch + (uint64_t)s * W, src + (a2a ? (uint64_t)s * bytes : 0) + k0, len, cc->stream);
		if (!rc)
			rc = barrier_kernel(k, p, cc->stream, &sig);
		struct mori_coll_flat_args f = {.kind = (uint32_t)cc->kind, .dtype = (uint32_t)cc->dtype,
						.src = win ? src : h->scratch, .dst = dst + k0, .count = len,
						.soff = (a2a ? (uint64_t)me * (win ? bytes : W) : 0) + (win ? k0 : 0),
						.dstride = bc ? 0 : bytes, .root = bc ? cc->root : -1};
		if (!rc)
			rc = flat_launch(k, p, &f, len * (bc ? 1 : (uint64_t)n), cc->stream);
		if (!rc)
			rc = barrier_kernel(k, p, cc->stream, &sig);
	}
	return rc;
}

/* A one-shot all-reduce in one launch of mori_coll_small_kernel (its barriers inside, grids equal
 * on every rank as mori_coll_kernel's), from the small argument block. */
static int oneshot_small(mori_comm *k, struct coll_gpu *p, const struct coll_call *cc)
{
	const uint64_t es = cc->es, al = 16 / es;
	uint64_t chunk = cc->src_win ? cc->count : k->scratch_bytes / es / al * al;
	const unsigned grid = grid_for(k, cc->count * es);
	struct mori_coll_flat_args f = {.kind = MORI_COLL_K_AR_ONESHOT, .dtype = (uint32_t)cc->dtype, .op = (uint32_t)cc->op,
					.flags = (cc->src_win ? MORI_COLL_F_SRC_WIN : 0u) | (p->vec ? MORI_COLL_F_VEC : 0u),
					.src = (uint64_t)(uintptr_t)cc->src, .dst = (uint64_t)(uintptr_t)cc->dst,
					.count = cc->count, .chunk = chunk ? chunk : 1, .tile = k->tile,
					.sig = call_sig(cc, grid)};
	char msg[160];
	gpu_dptr dev = p->dev;
	void *params[] = {&dev, &f};
	int rc = gpu_err(p->api->launch_kernel(p->fn_small, grid, 1, 1, MORI_COLL_THREADS, 1, 1, 0,
					       cc->stream, params, NULL),
			 "launch " MORI_COLL_SMALL_KERNEL_NAME, msg, sizeof(msg));
	return rc ? set_error(k->c, rc, "coll: %s", msg) : MORI_OK;
}

/* The cross-node form (kernels/coll_xnode.cu): whatever the algorithm table picked, one launch
 * of one block; inputs always staged through the scratch (windows change nothing here). Slots
 * of W bytes: n receive slots, and n send slots for all-to-all and reduce-scatter. */
static int run_xnode(mori_comm *k, struct coll_gpu *p, const struct coll_call *cc)
{
	if (cc->kind == MORI_COLL_K_ALLTOALLV)
		return set_error(k->c, MORI_ENOTSUP, "alltoallv: not written for a communicator across nodes (ranks "
						     "whose heaps are not mapped here); alltoall is");
	struct mori_coll_args *a = &p->a;
	memset(a, 0, sizeof(*a));
	a->kind = (uint32_t)cc->kind;
	a->dtype = (uint32_t)cc->dtype;
	a->op = (uint32_t)cc->op;
	a->root = cc->root;
	a->sig = call_sig(cc, 1);
	a->src = (uint64_t)(uintptr_t)cc->src;
	a->dst = (uint64_t)(uintptr_t)cc->dst;
	a->count = cc->count * cc->es; /* coll.c checked that this does not overflow */
	uint64_t slots = (uint64_t)k->n * (cc->kind == MORI_COLL_K_ALLTOALL || cc->kind == MORI_COLL_K_REDSCAT ? 2 : 1);
	uint64_t W = (k->scratch_bytes / slots) & ~15ull;
	a->chunk = W > MORI_COLL_XNODE_SLOT_MAX ? MORI_COLL_XNODE_SLOT_MAX : W;
	if (!a->chunk)
		return set_error(k->c, MORI_ENOMEM, "coll: %llu bytes of scratch leave no slot for %d ranks",
				 (unsigned long long)k->scratch_bytes, k->n);
	char msg[160];
	gpu_dptr dev = p->dev, sst = p->sst;
	void *params[] = {&dev, a, &sst};
	int rc = gpu_err(p->api->launch_kernel(p->fn_x, 1, 1, 1, MORI_COLL_THREADS, 1, 1, 0, cc->stream, params, NULL),
			 "launch " MORI_COLL_XNODE_KERNEL_NAME, msg, sizeof(msg));
	return rc ? set_error(k->c, rc, "coll: %s", msg) : MORI_OK;
}

int coll_gpu_run(mori_comm *k, const struct coll_call *cc)
{
	struct coll_gpu *p = k->gpu_priv;
	int rc = push(k, p);
	if (rc)
		return rc;
	if (p->xnode) {
		rc = run_xnode(k, p, cc);
		gpu_pop(p->api);
		return rc;
	}
	if (cc->algo == MORI_COLL_CE) {
		rc = run_ce(k, p, cc);
		gpu_pop(p->api);
		return rc;
	}
	/* every collective but all-to-all-v (whose receive sizes differ between ranks) in its flat form */
	if (p->flat != FLAT_OFF && k->n > 1 && cc->kind != MORI_COLL_K_ALLTOALLV) {
		switch (cc->kind) {
		case MORI_COLL_K_AR_TWOSHOT: rc = twoshot_flat(k, p, cc); break;
		case MORI_COLL_K_AR_ONESHOT: rc = oneshot_small(k, p, cc); break;
		case MORI_COLL_K_REDSCAT: rc = redscat_flat(k, p, cc); break;
		default: rc = pulls_flat(k, p, cc); break; /* all-gather, all-to-all, broadcast */
		}
		gpu_pop(p->api);
		return rc;
	}
	struct mori_coll_args *a = &p->a;
	memset(a, 0, sizeof(*a));
	a->kind = (uint32_t)cc->kind;
	a->dtype = (uint32_t)cc->dtype;
	a->op = (uint32_t)cc->op;
	a->flags = (cc->src_win ? MORI_COLL_F_SRC_WIN : 0) | (cc->dst_win ? MORI_COLL_F_DST_WIN : 0) |
		   (p->vec ? MORI_COLL_F_VEC : 0);
	a->tile = k->tile;
	a->src = (uint64_t)(uintptr_t)cc->src;
	a->dst = (uint64_t)(uintptr_t)cc->dst;
	a->root = cc->root;
	uint64_t es = cc->es, n = (uint64_t)k->n, al = 16 / (es ? es : 1), S = k->scratch_bytes;
	uint64_t work;
	switch (cc->kind) {
	case MORI_COLL_K_AR_ONESHOT:
		a->count = cc->count;
		a->chunk = cc->src_win ? cc->count : S / es / al * al;
		work = cc->count * es;
		break;
	case MORI_COLL_K_AR_TWOSHOT:
		a->count = cc->count;
		a->chunk = cc->src_win && cc->dst_win ? cc->count : (S / es - n * al) / (n * al) * (n * al);
		work = cc->count * es / n;
		break;
	case MORI_COLL_K_REDSCAT:
		a->count = cc->count;
		a->chunk = cc->src_win ? cc->count : S / (n * es) / al * al;
		work = cc->count * es;
		break;
	case MORI_COLL_K_ALLTOALLV: /* receive sizes differ between ranks; grids must not */
		work = (uint64_t)k->max_blocks << 17;
		for (int r = 0; r < k->n; r++) {
			a->sdispl[r] = cc->sdispl[r] * es;
			a->scount[r] = cc->scount[r] * es;
			a->rdispl[r] = cc->rdispl[r] * es;
			a->rcount[r] = cc->rcount[r] * es;
		}
		a->chunk = (S / n) & ~15ull;
		break;
	default: /* all-gather, all-to-all, broadcast: count in bytes per segment */
		a->count = cc->count * es;
		a->chunk = (S / (cc->kind == MORI_COLL_K_ALLTOALL ? n : 1)) & ~15ull;
		work = a->count * (cc->kind == MORI_COLL_K_BCAST ? 1 : n);
		break;
	}
	if (!a->chunk)
		a->chunk = 1;
	int ce_gather = cc->kind == MORI_COLL_K_AR_TWOSHOT && cc->src_win && cc->dst_win && p->ce_gather && k->n > 1;
	if (ce_gather)
		a->flags |= MORI_COLL_F_NO_GATHER;
	const unsigned grid = grid_for(k, work);
	a->sig = call_sig(cc, grid);
	rc = launch(k, p, grid, cc->stream);
	if (!rc && ce_gather)
		rc = twoshot_ce_gather(k, p, cc);
	gpu_pop(p->api);
	return rc;
}
