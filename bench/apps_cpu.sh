#!/usr/bin/env bash
# Where the latency-bound PETSc CG's time goes over shared memory
# (docs/applications.md, issue 59): the small solve of bench/apps.sh
# (32 x 32, 800 iterations, 8 ranks) under plain Open MPI vader, through
# sharp with every AN on shm on the demo fat-tree (two levels of ANs on
# an operation's path) and on a fabric of one switch (one AN), ROUNDS (5)
# alternated rounds.  From iteration 100 to 700 (petsc_cg -signal_at) a
# watcher (bench/apps_cpu.py) reads the machine's context switches and
# busy time and every daemon's CPU time: printed per iteration, with the
# solve's time, each run, then the medians.
#   bash bench/apps_cpu.sh [O]
set -u
O=${1:-build}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
ROUNDS=${ROUNDS:-5}
DIR=$(mktemp -d /tmp/sharp-bench-appscpu.XXXXXX)
FAB=$DIR/fabric
trap '"$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1; rm -rf "$DIR"' EXIT
. "$SRC/tests/apps/petsc.sh"
petsc_have || { echo "bench-apps-cpu: needs PETSc (make deps)" >&2; exit 1; }
petsc_build petsc_cg "$SRC/tests/apps/petsc_cg.c" "$DIR/build.out" || exit 1
"$BIN/sharpctl" topology generate fat-tree --levels 2 --radix 16 --hosts 8 \
    >"$DIR/one.ibnd"
CG=(-m 32 -n 32 -ksp_type cg -pc_type jacobi -ksp_norm_type none
    -ksp_max_it 800 -log_view -signal_at 100,700 -signal_file "$DIR/sig")
run() { # NAME mpirun-arguments...
    local name=$1 w
    shift
    rm -f "$DIR"/sig.*
    python3 "$SRC/bench/apps_cpu.py" "$DIR/sig" 600 "$FAB/pids" >"$DIR/$name.cpu" &
    w=$!
    timeout -k 10 300 mpirun.openmpi --allow-run-as-root --oversubscribe \
        --mca mpi_yield_when_idle 1 -np 8 -x OMP_NUM_THREADS=1 "$@" \
        >"$DIR/$name.out" 2>&1 || { echo "failed: $name" >&2; tail "$DIR/$name.out" >&2; }
    wait $w
    echo "$name solve_s $(awk '$1 == "KSPSolve" { print $4; exit }' "$DIR/$name.out") $(cat "$DIR/$name.cpu")"
}
sharp_run() { # NAME TOPOLOGY
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
    SHARP_AN_TRANSPORT=shm "$BIN/sharp-fabric" --dir "$FAB" up "$2" --net 127.74 \
        >"$DIR/up.out" || { cat "$DIR/up.out"; exit 1; }
    run "$1" --mca btl self,vader -x LD_LIBRARY_PATH="$LIB" \
        -x LD_PRELOAD="$LIB/libsharp_mpi_ompi.so" -x SHARP_FABRIC_DIR="$FAB" \
        "$BIN/sharp-fabric" rank -- "$PETSC_T/petsc_cg" "${CG[@]}"
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
}
for r in $(seq "$ROUNDS"); do
    run "vader.$r" --mca btl self,vader "$PETSC_T/petsc_cg" "${CG[@]}"
    sharp_run "tree.$r" "$SRC/examples/fat-tree-2l.ibnd"
    sharp_run "one.$r" "$DIR/one.ibnd"
done | tee "$DIR/runs"
echo "medians of $ROUNDS rounds:"
python3 - "$DIR/runs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for way in ("vader", "tree", "one"):
    r = [x for x in rows if x[0].startswith(way + ".") and len(x) >= 11]
    if not r:
        continue
    m = lambda i: statistics.median(float(x[i]) for x in r)
    print("%-6s solve %.4f s  ctxt/it %.1f  busy ms/it %.3f  daemons ms/it %.3f"
          % (way, m(2), m(4), m(6), m(10)))
PY
