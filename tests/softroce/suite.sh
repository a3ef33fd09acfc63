#!/bin/bash
# The RDMA suite, run inside the Soft-RoCE VM by tests/test_rdma_vm.sh (through run.sh), as root
# in the host's root filesystem. Env: REPO (the source tree), B (its build dir), BATCHES (engine
# test), DBATCHES (two-daemon test), MIB, BENCH_ITERS, PERFTEST (1: perftest baselines).
# Each check prints "ok: ..." or "FAIL: ..."; the exit status is the number of failures (capped).
set -u
out=$PWD # the share: results go here (the checkout is read-only in the guest)
cd "$REPO"
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
gidx() { # index of the IPv4-mapped RoCEv2 GID of $1
	for g in /sys/class/infiniband/$1/ports/1/gids/*; do
		case $(cat "$g" 2>/dev/null) in 0000:0000:0000:0000:0000:ffff:*) basename "$g"; return ;; esac
	done
}
# perf TOOL N: perftest's TOOL (ib_write_bw, ib_read_bw) with N 1 MiB messages, server on rxe0,
# client on rxe1; the client's output in /tmp/cli.out, its status returned. The client retries
# while the server is not listening yet (on a loaded host it starts slowly), and the server,
# which would wait for a client forever, never outlives this call.
perf() {
	local t=$1 n=$2 g sp rc i
	g=$(gidx rxe0)
	timeout 300 "$t" -d rxe0 -x "$g" -s 1048576 -n "$n" -F > /tmp/srv.out 2>&1 &
	sp=$!
	for i in $(seq 10); do
		sleep 1
		timeout 120 "$t" -d rxe1 -x "$g" -s 1048576 -n "$n" -F 192.168.77.1 > /tmp/cli.out 2>&1
		rc=$?
		[ $rc != 0 ] && grep -q "Couldn't connect" /tmp/cli.out || break
	done
	kill $sp 2>/dev/null
	wait $sp 2>/dev/null
	return $rc
}
echo "--- devices"
ls /sys/class/infiniband/ || bad "no /sys/class/infiniband"

echo "--- layer 1: morid sees rxe0 and rxe1"
rd=$(mktemp -d /tmp/morid.XXXXXX)
"$B/morid" --runtime-dir "$rd" --log-target stderr > "$rd/log" 2>&1 &
mpid=$!
for i in $(seq 100); do [ -S "$rd/morid.sock" ] && break; sleep 0.1; done
"$B/moractl" --runtime-dir "$rd" nics
js=$("$B/moractl" --runtime-dir "$rd" nics --json)
for d in rxe0:192.168.77.1:v0 rxe1:192.168.77.2:v1; do
	IFS=: read -r dev addr nd <<< "$d"
	line=$(echo "$js" | tr -d '\n\t ' | grep -o "{\"device\":\"$dev\"[^}]*}")
	if echo "$line" | grep -q '"usable":true' && echo "$line" | grep -q "\"address\":\"$addr\"" &&
		echo "$line" | grep -q "\"netdev\":\"$nd\"" && echo "$line" | grep -q '"gid_type":"RoCEv2"' &&
		echo "$line" | grep -q '"state":"ACTIVE"' && echo "$line" | grep -q "\"gid_index\":$(gidx "$dev")"; then
		ok "moractl nics: $dev usable, $addr on $nd, RoCEv2 GID $(gidx "$dev")"
	else
		bad "moractl nics: $dev: $line"
	fi
done
"$B/moractl" --runtime-dir "$rd" status | grep -q 'nics *2 (2 usable)' && ok "moractl status: nics 2 (2 usable)" ||
	bad "moractl status: $("$B/moractl" --runtime-dir "$rd" status | grep nics)"
grep rdma "$rd/log"
kill $mpid; wait $mpid
# configuration: exclude a device, force a GID index
"$B/morid" --runtime-dir "$rd" --log-target stderr --rdma-exclude 'rxe1' --rdma-gid-index 0 > "$rd/log" 2>&1 &
mpid=$!
for i in $(seq 100); do [ -S "$rd/morid.sock" ] && break; sleep 0.1; done
"$B/moractl" --runtime-dir "$rd" nics
js=$("$B/moractl" --runtime-dir "$rd" nics --json | tr -d '\n\t ')
echo "$js" | grep -o '{"device":"rxe1"[^}]*}' | grep -q '"usable":false.*"reason":"inrdma_exclude"' &&
	ok "rdma_exclude=rxe1: rxe1 listed, not used" || bad "rdma_exclude: $js"
echo "$js" | grep -o '{"device":"rxe0"[^}]*}' | grep -q '"gid_index":0' &&
	ok "rdma_gid_index=0: rxe0 uses GID 0" || bad "rdma_gid_index: $js"
kill $mpid; wait $mpid
"$B/morid" --runtime-dir "$rd" --log-target stderr --rdma-device nosuch0 > "$rd/log" 2>&1 &
mpid=$!
for i in $(seq 100); do [ -S "$rd/morid.sock" ] && break; sleep 0.1; done
"$B/moractl" --runtime-dir "$rd" nics | grep -q "rdma_device 'nosuch0' not found" &&
	ok "rdma_device=nosuch0: said so" || bad "rdma_device=nosuch0: $("$B/moractl" --runtime-dir "$rd" nics)"
kill $mpid; wait $mpid

echo "--- layers 2-3: the engine on real verbs (rxe0 <-> rxe1)"
if timeout 400 "$B/tests/test_rdma_verbs" --dev-a rxe0 --dev-b rxe1 --batches "${BATCHES:-300}" \
	--mib "${MIB:-128}" --json "$out/verbs.json"; then
	ok "test_rdma_verbs"
else
	bad "test_rdma_verbs (exit $?)"
fi

if [ "${PERFTEST:-1}" = 1 ] && command -v ib_write_bw >/dev/null; then
	echo "--- baseline: perftest on the same devices, 1 MiB messages"
	for t in ib_write_bw ib_read_bw; do
		if perf $t "${MIB:-128}"; then
			bw=$(awk '$1 == 1048576 { print $4 }' /tmp/cli.out | tail -n1)
			echo "$t 1 MiB x ${MIB:-128}: ${bw} MB/s"
			echo "{\"test\": \"$t\", \"mbs\": ${bw:-0}}" >> "$out/perftest.json"
		else
			cat /tmp/cli.out
			echo "$t did not run (not counted as a failure)"
		fi
	done
fi
echo "--- layer 4: two morids over RDMA (transport = rdma), clients through libmori"
# One cluster key for every morid below (peers authenticate; without a key a
# non-loopback listen address is refused).
export MORI_CLUSTER_KEY=/tmp/cluster.key
rm -f $MORI_CLUSTER_KEY
"$B/moractl" keygen $MORI_CLUSTER_KEY > /dev/null || bad "moractl keygen"
KEYARG="--cluster-key-file $MORI_CLUSTER_KEY"
if timeout 500 "$B/tests/test_rdma_daemons" --batches "${DBATCHES:-100}"; then
	ok "test_rdma_daemons"
else
	bad "test_rdma_daemons (exit $?)"
fi

if [ "${PERFTEST:-1}" = 1 ] && command -v ib_write_bw >/dev/null; then
	echo "--- mori-bench io over RDMA against ib_write_bw, 1 MiB blocks, same devices, alternating"
	ra=/tmp/bench-a rb=/tmp/bench-b
	mkdir -p $ra $rb
	"$B/morid" --runtime-dir $ra --listen 192.168.77.1:7160 --transport rdma --rdma-device rxe0 $KEYARG --log-target stderr 2> $ra.log &
	pa=$!
	"$B/morid" --runtime-dir $rb --listen 192.168.77.2:7160 --transport rdma --rdma-device rxe1 $KEYARG --log-target stderr 2> $rb.log &
	pb=$!
	for i in $(seq 100); do [ -S $ra/morid.sock ] && [ -S $rb/morid.sock ] && break; sleep 0.1; done
	n=${BENCH_ITERS:-8}
	best_m=0 best_p=0
	for round in 1 2; do
		m=$(timeout 200 "$B/mori-bench" io --runtime-dir $ra --remote-runtime-dir $rb --op write \
			--block 1M --batch 16 --iters $n --warmup 1 --depth 2 --region 64M | awk '$1 == "1M" { print $4 * 1000 }')
		p=
		perf ib_write_bw $((n * 16)) && p=$(awk '$1 == 1048576 { print $4 }' /tmp/cli.out | tail -n1)
		echo "round $round: mori-bench io write 1 MiB x 16 (2 QPs): ${m:-?} MB/s; ib_write_bw 1 MiB: ${p:-?} MB/s"
		best_m=$(awk -v a="$best_m" -v b="${m:-0}" 'BEGIN { print (b > a ? b : a) }')
		best_p=$(awk -v a="$best_p" -v b="${p:-0}" 'BEGIN { print (b > a ? b : a) }')
	done
	"$B/moractl" --runtime-dir $ra peers
	ratio=$(awk -v a="$best_m" -v b="$best_p" 'BEGIN { if (b > 0) printf "%.0f", 100 * a / b; else print "?" }')
	echo "mori-bench io over RDMA: best ${best_m} MB/s = ${ratio}% of ib_write_bw's best ${best_p} MB/s (Soft-RoCE under TCG: emulation speed)"
	echo "{\"mori_mbs\": $best_m, \"ib_write_bw_mbs\": $best_p, \"ratio_pct\": \"$ratio\"}" > "$out/bench.json"
	"$B/moractl" --runtime-dir $ra peers | grep -q ' rdma ' && ok "mori-bench went over RDMA (moractl peers)" ||
		bad "mori-bench did not use RDMA: $("$B/moractl" --runtime-dir $ra peers)"
	echo "--- 4 KiB reads, batch 1: completion channel, then rdma_busy_poll = 1 on the initiator's morid"
	lat() {
		timeout 200 "$B/mori-bench" io --runtime-dir $ra --remote-runtime-dir $rb --op read --check \
			--block 4K --batch 1 --iters 300 --warmup 20 --region 16M > /tmp/lat.out 2>&1
		local rc=$?
		awk '$1 == "4K" { printf "p50 %s us, p99 %s us", $5, $6 }' /tmp/lat.out
		grep -q "read contents verified" /tmp/lat.out && [ $rc = 0 ]
	}
	if l0=$(lat); then ok "4 KiB reads, event driven: $l0"; else bad "4 KiB reads, event driven: $(tail -n 3 /tmp/lat.out)"; fi
	kill $pa
	wait $pa
	"$B/morid" --runtime-dir $ra --listen 192.168.77.1:7160 --transport rdma --rdma-device rxe0 --rdma-busy-poll 1 $KEYARG \
		--log-target stderr 2>> $ra.log &
	pa=$!
	for i in $(seq 100); do [ -S $ra/morid.sock ] && break; sleep 0.1; done
	if l1=$(lat); then ok "4 KiB reads, busy polling: $l1 (event driven: $l0)"; else bad "4 KiB reads, busy polling: $(tail -n 3 /tmp/lat.out)"; fi
	"$B/moractl" --runtime-dir $ra config | grep -q 'rdma_busy_poll *= *1' || bad "rdma_busy_poll not set: $("$B/moractl" --runtime-dir $ra config | grep busy)"
	kill $pa $pb
	wait $pa $pb
fi
echo "--- the link goes down under two morids for 3 s (v0 down), then comes back (transport = auto)"
# (Deleting rxe0 itself cannot be tried: the kernel's unregister waits until every user of the
# device, morid included, has closed it; rxe has no forced disassociation.)
da=/tmp/down-a db=/tmp/down-b
mkdir -p $da $db
"$B/morid" --runtime-dir $da --listen 192.168.77.1:7170 --rdma-device rxe0 --transfer-timeout-ms 5000 $KEYARG \
	--log-target stderr 2> $da.log &
pa=$!
"$B/morid" --runtime-dir $db --listen 192.168.77.2:7170 --rdma-device rxe1 $KEYARG --log-target stderr 2> $db.log &
pb=$!
for i in $(seq 100); do [ -S $da/morid.sock ] && [ -S $db/morid.sock ] && break; sleep 0.1; done
down_bench() {
	timeout "$1" "$B/mori-bench" io --runtime-dir $da --remote-runtime-dir $db --op read --check \
		--block 256K --batch 8 --iters 4 --warmup 1 --region 16M > /tmp/down.out 2>&1 &&
		grep -q "read contents verified" /tmp/down.out
}
if down_bench 120 && "$B/moractl" --runtime-dir $da peers | grep -q ' rdma '; then
	ok "before: verified reads over RDMA"
else
	bad "before: $(tail -n 2 /tmp/down.out) $("$B/moractl" --runtime-dir $da peers)"
fi
ip link set v0 down
t0=$(date +%s)
if down_bench 60; then
	bad "with the link down a transfer reported success"
else
	rc=$?
	[ $rc = 124 ] && bad "with the link down mori-bench hung past 60 s" ||
		ok "link down: mori-bench ended in $(( $(date +%s) - t0 )) s: $(grep -m1 -o 'MORI_E[A-Z]*.*' /tmp/down.out | cut -c1-120)"
fi
sleep 3
ip link set v0 up
sleep 1
t0=$(date +%s)
if down_bench 120; then
	ok "link back: verified reads again after $(( $(date +%s) - t0 )) s without restarts ($("$B/moractl" --runtime-dir $da peers | awk 'NR == 2 { print $3 }'))"
else
	bad "link back: $(tail -n 3 /tmp/down.out)"
fi
kill -0 $pa 2>/dev/null && "$B/moractl" --runtime-dir $da status > /dev/null && ok "morid kept serving" || bad "morid died"
kill $pa $pb 2>/dev/null
wait $pa $pb 2>/dev/null
echo "--- $fails failures"
[ $fails -gt 100 ] && fails=100
exit $fails
