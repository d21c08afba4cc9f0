#!/usr/bin/env bash
# rxe-run.sh CMD [ARG...]: run one command inside a throw-away qemu guest
# that has a soft-RoCE device, and exit with the command's status.
#
# This machine's kernel has no RDMA; Debian's kernel package has rdma_rxe.
# The guest boots that kernel (downloaded with `apt-get download` into a
# cache, unpacked, never installed), sees the host's root filesystem
# read-only through virtio-9p with a RAM overlay on top, and the project
# directory read-write at the same path, so it runs the binaries built on
# the host.  Inside, dummy0 gets 169.254.77.1/24 and rxe0 is bound to it;
# the guest has no network card, nothing leaves it.  The command sees
# SHARP_RXE_IP=169.254.77.1 and SHARP_RXE_DEV=rxe0.
#
# Exit: the command's status; 77 when no guest can be had here (no qemu,
# no kernel package, no busybox), with the reason on stderr; 124 timeout.
# Settings: SHARP_RXE_CACHE (/var/tmp/sharp-rxe), SHARP_RXE_TIMEOUT (900 s),
# SHARP_RXE_VERBOSE=1 (the guest's console on stderr).
set -uo pipefail

CACHE=${SHARP_RXE_CACHE:-/var/tmp/sharp-rxe}
TIMEOUT=${SHARP_RXE_TIMEOUT:-900}
RW=${SHARP_RXE_RW:-$(cd "$(dirname "$0")/../../.." && pwd -P)}
IP=169.254.77.1

skip() {
    echo "rxe-run: skipped: $*" >&2
    exit 77
}
[ $# -ge 1 ] || { echo "usage: rxe-run.sh CMD [ARG...]" >&2; exit 2; }

for t in qemu-system-x86_64 busybox modprobe depmod ip rdma apt-get dpkg-deb; do
    command -v "$t" >/dev/null || skip "$t is not installed (make deps)"
done
busybox --list 2>/dev/null | grep -x insmod >/dev/null || skip "busybox has no insmod"
mkdir -p "$CACHE" || skip "cannot create $CACHE"
exec 9>"$CACHE/.lock"
flock 9

# The kernel: what linux-image-amd64 depends on, unpacked into the cache.
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
[ -n "$pkg" ] || skip "apt knows no linux-image-amd64 (apt-get update?)"
KROOT=$CACHE/$pkg
if [ ! -d "$KROOT/boot" ]; then
    dl=$(mktemp -d "$CACHE/dl.XXXXXX")
    (cd "$dl" && apt-get download -qq "$pkg") >/dev/null 2>&1 ||
        { rm -rf "$dl"; skip "cannot download $pkg"; }
    rm -rf "$KROOT.tmp"
    dpkg-deb -x "$dl"/*.deb "$KROOT.tmp" || { rm -rf "$dl"; skip "cannot unpack $pkg"; }
    rm -rf "$dl"
    mv "$KROOT.tmp" "$KROOT"
fi
KVER=$(ls "$KROOT/lib/modules" | head -1)
KIMG=$KROOT/boot/vmlinuz-$KVER
[ -f "$KIMG" ] || skip "no kernel image in $pkg"
[ -f "$KROOT/lib/modules/$KVER/modules.dep" ] ||
    depmod -b "$KROOT" "$KVER" || skip "depmod failed"

# The initramfs: busybox, the modules that reach the host's root, and init.
INITRD=$CACHE/initrd-$KVER-$(md5sum <"$0" | cut -c1-8).gz
if [ ! -f "$INITRD" ]; then
    root=$(mktemp -d "$CACHE/initrd.XXXXXX")
    mkdir -p "$root"/{bin,proc,sys,dev,lib/mods,lib/modules,host,state,new,rw}
    cp "$(command -v busybox)" "$root/bin/busybox"
    for m in virtio_pci 9pnet_virtio 9p overlay; do
        modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" |
            awk '$1 == "insmod" { print $2 }'
    done | awk '!seen[$0]++' >"$root/order"
    while read -r p; do
        cp "$p" "$root/lib/mods/" && basename "$p" >>"$root/lib/mods/order"
    done <"$root/order"
    rm "$root/order"
    cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs dev /dev
die() { echo "rxe-run guest: $*" >/dev/console; echo 125 >/state/status; poweroff -f; }
for m in $(cat /lib/mods/order); do
    case $m in *.xz) xz -dc /lib/mods/$m >/tmp.ko && insmod /tmp.ko ;; *) insmod /lib/mods/$m ;; esac || die "insmod $m"
done
O="trans=virtio,version=9p2000.L,msize=262144"
mount -t 9p -o $O,cache=none state /state || die "mount state"
mount -t 9p -o $O,ro hostroot /host || die "mount the host root"
. /state/conf
mount -t tmpfs tmpfs /rw && mkdir -p /rw/u /rw/w
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/u,workdir=/rw/w /new || die overlay
R=/new
mount -t proc proc $R/proc; mount -t sysfs sysfs $R/sys; mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm; mount -t devpts devpts $R/dev/pts; mount -t tmpfs tmpfs $R/dev/shm
mount -t tmpfs tmpfs $R/run; mount -t tmpfs tmpfs $R/tmp
mkdir -p "$R$RWDIR" # under a fresh tmpfs (/tmp, /run) it is not there
mount -t 9p -o $O,cache=mmap rw "$R$RWDIR" || die "mount $RWDIR"
M="chroot $R /sbin/modprobe -d $KROOT -S $KVER"
$M crc32_generic 2>/dev/null # rxe checksums its packets with crc32
for m in rdma_rxe rdma_ucm ib_uverbs dummy; do $M $m || die "modprobe $m"; done
chroot $R ip link add dummy0 type dummy || die "dummy0"
chroot $R ip addr add $IP/24 dev dummy0 && chroot $R ip link set dummy0 up && chroot $R ip link set lo up
chroot $R rdma link add rxe0 type rxe netdev dummy0 || die "rdma link add rxe0"
cp /state/cmd $R/run/cmd
chroot $R /bin/bash /run/cmd </dev/null >/state/out 2>&1
echo $? >/state/status
sync
poweroff -f
INIT
    chmod 755 "$root/init"
    (cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null) | gzip -1 >"$INITRD.tmp" &&
        mv "$INITRD.tmp" "$INITRD"
    rm -rf "$root"
    [ -f "$INITRD" ] || skip "cannot build the initramfs"
fi
flock -u 9

# This run: its state directory, the command with the caller's environment.
STATE=$(mktemp -d "$CACHE/run.XXXXXX")
trap 'rm -rf "$STATE"' EXIT
printf 'KROOT=%q\nKVER=%q\nRWDIR=%q\nIP=%q\n' "$KROOT" "$KVER" "$RW" "$IP" >"$STATE/conf"
{
    echo '#!/bin/bash'
    export -p | grep -v -e ' PWD=' -e ' OLDPWD=' -e ' SHLVL='
    echo "export SHARP_RXE_IP=$IP SHARP_RXE_DEV=rxe0"
    echo 'ulimit -l unlimited'
    printf 'cd %q || exit 125\n' "$PWD"
    printf 'exec'
    printf ' %q' "$@"
    echo
} >"$STATE/cmd"
echo 125 >"$STATE/status"

# kvm here is a paravirtual flavour that cannot boot a stock kernel: tcg
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -nodefaults -no-user-config \
    -display none -no-reboot -accel tcg -cpu max -m 2048 -smp 2 \
    -kernel "$KIMG" -initrd "$INITRD" \
    -append "console=ttyS0 panic=-1 quiet" \
    -serial "file:$STATE/console" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=$STATE,mount_tag=state,security_model=none,multidevs=remap" \
    -virtfs "local,path=$RW,mount_tag=rw,security_model=none,multidevs=remap" \
    </dev/null >/dev/null 2>"$STATE/qemu.err"
q=$?
cat "$STATE/out" 2>/dev/null
[ "${SHARP_RXE_VERBOSE:-0}" = 1 ] && cat "$STATE/console" >&2
[ $q = 124 ] && { echo "rxe-run: the guest timed out" >&2; exit 124; }
st=$(cat "$STATE/status")
if [ "$st" = 125 ]; then
    echo "rxe-run: the guest failed before the command ran:" >&2
    tail -n 5 "$STATE/console" "$STATE/qemu.err" >&2
fi
exit "$st"
