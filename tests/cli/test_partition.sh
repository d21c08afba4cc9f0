#!/usr/bin/env bash
# sharp-fabric partition and heal (issue 60, part 1), on a --netns fabric
# (examples/small-2l.ibnd: 1 spine, 2 leaves, 8 hosts; two managers,
# --standby).  Reachability is probed from inside the daemons'
# namespaces: a TCP connection to a manager's (6126) or an AN's (7200)
# port, and a UDP datagram between two hosts (for the one-way form):
#   - `partition sharp_am '|' spine01`: spine01 and the active manager
#     reach each other no more, both ways; leaf01 still reaches the
#     manager and the standby manager still reaches spine01; `heal`
#     restores it;
#   - `partition leaf01` (one side: the rest is the other): nothing
#     reaches leaf01 or is reached from it, the others reach each other;
#   - `partition n00001 n00002 --oneway`: n00002 gets nothing from
#     n00001, n00001 still gets what n00002 sends;
#   - two partitions add up, one heal removes both;
#   - what the control plane sees: spine01 cut from both managers is lost
#     (keepalives) and shown down by `sharpctl --json ans`, and registers
#     again after the heal;
#   - bad input (an unknown daemon, a daemon on both sides, a fabric
#     without --netns) is refused with a message, exit 1 or 2.
# Skips (77) unless root with iproute2 and nftables.
set -u
BIN=$(cd "${O:-build}/bin" && pwd)
[ "$(id -u)" = 0 ] || { echo "skip: needs root (network namespaces)"; exit 77; }
command -v ip >/dev/null && command -v nft >/dev/null ||
    { echo "skip: needs iproute2 and nftables"; exit 77; }
DIR=$(mktemp -d /tmp/sharp-test-partition.XXXXXX)
FAB=$DIR/fabric
fabric() { "$BIN/sharp-fabric" --dir "$FAB" "$@"; }
cleanup() {
    fabric down >/dev/null 2>&1
    "$BIN/sharp-fabric" --dir "$DIR/plain" down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
SRC=$(cd "$(dirname "$0")/../.." && pwd)

fabric up "$SRC/examples/small-2l.ibnd" --netns --standby >"$DIR/up.out" 2>&1 ||
    { echo "FAIL the fabric did not come up"; cat "$DIR/up.out"; exit 1; }
P=$(cat "$FAB/netns")
addr() { awk -v n="$1" '$2 == n { sub(/:.*/, "", $3); print $3 }' "$FAB/pids"; }
AM=$(addr sharp_am) AM2=$(addr sharp_am2) SPINE=$(addr spine01) LEAF1=$(addr leaf01)
LEAF2=$(addr leaf02)

# tcp FROM ADDR PORT: 0 if a connection from FROM's namespace is accepted
tcp() {
    ip netns exec "$P-$1" python3 -c 'import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()' \
        "$2" "$3" 2>/dev/null
}
# udp FROM TO: 0 if a datagram FROM sends TO's address arrives
udp() {
    ip netns exec "$P-$2" python3 -c 'import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 9977)); s.settimeout(1.5)
open(sys.argv[1], "w").close()
sys.exit(0 if s.recv(64) == b"probe" else 1)' "$DIR/udp.ready" 2>/dev/null &
    local rx=$! to
    to=$(addr "$2")
    for _ in $(seq 50); do [ -e "$DIR/udp.ready" ] && break; sleep 0.05; done
    rm -f "$DIR/udp.ready"
    ip netns exec "$P-$1" python3 -c 'import socket, sys
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"probe", (sys.argv[1], 9977))' "$to"
    wait $rx
}
# expect WHAT yes|no CMD...: CMD succeeds (yes) or fails (no)
expect() {
    local what=$1 want=$2 got=no
    shift 2
    "$@" && got=yes
    [ "$got" = "$want" ] || bad "$what: reachable $got, expected $want"
    [ "$got" = "$want" ]
}

# every pair this test looks at, reachable before anything is cut
if expect "spine01 -> sharp_am" yes tcp spine01 "$AM" 6126 &&
    expect "sharp_am -> spine01" yes tcp sharp_am "$SPINE" 7200 &&
    expect "n00001 -> leaf01" yes tcp n00001 "$LEAF1" 7200 &&
    expect "n00001 -> n00002 (udp)" yes udp n00001 n00002; then
    ok "before any partition: the probes get through"
fi

fabric partition sharp_am '|' spine01
if expect "spine01 -> sharp_am, cut" no tcp spine01 "$AM" 6126 &&
    expect "sharp_am -> spine01, cut" no tcp sharp_am "$SPINE" 7200 &&
    expect "leaf01 -> sharp_am" yes tcp leaf01 "$AM" 6126 &&
    expect "sharp_am2 -> spine01" yes tcp sharp_am2 "$SPINE" 7200 &&
    expect "spine01 -> sharp_am2" yes tcp spine01 "$AM2" 6126; then
    ok "partition sharp_am | spine01: the two cut both ways, each still reaches the rest"
fi
fabric heal
if expect "spine01 -> sharp_am, healed" yes tcp spine01 "$AM" 6126 &&
    expect "sharp_am -> spine01, healed" yes tcp sharp_am "$SPINE" 7200; then
    ok "heal: spine01 and sharp_am reach each other again"
fi

fabric partition leaf01
if expect "n00001 -> leaf01, isolated" no tcp n00001 "$LEAF1" 7200 &&
    expect "spine01 -> leaf01, isolated" no tcp spine01 "$LEAF1" 7200 &&
    expect "leaf01 -> sharp_am, isolated" no tcp leaf01 "$AM" 6126 &&
    expect "n00005 -> leaf02" yes tcp n00005 "$LEAF2" 7200 &&
    expect "leaf02 -> spine01" yes tcp leaf02 "$SPINE" 7200; then
    ok "partition leaf01: nothing reaches leaf01 or is reached from it; the rest unchanged"
fi
fabric heal

fabric partition n00001 n00002 --oneway
if expect "n00001 -> n00002, one way cut" no udp n00001 n00002 &&
    expect "n00002 -> n00001" yes udp n00002 n00001; then
    ok "partition n00001 n00002 --oneway: n00002 gets nothing from n00001, n00001 still hears n00002"
fi
fabric heal
if expect "n00001 -> n00002, healed" yes udp n00001 n00002; then
    ok "heal after --oneway: n00001 reaches n00002 again"
fi

fabric partition sharp_am spine01
fabric partition sharp_am2 leaf01
if expect "spine01 -> sharp_am (first)" no tcp spine01 "$AM" 6126 &&
    expect "leaf01 -> sharp_am2 (second)" no tcp leaf01 "$AM2" 6126 &&
    expect "leaf01 -> sharp_am" yes tcp leaf01 "$AM" 6126; then
    ok "two partitions add up"
fi
fabric heal
if expect "spine01 -> sharp_am, healed" yes tcp spine01 "$AM" 6126 &&
    expect "leaf01 -> sharp_am2, healed" yes tcp leaf01 "$AM2" 6126; then
    ok "one heal removes both"
fi

# the control plane: spine01 cut from both managers
an_state() {
    "$BIN/sharpctl" --socket "$FAB/am.sock" --json ans 2>/dev/null |
        python3 -c 'import json, sys
print(next((a["state"] for a in json.load(sys.stdin) if a["name"] == sys.argv[1]), "?"))' "$1"
}
wait_state() { # AN STATE SECONDS: the seconds it took, or nothing
    local t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$3" ]; do
        [ "$(an_state "$1")" = "$2" ] && { echo $((SECONDS - t0)); return 0; }
        sleep 0.5
    done
    return 1
}
fabric partition spine01 sharp_am,sharp_am2
if t=$(wait_state spine01 down 30); then
    fabric heal
    if t2=$(wait_state spine01 up 30); then
        ok "spine01 cut from both managers: down in sharpctl ans after $t s, up $t2 s after the heal"
    else
        bad "spine01 not up again 30 s after the heal ($(an_state spine01))"
    fi
else
    bad "spine01 cut from both managers still $(an_state spine01) after 30 s"
    fabric heal
fi

# bad input
fabric partition nope >"$DIR/e1" 2>&1
r1=$?
fabric partition leaf01 leaf01,spine01 >"$DIR/e2" 2>&1
r2=$?
fabric partition >"$DIR/e3" 2>&1
r3=$?
"$BIN/sharp-fabric" --dir "$DIR/plain" up "$SRC/examples/small-2l.ibnd" --net 127.83 \
    >/dev/null 2>&1
"$BIN/sharp-fabric" --dir "$DIR/plain" partition leaf01 >"$DIR/e4" 2>&1
r4=$?
if [ $r1 = 1 ] && grep -q "no daemon nope" "$DIR/e1" &&
    [ $r2 = 1 ] && grep -q "leaf01 is on both sides" "$DIR/e2" &&
    [ $r3 = 2 ] && [ $r4 = 1 ] && grep -q "needs a --netns fabric" "$DIR/e4"; then
    ok "refused: an unknown daemon, one on both sides, no side, a fabric without --netns"
else
    bad "bad input: exits $r1 $r2 $r3 $r4: $(cat "$DIR"/e[1-4] | tr '\n' ' ')"
fi
[ $fails -eq 0 ]
