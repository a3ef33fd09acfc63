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
import atexit
import collections
import copy
import ctypes
import enum
import errno
import itertools
import json
import mmap
import os
import socket
import struct
import sys
import threading
import time
import weakref
import zlib

from . import _lib
from ._lib import Desc, XferOpts, Notif, MEM_HOST, MEM_VRAM, OP_READ, OP_WRITE
from .errors import (MoriError, Code, MORI_OK, MORI_EINVAL, MORI_ENOENT, MORI_ERANGE,
                     MORI_EINPROGRESS, MORI_ECANCELED, MORI_EPROTO, MORI_EBUSY, MORI_ETIMEDOUT,
                     MORI_ENOTSUP, MORI_ENOMEM, MORI_ESYS)

_exiting = False
_now = time.monotonic


def _at_exit():
    global _exiting
    _exiting = True


atexit.register(_at_exit)


def _quiet(pid):
    """True where a finaliser must do nothing: interpreter exit, or a forked child (whose
    native objects belong to the parent's session)."""
    return _exiting or sys.is_finalizing() or os.getpid() != pid


def _numpy():
    np = sys.modules.get("numpy")
    if np is None:
        try:
            import numpy as np
        except ImportError:
            return None
    return np


def _torch_tensor(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


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


# ---------------------------------------------------------------------------------------------
# Native handles


class _Mem:
    """A mori_mem the engine owns: a local registration, or a peer's region it opened. Holds
    what keeps the memory valid (the tensor, array or buffer export) until deregistration.
    A local one holds its engine open (its desc may outlive every other reference to the
    engine); a peer's, cached by the engine, refers to it weakly, so that an engine dropped
    without close() is not kept alive by its own cache."""

    def __init__(self, engine, ptr, local, loc, size, keep=None):
        self._engine = engine if local else weakref.ref(engine)
        self.ptr = ptr
        self.local = local
        self.loc = loc
        self.size = size
        self.keep = keep
        self.closed = False
        self.alloc = False  # libmori's memory (allocate): its buffer() views map it themselves
        self.dup = None     # weakref to the _Dup those views share
        self._pid = os.getpid()

    @property
    def engine(self):
        return self._engine if self.local else self._engine()

    def release(self):
        e = self.engine
        if e is not None:
            e._release_mem(self)

    def __del__(self):
        if not self.closed and not _quiet(self._pid):
            try:
                self.release()
            except Exception:
                pass


_libc_fns = None


def _libc():
    global _libc_fns
    if _libc_fns is None:
        libc = ctypes.CDLL(None, use_errno=True)  # an instance of our own: its prototypes are ours
        libc.mremap.restype, libc.mremap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t,
                                                                      ctypes.c_size_t, ctypes.c_int]
        libc.munmap.restype, libc.munmap.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]
        _libc_fns = libc
    return _libc_fns


class _Dup:
    """A second mapping of an allocate()d region's pages, owned by that region's buffer() views
    (each holds it; unmapped when the last is collected). libmori's mapping goes at
    deregister_memory or engine.close(); this one stays, so a view used after them reads and
    writes the same pages instead of unmapped memory (numpy-over-mmap semantics: the memory lives
    while a view does). mremap with old_size 0 duplicates a shared mapping (mori_mem_alloc's is
    a MAP_SHARED memfd)."""

    def __init__(self, addr, size):
        self.len = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
        p = _libc().mremap(addr, 0, self.len, 1)  # MREMAP_MAYMOVE: anywhere
        if p is None or p == ctypes.c_void_p(-1).value:
            e = ctypes.get_errno()
            raise MoriError(MORI_ENOMEM if e == errno.ENOMEM else MORI_ESYS,
                            "buffer(): mapping the region for its view: %s" % os.strerror(e))
        self.addr = p

    def __del__(self):
        try:
            _libc().munmap(self.addr, self.len)  # in a forked child: the child's copy of it
        except Exception:
            pass  # interpreter exit: the process's end unmaps it


_MD_MAGIC = b"MORIMD1"
_MD_HEAD = struct.Struct("<BhQQH")  # loc, device_id, data, size, len(engine_key)


class MemoryDesc:
    """A registered region: engine_key, id, device_id, data (its address in the owner's
    process), size (bytes), loc (MemoryLocationType), name (published name or None).

    pack() gives bytes to send to a peer; MemoryDesc.unpack(bytes) makes the peer's copy, which
    any engine can use as the remote side of a transfer (it opens the region on first use and
    keeps it open until deregister_memory(desc) or its close). A desc is also usable by other
    engines of the same process, as a remote region."""

    def __init__(self, engine_key, id, device_id, data, size, loc, blob, mem=None, name=None):
        self.engine_key = engine_key
        self.id = id
        self.device_id = device_id
        self.data = data
        self.size = size
        self.loc = loc
        self.blob = blob
        self.name = name
        self._mem = mem

    @property
    def is_local(self):
        """True for a region registered by an engine of this process (still registered)."""
        return self._mem is not None and self._mem.local and not self._mem.closed

    @property
    def ptr(self):
        """The local address (a local desc), else 0."""
        return self.data if self.is_local else 0

    def buffer(self):
        """A writable memoryview over a local host region. It keeps the memory alive: the
        registered object (register), or for allocate() a mapping of the region's pages of its
        own, so the view stays valid after deregister_memory or engine.close() (its bytes are
        then this process's alone). Memory of register_memory(ptr) stays the caller's to keep."""
        if not self.is_local or self.loc != MemoryLocationType.CPU:
            raise MoriError(MORI_EINVAL, "buffer(): only a registered local host region has one")
        m = self._mem
        e = m.engine
        with e._lock:  # deregister and close mark m closed under it before libmori unmaps
            if m.closed:
                raise MoriError(MORI_ENOENT, "buffer(): %r was deregistered" % (self,))
            if m.alloc:
                dup = m.dup() if m.dup is not None else None
                if dup is None:
                    dup = _Dup(self.data, self.size)
                    m.dup = weakref.ref(dup)
                arr = (ctypes.c_char * self.size).from_address(dup.addr)
                arr._mori_keep = dup
            else:
                arr = (ctypes.c_char * self.size).from_address(self.data)
                arr._mori_keep = m.keep  # the registered object and its export: not freed, not resized
        arr._mori_mem = m  # and a live view keeps the registration from being collected
        return memoryview(arr).cast("B")

    def pack(self):
        key = self.engine_key.encode()
        name = (self.name or "").encode()
        return (_MD_MAGIC + _MD_HEAD.pack(int(self.loc), self.device_id, self.data, self.size, len(key)) +
                key + bytes([len(self.blob)]) + self.blob + bytes([len(name)]) + name)

    @staticmethod
    def unpack(b):
        b = _lib.as_blob(b, "MemoryDesc.unpack: the packed desc")
        try:
            if not b.startswith(_MD_MAGIC):
                raise ValueError("no magic")
            o = len(_MD_MAGIC)
            loc, dev, data, size, klen = _MD_HEAD.unpack_from(b, o)
            o += _MD_HEAD.size
            key = b[o:o + klen].decode()
            o += klen
            blen = b[o]
            blob = b[o + 1:o + 1 + blen]
            o += 1 + blen
            nlen = b[o]
            name = b[o + 1:o + 1 + nlen].decode() or None
            if len(blob) != blen or o + 1 + nlen != len(b) or not blen:
                raise ValueError("truncated")
            return MemoryDesc(key, 0, dev, data, size, MemoryLocationType(loc), blob, name=name)
        except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
            raise MoriError(MORI_EPROTO, "not a packed MemoryDesc (%s)" % e)

    def __eq__(self, o):
        return isinstance(o, MemoryDesc) and self.blob == o.blob

    def __hash__(self):
        return hash(self.blob)

    def __repr__(self):
        return "MemoryDesc(engine_key=%r, id=%r, loc=%s, size=%d%s)" % (
            self.engine_key, self.id, self.loc.name, self.size, ", local" if self.is_local else "")


def _flag(v, what):
    """A yes/no argument: a bool (numpy's too) or 0/1; anything else (a str, 2) is MORI_EINVAL
    rather than silently true."""
    np = sys.modules.get("numpy")
    if isinstance(v, bool) or (np is not None and isinstance(v, np.bool_)):
        return bool(v)
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise MoriError(MORI_EINVAL, "%s must be True or False (or None for the default), not %r" % (what, v))


def _opts(engine, uid, notify, timeout_ms, stream):
    o = XferOpts()
    notify = _flag(engine._config.enable_notification if notify is None else notify, "notify")
    if notify:
        o.has_notif = 1
        o.notif_tag = _lib.ival(uid, "transfer_uid", ctypes.c_uint64)
    t = engine._config.timeout_ms if timeout_ms is None else timeout_ms
    us = 0 if t is None else _lib.duration_us(t, "timeout_ms", 1000)
    o.timeout_us = us if us > 0 else 0
    if stream is not None:
        o.stream = getattr(stream, "cuda_stream", stream)
    return o


class TransferStatus:
    """One transfer (a range, a batch, or indices of a prepared list), with ROCm/mori's status
    methods (Code, Message, InProgress, Succeeded, Failed, Wait, WaitFor) and Python ones:

      done       True once finished (successfully or not)
      code       MORI_OK, MORI_EINPROGRESS, or the transfer's MORI_E* error
      message    the error's detail ("" on success)
      error      a MoriError for a failed transfer, else None
      wait(timeout=None)    block up to timeout seconds (None: the transfer's own deadline);
                            True once finished, False if this wait expired first
      result(timeout=None)  wait, then raise MoriError if it failed (MORI_ETIMEDOUT if the
                            wait expired first)
      cancel()   ask for cancellation: an unfinished transfer ends with MORI_ECANCELED
      bytes, transfer_uid
    Once finished, the native handle is freed at once; close() frees an unfinished one
    (cancelling it). Dropping an unfinished status neither blocks nor cancels: the engine frees
    the handle once it completes."""

    def __init__(self, engine, xptr, lmem, rmem, plist, uid, nbytes, code=None, message=""):
        self._engine = engine  # holds the engine (and the regions) open while the handle lives
        self._x = xptr
        self._lmem = lmem
        self._rmem = rmem
        self._plist = plist
        self.transfer_uid = uid
        self.bytes = nbytes
        self._code = code
        self._msg = message
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @classmethod
    def _completed(cls, code, message="", uid=0, nbytes=0):
        return cls(None, None, None, None, None, uid, nbytes, code, message)

    # the native handle's end: called with self._lock held
    def _record(self, rc, msg):
        self._code = rc
        self._msg = msg
        x, self._x = self._x, None
        if x is not None:
            self._engine._free_xfer(x)

    def _poll(self):
        """The current code; frees the native handle once finished."""
        if self._code is not None:
            return self._code
        with self._lock:
            if self._code is not None:
                return self._code
            if not self._engine._owns_xfer(self._x):
                self._code, self._x = MORI_ECANCELED, None
                self._msg = "the transfer's engine or region was closed"
                return self._code
            m = ctypes.c_char_p()
            rc = _lib.load().mori_xfer_status(self._x, ctypes.byref(m))
            if rc != MORI_EINPROGRESS:
                self._record(rc, m.value.decode("utf-8", "replace") if m.value else "")
            return rc

    def _force(self, wait_us, why):
        """The engine's end of this transfer (a region or the engine closing): wait up to
        wait_us, then record the result, or MORI_ECANCELED with `why`, and free the handle."""
        with self._lock:
            if self._x is None:
                return
            lib = _lib.load()
            lib.mori_xfer_wait(self._x, wait_us)
            m = ctypes.c_char_p()
            rc = lib.mori_xfer_status(self._x, ctypes.byref(m))
            msg = m.value.decode("utf-8", "replace") if m.value else ""
            if rc == MORI_EINPROGRESS:
                rc, msg = MORI_ECANCELED, why
            self._record(rc, msg)

    @property
    def done(self):
        return self._poll() != MORI_EINPROGRESS

    @property
    def code(self):
        return self._poll()

    @property
    def ok(self):
        return self._poll() == MORI_OK

    @property
    def message(self):
        rc = self._poll()
        return "in progress" if rc == MORI_EINPROGRESS else self._msg

    @property
    def error(self):
        rc = self._poll()
        return None if rc in (MORI_OK, MORI_EINPROGRESS) else MoriError(rc, self._msg)

    def wait(self, timeout=None):
        us = -1 if timeout is None else _lib.duration_us(timeout, "wait: timeout (s)", 1000000)
        us = -1 if us < 0 else us
        if self._poll() != MORI_EINPROGRESS:
            return True
        with self._lock:
            if self._code is not None:
                return True
            if not self._engine._owns_xfer(self._x):
                return True  # _poll reports it
            rc = _lib.load().mori_xfer_wait(self._x, us)  # the GIL is released while waiting
            if rc == MORI_ETIMEDOUT and _lib.load().mori_xfer_status(self._x, None) == MORI_EINPROGRESS:
                return False
        return self._poll() != MORI_EINPROGRESS

    def result(self, timeout=None):
        if not self.wait(timeout):
            raise MoriError(MORI_ETIMEDOUT, "wait of %s s expired (the transfer continues)" % timeout)
        err = self.error
        if err is not None:
            raise err

    def cancel(self):
        with self._lock:
            if self._code is None and self._engine._owns_xfer(self._x):
                _lib.load().mori_xfer_cancel(self._x)

    def close(self):
        """Free the native handle now (an unfinished transfer is cancelled first: a bounded wait
        for the daemon's answer)."""
        with self._lock:
            if self._code is None:
                x, self._x = self._x, None
                self._code, self._msg = MORI_ECANCELED, "closed before it finished"
                if x is not None:
                    self._engine._free_xfer(x)

    release = close

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def __del__(self):
        if self._x is not None and not _quiet(self._pid):
            try:
                self._engine._drop_xfer(self._x)
            except Exception:
                pass

    # ROCm/mori names
    def Code(self):
        return status_code(self._poll())

    def Message(self):
        return self.message

    def InProgress(self):
        return self._poll() == MORI_EINPROGRESS

    def Succeeded(self):
        return self._poll() == MORI_OK

    def Failed(self):
        return self._poll() not in (MORI_OK, MORI_EINPROGRESS)

    def Init(self):
        return False

    def Wait(self):
        self.wait()

    def WaitFor(self, timeout_ms=-1):
        us = _lib.duration_us(timeout_ms, "WaitFor: timeout_ms", 1000)
        self.wait(None if us < 0 else us / 1e6)
        return self.Code()

    def __repr__(self):
        rc = self._poll()
        return "TransferStatus(uid=%#x, %s%s)" % (self.transfer_uid, _lib_code_name(rc),
                                                  ": " + self._msg if self._msg else "")


def _lib_code_name(rc):
    from .errors import code_name
    return code_name(rc)


# ---------------------------------------------------------------------------------------------
# Descriptor and index arrays, built without a Python loop where numpy is there


def _length(v, what):
    try:
        return len(v)
    except TypeError:
        raise MoriError(MORI_EINVAL, "%s must be a list of ints, not %s" % (what, type(v).__name__)) from None


def _u64_column(np, v, what):
    """v (a sequence of ints or an integer numpy array) as a flat uint64 array: MORI_EINVAL for
    non-integers (floats, bools: numpy would truncate them), MORI_ERANGE outside 0..2^64-1."""
    a = np.asarray(v)
    if a.dtype.kind in "iu" and a.ndim == 1:
        if a.dtype.kind == "i" and a.size and a.min() < 0:
            raise MoriError(MORI_ERANGE, "negative offset or size in %s" % what)
        return a.astype(np.uint64, copy=False)
    if a.dtype.kind == "O" or a.size == 0:  # ints past int64/uint64 (each checked), or nothing
        return np.array([_lib.ival(x, what) for x in a.reshape(-1)], dtype=np.uint64)
    raise MoriError(MORI_EINVAL, "%s must be ints, not %s" % (what, a.dtype if a.ndim == 1 else "a %d-d array" % a.ndim))


def _desc_array(local_offsets, remote_offsets, sizes):
    """(keep-alive object, address, n) of a mori_desc array. Every value through _lib.ival's rule:
    integers only, 0..2^64-1 (MORI_EINVAL / MORI_ERANGE)."""
    np = _numpy()
    one = not hasattr(sizes, "__len__")  # one size for all
    if one:
        sizes = _lib.ival(sizes, "size")
    n = _length(local_offsets, "local_offsets")
    if _length(remote_offsets, "remote_offsets") != n or (not one and _length(sizes, "sizes") != n):
        raise MoriError(MORI_EINVAL, "offsets and sizes differ in length (%d local, %d remote, %s sizes)" % (
            n, len(remote_offsets), sizes if one else len(sizes)))
    if n == 0:
        return None, None, 0
    if np is not None:
        a = np.empty((n, 3), dtype=np.uint64)
        a[:, 0] = _u64_column(np, local_offsets, "local_offsets")
        a[:, 1] = _u64_column(np, remote_offsets, "remote_offsets")
        a[:, 2] = sizes if one else _u64_column(np, sizes, "sizes")
        return a, a.ctypes.data, n
    sz = [sizes] * n if one else list(sizes)
    arr = (Desc * n)()
    for i, (lo, ro, s) in enumerate(zip(local_offsets, remote_offsets, sz)):
        arr[i] = Desc(_lib.ival(lo, "local offset"), _lib.ival(ro, "remote offset"), _lib.ival(s, "size"))
    return arr, ctypes.addressof(arr), n


def _index_array(indices):
    np = _numpy()
    if np is not None:
        a = np.asarray(indices).reshape(-1)
        if a.size and a.dtype.kind not in "iu":  # numpy would truncate floats and bools
            if a.dtype.kind != "O":
                raise MoriError(MORI_EINVAL, "indices must be ints, not %s" % a.dtype)
            a = np.array([_lib.ival(i, "index", ctypes.c_uint32) for i in a], dtype=np.int64)
        if a.size and (a.min() < 0 or a.max() > 0xFFFFFFFF):
            raise MoriError(MORI_ERANGE, "index outside 0..2^32-1")
        a = np.ascontiguousarray(a, dtype=np.uint32)
        return a, (a.ctypes.data if a.size else None), int(a.size)
    idx = [_lib.ival(i, "index", ctypes.c_uint32) for i in indices]
    arr = (ctypes.c_uint32 * len(idx))(*idx)
    return arr, (ctypes.addressof(arr) if idx else None), len(idx)


def _buffer_of(obj):
    """(address, size, keep) of a writable, C-contiguous buffer (bytearray, numpy array,
    memoryview, array.array, mmap). keep holds an export of the buffer: while it lives the
    object cannot be resized."""
    try:
        mv = memoryview(obj)
    except TypeError:
        raise MoriError(MORI_EINVAL, "cannot register %s: not a tensor, array or buffer" % type(obj).__name__)
    if mv.readonly:
        raise MoriError(MORI_EINVAL, "cannot register a read-only buffer (%s): peers may write to it" %
                        type(obj).__name__)
    if not mv.c_contiguous:
        raise MoriError(MORI_EINVAL, "cannot register a non-contiguous buffer")
    if mv.nbytes == 0:
        raise MoriError(MORI_EINVAL, "cannot register an empty buffer")
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B")
    arr = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(arr), mv.nbytes, (obj, mv, arr)


# ---------------------------------------------------------------------------------------------
# The engine


class IOEngine:
    """A client of the local morid, named by key (shown by `moractl clients`).
    Raises MoriError (MORI_ECONN when no daemon answers, MORI_EPERM, MORI_EVERSION) on open."""

    def __init__(self, key, config=None):
        self._config = copy.copy(config) if config is not None else IOEngineConfig()  # create_backend may change it
        self.key = str(key)
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._c = None
        lib = _lib.load()
        c = ctypes.c_void_p()
        rd = _lib.as_bytes(self._config.runtime_dir, "runtime_dir")
        _lib.check(lib.mori_client_open(rd, self.key.encode(), ctypes.byref(c)), "open engine %r" % self.key)
        self._c = c.value
        node = lib.mori_client_node(self._c)
        self.node = node.decode() if node else ""
        # native handles this engine owns: pointer -> what must stay alive with it
        self._xfers = {}    # mori_xfer* -> (local _Mem, remote _Mem, PreparedList or None, weakref to status)
        self._orphans = set()
        self._orphan_lists = set()
        self._lists = {}    # mori_xfer_list* -> (local _Mem, remote _Mem)
        self._mems = weakref.WeakValueDictionary()  # id -> local _Mem
        self._remote = {}   # blob -> remote _Mem (opened peers' regions)
        self._ids = itertools.count(1)
        self._uid_hi = (zlib.crc32(self.key.encode()) & 0xFFFFFF) << 40
        self._uids = itertools.count(1)
        self._inbox = collections.deque()
        self._remote_engines = {}
        self._backends = {}

    # ---- life cycle ----

    def _client(self):
        if os.getpid() != self._pid:
            raise MoriError(MORI_EINVAL, "engine %r was opened by pid %d: open a new one after fork" %
                            (self.key, self._pid))
        if self._c is None:
            raise MoriError(MORI_EINVAL, "engine %r is closed" % self.key)
        return self._c

    @property
    def closed(self):
        return self._c is None

    def close(self):
        """Free every transfer (cancelling unfinished ones), prepared list and registration, then
        close the session. Idempotent. Must not race with other calls on this engine."""
        if self._c is None or os.getpid() != self._pid:
            return
        lib = _lib.load()
        self._settle(lambda l, r: True, 0, "engine closed")
        with self._lock:
            mems = list(self._mems.values()) + list(self._remote.values())
            self._remote.clear()
            c, self._c = self._c, None
        for m in mems:
            m.closed = True
            m.keep = None
        lib.mori_client_close(c)  # deregisters what is left

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def __del__(self):
        if getattr(self, "_c", None) is not None and not _quiet(self._pid):
            try:
                self.close()
            except Exception:
                pass

    # ---- native bookkeeping (every free goes through these, so nothing is freed twice) ----

    def _owns_xfer(self, x):
        with self._lock:
            return x is not None and x in self._xfers

    def _free_xfer(self, x):
        with self._lock:
            if self._xfers.pop(x, None) is None:
                return
            self._orphans.discard(x)
        _lib.load().mori_xfer_free(x)

    def _drop_xfer(self, x):
        """A status was dropped: free its handle if the transfer has finished, else keep it as an
        orphan that _reap frees once it has (never blocking, never cancelling)."""
        with self._lock:
            if x not in self._xfers:
                return
            if _lib.load().mori_xfer_status(x, None) == MORI_EINPROGRESS:
                self._orphans.add(x)
                return
        self._free_xfer(x)

    def _drop_list(self, p):
        """A prepared list was dropped: free it now, or once its orphaned transfers are done."""
        with self._lock:
            if p not in self._lists:
                return
            if any(ent[2] is not None and ent[2]._p == p for ent in self._xfers.values()):
                self._orphan_lists.add(p)
                return
            del self._lists[p]
        _lib.load().mori_xfer_list_free(p)

    def _reap(self):
        """Free orphaned transfers that have finished, then orphaned lists left idle (no wait)."""
        if not self._orphans and not self._orphan_lists:
            return
        lib = _lib.load()
        with self._lock:
            done = [x for x in self._orphans if lib.mori_xfer_status(x, None) != MORI_EINPROGRESS]
        for x in done:
            self._free_xfer(x)
        for p in list(self._orphan_lists):
            with self._lock:
                self._orphan_lists.discard(p)
            self._drop_list(p)

    def _settle(self, pred, wait_us, why):
        """End the transfers and free the lists for which pred(local, remote) holds: wait up to
        wait_us (in all) for transfers still running, then cancel them (their statuses, if still
        held, report MORI_ECANCELED with `why`; finished ones keep their result)."""
        lib = _lib.load()
        with self._lock:
            xs = [(x, e[3]) for x, e in self._xfers.items() if pred(e[0], e[1])]
            ls = [p for p, (l, r) in self._lists.items() if pred(l, r)]
        deadline = _now() + wait_us / 1e6
        for x, ref in xs:
            left = max(0, int((deadline - _now()) * 1e6))
            st = ref() if ref is not None else None
            if st is not None:
                st._force(left, why)
            elif self._owns_xfer(x):
                lib.mori_xfer_wait(x, left)
                self._free_xfer(x)
        for p in ls:
            with self._lock:
                self._orphan_lists.discard(p)
                if self._lists.pop(p, None) is None:
                    continue
            lib.mori_xfer_list_free(p)

    def _release_mem(self, m):
        with self._lock:
            if m.closed or self._c is None:
                m.closed = True
                return
            m.closed = True
            for k, v in list(self._remote.items()):
                if v is m:
                    del self._remote[k]
        self._settle(lambda l, r: l is m or r is m, 1000000, "its region was deregistered")
        rc = _lib.load().mori_mem_deregister(m.ptr)
        m.keep = None
        _lib.check(rc, "deregister")

    # ---- memory ----

    def _register(self, ptr, size, loc, device_id, keep):
        c = self._client()
        loc = _location(loc)
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise MoriError(MORI_EINVAL, "register: size must be a positive int, not %r" % (size,))
        size, ptr = _lib.ival(size, "register: size", ctypes.c_size_t), _lib.ival(ptr, "register: ptr", ctypes.c_void_p)
        out = ctypes.c_void_p()
        _lib.check(_lib.load().mori_mem_register(c, ctypes.c_void_p(ptr), size, _kind(loc), ctypes.byref(out)),
                   "register %d bytes at %#x" % (size, ptr))
        return self._local_desc(out.value, ptr, size, loc, device_id, keep)

    def _local_desc(self, mptr, addr, size, loc, device_id, keep):
        m = _Mem(self, mptr, True, loc, size, keep)
        blob = self._pack(mptr)
        i = next(self._ids)
        with self._lock:
            self._mems[i] = m
        return MemoryDesc(self.key, i, device_id, addr, size, loc, blob, mem=m)

    def _pack(self, mptr):
        buf = ctypes.create_string_buffer(_lib.MEM_BLOB_MAX)
        n = ctypes.c_size_t()
        _lib.check(_lib.load().mori_mem_pack(mptr, buf, _lib.MEM_BLOB_MAX, ctypes.byref(n)), "pack")
        return buf.raw[:n.value]

    def register_memory(self, ptr, size, device_id=-1, mem_loc=MemoryLocationType.CPU):
        """ROCm/mori's form: register `size` bytes at address `ptr` (an int) in host memory
        (MemoryLocationType.CPU) or GPU memory (GPU). The caller keeps the memory valid until
        deregister_memory. Errors: MORI_EINVAL (bad pointer, size or location; a GPU pointer
        registered as CPU or the reverse), MORI_EBUSY (overlaps a registration of this engine),
        MORI_ENOGPU, MORI_ENOTSUP (GPU memory that cannot be shared, e.g. managed memory)."""
        if not isinstance(ptr, int) or ptr <= 0:
            raise MoriError(MORI_EINVAL, "register_memory: ptr must be a non-null address (int), not %r" % (ptr,))
        return self._register(ptr, size, mem_loc, device_id, None)

    def register_torch_tensor(self, tensor):
        """A contiguous torch tensor, CPU or CUDA, any dtype, also a view at an offset (its
        data_ptr() is where the registration starts). The desc keeps the tensor alive."""
        if not _torch_tensor(tensor):
            raise MoriError(MORI_EINVAL, "register_torch_tensor: not a torch.Tensor")
        if not tensor.is_contiguous():
            raise MoriError(MORI_EINVAL, "register_torch_tensor: tensor must be contiguous")
        size = tensor.numel() * tensor.element_size()
        if size == 0:
            raise MoriError(MORI_EINVAL, "register_torch_tensor: empty tensor")
        if tensor.device.type == "cuda":
            loc, dev = MemoryLocationType.GPU, tensor.device.index or 0
        elif tensor.device.type == "cpu":
            loc, dev = MemoryLocationType.CPU, -1
        else:
            raise MoriError(MORI_ENOTSUP, "register_torch_tensor: device %s" % tensor.device)
        return self._register(tensor.data_ptr(), size, loc, dev, tensor)

    def register(self, obj, device_id=None):
        """Register a torch tensor, an object with __cuda_array_interface__ (CuPy, Numba), or any
        writable C-contiguous buffer (numpy array, bytearray, memoryview, array.array, mmap).
        The desc keeps the object alive; a bytearray cannot be resized while registered."""
        if _torch_tensor(obj):
            return self.register_torch_tensor(obj)
        cai = getattr(obj, "__cuda_array_interface__", None)
        if cai is not None:
            ptr, ro = cai["data"]
            if ro:
                raise MoriError(MORI_EINVAL, "register: read-only GPU array")
            if cai.get("strides") is not None:
                raise MoriError(MORI_EINVAL, "register: GPU array must be C-contiguous")
            n = 1
            for d in cai["shape"]:
                n *= d
            size = n * int(cai["typestr"][2:])
            return self._register(ptr, size, MemoryLocationType.GPU, 0 if device_id is None else device_id, obj)
        ptr, size, keep = _buffer_of(obj)
        return self._register(ptr, size, MemoryLocationType.CPU, -1 if device_id is None else device_id, keep)

    def allocate(self, size, loc=MemoryLocationType.CPU):
        """Allocate and register `size` zero-filled bytes with libmori (mori_mem_alloc): host memory
        peers on this node map zero-copy (desc.buffer() gives a view), or VRAM on GPU
        $MORI_GPU_DEVICE (rounded up to the driver's granularity). Freed by deregister_memory."""
        c = self._client()
        loc = _location(loc)
        out = ctypes.c_void_p()
        lib = _lib.load()
        size = _lib.ival(size, "allocate: size", ctypes.c_size_t)
        _lib.check(lib.mori_mem_alloc(c, size, _kind(loc), ctypes.byref(out)), "allocate %s bytes" % size)
        ptr = lib.mori_mem_ptr(out.value) or 0
        dev = int(os.environ.get("MORI_GPU_DEVICE", "0") or 0) if loc == MemoryLocationType.GPU else -1
        d = self._local_desc(out.value, ptr, lib.mori_mem_size(out.value), loc, dev, None)
        d._mem.alloc = True
        return d

    def deregister_memory(self, desc):
        """Deregister a local region (waiting up to 1 s for its transfers, then cancelling them;
        peers' later transfers on it fail with MORI_ESTALE), or close this engine's handle on a
        peer's region. Idempotent."""
        if not isinstance(desc, MemoryDesc):
            raise MoriError(MORI_EINVAL, "deregister_memory: not a MemoryDesc")
        m = desc._mem if desc._mem is not None and desc._mem.engine is self else self._remote.get(desc.blob)
        if m is not None:
            m.release()

    def publish(self, desc, name):
        """Publish a local region under `name` (1..127 printable bytes) in this node's morid, for
        peers' open_remote. Errors: MORI_EEXIST (taken), MORI_EINVAL."""
        m = self._own(desc)
        _lib.check(_lib.load().mori_mem_publish(m.ptr, _lib.as_bytes(name, "name")), "publish %r" % name)
        desc.name = name

    def open_remote(self, name, node=None):
        """Open the region published as `name` at `node` ("host:port" of that node's morid; None
        for this node). Errors: MORI_EUNREACH (not published there), MORI_ECONN, MORI_ETIMEDOUT."""
        c = self._client()
        out = ctypes.c_void_p()
        lib = _lib.load()
        _lib.check(lib.mori_mem_open_remote(c, _lib.as_bytes(node or "", "node"), _lib.as_bytes(name, "name"),
                                            ctypes.byref(out)), "open %r at %s" % (name, node or "this node"))
        blob = self._pack(out.value)
        with self._lock:
            old = self._remote.get(blob)
            if old is None:
                size = lib.mori_mem_size(out.value)
                m = self._remote[blob] = _Mem(self, out.value, False, MemoryLocationType.Unknown, size)
        if old is not None:  # already open: keep one handle
            lib.mori_mem_deregister(out.value)
            m = old
        return MemoryDesc("", 0, -1, 0, m.size, MemoryLocationType.Unknown, blob, mem=m, name=name)

    def _own(self, desc):
        if not isinstance(desc, MemoryDesc):
            raise MoriError(MORI_EINVAL, "expected a MemoryDesc, not %s" % type(desc).__name__)
        m = desc._mem
        if m is None or m.engine is not self or not m.local:
            raise MoriError(MORI_EINVAL, "%r is not a region of engine %r" % (desc, self.key))
        if m.closed:
            raise MoriError(MORI_ENOENT, "%r was deregistered" % (desc,))
        return m

    def _peer(self, desc):
        """The mori_mem for the remote side: a region of this engine, one it opened, or one it
        opens now from the desc's blob."""
        if not isinstance(desc, MemoryDesc):
            raise MoriError(MORI_EINVAL, "expected a MemoryDesc, not %s" % type(desc).__name__)
        m = desc._mem
        if m is not None and m.engine is self:
            if m.closed:
                raise MoriError(MORI_ENOENT, "%r was deregistered or closed" % (desc,))
            return m
        with self._lock:
            m = self._remote.get(desc.blob)
        if m is not None:
            return m
        c = self._client()
        lib = _lib.load()
        out = ctypes.c_void_p()
        _lib.check(lib.mori_mem_unpack(c, desc.blob, len(desc.blob), ctypes.byref(out)), "open %r" % (desc,))
        with self._lock:
            m = self._remote.get(desc.blob)
            if m is None:
                m = self._remote[desc.blob] = _Mem(self, out.value, False, desc.loc, lib.mori_mem_size(out.value))
                return m
        lib.mori_mem_deregister(out.value)
        return m

    # ---- remote engines and backends (bookkeeping only) ----

    def get_engine_desc(self):
        return EngineDesc(self.key, self.node, socket.gethostname(), self._pid)

    def register_remote_engine(self, engine_desc):
        self._remote_engines[engine_desc.key] = engine_desc

    def deregister_remote_engine(self, engine_desc):
        self._remote_engines.pop(engine_desc.key, None)

    def create_backend(self, type, config=None):
        """Accepted: morid picks the transport (same node: direct mappings; across nodes: TCP
        streams or RDMA, its `transport` option). A config's enable_notification (RDMA) sets
        whether this engine's transfers notify by default, as it does in ROCm/mori."""
        self._backends[BackendType(type)] = config
        if getattr(config, "enable_notification", None) is not None:
            self._config.enable_notification = bool(config.enable_notification)
        return None

    def remove_backend(self, type):
        self._backends.pop(BackendType(type), None)

    # ---- transfers ----

    def allocate_transfer_uid(self):
        """A transfer uid, unique in this engine; its top 24 bits hash the engine's key so that
        uids of different engines rarely collide at a target."""
        return self._uid_hi | (next(self._uids) & 0xFFFFFFFFFF)

    def _submit(self, call, lmem, rmem, plist, uid):
        """Run a submission (a function of the out pointer) and wrap its handle."""
        self._reap()
        x = ctypes.c_void_p()
        _lib.check(call(ctypes.byref(x)), "transfer")
        st = TransferStatus(self, x.value, lmem, rmem, plist, uid, _lib.load().mori_xfer_bytes(x.value))
        with self._lock:
            self._xfers[x.value] = (lmem, rmem, plist, weakref.ref(st))
        return st

    def _xfer(self, op, local, remote, local_offsets, remote_offsets, sizes, uid, notify, timeout_ms, stream):
        lm, rm = self._own(local), self._peer(remote)
        self._client()
        if uid is None:
            uid = self.allocate_transfer_uid()
        o = _opts(self, uid, notify, timeout_ms, stream)
        lib = _lib.load()
        if not hasattr(local_offsets, "__len__"):  # one range: ints (numpy's too), 0..2^64-1
            local_offsets = _lib.ival(local_offsets, "local_offset")
            remote_offsets, sizes = _lib.ival(remote_offsets, "remote_offset"), _lib.ival(sizes, "size")
            f = lib.mori_read if op == OP_READ else lib.mori_write
            return self._submit(lambda out: f(lm.ptr, local_offsets, rm.ptr, remote_offsets, sizes,
                                              ctypes.byref(o), out), lm, rm, None, uid)
        keep, addr, n = _desc_array(local_offsets, remote_offsets, sizes)
        return self._submit(lambda out: lib.mori_xfer_batch(op, lm.ptr, rm.ptr, addr, n, ctypes.byref(o), out),
                            lm, rm, None, uid)

    def batch_descs(self, op, local, remote, descs, transfer_uid=None, *, notify=None, timeout_ms=None,
                    stream=None):
        """One batch from an array the caller built: descs is a C-contiguous (n, 3) uint64 numpy
        array of (local offset, remote offset, length) rows; op "READ" or "WRITE" (or OP_READ,
        OP_WRITE). No copy on the Python side (libmori copies the descriptors)."""
        op = {"READ": OP_READ, "WRITE": OP_WRITE}.get(op, op)
        if op not in (OP_READ, OP_WRITE):
            raise MoriError(MORI_EINVAL, "unknown operation %r (READ or WRITE)" % (op,))
        np = _numpy()
        if np is None or not isinstance(descs, np.ndarray) or descs.dtype != np.uint64 or descs.ndim != 2 \
                or descs.shape[1] != 3 or not descs.flags.c_contiguous:
            raise MoriError(MORI_EINVAL, "batch_descs: descs must be a C-contiguous (n, 3) uint64 array")
        lm, rm = self._own(local), self._peer(remote)
        self._client()
        if transfer_uid is None:
            transfer_uid = self.allocate_transfer_uid()
        o = _opts(self, transfer_uid, notify, timeout_ms, stream)
        n, addr = descs.shape[0], (descs.ctypes.data if descs.size else None)
        return self._submit(lambda out: _lib.load().mori_xfer_batch(op, lm.ptr, rm.ptr, addr, n, ctypes.byref(o),
                                                                   out), lm, rm, None, transfer_uid)

    def _tag_writes(self, local, remote, tags):
        """One 1-byte write from local to remote per tag, each notifying with its tag (how the
        NIXL adapter sends a message), without status objects: finished handles are freed at
        once, unfinished ones left to _reap. Raises the first failure seen."""
        lm, rm = self._own(local), self._peer(remote)
        self._client()
        self._reap()
        lib = _lib.load()
        o = _opts(self, 0, True, None, None)
        x, m = ctypes.c_void_p(), ctypes.c_char_p()
        for tag in tags:
            o.notif_tag = tag
            _lib.check(lib.mori_write(lm.ptr, 0, rm.ptr, 0, 1, ctypes.byref(o), ctypes.byref(x)), "notify")
            rc = lib.mori_xfer_status(x.value, ctypes.byref(m))
            if rc == MORI_EINPROGRESS:
                with self._lock:
                    self._xfers[x.value] = (lm, rm, None, None)
                    self._orphans.add(x.value)
                continue
            msg = m.value.decode("utf-8", "replace") if m.value else ""
            lib.mori_xfer_free(x.value)
            if rc != MORI_OK:
                raise MoriError(rc, "notify: " + msg)

    def read(self, local, local_offset, remote, remote_offset, size, transfer_uid=None, *, notify=None,
             timeout_ms=None, stream=None):
        """Copy `size` bytes of `remote` at remote_offset into `local` at local_offset. local: a
        region of this engine; remote: a peer's desc (unpacked, or open_remote's), or a region of
        this or another engine of the process. The uid (allocated if None) is the notification
        the target gets after the data, unless notify=False (or the config disables it).
        timeout_ms: this transfer's deadline. stream: a CUDA stream (torch.cuda.Stream or
        cudaStream_t as int) for VRAM copies. Errors at submission raise MoriError (MORI_ERANGE,
        MORI_EINVAL, MORI_ESTALE, MORI_EPEERDEAD, MORI_EAGAIN); later ones are the status's."""
        return self._xfer(OP_READ, local, remote, local_offset, remote_offset, size, transfer_uid, notify,
                          timeout_ms, stream)

    def write(self, local, local_offset, remote, remote_offset, size, transfer_uid=None, *, notify=None,
              timeout_ms=None, stream=None):
        """Copy `size` bytes of `local` at local_offset into `remote` at remote_offset (see read)."""
        return self._xfer(OP_WRITE, local, remote, local_offset, remote_offset, size, transfer_uid, notify,
                          timeout_ms, stream)

    def _batches(self, op, locals_, local_offsets, remotes, remote_offsets, sizes, uids, notify, timeout_ms,
                 stream):
        k = len(locals_)
        if not (len(remotes) == len(local_offsets) == len(remote_offsets) == len(sizes) == k):
            raise MoriError(MORI_EINVAL, "batch: the six lists must have one entry per batch")
        if uids is None:
            uids = [None] * k
        elif isinstance(uids, int):
            uids = [uids] * k
        return [self._xfer(op, locals_[i], remotes[i], local_offsets[i], remote_offsets[i], sizes[i], uids[i],
                           notify, timeout_ms, stream) for i in range(k)]

    def batch_read(self, local_descs, local_offsets, remote_descs, remote_offsets, sizes, transfer_uids=None, *,
                   notify=None, timeout_ms=None, stream=None):
        """ROCm/mori's batched form: k batches, batch i reading descriptors
        (local_offsets[i][j], remote_offsets[i][j], sizes[i][j]) from remote_descs[i] into
        local_descs[i]; sizes[i] may be one int for all. Returns k TransferStatus objects, one
        per batch (each a single mori_xfer_batch)."""
        return self._batches(OP_READ, local_descs, local_offsets, remote_descs, remote_offsets, sizes,
                             transfer_uids, notify, timeout_ms, stream)

    def batch_write(self, local_descs, local_offsets, remote_descs, remote_offsets, sizes, transfer_uids=None, *,
                    notify=None, timeout_ms=None, stream=None):
        """The write counterpart of batch_read."""
        return self._batches(OP_WRITE, local_descs, local_offsets, remote_descs, remote_offsets, sizes,
                             transfer_uids, notify, timeout_ms, stream)

    def prepare(self, local, remote, local_offsets, remote_offsets, sizes):
        """A prepared descriptor list (mori_xfer_prep): validated against both regions now, then
        submitted by index with list.read(indices)/list.write(indices), O(indices) per submission
        (vLLM's NIXL connector pattern). Errors: MORI_ERANGE, MORI_EINVAL, MORI_ENOMEM."""
        lm, rm = self._own(local), self._peer(remote)
        keep, addr, n = _desc_array(local_offsets, remote_offsets, sizes)
        out = ctypes.c_void_p()
        _lib.check(_lib.load().mori_xfer_prep(lm.ptr, rm.ptr, addr, n, ctypes.byref(out)), "prepare")
        sz = [sizes] * n if isinstance(sizes, int) else [int(s) for s in sizes]
        pl = PreparedList(self, out.value, lm, rm, sz)
        with self._lock:
            self._lists[out.value] = (lm, rm)
        return pl

    def create_session(self, local_mem, remote_mem):
        """A session between one local region and one remote region (ROCm/mori's IOEngineSession)."""
        return IOEngineSession(self, local_mem, remote_mem)

    def wait_all(self, statuses, timeout_ms=-1):
        """Wait for every status; SUCCESS if all succeeded, else the first failure's StatusCode,
        or IN_PROGRESS if the timeout expired first."""
        us = _lib.duration_us(timeout_ms, "wait_all: timeout_ms", 1000)
        deadline = None if us < 0 else _now() + us / 1e6
        first = StatusCode.SUCCESS
        for s in statuses:
            left = None if deadline is None else max(0.0, deadline - _now())
            if not s.wait(left):
                return StatusCode.IN_PROGRESS
            if first == StatusCode.SUCCESS and s.code != MORI_OK:
                first = s.Code()
        return first

    # ---- notifications ----

    def _drain(self, timeout_us=0):
        c = self._client()
        lib = _lib.load()
        buf = (Notif * 64)()
        got = 0
        while True:
            n = lib.mori_notif_poll(c, buf, 64, timeout_us if got == 0 else 0)
            if n < 0:
                _lib.check(n, "notifications")
            with self._lock:
                for i in range(n):
                    self._inbox.append(Notification(buf[i].tag, buf[i].region_id, buf[i].from_pid))
            got += n
            if n < 64:
                return got

    def poll_notifications(self, timeout_ms=0, max=None):
        """Notifications addressed to this engine's regions, oldest first (at most `max`),
        waiting up to timeout_ms for the first when none is queued (0: don't wait)."""
        us = _lib.duration_us(timeout_ms, "poll_notifications: timeout_ms", 1000)
        if max is not None:
            max = _lib.ival(max, "poll_notifications: max", ctypes.c_size_t)
        self._reap()
        with self._lock:
            queued = len(self._inbox)
        self._drain(0 if queued else us)
        with self._lock:
            k = len(self._inbox) if max is None else min(max, len(self._inbox))
            return [self._inbox.popleft() for _ in range(k)]

    def pop_inbound_transfer_status(self, remote_key, transfer_uid):
        """ROCm/mori's check on the target: a completed status if a transfer with this uid has
        notified this engine (and the notification is consumed), else None. Matching is by uid;
        remote_key is accepted for compatibility."""
        self._drain(0)
        with self._lock:
            for i, nt in enumerate(self._inbox):
                if nt.tag == transfer_uid:
                    del self._inbox[i]
                    return TransferStatus._completed(MORI_OK, "", transfer_uid)
        return None

    def sq_pending(self):
        """Submissions morid has not yet taken off this engine's ring (diagnostics)."""
        return _lib.load().mori_client_sq_pending(self._client())

    def __repr__(self):
        return "IOEngine(%r%s)" % (self.key, ", closed" if self._c is None else ", node=%r" % self.node)


class PreparedList:
    """A prepared descriptor list between one local and one remote region; submit by index.
    close() frees it (MORI_EBUSY while transfers on it are unfinished)."""

    def __init__(self, engine, ptr, lmem, rmem, sizes):
        self._engine = engine
        self._p = ptr
        self._lmem = lmem
        self._rmem = rmem
        self._sizes = sizes
        self._pid = os.getpid()

    def __len__(self):
        return len(self._sizes)

    def _ptr(self):
        e = self._engine
        with e._lock:
            if self._p is None or self._p not in e._lists:
                raise MoriError(MORI_ENOENT, "prepared list was freed (closed, or its region deregistered)")
        e._client()
        return self._p

    def _go(self, op, indices, uid, notify, timeout_ms, stream):
        e = self._engine
        p = self._ptr()
        keep, addr, n = _index_array(indices)
        if uid is None:
            uid = e.allocate_transfer_uid()
        o = _opts(e, uid, notify, timeout_ms, stream)
        return e._submit(lambda out: _lib.load().mori_xfer_submit(p, op, addr, n, ctypes.byref(o), out),
                         self._lmem, self._rmem, self, uid)

    def read(self, indices, transfer_uid=None, *, notify=None, timeout_ms=None, stream=None):
        """Read descriptors `indices` (a list or array of ints) of the list. MORI_ERANGE for an
        index past the end."""
        return self._go(OP_READ, indices, transfer_uid, notify, timeout_ms, stream)

    def write(self, indices, transfer_uid=None, *, notify=None, timeout_ms=None, stream=None):
        return self._go(OP_WRITE, indices, transfer_uid, notify, timeout_ms, stream)

    def close(self):
        e = self._engine
        if self._p is None or e._c is None:
            self._p = None
            return
        with e._lock:
            mine = [(x, ent[3]) for x, ent in e._xfers.items() if ent[2] is self]
        sts = [ref() for _, ref in mine]
        if any(st is not None and not st.done for st in sts):
            raise MoriError(MORI_EBUSY, "prepared list has unfinished transfers: wait for them first")
        lib = _lib.load()
        for (x, _), st in zip(mine, sts):
            if st is None:  # an orphan: wait for it (bounded), then free it
                lib.mori_xfer_wait(x, 1000000)
                e._free_xfer(x)
        with e._lock:
            p, self._p = self._p, None
            if e._lists.pop(p, None) is None:
                return
        lib.mori_xfer_list_free(p)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def __del__(self):
        # Held statuses hold the list; orphaned ones (dropped unfinished) keep it in the
        # engine's table until they are done.
        if getattr(self, "_p", None) is not None and not _quiet(self._pid):
            try:
                self._engine._drop_list(self._p)
            except Exception:
                pass


class IOEngineSession:
    """Transfers between one local and one remote region, with offsets only (ROCm/mori's
    IOEngineSession)."""

    def __init__(self, engine, local_mem, remote_mem):
        self._engine = engine
        self._local = local_mem
        self._remote = remote_mem
        engine._own(local_mem)
        self._rmem = engine._peer(remote_mem)

    def allocate_transfer_uid(self):
        return self._engine.allocate_transfer_uid()

    def read(self, local_offset, remote_offset, size, transfer_uid=None, **kw):
        return self._engine.read(self._local, local_offset, self._remote, remote_offset, size, transfer_uid, **kw)

    def write(self, local_offset, remote_offset, size, transfer_uid=None, **kw):
        return self._engine.write(self._local, local_offset, self._remote, remote_offset, size, transfer_uid, **kw)

    def batch_read(self, local_offsets, remote_offsets, sizes, transfer_uid=None, **kw):
        return self._engine._xfer(OP_READ, self._local, self._remote, local_offsets, remote_offsets, sizes,
                                  transfer_uid, kw.get("notify"), kw.get("timeout_ms"), kw.get("stream"))

    def batch_write(self, local_offsets, remote_offsets, sizes, transfer_uid=None, **kw):
        return self._engine._xfer(OP_WRITE, self._local, self._remote, local_offsets, remote_offsets, sizes,
                                  transfer_uid, kw.get("notify"), kw.get("timeout_ms"), kw.get("stream"))

    def prepare(self, local_offsets, remote_offsets, sizes):
        return self._engine.prepare(self._local, self._remote, local_offsets, remote_offsets, sizes)

    def alive(self):
        """True while the engine is open and both regions are registered/open."""
        return (not self._engine.closed and self._local.is_local and not self._rmem.closed)


__all__ = ["IOEngine", "IOEngineConfig", "IOEngineSession", "EngineDesc", "MemoryDesc", "TransferStatus", "OP_READ", "OP_WRITE",
           "PreparedList", "Notification", "BackendType", "MemoryLocationType", "StatusCode", "PollCqMode",
           "RdmaBackendConfig", "XgmiBackendConfig", "TcpBackendConfig", "FabricBackendConfig", "set_log_level",
           "status_code", "MoriError"]

IOEngine.Session = IOEngineSession  # the name vLLM's MoRIIO connector annotates with
