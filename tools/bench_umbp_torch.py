#!/usr/bin/env python3
"""UMBP put and get between torch tensors and the node's store, beside the same-run copy between
pinned host memory and the device (CUDA) or memcpy (CPU): the ceiling a store held in host DRAM
can reach for tensors on that device.

    PYTHONPATH=python B=build tools/bench_umbp_torch.py --runtime-dir RUN [--device cuda] [--size 1M] [--n 64]

Prints one line per direction: GB/s (1e9 bytes/s), the work (n values of size bytes, batched and
one at a time) and the baseline of the same run; every value read back is compared with what was
put."""
import argparse
import sys
import time

import torch

from mori.umbp import UMBPClient


def parse_size(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1].upper()] if s[-1].upper() in m else int(s)


def sync(dev):
    if dev.startswith("cuda"):
        torch.cuda.synchronize()


def best(fn, reps):
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime-dir")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--size", default="1M")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    size, n, dev = parse_size(a.size), a.n, a.device
    total = size * n
    src = [torch.randint(0, 255, (size,), dtype=torch.uint8, device=dev) for _ in range(n)]
    dst = [torch.empty(size, dtype=torch.uint8, device=dev) for _ in range(n)]
    host = torch.empty(total, dtype=torch.uint8, pin_memory=dev.startswith("cuda"))
    flat = torch.empty(total, dtype=torch.uint8, device=dev)
    keys = [b"bench-%d" % i for i in range(n)]
    c = UMBPClient(runtime_dir=a.runtime_dir, name="bench-umbp-torch")
    sync(dev)

    def put_batch():
        st = c.batch_put(keys, src)
        assert all(s == 0 for s in st), st

    def get_batch():
        st = c.batch_get(keys, dst)
        sync(dev)
        assert all(s == 0 for s in st), st

    def put_one():
        for k, t in zip(keys, src):
            c.put(k, t)

    def get_one():
        for k, t in zip(keys, dst):
            c.get(k, t)
        sync(dev)

    def h2d():
        flat.copy_(host, non_blocking=True)
        sync(dev)

    def d2h():
        host.copy_(flat, non_blocking=True)
        sync(dev)

    put_batch()
    get_batch()
    bad = sum(1 for s, d in zip(src, dst) if not torch.equal(s, d))
    rows = [("put batch", put_batch, d2h, "device->host"), ("get batch", get_batch, h2d, "host->device"),
            ("put one at a time", put_one, d2h, "device->host"), ("get one at a time", get_one, h2d, "host->device")]
    base = {}
    print("bench_umbp_torch: %d values of %d B (%.1f MB) on %s, torch %s%s" % (
        n, size, total / 1e6, dev, torch.__version__,
        ", " + torch.cuda.get_device_name() if dev.startswith("cuda") else ""))
    for name, fn, bfn, bname in rows:
        if bname not in base:
            bfn()
            base[bname] = total / best(bfn, a.reps) / 1e9
        gbs = total / best(fn, a.reps) / 1e9
        print("  %-18s %7.2f GB/s   baseline %s pinned copy %.2f GB/s (same run): %5.1f %%" % (
            name, gbs, bname, base[bname], 100.0 * gbs / base[bname]))
    get_batch()
    bad += sum(1 for s, d in zip(src, dst) if not torch.equal(s, d))
    c.close()
    print("  verified           %d of %d values equal after the runs" % (2 * n - bad, 2 * n))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
