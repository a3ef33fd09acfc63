/* mori-bench flood: what an idle-connection flood on a morid's peer listener costs its local
 * service. A flooder thread keeps up to --conns TCP connections open to --node (the daemon's
 * `listen` address), never authenticating, and dials again whenever the daemon closes one;
 * meanwhile the main thread opens and closes local sessions and asks moractl's status, one after
 * the other. The same loop without the flood, measured first in the same run, is the baseline.
 * Figures: dials and closes by the daemon per second, connections open at the flooder's end
 * (sampled every 10 ms), the daemon's descriptors (every 100 ms, where it runs here), session open+close and status latency p50/p99/max in ms, and failed
 * local calls (the figure that must stay 0). */
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

/* Sessions and status, one after the other, for secs seconds. */
static void local_loop(const char *dir, double secs, struct lat *sess, struct lat *stat, atomic_int *pid)
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
			"  HOST:PORT: the daemon's listen address; DIR: its runtime directory (local sessions, status)\n");
	exit(2);
}

int bench_flood_main(int argc, char **argv)
{
	const char *node = NULL, *dir = getenv("MORI_RUNTIME_DIR");
	long conns = 2000;
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
		else
			usage();
	}
	if (!dir)
		dir = "/run/mori";
	char host[256], ports[16];
	int port;
	if (!node || host_port_split(node, host, sizeof(host), &port) != 0 || conns < 1 || conns > 1000000 ||
	    !(secs >= 1 && secs <= 3600))
		usage();
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
	local_loop(dir, secs, &base_s, &base_t, &F.pid);
	pthread_t th;
	uint64_t t0 = now_us();
	if (pthread_create(&th, NULL, flooder, &F) != 0)
		return 1;
	local_loop(dir, secs, &fl_s, &fl_t, &F.pid);
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
