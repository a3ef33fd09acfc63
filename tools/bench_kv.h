/* mori-bench kv: what tools/bench_kv.c (bandwidth, clients, the SSD probe) and
 * tools/bench_kv_trace.c (tier profiles, trace record and replay) share. */
#ifndef BENCH_KV_H
#define BENCH_KV_H

#include <stddef.h>
#include <stdint.h>

#include "mori.h"
#include "mori_umbp.h"

struct kvo {
	const char *rundir;   /* morid's runtime directory (NULL: the library's default) */
	const char *ssd_dir;  /* morid's kv_ssd_dir: the raw O_DIRECT probe writes there */
	const char *profile;  /* uniform | zipf | raw | pressure (tools/bench_kv_trace.c) */
	const char *record;   /* write the profile's trace here */
	const char *replay;   /* replay this trace */
	const char *only;     /* bw | ssd | clients: one section of the default run */
	uint64_t min, max;    /* value sizes of the bandwidth rows (bytes) */
	uint64_t budget;      /* bytes per bandwidth row's batch (0: a quarter of DRAM, at most 256 MiB) */
	uint64_t ssd_bytes;   /* bytes each SSD row spills (0: half the SSD tier, at most 512 MiB) */
	uint64_t small;       /* value size of the client rows (bytes) */
	uint64_t value;       /* value size of the profiles (bytes) */
	size_t batch;         /* items per batch call at most */
	int iters;
	int clients[8], n_clients;
	int ops;              /* client rows: operations of each kind over all clients; profiles: ops */
	int keys;             /* profiles: distinct keys (0: the profile's default) */
	uint64_t seed;
};

/* tools/mori-bench.c */
double now_s(void);
uint64_t parse_size(const char *s);

/* tools/bench_kv.c */
void kv_die(const char *what, int rc);
mori_umbp *kv_open(const char *rundir, const char *name, mori_client **c);
void kv_close(mori_umbp *u, mori_client *c);
/* The value of (key, seed): len bytes that depend on them only. */
void kv_fill(uint8_t *dst, size_t len, const char *key, size_t key_len, uint64_t seed);
double kv_memcpy_gbps(uint8_t *dst, const uint8_t *src, size_t len, uint64_t total);
double kv_pct(double *v, size_t n, double p);
void *kv_alloc(size_t n);

/* tools/bench_kv_trace.c: a profile run (recording its trace with o->record) or a replay. */
int kv_trace_main(const struct kvo *o);

#endif
