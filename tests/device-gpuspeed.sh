#!/usr/bin/env bash
# SHMEM's ordering and the speed of SHMEM's waits and of every collective beside NVSHMEM's, on the
# GPU machine in one go (about six minutes; tests/devicelib.bash says how the scripts run there):
# ranks and PEs are processes on the one GPU under MPS, as in the other scripts.
#
#   tests/device-gpuspeed.sh bundle [--bundle DIR]   here: build (B, default build) and bundle the
#                                   binaries, their libraries and tools/bench_nvshmem.cu into DIR
#                                   (default bundle/gpuspeed)
#   tests/device-gpuspeed.sh run [--bundle DIR] [PART ...]   there; PARTs (default: all, in order)
#       order   the ordering test: test_gpu_shmem's "ordering" case (8 processes on one GPU: GPU
#               scope; over several GPUs where there are: system scope) and test_gpu_shmem_proxy
#               (4 processes over two morids: system scope through the proxy)
#       coll    test_gpu_coll: every collective against the reference (flat forms, one-shot in one
#               launch), ${SPEED_COLL_SIZES:-2 3 8} ranks, no 64 Mi-element cases
#       lat     mori-bench shmem --lat beside NVSHMEM (built here from the wheel): put+signal and
#               p + wait_until ping-pong at GPU and system scope, fetch-add, barrier
#       bench   mori-bench coll --pes "2 4 8" --max ${SPEED_COLL_MAX:-128M} --no-overlap --nvshmem:
#               every collective beside NVSHMEM's team collectives (host and kernel), the graph rows
# Logs to $OUT/log (or /tmp/device-gpuspeed/log); a summary ends the output.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
dev_args "${SPEED_BUNDLE:-bundle/gpuspeed}" "$@"
set -- "${DEV_ARGS[@]}"

if [ "$DEV_CMD" = bundle ]; then
	set -e
	B=${B:-build}
	make -j2 B="$B" "$B/mori-bench" "$B/tests/test_gpu_shmem" "$B/tests/test_gpu_shmem_proxy" \
		"$B/tests/test_gpu_coll" "$B/morid" > /dev/null
	dev_bundle "$BUNDLE" "$B/mori-bench" "$B/tests/test_gpu_shmem" "$B/tests/test_gpu_shmem_proxy" \
		"$B/tests/test_gpu_coll" "$B/morid"
	cp tools/bench_nvshmem.cu "$BUNDLE/"
	du -sh "$BUNDLE"
	exit 0
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
parts=${*:-order coll lat bench}
dev_init gpuspeed "$BUNDLE"
for p in $parts; do
	case $p in
	order)
		echo "== ordering: test_gpu_shmem (ordering case, 8 PEs) and test_gpu_shmem_proxy (4 PEs, 2 morids)" | tee -a "$SUM"
		B=$BIN CK_RUN_CASE=ordering dev_run 120 "ordering|PEs on one GPU|[0-9]+%|Checks|skipped" "$BIN/test_gpu_shmem"
		B=$BIN dev_run 130 "proxy|[0-9]+%|Checks|skipped" "$BIN/test_gpu_shmem_proxy"
		;;
	coll)
		echo "== test_gpu_coll (sizes ${SPEED_COLL_SIZES:-2 3 8})" | tee -a "$SUM"
		mps_start
		B=$BIN MORI_COLL_SIZES="${SPEED_COLL_SIZES:-2 3 8}" dev_run 150 "^coll gpu|[0-9]+%|Checks|skipped" \
			env -u MORI_COLL_HUGE "$BIN/test_gpu_coll"
		mps_stop
		;;
	lat)
		nvshmem_build "$DEV_BUNDLE/bench_nvshmem.cu" /tmp/bench_nvshmem-gpuspeed
		mps_start
		echo "== mori-bench shmem --lat${NVB:+ --nvshmem $NVB}" | tee -a "$SUM"
		dev_run 100 "^ |^#" "$BIN/mori-bench" shmem --lat ${NVB:+--nvshmem $NVB}
		mps_stop
		;;
	bench)
		[ -n "${NVB:-}" ] || nvshmem_build "$DEV_BUNDLE/bench_nvshmem.cu" /tmp/bench_nvshmem-gpuspeed
		mps_start
		RT=/tmp/mori-gpuspeed-rt
		morid_start "$RT" || continue
		echo "== mori-bench coll${NVB:+ --nvshmem $NVB}" | tee -a "$SUM"
		dev_run "${SPEED_COLL_SECS:-240}" "^ |^#" "$BIN/mori-bench" coll --dir "$RT" --pes "${SPEED_COLL_PES:-2 4 8}" \
			--max "${SPEED_COLL_MAX:-134217728}" --iters "${SPEED_COLL_ITERS:-20}" --no-overlap ${NVB:+--nvshmem $NVB}
		morids_stop
		mps_stop
		;;
	*) echo "unknown part $p" ;;
	esac
done
dev_summary
