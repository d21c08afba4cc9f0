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
