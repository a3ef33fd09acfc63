/* morid: the mori node daemon. Start-up acquires in order, shutdown releases in reverse
 * (knot-resolver daemon/main.c); systemd is told the truth (READY only once serving, STATUS
 * during phases, WATCHDOG only while the loop makes progress, STOPPING on shutdown). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "core/auth.h"
#include "gpu/gpu_stage.h"
#include "kv/kv_store.h"
#include "shmem/group.h"
#include "shmem/shmem_proxy.h"
#include "log.h"
#include "observe/metrics.h"
#include "core/morid.h"
#include "peer/peer.h"
#include "topo/rdma.h"
#include "region/registry.h"
#include "transport/transport.h"

#define DEFAULT_CONFIG "/etc/mori/morid.conf"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: morid [--config FILE] [--foreground] [--check-config] [--OPTION=VALUE ...]\n"
		"  --config FILE     INI file (default " DEFAULT_CONFIG " if it exists, else built-in defaults)\n"
		"  --foreground      run attached to the terminal (morid never forks; accepted for clarity)\n"
		"  --check-config    parse and validate the configuration, print it, exit\n"
		"  --version         print the version\n"
		"Every option of morid.conf is also a flag, e.g. --runtime-dir DIR, --log-level debug.\n"
		"Options:\n");
	struct config cfg;
	config_defaults(&cfg);
	const char *name, *help;
	char value[1100];
	int rl;
	for (int i = 0; config_entry(&cfg, i, &name, value, sizeof(value), &rl, &help); i++)
		fprintf(f, "  --%-20s %s (default '%s'%s)\n", name, help, value, rl ? ", reloadable" : "");
}

static void walk_close(uv_handle_t *h, void *arg)
{
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

void morid_stop(struct morid *d, const char *why)
{
	if (d->stopping)
		return;
	d->stopping = 1;
	mlog_notice("main", "stopping: %s", why);
	metrics_stop(d); /* first: no scrape is answered while the rest stops */
	sd_notify(0, "STOPPING=1");
	session_stop(d);
	kv_stop(d); /* after the clients: their leases and reservations are gone */
	shmem_proxy_stop(d); /* lets go of the rings the PEs left */
	groups_stop(d); /* after the clients (their PEs), before the peer service */
	peers_stop(d); /* ends the transfers, then stops the transports */
	control_stop(d);
	uv_close((uv_handle_t *)&d->sig_term, NULL);
	uv_close((uv_handle_t *)&d->sig_int, NULL);
	uv_close((uv_handle_t *)&d->sig_hup, NULL);
	uv_close((uv_handle_t *)&d->watchdog, NULL);
	uv_close((uv_handle_t *)&d->progress, NULL);
}

static void on_signal(uv_signal_t *s, int signum)
{
	struct morid *d = s->data;
	if (signum == SIGHUP) {
		char err[600];
		morid_reload(d, err, sizeof(err));
		return;
	}
	morid_stop(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void signals_start(struct morid *d)
{
	uv_signal_init(d->loop, &d->sig_term);
	uv_signal_init(d->loop, &d->sig_int);
	uv_signal_init(d->loop, &d->sig_hup);
	d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
	uv_signal_start(&d->sig_term, on_signal, SIGTERM);
	uv_signal_start(&d->sig_int, on_signal, SIGINT);
	uv_signal_start(&d->sig_hup, on_signal, SIGHUP);
}

/* Progress is counted by a check handle: it runs once per loop iteration. The watchdog is only
 * fed when the loop has turned since the last feed, so a wedged loop stops feeding it. */
static void on_progress(uv_check_t *h)
{
	((struct morid *)h->data)->loop_iterations++;
}

static void on_watchdog(uv_timer_t *t)
{
	struct morid *d = t->data;
	if (d->loop_iterations != d->last_watchdog_iter) {
		d->last_watchdog_iter = d->loop_iterations;
		sd_notify(0, "WATCHDOG=1");
	}
}

/* The pid holding a flock on the file of fd, from /proc/locks ("1: FLOCK ADVISORY WRITE <pid>
 * <maj>:<min>:<inode> 0 EOF"): the one to name when the pid in the lock file is missing. */
static void lock_holder(int fd, char *pid, size_t len)
{
	struct stat st;
	char line[256];
	FILE *f = fstat(fd, &st) == 0 ? fopen("/proc/locks", "re") : NULL;
	while (f && fgets(line, sizeof(line), f)) {
		char type[16];
		long p;
		unsigned long long ino;
		if (sscanf(line, "%*d: %15s %*s %*s %ld %*x:%*x:%llu", type, &p, &ino) == 3 && !strcmp(type, "FLOCK") &&
		    ino == (unsigned long long)st.st_ino) {
			snprintf(pid, len, "%ld", p);
			break;
		}
	}
	if (f)
		fclose(f);
}

static int take_lock(struct morid *d)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/morid.lock", d->cfg.runtime_dir);
	d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (d->lock_fd < 0) {
		mlog_err("main", "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		char pid[32] = "";
		ssize_t n = pread(d->lock_fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = 0;
		pid[strcspn(pid, "\n")] = 0;
		if (!pid[0])
			lock_holder(d->lock_fd, pid, sizeof(pid));
		mlog_err("main", "another morid (pid %s) is serving %s; refusing to start",
			 pid[0] ? pid : "?", d->cfg.runtime_dir);
		close(d->lock_fd);
		return -1;
	}
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%d\n", getpid());
	errno = 0;
	if (ftruncate(d->lock_fd, 0) != 0 || pwrite(d->lock_fd, buf, (size_t)n, 0) != n || fsync(d->lock_fd) != 0) {
		/* a runtime dir that cannot take a few bytes (a full filesystem) cannot take sockets either */
		mlog_err("main", "cannot write pid to %s: %s; refusing to start", path, errno ? strerror(errno) : "short write");
		close(d->lock_fd);
		return -1;
	}
	return 0;
}

/* A configuration option on the command line, --name=value or --name value (argv[*i]; *i moves
 * past a separate value). 0, or -1 after saying what is wrong. */
static int cli_option(int argc, char **argv, int *i)
{
	char *a = argv[*i], *eq = strchr(a, '=');
	char name[64];
	snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - a - 2) : (int)strlen(a + 2), a + 2);
	if (!config_known(name)) { /* before "needs a value": the name is the mistake */
		fprintf(stderr, "morid: command line: unknown option '%s' (try --help)\n", name);
		return -1;
	}
	if (eq) {
		cli_names[cli_n] = strndup(a + 2, (size_t)(eq - a - 2));
		cli_values[cli_n++] = eq + 1;
	} else if (*i + 1 < argc) {
		cli_names[cli_n] = strdup(a + 2);
		cli_values[cli_n++] = argv[++*i];
	} else {
		fprintf(stderr, "morid: %s needs a value\n", a);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct morid D;
	struct morid *d = &D;
	int check_only = 0, rc = 1;
	char err[600];
	const char *config_arg = NULL;

	cli_names = calloc((size_t)argc, sizeof(char *));
	cli_values = calloc((size_t)argc, sizeof(char *));
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("morid %s\n", MORI_VERSION);
			return 0;
		} else if (!strcmp(a, "--foreground") || !strcmp(a, "-f")) {
			continue;
		} else if (!strcmp(a, "--check-config")) {
			check_only = 1;
		} else if (!strncmp(a, "--config", 8) && (a[8] == 0 || a[8] == '=')) {
			config_arg = a[8] == '=' ? a + 9 : (i + 1 < argc ? argv[++i] : NULL);
			if (!config_arg) {
				fprintf(stderr, "morid: --config needs a file\n");
				return 2;
			}
		} else if (!strncmp(a, "--", 2)) {
			if (cli_option(argc, argv, &i))
				return 2;
		} else {
			fprintf(stderr, "morid: unexpected argument '%s' (try --help)\n", a);
			return 2;
		}
	}
	if (config_arg) {
		snprintf(d->config_path, sizeof(d->config_path), "%s", config_arg);
		d->config_from_file = 1;
	} else if (access(DEFAULT_CONFIG, R_OK) == 0) {
		snprintf(d->config_path, sizeof(d->config_path), "%s", DEFAULT_CONFIG);
		d->config_from_file = 1;
	}
	/* the key file too: what peer_auth_start would refuse, refused before anything is bound and
	 * by --check-config alike */
	if (load_config(d, &d->cfg, err, sizeof(err)) != 0 ||
	    (d->cfg.cluster_key_file[0] && auth_check_key_file(d->cfg.cluster_key_file, err, sizeof(err)) != 0)) {
		fprintf(stderr, "morid: configuration error: %s\n", err);
		return 2;
	}
	if (check_only) {
		const char *name, *help;
		char value[1100];
		int rl;
		for (int i = 0; config_entry(&d->cfg, i, &name, value, sizeof(value), &rl, &help); i++)
			printf("%s = %s\n", name, value);
		return 0;
	}
	int journal = !strcmp(d->cfg.log_target, "journal") ||
		      (!strcmp(d->cfg.log_target, "auto") && getenv("JOURNAL_STREAM"));
	mori_log_init("morid", mori_log_level_parse(d->cfg.log_level), journal);
	signal(SIGPIPE, SIG_IGN);

	d->start_us = mori_now_us();
	if (getrandom_u64(&d->epoch) != 0)
		d->epoch = d->start_us ^ ((uint64_t)getpid() << 32);
	d->epoch |= 1;
	d->next_client_id = 1;
	d->session_fd = -1;
	LIST_INIT(&d->clients);
	d->loop = uv_default_loop();

	/* Acquire in order; each label releases what was taken before it. */
	if (mkdir(d->cfg.runtime_dir, 0755) != 0 && errno != EEXIST) {
		mlog_err("main", "cannot create runtime dir %s: %s", d->cfg.runtime_dir, strerror(errno));
		return 1;
	}
	if (take_lock(d) != 0)
		return 1;
	if (!(d->reg = registry_new()))
		goto out_lock;
	if (kv_start(d) != 0)
		goto out_reg;
	morid_notify_status(d, "binding sockets in %s", d->cfg.runtime_dir);
	if (control_start(d) != 0)
		goto out_reg;
	if (session_start(d) != 0)
		goto out_control;
	if (metrics_start(d) != 0) /* Prometheus endpoint where metrics_listen is set */
		goto out_session;
	/* The transports built in, in order of preference for a transfer: the first that takes it
	 * carries it. TCP last: it reaches every kind of memory. */
	static const struct transport *const transports[] = {&transport_rdma, &transport_tcp};
	int ntransports = (int)(sizeof(transports) / sizeof(transports[0]));
	if (peers_start(d, transports, ntransports) != 0 || groups_start(d) != 0 || /* groups over the peers */
	    shmem_proxy_start(d) != 0)
		goto out_session;
	rdma_log_devices(&d->cfg); /* what RDMA devices this node has, once */

	signals_start(d);
	uv_check_init(d->loop, &d->progress);
	d->progress.data = d;
	uv_check_start(&d->progress, on_progress);
	uv_timer_init(d->loop, &d->watchdog);
	d->watchdog.data = d;
	if (sd_watchdog_enabled(0, &d->watchdog_usec) > 0) {
		uint64_t half_ms = d->watchdog_usec / 2000;
		uv_timer_start(&d->watchdog, on_watchdog, half_ms ? half_ms : 1, half_ms ? half_ms : 1);
		/* a timer alone would not turn the loop; the watchdog timer itself counts as a turn */
	}

	mlog_notice("main", "morid %s serving %s (config %s, epoch %llx)", MORI_VERSION, d->control_url,
		    d->config_from_file ? d->config_path : "built-in defaults", (unsigned long long)d->epoch);
	sd_notify(0, "READY=1");
	morid_notify_status(d, "serving");

	uv_run(d->loop, UV_RUN_DEFAULT);
	/* Every handle was closed by morid_stop; run once more for their close callbacks. */
	uv_walk(d->loop, walk_close, NULL);
	uv_run(d->loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(d->loop);
	if (rc != 0) {
		mlog_err("main", "loop did not close: %s", uv_strerror(rc));
		rc = 1;
	}
	registry_free(d->reg);
	gpu_stage_fini(); /* after the regions: their VRAM mappings went first */
	close(d->lock_fd);
	mlog_notice("main", "stopped");
	for (int i = 0; i < cli_n; i++)
		free(cli_names[i]);
	free(cli_names);
	free(cli_values);
	return rc;

out_session:
	metrics_stop(d);
	session_stop(d);
out_control:
	control_stop(d);
out_reg:
	kv_stop(d);
	uv_run(d->loop, UV_RUN_NOWAIT);
	registry_free(d->reg);
out_lock:
	close(d->lock_fd);
	return 1;
}
