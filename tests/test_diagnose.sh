#!/usr/bin/env bash
# moractl diagnose and moractl topo on this machine. With morid's GPU runtime off
# (MORI_GPU=none) the absent GPU is a warning with a remedy; with no RDMA device here the
# absent NIC is too (on a machine with devices that part is skipped, saying so). The exit code
# is as documented: 0 without a problem (warnings allowed), 1 with one (a peer that cannot be
# reached; no daemon at all). --json parses; topo says why there is no GPU.
source "$(dirname "$0")/testlib.bash"
PY=
for p in /usr/bin/python3 python3; do command -v "$p" > /dev/null 2>&1 && { PY=$p; break; }; done
[ -n "$PY" ] || skip "no python3"

start_listener
MORI_GPU=none start_morid
ctl diagnose > "$T/diag.txt"
rc=$?
ctl --json diagnose > "$T/diag.json"
rcj=$?
[ "$rc" = "$rcj" ] || fail "exit codes differ: human $rc, --json $rcj"
"$PY" - "$T/diag.json" "$rc" <<'EOF' || fail "diagnose: $(cat "$T/diag.txt")"
import json, sys
d = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
checks = {c["name"]: c for c in d["checks"]}
want = ["gpu", "vmm", "p2p", "mps", "memlock", "client_memlock", "ptrace_scope", "rdma", "ports", "roce_gid", "mtu",
        "dmabuf", "peers", "clock_skew", "hugepages", "shell_memlock", "pidfd"]
missing = [w for w in want if w not in checks]
assert not missing, "missing checks: %s" % missing
for c in d["checks"]:
    assert c["verdict"] in ("ok", "warning", "problem", "skipped"), c
    if c["verdict"] in ("warning", "problem"):
        assert c["remedy"], "no remedy: %s" % c
g = checks["gpu"]
assert g["verdict"] == "warning" and "MORI_GPU=none" in g["detail"] and "driver" in g["remedy"], g
for dep in ("vmm", "p2p", "mps", "dmabuf"):
    assert checks[dep]["verdict"] == "skipped", checks[dep]
problems = sum(c["verdict"] == "problem" for c in d["checks"])
assert problems == d["problems"], d
assert rc == (1 if problems else 0), "exit %d with %d problems" % (rc, problems)
assert checks["pidfd"]["verdict"] == "ok", checks["pidfd"]  # this kernel has pidfd_open (Linux >= 5.3)
print("nic:", checks["rdma"]["verdict"], checks["rdma"]["detail"])
EOF
grep -q "remedy: install the NVIDIA driver" "$T/diag.txt" || fail "the human form has no remedy line for the GPU"
pass "absent GPU: a warning with a remedy; the exit code ($rc) follows the problems"

ctl --json nics > "$T/nics.json" || fail "moractl nics"
if grep -q '"nics":[[:space:]]*\[\]' "$T/nics.json"; then
	"$PY" -c '
import json, sys
c = {x["name"]: x for x in json.load(open(sys.argv[1]))["checks"]}
r = c["rdma"]
assert r["verdict"] == "warning" and "TCP" in r["remedy"], r
assert c["ports"]["verdict"] == "skipped", c["ports"]' "$T/diag.json" || fail "absent NIC is not a warning with a remedy"
	pass "absent NIC: a warning with a remedy (cross-node transfers use TCP)"
else
	echo "# this machine has RDMA devices: the absent-NIC case is not checked here"
fi

ctl topo > "$T/topo.txt" || fail "moractl topo"
grep -q "GPUs: none (disabled by MORI_GPU=none)" "$T/topo.txt" || fail "topo: $(cat "$T/topo.txt")"
ctl --json topo | "$PY" -c 'import json, sys; t = json.load(sys.stdin); assert t["gpus"] == [] and t["cpus"] >= 1 and t["ranking"] == [], t' ||
	fail "topo --json"
pass "moractl topo says why there is no GPU; --json parses"
stop_morid

# A problem: a configured peer that nobody serves.
read -r PA PB < <("$PY" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
: > "$NLOG"
MORI_GPU=none start_morid --listen "127.0.0.1:$PA" --peers "127.0.0.1:$PB"
deadline=$(( $(now_ms) + 10000 * SLOW ))
while :; do
	ctl --json diagnose > "$T/diag2.json"
	rc=$?
	[ "$rc" = 1 ] && break
	[ "$(now_ms)" -lt "$deadline" ] || fail "no problem reported for the unreachable peer: $(cat "$T/diag2.json")"
	sleep 0.2
done
"$PY" -c '
import json, sys
c = {x["name"]: x for x in json.load(open(sys.argv[1]))["checks"]}
p = c["peers"]
assert p["verdict"] == "problem" and sys.argv[2] in p["detail"] and p["remedy"], p' "$T/diag2.json" "127.0.0.1:$PB" ||
	fail "the unreachable peer is not the problem: $(cat "$T/diag2.json")"
pass "an unreachable peer is a problem: exit 1"
stop_morid

ctl diagnose > "$T/diag3.txt" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "no daemon: exit $rc, not 1"
grep -Eq '^morid +problem' "$T/diag3.txt" || fail "no daemon: $(cat "$T/diag3.txt")"
pass "no daemon: a problem named morid, exit 1"
