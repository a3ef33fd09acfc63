#!/bin/sh
# hip-devlibs.sh CLANG SRC DIR ARCH...: ROCm's device libraries (the bitcode directory SRC) as
# clang's --rocm-device-lib-path DIR for ARCHs: a link to each file of SRC, and, for an ARCH whose
# ISA-version library SRC lacks (Debian 12's ROCm 5.2 libraries stop at gfx940), that library made
# here. It holds one constant, __oclc_ISA_version (gfx942: 9402), as ROCm-Device-Libs'
# oclc/src/isa_version_*.cl define it; the rest of the libraries are the arch-independent bitcode
# SRC has. Prints what it made.
set -eu
clang=$1 src=$2 dir=$3
shift 3
mkdir -p "$dir"
for f in "$src"/*.bc; do ln -sf "$f" "$dir/"; done
made=
for a in "$@"; do
	v=${a#gfx}
	n=${#v}
	[ "$n" -ge 3 ] || { echo "hip-devlibs.sh: $a is not a gfx target" >&2; exit 1; }
	stepping=$(printf '%d' "0x$(echo "$v" | cut -c"$n")")
	minor=$(printf '%d' "0x$(echo "$v" | cut -c"$((n - 1))")")
	major=$(echo "$v" | cut -c1-"$((n - 2))")
	lib="oclc_isa_version_$v.bc"
	[ -e "$src/$lib" ] && continue
	printf '%s\n' 'target triple = "amdgcn-amd-amdhsa"' \
		"@__oclc_ISA_version = linkonce_odr protected local_unnamed_addr addrspace(4) constant i32 $((major * 1000 + minor * 100 + stepping)), align 4" \
		> "$dir/$lib.ll"
	rm -f "$dir/$lib"
	"$clang" -target amdgcn-amd-amdhsa -nogpulib -c -emit-llvm -o "$dir/$lib" "$dir/$lib.ll"
	rm -f "$dir/$lib.ll"
	made="$made $lib"
done
echo "${made# }"
