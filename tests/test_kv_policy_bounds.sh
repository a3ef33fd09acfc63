#!/usr/bin/env bash
# tools/kv_policy_bounds.py on a synthetic multi-turn trace: its exact LRU and Belady equal
# mori-bench kv --sim's (two implementations, Python and C); its oracle LRU lies between LRU and
# the infinite cache; its bounds grow as the classes refine (a rule for coarse classes is one for
# fine classes) and stay within the references that have a later use.
source "$(dirname "$0")/testlib.bash"
BENCH=$B/mori-bench
[ -x "$BENCH" ] || fail "$BENCH is not built"
command -v python3 > /dev/null || skip "python3 not installed (tools/install-deps installs it)"
python3 - "$T/trace.jsonl" << 'PY' || fail "could not write the trace"
import json, random, sys
rng, convs, nxt = random.Random(7), [], 3
with open(sys.argv[1], "w") as f:
    for r in range(1500):
        if not convs or rng.random() < 0.3:
            convs.append([0, 1])  # a shared system prompt
        c = rng.choice(convs[-40:])
        if len(c) > 2 and rng.random() < 0.5:
            c.pop()  # the last block was partial
        for _ in range(rng.randint(1, 4)):
            c.append(nxt)
            nxt += 1
        f.write(json.dumps({"hash_ids": c}) + "\n")
PY
for cap in 50 300; do
	sim=$("$BENCH" kv --sim "$T/trace.jsonl" --capacity $cap --policy lru 2>&1) || fail "mori-bench: $sim"
	bnd=$(python3 tools/kv_policy_bounds.py "$T/trace.jsonl" --capacity $cap 2>&1) || fail "bounds: $bnd"
	row() { awk -v k="$2" '{ l = $0; sub(/^[0-9]+ +/, "", l); if (index(l, k) == 1) { print $NF; exit } }' <<< "$1"; }
	for ref in "ref: lru (exact)" "ref: belady (MIN)"; do
		a=$(awk -v k="$ref" '{ l = $0; sub(/^[0-9]+ +/, "", l); if (index(l, k) == 1) { print $(NF - 1); exit } }' <<< "$sim")
		b=$(row "$bnd" "$ref")
		[ -n "$a" ] && [ "$a" = "$b" ] || fail "capacity $cap, $ref: mori-bench $a %, kv_policy_bounds.py $b %"
	done
	inf=$(awk '/ref: infinite/ { print $(NF - 1); exit }' <<< "$sim")
	lru=$(row "$bnd" "ref: lru (exact)")
	orc=$(row "$bnd" "oracle-lru: dead bypass")
	age=$(row "$bnd" "bound: age only")
	fea=$(row "$bnd" "bound: refs,depth,tail,turn")
	ten=$(row "$bnd" "bound: same, per tenth")
	reu=$(row "$bnd" "bound: + reused")
	awk -v l="$lru" -v o="$orc" -v i="$inf" -v a="$age" -v f="$fea" -v t="$ten" -v r="$reu" \
		'BEGIN { exit !(l <= o && o <= i && a <= f && f <= t && f <= r && r <= i && a > 0) }' ||
		fail "capacity $cap: lru $lru, oracle lru $orc, infinite $inf; bounds age $age, features $fea, per tenth $ten, reused $reu"
	pass "capacity $cap: lru and belady equal mori-bench's ($lru %); oracle lru $orc %; bounds $age <= $fea <= $ten, $reu <= $inf %"
done
exit 0
