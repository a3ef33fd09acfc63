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

# The check must see what it is for: a field added to a header's structure where it changes no
# size or offset (after mori_xfer_opts' has_notif, in its padding) fails it.
cp -r include "$T/inc"
sed -i 's/^\(\s*int has_notif;\)/\1 int added;/' "$T/inc/mori.h"
cmp -s include/mori.h "$T/inc/mori.h" && { echo "FAIL: could not plant a field in mori_xfer_opts (has_notif moved?)"; exit 1; }
if "$CC" -std=c11 -Wall -Wextra -Werror -I"$T/inc" -c "$T/capi.c" -o "$T/capi.o" 2> /dev/null; then
	echo "FAIL: a field added to mori_xfer_opts (in its padding) went unnoticed"
	exit 1
fi

# The same in mori_umbp.h: a field after mori_umbp_item's status, in its tail padding.
rm -rf "$T/inc" && cp -r include "$T/inc"
sed -i 's/^\(\s*int status;\)/\1 int added;/' "$T/inc/mori_umbp.h"
cmp -s include/mori_umbp.h "$T/inc/mori_umbp.h" && { echo "FAIL: could not plant a field in mori_umbp_item (status moved?)"; exit 1; }
if "$CC" -std=c11 -Wall -Wextra -Werror -I"$T/inc" -c "$T/capi.c" -o "$T/capi.o" 2> /dev/null; then
	echo "FAIL: a field added to mori_umbp_item (in its padding) went unnoticed"
	exit 1
fi

n=$(grep -c '^CHECK' "$T/capi.c")
p=$(grep -c '(\*const capi_' "$T/capi.c")
echo "ok: python/mori/_capi.py matches include/: $n static asserts, $p prototypes; a field planted in mori_xfer_opts or mori_umbp_item fails it"
