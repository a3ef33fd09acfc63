#!/bin/bash
# RDMA on real verbs devices: boots a QEMU guest from Debian's kernel with two Soft-RoCE devices
# (rxe0 <-> rxe1, tests/softroce/) and runs tests/softroce/suite.sh in it: morid's device list
# (moractl nics/status, rdma_* options), then tests/test_rdma_verbs (the RDMA engine over
# libibverbs: verified random batches, notifications after the data, throughput, bad and
# deregistered keys, a QP forced into error, a frozen and a killed peer), perftest's
# ib_write_bw/ib_read_bw on the same devices, then tests/test_rdma_daemons (two morids over RDMA,
# clients through libmori, fault cases) and mori-bench io over RDMA beside ib_write_bw.
# Skips (77) without qemu-system-x86, a readable kernel image and its modules, or static busybox.
# Size: MORI_TEST_RDMA_VM=1 runs the full suite (1000 batches in each test, 256 MiB throughput
# runs; about 6 minutes under TCG); by default a lighter one (150 and 100 batches, 32 MiB) that
# takes about 2.5 minutes.
# Results: $B/test-logs/rdma-vm/ (console log, verbs.json, perftest.json).
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
skip() { echo "skipped: $*"; exit 77; }
[ -x "$B/tests/test_rdma_verbs" ] && [ -x "$B/morid" ] || { echo "build first (make)"; exit 1; }
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64 (tools/install-deps installs it as root)"
ls /boot/vmlinuz-* >/dev/null 2>&1 || skip "no kernel image in /boot (install linux-image-amd64)"
if [ "${MORI_TEST_RDMA_VM:-0}" = 1 ]; then
	batches=1000 dbatches=1000 mib=256 iters=16 tmo=1200
else
	batches=150 dbatches=100 mib=32 iters=6 tmo=400
fi
out=$B/test-logs/rdma-vm
rm -rf "$out"
mkdir -p "$out"
# The checkout and the build dir are exported into the guest wherever they live (the guest's
# /tmp, /run and /root are its own), so a clone under /tmp or a spaced path works too.
# A build dir inside the checkout is passed relative to it, as the runner gives it to the
# tests on the host (the suite runs in the checkout): test_rdma_daemons builds moractl
# command lines for popen from $B unquoted, which a space in the checkout's path would split.
repo=$(pwd -P)
bdir=$(realpath "$B")
case $bdir/ in "$repo"/*/) bdir=$(realpath --relative-to="$repo" "$bdir") ;; esac
tests/softroce/run.sh -d "$out" -t "$tmo" -x "$repo" -x "$B" "$repo/tests/softroce/suite.sh" \
	REPO="$repo" B="$bdir" BATCHES=$batches DBATCHES=$dbatches MIB=$mib BENCH_ITERS=$iters \
	> "$out/run.out" 2>&1
rc=$?
grep -E '^(ok|FAIL|skipped):|^[0-9]\. |^   |MB/s|devices:|daemons:|paired|^\[|^mori-vm|^run.sh|^round' "$out/run.out"
case $rc in
0) echo "rdma vm suite passed"; exit 0 ;;
77) grep -m1 '^skipped' "$out/run.out"; exit 77 ;;
124) echo "FAIL: the VM ran past ${tmo} s"; exit 1 ;;
125) tail -n 30 "$out/run.out"; echo "FAIL: the guest gave no status"; exit 1 ;;
*) echo "FAIL: suite exit $rc"; exit 1 ;;
esac
