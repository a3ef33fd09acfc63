#!/usr/bin/env bash
# Two nodes as two network namespaces joined by a veth pair (issue 3, acceptance 2): one morid in
# each, the clients outside (they reach their daemons through the runtime dirs), and the whole
# cross-node suite (build/tests/test_xnode: random verified batches, fault cases) across the veth.
# Skips (77) where namespaces cannot be made (not root, no CAP_NET_ADMIN, no iproute2).
source "$(dirname "$0")/testlib.bash"

XNODE=$B/tests/test_xnode
[ -x "$XNODE" ] || fail "$XNODE is not built"
command -v ip > /dev/null || skip "no ip(8) (iproute2) to make network namespaces"
[ "$(id -u)" = 0 ] || skip "network namespaces need root"

NSA=mori-xa-$$
NSB=mori-xb-$$
VA=mxa$$
VB=mxb$$
IPA=10.213.$(($$ % 200)).1
IPB=10.213.$(($$ % 200)).2
netns_cleanup() {
	ip netns del "$NSA" 2> /dev/null
	ip netns del "$NSB" 2> /dev/null
	ip link del "$VA" 2> /dev/null
}
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
ok=
for _ in $(seq 50); do
	if ip netns exec "$NSA" bash -c "exec 3<>/dev/tcp/$IPB/9" 2>&1 | grep -q refused; then ok=1; break; fi
	sleep 0.1
done
[ -n "$ok" ] || fail "veth $IPA <-> $IPB does not carry TCP"
echo "# namespaces $NSA ($IPA) and $NSB ($IPB) joined by veth $VA/$VB"

MORI_XNODE_NS_A=$NSA MORI_XNODE_IP_A=$IPA MORI_XNODE_NS_B=$NSB MORI_XNODE_IP_B=$IPB \
	timeout $((500 * SLOW)) "$XNODE" 2>&1 | tee "$T/xnode.out"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { tail -n 30 /tmp/mori-xnode-*.log 2> /dev/null | tail -n 60; fail "test_xnode across namespaces: exit $rc"; }
grep -q "100%: Checks: [1-9]" "$T/xnode.out" || fail "test_xnode ran no checks"
pass "cross-node suite across two network namespaces ($IPA <-> $IPB over veth)"

# Deadlines when the link goes down under a transfer (issue 18, item 6): the daemons in the
# namespaces again, with a cluster key, B's end of the veth set down mid-write.
DEADLINE=$B/tests/test_deadline
[ -x "$DEADLINE" ] || fail "$DEADLINE is not built"
"$MORACTL" keygen "$T/cluster.key" > /dev/null || fail "moractl keygen"
MORI_XNODE_NS_A=$NSA MORI_XNODE_IP_A=$IPA MORI_XNODE_NS_B=$NSB MORI_XNODE_IP_B=$IPB MORI_XNODE_VETH_B=$VB \
	MORI_XNODE_KEY=$T/cluster.key timeout $((120 * SLOW)) "$DEADLINE" 2>&1 | tee "$T/deadline.out"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { tail -n 30 /tmp/mori-deadline-*.log 2> /dev/null | tail -n 60; fail "test_deadline across namespaces: exit $rc"; }
grep -q "link down under a write" "$T/deadline.out" || fail "test_deadline did not take the link down"
pass "deadlines across the namespaces: a link that goes down ends the transfer at its deadline"
exit 0
