"""mori.shmem's zero-copy views of heap memory: torch tensors (device memory through
__cuda_array_interface__, host memory through numpy) and numpy arrays over an address. Import
them from mori.shmem; Group.tensor() and Group.numpy() are the checked forms."""
import ctypes

from .. import _lib
from ..errors import MoriError, MORI_EINVAL


def _int(addr, what):
    """An address argument: an int, or None/0 for NULL."""
    if addr is None:
        return 0
    return _lib.ival(addr, what, ctypes.c_void_p)



class _CudaBuffer:
    """An object exposing __cuda_array_interface__ (v3) over device bytes, for torch.as_tensor /
    cupy.asarray (ROCm/mori's MoriShmemBuffer does the same)."""

    def __init__(self, addr, nbytes, owner=None):
        self._owner = owner  # torch.as_tensor's storage holds this object, so the owner lives as long
        # no "stream" key: the memory is not tied to a stream, consumers need not synchronise
        self.__cuda_array_interface__ = {"data": (_int(addr, "addr"), False), "shape": (_lib.ival(nbytes, "nbytes"),),
                                         "typestr": "|u1",
                                         "strides": None, "version": 3}


def _shape(shape):
    """A shape as a tuple of ints: an int, or a sequence of them (MORI_EINVAL otherwise)."""
    if not isinstance(shape, (list, tuple)):
        return (_lib.ival(shape, "shape", ctypes.c_int64),)
    return tuple(_lib.ival(d, "shape %r: dimension" % (shape,), ctypes.c_int64) for d in shape)


def _nbytes(shape, itemsize):
    n = itemsize
    for d in shape:
        if d < 0:
            raise MoriError(MORI_EINVAL, "negative dimension in shape %r" % (shape,))
        n *= d
    return n


def _np_dtype(dtype):
    np = __import__("numpy")
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise MoriError(MORI_EINVAL, "dtype %r is not a numpy dtype" % (dtype,)) from None
    if dt.hasobject or dt.itemsize == 0:  # Python object pointers, or no bytes: not a view of memory
        raise MoriError(MORI_EINVAL, "dtype %r cannot view heap memory" % (dtype,))
    return dt


def _itemsize_torch(dtype):
    torch = __import__("torch")
    if not isinstance(dtype, torch.dtype):
        raise MoriError(MORI_EINVAL, "dtype %r is not a torch dtype" % (dtype,))
    return torch.empty((), dtype=dtype).element_size()


def tensor(addr, shape, dtype, device=None, host=False, owner=None):
    """A torch tensor of `shape` and `dtype` viewing memory at addr (an int), without a copy: device
    memory through __cuda_array_interface__ (device: "cuda" or "cuda:N", default the current device),
    or host memory (host=True) through numpy. The tensor holds `owner` (Group.tensor passes what
    keeps its Group); otherwise the caller keeps the memory alive as long as the tensor. torch is
    imported here, not at module import."""
    import torch
    shape = _shape(shape)
    addr = _int(addr, "addr")
    if not addr:
        raise MoriError(MORI_EINVAL, "tensor of a NULL address")
    item = _itemsize_torch(dtype)
    nbytes = _nbytes(shape, item)
    if addr % item:
        raise MoriError(MORI_EINVAL, "address %#x is not aligned to %s's %d bytes" % (addr, dtype, item))
    if host:
        np = __import__("numpy")
        raw = numpy_view(addr, (nbytes,), np.uint8, owner=owner)
        return torch.from_numpy(raw).view(dtype).view(shape)
    t = torch.as_tensor(_CudaBuffer(addr, nbytes, owner), device=device or "cuda")
    return t.view(dtype).view(shape)


def numpy_view(addr, shape, dtype, owner=None):
    """A numpy array of shape/dtype over host memory at addr (no copy). The array, and every view
    of it, holds `owner` (Group.numpy passes what keeps its Group); otherwise the caller keeps the
    memory alive."""
    np = __import__("numpy")
    shape = _shape(shape)
    dt = _np_dtype(dtype)
    nbytes = _nbytes(shape, dt.itemsize)
    addr = _int(addr, "addr")
    if not addr:
        raise MoriError(MORI_EINVAL, "view of a NULL address")
    buf = (ctypes.c_char * nbytes).from_address(addr)
    buf._mori_owner = owner  # numpy's base chain holds buf: the owner lives as long as any view
    try:
        return np.frombuffer(buf, dtype=dt, count=nbytes // dt.itemsize).reshape(shape)
    except (TypeError, ValueError) as e:
        raise MoriError(MORI_EINVAL, "numpy view %r of %s: %s" % (shape, dt, e)) from None
