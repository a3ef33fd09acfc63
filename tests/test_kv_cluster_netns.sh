#!/usr/bin/env bash
# UMBP's cluster index: three morids in three network namespaces and the test's own redis-server
# in a fourth (the hub whose bridge joins them), kv_index = redis://HUB:PORT/0. Checked with
# tests/kvcluster.py's clients, against key counts and values computed here:
# - keys put on one node are seen by exists / exists_consecutive on the others; external KV
#   reports, revokes, matches and hit counters across nodes, a dead client's reports leaving;
# - Redis killed: local puts and gets go on, cross-node lookups fail at once with MORI_ECONN
#   naming the Redis address; restarted empty, every node publishes everything again (keys put
#   during the outage included); FLUSHALL under a live connection: the same, by heartbeat;
# - a morid SIGKILLed: its keys and reports leave the index (kv_index_ttl_ms after its last
#   heartbeat, by Redis's TTLs), measured and bounded;
# - a morid restarted (empty DRAM, new epoch): its old keys never count, even before they expire;
# - clock skew: a morid whose clocks run a year ahead (faketime) publishes and expires alike;
#   the TTLs Redis holds are relative (PTTL never above kv_index_ttl_ms).
# Skips (77) where namespaces cannot be made or redis-server is absent.
source "$(dirname "$0")/testlib.bash"
source "$(dirname "$0")/netnslib.bash"
command -v redis-server > /dev/null || skip "no redis-server (tools/install-deps installs it)"
command -v redis-cli > /dev/null || skip "no redis-cli"
command -v python3 > /dev/null || skip "no python3"
export MORI_LIB=$B/libmori.so MORI_SLOW=$SLOW
# python3 loads libmori: a sanitizer build needs its runtimes preloaded there (only there)
sanitizer_preload
PY_PRE=${LD_PRELOAD:-}
unset LD_PRELOAD
DRV=(env ${PY_PRE:+LD_PRELOAD="$PY_PRE"} python3 "$ROOT/tests/kvcluster.py")
netns_star k 217 3
RPORT=26417
TTL=1500
REDIS_PID=
PIDS=(0 0 0)
RUNS=()
for i in 0 1 2; do RUNS[i]=$T/run$i; mkdir -p "${RUNS[i]}"; done
stop_all() {
	local p
	for p in "${PIDS[@]}" "$REDIS_PID"; do [ -n "$p" ] && [ "$p" != 0 ] && kill -9 "$p" 2> /dev/null; done
}
trap 'rc=$?; stop_all; netns_star_cleanup; (exit $rc); cleanup' EXIT
rcli() { ip netns exec "$HUB" redis-cli -h "$HUBIP" -p $RPORT "$@"; }

start_redis() {
	ip netns exec "$HUB" redis-server --bind "$HUBIP" --port $RPORT --save '' --appendonly no \
		--protected-mode no --dir "$T" >> "$T/redis.log" 2>&1 &
	REDIS_PID=$!
	local deadline=$(( $(now_ms) + 10000 * SLOW ))
	until [ "$(rcli ping 2> /dev/null)" = PONG ]; do
		[ "$(now_ms)" -lt "$deadline" ] || { tail "$T/redis.log"; fail "redis-server did not answer"; }
		sleep 0.05
	done
}

# start_node I [WRAPPER...]: morid I in its namespace, listening on its address.
start_node() {
	local i=$1
	shift
	rm -f "${RUNS[i]}/morid.session"
	ip netns exec "${STAR_NS[i]}" "$@" "$MORID" --foreground --runtime-dir "${RUNS[i]}" \
		--listen "${STAR_IP[i]}:27500" --cluster-key-file "$T/cluster.key" --kv-index "redis://$HUBIP:$RPORT/0" --kv-index-ttl-ms $TTL \
		--kv-dram-bytes 67108864 --log-level info 2>> "$T/morid$i.log" &
	PIDS[i]=$!
	local deadline=$(( $(now_ms) + 10000 * SLOW ))
	until [ -S "${RUNS[i]}/morid.session" ]; do
		[ "$(now_ms)" -lt "$deadline" ] || { tail "$T/morid$i.log"; fail "morid $i did not start"; }
		sleep 0.05
	done
}

# wait_up I: node I says its index is up.
wait_up() {
	local deadline=$(( $(now_ms) + 15000 * SLOW ))
	until "$MORACTL" --runtime-dir "${RUNS[$1]}" kv --json 2> /dev/null | grep -q '"index_state":[[:space:]]*"up"'; do
		[ "$(now_ms)" -lt "$deadline" ] || { tail "$T/morid$1.log"; fail "node $1's index is not up"; }
		sleep 0.05
	done
}

# until_out CMD... -- WANT: run the driver until its output is WANT (20 s, scaled); sets OUT.
until_out() {
	local want=${*: -1} deadline=$(( $(now_ms) + 20000 * SLOW ))
	set -- "${@:1:$(($# - 2))}"
	while :; do
		OUT=$("${DRV[@]}" "$@" 2>&1)
		[ "$OUT" = "$want" ] && return 0
		[ "$(now_ms)" -lt "$deadline" ] || return 1
		sleep 0.1
	done
}

"$MORACTL" keygen "$T/cluster.key" > /dev/null || fail "moractl keygen"
start_redis
for i in 0 1 2; do start_node "$i"; done
for i in 0 1 2; do wait_up "$i"; done
pass "three morids publish to the test's redis-server at $HUBIP:$RPORT"

# ---- keys across nodes ----
[ "$("${DRV[@]}" put "${RUNS[0]}" a 300)" = "put 300" ] || fail "puts on node 0"
[ "$("${DRV[@]}" put "${RUNS[1]}" b 120)" = "put 120" ] || fail "puts on node 1"
until_out count "${RUNS[2]}" a 300 -- "present 300 consecutive 300" || fail "node 2 sees node 0's keys: $OUT"
until_out count "${RUNS[2]}" b 120 -- "present 120 consecutive 120" || fail "node 2 sees node 1's keys: $OUT"
# a prefix over two nodes' keys, then keys nobody has: 300 + 120, not more
[ "$("${DRV[@]}" prefix "${RUNS[2]}" a b 300 200)" = "consecutive 420" ] || fail "prefix over two nodes"
[ "$("${DRV[@]}" count "${RUNS[2]}" a 1000)" = "present 300 consecutive 300" ] || fail "1000-key lookup"
[ "$("${DRV[@]}" get "${RUNS[0]}" a 300)" = "got 300" ] || fail "local gets on node 0"
epoch0=$(rcli get "mori:node:${STAR_IP[0]}:27500" | cut -d' ' -f1)
published=$(rcli hlen "mori:kv:${STAR_IP[0]}:27500:$epoch0")
[ "$published" = 300 ] || fail "node 0's hash in Redis holds $published fields, not 300"
pass "keys put on two nodes are found from the third (300 + 120, a 420-key prefix, a 1000-key lookup)"

# ---- external KV ----
out=$("${DRV[@]}" ext "${RUNS[0]}" "${RUNS[1]}" 2>&1) || fail "external KV: $out"
pass "external KV across nodes: $out"

# ---- Redis killed, restarted empty ----
kill -9 "$REDIS_PID"; wait "$REDIS_PID" 2> /dev/null; REDIS_PID=
[ "$("${DRV[@]}" put "${RUNS[0]}" c 50)" = "put 50" ] || fail "a put on node 0 with Redis down"
[ "$("${DRV[@]}" get "${RUNS[0]}" c 50)" = "got 50" ] || fail "a get on node 0 with Redis down"
[ "$("${DRV[@]}" count "${RUNS[0]}" c 50)" = "present 50 consecutive 50" ] || fail "local exists with Redis down"
out=$("${DRV[@]}" count "${RUNS[2]}" c 50)
case $out in "error -"*"redis://$HUBIP:$RPORT/0"*) ;; *) fail "a cross-node lookup with Redis down: $out" ;; esac
grep -q "MORI_ECONN\|ECONN" <<< "$out" || fail "not MORI_ECONN: $out"
start_redis
until_out count "${RUNS[2]}" c 50 -- "present 50 consecutive 50" || fail "keys put during the outage after the resync: $OUT"
until_out count "${RUNS[2]}" a 300 -- "present 300 consecutive 300" || fail "node 0's keys after the resync: $OUT"
pass "Redis down: local ops went on, a cross-node lookup failed at once (${out:0:90}...); restarted empty: resynced"
rcli flushall > /dev/null
until_out count "${RUNS[2]}" b 120 -- "present 120 consecutive 120" || fail "after FLUSHALL: $OUT"
pass "FLUSHALL under live connections: the heartbeats found it and every node published again"

# ---- a morid SIGKILLed ----
[ "$("${DRV[@]}" put "${RUNS[2]}" d 80)" = "put 80" ] || fail "puts on node 2"
until_out count "${RUNS[0]}" d 80 -- "present 80 consecutive 80" || fail "node 0 sees node 2's keys: $OUT"
kill -9 "${PIDS[2]}"; wait "${PIDS[2]}" 2> /dev/null
t0=$(now_ms)
until_out count "${RUNS[0]}" d 80 -- "present 0 consecutive 0" || fail "node 2's keys did not leave: $OUT"
gone_ms=$(( $(now_ms) - t0 ))
# the bound: kv_index_ttl_ms after its last heartbeat (every TTL/3), plus a busy machine's slack
[ $gone_ms -le $(( (TTL + TTL / 3 + 5000) * SLOW )) ] || fail "node 2's keys took $gone_ms ms to leave (ttl $TTL ms)"
# its hashes carry the same TTL, set a moment after the liveness key in each heartbeat: they
# leave within the same bound, not necessarily before the lookup above saw the node gone
for _ in $(seq $(( (TTL + TTL / 3 + 5000) * SLOW / 100 ))); do
	left=$(rcli --scan --pattern "mori:*:${STAR_IP[2]}:*" | wc -l)
	[ "$left" = 0 ] && break
	sleep 0.1
done
[ "$left" = 0 ] || fail "$left keys of node 2 still in Redis"
pass "a SIGKILLed morid's keys left the index $gone_ms ms after the kill (kv_index_ttl_ms $TTL), none left in Redis"

# ---- a morid restarted with an empty DRAM tier ----
old_epoch=$(rcli get "mori:node:${STAR_IP[0]}:27500" | cut -d' ' -f1)
kill -9 "${PIDS[0]}"; wait "${PIDS[0]}" 2> /dev/null
start_node 0
wait_up 0
new_epoch=$(rcli get "mori:node:${STAR_IP[0]}:27500" | cut -d' ' -f1)
[ -n "$new_epoch" ] && [ "$new_epoch" != "$old_epoch" ] || fail "node 0's epoch: $old_epoch -> $new_epoch"
# its old hash may still be in Redis until its TTL; it never counts
out=$("${DRV[@]}" count "${RUNS[1]}" a 300)
[ "$out" = "present 0 consecutive 0" ] || fail "stale entries of node 0's old epoch counted: $out"
pass "node 0 restarted empty (epoch $old_epoch -> $new_epoch): none of its old keys counts, before or after they expire"

# ---- clock skew ----
FAKELIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 2> /dev/null | head -n 1)
# a sanitizer build must have its runtime first in LD_PRELOAD, and libfaketime beside it is untried
[ -n "$PY_PRE" ] && { echo "# the clock-skew case is not run in a sanitizer build"; FAKELIB=; }
if [ -n "$FAKELIB" ]; then
	# libfaketime preloaded straight into morid (faketime(1) would fork, and the kill hit it)
	start_node 2 env LD_PRELOAD="$FAKELIB" FAKETIME="+365d"
	wait_up 2
	[ "$("${DRV[@]}" put "${RUNS[2]}" e 40)" = "put 40" ] || fail "puts on the skewed node"
	until_out count "${RUNS[1]}" e 40 -- "present 40 consecutive 40" || fail "the skewed node's keys: $OUT"
	pttl=$(rcli pttl "mori:node:${STAR_IP[2]}:27500")
	[ "$pttl" -gt 0 ] && [ "$pttl" -le $TTL ] || fail "the skewed node's liveness key has PTTL $pttl (ttl $TTL)"
	kill -9 "${PIDS[2]}"; wait "${PIDS[2]}" 2> /dev/null
	t0=$(now_ms)
	until_out count "${RUNS[1]}" e 40 -- "present 0 consecutive 0" || fail "the skewed node's keys did not leave: $OUT"
	skew_ms=$(( $(now_ms) - t0 ))
	[ $skew_ms -le $(( (TTL + TTL / 3 + 5000) * SLOW )) ] || fail "the skewed node's keys took $skew_ms ms to leave"
	grep -q "$(date -d '+365 days' +%Y)" <(ip netns exec "${STAR_NS[2]}" env LD_PRELOAD="$FAKELIB" FAKETIME="+365d" date +%Y) ||
		fail "libfaketime does not move the clock here"
	pass "a morid a year ahead (libfaketime): keys published, PTTL $pttl <= $TTL ms, gone $skew_ms ms after its kill"
else
	echo "# skipped the clock-skew case: no libfaketime (tools/install-deps installs faketime)"
fi

# ---- a lookup is one pipeline ----
# A 1 000-key batch_exists_consecutive over 500 keys of node 0 and 500 of node 1, asked of a fourth morid
# (in node 0's namespace) whose heartbeat runs every 20 s, is one Redis round trip by its
# counter: its HMGETs (one per node) and the liveness MGET go out together. A heartbeat may land
# in a try: up to 5 tries for a clean one.
R4=$T/run-lookup
mkdir -p "$R4"
ip netns exec "${STAR_NS[0]}" "$MORID" --foreground --runtime-dir "$R4" --listen "${STAR_IP[0]}:27501" \
	--cluster-key-file "$T/cluster.key" --kv-index "redis://$HUBIP:$RPORT/0" --kv-index-ttl-ms 60000 \
	--kv-dram-bytes 67108864 2>> "$T/morid-lookup.log" &
PIDS[3]=$!
RUNS[3]=$R4
deadline=$(( $(now_ms) + 10000 * SLOW ))
until [ -S "$R4/morid.session" ]; do
	[ "$(now_ms)" -lt "$deadline" ] || { tail "$T/morid-lookup.log"; fail "the lookup node did not start"; }
	sleep 0.05
done
wait_up 3
rtrips() { "$MORACTL" --runtime-dir "$R4" kv --json | sed -n 's/.*"index_round_trips":[[:space:]]*\([0-9]*\).*/\1/p' | head -n 1; }
[ "$("${DRV[@]}" put "${RUNS[0]}" p 500)" = "put 500" ] || fail "puts on node 0"
[ "$("${DRV[@]}" put "${RUNS[1]}" q 500)" = "put 500" ] || fail "puts on node 1"
until_out prefix "$R4" p q 500 500 -- "consecutive 1000" || fail "the lookup node sees nodes 0 and 1: $OUT"
one=
for _ in 1 2 3 4 5; do
	r0=$(rtrips)
	out=$("${DRV[@]}" prefix "$R4" p q 500 500)
	r1=$(rtrips)
	[ "$out" = "consecutive 1000" ] || fail "a 1000-key prefix over two nodes: $out"
	[ $((r1 - r0)) = 1 ] && { one=1; break; }
done
[ -n "$one" ] || fail "a 1000-key batch_exists_consecutive took $((r1 - r0)) Redis round trips, not one"
pass "a 1 000-key batch_exists_consecutive over two nodes' keys is one Redis round trip (one pipeline)"
exit 0
