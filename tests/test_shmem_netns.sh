#!/usr/bin/env bash
# MORI-SHMEM across two nodes as two network namespaces joined by a veth pair: one morid in each, the PEs outside (they reach their daemons through the runtime
# dirs), and test_shmem's two-daemon suite (groups of 2, 3, 4 and 8 PEs split over the nodes,
# random symmetric calls, divergent calls, puts/gets through the daemons, barriers, a PE killed on
# the other node, unique ids) across the veth. Skips (77) where namespaces cannot be made (not
# root, no CAP_NET_ADMIN, no iproute2).
source "$(dirname "$0")/testlib.bash"

SHMEM=$B/tests/test_shmem
[ -x "$SHMEM" ] || fail "$SHMEM is not built"
source "$(dirname "$0")/netnslib.bash"
netns_pair s 214

MORI_SHMEM_ONLY=two MORI_XNODE_NS_A=$NSA MORI_XNODE_IP_A=$IPA MORI_XNODE_NS_B=$NSB MORI_XNODE_IP_B=$IPB \
	timeout $((400 * SLOW)) "$SHMEM" 2>&1 | tee "$T/shmem.out"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { tail -n 30 /tmp/mori-shmem-*.log 2> /dev/null | tail -n 60; fail "test_shmem across namespaces: exit $rc"; }
grep -q "100%: Checks: [1-9]" "$T/shmem.out" || fail "test_shmem ran no checks"
pass "MORI-SHMEM two-daemon suite across two network namespaces ($IPA <-> $IPB over veth)"
exit 0
