#!/usr/bin/env bash
# mori-viz end to end on a synthetic buffer (what a traced copy-kernel launch leaves):
# the JSON loads, has one process per block and one thread per warp, spans named per slot;
# tools/viz-png renders it where python3-matplotlib is installed; and where nvcc works,
# kernels/mori_viz.h compiles into a kernel both with -DMORI_VIZ and without (compile only: no
# GPU here).
source "$(dirname "$0")/testlib.bash"
VIZ=$B/mori-viz
[ -x "$VIZ" ] || fail "$VIZ is not built"
PY=
for p in /usr/bin/python3 python3; do command -v "$p" > /dev/null 2>&1 && { PY=$p; break; }; done
[ -n "$PY" ] || skip "no python3"
"$VIZ" --synthetic --blocks 3 --warps-per-block 2 --descs 5 -o "$T/buf.bin" || fail "mori-viz --synthetic"
"$VIZ" --slot 1=copy_16k "$T/buf.bin" -o "$T/trace.json" 2> "$T/viz.err" || fail "mori-viz: $(cat "$T/viz.err")"
grep -q "36 spans, 6 instants, 0 unmatched" "$T/viz.err" || fail "mori-viz said: $(cat "$T/viz.err")"
"$PY" - "$T/trace.json" <<'P' || fail "trace JSON"
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"]
procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
threads = {e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
names = {e["name"] for e in ev if e["ph"] in ("X", "i")}
assert procs == {0, 1, 2} and threads == set(range(6)), (procs, threads)
assert names == {"copy_batch", "copy_16k", "copy_tail"}, names
assert all(e["dur"] > 0 for e in ev if e["ph"] == "X")
P
pass "mori-viz: Perfetto JSON with a process per block, a thread per warp, named spans"
# tests/viz_check.py is what the GPU machine's traced run is judged by (tests/device-run.sh observe)
"$VIZ" "$T/buf.bin" -o "$T/plain.json" 2> /dev/null || fail "mori-viz (default names)"
"$PY" tests/viz_check.py "$T/plain.json" > "$T/check.out" || fail "viz_check: $(cat "$T/check.out")"
"$PY" - "$T/plain.json" "$T/cut.json" <<'P' || fail "cut trace"
import json, sys
t = json.load(open(sys.argv[1]))
t["traceEvents"] = [e for e in t["traceEvents"] if e.get("name") != "copy_tail"]
json.dump(t, open(sys.argv[2], "w"))
P
"$PY" tests/viz_check.py "$T/cut.json" > /dev/null && fail "viz_check accepted a trace without copy_tail"
pass "tests/viz_check.py accepts the synthetic trace and refuses one missing an event kind"
"$VIZ" "$T/trace.json" > /dev/null 2>&1 && fail "mori-viz accepted a JSON file as a buffer"
pass "mori-viz refuses what is not a trace buffer"
if "$PY" -c 'import matplotlib' 2> /dev/null; then
	"$PY" tools/viz-png "$T/trace.json" "$T/trace.png" || fail "tools/viz-png"
	[ "$(head -c 4 "$T/trace.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "tools/viz-png wrote no PNG"
	pass "tools/viz-png renders the timeline"
else
	echo "# python3-matplotlib not installed: tools/viz-png not checked"
fi
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2> /dev/null)}
if [ -n "$NVCC" ] && [ "$(sh mk/probe-gpucc.sh nvcc "$NVCC" "$T" 2> /dev/null)" = yes ]; then
	cat > "$T/k.cu" <<'K'
#include "mori_viz.h"
extern "C" __global__ void traced(struct mori_viz_header *viz, int *x)
{
	MORI_VIZ_DECL(viz);
	MORI_VIZ_BEGIN(MORI_VIZ_SLOT_COPY_BATCH);
	x[threadIdx.x] += 1;
	MORI_VIZ_INSTANT(MORI_VIZ_SLOT_COPY_TAIL);
	MORI_VIZ_END(MORI_VIZ_SLOT_COPY_BATCH);
}
K
	for def in -DMORI_VIZ ""; do
		# shellcheck disable=SC2086
		"$NVCC" -std=c++17 -arch=sm_90 -Ikernels -Iinclude -Icommon $def -c "$T/k.cu" -o "$T/k.o" > "$T/nvcc.log" 2>&1 ||
			fail "nvcc ${def:-without MORI_VIZ}: $(cat "$T/nvcc.log")"
	done
	pass "kernels/mori_viz.h compiles into a kernel with and without MORI_VIZ (nvcc)"
else
	echo "# no working nvcc: the device trace points are not compile-checked here"
fi
