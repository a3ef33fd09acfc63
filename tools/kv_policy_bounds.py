#!/usr/bin/env python3
"""Upper bounds on the hit rate of eviction policies that know only what a KV store is told,
beside the exact LRU and Belady references, on a request trace (docs/umbp-policy.md).

    tools/kv_policy_bounds.py TRACE [--capacity 1000,10000,50000]

TRACE: JSON lines with a "hash_ids" array per request (the Mooncake trace format). The trace is
one sequence of block references (request after request, each prompt's ids in order), each a
tick; capacities count blocks. Rates are % of all references, as mori-bench kv --sim prints them.

Printed per capacity:
  ref: lru, ref: belady      exact LRU and Belady's MIN (the same figures as mori-bench kv --sim)
  oracle-lru: dead bypass    LRU where a reference with no later use of its block drops it (or
                             does not insert it): LRU told, at every reference, whether the block
                             will be used again
  oracle-lru: fewest left    evicts the block with the fewest references left in the trace, the
                             least recent among those: knows how often each block returns, not when
  bound: F                   the best stationary rule over the features F and the age: after a
                             reference of class c (its features), the block is kept for at most
                             a_c ticks, a_c chosen per class with hindsight; the capacity holds on
                             average over the trace (a relaxation of holding it at every tick), and
                             thresholds may be mixed (the LP's concave hull). So no rule of that
                             kind does better on this trace: the figure is an upper bound on it.
Features (what the store sees after a reference): refs = references of the block so far
(1, 2, 3, 4+: 1 = just put, more = it was read), depth = its index in the prompt (0, 1-7, 8-31,
32-63, 64+), tail = last block of its prompt, turn = the prompt's second block was seen before
(a conversation's later turn); "per tenth" lets the thresholds change ten times over the trace
(one budget for the whole trace: looser still). Oracle features (no store sees them): reused = the block is
referenced again; left = references left (0, 1, 2, 3+)."""
import argparse
import bisect
import collections
import heapq
import json
import sys

NEVER = float("inf")


def load(path):
    ids, reqs, raw = [], [], {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                h = json.loads(line)["hash_ids"]
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{lineno}: no hash_ids array ({e})")
            start = len(ids)
            for x in h:
                ids.append(raw.setdefault(x, len(raw)))
            reqs.append((start, len(ids)))
    return ids, reqs


def next_uses(ids):
    nxt, seen = [NEVER] * len(ids), {}
    for i in range(len(ids) - 1, -1, -1):
        nxt[i] = seen.get(ids[i], NEVER)
        seen[ids[i]] = i
    return nxt


def lru(ids, cap, nxt=None, dead_bypass=False):
    c, hits = collections.OrderedDict(), 0
    for i, x in enumerate(ids):
        if x in c:
            hits += 1
            c.move_to_end(x)
        else:
            c[x] = True
            if len(c) > cap:
                c.popitem(last=False)
        if dead_bypass and nxt[i] == NEVER:
            del c[x]
    return hits


def belady(ids, cap, nxt):
    resident, heap, hits = {}, [], 0  # resident: id -> its next use; heap of (-next use, id)
    for i, x in enumerate(ids):
        if x in resident:
            hits += 1
        elif len(resident) == cap:
            while True:
                nu, v = heapq.heappop(heap)
                if resident.get(v) == -nu:
                    del resident[v]
                    break
        resident[x] = nxt[i]
        heapq.heappush(heap, (-nxt[i], x))
    return hits


def fewest_left(ids, cap, nxt):
    """Evict the resident block with the fewest references left, least recent first among ties."""
    left = collections.Counter(ids)
    resident, heap, hits = {}, [], 0  # resident: id -> (left, last use)
    for i, x in enumerate(ids):
        left[x] -= 1
        if x in resident:
            hits += 1
        elif len(resident) == cap:
            while True:
                k = heapq.heappop(heap)
                if resident.get(k[1]) == (k[0][0], k[0][1]):
                    del resident[k[1]]
                    break
        key = (left[x], i)
        resident[x] = key
        heapq.heappush(heap, (key, x))
    return hits


def features(ids, reqs):
    """Per reference: (refs so far, depth, tail, later turn) bucketed."""
    count, seen, out = collections.Counter(), set(), [None] * len(ids)
    for start, end in reqs:
        turn = int(end - start > 1 and ids[start + 1] in seen)
        for i in range(start, end):
            x = ids[i]
            count[x] += 1
            d = i - start
            out[i] = (min(count[x], 4), 0 if d == 0 else 1 if d < 8 else 2 if d < 32 else 3 if d < 64 else 4,
                      int(i == end - 1), turn)
        seen.update(ids[start:end])
    return out


def hull_segments(gaps, residuals):
    """A class's (cost, hits) points for thresholds 0 and each gap, and the segments of their
    upper concave hull as (slope, cost, hits). gaps: finite reuse gaps; residuals: ticks left in
    the trace after references never used again (they cost min(threshold, residual))."""
    g = sorted(gaps)
    r = sorted(residuals)
    rpre = [0]
    for v in r:
        rpre.append(rpre[-1] + v)
    pts, gsum = [(0, 0)], 0
    i = 0
    while i < len(g):
        a = g[i]
        while i < len(g) and g[i] == a:
            gsum += g[i]
            i += 1
        k = bisect.bisect_right(r, a)  # residuals <= a cost themselves, the rest a each
        cost = gsum + a * (len(g) - i) + rpre[k] + a * (len(r) - k)
        pts.append((cost, i))
    hull = []
    for p in pts:  # upper hull, costs increasing
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (y2 - y1) * (p[0] - x1) <= (p[1] - y1) * (x2 - x1):
                hull.pop()
            else:
                break
        hull.append(p)
    return [((y2 - y1) / (x2 - x1), x2 - x1, y2 - y1) for (x1, y1), (x2, y2) in zip(hull, hull[1:]) if x2 > x1]


def class_bound(ids, nxt, key, cap):
    """Most hits of per-class age thresholds with sum of occupancy <= cap x ticks (the LP value)."""
    T = len(ids)
    gaps, res = collections.defaultdict(list), collections.defaultdict(list)
    for i in range(T):
        c = key(i)
        if nxt[i] == NEVER:
            res[c].append(T - 1 - i)
        else:
            gaps[c].append(nxt[i] - i)
    segs = []
    for c in set(gaps) | set(res):
        segs.extend(hull_segments(gaps[c], res[c]))
    segs.sort(key=lambda s: -s[0])
    budget, hits = cap * T, 0.0
    for slope, cost, h in segs:
        if cost <= budget:
            budget -= cost
            hits += h
        else:
            hits += slope * budget
            break
    return hits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--capacity", default="1000,10000,50000")
    a = ap.parse_args()
    caps = [int(c) for c in a.capacity.split(",")]
    ids, reqs = load(a.trace)
    nxt = next_uses(ids)
    feat = features(ids, reqs)
    left = collections.Counter()
    remaining = [0] * len(ids)
    for i in range(len(ids) - 1, -1, -1):
        remaining[i] = min(left[ids[i]], 3)
        left[ids[i]] += 1
    N = len(ids) / 100
    print(f"# trace: {a.trace}: {len(reqs)} requests, {len(ids)} block references, {len(set(ids))} distinct")
    print("# % of all block references; bounds: best per-class age threshold, capacity held on average")
    bounds = [
        ("bound: age only", lambda i: 0),
        ("bound: refs,depth,tail,turn", lambda i: feat[i]),
        ("bound: same, per tenth of trace", lambda i: (feat[i], i * 10 // len(ids))),
        ("bound: + reused (oracle)", lambda i: (feat[i], nxt[i] != NEVER)),
        ("bound: + left (oracle)", lambda i: (feat[i], remaining[i])),
    ]
    print(f"{'capacity/blocks':<16} {'figure':<32} {'%':>7}")
    for cap in caps:
        rows = [("ref: lru (exact)", lru(ids, cap)), ("ref: belady (MIN)", belady(ids, cap, nxt)),
                ("oracle-lru: dead bypass", lru(ids, cap, nxt, dead_bypass=True)),
                ("oracle-lru: fewest left", fewest_left(ids, cap, nxt))]
        rows[2:2] = [("target: half the gap", (rows[0][1] + rows[1][1]) / 2)]
        rows += [(name, class_bound(ids, nxt, k, cap)) for name, k in bounds]
        for name, h in rows:
            print(f"{cap:<16} {name:<32} {h / N:7.2f}", flush=True)


if __name__ == "__main__":
    main()
