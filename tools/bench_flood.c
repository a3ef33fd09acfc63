/* mori-bench flood: what a flood costs a morid's local service.
 *
 * Connections (the default): a flooder thread keeps up to --conns TCP connections open to --node
 * (the daemon's `listen` address), never authenticating, and dials again whenever the daemon
 * closes one. Figures: dials and closes by the daemon per second, connections open at the
 * flooder's end (sampled every 10 ms), the daemon's descriptors (every 100 ms, where it runs here).
 *
 * Lists (--lists N): --clients threads, each a client of the daemon, prepare N cross-node lists of
 * --descs descriptors (24 bytes each) to a region a target client publishes on the daemon at
 * --peer-dir (listening at --node), free them and start again, for as long as the phase runs.
 * Figures: lists prepared per second and refused (MORI_ENOMEM at a cap: expected where caps bind),
 * other failures, and the daemon's RSS (sampled at each status call: mean and max, MiB).
 *
 * Either way the main thread meanwhile opens and closes local sessions and asks for status over
 * the control socket (moractl's request, on a fresh connection each time), one after the other;
 * the same loop without the load, measured first in the same run, is the baseline: session
 * open+close and status latency p50/p99/max in ms, and failed local calls (must stay 0). */
#include <dirent.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "host_port.h"
#include "mori.h"
#include "svc/ctl.h"

struct flood {
	struct addrinfo *ai;
	/* --lists */
	const char *dir, *node;
	int clients, lists;
	uint32_t descs;
	const mori_desc *desc;       /* one list's descriptors, shared by the threads (read only) */
	atomic_ullong preps, refused, failed;
	atomic_int next_client;
	uint64_t rss_sum, rss_samples, rss_max; /* KiB, sampled by the main thread */
	int conns;
	atomic_int stop;
	uint64_t dials, closes, dial_errors;
	uint64_t held_sum, held_samples;
	atomic_int pid;              /* the daemon's (its status says), for its descriptor count */
	uint64_t fds_sum, fds_samples;
	int fds_max;
};

/* Descriptors pid holds (its /proc/PID/fd, where the daemon runs on this node); -1: unknown. */
static int proc_fds(int pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", pid);
	DIR *d = pid > 0 ? opendir(path) : NULL;
	if (!d)
		return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* The resident memory of pid (VmRSS, KiB); 0: unknown. */
static uint64_t proc_rss_kib(int pid)
{
	char path[64], line[256];
	uint64_t kib = 0;
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = pid > 0 ? fopen(path, "re") : NULL;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %llu", (unsigned long long *)&kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

static uint64_t now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

static int dial(const struct addrinfo *ai)
{
	int s = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	if (connect(s, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
		close(s);
		return -1;
	}
	return s;
}

/* Closed by the far end (EOF or an error); what it sent is read and dropped. */
static int closed(int s)
{
	char b[256];
	for (;;) {
		ssize_t n = recv(s, b, sizeof(b), MSG_DONTWAIT);
		if (n == 0)
			return 1;
		if (n < 0)
			return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ENOTCONN;
	}
}

static void *flooder(void *arg)
{
	struct flood *F = arg;
	int *s = calloc((size_t)F->conns, sizeof(int));
	struct pollfd *p = calloc((size_t)F->conns, sizeof(*p));
	if (!s || !p)
		return NULL;
	for (int i = 0; i < F->conns; i++)
		s[i] = -1;
	uint64_t next_sample = now_us();
	while (!atomic_load(&F->stop)) {
		int held = 0;
		for (int i = 0; i < F->conns; i++) {
			if (s[i] < 0) {
				if ((s[i] = dial(F->ai)) < 0) {
					F->dial_errors++;
					continue;
				}
				F->dials++;
			}
			p[i].fd = s[i];
			p[i].events = POLLIN;
			held++;
		}
		if (poll(p, (nfds_t)F->conns, 10) > 0)
			for (int i = 0; i < F->conns; i++)
				if (s[i] >= 0 && (p[i].revents & (POLLIN | POLLHUP | POLLERR)) && closed(s[i])) {
					close(s[i]);
					s[i] = -1;
					F->closes++;
				}
		if (now_us() >= next_sample) {
			F->held_sum += (uint64_t)held;
			F->held_samples++;
			if (F->held_samples % 10 == 0) {
				int n = proc_fds(atomic_load(&F->pid));
				if (n >= 0) {
					F->fds_sum += (uint64_t)n;
					F->fds_samples++;
					F->fds_max = n > F->fds_max ? n : F->fds_max;
				}
			}
			next_sample += 10000;
		}
	}
	for (int i = 0; i < F->conns; i++)
		if (s[i] >= 0)
			close(s[i]);
	free(s);
	free(p);
	return NULL;
}

/* One preparing client: --lists lists, freed, again, until the phase ends. */
static void *preparer(void *arg)
{
	struct flood *F = arg;
	mori_client *c;
	mori_mem *l, *r;
	mori_xfer_list **ls = calloc((size_t)F->lists, sizeof(*ls));
	char name[32];
	snprintf(name, sizeof(name), "flood-lists-%d", atomic_fetch_add(&F->next_client, 1));
	if (!ls || mori_client_open(F->dir, name, &c) != MORI_OK) {
		atomic_fetch_add(&F->failed, 1);
		free(ls);
		return NULL;
	}
	if (mori_mem_alloc(c, 1 << 20, MORI_MEM_HOST, &l) != MORI_OK ||
	    mori_mem_open_remote(c, F->node, "flood/lists", &r) != MORI_OK) {
		fprintf(stderr, "mori-bench flood: %s\n", mori_client_last_error(c));
		atomic_fetch_add(&F->failed, 1);
		mori_client_close(c);
		free(ls);
		return NULL;
	}
	while (!atomic_load(&F->stop)) {
		for (int i = 0; i < F->lists && !atomic_load(&F->stop); i++) {
			int rc = mori_xfer_prep(l, r, F->desc, F->descs, &ls[i]);
			if (rc != MORI_OK)
				ls[i] = NULL;
			atomic_fetch_add(rc == MORI_OK ? &F->preps : rc == MORI_ENOMEM ? &F->refused : &F->failed, 1);
		}
		for (int i = 0; i < F->lists; i++) {
			mori_xfer_list_free(ls[i]);
			ls[i] = NULL;
		}
	}
	mori_mem_deregister(r);
	mori_client_close(c);
	free(ls);
	return NULL;
}

struct lat {
	double *v;
	size_t n, cap;
	uint64_t failures;
};

static void lat_add(struct lat *l, double ms)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 1024;
		double *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = ms;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(struct lat *l, int p)
{
	if (!l->n)
		return 0;
	qsort(l->v, l->n, sizeof(double), cmp);
	size_t i = (size_t)((double)p / 100.0 * (double)(l->n - 1) + 0.5);
	return l->v[i];
}

/* Sessions and status, one after the other, for secs seconds; the daemon's RSS into F when it
 * is given. */
static void local_loop(const char *dir, double secs, struct lat *sess, struct lat *stat, atomic_int *pid,
		       struct flood *F)
{
	char url[400], err[256];
	ctl_url(url, sizeof(url), dir);
	uint64_t end = now_us() + (uint64_t)(secs * 1e6);
	while (now_us() < end) {
		uint64_t t0 = now_us();
		mori_client *c;
		if (mori_client_open(dir, "flood-bench", &c) == MORI_OK) {
			mori_client_close(c);
			lat_add(sess, (double)(now_us() - t0) / 1000.0);
		} else {
			sess->failures++;
		}
		Mori__Request req;
		ProtobufCMessage empty;
		Mori__Reply *rep = NULL;
		ctl_request_empty(&req, MORI__REQUEST__BODY_STATUS, &empty);
		t0 = now_us();
		if (ctl_call(url, &req, &rep, 5000, err, sizeof(err)) == MORI_OK && rep->code == 0) {
			lat_add(stat, (double)(now_us() - t0) / 1000.0);
			if (rep->body_case == MORI__REPLY__BODY_STATUS)
				atomic_store(pid, rep->status->pid);
			uint64_t kib = F ? proc_rss_kib(atomic_load(pid)) : 0;
			if (kib) {
				F->rss_sum += kib;
				F->rss_samples++;
				F->rss_max = kib > F->rss_max ? kib : F->rss_max;
			}
		} else
			stat->failures++;
		if (rep)
			mori__reply__free_unpacked(rep, NULL);
	}
}

static void row(const char *phase, struct lat *l, const char *what)
{
	pct(l, 50); /* sorted before the arguments are read, in whatever order */
	printf("%-9s %-8s %8zu %8llu %9.2f %9.2f %9.2f\n", phase, what, l->n, (unsigned long long)l->failures,
	       pct(l, 50), pct(l, 99), l->n ? l->v[l->n - 1] : 0.0);
}

static void usage(void)
{
	fprintf(stderr, "usage: mori-bench flood --node HOST:PORT [--runtime-dir DIR] [--conns 2000] [--seconds 10]\n"
			"       mori-bench flood --lists N --node HOST:PORT --peer-dir DIR2 [--runtime-dir DIR] [--clients 8]\n"
			"                        [--descs 1048576] [--seconds 10]\n"
			"  connections: HOST:PORT is the daemon's listen address; DIR its runtime directory (local\n"
			"  sessions, status). --lists: clients of DIR's daemon prepare N lists each to a region\n"
			"  published on the daemon of DIR2, whose listen address is HOST:PORT\n");
	exit(2);
}

/* The --lists load: a target client on F->peer's daemon publishes the region, then the preparer
 * threads. The target is returned (closed by the caller after the phase). */
static int lists_start(struct flood *F, const char *peer_dir, pthread_t *th, mori_client **target)
{
	mori_mem *m;
	mori_desc *d = malloc((size_t)F->descs * sizeof(*d));
	if (!d || mori_client_open(peer_dir, "flood-target", target) != MORI_OK) {
		fprintf(stderr, "mori-bench flood: no target client on %s\n", peer_dir);
		free(d);
		return -1;
	}
	if (mori_mem_alloc(*target, 1 << 20, MORI_MEM_HOST, &m) != MORI_OK || mori_mem_publish(m, "flood/lists") != MORI_OK) {
		fprintf(stderr, "mori-bench flood: %s\n", mori_client_last_error(*target));
		free(d);
		return -1;
	}
	for (uint32_t i = 0; i < F->descs; i++) /* 4 KiB blocks inside the 1 MiB regions */
		d[i] = (mori_desc){(i % 256) * 4096ull, ((i * 7) % 256) * 4096ull, 4096};
	F->desc = d;
	for (int i = 0; i < F->clients; i++)
		if (pthread_create(&th[i], NULL, preparer, F) != 0)
			return -1;
	return 0;
}

static int lists_main(const char *node, const char *dir, const char *peer_dir, int lists, int clients, uint32_t descs,
		      double secs)
{
	struct flood F = {.dir = dir, .node = node, .lists = lists, .clients = clients, .descs = descs};
	struct lat base_s = {0}, base_t = {0}, fl_s = {0}, fl_t = {0};
	pthread_t *th = calloc((size_t)clients, sizeof(*th));
	mori_client *target = NULL;
	local_loop(dir, secs, &base_s, &base_t, &F.pid, &F);
	uint64_t base_rss = F.rss_samples ? F.rss_sum / F.rss_samples : 0;
	F.rss_sum = F.rss_samples = F.rss_max = 0;
	uint64_t t0 = now_us();
	if (!th || lists_start(&F, peer_dir, th, &target) != 0)
		return 1;
	local_loop(dir, secs, &fl_s, &fl_t, &F.pid, &F);
	atomic_store(&F.stop, 1);
	for (int i = 0; i < clients; i++)
		pthread_join(th[i], NULL);
	double el = (double)(now_us() - t0) / 1e6;
	printf("# %d clients, each preparing %d lists of %u descriptors (%.1f MiB a list) and freeing them, for %.1f s: "
	       "%.1f lists/s prepared, %llu refused (MORI_ENOMEM), %llu other failures\n",
	       clients, lists, descs, (double)descs * sizeof(mori_desc) / 1048576.0, el,
	       (double)atomic_load(&F.preps) / el, (unsigned long long)atomic_load(&F.refused),
	       (unsigned long long)atomic_load(&F.failed));
	printf("# the daemon (pid %d): RSS %.0f MiB in the baseline; %.0f MiB on average, %.0f MiB at most under the load\n",
	       atomic_load(&F.pid), (double)base_rss / 1024, F.rss_samples ? (double)F.rss_sum / F.rss_samples / 1024 : 0.0,
	       (double)F.rss_max / 1024);
	printf("%-9s %-8s %8s %8s %9s %9s %9s\n", "phase", "call", "calls", "failed", "p50_ms", "p99_ms", "max_ms");
	row("baseline", &base_s, "session");
	row("baseline", &base_t, "status");
	row("lists", &fl_s, "session");
	row("lists", &fl_t, "status");
	mori_client_close(target);
	int bad = fl_s.failures || fl_t.failures || atomic_load(&F.failed);
	free(base_s.v), free(base_t.v), free(fl_s.v), free(fl_t.v), free(th), free((void *)F.desc);
	return bad ? 1 : 0;
}

int bench_flood_main(int argc, char **argv)
{
	const char *node = NULL, *dir = getenv("MORI_RUNTIME_DIR"), *peer_dir = NULL;
	long conns = 2000, lists = 0, clients = 8, descs = 1 << 20;
	double secs = 10;
	for (int i = 2; i < argc; i++) {
		if (i + 1 >= argc)
			usage();
		if (!strcmp(argv[i], "--node"))
			node = argv[++i];
		else if (!strcmp(argv[i], "--runtime-dir"))
			dir = argv[++i];
		else if (!strcmp(argv[i], "--conns"))
			conns = strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--seconds"))
			secs = strtod(argv[++i], NULL);
		else if (!strcmp(argv[i], "--lists"))
			lists = strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--clients"))
			clients = strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--descs"))
			descs = strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--peer-dir"))
			peer_dir = argv[++i];
		else
			usage();
	}
	if (!dir)
		dir = "/run/mori";
	char host[256], ports[16];
	int port;
	if (!node || host_port_split(node, host, sizeof(host), &port) != 0 || conns < 1 || conns > 1000000 ||
	    !(secs >= 1 && secs <= 3600) || lists < 0 || lists > 4096 || (lists && (!peer_dir || clients < 1 ||
	    clients > 256 || descs < 1 || descs > (1 << 24))))
		usage();
	if (lists)
		return lists_main(node, dir, peer_dir, (int)lists, (int)clients, (uint32_t)descs, secs);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (rlim_t)conns + 64 > rl.rlim_cur) {
		fprintf(stderr, "mori-bench flood: --conns %ld needs more descriptors than RLIMIT_NOFILE %llu\n", conns,
			(unsigned long long)rl.rlim_cur);
		return 2;
	}
	snprintf(ports, sizeof(ports), "%d", port);
	struct flood F = {.conns = (int)conns};
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
	int rc = getaddrinfo(host, ports, &hints, &F.ai);
	if (rc != 0) {
		fprintf(stderr, "mori-bench flood: %s: %s\n", node, gai_strerror(rc));
		return 1;
	}
	struct lat base_s = {0}, base_t = {0}, fl_s = {0}, fl_t = {0};
	local_loop(dir, secs, &base_s, &base_t, &F.pid, NULL);
	pthread_t th;
	uint64_t t0 = now_us();
	if (pthread_create(&th, NULL, flooder, &F) != 0)
		return 1;
	local_loop(dir, secs, &fl_s, &fl_t, &F.pid, NULL);
	atomic_store(&F.stop, 1);
	pthread_join(th, NULL);
	double el = (double)(now_us() - t0) / 1e6;
	printf("# flood of %s: up to %ld idle connections for %.1f s: %.0f dials/s, %.0f closed by the daemon/s, "
	       "%.0f open at the flooder's end on average, %llu dials failed\n",
	       node, conns, el, (double)F.dials / el, (double)F.closes / el,
	       F.held_samples ? (double)F.held_sum / (double)F.held_samples : 0.0, (unsigned long long)F.dial_errors);
	if (F.fds_samples)
		printf("# the daemon (pid %d) held %.0f descriptors on average, %d at most, during the flood\n",
		       atomic_load(&F.pid), (double)F.fds_sum / (double)F.fds_samples, F.fds_max);
	printf("%-9s %-8s %8s %8s %9s %9s %9s\n", "phase", "call", "calls", "failed", "p50_ms", "p99_ms", "max_ms");
	row("baseline", &base_s, "session");
	row("baseline", &base_t, "status");
	row("flood", &fl_s, "session");
	row("flood", &fl_t, "status");
	freeaddrinfo(F.ai);
	int bad = fl_s.failures || fl_t.failures;
	free(base_s.v), free(base_t.v), free(fl_s.v), free(fl_t.v);
	return bad ? 1 : 0;
}
