# tests/mpi-coll: the MPI test programs, ordinary MPI programs built with
# each MPI's compiler wrapper (MPICC_OMPI, MPICC_MPICH and MPI_CFLAGS come
# from mpi-coll/module.mk): tests/mpi-coll/NAME.c gives NAME_ompi and
# NAME_mpich, by one pattern rule each; mpi_exact is built for Open MPI
# only and links MPFR.
#
#   mpi_check   the MPI test program
#   mpi_types   every named datatype x every offloaded collective against PMPI
#   mpi_fault   a stream of collectives while the test kills daemons
#   mpi_nb      non-blocking and persistent collectives against PMPI
#   mpi_stress  non-blocking collectives under stress, against references
#   mpi_why     calls that go to MPI for known reasons (test_why.sh)
#   mpi_exact   exact sums under MPI (test_exact_mpi.sh)
#   mpi_mixed   the fault matrix's stream: non-blocking, blocking and
#               persistent calls with MPI's own requests (test_fault_matrix.sh)
#   mpi_threads threads, a communicator each, at MPI_THREAD_MULTIPLE
#               (test_threads.sh)
#   mpi_stream  8-byte allreduces, each timed, while the AN carrying them
#               is killed (bench/mpi_failover.sh)
#   mpi_progress collectives while the rank's own MPI_Isend still needs it
#               (test_mpi.sh)
#   mpi_sparse  mostly-zero allreduces, sparse against dense bits
#               (test_sparse_mpi.sh)
#   mpi_conform correct MPI programs the layer must not change: NBX,
#               handles freed while in use, persistent start orders, a
#               window of mixed non-blocking collectives ...
#               (test_conform.sh; mpi_conform_window.c, conform.h)

MPI_TESTS := mpi_check mpi_types mpi_fault mpi_nb mpi_stress mpi_why \
	mpi_mixed mpi_threads mpi_stream mpi_progress mpi_conform mpi_sparse
MPI_TEST_DIR := $(TESTDIR)/mpi-coll
TEST_HELPERS += $(foreach t,$(MPI_TESTS),$(MPI_TEST_DIR)/$(t)_ompi \
	$(MPI_TEST_DIR)/$(t)_mpich) $(MPI_TEST_DIR)/mpi_exact_ompi
# the fault injector, for bench-mpi
MPI_FAULT_OMPI := $(MPI_TEST_DIR)/mpi_fault_ompi

# what a program links besides its MPI
MPI_TEST_LIBS_mpi_exact := -lmpfr -lgmp -lm
MPI_TEST_LIBS_mpi_threads := -pthread

# a program of several files: its other sources and headers
MPI_CONFORM_PARTS := tests/mpi-coll/mpi_conform_window.c \
	tests/mpi-coll/conform.h
$(MPI_TEST_DIR)/mpi_conform_ompi $(MPI_TEST_DIR)/mpi_conform_mpich: \
	$(MPI_CONFORM_PARTS)
$(MPI_TEST_DIR)/mpi_sparse_ompi $(MPI_TEST_DIR)/mpi_sparse_mpich \
	$(MPI_TEST_DIR)/mpi_exact_ompi: tests/mpi-coll/bits.h

$(MPI_TEST_DIR)/%_ompi: tests/mpi-coll/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MPICC   $@")
	$(Q)$(MPICC_OMPI) $(MPI_CFLAGS) -o $@ $(filter %.c,$^) $(MPI_TEST_LIBS_$*)

$(MPI_TEST_DIR)/%_mpich: tests/mpi-coll/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MPICC   $@")
	$(Q)$(MPICC_MPICH) $(MPI_CFLAGS) -o $@ $(filter %.c,$^) $(MPI_TEST_LIBS_$*)
