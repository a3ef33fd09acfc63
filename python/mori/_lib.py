"""libmori through ctypes: finding the library, binding the prototypes of mori._capi to it, and
turning return codes into MoriError.

The library is looked up, in order, at:
  1. $MORI_LIB (a path to the shared object; nothing else is tried when it is set);
  2. libmori.so inside the package, where a wheel built with the libmori setting carries it
     (python/README.md);
  3. the build tree, when this package runs from python/ of a mori checkout: $B/SONAME or
     $B/libmori.so ($B as make was given it, default "build", relative to the checkout);
  4. the directory recorded in _installed.py (by `make install-python`, or by a wheel built with
     the libdir setting);
  5. SONAME, then "libmori.so", through the system's loader (ld.so.cache, LD_LIBRARY_PATH).
SONAME is the library of the ABI whose tables mori._capi holds (libmori.so.<ABI major>).

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

from . import _capi
from ._capi import Desc, XferOpts, Notif, Status  # noqa: F401 (mori._lib's names)

_here = os.path.dirname(os.path.abspath(__file__))

MEM_BLOB_MAX = _capi.MEM_BLOB_MAX
MEM_HOST = _capi.MEM_HOST
MEM_VRAM = _capi.MEM_VRAM
OP_READ = _capi.XFER_READ
OP_WRITE = _capi.XFER_WRITE
SONAME = "libmori.so.%d" % _capi.ABI_MAJOR

# name: (restype, argtypes) of every function of include/mori.h (the other headers' tables are
# bound by the modules that use them: bind()).
_PROTOS = _capi.ctypes_protos(_capi.MORI_H)


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
    return [os.path.join(bdir, SONAME), os.path.join(bdir, "libmori.so")]


def _installed_candidates():
    try:
        from . import _installed  # written by `make install-python` or the wheel's libdir setting
    except ImportError:
        return []
    d = getattr(_installed, "LIBDIR", "")
    return [os.path.join(d, SONAME), os.path.join(d, "libmori.so")] if d else []


def candidates():
    """The paths load() tries, in order."""
    env = os.environ.get("MORI_LIB")
    if env:
        return [env]
    bundled = [os.path.join(_here, "libmori.so")]
    paths = [p for p in bundled + _build_dir_candidates() + _installed_candidates() if os.path.exists(p)]
    return paths + [SONAME, "libmori.so"]


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


def status_message(st):
    """The message of a filled mori_status (Status) as str; "" when it has none."""
    return st.message.decode("utf-8", "replace") if st.message else ""


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


__all__ = ["load", "path", "candidates", "check", "last_error", "status_message", "strerror", "version", "ival",
           "duration_us", "as_blob", "Desc", "XferOpts", "Notif", "Status"]
