#!/usr/bin/env bash
# mori-bench kv's tier profiles against a morid with a 64 MiB DRAM store: each profile's trace
# recorded (--profile P --record FILE) and replayed (--replay FILE), every get's bytes verified
# from (key, seed). Zero failures; puts and gets equal to the trace's P and G lines (counted
# here with awk); no misses where nothing is evicted (uniform, zipf, raw: their values fit), and
# under capacity pressure (3x DRAM put) misses and hits both, and still no failure. The checker
# must see what it is for: a trace with one get's seed changed fails (exit 1, failures=1), a
# malformed line is refused (exit 2).
source "$(dirname "$0")/testlib.bash"
BENCH=$B/mori-bench
[ -x "$BENCH" ] || fail "$BENCH is not built"
start_listener
start_morid --kv-dram-bytes $((64 << 20))

result() { grep '^result: ' <<< "$1"; }
field() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" <<< "$1"; }

run_trace() { # NAME ARGS...: runs mori-bench kv ARGS, echoes its result line; fails on exit != 0
	local name=$1 out rc
	shift
	out=$(timeout $((300 * SLOW)) "$BENCH" kv --runtime-dir "$RUN" "$@" 2> "$T/$name.err")
	rc=$?
	[ $rc = 0 ] || fail "$name: mori-bench kv $*: exit $rc: $out $(cat "$T/$name.err")"
	grep -q '^speed: .* ops/s, .* GB/s .* memcpy .* GB/s$' <<< "$out" || fail "$name: no speed line: $out"
	result "$out"
}

check_counts() { # NAME TRACE RESULT
	local p g
	p=$(awk '$1 == "P"' "$2" | wc -l)
	g=$(awk '$1 == "G"' "$2" | wc -l)
	[ "$(field "$3" puts)" = "$p" ] && [ "$(field "$3" gets)" = "$g" ] ||
		fail "$1: the run counted '$3', the trace has $p puts and $g gets"
	[ "$(field "$3" failures)" = 0 ] || fail "$1: $3"
	[ "$(field "$3" hits)" -gt 0 ] || fail "$1: no hit: $3"
}

for p in uniform zipf raw; do
	tr=$T/$p.trace
	rec=$(run_trace "$p-record" --profile "$p" --keys 300 --ops 3000 --value 16K --seed 7 --record "$tr")
	[ -s "$tr" ] || fail "$p: no trace written"
	check_counts "$p record" "$tr" "$rec"
	[ "$(field "$rec" misses)" = 0 ] || fail "$p record: misses with 300 values of 16 KiB in 64 MiB: $rec"
	rep=$(run_trace "$p-replay" --replay "$tr")
	check_counts "$p replay" "$tr" "$rep"
	[ "$rep" = "$rec" ] || fail "$p: the replay counted '$rep', the recording '$rec'"
	pass "$p: recorded and replayed, $(field "$rep" gets) gets verified byte for byte, no miss"
done

tr=$T/pressure.trace
rec=$(run_trace pressure --profile pressure --value 256K --seed 3 --record "$tr")
check_counts pressure "$tr" "$rec"
keys=$(awk '$1 == "P"' "$tr" | wc -l)
[ "$keys" = $((3 * 256 + 1)) ] || fail "pressure: $keys keys, want 3 x 64 MiB / 256 KiB + 1"
[ "$(field "$rec" misses)" -gt 0 ] || fail "pressure: 3x DRAM put and nothing evicted: $rec"
rep=$(run_trace pressure-replay --replay "$tr")
check_counts "pressure replay" "$tr" "$rep"
pass "pressure: $keys values of 256 KiB through 64 MiB: $(field "$rep" hits) hits verified, $(field "$rep" misses) misses"

# a get whose seed no put used: its bytes differ, the replay says so and exits 1
awk '!done && $1 == "G" { $4 = $4 + 1; done = 1 } { print }' "$T/uniform.trace" > "$T/bad.trace"
cmp -s "$T/uniform.trace" "$T/bad.trace" && fail "could not change a get in the trace"
out=$(timeout $((120 * SLOW)) "$BENCH" kv --runtime-dir "$RUN" --replay "$T/bad.trace" 2> "$T/bad.err")
rc=$?
[ $rc = 1 ] && [ "$(field "$(result "$out")" failures)" = 1 ] ||
	fail "a trace with one wrong seed: exit $rc, $(result "$out") (want exit 1, failures=1)"
grep -q "other bytes than (key, seed)'s" "$T/bad.err" || fail "the failure is not reported: $(cat "$T/bad.err")"
printf '# h\nP key 10 1\nX key 10 1\n' > "$T/junk.trace"
timeout 60 "$BENCH" kv --runtime-dir "$RUN" --replay "$T/junk.trace" > /dev/null 2> "$T/junk.err"
rc=$?
[ $rc = 2 ] && grep -q 'junk.trace:3: not an operation' "$T/junk.err" ||
	fail "a malformed trace: exit $rc: $(cat "$T/junk.err")"
pass "a changed seed fails the replay (exit 1, failures=1); a malformed line is refused (exit 2)"


stop_morid
[ "$STOP_RC" = 0 ] || fail "morid exited $STOP_RC after the runs: $(tail -5 "$DLOG")"
