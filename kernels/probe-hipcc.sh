#!/bin/sh
# probe-hipcc.sh HIPCC OUT ARCH...: prints the ARCHs $1 can build a kernel for ("gfx942 gfx950"),
# or a line starting "none:" that says why none. Like probe-nvcc.sh: an hipcc that cannot
# target mori's GPUs (Debian 12's ROCm 5.2 clang knows neither gfx942 nor gfx950) must not
# fail the build. Cached in $2/.hipcc-probe, keyed on hipcc's path and time and the archs.
hipcc=$1 out=$2
shift 2
[ -x "$hipcc" ] || { echo "none: $hipcc is not executable"; exit 0; }
key="$hipcc $(stat -c %Y "$hipcc" 2>/dev/null) $*"
cache=$out/.hipcc-probe
if [ -f "$cache" ] && [ "$(head -n1 "$cache")" = "$key" ]; then
	tail -n +2 "$cache"; exit 0
fi
mkdir -p "$out"
tmp=$(mktemp -d) || exit 0
printf '#include <hip/hip_runtime.h>\nextern "C" __global__ void probe(int *p) { *p = 1; }\n' > "$tmp/probe.cpp"
ok= bad= why=
for a in "$@"; do
	if "$hipcc" --genco --offload-arch="$a" -o "$tmp/probe.co" "$tmp/probe.cpp" > "$tmp/log" 2>&1; then
		ok="$ok $a"
	else
		bad="$bad $a"
		[ -n "$why" ] || why=$(grep -m1 -i error "$tmp/log" | cut -c1-90)
	fi
done
rm -rf "$tmp"
if [ -n "$ok" ]; then res=${ok# }; else res="none: $hipcc cannot target${bad} (${why})"; fi
printf '%s\n%s\n' "$key" "$res" > "$cache"
echo "$res"
