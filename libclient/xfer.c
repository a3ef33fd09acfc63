/* libmori transfers: validation, the same-node data path (direct copies between mappings, or
 * cross-memory attach), the cross-node path through the daemon's ring, prepared descriptor
 * lists, and status, wait, cancel. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"
#include "conv.h"
#include "pidfd.h"

#define DEFAULT_TIMEOUT_US 30000000ull
#define SPIN_US 50                /* busy-poll this long before sleeping on the doorbell */
#define DEADLINE_GRACE_US 2000000 /* the daemon owns cross-node deadlines; this is a backstop */
#define CMA_IOV 1024              /* iovecs per process_vm_* call (IOV_MAX) */

/* ---- the table of transfers waiting for the daemon ---- */

static void finish(struct mori_xfer *x, int code, const char *msg)
{
	if (atomic_load(&x->state) == XS_DONE)
		return;
	x->code = code;
	snprintf(x->msg, sizeof(x->msg), "%s", msg ? msg : "");
	if (x->local)
		atomic_fetch_sub(&x->local->inflight, 1);
	if (x->remote && atomic_fetch_sub(&x->remote->inflight, 1) == 1 &&
	    atomic_load(&x->remote->ack_pending) && atomic_exchange(&x->remote->ack_pending, 0))
		client_ack_revoke(x->c, x->remote);
	atomic_store_explicit(&x->state, XS_DONE, memory_order_release);
}

static void table_remove_locked(mori_client *c, struct mori_xfer *x)
{
	for (size_t i = 0; i < c->npending; i++)
		if (c->pending[i] == x) {
			c->pending[i] = c->pending[--c->npending];
			x->in_table = 0;
			return;
		}
}

static void xfer_complete_id(mori_client *c, uint64_t id, int code, const char *msg)
{
	pthread_mutex_lock(&c->xfer_lock);
	for (size_t i = 0; i < c->npending; i++) {
		struct mori_xfer *x = c->pending[i];
		if (x->id != id)
			continue;
		table_remove_locked(c, x);
		if (x->arena_len)
			arena_release(c, x->arena_off, x->arena_len);
		x->arena_len = 0;
		finish(x, code, code ? msg : "");
		break;
	}
	pthread_mutex_unlock(&c->xfer_lock);
}

static void xfer_close_all(mori_client *c)
{
	/* Give in-flight cross-node transfers a moment, then forget them (the daemon fails them
	 * when the session closes). Handles stay owned by the application. */
	uint64_t deadline = mori_now_us() + 1000000;
	while (c->npending && mori_now_us() < deadline) {
		client_reap(c);
		usleep(200);
	}
	pthread_mutex_lock(&c->xfer_lock);
	while (c->npending) {
		struct mori_xfer *x = c->pending[0];
		table_remove_locked(c, x);
		finish(x, MORI_ECANCELED, "client closed");
	}
	pthread_mutex_unlock(&c->xfer_lock);
}

static void pool_close(mori_client *c)
{
	if (c->pool)
		copy_pool_free(c->pool);
}

__attribute__((constructor)) static void xfer_hooks(void)
{
	client_on_xfer_done(xfer_complete_id);
	client_on_close(CLOSE_XFERS, xfer_close_all);
	client_on_close(CLOSE_POOL, pool_close); /* the pool is made by host_batch, below */
}

/* m is being deregistered while daemon-side transfers still use it: ask the daemon to drop
 * them and end them here (MORI_ECANCELED), so that no completion arriving later touches m.
 * Returns how many it ended. */
int xfer_cancel_mem(mori_client *c, mori_mem *m)
{
	int n = 0;
	pthread_mutex_lock(&c->xfer_lock);
	for (size_t i = 0; i < c->npending;) {
		struct mori_xfer *x = c->pending[i];
		if (x->local != m && x->remote != m) {
			i++;
			continue;
		}
		struct mori_sqe e = {.op = SQE_CANCEL, .user_data = x->id};
		client_submit(c, &e); /* best effort: the daemon's answer finds no record any more */
		table_remove_locked(c, x); /* moves the last entry to i */
		if (x->arena_len)
			arena_release(c, x->arena_off, x->arena_len);
		x->arena_len = 0;
		finish(x, MORI_ECANCELED, "a region of the transfer was deregistered while it was in flight");
		n++;
	}
	pthread_mutex_unlock(&c->xfer_lock);
	return n;
}

/* ---- validation ---- */

static int check_pair(mori_mem *local, mori_mem *remote)
{
	if (!local || !remote)
		return set_error(NULL, MORI_EINVAL, "transfer: NULL memory handle");
	int rc = client_check(local->c);
	if (rc != MORI_OK)
		return rc;
	if (!local->local)
		return set_error(local->c, MORI_EINVAL, "transfer: the local side must be a region this client registered");
	if (remote->c != local->c)
		return set_error(local->c, MORI_EINVAL, "transfer: the two handles belong to different clients");
	client_reap(local->c); /* cheap when empty; brings revocations in before we copy */
	if (atomic_load(&remote->revoked))
		return set_error(local->c, MORI_ESTALE, "transfer: remote region %llu was freed by its owner",
				 (unsigned long long)remote->region_id);
	return MORI_OK;
}

/* A transfer between a VRAM region and one of this node: libmori's copy kernel, on this process's
 * GPU (gpu_copy.c), which checks the batch as it stages it. */
static int gpu_local(const mori_mem *l, const mori_mem *r)
{
	return !r->remote && (l->kind == MORI_MEM_VRAM || r->kind == MORI_MEM_VRAM);
}

static struct mori_xfer *xfer_new(mori_client *c, mori_mem *l, mori_mem *r, const mori_xfer_opts *o)
{
	struct mori_xfer *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->c = c;
	x->local = l;
	x->remote = r;
	/* Without a timeout of its own a transfer gets morid's transfer_timeout_ms, applied by morid
	 * (a reload changes it); the one from the hello is only the library's estimate. */
	x->own_deadline = o && o->timeout_us > 0;
	uint64_t t = x->own_deadline ? (uint64_t)o->timeout_us
				     : c->default_timeout_ms ? c->default_timeout_ms * 1000ull : DEFAULT_TIMEOUT_US;
	x->deadline_us = mori_now_us() + t;
	x->has_notif = o && o->has_notif;
	x->tag = o ? o->notif_tag : 0;
	atomic_fetch_add(&l->inflight, 1);
	atomic_fetch_add(&r->inflight, 1);
	pthread_mutex_lock(&c->xfer_lock);
	x->id = ++c->next_xfer;
	pthread_mutex_unlock(&c->xfer_lock);
	return x;
}

/* ---- same node, host memory ---- */

static int notify(mori_client *c, mori_mem *target, uint64_t tag)
{
	struct mori_sqe e = {.op = SQE_NOTIFY, .local_region = target->region_id, .tag = tag};
	/* The data is in place: our stores are ordered before the SQ publish (release), and the
	 * daemon's CQ publish to the target follows its acquire of our entry. */
	int rc;
	uint64_t deadline = mori_now_us() + 1000000;
	while ((rc = client_submit(c, &e)) == MORI_EAGAIN && mori_now_us() < deadline) {
		client_reap(c);
		usleep(50);
	}
	return rc;
}

/* Has r's owner exited? Its pidfd (from morid) polls readable from the exit on, so a pid that
 * went to another process is never copied to or from. Without one, the bare pid as before. */
static int owner_exited(const mori_mem *r)
{
	return r->has_owner_pidfd && pidfd_exited(r->owner_pidfd);
}

static int cma_batch(mori_client *c, mori_xfer_op op, mori_mem *l, mori_mem *r, const mori_desc *d,
		     const uint32_t *idx, size_t n)
{
	struct iovec liov[CMA_IOV], riov[CMA_IOV];
	size_t k = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n) {
			const mori_desc *e = &d[idx ? idx[i] : i];
			liov[k] = (struct iovec){l->ptr + e->local_offset, e->length};
			riov[k] = (struct iovec){(void *)(uintptr_t)(r->owner_addr + e->remote_offset), e->length};
			k++;
		}
		if (k == CMA_IOV || (i == n && k)) {
			size_t want = 0;
			for (size_t j = 0; j < k; j++)
				want += liov[j].iov_len;
			if (owner_exited(r))
				return set_error(c, MORI_EPEERDEAD, "owner pid %d of region %llu has exited (the pid may be "
						 "another process's now): not copying", r->owner_pid,
						 (unsigned long long)r->region_id);
			ssize_t got = op == MORI_XFER_WRITE ? process_vm_writev(r->owner_pid, liov, k, riov, k, 0)
							  : process_vm_readv(r->owner_pid, liov, k, riov, k, 0);
			if (got >= 0 && op != MORI_XFER_WRITE && owner_exited(r))
				return set_error(c, MORI_EPEERDEAD, "owner pid %d of region %llu exited during the read: "
						 "its bytes are dropped", r->owner_pid, (unsigned long long)r->region_id);
			if (got < 0 && errno == ESRCH)
				return set_error(c, MORI_EPEERDEAD, "owner pid %d of region %llu has exited",
						 r->owner_pid, (unsigned long long)r->region_id);
			if (got < 0)
				return set_error(c, errno == EPERM ? MORI_EPERM : MORI_EIO,
						 "cross-memory attach to pid %d: %s", r->owner_pid, strerror(errno));
			if ((size_t)got != want)
				return set_error(c, MORI_EIO, "cross-memory attach to pid %d moved %zd of %zu bytes",
						 r->owner_pid, got, want);
			k = 0;
		}
	}
	return MORI_OK;
}

static int host_batch(mori_client *c, mori_xfer_op op, mori_mem *l, mori_mem *r, const mori_desc *d,
		      const uint32_t *idx, size_t n, uint64_t total)
{
	if (!r->ptr)
		return cma_batch(c, op, l, r, d, idx, n);
	if (l->ptr == NULL)
		return set_error(c, MORI_EINVAL, "local region has no host mapping");
	struct copy_op stack_ops[16] = {0};
	struct copy_op *ops = n <= 16 ? stack_ops : malloc(n * sizeof(*ops));
	int heap = n > 16;
	if (!ops)
		return set_error(c, MORI_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const mori_desc *e = &d[idx ? idx[i] : i];
		uint8_t *lp = l->ptr + e->local_offset, *rp = r->ptr + e->remote_offset;
		ops[i] = op == MORI_XFER_WRITE ? (struct copy_op){rp, lp, e->length}
					     : (struct copy_op){lp, rp, e->length};
	}
	if (!c->pool && total >= (1u << 20)) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		pthread_mutex_lock(&c->xfer_lock);
		if (!c->pool)
			c->pool = copy_pool_new((int)(cpus > 8 ? 7 : cpus > 1 ? cpus - 1 : 0));
		pthread_mutex_unlock(&c->xfer_lock);
	}
	copy_pool_run(c->pool, ops, n, total);
	if (heap)
		free(ops);
	return MORI_OK;
}

/* ---- submission, shared by the three forms ---- */

/* total: the bytes of the batch, summed by the caller during its validation pass. */
static int submit(mori_xfer_op op, mori_mem *l, mori_mem *r, const mori_desc *d, const uint32_t *idx,
		  size_t n, mori_xfer_list *list, uint64_t total, const mori_xfer_opts *o, mori_xfer **out)
{
	mori_client *c = l->c;
	mori_xfer_opts own = {.size = sizeof(own)}; /* the defaults: every field zero */
	if (o) {
		int orc = opts_take(&own, sizeof(own), o, OPTS_MIN_XFER);
		if (orc)
			return set_error(c, orc, "transfer: opts->size %zu is not a mori_xfer_opts this library reads "
						 "(%zu bytes): call mori_xfer_opts_init", o->size, sizeof(own));
		o = &own;
	}
	uint64_t list_id = list && r->remote ? list->list_id : 0;
	struct mori_xfer *x = xfer_new(c, l, r, o);
	if (!x)
		return set_error(c, MORI_ENOMEM, "out of memory");
	/* The revocation check again, now that the transfer counts as in flight: the owner's
	 * revocation (mem_revoked, maybe on the watcher thread) sets revoked, then reads inflight;
	 * we raised inflight, then read revoked (both sequentially consistent), so either we see it
	 * here or it sees us and waits for finish() to acknowledge. */
	if (atomic_load(&r->revoked)) {
		finish(x, MORI_ESTALE, "");
		free(x);
		return set_error(c, MORI_ESTALE, "transfer: remote region %llu was freed by its owner",
				 (unsigned long long)r->region_id);
	}
	x->bytes = total;
	int rc;
	if (r->remote) {
		/* Cross node: arguments into the arena, one entry on the ring. */
		uint64_t need = list_id ? n * sizeof(uint32_t) : n * sizeof(mori_desc);
		rc = arena_alloc(c, need, &x->arena_off);
		if (rc != MORI_OK) {
			finish(x, rc, "");
			free(x);
			return set_error(c, MORI_EAGAIN, "argument arena full (%llu bytes needed): complete transfers first",
					 (unsigned long long)need);
		}
		x->arena_len = need;
		uint8_t *arena = (uint8_t *)c->ring + c->lay.arena_off + x->arena_off;
		if (list_id) {
			memcpy(arena, idx, need);
		} else if (idx) {
			for (size_t i = 0; i < n; i++)
				memcpy(arena + i * sizeof(mori_desc), &d[idx[i]], sizeof(mori_desc));
		} else {
			memcpy(arena, d, need);
		}
		struct mori_sqe e = {
			.op = list_id ? SQE_XFER_LIST : SQE_XFER,
			.flags = (uint16_t)((op == MORI_XFER_READ ? SQE_F_READ : 0) | (x->has_notif ? SQE_F_NOTIF : 0)),
			.count = (uint32_t)n,
			.user_data = x->id,
			.local_region = l->region_id,
			.remote = list_id ? list_id : r->remote_ref,
			.arg_off = x->arena_off,
			.tag = x->tag,
		};
		if (x->own_deadline) { /* else 0: morid's transfer_timeout_ms */
			uint64_t now = mori_now_us();
			e.timeout_us = x->deadline_us > now ? x->deadline_us - now : 1;
		}
		pthread_mutex_lock(&c->xfer_lock);
		if (c->npending == c->cap_pending) {
			size_t ncap = c->cap_pending ? 2 * c->cap_pending : 64;
			void *p = realloc(c->pending, ncap * sizeof(*c->pending));
			if (p) {
				c->pending = p;
				c->cap_pending = ncap;
			}
		}
		int room = c->npending < c->cap_pending;
		if (room) {
			c->pending[c->npending++] = x;
			x->in_table = 1;
		}
		pthread_mutex_unlock(&c->xfer_lock);
		rc = room ? client_submit(c, &e) : set_error(c, MORI_ENOMEM, "out of memory");
		if (rc != MORI_OK) {
			pthread_mutex_lock(&c->xfer_lock);
			table_remove_locked(c, x);
			pthread_mutex_unlock(&c->xfer_lock);
			arena_release(c, x->arena_off, x->arena_len);
			finish(x, rc, "");
			free(x);
			return rc;
		}
		*out = x;
		return MORI_OK;
	}
	if (gpu_local(l, r)) {
		/* Lists stage only their indices (the descriptors already live on the GPU). */
		void *stream = o ? o->stream : NULL;
		rc = list ? gpu_xfer_list(c, op, list, idx, n, stream, x) : gpu_xfer(c, op, l, r, d, n, stream, x);
		if (rc != MORI_OK) {
			finish(x, rc, mori_client_last_error(c));
			free(x);
			return rc;
		}
		*out = x; /* completes through gpu_xfer_poll; the notification follows it */
		return MORI_OK;
	}
	rc = host_batch(c, op, l, r, d, idx, n, total);
	if (rc == MORI_OK && x->has_notif)
		rc = notify(c, r, x->tag);
	finish(x, rc, rc ? mori_client_last_error(c) : "");
	*out = x;
	return MORI_OK; /* a failed copy is the transfer's status, as for any transfer */
}

int mori_xfer_opts_init(mori_xfer_opts *o, size_t size)
{
	static const mori_xfer_opts defaults = {.size = sizeof(mori_xfer_opts)};
	return opts_init(o, size, OPTS_MIN_XFER, &defaults, sizeof(defaults));
}

int mori_xfer_batch(mori_xfer_op op, mori_mem *local, mori_mem *remote, const mori_desc *descs, size_t n,
		    const mori_xfer_opts *opts, mori_xfer **out)
{
	int rc = check_pair(local, remote);
	if (rc != MORI_OK)
		return rc;
	mori_client *c = local->c;
	if (!out || (op != MORI_XFER_READ && op != MORI_XFER_WRITE))
		return set_error(c, MORI_EINVAL, "transfer: NULL out or unknown op %d", (int)op);
	if (n == 0 || !descs)
		return set_error(c, MORI_EINVAL, "transfer: empty batch");
	if (n > UINT32_MAX)
		return set_error(c, MORI_EINVAL, "transfer: batch of %zu descriptors is too large", n);
	uint64_t total = 0; /* a GPU batch is checked and summed as it is staged, in one pass */
	for (size_t i = 0, checked = !gpu_local(local, remote); checked && i < n; i++) {
		if ((rc = desc_check(c, local, remote, &descs[i], i)) != MORI_OK)
			return rc;
		total += descs[i].length;
	}
	return submit(op, local, remote, descs, NULL, n, NULL, total, opts, out);
}

int mori_xfer_write(mori_mem *local, uint64_t local_offset, mori_mem *remote, uint64_t remote_offset,
	       uint64_t length, const mori_xfer_opts *opts, mori_xfer **out)
{
	mori_desc d = {local_offset, remote_offset, length};
	return mori_xfer_batch(MORI_XFER_WRITE, local, remote, &d, 1, opts, out);
}

int mori_xfer_read(mori_mem *local, uint64_t local_offset, mori_mem *remote, uint64_t remote_offset,
	      uint64_t length, const mori_xfer_opts *opts, mori_xfer **out)
{
	mori_desc d = {local_offset, remote_offset, length};
	return mori_xfer_batch(MORI_XFER_READ, local, remote, &d, 1, opts, out);
}

/* ---- prepared lists ---- */

/* Cross node: the descriptors travel to the daemon once, as a memfd. */
static int xfer_prep_remote(mori_client *c, mori_xfer_list *l)
{
	size_t bytes = l->n * sizeof(mori_desc);
	int fd = memfd_create("mori-descs", MFD_CLOEXEC);
	if (fd < 0)
		return set_error(c, MORI_ESYS, "memfd: %s", strerror(errno));
	size_t done = 0;
	while (done < bytes) {
		ssize_t w = write(fd, (const char *)l->descs + done, bytes - done);
		if (w <= 0) {
			close(fd);
			return set_error(c, MORI_ESYS, "memfd write: %s", strerror(errno));
		}
		done += (size_t)w;
	}
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__XferPrep p = MORI__XFER_PREP__INIT;
	Mori__Reply *rep;
	p.local_region = l->local->region_id;
	p.remote_ref = l->remote->remote_ref;
	p.count = (uint32_t)l->n;
	req.body_case = MORI__REQUEST__BODY_XFER_PREP;
	req.xfer_prep = &p;
	int rc = client_rpc(c, &req, &fd, 1, &rep, NULL, NULL);
	close(fd);
	if (rc != MORI_OK)
		return rc;
	if (rep->body_case != MORI__REPLY__BODY_XFER_PREP || !rep->xfer_prep->list_id) {
		mori__reply__free_unpacked(rep, NULL);
		return set_error(c, MORI_EPROTO, "prep reply without a list id");
	}
	l->list_id = rep->xfer_prep->list_id;
	mori__reply__free_unpacked(rep, NULL);
	return MORI_OK;
}

static void xfer_unprep_remote(mori_client *c, mori_xfer_list *l)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__XferUnprep u = MORI__XFER_UNPREP__INIT;
	Mori__Reply *rep;
	u.list_id = l->list_id;
	req.body_case = MORI__REQUEST__BODY_XFER_UNPREP;
	req.xfer_unprep = &u;
	if (client_rpc(c, &req, NULL, 0, &rep, NULL, NULL) == MORI_OK)
		mori__reply__free_unpacked(rep, NULL);
}

int mori_xfer_prep(mori_mem *local, mori_mem *remote, const mori_desc *descs, size_t n,
		   mori_xfer_list **out)
{
	int rc = check_pair(local, remote);
	if (rc != MORI_OK)
		return rc;
	mori_client *c = local->c;
	if (!out || !descs || n == 0)
		return set_error(c, MORI_EINVAL, "xfer_prep: empty list or NULL argument");
	if (n > UINT32_MAX)
		return set_error(c, MORI_EINVAL, "xfer_prep: list of %zu descriptors is too large", n);
	for (size_t i = 0; i < n; i++)
		if ((rc = desc_check(c, local, remote, &descs[i], i)) != MORI_OK)
			return rc;
	mori_xfer_list *l = calloc(1, sizeof(*l));
	if (!l || !(l->descs = malloc(n * sizeof(*descs)))) {
		free(l);
		return set_error(c, MORI_ENOMEM, "out of memory");
	}
	memcpy(l->descs, descs, n * sizeof(*descs));
	l->n = n;
	l->uniform_len = descs[0].length;
	for (size_t i = 1; i < n && l->uniform_len; i++)
		if (descs[i].length != l->uniform_len)
			l->uniform_len = 0;
	l->local = local;
	l->remote = remote;
	if (!remote->remote && (local->kind == MORI_MEM_VRAM || remote->kind == MORI_MEM_VRAM)) {
		rc = gpu_list_prep(c, l); /* descriptors uploaded to the GPU once */
		if (rc != MORI_OK) {
			free(l->descs);
			free(l);
			return rc;
		}
	} else if (remote->remote) {
		rc = xfer_prep_remote(c, l);
		if (rc != MORI_OK) {
			free(l->descs);
			free(l);
			return rc;
		}
	}
	*out = l;
	return MORI_OK;
}

int mori_xfer_submit(mori_xfer_list *l, mori_xfer_op op, const uint32_t *idx, size_t n,
		     const mori_xfer_opts *opts, mori_xfer **out)
{
	if (!l || !out || !idx || n == 0)
		return set_error(NULL, MORI_EINVAL, "xfer_submit: empty index array or NULL argument");
	int rc = check_pair(l->local, l->remote);
	if (rc != MORI_OK)
		return rc;
	mori_client *c = l->local->c;
	if (op != MORI_XFER_READ && op != MORI_XFER_WRITE)
		return set_error(c, MORI_EINVAL, "xfer_submit: unknown op %d", (int)op);
	/* One sequential pass over the indices; with equal-sized blocks (KV pages) the byte count
	 * needs no random reads of the descriptors. A GPU list's indices are checked as they are
	 * staged instead (gpu_copy.c). */
	uint64_t total = 0;
	if (gpu_local(l->local, l->remote))
		return submit(op, l->local, l->remote, l->descs, idx, n, l, 0, opts, out);
	if ((rc = desc_check_idx(c, "xfer_submit", idx, 0, n, l->n, NULL)) != MORI_OK)
		return rc;
	if (l->uniform_len)
		total = (uint64_t)n * l->uniform_len;
	else
		for (size_t i = 0; i < n; i++)
			total += l->descs[idx[i]].length;
	return submit(op, l->local, l->remote, l->descs, idx, n, l, total, opts, out);
}

int mori_xfer_list_free(mori_xfer_list *l)
{
	if (!l)
		return MORI_OK;
	if (client_forked(l->local->c)) {
		free(l->descs);
		free(l);
		return MORI_OK;
	}
	if (l->gpu_priv)
		gpu_list_free(l->local->c, l);
	if (l->list_id)
		xfer_unprep_remote(l->local->c, l);
	free(l->descs);
	free(l);
	return MORI_OK;
}

/* ---- status, wait, cancel ---- */

static int poll_one(struct mori_xfer *x)
{
	if (atomic_load_explicit(&x->state, memory_order_acquire) == XS_DONE)
		return x->code;
	if (x->gpu_event) {
		int rc = gpu_xfer_poll(x);
		if (rc == MORI_EINPROGRESS)
			return rc;
		if (rc == MORI_OK && x->has_notif)
			rc = notify(x->c, x->remote, x->tag);
		finish(x, rc, rc ? mori_client_last_error(x->c) : "");
		return x->code;
	}
	client_reap(x->c);
	if (atomic_load_explicit(&x->state, memory_order_acquire) == XS_DONE)
		return x->code;
	if (x->own_deadline && mori_now_us() > x->deadline_us + DEADLINE_GRACE_US) {
		/* The daemon should have failed it by now; don't let it hang. */
		mori_xfer_cancel(x);
		pthread_mutex_lock(&x->c->xfer_lock);
		if (x->in_table)
			table_remove_locked(x->c, x);
		if (x->arena_len)
			arena_release(x->c, x->arena_off, x->arena_len);
		x->arena_len = 0;
		finish(x, MORI_ETIMEDOUT, "transfer deadline expired (no completion from morid)");
		pthread_mutex_unlock(&x->c->xfer_lock);
		return x->code;
	}
	return MORI_EINPROGRESS;
}

int mori_xfer_status(mori_xfer *x, mori_status *out)
{
	if (!x)
		return status_set(out, MORI_EINVAL, -1, "NULL transfer");
	int crc = client_check(x->c);
	if (crc != MORI_OK)
		return status_set(out, crc, -1, mori_client_last_error(x->c));
	int rc = poll_one(x);
	return status_set(out, rc, -1, rc == MORI_EINPROGRESS ? "in progress" : x->msg);
}

int mori_xfer_wait(mori_xfer *x, int64_t timeout_us)
{
	if (!x)
		return MORI_EINVAL;
	int rc = client_check(x->c);
	if (rc != MORI_OK)
		return rc;
	uint64_t start = mori_now_us();
	/* < 0: until the transfer ends (morid ends every transfer by its deadline) */
	uint64_t deadline = timeout_us >= 0     ? start + (uint64_t)timeout_us
			    : x->own_deadline ? x->deadline_us + DEADLINE_GRACE_US + 1000
					      : UINT64_MAX;
	for (;;) {
		rc = poll_one(x);
		if (rc != MORI_EINPROGRESS)
			return rc;
		uint64_t now = mori_now_us();
		if (now >= deadline)
			return set_error(x->c, MORI_ETIMEDOUT, "wait of %lld us expired (transfer %llu continues)",
					 (long long)timeout_us, (unsigned long long)x->id);
		if (now - start > SPIN_US && !x->gpu_event) {
			if (x->in_table && client_session_gone(x->c)) {
				pthread_mutex_lock(&x->c->xfer_lock);
				if (x->in_table)
					table_remove_locked(x->c, x);
				finish(x, MORI_ECONN, "session with morid lost");
				pthread_mutex_unlock(&x->c->xfer_lock);
				continue;
			}
			client_sleep(x->c, (int64_t)(deadline - now));
		}
	}
}

int mori_xfer_wait_all(mori_xfer *const *xs, size_t n, int64_t timeout_us)
{
	if (!xs && n)
		return MORI_EINVAL;
	uint64_t start = mori_now_us();
	int first = MORI_OK;
	for (size_t i = 0; i < n; i++) {
		int64_t left = -1;
		if (timeout_us >= 0) {
			uint64_t used = mori_now_us() - start;
			left = used >= (uint64_t)timeout_us ? 0 : timeout_us - (int64_t)used;
		}
		int rc = mori_xfer_wait(xs[i], left);
		if (rc == MORI_ETIMEDOUT && mori_xfer_status(xs[i], NULL) == MORI_EINPROGRESS)
			return MORI_ETIMEDOUT;
		if (rc != MORI_OK && first == MORI_OK)
			first = rc;
	}
	return first;
}

int mori_xfer_cancel(mori_xfer *x)
{
	if (!x)
		return MORI_EINVAL;
	int rc = client_check(x->c);
	if (rc != MORI_OK)
		return rc;
	if (atomic_load(&x->state) == XS_DONE)
		return MORI_OK;
	if (x->in_table) {
		struct mori_sqe e = {.op = SQE_CANCEL, .user_data = x->id};
		client_submit(x->c, &e); /* the completion (ECANCELED) comes back through the CQ */
		return MORI_OK;
	}
	if (x->gpu_event) {
		/* a launched kernel cannot be recalled: wait for it, then report cancelled */
		while (gpu_xfer_poll(x) == MORI_EINPROGRESS)
			usleep(10);
		finish(x, MORI_ECANCELED, "cancelled (the copy had already been launched)");
	}
	return MORI_OK;
}

uint64_t mori_xfer_bytes(const mori_xfer *x) { return x ? x->bytes : 0; }

int mori_xfer_free(mori_xfer *x)
{
	if (!x)
		return MORI_OK;
	if (client_forked(x->c)) {
		free(x); /* the child's copy; the parent's ring is not ours to touch */
		return MORI_OK;
	}
	if (atomic_load(&x->state) != XS_DONE) {
		mori_xfer_cancel(x);
		/* the daemon answers a cancel promptly; bounded so free never hangs */
		mori_xfer_wait(x, 2000000);
		if (atomic_load(&x->state) != XS_DONE) {
			pthread_mutex_lock(&x->c->xfer_lock);
			if (x->in_table)
				table_remove_locked(x->c, x);
			finish(x, MORI_ECANCELED, "freed");
			pthread_mutex_unlock(&x->c->xfer_lock);
		}
	}
	free(x);
	return MORI_OK;
}
