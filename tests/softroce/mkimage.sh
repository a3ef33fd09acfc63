#!/bin/bash
# Build the Soft-RoCE test VM's initramfs: static busybox, tests/softroce/init and the kernel
# modules (with their dependencies, in load order) for Soft-RoCE (rdma_rxe), user verbs, veth
# and 9p over virtio. Userspace comes from the host root at run time (run.sh), so the image
# holds no libraries and need not be rebuilt when the tests change.
#   mkimage.sh OUT.cpio.gz [KVER]     (KVER: the newest /lib/modules entry)
# Exits 77 with "skipped: <reason>" when a piece is missing (no modules, no busybox).
set -euo pipefail
out=$1
kver=${2:-$(ls -1 /lib/modules 2>/dev/null | sort -V | tail -n1)}
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "skipped: $*"; exit 77; }
[ -n "$kver" ] && [ -d "/lib/modules/$kver" ] || skip "no kernel modules in /lib/modules (install linux-image-amd64)"
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 ||
	skip "no static /bin/busybox (install busybox-static)"
command -v cpio >/dev/null || skip "no cpio"
command -v modprobe >/dev/null || skip "no modprobe (install kmod)"
st=$(mktemp -d /tmp/mori-vm-image.XXXXXX)
trap 'rm -rf "$st"' EXIT
mkdir -p "$st"/{bin,proc,sys,dev,host,tmp}
cp /bin/busybox "$st/bin/busybox"
cp "$here/init" "$st/init"
chmod 755 "$st/init"
# crc32: rxe asks the crypto layer for it when a device is added, and there is no modprobe in
# the guest to load it on demand.
: > "$st/modules.order"
for m in crc32_generic rdma_rxe ib_uverbs veth virtio_pci 9pnet_virtio 9p; do
	modprobe -S "$kver" --show-depends "$m" 2>/dev/null | awk '$1 == "insmod" { print $2 }'
done | awk '!seen[$0]++' | while read -r ko; do
	mkdir -p "$st$(dirname "$ko")"
	cp "$ko" "$st$ko"
	echo "$ko" >> "$st/modules.order"
done
grep -q rdma_rxe "$st/modules.order" || skip "kernel $kver has no rdma_rxe module"
mkdir -p "$(dirname "$out")"
(cd "$st" && find . | sort | cpio -o -H newc --quiet) | gzip -1 > "$out.tmp"
mv "$out.tmp" "$out"
echo "mkimage: $out ($(du -h "$out" | cut -f1), kernel $kver, $(wc -l < "$st/modules.order") modules)"
