# Helpers for the integration scripts tests/test_*.sh (sourced, not run: the runner only runs
# tests/test_*.sh).
# Each script gets a private temp dir with the daemon's runtime dir, its own notification
# socket and logs; everything it started is stopped on exit, whatever happened.
# shellcheck disable=SC2034 # B_ARG, STOP_MS, STOP_RC are for the scripts that source this
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$PWD
B=${B:-build}
B_ARG=$B # as make was given it: the build's flags (.flags) name it, so keep it for make
case $B in /*) ;; *) B=$ROOT/$B ;; esac
MORID=$B/morid
MORACTL=$B/moractl
LISTENER=$B/tests/notify_listener
for f in "$MORID" "$MORACTL" "$LISTENER"; do
	[ -x "$f" ] || { echo "FAIL: $f is not built (make all B=${B#$ROOT/})"; exit 1; }
done
# Sanitizer builds run slower: scale every deadline.
SLOW=1
grep -q fsanitize "$B/.flags" 2>/dev/null && SLOW=3

T=$(mktemp -d /tmp/mori-test.XXXXXX)
RUN=$T/run
NOTIFY=$T/notify.sock
NLOG=$T/notify.log
DLOG=$T/morid.log
MPID=
LPID=
mkdir -p "$RUN"

cleanup() {
	local rc=$?
	[ -n "$MPID" ] && kill -9 "$MPID" 2>/dev/null
	[ -n "$LPID" ] && kill "$LPID" 2>/dev/null
	wait 2>/dev/null
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "# kept $T"; else rm -rf "$T"; fi
	exit $rc
}
trap cleanup EXIT

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

skip() { echo "skipped: $*"; exit 77; }

# Print the logs and fail.
fail() {
	echo "FAIL: $*"
	for f in "$DLOG" "$NLOG"; do
		[ -s "$f" ] && { echo "--- ${f#$T/} (last 40 lines)"; tail -n 40 "$f"; }
	done
	exit 1
}

pass() { echo "ok: $*"; }

# wait_for FILE REGEX SECONDS: poll until a line of FILE matches (grep -E).
wait_for() {
	local file=$1 re=$2 deadline=$(( $(now_ms) + $3 * 1000 * SLOW ))
	while [ "$(now_ms)" -lt "$deadline" ]; do
		grep -Eq -- "$re" "$file" 2>/dev/null && return 0
		sleep 0.02
	done
	return 1
}

start_listener() {
	"$LISTENER" "$NOTIFY" 600 >> "$NLOG" &
	LPID=$!
	local deadline=$(( $(now_ms) + 5000 ))
	while [ ! -S "$NOTIFY" ]; do
		[ "$(now_ms)" -lt "$deadline" ] || fail "notify_listener did not bind $NOTIFY"
		sleep 0.01
	done
}

# start_morid ARGS...: morid in the background on $RUN, reporting to $NOTIFY; waits for READY=1.
start_morid() {
	NOTIFY_SOCKET=$NOTIFY "$MORID" --foreground --runtime-dir "$RUN" "$@" 2>> "$DLOG" &
	MPID=$!
	wait_for "$NLOG" '^[0-9]+ READY=1$' 10 || fail "no READY=1 from morid within $((10 * SLOW)) s"
}

# stop_morid: SIGTERM, wait up to 5 s; sets STOP_RC and STOP_MS.
stop_morid() {
	local t0
	t0=$(now_ms)
	kill -TERM "$MPID"
	local deadline=$(( t0 + 5000 * SLOW ))
	while kill -0 "$MPID" 2>/dev/null && [ "$(now_ms)" -lt "$deadline" ]; do sleep 0.01; done
	kill -0 "$MPID" 2>/dev/null && fail "morid still running $((5 * SLOW)) s after SIGTERM"
	STOP_MS=$(( $(now_ms) - t0 ))
	wait "$MPID"
	STOP_RC=$?
	MPID=
}

ctl() { "$MORACTL" --runtime-dir "$RUN" "$@"; }

# json_get NAME < json: the value of "NAME": in cJSON's printed form, quotes stripped.
json_get() {
	sed -n "s/^[[:space:]]*\"$1\":[[:space:]]*\(.*\)\$/\1/p" | head -n 1 | sed -e 's/,$//' -e 's/^"\(.*\)"$/\1/'
}

# A sanitizer build's libmori loaded into a program built without the sanitizer (python3) needs
# the sanitizer runtimes loaded first: exports LD_PRELOAD and ASAN_OPTIONS for what follows
# (leak reports off: python3 leaks by design). Nothing in a normal build.
sanitizer_preload() {
	grep -q fsanitize "$B/.flags" 2> /dev/null || return 0
	local pre= r f
	for r in libasan.so libubsan.so; do
		f=$(${CC:-cc} -print-file-name=$r)
		[ -e "$f" ] && pre="$pre $f"
	done
	export LD_PRELOAD=${pre# } ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
}
