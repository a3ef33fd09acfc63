/* libmori MORI-EP: handles on a group's VRAM heap and the launches of the EP kernels
 * of libmori's image (kernels/ep.cu) on the caller's stream. The host never waits for the GPU on
 * the data path: what it checks here is what it knows (shapes, token counts, call order, pointer
 * alignment); what only the GPU sees lands in the handle's status word (mori_ep_status). */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/ep_internode.h"
#include "../kernels/ep_kernels.h"
#include "conv.h"
#include "ep_int.h"
#include "ep_tune.h"
#include "gpu_int.h"
#include "shmem_int.h"

_Static_assert(MORI_EP_KMODE_LL == MORI_EP_LOW_LATENCY && MORI_EP_KDTYPE_BF16 == MORI_BFLOAT16 &&
		       MORI_EP_MAX_WORLD_K == MORI_EP_MAX_WORLD,
	       "kernels/ep_kernels.h and ep_internode.h restate mori_ep.h's values");

/* The intranode kernels, then (K_INTRA..K_N, loaded for the internode types only) the internode ones
 * (kernels/ep_internode.cu). */
enum { K_LAYOUT, K_DSEND, K_DRECV, K_CSEND, K_CREDUCE, K_QUERY, K_INTRA,
       K_XLAYOUT = K_INTRA, K_XPREFIX, K_XDSEND, K_XDPOST, K_XDRECV, K_XDCOPY, K_XCSEND, K_XCPOST, K_XCREDUCE, K_N };
static const char *const knames[K_N] = {MORI_EP_K_LAYOUT, MORI_EP_K_DISPATCH_SEND, MORI_EP_K_DISPATCH_RECV,
					MORI_EP_K_COMBINE_SEND, MORI_EP_K_COMBINE_REDUCE, MORI_EP_K_QUERY,
					MORI_EPX_K_LAYOUT, MORI_EPX_K_PREFIX, MORI_EPX_K_DSEND, MORI_EPX_K_DPOST,
					MORI_EPX_K_DRECV, MORI_EPX_K_DCOPY, MORI_EPX_K_CSEND, MORI_EPX_K_CPOST,
					MORI_EPX_K_CREDUCE};

struct mori_ep_handle {
	mori_group *g;
	mori_ep_config cfg;        /* defaults resolved */
	struct mori_ep_layout L;
	struct mori_epx_layout X;  /* the internode parts (kernel types MORI_EP_INTERNODE*) */
	int xnode;                 /* cfg.kernel_type is an internode one */
	uint64_t slot_bytes;       /* one slot: L.total, or X.end for the internode types */
	uint8_t *block;            /* the symmetric block in this PE's heap (device address) */
	uint64_t st;               /* the PE's device state */
	struct gpu_dev *d;
	const struct gpu_api *api;
	gpu_function fn[K_N];
	int live_slot;             /* its entry in the live table */
	uint64_t gen;              /* its generation there */
	int nslots;                /* cfg.num_in_flight (0 resolved to 1): buffer sets of L.total bytes */
	uint64_t ndisp, ncomb;     /* dispatches / combines enqueued: ndisp - ncomb wait for combine */
	int ntok[MORI_EP_MAX_IN_FLIGHT]; /* num_tokens of the dispatch waiting in each slot */
};

/* Slot s's part of the block; the slot the next combine takes (or, none waiting, the next dispatch). */
static uint8_t *slot_base(const mori_ep_handle *h, int s) { return h->block + (size_t)s * h->slot_bytes; }
static int next_slot(const mori_ep_handle *h)
{
	return (int)((h->ndisp > h->ncomb ? h->ncomb : h->ndisp) % (uint64_t)h->nslots);
}

/* What every rank publishes at creation: its resolved config and whether it could load the
 * kernels (so all ranks take the same decision). */
struct xchg {
	mori_ep_config cfg;
	int32_t kernel_rc;
	int32_t sm_count;
};

static int push(mori_ep_handle *h)
{
	int rc = gpu_err(gpu_push(h->api, h->d), "push context", NULL, 0);
	return rc ? set_error(h->g->c, rc, "EP: cannot make GPU %d's context current", h->d->ordinal) : MORI_OK;
}

static int load_kernels(mori_ep_handle *h, int *sm)
{
	mori_client *c = h->g->c;
	struct gpu_ctx *x;
	gpu_function copy;
	int ord = h->g->gpu_device < 0 ? 0 : h->g->gpu_device;
	int rc = gpu_copy_kernel(c, ord, &copy, sm); /* loads libmori's image on the device */
	if (rc == MORI_OK)
		rc = gpu_ctx_get(c, &x);
	if (rc == MORI_OK)
		rc = gpu_dev_get(c, x, ord, &h->d);
	if (rc)
		return rc;
	h->api = x->g;
	if ((rc = push(h)))
		return rc;
	char msg[200];
	for (int i = 0; i < (h->xnode ? K_N : K_INTRA) && rc == MORI_OK; i++)
		if (gpu_err(h->api->module_get_function(&h->fn[i], h->d->module, knames[i]), "cuModuleGetFunction", msg,
			    sizeof(msg)))
			rc = set_error(c, MORI_ENOKERNEL, "libmori's GPU image has no kernel %s (built without kernels/ep.cu?): %s",
				       knames[i], msg);
	gpu_pop(h->api);
	return rc;
}

/* The live table (kernels/ep_kernels.h): one per device, in its memory (a kernel reads its word
 * from L2; mapped host memory cost a PCIe read per block: LL dispatch at EP8 went from 117 to
 * 1292 us on the H200), allocated at the device's first mori_ep_create in its primary context,
 * which is retained for the process's life so the table is never freed. gen[] here is the host's
 * copy (slots are shared by all devices); generations are never reused. */
#define EP_LIVE_DEVS 64
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct live_dev {
	gpu_dptr tab;                /* struct mori_ep_live on that device */
	const struct gpu_api *api;
	gpu_context ctx;             /* its primary context, retained, never released */
} live_devs[EP_LIVE_DEVS];
static uint64_t live_gen[MORI_EP_LIVE_SLOTS];
static uint64_t live_next = 1;

/* Word slot of h's device table := v, synchronously (visible to every later launch). */
static int live_write(mori_ep_handle *h, int slot, uint64_t v)
{
	const struct live_dev *L = &live_devs[h->d->ordinal];
	int rc = push(h);
	if (rc)
		return rc;
	int r = h->api->memcpy_htod_async(L->tab + (gpu_dptr)slot * 8, &v, sizeof(v), NULL);
	if (!r)
		r = h->api->stream_synchronize(NULL);
	gpu_pop(h->api);
	char msg[200];
	return (rc = gpu_err(r, "write the live table", msg, sizeof(msg))) ? set_error(h->g->c, rc, "EP: %s", msg) : 0;
}

static int live_enter(mori_ep_handle *h)
{
	mori_client *c = h->g->c;
	char msg[200];
	int rc = MORI_OK, r = 0, ord = h->d ? h->d->ordinal : -1;
	if (ord < 0 || ord >= EP_LIVE_DEVS)
		return set_error(c, MORI_ENOTSUP, "EP create: device %d: at most %d devices", ord, EP_LIVE_DEVS);
	pthread_mutex_lock(&live_mu);
	struct live_dev *L = &live_devs[ord];
	if (!L->tab && !(rc = push(h))) {
		gpu_context ctx = NULL;
		gpu_dptr t = 0;
		r = h->api->primary_ctx_retain(&ctx, h->d->dev);
		if (!r && !(r = h->api->mem_alloc(&t, sizeof(struct mori_ep_live))))
			r = h->api->memset_d8_async(t, 0, sizeof(struct mori_ep_live), NULL);
		if (!r)
			r = h->api->stream_synchronize(NULL);
		gpu_pop(h->api);
		if ((rc = gpu_err(r, "allocate the live table", msg, sizeof(msg))))
			rc = set_error(c, rc, "EP create: %s", msg); /* a retained context or a block leaks: rare */
		else
			L->tab = t, L->api = h->api, L->ctx = ctx;
	}
	int slot = -1;
	for (int i = 0; rc == MORI_OK && i < MORI_EP_LIVE_SLOTS && slot < 0; i++)
		if (!live_gen[i])
			slot = i;
	if (rc == MORI_OK && slot < 0)
		rc = set_error(c, MORI_ENOMEM, "EP create: %d EP handles live in this process already", MORI_EP_LIVE_SLOTS);
	if (rc == MORI_OK) {
		h->live_slot = slot;
		h->gen = live_next++;
		if ((rc = live_write(h, slot, h->gen)) == MORI_OK)
			live_gen[slot] = h->gen;
	}
	pthread_mutex_unlock(&live_mu);
	return rc;
}

static void live_leave(mori_ep_handle *h)
{
	pthread_mutex_lock(&live_mu);
	live_write(h, h->live_slot, 0); /* later launches see it retired */
	live_gen[h->live_slot] = 0;
	pthread_mutex_unlock(&live_mu);
}

/* Read (with clear: and reset) the late-launch record of every device's live table: the last
 * generation seen in *gen, the launches summed in *count. MORI_OK or the driver's error. */
static int retired_read(mori_client *c, int clear, uint64_t *gen, uint64_t *count)
{
	uint64_t g = 0, n = 0;
	int err = 0;
	pthread_mutex_lock(&live_mu);
	for (int d = 0; d < EP_LIVE_DEVS; d++) {
		const struct live_dev *L = &live_devs[d];
		uint64_t v[2] = {0, 0}; /* late_gen, late_count */
		if (!L->tab || L->api->ctx_push_current(L->ctx))
			continue;
		gpu_dptr p = L->tab + offsetof(struct mori_ep_live, late_gen);
		int r = L->api->memcpy_dtoh_async(v, p, sizeof(v), NULL);
		if (!r)
			r = L->api->stream_synchronize(NULL);
		if (!r && clear && v[0])
			r = L->api->memset_d8_async(p, 0, sizeof(v), NULL);
		if (!r && clear && v[0])
			r = L->api->stream_synchronize(NULL);
		gpu_context tmp;
		L->api->ctx_pop_current(&tmp);
		err = err ? err : r;
		if (v[0])
			g = v[0], n += v[1];
	}
	pthread_mutex_unlock(&live_mu);
	char msg[200];
	int rc = gpu_err(err, "read the live table", msg, sizeof(msg));
	if (rc)
		return set_error(c, rc, "EP retired status: %s", msg);
	*gen = g;
	*count = n;
	return MORI_OK;
}

int mori_ep_retired_status(mori_client *c, mori_status *out)
{
	uint64_t g = 0, n = 0;
	int rc = retired_read(c, 0, &g, &n);
	if (!rc && g)
		rc = set_error(c, MORI_ESTALE, "EP: kernels of destroyed handle generation %llu ran (%llu blocks; a graph "
					       "replayed after mori_ep_destroy): they returned without touching memory",
			       (unsigned long long)g, (unsigned long long)n);
	return status_set(out, rc, -1, rc ? mori_client_last_error(c) : "");
}

int mori_ep_retired_status_clear(mori_client *c)
{
	uint64_t g = 0, n = 0;
	return retired_read(c, 1, &g, &n);
}

/* Publish x in a fixed-size symmetric area, read every rank's, decide the same on every rank. */
static int exchange(mori_ep_handle *h, const struct xchg *mine, struct xchg *all)
{
	mori_group *g = h->g;
	void *area = NULL;
	int rc = mori_shmem_calloc(g, EP_XCHG_BYTES, 256, &area);
	if (rc)
		return rc;
	rc = mori_shmem_putmem(g, area, mine, sizeof(*mine), g->my_pe);
	int brc = mori_shmem_barrier_all(g); /* every rank's entry is written */
	rc = rc ? rc : brc;
	for (int pe = 0; pe < g->n_pes && rc == MORI_OK; pe++)
		rc = mori_shmem_getmem(g, &all[pe], area, sizeof(*all), pe);
	brc = mori_shmem_barrier_all(g); /* nobody frees the area while a peer still reads it */
	rc = rc ? rc : brc;
	int frc = mori_shmem_free(g, area);
	return rc ? rc : frc;
}

static int agree(mori_ep_handle *h, const struct xchg *all)
{
	mori_client *c = h->g->c;
	char msg[300];
	int n = h->g->n_pes;
	for (int pe = 0; pe < n; pe++) {
		if (all[pe].kernel_rc)
			return set_error(c, all[pe].kernel_rc, "EP create: rank %d has no EP kernels (%s)", pe,
					 mori_strerror(all[pe].kernel_rc));
		if (ep_config_valid(&all[pe].cfg, msg, sizeof(msg)))
			return set_error(c, MORI_EINVAL, "EP create: rank %d's config: %s", pe, msg);
		if (all[pe].cfg.rank != pe)
			return set_error(c, MORI_EINVAL, "EP create: PE %d passed rank %d", pe, all[pe].cfg.rank);
	}
	for (int pe = 1; pe < n; pe++)
		if (ep_config_diff(&all[0].cfg, &all[pe].cfg, msg, sizeof(msg), 0, pe))
			return set_error(c, MORI_EINVAL, "EP create: %s", msg);
	return MORI_OK;
}

int mori_ep_create(mori_group *g, const mori_ep_config *caller_cfg, mori_ep_handle **out)
{
	if (!g || !caller_cfg || !out)
		return set_error(g ? g->c : NULL, MORI_EINVAL, "EP create: NULL argument");
	if (shmem_check(g)) return MORI_ESTALE; /* a child after fork: the parent's */
	*out = NULL;
	mori_ep_config own;
	const mori_ep_config *cfg = &own;
	char why[200];
	int trc = ep_config_take(caller_cfg, &own, why, sizeof(why));
	if (trc)
		return set_error(g->c, trc, "EP create: %s", why);
	if (g->kind != MORI_MEM_VRAM)
		return set_error(g->c, MORI_ENOTSUP, "EP create: group '%s' has a host heap; EP needs a VRAM heap", g->name);
	mori_ep_handle *h = calloc(1, sizeof(*h));
	if (!h)
		return set_error(g->c, MORI_ENOMEM, "out of memory");
	h->g = g;
	struct xchg mine = {.cfg = *cfg}, *all = calloc((size_t)g->n_pes, sizeof(*all));
	/* a group that spans nodes takes the internode kernels of the asked layout (every rank sees the
	 * same group, so every rank resolves alike; the exchange below compares the result) */
	if (g->team_n != g->n_pes && (cfg->kernel_type == MORI_EP_NORMAL || cfg->kernel_type == MORI_EP_LOW_LATENCY))
		mine.cfg.kernel_type = cfg->kernel_type == MORI_EP_NORMAL ? MORI_EP_INTERNODE : MORI_EP_INTERNODE_LL;
	h->xnode = ep_xnode(mine.cfg.kernel_type);
	if (!all) {
		free(h);
		return set_error(g->c, MORI_ENOMEM, "out of memory");
	}
	int sm = 0;
	mine.kernel_rc = load_kernels(h, &sm);
	mine.sm_count = sm;
	/* launch parameters left 0: the tuning table's for this GPU's architecture and the shape */
	ep_tune_resolve(&mine.cfg, h->d ? h->d->arch : "unknown", sm, ep_tune_rules, ep_tune_nrules, NULL, 0);
	if (!mine.cfg.timeout_us)
		mine.cfg.timeout_us = EP_DEFAULT_TIMEOUT_US;
	char msg[300];
	int local = MORI_OK;
	if (mine.cfg.rank != g->my_pe || mine.cfg.world_size != g->n_pes) { /* still take part: peers wait */
		snprintf(msg, sizeof(msg), "rank %d / world_size %d, but this PE is %d of %d", mine.cfg.rank,
			 mine.cfg.world_size, g->my_pe, g->n_pes);
		local = MORI_EINVAL;
		mine.cfg.rank = -1; /* the peers see an invalid config from this rank and refuse too */
	}
	int rc = exchange(h, &mine, all);
	if (rc == MORI_OK)
		rc = local ? set_error(g->c, local, "EP create: %s", msg) : agree(h, all);
	free(all);
	if (rc == MORI_OK)
		rc = live_enter(h);
	if (rc == MORI_OK) {
		h->cfg = mine.cfg;
		ep_layout(&h->cfg, &h->L);
		if (h->xnode)
			epx_layout(&h->cfg, &h->L, &h->X);
		h->slot_bytes = ep_slot_bytes(&h->cfg);
		h->nslots = ep_in_flight(&h->cfg);
		/* zeroed on every PE, then a barrier: no rank writes a peer's block before it is zero */
		rc = mori_shmem_calloc(g, h->slot_bytes * (uint64_t)h->nslots, 256, (void **)&h->block);
		if (rc)
			live_leave(h);
	}
	if (rc) {
		free(h);
		return rc;
	}
	h->st = (uint64_t)(uintptr_t)mori_shmem_state(g);
	shmem_hold(g); /* g's struct outlives a leave while h lives (shmem_int.h) */
	*out = h; /* the caller's until mori_ep_destroy */
	return MORI_OK;
}

int mori_ep_destroy(mori_ep_handle *h)
{
	if (!h)
		return MORI_OK;
	mori_group *g = h->g;
	int left = shmem_left(g);
	if (left) { /* the group left first: its heap (our block) went with it; not collective now */
		if (left == SHMEM_LEFT)
			live_leave(h); /* a later replay returns at once */
		free(h);
		shmem_release(g);
		return MORI_OK;
	}
	if (shmem_check(g)) return MORI_ESTALE; /* a child after fork: the parent's */
	int rc = mori_shmem_barrier_all(g); /* no peer still writes our block */
	live_leave(h);                       /* before the free: a later replay returns at once */
	int frc = mori_shmem_free(g, h->block);
	free(h);
	shmem_release(g);
	return rc ? rc : frc;
}

static void recv_of(const mori_ep_handle *h, int slot, mori_ep_recv *o)
{
	uint8_t *b = slot_base(h, slot);
	o->tokens = b + h->L.tok;
	o->weights = (float *)(b + h->L.w);
	o->indices = (int32_t *)(b + h->L.idx);
	o->scales = h->cfg.scale_dim ? b + h->L.scale : NULL;
	o->src_pos = (int32_t *)(b + h->L.src);
	o->count = (int32_t *)(b + h->L.count);
	o->max_recv = ep_ll(h->cfg.kernel_type) ? h->L.recv_slots / h->cfg.num_experts_per_rank : h->L.recv_slots;
	o->combine_input = b + h->L.cin;
	o->slot = slot;
}

int mori_ep_recv_buffers(const mori_ep_handle *h, mori_ep_recv *o)
{
	if (!h || !o)
		return MORI_EINVAL;
	recv_of(h, next_slot(h), o);
	return MORI_OK;
}

static void fill(const mori_ep_handle *h, struct mori_ep_kargs *a, int slot, int num_tokens)
{
	memset(a, 0, sizeof(*a));
	a->st = h->st;
	a->sym = (uint64_t)(slot_base(h, slot) - (uint8_t *)(uintptr_t)h->g->base);
	a->L = h->L;
	a->timeout_ns = (uint64_t)h->cfg.timeout_us * 1000;
	a->rank = h->cfg.rank;
	a->world = h->cfg.world_size;
	a->hidden = h->cfg.hidden_dim;
	a->max_tok = h->cfg.max_num_inp_token_per_rank;
	a->epr = h->cfg.num_experts_per_rank;
	a->topk = h->cfg.num_experts_per_token;
	a->mode = ep_ll(h->cfg.kernel_type) ? MORI_EP_KMODE_LL : 0; /* the layout; internode: h->xnode */
	a->nblocks = h->cfg.block_num;
	a->num_tokens = num_tokens;
	a->scale_bytes = h->cfg.scale_dim * h->cfg.scale_type_size;
	a->live = (uint64_t)live_devs[h->d->ordinal].tab;
	a->gen = h->gen;
	a->live_slot = h->live_slot;
}

static int launch(mori_ep_handle *h, int k, unsigned grid, unsigned threads, void *stream, void **params)
{
	int rc = push(h);
	if (rc)
		return rc;
	char msg[200];
	rc = gpu_err(h->api->launch_kernel(h->fn[k], grid, 1, 1, threads, 1, 1, 0, stream, params, NULL), knames[k], msg,
		     sizeof(msg));
	gpu_pop(h->api);
	return rc ? set_error(h->g->c, rc, "EP: launch %s", msg) : MORI_OK;
}

static int misaligned(const void *p) { return ((uintptr_t)p & 15) != 0; }

/* The internode kernels (kernels/ep_internode.cu), in stream order: dispatch is layout, prefix
 * (grid 1), send, post (grid 1, a thread per rank: headers and signals, the proxy for ranks of
 * other nodes), recv (grid 1: waits, bases, counts, epoch), copy (the landed records into the
 * receive slots); combine is send, post, reduce. */
static int xdispatch(mori_ep_handle *h, const struct mori_ep_kargs *a, unsigned lthr, void *stream)
{
	struct mori_epx_kargs x = {.a = *a, .X = h->X};
	void *params[] = {&x};
	unsigned grid = (unsigned)h->cfg.block_num, thr = (unsigned)h->cfg.warp_num_per_block * 32;
	int rc;
	if ((rc = launch(h, K_XLAYOUT, (unsigned)h->L.bins, lthr, stream, params)) ||
	    (rc = launch(h, K_XPREFIX, 1, 256, stream, params)) || (rc = launch(h, K_XDSEND, grid, thr, stream, params)) ||
	    (rc = launch(h, K_XDPOST, 1, 32, stream, params)) || (rc = launch(h, K_XDRECV, 1, 256, stream, params)) ||
	    (rc = launch(h, K_XDCOPY, grid, thr, stream, params)))
		return rc;
	return MORI_OK;
}

static int xcombine(mori_ep_handle *h, const struct mori_ep_kargs *a, void *stream)
{
	struct mori_epx_kargs x = {.a = *a, .X = h->X};
	x.X.crow = (a->tok_bytes + 15) & ~15; /* this call's rows only cross nodes, not token_stride */
	void *params[] = {&x};
	unsigned grid = (unsigned)h->cfg.block_num, thr = (unsigned)h->cfg.warp_num_per_block * 32;
	int rc;
	if ((rc = launch(h, K_XCSEND, grid, thr, stream, params)) || (rc = launch(h, K_XCPOST, 1, 32, stream, params)) ||
	    (rc = launch(h, K_XCREDUCE, grid, thr, stream, params)))
		return rc;
	return MORI_OK;
}

int mori_ep_dispatch(mori_ep_handle *h, const void *input, const float *weights, const void *scales,
		     const int32_t *indices, int num_tokens, void *stream, mori_ep_recv *out)
{
	if (!h)
		return MORI_EINVAL;
	if (shmem_check(h->g)) return MORI_ESTALE; /* a child after fork: the parent's */
	mori_client *c = h->g->c;
	int rc = shmem_abort_status(h->g);
	if (rc)
		return rc;
	if (h->ndisp - h->ncomb >= (uint64_t)h->nslots)
		return set_error(c, MORI_EINVAL, "EP dispatch: %d dispatch%s in flight, num_in_flight is %d: combine first",
				 h->nslots, h->nslots == 1 ? "" : "es", h->nslots);
	if (num_tokens < 0 || num_tokens > h->cfg.max_num_inp_token_per_rank)
		return set_error(c, MORI_EINVAL, "EP dispatch: %d tokens, more than max_num_inp_token_per_rank %d",
				 num_tokens, h->cfg.max_num_inp_token_per_rank);
	if (num_tokens && (!input || !indices))
		return set_error(c, MORI_EINVAL, "EP dispatch: %s is NULL", input ? "indices" : "input");
	if (num_tokens && h->cfg.scale_dim && !scales && !h->cfg.quant_type)
		return set_error(c, MORI_EINVAL, "EP dispatch: scale_dim is %d but scales is NULL", h->cfg.scale_dim);
	if (h->cfg.quant_type && scales)
		return set_error(c, MORI_EINVAL, "EP dispatch: quant_type fp8 computes the scales; pass scales NULL");
	if (misaligned(input))
		return set_error(c, MORI_EINVAL, "EP dispatch: input %p is not 16-byte aligned", input);
	if (((uintptr_t)scales & 3) || ((uintptr_t)weights & 3) || ((uintptr_t)indices & 3))
		return set_error(c, MORI_EINVAL, "EP dispatch: weights, scales or indices not 4-byte aligned");
	struct mori_ep_kargs a;
	const int slot = (int)(h->ndisp % (uint64_t)h->nslots);
	fill(h, &a, slot, num_tokens);
	a.input = (uint64_t)(uintptr_t)input;
	a.weights = (uint64_t)(uintptr_t)weights;
	a.scales = (uint64_t)(uintptr_t)scales;
	a.indices = (uint64_t)(uintptr_t)indices;
	a.tok_bytes = h->cfg.hidden_dim * ep_dtype_size(h->cfg.data_type);
	a.quant = h->cfg.quant_type;
	void *params[] = {&a};
	unsigned lthr = num_tokens > 256 ? MORI_EP_LAYOUT_THREADS : 256; /* a block scans the tokens */
	if (h->xnode) {
		if ((rc = xdispatch(h, &a, lthr, stream)))
			return rc;
	} else if ((rc = launch(h, K_LAYOUT, (unsigned)h->L.bins, lthr, stream, params)) ||
	    (rc = launch(h, K_DSEND, (unsigned)h->cfg.block_num, (unsigned)h->cfg.warp_num_per_block * 32, stream,
			 params)) ||
	    (rc = launch(h, K_DRECV, 1, 256, stream, params)))
		return rc; /* a launch that fails leaves the GPU context broken anyway */
	h->ntok[slot] = num_tokens;
	h->ndisp++;
	if (out)
		recv_of(h, slot, out);
	return MORI_OK;
}

void *mori_ep_get_registered_combine_input_buffer(const mori_ep_handle *h)
{
	return h ? slot_base(h, next_slot(h)) + h->L.cin : NULL;
}

int mori_ep_combine(mori_ep_handle *h, mori_dtype dtype, const void *expert_out, const float *weights,
		    const int32_t *indices, void *out, void *stream)
{
	if (!h)
		return MORI_EINVAL;
	if (shmem_check(h->g)) return MORI_ESTALE; /* a child after fork: the parent's */
	mori_client *c = h->g->c;
	int rc = shmem_abort_status(h->g);
	if (rc)
		return rc;
	if (h->ndisp == h->ncomb)
		return set_error(c, MORI_EINVAL, "EP combine: no dispatch to combine (every dispatch has been combined)");
	const int slot = (int)(h->ncomb % (uint64_t)h->nslots), ntok = h->ntok[slot];
	int es = dtype == MORI_BFLOAT16 || dtype == MORI_FLOAT32 ? ep_dtype_size(dtype) : 0;
	if (!es)
		return set_error(c, MORI_EINVAL, "EP combine: dtype %d is neither bf16 (%d) nor fp32 (%d)", (int)dtype,
				 MORI_BFLOAT16, MORI_FLOAT32);
	if (es > h->cfg.max_token_type_size)
		return set_error(c, MORI_EINVAL, "EP combine: %d-byte elements exceed max_token_type_size %d", es,
				 h->cfg.max_token_type_size);
	if ((h->cfg.hidden_dim * es) % 16) /* the kernels move rows in 16-byte vectors */
		return set_error(c, MORI_EINVAL, "EP combine: hidden_dim %d x %d bytes is not a multiple of 16 bytes",
				 h->cfg.hidden_dim, es);
	if (!expert_out || (ntok && !out))
		return set_error(c, MORI_EINVAL, "EP combine: %s is NULL", expert_out ? "out" : "expert_out");
	if (misaligned(expert_out) || misaligned(out))
		return set_error(c, MORI_EINVAL, "EP combine: expert_out or out is not 16-byte aligned");
	const uint8_t *p = (const uint8_t *)indices;
	for (int s = 0; p && s < h->nslots; s++) {
		const uint8_t *ri = slot_base(h, s) + h->L.idx;
		if (p >= ri && p < ri + (size_t)h->L.recv_slots * (size_t)h->cfg.num_experts_per_token * 4)
			return set_error(c, MORI_EINVAL, "EP combine: indices are dispatch's received indices; combine takes "
							 "the caller's own [num_tokens, K] routing (as passed to dispatch)");
	}
	struct mori_ep_kargs a;
	fill(h, &a, slot, ntok);
	a.input = (uint64_t)(uintptr_t)expert_out;
	a.weights = (uint64_t)(uintptr_t)weights;
	a.indices = (uint64_t)(uintptr_t)indices;
	a.out = (uint64_t)(uintptr_t)out;
	a.tok_bytes = h->cfg.hidden_dim * es;
	a.dtype = dtype;
	a.pull = expert_out == (const void *)(slot_base(h, slot) + h->L.cin); /* the rows are read where they are */
	void *params[] = {&a};
	unsigned grid = (unsigned)h->cfg.block_num, thr = (unsigned)h->cfg.warp_num_per_block * 32;
	if (h->xnode) {
		if ((rc = xcombine(h, &a, stream)))
			return rc;
	} else if ((rc = launch(h, K_CSEND, a.pull ? 1 : grid, a.pull ? 64 : thr, stream, params)) ||
	    (rc = launch(h, K_CREDUCE, grid, thr, stream, params)))
		return rc;
	h->ncomb++;
	return MORI_OK;
}

int mori_ep_get_dispatch_layout(mori_ep_handle *h, const int32_t *indices, int num_tokens, int32_t *per_rank,
				int32_t *per_expert, uint8_t *in_rank, void *stream)
{
	if (!h)
		return MORI_EINVAL;
	if (shmem_check(h->g)) return MORI_ESTALE; /* a child after fork: the parent's */
	if (num_tokens < 0 || num_tokens > h->cfg.max_num_inp_token_per_rank)
		return set_error(h->g->c, MORI_EINVAL, "EP layout: %d tokens, more than max_num_inp_token_per_rank %d",
				 num_tokens, h->cfg.max_num_inp_token_per_rank);
	if (num_tokens && !indices)
		return set_error(h->g->c, MORI_EINVAL, "EP layout: indices is NULL");
	int W = h->cfg.world_size, epr = h->cfg.num_experts_per_rank, K = h->cfg.num_experts_per_token;
	int rc = push(h);
	if (rc)
		return rc;
	int r = 0;
	if (per_rank)
		r = h->api->memset_d8_async((gpu_dptr)(uintptr_t)per_rank, 0, sizeof(int32_t) * (size_t)W, stream);
	if (!r && per_expert)
		r = h->api->memset_d8_async((gpu_dptr)(uintptr_t)per_expert, 0, sizeof(int32_t) * (size_t)W * epr, stream);
	gpu_pop(h->api);
	char msg[200];
	if ((rc = gpu_err(r, "memset", msg, sizeof(msg))))
		return set_error(h->g->c, rc, "EP layout: %s", msg);
	if (!num_tokens)
		return MORI_OK;
	void *params[] = {&indices, &num_tokens, &K, &W, &epr, &per_rank, &per_expert, &in_rank};
	return launch(h, K_QUERY, (unsigned)(num_tokens + 255) / 256, 256, stream, params);
}

/* Read (with clear: and reset) every slot's status word; the first set one into s. MORI_OK or the
 * driver's error. */
static int status_word(mori_ep_handle *h, int clear, int32_t s[4])
{
	mori_client *c = h->g->c;
	int rc = push(h);
	if (rc)
		return rc;
	int r = 0;
	for (int sl = 0; sl < h->nslots && !r; sl++) { /* each slot's word; the first set one is reported */
		int32_t v[4] = {0};
		gpu_dptr p = (gpu_dptr)(uintptr_t)(slot_base(h, sl) + h->L.status);
		r = h->api->memcpy_dtoh_async(v, p, sizeof(v), NULL);
		if (!r)
			r = h->api->stream_synchronize(NULL);
		if (!r && clear && v[0])
			r = h->api->memset_d8_async(p, 0, sizeof(v), NULL);
		if (!r && clear && v[0])
			r = h->api->stream_synchronize(NULL);
		if (!s[0])
			memcpy(s, v, sizeof(v));
	}
	gpu_pop(h->api);
	char msg[200];
	if ((rc = gpu_err(r, "read the status", msg, sizeof(msg))))
		return set_error(c, rc, "EP status: %s", msg);
	return MORI_OK;
}

/* The error a set status word s records, with its detail as the client's last error. */
static int status_report(mori_ep_handle *h, const int32_t s[4])
{
	mori_client *c = h->g->c;
	int K = h->cfg.num_experts_per_token;
	switch (s[1]) {
	case MORI_EP_ERR_INDEX:
		return set_error(c, s[0], "EP dispatch: token %d slot %d: expert index %d is outside -1..%d (skipped)",
				 s[2] / K, s[2] % K, s[3], h->cfg.world_size * h->cfg.num_experts_per_rank - 1);
	case MORI_EP_ERR_ROUTE:
		return set_error(c, s[0], "EP combine: token %d slot %d: indices has %d, not dispatch's routing (the sums "
					  "follow dispatch's)", s[2] / K, s[2] % K, s[3]);
	case MORI_EP_ERR_TIMEOUT:
		if (s[2] >= MORI_EPX_W_DPOST) /* the internode kernels' */
			return set_error(c, s[0], "EP (internode): %s rank %d passed the %lld us deadline (no abort was seen)",
					 s[2] == MORI_EPX_W_DRECV ? "dispatch's wait for the chunk of" : "combine's wait for the chunk of",
					 s[3], (long long)h->cfg.timeout_us);
		return set_error(c, s[0], "EP: a wait of kernel %d on rank %d passed the %lld us deadline", s[2], s[3],
				 (long long)h->cfg.timeout_us);
	default:
		if (s[2] >= MORI_EPX_W_DPOST) { /* the internode kernels' */
			static const char *const what[] = {"dispatch's proxy post to", "dispatch's wait for the chunk of",
							   "combine's proxy post to", "combine's wait for the chunk of",
							   "a malformed chunk (epoch or counts) from"};
			int i = s[2] - MORI_EPX_W_DPOST;
			return set_error(c, s[0], "EP (internode): %s rank %d ended: %s (the group's abort word or the proxy)",
					 i >= 0 && i < 5 ? what[i] : "a wait on", s[3], mori_strerror(s[0]));
		}
		return set_error(c, s[0], "EP: kernel %d's wait on rank %d ended: %s", s[2], s[3], mori_strerror(s[0]));
	}
}

int mori_ep_status(mori_ep_handle *h, mori_status *out)
{
	if (!h)
		return status_set(out, MORI_EINVAL, -1, "NULL EP handle");
	if (shmem_check(h->g)) /* a child after fork: the parent's */
		return status_set(out, MORI_ESTALE, -1, mori_client_last_error(h->g->c));
	int32_t s[4] = {0};
	int rc = status_word(h, 0, s);
	if (!rc && s[0])
		rc = status_report(h, s);
	if (rc)
		return status_set(out, rc, -1, mori_client_last_error(h->g->c));
	return mori_shmem_status(h->g, out);
}

int mori_ep_status_clear(mori_ep_handle *h)
{
	if (!h)
		return MORI_EINVAL;
	if (shmem_check(h->g))
		return MORI_ESTALE;
	int32_t s[4] = {0};
	return status_word(h, 1, s);
}
