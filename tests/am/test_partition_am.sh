#!/usr/bin/env bash
# The manager pair under network partitions (issue 60): a --netns fabric
# (examples/small-2l.ibnd: 1 spine, 2 leaves, 8 hosts: 11 nodes) with two
# managers (--standby), split with `sharp-fabric partition`, each case on
# a fresh fabric; what each manager says (`sharpctl --json status`: role,
# epoch) and which ANs are up at it (`sharpctl --json ans`):
#   - the managers cut from each other, the nodes untouched: the standby
#     takes over with a higher epoch (both active, the nodes with the
#     first); after the heal exactly one is active, the one of the highest
#     epoch, with every AN;
#   - the active manager cut from every node but not from the standby:
#     the standby, asked by more than half of the nodes that lost the
#     active one, takes over although it still hears it (am_ha_lost.c);
#     the old one steps down on the higher epoch; every AN comes to the
#     new one before the heal.  (Before: the standby refused them while it
#     heard the active one, the fabric had no manager until the heal, and
#     the sharpds gave their processes' groups up, SD0005);
#   - one AN cut from the active manager only (a minority): no takeover;
#     after the heal that AN is back at the active one;
#   - the nodes split in two halves, each with one manager: both active;
#     after the heal one, of the highest epoch, with every AN.
# Skips (77) unless root with iproute2 and nftables.
set -u
BIN=$(cd "${O:-build}/bin" && pwd)
[ "$(id -u)" = 0 ] || { echo "skip: needs root (network namespaces)"; exit 77; }
command -v ip >/dev/null && command -v nft >/dev/null ||
    { echo "skip: needs iproute2 and nftables"; exit 77; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$(mktemp -d /tmp/sharp-test-partition-am.XXXXXX)
FAB=$DIR/fabric
fabric() { "$BIN/sharp-fabric" --dir "$FAB" "$@"; }
cleanup() {
    fabric down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
NODES="spine01,leaf01,leaf02,n00001,n00002,n00003,n00004,n00005,n00006,n00007,n00008"

up() {
    fabric down >/dev/null 2>&1
    fabric up "$SRC/examples/small-2l.ibnd" --netns --standby >"$DIR/up.out" 2>&1 ||
        { bad "the fabric did not come up"; cat "$DIR/up.out"; return 1; }
}
# role M (am or am2): "ROLE EPOCH"
role() {
    "$BIN/sharpctl" --socket "$FAB/$1.sock" --json status 2>/dev/null |
        python3 -c 'import json, sys
d = json.load(sys.stdin); print(d["role"], d["epoch"])' 2>/dev/null || echo "? 0"
}
# ans M: the ANs up at manager M, sorted, comma-separated
ans() {
    "$BIN/sharpctl" --socket "$FAB/$1.sock" --json ans 2>/dev/null |
        python3 -c 'import json, sys
print(",".join(sorted(a["name"] for a in json.load(sys.stdin) if a["state"] == "up")))' \
            2>/dev/null
}
ALL=leaf01,leaf02,spine01
# until SECONDS CMD...: CMD true within SECONDS (polled every 0.5 s); the
# seconds it took in $took
until_() {
    local lim=$1 t0=$SECONDS
    shift
    while ! "$@"; do
        [ $((SECONDS - t0)) -ge "$lim" ] && return 1
        sleep 0.5
    done
    took=$((SECONDS - t0))
}
# one_active: exactly one manager active, of the highest epoch, every AN at it
one_active() {
    local r1 r2 e1 e2
    read -r r1 e1 < <(role am)
    read -r r2 e2 < <(role am2)
    if [ "$r1" = active ] && [ "$r2" = standby ] && [ "$e1" -ge "$e2" ]; then
        [ "$(ans am)" = $ALL ]
    elif [ "$r2" = active ] && [ "$r1" = standby ] && [ "$e2" -ge "$e1" ]; then
        [ "$(ans am2)" = $ALL ]
    else
        return 1
    fi
}
both_active() {
    [ "$(role am | cut -d' ' -f1)" = active ] && [ "$(role am2 | cut -d' ' -f1)" = active ]
}
state() { echo "am: $(role am) [$(ans am)], am2: $(role am2) [$(ans am2)]"; }

# 1. the managers lose each other, not the nodes
if up; then
    fabric partition sharp_am sharp_am2
    if until_ 20 both_active && [ "$(ans am)" = $ALL ]; then
        fabric heal
        if until_ 30 one_active; then
            ok "managers cut from each other: both active (the nodes stayed with the first); healed: one active in $took s, $(state)"
        else
            bad "managers cut from each other: after the heal $(state)"
        fi
    else
        bad "managers cut from each other: $(state) (both active expected, the ANs at am)"
        fabric heal
    fi
fi

# 2. the active manager cut from every node, not from the standby
standby_took_over() {
    [ "$(role am2 | cut -d' ' -f1)" = active ] &&
        [ "$(role am | cut -d' ' -f1)" = standby ] && [ "$(ans am2)" = $ALL ]
}
if up; then
    fabric partition sharp_am "$NODES"
    if until_ 40 standby_took_over; then
        t=$took
        fabric heal
        sleep 2
        if one_active && [ "$(role am2 | cut -d' ' -f1)" = active ]; then
            ok "the active manager cut from every node: the standby took over and had every AN in $t s; healed: $(state)"
        else
            bad "the active manager cut from every node: after the heal $(state)"
        fi
        if grep -q "SD0005" "$FAB"/logs/sharpd-*.log; then
            bad "a sharpd gave its processes' groups up (SD0005) meanwhile"
        fi
    else
        bad "the active manager cut from every node: after 40 s $(state) (am2 active with every AN expected)"
        fabric heal
    fi
fi

# 3. a minority: one AN cut from the active manager only
if up; then
    fabric partition sharp_am leaf01
    sleep 15
    r2=$(role am2 | cut -d' ' -f1)
    a1=$(ans am)
    fabric heal
    if [ "$r2" = standby ] && [ "$a1" = leaf02,spine01 ] && until_ 30 one_active &&
        [ "$(role am | cut -d' ' -f1)" = active ]; then
        ok "one AN cut from the active manager: no takeover (am2 $r2, am had $a1); healed: leaf01 back in $took s"
    else
        bad "one AN cut from the active manager: am2 $r2, am had [$a1]; after the heal $(state)"
    fi
fi

# 4. two halves, each with one manager
halves() { both_active && [ "$(ans am2)" = leaf02 ] && [ "$(ans am)" = leaf01,spine01 ]; }
if up; then
    fabric partition sharp_am,spine01,leaf01,n00001,n00002,n00003,n00004 \
        sharp_am2,leaf02,n00005,n00006,n00007,n00008
    if until_ 40 halves; then
        fabric heal
        if until_ 30 one_active; then
            ok "two halves, a manager each: both active, each with its half's ANs; healed: one active in $took s, $(state)"
        else
            bad "two halves: after the heal $(state)"
        fi
    else
        bad "two halves, a manager each: $(state) (both active expected, each with its half's ANs)"
        fabric heal
    fi
fi
[ $fails -eq 0 ]
