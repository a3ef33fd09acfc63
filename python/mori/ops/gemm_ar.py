"""mori.ops.gemm_ar: a GEMM whose epilogue all-reduces its output tiles through a MORI-CCO window as
they are produced (ROCm/mori's fused GEMM + all-reduce), for row-parallel layers: every rank holds
A_r [M, K] and B_r [K, N] (bf16), and every rank gets C = sum_r A_r @ B_r [M, N] (bf16).

    from mori.cco import Communicator
    from mori.ops import gemm_ar
    comm = Communicator.init(n, rank, uid, per_rank_vmm=gemm_ar.heap_bytes(M, N, n, fp8=True) + (64 << 20),
                             mem_kind="vram", gpu_device=dev)
    op = gemm_ar.GemmAllReduce(comm, M, N, K, fp8_gather=False)   # collective (windows, device communicator)
    c = op(a, b)                       # on the current stream; every rank calls in the same order
    op.check()                         # raises MoriError when a device call failed (synchronises)
    op.destroy()                       # collective

The kernel is Triton (tl.dot tiles, BM x BN x BK) calling MORI-CCO's device API through MORI-IR's
bitcode (mori.ir.triton, mori_cco_*): the device communicator's address is its first argument.
Program t computes output tile t, writes its bf16 partial into this rank's stage window (tile-major:
the tile's BM x BN elements contiguous) and then:
  bf16 (fp8_gather=False)  puts the partial into slot `rank` of every rank's receive window with a
                           signal add on that rank's signal t (cco_gda_put_signal_add_block: load/
                           store for LSA peers, morid's proxy for the others), waits for its own
                           signal t to count every rank's partial, sums them in fp32 and stores C's tile;
  fp8 all-gather leg       a reduce-scatter then an all-gather: the partial goes only to the tile's
                           owner (rank t % n); the owner sums the n partials, quantises the sum to
                           fp8 e4m3 with one fp32 scale per tile (max |x| / 448) and puts it (half the
                           bytes of bf16) to every rank with a signal on its signal tiles + t; every
                           rank waits for it and dequantises into C. Error: fp8's (about 1/16 of the
                           tile's largest value).
Receive slots alternate by call parity, and signals count up across calls (call k waits for
n * (k + 1)), so no reset or barrier is needed between calls. Every wait is bounded by the
communicator's abort word and deadline (a failed call's code lands in the error word check()
reads). The output C may be any bf16 tensor (strides given).
"""
import torch
import triton
import triton.language as tl

from ..cco import CCODevCommRequirements, GDA_CONNECTION_FULL
from ..errors import MoriError, MORI_EINVAL
from ..ir import triton as mt
from ..shmem.tensor_utils import tensor

_SCALE_PAD = 64   # bytes after each fp8 tile: its fp32 scale, padded


def _tiles(M, N, BM, BN):
    return triton.cdiv(M, BM) * triton.cdiv(N, BN)


def window_bytes(M, N, n, fp8=False, BM=128, BN=128):
    """(stage, receive) window bytes a GemmAllReduce of this shape takes on each rank."""
    t, tile = _tiles(M, N, BM, BN), BM * BN
    stage = t * tile * 2 + (t * (tile + _SCALE_PAD) if fp8 else 0)
    recv = 2 * n * t * tile * 2 + (2 * t * (tile + _SCALE_PAD) if fp8 else 0)
    return stage, recv


def heap_bytes(M, N, n, fp8=False, BM=128, BN=128):
    """Heap bytes per rank the windows need (add room for the device communicator: 1 MiB will do)."""
    s, r = window_bytes(M, N, n, fp8, BM, BN)
    return s + r + (1 << 20)


@triton.jit
def _gemm_tile(a_ptr, b_ptr, M, N, K, sam, sak, sbk, sbn, tm, tn, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr):
    rm = tm * BM + tl.arange(0, BM)
    rn = tn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    return acc


@triton.jit
def _gemm_ar_kernel(a_ptr, b_ptr, c_ptr, d, stage, recv, stage_off, stage_bytes, recv_off, recv_bytes, err_ptr,
                    M, N, K, sam, sak, sbk, sbn, scm, scn, me, n, calls,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, FP8: tl.constexpr):
    pid = tl.program_id(0)
    ntiles = tl.num_programs(0)
    tiles_n = tl.cdiv(N, BN)
    tm = pid // tiles_n
    tn = pid % tiles_n
    acc = _gemm_tile(a_ptr, b_ptr, M, N, K, sam, sak, sbk, sbn, tm, tn, BM, BN, BK)
    TILE = BM * BN
    loc = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    t64 = pid.to(tl.int64)
    parity = (calls - 1) % 2
    slot = ntiles.to(tl.int64) * TILE  # elements of one rank's partials (one parity)
    # this rank's partial, tile-major, in its stage window (bf16 part first)
    tl.store(stage + t64 * TILE + loc, acc.to(tl.bfloat16))
    err = tl.full([], 0, tl.int32)
    soff = t64 * TILE * 2
    if not FP8:
        for p in range(n):
            doff = ((parity * n + me) * slot + t64 * TILE) * 2
            rc = mt.cco_gda_put_signal_add_block(d, p, recv_off, recv_bytes, doff, stage_off, stage_bytes, soff,
                                                 TILE * 2, pid, 1)
            err += (rc != 0).to(tl.int32)
        err += (mt.cco_gda_flush(d) != 0).to(tl.int32)  # the stage tile may be rewritten next call
        w = mt.cco_gda_wait_signal(d, pid, n * calls)
        err += (w != 0).to(tl.int32)
        s = tl.zeros((BM, BN), dtype=tl.float32)
        for p in range(n):
            s += tl.load(recv + (parity * n + p) * slot + t64 * TILE + loc, volatile=True).to(tl.float32)
    else:
        owner = pid % n
        doff = ((parity * n + me) * slot + t64 * TILE) * 2
        rc = mt.cco_gda_put_signal_add_block(d, owner, recv_off, recv_bytes, doff, stage_off, stage_bytes, soff,
                                             TILE * 2, pid, 1)
        err += (rc != 0).to(tl.int32) + (mt.cco_gda_flush(d) != 0).to(tl.int32)
        # fp8 areas: after the bf16 ones in both windows, TILE + _SCALE_PAD bytes a tile
        FT = TILE + 64
        s8 = stage.to(tl.pointer_type(tl.uint8), bitcast=True) + ntiles.to(tl.int64) * TILE * 2
        r8 = recv.to(tl.pointer_type(tl.uint8), bitcast=True) + 2 * n * slot * 2 + parity * ntiles.to(tl.int64) * FT
        if me == owner:
            w1 = mt.cco_gda_wait_signal(d, pid, n * calls)
            err += (w1 != 0).to(tl.int32)
            red = tl.zeros((BM, BN), dtype=tl.float32)
            for p in range(n):
                red += tl.load(recv + (parity * n + p) * slot + t64 * TILE + loc, volatile=True).to(tl.float32)
            sc1 = tl.maximum(tl.max(tl.max(tl.abs(red), axis=1), axis=0) / 448.0, 1e-30)
            q1 = (red / sc1).to(tl.float8e4nv)
            tl.store(s8 + t64 * FT + loc, q1.to(tl.uint8, bitcast=True))
            tl.store((s8 + t64 * FT + TILE).to(tl.pointer_type(tl.float32), bitcast=True), sc1)
            s8off = ntiles.to(tl.int64) * TILE * 2 + t64 * FT
            r8off = 2 * n * slot * 2 + parity * ntiles.to(tl.int64) * FT + t64 * FT
            for p in range(n):
                rc1 = mt.cco_gda_put_signal_add_block(d, p, recv_off, recv_bytes, r8off, stage_off, stage_bytes, s8off,
                                                      FT, ntiles + pid, 1)
                err += (rc1 != 0).to(tl.int32)
            err += (mt.cco_gda_flush(d) != 0).to(tl.int32)
        w = mt.cco_gda_wait_signal(d, ntiles + pid, calls)
        err += (w != 0).to(tl.int32)
        q = tl.load(r8 + t64 * FT + loc, volatile=True).to(tl.float8e4nv, bitcast=True)
        scale = tl.load((r8 + t64 * FT + TILE).to(tl.pointer_type(tl.float32), bitcast=True), volatile=True)
        s = q.to(tl.float32) * scale
    rm = tm * BM + tl.arange(0, BM)
    rn = tn * BN + tl.arange(0, BN)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, s.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))
    if err != 0:
        tl.atomic_add(err_ptr, err)


class GemmAllReduce:
    """C = sum over ranks of A_r @ B_r, the all-reduce fused into the GEMM's epilogue (module doc).
    comm: a mori.cco.Communicator with a VRAM heap of at least heap_bytes(M, N, n, fp8_gather) a
    rank. Collective: construction and destroy(). Shapes are fixed at construction (K too)."""

    def __init__(self, comm, M, N, K, fp8_gather=False, BM=128, BN=128, BK=64, num_warps=8, num_stages=3):
        self.comm, self.M, self.N, self.K = comm, M, N, K
        self.n, self.rank = comm.world_size, comm.rank
        self.fp8 = bool(fp8_gather)
        self.BM, self.BN, self.BK, self.num_warps, self.num_stages = BM, BN, BK, num_warps, num_stages
        self.tiles = _tiles(M, N, BM, BN)
        sb, rb = window_bytes(M, N, self.n, self.fp8, BM, BN)
        self._sm, self._rm = comm.alloc_mem(sb), comm.alloc_mem(rb)
        self._sw = comm.register_window(self._sm.ptr, sb)
        self._rw = comm.register_window(self._rm.ptr, rb)
        self.dc = comm.create_dev_comm(CCODevCommRequirements(gda_connection_type=GDA_CONNECTION_FULL,
                                                              gda_signal_count=2 * self.tiles))
        self._d = self.dc.device_copy()
        self._stage = tensor(self._sw.local_ptr, (sb // 2,), torch.bfloat16)
        self._recv = tensor(self._rw.local_ptr, (rb // 2,), torch.bfloat16)
        self._err = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.calls = 0
        comm.barrier()

    def __call__(self, a, b, out=None):
        M, N, K = self.M, self.N, self.K
        if a.shape != (M, K) or b.shape != (K, N) or a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16:
            raise MoriError(MORI_EINVAL, "gemm_ar: a must be [%d, %d] and b [%d, %d], bf16 (got %s %s, %s %s)" % (
                M, K, K, N, tuple(a.shape), a.dtype, tuple(b.shape), b.dtype))
        if out is None:
            out = torch.empty((M, N), dtype=torch.bfloat16, device=a.device)
        self.calls += 1
        sw, rw = self._sw.handle, self._rw.handle
        _gemm_ar_kernel[(self.tiles,)](
            a, b, out, self._d.data_ptr(), self._stage, self._recv, sw.off, sw.bytes, rw.off, rw.bytes, self._err,
            M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
            self.rank, self.n, self.calls, BM=self.BM, BN=self.BN, BK=self.BK, FP8=self.fp8,
            num_warps=self.num_warps, num_stages=self.num_stages, extern_libs=mt.extern_libs())
        return out

    def check(self):
        """Raise MoriError when a device call of an earlier launch failed (synchronises)."""
        e = int(self._err.item())
        if e:
            rc, pe, msg = self.comm.status()
            raise MoriError(rc or -1, "gemm_ar: %d device calls failed (communicator: %s)" % (e, msg))

    def destroy(self):
        """Collective: free the device communicator and the windows."""
        self.comm.barrier()
        self.dc.destroy()
        self.comm.deregister_window(self._sw)
        self.comm.deregister_window(self._rw)
        self.comm.free_mem(self._sm)
        self.comm.free_mem(self._rm)
