"""libmori through ctypes: finding the library, the prototypes of include/mori.h, and turning
return codes into MoriError.

The library is looked up, in order, at:
  1. $MORI_LIB (a path to the shared object; nothing else is tried when it is set);
  2. the build tree, when this package runs from python/ of a mori checkout: $B/libmori.so.0 or
     $B/libmori.so ($B as make was given it, default "build", relative to the checkout);
  3. the directory `make install` recorded in _installed.py;
  4. "libmori.so.0", then "libmori.so", through the system's loader (ld.so.cache, LD_LIBRARY_PATH).

Every function is called through ctypes.CDLL, which releases the GIL for the duration of the
foreign call: a wait on a transfer or a notification never blocks other Python threads.

Integers: ctypes keeps the low bits of a Python int too wide for its C type (2**32 passed as an
int becomes 0). ival() is the one check: every integer the package hands to C (arguments,
structure fields, arrays) goes through it, and every function of the prototype tables is wrapped
so that an integer argument outside its C type raises MoriError(MORI_ERANGE) and a float, str or
other non-integer one MoriError(MORI_EINVAL), instead of being truncated or raising ctypes'
ArgumentError.
"""
import ctypes
import math
import numbers
import operator
import os
import threading

from .errors import MoriError, MORI_EINVAL, MORI_ENOENT, MORI_ENOTSUP, MORI_ERANGE

_here = os.path.dirname(os.path.abspath(__file__))

MEM_BLOB_MAX = 128
MEM_HOST = 0
MEM_VRAM = 1
OP_READ = 0
OP_WRITE = 1


class Desc(ctypes.Structure):
    """struct mori_desc: one (local offset, remote offset, length) triple, bytes."""
    _fields_ = [("local_offset", ctypes.c_uint64), ("remote_offset", ctypes.c_uint64),
                ("length", ctypes.c_uint64)]


class XferOpts(ctypes.Structure):
    """struct mori_xfer_opts."""
    _fields_ = [("notif_tag", ctypes.c_uint64), ("has_notif", ctypes.c_int),
                ("timeout_us", ctypes.c_int64), ("stream", ctypes.c_void_p)]


class Notif(ctypes.Structure):
    """struct mori_notif."""
    _fields_ = [("tag", ctypes.c_uint64), ("region_id", ctypes.c_uint64),
                ("from_pid", ctypes.c_int32), ("reserved", ctypes.c_uint32)]


_P = ctypes.c_void_p
_I = ctypes.c_int
_U64 = ctypes.c_uint64
_SZ = ctypes.c_size_t
_PP = ctypes.POINTER(ctypes.c_void_p)
_OPTS = ctypes.POINTER(XferOpts)
_DESC = ctypes.POINTER(Desc)

# name: (restype, argtypes). Exactly the functions of include/mori.h.
_PROTOS = {
    "mori_strerror": (ctypes.c_char_p, [_I]),
    "mori_version": (ctypes.c_char_p, []),
    "mori_client_open": (_I, [ctypes.c_char_p, ctypes.c_char_p, _PP]),
    "mori_client_close": (None, [_P]),
    "mori_client_last_error": (ctypes.c_char_p, [_P]),
    "mori_client_node": (ctypes.c_char_p, [_P]),
    "mori_client_sq_pending": (ctypes.c_uint, [_P]),
    "mori_mem_alloc": (_I, [_P, _SZ, _I, _PP]),
    "mori_mem_register": (_I, [_P, _P, _SZ, _I, _PP]),
    "mori_mem_deregister": (_I, [_P]),
    "mori_mem_ptr": (_P, [_P]),
    "mori_mem_size": (_SZ, [_P]),
    "mori_mem_pack": (_I, [_P, _P, _SZ, ctypes.POINTER(_SZ)]),
    "mori_mem_unpack": (_I, [_P, ctypes.c_char_p, _SZ, _PP]),
    "mori_mem_publish": (_I, [_P, ctypes.c_char_p]),
    "mori_mem_open_remote": (_I, [_P, ctypes.c_char_p, ctypes.c_char_p, _PP]),
    "mori_write": (_I, [_P, _U64, _P, _U64, _U64, _OPTS, _PP]),
    "mori_read": (_I, [_P, _U64, _P, _U64, _U64, _OPTS, _PP]),
    "mori_xfer_batch": (_I, [_I, _P, _P, _P, _SZ, _OPTS, _PP]),
    "mori_xfer_prep": (_I, [_P, _P, _P, _SZ, _PP]),
    "mori_xfer_submit": (_I, [_P, _I, _P, _SZ, _OPTS, _PP]),
    "mori_xfer_list_free": (None, [_P]),
    "mori_xfer_status": (_I, [_P, ctypes.POINTER(ctypes.c_char_p)]),
    "mori_xfer_wait": (_I, [_P, ctypes.c_int64]),
    "mori_xfer_wait_all": (_I, [_PP, _SZ, ctypes.c_int64]),
    "mori_xfer_cancel": (_I, [_P]),
    "mori_xfer_bytes": (_U64, [_P]),
    "mori_xfer_free": (None, [_P]),
    "mori_notif_poll": (_I, [_P, ctypes.POINTER(Notif), _SZ, ctypes.c_int64]),
}

def _span(t):
    bits = 8 * ctypes.sizeof(t)
    return (0, (1 << bits) - 1) if t(-1).value > 0 else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


# The integer C types of the prototype tables and their ranges; c_void_p: addresses (as ints).
_RANGE = {t: _span(t) for t in (ctypes.c_int, ctypes.c_uint, ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64,
                                ctypes.c_uint64, ctypes.c_size_t, ctypes.c_ssize_t, ctypes.c_long,
                                ctypes.c_ulong, ctypes.c_uint8, ctypes.c_int8, ctypes.c_uint16, ctypes.c_int16)}
_RANGE[ctypes.c_void_p] = _span(ctypes.c_size_t)
def _cname(t):
    if t is ctypes.c_void_p:
        return "an address"
    a, b = _RANGE[t]
    return "%sint%d" % ("u" if a == 0 else "", 8 * ctypes.sizeof(t))


def ival(v, what, ctype=ctypes.c_uint64, lo=None, hi=None):
    """v as a Python int that ctype holds (and lo <= v <= hi when given): MoriError(MORI_EINVAL)
    unless v is an integer (int, numpy integer, anything with __index__; not bool, float, str or
    None), MoriError(MORI_ERANGE) outside the range. `what` names it in the message."""
    if type(v) is int:
        n = v
    else:
        if isinstance(v, (bool, float)) or v is None:
            raise MoriError(MORI_EINVAL, "%s must be an int, not %s %r" % (what, type(v).__name__, v))
        try:
            n = operator.index(v)
        except TypeError:
            raise MoriError(MORI_EINVAL, "%s must be an int, not %s" % (what, type(v).__name__)) from None
    a, b = _RANGE[ctype]
    a = a if lo is None else max(a, lo)
    b = b if hi is None else min(b, hi)
    if not a <= n <= b:
        raise MoriError(MORI_ERANGE, "%s %d is outside %d..%d (%s)" % (what, n, a, b, _cname(ctype)))
    return n


def duration_us(v, what, unit_us):
    """A timeout v given in seconds (unit_us=1000000) or milliseconds (1000), as integer
    microseconds that int64 holds: MoriError(MORI_EINVAL) unless v is a real number (int, float,
    numpy number; not bool, str or None) or when it is NaN, MORI_ERANGE when it is infinite or too
    large. The caller gives negative values their meaning (usually: no limit)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise MoriError(MORI_EINVAL, "%s must be a number, not %s %r" % (what, type(v).__name__, v))
    if isinstance(v, numbers.Integral):
        us = operator.index(v) * unit_us
    else:
        f = float(v)
        if math.isnan(f):
            raise MoriError(MORI_EINVAL, "%s is NaN" % what)
        if math.isinf(f):
            raise MoriError(MORI_ERANGE, "%s is infinite: give a finite number" % what)
        us = int(f * unit_us)
    a, b = _RANGE[ctypes.c_int64]
    if not a <= us <= b:
        raise MoriError(MORI_ERANGE, "%s %r is outside int64 microseconds" % (what, v))
    return us


def _guard(name, f, argtypes):
    """f, or a wrapper of it that checks its integer and address arguments with ival (see the
    module's docstring). Other arguments (None for an address, ctypes objects, byref, bytes) pass
    as they are. The common case, an int in range, costs one type test and two compares."""
    checks = tuple((i, t, t is ctypes.c_void_p) + _RANGE[t] for i, t in enumerate(argtypes or ()) if t in _RANGE)
    if not checks:
        return f

    def slow(i, t, v):
        if t is ctypes.c_void_p and (v is None or isinstance(v, (ctypes._SimpleCData, ctypes.Array, ctypes._Pointer,
                                                                 bytes))):
            return
        if isinstance(v, ctypes._SimpleCData) and t is not ctypes.c_void_p:
            return
        if type(v).__name__ == "CArgObject":  # ctypes.byref(...)
            return
        ival(v, "%s: argument %d" % (name, i + 1), t)

    def call(*args):
        for i, t, ptr, a, b in checks:
            v = args[i]
            if v.__class__ is int:
                if a <= v <= b:
                    continue
            elif v is None and ptr:
                continue
            slow(i, t, v)
        return f(*args)
    call.__name__ = name
    call.raw = f
    return call


def _set_protos(lib, protos):
    """Set the prototypes of `protos` on lib's functions, each wrapped by _guard."""
    for name, (res, args) in protos.items():
        f = lib[name]  # a fresh function object: the attribute may already be a wrapper
        f.restype, f.argtypes = res, args
        setattr(lib, name, _guard(name, f, args))


_lock = threading.Lock()
_lib = None
_lib_path = None


def _build_dir_candidates():
    root = os.path.dirname(os.path.dirname(_here))  # python/mori -> the checkout
    if not os.path.isfile(os.path.join(root, "include", "mori.h")):
        return []
    b = os.environ.get("B") or "build"
    bdir = b if os.path.isabs(b) else os.path.join(root, b)
    return [os.path.join(bdir, "libmori.so.0"), os.path.join(bdir, "libmori.so")]


def _installed_candidates():
    try:
        from . import _installed  # written by `make install`
    except ImportError:
        return []
    d = getattr(_installed, "LIBDIR", "")
    return [os.path.join(d, "libmori.so.0"), os.path.join(d, "libmori.so")] if d else []


def candidates():
    """The paths load() tries, in order."""
    env = os.environ.get("MORI_LIB")
    if env:
        return [env]
    paths = [p for p in _build_dir_candidates() + _installed_candidates() if os.path.exists(p)]
    return paths + ["libmori.so.0", "libmori.so"]


def load():
    """The loaded libmori (ctypes.CDLL), loading it on first use. Raises MoriError(MORI_ENOENT)
    naming every path tried when none loads."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidates():
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            missing = [n for n in _PROTOS if not hasattr(lib, n)]
            if missing:
                tried.append("%s (lacks %s)" % (path, ", ".join(missing)))
                continue
            _set_protos(lib, _PROTOS)
            _lib_path = path
            _lib = lib
            return lib
        raise MoriError(MORI_ENOENT, "libmori not found; tried: " + "; ".join(tried) +
                        " (set MORI_LIB to its path)")


_bound = set()  # names of the prototype tables bind() has set on the loaded libmori


def bind(what, protos):
    """libmori with the prototypes of one module's table (name -> (restype, argtypes)) set, once
    per table; MoriError(MORI_ENOTSUP) naming what the library lacks when it is older than the
    module (`what`: the feature, e.g. "MORI-SHMEM")."""
    lib = load()
    if what in _bound:
        return lib
    with _lock:
        if what not in _bound:
            missing = [n for n in protos if not hasattr(lib, n)]
            if missing:
                raise MoriError(MORI_ENOTSUP, "%s has no %s (lacks %s)" % (_lib_path, what, ", ".join(missing)))
            _set_protos(lib, protos)
            _bound.add(what)
    return lib


def path():
    """The path libmori was loaded from (loading it if needed)."""
    load()
    return _lib_path


def last_error():
    """libmori's detail message of the calling thread's last failure."""
    m = load().mori_client_last_error(None)
    return m.decode("utf-8", "replace") if m else ""


def check(rc, what=""):
    """Raise MoriError for a negative return code, with libmori's detail message; else return rc."""
    if rc < 0:
        msg = last_error()
        # libmori's message often names the call already ("EP create: ..."): say it once
        if what and msg and not msg.startswith(what):
            msg = "%s: %s" % (what, msg)
        raise MoriError(rc, msg or what)
    return rc


def strerror(code):
    return load().mori_strerror(ival(code, "code", ctypes.c_int)).decode()


def version():
    return load().mori_version().decode()


def as_bytes(s, what):
    if s is None:
        return None
    if isinstance(s, str):
        s = s.encode()
    if isinstance(s, bytes):
        if b"\0" in s:  # C would see only the part before it
            raise MoriError(MORI_EINVAL, "%s %r has an embedded NUL" % (what, s))
        return s
    raise MoriError(MORI_EINVAL, "%s must be str or bytes, not %s" % (what, type(s).__name__))


def as_blob(b, what):
    """A bytes-like object (bytes, bytearray, memoryview, a uint8 array) as bytes;
    MoriError(MORI_EINVAL) for anything else: bytes() would encode a str, make an int that many
    zero bytes, or raise TypeError."""
    if isinstance(b, bytes):
        return b
    if not isinstance(b, (str, int)) and b is not None:
        try:
            return bytes(memoryview(b).cast("B"))
        except (TypeError, ValueError):
            pass
    raise MoriError(MORI_EINVAL, "%s must be bytes, not %s" % (what, type(b).__name__))


__all__ = ["load", "path", "candidates", "check", "last_error", "strerror", "version", "ival", "duration_us", "as_blob",
           "Desc",
           "XferOpts", "Notif"]
