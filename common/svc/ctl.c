#include "ctl.h"

#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "invariant.h"
#include "mori.h"
#include "nng_close.h"

void ctl_request_empty(Mori__Request *req, Mori__Request__BodyCase kind, ProtobufCMessage *body)
{
	/* A oneof case is its field's number: the request's descriptor names the body's message
	 * and where req keeps the pointer to it, so one function serves every such kind. */
	const ProtobufCFieldDescriptor *f =
		protobuf_c_message_descriptor_get_field(&mori__request__descriptor, (unsigned)kind);
	const ProtobufCMessageDescriptor *d = f && f->type == PROTOBUF_C_TYPE_MESSAGE ? f->descriptor : NULL;
	MORI_REQUIRE(d && d->n_fields == 0 && d->sizeof_message == sizeof(*body), "request kind %d has arguments",
		     (int)kind);
	*req = (Mori__Request)MORI__REQUEST__INIT;
	protobuf_c_message_init(d, body);
	req->body_case = kind;
	*(ProtobufCMessage **)((char *)req + f->offset) = body;
}

void ctl_url(char *buf, size_t len, const char *runtime_dir)
{
	snprintf(buf, len, "ipc://%s/morid.sock", runtime_dir);
}

int ctl_call(const char *url, const Mori__Request *req, Mori__Reply **rep, int timeout_ms,
	     char *err, size_t errlen)
{
	nng_socket s;
	nng_msg *m = NULL;
	int rc, ret = MORI_ECONN;
	*rep = NULL;
	if ((rc = nng_req0_open(&s)) != 0) {
		snprintf(err, errlen, "nng: %s", nng_strerror(rc));
		return MORI_ECONN;
	}
	nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, timeout_ms);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, timeout_ms);
	nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	struct stat st;
	if (!strncmp(url, "ipc://", 6) && stat(url + 6, &st) != 0) {
		/* nobody there is said at once; a daemon that does not answer (stopped) is found by the
		 * deadline below (nng's blocking dial would wait 10 s for its handshake). No probing
		 * connect: nng 1.5's own listeners stop accepting after one (nanomsg/nng#1518). */
		snprintf(err, errlen, "no daemon answers at %s: %s", url, strerror(errno));
		goto out;
	}
	if ((rc = nng_dial(s, url, NULL, NNG_FLAG_NONBLOCK)) != 0) {
		snprintf(err, errlen, "no daemon answers at %s: %s", url, nng_strerror(rc));
		goto out;
	}
	size_t len = mori__request__get_packed_size(req);
	if ((rc = nng_msg_alloc(&m, len)) != 0) {
		ret = MORI_ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	mori__request__pack(req, nng_msg_body(m));
	if ((rc = nng_sendmsg(s, m, 0)) != 0) {
		nng_msg_free(m);
		if (rc == NNG_ETIMEDOUT)
			snprintf(err, errlen, "no daemon answers at %s within %d ms", url, timeout_ms);
		else
			snprintf(err, errlen, "send to %s: %s", url, nng_strerror(rc));
		ret = rc == NNG_ETIMEDOUT ? MORI_ETIMEDOUT : MORI_ECONN;
		goto out;
	}
	if ((rc = nng_recvmsg(s, &m, 0)) != 0) {
		snprintf(err, errlen, "no reply from %s within %d ms: %s", url, timeout_ms, nng_strerror(rc));
		ret = rc == NNG_ETIMEDOUT ? MORI_ETIMEDOUT : MORI_ECONN;
		goto out;
	}
	*rep = mori__reply__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
	nng_msg_free(m);
	if (!*rep) {
		snprintf(err, errlen, "malformed reply from %s", url);
		ret = MORI_EPROTO;
		goto out;
	}
	ret = MORI_OK;
out:
	/* bounded: a control client under load could otherwise hang in nng 1.5.2's close deadlock
	 * after its answer came */
	svc_nng_close(s, 1000, url);
	return ret;
}
