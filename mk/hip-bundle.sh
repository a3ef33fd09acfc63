#!/bin/sh
# hip-bundle.sh OUT ARCH=CODEOBJECT[@COMPILER]...: clang's offload bundle of AMD code objects, the
# format hipModuleLoadData picks a device's code object from (what hipcc --genco writes): the
# magic, the entry count, then per entry its offset, size and id (an empty host entry first, then
# hipv4-amdgcn-amd-amdhsa--ARCH), each code object 4 KiB aligned, integers little-endian.
# Each code object is checked first: an AMD GPU ELF for its own ARCH (e_flags' machine), with
# kernels. Prints a line a code object: ARCH, COMPILER, its kernel count and size.
set -eu
out=$1
shift
# e_flags' EF_AMDGPU_MACH of the archs mori builds (LLVM's ELF.h)
mach_of() {
	case $1 in
	gfx90a) echo 3f ;; gfx940) echo 40 ;; gfx941) echo 4b ;; gfx942) echo 4c ;; gfx950) echo 4f ;;
	*) echo "" ;;
	esac
}
u64() { # N: 8 bytes little-endian
	n=$1 i=0
	while [ $i -lt 8 ]; do
		# shellcheck disable=SC2059
		printf "\\$(printf '%03o' $((n & 255)))"
		n=$((n >> 8)) i=$((i + 1))
	done
}
host=host-x86_64-unknown-linux
hdr=$((24 + 8 + 24 + ${#host}))
for e in "$@"; do
	a=${e%%=*} f=${e#*=}
	f=${f%@*}
	hdr=$((hdr + 24 + ${#a} + 24))
done
align() { echo $((($1 + 4095) / 4096 * 4096)); }
tmp=$out.tmp
{
	printf '__CLANG_OFFLOAD_BUNDLE__'
	u64 $(($# + 1))
	off=$(align $hdr)
	u64 "$off"; u64 0; u64 ${#host}; printf '%s' "$host"
	for e in "$@"; do
		a=${e%%=*} f=${e#*=}
		f=${f%@*}
		id="hipv4-amdgcn-amd-amdhsa--$a"
		sz=$(stat -c %s "$f")
		u64 "$off"; u64 "$sz"; u64 ${#id}; printf '%s' "$id"
		off=$(align $((off + sz)))
	done
} > "$tmp"
for e in "$@"; do
	a=${e%%=*} f=${e#*=}
	cc=${f#*@}
	[ "$cc" = "$f" ] && cc=?
	f=${f%@*}
	want=$(mach_of "$a")
	h=$(readelf -h "$f" 2> /dev/null) || { echo "hip-bundle.sh: $f is not an ELF file" >&2; rm -f "$tmp"; exit 1; }
	echo "$h" | grep -q 'Machine:.*AMD GPU' || { echo "hip-bundle.sh: $f is not an AMD GPU code object" >&2; rm -f "$tmp"; exit 1; }
	flags=$(echo "$h" | sed -n 's/.*Flags: *0x\([0-9a-f]*\).*/\1/p')
	if [ -n "$want" ] && [ "$(printf '%02x' $((0x$flags & 0xff)))" != "$want" ]; then
		echo "hip-bundle.sh: $f is for e_flags 0x$flags, not $a (machine 0x$want)" >&2
		rm -f "$tmp"
		exit 1
	fi
	nk=$(readelf -Ws "$f" | awk '/\.kd$/ {print $NF}' | sort -u | wc -l)
	[ "$nk" -gt 0 ] || { echo "hip-bundle.sh: $f has no kernel" >&2; rm -f "$tmp"; exit 1; }
	pad=$(($(align "$(stat -c %s "$tmp")") - $(stat -c %s "$tmp")))
	head -c "$pad" /dev/zero >> "$tmp"
	cat "$f" >> "$tmp"
	echo "$a ($cc): $nk kernels, $(($(stat -c %s "$f") / 1024)) KiB"
done
mv "$tmp" "$out"
