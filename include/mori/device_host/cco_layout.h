/* MORI-CCO's types shared by the host API (include/mori_cco.h, libmori) and the device API
 * (include/mori/device/cco.cuh): the device communicator a kernel takes by value, a window's
 * device handle, teams, the GDA connection types and the layout of the resources a device
 * communicator holds in the communicator's heap. Plain C; the team functions compile for host
 * and device alike.
 *
 * Resources. mori_cco_dev_comm_create allocates one area of the heap (collectively: the same
 * offset on every rank) and zeroes it:
 *   signals   uint64_t [signal_count]            GDA signals: peers add to them, this rank waits
 *   counters  uint64_t [counter_count]           GDA counters: this rank's completed GDA puts
 *   lsa_bar   uint64_t [lsa_barrier_count] epoch, then uint64_t [lsa_barrier_count][lsa_size]
 *             inbox: peer p stores its generation into inbox[b][p] of every LSA peer
 *   rail_bar  the same with [rail team size + 1] inbox slots (by node), set through GDA
 *   bar       the same with [world_size] inbox slots (the world barrier), set through GDA
 * Every array starts on a 64-byte boundary; offsets are heap offsets (bytes from the heap's
 * start), so a peer's word is its heap base plus the same offset.
 *
 * Liveness. A device communicator names a slot of a process-wide table of 64-bit words (pinned
 * host memory the GPU maps, never freed while the process lives) and the generation that slot
 * holds while the device communicator and its communicator live. Destroying either changes the
 * word: every device call then returns MORI_ESTALE instead of touching memory that is gone, and
 * the host calls that take a device communicator refuse it the same way. */
#ifndef MORI_CCO_LAYOUT_H
#define MORI_CCO_LAYOUT_H
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MORI_CCO_HD __host__ __device__ inline
#elif defined(__CUDA__) /* clang -x cuda -nocudainc (MORI-IR's bitcode): no __host__ macro */
#define MORI_CCO_HD __attribute__((host, device)) inline
#else
#define MORI_CCO_HD static inline
#endif

#define MORI_CCO_MAGIC 0x4f43434du        /* "MCCO" */
#define MORI_CCO_VERSION 1
#define MORI_CCO_UID_BYTES 128
#define MORI_CCO_LIVE_SLOTS 512           /* device communicators one process holds at once */
/* The most of each resource one device communicator may ask for (more is MORI_EINVAL at create). */
#define MORI_CCO_MAX_SIGNALS 65536
#define MORI_CCO_MAX_COUNTERS 65536
#define MORI_CCO_MAX_BARRIERS 4096         /* each of lsa / rail / world barriers */
#define MORI_CCO_MAX_CE_QUEUES 64
#define MORI_CCO_ALIGN 64u

/* Which peers a device communicator reaches by GPU-initiated put/get/signal (ROCm/mori's
 * ccoGdaConnectionType, same numbers). Peers this rank load/stores (LSA) are reached directly
 * whatever the type; the others through morid's proxy (IBGDA where a NIC allows, later). */
typedef enum mori_cco_gda_connection {
	MORI_CCO_GDA_CONNECTION_NONE = 0,      /* no GDA: the GDA calls return MORI_ENOTSUP */
	MORI_CCO_GDA_CONNECTION_FULL = 1,      /* every peer, this node's included */
	MORI_CCO_GDA_CONNECTION_CROSSNODE = 2, /* the peers on other nodes (the default) */
	MORI_CCO_GDA_CONNECTION_RAIL = 3,      /* the peers of the same LSA rank on other nodes */
} mori_cco_gda_connection;

/* A rank subset (ROCm/mori's ccoTeam): world rank = comm rank + (team rank - rank) * stride.
 * rank is -1 for a team the caller is not in (cross-node, rail): convert with the team's own
 * function below. */
typedef struct mori_cco_team {
	int32_t n_ranks;
	int32_t rank;
	int32_t stride;
} mori_cco_team;

/* A window as kernels name it (passed by value): its heap offset and size, the same on every
 * rank. Offsets given with it are bytes from the window's start. */
typedef struct mori_cco_win {
	uint64_t off;
	uint64_t bytes;
} mori_cco_win;

/* The device communicator (ROCm/mori's ccoDevComm): trivially copyable, filled on the host by
 * mori_cco_dev_comm_create and passed by value into kernels. Addresses are as this process's
 * kernels (VRAM communicators) or threads (host-memory communicators) use them. Ranks are node-
 * major: this node's ranks are node_start .. node_start + lsa_size - 1. */
typedef struct mori_cco_dev_comm {
	uint32_t magic;              /* MORI_CCO_MAGIC */
	uint32_t version;            /* MORI_CCO_VERSION */
	int32_t rank, world_size;
	int32_t lsa_size, lsa_rank;  /* the ranks this one load/stores: this node's */
	int32_t node_start;          /* world rank of this node's LSA rank 0 */
	int32_t gda_connection_type; /* mori_cco_gda_connection */
	uint64_t heap_base;          /* this rank's heap */
	uint64_t heap_size;
	uint64_t shmem;              /* the group's struct mori_shmem_state (peers' heaps, abort word, proxy ring) */
	uint64_t ctrl;               /* its control page (the abort word) */
	uint64_t live;               /* uint64_t [MORI_CCO_LIVE_SLOTS]: the liveness table */
	uint32_t live_slot;
	uint32_t pad0;
	uint64_t live_gen;           /* live[live_slot] while this device communicator lives */
	uint64_t timeout_ns;         /* each device-side wait's deadline */
	int32_t signal_count, counter_count;
	int32_t lsa_barrier_count, rail_gda_barrier_count, barrier_count, ce_queue_count;
	uint64_t res_off, res_bytes; /* the resource area in the heap */
	uint64_t signal_off, counter_off, lsa_bar_off, rail_bar_off, bar_off;
	uint64_t ce_ctrl;            /* struct mori_cco_ce_ctrl [ce_queue_count], or 0 */
	uint64_t ce_ring;            /* struct mori_cco_ce_req [ce_queue_count][ce_entries], or 0 */
	uint32_t ce_entries;         /* entries of each queue's ring (a power of two) */
	uint32_t pad1;
} mori_cco_dev_comm;

/* A copy-engine request (64 bytes), as the device posts it and libmori's copy-engine server
 * takes it: `bytes` from src to dst (addresses of this process: own heap to an LSA peer's heap).
 * Queue q's ring is ce_ring + q * ce_entries entries; its head (claimed by the device) and done
 * (advanced by the server, in order, once the bytes landed) are ce_ctrl[q]'s. Both live in host
 * memory the GPU maps (a VRAM communicator's) or plain host memory (a host one's). Completion is
 * `done`: a kernel drains a queue, then tells the peer by a store or a GDA signal. */
struct mori_cco_ce_req {
	volatile uint64_t ready;     /* sequence + 1, stored last (release) */
	uint64_t dst, src, bytes;
	uint64_t pad[4];
};
struct mori_cco_ce_ctrl {
	volatile uint64_t head;      /* next sequence the device claims */
	uint8_t pad0[56];
	volatile uint64_t done;      /* requests the server completed, in order */
	volatile int32_t error;      /* its first failure's MORI_E* code */
	uint8_t pad1[52];
};

/* ---- teams (ROCm/mori's ccoTeamWorld / Lsa / CrossNode / Rail) ---- */
MORI_CCO_HD mori_cco_team mori_cco_team_world(const mori_cco_dev_comm *c)
{
	mori_cco_team t = {c->world_size, c->rank, 1};
	return t;
}
MORI_CCO_HD mori_cco_team mori_cco_team_lsa(const mori_cco_dev_comm *c)
{
	mori_cco_team t = {c->lsa_size, c->lsa_rank, 1};
	return t;
}
MORI_CCO_HD mori_cco_team mori_cco_team_cross_node(const mori_cco_dev_comm *c)
{
	mori_cco_team t = {c->world_size - c->lsa_size, -1, 1};
	return t;
}
/* The ranks of this LSA rank on the other nodes (every node has lsa_size ranks). */
MORI_CCO_HD mori_cco_team mori_cco_team_rail(const mori_cco_dev_comm *c)
{
	mori_cco_team t = {c->world_size / c->lsa_size - 1, -1, c->lsa_size};
	return t;
}
/* World rank of team rank r: world and LSA teams (and any team with rank >= 0). */
MORI_CCO_HD int mori_cco_team_rank_to_world(const mori_cco_dev_comm *c, mori_cco_team t, int r)
{
	return c->rank + (r - t.rank) * t.stride;
}
MORI_CCO_HD int mori_cco_cross_node_rank_to_world(const mori_cco_dev_comm *c, int r)
{
	return r < c->node_start ? r : r + c->lsa_size;
}
MORI_CCO_HD int mori_cco_rail_rank_to_world(const mori_cco_dev_comm *c, int r)
{
	int my_node = c->rank / c->lsa_size;
	int node = r < my_node ? r : r + 1;
	return node * c->lsa_size + c->lsa_rank;
}
/* Any team: rank >= 0 contiguous, else cross-node (stride 1) or rail. */
MORI_CCO_HD int mori_cco_team_to_world(const mori_cco_dev_comm *c, mori_cco_team t, int r)
{
	if (t.rank >= 0)
		return mori_cco_team_rank_to_world(c, t, r);
	return t.stride == 1 ? mori_cco_cross_node_rank_to_world(c, r) : mori_cco_rail_rank_to_world(c, r);
}
/* Whether world rank w is a load/store (LSA) peer of this rank. */
MORI_CCO_HD int mori_cco_is_lsa(const mori_cco_dev_comm *c, int w)
{
	return w >= c->node_start && w < c->node_start + c->lsa_size;
}
/* Whether the device communicator's GDA connection type lets it reach world rank w. */
MORI_CCO_HD int mori_cco_gda_reaches(const mori_cco_dev_comm *c, int w)
{
	if (w < 0 || w >= c->world_size)
		return 0;
	switch (c->gda_connection_type) {
	case MORI_CCO_GDA_CONNECTION_FULL: return 1;
	case MORI_CCO_GDA_CONNECTION_CROSSNODE: return !mori_cco_is_lsa(c, w);
	case MORI_CCO_GDA_CONNECTION_RAIL: return !mori_cco_is_lsa(c, w) && w % c->lsa_size == c->lsa_rank;
	default: return 0;
	}
}
#endif
