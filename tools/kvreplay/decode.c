/* mori-kvreplay: the decode process (the parent, or --role decode). It starts the prefill side
 * (forks it, or reaches --role prefill at --coord), sets up its own pool, replays the trace
 * through the scheduler, runs the io baseline, collects prefill's counters and reports. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvreplay.h"

/* Fork the prefill side over a socketpair, or connect to --role prefill. Returns the side
 * channel's fd, or -1 (said on stderr); *child gets the forked process. */
static int start_prefill(const struct opts *o, const struct geom *g, pid_t *child)
{
	char err[512];
	int sv[2];
	if (o->role == ROLE_DECODE) {
		msg_stream = 1;
		int fd = coord_connect(o->coord, coord_wait_ms(o, g), err, sizeof(err));
		if (fd < 0)
			fprintf(stderr, "mori-kvreplay: decode: %s\n", err);
		return fd;
	}
	fflush(NULL);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		fprintf(stderr, "mori-kvreplay: socketpair: %s\n", strerror(errno));
		return -1;
	}
	pid_t me = getpid();
	/* fork before any libmori call: the library's threads do not survive fork */
	*child = fork();
	if (*child < 0) {
		fprintf(stderr, "mori-kvreplay: fork: %s\n", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if (*child == 0) {
		close(sv[0]);
		_exit(run_prefill(o, g, sv[1], me));
	}
	close(sv[1]);
	return sv[0];
}

/* Open the decode pool, exchange hellos (the geometry must agree), warm up, (pull) open the
 * prefill pool, and wait for prefill's M_READY. Sets o->role_cross. Returns 0, or -1 (said). */
static int decode_setup(struct sched *sc, struct opts *o, struct msg *m)
{
	const struct geom *g = sc->g;
	int64_t setup_ms = setup_deadline_ms(o, g);
	char err[512], pnode[128], pname[128];
	const char *why;
	if (side_open(&sc->s, "decode", o->decode_rt, g, o->mem_kind, err, sizeof(err))) {
		fprintf(stderr, "mori-kvreplay: %s\n", err);
		return -1;
	}
	if (msg_recv(sc->fd, m, setup_ms, 0, &why)) {
		fprintf(stderr, "mori-kvreplay: prefill set-up: %s\n", why);
		return -1;
	}
	if (m->type != M_HELLO) {
		fprintf(stderr, "mori-kvreplay: %s\n",
			m->type == M_ERR ? m->text : "prefill set-up failed");
		return -1;
	}
	snprintf(pnode, sizeof(pnode), "%s", m->a);
	snprintf(pname, sizeof(pname), "%s", m->b);
	int differs = hello_geom_differs(m, o, g, err, sizeof(err));
	o->role_cross = strcmp(pnode, mori_client_node(sc->s.c)) != 0;
	memset(m, 0, offsetof(struct msg, blk));
	m->type = M_HELLO;
	snprintf(m->a, sizeof(m->a), "%s", mori_client_node(sc->s.c));
	snprintf(m->b, sizeof(m->b), "%s", sc->s.name);
	hello_geom(m, o, g);
	if (differs) {
		msg_send(sc->fd, m); /* prefill sees the same difference and stops */
		fprintf(stderr, "mori-kvreplay: %s\n", err);
		return -1;
	}
	if (msg_send(sc->fd, m)) {
		fprintf(stderr, "mori-kvreplay: prefill has gone\n");
		return -1;
	}
	/* push: decode only reads its pool (verification); pull: the warm-up read writes it */
	if (o->warmup && o->mode == MODE_PUSH)
		side_warm_local(&sc->s, g, 0);
	if (o->mode == MODE_PULL) {
		const char *node = o->prefill_node ? o->prefill_node
				   : !strcmp(topology(o), "cross-node") ? pnode : NULL;
		if (node && !*node) {
			fprintf(stderr, "mori-kvreplay: decode: the prefill daemon reports no peer "
					"address (set listen= in its config, or --prefill-node)\n");
			return -1;
		}
		if (side_connect(&sc->s, g, node, pname, err, sizeof(err)) ||
		    (o->warmup &&
		     side_warm_peer(&sc->s, g, MORI_XFER_READ, o->timeout_ms, err, sizeof(err)))) {
			fprintf(stderr, "mori-kvreplay: %s\n", err);
			return -1;
		}
	}
	m->type = 0;
	if (msg_recv(sc->fd, m, setup_ms, 0, &why) || m->type != M_READY) {
		fprintf(stderr, "mori-kvreplay: %s%s\n", m->type == M_ERR ? "" : "prefill set-up: ",
			m->type == M_ERR ? m->text : why);
		return -1;
	}
	return 0;
}

/* The reference after the replay: the same list streamed through the whole pool (push: by
 * prefill, on M_BENCH; pull: here). */
static void io_baseline(struct sched *sc)
{
	const struct opts *o = sc->o;
	const struct geom *g = sc->g;
	struct results *res = sc->res;
	/* batch: the replay's, else its mean transfer's descriptors (at least one block's): one
	 * block a submission was a smaller batch than the replay's jobs of several blocks, so the
	 * "baseline" ran below the replay it should bound (the demo printed 124 % of it) */
	uint64_t batch = o->batch;
	if (!batch) {
		batch = res->jobs ? res->descriptors / res->jobs : g->descs_per_block;
		batch = batch < g->descs_per_block ? g->descs_per_block : batch;
	}
	batch = batch > g->pool_descs ? g->pool_descs : batch; /* what side_sweep submits */
	uint64_t target = 2 * g->pool_bytes < (4ull << 30) ? 4ull << 30 : 2 * g->pool_bytes;
	int code;
	const char *why = "unexpected message";
	res->io_batch = batch;
	res->io_depth = o->window; /* 1 .. 64 (main.c) */
	if (o->mode == MODE_PUSH) {
		struct msg *m = xcalloc(1, sizeof(*m));
		m->type = M_BENCH;
		m->u0 = batch;
		m->u1 = target;
		if (msg_send(sc->fd, m) || msg_recv(sc->fd, m, 4 * o->timeout_ms, 0, &why) ||
		    m->type != M_BENCH) {
			note_error(res, "prefill did not run the io baseline: %s", why);
			res->transfer_errors++;
			code = MORI_OK;
		} else {
			code = m->code;
			res->io_bytes = m->t0;
			res->io_us = m->t1;
		}
		free(m);
	} else {
		code = side_sweep(&sc->s, g, MORI_XFER_READ, batch, target, o->window, o->timeout_ms,
				  &res->io_bytes, &res->io_us);
	}
	if (code) {
		note_error(res, "io baseline transfer failed: %s", mori_strerror(code));
		res->transfer_errors++;
	}
}

/* M_END: no more jobs; prefill answers with its counters (fill time, pull: notifications it
 * did not get). */
static void prefill_counters(struct sched *sc)
{
	struct results *res = sc->res;
	const char *why;
	struct msg *m = xcalloc(1, sizeof(*m));
	m->type = M_END;
	m->u0 = sc->pull_ok; /* pull: the notifications prefill should have had */
	if (msg_send(sc->fd, m) || msg_recv(sc->fd, m, 2 * sc->o->timeout_ms, 0, &why) ||
	    m->type != M_STATS) {
		note_error(res, "prefill did not report its counters");
		res->transfer_errors++;
	} else {
		res->fill_us = m->u0;
		res->notif_missing += m->u1;
	}
	free(m);
}

/* Close the side channel: the prefill side ends on EOF; a forked one gets 10 s, then SIGKILL. */
static void stop_prefill(struct sched *sc, pid_t child)
{
	if (child > 0) {
		close(sc->fd);
		sc->fd = -1;
		uint64_t deadline = now_us() + 10000000;
		int st;
		while (waitpid(child, &st, WNOHANG) == 0) {
			if (now_us() > deadline) {
				kill(child, SIGKILL);
				waitpid(child, &st, 0);
				break;
			}
			usleep(10000);
		}
	} else if (sc->fd >= 0) {
		close(sc->fd); /* --role decode: prefill ends on EOF */
		sc->fd = -1;
	}
}

int run_decode(struct opts *o, const struct geom *g, const struct trace *t, const char *source)
{
	struct results res = {0};
	struct sched sc;
	pid_t child = -1;
	int rc = 0;
	sched_init(&sc, o, g, t, &res);
	uint64_t t_setup = now_us();
	if (!o->dry_run) {
		sc.fd = start_prefill(o, g, &child);
		if (sc.fd < 0) {
			rc = 2;
			goto done;
		}
		sc.idx = xcalloc((size_t)g->descs_per_block * JOB_MAX_BLOCKS, sizeof(uint32_t));
		struct msg *m = xcalloc(1, sizeof(*m));
		int src = decode_setup(&sc, o, m);
		free(m);
		if (src) {
			rc = 2;
			goto done;
		}
	}
	res.setup_us = now_us() - t_setup;

	schedule(&sc);

	if (!o->dry_run && !sc.fatal && o->io_baseline)
		io_baseline(&sc);
	if (!o->dry_run && !sc.fatal)
		prefill_counters(&sc);
	report(o, g, t, &res, source);
	rc = res.verify_failures || res.transfer_errors || res.notif_missing || sc.fatal ? 1 : 0;
done:
	side_close(&sc.s);
	stop_prefill(&sc, child);
	sched_fini(&sc);
	free(res.lat);
	return rc;
}
