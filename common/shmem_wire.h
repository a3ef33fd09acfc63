/* What libmori and morid agree on for MORI-SHMEM's host protocol beyond the protobuf
 * messages (proto/mori.proto: GroupJoin, GroupCall, GroupLeave, PeerGroup): the collective
 * calls, the unique-id blob and the limits both sides check. */
#ifndef MORI_SHMEM_WIRE_H
#define MORI_SHMEM_WIRE_H
#include <stdint.h>
#include <stdio.h>

/* GroupCall.op: the collective calls every PE makes in the same order. */
enum shmem_call_op {
	SHMEM_CALL_MALLOC = 1,
	SHMEM_CALL_CALLOC = 2,
	SHMEM_CALL_FREE = 3,
	SHMEM_CALL_BARRIER = 4,
};

/* A collective's first barrier carries its arguments (GroupCall size: the count; align: this tag,
 * never 0), so that the root compares them as it compares malloc's: a rank whose call differs is
 * refused with every other, naming it, before any byte moves. kind: the values of
 * kernels/coll_kernels.h's MORI_COLL_K_* (libmori checks them at build time); dtype and op:
 * mori_dtype and mori_redop; root: the broadcast's. */
#define SHMEM_COLL_TAG (1ull << 63)
static inline uint64_t shmem_coll_tag(unsigned kind, unsigned dtype, unsigned op, int root)
{
	return SHMEM_COLL_TAG | (uint64_t)(kind & 0xff) | (uint64_t)(dtype & 0xff) << 8 | (uint64_t)(op & 0xff) << 16 |
	       (uint64_t)(uint32_t)root << 24;
}

/* "allreduce (one-shot)(count 100, float32, sum)" for a tagged barrier, "barrier_all" without. */
static inline void shmem_coll_describe(char *buf, size_t len, uint64_t count, uint64_t tag)
{
	static const char *const kinds[] = {"?", "barrier", "allreduce (one-shot)", "allreduce (two-shot)",
					    "reducescatter", "allgather", "alltoall", "broadcast", "alltoallv"};
	static const char *const dtypes[] = {"?", "uint8", "int32", "?", "?", "?", "float16", "float32", "?",
					     "bfloat16", "float8_e4m3"};
	static const char *const ops[] = {"sum", "?", "max", "min"};
	unsigned kind = tag & 0xff, dt = tag >> 8 & 0xff, op = tag >> 16 & 0xff;
	int root = (int)(uint32_t)(tag >> 24);
	if (!(tag & SHMEM_COLL_TAG)) {
		snprintf(buf, len, "barrier_all");
		return;
	}
	const char *k = kind < sizeof(kinds) / sizeof(kinds[0]) ? kinds[kind] : "?";
	const char *d = dt < sizeof(dtypes) / sizeof(dtypes[0]) ? dtypes[dt] : "?";
	if (kind == 2 || kind == 3 || kind == 4)
		snprintf(buf, len, "%s(count %llu, %s, %s)", k, (unsigned long long)count, d, op < 4 ? ops[op] : "?");
	else if (kind == 7)
		snprintf(buf, len, "%s(count %llu, %s, root %d)", k, (unsigned long long)count, d, root);
	else
		snprintf(buf, len, "%s(count %llu, %s)", k, (unsigned long long)count, d);
}

#define SHMEM_NAME_MAX 127            /* group names: 1..127 printable bytes, no space */
#define SHMEM_DEFAULT_TIMEOUT_MS 30000
#define SHMEM_MIN_ALIGN 256           /* malloc's alignment when the caller gives 0 */
#define SHMEM_ALLOC_GRAIN 64          /* sizes round up to this: objects never share a cache line */

/* The unique-id blob (mori_shmem_get_unique_id): magic, version, then two NUL-terminated
 * strings, the root daemon's peer address ("" when the group stays on one node) and the group
 * name; at most MORI_SHMEM_UID_BYTES (128) bytes in all. */
#define SHMEM_UID_MAGIC 0x4d554944u   /* "MUID" */
#define SHMEM_UID_VERSION 1
#endif
