#!/usr/bin/env bash
# Two nodes as two network namespaces joined by a veth pair: one morid in
# each, the clients outside (they reach their daemons through the runtime dirs), and the whole
# cross-node suite (build/tests/test_xnode: random verified batches, fault cases) across the veth.
# Skips (77) where namespaces cannot be made (not root, no CAP_NET_ADMIN, no iproute2).
source "$(dirname "$0")/testlib.bash"

XNODE=$B/tests/test_xnode
[ -x "$XNODE" ] || fail "$XNODE is not built"
source "$(dirname "$0")/netnslib.bash"
netns_pair x 213

MORI_XNODE_NS_A=$NSA MORI_XNODE_IP_A=$IPA MORI_XNODE_NS_B=$NSB MORI_XNODE_IP_B=$IPB \
	timeout $((500 * SLOW)) "$XNODE" 2>&1 | tee "$T/xnode.out"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { tail -n 30 /tmp/mori-xnode-*.log 2> /dev/null | tail -n 60; fail "test_xnode across namespaces: exit $rc"; }
grep -q "100%: Checks: [1-9]" "$T/xnode.out" || fail "test_xnode ran no checks"
pass "cross-node suite across two network namespaces ($IPA <-> $IPB over veth)"

# Deadlines when the link goes down under a transfer: the daemons in the
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
