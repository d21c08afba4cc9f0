#!/usr/bin/env bash
# bump-debs.sh IN OUT VERSION: the packages of IN (the sharp .debs of one
# build) again in OUT with version VERSION, and their dependencies on each
# other (= OLD) made (= VERSION): a newer build of the same source, as the
# cluster test's upgrade installs it.  The files are the same; dpkg and apt
# take it as an upgrade.
set -euo pipefail
in=$1 out=$2 ver=$3
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for deb in "$in"/*.deb; do
    case $deb in *-dbgsym_*) continue ;; esac
    old=$(dpkg-deb -f "$deb" Version)
    pkg=$(dpkg-deb -f "$deb" Package)
    arch=$(dpkg-deb -f "$deb" Architecture)
    rm -rf "$tmp/x"
    dpkg-deb -R "$deb" "$tmp/x"
    sed -i -e "s/^Version: .*/Version: $ver/" \
        -e "/^\(Depends\|Pre-Depends\|Recommends\|Breaks\|Replaces\):/s/(= $old)/(= $ver)/g" \
        "$tmp/x/DEBIAN/control"
    dpkg-deb -Zxz -b "$tmp/x" "$out/${pkg}_${ver}_${arch}.deb" >/dev/null
done
