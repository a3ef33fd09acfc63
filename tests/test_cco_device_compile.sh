#!/usr/bin/env bash
# MORI-CCO's device API (include/mori/device/cco.cuh) compiles under nvcc: tests/cco_dev_compile.cu
# instantiates every call at every scope in one kernel, for sm_80 and sm_90. Compile only: the GPU
# checks run the device API. Skipped, saying why, without nvcc.
cd "$(dirname "$0")/.." || exit 1
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2> /dev/null)}
[ -n "$NVCC" ] && [ -x "$NVCC" ] || { echo "skipped: no nvcc"; exit 77; }
T=$(mktemp -d /tmp/mori-ccoc.XXXXXX)
trap 'rm -rf "$T"' EXIT
for arch in 80 90; do
	if ! "$NVCC" -std=c++17 -Iinclude -arch=sm_$arch -Werror all-warnings -c tests/cco_dev_compile.cu \
		-o "$T/cco_$arch.o" > "$T/log" 2>&1; then
		echo "not ok: include/mori/device/cco.cuh does not compile for sm_$arch:"
		head -n 30 "$T/log"
		exit 1
	fi
done
echo "ok: include/mori/device/cco.cuh compiles under $NVCC (every call, thread/warp/block scope, sm_80 and sm_90)"
