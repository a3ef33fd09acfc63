#!/usr/bin/env bash
# Requests from a uid outside allow_uids get a clear MORI_EPERM reply and count as "denied";
# a reload that allows the uid again lets it in. Runs as any uid but 12345 (the one allowed).
# The session socket's refusal is not covered here (bash cannot speak SEQPACKET).
source "$(dirname "$0")/testlib.bash"
ME=$(id -u)
[ "$ME" != 12345 ] || skip "runs as uid 12345, the uid this test allows"

CONF=$T/morid.conf
printf '[morid]\nallow_uids = 12345\n' > "$CONF"
start_listener
start_morid --config "$CONF"

if out=$(ctl status 2>&1); then fail "uid $ME was served although allow_uids = 12345: $out"; fi
grep -q "uid $ME is not allowed" <<< "$out" || fail "moractl said: $out"
grep -q "MORI_EPERM" <<< "$out" || fail "moractl did not name MORI_EPERM: $out"
[ "$(wc -l <<< "$out")" = 1 ] || fail "not one line: $out"
pass "moractl refused: $out"
ctl config > /dev/null 2>&1 && fail "config served to uid $ME"
wait_for "$DLOG" "uid $ME refused" 2 || fail "no log line for the refused request"

# Allow our uid through a reload, then read the counter: two refused requests.
printf '[morid]\nallow_uids = 12345, %s\n' "$ME" > "$CONF"
kill -HUP "$MPID"
ok=0
for _ in $(seq 1 $((250 * SLOW))); do
	ctl status > /dev/null 2>&1 && { ok=1; break; }
	sleep 0.02
done
[ $ok = 1 ] || fail "uid $ME not allowed after reload"
denied=$(ctl status --json | json_get denied)
[ "$denied" -ge 2 ] 2>/dev/null || fail "counter denied is '$denied', expected >= 2"
pass "counter denied = $denied after 2 refused requests"

stop_morid
[ "$STOP_RC" = 0 ] || fail "morid exited $STOP_RC"
