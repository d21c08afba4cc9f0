#!/usr/bin/env bash
# libsharp_mpi survives a failed fabric (SHARP_MPI_ON_FAULT=fallback, the
# default; docs/mpi.md, failure protocol): a stream of 10k mixed
# allreduce/reduce/bcast/barrier calls on four communicators
# (tests/mpi-coll/mpi_fault.c, every result checked) while a daemon is killed
# with SIGKILL: a leaf AN, the top ANs, a member's sharpd, the manager
# (restarted: the job keeps its offload, nothing falls back), a leaf AN
# between collectives, the top ANs during MPI_Finalize; the world's top AN
# with standby groups (nothing on MPI) and without; that AN killed and
# restarted, then the new pair's (two failovers, nothing on MPI); Open MPI 8 ranks
# (one and two per host), MPICH. Each job must finish, every result
# right, the report counting the calls that fell back; each case is
# bounded.  With SHARP_MPI_ON_FAULT=abort the job
# aborts naming the failure.
set -u
. "$(dirname "$0")/lib.sh"
command -v mpirun.openmpi >/dev/null || { echo "skip: no Open MPI"; exit 77; }
DIR=$(mktemp -d /tmp/sharp-test-fault.XXXXXX)
FAB="$DIR/fabric"
fabric() { "$BIN/sharp-fabric" --dir "$FAB" "$@"; }
cleanup() {
    fabric down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

"$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft8.ibnd"
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft4.ibnd"

# a fresh fabric of levels (a leaf AN is on the path of its hosts)
up() {
    fabric down >/dev/null 2>&1
    SHARP_AM_FLAT_MAX=0 fabric up "$1" --net "$2" >/dev/null ||
        { echo "fabric up failed"; return 1; }
}
pid_of() { awk -v k="$1" -v n="$2" '$1 == k && $2 ~ n { print $4 }' "$FAB/pids"; }
GROUPS_PY=$(cd "$(dirname "$0")/../support" && pwd)/groups.py
# the top AN of the first group the manager lists that is not a standby
# (the world's)
top_an() {
    "$BIN/sharpctl" --socket "$FAB/am.sock" --json groups |
        python3 "$GROUPS_PY" primary
}

# the manager killed and started again as it was (command line, environment)
restart_am() {
    local pid cmd
    pid=$(pid_of am sharp_am)
    mapfile -d '' cmd <"/proc/$pid/cmdline"
    local env=()
    mapfile -d '' env <"/proc/$pid/environ"
    kill -9 "$pid"
    sleep 1
    env -i "${env[@]}" setsid "${cmd[@]}" >>"$FAB/logs/am.log" 2>&1 </dev/null &
    sed -i "s/^am sharp_am \(.*\) $pid\$/am sharp_am \1 $!/" "$FAB/pids"
}

OMPI=(mpirun.openmpi --allow-run-as-root --oversubscribe
      --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp)

# job MPI NP OUT ARGS...: the stream in the background ($job)
job() {
    local mpi=$1 np=$2 out=$3
    shift 3
    if [ "$mpi" = ompi ]; then
        timeout 150 "${OMPI[@]}" -np "$np" -x LD_LIBRARY_PATH="$LIB" \
            "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" -x SHARP_MPI_VERBOSE=1 \
            -x SHARP_COLL_LOG_LEVEL=1 -x SHARP_FABRIC_DIR="$FAB" \
            ${EXTRA:+-x "$EXTRA"} \
            "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_fault_ompi" "$@" \
            >"$out" 2>&1 &
    else
        timeout 150 mpiexec.mpich -n "$np" -genv LD_LIBRARY_PATH "$LIB" \
            "${SAN_MPICH[@]}" -genv LD_PRELOAD "$SAN_PRE$LIB/libsharp_mpi_mpich.so" \
            -genv SHARP_MPI_VERBOSE 1 -genv SHARP_COLL_LOG_LEVEL 1 \
            -genv SHARP_FABRIC_DIR "$FAB" \
            "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_fault_mpich" "$@" \
            >"$out" 2>&1 &
    fi
    jobpid=$!
}

wait_file() { # FILE SECONDS
    local t
    for t in $(seq $(($2 * 10))); do
        [ -e "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

# the report's counts: offloaded and fallen back, summed over collectives
counts() {
    awk '$1 == "sharp_mpi:" && $2 ~ /^MPI_/ { o += $3; f += $5 }
         END { print o + 0, f + 0 }' "$1"
}

# verdict NAME RC OUT [nofault|regroup|kept|failover]: the stream right,
# offloaded before, and (unless nofault, kept or failover) some calls fell
# back after the fault; regroup: and a communicator got a group again
# afterwards; kept: no call fell back (the fault took no offload away);
# failover: no call fell back, and the report counts failovers to a
# standby group (the fault hit a group that carried calls)
verdict() {
    local name=$1 rc=$2 out=$3 o f rec fo
    read -r o f < <(counts "$out")
    rec=$(grep -o 'recovery: .*' "$out" | head -1)
    fo=$(awk '/sharp_mpi: standby groups:/ { print $4 }' "$out")
    [ "${4:-}" = failover ] && rec="${fo:-0} failover(s) to a standby${rec:+; $rec}"
    if [ "$rc" = 0 ] && grep -q "every result right" "$out" &&
        ! grep -q WRONG "$out" && [ "$o" -gt 0 ] &&
        { [ "${4:-}" = nofault ] || [ "${4:-}" = kept ] ||
          [ "${4:-}" = failover ] || [ "$f" -gt 0 ]; } &&
        { [ "${4:-}" != kept ] || [ "$f" = 0 ]; } &&
        { [ "${4:-}" != failover ] || { [ "$f" = 0 ] && [ "${fo:-0}" -gt 0 ]; }; } &&
        { [ "${4:-}" != regroup ] || grep -q ' [1-9][0-9]* group(s) made again' "$out"; }; then
        ok "$name: every result right in $SECONDS_CASE s; $o calls offloaded, $f on MPI${rec:+; $rec}"
    else
        bad "$name (exit $rc, $o offloaded, $f fell back)"
        # what the recovery said, then the end of the output and of the
        # manager's log (the fabric is gone with the next case)
        grep '^sharp_mpi' "$out" | head -20
        grep -v '^\s*$' "$out" | grep -v '^sharp_mpi' | tail -25
        echo "  the manager's log:"
        tail -15 "$FAB/logs/am.log" 2>/dev/null | sed 's/^/  /'
    fi
}

# mid NAME MPI NP TOPO NET ACTION [VERDICT [ARGS...]]: kill during the
# stream (after call 1500); ARGS to mpi_fault
mid() {
    local name=$1 mpi=$2 np=$3 topo=$4 net=$5 action=$6 out="$DIR/$1.out"
    local t0=$SECONDS
    [ -z "${FAULT_ONLY:-}" ] || [[ "$name" == *$FAULT_ONLY* ]] || return 0
    up "$topo" "$net" || { bad "$name: fabric"; return; }
    rm -f "$DIR/sig"
    job "$mpi" "$np" "$out" --signal-at 1500 "$DIR/sig" "${@:8}"
    if wait_file "$DIR/sig" 90; then
        eval "$action"
    else
        echo "  ($name: the stream never reached call 1500)"
    fi
    wait $jobpid
    local rc=$?
    SECONDS_CASE=$((SECONDS - t0)) verdict "$name" $rc "$out" "${7:-}"
}

mid "leaf AN killed (Open MPI, 8 ranks)" ompi 8 "$DIR/ft8.ibnd" 127.33 \
    'kill -9 $(pid_of an leaf02)'
# small bcasts only (free: each root's alone, the others send nothing, so
# the members are apart: rank 1 lags), the world's top AN killed: the
# members behind take the results the others completed (the recovery's
# window), the rest goes on through the standby group
# (rank 1 is out of MPI for a second from call 1500: it takes what it
# missed from the others' records)
name="free bcasts, a member behind, the top AN killed (Open MPI, 8 ranks)"
mid "$name" ompi 8 "$DIR/ft8.ibnd" 127.33 \
    'kill -9 $(pid_of an "^$(top_an)\$")' failover --bcasts
if [ -e "$DIR/$name.out" ] &&
    ! grep -q ' [1-9][0-9]* result(s) fetched' "$DIR/$name.out"; then
    bad "$name: the member behind fetched no result"
fi
# the world's top AN: its communicators go on through their standby
# groups, on the other spine's tree (SHARP_MPI_STANDBY, the default):
# nothing goes to MPI
mid "the top AN killed (Open MPI, 8 ranks)" ompi 8 "$DIR/ft8.ibnd" 127.33 \
    'kill -9 $(pid_of an "^$(top_an)\$")' failover
# without standby groups: the communicators go to MPI, and get groups
# again after SHARP_MPI_REGROUP_CALLS calls on MPI on the other spine
EXTRA=SHARP_MPI_STANDBY=0 \
mid "the top AN killed, no standby (Open MPI, 8 ranks)" ompi 8 "$DIR/ft8.ibnd" 127.33 \
    'kill -9 $(pid_of an "^$(top_an)\$")' regroup
# the group of the world whose standby another group is (a pair: the
# primary and its standby): "ID TOP-AN" of the primary, nothing if none
pair_primary() {
    "$BIN/sharpctl" --socket "$FAB/am.sock" --json groups 2>/dev/null |
        python3 "$GROUPS_PY" pair
}

# Two failures in a row, neither seen: the AN carrying the world's group
# (tests/mpi-coll/mpi_stream.c: one communicator) killed and started again
# at once; the communicator goes on through its standby, makes a new one
# (SHARP_MPI_STANDBY_AFTER, 2 s, after the failure: the restarted AN is
# back in the trees by then), and then that pair's primary AN is killed
# too: a second failover, still nothing on MPI.
twice() {
    local name="the top AN killed, restarted, then the new one killed (Open MPI, 8 ranks)"
    local out=$DIR/twice.out t0=$SECONDS p1 p2 rc
    [ -z "${FAULT_ONLY:-}" ] || [[ "$name" == *$FAULT_ONLY* ]] || return 0
    fabric down >/dev/null 2>&1
    fabric up "$DIR/ft8.ibnd" --net 127.33 >/dev/null || { bad "$name: fabric"; return; }
    rm -f "$DIR/sig"
    timeout 150 "${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" \
        "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" -x SHARP_MPI_VERBOSE=1 \
        -x SHARP_FABRIC_DIR="$FAB" \
        "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_stream_ompi" \
        --calls 100000 --signal-at 1000 "$DIR/sig" >"$out" 2>&1 &
    jobpid=$!
    wait_file "$DIR/sig" 90 || echo "  (the stream never reached call 1000)"
    p1=$(pair_primary)
    fabric kill "${p1#* }" >/dev/null && fabric start "${p1#* }" >/dev/null
    # the new pair: a primary other than the first (the old standby)
    for _ in $(seq 300); do
        p2=$(pair_primary)
        [ -n "$p2" ] && [ "${p2% *}" != "${p1% *}" ] && break
        p2=
        sleep 0.1
    done
    [ -n "$p2" ] && fabric kill "${p2#* }" >/dev/null
    wait $jobpid
    rc=$?
    local o f fo re
    read -r o f < <(counts "$out")
    fo=$(awk '/sharp_mpi: standby groups:/ { print $4 }' "$out")
    re=$(sed -n 's/.*sharp_mpi: standby groups: .* \([0-9]*\) made again.*/\1/p' "$out")
    # the manager counts them too (sharpctl stats): takeovers, remade.  A
    # takeover is counted when the manager sees the AN's loss, or when the
    # members, having moved onto the standby first, destroy the failed
    # group (its group_destroy says failed, if libsharp_coll at its rank 0
    # saw the failure before: a member frozen before it posted may not
    # have).  So at least one, usually one per kill (test_am checks the
    # counting exactly)
    local am
    am=$("$BIN/sharpctl" --socket "$FAB/am.sock" --json stats | python3 -c '
import json, sys
s = json.load(sys.stdin)
s = s.get("stats", s)
print(s["standby_takeovers"], s["standbys_remade"])' 2>/dev/null)
    if [ $rc = 0 ] && grep -q "every result right" "$out" && [ -n "$p2" ] &&
        [ "$f" = 0 ] && [ "${fo:-0}" -ge 16 ] && [ "${re:-0}" -ge 8 ] &&
        [ "${am% *}" -ge 1 ] && [ "${am#* }" -ge 1 ] 2>/dev/null; then
        ok "$name: $((SECONDS - t0)) s; ${p1#* } then ${p2#* } killed; $o calls offloaded, 0 on MPI, $fo failovers, $re standbys made again (each counted by 8 members); the manager: ${am% *} takeovers, ${am#* } standbys made again"
    else
        bad "$name (exit $rc; pairs: ${p1:-none} then ${p2:-none}; $f on MPI, ${fo:-0} failovers, ${re:-0} made again; the manager's takeovers and remade: ${am:-none})"
        grep '^sharp_mpi' "$out" | tail -12
        echo "  the manager's log:"
        tail -15 "$FAB/logs/am.log" 2>/dev/null | sed 's/^/  /'
    fi
}
twice

mid "a member's sharpd killed (Open MPI, 8 ranks)" ompi 8 "$DIR/ft8.ibnd" 127.33 \
    'kill -9 $(awk "\$1 == \"sharpd\" { n++; if (n == 4) print \$4 }" "$FAB/pids")'
# the manager: the restarted one takes the groups back, nothing falls back
# (tests/mpi-coll/test_adopt.sh measures more)
mid "manager killed and restarted (Open MPI, 8 ranks)" ompi 8 "$DIR/ft8.ibnd" 127.33 \
    'restart_am' kept
mid "leaf AN killed, 2 ranks per host (Open MPI, 8 ranks, 4 hosts)" ompi 8 \
    "$DIR/ft4.ibnd" 127.34 'kill -9 $(pid_of an leaf02)'
mid "top ANs killed (MPICH, 2 ranks)" mpich 2 "$DIR/ft8.ibnd" 127.33 \
    'kill -9 $(pid_of an spine)'

# non-blocking operations in flight (tests/mpi-coll/mpi_stress.c: 16 at once on
# four communicators, mixed with MPI's own) when the leaf AN of the first
# hosts is killed: the job goes on, every result right, the failed
# operations and the later ones on those communicators redone on MPI (or
# their results fetched from a member that completed them); at two ranks a
# host (TOPO ft4, ARGS --ppn 2 ...) the operations take the node step (its
# exchange on shared memory up to the slot, NB_SLOT, on PMPI above), and
# the node leader's recovery reaches its node's ranks through it (a fetched
# result, or "redo on MPI" for every rank alike)
nbmid() { # NAME MPI NP NET [TOPO LEAF ARGS...]
    local name=$1 mpi=$2 np=$3 net=$4 topo=${5:-$DIR/ft8.ibnd} leaf=${6:-leaf01}
    local out="$DIR/nb-$2-$np.out" t0=$SECONDS rc
    shift 6 2>/dev/null || shift $#
    [ -z "${FAULT_ONLY:-}" ] || [[ "$name" == *$FAULT_ONLY* ]] || return 0
    up "$topo" "$net" || { bad "$name: fabric"; return; }
    rm -f "$DIR/sig"
    local args=(--seed 3 --seeds 3 --ops 2000 --signal-at 600 "$DIR/sig" "$@")
    if [ "$mpi" = ompi ]; then
        timeout 150 "${OMPI[@]}" -np "$np" -x LD_LIBRARY_PATH="$LIB" \
            "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" -x SHARP_MPI_VERBOSE=1 \
            -x SHARP_COLL_LOG_LEVEL=1 -x SHARP_FABRIC_DIR="$FAB" \
            -x SHARP_MPI_NODE_SHM_SLOT="${NB_SLOT:-65536}" \
            "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_stress_ompi" \
            "${args[@]}" >"$out" 2>&1 &
    else
        timeout 150 mpiexec.mpich -n "$np" -genv LD_LIBRARY_PATH "$LIB" \
            "${SAN_MPICH[@]}" -genv LD_PRELOAD "$SAN_PRE$LIB/libsharp_mpi_mpich.so:$LIB/libsharp_yield.so" \
            -genv SHARP_MPI_VERBOSE 1 -genv SHARP_COLL_LOG_LEVEL 1 \
            -genv SHARP_FABRIC_DIR "$FAB" \
            -genv SHARP_MPI_NODE_SHM_SLOT "${NB_SLOT:-65536}" \
            "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_stress_mpich" \
            "${args[@]}" >"$out" 2>&1 &
    fi
    jobpid=$!
    if wait_file "$DIR/sig" 90; then
        kill -9 $(pid_of an "$leaf")
    else
        echo "  ($name: the stream never reached 600 completions)"
    fi
    wait $jobpid
    rc=$?
    local rec redone
    rec=$(grep -o 'recovery: .*' "$out" | head -1)
    redone=$(echo "$rec" | sed -n 's/.* \([0-9]*\) result(s) fetched.* \([0-9]*\) call(s) redone.*/\1 \2/p')
    local shm
    shm=$(sed -n 's/.*node-local aggregation: \([0-9]*\) step(s) on shared memory.*/\1/p' "$out")
    if [ $rc = 0 ] && grep -q "every result right" "$out" &&
        [ -n "$redone" ] && [ "$redone" != "0 0" ] &&
        { [ $# = 0 ] || [ "${shm:-0}" -gt 100 ]; }; then
        ok "$name: every result right in $((SECONDS - t0)) s; $rec${shm:+; $shm node steps on shared memory}"
    else
        bad "$name (exit $rc${rec:+; $rec})"
        grep -v '^\s*$' "$out" | grep -v "^\[vm" | tail -25
        echo "  the manager's log:"
        tail -15 "$FAB/logs/am.log" 2>/dev/null | sed 's/^/  /'
    fi
}
nbmid "non-blocking collectives in flight, leaf AN killed (Open MPI, 8 ranks)" ompi 8 127.33
nbmid "non-blocking collectives in flight, leaf AN killed (MPICH, 8 ranks)" mpich 8 127.33
nbmid "non-blocking collectives in flight, leaf AN killed, 2 ranks per host (Open MPI, 8 ranks, 4 hosts)" \
    ompi 8 127.34 "$DIR/ft4.ibnd" leaf02 --ppn 2
# (MPICH with a 4 KiB slot: the node steps of larger operations take
# their exchange on PMPI, node_xchg.c, when the AN dies)
NB_SLOT=4096 nbmid "non-blocking collectives in flight, leaf AN killed, 2 ranks per host, exchange on PMPI above 4 KiB (MPICH, 8 ranks, 4 hosts)" \
    mpich 8 127.34 "$DIR/ft4.ibnd" leaf02 --ppn 2

# a rank of a node that does not come to a non-blocking collective (two
# ranks a host; rank 1, node rank 1 of the first host, away 60 s outside
# MPI) with SHARP_MPI_NODE_SHM_TIMEOUT=1500: its leader, waiting in
# MPI_Wait, aborts the job naming it (not a wait of 60 s, nor a result
# without it); both MPIs
nbstuck() { # MPI
    local mpi=$1 out="$DIR/nbstuck-$1.out" t0=$SECONDS rc
    [ -z "${FAULT_ONLY:-}" ] || [[ "node rank away" == *$FAULT_ONLY* ]] || return 0
    up "$DIR/ft4.ibnd" 127.34 || { bad "node rank away ($mpi): fabric"; return; }
    if [ "$mpi" = ompi ]; then
        timeout 50 "${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" \
            "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" -x SHARP_MPI_VERBOSE=1 \
            -x SHARP_MPI_NODE_SHM_TIMEOUT=1500 -x SHARP_FABRIC_DIR="$FAB" \
            "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_nb_ompi" \
            --stuck 1 60000 >"$out" 2>&1
    else
        timeout 50 mpiexec.mpich -n 8 -genv LD_LIBRARY_PATH "$LIB" \
            "${SAN_MPICH[@]}" -genv LD_PRELOAD "$SAN_PRE$LIB/libsharp_mpi_mpich.so:$LIB/libsharp_yield.so" \
            -genv SHARP_MPI_VERBOSE 1 -genv SHARP_MPI_NODE_SHM_TIMEOUT 1500 \
            -genv SHARP_FABRIC_DIR "$FAB" \
            "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_nb_mpich" \
            --stuck 1 60000 >"$out" 2>&1
    fi
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
        grep -q "the node-local step of MPI_Iallreduce failed: node rank 1 did not come in time" "$out" &&
        ! grep -q "completed" "$out"; then
        ok "a node rank away from a non-blocking allreduce ($mpi, 2 ranks a host): the job aborted in $((SECONDS - t0)) s naming it"
    else
        bad "a node rank away from a non-blocking allreduce ($mpi; exit $rc)"; tail -20 "$out"
    fi
}
nbstuck ompi
nbstuck mpich

# FAULT_ONLY=TEXT: only the mid-stream cases whose name has TEXT
[ -z "${FAULT_ONLY:-}" ] || { [ $fails -eq 0 ]; exit; }

# between collectives: every rank outside MPI when the leaf AN dies
name="leaf AN killed between collectives (Open MPI, 8 ranks)"
t0=$SECONDS
up "$DIR/ft8.ibnd" 127.33
rm -f "$DIR/go" "$DIR/go.paused"
job ompi 8 "$DIR/between.out" --calls 6000 --pause-at 3000 "$DIR/go"
if wait_file "$DIR/go.paused" 90; then
    kill -9 $(pid_of an leaf02)
    sleep 1
fi
touch "$DIR/go"
wait $jobpid
SECONDS_CASE=$((SECONDS - t0)) verdict "$name" $? "$DIR/between.out"

# during MPI_Finalize: the results are in; finalize must not hang
name="top ANs killed during MPI_Finalize (Open MPI, 8 ranks)"
t0=$SECONDS
up "$DIR/ft8.ibnd" 127.33
rm -f "$DIR/fin"
job ompi 8 "$DIR/fin.out" --calls 2000 --finalize "$DIR/fin"
wait_file "$DIR/fin" 90 && kill -9 $(pid_of an spine)
wait $jobpid
SECONDS_CASE=$((SECONDS - t0)) verdict "$name" $? "$DIR/fin.out" nofault

# SHARP_MPI_ON_FAULT=abort: the job aborts naming the failure, no hang
t0=$SECONDS
up "$DIR/ft8.ibnd" 127.33
rm -f "$DIR/sig"
EXTRA=SHARP_MPI_ON_FAULT=abort job ompi 8 "$DIR/abort.out" --signal-at 1500 "$DIR/sig"
wait_file "$DIR/sig" 90 && kill -9 $(pid_of an leaf02)
wait $jobpid
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "failed in the network" "$DIR/abort.out" &&
    ! grep -q "WRONG" "$DIR/abort.out"; then
    ok "SHARP_MPI_ON_FAULT=abort: the job aborted in $((SECONDS - t0)) s with the failure named"
else
    bad "SHARP_MPI_ON_FAULT=abort (exit $rc)"; tail -20 "$DIR/abort.out"
fi

# SHARP_MPI_ON_FAULT=abort keeps no record: results go straight into the
# caller's buffers (a reduce's non-roots get none); every check right
t0=$SECONDS
up "$DIR/ft8.ibnd" 127.33
timeout 150 "${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" \
    "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" -x SHARP_MPI_VERBOSE=1 \
    -x SHARP_MPI_ON_FAULT=abort -x SHARP_FABRIC_DIR="$FAB" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_check_ompi" >"$DIR/check.out" 2>&1
rc=$?
read -r o f < <(counts "$DIR/check.out")
if [ $rc = 0 ] && grep -q "every check passed" "$DIR/check.out" && [ "$o" -gt 1000 ]; then
    ok "SHARP_MPI_ON_FAULT=abort: mpi_check right, $o calls offloaded ($((SECONDS - t0)) s)"
else
    bad "SHARP_MPI_ON_FAULT=abort: mpi_check (exit $rc)"; tail -20 "$DIR/check.out"
fi

[ $fails -eq 0 ]
