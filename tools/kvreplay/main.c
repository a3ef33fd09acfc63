/* mori-kvreplay: replay an LLM serving trace as prefill-to-decode KV-cache transfers.
 *
 * Two processes, each a libmori client with a paged KV pool laid out as vLLM lays it out
 * ([layer][K|V][page][page_tokens x kv_heads x head_dim x elem]): the decode process (the parent)
 * schedules the trace, keeps an LRU prefix cache of 512-token hash blocks and verifies every byte
 * it receives; the prefill process (a forked child) fills pages with content derived from
 * (hash id, layer, K/V, offset) and moves them. One prepared descriptor list covers the whole
 * pool (one descriptor per (layer, K/V, page), as vLLM's NIXL connector does); a transfer
 * submits the indices of a request's pages, with a notification to the target.
 *
 * mori_xfer_prep pairs a local and a remote offset in each descriptor, so page i of one pool is
 * moved to page i of the other: the prefill side uses the page ids the decode side allocated
 * (its pool has the same geometry) rather than running an allocator of its own.
 *
 * Exit status: 0 all transfers verified, 1 verification failures or failed transfers, 2 bad
 * input or setup failure.
 *
 * The parts are in tools/kvreplay/ (kvreplay.h says which file holds what); this file is the
 * options and main.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvreplay.h"

#define DEFAULT_TRACE "../shared/data/mooncake_conversation_trace.jsonl"

enum { O_TRACE = 256, O_SYN, O_REQ, O_MODEL, O_PT, O_PMIB, O_PBLK, O_MEM, O_SPEED, O_AFAP,
       O_WIN, O_BATCH, O_MODE, O_RT, O_PRT, O_DRT, O_PN, O_DN, O_TMO, O_SKIP, O_JSON,
       O_PROG, O_NOPROG, O_DRY, O_NOWARM, O_VERB, O_NOIOB, O_HELP, O_VEVERY, O_ROLE, O_COORD };
static const struct option long_opts[] = {
	{"trace", 1, 0, O_TRACE}, {"synthetic", 0, 0, O_SYN}, {"requests", 1, 0, O_REQ},
	{"model", 1, 0, O_MODEL}, {"page-tokens", 1, 0, O_PT}, {"pool-mib", 1, 0, O_PMIB},
	{"pool-blocks", 1, 0, O_PBLK}, {"mem", 1, 0, O_MEM}, {"speedup", 1, 0, O_SPEED},
	{"as-fast-as-possible", 0, 0, O_AFAP}, {"window", 1, 0, O_WIN},
	{"batch", 1, 0, O_BATCH}, {"mode", 1, 0, O_MODE}, {"runtime-dir", 1, 0, O_RT},
	{"prefill-runtime-dir", 1, 0, O_PRT}, {"decode-runtime-dir", 1, 0, O_DRT},
	{"prefill-node", 1, 0, O_PN}, {"decode-node", 1, 0, O_DN},
	{"timeout-ms", 1, 0, O_TMO}, {"skip-bad-lines", 0, 0, O_SKIP}, {"json", 0, 0, O_JSON},
	{"progress", 0, 0, O_PROG}, {"no-progress", 0, 0, O_NOPROG}, {"dry-run", 0, 0, O_DRY},
	{"no-warmup", 0, 0, O_NOWARM}, {"verbose", 0, 0, O_VERB}, {"no-io-baseline", 0, 0, O_NOIOB}, {"help", 0, 0, O_HELP},
	{"verify-every", 1, 0, O_VEVERY}, {"role", 1, 0, O_ROLE}, {"coord", 1, 0, O_COORD}, {0, 0, 0, 0}};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: mori-kvreplay [options]\n"
		"Replays an LLM serving trace as KV-cache transfers from a prefill client to a decode\n"
		"client through morid, verifying every byte received.\n"
		"  --trace PATH           JSONL trace (default " DEFAULT_TRACE
		";\n"
		"                         when the default is absent a synthetic workload is used)\n"
		"  --synthetic            use the built-in synthetic workload\n"
		"  --requests N           replay the first N requests (default: all)\n"
		"  --model NAME           llama3-8b (default), llama3-70b-tp8, qwen3-8b,\n"
		"                         deepseek-v3-mla, tiny\n"
		"  --page-tokens N        tokens per page (default: the model's; must divide 512)\n"
		"  --pool-mib N           pool size per side in MiB (default 4096)\n"
		"  --pool-blocks N        pool size per side in 512-token blocks (overrides --pool-mib)\n"
		"  --mem host|vram        pool memory (default host)\n"
		"  --speedup X            arrivals at trace time / X (default 1)\n"
		"  --as-fast-as-possible  ignore timestamps\n"
		"  --window N             transfers in flight (default 2)\n"
		"  --batch N              at most N descriptors per submission (default: whole request)\n"
		"  --mode push|pull       push: prefill writes, notifies decode (default);\n"
		"                         pull: decode reads (vLLM NIXL), notifies prefill\n"
		"  --runtime-dir DIR      morid runtime dir of both clients (default $MORI_RUNTIME_DIR)\n"
		"  --prefill-runtime-dir DIR, --decode-runtime-dir DIR\n"
		"                         one daemon per side (cross node)\n"
		"  --prefill-node H:P, --decode-node H:P\n"
		"                         peer address to open that side's pool at (default: what its\n"
		"                         daemon reports when the runtime dirs differ)\n"
		"  --timeout-ms N         deadline of each transfer and wait (default 30000)\n"
		"  --role prefill|decode  run only that side, as its own command (e.g. on another\n"
		"                         machine, each with --runtime-dir of its node's morid); the\n"
		"                         two sides meet at --coord. Both need the same --model,\n"
		"                         --page-tokens, --pool-*, --mode and --mem (checked); the\n"
		"                         decode side reads the trace and prints the summary\n"
		"  --coord HOST:PORT      where the prefill role listens and the decode role connects\n"
		"                         (each waits up to 120 s, or the set-up deadline if longer)\n"
		"  --skip-bad-lines       skip malformed trace lines (counted) instead of failing\n"
		"  --json                 print the summary as JSON\n"
		"  --progress, --no-progress  progress bar on stderr (default: when stderr is a tty)\n"
		"  --dry-run              schedule only (prefix cache and counts), no daemon\n"
		"  --verbose              set-up steps with times on stderr\n"
		"  --no-io-baseline       skip the reference after the replay: the same list streamed\n"
		"                         through the whole pool in pool order, submissions the size\n"
		"                         of the replay's (--batch, else its mean transfer), --window\n"
		"                         of them in flight\n"
		"  --verify-every N       fill and verify every byte of one transfer in N (default 1:\n"
		"                         all); the others move the pool's current bytes unchecked.\n"
		"                         For runs whose bytes the CPU cannot generate and check in\n"
		"                         time (the whole trace on GPU memory: ~18 TB for llama3-8b)\n"
		"  --no-warmup            skip the warm-up before the replay (each side touches its\n"
		"                         pool, then one transfer over the whole pool): without it the\n"
		"                         first use of each page pays a page fault\n"
		"Exit: 0 all verified, 1 verification failures or failed transfers, 2 bad input or "
		"set-up failure.\n");
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/* Apply one option with its value. Returns 0, or -1 when the value is bad. */
static int set_option(struct opts *o, const char **rt, int c, const char *arg)
{
	uint64_t v;
	switch (c) {
	case O_TRACE: o->trace_path = arg; o->trace_explicit = 1; break;
	case O_SYN: o->force_synthetic = 1; break;
	case O_REQ:
		if (parse_u64(arg, 1, SIZE_MAX, &v))
			return -1;
		o->requests = v;
		break;
	case O_MODEL: o->model = arg; break;
	case O_PT:
		if (parse_u64(arg, 1, TRACE_BLOCK_TOKENS, &v))
			return -1;
		o->page_tokens = (int)v;
		break;
	case O_PMIB:
		if (parse_u64(arg, 1, (uint64_t)1 << 30, &o->pool_mib))
			return -1;
		break;
	case O_PBLK:
		if (parse_u64(arg, 1, UINT32_MAX / 2, &o->pool_blocks))
			return -1;
		break;
	case O_MEM:
		if (!strcmp(arg, "host"))
			o->mem_kind = MORI_MEM_HOST;
		else if (!strcmp(arg, "vram"))
			o->mem_kind = MORI_MEM_VRAM;
		else
			return -1;
		break;
	case O_SPEED: {
		char *end;
		o->speedup = strtod(arg, &end);
		if (*end || !(o->speedup > 0) || isinf(o->speedup))
			return -1;
		break;
	}
	case O_AFAP: o->afap = 1; break;
	case O_WIN:
		if (parse_u64(arg, 1, 64, &v))
			return -1;
		o->window = (int)v;
		break;
	case O_BATCH:
		if (parse_u64(arg, 1, UINT32_MAX, &o->batch))
			return -1;
		break;
	case O_MODE:
		if (!strcmp(arg, "push"))
			o->mode = MODE_PUSH;
		else if (!strcmp(arg, "pull"))
			o->mode = MODE_PULL;
		else
			return -1;
		break;
	case O_RT: *rt = arg; break;
	case O_PRT: o->prefill_rt = arg; break;
	case O_DRT: o->decode_rt = arg; break;
	case O_PN: o->prefill_node = arg; break;
	case O_DN: o->decode_node = arg; break;
	case O_TMO:
		if (parse_u64(arg, 1, 3600000, &v))
			return -1;
		o->timeout_ms = (int64_t)v;
		break;
	case O_SKIP: o->skip_bad = 1; break;
	case O_JSON: o->json = 1; break;
	case O_PROG: o->progress = 1; break;
	case O_NOPROG: o->progress = 0; break;
	case O_DRY: o->dry_run = 1; break;
	case O_VERB: verbose = 1; break;
	case O_NOIOB: o->io_baseline = 0; break;
	case O_NOWARM: o->warmup = 0; break;
	case O_VEVERY:
		if (parse_u64(arg, 1, UINT32_MAX, &v))
			return -1;
		o->verify_every = v;
		break;
	case O_ROLE:
		if (!strcmp(arg, "prefill"))
			o->role = ROLE_PREFILL;
		else if (!strcmp(arg, "decode"))
			o->role = ROLE_DECODE;
		else if (!strcmp(arg, "both"))
			o->role = ROLE_BOTH;
		else
			return -1;
		break;
	case O_COORD: o->coord = arg; break;
	}
	return 0;
}

/* Parse the command line into o (defaults already in it) and check the combinations. Returns -1
 * to go on, else the exit status (0 after --help). */
static int parse_args(int argc, char **argv, struct opts *o)
{
	const char *rt = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		if (c == O_HELP || c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c < O_TRACE || c > O_COORD) {
			usage(stderr);
			return 2;
		}
		if (set_option(o, &rt, c, optarg)) {
			fprintf(stderr, "mori-kvreplay: bad value for --%s: \"%s\"\n",
				long_opts[c - O_TRACE].name, optarg);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "mori-kvreplay: unexpected argument \"%s\"\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if ((o->role != ROLE_BOTH) != (o->coord != NULL) || (o->role != ROLE_BOTH && o->dry_run)) {
		fprintf(stderr, "mori-kvreplay: --role prefill|decode and --coord HOST:PORT go together%s\n",
			o->dry_run ? " (and not with --dry-run)" : "");
		return 2;
	}
	if (!o->prefill_rt)
		o->prefill_rt = rt;
	if (!o->decode_rt)
		o->decode_rt = rt;
	if (o->progress < 0)
		o->progress = isatty(2);
	return -1;
}

/* path opened for reading if it is a regular file: a FIFO without a writer blocked the open
 * forever, and /dev/zero never ends. The open does not block (O_NONBLOCK,
 * cleared once fstat said it is a regular file). NULL with errno set, *notreg when it exists
 * but is not a regular file. */
static FILE *open_trace(const char *path, int *notreg)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	*notreg = 0;
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 || (*notreg = !S_ISREG(st.st_mode)) || fcntl(fd, F_SETFL, 0) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return NULL;
	}
	FILE *f = fdopen(fd, "r");
	if (!f)
		close(fd);
	return f;
}

/* The trace at --trace, or the synthetic workload (asked for, or the default trace absent).
 * source gets what the summary names. Returns 0, or 2 (said on stderr). */
static int load_workload(const struct opts *o, struct trace *t, char *source, size_t len)
{
	char err[512];
	int notreg = 0;
	FILE *f = o->force_synthetic ? NULL : open_trace(o->trace_path, &notreg);
	if (!f && !o->force_synthetic && (o->trace_explicit || notreg || errno != ENOENT)) {
		fprintf(stderr, "mori-kvreplay: cannot open trace %s: %s\n", o->trace_path,
			notreg ? "not a regular file (a FIFO or device may never end or never start; "
				 "copy the trace to a file)"
			       : strerror(errno));
		return 2;
	}
	if (f) {
		int rc = trace_read(t, f, o->trace_path, o->requests, o->skip_bad, err, sizeof(err));
		fclose(f);
		if (rc || !t->n) {
			if (rc)
				fprintf(stderr, "mori-kvreplay: %s\n", err);
			else
				fprintf(stderr, "mori-kvreplay: %s holds no requests\n", o->trace_path);
			trace_free(t);
			return 2;
		}
		snprintf(source, len, "%s", o->trace_path);
		return 0;
	}
	trace_synthetic(t, o->requests ? o->requests : 12031);
	if (o->force_synthetic)
		snprintf(source, len, "synthetic workload requested");
	else
		snprintf(source, len, "trace %s not found", o->trace_path);
	if (!o->json)
		fprintf(stderr, "mori-kvreplay: %s: using the built-in SYNTHETIC workload\n", source);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {
		.trace_path = DEFAULT_TRACE,
		.model = "llama3-8b",
		.pool_mib = 4096,
		.speedup = 1.0,
		.window = 2,
		.timeout_ms = 30000,
		.progress = -1,
		.mem_kind = MORI_MEM_HOST,
		.warmup = 1,
		.io_baseline = 1,
		.verify_every = 1,
	};
	t_prog = now_us();
	int rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	const struct preset *p = preset_find(o.model);
	if (!p) {
		fprintf(stderr, "mori-kvreplay: unknown model \"%s\" (llama3-8b, llama3-70b-tp8, "
				"qwen3-8b, deepseek-v3-mla, tiny)\n", o.model);
		return 2;
	}
	struct geom g;
	char err[512];
	if (geom_init(&g, p, o.page_tokens, o.pool_blocks, o.pool_mib, err, sizeof(err))) {
		fprintf(stderr, "mori-kvreplay: %s\n", err);
		return 2;
	}
	if (o.role == ROLE_PREFILL)
		return run_prefill_role(&o, &g);

	struct trace t = {0};
	char source[600];
	if (load_workload(&o, &t, source, sizeof(source)))
		return 2;
	rc = run_decode(&o, &g, &t, source);
	trace_free(&t);
	return rc;
}
