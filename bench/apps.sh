#!/usr/bin/env bash
# make bench-apps: applications through sharp (issue 59), each by its own
# timing, 8 Open MPI ranks, four ways in every round:
#   ompi_tcp   plain Open MPI, --mca btl self,tcp (everything over loopback
#              TCP, as between hosts)
#   sharp_tcp  through libsharp_mpi on the demo's fat tree (ANs over tcp,
#              the fabric's defaults), point-to-point --mca btl self,tcp
#   sharp_shm  the same with every AN on the shm transport
#              (SHARP_AN_TRANSPORT=shm), point-to-point --mca btl self,vader
#   ompi_shm   plain Open MPI, --mca btl self,vader
# (like with like: sharp_tcp against ompi_tcp, sharp_shm against ompi_shm).
# The applications, built against Debian's PETSc and LAMMPS (make deps):
#   petsc small   tests/apps/petsc_cg (a 2-D Laplacian, CG + Jacobi) on a
#                 32 x 32 grid (128 unknowns a rank: latency-bound, the
#                 allreduces dominate), -ksp_norm_type none -ksp_max_it
#                 800: exactly 800 iterations of 2 allreduces
#   petsc large   the same on 512 x 512 (32768 unknowns a rank: the matrix
#                 and vectors' memory traffic and the halo exchange
#                 dominate), 200 iterations
#   lammps melt   examples/melt, 1000 steps (halo exchanges on MPI)
# PETSc's figure is -log_view's KSPSolve time (the slowest rank's), with
# the time an iteration and the reductions a second (VecTDot and VecNorm
# calls over KSPSolve's time); LAMMPS's its Loop time, with its
# reductions a second (the allreduces sharp's report counts, over it).
# And an AN killed mid-solve: petsc_cg in exact mode
# (SHARP_MPI_REPRODUCIBLE=1) on 128 x 128 to -ksp_rtol 1e-100 (some 2900
# iterations) through sharp (point-to-point self,vader,tcp), once without
# a fault and once with the top AN of the group carrying the solve killed
# at iteration 1000 (found at iteration 300 with tests/support/groups.py
# busiest; the fault-free run looks it up too, so that what the lookup
# costs the machine is in both): the extra time is the time from
# iteration 1000 to the end of the solve with the fault less without, in
# the same pair; both must give the same residual history bit for bit,
# and the faulted one must fail over to a standby group.
#
# SHARP_BENCH_ROUNDS (default 3): rounds, the ways alternated within each;
# every figure is a median over the rounds, every ratio the median of the
# rounds' own ratios.  SHARP_BENCH_FAULT_ROUNDS (default 5): fault pairs,
# after the rounds; the extra time is the median over them.
#
# Last line:
#   RESULT app_petsc_cg_small_np8_vs_tcp=.. app_petsc_cg_small_np8_vs_shm=..
#          app_petsc_cg_large_np8_vs_tcp=.. app_petsc_cg_large_np8_vs_shm=..
#          app_lammps_melt_np8_vs_tcp=.. app_lammps_melt_np8_vs_shm=..
#          app_petsc_cg_fault_extra_ms=..
# (a ratio below 1 is sharp faster)
set -euo pipefail
O=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
NET=127.22
ROUNDS=${SHARP_BENCH_ROUNDS:-3}
FROUNDS=${SHARP_BENCH_FAULT_ROUNDS:-5}
LMP=${LMP:-lmp}
MELT=${LAMMPS_MELT:-/usr/share/lammps/examples/melt/in.melt}
DIR=$(mktemp -d /tmp/sharp-bench-apps.XXXXXX)
FAB=$DIR/fabric
cleanup() {
    local rc=$?
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1 || true
    if [ "$rc" = 0 ]; then
        rm -rf "$DIR"
    else
        echo "bench-apps: failed; its outputs are in $DIR" >&2
    fi
}
trap cleanup EXIT
. "$SRC/tests/apps/petsc.sh"
if ! petsc_have || ! command -v "$LMP" >/dev/null || [ ! -f "$MELT" ]; then
    echo "bench-apps: needs PETSc, its examples and LAMMPS (make deps)" >&2
    exit 1
fi
petsc_build petsc_cg "$SRC/tests/apps/petsc_cg.c" "$DIR/build.out"
CG=$PETSC_T/petsc_cg
sed -e 's/^run[[:space:]].*/run 1000/' "$MELT" >"$DIR/in.melt"

fabric_up() { # [SHARP_AN_TRANSPORT]
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1 || true
    SHARP_AN_TRANSPORT=${1:-tcp} SHARP_AM_STATS_INTERVAL=200ms \
        "$BIN/sharp-fabric" --dir "$FAB" up "$SRC/examples/fat-tree-2l.ibnd" \
        --net $NET >"$DIR/fabric-up.out"
}
# mpi OUT BTL [mpirun arguments...] PROGRAM ...: 8 ranks
mpi() {
    local out=$1 btl=$2
    shift 2
    timeout -k 10 300 mpirun.openmpi --allow-run-as-root --oversubscribe \
        --mca mpi_yield_when_idle 1 --mca btl "$btl" -np 8 \
        -x OMP_NUM_THREADS=1 "$@" >"$out" 2>&1 ||
        { echo "bench-apps: failed: $out" >&2; tail -20 "$out" >&2; return 1; }
}
# sharp OUT BTL [mpirun arguments...] PROGRAM ...: the same through sharp
sharp() {
    local out=$1 btl=$2
    shift 2
    local pre=() a
    while [ $# -gt 0 ] && [ "$1" = -x ]; do pre+=("$1" "$2"); shift 2; done
    mpi "$out" "$btl" -x LD_LIBRARY_PATH="$LIB" \
        -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" -x SHARP_MPI_VERBOSE=1 \
        -x SHARP_FABRIC_DIR="$FAB" ${pre[@]+"${pre[@]}"} \
        "$BIN/sharp-fabric" rank -- "$@"
}
SMALL=(-m 32 -n 32 -ksp_type cg -pc_type jacobi -ksp_norm_type none
       -ksp_max_it 800 -log_view)
LARGE=(-m 512 -n 512 -ksp_type cg -pc_type jacobi -ksp_norm_type none
       -ksp_max_it 200 -log_view)
EXACT=(-m 128 -n 128 -ksp_type cg -pc_type jacobi -ksp_rtol 1e-100
       -ksp_atol 0 -ksp_max_it 6000 -log_view)

# one way's three applications: WAY RUNNER BTL
apps() {
    local way=$1 run=$2 btl=$3 r=$round
    (cd "$DIR" && $run "$DIR/small.$way.$r" "$btl" "$CG" "${SMALL[@]}")
    (cd "$DIR" && $run "$DIR/large.$way.$r" "$btl" "$CG" "${LARGE[@]}")
    (cd "$DIR" && $run "$DIR/melt.$way.$r" "$btl" "$LMP" -nocite -log none \
        -in "$DIR/in.melt")
}
# exact OUT KILL: the exact-mode solve through sharp on a fresh fabric; at
# iteration 300 the top AN of the group carrying it is looked up (the
# busiest, by the manager's count of exact operations), at 1000 it is
# killed (KILL 1) or not (0).  Both runs of a pair look it up, so what the
# lookup costs the machine (sharpctl, python) is in both, and done before
# 1000
exact() {
    local out=$1 kill=$2 an= pid=
    fabric_up
    rm -f "$DIR"/sig.*
    sharp "$out" self,vader,tcp -x SHARP_MPI_REPRODUCIBLE=1 "$CG" \
        "${EXACT[@]}" -signal_at 300,1000 -signal_file "$DIR/sig" &
    local job=$!
    for _ in $(seq 600); do [ -e "$DIR/sig.1" ] && break; sleep 0.05; done
    read -r an pid < <(busiest_an "$FAB")
    [ -n "$pid" ] || { echo "bench-apps: no AN carries the solve" >&2; return 1; }
    for _ in $(seq 600); do [ -e "$DIR/sig.2" ] && break; sleep 0.01; done
    [ "$kill" = 0 ] || kill -9 "$pid"
    wait "$job"
}
# the fault pair FR: without the fault, then with it
fault_pair() {
    local r=$1
    exact "$DIR/exact.$r" 0
    exact "$DIR/fault.$r" 1
    if ! cmp -s <(petsc_cg_history "$DIR/exact.$r") \
        <(petsc_cg_history "$DIR/fault.$r"); then
        echo "bench-apps: pair $r: the faulted solve's history differs" >&2
        return 1
    fi
    grep -q "standby groups: [1-9]" "$DIR/fault.$r" ||
        { echo "bench-apps: pair $r: no failover to a standby" >&2; return 1; }
}

for round in $(seq "$ROUNDS"); do
    echo "round $round: $(date +%T)" >&2
    apps ompi_tcp mpi self,tcp
    fabric_up
    apps sharp_tcp sharp self,tcp
    fabric_up shm
    apps sharp_shm sharp self,vader
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null
    apps ompi_shm mpi self,vader
done
for fr in $(seq "$FROUNDS"); do
    echo "fault pair $fr: $(date +%T)" >&2
    fault_pair "$fr"
done
"$BIN/sharp-fabric" --dir "$FAB" down >/dev/null

median() { # the median of the numbers on standard input, one a line
    sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# -log_view's row ROW of FILE: its column COL (2 count, 4 max time)
logv() { awk -v r="$2" -v c="$3" '$1 == r { print $c; exit }' "$1"; }
secs() { # CASE FILE: the application's time, s
    case $1 in
    melt) awk '/^Loop time of/ { print $4; exit }' "$2" ;;
    *) logv "$2" KSPSolve 4 ;;
    esac
}
reds() { # CASE FILE: reductions a second
    case $1 in
    melt) # sharp's report counts them (the same program on every way)
        local n
        n=$(awk '$1 == "sharp_mpi:" && $2 == "MPI_Allreduce" { print $3 + $5; exit }' \
            "$DIR/melt.sharp_tcp.1")
        awk -v n="$n" -v t="$(secs melt "$2")" 'BEGIN { print n / t }' ;;
    *) awk -v a="$(logv "$2" VecTDot 2)" -v b="$(logv "$2" VecNorm 2)" \
        -v t="$(secs "$1" "$2")" 'BEGIN { print (a + b) / t }' ;;
    esac
}
# CASE WAY FN: the median over the rounds of FN's figure
med() { for r in $(seq "$ROUNDS"); do "$3" "$1" "$DIR/$1.$2.$r"; done | median; }
# CASE WAY OTHER: the median of the rounds' ratios
ratio() {
    for r in $(seq "$ROUNDS"); do
        awk -v a="$(secs "$1" "$DIR/$1.$2.$r")" -v b="$(secs "$1" "$DIR/$1.$3.$r")" \
            'BEGIN { printf "%.3f\n", a / b }'
    done | median
}
its() { # CASE: iterations (PETSc) or steps
    case $1 in small) echo 800 ;; large) echo 200 ;; melt) echo 1000 ;; esac
}

echo "Applications, 8 ranks (medians of $ROUNDS alternated rounds): the"
echo "application's own time, its time an iteration (a step for LAMMPS) and"
echo "its reductions a second; ratio: sharp against Open MPI, like with like"
printf '%-12s %-10s %10s %12s %12s %8s\n' case way "time s" "ms an it" "reductions/s" ratio
for c in small large melt; do
    for w in ompi_tcp sharp_tcp sharp_shm ompi_shm; do
        t=$(med $c $w secs)
        rs=$(med $c $w reds)
        case $w in
        sharp_tcp) q=$(ratio $c sharp_tcp ompi_tcp) ;;
        sharp_shm) q=$(ratio $c sharp_shm ompi_shm) ;;
        *) q=- ;;
        esac
        awk -v c=$c -v w=$w -v t="$t" -v n="$(its $c)" -v rs="$rs" -v q="$q" 'BEGIN {
            printf "%-12s %-10s %10.3f %12.3f %12.0f %8s\n", c, w, t, 1e3 * t / n, rs, q }'
    done
done
echo

# the fault: from iteration 1000 to the end, with the fault less without
col() { awk -v k="$2" -v c="$3" '$1 == k { print $c; exit }' "$1"; }
extra() { awk -v a="$(col "$DIR/fault.$1" iter_ms_signal 4)" \
    -v b="$(col "$DIR/exact.$1" iter_ms_signal 4)" 'BEGIN { printf "%.1f\n", 1e3 * (a - b) }'; }
echo "An AN killed mid-solve (exact mode, $(col "$DIR/exact.1" reason 4) iterations; the top AN of the"
echo "solve's group looked up at iteration 300 in both runs of a pair, killed"
echo "at iteration 1000 in the second): KSPSolve s, the s from iteration 1000"
echo "to the end and the longest iteration ms, without and with the fault; the"
echo "extra ms: from iteration 1000 to the end, with the fault less without"
for r in $(seq "$FROUNDS"); do
    printf 'pair %d: solve %6.3f %6.3f  from 1000 %6.3f %6.3f  longest %5.1f %5.1f  extra %6.1f\n' \
        "$r" "$(secs exact "$DIR/exact.$r")" "$(secs exact "$DIR/fault.$r")" \
        "$(col "$DIR/exact.$r" iter_ms_signal 4)" "$(col "$DIR/fault.$r" iter_ms_signal 4)" \
        "$(col "$DIR/exact.$r" iter_ms 3)" "$(col "$DIR/fault.$r" iter_ms 3)" "$(extra "$r")"
done
fx=$(for r in $(seq "$FROUNDS"); do extra "$r"; done | median)
echo "the residual history the same bit for bit in every pair, a failover to"
echo "a standby in every faulted run; extra time, median of $FROUNDS pairs: $fx ms"
echo "RESULT app_petsc_cg_small_np8_vs_tcp=$(ratio small sharp_tcp ompi_tcp)" \
    "app_petsc_cg_small_np8_vs_shm=$(ratio small sharp_shm ompi_shm)" \
    "app_petsc_cg_large_np8_vs_tcp=$(ratio large sharp_tcp ompi_tcp)" \
    "app_petsc_cg_large_np8_vs_shm=$(ratio large sharp_shm ompi_shm)" \
    "app_lammps_melt_np8_vs_tcp=$(ratio melt sharp_tcp ompi_tcp)" \
    "app_lammps_melt_np8_vs_shm=$(ratio melt sharp_shm ompi_shm)" \
    "app_petsc_cg_fault_extra_ms=$fx"
