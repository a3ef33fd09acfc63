"""MORI-EP's dispatch and combine over torch tensors (EpDispatchCombineConfig,
EpDispatchCombineOp) and libmori's launch tuning. Import them from mori.ops."""
import collections
import ctypes
import enum
from dataclasses import dataclass

from .. import _capi, _lib
from ..shmem.api import _stream as _shmem_stream
from .._capi import EpConfig as _Config, EpRecv as _Recv, Status as _Status
from ..errors import MoriError, MORI_EINVAL, MORI_ESTALE


class EpDispatchCombineKernelType(enum.IntEnum):
    """ROCm/mori's kernel types; IntraNode is the normal mode, LowLatency DeepEP's layout; InterNode and
    InterNodeLL the same layouts across nodes (picked by libmori when the group spans nodes)."""
    IntraNode = 0
    LowLatency = 1
    InterNode = 2
    InterNodeLL = 3

    def __str__(self):
        return self.name


_DT_BF16, _DT_FP32, _DT_FP8 = _capi.BFLOAT16, _capi.FLOAT32, _capi.FLOAT8_E4M3  # mori_dtype


_DT_NAMES = {"bfloat16": _DT_BF16, "bf16": _DT_BF16, "float32": _DT_FP32, "fp32": _DT_FP32,
             "float8_e4m3fn": _DT_FP8, "float8_e4m3fnuz": _DT_FP8, "fp8": _DT_FP8}


def _dtype_code(dt):
    """A torch dtype, a numpy or JAX dtype (jnp.bfloat16), or its name (only a torch dtype imports
    torch: config checks on machines without it, and mori.jax)."""
    if not isinstance(dt, str) and type(dt).__module__.split(".")[0] != "torch":
        import numpy
        try:
            dt = numpy.dtype(dt).name
        except TypeError:
            raise MoriError(MORI_EINVAL, "data type %r is none of %s" % (dt, ", ".join(sorted(_DT_NAMES)))) from None
    if isinstance(dt, str):
        if dt not in _DT_NAMES:
            raise MoriError(MORI_EINVAL, "data type %r is none of %s" % (dt, ", ".join(sorted(_DT_NAMES))))
        return _DT_NAMES[dt]
    import torch
    table = {torch.bfloat16: _DT_BF16, torch.float32: _DT_FP32}
    for name in ("float8_e4m3fn", "float8_e4m3fnuz"):
        if hasattr(torch, name):
            table[getattr(torch, name)] = _DT_FP8
    if dt not in table:
        raise MoriError(MORI_EINVAL, "data type %s is none of bfloat16, float32, float8_e4m3fn" % (dt,))
    return table[dt]


_PROTOS = _capi.ctypes_protos(_capi.MORI_EP_H)


def _L():
    return _lib.bind("MORI-EP", _PROTOS)


@dataclass
class EpDispatchCombineConfig:
    """ROCm/mori's EpDispatchCombineConfig (the same fields; block_num / warp_num_per_block 0 pick
    libmori's defaults; timeout_us bounds every device-side wait, 0: 10 s). num_in_flight (mori's,
    generalising DeepEP's two low-latency buffers): dispatches that may wait for their combine, each
    with its own receive buffers; combines take them in dispatch order; 0: 1."""
    data_type: object
    rank: int
    world_size: int
    hidden_dim: int
    scale_dim: int
    scale_type_size: int
    max_token_type_size: int
    max_num_inp_token_per_rank: int
    num_experts_per_rank: int
    num_experts_per_token: int
    warp_num_per_block: int = 0
    block_num: int = 0
    kernel_type: EpDispatchCombineKernelType = EpDispatchCombineKernelType.IntraNode
    timeout_us: int = 0
    num_in_flight: int = 0
    quant_type: int = 0  # 1: dispatch quantises bf16 input to fp8 e4m3 + a float scale per 128 (DeepEP's use_fp8)

    def _c(self):
        c = _Config()
        _lib.check(_L().mori_ep_config_init(ctypes.byref(c), ctypes.sizeof(c)), "EP config")
        for f in ("rank", "world_size", "hidden_dim", "scale_dim", "scale_type_size", "max_token_type_size",
                  "max_num_inp_token_per_rank", "num_experts_per_rank", "num_experts_per_token",
                  "warp_num_per_block", "block_num", "num_in_flight", "quant_type"):
            setattr(c, f, _lib.ival(getattr(self, f), f, ctypes.c_int))
        c.data_type = _dtype_code(self.data_type)
        c.kernel_type = _lib.ival(self.kernel_type, "kernel_type", ctypes.c_int)
        if self.timeout_us:
            c.timeout_us = _lib.ival(self.timeout_us, "timeout_us", ctypes.c_int64)
        return c

    def check(self):
        """Raise MoriError(MORI_EINVAL) naming the bad field, as mori_ep_config_check."""
        msg = ctypes.create_string_buffer(300)
        if _L().mori_ep_config_check(ctypes.byref(self._c()), msg, len(msg)):
            raise MoriError(MORI_EINVAL, msg.value.decode())

    def heap_bytes(self):
        """Heap bytes one op of this config takes on every PE (size the group's heap with it). A group
        over several nodes takes the internode kind's (kernel_type InterNode / InterNodeLL), more."""
        return int(_L().mori_ep_heap_bytes(ctypes.byref(self._c())))


def tuning_lookup(config, arch, sm_count):
    """(warp_num_per_block, block_num, which) for config on a GPU of architecture arch ("sm_90",
    "gfx942") with sm_count SMs: config's non-zero values kept, the rest from libmori's tuning
    table (mori_ep_tuning_lookup: data/ep_tuning/*.json, ROCm/mori's tuning_configs format,
    compiled in) or its built-in default; `which` names the rule or the default."""
    c = config._c()
    which = ctypes.create_string_buffer(256)
    _lib.check(_L().mori_ep_tuning_lookup(ctypes.byref(c), _lib.as_bytes(arch, "arch"),
                                          _lib.ival(sm_count, "sm_count", ctypes.c_int), which, len(which)),
               "EP tuning lookup")
    return c.warp_num_per_block, c.block_num, which.value.decode()


def _raise_status(status, obj, what, clear):
    """Call status(obj, &st), then clear(obj) when given; MoriError with st's message for an error."""
    st = _Status()
    rc = status(obj, ctypes.byref(st))
    msg = _lib.status_message(st)
    if clear is not None:
        _lib.check(clear(obj), what + " clear")
    if rc < 0:
        raise MoriError(rc, msg if msg.startswith(what) else "%s: %s" % (what, msg or _lib.last_error()))


def _ptr(t, what, dtype=None):
    if t is None:
        return None
    if not t.is_cuda:
        raise MoriError(MORI_EINVAL, "%s must be a CUDA tensor" % what)
    if not t.is_contiguous():
        raise MoriError(MORI_EINVAL, "%s must be contiguous" % what)
    if dtype is not None and t.dtype != dtype:
        raise MoriError(MORI_EINVAL, "%s has dtype %s, not %s" % (what, t.dtype, dtype))
    return t.data_ptr()


class EpDispatchCombineOp:
    """ROCm/mori's EpDispatchCombineOp over a MORI-SHMEM group with a VRAM heap (mori.shmem.Group).
    Creating it is collective (every rank, same config but rank); destroy() too."""

    def __init__(self, config, group):
        import torch
        self.config, self.group = config, group
        self._torch = torch
        h = ctypes.c_void_p()
        _lib.check(_L().mori_ep_create(group._h(), ctypes.byref(config._c()), ctypes.byref(h)), "EP create")
        self._hd = h
        r = _Recv()
        _lib.check(_L().mori_ep_recv_buffers(h, ctypes.byref(r)), "EP buffers")
        self._recv = r
        self._dtype = config.data_type
        self._pending = collections.deque()  # num_tokens of each dispatch waiting for its combine
        self._last = None  # the last dispatch's mori_ep_recv (get_dispatch_src_token_pos)

    def _handle(self):
        if self._hd is None:
            raise MoriError(MORI_EINVAL, "the op is destroyed")
        if self.group._g is None:  # libmori refuses too (MORI_ESTALE); say it here with the name
            raise MoriError(MORI_ESTALE, "EP op: its group %r has left; only destroy() works on it" % (self.group.name,))
        return self._hd

    def _low_latency(self):
        """DeepEP's expert-major layout (LowLatency, InterNodeLL): buffers [experts per rank, max_recv, ...]."""
        return self.config.kernel_type in (EpDispatchCombineKernelType.LowLatency,
                                           EpDispatchCombineKernelType.InterNodeLL)

    def _stream(self, stream):
        return self._torch.cuda.current_stream().cuda_stream if stream is None else _shmem_stream(stream)

    def _views(self, r):
        torch, c = self._torch, self.config
        ll = self._low_latency()
        slots = (c.num_experts_per_rank if ll else 1) * r.max_recv
        g, H, K = self.group, c.hidden_dim, c.num_experts_per_token
        rows = g.tensor(r.tokens, (slots, H * c.max_token_type_size), torch.uint8)
        rdt = torch.float8_e4m3fn if c.quant_type else self._dtype  # quantised: fp8 rows arrive
        es = torch.empty((), dtype=rdt).element_size()
        tok = rows[:, :H * es].view(rdt)
        shape = (c.num_experts_per_rank, r.max_recv) if ll else (slots,)
        tok = tok.reshape(*shape, H)
        w = g.tensor(r.weights, shape + (K,), torch.float32)
        idx = g.tensor(r.indices, shape + (K,), torch.int32)
        sc = None
        if c.scale_dim:
            stride = (c.scale_dim * c.scale_type_size + 15) // 16 * 16
            raw = g.tensor(r.scales, (slots, stride), torch.uint8)[:, :c.scale_dim * c.scale_type_size]
            sc = raw.view(torch.float32 if c.scale_type_size == 4 else torch.float64).reshape(*shape, c.scale_dim)
        count = g.tensor(r.count, (c.num_experts_per_rank if ll else 1,), torch.int32)
        return tok, w, sc, idx, count

    def get_registered_combine_input_buffer(self, dtype):
        """ROCm/mori's registered combine input: a view of this rank's heap in the receive layout
        (normal [max_recv, H], low-latency [num_experts_per_rank, max_recv, H]) of dtype (bfloat16 or
        float32; rows H x max_token_type_size bytes apart). Experts that write their outputs here and
        pass it to combine save a copy: the home ranks read the rows in place."""
        torch, c, r = self._torch, self.config, self._recv
        ll = self._low_latency()
        slots = (c.num_experts_per_rank if ll else 1) * r.max_recv
        es = torch.empty((), dtype=dtype).element_size()
        if es > c.max_token_type_size:
            raise MoriError(MORI_EINVAL, "%s is wider than max_token_type_size %d" % (dtype, c.max_token_type_size))
        addr = _L().mori_ep_get_registered_combine_input_buffer(self._handle())
        rows = self.group.tensor(addr, (slots, c.hidden_dim * c.max_token_type_size), torch.uint8)
        v = rows[:, :c.hidden_dim * es].view(dtype)
        return v.reshape(c.num_experts_per_rank, r.max_recv, c.hidden_dim) if ll else v

    def dispatch(self, input, weights, scales, indices, stream=None):
        """input [T, H] (config.data_type), weights [T, K] float32 (or None), scales [T, scale_dim] (or
        None), indices [T, K] int32 (-1: no expert) -> (tokens, weights, scales, indices, count) views of
        the receive buffers (see the module's docstring). Enqueued on stream (default: torch's current)."""
        torch = self._torch
        if input.dtype != self._dtype:
            raise MoriError(MORI_EINVAL, "input has dtype %s, the config %s" % (input.dtype, self._dtype))
        T = int(input.shape[0])
        r = _Recv()
        if indices.dtype != torch.int32:
            indices = indices.to(torch.int32)
        _lib.check(_L().mori_ep_dispatch(self._handle(), _ptr(input, "input"), _ptr(weights, "weights", torch.float32),
                                         _ptr(scales, "scales"), _ptr(indices, "indices"), T,
                                         self._stream(stream), ctypes.byref(r)), "EP dispatch")
        self._pending.append(T)
        self._last = r
        return self._views(r)

    def get_dispatch_src_token_pos(self):
        """ROCm/mori's get_dispatch_src_token_pos: where each slot of the last dispatch came from, an
        int32 view of its receive buffers (no copy, no host synchronisation): normal mode [max_recv],
        source rank x max_num_inp_token_per_rank + token index; low-latency mode [num_experts_per_rank,
        max_recv], (source rank x max + token) x num_experts_per_token + the top-k slot. Slots below
        dispatch's count hold values (ROCm/mori returns only those; read count for it). Valid until a
        dispatch fills these buffers again. MoriError(MORI_EINVAL) before the first dispatch."""
        self._handle()  # a destroyed op (or one whose group left) refuses, as every other call
        r, c = self._last, self.config
        if r is None:
            raise MoriError(MORI_EINVAL, "get_dispatch_src_token_pos: no dispatch yet")
        shape = (c.num_experts_per_rank, r.max_recv) if self._low_latency() else (r.max_recv,)
        return self.group.tensor(r.src_pos, shape, self._torch.int32)

    def combine(self, input, weights, indices, stream=None):
        """input: the expert outputs in the receive layout (bfloat16 or float32) -> [T, H] of its dtype:
        normal mode the sum over the token's destination ranks (unweighted), low-latency the sum weighted
        by weights [T, K] (None: dispatch's). indices: the caller's own [T, K] routing (None: dispatch's)."""
        torch = self._torch
        dt = {torch.bfloat16: _DT_BF16, torch.float32: _DT_FP32}.get(input.dtype)
        if dt is None:
            raise MoriError(MORI_EINVAL, "combine input dtype %s is neither bfloat16 nor float32" % (input.dtype,))
        if indices is not None and indices.dtype != torch.int32:
            indices = indices.to(torch.int32)
        ntok = self._pending[0] if self._pending else 0  # libmori refuses a combine with none waiting
        out = torch.empty((ntok, self.config.hidden_dim), dtype=input.dtype, device=input.device)
        reg = _L().mori_ep_get_registered_combine_input_buffer(self._handle())
        if not input.is_cuda or (input.data_ptr() != reg and not input.is_contiguous()):
            # the registered view may be strided (rows H x max_token_type_size apart): libmori knows
            raise MoriError(MORI_EINVAL, "combine input must be a contiguous CUDA tensor or the registered combine input")
        _lib.check(_L().mori_ep_combine(self._handle(), dt, input.data_ptr(), _ptr(weights, "weights", torch.float32),
                                        _ptr(indices, "indices"), out.data_ptr() if ntok else None,
                                        self._stream(stream)), "EP combine")
        self._pending.popleft()
        return out

    def get_dispatch_layout(self, indices, stream=None):
        """DeepEP's Buffer.get_dispatch_layout: (tokens per rank [W], tokens per expert [E], token in rank
        [T, W] bool), computed on the GPU."""
        torch, c = self._torch, self.config
        T, W, E = int(indices.shape[0]), c.world_size, c.world_size * c.num_experts_per_rank
        dev = indices.device
        pr = torch.empty(W, dtype=torch.int32, device=dev)
        pe = torch.empty(E, dtype=torch.int32, device=dev)
        ir = torch.empty((T, W), dtype=torch.bool, device=dev)
        if indices.dtype != torch.int32:
            indices = indices.to(torch.int32)
        _lib.check(_L().mori_ep_get_dispatch_layout(self._handle(), _ptr(indices, "indices"), T, pr.data_ptr(),
                                                    pe.data_ptr(), ir.data_ptr(), self._stream(stream)), "EP layout")
        return pr, pe, ir

    def status(self, clear=False):
        """Raise MoriError for the first error the GPU recorded (bad expert index, other routing in
        combine, a peer dead, a wait past its deadline). Synchronise the stream first. clear: reset
        the record afterwards (mori_ep_status_clear), so a later error shows."""
        h = self._handle()
        _raise_status(_L().mori_ep_status, h, "EP status", _L().mori_ep_status_clear if clear else None)

    @staticmethod
    def retired_status(clear=False):
        """Raise MoriError(MORI_ESTALE) when kernels of a destroyed op ran (a graph replayed after
        destroy(): they returned without touching memory); process-wide (mori_ep_retired_status).
        clear: reset the record afterwards."""
        _raise_status(_L().mori_ep_retired_status, None, "EP retired",
                      _L().mori_ep_retired_status_clear if clear else None)

    def destroy(self):
        """Collective: free the op's heap buffers."""
        h, self._hd = self._hd, None
        self._last = None
        if h is not None and self.group._g is None:  # left: after libmori's finalize (views may defer it)
            self.group._after_leave(lambda: _L().mori_ep_destroy(h))
        elif h is not None:
            _lib.check(_L().mori_ep_destroy(h), "EP destroy")
