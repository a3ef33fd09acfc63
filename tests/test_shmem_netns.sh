#!/usr/bin/env bash
# MORI-SHMEM across two nodes as two network namespaces joined by a veth pair (issue 11,
# acceptance 1): one morid in each, the PEs outside (they reach their daemons through the runtime
# dirs), and test_shmem's two-daemon suite (groups of 2, 3, 4 and 8 PEs split over the nodes,
# random symmetric calls, divergent calls, puts/gets through the daemons, barriers, a PE killed on
# the other node, unique ids) across the veth. Skips (77) where namespaces cannot be made (not
# root, no CAP_NET_ADMIN, no iproute2).
source "$(dirname "$0")/testlib.bash"

SHMEM=$B/tests/test_shmem
[ -x "$SHMEM" ] || fail "$SHMEM is not built"
command -v ip > /dev/null || skip "no ip(8) (iproute2) to make network namespaces"
[ "$(id -u)" = 0 ] || skip "network namespaces need root"

NSA=mori-sa-$$
NSB=mori-sb-$$
VA=msa$$
VB=msb$$
IPA=10.214.$(($$ % 200)).1
IPB=10.214.$(($$ % 200)).2
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
ok=
for _ in $(seq 50); do
	if ip netns exec "$NSA" bash -c "exec 3<>/dev/tcp/$IPB/9" 2>&1 | grep -q refused; then ok=1; break; fi
	sleep 0.1
done
[ -n "$ok" ] || fail "veth $IPA <-> $IPB does not carry TCP"
echo "# namespaces $NSA ($IPA) and $NSB ($IPB) joined by veth $VA/$VB"

MORI_SHMEM_ONLY=two MORI_XNODE_NS_A=$NSA MORI_XNODE_IP_A=$IPA MORI_XNODE_NS_B=$NSB MORI_XNODE_IP_B=$IPB \
	timeout $((400 * SLOW)) "$SHMEM" 2>&1 | tee "$T/shmem.out"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { tail -n 30 /tmp/mori-shmem-*.log 2> /dev/null | tail -n 60; fail "test_shmem across namespaces: exit $rc"; }
grep -q "100%: Checks: [1-9]" "$T/shmem.out" || fail "test_shmem ran no checks"
pass "MORI-SHMEM two-daemon suite across two network namespaces ($IPA <-> $IPB over veth)"
exit 0
