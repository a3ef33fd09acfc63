"""The clients of tests/test_kv_cluster_netns.sh (a helper, not a test): each command opens
mori.umbp on one node's runtime dir, does one thing and prints a line the script checks.
Values are computed from their keys (sha256), so a check needs nothing the store told it.

    kvcluster.py put RUN PREFIX N              put PREFIX-0..N-1 -> "put N"
    kvcluster.py get RUN PREFIX N              get them back, byte for byte -> "got N"
    kvcluster.py count RUN PREFIX N            exists over them -> "present P consecutive C"
                                               (or "error CODE MESSAGE")
    kvcluster.py prefix RUN A B N M            the keys A-0..N-1 then B-0..M-1 -> "consecutive C"
    kvcluster.py report RUN PREFIX N TIER      report them, print "reported", hold until stdin closes
    kvcluster.py match RUN PREFIX N [hit]      -> "node TIER COUNT" per node and tier, then "end"
    kvcluster.py hits RUN PREFIX N             -> "hits KEY COUNT" per counted key, then "end"
    kvcluster.py ext RUN0 RUN1                 report, revoke, revoke_all_at_tier, a dead client
"""
import hashlib
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from mori.errors import MoriError  # noqa: E402
from mori.umbp import UMBPClient, UMBPTierType  # noqa: E402


def keys(prefix, n):
    return ["%s-%d" % (prefix, i) for i in range(n)]


def value(key):
    d = hashlib.sha256(key.encode()).digest()
    return (d * 8)[:200 + d[0]]


def client(run):
    return UMBPClient(runtime_dir=run, name="kvcluster")


def deadline_loop(what, fn, seconds=20):
    """fn() until it returns true, within seconds (scaled by MORI_SLOW); the last result."""
    end = time.monotonic() + seconds * int(os.environ.get("MORI_SLOW", "1"))
    while True:
        r = fn()
        if r or time.monotonic() > end:
            return r
        time.sleep(0.05)


def matches(c, ks, hit=False):
    """{(node, tier): count} of match_external_kv(ks)."""
    out = {}
    for m in c.match_external_kv(ks, count_as_hit=hit):
        assert m.peer_address == m.node_id
        for t, hs in m.hashes_by_tier.items():
            assert all(h in ks for h in hs)
            out[(m.node_id, int(t))] = len(hs)
        assert m.matched_hash_count() == len({h for hs in m.hashes_by_tier.values() for h in hs})
    return out


def main(a):
    cmd = a[0]
    if cmd == "put":
        with client(a[1]) as c:
            ks = keys(a[2], int(a[3]))
            for i in range(0, len(ks), 500):
                st = c.batch_put(ks[i:i + 500], [value(k) for k in ks[i:i + 500]])
                assert all(s == 0 for s in st), st
            print("put", len(ks))
    elif cmd == "get":
        with client(a[1]) as c:
            n = 0
            for k in keys(a[2], int(a[3])):
                v = c.get(k)
                assert v == value(k), "%s: %r" % (k, v[:16] if v else v)
                n += 1
            print("got", n)
    elif cmd == "count":
        with client(a[1]) as c:
            ks = keys(a[2], int(a[3]))
            try:
                p = sum(c.batch_exists(ks))
                print("present", p, "consecutive", c.batch_exists_consecutive(ks))
            except MoriError as e:
                print("error", e.code, str(e))
    elif cmd == "prefix":
        with client(a[1]) as c:
            print("consecutive", c.batch_exists_consecutive(keys(a[2], int(a[4])) + keys(a[3], int(a[5]))))
    elif cmd == "report":
        with client(a[1]) as c:
            c.report_external_kv_blocks(keys(a[2], int(a[3])), UMBPTierType(int(a[4])))
            print("reported", flush=True)
            sys.stdin.read()
    elif cmd == "match":
        with client(a[1]) as c:
            ks = keys(a[2], int(a[3]))
            for (node, tier), n in sorted(matches(c, ks, len(a) > 4).items()):
                print("node", node, tier, n)
            print("end")
    elif cmd == "hits":
        with client(a[1]) as c:
            for e in c.get_external_kv_hit_counts(keys(a[2], int(a[3]))):
                print("hits", e.hash, e.hit_count_total)
            print("end")
    elif cmd == "ext":
        ext(a[1], a[2])
    else:
        raise SystemExit("unknown command %r" % cmd)


def ext(run0, run1):
    """External KV between two nodes: reports union per node and tier, revokes are the
    reporter's own, revoke_all_at_tier counts, hit counters count matched keys once per match,
    survive revokes and skip unmatched keys, and a dead client's reports leave."""
    ks = keys("ext", 40)
    c0, c1 = client(run0), client(run1)
    n0 = n1 = None
    try:
        c0.report_external_kv_blocks(ks[0:20], UMBPTierType.HBM)
        c0.report_external_kv_blocks(ks[10:20], UMBPTierType.DRAM)
        c0.report_external_kv_blocks(ks[0:20], UMBPTierType.HBM)  # again: nothing changes
        c1.report_external_kv_blocks(ks[15:30], UMBPTierType.DRAM)
        want = lambda m: sorted(v for (n, t), v in m.items())  # noqa: E731
        m = deadline_loop("reports", lambda: (lambda x: x if want(x) == [10, 15, 20] else None)(matches(c1, ks)))
        assert m and want(m) == [10, 15, 20], m
        n0 = [n for (n, t) in m if t == int(UMBPTierType.HBM)][0]
        n1 = [n for (n, t), v in m.items() if v == 15][0]
        assert m == {(n0, 1): 20, (n0, 2): 10, (n1, 2): 15}, m
        # a match that counts: keys 0..29 matched once each (however many nodes or tiers), 30..39 not
        matches(c0, ks, hit=True)
        matches(c0, ks[:5], hit=True)
        h = {e.hash: e.hit_count_total for e in c1.get_external_kv_hit_counts(ks + ks[:3])}
        assert h == {k: (2 if i < 5 else 1) for i, k in enumerate(ks[:30])}, h
        # revoke: c1 cannot revoke c0's reports; c0's own DRAM revoke leaves its HBM
        c1.revoke_external_kv_blocks(ks[0:20], UMBPTierType.HBM)
        c0.revoke_external_kv_blocks(ks[10:15], UMBPTierType.DRAM)
        assert c0.revoke_all_at_tier(UMBPTierType.SSD) == 0
        m = deadline_loop("revoke", lambda: (lambda x: x if x.get((n0, 2)) == 5 else None)(matches(c1, ks)))
        assert m == {(n0, 1): 20, (n0, 2): 5, (n1, 2): 15}, m
        assert c0.revoke_all_at_tier(UMBPTierType.HBM) == 20
        m = deadline_loop("revoke_all", lambda: (lambda x: x if (n0, 1) not in x else None)(matches(c1, ks)))
        assert m == {(n0, 2): 5, (n1, 2): 15}, m
        # counters survive revokes
        assert {e.hash: e.hit_count_total for e in c1.get_external_kv_hit_counts(ks[:1])} == {ks[0]: 2}
        # a client that dies: its reports leave; another client's report of the same key stays
        p = subprocess.Popen([sys.executable, __file__, "report", run1, "ext", "40", "3"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "reported"
        m = deadline_loop("report of a child", lambda: (lambda x: x if (n1, 3) in x else None)(matches(c0, ks)))
        assert m and m[(n1, 3)] == 40, m
        p.kill()
        p.wait()
        m = deadline_loop("dead client", lambda: (lambda x: x if (n1, 3) not in x else None)(matches(c0, ks)))
        assert m == {(n0, 2): 5, (n1, 2): 15}, m
        # bad input: nothing recorded
        for bad in (lambda: c0.report_external_kv_blocks(["x"], 0), lambda: c0.report_external_kv_blocks([b""], 1),
                    lambda: c0.report_external_kv_blocks(["x" * 257], 2)):
            try:
                bad()
                raise AssertionError("bad report accepted")
            except (MoriError, ValueError, TypeError):
                pass
        print("ext ok", n0, n1)
    finally:
        c0.close()
        c1.close()


if __name__ == "__main__":
    main(sys.argv[1:])
