#!/usr/bin/env bash
# Configuration and start-up faults: a key set twice in the configuration file is an
# error with both lines (the last won silently, and reload said "reloaded"); a directory given as
# the configuration file says so (it said "read error" at line 0); `listen = 127.0.0.1:7100x` is
# rejected with file:line; morid on a filesystem that cannot take its pid refuses to start with
# the reason (it started, logging "cannot write pid" with none); a second morid names the pid
# holding the lock even when the lock file is empty (it said "pid ?"); --check-config refuses a
# cluster_key_file the start refuses (missing, mode 0644, not hex), saying the same.
source "$(dirname "$0")/testlib.bash"
# Each item is checked on its own: a failure is reported and the rest still run.
failed=0
bad() { echo "FAIL: $*"; failed=1; }

# ---- the file ----
cat > "$T/dup.conf" <<'EOF'
[morid]
data_streams = 2
log_level = info
data_streams = 3
EOF
out=$("$MORID" --check-config --config "$T/dup.conf" 2>&1) && bad "a key set twice was accepted: $out"
grep -q "dup.conf:4: data_streams is already set at line 2" <<< "$out" || bad "duplicate key: '$out'"
pass "a key set twice: $out"

mkdir "$T/conf.d"
out=$("$MORID" --check-config --config "$T/conf.d" 2>&1) && bad "a directory was accepted as the configuration"
grep -q "conf.d: is a directory" <<< "$out" || bad "directory as config: '$out'"
pass "a directory as the configuration file: $out"

printf '[morid]\n# the peer listener\nlisten = 127.0.0.1:7100x\n' > "$T/addr.conf"
out=$("$MORID" --check-config --config "$T/addr.conf" 2>&1) && bad "listen 7100x accepted"
grep -q "addr.conf:3: listen: '127.0.0.1:7100x' is not host:port" <<< "$out" || bad "bad listen: '$out'"
printf '[morid]\npeers = 127.0.0.1:7100, nowhere\n' > "$T/peers.conf"
out=$("$MORID" --check-config --config "$T/peers.conf" 2>&1) && bad "peers 'nowhere' accepted"
grep -q "peers.conf:2: peers: 'nowhere' is not host:port" <<< "$out" || bad "bad peers: '$out'"
pass "addresses are checked with file:line: $out"

# ---- the cluster key file ----
# --check-config refuses a key file the start refuses (missing, readable by others, not a key),
# with the start's own reason (it passed all three, and only the start said no).
"$MORACTL" keygen "$T/good.key" > /dev/null || bad "moractl keygen"
"$MORID" --check-config --cluster-key-file "$T/good.key" > /dev/null 2>&1 || bad "--check-config refused a good key"
cp "$T/good.key" "$T/open.key"
chmod 0644 "$T/open.key"
printf 'not a key at all\n' > "$T/text.key"
chmod 0600 "$T/text.key"
for k in "$T/absent.key" "$T/open.key" "$T/text.key"; do
	chk=$("$MORID" --check-config --cluster-key-file "$k" 2>&1) && bad "--check-config passed $k: $chk"
	mkdir -p "$T/krun"
	run=$(timeout $((10 * SLOW)) "$MORID" --foreground --runtime-dir "$T/krun" \
		--cluster-key-file "$k" 2>&1)
	rc=$?
	[ $rc != 0 ] && [ $rc != 124 ] || bad "the start with $k: exit $rc: $run"
	why=$(grep -o "cluster_key_file $k.*" <<< "$run")
	[ -n "$why" ] || bad "the start with $k gave no reason: $run"
	[ "$(grep -o "cluster_key_file $k.*" <<< "$chk")" = "$why" ] ||
		bad "--check-config with $k says '$chk', the start '$why'"
	pass "a bad key file, refused by --check-config as by the start: $why"
done

# reload of a file with a key set twice: refused, the old configuration stays
printf '[morid]\ndata_streams = 2\n' > "$T/live.conf"
start_listener
start_morid --config "$T/live.conf"
printf '[morid]\ndata_streams = 2\ndata_streams = 5\n' > "$T/live.conf"
out=$(ctl reload 2>&1) && bad "reload of a file with a key set twice said: $out"
grep -q "already set at line 2" <<< "$out" || bad "reload: '$out'"
ctl config | grep -q '^data_streams *= 2 ' || bad "the old configuration did not stay: $(ctl config | grep data_streams)"
pass "reload refuses it and keeps the old configuration: $out"

# ---- the lock file ----
# Someone holds the lock but the file is empty (a morid that could not write its pid, or a pid
# lost): the second morid names the holder from /proc/locks.
stop_morid
: > "$RUN/morid.lock"
flock -n "$RUN/morid.lock" sleep 30 &
holder=$!
# wait until the holder has it (/proc/locks lists the file's inode; probing with flock could take
# the lock from under the holder's own -n)
ino=$(stat -c %i "$RUN/morid.lock")
deadline=$(( $(now_ms) + 10000 * SLOW ))
until grep -q ":$ino " /proc/locks; do
	[ "$(now_ms)" -lt "$deadline" ] || { bad "flock never took $RUN/morid.lock"; break; }
	sleep 0.02
done
out=$("$MORID" --foreground --runtime-dir "$RUN" 2>&1) && bad "a second morid started"
kill "$holder"
wait "$holder" 2> /dev/null
# flock(1) forks sleep, which holds the lock too: either pid is right
grep -Eq "another morid \(pid [0-9]+\)" <<< "$out" || bad "second morid: '$out'"
grep -q "pid ?" <<< "$out" && bad "second morid did not name the holder: '$out'"
pass "a second morid names the holder of an empty lock file: $(grep -o 'another morid (pid [0-9]*)' <<< "$out")"

# A filesystem that cannot take the pid: RLIMIT_FSIZE 0 (writes fail with EFBIG; SIGXFSZ
# ignored, as a full disk's ENOSPC would be), then a real full tmpfs where we may mount one.
rm -f "$RUN/morid.lock"
out=$(timeout 3 bash -c 'trap "" XFSZ; ulimit -f 0; exec "$0" --foreground --runtime-dir "$1"' "$MORID" "$RUN" 2>&1)
[ $? = 124 ] && bad "morid started (and ran) though it could not write its pid: $out"
grep -q "cannot write pid to $RUN/morid.lock: File too large; refusing to start" <<< "$out" || bad "pid write: '$out'"
pass "morid refuses to start when it cannot write its pid: $(grep -o 'cannot write pid.*' <<< "$out")"
if [ "$(id -u)" = 0 ] && mkdir -p "$T/full" && mount -t tmpfs -o size=16k tmpfs "$T/full" 2> /dev/null; then
	mkdir "$T/full/run"
	dd if=/dev/zero of="$T/full/fill" bs=4k count=16 2> /dev/null
	out=$(timeout 3 "$MORID" --foreground --runtime-dir "$T/full/run" 2>&1)
	rc=$?
	umount "$T/full"
	[ $rc != 124 ] || bad "morid started (and ran) on a full filesystem: $out"
	grep -q "No space left on device" <<< "$out" || bad "full filesystem: '$out'"
	pass "on a full filesystem: $(grep -o 'cannot write pid.*' <<< "$out")"
else
	echo "# not root (or no tmpfs): the full-filesystem case ran as RLIMIT_FSIZE only"
fi
[ $failed = 0 ] || exit 1
exit 0
