/* mori-kvreplay: the run's results (counters, latencies, the first error) and the summary it
 * prints, as text or as JSON (--json). */
#include <cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvreplay.h"

/* ---------------------------------------------------------------------------------------------
 * Statistics
 */
int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

uint64_t percentile(const uint64_t *v, size_t n, double pct)
{
	if (!n)
		return 0;
	size_t rank = (size_t)ceil(pct / 100.0 * (double)n);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

void lat_push(struct results *r, uint64_t us)
{
	if (r->nlat == r->caplat) {
		r->caplat = r->caplat ? r->caplat * 2 : 1024;
		r->lat = xrealloc(r->lat, r->caplat * sizeof(uint64_t));
	}
	r->lat[r->nlat++] = us;
}

void note_error(struct results *r, const char *fmt, ...)
{
	if (r->first_error[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->first_error, sizeof(r->first_error), fmt, ap);
	va_end(ap);
	fprintf(stderr, "mori-kvreplay: %s\n", r->first_error);
}

/* ---------------------------------------------------------------------------------------------
 * Output
 */
const char *topology(const struct opts *o)
{
	if (o->dry_run)
		return "dry-run";
	if (o->role != ROLE_BOTH)
		return o->role_cross ? "cross-node" : "same-node";
	return strcmp(o->prefill_rt ? o->prefill_rt : "", o->decode_rt ? o->decode_rt : "")
		       ? "cross-node"
		       : "same-node";
}

/* Figures derived from the results, the same in both forms of the summary. */
struct figures {
	double s, xs;          /* run and transfer-busy seconds */
	double gbps, xgbps;    /* over the run, inside transfers */
	double dps, iog;       /* descriptors per second; the io baseline's GB/s */
	uint64_t p50, p90, p99, pmax;
};

static void report_json(const struct opts *o, const struct geom *g, const struct trace *t,
			const struct results *r, const char *source, const struct figures *f)
{
	cJSON *j = cJSON_CreateObject(), *lat = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "tool", "mori-kvreplay");
	cJSON_AddStringToObject(j, "version", mori_version());
	cJSON_AddStringToObject(j, "trace", source);
	cJSON_AddBoolToObject(j, "synthetic", t->synthetic);
	cJSON_AddNumberToObject(j, "bad_lines_skipped", (double)t->bad_lines);
	cJSON_AddStringToObject(j, "model", g->p->name);
	cJSON_AddNumberToObject(j, "page_tokens", g->page_tokens);
	cJSON_AddNumberToObject(j, "page_bytes", (double)g->page_bytes);
	cJSON_AddNumberToObject(j, "descriptors_per_block", (double)g->descs_per_block);
	cJSON_AddNumberToObject(j, "bytes_per_block", (double)g->bytes_per_block);
	cJSON_AddNumberToObject(j, "pool_blocks", g->pool_blocks);
	cJSON_AddNumberToObject(j, "pool_bytes", (double)g->pool_bytes);
	cJSON_AddStringToObject(j, "topology", topology(o));
	cJSON_AddStringToObject(j, "mode", o->mode == MODE_PUSH ? "push" : "pull");
	cJSON_AddStringToObject(j, "mem", o->mem_kind == MORI_MEM_VRAM ? "vram" : "host");
	cJSON_AddNumberToObject(j, "window", o->window);
	cJSON_AddNumberToObject(j, "batch", (double)o->batch);
	if (o->afap || o->dry_run)
		cJSON_AddStringToObject(j, "pace", "as-fast-as-possible");
	else
		cJSON_AddNumberToObject(j, "speedup", o->speedup);
	cJSON_AddNumberToObject(j, "requests", (double)r->requests);
	cJSON_AddNumberToObject(j, "requests_fully_cached", (double)r->requests_cached);
	cJSON_AddNumberToObject(j, "transfers", (double)r->jobs);
	cJSON_AddNumberToObject(j, "blocks_total", (double)r->blocks_total);
	cJSON_AddNumberToObject(j, "blocks_moved", (double)r->blocks_moved);
	cJSON_AddNumberToObject(j, "blocks_skipped", (double)r->blocks_skipped);
	cJSON_AddNumberToObject(j, "evictions", (double)r->evictions);
	cJSON_AddNumberToObject(j, "bytes_moved", (double)r->bytes_moved);
	cJSON_AddNumberToObject(j, "bytes_verified", (double)r->bytes_verified);
	cJSON_AddNumberToObject(j, "verify_every", (double)o->verify_every);
	cJSON_AddNumberToObject(j, "descriptors", (double)r->descriptors);
	cJSON_AddBoolToObject(j, "warmup", o->warmup && !o->dry_run);
	cJSON_AddNumberToObject(j, "setup_s", r->setup_us / 1e6);
	cJSON_AddNumberToObject(j, "run_s", f->s);
	cJSON_AddNumberToObject(j, "transfer_busy_s", f->xs);
	cJSON_AddNumberToObject(j, "fill_s", r->fill_us / 1e6);
	cJSON_AddNumberToObject(j, "verify_s", r->verify_us / 1e6);
	cJSON_AddNumberToObject(j, "gbps_run", f->gbps);
	cJSON_AddNumberToObject(j, "gbps_transfer", f->xgbps);
	cJSON_AddNumberToObject(j, "descriptors_per_s", f->dps);
	if (r->io_us) {
		cJSON_AddNumberToObject(j, "io_baseline_batch", (double)r->io_batch);
		cJSON_AddNumberToObject(j, "io_baseline_in_flight", r->io_depth);
		cJSON_AddNumberToObject(j, "io_baseline_bytes", (double)r->io_bytes);
		cJSON_AddNumberToObject(j, "io_baseline_gbps", f->iog);
		cJSON_AddNumberToObject(j, "transfer_vs_io_baseline", f->iog > 0 ? f->xgbps / f->iog : 0);
	}
	cJSON_AddNumberToObject(lat, "count", (double)r->nlat);
	cJSON_AddNumberToObject(lat, "p50", (double)f->p50);
	cJSON_AddNumberToObject(lat, "p90", (double)f->p90);
	cJSON_AddNumberToObject(lat, "p99", (double)f->p99);
	cJSON_AddNumberToObject(lat, "max", (double)f->pmax);
	cJSON_AddItemToObject(j, "latency_us", lat);
	cJSON_AddNumberToObject(j, "verification_failures", (double)r->verify_failures);
	cJSON_AddNumberToObject(j, "transfer_errors", (double)r->transfer_errors);
	cJSON_AddNumberToObject(j, "notifications_missing", (double)r->notif_missing);
	cJSON_AddStringToObject(j, "first_error", r->first_error);
	char *txt = cJSON_Print(j);
	puts(txt);
	free(txt);
	cJSON_Delete(j);
}

static void report_text(const struct opts *o, const struct geom *g, const struct trace *t,
			const struct results *r, const char *source, const struct figures *f)
{
	if (t->synthetic)
		printf("NOTE: %s; replaying the built-in SYNTHETIC workload (same statistics: median "
		       "~6 900 tokens, ~37%% repeated blocks), not the real trace\n", source);
	printf("mori-kvreplay %s: %s, %s (%s), %s memory, %s%s\n", mori_version(),
	       t->synthetic ? "synthetic workload" : source, topology(o),
	       o->mode == MODE_PUSH ? "push: prefill writes" : "pull: decode reads",
	       o->mem_kind == MORI_MEM_VRAM ? "GPU" : "host",
	       o->afap || o->dry_run ? "as fast as possible" : "paced",
	       t->bad_lines ? ", bad lines skipped" : "");
	printf("  model            %s: %d layers x %s, %d-token pages of %" PRIu64 " B, %.1f MiB "
	       "per 512-token block (%" PRIu64 " descriptors)\n",
	       g->p->name, g->layers, g->kv == 2 ? "K+V" : "latent", g->page_tokens,
	       g->page_bytes, g->bytes_per_block / 1048576.0, g->descs_per_block);
	printf("  pool             %u blocks (%.2f GiB) per side, window %d, batch %s\n",
	       g->pool_blocks, g->pool_bytes / 1073741824.0, o->window,
	       o->batch ? "limited" : "whole request");
	if (t->bad_lines)
		printf("  bad lines        %zu skipped\n", t->bad_lines);
	printf("  requests         %" PRIu64 " (%" PRIu64 " fully cached at decode)\n", r->requests,
	       r->requests_cached);
	printf("  blocks           %" PRIu64 " moved, %" PRIu64 " skipped by prefix reuse (of %" PRIu64
	       "), %" PRIu64 " evicted\n",
	       r->blocks_moved, r->blocks_skipped, r->blocks_total, r->evictions);
	printf("  bytes moved      %" PRIu64 " (%.2f GB), %" PRIu64 " verified", r->bytes_moved,
	       r->bytes_moved / 1e9, r->bytes_verified);
	if (o->verify_every > 1)
		printf(" (filled and verified: one transfer in %" PRIu64 ")", o->verify_every);
	printf("\n");
	printf("  run time         %.2f s (transfers %.2f s, fill %.2f s, verify %.2f s); set-up "
	       "%.2f s%s\n",
	       f->s, f->xs, r->fill_us / 1e6, r->verify_us / 1e6, r->setup_us / 1e6,
	       o->warmup && !o->dry_run ? " with warm-up" : "");
	printf("  throughput       %.2f GB/s over the run, %.2f GB/s inside transfers\n", f->gbps,
	       f->xgbps);
	printf("  descriptors      %" PRIu64 " (%.0f per second over the run)\n", r->descriptors,
	       f->dps);
	if (r->io_us)
		printf("  io baseline      %.2f GB/s streaming the same pool through the same list, %" PRIu64
		       " descriptors per submission, %d in flight; the replay's transfers ran at %.0f%% of it\n",
		       f->iog, r->io_batch, r->io_depth, f->iog > 0 ? 100 * f->xgbps / f->iog : 0.0);
	printf("  latency (us)     p50 %" PRIu64 "  p90 %" PRIu64 "  p99 %" PRIu64 "  max %" PRIu64
	       "  (%zu requests with a transfer, submit to completion)\n",
	       f->p50, f->p90, f->p99, f->pmax, r->nlat);
	printf("  verification     %" PRIu64 " failures%s\n", r->verify_failures,
	       r->verify_failures ? " (pages whose bytes differ)" : "");
	if (r->transfer_errors || r->notif_missing)
		printf("  errors           %" PRIu64 " failed transfers, %" PRIu64
		       " missing notifications; first: %s\n",
		       r->transfer_errors, r->notif_missing, r->first_error);
	else if (r->first_error[0])
		printf("  error            %s\n", r->first_error);
}

void report(const struct opts *o, const struct geom *g, const struct trace *t, struct results *r,
	    const char *source)
{
	struct figures f;
	if (r->nlat) /* lat is NULL when no request moved anything: qsort(NULL, 0) is undefined */
		qsort(r->lat, r->nlat, sizeof(uint64_t), cmp_u64);
	f.s = r->run_us / 1e6;
	f.xs = r->xfer_busy_us / 1e6;
	f.gbps = f.s > 0 ? r->bytes_moved / 1e9 / f.s : 0;
	f.xgbps = f.xs > 0 ? r->bytes_moved / 1e9 / f.xs : 0;
	f.dps = f.s > 0 ? r->descriptors / f.s : 0;
	f.iog = r->io_us ? r->io_bytes / 1e9 / (r->io_us / 1e6) : 0;
	f.p50 = percentile(r->lat, r->nlat, 50);
	f.p90 = percentile(r->lat, r->nlat, 90);
	f.p99 = percentile(r->lat, r->nlat, 99);
	f.pmax = r->nlat ? r->lat[r->nlat - 1] : 0;
	if (o->json)
		report_json(o, g, t, r, source, &f);
	else
		report_text(o, g, t, r, source, &f);
}
