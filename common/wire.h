/* Framing shared by morid, libmori and moractl: protobuf envelopes, seqpacket messages with
 * SCM_RIGHTS fds, and the monotonic clock. */
#ifndef MORI_WIRE_H
#define MORI_WIRE_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "mori.pb-c.h"

/* Most fds one message carries: a range of many VMM allocations travels in batches of this many
 * (one fd each; the kernel's own cap, SCM_MAX_FD, is 253). */
#define WIRE_MAX_FDS 64
/* Hello features a client announces. OWNER_PIDFD: it takes a pidfd of the owner with a
 * cross-memory-attach open reply (MemOpenReply.has_owner_pidfd, fds[0]) and checks it before
 * each copy, so it never reaches a pid that another process got after the owner exited. */
#define WIRE_FEAT_OWNER_PIDFD (1ull << 0)
/* Largest message on a session socket; the daemon's max_message_bytes caps it further. */
#define WIRE_SEQPACKET_MAX (256 * 1024)

uint64_t mori_now_us(void);
/* 64 random bits from the kernel. Returns 0 or -1. */
int getrandom_u64(uint64_t *out);

/* Send one datagram with up to WIRE_MAX_FDS fds. Returns 0 or -errno. */
int wire_send(int sock, const void *buf, size_t len, const int *fds, int nfds);
/* Receive one datagram; *nfds gets the fds received (the caller owns them), or -1 when the
 * message came whole but the fds sent with it could not be received (this process is out of
 * descriptors). Returns the length, 0 on orderly close, -EMSGSIZE when truncated (fds closed),
 * or -errno. */
ssize_t wire_recv(int sock, void *buf, size_t cap, int *fds, int *nfds);

/* Pack an envelope into a malloc'd buffer. Returns 0 or MORI_ENOMEM. */
int wire_pack_request(const Mori__Request *req, uint8_t **buf, size_t *len);
int wire_pack_reply(const Mori__Reply *rep, uint8_t **buf, size_t *len);

/* Handle <-> blob. The blob is a magic byte followed by the packed Handle message. */
#define WIRE_BLOB_MAGIC 0xB7
#endif
