#!/bin/sh
# Prints "yes" when $1 (nvcc) can build a kernel here, else why not. An nvcc whose toolkit is
# incomplete (headers missing, found through a symlink that hides its profile) must not fail
# the build: mori then builds without kernels, as with no nvcc. Cached in $2/.nvcc-probe,
# keyed on nvcc's path and modification time.
nvcc=$1 out=$2
[ -x "$nvcc" ] || { echo "not executable"; exit 0; }
key="$nvcc $(stat -c %Y "$nvcc" 2>/dev/null)"
cache=$out/.nvcc-probe
if [ -f "$cache" ] && [ "$(head -n1 "$cache")" = "$key" ]; then
    tail -n +2 "$cache"; exit 0
fi
mkdir -p "$out"
tmp=$(mktemp -d) || exit 0
printf '__global__ void probe(int *p) { *p = 1; }\n' > "$tmp/probe.cu"
if "$nvcc" --fatbin -gencode arch=compute_80,code=sm_80 -o "$tmp/probe.fatbin" "$tmp/probe.cu" \
        > "$tmp/log" 2>&1; then
    res=yes
else
    res="cannot compile a test kernel: $(head -n1 "$tmp/log")"
fi
rm -rf "$tmp"
printf '%s\n%s\n' "$key" "$res" > "$cache"
echo "$res"
