#!/usr/bin/env bash
# Sparse payloads under MPI (tests/mpi-coll/mpi_sparse.c, Open MPI,
# libsharp_mpi preloaded, 8 ranks on the 8 hosts of a fat tree): mostly-zero
# allreduces of every type sharp carries (SUM; BOR, BXOR, LOR on integers)
# give the same bits with sparse fragments (the default) as without
# (SHARP_COLL_SPARSE_MIN=0), on one fabric; in exact mode
# (SHARP_MPI_REPRODUCIBLE=1) too, and with the top AN of the group
# carrying the sums killed mid-run (the standby group goes on with them:
# exact sums do not depend on the tree).  Integer results are checked by
# the program against its own sums.  The ANs must have folded sparse
# payloads in the sparse runs and none in the dense ones.  Fabric on 127.84.
#
# Open MPI runs with `--mca op ^avx`: its AVX op component saturates 8- and
# 16-bit integer sums (Open MPI 4.1, plain MPI, no sharp: int8 100 + 100
# gives 127), which would fail the program's check wherever a sum falls
# back to MPI.
set -u
. "$(dirname "$0")/lib.sh"
PROG="$O/tests/mpi-coll/mpi_sparse_ompi"
[ -x "$PROG" ] || { echo "missing $PROG"; exit 1; }
DIR=$(mktemp -d /tmp/sharp-test-sparse-mpi.XXXXXX)
FAB=$DIR/fab
cleanup() {
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
export SHARP_AM_STATS_INTERVAL=200ms # exact_ops per group, for the fault

"$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft8.ibnd"
up() {
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
    "$BIN/sharp-fabric" --dir "$FAB" up "$DIR/ft8.ibnd" --net 127.84 >/dev/null
}
# run NAME SPARSE_MIN REPRODUCIBLE [ARGS]: output in $DIR/NAME.out
run() {
    timeout 300 mpirun.openmpi --allow-run-as-root --oversubscribe \
        --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp --mca op ^avx -np 8 \
        -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_MPI_VERBOSE=2 -x SHARP_MPI_REPRODUCIBLE="$3" \
        -x SHARP_COLL_SPARSE_MIN="$2" -x SHARP_FABRIC_DIR="$FAB" \
        "$BIN/sharp-fabric" rank -- "$PROG" "${@:4}" >"$DIR/$1.out" 2>&1
}
cases() { grep '^mpi_sparse: case' "$DIR/$1.out"; }
offl() { awk '$1 == "sharp_mpi:" && $2 == "MPI_Allreduce" { print $3 }' "$DIR/$1.out"; }
# the ANs' sparse payloads folded, summed over the fabric
sparse_in() {
    sleep 0.5 # the manager's last poll of the ANs (SHARP_AM_STATS_INTERVAL)
    "$BIN/sharpctl" --socket "$FAB/am.sock" --json ans |
        python3 -c 'import json,sys; print(sum(a.get("counters", {}).get("sparse_in", 0) for a in json.load(sys.stdin)))'
}
# checked NAME: the run exited 0, its integers right, most calls offloaded
checked() {
    local n
    n=$(offl "$1")
    if [ "$rc" = 0 ] && grep -q "^mpi_sparse: [0-9]* cases, 0 integer results wrong" "$DIR/$1.out" &&
        [ "$(cases "$1" | wc -l)" -ge 100 ] && [ "${n:-0}" -ge 40 ]; then
        return 0
    fi
    bad "$1: exit $rc, $n allreduces offloaded"
    tail -20 "$DIR/$1.out"
    return 1
}

up || { echo "fabric up failed"; exit 1; }
for mode in 0 1; do
    start=$(sparse_in)
    run "dense$mode" 0 "$mode"; rc=$?
    checked "dense$mode" || continue
    before=$(sparse_in)
    run "sparse$mode" 16k "$mode"; rc=$?
    checked "sparse$mode" || continue
    after=$(($(sparse_in) - ${before:-0}))
    # the members' own count (libsharp_coll's, printed at VERBOSE=2)
    frags=$(sed -n 's/.* sparse fragments \([0-9]*\) .*/\1/p' "$DIR/sparse$mode.out" | awk '{ s += $1 } END { print s + 0 }')
    dfrags=$(sed -n 's/.* sparse fragments \([0-9]*\) .*/\1/p' "$DIR/dense$mode.out" | awk '{ s += $1 } END { print s + 0 }')
    if [ "${before:-x}" != "${start:-y}" ] || [ "$after" -lt 50 ] ||
        [ "$frags" -lt 50 ] || [ "$dfrags" != 0 ]; then
        bad "REPRODUCIBLE=$mode: sparse fragments sent by the members $dfrags (dense run) and $frags (sparse run), folded by the ANs $((before - start)) and $after"
    elif ! diff <(cases "dense$mode") <(cases "sparse$mode") >"$DIR/diff$mode"; then
        bad "REPRODUCIBLE=$mode: sparse and dense bits differ: $(grep -c '^>' "$DIR/diff$mode") cases"
        head -6 "$DIR/diff$mode"
    else
        ok "REPRODUCIBLE=$mode: $(cases "dense$mode" | wc -l) cases, the same bits sparse and dense; integers right; $frags fragments sent sparse by the members, $after sparse payloads folded by the ANs (none in the dense run)"
    fi
done

# the fault: exact sums, sparse, the carrying AN killed after the first pass
up || { echo "fabric up failed"; exit 1; }
(run fault 16k 1 --iters 6 --signal "$DIR/sig"; echo $? >"$DIR/fault.rc") &
job=$!
for _ in $(seq 1200); do [ -e "$DIR/sig" ] && break; sleep 0.1; done
an=
for _ in $(seq 20); do
    an=$("$BIN/sharpctl" --socket "$FAB/am.sock" --json groups |
        python3 "$(dirname "$0")/../support/groups.py" busiest)
    [ -n "$an" ] && break
    sleep 0.1
done
pid=$(awk -v n="$an" '$1 == "an" && $2 == n { print $4 }' "$FAB/pids")
if [ -e "$DIR/sig" ] && [ -n "$pid" ]; then
    kill -9 "$pid"
else
    bad "fault: no AN to kill (cue $([ -e "$DIR/sig" ] && echo seen || echo never), AN '$an')"
fi
wait $job
rc=$(cat "$DIR/fault.rc" 2>/dev/null || echo 1)
if checked fault; then
    # every pass's bits (the same data each pass) those of the dense run
    if ! diff <(cases dense1 | sort -u) <(cases fault | sort -u) >"$DIR/difff" ||
        [ "$(cases fault | wc -l)" -lt 600 ]; then
        bad "fault: exact sums with $an killed differ from the dense run's ($(cases fault | wc -l) cases)"
        head -6 "$DIR/difff"
    else
        ok "fault: $an (carrying the exact sums) killed after pass 1 of 6: every integer right, every pass's bits those of the dense run"
    fi
fi
[ $fails = 0 ]
