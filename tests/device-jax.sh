#!/usr/bin/env bash
# mori.jax on the GPU machine (tests/devicelib.bash says how the scripts run there): JAX with its
# CUDA plugin in every rank, ranks as processes on one GPU under MPS, one morid this script starts.
# tests/device_jax.py at 2 and 4 ranks: a jitted dispatch -> per-expert matmul -> combine step
# (IntraNode and LowLatency layouts) run 100 times with new routing, each against a numpy
# reference; every collective against jax.lax's on the gathered inputs; then, at 2 ranks, the
# group formed from jax.distributed's process index and count. Nothing is built on the GPU machine.
#
#   tests/device-jax.sh bundle [--bundle DIR]   here: make (B, default build) and make xla against
#                               XLA's FFI headers ($XLA_FFI_INCLUDE, else jax.ffi.include_dir() of
#                               python3), then bundle morid, libmori.so and libmori_xla.so into DIR
#                               (default $B/jaxbundle, git-ignored)
#   tests/device-jax.sh run [--bundle DIR] [PART...]   there: the PARTs (w2 w4 example dist; default
#                               all: 2 and 4 ranks, examples/jax_moe.py at 2 ranks, the
#                               jax.distributed group) ($JAX_ITERS: steps, default 100); logs and the
#                               ranks' logs go to $OUT (or /tmp/device-jax); the summary ends the
#                               output. About 3-5 minutes; each part's deadline bounds a hang.
set -u
cd "$(dirname "$0")/.."
. tests/devicelib.bash
B_DIR=${B:-build}
dev_args "${JAX_BUNDLE:-$B_DIR/jaxbundle}" "$@"
set -- "${DEV_ARGS[@]}"

if [ "$DEV_CMD" = bundle ]; then
	set -e
	make -j2 all B="$B_DIR" > /dev/null
	ls "$B_DIR"/kernels/copy.fatbin > /dev/null # the CUDA kernels must be in libmori (nvcc here)
	make --no-print-directory xla B="$B_DIR" ${XLA_FFI_INCLUDE:+XLA_FFI_INCLUDE="$XLA_FFI_INCLUDE"}
	[ -f "$B_DIR/libmori_xla.so" ] || { echo "no $B_DIR/libmori_xla.so: XLA's FFI headers were not found (set XLA_FFI_INCLUDE)"; exit 1; }
	dev_bundle "$BUNDLE" "$B_DIR"/morid "$B_DIR"/moractl "$B_DIR"/libmori.so "$B_DIR"/libmori_xla.so
	ln -sf libmori.so "$BUNDLE/lib/libmori.so.1" # libmori_xla.so's DT_NEEDED
	du -sh "$BUNDLE"
	echo "now copy the repository and $BUNDLE to the GPU machine and run there: tests/device-jax.sh run --bundle $BUNDLE"
	exit 0
fi
[ "$DEV_CMD" = run ] || { sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

[ -x "$BUNDLE/bin/morid" ] && [ -f "$BUNDLE/lib/libmori.so" ] && [ -f "$BUNDLE/lib/libmori_xla.so" ] ||
	{ echo "no bundle at $BUNDLE (morid, libmori.so, libmori_xla.so): run 'tests/device-jax.sh bundle' where you build and copy it here"; exit 1; }
dev_init jax "$BUNDLE"
export MORI_LIB=$DEV_BUNDLE/lib/libmori.so MORI_XLA_LIB=$DEV_BUNDLE/lib/libmori_xla.so PYTHONPATH=$PWD/python
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 - << 'PY' 2>&1 | tee -a "$SUM"
import sys, numpy
try:
    import jax, jaxlib
    j = "jax %s, jaxlib %s, devices %s, FFI headers %s" % (jax.__version__, jaxlib.__version__, jax.devices(),
                                                         jax.ffi.include_dir())
except Exception as e:  # noqa: B902
    j = "no usable jax: %s: %s" % (type(e).__name__, e)
import mori
from mori.jax import _ffi
print("python %s, numpy %s, %s, mori %s (libmori at %s, libmori_xla at %s, built for XLA FFI API %d.%d)" % (
    sys.version.split()[0], numpy.__version__, j, mori.__version__, mori.lib_path(), _ffi.path(),
    *divmod(_ffi.load().mori_xla_ffi_version(), 1000)))
PY
mps_start
RT=/tmp/device-jax-rt
morid_start "$RT" || exit 1
rc_all=0
PARTS=" ${DEV_ARGS[*]:-w2 w4 example dist} "
# each part's deadline (the ranks killed past it, named) bounds a hang
for W in 2 4; do
	[[ $PARTS == *" w$W "* ]] || continue
	secs=$((W == 2 ? 180 : 220))
	echo
	echo "== $W ranks: jitted dispatch -> expert matmul -> combine (${JAX_ITERS:-100} steps a layout), collectives vs jax.lax"
	dev_run $((secs + 20)) "^main-w|ALL OK|FAILED" python3 tests/device_jax.py --world $W --runtime-dir "$RT" \
		--iters "${JAX_ITERS:-100}" --deadline $secs --logdir "$O/ranks" || rc_all=1
done
if [[ $PARTS == *" example "* ]]; then
	echo
	echo "== examples/jax_moe.py, 2 ranks"
	dev_run 90 "steps ok|all ranks ok|failed" python3 examples/jax_moe.py --runtime-dir "$RT" --world-size 2 \
		--steps 5 || rc_all=1
fi
if [[ $PARTS == *" dist "* ]]; then
	echo
	echo "== 2 ranks, the group from jax.distributed (process index and count, unique id through its key-value store)"
	dev_run 100 "^dist-w|ALL OK|FAILED" python3 tests/device_jax.py --world 2 --dist --runtime-dir "$RT" \
		--deadline 80 --logdir "$O/ranks" || rc_all=1
fi
morids_stop
note "device-jax: $([ $rc_all = 0 ] && echo "every part passed" || echo "SOME PART FAILED (above)")"
dev_summary
