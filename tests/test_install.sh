#!/usr/bin/env bash
# `make install PREFIX=/usr DESTDIR=$tmp` installs binaries, header, libraries, pkg-config
# file, configuration and systemd unit; a small program built against the installed header
# with the installed pkg-config file links (shared and static) and runs.
source "$(dirname "$0")/testlib.bash"
command -v pkg-config > /dev/null || skip "pkg-config not installed"
D=$T/dest
# Install from the build this run tests, with the same flags, so nothing is rebuilt: make
# exports SANITIZE/OPT to us under `make check`; when run by hand, read them back from .flags.
flags=$(cat "$B/.flags" 2>/dev/null)
SAN=${SANITIZE-$(grep -o -- '-fsanitize=[^ ]*' <<< "$flags" | head -n 1 | cut -d= -f2)}
OPTV=${OPT-$(sed -n 's/^-std=gnu11 \(.*\) -Wall -Wextra .*/\1/p' <<< "$flags")}
out=$(make --no-print-directory -C "$ROOT" install B="$B_ARG" PREFIX=/usr DESTDIR="$D" \
	SANITIZE="$SAN" OPT="$OPTV" 2>&1) || fail "make install failed: $out"
if grep -q '^  CC ' <<< "$out"; then echo "# note: make install recompiled: $(grep -c '^  CC ' <<< "$out") files"; fi

for f in usr/bin/morid usr/bin/moractl usr/include/mori.h usr/lib/libmori.so usr/lib/libmori.so.0 \
	usr/lib/libmori.a usr/lib/pkgconfig/mori.pc etc/mori/morid.conf \
	usr/lib/systemd/system/morid.service; do
	[ -e "$D/$f" ] || fail "not installed: /$f"
done
[ -x "$D/usr/bin/morid" ] && [ -x "$D/usr/bin/moractl" ] || fail "binaries not executable"
[ "$(readlink "$D/usr/lib/libmori.so")" = libmori.so.0 ] || fail "libmori.so does not link to libmori.so.0"
soname=$(objdump -p "$D/usr/lib/libmori.so.0" 2>/dev/null | awk '$1 == "SONAME" {print $2}')
[ -z "$soname" ] || [ "$soname" = libmori.so.0 ] || fail "SONAME is $soname"
grep -q '^ExecStart=/usr/bin/morid --foreground$' "$D/usr/lib/systemd/system/morid.service" ||
	fail "installed unit's ExecStart is not /usr/bin/morid"
grep -q '@PREFIX@' "$D/usr/lib/systemd/system/morid.service" && fail "@PREFIX@ left in the unit"
cmp -s "$ROOT/conf/morid.conf" "$D/etc/mori/morid.conf" || fail "installed morid.conf differs"
grep -q '^prefix=/usr$' "$D/usr/lib/pkgconfig/mori.pc" || fail "mori.pc prefix is not /usr: $(head -n 1 "$D/usr/lib/pkgconfig/mori.pc")"
"$D/usr/bin/morid" --version | grep -q '^morid ' || fail "installed morid --version"
pass "make install PREFIX=/usr DESTDIR=... installed every file"

# Only mori_ names are exported from the shared library.
if command -v nm > /dev/null; then
	bad=$(nm -D --defined-only "$D/usr/lib/libmori.so.0" | awk '$2 ~ /[TDB]/ && $3 !~ /^mori_/ {print $3}' | head -n 5)
	[ -z "$bad" ] || fail "libmori exports non-mori_ symbols: $bad"
	pass "libmori.so exports only mori_*"
fi

# A program built against the installed header and pkg-config file.
cat > "$T/hello.c" <<'C'
#include <mori.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
	const char *e = mori_strerror(MORI_EPERM);
	if (strncmp(e, "MORI_EPERM", 10) != 0)
		return 1;
	printf("%s %d\n", mori_version(), MORI_PROTOCOL_VERSION);
	return 0;
}
C
pcflags=$(PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_LIBDIR=$D/usr/lib/pkgconfig pkg-config --cflags --libs mori) || fail "pkg-config cannot read the installed mori.pc"
grep -q -- "-I$D/usr/include" <<< "$pcflags" || fail "pkg-config --cflags: $pcflags"
san=${SAN:+-fsanitize=$SAN}
# shellcheck disable=SC2086
${CC:-cc} -std=c99 -Wall -Werror $san -o "$T/hello" "$T/hello.c" $pcflags || fail "cannot build against the installed libmori"
want=$("$D/usr/bin/morid" --version | awk '{print $2}')
proto=$(sed -n 's/^#define MORI_PROTOCOL_VERSION \([0-9]*\).*/\1/p' "$ROOT/include/mori.h")
[ -n "$proto" ] || fail "no MORI_PROTOCOL_VERSION in include/mori.h"
got=$(LD_LIBRARY_PATH=$D/usr/lib "$T/hello") || fail "program linked to the installed libmori.so failed"
[ "$got" = "$want $proto" ] || fail "program printed '$got', expected '$want $proto'"
ldd_out=$(LD_LIBRARY_PATH=$D/usr/lib ldd "$T/hello")
grep -q "libmori.so.0 => $D/usr/lib/libmori.so.0" <<< "$ldd_out" || fail "not linked to the installed libmori.so.0: $ldd_out"
pass "program built with pkg-config links to libmori.so.0 and runs: $got"

# The static library, with its dependencies (mori.pc has no Libs.private yet: listed here).
deps=$(pkg-config --libs libuv libprotobuf-c libsystemd inih libcjson) || fail "pkg-config of the dependencies"
# shellcheck disable=SC2086
${CC:-cc} -std=c99 $san -o "$T/hello-static" "$T/hello.c" -I"$D/usr/include" "$D/usr/lib/libmori.a" \
	$deps -lnng -lpthread -ldl -lm ||
	fail "cannot link against the installed libmori.a"
got=$("$T/hello-static") || fail "statically linked program failed"
[ "$got" = "$want $proto" ] || fail "static program printed '$got'"
pass "program linked to libmori.a runs"
