"""mori.umbp's argument helpers: keys as bytes, the memory a value is read from or written to
(bytes, bytearray, memoryview, numpy arrays, torch tensors on the CPU or a GPU), and the C arrays
of keys and items a batch hands to libmori."""
import array
import ctypes
import itertools
import sys

from .. import _lib
from .._capi import UmbpKey, UmbpItem
from ..errors import MoriError, MORI_EINVAL
from ..io.args import _numpy, _torch_tensor  # one test of each, shared with mori.io


def key_bytes(k):
    """A key as bytes: str (UTF-8), bytes, bytearray or memoryview. Its length (1..KEY_MAX) is
    libmori's to check, so that a batch reports a bad key in that key's status."""
    if isinstance(k, str):
        return k.encode()
    if isinstance(k, bytes):
        return k
    if isinstance(k, (bytearray, memoryview)):
        return bytes(k)
    raise MoriError(MORI_EINVAL, "a key must be str or bytes, not %s" % type(k).__name__)


def span(obj, writable, what):
    """(address, nbytes, keep) of the memory of obj, a value's bytes:
    a torch tensor (CPU or CUDA; contiguous): data_ptr() and numel() * element_size();
    bytes, or any buffer (bytearray, memoryview, numpy array, array.array, mmap; C-contiguous);
    an (address, nbytes) pair of ints: raw memory the caller keeps valid.
    writable: the memory will be written (a get), so read-only buffers are refused.
    keep holds what must live while libmori uses the address. MoriError(MORI_EINVAL) for anything
    else, naming `what`."""
    if type(obj) is tuple and len(obj) == 2:
        return (pointer(obj[0], what + " address"), _lib.ival(obj[1], what + " size", ctypes.c_size_t), None)
    if _torch_tensor(obj):
        if not obj.is_contiguous():
            raise MoriError(MORI_EINVAL, "%s: the tensor is not contiguous" % what)
        return obj.data_ptr(), obj.numel() * obj.element_size(), obj
    if isinstance(obj, bytes):
        if writable:
            raise MoriError(MORI_EINVAL, "%s: bytes are read-only: give a bytearray, array or tensor" % what)
        return ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value, len(obj), obj
    if obj is None or isinstance(obj, (str, int, float)):
        raise MoriError(MORI_EINVAL, "%s must be bytes, a buffer, an array or a tensor, not %s" %
                        (what, type(obj).__name__))
    try:
        mv = memoryview(obj)
    except TypeError:
        raise MoriError(MORI_EINVAL, "%s must be bytes, a buffer, an array or a tensor, not %s" %
                        (what, type(obj).__name__)) from None
    if not mv.c_contiguous:
        raise MoriError(MORI_EINVAL, "%s: the buffer is not C-contiguous" % what)
    if mv.readonly and writable:
        raise MoriError(MORI_EINVAL, "%s: the buffer (%s) is read-only" % (what, type(obj).__name__))
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B")
    n = mv.nbytes
    if n == 0:
        return None, 0, mv
    if not mv.readonly:
        arr = (ctypes.c_char * n).from_buffer(mv)
        return ctypes.addressof(arr), n, (obj, mv, arr)
    np = _numpy()
    if np is not None:  # a read-only buffer's address, without a copy
        a = np.frombuffer(mv, dtype=np.uint8)
        return a.ctypes.data, n, (obj, mv, a)
    b = mv.tobytes()
    return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value, n, b


def pointer(p, what):
    """An address given as an int (ROCm/mori's *_from_ptr and *_into_ptr calls)."""
    return _lib.ival(p, what, ctypes.c_void_p)


class KeyArray:
    """The keys of a batch in one C buffer: keys[i] is (address, length) inside it."""

    def __init__(self, keys):
        bs = [key_bytes(k) for k in keys]
        self.n = len(bs)
        self.buf = ctypes.create_string_buffer(b"".join(bs), sum(map(len, bs)) or 1)
        base = ctypes.addressof(self.buf)
        lens = list(map(len, bs))
        offs = list(itertools.accumulate(lens, initial=0))[:-1]
        self.spans = [(base + o, n) for o, n in zip(offs, lens)]

    def keys(self):
        """A mori_umbp_key array of the keys (filled in one copy where the struct is two 8-byte
        words, as on every 64-bit ABI)."""
        arr = (UmbpKey * self.n)()
        if self.n and ctypes.sizeof(UmbpKey) == 16:
            flat = array.array("Q", itertools.chain.from_iterable(self.spans))
            ctypes.memmove(arr, flat.buffer_info()[0], 16 * self.n)
            return arr
        for i, (a, n) in enumerate(self.spans):
            arr[i].data, arr[i].len = a, n
        return arr

    def items(self, addrs, sizes, depths=None, pins=None):
        """A mori_umbp_item array: key i, buf addrs[i], size sizes[i] (bytes), depth and pin."""
        arr = (UmbpItem * self.n)()
        for i, (a, n) in enumerate(self.spans):
            it = arr[i]
            it.key.data, it.key.len = a, n
            it.buf, it.size = addrs[i], sizes[i]
            it.depth = -1 if depths is None else _lib.ival(depths[i], "depths[%d]" % i, ctypes.c_int32, lo=-1)
            it.pin = 0 if pins is None else _lib.ival(pins[i], "pins[%d]" % i, ctypes.c_uint8, hi=2)
        return arr
