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

# netns_star TAG NET N: N test "nodes" as namespaces mori-${TAG}1-PID .. ${TAG}N-PID, each with a veth
# into a bridge in a switch namespace mori-${TAG}s-PID (which may run shared services such as a
# redis-server at 10.NET.x.254). Sets NS[i] and IP[i] (i = 1..N), NSS and IPS; removes them on
# exit; returns once node 1 reaches every other over TCP. Skips as netns_pair.
netns_star_cleanup() {
	local i
	for i in "${!NS[@]}"; do ip netns del "${NS[$i]}" 2> /dev/null; done
	ip netns del "$NSS" 2> /dev/null
}

netns_star() {
	local tag=$1 net=$2 n=$3 err i ok sub=$(($$ % 200))
	command -v ip > /dev/null || skip "no ip(8) (iproute2) to make network namespaces"
	[ "$(id -u)" = 0 ] || skip "network namespaces need root"
	NS=() IP=()
	NSS=mori-${tag}s-$$
	IPS=10.$net.$sub.254
	trap 'rc=$?; netns_star_cleanup; (exit $rc); cleanup' EXIT
	err=$(ip netns add "$NSS" 2>&1) || skip "cannot create a network namespace: $err"
	ip -n "$NSS" link add br0 type bridge || skip "cannot create a bridge"
	ip -n "$NSS" addr add "$IPS/24" dev br0 && ip -n "$NSS" link set br0 up && ip -n "$NSS" link set lo up ||
		fail "bridge address"
	for i in $(seq "$n"); do
		NS[$i]=mori-${tag}$i-$$
		IP[$i]=10.$net.$sub.$i
		ip netns add "${NS[$i]}" || fail "namespace ${NS[$i]}"
		ip -n "${NS[$i]}" link add eth0 type veth peer name "p$i" netns "$NSS" || fail "veth of node $i"
		ip -n "$NSS" link set "p$i" master br0 && ip -n "$NSS" link set "p$i" up || fail "bridge port $i"
		ip -n "${NS[$i]}" addr add "${IP[$i]}/24" dev eth0 && ip -n "${NS[$i]}" link set eth0 up &&
			ip -n "${NS[$i]}" link set lo up || fail "address of node $i"
	done
	for i in $(seq 2 "$n"); do
		ok=
		for _ in $(seq 100); do
			if ip netns exec "${NS[1]}" bash -c "exec 3<>/dev/tcp/${IP[$i]}/9" 2>&1 | grep -q refused; then ok=1; break; fi
			sleep 0.1
		done
		[ -n "$ok" ] || fail "node 1 does not reach node $i (${IP[$i]}) over the bridge"
	done
	echo "# $n namespaces on bridge br0 of $NSS: ${IP[*]}"
}
