#!/usr/bin/env bash
# The Python package with PyTorch and CUDA on the GPU machine (tests/devicelib.bash says how the
# scripts run there). CUDA tensors registered and moved between two processes with PyTorch's default
# allocator and with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (a tensor over several
# segments registers as one region; a refusal fails with libmori's reason), the rest of the
# Python suite with torch (CPU tensors, libmori's VRAM), and examples/kv_cache_transfer.py on
# CUDA tensors: one morid, two morids (cross-node staging), and under expandable segments; UMBP's
# put/get of CUDA tensors beside pinned copies (tools/bench_umbp_torch.py).
#
#   tests/device-python.sh bundle [--bundle DIR]   here: make (B, default build), then bundle
#                                   morid, moractl, libmori.so and the libraries they need into
#                                   DIR (default $B/pybundle, git-ignored)
#   tests/device-python.sh run [--bundle DIR]   there: everything above ($PYTEST_SEL: the pytest selection,
#                                   default tests/python); the log, pytest's JUnit XML and a
#                                   summary go to $OUT (or /tmp/device-python); the summary
#                                   ends the output. About 2-4 minutes.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
B_DIR=${B:-build}
dev_args "${PY_BUNDLE:-$B_DIR/pybundle}" "$@"
set -- "${DEV_ARGS[@]}"

if [ "$DEV_CMD" = bundle ]; then
	set -e
	make -j2 all B="$B_DIR" > /dev/null
	ls "$B_DIR"/kernels/copy.fatbin > /dev/null # the CUDA kernels must be in libmori (nvcc here)
	dev_bundle "$BUNDLE" "$B_DIR"/morid "$B_DIR"/moractl "$B_DIR"/libmori.so
	du -sh "$BUNDLE"
	echo "now copy the repository and $BUNDLE to the GPU machine and run there: tests/device-python.sh run --bundle $BUNDLE"
	exit 0
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

[ -x "$BUNDLE/bin/morid" ] && [ -f "$BUNDLE/lib/libmori.so" ] || { echo "no bundle at $BUNDLE: run 'tests/device-python.sh bundle' where you build and copy it here"; exit 1; }
dev_init python "$BUNDLE"
export B=$BIN MORI_LIB=$DEV_BUNDLE/lib/libmori.so PYTHONPATH=$PWD/python
# The MORI-IR bitcode and table, where the bundle has them, at the build tree's path (test_ir.py)
[ -d "$DEV_BUNDLE/ir" ] && mkdir -p "$BIN/kernels" && ln -sfn "$DEV_BUNDLE/ir" "$BIN/kernels/ir"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# several processes as ranks (test_gpu_torch_ops): their spinning kernels run side by side only under MPS
mps_start
start_morid() { morid_start "$@"; }
stop_all() { morids_stop; }
# outcome WHAT RC LOG: one summary line: the example's figures, or how it failed
outcome() {
	if [ "$2" = 0 ]; then
		note "$1: ok: $(grep -E 'throughput|verified' "$3" | tr -s ' ' | paste -sd ';' -)"
	else
		note "$1: FAILED (exit $2): $(tail -n 3 "$3" | cut -c1-400 | paste -sd ';' -)"
	fi
}
python3 - << 'PY' 2>&1 | tee -a "$SUM"
import sys, numpy, pytest
try:
    import torch
    t = "torch %s, CUDA %s, cuda available %s" % (torch.__version__, torch.version.cuda, torch.cuda.is_available())
except ImportError:
    t = "no torch"
import mori
print("python %s, numpy %s, pytest %s, %s, mori %s (libmori %s at %s)" % (
    sys.version.split()[0], numpy.__version__, pytest.__version__, t, mori.__version__, mori.lib_version(),
    mori.lib_path()))
PY

echo
echo "== pytest tests/python (CUDA tensors: default allocator and expandable segments)"
timeout -k 10 420 python3 -m pytest -v -rsxX -p no:cacheprovider --basetemp /tmp/device-python-pytest \
	--junitxml="$O/pytest.xml" ${PYTEST_SEL:-tests/python} > "$O/pytest.log" 2>&1
rc=$?
cat "$O/pytest.log"
note "pytest: exit $rc: $(tail -n 1 "$O/pytest.log")"
# the ranks' own logs (test_gpu_torch_ops keeps them in pytest's tmp_path): a failure's detail
# even when pytest is cut off before its report
tar -C /tmp/device-python-pytest -czf "$O/pytest-tmp.tgz" . 2> /dev/null
grep -E '^tests/python/test_(torch|gpu_torch_ops).py::|^# test_gpu_torch_ops:' "$O/pytest.log" | sed 's/ *\[ *[0-9]*%\]$//' >> "$SUM"
grep -E '^(XFAIL|SKIPPED|FAILED|ERROR)' "$O/pytest.log" | cut -c1-400 >> "$SUM"

RT=/tmp/device-python-rt
EX="python3 examples/kv_cache_transfer.py --device cuda"
echo
echo "== example: KV cache prefill -> decode by block ids, CUDA tensors, one morid"
start_morid "$RT" || exit 1
timeout -k 5 180 $EX --runtime-dir "$RT" --requests 64 --prefill-blocks 512 --decode-blocks 640 > "$O/example.log" 2>&1
rc=$?
cat "$O/example.log"
outcome "example (one morid, default allocator)" $rc "$O/example.log"
echo
echo "== example under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout -k 5 180 $EX --runtime-dir "$RT" --requests 16 \
	> "$O/example-expandable.log" 2>&1
rc=$?
cat "$O/example-expandable.log"
outcome "example (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)" $rc "$O/example-expandable.log"
stop_all
echo
echo "== UMBP: put/get of CUDA tensors (64 x 1 MiB) beside pinned host<->device copies, same run"
start_morid "$RT" || exit 1
timeout -k 5 180 python3 tools/bench_umbp_torch.py --runtime-dir "$RT" --device cuda --size 1M --n 64 \
	> "$O/umbp-torch.log" 2>&1
rc=$?
cat "$O/umbp-torch.log"
if [ $rc = 0 ]; then
	note "umbp torch: ok: $(grep -E 'batch|verified' "$O/umbp-torch.log" | tr -s ' ' | paste -sd ';' -)"
else
	note "umbp torch: FAILED (exit $rc): $(tail -n 3 "$O/umbp-torch.log" | cut -c1-400 | paste -sd ';' -)"
fi
stop_all
echo
echo "== example across two morids (VRAM staged through the daemons' TCP streams)"
P1=$((20000 + RANDOM % 20000))
start_morid "$RT.a" --listen 127.0.0.1:$P1 || exit 1
start_morid "$RT.b" --listen 127.0.0.1:$((P1 + 1)) || exit 1
timeout -k 5 180 $EX --prefill-runtime-dir "$RT.b" --decode-runtime-dir "$RT.a" --requests 16 > "$O/example-xnode.log" 2>&1
rc=$?
cat "$O/example-xnode.log"
outcome "example (two morids)" $rc "$O/example-xnode.log"
stop_all
dev_summary
