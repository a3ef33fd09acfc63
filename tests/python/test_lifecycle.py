"""Who frees what, and when: the GIL is released while waiting; a dropped unfinished status
neither blocks nor cancels; deregistering a region or closing the engine settles what is still
on it; finalisers do nothing blocking at interpreter exit; a forked child cannot use (or free)
its parent's engine."""
import gc
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import mori
from mori.io import IOEngine, IOEngineConfig, MemoryDesc
from conftest import ROOT


def test_gil_released_while_waiting(daemon):
    """A thread blocked in poll_notifications (and one in a transfer wait) lets the main
    thread run Python code meanwhile."""
    with IOEngine("gil", IOEngineConfig(runtime_dir=daemon.run)) as e:
        done = []
        th = threading.Thread(target=lambda: done.append(e.poll_notifications(timeout_ms=1500)))
        t0 = time.monotonic()
        th.start()
        n = 0
        while th.is_alive() and time.monotonic() - t0 < 5:
            n += 1
        th.join()
        dt = time.monotonic() - t0
        assert done == [[]] and 1.3 < dt < 4
        assert n > 100000, "the main thread ran only %d iterations in %.2f s" % (n, dt)


def test_gil_released_in_transfer_wait(nodes):
    a, b = nodes
    with IOEngine("gil-t", IOEngineConfig(runtime_dir=b.run)) as tgt, \
            IOEngine("gil-i", IOEngineConfig(runtime_dir=a.run)) as e:
        r = tgt.allocate(1 << 20)
        tgt.publish(r, "gil/r")
        loc = e.allocate(1 << 20)
        rr = e.open_remote("gil/r", b.addr)
        e.write(loc, 0, rr, 0, 4096).result(10)
        b.proc.send_signal(signal.SIGSTOP)
        try:
            st = e.write(loc, 0, rr, 0, 1 << 20, timeout_ms=800)
            res = []
            th = threading.Thread(target=lambda: res.append(st.wait()))
            t0 = time.monotonic()
            th.start()
            n = 0
            while th.is_alive() and time.monotonic() - t0 < 5:
                n += 1
            th.join()
        finally:
            b.proc.send_signal(signal.SIGCONT)
        assert res == [True] and st.code == mori.MORI_ETIMEDOUT
        assert n > 100000


def test_dropped_status_completes(nodes):
    """Dropping an unfinished status does not cancel it: the bytes land, and the engine frees
    the handle afterwards."""
    a, b = nodes
    with IOEngine("drop-t", IOEngineConfig(runtime_dir=b.run)) as tgt, \
            IOEngine("drop-i", IOEngineConfig(runtime_dir=a.run)) as e:
        r = tgt.allocate(8 << 20)
        loc = e.allocate(8 << 20)
        src = np.frombuffer(loc.buffer(), dtype=np.uint8)
        src[:] = np.random.default_rng(5).integers(0, 256, size=8 << 20, dtype=np.uint8)
        rr = MemoryDesc.unpack(r.pack())
        e.write(loc, 0, rr, 0, 4096).result(10)  # opened, streams up
        b.proc.send_signal(signal.SIGSTOP)
        try:
            st = e.write(loc, 0, rr, 0, 8 << 20)
            assert not st.done
            del st
            gc.collect()
            assert len(e._xfers) == 1 and len(e._orphans) == 1
        finally:
            b.proc.send_signal(signal.SIGCONT)
        dst = np.frombuffer(r.buffer(), dtype=np.uint8)
        t0 = time.monotonic()
        while not np.array_equal(dst, src) and time.monotonic() - t0 < 10:
            time.sleep(0.01)
        assert np.array_equal(dst, src)
        t0 = time.monotonic()
        while e._xfers and time.monotonic() - t0 < 5:
            e.poll_notifications(timeout_ms=10)  # any engine call reaps finished orphans
        assert not e._xfers and not e._orphans


def test_deregister_and_close_settle_transfers(nodes):
    """Deregistering a region with a transfer still running on it, or closing the engine with
    transfers, lists and regions left: statuses still held report MORI_ECANCELED (or their
    result), nothing is freed twice, and the objects stay safe to use (they raise)."""
    a, b = nodes
    tgt = IOEngine("settle-t", IOEngineConfig(runtime_dir=b.run))
    rd = tgt.allocate(4 << 20)  # the desc owns the region: keep it
    r = MemoryDesc.unpack(rd.pack())
    e = IOEngine("settle-i", IOEngineConfig(runtime_dir=a.run))
    loc = e.allocate(4 << 20)
    loc2 = e.allocate(4 << 20)
    e.write(loc, 0, r, 0, 4096).result(10)
    b.proc.send_signal(signal.SIGSTOP)
    try:
        st = e.write(loc, 0, r, 0, 4 << 20)
        t0 = time.monotonic()
        e.deregister_memory(loc)
        assert time.monotonic() - t0 < 5
        assert st.done and st.code == mori.MORI_ECANCELED
        st2 = e.read(loc2, 0, r, 0, 4 << 20)
        pl = e.prepare(loc2, r, [0], [0], 4096)
        st3 = pl.write([0])
        e.close()
        assert st2.code == mori.MORI_ECANCELED and st3.code == mori.MORI_ECANCELED
        for f, args in ((e.read, (loc2, 0, r, 0, 1)), (pl.read, ([0],)), (e.allocate, (10,))):
            try:
                f(*args)
                raise AssertionError("no error from %s" % f.__name__)
            except mori.MoriError as x:
                assert x.code in (mori.MORI_EINVAL, mori.MORI_ENOENT)
        st2.close()
        pl.close()
        e.deregister_memory(loc2)
        del st, st2, st3, pl, loc, loc2
        gc.collect()
    finally:
        b.proc.send_signal(signal.SIGCONT)
    tgt.close()


EXIT_SCRIPT = r"""
import os, signal, sys, time, numpy as np
import mori
from mori.io import IOEngine, IOEngineConfig, MemoryDesc
a, b, bpid = sys.argv[1], sys.argv[2], int(sys.argv[3])
tgt = IOEngine("exit-t", IOEngineConfig(runtime_dir=b))
rd = tgt.allocate(4 << 20)
r = MemoryDesc.unpack(rd.pack())
e = IOEngine("exit-i", IOEngineConfig(runtime_dir=a))
arr = np.zeros(4 << 20, dtype=np.uint8)
loc = e.register(arr)
pl = e.prepare(loc, r, [0], [0], 4096)
e.write(loc, 0, r, 0, 4096).result(10)
os.kill(bpid, signal.SIGSTOP)
keep = [e.write(loc, 0, r, 0, 4 << 20), pl.read([0]), e.read(loc, 0, r, 0, 4 << 20)]
cycle = [keep, loc, pl, e]
cycle.append(cycle)
print("exiting", flush=True)
"""


def test_exit_with_everything_open(nodes):
    """An interpreter that exits with an engine, registrations, a prepared list and unfinished
    transfers (the peer daemon stopped, so they cannot finish) exits at once and cleanly: no
    finaliser blocks or complains."""
    a, b = nodes
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, a.run, b.run, str(b.proc.pid)], env=env,
                           capture_output=True, text=True, timeout=30)
    finally:
        b.proc.send_signal(signal.SIGCONT)
    dt = time.monotonic() - t0
    assert p.returncode == 0 and p.stdout == "exiting\n", p.stdout + p.stderr
    assert p.stderr == "", p.stderr
    assert dt < 5, "exit took %.1f s" % dt


FORK_SCRIPT = r"""
import os, sys, numpy as np
import mori
from mori.io import IOEngine, IOEngineConfig
e = IOEngine("forker", IOEngineConfig(runtime_dir=sys.argv[1]))
a = np.arange(1 << 16, dtype=np.uint8)
d = e.register(a)
d2 = e.allocate(1 << 16)
pid = os.fork()
if pid == 0:
    try:
        e.write(d, 0, d2, 0, 100)
        os._exit(3)
    except mori.MoriError as x:
        code = 0 if x.code == mori.MORI_EINVAL and "fork" in x.message else 4
    del d, d2, e   # finalisers in the child must leave the parent's session alone
    import gc; gc.collect()
    os._exit(code)
_, st = os.waitpid(pid, 0)
assert os.WEXITSTATUS(st) == 0, st
e.write(d, 0, d2, 0, 1 << 16).result(5)
assert bytes(d2.buffer()) == a.tobytes()
print("ok")
"""


def test_fork(daemon):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, "-c", FORK_SCRIPT, daemon.run], env=env, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stdout + p.stderr


def test_collected_objects_are_freed(daemon):
    """Descs, statuses and lists dropped without close are freed by their finalisers (the
    daemon's region count goes back), and a registered array outlives nothing it needs."""
    with IOEngine("gc", IOEngineConfig(runtime_dir=daemon.run)) as e:
        peer = e.allocate(1 << 20)
        for i in range(50):
            a = np.zeros(1 << 16, dtype=np.uint8)
            d = e.register(a)
            pl = e.prepare(d, peer, [0], [0], 4096)
            st = pl.write([0])
            st2 = e.read(d, 0, peer, 0, 4096)
            del a, d, pl, st, st2
        gc.collect()
        assert len(e._mems) == 1 and not e._xfers and not e._lists
        # the registration is really gone at the daemon: the same address range registers again
        a = np.zeros(1 << 16, dtype=np.uint8)
        e.register(a)


def test_dropped_engine_closes(daemon):
    """An engine dropped without close() (with a peer's region open in its cache) is closed as
    soon as its last reference goes, without waiting for the cyclic collector."""
    import weakref
    b = IOEngine("drop-b", IOEngineConfig(runtime_dir=daemon.run))
    d = b.allocate(4096)
    a = IOEngine("drop-a", IOEngineConfig(runtime_dir=daemon.run))
    loc = a.allocate(4096)
    a.write(loc, 0, MemoryDesc.unpack(d.pack()), 0, 10).result(5)
    ref = weakref.ref(a)
    gc.disable()
    try:
        del loc, a
        assert ref() is None
    finally:
        gc.enable()
    b.close()


def test_threads_share_an_engine(nodes):
    """Several threads submit and wait on one engine at once (across nodes, so waits overlap);
    every range lands where it should."""
    a, b = nodes
    with IOEngine("thr-t", IOEngineConfig(runtime_dir=b.run)) as t, \
            IOEngine("thr-i", IOEngineConfig(runtime_dir=a.run)) as e:
        region = t.allocate(8 << 20)
        r = MemoryDesc.unpack(region.pack())
        src = np.random.default_rng(3).integers(0, 256, size=8 << 20, dtype=np.uint8)
        loc = e.register(src)
        errors = []

        def worker(k):
            try:
                for i in range(25):
                    off = (k * 25 + i) * 65536
                    sts = [e.write(loc, off, r, off, 32768), e.write(loc, off + 32768, r, off + 32768, 32768)]
                    for st in sts:
                        st.result(10)
            except Exception as x:  # reported below
                errors.append(x)
        ths = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        assert not errors, errors
        got = np.frombuffer(region.buffer(), dtype=np.uint8)
        assert np.array_equal(got[:100 * 65536], src[:100 * 65536])
        assert not e._xfers
