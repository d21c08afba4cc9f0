#!/usr/bin/env bash
# make demo: a local fabric (a 2-level fat-tree: 2 spines, 4 leaves, 8
# hosts) and an unchanged MPI program run through it by Open MPI with
# libsharp_mpi preloaded; then the same program on plain MPI.
set -euo pipefail
O=${1:-build}
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
DIR=$(cd "$O" && pwd)/demo
NP=${DEMO_RANKS:-8}
mkdir -p "$DIR"
fabric() { "$BIN/sharp-fabric" --dir "$DIR/fabric" "$@"; }
trap 'fabric down >/dev/null 2>&1 || true' EXIT

SRC=$(cd "$(dirname "$0")/.." && pwd)
echo "== topology: examples/fat-tree-2l.ibnd (ibnetdiscover format)"
cp "$SRC/examples/fat-tree-2l.ibnd" "$DIR/fat-tree.ibnd"
"$BIN/sharp-topo" check "$DIR/fat-tree.ibnd"
echo "== sharp-fabric up: sharp_am, a sharp_an per switch, a sharpd per host"
fabric down >/dev/null 2>&1 || true
export SHARP_AM_STATS_INTERVAL=1s # AN counters for sharpctl ans, below
fabric up "$DIR/fat-tree.ibnd" --net 127.14
fabric status | sed 's/^/   /'
echo
echo "== the aggregation trees the manager built (sharpctl trees; tree show 0)"
CTL=("$BIN/sharpctl" --socket "$DIR/fabric/am.sock")
"${CTL[@]}" trees | sed 's/^/   /'
"${CTL[@]}" tree show 0 | sed 's/^/   /'

PLAIN=(mpirun.openmpi --allow-run-as-root --oversubscribe -np "$NP"
       --mca mpi_yield_when_idle 1)
MPIRUN=("${PLAIN[@]}" --mca btl self,vader,tcp)
echo
echo "== $NP ranks, one per host, MPI collectives offloaded (LD_PRELOAD=libsharp_mpi_ompi.so)"
"${MPIRUN[@]}" -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$BIN/sharp_mpi_demo_ompi"
echo
echo "== what the aggregation nodes did (sharpctl ans)"
sleep 1.5 # the manager polls AN counters every second here
"${CTL[@]}" ans | sed 's/^/   /'
echo
echo "== the same program on plain Open MPI over TCP (the network sharp used)"
"${PLAIN[@]}" --mca btl tcp,self "$BIN/sharp_mpi_demo_ompi"
echo
echo "== sharp over shared memory: the fabric again, every AN speaking shm"
fabric down >/dev/null
SHARP_AN_TRANSPORT=shm fabric up "$DIR/fat-tree.ibnd" --net 127.14 >/dev/null
"${MPIRUN[@]}" -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
    -x SHARP_FABRIC_DIR="$DIR/fabric" \
    "$BIN/sharp-fabric" rank -- "$BIN/sharp_mpi_demo_ompi"
echo
echo "== the same program on plain Open MPI over shared memory (vader)"
"${PLAIN[@]}" --mca btl self,vader "$BIN/sharp_mpi_demo_ompi"
echo
echo "Daemon logs: $DIR/fabric/logs."
echo "What one machine can show: sharp against Open MPI over the same"
echo "transport (loopback TCP, then shared memory), where every hop costs the"
echo "same for both; on 2 shared cores latency is the machine's CPU work per"
echo "operation, so the ratios measure the work saved (fewer messages and"
echo "process wake-ups). What it cannot show: a real fabric's wires and"
echo "switches, and cores of their own for the aggregation nodes."
echo "make bench-mpi measures all four side by side with CPU per operation."
