/* A PE's heap as a region, and its control page (heap.h). */
#include "heap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gpu.h"
#include "log.h"

#define HEAP_FD_RESERVE 256 /* descriptors left for sessions, peers and the control socket */

static uint32_t held_fds; /* heap duplicates and control pages (one morid per process) */

int heap_fds_left(struct morid *d, char *msg, size_t len)
{
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur == RLIM_INFINITY)
		return MORI_OK;
	uint64_t used = (uint64_t)registry_fds(d) + held_fds + HEAP_FD_RESERVE;
	if (used + 4 <= (uint64_t)nofile.rlim_cur)
		return MORI_OK;
	snprintf(msg, len, "morid holds %u region and %u group descriptors, near its limit of %llu (raise LimitNOFILE)",
		 registry_fds(d), held_fds, (unsigned long long)nofile.rlim_cur);
	return MORI_ENOMEM;
}

static int dup_held(int fd)
{
	int k = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (k >= 0)
		held_fds++;
	return k;
}

static void close_held(int fd)
{
	if (fd < 0)
		return;
	close(fd);
	held_fds--;
}

int heap_host_new(struct morid *d, struct client *c, uint64_t size, struct region **out, int *fd,
		  char *msg, size_t len)
{
	*out = NULL;
	*fd = -1;
	/* Sealed: the PEs map it, and a file that shrank under them would SIGBUS them (and morid). */
	int m = memfd_create("mori-shmem-heap", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (m < 0 || ftruncate(m, (off_t)size) != 0 || fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
		int e = errno;
		if (m >= 0)
			close(m);
		snprintf(msg, len, "heap memfd of %llu bytes: %s", (unsigned long long)size, strerror(e));
		return e == ENOMEM || e == ENOSPC || e == EFBIG ? MORI_ENOMEM : MORI_ESYS;
	}
	int k = dup_held(m);
	if (k < 0) {
		snprintf(msg, len, "dup: %s", strerror(errno));
		close(m);
		return MORI_ESYS;
	}
	struct region *g = region_add(d, c, MORI_MEM_HOST, size, m, 0, 0); /* owns m */
	if (!g) {
		close_held(k);
		snprintf(msg, len, "out of memory");
		return MORI_ENOMEM;
	}
	*out = g;
	*fd = k;
	return MORI_OK;
}

int heap_vram_new(struct morid *d, struct client *c, uint64_t size, int fd, const void *blob, size_t bloblen,
		  uint64_t addr, int device, struct region **out, int *dupfd, char *msg, size_t len)
{
	*out = NULL;
	*dupfd = -1;
	struct gpu_vmm_blob b;
	if (fd < 0 || bloblen != sizeof(b) || !blob) {
		snprintf(msg, len, "a VRAM heap needs its VMM allocation's fd and gpu_vmm_blob (%zu bytes came)", bloblen);
		if (fd >= 0)
			close(fd);
		return MORI_EINVAL;
	}
	memcpy(&b, blob, sizeof(b));
	if (b.magic != GPU_VMM_MAGIC || b.version != 1 || b.alloc_size < size) {
		snprintf(msg, len, "the VRAM heap's allocation (%llu bytes) does not hold the heap's %llu",
			 (unsigned long long)b.alloc_size, (unsigned long long)size);
		close(fd);
		return MORI_EINVAL;
	}
	int k = dup_held(fd);
	if (k < 0) {
		snprintf(msg, len, "dup: %s", strerror(errno));
		close(fd);
		return MORI_ESYS;
	}
	struct region *g = region_add(d, c, MORI_MEM_VRAM, size, fd, 0, addr); /* owns fd */
	if (!g) {
		close_held(k);
		snprintf(msg, len, "out of memory");
		return MORI_ENOMEM;
	}
	g->gpu_handle_type = GPU_HANDLE_POSIX_FD;
	memcpy(g->gpu_ipc, &b, sizeof(b));
	g->gpu_ipc_len = sizeof(b);
	g->gpu_device = device;
	*out = g;
	*dupfd = k;
	return MORI_OK;
}

int heap_ctrl_new(struct heap_ctrl *k, uint32_t entries, char *msg, size_t len)
{
	memset(k, 0, sizeof(*k));
	k->fd = -1;
	k->entries = entries;
	k->len = MORI_SHMEM_CTRL_BYTES + (size_t)entries * sizeof(struct mori_shmem_preq);
	int m = memfd_create("mori-shmem-ctrl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (m < 0 || ftruncate(m, (off_t)k->len) != 0 ||
	    fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
		snprintf(msg, len, "control page memfd: %s", strerror(errno));
		if (m >= 0)
			close(m);
		return MORI_ESYS;
	}
	void *p = mmap(NULL, k->len, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
	if (p == MAP_FAILED) {
		snprintf(msg, len, "mmap control page: %s", strerror(errno));
		close(m);
		return MORI_ESYS;
	}
	k->fd = m;
	held_fds++;
	k->page = p;
	k->page->magic = MORI_SHMEM_MAGIC;
	k->page->ring_entries = entries;
	k->page->abort = MORI_SHMEM_ABORT_NONE;
	k->page->abort_pe = -1;
	return MORI_OK;
}

void heap_ctrl_free(struct heap_ctrl *k)
{
	if (k->page)
		munmap(k->page, k->len);
	close_held(k->fd);
	k->page = NULL;
	k->fd = -1;
}

void heap_ctrl_abort(struct heap_ctrl *k, uint32_t why, int32_t pe)
{
	if (!k->page || __atomic_load_n(&k->page->abort, __ATOMIC_ACQUIRE) != MORI_SHMEM_ABORT_NONE)
		return;
	k->page->abort_pe = pe;
	/* release: a GPU or host reader that sees the word (acquire, system scope) sees abort_pe */
	__atomic_store_n(&k->page->abort, why, __ATOMIC_RELEASE);
}

void heap_fd_close(int fd)
{
	close_held(fd);
}
