#!/usr/bin/env bash
# UMBP remote gets between two network namespaces (tests/netnslib.bash's netns_pair, as the netns
# tests make them), beside same-run baselines between the same two addresses: one morid in each
# namespace with a cluster key; node A holds N values of SIZE bytes; a client of node B gets them
# with mori_umbp_batch_get_from (BATCH keys a call, the whole range ROUNDS times; bytes checked in
# a first pass, then timed unchecked: tests/umbp_node), into plain malloc'd buffers (the value lands
# in a DRAM slot of B, the client copies it out) and into buffers registered with
# mori_umbp_register_memory (B's morid writes it straight there: malloc'd buffers by cross-memory
# attach, a memfd's shared mapping through its own mapping of the memfd). Baselines, each round: mori-bench io
# writes of SIZE blocks from A to B (the daemons' transfer path) and its plain TCP stream from A
# to B (4 MiB writes), the figure a remote get is held against.
#   B=build ROUNDS=3 N=256 SIZE=1048576 BATCH=16 PASSES=4 tools/bench-umbp-remote-netns.sh   (root;
#   PASSES: how many times each get run goes over the range)
set -u
cd "$(dirname "$0")/.." || exit 1
B=${B:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
ROUNDS=${ROUNDS:-3}
N=${N:-256}
SIZE=${SIZE:-1048576}
BATCH=${BATCH:-16}
PASSES=${PASSES:-4}
for f in morid moractl mori-bench tests/umbp_node; do [ -x "$B/$f" ] || { echo "no $B/$f" >&2; exit 1; }; done
source tools/netns-bench.bash
bench_netns bench-umbp-remote-netns bu 216
bench_morids --cluster-key-file "$T/cluster.key" --kv-dram-bytes $((N * SIZE * 2 + (256 << 20)))
out=$("$B/tests/umbp_node" "$T/a" put 1 "$N" "$SIZE") || fail "put on A: $out"
out=$("$B/tests/umbp_node" "$T/b" get 1 "$N" "$SIZE" "$IPA:7100" --batch "$BATCH") || fail "checked get on B: $out"
[[ $out == *"ok=$N miss=0 err=0 bad=0"* ]] || fail "checked get on B: $out"
for mem in "" --memfd; do
	out=$("$B/tests/umbp_node" "$T/b" get 1 "$N" "$SIZE" "$IPA:7100" --batch "$BATCH" --register $mem) ||
		fail "checked get on B: $out"
	[[ $out == *"ok=$N miss=0 err=0 bad=0"* ]] || fail "checked get into registered buffers $mem on B: $out"
done

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $N values of $SIZE bytes on A, got on B $BATCH a call"
echo "| round | get, malloc'd GB/s | get, registered malloc'd GB/s | get, registered memfd GB/s | mori io write GB/s | TCP stream GB/s | malloc'd / TCP | reg. malloc'd / TCP | reg. memfd / TCP |"
echo "|---|---|---|---|---|---|---|---|---|"
pct() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else print "-" }'; }
for r in $(seq "$ROUNDS"); do
	g=$("$B/tests/umbp_node" "$T/b" get 1 "$N" "$SIZE" "$IPA:7100" --batch "$BATCH" --no-verify --rounds "$PASSES" |
		sed -n 's/.*gbps=\([^ ]*\).*/\1/p')
	gr=$("$B/tests/umbp_node" "$T/b" get 1 "$N" "$SIZE" "$IPA:7100" --batch "$BATCH" --no-verify --rounds "$PASSES" --register |
		sed -n 's/.*gbps=\([^ ]*\).*/\1/p')
	gm=$("$B/tests/umbp_node" "$T/b" get 1 "$N" "$SIZE" "$IPA:7100" --batch "$BATCH" --no-verify --rounds "$PASSES" --register \
		--memfd | sed -n 's/.*gbps=\([^ ]*\).*/\1/p')
	read -r io base <<< "$(bench_io_row write 20)"
	echo "| $r | ${g:-fail} | ${gr:-fail} | ${gm:-fail} | ${io:-fail} | ${base:-fail} | $(pct "$g" "$base") | $(pct "$gr" "$base") | $(pct "$gm" "$base") |"
done
