#!/usr/bin/env bash
# `make install PREFIX=/usr DESTDIR=$tmp` installs binaries, headers, libraries (libmori.so.X.Y.Z
# with its SONAME libmori.so.X and development links), pkg-config file, configuration and systemd unit.
# libmori.so exports exactly the functions include/mori.h declares (any extra or missing name
# is named) and needs no library of morid's (nng, libsystemd, ...). A small program built with
# the installed pkg-config file links to libmori.so, and with `pkg-config --static` to libmori.a
# alone, and both run.
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

want=$("$D/usr/bin/morid" --version | awk '{print $2}')
[ -n "$want" ] || fail "installed morid --version says no version"
sov=libmori.so.${want%%.*} # the SONAME: the major version (README, "ABI")
for f in usr/bin/morid usr/bin/moractl usr/include/mori.h usr/include/mori_types.h usr/include/mori_shmem.h \
	usr/include/mori_ep.h usr/include/mori_coll.h usr/include/mori_cco.h usr/lib/libmori.so.$want usr/lib/$sov \
	usr/lib/libmori.so usr/lib/libmori.a usr/lib/pkgconfig/mori.pc etc/mori/morid.conf \
	usr/lib/systemd/system/morid.service; do
	[ -e "$D/$f" ] || fail "not installed: /$f"
done
[ -x "$D/usr/bin/morid" ] && [ -x "$D/usr/bin/moractl" ] || fail "binaries not executable"
# The real file carries the full version; the SONAME link and the development link point to it.
SO=$D/usr/lib/libmori.so.$want
[ -f "$SO" ] && [ ! -L "$SO" ] || fail "/usr/lib/libmori.so.$want is not a regular file"
[ "$(readlink "$D/usr/lib/$sov")" = "libmori.so.$want" ] ||
	fail "$sov links to '$(readlink "$D/usr/lib/$sov")', not libmori.so.$want"
[ "$(readlink "$D/usr/lib/libmori.so")" = "$sov" ] ||
	fail "libmori.so links to '$(readlink "$D/usr/lib/libmori.so")', not $sov"
command -v readelf > /dev/null && command -v nm > /dev/null || fail "readelf/nm (binutils) not installed"
soname=$(readelf -d "$SO" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "$sov" ] || fail "SONAME is '$soname', not $sov"
grep -q '^ExecStart=/usr/bin/morid --foreground$' "$D/usr/lib/systemd/system/morid.service" ||
	fail "installed unit's ExecStart is not /usr/bin/morid"
grep -q '@PREFIX@' "$D/usr/lib/systemd/system/morid.service" && fail "@PREFIX@ left in the unit"
cmp -s "$ROOT/conf/morid.conf" "$D/etc/mori/morid.conf" || fail "installed morid.conf differs"
grep -q '^prefix=/usr$' "$D/usr/lib/pkgconfig/mori.pc" || fail "mori.pc prefix is not /usr: $(head -n 1 "$D/usr/lib/pkgconfig/mori.pc")"
"$D/usr/bin/morid" --version | grep -q '^morid ' || fail "installed morid --version"
pass "make install PREFIX=/usr DESTDIR=... installed every file"

# A reinstall keeps the admin's morid.conf (it once overwrote it, dropping cluster_key_file,
# listen, ...): the shipped one goes beside it as morid.conf.new, and make says so.
printf '\n# the admin'"'"'s edit\nmax_clients = 7\n' >> "$D/etc/mori/morid.conf"
cp "$D/etc/mori/morid.conf" "$T/admin.conf"
out=$(make --no-print-directory -C "$ROOT" install B="$B_ARG" PREFIX=/usr DESTDIR="$D" \
	SANITIZE="$SAN" OPT="$OPTV" 2>&1) || fail "second make install failed: $out"
cmp -s "$T/admin.conf" "$D/etc/mori/morid.conf" || fail "a reinstall overwrote the existing /etc/mori/morid.conf"
cmp -s "$ROOT/conf/morid.conf" "$D/etc/mori/morid.conf.new" || fail "a reinstall did not leave the shipped morid.conf as morid.conf.new"
grep -q 'morid.conf exists and is kept' <<< "$out" || fail "a reinstall did not say it kept morid.conf: $out"
# An unchanged one is left alone, with no .new beside it.
rm "$D/etc/mori/morid.conf.new"
cp "$ROOT/conf/morid.conf" "$D/etc/mori/morid.conf"
make --no-print-directory -C "$ROOT" install B="$B_ARG" PREFIX=/usr DESTDIR="$D" SANITIZE="$SAN" OPT="$OPTV" > /dev/null 2>&1 ||
	fail "third make install failed"
[ ! -e "$D/etc/mori/morid.conf.new" ] || fail "morid.conf.new left beside an unchanged morid.conf"
pass "a reinstall keeps an edited /etc/mori/morid.conf and leaves the shipped one as morid.conf.new"

# Exactly the functions of the public headers (include/mori*.h) are exported.
# The names come from the headers themselves (preprocessed with MORI_API empty, each declaration
# `... mori_name(...)`), so a function declared without MORI_API, or left out of
# libclient/libmori.map, shows up as missing.
# Every public header (include/mori*.h: mori.h, mori_shmem.h and those of later capabilities).
hdr=$(for h in "$ROOT"/include/mori*.h; do printf '#include "%s"\n' "${h##*/}"; done |
	${CC:-cc} -E -P -DMORI_API= -I"$ROOT/include" -x c - |
	tr '\n' ' ' | tr ';{}' '\n\n\n' | grep -vw -e static -e return | # inline helpers (the CCO teams) and their bodies export nothing
	sed -n 's/^[^(]*[^A-Za-z0-9_]\(mori_[A-Za-z0-9_]*\) *(.*/\1/p' | sort -u)
nhdr=$(grep -c . <<< "$hdr")
[ "$nhdr" -ge 40 ] || fail "found only $nhdr function declarations in include/mori*.h: $hdr"
dyn=$(nm -D --defined-only "$SO") || fail "nm -D $SO"
# The absolute symbols are the version nodes of libmori.map, each of the SONAME's major version
# (MORI_1.0, and MORI_1.1 ... for what later releases add); every name carries one of them.
major=${want%%.*}
vnodes=$(awk '$2 == "A" {print $3}' <<< "$dyn" | sort | tr '\n' ' ')
mapnodes=$(grep -oE '^MORI_[0-9]+\.[0-9]+' "$ROOT/libclient/libmori.map" | sort | tr '\n' ' ')
[ "$vnodes" = "$mapnodes" ] || fail "version nodes are '$vnodes', libmori.map has '$mapnodes'"
[ -z "$(tr ' ' '\n' <<< "$vnodes" | grep . | grep -v "^MORI_$major\.")" ] ||
	fail "version nodes '$vnodes' are not all of major version $major (the SONAME's)"
unver=$(awk '$2 != "A" && $3 !~ /@@MORI_[0-9]+\.[0-9]+$/ {print $3}' <<< "$dyn" | tr '\n' ' ')
[ -z "$unver" ] || fail "exported without a MORI_ version: $unver"
exp=$(awk '$2 != "A" {sub(/@.*/, "", $3); print $3}' <<< "$dyn" | sort -u)
extra=$(comm -13 <(echo "$hdr") <(echo "$exp") | tr '\n' ' ')
missing=$(comm -23 <(echo "$hdr") <(echo "$exp") | tr '\n' ' ')
[ -z "$extra" ] || fail "libmori.so exports $(wc -w <<< "$extra") names the public headers do not declare: $extra"
[ -z "$missing" ] || fail "the public headers declare functions libmori.so does not export: $missing"
notfn=$(awk '$2 != "A" && $2 != "T" {print $3 " (" $2 ")"}' <<< "$dyn" | tr '\n' ' ')
[ -z "$notfn" ] || fail "exports data, not functions: $notfn"
pass "libmori.so exports exactly the $nhdr functions of include/mori*.h (versions $vnodes)"

# Only what the library calls: none of morid's or the tools' libraries.
needed=$(readelf -d "$SO" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
bad=$(tr ' ' '\n' <<< "$needed" | grep -E '^lib(nng|systemd|uv|inih|cjson|ibverbs|sodium)\.' | tr '\n' ' ')
[ -z "$bad" ] || fail "libmori.so needs libraries it must not link: $bad(NEEDED: $needed)"
pass "libmori.so needs only: $needed"

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
# The installed mori.pc first, the system's for what it requires (libprotobuf-c).
pc() { PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_PATH=$D/usr/lib/pkgconfig pkg-config "$@" mori; }
pcflags=$(pc --cflags --libs) || fail "pkg-config cannot read the installed mori.pc"
grep -q -- "-I$D/usr/include" <<< "$pcflags" || fail "pkg-config --cflags: $pcflags"
san=${SAN:+-fsanitize=$SAN}
# shellcheck disable=SC2086
${CC:-cc} -std=c99 -Wall -Werror $san -o "$T/hello" "$T/hello.c" $pcflags || fail "cannot build against the installed libmori"
proto=$(sed -n 's/^#define MORI_PROTOCOL_VERSION \([0-9]*\).*/\1/p' "$ROOT/include/mori.h")
[ -n "$proto" ] || fail "no MORI_PROTOCOL_VERSION in include/mori.h"
got=$(LD_LIBRARY_PATH=$D/usr/lib "$T/hello") || fail "program linked to the installed libmori.so failed"
[ "$got" = "$want $proto" ] || fail "program printed '$got', expected '$want $proto'"
ldd_out=$(LD_LIBRARY_PATH=$D/usr/lib ldd "$T/hello")
grep -q "$sov => $D/usr/lib/$sov" <<< "$ldd_out" || fail "not linked to the installed $sov: $ldd_out"
pass "program built with pkg-config links to $sov and runs: $got"

# The static library, with what mori.pc's Requires.private/Libs.private add: -Bstatic makes
# the linker take libmori.a (and the static archives of its dependencies), never libmori.so.
spc=$(pc --static --cflags --libs) || fail "pkg-config --static cannot read the installed mori.pc"
grep -q -- -lprotobuf-c <<< "$spc" || fail "pkg-config --static --libs mori lacks -lprotobuf-c: $spc"
# shellcheck disable=SC2086
${CC:-cc} -std=c99 -Wall -Werror $san -o "$T/hello-static" "$T/hello.c" -Wl,-Bstatic $spc -Wl,-Bdynamic ||
	fail "cannot link against the installed libmori.a with: $spc"
sneeded=$(readelf -d "$T/hello-static" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
grep -q libmori <<< "$sneeded" && fail "the static program needs a libmori.so: $sneeded"
got=$("$T/hello-static") || fail "statically linked program failed"
[ "$got" = "$want $proto" ] || fail "static program printed '$got', expected '$want $proto'"
pass "program built with pkg-config --static links libmori.a ($spc) and runs: $got"
