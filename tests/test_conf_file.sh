#!/usr/bin/env bash
# conf/morid.conf documents every option of morid's table (as `morid --check-config` lists
# them) with its built-in default and whether reload may change it; uncommented, it parses
# and yields exactly the defaults.
source "$(dirname "$0")/testlib.bash"
CONF=$ROOT/conf/morid.conf
[ -f "$CONF" ] || fail "no $CONF"
: > "$T/empty.conf"
defaults=$("$MORID" --check-config --config "$T/empty.conf") || fail "--check-config failed"
n=0
while IFS= read -r line; do
	name=${line%% = *}
	value=${line#* = }
	grep -qx "#$name = *$value" "$CONF" || fail "$CONF lacks '#$name = $value' (the default)"
	n=$((n + 1))
done <<< "$defaults"
[ $n -ge 14 ] || fail "only $n options listed by --check-config"
pass "$n options documented with their defaults"

# [restart]/[reloadable] marks agree with the table (moractl config marks restart-only ones)
start_listener
start_morid --config "$T/empty.conf"
while IFS= read -r line; do
	name=$(awk '{print $1}' <<< "$line")
	mark=$(grep -B3 "^#$name =" "$CONF" | grep -o '\[restart\]\|\[reloadable\]' | tail -n 1)
	if grep -q 'restart to change' <<< "$line"; then want='[restart]'; else want='[reloadable]'; fi
	[ "$mark" = "$want" ] || fail "$name is marked '$mark' in $CONF, the daemon says $want"
done < <(ctl config | grep -v '^#')
stop_morid
pass "reload marks agree with the daemon"

# Uncommented, the file parses and changes nothing.
sed -n 's/^#\([a-z_]* =.*\)$/\1/p' "$CONF" > "$T/uncommented.conf"
printf '[morid]\n' | cat - "$T/uncommented.conf" > "$T/all.conf"
got=$("$MORID" --check-config --config "$T/all.conf" 2>&1) || fail "uncommented file does not parse: $got"
[ "$got" = "$defaults" ] || fail "uncommented file differs from the defaults: $(diff <(echo "$defaults") <(echo "$got"))"
pass "uncommented file parses to the defaults"
