/* One table of "host:port" inputs for common/host_port.h's rule, checked where each side applies
 * it: host_port_split and morid's options (test_config), mori_mem_open_remote (test_lib_edges), so
 * that an address one accepts the other does too. host: what the split leaves (NULL: refused). */
#ifndef MORI_TEST_HOST_PORT_CASES_H
#define MORI_TEST_HOST_PORT_CASES_H
#include <string.h>

#include "host_port.h"

static const struct host_port_case {
	const char *addr, *host;
	int port;
} host_port_cases[] = {
	{"127.0.0.1:7100", "127.0.0.1", 7100},
	{"[::1]:7100", "::1", 7100},
	{"[fe80::1%eth0]:1", "fe80::1%eth0", 1},
	{"node-a.example.org:65535", "node-a.example.org", 65535},
	{"localhost:00080", "localhost", 80},   /* leading zeros: decimal all the same */
	{"::1:7100", "::1", 7100},              /* the last ':' ends the host, brackets or not */
	{"no-port", NULL, 0},
	{"host:", NULL, 0},
	{":7100", NULL, 0},                     /* empty host */
	{"[]:7100", NULL, 0},                   /* empty host in brackets (libmori took it) */
	{"host:0", NULL, 0},
	{"host:65536", NULL, 0},
	{"host:99999999999999999999", NULL, 0},
	{"host:-1", NULL, 0},
	{"host:+80", NULL, 0},                  /* morid's strtol took the sign */
	{"host:12x", NULL, 0},
	{"host:0x50", NULL, 0},
	{"", NULL, 0},
};
#define HOST_PORT_NCASES (sizeof(host_port_cases) / sizeof(host_port_cases[0]))

/* An address of len characters, "aaa...a:7100" (len >= 6), in buf (at least len + 1 bytes). */
static inline const char *host_port_long(char *buf, size_t len)
{
	memset(buf, 'a', len - 5);
	memcpy(buf + len - 5, ":7100", 6);
	return buf;
}
#endif
