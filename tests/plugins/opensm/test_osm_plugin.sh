#!/usr/bin/env bash
# The OpenSM event plugin against a simulated fabric: ibsim + real opensm
# loading libosm_sharp.so.  What the plugin writes must describe the same
# fabric as real ibnetdiscover output (the stored capture), and a running
# sharp_am told through its admin socket must load it.
set -u
O=${O:-build}
HERE=$(cd "$(dirname "$0")/../../topology" && pwd)
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
. "$HERE/ibsim.sh"
if ! ibsim_available; then
    echo "skip: ibsim, opensm, ibnetdiscover or libumad2sim missing (make deps)"
    exit 77
fi
if [ "${SAN:-0}" = 1 ]; then
    echo "skip: the plugin is loaded into an uninstrumented opensm; run without SAN=1"
    exit 77
fi
D=$(mktemp -d /tmp/sharp-test-osm.XXXXXX)
am=
cleanup() {
    pkill -f "opensm -F $D/" 2>/dev/null
    [ -n "$am" ] && kill "$am" 2>/dev/null && wait "$am" 2>/dev/null
    ibsim_stop
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$D"
}
trap cleanup EXIT
fails=0
check() {
    local d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}

# a manager that starts with another (smaller) fabric
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$D/small.ibnd"
(umask 077 && head -c 32 /dev/urandom | base64 >"$D/secret")
"$BIN/sharp_am" --topology "$D/small.ibnd" --listen 127.16.0.1:0 \
    --admin-socket "$D/am.sock" --secret-file "$D/secret" --state-dir "$D/state" \
    >"$D/am.log" 2>&1 &
am=$!
for _ in $(seq 100); do grep -q "listening on" "$D/am.log" && break; sleep 0.05; done

ibsim_start "$HERE/fat-tree-2l.net" "$D/ibsim" || exit 1
printf 'event_plugin_name osm_sharp\nevent_plugin_options file=%s/plugin.ibnd,am=%s/am.sock\n' \
    "$D" "$D" >"$D/opensm.conf"
LD_LIBRARY_PATH="$LIB" ibsim_run timeout 60 opensm -F "$D/opensm.conf" \
    -f "$D/opensm.log" >"$D/opensm.out" 2>&1 &
for _ in $(seq 300); do [ -f "$D/plugin.ibnd" ] && break; sleep 0.1; done
for _ in $(seq 100); do
    grep -q "topology $D/plugin.ibnd loaded" "$D/am.log" && break
    sleep 0.1
done

check "opensm loaded the plugin (built for its version)" \
    grep -q "osm_sharp: writing the fabric" "$D/opensm.log"
check "the plugin's fabric equals ibnetdiscover's (fat-tree-2l capture)" \
    "$BIN/sharp-topo" diff "$D/plugin.ibnd" "$HERE/data/fat-tree-2l.ibnd"
check "sharp_am loaded it through the admin socket: 12 switches, 32 hosts" \
    test "$("$BIN/sharpctl" --socket "$D/am.sock" --json topology show |
            tr -d ' \n' | grep -o '"hosts":[0-9]*,"links":[0-9]*,"switches":[0-9]*')" \
         = '"hosts":32,"links":64,"switches":12'
[ $fails = 0 ]
