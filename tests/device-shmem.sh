#!/usr/bin/env bash
# MORI-SHMEM's device side on the GPU machine (tests/devicelib.bash says how the scripts run there):
# the device-API test, then `mori-bench shmem` with NVSHMEM's rows (NVSHMEM built there against the
# nvidia-nvshmem-cu13 wheel of its python3), MPS started for the multi-process parts.
#
#   tests/device-shmem.sh bundle [--bundle DIR]   here: build (B, default build) and bundle the
#                                    binaries and the libraries they need into DIR (default bundle/shmem)
#   tests/device-shmem.sh run [--bundle DIR] [PART ...]   there; PARTs (default: all): test mp proxy
#                                    heap bench
#       test   tests/test_gpu_shmem_dev: the device API, N PEs as heaps of one process
#       mp     tests/test_gpu_shmem: N processes as PEs of one group (its own MPS daemon)
#       proxy  tests/test_gpu_shmem_proxy: the PEs split over two morids on loopback, every call
#              to the other "node" through morid's proxy (its own MPS daemon)
#       heap   the host side's VRAM heaps (tests/test_gpu_heap): N processes on the one GPU as N
#              PEs of one morid for N in $HEAP_PES (default 2 4 8), under MPS with
#              CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / N per PE
# Logs to $OUT/log (or /tmp/device-shmem/log); a summary ends the output.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
dev_args "${BUNDLE:-bundle/shmem}" "$@"
set -- "${DEV_ARGS[@]}"

if [ "$DEV_CMD" = bundle ]; then
	set -e
	B=${B:-build}
	make -j2 B="$B" "$B/mori-bench" "$B/tests/test_gpu_shmem_dev" "$B/tests/test_gpu_heap" "$B/tests/test_gpu_shmem" \
		"$B/tests/test_gpu_shmem_proxy" "$B/morid" >/dev/null
	dev_bundle "$BUNDLE" "$B/mori-bench" "$B/tests/test_gpu_shmem_dev" "$B/tests/test_gpu_shmem" \
		"$B/tests/test_gpu_shmem_proxy" "$B/tests/test_gpu_heap" "$B/morid"
	cp tools/bench_nvshmem.cu "$BUNDLE/"
	du -sh "$BUNDLE"
	exit 0
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
parts=${*:-test mp proxy heap bench}
dev_init shmem "$BUNDLE"
run() { dev_run "$@"; } # SECONDS KEEP CMD...
for p in $parts; do
	case $p in
	test)
		echo "== test_gpu_shmem_dev" | tee -a "$SUM"
		run 120 "^(ops|ring|fadd|amo|lock|wait|barrier|abort):|[0-9]+%|Checks" "$BIN/test_gpu_shmem_dev"
		;;
	mp)
		echo "== test_gpu_shmem: ${MORI_SHMEM_PES:-8} processes as PEs of one group, the device API" | tee -a "$SUM"
		B=$BIN run 200 "PEs on one GPU|device API|killed|[0-9]+%|Checks|skipped" "$BIN/test_gpu_shmem"
		;;
	proxy)
		echo "== test_gpu_shmem_proxy: ${MORI_SHMEM_PES:-4} processes over two morids, the proxy path" | tee -a "$SUM"
		B=$BIN run 150 "PEs on one GPU|proxy|killed|[0-9]+%|Checks|skipped" "$BIN/test_gpu_shmem_proxy"
		;;
	heap)
		mps_start
		for n in ${HEAP_PES:-2 4 8}; do
			echo "== test_gpu_heap: $n PEs (processes) on one GPU, MPS ${MPS:+on}${MPS:-off}" | tee -a "$SUM"
			B=$BIN MORI_SHMEM_PES=$n CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / n)) \
				run 240 "[0-9]+%|Checks|PEs on one GPU|skipped" "$BIN/test_gpu_heap"
		done
		mps_stop
		;;
	bench)
		nvshmem_build "$DEV_BUNDLE/bench_nvshmem.cu" /tmp/bench_nvshmem
		mps_start
		echo "== mori-bench shmem${NVB:+ --nvshmem $NVB}" | tee -a "$SUM"
		run 240 "^ |^#" "$BIN/mori-bench" shmem ${NVB:+--nvshmem $NVB}
		mps_stop
		;;
	*) echo "unknown part $p" ;;
	esac
done
dev_summary
