#!/usr/bin/env bash
# make bench-mpi: bench/mpi_lat.c with 8 Open MPI ranks, three ways in one
# run: through sharp (libsharp_mpi preloaded, the bundled fat-tree on
# loopback), Open MPI over TCP between ranks (--mca btl tcp,self) and over
# shared memory (vader).  Everything shares this machine's cores.
# Last line: RESULT mpi_allreduce_8B_np8_vs_tcp=<r> mpi_allreduce_8B_np8_vs_shm=<r>
# (the 4-byte allreduce is the smallest size; "8B" names the benchmark)
set -euo pipefail
O=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
DIR=$(mktemp -d /tmp/sharp-bench-mpi.XXXXXX)
trap '"$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null 2>&1; rm -rf "$DIR"' EXIT
NP=8
RUN=(mpirun.openmpi --allow-run-as-root --oversubscribe -np $NP --mca mpi_yield_when_idle 1)
"$BIN/sharp-fabric" --dir "$DIR/fabric" up "$SRC/examples/fat-tree-2l.ibnd" --net 127.20 >/dev/null
SHARP_FABRIC_DIR="$DIR/fabric" "${RUN[@]}" --mca btl self,vader,tcp \
    -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" -x SHARP_FABRIC_DIR \
    "$BIN/sharp-fabric" rank -- "$BIN/bench_mpi_lat" >"$DIR/sharp.txt"
"${RUN[@]}" --mca btl tcp,self "$BIN/bench_mpi_lat" >"$DIR/tcp.txt"
"${RUN[@]}" --mca btl self,vader "$BIN/bench_mpi_lat" >"$DIR/shm.txt"
echo "MPI latency, $NP ranks on one machine (2 cores), mean of the ranks' maximum, us"
printf '%-10s %9s %12s %12s %12s\n' op bytes sharp "ompi tcp" "ompi shm"
paste "$DIR/sharp.txt" "$DIR/tcp.txt" "$DIR/shm.txt" |
    awk '{ printf "%-10s %9s %12.1f %12.1f %12.1f\n", $1, $2, $3, $6, $9 }'
s=$(awk '$1 == "allreduce" && $2 == 4 { print $3 }' "$DIR/sharp.txt")
t=$(awk '$1 == "allreduce" && $2 == 4 { print $3 }' "$DIR/tcp.txt")
m=$(awk '$1 == "allreduce" && $2 == 4 { print $3 }' "$DIR/shm.txt")
echo "Every sharp hop is a loopback TCP connection between processes that share"
echo "2 cores with 15 daemons: this measures the software path, not a fabric."
# two ranks per host: node-local aggregation (one member per node, the
# default) against one member per process
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft4.ibnd"
"$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
"$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/ft4.ibnd" --net 127.20 >/dev/null
for aggr in 1 0; do
    SHARP_FABRIC_DIR="$DIR/fabric" "${RUN[@]}" --mca btl self,vader,tcp \
        -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_FABRIC_DIR -x SHARP_MPI_NODE_AGGR=$aggr \
        "$BIN/sharp-fabric" rank -- "$BIN/bench_mpi_lat" >"$DIR/aggr$aggr.txt"
done
echo
echo "Two ranks per host (8 ranks, 4 hosts), us: node-local aggregation"
echo "(SHARP_MPI_NODE_AGGR=1, the default) against one member per process (=0)"
printf '%-10s %9s %12s %12s %8s\n' op bytes "per node" "per process" ratio
paste "$DIR/aggr1.txt" "$DIR/aggr0.txt" |
    awk '{ printf "%-10s %9s %12.1f %12.1f %8.2f\n", $1, $2, $3, $6, $3 / $6 }'
awk -v s="$s" -v t="$t" -v m="$m" 'BEGIN { printf "RESULT mpi_allreduce_8B_np8_vs_tcp=%.2f mpi_allreduce_8B_np8_vs_shm=%.2f\n", s / t, s / m }'
