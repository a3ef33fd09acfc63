#!/usr/bin/env bash
# MORI-IR on the GPU machine (tests/devicelib.bash says how the scripts run there): N processes as N
# PEs of one group on the one GPU (one morid, VRAM heaps), under MPS with
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / N each.
#
#   tests/device-ir.sh bundle [--bundle DIR]   here: make (B, default build), link
#                                    tests/ir_rdc_ring (tests/test_ir_bitcode.sh does), bundle
#                                    morid, libmori.so, ir_rdc_ring and the MORI-IR outputs into
#                                    DIR (default bundle/ir)
#   tests/device-ir.sh run [--bundle DIR] [PART ...]   there; PARTs (default: rdc triton proxy cco):
#       rdc     tests/ir_rdc_ring, CUDA built with nvcc -rdc against libmori_shmem_device.a:
#               put+signal around the ring, $IR_ROUNDS rounds (1000)
#       triton  tests/ir_triton_pe.py, Triton kernels linking libmori_shmem_device.bc: the ring
#               ($IR_ROUNDS rounds), then the ptr_p2p sum checked against torch
#       proxy   the same Triton patterns with the PEs split over two morids on
#               loopback (even ranks on one, odd on the other): every ring hop and every remote
#               heap read goes through the proxy rings morid serves; $IR_PROXY_ROUNDS rounds (200)
#       cco     tests/ir_triton_cco.py: MORI-CCO from Triton (the device communicator's address, the
#               mori_cco_* functions): put+signal ring with a world barrier a round, LSA peer
#               pointers against the host's; $IR_ROUNDS rounds
# $IR_PES PEs (8). Logs to $OUT/log (or /tmp/device-ir/log); a summary ends the output.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
dev_args "${IR_BUNDLE:-bundle/ir}" "$@"
set -- "${DEV_ARGS[@]}"

if [ "$DEV_CMD" = bundle ]; then
	set -e
	B=${B:-build}
	make -j2 all B="$B" > /dev/null
	B=$B tests/run-all test_ir_bitcode > /dev/null || { cat "$B/test-logs/test_ir_bitcode.log"; exit 1; }
	[ -x "$B/tests/ir_rdc_ring" ] || { echo "no $B/tests/ir_rdc_ring (nvcc?)"; exit 1; }
	dev_bundle "$BUNDLE" "$B/morid" "$B/libmori.so" "$B/tests/ir_rdc_ring"
	cp -L "$B/libmori.so.1" "$BUNDLE/lib/" # ir_rdc_ring's soname (ldd here does not resolve it)
	mkdir -p "$BUNDLE/ir"
	cp "$B"/kernels/ir/libmori_shmem_device.bc "$B"/kernels/ir/libmori_shmem_device.json "$BUNDLE/ir/"
	du -sh "$BUNDLE"
	exit 0
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
parts=${*:-rdc triton proxy cco}
N=${IR_PES:-8}
ROUNDS=${IR_ROUNDS:-1000}
dev_init ir "$BUNDLE"
export MORI_LIB=$DEV_BUNDLE/lib/libmori.so MORI_IR_DIR=$DEV_BUNDLE/ir PYTHONPATH=$PWD/python
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN=/tmp/mori-ir-run
RUN2=/tmp/mori-ir-run2
PORT=47611
PORT2=47612
start() {
	morid_start "$RUN" --listen "127.0.0.1:$PORT" || return 1
	export MORI_RUNTIME_DIR=$RUN
	if mps_start; then note "morid up; MPS on"; else note "morid up; MPS off (kernels of different processes may not run at once: the ring can stall)"; fi
}
# pes SECONDS NAME CMD...: CMD RANK N ROUNDS in N processes at once, each under the timeout; the PEs'
# lines go to the summary, the rest to the log; a pass needs every PE to exit 0.
pes() {
	local secs=$1 name=$2 t0 fails=0 pids=() r rd rc
	shift 2
	t0=$(date +%s)
	for r in $(seq 0 $((N - 1))); do
		# split: odd ranks on the second morid
		[ -n "${SPLIT:-}" ] && [ $((r % 2)) = 1 ] && rd=$RUN2 || rd=$RUN
		MORI_RUNTIME_DIR=$rd CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$((100 / N)) \
			timeout -k 5 "$secs" "$@" "$r" "$N" "$ROUNDS" > "$O/$name.$r.log" 2>&1 &
		pids+=($!)
	done
	for r in $(seq 0 $((N - 1))); do
		wait "${pids[$r]}"
		rc=$?
		[ $rc = 0 ] || { fails=$((fails + 1)); echo "== $name PE $r exit $rc (log tail)"; tail -n 25 "$O/$name.$r.log"; }
	done
	cat "$O/$name".*.log | grep -E "^PE [0-9]+: " | sort -t' ' -k2n >> "$SUM"
	note "$name: $((N - fails))/$N PEs passed ($(($(date +%s) - t0)) s)"
}

python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' 2>&1 | tee -a "$SUM"
start || exit 1
for p in $parts; do
	case $p in
	rdc)
		note "== rdc: CUDA (nvcc -rdc, libmori_shmem_device.a), $N PEs, ring of $ROUNDS rounds"
		pes 45 rdc "$BIN/ir_rdc_ring" ;;
	triton)
		note "== triton: Triton + libmori_shmem_device.bc, $N PEs: ring of $ROUNDS rounds, ptr_p2p sum"
		export TRITON_CACHE_DIR=/tmp/mori-ir-triton-cache
		pes 120 triton python3 tests/ir_triton_pe.py ;;
	proxy)
		note "== proxy: the Triton patterns, $N PEs split over two morids (every hop through the proxy)"
		morid_start "$RUN2" --listen "127.0.0.1:$PORT2" || continue
		export TRITON_CACHE_DIR=/tmp/mori-ir-triton-cache
		export IR_ROOT=127.0.0.1:$PORT
		ROUNDS=${IR_PROXY_ROUNDS:-200} SPLIT=1 pes 45 rdc-proxy "$BIN/ir_rdc_ring"
		ROUNDS=${IR_PROXY_ROUNDS:-200} SPLIT=1 pes 120 proxy python3 tests/ir_triton_pe.py
		unset IR_ROOT ;;
	cco)
		note "== cco: MORI-CCO from Triton (mori_cco_* in libmori_shmem_device.bc), $N ranks, ring of $ROUNDS rounds"
		export TRITON_CACHE_DIR=/tmp/mori-ir-triton-cache CCO_UID_FILE=$O/cco.uid
		rm -f "$CCO_UID_FILE"
		pes 120 cco python3 tests/ir_triton_cco.py ;;
	*) note "unknown part $p" ;;
	esac
done
dev_cleanup
dev_summary
