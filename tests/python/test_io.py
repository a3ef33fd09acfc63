"""mori.io between two processes, on one node and across two daemons: single, batched and
prepared reads and writes from numpy arrays, bytearrays and libmori allocations into a peer's
numpy array, bytearray, allocation and float32 view, every byte checked against a model of the
peer's regions kept in this process (numpy, hashed with hashlib in both processes);
notifications; names; sessions; the ROCm/mori status methods."""
import hashlib
import os

import numpy as np
import pytest

import mori
from mori.io import (IOEngine, IOEngineConfig, MemoryDesc, MemoryLocationType, StatusCode, BackendType,
                     RdmaBackendConfig, EngineDesc)
from peer import pattern

REGION_SEEDS = {"np": 0, "ba": 1, "mf": 2, "f32": 3}
_count = [0]


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


class Setup:
    def __init__(self, eng, peer, key, seed, cross, node):
        self.eng, self.peer, self.key, self.seed, self.cross, self.node = eng, peer, key, seed, cross, node
        self.remote = {n: MemoryDesc.unpack(bytes.fromhex(h)) for n, h in peer.hello["descs"].items()}
        self.sizes = peer.hello["sizes"]
        # the model of the peer's regions
        self.mirror = {}
        for n, k in REGION_SEEDS.items():
            if n == "f32":
                self.mirror[n] = pattern(seed + 3, self.sizes[n])
            else:
                self.mirror[n] = pattern(seed + k, self.sizes[n])

    def check_remote(self, region, ranges):
        got = self.peer.call("hashes", region=region, ranges=[[int(o), int(n)] for o, n in ranges])["h"]
        want = [sha(self.mirror[region][o:o + n]) for o, n in ranges]
        assert got == want, "remote %s ranges %s differ from the model" % (region, ranges[:4])


@pytest.fixture(params=["one_node", "two_nodes"])
def setup(request, daemon, nodes, peer_factory):
    _count[0] += 1
    seed = 1000 * _count[0] + os.getpid() % 1000
    if request.param == "one_node":
        irt, trt, cross, node = daemon.run, daemon.run, False, None
    else:
        irt, trt, cross, node = nodes[0].run, nodes[1].run, True, nodes[1].addr
    key = "tgt%d" % _count[0]
    peer = peer_factory("target", trt, key, seed)
    eng = IOEngine("init%d" % _count[0], IOEngineConfig(runtime_dir=irt))
    s = Setup(eng, peer, key, seed, cross, node)
    yield s
    eng.close()


def local_regions(eng, rng):
    """A numpy array, a bytearray (both registered as they are) and a libmori allocation."""
    a = rng.integers(0, 256, size=4 << 20, dtype=np.uint8)
    b = bytearray(rng.integers(0, 256, size=2 << 20, dtype=np.uint8).tobytes())
    d = eng.allocate(4 << 20)
    d.buffer()[:] = rng.integers(0, 256, size=4 << 20, dtype=np.uint8).tobytes()
    views = {"np": a, "ba": np.frombuffer(b, dtype=np.uint8), "mf": np.frombuffer(d.buffer(), dtype=np.uint8)}
    return {"np": (eng.register(a), views["np"], a), "ba": (eng.register(b), views["ba"], b),
            "mf": (d, views["mf"], None)}


def test_random_transfers(setup):
    """Random single, batched (engine and session) and prepared reads and writes; each checked
    at once, the whole regions at the end; every transfer's notification arrives, with the
    initiator's pid on one node and 0 from another node."""
    s, eng = setup, setup.eng
    rng = np.random.default_rng(s.seed)
    loc = local_regions(eng, rng)
    uids, regions_of_uid = [], {}
    slot = 64 << 10
    lists = {}
    for it in range(120):
        ln = ["np", "ba", "mf"][it % 3]
        rn = ["np", "ba", "mf", "f32"][int(rng.integers(4))]
        ldesc, lview, _ = loc[ln]
        rdesc, mirror = s.remote[rn], s.mirror[rn]
        op = "write" if rng.integers(2) else "read"
        form = ["single", "batch", "session", "prep"][int(rng.integers(4))]
        nls, nrs = len(lview) // slot, len(mirror) // slot
        if form == "single":
            n = int(rng.integers(1, slot))
            descs = [(int(rng.integers(0, len(lview) - n)), int(rng.integers(0, len(mirror) - n)), n)]
        else:
            k = int(rng.integers(1, 9))
            ls_, rs_ = rng.choice(nls, k, replace=False), rng.choice(nrs, k, replace=False)
            descs = [(int(a) * slot, int(b) * slot, int(rng.integers(1, slot + 1))) for a, b in zip(ls_, rs_)]
        if op == "write":
            for lo, ro, n in descs:
                lview[lo:lo + n] = rng.integers(0, 256, size=n, dtype=np.uint8)
        uid = eng.allocate_transfer_uid()
        lo_, ro_, n_ = [d[0] for d in descs], [d[1] for d in descs], [d[2] for d in descs]
        if form == "single":
            f = eng.write if op == "write" else eng.read
            st = f(ldesc, lo_[0], rdesc, ro_[0], n_[0], uid)
        elif form == "batch":
            f = eng.batch_write if op == "write" else eng.batch_read
            st = f([ldesc], [lo_], [rdesc], [ro_], [n_], [uid])[0]
        elif form == "session":
            sess = eng.create_session(ldesc, rdesc)
            assert sess.alive()
            f = sess.batch_write if op == "write" else sess.batch_read
            st = f(np.array(lo_), np.array(ro_), np.array(n_), uid)
        else:
            key = (ln, rn)
            if key not in lists:
                k = min(nls, nrs)
                lists[key] = (eng.prepare(ldesc, rdesc, [i * slot for i in range(k)], [i * slot for i in range(k)],
                                          slot), k)
            pl, k = lists[key]
            idx = rng.choice(k, int(rng.integers(1, 9)), replace=False)
            descs = [(int(i) * slot, int(i) * slot, slot) for i in idx]
            if op == "write":
                for lo, ro, n in descs:
                    lview[lo:lo + n] = rng.integers(0, 256, size=n, dtype=np.uint8)
            st = (pl.write if op == "write" else pl.read)(idx, uid)
        assert st.wait(10), "transfer %d did not finish" % it
        assert st.code == mori.MORI_OK, "transfer %d (%s %s %s->%s): %s" % (it, op, form, ln, rn, st.error)
        assert st.Succeeded() and st.Code() == StatusCode.SUCCESS and st.error is None
        assert st.bytes == sum(d[2] for d in descs)
        uids.append(uid)
        regions_of_uid[uid] = rn
        if op == "write":
            for lo, ro, n in descs:
                mirror[ro:ro + n] = lview[lo:lo + n]
            s.check_remote(rn, [(ro, n) for _, ro, n in descs])
        else:
            for lo, ro, n in descs:
                assert sha(lview[lo:lo + n]) == sha(mirror[ro:ro + n]), "read %d: %s->%s differs" % (it, rn, ln)
    for pl, _ in lists.values():
        pl.close()
    for rn in s.remote:
        s.check_remote(rn, [(0, s.sizes[rn])])
    got = s.peer.call("notifs", want=len(uids), wait_ms=5000)["n"]
    assert sorted(t for t, _, _ in got) == sorted(uids)
    pids = {p for _, _, p in got}
    assert pids == ({0} if s.cross else {os.getpid()})
    # one region id per region, distinct regions distinct ids
    ids = {}
    for tag, rid, _ in got:
        ids.setdefault(regions_of_uid[tag], set()).add(rid)
    assert all(len(v) == 1 for v in ids.values())
    assert len({next(iter(v)) for v in ids.values()}) == len(ids)


def test_open_by_name_and_inbound(setup):
    """open_remote by published name (this node, or the other by address); the target pops the
    transfer's status by uid (pop_inbound_transfer_status) once, and only once."""
    s, eng = setup, setup.eng
    r = eng.open_remote(s.key + "/np", s.node)
    assert r.size == s.sizes["np"]
    buf = np.zeros(1 << 20, dtype=np.uint8)
    d = eng.register(buf)
    st = eng.read(d, 0, r, 12345, 1 << 20)
    st.result(10)
    assert sha(buf) == sha(s.mirror["np"][12345:12345 + (1 << 20)])
    uid = eng.allocate_transfer_uid()
    eng.write(d, 0, r, 0, 4096, uid).result(10)
    s.mirror["np"][:4096] = buf[:4096]
    s.check_remote("np", [(0, 4096)])
    deadline = 50
    found = False
    while not found and deadline:
        found = s.peer.call("inbound", key=eng.key, uid=uid)["found"]
        deadline -= 1
    assert found
    assert s.peer.call("inbound", key=eng.key, uid=uid)["found"] is False
    # notify=False: no notification at all (the read's came before the write's: drain it)
    assert len(s.peer.call("notifs", want=0, wait_ms=0)["n"]) == 1
    eng.write(d, 0, r, 0, 16, notify=False).result(10)
    assert s.peer.call("notifs", want=0, wait_ms=100)["n"] == []
    # the same region opened twice is one handle
    r2 = eng.open_remote(s.key + "/np", s.node)
    assert r2 == r
    eng.deregister_memory(r)
    eng.deregister_memory(d)


def test_status_methods_and_config(setup):
    """ROCm/mori's surface: backends and remote engines accepted, EngineDesc and MemoryDesc
    pack/unpack round trips, WaitFor/wait_all codes, register_memory from a raw pointer."""
    s, eng = setup, setup.eng
    assert eng.create_backend(BackendType.RDMA, RdmaBackendConfig(qp_per_transfer=2)) is None
    ed = eng.get_engine_desc()
    assert EngineDesc.unpack(ed.pack()) == ed and ed.key == eng.key
    if s.cross:
        assert ed.node_id and ed.port > 0
    eng.register_remote_engine(ed)
    eng.deregister_remote_engine(ed)
    arr = np.zeros(65536, dtype=np.uint8)
    d = eng.register_memory(arr.ctypes.data, arr.nbytes, -1, MemoryLocationType.CPU)
    d._keep = arr
    assert MemoryDesc.unpack(d.pack()) == d and d.size == 65536 and d.loc == MemoryLocationType.CPU
    sts = [eng.read(d, i * 4096, s.remote["mf"], i * 8192, 4096) for i in range(16)]
    assert eng.wait_all(sts, 5000) == StatusCode.SUCCESS
    assert all(st.WaitFor(0) == StatusCode.SUCCESS for st in sts)
    for i in range(16):
        assert sha(arr[i * 4096:(i + 1) * 4096]) == sha(s.mirror["mf"][i * 8192:i * 8192 + 4096])
    st = eng.write(d, 0, s.remote["ba"], 0, 100)
    st.Wait()
    assert st.Message() == "" and not st.Failed() and not st.InProgress()
    assert "MORI_OK" in repr(st)
    with eng.write(d, 0, s.remote["ba"], 0, 100) as st2:
        st2.result(5)
    s.mirror["ba"][:100] = arr[:100]
    s.check_remote("ba", [(0, 100)])


def test_two_engines_one_process(daemon):
    """A desc of another engine of this process is a remote region like any other."""
    with IOEngine("a", IOEngineConfig(runtime_dir=daemon.run)) as a, \
            IOEngine("b", IOEngineConfig(runtime_dir=daemon.run)) as b:
        x = np.arange(1 << 16, dtype=np.uint32)
        y = np.zeros(1 << 16, dtype=np.uint32)
        dx, dy = a.register(x), b.register(y)
        a.write(dx, 0, dy, 0, x.nbytes).result(5)
        assert np.array_equal(x, y)
        n = b.poll_notifications(timeout_ms=1000)
        assert len(n) == 1 and n[0].from_pid == os.getpid()
        # the desc works through pack/unpack too (a fresh object, same region)
        y[:] = 0
        a.write(dx, 0, MemoryDesc.unpack(dy.pack()), 0, x.nbytes).result(5)
        assert np.array_equal(x, y)


def test_moriio_connector_sequence(setup):
    """The calls vLLM's MoRIIO connector (MoRIIOWrapper) makes: IOEngine(key,
    IOEngineConfig(host, port)), create_backend(RDMA, RdmaBackendConfig(qp, batch, workers,
    POLLING, enable_notification=False)), engine descs packed and registered, a tensor's desc
    packed, sessions, session.batch_read/write with a uid each, the Succeeded()/Failed() loop."""
    import time
    from mori.io import PollCqMode, XgmiBackendConfig, IOEngineSession
    s = setup
    cfg = IOEngineConfig("127.0.0.1", 0)  # ROCm/mori's positional (host, port)
    assert (cfg.host, cfg.port, cfg.runtime_dir) == ("127.0.0.1", 0, None)
    cfg.runtime_dir = s.eng._config.runtime_dir
    eng = IOEngine("consumer:127.0.0.1:0:tp0:dp0", cfg)
    try:
        eng.create_backend(BackendType.RDMA, RdmaBackendConfig(4, -1, 1, PollCqMode.POLLING,
                                                               enable_notification=False))
        assert cfg.enable_notification is True  # the engine's copy changed, not the caller's
        eng.create_backend(BackendType.XGMI, XgmiBackendConfig())
        remote_key = EngineDesc.unpack(eng.get_engine_desc().pack())
        eng.register_remote_engine(remote_key)
        assert remote_key.key == eng.key
        kv = np.zeros(1 << 20, dtype=np.uint8)
        kvd = eng.register_memory(kv.ctypes.data, kv.nbytes, -1, MemoryLocationType.CPU)
        assert MemoryDesc.unpack(kvd.pack()) == kvd
        sess = eng.create_session(kvd, MemoryDesc.unpack(bytes.fromhex(s.peer.hello["descs"]["mf"])))
        assert isinstance(sess, IOEngine.Session) and isinstance(sess, IOEngineSession) and sess.alive()
        lo, ro, sz = [0, 65536, 131072], [4096, 0, 1 << 20], [4096, 8192, 100]
        st = sess.batch_read(lo, ro, sz, eng.allocate_transfer_uid())
        t0 = time.monotonic()
        while not st.Succeeded():
            assert not st.Failed(), "%s (code=%s)" % (st.Message(), st.Code())
            assert time.monotonic() - t0 < 10
            time.sleep(0.001)
        for lo_, ro_, n in zip(lo, ro, sz):
            assert sha(kv[lo_:lo_ + n]) == sha(s.mirror["mf"][ro_:ro_ + n])
        kv[:4096] = 7
        st = sess.write(0, 0, 4096, eng.allocate_transfer_uid())
        st.Wait()
        assert st.Succeeded()
        s.mirror["mf"][:4096] = 7
        s.check_remote("mf", [(0, 4096)])
        # enable_notification=False in the RDMA config: no notification reached the target
        assert s.peer.call("notifs", want=0, wait_ms=200)["n"] == []
        assert RdmaBackendConfig(2).qp_per_transfer == 2 and RdmaBackendConfig().enable_notification is True
    finally:
        eng.close()
