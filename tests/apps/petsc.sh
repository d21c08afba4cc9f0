# shellcheck shell=bash
# PETSc for the application tests and bench (sourced; O set): where
# Debian's PETSc and its tutorials are, and how a program is built against
# it.
#   petsc_have: true when PETSc (pkg-config), its examples and mpicc.openmpi
#     are there (make deps: petsc-dev libpetsc3.18-dev-examples)
#   petsc_build NAME SRC LOG: SRC built into $PETSC_T/NAME (again when SRC
#     or PETSc's pkg-config file is newer); on failure prints LOG, returns 1
#   petsc_cg_history OUT: the lines of petsc_cg's output that two runs of
#     one solve in exact mode must have bit for bit alike (reason and
#     iterations, error, every residual norm; %a)
#   busiest_an FAB: "NAME PID" of the top AN of the group carrying an
#     exact-mode solve on the fabric in FAB (the busiest by exact
#     operations, tests/support/groups.py; the manager's count is as fresh
#     as its last poll, SHARP_AM_STATS_INTERVAL: tried for 2 s); nothing
#     if none (BIN set)
PETSC_DIR=${PETSC_DIR:-/usr/lib/petsc}
PETSC_PC=$PETSC_DIR/lib/pkgconfig
PETSC_EX=$PETSC_DIR/share/petsc/examples/src/ksp/ksp/tutorials
mkdir -p "$O/tests/apps"
PETSC_T=$(cd "$O/tests/apps" && pwd)

petsc_have() {
    PKG_CONFIG_PATH=$PETSC_PC pkg-config --exists PETSc 2>/dev/null &&
        [ -f "$PETSC_EX/ex2.c" ] && command -v mpicc.openmpi >/dev/null
}

petsc_build() {
    local name=$1 src=$2 log=$3
    if [ -x "$PETSC_T/$name" ] && [ ! "$src" -nt "$PETSC_T/$name" ] &&
        [ ! "$PETSC_PC/PETSc.pc" -nt "$PETSC_T/$name" ]; then
        return 0
    fi
    # shellcheck disable=SC2046
    mpicc.openmpi -O2 -Wall $(PKG_CONFIG_PATH=$PETSC_PC pkg-config --cflags PETSc) \
        -o "$PETSC_T/$name" "$src" \
        $(PKG_CONFIG_PATH=$PETSC_PC pkg-config --libs PETSc) -lm >"$log" 2>&1 ||
        { echo "FAIL building $src"; cat "$log"; return 1; }
}

busiest_an() {
    local fab=$1 an= pid _
    for _ in $(seq 20); do
        an=$("$BIN/sharpctl" --socket "$fab/am.sock" --json groups |
            python3 "$(dirname "${BASH_SOURCE[0]}")/../support/groups.py" busiest)
        [ -n "$an" ] && break
        sleep 0.1
    done
    pid=$(awk -v n="$an" '$1 == "an" && $2 == n { print $4 }' "$fab/pids")
    [ -n "$pid" ] && echo "$an $pid"
}

petsc_cg_history() { grep -E '^(reason|error|norm) ' "$1"; }
