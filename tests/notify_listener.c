/* notify_listener: a stand-in for systemd's notification socket, for the integration tests.
 *
 *   notify_listener SOCKET_PATH [SECONDS]
 *
 * Binds a unix datagram socket at SOCKET_PATH and prints every assignment of every datagram
 * received as one line "<monotonic microseconds> <KEY=VALUE>", flushed at once, so a test can
 * follow the file while the daemon runs. Exits on SIGTERM/SIGINT, or after SECONDS (default 60)
 * so that it never outlives a test that forgot it. Exit 0, or 1 with a reason on stderr. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig) { stop = sig; }

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: notify_listener SOCKET_PATH [SECONDS]\n");
		return 2;
	}
	double secs = argc == 3 ? atof(argv[2]) : 60;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(argv[1]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "notify_listener: path longer than %zu bytes\n", sizeof(sa.sun_path) - 1);
		return 1;
	}
	strcpy(sa.sun_path, argv[1]);
	int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	unlink(argv[1]);
	if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		fprintf(stderr, "notify_listener: cannot bind %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	struct sigaction act = {.sa_handler = on_signal};
	sigaction(SIGTERM, &act, NULL);
	sigaction(SIGINT, &act, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	uint64_t deadline = now_us() + (uint64_t)(secs * 1e6);
	char buf[4097];
	while (!stop) {
		uint64_t t = now_us();
		if (t >= deadline)
			break;
		struct pollfd p = {.fd = s, .events = POLLIN};
		int left_ms = (int)((deadline - t) / 1000) + 1;
		int n = poll(&p, 1, left_ms < 200 ? left_ms : 200);
		if (n < 0 && errno != EINTR) {
			fprintf(stderr, "notify_listener: poll: %s\n", strerror(errno));
			break;
		}
		if (n <= 0)
			continue;
		ssize_t len = recv(s, buf, sizeof(buf) - 1, MSG_DONTWAIT);
		if (len < 0)
			continue;
		uint64_t at = now_us();
		buf[len] = 0;
		/* sd_notify may pack several assignments into one datagram, one per line */
		for (char *save, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			printf("%llu %s\n", (unsigned long long)at, line);
	}
	close(s);
	unlink(argv[1]);
	return 0;
}
