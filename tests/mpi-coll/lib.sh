# What every MPI test script of tests/mpi-coll begins with (sourced, after
# `set -u`): O, BIN and LIB; SAN_PRE, which goes in front of every
# LD_PRELOAD a script gives its ranks; SAN_OMPI and SAN_MPICH, arguments
# of mpirun.openmpi and mpiexec.mpich before it.
#
# Under SAN=1 libsharp_mpi and the MPI test programs are built with the
# sanitizers as everything else is (mpi-coll/module.mk), but MPI, mpirun
# and Python are not:
#   - the sanitizer's runtime must be the first library of every rank:
#     SAN_PRE preloads it;
#   - LeakSanitizer leaves alone what MPI and Python keep until exit
#     (tests/mpi-coll/lsan.supp names their libraries; a leak of
#     libsharp_mpi's own, allocated outside them, is still reported).
#     Their code has no frame pointers, so the ranks unwind malloc's
#     stacks the slow way, or the suppressions would see no frame of
#     theirs (the daemons keep the fast way: the option is the ranks').
#
# Under SAN=thread (ThreadSanitizer) the same, with libtsan first, and:
#   - TSan leaves alone what MPI and its libraries do through its
#     interceptors (tests/mpi-coll/tsan.supp); nothing of sharp's is
#     suppressed;
#   - every process of the test, ranks and daemons, writes its reports to
#     a file of its own under TSAN_LOGS ($O/tests/mpi-coll/tsan/<test>,
#     emptied first; log_path=<dir>/<case>.<pid>), goes on after one and
#     exits 0 for them; san_case NAME names the files of the runs after it;
#   - tsan_verdict, the script's last word: every report that names
#     sharp's code (a frame or a variable of its tree), with its file; 1 if
#     any, else 0.
if [ "${SAN:-0}" = 1 ]; then
    # 4x to 8x slower under the sanitizers on 2 cores: by default only the
    # fault matrix (its SAN cells) and the threads test run there
    case " ${SAN_MPI_TESTS:-test_fault_matrix test_threads} " in
    *" $(basename "$0" .sh) "* | " all ") ;;
    *)
        echo "skip under SAN=1 (SAN_MPI_TESTS=all runs it; 4-8x slower)"
        exit 77
        ;;
    esac
elif [ "${SAN:-0}" = thread ]; then
    # ThreadSanitizer is about threads: by default the threads test only
    case " ${SAN_MPI_TESTS:-test_threads} " in
    *" $(basename "$0" .sh) "* | " all ") ;;
    *)
        echo "skip under SAN=thread (SAN_MPI_TESTS=all runs it)"
        exit 77
        ;;
    esac
fi
O=${O:-build}
BIN=$(cd "$O/bin" && pwd)
LIB=$(cd "$O/lib" && pwd)
SAN_PRE=
SAN_OMPI=()
SAN_MPICH=()
if [ "${SAN:-0}" = 1 ]; then
    SAN_PRE="$(gcc -print-file-name=libasan.so):"
    export LSAN_OPTIONS="suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lsan.supp:print_suppressions=0"
    san_rank="fast_unwind_on_malloc=0:malloc_context_size=20"
    SAN_OMPI=(-x ASAN_OPTIONS="$san_rank")
    SAN_MPICH=(-genv ASAN_OPTIONS "$san_rank")
fi
if [ "${SAN:-0}" = thread ]; then
    SAN_PRE="$(gcc -print-file-name=libtsan.so):"
    TSAN_SUPP=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/tsan.supp
    TSAN_LOGS=${TSAN_LOGS:-$O/tests/mpi-coll/tsan/$(basename "$0" .sh)}
    rm -rf "$TSAN_LOGS" && mkdir -p "$TSAN_LOGS"
    TSAN_LOGS=$(cd "$TSAN_LOGS" && pwd)
    tsan_opts() { # CASE: the options of the processes that run it
        echo "suppressions=$TSAN_SUPP:log_path=$TSAN_LOGS/$1:exitcode=0:halt_on_error=0:second_deadlock_stack=1:history_size=4"
    }
    # the daemons a script starts and whatever else it runs
    export TSAN_OPTIONS
    TSAN_OPTIONS=$(tsan_opts daemons)
fi
# san_case NAME: the reports of the ranks started after it in files named
# NAME.<pid> (SAN=thread; nothing otherwise)
san_case() {
    [ "${SAN:-0}" = thread ] || return 0
    SAN_OMPI=(-x TSAN_OPTIONS="$(tsan_opts "$1")")
    SAN_MPICH=(-genv TSAN_OPTIONS "$(tsan_opts "$1")")
}
san_case ranks
# tsan_verdict: every ThreadSanitizer report of this test in which sharp
# is the party (SAN=thread; nothing otherwise): the first frame of one of
# its stacks past TSan's interceptor (the access, the lock taken, the
# block allocated; not where a thread or a lock held was made) in a file
# of sharp's tree (the test programs' too) or in one of its libraries or
# programs, or a variable of theirs; or a process TSan stopped.  Each is
# printed with its file; returns 1 if any.  The others (MPI's own, none
# expected) are counted.
tsan_verdict() {
    [ "${SAN:-0}" = thread ] || return 0
    local top res bad logs=("$TSAN_LOGS"/*)
    [ -e "${logs[0]}" ] || logs=() # none: no process had a word to say
    top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    res=$(awk -v top="$top/" '
        function ours(l) {
            if (index(l, top) > 0) return 1
            if (l ~ /[ \t(](an|am|cli|core|libsharp|mpi-coll|plugins|protocol|reduce|sharpd|tests|topology|transport)\/[^ ]*\.[ch]:[0-9]/) return 1
            return l ~ /\((lib)?(sharp|shp)[^ ]*\+0x[0-9a-f]+\)/ ||
                l ~ /\(mpi_[a-z]+_(ompi|mpich)\+0x[0-9a-f]+\)/
        }
        function flush() {
            if (rep == "") return
            n++
            if (hit) { m++; printf "--- %s\n%s\n", FILENAME, rep }
            rep = ""; hit = 0
        }
        /^WARNING: ThreadSanitizer:/ { flush(); rep = $0; top0 = 0; next }
        # at exit, what tsan.supp suppressed: "N race:/openmpi3/mca_" ...
        rep == "" && /^ThreadSanitizer: Matched [0-9]+ suppressions/ { next }
        rep == "" && /^[0-9]+ [a-z_]+:/ { s += $1; next }
        # anything else TSan says: it stopped a process (a library named
        # in called_from_lib unloaded, no memory ...)
        rep == "" && /ThreadSanitizer|FATAL/ && !/reported [0-9]+ warnings/ {
            f++; printf "--- %s\n%s\n", FILENAME, $0
        }
        rep == "" { next }
        { rep = rep "\n" $0 }
        # not where a thread or a lock held was created, nor a sleep
        /^ +#0 / { top0 = head !~ /created|As if synchronized/ }
        !/^ +#[0-9]+ / && NF { head = $0 }
        top0 && /^ +#[0-9]+ / && !/\(libtsan\.so/ { hit = hit || ours($0); top0 = 0 }
        /^ +Location is / { hit = hit || ours($0) }
        /^SUMMARY: ThreadSanitizer:/ { flush() }
        END {
            flush()
            printf "tsan: %d reports, %d of them in sharp; %d suppressed", n, m, s
            if (f) printf "; %d messages of TSan outside a report", f
            printf "\n%d\n", m + f
        }
    ' /dev/null "${logs[@]}")
    bad=${res##*$'\n'} # the last line: how many count against
    res=${res%$'\n'*}
    echo "${res##*$'\n'} (logs: $TSAN_LOGS)"
    [ "$bad" = 0 ] && return 0
    printf '%s\n' "${res%$'\n'*}"
    return 1
}
