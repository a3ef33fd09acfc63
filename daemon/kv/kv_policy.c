/* Eviction policies of the KV store (kv_policy.h): LRU, a doubly linked list through the
 * entries' nodes, most recent at the head; victims are taken from the tail. "default" is LRU
 * until a measured better policy replaces it. */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_policy.h"

struct kv_policy {
	enum kv_policy_kind kind;
	uint64_t capacity;
	struct kv_pnode head; /* sentinel: head.next is the most recent, head.prev the least */
};

const char *kv_policy_name(enum kv_policy_kind kind)
{
	switch (kind) {
	case KV_POLICY_LRU:
		return "lru";
	case KV_POLICY_DEFAULT:
		return "default";
	}
	return "?";
}

int kv_policy_parse(const char *name)
{
	if (!name)
		return -1;
	for (int k = KV_POLICY_LRU; k <= KV_POLICY_DEFAULT; k++)
		if (!strcmp(name, kv_policy_name((enum kv_policy_kind)k)))
			return k;
	return -1;
}

struct kv_policy *kv_policy_new(enum kv_policy_kind kind, uint64_t capacity)
{
	struct kv_policy *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->kind = kind;
	p->capacity = capacity;
	p->head.prev = p->head.next = &p->head;
	return p;
}

void kv_policy_free(struct kv_policy *p)
{
	free(p);
}

static void unlink_node(struct kv_pnode *n)
{
	struct kv_pnode *a = n->prev, *b = n->next;
	if (!a)
		return;
	a->next = b;
	b->prev = a;
	n->prev = n->next = NULL;
}

static void push_head(struct kv_policy *p, struct kv_pnode *n)
{
	struct kv_pnode *first = p->head.next;
	n->prev = &p->head;
	n->next = first;
	first->prev = n;
	p->head.next = n;
}

void kv_policy_insert(struct kv_policy *p, struct kv_pnode *n, uint64_t hash, uint64_t bytes, int depth,
		      struct kv_pnode *parent)
{
	unlink_node(n);
	n->word[0] = bytes;
	n->word[1] = hash;
	push_head(p, n);
}

void kv_policy_hit(struct kv_policy *p, struct kv_pnode *n)
{
	if (!n->prev)
		return;
	unlink_node(n);
	push_head(p, n);
}

void kv_policy_remove(struct kv_policy *p, struct kv_pnode *n)
{
	unlink_node(n);
}

struct kv_pnode *kv_policy_victim(struct kv_policy *p, int (*skip)(struct kv_pnode *n, void *arg), void *arg)
{
	for (struct kv_pnode *n = p->head.prev; n != &p->head; n = n->prev)
		if (!skip || !skip(n, arg))
			return n;
	return NULL;
}

void kv_policy_evicted(struct kv_policy *p, struct kv_pnode *n)
{
	unlink_node(n);
}
