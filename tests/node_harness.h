/* Nodes for cross-node tests: a morid with its own runtime dir and peer listener, on loopback or
 * inside a network namespace (`ip netns exec NS morid ...`: ip execs morid, so the child's pid is
 * the daemon's and signals reach it). Started, restarted on the same dir and port, stopped,
 * killed, cleaned up; node_pair_* for the tests of two (A, and B beside it). One copy for
 * test_xnode, test_shmem, test_deadline, test_rdma_daemons and whatever test plays two nodes
 * next. Include after harness.h. */
#ifndef MORI_TEST_NODE_HARNESS_H
#define MORI_TEST_NODE_HARNESS_H
#include <sys/prctl.h>

#include "harness.h"

struct test_node {
	pid_t pid;
	char dir[256];       /* runtime dir; empty: node_start makes /tmp/mori-<name>-XXXXXX */
	char log[300];       /* <dir>.log: the daemon's stderr */
	char ip[64];         /* listen address */
	char addr[128];      /* "ip:port" as peers name this node; "" without a listener */
	const char *name;    /* for the dir's name (the netns scripts tail /tmp/mori-<name>-*.log) */
	const char *ns;      /* network namespace, or NULL: this one */
	int port;            /* peer listener port; 0: no listener */
	const char *const *args; /* options every start of this node passes (NULL-terminated), or NULL */
};

/* A node named name. Namespace and address from the environment variables nsvar and ipvar when
 * set (NULL: none; address 127.0.0.1 otherwise). ns_port: the listener's port inside a namespace
 * (each has its own ports, so a fixed one); outside, a free loopback port; 0: no listener. */
static inline void node_init(struct test_node *n, const char *name, const char *nsvar, const char *ipvar, int ns_port)
{
	memset(n, 0, sizeof(*n));
	n->name = name;
	n->ns = ns_port && nsvar ? getenv(nsvar) : NULL;
	const char *ip = ns_port && ipvar ? getenv(ipvar) : NULL;
	snprintf(n->ip, sizeof(n->ip), "%s", ip ? ip : "127.0.0.1");
	n->port = !ns_port ? 0 : n->ns ? ns_port : free_port();
}

/* Start (or restart: same dir, same port) the node's morid with n->args, then extra (either
 * NULL-terminated or NULL). Log level MORI_TEST_LOG (default info). Waits up to 5 s for the
 * control socket, then up to 5 s more for the peer listener, which binds right after it (inside
 * a namespace, which this process cannot dial: 50 ms). 0, or -1 (the daemon exited meanwhile, or
 * never served; its log says why). */
static inline int node_start(struct test_node *n, const char *const *extra)
{
	char morid[512], sock[300], listen[128];
	snprintf(morid, sizeof(morid), "%s/morid", build_dir());
	if (!n->dir[0]) {
		snprintf(n->dir, sizeof(n->dir), "/tmp/mori-%s-XXXXXX", n->name ? n->name : "node");
		if (!mkdtemp(n->dir))
			return -1;
	} else if (mkdir(n->dir, 0700) != 0 && errno != EEXIST) {
		return -1;
	}
	snprintf(n->log, sizeof(n->log), "%s.log", n->dir);
	snprintf(sock, sizeof(sock), "%s/morid.sock", n->dir);
	snprintf(listen, sizeof(listen), "%s:%d", n->ip, n->port);
	snprintf(n->addr, sizeof(n->addr), "%s", n->port ? listen : "");
	unlink(sock);
	n->pid = fork();
	if (n->pid < 0)
		return -1;
	if (n->pid == 0) {
		const char *argv[64];
		int k = 0;
		if (n->ns) {
			argv[k++] = "ip";
			argv[k++] = "netns";
			argv[k++] = "exec";
			argv[k++] = n->ns;
		}
		argv[k++] = morid;
		argv[k++] = "--runtime-dir";
		argv[k++] = n->dir;
		argv[k++] = "--log-level";
		argv[k++] = getenv("MORI_TEST_LOG") ? getenv("MORI_TEST_LOG") : "info";
		if (n->port) {
			argv[k++] = "--listen";
			argv[k++] = listen;
		}
		for (int i = 0; n->args && n->args[i] && k < 62; i++)
			argv[k++] = n->args[i];
		for (int i = 0; extra && extra[i] && k < 62; i++)
			argv[k++] = extra[i];
		argv[k] = NULL;
		FILE *f = freopen(n->log, "a", stderr);
		(void)f;
		unsetenv("NOTIFY_SOCKET");
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed check ends the test without teardown */
		if (n->ns)
			execvp("ip", (char *const *)argv);
		else
			execv(morid, (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		struct stat st;
		int status;
		if (stat(sock, &st) == 0) {
			struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons((uint16_t)n->port)};
			int dial = n->port && !n->ns && inet_pton(AF_INET, n->ip, &la.sin_addr) == 1;
			if (!dial)
				usleep(50000);
			for (int k = 0; dial && k < 500 && !tcp_accepts(&la); k++) {
				if (waitpid(n->pid, &status, WNOHANG) == n->pid) { /* e.g. its listen port was taken */
					n->pid = 0;
					return -1;
				}
				usleep(10000);
			}
			if (waitpid(n->pid, &status, WNOHANG) == n->pid) {
				n->pid = 0;
				return -1;
			}
			return 0;
		}
		if (waitpid(n->pid, &status, WNOHANG) == n->pid) {
			n->pid = 0;
			return -1;
		}
		usleep(10000);
	}
	return -1;
}

/* SIGCONT (a test may have stopped it) and SIGTERM; waits 3 s (9 s under the sanitizers), then
 * SIGKILL. Returns the exit status (0: every handle closed, the loop closed to zero, and under
 * the sanitizers nothing leaked), -1 if it had to be killed or was not running; a non-zero
 * status names the log. Leaves dir and log for node_clean. */
static inline int node_stop(struct test_node *n)
{
	int st, rc = -1;
	if (n->pid <= 0)
		return -1;
	kill(n->pid, SIGCONT);
	kill(n->pid, SIGTERM);
	for (int i = 0; i < 300 * (getenv("ASAN_OPTIONS") ? 3 : 1); i++) {
		if (waitpid(n->pid, &st, WNOHANG) == n->pid) {
			n->pid = 0;
			rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
			break;
		}
		usleep(10000);
	}
	if (n->pid > 0) {
		kill(n->pid, SIGKILL);
		waitpid(n->pid, NULL, 0);
		n->pid = 0;
	}
	if (rc != 0)
		fprintf(stderr, "# morid %s exited %d: its log is %s\n", n->addr, rc, n->log);
	return rc;
}

/* SIGKILL and reap: the daemon dies without a word to anyone. */
static inline void node_kill9(struct test_node *n)
{
	if (n->pid > 0) {
		kill(n->pid, SIGKILL);
		waitpid(n->pid, NULL, 0);
		n->pid = 0;
	}
}

/* Remove dir and log, unless MORI_TEST_KEEP or KEEP_TMP=1 says keep them. */
static inline void node_clean(struct test_node *n)
{
	char cmd[700];
	const char *keep = getenv("KEEP_TMP");
	if (!n->dir[0])
		return;
	if (getenv("MORI_TEST_KEEP") || (keep && !strcmp(keep, "1"))) {
		fprintf(stderr, "# kept %s and %s\n", n->dir, n->log);
		return;
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", n->dir, n->log);
	if (system(cmd) != 0)
		fprintf(stderr, "# could not remove %s\n", n->dir);
}

/* Nodes A and B of a two-node test, both named name and both with a peer listener (B's clients
 * reach A through it: a group's root, a remote region). With from_env, inside the namespaces of
 * MORI_XNODE_NS_A/_B at MORI_XNODE_IP_A/_B when those are set (the netns scripts), at ns_port
 * there; else on loopback, free ports. Options go to a->args and b->args before the start. */
static inline void node_pair_init(struct test_node *a, struct test_node *b, const char *name, int ns_port,
				  int from_env)
{
	node_init(a, name, from_env ? "MORI_XNODE_NS_A" : NULL, from_env ? "MORI_XNODE_IP_A" : NULL, ns_port);
	node_init(b, name, from_env ? "MORI_XNODE_NS_B" : NULL, from_env ? "MORI_XNODE_IP_B" : NULL, ns_port);
}

/* Inside the namespaces the listeners are off loopback, and a test without a cluster key must
 * say --insecure-peers (without a key morid refuses to listen off loopback otherwise): both
 * nodes' args, where this morid knows the option (a run against an older morid works too).
 * Outside a namespace nothing. */
static inline void node_pair_insecure_in_ns(struct test_node *a, struct test_node *b)
{
	static const char *const insecure[] = {"--insecure-peers", "1", NULL};
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "'%s/morid' --help 2>&1 | grep -q insecure", build_dir());
	if (a->ns && system(cmd) == 0)
		a->args = b->args = insecure;
}

/* Start A, then B (b_extra: what B alone passes, or NULL). 0, or -1 when one did not start (its
 * log named on stderr). */
static inline int node_pair_start(struct test_node *a, struct test_node *b, const char *const *b_extra)
{
	struct test_node *bad = node_start(a, NULL) ? a : node_start(b, b_extra) ? b : NULL;
	if (bad)
		fprintf(stderr, "# morid %s did not start: its log is %s\n", bad == a ? "A" : "B", bad->log);
	return bad ? -1 : 0;
}

/* The fixtures of the tests that run on one node or on two (test_shmem, test_cco, test_gpu_cco):
 * one morid without a peer listener; or A and B with listeners (from_env: inside the namespaces
 * of MORI_XNODE_NS_A/B when the netns scripts set them, --insecure-peers there). 0, or -1 (a morid
 * did not start: its log named on stderr). Stop either with node_pair_stop. */
static inline int node_one_start(struct test_node *a, const char *name)
{
	node_init(a, name, NULL, NULL, 0);
	return node_start(a, NULL);
}
static inline int node_two_start(struct test_node *a, struct test_node *b, const char *name, int ns_port, int from_env)
{
	node_pair_init(a, b, name, ns_port, from_env);
	node_pair_insecure_in_ns(a, b);
	return node_pair_start(a, b, NULL);
}

/* node_stop both (one the test killed, or never started, counts as stopped cleanly); their dirs
 * and logs removed when both stopped cleanly, else kept and named. 0, or -1. */
static inline int node_pair_stop(struct test_node *a, struct test_node *b)
{
	int ra = a->pid > 0 ? node_stop(a) : 0, rb = b->pid > 0 ? node_stop(b) : 0;
	if (ra || rb)
		return -1;
	node_clean(a);
	node_clean(b);
	return 0;
}
#endif
