"""Arguments the Python wrappers used to pass to libmori wrongly (second tester's defects 5, 6, 8,
13): each case here truncated an int to its C width, wrote past or into memory it must not, used
freed memory, or raised something other than MoriError. Now every one is MoriError with the
documented code (MORI_EINVAL for a wrong type or a read-only destination, MORI_ERANGE for an int
its C type cannot hold), nothing is written, and the next call still works. Host heaps, one
morid; the expected bytes are computed here."""
import ctypes
import subprocess
import sys

import numpy as np
import pytest

from mori import _lib, ccl, shmem
from mori.errors import MORI_EINVAL, MORI_EPROTO, MORI_ERANGE, MORI_ESTALE
from mori.io import IOEngine, IOEngineConfig
from mori.shmem import MoriError

from conftest import ROOT
from test_shmem import HEAP, TMO


def code_of(f):
    with pytest.raises(MoriError) as e:
        f()
    return e.value.code


def test_ival():
    """The one check every int takes on its way to C."""
    assert _lib.ival(5, "x") == 5 and _lib.ival(np.int64(7), "x", ctypes.c_int) == 7
    assert _lib.ival(2 ** 64 - 1, "x", ctypes.c_uint64) == 2 ** 64 - 1
    assert _lib.ival(-2 ** 31, "x", ctypes.c_int) == -2 ** 31
    for v, t in ((2 ** 64, ctypes.c_uint64), (-1, ctypes.c_size_t), (2 ** 31, ctypes.c_int), (2 ** 63, ctypes.c_int64),
                 (-1, ctypes.c_void_p)):
        assert code_of(lambda: _lib.ival(v, "x", t)) == MORI_ERANGE, (v, t)
    for v in (1.0, 2.5, "3", None, True, b"1", np.float32(1)):
        assert code_of(lambda: _lib.ival(v, "x")) == MORI_EINVAL, v
    # the prototype tables' wrappers: a too-wide int or a float never reaches ctypes
    lib = _lib.load()
    assert code_of(lambda: lib.mori_strerror(2 ** 32)) == MORI_ERANGE
    assert code_of(lambda: lib.mori_strerror(1.5)) == MORI_EINVAL
    assert lib.mori_strerror(-1).startswith(b"MORI_EINVAL")


def test_shmem_ints_not_truncated(daemon):
    # rank 2**32 used to join as rank 0, timeout 2**70 as 0
    assert code_of(lambda: shmem.join("pyargs-r", 2 ** 32, 1, heap_size=HEAP, runtime_dir=daemon.run)) == MORI_ERANGE
    assert code_of(lambda: shmem.join("pyargs-t", 0, 1, heap_size=HEAP, timeout_us=2 ** 70,
                                      runtime_dir=daemon.run)) == MORI_ERANGE
    for kw in (dict(heap_size="big"), dict(heap_size=-1), dict(gpu_device="x"), dict(heap_size=4.0 * HEAP)):
        assert code_of(lambda: shmem.join("pyargs-k", 0, 1, runtime_dir=daemon.run, **kw)) in (MORI_EINVAL, MORI_ERANGE)
    assert code_of(lambda: shmem.join("pyargs-f", 0.5, 1, heap_size=HEAP, runtime_dir=daemon.run)) == MORI_EINVAL
    with shmem.join("pyargs", 0, 1, heap_size=HEAP, heap_kind="host", timeout_us=TMO, runtime_dir=daemon.run) as g:
        used = g.calloc(4096)
        # malloc(2**64 + 4096) used to return a 4096-byte object
        assert code_of(lambda: g.malloc(2 ** 64 + 4096)) == MORI_ERANGE
        assert code_of(lambda: g.malloc(1.5)) == MORI_EINVAL
        assert code_of(lambda: g.malloc("10")) == MORI_EINVAL
        assert code_of(lambda: g.malloc(-1)) == MORI_ERANGE
        g.putmem(used, b"\0" * 8, 0)
        # a put to PE 2**32 used to land at PE 0; getmem of 2**64 + 8 bytes moved 8
        assert code_of(lambda: g.putmem(used, b"abcd", 2 ** 32)) == MORI_ERANGE
        assert code_of(lambda: g.putmem(used, b"abcd", "0")) == MORI_EINVAL
        assert code_of(lambda: g.putmem(used, 12.5, 0)) == MORI_EINVAL
        assert code_of(lambda: g.getmem(used + 8, used, 0, nbytes=2 ** 64 + 8)) == MORI_ERANGE
        assert code_of(lambda: g.getmem(np.zeros(16, np.uint8)[::2], used, 0)) == MORI_EINVAL
        assert code_of(lambda: g.getmem("abc", used, 0)) == MORI_EINVAL
        assert g.get_bytes(used, 8, 0) == b"\0" * 8  # nothing was written
        assert code_of(lambda: g.numpy(used, (4,), "no-such-dtype")) == MORI_EINVAL
        assert code_of(lambda: g.numpy(used, "x", "uint8")) == MORI_EINVAL
        assert code_of(lambda: g.ptr_p2p(used, "x")) == MORI_EINVAL
        assert code_of(lambda: g.ptr_p2p(2.0, 0)) == MORI_EINVAL
        # the same calls with sound arguments still work (numpy ints are ints)
        g.putmem(used, b"abcd", np.int32(0))
        assert g.get_bytes(used, 4, 0) == b"abcd"
        assert g.numpy(used, (np.int64(4),), "uint8").tobytes() == b"abcd"


def test_ccl_args(daemon):
    with shmem.join("pyargs-c", 0, 1, heap_size=8 << 20, heap_kind="host", timeout_us=TMO,
                    runtime_dir=daemon.run) as g:
        assert code_of(lambda: ccl.Communicator(g, scratch_bytes="x")) == MORI_EINVAL
        assert code_of(lambda: ccl.Communicator(g, scratch_bytes=-256)) == MORI_ERANGE
        assert code_of(lambda: ccl.Communicator(object())) == MORI_EINVAL
        with ccl.Communicator(g, scratch_bytes=1 << 20) as c:
            x = np.arange(8, dtype=np.float32)
            y = np.zeros(8, np.float32)
            for f in (lambda: c.all_reduce([1.0, 2.0], y), lambda: c.all_reduce(x, y, count=2.5),
                      lambda: c.all_reduce(x, y, dtype="float64"), lambda: c.all_reduce(x, y, op=None),
                      lambda: c.all_reduce(x, y, op=[1]), lambda: c.all_reduce(x, y, stream="s"),
                      lambda: c.broadcast(x, y, root="0"), lambda: c.broadcast(x, y, root=1.0),
                      lambda: c.all_to_allv(x, [8], [0], y, None, [0]), lambda: c.all_to_allv(x, [8.0], [0], y, [8], [0]),
                      lambda: c.register_window("a", 8), lambda: c.deregister_window(12345),
                      lambda: c.set_algo(None), lambda: c.algo("allreduce", 1.5), lambda: c.algo(None, 8),
                      lambda: c.algo("bogus", 1)):  # libmori's refusal raised, not None
                assert code_of(f) == MORI_EINVAL
            assert code_of(lambda: c.all_reduce(x, y, count=2 ** 64)) == MORI_ERANGE
            assert code_of(lambda: c.algo("allreduce", -1)) == MORI_ERANGE
            assert code_of(lambda: c.broadcast(x, y, root=2 ** 32)) == MORI_ERANGE
            assert not y.any()
            c.all_reduce(x, y)  # still lined up
            assert np.array_equal(y, x)


@pytest.mark.parametrize("case", ["allreduce", "allgather", "broadcast", "a2av", "reduce_scatter", "all_to_all"])
def test_ccl_dtype_mix(daemon, case):
    """A float32 src and a uint8 dst of as many elements: the call ran in float32 and wrote 4x the
    dst's bytes. Now MORI_EINVAL unless dtype= says how to read both; with it, sizes are checked
    in that dtype's elements (bytes), so the same dst is too small for a float32 count."""
    with shmem.join("pymix-" + case, 0, 1, heap_size=8 << 20, heap_kind="host", timeout_us=TMO,
                    runtime_dir=daemon.run) as g:
        with ccl.Communicator(g, scratch_bytes=1 << 20) as c:
            n = 1 << 12
            src = np.ones(n, np.float32)
            whole = np.zeros(4 * n, np.uint8)
            dst = whole[:n]  # n uint8 elements; the rest of whole is a canary
            call = {"allreduce": lambda **kw: c.all_reduce(src, dst, **kw),
                    "allgather": lambda **kw: c.all_gather(src, dst, **kw),
                    "broadcast": lambda **kw: c.broadcast(src, dst, **kw),
                    "a2av": lambda **kw: c.all_to_allv(src, [n], [0], dst, [n], [0], **kw),
                    "reduce_scatter": lambda **kw: c.reduce_scatter(src, dst, **kw),
                    "all_to_all": lambda **kw: c.all_to_all(src, dst, **kw)}[case]
            with pytest.raises(MoriError) as e:
                call()
            assert e.value.code == MORI_EINVAL and "float32" in e.value.message and "uint8" in e.value.message
            if case != "reduce_scatter":  # dtype=float32: dst holds n / 4 of them, the call needs n
                assert code_of(lambda: call(dtype="float32")) == MORI_EINVAL
            assert not whole.any(), "%d bytes written" % np.count_nonzero(whole)
            # the same bytes, one dtype, and the call is right
            out = np.zeros(4 * n, np.uint8)
            c.broadcast(src.view(np.uint8), out)
            assert np.array_equal(out, src.view(np.uint8))


def test_ccl_readonly_dst(daemon):
    with shmem.join("pyro", 0, 1, heap_size=8 << 20, heap_kind="host", timeout_us=TMO, runtime_dir=daemon.run) as g:
        with ccl.Communicator(g, scratch_bytes=1 << 20) as c:
            frozen = bytes(64)
            dst = np.frombuffer(frozen, np.float32)
            assert not dst.flags.writeable
            with pytest.raises(MoriError) as e:
                c.all_reduce(np.full(16, 7, np.float32), dst)
            assert e.value.code == MORI_EINVAL and "read-only" in e.value.message
            assert frozen == bytes(64)
            ro = np.zeros(16, np.float32)
            ro.flags.writeable = False
            assert code_of(lambda: c.all_gather(np.ones(16, np.float32), ro)) == MORI_EINVAL
            assert not ro.any()
            src = np.ones(16, np.float32)
            src.flags.writeable = False  # a read-only source is fine
            y = np.zeros(16, np.float32)
            c.all_reduce(src, y)
            assert np.array_equal(y, src)


@pytest.mark.parametrize("mode", ["reduce", "destroy", "both"])
def test_comm_after_leave(daemon, mode):
    """A Communicator used or destroyed after its Group left: libmori read the freed group (a
    segfault, or a bogus MORI_ESTALE from freed memory). Run in a child so that a crash fails this
    case only; with MORI_LIB pointing at an ASan libmori this is the use-after-free check."""
    code = """
import sys, numpy as np
from mori import shmem, ccl
from mori.errors import MORI_ESTALE
g = shmem.join("py-ual-%(mode)s", 0, 1, heap_size=8 << 20, heap_kind="host", timeout_us=5000000,
               runtime_dir=sys.argv[1])
c = ccl.Communicator(g, scratch_bytes=1 << 20)
w = ccl.Communicator(g, scratch_bytes=1 << 20)
g.leave()
if "%(mode)s" in ("reduce", "both"):
    for f in (lambda: c.all_reduce(np.ones(4, np.float32), np.zeros(4, np.float32)), c.check, c.rank):
        try:
            f()
            print("accepted")
            sys.exit(1)
        except shmem.MoriError as e:
            assert e.code == MORI_ESTALE and "left" in e.message, e
if "%(mode)s" in ("destroy", "both"):
    c.destroy()
    c.destroy()
w.destroy()  # the last one frees the group's shell
g.leave()    # idempotent
print("ok")
""" % {"mode": mode}
    r = subprocess.run([sys.executable, "-c", code, daemon.run], capture_output=True, text=True, timeout=60,
                       env=dict(__import__("os").environ, PYTHONPATH=ROOT + "/python"))
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_io_ints_not_truncated(daemon):
    e = IOEngine("pyargs-io", IOEngineConfig(runtime_dir=daemon.run))
    try:
        src, dst = e.allocate(4096), e.allocate(4096)
        src.buffer()[:8] = b"ABCDEFGH"
        # offset 2**64 + 16 used to write at offset 16; allocate(2**64 + 4096) made 4096 bytes
        assert code_of(lambda: e.write(src, 0, dst, 2 ** 64 + 16, 8)) == MORI_ERANGE
        assert code_of(lambda: e.allocate(2 ** 64 + 4096)) == MORI_ERANGE
        assert code_of(lambda: e.allocate(4096.0)) == MORI_EINVAL
        assert code_of(lambda: e.write(src, 0, dst, 16.0, 8)) == MORI_EINVAL
        assert code_of(lambda: e.write(src, 0, dst, 16, 8, transfer_uid=2 ** 64)) == MORI_ERANGE
        assert code_of(lambda: e.write(src, [0], dst, [2 ** 64 + 16], [8])) == MORI_ERANGE
        assert code_of(lambda: e.write(src, [0], dst, [16.5], [8])) == MORI_EINVAL
        assert code_of(lambda: e.write(src, [0, 8], dst, [16, 24], 2 ** 64)) == MORI_ERANGE
        assert code_of(lambda: e.write(src, [0], dst, [16], [True])) == MORI_EINVAL
        pl = e.prepare(src, dst, [0, 8], [16, 24], 8)
        assert code_of(lambda: pl.write([1.0])) == MORI_EINVAL
        assert code_of(lambda: pl.write([2 ** 32])) == MORI_ERANGE
        assert bytes(dst.buffer()[:32]) == bytes(32)  # nothing was written
        e.write(src, np.uint64(0), dst, np.int64(16), 8).result(5)  # numpy ints are ints
        assert bytes(dst.buffer()[16:24]) == b"ABCDEFGH"
    finally:
        e.close()


def test_errors_are_documented_moerror(daemon):
    """docs/python.md: every failure is a MoriError; it subclasses Exception only."""
    assert MoriError.__mro__[1:] == (Exception, BaseException, object)


def test_wrong_arguments_are_moerror(daemon):
    """Third tester's D7: arguments that raised TypeError, OverflowError, ValueError or MemoryError,
    or were silently taken (timeout NaN as the default, notify="hello" as True)."""
    from mori.io import EngineDesc, MemoryDesc, StatusCode
    nan, inf = float("nan"), float("inf")
    e = IOEngine("pyargs-d7", IOEngineConfig(runtime_dir=daemon.run))
    try:
        src, dst = e.allocate(4096), e.allocate(4096)
        for b in ("abc", 3, None, 2.5):  # bytes(3) was 3 zero bytes, bytes("abc") a TypeError
            assert code_of(lambda: MemoryDesc.unpack(b)) == MORI_EINVAL, b
            assert code_of(lambda: EngineDesc.unpack(b)) == MORI_EINVAL, b
        assert MemoryDesc.unpack(bytearray(dst.pack())) == dst  # any bytes-like object is fine
        assert MemoryDesc.unpack(memoryview(dst.pack())) == dst
        for t, want in ((nan, MORI_EINVAL), (inf, MORI_ERANGE), (-inf, MORI_ERANGE), ("5", MORI_EINVAL),
                        (True, MORI_EINVAL), (1e30, MORI_ERANGE)):
            assert code_of(lambda: e.write(src, 0, dst, 0, 8, timeout_ms=t)) == want, t
            assert code_of(lambda: e.poll_notifications(timeout_ms=t)) == want, t
            assert code_of(lambda: e.wait_all([], timeout_ms=t)) == want, t
        for n in ("hello", 2, -1, 2 ** 64, 1.0):
            assert code_of(lambda: e.write(src, 0, dst, 0, 8, notify=n)) == MORI_EINVAL, n
        assert code_of(lambda: e.poll_notifications(max="x")) == MORI_EINVAL
        with IOEngine("pyargs-d7b", IOEngineConfig(runtime_dir=daemon.run, timeout_ms=nan)) as e2:
            assert code_of(lambda: e2.write(e2.allocate(64), 0, dst, 0, 8)) == MORI_EINVAL  # the config's too
        st = e.write(src, 0, dst, 0, 8, notify=np.bool_(False), timeout_ms=np.float64(2000.5))
        # a finished transfer still checks its timeout argument (it used to return early)
        assert st.wait(5)
        for t, want in ((nan, MORI_EINVAL), (inf, MORI_ERANGE), ("x", MORI_EINVAL)):
            assert code_of(lambda: st.wait(t)) == want, t
            assert code_of(lambda: st.result(t)) == want, t
            assert code_of(lambda: st.WaitFor(t)) == want, t
        st.result(np.float32(1.5))
        assert e.write(src, 0, dst, 0, 8, notify=1, timeout_ms=500).result(5) is None
        assert e.wait_all([st], timeout_ms=-1) == StatusCode.SUCCESS
        # not statuses: MoriError naming the item, not AttributeError
        for bad in ([1, 2, 3], [st, "x"], [None]):
            assert code_of(lambda: e.wait_all(bad)) == MORI_EINVAL, bad
        # a packed desc with bytes past its end says so, not "truncated"; a cut one says truncated
        pk = dst.pack()
        for blob, why in ((pk + b"xx", "2 bytes past its end"), (pk[:-1], "truncated")):
            with pytest.raises(MoriError) as x:
                MemoryDesc.unpack(blob)
            assert x.value.code == MORI_EPROTO and why in x.value.message, (why, x.value)
    finally:
        e.close()
    with shmem.join("pyargs-d7", 0, 1, heap_size=HEAP, heap_kind="host", timeout_us=TMO, runtime_dir=daemon.run) as g:
        p = g.calloc(64)
        assert code_of(lambda: g.get_bytes(p, 2 ** 40, 0)) == MORI_ERANGE  # was MemoryError: never allocated now
        assert code_of(lambda: g.get_bytes(p, g.heap_size() + 1, 0)) == MORI_ERANGE
        assert code_of(lambda: g.get_bytes(p, g.heap_size(), 0)) == MORI_ERANGE  # from p, it leaves the heap
        for dt in (object, [("a", np.int32), ("b", object)], "V0"):  # object was numpy's ValueError
            assert code_of(lambda: g.numpy(p, (4,), dt)) == MORI_EINVAL, dt
        assert g.live_views == 0  # refused views left no count behind
        assert g.numpy(p, (2,), "<u4").tolist() == [0, 0]
