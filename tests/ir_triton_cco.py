"""MORI-CCO from Triton through MORI-IR on a GPU: one process is one rank of a communicator with VRAM
windows (morid of $MORI_RUNTIME_DIR); tests/device-ir.sh (part cco) starts N of them under MPS.

    python3 tests/ir_triton_cco.py RANK N [ROUNDS]

Rank 0 writes the unique id to $CCO_UID_FILE (default /tmp/mori-ir-cco.uid; the script removes it
first), the others read it. A Triton kernel linking libmori_shmem_device.bc takes the device
communicator's address (DevComm.device_copy()) and the windows as (offset, bytes): each round it
writes a 4 KiB block (a pattern of its rank, the round and the word) into its source window,
puts it with a signal add into slot `rank` of its right neighbour's receive window
(cco_gda_put_signal_add_block), waits for its own signal (cco_gda_wait_signal), compares its left
neighbour's block with that neighbour's pattern in the kernel, and syncs the world
(cco_gda_barrier_block) before the next round overwrites. Then it reads the peer pointer of every
LSA rank (cco_lsa_peer_ptr) against the host's (Communicator.peer_ptr). The host checks the last
round's block against the pattern. Prints one line ("PE r: ... ok ..." or "... FAIL ..."); exits
1 on a failure.
"""
import os
import sys
import time

import torch
import triton
import triton.language as tl

from mori.cco import Communicator, CCODevCommRequirements, GDA_CONNECTION_FULL
from mori.ir import triton as mt
from mori.shmem.tensor_utils import tensor

WORDS = 1024  # int32 words a round: 4 KiB


@triton.jit
def cco_ring(d, src, dst, dwo, dwb, swo, swb, bad_ptr, err_ptr, ptrs, rounds, me, n, lsa_size,
             WORDS: tl.constexpr, MAX: tl.constexpr):
    right = (me + 1) % n
    left = (me + n - 1) % n
    offs = tl.arange(0, WORDS)
    bad = tl.zeros([WORDS], dtype=tl.int32)
    err = tl.full([], 0, tl.int32)
    for r in range(rounds):
        tl.store(src + offs, me * 100000000 + r * 10000 + offs)
        rc = mt.cco_gda_put_signal_add_block(d, right, dwo, dwb, me * WORDS * 4, swo, swb, 0, WORDS * 4, 0, 1)
        w = mt.cco_gda_wait_signal(d, 0, r + 1)
        got = tl.load(dst + left * WORDS + offs, volatile=True)
        bad += (got != left * 100000000 + r * 10000 + offs).to(tl.int32)
        b = mt.cco_gda_barrier_block(d, 0, 0)
        err += (rc != 0).to(tl.int32) + (w != 0).to(tl.int32) + (b != 0).to(tl.int32)
    for p in tl.static_range(MAX):
        if p < lsa_size:
            a = mt.cco_lsa_peer_ptr(d, dwo, dwb, p, 0)
            tl.store(ptrs + p, a.to(tl.int64, bitcast=True))
    tl.store(bad_ptr + offs, bad)
    tl.store(err_ptr, err + (mt.cco_rank(d) != me).to(tl.int32) * 1000000 + (mt.cco_check(d) != 0).to(tl.int32) * 10000000)


def say(rank, msg):
    print("PE %d: %s" % (rank, msg), flush=True)  # device-ir.sh keeps "PE N:" lines


def main():
    rank, n = int(sys.argv[1]), int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    torch.cuda.set_device(0)
    path = os.environ.get("CCO_UID_FILE", "/tmp/mori-ir-cco.uid")
    if rank == 0:
        uid = Communicator.get_unique_id()
        with open(path + ".tmp", "wb") as f:
            f.write(uid)
        os.rename(path + ".tmp", path)
    else:
        t0 = time.time()
        while not os.path.exists(path):
            if time.time() - t0 > 60:
                say(rank, "FAIL: no unique id in %s after 60 s" % path)
                return 1
            time.sleep(0.01)
        uid = open(path, "rb").read()
    ok = False
    with Communicator.init(n, rank, uid, per_rank_vmm=64 << 20, mem_kind="vram", gpu_device=0,
                           timeout_us=120_000_000) as comm:
        dm = comm.alloc_mem(n * WORDS * 4)
        sm = comm.alloc_mem(WORDS * 4)
        dwin = comm.register_window(dm.ptr, dm.size)
        swin = comm.register_window(sm.ptr, sm.size)
        dc = comm.create_dev_comm(CCODevCommRequirements(gda_connection_type=GDA_CONNECTION_FULL, barrier_count=1))
        dcd = dc.device_copy()
        dst = tensor(dwin.local_ptr, (n * WORDS,), torch.int32)
        src = tensor(swin.local_ptr, (WORDS,), torch.int32)
        lsa_size, _, node_start = comm.lsa()
        bad = torch.zeros(WORDS, dtype=torch.int32, device="cuda")
        err = torch.zeros(1, dtype=torch.int32, device="cuda")
        ptrs = torch.zeros(8, dtype=torch.int64, device="cuda")
        comm.barrier()
        t0 = time.perf_counter()
        cco_ring[(1,)](dcd.data_ptr(), src, dst, dwin.handle.off, dwin.handle.bytes, swin.handle.off, swin.handle.bytes,
                       bad, err, ptrs, rounds, rank, n, lsa_size, WORDS=WORDS, MAX=8, num_warps=4, num_stages=1,
                       extern_libs=mt.extern_libs())
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0  # includes the compile
        comm.barrier()
        left = (rank + n - 1) % n
        want = left * 100000000 + (rounds - 1) * 10000 + torch.arange(WORDS, device="cuda", dtype=torch.int32)
        nbad_host = int((dst[left * WORDS:(left + 1) * WORDS] != want).sum())
        host_ptrs = [comm.peer_ptr(dm.ptr, node_start + p) or 0 for p in range(min(lsa_size, 8))]
        dev_ptrs = [int(a) & ((1 << 64) - 1) for a in ptrs[:len(host_ptrs)].tolist()]
        nbad, nerr = int(bad.sum()), int(err.item())
        ok = nbad == 0 and nbad_host == 0 and nerr == 0 and dev_ptrs == host_ptrs
        say(rank, "triton cco ring %s: %d rounds x %d B to rank %d (put+signal, wait, world barrier); words "
            "differing: kernel %d, host %d; device errors %d; LSA peer pointers %s the host's (%d); signal %d; "
            "%.1f s with compile" % ("ok" if ok else "FAIL", rounds, WORDS * 4, (rank + 1) % n, nbad, nbad_host, nerr,
                                     "==" if dev_ptrs == host_ptrs else "!=", len(host_ptrs), dc.read_signal(0), dt))
        comm.barrier()
        dc.destroy()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
