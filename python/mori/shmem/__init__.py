"""mori.shmem: MORI-SHMEM's host API (include/mori_shmem.h) in Python, over libmori (ctypes).

A group is a set of PEs (processes, one per GPU in production) with ranks 0..n-1; every PE has
a symmetric heap of the same size, formed by the node's morid. An object allocated collectively
sits at the same offset of every PE's heap.

    from mori import shmem
    g = shmem.join("job7", rank, world, heap_size=1 << 30, heap_kind="vram")
    # or: uid = shmem.get_unique_id() on rank 0, broadcast it, then
    #     g = shmem.init_uid(uid, rank, world, heap_kind="vram")
    buf = g.calloc(4096)                        # an address (int) in this PE's heap
    t = g.tensor(buf, (1024,), torch.float32)   # a torch view of it, no copy
    peer = g.ptr_p2p(buf, (g.my_pe() + 1) % g.n_pes())   # where this process reaches PE+1's copy
    g.barrier_on_stream(torch.cuda.current_stream().cuda_stream)
    g.leave()

Names follow ROCm/mori's MORI-SHMEM (ShmemMalloc -> malloc, ShmemPtrP2p -> ptr_p2p,
ShmemBarrierAll -> barrier_all, unique-id init) and NVSHMEM (get_unique_id, quiet_on_stream),
with the group as an object instead of process-global state (ROCm/mori's shmem_mype() etc.), so
one process may hold several groups.

Addresses are ints: device addresses for VRAM heaps, host addresses for host heaps (memfd; no
GPU needed, the kind the tests without a GPU use). Sizes and offsets are bytes; times are
microseconds (timeout_us). Collective calls (join, init_uid, malloc, calloc, free, barrier_all)
are made by every PE in the same order and each has the group's deadline: none waits forever.
Every failure raises mori.MoriError with the MORI_E* code and libmori's message; a PE that died
aborts the group (later calls: MORI_EPEERDEAD).

Ownership: a Group owns its libmori client and group handle; leave() (or a with-block, or the
process's exit) releases both. Memory from malloc/calloc belongs to the group. A view made by
Group.numpy() or Group.tensor() holds its Group: the heap stays mapped while any view (or a
view of it, a torch tensor over it) lives. leave() with views alive leaves at once for this
object (its calls raise MoriError, its communicators' MORI_ESTALE) but libmori's finalize, which
tears the group down for the other PEs and unmaps the heap, waits for the last view to be
collected (`live_views` counts them; `del` them first for an immediate teardown).
"""
from ..errors import MoriError  # noqa: F401
from .api import (Group, ShmemOpts, join, init, get_unique_id, init_uid, MEM_HOST, MEM_VRAM, UID_BYTES,  # noqa: F401
                  RESERVED, _pe_label, _stream)
from .tensor_utils import tensor, numpy_view, _CudaBuffer, _int  # noqa: F401

__all__ = ["Group", "ShmemOpts", "join", "init", "get_unique_id", "init_uid", "tensor", "numpy_view", "MEM_HOST",
           "MEM_VRAM", "UID_BYTES", "RESERVED"]

Group.__module__ = __name__  # shown as mori.shmem's
