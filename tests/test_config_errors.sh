#!/usr/bin/env bash
# A bad configuration stops morid at start-up with file:line and the reason, before it binds
# anything or tells systemd it is ready: unknown key, value out of bounds, syntax error, a
# missing file, and a bad command-line value.
source "$(dirname "$0")/testlib.bash"
start_listener

# expect_refusal WHAT REGEX ARGS...: morid must exit non-zero and print REGEX on stderr.
expect_refusal() {
	local what=$1 re=$2 out rc
	shift 2
	out=$(NOTIFY_SOCKET=$NOTIFY timeout $((10 * SLOW)) "$MORID" --foreground --runtime-dir "$RUN" "$@" 2>&1)
	rc=$?
	[ $rc = 0 ] && fail "$what: morid started"
	[ $rc = 124 ] && fail "$what: morid did not exit"
	grep -Eq -- "$re" <<< "$out" || fail "$what: output '$out' does not match '$re'"
	[ "$(wc -l <<< "$out")" = 1 ] || fail "$what: more than one line: $out"
	pass "$what: exit $rc: $out"
}

printf '[morid]\nmax_clients = 10\n\nfrobnicate = 1\n' > "$T/unknown.conf"
expect_refusal "unknown key" "$T/unknown.conf:4: unknown option 'frobnicate'" --config "$T/unknown.conf"
printf '# comment\n[morid]\nring_entries = 32\n' > "$T/bounds.conf"
expect_refusal "out of bounds" "$T/bounds.conf:3: ring_entries: 32 out of bounds" --config "$T/bounds.conf"
printf '[morid]\nmax_clients = 10\nmax_clients 20\n' > "$T/syntax.conf"
expect_refusal "syntax error" "$T/syntax.conf:3: syntax error" --config "$T/syntax.conf"
printf '[morid\nmax_clients = 10\n' > "$T/section.conf"
expect_refusal "broken section header" "$T/section.conf:1: syntax error" --config "$T/section.conf"
printf '[morid]\nring_entries = 1000\n' > "$T/pow2.conf"
expect_refusal "not a power of two" "ring_entries: 1000 is not a power of two" --config "$T/pow2.conf"
expect_refusal "missing file" "$T/absent.conf: cannot open: No such file or directory" --config "$T/absent.conf"
expect_refusal "bad flag value" "command line: max_clients: 0 out of bounds" --max-clients 0
expect_refusal "unknown flag" "command line: unknown option 'no-such-flag'" --no-such-flag 1

grep -q 'READY=1' "$NLOG" && fail "a refused start sent READY=1"
[ -e "$RUN/morid.sock" ] && fail "a refused start left a control socket"
pass "no READY=1 and no socket from any refused start"

# --check-config: the same checks without starting
printf '[morid]\nmax_clients = 10\n' > "$T/good.conf"
out=$("$MORID" --check-config --config "$T/good.conf") || fail "--check-config on a good file failed"
grep -q '^max_clients = 10$' <<< "$out" || fail "--check-config does not show max_clients = 10"
"$MORID" --check-config --config "$T/syntax.conf" > /dev/null 2>&1 && fail "--check-config passed a bad file"
pass "--check-config"
