/* mori-kvreplay's internal interface, shared by its files in tools/kvreplay/ and by
 * tests/test_kv_logic.c (which links every object but main.o). The tool uses only libmori's
 * public API (mori.h).
 *
 * Who does what: trace.c reads the workload, model.c turns a preset into the pool's geometry and
 * derives each page's content, pool.c is the decode side's prefix cache (LRU over block slots),
 * sched.c replays the trace through it, side.c holds one side's libmori objects and moves a
 * job's pages, coord.c carries messages between the two sides (and --role's TCP connection),
 * prefill.c and decode.c are the two processes, report.c prints the summary, main.c the options,
 * util.c the clock of --verbose and allocation that exits.
 */
#ifndef MORI_KVREPLAY_H
#define MORI_KVREPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include "mori.h"

#define TRACE_BLOCK_TOKENS 512
#define JOB_MAX_BLOCKS 1024 /* a longer request is moved in several jobs */
#define NIL UINT32_MAX        /* no block slot */

static inline uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* util.c */
extern uint64_t t_prog; /* start of the program, for --verbose */
extern int verbose;
void vlog(const char *role, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *xcalloc(size_t n, size_t size); /* exits with status 2 when memory runs out */
void *xrealloc(void *p, size_t size);

/* ---------------------------------------------------------------------------------------------
 * Options (main.c parses them; --role prefill|decode runs one side only)
 */
enum mode { MODE_PUSH = 0, MODE_PULL = 1 };

struct opts {
	const char *trace_path;
	int trace_explicit, force_synthetic;
	const char *model;
	int page_tokens;
	uint64_t pool_mib, pool_blocks;
	int mem_kind;
	size_t requests;
	double speedup;
	int afap;
	int window;
	uint64_t batch;
	int mode;
	const char *prefill_rt, *decode_rt;
	const char *prefill_node, *decode_node;
	int64_t timeout_ms;
	int skip_bad, json, progress, dry_run, warmup, io_baseline;
	uint64_t verify_every; /* fill and verify job ids that are multiples of this (1: all) */
	int role;              /* ROLE_BOTH: fork both sides; else this process is one of them */
	const char *coord;     /* --coord HOST:PORT: the side channel between the two roles */
	int role_cross;        /* role mode: the two sides' daemons differ (set at the hello) */
};
enum { ROLE_BOTH = 0, ROLE_PREFILL, ROLE_DECODE };

/* ---------------------------------------------------------------------------------------------
 * Model presets and pool geometry (model.c)
 */
struct preset {
	const char *name;
	int layers;
	int kv_heads;     /* per rank */
	int head_dim;     /* elements per head (MLA: the latent) */
	int elem_bytes;
	int kv;           /* 2: separate K and V pages; 1: one latent (MLA) */
	int page_tokens;
	const char *what;
};

struct geom {
	const struct preset *p;
	int layers, kv, page_tokens;
	uint64_t page_bytes;       /* one (layer, K/V) page */
	uint32_t pages_per_block;  /* per 512-token trace block */
	uint64_t descs_per_block;  /* layers x kv x pages_per_block */
	uint64_t bytes_per_block;
	uint32_t pool_blocks;
	uint64_t pool_pages;       /* per (layer, K/V) */
	uint64_t pool_descs;
	uint64_t pool_bytes;
};

const struct preset *preset_find(const char *name);
/* Fill g from a preset. page_tokens 0 keeps the preset's. Pool size from pool_blocks, else
 * pool_mib (rounded down to whole blocks). Returns 0, or -1 with a reason in err. */
int geom_init(struct geom *g, const struct preset *p, int page_tokens, uint64_t pool_blocks,
	      uint64_t pool_mib, char *err, size_t errlen);

/* Index of the descriptor (and page slot) for (layer, kv, page) in the vLLM layout. */
static inline uint32_t desc_index(const struct geom *g, int layer, int kv, uint64_t page)
{
	return (uint32_t)(((uint64_t)layer * g->kv + kv) * g->pool_pages + page);
}

/* ---------------------------------------------------------------------------------------------
 * Content derivation: word i of page (hash, layer, kv, page-in-block) is seed + i * GOLDEN, with
 * the seed a 64-bit mix of the four. A page landing in the wrong slot, a shifted or torn copy
 * and a stale page all fail the check; writing and checking run at memory speed (model.c).
 */
#define GOLDEN 0x9e3779b97f4a7c15ull

static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t page_seed(uint64_t hash, int layer, int kv, uint32_t page_in_block)
{
	return mix64(mix64(hash + GOLDEN) ^ ((uint64_t)layer << 33 | (uint64_t)kv << 32 |
					      page_in_block));
}

/* Fill (or check) every page of one block in a pool mapped at base. check: returns the count of
 * pages that differ. */
uint64_t block_pages(const struct geom *g, uint8_t *base, uint64_t hash, uint32_t slot, int check);

/* ---------------------------------------------------------------------------------------------
 * Trace (trace.c)
 */
struct request {
	uint64_t ts_ms;
	uint32_t input_len, output_len;
	uint32_t nh;
	uint64_t h0; /* index of the first hash id in trace.hash */
};

struct trace {
	struct request *req;
	size_t n, cap;
	uint64_t *hash;
	size_t nhash, caphash;
	size_t bad_lines;    /* skipped with skip_bad */
	int synthetic;
};

void trace_free(struct trace *t);
#define TRACE_LINE_MAX (16 << 20) /* bytes of one trace line, newline included */
/* Read up to max requests (0: all) from f. A bad line is an error naming it, unless skip_bad
 * (then counted in t->bad_lines), and so is a line longer than TRACE_LINE_MAX (always). Blank
 * lines are ignored. Returns 0, or -1 with err set. */
int trace_read(struct trace *t, FILE *f, const char *path, size_t max, int skip_bad, char *err,
	       size_t errlen);
/* The built-in workload with the real trace's statistics, n requests; deterministic. */
void trace_synthetic(struct trace *t, size_t n);

/* ---------------------------------------------------------------------------------------------
 * Block pool (pool.c): hash id -> block slot, LRU over unpinned held blocks
 */
struct pool {
	uint32_t nblocks;
	uint64_t *slot_hash;
	uint32_t *pin;            /* in-flight jobs holding the slot */
	uint32_t *prev, *next;    /* LRU list (unpinned held slots) */
	uint8_t *held;
	uint32_t lru_head, lru_tail; /* head: least recently used */
	uint32_t *free_stack;
	uint32_t nfree;
	/* map */
	uint64_t *mkey;
	uint32_t *mval;           /* NIL: empty */
	uint64_t mmask;
	uint64_t evictions;
};

void pool_init(struct pool *p, uint32_t nblocks);
void pool_free(struct pool *p);
/* The slot holding hash (touched as most recently used), or NIL. */
uint32_t pool_lookup(struct pool *p, uint64_t hash);
uint32_t pool_peek(const struct pool *p, uint64_t hash);
/* A slot for hash, pinned: a free one, else the least recently used unpinned block is evicted.
 * NIL when every slot is pinned. */
uint32_t pool_alloc(struct pool *p, uint64_t hash);
/* The job that pinned s finished: ok keeps the block as cached content, else it is dropped. */
void pool_unpin(struct pool *p, uint32_t s, int ok);

/* ---------------------------------------------------------------------------------------------
 * The run's results and their report (report.c)
 */
struct results {
	uint64_t requests, requests_cached, jobs;
	uint64_t blocks_total, blocks_moved, blocks_skipped;
	uint64_t bytes_moved, bytes_verified, descriptors;
	uint64_t verify_failures, transfer_errors, notif_missing;
	uint64_t evictions;
	uint64_t setup_us, run_us, xfer_busy_us, fill_us, verify_us;
	uint64_t io_batch, io_bytes, io_us; /* the streaming reference (--no-io-baseline: 0) */
	int io_depth;                       /* its submissions in flight (the replay's window) */
	uint64_t *lat;
	size_t nlat, caplat;
	char first_error[256];
};

void lat_push(struct results *r, uint64_t us);
/* The first error sticks (and is printed once); later ones are only counted by the caller. */
void note_error(struct results *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cmp_u64(const void *a, const void *b);
/* Nearest-rank percentile of sorted v[0..n); 0 when n == 0. */
uint64_t percentile(const uint64_t *v, size_t n, double pct);
const char *topology(const struct opts *o); /* "same-node", "cross-node" or "dry-run" */
void report(const struct opts *o, const struct geom *g, const struct trace *t, struct results *r,
	    const char *source);

/* ---------------------------------------------------------------------------------------------
 * Messages between the decode (parent) and prefill (child) processes, over a SEQPACKET
 * socketpair, or one TCP connection with --role: the out-of-band side channel a serving system
 * has anyway (vLLM uses ZMQ). coord.c
 */
enum msg_type {
	M_HELLO = 1, /* node address and published pool name */
	M_READY,     /* set-up done (remote pool open, list prepared) */
	M_ERR,       /* set-up failed: text */
	M_JOB,       /* decode -> prefill: fill these blocks (and, push mode, move them) */
	M_DONE,      /* prefill -> decode: push: moved (code, times); pull: filled */
	M_END,       /* decode -> prefill: no more jobs; n = transfers that should have notified */
	M_STATS,     /* prefill -> decode: its counters */
	M_BENCH,     /* decode -> prefill: stream the pool (u0 batch, u1 bytes); reply: t0 bytes,
			t1 microseconds, code */
};

struct job_block {
	uint64_t hash;
	uint32_t slot;
	uint32_t pad;
};

struct msg {
	uint32_t type, job, n;
	int32_t code;
	uint64_t t0, t1, bytes, u0, u1;
	char a[128], b[128], text[192];
	struct job_block blk[JOB_MAX_BLOCKS];
};

extern int msg_stream; /* 1: the side channel is a byte stream (TCP, --role) */
int msg_send(int fd, const struct msg *m);
/* Receive one message within timeout_ms (< 0: wait, checking every second that the parent
 * process still lives when parent_pid > 0). Returns 0, or -1 with why set. */
int msg_recv(int fd, struct msg *m, int64_t timeout_ms, pid_t parent_pid, const char **why);
void send_err(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hello_geom(struct msg *m, const struct opts *o, const struct geom *g);
int hello_geom_differs(const struct msg *m, const struct opts *o, const struct geom *g, char *err,
		       size_t len);
int64_t setup_deadline_ms(const struct opts *o, const struct geom *g);
int64_t coord_wait_ms(const struct opts *o, const struct geom *g);
int coord_accept(const char *spec, int64_t timeout_ms, char *err, size_t len);
int coord_connect(const char *spec, int64_t timeout_ms, char *err, size_t len);

/* ---------------------------------------------------------------------------------------------
 * One side's libmori objects (side.c)
 */
struct side {
	const char *role;
	mori_client *c;
	mori_mem *pool, *peer;
	mori_xfer_list *list;
	uint8_t *base;        /* where pages are filled and verified: the pool, or its shadow */
	/* VRAM pools: a host shadow of the same geometry and a prepared list pairing its page i
	 * with the pool's page i; pages move between the two by same-client transfers */
	mori_mem *shadow;
	mori_xfer_list *stage;
	char name[128];
};

struct tagset { /* notification tags received and not yet claimed */
	uint64_t *v;
	size_t n, cap;
};

void side_close(struct side *s);
/* Open the client and allocate and publish the pool. Returns 0, or -1 with err set. */
int side_open(struct side *s, const char *role, const char *rt, const struct geom *g, int mem_kind,
	      char *err, size_t errlen);
/* The initiator opens the target's pool and prepares one descriptor per (layer, K/V, page),
 * pairing page i with page i. node: the target's daemon address, NULL/"" for this node. */
int side_connect(struct side *s, const struct geom *g, const char *node, const char *name,
		 char *err, size_t errlen);
void side_warm_local(struct side *s, const struct geom *g, int write);
int side_warm_peer(struct side *s, const struct geom *g, int op, int64_t timeout_ms, char *err,
		   size_t errlen);
int side_sweep(struct side *s, const struct geom *g, int op, uint64_t batch, uint64_t target, int depth,
	       int64_t timeout_ms, uint64_t *bytes, uint64_t *us);
int side_stage(struct side *s, const struct geom *g, const struct opts *o, int op,
	       const struct msg *m, uint32_t *idx, char *msg, size_t msglen);
int job_sampled(const struct opts *o, uint32_t id);
int move_job(struct side *s, const struct geom *g, const struct opts *o, int op,
	     const struct msg *m, uint32_t *idx, uint64_t *t0, uint64_t *t1, uint64_t *bytes,
	     char *msg, size_t msglen);
int notif_collect(mori_client *c, struct tagset *t, int64_t wait_us);
int notif_wait(mori_client *c, struct tagset *t, uint64_t tag, int64_t timeout_ms);

/* ---------------------------------------------------------------------------------------------
 * The decode side's scheduler (sched.c): prefix cache, jobs in flight, verification
 */
struct job {
	uint32_t id;
	size_t req;          /* request index */
	struct msg *m;
};

struct sched {
	const struct opts *o;
	const struct geom *g;
	const struct trace *t;
	struct pool pool;
	struct side s;
	int fd;              /* to prefill; -1 in dry-run */
	struct job *q;       /* in-flight jobs, FIFO ring of o->window */
	size_t qhead, qn;
	uint32_t next_job;
	uint32_t *idx;
	struct tagset notifs;
	uint64_t *req_t0;    /* first submit per request (0: none yet) */
	uint64_t *req_t1;
	uint32_t *req_jobs_left;
	uint8_t *req_dispatched; /* all of the request's jobs have been sent */
	uint64_t pull_ok;    /* pull: successful reads that should have notified prefill */
	struct results *res;
	uint64_t t_start, last_progress;
	int fatal;
};

void sched_init(struct sched *sc, const struct opts *o, const struct geom *g,
		const struct trace *t, struct results *res);
/* Replay the trace: the scheduling is the same with or without a daemon (dry run). */
void schedule(struct sched *sc);
void sched_fini(struct sched *sc);

/* ---------------------------------------------------------------------------------------------
 * The two processes: each returns the exit status
 */
/* prefill.c: serve the decode side over fd; parent > 0: stop when that process is gone. */
int run_prefill(const struct opts *o, const struct geom *g, int fd, pid_t parent);
int run_prefill_role(const struct opts *o, const struct geom *g); /* --role prefill */
/* decode.c: start (fork) or reach (--role decode) the prefill side, replay t, report. */
int run_decode(struct opts *o, const struct geom *g, const struct trace *t, const char *source);

#endif
