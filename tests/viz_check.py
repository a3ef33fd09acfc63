#!/usr/bin/env python3
"""Check a Perfetto/Chrome trace JSON that mori-viz wrote from the copy kernel's MORI-VIZ buffer
(tests/device-run.sh observe): it loads as JSON, has a named track per block (process) and per
warp (thread), and the copy kernel's events on them: copy_batch and copy_desc spans with
non-negative durations, each copy_desc inside a copy_batch of its warp, copy_tail instants.
Prints one summary line; exits 1 on the first thing missing."""
import collections
import json
import sys


def fail(msg):
    print("trace json: FAIL:", msg)
    sys.exit(1)


def main(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    procs = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    instants = [e for e in events if e.get("ph") == "i"]
    names = collections.Counter(e["name"] for e in spans + instants)
    if not procs or not threads:
        fail("no block or warp tracks")
    for want in ("copy_batch", "copy_desc", "copy_tail"):
        if not names[want]:
            fail("no %s events (have %s)" % (want, dict(names)))
    for e in spans + instants:
        if (e["pid"], e["tid"]) not in threads:
            fail("event on an unnamed track: %r" % e)
    if any(e["dur"] < 0 for e in spans):
        fail("negative duration")
    batches = collections.defaultdict(list)
    for e in spans:
        if e["name"] == "copy_batch":
            batches[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    # A warp's ring keeps its newest events: the oldest retained copy_desc spans may belong to a
    # launch whose copy_batch begin was overwritten. Only spans after the warp's first retained
    # copy_batch begin must lie inside one.
    inside = outside = 0
    for e in spans:
        if e["name"] != "copy_desc" or (e["pid"], e["tid"]) not in batches:
            continue
        if e["ts"] < min(b0 for b0, _ in batches[(e["pid"], e["tid"])]):
            continue
        ok = any(b0 - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= b1 + 1e-3 for b0, b1 in batches[(e["pid"], e["tid"])])
        inside += ok
        outside += not ok
    if outside:
        fail("%d copy_desc spans outside their warp's copy_batch" % outside)
    print("trace json: ok: %d blocks, %d warps, %d spans, %d instants, %s; %d copy_desc spans checked inside "
          "their copy_batch" % (len(procs), len(threads), len(spans), len(instants), dict(names), inside))


if __name__ == "__main__":
    main(sys.argv[1])
