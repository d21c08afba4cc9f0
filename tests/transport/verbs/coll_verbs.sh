#!/bin/sh
# Inside the soft-RoCE guest (tests/transport/verbs/rxe-run.sh): libsharp_coll over a
# fabric whose aggregation nodes speak verbs.  Every daemon of the fabric
# gets its address (169.254.x.y) on dummy0, the interface rxe0 is bound to;
# the ANs run with SHARP_AN_TRANSPORT=verbs, so members reach their leaf
# over RC and receive multicast results over UD.
set -eu
O=${O:-build}
dev=${SHARP_RXE_NETDEV:-dummy0}
ip addr add 169.254.0.1/32 dev "$dev"
for i in $(seq 1 32); do
    ip addr add "169.254.1.$i/32" dev "$dev"
done
for i in $(seq 1 8); do
    ip addr add "169.254.64.$i/32" dev "$dev"
done
# Twice: results over RC, then by UD multicast only (SHARP_AM_DIST=mcast;
# the members' statistics must show results that came by multicast, not
# only ones recovered over RC, and no failed request).  The guest's /tmp goes with it: the
# fabric's logs are kept in $O/tests/transport/verbs/coll-logs/<dist>.
logs="$O/tests/transport/verbs/coll-logs"
out="$O/tests/transport/verbs/coll-out"
rm -rf "$logs"
mkdir -p "$logs"
for dist in rc mcast; do
    rc=0
    KEEP_LOGS=1 SHARP_AN_TRANSPORT=verbs SHARP_AM_DIST=$dist \
        SHARP_TEST_NET=169.254 SHARP_TEST_DUMP_STATS=1 \
        SHARP_TEST_ONLY=${SHARP_TEST_ONLY:-test_repeatable} \
        "$O/tests/libsharp/test_coll" >"$out" 2>&1 || rc=$?
    grep -v '^\[20' "$out" || true
    mkdir -p "$logs/$dist"
    cp -r /tmp/sharp-test-coll.*/logs/. "$logs/$dist/" 2>/dev/null || true
    rm -rf /tmp/sharp-test-coll.*
    [ "$rc" = 0 ] || exit "$rc"
    if grep -q "errors [1-9]" "$out"; then
        echo "coll_verbs: dist $dist: a member counted failed requests" >&2
        exit 1
    fi
    if [ "$dist" = mcast ] && ! grep -q "results by multicast [1-9]" "$out"; then
        echo "coll_verbs: no result came by multicast" >&2
        exit 1
    fi
    echo "coll_verbs: dist $dist: ok"
done
