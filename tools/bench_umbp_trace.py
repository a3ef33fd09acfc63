#!/usr/bin/env python3
"""The Mooncake trace against UMBP as a serving stack feeds it, on one node or spread over a
cluster (run by tools/bench-umbp-trace-netns.sh, which makes the nodes).

Each request (its hash_ids are the keys of its prompt's blocks) goes to one node; there the
client asks which prefix of its blocks the store holds (batch_exists_consecutive: this node and,
with the cluster index, every other), gets that prefix (batch_get: remote gets for blocks other
nodes hold) and puts the rest with their depths. A block reference is a hit when its get returned
the value. Routing of requests to nodes:
  rr        round robin
  affinity  the node whose external-KV reports match the longest prefix of the request
            (match_external_kv, as a scheduler would ask; ties and no match: round robin); after
            its puts the serving client reports the request's blocks (report_external_kv_blocks)
Prints one JSON line: mode, nodes, requests, block references, hits, hit rate, seconds.

  bench_umbp_trace.py --trace FILE --requests N --block-bytes B --mode rr|affinity RUNTIME_DIR...
"""
import argparse
import json
import sys
import time

from mori.umbp import UMBPClient, UMBPTierType


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--block-bytes", type=int, default=4096)
    ap.add_argument("--mode", choices=("rr", "affinity"), default="rr")
    ap.add_argument("runtime_dirs", nargs="+")
    a = ap.parse_args()
    clients = [UMBPClient(runtime_dir=rt, name="trace%d" % i, timeout_ms=20000) for i, rt in enumerate(a.runtime_dirs)]
    node_of = {}
    if a.mode == "affinity":
        # a node's name in the index is its peer address: learn it from one report each
        for i, c in enumerate(clients):
            probe = b"bench-umbp-trace/probe/%d" % i
            c.report_external_kv_blocks([probe], UMBPTierType.DRAM)
            for _ in range(200):
                m = clients[0].match_external_kv([probe])
                if m:
                    node_of[m[0].node_id] = i
                    break
                time.sleep(0.05)
            c.revoke_external_kv_blocks([probe], UMBPTierType.DRAM)
    value = bytes(a.block_bytes)
    refs = hits = reqs = 0
    rr = 0
    t0 = time.time()
    with open(a.trace) as f:
        for line in f:
            if reqs >= a.requests:
                break
            ids = json.loads(line).get("hash_ids") or []
            if not ids:
                continue
            reqs += 1
            keys = [b"%d" % h for h in ids]
            target = rr % len(clients)
            rr += 1
            if a.mode == "affinity":
                best = 0
                for m in clients[0].match_external_kv(keys):
                    name = m.node_id
                    held = set()
                    for hs in m.hashes_by_tier.values():
                        held.update(hs)
                    n = 0
                    while n < len(keys) and keys[n] in held:
                        n += 1
                    if n > best and name in node_of:
                        best, target = n, node_of[name]
            c = clients[target]
            n = c.batch_exists_consecutive(keys)
            got = 0
            if n:
                outs = [bytearray(a.block_bytes) for _ in range(n)]
                st = c.batch_get(keys[:n], outs)
                while got < n and st[got] == 0:
                    got += 1
            refs += len(keys)
            hits += got
            rest = keys[got:]
            if rest:
                c.batch_put(rest, [value] * len(rest), depths=list(range(got, len(keys))))
            if a.mode == "affinity":
                c.report_external_kv_blocks(keys, UMBPTierType.DRAM)
    secs = time.time() - t0
    print(json.dumps({"mode": a.mode, "nodes": len(clients), "requests": reqs, "block_refs": refs, "hits": hits,
                      "hit_rate": round(100.0 * hits / refs, 2) if refs else 0.0, "seconds": round(secs, 1)}))
    for c in clients:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
