/* A small pool of threads for large same-node copies: one memcpy stream cannot fill the memory
 * bandwidth of a modern socket, a few can. Work is split by bytes, not by descriptors, so one
 * huge block and many tiny ones spread alike. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define MIN_SPLIT (1u << 20) /* below this a single thread is faster than waking others */
#define MAX_THREADS 8

struct job {
	const struct copy_op *ops;
	size_t n;
	uint64_t begin, end; /* byte range of the whole batch, in op order */
};

struct copy_pool {
	int nthreads;
	pthread_t th[MAX_THREADS];
	pthread_mutex_t run_lock; /* one batch at a time; a concurrent caller copies alone */
	pthread_mutex_t lock;
	pthread_cond_t go, done;
	struct job jobs[MAX_THREADS + 1];
	uint64_t generation;
	int remaining;
	int quit;
};

/* Copy bytes [begin, end) of the batch, counting across ops in order. */
static void run_job(const struct job *j)
{
	uint64_t pos = 0;
	for (size_t i = 0; i < j->n && pos < j->end; i++) {
		uint64_t a = pos, b = pos + j->ops[i].len;
		pos = b;
		if (b <= j->begin)
			continue;
		uint64_t lo = a < j->begin ? j->begin : a, hi = b < j->end ? b : j->end;
		memcpy(j->ops[i].dst + (lo - a), j->ops[i].src + (lo - a), hi - lo);
	}
}

static void *worker(void *arg)
{
	struct copy_pool *p = arg;
	pthread_mutex_lock(&p->lock);
	int me = -1;
	for (int i = 0; i < p->nthreads; i++)
		if (pthread_equal(p->th[i], pthread_self()))
			me = i;
	uint64_t seen = 0; /* not p->generation: a batch may have been posted before we ran */
	for (;;) {
		while (!p->quit && p->generation == seen)
			pthread_cond_wait(&p->go, &p->lock);
		if (p->quit)
			break;
		seen = p->generation;
		struct job j = p->jobs[me + 1];
		pthread_mutex_unlock(&p->lock);
		run_job(&j);
		pthread_mutex_lock(&p->lock);
		if (--p->remaining == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

struct copy_pool *copy_pool_new(int threads)
{
	struct copy_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	if (threads > MAX_THREADS)
		threads = MAX_THREADS;
	pthread_mutex_init(&p->run_lock, NULL);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	pthread_mutex_lock(&p->lock); /* workers look up their index under the lock */
	for (int i = 0; i < threads; i++) {
		if (pthread_create(&p->th[i], NULL, worker, p) != 0)
			break;
		p->nthreads++;
	}
	pthread_mutex_unlock(&p->lock);
	return p;
}

void copy_pool_free(struct copy_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->quit = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->th[i], NULL);
	free(p);
}

/* Whether an op's source and destination bytes intersect (a region used as both sides, or a
 * process's own published region opened again). */
static int overlaps(const struct copy_op *o)
{
	uintptr_t d = (uintptr_t)o->dst, s = (uintptr_t)o->src;
	return o->len && (d < s ? s - d : d - s) < o->len;
}

/* One thread, in order, memmove for an op whose sides overlap: split across threads, a chunk
 * would read bytes another chunk already overwrote. */
static void run_serial(const struct copy_op *ops, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (overlaps(&ops[i]))
			memmove(ops[i].dst, ops[i].src, ops[i].len);
		else
			memcpy(ops[i].dst, ops[i].src, ops[i].len);
	}
}

void copy_pool_run(struct copy_pool *p, const struct copy_op *ops, size_t n, uint64_t total)
{
	for (size_t i = 0; i < n; i++)
		if (overlaps(&ops[i])) {
			run_serial(ops, n);
			return;
		}
	int parts = p ? p->nthreads + 1 : 1;
	if ((uint64_t)parts > total / MIN_SPLIT)
		parts = (int)(total / MIN_SPLIT);
	if (parts <= 1 || pthread_mutex_trylock(&p->run_lock) != 0) {
		struct job j = {ops, n, 0, total};
		run_job(&j);
		return;
	}
	uint64_t chunk = (total + (uint64_t)parts - 1) / (uint64_t)parts;
	chunk = (chunk + 4095) & ~4095ull; /* page-aligned splits keep each thread's stores local */
	pthread_mutex_lock(&p->lock);
	for (int i = 0; i <= p->nthreads; i++) {
		uint64_t b = (uint64_t)i * chunk, e = b + chunk;
		p->jobs[i] = (struct job){ops, n, b < total ? b : total, e < total ? e : total};
	}
	p->remaining = p->nthreads;
	p->generation++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	run_job(&p->jobs[0]);
	pthread_mutex_lock(&p->lock);
	while (p->remaining > 0)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&p->run_lock);
}
