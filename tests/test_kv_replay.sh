#!/usr/bin/env bash
# mori-kvreplay on the real Mooncake trace: the first 200 requests at full
# speed with the tiny model, prefill and decode clients on one morid, push (prefill writes) and
# pull (decode reads). tests/test_kv_xnode.sh does the same across two morids.
# Zero verification failures, and byte counts equal to a count made here from the trace with awk:
# with a pool that never evicts, the blocks moved are the distinct hash ids, the rest are cached.
source "$(dirname "$0")/testlib.bash"
source "$(dirname "$0")/kvlib.bash"

start_listener
start_morid

js=$(timeout $((120 * SLOW)) "$REPLAY" --runtime-dir "$RUN" --trace "$TRACE" --model tiny \
	--requests $N --as-fast-as-possible --pool-blocks $POOL --json --no-progress 2> "$T/push.err")
rc=$?
[ $rc = 0 ] || { cat "$T/push.err"; fail "same node, push: exit $rc: $js"; }
check_run "same node, push" "$js"
[ "$(json_get topology <<< "$js")" = same-node ] || fail "topology is not same-node"

js=$(timeout $((120 * SLOW)) "$REPLAY" --runtime-dir "$RUN" --trace "$TRACE" --model tiny \
	--requests $N --as-fast-as-possible --pool-blocks $POOL --mode pull --no-warmup --window 3 \
	--batch 1000 --json --no-progress 2> "$T/pull.err")
rc=$?
[ $rc = 0 ] || { cat "$T/pull.err"; fail "same node, pull: exit $rc: $js"; }
check_run "same node, pull, batches of 1000 descriptors" "$js"

# The daemon holds nothing of the replay afterwards.
[ "$(ctl status --json | json_get clients)" = 0 ] || fail "clients left attached after the replay"
[ "$(ctl status --json | json_get registered_bytes)" = 0 ] || fail "memory left registered"
pass "nothing left registered"
stop_morid
[ "$STOP_RC" = 0 ] || fail "morid exited $STOP_RC after SIGTERM"
exit 0
