#!/usr/bin/env bash
# libmori_xla.so (mori.jax's XLA FFI handlers, xla/mori_xla.c): where XLA's FFI headers are
# ($XLA_FFI_INCLUDE, else jax.ffi.include_dir() of python3), `make xla` builds it against them;
# its dynamic symbols are exactly the handlers and the registration functions; and
# tests/xla_ffi_check drives the handlers through call frames as XLA builds them (metadata query,
# refusals, the four collectives on host heaps of 1 and 3 PEs). Without the headers it skips,
# saying so. The Python side's argument handling is tests/python/test_jax_args.py (test_python).
source "$(dirname "$0")/testlib.bash"
inc=${XLA_FFI_INCLUDE:-}
if [ -z "$inc" ]; then
	for p in python3 /usr/bin/python3; do
		inc=$("$p" -c 'import jax.ffi; print(jax.ffi.include_dir())' 2> /dev/null) && break
	done
fi
[ -n "$inc" ] && [ -f "$inc/xla/ffi/api/c_api.h" ] ||
	skip "no XLA FFI headers (XLA_FFI_INCLUDE unset and no python3 with jax): libmori_xla.so not built"
echo "# XLA FFI headers at $inc (API $(sed -n 's/^#define XLA_FFI_API_M[AI][JN]OR \([0-9]*\)/\1/p' "$inc/xla/ffi/api/c_api.h" | paste -sd. -))"
out=$(make --no-print-directory -C "$ROOT" xla B="$B" XLA_FFI_INCLUDE="$inc" 2>&1) || fail "make xla: $out"
echo "$out"
so=$B/libmori_xla.so
[ -f "$so" ] || fail "make xla made no $so: $out"
got=$(nm -D --defined-only "$so" | awk '$2 == "T" {print $3}' | sort | paste -sd' ' -)
want="mori_xla_allgather mori_xla_allreduce mori_xla_alltoall mori_xla_comm_register mori_xla_ep_combine mori_xla_ep_dispatch mori_xla_ep_register mori_xla_ffi_version mori_xla_libmori mori_xla_reducescatter mori_xla_unregister"
[ "$got" = "$want" ] || fail "libmori_xla.so exports \"$got\", expected \"$want\""
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd' ' -)
case " $needed " in *" libmori.so.1 "*) ;; *) fail "libmori_xla.so does not need libmori.so.1: $needed" ;; esac
case $needed in *libcuda*|*amdhip*|*libstdc++*) fail "libmori_xla.so links a GPU runtime or C++: $needed" ;; esac
pass "libmori_xla.so built: exports the 6 handlers and 5 registration calls, needs $needed"
"$B/tests/xla_ffi_check" || fail "tests/xla_ffi_check failed"
pass "handlers through XLA call frames: metadata, refusals, collectives on host heaps"
