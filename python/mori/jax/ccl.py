"""MORI-CCL's collectives for JAX: mori.jax.Communicator and the functions all_reduce, all_gather,
reduce_scatter, all_to_all, usable inside jax.jit. Import them from mori.jax."""
import ctypes

import numpy as np

from .. import ccl as _ccl
from ..errors import MoriError, MORI_EINVAL
from . import _ffi

# what MORI-CCL moves (numpy / jnp names) and what it reduces (include/mori_coll.h)
_MOVES = ("uint8", "int32", "float16", "float32", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz")
_REDUCES = ("float16", "float32", "bfloat16")
_OPS = {"sum": _ccl.SUM, "max": _ccl.MAX, "min": _ccl.MIN}


class Communicator:
    """A mori.ccl Communicator (ranks 0..n-1 of a mori.shmem Group, or its node team) whose
    collectives run as XLA custom calls on XLA's stream. Collective to create and to destroy; the
    keyword arguments are mori.ccl.Communicator's (node_team, scratch_bytes, timeout_us, algo)."""

    def __init__(self, group, **kw):
        _ffi.register()
        xla = _ffi.load()
        self._comm = _ccl.Communicator(group, **kw)
        xid = ctypes.c_int64()
        rc = xla.mori_xla_comm_register(self._comm._h(), group._c, ctypes.byref(xid))
        if rc < 0:
            self._comm.destroy()
            _ffi.check(rc, "communicator for XLA")
        self._setup(self._comm.size(), xid.value)

    def _setup(self, size, xla_id):
        self._n, self._id = size, xla_id

    def size(self):
        return self._n

    def rank(self):
        return self._comm.rank()

    def check(self):
        """Raise MoriError if a collective failed (block on its outputs first): mori.ccl's check."""
        self._comm.check()

    def _xid(self):
        if self._id is None:
            raise MoriError(MORI_EINVAL, "communicator destroyed")
        return self._id

    def destroy(self):
        """Collective: forget the communicator (compiled steps that call it then fail with a clear
        error) and free its heap scratch. Block on the last step's outputs first."""
        xid, self._id = self._id, None
        if xid is not None:
            _ffi.load().mori_xla_unregister(xid)
            self._comm.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    # ---- the collectives (jax.lax's names and shapes, leading axis = the ranks) ----
    def _call(self, target, x, out_shape, op=None, reduce=False):
        import jax
        dt = np.dtype(x.dtype).name
        if dt not in (_REDUCES if reduce else _MOVES):
            raise MoriError(MORI_EINVAL, "%s of %s: MORI-CCL %s %s" % (
                target, dt, "reduces" if reduce else "moves", ", ".join(_REDUCES if reduce else _MOVES[:-1])))
        attrs = {"comm": self._xid()}
        if reduce:
            if op not in _OPS:
                raise MoriError(MORI_EINVAL, "%s: op %r is none of %s" % (target, op, ", ".join(sorted(_OPS))))
            attrs["op"] = _OPS[op]
        (y,) = _ffi.call(target, [jax.ShapeDtypeStruct(tuple(out_shape), x.dtype)], [x], **attrs)
        return y

    def all_reduce(self, x, op="sum"):
        """op ("sum", "max", "min") over ranks of x, elementwise (jax.lax.psum / pmax / pmin)."""
        return self._call("mori_allreduce", x, x.shape, op, reduce=True)

    def all_gather(self, x, tiled=False):
        """Every rank's x, rank-major: [n, *x.shape] (jax.lax.all_gather), tiled: [n * x.shape[0], ...]."""
        shape = tuple(int(d) for d in x.shape)
        if tiled:
            if not shape:
                raise MoriError(MORI_EINVAL, "all_gather(tiled=True) of a scalar")
            return self._call("mori_allgather", x, (self._n * shape[0],) + shape[1:])
        return self._call("mori_allgather", x, (self._n,) + shape)

    def reduce_scatter(self, x, op="sum", tiled=False):
        """The sum (op) over ranks of x's part for this rank (jax.lax.psum_scatter, scatter_dimension 0):
        x [n, ...] -> [...]; tiled: x [n * m, ...] -> [m, ...]."""
        shape = tuple(int(d) for d in x.shape)
        n = self._n
        if not shape or (shape[0] != n if not tiled else shape[0] % n):
            raise MoriError(MORI_EINVAL, "reduce_scatter: x's leading axis %s %s the %d ranks" % (
                shape[0] if shape else "(none)", "is not a multiple of" if tiled else "is not", n))
        out = ((shape[0] // n,) + shape[1:]) if tiled else shape[1:]
        return self._call("mori_reducescatter", x, out, op, reduce=True)

    def all_to_all(self, x):
        """x [n * m, ...]: part r (rows r*m..) goes to rank r; part r of the result came from rank r
        (jax.lax.all_to_all with split_axis = concat_axis = 0, tiled)."""
        shape = tuple(int(d) for d in x.shape)
        if not shape or shape[0] % self._n:
            raise MoriError(MORI_EINVAL, "all_to_all: x's leading axis %s is not a multiple of the %d ranks" % (
                shape[0] if shape else "(none)", self._n))
        return self._call("mori_alltoall", x, shape)


def all_reduce(x, comm, op="sum"):
    """comm.all_reduce(x, op)."""
    return comm.all_reduce(x, op)


def all_gather(x, comm, tiled=False):
    """comm.all_gather(x, tiled)."""
    return comm.all_gather(x, tiled)


def reduce_scatter(x, comm, op="sum", tiled=False):
    """comm.reduce_scatter(x, op, tiled)."""
    return comm.reduce_scatter(x, op, tiled)


def all_to_all(x, comm):
    """comm.all_to_all(x)."""
    return comm.all_to_all(x)
