#!/usr/bin/env bash
# The Python package's C tables (python/mori/_capi.py: structures, constants, prototypes) against
# include/: tests/capi_check.py writes a C file of static asserts and typed function pointers from
# them, compiled here with -Werror. Needs python3 and a C compiler, not libmori or morid.
set -u
cd "$(dirname "$0")/.." || exit 1
command -v python3 > /dev/null 2>&1 || { echo "skipped: python3 not installed"; exit 77; }
CC=${CC:-cc}
T=$(mktemp -d /tmp/mori-capi.XXXXXX)
trap 'rm -rf "$T"' EXIT
PYTHONDONTWRITEBYTECODE=1 python3 tests/capi_check.py include > "$T/capi.c" ||
	{ echo "FAIL: tests/capi_check.py (the tables and the headers name different functions)"; exit 1; }
if ! "$CC" -std=c11 -Wall -Wextra -Werror -Iinclude -c "$T/capi.c" -o "$T/capi.o" 2> "$T/cc.log"; then
	echo "FAIL: python/mori/_capi.py disagrees with include/ (first errors; lines of the generated file):"
	grep -m 12 -E "error" "$T/cc.log"
	exit 1
fi
n=$(grep -c '^CHECK' "$T/capi.c")
p=$(grep -c '(\*const capi_' "$T/capi.c")
echo "ok: python/mori/_capi.py matches include/: $n static asserts, $p prototypes"
