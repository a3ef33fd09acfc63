#!/usr/bin/env bash
# The trace replay's transfer rate against `mori-bench io` for the same
# block size (the model's page) and batch (descriptors per submission), measured in one run on
# one morid: mori-bench io, then mori-kvreplay, then mori-bench io again (a shared machine is
# noisy: the two bench runs bracket the replay and their mean is the reference).
#
#   tools/bench-kv-vs-io.sh [--requests 1000] [--model llama3-8b] [--batch 2048]
#                           [--pool-mib 4096] [--iters 50] [--mode push|pull] [--window 2]
#                           [--trace PATH]
#
# Prints one table and a JSON line. Two ratios: "transfer" is bytes moved / time inside the
# replay's transfers (submit to completion), the engine's sustained rate on the trace's block
# pattern; "run" is bytes moved / wall time of the whole replay, which also fills and verifies
# every byte on the same cores. Exit 0 when the transfer ratio is at least 0.70 and the replay
# verified every byte; 1 otherwise; 2 when something could not run.
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
REQUESTS=1000
MODEL=llama3-8b
BATCH=2048
POOL_MIB=4096
ITERS=50
MODE=push
WINDOW=2
TRACE_ARGS=()
while [ $# -gt 0 ]; do
	case $1 in
	--requests) REQUESTS=$2 ;;
	--model) MODEL=$2 ;;
	--batch) BATCH=$2 ;;
	--pool-mib) POOL_MIB=$2 ;;
	--iters) ITERS=$2 ;;
	--mode) MODE=$2 ;;
	--window) WINDOW=$2 ;;
	--trace) TRACE_ARGS=(--trace "$2") ;;
	-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench-kv-vs-io: unknown option $1" >&2; exit 2 ;;
	esac
	shift 2 || { echo "bench-kv-vs-io: $1 needs a value" >&2; exit 2; }
done
for f in "$B/morid" "$B/mori-kvreplay" "$B/mori-bench"; do
	[ -x "$f" ] || { echo "bench-kv-vs-io: $f is not built" >&2; exit 2; }
done

T=$(mktemp -d /tmp/mori-kvbench.XXXXXX)
MPID=
cleanup() {
	local rc=$?
	if [ -n "$MPID" ]; then
		kill -TERM "$MPID" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$MPID" 2>/dev/null || break; sleep 0.05; done
		kill -KILL "$MPID" 2>/dev/null
		wait "$MPID" 2>/dev/null
	fi
	rm -rf "$T"
	exit $rc
}
trap cleanup EXIT
"$B/morid" --foreground --runtime-dir "$T" --log-level warn 2> "$T/morid.log" &
MPID=$!
for _ in $(seq 200); do [ -S "$T/morid.session" ] && break; sleep 0.05; done
[ -S "$T/morid.session" ] || { cat "$T/morid.log" >&2; echo "bench-kv-vs-io: morid did not start" >&2; exit 2; }

# cJSON's printed form: "name": value
jget() { sed -n "s/^[[:space:]]*\"$1\":[[:space:]]*\(.*\)\$/\1/p" | head -n 1 | sed -e 's/,$//' -e 's/^"\(.*\)"$/\1/'; }
# mori-bench io --json prints its row on one line: "gbps": value
bget() { grep -o "\"$1\": [0-9.e+-]*" | head -n 1 | awk '{print $2}'; }

PAGE=$("$B/mori-kvreplay" --dry-run --synthetic --requests 1 --model "$MODEL" --pool-mib "$POOL_MIB" --json 2>/dev/null | jget page_bytes)
[ -n "$PAGE" ] || { echo "bench-kv-vs-io: unknown model $MODEL" >&2; exit 2; }
op=write
[ "$MODE" = pull ] && op=read
bench() {
	"$B/mori-bench" io --runtime-dir "$T" --op $op --block-min "$PAGE" --block-max "$PAGE" \
		--batch "$BATCH" --iters "$ITERS" --json 2> "$T/bench.err" || { cat "$T/bench.err" >&2; return 1; }
}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, $(uname -r); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# block $PAGE B, batch $BATCH descriptors, $MODE ($op), window $WINDOW, model $MODEL, $REQUESTS requests"
io1=$(bench) || { echo "bench-kv-vs-io: mori-bench io failed" >&2; exit 2; }
g1=$(bget gbps <<< "$io1")
echo "mori-bench io (before): $g1 GB/s (memcpy baseline $(bget baseline_gbps <<< "$io1") GB/s)"
kv=$("$B/mori-kvreplay" --runtime-dir "$T" --model "$MODEL" --requests "$REQUESTS" --as-fast-as-possible \
	--batch "$BATCH" --pool-mib "$POOL_MIB" --mode "$MODE" --window "$WINDOW" "${TRACE_ARGS[@]}" \
	--json --no-progress 2> "$T/kv.err")
kvrc=$?
[ $kvrc -le 1 ] && [ -n "$kv" ] || { cat "$T/kv.err" >&2; echo "bench-kv-vs-io: mori-kvreplay failed (exit $kvrc)" >&2; exit 2; }
io2=$(bench) || { echo "bench-kv-vs-io: mori-bench io failed" >&2; exit 2; }
g2=$(bget gbps <<< "$io2")
echo "mori-bench io (after):  $g2 GB/s (memcpy baseline $(bget baseline_gbps <<< "$io2") GB/s)"
xg=$(jget gbps_transfer <<< "$kv")
rg=$(jget gbps_run <<< "$kv")
vf=$(jget verification_failures <<< "$kv")
echo "mori-kvreplay: $(jget requests <<< "$kv") requests, $(jget blocks_moved <<< "$kv") blocks, $(jget bytes_moved <<< "$kv") bytes in $(jget run_s <<< "$kv") s; $xg GB/s inside transfers, $rg GB/s over the run; $vf verification failures"
echo "               latency p50 $(jget p50 <<< "$kv") us, p99 $(jget p99 <<< "$kv") us; $(jget descriptors_per_s <<< "$kv") descriptors/s"
echo "               in-run reference (same list streamed through the whole pool, batch $(jget io_baseline_batch <<< "$kv")): $(jget io_baseline_gbps <<< "$kv") GB/s; transfers at $(jget transfer_vs_io_baseline <<< "$kv") of it"
awk -v g1="$g1" -v g2="$g2" -v xg="$xg" -v rg="$rg" -v vf="$vf" -v kvrc="$kvrc" 'BEGIN {
	io = (g1 + g2) / 2
	rt = io > 0 ? xg / io : 0; rr = io > 0 ? rg / io : 0
	printf "ratio: transfer %.0f%%, run %.0f%% of mori-bench io (mean %.2f GB/s)\n", 100 * rt, 100 * rr, io
	printf "{\"io_gbps_before\": %s, \"io_gbps_after\": %s, \"kv_gbps_transfer\": %s, \"kv_gbps_run\": %s, \"ratio_transfer\": %.3f, \"ratio_run\": %.3f, \"verification_failures\": %s}\n", g1, g2, xg, rg, rt, rr, vf
	exit !(rt >= 0.70 && vf == 0 && kvrc == 0)
}'
