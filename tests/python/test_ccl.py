"""mori.ccl on host heaps (no GPU): PEs are threads of this process, each with its own client of one
morid; every result is checked against numpy computed here from all ranks' inputs."""
import numpy as np
import pytest

from mori import ccl, shmem
from mori.shmem import MoriError

from test_shmem import run_pes, HEAP, TMO


def inputs(r, n, count, dtype):
    rng = np.random.default_rng(1000 + r)
    return (rng.integers(-1000, 1000, size=n * count) / 64.0).astype(dtype)


@pytest.mark.parametrize("n", [1, 3])
def test_collectives(daemon, n):
    count = 1023

    def pe(r):
        with shmem.join("py-ccl-%d" % n, r, n, heap_size=HEAP, heap_kind="host", timeout_us=TMO,
                        runtime_dir=daemon.run) as g:
            with ccl.Communicator(g, scratch_bytes=256 << 10) as c:
                assert (c.rank(), c.size()) == (r, n)
                x = inputs(r, n, count, np.float32)
                allx = [inputs(q, n, count, np.float32) for q in range(n)]
                y = np.zeros(count, np.float32)
                c.all_reduce(x[:count], y)
                ref = allx[0][:count].copy()
                for q in range(1, n):
                    ref = ref + allx[q][:count]
                assert np.array_equal(y, ref)
                c.all_reduce(x[:count], y, op="max")
                assert np.array_equal(y, np.max([a[:count] for a in allx], axis=0))
                o = np.zeros(n * count, np.float32)
                ccl.AllgatherSdma(c)(x[:count], o, count)
                assert np.array_equal(o, np.concatenate([a[:count] for a in allx]))
                rs = np.zeros(count, np.float32)
                c.reduce_scatter(x, rs)
                assert np.array_equal(rs, sum(a[r * count:(r + 1) * count] for a in allx[1:]) +
                                      allx[0][r * count:(r + 1) * count]) or n == 1
                a2a = np.zeros(n * count, np.float32)
                c.all_to_all(x, a2a)
                assert np.array_equal(a2a, np.concatenate([a[r * count:(r + 1) * count] for a in allx]))
                b = np.zeros(count, np.float32)
                c.broadcast(x[:count], b, root=n - 1)
                assert np.array_equal(b, allx[n - 1][:count])
                with pytest.raises(MoriError) as e:
                    c.all_reduce(np.zeros(4, np.uint8), np.zeros(4, np.uint8), op="max")
                assert e.value.code == -1
        return True

    assert run_pes(n, pe) == [True] * n
