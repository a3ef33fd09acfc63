"""Zero-copy views and the lifetime of what they view: a Group.numpy() view,
or a mori.io desc.buffer() memoryview, used after its Group was collected or left, or after its
region was deregistered or its engine closed, read unmapped memory (SIGSEGV). Now a Group view
holds its Group (the heap stays mapped while a view lives; leave() leaves at once for the Group
object, libmori's leave waits for the last view), and a buffer() view holds the registered
object, or for allocate()d memory a mapping of the pages of its own. Each case runs in a child
process so that a crash fails that case only (rc -11), not the runner; each child prints "ok"
after its last check. The bytes are computed here. Host heaps, one morid."""
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

HEAD = """
import gc, sys, time, weakref
import numpy as np
from mori import shmem, ccl, MoriError
from mori.errors import MORI_EEXIST, MORI_EINVAL, MORI_ESTALE
from mori.io import IOEngine, IOEngineConfig
rt = sys.argv[1]
def join(name):
    return shmem.join(name, 0, 1, heap_size=1 << 20, heap_kind="host", timeout_us=5000000, runtime_dir=rt)
def code_of(f):
    try:
        f()
    except MoriError as e:
        return e.code
    raise AssertionError("accepted")
"""


def child(daemon, body):
    r = subprocess.run([sys.executable, "-c", HEAD + textwrap.dedent(body), daemon.run], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT + "/python"))
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), "rc %d\n%s%s" % (r.returncode, r.stdout, r.stderr)


def test_view_outlives_its_group_object(daemon):
    """py_view_gc.py: the view returned from a function whose Group went out of scope."""
    child(daemon, """
    def make():
        g = join("pyv-gc")
        p = g.calloc(4096)
        return g.numpy(p, (4096,), np.uint8), weakref.ref(g)
    v, gref = make()
    gc.collect()
    assert gref() is not None and gref().live_views == 1  # the view holds its Group
    v[:] = np.arange(4096) % 251
    w = v[1000:1100]          # a view of the view, then only it
    del v
    gc.collect()
    assert gref() is not None and gref().live_views == 1
    assert np.array_equal(w, np.arange(1000, 1100) % 251)
    # zero-copy: the view is the heap itself, at the heap's address
    assert gref().get_bytes(w.ctypes.data, 4, 0) == bytes([1000 % 251, 1001 % 251, 1002 % 251, 1003 % 251])
    mv = memoryview(w)        # a memoryview of the numpy view holds it too
    del w
    gc.collect()
    assert bytes(mv[:3]) == bytes([1000 % 251, 1001 % 251, 1002 % 251])
    del mv
    gc.collect()
    assert gref() is None     # the last view gone: the Group is collected and leaves
    with join("pyv-gc"):      # the name is free again, so libmori's leave ran
        pass
    print("ok")
    """)


def test_leave_with_live_view(daemon):
    """py_shmem.py view_after_leave, and what docs/python.md says leave() does meanwhile."""
    child(daemon, """
    g = join("pyv-leave")
    p = g.calloc(4096)
    c = ccl.Communicator(g, scratch_bytes=1 << 16)
    v = g.numpy(p, (1024,), np.uint32)
    v[:] = np.arange(1024, dtype=np.uint32) * 3
    g.leave()
    assert g.live_views == 1
    assert np.array_equal(v, np.arange(1024, dtype=np.uint32) * 3)   # the heap is still mapped
    v[5] = 99
    assert v[5] == 99
    assert code_of(lambda: g.malloc(64)) == MORI_EINVAL               # the Group object has left
    assert code_of(lambda: g.numpy(p, 4, np.uint8)) == MORI_EINVAL    # and makes no new views
    assert code_of(c.rank) == MORI_ESTALE
    t = time.monotonic()
    c.destroy()               # not a collective of one PE: queued behind the deferred leave
    assert time.monotonic() - t < 1
    # libmori's leave waits for the view: the group still holds its name
    assert code_of(lambda: join("pyv-leave")) == MORI_EEXIST
    g.leave()                 # idempotent
    del v
    assert g.live_views == 0
    with join("pyv-leave") as g2:
        assert g2.n_pes() == 1
    print("ok")
    """)


def test_with_block_keeps_view(daemon):
    """A view kept past its with-block: the block's leave is deferred, nothing raises."""
    child(daemon, """
    with join("pyv-with") as g:
        p = g.calloc(64)
        v = g.numpy(p, (8,), np.float64)
        v[:] = 0.5
    assert v.sum() == 4.0 and g.live_views == 1
    del v
    assert g.live_views == 0
    with join("pyv-with"):
        pass
    print("ok")
    """)


def test_torch_host_view(daemon):
    """A host heap's torch view holds its Group the same way (torch.from_numpy of the numpy view).
    The VRAM path's __cuda_array_interface__ object, which torch's storage keeps, holds it too;
    that runs on the GPU machine only."""
    pytest.importorskip("torch", reason="torch not installed here: the torch view's hold is not checked")
    child(daemon, """
    import torch
    g = join("pyv-torch")
    p = g.calloc(64)
    t = g.tensor(p, (8,), torch.float32)[2:]
    t[:] = 2.0
    g.leave()
    assert g.live_views == 1 and float(t.sum()) == 12.0
    del t
    gc.collect()
    assert g.live_views == 0
    print("ok")
    """)


@pytest.mark.parametrize("how", ["deregister", "close"])
def test_buffer_after_deregister(daemon, how):
    """py_buffer_after_close.py: allocate()'s buffer() after deregister_memory / engine.close(). The
    view is a mapping of the same pages: a write through it reaches a transfer from the region."""
    child(daemon, """
    e = IOEngine("pyv-buf", IOEngineConfig(runtime_dir=rt))
    d, dst = e.allocate(1 << 20), e.allocate(1 << 20)
    mv = d.buffer()
    pat = (np.arange(1 << 20) * 7 % 256).astype(np.uint8)
    mv[:] = pat.tobytes()
    assert d.buffer() is not mv and bytes(d.buffer()[:16]) == pat[:16].tobytes()  # one mapping, shared
    e.write(d, 4096, dst, 0, 8192).result(5)
    assert bytes(dst.buffer()[:8192]) == pat[4096:4096 + 8192].tobytes()
    if "HOW" == "deregister":
        e.deregister_memory(d)
        assert code_of(d.buffer) != 0       # no new views of a deregistered region
    else:
        e.close()
    mv[0] = 2
    assert mv[0] == 2 and bytes(mv[1:16]) == pat[1:16].tobytes()
    del mv
    gc.collect()
    print("ok")
    """.replace("HOW", how))


def test_buffer_of_registered_object(daemon):
    """buffer() of a registered bytearray the caller dropped: the view holds the object, so neither
    deregister_memory nor close frees it under the view."""
    child(daemon, """
    e = IOEngine("pyv-reg", IOEngineConfig(runtime_dir=rt))
    ba = bytearray(b"%08d" % 12345678 * 512)
    d = e.register(ba)
    mv = d.buffer()
    del ba
    gc.collect()
    e.deregister_memory(d)
    e.close()
    gc.collect()
    junk = [bytearray(4096) for _ in range(256)]   # reuse of freed memory would show here
    assert bytes(mv[:16]) == b"1234567812345678" and len(mv) == 4096
    mv[0:1] = b"x"
    assert bytes(mv[:2]) == b"x2"
    print("ok")
    """)


def test_peer_heap_view(daemon):
    """A view of the neighbour's heap at its ptr_p2p address (two PEs on threads): it holds the
    Group too, so it reads the peer's bytes after both PEs left (libmori unmaps the peers' heaps at
    leave as well); an address in no mapped heap is refused."""
    child(daemon, """
    import threading
    out, errs, res = {}, [], {}
    bar = threading.Barrier(2)
    def pe(r):
        try:
            g = shmem.join("pyv-p2p", r, 2, heap_size=1 << 20, heap_kind="host", timeout_us=5000000,
                           runtime_dir=rt)
            a = g.calloc(4096)
            g.numpy(a, (512,), np.uint64)[:] = np.arange(512, dtype=np.uint64) + 1000 * r
            g.barrier_all()
            peer = g.ptr_p2p(a, 1 - r)
            assert peer and peer != a
            out[r] = g.numpy(peer, (512,), np.uint64)
            end = g.ptr_p2p(g.heap_base(), 1 - r) + g.heap_size()
            assert code_of(lambda: g.numpy(end - 4, (8,), np.uint8)) != 0  # crosses the peer heap's end
            g.barrier_all()
            g.leave()
            bar.wait()
            res[r] = out[r].copy()
        except BaseException as e:
            errs.append((r, e))
    ts = [threading.Thread(target=pe, args=(r,)) for r in (0, 1)]
    [t.start() for t in ts]
    [t.join(30) for t in ts]
    assert not errs, errs
    for r in (0, 1):
        assert np.array_equal(res[r], np.arange(512, dtype=np.uint64) + 1000 * (1 - r)), r
    out.clear()
    gc.collect()
    print("ok")
    """)
