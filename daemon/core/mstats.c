/* Recording for metrics.c (see mstats.h). */
#include "mstats.h"

#include <time.h>

#include "morid.h"

const double mstats_bounds[MSTATS_NBUCKETS] = {
	10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3,
	5e-3,  10e-3, 25e-3, 50e-3,  100e-3, 250e-3, 1.0,   10.0,
};

static struct mstats_hist lat[2];
static uint64_t ended[2][2], bytes_ok[2];

void mstats_xfer(struct client *c, int read, uint64_t bytes, uint64_t latency_us, int code)
{
	read = !!read;
	double s = (double)latency_us / 1e6;
	int b = 0;
	while (b < MSTATS_NBUCKETS && s > mstats_bounds[b])
		b++;
	lat[read].bucket[b]++;
	lat[read].count++;
	lat[read].sum += s;
	ended[read][code == 0]++;
	if (code == 0)
		bytes_ok[read] += bytes;
	if (c) {
		c->xfers++;
		if (code == 0)
			c->xfer_bytes += bytes;
		else
			c->xfer_errors++;
	}
}

const struct mstats_hist *mstats_latency(int read) { return &lat[!!read]; }
uint64_t mstats_count(int read, int ok) { return ended[!!read][!!ok]; }
uint64_t mstats_bytes(int read) { return bytes_ok[!!read]; }

uint64_t mstats_wall_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
