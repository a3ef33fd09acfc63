#!/usr/bin/env bash
# UMBP across nodes through the cluster index: three morids in three network namespaces with
# kv_index = redis:// of the test's own redis-server (in the bridge's namespace). A plain
# mori_umbp_batch_get on one node finds keys the others hold and fetches them, byte for byte
# (tests/umbp_node computes every byte without libmori), one batch from two holders at once.
# Faults: keys removed at the holder right before the fetch (misses, no errors); a holder
# restarted with an empty DRAM tier while the index may still name its old keys (misses, never
# bytes); a holder SIGKILLed while another node fetches (an error or a miss within the deadline).
# Skips (77) where namespaces cannot be made or redis-server is absent.
source "$(dirname "$0")/testlib.bash"
source "$(dirname "$0")/netnslib.bash"
NODE=$B/tests/umbp_node
[ -x "$NODE" ] || fail "$NODE is not built"
command -v redis-server > /dev/null || skip "no redis-server (tools/install-deps installs it)"
netns_star c 215 3
# nodes 1..3 here are the star's 0..2
NS=() IP=()
for i in 1 2 3; do NS[i]=${STAR_NS[i - 1]} IP[i]=${STAR_IP[i - 1]}; done
NSS=$HUB IPS=$HUBIP
"$MORACTL" keygen "$T/cluster.key" > /dev/null || fail "moractl keygen"
PORT=7100
TTL=3000
declare -A PIDS
ip netns exec "$NSS" redis-server --bind "$IPS" --port 6379 --save "" --appendonly no --protected-mode no \
	--daemonize no > "$T/redis.log" 2>&1 &
RPID=$!
start_node() {
	local i=$1 rt=$T/run$1 extra=("${@:2}")
	mkdir -p "$rt"
	ip netns exec "${NS[$i]}" "$MORID" --foreground --runtime-dir "$rt" --listen "${IP[$i]}:$PORT" \
		--cluster-key-file "$T/cluster.key" --kv-dram-bytes $((256 << 20)) --kv-slab-bytes $((16 << 20)) \
		--kv-index "redis://$IPS:6379/0" --kv-index-ttl-ms $TTL "${extra[@]}" 2>> "$T/morid$i.log" &
	PIDS[$i]=$!
	local deadline=$(($(now_ms) + 10000 * SLOW))
	until [ -S "$rt/morid.session" ]; do
		[ "$(now_ms)" -lt "$deadline" ] || { cat "$T/morid$i.log"; fail "morid $i did not start"; }
		sleep 0.05
	done
}
stop_all() {
	local p
	for p in "${PIDS[@]}" "$RPID"; do kill -9 "$p" 2> /dev/null; done
	wait 2> /dev/null
}
trap 'rc=$?; stop_all; netns_star_cleanup; (exit $rc); cleanup' EXIT
for i in 1 2 3; do start_node $i; done

field() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<< "$2"; }
msg_of() { sed -n "s/.* msg=//p" <<< "$1"; }
# until_ok RUN SEED N SIZE: a plain get (no node named) until all N come back, within a deadline
# (the holders publish their keys in batches: the index names them shortly after the put)
until_ok() {
	local deadline=$(($(now_ms) + 15000 * SLOW)) out
	until out=$("$NODE" "$1" get "$2" "$3" "$4" --batch "$3") && [ "$(field ok "$out")" = "$3" ]; do
		[ "$(field bad "$out")" = 0 ] || fail "wrong bytes: $out"
		[ "$(now_ms)" -lt "$deadline" ] || fail "node's get through the index never found all $3 keys: $out"
		sleep 0.1
	done
	LAST=$out
}

# 1. half the keys on node 1, half on node 2; node 3 gets them all in one batch
"$NODE" "$T/run1" put 5 64 65536 --part 0/2 > /dev/null || fail "put on node 1"
"$NODE" "$T/run2" put 5 64 65536 --part 1/2 > /dev/null || fail "put on node 2"
until_ok "$T/run3" 5 64 65536
pass "node 3 got 64 values of 64 KiB held half on node 1 and half on node 2 in one batch: $LAST"
"$NODE" "$T/run1" put 6 16 1048576 > /dev/null || fail "put of 1 MiB values on node 1"
until_ok "$T/run2" 6 16 1048576
pass "16 values of 1 MiB put on node 1 came back on node 2 through the index"

# 2. removed at the holder right before the fetch: the index may still name them; misses only
"$NODE" "$T/run1" remove 6 16 > /dev/null || fail "remove on node 1"
out=$("$NODE" "$T/run2" get 6 16 1048576 --batch 16)
[ "$(field ok "$out")" = 0 ] && [ "$(field miss "$out")" = 16 ] && [ "$(field err "$out")" = 0 ] ||
	fail "keys removed at their holder: $out"
pass "keys removed at the holder just before the fetch: 16 misses, no errors"

# 3. node 2 restarted with an empty DRAM tier: its keys of seed 5 are misses, never old bytes
kill -9 "${PIDS[2]}"
wait "${PIDS[2]}" 2> /dev/null
start_node 2
out=$("$NODE" "$T/run3" get 5 64 65536 --batch 64)
[ "$(field bad "$out")" = 0 ] && [ "$(field ok "$out")" = 32 ] && [ "$(field err "$out")" = 0 ] ||
	fail "after node 2 restarted: $out"
pass "a holder restarted empty: its 32 keys are misses, node 1's 32 still come back ($out)"

# 4. placement: node 3 restarted with a high watermark of 10 % (25.6 MiB of 256): of 64 puts of
# 1 MiB there, those past it go to the node with the most free DRAM; every one comes back, byte
# for byte, through the index from node 2, and node 3 itself holds fewer than 64
kill -9 "${PIDS[3]}"
wait "${PIDS[3]}" 2> /dev/null
start_node 3 --kv-high-watermark 10 --kv-low-watermark 5
sleep $((TTL / 1000)) # node 3's first heartbeat lists nodes 1 and 2 with their free DRAM
"$NODE" "$T/run3" put 12 64 1048576 --batch 1 > /dev/null || fail "put on node 3"
until_ok "$T/run2" 12 64 1048576
here=$("$NODE" "$T/run1" get 12 64 1048576 "${IP[3]}:$PORT" --batch 64)
[ "$(field ok "$here")" -lt 64 ] && [ "$(field err "$here")" = 0 ] || fail "node 3 kept every put past its high watermark: $here"
pass "placement: node 3 kept $(field ok "$here") of 64 puts past its 10 % high watermark, the others went to another node; all 64 came back through the index"

# 5. a holder SIGKILLed while node 3 fetches from it through the index
"$NODE" "$T/run1" put 9 32 1048576 > /dev/null || fail "put on node 1"
until_ok "$T/run3" 9 32 1048576
TMO=3000
"$NODE" "$T/run3" get 9 32 1048576 --loop --timeout-ms $TMO --batch 32 > "$T/k.out" 2>&1 &
G=$!
sleep 0.3
kill -9 "${PIDS[1]}"
t0=$(now_ms)
deadline=$((t0 + (2 * TMO + TTL + 5000) * SLOW))
while kill -0 "$G" 2> /dev/null && [ "$(now_ms)" -lt "$deadline" ]; do sleep 0.05; done
kill -0 "$G" 2> /dev/null && { kill -9 "$G"; fail "a get from the killed holder still runs $(($(now_ms) - t0)) ms later"; }
wait "$G" || fail "wrong bytes from the killed holder: $(cat "$T/k.out")"
pass "holder SIGKILLed during fetches through the index: the get ended within $(($(now_ms) - t0)) ms ($(tail -n 1 "$T/k.out" | head -c 200))"
exit 0
