/* nng_close with a bound, for morid and the tools (common/svc/). */
#ifndef MORI_SVC_NNG_CLOSE_H
#define MORI_SVC_NNG_CLOSE_H
#include <nng/nng.h>

/* Close s, waiting at most wait_ms for nng_close to return. nng 1.5.2 (Debian 12) now and then
 * never returns from nng_close of a socket whose pipe is being torn down (nanomsg/nng#1543, #1813;
 * seen in morid's stop with proxy traffic, and in short-lived control clients under load). The
 * close runs on a thread of its own: one stuck past the bound is said (naming `what`) and left to
 * finish, or to die with the process, instead of hanging the caller. */
void svc_nng_close(nng_socket s, int wait_ms, const char *what);
#endif
