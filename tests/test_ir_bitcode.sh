#!/usr/bin/env bash
# MORI-IR's build outputs (mk/ir.mk), no GPU needed:
#  - the function table (libmori_shmem_device.json) has every row of MORI_SHMEM_API, counted here
#    independently (the preprocessor's expansion of the table, one mark a row);
#  - every function of the table is defined in libmori_shmem_device.bc (llvm-dis-16) with the
#    declared return and argument types, exported (llvm-nm-16: T), and nothing else is exported
#    but the state global mori_shmem_state_ptr (an externally initialised pointer in global
#    memory, what mori_shmem_module_init fills);
#  - the file is generic: the same source built for sm_90 gives the same IR but for the target
#    attributes, and it sets no nvvm-reflect-ftz module flag (a consumer's own value conflicts); llc-16 turns it into PTX for sm_80 and sm_90 and ptxas (where nvcc's toolkit
#    is) assembles it;
#  - names and signatures match ROCm/mori's MORI_DEVICE_FUNCTIONS (tests/ir_rocm_mori_functions.txt,
#    or $ROCM_MORI's python/mori/ir/ops.py) for every function both have; mori's extra functions
#    are listed;
#  - mori_shmem_device.h compiles (clang-16 -x cuda -nocudainc) and declares every function;
#  - AMD: every libmori_shmem_device_<gfx>.bc built (mk/ir.mk: gfx90a by hipcc, gfx942 by clang-19)
#    is amdgcn bitcode for its arch with every function of the table defined as declared (llvm-19's
#    tools: LLVM 16's cannot read clang-19's bitcode), and llc-19 turns it into a code object;
#    skipped, saying why, where no AMD compiler is;
#  - with nvcc: a CUDA program built with -rdc against libmori_shmem_device.a links
#    (tests/ir_rdc_ring.cu, the ring that tests/device-ir.sh runs on the GPU machine).
# Skips the bitcode checks, saying why, without clang-16/llvm-16 (tools/install-deps installs them).
source "$(dirname "$0")/testlib.bash"
IR=$B/kernels/ir
J=$IR/libmori_shmem_device.json
BC=$IR/libmori_shmem_device.bc
PY=$(command -v python3) || skip "python3 not installed"
[ -f "$J" ] || fail "$J not built (make all B=$B_ARG)"

# Rows of MORI_SHMEM_API and of MORI-CCL's MORI_COLL_API (mori/device/coll.cuh), counted from the
# preprocessor's expansion with a mark per row.
count_rows() { # TABLE HEADER
	printf '%s\n' '#define MORI_SHMEM_NO_CXX_API' "#include \"$2\"" \
		'#define ROW(r, n, c, a, b) MORI_IR_ROW_MARK' "$1(ROW)" |
		${CC:-cc} -E -P -x c++ -Ikernels -Iinclude - | grep -o MORI_IR_ROW_MARK | wc -l
}
rows=$(count_rows MORI_SHMEM_API mori/device/shmem.cuh)
crows=$(count_rows MORI_COLL_API mori/device/coll.cuh)
krows=$(count_rows MORI_CCO_API mori/device/cco.cuh)
nt=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["functions"]))' "$J")
count_pre() { # PREFIX: functions named mori_PREFIX_x with short name PREFIX_x
	"$PY" -c 'import json,sys; p=sys.argv[2]; print(sum(f["name"].startswith("mori_%s_" % p) and f["short"] == f["name"][5:]
	     for f in json.load(open(sys.argv[1]))["functions"]))' "$J" "$1"
}
nc=$(count_pre coll)
nk=$(count_pre cco)
[ "$rows" -gt 100 ] && [ "$crows" -ge 4 ] && [ "$krows" -ge 30 ] && [ "$((rows + crows + krows))" = "$nt" ] &&
	[ "$crows" = "$nc" ] && [ "$krows" = "$nk" ] ||
	fail "MORI_SHMEM_API has $rows rows, MORI_COLL_API $crows and MORI_CCO_API $krows, the table $nt functions ($nc mori_coll_*, $nk mori_cco_*)"
pass "table: $nt functions, every row of MORI_SHMEM_API ($rows), MORI_COLL_API ($crows, as mori_coll_*) and MORI_CCO_API ($krows, as mori_cco_*)"

# ROCm/mori's table: the reference list, or a checkout's ops.py when ROCM_MORI names one.
REF=$T/rocm.txt
if [ -n "${ROCM_MORI:-}" ]; then
	"$PY" - "$ROCM_MORI/python/mori/ir/ops.py" > "$REF" <<-'EOF' || fail "cannot read ROCm/mori's table at $ROCM_MORI"
	import runpy, sys
	for m in sorted(runpy.run_path(sys.argv[1])["MORI_DEVICE_FUNCTIONS"].values(), key=lambda m: m["symbol"]):
	    print(m["symbol"], m["ret"], ",".join(m["args"]) or "-")
	EOF
	src="$ROCM_MORI"
else
	grep -v '^#' tests/ir_rocm_mori_functions.txt > "$REF"
	src="tests/ir_rocm_mori_functions.txt ($(sed -n 's/.*commit \([0-9a-f]\{7\}\).*/ROCm\/mori \1/p' tests/ir_rocm_mori_functions.txt))"
fi
out=$("$PY" - "$J" "$REF" <<-'EOF'
	import json, sys
	mine = {f["name"]: (f["ret"], ",".join(f["args"]) or "-") for f in json.load(open(sys.argv[1]))["functions"]}
	ref = {}
	for line in open(sys.argv[2]):
	    s, r, a = line.split()
	    ref[s] = (r, a)
	bad = ["%s: mori %s(%s), ROCm/mori %s(%s)" % (s, mine[s][0], mine[s][1], r[0], r[1])
	       for s, r in sorted(ref.items()) if s in mine and mine[s] != r]
	missing = sorted(set(ref) - set(mine))
	extra = sorted(set(mine) - set(ref))
	print("both %d, differ %d, only ROCm/mori %d, only mori %d" % (len(set(ref) & set(mine)), len(bad), len(missing), len(extra)))
	for b in bad: print("DIFF " + b)
	for m in missing: print("MISSING " + m)
	print("EXTRA " + " ".join(e[len("mori_shmem_"):] if e.startswith("mori_shmem_") else e for e in extra))
	sys.exit(1 if bad or missing else 0)
	EOF
) || fail "against ROCm/mori's MORI_DEVICE_FUNCTIONS ($src): $out"
pass "names and signatures as ROCm/mori's MORI_DEVICE_FUNCTIONS ($src): $(echo "$out" | head -1)"
echo "# mori's own: $(echo "$out" | sed -n 's/^EXTRA //p')"

command -v clang-16 > /dev/null && command -v llvm-dis-16 > /dev/null && command -v llvm-nm-16 > /dev/null ||
	skip "the table checks passed; bitcode not checked: clang-16/llvm-16 not installed (tools/install-deps installs them)"
[ -f "$BC" ] || fail "$BC not built although clang-16 is here (make all B=$B_ARG)"

# Every function defined with the declared types; nothing else exported.
# check_bitcode FILE TAG: every function of the table defined in FILE with the declared types and
# exported, nothing else exported but the state global (an externally initialised pointer in
# global memory); prints what it found, fails with the differences.
# LLVM_V: the version of llvm-dis and llvm-nm (16; 19 for AMD bitcode).
check_bitcode() {
	local v=${LLVM_V:-16}
	llvm-dis-$v "$1" -o "$T/$2.ll" || { echo "llvm-dis-$v cannot read $1"; return 1; }
	llvm-nm-$v "$1" > "$T/$2.nm" || { echo "llvm-nm-$v $1"; return 1; }
	"$PY" - "$J" "$T/$2.ll" "$T/$2.nm" <<-'EOF'
	import json, re, sys
	LL = {"int32": "i32", "uint32": "i32", "int64": "i64", "uint64": "i64", "float32": "float", "float64": "double"}
	t = json.load(open(sys.argv[1]))
	defs = {}
	for line in open(sys.argv[2]):
	    m = re.match(r"define (.*?)@([\w.]+)\((.*)\)", line)
	    if m:
	        pre, name, params = m.groups()
	        words = [w for w in pre.split() if not w.startswith("#")]
	        params = [p.split()[0] for p in params.split(",") if p.strip()]
	        defs[name] = (words, params)
	errs = []
	for f in t["functions"]:
	    n = f["name"]
	    if n not in defs:
	        errs.append("%s: not defined" % n); continue
	    words, params = defs[n]
	    if any(w in ("internal", "private", "linkonce", "linkonce_odr", "weak", "hidden") for w in words):
	        errs.append("%s: not exported (%s)" % (n, " ".join(words)))
	    want = (LL[f["ret"]], [LL[a] for a in f["args"]])
	    if (words[-1], params) != want:
	        errs.append("%s: bitcode %s(%s), table %s(%s)" % (n, words[-1], ",".join(params), want[0], ",".join(want[1])))
	# clang's compilation-unit id of a -fgpu-rdc HIP build (__hip_cuid_*) is not the API
	exported = sorted(l.split()[-1] for l in open(sys.argv[3])
	                  if l.split()[-2:-1] in (["T"], ["D"]) and not l.split()[-1].startswith("__hip_cuid_"))
	want = sorted([f["name"] for f in t["functions"]] + [t["state_global"]])
	if exported != want:
	    errs.append("exported symbols differ: extra %s, missing %s" % (sorted(set(exported) - set(want)),
	                                                                  sorted(set(want) - set(exported))))
	g = [l for l in open(sys.argv[2]) if l.startswith("@%s " % t["state_global"])]
	if not g or "addrspace(1)" not in g[0] or "externally_initialized" not in g[0] or " ptr " not in g[0]:
	    errs.append("state global: %s" % (g[0].strip() if g else "absent"))
	print("\n".join(errs) if errs else "%d functions defined as declared; exports: those and %s" % (len(t["functions"]), t["state_global"]))
	sys.exit(1 if errs else 0)
	EOF
}
out=$(check_bitcode "$BC" lib) || fail "bitcode against the table: $out"
pass "bitcode: $out"

# Generic: the sm_90 build is the same IR but for the target attributes (the reason one file serves both).
IRF="-x cuda --cuda-device-only -nocudainc -nocudalib -Wno-unknown-cuda-version -O2 -std=c++17 -DMORI_SHMEM_NO_KERNELS -Ikernels -Iinclude"
for a in 80 90; do
	# shellcheck disable=SC2086
	clang-16 $IRF --cuda-gpu-arch=sm_$a -S -emit-llvm -o "$T/sm$a.ll" kernels/shmem.cu || fail "clang-16 for sm_$a"
	sh mk/ir-generic.sh "$T/sm$a.ll" "$T/sm$a.g.ll" || fail "mk/ir-generic.sh on the sm_$a build"
	sed -e '/^; ModuleID/d' -e '/^source_filename/d' "$T/sm$a.g.ll" > "$T/sm$a.generic.ll"
done
cmp -s "$T/sm80.generic.ll" "$T/sm90.generic.ll" ||
	fail "sm_80 and sm_90 builds differ beyond the target attributes: $(diff "$T/sm80.generic.ll" "$T/sm90.generic.ll" | head -5)"
grep -q '"target-cpu"\|"target-features"' "$T/lib.ll" && fail "the shipped bitcode still carries target attributes"
grep -q 'nvvm-reflect-ftz' "$T/lib.ll" && fail "the shipped bitcode still sets nvvm-reflect-ftz (Triton refuses to link it)"
pass "generic: sm_80 and sm_90 builds equal but for target attributes; the shipped file has none, nor nvvm-reflect-ftz"

PTXAS=$(command -v ptxas 2> /dev/null)
[ -n "$PTXAS" ] || PTXAS=$(ls /usr/local/cuda/bin/ptxas 2> /dev/null)
for a in 80 90; do
	llc-16 -march=nvptx64 -mcpu=sm_$a -mattr=+ptx78 "$BC" -o "$T/sm$a.ptx" || fail "llc-16 for sm_$a"
	if [ -n "$PTXAS" ]; then
		"$PTXAS" -arch=sm_$a -c "$T/sm$a.ptx" -o "$T/sm$a.o" || fail "ptxas rejects the sm_$a PTX"
	fi
done
if [ -n "$PTXAS" ]; then pass "codegen: llc-16 -> PTX for sm_80 and sm_90, assembled by $PTXAS"
else pass "codegen: llc-16 -> PTX for sm_80 and sm_90 (ptxas not here: not assembled)"; fi

# consumer K WHAT < BODY: a consumer's module $T/K.ll, BODY (declarations and kernel @K) with the
# target triple and, as Triton sets them, its own nvvm-reflect-ftz (1, Override) and the kernel
# annotation; treated as Triton's link_extern_libs does: linked with only what it needs of the
# bitcode, internalized but for the kernel and the state global, optimized, codegen for sm_90 into
# $T/K.ptx, assembled where ptxas is: every call must inline. WHAT names the module in failures.
consumer() {
	local k=$1 what=$2
	{
		echo 'target triple = "nvptx64-nvidia-cuda"'
		cat
		printf '%s\n' '!llvm.module.flags = !{!0}' '!0 = !{i32 4, !"nvvm-reflect-ftz", i32 1}' '!nvvm.annotations = !{!1}' \
			"!1 = !{ptr @$k, !\"kernel\", i32 1}"
	} > "$T/$k.ll"
	llvm-link-16 --only-needed "$T/$k.ll" "$BC" -o "$T/$k.bc" 2> "$T/link_$k.log" ||
		fail "$what does not link: $(cat "$T/link_$k.log")"
	opt-16 --internalize-public-api-list="$k",mori_shmem_state_ptr -passes='internalize,default<O3>' "$T/$k.bc" \
		-o "$T/${k}o.bc" || fail "opt-16 on $what"
	llc-16 -march=nvptx64 -mcpu=sm_90 -mattr=+ptx78 "$T/${k}o.bc" -o "$T/$k.ptx" || fail "llc-16 on $what"
	grep -q '^\.func\|call\.uni' "$T/$k.ptx" && fail "$what still calls functions (not inlined)"
	[ -z "$PTXAS" ] || "$PTXAS" -arch=sm_90 -c "$T/$k.ptx" -o "$T/$k.o" || fail "ptxas rejects $what"
}

# A kernel calling four functions: everything inlines, the state global stays a visible .global
# that cuModuleGetGlobal finds.
consumer k "the consumer module" <<-'EOF'
	declare i32 @mori_shmem_putmem_nbi_signal_block(i64, i64, i64, i64, i64, i32, i32, i32)
	declare i64 @mori_shmem_signal_wait_until(i64, i32, i64)
	declare i32 @mori_shmem_my_pe()
	declare i64 @mori_shmem_ptr_p2p(i64, i32, i32)
	define void @k(ptr addrspace(1) %out, i64 %d, i64 %s, i64 %sig) {
	  %pe = call i32 @mori_shmem_my_pe()
	  %r = call i32 @mori_shmem_putmem_nbi_signal_block(i64 %d, i64 %s, i64 4096, i64 %sig, i64 1, i32 9, i32 %pe, i32 0)
	  %v = call i64 @mori_shmem_signal_wait_until(i64 %sig, i32 0, i64 1)
	  %p = call i64 @mori_shmem_ptr_p2p(i64 %d, i32 %pe, i32 0)
	  %x = add i64 %v, %p
	  %y = sext i32 %r to i64
	  %z = add i64 %x, %y
	  store i64 %z, ptr addrspace(1) %out
	  ret void
	}
	EOF
grep -q '^\.visible \.global .*mori_shmem_state_ptr;' "$T/k.ptx" || fail "the linked kernel lost the visible state global"
pass "a consumer module (nvvm-reflect-ftz 1, as Triton's) links, inlines every call, keeps mori_shmem_state_ptr visible"

# MORI-CCO's rows the same way: the device communicator's address and windows as (offset, bytes).
consumer kc "the CCO consumer module" <<-'EOF'
	declare i32 @mori_cco_gda_put_signal_add_block(i64, i32, i64, i64, i64, i64, i64, i64, i64, i32, i64)
	declare i32 @mori_cco_lsa_barrier_block(i64, i32)
	declare i32 @mori_cco_ce_put_thread(i64, i32, i64, i64, i64, i64, i64, i64, i64, i32)
	declare i64 @mori_cco_lsa_peer_ptr(i64, i64, i64, i32, i64)
	define void @kc(ptr addrspace(1) %out, i64 %d, i64 %wo, i64 %wb) {
	  %a = call i32 @mori_cco_gda_put_signal_add_block(i64 %d, i32 1, i64 %wo, i64 %wb, i64 0, i64 %wo, i64 %wb, i64 64, i64 64, i32 0, i64 1)
	  %b = call i32 @mori_cco_lsa_barrier_block(i64 %d, i32 0)
	  %c = call i32 @mori_cco_ce_put_thread(i64 %d, i32 0, i64 %wo, i64 %wb, i64 0, i64 %wo, i64 %wb, i64 64, i64 64, i32 0)
	  %p = call i64 @mori_cco_lsa_peer_ptr(i64 %d, i64 %wo, i64 %wb, i32 0, i64 0)
	  %x = add i32 %a, %b
	  %y = add i32 %x, %c
	  %z = sext i32 %y to i64
	  %s = add i64 %z, %p
	  store i64 %s, ptr addrspace(1) %out
	  ret void
	}
	EOF
pass "a CCO consumer module (put+signal, LSA barrier, copy-engine put, peer pointer) links, inlines, assembles"

# AMD: the bitcode mk/ir.mk built for each arch, by the compiler of that arch's kernels. Where
# clang-19 and HIP's headers are, gfx942 must be among them (else the build skipped it silently).
amd=$(ls "$IR"/libmori_shmem_device_gfx*.bc 2> /dev/null)
HIPCC_HERE=$(command -v hipcc || ls /opt/rocm/bin/hipcc 2> /dev/null)
if [ -n "$HIPCC_HERE" ] || { command -v clang-19 > /dev/null && [ -f /usr/include/hip/hip_runtime.h ]; }; then
	if command -v clang-19 > /dev/null && [ -f /usr/include/hip/hip_runtime.h ] && [ -d /usr/lib/x86_64-linux-gnu/amdgcn/bitcode ]; then
		[ -f "$IR/libmori_shmem_device_gfx942.bc" ] || fail "clang-19 and HIP's headers are here but $IR/libmori_shmem_device_gfx942.bc was not built"
	fi
	[ -n "$amd" ] || fail "an AMD compiler is here (${HIPCC_HERE:-clang-19}) but no $IR/libmori_shmem_device_gfx*.bc was built"
	if ! command -v llvm-dis-19 > /dev/null || ! command -v llvm-nm-19 > /dev/null || ! command -v llc-19 > /dev/null; then
		echo "# AMD bitcode ($(basename -a $amd | tr '\n' ' ')) not checked: llvm-19 not installed (tools/install-deps installs it)"
	else
		archs=
		for f in $amd; do
			a=${f##*_}
			a=${a%.bc}
			out=$(LLVM_V=19 check_bitcode "$f" "amd_$a") || fail "AMD $a bitcode against the table: $out"
			grep -q '^target triple = "amdgcn-amd-amdhsa"' "$T/amd_$a.ll" || fail "$f is not amdgcn-amd-amdhsa bitcode"
			grep -q "\"target-cpu\"=\"$a\"" "$T/amd_$a.ll" || fail "$f's functions are not for target-cpu $a"
			llc-19 -march=amdgcn -mcpu="$a" -filetype=obj -o "$T/amd_$a.o" "$f" 2> "$T/llc.log" ||
				fail "llc-19 cannot codegen $f for $a: $(head -5 "$T/llc.log")"
			archs="$archs $a"
		done
		pass "AMD bitcode for$archs: amdgcn-amd-amdhsa, $out; llc-19 codegens each for its arch"
	fi
else
	echo "# AMD: no AMD bitcode checked: neither hipcc nor clang-19 with HIP's headers is here (tools/install-deps installs them)"
fi

# The header: compiles, declares every function.
H=$IR/mori_shmem_device.h
printf '#include "mori/device/gpu.h"\n#include "%s"\n' "$H" > "$T/h.cu"
# shellcheck disable=SC2086
clang-16 $IRF --cuda-gpu-arch=sm_80 -fsyntax-only -I"$IR" "$T/h.cu" || fail "$H does not compile"
nd=$(grep -c '^__device__ .* mori_\(shmem\|coll\|cco\)_[a-z0-9_]*(' "$H")
[ "$nd" = "$nt" ] || fail "$H declares $nd functions, the table has $nt"
pass "header: $nd declarations, compiles"

# The static device library: a CUDA program links against it with nvcc -rdc.
NVCC=${NVCC:-$(command -v nvcc 2> /dev/null)}
[ -n "$NVCC" ] || NVCC=$(ls /usr/local/cuda/bin/nvcc 2> /dev/null)
if [ -n "$NVCC" ] && [ -f "$IR/libmori_shmem_device.a" ]; then
	mkdir -p "$B/tests"
	"$NVCC" -O2 -std=c++17 -rdc=true -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
		-Iinclude -Itests -I"$IR" tests/ir_rdc_ring.cu tests/ir_rdc_ring_main.c -L"$IR" -lmori_shmem_device \
		-L"$B" -lmori -o "$B/tests/ir_rdc_ring" \
		> "$T/nvcc.log" 2>&1 || fail "nvcc -rdc against libmori_shmem_device.a: $(tail -20 "$T/nvcc.log")"
	pass "static device library: tests/ir_rdc_ring.cu + ir_rdc_ring_main.c link with nvcc -rdc (sm_80, sm_90) -> $B/tests/ir_rdc_ring"
else
	if [ -n "$NVCC" ]; then echo "# static device library not linked here: no $IR/libmori_shmem_device.a"
	else echo "# static device library not linked here: no nvcc"; fi
fi
