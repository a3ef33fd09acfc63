"""MORI-IR's Triton patterns on a GPU (ring and p2p): one process is one PE of a group on VRAM heaps (morid of
$MORI_RUNTIME_DIR); tests/device-ir.sh starts N of them under MPS.

    python3 tests/ir_triton_pe.py RANK N [ROUNDS]

ring  a Triton kernel that links libmori_shmem_device.bc: in each of ROUNDS rounds
      every PE writes a 4 KiB block (a pattern of its rank, the round and the word), puts it with
      a signal into its next neighbour's heap (putmem_nbi_signal_block, SIGNAL_SET), waits for
      its own round's signal (signal_wait_until) and compares the block its previous neighbour
      sent with that neighbour's pattern, in the kernel; afterwards the host compares every
      received byte with the neighbour's own source blocks, read through ptr_p2p.
p2p   a Triton kernel reads every PE's heap directly (ptr_p2p on the device,
      loads from the peers' mappings) and sums: an all-reduce of N floats, checked against torch
      (each PE regenerates every PE's data from its seed) and the device's ptr_p2p addresses
      against the host's.
The module's state global is filled by mori.ir.triton's post-compile hook (install_hook).
Prints one line per check ("PE r: ... ok ..." or "... FAIL ..."); exits 1 on any failure.
"""
import os
import sys
import time

import torch
import triton
import triton.language as tl

from mori import shmem
from mori.ir import triton as mt

WORDS = 1024  # int32 words a round: 4 KiB


@triton.jit
def ring_kernel(dst, src, sig, bad_ptr, err_ptr, rounds, me, n, WORDS: tl.constexpr):
    nxt = (me + 1) % n
    prev = (me + n - 1) % n
    offs = tl.arange(0, WORDS)
    bad = tl.zeros([WORDS], dtype=tl.int32)
    err = tl.full([], 0, tl.int32)
    for r in range(rounds):
        tl.store(src + r * WORDS + offs, me * 100000000 + r * 10000 + offs)
        rc = mt.putmem_nbi_signal_block(dst + r * WORDS, src + r * WORDS, WORDS * 4, sig + r, r + 1,
                                        mt.SIGNAL_SET, nxt, 0)
        v = mt.signal_wait_until(sig + r, mt.CMP_EQ, r + 1)
        got = tl.load(dst + r * WORDS + offs, volatile=True)
        bad += (got != prev * 100000000 + r * 10000 + offs).to(tl.int32)
        err += (rc != 0).to(tl.int32) + (v != (r + 1).to(tl.uint64)).to(tl.int32)
    q = mt.quiet_thread()
    tl.store(bad_ptr + offs, bad)
    tl.store(err_ptr, err + (q != 0).to(tl.int32) * 1000000 + (mt.my_pe() != me).to(tl.int32) * 10000000)


@triton.jit
def p2p_sum_kernel(x, stage, out, addrs, me, n, N, BLOCK: tl.constexpr, MAX_PES: tl.constexpr):
    # each program sums one BLOCK of every PE's x: loaded straight from the peer's heap where
    # this process maps it (ptr_p2p), else fetched through the proxy (getmem_block) into this
    # PE's staging area first
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for p in tl.static_range(MAX_PES):
        if p < n:
            a = mt.ptr_p2p(x, me, p)
            if pid == 0:
                tl.store(addrs + p, a.to(tl.int64, bitcast=True))
            if a != 0:
                acc += tl.load(a.to(tl.pointer_type(tl.float32), bitcast=True) + offs, mask=mask, other=0.0)
            else:
                rc = mt.getmem_block(stage + p * N + pid * BLOCK, x + pid * BLOCK, BLOCK * 4, p, 0)
                acc += tl.load(stage + p * N + offs, mask=mask, other=0.0, volatile=True) + (rc != 0).to(tl.float32) * 1e30
    tl.store(out + offs, acc, mask=mask)


def say(rank, msg):
    print("PE %d: %s" % (rank, msg), flush=True)


def ring(g, rank, n, rounds):
    dst_a = g.calloc(rounds * WORDS * 4)
    src_a = g.calloc(rounds * WORDS * 4)
    sig_a = g.calloc(rounds * 8)
    dst = g.tensor(dst_a, (rounds, WORDS), torch.int32)
    src = g.tensor(src_a, (rounds, WORDS), torch.int32)
    sig = g.tensor(sig_a, (rounds,), torch.int64)
    bad = torch.zeros(WORDS, dtype=torch.int32, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    g.barrier_all()
    t0 = time.perf_counter()
    ring_kernel[(1,)](dst, src, sig, bad, err, rounds, rank, n, WORDS=WORDS, num_warps=4, num_stages=1,
                      extern_libs=mt.extern_libs())
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0  # includes the first compile
    g.barrier_all()  # every PE's kernel is done: the sources are final
    prev = (rank + n - 1) % n
    peer_src = g.ptr_p2p(src_a, prev)
    # the host's checks: against what the neighbour's source blocks hold (read through its
    # mapping, or fetched with a host get where it is on the other morid), and its pattern
    if peer_src is not None:
        sent = g.tensor(peer_src, (rounds, WORDS), torch.int32)
    else:
        raw = bytearray(g.get_bytes(src_a, rounds * WORDS * 4, prev))
        sent = torch.frombuffer(raw, dtype=torch.int32).view(rounds, WORDS).cuda()
    want = prev * 100000000 + torch.arange(rounds, device="cuda", dtype=torch.int32)[:, None] * 10000 + \
        torch.arange(WORDS, device="cuda", dtype=torch.int32)[None, :]
    nbad_sent = int((dst != sent).sum())
    nbad_want = int((dst != want).sum())
    nbad_dev, nerr = int(bad.sum()), int(err.item())
    ok = nbad_sent == 0 and nbad_want == 0 and nbad_dev == 0 and nerr == 0 and bool(torch.equal(sent, want))
    say(rank, "triton ring %s: %d rounds x %d B from PE %d; words differing: kernel %d, host vs its source %d, "
        "vs its pattern %d; device errors %d; %.1f s with compile; neighbour %s" % (
            "ok" if ok else "FAIL", rounds, WORDS * 4, prev, nbad_dev, nbad_sent, nbad_want, nerr, dt,
            "mapped (direct stores)" if peer_src is not None else "on the other morid (proxy)"))
    # a second launch, compiled already: the figure per round
    if ok:
        sig.zero_()
        dst.zero_()
        torch.cuda.synchronize()
        g.barrier_all()
        t0 = time.perf_counter()
        ring_kernel[(1,)](dst, src, sig, bad, err, rounds, rank, n, WORDS=WORDS, num_warps=4, num_stages=1,
                          extern_libs=mt.extern_libs())
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        ok = int(err.item()) == 0 and int(bad.sum()) == 0
        say(rank, "triton ring again %s: %.2f us a round (put+signal 4 KiB, wait, check; %d PEs on one GPU, %s)" % (
            "ok" if ok else "FAIL", dt * 1e6 / rounds, n, "direct" if peer_src is not None else "proxy"))
    g.barrier_all()
    g.free(sig_a)
    g.free(src_a)
    g.free(dst_a)
    return ok


def p2p(g, rank, n, N=1 << 20, MAX_PES=8):
    if os.environ.get("IR_ROOT"):
        N = 1 << 16  # through the proxy: 64 gets of 4 KiB from each remote PE
    xa = g.calloc(N * 4)
    sa = g.calloc(MAX_PES * N * 4)
    x = g.tensor(xa, (N,), torch.float32)
    stage = g.tensor(sa, (MAX_PES * N,), torch.float32)
    gen = torch.Generator(device="cuda")
    data = []
    for p in range(n):
        gen.manual_seed(1000 + p)
        data.append(torch.randn(N, device="cuda", generator=gen))
    x.copy_(data[rank])
    want = torch.stack(data).sum(0)
    out = torch.empty(N, dtype=torch.float32, device="cuda")
    addrs = torch.zeros(MAX_PES, dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    g.barrier_all()
    BLOCK = 1024
    grid = (triton.cdiv(N, BLOCK),)
    p2p_sum_kernel[grid](x, stage, out, addrs, rank, n, N, BLOCK=BLOCK, MAX_PES=MAX_PES,
                             extern_libs=mt.extern_libs())
    torch.cuda.synchronize()
    host = [g.ptr_p2p(xa, p) or 0 for p in range(n)]
    dev = [int(a) & ((1 << 64) - 1) for a in addrs[:n].tolist()]
    err = float((out - want).abs().max())
    mapped = sum(1 for a in host if a)
    ok = dev == host and err <= 1e-4 and host[rank] != 0
    # timing, compiled: the kernel against torch's own sum of the same data (local copies)
    it = 3 if os.environ.get("IR_ROOT") else 20
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(it):
        p2p_sum_kernel[grid](x, stage, out, addrs, rank, n, N, BLOCK=BLOCK, MAX_PES=MAX_PES,
                             extern_libs=mt.extern_libs())
    torch.cuda.synchronize()
    t_k = (time.perf_counter() - t0) / it
    st = torch.stack(data)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(it):
        torch.sum(st, 0)
    torch.cuda.synchronize()
    t_t = (time.perf_counter() - t0) / it
    say(rank, "triton p2p sum %s: %d floats from %d PEs' heaps (%d loaded through ptr_p2p, %d fetched through the "
        "proxy), max |err| vs torch %.2e, device ptr_p2p %s host's; %.1f us a call (torch.sum of local copies: "
        "%.1f us)" % ("ok" if ok else "FAIL", N, n, mapped, n - mapped, err, "==" if dev == host else "!=",
                      t_k * 1e6, t_t * 1e6))
    g.barrier_all()
    g.free(sa)
    g.free(xa)
    return ok


def main():
    rank, n = int(sys.argv[1]), int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    torch.cuda.set_device(0)
    if rank == 0:
        from triton import knobs
        say(rank, "triton %s, torch %s, hook %s" % (triton.__version__, torch.__version__,
                                                      "knobs.runtime.jit_post_compile_hook" if hasattr(knobs.runtime, "jit_post_compile_hook") else "none"))
    # IR_ROOT (host:port of the root morid's peer listener): PEs split over two morids, so
    # peers on the other one are reached through the proxy
    g = shmem.join("ir-triton", rank, n, heap_size=64 << 20, heap_kind="vram", timeout_us=120_000_000,
                   root=os.environ.get("IR_ROOT") or None)
    mt.install_hook(g)
    ok = True
    for name in (os.environ.get("IR_PARTS") or "ring p2p").split():
        try:
            ok = (ring(g, rank, n, rounds) if name == "ring" else p2p(g, rank, n)) and ok
        except Exception as e:  # one line, with its cause; the group's status tells a dead peer
            import traceback
            traceback.print_exc()
            say(rank, "%s FAIL: %r (group status %r)" % (name, e, g.status()))
            ok = False
            break
    g.leave()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
