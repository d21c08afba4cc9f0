#!/usr/bin/env bash
# make install as a user without privileges, the way the README says:
#
#  1. into a prefix (make install PREFIX=P, nothing else given): the layout,
#     the library's soname and exports, a client built from the installed
#     headers through pkg-config, the configurations and the secret under
#     P/etc/sharp (loadable, never overwritten, 0600), the sockets' directory
#     P/var/run/sharp, the manager's state directory P/var/lib/sharp (0700);
#     the installed programs' compiled-in defaults and the
#     units name those paths; the installed sharp_am and sharpd, started
#     with no path given, find their configuration, secret and sockets there,
#     and sharpctl and the client find them; make uninstall;
#  2. staged (make install PREFIX=/usr DESTDIR=S): everything under S with
#     /etc, /run paths, no secret;
#
# and nothing written outside the test's directory.  As root (CI), the
# build and installs run as a throwaway user (useradd, else nobody).
# Data nets: 127.17.0.x.
set -u
O=${O:-build}
SAN=${SAN:-0}
# Under SAN=1 this is a second build of the whole tree with the sanitizers
# (about 150 s of CI on 2 cores) for code the unit tests already run under
# them: what it checks, the installed layout and paths, does not change.
if [ "$SAN" = 1 ] && [ -z "${SAN_INSTALL:-}" ]; then
    echo "skip under SAN=1 (SAN_INSTALL=1 runs it)"
    exit 77
fi
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d /tmp/sharp-test-install.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$T"
}
trap cleanup EXIT
chmod 0755 "$T"
P=$T/prefix
S=$T/stage
B=$T/build # a build of its own: the paths are compiled in
fails=0
check() {
    local d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}

# who installs: never root
as=()
if [ "$(id -u)" = 0 ]; then
    U=sharp-install-test
    id -u "$U" >/dev/null 2>&1 ||
        useradd --system --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin "$U" >/dev/null 2>&1 || U=nobody
    if ! id -u "$U" >/dev/null 2>&1 || ! command -v setpriv >/dev/null; then
        echo "skip: no unprivileged user to install as (useradd, setpriv)"
        exit 77
    fi
    chown "$U" "$T"
    as=(setpriv --reuid="$(id -u "$U")" --regid="$(id -g "$U")" --clear-groups
        env HOME="$T")
else
    U=$(id -un)
fi
if ! "${as[@]}" test -r "$SRC/Makefile" -a -x "$SRC/scripts"; then
    echo "skip: $U cannot read the source tree $SRC"
    exit 77
fi
echo "installing as $U (uid $("${as[@]}" id -u))"
touch "$T/start"
sleep 1 # files written from here on are newer than start

inst() { "${as[@]}" make -s -j"$(nproc)" -C "$SRC" O="$B" SAN="$SAN" "$@"; }

# 1. A prefix ------------------------------------------------------------
inst PREFIX="$P" install >"$T/install.log" 2>&1 ||
    { cat "$T/install.log"; echo "FAIL make install PREFIX=$P as $U"; exit 1; }
echo "ok   make install PREFIX=$P as $U"
missing=0
for f in bin/sharp_am bin/sharp_an bin/sharpd bin/sharpctl bin/sharp-topo \
    bin/sharp-fabric include/sharp/api/sharp.h include/sharp/api/sharp_coll.h \
    include/sharp/api/version.h lib/libsharp_coll.so lib/libsharp_coll.so.1 \
    lib/libsharp_coll.a lib/libsharp_mpi_ompi.so lib/libsharp_mpi_mpich.so \
    lib/libosm_sharp.so lib/sharp/spank_sharp.so share/doc/sharp/plugstack.sharp.conf \
    lib/pkgconfig/sharp_coll.pc lib/systemd/system/sharp_am.service \
    lib/systemd/system/sharpd.service "lib/systemd/system/sharp_an@.service" \
    share/doc/sharp/README.md share/doc/sharp/sharpctl.txt \
    share/man/man8/sharp_an.8 share/man/man5/sharpd.conf.5 share/man/man3/sharp_coll.3 \
    etc/sharp/sharp_am.conf etc/sharp/sharp_an.conf etc/sharp/sharpd.conf \
    etc/sharp/secret var/run/sharp var/lib/sharp; do
    [ -e "$P/$f" ] || { echo "missing $P/$f"; missing=$((missing + 1)); }
done
check "layout: binaries, headers, libraries, pkg-config, units, docs, etc, var/run, var/lib" \
    test $missing = 0
check "the state directory var/lib/sharp: mode 0700, owned by $U" \
    test "$(stat -c '%a %U' "$P/var/lib/sharp")" = "700 $U"
check "soname libsharp_coll.so.1" \
    bash -c "readelf -d $P/lib/libsharp_coll.so | grep -q 'SONAME.*libsharp_coll.so.1'"
check "the library exports only sharp_coll_*" \
    test "$(nm -D --defined-only "$P/lib/libsharp_coll.so" | awk '{print $3}' |
            grep -v '^SHARP_COLL_1$' | grep -vc '^sharp_coll_')" = 0

# the compiled-in defaults and what was generated from them name the prefix
dump() { env -i "$P/bin/$1" --dump-config 2>&1; }
check "sharp_am: configuration, topology, secret, admin socket under the prefix" \
    bash -c "dump() { env -i $P/bin/sharp_am --dump-config; }
             dump | grep -qx 'admin_socket = $P/var/run/sharp/am.sock' &&
             dump | grep -qx 'topology = $P/etc/sharp/topology.ibnd' &&
             dump | grep -qx 'secret_file = $P/etc/sharp/secret' &&
             dump | grep -qx 'state_dir = $P/var/lib/sharp' &&
             env -i $P/bin/sharp_am --help | grep -q 'default file: $P/etc/sharp/sharp_am.conf'"
check "sharpd: configuration, secret, socket under the prefix" \
    bash -c "env -i $P/bin/sharpd --dump-config | grep -qx 'socket = $P/var/run/sharp/sharpd.sock' &&
             env -i $P/bin/sharpd --dump-config | grep -qx 'secret_file = $P/etc/sharp/secret' &&
             env -i $P/bin/sharpd --help | grep -q 'default file: $P/etc/sharp/sharpd.conf'"
check "sharp_an: configuration, secret under the prefix" \
    bash -c "env -i $P/bin/sharp_an --dump-config | grep -qx 'secret_file = $P/etc/sharp/secret' &&
             env -i $P/bin/sharp_an --help | grep -q 'default file: $P/etc/sharp/sharp_an.conf'"
check "the Slurm plugin: plugstack line and its default sharpd socket name the prefix" \
    bash -c "grep -qx 'optional $P/lib/sharp/spank_sharp.so' $P/share/doc/sharp/plugstack.sharp.conf &&
             grep -q '$P/var/run/sharp/sharpd.sock' $P/share/doc/sharp/plugstack.sharp.conf &&
             strings $P/lib/sharp/spank_sharp.so | grep -qx '$P/var/run/sharp/sharpd.sock'"
check "sharpctl --help names the admin socket under the prefix" \
    grep -q "$P/var/run/sharp/am.sock" "$P/share/doc/sharp/sharpctl.txt"
check "the default configurations name the prefix's paths" \
    bash -c "grep -qx '# secret_file = $P/etc/sharp/secret' $P/etc/sharp/sharpd.conf &&
             grep -qx '# socket = $P/var/run/sharp/sharpd.sock' $P/etc/sharp/sharpd.conf &&
             grep -qx '# admin_socket = $P/var/run/sharp/am.sock' $P/etc/sharp/sharp_am.conf"
for d in sharp_am sharp_an sharpd; do
    check "$d.conf: every option commented, and the daemon loads it" \
        bash -c "[ \$(grep -c '^# [a-z_]* = ' $P/etc/sharp/$d.conf) -ge 5 ] &&
                 env -i $P/bin/$d --config $P/etc/sharp/$d.conf --dump-config >/dev/null"
done
check "secret: mode 0600, owned by $U" \
    test "$(stat -c '%a %U' "$P/etc/sharp/secret")" = "600 $U"
U_DIR=$P/lib/systemd/system
check "units: the prefix's programs, configurations and socket directory" \
    bash -c "grep -qx 'ExecStart=$P/bin/sharp_am --config $P/etc/sharp/sharp_am.conf' $U_DIR/sharp_am.service &&
             grep -qx 'ExecStart=$P/bin/sharpd --config $P/etc/sharp/sharpd.conf' $U_DIR/sharpd.service &&
             grep -qx 'ExecStart=$P/bin/sharp_an --config $P/etc/sharp/sharp_an.conf --name %i' '$U_DIR/sharp_an@.service' &&
             grep -qx 'ReadWritePaths=$P/var/run/sharp' $U_DIR/sharpd.service &&
             grep -qx 'ReadWritePaths=$P/var/run/sharp' $U_DIR/sharp_am.service &&
             grep -qx 'ReadWritePaths=$P/var/lib/sharp' $U_DIR/sharp_am.service &&
             ! grep -Eq 'RuntimeDirectory|@[A-Z]+@|(^|[ =])/(etc|run)/sharp' $U_DIR/*.service"
if command -v systemd-analyze >/dev/null; then
    cp "$U_DIR/sharp_an@.service" "$T/sharp_an@leaf01.service"
    systemd-analyze verify "$U_DIR/sharp_am.service" "$U_DIR/sharpd.service" \
        "$T/sharp_an@leaf01.service" 2>&1 |
        grep -v 'Cannot add dependency\|network-online' >"$T/verify.log"
    check "systemd-analyze verify: the units, without a complaint" \
        test ! -s "$T/verify.log"
    [ -s "$T/verify.log" ] && cat "$T/verify.log"
else
    echo "skip systemd-analyze verify: not installed"
fi

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
    s.job_id = 4242;
    s.world_size = 1;
    s.config = sharp_coll_default_config;
    s.oob_colls.bcast = bc;
    s.oob_colls.barrier = ba;
    s.oob_colls.gather = ga;
    int rc = sharp_coll_init(&s, &ctx);
    printf("rc %d: %s\n", rc, sharp_coll_strerror(rc));
    if (rc == 0) {
        sharp_coll_finalize(ctx);
    }
    return 0;
}
C
chmod 0644 "$T/client.c"
check "pkg-config: a client builds against the installed headers" \
    "${as[@]}" env PKG_CONFIG_PATH="$P/lib/pkgconfig" bash -c \
    "cc -Wall -Werror $T/client.c -o $T/client \$(pkg-config --cflags --libs sharp_coll)"
# under SAN=1 the installed library is instrumented: its runtime goes first
pre=()
[ "$SAN" = 1 ] && pre=("LD_PRELOAD=$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so)" ASAN_OPTIONS=detect_leaks=0)
client() { "${as[@]}" env -i "${pre[@]}" LD_LIBRARY_PATH="$P/lib" "$@" "$T/client" 2>&1; }
client >"$T/client1.log"
check "the client looks for sharpd at the prefix's socket (none there yet)" \
    grep -q "cannot reach sharpd at $P/var/run/sharp/sharpd.sock" "$T/client1.log"

# the installed daemons, given no path at all: a manager and one sharpd
cp "$SRC/examples/small-2l.ibnd" "$T/topo.ibnd" && chmod 0644 "$T/topo.ibnd"
"${as[@]}" cp "$T/topo.ibnd" "$P/etc/sharp/topology.ibnd"
"${as[@]}" env -i SHARP_AM_LISTEN=127.17.0.1:6126 SHARP_AM_TREE_SETTLE=50ms \
    "$P/bin/sharp_am" >"$T/am.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$P/var/run/sharp/am.sock" ] && break; sleep 0.1; done
"${as[@]}" env -i SHARPD_AM=127.17.0.1:6126 SHARPD_HOST=n00001 \
    "$P/bin/sharpd" >"$T/sharpd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$P/var/run/sharp/sharpd.sock" ] && break; sleep 0.1; done
check "sharp_am and sharpd made their sockets in $P/var/run/sharp" \
    test -S "$P/var/run/sharp/am.sock" -a -S "$P/var/run/sharp/sharpd.sock"
check "sharp_am keeps its state in $P/var/lib/sharp/am.db (mode 0600)" \
    test "$(stat -c %a "$P/var/lib/sharp/am.db" 2>&1)" = 600
ctl_stats() { "${as[@]}" env -i "$P/bin/sharpctl" stats >"$T/stats.log" 2>&1; }
check "sharpctl reaches the manager through its default socket" ctl_stats
if [ "$U" != nobody ] && [ "$(id -u)" = 0 ]; then
    # another unprivileged user is refused (the socket's mode, SO_PEERCRED)
    setpriv --reuid=65534 --regid=65534 --clear-groups env -i \
        "$P/bin/sharpctl" --socket "$P/var/run/sharp/am.sock" stats >"$T/stats-nobody.log" 2>&1
    rc=$?
    check "sharpctl as nobody is refused (exit $rc: 1 or 3)" test $rc = 1 -o $rc = 3
fi
client >"$T/client2.log"
check "the client reaches sharpd through its default socket, which the manager serves" \
    bash -c "! grep -q 'cannot reach sharpd\|does not answer' $T/client2.log &&
             grep -q 'job 4242' $T/am.log"
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
wait 2>/dev/null
pids=()
check "the daemons used the prefix's secret (no complaint about it)" \
    bash -c "! grep -qi 'secret' $T/am.log $T/sharpd.log"

echo "# mine" | "${as[@]}" tee -a "$P/etc/sharp/sharpd.conf" >/dev/null
before=$(md5sum <"$P/etc/sharp/secret")
inst PREFIX="$P" install >/dev/null 2>&1
check "reinstall keeps configuration and secret" \
    bash -c "grep -q '^# mine' $P/etc/sharp/sharpd.conf && [ \"\$(md5sum <$P/etc/sharp/secret)\" = '$before' ]"
inst PREFIX="$P" uninstall >/dev/null 2>&1
left=$(cd "$P" && find . \( -type f -o -type l \) -printf '%P\n' | sort | tr '\n' ' ')
check "uninstall: only etc/sharp and the manager's state left ($left)" \
    test "$left" = "etc/sharp/secret etc/sharp/sharp_am.conf etc/sharp/sharp_an.conf etc/sharp/sharpd.conf etc/sharp/topology.ibnd var/lib/sharp/am.db "

# 2. Staged for a package --------------------------------------------------
etc_before=$(ls -d /etc/sharp /run/sharp 2>/dev/null)
inst PREFIX=/usr DESTDIR="$S" install >"$T/stage.log" 2>&1 ||
    { cat "$T/stage.log"; echo "FAIL make install PREFIX=/usr DESTDIR=$S as $U"; exit 1; }
echo "ok   make install PREFIX=/usr DESTDIR=$S as $U"
check "staged: /usr, /etc/sharp, the units in /usr/lib/systemd/system" \
    test -x "$S/usr/bin/sharpd" -a -e "$S/usr/lib/libsharp_coll.so.1" \
    -a -e "$S/etc/sharp/sharpd.conf" -a -e "$S/usr/lib/systemd/system/sharpd.service"
check "staged: the Slurm plugin under /usr/lib/sharp, its plugstack line names it" \
    bash -c "test -x $S/usr/lib/sharp/spank_sharp.so &&
             grep -qx 'optional /usr/lib/sharp/spank_sharp.so' $S/usr/share/doc/sharp/plugstack.sharp.conf"
check "staged: no secret, no runtime or state directory (systemd makes /run/sharp, /var/lib/sharp)" \
    test ! -e "$S/etc/sharp/secret" -a ! -e "$S/run" -a ! -e "$S/var"
check "staged: the programs and configurations name /etc/sharp and /run/sharp" \
    bash -c "grep -qx '# secret_file = /etc/sharp/secret' $S/etc/sharp/sharpd.conf &&
             grep -qx '# socket = /run/sharp/sharpd.sock' $S/etc/sharp/sharpd.conf &&
             grep -qx '# admin_socket = /run/sharp/am.sock' $S/etc/sharp/sharp_am.conf &&
             env -i $S/usr/bin/sharp_an --help | grep -q 'default file: /etc/sharp/sharp_an.conf' &&
             grep -q /run/sharp/am.sock $S/usr/share/doc/sharp/sharpctl.txt &&
             ! grep -rq '$S' $S/etc $S/usr/lib/systemd $S/usr/lib/pkgconfig"
check "staged units: /usr/bin, /etc/sharp, RuntimeDirectory=sharp" \
    bash -c "grep -qx 'ExecStart=/usr/bin/sharpd --config /etc/sharp/sharpd.conf' $S/usr/lib/systemd/system/sharpd.service &&
             grep -qx 'RuntimeDirectory=sharp' $S/usr/lib/systemd/system/sharpd.service &&
             grep -qx 'RuntimeDirectory=sharp' $S/usr/lib/systemd/system/sharp_am.service &&
             grep -qx 'StateDirectory=sharp' $S/usr/lib/systemd/system/sharp_am.service &&
             grep -qx 'StateDirectoryMode=0700' $S/usr/lib/systemd/system/sharp_am.service &&
             ! grep -q 'ReadWritePaths\|@[A-Z]*@' $S/usr/lib/systemd/system/*.service"
check "staged: prefix=/usr in sharp_coll.pc" grep -qx 'prefix=/usr' "$S/usr/lib/pkgconfig/sharp_coll.pc"
# a multiarch LIBDIR, as Debian's packages install
M=$T/multiarch
inst PREFIX=/usr LIBDIR=/usr/lib/x86_64-linux-gnu DESTDIR="$M" install >"$T/multiarch.log" 2>&1 ||
    { cat "$T/multiarch.log"; echo "FAIL make install LIBDIR=/usr/lib/x86_64-linux-gnu"; exit 1; }
check "LIBDIR: the libraries, pkg-config file and Slurm plugin there, and named there" \
    bash -c "L=$M/usr/lib/x86_64-linux-gnu
             test -e \$L/libsharp_coll.so.1 -a -e \$L/libsharp_mpi_ompi.so -a -e \$L/libosm_sharp.so \
                  -a -x \$L/sharp/spank_sharp.so &&
             test -z \"\$(ls $M/usr/lib/libsharp* $M/usr/lib/sharp 2>/dev/null)\" &&
             grep -qx 'libdir=/usr/lib/x86_64-linux-gnu' \$L/pkgconfig/sharp_coll.pc &&
             grep -qx 'optional /usr/lib/x86_64-linux-gnu/sharp/spank_sharp.so' $M/usr/share/doc/sharp/plugstack.sharp.conf &&
             grep -q 'LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libsharp_mpi_ompi.so' $M/usr/share/man/man7/libsharp_mpi.7"

# nothing outside the test's directory ------------------------------------
check "nothing appeared in /etc/sharp or /run/sharp" \
    test "$(ls -d /etc/sharp /run/sharp 2>/dev/null)" = "$etc_before"
# the world-writable places are the only ones an unprivileged user could
outside=$(find /tmp /var/tmp /dev/shm \( -path "$T" \) -prune -o \
    -newer "$T/start" -user "$U" -print 2>/dev/null | head)
check "$U wrote nothing outside $T ($outside)" test -z "$outside"
[ $fails = 0 ]
