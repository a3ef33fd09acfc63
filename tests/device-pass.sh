#!/usr/bin/env bash
# The whole GPU regression pass in device calls of under 10 minutes each, from one bundle:
# what every tests/device-*.sh script checks, at settings that fit the calls. Made for sessions
# whose device time is short: one bundle to carry, one command a call.
#
#   tests/device-pass.sh bundle      here: build (B, default build) and bundle everything into
#                                    bundle/pass/bundle.tgz (about 21 MB; name bundle/pass in carry)
#   tests/device-pass.sh run N       there, N in order of what matters most:
#       1  MORI-EP: test_gpu_ep, test_gpu_ep_xnode (ranks over morids on loopback), mori-bench ep
#       2  MORI-CCL test_gpu_coll and test_gpu_coll_xnode; MORI-SHMEM's device API and 8 processes as PEs
#       3  the SHMEM proxy over two morids; MORI-IR (rdc, Triton, proxy); the GPU tests (check-gpu)
#       4  benchmarks: mori-bench shmem (with NVSHMEM), coll, io (VRAM) and the 4 KiB latency
#       5  the Python package with torch (tests/device-python.sh)
# Each script's log and summary land in $OUT/<script>/; the summaries end the output.
#   run(command="tests/device-pass.sh run 1", carry=["bundle/pass"], timeout_s=600)
set -u
cd "$(dirname "$0")/.."
P=${PASS_BUNDLE:-bundle/pass}

if [ "${1:-}" = bundle ]; then
	set -e
	B=${B:-build}
	make -j2 all B="$B" > /dev/null
	make -j2 B="$B" $(for t in tests/test_gpu_*.c; do t=${t#tests/}; echo "$B/tests/${t%.c}"; done) > /dev/null
	B=$B tests/run-all test_ir_bitcode > /dev/null || { cat "$B/test-logs/test_ir_bitcode.log"; exit 1; }
	ls "$B"/kernels/copy.fatbin "$B/tests/ir_rdc_ring" > /dev/null # nvcc built the kernels
	. tests/devicelib.bash
	dev_bundle "$P" "$B"/morid "$B"/moractl "$B"/mori-bench "$B"/mori-kvreplay "$B"/mori-gpubench "$B"/mori-viz \
		"$B"/libmori.so "$B"/tests/ir_rdc_ring "$B"/tests/test_gpu_*
	cp -L "$B/libmori.so.1" "$P/lib/"
	mkdir -p "$P/ir" "$P/data"
	cp "$B"/kernels/ir/libmori_shmem_device.bc "$B"/kernels/ir/libmori_shmem_device.json "$P/ir/"
	cp tools/bench_nvshmem.cu "$P/"
	cp /work/shared/data/mooncake_conversation_trace.jsonl "$P/data/"
	du -sh "$P"
	# Every binary embeds libmori's kernel image: 67 MB raw, over the 64 MiB that carry and the
	# working tree share; gzip takes it to a third. `run` unpacks it under /tmp.
	tar -C "$P" -czf "$P.tgz" . && rm -rf "$P" && mkdir -p "$P" && mv "$P.tgz" "$P/bundle.tgz"
	du -sh "$P"
	exit 0
fi
if [ "${1:-}" = run ] && [ -f "$P/bundle.tgz" ]; then
	U=/tmp/device-pass-bundle
	rm -rf "$U" && mkdir -p "$U" && tar -C "$U" -xzf "$P/bundle.tgz" || { echo "cannot unpack $P/bundle.tgz"; exit 1; }
	P=$U
fi
[ "${1:-}" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
O=${OUT:-/tmp/device-pass}
mkdir -p "$O"
t0=$(date +%s)
sub() { # NAME SCRIPT PART...: one script's parts, its own log and summary under $O/NAME
	echo "######## $1 ($(($(date +%s) - t0)) s into the pass)"
	local n=$1 s=$2
	shift 2
	OUT=$O/$n EP_BUNDLE=$P CCL_BUNDLE=$P BUNDLE=$P IR_BUNDLE=$P RUN_BUNDLE=$P PY_BUNDLE=$P "tests/$s" run "$@" \
		> "$O/$n.out" 2>&1
	echo "$n: exit $?"
}
case ${2:-} in
1)
	EP_TEST_SECS=280 EP_XNODE_SECS=160 EP_BENCH_SECS=120 EP_BENCH_ITERS=20 sub ep device-ep.sh test xnode bench
	;;
2)
	CCL_TEST_SECS=200 CCL_XNODE_SECS=170 sub ccl device-ccl.sh test xnode
	sub shmem device-shmem.sh test mp
	;;
3)
	sub shmem-proxy device-shmem.sh proxy
	IR_ROUNDS=500 IR_PROXY_ROUNDS=100 sub ir device-ir.sh rdc triton proxy
	TEST_TIMEOUT=100 sub run device-run.sh tests
	;;
4)
	sub shmem-bench device-shmem.sh bench
	CCL_BENCH_SECS=120 CCL_BENCH_MAX=268435456 sub ccl-bench device-ccl.sh bench
	sub io device-run.sh io lat
	;;
5)
	sub python device-python.sh
	;;
*) echo "run 1 .. run 5"; exit 2 ;;
esac
for f in "$O"/*/summary; do
	echo
	echo "================ ${f%/summary} ================"
	cat "$f"
done
echo "pass ${2}: $(($(date +%s) - t0)) s"
