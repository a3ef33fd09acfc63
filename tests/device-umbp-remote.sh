#!/usr/bin/env bash
# UMBP remote gets into torch CUDA tensors on the GPU machine: two morids on loopback (each with a
# peer listener and a DRAM store), values put through one, got through the other into CUDA
# tensors (the bytes land in a DRAM slot of the getter's node, then its GPU copy engine moves them:
# one tensor of 16 MiB, a batch of eight of 1 MiB; then a tensor registered with register_memory,
# which the getter's morid writes straight into), every byte compared on the host
# (tests/python/test_umbp_remote.py, test_cuda_tensor, with the rest of that file). The bundle and
# the run are tests/device-python.sh's (tests/devicelib.bash says how the scripts run there).
#
#   tests/device-umbp-remote.sh bundle [--bundle DIR]   here: as tests/device-python.sh bundle
#   tests/device-umbp-remote.sh run [--bundle DIR]      there: the file's tests; the last line says
#                                   whether the CUDA check passed ("umbp remote get into CUDA
#                                   tensors: PASSED"), was skipped (no CUDA for torch) or failed
set -u
cd "$(dirname "$0")/.."
case ${1:-} in
bundle) exec tests/device-python.sh "$@" ;;
run) ;;
*) sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
log=$(mktemp)
PYTEST_SEL=tests/python/test_umbp_remote.py tests/device-python.sh "$@" 2>&1 | tee "$log"
r=$(grep -Eo 'test_umbp_remote.py::test_cuda_tensor (PASSED|FAILED|SKIPPED|ERROR)' "$log" | head -n 1)
rm -f "$log"
echo "umbp remote get into CUDA tensors: ${r##* }"
[ "${r##* }" = PASSED ]
