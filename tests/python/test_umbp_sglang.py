"""mori.umbp.sglang.MoriHiCacheStorage driven as SGLang drives a HiCache storage backend, against a
morid with a DRAM store: the example (examples/umbp_sglang_backend.py, MHA and MLA), SGLang's
dynamic loader replayed over a stand-in of SGLang's HiCacheStorage ABC (the class must subclass
it and instantiate), the zero-copy calls with a page that lost a part, tensor-parallel ranks'
key spaces, and an import that pulls in neither sglang nor torch."""
import importlib.util
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

from mori.umbp import UMBPClient
from conftest import Daemon, ROOT

EXAMPLE = os.path.join(ROOT, "examples", "umbp_sglang_backend.py")
sys.path.insert(0, os.path.join(ROOT, "examples"))
from umbp_sglang_backend import HostKVPool, page_hashes  # noqa: E402


@pytest.fixture(scope="module")
def store():
    d = Daemon(extra=["--kv-dram-bytes", str(128 << 20)])
    yield d
    d.cleanup()


def env():
    return dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), PYTHONDONTWRITEBYTECODE="1")


@pytest.mark.parametrize("mla", [False, True])
def test_example(store, mla):
    p = subprocess.run([sys.executable, EXAMPLE, "--runtime-dir", store.run] + (["--mla"] if mla else []),
                       env=env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "every page verified" in p.stdout, p.stdout + p.stderr
    assert "prefetch    10 of 14 pages matched" in p.stdout


def config(store, tp_rank=0, mla=False, prefix="t"):
    return types.SimpleNamespace(tp_rank=tp_rank, tp_size=2, pp_rank=0, pp_size=1, is_mla_model=mla,
                                 model_name="m/x", should_split_heads=False,
                                 extra_config={"runtime_dir": store.run, "key_prefix": prefix, "interface_v1": 1})


def pool_with_pages(pages, ps=4, mla=False, seed=0):
    pool = HostKVPool(3 * pages * ps, ps, 2, 2, 32, mla)
    rng = np.random.default_rng(seed)
    pool.kv_buffer[:] = rng.standard_normal(pool.kv_buffer.shape).astype(pool.kv_buffer.dtype)
    return pool


def test_zero_copy_pages_and_a_lost_part(store):
    from mori.umbp.sglang import MoriHiCacheStorage
    b = MoriHiCacheStorage(config(store, prefix="zc"), {})
    ps, n = 4, 8
    pool = pool_with_pages(3 * n, ps)
    b.register_mem_pool_host(pool)
    keys = page_hashes(np.arange(n * ps), ps)
    src = np.arange(n * ps)
    assert b.batch_set_v1(keys, src, types.SimpleNamespace(prefix_keys=["p"] * 5)) == [True] * n
    assert b.batch_exists(keys) == n
    # page 3 loses its V part: the prefix stops there, its read fails, the others read
    with UMBPClient(runtime_dir=store.run) as c:
        assert c.remove("zc/%s_0_v" % keys[3]) is True
    assert b.batch_exists(keys) == 3
    assert not b.exists(keys[3]) and b.exists(keys[4])
    dst = np.arange(n * ps, 2 * n * ps)
    got = b.batch_get_v1(keys, dst)
    assert got == [True, True, True, False, True, True, True, True]
    for i in range(n):
        if i != 3:
            assert np.array_equal(pool.kv_buffer[:, dst[i * ps]:dst[i * ps] + ps], pool.kv_buffer[:, i * ps:i * ps + ps])
    with pytest.raises(ValueError):
        b.batch_get_v1(keys[:2], dst[:3 * ps])     # 2 keys, 3 pages of indices
    assert b.batch_exists([]) == 0 and b.batch_get_v1([], dst[:0]) == []
    b.remove(keys)
    assert b.batch_exists(keys) == 0
    b.close()


def test_tp_ranks_and_mla(store):
    from mori.umbp.sglang import MoriHiCacheStorage
    ps, n = 4, 3
    keys = page_hashes(np.arange(100, 100 + n * ps), ps)
    r0 = MoriHiCacheStorage(config(store, 0, prefix="tp"), pool_with_pages(n, ps, seed=1))
    r1 = MoriHiCacheStorage(config(store, 1, prefix="tp"), pool_with_pages(n, ps, seed=2))
    assert r0.batch_set_v1(keys, np.arange(n * ps)) == [True] * n
    assert r0.batch_exists(keys) == n and r1.batch_exists(keys) == 0   # MHA: each rank its heads
    assert r1.batch_set_v1(keys, np.arange(n * ps)) == [True] * n
    out = np.zeros_like(r0.mem_pool_host.kv_buffer)
    r1.mem_pool_host.kv_buffer, want = out, r1.mem_pool_host.kv_buffer.copy()
    assert r1.batch_get_v1(keys, np.arange(n * ps)) == [True] * n
    assert np.array_equal(out[:, :n * ps], want[:, :n * ps])
    r0.remove(keys), r1.remove(keys)
    m0 = MoriHiCacheStorage(config(store, 0, mla=True, prefix="mla"), pool_with_pages(n, ps, mla=True, seed=3))
    m1 = MoriHiCacheStorage(config(store, 1, mla=True, prefix="mla"), pool_with_pages(n, ps, mla=True, seed=4))
    assert m1.batch_set_v1(keys, np.arange(n * ps)) == [True] * n     # MLA: rank 1 does not write
    assert m1.batch_exists(keys) == 0
    assert m0.batch_set_v1(keys, np.arange(n * ps)) == [True] * n
    assert m1.batch_exists(keys) == n                                   # one latent for every rank
    assert m1.batch_get_v1(keys, np.arange(n * ps, 2 * n * ps)) == [True] * n
    assert np.array_equal(m1.mem_pool_host.kv_buffer[:, n * ps:2 * n * ps], m0.mem_pool_host.kv_buffer[:, :n * ps])
    m0.remove(keys)
    for b in (r0, r1, m0, m1):
        b.close()


STUB = '''
from abc import ABC, abstractmethod
class HiCacheStorage(ABC):
    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host
    @abstractmethod
    def get(self, key, target_location=None, target_sizes=None): ...
    @abstractmethod
    def batch_get(self, keys, target_locations=None, target_sizes=None): ...
    @abstractmethod
    def set(self, key, value=None, target_location=None, target_sizes=None): ...
    @abstractmethod
    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None): ...
    @abstractmethod
    def exists(self, key): ...
    def batch_exists(self, keys, extra_info=None):
        for i in range(len(keys)):
            if not self.exists(keys[i]):
                return i
        return len(keys)
'''

LOADER = '''
import importlib, sys, types
import numpy as np
sys.path.insert(0, sys.argv[2])
import mori.umbp.sglang
assert "sglang" not in sys.modules and "torch" not in sys.modules, "importing the module pulled in sglang or torch"
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
from umbp_sglang_backend import HostKVPool, page_hashes
extra = {"backend_name": "mori", "module_path": "mori.umbp.sglang", "class_name": "MoriHiCacheStorage",
         "interface_v1": 1, "runtime_dir": sys.argv[1], "key_prefix": "loader"}
# SGLang's StorageBackendFactory._create_dynamic_backend, step by step
cls = getattr(importlib.import_module(extra["module_path"]), extra["class_name"])
assert issubclass(cls, HiCacheStorage), cls.__mro__
cfg = types.SimpleNamespace(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, is_mla_model=False, model_name=None,
                            extra_config=extra)
backend = cls(cfg, {})
pool = HostKVPool(64, 4, 2, 2, 16)
pool.kv_buffer[:] = np.arange(pool.kv_buffer.size).reshape(pool.kv_buffer.shape) % 1000
backend.register_mem_pool_host(pool)
keys = page_hashes(list(range(32)), 4)
assert backend.batch_exists(keys) == 0
assert backend.batch_set_v1(keys, np.arange(32)) == [True] * 8
assert backend.batch_exists(keys) == 8
assert backend.batch_get_v1(keys, np.arange(32, 64)) == [True] * 8
assert np.array_equal(pool.kv_buffer[:, 32:64], pool.kv_buffer[:, :32])
assert backend.get(keys[0], pool.get_dummy_flat_data_page()) is not None
assert backend.get("absent", pool.get_dummy_flat_data_page()) is None
backend.remove(keys)
backend.close()
print("loaded as", cls.__mro__[1].__module__, cls.__mro__[2].__module__)
'''


def test_sglang_loader_with_its_base(store, tmp_path):
    pkg = tmp_path / "sglang" / "srt" / "mem_cache"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "sglang", tmp_path / "sglang" / "srt", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "hicache_storage.py").write_text(textwrap.dedent(STUB))
    e = env()
    e["PYTHONPATH"] = os.pathsep.join([e["PYTHONPATH"], str(tmp_path)])
    p = subprocess.run([sys.executable, "-c", LOADER, store.run, os.path.join(ROOT, "examples")], env=e,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "loaded as mori.umbp.sglang sglang.srt.mem_cache.hicache_storage" in p.stdout, p.stdout


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed: the case is for its absence")
def test_without_sglang(store):
    code = ("import sys\nimport mori.umbp.sglang as m\ncls = m.MoriHiCacheStorage\n"
            "assert 'sglang' not in sys.modules and 'torch' not in sys.modules\n"
            "assert cls.__mro__[1:] == (m._MoriHiCacheStorage, object), cls.__mro__\nprint('ok')")
    p = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
