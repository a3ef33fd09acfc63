/* UMBP's registered memory (include/mori_umbp.h, mori_umbp_register_memory): a range becomes a
 * mori region of the client (mori_mem_register), which morid writes values fetched from other
 * nodes straight into (daemon/kv/kv_remote.c), and host memory is pinned for the GPU copy engine
 * where a GPU runtime is loaded. VRAM morid cannot map (neither VMM with POSIX fds nor cudaMalloc
 * memory) is kept without a region: its values come through slots, as for unregistered VRAM. */
#include <stdlib.h>
#include <string.h>

#include "gpu_int.h"
#include "internal.h"
#include "umbp_int.h"

void umbp_regs_init(struct umbp_regs *R)
{
	memset(R, 0, sizeof(*R));
	pthread_rwlock_init(&R->lock, NULL);
}

/* Pinning host memory needs a current context: GPU $MORI_GPU_DEVICE's (default 0) primary one,
 * pushed here (a caller's thread may have none); the pin is portable to every context. */
static int host_pin_ctx(mori_client *c, const struct gpu_api *g, struct gpu_dev **d)
{
	const char *e = getenv("MORI_GPU_DEVICE");
	struct gpu_ctx *x;
	int rc = gpu_ctx_get(c, &x);
	if (rc == MORI_OK)
		rc = gpu_dev_get(c, x, e && *e ? atoi(e) : 0, d);
	if (rc == MORI_OK && gpu_push(g, *d) != 0)
		rc = set_error(c, MORI_EIO, "register memory: cannot make the GPU's context current");
	return rc;
}

/* Forget range i (lock held for writing, or the handle closing): its region goes (morid's
 * transfers into it end first), its pin with it. */
static void drop(struct umbp_regs *R, mori_client *c, size_t i, int forked)
{
	struct umbp_reg g = R->r[i];
	R->r[i] = R->r[--R->n];
	if (forked)
		return;
	mori_mem_deregister(g.mem);
	const struct gpu_api *ga = g.pinned ? gpu_api() : NULL;
	struct gpu_dev *d;
	if (ga && host_pin_ctx(c, ga, &d) == MORI_OK) {
		ga->mem_host_unregister(g.ptr);
		gpu_pop(ga);
	}
}

void umbp_regs_fini(struct umbp_regs *R, mori_client *c, int forked)
{
	while (R->n)
		drop(R, c, R->n - 1, forked);
	free(R->r);
	R->r = NULL;
	pthread_rwlock_destroy(&R->lock);
}

const struct umbp_reg *umbp_regs_find(const struct umbp_regs *R, const void *p, size_t len)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < R->n; i++)
		if (b >= R->r[i].ptr && len <= R->r[i].size && (size_t)(b - R->r[i].ptr) <= R->r[i].size - len)
			return &R->r[i];
	return NULL;
}

int umbp_regs_add(struct umbp_regs *R, mori_client *c, void *ptr, size_t size)
{
	if (!ptr || !size)
		return set_error(c, MORI_EINVAL, "register memory: NULL or 0 bytes");
	int vram = gpu_ptr_is_device(ptr) == 1;
	pthread_rwlock_wrlock(&R->lock);
	for (size_t i = 0; i < R->n; i++)
		if ((uint8_t *)ptr < R->r[i].ptr + R->r[i].size && R->r[i].ptr < (uint8_t *)ptr + size) {
			pthread_rwlock_unlock(&R->lock);
			return set_error(c, MORI_EBUSY, "register memory: %p (+%zu) overlaps a registered range", ptr, size);
		}
	struct umbp_reg g = {.ptr = ptr, .size = size};
	struct umbp_reg *nr = realloc(R->r, sizeof(*nr) * (R->n + 1));
	if (!nr) {
		pthread_rwlock_unlock(&R->lock);
		return set_error(c, MORI_ENOMEM, "out of memory");
	}
	R->r = nr;
	int rc = mori_mem_register(c, ptr, size, vram ? MORI_MEM_VRAM : MORI_MEM_HOST, &g.mem);
	if (rc != MORI_OK && vram) {
		g.mem = NULL;
		rc = MORI_OK;
	}
	const struct gpu_api *ga = !vram && rc == MORI_OK && gpu_runtime_loaded() ? gpu_api() : NULL;
	struct gpu_dev *d;
	if (ga && (rc = host_pin_ctx(c, ga, &d)) == MORI_OK) {
		int e = ga->mem_host_register(ptr, size, GPU_MEMHOSTREGISTER_PORTABLE);
		gpu_pop(ga);
		if (e != 0)
			rc = set_error(c, MORI_EBUSY, "register memory: the GPU runtime refused %p (+%zu) (%d): registered already?",
				       ptr, size, e);
		g.pinned = e == 0;
	}
	if (rc != MORI_OK) {
		mori_mem_deregister(g.mem);
		pthread_rwlock_unlock(&R->lock);
		return rc;
	}
	R->r[R->n++] = g;
	pthread_rwlock_unlock(&R->lock);
	return MORI_OK;
}

int umbp_regs_remove(struct umbp_regs *R, mori_client *c, void *ptr)
{
	if (!ptr)
		return set_error(c, MORI_EINVAL, "deregister memory: NULL");
	pthread_rwlock_wrlock(&R->lock); /* no get names its region any more */
	size_t i = 0;
	while (i < R->n && R->r[i].ptr != ptr)
		i++;
	if (i == R->n) {
		pthread_rwlock_unlock(&R->lock);
		return set_error(c, MORI_EINVAL, "deregister memory: %p is not the start of a registered range", ptr);
	}
	drop(R, c, i, 0);
	pthread_rwlock_unlock(&R->lock);
	return MORI_OK;
}
