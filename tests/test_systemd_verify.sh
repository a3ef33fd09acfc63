#!/usr/bin/env bash
# systemd/morid.service passes `systemd-analyze verify` with ExecStart pointed at the build,
# without a single warning, and says what the issue asks for (Type=notify, watchdog, reload,
# runtime dir, memlock, hardening that keeps the GPU and RDMA devices).
source "$(dirname "$0")/testlib.bash"
command -v systemd-analyze > /dev/null || skip "systemd-analyze not installed"
UNIT=$ROOT/systemd/morid.service
[ -f "$UNIT" ] || fail "no $UNIT"

mkdir -p "$T/units"
MQ="\"$MORID\"" # quoted: systemd splits ExecStart at spaces (a checkout under a path with spaces)
sed -e "s|@PREFIX@/bin/morid|$MQ|" -e "s|@PREFIX@|/usr|g" "$UNIT" > "$T/units/morid.service"
grep -q '@[A-Z]*@' "$T/units/morid.service" && fail "placeholders left: $(grep '@[A-Z]*@' "$T/units/morid.service")"
out=$(systemd-analyze verify "$T/units/morid.service" 2>&1)
rc=$?
[ $rc = 0 ] || fail "systemd-analyze verify exit $rc: $out"
# unknown keys and bad values are only warnings for verify: treat any output as a failure
[ -z "$out" ] || fail "systemd-analyze verify warned: $out"
pass "systemd-analyze verify: clean"

for want in 'Type=notify' 'NotifyAccess=main' "ExecStart=$MQ --foreground" \
	'ExecReload=/bin/kill -HUP $MAINPID' 'WatchdogSec=10' 'RuntimeDirectory=mori' \
	'RuntimeDirectoryMode=0755' 'LimitMEMLOCK=infinity' 'Restart=on-failure' \
	'ProtectSystem=strict' 'ProtectHome=read-only' 'PrivateTmp=yes' 'NoNewPrivileges=yes' \
	'DevicePolicy=closed' 'DeviceAllow=char-nvidia\* rw' 'DeviceAllow=char-kfd rw' \
	'DeviceAllow=char-drm rw' 'DeviceAllow=char-infiniband_verbs rw'; do
	grep -q "^$want\$" "$T/units/morid.service" || fail "unit lacks '$want'"
done
grep -q '^PrivateDevices=yes' "$T/units/morid.service" && fail "PrivateDevices=yes hides the GPUs"
grep -q '^MemoryDenyWriteExecute=yes' "$T/units/morid.service" && fail "MemoryDenyWriteExecute breaks GPU JIT"
pass "unit has the required settings"

# The installed unit's ExecStart must be the installed morid.
sed 's|@PREFIX@|/opt/mori|g' "$UNIT" | grep -q '^ExecStart=/opt/mori/bin/morid --foreground$' ||
	fail "ExecStart does not follow @PREFIX@"
pass "ExecStart follows PREFIX"
