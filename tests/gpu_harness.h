/* Helpers shared by the GPU tests (tests/test_gpu_*.c): the skip probe, MPS for several processes
 * on one GPU, random batches with non-overlapping destinations, and a host model to check every
 * byte against. */
#ifndef MORI_GPU_HARNESS_H
#define MORI_GPU_HARNESS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../kernels/mori_copy.h"
#include "../libclient/gpu_int.h"
#include "harness.h"

/* Exit 77 ("skipped: ...") unless a GPU is usable here and, with need_copy, the copy kernel for
 * it. The probe runs in a child so that this process never initialises the driver: Check then
 * forks each test (and the SHMEM tests fork PEs), and a CUDA context does not survive fork. */
static inline void gpu_skip_unless(int need_copy)
{
	int p[2];
	if (pipe(p) != 0)
		exit(1);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		static mori_client c;
		close(p[0]);
		if (!gpu_api()) {
			dprintf(p[1], "no GPU (%s)", gpu_unavailable_reason());
			_exit(77);
		}
		if (!need_copy) {
			dprintf(p[1], "ok");
			_exit(0);
		}
		gpu_function fn;
		int sm, rc = gpu_copy_kernel(&c, 0, &fn, &sm);
		dprintf(p[1], "%s", rc ? mori_client_last_error(&c) : "ok");
		_exit(rc == MORI_ENOKERNEL ? 77 : rc ? 1 : 0);
	}
	close(p[1]);
	char msg[300] = "";
	ssize_t n = read(p[0], msg, sizeof(msg) - 1);
	msg[n > 0 ? n : 0] = 0;
	close(p[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
		printf("skipped: %s\n", msg);
		exit(77);
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "GPU probe failed: %s\n", msg);
		exit(1);
	}
}

static inline void gpu_skip_unless_ready(void) { gpu_skip_unless(1); }

/* In a process that starts the driver (a forked PE or rank): the driver's table with device
 * ordinal's primary context current on this thread, or NULL (gpu_unavailable_reason() says why). */
static inline const struct gpu_api *gpu_ctx_current(int ordinal)
{
	const struct gpu_api *g = gpu_api();
	gpu_device dev;
	gpu_context ctx;
	if (!g || g->device_get(&dev, ordinal) || g->primary_ctx_retain(&ctx, dev) || g->ctx_push_current(ctx))
		return NULL;
	return g;
}

/* ---- MPS: kernels of different processes run concurrently on one GPU only under it ---- */

static char gpu_mps_pipe[64], gpu_mps_log[64];
static pid_t gpu_mps_owner;

static inline void gpu_mps_stop(void)
{
	if (!gpu_mps_pipe[0] || getpid() != gpu_mps_owner)
		return; /* Check's forked test processes inherit the atexit handler: only main's quits */
	FILE *f = popen("nvidia-cuda-mps-control", "w");
	if (f) {
		fputs("quit\n", f);
		pclose(f);
	}
}

/* Our own MPS control daemon (own pipe and log directories, /tmp/mori-mps-{pipe,log}.<pid>; quit
 * at exit), unless the caller gave one ($CUDA_MPS_PIPE_DIRECTORY). Call before any process here
 * starts the driver. Returns what happened, for the test's output ("MPS on: ...", "MPS off: why"). */
static inline const char *gpu_mps_start(void)
{
	if (getenv("CUDA_MPS_PIPE_DIRECTORY"))
		return "MPS on: the caller's daemon";
	if (system("command -v nvidia-cuda-mps-control >/dev/null 2>&1") != 0)
		return "MPS off: no nvidia-cuda-mps-control; kernels of the PEs time-slice";
	snprintf(gpu_mps_pipe, sizeof(gpu_mps_pipe), "/tmp/mori-mps-pipe.%d", (int)getpid());
	snprintf(gpu_mps_log, sizeof(gpu_mps_log), "/tmp/mori-mps-log.%d", (int)getpid());
	mkdir(gpu_mps_pipe, 0700);
	mkdir(gpu_mps_log, 0700);
	setenv("CUDA_MPS_PIPE_DIRECTORY", gpu_mps_pipe, 1);
	setenv("CUDA_MPS_LOG_DIRECTORY", gpu_mps_log, 1);
	if (system("nvidia-cuda-mps-control -d") != 0) {
		gpu_mps_pipe[0] = 0;
		unsetenv("CUDA_MPS_PIPE_DIRECTORY");
		unsetenv("CUDA_MPS_LOG_DIRECTORY");
		return "MPS off: its control daemon did not start";
	}
	gpu_mps_owner = getpid();
	atexit(gpu_mps_stop);
	return "MPS on: own control daemon";
}

/* The start of main in a test whose forked processes share the GPU (test_gpu_shmem, _shmem_proxy,
 * _cco): exit 77 ("skipped: ...") without a GPU or without the test's kernels (image_len 0: built
 * without nvcc); *n from $env where it names 2 to max, else left; MPS started for them. Returns
 * gpu_mps_start's note. This process never starts the driver (the probe runs in a child): the
 * processes are forked. */
static inline const char *gpu_procs_start(size_t image_len, const char *env, int *n, int max)
{
	gpu_skip_unless(0);
	if (!image_len) {
		printf("skipped: no test kernels (built without nvcc)\n");
		exit(77);
	}
	const char *e = getenv(env);
	if (e && atoi(e) >= 2 && atoi(e) <= max)
		*n = atoi(e);
	return gpu_mps_start();
}

/* In one of n processes sharing the GPU, before it starts the driver: an equal share of the SMs. */
static inline void gpu_mps_share(int n)
{
	char pct[16];
	snprintf(pct, sizeof(pct), "%d", 100 / (n > 0 ? n : 1));
	setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct, 1);
}

/* n descriptors moving bytes from a src region to a dst region: destination ranges never
 * overlap (one per slot of dst_size / n, in shuffled order), so the result is the same in
 * any copy order; sources may overlap. Half the batches keep offsets and lengths 16-byte
 * multiples (the vector path), the rest are arbitrary (heads, tails, narrow paths).
 * Writes fill (src_off, dst_off, len) triples. */
struct gpu_move { uint64_t src, dst, len; };

static inline void gpu_random_moves(uint64_t *seed, struct gpu_move *mv, size_t n, uint64_t src_size,
				    uint64_t dst_size, uint64_t maxlen)
{
	int aligned = test_rand(seed) & 1;
	uint64_t slot = dst_size / n;
	for (size_t i = 0; i < n; i++) {
		uint64_t cap = maxlen < slot ? maxlen : slot;
		if (cap > src_size)
			cap = src_size;
		uint64_t len = 1 + test_rand(seed) % cap;
		uint64_t dst = slot * i + test_rand(seed) % (slot - len + 1);
		uint64_t src = test_rand(seed) % (src_size - len + 1);
		if (aligned && len >= 16) {
			uint64_t l2 = len & ~15ull, d2 = (dst + 15) & ~15ull, s2 = src & ~15ull;
			if (d2 + l2 > slot * (i + 1))
				d2 = (slot * i + 15) & ~15ull;
			if (d2 + l2 <= slot * (i + 1)) { /* else the slot is too small to align in */
				len = l2;
				dst = d2;
				src = s2;
			}
		}
		mv[i] = (struct gpu_move){src, dst, len};
	}
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = test_rand(seed) % (i + 1);
		struct gpu_move t = mv[i];
		mv[i] = mv[j];
		mv[j] = t;
	}
}

/* Descriptors for op: a write copies local -> remote, a read remote -> local. */
static inline void gpu_moves_to_descs(const struct gpu_move *mv, size_t n, int op, mori_desc *d)
{
	for (size_t i = 0; i < n; i++)
		d[i] = op == MORI_XFER_WRITE ? (mori_desc){mv[i].src, mv[i].dst, mv[i].len}
					   : (mori_desc){mv[i].dst, mv[i].src, mv[i].len};
}

static inline void gpu_model_apply(const struct gpu_move *mv, size_t n, const uint8_t *src, uint8_t *dst)
{
	for (size_t i = 0; i < n; i++)
		memcpy(dst + mv[i].dst, src + mv[i].src, mv[i].len);
}

/* First differing byte of two buffers, or -1. */
static inline long long gpu_first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	if (memcmp(a, b, n) == 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return (long long)i;
	return -1;
}

/* How many random batches a test runs: MORI_GPU_BATCHES overrides the default. */
static inline int gpu_batches(int dflt)
{
	const char *e = getenv("MORI_GPU_BATCHES");
	return e && atoi(e) > 0 ? atoi(e) : dflt;
}
#endif
