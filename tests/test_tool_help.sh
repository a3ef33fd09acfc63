#!/usr/bin/env bash
# Every tool answers --help with its usage on stdout and exit 0 (mori-bench and
# mori-gpubench printed it but exited 2); a call without arguments, or a bad option, still exits 2.
source "$(dirname "$0")/testlib.bash"
for t in morid moractl mori-bench mori-gpubench; do
	[ -x "$B/$t" ] || fail "$B/$t is not built"
	out=$("$B/$t" --help 2> /dev/null)
	rc=$?
	[ "$rc" = 0 ] || fail "$t --help exits $rc, want 0"
	grep -qi usage <<< "$out" || fail "$t --help printed no usage on stdout: ${out:0:200}"
done
out=$("$B/moractl" help 2> /dev/null) || fail "moractl help exits $?, want 0"
grep -q "^usage: moractl" <<< "$out" || fail "moractl help printed no usage: ${out:0:200}"
"$B/mori-bench" > /dev/null 2>&1
[ $? = 2 ] || fail "mori-bench without a subcommand should exit 2"
"$B/mori-gpubench" --no-such-option 1 > /dev/null 2>&1
[ $? = 2 ] || fail "mori-gpubench --no-such-option should exit 2"
pass "morid, moractl, mori-bench and mori-gpubench --help (and moractl help): usage on stdout, exit 0; misuse exits 2"
