#!/usr/bin/env python3
"""MORI-SHMEM and MORI-CCL from Python on host memory (no GPU needed): N processes join one group
through their node's morid, each gets a symmetric heap of the same size, writes a block into its
neighbour's heap with a put, reads the neighbour's heap directly through ptr_p2p, and runs an
all-reduce and an all-gather through a mori.ccl Communicator; every result is checked against
numpy computed from what all ranks put in.

    examples/shmem_ccl_host.py --runtime-dir /tmp/mori [--world-size 4]

Run from a checkout with PYTHONPATH=python (and B=build, or MORI_LIB) or after make install; a morid
must serve the runtime directory (build/morid --foreground --runtime-dir /tmp/mori). The same calls
work on VRAM heaps (heap_kind="vram") with torch tensors from Group.tensor(). Exit status 0 only if
every check held on every rank.
"""
import argparse
import subprocess
import sys

import numpy as np

from mori import ccl, shmem

COUNT = 4096  # float32 elements per rank


def data(rank):
    return np.random.default_rng(rank).standard_normal(COUNT).astype(np.float32)


def pe(a):
    r, n = a.rank, a.world_size
    with shmem.join(a.group, r, n, heap_size=64 << 20, heap_kind="host", timeout_us=20_000_000,
                    runtime_dir=a.runtime_dir) as g:
        # one symmetric buffer: the same offset in every PE's heap (malloc is collective)
        box = g.malloc(COUNT * 4)
        mine = g.numpy(box, (COUNT,), np.float32)
        mine[:] = 0
        g.barrier_all()
        # put my data into my right neighbour's box, then read my left neighbour's box in place
        right, left = (r + 1) % n, (r - 1) % n
        g.putmem(box, data(r), right)
        g.barrier_all()
        assert np.array_equal(mine, data(left)), "put from PE %d did not arrive" % left
        peer = g.ptr_p2p(box, left)  # this PE maps the left neighbour's heap (same node)
        if peer:
            seen = shmem.numpy_view(peer, (COUNT,), np.float32)
            assert np.array_equal(seen, data((left - 1) % n)), "ptr_p2p view of PE %d" % left
        g.barrier_all()
        with ccl.Communicator(g, scratch_bytes=1 << 20) as c:
            x, y = data(r), np.zeros(COUNT, np.float32)
            c.all_reduce(x, y)
            ref = sum(data(q).astype(np.float64) for q in range(n))
            assert np.allclose(y, ref, rtol=1e-5, atol=1e-4), "all_reduce differs"
            gathered = np.zeros(n * COUNT, np.float32)
            c.all_gather(x, gathered)
            assert np.array_equal(gathered, np.concatenate([data(q) for q in range(n)])), "all_gather differs"
        g.free(box)
    print("PE %d of %d: put, ptr_p2p, all_reduce, all_gather checked" % (r, n))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runtime-dir", required=True)
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--group", default="example-shmem-ccl")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)  # set for the child PEs
    a = p.parse_args()
    if a.rank >= 0:
        pe(a)
        return 0
    # each PE's output through its own pipe, printed in rank order (lines of processes sharing one
    # pipe can interleave)
    procs = [subprocess.Popen([sys.executable, __file__, "--runtime-dir", a.runtime_dir, "--world-size",
                               str(a.world_size), "--group", a.group, "--rank", str(r)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(a.world_size)]
    outs = [q.communicate(timeout=120)[0] for q in procs]
    rcs = [q.returncode for q in procs]
    for out in outs:
        sys.stdout.write(out if out.endswith("\n") or not out else out + "\n")
    print("example: %s" % ("ok" if not any(rcs) else "FAILED (exit codes %s)" % rcs))
    return 0 if not any(rcs) else 1


if __name__ == "__main__":
    sys.exit(main())
