/* Prometheus metrics: the text exposition format 0.0.4 of what morid counts (the
 * counters of moractl status, per peer and per client bytes/transfers/errors, transfer latency
 * histograms, ring occupancy, GPU staging bytes), for `moractl metrics` and, where
 * metrics_listen is set, over HTTP (GET /metrics) by a small responder on the loop: one request
 * per connection, 5 s for it and its reply, at most 64 connections open (a new one closes the
 * oldest; counted as metrics_connections_dropped). */
#ifndef MORID_METRICS_H
#define MORID_METRICS_H
#include <stddef.h>

struct morid;

/* The exposition text (malloc'd, NUL-terminated; *len without the NUL), or NULL when out of
 * memory. Loop thread. */
char *metrics_render(struct morid *d, size_t *len);

/* Start the HTTP endpoint on cfg.metrics_listen (nothing when empty). 0, or -1 logged. */
int metrics_start(struct morid *d);
/* Stop it: close the listener and every connection. Idempotent. Loop thread. */
void metrics_stop(struct morid *d);
#endif
