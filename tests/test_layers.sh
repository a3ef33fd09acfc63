#!/usr/bin/env bash
# Layering (tools/check-layers over $B's objects): daemon/'s files call each other without a
# cycle and its folders in order, libclient/ never references a daemon/ symbol, common/ neither a libclient/ nor a
# daemon/ one. The checker is first tried on a few tiny objects with a planted cycle, planted
# breaches and a stale object, so that a broken checker cannot pass quietly.
source "$(dirname "$0")/testlib.bash"
CHECK=$ROOT/tools/check-layers
command -v nm > /dev/null || skip "no nm (binutils)"
[ -n "$(find "$B/obj/daemon" -name '*.o' -print -quit 2> /dev/null)" ] || fail "no objects in $B/obj/daemon (make all B=$B_ARG)"

# plant SRC FILE CODE: a source file in the toy tree and its object where the Makefile puts it
S=$T/toy
plant() {
	mkdir -p "$(dirname "$S/$1")" "$(dirname "$S/b/obj/${1%.c}.o")"
	printf '%s\n' "$2" > "$S/$1"
	cc -c -o "$S/b/obj/${1%.c}.o" "$S/$1" || fail "cc $1"
}
plant daemon/top.c 'int low(void); int mid(void); int main(void) { return low() + mid(); }'
plant daemon/mid.c 'int low(void); int mid(void) { return low(); }'
plant daemon/low.c 'int low(void) { return 0; }'
plant libclient/cl.c 'int co(void); int cl(void) { return co(); }'
plant common/co.c 'int co(void) { return 1; }'
plant daemon/gone.c 'int low(void); int gone(void) { return low(); }'
rm "$S/daemon/gone.c" # a renamed file's stale object: ignored
out=$("$CHECK" -s "$S" b 2>&1) || fail "layered toy tree refused: $out"
pass "toy tree without a cycle passes: ${out##*check-layers: }"

plant daemon/low.c 'int top_hook(void); int low(void) { return top_hook(); }'
plant daemon/top.c 'int low(void); int mid(void); int top_hook(void) { return 2; } int main(void) { return low() + mid(); }'
out=$("$CHECK" -s "$S" b 2>&1) && fail "planted cycle low -> top not found: $out"
grep -q '^FAIL: daemon/ has a cycle of 3 files: daemon/low.c daemon/mid.c daemon/top.c$' <<< "$out" ||
	fail "planted cycle not named: $out"
grep -q '^  daemon/low.c -> daemon/top.c: top_hook$' <<< "$out" || fail "edge low -> top (top_hook) not shown: $out"
grep -q '^  daemon/low.c -> daemon/top.c -> daemon/low.c$' <<< "$out" || fail "shortest cycle not shown: $out"
pass "planted cycle named with its edge and shortest cycle"
plant daemon/low.c 'int low(void) { return 0; }'

# libclient/ is a tree of its own: a file cycle there fails as one in daemon/ does
plant libclient/up.c 'int cl(void); int up(void) { return cl(); }'
plant libclient/cl.c 'int co(void); int up(void); int cl(void) { return co() + up(); }'
out=$("$CHECK" -s "$S" b 2>&1) && fail "planted libclient cycle cl -> up not found: $out"
grep -q '^FAIL: libclient/ has a cycle of 2 files: libclient/cl.c libclient/up.c$' <<< "$out" ||
	fail "planted libclient cycle not named: $out"
pass "planted libclient cycle named"
rm -f "$S/libclient/up.c" "$S/b/obj/libclient/up.o"
plant libclient/cl.c 'int co(void); int cl(void) { return co(); }'

plant common/co.c 'int cl(void); int co(void) { return cl(); }'
plant libclient/cl.c 'int co(void); int mid(void); int cl(void) { return co() + mid(); }'
out=$("$CHECK" -s "$S" b 2>&1) && fail "planted layer breaches not found: $out"
grep -q '^FAIL: layer breach: common/co.c (common) references libclient/cl.c (libclient): cl$' <<< "$out" &&
	grep -q '^FAIL: layer breach: libclient/cl.c (libclient) references daemon/mid.c (daemon): mid$' <<< "$out" ||
	fail "planted breaches not named: $out"
pass "planted breaches named (common -> libclient, libclient -> daemon)"

# daemon/'s folders keep their order (TREES in tools/check-layers): core below peer, the
# transports on one level, and every folder placed in it.
plant daemon/core/base.c 'int up(void); int base(void) { return up(); }'
plant daemon/peer/up.c 'int up(void) { return 0; }'
plant daemon/transport/tcp/t1.c 'int t2(void); int t1(void) { return t2(); }'
plant daemon/transport/rdma/t2.c 'int base(void); int t2(void) { return base(); }'
plant daemon/misc/stray.c 'int stray(void) { return 0; }'
out=$("$CHECK" -s "$S" b 2>&1) && fail "planted folder-order breaches not found: $out"
grep -q '^FAIL: folder order: daemon/core/base.c (core, level 1) calls daemon/peer/up.c (peer, level 4): up$' <<< "$out" &&
	grep -q '^FAIL: folder order: daemon/transport/tcp/t1.c (transport/tcp, level 5) calls daemon/transport/rdma/t2.c (transport/rdma, level 5): t2$' <<< "$out" &&
	grep -q '^FAIL: daemon/misc/stray.c: folder daemon/misc is in no level' <<< "$out" ||
	fail "planted folder-order breaches not named: $out"
grep -q 'transport/rdma/t2.c (transport/rdma, level 5) calls daemon/core' <<< "$out" && fail "a call down the folders refused: $out"
pass "planted folder-order breaches named (core -> peer, tcp -> rdma, a folder in no level)"

echo "--- $B"
"$CHECK" "$B"
rc=$?
[ $rc = 0 ] || fail "check-layers on $B_ARG: exit $rc (the cycle and its edges above; cut an edge so that no file calls back up)"
pass "daemon/ has no cycle and its folders keep their order; libclient/ and common/ keep to their layers"
