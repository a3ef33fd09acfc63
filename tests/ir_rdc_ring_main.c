/* MORI-IR acceptance 4, the host half (the device half, and why two files: tests/ir_rdc_ring.cu).
 * One process is one PE of group "ir-rdc-ring" on VRAM heaps; tests/device-ir.sh starts N of them.
 *
 *   ir_rdc_ring RANK N [ROUNDS]     ($MORI_RUNTIME_DIR: morid's runtime directory; ROUNDS 1000)
 * Prints "PE r: ring ok ..." and exits 0, or says what failed and exits 1. */
#include <stdio.h>
#include <stdlib.h>

#include "mori_shmem.h"
#include "ir_rdc_ring.h"

#define MK(x)                                                                                            \
	do {                                                                                             \
		int r_ = (x);                                                                            \
		if (r_) {                                                                                \
			fprintf(stderr, "PE %d: %s: %s (%s)\n", me, #x, mori_strerror(r_),                 \
				mori_client_last_error(c));                                              \
			return 1;                                                                        \
		}                                                                                        \
	} while (0)

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s RANK N [ROUNDS]\n", argv[0]);
		return 2;
	}
	int me = atoi(argv[1]), n = atoi(argv[2]), rounds = argc > 3 ? atoi(argv[3]) : 1000;
	if (n < 1 || me < 0 || me >= n || rounds < 1) {
		fprintf(stderr, "bad RANK %d / N %d / ROUNDS %d\n", me, n, rounds);
		return 2;
	}
	mori_client *c = NULL;
	mori_group *g;
	MK(mori_client_open(NULL, "ir_rdc_ring", &c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_kind = MORI_MEM_VRAM;
	o.heap_size = 64u << 20;
	o.timeout_us = 60000000;
	o.root = getenv("IR_ROOT"); /* PEs split over two morids: the root's peer listener */
	MK(mori_shmem_init(c, "ir-rdc-ring", me, n, &o, &g));
	char err[256];
	if (ring_set_state(mori_shmem_state(g), err, sizeof(err))) {
		fprintf(stderr, "PE %d: %s\n", me, err);
		return 1;
	}
	void *dst, *src, *sig;
	MK(mori_shmem_calloc(g, (size_t)rounds * BLK, 0, &dst));
	MK(mori_shmem_calloc(g, (size_t)rounds * BLK, 0, &src));
	MK(mori_shmem_calloc(g, (size_t)rounds * 8, 0, &sig));
	MK(mori_shmem_barrier_all(g));
	struct result h;
	float ms = 0;
	unsigned *got = malloc((size_t)rounds * BLK);
	if (!got || ring_run((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, (uint64_t)(uintptr_t)sig, rounds, me, n,
			     &h, &ms, got, err, sizeof(err))) {
		fprintf(stderr, "PE %d: %s\n", me, got ? err : "no memory");
		return 1;
	}
	/* the host's own check of every word received */
	int prev = (me + n - 1) % n;
	size_t hbad = 0;
	for (int r = 0; r < rounds; r++)
		for (unsigned i = 0; i < WORDS; i++)
			hbad += got[(size_t)r * WORDS + i] != IR_RING_PATTERN(prev, r, i);
	free(got);
	int ok = h.bad == 0 && hbad == 0 && h.rc == 0 && h.who_pe == me && h.who_n == n;
	if (ok)
		printf("PE %d: ring ok: %d rounds x %u B from PE %d, every word checked on the GPU and the host; "
		       "%.2f us a round\n", me, rounds, BLK, prev, ms * 1000.0 / rounds);
	else
		printf("PE %d: ring FAIL: device bad words %u (first round %d), host bad words %zu, rc %d (%s) at round %d, "
		       "my_pe %d n_pes %d\n", me, h.bad, h.first_bad, hbad, h.rc, h.rc ? mori_strerror(h.rc) : "-",
		       h.rc_round, h.who_pe, h.who_n);
	MK(mori_shmem_barrier_all(g));
	MK(mori_shmem_free(g, sig));
	MK(mori_shmem_free(g, src));
	MK(mori_shmem_free(g, dst));
	mori_shmem_finalize(g);
	mori_client_close(c);
	return ok ? 0 : 1;
}
