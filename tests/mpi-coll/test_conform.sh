#!/usr/bin/env bash
# Correct MPI programs that libsharp_mpi must not change the behaviour of:
# tests/mpi-coll/mpi_conform.c's cases (the NBX sparse exchange, handles
# freed while an operation uses them, MPI_Request_free, persistent
# collectives started in different orders, fresh communicators, 4000
# requests in flight, MPI_Comm_idup, intercommunicators, derived types,
# errors in statuses, a window of mixed non-blocking collectives over four
# communicators), each of which passes under plain Open MPI and MPICH,
# run through the library (SHARP_MPI_VERBOSE=1) under Open MPI and MPICH,
# 8 ranks one per host of a sharp-fabric (fat tree, 8 hosts) and 8 ranks
# two per host (4 hosts).  For each MPI and layout the cases run in six
# mpiruns: nbx alone (the report must show its MPI_Ibarriers offloaded),
# the next five, persist_freed_comm alone (its bcasts offloaded),
# many_outstanding alone (the slowest: through the library 3 to 9 s at a
# rank a host, at two 17 to 90 s under Open MPI and 17 to 36 s under
# MPICH, on 2 cores other jobs load to 12-19; plain MPI 1 s), the next
# four, nbc_window alone (its MPI_Iallreduces offloaded); a run that fails
# at a case (a wrong result, a crash, a hang) is resumed at the case after
# it.  One "ok"/"FAIL" line
# per case, MPI and layout (with its time), a FAIL with the first lines of
# its output; "N passed, N failed".
#
# Hangs: every case has a timeout (CONFORM_CASE_TIMEOUT, 110 s: the
# program's MPI_CONFORM_CASE_TIMEOUT, each rank says where it hangs) and
# every run one (CONFORM_TIMEOUT, 120 s), after which the run's leftover
# processes (those with its CONFORM_RUN=<tag> in their environment) are
# killed.  1.5 to 3.5 minutes when every case passes; each hang adds up to
# two (the library before 2b83b1c hangs 13 times: 24 minutes).
set -u
. "$(dirname "$0")/lib.sh"
for m in mpirun.openmpi mpiexec.mpich; do
    command -v $m >/dev/null || { echo "skip: no $m"; exit 77; }
done
for f in libsharp_mpi_ompi.so libsharp_mpi_mpich.so libsharp_yield.so; do
    [ -f "$LIB/$f" ] || { echo "missing $LIB/$f"; exit 1; }
done
T=$(cd "$O/tests/mpi-coll" && pwd)
for m in ompi mpich; do
    [ -x "$T/mpi_conform_$m" ] || { echo "missing $T/mpi_conform_$m"; exit 1; }
done
RUN_TIMEOUT=${CONFORM_TIMEOUT:-120}
CASE_TIMEOUT=${CONFORM_CASE_TIMEOUT:-110}
# persist_freed_comm runs alone with SHARP_MPI_PERSISTENT_ORDERED=1 (it
# starts its persistent collectives in one order on every rank): they are
# then the layer's, their communicator freed under them an orphan of the
# layer's (without it they are Open MPI 4.1's own MPIX_ ones, which keep
# no reference to their communicator: a freed one's memory reused under
# them crashed a run in libnbc's irecv, as it may on plain Open MPI)
RUNS=("nbx" "ibcast_freed_type request_free p_order two_fresh"
    "persist_freed_comm" "many_outstanding" "idup_pending intercomm
    allred_derived waitall_errors" "nbc_window")
DIR=$(mktemp -d /tmp/sharp-test-conform.XXXXXX)
FABRIC=
fabric() { "$BIN/sharp-fabric" --dir "$FABRIC" "$@"; }
cleanup() {
    [ -z "$tag" ] || kill_run "$tag" >/dev/null
    [ -z "$FABRIC" ] || fabric down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
passed=0
fails=0
nrun=0
tag=
last=
ORDERED=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

# kill_run TAG: kill -9 every process with CONFORM_RUN=TAG in its
# environment (a run's mpirun, daemons and ranks); print how many
kill_run() {
    local p pids=()
    for p in /proc/[0-9]*; do
        grep -qsxz "CONFORM_RUN=$1" "$p/environ" && pids+=("${p#/proc/}")
    done
    [ ${#pids[@]} -eq 0 ] || kill -9 "${pids[@]}" 2>/dev/null
    echo ${#pids[@]}
}

# run MPI OUT CASE...: mpi_conform through libsharp_mpi, 8 ranks on the
# fabric; sets rc (124 or 137: timed out) and left (processes killed after;
# tag names the run while it runs)
run() {
    local mpi=$1 out=$2
    shift 2
    nrun=$((nrun + 1))
    tag=conform-$$-$nrun
    if [ "$mpi" = ompi ]; then
        CONFORM_RUN=$tag timeout -k 10 "$RUN_TIMEOUT" mpirun.openmpi \
            --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 \
            --mca btl self,vader,tcp -np 8 -x CONFORM_RUN="$tag" \
            -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" \
            -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
            -x SHARP_FABRIC_DIR="$FABRIC" -x SHARP_MPI_VERBOSE=1 \
            -x SHARP_MPI_PERSISTENT_ORDERED="$ORDERED" \
            -x MPI_CONFORM_CASE_TIMEOUT="$CASE_TIMEOUT" \
            "$BIN/sharp-fabric" rank -- "$T/mpi_conform_ompi" "$@" \
            >"$out" 2>&1
    else
        CONFORM_RUN=$tag timeout -k 10 "$RUN_TIMEOUT" mpiexec.mpich -n 8 \
            -genv CONFORM_RUN "$tag" -genv LD_LIBRARY_PATH "$LIB" \
            "${SAN_MPICH[@]}" -genv LD_PRELOAD \
            "$SAN_PRE$LIB/libsharp_mpi_mpich.so:$LIB/libsharp_yield.so" \
            -genv SHARP_FABRIC_DIR "$FABRIC" -genv SHARP_MPI_VERBOSE 1 \
            -genv SHARP_MPI_PERSISTENT_ORDERED "$ORDERED" \
            -genv MPI_CONFORM_CASE_TIMEOUT "$CASE_TIMEOUT" \
            "$BIN/sharp-fabric" rank -- "$T/mpi_conform_mpich" "$@" \
            >"$out" 2>&1
    fi
    rc=$?
    left=$(kill_run "$tag")
    tag=
}

# passed OUT CASE: the run's rank 0 said CASE passed (or is not in this MPI)
passed_case() { grep -qE "^mpi_conform $2: (ok|skip)" "$1"; }

# excerpt OUT CASE: the first lines of a failure: CASE's FAIL lines, then
# the others but the cases' verdicts, libsharp_mpi's report and its notes
# of what goes to MPI (its errors stay)
excerpt() {
    {
        grep -m 4 "^mpi_conform $2: .*FAIL" "$1"
        grep -v -e "^mpi_conform [a-z_]*: \(ok\|skip\)" -e "^sharp_mpi: " \
            -e "^sharp_mpi\[[0-9]*\]: .*\(goes to MPI\|not offloaded\): " \
            -e "^mpi_conform $2: .*FAIL" "$1" | head -8
    } | cut -c1-240 | sed 's/^/    | /'
}

# why OUT CASE: the one line saying how CASE failed
why() {
    local what
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        what="hung: the run timed out after $RUN_TIMEOUT s"
    elif grep -q "^mpi_conform $2: .*still running after" "$1"; then
        what="hung: still running after $CASE_TIMEOUT s"
    elif grep -q "^mpi_conform $2: .*FAIL" "$1"; then
        what="wrong: $(grep -m 1 "^mpi_conform $2: .*FAIL" "$1" |
            sed 's/^[^:]*: rank [0-9]*: FAIL: //' | cut -c1-160)"
    else
        what="the run ended (exit $rc) without its verdict"
    fi
    [ "$left" = 0 ] || what="$what; $left leftover process(es) killed"
    echo "$what"
}

# the report's offloaded count of a collective
offloaded() { awk -v c="$1" '$1 == "sharp_mpi:" && $2 == c { print $3 }' "$2"; }

# group NAME MPI CASE...: the cases in one run, resumed after one failing
group() {
    local name=$1 mpi=$2 i=0 j out
    shift 2
    local list=("$@")
    while [ $i -lt ${#list[@]} ]; do
        out=$DIR/$mpi-$nrun-${list[i]}.out
        run "$mpi" "$out" "${list[@]:i}"
        for ((j = i; j < ${#list[@]}; j++)); do
            passed_case "$out" "${list[j]}" || break
            ok "$name: $(grep -m 1 "^mpi_conform ${list[j]}: " "$out" |
                sed 's/^mpi_conform //')"
        done
        if [ $j -lt ${#list[@]} ]; then
            bad "$name: ${list[j]}: $(why "$out" "${list[j]}")"
            excerpt "$out" "${list[j]}"
        elif [ "$rc" != 0 ]; then
            bad "$name: after ${list[j - 1]}: exit $rc (MPI_Finalize?)"
            excerpt "$out" none
        fi
        last=$out
        i=$((j + 1))
    done
}

# positive WHAT UNIT N: ok when the count N (of the run's report) is over 0
positive() {
    if [ "${3:-0}" -gt 0 ]; then ok "$1 ($3 $2)"; else bad "$1: ${3:-none}"; fi
}

# cases NAME MPI: every case under MPI on the fabric up now; what the
# reports of some runs must show (nbx's MPI_Ibarriers, nbc_window's
# MPI_Iallreduces offloaded; persist_freed_comm's below)
cases() {
    local name=$1 mpi=$2 g
    for g in "${RUNS[@]}"; do
        ORDERED=0
        [ "$g" != persist_freed_comm ] || ORDERED=1
        group "$name" "$mpi" $g
        case $g in
        persist_freed_comm)
            # the bcast's starts offloaded; the allreduce's, whose
            # communicator was freed, on MPI (the orphan's duplicate),
            # under their own reason
            positive "$name: persist_freed_comm's persistent bcasts offloaded" starts \
                "$(offloaded MPI_Ibcast "$last")"
            positive "$name: persist_freed_comm's starts after MPI_Comm_free reported as comm_freed" calls \
                "$(awk '$1 == "sharp_mpi:" && $2 == "why" &&
                    $3 == "comm_freed" { print $5 }' "$last")"
            ;;
        nbc_window)
            positive "$name: nbc_window's MPI_Iallreduces offloaded" calls \
                "$(offloaded MPI_Iallreduce "$last")"
            ;;
        nbx)
            positive "$name: nbx's MPI_Ibarriers offloaded" calls \
                "$(offloaded MPI_Ibarrier "$last")"
            ;;
        esac
    done
}

"$BIN/sharp-topo" fat-tree --radix 4 --hosts 8 >"$DIR/ft.ibnd"
"$BIN/sharp-topo" fat-tree --radix 4 --hosts 4 >"$DIR/ft4.ibnd"
# (nets 127.47 and 127.48: no other test's)
for layout in "ft 127.47 8 hosts, a rank each" \
    "ft4 127.48 4 hosts, 2 ranks each"; do
    set -- $layout
    FABRIC=$DIR/fabric-$1
    fabric up "$DIR/$1.ibnd" --net "$2" >/dev/null ||
        { bad "fabric up ($1)"; FABRIC=; continue; }
    shift 2
    cases "Open MPI, $*" ompi
    cases "MPICH, $*" mpich
    fabric down >/dev/null 2>&1
    FABRIC=
done

echo "$passed passed, $fails failed"
[ $fails -eq 0 ] || exit 1
exit 0
