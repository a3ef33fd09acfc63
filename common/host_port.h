/* "host:port" addresses, one rule for morid (its listen, advertise, peers and metrics_listen
 * options, group roots, peers it dials) and libmori (mori_mem_open_remote's node), so that an
 * address one side accepts the other does too. */
#ifndef MORI_HOST_PORT_H
#define MORI_HOST_PORT_H
#include <stddef.h>
#include <string.h>

/* Longest address, in characters: the fields that hold one are 128 or 256 bytes. */
#define HOST_PORT_MAX 255

/* Split addr at its last ':' into host and port. The port is 1..65535 in decimal digits alone
 * (no sign, no space: strtol would take "+80" and " 80"); the host is not empty, and "[v6]" loses
 * its brackets ("[::1]:7100" -> "::1"). addr is at most HOST_PORT_MAX characters and the host
 * fits hlen with its NUL. 0 and host and *port set, or -1 (nothing written). */
static inline int host_port_split(const char *addr, char *host, size_t hlen, int *port)
{
	const char *colon = NULL;
	for (size_t i = 0; addr[i]; i++) { /* strrchr, bounded */
		if (i == HOST_PORT_MAX)
			return -1;
		if (addr[i] == ':')
			colon = addr + i;
	}
	if (!colon || !colon[1])
		return -1;
	long v = 0;
	for (const char *d = colon + 1; *d; d++) {
		v = v * 10 + (*d - '0');
		if (*d < '0' || *d > '9' || v > 65535)
			return -1;
	}
	if (v == 0)
		return -1;
	const char *h = addr;
	size_t n = (size_t)(colon - addr);
	if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
		h++;
		n -= 2;
	}
	if (n == 0 || n >= hlen)
		return -1;
	memcpy(host, h, n);
	host[n] = 0;
	*port = (int)v;
	return 0;
}
#endif
