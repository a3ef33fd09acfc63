/* Reply building: pieces of a reply allocated together and freed after it is packed, and the
 * error reply every request handler uses. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "morid.h"

void *rctx_alloc(struct rctx *r, size_t size)
{
	if (r->n == r->cap) {
		size_t ncap = r->cap ? 2 * r->cap : 16;
		void **p = realloc(r->ptrs, ncap * sizeof(*p));
		if (!p)
			return NULL;
		r->ptrs = p;
		r->cap = ncap;
	}
	void *m = calloc(1, size ? size : 1);
	if (m)
		r->ptrs[r->n++] = m;
	return m;
}

char *rctx_strdup(struct rctx *r, const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = rctx_alloc(r, n);
	if (p)
		memcpy(p, s, n);
	return p ? p : (char *)"";
}

int rctx_dup_fd(struct rctx *r, Mori__Reply *rep, int fd)
{
	int k = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (k < 0) {
		reply_error(rep, MORI_ESYS, "open: dup: %s", strerror(errno));
		return -1;
	}
	r->fds[r->nfds++] = k;
	return 0;
}

void rctx_free(struct rctx *r)
{
	for (int i = 0; i < r->nfds && !r->keep_fds; i++)
		close(r->fds[i]);
	r->nfds = 0;
	for (size_t i = 0; i < r->n; i++)
		free(r->ptrs[i]);
	free(r->ptrs);
	r->ptrs = NULL;
	r->n = r->cap = 0;
}

void reply_error(Mori__Reply *rep, int code, const char *fmt, ...)
{
	static char buf[512]; /* one reply is built at a time on the loop */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	rep->code = code;
	rep->message = buf;
	rep->body_case = MORI__REPLY__BODY__NOT_SET;
}
