/* mori-kvreplay: the prefill process (a forked child, or --role prefill). It opens its pool,
 * says hello, and then serves the decode side's jobs: fill the blocks' pages with their derived
 * content and, push mode, write them into the decode pool; pull mode, decode reads them and
 * notifies this side, which counts the notifications. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvreplay.h"

/* Open the pool, exchange hellos, warm up and (push) open the decode pool, then say M_READY.
 * Returns 0, or -1 (the decode side reports why, or has been told with M_ERR). */
static int prefill_setup(struct side *s, const struct opts *o, const struct geom *g, int fd,
			 pid_t parent, struct msg *m)
{
	char err[512];
	const char *why;
	if (side_open(s, "prefill", o->prefill_rt, g, o->mem_kind, err, sizeof(err))) {
		send_err(fd, "%s", err);
		return -1;
	}
	memset(m, 0, offsetof(struct msg, blk));
	m->type = M_HELLO;
	snprintf(m->a, sizeof(m->a), "%s", mori_client_node(s->c));
	snprintf(m->b, sizeof(m->b), "%s", s->name);
	hello_geom(m, o, g);
	if (msg_send(fd, m))
		return -1;
	if (msg_recv(fd, m, setup_deadline_ms(o, g), parent, &why) || m->type != M_HELLO)
		return -1; /* the decode side reports its own failure */
	if (hello_geom_differs(m, o, g, err, sizeof(err))) {
		fprintf(stderr, "mori-kvreplay: prefill: %s\n", err);
		return -1; /* decode found the same and says so */
	}
	/* warm-up, overlapping the decode side's: prefill writes its pool (fill) through its own
	 * mapping, and in push mode the decode pool through its mapping of it */
	if (o->warmup)
		side_warm_local(s, g, 1);
	if (o->mode == MODE_PUSH) {
		/* the decode pool is opened at its daemon's address when that is another daemon */
		int cross = o->role != ROLE_BOTH ? strcmp(m->a, mori_client_node(s->c)) != 0
						 : strcmp(o->prefill_rt ? o->prefill_rt : "",
							  o->decode_rt ? o->decode_rt : "") != 0;
		const char *node = o->decode_node ? o->decode_node : cross ? m->a : NULL;
		if (node && !*node) {
			send_err(fd, "prefill: the decode daemon reports no peer address (set listen= "
				     "in its config, or --decode-node)");
			return -1;
		}
		if (side_connect(s, g, node, m->b, err, sizeof(err)) ||
		    (o->warmup &&
		     side_warm_peer(s, g, MORI_XFER_WRITE, o->timeout_ms, err, sizeof(err)))) {
			send_err(fd, "%s", err);
			return -1;
		}
	}
	memset(m, 0, offsetof(struct msg, blk));
	m->type = M_READY;
	return msg_send(fd, m) ? -1 : 0;
}

/* M_BENCH (push): stream the pool for the io baseline and reply with bytes and time. */
static int prefill_bench(struct side *s, const struct opts *o, const struct geom *g, int fd,
			 const struct msg *m)
{
	struct msg *r = xcalloc(1, offsetof(struct msg, blk));
	r->type = M_BENCH;
	r->code = side_sweep(s, g, MORI_XFER_WRITE, m->u0, m->u1, o->window, o->timeout_ms, &r->t0, &r->t1);
	int srv = msg_send(fd, r);
	free(r);
	return srv;
}

/* M_JOB: fill the job's blocks (sampled jobs only), push: move them, and reply M_DONE.
 * Returns 0, or -1 when the job is malformed or the reply cannot be sent. */
static int prefill_job(struct side *s, const struct opts *o, const struct geom *g, int fd,
		       const struct msg *m, uint32_t *idx, struct tagset *notifs, uint64_t *fill_us,
		       uint64_t *xfers)
{
	uint32_t job = m->job;
	uint64_t t = now_us();
	for (uint32_t b = 0; b < m->n; b++) {
		if (m->blk[b].slot >= g->pool_blocks) {
			fprintf(stderr, "mori-kvreplay: prefill: slot out of range\n");
			return -1;
		}
		if (job_sampled(o, job))
			block_pages(g, s->base, m->blk[b].hash, m->blk[b].slot, 0);
	}
	struct msg *r = xcalloc(1, offsetof(struct msg, blk));
	r->type = M_DONE;
	r->job = job;
	if (job_sampled(o, job))
		r->code = side_stage(s, g, o, MORI_XFER_WRITE, m, idx, r->text, sizeof(r->text));
	*fill_us += now_us() - t;
	if (r->code) {
		/* reported as this job's transfer failure */
	} else if (o->mode == MODE_PUSH) {
		r->code = move_job(s, g, o, MORI_XFER_WRITE, m, idx, &r->t0, &r->t1, &r->bytes, r->text,
				   sizeof(r->text));
		(*xfers)++;
	} else {
		notif_collect(s->c, notifs, 0);
	}
	int srv = msg_send(fd, r);
	free(r);
	return srv;
}

int run_prefill(const struct opts *o, const struct geom *g, int fd, pid_t parent)
{
	struct side s = {0};
	struct msg *m = xcalloc(1, sizeof(*m));
	const char *why;
	uint32_t *idx = xcalloc((size_t)g->descs_per_block * JOB_MAX_BLOCKS, sizeof(uint32_t));
	struct tagset notifs = {0};
	uint64_t fill_us = 0, xfers = 0;
	int rc = 2;

	if (prefill_setup(&s, o, g, fd, parent, m))
		goto out;
	for (;;) {
		if (msg_recv(fd, m, -1, parent, &why)) {
			fprintf(stderr, "mori-kvreplay: prefill: %s\n", why);
			goto out;
		}
		if (m->type == M_END)
			break;
		if (m->type == M_BENCH && o->mode == MODE_PUSH) {
			if (prefill_bench(&s, o, g, fd, m))
				goto out;
			continue;
		}
		if (m->type != M_JOB ||
		    prefill_job(&s, o, g, fd, m, idx, &notifs, &fill_us, &xfers))
			goto out;
	}
	/* pull mode: every successful read should have notified us */
	uint64_t expect = m->u0;
	uint64_t deadline = now_us() + (uint64_t)o->timeout_ms * 1000;
	if (o->mode == MODE_PULL)
		while (notifs.n < expect && now_us() < deadline)
			if (notif_collect(s.c, &notifs, (int64_t)(deadline - now_us())) < 0)
				break;
	memset(m, 0, offsetof(struct msg, blk));
	m->type = M_STATS;
	m->u0 = fill_us;
	m->u1 = o->mode == MODE_PULL ? (notifs.n < expect ? expect - notifs.n : 0) : 0;
	m->t0 = xfers;
	rc = msg_send(fd, m) ? 2 : 0;
out:
	side_close(&s);
	free(notifs.v);
	free(idx);
	free(m);
	return rc;
}

int run_prefill_role(const struct opts *o, const struct geom *g)
{
	char err[512];
	msg_stream = 1;
	int fd = coord_accept(o->coord, coord_wait_ms(o, g), err, sizeof(err));
	if (fd < 0) {
		fprintf(stderr, "mori-kvreplay: prefill: %s\n", err);
		return 2;
	}
	int prc = run_prefill(o, g, fd, 0);
	close(fd);
	if (!o->json)
		fprintf(stderr, "mori-kvreplay: prefill: %s\n",
			prc ? "stopped early (the decode side reports why)" : "done");
	return prc;
}
