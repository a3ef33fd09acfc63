#!/usr/bin/env bash
# MORI-EP on the GPU machine, in one call: tests/test_gpu_ep (N processes on the one GPU as N ranks),
# then `mori-bench ep` for world sizes 2 4 8, under one MPS control daemon started here.
#
#   tests/device-ep.sh bundle        here: build (B, default build-ep) and bundle the binaries and the
#                                    libraries they need into bundle/ep/ (name it in carry)
#   tests/device-ep.sh run [PART ...]   there; PARTs (default: test bench)
#       test    tests/test_gpu_ep ($MORI_EP_ITERS, $MORI_EP_WORLDS, $MORI_EP_CASES pass through)
#       bench   mori-bench ep --pes "2 4 8" against a morid started here ($EP_BENCH_ITERS, default 30;
#               $EP_BENCH_PES); benchq the same with --quant (bf16 quantised to fp8 by dispatch)
# Logs to $OUT/log (or /tmp/device-ep/log); a summary ends the output.
set -u
cd "$(dirname "$0")/.."
BUNDLE=${EP_BUNDLE:-bundle/ep} # bundle/<helper> for a helper of its own

if [ "${1:-}" = bundle ]; then
	set -e
	B=${B:-build-ep}
	make -j2 B="$B" "$B/mori-bench" "$B/tests/test_gpu_ep" "$B/morid" >/dev/null
	rm -rf "$BUNDLE"
	mkdir -p bundle
	/work/shared/tools/device-bundle "$BUNDLE" "$B/mori-bench" "$B/tests/test_gpu_ep" "$B/morid"
	du -sh "$BUNDLE"
	exit 0
fi
[ "${1:-}" = run ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
shift
parts=${*:-test bench}
export LD_LIBRARY_PATH=$PWD/$BUNDLE/lib
BIN=$PWD/$BUNDLE/bin
O=${OUT:-/tmp/device-ep}
mkdir -p "$O"
exec > >(tee "$O/log") 2>&1
SUM=$O/summary
: > "$SUM"
export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 # never NVLink multicast
MPS= MPID=
mps_start() {
	command -v nvidia-cuda-mps-control >/dev/null || { echo "MPS: no nvidia-cuda-mps-control" | tee -a "$SUM"; return 1; }
	export CUDA_MPS_PIPE_DIRECTORY=/tmp/mori-ep-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mori-ep-mps-log
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	nvidia-cuda-mps-control -d && MPS=1 && echo "MPS: control daemon started" | tee -a "$SUM"
}
cleanup() {
	[ -n "$MPID" ] && kill "$MPID" 2>/dev/null && wait "$MPID" 2>/dev/null
	[ -n "$MPS" ] && echo quit | nvidia-cuda-mps-control
}
trap cleanup EXIT
run() { # SECONDS KEEP CMD...: run with a timeout, keep matching lines in the summary
	local secs=$1 keep=$2 t0
	shift 2
	t0=$(date +%s)
	timeout -k 5 "$secs" "$@" > /tmp/device-ep.step 2>&1
	local rc=$?
	cat /tmp/device-ep.step
	grep -E "$keep|FAIL|rc=|rror" /tmp/device-ep.step >> "$SUM"
	echo "rc=$rc ($(( $(date +%s) - t0 )) s)" | tee -a "$SUM"
}

date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$SUM"
mps_start
for p in $parts; do
	case $p in
	test)
		echo "== test_gpu_ep (iters ${MORI_EP_ITERS:-200}, worlds ${MORI_EP_WORLDS:-1 2 3 5 8})" | tee -a "$SUM"
		B=$BIN run "${EP_TEST_SECS:-300}" "^MORI-EP|^reference|^deepep|^graph|^inflight|^faults|[0-9]+%|Checks|skipped" \
			"$BIN/test_gpu_ep"
		;;
	bench|benchq)
		q=; [ "$p" = benchq ] && q=--quant
		RT=/tmp/mori-ep-rt
		rm -rf "$RT" && mkdir -p "$RT"
		"$BIN/morid" --foreground --runtime-dir "$RT" --log-level warn 2>> "$O/morid.log" &
		MPID=$!
		for _ in $(seq 200); do [ -S "$RT/morid.session" ] && break; sleep 0.05; done
		echo "== mori-bench ep" | tee -a "$SUM"
		run "${EP_BENCH_SECS:-200}" "^ |^#" "$BIN/mori-bench" ep --dir "$RT" --pes "${EP_BENCH_PES:-2 4 8}" \
			--iters "${EP_BENCH_ITERS:-30}" $q
		kill "$MPID" 2>/dev/null && wait "$MPID" 2>/dev/null
		MPID=
		;;
	*) echo "unknown part $p" ;;
	esac
done
echo
echo "================ summary ================"
cat "$SUM"
