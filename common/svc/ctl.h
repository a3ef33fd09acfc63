/* One request/reply on a daemon's nng control socket, with a deadline. Used by moractl and
 * the tests; never by libmori (nng does not survive fork), so it lives in common/svc/. */
#ifndef MORI_CTL_H
#define MORI_CTL_H
#include "mori.pb-c.h"

/* Send req to url ("ipc:///run/mori/morid.sock" or "tcp://host:port") and wait up to
 * timeout_ms for the reply. Returns MORI_OK with *rep (free with mori__reply__free_unpacked),
 * or MORI_ECONN / MORI_ETIMEDOUT / MORI_EPROTO with a reason in err. */
int ctl_call(const char *url, const Mori__Request *req, Mori__Reply **rep, int timeout_ms,
	     char *err, size_t errlen);
/* Make *req ask for kind, whose body is an empty message (status, config, reload, nics, topo,
 * diagnose, metrics: requests without arguments). body is that message's storage and must live
 * as long as req. A kind whose body has fields is a caller's bug: abort. */
void ctl_request_empty(Mori__Request *req, Mori__Request__BodyCase kind, ProtobufCMessage *body);
/* The control socket URL of a runtime dir. */
void ctl_url(char *buf, size_t len, const char *runtime_dir);
#endif
