/* Playing another daemon in tests: a cluster key file, an authenticated request path
 * to a morid's peer listener (nng req0: the PeerAuth exchange, then requests on the same pipe),
 * and raw data streams with the authentication handshake of daemon/transport/tcp/tcp_int.h. The crypto is
 * morid's own (daemon/core/auth.c, libsodium): tests link libmorid.a. Include after check.h. */
#ifndef MORI_TEST_PEER_HARNESS_H
#define MORI_TEST_PEER_HARNESS_H
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../daemon/core/auth.h"
#include "../daemon/transport/tcp/tcp_int.h"
#include "mori.pb-c.h"
#include "svc/nng_close.h"

/* A fresh random key into path (mode 0600); k gets it. 0 or -1. */
static inline int key_write(const char *path, struct auth_key *k)
{
	char hex[66];
	memset(k, 0, sizeof(*k));
	if (auth_init() != 0 || auth_random(k->k, sizeof(k->k)) != 0)
		return -1;
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", k->k[i]);
	hex[64] = '\n';
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, hex, 65) != 65) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	k->on = 1;
	return 0;
}

/* ---- the request path ---- */

struct pctl {
	nng_socket s;
	int open;
};

/* Bytes as a request (a fuzzer's): the reply, or NULL (none in timeout_ms, the socket failed, or
 * not a reply). */
static inline Mori__Reply *pctl_raw(struct pctl *pc, const void *buf, size_t len, int timeout_ms)
{
	nng_msg *m;
	nng_socket_set_ms(pc->s, NNG_OPT_SENDTIMEO, timeout_ms);
	nng_socket_set_ms(pc->s, NNG_OPT_RECVTIMEO, timeout_ms);
	if (nng_msg_alloc(&m, len) != 0)
		return NULL;
	if (len)
		memcpy(nng_msg_body(m), buf, len);
	if (nng_sendmsg(pc->s, m, 0) != 0) {
		nng_msg_free(m);
		return NULL;
	}
	if (nng_recvmsg(pc->s, &m, 0) != 0)
		return NULL;
	Mori__Reply *rep = mori__reply__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
	nng_msg_free(m);
	return rep;
}

/* One request and its reply on pc (NULL: no reply in timeout_ms, or the socket failed). */
static inline Mori__Reply *pctl_call(struct pctl *pc, const Mori__Request *req, int timeout_ms)
{
	size_t len = mori__request__get_packed_size(req);
	uint8_t *b = malloc(len ? len : 1);
	if (!b)
		return NULL;
	mori__request__pack(req, b);
	Mori__Reply *rep = pctl_raw(pc, b, len, timeout_ms);
	free(b);
	return rep;
}

/* Authenticate pc as node `node`: the listener's proof checked under check (NULL: not checked),
 * our answer made under answer. MORI_OK, or the listener's code (MORI_EPERM: it refused our
 * answer; MORI_ENOTSUP: it has no key), or -1 when it did not prove the key itself. */
static inline int pctl_auth_keys(struct pctl *pc, const struct auth_key *check, const struct auth_key *answer,
				 const char *node)
{
	uint8_t nc[AUTH_NONCE_BYTES], mac[AUTH_MAC_BYTES];
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__PeerAuth pa = MORI__PEER_AUTH__INIT;
	auth_nonce(nc);
	pa.step = 1;
	pa.nonce.data = nc;
	pa.nonce.len = sizeof(nc);
	pa.node = (char *)node;
	req.id = 1;
	req.body_case = MORI__REQUEST__BODY_PEER_AUTH;
	req.peer_auth = &pa;
	Mori__Reply *rep = pctl_call(pc, &req, 3000);
	if (!rep)
		return MORI_ETIMEDOUT;
	int code = rep->code;
	if (!code && (rep->body_case != MORI__REPLY__BODY_PEER_AUTH || rep->peer_auth->nonce.len != AUTH_NONCE_BYTES ||
		      (check && check->on &&
		       !auth_check(check, AUTH_CTL_SERVER, nc, rep->peer_auth->nonce.data, rep->peer_auth->mac.data,
				   rep->peer_auth->mac.len))))
		code = -1;
	if (code) {
		mori__reply__free_unpacked(rep, NULL);
		return code;
	}
	auth_mac(answer, AUTH_CTL_CLIENT, rep->peer_auth->nonce.data, nc, mac);
	mori__reply__free_unpacked(rep, NULL);
	pa.step = 2;
	pa.nonce.len = 0;
	pa.mac.data = mac;
	pa.mac.len = sizeof(mac);
	req.id = 2;
	rep = pctl_call(pc, &req, 3000);
	if (!rep)
		return MORI_ETIMEDOUT;
	code = rep->code;
	mori__reply__free_unpacked(rep, NULL);
	return code;
}

/* Authenticate pc with key k (both ways) as node `node`; codes as pctl_auth_keys. */
static inline int pctl_auth(struct pctl *pc, const struct auth_key *k, const char *node)
{
	return pctl_auth_keys(pc, k, k, node);
}

/* A request path to url ("tcp://host:port"), authenticated with k when k is non-NULL. */
static inline int pctl_open(struct pctl *pc, const char *url, const struct auth_key *k, const char *node)
{
	memset(pc, 0, sizeof(*pc));
	if (nng_req0_open(&pc->s) != 0)
		return MORI_ECONN;
	pc->open = 1;
	nng_socket_set_ms(pc->s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_socket_set_size(pc->s, NNG_OPT_RECVMAXSZ, 4 << 20);
	if (nng_dial(pc->s, url, NULL, 0) != 0)
		return MORI_ECONN;
	return k ? pctl_auth(pc, k, node) : MORI_OK;
}

static inline void pctl_close(struct pctl *pc)
{
	if (pc->open)
		svc_nng_close(pc->s, 5000, "a test peer socket");
	pc->open = 0;
}

/* The peer listener's data port and epoch (a PeerHello on pc). */
static inline uint32_t pctl_data_port(struct pctl *pc, uint64_t *epoch)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__PeerHello ph = MORI__PEER_HELLO__INIT;
	ph.protocol_version = MORI_PROTOCOL_VERSION;
	ph.epoch = 777;
	ph.node = "";
	req.id = 3;
	req.body_case = MORI__REQUEST__BODY_PEER_HELLO;
	req.peer_hello = &ph;
	Mori__Reply *rep = pctl_call(pc, &req, 3000);
	uint32_t port = rep && !rep->code && rep->body_case == MORI__REPLY__BODY_PEER_HELLO ? rep->peer_hello->data_port : 0;
	if (epoch)
		*epoch = port ? rep->peer_hello->epoch : 0;
	if (rep)
		mori__reply__free_unpacked(rep, NULL);
	return port;
}

/* ---- data streams ---- */

static inline int data_dial(const char *ip, uint32_t port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	/* set before connect, which they bound too: a full accept queue retries SYNs for minutes */
	struct timeval tv = {.tv_sec = 3};
	if (s >= 0) {
		setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	if (s < 0 || inet_pton(AF_INET, ip, &sa.sin_addr) != 1 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		if (s >= 0)
			close(s);
		return -1;
	}
	return s;
}

static inline int data_write(int s, const struct fhdr *h, const void *payload)
{
	struct fhdr hh = *h;
	hh.magic = FRAME_MAGIC;
	if (write(s, &hh, sizeof(hh)) != (ssize_t)sizeof(hh))
		return -1;
	if (hh.len && payload && write(s, payload, hh.len) != (ssize_t)hh.len)
		return -1;
	return 0;
}

/* The next frame (type 0 when the stream closed); up to cap payload bytes kept in payload. */
static inline struct fhdr data_read(int s, void *payload, size_t cap)
{
	struct fhdr h = {0};
	size_t got = 0;
	while (got < sizeof(h)) {
		ssize_t n = read(s, (char *)&h + got, sizeof(h) - got);
		if (n <= 0) {
			h.type = 0;
			return h;
		}
		got += (size_t)n;
	}
	char skip[512];
	for (uint32_t left = h.len, at = 0; left;) {
		ssize_t n = read(s, skip, left < sizeof(skip) ? left : sizeof(skip));
		if (n <= 0)
			break;
		if (payload && at < cap)
			memcpy((char *)payload + at, skip, (size_t)n < cap - at ? (size_t)n : cap - at);
		at += (uint32_t)n;
		left -= (uint32_t)n;
	}
	return h;
}

/* The data stream handshake as an initiator of epoch `epoch` named `node`, with key k (NULL or
 * off: proofs of zeros). Returns 0 when the target accepted our hello and proved the key (or k
 * is off), -1 when it closed, -2 when its proof was wrong. The target judges our proof after. */
static inline int data_handshake(int s, const struct auth_key *k, uint64_t epoch, const char *node)
{
	uint8_t hello[AUTH_NONCE_BYTES + 128], ack[2 * AUTH_NONCE_BYTES + 128], mac[AUTH_MAC_BYTES] = {0};
	size_t nl = strlen(node);
	auth_nonce(hello);
	memcpy(hello + AUTH_NONCE_BYTES, node, nl);
	struct fhdr h = {.type = F_HELLO, .code = FRAME_VERSION, .xfer = epoch, .len = (uint32_t)(AUTH_NONCE_BYTES + nl)};
	if (data_write(s, &h, hello) != 0)
		return -1;
	struct fhdr a = data_read(s, ack, sizeof(ack));
	if (a.type != F_HELLO_ACK || a.len < 2 * AUTH_NONCE_BYTES)
		return -1;
	int ok = 1;
	if (k && k->on) {
		ok = auth_check(k, AUTH_DATA_TARGET, hello, ack, ack + AUTH_NONCE_BYTES, AUTH_MAC_BYTES);
		auth_mac(k, AUTH_DATA_INITIATOR, ack, hello, mac);
	}
	struct fhdr f = {.type = F_AUTH, .len = AUTH_MAC_BYTES};
	if (data_write(s, &f, mac) != 0)
		return -1;
	return ok ? 0 : -2;
}

/* A region's handle from an owner's blob (for its id, generation and secret). */
static inline Mori__Handle *blob_handle(const uint8_t *blob, size_t len)
{
	return len > 1 ? mori__handle__unpack(NULL, len - 1, blob + 1) : NULL;
}
#endif
