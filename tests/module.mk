# tests/: mirrors the source folders (tests/<room>/ tests <room>/), with
# tests/support/ for what several of them share.  Unit tests are one cmocka
# binary per unit, built into $(TESTDIR)/<room>/.

# What the tests and the benchmarks share beyond headers: a local fabric of
# real daemons (tests/support/fabric.h), an archive they link with
# $(TOPO_LIB) after it.
TEST_SUPPORT_SRCS := tests/support/fabric.c
TEST_SUPPORT_LIB := $(LIB_OUT)/libshp_testsupport.a

$(TEST_SUPPORT_LIB): $(call obj_of,$(TEST_SUPPORT_SRCS))
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

UNIT_TEST_SRCS := $(wildcard $(addsuffix /test_*.c,$(addprefix tests/, \
	core protocol reduce transport topology))) \
	tests/an/test_an_exact.c tests/an/test_an_link.c \
	tests/mpi-coll/test_recover.c tests/mpi-coll/test_node_shm.c \
	tests/sharpd/test_sharpd_auth.c tests/am/test_adopt.c \
	tests/am/test_store.c \
	tests/libsharp/test_buf.c
UNIT_TESTS := $(patsubst tests/%.c,$(TESTDIR)/%,$(UNIT_TEST_SRCS))
TESTS += $(UNIT_TESTS)

$(UNIT_TESTS): $(TESTDIR)/%: $(OBJDIR)/tests/%.o $(AM_LIB) $(TOPO_LIB) \
		$(COMMON_LIB)
	$(call link_prog,$(CMOCKA_LIBS) $(SQLITE_LIBS))

# the manager's core in-process, its peers on socketpairs (nothing bound)
$(TESTDIR)/am/test_adopt: LDFLAGS += -Wl,--wrap=shp_listener_start \
	-Wl,--wrap=shp_listener_stop

# exact sums checked against MPFR
$(TESTDIR)/reduce/test_exact: CMOCKA_LIBS += -lmpfr -lgmp

# libsharp_coll's buffer-form rules, without a fabric
$(TESTDIR)/libsharp/test_buf: $(call obj_of,libsharp/coll_buf.c)

# Integration tests of the aggregation node: real processes on loopback.
AN_MEMBER := $(TESTDIR)/an/an_member
AN_TREE_TEST := $(TESTDIR)/an/test_an_tree
TEST_HELPERS += $(AN_MEMBER)
TESTS += $(AN_TREE_TEST)

$(AN_MEMBER): $(OBJDIR)/tests/an/an_member.o $(COMMON_LIB)
	$(call link_prog)

# the same tree test over the shm transport
TEST_SCRIPTS += tests/an/tree_shm.sh

$(AN_TREE_TEST): $(OBJDIR)/tests/an/test_an_tree.o $(COMMON_LIB) \
		$(AN_MEMBER) $(SHARP_AN)
	$(call link_prog,$(CMOCKA_LIBS))

# Topology: live ibsim fabrics against the stored captures.
TEST_SCRIPTS += tests/topology/test_ibsim.sh tests/plugins/opensm/test_osm_plugin.sh

# The control plane end to end: sharp_am, sharp_an, sharpd, real processes.
AM_TEST := $(TESTDIR)/am/test_am
TESTS += $(AM_TEST)

# (the manager's store library too: test_drain_freeze edits its database
# between two runs)
$(AM_TEST): $(OBJDIR)/tests/am/test_am.o $(AM_LIB) $(TOPO_LIB) \
		$(COMMON_LIB) $(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARP_TOPO) \
		$(AN_MEMBER)
	$(call link_prog,$(CMOCKA_LIBS) $(SQLITE_LIBS))

# A standby manager: takeover after kill -9 and SIGSTOP, epoch fencing.
STANDBY_TEST := $(TESTDIR)/am/test_standby
TESTS += $(STANDBY_TEST)

$(STANDBY_TEST): $(OBJDIR)/tests/am/test_standby.o $(COMMON_LIB) \
		$(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARP_TOPO)
	$(call link_prog,$(CMOCKA_LIBS))

# A standby's count of the nodes that lost the active manager.
HA_LOST_TEST := $(TESTDIR)/am/test_ha_lost
TESTS += $(HA_LOST_TEST)

$(HA_LOST_TEST): $(OBJDIR)/tests/am/test_ha_lost.o $(AM_LIB) $(TOPO_LIB) \
		$(COMMON_LIB)
	$(call link_prog,$(CMOCKA_LIBS) $(SQLITE_LIBS))

# Group ids: each manager's stripe.
IDS_TEST := $(TESTDIR)/am/test_ids
TESTS += $(IDS_TEST)

$(IDS_TEST): $(OBJDIR)/tests/am/test_ids.o $(AM_LIB) $(TOPO_LIB) $(COMMON_LIB)
	$(call link_prog,$(CMOCKA_LIBS) $(SQLITE_LIBS))

# Resource exhaustion: quotas, floods of connections, a stalled member.
LIMITS_TEST := $(TESTDIR)/am/test_limits
TESTS += $(LIMITS_TEST)

$(LIMITS_TEST): $(OBJDIR)/tests/am/test_limits.o $(COLL_SO) $(COMMON_LIB) \
		$(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARP_TOPO)
	$(call link_prog,$(COLL_LINK) $(CMOCKA_LIBS))

# The hostile-user suite (tests/security/): each attack of issue 41 with
# its bound, measured from the daemons' RSS, the attacker as uid 65534.
SECURITY_TEST := $(TESTDIR)/security/test_security
TESTS += $(SECURITY_TEST)

$(SECURITY_TEST): $(OBJDIR)/tests/security/test_security.o $(COMMON_LIB) \
		$(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARP_TOPO)
	$(call link_prog,$(CMOCKA_LIBS))

# sharp_am's Prometheus metrics, scraped by a real Prometheus.
TEST_SCRIPTS += tests/am/test_metrics.sh

# libsharp_coll end to end over a sharp-fabric (links the shared library).
COLL_TEST := $(TESTDIR)/libsharp/test_coll
# epoll_wait exported: test_coll counts the library's polls through it
COLL_LINK = -L$(LIB_OUT) -lsharp_coll -Wl,-rpath,$(abspath $(LIB_OUT)) \
	-Wl,--export-dynamic-symbol=epoll_wait
TESTS += $(COLL_TEST)

$(COLL_TEST): $(OBJDIR)/tests/libsharp/test_coll.o $(TEST_SUPPORT_LIB) \
		$(TOPO_LIB) $(COLL_SO) $(COMMON_LIB) \
		$(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD) $(SHARP_TOPO)
	$(call link_prog,$(COLL_LINK) $(CMOCKA_LIBS))

# exact sums over three fabric shapes, checked against MPFR
EXACT_COLL_TEST := $(TESTDIR)/libsharp/test_exact_coll
TESTS += $(EXACT_COLL_TEST)

$(EXACT_COLL_TEST): $(OBJDIR)/tests/libsharp/test_exact_coll.o \
		$(TEST_SUPPORT_LIB) $(TOPO_LIB) $(COLL_SO) $(COMMON_LIB) $(SHARP_FABRIC) $(SHARP_AM) $(SHARP_AN) $(SHARPD) \
		$(SHARP_TOPO) $(SHARPCTL)
	$(call link_prog,$(COLL_LINK) $(CMOCKA_LIBS) -lmpfr -lgmp)

# the same over a fabric whose ANs speak shm
TEST_SCRIPTS += tests/libsharp/coll_shm.sh

# libsharp_mpi under Open MPI and MPICH through a sharp-fabric.
TEST_SCRIPTS += tests/mpi-coll/test_mpi.sh
# exact sums under MPI: the same bits for any placement
TEST_SCRIPTS += tests/mpi-coll/test_exact_mpi.sh
# sparse payloads: the same bits as dense, every type, exact mode, a fault
TEST_SCRIPTS += tests/mpi-coll/test_sparse_mpi.sh
# non-blocking collectives under stress, against references
TEST_SCRIPTS += tests/mpi-coll/test_stress.sh
# why a call went to MPI: per communicator, per class, the final table
TEST_SCRIPTS += tests/mpi-coll/test_why.sh
# MPI_THREAD_MULTIPLE: threads on communicators of their own, mpi4py's level
TEST_SCRIPTS += tests/mpi-coll/test_threads.sh
# MPI's semantics kept: correct programs (NBX, handles freed while in use,
# persistent starts in any order, 4000 requests in flight, idup, ...)
TEST_SCRIPTS += tests/mpi-coll/test_conform.sh

# Applications through libsharp_mpi against plain Open MPI (Debian's PETSc
# and LAMMPS, from make deps): same iterations and residuals, same thermo
# table, the reductions offloaded (docs/applications.md)
TEST_SCRIPTS += tests/apps/test_petsc.sh tests/apps/test_lammps.sh \
	tests/apps/test_petsc_exact.sh

# libsharp_mpi surviving killed daemons (SHARP_MPI_ON_FAULT=fallback).
TEST_SCRIPTS += tests/mpi-coll/test_fault.sh
# the fault matrix: faults x forms (blocking, non-blocking, persistent) x
# ranks per host x MPIs, at a seeded random phase; a hang fails
TEST_SCRIPTS += tests/mpi-coll/test_fault_matrix.sh
# a manager killed -9 and restarted: the running jobs keep their offload
TEST_SCRIPTS += tests/mpi-coll/test_adopt.sh

# Slurm: the SPANK plugin with real slurmctld and slurmd (tests/plugins/slurm/).
SLURM_RANK := $(TESTDIR)/plugins/slurm/slurm_rank
TEST_HELPERS += $(SLURM_RANK)
TEST_SCRIPTS += tests/plugins/slurm/test_slurm.sh

$(SLURM_RANK): $(OBJDIR)/tests/plugins/slurm/slurm_rank.o $(COLL_SO)
	$(call link_prog,$(COLL_LINK))

# libsharp_coll exports what debian/libsharp-coll1.symbols lists, no more
TEST_SCRIPTS += tests/debian/test_symbols.sh

# sharpctl against a running fabric.
TEST_SCRIPTS += tests/cli/test_sharpctl.sh

# sharp-hello, healthy and in each broken case (sharpd, manager, secret,
# topology, tree, quota) on a fabric of its own.
TEST_SCRIPTS += tests/cli/test_hello.sh
# The partition checker catching each planted history (make check); the
# partition tests themselves (root, --netns fabrics) are make
# check-partitions': sharp-fabric partition and heal, the manager pair's
# cases, the nemesis runs; PLANTED_TESTS: the faults planted in the
# daemons (make check-partitions PLANT=1)
TEST_SCRIPTS += tests/partition/test_checker.py tests/partition/test_no_plant.sh
PARTITION_TESTS ?= tests/cli/test_partition.sh tests/am/test_partition_am.sh \
	tests/partition/test_nemesis.sh
PLANTED_TESTS := tests/partition/test_planted.sh

# The manual pages: rendered with every warning on, every option of --help
# and --dump-config in them, installed under MANDIR.
TEST_SCRIPTS += tests/man/test_man.sh

# make install as a user without privileges: into a prefix (the paths the
# programs, configurations and units name; the daemons run from it) and
# staged with DESTDIR.
TEST_SCRIPTS += tests/install/test_install.sh

# The verbs transport over soft-RoCE in a qemu guest (tests/transport/verbs/rxe-run.sh).
VERBS_TEST := $(TESTDIR)/transport/verbs/test_verbs
TEST_HELPERS += $(VERBS_TEST)
TEST_SCRIPTS += tests/transport/verbs/test_verbs.sh

$(VERBS_TEST): $(OBJDIR)/tests/transport/verbs/test_verbs.o $(COMMON_LIB)
	$(call link_prog)

# Unit tests of the aggregation node link the AN's data path, on their own
# transport (shp_tp_find wrapped); epoll_wait exported: test_an_link counts
# the loop's sleeps through it.
$(filter $(TESTDIR)/an/%,$(UNIT_TESTS)): $(call obj_of,$(AN_LIB_SRCS))
$(filter $(TESTDIR)/an/%,$(UNIT_TESTS)): LDFLAGS += -Wl,--wrap=shp_tp_find \
	-Wl,--export-dynamic-symbol=epoll_wait

# sharpd's unit tests link the daemon (sharpd/, all but its main).
$(filter $(TESTDIR)/sharpd/%,$(UNIT_TESTS)): $(SHARPD_LIB)

# The recovery protocol of libsharp_mpi, with forked members (no MPI).
$(filter $(TESTDIR)/mpi-coll/%,$(UNIT_TESTS)): $(call obj_of,mpi-coll/recover.c mpi-coll/recover_svc.c)

# libsharp_mpi's node-local step on shared memory, with forked ranks (no MPI).
$(TESTDIR)/mpi-coll/test_node_shm: $(call obj_of,mpi-coll/node_shm.c mpi-coll/node_shm_op.c)

# The layering (scripts/check-layers.sh): the tree's includes and calls, and
# the check failing on planted breaches.
TEST_SCRIPTS += tests/scripts/test_check_layers.sh
# make bench-mpi end to end in a tiny mode: no section rots unseen
TEST_SCRIPTS += tests/scripts/test_bench_mpi.sh
