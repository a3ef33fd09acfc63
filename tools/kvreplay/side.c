/* mori-kvreplay: one side's libmori objects (client, pool, the prepared list over the peer's
 * pool, a VRAM pool's host shadow), warming them, and moving a job's pages; notifications. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvreplay.h"

void side_close(struct side *s)
{
	mori_xfer_list_free(s->stage);
	mori_mem_deregister(s->shadow);
	mori_xfer_list_free(s->list);
	mori_mem_deregister(s->peer);
	mori_mem_deregister(s->pool);
	mori_client_close(s->c);
	memset(s, 0, sizeof(*s));
}

int side_open(struct side *s, const char *role, const char *rt, const struct geom *g,
	      int mem_kind, char *err, size_t errlen)
{
	char label[64];
	int rc;
	s->role = role;
	snprintf(label, sizeof(label), "kvreplay-%s", role);
	rc = mori_client_open(rt, label, &s->c);
	if (rc) {
		snprintf(err, errlen, "%s: cannot connect to morid (runtime dir %s): %s", role,
			 rt ? rt : getenv("MORI_RUNTIME_DIR") ? getenv("MORI_RUNTIME_DIR")
							      : "/run/mori",
			 mori_strerror(rc));
		return -1;
	}
	rc = mori_mem_alloc(s->c, g->pool_bytes, mem_kind, &s->pool);
	if (rc) {
		if (mem_kind == MORI_MEM_VRAM && (rc == MORI_ENOGPU || rc == MORI_ENOKERNEL))
			snprintf(err, errlen, "%s: --mem vram: no usable GPU here (%s: %s)", role,
				 mori_strerror(rc), mori_client_last_error(s->c));
		else if (mem_kind == MORI_MEM_VRAM)
			snprintf(err, errlen,
				 "%s: --mem vram: libmori cannot allocate a %.1f GiB VRAM pool (%s: %s)",
				 role, g->pool_bytes / 1073741824.0, mori_strerror(rc),
				 mori_client_last_error(s->c));
		else
			snprintf(err, errlen, "%s: cannot allocate a %.1f GiB pool: %s (%s)", role,
				 g->pool_bytes / 1073741824.0, mori_strerror(rc),
				 mori_client_last_error(s->c));
		return -1;
	}
	vlog(role, "allocated %" PRIu64 " bytes", g->pool_bytes);
	s->base = mori_mem_ptr(s->pool);
	if (mem_kind == MORI_MEM_VRAM) {
		mori_desc *d = xcalloc(g->pool_descs, sizeof(*d));
		for (uint64_t i = 0; i < g->pool_descs; i++) {
			d[i].local_offset = d[i].remote_offset = i * g->page_bytes;
			d[i].length = g->page_bytes;
		}
		rc = mori_mem_alloc(s->c, g->pool_bytes, MORI_MEM_HOST, &s->shadow);
		if (rc == MORI_OK)
			rc = mori_xfer_prep(s->shadow, s->pool, d, g->pool_descs, &s->stage);
		free(d);
		if (rc) {
			snprintf(err, errlen, "%s: cannot set up the %.1f GiB host shadow of the VRAM pool: %s (%s)",
				 role, g->pool_bytes / 1073741824.0, mori_strerror(rc),
				 mori_client_last_error(s->c));
			return -1;
		}
		/* the first GPU copy touching the shadow pins it (seconds for GiBs): do it now */
		uint32_t first = 0;
		mori_xfer *x = NULL;
		rc = mori_xfer_submit(s->stage, MORI_XFER_READ, &first, 1, NULL, &x);
		if (rc == MORI_OK)
			rc = mori_xfer_wait(x, 60000000);
		mori_xfer_free(x);
		if (rc) {
			snprintf(err, errlen, "%s: cannot stage a page out of the VRAM pool: %s (%s)", role,
				 mori_strerror(rc), mori_client_last_error(s->c));
			return -1;
		}
		s->base = mori_mem_ptr(s->shadow);
		vlog(role, "host shadow of the VRAM pool ready");
	}
	snprintf(s->name, sizeof(s->name), "kvreplay.%d.%s", (int)getpid(), role);
	rc = mori_mem_publish(s->pool, s->name);
	if (rc) {
		snprintf(err, errlen, "%s: cannot publish the pool as %s: %s (%s)", role, s->name,
			 mori_strerror(rc), mori_client_last_error(s->c));
		return -1;
	}
	return 0;
}

int side_connect(struct side *s, const struct geom *g, const char *node, const char *name,
		 char *err, size_t errlen)
{
	int rc = mori_mem_open_remote(s->c, node, name, &s->peer);
	if (rc) {
		snprintf(err, errlen, "%s: cannot open %s at %s: %s (%s)", s->role, name,
			 node && *node ? node : "this node", mori_strerror(rc),
			 mori_client_last_error(s->c));
		return -1;
	}
	mori_desc *d = xcalloc(g->pool_descs, sizeof(*d));
	for (uint64_t i = 0; i < g->pool_descs; i++) {
		d[i].local_offset = d[i].remote_offset = i * g->page_bytes;
		d[i].length = g->page_bytes;
	}
	vlog(s->role, "opened %s at %s", name, node && *node ? node : "this node");
	rc = mori_xfer_prep(s->pool, s->peer, d, g->pool_descs, &s->list);
	free(d);
	vlog(s->role, "prepared %" PRIu64 " descriptors", g->pool_descs);
	if (rc) {
		snprintf(err, errlen, "%s: cannot prepare %" PRIu64 " descriptors: %s (%s)", s->role,
			 g->pool_descs, mori_strerror(rc), mori_client_last_error(s->c));
		return -1;
	}
	return 0;
}

/* Touch every page of the local pool once, writing or only reading. The first access to a page
 * through a mapping costs a fault (in this VM 3 to 25 us per 4 KiB page, more than copying it,
 * and a first write after a read faults again); a serving system's long-lived pool is past that,
 * so the replay measures from the warm state. */
void side_warm_local(struct side *s, const struct geom *g, int write)
{
	volatile uint8_t *b = s->base;
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t sum = 0;
	for (uint64_t o = 0; o < g->pool_bytes; o += (uint64_t)(pg > 0 ? pg : 4096)) {
		if (write)
			b[o] = 0;
		else
			sum += b[o];
	}
	(void)sum;
	vlog(s->role, "touched the pool (%s)", write ? "write" : "read");
}

/* The initiator's mapping of the peer pool is warmed the only way the API allows: one transfer
 * over the whole prepared list (no notification). Returns a MORI code. */
int side_warm_peer(struct side *s, const struct geom *g, int op, int64_t timeout_ms,
		   char *err, size_t errlen)
{
	/* 256 MiB per submission: each well inside its deadline even at first-touch speed */
	size_t per = (size_t)((256ull << 20) / g->page_bytes);
	if (per < 1)
		per = 1;
	uint32_t *idx = xcalloc(per, sizeof(uint32_t));
	mori_xfer_opts xo = {.size = sizeof(xo), .timeout_us = timeout_ms * 1000};
	int rc = MORI_OK;
	for (uint64_t i = 0; i < g->pool_descs && rc == MORI_OK; i += per) {
		size_t n = g->pool_descs - i < per ? (size_t)(g->pool_descs - i) : per;
		mori_xfer *x = NULL;
		for (size_t k = 0; k < n; k++)
			idx[k] = (uint32_t)(i + k);
		rc = mori_xfer_submit(s->list, op, idx, n, &xo, &x);
		if (rc == MORI_OK)
			rc = mori_xfer_wait(x, timeout_ms * 1000);
		if (rc)
			snprintf(err, errlen, "%s: warm-up transfer failed: %s (%s)", s->role,
				 mori_strerror(rc), mori_client_last_error(s->c));
		mori_xfer_free(x);
	}
	free(idx);
	vlog(s->role, "warm-up transfer over the whole pool done");
	return rc;
}

/* The reference for the replay's transfer rate, through the same library, list, pages and batch
 * size: stream the whole pool in pool order, `batch` descriptors per submission, `depth`
 * submissions in flight as the replay keeps its window (one at a time ran below a replay with
 * several in flight), until `target` bytes have moved; a first submission warms up, uncounted.
 * Returns a MORI code; bytes and microseconds through the pointers. */
int side_sweep(struct side *s, const struct geom *g, int op, uint64_t batch, uint64_t target, int depth,
	       int64_t timeout_ms, uint64_t *bytes, uint64_t *us)
{
	if (batch > g->pool_descs)
		batch = g->pool_descs;
	depth = depth < 1 ? 1 : depth;
	uint32_t *idx = xcalloc(batch * (uint64_t)depth, sizeof(uint32_t));
	mori_xfer **x = xcalloc((size_t)depth, sizeof(*x));
	mori_xfer_opts xo = {.size = sizeof(xo), .timeout_us = timeout_ms * 1000};
	uint64_t pos = 0, submitted = 0;
	*bytes = 0;
	/* the warm-up: one submission alone, not counted */
	for (uint64_t j = 0; j < batch; j++)
		idx[j] = (uint32_t)(j % g->pool_descs);
	pos = batch % g->pool_descs;
	int rc = mori_xfer_submit(s->list, op, idx, batch, &xo, &x[0]);
	if (rc == MORI_OK)
		rc = mori_xfer_wait(x[0], timeout_ms * 1000);
	mori_xfer_free(x[0]);
	x[0] = NULL;
	uint64_t t0 = now_us();
	for (uint64_t k = 0; rc == MORI_OK; k++) {
		int slot = (int)(k % (uint64_t)depth);
		if (x[slot]) {
			rc = mori_xfer_wait(x[slot], timeout_ms * 1000);
			if (rc == MORI_OK)
				*bytes += mori_xfer_bytes(x[slot]);
			mori_xfer_free(x[slot]);
			x[slot] = NULL;
		}
		if (rc != MORI_OK || submitted >= target)
			break;
		uint32_t *ix = idx + (uint64_t)slot * batch;
		for (uint64_t j = 0; j < batch; j++)
			ix[j] = (uint32_t)((pos + j) % g->pool_descs);
		pos = (pos + batch) % g->pool_descs;
		if ((rc = mori_xfer_submit(s->list, op, ix, batch, &xo, &x[slot])) == MORI_OK)
			submitted += mori_xfer_bytes(x[slot]);
	}
	for (int i = 0; i < depth; i++)
		if (x[i]) {
			int r2 = mori_xfer_wait(x[i], timeout_ms * 1000);
			if (rc == MORI_OK && r2 == MORI_OK)
				*bytes += mori_xfer_bytes(x[i]);
			rc = rc ? rc : r2;
			mori_xfer_free(x[i]);
		}
	*us = now_us() - t0;
	free(x);
	free(idx);
	return rc;
}

/* Indices of every page of the job's blocks, layer-major (vLLM's per-layer K and V tensors). */
static size_t job_indices(const struct geom *g, const struct msg *m, uint32_t *idx)
{
	size_t n = 0;
	for (int l = 0; l < g->layers; l++)
		for (int k = 0; k < g->kv; k++)
			for (uint32_t b = 0; b < m->n; b++)
				for (uint32_t p = 0; p < g->pages_per_block; p++)
					idx[n++] = desc_index(g, l, k,
							      (uint64_t)m->blk[b].slot *
									  g->pages_per_block +
								  p);
	return n;
}

/* VRAM pools: move the job's pages from the host shadow into the pool (op WRITE, after a fill)
 * or from the pool into the shadow (op READ, before verifying). Returns a MORI code. */
int side_stage(struct side *s, const struct geom *g, const struct opts *o, int op,
	       const struct msg *m, uint32_t *idx, char *msg, size_t msglen)
{
	if (!s->stage)
		return MORI_OK;
	size_t n = job_indices(g, m, idx);
	mori_xfer_opts xo = {.size = sizeof(xo), .timeout_us = o->timeout_ms * 1000};
	mori_xfer *x = NULL;
	int rc = mori_xfer_submit(s->stage, op, idx, n, &xo, &x);
	if (rc == MORI_OK)
		rc = mori_xfer_wait(x, o->timeout_ms * 1000);
	if (rc)
		snprintf(msg, msglen, "%s: staging %s the VRAM pool: %s (%s)", s->role,
			 op == MORI_XFER_WRITE ? "into" : "out of", mori_strerror(rc), mori_client_last_error(s->c));
	mori_xfer_free(x);
	return rc;
}

/* Is job `id` one whose bytes are filled and verified? */
int job_sampled(const struct opts *o, uint32_t id)
{
	return o->verify_every <= 1 || id % o->verify_every == 0;
}

/* Submit the job's pages (in parts of at most batch indices) and wait for all of them.
 * Returns a MORI code; t0 and t1 get the submission and completion times. */
int move_job(struct side *s, const struct geom *g, const struct opts *o, int op,
	     const struct msg *m, uint32_t *idx, uint64_t *t0, uint64_t *t1, uint64_t *bytes,
	     char *msg, size_t msglen)
{
	size_t n = job_indices(g, m, idx);
	size_t per = o->batch ? o->batch : n;
	size_t nx = (n + per - 1) / per;
	mori_xfer **xs = xcalloc(nx, sizeof(*xs));
	int rc = MORI_OK;
	size_t done = 0;
	*bytes = 0;
	*t0 = now_us();
	for (size_t i = 0; i < nx; i++) {
		size_t cnt = n - i * per < per ? n - i * per : per;
		/* the notification goes with the last part: it arrives after all parts landed only
		 * if the parts complete in order, so the parts before it are waited for first */
		mori_xfer_opts xo = {.size = sizeof(xo), .timeout_us = o->timeout_ms * 1000};
		if (i == nx - 1) {
			if (nx > 1) {
				rc = mori_xfer_wait_all(xs, i, o->timeout_ms * 1000);
				if (rc)
					break;
			}
			xo.has_notif = 1;
			xo.notif_tag = m->job;
		}
		uint64_t dl = now_us() + (uint64_t)o->timeout_ms * 1000;
		for (;;) {
			rc = mori_xfer_submit(s->list, op, idx + i * per, cnt, &xo, &xs[i]);
			if (rc != MORI_EAGAIN || now_us() > dl)
				break;
			/* submission ring full: let earlier parts finish first */
			if (i > 0)
				mori_xfer_wait(xs[i - 1], 1000);
			else
				usleep(100);
		}
		if (rc)
			break;
		done = i + 1;
	}
	if (rc == MORI_OK)
		rc = mori_xfer_wait_all(xs, done, o->timeout_ms * 1000);
	*t1 = now_us();
	if (rc) {
		const char *why = NULL;
		mori_status st;
		for (size_t i = 0; i < done && !why; i++)
			if (mori_xfer_status(xs[i], &st) != MORI_OK)
				why = st.message;
		snprintf(msg, msglen, "job %u (%zu descriptors): %s: %s", m->job, n,
			 mori_strerror(rc), why ? why : mori_client_last_error(s->c));
	}
	for (size_t i = 0; i < done; i++) {
		if (rc == MORI_OK)
			*bytes += mori_xfer_bytes(xs[i]);
		mori_xfer_free(xs[i]);
	}
	free(xs);
	return rc;
}

static int tagset_take(struct tagset *t, uint64_t tag)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->v[i] == tag) {
			t->v[i] = t->v[--t->n];
			return 1;
		}
	return 0;
}

static void tagset_add(struct tagset *t, uint64_t tag)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 64;
		t->v = xrealloc(t->v, t->cap * sizeof(uint64_t));
	}
	t->v[t->n++] = tag;
}

/* Poll notifications into t, waiting up to wait_us for the first. Returns count or error. */
int notif_collect(mori_client *c, struct tagset *t, int64_t wait_us)
{
	mori_notif nb[64];
	int k = mori_notif_poll(c, nb, 64, wait_us);
	for (int i = 0; i < k; i++)
		tagset_add(t, nb[i].tag);
	return k;
}

/* Take notifications until one with tag arrives (others are kept in t). Returns a MORI code. */
int notif_wait(mori_client *c, struct tagset *t, uint64_t tag, int64_t timeout_ms)
{
	uint64_t deadline = now_us() + (uint64_t)timeout_ms * 1000;
	while (!tagset_take(t, tag)) {
		uint64_t now = now_us();
		if (now >= deadline)
			return MORI_ETIMEDOUT;
		int k = notif_collect(c, t, (int64_t)(deadline - now));
		if (k < 0)
			return k;
	}
	return MORI_OK;
}
