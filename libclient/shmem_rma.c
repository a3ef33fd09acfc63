/* libmori MORI-SHMEM host puts and gets (mori_shmem_putmem / getmem): a PE of this node is
 * reached through its mapping (memcpy, or the driver's copy for VRAM heaps), any other through
 * morid: a transfer between this PE's heap (or a host staging buffer, when the caller's memory
 * is not in the heap) and the peer's heap region, which the daemons move over their transports
 * like any cross-node transfer. Blocking: the bytes have landed when the call returns. */
#include <string.h>

#include "shmem_int.h"

#define BOUNCE_BYTES (4u << 20) /* staging for memory outside the heap, per group */

static int check(mori_group *g, const void *sym, size_t len, int pe, uint64_t *off, const char *what)
{
	if (!g)
		return set_error(NULL, MORI_EINVAL, "%s: NULL group", what);
	int rc = shmem_check(g);
	if (rc)
		return rc;
	if (pe < 0 || pe >= g->n_pes)
		return set_error(g->c, MORI_EINVAL, "%s: PE %d is out of range (the group has PEs 0..%d)", what, pe,
				 g->n_pes - 1);
	int64_t o = mori_shmem_offset(g, sym);
	if (o < 0 || len > g->heap_size - (uint64_t)o)
		return set_error(g->c, MORI_ERANGE, "%s: [%p, +%zu) is not inside this PE's heap [%p, +%llu)", what, sym,
				 len, (void *)(uintptr_t)g->base, (unsigned long long)g->heap_size);
	*off = (uint64_t)o;
	return shmem_abort_status(g);
}

static int copy_here(mori_group *g, void *dst, const void *src, size_t len)
{
	if (g->kind == MORI_MEM_VRAM)
		return shmem_gpu_copy(g, dst, src, len);
	memmove(dst, src, len); /* a PE's put to itself may overlap */
	return MORI_OK;
}

/* The remote peer's heap region, opened on first use (rma_lock held). */
static int remote_mem(mori_group *g, int pe, mori_mem **out)
{
	struct gpeer *p = &g->peers[pe];
	if (!p->m) {
		Mori__Handle *h = mori__handle__unpack(NULL, p->handle_len, p->handle);
		if (!h)
			return set_error(g->c, MORI_EPROTO, "PE %d's heap handle is malformed", pe);
		int rc = mem_open_heap(g->c, h, &p->m);
		mori__handle__free_unpacked(h, NULL);
		if (rc)
			return set_error(g->c, rc, "group '%s': cannot open PE %d's heap at %s: %s", g->name, pe, p->node,
					 mori_client_last_error(g->c));
	}
	*out = p->m;
	return MORI_OK;
}

static int xfer(int write, mori_mem *local, uint64_t loff, mori_mem *remote, uint64_t roff, uint64_t len)
{
	mori_xfer *x;
	int rc = write ? mori_xfer_write(local, loff, remote, roff, len, NULL, &x) : mori_xfer_read(local, loff, remote, roff, len, NULL, &x);
	if (rc)
		return rc;
	rc = mori_xfer_wait(x, -1);
	mori_xfer_free(x);
	return rc;
}

/* dst/src: the peer's heap at roff; mine: memory of this process (in the heap or not). */
static int remote_rma(mori_group *g, int write, void *mine, uint64_t roff, size_t len, int pe)
{
	pthread_mutex_lock(&g->rma_lock);
	mori_mem *peer = NULL;
	int rc = remote_mem(g, pe, &peer);
	int64_t moff = mori_shmem_offset(g, mine);
	if (rc == MORI_OK && moff >= 0 && len <= g->heap_size - (uint64_t)moff) {
		rc = xfer(write, g->own, (uint64_t)moff, peer, roff, len); /* straight from/to our heap */
	} else if (rc == MORI_OK) {
		if (!g->bounce)
			rc = mori_mem_alloc(g->c, BOUNCE_BYTES, MORI_MEM_HOST, &g->bounce);
		for (size_t done = 0; rc == MORI_OK && done < len;) {
			size_t n = len - done < BOUNCE_BYTES ? len - done : BOUNCE_BYTES;
			uint8_t *b = mori_mem_ptr(g->bounce), *u = (uint8_t *)mine + done;
			if (write)
				rc = copy_here(g, b, u, n);
			if (rc == MORI_OK)
				rc = xfer(write, g->bounce, 0, peer, roff + done, n);
			if (rc == MORI_OK && !write)
				rc = copy_here(g, u, b, n);
			done += n;
		}
	}
	pthread_mutex_unlock(&g->rma_lock);
	return rc;
}

int mori_shmem_putmem(mori_group *g, void *dst, const void *src, size_t len, int pe)
{
	uint64_t off;
	int rc = check(g, dst, len, pe, &off, "shmem putmem");
	if (rc || len == 0)
		return rc;
	if (!src)
		return set_error(g->c, MORI_EINVAL, "shmem putmem: NULL source");
	if (g->peers[pe].local)
		return copy_here(g, (void *)(uintptr_t)(g->peers[pe].base + off), src, len);
	return remote_rma(g, 1, (void *)src, off, len, pe);
}

int mori_shmem_getmem(mori_group *g, void *dst, const void *src, size_t len, int pe)
{
	uint64_t off;
	int rc = check(g, src, len, pe, &off, "shmem getmem");
	if (rc || len == 0)
		return rc;
	if (!dst)
		return set_error(g->c, MORI_EINVAL, "shmem getmem: NULL destination");
	if (g->peers[pe].local)
		return copy_here(g, dst, (const void *)(uintptr_t)(g->peers[pe].base + off), len);
	return remote_rma(g, 0, dst, off, len, pe);
}

void shmem_rma_close(mori_group *g)
{
	if (g->bounce)
		mori_mem_deregister(g->bounce);
	g->bounce = NULL;
}
