"""mori.io's enums, configurations, EngineDesc and Notification: ROCm/mori's names (BackendType,
MemoryLocationType, StatusCode, the backend configs, IOEngineConfig) and how MORI_E* codes map to
its status codes. Import them from mori.io."""
import collections
import enum
import itertools
import json

from .. import _lib
from .._lib import MEM_HOST, MEM_VRAM
from ..errors import MoriError, Code, MORI_OK, MORI_EINVAL, MORI_EINPROGRESS, MORI_EPROTO


# ---------------------------------------------------------------------------------------------
# Enums and configurations (ROCm/mori's names)


class BackendType(enum.IntEnum):
    """Accepted for compatibility; morid chooses the transport itself."""
    Unknown = 0
    XGMI = 1
    RDMA = 2
    TCP = 3
    FABRIC = 4


class MemoryLocationType(enum.IntEnum):
    Unknown = 0
    CPU = 1
    GPU = 2


class StatusCode(enum.IntEnum):
    """ROCm/mori's transfer status codes; TransferStatus.code has mori's exact MORI_E* code."""
    SUCCESS = 0
    INIT = 1
    IN_PROGRESS = 2
    ERR_BEGIN = 10
    ERR_INVALID_ARGS = 11
    ERR_NOT_FOUND = 12
    ERR_RDMA_OP = 13
    ERR_BAD_STATE = 14
    ERR_GPU_OP = 15


class PollCqMode(enum.IntEnum):
    POLLING = 0
    EVENT = 1


_STATUS_OF = {
    MORI_OK: StatusCode.SUCCESS,
    MORI_EINPROGRESS: StatusCode.IN_PROGRESS,
    Code.EINVAL: StatusCode.ERR_INVALID_ARGS,
    Code.ERANGE: StatusCode.ERR_INVALID_ARGS,
    Code.EMSGSIZE: StatusCode.ERR_INVALID_ARGS,
    Code.ENOENT: StatusCode.ERR_NOT_FOUND,
    Code.EUNREACH: StatusCode.ERR_NOT_FOUND,
    Code.ESTALE: StatusCode.ERR_NOT_FOUND,
    Code.EIO: StatusCode.ERR_RDMA_OP,
    Code.ECONN: StatusCode.ERR_RDMA_OP,
    Code.ETIMEDOUT: StatusCode.ERR_RDMA_OP,
    Code.EPEERDEAD: StatusCode.ERR_RDMA_OP,
    Code.ENOGPU: StatusCode.ERR_GPU_OP,
    Code.ENOKERNEL: StatusCode.ERR_GPU_OP,
}


def status_code(mori_code):
    """The ROCm/mori StatusCode for a MORI_E* code."""
    return _STATUS_OF.get(mori_code, StatusCode.ERR_BAD_STATE)


def _location(loc):
    """MemoryLocationType from CPU/GPU, "cpu"/"cuda"/"DRAM"/"VRAM", or MORI_MEM_*."""
    if isinstance(loc, MemoryLocationType):
        if loc == MemoryLocationType.Unknown:
            raise MoriError(MORI_EINVAL, "memory location Unknown")
        return loc
    if isinstance(loc, str):
        m = {"cpu": MemoryLocationType.CPU, "host": MemoryLocationType.CPU,
             "dram": MemoryLocationType.CPU, "cuda": MemoryLocationType.GPU,
             "gpu": MemoryLocationType.GPU, "vram": MemoryLocationType.GPU}
        if loc.lower() in m:
            return m[loc.lower()]
    raise MoriError(MORI_EINVAL, "unknown memory location %r (CPU or GPU)" % (loc,))


def _kind(loc):
    return MEM_VRAM if loc == MemoryLocationType.GPU else MEM_HOST


class _Config:
    """Backend configurations with ROCm/mori's parameters, positional or by keyword. morid owns
    the transports, so none is used, except RdmaBackendConfig's enable_notification: given to
    create_backend, it becomes the engine's default for notifying transfers."""
    _params = ()

    def __init__(self, *args, **kw):
        if len(args) > len(self._params):
            raise TypeError("%s takes at most %d positional arguments" % (type(self).__name__, len(self._params)))
        for (name, default), v in itertools.zip_longest(self._params, args, fillvalue=_Config):
            setattr(self, name, default if v is _Config else v)
        for k, v in kw.items():
            if k not in dict(self._params):
                raise TypeError("%s has no parameter %r" % (type(self).__name__, k))
            setattr(self, k, v)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in self.__dict__.items()))


class RdmaBackendConfig(_Config):
    _params = (("qp_per_transfer", 1), ("post_batch_size", -1), ("num_worker_threads", -1),
               ("poll_cq_mode", PollCqMode.POLLING), ("enable_notification", True), ("notif_per_qp", 1024),
               ("enable_transfer_chunking", False), ("chunk_bytes", 65536), ("max_chunks_per_transfer", 64),
               ("num_nics_per_transfer", 1), ("max_send_wr", 0), ("max_cqe_num", 0), ("max_msg_sge", 0))


class XgmiBackendConfig(_Config):
    _params = (("num_streams", 64), ("num_events", 64))


class FabricBackendConfig(_Config):
    _params = (("num_streams", 64), ("num_events", 64))


class TcpBackendConfig(_Config):
    _params = ()


def set_log_level(level):
    """Accepted for compatibility: libmori does not log; morid's log level is its --log-level."""
    return None


class IOEngineConfig:
    """Where the engine's morid is and how its transfers behave.

    runtime_dir: the daemon's runtime directory (None: $MORI_RUNTIME_DIR, else /run/mori).
    timeout_ms: each transfer's deadline (0: libmori's default, 30 s).
    enable_notification: transfers notify their target with their transfer uid unless a call
        says notify=False (ROCm/mori's RDMA backend notifies by default too).
    host, port: ROCm/mori's engine listener; accepted and ignored (morid listens for the node).
    """

    def __init__(self, host="", port=0, runtime_dir=None, timeout_ms=0, enable_notification=True):
        self.host = host
        self.port = port
        self.runtime_dir = runtime_dir
        self.timeout_ms = timeout_ms
        self.enable_notification = enable_notification

    def __repr__(self):
        return "IOEngineConfig(runtime_dir=%r, timeout_ms=%r, enable_notification=%r)" % (
            self.runtime_dir, self.timeout_ms, self.enable_notification)


class EngineDesc:
    """Who an engine is: key, node_id (its morid's peer address, "" without a listener), host,
    port (parsed from node_id), hostname and pid. pack()/unpack() to bytes."""

    def __init__(self, key, node_id="", hostname="", pid=0):
        self.key = key
        self.node_id = node_id
        self.hostname = hostname
        self.pid = pid
        host, _, port = node_id.rpartition(":")
        self.host = host
        self.port = int(port) if port.isdigit() else 0

    def pack(self):
        return b"MORIENG1" + json.dumps({"key": self.key, "node": self.node_id,
                                         "hostname": self.hostname, "pid": self.pid}).encode()

    @staticmethod
    def unpack(b):
        b = _lib.as_blob(b, "EngineDesc.unpack: the packed desc")
        if not b.startswith(b"MORIENG1"):
            raise MoriError(MORI_EPROTO, "not a packed EngineDesc")
        try:
            d = json.loads(b[8:].decode())
            return EngineDesc(d["key"], d["node"], d["hostname"], d["pid"])
        except (ValueError, KeyError, TypeError) as e:
            raise MoriError(MORI_EPROTO, "corrupt EngineDesc: %s" % e)

    def __eq__(self, o):
        return isinstance(o, EngineDesc) and (self.key, self.node_id, self.pid) == (o.key, o.node_id, o.pid)

    def __hash__(self):
        return hash((self.key, self.node_id, self.pid))

    def __repr__(self):
        return "EngineDesc(key=%r, node_id=%r, pid=%r)" % (self.key, self.node_id, self.pid)


Notification = collections.namedtuple("Notification", "tag region_id from_pid")
Notification.__doc__ = """A notification addressed to this engine: tag (the initiator's transfer
uid), region_id (the engine's region the transfer touched), from_pid (the initiator's pid on
this node; 0 when it came from another node). It arrives only after the transfer's data."""
