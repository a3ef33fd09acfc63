/* MORI-EP's network seam on the proxy morid serves (issue 14), no GPU: the contract the internode
 * kernels rely on (kernels/ep_internode.cu, seam_put_signal): a chunk sent as plain puts of a
 * piece size and a last put+signal SET, all in one ring to one PE, must be whole at that PE when
 * its signal shows the round, also when the ring interleaves the chunks to several PEs (the post
 * kernel's threads post for every destination at once) and when a chunk fits the signal's own
 * message (16 KiB or less) or needs transfers. Two morids on loopback (A the root, B), 4 forked
 * PEs with host heaps (0 and 2 on A, 1 and 3 on B), each sending one chunk a round to both PEs of
 * the other node with tests' host ring writer (common/shmem_ring_host.h, as the kernels write
 * the ring), waiting for both chunks from there, checking every byte against the sender's
 * pattern for that round, then an answer (a put+signal of its own) that frees the areas for the
 * next round, as combine does in EP. The piece size is scaled down (64 KiB, not the kernels'
 * 4 MiB) so that a chunk of a few pieces fits the test's heap. */
#include <check.h>
#include <sys/mman.h>

#include "harness.h"
#include "node_harness.h"
#include "pe_harness.h"
#include "mori.h"
#include "mori_shmem.h"
#include "shmem_layout.h"
#include "shmem_ring_host.h"

#define NPE 4
#define HEAP (8u << 20)
#define PIECE (64u << 10)
#define MAXCHUNK (5 * PIECE)
#define STAGE_OFF (1u << 20)            /* + dst slot x MAXCHUNK: my outgoing chunks */
#define LAND_OFF (3u << 20)             /* + src slot x MAXCHUNK: the chunks landed here */
#define SIG_OFF (6u << 20)              /* + src x 8: chunk of round r landed (SET r) */
#define ACK_OFF (SIG_OFF + 4096)        /* + src x 8: src checked my chunk of round r (SET r) */
#define ROUNDS 300

static struct test_node NA, NB;

struct shared {
	char msg[NPE][PE_MSG_LEN];
	long long checked[NPE], inline_rounds[NPE];
	double us_per_round[NPE];
};
static struct shared *SH;

static void setup(void)
{
	pe_shared_map(SH);
	node_pair_init(&NA, &NB, "epseam", 7250, 0);
	ck_assert_int_eq(node_pair_start(&NA, &NB, NULL), 0);
}

static void teardown(void)
{
	usleep(300000); /* as test_shmem_proxy: the last group messages answered before the stop */
	int rc = node_pair_stop(&NA, &NB);
	pe_shared_unmap(SH);
	ck_assert_msg(rc == 0, "morid did not stop cleanly (above: which, and its log)");
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}
/* Bytes of the chunk from src to dst in round r: 1 B..16 KiB (one message with its signal) in a
 * third of the rounds, else 1 to 5 pieces, the last one partial. */
static uint64_t chunk_len(int src, int dst, int r)
{
	uint64_t h = mix((uint64_t)src << 40 | (uint64_t)dst << 32 | (uint64_t)r);
	if (h % 3 == 0)
		return 1 + (h >> 8) % (16u << 10);
	return (h >> 8) % 5 * PIECE + 1 + (h >> 24) % PIECE;
}
static uint8_t pattern(int src, int dst, int r, uint64_t i)
{
	return (uint8_t)(mix((uint64_t)src * 1000003u + (uint64_t)dst * 7919u + (uint64_t)r) + i * 131u);
}

static int pe_main(int me, int n, void *arg)
{
	(void)arg;
	mori_client *c;
	mori_group *g;
	POK(me, mori_client_open(me & 1 ? NB.dir : NA.dir, "seam-pe", &c));
	mori_shmem_opts o;
	mori_shmem_opts_init(&o, sizeof(o));
	o.heap_size = HEAP;
	o.root = NA.addr;
	o.timeout_us = 20000000;
	POK(me, mori_shmem_init(c, "ep-seam", me, n, &o, &g));
	struct mori_shmem_state *st = mori_shmem_state(g);
	uint8_t *heap = mori_shmem_heap_base(g);
	PCHECK(me, st && st->ctrl && st->ring, "no ring");
	const struct shmem_ring_pe R = {.ctrl = st->ctrl, .ring = st->ring, .heap = heap, .my_pe = me, .wait_us = 15000000};
	const int peers[2] = {(me & 1) ? 0 : 1, (me & 1) ? 2 : 3}; /* the other node's PEs */
	POK(me, mori_shmem_barrier_all(g));
	const uint64_t t0 = shmem_ring_now_us();
	for (int r = 1; r <= ROUNDS; r++) {
		/* stage both chunks, then post them interleaved: piece k to each peer, then the signals */
		uint64_t len[2];
		for (int j = 0; j < 2; j++) {
			len[j] = chunk_len(me, peers[j], r);
			uint8_t *s = heap + STAGE_OFF + (uint64_t)j * MAXCHUNK;
			for (uint64_t i = 0; i < len[j]; i++)
				s[i] = pattern(me, peers[j], r, i);
			SH->inline_rounds[me] += len[j] <= (16u << 10);
		}
		__atomic_thread_fence(__ATOMIC_RELEASE); /* the staged bytes before the ring entries */
		for (uint64_t o2 = 0;; o2 += PIECE) {
			int more = 0;
			for (int j = 0; j < 2; j++) {
				if (len[j] <= o2)
					continue;
				const uint64_t src = STAGE_OFF + (uint64_t)j * MAXCHUNK + o2;
				const uint64_t dst = LAND_OFF + (uint64_t)(me >> 1) * MAXCHUNK + o2; /* my slot at the peer */
				if (len[j] - o2 > PIECE) {
					POK(me, shmem_ring_post(&R, MORI_SHMEM_OP_PUT, 0, 0, peers[j], dst, src, PIECE, 0, 0, 0, NULL));
					more = 1;
				} else {
					POK(me, shmem_ring_post(&R, MORI_SHMEM_OP_PUT_SIGNAL, MORI_SHMEM_SIGNAL_SET, 8, peers[j], dst,
								src, len[j] - o2, SIG_OFF + 8ull * (uint64_t)me, (uint64_t)r, 0, NULL));
				}
			}
			if (!more)
				break;
		}
		/* both chunks of this round from the other node, whole at their signal */
		for (int j = 0; j < 2; j++) {
			const int s = peers[j];
			POK(me, shmem_ring_wait_ge(&R, SIG_OFF + 8ull * (uint64_t)s, (uint64_t)r));
			PCHECK(me, __atomic_load_n((uint64_t *)(heap + SIG_OFF + 8ull * (uint64_t)s), __ATOMIC_ACQUIRE) == (uint64_t)r,
			       "round %d: the signal of PE %d is past the round", r, s);
			const uint64_t l = chunk_len(s, me, r);
			const uint8_t *d = heap + LAND_OFF + (uint64_t)(s >> 1) * MAXCHUNK;
			for (uint64_t i = 0; i < l; i++)
				PCHECK(me, d[i] == pattern(s, me, r, i),
				       "round %d: byte %llu of %llu from PE %d not there at its signal (%#x, want %#x)", r,
				       (unsigned long long)i, (unsigned long long)l, s, d[i], pattern(s, me, r, i));
			SH->checked[me]++;
		}
		/* the answers: each peer may reuse its staging and my landing slot once it has mine */
		for (int j = 0; j < 2; j++)
			POK(me, shmem_ring_post(&R, MORI_SHMEM_OP_PUT_SIGNAL, MORI_SHMEM_SIGNAL_SET, 8, peers[j],
						ACK_OFF + 1024 + 64ull * (uint64_t)me, ACK_OFF + 1024 + 64ull * (uint64_t)me, 16,
						ACK_OFF + 8ull * (uint64_t)me, (uint64_t)r, 0, NULL));
		for (int j = 0; j < 2; j++)
			POK(me, shmem_ring_wait_ge(&R, ACK_OFF + 8ull * (uint64_t)peers[j], (uint64_t)r));
	}
	SH->us_per_round[me] = (double)(shmem_ring_now_us() - t0) / ROUNDS;
	POK(me, shmem_ring_quiet(&R));
	POK(me, mori_shmem_barrier_all(g));
	mori_shmem_finalize(g);
	mori_client_close(c);
	return 0;
}

START_TEST(chunks_whole_at_their_signal)
{
	pe_run_all(NPE, pe_main, NULL, 120, 0);
	long long checked = 0, inl = 0;
	for (int i = 0; i < NPE; i++)
		checked += SH->checked[i], inl += SH->inline_rounds[i];
	ck_assert_int_eq(checked, 2LL * NPE * ROUNDS);
	printf("seam: %d PEs over 2 morids, %d rounds, each PE one chunk a round to each PE of the other node "
	       "(pieces of %u KiB then a put+signal, interleaved in the ring): %lld chunks whole at their signal "
	       "(%lld of them 16 KiB or less: in the signal's message); %.0f us a round (PE 0)\n",
	       NPE, ROUNDS, PIECE >> 10, checked, inl, SH->us_per_round[0]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ep_seam");
	TCase *t = tcase_create("proxy");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 150);
	tcase_add_test(t, chunks_whole_at_their_signal);
	suite_add_tcase(s, t);
	return run_suite(s);
}
