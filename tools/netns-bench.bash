# Two-node benchmarks between network namespaces (tools/bench-*-netns.sh; sourced, not run), from
# the repository's top directory with B set to an absolute build directory.
#   bench_netns NAME TAG NET  a temp dir $T and a cluster key $T/cluster.key; PIDS, killed on exit
#                             with $T removed; skip and fail, which say NAME; the namespaces of
#                             tests/netnslib.bash's netns_pair TAG NET (NSA NSB IPA IPB)
#   bench_morids ARGS...      a morid in each namespace with ARGS
#   bench_io_row OP ITERS     mori-bench io from A to B beside its plain-TCP baseline

BENCH_NAME=bench
T=
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null; done
	wait 2> /dev/null
	[ -z "$T" ] || rm -rf "$T"
}
skip() { echo "$BENCH_NAME: $*" >&2; exit 77; }
fail() { echo "$BENCH_NAME: $*" >&2; exit 1; }

bench_netns() {
	local tag=$2 net=$3
	BENCH_NAME=$1
	T=$(mktemp -d "/tmp/mori-$BENCH_NAME.XXXXXX")
	trap cleanup EXIT
	# shellcheck source=tests/netnslib.bash
	source tests/netnslib.bash
	netns_pair "$tag" "$net" > /dev/null
	"$B/moractl" keygen "$T/cluster.key" > /dev/null || exit 1
}

# A morid in each namespace with ARGS: runtime dirs $T/a and $T/b, listening on IPA:7100 and
# IPB:7100, logs appended to $T/a.log and $T/b.log, pids added to PIDS. Returns once both serve;
# after 10 s, kills them and fails, with the logs' last lines.
bench_morids() {
	local x ns ip
	for x in a b; do
		ns=$NSA ip=$IPA
		[ $x = b ] && ns=$NSB ip=$IPB
		ip netns exec "$ns" "$B/morid" --runtime-dir "$T/$x" --listen "$ip:7100" --log-level warn "$@" \
			2>> "$T/$x.log" &
		PIDS+=($!)
	done
	for _ in $(seq 200); do [ -S "$T/a/morid.session" ] && [ -S "$T/b/morid.session" ] && return 0; sleep 0.05; done
	kill "${PIDS[@]}" 2> /dev/null # (a caller's subshell does not run the EXIT trap)
	fail "the morids did not serve within 10 s; $(tail -qn 2 "$T/a.log" "$T/b.log" 2> /dev/null | tr '\n' ' ')"
}

# One row of mori-bench io: OP (write or read) of 1 MiB blocks, batch 64, ITERS iterations over a
# 256 MiB region, from morid A ($T/a) to a target of morid B ($T/b), beside its plain-TCP stream
# between the same two addresses. Prints "GB/s tcp_GB/s" (nothing where the run failed; its
# output is in $T/io.out).
bench_io_row() {
	local op=$1 iters=$2 pt tcp
	rm -f "$T/ready"
	ip netns exec "$NSB" "$B/mori-bench" io-target --runtime-dir "$T/b" --name bench/t --region 256M > "$T/ready" &
	pt=$!
	for _ in $(seq 200); do grep -q READY "$T/ready" 2> /dev/null && break; sleep 0.05; done
	tcp=$(sed -n 's/.*tcp=\([^ ]*\).*/\1/p' "$T/ready")
	ip netns exec "$NSA" "$B/mori-bench" io --runtime-dir "$T/a" --node "$IPB:7100" --name bench/t --tcp "$tcp" \
		--op "$op" --block-min 1M --block-max 1M --batch 64 --iters "$iters" --region 256M > "$T/io.out" 2>&1
	awk '$1 == "1M" { print $4, $7 }' "$T/io.out"
	kill "$pt" 2> /dev/null
	wait "$pt" 2> /dev/null
}
