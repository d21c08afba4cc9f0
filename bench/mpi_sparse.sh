#!/usr/bin/env bash
# The sparse-payload section of make bench-mpi (issue 61): bench/mpi_lat.c
# with SHARP_BENCH_SPARSE=1 (float sums of 1, 4 and 16 MiB, 8 ranks one per
# host, blocks of 1 KiB non-zero at 1, 10, 50 and 100 % per rank), three
# ways alternated in rounds: through sharp over tcp/udp as it comes (sparse
# fragments on), through sharp with them off (SHARP_COLL_SPARSE_MIN=0:
# "dense"), and Open MPI over TCP; latency, the machine's CPU per
# operation, and the loopback bytes per operation and rank.  Beside them,
# bench_mem_floor (bench/mem_floor.c): what 8 ranks' necessary passes over
# 16 MiB at 1 and 10 % cost on this machine with no message at all (each
# rank scans its input and writes the result; then also libsharp_mpi's
# copy of its recovery record), the least a latency here can be.
#
#   bench/mpi_sparse.sh [O]   (O: the build, default build)
#
# Last line:
#   RESULT mpi_allreduce_16M_np8_density1_vs_tcp=.. (and density10)
#          mpi_allreduce_16M_np8_density100_vs_dense=..
#          mpi_allreduce_1M_np8_density1_vs_tcp=..
#          mpi_allreduce_16M_np8_density1_floor_vs_tcp=.. (and density10:
#          bench_mem_floor's time with the record's copy against Open MPI's
#          latency: no sharp below it on this machine)
# a ratio the median of the rounds' own ratios (below 1: sharp faster).
# SHARP_BENCH_SPARSE_ROUNDS (5), SHARP_BENCH_SCALE (0.5: the iterations'
# fraction, at least 10 at 16 MiB and 25 below; under 0.1 a tiny run).
set -euo pipefail
O=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
DIR=$(mktemp -d /tmp/sharp-bench-sparse.XXXXXX)
cleanup() {
    local rc=$?
    "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null 2>&1 || true
    if [ "$rc" = 0 ]; then rm -rf "$DIR"; else echo "bench sparse: failed; logs in $DIR" >&2; fi
}
trap cleanup EXIT
export SHARP_BENCH_SCALE=${SHARP_BENCH_SCALE:-0.5} SHARP_BENCH_SPARSE=1
ROUNDS=${SHARP_BENCH_SPARSE_ROUNDS:-5}
run() { # OUT, then mpirun arguments
    local out=$1
    shift
    mpirun.openmpi --allow-run-as-root --oversubscribe -np 8 \
        --mca mpi_yield_when_idle 1 -x SHARP_BENCH_SCALE -x SHARP_BENCH_SPARSE "$@" \
        >"$out" 2>"$out.err"
}
sharp_run() { # OUT SPARSE_MIN
    SHARP_FABRIC_DIR="$DIR/fabric" run "$1" --mca btl self,vader,tcp \
        -x LD_LIBRARY_PATH="$LIB" -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_FABRIC_DIR -x SHARP_COLL_SPARSE_MIN="$2" \
        "$BIN/sharp-fabric" rank -- "$BIN/bench_mpi_lat"
}
cp "$SRC/examples/fat-tree-2l.ibnd" "$DIR/topo.ibnd"
for k in $(seq "$ROUNDS"); do
    "$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/topo.ibnd" --net 127.20 >/dev/null
    sharp_run "$DIR/sparse.$k" 16k
    sharp_run "$DIR/dense.$k" 0
    "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
    run "$DIR/tcp.$k" --mca btl tcp,self "$BIN/bench_mpi_lat"
    for d in 1 10; do
        "$BIN/bench_mem_floor" 8 16777216 "$d" >"$DIR/floor$d.$k"
    done
done
val() { # FILE NAME BYTES COLUMN
    awk -v o="$2" -v b="$3" -v c="$4" '$1 == o && $2 == b { print $c }' "$1"
}
wire() { awk -v o="$2" -v b="$3" '$1 == "wire" && $2 == o && $3 == b { print $4 }' "$1"; }
median() {
    sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
med() { # WAY NAME BYTES COLUMN|wire: the median over the rounds
    for k in $(seq "$ROUNDS"); do
        if [ "$4" = wire ]; then wire "$DIR/$1.$k" "$2" "$3"; else val "$DIR/$1.$k" "$2" "$3" "$4"; fi
    done | median
}
ratio() { # A B NAME BYTES: the median of the rounds' A / B latencies
    for k in $(seq "$ROUNDS"); do
        awk -v a="$(val "$DIR/$1.$k" "$3" "$4" 3)" -v b="$(val "$DIR/$2.$k" "$3" "$4" 3)" \
            'BEGIN { if (a != "" && b > 0) print a / b }'
    done | median | awk '{ printf "%.2f", $1 }'
}
echo "Sparse payloads: MPI_Allreduce of floats, 8 ranks one per host, blocks of"
echo "1 KiB non-zero at the density given (each rank its own); latency us,"
echo "machine CPU us per op, loopback KiB per op and rank (medians of $ROUNDS"
echo "alternated rounds): sharp over tcp/udp as it comes (sparse), sharp with"
echo "SHARP_COLL_SPARSE_MIN=0 (dense), Open MPI over TCP"
printf '%8s %7s | %9s %9s %9s | %8s %8s %8s | %8s %8s %8s | %6s %6s\n' bytes density \
    sparse dense "ompi tcp" sparse dense ompi sparse dense ompi "s/tcp" "s/d"
for bytes in 1048576 4194304 16777216; do
    for d in 1 10 50 100; do
        n=sparse_d$d
        printf '%8s %6s%% | %9.0f %9.0f %9.0f | %8.0f %8.0f %8.0f | %8.0f %8.0f %8.0f | %6s %6s\n' \
            "$bytes" "$d" "$(med sparse $n $bytes 3)" "$(med dense $n $bytes 3)" \
            "$(med tcp $n $bytes 3)" "$(med sparse $n $bytes 4)" "$(med dense $n $bytes 4)" \
            "$(med tcp $n $bytes 4)" "$(med sparse $n $bytes wire | awk '{ print $1 / 1024 }')" \
            "$(med dense $n $bytes wire | awk '{ print $1 / 1024 }')" \
            "$(med tcp $n $bytes wire | awk '{ print $1 / 1024 }')" \
            "$(ratio sparse tcp $n $bytes)" "$(ratio sparse dense $n $bytes)"
    done
done
floor() { # DENSITY COLUMN (5: scan and result, 6: and the record's copy)
    for k in $(seq "$ROUNDS"); do awk -v c="$2" '{ print $c }' "$DIR/floor$1.$k"; done | median
}
floor_ratio() { # DENSITY: the rounds' floor (with the record) / Open MPI's latency
    for k in $(seq "$ROUNDS"); do
        awk -v a="$(awk '{ print $6 }' "$DIR/floor$1.$k")" \
            -v b="$(val "$DIR/tcp.$k" "sparse_d$1" 16777216 3)" 'BEGIN { if (b > 0) print a / b }'
    done | median | awk '{ printf "%.2f", $1 }'
}
echo
echo "The floor, 16 MiB, 8 ranks' passes at once, no messages (bench_mem_floor;"
echo "us per operation, medians): scan + result written / and the record's copy"
for d in 1 10; do
    printf '%8s %6s%% | %9.0f %9.0f | against Open MPI %s\n' 16777216 "$d" \
        "$(floor $d 5)" "$(floor $d 6)" "$(floor_ratio $d)"
done
echo "RESULT mpi_allreduce_16M_np8_density1_vs_tcp=$(ratio sparse tcp sparse_d1 16777216)" \
    "mpi_allreduce_16M_np8_density10_vs_tcp=$(ratio sparse tcp sparse_d10 16777216)" \
    "mpi_allreduce_16M_np8_density100_vs_dense=$(ratio sparse dense sparse_d100 16777216)" \
    "mpi_allreduce_1M_np8_density1_vs_tcp=$(ratio sparse tcp sparse_d1 1048576)" \
    "mpi_allreduce_16M_np8_density1_floor_vs_tcp=$(floor_ratio 1)" \
    "mpi_allreduce_16M_np8_density10_floor_vs_tcp=$(floor_ratio 10)"
