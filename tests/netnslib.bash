# Two test "nodes" as two network namespaces joined by a veth pair, for tests/test_*_netns.sh
# (sourced after testlib.bash, not run). netns_pair TAG NET makes namespaces mori-${TAG}a-PID and
# mori-${TAG}b-PID with the veth ends m${TAG}a/bPID at 10.NET.x.1 and .2, sets NSA NSB VA VB IPA
# IPB, removes them on exit, and returns once A reaches B over TCP. Skips (77) where namespaces
# cannot be made (not root, no CAP_NET_ADMIN, no iproute2).
netns_cleanup() {
	ip netns del "$NSA" 2> /dev/null
	ip netns del "$NSB" 2> /dev/null
	ip link del "$VA" 2> /dev/null
}

netns_pair() {
	local tag=$1 net=$2 err ok=
	command -v ip > /dev/null || skip "no ip(8) (iproute2) to make network namespaces"
	[ "$(id -u)" = 0 ] || skip "network namespaces need root"
	NSA=mori-${tag}a-$$
	NSB=mori-${tag}b-$$
	VA=m${tag}a$$
	VB=m${tag}b$$
	IPA=10.$net.$(($$ % 200)).1
	IPB=10.$net.$(($$ % 200)).2
	trap 'rc=$?; netns_cleanup; (exit $rc); cleanup' EXIT
	err=$(ip netns add "$NSA" 2>&1) || skip "cannot create a network namespace: $err"
	ip netns add "$NSB" || fail "second namespace"
	err=$(ip link add "$VA" type veth peer name "$VB" 2>&1) || skip "cannot create a veth pair: $err"
	ip link set "$VA" netns "$NSA" && ip link set "$VB" netns "$NSB" || fail "moving the veth ends"
	ip -n "$NSA" addr add "$IPA/24" dev "$VA" && ip -n "$NSB" addr add "$IPB/24" dev "$VB" || fail "addresses"
	for ns in "$NSA" "$NSB"; do
		ip -n "$ns" link set lo up || fail "lo up in $ns"
	done
	ip -n "$NSA" link set "$VA" up && ip -n "$NSB" link set "$VB" up || fail "veth up"
	# The link is usable when A reaches B (no ping needed: a TCP connect to a closed port is refused).
	for _ in $(seq 50); do
		if ip netns exec "$NSA" bash -c "exec 3<>/dev/tcp/$IPB/9" 2>&1 | grep -q refused; then ok=1; break; fi
		sleep 0.1
	done
	[ -n "$ok" ] || fail "veth $IPA <-> $IPB does not carry TCP"
	echo "# namespaces $NSA ($IPA) and $NSB ($IPB) joined by veth $VA/$VB"
}

# netns_star TAG NET N: N "nodes" (namespaces mori-${TAG}N-PID, N = 0..N-1, at 10.NET.x.(N+1)) and
# a hub namespace mori-${TAG}h-PID (10.NET.x.254) whose bridge joins them, for a service every
# node reaches (the tests' own redis-server). Sets HUB HUBIP and the arrays STAR_NS STAR_IP,
# removes everything on exit; skips (77) as netns_pair does, or where a bridge cannot be made.
netns_star_cleanup() {
	local ns
	for ns in "${STAR_NS[@]}" "$HUB"; do ip netns del "$ns" 2> /dev/null; done
}

netns_star() {
	local tag=$1 net=$2 n=$3 err i ok
	command -v ip > /dev/null || skip "no ip(8) (iproute2) to make network namespaces"
	[ "$(id -u)" = 0 ] || skip "network namespaces need root"
	HUB=mori-${tag}h-$$
	HUBIP=10.$net.$(($$ % 200)).254
	STAR_NS=()
	STAR_IP=()
	trap 'rc=$?; netns_star_cleanup; (exit $rc); cleanup' EXIT
	err=$(ip netns add "$HUB" 2>&1) || skip "cannot create a network namespace: $err"
	err=$(ip -n "$HUB" link add br0 type bridge 2>&1) || skip "cannot create a bridge: $err"
	ip -n "$HUB" addr add "$HUBIP/24" dev br0 && ip -n "$HUB" link set br0 up && ip -n "$HUB" link set lo up ||
		fail "hub bridge up"
	for ((i = 0; i < n; i++)); do
		STAR_NS[i]=mori-${tag}$i-$$
		STAR_IP[i]=10.$net.$(($$ % 200)).$((i + 1))
		ip netns add "${STAR_NS[i]}" || fail "namespace ${STAR_NS[i]}"
		ip link add "m${tag}$i$$" type veth peer name "m${tag}h$i$$" || fail "veth for node $i"
		ip link set "m${tag}$i$$" netns "${STAR_NS[i]}" && ip link set "m${tag}h$i$$" netns "$HUB" || fail "veth ends"
		ip -n "$HUB" link set "m${tag}h$i$$" master br0 && ip -n "$HUB" link set "m${tag}h$i$$" up || fail "bridge port"
		ip -n "${STAR_NS[i]}" addr add "${STAR_IP[i]}/24" dev "m${tag}$i$$" || fail "address of node $i"
		ip -n "${STAR_NS[i]}" link set "m${tag}$i$$" up && ip -n "${STAR_NS[i]}" link set lo up || fail "node $i up"
	done
	for ((i = 0; i < n; i++)); do
		ok=
		for _ in $(seq 100); do
			if ip netns exec "${STAR_NS[i]}" bash -c "exec 3<>/dev/tcp/$HUBIP/9" 2>&1 | grep -q refused; then ok=1; break; fi
			sleep 0.1
		done
		[ -n "$ok" ] || fail "node $i (${STAR_IP[i]}) does not reach the hub $HUBIP over TCP"
	done
	echo "# $n namespaces (${STAR_IP[*]}) joined by a bridge in $HUB ($HUBIP)"
}

# netns_suite TAG NET TEST NAME [VAR=VALUE...]: netns_pair TAG NET, then $B/tests/TEST with the
# VARs and the namespaces' MORI_XNODE_NS_A/_B and MORI_XNODE_IP_A/_B (its two-node suite across the
# veth), its output in $T/NAME.out; fails with the tail of the morids' logs (/tmp/mori-NAME-*.log)
# unless it exits 0 having run checks. The caller says what passed.
netns_suite() {
	local tag=$1 net=$2 bin=$B/tests/$3 name=$4 rc
	shift 4
	[ -x "$bin" ] || fail "$bin is not built"
	netns_pair "$tag" "$net"
	env "$@" MORI_XNODE_NS_A="$NSA" MORI_XNODE_IP_A="$IPA" MORI_XNODE_NS_B="$NSB" MORI_XNODE_IP_B="$IPB" \
		timeout $((400 * SLOW)) "$bin" 2>&1 | tee "$T/$name.out"
	rc=${PIPESTATUS[0]}
	[ "$rc" = 0 ] || { tail -n 30 /tmp/mori-"$name"-*.log 2> /dev/null | tail -n 60; fail "$3 across namespaces: exit $rc"; }
	grep -q "100%: Checks: [1-9]" "$T/$name.out" || fail "$3 ran no checks"
}
