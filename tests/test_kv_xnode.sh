#!/usr/bin/env bash
# mori-kvreplay across nodes (issue 4, acceptance 2): the first 200 requests of the real trace at
# full speed with the tiny model, the prefill client on one morid and the decode client on
# another (two daemons with peer listeners on loopback), push and pull; first forked from one
# command, then as two commands (--role prefill / --role decode joined at --coord), as on two
# machines. A mismatch between the two commands' geometry is refused, naming it.
# Zero verification failures, and byte counts equal to a count made here from the trace with awk:
# with a pool that never evicts, the blocks moved are the distinct hash ids, the rest are cached.
source "$(dirname "$0")/testlib.bash"

TRACE=${MORI_TRACE:-$ROOT/../shared/data/mooncake_conversation_trace.jsonl}
[ -r "$TRACE" ] || skip "trace $TRACE absent"
REPLAY=$B/mori-kvreplay
[ -x "$REPLAY" ] || fail "$REPLAY is not built"
N=200

# Independent count: hash ids of the first N requests, total and distinct.
read -r TOTAL UNIQ < <(head -n "$N" "$TRACE" | awk '
	{ s = $0
	  if (!sub(/.*"hash_ids":[ ]*\[/, "", s) || !sub(/\].*/, "", s)) { bad = NR; exit }
	  gsub(/ /, "", s); n = split(s, a, ",")
	  for (i = 1; i <= n; i++) { tot++; if (!(a[i] in seen)) { seen[a[i]] = 1; u++ } } }
	END { if (bad) { print "bad", bad; exit 1 } print tot, u }') || fail "awk could not read $TRACE"
[ "$UNIQ" -gt 0 ] 2>/dev/null || fail "no hash ids counted in $TRACE"
# tiny: 2 layers x (K, V) x 512 tokens x 1 KV head x 64 dims x 2 bytes (bf16)
BPB=$((2 * 2 * 512 * 1 * 64 * 2))
POOL=$((UNIQ + 16))
echo "# first $N requests: $TOTAL blocks, $UNIQ distinct; expect $((UNIQ * BPB)) bytes moved"

# check_run NAME JSON: the summary against the independent count
check_run() {
	local name=$1 js=$2 f want
	for f in requests:$N blocks_total:$TOTAL blocks_moved:$UNIQ blocks_skipped:$((TOTAL - UNIQ)) \
		evictions:0 bytes_moved:$((UNIQ * BPB)) bytes_verified:$((UNIQ * BPB)) \
		descriptors:$((UNIQ * 128)) verification_failures:0 transfer_errors:0 \
		notifications_missing:0 bytes_per_block:$BPB synthetic:false; do
		want=${f#*:}
		[ "$(json_get "${f%%:*}" <<< "$js")" = "$want" ] ||
			fail "$name: ${f%%:*} is $(json_get "${f%%:*}" <<< "$js"), expected $want: $js"
	done
	local n50
	n50=$(sed -n '/"latency_us"/,/}/p' <<< "$js" | json_get count)
	[ "$n50" -gt 0 ] 2>/dev/null || fail "$name: no latency samples: $js"
	pass "$name: $N requests, $UNIQ blocks moved, $((TOTAL - UNIQ)) cached, 0 verification failures ($(json_get gbps_transfer <<< "$js") GB/s in transfers)"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() { local p; for p in $(seq "$1" $(($1 + 200))); do port_free "$p" && { echo "$p"; return; }; done; }
PA=$(pick_port 27100)
PB=$(pick_port $((PA + 1)))
[ -n "$PA" ] && [ -n "$PB" ] || fail "no free loopback ports"
start_listener
start_morid --listen "127.0.0.1:$PA"
RUN2=$T/run2
M2=
mkdir -p "$RUN2"
"$MORID" --foreground --runtime-dir "$RUN2" --listen "127.0.0.1:$PB" 2>> "$T/morid2.log" &
M2=$!
trap 'rc=$?; [ -n "$M2" ] && kill -9 "$M2" 2>/dev/null; (exit $rc); cleanup' EXIT
deadline=$(( $(now_ms) + 10000 * SLOW ))
until [ -S "$RUN2/morid.session" ]; do
	[ "$(now_ms)" -lt "$deadline" ] || { cat "$T/morid2.log"; fail "second morid did not start"; }
	sleep 0.05
done
for mode in push pull; do
	js=$(timeout $((180 * SLOW)) "$REPLAY" --prefill-runtime-dir "$RUN" --decode-runtime-dir "$RUN2" \
		--trace "$TRACE" --model tiny --requests $N --as-fast-as-possible --pool-blocks $POOL \
		--mode $mode --no-warmup --json --no-progress 2> "$T/x$mode.err")
	rc=$?
	[ $rc = 0 ] || { cat "$T/x$mode.err"; tail -n 20 "$T/morid2.log"; fail "cross node, $mode: exit $rc: $js"; }
	[ "$(json_get topology <<< "$js")" = cross-node ] || fail "topology is not cross-node: $js"
	check_run "cross node (two morids on loopback), $mode" "$js"
done
PC=$(pick_port $((PB + 1)))
[ -n "$PC" ] || fail "no free loopback port for --coord"
for mode in push pull; do
	"$REPLAY" --role prefill --coord "127.0.0.1:$PC" --runtime-dir "$RUN" --model tiny --pool-blocks $POOL \
		--mode $mode --no-warmup --json > "$T/p$mode.out" 2>&1 &
	PF=$!
	js=$(timeout $((180 * SLOW)) "$REPLAY" --role decode --coord "127.0.0.1:$PC" --runtime-dir "$RUN2" \
		--trace "$TRACE" --model tiny --requests $N --as-fast-as-possible --pool-blocks $POOL \
		--mode $mode --no-warmup --json --no-progress 2> "$T/r$mode.err")
	rc=$?
	wait "$PF"
	prc=$?
	[ $rc = 0 ] && [ $prc = 0 ] ||
		{ cat "$T/r$mode.err" "$T/p$mode.out"; fail "--role, $mode: decode exit $rc, prefill exit $prc: $js"; }
	[ "$(json_get topology <<< "$js")" = cross-node ] || fail "--role: topology is not cross-node: $js"
	check_run "two commands (--role prefill on one morid, --role decode on the other), $mode" "$js"
done
"$REPLAY" --role prefill --coord "127.0.0.1:$PC" --runtime-dir "$RUN" --model tiny --pool-blocks $POOL \
	> "$T/pbad.out" 2>&1 &
PF=$!
timeout $((60 * SLOW)) "$REPLAY" --role decode --coord "127.0.0.1:$PC" --runtime-dir "$RUN2" --trace "$TRACE" \
	--model tiny --requests 5 --pool-blocks $((POOL + 1)) --no-progress > "$T/rbad.out" 2>&1
rc=$?
wait "$PF"
prc=$?
[ $rc = 2 ] && [ $prc != 0 ] && grep -q "disagree" "$T/rbad.out" ||
	{ cat "$T/rbad.out" "$T/pbad.out"; fail "mismatched --pool-blocks: decode exit $rc, prefill exit $prc"; }
pass "mismatched geometry between the two commands refused: $(grep -m1 -o 'disagree.*pool blocks' "$T/rbad.out")"
kill -TERM "$M2"
wait "$M2" 2>/dev/null
M2=
stop_morid
exit 0
