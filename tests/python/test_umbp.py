"""mori.umbp against a morid with a DRAM store: byte-exact round trips of every value type (bytes,
bytearray, memoryview views, numpy arrays, torch CPU tensors when torch is there), batches and
their per-key statuses, the ROCm/mori pointer calls, misses, replacement, removal, clear, stats
counted here, every error code the binding raises, keys shared with another process, threads,
fork and close. Values are a deterministic function of (key, seed), checked with sha256."""
import hashlib
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import mori
from mori.umbp import KEY_MAX, UMBPClient, UMBPConfig, UMBPPin, UMBPTierType
from conftest import Daemon, ROOT

try:
    import torch
except ImportError:
    torch = None

STORE_BYTES = 256 << 20


def value(key, seed, n):
    """n bytes that depend on (key, seed) only."""
    h = hashlib.sha256(b"%s/%d" % (key.encode() if isinstance(key, str) else key, seed)).digest()
    rng = np.random.default_rng(int.from_bytes(h[:8], "little"))
    return rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


@pytest.fixture(scope="module")
def store():
    d = Daemon(extra=["--kv-dram-bytes", str(STORE_BYTES)])
    yield d
    d.cleanup()


@pytest.fixture
def c(store):
    with UMBPClient(runtime_dir=store.run, name="t-umbp") as cl:
        cl.clear()
        yield cl


def code_of(fn, *a, **kw):
    with pytest.raises(mori.MoriError) as ei:
        fn(*a, **kw)
    return ei.value.code


def test_round_trip_sizes(c):
    """Sizes around pages and up to 8 MiB: put bytes, get back bytes and into a bytearray."""
    for i, n in enumerate((1, 7, 4095, 4096, 4097, (64 << 10) + 3, 1 << 20, 8 << 20)):
        k = "rt-%d" % n
        v = value(k, i, n)
        assert c.put(k, v) is None
        got = c.get(k)
        assert isinstance(got, bytes) and len(got) == n and sha(got) == sha(v), "size %d" % n
        out = bytearray(n + 100)
        assert c.get(k, out) == n
        assert sha(out[:n]) == sha(v) and out[n:] == bytearray(100)
        assert c.exists(k)


def test_value_types(c):
    """bytearray, a memoryview at an offset, a read-only memoryview, numpy arrays of other
    dtypes (their bytes), a numpy destination."""
    base = value("vt", 1, 10000)
    c.put("vt-ba", bytearray(base))
    c.put("vt-mv", memoryview(base)[123:4567])
    c.put("vt-np", np.frombuffer(base, dtype=np.float32))
    c.put("vt-np2d", np.frombuffer(base, dtype=np.uint8).reshape(100, 100))
    assert c.get("vt-ba") == base
    assert c.get("vt-mv") == base[123:4567]
    assert c.get("vt-np") == base
    dst = np.zeros(10000, dtype=np.uint8)
    assert c.get("vt-np2d", dst) == 10000 and dst.tobytes() == base
    f = np.zeros(2500, dtype=np.float32)
    assert c.get("vt-np", f) == 10000 and f.tobytes() == base
    view = bytearray(20000)
    assert c.get("vt-mv", memoryview(view)[5000:]) == 4444 and view[5000:9444] == base[123:4567]
    # a bytes key is the same key as its str
    c.put(b"vt-bytes-key", b"x" * 3)
    assert c.get("vt-bytes-key") == b"xxx"


@pytest.mark.skipif(torch is None, reason="no torch (PyTorch is not installed): CPU tensor case skipped")
def test_torch_cpu_tensors(c):
    """CPU tensors of several dtypes as values and destinations, a view at an offset."""
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int8):
        t = (torch.arange(1 << 14) % 251).to(dtype)
        k = "tt-%s" % dtype
        c.put(k, t)
        dst = torch.zeros_like(t)
        assert c.get(k, dst) == t.numel() * t.element_size()
        assert torch.equal(dst, t)
        view = t[1000:3000]
        c.put(k + "-view", view)
        d2 = torch.zeros(2000, dtype=dtype)
        c.get(k + "-view", d2)
        assert torch.equal(d2, view)
    assert code_of(c.put, "tt-nc", torch.zeros(8, 8).t()) == mori.MORI_EINVAL


def test_replace_miss_remove(c):
    c.put("rep", b"first value")
    c.put("rep", b"second")
    assert c.get("rep") == b"second"
    assert c.get("missing") is None
    assert c.get("missing", bytearray(10)) is None
    assert not c.exists("missing")
    assert c.remove("rep") is True
    assert c.remove("rep") is False
    assert c.get("rep") is None


def test_errors(store, c):
    """Each refusal raises MoriError with its code; nothing is stored by a refused put."""
    assert code_of(c.put, "", b"x") == mori.MORI_EINVAL
    assert code_of(c.put, "k" * (KEY_MAX + 1), b"x") == mori.MORI_EINVAL
    c.put("k" * KEY_MAX, b"longest key")
    assert c.get("k" * KEY_MAX) == b"longest key"
    assert code_of(c.put, "empty", b"") == mori.MORI_EINVAL
    assert not c.exists("empty")
    assert code_of(c.put, "s", "a str value") == mori.MORI_EINVAL
    assert code_of(c.put, 17, b"x") == mori.MORI_EINVAL
    assert code_of(c.put, "nc", np.zeros((8, 8), dtype=np.uint8)[:, 1]) == mori.MORI_EINVAL
    c.put("big", value("big", 0, 5000))
    with pytest.raises(mori.MoriError) as ei:
        c.get("big", bytearray(4999))
    assert ei.value.code == mori.MORI_EMSGSIZE and "5000" in ei.value.message
    assert code_of(c.get, "big", b"\0" * 6000) == mori.MORI_EINVAL  # read-only destination
    assert code_of(c.pin, "absent", UMBPPin.SOFT) == mori.MORI_ENOENT
    assert code_of(UMBPClient, runtime_dir=store.run, timeout_ms=-1) == mori.MORI_ERANGE
    assert code_of(UMBPClient, runtime_dir=store.run, copy_threads=1.5) == mori.MORI_EINVAL
    assert code_of(c.batch_put, ["a", "b"], [b"x"]) == mori.MORI_EINVAL
    assert code_of(c.batch_put_from_ptr, ["a"], [0, 0], [1]) == mori.MORI_EINVAL
    assert code_of(c.put_from_ptr, "a", -1, 1) == mori.MORI_ERANGE


def test_batches_and_statuses(c):
    """A batch with good keys, an empty key and an empty value: one status each, the good ones
    stored; batch_get with buffers (statuses, lengths, tiers), with a short buffer and misses;
    batch_get without buffers; batch_exists and the consecutive count."""
    keys = ["b-%03d" % i for i in range(100)]
    vals = [value(k, 7, 100 + 997 * i) for i, k in enumerate(keys)]
    bad_keys = keys[:]
    bad_vals = vals[:]
    bad_keys[10] = ""          # MORI_EINVAL
    bad_vals[20] = b""         # MORI_EINVAL
    st = c.batch_put(bad_keys, bad_vals, depths=list(range(100)))
    want = [mori.MORI_OK] * 100
    want[10] = want[20] = mori.MORI_EINVAL
    assert st == want
    stored = [i for i in range(100) if i not in (10, 20)]

    outs = [bytearray(len(v)) for v in vals]
    outs[30] = bytearray(len(vals[30]) - 1)      # short by one byte
    d = c.batch_get(keys, outs, details=True)
    for i in range(100):
        s, n, tier = d[i]
        if i in (10, 20):
            assert s == mori.MORI_ENOENT, i
        elif i == 30:
            assert s == mori.MORI_EMSGSIZE and n == len(vals[30])
        else:
            assert s == mori.MORI_OK and n == len(vals[i]) and tier == UMBPTierType.DRAM, (i, d[i])
            assert sha(outs[i]) == sha(vals[i]), i
    got = c.batch_get(keys)
    for i in range(100):
        assert got[i] == (None if i in (10, 20) else vals[i]), i
    assert c.batch_exists(keys) == [i in stored for i in range(100)]
    assert c.batch_exists_consecutive(keys) == 10
    assert c.batch_exists_consecutive(keys[:10]) == 10
    assert c.batch_exists_consecutive(["nope"] + keys) == 0
    assert c.batch_exists([]) == [] and c.batch_exists_consecutive([]) == 0 and c.batch_put([], []) == []
    assert c.batch_put_with_depth(keys[10:11], vals[10:11], [3]) == [mori.MORI_OK]
    assert c.batch_exists_consecutive(keys) == 20


def test_pointer_calls(c):
    """ROCm/mori's *_from_ptr / *_into_ptr calls over a numpy page pool: bools per key."""
    page = 4096
    pool = np.frombuffer(b"".join(value("pp", i, page) for i in range(16)), dtype=np.uint8).copy()
    base = pool.ctypes.data
    keys = ["p-%d" % i for i in range(16)]
    assert c.batch_put_from_ptr(keys[:8], [base + i * page for i in range(8)], [page] * 8) == [True] * 8
    assert c.batch_put_from_ptr_with_depth(keys[8:], [base + i * page for i in range(8, 16)], [page] * 8,
                                           list(range(8))) == [True] * 8
    assert c.put_from_ptr("p-one", base, page) is True
    dst = np.zeros_like(pool)
    got = c.batch_get_into_ptr(keys + ["p-missing"], [dst.ctypes.data + i * page for i in range(16)] + [0],
                               [page] * 16 + [0])
    assert got == [True] * 16 + [False]
    assert sha(dst) == sha(pool)
    one = np.zeros(page, dtype=np.uint8)
    assert c.get_into_ptr("p-one", one.ctypes.data, page) is True and sha(one) == sha(pool[:page])
    assert c.get_into_ptr("p-one", one.ctypes.data, page - 1) is False
    assert c.get_into_ptr("p-missing", one.ctypes.data, page) is False
    assert c.register_memory(pool) is True
    c.deregister_memory(pool)
    assert c.register_memory(base, pool.nbytes) is True
    c.deregister_memory(base)


def test_pin_clear_stats(c):
    """Stats counted here: keys, bytes at their size, hits and misses of single gets."""
    sizes = [1, 1000, 4096, 12345, 1 << 20]
    for i, n in enumerate(sizes):
        c.put("s-%d" % i, value("s", i, n))
    s0 = c.stats()
    assert s0.dram_keys == len(sizes) and s0.dram_bytes == sum(sizes), s0
    assert s0.dram_capacity == STORE_BYTES and s0.ssd_keys == 0, s0
    for i in range(3):
        assert c.get("s-%d" % i) is not None
    for i in range(2):
        assert c.get("s-miss-%d" % i) is None
    s1 = c.stats()
    assert (s1.hits - s0.hits, s1.misses - s0.misses) == (3, 2), (s0, s1)
    c.pin("s-0", UMBPPin.SOFT)
    c.pin("s-0", UMBPPin.NONE)
    c.pin("s-1", UMBPPin.HARD)
    c.pin("s-1", UMBPPin.NONE)
    assert c.clear() is True and c.flush() is True
    assert c.batch_exists(["s-%d" % i for i in range(len(sizes))]) == [False] * len(sizes)
    s2 = c.stats()
    assert s2.dram_keys == 0 and s2.dram_bytes == 0 and set(s2.as_dict()) == set(s0.FIELDS)


def test_values_outlive_clients_and_cross_processes(store):
    """A value put by one client is read by another client and by another process of the uid."""
    v = value("shared", 3, 300000)
    with UMBPClient(UMBPConfig(runtime_dir=store.run, name="writer")) as w:
        w.put("shared", v)
    with UMBPClient(runtime_dir=store.run, name="reader") as r:
        assert r.get("shared") == v
    code = ("import hashlib, sys; from mori.umbp import UMBPClient\n"
            "with UMBPClient(runtime_dir=sys.argv[1]) as c: print(hashlib.sha256(c.get('shared')).hexdigest())")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, "-c", code, store.run], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == sha(v)


def test_threads(c):
    """Four threads put and get their own keys on one client at once: every byte checked."""
    errors = []

    def work(t):
        try:
            for i in range(40):
                k = "th-%d-%d" % (t, i)
                v = value(k, t, 1000 + 313 * i)
                c.put(k, v)
                if c.get(k) != v:
                    errors.append(k)
            keys = ["th-%d-%d" % (t, i) for i in range(40)]
            got = c.batch_get(keys)
            errors.extend(k for k, g, i in zip(keys, got, range(40)) if g != value(k, t, 1000 + 313 * i))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))
    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
        assert not t.is_alive(), "a thread did not finish within 120 s"
    assert errors == []


def test_close_and_fork(store):
    cl = UMBPClient(runtime_dir=store.run)
    cl.put("cf", b"abc")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            cl.get("cf")
            code = 1
        except mori.MoriError as e:
            code = 0 if e.code == mori.MORI_ESTALE else 2
        except BaseException:
            code = 3
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"\0", "the forked child's call did not raise MORI_ESTALE (%r)" % got
    assert cl.get("cf") == b"abc"
    cl.close()
    cl.close()
    assert cl.closed
    assert code_of(cl.get, "cf") == mori.MORI_EINVAL


def test_no_store_and_no_daemon(tmp_path):
    d = Daemon(extra=["--kv-dram-bytes", "0"])
    try:
        assert code_of(UMBPClient, runtime_dir=d.run) == mori.MORI_ENOTSUP
    finally:
        d.cleanup()
    assert code_of(UMBPClient, runtime_dir=str(tmp_path)) == mori.MORI_ECONN


def test_external_kv_local(store, c):
    """External KV with kv_index local: this node alone answers; reports are the session's own,
    revoke_all_at_tier counts, hit counters count matched keys once per match and are sparse,
    and a closed client's reports leave."""
    ks = ["ext-local-%d" % i for i in range(12)]
    other = UMBPClient(runtime_dir=store.run)
    try:
        c.report_external_kv_blocks(ks[:8], UMBPTierType.HBM)
        other.report_external_kv_blocks(ks[4:10], UMBPTierType.DRAM)
        (m,) = c.match_external_kv(ks, count_as_hit=True)
        assert m.hashes_by_tier == {UMBPTierType.HBM: ks[:8], UMBPTierType.DRAM: ks[4:10]}
        assert m.matched_hash_count() == 10
        got = {e.hash: e.hit_count_total for e in c.get_external_kv_hit_counts(ks + ks[:2])}
        assert got == {k: 1 for k in ks[:10]}
        other.revoke_external_kv_blocks(ks[:8], UMBPTierType.HBM)  # not its reports: nothing
        assert c.revoke_all_at_tier(UMBPTierType.SSD) == 0
        (m,) = c.match_external_kv(ks)
        assert m.matched_hash_count() == 10
    finally:
        other.close()
    # morid ends the closed session's reports when it sees the socket close
    import time
    end = time.monotonic() + 20
    while c.match_external_kv(ks)[0].hashes_by_tier != {UMBPTierType.HBM: ks[:8]} and time.monotonic() < end:
        time.sleep(0.02)
    (m,) = c.match_external_kv(ks)
    assert m.hashes_by_tier == {UMBPTierType.HBM: ks[:8]}
    assert c.revoke_all_external_kv_blocks_at_tier(UMBPTierType.HBM) == 8
    assert c.match_external_kv(ks) == []
    # counters outlive the reports
    assert {e.hash: e.hit_count_total for e in c.get_external_kv_hit_counts(ks[:1])} == {ks[0]: 1}
    with pytest.raises((mori.MoriError, ValueError)):
        c.report_external_kv_blocks(ks, 7)
