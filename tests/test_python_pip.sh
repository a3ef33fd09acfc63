#!/usr/bin/env bash
# `pip install ./python` into fresh virtual environments, with no package index (python/pyproject.toml's
# in-tree backend needs nothing): the pure wheel imports every sub-package; a wheel built with
# libmori=$B/libmori.so carries the library and loads it from inside the package; the sdist
# builds. Skips without python3's venv module (Debian: python3-venv).
source "$(dirname "$0")/testlib.bash"
PY=python3
"$PY" -c 'import venv, ensurepip' 2> /dev/null || skip "python3 has no venv/ensurepip (python3-venv)"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
unset MORI_LIB PYTHONPATH

venv() { # venv DIR: a fresh environment, or fail
	"$PY" -m venv "$1" > "$T/venv.log" 2>&1 || fail "python3 -m venv: $(tail -n 5 "$T/venv.log")"
}

# The pure wheel: every sub-package imports, libmori is not needed to import.
venv "$T/v1"
before=$(git -C "$ROOT" status --porcelain --ignored python)
out=$("$T/v1/bin/pip" install "$ROOT/python" 2>&1) || fail "pip install ./python: $(tail -n 20 <<< "$out")"
got=$(cd "$T" && "$T/v1/bin/python" -c 'import mori, mori.io, mori.ops, mori.shmem, mori.ccl, mori.ir, mori.umbp, mori.nixl_compat
print(mori.__version__, mori.io.IOEngine.__module__, mori.__file__)') || fail "the installed package does not import"
read -r v mod file <<< "$got"
case $file in "$T/v1/"*) ;; *) fail "mori imported from $file, not the venv" ;; esac
[ "$mod" = mori.io ] || fail "mori.io.IOEngine shows as $mod"
[ "$(git -C "$ROOT" status --porcelain --ignored python)" = "$before" ] ||
	fail "pip left files in python/: $(git -C "$ROOT" status --porcelain --ignored python)"
pass "pip install ./python (no index): mori $v imports mori.io, ops, shmem, ccl, ir, umbp"

# A wheel that carries libmori: loaded from the package, whatever else is on the machine.
venv "$T/v2"
out=$("$T/v2/bin/pip" install --config-settings "libmori=$B/libmori.so" "$ROOT/python" 2>&1) ||
	fail "pip install with libmori=: $(tail -n 20 <<< "$out")"
got=$(cd "$T" && sanitizer_preload && "$T/v2/bin/python" -c 'import mori; print(mori.lib_path(), mori.lib_version())') ||
	fail "the wheel's libmori does not load: $got"
read -r lp lv <<< "$got"
case $lp in "$T/v2/"*/mori/libmori.so) ;; *) fail "libmori loaded from $lp, not the wheel's copy" ;; esac
[ "$lv" = "$v" ] || fail "libmori $lv, package $v"
pass "a wheel with libmori= loads its own copy ($lv)"

out=$(cd "$ROOT/python" && "$PY" -c 'import sys; sys.path.insert(0, "_backend"); import mori_backend as b
print(b.build_sdist(sys.argv[1]))' "$T" 2>&1) || fail "build_sdist: $out"
tar -tzf "$T/$out" | grep -q "^mori-$v/mori/io/engine.py$" || fail "the sdist lacks mori/io/engine.py: $(tar -tzf "$T/$out")"
pass "sdist $out"
