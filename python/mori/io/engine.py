"""mori.io's engine: IOEngine (a client of the node's morid), its prepared descriptor lists
(PreparedList) and sessions (IOEngineSession). Import them from mori.io."""
import collections
import copy
import ctypes
import itertools
import os
import socket
import threading
import time
import weakref
import zlib

from .. import _lib
from .._lib import Notif, OP_READ, OP_WRITE
from ..errors import MoriError, MORI_OK, MORI_EINVAL, MORI_ENOENT, MORI_EINPROGRESS, MORI_EBUSY, MORI_ENOTSUP
from .types import (BackendType, MemoryLocationType, StatusCode, _location, _kind, IOEngineConfig, EngineDesc,
                    Notification)
from .desc import _quiet, _Mem, MemoryDesc, TransferStatus
from .args import _numpy, _torch_tensor, _opts, _desc_array, _index_array, _buffer_of

_now = time.monotonic


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
            f = lib.mori_xfer_read if op == OP_READ else lib.mori_xfer_write
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
        x, st = ctypes.c_void_p(), _lib.Status()
        for tag in tags:
            o.notif_tag = tag
            _lib.check(lib.mori_xfer_write(lm.ptr, 0, rm.ptr, 0, 1, ctypes.byref(o), ctypes.byref(x)), "notify")
            rc = lib.mori_xfer_status(x.value, ctypes.byref(st))
            if rc == MORI_EINPROGRESS:
                with self._lock:
                    self._xfers[x.value] = (lm, rm, None, None)
                    self._orphans.add(x.value)
                continue
            msg = _lib.status_message(st)
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
            if not isinstance(s, TransferStatus):
                raise MoriError(MORI_EINVAL, "wait_all: %r is not a TransferStatus" % (s,))
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


IOEngine.Session = IOEngineSession  # the name vLLM's MoRIIO connector annotates with
