#!/usr/bin/env bash
# The time a fallback takes (part of `make bench-mpi`): 8 Open MPI ranks
# run tests/mpi-coll/mpi_fault.c (a stream of checked collectives on four
# communicators) through a 2-level fabric, a leaf AN is killed with SIGKILL
# after call 1500; the library's report (SHARP_MPI_VERBOSE=1) gives the
# longest recovery of any rank (from the failed call's error to the
# decision: result fetched or call redone on MPI).  Three runs, median.
set -u
O=${1:-build}
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
DIR=$(mktemp -d /tmp/sharp-bench-fault.XXXXXX)
FAB="$DIR/fabric"
trap '"$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1; rm -rf "$DIR"' EXIT
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft.ibnd"
ms=()
for run in 1 2 3; do
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
    SHARP_AM_FLAT_MAX=0 "$BIN/sharp-fabric" --dir "$FAB" up "$DIR/ft.ibnd" \
        --net 127.20 >/dev/null || { echo "fabric up failed"; exit 1; }
    rm -f "$DIR/sig"
    timeout 150 mpirun.openmpi --allow-run-as-root --oversubscribe \
        --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp -np 8 \
        -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$FAB" \
        "$BIN/sharp-fabric" rank -- "$O/tests/mpi-coll/mpi_fault_ompi" \
        --calls 3000 --signal-at 1500 "$DIR/sig" >"$DIR/out" 2>&1 &
    job=$!
    for _ in $(seq 900); do [ -e "$DIR/sig" ] && break; sleep 0.1; done
    kill -9 $(awk '$1 == "an" && $2 == "leaf02" { print $4 }' "$FAB/pids")
    wait $job || { echo "run $run failed"; tail -20 "$DIR/out"; exit 1; }
    grep -q "every result right" "$DIR/out" || { echo "run $run: wrong results"; exit 1; }
    m=$(sed -n 's/.*recovery: .*longest \([0-9.]*\) ms.*/\1/p' "$DIR/out")
    echo "fallback run $run: $(grep -o 'recovery: .*' "$DIR/out")"
    ms+=("${m:-0}")
done
med=$(printf '%s\n' "${ms[@]}" | sort -n | sed -n 2p)
echo "A leaf AN killed under 8 ranks: the longest recovery of any rank, median"
echo "of 3 runs: $med ms (the job went on, every result right)"
echo "RESULT mpi_fallback_ms=$med"
