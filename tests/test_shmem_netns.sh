#!/usr/bin/env bash
# MORI-SHMEM across two nodes as two network namespaces joined by a veth pair: one morid in each, the PEs outside (they reach their daemons through the runtime
# dirs), and test_shmem's two-daemon suite (groups of 2, 3, 4 and 8 PEs split over the nodes,
# random symmetric calls, divergent calls, puts/gets through the daemons, barriers, a PE killed on
# the other node, unique ids) across the veth. Skips (77) where namespaces cannot be made (not
# root, no CAP_NET_ADMIN, no iproute2).
source "$(dirname "$0")/testlib.bash"
source "$(dirname "$0")/netnslib.bash"
netns_suite s 214 test_shmem shmem MORI_SHMEM_ONLY=two
pass "MORI-SHMEM two-daemon suite across two network namespaces ($IPA <-> $IPB over veth)"
exit 0
