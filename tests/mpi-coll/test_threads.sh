#!/usr/bin/env bash
# libsharp_mpi at MPI_THREAD_MULTIPLE (docs/mpi.md, threads), Open MPI and
# MPICH:
#   - several threads of every rank, each driving a communicator of its
#     own, making their groups at once (tests/mpi-coll/mpi_threads.c):
#     every result right, the calls offloaded; one and two ranks per host;
#     and 2 ranks of 6 threads
#   - one thread at MPI_THREAD_MULTIPLE, as mpi4py initializes MPI
#     (mpi_mixed --thread-multiple): every result right, nothing on MPI
#   - an mpi4py + numpy program (tests/mpi-coll/mpi_py.py, Open MPI: the
#     MPI Debian's mpi4py is built for): the same
#   - SHARP_MPI_THREAD_MULTIPLE=0: such a job on MPI, the reason named
# Under SAN=thread (make SAN=thread check) every case also runs under
# ThreadSanitizer, and any report of it in sharp's code fails the test
# (tests/mpi-coll/lib.sh, tsan.supp).
set -u
. "$(dirname "$0")/lib.sh"
command -v mpirun.openmpi >/dev/null || { echo "skip: no Open MPI"; exit 77; }
DIR=$(mktemp -d /tmp/sharp-test-threads.XXXXXX)
FAB="$DIR/fabric"
cleanup() {
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
    [ -n "${KEEP_LOGS:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

# the program: a test binary of that MPI, or the Python one
prog_of() { # NAME MPI
    if [ "$1" = mpi_py ]; then
        echo "/usr/bin/python3 $PWD/tests/mpi-coll/mpi_py.py"
    else
        echo "$O/tests/mpi-coll/$1_$2"
    fi
}
# run MPI NP OUT PROG ARGS...
run() {
    local mpi=$1 np=$2 out=$3 prog=$4
    shift 4
    san_case "$(basename "$out" .out)"
    if [ "$mpi" = ompi ]; then
        timeout 150 mpirun.openmpi --allow-run-as-root --oversubscribe \
            --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp -np "$np" \
            -x LD_LIBRARY_PATH="$LIB" "${SAN_OMPI[@]}" -x LD_PRELOAD="$SAN_PRE$LIB/libsharp_mpi_ompi.so" \
            -x SHARP_MPI_VERBOSE=1 -x SHARP_FABRIC_DIR="$FAB" \
            -x SHARP_MPI_PERSISTENT_ORDERED=1 \
            ${SHARP_MPI_THREAD_MULTIPLE:+-x SHARP_MPI_THREAD_MULTIPLE} \
            "$BIN/sharp-fabric" rank -- $(prog_of "$prog" ompi) "$@" \
            >"$out" 2>&1
    else
        timeout 150 mpiexec.mpich -n "$np" -genv LD_LIBRARY_PATH "$LIB" \
            "${SAN_MPICH[@]}" -genv LD_PRELOAD "$SAN_PRE$LIB/libsharp_mpi_mpich.so:$LIB/libsharp_yield.so" \
            -genv SHARP_MPI_VERBOSE 1 -genv SHARP_FABRIC_DIR "$FAB" \
            -genv SHARP_MPI_PERSISTENT_ORDERED 1 \
            "$BIN/sharp-fabric" rank -- $(prog_of "$prog" mpich) "$@" \
            >"$out" 2>&1
    fi
}
# the report's offloaded and fallen-back calls, summed over collectives
counts() {
    awk '$1 == "sharp_mpi:" && $2 ~ /^MPI_/ { o += $3; f += $5 }
         END { print o + 0, f + 0 }' "$1"
}

"$BIN/sharp-topo" fat-tree --radix 4 --hosts 2 >"$DIR/ft2.ibnd"
for topo in examples/fat-tree-2l.ibnd "$DIR/ft2.ibnd"; do
    [ -f "$topo" ] || continue
    "$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
    "$BIN/sharp-fabric" --dir "$FAB" up "$topo" --net 127.39 >/dev/null ||
        { bad "the fabric did not come up"; continue; }
    hosts=$("$BIN/sharp-fabric" --dir "$FAB" hosts | wc -l)
    for mpi in ompi mpich; do
        # 4 ranks x 3 threads: on 2 cores more starve the daemons
        out="$DIR/threads-$mpi-$hosts.out"
        t0=$SECONDS
        run $mpi 4 "$out" mpi_threads --threads 3 --phases 150
        rc=$?
        read -r o f < <(counts "$out")
        # 4 ranks x 3 threads x 150 phases x (3 + 3) calls
        if [ $rc = 0 ] && grep -q "every result right" "$out" &&
            [ "$o" -ge $((4 * 3 * 150 * 6 / 2)) ]; then
            ok "$mpi, 4 ranks on $hosts hosts, 3 threads a communicator each: every result right, $o calls offloaded, $f on MPI ($((SECONDS - t0)) s)"
        else
            bad "$mpi, 4 ranks on $hosts hosts, 3 threads (exit $rc, $o offloaded, $f on MPI)"
            grep -v '^\s*$' "$out" | tail -15
        fi
    done
done

# 2 ranks x 6 threads, each thread on a communicator it made, every
# completion form in turn (mpi_threads' six), on the 8-host fabric
"$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
"$BIN/sharp-fabric" --dir "$FAB" up examples/fat-tree-2l.ibnd --net 127.39 >/dev/null ||
    bad "the fabric did not come up"
for mpi in ompi mpich; do
    out="$DIR/threads6-$mpi.out"
    run $mpi 2 "$out" mpi_threads --threads 6 --phases 60
    rc=$?
    read -r o f < <(counts "$out")
    if [ $rc = 0 ] && grep -q "every result right" "$out" &&
        [ "$o" -ge $((2 * 6 * 60 * 6 / 2)) ]; then
        ok "$mpi, 2 ranks of 6 threads, a communicator each, MPI_Waitall, _Wait, _Waitany, _Waitsome, _Test, _Testall in turn: every result right, $o calls offloaded, $f on MPI"
    else
        bad "$mpi, 2 ranks of 6 threads (exit $rc, $o offloaded, $f on MPI)"
        grep -v '^\s*$' "$out" | tail -15
    fi
done
"$BIN/sharp-fabric" --dir "$FAB" down >/dev/null 2>&1
"$BIN/sharp-fabric" --dir "$FAB" up examples/fat-tree-2l.ibnd --net 127.39 >/dev/null ||
    bad "the fabric did not come up"
for mpi in ompi mpich; do
    out="$DIR/mixed-$mpi.out"
    run $mpi 8 "$out" mpi_mixed --thread-multiple --phases 200
    rc=$?
    read -r o f < <(counts "$out")
    if [ $rc = 0 ] && grep -q "every result right" "$out" && [ "$o" -gt 0 ] &&
        grep -q "nothing went to MPI" "$out"; then
        ok "$mpi, one thread at MPI_THREAD_MULTIPLE (mpi4py's level), 8 ranks: every result right, $o calls offloaded, none on MPI"
    else
        bad "$mpi, one thread at MPI_THREAD_MULTIPLE (exit $rc, $o offloaded, $f on MPI)"
        grep -v '^\s*$' "$out" | tail -15
    fi
done
if /usr/bin/python3 -c "import mpi4py, numpy" 2>/dev/null; then
    out="$DIR/py.out"
    run ompi 8 "$out" mpi_py 200
    rc=$?
    read -r o f < <(counts "$out")
    if [ $rc = 0 ] && grep -q "thread level 3, every result right" "$out" &&
        [ "$o" -gt 0 ] && grep -q "nothing went to MPI" "$out"; then
        ok "an mpi4py + numpy program, 8 ranks: every result right, $o calls offloaded, none on MPI"
    else
        bad "an mpi4py + numpy program (exit $rc, $o offloaded, $f on MPI)"
        grep -v '^\s*$' "$out" | tail -15
    fi
else
    bad "no mpi4py and numpy for /usr/bin/python3 (make deps installs them)"
fi
out="$DIR/kept.out"
SHARP_MPI_THREAD_MULTIPLE=0 run ompi 8 "$out" mpi_mixed --thread-multiple --phases 20
read -r o f < <(counts "$out")
if grep -q "every result right" "$out" && [ "$o" = 0 ] &&
    grep -q "why thread_multiple" "$out"; then
    ok "SHARP_MPI_THREAD_MULTIPLE=0: every call on MPI ($f), the reason named"
else
    bad "SHARP_MPI_THREAD_MULTIPLE=0 ($o offloaded, $f on MPI)"
    tail -15 "$out"
fi
# SAN=thread: no ThreadSanitizer report in sharp's code, from any rank or
# daemon of the cases above
tsan_verdict || bad "ThreadSanitizer reported races or lock inversions in sharp's code"
[ $fails -eq 0 ]
