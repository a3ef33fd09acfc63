#!/usr/bin/env bash
# The Python package's tests: pytest on tests/python (mori.io between two processes on one node
# and across two daemons, every error code, finalisers and the GIL, views outliving their Group or
# region (in child processes: a crash fails the case), the NIXL adapter replaying
# vLLM's connector for one request; torch and CUDA cases skip, saying so, without torch or a
# GPU), then `make install-python` into a scratch root and an import of what it installed.
# Skips only without python3 or pytest (tools/install-deps installs both, and numpy).
source "$(dirname "$0")/testlib.bash"
PY=
for p in python3 /usr/bin/python3; do
	command -v "$p" > /dev/null 2>&1 && "$p" -c 'import pytest, numpy' 2> /dev/null && { PY=$p; break; }
done
if [ -z "$PY" ]; then
	command -v python3 > /dev/null 2>&1 || skip "python3 not installed (tools/install-deps installs it)"
	for p in python3 /usr/bin/python3; do
		command -v "$p" > /dev/null 2>&1 && "$p" -c 'import pytest' 2> /dev/null &&
			fail "$p has pytest but no numpy (python3-numpy: tools/install-deps installs it)"
	done
	skip "pytest not installed (python3-pytest: tools/install-deps installs it)"
fi
export B PYTHONPATH=$ROOT/python PYTHONDONTWRITEBYTECODE=1
unset MORI_LIB
sanitizer_preload
echo "# $("$PY" --version) at $(command -v "$PY"), pytest $("$PY" -c 'import pytest; print(pytest.__version__)')"
"$PY" -m pytest -q -rsx -p no:cacheprovider --basetemp "$T/pytest" tests/python || fail "pytest failed"

# The package's tables are of the ABI the build's SONAME names.
so=$("$PY" -c 'from mori import _lib; print(_lib.SONAME)')
[ -e "$B/$so" ] || fail "mori._capi describes $so, which the build did not make: $(ls "$B"/libmori.so*)"

# make install-python: the package under the prefix, importable from there, libmori's
# directory recorded.
D=$T/dest
out=$(make --no-print-directory -C "$ROOT" install-python PREFIX=/usr DESTDIR="$D" PYTHON="$PY" 2>&1) ||
	fail "make install-python: $out"
site=$("$ROOT/tools/python-sitedir" /usr "$PY")
for f in _capi.py io/__init__.py io/engine.py io/types.py io/desc.py io/args.py shmem/__init__.py shmem/api.py \
	shmem/tensor_utils.py ops/__init__.py ops/dispatch_combine.py ccl/__init__.py ccl/collective.py ir/__init__.py \
	umbp/__init__.py umbp/client.py umbp/buffers.py umbp/sglang.py jax/__init__.py jax/_ffi.py jax/ops.py jax/ccl.py \
	nixl_compat.py; do
	[ -f "$D$site/mori/$f" ] || fail "mori/$f not installed under $D$site: $out"
done
got=$(cd "$T" && PYTHONPATH=$D$site MORI_LIB=$B/libmori.so "$PY" -c \
	'import mori, mori.io, mori.ops, mori.shmem, mori.ccl, mori.ir, mori.umbp, mori.jax, mori._installed as i
print(mori.__version__, i.LIBDIR, mori.lib_version(), mori.__file__)') ||
	fail "the installed package does not import"
read -r v libdir lv file <<< "$got"
[ "$v" = "$lv" ] && [ "$libdir" = /usr/lib ] && [ "$file" = "$D$site/mori/__init__.py" ] ||
	fail "installed package: $got"
pass "make install-python PREFIX=/usr: mori $v under $site, libmori recorded in $libdir"
