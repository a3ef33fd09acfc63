"""mori.nixl_compat driven by the call sequence vLLM's NIXL connector (NixlConnectorWorker)
makes for one request, the decode worker here and the prefill worker in tests/python/peer.py:
register_kv_caches (get_reg_descs, register_memory, the local block list prepared with
NIXL_INIT_AGENT, get_agent_metadata), the handshake (add_remote_agent, the remote block list
prepared with the remote agent's name), _read_blocks (descriptor ids region * num_blocks +
block id, make_prepped_xfer("READ", ..., notif_msg=b"req:tp"), transfer), get_finished
(check_xfer_state until DONE, get_xfer_telemetry, release_xfer_handle; the prefill side's
get_new_notifs), the full-prefix-hit path (send_notif), and shutdown. Every block is checked
against the seeded generator the prefill side filled its caches from."""
import hashlib
import signal
import time
import uuid

import numpy as np
import pytest

import mori
from mori.nixl_compat import nixl_agent as NixlWrapper, nixl_agent_config, NIXL_INIT_AGENT
from peer import pattern

LAYERS, P_BLOCKS, D_BLOCKS, BLOCK = 3, 40, 32, 4096
SEED = 4242


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def desc_ids(num_regions, num_blocks, block_ids):
    """vLLM's _get_block_descs_ids: region_ids[:, None] * num_blocks + block_ids[None, :]."""
    return (np.arange(num_regions)[:, None] * num_blocks + np.array(block_ids)[None, :]).flatten()


class Decode:
    """The decode worker's side of vLLM's NIXL connector, on mori (caches in host memory, or
    CUDA tensors registered as VRAM)."""

    def __init__(self, runtime_dir, device="cpu"):
        self.nixl_wrapper = NixlWrapper(str(uuid.uuid4()), nixl_agent_config(num_threads=4, capture_telemetry=True,
                                                                             runtime_dir=runtime_dir))
        self.device = device
        if device == "cuda":
            self.caches = [torch.zeros(D_BLOCKS * BLOCK, dtype=torch.uint8, device="cuda") for _ in range(2 * LAYERS)]
            torch.cuda.synchronize()
            addr, self.mem = [c.data_ptr() for c in self.caches], "VRAM"
        else:
            self.caches = [np.zeros(D_BLOCKS * BLOCK, dtype=np.uint8) for _ in range(2 * LAYERS)]
            addr, self.mem = [c.ctypes.data for c in self.caches], "DRAM"
        caches_data = [(a, D_BLOCKS * BLOCK, 0, "") for a in addr]
        self.descs = self.nixl_wrapper.get_reg_descs(caches_data, self.mem)
        self.nixl_wrapper.register_memory(self.descs, backends=["UCX"])
        blocks_data = [(a + b * BLOCK, BLOCK, 0) for a in addr for b in range(D_BLOCKS)]
        self.src = self.nixl_wrapper.prep_xfer_dlist(NIXL_INIT_AGENT,
                                                     self.nixl_wrapper.get_xfer_descs(blocks_data, self.mem))
        self.metadata = self.nixl_wrapper.get_agent_metadata()

    def add_remote_agent(self, meta):
        name = self.nixl_wrapper.add_remote_agent(bytes.fromhex(meta["agent_metadata"]))
        blocks_data = []
        for i, base in enumerate(meta["kv_caches_base_addr"]):
            for b in range(meta["num_blocks"]):
                blocks_data.append((base + b * meta["block_lens"][i], BLOCK, meta["device_id"]))
        self.dst = self.nixl_wrapper.prep_xfer_dlist(name, self.nixl_wrapper.get_xfer_descs(blocks_data, self.mem))
        self.num_blocks_remote = meta["num_blocks"]
        return name

    def read_blocks(self, local_ids, remote_ids, notif_id):
        return self.nixl_wrapper.make_prepped_xfer(
            "READ", self.src, desc_ids(2 * LAYERS, D_BLOCKS, local_ids),
            self.dst, desc_ids(2 * LAYERS, self.num_blocks_remote, remote_ids), notif_msg=notif_id)

    def host(self, r):
        """Region r's bytes as a numpy array (a copy, for CUDA caches)."""
        c = self.caches[r]
        return c.cpu().numpy() if self.device == "cuda" else c

    def zero(self):
        for c in self.caches:
            c[:] = 0
        if self.device == "cuda":
            torch.cuda.synchronize()

    def shutdown(self, remote_name):
        self.nixl_wrapper.release_dlist_handle(self.src)
        self.nixl_wrapper.release_dlist_handle(self.dst)
        self.nixl_wrapper.remove_remote_agent(remote_name)
        self.nixl_wrapper.deregister_memory(self.descs)
        self.nixl_wrapper.close()


try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
except ImportError:
    torch, HAVE_CUDA = None, False


@pytest.fixture(params=["one_node", "two_nodes", "one_node_cuda", "two_nodes_cuda"])
def pd(request, daemon, nodes, peer_factory):
    device = "cuda" if request.param.endswith("cuda") else "cpu"
    if device == "cuda" and not HAVE_CUDA:
        pytest.skip("no torch with CUDA (torch missing or no GPU): the VRAM replay needs both")
    if request.param.startswith("one_node"):
        prt = drt = daemon.run
    else:
        prt, drt = nodes[1].run, nodes[0].run
    p = peer_factory("prefill", prt, SEED, LAYERS, P_BLOCKS, BLOCK, device)
    d = Decode(drt, device)
    yield p, d, request.param
    try:
        d.nixl_wrapper.close()
    except mori.MoriError:
        pass


def test_vllm_read_one_request(pd):
    p, d, where = pd
    remote_name = d.add_remote_agent(p.hello["meta"])
    assert remote_name == p.hello["name"]
    assert d.nixl_wrapper.check_remote_metadata(remote_name)
    # one request: 9 blocks, with runs that are contiguous on both sides (merged) and not
    remote_ids = [3, 4, 5, 6, 11, 12, 20, 31, 39]
    local_ids = [0, 1, 2, 3, 9, 10, 30, 17, 5]
    req_id = "cmpl-%s-0" % uuid.uuid4()
    notif_id = ("%s:%d" % (req_id, 1)).encode()
    handle = d.read_blocks(local_ids, remote_ids, notif_id)
    state = d.nixl_wrapper.transfer(handle)
    assert state in ("DONE", "PROC")
    t0 = time.time()
    while True:
        state = d.nixl_wrapper.check_xfer_state(handle)
        if state == "DONE":
            break
        assert state == "PROC", "transfer failed: %s" % handle.error
        assert time.time() - t0 < 10
        time.sleep(0.001)
    tel = d.nixl_wrapper.get_xfer_telemetry(handle)
    assert tel.totalBytes == len(local_ids) * BLOCK * 2 * LAYERS
    assert tel.descCount < len(local_ids) * 2 * LAYERS  # contiguous runs were merged
    assert tel.xferDuration >= 0 and tel.startTime > 0
    assert d.nixl_wrapper.query_xfer_backend(handle) == "MORI"
    d.nixl_wrapper.release_xfer_handle(handle)
    # every block against the prefill side's generator, and the prefill side's own hashes
    for r in range(2 * LAYERS):
        src = pattern(SEED + r, P_BLOCKS * BLOCK)
        mine = d.host(r)
        got = [sha(mine[lb * BLOCK:(lb + 1) * BLOCK]) for lb in local_ids]
        assert got == [sha(src[rb * BLOCK:(rb + 1) * BLOCK]) for rb in remote_ids], "region %d" % r
        assert got == p.call("hashes", region=r, blocks=remote_ids)["h"]
        untouched = sorted(set(range(D_BLOCKS)) - set(local_ids))
        assert not mine.reshape(D_BLOCKS, BLOCK)[untouched].any()
    # the prefill side learns the request is done, from the decode agent by name
    got = p.call("notifs", want=1, wait_ms=5000)["notifs"]
    assert got == {d.nixl_wrapper.name: [notif_id.decode()]}
    # full prefix cache hit: only a notification (send_notif), and a few more to check order
    msgs = ["req-%d:1" % i for i in range(5)] + ["x" * 301 + ":1", ":"]
    for m in msgs:
        d.nixl_wrapper.send_notif(remote_name, notif_msg=m.encode())
    got = p.call("notifs", want=len(msgs), wait_ms=5000)["notifs"]
    assert got == {d.nixl_wrapper.name: msgs}
    # the same handle again (NIXL allows reposting a finished request)
    d.zero()
    handle = d.read_blocks(local_ids, remote_ids, b"again:1")
    assert d.nixl_wrapper.transfer(handle) in ("DONE", "PROC")
    while d.nixl_wrapper.check_xfer_state(handle) == "PROC":
        time.sleep(0.001)
    assert d.nixl_wrapper.check_xfer_state(handle) == "DONE"
    d.zero()
    assert d.nixl_wrapper.transfer(handle) in ("DONE", "PROC")
    while d.nixl_wrapper.check_xfer_state(handle) == "PROC":
        time.sleep(0.001)
    assert sha(d.host(0)[:BLOCK]) == sha(pattern(SEED, P_BLOCKS * BLOCK)[3 * BLOCK:4 * BLOCK])
    d.nixl_wrapper.release_xfer_handle(handle)
    got = p.call("notifs", want=2, wait_ms=5000)["notifs"]
    assert got == {d.nixl_wrapper.name: ["again:1", "again:1"]}
    d.shutdown(remote_name)


def test_write_and_loopback(daemon):
    """A WRITE (prefill pushing to decode, as other connectors do) and a loopback transfer
    (prep_xfer_dlist with the agent's own name), with their notifications."""
    a = NixlWrapper("writer", nixl_agent_config(runtime_dir=daemon.run))
    b = NixlWrapper("receiver", nixl_agent_config(runtime_dir=daemon.run))
    src = pattern(7, 8 * BLOCK)
    dst = np.zeros(8 * BLOCK, dtype=np.uint8)
    loop = np.zeros(8 * BLOCK, dtype=np.uint8)
    a.register_memory([(src.ctypes.data, src.nbytes, 0, ""), (loop.ctypes.data, loop.nbytes, 0, "")], "DRAM")
    b.register_memory(b.get_reg_descs(np.array([[dst.ctypes.data, dst.nbytes, 0]]), "DRAM"))
    name = a.add_remote_agent(b.get_agent_metadata())
    a.make_connection(name)
    lh = a.prep_xfer_dlist("", [(src.ctypes.data + i * BLOCK, BLOCK, 0) for i in range(8)], "DRAM")
    rh = a.prep_xfer_dlist(name, [(dst.ctypes.data + i * BLOCK, BLOCK, 0) for i in range(8)], "DRAM")
    h = a.make_prepped_xfer("WRITE", lh, [7, 0, 3], rh, [0, 1, 2], b"written")
    assert a.transfer(h) == "DONE"
    for i, j in zip([7, 0, 3], [0, 1, 2]):
        assert sha(dst[j * BLOCK:(j + 1) * BLOCK]) == sha(src[i * BLOCK:(i + 1) * BLOCK])
    t0 = time.time()
    while not b.check_remote_xfer_done("writer", b"writ") and time.time() - t0 < 5:
        time.sleep(0.001)
    assert b.notifs == {"writer": []}
    # loopback: src -> loop inside agent a, notifying itself
    self_h = a.prep_xfer_dlist("writer", [(loop.ctypes.data + i * BLOCK, BLOCK, 0) for i in range(8)], "DRAM")
    h2 = a.make_prepped_xfer("WRITE", lh, np.arange(8), self_h, np.arange(8)[::-1], b"self")
    assert a.transfer(h2) == "DONE"
    assert sha(loop) == sha(src.reshape(8, BLOCK)[::-1].reshape(-1))
    t0 = time.time()
    got = {}
    while not got and time.time() - t0 < 5:
        got = a.get_new_notifs()
    assert got == {"writer": [b"self"]}
    # initialize_xfer: both lists at once
    dst[:] = 0
    h3 = a.initialize_xfer("WRITE", a.get_xfer_descs([(src.ctypes.data, 2 * BLOCK, 0)], "DRAM"),
                           a.get_xfer_descs([(dst.ctypes.data + BLOCK, 2 * BLOCK, 0)], "DRAM"), name, b"init")
    assert a.transfer(h3) == "DONE" and sha(dst[BLOCK:3 * BLOCK]) == sha(src[:2 * BLOCK])
    for x in (h, h2, h3):
        a.release_xfer_handle(x)
    for o in (a, b):
        o.close()


def raises(code, fn, *args, **kw):
    with pytest.raises(mori.MoriError) as ei:
        fn(*args, **kw)
    assert ei.value.code == code, "expected %s, got %s: %s" % (mori.code_name(code), ei.value.name, ei.value.message)
    return ei.value


def test_nixl_errors(daemon, peer_factory):
    p = peer_factory("prefill", daemon.run, SEED, 1, 8, BLOCK)
    d = NixlWrapper("errs", nixl_agent_config(runtime_dir=daemon.run))
    a = np.zeros(8 * BLOCK, dtype=np.uint8)
    descs = d.register_memory([(a.ctypes.data, a.nbytes, 0, "")], "DRAM")
    raises(mori.MORI_EINVAL, d.get_reg_descs, [(a.ctypes.data, a.nbytes, 0, "")])  # no memory type
    raises(mori.MORI_ENOTSUP, d.get_reg_descs, [(a.ctypes.data, a.nbytes, 0, "")], "FILE")
    raises(mori.MORI_EINVAL, d.get_reg_descs, [(a.ctypes.data, a.nbytes, 0, "")], "HBM")
    raises(mori.MORI_EBUSY, d.register_memory, [(a.ctypes.data, 16, 0, "")], "DRAM")
    raises(mori.MORI_ENOENT, d.deregister_memory, d.get_reg_descs([(a.ctypes.data, 16, 0, "")], "DRAM"))
    raises(mori.MORI_EPROTO, d.add_remote_agent, b"garbage")
    raises(mori.MORI_EINVAL, d.add_remote_agent, d.get_agent_metadata())
    for f in (d.send_local_metadata, lambda: d.fetch_remote_metadata("x"), lambda: d.get_partial_agent_metadata([]),
              lambda: d.prep_mem_view(None), lambda: d.query_memory([], "UCX"), d.invalidate_local_metadata,
              lambda: d.estimate_xfer_cost(None)):
        raises(mori.MORI_ENOTSUP, f)
    raises(mori.MORI_ENOENT, d.prep_xfer_dlist, "nobody", [(1, 1, 0)], "DRAM")
    raises(mori.MORI_ENOENT, d.send_notif, "nobody", b"x")
    raises(mori.MORI_ENOENT, d.remove_remote_agent, "nobody")
    raises(mori.MORI_ENOENT, d.prep_xfer_dlist, NIXL_INIT_AGENT, [(a.ctypes.data + a.nbytes - 8, 16, 0)], "DRAM")
    raises(mori.MORI_EINVAL, d.prep_xfer_dlist, NIXL_INIT_AGENT, [(a.ctypes.data, 0, 0)], "DRAM")
    meta = p.hello["meta"]
    name = d.add_remote_agent(bytes.fromhex(meta["agent_metadata"]))
    base = meta["kv_caches_base_addr"][0]
    raises(mori.MORI_ENOENT, d.prep_xfer_dlist, name, [(base - 4096, 4096, 0)], "DRAM")
    lh = d.prep_xfer_dlist(NIXL_INIT_AGENT, [(a.ctypes.data + i * BLOCK, BLOCK, 0) for i in range(8)], "DRAM")
    rh = d.prep_xfer_dlist(name, [(base + i * BLOCK, BLOCK, 0) for i in range(8)], "DRAM")
    rh2 = d.prep_xfer_dlist(name, [(base, 2 * BLOCK, 0)], "DRAM")
    raises(mori.MORI_EINVAL, d.make_prepped_xfer, "COPY", lh, [0], rh, [0])
    raises(mori.MORI_ERANGE, d.make_prepped_xfer, "READ", lh, [8], rh, [0])
    raises(mori.MORI_ERANGE, d.make_prepped_xfer, "READ", lh, [0], rh, [-1])
    raises(mori.MORI_EINVAL, d.make_prepped_xfer, "READ", lh, [0, 1], rh, [0])
    raises(mori.MORI_EINVAL, d.make_prepped_xfer, "READ", lh, [], rh, [])
    raises(mori.MORI_EINVAL, d.make_prepped_xfer, "READ", lh, [0], rh2, [0])  # 4 KiB against 8 KiB
    raises(mori.MORI_EINVAL, d.make_prepped_xfer, "READ", rh, [0], lh, [0])   # sides swapped
    h = d.make_prepped_xfer("READ", lh, [0, 1], rh, [2, 3], b"r:1")
    assert d.transfer(h) == "DONE"
    d.release_xfer_handle(h)
    raises(mori.MORI_ENOENT, d.transfer, h)
    raises(mori.MORI_ENOENT, d.check_xfer_state, h)
    d.release_dlist_handle(rh2)
    raises(mori.MORI_ENOENT, d.make_prepped_xfer, "READ", lh, [0], rh2, [0])
    # the prefill side deregisters its caches: the read fails with MORI_ESTALE, either when it
    # is posted or as its state (vLLM's connector handles both)
    assert p.call("dereg") == {"ok": True}
    h = d.make_prepped_xfer("READ", lh, [0], rh, [0], b"late:1")
    try:
        st = d.transfer(h)
        while st == "PROC":
            st = d.check_xfer_state(h)
        assert st == "ERR" and h.error.code == mori.MORI_ESTALE, h.error
    except mori.MoriError as e:
        assert e.code == mori.MORI_ESTALE
    d.release_xfer_handle(h)
    d.deregister_memory(descs)
    d.close()


def test_repost_while_running(nodes):
    """A request still running cannot be posted again (MORI_EBUSY); released, it is cancelled."""
    a, b = nodes
    tgt = NixlWrapper("busy-t", nixl_agent_config(runtime_dir=b.run))
    ini = NixlWrapper("busy-i", nixl_agent_config(runtime_dir=a.run))
    x = np.zeros(4 << 20, dtype=np.uint8)
    y = np.zeros(4 << 20, dtype=np.uint8)
    tgt.register_memory([(x.ctypes.data, x.nbytes, 0, "")], "DRAM")
    ini.register_memory([(y.ctypes.data, y.nbytes, 0, "")], "DRAM")
    name = ini.add_remote_agent(tgt.get_agent_metadata())
    lh = ini.prep_xfer_dlist(NIXL_INIT_AGENT, [(y.ctypes.data, y.nbytes, 0)], "DRAM")
    rh = ini.prep_xfer_dlist(name, [(x.ctypes.data, x.nbytes, 0)], "DRAM")
    h = ini.make_prepped_xfer("WRITE", lh, [0], rh, [0], b"w")
    ini.transfer(h)
    while ini.check_xfer_state(h) == "PROC":
        time.sleep(0.001)
    b.proc.send_signal(signal.SIGSTOP)
    try:
        assert ini.transfer(h) == "PROC"
        raises(mori.MORI_EBUSY, ini.transfer, h)
        assert ini.check_xfer_state(h) == "PROC"
        ini.release_xfer_handle(h)
    finally:
        b.proc.send_signal(signal.SIGCONT)
    ini.close()
    tgt.close()
