#!/usr/bin/env python3
"""A paged KV cache moved from a prefill process to a decode process by block ids, as a
disaggregated-serving connector does it, on mori.io.

Both sides hold a KV cache of vLLM's paged shape,
    (num_layers, 2, num_blocks, block_size, num_kv_heads, head_size)  (K and V per layer),
as one torch tensor (CPU or CUDA; numpy float16 where torch is missing), registered once. For
each request the prefill process writes the request's KV into blocks of its pool and sends the
block ids over a side channel (a pipe here, ZMQ in vLLM); the decode process picks free blocks
of its own pool, reads every (layer, K/V, block) in one batch whose transfer uid is the
request id, and checks each block against the generator the prefill side used. The read's
notification reaches the prefill process after the data has been read: only then does it
free the request's blocks for reuse (so a block reused too early would fail the check).

    examples/kv_cache_transfer.py --runtime-dir /run/mori --device cuda
    examples/kv_cache_transfer.py --prefill-runtime-dir A --decode-runtime-dir B   # two morids

Run from a checkout with PYTHONPATH=python (and B=build, or MORI_LIB) or after make install.
Prints a summary; exit status 0 only if every block of every request matched.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import mori
from mori.io import IOEngine, IOEngineConfig, MemoryDesc

try:
    import torch
except ImportError:
    torch = None


def geometry(a):
    return {"layers": a.layers, "kv_heads": a.kv_heads, "head_size": a.head_size, "block_size": a.block_size}


def elem_bytes():
    return 2  # bfloat16 (torch) or float16 (numpy)


def block_bytes(g):
    return g["block_size"] * g["kv_heads"] * g["head_size"] * elem_bytes()


def kv_cache(g, num_blocks, device):
    shape = (g["layers"], 2, num_blocks, g["block_size"], g["kv_heads"], g["head_size"])
    if torch is not None:
        return torch.zeros(shape, dtype=torch.bfloat16, device=device)
    if device != "cpu":
        raise SystemExit("--device %s needs torch" % device)
    return np.zeros(shape, dtype=np.float16)


def request_kv(g, seed, n):
    """The KV of a request's n blocks, (layers, 2, n, block_size, heads, head_size), from seed:
    what prefill computes, and what decode checks against (on the CPU, then moved)."""
    shape = (g["layers"], 2, n, g["block_size"], g["kv_heads"], g["head_size"])
    if torch is not None:
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(torch.bfloat16)
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32).astype(np.float16)


def register(eng, kv):
    return eng.register_torch_tensor(kv) if torch is not None else eng.register(kv)


def sync(device):
    if torch is not None and device == "cuda":
        torch.cuda.synchronize()


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------


def prefill(a):
    g = geometry(a)
    eng = IOEngine("prefill", IOEngineConfig(runtime_dir=a.prefill_runtime_dir))
    kv = kv_cache(g, a.prefill_blocks, a.device)
    sync(a.device)  # torch's zero-fill runs on its stream, mori's copies on their own
    desc = register(eng, kv)
    send({"kv": desc.pack().hex(), "geometry": g, "num_blocks": a.prefill_blocks})
    rng = np.random.default_rng(a.seed)
    free = list(range(a.prefill_blocks))
    held = {}  # request id -> its blocks, until decode's read has notified us
    for req in range(1, a.requests + 1):
        n = int(rng.integers(a.min_blocks, a.max_blocks + 1))
        while len(free) < n:  # wait for decode to finish reading earlier requests
            for nt in eng.poll_notifications(timeout_ms=1000):
                free += held.pop(nt.tag)
        blocks = [free.pop(int(rng.integers(len(free)))) for _ in range(n)]
        seed = a.seed * 1000003 + req
        kv[:, :, blocks] = request_kv(g, seed, n).to(a.device) if torch is not None else request_kv(g, seed, n)
        sync(a.device)
        held[req] = blocks
        send({"req": req, "blocks": blocks, "seed": seed})
    while held:
        got = eng.poll_notifications(timeout_ms=10000)
        if not got:
            print("prefill: no notification within 10 s for requests %s" % sorted(held), file=sys.stderr)
            sys.exit(1)
        for nt in got:
            free += held.pop(nt.tag)
    send({"done": True})
    eng.close()


def decode(a):
    env = dict(os.environ)
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "prefill"] + a.argv,
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        return decode_with(a, child)
    finally:
        if child.poll() is None:  # decode failed part-way: the prefill side goes with it
            child.kill()
            child.wait()


def decode_with(a, child):
    hello = json.loads(child.stdout.readline() or "{}")
    if "kv" not in hello:
        raise SystemExit("prefill process failed to start (exit %s)" % child.wait())
    g = hello["geometry"]
    bb = block_bytes(g)
    eng = IOEngine("decode", IOEngineConfig(runtime_dir=a.decode_runtime_dir))
    kv = kv_cache(g, a.decode_blocks, a.device)
    sync(a.device)
    local = register(eng, kv)
    remote = MemoryDesc.unpack(bytes.fromhex(hello["kv"]))
    # byte offset of (layer, kv, block): ((layer * 2 + kv) * num_blocks + block) * block_bytes
    lk = np.arange(g["layers"] * 2)[:, None]
    rng = np.random.default_rng(a.seed + 1)
    free = list(range(a.decode_blocks))
    stats = {"requests": 0, "blocks": 0, "bytes": 0, "bad": 0, "xfer_s": 0.0}
    t_run = time.perf_counter()
    for line in child.stdout:
        msg = json.loads(line)
        if msg.get("done"):
            break
        rb = np.array(msg["blocks"])
        n = len(rb)
        lb = np.array([free.pop(int(rng.integers(len(free)))) for _ in range(n)])
        loff = ((lk * a.decode_blocks + lb[None, :]) * bb).ravel()
        roff = ((lk * hello["num_blocks"] + rb[None, :]) * bb).ravel()
        t0 = time.perf_counter()
        st = eng.batch_read([local], [loff], [remote], [roff], [bb], [msg["req"]])[0]  # uid = request id
        st.result(30)
        sync(a.device)
        stats["xfer_s"] += time.perf_counter() - t0
        want = request_kv(g, msg["seed"], n)
        got = kv[:, :, lb.tolist()]
        if torch is not None:
            got = got.cpu()
            ok = [bool(torch.equal(got[:, :, i], want[:, :, i])) for i in range(n)]
        else:
            ok = [bool(np.array_equal(got[:, :, i], want[:, :, i])) for i in range(n)]
        stats["bad"] += ok.count(False)
        stats["requests"] += 1
        stats["blocks"] += n
        stats["bytes"] += st.bytes
        free += lb.tolist()  # the request finished decoding
    run_s = time.perf_counter() - t_run
    rc = child.wait(60)
    eng.close()
    gb = stats["bytes"] / 1e9
    print("kv_cache_transfer: %s, %s, KV %s, block %d B (%d layers x K/V)" % (
        "torch " + torch.__version__ if torch is not None else "numpy (no torch)", a.device,
        "x".join(map(str, (g["layers"], 2, "N", g["block_size"], g["kv_heads"], g["head_size"]))), bb, g["layers"]))
    print("  requests    %d, %d blocks moved by id (%d descriptors), %.3f GB" % (
        stats["requests"], stats["blocks"], stats["blocks"] * g["layers"] * 2, gb))
    print("  throughput  %.2f GB/s inside transfers, %.2f GB/s over the run" % (
        gb / stats["xfer_s"] if stats["xfer_s"] else 0, gb / run_s if run_s else 0))
    print("  verified    %d of %d blocks match the prefill side's generator" % (stats["blocks"] - stats["bad"],
                                                                                 stats["blocks"]))
    if rc != 0:
        print("kv_cache_transfer: FAIL: the prefill process exited %s" % rc)
        return 1
    if stats["bad"] or stats["requests"] != a.requests:
        print("kv_cache_transfer: FAIL: %d blocks differ, %d of %d requests" % (stats["bad"], stats["requests"],
                                                                                 a.requests))
        return 1
    print("kv_cache_transfer: ok, every block verified")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runtime-dir", help="morid's runtime dir for both sides ($MORI_RUNTIME_DIR, else /run/mori)")
    p.add_argument("--prefill-runtime-dir", help="prefill's morid (another node's: a second daemon)")
    p.add_argument("--decode-runtime-dir", help="decode's morid")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-size", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16, help="tokens per block")
    p.add_argument("--prefill-blocks", type=int, default=96)
    p.add_argument("--decode-blocks", type=int, default=128)
    p.add_argument("--min-blocks", type=int, default=4)
    p.add_argument("--max-blocks", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--role", default="decode", choices=["decode", "prefill"], help=argparse.SUPPRESS)
    a = p.parse_args()
    a.argv = [x for i, x in enumerate(sys.argv[1:]) if x != "--role" and (i == 0 or sys.argv[i] != "--role")]
    a.prefill_runtime_dir = a.prefill_runtime_dir or a.runtime_dir
    a.decode_runtime_dir = a.decode_runtime_dir or a.runtime_dir
    a.max_blocks = min(a.max_blocks, a.prefill_blocks, a.decode_blocks)
    a.min_blocks = min(a.min_blocks, a.max_blocks)
    try:
        if a.role == "prefill":
            prefill(a)
            return 0
        return decode(a)
    except mori.MoriError as e:
        print("kv_cache_transfer: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
