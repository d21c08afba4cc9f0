#!/usr/bin/env bash
# sharp-hello against a fabric (sharp-fabric, 127.62, 2 leaves, 4 hosts,
# max_jobs 1) in health and in each broken case, as a process of a host:
#  - healthy: exit 0, six steps ok, the caller's uid as sharpd saw it;
#    --json: ok true, failed_step 0, six steps; --peers: 4 copies on 4
#    hosts, one job, the allreduce's sum checked by each;
#  - quota exhausted (a sharp-hello --hold holds the one job): exit 4, the
#    manager's reason;
#  - wrong secret (a sharpd of its own with another secret): exit 2, the
#    cause names the secret;
#  - host not in the topology (a sharpd of its own, --host nosuch): exit 2;
#  - sharpd down (killed): exit 1; --json: failed_step 1 with cause and
#    remedy;
#  - host not in any tree (every aggregation node killed): exit 3;
#  - manager down (killed): exit 2, "cannot connect";
#  - sharp-fabric down names a daemon that ended without its `kill`, and
#    exits 3 when a daemon's log holds a sanitizer's report.
set -u
O=${O:-build}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=$SRC/$O/bin
T=$(mktemp -d /tmp/sharp-test-hello.XXXXXX)
F=("$B/sharp-fabric" --dir "$T/fab")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    "${F[@]}" down >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT
fails=0
check() {
    local d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}
command -v jq >/dev/null || { echo "skip: no jq"; exit 77; }
hello() { # HOST ARGS...: sharp-hello as a process of HOST; output in $T/out
    local h=$1
    shift
    "${F[@]}" exec "$h" -- "$B/sharp-hello" "$@" >"$T/out" 2>&1
}
# until CODE HOST ARGS...: sharp-hello until it exits CODE (5 s at most:
# the manager and sharpd notice a death within that)
until_exit() {
    local want=$1 rc i
    shift
    for i in $(seq 50); do
        hello "$@"
        rc=$?
        [ "$rc" = "$want" ] && return 0
        sleep 0.1
    done
    echo "     last exit $rc:"
    sed 's/^/     /' "$T/out"
    return 1
}

"$B/sharp-topo" fat-tree --radix 4 --hosts 4 >"$T/f.ibnd"
# (up with a relative --dir, as a user in its parent types it: the
# daemons' sockets are made absolute; every later call names it whole)
(cd "$T" && SHARP_AM_MAX_JOBS=1 "$B/sharp-fabric" --dir fab up f.ibnd \
    --net 127.62) >"$T/up.log" 2>&1 ||
    { cat "$T/up.log"; echo "FAIL sharp-fabric up (--dir fab, relative)"; exit 1; }

# healthy
hello n00001
rc=$?
sed 's/^/     /' "$T/out"
check "healthy: exit 0" test "$rc" = 0
check "healthy: six steps ok" test "$(grep -c '^\[[1-6]/6\] .* ok' "$T/out")" = 6
check "healthy: sharpd names the caller (uid $(id -u))" grep -q "you are uid $(id -u)\$" "$T/out"
hello n00002 --json
check "healthy --json: ok, failed_step 0, six steps ok" \
    test "$(jq -c '[.ok, .failed_step, ([.steps[] | select(.ok)] | length)]' "$T/out")" = "[true,0,6]"

# four hosts, one job: --peers (rank 0 listens on 127.0.0.1:PORT)
# (below the ephemeral range: a port there may be a connection's own)
port=$((21000 + $$ % 8000))
# one after the other: each checks a job of its own first (steps 3, 4), and
# this fabric takes one job at a time (for the quota case below)
for r in 0 1 2 3; do
    "${F[@]}" exec "n0000$((r + 1))" -- "$B/sharp-hello" --peers "127.0.0.1:$port" \
        --rank "$r" --size 4 >"$T/peer$r" 2>&1 &
    pids+=($!)
    for i in $(seq 100); do grep -q '^\[4/6\]' "$T/peer$r" && break; sleep 0.1; done
done
prc=0
for p in "${pids[@]}"; do wait "$p" || prc=1; done
pids=()
sed 's/^/     /' "$T/peer3"
check "--peers: 4 hosts, every copy exits 0" test "$prc" = 0
check "--peers: every copy checked the sum of the 4 hosts' data" \
    test "$(cat "$T"/peer[0-3] | grep -c '^\[6/6\] allreduce ok: allreduce of 1000 int32 over 4 hosts')" = 4

# quota: one job at most, held by another sharp-hello
"${F[@]}" exec n00003 -- "$B/sharp-hello" --hold 30 >"$T/holder" 2>&1 &
pids+=($!)
for i in $(seq 100); do grep -q '^\[6/6\]' "$T/holder" && break; sleep 0.1; done
hello n00004
rc=$?
sed 's/^/     /' "$T/out"
check "quota exhausted: exit 4" test "$rc" = 4
check "quota exhausted: the manager's reason" grep -q "cause: .*maximum of 1 jobs" "$T/out"
kill "${pids[@]}" 2>/dev/null
wait 2>/dev/null
pids=()

# sharpds of the test's own: a wrong secret, a host the topology lacks
head -c 32 /dev/urandom | base64 >"$T/bad.secret"
chmod 600 "$T/bad.secret"
"$B/sharpd" --config /dev/null --am 127.62.0.1:6126 --host n00003 \
    --socket "$T/bad.sock" --secret-file "$T/bad.secret" >"$T/bad.log" 2>&1 &
pids+=($!)
# (nosuch's own node secret: it proves its name, which the topology lacks)
(umask 077 && "$B/sharp_am" --config /dev/null --secret-file "$T/fab/secret" \
    --node-secret sharpd:nosuch >"$T/nos.secret")
"$B/sharpd" --config /dev/null --am 127.62.0.1:6126 --host nosuch \
    --socket "$T/nos.sock" --secret-file "$T/nos.secret" >"$T/nos.log" 2>&1 &
pids+=($!)
sleep 1
check "wrong secret: exit 2" until_exit 2 n00001 --socket "$T/bad.sock"
sed 's/^/     /' "$T/out"
check "wrong secret: the cause names the secret" grep -q "cause: .*secret" "$T/out"
check "host not in the topology: exit 2" until_exit 2 n00001 --socket "$T/nos.sock"
sed 's/^/     /' "$T/out"
check "host not in the topology: the cause says so" grep -q "cause: .*not in the topology" "$T/out"
kill "${pids[@]}" 2>/dev/null
wait 2>/dev/null
pids=()

# sharpd down
"${F[@]}" kill n00002 >/dev/null
hello n00002 --json
rc=$?
check "sharpd down: exit 1" test "$rc" = 1
check "sharpd down --json: failed_step 1, cause and remedy" \
    test "$(jq -c '[.ok, .failed_step, (.steps[-1].cause | length > 0), (.steps[-1].remedy | length > 0)]' "$T/out")" = "[false,1,true,true]"

# host not in any tree: every aggregation node killed
for a in $("${F[@]}" status | awk '$1 == "an" {print $2}'); do "${F[@]}" kill "$a" >/dev/null; done
check "no tree: exit 3" until_exit 3 n00001
sed 's/^/     /' "$T/out"

# manager down
"${F[@]}" kill sharp_am >/dev/null
check "manager down: exit 2" until_exit 2 n00001
# sharpd first says it lost the manager, then, once it has tried again,
# that it cannot connect (within its backoff: 5 s here)
for i in $(seq 50); do
    grep -q "cause: .*cannot connect to the aggregation manager" "$T/out" && break
    sleep 0.1
    hello n00001
done
sed 's/^/     /' "$T/out"
check "manager down: cannot connect" grep -q "cause: .*cannot connect to the aggregation manager" "$T/out"

# down: says which daemon ended without `kill` (n00003, killed by pid
# here), not those `kill` stopped; a sanitizer's report in a log fails it
kill -KILL "$(awk '$2 == "n00003" {print $4}' "$T/fab/pids")"
echo "x.c:1:1: runtime error: planted" >>"$T/fab/logs/sharpd-n00004.log"
"${F[@]}" down >/dev/null 2>"$T/down"
rc=$?
sed 's/^/     /' "$T/down"
check "down: exit 3 on a sanitizer's report" test "$rc" = 3
check "down: the report shown" grep -q "sharpd-n00004.log holds a sanitizer report" "$T/down"
check "down: n00003 ended unasked" grep -q "n00003 (pid [0-9]*) had ended before down" "$T/down"
check "down: none killed by kill named" test "$(grep -c "had ended" "$T/down")" = 1

echo "test_hello: $fails failure(s)"
[ "$fails" = 0 ]
