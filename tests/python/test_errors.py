"""Every error path of mori.io raises mori.MoriError with the right MORI_E* code and a message;
a transfer's own failure is its status's (code, message, error) and result() raises it."""
import os
import re
import signal
import time

import numpy as np
import pytest

import mori
from mori.io import IOEngine, IOEngineConfig, MemoryDesc, MemoryLocationType, StatusCode
from conftest import ROOT, Daemon, free_port



def raises(code, fn, *a, **kw):
    with pytest.raises(mori.MoriError) as ei:
        fn(*a, **kw)
    e = ei.value
    assert e.code == code, "expected %s, got %s: %s" % (mori.code_name(code), e.name, e.message)
    assert e.name == mori.code_name(code) and isinstance(e.message, str)
    assert str(e).startswith(e.name)
    return e


def fails(code, submit):
    """A transfer that fails with `code`, either at submission or as its status."""
    try:
        st = submit()
    except mori.MoriError as e:
        assert e.code == code, "submission: expected %s, got %s (%s)" % (mori.code_name(code), e.name, e.message)
        return e
    assert st.wait(10)
    assert st.code == code, "status: expected %s, got %s (%s)" % (mori.code_name(code), mori.code_name(st.code),
                                                                   st.message)
    assert st.Failed() and st.error.code == code and st.message
    with pytest.raises(mori.MoriError) as ei:
        st.result(1)
    assert ei.value.code == code
    return st.error


def test_codes_match_the_header():
    """mori.Code is enum mori_err of include/mori_types.h (every code: the C check asserts only the
    ones Python has), and libmori names each code the same."""
    hdr = open(os.path.join(ROOT, "include", "mori_types.h")).read()
    enum = re.search(r"enum mori_err \{(.*?)\}", hdr, re.S).group(1)
    pairs = dict((n, int(v)) for n, v in re.findall(r"MORI_(\w+)\s*=\s*(-?\d+)", enum))
    assert pairs == {c.name: int(c) for c in mori.Code}
    for c in mori.Code:
        assert mori.strerror(c).startswith("MORI_" + c.name)
        assert getattr(mori, "MORI_" + c.name) == int(c)
    e = mori.MoriError(mori.MORI_ETIMEDOUT, "x")
    assert repr(e) == "MoriError(MORI_ETIMEDOUT, 'x')" and e.name == "MORI_ETIMEDOUT"
    import pickle
    assert pickle.loads(pickle.dumps(e)).code == mori.MORI_ETIMEDOUT


def test_version():
    mk = open(os.path.join(ROOT, "Makefile")).read()
    want = re.search(r"^VERSION\s*:=\s*(\S+)", mk, re.M).group(1)
    assert mori.__version__ == want == mori.lib_version()


def test_library_not_found(tmp_path):
    """A MORI_LIB that does not load: MORI_ENOENT naming it (in a fresh interpreter)."""
    import subprocess
    import sys
    code = ("import mori, mori.io\n"
            "try:\n mori.io.IOEngine('x')\n"
            "except mori.MoriError as e:\n print(e.name, 'nowhere.so' in e.message)\n")
    env = dict(os.environ, MORI_LIB=str(tmp_path / "nowhere.so"), PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "MORI_ENOENT True", out.stdout + out.stderr


def test_no_daemon(tmp_path):
    e = raises(mori.MORI_ECONN, IOEngine, "x", IOEngineConfig(runtime_dir=str(tmp_path)))
    assert str(tmp_path) in e.message


def have_gpu(e):
    """Whether libmori can allocate VRAM here (MORI_ENOGPU: no GPU runtime or device)."""
    try:
        e.deregister_memory(e.allocate(1 << 20, MemoryLocationType.GPU))
        return True
    except mori.MoriError as x:
        if x.code == mori.MORI_ENOGPU:
            return False
        raise


def test_registration_errors(daemon):
    with IOEngine("reg", IOEngineConfig(runtime_dir=daemon.run)) as e:
        HAVE_GPU = have_gpu(e)
        a = np.zeros(1 << 16, dtype=np.uint8)
        raises(mori.MORI_EINVAL, e.register, b"read-only bytes")
        raises(mori.MORI_EINVAL, e.register, np.zeros(0, dtype=np.uint8))
        raises(mori.MORI_EINVAL, e.register, np.zeros((64, 64))[:, ::2])
        ro = np.zeros(64)
        ro.flags.writeable = False
        raises(mori.MORI_EINVAL, e.register, ro)
        raises(mori.MORI_EINVAL, e.register, 12345)
        raises(mori.MORI_EINVAL, e.register_memory, 0, 4096)
        raises(mori.MORI_EINVAL, e.register_memory, a.ctypes.data, 0)
        raises(mori.MORI_EINVAL, e.register_memory, a.ctypes.data, 4096, -1, "disk")
        raises(mori.MORI_EINVAL, e.register_torch_tensor, a)
        d = e.register(a)
        raises(mori.MORI_EBUSY, e.register, a)
        raises(mori.MORI_EBUSY, e.register, a[100:200])
        # a host pointer as GPU memory: refused (MORI_EINVAL; without a GPU runtime MORI_ENOGPU)
        raises(mori.MORI_EINVAL if HAVE_GPU else mori.MORI_ENOGPU, e.register_memory, a.ctypes.data + 65536 - 4096,
               0 or 4096, 0, MemoryLocationType.GPU)
        if not HAVE_GPU:
            raises(mori.MORI_ENOGPU, e.allocate, 4096, MemoryLocationType.GPU)
        raises(mori.MORI_EINVAL, e.allocate, 0)
        # a bytearray cannot be resized while registered, and can once deregistered
        b = bytearray(4096)
        db = e.register(b)
        with pytest.raises(BufferError):
            b.extend(b"x")
        e.deregister_memory(db)
        del db
        import gc
        gc.collect()
        b.extend(b"x")
        # names
        e.publish(d, "reg/a")
        d2 = e.allocate(4096)
        raises(mori.MORI_EEXIST, e.publish, d2, "reg/a")
        raises(mori.MORI_EINVAL, e.publish, d2, "")
        raises(mori.MORI_EUNREACH, e.open_remote, "reg/nobody")
        e.deregister_memory(d)
        raises(mori.MORI_ENOENT, e.publish, d, "reg/b")
        raises(mori.MORI_ENOENT, e.write, d, 0, d2, 0, 1)
        e.deregister_memory(d)  # idempotent
    raises(mori.MORI_EINVAL, e.allocate, 4096)  # closed engine
    e.close()  # idempotent


def test_descriptor_errors(daemon):
    with IOEngine("desc", IOEngineConfig(runtime_dir=daemon.run)) as e:
        raises(mori.MORI_EPROTO, MemoryDesc.unpack, b"junk")
        raises(mori.MORI_EPROTO, MemoryDesc.unpack, b"MORIMD1\x01")
        loc = e.allocate(1 << 20)
        far = IOEngine("desc-far", IOEngineConfig(runtime_dir=daemon.run))
        r = far.allocate(1 << 16)
        rd = MemoryDesc.unpack(r.pack())
        bad = MemoryDesc.unpack(r.pack())
        bad.blob = b"\x00" + bad.blob[1:]
        raises(mori.MORI_EPROTO, e.read, loc, 0, bad, 0, 10)
        bad.blob = r.blob[:6]
        raises(mori.MORI_EPROTO, e.read, loc, 0, bad, 0, 10)
        # ranges and lengths
        raises(mori.MORI_ERANGE, e.write, loc, 0, rd, (1 << 16) - 10, 11)
        raises(mori.MORI_ERANGE, e.read, loc, (1 << 20) - 1, rd, 0, 2)
        raises(mori.MORI_ERANGE, e.read, loc, -1, rd, 0, 2)
        raises(mori.MORI_EINVAL, e.write, loc, 0, rd, 0, 0)
        raises(mori.MORI_EINVAL, e.batch_read, [loc], [[]], [rd], [[]], [[]])
        raises(mori.MORI_EINVAL, e.batch_read, [loc], [[0, 1]], [rd], [[0]], [[1]])
        raises(mori.MORI_EINVAL, e.batch_read, [loc, loc], [[0]], [rd], [[0]], [[1]])
        raises(mori.MORI_ERANGE, e.batch_write, [loc], [[0, 10]], [rd], [[0, 1 << 16]], [[1, 1]])
        raises(mori.MORI_ERANGE, e.batch_write, [loc], [[0, -10]], [rd], [[0, 0]], [[1, 1]])
        raises(mori.MORI_EINVAL, e.batch_descs, "COPY", loc, rd, np.zeros((1, 3), dtype=np.uint64))
        raises(mori.MORI_EINVAL, e.batch_descs, "READ", loc, rd, np.zeros((1, 2), dtype=np.uint64))
        raises(mori.MORI_EINVAL, e.read, rd, 0, loc, 0, 1)  # local side must be this engine's
        raises(mori.MORI_EINVAL, e.read, "x", 0, loc, 0, 1)
        # prepared lists
        pl = e.prepare(loc, rd, [0, 4096], [0, 4096], 4096)
        assert len(pl) == 2
        raises(mori.MORI_ERANGE, pl.read, [2])
        raises(mori.MORI_ERANGE, pl.read, [-1])
        raises(mori.MORI_EINVAL, pl.read, [])
        pl.read([0, 1]).result(5)
        pl.close()
        raises(mori.MORI_ENOENT, pl.read, [0])
        raises(mori.MORI_ERANGE, e.prepare, loc, rd, [0], [1 << 16], 1)
        raises(mori.MORI_EINVAL, e.prepare, loc, rd, [0], [0], 0)
        # the owner deregisters: the next transfer on the old handle is MORI_ESTALE
        e.read(loc, 0, rd, 0, 4096).result(5)
        far.deregister_memory(r)
        fails(mori.MORI_ESTALE, lambda: e.read(loc, 0, rd, 0, 4096))
        far.close()


def test_owner_killed(daemon, peer_factory):
    """The peer process dies: transfers on its regions fail with MORI_ESTALE or MORI_EPEERDEAD
    (the owner's pid gone), quickly; the engine works on."""
    t = peer_factory("target", daemon.run, "victim", 7)
    with IOEngine("survivor", IOEngineConfig(runtime_dir=daemon.run)) as e:
        loc = e.allocate(1 << 20)
        rs = {n: MemoryDesc.unpack(bytes.fromhex(h)) for n, h in t.hello["descs"].items()}
        for n in rs:
            e.read(loc, 0, rs[n], 0, 4096).result(5)
        t.kill9()
        for n in ("np", "mf"):
            t0, code = time.time(), mori.MORI_OK
            while time.time() - t0 < 3 and code == mori.MORI_OK:
                try:
                    st = e.read(loc, 0, rs[n], 0, 4096)
                    st.wait(5)
                    code = st.code
                except mori.MoriError as x:
                    code = x.code
                time.sleep(0.01)
            assert code in (mori.MORI_ESTALE, mori.MORI_EPEERDEAD), mori.code_name(code)
        other = IOEngine("other", IOEngineConfig(runtime_dir=daemon.run))
        o = other.allocate(4096)
        e.write(loc, 0, MemoryDesc.unpack(o.pack()), 0, 4096).result(5)
        other.close()


def test_stale_after_daemon_restart():
    d = Daemon()
    try:
        e = IOEngine("epoch", IOEngineConfig(runtime_dir=d.run))
        blob = e.allocate(4096).pack()
        e.close()
        d.stop()
        d.start()
        with IOEngine("epoch2", IOEngineConfig(runtime_dir=d.run)) as e2:
            loc = e2.allocate(4096)
            raises(mori.MORI_ESTALE, e2.read, loc, 0, MemoryDesc.unpack(blob), 0, 16)
    finally:
        d.cleanup()


def test_cross_node_errors(nodes, peer_factory):
    """Across nodes: an unknown name, a node nobody listens at, a deadline, a cancel, waits that
    expire, a prepared list still busy; the peer daemon stopped (SIGSTOP) keeps transfers in
    flight for as long as needed, then resumes."""
    a, b = nodes
    peer_factory("target", b.run, "xerr", 9)  # publishes xerr/np on node B
    with IOEngine("xinit", IOEngineConfig(runtime_dir=a.run)) as e:
        raises(mori.MORI_EUNREACH, e.open_remote, "nobody/kv", b.addr)
        dead = "127.0.0.1:%d" % free_port()
        raises(mori.MORI_ECONN, e.open_remote, "xerr/np", dead)
        loc = e.allocate(4 << 20)
        r = e.open_remote("xerr/np", b.addr)
        e.write(loc, 0, r, 0, 4096).result(10)  # streams up
        b.proc.send_signal(signal.SIGSTOP)
        try:
            t0 = time.time()
            st = e.write(loc, 0, r, 0, 4 << 20, timeout_ms=300)
            st2 = e.read(loc, 0, r, 0, 4 << 20)
            assert st2.wait(0.05) is False and not st2.done and st2.code == mori.MORI_EINPROGRESS
            assert st2.InProgress() and st2.Code() == StatusCode.IN_PROGRESS and st2.message == "in progress"
            raises(mori.MORI_ETIMEDOUT, st2.result, 0.01)
            assert st.wait(3)
            assert st.code == mori.MORI_ETIMEDOUT and 0.25 < time.time() - t0 < 2
            assert st.Code() == StatusCode.ERR_RDMA_OP and st.error.code == mori.MORI_ETIMEDOUT
            st2.cancel()
            assert st2.wait(3) and st2.code == mori.MORI_ECANCELED
            pl = e.prepare(loc, r, [0], [0], 1 << 20)
            st3 = pl.read([0])
            raises(mori.MORI_EBUSY, pl.close)
            st3.close()  # cancels, frees
            assert st3.code == mori.MORI_ECANCELED
            pl.close()
            st4 = e.read(loc, 0, r, 0, 1 << 20)
            assert e.wait_all([st4], 50) == StatusCode.IN_PROGRESS
        finally:
            b.proc.send_signal(signal.SIGCONT)
        assert st4.wait(10) and st4.code == mori.MORI_OK
        e.write(loc, 0, r, 0, 4096).result(10)  # the peer is usable again


def test_uid_not_allowed():
    """A morid that allows only another uid: opening an engine is MORI_EPERM."""
    if os.getuid() == 12345:
        pytest.skip("runs as uid 12345, the uid this test allows")
    d = Daemon(extra=["--allow_uids", "12345"])
    try:
        with pytest.raises(mori.MoriError) as ei:
            IOEngine("denied", IOEngineConfig(runtime_dir=d.run))
        e = ei.value
        assert e.code == mori.MORI_EPERM, str(e)
        assert "allow_uids" in e.message, str(e)
    finally:
        d.cleanup()
