/* libmori MORI-SHMEM: a group's status (the fork check, the abort word of its control page),
 * the holds of communicators and EP handles on it, and the local queries (PE, heap, offsets,
 * peer pointers). The bottom of the shmem files: shmem_rma.c, shmem_gpu.c and shmem.c use it. */
#include <stdlib.h>
#include <unistd.h>

#include "conv.h"
#include "shmem_int.h"

/* ---- status ---- */

int shmem_check(const mori_group *g)
{
	if (g && shmem_left(g))
		return set_error(NULL, MORI_ESTALE, "group '%s': this PE has left it; a communicator or EP handle on it can "
						    "only be destroyed", g->name);
	if (!g || !client_forked(g->c))
		return MORI_OK;
	return set_error(g->c, MORI_ESTALE, "group '%s' was joined by pid %d, used in pid %d: a child after fork "
					     "must open its own client and join its own group", g->name, (int)g->c->pid,
			 (int)getpid());
}

int shmem_abort_status(mori_group *g)
{
	uint32_t a = g->ctrl ? __atomic_load_n(&g->ctrl->abort, __ATOMIC_ACQUIRE) : 0;
	if (a == MORI_SHMEM_ABORT_NONE)
		return MORI_OK;
	int pe = g->ctrl->abort_pe;
	if (a == MORI_SHMEM_ABORT_PEER_DEAD)
		return set_error(g->c, MORI_EPEERDEAD, "group '%s': PE %d died; the group is aborted", g->name, pe);
	if (a == MORI_SHMEM_ABORT_TIMEOUT)
		return set_error(g->c, MORI_ETIMEDOUT, "group '%s': a collective call timed out (PE %d never made it); the "
						       "group is aborted", g->name, pe);
	return set_error(g->c, MORI_ECANCELED, "group '%s' is torn down%s", g->name,
			 pe >= 0 ? " (a PE left it)" : " (its root daemon, or this node's morid, went away)");
}

/* morid is gone (the session hung up): set each group's abort word (TEARDOWN, PE -1) unless it
 * is set already, so that waits on it end. */
void shmem_session_lost(mori_client *c)
{
	pthread_mutex_lock(&c->group_lock); /* a leaving group unlinks under it before it unmaps */
	for (mori_group *g = c->groups; g; g = g->next) {
		uint32_t none = MORI_SHMEM_ABORT_NONE;
		if (!g->ctrl || __atomic_load_n(&g->ctrl->abort, __ATOMIC_ACQUIRE) != none)
			continue; /* a reason morid gave stays */
		g->ctrl->abort_pe = -1;
		__atomic_compare_exchange_n(&g->ctrl->abort, &none, MORI_SHMEM_ABORT_TEARDOWN, 0, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&c->group_lock);
}

int mori_shmem_status(const mori_group *g, mori_status *out)
{
	if (!g)
		return status_set(out, MORI_EINVAL, -1, "NULL group");
	int rc = shmem_check(g);
	if (!rc)
		rc = shmem_abort_status((mori_group *)g); /* the detail goes to the client's last error */
	if (!rc)
		return status_set(out, MORI_OK, -1, "");
	int pe = rc != MORI_ESTALE && g->ctrl ? g->ctrl->abort_pe : -1;
	return status_set(out, rc, pe, mori_client_last_error(g->c));
}

/* ---- holds (communicators and EP handles on a group) ---- */

static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER; /* holds and left of every group */

void shmem_hold(mori_group *g)
{
	pthread_mutex_lock(&hold_mu);
	g->holds++;
	pthread_mutex_unlock(&hold_mu);
}

void shmem_release(mori_group *g)
{
	pthread_mutex_lock(&hold_mu);
	int last = --g->holds == 0 && g->left;
	pthread_mutex_unlock(&hold_mu);
	if (last)
		free(g); /* the shell: everything else went at the leave */
}

int shmem_left(const mori_group *g)
{
	return __atomic_load_n(&g->left, __ATOMIC_ACQUIRE);
}

/* After g's resources are gone: free it, or, while communicators or EP handles hold it, keep it
 * as a shell that says how it left. */
void shmem_free_or_shell(mori_group *g, int how)
{
	pthread_mutex_lock(&hold_mu);
	int keep = g->holds > 0;
	if (keep) {
		g->c = NULL; /* the client may close next; nothing on a shell reaches it */
		__atomic_store_n(&g->left, how, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&hold_mu);
	if (!keep)
		free(g);
}

/* ---- queries ---- */

int mori_shmem_my_pe(const mori_group *g) { return g ? g->my_pe : -1; }
int mori_shmem_n_pes(const mori_group *g) { return g ? g->n_pes : 0; }
void *mori_shmem_heap_base(const mori_group *g) { return g ? (void *)(uintptr_t)g->base : NULL; }
uint64_t mori_shmem_heap_size(const mori_group *g) { return g ? g->heap_size : 0; }

int mori_shmem_team_node(const mori_group *g, const int **pes, int *n)
{
	if (!g || !pes || !n)
		return MORI_EINVAL;
	*pes = g->team;
	*n = g->team_n;
	return MORI_OK;
}

int64_t mori_shmem_offset(const mori_group *g, const void *ptr)
{
	uint64_t a = (uint64_t)(uintptr_t)ptr;
	if (!g || a < g->base || a - g->base >= g->heap_size)
		return -1;
	return (int64_t)(a - g->base);
}

void *mori_shmem_ptr_p2p(const mori_group *g, const void *ptr, int pe)
{
	int64_t off = mori_shmem_offset(g, ptr);
	if (off < 0 || pe < 0 || pe >= g->n_pes || !g->peers[pe].local || !g->peers[pe].base)
		return NULL;
	return (void *)(uintptr_t)(g->peers[pe].base + (uint64_t)off);
}

__attribute__((constructor)) static void shmem_status_hooks(void) { client_on_session_lost(shmem_session_lost); }
