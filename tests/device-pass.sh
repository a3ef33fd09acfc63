#!/usr/bin/env bash
# The whole GPU regression pass from one bundle: what every tests/device-*.sh script checks, in
# five parts of up to about ten minutes each, so that a part can be rerun alone (tests/devicelib.bash
# says how the scripts run on the GPU machine). DIR: --bundle DIR, default bundle/pass.
#
#   tests/device-pass.sh bundle [--bundle DIR]    here: build (B, default build) and bundle
#                                                 everything into DIR/bundle.tgz (about 21 MB)
#   tests/device-pass.sh run [--bundle DIR] N     there, N in order of what matters most:
#       1  MORI-EP: test_gpu_ep, test_gpu_ep_xnode (ranks over morids on loopback), mori-bench ep
#       2  MORI-CCL test_gpu_coll and test_gpu_coll_xnode; MORI-SHMEM's device API and 8 processes as PEs
#       3  the SHMEM proxy over two morids; MORI-IR (rdc, Triton, proxy); the GPU tests (check-gpu)
#       4  benchmarks: mori-bench shmem (with NVSHMEM), coll, io (VRAM) and the 4 KiB latency
#       5  the Python package with torch (tests/device-python.sh)
# Each script's log and summary land in $OUT/<script>/; the summaries end the output.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
dev_args "${PASS_BUNDLE:-bundle/pass}" "$@"
set -- "${DEV_ARGS[@]}"
P=$BUNDLE

if [ "$DEV_CMD" = bundle ]; then
	set -e
	B=${B:-build}
	make -j2 all B="$B" > /dev/null
	make -j2 B="$B" $(for t in tests/test_gpu_*.c; do t=${t#tests/}; echo "$B/tests/${t%.c}"; done) > /dev/null
	B=$B tests/run-all test_ir_bitcode > /dev/null || { cat "$B/test-logs/test_ir_bitcode.log"; exit 1; }
	ls "$B"/kernels/copy.fatbin "$B/tests/ir_rdc_ring" > /dev/null # nvcc built the kernels
	dev_bundle "$P" "$B"/morid "$B"/moractl "$B"/mori-bench "$B"/mori-kvreplay "$B"/mori-gpubench "$B"/mori-viz \
		"$B"/libmori.so "$B"/tests/ir_rdc_ring "$B"/tests/test_gpu_*
	cp -L "$B/libmori.so.1" "$P/lib/"
	mkdir -p "$P/ir" "$P/data"
	cp "$B"/kernels/ir/libmori_shmem_device.bc "$B"/kernels/ir/libmori_shmem_device.json "$P/ir/"
	cp tools/bench_nvshmem.cu "$P/"
	dev_bundle_trace "$P"
	du -sh "$P"
	# Every binary embeds libmori's kernel image: gzip takes the bundle to a third of its size
	# to copy. `run` unpacks it under /tmp.
	tar -C "$P" -czf "$P.tgz" . && rm -rf "$P" && mkdir -p "$P" && mv "$P.tgz" "$P/bundle.tgz"
	du -sh "$P"
	exit 0
fi
if [ "$DEV_CMD" = run ] && [ -f "$P/bundle.tgz" ]; then
	U=/tmp/device-pass-bundle
	rm -rf "$U" && mkdir -p "$U" && tar -C "$U" -xzf "$P/bundle.tgz" || { echo "cannot unpack $P/bundle.tgz"; exit 1; }
	P=$U
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
O=${OUT:-/tmp/device-pass}
mkdir -p "$O"
t0=$(date +%s)
sub() { # NAME SCRIPT PART...: one script's parts, its own log and summary under $O/NAME
	echo "######## $1 ($(($(date +%s) - t0)) s into the pass)"
	local n=$1 s=$2
	shift 2
	OUT=$O/$n "tests/$s" run --bundle "$P" "$@" > "$O/$n.out" 2>&1
	echo "$n: exit $?"
}
case ${1:-} in
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
echo "pass ${1}: $(($(date +%s) - t0)) s"
