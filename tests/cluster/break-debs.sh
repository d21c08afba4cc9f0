#!/usr/bin/env bash
# break-debs.sh IN OUT WHAT: the packages of IN again in OUT with one
# thing broken, to check by hand that make check-cluster fails on it
# (docs/testing.md):
#   execstart   sharpd.service's ExecStart names /usr/sbin/sharpd (no such file)
#   rundir      sharpd.service and sharp_am.service lose RuntimeDirectory=
#               (no /run/sharp for their sockets)
#   postinst    sharp-common's postinst makes no cluster secret
# Then: SHARP_CLUSTER_DEBS=OUT bash tests/cluster/test_cluster.sh
set -euo pipefail
in=$1 out=$2 what=$3
rm -rf "$out"
mkdir -p "$out"
cp "$in"/*.deb "$out"/
rm -f "$out"/*-dbgsym_*.deb
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
redo() { # PKG EDIT...: unpack PKG's .deb, run EDIT in it, pack it again
    local deb
    deb=$(ls "$out/$1"_*.deb)
    shift
    dpkg-deb -R "$deb" "$tmp/x"
    (cd "$tmp/x" && eval "$@")
    dpkg-deb -b "$tmp/x" "$deb" >/dev/null
    rm -rf "$tmp/x"
}
case $what in
execstart) redo sharpd "sed -i 's|^ExecStart=/usr/bin/sharpd|ExecStart=/usr/sbin/sharpd|' lib/systemd/system/sharpd.service" ;;
rundir)
    redo sharpd "sed -i '/^RuntimeDirectory/d' lib/systemd/system/sharpd.service"
    redo sharp-am "sed -i '/^RuntimeDirectory/d' lib/systemd/system/sharp_am.service"
    ;;
postinst) redo sharp-common "sed -i 's|^if \[ \"\$1\" = configure \] && \[ ! -e /etc/sharp/secret \]|if false|' DEBIAN/postinst" ;;
*) echo "break-debs.sh: execstart, rundir or postinst" >&2; exit 2 ;;
esac
