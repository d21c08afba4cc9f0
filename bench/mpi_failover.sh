#!/usr/bin/env bash
# What an aggregation node's death costs a running job (`make bench-fault`):
# 8 Open MPI ranks run tests/mpi-coll/mpi_stream.c (8-byte MPI_Allreduce,
# every result checked, each call timed) through the demo's fat-tree, and
# the AN carrying the world's group (the top of the group that is not a
# standby, from sharpctl --json groups) is killed with SIGKILL at a random
# call (seeded; the seed is printed, SEED=N runs it again).  Three ways:
# blocking calls at one rank per host, MPI_Iallreduce + MPI_Wait at one
# rank per host, blocking at two ranks per host (4 hosts); each with the
# standby group (the default) and without (SHARP_MPI_STANDBY=0: the
# communicator goes to MPI, as before standby groups), side by side.  For
# each, medians over the rounds of:
#   calls on MPI     the library's report (SHARP_MPI_VERBOSE=1): the calls
#                    that went to MPI, a rank's (the report counts all 8)
#   longest call     the longest any rank saw in the 1000 calls after the
#                    kill (us): the call across the failure
#   after/before     the median of the 1000 calls after that one over the
#                    median of the 1000 calls before the kill
# A round with the standby fails unless the report counts a failover (the
# kill hit the group that carried the calls).
# Host MPI runs over TCP only (btl self,tcp), as between hosts: with its
# shared memory, the calls that fall back would be faster than on any
# real cluster.
# Usage: bench/mpi_failover.sh [BUILD_DIR]; SHARP_BENCH_ROUNDS (3),
# SHARP_BENCH_CALLS (6000 a job).
set -u
O=${1:-build}
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
ROUNDS=${SHARP_BENCH_ROUNDS:-3}
CALLS=${SHARP_BENCH_CALLS:-6000}
SEED=${SEED:-$((RANDOM * 32768 + RANDOM))}
RANDOM=$SEED
DIR=$(mktemp -d /tmp/sharp-bench-failover.XXXXXX)
FAB="$DIR/fabric"
trap '"$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1; rm -rf "$DIR"' EXIT
fabric() { "$BIN/sharp-fabric" --dir "$FAB" "$@"; }
TOPO8=examples/fat-tree-2l.ibnd
[ -f "$TOPO8" ] || { "$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft8.ibnd" && TOPO8=$DIR/ft8.ibnd; }
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft4.ibnd"

# the top AN of the job's group that is not a standby
GROUPS_PY=$(cd "$(dirname "$0")/../tests/support" && pwd)/groups.py
top_an() {
    "$BIN/sharpctl" --socket "$FAB/am.sock" --json groups |
        python3 "$GROUPS_PY" primary
}

# one job: WAY (blocking | nb | ppn2), STANDBY (1 | 0); prints
# "MPI LONGEST RATIO" or fails
one_job() {
    local way=$1 sb=$2 topo=$TOPO8 args=() at out=$DIR/out
    [ "$way" = ppn2 ] && topo=$DIR/ft4.ibnd
    [ "$way" = nb ] && args=(--nb)
    at=$((CALLS / 2 + RANDOM % (CALLS / 6)))
    fabric down >/dev/null 2>&1
    fabric up "$topo" --net 127.21 >/dev/null || { echo "fabric up failed" >&2; return 1; }
    rm -f "$DIR/sig" "$DIR/go" "$DIR/go.ready"
    timeout -s KILL 300 mpirun.openmpi --allow-run-as-root --oversubscribe \
        --mca mpi_yield_when_idle 1 --mca btl self,tcp -np 8 \
        -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_MPI_VERBOSE=1 -x SHARP_MPI_STANDBY="$sb" -x SHARP_FABRIC_DIR="$FAB" \
        "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_stream_ompi" \
        --calls "$CALLS" --signal-at "$at" "$DIR/sig" --hold "$DIR/go" "${args[@]}" >"$out" 2>&1 &
    local job=$! victim= pid
    # the victim found while the stream waits after its first call (the
    # group made), so that the kill follows call K within milliseconds
    # (mpi_stream takes the longest of the window after K as the call
    # across the failure)
    for _ in $(seq 1200); do [ -e "$DIR/go.ready" ] && break; sleep 0.1; done
    for _ in $(seq 100); do
        victim=$(top_an 2>/dev/null)
        [ -n "$victim" ] && break
        sleep 0.1
    done
    pid=$(awk -v n="$victim" '$1 == "an" && $2 == n { print $4 }' "$FAB/pids")
    touch "$DIR/go"
    for _ in $(seq 12000); do [ -e "$DIR/sig" ] && break; sleep 0.01; done
    "$BIN/sharpctl" --socket "$FAB/am.sock" --json groups >"$DIR/groups" 2>&1
    kill -9 "$pid" || echo "$way: could not kill $victim (pid '$pid')" >&2
    wait $job || { echo "$way: the job failed (kill at call $at of $victim)" >&2; tail -15 "$out" >&2; return 1; }
    grep -q "every result right" "$out" || { echo "$way: wrong results" >&2; return 1; }
    local fo
    fo=$(awk '/sharp_mpi: standby groups:/ { print $4 }' "$out")
    if [ "$sb" = 1 ] && [ "${fo:-0}" -eq 0 ]; then
        echo "$way: no failover counted: the kill of $victim (pid $pid) missed the group; the groups then:" >&2
        cat "$DIR/groups" >&2
        tail -15 "$out" >&2
        return 1
    fi
    awk -v way="$way" -v sb="$sb" -v at="$at" -v an="$victim" -v fo="${fo:-0}" '
        $1 == "sharp_mpi:" && $2 ~ /^MPI_/ { f += $5 }
        $1 == "mpi_stream:" && $2 == "longest" { l = $3; r = $NF }
        END { f = int(f / 8 + 0.5); printf "%d %s %s\n", f, l, r > "/dev/stdout";
              printf "  %s, standby %s: %s killed at call %s: %d failovers, %d calls on MPI, longest %s us, after/before %s\n",
                  way, sb, an, at, fo, f, l, r > "/dev/stderr" }' "$out"
}

med() { sort -n | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "An AN killed under a stream of 8-byte MPI_Allreduce (8 ranks, $CALLS calls"
echo "a job, the AN carrying the world's group, at a random call; seed $SEED);"
echo "medians of $ROUNDS rounds"
printf '%-34s %-8s %14s %16s %14s\n' way standby "calls on MPI" "longest call us" "after/before"
RES=""
for way in blocking nb ppn2; do
    for sb in 1 0; do
        : >"$DIR/$way$sb"
    done
    for r in $(seq "$ROUNDS"); do # alternated: the same load for both
        for sb in 1 0; do
            one_job "$way" "$sb" >>"$DIR/$way$sb" || exit 1
        done
    done
    case $way in
    blocking) name="MPI_Allreduce, 1 rank per host" key=mpi_failover ;;
    nb) name="MPI_Iallreduce, 1 rank per host" key=mpi_failover_nb ;;
    ppn2) name="MPI_Allreduce, 2 ranks per host" key=mpi_failover_ppn2 ;;
    esac
    for sb in 1 0; do
        m=$(awk '{ print $1 }' "$DIR/$way$sb" | med)
        l=$(awk '{ print $2 }' "$DIR/$way$sb" | med)
        q=$(awk '{ print $3 }' "$DIR/$way$sb" | med)
        k=$key
        [ "$sb" = 0 ] && k=${key}_nostandby
        printf '%-34s %-8s %14s %16s %14s\n' "$name" "$([ "$sb" = 1 ] && echo yes || echo no)" "$m" "$l" "$q"
        RES+=" ${k}_calls_on_mpi=$m ${k}_longest_ms=$(awk -v l="$l" 'BEGIN { printf "%.1f", l / 1000 }') ${k}_after_vs_before=$q"
    done
done
echo "RESULT${RES}"
