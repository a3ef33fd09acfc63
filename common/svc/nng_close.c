/* A bounded nng_close (common/svc/nng_close.h): the close on a thread, the caller waiting at
 * most wait_ms for it. */
#include "nng_close.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"

struct nng_closer {
	nng_socket s;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done, refs; /* refs: the caller and the thread; the last to let go frees it */
};

static void closer_unref(struct nng_closer *c)
{
	pthread_mutex_lock(&c->lock);
	int last = --c->refs == 0;
	pthread_mutex_unlock(&c->lock);
	if (last) {
		pthread_mutex_destroy(&c->lock);
		pthread_cond_destroy(&c->cond);
		free(c);
	}
}

static void *closer_run(void *arg)
{
	struct nng_closer *c = arg;
	nng_close(c->s);
	pthread_mutex_lock(&c->lock);
	c->done = 1;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
	closer_unref(c);
	return NULL;
}

void svc_nng_close(nng_socket s, int wait_ms, const char *what)
{
	struct nng_closer *c = calloc(1, sizeof(*c));
	pthread_t t;
	pthread_condattr_t ca;
	if (!c) {
		nng_close(s); /* no memory for the bound: close unbounded */
		return;
	}
	c->s = s;
	c->refs = 2;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&c->lock, NULL);
	if (pthread_create(&t, NULL, closer_run, c) != 0) {
		c->refs = 1;
		closer_unref(c);
		nng_close(s);
		return;
	}
	pthread_detach(t);
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (wait_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L)
		until.tv_sec++, until.tv_nsec -= 1000000000L;
	pthread_mutex_lock(&c->lock);
	while (!c->done && pthread_cond_timedwait(&c->cond, &c->lock, &until) != ETIMEDOUT)
		;
	int done = c->done;
	pthread_mutex_unlock(&c->lock);
	if (!done)
		mlog_warn("nng", "closing %s: nng_close did not return within %d ms (nng 1.5.2's close deadlock, "
			  "nanomsg/nng#1543); left behind", what, wait_ms);
	closer_unref(c);
}

