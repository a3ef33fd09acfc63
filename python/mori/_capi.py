"""libmori's C API as ctypes: the structures, constants and prototypes of include/mori.h,
mori_shmem.h, mori_ep.h, mori_coll.h, mori_cco.h and mori_umbp.h, written here in C and turned into ctypes types by one
rule (ctype below).

The C text is the header's own, so tests/test_python_capi.sh can hold it to the headers:
tests/capi_check.py writes a C file from these tables (every structure's size, each field's
offset and type, the field count, every constant, and each prototype assigned to a pointer of
the spelled function type) and compiles it against include/ with -Werror. A header change that
these tables do not follow fails `make check` instead of corrupting memory at run time.

Nothing here loads libmori: mori._lib binds these tables to the loaded library.
"""
import ctypes
import re

# The ABI these tables describe: libmori.so.<ABI_MAJOR> (the SONAME moves with every break).
ABI_MAJOR = 1

# ---------------------------------------------------------------------------------------------
# C types to ctypes

# Scalar C types; every enum of the headers is int-sized (capi_check asserts it).
SCALARS = {
    "int": ctypes.c_int, "unsigned": ctypes.c_uint, "size_t": ctypes.c_size_t, "float": ctypes.c_float,
    "int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64, "uint8_t": ctypes.c_uint8, "uint16_t": ctypes.c_uint16,
}
ENUMS = ("mori_err", "mori_dtype", "mori_redop", "mori_mem_kind", "mori_xfer_op", "mori_ep_kernel_type",
         "mori_ep_quant", "mori_coll_algo", "mori_cco_gda_connection",
         "mori_umbp_tier", "mori_umbp_pin_kind")

_STRUCTS = {}  # C name -> ctypes.Structure, filled below


def ctype(t):
    """The ctypes type for C type t ("const mori_desc *", "size_t", "void"):
    char pointers: c_char_p (bytes in, bytes out);
    a pointer to a structure of this module: POINTER(it), except one passed as an array
      address (by_address: mori_desc, whose arrays numpy builds);
    every other pointer (handles, void *, arrays, out-parameters): c_void_p, which takes an int
      address, None, a ctypes array or a byref();
    a structure of this module by value (a field of another): the structure;
    scalars and enums: their integer type; void: None."""
    t = " ".join(t.replace("*", " * ").split())
    stars = t.count("*")
    base = " ".join(w for w in t.split("*")[0].split() if w != "const")
    if stars == 0:
        if base == "void":
            return None
        if base in ENUMS:
            return ctypes.c_int
        if base in _STRUCTS:  # a structure by value (mori_cco_window_dev's result)
            return _STRUCTS[base]
        return SCALARS[base]
    if stars == 1 and base == "char":
        return ctypes.c_char_p
    s = _STRUCTS.get(base)
    if stars == 1 and s is not None and not getattr(s, "by_address", False):
        return ctypes.POINTER(s)
    return ctypes.c_void_p


def _decls(text):
    """[(type, name)] of "type name; type name; ..." (a structure's fields, a parameter list)."""
    out = []
    for d in re.split(r"[;,]", text):
        d = " ".join(d.replace("*", " * ").split())
        if not d or d == "void":
            continue
        m = re.match(r"^(.*?)\s*\b([A-Za-z_]\w*)$", d)
        if not m or not m.group(1):
            raise ValueError("cannot read C declaration %r" % d)
        out.append((m.group(1), m.group(2)))
    return out


# ---------------------------------------------------------------------------------------------
# Structures (c_decl: the header's fields, in order)


class Status(ctypes.Structure):
    """mori_status: what every *_status call fills."""
    c_name = "mori_status"
    c_decl = "int code; int pe; const char *message"


class Desc(ctypes.Structure):
    """mori_desc: one (local offset, remote offset, length) triple, bytes."""
    c_name = "mori_desc"
    c_decl = "uint64_t local_offset; uint64_t remote_offset; uint64_t length"
    by_address = True


class XferOpts(ctypes.Structure):
    """mori_xfer_opts."""
    c_name = "mori_xfer_opts"
    c_decl = "size_t size; uint64_t notif_tag; int has_notif; int64_t timeout_us; void *stream"


class Access(ctypes.Structure):
    """mori_access: who may open a published name."""
    c_name = "mori_access"
    c_decl = "size_t size; const uint32_t *uids; size_t n_uids; const char *const *nodes; size_t n_nodes"


class Notif(ctypes.Structure):
    """mori_notif."""
    c_name = "mori_notif"
    c_decl = "uint64_t tag; uint64_t region_id; int32_t from_pid; uint32_t reserved"


class ShmemOpts(ctypes.Structure):
    """mori_shmem_opts."""
    c_name = "mori_shmem_opts"
    c_decl = ("size_t size; uint64_t heap_size; mori_mem_kind heap_kind; int gpu_device; const char *root;"
              "int64_t timeout_us")


class CommOpts(ctypes.Structure):
    """mori_comm_opts."""
    c_name = "mori_comm_opts"
    c_decl = "size_t size; int node_team; uint64_t scratch_bytes; int64_t timeout_us; const char *algo"


class EpConfig(ctypes.Structure):
    """mori_ep_config (ROCm/mori's EpDispatchCombineConfig)."""
    c_name = "mori_ep_config"
    c_decl = ("size_t size; int rank; int world_size; int hidden_dim; int scale_dim; int scale_type_size;"
              "int max_token_type_size; int max_num_inp_token_per_rank; int num_experts_per_rank;"
              "int num_experts_per_token; mori_dtype data_type; mori_ep_kernel_type kernel_type;"
              "int warp_num_per_block; int block_num; int64_t timeout_us; int32_t num_in_flight;"
              "mori_ep_quant quant_type")


class EpRecv(ctypes.Structure):
    """mori_ep_recv: the receive buffers of a dispatch."""
    c_name = "mori_ep_recv"
    c_decl = ("void *tokens; float *weights; int32_t *indices; void *scales; int32_t *src_pos; int32_t *count;"
              "int64_t max_recv; void *combine_input; int32_t slot")


class CcoCommOpts(ctypes.Structure):
    """mori_cco_comm_opts."""
    c_name = "mori_cco_comm_opts"
    c_decl = "size_t size; uint64_t per_rank_size; mori_mem_kind mem_kind; int gpu_device; int64_t timeout_us"


class CcoDevCommReqs(ctypes.Structure):
    """mori_cco_dev_comm_reqs (ROCm/mori's ccoDevCommRequirements)."""
    c_name = "mori_cco_dev_comm_reqs"
    c_decl = ("size_t size; mori_cco_gda_connection gda_connection_type; int gda_signal_count;"
              "int gda_counter_count; int lsa_barrier_count; int rail_gda_barrier_count; int barrier_count;"
              "int ce_queue_count")


class CcoWin(ctypes.Structure):
    """mori_cco_win: a window as kernels take it (heap offset, bytes)."""
    c_name = "mori_cco_win"
    c_decl = "uint64_t off; uint64_t bytes"


class CcoDevComm(ctypes.Structure):
    """mori_cco_dev_comm (ROCm/mori's ccoDevComm): passed by value into kernels."""
    c_name = "mori_cco_dev_comm"
    c_decl = ("uint32_t magic; uint32_t version; int32_t rank; int32_t world_size; int32_t lsa_size;"
              "int32_t lsa_rank; int32_t node_start; int32_t gda_connection_type; uint64_t heap_base;"
              "uint64_t heap_size; uint64_t shmem; uint64_t ctrl; uint64_t live; uint32_t live_slot; uint32_t pad0;"
              "uint64_t live_gen; uint64_t timeout_ns; int32_t signal_count; int32_t counter_count;"
              "int32_t lsa_barrier_count; int32_t rail_gda_barrier_count; int32_t barrier_count;"
              "int32_t ce_queue_count; uint64_t res_off; uint64_t res_bytes; uint64_t signal_off;"
              "uint64_t counter_off; uint64_t lsa_bar_off; uint64_t rail_bar_off; uint64_t bar_off; uint64_t ce_ctrl;"
              "uint64_t ce_ring; uint32_t ce_entries; uint32_t pad1")


class UmbpKey(ctypes.Structure):
    """mori_umbp_key: len (1..MORI_UMBP_KEY_MAX) bytes at data."""
    c_name = "mori_umbp_key"
    c_decl = "const void *data; size_t len"
    by_address = True


class UmbpItem(ctypes.Structure):
    """mori_umbp_item: one key of a batch put or get (buffer sizes in bytes)."""
    c_name = "mori_umbp_item"
    c_decl = ("mori_umbp_key key; void *buf; size_t size; size_t len; int32_t depth; uint8_t pin; uint8_t tier;"
              "uint16_t reserved; int status")
    by_address = True


class UmbpOpts(ctypes.Structure):
    """mori_umbp_opts."""
    c_name = "mori_umbp_opts"
    c_decl = "size_t size; int64_t timeout_us; uint32_t copy_threads"


class UmbpStats(ctypes.Structure):
    """mori_umbp_stats: the store as the caller's uid sees it (bytes and counts)."""
    c_name = "mori_umbp_stats"
    c_decl = ("size_t size; uint64_t dram_keys; uint64_t dram_bytes; uint64_t dram_capacity; uint64_t ssd_keys;"
              "uint64_t ssd_bytes; uint64_t ssd_capacity; uint64_t quota_bytes; uint64_t used_bytes; uint64_t hits;"
              "uint64_t misses; uint64_t evictions; uint64_t spills; uint64_t promotions")


class UmbpExtMatch(ctypes.Structure):
    """mori_umbp_external_kv_match: one node's part of match_external_kv (tier_mask: n bytes)."""
    c_name = "mori_umbp_external_kv_match"
    c_decl = "char *node_id; size_t matched; uint8_t *tier_mask"


STRUCTS = (Status, Desc, XferOpts, Access, Notif, ShmemOpts, CommOpts, EpConfig, EpRecv, CcoCommOpts, CcoDevCommReqs,
           CcoWin, CcoDevComm, UmbpKey, UmbpItem, UmbpOpts, UmbpStats, UmbpExtMatch)
for _s in STRUCTS:
    _STRUCTS[_s.c_name] = _s
for _s in STRUCTS:  # after the registry: a field may point to another structure
    _s.c_fields = _decls(_s.c_decl)
    _s._fields_ = [(n, ctype(t)) for t, n in _s.c_fields]
del _s

# ---------------------------------------------------------------------------------------------
# Constants (the headers' #defines and enum values the package uses)

MEM_BLOB_MAX = 128          # MORI_MEM_BLOB_MAX
SHMEM_UID_BYTES = 128       # MORI_SHMEM_UID_BYTES
SHMEM_RESERVED = 64 << 10   # MORI_SHMEM_RESERVED
MEM_HOST, MEM_VRAM = 0, 1   # mori_mem_kind
XFER_READ, XFER_WRITE = 0, 1  # mori_xfer_op
UINT8, INT32, FLOAT16, FLOAT32, BFLOAT16, FLOAT8_E4M3 = 1, 2, 6, 7, 9, 10  # mori_dtype
SUM, MAX, MIN = 0, 2, 3     # mori_redop
EP_NORMAL, EP_LOW_LATENCY, EP_INTERNODE, EP_INTERNODE_LL = 0, 1, 2, 3  # mori_ep_kernel_type
EP_QUANT_NONE, EP_QUANT_FP8_BLOCK128 = 0, 1  # mori_ep_quant
EP_MAX_WORLD, EP_MAX_TOPK, EP_MAX_IN_FLIGHT = 32, 32, 16
CCO_UID_BYTES = 128         # MORI_CCO_UID_BYTES
CCO_GDA_NONE, CCO_GDA_FULL, CCO_GDA_CROSSNODE, CCO_GDA_RAIL = 0, 1, 2, 3  # mori_cco_gda_connection
CCO_MAGIC = 0x4f43434d      # MORI_CCO_MAGIC
UMBP_KEY_MAX = 256          # MORI_UMBP_KEY_MAX
UMBP_LOOKUP_MAX = 4096      # MORI_UMBP_LOOKUP_MAX
UMBP_NODE_MAX = 128         # MORI_UMBP_NODE_MAX
UMBP_TIER_UNKNOWN, UMBP_TIER_HBM, UMBP_TIER_DRAM, UMBP_TIER_SSD = 0, 1, 2, 3  # mori_umbp_tier
UMBP_PIN_NONE, UMBP_PIN_SOFT, UMBP_PIN_HARD = 0, 1, 2  # mori_umbp_pin_kind

# The C name of each constant above (capi_check asserts them; error codes: mori.errors.Code).
CONSTANTS = {
    "MORI_MEM_BLOB_MAX": MEM_BLOB_MAX, "MORI_SHMEM_UID_BYTES": SHMEM_UID_BYTES,
    "MORI_SHMEM_RESERVED": SHMEM_RESERVED, "MORI_MEM_HOST": MEM_HOST, "MORI_MEM_VRAM": MEM_VRAM,
    "MORI_XFER_READ": XFER_READ, "MORI_XFER_WRITE": XFER_WRITE, "MORI_UINT8": UINT8, "MORI_INT32": INT32,
    "MORI_FLOAT16": FLOAT16, "MORI_FLOAT32": FLOAT32, "MORI_BFLOAT16": BFLOAT16,
    "MORI_FLOAT8_E4M3": FLOAT8_E4M3, "MORI_SUM": SUM, "MORI_MAX": MAX, "MORI_MIN": MIN,
    "MORI_EP_NORMAL": EP_NORMAL, "MORI_EP_LOW_LATENCY": EP_LOW_LATENCY, "MORI_EP_INTERNODE": EP_INTERNODE,
    "MORI_EP_INTERNODE_LL": EP_INTERNODE_LL, "MORI_EP_QUANT_NONE": EP_QUANT_NONE,
    "MORI_EP_QUANT_FP8_BLOCK128": EP_QUANT_FP8_BLOCK128, "MORI_EP_MAX_WORLD": EP_MAX_WORLD,
    "MORI_EP_MAX_TOPK": EP_MAX_TOPK, "MORI_EP_MAX_IN_FLIGHT": EP_MAX_IN_FLIGHT,
    "MORI_CCO_UID_BYTES": CCO_UID_BYTES, "MORI_CCO_GDA_CONNECTION_NONE": CCO_GDA_NONE,
    "MORI_CCO_GDA_CONNECTION_FULL": CCO_GDA_FULL, "MORI_CCO_GDA_CONNECTION_CROSSNODE": CCO_GDA_CROSSNODE,
    "MORI_CCO_GDA_CONNECTION_RAIL": CCO_GDA_RAIL, "MORI_CCO_MAGIC": CCO_MAGIC,
    "MORI_UMBP_KEY_MAX": UMBP_KEY_MAX, "MORI_UMBP_LOOKUP_MAX": UMBP_LOOKUP_MAX, "MORI_UMBP_NODE_MAX": UMBP_NODE_MAX,
    "MORI_UMBP_TIER_UNKNOWN": UMBP_TIER_UNKNOWN,
    "MORI_UMBP_TIER_HBM": UMBP_TIER_HBM, "MORI_UMBP_TIER_DRAM": UMBP_TIER_DRAM, "MORI_UMBP_TIER_SSD": UMBP_TIER_SSD,
    "MORI_UMBP_PIN_NONE": UMBP_PIN_NONE, "MORI_UMBP_PIN_SOFT": UMBP_PIN_SOFT, "MORI_UMBP_PIN_HARD": UMBP_PIN_HARD,
}

# ---------------------------------------------------------------------------------------------
# Prototypes, one table per header: every MORI_API function it declares, as it declares it


def _protos(text):
    """{name: (C return type, [(C type, name)])} of C declarations "ret name(params);"."""
    out = {}
    for d in text.split(";"):
        d = " ".join(d.split())
        if not d:
            continue
        m = re.match(r"^(.*?)\s*\b(mori_\w+)\((.*)\)$", d)
        if not m:
            raise ValueError("cannot read C prototype %r" % d)
        out[m.group(2)] = (m.group(1), _decls(m.group(3)))
    return out


MORI_H = _protos("""
const char *mori_strerror(int code);
const char *mori_version(void);
int mori_client_open(const char *runtime_dir, const char *name, mori_client **out);
int mori_client_close(mori_client *c);
const char *mori_client_last_error(mori_client *c);
const char *mori_client_node(mori_client *c);
unsigned mori_client_sq_pending(mori_client *c);
int mori_mem_alloc(mori_client *c, size_t size, mori_mem_kind kind, mori_mem **out);
int mori_mem_register(mori_client *c, void *ptr, size_t len, mori_mem_kind kind, mori_mem **out);
int mori_mem_deregister(mori_mem *mem);
void *mori_mem_ptr(const mori_mem *mem);
size_t mori_mem_size(const mori_mem *mem);
int mori_mem_pack(const mori_mem *mem, void *blob, size_t cap, size_t *len);
int mori_mem_unpack(mori_client *c, const void *blob, size_t len, mori_mem **out);
int mori_mem_publish(mori_mem *mem, const char *name);
int mori_access_init(mori_access *access, size_t size);
int mori_mem_publish_access(mori_mem *mem, const char *name, const mori_access *access);
int mori_mem_open_remote(mori_client *c, const char *node_address, const char *name, mori_mem **out);
int mori_xfer_opts_init(mori_xfer_opts *opts, size_t size);
int mori_xfer_write(mori_mem *local, uint64_t local_offset, mori_mem *remote, uint64_t remote_offset,
                    uint64_t length, const mori_xfer_opts *opts, mori_xfer **out);
int mori_xfer_read(mori_mem *local, uint64_t local_offset, mori_mem *remote, uint64_t remote_offset,
                   uint64_t length, const mori_xfer_opts *opts, mori_xfer **out);
int mori_xfer_batch(mori_xfer_op op, mori_mem *local, mori_mem *remote, const mori_desc *descs, size_t n,
                    const mori_xfer_opts *opts, mori_xfer **out);
int mori_xfer_prep(mori_mem *local, mori_mem *remote, const mori_desc *descs, size_t n, mori_xfer_list **out);
int mori_xfer_submit(mori_xfer_list *list, mori_xfer_op op, const uint32_t *indices, size_t n,
                     const mori_xfer_opts *opts, mori_xfer **out);
int mori_xfer_list_free(mori_xfer_list *list);
int mori_xfer_status(mori_xfer *x, mori_status *out);
int mori_xfer_wait(mori_xfer *x, int64_t timeout_us);
int mori_xfer_wait_all(mori_xfer *const *xs, size_t n, int64_t timeout_us);
int mori_xfer_cancel(mori_xfer *x);
uint64_t mori_xfer_bytes(const mori_xfer *x);
int mori_xfer_free(mori_xfer *x);
int mori_notif_poll(mori_client *c, mori_notif *out, size_t max, int64_t timeout_us);
""")

MORI_SHMEM_H = _protos("""
int mori_shmem_opts_init(mori_shmem_opts *opts, size_t size);
int mori_shmem_init(mori_client *c, const char *name, int rank, int world_size, const mori_shmem_opts *opts,
                    mori_group **out);
int mori_shmem_get_unique_id(mori_client *c, void *uid, size_t cap, size_t *len);
int mori_shmem_init_uid(mori_client *c, const void *uid, size_t len, int rank, int world_size,
                        const mori_shmem_opts *opts, mori_group **out);
int mori_shmem_finalize(mori_group *g);
int mori_shmem_my_pe(const mori_group *g);
int mori_shmem_n_pes(const mori_group *g);
int mori_shmem_team_node(const mori_group *g, const int **pes, int *n);
void *mori_shmem_heap_base(const mori_group *g);
uint64_t mori_shmem_heap_size(const mori_group *g);
void *mori_shmem_ptr_p2p(const mori_group *g, const void *ptr, int pe);
int64_t mori_shmem_offset(const mori_group *g, const void *ptr);
int mori_shmem_malloc(mori_group *g, size_t size, size_t align, void **out);
int mori_shmem_calloc(mori_group *g, size_t size, size_t align, void **out);
int mori_shmem_free(mori_group *g, void *ptr);
int mori_shmem_putmem(mori_group *g, void *dst, const void *src, size_t len, int pe);
int mori_shmem_getmem(mori_group *g, void *dst, const void *src, size_t len, int pe);
int mori_shmem_barrier_all(mori_group *g);
int mori_shmem_barrier_on_stream(mori_group *g, void *stream);
int mori_shmem_quiet_on_stream(mori_group *g, void *stream);
int mori_shmem_status(const mori_group *g, mori_status *out);
void *mori_shmem_state(const mori_group *g);
int mori_shmem_module_init(const mori_group *g, void *module);
""")

MORI_EP_H = _protos("""
int mori_ep_config_init(mori_ep_config *cfg, size_t size);
int mori_ep_config_check(const mori_ep_config *cfg, char *msg, size_t cap);
uint64_t mori_ep_heap_bytes(const mori_ep_config *cfg);
int mori_ep_tuning_lookup(mori_ep_config *cfg, const char *arch, int sm_count, char *which, size_t cap);
int mori_ep_create(mori_group *g, const mori_ep_config *cfg, mori_ep_handle **out);
int mori_ep_destroy(mori_ep_handle *h);
int mori_ep_recv_buffers(const mori_ep_handle *h, mori_ep_recv *out);
int mori_ep_dispatch(mori_ep_handle *h, const void *input, const float *weights, const void *scales,
                     const int32_t *indices, int num_tokens, void *stream, mori_ep_recv *out);
void *mori_ep_get_registered_combine_input_buffer(const mori_ep_handle *h);
int mori_ep_combine(mori_ep_handle *h, mori_dtype dtype, const void *expert_out, const float *weights,
                    const int32_t *indices, void *out, void *stream);
int mori_ep_get_dispatch_layout(mori_ep_handle *h, const int32_t *indices, int num_tokens, int32_t *tokens_per_rank,
                                int32_t *tokens_per_expert, uint8_t *token_in_rank, void *stream);
int mori_ep_layout_host(const mori_ep_config *cfg, const int32_t *indices, int num_tokens, int32_t *tokens_per_rank,
                        int32_t *tokens_per_expert, uint8_t *token_in_rank, char *msg, size_t cap);
int mori_ep_status(mori_ep_handle *h, mori_status *out);
int mori_ep_status_clear(mori_ep_handle *h);
int mori_ep_retired_status(mori_client *c, mori_status *out);
int mori_ep_retired_status_clear(mori_client *c);
""")

MORI_COLL_H = _protos("""
int mori_comm_opts_init(mori_comm_opts *opts, size_t size);
int mori_comm_create(mori_group *g, const mori_comm_opts *opts, mori_comm **out);
int mori_comm_destroy(mori_comm *comm);
int mori_comm_rank(const mori_comm *comm);
int mori_comm_size(const mori_comm *comm);
int mori_comm_set_algo(mori_comm *comm, const char *spec);
int mori_comm_algo(const mori_comm *comm, const char *coll, uint64_t bytes, const char **name);
int mori_comm_status(mori_comm *comm, mori_status *out);
void *mori_comm_device_state(const mori_comm *comm);
int mori_comm_window_register(mori_comm *comm, void *ptr, size_t bytes, mori_window **out);
int mori_comm_window_deregister(mori_comm *comm, mori_window *win);
int mori_allreduce(mori_comm *comm, const void *sendbuf, void *recvbuf, size_t count, mori_dtype dtype,
                   mori_redop op, void *stream);
int mori_allgather(mori_comm *comm, const void *sendbuf, void *recvbuf, size_t count, mori_dtype dtype,
                   void *stream);
int mori_reducescatter(mori_comm *comm, const void *sendbuf, void *recvbuf, size_t count, mori_dtype dtype,
                       mori_redop op, void *stream);
int mori_alltoall(mori_comm *comm, const void *sendbuf, void *recvbuf, size_t count, mori_dtype dtype,
                  void *stream);
int mori_alltoallv(mori_comm *comm, const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                   void *recvbuf, const size_t *recvcounts, const size_t *rdispls, mori_dtype dtype, void *stream);
int mori_broadcast(mori_comm *comm, const void *sendbuf, void *recvbuf, size_t count, mori_dtype dtype, int root,
                   void *stream);
size_t mori_dtype_size(mori_dtype dtype);
""")

MORI_CCO_H = _protos("""
int mori_cco_get_unique_id(mori_client *c, mori_cco_unique_id *id);
int mori_cco_comm_opts_init(mori_cco_comm_opts *opts, size_t size);
int mori_cco_comm_create(mori_client *c, const mori_cco_unique_id *id, int nranks, int rank,
                         const mori_cco_comm_opts *opts, mori_cco_comm **out);
int mori_cco_comm_destroy(mori_cco_comm *comm);
int mori_cco_comm_rank(const mori_cco_comm *comm);
int mori_cco_comm_size(const mori_cco_comm *comm);
int mori_cco_comm_lsa(const mori_cco_comm *comm, int *lsa_size, int *lsa_rank, int *node_start);
int mori_cco_comm_status(const mori_cco_comm *comm, mori_status *out);
int mori_cco_mem_alloc(mori_cco_comm *comm, size_t size, void **ptr);
int mori_cco_mem_free(mori_cco_comm *comm, void *ptr);
int mori_cco_window_register(mori_cco_comm *comm, void *ptr, size_t size, mori_cco_window **win);
int mori_cco_window_deregister(mori_cco_comm *comm, mori_cco_window *win);
mori_cco_win mori_cco_window_dev(const mori_cco_window *win);
void *mori_cco_window_local_ptr(const mori_cco_window *win);
void *mori_cco_get_peer_ptr(const mori_cco_comm *comm, const void *local_ptr, int rank);
int mori_cco_put(mori_cco_comm *comm, const mori_cco_window *win, uint64_t dst_off, const void *src, size_t bytes,
                 int rank);
int mori_cco_get(mori_cco_comm *comm, void *dst, const mori_cco_window *win, uint64_t src_off, size_t bytes,
                 int rank);
int mori_cco_barrier_all(mori_cco_comm *comm);
int mori_cco_dev_comm_reqs_init(mori_cco_dev_comm_reqs *reqs, size_t size);
int mori_cco_dev_comm_create(mori_cco_comm *comm, const mori_cco_dev_comm_reqs *reqs, mori_cco_dev_comm *out);
int mori_cco_dev_comm_destroy(mori_cco_dev_comm *dev);
int mori_cco_dev_comm_check(const mori_cco_dev_comm *dev);
int mori_cco_dev_comm_read_signal(const mori_cco_dev_comm *dev, int id, uint64_t *value);
int mori_cco_dev_comm_read_counter(const mori_cco_dev_comm *dev, int id, uint64_t *value);
""")

MORI_UMBP_H = _protos("""
int mori_umbp_opts_init(mori_umbp_opts *opts, size_t size);
int mori_umbp_open(mori_client *c, const mori_umbp_opts *opts, mori_umbp **out);
int mori_umbp_close(mori_umbp *u);
int mori_umbp_put(mori_umbp *u, const void *key, size_t key_len, const void *src, size_t size);
int mori_umbp_get(mori_umbp *u, const void *key, size_t key_len, void *dst, size_t cap, size_t *len);
int mori_umbp_exists(mori_umbp *u, const void *key, size_t key_len);
int mori_umbp_batch_put(mori_umbp *u, mori_umbp_item *items, size_t n, size_t *n_ok);
int mori_umbp_batch_get(mori_umbp *u, mori_umbp_item *items, size_t n, size_t *n_ok);
int mori_umbp_batch_exists(mori_umbp *u, const mori_umbp_key *keys, size_t n, uint8_t *present);
int mori_umbp_batch_exists_consecutive(mori_umbp *u, const mori_umbp_key *keys, size_t n, size_t *count);
int mori_umbp_remove(mori_umbp *u, const void *key, size_t key_len);
int mori_umbp_pin(mori_umbp *u, const void *key, size_t key_len, mori_umbp_pin_kind pin);
int mori_umbp_clear(mori_umbp *u);
int mori_umbp_flush(mori_umbp *u);
int mori_umbp_register_memory(mori_umbp *u, void *ptr, size_t size);
int mori_umbp_deregister_memory(mori_umbp *u, void *ptr);
int mori_umbp_stats_get(mori_umbp *u, mori_umbp_stats *out);
int mori_umbp_get_from(mori_umbp *u, const char *node_address, const void *key, size_t key_len, void *dst, size_t cap, size_t *len);
int mori_umbp_batch_get_from(mori_umbp *u, const char *node_address, mori_umbp_item *items, size_t n, size_t *n_ok);
int mori_umbp_report_external_kv_blocks(mori_umbp *u, const mori_umbp_key *keys, size_t n, mori_umbp_tier tier);
int mori_umbp_revoke_external_kv_blocks(mori_umbp *u, const mori_umbp_key *keys, size_t n, mori_umbp_tier tier);
int mori_umbp_revoke_all_at_tier(mori_umbp *u, mori_umbp_tier tier, size_t *count);
int mori_umbp_match_external_kv(mori_umbp *u, const mori_umbp_key *keys, size_t n, int count_as_hit,
                                mori_umbp_external_kv_match **out, size_t *n_out);
void mori_umbp_external_kv_match_free(mori_umbp_external_kv_match *m, size_t n);
int mori_umbp_get_external_kv_hit_counts(mori_umbp *u, const mori_umbp_key *keys, size_t n, uint64_t *counts,
                                         uint8_t *present);
""")

# header -> its table, for mori._lib.bind and capi_check
HEADERS = {"mori.h": MORI_H, "mori_shmem.h": MORI_SHMEM_H, "mori_ep.h": MORI_EP_H, "mori_coll.h": MORI_COLL_H,
           "mori_cco.h": MORI_CCO_H,
           "mori_umbp.h": MORI_UMBP_H}


def ctypes_protos(table):
    """{name: (restype, argtypes)} of a table, for ctypes."""
    return {n: (ctype(r), [ctype(t) for t, _ in ps]) for n, (r, ps) in table.items()}
