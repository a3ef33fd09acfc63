"""MORI-CCO's Communicator (ROCm/mori's mori.cco.Communicator) over libmori's mori_cco_* calls.
Import it from mori.cco."""
import ctypes

from .. import _capi, _lib
from .._capi import CcoCommOpts, CcoDevCommReqs, CcoDevComm, CcoWin, Status
from ..errors import MoriError, MORI_EINVAL

GDA_CONNECTION_NONE = _capi.CCO_GDA_NONE
GDA_CONNECTION_FULL = _capi.CCO_GDA_FULL
GDA_CONNECTION_CROSSNODE = _capi.CCO_GDA_CROSSNODE
GDA_CONNECTION_RAIL = _capi.CCO_GDA_RAIL
UID_BYTES = _capi.CCO_UID_BYTES
_P = ctypes.c_void_p
_PROTOS = _capi.ctypes_protos(_capi.MORI_CCO_H)
_KINDS = {"host": _capi.MEM_HOST, "vram": _capi.MEM_VRAM}


def _L():
    return _lib.bind("MORI-CCO", _PROTOS)


def _open_client(runtime_dir, label):
    c = _P()
    _lib.check(_L().mori_client_open(_lib.as_bytes(runtime_dir, "runtime_dir"), label.encode(), ctypes.byref(c)),
               "open a client of morid")
    return c


class CCODevCommRequirements(CcoDevCommReqs):
    """mori_cco_dev_comm_reqs with libmori's defaults (ROCm/mori's initializer: CROSSNODE, 16 signals,
    16 counters, no barriers, no copy-engine queue). Fields: gda_connection_type, gda_signal_count,
    gda_counter_count, lsa_barrier_count, rail_gda_barrier_count, barrier_count, ce_queue_count
    (ROCm/mori's sdma_queue_count, also accepted under that name)."""

    def __init__(self, **fields):
        super().__init__()
        _lib.check(_L().mori_cco_dev_comm_reqs_init(ctypes.byref(self), ctypes.sizeof(self)), "requirements")
        for k, v in fields.items():
            setattr(self, k, v)

    @property
    def sdma_queue_count(self):
        return self.ce_queue_count

    @sdma_queue_count.setter
    def sdma_queue_count(self, v):
        self.ce_queue_count = v


class AllocatedMemory:
    """A block of the communicator's heap: .ptr (address in this process), .size (bytes)."""

    def __init__(self, ptr, size):
        self.ptr, self.size = ptr, size


class RegisteredWindow:
    """A registered window: .handle (mori_cco_win, what kernels take by value), .local_ptr,
    .size; mori's host put/get take it."""

    def __init__(self, w, handle, local_ptr, size):
        self._w, self.handle, self.local_ptr, self.size = w, handle, local_ptr, size


class DevComm:
    """A device communicator: .struct (CcoDevComm, the bytes a kernel takes by value: pass
    bytes(dc.struct) or ctypes.byref), .rank, .world_size, .lsa_size, .lsa_rank; device_copy()
    for MORI-IR's functions (Triton), which take its address."""

    def __init__(self, s):
        self.struct = s

    def __getattr__(self, name):
        return getattr(self.__dict__["struct"], name)

    def check(self):
        """0 while it and its communicator live; MoriError(MORI_ESTALE) after either was destroyed."""
        return _lib.check(_L().mori_cco_dev_comm_check(ctypes.byref(self.struct)), "device communicator")

    def read_signal(self, i):
        v = ctypes.c_uint64()
        _lib.check(_L().mori_cco_dev_comm_read_signal(ctypes.byref(self.struct), i, ctypes.byref(v)), "read_signal")
        return v.value

    def read_counter(self, i):
        v = ctypes.c_uint64()
        _lib.check(_L().mori_cco_dev_comm_read_counter(ctypes.byref(self.struct), i, ctypes.byref(v)), "read_counter")
        return v.value

    def device_copy(self, device=None):
        """A copy of the struct in GPU memory (a torch uint8 tensor on `device`, default the current
        CUDA device), for code that cannot take it by value: MORI-IR's mori_cco_* functions (Triton
        through mori.ir.triton) take its address, .data_ptr(), as their first argument `d`. Keep
        the tensor while kernels use it; it goes stale with this DevComm (the calls then return
        MORI_ESTALE). torch is imported here."""
        import torch
        raw = bytes(self.struct)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(device or "cuda")

    def destroy(self):
        _lib.check(_L().mori_cco_dev_comm_destroy(ctypes.byref(self.struct)), "device communicator destroy")


class Communicator:
    """An explicit communicator: Communicator.init(nranks, rank, uid) on every rank with the id
    rank 0 made (Communicator.get_unique_id()) and broadcast. Collective calls: init, alloc_mem,
    register_window, create_dev_comm, barrier; destroy (or leaving the with block) frees it all."""

    def __init__(self, client, handle):
        self._c, self._k = client, handle

    @staticmethod
    def get_unique_id(runtime_dir=None):
        """128 bytes naming a fresh communicator and its root daemon."""
        c = _open_client(runtime_dir, "cco:uid")
        try:
            buf = ctypes.create_string_buffer(UID_BYTES)
            _lib.check(_L().mori_cco_get_unique_id(c, buf), "get_unique_id")
            return buf.raw
        finally:
            _L().mori_client_close(c)

    @classmethod
    def init(cls, nranks, rank, uid, per_rank_vmm=0, mem_kind="host", gpu_device=-1, timeout_us=0, runtime_dir=None):
        """Join as rank `rank` of `nranks`. per_rank_vmm: heap bytes per rank (0: morid's default);
        mem_kind "host" (every machine) or "vram" (GPU kernels)."""
        if not isinstance(uid, (bytes, bytearray)) or len(uid) != UID_BYTES:
            raise MoriError(MORI_EINVAL, "uid must be the %d bytes get_unique_id returned" % UID_BYTES)
        if mem_kind not in _KINDS:
            raise MoriError(MORI_EINVAL, "mem_kind %r: 'host' or 'vram'" % (mem_kind,))
        o = CcoCommOpts()
        _lib.check(_L().mori_cco_comm_opts_init(ctypes.byref(o), ctypes.sizeof(o)), "options")
        o.per_rank_size = _lib.ival(per_rank_vmm, "per_rank_vmm", ctypes.c_uint64)
        o.mem_kind = _KINDS[mem_kind]
        o.gpu_device = _lib.ival(gpu_device, "gpu_device", ctypes.c_int)
        o.timeout_us = _lib.ival(timeout_us, "timeout_us", ctypes.c_int64)
        c = _open_client(runtime_dir, "cco:%d" % rank)
        k = _P()
        u = ctypes.create_string_buffer(bytes(uid), UID_BYTES)
        rc = _L().mori_cco_comm_create(c, u, _lib.ival(nranks, "nranks", ctypes.c_int),
                                       _lib.ival(rank, "rank", ctypes.c_int), ctypes.byref(o), ctypes.byref(k))
        if rc < 0:
            msg = _lib.last_error()
            _L().mori_client_close(c)
            raise MoriError(rc, "cco init as rank %d of %d: %s" % (rank, nranks, msg))
        return cls(c, k)

    def _h(self):
        if self._k is None:
            raise MoriError(MORI_EINVAL, "communicator destroyed")
        return self._k

    def destroy(self):
        k, self._k = self._k, None
        if k is not None:
            _L().mori_cco_comm_destroy(k)
            _L().mori_client_close(self._c)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    @property
    def rank(self):
        return _L().mori_cco_comm_rank(self._h())

    @property
    def world_size(self):
        return _L().mori_cco_comm_size(self._h())

    def lsa(self):
        """(lsa_size, lsa_rank, node_start): the ranks this one reaches by load/store."""
        a, b, c = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        _lib.check(_L().mori_cco_comm_lsa(self._h(), ctypes.byref(a), ctypes.byref(b), ctypes.byref(c)), "lsa")
        return a.value, b.value, c.value

    def status(self):
        """(code, rank, message): 0 while healthy, else the abort's code and the rank it names."""
        st = Status()
        rc = _L().mori_cco_comm_status(self._h(), ctypes.byref(st))
        return rc, st.pe, _lib.status_message(st)

    def alloc_mem(self, size):
        p = _P()
        _lib.check(_L().mori_cco_mem_alloc(self._h(), _lib.ival(size, "size", ctypes.c_size_t), ctypes.byref(p)),
                   "alloc_mem")
        return AllocatedMemory(p.value or 0, size)

    def free_mem(self, mem):
        ptr = mem.ptr if isinstance(mem, AllocatedMemory) else mem
        _lib.check(_L().mori_cco_mem_free(self._h(), ptr or None), "free_mem")

    def register_window(self, ptr, size):
        w = _P()
        _lib.check(_L().mori_cco_window_register(self._h(), _lib.ival(ptr, "ptr", _P), size, ctypes.byref(w)),
                   "register_window")
        return RegisteredWindow(w, _L().mori_cco_window_dev(w), _L().mori_cco_window_local_ptr(w) or 0, size)

    def deregister_window(self, win):
        _lib.check(_L().mori_cco_window_deregister(self._h(), win._w), "deregister_window")
        win._w = None

    def peer_ptr(self, ptr, rank):
        """This process's address of rank's copy of the object at ptr (LSA peers), else None."""
        return _L().mori_cco_get_peer_ptr(self._h(), _lib.ival(ptr, "ptr", _P), rank)

    @staticmethod
    def _addr(buf):
        ai = getattr(buf, "__array_interface__", None)
        if ai is not None:
            return ai["data"][0], int(buf.nbytes)
        if hasattr(buf, "data_ptr"):
            return buf.data_ptr(), buf.numel() * buf.element_size()
        raise MoriError(MORI_EINVAL, "buffer must be a numpy array or a tensor")

    def put(self, win, offset, src, rank):
        """src's bytes into rank's window at offset (blocking; host-initiated)."""
        a, n = self._addr(src)
        _lib.check(_L().mori_cco_put(self._h(), win._w, offset, a, n, rank), "put")

    def get(self, dst, win, offset, rank):
        """rank's window bytes at offset into dst (blocking; host-initiated)."""
        a, n = self._addr(dst)
        _lib.check(_L().mori_cco_get(self._h(), a, win._w, offset, n, rank), "get")

    def create_dev_comm(self, reqs=None):
        """A device communicator (DevComm) from CCODevCommRequirements (None: the defaults)."""
        if reqs is None:
            reqs = CCODevCommRequirements()
        s = CcoDevComm()
        _lib.check(_L().mori_cco_dev_comm_create(self._h(), ctypes.byref(reqs), ctypes.byref(s)), "create_dev_comm")
        return DevComm(s)

    def barrier(self):
        _lib.check(_L().mori_cco_barrier_all(self._h()), "barrier")


__all__ = ["Communicator", "CCODevCommRequirements", "DevComm", "AllocatedMemory", "RegisteredWindow", "CcoWin",
           "GDA_CONNECTION_NONE", "GDA_CONNECTION_FULL", "GDA_CONNECTION_CROSSNODE", "GDA_CONNECTION_RAIL"]
