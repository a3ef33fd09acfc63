#!/usr/bin/env bash
# UMBP across nodes, the remote get named by the caller (mori_umbp_batch_get_from): three morids
# in three network namespaces on one bridge, with a cluster key; the clients run outside and
# reach their daemons through the runtime dirs. Values put on one node come back byte for byte
# on the others (tests/umbp_node computes every byte from the seed, the key's index and the
# offset, without libmori). Then the faults: keys removed at the holder (misses, no errors); a
# daemon without the cluster key asking for them (refused); a holder SIGKILLed while two nodes
# fetch from it (their gets end with an error or a miss within the deadline, never wrong bytes);
# a partition between two morids (a blackhole route in one namespace: bounded waits, errors
# naming the node). Skips (77) where namespaces cannot be made.
source "$(dirname "$0")/testlib.bash"
source "$(dirname "$0")/netnslib.bash"
NODE=$B/tests/umbp_node
[ -x "$NODE" ] || fail "$NODE is not built"
netns_star u 214 3
# nodes 1..3 here are the star's 0..2
NS=() IP=()
for i in 1 2 3; do NS[i]=${STAR_NS[i - 1]} IP[i]=${STAR_IP[i - 1]}; done
NSS=$HUB IPS=$HUBIP
"$MORACTL" keygen "$T/cluster.key" > /dev/null || fail "moractl keygen"
"$MORACTL" keygen "$T/other.key" > /dev/null || fail "moractl keygen (a second key)"
PORT=7100
PIDS=()
# start_node I [KEY] [PORT] [MORID OPTIONS...]: morid I in namespace I, runtime dir $T/run$I
start_node() {
	local i=$1 key=${2:-$T/cluster.key} port=${3:-$PORT} rt=$T/run$1
	shift $(($# < 3 ? $# : 3))
	[ "$port" = "$PORT" ] || rt=$T/run$i-$port
	mkdir -p "$rt"
	ip netns exec "${NS[$i]}" "$MORID" --foreground --runtime-dir "$rt" --listen "${IP[$i]}:$port" \
		--cluster-key-file "$key" --kv-dram-bytes $((256 << 20)) --kv-slab-bytes $((16 << 20)) "$@" \
		2>> "$T/morid$i-$port.log" &
	PIDS[$i$port]=$!
	local deadline=$(($(now_ms) + 10000 * SLOW))
	until [ -S "$rt/morid.session" ]; do
		[ "$(now_ms)" -lt "$deadline" ] || { cat "$T/morid$i-$port.log"; fail "morid $i did not start"; }
		sleep 0.05
	done
}
stop_all() {
	local p
	for p in "${PIDS[@]}"; do kill -9 "$p" 2> /dev/null; done
	wait 2> /dev/null
}
trap 'rc=$?; stop_all; netns_star_cleanup; (exit $rc); cleanup' EXIT
for i in 1 2 3; do start_node $i; done

# field NAME LINE: NAME=value from umbp_node's summary line
field() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<< "$2"; }
# kvstat RUN NAME: a counter of moractl kv --json
kvstat() { "$MORACTL" --runtime-dir "$1" kv --json | sed -n "s/.*\"$2\":[[:space:]]*\([0-9]*\).*/\1/p" | head -n 1; }
msg_of() { sed -n "s/.* msg=//p" <<< "$1"; }
# get_expect RUN NODE SEED N SIZE OK MISS ERR [options]: a get whose counts must be exactly these
get_expect() {
	local rt=$1 node=$2 seed=$3 n=$4 size=$5 ok=$6 miss=$7 err=$8 out
	shift 8
	out=$("$NODE" "$rt" get "$seed" "$n" "$size" "$node" "$@") || fail "get from $node: wrong bytes: $out"
	[ "$(field ok "$out")" = "$ok" ] && [ "$(field miss "$out")" = "$miss" ] && [ "$(field err "$out")" = "$err" ] ||
		fail "get of $n keys from $node: expected ok=$ok miss=$miss err=$err: $out"
	LAST=$out
}

# 1. puts on node 1, gets on nodes 2 and 3 (values of 4 KiB, 64 KiB, 1 MiB, and one of 3 bytes)
for size in 4096 65536 1048576 3; do
	out=$("$NODE" "$T/run1" put $size 40 $size) || fail "put on node 1: $out"
	for i in 2 3; do
		get_expect "$T/run$i" "${IP[1]}:$PORT" $size 40 $size 40 0 0
	done
done
pass "40 values each of 3 B, 4 KiB, 64 KiB, 1 MiB put on node 1 came back byte for byte on nodes 2 and 3"

# into registered buffers (mori_umbp_register_memory): node 2's morid writes each value straight
# into the caller's region, no slot and no copy in the client (its delivered counter says so);
# malloc'd buffers (cross-memory attach) and a memfd's shared mapping (morid maps it)
for mem in "" --memfd; do for size in 3 1048576; do
	d0=$(kvstat "$T/run2" remote_delivered)
	get_expect "$T/run2" "${IP[1]}:$PORT" $size 40 $size 40 0 0 --register $mem
	d1=$(kvstat "$T/run2" remote_delivered)
	[ $((d1 - d0)) = 40 ] || fail "values of $size B into registered buffers $mem: $((d1 - d0)) of 40 delivered into the region"
done; done
pass "40 values of 3 B and of 1 MiB fetched straight into registered buffers (malloc'd, memfd), byte for byte"

# a batch over kv_batch_max items (split by libmori) and keys node 1 never had
get_expect "$T/run2" "${IP[1]}:$PORT" 4096 40 4096 40 0 0 --batch 40
get_expect "$T/run2" "${IP[1]}:$PORT" 999 8 4096 0 8 0
pass "keys the holder never had are misses"

# 2. keys removed at the holder between puts and fetch: misses, no errors
"$NODE" "$T/run1" remove 65536 20 > /dev/null || fail "remove on node 1"
get_expect "$T/run3" "${IP[1]}:$PORT" 65536 40 65536 20 20 0
pass "20 of 40 keys removed at the holder: 20 misses and 20 values, no errors"

# 3. a daemon without the cluster key asks node 1: refused
start_node 3 "$T/other.key" 7101
out=$("$NODE" "$T/run3-7101" get 4096 4 4096 "${IP[1]}:$PORT" --timeout-ms 4000)
[ "$(field ok "$out")" = 0 ] && [ "$(field err "$out")" = 4 ] || fail "a node with another key got values: $out"
grep -qi "auth\|key\|refus\|perm" <<< "$out" || fail "the refusal does not say why: $out"
pass "a daemon with another cluster key is refused: $(msg_of "$out" | head -c 160)"

# 4. a holder SIGKILLed while nodes 1 and 2 fetch from it: each get ends within its deadline
out=$("$NODE" "$T/run3" put 77 48 1048576) || fail "put on node 3: $out"
get_expect "$T/run1" "${IP[3]}:$PORT" 77 48 1048576 48 0 0
TMO=3000
"$NODE" "$T/run1" get 77 48 1048576 "${IP[3]}:$PORT" --loop --timeout-ms $TMO > "$T/k1.out" 2>&1 &
G1=$!
"$NODE" "$T/run2" get 77 48 1048576 "${IP[3]}:$PORT" --loop --timeout-ms $TMO > "$T/k2.out" 2>&1 &
G2=$!
sleep 0.5
kill -9 "${PIDS[3$PORT]}"
t0=$(now_ms)
for g in $G1 $G2; do
	deadline=$((t0 + (2 * TMO + 5000) * SLOW))
	while kill -0 "$g" 2> /dev/null && [ "$(now_ms)" -lt "$deadline" ]; do sleep 0.05; done
	kill -0 "$g" 2> /dev/null && { kill -9 "$g"; fail "a get from the killed holder still waits $(($(now_ms) - t0)) ms later"; }
	wait "$g" || fail "a get from the killed holder returned wrong bytes: $(cat "$T"/k*.out)"
done
for f in "$T/k1.out" "$T/k2.out"; do
	l=$(tail -n 1 "$f")
	[ "$(field bad "$l")" = 0 ] || fail "wrong bytes: $l"
	[ "$(field err "$l")" != 0 ] || [ "$(field miss "$l")" != 0 ] || fail "no error and no miss after the holder died: $l"
	grep -q "${IP[3]}" <<< "$l" || [ "$(field err "$l")" = 0 ] || fail "the error does not name the holder: $l"
done
pass "holder SIGKILLed mid-fetch: both gets ended within $(($(now_ms) - t0)) ms: $(msg_of "$(tail -n 1 "$T/k1.out")" | head -c 120)"

# 5. a partition between nodes 1 and 2 (node 1 drops what it sends to node 2)
out=$("$NODE" "$T/run2" put 88 8 65536) || fail "put on node 2: $out"
get_expect "$T/run1" "${IP[2]}:$PORT" 88 8 65536 8 0 0
ip -n "${NS[1]}" route add blackhole "${IP[2]}/32" || fail "blackhole route"
t0=$(now_ms)
out=$("$NODE" "$T/run1" get 88 8 65536 "${IP[2]}:$PORT" --timeout-ms 2000 --batch 8)
ms=$(($(now_ms) - t0))
[ "$(field err "$out")" = 8 ] && [ "$(field bad "$out")" = 0 ] || fail "a get across the partition: $out"
[ "$ms" -lt $((8000 * SLOW)) ] || fail "a get across the partition took $ms ms with a 2 s deadline"
grep -q "${IP[2]}" <<< "$out" || fail "the error does not name the unreachable node: $out"
ip -n "${NS[1]}" route del blackhole "${IP[2]}/32"
pass "partition: the get ended after $ms ms (deadline 2 s): $(msg_of "$out" | head -c 160)"
# and heals: the same get succeeds again within a while
deadline=$(($(now_ms) + 20000 * SLOW))
until out=$("$NODE" "$T/run1" get 88 8 65536 "${IP[2]}:$PORT" --timeout-ms 2000) && [ "$(field ok "$out")" = 8 ]; do
	[ "$(now_ms)" -lt "$deadline" ] || fail "the link healed but gets still fail: $out"
	sleep 0.2
done
pass "after the partition heals, the same get returns every byte"

# 6. values only on the holder's SSD tier: a holder of 24 MiB of DRAM over an SSD tier takes 64
# values of 1 MiB (the older ones spill); node 2 gets all of them, the SSD ones read back at the
# holder under its peer lease and sent, every byte checked (node 2 into slots, node 1 into
# registered buffers)
S=7102
mkdir -p "$T/ssd1"
start_node 1 "$T/cluster.key" $S --kv-dram-bytes $((24 << 20)) --kv-slab-bytes $((8 << 20)) \
	--kv-ssd-dir "$T/ssd1" --kv-ssd-bytes $((1 << 30))
out=$("$NODE" "$T/run1-$S" put 66 64 1048576 --batch 4) || fail "put on the SSD holder: $out"
deadline=$(($(now_ms) + 20000 * SLOW))
until [ "$(kvstat "$T/run1-$S" ssd_keys)" -ge 32 ] 2> /dev/null; do
	[ "$(now_ms)" -lt "$deadline" ] || fail "the holder spilled $(kvstat "$T/run1-$S" ssd_keys) values to SSD, not 32"
	sleep 0.1
done
ssd=$(kvstat "$T/run1-$S" ssd_keys)
get_expect "$T/run2" "${IP[1]}:$S" 66 64 1048576 64 0 0 --batch 8
s1=$(kvstat "$T/run1-$S" remote_served_ssd)
[ "${s1:-0}" -ge 1 ] || fail "the holder served no value from its SSD tier (ssd_keys $ssd)"
get_expect "$T/run1" "${IP[1]}:$S" 66 64 1048576 64 0 0 --batch 8 --register
s2=$(kvstat "$T/run1-$S" remote_served_ssd)
[ "$s2" -gt "$s1" ] || fail "the second get read nothing from the holder's SSD tier"
pass "64 values of 1 MiB from a holder with $ssd on SSD: every byte back through two other morids ($s1, then $((s2 - s1)) read from its SSD)"
exit 0
