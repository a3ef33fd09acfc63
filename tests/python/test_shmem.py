"""mori.shmem on host heaps (no GPU): PEs are threads of this process, each with its own client of
one morid (ctypes releases the GIL in the collective calls, so they meet); the values each PE
checks are computed here from the ranks, independently of what the library returned."""
import threading

import numpy as np
import pytest

import mori
from mori import shmem
from mori.shmem import MoriError

HEAP = 4 << 20
TMO = 10_000_000  # 10 s: a broken collective fails the test instead of hanging it


def run_pes(n, fn, timeout=60):
    """fn(rank) on n threads at once; returns their results in rank order, re-raising the first
    failure (with its rank)."""
    res, errs = [None] * n, [None] * n

    def body(r):
        try:
            res[r] = fn(r)
        except BaseException as e:  # noqa: B902 - reported below with its rank
            errs[r] = e
    ts = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
        assert not t.is_alive(), "a PE did not finish within %d s" % timeout
    for r, e in enumerate(errs):
        if e is not None:
            raise AssertionError("PE %d: %r" % (r, e)) from e
    return res


def pattern(rank, n):
    """What PE rank writes into its own block: distinct per rank and per word."""
    return (np.arange(n, dtype=np.uint64) * 1000003 + rank * 7919 + 1).astype(np.uint64)


def test_ring_and_p2p(daemon):
    n, words = 4, 512

    def pe(r):
        with shmem.join("py-ring", r, n, heap_size=HEAP, heap_kind="host", timeout_us=TMO,
                        runtime_dir=daemon.run) as g:
            assert (g.my_pe(), g.n_pes()) == (r, n)
            assert g.team_node() == list(range(n))
            assert g.heap_size() >= HEAP and g.heap_base() != 0
            a = g.calloc(words * 8)
            off = g.offset(a)
            assert off >= shmem.RESERVED and off % 256 == 0
            own = g.numpy(a, words, np.uint64)
            assert not own.any(), "calloc left nonzero bytes"
            own[:] = pattern(r, words)
            g.barrier_all()
            # direct loads of every peer's copy through ptr_p2p (host heaps are mapped on one node)
            for p in range(n):
                pa = g.ptr_p2p(a, p)
                assert pa is not None, "PE %d not mapped" % p
                got = shmem.numpy_view(pa, words, np.uint64)
                np.testing.assert_array_equal(got, pattern(p, words))
            assert g.ptr_p2p(g.heap_base() + g.heap_size() + 64, 0) is None  # outside the heap
            assert g.ptr_p2p(a, n) is None  # PE out of range
            # a put around the ring into a second object, then a get back
            b = g.calloc(words * 8)
            assert g.offset(b) > off
            g.putmem(b, own, (r + 1) % n)
            g.barrier_all()
            np.testing.assert_array_equal(g.numpy(b, words, np.uint64), pattern((r - 1) % n, words))
            got = g.get_bytes(a, words * 8, (r + 2) % n)
            np.testing.assert_array_equal(np.frombuffer(got, np.uint64), pattern((r + 2) % n, words))
            g.barrier_all()
            g.free(b)
            g.free(a)
            # freed space comes back at the same offset on every PE
            c = g.malloc(64)
            return off, g.offset(c)

    offs = run_pes(n, pe)
    assert len(set(offs)) == 1, "PEs got different offsets: %r" % (offs,)
    assert offs[0][0] == offs[0][1]


def test_unique_id(daemon):
    uid = shmem.get_unique_id(runtime_dir=daemon.run)
    assert isinstance(uid, bytes) and 0 < len(uid) <= shmem.UID_BYTES

    def pe(r):
        g = shmem.init_uid(uid, r, 2, heap_size=HEAP, timeout_us=TMO, runtime_dir=daemon.run)
        try:
            x = g.calloc(16)
            g.putmem(x, np.array([r + 40, r + 50], np.uint64), 1 - r)
            g.barrier_all()
            out = list(g.numpy(x, 2, np.uint64)), g.status()
            g.barrier_all()  # nobody leaves (tearing the group down) before both have looked
            return out
        finally:
            g.leave()
    res = run_pes(2, pe)
    assert res[0] == ([41, 51], (0, -1)) and res[1] == ([40, 50], (0, -1))


def test_errors(daemon):
    with pytest.raises(MoriError) as e:
        shmem.join("py-bad", 0, 1, heap_kind="floppy", runtime_dir=daemon.run)
    assert e.value.code == mori.MORI_EINVAL
    with pytest.raises(MoriError) as e:
        shmem.init_uid(b"", 0, 1, runtime_dir=daemon.run)
    assert e.value.code == mori.MORI_EINVAL
    # a join whose peer never comes: the deadline, naming it
    with pytest.raises(MoriError) as e:
        shmem.join("py-lonely", 0, 2, heap_size=HEAP, timeout_us=300_000, runtime_dir=daemon.run)
    assert e.value.code == mori.MORI_ETIMEDOUT and "1" in e.value.message

    def pe(r):
        g = shmem.join("py-err", r, 2, heap_size=HEAP, timeout_us=TMO, runtime_dir=daemon.run)
        out = {}
        # PEs that disagree on a collective allocation: MORI_EINVAL on both, nothing allocated
        try:
            g.malloc(64 * (r + 1))
        except MoriError as x:
            out["mismatch"] = x.code
        try:
            g.putmem(g.heap_base() + g.heap_size() - 8, b"0123456789abcdef", 1 - r)
        except MoriError as x:
            out["range"] = x.code
        for what, f in (("stream", lambda: g.barrier_on_stream(0)), ("quiet", lambda: g.quiet_on_stream(None)),
                        ("module", lambda: g.module_init(0x1234))):
            try:
                f()
            except MoriError as x:
                out[what] = x.code
        with pytest.raises(MoriError):
            g.offset(8)
        g.barrier_all()
        g.leave()
        g.leave()  # idempotent
        try:
            g.my_pe()
        except MoriError as x:
            out["left"] = x.code
        return out
    for out in run_pes(2, pe):
        assert out == {"mismatch": mori.MORI_EINVAL, "range": mori.MORI_ERANGE, "stream": mori.MORI_ENOTSUP,
                       "quiet": mori.MORI_ENOTSUP, "module": mori.MORI_ENOTSUP, "left": mori.MORI_EINVAL}, out


def test_long_names(daemon):
    """Every group name the C API takes (1..127 bytes) joins from Python, at any rank: the client's
    label (64 bytes at most) is shortened, not refused (a 56-byte name failed at rank 0, a 55-byte
    one at rank 10 while rank 9 waited); a 128-byte name gets the group name's own refusal."""
    for rank, world in ((0, 1), (123456, 123457)):
        lab = shmem._pe_label("\u00e9" * 63 + "x", rank)  # 127 bytes, multibyte: cut on a character
        assert len(lab.encode()) <= 63 and lab.endswith("...:%d" % rank) and lab.startswith("shmem:"), lab
    for n in (55, 56, 100, 127):
        name = ("%d-" % n + "n" * n)[:n]

        def pe(r):
            with shmem.join(name, r, 2, heap_size=HEAP, timeout_us=TMO, runtime_dir=daemon.run) as g:
                return (g.my_pe(), g.n_pes())
        assert run_pes(2, pe) == [(0, 2), (1, 2)], n
    with pytest.raises(MoriError) as e:
        shmem.join("n" * 128, 0, 1, heap_size=HEAP, runtime_dir=daemon.run)
    assert e.value.code == mori.MORI_EINVAL and "client name" not in e.value.message, e.value


def test_views(daemon):
    """The zero-copy views: the __cuda_array_interface__ object describes the bytes asked for; a
    host heap's torch view (when torch is here) aliases the heap."""
    buf = shmem._CudaBuffer(0x7f0000001000, 4096)
    cai = buf.__cuda_array_interface__
    assert cai["data"] == (0x7f0000001000, False) and cai["shape"] == (4096,) and cai["version"] == 3
    with shmem.join("py-view", 0, 1, heap_size=HEAP, runtime_dir=daemon.run) as g:
        a = g.calloc(1024)
        v = g.numpy(a, (16, 16), np.float32)
        v[3, 4] = 2.5
        assert shmem.numpy_view(a + (3 * 16 + 4) * 4, 1, np.float32)[0] == 2.5
        torch = pytest.importorskip("torch", reason="torch not installed here: the torch view is not checked")
        t = g.tensor(a, (16, 16), torch.float32)
        assert t.data_ptr() == a and t[3, 4].item() == 2.5
        t[0, 0] = 7.0
        assert v[0, 0] == 7.0
        with pytest.raises(MoriError):
            g.tensor(a + 2, 4, torch.float32)  # misaligned
