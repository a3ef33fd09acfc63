"""mori.io's argument helpers: yes/no flags and transfer options, descriptor and index arrays
(built without a Python loop where numpy is there) and the buffers register() takes."""
import ctypes
import sys

from .. import _lib
from .._lib import Desc, XferOpts
from ..errors import MoriError, MORI_EINVAL, MORI_ERANGE


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
    o = XferOpts(size=ctypes.sizeof(XferOpts))  # every other field zero: the defaults (mori.h)
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
