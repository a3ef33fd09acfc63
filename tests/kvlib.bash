# Shared by tests/test_kv_replay.sh and tests/test_kv_xnode.sh (sourced after testlib.bash):
# the first N requests of the real trace, an independent count of their blocks made with awk, and
# check_run, which holds a mori-kvreplay --json summary against that count. With a pool that never
# evicts, the blocks moved are the distinct hash ids, the rest are cached.
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

