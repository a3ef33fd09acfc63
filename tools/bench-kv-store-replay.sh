#!/usr/bin/env bash
# The Mooncake trace's hash_ids through morid's KV store: for each capacity and policy, a fresh
# morid whose DRAM tier holds exactly that many blocks (kv_dram_bytes = blocks x value bytes,
# watermarks 100/100: a put evicts only what it needs), then `mori-bench kv --sim TRACE --store`,
# which prints the exact LRU and Belady references, the policy's offline simulation and the
# store's own hit rate, computed over the same requests in the same run.
#
#   tools/bench-kv-store-replay.sh [--trace PATH] [--capacity "1000 10000 50000"]
#                                  [--policy "lru default"] [--value-bytes 64]
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
TRACE=../shared/data/mooncake_conversation_trace.jsonl
CAPS="1000 10000 50000"
POLICIES="lru default"
VB=64
while [ $# -gt 0 ]; do
	case $1 in
	--trace) TRACE=$2 ;;
	--capacity) CAPS=$2 ;;
	--policy) POLICIES=$2 ;;
	--value-bytes) VB=$2 ;;
	-h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench-kv-store-replay: unknown option $1" >&2; exit 2 ;;
	esac
	shift 2 || { echo "bench-kv-store-replay: $1 needs a value" >&2; exit 2; }
done
for f in "$B/morid" "$B/mori-bench"; do
	[ -x "$f" ] || { echo "bench-kv-store-replay: $f is not built" >&2; exit 2; }
done
[ -r "$TRACE" ] || { echo "bench-kv-store-replay: trace $TRACE not readable" >&2; exit 2; }

T=$(mktemp -d /tmp/mori-kvstore.XXXXXX)
MPID=
stop() {
	[ -n "$MPID" ] || return 0
	kill -TERM "$MPID" 2>/dev/null
	for _ in $(seq 200); do kill -0 "$MPID" 2>/dev/null || break; sleep 0.05; done
	kill -KILL "$MPID" 2>/dev/null
	wait "$MPID" 2>/dev/null
	MPID=
}
trap 'rc=$?; stop; rm -rf "$T"; exit $rc' EXIT
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, $(uname -r); load: $(cut -d' ' -f1-3 /proc/loadavg)"
rc=0
for cap in $CAPS; do
	for pol in $POLICIES; do
		rm -rf "$T/run" && mkdir -p "$T/run"
		"$B/morid" --foreground --runtime-dir "$T/run" --log-level warn --kv-dram-bytes $((cap * VB)) \
			--kv-high-watermark 100 --kv-low-watermark 100 --kv-policy "$pol" 2> "$T/morid.log" &
		MPID=$!
		for _ in $(seq 200); do [ -S "$T/run/morid.session" ] && break; sleep 0.05; done
		[ -S "$T/run/morid.session" ] || { cat "$T/morid.log" >&2; echo "bench-kv-store-replay: morid did not start" >&2; exit 2; }
		echo "## capacity $cap blocks, morid --kv-policy $pol"
		"$B/mori-bench" kv --sim "$TRACE" --store "$T/run" --value-bytes "$VB" --policy "$pol" || rc=1
		stop
	done
done
exit $rc
