#!/usr/bin/env bash
# morid's life cycle as systemd sees it: READY=1 once serving, status fields, SIGHUP reloads
# (a bad file keeps the old values and the log names file:line), one daemon per runtime dir,
# SIGTERM gives STOPPING=1 and exit 0 within 2 s with the sockets removed.
source "$(dirname "$0")/testlib.bash"

CONF=$T/morid.conf
printf '[morid]\n# test config\nmax_clients = 100\nlog_level = notice\n' > "$CONF"
start_listener
start_morid --config "$CONF"
pass "READY=1 received"
grep -Eq '^[0-9]+ STATUS=' "$NLOG" || fail "no STATUS= line before or with READY"
[ -S "$RUN/morid.sock" ] || fail "no control socket $RUN/morid.sock"
[ -S "$RUN/morid.session" ] || fail "no session socket $RUN/morid.session"
mode=$(stat -c %a "$RUN/morid.sock")
[ "$mode" = 660 ] || fail "control socket mode $mode, expected 660"

# status --json has every field, with values we know independently
js=$(ctl status --json) || fail "moractl status --json failed"
for f in version uptime_us pid config_path runtime_dir clients registered_bytes peers counters; do
	grep -q "^[[:space:]]*\"$f\":" <<< "$js" || fail "status --json lacks \"$f\": $js"
done
want_version=$("$MORID" --version | awk '{print $2}')
[ "$(json_get version <<< "$js")" = "$want_version" ] || fail "version is not $want_version"
[ "$(json_get pid <<< "$js")" = "$MPID" ] || fail "pid is not $MPID: $js"
[ "$(json_get runtime_dir <<< "$js")" = "$RUN" ] || fail "runtime_dir is not $RUN"
[ "$(json_get config_path <<< "$js")" = "$CONF" ] || fail "config_path is not $CONF"
[ "$(json_get clients <<< "$js")" = 0 ] || fail "clients is not 0"
[ "$(json_get registered_bytes <<< "$js")" = 0 ] || fail "registered_bytes is not 0"
[ "$(json_get peers <<< "$js")" = 0 ] || fail "peers is not 0"
up=$(json_get uptime_us <<< "$js")
[ "$up" -gt 0 ] 2>/dev/null || fail "uptime_us '$up' is not positive"
grep -q '"requests":' <<< "$js" || fail "counters lack requests"
pass "status --json fields"

human=$(ctl status) || fail "moractl status failed"
grep -q "^morid $want_version, pid $MPID" <<< "$human" || fail "human status: $human"
ctl version | grep -q "^morid $want_version (protocol" || fail "moractl version"
[ "$(ctl config --json | json_get max_clients)" = 100 ] || fail "config from file not in effect"
pass "status, version and config"

# SIGHUP with a valid change
printf '[morid]\n# test config\nmax_clients = 77\nlog_level = info\n' > "$CONF"
kill -HUP "$MPID"
ok=0
for _ in $(seq 1 $((250 * SLOW))); do
	[ "$(ctl config --json | json_get max_clients)" = 77 ] && { ok=1; break; }
	sleep 0.02
done
[ $ok = 1 ] || fail "max_clients did not become 77 after SIGHUP"
[ "$(ctl config --json | json_get log_level)" = info ] || fail "log_level did not become info"
[ "$(ctl status --json | json_get reloads)" = 1 ] || fail "counter reloads is not 1"
wait_for "$NLOG" 'RELOADING=1' 2 || fail "no RELOADING=1 on SIGHUP"
pass "SIGHUP applied a valid change"

# SIGHUP with a value out of bounds on line 3: the old value stays, the log says where
printf '[morid]\n# test config\nmax_clients = 99999\nlog_level = debug\n' > "$CONF"
kill -HUP "$MPID"
wait_for "$DLOG" "reload failed.*$CONF:3: .*max_clients" 5 || fail "no log line naming $CONF:3"
[ "$(ctl config --json | json_get max_clients)" = 77 ] || fail "bad reload changed max_clients"
[ "$(ctl config --json | json_get log_level)" = info ] || fail "bad reload changed log_level"
[ "$(ctl status --json | json_get reload_failures)" = 1 ] || fail "counter reload_failures is not 1"
pass "SIGHUP with a bad file kept the old config ($(grep -o "$CONF:3: .*" "$DLOG" | head -n 1))"

# the same through moractl reload: non-zero exit and the reason on one line
printf '[morid]\nmax_clients = 50\nnonsense here\n' > "$CONF"
if out=$(ctl reload 2>&1); then fail "moractl reload succeeded on a broken file: $out"; fi
grep -q "$CONF:3: syntax error" <<< "$out" || fail "moractl reload: '$out' does not name $CONF:3"
[ "$(wc -l <<< "$out")" = 1 ] || fail "moractl reload error is not one line: $out"
# a restart-only option changed: refused by name
printf '[morid]\nmax_clients = 50\nring_entries = 128\n' > "$CONF"
if out=$(ctl reload 2>&1); then fail "reload changed ring_entries: $out"; fi
grep -q "ring_entries cannot change" <<< "$out" || fail "moractl reload: '$out' does not name ring_entries"
printf '[morid]\nmax_clients = 50\n' > "$CONF"
ctl reload > /dev/null || fail "moractl reload of a valid file failed"
[ "$(ctl config --json | json_get max_clients)" = 50 ] || fail "moractl reload did not apply max_clients"
pass "moractl reload: errors name the line, valid changes apply"

# a second daemon on the same runtime dir refuses and says why
if out=$(NOTIFY_SOCKET='' timeout $((10 * SLOW)) "$MORID" --foreground --runtime-dir "$RUN" --config "$CONF" 2>&1); then
	fail "a second morid started on $RUN"
fi
grep -q "another morid (pid $MPID) is serving $RUN" <<< "$out" || fail "second morid said: $out"
ctl status > /dev/null || fail "the first morid stopped answering after the second tried"
pass "second morid refused: $(grep -o 'another morid.*' <<< "$out")"

# SIGTERM: STOPPING=1, exit 0 within 2 s, sockets gone
stop_morid
wait_for "$NLOG" '^[0-9]+ STOPPING=1$' 1 || fail "no STOPPING=1"
[ "$STOP_RC" = 0 ] || fail "morid exited $STOP_RC after SIGTERM"
[ "$STOP_MS" -le $((2000 * SLOW)) ] || fail "morid took $STOP_MS ms to stop"
[ -e "$RUN/morid.sock" ] && fail "control socket left behind"
[ -e "$RUN/morid.session" ] && fail "session socket left behind"
grep -q "stopped" "$DLOG" || fail "no 'stopped' log line"
if out=$(ctl status 2>&1); then fail "moractl status succeeded with no daemon"; fi
grep -q "no daemon answers\|no reply" <<< "$out" || fail "moractl with no daemon said: $out"
pass "SIGTERM: STOPPING=1, exit 0 in $STOP_MS ms; moractl then says: $out"

# SIGINT drains the same way
: > "$NLOG"
start_morid --config "$CONF"
t0=$(now_ms)
kill -INT "$MPID"
deadline=$(( t0 + 2000 * SLOW ))
while kill -0 "$MPID" 2>/dev/null && [ "$(now_ms)" -lt "$deadline" ]; do sleep 0.01; done
kill -0 "$MPID" 2>/dev/null && fail "morid still running 2 s after SIGINT"
wait "$MPID"
rc=$?
MPID='' # reaped: nothing for cleanup to kill
[ $rc = 0 ] || fail "morid exited $rc after SIGINT"
wait_for "$NLOG" '^[0-9]+ STOPPING=1$' 1 || fail "no STOPPING=1 after SIGINT"
grep -q "stopping: SIGINT" "$DLOG" || fail "no 'stopping: SIGINT' log line"
pass "SIGINT: STOPPING=1, exit 0 in $(( $(now_ms) - t0 )) ms"
