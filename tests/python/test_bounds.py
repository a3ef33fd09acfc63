"""Sizes the Python wrappers know, checked before libmori is called:
each case used to corrupt the heap, segfault, read past a buffer or drop elements silently. Now
MoriError(MORI_EINVAL / MORI_ERANGE), nothing written, and the next collective still works.
Host heaps, PEs as threads (test_shmem.run_pes), one morid."""
import numpy as np
import pytest

from mori import ccl, shmem
from mori.errors import MORI_EINVAL, MORI_ERANGE
from mori.shmem import MoriError

from test_shmem import run_pes, HEAP, TMO


def code_of(f):
    with pytest.raises(MoriError) as e:
        f()
    return e.value.code


def test_ccl_sizes(daemon):
    n = 2

    def pe(r):
        with shmem.join("py-bounds", r, n, heap_size=HEAP, heap_kind="host", timeout_us=TMO,
                        runtime_dir=daemon.run) as g:
            with ccl.Communicator(g, scratch_bytes=256 << 10) as c:
                src = np.arange(4, dtype=np.float32) + 10 * r
                small = np.full(4, -1, np.float32)
                assert code_of(lambda: c.all_gather(src, small)) == MORI_EINVAL  # needs 8
                assert np.all(small == -1)
                assert code_of(lambda: c.all_reduce(src, small, count=1 << 22)) == MORI_EINVAL
                assert code_of(lambda: c.reduce_scatter(np.ones(8, np.float32), np.zeros(8, np.float32))) == \
                    MORI_EINVAL  # src needs 16
                assert code_of(lambda: c.all_to_all(np.ones(3, np.float32), np.zeros(3, np.float32))) == \
                    MORI_EINVAL  # 3 is not a multiple of 2
                assert code_of(lambda: c.all_to_all(np.ones(4, np.float32), np.zeros(2, np.float32))) == \
                    MORI_EINVAL
                assert code_of(lambda: c.all_reduce(src, small, op="prod")) == MORI_EINVAL
                assert code_of(lambda: c.all_to_allv(np.ones(4, np.float32), [2, 3], [0, 2], np.zeros(4, np.float32),
                                                     [2, 2], [0, 2])) == MORI_EINVAL  # 2 + 3 > 4
                # every rank refused alike: the next collectives line up and are right
                out = np.zeros(8, np.float32)
                c.all_gather(src, out)
                assert np.array_equal(out, np.concatenate([np.arange(4) + 10 * q for q in range(n)]).astype(np.float32))
                y = np.zeros(4, np.float32)
                c.all_reduce(src, y)
                assert np.array_equal(y, sum(np.arange(4, dtype=np.float32) + 10 * q for q in range(n)))
        return True

    assert run_pes(n, pe) == [True] * n


def test_shmem_sizes(daemon):
    with shmem.join("py-bounds1", 0, 1, heap_size=HEAP, heap_kind="host", timeout_us=TMO,
                    runtime_dir=daemon.run) as g:
        a = g.calloc(4096)
        b = bytearray(8)
        assert code_of(lambda: g.getmem(b, a, 0, nbytes=1 << 20)) == MORI_EINVAL
        assert code_of(lambda: g.putmem(a, b"12345678", 0, nbytes=4096)) == MORI_EINVAL
        assert code_of(lambda: g.putmem(a, b"x", 0, nbytes=-1)) == MORI_EINVAL
        g.putmem(a, b"abcdefgh", 0)
        g.getmem(b, a, 0)
        assert bytes(b) == b"abcdefgh"
        end = g.heap_base() + g.heap_size()
        assert code_of(lambda: g.numpy(end - 8, (1 << 20,), "float32")) == MORI_ERANGE
        assert code_of(lambda: g.numpy(g.heap_base() - 4096, (4,), "uint8")) == MORI_ERANGE
        v = g.numpy(end - 8, (2,), "float32")  # the last 8 bytes are fine
        assert v.shape == (2,)
        # a wrapped libmori message names the call once
        with pytest.raises(MoriError) as e:
            ccl.Communicator(g, scratch_bytes=2 * HEAP)
        assert str(e.value).count("comm create") == 1, str(e.value)


def test_join_args(daemon):
    assert code_of(lambda: shmem.join("a\x00b", 0, 1, heap_size=HEAP, runtime_dir=daemon.run)) == MORI_EINVAL
    assert code_of(lambda: shmem.join("py-bool", True, 2, heap_size=HEAP, runtime_dir=daemon.run)) == MORI_EINVAL
    uid = shmem.get_unique_id(runtime_dir=daemon.run)
    assert code_of(lambda: shmem.init_uid(uid + b"x", 0, 1, heap_size=HEAP, runtime_dir=daemon.run)) == MORI_EINVAL
    with shmem.init_uid(uid, 0, 1, heap_size=HEAP, timeout_us=TMO, runtime_dir=daemon.run) as g:
        g.barrier_all()
