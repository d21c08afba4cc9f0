#!/usr/bin/env bash
# Why a call went to MPI (libsharp_mpi, SHARP_MPI_VERBOSE=1; docs/mpi.md):
# tests/mpi-coll/mpi_why.c under Open MPI and MPICH (8 ranks, one per host
# of a sharp-fabric) with known causes: communicators of 2 ranks below
# SHARP_MPI_MIN_RANKS=4, MPI_LONG_DOUBLE (a type sharp has not), complex
# MPI_PROD (an op sharp does not compute on it), bcasts above
# SHARP_MPI_MAX_BYTES=4096; then with SHARP_COLL_SHARPD_SOCKET pointing
# nowhere; and with two ranks a host (4 hosts: the communicators of 2
# ranks on one node each; the non-blocking allreduce with node-local
# aggregation on MPI where the node step is, SHARP_MPI_NODE_SHM=0, and
# offloaded where it is on shared memory).  Checked: each communicator that is not offloaded reported once
# with its reason and remedy, each class of call once, and the final
# report's "not offloaded, because" rows with their exact counts
# (communicators, calls and bytes summed over the ranks).
set -u
. "$(dirname "$0")/lib.sh"
command -v mpirun.openmpi >/dev/null || { echo "skip: no Open MPI"; exit 77; }
DIR=$(mktemp -d /tmp/sharp-test-why.XXXXXX)
fabric() { "$BIN/sharp-fabric" --dir "$FABRIC" "$@"; }
cleanup() {
    fabric down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

"$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft.ibnd"
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft4.ibnd"
FABRIC=$DIR/fabric
fabric up "$DIR/ft.ibnd" --net 127.23 >/dev/null || { echo "fabric up failed"; exit 1; }

NOWHERE="$DIR/nowhere/sharpd.sock"

# run MPI OUT [VAR=VALUE ...]: mpi_why under MPI (ompi, mpich), 8 ranks;
# the settings after sharp-fabric's own (it sets the sharpd socket)
run() {
    local mpi=$1 out=$2
    shift 2
    if [ "$mpi" = ompi ]; then
        timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe \
            --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp -np 8 \
            -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
            -x SHARP_FABRIC_DIR="$FABRIC" \
            "$BIN/sharp-fabric" rank -- env SHARP_MPI_VERBOSE=1 "$@" \
            "$O/tests/mpi-coll/mpi_why_ompi" >"$out" 2>&1
    else
        timeout 120 mpiexec.mpich -n 8 -genv LD_LIBRARY_PATH "$LIB" \
            "${SAN_MPICH[@]}" -genv LD_PRELOAD "$SAN_PRE$LIB/libsharp_mpi_mpich.so:$LIB/libsharp_yield.so" \
            -genv SHARP_FABRIC_DIR "$FABRIC" \
            "$BIN/sharp-fabric" rank -- env SHARP_MPI_VERBOSE=1 "$@" \
            "$O/tests/mpi-coll/mpi_why_mpich" >"$out" 2>&1
    fi
}

# lines of OUT that contain TEXT (fixed string)
lines() { grep -cF -- "$2" "$1"; }
# the report's row of a reason: "communicators calls bytes"
row() { awk -v w="$2" '$1 == "sharp_mpi:" && $2 == "why" && $3 == w { print $4, $5, $6 }' "$1"; }

# verdict OUT: what is wrong with the lines and rows expected, "" if none;
# expectations: "count|text" lines and "reason=comms calls bytes" rows
verdict() {
    local out=$1 why="" e n want
    shift
    grep -q "mpi_why: every result right" "$out" || why="results wrong or exit"
    for e in "$@"; do
        case $e in
        *"|"*)
            want=${e%%|*}
            n=$(lines "$out" "${e#*|}")
            [ "$n" = "$want" ] || why="$why; $n lines (not $want) of '${e#*|}'"
            ;;
        *=*)
            n=$(row "$out" "${e%%=*}")
            [ "$n" = "${e#*=}" ] || why="$why; row ${e%%=*}: '${n}', expected '${e#*=}'"
            ;;
        esac
    done
    # nothing reported as a bare "unavailable", no reason without a row
    grep -q "why sharp_error" "$out" && why="$why; a generic sharp_error row"
    echo "$why"
}

for mpi in ompi mpich; do
    name=$([ $mpi = ompi ] && echo "Open MPI" || echo MPICH)

    # 1. sharp up: a small communicator, a type, an op, a size limit
    run $mpi "$DIR/$mpi-causes.out" SHARP_MPI_MIN_RANKS=4 SHARP_MPI_MAX_BYTES=4096
    w=$(verdict "$DIR/$mpi-causes.out" \
        "4|(size 2): not offloaded: fewer ranks than SHARP_MPI_MIN_RANKS=4; set SHARP_MPI_MIN_RANKS=2" \
        "1|MPI_Allreduce with MPI_LONG_DOUBLE, MPI_SUM on comm 0 (size 8) goes to MPI: datatype not supported by sharp" \
        "1|MPI_Allreduce with MPI_C_DOUBLE_COMPLEX, MPI_PROD on comm 0 (size 8) goes to MPI: op not offloaded on this datatype" \
        "1|MPI_Bcast on comm 0 (size 8) goes to MPI: message larger than SHARP_MPI_MAX_BYTES=4096; set SHARP_MPI_MAX_BYTES=8192" \
        "0|not offloaded: sharpd unreachable" \
        "min_ranks=4 40 640" "datatype=1 24 768" "op_on_datatype=1 8 128" \
        "max_bytes=1 16 131072" "sharpd_unreachable=")
    if [ -z "$w" ]; then
        ok "$name: a 2-rank communicator, MPI_LONG_DOUBLE, complex MPI_PROD, a bcast above SHARP_MPI_MAX_BYTES: each reported once, the table's rows and counts right"
    else
        bad "$name, causes:$w"; cat "$DIR/$mpi-causes.out"
    fi

    # 2. sharpd's socket pointing nowhere: every communicator says so
    run $mpi "$DIR/$mpi-nosharpd.out" SHARP_MPI_MAX_BYTES=4096 \
        SHARP_COLL_SHARPD_SOCKET="$NOWHERE"
    w=$(verdict "$DIR/$mpi-nosharpd.out" \
        "1|communicator 0 (size 8): not offloaded: sharpd unreachable at $NOWHERE; start sharpd" \
        "4|(size 2): not offloaded: sharpd unreachable at $NOWHERE" \
        "1|MPI_Allreduce with MPI_LONG_DOUBLE, MPI_SUM on comm 0 (size 8) goes to MPI: datatype not supported by sharp" \
        "sharpd_unreachable=5 56 896" "datatype=1 24 768" "max_bytes=1 16 131072")
    if [ -z "$w" ]; then
        ok "$name: sharpd unreachable: the world and the 4 small communicators each say so once, with the socket; the table's rows right"
    else
        bad "$name, sharpd unreachable:$w"; cat "$DIR/$mpi-nosharpd.out"
    fi
done

# 3. two ranks a host on a 4-host fabric (node-local aggregation)
fabric down >/dev/null 2>&1
FABRIC=$DIR/fabric4
fabric up "$DIR/ft4.ibnd" --net 127.24 >/dev/null || { echo "fabric up failed"; exit 1; }
# (Open MPI with the node step on MPI, SHARP_MPI_NODE_SHM=0, MPICH with
# it on shared memory, the default: the non-blocking allreduce offloaded
# either way, its node step's exchange on PMPI or on shared memory: no
# line about it)
for mpi in ompi mpich; do
    name=$([ $mpi = ompi ] && echo "Open MPI, node step on MPI" || echo "MPICH, node step on shared memory")
    nshm=$([ $mpi = ompi ] && echo 0 || echo 1)
    run $mpi "$DIR/$mpi-ppn2.out" SHARP_MPI_MAX_BYTES=4096 SHARP_MPI_NODE_SHM=$nshm
    nb=("0|MPI_Iallreduce with MPI_INT")
    w=$(verdict "$DIR/$mpi-ppn2.out" \
        "4|(size 2): not offloaded: all its ranks on one node: with node-local aggregation (SHARP_MPI_NODE_AGGR=1) the group would have one member" \
        "${nb[@]}" "one_node=4 40 640" "datatype=1 24 768" \
        "op_on_datatype=1 8 128" "max_bytes=1 16 131072" "min_ranks=")
    if [ -z "$w" ]; then
        ok "$name, 2 ranks a host: the 4 communicators on one node each reported once, the non-blocking allreduce offloaded, the table's rows right"
    else
        bad "$name, 2 ranks a host:$w"; cat "$DIR/$mpi-ppn2.out"
    fi
done

[ $fails -eq 0 ] || exit 1
exit 0
