/* A PE's heap as a region of morid's registry, and its control page (MORI-SHMEM).
 *
 * HOST heaps are a memfd morid makes (sealed against shrinking and growing); VRAM heaps are the
 * PE's VMM allocation, whose POSIX fd the PE hands over. Either way the region is owned by the
 * PE's client (so that cross-node transfers from it work as from any region), and the group
 * keeps a duplicate of the fd for its whole life: the memory stays alive while any PE of the
 * node may still reach it (for VRAM, a process holding the fd keeps the allocation alive).
 *
 * The control page (common/shmem_layout.h) is a memfd too: struct mori_shmem_ctrl in the first
 * 4 KiB, then the proxy ring. morid maps it, the PE maps it (and registers it with the GPU for
 * VRAM heaps). Only morid writes the abort word. */
#ifndef MORID_HEAP_H
#define MORID_HEAP_H
#include "region/registry.h"
#include "shmem_layout.h"

struct heap_ctrl {
	int fd;                        /* -1 when none */
	struct mori_shmem_ctrl *page;  /* morid's mapping */
	size_t len;
	uint32_t entries;              /* proxy ring entries (a power of two) */
};

/* A HOST heap of size bytes for client c: the region (owned by c) in *out and a duplicate of
 * its memfd in *fd (the caller's). 0 or a MORI_E* code with the reason in msg. */
int heap_host_new(struct morid *d, struct client *c, uint64_t size, struct region **out, int *fd,
		  char *msg, size_t len);
/* A VRAM heap: fd is the PE's VMM allocation (the region owns it from here, failure included),
 * blob its gpu_vmm_blob, addr its device address in the PE, device the PE's ordinal. */
int heap_vram_new(struct morid *d, struct client *c, uint64_t size, int fd, const void *blob, size_t bloblen,
		  uint64_t addr, int device, struct region **out, int *dupfd, char *msg, size_t len);
/* A control page with a ring of `entries` requests. 0 or MORI_ESYS/MORI_ENOMEM. */
int heap_ctrl_new(struct heap_ctrl *k, uint32_t entries, char *msg, size_t len);
void heap_ctrl_free(struct heap_ctrl *k);
/* Set the abort word (why: enum mori_shmem_abort), once: the first reason sticks. abort_pe is
 * stored before the word (release), so whoever sees the word sees the PE. */
void heap_ctrl_abort(struct heap_ctrl *k, uint32_t why, int32_t pe);
/* Close a duplicate fd heap_host_new / heap_vram_new gave. */
void heap_fd_close(int fd);
/* Descriptors morid may still take for heaps (RLIMIT_NOFILE less what sessions need). */
int heap_fds_left(struct morid *d, char *msg, size_t len);
#endif
