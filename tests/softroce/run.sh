#!/bin/bash
# Boot Debian's kernel with tests/softroce/mkimage.sh's initramfs in QEMU and run SCRIPT as
# root inside it, chrooted in the host's root filesystem
# (read-only), after tests/softroce/net.sh made rxe0 and rxe1. SHARE (default: a fresh temp
# dir) is mounted read-write at its own path and is the script's working directory; each -x
# PATH (a checkout, a build dir) is mounted read-only at its own path, so that trees the guest's
# own /tmp, /run and /root hide are there too. VAR=VALUE arguments are exported to the script.
# Paths may hold spaces: they travel in the share, not on the kernel command line. Exits with
# the script's status; 124 when TIMEOUT (seconds) passed; 125 when the guest said nothing; 77
# ("skipped: ...") when QEMU, the kernel or the modules are missing.
#   run.sh [-i IMAGE] [-k KERNEL] [-d SHARE] [-x PATH]... [-t TIMEOUT] [-l LOG] SCRIPT [VAR=VALUE...]
# Env: MORI_VM_ACCEL (tcg, default; kvm where /dev/kvm runs stock kernels), MORI_VM_CPUS (2),
#      MORI_VM_MEM (2G).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "skipped: $*"; exit 77; }
image= kernel= share= tmo=600 log=
exports=()
while getopts "i:k:d:x:t:l:h" o; do
	case $o in
	i) image=$OPTARG ;; k) kernel=$OPTARG ;; d) share=$OPTARG ;; t) tmo=$OPTARG ;;
	x) exports+=("$(realpath "$OPTARG")") || exit 2 ;;
	l) log=$OPTARG ;; *) sed -n '2,15p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,15p' "$0"; exit 2; }
script=$(realpath "$1")
shift
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64 (install qemu-system-x86)"
if [ -z "$kernel" ]; then
	kernel=$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n1)
fi
[ -n "$kernel" ] && [ -r "$kernel" ] || skip "no readable kernel image in /boot (install linux-image-amd64)"
kver=${kernel##*/vmlinuz-}
if [ -z "$image" ]; then
	image=${MORI_VM_CACHE:-${B:-build}/softroce}/initramfs-$kver.cpio.gz
	stamp=$(cat "$here/init" "$here/mkimage.sh" | md5sum | cut -c1-12)
	if [ ! -f "$image" ] || [ "$(cat "$image.stamp" 2>/dev/null)" != "$stamp" ]; then
		"$here/mkimage.sh" "$image" "$kver"
		rc=$?
		[ $rc = 0 ] || exit $rc
		echo "$stamp" > "$image.stamp"
	fi
fi
own_share=0
if [ -z "$share" ]; then
	share=$(mktemp -d /tmp/mori-vm.XXXXXX)
	own_share=1
fi
share=$(realpath "$share")
: > "$share/env"
# The scripts travel in the share: the host's /tmp is not the guest's, and this checkout may be
# under it.
cp "$script" "$share/script.sh"
cp "$here/net.sh" "$share/net.sh"
for a in "$@"; do
	printf 'export %q\n' "$a" >> "$share/env"
done
# What the guest's init mounts where (tests/softroce/init reads it from the share): the
# share's own path, then one "TAG PATH" line per read-only export, parents before what lies
# inside them; a path inside another export is reached through that one.
printf '%s\n' "$share" > "$share/vm.mounts"
virtfs=() kept=()
n=0
while IFS= read -r p; do
	[ -n "$p" ] || continue
	for q in "${kept[@]}"; do
		case $p in "$q" | "$q"/*) continue 2 ;; esac
	done
	kept+=("$p")
	printf 'x%d %s\n' "$n" "$p" >> "$share/vm.mounts"
	# QEMU's option syntax: a comma inside a value is written twice
	virtfs+=(-virtfs "local,path=${p//,/,,},mount_tag=x$n,security_model=none,readonly=on,multidevs=remap,id=x$n")
	n=$((n + 1))
done < <(printf '%s\n' "${exports[@]}" | awk '{ print length($0) "\t" $0 }' | sort -n | cut -f2-)
log=${log:-$share/console.log}
accel=${MORI_VM_ACCEL:-tcg}
case $accel in
tcg) acc=(-accel tcg,thread=multi -cpu qemu64) ;; # qemu64: faster under TCG than -cpu max
kvm) acc=(-accel kvm -cpu host) ;;
*) echo "run.sh: MORI_VM_ACCEL is tcg or kvm" >&2; exit 2 ;;
esac
# no_timer_check: on a loaded host the guest's boot-time check of the timer interrupt fails under
# TCG ("IO-APIC + timer doesn't work!", a panic before init: test_rdma_vm "gave no status").
args=(-nodefaults -no-user-config -nographic -serial stdio -monitor none -nic none -no-reboot
	-m "${MORI_VM_MEM:-2G}" -smp "${MORI_VM_CPUS:-2}" "${acc[@]}"
	-kernel "$kernel" -initrd "$image"
	-append "console=ttyS0 quiet loglevel=3 panic=-1 no_timer_check"
	-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap,id=hostroot"
	-virtfs "local,path=${share//,/,,},mount_tag=share,security_model=none,multidevs=remap,id=share"
	"${virtfs[@]}")
t0=$(date +%s)
timeout --foreground -k 5 "$tmo" qemu-system-x86_64 "${args[@]}" < /dev/null 2>&1 |
	sed -u 's/\x1b\[[0-9;?]*[A-Za-z]//g; s/\r//g' | tee "$log"
qrc=${PIPESTATUS[0]}
echo "run.sh: qemu exit $qrc after $(( $(date +%s) - t0 )) s (console log $log)" >&2
[ "$own_share" = 1 ] && [ "${MORI_VM_KEEP:-0}" = 0 ] && trap 'rm -rf "$share"' EXIT
[ "$qrc" = 124 ] && exit 124
rc=$(sed -n 's/^MORI_VM_RC=\([0-9]*\).*/\1/p' "$log" | tail -n1)
[ -n "$rc" ] || exit 125
exit "$rc"
