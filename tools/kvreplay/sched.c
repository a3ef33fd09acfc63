/* mori-kvreplay: the decode side's scheduler. Requests arrive at their trace time (or as fast
 * as possible); each block not held in the prefix cache gets a slot and is moved in a job, at
 * most --window jobs in flight; a finished job is verified against the derivation. The same
 * code runs without a daemon (--dry-run, and tests/test_kv_logic.c) to count what would move. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvreplay.h"

static void progress(struct sched *sc, size_t done, int final)
{
	uint64_t t = now_us();
	if (!sc->o->progress || (!final && t - sc->last_progress < 200000))
		return;
	sc->last_progress = t;
	size_t total = sc->t->n, w = 30, fillw = total ? done * w / total : w;
	double s = (t - sc->t_start) / 1e6;
	char bar[64];
	for (size_t i = 0; i < w; i++)
		bar[i] = i < fillw ? '#' : '.';
	bar[w] = 0;
	fprintf(stderr, "\r[%s] %zu/%zu requests  %.2f GB  %.2f GB/s  %" PRIu64 " verify failures%s",
		bar, done, total, sc->res->bytes_moved / 1e9,
		s > 0 ? sc->res->bytes_moved / 1e9 / s : 0.0, sc->res->verify_failures,
		final ? "\n" : "");
}

/* A request's last transfer has completed: its latency is first submission to last completion. */
static void req_finished(struct sched *sc, size_t req)
{
	if (sc->req_t0[req] && sc->fd >= 0)
		lat_push(sc->res, sc->req_t1[req] - sc->req_t0[req]);
}

/* The oldest job's transfer: push: prefill's report of it, then its notification; pull: prefill
 * has filled it, now read it. Returns -1 when the side channel failed (sc->fatal is set), else 0
 * with the transfer's MORI code, times and bytes. */
static int job_transfer(struct sched *sc, const struct job *j, int *code, uint64_t *t0,
			uint64_t *t1, uint64_t *bytes)
{
	const struct opts *o = sc->o;
	struct results *res = sc->res;
	struct msg *m = j->m, r;
	const char *why = "unexpected message";
	r.type = 0;
	if (msg_recv(sc->fd, &r, o->timeout_ms, 0, &why) || r.type != M_DONE || r.job != j->id) {
		note_error(res, "decode: no completion for job %u from prefill: %s", j->id, why);
		sc->fatal = 1;
		return -1;
	}
	if (o->mode == MODE_PUSH) {
		*code = r.code;
		*t0 = r.t0;
		*t1 = r.t1;
		*bytes = r.bytes;
		if (*code) {
			note_error(res, "transfer failed: %s", r.text);
		} else if ((*code = notif_wait(sc->s.c, &sc->notifs, j->id, o->timeout_ms))) {
			note_error(res, "job %u: no notification within %" PRId64 " ms (%s)", j->id,
				   o->timeout_ms, mori_strerror(*code));
			res->notif_missing++;
		}
	} else if (r.code) {
		*code = r.code; /* prefill could not stage the pages into its VRAM pool */
		note_error(res, "%s", r.text);
	} else {
		char text[192];
		*code = move_job(&sc->s, sc->g, o, MORI_XFER_READ, m, sc->idx, t0, t1, bytes, text,
				 sizeof(text));
		if (*code)
			note_error(res, "transfer failed: %s", text);
		else
			sc->pull_ok++;
	}
	return 0;
}

/* Check every page of a moved job against the derivation (VRAM pools: staged out first). */
static void verify_job(struct sched *sc, const struct job *j)
{
	const struct geom *g = sc->g;
	struct results *res = sc->res;
	struct msg *m = j->m;
	uint64_t tv = now_us();
	char text[192];
	int src = side_stage(&sc->s, g, sc->o, MORI_XFER_READ, m, sc->idx, text, sizeof(text));
	if (src) {
		note_error(res, "%s", text);
		res->transfer_errors++;
	}
	for (uint32_t b = 0; b < m->n && !src; b++) {
		uint64_t bad = block_pages(g, sc->s.base, m->blk[b].hash, m->blk[b].slot, 1);
		if (bad && !res->verify_failures)
			fprintf(stderr,
				"mori-kvreplay: job %u: block %" PRIu64 " (slot %u): %" PRIu64
				" pages differ from the derivation\n",
				j->id, m->blk[b].hash, m->blk[b].slot, bad);
		res->verify_failures += bad;
	}
	res->verify_us += now_us() - tv;
	if (!src)
		res->bytes_verified += (uint64_t)m->n * g->bytes_per_block;
}

/* Finish the oldest in-flight job: its transfer, verification and counts; its slots are
 * unpinned (kept as cached content only when it moved). */
static int complete_oldest(struct sched *sc)
{
	const struct opts *o = sc->o;
	const struct geom *g = sc->g;
	struct results *res = sc->res;
	struct job *j = &sc->q[sc->qhead];
	struct msg *m = j->m;
	int code = MORI_OK;
	uint64_t t0 = 0, t1 = 0, bytes = 0;

	if (sc->fd >= 0 && job_transfer(sc, j, &code, &t0, &t1, &bytes))
		return -1;
	if (code == MORI_OK) {
		res->jobs++;
		res->bytes_moved += bytes;
		res->xfer_busy_us += t1 - t0;
		if (sc->fd >= 0 && job_sampled(o, j->id))
			verify_job(sc, j);
		res->blocks_moved += m->n;
		res->descriptors += (uint64_t)m->n * g->descs_per_block;
		if (!sc->req_t0[j->req] || t0 < sc->req_t0[j->req])
			sc->req_t0[j->req] = t0;
		if (t1 > sc->req_t1[j->req])
			sc->req_t1[j->req] = t1;
	} else {
		res->transfer_errors++;
	}
	for (uint32_t b = 0; b < m->n; b++)
		pool_unpin(&sc->pool, m->blk[b].slot, code == MORI_OK);
	if (--sc->req_jobs_left[j->req] == 0 && sc->req_dispatched[j->req])
		req_finished(sc, j->req);
	free(j->m);
	j->m = NULL;
	sc->qhead = (sc->qhead + 1) % (size_t)o->window;
	sc->qn--;
	return 0;
}

static int dispatch(struct sched *sc, struct msg *m, size_t req)
{
	struct job *j = &sc->q[(sc->qhead + sc->qn) % (size_t)sc->o->window];
	m->type = M_JOB;
	m->job = sc->next_job++;
	j->id = m->job;
	j->req = req;
	j->m = m;
	sc->qn++;
	sc->req_jobs_left[req]++;
	if (sc->fd >= 0 && msg_send(sc->fd, m)) {
		note_error(sc->res, "decode: cannot send a job to prefill: %s", strerror(errno));
		sc->fatal = 1;
		return -1;
	}
	return 0;
}

static struct msg *new_job_msg(void)
{
	struct msg *m = xcalloc(1, sizeof(*m));
	return m;
}

void schedule(struct sched *sc)
{
	const struct opts *o = sc->o;
	const struct trace *t = sc->t;
	struct results *res = sc->res;
	sc->t_start = now_us();
	for (size_t i = 0; i < t->n && !sc->fatal; i++) {
		const struct request *rq = &t->req[i];
		if (!o->afap && !o->dry_run) {
			uint64_t rel = rq->ts_ms > t->req[0].ts_ms ? rq->ts_ms - t->req[0].ts_ms : 0;
			uint64_t due = sc->t_start + (uint64_t)((double)rel * 1000.0 / o->speedup);
			/* idle until the arrival: finish what is in flight first */
			while (now_us() < due && sc->qn && !sc->fatal)
				complete_oldest(sc);
			for (uint64_t n; (n = now_us()) < due;) {
				uint64_t d = due - n;
				struct timespec ts = {.tv_sec = (time_t)(d / 1000000),
						      .tv_nsec = (long)(d % 1000000) * 1000};
				nanosleep(&ts, NULL);
			}
		}
		res->requests++;
		res->blocks_total += rq->nh;
		struct msg *m = new_job_msg();
		uint64_t moved_before = res->blocks_skipped;
		for (uint32_t k = 0; k < rq->nh && !sc->fatal; k++) {
			uint64_t h = t->hash[rq->h0 + k];
			if (pool_lookup(&sc->pool, h) != NIL) {
				res->blocks_skipped++;
				continue;
			}
			uint32_t s;
			while ((s = pool_alloc(&sc->pool, h)) == NIL && !sc->fatal) {
				/* every slot is pinned by in-flight jobs (this one included) */
				if (m->n) {
					if (dispatch(sc, m, i))
						break;
					m = new_job_msg();
				}
				if (!sc->qn) {
					note_error(res, "pool of %u blocks cannot make progress",
						   sc->pool.nblocks);
					sc->fatal = 1;
					break;
				}
				complete_oldest(sc);
			}
			if (s == NIL)
				break;
			m->blk[m->n].hash = h;
			m->blk[m->n].slot = s;
			if (++m->n == JOB_MAX_BLOCKS) {
				if (dispatch(sc, m, i))
					break;
				m = new_job_msg();
			}
			while (sc->qn >= (size_t)o->window && !sc->fatal)
				complete_oldest(sc);
		}
		if (m->n && !sc->fatal) {
			dispatch(sc, m, i);
		} else {
			free(m);
		}
		/* a request moved in several jobs may have finished some already */
		sc->req_dispatched[i] = 1;
		if (sc->req_jobs_left[i] == 0)
			req_finished(sc, i);
		if (res->blocks_skipped - moved_before == rq->nh)
			res->requests_cached++;
		while (sc->qn >= (size_t)o->window && !sc->fatal)
			complete_oldest(sc);
		progress(sc, i + 1, 0);
	}
	while (sc->qn && !sc->fatal)
		complete_oldest(sc);
	res->run_us = now_us() - sc->t_start;
	res->evictions = sc->pool.evictions;
	progress(sc, t->n, 1);
}

void sched_init(struct sched *sc, const struct opts *o, const struct geom *g,
		const struct trace *t, struct results *res)
{
	memset(sc, 0, sizeof(*sc));
	sc->o = o;
	sc->g = g;
	sc->t = t;
	sc->res = res;
	sc->fd = -1;
	pool_init(&sc->pool, g->pool_blocks);
	sc->q = xcalloc((size_t)o->window, sizeof(*sc->q));
	sc->req_t0 = xcalloc(t->n, sizeof(uint64_t));
	sc->req_t1 = xcalloc(t->n, sizeof(uint64_t));
	sc->req_jobs_left = xcalloc(t->n, sizeof(uint32_t));
	sc->req_dispatched = xcalloc(t->n, 1);
}

void sched_fini(struct sched *sc)
{
	for (size_t i = 0; i < sc->qn; i++)
		free(sc->q[(sc->qhead + i) % (size_t)sc->o->window].m);
	free(sc->q);
	free(sc->req_t0);
	free(sc->req_t1);
	free(sc->req_jobs_left);
	free(sc->req_dispatched);
	free(sc->idx);
	free(sc->notifs.v);
	pool_free(&sc->pool);
}
