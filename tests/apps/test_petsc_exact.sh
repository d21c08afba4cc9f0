#!/usr/bin/env bash
# A PETSc solve in exact mode (SHARP_MPI_REPRODUCIBLE=1: every MPI_SUM of
# doubles correctly rounded) through libsharp_mpi (issue 59): the same
# residual history, bit for bit, whatever tree carries the sums and
# whatever fails under them.  tests/apps/petsc_cg.c (built against
# Debian's PETSc: CG + Jacobi on a 128 x 128 2-D Laplacian, a solution
# whose values jump from row to row, -ksp_rtol 1e-100: some 2900
# iterations, each 2 allreduces of one double) on 8 ranks, three ways:
#   - on the demo's fat tree (2 spines, 4 leaves, 8 hosts);
#   - the same, the top AN of the group carrying the solve's sums (the
#     group with the most exact operations, `sharpctl --json groups`)
#     killed with SIGKILL at iteration KILL_AT (1000) of the solve: the
#     communicator goes on through its standby group, on the other spine's
#     tree;
#   - on a 3-level fat tree (examples/fat-tree-3l.ibnd: 16 hosts, the
#     ranks on 8 of them).
# All three must print the same converged reason and iteration count and
# the same residual history and error norm, every bit (printed with %a);
# the first must offload the MPI_Allreduces (at least 2 an iteration a
# rank) with nothing on MPI but calls on communicators of one rank
# (PETSC_COMM_SELF's); the faulted one must count a failover to a standby and put no more calls on MPI than the
# first (nothing of the solve fell back).  Plain Open MPI runs the solve
# once as the reference the iteration count is checked against (within 2%:
# its sums are rounded in another order, not exactly).
# Skips (77) without PETSc; under SAN=1 as tests/mpi-coll's scripts do.
set -u
APP_NET=127.82
. "$(dirname "$0")/apps.sh"
. "$(dirname "$0")/petsc.sh"
KILL_AT=${KILL_AT:-1000}
if ! petsc_have; then
    echo "skip: PETSc not installed (make deps: petsc-dev libpetsc3.18-dev-examples)"
    exit 77
fi
petsc_build petsc_cg "$SRC/tests/apps/petsc_cg.c" "$DIR/build.out" || exit 1
CG=("$PETSC_T/petsc_cg" -m 128 -n 128 -ksp_type cg -pc_type jacobi
    -ksp_rtol 1e-100 -ksp_atol 0 -ksp_max_it 6000)
export SHARP_AM_STATS_INTERVAL=200ms # exact_ops per group, for busiest

its() { awk '$1 == "reason" { print $4 }' "$1"; }

# the reference: plain Open MPI (not exact: another rounding)
run_plain "$DIR/plain" "${CG[@]}"
[ "$rc" = 0 ] || { bad "plain Open MPI failed (exit $rc)"; excerpt "$DIR/plain"; exit 1; }
echo "plain Open MPI: $(its "$DIR/plain") iterations, $secs s"

APP_ENV=(SHARP_MPI_REPRODUCIBLE=1)
# exact RUN [TOPO]: the solve through sharp on a fresh fabric of TOPO
exact() {
    fabric_up "${2:-}" || { bad "$1: the fabric did not come up"; cat "$DIR/fabric-up.out"; return 1; }
    run_sharp "$DIR/$1" "${CG[@]}"
    [ "$rc" = 0 ] || { bad "$1: through sharp failed (exit $rc)"; excerpt "$DIR/$1"; return 1; }
}

# the faulted run: in the background; at iteration KILL_AT the top AN of
# the group with the most exact operations is killed
faulted() {
    fabric_up || { bad "fault: the fabric did not come up"; return 1; }
    rm -f "$DIR/sig"
    (run_sharp "$DIR/fault" "${CG[@]}" -signal_at "$KILL_AT" -signal_file "$DIR/sig"
     echo "$rc" >"$DIR/fault.rc") &
    local job=$! an= pid=
    for _ in $(seq 600); do [ -e "$DIR/sig" ] && break; sleep 0.1; done
    read -r an pid < <(busiest_an "$FAB")
    if [ -e "$DIR/sig" ] && [ -n "$pid" ]; then
        kill -9 "$pid"
        echo "fault: AN $an (pid $pid) killed at iteration $KILL_AT"
    else
        bad "fault: no AN to kill (signal $([ -e "$DIR/sig" ] && echo seen || echo never), group's AN '${an}')"
    fi
    wait "$job"
    rc=$(cat "$DIR/fault.rc" 2>/dev/null || echo 1)
    [ "$rc" = 0 ] || { bad "fault: through sharp failed (exit $rc)"; excerpt "$DIR/fault"; return 1; }
    [ -n "$pid" ]
}

exact ft2 || exit 1
faulted || exit 1
exact ft3 "$SRC/examples/fat-tree-3l.ibnd" || exit 1

n=$(its "$DIR/ft2") np=$(its "$DIR/plain")
if [ -z "$n" ] || [ "$n" -lt 1000 ]; then
    bad "the solve made ${n:-no} iterations (at least 1000 expected)"
elif [ $((100 * (n > np ? n - np : np - n))) -gt $((2 * np)) ]; then
    bad "exact: $n iterations, plain Open MPI $np (more than 2% apart)"
else
    ok "the solve: $n iterations in exact mode, $np on plain Open MPI"
fi
for r in fault ft3; do
    what="the top AN of the solve's group killed at iteration $KILL_AT"
    [ $r = ft3 ] && what="a 3-level fat tree"
    if [ -n "$(petsc_cg_history "$DIR/ft2")" ] && cmp -s <(petsc_cg_history "$DIR/ft2") <(petsc_cg_history "$DIR/$r"); then
        ok "$what: the same $(its "$DIR/$r") iterations, residual history and error, bit for bit, as on the demo's fat tree"
    else
        bad "$what: the history differs from the demo fat tree's"
        diff <(petsc_cg_history "$DIR/ft2") <(petsc_cg_history "$DIR/$r") | head -6 | sed 's/^/    | /'
    fi
done

# offloaded; what went to MPI: PETSC_COMM_SELF's calls only, no more after
# the fault; the fault moved the solve to its standby
read -r o f < <(report "$DIR/ft2" MPI_Allreduce)
read -r fo ff < <(report "$DIR/fault" MPI_Allreduce)
rest=$(why_rows "$DIR/ft2" | awk '$1 != "one_rank"')
if [ "$o" -ge $((2 * n * APP_NP)) ] && [ -z "$rest" ]; then
    ok "fat tree: $o MPI_Allreduces offloaded, $f on MPI (communicators of one rank)"
else
    bad "fat tree: $o MPI_Allreduces offloaded (< 2 x $n x $APP_NP) or on MPI for other reasons: $rest"
fi
fover=$(awk '/sharp_mpi: standby groups:/ { print $4 }' "$DIR/fault")
if [ "${fover:-0}" -gt 0 ] && [ "$ff" = "$f" ] && [ "$fo" = "$o" ]; then
    ok "fault: $fover failover(s) to a standby, $fo MPI_Allreduces offloaded, $ff on MPI as without the fault; solve $(awk '$1 == "solve_s" { print $2 }' "$DIR/fault") s against $(awk '$1 == "solve_s" { print $2 }' "$DIR/ft2") s, longest iteration $(awk '$1 == "iter_ms" { print $3 }' "$DIR/fault") ms"
else
    bad "fault: ${fover:-no} failovers, $fo offloaded and $ff on MPI (without the fault $o and $f)"
    grep "^sharp_mpi" "$DIR/fault" | head -20 | sed 's/^/    | /'
fi
[ $fails -eq 0 ]
