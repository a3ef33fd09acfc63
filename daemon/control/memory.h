/* Memory requests of attached clients: register, deregister, publish, look up, open, close. */
#ifndef MORID_MEMORY_H
#define MORID_MEMORY_H
#include "core/morid.h"

/* Returns 1 if the reply was deferred (a lookup at another node), else 0. Owns fds. */
int memory_handle_request(struct morid *d, struct client *c, Mori__Request *req, Mori__Reply *rep,
			  struct rctx *r, int *fds, int nfds);
/* "no GPU" or a one-line description of the GPUs the runtime sees. */
const char *memory_gpu_summary(struct morid *d);
#endif
