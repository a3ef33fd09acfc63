#!/usr/bin/env python3
"""UMBP's cluster index on one machine: a private redis-server and morids on loopback.

    tools/bench_kv_index.py [--keys 1000000] [--lookups 2000] [--lookup-keys 1000] [--value-bytes 64]

1. Lookups: batch_exists_consecutive over --lookup-keys keys (32-character hex, as a serving
   stack's block hashes) that node A holds, asked --lookups times on node B (its store lacks them:
   one pipelined round trip to Redis) and on node A (baseline: its own store, no Redis), as the C
   call with its key array made once, and as the mori.umbp call (which builds the array each
   time). Prints p50/p99/mean in microseconds.
2. Publishing: --keys values of --value-bytes put on node A with kv_index redis (time of the puts,
   and until Redis holds every key: HLEN of A's hash), baseline the same puts on a morid with
   kv_index local in the same run; Redis memory per key (used_memory before and after / keys);
   then FLUSHALL and the time until A's heartbeat has published all of it again (a full resync).
Needs redis-server, redis-cli and a built tree (B=build by default)."""
import argparse
import ctypes
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
B = os.path.join(ROOT, os.environ.get("B", "build"))
os.environ.setdefault("MORI_LIB", os.path.join(B, "libmori.so"))
from mori.umbp import UMBPClient  # noqa: E402
from mori.umbp.buffers import KeyArray  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Cluster:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []
        self.rport = free_port()
        self.redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(self.rport), "--save", "",
                                       "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
        self.procs.append(self.redis)
        self.wait(lambda: self.cli("ping") == "PONG", "redis-server")

    def cli(self, *a):
        r = subprocess.run(["redis-cli", "-p", str(self.rport)] + list(a), capture_output=True, text=True)
        return r.stdout.strip()

    def wait(self, fn, what, seconds=60):
        end = time.monotonic() + seconds
        while not fn():
            if time.monotonic() > end:
                raise SystemExit("bench_kv_index: %s not ready within %d s" % (what, seconds))
            time.sleep(0.01)

    def morid(self, name, index, dram):
        run = os.path.join(self.tmp, name)
        os.makedirs(run)
        port = free_port()
        args = [os.path.join(B, "morid"), "--foreground", "--runtime-dir", run, "--listen", "127.0.0.1:%d" % port,
                "--kv-index", index, "--kv-dram-bytes", str(dram), "--kv-index-ttl-ms", "10000"]
        p = subprocess.Popen(args, stderr=open(os.path.join(self.tmp, name + ".log"), "w"))
        self.procs.append(p)
        self.wait(lambda: os.path.exists(os.path.join(run, "morid.session")), name)
        return run, "127.0.0.1:%d" % port

    def close(self):
        for p in reversed(self.procs):
            p.kill()
            p.wait()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def lookups(c, ks, n, prebuilt):
    """Call times (us) of batch_exists_consecutive(ks): through mori.umbp (its key array built at
    each call), or prebuilt: the C call with the key array made once (what a C/C++ caller pays)."""
    assert c.batch_exists_consecutive(ks) == len(ks)
    ka = KeyArray(ks)
    arr = ka.keys()
    count = ctypes.c_size_t()
    t = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        if prebuilt:
            c._call(c._lib.mori_umbp_batch_exists_consecutive, "exists", arr, ka.n, ctypes.byref(count))
            got = count.value
        else:
            got = c.batch_exists_consecutive(ks)
        t.append((time.perf_counter_ns() - t0) / 1000)
        assert got == len(ks), got
    return t


def put_all(c, ks, vb):
    v = b"v" * vb
    t0 = time.perf_counter()
    for i in range(0, len(ks), 2000):
        st = c.batch_put(ks[i:i + 2000], [v] * len(ks[i:i + 2000]))
        assert all(s == 0 for s in st), st[:4]
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1000000)
    ap.add_argument("--lookups", type=int, default=2000)
    ap.add_argument("--lookup-keys", type=int, default=1000)
    ap.add_argument("--value-bytes", type=int, default=64)
    a = ap.parse_args()
    for tool in ("redis-server", "redis-cli"):
        if not shutil.which(tool):
            raise SystemExit("bench_kv_index: no %s (tools/install-deps installs it)" % tool)
    tmp = tempfile.mkdtemp(prefix="mori-kvindex-")
    cl = Cluster(tmp)
    try:
        idx = "redis://127.0.0.1:%d/0" % cl.rport
        dram = max(64 << 20, a.keys * 160 * 2)
        run_a, node_a = cl.morid("a", idx, dram)
        run_b, _ = cl.morid("b", idx, 64 << 20)
        run_l, _ = cl.morid("local", "local", dram)
        ca, cb, cloc = UMBPClient(runtime_dir=run_a), UMBPClient(runtime_dir=run_b), UMBPClient(runtime_dir=run_l)
        ks = ["%032x" % (i * 2654435761 % (1 << 128)) for i in range(a.lookup_keys)]
        put_all(ca, ks, a.value_bytes)
        # wait until B's node table names A and A's keys are in Redis
        cl.wait(lambda: sum(cb.batch_exists(ks)) == len(ks), "node B seeing node A's keys")
        print("batch_exists_consecutive, %d keys of 32 bytes, %d calls each (loopback Redis):" % (len(ks), a.lookups))
        for name, c, pre in (("C call, via the cluster index (node B)", cb, 1),
                             ("C call, baseline: the local store (node A)", ca, 1),
                             ("mori.umbp call, via the cluster index (node B)", cb, 0),
                             ("mori.umbp call, baseline: local store (node A)", ca, 0)):
            t = lookups(c, ks, a.lookups, pre)
            print("  %-48s p50 %8.0f us  p99 %8.0f us  mean %8.0f us" % (name, pct(t, 0.5), pct(t, 0.99),
                                                                          statistics.mean(t)))
        ca.clear()
        cl.wait(lambda: cb.batch_exists_consecutive(ks) == 0, "the removals reaching Redis")
        # ---- publishing a million keys ----
        epoch = cl.cli("get", "mori:node:" + node_a).split()[0]
        h = "mori:kv:%s:%s" % (node_a, epoch)
        mem0 = int(cl.cli("info", "memory").split("used_memory:")[1].split()[0])
        big = ["%032x" % (i * 0x9E3779B97F4A7C15 % (1 << 128)) for i in range(a.keys)]
        t_base = put_all(cloc, big, a.value_bytes)
        t0 = time.perf_counter()
        t_puts = put_all(ca, big, a.value_bytes)
        cl.wait(lambda: cl.cli("hlen", h) == str(a.keys), "%d keys in Redis" % a.keys, 600)
        t_pub = time.perf_counter() - t0
        mem1 = int(cl.cli("info", "memory").split("used_memory:")[1].split()[0])
        print("%d keys of %d-byte values put on one node (batches of 2000):" % (a.keys, a.value_bytes))
        print("  with kv_index redis: puts %.2f s, all %d in Redis after %.2f s (%.0f keys/s)"
              % (t_puts, a.keys, t_pub, a.keys / t_pub))
        print("  baseline, kv_index local: puts %.2f s" % t_base)
        print("  Redis memory: %.1f bytes per key (used_memory %d -> %d)" % ((mem1 - mem0) / a.keys, mem0, mem1))
        cl.cli("flushall")
        t0 = time.perf_counter()
        cl.wait(lambda: cl.cli("hlen", h) == str(a.keys), "the resync", 600)
        print("  FLUSHALL -> all %d keys published again in %.2f s (heartbeat every %.1f s included)"
              % (a.keys, time.perf_counter() - t0, 10.0 / 3))
        for c in (ca, cb, cloc):
            c.close()
    finally:
        cl.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
