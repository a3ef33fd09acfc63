#!/usr/bin/env bash
# MORI-CCL across two nodes as two network namespaces joined by a veth pair: one
# morid in each, the ranks outside (odd ranks on B), test_coll_host's suite with host
# heaps: every collective's host path reads the other node's scratch through the daemons
# (mori_shmem_getmem) and meets at the group's barriers across the veth. Skips (77) where
# namespaces cannot be made (not root, no CAP_NET_ADMIN, no iproute2).
source "$(dirname "$0")/testlib.bash"
source "$(dirname "$0")/netnslib.bash"
netns_suite c 215 test_coll_host coll MORI_COLL_TWO=1
grep -q "two morids" "$T/coll.out" || fail "test_coll_host did not run across the two daemons"
pass "MORI-CCL host paths across two network namespaces ($IPA <-> $IPB over veth)"
exit 0
