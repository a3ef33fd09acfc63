#!/usr/bin/env bash
# MORI-CCO's device side on the GPU machine (tests/devicelib.bash says how the scripts run there):
# tests/test_gpu_cco (its own MPS daemon) at several rank counts, each running every device call
# through load/store (one morid) and through the proxy (two morids on loopback), a rank killed
# inside a barrier session, and the overlap figures (a GEMM beside SM puts and beside copy-engine
# puts of the same bytes); mori.ops.gemm_ar (Triton, through MORI-IR) against torch's GEMM followed
# by MORI-CCL's all-reduce, at 2, 4 and 8 ranks.
#
#   tests/device-cco.sh bundle [--bundle DIR]   here: build (B, default build) and bundle the
#                                    binaries and the libraries they need into DIR (default bundle/cco)
#   tests/device-cco.sh run [--bundle DIR] [PART ...]   there; PARTs (default: all): test ranks gemm_ar
#       test     tests/test_gpu_cco with 4 ranks: lsa, proxy and overlap cases
#       ranks    its lsa and proxy cases for $CCO_RANKS (default 2 8) ranks
#       gemm_ar  tests/gemm_ar_check.py as N processes (one morid, MPS, 100/N % of the SMs each) for N
#                in $GAR_RANKS (default 2 4 8): correctness against an fp32 reference and the times
#                (needs python3 with torch and triton there)
# Logs to $OUT/log (or /tmp/device-cco/log); a summary ends the output.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
dev_args "${BUNDLE:-bundle/cco}" "$@"
set -- "${DEV_ARGS[@]}"

if [ "$DEV_CMD" = bundle ]; then
	set -e
	B=${B:-build}
	make -j2 all B="$B" >/dev/null
	dev_bundle "$BUNDLE" "$B/tests/test_gpu_cco" "$B/morid" "$B/libmori.so"
	cp -L "$B/libmori.so.1" "$BUNDLE/lib/"
	mkdir -p "$BUNDLE/ir"
	cp "$B"/kernels/ir/libmori_shmem_device.bc "$B"/kernels/ir/libmori_shmem_device.json "$BUNDLE/ir/"
	du -sh "$BUNDLE"
	exit 0
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
parts=${*:-test ranks gemm_ar}
dev_init cco "$BUNDLE"
KEEP="ranks on one GPU|CCO device API|killed|overlap|[0-9]+%|Checks|skipped"
for p in $parts; do
	case $p in
	test)
		echo "== test_gpu_cco: 4 ranks (processes) on one GPU" | tee -a "$SUM"
		B=$BIN MORI_CCO_RANKS=4 dev_run 400 "$KEEP" "$BIN/test_gpu_cco"
		;;
	ranks)
		for n in ${CCO_RANKS:-2 8}; do
			echo "== test_gpu_cco: $n ranks" | tee -a "$SUM"
			B=$BIN MORI_CCO_RANKS=$n CK_RUN_CASE=lsa dev_run 250 "$KEEP" "$BIN/test_gpu_cco"
			B=$BIN MORI_CCO_RANKS=$n CK_RUN_CASE=proxy dev_run 250 "$KEEP" "$BIN/test_gpu_cco"
		done
		;;
	gemm_ar)
		export MORI_LIB=$DEV_BUNDLE/lib/libmori.so MORI_IR_DIR=$DEV_BUNDLE/ir PYTHONPATH=$PWD/python
		export PYTHONDONTWRITEBYTECODE=1 TRITON_CACHE_DIR=/tmp/mori-cco-triton-cache
		python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' 2>&1 | tee -a "$SUM"
		RUN=/tmp/mori-cco-run
		morid_start "$RUN" || continue
		mps_start
		for n in ${GAR_RANKS:-2 4 8}; do
			echo "== gemm_ar: $n ranks" | tee -a "$SUM"
			export CCO_UID_FILE=$O/gemm_ar.$n.uid
			rm -f "$CCO_UID_FILE"
			pids=()
			for r in $(seq 0 $((n - 1))); do
				MORI_RUNTIME_DIR=$RUN CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / n)) \
					timeout -k 5 300 python3 tests/gemm_ar_check.py "$r" "$n" > "$O/gemm_ar.$n.$r.log" 2>&1 &
				pids+=($!)
			done
			fails=0
			for r in $(seq 0 $((n - 1))); do
				wait "${pids[$r]}" || { fails=$((fails + 1)); echo "== rank $r failed (log tail)"; tail -n 25 "$O/gemm_ar.$n.$r.log"; }
			done
			grep -hE "^PE 0: " "$O"/gemm_ar.$n.*.log | tee -a "$SUM"
			grep -hE "^PE [0-9]+: .*(FAIL|over tolerance)" "$O"/gemm_ar.$n.*.log | tee -a "$SUM"
			note "gemm_ar $n ranks: $((n - fails))/$n passed"
		done
		morids_stop
		mps_stop
		;;
	*) echo "unknown part $p" ;;
	esac
done
dev_summary
