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
T=$(mktemp -d /tmp/mori-bench-auth.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null; done
	wait 2> /dev/null
	rm -rf "$T"
}
trap cleanup EXIT
skip() { echo "bench-auth-netns: $*" >&2; exit 77; }
fail() { echo "bench-auth-netns: $*" >&2; exit 1; }
# the tests' namespaces: NSA NSB, veth VA VB, IPA IPB (10.214.x.1/.2); removed on exit
source tests/netnslib.bash
netns_pair ba 214 > /dev/null
"$B/moractl" keygen "$T/cluster.key" > /dev/null || exit 1

# one row: mode off|on; prints "GB/s base_GB/s"
row() {
	local mode=$1 auth
	[ "$mode" = on ] && auth=(--cluster-key-file "$T/cluster.key") || auth=(--insecure-peers true)
	rm -rf "$T/a" "$T/b" "$T/ready"
	ip netns exec "$NSA" "$B/morid" --runtime-dir "$T/a" --listen "$IPA:7100" --log-level warn "${auth[@]}" 2>> "$T/a.log" &
	local pa=$!
	ip netns exec "$NSB" "$B/morid" --runtime-dir "$T/b" --listen "$IPB:7100" --log-level warn "${auth[@]}" 2>> "$T/b.log" &
	local pb=$!
	PIDS=("$pa" "$pb")
	for _ in $(seq 100); do [ -S "$T/a/morid.session" ] && [ -S "$T/b/morid.session" ] && break; sleep 0.05; done
	ip netns exec "$NSB" "$B/mori-bench" io-target --runtime-dir "$T/b" --name bench/t --region 256M > "$T/ready" &
	local pt=$!
	PIDS+=("$pt")
	for _ in $(seq 200); do grep -q READY "$T/ready" 2> /dev/null && break; sleep 0.05; done
	local tcp
	tcp=$(sed -n 's/.*tcp=\([^ ]*\).*/\1/p' "$T/ready")
	ip netns exec "$NSA" "$B/mori-bench" io --runtime-dir "$T/a" --node "$IPB:7100" --name bench/t --tcp "$tcp" \
		--op "$OP" --block-min 1M --block-max 1M --batch 64 --iters "$ITERS" --region 256M > "$T/out" 2>&1
	awk '$1 == "1M" { print $4, $7 }' "$T/out"
	[ "$mode" = on ] && ip netns exec "$NSA" "$B/moractl" --runtime-dir "$T/a" peers | grep -q ' yes$' ||
		[ "$mode" = off ] || echo "bench-auth-netns: the peer did not authenticate" >&2
	kill "$pt" "$pa" "$pb" 2> /dev/null
	wait "$pt" "$pa" "$pb" 2> /dev/null
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
