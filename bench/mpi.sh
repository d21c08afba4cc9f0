#!/usr/bin/env bash
# make bench-mpi: bench/mpi_lat.c (MPI_Allreduce, MPI_Iallreduce + MPI_Wait
# at 8 B, 4 KiB and 64 KiB, MPI_Barrier) with 8 and 16 Open MPI ranks (one per
# host), four ways in one run: through sharp (libsharp_mpi preloaded, a
# fat-tree on loopback, the fabric's default settings) over tcp/udp and
# over the shm transport (every AN SHARP_AN_TRANSPORT=shm), Open MPI over
# TCP between ranks (--mca btl tcp,self: the network sharp's tcp uses) and
# over shared memory (vader: what sharp's shm is compared with).  Everything shares this machine's cores, so next to
# each latency it prints the machine's CPU time and context switches per
# operation (all processes and the kernel, from /proc/stat).
#
# Last line:
#   RESULT mpi_allreduce_8B_np8_vs_tcp=.. mpi_allreduce_8B_np16_vs_tcp=..
#          mpi_allreduce_4K_np8_vs_tcp=.. mpi_iallreduce_8B_np8_vs_tcp=..
#          mpi_allreduce_1M_np8_vs_tcp=..
#          mpi_allreduce_1M_np8_barrier_vs_tcp=.. (and _4M_: a barrier
#          between calls, only the allreduce timed, as OSU measures)
#          mpi_allreduce_1M_np8_barrier_stripes_vs_one=.. (and _4M_: the
#          same with SHARP_COLL_STRIPES=2 over sharp on one tree)
#          mpi_cpu_per_op_np8_vs_tcp=.. mpi_barrier_np8_vs_tcp=..
#          mpi_layer_ns=.. mpi_allreduce_8B_np8_shm_vs_shm=..
#          mpi_allreduce_8B_np16_shm_vs_shm=..
#          mpi_allreduce_1M_np16_vs_tcp=.. mpi_allreduce_1M_np8_shm_vs_shm=..
#          mpi_bcast_8B_np8_shm_vs_shm=.. mpi_bcast_1M_np8_vs_tcp=..
#          mpi_barrier_np8_shm_vs_shm=.. mpi_iallreduce_8B_np8_shm_vs_shm=..
#          mpi_mcast_mac_8B_vs_untagged=.. mpi_mcast_mac_1M_vs_untagged=..
#          mpi_allreduce_8B_np64_vs_tcp=.. mpi_allreduce_8B_np64_vs_shm=..
#          mpi_bcast_8B_np64_vs_shm=..
#          mpi_allreduce_8B_ppn8_vs_shm=.. mpi_allreduce_4K_ppn8_vs_shm=..
#          mpi_allreduce_8B_ppn8_shm_vs_shm=..
#          mpi_node_aggr_8B_ppn8_vs_per_process=.. (and _4K_, _barrier_,
#          _bcast_8B_: the scale section's, below)
#          mpi_allreduce_16M_np8_density1_vs_tcp=.. (and density10,
#          density100_vs_dense, 1M_np8_density1_vs_tcp: mostly-zero sums,
#          bench/mpi_sparse.sh; SHARP_BENCH_SPARSE_RUN=0 skips it)
# (sharp over tcp/udp against Open MPI over TCP, sharp over shm against
# Open MPI over shared memory; a ratio below 1 is sharp faster).
#
# SHARP_BENCH_ROUNDS (default 3): the four ways run this many times,
# alternated; every figure printed is a median over the rounds (the scale
# section runs once, but for its largest one-rank-per-host point, whose
# figures are RESULT keys: that runs in rounds too).
# SHARP_BENCH_SCALE (default 0.5): the fraction of bench_mpi_lat's
# iterations each run makes (1: 1500 at <= 4 KiB).
# SHARP_BENCH_SCALE_RUN (default 1): 0 skips the scale section (64
# processes: it takes most of the run); SHARP_BENCH_SCALE_NPS ("8 16 32
# 64") and SHARP_BENCH_SCALE_PPNS ("2 4 8") choose its columns (the RESULT
# keys name the last of each).
# SHARP_BENCH_MAC (default 1): 0 skips the multicast tags' cost (it builds
# a second tree without them, in O/nomac, and runs sharp twice more).
set -euo pipefail
O=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
LAT=$BIN/bench_mpi_lat # an ordinary MPI program: the same for every build
DIR=$(mktemp -d /tmp/sharp-bench-mpi.XXXXXX)
# the fabric's logs stay when the bench fails, for the reason in them
cleanup() {
    local rc=$?
    "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null 2>&1 || true
    if [ "$rc" = 0 ]; then
        rm -rf "$DIR"
    else
        echo "bench-mpi: failed; the fabric's logs are in $DIR/fabric/logs" >&2
    fi
}
trap cleanup EXIT
export SHARP_BENCH_SCALE=${SHARP_BENCH_SCALE:-0.5}
run() { # NP, then mpirun arguments
    local np=$1
    shift
    mpirun.openmpi --allow-run-as-root --oversubscribe -np "$np" \
        --mca mpi_yield_when_idle 1 -x SHARP_BENCH_SCALE "$@"
}
sharp_run() { # NP OUT [mpirun -x settings ...]; $PRELOAD before libsharp_mpi
    local np=$1 out=$2
    shift 2
    SHARP_FABRIC_DIR="$DIR/fabric" run "$np" --mca btl self,vader,tcp \
        -x LD_LIBRARY_PATH="$LIB" \
        -x LD_PRELOAD="${PRELOAD:+$PRELOAD:}$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_FABRIC_DIR -x SHARP_MPI_VERBOSE=1 "$@" \
        "$BIN/sharp-fabric" rank -- "$LAT" >"$out" 2>"$out.err"
}
table() { # TITLE SHARP SHARP_SHM TCP SHM
    echo "$1"
    printf '%-10s %8s | %9s %9s %9s %9s | %6s %6s %6s %6s | %5s %5s %5s %5s\n' op bytes \
        "sharp" "sharp" "ompi" "ompi" sharp sharp ompi ompi sharp sharp ompi ompi
    printf '%-10s %8s | %9s %9s %9s %9s | %6s %6s %6s %6s | %5s %5s %5s %5s\n' "" "" \
        tcp shm tcp shm tcp shm tcp shm tcp shm tcp shm
    printf '%-10s %8s | %39s | %27s | %23s\n' "" "" "latency us" \
        "machine CPU us per op" "context switches/op"
    paste "$2" "$3" "$4" "$5" | awk '{ printf "%-10s %8s | %9.1f %9.1f %9.1f %9.1f | %6.0f %6.0f %6.0f %6.0f | %5.1f %5.1f %5.1f %5.1f\n", $1, $2, $3, $8, $13, $18, $4, $9, $14, $19, $5, $10, $15, $20 }'
}
val() { # FILE OP BYTES COLUMN
    awk -v o="$2" -v b="$3" -v c="$4" '$1 == o && $2 == b { print $c }' "$1"
}
median() { # the median of the numbers on standard input, one a line
    sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
median_rows() { # FILE...: bench_mpi_lat's lines, each number the median over the files
    local f op bytes c    # (columns 3 to 5; MEDIAN_COLS says others)
    awk '{ print $1, $2 }' "$1" | while read -r op bytes; do
        printf '%s %s' "$op" "$bytes"
        for c in ${MEDIAN_COLS:-3 4 5}; do
            printf ' %s' "$(for f in "$@"; do val "$f" "$op" "$bytes" "$c"; done | median)"
        done
        echo
    done
}

# Each round runs the four ways at np 8 and 16 back to back; a cell of the
# tables is the median over the rounds, a RESULT ratio the median of the
# rounds' own ratios (sharp and Open MPI minutes apart on a shared host
# drift more than either does within a round)
ROUNDS=${SHARP_BENCH_ROUNDS:-3}
for round in $(seq "$ROUNDS"); do
    for np in 8 16; do
        if [ "$np" = 8 ]; then
            cp "$SRC/examples/fat-tree-2l.ibnd" "$DIR/topo.ibnd"
        else
            "$BIN/sharp-topo" fat-tree --radix 8 --hosts 16 >"$DIR/topo.ibnd"
        fi
        "$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/topo.ibnd" --net 127.20 >/dev/null
        # np 8: the MPI layer's own cost, measured by a shim in front of it
        PRELOAD=
        [ "$np" = 8 ] && PRELOAD="$LIB/bench_mpi_layer.so"
        PRELOAD=$PRELOAD sharp_run "$np" "$DIR/sharp$np.$round"
        "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
        SHARP_AN_TRANSPORT=shm "$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/topo.ibnd" \
            --net 127.20 >/dev/null
        PRELOAD= sharp_run "$np" "$DIR/sharpshm$np.$round"
        "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
        run "$np" --mca btl tcp,self "$BIN/bench_mpi_lat" >"$DIR/tcp$np.$round"
        run "$np" --mca btl self,vader "$BIN/bench_mpi_lat" >"$DIR/shm$np.$round"
    done
done
for f in sharp sharpshm tcp shm; do
    for np in 8 16; do
        median_rows $(for k in $(seq "$ROUNDS"); do echo "$DIR/$f$np.$k"; done) \
            >"$DIR/$f$np.txt"
    done
done
for np in 8 16; do
    table "MPI_Allreduce, MPI_Iallreduce (+ MPI_Wait; float sum) and MPI_Barrier, $np ranks, one per host (medians of $ROUNDS rounds)" \
        "$DIR/sharp$np.txt" "$DIR/sharpshm$np.txt" "$DIR/tcp$np.txt" "$DIR/shm$np.txt"
    echo
done
layer=$(cat "$DIR"/sharp8.[0-9]*.err | sed -n "s/.*MPI layer's own cost: \([0-9.]*\) ns.*/\1/p" | median)
echo "The MPI layer's own cost per offloaded call (libsharp_mpi minus the"
echo "libsharp_coll call it makes; median of the 8 ranks of every round): $layer ns"
echo "Every process shares 2 cores: sharp's AN and the ranks, or Open MPI's"
echo "ranks. Compare like with like: sharp tcp with ompi tcp (the same"
echo "loopback network), sharp shm with ompi shm (vader)."
echo

# two ranks per host: node-local aggregation (one member per node, the
# default) against one member per process
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft4.ibnd"
"$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/ft4.ibnd" --net 127.20 >/dev/null
for aggr in 1 0; do
    sharp_run 8 "$DIR/aggr$aggr.txt" -x SHARP_MPI_NODE_AGGR=$aggr
done
"$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
echo "Two ranks per host (8 ranks, 4 hosts), us: node-local aggregation"
echo "(SHARP_MPI_NODE_AGGR=1, the default) against one member per process (=0);"
echo "\"per node\": how the per-node run's calls of that kind went (its report:"
echo "offloaded, on MPI, or both); MPI_Iallreduce takes the non-blocking node"
echo "step on shared memory up to one slot (SHARP_MPI_NODE_SHM_SLOT, 64 KiB)"
printf '%-10s %9s %12s %12s %8s  %s\n' op bytes "per node" "per process" ratio "per node"
# the report's "sharp_mpi: MPI_X offloaded bytes fallback bytes" rows
how() { # OP: offloaded / on MPI / both, from the per-node run's report
    awk -v c="MPI_$(echo "${1:0:1}" | tr a-z A-Z)${1:1}" \
        '$1 == "sharp_mpi:" && $2 == c { o = $3; f = $5 }
         END { print (o > 0 && f == 0) ? "offloaded" : (o > 0 ? "both" : "on MPI") }' \
        "$DIR/aggr1.txt.err"
}
paste "$DIR/aggr1.txt" "$DIR/aggr0.txt" | while read -r line; do
    set -- $line
    echo "$line" | awk -v h="$(how "$1")" \
        '{ printf "%-10s %9s %12.1f %12.1f %8.2f  %s\n", $1, $2, $3, $8, $3 / $8, h }'
done

# What multicast result tags cost (docs/security.md): sharp over tcp/udp,
# 8 ranks, against a build that neither makes nor checks them
# (-DSHP_MCAST_MAC=0, in $O/nomac: the product has no switch for it),
# alternated over the rounds
if [ "${SHARP_BENCH_MAC:-1}" = 1 ]; then
    # the daemons and libraries only (the benchmark program is the same)
    make -s -j"$(nproc)" -C "$SRC" O="$O/nomac" CPPFLAGS=-DSHP_MCAST_MAC=0 programs >/dev/null
    NOMAC=$(cd "$O/nomac" && pwd)
    cp "$SRC/examples/fat-tree-2l.ibnd" "$DIR/topo.ibnd"
    for round in $(seq "$ROUNDS"); do
        "$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/topo.ibnd" --net 127.20 >/dev/null
        PRELOAD= sharp_run 8 "$DIR/mac8.$round"
        "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
        "$NOMAC/bin/sharp-fabric" --dir "$DIR/fabric" up "$DIR/topo.ibnd" --net 127.20 >/dev/null
        BIN=$NOMAC/bin LIB=$NOMAC/lib PRELOAD= sharp_run 8 "$DIR/nomac8.$round"
        "$NOMAC/bin/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
    done
    echo
    echo "Multicast result tags: allreduce, 8 ranks, sharp over tcp/udp with"
    echo "them (the product) and without (a -DSHP_MCAST_MAC=0 build), us"
    echo "(medians of $ROUNDS alternated rounds)"
    printf '%-10s %9s %10s %10s %8s %10s %10s\n' op bytes "tagged" "untagged" ratio \
        "CPU tagged" "untagged"
    for b in 8 4096 1048576; do
        lt=$(for k in $(seq "$ROUNDS"); do val "$DIR/mac8.$k" allreduce $b 3; done | median)
        lu=$(for k in $(seq "$ROUNDS"); do val "$DIR/nomac8.$k" allreduce $b 3; done | median)
        ct=$(for k in $(seq "$ROUNDS"); do val "$DIR/mac8.$k" allreduce $b 4; done | median)
        cu=$(for k in $(seq "$ROUNDS"); do val "$DIR/nomac8.$k" allreduce $b 4; done | median)
        awk -v b=$b -v lt="$lt" -v lu="$lu" -v ct="$ct" -v cu="$cu" 'BEGIN {
            printf "%-10s %9s %10.1f %10.1f %8.2f %10.0f %10.0f\n", "allreduce", b,
                lt, lu, (lu > 0 ? lt / lu : 0), ct, cu }'
    done
fi

# Scale, and several ranks per host (the node-local step): one rank per host at 8 to 64 ranks on a 64-host
# fabric, and 2, 4, 8 ranks per host on the 8-host fabric, sharp against
# both Open MPI transports; allreduce of 8 B and 4 KiB, bcast, barrier
# (bench_mpi_lat with SHARP_BENCH_QUICK=1), one round each (64 processes
# on this machine's cores make every run long) but the largest one rank
# per host, whose figures are RESULT keys: SHARP_BENCH_ROUNDS alternated
# rounds of it (at 64 processes on 2 cores one run's figure moved by half
# from run to run of the same code).  SHARP_BENCH_SCALE_RUN=0
# skips it; SHARP_BENCH_SCALE_NPS and SHARP_BENCH_SCALE_PPNS choose the
# columns.
scale_row() { # LABEL OP BYTES FILE...: latency (job CPU per op) of each file
    local f op=$2 bytes=$3
    printf '%-16s %-9s %6s' "$1" "$op" "$bytes"
    shift 3
    for f in "$@"; do
        awk -v o="$op" -v b="$bytes" '$1 == o && $2 == b { printf " %9.1f (%6.0f)", $3, $6; found = 1 }
            END { if (!found) printf " %9s (%6s)", "-", "-" }' "$f"
    done
    echo
}
sr() { # OP BYTES A B [COLUMN]: latency (or COLUMN) of A / that of B
    awk -v a="$(val "$3" "$1" "$2" "${5:-3}")" -v b="$(val "$4" "$1" "$2" "${5:-3}")" \
        'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b; else printf "nan" }'
}
r() { # OP BYTES NP COLUMN [SHARP MPI]: sharp / Open MPI (tcp by default),
    # the median of the rounds' ratios
    local k
    for k in $(seq "$ROUNDS"); do
        awk -v s="$(val "$DIR/${5:-sharp}$3.$k" "$1" "$2" "$4")" \
            -v t="$(val "$DIR/${6:-tcp}$3.$k" "$1" "$2" "$4")" \
            'BEGIN { if (s != "" && t > 0) print s / t }'
    done | median | awk '{ printf "%.2f", $1 }'
}
if [ "${SHARP_BENCH_SCALE_RUN:-1}" = 1 ]; then
    NPS=${SHARP_BENCH_SCALE_NPS:-8 16 32 64}
    PPNS=${SHARP_BENCH_SCALE_PPNS:-2 4 8}
    # the job's own CPU time per operation too (ranks and the fabric's
    # daemons): on a host busy with other work it still measures the work
    export SHARP_BENCH_QUICK=1 SHARP_BENCH_JOB_CPU=1
    # one rank per host: a 64-host two-level fat-tree (radix 16)
    "$BIN/sharp-topo" fat-tree --radix 16 --hosts 64 >"$DIR/ft64.ibnd"
    "$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/ft64.ibnd" --net 127.20 >/dev/null
    last_np=${NPS##* } last_ppn=${PPNS##* }
    for np in $NPS; do
        [ "$np" = "$last_np" ] || PRELOAD= sharp_run "$np" "$DIR/sc-sharp$np"
    done
    "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
    for np in $NPS; do
        [ "$np" = "$last_np" ] && continue
        run "$np" --mca btl tcp,self "$BIN/bench_mpi_lat" >"$DIR/sc-tcp$np"
        run "$np" --mca btl self,vader "$BIN/bench_mpi_lat" >"$DIR/sc-shm$np"
    done
    for round in $(seq "$ROUNDS"); do # the keys' np: alternated rounds
        "$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/ft64.ibnd" --net 127.20 >/dev/null
        PRELOAD= sharp_run "$last_np" "$DIR/sc-sharp$last_np.$round"
        "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
        run "$last_np" --mca btl tcp,self "$BIN/bench_mpi_lat" >"$DIR/sc-tcp$last_np.$round"
        run "$last_np" --mca btl self,vader "$BIN/bench_mpi_lat" >"$DIR/sc-shm$last_np.$round"
    done
    for w in sharp tcp shm; do # its table rows: the medians of the rounds
        MEDIAN_COLS="3 4 5 6" median_rows $(for k in $(seq "$ROUNDS"); do
            echo "$DIR/sc-$w$last_np.$k"; done) >"$DIR/sc-$w$last_np"
    done
    # several ranks per host on the 8-host fabric: node-local aggregation
    # (its step on shared memory), one member per process, the same with
    # the aggregation nodes on the shm transport, Open MPI's two
    cp "$SRC/examples/fat-tree-2l.ibnd" "$DIR/topo.ibnd"
    "$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/topo.ibnd" --net 127.20 >/dev/null
    for ppn in $PPNS; do
        PRELOAD= sharp_run $((8 * ppn)) "$DIR/sc-aggr$ppn"
        PRELOAD= sharp_run $((8 * ppn)) "$DIR/sc-proc$ppn" -x SHARP_MPI_NODE_AGGR=0
    done
    "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
    SHARP_AN_TRANSPORT=shm "$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/topo.ibnd" \
        --net 127.20 >/dev/null
    for ppn in $PPNS; do
        PRELOAD= sharp_run $((8 * ppn)) "$DIR/sc-aggrshm$ppn"
    done
    "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
    for ppn in $PPNS; do
        run $((8 * ppn)) --mca btl tcp,self "$BIN/bench_mpi_lat" >"$DIR/sc-tcpp$ppn"
        run $((8 * ppn)) --mca btl self,vader "$BIN/bench_mpi_lat" >"$DIR/sc-shmp$ppn"
    done
    unset SHARP_BENCH_QUICK SHARP_BENCH_JOB_CPU
    echo
    echo "Scale, one rank per host (64-host fat-tree, radix 16): latency us"
    echo "(the job's CPU us per operation over the timed loop: its ranks and"
    echo "the fabric's daemons, not the rest of the machine), one round;"
    echo "at $last_np ranks the medians of $ROUNDS alternated rounds"
    printf '%-16s %-9s %6s %18s %18s %18s\n' ranks op bytes "sharp tcp/udp" "ompi tcp" "ompi shm"
    for np in $NPS; do
        for ob in "allreduce 8" "allreduce 4096" "bcast 8" "barrier 0"; do
            set -- $ob
            scale_row "$np" "$1" "$2" "$DIR/sc-sharp$np" "$DIR/sc-tcp$np" "$DIR/sc-shm$np"
        done
    done
    echo
    echo "Scale, several ranks per host (8-host fat-tree): latency us (job"
    echo "CPU us per operation); sharp with node-local aggregation (its step on"
    echo "shared memory), with one member per process (SHARP_MPI_NODE_AGGR=0),"
    echo "and node-local with the aggregation nodes on shm; one round"
    printf '%-16s %-9s %6s %18s %18s %18s %18s %18s\n' "ranks (per host)" op bytes \
        "sharp per node" "sharp per proc" "sharp shm ANs" "ompi tcp" "ompi shm"
    for ppn in $PPNS; do
        for ob in "allreduce 8" "allreduce 4096" "bcast 8" "bcast 4096" "barrier 0"; do
            set -- $ob
            scale_row "$((8 * ppn)) ($ppn)" "$1" "$2" "$DIR/sc-aggr$ppn" \
                "$DIR/sc-proc$ppn" "$DIR/sc-aggrshm$ppn" "$DIR/sc-tcpp$ppn" "$DIR/sc-shmp$ppn"
        done
    done
    # np 8 and 16 against TCP have their keys in the main section: a key
    # printed twice is two answers to one question
    SCALE_RESULT=""
    case $last_np in
    8 | 16) ;;
    *) SCALE_RESULT="mpi_allreduce_8B_np${last_np}_vs_tcp=$(r allreduce 8 "$last_np" 3 sc-sharp sc-tcp)" ;;
    esac
    SCALE_RESULT+=" mpi_allreduce_8B_np${last_np}_vs_shm=$(r allreduce 8 "$last_np" 3 sc-sharp sc-shm)"
    SCALE_RESULT+=" mpi_bcast_8B_np${last_np}_vs_shm=$(r bcast 8 "$last_np" 3 sc-sharp sc-shm)"
    SCALE_RESULT+=" mpi_allreduce_8B_ppn${last_ppn}_vs_shm=$(sr allreduce 8 "$DIR/sc-aggr$last_ppn" "$DIR/sc-shmp$last_ppn")"
    SCALE_RESULT+=" mpi_allreduce_4K_ppn${last_ppn}_vs_shm=$(sr allreduce 4096 "$DIR/sc-aggr$last_ppn" "$DIR/sc-shmp$last_ppn")"
    SCALE_RESULT+=" mpi_allreduce_8B_ppn${last_ppn}_shm_vs_shm=$(sr allreduce 8 "$DIR/sc-aggrshm$last_ppn" "$DIR/sc-shmp$last_ppn")"
    SCALE_RESULT+=" mpi_node_aggr_8B_ppn${last_ppn}_vs_per_process=$(sr allreduce 8 "$DIR/sc-aggr$last_ppn" "$DIR/sc-proc$last_ppn")"
    SCALE_RESULT+=" mpi_node_aggr_4K_ppn${last_ppn}_vs_per_process=$(sr allreduce 4096 "$DIR/sc-aggr$last_ppn" "$DIR/sc-proc$last_ppn")"
    SCALE_RESULT+=" mpi_node_aggr_barrier_ppn${last_ppn}_vs_per_process=$(sr barrier 0 "$DIR/sc-aggr$last_ppn" "$DIR/sc-proc$last_ppn")"
    SCALE_RESULT+=" mpi_node_aggr_bcast_8B_ppn${last_ppn}_vs_per_process=$(sr bcast 8 "$DIR/sc-aggr$last_ppn" "$DIR/sc-proc$last_ppn")"
    SCALE_RESULT+=" mpi_node_aggr_8B_ppn${last_ppn}_cpu_vs_per_process=$(sr allreduce 8 "$DIR/sc-aggr$last_ppn" "$DIR/sc-proc$last_ppn" 6)"
    SCALE_RESULT+=" mpi_allreduce_8B_ppn${last_ppn}_cpu_vs_shm=$(sr allreduce 8 "$DIR/sc-aggr$last_ppn" "$DIR/sc-shmp$last_ppn" 6)"
    SCALE_RESULT+=" mpi_allreduce_8B_np${last_np}_cpu_vs_shm=$(r allreduce 8 "$last_np" 6 sc-sharp sc-shm)"
    echo
fi

# Large messages with a barrier between calls (OSU's osu_allreduce: calls
# never overlap), 8 ranks, sharp over tcp/udp and Open MPI over TCP,
# alternated rounds
cp "$SRC/examples/fat-tree-2l.ibnd" "$DIR/topo.ibnd"
for round in $(seq "$ROUNDS"); do
    "$BIN/sharp-fabric" --dir "$DIR/fabric" up "$DIR/topo.ibnd" --net 127.20 >/dev/null
    PRELOAD= sharp_run 8 "$DIR/lgsharp8.$round" -x SHARP_BENCH_LARGE=1
    # striped over both spines' trees (libsharp.md, "Striping")
    PRELOAD= sharp_run 8 "$DIR/lgstripe8.$round" -x SHARP_BENCH_LARGE=1 \
        -x SHARP_COLL_STRIPES=2
    "$BIN/sharp-fabric" --dir "$DIR/fabric" down >/dev/null
    SHARP_BENCH_LARGE=1 run 8 -x SHARP_BENCH_LARGE --mca btl tcp,self "$LAT" >"$DIR/lgtcp8.$round"
done
echo
echo "MPI_Allreduce (float sum) with a barrier between calls, as OSU's"
echo "osu_allreduce measures it (only the allreduce timed), 8 ranks, us"
echo "(medians of $ROUNDS alternated rounds)"
echo "\"2 stripes\": sharp with SHARP_COLL_STRIPES=2 (a part of each call on"
echo "each spine's tree), its ratio to sharp on one tree"
printf '%-12s %9s %10s %10s %8s %10s %8s\n' op bytes "sharp tcp" "ompi tcp" ratio \
    "2 stripes" "vs one"
# the sizes bench_mpi_lat measured (large_section), from its lines
for b in $(cat "$DIR"/lg*8.* | awk '$1 == "allreduce_b" { print $2 }' | sort -nu); do
    ls_=$(for k in $(seq "$ROUNDS"); do val "$DIR/lgsharp8.$k" allreduce_b $b 3; done | median)
    lt_=$(for k in $(seq "$ROUNDS"); do val "$DIR/lgtcp8.$k" allreduce_b $b 3; done | median)
    lp_=$(for k in $(seq "$ROUNDS"); do val "$DIR/lgstripe8.$k" allreduce_b $b 3; done | median)
    awk -v b=$b -v s="$ls_" -v t="$lt_" -v p="$lp_" 'BEGIN {
        printf "%-12s %9s %10.1f %10.1f %8.2f %10.1f %8.2f\n", "allreduce_b", b, s, t,
            (t > 0 ? s / t : 0), p, (s > 0 ? p / s : 0) }'
done

# sparse payloads (bench/mpi_sparse.sh: its table, and its keys on the
# last line here); SHARP_BENCH_SPARSE_RUN=0 skips it
SPARSE_RESULT=""
if [ "${SHARP_BENCH_SPARSE_RUN:-1}" = 1 ]; then
    echo
    "$SRC/bench/mpi_sparse.sh" "$O" >"$DIR/sparse.out"
    grep -v '^RESULT ' "$DIR/sparse.out"
    SPARSE_RESULT=$(sed -n 's/^RESULT //p' "$DIR/sparse.out")
fi

echo "RESULT mpi_allreduce_8B_np8_vs_tcp=$(r allreduce 8 8 3)" \
    "mpi_allreduce_8B_np16_vs_tcp=$(r allreduce 8 16 3)" \
    "mpi_allreduce_4K_np8_vs_tcp=$(r allreduce 4096 8 3)" \
    "mpi_iallreduce_8B_np8_vs_tcp=$(r iallreduce 8 8 3)" \
    "mpi_allreduce_1M_np8_vs_tcp=$(r allreduce 1048576 8 3)" \
    "mpi_allreduce_1M_np8_barrier_vs_tcp=$(r allreduce_b 1048576 8 3 lgsharp lgtcp)" \
    "mpi_allreduce_4M_np8_barrier_vs_tcp=$(r allreduce_b 4194304 8 3 lgsharp lgtcp)" \
    "mpi_allreduce_1M_np8_barrier_stripes_vs_one=$(r allreduce_b 1048576 8 3 lgstripe lgsharp)" \
    "mpi_allreduce_4M_np8_barrier_stripes_vs_one=$(r allreduce_b 4194304 8 3 lgstripe lgsharp)" \
    "mpi_cpu_per_op_np8_vs_tcp=$(r allreduce 8 8 4)" \
    "mpi_barrier_np8_vs_tcp=$(r barrier 0 8 3)" \
    "mpi_layer_ns=$layer" \
    "mpi_allreduce_8B_np8_shm_vs_shm=$(r allreduce 8 8 3 sharpshm shm)" \
    "mpi_allreduce_8B_np16_shm_vs_shm=$(r allreduce 8 16 3 sharpshm shm)" \
    "mpi_allreduce_1M_np16_vs_tcp=$(r allreduce 1048576 16 3)" \
    "mpi_allreduce_1M_np8_shm_vs_shm=$(r allreduce 1048576 8 3 sharpshm shm)" \
    "mpi_bcast_8B_np8_shm_vs_shm=$(r bcast 8 8 3 sharpshm shm)" \
    "mpi_bcast_1M_np8_vs_tcp=$(r bcast 1048576 8 3)" \
    "mpi_barrier_np8_shm_vs_shm=$(r barrier 0 8 3 sharpshm shm)" \
    "mpi_iallreduce_8B_np8_shm_vs_shm=$(r iallreduce 8 8 3 sharpshm shm)" \
    ${NOMAC:+"mpi_mcast_mac_8B_vs_untagged=$(r allreduce 8 8 3 mac nomac)"} \
    ${NOMAC:+"mpi_mcast_mac_1M_vs_untagged=$(r allreduce 1048576 8 3 mac nomac)"} \
    ${SCALE_RESULT:-} ${SPARSE_RESULT:-}
