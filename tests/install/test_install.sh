#!/usr/bin/env bash
# make install into a temporary prefix: the layout, the library's soname
# and exports, a sample client built from the installed headers through
# pkg-config and run, the default configurations (loadable, never
# overwritten), the secret (0600), the units (systemd-analyze verify), and
# make uninstall.
set -u
O=${O:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d /tmp/sharp-test-install.XXXXXX)
trap '[ -n "${KEEP_LOGS:-}" ] || rm -rf "$T"' EXIT
P=$T/prefix
E=$T/etc
fails=0
check() {
    local d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
inst() { make -s -C "$SRC" O="$O" SAN="${SAN:-0}" PREFIX="$P" SYSCONFDIR="$E" "$@"; }

inst install >"$T/install.log" 2>&1 || { cat "$T/install.log"; echo "FAIL make install"; exit 1; }
for f in bin/sharp_am bin/sharp_an bin/sharpd bin/sharpctl bin/sharp-topo \
    bin/sharp-fabric include/sharp/api/sharp.h include/sharp/api/sharp_coll.h \
    include/sharp/api/version.h lib/libsharp_coll.so lib/libsharp_coll.so.1 \
    lib/libsharp_coll.a lib/libsharp_mpi_ompi.so lib/libsharp_mpi_mpich.so \
    lib/libosm_sharp.so \
    lib/pkgconfig/sharp_coll.pc lib/systemd/system/sharp_am.service \
    lib/systemd/system/sharpd.service "lib/systemd/system/sharp_an@.service" \
    share/doc/sharp/README.md share/doc/sharp/sharpctl.txt; do
    [ -e "$P/$f" ] || { echo "missing $P/$f"; fails=$((fails + 1)); }
done
check "layout: binaries, headers, libraries, pkg-config, units, docs" test $fails = 0
check "soname libsharp_coll.so.1" \
    bash -c "readelf -d $P/lib/libsharp_coll.so | grep -q 'SONAME.*libsharp_coll.so.1'"
check "the library exports only sharp_coll_*" \
    test "$(nm -D --defined-only "$P/lib/libsharp_coll.so" | awk '{print $3}' |
            grep -v '^SHARP_COLL_1$' | grep -vc '^sharp_coll_')" = 0

# a client written against the SHARP API, built through pkg-config
cat >"$T/client.c" <<'C'
#include <sharp/api/sharp.h>
#include <stdio.h>
#include <string.h>
#if SHARP_API < SHARP_VERSION(3, 0)
#error "API level"
#endif
static int bc(void *c, void *b, int l, int r) { (void)c; (void)b; (void)l; (void)r; return 0; }
static int ba(void *c) { (void)c; return 0; }
static int ga(void *c, int r, void *s, void *d, int l) { (void)c; (void)r; memcpy(d, s, l); return 0; }
int main(void)
{
    struct sharp_coll_init_spec s;
    struct sharp_coll_context *ctx;
    memset(&s, 0, sizeof(s));
    s.world_size = 1;
    s.config = sharp_coll_default_config;
    s.oob_colls.bcast = bc;
    s.oob_colls.barrier = ba;
    s.oob_colls.gather = ga;
    int rc = sharp_coll_init(&s, &ctx);
    printf("%s\n", sharp_coll_strerror(rc));
    return rc == SHARP_COLL_ESESS_INIT ? 0 : 1;
}
C
export PKG_CONFIG_PATH=$P/lib/pkgconfig
check "pkg-config: a client builds against the installed headers" \
    bash -c "cc -Wall -Werror $T/client.c -o $T/client \$(pkg-config --cflags --libs sharp_coll)"
# under SAN=1 the installed library is instrumented: its runtime goes first
pre=
[ "${SAN:-0}" = 1 ] && pre="LD_PRELOAD=$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so) ASAN_OPTIONS=detect_leaks=0"
check "the client runs (no sharpd here: ESESS_INIT)" \
    bash -c "env $pre SHARP_COLL_SHARPD_SOCKET=$T/none.sock SHARP_COLL_LOG_LEVEL=0 LD_LIBRARY_PATH=$P/lib $T/client | grep -q 'Cannot reach the local sharpd'"

for d in sharp_am sharp_an sharpd; do
    check "$d.conf: every option commented, and the daemon loads it" \
        bash -c "[ \$(grep -c '^# [a-z_]* = ' $E/sharp/$d.conf) -ge 5 ] &&
                 env -i $P/bin/$d --config $E/sharp/$d.conf --dump-config >/dev/null"
done
check "secret: mode 0600" test "$(stat -c %a "$E/sharp/secret")" = 600
echo "# mine" >>"$E/sharp/sharpd.conf"
before=$(md5sum <"$E/sharp/secret")
inst install >/dev/null 2>&1
check "reinstall keeps configuration and secret" \
    bash -c "grep -q '^# mine' $E/sharp/sharpd.conf && [ \"\$(md5sum <$E/sharp/secret)\" = '$before' ]"
if command -v systemd-analyze >/dev/null; then
    cp "$P/lib/systemd/system/sharp_an@.service" "$T/sharp_an@leaf01.service"
    systemd-analyze verify "$P/lib/systemd/system/sharp_am.service" \
        "$P/lib/systemd/system/sharpd.service" "$T/sharp_an@leaf01.service" 2>&1 |
        grep -v 'Cannot add dependency\|network-online' >"$T/verify.log"
    check "systemd-analyze verify: the units, without a complaint" \
        test ! -s "$T/verify.log"
    [ -s "$T/verify.log" ] && cat "$T/verify.log"
else
    echo "skip systemd-analyze verify: not installed"
fi
inst uninstall >/dev/null 2>&1
left=$(find "$P" -type f -o -type l | wc -l)
check "uninstall: nothing left under the prefix ($left)" test "$left" = 0
check "uninstall: configuration left in place" test -e "$E/sharp/secret"
[ $fails = 0 ]
