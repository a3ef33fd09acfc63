"""mori.umbp: the node's tiered KV-cache store (UMBP: a DRAM tier morid shares with the local
processes of each uid, and an SSD tier), with ROCm/mori's UMBPClient names, over libmori
(include/mori_umbp.h; docs/python.md).

    from mori.umbp import UMBPClient
    with UMBPClient(runtime_dir="/run/mori") as c:
        c.put("block-0", kv_page)                   # bytes, bytearray, numpy array, torch tensor
        c.get("block-0")                            # bytes, or None for a miss
        c.get("block-0", out)                       # into a buffer/array/tensor: its length in bytes
        st = c.batch_put(keys, pages, depths=[0, 1, 2])   # one status per key (MORI_OK, ...)
        c.batch_exists_consecutive(keys)            # how many leading keys are stored (any node's
                                                    # with morid's kv_index = redis://...)
        c.report_external_kv_blocks(hashes, UMBPTierType.HBM)   # external KV, for schedulers
        c.match_external_kv(hashes)                 # [UMBPExternalKvNodeMatch] per node
        c.batch_get_into_ptr(keys, ptrs, sizes)     # ROCm/mori's pointer calls: [bool per key]

The store outlives its clients: values put stay after close(); processes of one uid share keys.
Store sizes and policies are morid's settings (kv_dram_bytes, kv_ssd_dir, kv_policy, ...).
mori.umbp.sglang holds a HiCache storage backend for SGLang (--hicache-storage-backend dynamic).
"""
from ..errors import MoriError  # noqa: F401
from .client import (KEY_MAX, UMBPClient, UMBPConfig, UMBPExternalKvHitCountEntry, UMBPExternalKvNodeMatch,
                     UMBPPin, UMBPStats, UMBPTierType)

__all__ = ["UMBPClient", "UMBPConfig", "UMBPExternalKvHitCountEntry", "UMBPExternalKvNodeMatch", "UMBPPin",
           "UMBPStats", "UMBPTierType", "KEY_MAX", "MoriError"]

for _cls in (UMBPClient, UMBPConfig, UMBPExternalKvHitCountEntry, UMBPExternalKvNodeMatch, UMBPPin, UMBPStats,
             UMBPTierType):
    _cls.__module__ = __name__
del _cls
