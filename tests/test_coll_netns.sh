#!/usr/bin/env bash
# MORI-CCL across two nodes as two network namespaces joined by a veth pair: one
# morid in each, the ranks outside (odd ranks on B), test_coll_host's suite with host
# heaps: every collective's host path reads the other node's scratch through the daemons
# (mori_shmem_getmem) and meets at the group's barriers across the veth. Skips (77) where
# namespaces cannot be made (not root, no CAP_NET_ADMIN, no iproute2).
source "$(dirname "$0")/testlib.bash"

COLL=$B/tests/test_coll_host
[ -x "$COLL" ] || fail "$COLL is not built"
source "$(dirname "$0")/netnslib.bash"
netns_pair c 215

MORI_COLL_TWO=1 MORI_XNODE_NS_A=$NSA MORI_XNODE_IP_A=$IPA MORI_XNODE_NS_B=$NSB MORI_XNODE_IP_B=$IPB \
	timeout $((400 * SLOW)) "$COLL" 2>&1 | tee "$T/coll.out"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { tail -n 30 /tmp/mori-coll-*.log 2> /dev/null | tail -n 60; fail "test_coll_host across namespaces: exit $rc"; }
grep -q "100%: Checks: [1-9]" "$T/coll.out" || fail "test_coll_host ran no checks"
grep -q "two morids" "$T/coll.out" || fail "test_coll_host did not run across the two daemons"
pass "MORI-CCL host paths across two network namespaces ($IPA <-> $IPB over veth)"
exit 0
