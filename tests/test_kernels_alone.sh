#!/usr/bin/env bash
# Every .cu of kernels/ compiles on its own (mk/kernels.mk check-alone): libmori's image is one
# translation unit (kernels/mori_kernels.cu includes them all), and none of its files may lean on
# what that unit happened to include before it: for NVIDIA with nvcc, for AMD for every arch
# mk/kernels.mk builds (hipcc, clang-19). Skipped, saying why, without any of them.
cd "$(dirname "$0")/.." || exit 1
B=${B:-build}
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2> /dev/null)}
HIPCC=${HIPCC:-$(command -v hipcc || ls /opt/rocm/bin/hipcc 2> /dev/null)}
out=$(make -j2 -s --no-print-directory -f mk/kernels.mk B="$B" NVCC="$NVCC" HIPCC="$HIPCC" check-alone 2>&1)
rc=$?
echo "$out"
if [ $rc -ne 0 ]; then
	echo "not ok: a kernel source does not compile alone"
	exit 1
fi
if [ "$(echo "$out" | grep -c '^skipped')" = 2 ]; then
	exit 77
fi
echo "ok: every kernels/*.cu compiles alone$(echo "$out" | grep -q '^skipped' && echo " (one side skipped, above)")"
