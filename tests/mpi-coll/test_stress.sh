#!/usr/bin/env bash
# Non-blocking collectives under stress (tests/mpi-coll/mpi_stress.c): four
# duplicates of the world, 16 operations in flight, offloaded ones
# (MPI_Iallreduce, _Ireduce, _Ibcast, _Ibarrier, persistent allreduces)
# mixed with ones MPI runs (MPI_Igather, _Iscan, _Ialltoall,
# _Ireduce_scatter, _Iallgather) in one array with null and inactive
# entries, completed by every MPI_Wait*/MPI_Test* form at random and
# reposted; every result against a reference, every handle and status as
# MPI defines them.  Open MPI and MPICH at 5 and 8 ranks, one per host,
# several seeds each (SHARP_STRESS_SEED moves them; a failure names its
# seed), the offloaded counts checked against the report; and with
# MPI_THREAD_MULTIPLE (offloaded; kept on MPI with one notice when
# SHARP_MPI_THREAD_MULTIPLE=0); and at two ranks a
# host, where they take the node step on shared memory.
set -u
. "$(dirname "$0")/lib.sh"
for f in libsharp_mpi_ompi.so libsharp_mpi_mpich.so libsharp_yield.so; do
    [ -f "$LIB/$f" ] || { echo "missing $LIB/$f"; exit 1; }
done
DIR=$(mktemp -d /tmp/sharp-test-stress.XXXXXX)
cleanup() {
    "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null 2>&1
    "$BIN/sharp-fabric" --dir "$DIR/fabric4" down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
S0=${SHARP_STRESS_SEED:-1}
OPS=${SHARP_STRESS_OPS:-2000}

"$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft.ibnd"
"$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/ft.ibnd" --net 127.51 >/dev/null ||
    { echo "fabric up failed"; exit 1; }

offloaded() { awk -v c="$1" '$1 == "sharp_mpi:" && $2 == c { print $3 }' "$2"; }
verdict() { # RC OUT
    local rc=$1 out=$2 c want got why=""
    [ "$rc" = 0 ] || why="exit $rc"
    grep -q "every result right" "$out" || why="$why; not every result right"
    for c in MPI_Iallreduce MPI_Ireduce MPI_Ibcast MPI_Ibarrier; do
        want=$(awk -v c=$c '/^mpi_stress: expect offloaded/ {
            for (i = 1; i < NF; i++) if ($i == c) print $(i + 1) }' "$out")
        got=$(offloaded $c "$out")
        [ -n "$want" ] && [ "$want" = "$got" ] ||
            why="$why; $c offloaded ${got:-?}, expected ${want:-?}"
    done
    echo "$why"
}

# stress MPI NP FABRIC SEED NSEEDS [ARGS...]
stress() {
    local mpi=$1 np=$2 fab=$3 seed=$4 n=$5 out="$DIR/$1-$2-$4.out" t0=$SECONDS
    shift 5
    if [ "$mpi" = ompi ]; then
        timeout 100 mpirun.openmpi --allow-run-as-root --oversubscribe \
            --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp -np "$np" \
            -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
            -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$fab" \
            -x SHARP_MPI_PERSISTENT_ORDERED=1 \
            ${SHARP_MPI_THREAD_MULTIPLE:+-x SHARP_MPI_THREAD_MULTIPLE} \
            "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_stress_ompi" \
            --seed "$seed" --seeds "$n" --ops "$OPS" "$@" >"$out" 2>&1
    else
        timeout 100 mpiexec.mpich -n "$np" -genv LD_LIBRARY_PATH "$LIB" \
            "${SAN_MPICH[@]}" -genv LD_PRELOAD "$SAN_PRE$LIB/libsharp_mpi_mpich.so:$LIB/libsharp_yield.so" \
            -genv SHARP_MPI_VERBOSE 1 -genv SHARP_FABRIC_DIR "$fab" \
            -genv SHARP_MPI_PERSISTENT_ORDERED 1 \
            "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_stress_mpich" \
            --seed "$seed" --seeds "$n" --ops "$OPS" "$@" >"$out" 2>&1
    fi
    local rc=$?
    local what="$mpi, $np ranks${*:+ ($*)}, seeds $seed-$((seed + n - 1)) x $OPS operations"
    local why
    why=$(verdict $rc "$out")
    if [ -z "$why" ]; then
        ok "$what: every result, handle and status right, offloaded as expected ($((SECONDS - t0)) s)"
    else
        bad "$what ($why)"
        grep -v "^\[vm" "$out" | tail -25
    fi
}

stress ompi 5 "$DIR/fabric" "$S0" 4
stress ompi 8 "$DIR/fabric" $((S0 + 4)) 3
stress mpich 5 "$DIR/fabric" "$S0" 4
stress mpich 8 "$DIR/fabric" $((S0 + 4)) 3
# two ranks a host (8 ranks, 4 hosts): every communicator hierarchical, its
# non-blocking operations through the node step on shared memory (the
# default 64 KiB slot holds every one of them): offloaded, node steps counted
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft4.ibnd"
"$BIN/sharp-fabric" --dir "$DIR/fabric4" up "$DIR/ft4.ibnd" --net 127.52 >/dev/null ||
    { echo "fabric up failed"; exit 1; }
for mpi in ompi mpich; do
    stress $mpi 8 "$DIR/fabric4" "$S0" 2 --ppn 2
    shm=$(sed -n 's/.*node-local aggregation: \([0-9]*\) step(s) on shared memory.*/\1/p' \
        "$DIR/$mpi-8-$S0.out")
    if [ "${shm:-0}" -gt 1000 ]; then
        ok "$mpi, 2 ranks a host: $shm node steps on shared memory"
    else
        bad "$mpi, 2 ranks a host: node steps on shared memory: ${shm:-none}"
    fi
done
"$BIN/sharp-fabric" --dir "$DIR/fabric4" down >/dev/null
# MPI_THREAD_MULTIPLE (mpi4py's default level; one thread calls MPI):
# offloaded as at any level, every result right; with
# SHARP_MPI_THREAD_MULTIPLE=0 everything on MPI, one notice (rank 0's)
for mpi in ompi mpich; do
    OPS=1000 stress $mpi 5 "$DIR/fabric" "$S0" 1 --thread-multiple
done
OPS=1000 SHARP_MPI_THREAD_MULTIPLE=0 stress ompi 5 "$DIR/fabric" "$S0" 1 --thread-multiple
n=$(grep -c "MPI_THREAD_MULTIPLE with SHARP_MPI_THREAD_MULTIPLE=0: collectives go to the MPI library" \
    "$DIR/ompi-5-$S0.out")
[ "$n" = 1 ] || bad "ompi, MPI_THREAD_MULTIPLE kept on MPI: $n notices, not one"
"$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null

[ $fails -eq 0 ]
