/* What libmori and morid agree on for MORI-SHMEM's host protocol beyond the protobuf
 * messages (proto/mori.proto: GroupJoin, GroupCall, GroupLeave, PeerGroup): the collective
 * calls, the unique-id blob and the limits both sides check. */
#ifndef MORI_SHMEM_WIRE_H
#define MORI_SHMEM_WIRE_H
#include <stdint.h>

/* GroupCall.op: the collective calls every PE makes in the same order. */
enum shmem_call_op {
	SHMEM_CALL_MALLOC = 1,
	SHMEM_CALL_CALLOC = 2,
	SHMEM_CALL_FREE = 3,
	SHMEM_CALL_BARRIER = 4,
	SHMEM_CALL_MATCH = 5, /* a barrier whose (align = tag, size, offset) must agree on every PE */
};

/* GroupCall.align of SHMEM_CALL_MATCH: what the matched call is, for the root's messages (a
 * mismatch or a deadline names it). */
enum shmem_match_tag {
	SHMEM_MATCH_CCO_WINDOW = 1,       /* mori_cco_window_register(heap offset, bytes) */
	SHMEM_MATCH_CCO_UNWINDOW = 2,     /* mori_cco_window_deregister(heap offset, bytes) */
	SHMEM_MATCH_CCO_DEV_COMM = 3,     /* mori_cco_dev_comm_create(resource bytes, requirements digest) */
};

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
