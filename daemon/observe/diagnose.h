/* moractl diagnose: checks of what mori needs from this node, each with a verdict and
 * a remedy: the GPU driver, VMM with POSIX-fd handles, P2P between GPUs, the MPS server,
 * RLIMIT_MEMLOCK of morid and of its clients, ptrace scope (cross-memory attach), RDMA devices,
 * port state, RoCEv2 GID, MTU, dmabuf, peer reachability, clock skew between peers, huge pages.
 * Loop thread (it reads the client and peer tables). */
#ifndef MORID_DIAGNOSE_H
#define MORID_DIAGNOSE_H

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
#endif
