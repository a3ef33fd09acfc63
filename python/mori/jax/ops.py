"""MORI-EP's dispatch and combine for JAX (mori.jax.EpDispatchCombineOp): mori.ops's op with
jax arrays, callable inside jax.jit. Import it from mori.jax."""
import ctypes

import numpy as np

from .. import _lib
from ..errors import MoriError, MORI_EINVAL, MORI_ESTALE
from ..ops.dispatch_combine import (EpDispatchCombineConfig, EpDispatchCombineKernelType, _L, _Recv,  # noqa: F401
                                    _dtype_code, _raise_status)
from .._capi import BFLOAT16, FLOAT32, FLOAT8_E4M3
from . import _ffi

_NAMES = {BFLOAT16: "bfloat16", FLOAT32: "float32", FLOAT8_E4M3: "float8_e4m3fn"}
_SIZES = {BFLOAT16: 2, FLOAT32: 4, FLOAT8_E4M3: 1}


def _dtname(x):
    return np.dtype(x.dtype).name


def _shape(x, want, what):
    """MORI_EINVAL unless x's shape is want (None entries: any)."""
    got = tuple(int(d) for d in x.shape)
    if len(got) != len(want) or any(w is not None and g != w for g, w in zip(got, want)):
        raise MoriError(MORI_EINVAL, "%s has shape %s, expected (%s)" % (
            what, got, ", ".join("T" if w is None else str(w) for w in want)))


class EpDispatchCombineOp:
    """ROCm/mori's EpDispatchCombineOp for JAX, over a mori.shmem Group with a VRAM heap (mori.jax.init).
    The config is mori.ops's EpDispatchCombineConfig (data_type a jnp dtype, e.g. jnp.bfloat16, or
    its name); the semantics are mori.ops's (docs/ep.md). Creating it is collective (every rank, same
    config but rank), destroy() too. dispatch and combine are jax.ffi calls, usable inside jax.jit;
    every rank makes the same sequence of them, combines in dispatch order, at most
    config.num_in_flight dispatches waiting for their combine."""

    def __init__(self, config, group):
        _ffi.register()
        lib, xla = _L(), _ffi.load()
        c = config._c()
        h = ctypes.c_void_p()
        _lib.check(lib.mori_ep_create(group._h(), ctypes.byref(c), ctypes.byref(h)), "EP create")
        r = _Recv()
        xid = ctypes.c_int64()
        rc = lib.mori_ep_recv_buffers(h, ctypes.byref(r))
        if rc == 0:
            rc = xla.mori_xla_ep_register(h, group._c, ctypes.byref(c), ctypes.byref(xid))
        if rc < 0:
            lib.mori_ep_destroy(h)  # collective, as the create was: every rank fails here alike
            _ffi.check(rc, "EP op for XLA")
        self.group, self._hd = group, h
        self._setup(config, int(r.max_recv), xid.value)

    def _setup(self, config, max_recv, xla_id):
        """The shapes every call derives from the config (no GPU: the argument tests use it alone)."""
        c = self.config = config
        self._id, self.max_recv = xla_id, max_recv
        self._ll = config.kernel_type in (EpDispatchCombineKernelType.LowLatency, EpDispatchCombineKernelType.InterNodeLL)
        self._bins = c.num_experts_per_rank if self._ll else 1
        self._slots = self._bins * max_recv
        self._in = _dtype_code(c.data_type)
        self._recv = FLOAT8_E4M3 if c.quant_type else self._in
        es = _SIZES[self._recv]
        if c.max_token_type_size < es or (c.hidden_dim * c.max_token_type_size) % es:
            raise MoriError(MORI_EINVAL, "max_token_type_size %d does not hold %s rows of hidden_dim %d" % (
                c.max_token_type_size, _NAMES[self._recv], c.hidden_dim))
        self._tok_cols = c.hidden_dim * c.max_token_type_size // es  # the heap's row stride, in elements
        self._scale_cols = 0
        if c.scale_dim:
            stride = (c.scale_dim * c.scale_type_size + 15) // 16 * 16
            self._scale_cols = stride // c.scale_type_size

    def _xid(self):
        if self._id is None:
            raise MoriError(MORI_EINVAL, "the op is destroyed")
        g = getattr(self, "group", None)
        if g is not None and g._g is None:
            raise MoriError(MORI_ESTALE, "EP op: its group %r has left; only destroy() works on it" % (g.name,))
        return self._id

    def _layout(self, shape):
        """(slots, ...) -> the receive layout: normal (max_recv, ...), low-latency (experts per rank, max_recv, ...)."""
        return (self.config.num_experts_per_rank, self.max_recv) + shape if self._ll else (self.max_recv,) + shape

    def dispatch(self, input, weights, scales, indices, return_src_pos=False):
        """input [T, H] (config.data_type), weights [T, K] float32 or None, scales [T, scale_dim] or None
        (required when scale_dim > 0, unless quant_type computes them), indices [T, K] int32 (-1: no
        expert) -> (tokens, weights, scales, indices, count) as mori.ops returns them, jax arrays in the
        receive layout: normal mode tokens [max_recv, H] with rows 0..count[0]-1 filled, count [1];
        low-latency [num_experts_per_rank, max_recv, H] and count [num_experts_per_rank]; scales None
        when scale_dim is 0. return_src_pos: a sixth array, the source positions (mori.ops's
        get_dispatch_src_token_pos). The arrays are copies of this rank's receive buffers (the heap's
        rows, which peers wrote), made on XLA's stream."""
        import jax
        c = self.config
        H, K = c.hidden_dim, c.num_experts_per_token
        _shape(input, (None, H), "dispatch input")
        if _dtype_code(_dtname(input)) != self._in:
            raise MoriError(MORI_EINVAL, "dispatch input is %s, the config's data_type %s" % (
                _dtname(input), _NAMES[self._in]))
        T = int(input.shape[0])
        _shape(indices, (T, K), "dispatch indices")
        if _dtname(indices) != "int32":
            indices = indices.astype(np.int32)
        args = [input, indices]
        if weights is not None:
            _shape(weights, (T, K), "dispatch weights")
            if _dtname(weights) != "float32":
                raise MoriError(MORI_EINVAL, "dispatch weights are %s, not float32" % _dtname(weights))
            args.append(weights)
        sdt = np.float32
        if scales is not None:
            if not c.scale_dim or c.quant_type:
                raise MoriError(MORI_EINVAL, "dispatch scales given but %s" % (
                    "quant_type computes them" if c.quant_type else "scale_dim is 0"))
            _shape(scales, (T, c.scale_dim), "dispatch scales")
            if np.dtype(scales.dtype).itemsize != c.scale_type_size:
                raise MoriError(MORI_EINVAL, "dispatch scales are %s, scale_type_size is %d" % (
                    _dtname(scales), c.scale_type_size))
            sdt = scales.dtype
            args.append(scales)
        elif c.scale_dim and not c.quant_type:
            raise MoriError(MORI_EINVAL, "dispatch: scale_dim is %d but scales is None" % c.scale_dim)
        S = self._slots
        res = [jax.ShapeDtypeStruct((S, self._tok_cols), _ffi_dtype(self._recv)),
               jax.ShapeDtypeStruct((S, K), np.float32), jax.ShapeDtypeStruct((S, K), np.int32),
               jax.ShapeDtypeStruct((S,), np.int32), jax.ShapeDtypeStruct((self._bins,), np.int32)]
        if c.scale_dim:
            res.append(jax.ShapeDtypeStruct((S, self._scale_cols), sdt))
        out = _ffi.call("mori_ep_dispatch", res, args, op=self._xid(), has_weights=weights is not None,
                        has_scales=scales is not None)
        tok = out[0][:, :H].reshape(self._layout((H,)))
        w, idx = out[1].reshape(self._layout((K,))), out[2].reshape(self._layout((K,)))
        sc = out[5][:, :c.scale_dim].reshape(self._layout((c.scale_dim,))) if c.scale_dim else None
        got = (tok, w, sc, idx, out[4])
        return got + (out[3].reshape(self._layout(())),) if return_src_pos else got

    def combine(self, input, weights, indices, num_tokens=None):
        """input: the expert outputs in the receive layout (bfloat16 or float32; normal [max_recv, H],
        low-latency [num_experts_per_rank, max_recv, H]) -> [T, H] of its dtype: normal mode the sum
        over the token's destination ranks (unweighted), low-latency the sum weighted by weights [T, K]
        (None: dispatch's). indices: the caller's own [T, K] routing as given to dispatch (None:
        dispatch's). T is the token count of the dispatch this combine takes: indices' or weights'
        rows, else num_tokens (required when both are None)."""
        import jax
        c = self.config
        H, K = c.hidden_dim, c.num_experts_per_token
        dt = _dtname(input)
        if dt not in ("bfloat16", "float32") or np.dtype(input.dtype).itemsize > c.max_token_type_size:
            raise MoriError(MORI_EINVAL, "combine input is %s: bfloat16 or float32 no wider than max_token_type_size %d"
                            % (dt, c.max_token_type_size))
        _shape(input, self._layout((H,)), "combine input")
        T = indices.shape[0] if indices is not None else weights.shape[0] if weights is not None else num_tokens
        if T is None:
            raise MoriError(MORI_EINVAL, "combine: give indices, weights or num_tokens (the dispatch's token count)")
        T = int(T)
        if num_tokens is not None and int(num_tokens) != T:
            raise MoriError(MORI_EINVAL, "combine: num_tokens %d, but indices/weights have %d rows" % (num_tokens, T))
        args = [input]
        if weights is not None:
            _shape(weights, (T, K), "combine weights")
            if _dtname(weights) != "float32":
                raise MoriError(MORI_EINVAL, "combine weights are %s, not float32" % _dtname(weights))
            args.append(weights)
        if indices is not None:
            _shape(indices, (T, K), "combine indices")
            args.append(indices if _dtname(indices) == "int32" else indices.astype(np.int32))
        (out,) = _ffi.call("mori_ep_combine", [jax.ShapeDtypeStruct((T, H), input.dtype)], args, op=self._xid(),
                           has_weights=weights is not None, has_indices=indices is not None)
        return out

    def status(self, clear=False):
        """Raise MoriError for the first error the GPU recorded (mori.ops's status). Block on the
        step's outputs first (jax.block_until_ready)."""
        self._xid()
        _raise_status(_L().mori_ep_status, self._hd, "EP status", _L().mori_ep_status_clear if clear else None)

    def destroy(self):
        """Collective: forget the op (compiled steps that call it then fail with a clear error) and
        free its heap buffers. Block on the last step's outputs first."""
        xid, self._id = self._id, None
        h, self._hd = getattr(self, "_hd", None), None
        if xid is not None:
            _ffi.load().mori_xla_unregister(xid)
        if h is None:
            return
        if self.group._g is None:
            self.group._after_leave(lambda: _L().mori_ep_destroy(h))
        else:
            _lib.check(_L().mori_ep_destroy(h), "EP destroy")


def _ffi_dtype(code):
    """The jnp dtype of a mori_dtype (fp8: float8_e4m3fn)."""
    import jax.numpy as jnp
    return {BFLOAT16: jnp.bfloat16, FLOAT32: jnp.float32, FLOAT8_E4M3: jnp.float8_e4m3fn}[code]
