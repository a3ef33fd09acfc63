/* libmori GPU copies: the embedded batched copy kernel (kernels/copy.cu), loaded per device at
 * first use; batches staged through a pinned descriptor ring and launched in slices on the
 * caller's stream (or an internal one), uploads overlapping earlier slices' copies; completion
 * by an event the library polls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/mori_copy.h"
#include "gpu_int.h"
#include "log.h"

_Static_assert(sizeof(struct mori_copy_desc) == sizeof(mori_desc), "descriptors are copied as is");
_Static_assert(offsetof(mori_desc, local_offset) == offsetof(struct mori_copy_desc, a_off) &&
	       offsetof(mori_desc, remote_offset) == offsetof(struct mori_copy_desc, b_off) &&
	       offsetof(mori_desc, length) == offsetof(struct mori_copy_desc, len), "descriptor layout");

uint32_t gpu_copy_chunk_shift(uint64_t total, int sm_count)
{
	/* A warp copies one chunk (kernels/copy.cu). 8 KiB chunks measured best on the H200, for
	 * pages and for one contiguous range alike (MORI_COPY_MAX_CHUNK_SHIFT); smaller ones only
	 * when the batch would not give every resident warp a few chunks (latency). */
	uint64_t warps = (uint64_t)(sm_count > 0 ? sm_count : 1) * MORI_COPY_BLOCKS_PER_SM *
			 (MORI_COPY_BLOCK_THREADS / 32) * MORI_COPY_CHUNKS_PER_WARP;
	uint32_t s = MORI_COPY_MIN_CHUNK_SHIFT;
	while (s < MORI_COPY_MAX_CHUNK_SHIFT && (total >> (s + 1)) >= warps)
		s++;
	return s;
}

unsigned gpu_copy_grid(uint64_t total_chunks, int sm_count)
{
	/* A warp per chunk: the block scheduler hands out the tail (fewer warps a block on wave64:
	 * the kernel loops over what the grid leaves). */
	uint64_t warps_per_block = MORI_COPY_BLOCK_THREADS / 32;
	uint64_t want = (total_chunks + warps_per_block - 1) / warps_per_block;
	(void)sm_count;
	return (unsigned)(want < 1 ? 1 : want > INT32_MAX ? INT32_MAX : want);
}

int gpu_copy_kernel(mori_client *c, int ordinal, gpu_function *fn, int *sm_count)
{
	struct gpu_ctx *x;
	struct gpu_dev *d;
	int rc = gpu_ctx_get(c, &x);
	if (rc || (rc = gpu_dev_get(c, x, ordinal, &d)))
		return rc;
	pthread_mutex_lock(&d->lock);
	gpu_push(x->g, d);
	rc = gpu_kernel_load(c, x->g, d);
	gpu_pop(x->g);
	pthread_mutex_unlock(&d->lock);
	if (rc == MORI_OK) {
		*fn = d->copy_fn;
		*sm_count = d->sm_count;
	}
	return rc;
}

/* ---- transfers ---- */

static int side_addr(mori_client *c, struct gpu_ctx *x, struct gpu_dev *d, mori_mem *m, gpu_dptr *out)
{
	if (m->kind == MORI_MEM_VRAM) {
		if (!m->dptr)
			return set_error(c, MORI_EINVAL, "VRAM region %llu is not mapped in this process",
					 (unsigned long long)m->region_id);
		*out = m->dptr;
		return MORI_OK;
	}
	return gpu_host_dptr(c, x, d, m, out);
}

static int launch(mori_client *c, const struct gpu_api *g, struct gpu_dev *d, struct mori_copy_args *a,
		  gpu_stream s)
{
	void *params[] = {a};
	unsigned grid = gpu_copy_grid(a->total_chunks, d->sm_count);
	gpu_function fn = gpu_viz_kernel(d, &a->viz);
	unsigned cap = (unsigned)(d->sm_count > 0 ? d->sm_count : 1) * MORI_COPY_BLOCKS_PER_SM;
	if (fn != d->copy_fn && grid > cap)
		grid = cap; /* traced: one trace ring a resident warp (gpu_viz.c); the kernel loops */
	char msg[160];
	int rc = gpu_err(g->launch_kernel(fn, grid, 1, 1, MORI_COPY_BLOCK_THREADS, 1, 1, 0, s, params, NULL),
			 "cuLaunchKernel", msg, sizeof(msg));
	return rc ? set_error(c, rc, "GPU copy: %s", msg) : MORI_OK;
}

/* What one submission copies: n descriptors, either the caller's array or indices into a
 * prepared list whose descriptors are already on the GPU (then only indices are staged). */
struct batch {
	const mori_desc *descs;  /* host descriptors: the caller's, or the list's copy */
	const uint32_t *idx;     /* indices into descs, or NULL */
	size_t n;
	size_t list_n;           /* list: its length (indices are checked against it) */
	gpu_dptr dev_descs;      /* list: its descriptors on the GPU; 0 for a plain batch */
	uint64_t uniform_len;    /* list: every descriptor has this length; 0 if they differ */
};

static inline const mori_desc *bdesc(const struct batch *b, size_t j)
{
	return &b->descs[b->idx ? b->idx[j] : j];
}

/* Entry j of a batch of descriptors (for a list without a GPU copy, its index first). */
static inline int entry_check(mori_client *c, const mori_mem *l, const mori_mem *r, const struct batch *b, size_t j)
{
	if (b->idx && b->idx[j] >= b->list_n)
		return set_error(c, MORI_ERANGE, "GPU copy: index %u at %zu >= list length %zu", b->idx[j], j, b->list_n);
	return desc_check(c, l, r, bdesc(b, j), j);
}

/* Check entries [i, i + k) (descriptors against both regions, or indices against the list,
 * whose descriptors were checked at prep); sum their bytes. Indices are checked in one vectorised
 * pass (desc_check_idx), which also stages them to `stage` when given. */
static int check_slice(mori_client *c, const mori_mem *l, const mori_mem *r, const struct batch *b, size_t i,
		       size_t k, uint32_t *stage, uint64_t *total)
{
	uint64_t t = 0;
	if (b->dev_descs) {
		int rc = desc_check_idx(c, "GPU copy", b->idx, i, i + k, b->list_n, stage);
		if (rc)
			return rc;
		if (b->uniform_len) {
			*total = k * b->uniform_len;
			return MORI_OK;
		}
		for (size_t j = i; j < i + k; j++)
			t += bdesc(b, j)->length;
		*total = t;
		return MORI_OK;
	}
	for (size_t j = i; j < i + k; j++) {
		int rc = entry_check(c, l, r, b, j);
		if (rc)
			return rc;
		t += bdesc(b, j)->length;
	}
	*total = t;
	return MORI_OK;
}

static inline uint64_t chunks_of(uint64_t len, uint32_t shift)
{
	return (len + (1ull << shift) - 1) >> shift;
}

/* Chunking of entries [i, i + k) as one launch: the shift, and either a uniform chunk count
 * per descriptor or the need for a first-chunk table (*uniform = 0). Returns the chunk count. */
static uint64_t plan_chunks(const struct batch *b, size_t i, size_t k, uint64_t total, int sm, uint32_t *shift,
			    uint32_t *uniform)
{
	*shift = gpu_copy_chunk_shift(total, sm);
	if (b->uniform_len) {
		uint64_t cj = chunks_of(b->uniform_len, *shift);
		*uniform = cj <= UINT32_MAX ? (uint32_t)cj : 0;
		return k * cj;
	}
	uint64_t chunks = 0, first = chunks_of(bdesc(b, i)->length, *shift);
	int same = 1;
	for (size_t j = i; j < i + k; j++) {
		uint64_t cj = chunks_of(bdesc(b, j)->length, *shift);
		same &= cj == first;
		chunks += cj;
	}
	*uniform = same && first <= UINT32_MAX ? (uint32_t)first : 0;
	return chunks;
}

/* Slice [i, i + k) is staged at ring offset off (h its host address, dbytes its indices or
 * descriptors): the chunking, and where the kernel reads it. Uniform chunk counts (KV pages) are
 * read in place from the pinned ring, with no upload; otherwise a first-chunk table follows the
 * staged bytes and both are uploaded to the ring's device mirror, which the copy stream waits for. */
static int slice_place(mori_client *c, const struct gpu_api *g, struct gpu_dev *d, struct mori_copy_args *a,
		       const struct batch *b, size_t i, size_t k, uint64_t off, uint64_t dbytes, gpu_stream s)
{
	uint8_t *h = d->ring_host + off;
	a->first_chunk = 0;
	a->n = (uint32_t)k;
	gpu_dptr at = (a->uniform ? d->ring_zc : d->ring_dev) + off;
	*(b->dev_descs ? &a->index : &a->descs) = at;
	if (a->uniform)
		return MORI_OK;
	uint32_t *first = (uint32_t *)(h + dbytes), acc = 0;
	for (size_t j = 0; j < k; j++) {
		first[j] = acc;
		acc += (uint32_t)chunks_of(bdesc(b, i + j)->length, a->chunk_shift);
	}
	first[k] = acc;
	a->first_chunk = at + dbytes;
	uint64_t need = dbytes + (k + 1) * sizeof(uint32_t);
	char msg[160];
	int rc = gpu_err(g->memcpy_htod_async(at, h, need, d->upload), "upload descriptors", msg, sizeof(msg));
	if (rc == MORI_OK)
		rc = gpu_err(g->event_record(d->upload_ev, d->upload), "cuEventRecord", msg, sizeof(msg));
	if (rc == MORI_OK)
		rc = gpu_err(g->stream_wait_event(s, d->upload_ev, 0), "cuStreamWaitEvent", msg, sizeof(msg));
	return rc ? set_error(c, rc, "GPU copy: %s", msg) : MORI_OK;
}

/* Stage entries [i, i + k) at h: check them (descriptors against both regions, or indices
 * against the list) and copy them, in one pass; sum their bytes and find their chunking. */
static int slice_stage(mori_client *c, struct gpu_dev *d, mori_mem *l, mori_mem *r, struct mori_copy_args *a,
		       const struct batch *b, size_t i, size_t k, uint8_t *h, uint64_t *total, uint64_t *chunks)
{
	int rc;
	uint64_t t = 0, mn = UINT64_MAX, mx = 0;
	if (b->dev_descs) {
		if ((rc = check_slice(c, l, r, b, i, k, (uint32_t *)h, &t))) /* checked and staged in one pass */
			return rc;
		a->descs = b->dev_descs;
	} else {
		/* one pass: check, sum and stage (the CPU is the bottleneck of big batches) */
		struct mori_copy_desc *o = (struct mori_copy_desc *)h;
		for (size_t j = 0; j < k; j++) {
			if ((rc = entry_check(c, l, r, b, i + j)))
				return rc;
			const mori_desc *e = bdesc(b, i + j);
			uint64_t len = e->length;
			t += len;
			mn = len < mn ? len : mn;
			mx = len > mx ? len : mx;
			o[j] = (struct mori_copy_desc){e->local_offset, e->remote_offset, len};
		}
		a->index = 0;
	}
	*total = t;
	a->chunk_shift = gpu_copy_chunk_shift(t, d->sm_count);
	if (!b->dev_descs && chunks_of(mn, a->chunk_shift) == chunks_of(mx, a->chunk_shift) &&
	    chunks_of(mx, a->chunk_shift) <= UINT32_MAX) {
		a->uniform = (uint32_t)chunks_of(mx, a->chunk_shift); /* no second pass */
		*chunks = k * a->uniform;
	} else {
		*chunks = plan_chunks(b, i, k, t, d->sm_count, &a->chunk_shift, &a->uniform);
	}
	/* Uniform slices are read in place from pinned host memory (slice_place): when many blocks
	 * read one descriptor there at once, each read waits (64 KiB pages in 2 KiB chunks: 37 % of
	 * the copy rate on the H200, 96 % in 8 KiB ones). Two chunks a descriptor at most. */
	uint64_t len = b->dev_descs ? b->uniform_len : mx; /* 0: a list of mixed lengths, unknown */
	while (len && a->uniform > 2 && a->chunk_shift < MORI_COPY_MAX_CHUNK_SHIFT) {
		a->chunk_shift++;
		a->uniform = (uint32_t)chunks_of(len, a->chunk_shift);
		*chunks = k * a->uniform;
	}
	if (!a->uniform && *chunks > UINT32_MAX)
		return set_error(c, MORI_EINVAL, "GPU copy: slice of %llu chunks", (unsigned long long)*chunks);
	a->total_chunks = *chunks;
	return MORI_OK;
}

/* `to` waits for what `from` has queued so far (through ev). */
static int fork_join(mori_client *c, const struct gpu_api *g, gpu_event ev, gpu_stream from, gpu_stream to)
{
	char msg[160];
	int rc = gpu_err(g->event_record(ev, from), "cuEventRecord", msg, sizeof(msg));
	if (rc == MORI_OK)
		rc = gpu_err(g->stream_wait_event(to, ev, 0), "cuStreamWaitEvent", msg, sizeof(msg));
	return rc ? set_error(c, rc, "GPU copy: %s", msg) : MORI_OK;
}

/* Large batches go in slices, each checked and staged into the ring by the CPU while the GPU
 * copies the slices before it (nothing is checked twice: a bad entry fails the batch when its
 * slice is staged, after earlier slices were launched). The first slices are small so the GPU
 * starts early, then they grow: by 4 for a list's indices (staging one costs the CPU a
 * fraction of a page's copy), by 3/2 for descriptors (on the H200's host, staging a
 * descriptor takes two thirds of a 16 KiB page's copy), up to GPU_SLICE_BYTES. *total: the
 * bytes of the slices launched. */
static int launch_staged(mori_client *c, const struct gpu_api *g, struct gpu_dev *d, mori_mem *l, mori_mem *r,
			 struct mori_copy_args *a, const struct batch *b, gpu_stream s, uint64_t deadline,
			 uint64_t *total)
{
	char msg[160];
	int rc = MORI_OK;
	uint64_t each = b->dev_descs ? sizeof(uint32_t) : sizeof(struct mori_copy_desc);
	size_t k = 0, next = GPU_FIRST_SLICE_DESCS, most = GPU_SLICE_BYTES / each, slice = 0;
	int forked = 0;
	*total = 0;
	for (size_t i = 0; i < b->n && rc == MORI_OK; i += k, slice++) {
		/* Odd slices run on stream2, so a slice's last blocks overlap the next one's first
		 * (a small slice alone leaves the GPU half idle: 16 MiB took 35 us on the H200);
		 * stream2 starts after what the batch's stream held before the batch. Only when
		 * stream2 is idle or was last forked from this same stream: the join must not make
		 * this stream wait for another one's batch. */
		k = b->n - i < next ? b->n - i : next;
		if (slice == 0 && k < b->n && (d->stream2_from == s || g->stream_query(d->stream2) == GPU_SUCCESS)) {
			if ((rc = fork_join(c, g, d->fork_ev, s, d->stream2)))
				break;
			forked = 1;
			d->stream2_from = s;
		}
		gpu_stream ss = forked && (slice & 1) ? d->stream2 : s;
		next = b->dev_descs ? next * 4 : next + next / 2;
		next = next < most ? next : most;
		uint64_t dbytes = ((uint64_t)k * each + 15) & ~15ull;
		/* room for a first-chunk table always: whether it is needed is known after staging */
		uint64_t need = dbytes + (k + 1) * sizeof(uint32_t);
		uint64_t off = 0, head_before = d->ring_head, bytes = 0, chunks = 0;
		gpu_event done = NULL;
		if ((rc = gpu_err(gpu_ev_get(g, d, &done), "cuEventCreate", msg, sizeof(msg)))) {
			rc = set_error(c, rc, "GPU copy: %s", msg);
			break;
		}
		if ((rc = gpu_ring_alloc(c, g, d, need, deadline, &off))) {
			gpu_ev_put(g, d, done);
			break;
		}
		if ((rc = slice_stage(c, d, l, r, a, b, i, k, d->ring_host + off, &bytes, &chunks))) {
			gpu_ev_put(g, d, done); /* nothing reads the slice: give its bytes back */
			d->ring_head = head_before;
			break;
		}
		if ((rc = slice_place(c, g, d, a, b, i, k, off, dbytes, ss)) == MORI_OK)
			rc = launch(c, g, d, a, ss);
		if (rc != MORI_OK) {
			/* an upload may still read the slice: its bytes are free after the upload stream */
			g->event_record(done, d->upload);
			if (gpu_ring_push(d, d->ring_head, done) != MORI_OK) {
				g->event_synchronize(done);
				gpu_ev_put(g, d, done);
			}
			break;
		}
		*total += bytes;
		/* The slice's bytes are free once `done` fires, after its copy. */
		g->event_record(done, ss);
		if (gpu_ring_push(d, d->ring_head, done) != MORI_OK) {
			g->event_synchronize(done); /* untracked: a later span's end frees the bytes */
			gpu_ev_put(g, d, done);
		}
	}
	if (forked) { /* the batch's stream (and its completion event) after stream2's slices */
		int r = fork_join(c, g, d->join_ev, d->stream2, s);
		if (r != MORI_OK)
			g->stream_synchronize(d->stream2); /* the batch's event cannot cover them: wait */
		rc = rc ? rc : r;
	}
	return rc;
}

/* The device a transfer runs on: the VRAM side's (the local one when both are VRAM). */
static mori_mem *vram_side(mori_mem *local, mori_mem *remote)
{
	return local->kind == MORI_MEM_VRAM ? local : remote;
}

static int run_batch(mori_client *c, mori_xfer_op op, mori_mem *local, mori_mem *remote, const struct batch *b, void *stream,
		     struct mori_xfer *x)
{
	if (!b->n)
		return set_error(c, MORI_EINVAL, "GPU copy: empty batch");
	/* The batch is checked here, once: a small one before its launch, a large one slice by
	 * slice as it is staged (xfer.c leaves GPU batches to this). */
	uint64_t total = 0;
	if (b->n <= MORI_COPY_INLINE) {
		int rc = check_slice(c, local, remote, b, 0, b->n, NULL, &total);
		if (rc)
			return rc;
	}
	struct gpu_ctx *gx;
	struct gpu_dev *d;
	int rc = gpu_ctx_get(c, &gx);
	if (rc)
		return rc;
	const struct gpu_api *g = gx->g;
	if ((rc = gpu_dev_get(c, gx, vram_side(local, remote)->gpu_device, &d)))
		return rc;
	gpu_dptr la, ra;
	if ((rc = side_addr(c, gx, d, local, &la)) || (rc = side_addr(c, gx, d, remote, &ra)))
		return rc;
	struct gpu_op *o = calloc(1, sizeof(*o));
	if (!o)
		return set_error(c, MORI_ENOMEM, "out of memory");
	o->d = d;
	struct mori_copy_args a;
	memset(&a, 0, sizeof(a));
	a.a_base = la;
	a.b_base = ra;
	a.swap = op == MORI_XFER_READ; /* a write copies local -> remote */
	uint64_t deadline = x && x->deadline_us ? x->deadline_us : mori_now_us() + 5000000;

	pthread_mutex_lock(&d->lock);
	if ((rc = gpu_err(gpu_push(g, d), "push context", NULL, 0))) {
		pthread_mutex_unlock(&d->lock);
		free(o);
		return set_error(c, rc, "GPU %d: cannot make its context current", d->ordinal);
	}
	if ((rc = gpu_kernel_load(c, g, d)) || (rc = gpu_staging_init(c, g, d)))
		goto out;
	gpu_reap_orphans(g, d);
	gpu_stream s = stream ? (gpu_stream)stream : d->stream;
	char msg[160];
	if ((rc = gpu_err(gpu_ev_get(g, d, &o->ev), "cuEventCreate", msg, sizeof(msg)))) {
		rc = set_error(c, rc, "GPU copy: %s", msg);
		goto out;
	}
	if (b->n <= MORI_COPY_INLINE) {
		/* Small batches ride in the launch parameters: one launch, no upload. */
		uint32_t uniform;
		uint64_t acc = plan_chunks(b, 0, b->n, total, d->sm_count, &a.chunk_shift, &uniform);
		uint64_t f = 0;
		for (size_t i = 0; i < b->n; i++) {
			const mori_desc *e = bdesc(b, i);
			a.inl[i] = (struct mori_copy_desc){e->local_offset, e->remote_offset, e->length};
			a.inl_first[i] = (uint32_t)f;
			f += chunks_of(e->length, a.chunk_shift);
		}
		a.inl_first[b->n] = (uint32_t)acc;
		a.n = (uint32_t)b->n;
		a.total_chunks = acc;
		if (acc > UINT32_MAX)
			rc = set_error(c, MORI_EINVAL, "GPU copy: batch of %llu chunks", (unsigned long long)acc);
		else if (stream || gpu_service_post(g, d, &a, total, &o->svc_seq) != MORI_OK)
			rc = launch(c, g, d, &a, s); /* the service takes only batches of no stream */
	} else {
		rc = launch_staged(c, g, d, local, remote, &a, b, s, deadline, &total);
	}
	if (rc == MORI_OK && x)
		x->bytes = total; /* known only now: the batch was checked and summed as it was staged */
	/* Even a failed batch records its event: slices launched before the failure still run. */
	int r = o->svc_seq ? GPU_SUCCESS : g->event_record(o->ev, s);
	if (rc == MORI_OK && r != GPU_SUCCESS)
		rc = set_error(c, gpu_err(r, "cuEventRecord", msg, sizeof(msg)), "GPU copy: %s", msg);
	o->next = &d->live;
	o->prev = d->live.prev;
	d->live.prev->next = o;
	d->live.prev = o;
	if (rc != MORI_OK)
		o->orphan = 1; /* the transfer fails now; the op is freed when the GPU is done */
	else if (x)
		x->gpu_event = o;
	else
		o->orphan = 1; /* no transfer to poll it (tests): reaped later */
	o = NULL;
out:
	gpu_pop(g);
	pthread_mutex_unlock(&d->lock);
	if (o) {
		if (o->ev)
			g->event_destroy(o->ev);
		free(o);
	}
	return rc;
}

int gpu_xfer(mori_client *c, mori_xfer_op op, mori_mem *local, mori_mem *remote, const mori_desc *descs, size_t n,
	     void *stream, struct mori_xfer *x)
{
	if (!descs)
		return set_error(c, MORI_EINVAL, "GPU copy: NULL descriptors");
	struct batch b = {.descs = descs, .n = n};
	return run_batch(c, op, local, remote, &b, stream, x);
}

/* ---- prepared lists with their descriptors on the GPU ---- */

struct gpu_list {
	struct gpu_dev *d;
	gpu_dptr descs;
	uint64_t uniform_len;
};

int gpu_list_prep(mori_client *c, struct mori_xfer_list *l)
{
	if (!l->n || !l->descs)
		return set_error(c, MORI_EINVAL, "GPU list: empty");
	struct gpu_ctx *gx;
	struct gpu_dev *d;
	int rc = gpu_ctx_get(c, &gx);
	if (rc || (rc = gpu_dev_get(c, gx, vram_side(l->local, l->remote)->gpu_device, &d)))
		return rc;
	const struct gpu_api *g = gx->g;
	struct gpu_list *gl = calloc(1, sizeof(*gl));
	if (!gl)
		return set_error(c, MORI_ENOMEM, "out of memory");
	gl->d = d;
	gl->uniform_len = l->descs[0].length;
	for (size_t i = 0; i < l->n; i++) {
		const mori_desc *e = &l->descs[i];
		if (!desc_inside(e, l->local, l->remote)) {
			free(gl);
			return set_error(c, MORI_ERANGE, "GPU list: descriptor %zu is outside a region", i);
		}
		if (e->length != gl->uniform_len)
			gl->uniform_len = 0;
	}
	char msg[160];
	uint64_t bytes = l->n * sizeof(struct mori_copy_desc);
	pthread_mutex_lock(&d->lock);
	if ((rc = gpu_err(gpu_push(g, d), "push context", msg, sizeof(msg)))) {
		pthread_mutex_unlock(&d->lock);
		free(gl);
		return set_error(c, rc, "GPU list: %s", msg);
	}
	rc = gpu_staging_init(c, g, d);
	if (rc == MORI_OK && (rc = gpu_err(g->mem_alloc(&gl->descs, bytes), "cuMemAlloc", msg, sizeof(msg)))) {
		set_error(c, rc, "GPU list of %zu descriptors: %s", l->n, msg);
	} else if (rc == MORI_OK) {
		/* pageable source: the driver copies it before returning; the sync bounds the rest */
		rc = gpu_err(g->memcpy_htod_async(gl->descs, l->descs, bytes, d->upload), "upload list", msg, sizeof(msg));
		if (rc == MORI_OK)
			rc = gpu_err(g->stream_synchronize(d->upload), "upload list", msg, sizeof(msg));
		if (rc) {
			g->mem_free(gl->descs);
			set_error(c, rc, "GPU list: %s", msg);
		}
	}
	gpu_pop(g);
	pthread_mutex_unlock(&d->lock);
	if (rc) {
		free(gl);
		return rc;
	}
	l->gpu_priv = gl;
	return MORI_OK;
}

void gpu_list_free(mori_client *c, struct mori_xfer_list *l)
{
	struct gpu_list *gl = l->gpu_priv;
	if (!gl)
		return;
	const struct gpu_api *g = gpu_api();
	gpu_dev_drain(g, gl->d, GPU_UNMAP_WAIT_US); /* copies may still read its descriptors */
	gpu_push(g, gl->d);
	g->mem_free(gl->descs);
	gpu_pop(g);
	free(gl);
	l->gpu_priv = NULL;
	(void)c;
}

int gpu_xfer_list(mori_client *c, mori_xfer_op op, struct mori_xfer_list *l, const uint32_t *idx, size_t n, void *stream,
		  struct mori_xfer *x)
{
	struct gpu_list *gl = l->gpu_priv;
	if (!idx)
		return set_error(c, MORI_EINVAL, "GPU copy: NULL indices");
	struct batch b = {.descs = l->descs, .idx = idx, .n = n, .list_n = l->n};
	if (gl) {
		b.dev_descs = gl->descs;
		b.uniform_len = gl->uniform_len;
	}
	return run_batch(c, op, l->local, l->remote, &b, stream, x);
}

int gpu_xfer_poll(struct mori_xfer *x)
{
	struct gpu_op *o = x->gpu_event;
	if (!o)
		return MORI_OK; /* already reported */
	struct gpu_dev *d = o->d;
	const struct gpu_api *g = gpu_api();
	int r = gpu_op_query(g, o, 0);
	if (r == GPU_ERROR_NOT_READY) {
		if (x->deadline_us && mori_now_us() > x->deadline_us) {
			pthread_mutex_lock(&d->lock);
			o->orphan = 1; /* the GPU still owns its resources; reaped when it finishes */
			pthread_mutex_unlock(&d->lock);
			x->gpu_event = NULL;
			return set_error(x->c, MORI_ETIMEDOUT, "GPU copy did not finish by its deadline (still running on GPU %d)",
					 d->ordinal);
		}
		return MORI_EINPROGRESS;
	}
	pthread_mutex_lock(&d->lock);
	gpu_op_unlink(o);
	gpu_ev_put(g, d, o->ev);
	pthread_mutex_unlock(&d->lock);
	free(o);
	x->gpu_event = NULL;
	if (r != GPU_SUCCESS) {
		char msg[160];
		int rc = gpu_err(r, "GPU copy", msg, sizeof(msg));
		return set_error(x->c, rc == MORI_EINPROGRESS ? MORI_EIO : rc, "%s", msg);
	}
	return MORI_OK;
}
