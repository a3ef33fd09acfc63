#!/usr/bin/env bash
# The Mooncake trace's first requests through morid's store in its LRU mode (mori-bench kv --sim
# TRACE --store): the store's per-block hit rate against an exact LRU of the same block ids
# computed here in Python, within 1 percentage point; every value the replay got back carries its
# block id (the tool checks it and fails otherwise).
source "$(dirname "$0")/testlib.bash"
BENCH=$B/mori-bench
[ -x "$BENCH" ] || fail "$BENCH is not built"
TRACE=${MORI_TRACE:-$ROOT/../shared/data/mooncake_conversation_trace.jsonl}
[ -r "$TRACE" ] || skip "trace $TRACE absent"
command -v python3 > /dev/null || skip "python3 not installed (tools/install-deps installs it)"
N=1500
CAP=500
head -n $N "$TRACE" > "$T/trace.jsonl"
want=$(python3 - "$T/trace.jsonl" $CAP << 'PY'
import collections, json, sys
cache, hits, refs = collections.OrderedDict(), 0, 0
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    for b in json.loads(line)["hash_ids"]:
        refs += 1
        if b in cache:
            hits += 1
            cache.move_to_end(b)
        else:
            cache[b] = 1
            if len(cache) > int(sys.argv[2]):
                cache.popitem(last=False)
print("%.2f" % (hits * 100.0 / refs))
PY
) || fail "python3 could not read the trace"
start_listener
start_morid --kv-dram-bytes $((CAP * 64)) --kv-high-watermark 100 --kv-low-watermark 100 --kv-policy lru
out=$(timeout $((300 * SLOW)) "$BENCH" kv --sim "$T/trace.jsonl" --store "$RUN" --value-bytes 64 --policy lru 2>&1)
rc=$?
[ $rc = 0 ] || fail "mori-bench kv --sim --store: exit $rc: $out"
grep -q "capacity $CAP blocks" <<< "$out" || fail "the store's capacity is not $CAP blocks: $out"
got=$(awk '$2 == "morid:" && $3 == "lru" { print $4 }' <<< "$out")
[ -n "$got" ] || fail "no morid row: $out"
awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1.0) }' ||
	fail "morid's LRU hit rate $got % is not within 1 point of the exact LRU's $want %: $out"
pass "first $N requests, $CAP blocks: morid's LRU $got %, exact LRU (computed here) $want %"
stop_morid
exit 0
