/* mori.h: the public API of libmori, the client library of the mori node service.
 *
 * A serving process (one per GPU) opens a client on the node's daemon (morid), registers the
 * memory that holds its KV cache, publishes it under a name or packs it into a blob, and moves
 * KV blocks to and from peers' registered memory with reads and writes. On the same node the
 * bytes move directly between the two processes' mappings (the daemon brokers the mapping, not
 * the bytes); across nodes the two daemons move them over their transports.
 *
 * The transfer model follows NIXL and ROCm/mori's IO engine: batches of (local offset, remote
 * offset, length) descriptors, prepared descriptor lists submitted by index (vLLM's NIXL
 * connector pattern), per-transfer status, and a 64-bit notification that reaches the target
 * process only after the data has landed.
 *
 * Conventions (every public header of libmori follows them):
 * - Errors: every function that can fail returns 0 (MORI_OK) or a negative MORI_E* code;
 *   mori_strerror() names it and mori_client_last_error() gives the detail of the client's last
 *   failure. Sizes and offsets are bytes; times are microseconds.
 * - Names: mori_<object>_<verb> (mori_client_*, mori_mem_*, mori_xfer_*, mori_notif_*, and
 *   mori_shmem_*, mori_comm_*, mori_ep_* in the subsystem headers), except where a function
 *   mirrors a well-known API and keeps its name: NVSHMEM's and ROCm/mori's (mori_shmem_my_pe,
 *   mori_shmem_malloc, ...) and NCCL's collectives (mori_allreduce, ...).
 * - Types: enums are `typedef enum mori_x {...} mori_x;` and parameters that take one have its
 *   type; shared types and enums live in mori_types.h, which GPU code may include too.
 * - Ownership: objects returned through an `out` argument are owned by the caller until passed to
 *   their matching close/free/destroy function. Every such function returns int: MORI_OK, or the
 *   first error met while releasing (the object is released anyway); NULL is a no-op returning
 *   MORI_OK.
 * - Status: mori_<object>_status(obj, mori_status *out) fills out (may be NULL) with a code, the
 *   PE it concerns and a message, and returns the code.
 * - Option structs (mori_xfer_opts, mori_access, mori_shmem_opts, mori_comm_opts, mori_ep_config)
 *   start with `size_t size`, set by their mori_<struct>_init(opts, sizeof(*opts)) together with
 *   the defaults. The library reads only the `size` bytes the caller's struct has (fields a newer
 *   library added keep their defaults), so a struct can grow without breaking compiled callers; a
 *   size below the struct as 1.0 declared it is MORI_EINVAL, and a nonzero byte past the fields this
 *   library knows (a caller built against a newer header setting a newer field) is MORI_ENOTSUP.
 *   A struct built with a designated initializer must set .size = sizeof it; its other fields
 *   left zero then mean what a zero says in their comment (for mori_xfer_opts and mori_access,
 *   the defaults).
 * A client and its objects may be used from several threads, but a single transfer handle must
 * not be waited on from two threads at once. A client belongs to the process that opened it: in
 * a child after fork() every call on it (or on its memory, transfers and lists) fails with
 * MORI_ESTALE ("client opened by pid N, used in pid M: open a new client after fork") and
 * touches nothing of the parent's, whose client keeps working; the child opens its own.
 */
#ifndef MORI_H
#define MORI_H

#include <stddef.h>
#include <stdint.h>

#include "mori_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the functions libmori.so exports; the library is built with -fvisibility=hidden and
 * a version script listing the same names. Define it empty before including to parse this
 * header with a tool that does not know attributes. */
#ifndef MORI_API
#if defined(__GNUC__) || defined(__clang__)
#define MORI_API __attribute__((visibility("default")))
#else
#define MORI_API
#endif
#endif

#define MORI_PROTOCOL_VERSION 2

/* Error codes: enum mori_err in mori_types.h (MORI_OK = 0, MORI_E* negative). */

/* The status of an object. mori_xfer_status, mori_shmem_status, mori_comm_status, mori_ep_status
 * and mori_ep_retired_status fill one (out may be NULL) and return its code. */
typedef struct mori_status {
	int code;            /* MORI_OK, MORI_EINPROGRESS (a transfer not finished yet), or a MORI_E* */
	int pe;              /* the PE or rank the code is about (a dead or missing one), -1 when none */
	const char *message; /* never NULL ("" when healthy); owned by the library, valid until the next
	                      * call on the object (or on its client) from this thread */
} mori_status;

/* Name of an error code ("MORI_ETIMEDOUT: deadline expired"). Never NULL; static storage. */
MORI_API const char *mori_strerror(int code);

/* Library version string, e.g. "1.0.0". */
MORI_API const char *mori_version(void);

/* ---------------------------------------------------------------------------------------------
 * Client
 */
typedef struct mori_client mori_client;

/* Connect to the local morid.
 * runtime_dir: the daemon's runtime directory (holding morid.sock); NULL uses $MORI_RUNTIME_DIR,
 *   else /run/mori.
 * name: a label shown by `moractl clients`; may be NULL.
 * Performs the Hello (protocol version check), attaches the session socket and maps the
 * submission/completion ring pair. The client's registrations live as long as the client: when
 * it closes or its process dies, the daemon frees them and peers' transfers on them fail.
 * Errors: MORI_ECONN (no daemon answers), MORI_EVERSION, MORI_EPERM (uid not allowed),
 * MORI_ENOMEM, MORI_ESYS. On success *out is owned by the caller (mori_client_close). */
MORI_API int mori_client_open(const char *runtime_dir, const char *name, mori_client **out);

/* Close the client: waits up to 1 s for its in-flight cross-node transfers, then deregisters
 * (or closes) every memory object still open on it. Notifications of transfers that completed
 * reach their targets even when morid reads them after the close (also if the process dies:
 * morid takes what is left in its submission ring). Transfer handles and prepared lists stay
 * the caller's: free them (mori_xfer_free, mori_xfer_list_free) before closing; using them after
 * close is undefined. Returns MORI_OK (in a child after fork it frees the child's copy only and
 * touches nothing of the parent's session). NULL is a no-op returning MORI_OK. */
MORI_API int mori_client_close(mori_client *c);

/* Detail message of the last failure on this client (thread-local to the calling thread).
 * Valid until the next call on the client from that thread. Never NULL. */
MORI_API const char *mori_client_last_error(mori_client *c);

/* This node's peer address as the daemon reports it ("10.0.0.1:7100"), or "" when the daemon has
 * no peer listener. Static storage owned by the client. */
MORI_API const char *mori_client_node(mori_client *c);

/* ---------------------------------------------------------------------------------------------
 * Memory
 */
typedef struct mori_mem mori_mem; /* a region: local (alloc, register) or a peer's (unpack, open_remote) */

/* enum mori_mem_kind (MORI_MEM_HOST, MORI_MEM_VRAM): mori_types.h. */

/* Allocate and register a region of `size` bytes, zero-filled.
 * MORI_MEM_HOST: host memory that peers on this node map zero-copy (a memfd, mapped shared; the
 *   daemon keeps a reference); mori_mem_ptr gives its address.
 * MORI_MEM_VRAM: device memory on GPU $MORI_GPU_DEVICE (default 0), a VMM allocation exported
 *   as a POSIX fd (cuMemCreate; rounded up to the driver's granularity, 2 MiB on current NVIDIA
 *   GPUs), or cudaMalloc memory where the driver has no VMM. mori_mem_ptr gives its device
 *   address (CUdeviceptr), usable in this process's primary context of that device. To fill or
 *   read it without GPU code of your own, transfer between it and a host region of the same
 *   client (mori_xfer_batch with one as local and the other as remote). Across nodes, VRAM
 *   travels over the daemons' TCP streams, staged through their pinned host buffers (each
 *   daemon maps its client's VRAM on the owner's device ordinal: run morid with the same
 *   CUDA_VISIBLE_DEVICES view as its clients).
 * Errors: MORI_EINVAL (size 0, bad kind, MORI_GPU_DEVICE not a device of this process),
 * MORI_ENOGPU (VRAM without a GPU runtime or device), MORI_ENOMEM (host or GPU memory, or a size
 * past INT64_MAX), MORI_ESYS. Free with mori_mem_deregister, which also unmaps and frees the memory. */
MORI_API int mori_mem_alloc(mori_client *c, size_t size, mori_mem_kind kind, mori_mem **out);

/* Register `len` bytes at `ptr` that the caller allocated.
 * Host memory: if ptr lies in a shared file mapping (memfd or tmpfs file) the file is passed to
 * the daemon and peers map it zero-copy (cost: one mmap per peer, then memcpy speed). Otherwise
 * peers on this node reach it by cross-memory attach (process_vm_readv/writev): one system call
 * per batch, about memcpy speed for large blocks but a few microseconds per call, and it needs
 * ptrace permission between the two processes (same uid, or yama ptrace_scope 0).
 * A sub-range of a larger allocation registers with its offset kept.
 * VRAM: cudaMalloc memory (shared through its IPC handle plus the range's offset) or VMM memory
 * (cuMemCreate with POSIX fd handles); the range may start inside a larger allocation. A VMM
 * range may also span several allocations mapped back to back in one reserved VA range (what
 * PyTorch's expandable_segments:True allocator builds from 20 MiB segments): morid then holds one
 * fd per allocation (sent in batches; each counts against its descriptor limit, RLIMIT_NOFILE less
 * 256), and peers map every allocation at its offset, so the range is contiguous there too and
 * blocks may cross allocation boundaries. Every allocation must be a VMM allocation with POSIX fd
 * handles on the same device (else MORI_ENOTSUP, or MORI_EINVAL for another device); a range with
 * an unmapped part fails with MORI_EINVAL naming the hole ([start, end) and its offset).
 * Registering a range that overlaps one this client already registered fails with MORI_EBUSY.
 * A range that wraps the address space, or host memory not mapped in this process, fails with
 * MORI_ERANGE (morid checks again: it never trusts the library).
 * Errors: MORI_EINVAL, MORI_ERANGE, MORI_EBUSY, MORI_ENOGPU, MORI_ENOTSUP, MORI_ENOMEM (also: morid
 * near its descriptor limit), MORI_ESYS.
 * The caller keeps ownership of the memory; it must stay valid until mori_mem_deregister. */
MORI_API int mori_mem_register(mori_client *c, void *ptr, size_t len, mori_mem_kind kind, mori_mem **out);

/* Deregister (and, for mori_mem_alloc memory, free) a local region. Waits up to 1 s for this
 * client's in-flight transfers on it, then fails the cross-node ones with MORI_ECANCELED (their
 * handles stay valid; no later completion touches the region). Same-node copies still running
 * after a further second leave the region registered: MORI_EBUSY, call again once they finish.
 * Peers holding the region open see MORI_ESTALE on their next transfer. Registered host memory
 * (mori_mem_register) that same-node peers opened is read by them directly (cross-memory
 * attach): the call then also waits until each of them confirms it has no copy running (their
 * libraries answer from a watcher thread, within about 100 ms even when idle), at most 5 s
 * (morid's deadline for a peer that is stopped or stuck). Also closes a handle from
 * mori_mem_unpack/mori_mem_open_remote. NULL is a no-op returning MORI_OK. */
MORI_API int mori_mem_deregister(mori_mem *mem);

/* Local address and size of a local region (NULL for a remote handle). */
MORI_API void *mori_mem_ptr(const mori_mem *mem);
MORI_API size_t mori_mem_size(const mori_mem *mem);

/* Largest packed blob, bytes. */
#define MORI_MEM_BLOB_MAX 128

/* Pack a region's handle (node, daemon epoch, region id, generation, size, kind, and a 128-bit
 * secret morid drew at registration) into an opaque blob of at most MORI_MEM_BLOB_MAX bytes, to
 * send out of band. The blob is a capability: whoever holds it can open the region, and nothing
 * else can (ids are random and not enough; a forged blob is refused like a freed region's). Only
 * the owner's blobs carry the secret: a handle opened from a blob or a name packs into a blob
 * that names the region (to compare handles) but opens nothing (mori_mem_unpack: MORI_EPERM):
 * an opener was granted the region, not the right to pass it on. *len gets its length.
 * Errors: MORI_EINVAL, MORI_EMSGSIZE (cap too small). */
MORI_API int mori_mem_pack(const mori_mem *mem, void *blob, size_t cap, size_t *len);

/* Open a peer's region from a packed blob (from this node or another). On the same node the
 * region is mapped into this process once and cached. Errors: MORI_EPROTO (not a blob),
 * MORI_ESTALE (daemon restarted since, region freed, or the blob forged: the same answer),
 * MORI_EPERM (an opener's blob, which carries no secret), MORI_ENOENT, MORI_ECONN.
 * Close with mori_mem_deregister. */
MORI_API int mori_mem_unpack(mori_client *c, const void *blob, size_t len, mori_mem **out);

/* Publish a local region under `name` (1..127 printable bytes, e.g. "prefill0/kv") in this
 * node's daemon; the name is withdrawn when the region is deregistered or its client dies. A
 * region has one name: publishing it again under another name renames it. A published name is a
 * grant: here to every uid allowed to connect to this node's morid and to every peer node (which
 * authenticate with the cluster key where one is configured); mori_mem_publish_access narrows it.
 * Errors: MORI_EEXIST (name taken), MORI_EINVAL, MORI_ENOENT. */
MORI_API int mori_mem_publish(mori_mem *mem, const char *name);

/* Who may open a published name (mori_mem_publish_access). The owner's uid always may. */
typedef struct mori_access {
	size_t size;               /* sizeof(mori_access) as the caller compiled it (mori_access_init) */
	const uint32_t *uids;      /* uids on this node */
	size_t n_uids;
	const char *const *nodes;  /* peer nodes, "host:port" as that node's morid calls itself (its
	                            * advertise address, else its listen address) */
	size_t n_nodes;
} mori_access;

/* Fill access with its defaults (no uids, no nodes: only the owner) and access->size = size
 * (sizeof(*access)). MORI_EINVAL for NULL or a size below 1.0's struct. */
MORI_API int mori_access_init(mori_access *access, size_t size);

/* Publish with an access list: only the owner's uid, the uids listed (opening on this node) and
 * the nodes listed (opening from there) may look the name up; others get MORI_EPERM. access
 * NULL: as mori_mem_publish (anyone). At most 256 uids and 256 nodes. Publishing again replaces
 * the list. `moractl memory` shows it. The lists are copied; the caller keeps them.
 * Errors: as mori_mem_publish; MORI_EINVAL / MORI_ENOTSUP for access->size (see Conventions). */
MORI_API int mori_mem_publish_access(mori_mem *mem, const char *name, const mori_access *access);

/* Open the region published as `name` at node `node_address` ("host:port" of that node's daemon
 * peer listener; NULL or "" for this node). Errors: MORI_EINVAL (node_address not host:port with
 * a port 1..65535), MORI_EUNREACH (not published there),
 * MORI_EPERM (its access list does not name this uid or node, or the peer daemon refused this
 * node's authentication), MORI_ECONN (peer daemon unreachable), MORI_ETIMEDOUT. Close with
 * mori_mem_deregister. */
MORI_API int mori_mem_open_remote(mori_client *c, const char *node_address, const char *name,
				  mori_mem **out);

/* ---------------------------------------------------------------------------------------------
 * Transfers
 *
 * A write copies local bytes into the remote region; a read copies remote bytes into the local
 * region. `remote` is a handle from mori_mem_unpack/mori_mem_open_remote (or another local
 * region of this node). Offsets and lengths are bytes and are checked against both regions:
 * MORI_ERANGE when outside, MORI_EINVAL for a zero length or an empty batch.
 * Overlap: when one descriptor's source and destination bytes overlap (a host region used as
 * both sides, or its own published name opened again) it is copied as memmove copies, as if
 * through a temporary buffer. The descriptors of one batch are copied in no set order and in
 * parallel, so one descriptor's destination overlapping another's source or destination leaves
 * those bytes undefined (as in NIXL). VRAM copies follow the GPU runtime's copy rules.
 * Transfers in flight at the same time are not ordered with each other either, on one stream or
 * none: wait for a transfer before submitting one that depends on it.
 *
 * VRAM on this node (either side): the copy runs on the GPU, on opts->stream, or with none
 * after the application's work on the legacy default stream. Large batches are checked as they
 * are staged for the GPU, 1 024 entries first: when a later entry is bad the call still fails
 * with MORI_ERANGE (or MORI_EINVAL), and nothing from that entry on is copied, but the entries
 * before it may have been handed to the GPU; they finish in the background and the regions stay
 * registered until they have. Batches of at most 8 entries and 64 KiB without a stream may go to
 * a resident copy block instead of a launch (when the legacy default stream is idle, no MORI-VIZ
 * trace runs and one of its 16 slots is free): such a copy is not on any stream, so later work
 * of the application's on the legacy default stream is not ordered after it (wait for the
 * transfer, as for any). The block leaves the GPU MORI_GPU_SERVICE_IDLE_US (default 200) after
 * its last job, so a device-wide synchronize waits that long at most; 0 turns it off.
 */
typedef struct mori_xfer mori_xfer;
typedef struct mori_xfer_list mori_xfer_list;

typedef struct mori_desc {
	uint64_t local_offset;
	uint64_t remote_offset;
	uint64_t length;
} mori_desc;

/* enum mori_xfer_op (MORI_XFER_READ, MORI_XFER_WRITE): mori_types.h. */

typedef struct mori_xfer_opts {
	size_t size;          /* sizeof(mori_xfer_opts) as the caller compiled it (mori_xfer_opts_init) */
	uint64_t notif_tag;   /* delivered to the remote region's owner after the data has landed */
	int has_notif;        /* nonzero: send notif_tag */
	int64_t timeout_us;   /* deadline from submission; <= 0: morid's transfer_timeout_ms (default
	                       * 30 s), applied when morid takes the submission */
	void *stream;         /* GPU stream for VRAM copies (cudaStream_t); NULL: internal stream */
} mori_xfer_opts;

/* Fill opts with the defaults (no notification, morid's deadline, no stream: every field zero)
 * and opts->size = size (sizeof(*opts)). MORI_EINVAL for NULL or a size below 1.0's struct. */
MORI_API int mori_xfer_opts_init(mori_xfer_opts *opts, size_t size);

/* One contiguous range: write copies local [local_offset, +length) to remote [remote_offset, +length),
 * read the other way. Returns a transfer handle in *out (caller frees with mori_xfer_free); the
 * transfer may already be complete on return. opts may be NULL (the defaults).
 * Errors at submission: MORI_EINVAL, MORI_ERANGE, MORI_ESTALE, MORI_EPEERDEAD, MORI_EAGAIN
 * (submission ring full: retry after completing transfers). Later errors are the status. */
MORI_API int mori_xfer_write(mori_mem *local, uint64_t local_offset, mori_mem *remote, uint64_t remote_offset,
			     uint64_t length, const mori_xfer_opts *opts, mori_xfer **out);
MORI_API int mori_xfer_read(mori_mem *local, uint64_t local_offset, mori_mem *remote, uint64_t remote_offset,
			    uint64_t length, const mori_xfer_opts *opts, mori_xfer **out);

/* A batch of n descriptors (n >= 1), one status for the whole batch. descs is copied. Errors at
 * submission as mori_xfer_write's, and MORI_EINVAL for an op that is neither read nor write. */
MORI_API int mori_xfer_batch(mori_xfer_op op, mori_mem *local, mori_mem *remote, const mori_desc *descs, size_t n,
			     const mori_xfer_opts *opts, mori_xfer **out);

/* Prepare a descriptor list once (copied; validated against both regions now), then submit
 * arrays of indices into it, so that submitting k blocks costs O(k) index words and no
 * descriptor traffic (vLLM's NIXL connector pattern). Free with mori_xfer_list_free after its
 * transfers have finished. Errors: MORI_EINVAL, MORI_ERANGE, MORI_ENOMEM. */
MORI_API int mori_xfer_prep(mori_mem *local, mori_mem *remote, const mori_desc *descs, size_t n,
			    mori_xfer_list **out);
/* Submit indices[0..n) of a prepared list (indices copied); MORI_ERANGE for an index >= the
 * list's length; other errors as mori_xfer_batch's. */
MORI_API int mori_xfer_submit(mori_xfer_list *list, mori_xfer_op op, const uint32_t *indices, size_t n,
			      const mori_xfer_opts *opts, mori_xfer **out);
/* Free a prepared list (its transfers must have finished). MORI_OK; NULL is a no-op. */
MORI_API int mori_xfer_list_free(mori_xfer_list *list);

/* Current status, without waiting: code MORI_EINPROGRESS, MORI_OK, or the transfer's error (the
 * first error sticks); pe -1; message owned by the handle ("in progress" while it runs), valid
 * until it is freed. Returns the code; MORI_EINVAL for NULL x. */
MORI_API int mori_xfer_status(mori_xfer *x, mori_status *out);

/* Wait up to timeout_us (< 0: until the transfer's own deadline) for completion. Busy-polls for
 * a bounded time (mori.conf-independent, 50 us) then sleeps on the completion doorbell.
 * Returns the final status, or MORI_ETIMEDOUT if this wait's timeout expired first (the transfer
 * continues; its own deadline still applies). */
MORI_API int mori_xfer_wait(mori_xfer *x, int64_t timeout_us);

/* Wait for all n transfers; returns MORI_OK if all succeeded, else the first error found
 * (in array order) or MORI_ETIMEDOUT. */
MORI_API int mori_xfer_wait_all(mori_xfer *const *xs, size_t n, int64_t timeout_us);

/* Request cancellation: an unfinished transfer ends with MORI_ECANCELED (bytes already moved
 * stay moved, and no notification is sent). Returns MORI_OK or MORI_EINVAL. */
MORI_API int mori_xfer_cancel(mori_xfer *x);

/* Bytes the transfer covers. */
MORI_API uint64_t mori_xfer_bytes(const mori_xfer *x);

/* Free a transfer handle; an unfinished transfer is cancelled first (waiting at most 2 s for
 * morid's answer). Returns MORI_OK; NULL is a no-op. */
MORI_API int mori_xfer_free(mori_xfer *x);

/* Submissions this client has queued for morid that the daemon has not yet taken off the ring
 * (cross-node transfers, notifications, cancels). 0 means the daemon has seen everything
 * submitted so far. For diagnostics and benchmarks. */
MORI_API unsigned mori_client_sq_pending(mori_client *c);

/* ---------------------------------------------------------------------------------------------
 * Notifications
 */
typedef struct mori_notif {
	uint64_t tag;        /* the initiator's notif_tag */
	uint64_t region_id;  /* the target region (owned by this client) the transfer touched */
	int32_t from_pid;    /* initiator's pid on this node, 0 when it came from another node */
	uint32_t reserved;
} mori_notif;

/* Take up to max notifications addressed to this client, waiting up to timeout_us for the first
 * (0: don't wait); out has room for max entries. Returns the count (>= 0) or a negative error. A notification is delivered
 * only after all bytes of its transfer are visible in the target region.
 * Order: the notifications of one initiating client reach their targets in the order it
 * submitted the transfers, on the same node and across nodes (per initiating client and target
 * node: a notification waits until those submitted before it to the same node were delivered,
 * or their transfers failed). Across nodes a transfer with a notification completes once the
 * target's daemon has posted the notification (its status is the target's answer).
 * A full receiver: notifications wait in this client's completion queue until it calls into
 * libmori. Once the queue is full and half of morid's client_max_backlog waits behind it, morid
 * drops further notifications to this client rather than detach it (any opener of a published
 * region could otherwise get its owner detached by flooding): each drop is counted
 * (notifications_dropped in moractl status) and logged at warning with the sender's pid. The
 * data of such a transfer has landed; a same-node sender's transfer still succeeds, a
 * cross-node sender's fails with MORI_EAGAIN ("the receiver's completion queue is full"). */
MORI_API int mori_notif_poll(mori_client *c, mori_notif *out, size_t max, int64_t timeout_us);

#ifdef __cplusplus
}
#endif
#endif /* MORI_H */
