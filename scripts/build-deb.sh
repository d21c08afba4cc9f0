#!/usr/bin/env bash
# build-deb.sh O: the Debian packages of this tree, built with Debian's
# tools (dpkg-buildpackage -us -uc -b) in a copy of it (O/deb/sharp-VERSION:
# the tree's files, tracked or new, without build outputs), then checked
# with lintian; the .debs land in O/deb.  Exit 1 if either fails, or if
# lintian reports an error.
set -euo pipefail
O=${1:-build}
cd "$(dirname "$0")/.."
ver=$(dpkg-parsechangelog -S Version)
D=$O/deb
rm -rf "$D"
mkdir -p "$D/sharp-$ver"
if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard |
        tar --null --ignore-failed-read -cf - -T - 2>/dev/null |
        tar -xf - -C "$D/sharp-$ver"
else
    tar --exclude=./build --exclude=./debian/build --exclude=./.git -cf - . |
        tar -xf - -C "$D/sharp-$ver"
fi
start=$(date +%s)
jobs=$(nproc)
(cd "$D/sharp-$ver" &&
    DEB_BUILD_OPTIONS="parallel=$jobs ${DEB_BUILD_OPTIONS:-}" \
        dpkg-buildpackage -us -uc -b) >"$D/build.log" 2>&1 ||
    { tail -n 40 "$D/build.log"; echo "deb: dpkg-buildpackage failed (log: $D/build.log)"; exit 1; }
echo "deb: built in $(($(date +%s) - start)) s: $(cd "$D" && ls ./*.deb | tr '\n' ' ')"
rc=0
lintian --fail-on error "$D"/sharp_"$ver"_*.changes >"$D/lintian.log" 2>&1 || rc=$?
sed 's/^/lintian: /' "$D/lintian.log"
echo "deb: lintian: $(grep -c '^E:' "$D/lintian.log") errors," \
    "$(grep -c '^W:' "$D/lintian.log") warnings (log: $D/lintian.log)"
exit $rc
