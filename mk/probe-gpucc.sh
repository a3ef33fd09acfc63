#!/bin/sh
# probe-gpucc.sh nvcc|hipcc|hipclang COMPILER OUT [ROOT] [ARCH...]: what COMPILER can build here.
#   nvcc:     prints "yes", or why it cannot compile a test kernel.
#   hipcc:    prints the ARCHs it can build a kernel for ("gfx90a"), or "none: why".
#   hipclang: the same for clang -x hip with the HIP headers under ROOT (ROOT/include/hip).
# A GPU compiler whose toolkit is incomplete (nvcc without its headers, or reached through a
# link that hides its profile) or that cannot target mori's GPUs (Debian 12's hipcc knows gfx90a
# but neither gfx942 nor gfx950) must not fail the build: mori then builds without those kernels,
# saying why. Cached in OUT/.KIND-probe, keyed on the compiler's path and time and the archs.
kind=$1 cc=$2 out=$3
shift 3
root=
if [ "$kind" = hipclang ]; then root=$1; shift; fi
if [ ! -x "$cc" ]; then
	[ "$kind" = nvcc ] && echo "$cc is not executable" || echo "none: $cc is not executable"
	exit 0
fi
key="$cc $(stat -c %Y "$cc" 2>/dev/null) $root $*"
cache=$out/.$kind-probe
if [ -f "$cache" ] && [ "$(head -n1 "$cache")" = "$key" ]; then
	tail -n +2 "$cache"
	exit 0
fi
mkdir -p "$out"
tmp=$(mktemp -d) || exit 0
if [ "$kind" = nvcc ]; then
	printf '__global__ void probe(int *p) { *p = 1; }\n' > "$tmp/probe.cu"
	if "$cc" --fatbin -gencode arch=compute_80,code=sm_80 -o "$tmp/probe.fatbin" "$tmp/probe.cu" \
		> "$tmp/log" 2>&1; then
		res=yes
	else
		res="cannot compile a test kernel: $(head -n1 "$tmp/log")"
	fi
else
	printf '#include <hip/hip_runtime.h>\nextern "C" __global__ void probe(int *p) { *p = 1; }\n' > "$tmp/probe.cpp"
	ok= bad= why=
	flags=--genco
	[ "$kind" = hipclang ] && flags="-x hip --rocm-path=$root -nogpulib --cuda-device-only -fgpu-rdc -c"
	for a in "$@"; do
		# shellcheck disable=SC2086
		if "$cc" $flags --offload-arch="$a" -o "$tmp/probe.co" "$tmp/probe.cpp" > "$tmp/log" 2>&1; then
			ok="$ok $a"
		else
			bad="$bad $a"
			[ -n "$why" ] || why=$(grep -m1 -i error "$tmp/log" | cut -c1-90)
		fi
	done
	if [ -n "$ok" ]; then res=${ok# }; else res="none: $cc cannot target${bad} (${why})"; fi
fi
rm -rf "$tmp"
printf '%s\n%s\n' "$key" "$res" > "$cache"
echo "$res"
