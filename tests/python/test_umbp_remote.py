"""mori.umbp's remote gets (node="host:port"): two morids on loopback, each with a peer listener
and a DRAM store; values put through one come back through the other byte for byte, as bytes,
into numpy arrays, torch CPU tensors and, where CUDA is there, a torch CUDA tensor (every byte
compared on the host). Misses, a bad node address and an unreachable node. Values are a
deterministic function of (key, seed), computed here."""
import hashlib
import time

import numpy as np
import pytest

import mori
from mori.errors import MORI_ECONN, MORI_EINVAL, MORI_ENOENT, MORI_ETIMEDOUT
from mori.umbp import UMBPClient, UMBPTierType
from conftest import Daemon, free_port

try:
    import torch
except ImportError:
    torch = None

STORE = ["--kv-dram-bytes", str(128 << 20)]


def value(key, seed, n):
    h = hashlib.sha256(b"%s/%d" % (key.encode(), seed)).digest()
    rng = np.random.default_rng(int.from_bytes(h[:8], "little"))
    return rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def two():
    a, b = Daemon(listen=True, extra=STORE), Daemon(listen=True, extra=STORE)
    yield a, b
    try:
        a.cleanup()
    finally:
        b.cleanup()


@pytest.fixture
def clients(two):
    a, b = two
    with UMBPClient(runtime_dir=a.run, name="t-a") as ca, UMBPClient(runtime_dir=b.run, name="t-b") as cb:
        ca.clear()
        cb.clear()
        yield ca, cb, a.addr


def test_get_from_other_node(clients):
    ca, cb, node = clients
    sizes = (1, 4096, (64 << 10) + 5, 1 << 20)
    for i, n in enumerate(sizes):
        ca.put("r%d" % i, value("r%d" % i, 1, n))
    for i, n in enumerate(sizes):
        assert cb.get("r%d" % i) is None  # not on b
        assert cb.get("r%d" % i, node=node) == value("r%d" % i, 1, n)
    out = bytearray(1 << 20)
    assert cb.get("r3", out, node=node) == 1 << 20
    assert bytes(out) == value("r3", 1, 1 << 20)
    assert cb.get_into_ptr("r2", (ctypes_addr(out)), len(out), node=node) is True


def ctypes_addr(buf):
    import ctypes
    return ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))


def test_batch_from_other_node(clients):
    ca, cb, node = clients
    keys = ["b%d" % i for i in range(40)]
    assert ca.batch_put(keys, [value(k, 2, 8192 + i) for i, k in enumerate(keys)]) == [0] * 40
    got = cb.batch_get(keys + ["absent"], node=node)
    assert got[:40] == [value(k, 2, 8192 + i) for i, k in enumerate(keys)]
    assert got[40] is None
    outs = [np.zeros(8192 + i, dtype=np.uint8) for i in range(40)]
    st = cb.batch_get(keys, outs, details=True, node=node)
    assert [s[0] for s in st] == [0] * 40
    assert all(s[2] == UMBPTierType.DRAM for s in st)
    for i, k in enumerate(keys):
        assert outs[i].tobytes() == value(k, 2, 8192 + i)
    assert cb.batch_get_into_ptr(keys[:2], [outs[0].ctypes.data, outs[1].ctypes.data], [8192, 8193],
                                 node=node) == [True, True]


@pytest.mark.skipif(torch is None, reason="no torch")
def test_torch_cpu_tensor(clients):
    ca, cb, node = clients
    t = torch.arange(1 << 18, dtype=torch.int32)
    ca.put("t", t)
    out = torch.zeros_like(t)
    assert cb.get("t", out, node=node) == t.numel() * 4
    assert torch.equal(out, t)


def test_removed_is_a_miss(clients):
    ca, cb, node = clients
    ca.put("gone", b"x" * 100)
    assert cb.get("gone", node=node) == b"x" * 100
    assert ca.remove("gone")
    assert cb.get("gone", node=node) is None


def test_bad_and_unreachable_nodes(two):
    a, b = two
    with UMBPClient(runtime_dir=b.run, name="t-bad", timeout_ms=1500) as cb:
        for bad in ("", "nohostport", ":1", "host:"):
            with pytest.raises(mori.MoriError) as ei:
                cb.get("k", node=bad)
            assert ei.value.code == MORI_EINVAL
        dead = "127.0.0.1:%d" % free_port()
        t0 = time.time()
        with pytest.raises(mori.MoriError) as ei:
            cb.get("k", node=dead)
        assert ei.value.code in (MORI_ECONN, MORI_ETIMEDOUT)
        assert dead in str(ei.value)
        assert time.time() - t0 < 10


def test_cuda_tensor(clients):
    """The GPU check: a remote get into a torch CUDA tensor, every byte compared on the host."""
    if torch is None or not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    ca, cb, node = clients
    n = 16 << 20
    src = value("cuda", 3, n)
    ca.put("cuda", src)
    out = torch.zeros(n, dtype=torch.uint8, device="cuda")
    assert cb.get("cuda", out, node=node) == n
    torch.cuda.synchronize()
    assert out.cpu().numpy().tobytes() == src
    keys = ["cu%d" % i for i in range(8)]
    ca.batch_put(keys, [value(k, 4, 1 << 20) for k in keys])
    outs = [torch.zeros(1 << 20, dtype=torch.uint8, device="cuda") for _ in keys]
    assert cb.batch_get(keys, outs, node=node) == [0] * 8
    torch.cuda.synchronize()
    for k, o in zip(keys, outs):
        assert o.cpu().numpy().tobytes() == value(k, 4, 1 << 20)
    # into a registered tensor: this node's morid writes the value straight into its VRAM
    reg = torch.zeros(n, dtype=torch.uint8, device="cuda")
    cb.register_memory(reg)
    try:
        assert cb.get("cuda", reg, node=node) == n
        torch.cuda.synchronize()
        assert reg.cpu().numpy().tobytes() == src
    finally:
        cb.deregister_memory(reg)
