#!/usr/bin/env bash
# MORI-EP on the GPU machine (tests/devicelib.bash says how the scripts run there):
# tests/test_gpu_ep (N processes on the one GPU as N ranks), tests/test_gpu_ep_xnode (the ranks
# split over morids on loopback), then `mori-bench ep` for world sizes 2 4 8, under one MPS control
# daemon started here.
#
#   tests/device-ep.sh bundle [--bundle DIR]   here: build (B, default build-ep) and bundle the
#                                    binaries and the libraries they need into DIR (default bundle/ep)
#   tests/device-ep.sh run [--bundle DIR] [PART ...]   there; PARTs (default: test xnode bench)
#       test    tests/test_gpu_ep ($MORI_EP_ITERS, $MORI_EP_WORLDS, $MORI_EP_CASES pass through)
#       xnode   tests/test_gpu_ep_xnode ($MORI_EPX_ITERS, $MORI_EPX_LAYOUTS, $MORI_EPX_CASES pass through)
#       bench   mori-bench ep --pes "2 4 8" against a morid started here ($EP_BENCH_ITERS, default 30;
#               $EP_BENCH_PES); benchq the same with --quant (bf16 quantised to fp8 by dispatch)
#       benchx  mori-bench ep --nodes 2: the ranks over two morids started here ($EP_BENCHX_PES, default 8;
#               intra / cross / mixed routing, the TCP stream baseline)
#       tracex  benchx in normal mode ($EP_BENCH_ITERS, default 3 here), morids at debug level: each
#               kind of proxy batch's count and durations, failed ones apart, and each morid's
#               staging waits (where a cross-node dispatch waits)
# Logs to $OUT/log (or /tmp/device-ep/log); a summary ends the output.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
dev_args "${EP_BUNDLE:-bundle/ep}" "$@"
set -- "${DEV_ARGS[@]}"

if [ "$DEV_CMD" = bundle ]; then
	set -e
	B=${B:-build-ep}
	make -j2 B="$B" "$B/mori-bench" "$B/tests/test_gpu_ep" "$B/tests/test_gpu_ep_xnode" "$B/morid" "$B/moractl" >/dev/null
	dev_bundle "$BUNDLE" "$B/mori-bench" "$B/tests/test_gpu_ep" "$B/tests/test_gpu_ep_xnode" "$B/morid" "$B/moractl"
	du -sh "$BUNDLE"
	exit 0
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
parts=${*:-test xnode bench}
dev_init ep "$BUNDLE"
run() { dev_run "$@"; } # SECONDS KEEP CMD...
mps_start
for p in $parts; do
	case $p in
	test)
		echo "== test_gpu_ep (iters ${MORI_EP_ITERS:-200}, worlds ${MORI_EP_WORLDS:-1 2 3 5 8})" | tee -a "$SUM"
		B=$BIN run "${EP_TEST_SECS:-300}" "^MORI-EP|^reference|^deepep|^graph|^inflight|^faults|[0-9]+%|Checks|skipped" \
			"$BIN/test_gpu_ep"
		;;
	xnode)
		echo "== test_gpu_ep_xnode (iters ${MORI_EPX_ITERS:-100}, layouts ${MORI_EPX_LAYOUTS:-1x4 2x4 2x1 3x2})" | tee -a "$SUM"
		B=$BIN run "${EP_XNODE_SECS:-240}" "^MORI-EP|^reference|^graph|^faults|[0-9]+%|Checks|skipped" \
			"$BIN/test_gpu_ep_xnode"
		;;
	bench|benchq)
		q=; [ "$p" = benchq ] && q=--quant
		RT=/tmp/mori-ep-rt
		morid_start "$RT" || continue
		echo "== mori-bench ep" | tee -a "$SUM"
		run "${EP_BENCH_SECS:-200}" "^ |^#" "$BIN/mori-bench" ep --dir "$RT" --pes "${EP_BENCH_PES:-2 4 8}" \
			--iters "${EP_BENCH_ITERS:-30}" $q
		morids_stop
		;;
	benchx)
		RA=/tmp/mori-ep-rt-a RB=/tmp/mori-ep-rt-b PA=${EP_BENCHX_PORT:-7461}
		morid_start "$RA" --listen "127.0.0.1:$PA" || continue
		morid_start "$RB" --listen "127.0.0.1:$((PA + 1))" || { morids_stop; continue; }
		echo "== mori-bench ep --nodes 2" | tee -a "$SUM"
		run "${EP_BENCHX_SECS:-200}" "^ |^#" "$BIN/mori-bench" ep --nodes 2 --dirs "$RA $RB" --root "127.0.0.1:$PA" \
			--pes "${EP_BENCHX_PES:-8}" --iters "${EP_BENCH_ITERS:-30}"
		morids_stop
		;;
	tracex)
		# where a cross-node dispatch waits: benchx (normal mode) with both morids logging each
		# proxy batch (debug level), then per kind of batch its count and durations, and each
		# side's staging waits (docs/observe.md)
		RA=/tmp/mori-ep-rt-a RB=/tmp/mori-ep-rt-b PA=${EP_BENCHX_PORT:-7461}
		L0=$(wc -l < "$O/morid.log" 2> /dev/null || echo 0) # this part's lines only
		morid_start "$RA" --listen "127.0.0.1:$PA" --log-level debug || continue
		morid_start "$RB" --listen "127.0.0.1:$((PA + 1))" --log-level debug || { morids_stop; continue; }
		echo "== mori-bench ep --nodes 2, proxy traced" | tee -a "$SUM"
		run "${EP_BENCHX_SECS:-200}" "cross" "$BIN/mori-bench" ep --nodes 2 --dirs "$RA $RB" --root "127.0.0.1:$PA" \
			--pes "${EP_BENCHX_PES:-8}" --mode normal --iters "${EP_BENCH_ITERS:-3}"
		for d in "$RA" "$RB"; do "$BIN/moractl" --runtime-dir "$d" status | grep -E "vram_(send|recv)_wait"; done | tee -a "$SUM"
		morids_stop
		# "... batch to PE d (op K, n requests, B bytes) started at T us, took D us"
		tail -n +$((L0 + 1)) "$O/morid.log" |
			grep -o "op [0-9]*, [0-9]* requests, [0-9]* bytes) started at [0-9]* us, took [0-9]* us.*" |
			awk 'BEGIN {name[1] = "put"; name[2] = "get"; name[3] = "put+signal"; name[4] = "atomic"}
			     {op = $2; sub(",", "", op); k = (op in name ? name[op] : "op " op) ($NF == "failed" ? ", failed" : "")
			      b = $5; d = $12; n[k]++; s[k] += d; B[k] += b; if (d > m[k]) m[k] = d}
			     END {for (k in n) printf "proxy batches, %s: %d, %.1f MB, mean %.0f us, max %.0f us\n", k, n[k], B[k] / 1e6, s[k] / n[k], m[k]
			          if (!length(n)) print "proxy batches: none logged (was morid at --log-level debug?)"}' |
			sort | tee -a "$SUM"
		;;
	*) echo "unknown part $p" ;;
	esac
done
dev_summary
