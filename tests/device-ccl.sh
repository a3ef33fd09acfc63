#!/usr/bin/env bash
# MORI-CCL on the GPU machine (tests/devicelib.bash says how the scripts run there):
# tests/test_gpu_coll (N processes on one GPU as the ranks, every collective against the reference,
# windows, graph replays, faults), then `mori-bench coll` against a morid started here, MPS started
# for both.
#
#   tests/device-ccl.sh bundle [--bundle DIR]   here: build (B, default build) and bundle the
#                                  binaries and the libraries they need into DIR (default bundle/ccl)
#   tests/device-ccl.sh run [--bundle DIR] [PART ...]   there; PARTs (default: test bench)
#       test   tests/test_gpu_coll ($MORI_COLL_SIZES, default 1 2 3 4 8)
#       xnode  tests/test_gpu_coll_xnode: two morids on loopback, ranks 4 + 4, 1 + 1, 2 + 1
#              ($MORI_COLL_XNODE_SIZES, default 8 2 3): the cross-node path
#       bench  mori-bench coll --pes "${CCL_BENCH_PES:-2 4 8}" --max ${CCL_BENCH_MAX:-1G}
#       variants  the large all-reduce (${CCL_VAR_ONLY:-allreduce twoshot}, ${CCL_VAR_SIZE:-1G}) under
#              each kernel setting of $CCL_VARIANTS (lines of NAME VAR=VALUE ...; default below)
# Logs to $OUT/log (or /tmp/device-ccl/log); a summary ends the output.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
dev_args "${CCL_BUNDLE:-bundle/ccl}" "$@"
set -- "${DEV_ARGS[@]}"

if [ "$DEV_CMD" = bundle ]; then
	set -e
	B=${B:-build}
	make -j2 B="$B" "$B/mori-bench" "$B/tests/test_gpu_coll" "$B/tests/test_gpu_coll_xnode" "$B/morid" >/dev/null
	dev_bundle "$BUNDLE" "$B/mori-bench" "$B/tests/test_gpu_coll" "$B/tests/test_gpu_coll_xnode" "$B/morid"
	du -sh "$BUNDLE"
	exit 0
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
parts=${*:-test bench}
dev_init ccl "$BUNDLE"
run() { dev_run "$@"; } # SECONDS KEEP CMD...
mps_start
for p in $parts; do
	case $p in
	test)
		echo "== test_gpu_coll (sizes ${MORI_COLL_SIZES:-1 2 3 4 8})" | tee -a "$SUM"
		huge=${MORI_COLL_HUGE-1} # MORI_COLL_HUGE= (empty): no 64 Mi-element cases
		if [ -n "$huge" ]; then export MORI_COLL_HUGE=$huge; else unset MORI_COLL_HUGE; fi
		B=$BIN run "${CCL_TEST_SECS:-200}" "^coll gpu|[0-9]+%|Checks|skipped" "$BIN/test_gpu_coll"
		;;
	xnode)
		echo "== test_gpu_coll_xnode (sizes ${MORI_COLL_XNODE_SIZES:-8 2 3}, two morids)" | tee -a "$SUM"
		B=$BIN run "${CCL_XNODE_SECS:-170}" "^coll gpu|[0-9]+%|Checks|skipped" "$BIN/test_gpu_coll_xnode"
		;;
	bench)
		RT=/tmp/mori-ccl-rt
		morid_start "$RT" || continue
		echo "== mori-bench coll" | tee -a "$SUM"
		run "${CCL_BENCH_SECS:-150}" "^ |^#" "$BIN/mori-bench" coll --dir "$RT" --pes "${CCL_BENCH_PES:-2 4 8}" \
			--max "${CCL_BENCH_MAX:-1073741824}" --iters "${CCL_BENCH_ITERS:-40}"
		morids_stop
		;;
	variants)
		RT=/tmp/mori-ccl-rt
		morid_start "$RT" || continue
		V=${CCL_VARIANTS:-"default
flat-ce MORI_COLL_AR_FLAT=ce
flat-k264 MORI_COLL_FLAT_BLOCKS=264
one-kernel MORI_COLL_AR_FLAT=0
one-kernel-cegather MORI_COLL_AR_FLAT=0 MORI_COLL_AR_GATHER=ce"}
		while read -r name envs; do
			[ -n "$name" ] || continue
			echo "== variant $name: ${envs:-(defaults)}" | tee -a "$SUM"
			run "${CCL_VAR_SECS:-40}" "^ |^# [0-9]" env $envs "$BIN/mori-bench" coll --dir "$RT" --pes "${CCL_BENCH_PES:-2 4 8}" \
				--only "${CCL_VAR_ONLY:-allreduce twoshot}" --min "${CCL_VAR_SIZE:-1073741824}" \
				--max "${CCL_VAR_SIZE:-1073741824}" --iters 3
		done <<< "$V"
		morids_stop
		;;
	*) echo "unknown part $p" ;;
	esac
done
dev_summary
