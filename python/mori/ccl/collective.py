"""MORI-CCL's Communicator and ROCm/mori's copy-engine objects (AllgatherSdma, All2allSdma,
AllreduceSdma). Import them from mori.ccl."""
import ctypes

from .. import _capi, _lib
from ..shmem import api as _shmem
from .._capi import CommOpts
from ..errors import MoriError, MORI_EINVAL, MORI_ESTALE  # noqa: F401 (MoriError re-exported)

UINT8, INT32, FLOAT16, FLOAT32, BFLOAT16 = _capi.UINT8, _capi.INT32, _capi.FLOAT16, _capi.FLOAT32, _capi.BFLOAT16
SUM, MAX, MIN = _capi.SUM, _capi.MAX, _capi.MIN
_OPS = {"sum": SUM, "max": MAX, "min": MIN}
_DT = {"uint8": UINT8, "int32": INT32, "float16": FLOAT16, "half": FLOAT16, "float32": FLOAT32, "float": FLOAT32,
       "bfloat16": BFLOAT16}
_P, _I, _SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_PROTOS = _capi.ctypes_protos(_capi.MORI_COLL_H)


def _L():
    return _lib.bind("MORI-CCL", _PROTOS)


def _dtype(dt):
    if isinstance(dt, int) and not isinstance(dt, bool):
        return _lib.ival(dt, "dtype", _I)
    s = str(dt).lower().replace("torch.", "").replace("numpy.", "").replace("<class '", "").replace("'>", "")
    if s in _DT:
        return _DT[s]
    raise MoriError(MORI_EINVAL, "dtype %r: MORI-CCL has uint8, int32, float16, float32, bfloat16" % (dt,))


def _buf(x, dtype, out=False):
    """(address, elements of the collective's dtype or None, dtype code, keepalive) of a tensor,
    array or int address (None: an address, whose size nobody knows). out: x is written, so a
    read-only array (a view of bytes, flags.writeable False) is refused."""
    if isinstance(x, int) and not isinstance(x, bool):
        if dtype is None:
            raise MoriError(MORI_EINVAL, "an int address needs dtype=")
        return _shmem._int(x, "address"), None, _dtype(dtype), None
    if hasattr(x, "data_ptr") and hasattr(x, "numel"):  # torch
        if not x.is_contiguous():
            raise MoriError(MORI_EINVAL, "tensor must be contiguous")
        dt = _dtype(dtype if dtype is not None else x.dtype)
        return x.data_ptr(), _elems(x.numel() * x.element_size(), dt), dt, x
    ai = getattr(x, "__cuda_array_interface__", None)  # cupy
    if ai is None:
        ai = getattr(x, "__array_interface__", None)  # numpy
        if ai is not None and ai.get("strides") is not None and not x.flags.c_contiguous:
            raise MoriError(MORI_EINVAL, "array must be contiguous")
    if ai is not None:
        if out and ai["data"][1]:  # (pointer, read-only)
            raise MoriError(MORI_EINVAL, "the destination array is read-only")
        dt = _dtype(dtype if dtype is not None else x.dtype.name)
        return ai["data"][0], _elems(int(x.nbytes), dt), dt, x
    raise MoriError(MORI_EINVAL, "buffer must be a tensor, an array or an int address, not %s" % type(x).__name__)


def _pair(src, dst, dtype, what):
    """_buf of src and of dst (written) in one dtype: the call runs in one dtype, so a src and a
    dst of different dtypes (a float32 src into a uint8 dst would get 4x its bytes) are refused
    unless dtype= says how to read both (both are then sized in its elements, i.e. in bytes)."""
    s = _buf(src, dtype)
    d = _buf(dst, dtype, out=True)
    if s[2] != d[2]:
        raise MoriError(MORI_EINVAL, "%s: src is %s and dst is %s; MORI-CCL runs in one dtype (cast first, or give "
                        "dtype= to read both as it)" % (what, _dtname(s[2]), _dtname(d[2])))
    return s, d


def _dtname(code):
    return next((k for k, v in _DT.items() if v == code), str(code))


def _elems(nbytes, dt):
    es = _L().mori_dtype_size(dt)
    if not es:
        raise MoriError(MORI_EINVAL, "dtype %r: MORI-CCL has uint8, int32, float16, float32, bfloat16" % (dt,))
    return nbytes // es


def _op(op):
    if isinstance(op, int) and not isinstance(op, bool):
        return _lib.ival(op, "op", _I)
    if isinstance(op, str) and op in _OPS:
        return _OPS[op]
    raise MoriError(MORI_EINVAL, "op %r: MORI-CCL has %s" % (op, ", ".join(sorted(_OPS))))


def _fits(what, name, have, need):
    """MORI_EINVAL unless a buffer of `have` elements (None: an address, unknown) holds `need`."""
    if have is not None and need > have:
        raise MoriError(MORI_EINVAL, "%s: %s holds %d elements, the call needs %d" % (what, name, have, need))


class Communicator:
    """Ranks 0..n-1 over a mori.shmem Group (node_team=True: the PEs of this node). Collective:
    every PE of the group constructs it at the same point of its collective sequence."""

    def __init__(self, group, node_team=False, scratch_bytes=0, timeout_us=0, algo=None):
        if not isinstance(group, _shmem.Group):
            raise MoriError(MORI_EINVAL, "group must be a mori.shmem.Group")
        o = CommOpts()
        _lib.check(_L().mori_comm_opts_init(ctypes.byref(o), ctypes.sizeof(o)), "communicator options")
        o.node_team = int(bool(node_team))
        o.scratch_bytes = _lib.ival(scratch_bytes, "scratch_bytes", ctypes.c_uint64)
        o.timeout_us = _lib.ival(timeout_us, "timeout_us", ctypes.c_int64)
        self._algo = _lib.as_bytes(algo, "algo") if algo else None
        o.algo = self._algo
        h = _P()
        _lib.check(_L().mori_comm_create(group._h(), ctypes.byref(o), ctypes.byref(h)), "comm create")
        self._k, self.group, self._wins = h, group, {}

    def _h(self):
        if self._k is None:
            raise MoriError(MORI_EINVAL, "communicator destroyed")
        if self.group._g is None:  # libmori refuses too (MORI_ESTALE); say it here with the name
            raise MoriError(MORI_ESTALE, "communicator: its group %r has left; only destroy() works on it"
                            % (self.group.name,))
        return self._k

    def destroy(self):
        """Collective; synchronise the streams that ran its collectives first. After the group left,
        only frees this process's part (the heap went with the group)."""
        k, self._k = self._k, None
        if k is None:
            return
        if self.group._g is None:  # left: after libmori's finalize, which views may still defer
            self.group._after_leave(lambda: _L().mori_comm_destroy(k))
        else:
            _lib.check(_L().mori_comm_destroy(k), "comm destroy")  # k is freed whatever it returns

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def rank(self):
        return _L().mori_comm_rank(self._h())

    def size(self):
        return _L().mori_comm_size(self._h())

    def set_algo(self, spec):
        """e.g. "allreduce=twoshot,allgather=ce" (the same on every rank)."""
        if spec is None:
            raise MoriError(MORI_EINVAL, "set_algo: spec must be str, not None")
        _lib.check(_L().mori_comm_set_algo(self._h(), _lib.as_bytes(spec, "set_algo: spec")), "set_algo")

    def algo(self, coll, nbytes):
        """The algorithm the size table picks for collective `coll` ("allreduce", "allgather",
        "alltoall", "broadcast", "reducescatter") of nbytes output bytes per rank (mori_comm_algo).
        MoriError(MORI_EINVAL) for an unknown collective."""
        if coll is None:
            raise MoriError(MORI_EINVAL, "algo: coll must be str, not None")
        name = ctypes.c_char_p()
        _lib.check(_L().mori_comm_algo(self._h(), _lib.as_bytes(coll, "algo: coll"), _lib.ival(nbytes, "algo: nbytes"),
                                       ctypes.byref(name)), "algo %r" % (coll,))
        return name.value.decode() if name.value else None

    def status(self):
        """(code, pe): 0 while healthy; raises nothing (compare with the MORI_E* codes)."""
        st = _lib.Status()
        rc = _L().mori_comm_status(self._h(), ctypes.byref(st))
        return rc, st.pe

    def check(self):
        """Raise MoriError if a collective failed (after the stream ran it)."""
        st = _lib.Status()
        rc = _L().mori_comm_status(self._h(), ctypes.byref(st))
        if rc < 0:
            raise MoriError(rc, "collective: " + (_lib.status_message(st) or _lib.last_error()))

    def register_window(self, addr, nbytes):
        """Register [addr, addr + nbytes) of the heap (Group.malloc) as a window (collective)."""
        w = _P()
        addr = _shmem._int(addr, "register_window: addr")
        _lib.check(_L().mori_comm_window_register(self._h(), addr, _lib.ival(nbytes, "register_window: nbytes", _SZ),
                                                  ctypes.byref(w)), "window")
        self._wins[addr] = w
        return addr

    def deregister_window(self, addr):
        addr = _shmem._int(addr, "deregister_window: addr")
        if addr not in self._wins:
            raise MoriError(MORI_EINVAL, "deregister_window: no window at %#x" % addr)
        w = self._wins.pop(addr)
        _lib.check(_L().mori_comm_window_deregister(self._h(), w), "window deregister")

    # ---- collectives ----
    def _args(self, src, dst, count, dtype, what, src_mul=1, dst_mul=1, default="src"):
        """(src, dst, count, dtype) after checking that src holds count * src_mul elements and dst
        count * dst_mul (the sizes an array or tensor knows; int addresses are the caller's)."""
        (s, sn, sdt, _), (d, dn, _, _) = _pair(src, dst, dtype, what)
        if count is None:
            base, mul = (sn, src_mul) if default == "src" and sn is not None else (dn, dst_mul)
            if base is None:
                raise MoriError(MORI_EINVAL, "%s: count= is needed with int addresses" % what)
            if base % mul:
                raise MoriError(MORI_EINVAL, "%s: %d elements are not a multiple of the %d ranks" % (what, base, mul))
            count = base // mul
        if type(count) is int and count < 0:
            raise MoriError(MORI_EINVAL, "%s: count %r" % (what, count))
        count = _lib.ival(count, "%s: count" % what, _SZ)
        _fits(what, "src", sn, count * src_mul)
        _fits(what, "dst", dn, count * dst_mul)
        return s, d, count, sdt

    def all_reduce(self, src, dst, count=None, op="sum", dtype=None, stream=None):
        """count elements of src reduced into dst on every rank (ncclAllReduce). MORI_EINVAL when
        src or dst holds fewer, or for an op other than "sum", "max", "min"."""
        s, d, n, dt = self._args(src, dst, count, dtype, "all_reduce")
        _lib.check(_L().mori_allreduce(self._h(), s, d, n, dt, _op(op), _shmem._stream(stream)), "all_reduce")

    def all_gather(self, src, dst, count=None, dtype=None, stream=None):
        """count (src's) elements from every rank into dst, rank-major: dst holds count * size()."""
        s, d, n, dt = self._args(src, dst, count, dtype, "all_gather", dst_mul=self.size())
        _lib.check(_L().mori_allgather(self._h(), s, d, n, dt, _shmem._stream(stream)), "all_gather")

    def reduce_scatter(self, src, dst, count=None, op="sum", dtype=None, stream=None):
        """count: the output's elements (count = dst.numel()); src holds count * size()."""
        s, d, n, dt = self._args(src, dst, count, dtype, "reduce_scatter", src_mul=self.size(), default="dst")
        _lib.check(_L().mori_reducescatter(self._h(), s, d, n, dt, _op(op), _shmem._stream(stream)),
                   "reduce_scatter")

    def all_to_all(self, src, dst, count=None, dtype=None, stream=None):
        """count: elements per peer (default: src's elements / size, which must divide evenly);
        src and dst hold count * size()."""
        k = self.size()
        s, d, n, dt = self._args(src, dst, count, dtype, "all_to_all", src_mul=k, dst_mul=k)
        _lib.check(_L().mori_alltoall(self._h(), s, d, n, dt, _shmem._stream(stream)), "all_to_all")

    def all_to_allv(self, src, send_counts, send_displs, dst, recv_counts, recv_displs, dtype=None, stream=None):
        """Counts and displacements in elements, one per rank; each [displ, displ + count) must lie
        in src (send) or dst (receive) when their sizes are known."""
        (s, sn, dt, _), (d, dn, _, _) = _pair(src, dst, dtype, "all_to_allv")
        k = self.size()
        lists = {}
        for name, v in (("send_counts", send_counts), ("send_displs", send_displs), ("recv_counts", recv_counts),
                        ("recv_displs", recv_displs)):
            try:
                v = list(v)
            except TypeError:
                raise MoriError(MORI_EINVAL, "all_to_allv: %s must be a list of %d counts, not %s"
                                % (name, k, type(v).__name__)) from None
            if len(v) != k or any(type(x) is int and x < 0 for x in v):
                raise MoriError(MORI_EINVAL, "all_to_allv: %s must be %d counts >= 0" % (name, k))
            lists[name] = [_lib.ival(x, "all_to_allv: %s" % name, _SZ) for x in v]
        sc, sd, rc, rd = (lists[n] for n in ("send_counts", "send_displs", "recv_counts", "recv_displs"))
        for r in range(k):
            _fits("all_to_allv", "src (to rank %d)" % r, sn, sd[r] + sc[r])
            _fits("all_to_allv", "dst (from rank %d)" % r, dn, rd[r] + rc[r])
        arr = lambda v: (_SZ * len(v))(*v)
        _lib.check(_L().mori_alltoallv(self._h(), s, arr(sc), arr(sd), d, arr(rc), arr(rd), dt,
                                       _shmem._stream(stream)), "all_to_allv")

    def broadcast(self, src, dst, count=None, root=0, dtype=None, stream=None):
        s, d, n, dt = self._args(src, dst, count, dtype, "broadcast")
        root = _lib.ival(root, "broadcast: root", _I)
        _lib.check(_L().mori_broadcast(self._h(), s, d, n, dt, root, _shmem._stream(stream)), "broadcast")


class _Sdma:
    """ROCm/mori's Sdma objects: a call enqueues on the stream with the copy-engine form (kernel
    for all-reduce); start_async does the same and remembers the stream; wait_async waits on the
    host for it and raises if the collective failed."""
    _coll, _algo = None, None

    def __init__(self, comm):
        self.comm = comm
        self._pending = None

    def _run(self, input_data, output_data, count, stream):
        self.comm.set_algo(self._algo)
        getattr(self.comm, self._coll)(input_data, output_data, count, stream=stream)

    def __call__(self, input_data, output_data, count, stream=None):
        self._run(input_data, output_data, count, stream)
        return True

    def start_async(self, input_data, output_data, count, stream=None):
        self._run(input_data, output_data, count, stream)
        self._pending = stream
        return True

    def wait_async(self, stream=None):
        s = stream if stream is not None else self._pending
        self._pending = None
        if s is not None and hasattr(s, "synchronize"):
            s.synchronize()
        self.comm.check()
        return 0.0

    def is_async_in_progress(self):
        return self._pending is not None


class AllgatherSdma(_Sdma):
    _coll, _algo = "all_gather", "allgather=ce"


class All2allSdma(_Sdma):
    _coll, _algo = "all_to_all", "alltoall=ce"


class AllreduceSdma(_Sdma):
    """All-reduce has no copy-engine form here (the reduction needs SMs): the size table's."""
    _coll, _algo = "all_reduce", "allreduce=auto"

    def _run(self, input_data, output_data, count, stream):
        self.comm.all_reduce(input_data, output_data, count, stream=stream)
