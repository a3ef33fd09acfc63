"""mori.io's native handles: the regions an engine owns (_Mem), the second mapping behind an
allocate()d region's views (_Dup), MemoryDesc and TransferStatus. Import them from mori.io."""
import atexit
import ctypes
import errno
import mmap
import os
import struct
import sys
import threading
import weakref

from .. import _lib
from ..errors import (MoriError, MORI_OK, MORI_EINVAL, MORI_ENOENT, MORI_EINPROGRESS, MORI_ECANCELED,
                     MORI_EPROTO, MORI_ETIMEDOUT, MORI_ENOMEM, MORI_ESYS)
from .types import MemoryLocationType, status_code

_exiting = False


def _at_exit():
    global _exiting
    _exiting = True


atexit.register(_at_exit)


def _quiet(pid):
    """True where a finaliser must do nothing: interpreter exit, or a forked child (whose
    native objects belong to the parent's session)."""
    return _exiting or sys.is_finalizing() or os.getpid() != pid


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
            if len(blob) != blen or not blen or o + 1 + nlen > len(b):
                raise ValueError("truncated")
            if o + 1 + nlen != len(b):
                raise ValueError("%d bytes past its end" % (len(b) - o - 1 - nlen))
            return MemoryDesc(key, 0, dev, data, size, MemoryLocationType(loc), blob, name=name)
        except (IndexError, struct.error):  # read past the end: cut short
            raise MoriError(MORI_EPROTO, "not a packed MemoryDesc (truncated)") from None
        except (ValueError, UnicodeDecodeError) as e:
            raise MoriError(MORI_EPROTO, "not a packed MemoryDesc (%s)" % e)

    def __eq__(self, o):
        return isinstance(o, MemoryDesc) and self.blob == o.blob

    def __hash__(self):
        return hash(self.blob)

    def __repr__(self):
        return "MemoryDesc(engine_key=%r, id=%r, loc=%s, size=%d%s)" % (
            self.engine_key, self.id, self.loc.name, self.size, ", local" if self.is_local else "")


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
            st = _lib.Status()
            rc = _lib.load().mori_xfer_status(self._x, ctypes.byref(st))
            if rc != MORI_EINPROGRESS:
                self._record(rc, _lib.status_message(st))
            return rc

    def _force(self, wait_us, why):
        """The engine's end of this transfer (a region or the engine closing): wait up to
        wait_us, then record the result, or MORI_ECANCELED with `why`, and free the handle."""
        with self._lock:
            if self._x is None:
                return
            lib = _lib.load()
            lib.mori_xfer_wait(self._x, wait_us)
            st = _lib.Status()
            rc = lib.mori_xfer_status(self._x, ctypes.byref(st))
            msg = _lib.status_message(st)
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
    from ..errors import code_name
    return code_name(rc)
