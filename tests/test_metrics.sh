#!/usr/bin/env bash
# morid's Prometheus endpoint (metrics_listen). Two daemons on loopback, a known
# cross-node workload (mori-bench io: 6 batches of 4 x 64 KiB writes and its probes), then the
# endpoint is scraped and parsed with python3-prometheus-client's parser, and its counters must
# match moractl status (every counter; requests only grows, moractl's own calls count), the
# per-peer series moractl peers, the latency histogram the transfers; moractl metrics parses the
# same. Metrics stay off by default, and a bad metrics_listen is refused by --check-config.
source "$(dirname "$0")/testlib.bash"
PY=
for p in /usr/bin/python3 python3; do
	command -v "$p" > /dev/null 2>&1 && "$p" -c 'import prometheus_client' 2> /dev/null && { PY=$p; break; }
done
[ -n "$PY" ] || skip "python3-prometheus-client not installed (tools/install-deps installs it)"
[ -x "$B/mori-bench" ] || fail "$B/mori-bench is not built"

"$MORID" --check-config --metrics-listen nonsense > "$T/bad.txt" 2>&1 && fail "--check-config accepted metrics_listen=nonsense"
grep -q "metrics_listen" "$T/bad.txt" || fail "the refusal does not name metrics_listen: $(cat "$T/bad.txt")"
pass "a bad metrics_listen is refused, naming the option"

read -r PA PB PM < <("$PY" -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

start_listener
start_morid --listen "127.0.0.1:$PA"
ctl config | grep -Eq '^metrics_listen += +\(restart' || ctl config | grep -q '^metrics_listen' ||
	fail "moractl config does not list metrics_listen"
grep -q "Prometheus" "$DLOG" && fail "metrics are served without metrics_listen"
stop_morid
pass "metrics off by default"

: > "$NLOG"
start_morid --listen "127.0.0.1:$PA" --metrics-listen "127.0.0.1:$PM"
grep -q "Prometheus metrics on http://127.0.0.1:$PM/metrics" "$DLOG" || fail "no 'Prometheus metrics on' line in the log"
RB=$T/b
mkdir -p "$RB"
"$MORID" --foreground --runtime-dir "$RB" --listen "127.0.0.1:$PB" 2>> "$T/b.log" &
BPID=$!
trap 'rc=$?; kill -9 $BPID 2>/dev/null; (exit $rc); cleanup' EXIT
for _ in $(seq 100); do [ -S "$RB/morid.session" ] && break; sleep 0.05; done
"$B/mori-bench" io --runtime-dir "$RUN" --remote-runtime-dir "$RB" --op write --block-min 64K --block-max 64K \
	--batch 4 --iters 5 --warmup 1 --region 16M > "$T/bench.txt" 2>&1 || fail "mori-bench io failed: $(tail -5 "$T/bench.txt")"
pass "workload ran: $(grep -E '^ +64K' "$T/bench.txt" | head -1)"

"$PY" - "$PM" > "$T/scrape.json" 2> "$T/scrape.err" <<'EOF' || fail "scrape: $(cat "$T/scrape.err")"
import json, sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
r = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10)
ctype = r.headers.get("Content-Type", "")
assert "version=0.0.4" in ctype, ctype
out = {}
for fam in text_string_to_metric_families(r.read().decode()):
    for s in fam.samples:
        key = s.name + json.dumps(dict(sorted(s.labels.items())), sort_keys=True) if s.labels else s.name
        out[key] = s.value
json.dump(out, sys.stdout)
EOF
ctl --json status > "$T/status.json" || fail "moractl status"
ctl --json peers > "$T/peers.json" || fail "moractl peers"
ctl metrics > "$T/ctl_metrics.txt" || fail "moractl metrics"

"$PY" - "$T" "127.0.0.1:$PB" <<'EOF' || fail "metrics do not match moractl"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
t, peer = sys.argv[1], sys.argv[2]
m = json.load(open(t + "/scrape.json"))
st = json.load(open(t + "/status.json"))
peers = json.load(open(t + "/peers.json"))
def lab(name, **l):
    return m[name + json.dumps(dict(sorted(l.items())), sort_keys=True)]
bad = []
for name, v in st["counters"].items():
    key = "mori_" + name + ("" if name.endswith("_total") else "_total")
    if key not in m:
        bad.append("no %s" % key)
    elif name == "requests":
        if not m[key] <= v:
            bad.append("requests: scrape %s > status %s" % (m[key], v))
    elif m[key] != v:
        bad.append("%s: scrape %s, status %s" % (key, m[key], v))
xfers = st["counters"]["transfers"]
hist = sum(lab("mori_transfer_latency_seconds_count", op=o) for o in ("read", "write"))
if hist != xfers:
    bad.append("histogram counts %s transfers, status %s" % (hist, xfers))
inf = lab("mori_transfer_latency_seconds_bucket", op="write", le="+Inf")
if inf != lab("mori_transfer_latency_seconds_count", op="write"):
    bad.append("+Inf bucket %s != count" % inf)
if xfers < 6:
    bad.append("only %s transfers: the workload did not run" % xfers)
ok_bytes = lab("mori_transfer_bytes_total", op="write")
if ok_bytes < 6 * 4 * 65536 or ok_bytes != st["counters"]["bytes_sent"]:
    bad.append("write bytes %s (bytes_sent %s)" % (ok_bytes, st["counters"]["bytes_sent"]))
p = [x for x in peers if x["address"] == peer]
if not p:
    bad.append("moractl peers has no %s" % peer)
else:
    for f in ("bytes_sent", "bytes_received", "transfers", "errors"):
        if lab("mori_peer_%s_total" % f, peer=peer) != p[0][f]:
            bad.append("peer %s: scrape %s, moractl peers %s" % (f, lab("mori_peer_%s_total" % f, peer=peer), p[0][f]))
    if lab("mori_peer_up", peer=peer) != 1:
        bad.append("peer not up")
fams = {f.name for f in text_string_to_metric_families(open(t + "/ctl_metrics.txt").read())}
for want in ("mori_transfer_latency_seconds", "mori_peer_bytes_sent", "mori_client_sq_used", "mori_vram_bytes_staged",
             "mori_rdma_xfers"):
    if want not in fams:
        bad.append("moractl metrics lacks %s" % want)
for b in bad:
    print("mismatch:", b)
sys.exit(1 if bad else 0)
EOF
pass "scrape parses (Prometheus text 0.0.4) and matches moractl status, peers and the histogram"

# Idle connections to the endpoint are capped (64 open, a new one closes the oldest)
# and closed after 5 s; morid's descriptors stay bounded, and a scrape and moractl still work.
fds0=$(ls /proc/$MPID/fd | wc -l)
drop0=$(ctl --json status | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["counters"]["metrics_connections_dropped"])')
"$PY" - "$PM" "$MPID" > "$T/idle.txt" 2>&1 <<'EOF2' &
import os, socket, sys, time
s = [socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) for _ in range(400)]
time.sleep(1)  # variety: morid has taken most by now; its bound must hold at any moment
print("fds_held", len(os.listdir("/proc/%s/fd" % sys.argv[2])), flush=True)
def closed(x):
    try:
        return x.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
# morid closes each after 5 s idle: wait for that, 60 s at most (a loaded machine is slow)
until = time.monotonic() + 60
while sum(map(closed, s)) < len(s) and time.monotonic() < until:
    time.sleep(0.1)
print("closed_by_morid", sum(map(closed, s)), flush=True)
EOF2
HPID=$!
deadline=$(( $(now_ms) + 30000 * SLOW ))
until grep -q fds_held "$T/idle.txt" || [ "$(now_ms)" -ge "$deadline" ]; do sleep 0.05; done
grep -q fds_held "$T/idle.txt" || fail "the idle holder did not connect: $(cat "$T/idle.txt")"
held=$(awk '/fds_held/ {print $2}' "$T/idle.txt")
[ "$held" -le $((fds0 + 64 + 2)) ] || fail "400 idle metrics connections: morid holds $held descriptors (before $fds0, cap 64)"
"$PY" -c 'import sys, urllib.request; r = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5); assert b"mori_requests_total" in r.read()' "$PM" ||
	fail "no scrape while 400 idle connections were made"
ctl status > /dev/null || fail "moractl status while 400 idle metrics connections were made"
# each accept past the cap drops the oldest: counted once morid has taken all 400 (30 s at most)
deadline=$(( $(now_ms) + 30000 * SLOW ))
while :; do
	drop1=$(ctl --json status | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["counters"]["metrics_connections_dropped"])')
	[ $((drop1 - drop0)) -ge $((400 - 64)) ] || [ "$(now_ms)" -ge "$deadline" ] && break
	sleep 0.05
done
[ $((drop1 - drop0)) -ge $((400 - 64)) ] || fail "metrics_connections_dropped grew by $((drop1 - drop0)), want >= 336"
wait $HPID || fail "idle holder: $(cat "$T/idle.txt")"
grep -q "closed_by_morid 400" "$T/idle.txt" || fail "not every idle connection was closed within 60 s: $(cat "$T/idle.txt")"
fds2=$(ls /proc/$MPID/fd | wc -l)
[ "$fds2" -le $((fds0 + 2)) ] || fail "morid holds $fds2 descriptors after the idle connections went (before $fds0)"
printf 'GET /nothing HTTP/1.0\r\n\r\n' > "$T/req404"
"$PY" -c 'import socket,sys; s=socket.create_connection(("127.0.0.1",int(sys.argv[1])),timeout=5); s.sendall(open(sys.argv[2],"rb").read()); print(s.recv(64).split(b"\r\n")[0].decode())' "$PM" "$T/req404" | grep -q "^HTTP/1.1 404" ||
	fail "GET /nothing is not answered 404"
pass "400 idle metrics connections: morid held $held descriptors (before $fds0; cap 64), dropped $((drop1 - drop0)) at once and closed the rest (then $fds2); scrape, moractl and 404 answered"
kill -TERM $BPID
stop_morid
[ "$STOP_RC" = 0 ] || fail "morid with metrics exited $STOP_RC"
pass "morid with the endpoint stops cleanly"
