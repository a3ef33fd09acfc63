/* mori_umbp_clear in morid: a uid's values removed a slice of the index per loop turn (kv_int.h). */
#include <stdlib.h>

#include "kv/kv_int.h"
#include "mori.h"

/* A clear walks the index a slice a loop turn (an idle handle: other requests are served
 * between slices); values committed after it began stay. */
#define CLEAR_BUCKETS 16384

struct kv_clear {
	struct list link;
	struct kv_store *st;
	uid_t uid;
	uint64_t gen;
	struct kv_index_cursor cur;
	uint64_t n;
	kv_clear_cb done;
	void *arg;
};

struct kv_clearer {
	uv_idle_t h;
	struct list jobs;
};

static void clear_one(struct kv_entry *e, void *arg)
{
	struct kv_clear *j = arg;
	if (e->uid == j->uid && e->gen <= j->gen) {
		kv_entry_remove(j->st, e);
		j->n++;
	}
}

static void clear_turn(uv_idle_t *h)
{
	struct kv_store *st = h->data;
	struct kv_clearer *k = st->clearer;
	struct kv_clear *j = list_entry(k->jobs.next, struct kv_clear, link);
	if (!kv_index_walk(&st->idx, &j->cur, CLEAR_BUCKETS, clear_one, j))
		return;
	list_del(&j->link);
	if (k->jobs.next == &k->jobs)
		uv_idle_stop(&k->h);
	j->done(j->arg, MORI_OK, j->n);
	free(j);
}

int kv_clear(struct kv_store *st, uid_t uid, kv_clear_cb done, void *arg)
{
	if (st->closing)
		return MORI_ECANCELED;
	if (!st->clearer) {
		if (!(st->clearer = calloc(1, sizeof(*st->clearer))))
			return MORI_ENOMEM;
		LIST_INIT(&st->clearer->jobs);
		uv_idle_init(st->d->loop, &st->clearer->h);
		st->clearer->h.data = st;
	}
	struct kv_clear *j = calloc(1, sizeof(*j));
	if (!j)
		return MORI_ENOMEM;
	*j = (struct kv_clear){.st = st, .uid = uid, .gen = st->gen, .done = done, .arg = arg};
	if (st->clearer->jobs.next == &st->clearer->jobs)
		uv_idle_start(&st->clearer->h, clear_turn);
	list_add(&st->clearer->jobs, &j->link);
	return MORI_OK;
}

static void clearer_closed(uv_handle_t *h)
{
	free(h->data);
}

void kv_clear_stop(struct kv_store *st)
{
	struct kv_clearer *k = st->clearer;
	if (!k)
		return;
	st->clearer = NULL;
	list_each(it, &k->jobs) {
		struct kv_clear *j = list_entry(it, struct kv_clear, link);
		list_del(&j->link);
		j->done(j->arg, MORI_ECANCELED, j->n);
		free(j);
	}
	uv_idle_stop(&k->h);
	k->h.data = k;
	uv_close((uv_handle_t *)&k->h, clearer_closed);
}

