#!/usr/bin/env bash
# MORI-CCO across two nodes as two network namespaces joined by a veth pair: one morid in each,
# the ranks outside (they reach their daemons through the runtime dirs), and test_cco's two-daemon
# suite (ranks node-major over the two nodes: host-memory windows, puts and gets through the
# daemons, teams, the device communicator's resources, a rank killed in the barrier, two
# communicators at once) across the veth. Skips (77) where namespaces cannot be made (not root,
# no CAP_NET_ADMIN, no iproute2).
source "$(dirname "$0")/testlib.bash"

CCO=$B/tests/test_cco
[ -x "$CCO" ] || fail "$CCO is not built"
source "$(dirname "$0")/netnslib.bash"
netns_pair o 217

MORI_CCO_ONLY=two MORI_XNODE_NS_A=$NSA MORI_XNODE_IP_A=$IPA MORI_XNODE_NS_B=$NSB MORI_XNODE_IP_B=$IPB \
	timeout $((400 * SLOW)) "$CCO" 2>&1 | tee "$T/cco.out"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { tail -n 30 /tmp/mori-cco-*.log 2> /dev/null | tail -n 60; fail "test_cco across namespaces: exit $rc"; }
grep -q "100%: Checks: [1-9]" "$T/cco.out" || fail "test_cco ran no checks"
pass "MORI-CCO two-daemon suite across two network namespaces ($IPA <-> $IPB over veth)"
exit 0
