/* Prometheus metrics (issue 19): the text exposition format 0.0.4 of what morid counts (the
 * counters of moractl status, per peer and per client bytes/transfers/errors, transfer latency
 * histograms, ring occupancy, GPU staging bytes), for `moractl metrics` and, where
 * metrics_listen is set, over HTTP (GET /metrics) through nng's HTTP server.
 *
 * Threads: nng serves HTTP on its own threads; a request there wakes the loop (uv_async) and
 * waits (at most 2 s) for the loop to render the text, so everything read here is read on the
 * loop thread as the rest of morid reads it. The one mutex guards the hand-over only. */
#ifndef MORID_METRICS_H
#define MORID_METRICS_H
#include <stddef.h>

struct morid;

/* The exposition text (malloc'd, NUL-terminated; *len without the NUL), or NULL when out of
 * memory. Loop thread. */
char *metrics_render(struct morid *d, size_t *len);

/* Start the HTTP endpoint on cfg.metrics_listen (nothing when empty). 0, or -1 logged. */
int metrics_start(struct morid *d);
/* Stop it (waits for nng's handlers; they answer 503 from here on). Idempotent. Loop thread. */
void metrics_stop(struct morid *d);
#endif
