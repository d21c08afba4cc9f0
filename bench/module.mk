# bench/: benchmarks (not tests): they print ratios measured side by side.
# The fabrics they start: tests/support/fabric.h, from $(TEST_SUPPORT_LIB)
# (tests/module.mk), with $(TOPO_LIB) after it.

BENCH_REDUCE := $(BINDIR)/bench_reduce
BENCHES += $(BENCH_REDUCE)

$(BENCH_REDUCE): $(OBJDIR)/bench/reduce.o $(COMMON_LIB)
	$(call link_prog)

.PHONY: bench-reduce
bench-reduce: $(BENCH_REDUCE)
	$(BENCH_REDUCE)

BENCH_GROUP := $(BINDIR)/bench_group_create
BENCHES += $(BENCH_GROUP)

$(BENCH_GROUP): $(OBJDIR)/bench/group_create.o $(TEST_SUPPORT_LIB) $(AM_LIB) \
		$(TOPO_LIB) $(COMMON_LIB)
	$(call link_prog,$(SQLITE_LIBS))

BENCH_AM := $(BINDIR)/bench_am
BENCHES += $(BENCH_AM)

$(BENCH_AM): $(OBJDIR)/bench/am.o $(AM_LIB) $(TOPO_LIB) $(COMMON_LIB)
	$(call link_prog,$(SQLITE_LIBS))

# the manager's state database: a commit, a reservation, per group
BENCH_AM_STORE := $(BINDIR)/bench_am_store
BENCHES += $(BENCH_AM_STORE)

$(BENCH_AM_STORE): $(OBJDIR)/bench/am_store.o $(AM_LIB) $(COMMON_LIB)
	$(call link_prog,$(SQLITE_LIBS))

# a standby manager: kill -9 of the active to the first group of the new
BENCH_TAKEOVER := $(BINDIR)/bench_am_takeover
BENCHES += $(BENCH_TAKEOVER)

$(BENCH_TAKEOVER): $(OBJDIR)/bench/am_takeover.o $(COMMON_LIB)
	$(call link_prog)

.PHONY: bench-am
bench-am: $(BENCH_AM) $(BENCH_GROUP) $(BENCH_AM_STORE) $(BENCH_TAKEOVER) \
		$(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARP_TOPO)
	$(BENCH_GROUP)
	$(BENCH_AM)
	$(BENCH_AM_STORE)
	$(BENCH_TAKEOVER)

# libsharp_coll latency through a local fabric, next to a TCP round trip.
BENCH_COLL := $(BINDIR)/bench_coll
BENCHES += $(BENCH_COLL)

$(BENCH_COLL): $(OBJDIR)/bench/coll.o $(TEST_SUPPORT_LIB) $(TOPO_LIB) \
		$(COLL_SO) $(COMMON_LIB)
	$(call link_prog,$(COLL_LINK))

.PHONY: bench-coll
bench-coll: $(BENCH_COLL) $(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD)
	$(BENCH_COLL) examples/fat-tree-2l.ibnd

# MPI latency: sharp vs Open MPI over TCP and shared memory (bench/mpi.sh).
BENCH_MPI_LAT := $(BINDIR)/bench_mpi_lat
BENCHES += $(BENCH_MPI_LAT)

$(BENCH_MPI_LAT): bench/mpi_lat.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MPICC   $@")
	$(Q)$(MPICC_OMPI) $(MPI_CFLAGS) -o $@ $<

# the passes a mostly-zero allreduce cannot avoid, without messages
# (bench/mpi_sparse.sh prints it beside the runs)
BENCH_MEM_FLOOR := $(BINDIR)/bench_mem_floor
BENCHES += $(BENCH_MEM_FLOOR)

$(BENCH_MEM_FLOOR): $(OBJDIR)/bench/mem_floor.o $(COMMON_LIB)
	$(call link_prog)

# preloaded in front of libsharp_mpi: the MPI layer's own cost per call
BENCH_MPI_LAYER := $(LIB_OUT)/bench_mpi_layer.so
BENCHES += $(BENCH_MPI_LAYER)

$(BENCH_MPI_LAYER): bench/mpi_layer.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MPICC   $@")
	$(Q)$(MPICC_OMPI) $(MPI_CFLAGS) -fvisibility=default -shared -o $@ $< -ldl

.PHONY: bench-mpi
bench-mpi: $(BENCH_MPI_LAT) $(BENCH_MPI_LAYER) $(BENCH_MEM_FLOOR) $(SHARP_MPI_OMPI) $(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARP_TOPO) $(MPI_FAULT_OMPI)
	$(Q)bash bench/mpi.sh $(O)
	$(Q)bash bench/mpi_fault.sh $(O)

# Applications (PETSc, LAMMPS) through sharp against Open MPI, and an AN
# killed mid-solve (bench/apps.sh; make deps installs them)
.PHONY: bench-apps
bench-apps: $(SHARP_MPI_OMPI) $(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARPCTL)
	$(Q)bash bench/apps.sh $(O)
# where the latency-bound CG's time goes over shm, per iteration: the
# machine's CPU and the daemons' (bench/apps_cpu.sh, docs/applications.md)
.PHONY: bench-apps-cpu
bench-apps-cpu: $(SHARP_MPI_OMPI) $(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARPCTL)
	$(Q)bash bench/apps_cpu.sh $(O)

# What an AN's death costs a running job: calls on MPI, the longest call,
# latency after the failure against before (bench/mpi_failover.sh)
MPI_STREAM_OMPI := $(TESTDIR)/mpi-coll/mpi_stream_ompi

.PHONY: bench-fault
bench-fault: $(MPI_STREAM_OMPI) $(SHARP_MPI_OMPI) $(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARP_TOPO) $(SHARPCTL)
	$(Q)bash bench/mpi_failover.sh $(O)

# The aggregation node's latency and message rate, members emulated.
BENCH_AN := $(BINDIR)/bench_an
BENCHES += $(BENCH_AN)

$(BENCH_AN): $(OBJDIR)/bench/an.o $(TEST_SUPPORT_LIB) $(AM_LIB) $(TOPO_LIB) \
		$(COMMON_LIB)
	$(call link_prog,$(SQLITE_LIBS))

.PHONY: bench-an
bench-an: $(BENCH_AN) $(SHARP_AM) $(SHARP_AN) $(SHARPD)
	$(BENCH_AN) examples/small-2l.ibnd

# Exact sums (SHARP_OP_SUM_EXACT) against the normal sum: latency, bytes,
# fold throughput, in one run.
BENCH_EXACT := $(BINDIR)/bench_exact
BENCHES += $(BENCH_EXACT)

$(BENCH_EXACT): $(OBJDIR)/bench/exact.o $(TEST_SUPPORT_LIB) $(TOPO_LIB) \
		$(COLL_SO) $(COMMON_LIB)
	$(call link_prog,$(COLL_LINK))

.PHONY: bench-exact
bench-exact: $(BENCH_EXACT) $(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD)
	$(BENCH_EXACT) examples/fat-tree-2l.ibnd
# The chaos soak (bench/soak.c): jobs under faults, every result checked.
BENCH_SOAK := $(BINDIR)/bench_soak
BENCHES += $(BENCH_SOAK)
SOAK_SECONDS ?= 180

$(BENCH_SOAK): $(OBJDIR)/bench/soak.o $(TEST_SUPPORT_LIB) $(TOPO_LIB) \
		$(COLL_SO) $(COMMON_LIB)
	$(call link_prog,$(COLL_LINK))

.PHONY: soak
soak: $(BENCH_SOAK) $(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARP_TOPO)
	SOAK_SECONDS=$(SOAK_SECONDS) nice -n 10 $(BENCH_SOAK)
