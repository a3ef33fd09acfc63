#include "wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "mori.h"

uint64_t mori_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int getrandom_u64(uint64_t *out)
{
	return getrandom(out, sizeof(*out), 0) == (ssize_t)sizeof(*out) ? 0 : -1;
}

int wire_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int) * WIRE_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > WIRE_MAX_FDS)
		return -EINVAL;
	if (nfds > 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
		if (n >= 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

ssize_t wire_recv(int sock, void *buf, size_t cap, int *fds, int *nfds)
{
	struct iovec iov = {.iov_base = buf, .iov_len = cap};
	union {
		char buf[CMSG_SPACE(sizeof(int) * WIRE_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf)};
	ssize_t n;
	*nfds = 0;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int *p = (int *)CMSG_DATA(cm);
		for (int i = 0; i < k; i++) {
			if (*nfds < WIRE_MAX_FDS)
				fds[(*nfds)++] = p[i];
			else
				close(p[i]); /* more than we accept: never leak */
		}
	}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		if (mh.msg_flags & MSG_TRUNC)
			return -EMSGSIZE;
		*nfds = -1; /* the message is whole, its descriptors were lost (EMFILE here) */
	}
	return n;
}

int wire_pack_request(const Mori__Request *req, uint8_t **buf, size_t *len)
{
	*len = mori__request__get_packed_size(req);
	*buf = malloc(*len ? *len : 1);
	if (!*buf)
		return MORI_ENOMEM;
	mori__request__pack(req, *buf);
	return MORI_OK;
}

int wire_pack_reply(const Mori__Reply *rep, uint8_t **buf, size_t *len)
{
	*len = mori__reply__get_packed_size(rep);
	*buf = malloc(*len ? *len : 1);
	if (!*buf)
		return MORI_ENOMEM;
	mori__reply__pack(rep, *buf);
	return MORI_OK;
}
