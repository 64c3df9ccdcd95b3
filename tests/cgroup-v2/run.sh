#!/usr/bin/env bash
# Run sbx on a pure cgroup v2 host: a qemu guest (software emulation, no KVM
# needed) booting Debian's kernel with an initramfs that holds busybox, the
# static sbx, sbx-init, sbx-spawner and test helper (and sbxd), and sees the
# host's /usr read-only over 9p.  The development machines are hybrid (v1 controllers), so this is
# where the v2 code paths are exercised.  Takes ~15 s; the kernel package is
# cached under the build directory.
#   tests/cgroup-v2/run.sh BUILD_DIR
# Prints the guest's PASS/FAIL lines and its "V2 SUMMARY: N passed, M failed".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
work=$build/cgroup-v2
mkdir -p "$work"
cd "$work"

for tool in qemu-system-x86_64 busybox apt-get; do
  command -v "$tool" >/dev/null || { echo "cgroup-v2: $tool missing (scripts/bootstrap.sh installs it)"; exit 2; }
done

# Debian's current kernel image, unpacked (not installed: nothing on the host changes).
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
[[ -n $pkg ]] || { echo "cgroup-v2: cannot resolve linux-image-amd64 (apt-get update?)"; exit 2; }
if [[ ! -d kernel-$pkg ]]; then
  rm -rf kernel-* ./*.deb
  apt-get download "$pkg" >/dev/null 2>&1 || { echo "cgroup-v2: cannot download $pkg"; exit 2; }
  dpkg-deb -x ./"$pkg"_*.deb "kernel-$pkg.tmp" && mv "kernel-$pkg.tmp" "kernel-$pkg"
  rm -f ./*.deb
fi
kdir=$work/kernel-$pkg
vmlinuz=$(ls "$kdir"/boot/vmlinuz-*)
mods=$(ls -d "$kdir"/lib/modules/*)/kernel

rm -rf initrd && mkdir -p initrd/bin initrd/mod initrd/sbx initrd/proc
cp "$(command -v busybox)" initrd/bin/busybox
file -L initrd/bin/busybox | grep -q 'statically linked' || { echo "cgroup-v2: busybox must be static (busybox-static)"; exit 2; }
for m in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_modern_dev \
         drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci fs/netfs/netfs fs/fscache/fscache \
         net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p fs/overlayfs/overlay; do
  cp "$mods/$m.ko" initrd/mod/
done
for b in sbx sbx-init sbx-spawner tests/sbx-test-helper; do
  file -L "$build/$b" | grep -q 'statically linked' || { echo "cgroup-v2: $build/$b is not static (sanitizer build?)"; exit 2; }
  cp "$build/$b" initrd/sbx/
done
# sbxd is dynamic: it runs on the host's libraries, which the guest sees under /usr
cp "$build/sbxd" initrd/sbx/
cp "$here/guest-init" initrd/init
cp "$here/guest-test.sh" initrd/guest-test.sh
chmod +x initrd/init
(cd initrd && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > initrd.cpio.gz

timeout 300 qemu-system-x86_64 -m 1536 -smp 2 -nographic -no-reboot \
  -kernel "$vmlinuz" -initrd initrd.cpio.gz \
  -append "console=ttyS0 quiet panic=-1" \
  -virtfs local,path=/usr,mount_tag=usr,security_model=passthrough,readonly=on \
  </dev/null 2>&1 | tr -d '\r' > guest.log || true
grep -aE '^(PASS|FAIL) |^V2 SUMMARY|^kernel ' guest.log || true
summary=$(grep -a '^V2 SUMMARY' guest.log || true)
[[ -n $summary ]] || { echo "cgroup-v2: the guest did not finish; see $work/guest.log"; exit 1; }
[[ $summary == *" 0 failed" ]]
