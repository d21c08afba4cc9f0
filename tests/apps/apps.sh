# shellcheck shell=bash
# What the application tests of tests/apps begin with (sourced, after
# `set -u`): tests/mpi-coll/lib.sh (O, BIN, LIB, SAN_PRE, SAN_OMPI; the
# skip under SAN=1 and SAN=thread: an application with the sanitizers'
# libsharp_mpi preloaded runs 4-8x slower on 2 cores, SAN_MPI_TESTS=all
# runs it), then:
#   - DIR, a directory of the test's own (removed at exit unless KEEP_LOGS)
#   - fabric_up [TOPO]: a fabric on loopback APP_NET (127.81 unless the
#     script set it first), down at exit: TOPO, by default the demo's fat
#     tree (examples/fat-tree-2l.ibnd: 2 spines, 4 leaves, 8 hosts); the
#     one before is taken down
#   - run_plain OUT CMD...: CMD on 8 ranks of plain Open MPI (btl
#     self,vader,tcp); run_sharp OUT CMD...: the same through libsharp_mpi
#     (SHARP_MPI_VERBOSE=1), each rank a process of its host of the fabric;
#     both set rc and secs, stdout and stderr in OUT.  APP_ENV: more
#     NAME=VALUE for the ranks of both
#   - report OUT COLL: "offloaded fallback" from the report at MPI_Finalize
#   - why_rows OUT: the "not offloaded, because" table's rows, "reason
#     calls" a line (nothing when nothing went to MPI)
#   - ok, bad (counts fails), excerpt OUT
. "$(dirname "${BASH_SOURCE[0]}")/../mpi-coll/lib.sh"
command -v mpirun.openmpi >/dev/null || { echo "skip: no Open MPI"; exit 77; }
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
APP_NP=8
APP_NET=${APP_NET:-127.81}
APP_ENV=()
APP_TIMEOUT=${APP_TIMEOUT:-120}
DIR=$(mktemp -d "/tmp/sharp-test-$(basename "$0" .sh).XXXXXX")
FAB="$DIR/fabric"
app_cleanup() {
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap app_cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
excerpt() { grep -v '^\s*$' "$1" | tail -15 | cut -c1-200 | sed 's/^/    | /'; }

fabric_up() {
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
    "$BIN/sharp-fabric" --dir "$FAB" up "${1:-$SRC/examples/fat-tree-2l.ibnd}" \
        --net "$APP_NET" >"$DIR/fabric-up.out" 2>&1
}

# the -x arguments of APP_ENV
app_env() {
    local e
    for e in ${APP_ENV[@]+"${APP_ENV[@]}"}; do
        printf '%s\0' -x "$e"
    done
}

# run_plain OUT [MPIRUN-OPTIONS...] PROGRAM ARGS...: 8 ranks of Open MPI;
# sets rc and secs
run_plain() {
    local out=$1 t0=$SECONDS
    shift
    local envs=()
    mapfile -d '' envs < <(app_env)
    timeout -k 10 "$APP_TIMEOUT" mpirun.openmpi --allow-run-as-root \
        --oversubscribe --mca mpi_yield_when_idle 1 \
        --mca btl self,vader,tcp -np "$APP_NP" ${envs[@]+"${envs[@]}"} \
        "$@" >"$out" 2>&1
    rc=$? secs=$((SECONDS - t0))
}

# the same mpirun, the program as a host's process through libsharp_mpi
run_sharp() {
    local out=$1
    shift
    run_plain "$out" -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" \
        -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
        -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$FAB" \
        "$BIN/sharp-fabric" rank -- "$@"
}

report() {
    awk -v c="$2" '$1 == "sharp_mpi:" && $2 == c { o = $3; f = $5 }
        END { print o + 0, f + 0 }' "$1"
}

why_rows() {
    awk '$1 == "sharp_mpi:" && $2 == "why" { print $3, $5 }' "$1"
}
