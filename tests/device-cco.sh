#!/usr/bin/env bash
# MORI-CCO's device side on the GPU machine (tests/devicelib.bash says how the scripts run there):
# tests/test_gpu_cco (its own MPS daemon) at several rank counts, each running every device call
# through load/store (one morid) and through the proxy (two morids on loopback), a rank killed
# inside a barrier session, and the overlap figures (a GEMM beside SM puts and beside copy-engine
# puts of the same bytes).
#
#   tests/device-cco.sh bundle [--bundle DIR]   here: build (B, default build) and bundle the
#                                    binaries and the libraries they need into DIR (default bundle/cco)
#   tests/device-cco.sh run [--bundle DIR] [PART ...]   there; PARTs (default: all): test ranks
#       test   tests/test_gpu_cco with 4 ranks: lsa, proxy and overlap cases
#       ranks  the same for $CCO_RANKS (default 2 8) ranks
# Logs to $OUT/log (or /tmp/device-cco/log); a summary ends the output.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
dev_args "${BUNDLE:-bundle/cco}" "$@"
set -- "${DEV_ARGS[@]}"

if [ "$DEV_CMD" = bundle ]; then
	set -e
	B=${B:-build}
	make -j2 B="$B" "$B/tests/test_gpu_cco" "$B/morid" >/dev/null
	dev_bundle "$BUNDLE" "$B/tests/test_gpu_cco" "$B/morid"
	du -sh "$BUNDLE"
	exit 0
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
parts=${*:-test ranks}
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
	*) echo "unknown part $p" ;;
	esac
done
dev_summary
