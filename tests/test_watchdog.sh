#!/usr/bin/env bash
# With WATCHDOG_USEC=400000 (and WATCHDOG_PID naming morid, as systemd sets it), morid sends
# WATCHDOG=1 every half interval: the median gap between 15 messages must lie within 120..320 ms
# (each gap is printed; one alone may stretch on a loaded machine, in morid or in the listener).
# Without WATCHDOG_PID matching, sd_watchdog_enabled says no and nothing is sent.
source "$(dirname "$0")/testlib.bash"
start_listener

# WATCHDOG_PID must be morid's own pid: exec from a shell keeps the pid of that shell.
NOTIFY_SOCKET=$NOTIFY WATCHDOG_USEC=400000 \
	bash -c 'WATCHDOG_PID=$$ exec "$@"' morid "$MORID" --foreground --runtime-dir "$RUN" 2>> "$DLOG" &
MPID=$!
wait_for "$NLOG" '^[0-9]+ READY=1$' 10 || fail "no READY=1"
deadline=$(( $(now_ms) + 30000 * SLOW ))
until [ "$(grep -c ' WATCHDOG=1$' "$NLOG")" -ge 15 ]; do
	[ "$(now_ms)" -lt "$deadline" ] || fail "only $(grep -c ' WATCHDOG=1$' "$NLOG") WATCHDOG=1 messages in 30 s"
	sleep 0.05
done
stop_morid
[ "$STOP_RC" = 0 ] || fail "morid exited $STOP_RC"

mapfile -t ts < <(awk '$2 == "WATCHDOG=1" {print $1}' "$NLOG")
n=${#ts[@]}
[ "$n" -ge 15 ] || fail "only $n WATCHDOG=1 messages"
gaps=()
for ((i = 1; i < n; i++)); do
	gaps+=($(( (ts[i] - ts[i - 1]) / 1000 )))
done
mapfile -t sorted < <(printf '%s\n' "${gaps[@]}" | sort -n)
median=${sorted[$(( (n - 1) / 2 ))]}
echo "# $n WATCHDOG=1 messages; gaps (ms): ${gaps[*]}; median $median ms"
[ "$median" -ge 120 ] && [ "$median" -le 320 ] || fail "median watchdog gap $median ms, not within 120..320 ms"
pass "WATCHDOG=1 about every 200 ms"

# WATCHDOG_PID naming another process: the watchdog is not ours, nothing is sent
: > "$NLOG"
NOTIFY_SOCKET=$NOTIFY WATCHDOG_USEC=400000 WATCHDOG_PID=1 \
	"$MORID" --foreground --runtime-dir "$RUN" 2>> "$DLOG" &
MPID=$!
wait_for "$NLOG" '^[0-9]+ READY=1$' 10 || fail "no READY=1 (second run)"
sleep 0.6 # a window for a wrong WATCHDOG=1 to show: none may come, however long
stop_morid
grep -q 'WATCHDOG=1' "$NLOG" && fail "WATCHDOG=1 sent although WATCHDOG_PID is another process"
pass "no WATCHDOG=1 when WATCHDOG_PID is not morid"
