#!/usr/bin/env bash
# Cross-node throughput with peer authentication on and off, in the same run:
# two network namespaces joined by a veth pair (tests/netnslib.bash's netns_pair,
# as the netns tests make them), one morid in each; per round, both daemons without a key
# (insecure_peers = true), then with one cluster key, and the same mori-bench io row each time: 1 MiB blocks, batch 64, writes
# (or OP=read), beside its plain-TCP baseline between the same two addresses.
#   B=build ROUNDS=3 ITERS=20 OP=write tools/bench-auth-netns.sh     (root: network namespaces)
set -u
cd "$(dirname "$0")/.." || exit 1
B=${B:-build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-20}
OP=${OP:-write}
for f in morid moractl mori-bench; do [ -x "$B/$f" ] || { echo "no $B/$f" >&2; exit 1; }; done
# the tests' namespaces: NSA NSB, veth VA VB, IPA IPB (10.214.x.1/.2); removed on exit
source tools/netns-bench.bash
bench_netns bench-auth-netns ba 214

# one row: mode off|on; prints "GB/s base_GB/s"
row() {
	local mode=$1 auth
	[ "$mode" = on ] && auth=(--cluster-key-file "$T/cluster.key") || auth=(--insecure-peers true)
	rm -rf "$T/a" "$T/b"
	PIDS=()
	bench_morids "${auth[@]}"
	bench_io_row "$OP" "$ITERS"
	[ "$mode" = on ] && ip netns exec "$NSA" "$B/moractl" --runtime-dir "$T/a" peers | grep -q ' yes$' ||
		[ "$mode" = off ] || echo "bench-auth-netns: the peer did not authenticate" >&2
	kill "${PIDS[@]}" 2> /dev/null
	wait "${PIDS[@]}" 2> /dev/null
	PIDS=()
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $OP, 1 MiB x 64, $ITERS iterations per row"
echo "| round | peers | mori GB/s | TCP GB/s | ratio |"
echo "|---|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
	for mode in off on; do
		read -r g base <<< "$(row "$mode")"
		ratio=$(awk -v a="${g:-0}" -v b="${base:-0}" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else print "-" }')
		echo "| $r | $([ "$mode" = on ] && echo "authenticated (cluster key)" || echo "no key (insecure_peers)") | ${g:-fail} | ${base:-fail} | $ratio |"
	done
done
