#!/usr/bin/env bash
# The Mooncake trace (its first REQUESTS requests, blocks of BLOCK bytes) against UMBP pooled over
# three nodes, beside the same trace on one node of the same total capacity, same run
# (tools/bench_umbp_trace.py drives each): three morids in namespaces on one bridge
# (tests/netnslib.bash's netns_star) with kv_index = redis:// of a redis-server of this run, each
# with a DRAM tier of CAP blocks, requests spread round robin, then by prefix affinity
# (match_external_kv); and one morid (kv_index local) of 3 x CAP blocks. Every run starts with
# fresh daemons and an empty Redis. Prints a table: hit rate per block reference, seconds.
#   B=build REQUESTS=2000 BLOCK=4096 CAP=4000 TRACE=FILE tools/bench-umbp-trace-netns.sh   (root)
set -u
cd "$(dirname "$0")/.." || exit 1
B=${B:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
REQUESTS=${REQUESTS:-2000}
BLOCK=${BLOCK:-4096}
CAP=${CAP:-4000}
TRACE=${TRACE:-../shared/data/mooncake_conversation_trace.jsonl}
[ -r "$TRACE" ] || { echo "no trace $TRACE (TRACE=...)" >&2; exit 1; }
command -v redis-server > /dev/null || { echo "no redis-server" >&2; exit 77; }
T=$(mktemp -d /tmp/mori-bench-trace.XXXXXX)
PIDS=()
stop() {
	for p in "${PIDS[@]}"; do kill -9 "$p" 2> /dev/null; done
	wait 2> /dev/null
	PIDS=()
}
cleanup() {
	stop
	rm -rf "$T"
}
trap cleanup EXIT
skip() { echo "bench-umbp-trace-netns: $*" >&2; exit 77; }
fail() { echo "bench-umbp-trace-netns: $*" >&2; exit 1; }
source tests/netnslib.bash
netns_star bt 217 3 > /dev/null
"$B/moractl" keygen "$T/cluster.key" > /dev/null || exit 1
export PYTHONPATH=$PWD/python MORI_LIB=$B/libmori.so

# start I BYTES [ARGS...]: morid I (0..2) in its namespace, runtime dir $T/rI
start() {
	local i=$1 bytes=$2
	shift 2
	rm -rf "$T/r$i"
	ip netns exec "${STAR_NS[i]}" "$B/morid" --runtime-dir "$T/r$i" --listen "${STAR_IP[i]}:7100" --log-level warn \
		--cluster-key-file "$T/cluster.key" --kv-dram-bytes "$bytes" --kv-slab-bytes $((4 << 20)) "$@" \
		2>> "$T/m$i.log" &
	PIDS+=($!)
	for _ in $(seq 200); do [ -S "$T/r$i/morid.session" ] && return; sleep 0.05; done
	fail "morid $i did not start: $(tail -n 5 "$T/m$i.log")"
}
run() { # MODE DIRS...
	python3 tools/bench_umbp_trace.py --trace "$TRACE" --requests "$REQUESTS" --block-bytes "$BLOCK" --mode "$@"
}
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); first $REQUESTS requests of $(basename "$TRACE"), blocks of $BLOCK bytes"
inf=$(head -n "$REQUESTS" "$TRACE" | python3 -c '
import json, sys
t = 0; s = set()
for l in sys.stdin:
    h = json.loads(l).get("hash_ids") or []; t += len(h); s.update(h)
print("%.2f %% (%d block references, %d distinct)" % (100.0 * (t - len(s)) / t if t else 0, t, len(s)))')
echo "# an infinite cache would hit $inf"
echo "| run | nodes | DRAM tier each (blocks) | hit rate % | seconds |"
echo "|---|---|---|---|---|"
start 0 $((3 * CAP * BLOCK))
js=$(run rr "$T/r0") || fail "one node: $js"
echo "| one node (baseline) | 1 | $((3 * CAP)) | $(field hit_rate <<< "$js") | $(field seconds <<< "$js") |"
stop
for mode in rr affinity; do
	ip netns exec "$HUB" redis-server --bind "$HUBIP" --port 6379 --save "" --appendonly no --protected-mode no \
		> "$T/redis.log" 2>&1 &
	PIDS+=($!)
	sleep 0.3
	for i in 0 1 2; do start $i $((CAP * BLOCK)) --kv-index "redis://$HUBIP:6379/0" --kv-index-ttl-ms 3000; done
	sleep 1
	js=$(run $mode "$T/r0" "$T/r1" "$T/r2") || fail "three nodes, $mode: $js"
	echo "| three nodes, $([ $mode = rr ] && echo "round robin" || echo "prefix affinity (match_external_kv)") | 3 | $CAP | $(field hit_rate <<< "$js") | $(field seconds <<< "$js") |"
	stop
done
