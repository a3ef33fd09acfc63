#!/usr/bin/env bash
# VRAM figures through the library and the GPU tests, on the GPU machine (tests/devicelib.bash
# says how the scripts run there). DIR: --bundle DIR, default bundle/ (git-ignored).
#
#   tests/device-run.sh bundle [--bundle DIR]          here: make, then bundle the binaries, the
#                                                      shared libraries they need and the trace
#   tests/device-run.sh run [--bundle DIR] [PART ...]  there: PARTs (default: io io2 lat gpubench
#                                                      kv tests, in this order)
#       io        mori-bench io --mem vram: 16 KiB x 65 536 (prepared list and plain batch),
#                 the 4 KiB..64 MiB sweep, mixed host/VRAM, a verified read
#       io2       16 KiB x 65 536 again: cudaMalloc regions (MORI_VRAM_ALLOC=malloc) instead of
#                 VMM, and pipeline depth 2 and 4
#       lat       4 KiB, batch 1: end-to-end p50/p99 through the library
#       gpubench  mori-gpubench (kernel-only 4 KiB time, gpu_xfer, library rows)
#       kv        mori-kvreplay --mem vram on the whole trace ($KV_MODEL, default llama3-8b;
#                 llama3-70b-tp8 for 4 KiB pages; as fast as possible,
#                 $KV_ARGS, default --verify-every 128: the CPU cannot fill and check all ~18 TB)
#                 between two runs of mori-bench io --mem vram --prep at the page size
#       xnode     cross-node VRAM over TCP, two morids on loopback: mori-bench io --mem vram
#                 (and host memory, same daemons, for reference) against a plain TCP stream
#       tests     the GPU tests (make check-gpu)
#       observe   observability on the GPU: moractl topo (+ --json) and diagnose, without and with MPS;
#                 a traced mori-bench io --mem vram (--trace) turned into Perfetto JSON by mori-viz
#                 and checked (tracks and events); the traced kernel with tracing off against the
#                 untraced one: kernel only (mori-gpubench, events) and end to end in alternating rounds (ROUNDS, default 5), 16 KiB and 4 KiB x 65 536
#       hostio    host memory, same node 64 KiB x 256 and cross node (two morids on loopback)
#                 1 MiB x 64, 3 rounds; with AB_BEFORE=DIR (a bundle's bin/ of another build,
#                 its libs in DIR/../lib) the same rounds alternate with that build (A/B)
# Everything is logged to $OUT/log (or /tmp/device-run/log); a summary of the key lines ends
# the output. Each step has its own timeout, so a hung step costs its timeout, not the run.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
dev_args "${RUN_BUNDLE:-bundle}" "$@"
set -- "${DEV_ARGS[@]}"

if [ "$DEV_CMD" = bundle ]; then
	set -e
	BLD=${BLD:-build}
	make -j2 B="$BLD" >/dev/null
	ls "$BLD"/kernels/copy.fatbin >/dev/null # the kernels must be in libmori (nvcc here)
	dev_bundle "$BUNDLE" "$BLD"/morid "$BLD"/moractl "$BLD"/mori-bench "$BLD"/mori-kvreplay \
		"$BLD"/mori-gpubench "$BLD"/mori-viz "$BLD"/tests/test_gpu_*
	dev_bundle_trace "$BUNDLE"
	du -sh "$BUNDLE"
	exit 0
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
parts=${*:-io io2 lat gpubench kv tests}

dev_init run "$BUNDLE"
export B=$BIN
RT=$(mktemp -d /tmp/mori-rt.XXXXXX)
stop_morid() { morids_stop; }
start_morid() { morids_stop; morid_start "$RT"; }
step() { echo; echo "== $*"; echo "== $*" >> "$SUM"; }
# run SECS KEEP CMD...: CMD with a timeout, its output kept, the lines matching KEEP copied into the summary
run() { local secs=$1 keep=$2; shift 2; dev_run "$secs" "$keep|^mori-" "$@"; }

echo "$(nproc) cores, $(uname -r)" | tee -a "$SUM"
start_morid || exit 1
ROWS='^ +[0-9]+[KM]? |^#'

for p in $parts; do
	case $p in
	io)
		step "io: 16 KiB x 65 536 VRAM->VRAM (two processes), prepared list (all indices each iteration)"
		run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --mem vram --block 16K --batch 65536 --iters 20 --prep
		step "io: 16 KiB x 65 536 VRAM->VRAM, plain batch (mori_xfer_batch)"
		run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --mem vram --block 16K --batch 65536 --iters 20
		step "io: sweep 4 KiB..64 MiB, batch 65 536 (1 GiB cap), prepared list"
		run 200 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --mem vram --block-min 4K --block-max 64M \
			--batch 65536 --iters 10 --prep
		step "io: host -> VRAM (local host, remote VRAM), 16 KiB x 65 536"
		run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --local-mem host --remote-mem vram --block 16K \
			--batch 65536 --iters 10 --prep
		step "io: VRAM -> host (local VRAM, remote host), 16 KiB x 65 536"
		run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --local-mem vram --remote-mem host --block 16K \
			--batch 65536 --iters 10 --prep
		step "io: read VRAM->VRAM 64 KiB x 16 384, contents checked through host staging"
		run 120 "$ROWS|check" "$B/mori-bench" io --runtime-dir "$RT" --mem vram --op read --block 64K \
			--batch 16384 --iters 5 --check
		;;
	io2)
		step "io2: 16 KiB x 65 536, prepared list, cudaMalloc regions (legacy IPC) instead of VMM"
		MORI_VRAM_ALLOC=malloc run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --mem vram --block 16K \
			--batch 65536 --iters 20 --prep
		for dp in 2 4; do
			step "io2: 16 KiB x 65 536, prepared list, depth $dp"
			run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --mem vram --block 16K --batch 65536 \
				--iters 40 --prep --depth $dp
		done
		;;
	lat)
		step "lat: 4 KiB, batch 1, VRAM->VRAM, mori_xfer_batch submit to completion seen"
		run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --mem vram --block 4K --batch 1 --iters 5000 \
			--warmup 200
		;;
	gpubench)
		step "gpubench: 16 KiB x 65 536 (kernel, gpu_xfer, lists, per-block, library)"
		run 150 "GB/s|p50|ceiling" "$B/mori-gpubench" --runtime-dir "$RT"
		;;
	kv)
		TRACE=(--trace "$DEV_BUNDLE/data/$DEV_TRACE")
		[ -f "$DEV_BUNDLE/data/$DEV_TRACE" ] || { TRACE=(--synthetic); note "kv: no trace in the bundle: synthetic workload"; }
		MODEL=${KV_MODEL:-llama3-8b}
		PAGE=$("$B/mori-kvreplay" --dry-run --synthetic --requests 1 --model "$MODEL" --json 2>/dev/null |
			sed -n 's/^[[:space:]]*"page_bytes":[[:space:]]*\([0-9]*\).*/\1/p' | head -n 1)
		kvbench() {
			run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --mem vram --block "${PAGE:-32768}" --batch 2048 \
				--iters 50 --prep
			run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --mem vram --block "${PAGE:-32768}" --batch 32768 \
				--iters 20 --prep
		}
		step "kv: mori-bench io --mem vram, page ${PAGE:-?} B, batch 2048 (one 512-token block) and 32768, prepared list"
		kvbench
		step "kv: mori-kvreplay --mem vram, whole trace, $MODEL, as fast as possible"
		run "${KV_TIMEOUT:-420}" "requests|blocks|bytes|run time|throughput|descriptors|latency|verification|error" \
			"$B/mori-kvreplay" --runtime-dir "$RT" "${TRACE[@]}" --model "$MODEL" --mem vram \
			--as-fast-as-possible --no-progress ${KV_ARGS:---verify-every 128}
		step "kv: mori-bench io again (after the replay)"
		kvbench
		;;
	xnode)
		RT2=$(mktemp -d /tmp/mori-rt2.XXXXXX)
		P1=$((20000 + RANDOM % 20000)); P2=$((P1 + 1))
		stop_morid
		morid_start "$RT" --listen 127.0.0.1:$P1
		morid_start "$RT2" --listen 127.0.0.1:$P2
		for kinds in "--mem vram" "--local-mem host --remote-mem vram" "--local-mem vram --remote-mem host" "--mem host"; do
			for op in write read; do
				step "xnode: $op, $kinds, 256 KiB..4 MiB, vs one TCP stream"
				run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --remote-runtime-dir "$RT2" $kinds --op $op \
					--block-min 256K --block-max 4M --batch 1024 --iters 5 --region 256M
			done
		done
		step "xnode: read VRAM->VRAM 1 MiB x 64, contents checked"
		run 120 "$ROWS|check" "$B/mori-bench" io --runtime-dir "$RT" --remote-runtime-dir "$RT2" --mem vram --op read \
			--block 1M --batch 64 --iters 5 --check
		"$B/moractl" --runtime-dir "$RT2" status | grep -E "vram|bytes" | tee -a "$SUM"
		start_morid # (stops both)
		;;
	hostio)
		stop_morid
		for r in 1 2 3; do
			for bin in "$B" ${AB_BEFORE:+"$AB_BEFORE"}; do
				lib=$(cd "$bin/../lib" && pwd)
				A=$(mktemp -d /tmp/mori-ab.XXXXXX) A2=$(mktemp -d /tmp/mori-ab.XXXXXX)
				P1=$((20000 + RANDOM % 20000))
				LD_LIBRARY_PATH=$lib "$bin/morid" --foreground --runtime-dir "$A" --listen 127.0.0.1:$P1 --log-level warn 2>> "$O/morid.log" &
				M1=$!
				LD_LIBRARY_PATH=$lib "$bin/morid" --foreground --runtime-dir "$A2" --listen 127.0.0.1:$((P1 + 1)) --log-level warn 2>> "$O/morid.log" &
				M2=$!
				for _ in $(seq 200); do [ -S "$A/morid.session" ] && [ -S "$A2/morid.session" ] && break; sleep 0.05; done
				step "hostio round $r, $bin: same node, 64 KiB x 256, vs memcpy"
				LD_LIBRARY_PATH=$lib run 60 "$ROWS" "$bin/mori-bench" io --runtime-dir "$A" --block-min 64K --block-max 64K \
					--batch 256 --iters 200 --region 256M
				step "hostio round $r, $bin: cross node (loopback), 1 MiB x 64, vs one TCP stream"
				LD_LIBRARY_PATH=$lib run 60 "$ROWS" "$bin/mori-bench" io --runtime-dir "$A" --remote-runtime-dir "$A2" \
					--block-min 1M --block-max 1M --batch 64 --iters 40 --region 256M
				kill "$M1" "$M2" 2>/dev/null; wait "$M1" "$M2" 2>/dev/null
				rm -rf "$A" "$A2"
			done
		done
		start_morid
		;;
	observe)
		step "observe: moractl topo and diagnose, no MPS"
		run 30 "GPU|gpu|NIC|rank" "$B/moractl" --runtime-dir "$RT" topo
		"$B/moractl" --runtime-dir "$RT" topo --json > "$O/topo.json"
		run 10 "topo json" python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('topo json:', {k: len(v) if isinstance(v, list) else v for k, v in d.items()})" "$O/topo.json"
		run 60 "GPU|MPS|VMM|P2P|problem|warning" "$B/moractl" --runtime-dir "$RT" diagnose
		if mps_start; then
			step "observe: moractl diagnose with MPS started (morid restarted with the same pipe directory)"
			start_morid
			run 60 "mps|problem" "$B/moractl" --runtime-dir "$RT" diagnose
			stop_morid # an MPS client (diagnose touched the GPU): quit waits for its clients to go
			mps_stop
		fi
		unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
		start_morid
		step "observe: traced mori-bench io --mem vram 16 KiB x 65 536 (--trace), mori-viz to Perfetto JSON"
		run 120 "$ROWS" "$B/mori-bench" io --runtime-dir "$RT" --mem vram --block 16K --batch 65536 --iters 5 --prep \
			--trace "$O/copy.viz"
		run 60 "event|span|lost|error" "$B/mori-viz" "$O/copy.viz" -o "$O/trace.json"
		run 30 "trace json" python3 tests/viz_check.py "$O/trace.json"
		rm -f "$O/copy.viz" # large; the JSON is what comes back
		for blk in 16384 4096; do
			step "observe: kernel only (events), untraced vs traced-but-off copy kernel, $blk B x 65 536"
			run 120 "kernel|ceiling" "$B/mori-gpubench" --block $blk --iters 30 --lat-iters 10
		done
		for blk in 16K 4K; do
			step "observe: end to end, untraced vs traced-but-off copy kernel, $blk x 65 536, prepared list, alternating rounds"
			for r in $(seq "${ROUNDS:-5}"); do
				for v in plain off; do
					"$B/mori-bench" io --runtime-dir "$RT" --mem vram --block $blk --batch 65536 --iters 20 --prep \
						--json $([ $v = off ] && echo --trace-off) 2>/dev/null |
						python3 -c "import json,sys; r=json.load(sys.stdin)['rows'][0]; print('$v', r['gbps'], r['baseline_gbps'])" \
						>> "$O/viz-ab-$blk.txt"
				done
			done
			python3 - "$O/viz-ab-$blk.txt" <<'PY' | tee -a "$SUM"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = {v: statistics.median(float(r[1]) for r in rows if r[0] == v) for v in ("plain", "off")}
ceil = statistics.median(float(r[2]) for r in rows)
spread = {v: max(float(r[1]) for r in rows if r[0] == v) - min(float(r[1]) for r in rows if r[0] == v) for v in med}
print("viz overhead: untraced %.1f GB/s, traced-off %.1f GB/s (median of %d rounds each; spread %.1f / %.1f); "
      "traced-off/untraced = %.2f%%; copy ceiling %.1f GB/s" % (med["plain"], med["off"], len(rows) // 2,
      spread["plain"], spread["off"], 100 * med["off"] / med["plain"], ceil))
PY
		done
		;;
	tests)
		step "tests: GPU tests (make check-gpu)"
		stop_morid
		mkdir -p "$BIN/tests" && ln -sf "$BIN"/test_gpu_* "$BIN/tests/" # run-all's layout ($B/tests/NAME)
		MORI_TEST_TIMEOUT=${TEST_TIMEOUT:-240} run 560 "^(ok|not ok|skip)|passed|failed|skipped" tests/run-gpu
		cp "$B"/test-logs/*gpu*.log "$O/" 2>/dev/null
		start_morid # for the parts after this one
		;;
	*) echo "unknown part $p" ;;
	esac
done
stop_morid
dev_summary
