"""MORI-EP (mori.ops) and MORI-CCL (mori.ccl) on torch CUDA tensors, on a GPU. Each rank is a
process of its own (its own CUDA context and libmori client; several share the one GPU, under MPS
on the device machine) in a group with a VRAM heap of one morid. Every rank derives every rank's
inputs from a shared seed (CPU generators), so each computes the reference alone. Without torch
built with CUDA, or without a GPU, these skip, saying so.

The ranks run this file as a script (python3 test_gpu_torch_ops.py '<json>'); each ends with one
line "RESULT {ok, summary}". A test fails naming every rank that failed, printed no result or
passed the deadline (then killed); passing, it prints one line "# test_gpu_torch_ops: ...: ok:"
with the ranks' summaries (through capsys.disabled, so it reaches the log without -s)."""
import faulthandler
import json
import os
import subprocess
import sys
import time
import traceback

import pytest

try:
    import torch
except ImportError:
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
need_cuda = pytest.mark.skipif(torch is None or not torch.cuda.is_available(),
                               reason="no torch with CUDA (torch missing or no GPU)")

DEADLINE = 180       # s for a test's ranks, start-up (import torch, CUDA context) included
GRACE = 20           # s the other ranks get once one failed (its exit aborts their waits sooner)
TMO = 60_000_000     # us: the group's deadline (join, collective calls, the communicator's waits)
SEED = 20251
H, K, M = 2048, 8, 128   # EP: hidden size, top-k, max tokens a rank
EP_ITERS = 20


# ---- the parent: ranks as processes ----

def run_ranks(tmp_path, daemon, role, world, **params):
    """Ranks 0..world-1 of `role` as processes running this file; their summaries in rank order."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONOPTIMIZE", None)  # the ranks' checks are plain asserts: -O would skip them all
    # an equal share of the SMs under MPS (as the C GPU tests): without it one rank's spinning combine
    # can hold every SM while a peer's torch kernels wait behind it, until the EP deadline fires
    env.setdefault("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(max(1, 100 // world)))
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), HERE, env.get("PYTHONPATH", "")])
    procs, logs = [], []
    for r in range(world):
        logs.append(tmp_path / ("%s-rank%d.log" % (role, r)))
        arg = json.dumps(dict(params, role=role, rank=r, world=world, runtime_dir=daemon.run))
        with open(logs[-1], "w") as f:
            procs.append(subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), arg], stdout=f,
                                          stderr=subprocess.STDOUT, env=env, cwd=ROOT))
    start, failed_at, killed = time.monotonic(), None, []
    while [p.poll() for p in procs].count(None):  # every one polled: a failure is seen at once
        now = time.monotonic()
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = now
        if now - start > DEADLINE or (failed_at is not None and now - failed_at > GRACE):
            for r, p in enumerate(procs):
                if p.poll() is None:
                    p.kill()  # our own child, by its handle
                    p.wait()
                    killed.append(r)
            break
        time.sleep(0.1)
    out, bad = [], []
    for r, (p, log) in enumerate(zip(procs, logs)):
        text = log.read_text(errors="replace")
        res = [json.loads(ln[len("RESULT "):]) for ln in text.splitlines() if ln.startswith("RESULT ")]
        if r not in killed and p.returncode == 0 and res and res[-1]["ok"]:
            out.append(res[-1]["summary"])
            continue
        why = ("killed after %.0f s" % (time.monotonic() - start) if r in killed else
               "exit %s: %s" % (p.returncode, res[-1]["summary"] if res else "no RESULT line"))
        bad.append("rank %d: %s\n    | %s" % (r, why, "\n    | ".join(text.splitlines()[-25:])))
    if bad:
        pytest.fail("%s, %d ranks:\n%s" % (role, world, "\n".join(bad)), pytrace=False)
    return out


def report(capsys, what, summaries):
    with capsys.disabled():
        print("\n# test_gpu_torch_ops: %s: ok: %s" % (what, "; ".join(summaries)), flush=True)


# ---- MORI-EP ----

def ep_inputs(it, s, W, E):
    """Rank s's tokens in iteration it: x [T, H] bf16, weights [T, K] f32, indices [T, K] int32,
    alike on every rank. x is j/16 with |j| <= 16, so x * (1 + a local id or rank < 8) is exact
    in bf16 and the sums are exact in f32 up to the last rounding."""
    g = torch.Generator().manual_seed(SEED * 1000 + it * 37 + s)
    T = int(torch.randint(0, M + 1, (1,), generator=g))
    if s == (it // 4) % W:  # in turn, a rank with no tokens and one with the most
        T = (0, M, T, T)[it % 4]
    x = (torch.randint(-16, 17, (T, H), generator=g).float() / 16).to(torch.bfloat16)
    # K distinct experts a token (stable: equal keys sort alike on every rank), some slots empty
    idx = torch.argsort(torch.rand(T, E, generator=g), dim=1, stable=True)[:, :K].to(torch.int32)
    idx[torch.rand(T, K, generator=g) < 0.15] = -1
    if T and it % 2:
        idx[T // 2] = -1  # a token bound for no expert: combine gives zeros
    w = torch.rand(T, K, generator=g) + 0.1
    return x.cuda(), w.cuda(), idx.cuda()


def expect_recv(data, me, epr, ll):
    """Rank me's receive buffer per bin (normal: one; low-latency: one per local expert): (rows,
    weights, indices, source positions), by source rank, then token (docs/ep.md). Normal: a token
    once per destination rank, at s x M + t; low-latency: once per expert, at (s x M + t) x K + k."""
    out = []
    for e in ([me * epr + l for l in range(epr)] if ll else [None]):
        parts = []
        for s, (x, w, idx) in enumerate(data):
            hit = (idx == e) if ll else (idx >= 0) & (idx // epr == me)
            ts = hit.any(1).nonzero().squeeze(1)
            pos = s * M + ts
            if ll:  # the top-k slot that named e (the experts of a token are distinct)
                pos = pos * K + hit[ts].float().argmax(1)
            parts.append((x[ts], w[ts], idx[ts], pos))
        out.append([torch.cat(c) for c in zip(*parts)])
    return out


def combine_ref(x, w, idx, W, epr, ll):
    """Combine's result in f32 when each rank's experts return row x (1 + local expert id)
    (low-latency: summed weighted, DeepEP) or row x (1 + rank) (normal: summed unweighted over the
    token's distinct destination ranks, ROCm/mori)."""
    valid = idx >= 0
    if ll:
        c = (w * valid * (1 + idx.clamp(min=0) % epr)).sum(1)
    else:
        d = torch.arange(W, device=idx.device)
        hit = (valid.unsqueeze(2) & (idx.unsqueeze(2) // epr == d)).any(1)  # [T, W]
        c = (hit * (1 + d)).sum(1)
    return x.float() * c.float().unsqueeze(1)


def _ep_rank(p):
    from mori import ops, shmem
    W, me, ll = p["world"], p["rank"], p["kernel"] == "LowLatency"
    epr = 8 if W == 2 else 4
    cfg = ops.EpDispatchCombineConfig(
        data_type=torch.bfloat16, rank=me, world_size=W, hidden_dim=H, scale_dim=0, scale_type_size=4,
        max_token_type_size=2, max_num_inp_token_per_rank=M, num_experts_per_rank=epr, num_experts_per_token=K,
        kernel_type=ops.EpDispatchCombineKernelType[p["kernel"]], timeout_us=30_000_000)
    heap = shmem.RESERVED + cfg.heap_bytes() + (16 << 20)
    with shmem.join(p["name"], me, W, heap_size=heap, heap_kind="vram", timeout_us=TMO,
                    runtime_dir=p["runtime_dir"]) as g:
        op = ops.EpDispatchCombineOp(cfg, g)
        summary = _ep_iterations(op, g, me, W, epr, ll)  # its views of the heap die with it
        op.destroy()
    return "rank %d: %s" % (me, summary)


def _ep_iterations(op, g, me, W, epr, ll):
    from mori import MoriError, MORI_EINVAL
    per_call, pulled, refused = [], 0, False
    for it in range(EP_ITERS):
        data = [ep_inputs(it, s, W, W * epr) for s in range(W)]
        x, w, idx = data[me]
        tok, rw, _, ridx, count = op.dispatch(x, w, None, idx)
        src_pos = op.get_dispatch_src_token_pos()
        pr, pe, ir = op.get_dispatch_layout(idx)
        torch.cuda.synchronize()
        op.status()
        where = "iteration %d (%d tokens here)" % (it, len(x))
        # DeepEP's layout of this rank's own routing
        in_rank = torch.stack([((idx >= 0) & (idx // epr == d)).any(1) for d in range(W)], 1)
        assert torch.equal(ir, in_rank), where + ": get_dispatch_layout's token_in_rank"
        assert pr.tolist() == in_rank.sum(0).tolist(), where + ": tokens per rank %s" % pr.tolist()
        assert pe.tolist() == torch.bincount(idx[idx >= 0].long(), minlength=W * epr).tolist(), where
        # dispatch: counts, then every row bit for bit, its weights, indices and source position
        want = expect_recv(data, me, epr, ll)
        counts = count.tolist()
        assert counts == [len(b[0]) for b in want], "%s: received %s, expected %s" % (
            where, counts, [len(b[0]) for b in want])
        for l, (rows, ws, ids, pos) in enumerate(want):
            n = len(rows)
            t_, w_, i_, s_ = (tok[l], rw[l], ridx[l], src_pos[l]) if ll else (tok, rw, ridx, src_pos)
            assert torch.equal(t_[:n].view(torch.int16), rows.view(torch.int16)), "%s bin %d: rows" % (where, l)
            assert torch.equal(w_[:n], ws), "%s bin %d: weights" % (where, l)
            assert torch.equal(i_[:n], ids), "%s bin %d: indices" % (where, l)
            assert torch.equal(s_[:n].long(), pos), "%s bin %d: source positions" % (where, l)
        per_call.append(sum(counts))
        # the experts: each received row x (1 + local expert id) (low-latency) or x (1 + rank)
        mult = (1 + torch.arange(epr, device="cuda")).view(-1, 1, 1) if ll else 1 + me
        y_in = (tok.float() * mult).to(torch.bfloat16)
        if it == 0:  # dispatch's received indices where combine needs the caller's routing
            with pytest.raises(MoriError) as e:
                op.combine(y_in, w, ridx)
            assert e.value.code == MORI_EINVAL and "received indices" in e.value.message, e.value
            refused = True
        if it % 3 == 2:  # through the registered combine input: the home ranks read it in place
            reg = op.get_registered_combine_input_buffer(torch.bfloat16)
            reg.copy_(y_in)
            y_in = reg
            pulled += 1
        # even iterations: the caller's weights and routing; odd: None (dispatch's copies)
        y = op.combine(y_in, *((w, idx) if it % 2 == 0 else (None, None)))
        torch.cuda.synchronize()
        op.status()
        assert y.shape == x.shape and y.dtype == torch.bfloat16, (where, y.shape, y.dtype)
        torch.testing.assert_close(y.float(), combine_ref(x, w, idx, W, epr, ll), rtol=1e-2, atol=1e-3,
                                   msg=lambda m: "%s: combine: %s" % (where, m))
    return "%s %d iterations, %d rows received (%d..%d a call), every row, weight, index and source " \
           "position exact, layout ok, combine within 1e-2 (%d through the registered input)%s" % (
               "LowLatency" if ll else "IntraNode", EP_ITERS, sum(per_call), min(per_call), max(per_call),
               pulled, ", dispatch's indices refused" if refused else "")


@need_cuda
@pytest.mark.parametrize("kernel", ["IntraNode", "LowLatency"])
@pytest.mark.parametrize("world", [2, 4])
def test_ep_dispatch_combine(daemon, tmp_path, capsys, world, kernel):
    """Dispatch and combine, 20 rounds of fresh routing: counts, rows bit for bit, weights,
    indices, source positions, DeepEP's layout, combine against torch in f32 (bf16: 1e-2)."""
    res = run_ranks(tmp_path, daemon, "ep", world, kernel=kernel, name="py-gpu-ep-%d-%s" % (world, kernel))
    report(capsys, "ep %s world %d" % (kernel, world), res)


# ---- MORI-CCL ----

def ccl_input(q, n, count, dt):
    """Rank q's n x count inputs: k/64 with |k| <= 1000. f32 sums of 4 are exact, and so are f32
    sums of their bf16 values: a result differs from the reference only by a wrong rounding."""
    g = torch.Generator().manual_seed(SEED + 7919 * q + 31 * count + (dt == torch.bfloat16))
    return (torch.randint(-1000, 1001, (n * count,), generator=g).float() / 64).to(dt)


def _same(got, ref, what):
    """Exact: docs/ccl.md's reductions are f32 in rank order, rounded once, as the reference."""
    if not torch.equal(got, ref):
        bad = (got.float() != ref.float()).nonzero().squeeze(1)  # NaN: an element never written
        i = int(bad[0])
        raise AssertionError("%s: %d of %d elements differ, the first at %d: %r, expected %r (max |diff| %g)" % (
            what, len(bad), got.numel(), i, got[i].item(), ref[i].item(),
            (got.float() - ref.float()).abs().nan_to_num(float("inf")).max().item()))


def _ccl_rank(p):
    from mori import ccl, shmem
    n, r = p["world"], p["rank"]
    st = torch.cuda.current_stream()
    done, algos = 0, set()
    with shmem.join(p["name"], r, n, heap_size=32 << 20, heap_kind="vram", timeout_us=TMO,
                    runtime_dir=p["runtime_dir"]) as g:
        # 4 MiB of scratch: the 1<<20 counts (4 MiB a rank and more) go in several rounds
        with ccl.Communicator(g, scratch_bytes=4 << 20) as c:
            assert (c.rank(), c.size()) == (r, n)
            for count in (1, 1023, 1 << 20):
                for dt in (torch.float32, torch.bfloat16):
                    xs = [ccl_input(q, n, count, dt) for q in range(n)]
                    x = xs[r].cuda()

                    def seg(a):  # the part of a for rank r
                        return a[r * count:(r + 1) * count]

                    def rsum(parts):  # f32 in rank order, one rounding
                        acc = parts[0].float()
                        for a in parts[1:]:
                            acc = acc + a.float()
                        return acc.to(dt)
                    cases = [
                        ("all_reduce sum", count, lambda y: c.all_reduce(x[:count], y, op="sum", stream=st),
                         rsum([a[:count] for a in xs])),
                        ("all_reduce max", count, lambda y: c.all_reduce(x[:count], y, op="max", stream=st),
                         torch.stack([a[:count].float() for a in xs]).amax(0).to(dt)),
                        ("all_gather", n * count, lambda y: c.all_gather(x[:count], y, stream=st),
                         torch.cat([a[:count] for a in xs])),
                        ("reduce_scatter", count, lambda y: c.reduce_scatter(x, y, stream=st),
                         rsum([seg(a) for a in xs])),
                        ("all_to_all", n * count, lambda y: c.all_to_all(x, y, stream=st),
                         torch.cat([seg(a) for a in xs])),
                        ("broadcast", count, lambda y: c.broadcast(x[:count], y, root=n - 1, stream=st),
                         xs[n - 1][:count]),
                        ("all_reduce sum in place", count, None, rsum([a[:count] for a in xs])),
                    ]
                    for what, size, call, ref in cases:
                        if call is None:  # NCCL's in place: src is dst
                            y = x[:count].clone()
                            c.all_reduce(y, y, stream=st)
                        else:
                            y = torch.full((size,), float("nan"), dtype=dt, device="cuda")  # unwritten: NaN
                            call(y)
                        torch.cuda.synchronize()
                        c.check()
                        _same(y.cpu(), ref, "rank %d: %s, count %d, %s" % (r, what, count, dt))
                        done += 1
                for coll in ("allreduce", "allgather", "alltoall"):
                    algos.add("%s %s" % (coll, c.algo(coll, 4 * count * (n if coll != "allreduce" else 1))))
            assert c.status() == (0, -1), c.status()
    return "rank %d: %d collectives exact (counts 1, 1023, 1<<20; f32 and bf16; algorithms: %s)" % (
        r, done, ", ".join(sorted(algos)))


@need_cuda
@pytest.mark.parametrize("world", [2, 4])
def test_ccl_collectives(daemon, tmp_path, capsys, world):
    """all_reduce (sum, max, in place), all_gather, reduce_scatter, all_to_all and broadcast on
    torch CUDA tensors on torch's current stream, f32 and bf16, against torch on every rank."""
    res = run_ranks(tmp_path, daemon, "ccl", world, name="py-gpu-ccl-%d" % world)
    report(capsys, "ccl world %d" % world, res)


# ---- a rank: this file run as a script ----

def _child(p):
    faulthandler.dump_traceback_later(DEADLINE - 15, exit=True)  # a stuck rank says where, then exits
    try:
        if not __debug__:  # python -O: every check below is an assert and would not run
            raise RuntimeError("asserts are off (python -O / PYTHONOPTIMIZE): the checks cannot run")
        torch.cuda.set_device(int(os.environ.get("MORI_GPU_DEVICE") or 0))  # the group's default device
        torch.zeros(1, device="cuda")  # CUDA's context exists before libmori's first call
        summary = {"ep": _ep_rank, "ccl": _ccl_rank}[p["role"]](p)
    except BaseException as e:  # noqa: B902 - reported to the parent, with the traceback above it
        traceback.print_exc()
        print("RESULT " + json.dumps({"ok": False, "summary": "%s: %s" % (type(e).__name__, e)}), flush=True)
        os._exit(1)  # at once: morid sees the PE gone and the other ranks' waits end
    print("RESULT " + json.dumps({"ok": True, "summary": summary}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(json.loads(sys.argv[1])))
