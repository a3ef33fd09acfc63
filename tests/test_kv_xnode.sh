#!/usr/bin/env bash
# mori-kvreplay across nodes: the first 200 requests of the real trace at
# full speed with the tiny model, the prefill client on one morid and the decode client on
# another (two daemons with peer listeners on loopback), push and pull; first forked from one
# command, then as two commands (--role prefill / --role decode joined at --coord), as on two
# machines. A mismatch between the two commands' geometry is refused, naming it.
# Zero verification failures, and byte counts equal to a count made here from the trace with awk:
# with a pool that never evicts, the blocks moved are the distinct hash ids, the rest are cached.
source "$(dirname "$0")/testlib.bash"
source "$(dirname "$0")/kvlib.bash"

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() { local p; for p in $(seq "$1" $(($1 + 200))); do port_free "$p" && { echo "$p"; return; }; done; }
PA=$(pick_port 27100)
PB=$(pick_port $((PA + 1)))
[ -n "$PA" ] && [ -n "$PB" ] || fail "no free loopback ports"
start_listener
start_morid --listen "127.0.0.1:$PA"
RUN2=$T/run2
M2=
mkdir -p "$RUN2"
"$MORID" --foreground --runtime-dir "$RUN2" --listen "127.0.0.1:$PB" 2>> "$T/morid2.log" &
M2=$!
trap 'rc=$?; [ -n "$M2" ] && kill -9 "$M2" 2>/dev/null; (exit $rc); cleanup' EXIT
deadline=$(( $(now_ms) + 10000 * SLOW ))
until [ -S "$RUN2/morid.session" ]; do
	[ "$(now_ms)" -lt "$deadline" ] || { cat "$T/morid2.log"; fail "second morid did not start"; }
	sleep 0.05
done
for mode in push pull; do
	js=$(timeout $((180 * SLOW)) "$REPLAY" --prefill-runtime-dir "$RUN" --decode-runtime-dir "$RUN2" \
		--trace "$TRACE" --model tiny --requests $N --as-fast-as-possible --pool-blocks $POOL \
		--mode $mode --no-warmup --json --no-progress 2> "$T/x$mode.err")
	rc=$?
	[ $rc = 0 ] || { cat "$T/x$mode.err"; tail -n 20 "$T/morid2.log"; fail "cross node, $mode: exit $rc: $js"; }
	[ "$(json_get topology <<< "$js")" = cross-node ] || fail "topology is not cross-node: $js"
	check_run "cross node (two morids on loopback), $mode" "$js"
done
PC=$(pick_port $((PB + 1)))
[ -n "$PC" ] || fail "no free loopback port for --coord"
for mode in push pull; do
	"$REPLAY" --role prefill --coord "127.0.0.1:$PC" --runtime-dir "$RUN" --model tiny --pool-blocks $POOL \
		--mode $mode --no-warmup --json > "$T/p$mode.out" 2>&1 &
	PF=$!
	js=$(timeout $((180 * SLOW)) "$REPLAY" --role decode --coord "127.0.0.1:$PC" --runtime-dir "$RUN2" \
		--trace "$TRACE" --model tiny --requests $N --as-fast-as-possible --pool-blocks $POOL \
		--mode $mode --no-warmup --json --no-progress 2> "$T/r$mode.err")
	rc=$?
	wait "$PF"
	prc=$?
	[ $rc = 0 ] && [ $prc = 0 ] ||
		{ cat "$T/r$mode.err" "$T/p$mode.out"; fail "--role, $mode: decode exit $rc, prefill exit $prc: $js"; }
	[ "$(json_get topology <<< "$js")" = cross-node ] || fail "--role: topology is not cross-node: $js"
	check_run "two commands (--role prefill on one morid, --role decode on the other), $mode" "$js"
done
"$REPLAY" --role prefill --coord "127.0.0.1:$PC" --runtime-dir "$RUN" --model tiny --pool-blocks $POOL \
	> "$T/pbad.out" 2>&1 &
PF=$!
timeout $((60 * SLOW)) "$REPLAY" --role decode --coord "127.0.0.1:$PC" --runtime-dir "$RUN2" --trace "$TRACE" \
	--model tiny --requests 5 --pool-blocks $((POOL + 1)) --no-progress > "$T/rbad.out" 2>&1
rc=$?
wait "$PF"
prc=$?
[ $rc = 2 ] && [ $prc != 0 ] && grep -q "disagree" "$T/rbad.out" ||
	{ cat "$T/rbad.out" "$T/pbad.out"; fail "mismatched --pool-blocks: decode exit $rc, prefill exit $prc"; }
pass "mismatched geometry between the two commands refused: $(grep -m1 -o 'disagree.*pool blocks' "$T/rbad.out")"
kill -TERM "$M2"
wait "$M2" 2>/dev/null
M2=
stop_morid
exit 0
