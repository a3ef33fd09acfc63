"""mori.io: the IO engine, shaped like ROCm/mori's (python/mori/io), over libmori.

An IOEngine is one client of the node's morid. It registers memory (a torch tensor, CPU or
CUDA, any dtype, a view at an offset; a numpy array; a bytearray or any writable buffer; or a
(pointer, size, location) triple), hands out MemoryDesc objects that pack to bytes for the
peer, and moves bytes between its memory and a peer's with reads and writes: one range,
batches, and prepared descriptor lists submitted by index. Every transfer returns a
TransferStatus; a transfer can notify its target after the data has landed.

    from mori.io import IOEngine, IOEngineConfig
    eng = IOEngine("decode0", IOEngineConfig(runtime_dir="/run/mori"))
    kv = eng.register_torch_tensor(kv_cache)            # or eng.register(numpy_array)
    blob = kv.pack()                                     # send to the peer out of band
    peer = MemoryDesc.unpack(blob_from_peer)
    st = eng.read(kv, 0, peer, 4096, 32768)              # local <- remote
    st.wait(); st.result()                               # result() raises MoriError on failure

Differences from ROCm/mori, by design of the node service:
- morid owns the network side, so IOEngineConfig's host and port and the backends
  (create_backend, RdmaBackendConfig, ...) are accepted and ignored: the daemon picks the
  transport (same node: direct mappings; across nodes: its TCP streams or RDMA).
- Peers need not register each other's engines: a MemoryDesc carries the node that holds the
  memory. register_remote_engine/deregister_remote_engine keep the descriptor for lookup only.
- A transfer's notification is its transfer uid (a 64-bit tag); the target pops it with
  pop_inbound_transfer_status(remote_key, uid) or reads every one with poll_notifications().

Ownership: an engine owns the native objects behind its MemoryDescs, TransferStatuses,
PreparedLists and sessions. Close them with their close()/deregister calls or a with-block;
what is left is freed when its Python object is collected, and everything by engine.close().
At interpreter exit nothing blocking runs: the process's exit closes the session and morid
frees its registrations (notifications already submitted still reach their targets).
Every wait releases the GIL (ctypes does, for each foreign call).
"""
from .._lib import Desc, XferOpts, Notif, MEM_HOST, MEM_VRAM, OP_READ, OP_WRITE  # noqa: F401
from ..errors import MoriError
from .types import (BackendType, MemoryLocationType, StatusCode, PollCqMode, status_code,  # noqa: F401
                    RdmaBackendConfig, XgmiBackendConfig, FabricBackendConfig, TcpBackendConfig, set_log_level,
                    IOEngineConfig, EngineDesc, Notification)
from .desc import MemoryDesc, TransferStatus
from .engine import IOEngine, IOEngineSession, PreparedList
from .args import _torch_tensor  # noqa: F401 (mori.nixl_compat's)

__all__ = ["IOEngine", "IOEngineConfig", "IOEngineSession", "EngineDesc", "MemoryDesc", "TransferStatus", "OP_READ",
           "OP_WRITE", "PreparedList", "Notification", "BackendType", "MemoryLocationType", "StatusCode",
           "PollCqMode", "RdmaBackendConfig", "XgmiBackendConfig", "TcpBackendConfig", "FabricBackendConfig",
           "set_log_level", "status_code", "MoriError"]

# Shown and pickled as mori.io's, where ROCm/mori has them.
for _cls in (BackendType, MemoryLocationType, StatusCode, PollCqMode, RdmaBackendConfig, XgmiBackendConfig,
             FabricBackendConfig, TcpBackendConfig, IOEngineConfig, EngineDesc, Notification, MemoryDesc,
             TransferStatus, IOEngine, IOEngineSession, PreparedList):
    _cls.__module__ = __name__
del _cls
