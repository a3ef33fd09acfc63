"""mori.cco on host-memory communicators (no GPU): ranks are threads of this process, each with its
own client of one morid; every value is checked against a pattern computed here from the numbers."""
import ctypes

import numpy as np
import pytest

from mori.cco import Communicator, CCODevCommRequirements, GDA_CONNECTION_NONE, GDA_CONNECTION_CROSSNODE
from mori import MoriError, MORI_EINVAL, MORI_ESTALE

from test_shmem import run_pes, HEAP, TMO

SLOT = 1024


def pattern(frm, to, salt):
    i = np.arange(SLOT, dtype=np.uint64)
    x = (i + np.uint64(1)) * np.uint64(0x9e3779b97f4a7c15) ^ np.uint64(frm << 40 | to << 20 | salt)
    return (x >> np.uint64(17)).astype(np.uint8)


def test_communicator(daemon):
    n = 3
    uid = Communicator.get_unique_id(runtime_dir=daemon.run)
    assert isinstance(uid, bytes) and len(uid) == 128

    def rank(r):
        with Communicator.init(n, r, uid, per_rank_vmm=HEAP, timeout_us=TMO, runtime_dir=daemon.run) as comm:
            assert (comm.rank, comm.world_size) == (r, n)
            assert comm.lsa() == (n, r, 0)
            mem = comm.alloc_mem(n * SLOT)
            win = comm.register_window(mem.ptr, mem.size)
            assert win.local_ptr == mem.ptr and win.handle.bytes == n * SLOT
            comm.barrier()
            for to in range(n):
                comm.put(win, r * SLOT, pattern(r, to, 7), to)
            comm.barrier()
            mine = np.ctypeslib.as_array((ctypes.c_uint8 * (n * SLOT)).from_address(mem.ptr))
            for frm in range(n):
                assert np.array_equal(mine[frm * SLOT:(frm + 1) * SLOT], pattern(frm, r, 7))
            got = np.zeros(SLOT, np.uint8)
            comm.get(got, win, ((r + 1) % n) * SLOT, (r + 2) % n)
            assert np.array_equal(got, pattern((r + 1) % n, (r + 2) % n, 7))
            assert comm.peer_ptr(mem.ptr, (r + 1) % n) not in (None, 0)
            dc = comm.create_dev_comm(CCODevCommRequirements(lsa_barrier_count=1, gda_signal_count=8))
            assert (dc.rank, dc.world_size, dc.lsa_size, dc.lsa_rank, dc.signal_count) == (r, n, n, r, 8)
            assert dc.gda_connection_type == GDA_CONNECTION_CROSSNODE
            assert dc.check() == 0 and dc.read_signal(7) == 0
            with pytest.raises(MoriError) as e:
                comm.create_dev_comm(CCODevCommRequirements(gda_connection_type=GDA_CONNECTION_NONE,
                                                            rail_gda_barrier_count=1))
            assert e.value.code == MORI_EINVAL and "GDA connection" in str(e.value)
            comm.barrier()
        with pytest.raises(MoriError) as e:
            dc.check()
        assert e.value.code == MORI_ESTALE  # its communicator is gone
        return True

    assert run_pes(n, rank) == [True] * n
