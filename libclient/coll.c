/* libmori MORI-CCL: communicators over a group (or its node team), windows, the
 * algorithm table and its overrides, the checks every collective makes before anything runs, and
 * the dispatch to the GPU path (coll_gpu.c) or the host path (coll_host.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_int.h"
#include "conv.h"

#define DEF_SCRATCH (32ull << 20)
#define DEF_ONESHOT_MAX (256ull << 10)
#define DEF_KERNEL_MAX (4ull << 20)
/* Data kernels' grid cap, whatever the MPS share (the smallest of all ranks): on the H200 62 blocks
 * beat a cap of 2 an SM of the share (30 at 8 ranks: 42 % against 8 % of the bound, docs/ccl.md);
 * the blocks past what is resident run in waves, which the per-block barriers allow. */
#define DEF_BLOCKS 62u
#define DEF_TILE 0ull /* one range a block; tiles measured no better */

static const char *const coll_names[CO_N] = {"allreduce", "allgather", "alltoall", "broadcast", "reducescatter"};
static const char *const algo_names[] = {"auto", "oneshot", "twoshot", "kernel", "ce"};

static const mori_comm_opts comm_defaults = {.size = sizeof(mori_comm_opts)}; /* zero: the defaults */

int mori_comm_opts_init(mori_comm_opts *o, size_t size)
{
	return opts_init(o, size, OPTS_MIN_COMM, &comm_defaults, sizeof(comm_defaults));
}

size_t mori_dtype_size(mori_dtype dt)
{
	switch (dt) {
	case MORI_UINT8: return 1;
	case MORI_INT32: return 4;
	case MORI_FLOAT16: return 2;
	case MORI_FLOAT32: return 4;
	case MORI_BFLOAT16: return 2;
	case MORI_FLOAT8_E4M3: return 1;
	}
	return 0;
}

/* ---- the algorithm table ---- */

static int algo_allowed(int co, int a)
{
	if (co == CO_ALLREDUCE)
		return a == MORI_COLL_ONESHOT || a == MORI_COLL_TWOSHOT;
	if (co == CO_REDSCAT)
		return a == MORI_COLL_KERNEL;
	return a == MORI_COLL_KERNEL || a == MORI_COLL_CE;
}

/* "coll=algo" items, or "allreduce.oneshot_max=BYTES" / "kernel_max=BYTES", comma-separated. A
 * bad item is named and nothing changes. */
int coll_parse_algo(mori_comm *k, const char *spec)
{
	if (!spec || !*spec)
		return MORI_OK;
	int force[CO_N];
	memcpy(force, k->force, sizeof(force));
	uint64_t om = k->oneshot_max, km = k->kernel_max;
	char buf[512];
	if (strlen(spec) >= sizeof(buf))
		return set_error(k->c, MORI_EINVAL, "coll algo: spec longer than %zu bytes", sizeof(buf) - 1);
	strcpy(buf, spec);
	for (char *save = NULL, *it = strtok_r(buf, ", ", &save); it; it = strtok_r(NULL, ", ", &save)) {
		char *eq = strchr(it, '=');
		if (!eq)
			return set_error(k->c, MORI_EINVAL, "coll algo: '%s' is not NAME=VALUE", it);
		*eq = 0;
		const char *v = eq + 1;
		if (!strcmp(it, "allreduce.oneshot_max") || !strcmp(it, "kernel_max")) {
			char *end;
			errno = 0;
			unsigned long long x = strtoull(v, &end, 0);
			/* strtoull takes "-1" as ULLONG_MAX and saturates on overflow: neither is a byte count */
			if (!*v || *end || strchr(v, '-') || errno == ERANGE || x > (unsigned long long)INT64_MAX)
				return set_error(k->c, MORI_EINVAL, "coll algo: %s=%s is not a byte count (0 .. 2^63-1)", it, v);
			*(it[0] == 'a' ? &om : &km) = x;
			continue;
		}
		int co = -1, a = -1;
		for (int i = 0; i < CO_N; i++)
			if (!strcmp(it, coll_names[i]))
				co = i;
		for (int i = 0; i < 5; i++)
			if (!strcmp(v, algo_names[i]))
				a = i;
		if (co < 0)
			return set_error(k->c, MORI_EINVAL, "coll algo: unknown collective '%s' (allreduce, allgather, alltoall, "
							     "broadcast, reducescatter)", it);
		if (a < 0 || (a && !algo_allowed(co, a)))
			return set_error(k->c, MORI_EINVAL, "coll algo: %s has no algorithm '%s'", it, v);
		force[co] = a;
	}
	memcpy(k->force, force, sizeof(force));
	k->oneshot_max = om;
	k->kernel_max = km;
	return MORI_OK;
}

int mori_comm_set_algo(mori_comm *k, const char *spec)
{
	return k ? coll_parse_algo(k, spec) : MORI_EINVAL;
}

static int pick(const mori_comm *k, int co, uint64_t bytes)
{
	if (k->force[co])
		return k->force[co];
	if (co == CO_ALLREDUCE)
		return bytes <= k->oneshot_max ? MORI_COLL_ONESHOT : MORI_COLL_TWOSHOT;
	if (co == CO_REDSCAT)
		return MORI_COLL_KERNEL;
	return bytes <= k->kernel_max ? MORI_COLL_KERNEL : MORI_COLL_CE;
}

int mori_comm_algo(const mori_comm *k, const char *coll, uint64_t bytes, const char **name)
{
	if (!k || !coll)
		return MORI_EINVAL;
	for (int i = 0; i < CO_N; i++)
		if (!strcmp(coll, coll_names[i])) {
			int a = pick(k, i, bytes);
			if (name)
				*name = algo_names[a];
			return a;
		}
	return set_error(k->c, MORI_EINVAL, "coll algo: unknown collective '%s'", coll);
}

/* ---- creation ---- */

static int exchange(mori_comm *k, uint64_t a, uint64_t b, uint64_t *all);

int mori_comm_create(mori_group *g, const mori_comm_opts *opts, mori_comm **out)
{
	if (!g || !out)
		return g ? set_error(g->c, MORI_EINVAL, "comm create: NULL argument") : MORI_EINVAL;
	if (shmem_check(g)) return MORI_ESTALE; /* a child after fork: the parent's */
	*out = NULL;
	mori_comm_opts o = comm_defaults;
	int rc = opts ? opts_take(&o, sizeof(o), opts, OPTS_MIN_COMM) : MORI_OK;
	if (rc)
		return set_error(g->c, rc, "comm create: opts->size %zu is not a mori_comm_opts this library reads (%zu "
					   "bytes): call mori_comm_opts_init", opts->size, sizeof(o));
	rc = shmem_abort_status(g);
	if (rc)
		return rc;
	mori_comm *k = calloc(1, sizeof(*k));
	if (!k)
		return set_error(g->c, MORI_ENOMEM, "out of memory");
	k->g = g;
	k->c = g->c;
	k->gpu = g->kind == MORI_MEM_VRAM;
	k->oneshot_max = DEF_ONESHOT_MAX;
	k->kernel_max = DEF_KERNEL_MAX;
	k->timeout_us = o.timeout_us > 0 ? o.timeout_us : g->timeout_us;
	const char *eb = getenv("MORI_COLL_BLOCKS");
	k->max_blocks = eb && atoi(eb) > 0 ? (unsigned)atoi(eb) : DEF_BLOCKS;
	if (k->max_blocks > MORI_COLL_MAX_BLOCKS)
		k->max_blocks = MORI_COLL_MAX_BLOCKS;
	const char *et = getenv("MORI_COLL_TILE");
	k->tile = et && *et ? strtoull(et, NULL, 0) & ~15ull : DEF_TILE;
	const char *spec = o.algo ? o.algo : getenv("MORI_COLL_ALGO");
	if ((rc = coll_parse_algo(k, spec)))
		goto fail;
	/* ranks: the group's PEs, or the node team's */
	const int *team = NULL;
	int tn = 0;
	mori_shmem_team_node(g, &team, &tn);
	k->n = o.node_team ? tn : g->n_pes;
	k->pe_of = calloc((size_t)k->n, sizeof(int));
	if (!k->pe_of) {
		rc = set_error(g->c, MORI_ENOMEM, "out of memory");
		goto fail;
	}
	k->rank = -1;
	for (int r = 0; r < k->n; r++) {
		k->pe_of[r] = o.node_team ? team[r] : r;
		if (k->pe_of[r] == g->my_pe)
			k->rank = r;
	}
	if (k->gpu && k->n > MORI_COLL_MAX_RANKS) {
		rc = set_error(g->c, MORI_ENOTSUP, "comm create: GPU communicators have at most %d ranks, not %d",
			       MORI_COLL_MAX_RANKS, k->n);
		goto fail;
	}
	/* the heap area: flags, signatures, generations and the skip word, all-to-all-v tables, the
	 * exchange slot, scratch (include/mori/device_host/coll_dev.h) */
	uint64_t nn = (uint64_t)k->n;
	k->off_flags = 0;
	k->off_sigs = k->off_flags + 8ull * MORI_COLL_SLOTS * nn;
	k->off_gens = k->off_sigs + (k->gpu ? 16ull * MORI_COLL_SLOTS * nn : 0); /* the GPU calls' check only */
	k->off_meta = k->off_gens + 8ull * (MORI_COLL_SLOTS + 1);
	k->off_exch = k->off_meta + 24ull * nn; /* [n] (displacement, bytes) sent, then [n] bytes expected */
	k->off_scratch = (k->off_exch + 64 + 4095) & ~4095ull;
	uint64_t free_heap = g->heap_size > MORI_SHMEM_RESERVED ? g->heap_size - MORI_SHMEM_RESERVED : 0;
	if (o.scratch_bytes > free_heap) { /* also keeps off_scratch + scratch_bytes from wrapping */
		rc = set_error(g->c, MORI_ENOMEM, "comm create: a heap of %llu bytes leaves no room for scratch_bytes %llu "
						  "(%llu bytes free)", (unsigned long long)g->heap_size,
			       (unsigned long long)o.scratch_bytes, (unsigned long long)free_heap);
		goto fail;
	}
	k->scratch_bytes = o.scratch_bytes ? o.scratch_bytes : DEF_SCRATCH;
	if (!o.scratch_bytes && k->scratch_bytes > free_heap / 4)
		k->scratch_bytes = free_heap / 4 & ~4095ull;
	k->scratch_bytes &= ~255ull;
	if (k->scratch_bytes < 64u * 1024 * (k->gpu ? 1 : 0) + 4096) {
		rc = set_error(g->c, MORI_ENOMEM, "comm create: a heap of %llu bytes leaves no room for scratch (%llu bytes)",
			       (unsigned long long)g->heap_size, (unsigned long long)k->scratch_bytes);
		goto fail;
	}
	k->area_bytes = k->off_scratch + k->scratch_bytes;
	/* every PE of the group calls (the heap is the group's); zeroed, then a barrier */
	if ((rc = mori_shmem_calloc(g, k->area_bytes, 4096, (void **)&k->area))) {
		set_error(g->c, rc, "comm create: %llu bytes of heap for scratch and flags: %s",
			  (unsigned long long)k->area_bytes, mori_client_last_error(g->c));
		goto fail;
	}
	if (k->rank < 0) { /* a PE outside the node team: took part in the allocation only */
		rc = set_error(g->c, MORI_EINVAL, "comm create: PE %d is not in the team", g->my_pe);
		goto fail;
	}
	if (k->gpu && (rc = coll_gpu_init(k)))
		goto fail;
	if (k->gpu) { /* every rank launches the same grids: the smallest cap of all */
		uint64_t *all = calloc((size_t)k->n, 16);
		if (!all) {
			rc = set_error(g->c, MORI_ENOMEM, "out of memory");
			goto fail;
		}
		/* tile's low bit (tiles are 16-byte multiples): this rank has a peer it does not map */
		if (!(rc = exchange(k, k->max_blocks, k->tile | (uint64_t)coll_gpu_unmapped(k), all))) {
			int xnode = 0;
			for (int r = 0; r < k->n; r++) {
				if (all[2 * r] < k->max_blocks)
					k->max_blocks = (unsigned)all[2 * r];
				xnode |= (int)(all[2 * r + 1] & 1);
			}
			k->tile = all[1] & ~15ull; /* tiles are ownership: one size on every rank */
			if (xnode) /* across nodes: every rank on coll_xnode.cu's path */
				rc = coll_gpu_xnode(k);
		}
		free(all);
		if (rc)
			goto fail;
	}
	shmem_hold(g); /* g's struct outlives a leave while k lives (shmem_int.h) */
	*out = k;
	return MORI_OK;
fail:
	if (k->gpu_priv)
		coll_gpu_fini(k);
	if (k->area)
		mori_shmem_free(g, k->area);
	free(k->pe_of);
	free(k);
	return rc;
}

int mori_comm_destroy(mori_comm *k)
{
	if (!k)
		return MORI_OK;
	mori_group *g = k->g;
	int left = shmem_left(g); /* the group left first: the heap (our area) went with it */
	if (!left && shmem_check(g)) return MORI_ESTALE; /* a child after fork: the parent's communicator stays */
	if (k->gpu && left != SHMEM_LEFT_CHILD)
		coll_gpu_fini(k);
	while (k->wins) {
		struct mori_window *w = k->wins;
		k->wins = w->next;
		free(w);
	}
	int rc = left ? MORI_OK : mori_shmem_free(g, k->area);
	free(k->pe_of);
	free(k);
	shmem_release(g);
	return rc;
}

int mori_comm_rank(const mori_comm *k) { return k ? k->rank : -1; }
int mori_comm_size(const mori_comm *k) { return k ? k->n : 0; }

static int comm_status(mori_comm *k, mori_status *out, int take_mismatch)
{
	if (!k)
		return status_set(out, MORI_EINVAL, -1, "NULL communicator");
	if (shmem_check(k->g)) /* a child after fork: the parent's */
		return status_set(out, MORI_ESTALE, -1, mori_client_last_error(k->c));
	if (k->gpu) {
		int pe = -1, rc = coll_gpu_status(k, &pe, take_mismatch);
		if (rc)
			return status_set(out, rc, pe, mori_client_last_error(k->c));
	}
	int rc = mori_shmem_status(k->g, out);
	if (!rc && k->failed)
		return status_set(out, k->failed, -1, "a collective on this communicator failed earlier");
	return rc;
}

int mori_comm_status(mori_comm *k, mori_status *out)
{
	return comm_status(k, out, 1);
}

/* ---- windows ---- */

/* Every rank's (a, b) pair, through each rank's exchange slot: put, barrier, get all, barrier. */
static int exchange(mori_comm *k, uint64_t a, uint64_t b, uint64_t *all)
{
	uint64_t mine[2] = {a, b};
	uint8_t *slot = k->area + k->off_exch;
	int rc = mori_shmem_putmem(k->g, slot, mine, sizeof(mine), k->g->my_pe);
	if (!rc)
		rc = mori_shmem_barrier_all(k->g);
	for (int r = 0; r < k->n && !rc; r++)
		rc = mori_shmem_getmem(k->g, all + 2 * r, slot, 16, k->pe_of[r]);
	if (!rc)
		rc = mori_shmem_barrier_all(k->g);
	return rc;
}

int mori_comm_window_register(mori_comm *k, void *ptr, size_t bytes, mori_window **out)
{
	if (!k || !out)
		return k ? set_error(k->c, MORI_EINVAL, "window register: NULL argument") : MORI_EINVAL;
	if (shmem_check(k->g)) return MORI_ESTALE; /* a child after fork: the parent's */
	*out = NULL;
	int64_t off = mori_shmem_offset(k->g, ptr);
	int bad = off < 0 || !bytes || bytes > k->g->heap_size - (uint64_t)off;
	uint64_t *all = calloc((size_t)k->n, 16);
	if (!all)
		return set_error(k->c, MORI_ENOMEM, "out of memory");
	/* a bad range is still exchanged (as size 0) so every rank refuses together */
	int rc = exchange(k, bad ? UINT64_MAX : (uint64_t)off, bad ? 0 : bytes, all);
	if (!rc && bad) /* this rank's own range first: the caller's error to fix */
		rc = set_error(k->c, MORI_ERANGE, "window register: rank %d's range [%p, +%zu) is not inside its heap",
			       k->rank, ptr, bytes);
	for (int r = 0; r < k->n && !rc; r++) {
		if (all[2 * r] == UINT64_MAX)
			rc = set_error(k->c, r == k->rank ? MORI_ERANGE : MORI_EINVAL,
				       "window register: rank %d's range is not inside its heap", r);
		else if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
			rc = set_error(k->c, MORI_EINVAL, "window register: rank %d gave offset %llu, %llu bytes; rank 0 "
							  "gave offset %llu, %llu bytes", r, (unsigned long long)all[2 * r],
				       (unsigned long long)all[2 * r + 1], (unsigned long long)all[0],
				       (unsigned long long)all[1]);
	}
	free(all);
	if (rc)
		return rc;
	struct mori_window *w = calloc(1, sizeof(*w));
	if (!w)
		return set_error(k->c, MORI_ENOMEM, "out of memory");
	w->off = (uint64_t)off;
	w->bytes = bytes;
	w->next = k->wins;
	k->wins = w;
	*out = w;
	return MORI_OK;
}

int mori_comm_window_deregister(mori_comm *k, mori_window *win)
{
	if (!k || !win)
		return k ? set_error(k->c, MORI_EINVAL, "window deregister: NULL argument") : MORI_EINVAL;
	if (shmem_check(k->g)) return MORI_ESTALE; /* a child after fork: the parent's */
	struct mori_window **pp = &k->wins;
	while (*pp && *pp != win)
		pp = &(*pp)->next;
	if (!*pp)
		return set_error(k->c, MORI_ENOENT, "window deregister: not a window of this communicator");
	*pp = win->next;
	free(win);
	return mori_shmem_barrier_all(k->g); /* no peer reads it in place any more */
}

/* Whether [p, p + len) lies inside one window. */
static int in_window(const mori_comm *k, const void *p, uint64_t len)
{
	int64_t off = mori_shmem_offset(k->g, p);
	if (off < 0)
		return 0;
	for (const struct mori_window *w = k->wins; w; w = w->next)
		if ((uint64_t)off >= w->off && (uint64_t)off - w->off <= w->bytes && len <= w->bytes - ((uint64_t)off - w->off))
			return 1;
	return 0;
}

/* ---- the collectives: checks, then the path ---- */

static int check(mori_comm *k, const void *src, void *dst, mori_dtype dt, int reduce, mori_redop op, size_t *es)
{
	if (!k)
		return MORI_EINVAL;
	if (shmem_check(k->g)) return MORI_ESTALE; /* a child after fork: the parent's */
	if (!src || !dst)
		return set_error(k->c, MORI_EINVAL, "collective: NULL buffer");
	*es = mori_dtype_size(dt);
	if (!*es)
		return set_error(k->c, MORI_EINVAL, "collective: unknown dtype %d", (int)dt);
	if (reduce) {
		if (op != MORI_SUM && op != MORI_MAX && op != MORI_MIN)
			return set_error(k->c, MORI_EINVAL, "collective: unknown reduction op %d", (int)op);
		if (dt != MORI_FLOAT32 && dt != MORI_FLOAT16 && dt != MORI_BFLOAT16)
			return set_error(k->c, MORI_EINVAL, "collective: no %s reduction on dtype %d (float32, float16, "
							    "bfloat16 reduce)", op == MORI_SUM ? "sum" : op == MORI_MAX ? "max" : "min",
				       (int)dt);
	}
	mori_status st;
	int rc = comm_status(k, &st, 0); /* an earlier call's mismatch alone refuses nothing */
	if (rc)
		return set_error(k->c, rc, "collective: the communicator failed earlier (%s, PE %d): destroy it",
				 mori_strerror(rc), st.pe);
	return MORI_OK;
}

/* A buffer that starts in a window (or the heap) must end there: a count larger than the buffer is
 * refused before anything runs, where the library can know the buffer's size. */
static int extent(mori_comm *k, const void *p, uint64_t len, const char *what)
{
	int64_t off = mori_shmem_offset(k->g, p);
	if (off < 0)
		return MORI_OK;
	if (len > k->g->heap_size - (uint64_t)off)
		return set_error(k->c, MORI_ERANGE, "collective: %s (%llu bytes at heap offset %lld) runs past the end "
						     "of the heap (%llu bytes)", what, (unsigned long long)len, (long long)off,
				 (unsigned long long)k->g->heap_size);
	/* the group's reserved area (barrier flags, signals) and this communicator's own area (its
	 * flags, generations, tables, scratch) are not the caller's to hand in: a window over them
	 * would let a collective overwrite the communicator's own state */
	int64_t a = mori_shmem_offset(k->g, k->area);
	if ((uint64_t)off < MORI_SHMEM_RESERVED)
		return set_error(k->c, MORI_ERANGE, "collective: %s at heap offset %lld lies in the group's reserved area "
						     "(its first %llu bytes): pass memory from mori_shmem_malloc", what,
				 (long long)off, (unsigned long long)MORI_SHMEM_RESERVED);
	if (a >= 0 && (uint64_t)off < (uint64_t)a + k->area_bytes && (uint64_t)a < (uint64_t)off + len)
		return set_error(k->c, MORI_ERANGE, "collective: %s (%llu bytes at heap offset %lld) overlaps the "
						     "communicator's own area (%llu bytes at heap offset %lld: its flags and scratch)",
				 what, (unsigned long long)len, (long long)off, (unsigned long long)k->area_bytes, (long long)a);
	for (const struct mori_window *w = k->wins; w; w = w->next)
		if ((uint64_t)off >= w->off && (uint64_t)off - w->off < w->bytes && len > w->bytes - ((uint64_t)off - w->off))
			return set_error(k->c, MORI_ERANGE, "collective: %s (%llu bytes) runs past the end of its window "
							     "(%llu bytes at heap offset %llu)", what, (unsigned long long)len,
					 (unsigned long long)w->bytes, (unsigned long long)w->off);
	return MORI_OK;
}

/* count elements of es bytes, times mult (the ranks), in bytes; MORI_ERANGE when that overflows
 * (a count near SIZE_MAX must be refused, not wrap to a small length that passes the checks). */
static int bytes_of(mori_comm *k, size_t count, size_t es, uint64_t mult, uint64_t *out, const char *what)
{
	uint64_t b;
	if (__builtin_mul_overflow((uint64_t)count, (uint64_t)es, &b) || __builtin_mul_overflow(b, mult, out) ||
	    *out > (uint64_t)INT64_MAX)
		return set_error(k->c, MORI_ERANGE, "%s: count %zu of %zu-byte elements%s overflows a byte length", what,
				 count, es, mult > 1 ? " times the ranks" : "");
	return MORI_OK;
}

static int run(mori_comm *k, struct coll_call *cc, uint64_t src_len, uint64_t dst_len, int co)
{
	int rc = extent(k, cc->src, src_len, "sendbuf");
	if (rc || (rc = extent(k, cc->dst, dst_len, "recvbuf")))
		return rc;
	/* peers read src in place when it is a window, unless this rank also writes over it */
	uintptr_t s = (uintptr_t)cc->src, d = (uintptr_t)cc->dst; /* integers: no pointer overflow on huge lengths */
	int overlap = (s >= d && s - d < dst_len) || (d >= s && d - s < src_len);
	/* (in place, all-gather's src sits at a different offset on each rank: staged) */
	cc->src_win = in_window(k, cc->src, src_len) &&
		      (!overlap || cc->kind == MORI_COLL_K_AR_TWOSHOT || cc->kind == MORI_COLL_K_REDSCAT ||
		       cc->kind == MORI_COLL_K_BCAST);
	cc->dst_win = in_window(k, cc->dst, dst_len);
	if (cc->kind == MORI_COLL_K_AR_ONESHOT && overlap)
		cc->src_win = 0; /* one-shot writes dst while peers may still read src */
	(void)co;
	rc = k->gpu ? coll_gpu_run(k, cc) : coll_host_run(k, cc);
	if (rc && !k->gpu && !k->failed && rc != MORI_EINVAL && rc != MORI_ERANGE)
		k->failed = rc;
	return rc;
}

int mori_allreduce(mori_comm *k, const void *src, void *dst, size_t count, mori_dtype dt, mori_redop op, void *stream)
{
	size_t es;
	int rc = check(k, src, dst, dt, 1, op, &es);
	uint64_t len = 0;
	if (rc || !count || (rc = bytes_of(k, count, es, 1, &len, "allreduce")))
		return rc;
	int a = pick(k, CO_ALLREDUCE, len);
	struct coll_call cc = {.kind = a == MORI_COLL_ONESHOT ? MORI_COLL_K_AR_ONESHOT : MORI_COLL_K_AR_TWOSHOT,
			       .algo = a, .dtype = dt, .op = op, .es = es, .src = src, .dst = dst, .count = count,
			       .stream = stream};
	return run(k, &cc, len, len, CO_ALLREDUCE);
}

int mori_reducescatter(mori_comm *k, const void *src, void *dst, size_t count, mori_dtype dt, mori_redop op,
		       void *stream)
{
	size_t es;
	int rc = check(k, src, dst, dt, 1, op, &es);
	uint64_t len = 0, all = 0;
	if (rc || !count || (rc = bytes_of(k, count, es, 1, &len, "reducescatter")) ||
	    (rc = bytes_of(k, count, es, (uint64_t)k->n, &all, "reducescatter")))
		return rc;
	struct coll_call cc = {.kind = MORI_COLL_K_REDSCAT, .algo = MORI_COLL_KERNEL, .dtype = dt, .op = op, .es = es,
			       .src = src, .dst = dst, .count = count, .stream = stream};
	return run(k, &cc, all, len, CO_REDSCAT);
}

int mori_allgather(mori_comm *k, const void *src, void *dst, size_t count, mori_dtype dt, void *stream)
{
	size_t es;
	int rc = check(k, src, dst, dt, 0, MORI_SUM, &es);
	uint64_t len = 0, all = 0;
	if (rc || !count || (rc = bytes_of(k, count, es, 1, &len, "allgather")) ||
	    (rc = bytes_of(k, count, es, (uint64_t)k->n, &all, "allgather")))
		return rc;
	struct coll_call cc = {.kind = MORI_COLL_K_ALLGATHER, .algo = pick(k, CO_ALLGATHER, all),
			       .dtype = dt, .es = es, .src = src, .dst = dst, .count = count, .stream = stream};
	return run(k, &cc, len, all, CO_ALLGATHER);
}

int mori_alltoall(mori_comm *k, const void *src, void *dst, size_t count, mori_dtype dt, void *stream)
{
	size_t es;
	int rc = check(k, src, dst, dt, 0, MORI_SUM, &es);
	uint64_t all = 0;
	if (rc || !count || (rc = bytes_of(k, count, es, (uint64_t)k->n, &all, "alltoall")))
		return rc;
	struct coll_call cc = {.kind = MORI_COLL_K_ALLTOALL, .algo = pick(k, CO_ALLTOALL, all),
			       .dtype = dt, .es = es, .src = src, .dst = dst, .count = count, .stream = stream};
	return run(k, &cc, all, all, CO_ALLTOALL);
}

int mori_broadcast(mori_comm *k, const void *src, void *dst, size_t count, mori_dtype dt, int root, void *stream)
{
	size_t es;
	int rc = check(k, src ? src : dst, dst, dt, 0, MORI_SUM, &es);
	uint64_t len = 0;
	if (rc || !count || (rc = bytes_of(k, count, es, 1, &len, "broadcast")))
		return rc;
	if (root < 0 || root >= k->n)
		return set_error(k->c, MORI_EINVAL, "broadcast: root %d out of range (size %d)", root, k->n);
	if (!src)
		src = dst;
	struct coll_call cc = {.kind = MORI_COLL_K_BCAST, .algo = pick(k, CO_BCAST, len), .dtype = dt, .es = es,
			       .src = src, .dst = dst, .count = count, .root = root, .stream = stream};
	return run(k, &cc, len, len, CO_BCAST);
}

int mori_alltoallv(mori_comm *k, const void *src, const size_t *scount, const size_t *sdispl, void *dst,
		   const size_t *rcount, const size_t *rdispl, mori_dtype dt, void *stream)
{
	size_t es;
	int rc = check(k, src, dst, dt, 0, MORI_SUM, &es);
	if (rc)
		return rc;
	if (!scount || !sdispl || !rcount || !rdispl)
		return set_error(k->c, MORI_EINVAL, "alltoallv: NULL count or displacement array");
	uint64_t slen = 0, rlen = 0;
	for (int r = 0; r < k->n; r++) {
		uint64_t se, re;
		if (__builtin_add_overflow((uint64_t)sdispl[r], (uint64_t)scount[r], &se) ||
		    __builtin_add_overflow((uint64_t)rdispl[r], (uint64_t)rcount[r], &re))
			return set_error(k->c, MORI_ERANGE, "alltoallv: rank %d's displacement plus count overflows", r);
		slen = se > slen ? se : slen;
		rlen = re > rlen ? re : rlen;
	}
	if ((rc = bytes_of(k, slen, es, 1, &slen, "alltoallv")) || (rc = bytes_of(k, rlen, es, 1, &rlen, "alltoallv")))
		return rc;
	if (src == dst)
		return set_error(k->c, MORI_EINVAL, "alltoallv: in place is not supported");
	struct coll_call cc = {.kind = MORI_COLL_K_ALLTOALLV, .algo = MORI_COLL_KERNEL, .dtype = dt, .es = es, .src = src,
			       .dst = dst, .scount = scount, .sdispl = sdispl, .rcount = rcount, .rdispl = rdispl,
			       .stream = stream};
	return run(k, &cc, slen, rlen, CO_ALLTOALL);
}
