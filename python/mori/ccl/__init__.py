"""mori.ccl: MORI-CCL's collectives (include/mori_coll.h) in Python, over libmori (ctypes).

A Communicator is a mori.shmem Group (or its node team) seen as ranks 0..n-1; its scratch and
barrier flags live on the group's heap. Calls mirror NCCL (all_reduce = ncclAllReduce, ...) and
the objects AllreduceSdma / AllgatherSdma / All2allSdma mirror ROCm/mori's mori.ccl classes
(a call on a stream; start_async / wait_async for the copy-engine forms).

    from mori import shmem, ccl
    g = shmem.join("tp0", rank, world, heap_size=1 << 30, heap_kind="vram")
    comm = ccl.Communicator(g)
    comm.all_reduce(x, x, op="sum", stream=torch.cuda.current_stream())   # in place
    ag = ccl.AllgatherSdma(comm)            # copy engines: no SM for the data
    ag(inp, out, inp.numel(), stream)

Buffers: torch tensors or cupy arrays (device memory, VRAM heaps: the collective is enqueued on
the stream, no host synchronisation, capturable in a CUDA graph), numpy arrays (host heaps:
the call runs on this thread and returns when done), or int addresses with an explicit count and
dtype. Counts are elements, as NCCL counts them (all_gather's count is the input's). Every rank
calls the same collectives in the same order. Failures raise mori.MoriError with the MORI_E*
code: bad input before anything runs (MORI_EINVAL), a rank that never called (MORI_ETIMEDOUT
naming it) or a dead PE (MORI_EPEERDEAD) from status() once the kernel ended, and from every later
call.
"""
from ..errors import MoriError  # noqa: F401
from .collective import (Communicator, CommOpts, AllgatherSdma, All2allSdma, AllreduceSdma,  # noqa: F401
                         SUM, MAX, MIN, UINT8, INT32, FLOAT16, FLOAT32, BFLOAT16)

__all__ = ["Communicator", "CommOpts", "AllgatherSdma", "All2allSdma", "AllreduceSdma", "SUM", "MAX", "MIN", "UINT8", "INT32",
           "FLOAT16", "FLOAT32", "BFLOAT16"]

for _c in (Communicator, AllgatherSdma, All2allSdma, AllreduceSdma):  # shown as mori.ccl's
    _c.__module__ = __name__
del _c
