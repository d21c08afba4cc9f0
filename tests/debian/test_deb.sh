#!/usr/bin/env bash
# The Debian packages (make deb builds them into $O/deb), installed on this
# machine with apt-get install ./*.deb:
#  - every package installed; the cluster secret made once (0600, kept by a
#    reinstall); the configurations are conffiles; no unit enabled; the
#    programs look in /etc/sharp; the man pages found by man;
#  - a client built from libsharp-coll-dev through pkg-config runs;
#  - sharp-fabric (installed) brings up a fabric of the installed daemons on
#    127.60 and an MPI job, LD_PRELOAD=/usr/lib/<triplet>/libsharp_mpi_ompi.so,
#    runs
#    through it (the aggregation nodes count its operations); sharp-hello
#    passes on a host of it;
#  - apt-get remove leaves only the conffiles (and the secret) in
#    /etc/sharp, nothing else of the packages; purge removes those too.
# Root only (it installs system-wide); it purges the packages when done.
set -u
O=${O:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC"
D=$(cd "$O/deb" 2>/dev/null && pwd) || { echo "skip: no $O/deb (make deb first)"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "skip: installs packages: root only"; exit 77; }
mapfile -t debs < <(ls "$D"/*.deb 2>/dev/null | grep -v -- '-dbgsym_')
[ "${#debs[@]}" -ge 9 ] || { echo "skip: the packages are not built (make deb)"; exit 77; }
PKGS=(sharp-common sharp-am sharp-an sharpd libsharp-coll1 libsharp-coll-dev
    sharp-mpi sharp-tools sharp-slurm-plugin)
for p in "${PKGS[@]}"; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q installed; then
        echo "skip: $p is installed already (not this test's to remove)"
        exit 77
    fi
done
[ ! -e /etc/sharp ] || { echo "skip: /etc/sharp exists (another install)"; exit 77; }
# the libraries are in the multiarch directory
L=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)

T=$(mktemp -d /tmp/sharp-test-deb.XXXXXX)
FAB=$T/fab
cleanup() {
    [ -x /usr/bin/sharp-fabric ] && /usr/bin/sharp-fabric --dir "$FAB" down >/dev/null 2>&1
    dpkg --purge "${PKGS[@]}" >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
fails=0
check() {
    local d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
export DEBIAN_FRONTEND=noninteractive

# install ---------------------------------------------------------------------
if ! apt-get install -y -q --no-install-recommends "${debs[@]}" >"$T/apt.log" 2>&1; then
    tail -n 20 "$T/apt.log"
    echo "FAIL apt-get install ./*.deb"
    exit 1
fi
echo "ok   apt-get install ${debs[*]##*/}"
for p in "${PKGS[@]}"; do
    check "$p installed" bash -c "dpkg-query -W -f='\${Status}' $p | grep -qx 'install ok installed'"
done
check "cluster secret /etc/sharp/secret made, root, 0600" \
    test "$(stat -c '%U %a' /etc/sharp/secret 2>/dev/null)" = "root 600"
check "the secret is 32 random bytes (base64)" \
    test "$(base64 -d /etc/sharp/secret 2>/dev/null | wc -c)" = 32
secret=$(md5sum </etc/sharp/secret)
for p in sharp-am:sharp_am sharp-an:sharp_an sharpd:sharpd; do
    check "${p%%:*}: /etc/sharp/${p#*:}.conf is a conffile" \
        bash -c "dpkg-query -W -f='\${Conffiles}' ${p%%:*} | grep -q ' /etc/sharp/${p#*:}.conf '"
done
check "units installed: sharp_am, sharp_an@, sharpd" \
    test -f /lib/systemd/system/sharp_am.service -a -f /lib/systemd/system/sharpd.service \
    -a -f "/lib/systemd/system/sharp_an@.service"
check "no unit enabled" \
    test -z "$(ls /etc/systemd/system/*.wants/ 2>/dev/null | grep sharp)"
check "sharpd looks in /etc/sharp and /run/sharp" \
    bash -c "sharpd --dump-config --config /dev/null | grep -qx 'secret_file = /etc/sharp/secret' &&
             sharpd --dump-config --config /dev/null | grep -qx 'socket = /run/sharp/sharpd.sock'"
check "man finds sharp_an(8), sharpd.conf(5), sharp_coll(3), libsharp_mpi(7)" \
    bash -c "man -w sharp_an | grep -q man8/sharp_an.8 && man -w 5 sharpd.conf >/dev/null &&
             man -w sharp_coll >/dev/null && man -w libsharp_mpi >/dev/null"
apt-get install -y -q --reinstall "$D"/sharp-common_*.deb >/dev/null 2>&1
check "a reinstall keeps the secret" test "$(md5sum </etc/sharp/secret)" = "$secret"

# a client from the -dev package ------------------------------------------------
cat >"$T/client.c" <<'C'
#include <sharp/api/sharp_coll.h>
#include <stdio.h>
int main(void)
{
    printf("%s\n", sharp_coll_strerror(SHARP_COLL_ENOT_SUPP));
    return 0;
}
C
# (/lib is /usr/lib on a merged /usr: ldd may say either)
check "a client built with pkg-config sharp_coll runs, on $L/libsharp_coll.so.1" \
    bash -c "cc -o $T/client $T/client.c \$(pkg-config --cflags --libs sharp_coll) &&
             $T/client | grep -qx 'Operation not supported' &&
             ldd $T/client | grep -Eq '=> (/usr)?${L#/usr}/libsharp_coll.so.1 '"
check "the libraries are in $L, none in /usr/lib itself" \
    bash -c "test -e $L/libsharp_coll.so.1 -a -e $L/libsharp_mpi_ompi.so -a -e $L/sharp/spank_sharp.so &&
             test -z \"\$(ls /usr/lib/libsharp* /usr/lib/libosm_sharp.so /usr/lib/sharp 2>/dev/null)\" &&
             grep -qx 'optional $L/sharp/spank_sharp.so' /usr/share/doc/sharp/plugstack.sharp.conf"

# a job through a fabric of the installed daemons ------------------------------
sharp-topo fat-tree --radix 4 --hosts 4 >"$T/f.ibnd"
if SHARP_AM_STATS_INTERVAL=1s sharp-fabric --dir "$FAB" up "$T/f.ibnd" --net 127.60 >"$T/up.log" 2>&1; then
    echo "ok   sharp-fabric up (installed)"
    check "the fabric runs the installed daemons" \
        bash -c "pgrep -f '^/usr/bin/sharp_am ' && pgrep -f '^/usr/bin/sharp_an ' && pgrep -f '^/usr/bin/sharpd '" >/dev/null
    mpicc.openmpi -O2 -o "$T/demo" mpi-coll/sharp_mpi_demo.c
    if mpirun.openmpi --allow-run-as-root --oversubscribe -np 4 --mca btl self,vader,tcp \
        -x LD_PRELOAD=$L/libsharp_mpi_ompi.so -x SHARP_FABRIC_DIR="$FAB" \
        -x SHARP_MPI_VERBOSE=1 sharp-fabric --dir "$FAB" rank -- "$T/demo" >"$T/job.log" 2>&1; then
        echo "ok   the MPI job (4 ranks, libsharp_mpi_ompi.so preloaded) ran"
    else
        tail -n 20 "$T/job.log"
        echo "FAIL the MPI job"
        fails=$((fails + 1))
    fi
    check "sharp-hello (installed) passes its six steps on a host of the fabric" \
        bash -c "sharp-fabric --dir $FAB exec n00001 -- sharp-hello >$T/hello.log 2>&1"
    sleep 2.5 # the manager reads the ANs' counters every second
    ops=$(sharpctl --socket "$FAB/am.sock" ans --json | jq '[.. | objects | .ops? | numbers] | add // 0')
    check "the aggregation nodes folded the job's operations ($ops)" test "${ops:-0}" -gt 0
    sharp-fabric --dir "$FAB" down >/dev/null 2>&1
else
    cat "$T/up.log"
    echo "FAIL sharp-fabric up (installed)"
    fails=$((fails + 1))
fi

# remove: only the conffiles (and the secret) left ----------------------------
apt-get remove -y -q "${PKGS[@]}" >"$T/remove.log" 2>&1 || { tail "$T/remove.log"; echo "FAIL apt-get remove"; fails=$((fails + 1)); }
left=$(ls /etc/sharp 2>/dev/null | tr '\n' ' ')
check "remove: /etc/sharp holds the conffiles and the secret ($left)" \
    test "$left" = "secret sharp_am.conf sharp_an.conf sharpd.conf "
others=$(ls -d /usr/bin/sharp* /usr/lib/libsharp* /usr/lib/libosm_sharp.so /usr/lib/sharp \
    $L/libsharp* $L/libosm_sharp.so $L/sharp $L/pkgconfig/sharp* \
    /usr/include/sharp /lib/systemd/system/sharp* /usr/share/man/man*/sharp* \
    /usr/share/man/man*/libsharp* /usr/share/doc/sharp 2>/dev/null | tr '\n' ' ')
check "remove: nothing else of the packages left ($others)" test -z "$others"
check "remove: the packages' state is config-files" \
    bash -c "dpkg-query -W -f='\${db:Status-Abbrev}\n' sharpd sharp-am sharp-an | grep -vc '^rc' | grep -qx 0"
# (apt-get purge refuses names it no longer knows: dpkg purges what is left)
dpkg --purge "${PKGS[@]}" >/dev/null 2>&1
check "purge: the secret and /etc/sharp gone" test ! -e /etc/sharp

echo "test_deb: $fails failure(s)"
[ "$fails" = 0 ]
