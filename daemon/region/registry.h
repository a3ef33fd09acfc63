/* The table of registered memory: regions owned by clients, their published names, and who has
 * opened them (so a freed region can be revoked at its openers). */
#ifndef MORID_REGISTRY_H
#define MORID_REGISTRY_H
#include "core/auth.h"
#include "core/morid.h"

struct gpu_vmm_range;

#define GPU_IPC_MAX 64
#define ACCESS_MAX 256            /* uids, and nodes, in one access list */

struct region {
	struct list link;         /* registry's table */
	struct list owner_link;   /* owner's regions */
	struct list openers;      /* struct open_ref.region_link */
	struct client *owner;
	uint64_t id;              /* random (61 bits), as is gen: neither is guessable, nor enough */
	uint32_t gen;
	uint8_t secret[REGION_SECRET_BYTES]; /* the capability a handle carries (auth.h) */
	uint32_t kind;
	uint64_t size;
	int fd;                   /* memfd/dma fd, owned by the region; -1 if none */
	uint64_t fd_offset;
	uint64_t addr;            /* owner's address (cross-memory attach) */
	pid_t pid;
	int pidfd;                /* that process (the owner's, borrowed: valid while !dead); -1 none */
	int pid_gone_logged;
	uid_t owner_uid;           /* the owner's uid at registration (cross-memory attach checks it) */
	uint32_t gpu_handle_type;
	uint8_t gpu_ipc[GPU_IPC_MAX];
	size_t gpu_ipc_len;
	int32_t gpu_device;
	char name[128];
	/* The name's grant (mori_mem_publish_access): without an access list (has_access 0) any
	 * allowed uid and any peer may look it up; with one, the owner, acl_uids and acl_nodes. */
	int has_access;
	uint32_t *acl_uids, nacl_uids;
	char **acl_nodes;
	uint32_t nacl_nodes;
	void *map;                /* region start in the daemon's own mapping (lazy, cross node) */
	void *map_base;           /* what to munmap */
	uint64_t map_len;
	uint64_t gpu_addr;        /* VRAM: region start in morid's own mapping (lazy, cross node); 0 none */
	uint64_t gpu_map_base;    /* what gpu_stage.c unmaps */
	uint64_t gpu_map_size;
	/* VRAM over several VMM allocations mapped back to back (GPU_HANDLE_POSIX_FDS, vmm.c): piece
	 * i is the allocation of vmm_fds[i] (owned here), vmm_len[i] bytes at vmm_off[i] of the span
	 * (gpu_ipc's version 2 blob). vmm_pending until the owner commits: nothing reaches it before. */
	uint32_t vmm_n, vmm_have;
	int vmm_pending;
	int *vmm_fds;
	uint64_t *vmm_off, *vmm_len;
	struct gpu_vmm_range *gpu_range; /* morid's own mapping of those pieces (gpu_stage.c) */
	uint32_t inflight;        /* daemon-side transfers touching it */
	int dead;                 /* removed; freed when inflight drops to 0 */
	/* Deregistration of memory reached by cross-memory attach waits until every opener has
	 * acknowledged the revocation (no copy of theirs can still be running), or a deadline. */
	uint32_t acks_pending;
	uint64_t *ack_from;       /* ids of the openers that still owe an acknowledgement */
	struct client *dereg_waiter;
	uint64_t dereg_req;
	uv_timer_t *ack_timer;
};

struct open_ref {
	struct list client_link;
	struct list region_link;
	struct client *client;
	struct region *region;
};

/* Told when a region is removed (before its openers are revoked and its name withdrawn), so
 * that a transport drops remote access to it at once. The listener's memory is the caller's. */
struct region_listener {
	struct list link;
	void (*removed)(void *arg, struct region *r);
	void *arg;
};

struct registry;
struct registry *registry_new(void);
void registry_listen(struct morid *d, struct region_listener *l);
void registry_unlisten(struct region_listener *l);
void registry_free(struct registry *g);
uint32_t registry_count(struct registry *g, uint64_t *bytes);
/* Regions registered now (not removed), every owner's: the figure node_max_regions caps. O(1). */
uint32_t registry_live(struct morid *d);

/* The registry owns fd from here (closed on failure too). */
struct region *region_add(struct morid *d, struct client *owner, uint32_t kind, uint64_t size,
			  int fd, uint64_t fd_offset, uint64_t addr);
struct region *region_find(struct morid *d, uint64_t id);
/* Remove: withdraw its name, revoke at openers (CQE_REVOKED), free when no transfer holds it. */
void region_remove(struct morid *d, struct region *r, const char *why);
int region_deregister(struct morid *d, struct client *c, struct region *r, uint64_t req_id);
void region_put(struct region *r); /* drop an inflight reference */
/* Publish r as name with its access list (has_access 0: anyone; copies uids and nodes). */
int region_publish(struct morid *d, struct region *r, const char *name, int has_access, const uint32_t *uids,
		   size_t nuids, char *const *nodes, size_t nnodes);
/* May uid on this node (owner_uid: the region's owner's) / peer `node` look r's name up? */
int region_grants_uid(const struct region *r, uid_t uid);
int region_grants_node(const struct region *r, const char *node);
/* The access list as moractl memory shows it ("all", "uids 1000,1001; nodes a:7100"). */
void region_access_text(const struct region *r, char *buf, size_t len);
/* Does a handle's secret (len bytes) match r's? Constant time. */
int region_secret_ok(const struct region *r, const uint8_t *secret, size_t len);
struct region *region_lookup(struct morid *d, const char *name);
int region_open(struct client *c, struct region *r);
/* Count of clients that opened r. */
uint32_t region_openers(struct region *r);
/* An opener acknowledged the revocation of region id. */
void region_revoke_ack(struct morid *d, struct client *c, uint64_t id);
/* Forget a client that was waiting on a deregistration (it died). */
void region_forget_waiter(struct morid *d, struct client *c);
/* Is c the owner of r or one of its openers? */
int region_reachable_by(struct region *r, struct client *c);
void region_close(struct client *c, struct region *r);
void client_drop_opens(struct client *c);
/* Make room for a region's n VMM pieces (it becomes pending). 0 or MORI_ENOMEM. */
int region_vmm_init(struct region *r, uint32_t n);
/* Append the next piece: the region owns fd from here (counted in registry_fds). */
void region_vmm_add(struct region *r, int fd, uint64_t off, uint64_t len);
/* Descriptors the regions hold (memfds, VMM fds): morid's main use of RLIMIT_NOFILE. */
uint32_t registry_fds(struct morid *d);
/* Iterate every region. */
struct region *region_next(struct morid *d, struct region *prev);
#endif
