#!/usr/bin/env bash
# sharpctl against a running sharp-fabric: every subcommand, --json parsed
# with jq and checked, exit codes (manager unreachable, unknown job, usage),
# --dot accepted by Graphviz.  With a live MPI job (not under SAN=1: the MPI
# layer is preloaded into uninstrumented programs) jobs and groups are
# checked too, and job kill ends it.
set -u
O=${O:-build}
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
DIR=$(mktemp -d /tmp/sharp-test-ctl.XXXXXX)
fabric() { "$BIN/sharp-fabric" --dir "$DIR/fabric" "$@"; }
ctl() { "$BIN/sharpctl" --socket "$DIR/fabric/am.sock" "$@"; }
job=
cleanup() {
    [ -n "$job" ] && kill "$job" 2>/dev/null
    fabric down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
check() { # DESCRIPTION COMMAND...
    local d=$1
    shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi
}

"$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft.ibnd"
export SHARP_AM_STATS_INTERVAL=300ms # the manager polls AN counters often
fabric up "$DIR/ft.ibnd" --net 127.15 >/dev/null || { echo "fabric up failed"; exit 1; }

check "ans --json: 6 ANs, all up" \
    test "$(ctl ans --json | jq '[.[] | select(.state == "up")] | length')" = 6
check "ans --json: every AN's data transport (tcp here)" \
    test "$(ctl ans --json | jq -r '[.[] | .transport] | unique | join(",")')" = tcp
check "ans: a header and 6 rows within 80 columns" \
    bash -c "out=\$($(printf %q "$BIN/sharpctl") --socket $DIR/fabric/am.sock ans) &&
             [ \$(echo \"\$out\" | wc -l) = 7 ] &&
             [ \$(echo \"\$out\" | awk '{ if (length > m) m = length } END { print m }') -le 80 ]"
check "trees --json: 2 trees rooted at the spines, 8 hosts each" \
    test "$(ctl --json trees | jq -c '[.[] | .root] | sort')" = '["spine01","spine02"]'
check "tree show 0: the root and 4 leaves, indented" \
    test "$(ctl tree show 0 | grep -c '^    leaf')" = 4
check "tree show 0 --json: 5 nodes" \
    test "$(ctl tree show 0 --json | jq '.nodes | length')" = 5
if command -v dot >/dev/null; then
    check "tree show 0 --dot: dot accepts it" \
        bash -c "$(printf %q "$BIN/sharpctl") --socket $DIR/fabric/am.sock tree show 0 --dot | dot -Tsvg >/dev/null"
    check "tree show 0 --png: a PNG" \
        bash -c "$(printf %q "$BIN/sharpctl") --socket $DIR/fabric/am.sock tree show 0 --png $DIR/t.png >/dev/null && head -c 8 $DIR/t.png | grep -q PNG"
    # the file name reaches dot as an argument: quotes and ; in it are a name
    check "tree show 0 --png with a quote and ; in the name: that file, no shell" \
        bash -c 'cd "$1" && "$2" --socket "$1/fabric/am.sock" tree show 0 \
            --png "o'"'"'dd; touch pwned; '"'"'.png" >/dev/null &&
            head -c 8 "o'"'"'dd; touch pwned; '"'"'.png" | grep -q PNG && [ ! -e pwned ]' \
        _ "$DIR" "$BIN/sharpctl"
fi
check "topology show --json: 6 switches, 8 hosts" \
    test "$(ctl topology show --json | jq -c '[.switches, .hosts]')" = "[6,8]"
check "stats --json: counters" \
    test "$(ctl stats --json | jq '.tree_builds >= 1')" = true
check "status --json: a single manager, active, epoch 1, no peers" \
    test "$(ctl status --json | jq -c '[.role, .epoch, .active.epoch, (.peers | length)]')" = '["active",1,1,0]'
check "status: says which one is active" \
    bash -c "$(printf %q "$BIN/sharpctl") --socket $(printf %q "$DIR/fabric/am.sock") status | grep -q '^active .* epoch 1\$'"
check "topology generate fat-tree: parses" \
    bash -c "$(printf %q "$BIN/sharpctl") topology generate fat-tree --radix 4 --hosts 8 >$DIR/g.ibnd && $(printf %q "$BIN/sharp-topo") diff $DIR/g.ibnd $DIR/ft.ibnd >/dev/null"
check "config dump: every daemon's options with docs" \
    bash -c "out=\$($(printf %q "$BIN/sharpctl") config dump) && echo \"\$out\" | grep -q '^admin_socket = ' &&
             echo \"\$out\" | grep -q '^# ---- sharpd' && echo \"\$out\" | grep -q '^secret_file = '"
check "version" bash -c "$(printf %q "$BIN/sharpctl") version | grep -q '^sharpctl '"
ctl job kill 12345 2>/dev/null
check "job kill of an unknown job: exit 1" test $? = 1
"$BIN/sharpctl" --socket "$DIR/nonexistent.sock" ans 2>"$DIR/err"
rc=$?
check "manager unreachable: exit 3, the socket named" \
    bash -c "[ $rc = 3 ] && grep -q nonexistent.sock $DIR/err"
ctl frobnicate 2>/dev/null
check "unknown command: exit 2" test $? = 2
ctl tree show x 2>/dev/null
check "bad tree id: exit 2" test $? = 2
ctl tree show 9 2>/dev/null
check "no such tree: exit 1" test $? = 1
check "--help" bash -c "$(printf %q "$BIN/sharpctl") --help | grep -q 'Exit status'"
for c in ans an trees tree groups jobs job topology status stats config version; do
    check "$c --help" bash -c "$(printf %q "$BIN/sharpctl") $c --help | grep -q '^Usage: sharpctl $c'"
done
check "empty lists" test "$(ctl jobs)" = "no jobs"

# an administrator's settings: drain an AN, freeze a tree, and back
check "an drain leaf01 --reason: exit 0" ctl an drain leaf01 --reason "new optics"
check "ans --json: leaf01 drained, with the reason; the others not" \
    test "$(ctl ans --json | jq -c '[.[] | select(.drained) | [.name, .drain_reason]]')" = '[["leaf01","new optics"]]'
check "ans: leaf01 up, drained" \
    bash -c "$(printf %q "$BIN/sharpctl") --socket $DIR/fabric/am.sock ans | grep -q '^leaf01 .* up, drained '"
check "tree freeze 1 --reason: exit 0" ctl tree freeze 1 --reason=testing
check "trees --json: tree 1 frozen, with the reason; tree 0 not" \
    test "$(ctl trees --json | jq -c '[.[] | [.id, .frozen, .freeze_reason]]')" = '[[0,false,null],[1,true,"testing"]]'
check "trees: tree 1 up, frozen" \
    bash -c "$(printf %q "$BIN/sharpctl") --socket $DIR/fabric/am.sock trees | grep -q '^1 .* up, frozen\$'"
ctl an drain nosuch 2>"$DIR/err"
check "an drain of an unknown AN: exit 1, said so" \
    bash -c "[ $? = 1 ] && grep -q 'no AN nosuch' $DIR/err"
ctl tree freeze 9 2>/dev/null
check "tree freeze of no such tree: exit 1" test $? = 1
ctl tree freeze x 2>/dev/null
check "tree freeze of a bad id: exit 2" test $? = 2
ctl an drain leaf01 --bogus 2>/dev/null
check "an drain with an unknown option: exit 2" test $? = 2
check "an undrain leaf01, tree thaw 1: exit 0" \
    bash -c "$(printf %q "$BIN/sharpctl") --socket $DIR/fabric/am.sock an undrain leaf01 >/dev/null &&
             $(printf %q "$BIN/sharpctl") --socket $DIR/fabric/am.sock tree thaw 1 >/dev/null"
check "nothing drained or frozen any more" \
    test "$(ctl ans --json | jq '[.[] | select(.drained)] | length'),$(ctl trees --json | jq '[.[] | select(.frozen)] | length')" = 0,0

# topology load: a smaller fabric, a broken file, the original again
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 6 >"$DIR/ft6.ibnd"
check "topology load: 6 hosts" ctl topology load "$DIR/ft6.ibnd"
check "topology show: the new file, 6 hosts" \
    test "$(ctl topology show --json | jq -c '[.hosts, (.file | endswith("ft6.ibnd"))]')" = "[6,true]"
check "trees rebuilt over the new fabric" \
    test "$(ctl trees --json | jq '[.[] | .hosts] | max')" = 6
sed 's/^switch\(.*\)"leaf02"/switch\1leaf02/' "$DIR/ft.ibnd" >"$DIR/bad.ibnd"
echo 'Switch 4 "S-garbage' >>"$DIR/bad.ibnd"
ctl topology load "$DIR/bad.ibnd" 2>"$DIR/err"
rc=$?
check "a broken file: exit 1, file:line named, nothing changed" \
    bash -c "[ $rc = 1 ] && grep -q 'bad.ibnd:[0-9]' $DIR/err &&
             [ \$($(printf %q "$BIN/sharpctl") --socket $DIR/fabric/am.sock topology show --json | jq .hosts) = 6 ]"
check "topology load: back to 8 hosts" ctl topology load "$DIR/ft.ibnd"
for _ in $(seq 50); do # the two dropped sharpds come back (backoff)
    [ "$(ctl trees --json | jq '[.[] | .hosts] | max')" = 8 ] && break
    sleep 0.1
done
check "trees span 8 hosts again" test "$(ctl trees --json | jq '[.[] | .hosts] | max')" = 8

# sharp-fabric kill / start, as the chaos soak uses them: kill returns once
# the daemon is gone, start once it listens again, and the manager takes it
# back
pid_of() { awk -v n="$1" '$2 == n { p = $4 } END { print p }' "$DIR/fabric/pids"; }
leaf01() { ctl ans --json | jq -r '.[] | select(.name == "leaf01") | "\(.state) \(.registrations)"'; }
old=$(pid_of leaf01)
# gone when it returns: status says dead at once (no such process, or a
# zombie, as nothing may reap orphans here)
fabric kill leaf01
check "sharp-fabric kill leaf01: exit 0, dead when it returns" \
    bash -c "[ $? = 0 ] && $(printf %q "$BIN/sharp-fabric") --dir $DIR/fabric status |
             grep -q '^an *leaf01 .* dead\$'"
for _ in $(seq 50); do [ "$(leaf01)" = "down 1" ] && break; sleep 0.1; done
check "the manager has leaf01 down" test "$(leaf01)" = "down 1"
fabric kill leaf01 2>"$DIR/err"
check "sharp-fabric kill of a dead daemon: exit 1, said so" \
    bash -c "[ $? = 1 ] && grep -q 'not running' $DIR/err"
fabric start leaf01
check "sharp-fabric start leaf01: exit 0, a new process" \
    bash -c "[ $? = 0 ] && [ $(pid_of leaf01) != $old ] && kill -0 $(pid_of leaf01)"
fabric start leaf01 2>"$DIR/err"
check "sharp-fabric start of a running daemon: exit 1, said so" \
    bash -c "[ $? = 1 ] && grep -q 'is running' $DIR/err"
for _ in $(seq 100); do [ "$(leaf01)" = "up 2" ] && break; sleep 0.1; done
check "the manager has leaf01 back (registered twice)" test "$(leaf01)" = "up 2"

if [ "${SAN:-0}" != 1 ]; then
    # a live job: 4 ranks looping allreduces for up to 60 s (aborting when
    # sharp fails: the default would go on over MPI after job kill)
    SHARP_FABRIC_DIR="$DIR/fabric" timeout 90 mpirun.openmpi --allow-run-as-root \
        --oversubscribe --mca mpi_yield_when_idle 1 -np 4 -x LD_LIBRARY_PATH="$LIB" \
        -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" -x SHARP_FABRIC_DIR \
        -x SHARP_COLL_LOG_LEVEL=0 -x SHARP_MPI_ON_FAULT=abort "$BIN/sharp-fabric" rank -- \
        "$BIN/sharp_mpi_demo_ompi" --loop 60 >"$DIR/job.out" 2>&1 &
    job=$!
    for _ in $(seq 100); do
        [ "$(ctl groups --json | jq 'length')" -ge 1 ] 2>/dev/null && break
        sleep 0.1
    done
    jid=$(ctl jobs --json | jq -r '.[0].job_id')
    sleep 1 # two rounds of AN counters
    check "ans --json: operations per second while the job runs" \
        test "$(ctl ans --json | jq '[.[] | .ops_per_s] | max > 0')" = true
    check "jobs --json: the job, 4 hosts" \
        test "$(ctl jobs --json | jq '.[0].hosts | length')" = 4
    check "groups --job J --json: its world group of 4 members" \
        test "$(ctl groups --job "$jid" --json | jq '[.[] | select(.members == 4)] | length >= 1')" = true
    check "groups: a table within 80 columns" \
        bash -c "out=\$($(printf %q "$BIN/sharpctl") --socket $DIR/fabric/am.sock groups) &&
                 echo \"\$out\" | grep -q '^GROUP' &&
                 [ \$(echo \"\$out\" | awk '{ if (length > m) m = length } END { print m }') -le 80 ]"
    ctl topology load "$DIR/ft.ibnd" 2>"$DIR/err"
    rc=$?
    check "topology load while a job runs: refused (exit 1)" \
        bash -c "[ $rc = 1 ] && grep -q 'running' $DIR/err"
    check "job kill J: exit 0" ctl job kill "$jid"
    wait "$job"
    rc=$?
    job=
    check "the killed job ends with an error, not a hang" test $rc != 0 -a $rc != 124
    check "no jobs left" test "$(ctl jobs --json | jq 'length')" = 0
fi
[ $fails -eq 0 ]
