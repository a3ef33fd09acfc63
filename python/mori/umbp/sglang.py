"""An SGLang HiCache storage backend (the L3 tier under SGLang's host KV pool) on the node's UMBP
store. SGLang loads it as a dynamic backend:

    python -m sglang.launch_server ... --enable-hierarchical-cache --hicache-mem-layout page_first \\
        --hicache-storage-backend dynamic --hicache-storage-backend-extra-config \\
        '{"backend_name": "mori", "module_path": "mori.umbp.sglang", "class_name": "MoriHiCacheStorage",
          "interface_v1": 1, "runtime_dir": "/run/mori"}'

interface_v1 makes SGLang's cache controller call the zero-copy batch_get_v1 / batch_set_v1 with
host-pool page indices: the pages move between the host pool and the store with one copy, by
address (the pool's get_page_buffer_meta). Without it SGLang calls batch_get / batch_set with
page tensors, which this class serves too.

extra_config keys this class reads (others are ignored): runtime_dir (morid's; default
$MORI_RUNTIME_DIR, else /run/mori), timeout_ms (each call's deadline; 0: the daemon's
kv_timeout_ms), copy_threads, key_prefix (a namespace inside the uid's keys; default the model
name).

Keys: SGLang's page hash, then the rank part (MHA: "_<tp_rank>", with "_<pp_rank>" when pipeline
parallel; MLA: none, every TP rank holds the same page, so only TP rank 0 writes), then "_k" /
"_v" for MHA's two halves, "_k" for MLA's one. A page counts as present, read or written only
when all of its parts are.

Importing this module imports neither sglang nor torch. The class MoriHiCacheStorage is made on
first access: a subclass of SGLang's HiCacheStorage when sglang can be imported (SGLang's loader
checks issubclass), else a plain class with the same methods.
"""
import logging
import sys

from .client import UMBPClient, UMBPConfig

logger = logging.getLogger(__name__)

_SGLANG_BASE = "sglang.srt.mem_cache.hicache_storage"


def _cfg(storage_config, name, default):
    return getattr(storage_config, name, default) if storage_config is not None else default


class _MoriHiCacheStorage:
    """SGLang's HiCacheStorage on mori's UMBP store (module docstring).

    MoriHiCacheStorage(storage_config=None, extra=None, *, client=None)
      storage_config: SGLang's HiCacheStorageConfig (tp_rank, tp_size, pp_rank, pp_size,
                      is_mla_model, model_name, extra_config), or None for one rank of MHA;
      extra:          what SGLang's dynamic loader passes second (a dict of keyword arguments),
                      or a host KV pool (as SGLang passes built-in backends), registered at once;
      client:         a UMBPClient to use instead of opening one from extra_config.
    Raises MoriError when the store cannot be opened (MORI_ECONN: no morid; MORI_ENOTSUP: morid
    runs without a store).
    """

    def __init__(self, storage_config=None, extra=None, *, client=None):
        self.storage_config = storage_config
        xc = dict(_cfg(storage_config, "extra_config", None) or {})
        self.is_mla = bool(_cfg(storage_config, "is_mla_model", False))
        self.tp_rank = int(_cfg(storage_config, "tp_rank", 0))
        self.tp_size = int(_cfg(storage_config, "tp_size", 1))
        pp_rank, pp_size = int(_cfg(storage_config, "pp_rank", 0)), int(_cfg(storage_config, "pp_size", 1))
        if _cfg(storage_config, "should_split_heads", False):
            raise ValueError("MoriHiCacheStorage: split heads (tp_lcm_size) are not supported")
        if self.is_mla:
            rank = "_%d" % pp_rank if pp_size > 1 else ""
            self._parts = (rank + "_k",)
        else:
            rank = "_%d_%d" % (self.tp_rank, pp_rank) if pp_size > 1 else "_%d" % self.tp_rank
            self._parts = (rank + "_k", rank + "_v")
        model = _cfg(storage_config, "model_name", None)
        prefix = xc.get("key_prefix", "-".join(model.split("/")) if model else "")
        self._prefix = "%s/" % prefix if prefix else ""
        self._owns = client is None
        self.client = client if client is not None else UMBPClient(UMBPConfig(
            runtime_dir=xc.get("runtime_dir"), name="sglang-hicache-tp%d" % self.tp_rank,
            timeout_ms=int(xc.get("timeout_ms", 0)), copy_threads=int(xc.get("copy_threads", 0))))
        self.mem_pool_host = None
        self._registered = None
        if extra is not None and not isinstance(extra, dict):
            self.register_mem_pool_host(extra)

    # ---- keys ----

    def _keys(self, keys):
        """The store's keys of SGLang's page keys: len(self._parts) per page, in order."""
        p = self._prefix
        return [p + k + part for k in keys for part in self._parts]

    def _per_page(self, flags):
        m = len(self._parts)
        return [all(flags[i:i + m]) for i in range(0, len(flags), m)]

    def _mla_follower(self):
        return self.is_mla and self.tp_rank != 0

    # ---- the host pool ----

    def register_mem_pool_host(self, mem_pool_host):
        """Take SGLang's host KV pool (page_first or page_first_direct layout): its pages are
        what batch_get_v1 / batch_set_v1 move. Its buffer is registered with the store (optional
        for host memory: a refusal is logged, not raised)."""
        layout = getattr(mem_pool_host, "layout", "page_first")
        if layout not in ("page_first", "page_first_direct"):
            raise ValueError("MoriHiCacheStorage needs the page_first or page_first_direct layout, not %r" % layout)
        self.mem_pool_host = mem_pool_host
        buf = getattr(mem_pool_host, "kv_buffer", None)
        if buf is not None and self._registered is None:
            try:
                self.client.register_memory(buf)
                self._registered = buf
            except Exception as e:  # noqa: BLE001 (registration is an optimisation)
                logger.warning("MoriHiCacheStorage: host pool not registered (%s); copies stage instead", e)

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    def _meta(self, keys, host_indices):
        """(store keys, addresses, sizes in bytes) of the pages at host_indices, by the pool's
        get_page_buffer_meta (one address per part of a page)."""
        pool = self.mem_pool_host
        if pool is None:
            raise RuntimeError("MoriHiCacheStorage: no host pool (register_mem_pool_host first)")
        pages = len(host_indices) // pool.page_size
        if pages != len(keys):
            raise ValueError("%d keys for %d host pages" % (len(keys), pages))
        ptrs, sizes = pool.get_page_buffer_meta(host_indices)
        skeys = self._keys(keys)
        if isinstance(sizes, int):
            sizes = [sizes] * len(skeys)
        elif len(sizes) == 1:
            sizes = list(sizes) * len(skeys)
        if not len(skeys) == len(ptrs) == len(sizes):
            raise ValueError("host pool gave %d addresses and %d sizes for %d keys" % (len(ptrs), len(sizes),
                                                                                      len(skeys)))
        return skeys, [int(p) for p in ptrs], [int(s) for s in sizes]

    # ---- the zero-copy interface (extra_config interface_v1) ----

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Read the pages of keys into the host pool at host_indices: [True per page read]."""
        if not keys:
            return []
        skeys, ptrs, sizes = self._meta(keys, host_indices)
        return self._per_page(self.client.batch_get_into_ptr(skeys, ptrs, sizes))

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Store the host pool's pages at host_indices under keys: [True per page stored]. Each
        page's depth in its prefix chain (len(extra_info.prefix_keys) + its position, when SGLang
        gives the prefix) goes to the store's prefix-aware eviction."""
        if not keys:
            return []
        if self._mla_follower():
            return [True] * len(keys)
        skeys, ptrs, sizes = self._meta(keys, host_indices)
        prefix = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        if prefix is None:
            ok = self.client.batch_put_from_ptr(skeys, ptrs, sizes)
        else:
            m = len(self._parts)
            depths = [len(prefix) + i // m for i in range(len(skeys))]
            ok = self.client.batch_put_from_ptr_with_depth(skeys, ptrs, sizes, depths)
        return self._per_page(ok)

    def batch_exists(self, keys, extra_info=None):
        """How many of keys, from the first, have every part stored (SGLang's prefix match)."""
        if not keys:
            return 0
        return self.client.batch_exists_consecutive(self._keys(keys)) // len(self._parts)

    # ---- the copying interface (SGLang's generic path and direct callers) ----
    # A page here is one tensor or buffer holding all of its parts back to back (SGLang's flat
    # data page: K then V), split into equal parts under the same keys as the zero-copy path.

    def _split(self, objs, writable, what):
        """(part addresses, part sizes, keep) of whole-page tensors or buffers."""
        from .buffers import span
        m = len(self._parts)
        addrs, sizes, keep = [], [], []
        for i, o in enumerate(objs):
            a, n, k = span(o, writable, "%s[%d]" % (what, i))
            if n % m:
                raise ValueError("%s[%d]: %d bytes do not split into %d equal parts" % (what, i, n, m))
            addrs += [a + j * (n // m) for j in range(m)]
            sizes += [n // m] * m
            keep.append(k)
        return addrs, sizes, keep

    def get(self, key, target_location=None, target_sizes=None):
        """key's page into target_location: a tensor or buffer, or an address with target_sizes
        its capacity in bytes. Returns target_location, or None when the page is not read."""
        if target_location is None:
            return None
        if target_sizes is not None:
            return target_location if self.batch_get([key], [target_location], [target_sizes]) == 1 else None
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Pages of keys. With addresses and sizes in bytes (ROCm/mori's UMBPStore form): how
        many pages, from the first, were read. With tensors or buffers: the list of them, None
        where a page was not read (SGLang's generic path)."""
        if not keys:
            return 0 if target_sizes is not None else []
        if target_sizes is not None:
            addrs, sizes, keep = self._split([(int(p), int(s)) for p, s in zip(target_locations, target_sizes)],
                                             True, "target_locations")
        else:
            addrs, sizes, keep = self._split(list(target_locations), True, "target_locations")
        ok = self._per_page(self.client.batch_get_into_ptr(self._keys(keys), addrs, sizes))
        del keep
        if target_sizes is not None:
            return ok.index(False) if False in ok else len(ok)
        return [t if good else None for t, good in zip(target_locations, ok)]

    def set(self, key, value=None, target_location=None, target_sizes=None):
        """Store one page: value (a tensor or buffer), or target_sizes bytes at the address
        target_location. True when stored."""
        if value is None and (target_location is None or target_sizes is None):
            return False
        return self.batch_set([key], None if value is None else [value],
                              None if value is not None else [target_location],
                              None if value is not None else [target_sizes])

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        """Store pages: values (tensors or buffers), or target_sizes[i] bytes at the addresses
        target_locations[i]. True when every page was stored."""
        if not keys:
            return False
        if self._mla_follower():
            return True
        if values is not None:
            addrs, sizes, keep = self._split(list(values), False, "values")
        else:
            addrs, sizes, keep = self._split([(int(p), int(s)) for p, s in zip(target_locations, target_sizes)],
                                             False, "target_locations")
        ok = self.client.batch_put_from_ptr(self._keys(keys), addrs, sizes)
        del keep
        return all(ok)

    def exists(self, key):
        """True when every part of key's page is stored."""
        return all(self.client.batch_exists(self._keys([key])))

    # ---- the rest of SGLang's interface ----

    def remove(self, keys):
        """Remove the pages of keys from the store (not SGLang's: for callers cleaning up their
        own pages); how many of their parts were there."""
        return sum(self.client.remove(k) for k in self._keys(keys))

    def clear(self):
        """Remove every key of this uid from the store (SGLang's cache reset)."""
        self.client.clear()

    def flush(self):
        return self.client.flush()

    def get_stats(self):
        """None: SGLang's storage metrics are counted by SGLang; the store's own are
        umbp_stats()."""
        return None

    def umbp_stats(self):
        """The store's counters for this uid (mori.umbp.UMBPStats)."""
        return self.client.stats()

    def close(self):
        """Deregister the host pool and close the client this backend opened."""
        c, self.client = self.client, None
        if c is None:
            return
        if self._registered is not None:
            try:
                c.deregister_memory(self._registered)
            except Exception:  # noqa: BLE001 (closing anyway)
                pass
            self._registered = None
        if self._owns:
            c.close()


def _make():
    base = object
    try:
        __import__(_SGLANG_BASE)
        base = sys.modules[_SGLANG_BASE].HiCacheStorage
    except ImportError:
        pass
    bases = (_MoriHiCacheStorage,) if base is object else (_MoriHiCacheStorage, base)
    cls = type("MoriHiCacheStorage", bases, {"__module__": __name__, "__doc__": _MoriHiCacheStorage.__doc__})
    return cls


def __getattr__(name):
    if name == "MoriHiCacheStorage":
        cls = globals().get("_made")
        if cls is None:
            cls = globals()["_made"] = _make()
        return cls
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["MoriHiCacheStorage"]
