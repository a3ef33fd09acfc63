/* Placeholder GPU entry points until libclient/gpu_mem.c and gpu_copy.c land: DELETE THIS FILE
 * when they do (they define the same symbols). */
#include "internal.h"

int gpu_mem_register(mori_client *c, mori_mem *m, void *ptr, size_t len, Mori__MemRegister *req,
		     uint8_t *ipc_buf, size_t ipc_cap, int *fd_out)
{
	return set_error(c, MORI_ENOGPU, "no GPU runtime in this build");
}
int gpu_mem_open(mori_client *c, mori_mem *m, const Mori__MemOpenReply *o, int fd)
{
	return set_error(c, MORI_ENOGPU, "no GPU runtime in this build");
}
void gpu_mem_close(mori_client *c, mori_mem *m) {}
int gpu_xfer(mori_client *c, int op, mori_mem *local, mori_mem *remote, const mori_desc *descs,
	     size_t n, void *stream, struct mori_xfer *x)
{
	return set_error(c, MORI_ENOGPU, "no GPU runtime in this build");
}
int gpu_xfer_poll(struct mori_xfer *x) { return MORI_ENOGPU; }
void gpu_ctx_free(mori_client *c) {}
int gpu_ptr_is_device(const void *ptr) { return -1; }
