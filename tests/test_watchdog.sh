#!/usr/bin/env bash
# With WATCHDOG_USEC=400000 (and WATCHDOG_PID naming morid, as systemd sets it), morid sends
# WATCHDOG=1 every half interval: the gaps between messages must lie within 120..320 ms.
# Without WATCHDOG_PID matching, sd_watchdog_enabled says no and nothing is sent.
source "$(dirname "$0")/testlib.bash"
start_listener

# WATCHDOG_PID must be morid's own pid: exec from a shell keeps the pid of that shell.
NOTIFY_SOCKET=$NOTIFY WATCHDOG_USEC=400000 \
	bash -c 'WATCHDOG_PID=$$ exec "$@"' morid "$MORID" --foreground --runtime-dir "$RUN" 2>> "$DLOG" &
MPID=$!
wait_for "$NLOG" '^[0-9]+ READY=1$' 10 || fail "no READY=1"
sleep 3
stop_morid
[ "$STOP_RC" = 0 ] || fail "morid exited $STOP_RC"

mapfile -t ts < <(awk '$2 == "WATCHDOG=1" {print $1}' "$NLOG")
n=${#ts[@]}
[ "$n" -ge 10 ] || fail "only $n WATCHDOG=1 messages in about 3 s (expected about 15)"
min=999999 max=0 sum=0
for ((i = 1; i < n; i++)); do
	gap=$(( (ts[i] - ts[i - 1]) / 1000 ))
	[ $gap -lt $min ] && min=$gap
	[ $gap -gt $max ] && max=$gap
	sum=$((sum + gap))
done
mean=$((sum / (n - 1)))
echo "# $n WATCHDOG=1 messages; gaps min $min ms, mean $mean ms, max $max ms"
[ $min -ge 120 ] || fail "watchdog gap of $min ms < 120 ms"
[ $max -le 320 ] || fail "watchdog gap of $max ms > 320 ms"
pass "WATCHDOG=1 about every 200 ms"

# WATCHDOG_PID naming another process: the watchdog is not ours, nothing is sent
: > "$NLOG"
NOTIFY_SOCKET=$NOTIFY WATCHDOG_USEC=400000 WATCHDOG_PID=1 \
	"$MORID" --foreground --runtime-dir "$RUN" 2>> "$DLOG" &
MPID=$!
wait_for "$NLOG" '^[0-9]+ READY=1$' 10 || fail "no READY=1 (second run)"
sleep 0.6
stop_morid
grep -q 'WATCHDOG=1' "$NLOG" && fail "WATCHDOG=1 sent although WATCHDOG_PID is another process"
pass "no WATCHDOG=1 when WATCHDOG_PID is not morid"
