# tests/devicelib.bash: what the tests/device-*.sh scripts share, sourced by each of them.
#
# The remote-GPU workflow. Build where the toolchain is (nvcc compiles the kernels into libmori);
# bundle the binaries with the shared libraries a bare GPU machine lacks
# (`tests/device-NAME.sh bundle [--bundle DIR]`); copy the repository and the bundle to the GPU
# machine; run from the repository root there (`tests/device-NAME.sh run [--bundle DIR] [PART...]`).
# Everything a script prints goes to $OUT/log (default /tmp/device-NAME/log), the lines worth
# keeping to $OUT/summary, which ends the output. Every step has its own timeout, so a hung step
# costs its timeout, not the whole run; MPS and the morids a script started are stopped on exit
# (morids first: `quit` waits for MPS's clients to go). Data the repository does not carry (the
# request trace) is read from $MORI_SHARED (default: ../shared beside the repository).
#
#   dev_args DEFAULT ARG...   the command line: DEV_CMD (its first ARG: bundle or run), BUNDLE
#                             (--bundle DIR after it, else DEFAULT), DEV_ARGS (the rest)
#   dev_bundle DIR BIN...     here: bundle BINs into DIR (replacing it): DIR/bin, and DIR/lib with
#                             the libraries they load, debug info stripped
#   dev_bundle_trace DIR      here: the request trace into DIR/data, when $MORI_SHARED has it
#   dev_init NAME BUNDLE      there: LD_LIBRARY_PATH, $BIN, $O (=$OUT or /tmp/device-NAME), the log,
#                             $SUM, NVLink multicast off, the exit trap
#   note TEXT                 print TEXT and keep it in the summary
#   dev_run SECS KEEP CMD...  CMD under a timeout of SECS; its output printed, its lines matching
#                             KEEP (or a failure's marks) kept, then "rc=N (T s)"
#   mps_start [PCT]           an MPS control daemon of this script's own (pipe and log dirs under
#                             /tmp/mori-NAME-mps-*); says whether it runs. PCT: exported as
#                             CUDA_MPS_ACTIVE_THREAD_PERCENTAGE when given
#   mps_stop                  stop it (after the morids this script started)
#   morid_start DIR [ARG...]  a morid on runtime dir DIR (emptied), waiting for its session socket
#   morids_stop               stop every morid this script started
#   nvshmem_build SRC OUT     there: SRC (tools/bench_nvshmem.cu, bundled) built into OUT against
#                             the nvidia-nvshmem wheel of its python3; NVB=OUT on success (else
#                             empty), its libraries on LD_LIBRARY_PATH and NVSHMEM's options set
#                             for PEs that are processes on one GPU
#   dev_summary               print the summary
[ -n "${DEVLIB_NAME:-}" ] && return 0

MORI_SHARED=${MORI_SHARED:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/../shared}
DEV_TRACE=mooncake_conversation_trace.jsonl

dev_args() {
	BUNDLE=$1
	DEV_CMD=${2:-}
	shift $(($# < 2 ? $# : 2))
	if [ "${1:-}" = --bundle ]; then
		BUNDLE=${2:?--bundle needs a directory}
		shift 2
	fi
	DEV_ARGS=("$@")
}

# What every GPU machine has: the C and C++ runtimes and the NVIDIA driver's libraries.
DEV_SYSLIBS='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libstdc\+\+|libgcc_s|libcuda\.so|libnvidia|libresolv)'
dev_bundle() {
	local dir=$1 b name path
	shift
	rm -rf "$dir"
	mkdir -p "$dir/bin" "$dir/lib"
	for b in "$@"; do
		case $b in *.so*) cp -L "$b" "$dir/lib/" ;; *) cp -L "$b" "$dir/bin/" ;; esac
		ldd "$b" | awk '/=> \//{print $1" "$3}' | while read -r name path; do
			[[ $name =~ $DEV_SYSLIBS ]] || cp -Lu "$path" "$dir/lib/"
		done
	done
	# debug info is a fifth of the bytes to copy; symbols stay for backtraces
	strip --strip-debug "$dir"/bin/* "$dir"/lib/libmori* 2> /dev/null || true
	echo "bundled into $dir: $(ls "$dir/bin" | wc -l) binaries, $(ls "$dir/lib" | wc -l) libraries"
}

dev_bundle_trace() {
	mkdir -p "$1/data"
	if [ -f "$MORI_SHARED/data/$DEV_TRACE" ]; then
		cp "$MORI_SHARED/data/$DEV_TRACE" "$1/data/"
	else
		echo "no $MORI_SHARED/data/$DEV_TRACE: the replay will use its synthetic workload"
	fi
}

DEV_PIDS=()
DEV_MPS=
dev_init() {
	DEVLIB_NAME=$1
	local bundle=$2
	case $bundle in /*) ;; *) bundle=$PWD/$bundle ;; esac
	DEV_BUNDLE=$bundle
	export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	BIN=$bundle/bin
	O=${OUT:-/tmp/device-$DEVLIB_NAME}
	mkdir -p "$O"
	exec > >(tee "$O/log") 2>&1
	SUM=$O/summary
	: > "$SUM"
	export NVSHMEM_DISABLE_NVLS=1 NCCL_NVLS_ENABLE=0 # never NVLink multicast
	trap dev_cleanup EXIT
	date -u
	if command -v nvidia-smi > /dev/null; then
		nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$SUM"
	else
		note "no nvidia-smi: no NVIDIA GPU here (the GPU tests skip)"
	fi
}

note() { echo "$*" | tee -a "$SUM"; }

dev_run() {
	local secs=$1 keep=$2 t0 rc step=$O/.step
	shift 2
	t0=$(date +%s)
	timeout -k 5 "$secs" "$@" > "$step" 2>&1
	rc=$?
	cat "$step"
	grep -E "$keep|FAIL|:F:|:E:|^not ok|MORI_E[A-Z]+|[Ee]rror" "$step" | head -60 >> "$SUM"
	[ $rc = 124 ] || [ $rc = 137 ] && echo "timed out after $secs s: $*" >> "$SUM"
	echo "rc=$rc ($(($(date +%s) - t0)) s)" | tee -a "$SUM"
	return $rc
}

mps_start() {
	command -v nvidia-cuda-mps-control > /dev/null || { note "MPS: no nvidia-cuda-mps-control (kernels of different processes time-slice)"; return 1; }
	export CUDA_MPS_PIPE_DIRECTORY=/tmp/mori-$DEVLIB_NAME-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mori-$DEVLIB_NAME-mps-log
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	[ -n "${1:-}" ] && export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$1
	if nvidia-cuda-mps-control -d; then
		DEV_MPS=1
		note "MPS: control daemon started${1:+ ($1% of the SMs a process)}"
	else
		note "MPS: could not start the control daemon"
		return 1
	fi
}

mps_stop() {
	[ -n "$DEV_MPS" ] && echo quit | timeout 20 nvidia-cuda-mps-control
	DEV_MPS=
}

morid_start() {
	local dir=$1
	shift
	rm -rf "$dir" && mkdir -p "$dir"
	"$BIN/morid" --foreground --runtime-dir "$dir" --log-level warn "$@" 2>> "$O/morid.log" &
	DEV_PIDS+=($!)
	for _ in $(seq 200); do [ -S "$dir/morid.session" ] && { sleep 0.05; return 0; }; sleep 0.05; done
	note "morid on $dir did not start: $(tail -n 5 "$O/morid.log" | paste -sd ';' -)"
	return 1
}

morids_stop() {
	local p
	for p in "${DEV_PIDS[@]}"; do kill "$p" 2> /dev/null && wait "$p" 2> /dev/null; done
	DEV_PIDS=()
}

nvshmem_build() {
	local src=$1 out=$2 nv
	NVB=
	nv=$(python3 -c 'import nvidia.nvshmem as m; print(list(m.__path__)[0])' 2> /dev/null)
	note "NVSHMEM wheel: ${nv:-not found}"
	[ -n "$nv" ] && [ -f "$src" ] || return 1
	(cd "$nv" && find . -maxdepth 3 | sort | head -80) > "$O/nvshmem-files.txt"
	grep -E "include/nvshmem.h|lib/" "$O/nvshmem-files.txt" | head -20 | tee -a "$SUM"
	dev_run 120 "error|warning: .*nvshmem" /usr/local/cuda/bin/nvcc -rdc=true -O3 -std=c++17 \
		-gencode arch=compute_90,code=sm_90 -I"$nv/include" "$src" \
		-L"$nv/lib" -l:libnvshmem_host.so.3 -lnvshmem_device -lcuda -o "$out" && [ -x "$out" ] && NVB=$out
	export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nv/lib
	export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_SYMMETRIC_SIZE=1G
	[ -n "$NVB" ]
}

dev_cleanup() {
	morids_stop
	mps_stop
}

dev_summary() {
	echo
	echo "================ summary ================"
	cat "$SUM"
}
