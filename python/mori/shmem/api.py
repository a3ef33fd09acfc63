"""mori.shmem's groups: join / init_uid / get_unique_id and Group (symmetric allocation, puts
and gets, barriers, views). Import them from mori.shmem."""
import ctypes
import os
import sys
import threading

from .. import _capi, _lib
from .._capi import ShmemOpts
from .tensor_utils import _int, _itemsize_torch, _np_dtype, _nbytes, _shape, numpy_view, tensor
from ..errors import MoriError, MORI_EINVAL, MORI_ENOMEM, MORI_ENOTSUP, MORI_ERANGE

MEM_HOST = _capi.MEM_HOST
MEM_VRAM = _capi.MEM_VRAM
UID_BYTES = _capi.SHMEM_UID_BYTES  # MORI_SHMEM_UID_BYTES: the largest unique id
RESERVED = _capi.SHMEM_RESERVED  # MORI_SHMEM_RESERVED: the heap's reserved head (state, signals, rings)

_P = ctypes.c_void_p
_I = ctypes.c_int
_SZ = ctypes.c_size_t
_PROTOS = _capi.ctypes_protos(_capi.MORI_SHMEM_H)


def _L():
    """libmori with this module's prototypes set (once)."""
    return _lib.bind("MORI-SHMEM", _PROTOS)


def _kind(k):
    if k in (MEM_HOST, MEM_VRAM):
        return k
    s = str(k).lower()
    if s in ("host", "cpu", "dram"):
        return MEM_HOST
    if s in ("vram", "gpu", "cuda", "device"):
        return MEM_VRAM
    raise MoriError(MORI_EINVAL, "heap_kind must be 'host' or 'vram' (or MEM_HOST/MEM_VRAM), not %r" % (k,))


def _opts(heap_size, heap_kind, gpu_device, root, timeout_us):
    o = ShmemOpts()
    _lib.check(_L().mori_shmem_opts_init(ctypes.byref(o), ctypes.sizeof(o)), "shmem options")
    o.heap_size = _lib.ival(heap_size, "heap_size", ctypes.c_uint64)
    o.heap_kind = _kind(heap_kind)
    o.gpu_device = _lib.ival(gpu_device, "gpu_device", ctypes.c_int)
    o.root = _lib.as_bytes(root, "root")
    o.timeout_us = _lib.ival(timeout_us, "timeout_us", ctypes.c_int64)
    return o


def _ordinal(d):
    d = _lib.ival(d, "gpu_device", ctypes.c_int)
    return d if d >= 0 else int(os.environ.get("MORI_GPU_DEVICE") or 0)


_CLIENT_NAME_MAX = 63  # libmori's client name limit (bytes): the label is what moractl clients shows


def _pe_label(name, rank):
    """'shmem:NAME:RANK' for moractl clients, NAME shortened with '...' to fit the client name limit
    (a group name may be up to 127 bytes; the label must not refuse what the join accepts)."""
    n = name.decode("utf-8", "replace") if isinstance(name, (bytes, bytearray)) else str(name)
    tail = ":%d" % rank
    room = _CLIENT_NAME_MAX - len("shmem:") - len(tail)
    if len(n.encode()) > room:
        n = n.encode()[:room - 3].decode("utf-8", "ignore") + "..."
    return "shmem:" + n + tail


def _open_client(runtime_dir, label):
    c = ctypes.c_void_p()
    _lib.check(_L().mori_client_open(_lib.as_bytes(runtime_dir, "runtime_dir"), label.encode(), ctypes.byref(c)),
               "open a client of morid")
    return c


def _stream(s):
    """A stream argument as an int handle: None/0 for the default stream, an int, or an object with
    .cuda_stream (torch.cuda.Stream) or .ptr (cupy)."""
    if s is None:
        return 0
    for attr in ("cuda_stream", "ptr"):
        if hasattr(s, attr):
            return _int(getattr(s, attr), "stream")
    return _int(s, "stream")


def _buffer_addr(src, what):
    """(address, keepalive, length) of src: an int address, or a buffer-protocol object."""
    if isinstance(src, int) and not isinstance(src, bool):
        return _int(src, what), None, None
    try:
        mv = memoryview(src)
    except TypeError:
        raise MoriError(MORI_EINVAL, "%s must be an address (int) or a buffer, not %s" % (what, type(src).__name__)) \
            from None
    if not mv.contiguous:
        raise MoriError(MORI_EINVAL, "%s must be contiguous" % what)
    mv = mv.cast("B")
    if mv.readonly:
        buf = (ctypes.c_char * len(mv)).from_buffer_copy(mv)
    else:
        buf = (ctypes.c_char * len(mv)).from_buffer(mv)
    return ctypes.addressof(buf), (buf, mv), len(mv)


def _count(have, nbytes, what, name):
    """nbytes for a put or get: the buffer's length by default; MORI_EINVAL past the buffer."""
    if nbytes is None:
        if have is None:
            raise MoriError(MORI_EINVAL, "%s with an address as %s needs nbytes" % (what, name))
        return have
    if type(nbytes) is int and nbytes < 0:
        raise MoriError(MORI_EINVAL, "%s: nbytes %r" % (what, nbytes))
    n = _lib.ival(nbytes, "%s: nbytes" % what, _SZ)
    if have is not None and n > have:
        raise MoriError(MORI_EINVAL, "%s: nbytes %d is more than %s's %d bytes" % (what, n, name, have))
    return n


def _rank(v, what):
    return _lib.ival(v, what, ctypes.c_int)


class Group:
    """One PE's membership of a MORI-SHMEM group (made by join() or init_uid()).

    Not thread-safe for concurrent collective calls (they must be in the same order on every PE
    anyway); queries are local and cheap."""

    def __init__(self, client, handle, name, heap_kind, gpu_device=0):
        self._c = client
        self._g = handle
        self.name = name
        self.heap_kind = heap_kind  # MEM_HOST or MEM_VRAM, as joined
        self.gpu_device = gpu_device  # the VRAM heap's ordinal, resolved as libmori does
        self._pid = os.getpid()
        # a view's finaliser may run on any thread, or inside a critical section (a gc pass): reentrant
        self._vlock = threading.RLock()
        self._views = 0        # live _ViewHold objects (numpy()/tensor() views)
        self._deferred = None  # (handle, client) left while views lived: libmori's finalize waits for them
        self._after = []       # destroys of communicators / EP ops that must follow that leave

    # ---- lifetime ----
    def _h(self):
        if self._g is None:
            raise MoriError(MORI_EINVAL, "group %r: already left" % (self.name,))
        return self._g

    def leave(self):
        """Leave the group (not collective: the PEs still in it see it torn down, their waits end
        with MORI_ECANCELED) and close this PE's client. Idempotent; every later call on the Group
        raises MoriError. Heap memory is gone after it, except while views of it live: then
        libmori's finalize (the teardown and the unmap) runs when the last view is collected."""
        with self._vlock:
            g, c, self._g, self._c = self._g, self._c, None, None
            if self._views and (g is not None or c is not None):
                self._deferred = (g, c)
                return
        self._native_leave(g, c)

    @property
    def live_views(self):
        """The numpy()/tensor() views of this Group alive now (each counts until it, and every
        array or tensor made from it, is collected)."""
        return self._views

    def _native_leave(self, g, c):
        with self._vlock:
            after, self._after = self._after, []
        if os.getpid() != self._pid or sys.is_finalizing():
            return  # a forked child's copy belongs to the parent's session; at exit the process's end frees it
        lib = _L()
        if g is not None:
            lib.mori_shmem_finalize(g)  # g is released whatever it returns
        if c is not None:
            lib.mori_client_close(c)
        for f in after:  # now they free only their own part (the group is a shell)
            f()

    def _after_leave(self, f):
        """Run f (a communicator's or EP op's destroy on a left group) after libmori's finalize: at
        once if that has run, else when the deferred leave does (before it, destroy would be a
        collective call, made by this PE alone)."""
        with self._vlock:
            if self._deferred is not None:
                self._after.append(f)
                return
        f()

    def _view_born(self):
        with self._vlock:
            self._views += 1

    def _view_died(self):
        with self._vlock:
            self._views -= 1
            todo = self._deferred if self._views == 0 else None
            if todo is not None:
                self._deferred = None
        if todo is not None:
            self._native_leave(*todo)

    finalize = leave  # mori_shmem_finalize's name (ROCm/mori's ShmemFinalize)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.leave()

    def __del__(self):
        try:
            self.leave()
        except Exception:
            pass

    def __repr__(self):
        if self._g is None:
            return "<mori.shmem.Group %r (left)>" % (self.name,)
        return "<mori.shmem.Group %r PE %d of %d, heap %#x + %d>" % (self.name, self.my_pe(), self.n_pes(),
                                                                   self.heap_base(), self.heap_size())

    # ---- queries (local) ----
    def my_pe(self):
        """This PE's rank (ROCm/mori ShmemMyPe, NVSHMEM nvshmem_my_pe)."""
        return _L().mori_shmem_my_pe(self._h())

    def n_pes(self):
        """The group's size (ShmemNPes, nvshmem_n_pes)."""
        return _L().mori_shmem_n_pes(self._h())

    def team_node(self):
        """The PEs on this node, ascending (a list of ints; NVSHMEM's NVSHMEMX_TEAM_NODE)."""
        pes = ctypes.POINTER(ctypes.c_int)()
        n = ctypes.c_int()
        _lib.check(_L().mori_shmem_team_node(self._h(), ctypes.byref(pes), ctypes.byref(n)), "team_node")
        return [pes[i] for i in range(n.value)]

    def heap_base(self):
        """This PE's heap start: a device address (VRAM heap) or host address (host heap), int."""
        return _L().mori_shmem_heap_base(self._h()) or 0

    def heap_size(self):
        """Bytes of this PE's heap (every PE's is the same), including the 64 KiB reserved head."""
        return _L().mori_shmem_heap_size(self._h())

    def ptr_p2p(self, addr, pe):
        """The address (int) at which this process loads and stores the object at `addr` (in its
        own heap) of PE `pe`, when it maps that PE's heap (same node); None when it does not, or
        addr is outside the heap or pe out of range (ROCm/mori ShmemPtrP2p, nvshmem_ptr)."""
        return _L().mori_shmem_ptr_p2p(self._h(), _int(addr, "addr"), _lib.ival(pe, "pe", _I)) or None

    def offset(self, addr):
        """The heap offset (bytes) of addr in this PE's heap; MoriError(MORI_EINVAL) outside it."""
        off = _L().mori_shmem_offset(self._h(), _int(addr, "addr"))
        if off < 0:
            raise MoriError(MORI_EINVAL, "address %#x is outside group %r's heap" % (_int(addr, "addr"), self.name))
        return off

    def status(self):
        """(code, pe): (0, -1) while healthy; once aborted MORI_EPEERDEAD / MORI_ECANCELED /
        MORI_ETIMEDOUT and the PE that caused it (-1 when none is known)."""
        st = _lib.Status()
        rc = _L().mori_shmem_status(self._h(), ctypes.byref(st))
        return rc, st.pe

    def state(self):
        """The device address of this PE's struct mori_shmem_state (VRAM heaps), the value a module's
        `mori_shmem_state_ptr` must hold; for a host heap, a host copy's address (inspection only)."""
        return _L().mori_shmem_state(self._h()) or 0

    # ---- symmetric allocation (collective) ----
    def _alloc(self, fn, size, align, what):
        out = ctypes.c_void_p()
        size, align = _lib.ival(size, "%s: size" % what, _SZ), _lib.ival(align, "%s: align" % what, _SZ)
        _lib.check(getattr(_L(), fn)(self._h(), size, align, ctypes.byref(out)),
                   "%s(%d) in group %r" % (what, size, self.name))
        return out.value or 0

    def malloc(self, size, align=0):
        """Collective: every PE calls it with the same size and align in the same order and gets the
        same offset. Returns the address (int; 0 for size 0). align: a power of two, 0 for 256.
        MORI_EINVAL (calls differ between PEs), MORI_ENOMEM, MORI_ETIMEDOUT (aborts the group)."""
        return self._alloc("mori_shmem_malloc", size, align, "malloc")

    def calloc(self, size, align=0):
        """malloc, and the bytes are zero on every PE before any PE returns."""
        return self._alloc("mori_shmem_calloc", size, align, "calloc")

    def free(self, addr):
        """Collective free of what malloc/calloc returned (None/0 frees nothing but still counts)."""
        _lib.check(_L().mori_shmem_free(self._h(), _int(addr, "addr")), "free in group %r" % (self.name,))

    # ---- host-initiated data movement ----
    def putmem(self, dest, src, pe, nbytes=None):
        """Blocking put: nbytes from src (an address, or any contiguous buffer: bytes, numpy array)
        to the symmetric object `dest` (an address in this PE's heap) at PE pe. nbytes defaults
        to the buffer's length. MORI_ERANGE when the range leaves the heap (nothing written)."""
        a, keep, n = _buffer_addr(src, "src")
        n = _count(n, nbytes, "putmem", "src")
        pe = _lib.ival(pe, "putmem: pe", _I)
        _lib.check(_L().mori_shmem_putmem(self._h(), _int(dest, "dest"), a, n, pe), "putmem to PE %d" % pe)
        del keep

    def getmem(self, dest, src, pe, nbytes=None):
        """Blocking get: nbytes of the symmetric object `src` at PE pe into dest (an address, or a
        writable contiguous buffer such as a bytearray; nbytes defaults to its length)."""
        if isinstance(dest, int) and not isinstance(dest, bool):
            a, keep, n = _int(dest, "dest"), None, None
        else:
            try:
                mv = memoryview(dest)
            except TypeError:
                raise MoriError(MORI_EINVAL, "getmem: dest must be an address (int) or a writable buffer, not %s"
                                % type(dest).__name__) from None
            if not mv.contiguous:
                raise MoriError(MORI_EINVAL, "getmem: dest must be contiguous")
            mv = mv.cast("B")
            if mv.readonly:
                raise MoriError(MORI_EINVAL, "getmem: dest is read-only")
            keep = (ctypes.c_char * len(mv)).from_buffer(mv)
            a, n = ctypes.addressof(keep), len(mv)
        n = _count(n, nbytes, "getmem", "dest")
        pe = _lib.ival(pe, "getmem: pe", _I)
        _lib.check(_L().mori_shmem_getmem(self._h(), a, _int(src, "src"), n, pe), "getmem from PE %d" % pe)
        del keep

    def get_bytes(self, src, nbytes, pe):
        """nbytes of the symmetric object src at PE pe, as bytes."""
        # at most the heap's size: more would leave it anyway (MORI_ERANGE), so never allocate it
        n = _lib.ival(nbytes, "get_bytes: nbytes", _SZ, hi=self.heap_size())
        try:
            b = bytearray(n)
        except MemoryError:
            raise MoriError(MORI_ENOMEM, "get_bytes: no memory for %d bytes" % n) from None
        if nbytes:
            self.getmem(b, src, pe)
        return bytes(b)

    def barrier_all(self):
        """Collective barrier: every PE arrives and every put made before it is visible everywhere
        before any returns (OpenSHMEM barrier_all). MORI_ETIMEDOUT naming the missing, MORI_EPEERDEAD."""
        _lib.check(_L().mori_shmem_barrier_all(self._h()), "barrier_all in group %r" % (self.name,))

    def barrier_on_stream(self, stream=None):
        """The same barrier as a kernel enqueued on `stream` (an int handle, e.g.
        torch.cuda.current_stream().cuda_stream, or the stream object; None: the default stream).
        Returns once launched. VRAM heaps only (MORI_ENOTSUP for host heaps)."""
        _lib.check(_L().mori_shmem_barrier_on_stream(self._h(), _stream(stream)), "barrier_on_stream")

    def quiet_on_stream(self, stream=None):
        """Completes on `stream` when every proxy request made before it has completed (NVSHMEM's
        nvshmemx_quiet_on_stream). VRAM heaps only."""
        _lib.check(_L().mori_shmem_quiet_on_stream(self._h(), _stream(stream)), "quiet_on_stream")

    def module_init(self, module):
        """Fill `mori_shmem_state_ptr` of a loaded CUmodule / hipModule_t (an int handle) with this
        PE's state, in the primary context of the group's device (ROCm/mori shmem_module_init,
        NVSHMEM nvshmemx_cumodule_init). VRAM heaps only; MORI_EINVAL when the module lacks the global."""
        _lib.check(_L().mori_shmem_module_init(self._h(), _int(module, "module")), "module_init")

    # ---- views ----
    def tensor(self, addr, shape, dtype, device=None):
        """A torch tensor over heap memory at addr (no copy): see mori.shmem.tensor. For a VRAM heap
        the device is cuda:<the group's device> unless given."""
        if device is None and not self._host():
            device = "cuda:%d" % self.gpu_device
        self._inside(addr, shape, _itemsize_torch(dtype), "tensor")
        return tensor(addr, shape, dtype, device=device, host=self._host(), owner=_ViewHold(self))

    def _host(self):
        return self.heap_kind == MEM_HOST

    def numpy(self, addr, shape, dtype):
        """A numpy array over a host heap's memory at addr (no copy): this PE's heap, or another
        PE's at the address ptr_p2p gave. Host heaps only. The view holds the Group (see leave)."""
        if not self._host():
            raise MoriError(MORI_ENOTSUP, "numpy views need a host heap; use tensor() for VRAM")
        self._inside(addr, shape, _np_dtype(dtype).itemsize, "numpy view")
        return numpy_view(addr, shape, dtype, owner=_ViewHold(self))

    def _inside(self, addr, shape, itemsize, what):
        """MORI_ERANGE unless [addr, addr + the view's bytes) lies in this PE's heap, or in the
        mapping of a PE's heap on this node (a ptr_p2p address: libmori unmaps those at leave too)."""
        a, n = _int(addr, "addr"), _nbytes(_shape(shape), itemsize)
        base, size = self.heap_base(), self.heap_size()
        if base <= a and a + n <= base + size:
            return
        for pe in self.team_node():
            b = self.ptr_p2p(base, pe)
            if b and b <= a and a + n <= b + size:
                return
        raise MoriError(MORI_ERANGE, "%s [%#x, +%d) leaves group %r's heap [%#x, +%d) and the PEs' heaps it maps"
                        % (what, a, n, self.name, base, size))


class _ViewHold:
    """What the buffer under a Group's view holds (numpy's base chain, torch's storage keep the
    buffer alive): a strong reference to the Group, so that the Group, and its heap, cannot be
    collected while a view lives, and a count the Group's deferred leave waits on."""

    def __init__(self, group):
        group._h()  # a left group makes no views
        group._view_born()
        self._group = group

    def __del__(self):
        g, self._group = getattr(self, "_group", None), None
        if g is not None:
            g._view_died()


def join(name, rank, world_size, heap_size=0, heap_kind="host", gpu_device=-1, root=None, timeout_us=0,
         runtime_dir=None):
    """Join group `name` as PE `rank` of `world_size` through the node's morid (collective: returns when
    every PE has joined, or raises MORI_ETIMEDOUT naming the missing ranks at the deadline).

    heap_size: bytes per PE (0: morid's shmem_heap_size); heap_kind: "host" (memfd, no GPU) or "vram";
    gpu_device: ordinal for VRAM heaps (-1: $MORI_GPU_DEVICE, else 0); root: host:port of the root
    daemon's peer listener when PEs span nodes (None: this node only); timeout_us: deadline of the
    join and every later collective call (0: 30 s); runtime_dir: morid's (None: $MORI_RUNTIME_DIR,
    else /run/mori). MORI_EEXIST when a group of that name still lives; MORI_EINVAL when PEs disagree."""
    o = _opts(heap_size, heap_kind, gpu_device, root, timeout_us)
    bname = _lib.as_bytes(name, "name")  # before the client: a bad name costs nothing
    if bname is None:
        raise MoriError(MORI_EINVAL, "name must be str or bytes, not None")
    rank, world_size = _rank(rank, "rank"), _rank(world_size, "world_size")
    c = _open_client(runtime_dir, _pe_label(name, rank))
    g = ctypes.c_void_p()
    rc = _L().mori_shmem_init(c, bname, rank, world_size, ctypes.byref(o), ctypes.byref(g))
    if rc < 0:
        msg = _lib.last_error()
        _L().mori_client_close(c)
        raise MoriError(rc, "join %r as PE %d of %d: %s" % (name, rank, world_size, msg))
    return Group(c, g, name, o.heap_kind, _ordinal(gpu_device))


init = join  # mori_shmem_init's name (ROCm/mori's ShmemInit, by name)


def get_unique_id(runtime_dir=None):
    """A fresh group's unique id (bytes, at most 128) naming it and its root daemon (ROCm/mori
    ShmemGetUniqueId, NVSHMEM nvshmemx_get_uniqueid). Made on one PE, broadcast, passed to init_uid."""
    c = _open_client(runtime_dir, "shmem:uid")
    try:
        buf = ctypes.create_string_buffer(UID_BYTES)
        n = ctypes.c_size_t()
        _lib.check(_L().mori_shmem_get_unique_id(c, buf, UID_BYTES, ctypes.byref(n)), "get_unique_id")
        return buf.raw[:n.value]
    finally:
        _L().mori_client_close(c)


def init_uid(uid, rank, world_size, heap_size=0, heap_kind="host", gpu_device=-1, root=None, timeout_us=0,
             runtime_dir=None):
    """join() by the unique id from get_unique_id (ROCm/mori ShmemInitAttr with a unique id)."""
    if not isinstance(uid, (bytes, bytearray)) or not 0 < len(uid) <= UID_BYTES:
        raise MoriError(MORI_EINVAL, "uid must be the 1..%d bytes get_unique_id returned" % UID_BYTES)
    rank, world_size = _rank(rank, "rank"), _rank(world_size, "world_size")
    o = _opts(heap_size, heap_kind, gpu_device, root, timeout_us)
    c = _open_client(runtime_dir, "shmem:uid:%d" % rank)
    g = ctypes.c_void_p()
    u = ctypes.create_string_buffer(bytes(uid), len(uid))
    rc = _L().mori_shmem_init_uid(c, u, len(uid), rank, world_size, ctypes.byref(o), ctypes.byref(g))
    if rc < 0:
        msg = _lib.last_error()
        _L().mori_client_close(c)
        raise MoriError(rc, "init_uid as PE %d of %d: %s" % (rank, world_size, msg))
    return Group(c, g, "uid", o.heap_kind, _ordinal(gpu_device))
