# mpi-coll/: libsharp_mpi, built once per MPI from one source, and the demo
# program (an ordinary MPI program) for each.

MPICC_OMPI ?= mpicc.openmpi
MPICC_MPICH ?= mpicc.mpich
SHARP_MPI_SRC := mpi-coll/settings.c mpi-coll/settings_table.c mpi-coll/lock.c mpi-coll/why.c \
	mpi-coll/dtype.c mpi-coll/fall.c mpi-coll/op.c mpi-coll/node_step.c \
	mpi-coll/node_xchg.c \
	mpi-coll/progress.c mpi-coll/comm.c mpi-coll/comm_new.c \
	mpi-coll/coll_reduce.c mpi-coll/coll_bcast.c mpi-coll/coll_barrier.c \
	mpi-coll/nb_coll.c mpi-coll/request.c mpi-coll/init.c \
	mpi-coll/recover.c mpi-coll/recover_svc.c mpi-coll/node_shm.c \
	mpi-coll/node_shm_op.c
# the sources' own headers
SHARP_MPI_HDR := mpi-coll/sharp_mpi_int.h mpi-coll/settings.h mpi-coll/nb.h mpi-coll/coll.h \
	mpi-coll/recover.h mpi-coll/recover_int.h mpi-coll/node_shm.h \
	mpi-coll/node_shm_int.h
SHARP_MPI_OMPI := $(LIB_OUT)/libsharp_mpi_ompi.so
SHARP_MPI_MPICH := $(LIB_OUT)/libsharp_mpi_mpich.so
MPI_DEMO_OMPI := $(BINDIR)/sharp_mpi_demo_ompi
MPI_DEMO_MPICH := $(BINDIR)/sharp_mpi_demo_mpich
LIBS += $(SHARP_MPI_OMPI) $(SHARP_MPI_MPICH)
BINS += $(MPI_DEMO_OMPI) $(MPI_DEMO_MPICH)

# No sanitizers here: these are preloaded into MPI programs that are not.
MPI_CFLAGS := -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -fPIC \
	-fvisibility=hidden -I$(TOP)/include -I$(TOP) -I$(O)/gen -D_GNU_SOURCE \
	$(SAN_FLAGS)
# every symbol resolved at link time.  Under SAN=1 the libraries and the
# MPI test programs are instrumented as the rest is; the MPI tests then
# preload the sanitizer's runtime first (tests/mpi-coll/lib.sh)
MPI_ZDEFS := -Wl,-z,defs
# the node-local fold uses the reduction engine (hidden inside the library)
MPI_LIB_COMMON = $(COMMON_LIB) $(SODIUM_LIBS) $(CRYPTO_LIBS) $(INIH_LIBS) -lm
# libev exports libevent-compatible event_* names; Open MPI uses libevent:
# libevent must come first in the global scope or Open MPI's event_add
# would bind to libev's (a crash in MPI_Init).
MPI_OMPI_LIBS := -Wl,--no-as-needed -levent_core -Wl,--as-needed

$(SHARP_MPI_OMPI): $(SHARP_MPI_SRC) $(SHARP_MPI_HDR) $(COLL_SO) $(COMMON_LIB) | $(DEPS_STAMP) $(PATHS_H)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MPICC   $@")
	$(Q)$(MPICC_OMPI) $(MPI_CFLAGS) -shared -pthread $(MPI_ZDEFS) -Wl,-soname,$(@F) -o $@ \
		$(SHARP_MPI_SRC) \
		$(MPI_OMPI_LIBS) -L$(LIB_OUT) -lsharp_coll $(MPI_LIB_COMMON)

$(SHARP_MPI_MPICH): $(SHARP_MPI_SRC) $(SHARP_MPI_HDR) $(COLL_SO) $(COMMON_LIB) | $(DEPS_STAMP) $(PATHS_H)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MPICC   $@")
	$(Q)$(MPICC_MPICH) $(MPI_CFLAGS) -shared -pthread $(MPI_ZDEFS) -Wl,-soname,$(@F) -o $@ \
		$(SHARP_MPI_SRC) \
		-L$(LIB_OUT) -lsharp_coll $(MPI_LIB_COMMON)

# libsharp_yield: a preloaded shim that makes a busy-polling MPI (MPICH on
# UCX) sleep while it waits; no MPI needed to build it.
SHARP_YIELD := $(LIB_OUT)/libsharp_yield.so
LIBS += $(SHARP_YIELD)

$(SHARP_YIELD): mpi-coll/sharp_yield.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) $(MPI_CFLAGS) -shared -Wl,-soname,$(@F) -o $@ $< -ldl

$(MPI_DEMO_OMPI): mpi-coll/sharp_mpi_demo.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MPICC   $@")
	$(Q)$(MPICC_OMPI) $(MPI_CFLAGS) -o $@ $<

$(MPI_DEMO_MPICH): mpi-coll/sharp_mpi_demo.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MPICC   $@")
	$(Q)$(MPICC_MPICH) $(MPI_CFLAGS) -o $@ $<

# Each of the library's files also as an object of its own, for
# check-layers' circles of calls (the libraries above are built in one
# command); the five that need no MPI come from the common object rule.
MPI_LAYER_SRC := $(filter-out mpi-coll/recover.c mpi-coll/recover_svc.c \
	mpi-coll/node_shm.c mpi-coll/node_shm_op.c \
	mpi-coll/settings_table.c,$(SHARP_MPI_SRC))
MPI_LAYER_OBJS := $(call obj_of,$(MPI_LAYER_SRC)) \
	$(call obj_of,mpi-coll/recover.c mpi-coll/recover_svc.c \
	mpi-coll/node_shm.c mpi-coll/node_shm_op.c mpi-coll/settings_table.c)
TEST_HELPERS += $(MPI_LAYER_OBJS)

$(call obj_of,$(MPI_LAYER_SRC)): $(OBJDIR)/mpi-coll/%.o: mpi-coll/%.c $(SHARP_MPI_HDR) | $(DEPS_STAMP) $(PATHS_H)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MPICC   $@")
	$(Q)$(MPICC_OMPI) $(MPI_CFLAGS) -c -o $@ $<

# The MPI test programs (tests/mpi-coll) are built by their own fragment,
# tests/mpi-coll/module.mk, with MPICC_* and MPI_CFLAGS above.
