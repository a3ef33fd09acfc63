/* moractl diagnose's checks (see diagnose.h). Each check fills one struct diag_check; none
 * changes anything. Above the peer service (it reads the peer table) and the topology. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "diagnose.h"
#include "gpu.h"
#include "core/morid.h"
#include "peer/peer_int.h"
#include "pidfd.h"
#include "topo/rdma.h"
#include "topo/topology.h"

const char *diag_verdict_name(int v)
{
	static const char *const n[] = {"ok", "warning", "problem", "skipped"};
	return v >= 0 && v <= DIAG_SKIPPED ? n[v] : "?";
}

struct run {
	struct diag_check *out;
	int n;
	const char *sys, *proc;
	const struct gpu_api *g;
	struct rdma_nic *nics;
	int nnic;
	char nic_note[160];
};

static void add(struct run *R, const char *name, int verdict, const char *remedy, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void add(struct run *R, const char *name, int verdict, const char *remedy, const char *fmt, ...)
{
	if (R->n >= DIAG_MAX)
		return;
	struct diag_check *c = &R->out[R->n++];
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->verdict = verdict;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
	va_end(ap);
	snprintf(c->remedy, sizeof(c->remedy), "%s", verdict == DIAG_OK || verdict == DIAG_SKIPPED ? "" : remedy);
}

/* "unlimited" or the bytes, from a /proc/PID/limits line or a getrlimit value. */
static void limit_text(unsigned long long v, int unlimited, char *buf, size_t len)
{
	if (unlimited)
		snprintf(buf, len, "unlimited");
	else
		snprintf(buf, len, "%llu KiB", v / 1024);
}

/* ---- GPU ---- */

static void check_gpu(struct run *R)
{
	char desc[300];
	if (!R->g) {
		add(R, "gpu", DIAG_WARNING,
		    "install the NVIDIA driver (libcuda.so.1) or ROCm (libamdhip64.so) where the node has GPUs; "
		    "without one mori moves host memory only",
		    "no GPU: %s", gpu_unavailable_reason());
		return;
	}
	gpu_describe(desc, sizeof(desc));
	add(R, "gpu", DIAG_OK, "", "%s, %s", desc, R->g->library);
}

static void check_vmm(struct run *R)
{
	const struct gpu_api *g = R->g;
	if (!g) {
		add(R, "vmm", DIAG_SKIPPED, "", "no GPU");
		return;
	}
	if (!g->mem_create || !g->mem_export_to_shareable_handle || !g->device_get_attribute) {
		add(R, "vmm", g->device_get_attribute ? DIAG_PROBLEM : DIAG_SKIPPED,
		    "update the GPU driver (VMM with POSIX fd handles: CUDA 11.0 or later)",
		    "%s driver lacks cuMemCreate/cuMemExportToShareableHandle or attribute queries", g->name);
		return;
	}
	int bad = -1;
	for (int i = 0; i < g->device_count && bad < 0; i++) {
		int vmm = 0, fd = 0;
		g->device_get_attribute(&vmm, GPU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, i);
		g->device_get_attribute(&fd, GPU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FD_SUPPORTED, i);
		if (!vmm || !fd)
			bad = i;
	}
	if (bad >= 0)
		add(R, "vmm", DIAG_PROBLEM,
		    "VRAM from mori_mem_alloc and SHMEM heaps need VMM with POSIX fd handles: update the driver, or "
		    "register cudaMalloc memory (legacy IPC handles) instead",
		    "GPU %d: no VMM or no POSIX fd handle support", bad);
	else
		add(R, "vmm", DIAG_OK, "", "VMM and POSIX fd handles on all %d GPUs", g->device_count);
}

static void check_p2p(struct run *R, const struct topo *t)
{
	if (!t || t->ngpu < 2) {
		add(R, "p2p", DIAG_SKIPPED, "", "%s", t && t->ngpu == 1 ? "one GPU" : "no GPU");
		return;
	}
	char list[256] = "";
	size_t o = 0;
	int none = 0, unknown = 0;
	for (int a = 0; a < t->ngpu; a++)
		for (int b = 0; b < t->ngpu; b++) {
			int p = t->gg[a * t->ngpu + b].p2p;
			if (a == b || p == 1)
				continue;
			if (p < 0) {
				unknown++;
				continue;
			}
			none++;
			if (o < sizeof(list) - 16)
				o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%d->%d", o ? " " : "", a, b);
		}
	if (none)
		add(R, "p2p", DIAG_WARNING,
		    "same-node copies between these GPUs go through host memory: check the IOMMU/ACS settings "
		    "and that the GPUs share a PCIe switch or NVLink/XGMI (moractl topo)",
		    "no peer access: %s", list);
	else if (unknown)
		add(R, "p2p", DIAG_WARNING, "the driver does not report peer access: update it",
		    "peer access unknown for %d pairs", unknown);
	else
		add(R, "p2p", DIAG_OK, "", "peer access between all %d GPUs", t->ngpu);
}

/* Is a process with this command name running (scans procroot)? */
static int process_running(const char *proc, const char *comm)
{
	char p[300], name[64];
	int found = 0;
	DIR *dir = opendir(proc);
	if (!dir)
		return 0;
	struct dirent *e;
	while (!found && (e = readdir(dir))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(p, sizeof(p), "%s/%s/comm", proc, e->d_name);
		FILE *f = fopen(p, "re");
		if (f && fgets(name, sizeof(name), f)) {
			name[strcspn(name, "\n")] = 0;
			found = !strcmp(name, comm);
		}
		if (f)
			fclose(f);
	}
	closedir(dir);
	return found;
}

static void check_mps(struct run *R)
{
	if (!R->g || R->g->backend != GPU_BACKEND_CUDA) {
		add(R, "mps", DIAG_SKIPPED, "", "%s", R->g ? "not CUDA" : "no GPU");
		return;
	}
	const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
	char p[300];
	struct stat st;
	snprintf(p, sizeof(p), "%s/control", dir && dir[0] ? dir : "/tmp/nvidia-mps");
	int pipe = stat(p, &st) == 0, server = process_running(R->proc, "nvidia-cuda-mps-server"),
	    ctl = process_running(R->proc, "nvidia-cuda-mps-control");
	if (ctl || server || pipe)
		add(R, "mps", DIAG_OK, "", "MPS control daemon %s (pipe %s%s)%s", ctl ? "running" : "not seen", p,
		    pipe ? "" : ": absent", server ? ", server running" : "");
	else
		add(R, "mps", DIAG_WARNING,
		    "start it where several processes share a GPU: nvidia-cuda-mps-control -d (CUDA_MPS_PIPE_DIRECTORY and "
		    "CUDA_MPS_LOG_DIRECTORY the same for morid and the clients)",
		    "no MPS server: kernels of several processes on one GPU time-slice (device-side waits crawl)");
}

static void check_dmabuf(struct run *R)
{
	if (!R->g || !R->nnic) {
		add(R, "dmabuf", DIAG_SKIPPED, "", "%s", !R->g ? "no GPU" : "no RDMA device");
		return;
	}
	struct utsname u;
	int major = 0, minor = 0, v = 0;
	if (uname(&u) == 0)
		sscanf(u.release, "%d.%d", &major, &minor);
	int kernel = major > 5 || (major == 5 && minor >= 12);
	int verbs = dlsym(RTLD_DEFAULT, "ibv_reg_dmabuf_mr") != NULL;
	int drv = R->g->device_get_attribute &&
		  R->g->device_get_attribute(&v, GPU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 0) == 0 && v;
	char p[300];
	struct stat st;
	snprintf(p, sizeof(p), "%s/module/nvidia_peermem", R->sys);
	int peermem = stat(p, &st) == 0;
	if (kernel && verbs && drv)
		add(R, "dmabuf", DIAG_OK, "", "kernel %s, libibverbs and the GPU driver support dmabuf", u.release);
	else
		add(R, "dmabuf", peermem ? DIAG_OK : DIAG_WARNING,
		    "NICs reach VRAM (GPUDirect RDMA) through dmabuf (kernel 5.12+, rdma-core 34+, open GPU driver) or the "
		    "nvidia-peermem module (modprobe nvidia-peermem); without, VRAM is staged through host memory",
		    "dmabuf: kernel %s%s, libibverbs %s, GPU driver %s%s", u.release, kernel ? "" : " (< 5.12)",
		    verbs ? "yes" : "no", drv ? "yes" : "no", peermem ? "; nvidia-peermem loaded" : "");
}

/* ---- limits and kernel settings ---- */

static void check_memlock(struct run *R)
{
	struct rlimit rl;
	int usable = 0;
	for (int i = 0; i < R->nnic; i++)
		usable += R->nics[i].usable;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
		add(R, "memlock", DIAG_WARNING, "", "getrlimit failed");
		return;
	}
	char t[48];
	limit_text((unsigned long long)rl.rlim_cur, rl.rlim_cur == RLIM_INFINITY, t, sizeof(t));
	if (rl.rlim_cur == RLIM_INFINITY)
		add(R, "memlock", DIAG_OK, "", "morid: unlimited");
	else
		add(R, "memlock", usable ? DIAG_PROBLEM : DIAG_WARNING,
		    "LimitMEMLOCK=infinity in morid.service (the shipped unit sets it), or ulimit -l unlimited before "
		    "starting morid",
		    "morid: %s: RDMA registrations and pinned staging buffers%s are refused beyond it", t,
		    usable ? " (RDMA devices present)" : "");
}

/* The soft "Max locked memory" of pid from procroot, bytes; -1 unlimited, -2 unreadable. */
static long long proc_memlock(const char *proc, int pid)
{
	char p[300], line[256];
	snprintf(p, sizeof(p), "%s/%d/limits", proc, pid);
	FILE *f = fopen(p, "re");
	long long v = -2;
	while (f && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "Max locked memory", 17))
			continue;
		char soft[64];
		if (sscanf(line + 17, "%63s", soft) == 1)
			v = !strcmp(soft, "unlimited") ? -1 : atoll(soft);
		break;
	}
	if (f)
		fclose(f);
	return v;
}

static void check_client_memlock(struct run *R, struct morid *d)
{
	char low[256] = "";
	size_t o = 0;
	int n = 0, nlow = 0;
	list_each(it, &d->clients) {
		struct client *c = list_entry(it, struct client, link);
		long long v = proc_memlock(R->proc, (int)c->pid);
		n++;
		if (v == -1 || v == -2 || v >= (1ll << 30))
			continue;
		nlow++;
		if (o < sizeof(low) - 48)
			o += (size_t)snprintf(low + o, sizeof(low) - o, "%s%s (pid %d): %lld KiB", o ? ", " : "", c->name,
					      (int)c->pid, v / 1024);
	}
	if (!n)
		add(R, "client_memlock", DIAG_SKIPPED, "", "no client attached");
	else if (nlow)
		add(R, "client_memlock", DIAG_WARNING,
		    "raise the serving processes' limit: ulimit -l unlimited, LimitMEMLOCK= in their unit, docker run "
		    "--ulimit memlock=-1",
		    "%d of %d clients below 1 GiB: %s", nlow, n, low);
	else
		add(R, "client_memlock", DIAG_OK, "", "%d clients: 1 GiB or more", n);
}

static void check_ptrace(struct run *R)
{
	char p[300], b[16] = "";
	snprintf(p, sizeof(p), "%s/sys/kernel/yama/ptrace_scope", R->proc);
	FILE *f = fopen(p, "re");
	if (!f) {
		add(R, "ptrace_scope", DIAG_OK, "", "no Yama: cross-memory attach between same-uid processes works");
		return;
	}
	int v = fgets(b, sizeof(b), f) ? atoi(b) : -1;
	fclose(f);
	if (v == 0)
		add(R, "ptrace_scope", DIAG_OK, "", "kernel.yama.ptrace_scope = 0");
	else
		add(R, "ptrace_scope", v >= 3 ? DIAG_PROBLEM : DIAG_WARNING,
		    "register memory from mori_mem_alloc (memfd, no attach needed), or sysctl kernel.yama.ptrace_scope=0, "
		    "or give the clients CAP_SYS_PTRACE",
		    "kernel.yama.ptrace_scope = %d: cross-memory attach to memory a client registered itself is refused "
		    "between unrelated processes%s",
		    v, v >= 3 ? " (for good until reboot)" : "");
}

/* Does morid see a client's process exit (session.c takes a pidfd of each)? Without
 * pidfd_open a client lives as long as its session socket, which a forked child can hold. */
static void check_pidfd(struct run *R)
{
	int fd = pidfd_open_pid(getpid());
	if (fd >= 0) {
		close(fd);
		add(R, "pidfd", DIAG_OK, "", "pidfd_open works: a client ends when its process exits");
		return;
	}
	int e = errno;
	add(R, "pidfd", DIAG_WARNING,
	    "run Linux 5.3 or later; until then let no child of a client outlive it holding its session socket",
	    "pidfd_open: %s: a client lives as long as its session socket, so one whose child keeps that socket "
	    "outlives its process (regions, names and PEs stay; memory by cross-memory attach stays bound to a "
	    "pid that can be reused)", strerror(e));
}

static void check_hugepages(struct run *R)
{
	char p[300], line[128];
	long long total = -1, freep = -1, size = 0;
	snprintf(p, sizeof(p), "%s/meminfo", R->proc);
	FILE *f = fopen(p, "re");
	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "HugePages_Total: %lld", &total);
		sscanf(line, "HugePages_Free: %lld", &freep);
		sscanf(line, "Hugepagesize: %lld", &size);
	}
	if (f)
		fclose(f);
	if (total < 0)
		add(R, "hugepages", DIAG_SKIPPED, "", "no HugePages in %s", p);
	else if (total > 0 && freep == 0)
		add(R, "hugepages", DIAG_WARNING, "reserve more: sysctl vm.nr_hugepages=N",
		    "all %lld huge pages (%lld kB) in use", total, size);
	else
		add(R, "hugepages", DIAG_OK, "", "%lld free of %lld (%lld kB each)%s", freep, total, size,
		    total ? "" : "; none reserved (optional: staging buffers use normal pages)");
}

/* ---- RDMA ---- */

static void check_rdma(struct run *R)
{
	int usable = 0, active = 0, eth = 0, nogid = 0, lowmtu = 0;
	char down[200] = "", gid[200] = "", mtu[200] = "";
	size_t od = 0, og = 0, om = 0;
	if (!R->nnic) {
		add(R, "rdma", DIAG_WARNING,
		    "load the NIC driver and ib_uverbs/rdma_ucm, install rdma-core with the NIC's provider; without RDMA, "
		    "cross-node transfers use TCP",
		    "%s", R->nic_note[0] ? R->nic_note : "no RDMA devices");
		add(R, "ports", DIAG_SKIPPED, "", "no RDMA device");
		add(R, "roce_gid", DIAG_SKIPPED, "", "no RDMA device");
		add(R, "mtu", DIAG_SKIPPED, "", "no RDMA device");
		return;
	}
	for (int i = 0; i < R->nnic; i++) {
		const struct rdma_nic *e = &R->nics[i];
		usable += e->usable;
		active += e->active;
		if (!e->active && od < sizeof(down) - 40)
			od += (size_t)snprintf(down + od, sizeof(down) - od, "%s%s/%u %s", od ? ", " : "", e->device, e->port,
					       e->state);
		if (!strcmp(e->link_layer, "Ethernet")) {
			eth++;
			if (e->active && strcmp(e->gid_type, "RoCEv2") && og < sizeof(gid) - 40) {
				nogid++;
				og += (size_t)snprintf(gid + og, sizeof(gid) - og, "%s%s/%u (%s)", og ? ", " : "", e->device,
						       e->port, e->netdev[0] ? e->netdev : "no netdev");
			}
		}
		if (e->active && e->active_mtu && e->active_mtu < 4096 && om < sizeof(mtu) - 40) {
			lowmtu++;
			om += (size_t)snprintf(mtu + om, sizeof(mtu) - om, "%s%s/%u %u", om ? ", " : "", e->device, e->port,
					       e->active_mtu);
		}
	}
	add(R, "rdma", usable ? DIAG_OK : DIAG_PROBLEM, "see the ports, roce_gid and mtu checks (moractl nics)",
	    "%d ports, %d usable", R->nnic, usable);
	if (active == R->nnic)
		add(R, "ports", DIAG_OK, "", "all %d ports ACTIVE", R->nnic);
	else
		add(R, "ports", active ? DIAG_WARNING : DIAG_PROBLEM,
		    "check cables and the switch port; ip link set <netdev> up; for InfiniBand a subnet manager (opensm)",
		    "not active: %s", down);
	if (!eth)
		add(R, "roce_gid", DIAG_SKIPPED, "", "no Ethernet (RoCE) port");
	else
		add(R, "roce_gid", nogid ? DIAG_PROBLEM : DIAG_OK,
		    "give the port's netdev an IP address (ip addr add ... dev <netdev>): RoCEv2 GIDs follow its addresses",
		    nogid ? "no RoCEv2 GID: %s" : "every active Ethernet port has a RoCEv2 GID%s", nogid ? gid : "");
	add(R, "mtu", lowmtu ? DIAG_WARNING : DIAG_OK,
	    "raise the netdev MTU (ip link set <netdev> mtu 9000) for an RDMA MTU of 4096; on InfiniBand the "
	    "subnet manager's partition MTU",
	    lowmtu ? "active MTU below 4096: %s" : "active MTU 4096 on every active port%s", lowmtu ? mtu : "");
}

/* ---- peers ---- */

static void check_peers(struct run *R, struct morid *d)
{
	struct peers *P = d->peers;
	int n = 0, up = 0, skewed = 0, known = 0;
	long long worst = 0;
	char down[256] = "", skew[256] = "";
	size_t od = 0, os = 0;
	if (P)
		list_each(it, &P->peers) {
			struct peer *p = list_entry(it, struct peer, link);
			n++;
			up += p->state == PS_UP;
			/* down, or trying again after a failure (hello and connecting between retries) */
			int failing = p->state == PS_DOWN || (p->state != PS_UP && p->state != PS_IDLE && p->why[0]);
			if (failing && od < sizeof(down) - 64)
				od += (size_t)snprintf(down + od, sizeof(down) - od, "%s%s: %.80s", od ? "; " : "", p->addr,
						       p->why[0] ? p->why : "down");
			if (!p->clock_known)
				continue;
			known++;
			long long s = p->clock_skew_us < 0 ? -p->clock_skew_us : p->clock_skew_us;
			if (s > worst)
				worst = s;
			if (s > 100000 && os < sizeof(skew) - 64) {
				skewed++;
				os += (size_t)snprintf(skew + os, sizeof(skew) - os, "%s%s %+lld ms (+-%llu)", os ? ", " : "",
						       p->addr, (long long)p->clock_skew_us / 1000,
						       (unsigned long long)p->clock_rtt_us / 2000);
			}
		}
	if (!n) {
		add(R, "peers", DIAG_SKIPPED, "", "no peer daemons known (option peers, or none used yet)");
		add(R, "clock_skew", DIAG_SKIPPED, "", "no peer daemons known");
		return;
	}
	if (od)
		add(R, "peers", DIAG_PROBLEM,
		    "check that morid runs there and that its listen address is reachable from here (firewall, "
		    "advertise)",
		    "%d of %d not up: %s", n - up, n, down);
	else
		add(R, "peers", DIAG_OK, "", "%d known, %d up", n, up);
	if (!known)
		add(R, "clock_skew", DIAG_SKIPPED, "", "no hello answered yet");
	else if (skewed)
		add(R, "clock_skew", DIAG_WARNING,
		    "run chrony or systemd-timesyncd on every node (transfer deadlines are local, but logs and "
		    "traces of two nodes do not line up)",
		    "over 100 ms: %s", skew);
	else
		add(R, "clock_skew", DIAG_OK, "", "%d peers within 100 ms (largest %lld us)", known, worst);
}

/* ---- the KV store's SSD directory ---- */

#define SSD_PROBE_NAME ".mori-diagnose-probe"
#define SSD_PROBE_BYTES (32u << 20)
#define SSD_PROBE_CHUNK (1u << 20)

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Bytes the tier's segment files take already (they count as the tier's, not as used space). */
static uint64_t ssd_segment_bytes(const char *dir)
{
	uint64_t sum = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		struct stat sb;
		char p[4096];
		if (strncmp(e->d_name, "seg-", 4))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
			sum += (uint64_t)sb.st_blocks * 512;
	}
	if (d)
		closedir(d);
	return sum;
}

static void ssd_write_probe(struct run *R, int fd, int odirect)
{
	char *buf = mmap(NULL, SSD_PROBE_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		add(R, "kv_ssd_write_bw", DIAG_SKIPPED, "", "no memory for the probe");
		return;
	}
	memset(buf, 0x5a, SSD_PROBE_CHUNK);
	double t0 = mono_s();
	uint64_t done = 0;
	int e = 0;
	while (done < SSD_PROBE_BYTES && !e) {
		ssize_t w = pwrite(fd, buf, SSD_PROBE_CHUNK, (off_t)done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			e = w < 0 ? errno : EIO;
		else
			done += (uint64_t)w;
	}
	if (!e && fdatasync(fd) != 0)
		e = errno;
	double dt = mono_s() - t0;
	munmap(buf, SSD_PROBE_CHUNK);
	if (e) {
		add(R, "kv_ssd_write_bw", DIAG_PROBLEM, "free space in kv_ssd_dir's filesystem, or check the disk (dmesg)",
		    "writing %u MiB failed after %llu MiB: %s", SSD_PROBE_BYTES >> 20, (unsigned long long)(done >> 20),
		    strerror(e));
		return;
	}
	double mbs = dt > 0 ? (double)done / dt / 1e6 : 0;
	add(R, "kv_ssd_write_bw", mbs < 200 ? DIAG_WARNING : DIAG_OK,
	    "values spilled to SSD move no faster than this: put kv_ssd_dir on a local NVMe SSD",
	    "%.0f MB/s (%u MiB in 1 MiB %s writes and an fdatasync)", mbs, SSD_PROBE_BYTES >> 20,
	    odirect ? "O_DIRECT" : "buffered");
}

int diagnose_kv_ssd(const char *dir, uint64_t bytes, struct diag_check *out, int max)
{
	struct diag_check tmp[3];
	struct run R = {.out = tmp};
	char p[4096];
	snprintf(p, sizeof(p), "%s/" SSD_PROBE_NAME, dir);
	int odirect = 1;
	int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0600);
	if (fd < 0 && errno == EINVAL) {
		odirect = 0;
		fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	}
	if (fd < 0) {
		int e = errno;
		add(&R, "kv_ssd_dir", DIAG_PROBLEM,
		    e == ENOENT ? "create kv_ssd_dir, owned by morid's user, on a local SSD"
				: "make kv_ssd_dir writable by morid's user (and its filesystem read-write)",
		    "kv_ssd_dir %s: %s", dir, strerror(e));
	} else {
		if (odirect)
			add(&R, "kv_ssd_odirect", DIAG_OK, "", "%s takes O_DIRECT", dir);
		else
			add(&R, "kv_ssd_odirect", DIAG_WARNING,
			    "put kv_ssd_dir on a filesystem that takes O_DIRECT (ext4, xfs): buffered I/O keeps spilled "
			    "values in the page cache too",
			    "%s refuses O_DIRECT: the SSD tier falls back to buffered I/O", dir);
		struct statvfs vf;
		if (fstatvfs(fd, &vf) != 0) {
			add(&R, "kv_ssd_space", DIAG_WARNING, "check the filesystem", "statvfs: %s", strerror(errno));
		} else {
			uint64_t avail = (uint64_t)vf.f_bavail * vf.f_frsize, have = avail + ssd_segment_bytes(dir);
			if (bytes && bytes > have)
				add(&R, "kv_ssd_space", DIAG_WARNING,
				    "lower kv_ssd_bytes or free space: the tier fails writes when the filesystem fills first",
				    "kv_ssd_bytes %llu MiB, but only %llu MiB free (segments included)",
				    (unsigned long long)(bytes >> 20), (unsigned long long)(have >> 20));
			else
				add(&R, "kv_ssd_space", DIAG_OK, "", "%llu MiB free of %llu MiB; the tier takes %s%llu MiB",
				    (unsigned long long)(avail >> 20), (unsigned long long)((uint64_t)vf.f_blocks * vf.f_frsize >> 20),
				    bytes ? "" : "90 % of the free space: ",
				    (unsigned long long)((bytes ? bytes : have / 10 * 9) >> 20));
		}
		ssd_write_probe(&R, fd, odirect);
		close(fd);
		unlink(p);
	}
	int n = R.n < max ? R.n : max;
	memcpy(out, tmp, (size_t)n * sizeof(*out));
	return n;
}

int diagnose_run(struct morid *d, const char *sysroot, const char *procroot, struct diag_check *out)
{
	struct run R = {.out = out, .sys = sysroot, .proc = procroot, .g = gpu_api()};
	if (rdma_discover(&d->cfg, &R.nics, &R.nnic, R.nic_note, sizeof(R.nic_note)) != 0)
		R.nnic = 0;
	struct topo *t = NULL;
	topo_build(sysroot, R.g, "", R.nics, R.nnic, "", &t);
	check_gpu(&R);
	check_vmm(&R);
	check_p2p(&R, t);
	check_mps(&R);
	check_memlock(&R);
	check_client_memlock(&R, d);
	check_ptrace(&R);
	check_pidfd(&R);
	check_rdma(&R);
	check_dmabuf(&R);
	check_peers(&R, d);
	check_hugepages(&R);
	if (d->cfg.kv_ssd_dir[0] && R.n < DIAG_MAX)
		R.n += diagnose_kv_ssd(d->cfg.kv_ssd_dir, (uint64_t)d->cfg.kv_ssd_bytes, out + R.n, DIAG_MAX - R.n);
	topo_free(t);
	free(R.nics);
	return R.n;
}
