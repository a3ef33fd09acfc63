"""mori.ops.gemm_ar on a GPU: one process is one rank (morid of $MORI_RUNTIME_DIR); tests/device-cco.sh
(part gemm_ar) starts N of them under MPS for N in 2 4 8.

    python3 tests/gemm_ar_check.py RANK N

Every rank holds A_r [M, K] and B_r [K, N] (bf16, from seeds of its rank) and computes
C = sum_r A_r @ B_r three ways in the same run: the fused GEMM + all-reduce (GemmAllReduce, bf16),
the same with the fp8 all-gather leg, and torch's GEMM followed by MORI-CCL's all-reduce
(mori.ccl over a mori.shmem group). Each is checked against a reference every rank computes in
fp32 from every rank's seeds: max |C - ref| / max |ref| within 2^-5 for bf16 (up to 8 partials
rounded to bf16, 2^-9 each, then the result; a missing or misplaced partial is off by far more) and
2^-3 for fp8 (e4m3 with a per-tile scale: 2^-4 of the tile's largest value). Then each is timed (CUDA events,
median of $GAR_ITERS launches after two warm-ups, every rank starting together), torch's GEMM
alone beside them. Shape: $GAR_M x $GAR_N, K $GAR_K (4096 x 7168, K 2048). Prints "PE r: ..."
lines; exits 1 when a check failed.
"""
import os
import statistics
import sys
import time

import torch

from mori import ccl, shmem
from mori.cco import Communicator
from mori.ops import gemm_ar


def say(rank, msg):
    print("PE %d: %s" % (rank, msg), flush=True)


def uid_exchange(rank):
    path = os.environ.get("CCO_UID_FILE", "/tmp/mori-gemm-ar.uid")
    if rank == 0:
        uid = Communicator.get_unique_id()
        with open(path + ".tmp", "wb") as f:
            f.write(uid)
        os.rename(path + ".tmp", path)
        return uid
    t0 = time.time()
    while not os.path.exists(path):
        if time.time() - t0 > 60:
            raise RuntimeError("no unique id in %s after 60 s" % path)
        time.sleep(0.01)
    return open(path, "rb").read()


def operands(p, M, N, K):
    g = torch.Generator(device="cuda")
    g.manual_seed(7919 * (p + 1))
    a = (torch.randn(M, K, device="cuda", generator=g) / K ** 0.5).to(torch.bfloat16)
    b = torch.randn(K, N, device="cuda", generator=g).to(torch.bfloat16)
    return a, b


def timed(fn, iters, barrier):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    barrier()
    ts = []
    for _ in range(iters):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3)
    barrier()
    return statistics.median(ts)


def main():
    rank, n = int(sys.argv[1]), int(sys.argv[2])
    M, N, K = (int(os.environ.get(v, d)) for v, d in (("GAR_M", 4096), ("GAR_N", 7168), ("GAR_K", 2048)))
    iters = int(os.environ.get("GAR_ITERS", 20))
    torch.cuda.set_device(0)
    uid = uid_exchange(rank)
    heap = gemm_ar.heap_bytes(M, N, n) + gemm_ar.heap_bytes(M, N, n, fp8=True) + (64 << 20)
    comm = Communicator.init(n, rank, uid, per_rank_vmm=heap, mem_kind="vram", gpu_device=0, timeout_us=120_000_000)
    g = shmem.join("gemm-ar-ccl", rank, n, heap_size=M * N * 2 + (256 << 20), heap_kind="vram", timeout_us=120_000_000)
    cc = ccl.Communicator(g)
    a, b = operands(rank, M, N, K)
    ref = torch.zeros(M, N, device="cuda", dtype=torch.float32)
    for p in range(n):
        ap, bp = operands(p, M, N, K)
        ref += ap.float() @ bp.float()
    top = float(ref.abs().max())

    def rel(c):
        return float((c.float() - ref).abs().max()) / top

    ok = True
    op16 = gemm_ar.GemmAllReduce(comm, M, N, K)
    op8 = gemm_ar.GemmAllReduce(comm, M, N, K, fp8_gather=True)
    x_addr = g.calloc(M * N * 2)
    x = g.tensor(x_addr, (M, N), torch.bfloat16)
    cc.register_window(x_addr, M * N * 2)  # the baseline's best path: in place at the peers
    out16 = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    out8 = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")

    def fused16():
        op16(a, b, out16)

    def fused8():
        op8(a, b, out8)

    def baseline():
        torch.matmul(a, b, out=x)
        cc.all_reduce(x, x, op="sum", stream=torch.cuda.current_stream())

    def gemm_only():
        torch.matmul(a, b, out=x)

    comm.barrier()
    res = {}
    for name, fn, out, tol in (("fused bf16", fused16, out16, 2 ** -5), ("fused fp8 all-gather", fused8, out8, 2 ** -3),
                               ("torch GEMM + MORI-CCL all-reduce", baseline, x, 2 ** -5)):
        fn()
        torch.cuda.synchronize()
        comm.barrier()
        g.barrier_all()
        try:
            if out is not x:
                (op16 if out is out16 else op8).check()
            cc.check()
            e = rel(out)
        except Exception as ex:  # a failed device call: report it, keep going
            e = float("inf")
            say(rank, "%s: %s" % (name, ex))
        good = e <= tol
        ok = ok and good
        res[name] = (e, good)
    comm.barrier()
    t16 = timed(fused16, iters, comm.barrier)
    t8 = timed(fused8, iters, comm.barrier)
    tb = timed(baseline, iters, comm.barrier)
    tg = timed(gemm_only, iters, comm.barrier)
    for chk in (op16, op8):
        try:
            chk.check()
        except Exception as ex:
            ok = False
            say(rank, "after timing: %s" % ex)
    fl = 2.0 * M * N * K
    say(rank, "gemm_ar %s: %d ranks, [%d, %d] K %d bf16; max |C - ref| / max |ref|: %s" % (
        "ok" if ok else "FAIL", n, M, N, K,
        ", ".join("%s %.2e%s" % (k, v[0], "" if v[1] else " (over tolerance)") for k, v in res.items())))
    say(rank, "gemm_ar times (median of %d): fused bf16 %.1f us, fused fp8 all-gather %.1f us, torch GEMM + MORI-CCL "
        "all-reduce %.1f us (torch GEMM alone %.1f us = %.0f TFLOP/s; fused bf16 = %.0f TFLOP/s of GEMM work)" % (
            iters, t16, t8, tb, tg, fl / tg / 1e6, fl / t16 / 1e6))
    comm.barrier()
    op8.destroy()
    op16.destroy()
    g.free(x_addr)
    cc.destroy()
    comm.destroy()
    g.leave()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
