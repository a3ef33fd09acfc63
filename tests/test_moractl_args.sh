#!/usr/bin/env bash
# moractl's command line: an option without its value says "option --x needs a value", an empty
# --runtime-dir or --socket is refused (both exit 2, before any daemon is asked; an empty
# $MORI_RUNTIME_DIR counts as unset), an unknown option exits 2, --socket takes only a control
# socket, an option given twice and `help extra` exit 2; and moractl peers keeps its
# columns when a peer's state carries a long reason (the reason goes last, under REASON).
source "$(dirname "$0")/testlib.bash"
[ -x "$B/mori-bench" ] || fail "$B/mori-bench is not built"

# expect_usage WANT ARGS...: exit 2, WANT in stderr, nothing on stdout
expect_usage() {
	local want=$1 rc
	shift
	"$MORACTL" "$@" > "$T/out" 2> "$T/err"
	rc=$?
	[ $rc = 2 ] || fail "moractl $*: exit $rc, want 2 ($(cat "$T/err"))"
	grep -qF -- "$want" "$T/err" || fail "moractl $*: says '$(cat "$T/err")', want '$want'"
	[ -s "$T/out" ] && fail "moractl $*: printed on stdout: $(cat "$T/out")"
	return 0
}
for o in --runtime-dir --socket --timeout; do
	expect_usage "option $o needs a value" $o
	expect_usage "option $o needs a value" status $o
done
pass "an option without its value: 'option --x needs a value', exit 2"

expect_usage "option --runtime-dir: the value is empty" --runtime-dir "" status
expect_usage "option --runtime-dir: the value is empty" --runtime-dir= peers
expect_usage "option --socket: the value is empty" --socket "" status
expect_usage "--timeout 0: milliseconds" --timeout 0 status
expect_usage "unknown option --bogus" --bogus status
# --socket takes a control socket (an absolute path, ipc://PATH, tcp://HOST:PORT), never a word
# nng would take for a relative path
expect_usage "--socket notaurl: not a control socket" --socket notaurl status
expect_usage "--socket tcp://: not a control socket" --socket tcp:// status
expect_usage "--socket tcp://host: not a control socket" --socket tcp://host status
expect_usage "usage: moractl" --socket notaurl status
# an option given twice: the second may not silently win
expect_usage "option --runtime-dir given twice" --runtime-dir "$T/a" --runtime-dir "$T/b" status
expect_usage "option --socket given twice" --socket /x.sock --socket=/y.sock status
expect_usage "option --timeout given twice" --timeout 100 --timeout 200 status
expect_usage "--runtime-dir and --socket both name the daemon" --runtime-dir "$T/a" --socket /x.sock status
# help takes a command's name, nothing else
expect_usage "unexpected argument extra" status extra
expect_usage "help: unknown command 'extra'" help extra
"$MORACTL" help status > "$T/out" 2>&1 || fail "moractl help status: exit $?"
grep -q "^usage: moractl" "$T/out" || fail "moractl help status: $(cat "$T/out")"
# the absolute path and the URLs still reach no daemon the usual way: exit 1, not 2
for s in "$T/none.sock" "ipc://$T/none.sock" "tcp://127.0.0.1:1"; do
	"$MORACTL" --timeout 300 --socket "$s" status > /dev/null 2>&1
	rc=$?
	[ $rc = 1 ] || fail "moractl --socket $s status: exit $rc, want 1 (no daemon)"
done
pass "--socket notaurl, tcp:// (exit 2 with usage), an option twice, help extra: exit 2"

MORI_RUNTIME_DIR= "$MORACTL" --timeout 300 status > /dev/null 2> "$T/err"
grep -q "ipc:///morid" "$T/err" && fail "an empty MORI_RUNTIME_DIR named the root dir: $(cat "$T/err")"
pass "empty runtime dir or socket refused (exit 2), unknown option exit 2, empty \$MORI_RUNTIME_DIR ignored"

# A peer whose state has a long reason: a daemon nobody answers for (port 1 on loopback).
PA=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_listener
start_morid --listen "127.0.0.1:$PA"
timeout $((30 * SLOW)) "$B/mori-bench" io --runtime-dir "$RUN" --node 127.0.0.1:1 --name nobody --iters 1 \
	> "$T/bench.out" 2>&1 && fail "mori-bench reached a daemon at 127.0.0.1:1"
# The peer goes from down to hello and back as morid retries it: take the table between two
# JSON listings that agree and show the state it shows.
deadline=$(( $(now_ms) + 30000 * SLOW ))
while :; do
	ctl --json peers > "$T/peers.json" || fail "moractl --json peers"
	ctl peers > "$T/peers.txt" || fail "moractl peers"
	ctl --json peers > "$T/peers2.json" || fail "moractl --json peers"
	state=$(json_get state < "$T/peers.json")
	[ "$state" = "$(json_get state < "$T/peers2.json")" ] &&
		grep -q "^127.0.0.1:1 .* ${state%% (*} " "$T/peers.txt" && break
	[ "$(now_ms)" -lt "$deadline" ] || fail "the peer's state never held still over two listings: '$state'"
	sleep 0.05
done
reason=${state#* (}
reason=${reason%)}
[ "$reason" != "$state" ] && [ ${#reason} -gt 20 ] || fail "the peer's state has no long reason: '$state'"
head=$(sed -n 1p "$T/peers.txt")
row=$(grep '^127.0.0.1:1 ' "$T/peers.txt") || fail "no row for 127.0.0.1:1: $(cat "$T/peers.txt")"
# at (column NAME) the row holds WANT
at() {
	local pre=${head%%"$1"*}
	[ "$pre" != "$head" ] || fail "no column $1 in: $head"
	[ "${row:${#pre}:${#2}}" = "$2" ] || fail "column $1 holds '${row:${#pre}:${#2}}...', want '$2':
$head
$row"
	[ "${#pre}" = 0 ] || [ "${row:$((${#pre} - 1)):1}" = " " ] || fail "column $1 does not start after a space: $row"
}
at STATE "${state%% (*} "
at TRANSPORT "tcp "
at STREAMS "0 "
at ERRORS "0 "
at AUTHENTICATED "off (no cluster key)"
at REASON "$reason"
[ "${row: -${#reason}}" = "$reason" ] || fail "the row does not end with the reason: $row"
pass "moractl peers: columns aligned with a ${#reason}-character reason (last, under REASON)"
stop_morid
exit 0
