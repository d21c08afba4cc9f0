#!/usr/bin/env bash
# libsharp_mpi end to end: an unchanged MPI program (sharp_mpi_demo) under
# Open MPI and MPICH with the library preloaded, through a sharp-fabric of
# 8 hosts; plain-MPI fallback without sharpd; an AN killed mid-run aborts
# the job with a message, never hangs.  MPICH (4.0.2 on UCX) busy-polls
# while waiting, so it runs 2 ranks here: more would starve the daemons on
# 2 cores.
set -u
O=${O:-build}
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
if [ "${SAN:-0}" = 1 ]; then
    echo "skip: libsharp_mpi is preloaded into uninstrumented MPI programs;" \
        "run without SAN=1"
    exit 77
fi
for f in libsharp_mpi_ompi.so libsharp_mpi_mpich.so; do
    [ -f "$LIB/$f" ] || { echo "missing $LIB/$f"; exit 1; }
done
DIR=$(mktemp -d /tmp/sharp-test-mpi.XXXXXX)
fabric() { "$BIN/sharp-fabric" --dir "$DIR/fabric" "$@"; }
cleanup() {
    fabric down >/dev/null 2>&1
    "$BIN/sharp-fabric" --dir "$DIR/fabric4" down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

"$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft.ibnd"
fabric up "$DIR/ft.ibnd" --net 127.13 >/dev/null || { echo "fabric up failed"; exit 1; }

OMPI=(timeout 120 mpirun.openmpi --allow-run-as-root --oversubscribe
      --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp)
MPICH=(timeout 120 mpiexec.mpich)

# offloaded counts from the report: "sharp_mpi: MPI_Allreduce  N ..."
offloaded() { awk -v c="$1" '$1 == "sharp_mpi:" && $2 == c { print $3 }' "$2"; }

# 1. Open MPI, 8 ranks, one per host
"${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$BIN/sharp_mpi_demo_ompi" >"$DIR/ompi.out" 2>&1
rc=$?
n=$(offloaded MPI_Allreduce "$DIR/ompi.out")
b=$(offloaded MPI_Barrier "$DIR/ompi.out")
if [ $rc -eq 0 ] && grep -q "every result right" "$DIR/ompi.out" &&
    [ "${n:-0}" -gt 4000 ] && [ "${b:-0}" -gt 1000 ]; then
    ok "Open MPI, 8 ranks: results right, $n allreduces and $b barriers offloaded"
else
    bad "Open MPI, 8 ranks (exit $rc)"; cat "$DIR/ompi.out"
fi

# 2. MPICH, 2 ranks on hosts of different leaves
"${MPICH[@]}" -n 2 -genv LD_LIBRARY_PATH "$LIB" -genv LD_PRELOAD "$LIB/libsharp_mpi_mpich.so" \
    -genv SHARP_MPI_VERBOSE 1 -genv SHARP_FABRIC_DIR "$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$BIN/sharp_mpi_demo_mpich" >"$DIR/mpich.out" 2>&1
rc=$?
n=$(offloaded MPI_Allreduce "$DIR/mpich.out")
if [ $rc -eq 0 ] && grep -q "every result right" "$DIR/mpich.out" && [ "${n:-0}" -gt 1000 ]; then
    ok "MPICH, 2 ranks: results right, $n allreduces offloaded"
else
    bad "MPICH, 2 ranks (exit $rc)"; cat "$DIR/mpich.out"
fi

# 2b. every op x type, every root, bcasts, barrier order, communicator
# loops: Open MPI 8 ranks (holding at the end: only the world's group may
# be left at the manager), MPICH 2 ranks
"${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi/mpi_check_ompi" --hold "$DIR/hold" \
    >"$DIR/check.out" 2>&1 &
job=$!
for _ in $(seq 600); do [ -e "$DIR/hold" ] && break; sleep 0.1; done
groups=$("$BIN/sharpctl" --socket "$DIR/fabric/am.sock" --json groups | grep -c '"group_id"')
rm -f "$DIR/hold"
wait $job
rc=$?
n=$(offloaded MPI_Reduce "$DIR/check.out")
if [ $rc -eq 0 ] && grep -q "every check passed" "$DIR/check.out" && [ "${n:-0}" -gt 1000 ] &&
    [ "$groups" = 1 ]; then
    ok "Open MPI mpi_check, 8 ranks: every op x type and root right, $n reduces offloaded, 30 communicators freed (1 group left: the world's)"
else
    bad "Open MPI mpi_check (exit $rc, $groups groups at the manager mid-run)"; tail -30 "$DIR/check.out"
fi
"${MPICH[@]}" -n 2 -genv LD_LIBRARY_PATH "$LIB" -genv LD_PRELOAD "$LIB/libsharp_mpi_mpich.so" \
    -genv SHARP_MPI_VERBOSE 1 -genv SHARP_FABRIC_DIR "$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi/mpi_check_mpich" >"$DIR/check-mpich.out" 2>&1
rc=$?
n=$(offloaded MPI_Allreduce "$DIR/check-mpich.out")
if [ $rc -eq 0 ] && grep -q "every check passed" "$DIR/check-mpich.out" && [ "${n:-0}" -gt 500 ]; then
    ok "MPICH mpi_check, 2 ranks: every check passed, $n allreduces offloaded"
else
    bad "MPICH mpi_check (exit $rc)"; tail -30 "$DIR/check-mpich.out"
fi

# 2c. two processes per host (8 ranks on a 4-host fabric)
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft4.ibnd"
"$BIN/sharp-fabric" --dir "$DIR/fabric4" up "$DIR/ft4.ibnd" --net 127.19 >/dev/null
for aggr in 1 0; do
    "${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_MPI_VERBOSE=2 -x SHARP_MPI_NODE_AGGR=$aggr -x SHARP_FABRIC_DIR="$DIR/fabric4" \
        "$BIN/sharp-fabric" rank -- "$O/tests/mpi/mpi_check_ompi" >"$DIR/ppn2.out" 2>&1
    rc=$?
    n=$(offloaded MPI_Allreduce "$DIR/ppn2.out")
    pernode=$(grep -c "one member per node" "$DIR/ppn2.out")
    if [ $rc -eq 0 ] && grep -q "every check passed" "$DIR/ppn2.out" && [ "${n:-0}" -gt 1000 ] &&
        { { [ $aggr = 1 ] && [ "$pernode" -gt 0 ]; } || { [ $aggr = 0 ] && [ "$pernode" = 0 ]; }; }; then
        ok "ppn 2 (8 ranks, 4 hosts), NODE_AGGR=$aggr: every check passed, $n allreduces offloaded"
    else
        bad "ppn 2, NODE_AGGR=$aggr (exit $rc)"; tail -30 "$DIR/ppn2.out"
    fi
done
"$BIN/sharp-fabric" --dir "$DIR/fabric4" down >/dev/null

# 3. no sharpd: plain MPI, one line of notice, right results
"${OMPI[@]}" -np 4 -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_MPI_VERBOSE=1 -x SHARP_COLL_SHARPD_SOCKET=/nonexistent/sharpd.sock \
    -x SHARP_COLL_LOG_LEVEL=0 "$BIN/sharp_mpi_demo_ompi" >"$DIR/fallback.out" 2>&1
rc=$?
notices=$(grep -c "sharp unavailable" "$DIR/fallback.out")
n=$(offloaded MPI_Allreduce "$DIR/fallback.out")
if [ $rc -eq 0 ] && grep -q "every result right" "$DIR/fallback.out" &&
    [ "$notices" = 1 ] && [ "${n:-1}" = 0 ]; then
    ok "no sharpd: plain MPI, one notice, results right"
else
    bad "no sharpd fallback (exit $rc, $notices notices)"; cat "$DIR/fallback.out"
fi

# 4. SHARP_MPI_ENABLE=0 and per-collective switches
"${OMPI[@]}" -np 4 -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_MPI_VERBOSE=1 -x SHARP_MPI_BARRIER=0 -x SHARP_FABRIC_DIR="$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$BIN/sharp_mpi_demo_ompi" >"$DIR/switch.out" 2>&1
rc=$?
b=$(offloaded MPI_Barrier "$DIR/switch.out")
n=$(offloaded MPI_Allreduce "$DIR/switch.out")
if [ $rc -eq 0 ] && [ "${b:-1}" = 0 ] && [ "${n:-0}" -gt 0 ]; then
    ok "SHARP_MPI_BARRIER=0: barriers on MPI, allreduces offloaded"
else
    bad "per-collective switch (exit $rc)"; cat "$DIR/switch.out"
fi

# 5. an AN killed mid-run: the job aborts naming the failure, no hang
"${OMPI[@]}" -np 4 -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_FABRIC_DIR="$DIR/fabric" -x SHARP_COLL_LOG_LEVEL=1 \
    "$BIN/sharp-fabric" rank -- "$BIN/sharp_mpi_demo_ompi" --loop 60 >"$DIR/kill.out" 2>&1 &
job=$!
sleep 3
# leaf02 and the spines: a flat group's only AN is a spine (its top)
kill -9 $(awk '$1 == "an" && ($2 == "leaf02" || $2 ~ /^spine/) { print $4 }' "$DIR/fabric/pids")
start=$(date +%s)
wait $job
rc=$?
secs=$(($(date +%s) - start))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "failed in the network" "$DIR/kill.out" &&
    ! grep -q "WRONG" "$DIR/kill.out"; then
    ok "AN killed: the job aborted in ${secs}s with the failure named"
else
    bad "AN killed (exit $rc after ${secs}s)"; tail -20 "$DIR/kill.out"
fi

[ $fails -eq 0 ]
