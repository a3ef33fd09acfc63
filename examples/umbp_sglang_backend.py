#!/usr/bin/env python3
"""mori.umbp.sglang.MoriHiCacheStorage driven the way SGLang's HiCache drives a storage backend,
against a local morid with a UMBP store (kv_dram_bytes > 0):

  1. SGLang's dynamic loader makes the backend: cls(storage_config, {}), then hands it the host
     KV pool (register_mem_pool_host). The pool here is a stand-in for SGLang's
     MHATokenToKVPoolHost in the page_first layout (numpy; no GPU, no sglang needed).
  2. Request A's KV pages are written to the host pool and backed up to the store
     (batch_set_v1: page hashes and host token indices, as the cache controller's backup thread).
  3. Request B shares A's first pages: the prefetch asks how many leading pages the store holds
     (batch_exists), reads them into other host slots (batch_get_v1), and every byte is checked
     against A's.
  4. SGLang's copying path (no interface_v1): batch_set of flat pages, batch_get into dummy pages.

    python3 examples/umbp_sglang_backend.py --runtime-dir /run/mori [--pages 16] [--mla]

With SGLang itself: --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
'{"backend_name": "mori", "module_path": "mori.umbp.sglang", "class_name": "MoriHiCacheStorage",
"interface_v1": 1, "runtime_dir": "/run/mori"}' (docs/python.md).
"""
import argparse
import hashlib
import os
import sys
import types

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from mori.umbp.sglang import MoriHiCacheStorage  # noqa: E402


class HostKVPool:
    """SGLang's host KV pool in the page_first layout: kv_buffer[2 or 1][token][layer][head][dim]
    (K and V, or MLA's one latent), pages of page_size consecutive token slots."""

    def __init__(self, tokens, page_size, layers, heads, head_dim, mla=False, dtype=np.float16):
        self.layout = "page_first"
        self.page_size = page_size
        self.layer_num, self.head_num, self.head_dim = layers, heads, head_dim
        self.dtype = np.dtype(dtype)
        self.kv_buffer = np.zeros((1 if mla else 2, tokens, layers, heads, head_dim), dtype=dtype)

    def _page_bytes(self):
        return self.page_size * self.layer_num * self.head_num * self.head_dim * self.dtype.itemsize

    def get_page_buffer_meta(self, indices):
        """(addresses, sizes in bytes): K then V of each page whose first token is at
        indices[0], indices[page_size], ... (SGLang's get_page_buffer_meta)."""
        base = self.kv_buffer.ctypes.data
        half = self.kv_buffer[0].nbytes
        token = self.layer_num * self.head_num * self.head_dim * self.dtype.itemsize
        ptrs = []
        for i in range(0, len(indices), self.page_size):
            k = base + int(indices[i]) * token
            ptrs += [k] if self.kv_buffer.shape[0] == 1 else [k, k + half]
        return ptrs, [self._page_bytes()] * len(ptrs)

    def get_data_page(self, index, flat=True):
        page = self.kv_buffer[:, index:index + self.page_size]
        return page.reshape(-1) if flat else page

    def get_dummy_flat_data_page(self):
        return np.zeros(self.kv_buffer.shape[0] * self._page_bytes() // self.dtype.itemsize, dtype=self.dtype)

    def set_from_flat_data_page(self, index, data):
        self.kv_buffer[:, index:index + self.page_size] = data.reshape(self.kv_buffer[:, :self.page_size].shape)


def page_hashes(tokens, page_size, prior=None):
    """SGLang's chained page keys: each page's hash covers its tokens and the previous hash."""
    out = []
    for i in range(0, len(tokens) - len(tokens) % page_size, page_size):
        h = hashlib.sha256()
        if prior:
            h.update(bytes.fromhex(prior))
        for t in tokens[i:i + page_size]:
            h.update(int(t).to_bytes(4, "little", signed=False))
        prior = h.hexdigest()
        out.append(prior)
    return out


def storage_config(extra, mla, tp_rank=0):
    try:
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
        return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                    is_mla_model=mla, enable_storage_metrics=False, is_page_first_layout=True,
                                    model_name="example/model", extra_config=extra)
    except ImportError:
        return types.SimpleNamespace(tp_rank=tp_rank, tp_size=1, pp_rank=0, pp_size=1, is_mla_model=mla,
                                     model_name="example/model", extra_config=extra, should_split_heads=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runtime-dir", default=None, help="morid's runtime directory")
    ap.add_argument("--pages", type=int, default=16, help="pages of request A")
    ap.add_argument("--shared", type=int, default=10, help="of them, the prefix request B shares")
    ap.add_argument("--page-size", type=int, default=16, help="tokens per page")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--mla", action="store_true", help="one latent per token (MLA) instead of K and V")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    ps = a.page_size
    rng = np.random.default_rng(a.seed)
    extra = {"backend_name": "mori", "module_path": "mori.umbp.sglang", "class_name": "MoriHiCacheStorage",
             "interface_v1": 1, "runtime_dir": a.runtime_dir, "key_prefix": "example-%d-%d" % (os.getpid(), a.seed)}
    pool = HostKVPool(4 * a.pages * ps, ps, a.layers, a.heads, a.head_dim, a.mla)
    backend = MoriHiCacheStorage(storage_config(extra, a.mla), {})   # SGLang's dynamic loader
    backend.register_mem_pool_host(pool)
    page_bytes = pool.kv_buffer.shape[0] * pool._page_bytes()

    # request A: its pages in host slots 0.., backed up to the store
    tokens_a = rng.integers(0, 32000, size=a.pages * ps)
    keys_a = page_hashes(tokens_a, ps)
    host_a = np.arange(a.pages * ps)
    pool.kv_buffer[:, host_a] = rng.standard_normal(pool.kv_buffer[:, host_a].shape).astype(pool.dtype)
    want = [pool.get_data_page(i * ps).copy() for i in range(a.pages)]
    assert backend.batch_exists(keys_a) == 0, "the store already holds request A"
    ok = backend.batch_set_v1(keys_a, host_a, types.SimpleNamespace(prefix_keys=[]))
    assert all(ok), "backup: %s" % ok
    print("backup      %d pages of %d bytes (%d tokens each) stored" % (a.pages, page_bytes, ps))

    # request B: A's first pages, then its own
    tokens_b = np.concatenate([tokens_a[:a.shared * ps], rng.integers(0, 32000, size=4 * ps)])
    keys_b = page_hashes(tokens_b, ps)
    hit = backend.batch_exists(keys_b)
    assert hit == a.shared, "prefix match: %d pages, want %d" % (hit, a.shared)
    host_b = np.arange(a.pages * ps, (a.pages + hit) * ps)       # other host slots
    got = backend.batch_get_v1(keys_b[:hit], host_b)
    assert all(got), "prefetch: %s" % got
    for i in range(hit):
        assert np.array_equal(pool.get_data_page(host_b[i * ps]).view(np.uint8), want[i].view(np.uint8)), \
            "page %d differs" % i
    assert backend.exists(keys_a[0]) and not backend.exists(keys_b[-1])
    print("prefetch    %d of %d pages matched and read back, byte-exact" % (hit, len(keys_b)))

    # the copying path: flat pages out and in
    keys_c = page_hashes(rng.integers(0, 32000, size=4 * ps), ps, prior="ab" * 32)
    flat = [rng.standard_normal(pool.get_dummy_flat_data_page().shape).astype(pool.dtype) for _ in keys_c]
    assert backend.batch_set(keys_c, flat)
    assert backend.batch_exists(keys_c) == len(keys_c)
    dummies = backend.batch_get(keys_c, [pool.get_dummy_flat_data_page() for _ in keys_c])
    slots = np.arange(2 * a.pages * ps, (2 * a.pages + len(keys_c)) * ps)
    for i, d in enumerate(dummies):
        assert d is not None, "page %d not read" % i
        pool.set_from_flat_data_page(slots[i * ps], d)
        assert np.array_equal(pool.get_data_page(slots[i * ps]).view(np.uint8), flat[i].view(np.uint8))
    print("copy path   %d flat pages set and got, byte-exact" % len(keys_c))
    st = backend.umbp_stats()
    print("store       %d keys, %d bytes in DRAM; hits %d misses %d" % (st.dram_keys, st.dram_bytes, st.hits,
                                                                     st.misses))
    backend.remove(keys_a + keys_b + keys_c)   # this run's pages (clear() would drop the uid's every key)
    assert backend.batch_exists(keys_a) == 0
    backend.close()
    print("every page verified")


if __name__ == "__main__":
    main()
