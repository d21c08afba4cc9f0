#!/usr/bin/env bash
# The manager is no single point of failure (docs/am.md, Faults): an
# 8-rank Open MPI job through libsharp_mpi runs a stream of checked
# collectives (tests/mpi-coll/mpi_fault.c, 6000 calls, over 10000
# allreduces among them) while sharp_am is killed -9 and started again:
#
# 1. the job keeps its offload: every result right, 0 calls on MPI (the
#    MPI layer's report), the ANs' operation counters grow while no
#    manager runs (SIGUSR1 dumps), a job started during the outage waits
#    and then gets its groups (no call on MPI either), the restarted
#    manager says it took the groups back; a third job whose processes are
#    all ended during the outage (no sharpd reports it) has its groups
#    revoked with that reason (sharpctl adoption, the log);
# 2. a leaf AN killed and started again during the outage (it comes back
#    without its groups, its neighbours report them failed): the groups
#    through it are revoked with the reason, the streaming job finishes
#    right;
# 3. with a standby manager (sharp-fabric up --standby): the active one
#    killed -9 in the middle of the stream; the standby takes over (epoch
#    2, sharpctl status), takes the groups back; every result right, 0
#    calls on MPI; a job begun during the takeover gets its groups; the
#    old manager started again comes back as standby;
# 4. a member host's sharpd paused (SIGSTOP) past the manager's keepalives
#    (a sharpd starved of CPU, as a loaded host's can be: its groups
#    failed with "lost the child link" before sharpd_grace): the
#    manager holds the host's share for sharpd_grace, the sharpd resumed
#    registers again and reports the job, and the job keeps its groups:
#    every result right, 0 calls on MPI.
set -u
. "$(dirname "$0")/lib.sh"
command -v mpirun.openmpi >/dev/null || { echo "skip: no Open MPI"; exit 77; }
DIR=$(mktemp -d /tmp/sharp-test-adopt.XXXXXX)
FAB="$DIR/fabric"
NET=127.36
fabric() { "$BIN/sharp-fabric" --dir "$FAB" "$@"; }
ctl() { "$BIN/sharpctl" --socket "$FAB/am.sock" "$@"; }
cleanup() {
    fabric down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

"$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft8.ibnd"

# groups over the levels (a leaf AN on the path of its hosts), adoption
# over within 15 s of the restart (more than the 5 s of the peers' longest
# backoff)
up() { # [--standby]
    fabric down >/dev/null 2>&1
    SHARP_AM_FLAT_MAX=0 SHARP_AM_ADOPT_TIMEOUT=15s fabric up "$DIR/ft8.ibnd" \
        --net $NET "$@" >/dev/null || { echo "fabric up failed"; return 1; }
}
pid_of() { awk -v k="$1" -v n="$2" '$1 == k && $2 ~ n { print $4 }' "$FAB/pids"; }

# a daemon (KIND NAME) killed -9, and (start) started again as it was
# (command line, environment)
AM_PID=
kill_daemon() {
    local kind=$1 name=$2 pid
    pid=$(pid_of "$kind" "$name")
    mapfile -d '' CMD <"/proc/$pid/cmdline"
    mapfile -d '' ENV <"/proc/$pid/environ"
    KILLED=$pid
    kill -9 "$pid"
}
start_again() { # KIND NAME LOG
    env -i "${ENV[@]}" setsid "${CMD[@]}" >>"$3" 2>&1 </dev/null &
    sed -i "s/^$1 $2 \(.*\) $KILLED\$/$1 $2 \1 $!/" "$FAB/pids"
}

# the operations every AN folded: each dumps its state on SIGUSR1
ops_sum() {
    local n0 pid log
    for log in "$FAB"/logs/an-*.log; do
        n0=$(grep -c 'state: .* operations folded' "$log")
        pid=$(pid_of an "$(basename "$log" .log | sed 's/^an-//')")
        kill -USR1 "$pid"
        for _ in $(seq 50); do
            [ "$(grep -c 'state: .* operations folded' "$log")" -gt "$n0" ] && break
            sleep 0.1
        done
    done
    local s=0 f v
    for f in "$FAB"/logs/an-*.log; do
        v=$(grep 'state: .* operations folded' "$f" | tail -1 |
            sed 's/.*, \([0-9]*\) operations folded.*/\1/')
        s=$((s + ${v:-0}))
    done
    echo $s
}

OMPI=(mpirun.openmpi --allow-run-as-root --oversubscribe
      --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp)
job() { # OUT ARGS...: the stream in the background ($!)
    local out=$1
    shift
    timeout 150 "${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" \
        "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" -x SHARP_MPI_VERBOSE=1 \
        -x SHARP_COLL_LOG_LEVEL=1 -x SHARP_FABRIC_DIR="$FAB" \
        "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_fault_ompi" "$@" \
        >"$out" 2>&1 &
}
wait_file() { # FILE SECONDS
    for _ in $(seq $(($2 * 10))); do
        [ -e "$1" ] && return 0
        sleep 0.1
    done
    return 1
}
wait_log() { # FILE REGEX SECONDS
    for _ in $(seq $(($3 * 10))); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
# a line matching REGEX in FILE beyond the first N (a line the manager
# logs again after its restart)
wait_more() { # FILE REGEX N SECONDS
    for _ in $(seq $(($4 * 10))); do
        [ "$(grep -c "$2" "$1" 2>/dev/null)" -gt "$3" ] && return 0
        sleep 0.1
    done
    return 1
}
# the report's counts: offloaded and on MPI, summed over collectives
counts() {
    awk '$1 == "sharp_mpi:" && $2 ~ /^MPI_/ { o += $3; f += $5 }
         END { print o + 0, f + 0 }' "$1"
}
allreduces() {
    awk '$1 == "sharp_mpi:" && $2 == "MPI_Allreduce" { print $3 + 0 }' "$1"
}
show() { # OUT
    grep '^sharp_mpi' "$1" | head -20
    grep -v '^\s*$' "$1" | grep -v '^sharp_mpi' | tail -15
    echo "  the manager's log:"
    tail -25 "$FAB/logs/am.log" 2>/dev/null | sed 's/^/  /'
}

# a stream of CALLS checked calls that signals at call 1000 and waits at
# call PAUSE until the file GO exists; returns when it reached call 1000,
# its pid in $spid
stream() { # OUT CALLS PAUSE GO
    rm -f "$DIR/sig" "$4" "$4.paused"
    job "$1" --calls "$2" --signal-at 1000 "$DIR/sig" --pause-at "$3" "$4"
    spid=$!
    if ! wait_file "$DIR/sig" 90; then
        bad "the stream never reached call 1000"
        show "$1"
        exit 1
    fi
}

# the stream in OUT, ended with RC, kept its offload: every result right,
# 0 calls on MPI, some offloaded (and at least MIN allreduces)
kept() { # WHAT OUT RC [MIN]
    local o f n
    read -r o f < <(counts "$2")
    n=$(allreduces "$2")
    if [ "$3" = 0 ] && grep -q "every result right" "$2" &&
        ! grep -q WRONG "$2" && [ "$o" -gt 0 ] && [ "$f" = 0 ] &&
        [ "${n:-0}" -ge "${4:-0}" ]; then
        ok "$1: every result right, $o calls offloaded ($n allreduces)," \
            "0 on MPI"
    else
        bad "$1 (exit $3, $o offloaded, $f on MPI)"
        show "$2"
    fi
}

# the job the restarted manager took back (the only one in case 2)
taken_job() {
    grep -o 'job [0-9]* of uid [0-9]* taken back' "$FAB/logs/am.log" |
        awk '{ print $2; exit }'
}

# ADOPT_ONLY=1|2: only that case
case1() {
# 1. the manager killed -9 and started again in the middle of the stream
t0=$SECONDS
up || exit 1
rm -f "$DIR/sig"
rm -f "$DIR/never" "$DIR/never.paused" "$DIR/go" "$DIR/go.paused"
job "$DIR/d.out" --calls 6000 --pause-at 100 "$DIR/never" # to be ended
dpid=$!
# (it waits at call 2000 until the restarted manager took groups back: on
# a quiet host it would end before the manager is back)
job "$DIR/a.out" --calls 6000 --signal-at 1000 "$DIR/sig" --pause-at 2000 "$DIR/go"
apid=$!
if ! wait_file "$DIR/sig" 90 || ! wait_file "$DIR/never.paused" 90; then
    bad "the streams never reached their marks"
    show "$DIR/a.out"
    exit 1
fi
kill_daemon am sharp_am
ops0=$(ops_sum)
kill "$dpid" # the processes of this job go while no manager runs
wait "$dpid" 2>/dev/null
job "$DIR/b.out" --calls 3000 # begins while no manager runs
bpid=$!
sleep 2
ops1=$(ops_sum)
nt=$(grep -c 'taken back on tree' "$FAB/logs/am.log")
no=$(grep -c 'adoption over' "$FAB/logs/am.log")
start_again am sharp_am "$FAB/logs/am.log"
wait_more "$FAB/logs/am.log" 'taken back on tree' "$nt" 30
touch "$DIR/go"
wait $apid
arc=$?
wait $bpid
brc=$?
adopted=$(grep -c 'taken back on tree' "$FAB/logs/am.log")
kept "manager killed -9 and restarted" "$DIR/a.out" $arc 10000
if [ "$ops1" -gt "$ops0" ]; then
    ok "the ANs folded $((ops1 - ops0)) operations in 2 s without a manager"
else
    bad "the ANs' counters did not grow without a manager ($ops0 -> $ops1)"
fi
kept "a job begun during the outage waited and got its groups" "$DIR/b.out" $brc
if [ "$adopted" -gt 0 ] && ctl adoption | grep -q 'groups_adopted'; then
    ok "the restarted manager took $adopted groups back ($((SECONDS - t0)) s)"
else
    bad "the restarted manager took no group back"
    tail -30 "$FAB/logs/am.log"
fi
wait_more "$FAB/logs/am.log" 'adoption over' "$no" 30
ctl adoption >"$DIR/adoption.txt" 2>&1
if grep -q "no sharpd reported job" "$DIR/adoption.txt" &&
    grep -q "no sharpd reported job" "$FAB/logs/am.log"; then
    ok "the groups of a job whose processes went during the outage are revoked"
else
    bad "the groups of the job that went are not revoked with their reason"
    cat "$DIR/adoption.txt"
    tail -30 "$FAB/logs/am.log"
fi

}

case2() {
# 2. what cannot be taken back: a leaf AN that came back without its
# groups (the failure reached the group's other ANs too: they report it
# failed)
t0=$SECONDS
up || exit 1
# (it waits at call 1500 until the restarted manager's adoption is over:
# its groups are still held then, and reported)
stream "$DIR/c.out" 3000 1500 "$DIR/go2"
cpid=$spid
kill_daemon am sharp_am
AM_CMD=("${CMD[@]}")
AM_ENV=("${ENV[@]}")
leaf=$(awk '$1 == "an" && $2 ~ /leaf/ { print $2; exit }' "$FAB/pids")
kill_daemon an "^$leaf\$"
start_again an "$leaf" "$FAB/logs/an-$leaf.log"
sleep 1
CMD=("${AM_CMD[@]}")
ENV=("${AM_ENV[@]}")
KILLED=$(pid_of am sharp_am)
no=$(grep -c 'adoption over' "$FAB/logs/am.log")
start_again am sharp_am "$FAB/logs/am.log"
wait_more "$FAB/logs/am.log" 'adoption over' "$no" 30
touch "$DIR/go2"
wait $cpid
crc=$?
read -r co cf < <(counts "$DIR/c.out")
ctl adoption >"$DIR/adoption.txt" 2>&1
if grep -q "of job $(taken_job).*\(came back without it\|reports it failed\|no AN reported it\)" \
    "$DIR/adoption.txt"; then
    ok "the groups through a leaf AN that came back without them are revoked"
elif grep -q "^groups_adopted *0$" "$DIR/adoption.txt" &&
    grep -q "^groups_revoked *0$" "$DIR/adoption.txt"; then
    # on a loaded host the members may fail those groups (the lost leaf's
    # links) and give them up before the manager is back: then nobody
    # reports them and nothing is taken back, which is as right
    ok "the groups through the restarted leaf AN were given up before the" \
        "manager came back: none taken back"
else
    bad "the groups through the restarted leaf AN are not revoked with their reason"
    cat "$DIR/adoption.txt"
fi
if [ $crc = 0 ] && grep -q "every result right" "$DIR/c.out" &&
    ! grep -q WRONG "$DIR/c.out"; then
    ok "the streaming job finished right ($co offloaded, $cf on MPI, $((SECONDS - t0)) s)"
else
    bad "the streaming job (exit $crc, $co offloaded, $cf on MPI)"
    show "$DIR/c.out"
fi
}

# the epoch on sharpctl status's line WHO (this, active)
epoch_of() { awk -v w="$2" '$1 == w { print $NF; exit }' "$1"; }

case3() {
# 3. a standby takes over from the active manager killed -9
t0=$SECONDS
up --standby || exit 1
AM2="$FAB/logs/am2.log"
ctl2() { "$BIN/sharpctl" --socket "$FAB/am2.sock" "$@"; }
# (it waits at call 2000 until the new active took its groups back)
stream "$DIR/e.out" 6000 2000 "$DIR/go3"
epid=$spid
ctl2 status >"$DIR/status0.txt" 2>&1
fabric kill sharp_am >/dev/null
job "$DIR/f.out" --calls 3000 # begins during the takeover
fpid=$!
wait_more "$AM2" 'taken back on tree' 0 30
touch "$DIR/go3"
wait $epid
erc=$?
wait $fpid
frc=$?
adopted=$(grep -c 'taken back on tree' "$AM2")
ctl2 status >"$DIR/status.txt" 2>&1
ep0=$(epoch_of "$DIR/status0.txt" active)
ep1=$(epoch_of "$DIR/status.txt" this)
if grep -q '^this .* standby since' "$DIR/status0.txt" &&
    grep -q '^this .* active since' "$DIR/status.txt" &&
    [ "${ep1:-0}" -gt "${ep0:-0}" ] && [ "$adopted" -gt 0 ]; then
    ok "the standby took over (epoch $ep0 -> $ep1) and took $adopted groups back"
else
    bad "the standby's takeover ($adopted groups taken back)"
    cat "$DIR/status0.txt" "$DIR/status.txt"
    tail -30 "$AM2"
fi
kept "active manager killed -9, standby took over" "$DIR/e.out" $erc 10000
kept "a job begun during the takeover waited and got its groups" "$DIR/f.out" $frc
# the old active, started again (as systemd would), is the standby now
fabric start sharp_am >/dev/null 2>&1
for _ in $(seq 100); do
    ctl status 2>/dev/null | grep -q '^this .* standby since' && break
    sleep 0.1
done
ctl2 status >"$DIR/status2.txt" 2>&1
if ctl status 2>&1 | grep -q '^this .* standby since' &&
    grep -q '^this .* active since' "$DIR/status2.txt" &&
    [ "$(epoch_of "$DIR/status2.txt" this)" = "$ep1" ]; then
    ok "the old manager came back as standby; epoch $ep1 stays ($((SECONDS - t0)) s)"
else
    bad "the old manager started again is not the standby"
    ctl status
    ctl2 status
    tail -20 "$FAB/logs/am.log"
fi
}

case4() {
# 4. a member's sharpd paused past the manager's keepalives, then resumed
t0=$SECONDS
up || exit 1
stream "$DIR/g.out" 6000 2000 "$DIR/go4"
gpid=$spid
sd=$(pid_of sharpd n00004)
nh=$(grep -c 'AM0203 the sharpd of n00004' "$FAB/logs/am.log")
nb=$(grep -c 'sharpd of n00004 is back within sharpd_grace' "$FAB/logs/am.log")
kill -STOP "$sd"
# the manager drops it after 3 keepalives (2 s each)
wait_more "$FAB/logs/am.log" 'AM0203 the sharpd of n00004' "$nh" 20
dropped=$?
kill -CONT "$sd"
wait_more "$FAB/logs/am.log" 'sharpd of n00004 is back within sharpd_grace' "$nb" 15
back=$?
touch "$DIR/go4"
wait $gpid
grc=$?
if [ $dropped = 0 ] && [ $back = 0 ] &&
    ! grep -q 'AM0202 the sharpd of n00004' "$FAB/logs/am.log"; then
    ok "a sharpd paused past the keepalives: dropped, held, back within" \
        "sharpd_grace, its host's share kept"
else
    bad "the paused sharpd (dropped: $dropped, back: $back)"
    grep 'n00004' "$FAB/logs/am.log" | tail -10
fi
kept "the job through the paused sharpd ($((SECONDS - t0)) s)" "$DIR/g.out" $grc
}

[ "${ADOPT_ONLY:-1}" != 1 ] || case1
[ "${ADOPT_ONLY:-2}" != 2 ] || case2
[ "${ADOPT_ONLY:-3}" != 3 ] || case3
[ "${ADOPT_ONLY:-4}" != 4 ] || case4
[ $fails -eq 0 ]
