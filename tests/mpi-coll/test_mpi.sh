#!/usr/bin/env bash
# libsharp_mpi end to end: an unchanged MPI program (sharp_mpi_demo) under
# Open MPI and MPICH with the library preloaded, through a sharp-fabric of
# 8 hosts; mpi_check (references of its own), mpi_types (every named
# datatype, each call against PMPI) and mpi_nb (non-blocking and persistent
# collectives against PMPI); plain-MPI fallback without sharpd (killed
# daemons: tests/mpi-coll/test_fault.sh).  MPICH (4.0.2 on UCX) busy-polls while
# waiting: it runs 8 ranks with libsharp_yield preloaded too (it sleeps
# after 64 empty polls), else the waiting ranks starve the daemons and the
# other ranks on 2 cores.
set -u
. "$(dirname "$0")/lib.sh"
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
MPICH_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_mpich.so:$LIB/libsharp_yield.so"
[ -f "$LIB/libsharp_yield.so" ] || { echo "missing $LIB/libsharp_yield.so"; exit 1; }

# offloaded counts from the report: "sharp_mpi: MPI_Allreduce  N ..."
offloaded() { awk -v c="$1" '$1 == "sharp_mpi:" && $2 == c { print $3 }' "$2"; }

# mpi_types (every named type x every offloaded collective against PMPI):
# every result matches, and the report's offloaded counts are exactly what
# the program says must be offloaded ("mpi_types: expect offloaded
# MPI_Allreduce A MPI_Reduce R MPI_Bcast B MPI_Barrier C"); "" if right,
# else what is wrong
types_verdict() {
    local rc=$1 out=$2 c want got why=""
    [ "$rc" = 0 ] || why="exit $rc"
    grep -q "every result matches PMPI" "$out" || why="$why; results differ from PMPI"
    for c in MPI_Allreduce MPI_Reduce MPI_Bcast MPI_Barrier; do
        want=$(awk -v c=$c '/^mpi_types: expect offloaded/ {
            for (i = 1; i < NF; i++) if ($i == c) print $(i + 1) }' "$out")
        got=$(offloaded $c "$out")
        [ -n "$want" ] && [ "$want" = "$got" ] ||
            why="$why; $c offloaded ${got:-?}, expected ${want:-?}"
    done
    echo "$why"
}

# 1. Open MPI, 8 ranks, one per host
"${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
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

# 2. MPICH, 8 ranks, one per host
t0=$SECONDS
"${MPICH[@]}" -n 8 -genv LD_LIBRARY_PATH "$LIB" "${SAN_MPICH[@]}" -genv LD_PRELOAD "$MPICH_PRELOAD" \
    -genv SHARP_MPI_VERBOSE 1 -genv SHARP_FABRIC_DIR "$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$BIN/sharp_mpi_demo_mpich" >"$DIR/mpich.out" 2>&1
rc=$?
n=$(offloaded MPI_Allreduce "$DIR/mpich.out")
if [ $rc -eq 0 ] && grep -q "every result right" "$DIR/mpich.out" && [ "${n:-0}" -gt 1000 ]; then
    ok "MPICH, 8 ranks: results right, $n allreduces offloaded ($((SECONDS - t0)) s)"
else
    bad "MPICH, 8 ranks (exit $rc)"; cat "$DIR/mpich.out"
fi

# 2b. every op x type, every root, bcasts, barrier order, communicator
# loops: Open MPI 8 ranks (holding at the end: only the world's group and
# its standby may be left at the manager), MPICH 8 ranks
"${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_check_ompi" --hold "$DIR/hold" \
    >"$DIR/check.out" 2>&1 &
job=$!
for _ in $(seq 600); do [ -e "$DIR/hold" ] && break; sleep 0.1; done
groups=$("$BIN/sharpctl" --socket "$DIR/fabric/am.sock" --json groups | grep -c '"group_id"')
standbys=$("$BIN/sharpctl" --socket "$DIR/fabric/am.sock" --json groups | grep -c '"standby_of"')
rm -f "$DIR/hold"
wait $job
rc=$?
n=$(offloaded MPI_Reduce "$DIR/check.out")
if [ $rc -eq 0 ] && grep -q "every check passed" "$DIR/check.out" && [ "${n:-0}" -gt 1000 ] &&
    [ "$groups" = 2 ] && [ "$standbys" = 1 ]; then
    ok "Open MPI mpi_check, 8 ranks: every op x type and root right, $n reduces offloaded, 30 communicators freed (2 groups left: the world's and its standby)"
else
    bad "Open MPI mpi_check (exit $rc, $groups groups at the manager mid-run, $standbys standby)"; tail -30 "$DIR/check.out"
fi
t0=$SECONDS
"${MPICH[@]}" -n 8 -genv LD_LIBRARY_PATH "$LIB" "${SAN_MPICH[@]}" -genv LD_PRELOAD "$MPICH_PRELOAD" \
    -genv SHARP_MPI_VERBOSE 1 -genv SHARP_FABRIC_DIR "$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_check_mpich" >"$DIR/check-mpich.out" 2>&1
rc=$?
n=$(offloaded MPI_Allreduce "$DIR/check-mpich.out")
if [ $rc -eq 0 ] && grep -q "every check passed" "$DIR/check-mpich.out" && [ "${n:-0}" -gt 500 ]; then
    ok "MPICH mpi_check, 8 ranks: every check passed, $n allreduces offloaded ($((SECONDS - t0)) s)"
else
    bad "MPICH mpi_check (exit $rc)"; tail -30 "$DIR/check-mpich.out"
fi

# 2c. every named datatype x allreduce/reduce/bcast/barrier x counts 0 to
# one past a fragment x in place or not x every root, and bcasts with
# different types of one signature on different ranks, each call compared
# with the same call through PMPI (tests/mpi-coll/mpi_types.c): Open MPI and
# MPICH, 8 ranks each
t0=$SECONDS
"${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_types_ompi" >"$DIR/types.out" 2>&1
why=$(types_verdict $? "$DIR/types.out")
if [ -z "$why" ]; then
    ok "Open MPI mpi_types, 8 ranks: $(grep -o '[0-9]* named types, [0-9]* comparisons' "$DIR/types.out") match PMPI, offloaded exactly as expected ($(grep -c 'PMPI defect' "$DIR/types.out") defects of Open MPI's own found; $((SECONDS - t0)) s)"
else
    bad "Open MPI mpi_types ($why)"; grep -v "PMPI defect" "$DIR/types.out" | tail -30
fi
t0=$SECONDS
"${MPICH[@]/120/240}" -n 8 -genv LD_LIBRARY_PATH "$LIB" "${SAN_MPICH[@]}" -genv LD_PRELOAD "$MPICH_PRELOAD" \
    -genv SHARP_MPI_VERBOSE 1 -genv SHARP_FABRIC_DIR "$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_types_mpich" >"$DIR/types-mpich.out" 2>&1
why=$(types_verdict $? "$DIR/types-mpich.out")
if [ -z "$why" ]; then
    ok "MPICH mpi_types, 8 ranks: $(grep -o '[0-9]* named types, [0-9]* comparisons' "$DIR/types-mpich.out") match PMPI, offloaded exactly as expected ($(grep -c 'PMPI defect' "$DIR/types-mpich.out") defects of MPICH's own found; $((SECONDS - t0)) s)"
else
    bad "MPICH mpi_types ($why)"; grep -v "PMPI defect" "$DIR/types-mpich.out" | tail -30
fi

# 2c'. non-blocking and persistent collectives (tests/mpi-coll/mpi_nb.c): several
# in flight on three communicators (the program starts its persistent ones
# in one order on every rank: SHARP_MPI_PERSISTENT_ORDERED=1 offloads them), completed in each rank's own order by
# every MPI_Wait*/MPI_Test* form, each result against PMPI, offloaded
# exactly as expected (with --ppn 2, communicators with one member per node
# take the node step on shared memory up to one slot: below)
nb_verdict() { # RC OUT
    local rc=$1 out=$2 c want got why=""
    [ "$rc" = 0 ] || why="exit $rc"
    grep -q "every result matches PMPI" "$out" || why="$why; results differ from PMPI"
    for c in MPI_Iallreduce MPI_Ireduce MPI_Ibcast MPI_Ibarrier; do
        want=$(awk -v c=$c '/^mpi_nb: expect offloaded/ {
            for (i = 1; i < NF; i++) if ($i == c) print $(i + 1) }' "$out")
        got=$(offloaded $c "$out")
        [ -n "$want" ] && [ "$want" = "$got" ] ||
            why="$why; $c offloaded ${got:-?}, expected ${want:-?}"
    done
    echo "$why"
}
t0=$SECONDS
"${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_MPI_VERBOSE=1 -x SHARP_MPI_PERSISTENT_ORDERED=1 -x SHARP_FABRIC_DIR="$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_nb_ompi" >"$DIR/nb.out" 2>&1
why=$(nb_verdict $? "$DIR/nb.out")
if [ -z "$why" ]; then
    ok "Open MPI mpi_nb, 8 ranks: $(grep -o '[0-9]* comparisons' "$DIR/nb.out") of non-blocking and persistent collectives match PMPI, offloaded exactly as expected ($((SECONDS - t0)) s)"
    grep "overlap" "$DIR/nb.out"
else
    bad "Open MPI mpi_nb ($why)"; tail -30 "$DIR/nb.out"
fi
t0=$SECONDS
"${MPICH[@]}" -n 8 -genv LD_LIBRARY_PATH "$LIB" "${SAN_MPICH[@]}" -genv LD_PRELOAD "$MPICH_PRELOAD" \
    -genv SHARP_MPI_VERBOSE 1 -genv SHARP_MPI_PERSISTENT_ORDERED 1 -genv SHARP_FABRIC_DIR "$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_nb_mpich" >"$DIR/nb-mpich.out" 2>&1
why=$(nb_verdict $? "$DIR/nb-mpich.out")
if [ -z "$why" ]; then
    ok "MPICH mpi_nb, 8 ranks: $(grep -o '[0-9]* comparisons' "$DIR/nb-mpich.out") of non-blocking and persistent collectives match PMPI, offloaded exactly as expected ($((SECONDS - t0)) s)"
else
    bad "MPICH mpi_nb ($why)"; tail -30 "$DIR/nb-mpich.out"
fi

# 2d. two processes per host (8 ranks on a 4-host fabric)
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft4.ibnd"
"$BIN/sharp-fabric" --dir "$DIR/fabric4" up "$DIR/ft4.ibnd" --net 127.19 >/dev/null
# (node-local aggregation with its step on shared memory, the default; on
# MPI, SHARP_MPI_NODE_SHM=0; and one member per process)
for way in "1 1" "1 0" "0 1"; do
    set -- $way
    aggr=$1 nshm=$2
    "${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_MPI_VERBOSE=2 -x SHARP_MPI_NODE_AGGR=$aggr -x SHARP_MPI_NODE_SHM=$nshm \
        -x SHARP_FABRIC_DIR="$DIR/fabric4" \
        "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_check_ompi" >"$DIR/ppn2.out" 2>&1
    rc=$?
    n=$(offloaded MPI_Allreduce "$DIR/ppn2.out")
    pernode=$(grep -c "one member per node" "$DIR/ppn2.out")
    steps=$(sed -n 's/.*node-local aggregation: \([0-9]*\) step(s) on shared memory, \([0-9]*\) on MPI.*/\1 \2/p' "$DIR/ppn2.out")
    set -- ${steps:-0 0}
    shm=$1 onmpi=$2
    if [ $rc -eq 0 ] && grep -q "every check passed" "$DIR/ppn2.out" && [ "${n:-0}" -gt 1000 ] &&
        { { [ $aggr = 1 ] && [ "$pernode" -gt 0 ]; } || { [ $aggr = 0 ] && [ "$pernode" = 0 ]; }; } &&
        { { [ "$way" = "1 1" ] && [ "$shm" -gt 1000 ]; } ||
          { [ "$way" = "1 0" ] && [ "$shm" = 0 ] && [ "$onmpi" -gt 1000 ]; } ||
          { [ $aggr = 0 ] && [ "$shm" = 0 ] && [ "$onmpi" = 0 ]; }; }; then
        ok "ppn 2 (8 ranks, 4 hosts), NODE_AGGR=$aggr NODE_SHM=$nshm: every check passed, $n allreduces offloaded, node steps $shm on shared memory and $onmpi on MPI"
    else
        bad "ppn 2, NODE_AGGR=$aggr NODE_SHM=$nshm (exit $rc, node steps: ${steps:-none})"; tail -30 "$DIR/ppn2.out"
    fi
done
# MPICH too, with the node step on shared memory (the default)
"${MPICH[@]}" -n 8 -genv LD_LIBRARY_PATH "$LIB" "${SAN_MPICH[@]}" -genv LD_PRELOAD "$MPICH_PRELOAD" \
    -genv SHARP_MPI_VERBOSE 1 -genv SHARP_FABRIC_DIR "$DIR/fabric4" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_check_mpich" >"$DIR/ppn2-mpich.out" 2>&1
rc=$?
shm=$(sed -n 's/.*node-local aggregation: \([0-9]*\) step(s) on shared memory.*/\1/p' "$DIR/ppn2-mpich.out")
if [ $rc -eq 0 ] && grep -q "every check passed" "$DIR/ppn2-mpich.out" && [ "${shm:-0}" -gt 1000 ]; then
    ok "MPICH ppn 2 (8 ranks, 4 hosts): every check passed, node steps $shm on shared memory"
else
    bad "MPICH ppn 2 (exit $rc, node steps on shared memory: ${shm:-none})"; tail -30 "$DIR/ppn2-mpich.out"
fi
# the node-local paths (gather, fold, bcast or send to the root, packed
# pairs) with the types that take different ones
t0=$SECONDS
"${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$DIR/fabric4" \
    "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_types_ompi" \
    --only MPI_INT,MPI_UINT8_T,MPI_DOUBLE,MPI_C_DOUBLE_COMPLEX,MPI_C_BOOL,MPI_SHORT_INT,MPI_DOUBLE_INT,MPI_LONG_DOUBLE,mixed,derived \
    >"$DIR/types-ppn2.out" 2>&1
why=$(types_verdict $? "$DIR/types-ppn2.out")
if [ -z "$why" ]; then
    ok "ppn 2 mpi_types (8 types, mixed bcasts, derived): $(grep -o '[0-9]* comparisons' "$DIR/types-ppn2.out") match PMPI, offloaded exactly as expected ($((SECONDS - t0)) s)"
else
    bad "ppn 2 mpi_types ($why)"; grep -v "PMPI defect" "$DIR/types-ppn2.out" | tail -30
fi
# non-blocking ones with one member per node: the node step on shared
# memory (its non-blocking form), with a 4 KiB slot so that the data above
# it take the node step's exchange on PMPI (node_xchg.c); the node steps
# on shared memory counted; and with SHARP_MPI_NODE_SHM=0 every node step's
# exchange on PMPI: offloaded all the same, every result checked
nbppn2() { # MPI SLOT OUT
    local mpi=$1 slot=$2 out=$3 t0=$SECONDS rc
    if [ "$mpi" = ompi ]; then
        "${OMPI[@]}" -np 8 -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
            -x SHARP_MPI_VERBOSE=1 -x SHARP_MPI_PERSISTENT_ORDERED=1 -x SHARP_FABRIC_DIR="$DIR/fabric4" \
            -x SHARP_MPI_NODE_SHM=$([ "$slot" = 0 ] && echo 0 || echo 1) \
            -x SHARP_MPI_NODE_SHM_SLOT="$slot" \
            "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_nb_ompi" \
            >"$out" 2>&1
    else
        "${MPICH[@]}" -n 8 -genv LD_LIBRARY_PATH "$LIB" "${SAN_MPICH[@]}" -genv LD_PRELOAD "$MPICH_PRELOAD" \
            -genv SHARP_MPI_VERBOSE 1 -genv SHARP_MPI_PERSISTENT_ORDERED 1 -genv SHARP_FABRIC_DIR "$DIR/fabric4" \
            -genv SHARP_MPI_NODE_SHM $([ "$slot" = 0 ] && echo 0 || echo 1) \
            -genv SHARP_MPI_NODE_SHM_SLOT "$slot" \
            "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_nb_mpich" \
            >"$out" 2>&1
    fi
    rc=$?
    local why shm
    why=$(nb_verdict $rc "$out")
    shm=$(sed -n 's/.*node-local aggregation: \([0-9]*\) step(s) on shared memory.*/\1/p' "$out")
    if [ "$slot" != 0 ] && [ "${shm:-0}" -lt 1000 ]; then
        why="$why; node steps on shared memory: ${shm:-none}"
    fi
    if [ -z "$why" ]; then
        ok "$mpi ppn 2 mpi_nb, slot $slot: $(grep -o '[0-9]* comparisons' "$out") match PMPI, offloaded exactly as expected (Iallreduce $(offloaded MPI_Iallreduce "$out"), Ireduce $(offloaded MPI_Ireduce "$out"), Ibcast $(offloaded MPI_Ibcast "$out"), Ibarrier $(offloaded MPI_Ibarrier "$out")), node steps on shared memory ${shm:-0} ($((SECONDS - t0)) s)"
    else
        bad "$mpi ppn 2 mpi_nb, slot $slot ($why)"; grep -v "goes to MPI" "$out" | tail -30
    fi
}
nbppn2 ompi 4096 "$DIR/nb-ppn2.out"
nbppn2 mpich 4096 "$DIR/nb-ppn2-mpich.out"
nbppn2 ompi 0 "$DIR/nb-ppn2-noshm.out"
# 2e. a collective waited for while the rank's own MPI_Isend still needs it
# (tests/mpi-coll/mpi_progress.c: the receiver MPI_Recv's before it joins
# the collective).  Open MPI over TCP between ranks: its shared memory
# moves a large message without the sender, TCP does not.  One rank per
# host (sharp's wait) and two (the node step's waits too); a hang is the
# timeout (before sharp's and the node step's waits gave MPI turns, every
# run of it hung)
progress() { # FABRIC LABEL
    local t0=$SECONDS out="$DIR/progress-$2.out" rc c n all=1
    timeout 90 mpirun.openmpi --allow-run-as-root --oversubscribe \
        --mca mpi_yield_when_idle 1 --mca btl self,tcp -np 8 \
        -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$1" \
        "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_progress_ompi" >"$out" 2>&1
    rc=$?
    for c in MPI_Allreduce MPI_Reduce MPI_Bcast MPI_Barrier MPI_Iallreduce; do
        n=$(offloaded $c "$out")
        [ "${n:-0}" -ge 24 ] || all=0 # 3 rounds x 8 ranks each
    done
    if [ $rc -eq 0 ] && grep -q "every call completed" "$out" && [ $all = 1 ]; then
        ok "Open MPI over TCP, $2: every collective after a pending 4 MiB MPI_Isend completed, offloaded, results right ($((SECONDS - t0)) s)"
    else
        bad "collectives after a pending MPI_Isend, $2 (exit $rc$([ $rc = 124 ] && echo ": hung"))"
        grep -v "^sharp_mpi: MPI_" "$out" | tail -20
    fi
}
progress "$DIR/fabric" "one rank per host"
progress "$DIR/fabric4" "two ranks per host"
"$BIN/sharp-fabric" --dir "$DIR/fabric4" down >/dev/null

# 3. no sharpd: plain MPI, one line of notice, right results
"${OMPI[@]}" -np 4 -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
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
"${OMPI[@]}" -np 4 -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
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

[ $fails -eq 0 ]
