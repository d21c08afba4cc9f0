#!/usr/bin/env bash
# Exact sums under MPI: an application allreducing random doubles and
# floats (tests/mpi-coll/mpi_exact.c, Open MPI, libsharp_mpi preloaded) on 8
# ranks over 8 hosts and on 8 ranks over 4 hosts x 2 (node-local
# aggregation on and off).  With SHARP_MPI_REPRODUCIBLE=1 every placement
# gives the same bits, equal to the correctly rounded sum (MPFR); without
# it the bits are shown, not compared (they usually differ).  The same sums
# through MPI_Iallreduce (at 4 hosts x 2: the node step's non-blocking
# form, the leader's exact sum of every contribution apart) give the
# blocking ones' bits.  Fabrics on 127.26 and 127.27.
set -u
. "$(dirname "$0")/lib.sh"
PROG="$O/tests/mpi-coll/mpi_exact_ompi"
[ -x "$PROG" ] || { echo "missing $PROG"; exit 1; }
DIR=$(mktemp -d /tmp/sharp-test-exact-mpi.XXXXXX)
cleanup() {
    "$BIN/sharp-fabric" --dir "$DIR/f8" down >/dev/null 2>&1
    "$BIN/sharp-fabric" --dir "$DIR/f4" down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

"$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft8.ibnd"
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft4.ibnd"
"$BIN/sharp-fabric" --dir "$DIR/f8" up "$DIR/ft8.ibnd" --net 127.26 >/dev/null ||
    { echo "fabric up failed"; exit 1; }
"$BIN/sharp-fabric" --dir "$DIR/f4" up "$DIR/ft4.ibnd" --net 127.27 >/dev/null ||
    { echo "fabric up failed"; exit 1; }

# run FABRIC REPRODUCIBLE NODE_AGGR [ARGS]: prints the hash line; the
# output is in $DIR/last.out.  NODE_SHM=0: the node steps on PMPI (the
# non-blocking ones' exchange too: node_xchg.c)
run() {
    timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe \
        --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp -np 8 \
        -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_MPI_VERBOSE=2 -x SHARP_MPI_REPRODUCIBLE="$2" \
        -x SHARP_MPI_NODE_AGGR="$3" -x SHARP_MPI_NODE_SHM="${NODE_SHM:-1}" \
        -x SHARP_FABRIC_DIR="$DIR/$1" \
        "$BIN/sharp-fabric" rank -- "$PROG" "${@:4}" >"$DIR/last.out" 2>&1
}
hash_of() { awk '/^mpi_exact: 8 ranks/ { print $5, $7 }' "$DIR/last.out"; }
offl() { awk '$1 == "sharp_mpi:" && $2 == "MPI_Allreduce" { print $3 }' "$DIR/last.out"; }

declare -A H
for p in "f8 1 --check 1" "f4 1 --check 1" "f4 0 --check 1" "f4 1 --check 0"; do
    set -- $p
    fab=$1 aggr=$2 shm=$4
    NODE_SHM=$shm run "$fab" 1 "$aggr" "$3"
    rc=$? h=$(hash_of) n=$(offl)
    per=$(grep -c "one member per node" "$DIR/last.out")
    nb=$(awk '$1 == "sharp_mpi:" && $2 == "MPI_Iallreduce" { print $3 }' "$DIR/last.out")
    if [ $rc -eq 0 ] && [ -n "$h" ] &&
        grep -q "0 of 8192 elements differ from the correctly rounded sum" "$DIR/last.out" &&
        grep -q "non-blocking: 0 of [1-9][0-9]* results differ from the blocking ones" "$DIR/last.out" &&
        [ "${n:-0}" -ge 10 ] && [ "${nb:-0}" -ge 10 ]; then
        ok "REPRODUCIBLE=1 $fab NODE_AGGR=$aggr NODE_SHM=$shm: every element correctly rounded, $n allreduces and $nb non-blocking ones offloaded, the same bits (node-local: $([ "$per" -gt 0 ] && echo on || echo off)), bits $h"
        H["$fab $aggr $shm"]=$h
    else
        bad "REPRODUCIBLE=1 $fab NODE_AGGR=$aggr NODE_SHM=$shm (exit $rc)"; tail -30 "$DIR/last.out"
    fi
done
if [ -n "${H[f8 1 1]:-}" ] && [ "${H[f8 1 1]}" = "${H[f4 1 1]:-x}" ] &&
    [ "${H[f8 1 1]}" = "${H[f4 0 1]:-y}" ] && [ "${H[f8 1 1]}" = "${H[f4 1 0]:-z}" ]; then
    ok "REPRODUCIBLE=1: 8 hosts, 4 hosts x 2 with and without node-local aggregation, its node steps on shared memory or on PMPI: identical bits"
else
    bad "REPRODUCIBLE=1: the placements' bits differ: 8x1 ${H[f8 1 1]:-?}, 4x2 ${H[f4 1 1]:-?}, 4x2 no aggr ${H[f4 0 1]:-?}, 4x2 node steps on PMPI ${H[f4 1 0]:-?}"
fi

# without the network (no sharpd: every sum on PMPI, with the same exact
# arithmetic): the same bits as through it
timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe \
    --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp -np 8 \
    -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_MPI_VERBOSE=1 -x SHARP_MPI_REPRODUCIBLE=1 -x SHARP_COLL_LOG_LEVEL=0 \
    -x SHARP_COLL_SHARPD_SOCKET=/nonexistent/sharpd.sock \
    "$PROG" --check >"$DIR/last.out" 2>&1
rc=$? h=$(hash_of) n=$(offl)
if [ $rc -eq 0 ] && [ "${n:-1}" = 0 ] && [ -n "$h" ] && [ "$h" = "${H[f8 1 1]:-x}" ] &&
    grep -q "0 of 8192 elements differ from the correctly rounded sum" "$DIR/last.out"; then
    ok "REPRODUCIBLE=1 without sharp (every sum on MPI): every element correctly rounded, the same bits as through the network"
else
    bad "REPRODUCIBLE=1 without sharp (exit $rc, bits $h, offloaded ${n:-?})"; tail -20 "$DIR/last.out"
fi

# without it: shown, not asserted
run f8 0 1; a=$(hash_of)
run f4 0 1; b=$(hash_of)
if [ "$a" = "$b" ]; then same="the same"; else same="different"; fi
echo "info REPRODUCIBLE=0: 8 hosts $a, 4 hosts x 2 $b: $same bits"

[ $fails -eq 0 ]
