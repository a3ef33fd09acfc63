#!/usr/bin/env bash
# MORI-CCO across two nodes as two network namespaces joined by a veth pair: one morid in each,
# the ranks outside (they reach their daemons through the runtime dirs), and test_cco's two-daemon
# suite (ranks node-major over the two nodes: host-memory windows, puts and gets through the
# daemons, teams, the device communicator's resources, a rank killed in the barrier, two
# communicators at once) across the veth. Skips (77) where namespaces cannot be made (not root,
# no CAP_NET_ADMIN, no iproute2).
source "$(dirname "$0")/testlib.bash"
source "$(dirname "$0")/netnslib.bash"
netns_suite o 217 test_cco cco MORI_CCO_ONLY=two
pass "MORI-CCO two-daemon suite across two network namespaces ($IPA <-> $IPB over veth)"
exit 0
