/* mori-kvreplay: the clock of --verbose, its log, and allocation that exits on failure (the
 * tool has nothing to fall back to). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvreplay.h"

uint64_t t_prog; /* start of the program, for --verbose */
int verbose;

void vlog(const char *role, const char *fmt, ...)
{
	if (!verbose)
		return;
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "[%8.3f s] %s: %s\n", (now_us() - t_prog) / 1e6, role, buf);
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p) {
		fprintf(stderr, "mori-kvreplay: out of memory (%zu x %zu bytes)\n", n, size);
		exit(2);
	}
	return p;
}

void *xrealloc(void *p, size_t size)
{
	p = realloc(p, size ? size : 1);
	if (!p) {
		fprintf(stderr, "mori-kvreplay: out of memory (%zu bytes)\n", size);
		exit(2);
	}
	return p;
}
