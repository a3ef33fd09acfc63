#!/usr/bin/env bash
# moractl keygen: a new key file is mode 0600 with 64 hex digits; an existing one is kept unless
# --force; --force replaces it in one step (the old key or the new, never a short file); nothing
# but a regular file is replaced (a device, a fifo, a symlink stay as they were, and keygen does
# not block on a fifo); an empty name is a usage error.
source "$(dirname "$0")/testlib.bash"
K=$T/cluster.key
"$MORACTL" keygen "$K" > /dev/null || fail "keygen of a new file"
[ "$(stat -c %a "$K")" = 600 ] || fail "mode $(stat -c %a "$K"), want 600"
grep -qE '^[0-9a-f]{64}$' "$K" || fail "not 64 hex digits: $(cat "$K")"
cp "$K" "$T/old"
"$MORACTL" keygen "$K" 2> "$T/err" && fail "an existing key was replaced without --force"
grep -q "force" "$T/err" || fail "no hint at --force: $(cat "$T/err")"
cmp -s "$K" "$T/old" || fail "the refused keygen changed the key"
"$MORACTL" keygen "$K" --force > /dev/null || fail "keygen --force"
cmp -s "$K" "$T/old" && fail "--force kept the old key"
grep -qE '^[0-9a-f]{64}$' "$K" && [ "$(stat -c %a "$K")" = 600 ] || fail "--force wrote a bad key file"
[ "$(ls "$T" | grep -c '\.new\.')" = 0 ] || fail "temporary files left: $(ls "$T")"
pass "new key 0600, kept without --force, replaced with it"

mkfifo "$T/fifo"
timeout 5 "$MORACTL" keygen "$T/fifo" --force 2> /dev/null
rc=$?
[ $rc = 124 ] && fail "keygen blocked on a fifo"
[ $rc = 1 ] && [ -p "$T/fifo" ] || fail "fifo: rc $rc, or it was replaced"
ln -s "$T/old" "$T/link"
"$MORACTL" keygen "$T/link" --force 2> /dev/null && fail "a symlink was replaced"
[ -L "$T/link" ] && cmp -s "$T/old" "$T/link" || fail "the symlink or its target changed"
before=$(stat -c %a /dev/null)
"$MORACTL" keygen /dev/null --force 2> /dev/null && fail "keygen wrote /dev/null"
[ "$(stat -c %a /dev/null)" = "$before" ] || fail "/dev/null's mode changed to $(stat -c %a /dev/null)"
pass "a fifo, a symlink and a device are refused and left as they were"

"$MORACTL" keygen "" 2> /dev/null
[ $? = 2 ] || fail "an empty file name is not a usage error"
pass "empty name: usage error"
