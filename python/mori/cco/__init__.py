"""mori.cco: MORI-CCO's explicit communicators (include/mori_cco.h) in Python, with ROCm/mori's
names: Communicator.get_unique_id / init, alloc_mem, register_window, create_dev_comm (from
CCODevCommRequirements), barrier, destroy.

    from mori.cco import Communicator, CCODevCommRequirements, GDA_CONNECTION_NONE
    uid = Communicator.get_unique_id() if rank == 0 else None   # broadcast it (MPI, torch.distributed)
    with Communicator.init(nranks, rank, uid, per_rank_vmm=256 << 20, mem_kind="vram") as comm:
        mem = comm.alloc_mem(4096)
        win = comm.register_window(mem.ptr, mem.size)     # win.handle: what kernels take
        dc = comm.create_dev_comm(CCODevCommRequirements(lsa_barrier_count=1))
        comm.barrier()

A DevComm's .struct is the device communicator kernels take by value (include/mori/device/cco.cuh).
mem_kind="host" communicators work without a GPU (host puts and gets: put/get). Failures raise
mori.MoriError with the MORI_E* code.
"""
from ..errors import MoriError  # noqa: F401
from .communicator import (Communicator, CCODevCommRequirements, DevComm, AllocatedMemory,  # noqa: F401
                           RegisteredWindow, CcoWin, GDA_CONNECTION_NONE, GDA_CONNECTION_FULL,
                           GDA_CONNECTION_CROSSNODE, GDA_CONNECTION_RAIL)
from .communicator import __all__  # noqa: F401

for _c in (Communicator, CCODevCommRequirements, DevComm, AllocatedMemory, RegisteredWindow):
    _c.__module__ = __name__
del _c
