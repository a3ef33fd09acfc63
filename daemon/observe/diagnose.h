/* moractl diagnose: checks of what mori needs from this node, each with a verdict and
 * a remedy: the GPU driver, VMM with POSIX-fd handles, P2P between GPUs, the MPS server,
 * RLIMIT_MEMLOCK of morid and of its clients, ptrace scope (cross-memory attach), RDMA devices,
 * port state, RoCEv2 GID, MTU, dmabuf, peer reachability, clock skew between peers, huge pages.
 * Loop thread (it reads the client and peer tables). */
#ifndef MORID_DIAGNOSE_H
#define MORID_DIAGNOSE_H
#include <stdint.h>

struct morid;

/* Verdicts. SKIPPED: the check does not apply here (no GPU, no RDMA device, no peer); it
 * never counts as a problem. */
enum diag_verdict { DIAG_OK = 0, DIAG_WARNING = 1, DIAG_PROBLEM = 2, DIAG_SKIPPED = 3 };
const char *diag_verdict_name(int v); /* "ok", "warning", "problem", "skipped" */

struct diag_check {
	char name[24];
	int verdict;
	char detail[320];
	char remedy[320];
};

#define DIAG_MAX 24
/* Run every check into out[0..DIAG_MAX); returns how many. sysroot and procroot are "/sys" and
 * "/proc" (tests point them elsewhere). */
int diagnose_run(struct morid *d, const char *sysroot, const char *procroot, struct diag_check *out);

/* The KV store's SSD directory dir for a tier of bytes (0: 90 % of the free space): whether the
 * filesystem takes O_DIRECT, its free space, and a short sequential write probe (32 MiB in 1 MiB
 * writes and an fdatasync, in a file it deletes; it blocks the calling thread for as long). Fills
 * out[0..max) and returns how many: 3, or 1 when dir is missing or not writable. */
int diagnose_kv_ssd(const char *dir, uint64_t bytes, struct diag_check *out, int max);
#endif
