/* nng's req/rep wire protocol, the rep0 side, served on the loop: the control socket (nng's ipc
 * transport on a unix socket) and the peer listener (its tcp transport). libnng's own rep0
 * listener is not used: nng 1.5.2 stops accepting for good after a client disconnects during
 * the handshake (nanomsg/nng#1518), and it hides accepted connections until their handshake is
 * done, so idle ones could not be bounded. Here every connection is counted from its accept:
 * at most max_conns (the longest idle closed for a new one), at most max_untrusted not yet
 * trusted (the oldest closed), each untrusted one closed trust_ms after its accept, and none
 * accepted into the share of descriptors kept for local sessions and moractl. */
#ifndef MORID_SP_REP_H
#define MORID_SP_REP_H
#include <stdint.h>
#include <sys/types.h>

#include "morid.h"

struct sp_conn;
struct sp_server;

struct sp_rep_opts {
	const char *sub;          /* log subsystem and the name in messages: "control", "peer" */
	int tcp;                  /* 1: nng's tcp framing (u64 length); 0: ipc's (0x01, u64 length) */
	int max_conns;            /* beyond it the connection idle longest is closed */
	int max_untrusted;        /* beyond it the oldest untrusted one is closed; 0: no cap */
	uint32_t untrusted_max_msg; /* larger messages from an untrusted connection close it; 0: no cap */
	uint32_t trust_ms;        /* an untrusted connection is closed this long after its accept; 0: never */
	uint32_t handshake_ms;    /* to send the 8-byte SP header */
	uint32_t idle_ms;         /* a trusted connection with no whole request for this long is closed */
	int keep_fds_pct;         /* accept nothing while fewer than this share of RLIMIT_NOFILE is free; 0: off */
	int trusted_at_accept;    /* every connection is trusted (the control socket: the uid decides) */
	enum counter dropped;     /* counts untrusted connections closed by the rules above; C_COUNT: none */
	void *arg;                /* sp_conn_arg's */
	/* A message of len bytes is announced: NULL to read it, or why the connection closes. */
	const char *(*admit)(struct sp_conn *k, uint64_t len);
	/* A whole request (the body after the backtrace), on the loop: answer it with sp_conn_reply
	 * before returning, or close k. */
	void (*request)(struct sp_conn *k, const uint8_t *body, size_t len);
	/* k is closing (its id is not used again); may be NULL. */
	void (*closed)(struct sp_conn *k);
};

/* Listen on addr: a unix socket path (ipc) or host:port (tcp; host "*" for any). opts is
 * copied. The server, or NULL with the reason logged. */
struct sp_server *sp_rep_listen(struct morid *d, const struct sp_rep_opts *opts, const char *addr);
/* Close the listener and every connection; the memory goes when their handles have closed. */
void sp_rep_close(struct sp_server *S);
/* Connections open and those not yet trusted. */
int sp_rep_conns(const struct sp_server *S, int *untrusted);

/* Past its gate (authenticated): the untrusted rules no longer apply to k. */
void sp_conn_trust(struct sp_conn *k);
/* Unique for the server's life; never 0. */
uint32_t sp_conn_id(const struct sp_conn *k);
/* The peer's uid (unix sockets): 0 and *uid, or -1. */
int sp_conn_uid(const struct sp_conn *k, uid_t *uid);
void *sp_conn_arg(const struct sp_conn *k);
/* The reply to the request being handled (only from within the request hook); rep is packed
 * here and stays the caller's. */
void sp_conn_reply(struct sp_conn *k, const Mori__Reply *rep);
/* Close k now (why: logged at info level; NULL: nothing logged). */
void sp_conn_close(struct sp_conn *k, const char *why);
#endif
