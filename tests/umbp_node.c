/* A UMBP client for the cross-node tests (tests/test_umbp_remote_netns.sh): puts values whose
 * bytes are a function of (seed, key index, offset) computed here, without libmori, and gets
 * them back from this node's store or another node's, checking every byte.
 *
 *   umbp_node RUNTIME_DIR put SEED N SIZE
 *   umbp_node RUNTIME_DIR get SEED N SIZE [NODE]   (NODE host:port: mori_umbp_batch_get_from;
 *                                                   none: mori_umbp_batch_get)
 *   umbp_node RUNTIME_DIR remove SEED N
 * Options after the command: --timeout-ms MS (the handle's deadline), --batch B (items per call,
 * default 16), --loop (get: again and again until an error, a miss or wrong bytes, for fault tests),
 * --part I/P (put: only the keys whose index is I modulo P, so that several nodes share one
 * key range), --no-verify (get: bytes not checked), --rounds R (get: the whole range R times),
 * --register (get: the buffers are registered with mori_umbp_register_memory first, so that values
 * from other nodes are written into them by morid), --memfd (get: the buffers are a shared mapping
 * of a memfd, which morid maps when they are registered, rather than malloc'd memory it reaches by
 * cross-memory attach); secs and gbps count the get calls alone.
 * Prints one line: "put N" / "get ok=A miss=M err=E bad=B first_error=CODE msg=..." and exits 0
 * when every byte that came back is right (misses and errors are counted, not failures: the
 * test decides what it expects), 1 on wrong bytes, 2 on usage or setup errors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "mori.h"
#include "mori_umbp.h"

static uint8_t byte_at(uint32_t seed, uint32_t k, uint64_t off)
{
	uint64_t x = ((uint64_t)seed << 40) ^ ((uint64_t)k << 20) ^ (off / 8);
	x ^= x >> 31;
	x *= 0x9e3779b97f4a7c15ull;
	x ^= x >> 29;
	return (uint8_t)(x >> (8 * (off % 8)));
}

static void key_of(char *buf, size_t cap, uint32_t seed, uint32_t k)
{
	snprintf(buf, cap, "umbp-node/%u/%u", seed, k);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: umbp_node RUNTIME_DIR put|get|remove SEED N [SIZE [NODE]] [options]\n");
		return 2;
	}
	const char *rt = argv[1], *cmd = argv[2], *node = NULL;
	uint32_t seed = (uint32_t)strtoul(argv[3], NULL, 0), n = (uint32_t)strtoul(argv[4], NULL, 0);
	uint64_t size = 0;
	int64_t timeout_ms = 0;
	uint32_t bmax = 16;
	int loop = 0, a = 5;
	uint32_t part = 0, parts = 1, rounds = 1;
	int verify = 1, reg = 0, memfd = 0;
	if (strcmp(cmd, "remove") != 0) {
		if (argc < 6) {
			fprintf(stderr, "umbp_node: %s needs SIZE\n", cmd);
			return 2;
		}
		size = strtoull(argv[5], NULL, 0);
		a = 6;
	}
	if (!strcmp(cmd, "get") && argc > a && argv[a][0] != '-')
		node = argv[a++];
	for (; a < argc; a++) {
		if (!strcmp(argv[a], "--timeout-ms") && a + 1 < argc)
			timeout_ms = strtoll(argv[++a], NULL, 0);
		else if (!strcmp(argv[a], "--batch") && a + 1 < argc)
			bmax = (uint32_t)strtoul(argv[++a], NULL, 0);
		else if (!strcmp(argv[a], "--part") && a + 1 < argc && sscanf(argv[a + 1], "%u/%u", &part, &parts) == 2 &&
			 parts > 0 && part < parts)
			a++;
		else if (!strcmp(argv[a], "--no-verify"))
			verify = 0;
		else if (!strcmp(argv[a], "--rounds") && a + 1 < argc)
			rounds = (uint32_t)strtoul(argv[++a], NULL, 0);
		else if (!strcmp(argv[a], "--loop"))
			loop = 1;
		else if (!strcmp(argv[a], "--register"))
			reg = 1;
		else if (!strcmp(argv[a], "--memfd"))
			memfd = 1;
		else {
			fprintf(stderr, "umbp_node: unknown option %s\n", argv[a]);
			return 2;
		}
	}
	if (n == 0 || bmax == 0 || rounds == 0 || (strcmp(cmd, "remove") && size == 0)) {
		fprintf(stderr, "umbp_node: N, SIZE and --batch must be positive\n");
		return 2;
	}
	mori_client *c = NULL;
	mori_umbp *u = NULL;
	mori_umbp_opts o;
	mori_umbp_opts_init(&o, sizeof(o));
	o.timeout_us = timeout_ms * 1000;
	int rc = mori_client_open(rt, "umbp_node", &c);
	if (rc == MORI_OK)
		rc = mori_umbp_open(c, &o, &u);
	if (rc != MORI_OK) {
		fprintf(stderr, "umbp_node: open %s: %s: %s\n", rt, mori_strerror(rc), c ? mori_client_last_error(c) : "");
		return 2;
	}
	char key[64];
	if (!strcmp(cmd, "remove")) {
		uint32_t gone = 0;
		for (uint32_t k = 0; k < n; k++) {
			key_of(key, sizeof(key), seed, k);
			gone += mori_umbp_remove(u, key, strlen(key)) == MORI_OK;
		}
		printf("removed %u\n", gone);
		mori_umbp_close(u);
		mori_client_close(c);
		return 0;
	}
	mori_umbp_item *it = calloc(bmax, sizeof(*it));
	char (*keys)[64] = calloc(bmax, 64);
	uint8_t *buf = NULL;
	if (memfd) {
		int fd = memfd_create("umbp_node", MFD_CLOEXEC);
		void *m = fd >= 0 && ftruncate(fd, (off_t)(size * bmax)) == 0
				  ? mmap(NULL, size * bmax, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
		if (fd >= 0)
			close(fd);
		buf = m == MAP_FAILED ? NULL : m;
	} else {
		buf = malloc(size * bmax);
	}
	if (!it || !keys || !buf) {
		fprintf(stderr, "umbp_node: out of memory\n");
		free(it), free(keys), memfd ? (void)(buf && munmap(buf, size * bmax)) : free(buf);
		return 2;
	}
	uint64_t ok = 0, miss = 0, err = 0, bad = 0, bytes = 0;
	int first_err = 0;
	char first_msg[256] = "";
	double t0 = now_s(), tget = 0;
	if (!strcmp(cmd, "put")) {
		for (uint32_t at = 0; at < n; at += bmax) {
			uint32_t m = 0;
			for (uint32_t k = at; k < n && k < at + bmax; k++) {
				if (k % parts != part)
					continue;
				key_of(keys[m], 64, seed, k);
				for (uint64_t off = 0; off < size; off++)
					buf[m * size + off] = byte_at(seed, k, off);
				it[m] = (mori_umbp_item){.key = {keys[m], strlen(keys[m])}, .buf = buf + m * size, .size = size,
							 .depth = (int32_t)k};
				m++;
			}
			if (m == 0)
				continue;
			rc = mori_umbp_batch_put(u, it, m, NULL);
			for (uint32_t i = 0; i < m; i++) {
				int s = rc != MORI_OK ? rc : it[i].status;
				if (s == MORI_OK)
					ok++;
				else if (err++ == 0)
					first_err = s, snprintf(first_msg, sizeof(first_msg), "%s", mori_client_last_error(c));
			}
		}
		printf("put %llu err=%llu first_error=%d msg=%s\n", (unsigned long long)ok, (unsigned long long)err,
		       first_err, first_msg);
		mori_umbp_close(u);
		mori_client_close(c);
		free(it), free(keys), memfd ? (void)(buf && munmap(buf, size * bmax)) : free(buf);
		return err ? 1 : 0;
	}
	if (reg && (rc = mori_umbp_register_memory(u, buf, size * bmax)) != MORI_OK) {
		fprintf(stderr, "umbp_node: register %llu bytes: %s: %s\n", (unsigned long long)(size * bmax),
			mori_strerror(rc), mori_client_last_error(c));
		return 2;
	}
	do {
		for (uint32_t at = 0; at < n; at += bmax) {
			uint32_t m = n - at < bmax ? n - at : bmax;
			for (uint32_t i = 0; i < m; i++) {
				key_of(keys[i], 64, seed, at + i);
				if (verify)
					memset(buf + i * size, 0xa5, size);
				it[i] = (mori_umbp_item){.key = {keys[i], strlen(keys[i])}, .buf = buf + i * size, .size = size};
			}
			double c0 = now_s();
			rc = node ? mori_umbp_batch_get_from(u, node, it, m, NULL) : mori_umbp_batch_get(u, it, m, NULL);
			tget += now_s() - c0;
			for (uint32_t i = 0; i < m; i++) {
				int s = rc != MORI_OK ? rc : it[i].status;
				if (s == MORI_ENOENT) {
					miss++;
					continue;
				}
				if (s != MORI_OK) {
					if (err++ == 0)
						first_err = s, snprintf(first_msg, sizeof(first_msg), "%s", mori_client_last_error(c));
					continue;
				}
				int wrong = it[i].len != size;
				for (uint64_t off = 0; verify && !wrong && off < size; off++)
					wrong = buf[i * size + off] != byte_at(seed, at + i, off);
				if (wrong) {
					bad++;
					fprintf(stderr, "umbp_node: key %u: wrong bytes (len %zu of %llu)\n", at + i, it[i].len,
						(unsigned long long)size);
				} else {
					ok++;
					bytes += size;
				}
			}
			if (loop && (err || bad || miss))
				break;
		}
	} while ((loop || --rounds) && !err && !bad && !miss);
	double dt = tget;
	(void)t0;
	printf("get ok=%llu miss=%llu err=%llu bad=%llu first_error=%d secs=%.3f gbps=%.3f msg=%s\n",
	       (unsigned long long)ok, (unsigned long long)miss, (unsigned long long)err, (unsigned long long)bad,
	       first_err, dt, dt > 0 ? (double)bytes / dt / 1e9 : 0.0, first_msg);
	if (reg && (rc = mori_umbp_deregister_memory(u, buf)) != MORI_OK)
		fprintf(stderr, "umbp_node: deregister: %s\n", mori_strerror(rc));
	mori_umbp_close(u);
	mori_client_close(c);
	free(it), free(keys), memfd ? (void)(buf && munmap(buf, size * bmax)) : free(buf);
	return bad ? 1 : 0;
}
