/* What morid measures for its metrics, recorded where it happens and read by
 * metrics.c: cross-node transfers ended, per client (struct client's xfer_* fields) and as
 * latency histograms per operation. Bottom layer: calls nothing in daemon/. Loop thread only. */
#ifndef MORID_MSTATS_H
#define MORID_MSTATS_H
#include <stdint.h>

struct client;

/* Upper bounds of the latency buckets, seconds (Prometheus "le"); a last +Inf bucket follows. */
#define MSTATS_NBUCKETS 16
extern const double mstats_bounds[MSTATS_NBUCKETS];

struct mstats_hist {
	uint64_t bucket[MSTATS_NBUCKETS + 1]; /* not cumulative: bucket[i] counts bounds[i-1] < v <= bounds[i] */
	uint64_t count;
	double sum;                           /* seconds */
};

/* A cross-node transfer ended: its client (NULL once gone), read or write, bytes asked, how long
 * it took and its code. */
void mstats_xfer(struct client *c, int read, uint64_t bytes, uint64_t latency_us, int code);
/* The latency histogram of reads (read = 1) or writes. */
const struct mstats_hist *mstats_latency(int read);
/* Transfers and bytes ended, by operation and outcome (ok = 1: code 0). */
uint64_t mstats_count(int read, int ok);
uint64_t mstats_bytes(int read);
/* The wall clock (CLOCK_REALTIME), microseconds: what peers compare for clock skew. */
uint64_t mstats_wall_us(void);
#endif
