# sharp: in-network reduction, in software.
#
# One non-recursive Makefile: every directory contributes a module.mk that
# appends to the variables below.  Objects never land in the source tree.
#
#   make [all]           build everything into $(O) (default: build/)
#   make check           build and run every test suite
#   make check-layers    the includes and calls keep to the rooms' layering,
#                        files and functions to their sizes
#   make SAN=1 check     the same under AddressSanitizer + UBSan (O=build/san)
#   make SAN=thread ...  the same under ThreadSanitizer (O=build/tsan); the
#                        threads test under it: make SAN=thread check TESTS=
#                        TEST_SCRIPTS=tests/mpi-coll/test_threads.sh
#                        (tests/mpi-coll/lib.sh, tsan.supp)
#   make bench-reduce    reduction-engine throughput benchmark
#   make bench-exact     exact (SHARP_OP_SUM_EXACT) vs normal sums
#   make install         PREFIX=/usr/local DESTDIR= (SYSCONFDIR, LOCALSTATEDIR,
#                        RUNSTATEDIR: see below)
#   make deps            install (or print how to install) build dependencies
#   make check-cluster   the Debian packages in systemd containers (root)
#   make format-check    clang-format conformance, as run by CI
#   make V=1 ...         show full command lines

.DEFAULT_GOAL := all
SHELL := /bin/bash

SAN ?= 0
# PLANT=1: the planted faults compiled in (core/plant.h), in build/plant
PLANT ?= 0
ifeq ($(PLANT),1)
O ?= build/plant
endif
ifeq ($(SAN),1)
O ?= build/san
else ifeq ($(SAN),thread)
O ?= build/tsan
else
O ?= build
endif
PREFIX ?= /usr/local
DESTDIR ?=
# Where the installed programs look for their configuration and sockets: GNU
# defaults, /etc, /var and /run for PREFIX=/usr, else under PREFIX.  They are
# compiled in ($(O)/gen/shp_paths.h): `make install` with other values than
# the build's rebuilds what embeds them.
override PREFIX := $(patsubst %/,%,$(PREFIX))
ifeq ($(PREFIX),/usr)
SYSCONFDIR ?= /etc
LOCALSTATEDIR ?= /var
RUNSTATEDIR ?= /run
else
SYSCONFDIR ?= $(PREFIX)/etc
LOCALSTATEDIR ?= $(PREFIX)/var
RUNSTATEDIR ?= $(LOCALSTATEDIR)/run
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

CC ?= cc
PKG_CONFIG ?= pkg-config
TOP := $(CURDIR)

# Flags -------------------------------------------------------------------
OPT ?= -O2
CPPFLAGS_BASE := -I$(TOP)/include -I$(TOP) -I$(O)/gen -D_GNU_SOURCE
CFLAGS_BASE := -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -Wshadow \
	-Wno-missing-field-initializers -fPIC -fvisibility=hidden \
	-fno-strict-aliasing -MMD -MP
LDFLAGS_BASE :=
ifeq ($(PLANT),1)
CPPFLAGS_BASE += -DSHP_PLANT
endif
ifeq ($(SAN),1)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer
CFLAGS_BASE += $(SAN_FLAGS)
LDFLAGS_BASE += $(SAN_FLAGS)
endif
ifeq ($(SAN),thread)
SAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
CFLAGS_BASE += $(SAN_FLAGS)
LDFLAGS_BASE += $(SAN_FLAGS)
endif
ALL_CPPFLAGS = $(CPPFLAGS_BASE) $(CPPFLAGS)
ALL_CFLAGS = $(CFLAGS_BASE) $(CFLAGS)
ALL_LDFLAGS = $(LDFLAGS_BASE) $(LDFLAGS)

# Libraries found through pkg-config (after `make deps`).  Evaluated lazily so
# that `make deps` itself works before they exist.
pc_cflags = $(shell $(PKG_CONFIG) --cflags $(1) 2>/dev/null)
pc_libs = $(shell $(PKG_CONFIG) --libs $(1) 2>/dev/null)
LIBEV_LIBS := -lev
JANSSON_LIBS = $(call pc_libs,jansson)
INIH_LIBS = $(call pc_libs,inih)
CMOCKA_LIBS = $(call pc_libs,cmocka)
SODIUM_LIBS = $(call pc_libs,libsodium)
CRYPTO_LIBS = $(call pc_libs,libcrypto)

# Output layout -----------------------------------------------------------
BINDIR := $(O)/bin
LIB_OUT := $(O)/lib
OBJDIR := $(O)/obj
TESTDIR := $(O)/tests

# Variables that module.mk files append to.
BINS :=
LIBS :=
TESTS :=
TEST_HELPERS :=
TEST_SCRIPTS :=
BENCHES :=
CLEAN_EXTRA :=

# Dependencies stamp: `all` and `check` make sure the system packages exist.
DEPS_STAMP := $(O)/.deps-ok
# NO_DEPS_CHECK=1 (a package build: its Build-Depends are the check) skips it.
ifeq ($(NO_DEPS_CHECK),1)
DEPS_STAMP :=
else
$(DEPS_STAMP): scripts/deps.sh
	$(Q)bash scripts/deps.sh
	$(Q)mkdir -p $(@D) && touch $@
endif

.PHONY: deps
deps:
	$(Q)bash scripts/deps.sh

# Generic rules -------------------------------------------------------------
# obj_of(src): where the object of a source lands.
obj_of = $(patsubst %.c,$(OBJDIR)/%.o,$(1))

# $(call link_prog,EXTRA_LIBS): the recipe that links $@ from its object and
# project-library prerequisites, the common library and what that needs.
COMMON_LDLIBS = $(JANSSON_LIBS) $(INIH_LIBS) $(SODIUM_LIBS) $(CRYPTO_LIBS) $(LIBEV_LIBS) \
	-lrdmacm -libverbs -lm -lpthread
define link_prog
@mkdir -p $(@D)
@$(if $(Q),echo "  LD      $@")
$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) \
	$(filter-out $(COMMON_LIB),$(filter %.a,$^)) $(COMMON_LIB) $(COMMON_LDLIBS) $(1)
endef

# The install-time paths, rewritten only when they change (so that a change
# rebuilds just the objects that include it).
# (SHP_LIBDIR is read by no program: the man pages that name LIBDIR depend
# on this file, so that they follow it)
PATHS_H := $(O)/gen/shp_paths.h
$(PATHS_H): FORCE
	@mkdir -p $(@D)
	$(Q)printf '%s\n' '/* generated by make: the paths chosen at build time */' \
	    '#define SHP_PREFIX "$(PREFIX)"' '#define SHP_SYSCONFDIR "$(SYSCONFDIR)"' \
	    '#define SHP_LOCALSTATEDIR "$(LOCALSTATEDIR)"' \
	    '#define SHP_RUNSTATEDIR "$(RUNSTATEDIR)"' \
	    '#define SHP_LIBDIR "$(LIBDIR)"' >$@.tmp
	$(Q)if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; fi
.PHONY: FORCE
FORCE:

$(OBJDIR)/%.o: %.c | $(DEPS_STAMP) $(PATHS_H)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) $(CFLAGS_$(subst /,_,$*)) -c $< -o $@

include core/module.mk
include reduce/module.mk
include protocol/module.mk
include transport/module.mk
$(COMMON_LIB): $(call obj_of,$(COMMON_SRCS))
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^
include topology/module.mk
include an/module.mk
include am/module.mk
include sharpd/module.mk
include libsharp/module.mk
include mpi-coll/module.mk
include cli/module.mk
include plugins/opensm/module.mk
include plugins/slurm/module.mk
include man/module.mk
include tests/module.mk
include tests/mpi-coll/module.mk
include tests/fuzz/module.mk
include bench/module.mk

.PHONY: all
all: $(LIBS) $(BINS) $(MANS) $(TESTS) $(TEST_HELPERS) $(BENCHES)

# make check, demo and fuzz build on every core (JOBS, default nproc) unless
# the command line gave -j: each serial build was a minute of CI's hour
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
SUBMAKE = $(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS))
BUILD_ALL = $(SUBMAKE) all

# Tests ---------------------------------------------------------------------
.PHONY: check
check:
	$(Q)$(BUILD_ALL)
	$(Q)O=$(O) SAN=$(SAN) bash tests/run-tests.sh $(TESTS) $(TEST_SCRIPTS)

# The control plane under network partitions (tests/partition/, root with
# network namespaces; CI runs it beside make check): sharp-fabric
# partition itself, the manager pair's cases, then PARTITION_RUNS seeded
# nemesis runs of PARTITION_SECONDS each (the long form, make soak-partitions:
# 20 runs of 180 s).
# PLANT=1: instead, each planted fault caught by the checker.
PARTITION_SECONDS ?= 60
PARTITION_RUNS ?= 1
.PHONY: check-partitions soak-partitions
check-partitions:
	$(Q)$(BUILD_ALL)
	$(Q)O=$(O) PARTITION_SECONDS=$(PARTITION_SECONDS) \
		PARTITION_RUNS=$(PARTITION_RUNS) PARTITION_SEED=$(PARTITION_SEED) \
		bash tests/run-tests.sh $(if $(filter 1,$(PLANT)),$(PLANTED_TESTS),$(PARTITION_TESTS))
soak-partitions:
	$(Q)$(MAKE) --no-print-directory check-partitions PARTITION_SECONDS=180 \
		PARTITION_RUNS=20 PARTITION_TESTS=tests/partition/test_nemesis.sh

# The layering: allowed includes per room, no circle of calls between the
# product's files, no file over 800 lines and no function over 80
# (scripts/check-layers.sh; also one of make check's tests).
.PHONY: check-layers
check-layers: all
	$(Q)bash scripts/check-layers.sh --objects $(OBJDIR)

# Install -------------------------------------------------------------------
# PREFIX: binaries, libraries, headers, pkg-config, units, docs.
# SYSCONFDIR/sharp: the configurations and the cluster secret (never
# overwritten).  RUNSTATEDIR/sharp: the sockets (systemd makes it when it is
# /run, else make install does).  LOCALSTATEDIR/lib/sharp: the manager's
# state database (mode 0700; systemd makes it when it is /var/lib, else
# make install does; never removed).  DESTDIR stages all of it and creates
# no secret: a package must not ship one.
UNITDIR ?= $(PREFIX)/lib/systemd/system
# the libraries (with pkgconfig/ and sharp/, the Slurm plugin's directory);
# Debian's packages set it to /usr/lib/<multiarch triplet>
LIBDIR ?= $(PREFIX)/lib
DOCDIR ?= $(PREFIX)/share/doc/sharp
VERSION := 0.1.0
INST_BINS := $(filter-out $(MPI_DEMO_OMPI) $(MPI_DEMO_MPICH),$(BINS))
DAEMON_CONFS := sharp_am sharp_an sharpd
UNITS := sharp_am.service sharpd.service sharp_an@.service
# Lines of a unit template that start with @RUNTIMEDIR@ are for a runtime
# directory systemd manages (/run/sharp), @RUNSTATEDIR@ lines for any other.
ifneq ($(filter /run /var/run,$(RUNSTATEDIR)),)
RUNDIR_SYSTEMD := 1
endif
# @STATEDIR@ lines: a state directory systemd manages (/var/lib/sharp),
# @LOCALSTATEDIR@ lines for any other
STATE_DIR := $(LOCALSTATEDIR)/lib/sharp
ifeq ($(LOCALSTATEDIR),/var)
STATEDIR_SYSTEMD := 1
endif
subst_paths = sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@DOCDIR@|$(DOCDIR)|g' \
	-e 's|@LIBDIR@|$(LIBDIR)|g' \
	-e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@PREFIX@|$(PREFIX)|g' \
	-e 's|@VERSION@|$(VERSION)|g' \
	$(if $(RUNDIR_SYSTEMD),-e '/^@RUNSTATEDIR@/d' -e 's|^@RUNTIMEDIR@||', \
	    -e '/^@RUNTIMEDIR@/d' -e 's|^@RUNSTATEDIR@||') \
	$(if $(STATEDIR_SYSTEMD),-e '/^@LOCALSTATEDIR@/d' -e 's|^@STATEDIR@||', \
	    -e '/^@STATEDIR@/d' -e 's|^@LOCALSTATEDIR@||') \
	-e 's|@LOCALSTATEDIR@|$(LOCALSTATEDIR)|g' \
	-e 's|@RUNSTATEDIR@|$(RUNSTATEDIR)|g'

# what make install installs, built
.PHONY: programs
programs: $(LIBS) $(BINS) $(MANS)

.PHONY: install uninstall
install: programs install-man
	$(Q)install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/sharp/api $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(DOCDIR) $(DESTDIR)$(SYSCONFDIR)/sharp \
		$(if $(RUNDIR_SYSTEMD),,$(DESTDIR)$(RUNSTATEDIR)/sharp)
	$(Q)$(if $(STATEDIR_SYSTEMD),,install -d -m 0700 $(DESTDIR)$(STATE_DIR))
	$(Q)install -m 0755 $(INST_BINS) $(DESTDIR)$(PREFIX)/bin/
	$(Q)install -m 0755 $(MPI_DEMO_OMPI) $(MPI_DEMO_MPICH) $(DESTDIR)$(DOCDIR)/
	$(Q)install -m 0644 include/sharp/api/*.h $(DESTDIR)$(PREFIX)/include/sharp/api/
	$(Q)install -m 0755 $(LIB_OUT)/$(COLL_SONAME).0.0 $(DESTDIR)$(LIBDIR)/
	$(Q)ln -sf $(COLL_SONAME).0.0 $(DESTDIR)$(LIBDIR)/$(COLL_SONAME)
	$(Q)ln -sf $(COLL_SONAME) $(DESTDIR)$(LIBDIR)/libsharp_coll.so
	$(Q)install -m 0644 $(COLL_A) $(DESTDIR)$(LIBDIR)/
	$(Q)install -m 0755 $(SHARP_MPI_OMPI) $(SHARP_MPI_MPICH) $(SHARP_YIELD) \
		$(OSM_PLUGIN) $(DESTDIR)$(LIBDIR)/
	$(Q)install -d $(DESTDIR)$(LIBDIR)/sharp
	$(Q)install -m 0755 $(SPANK_SHARP) $(DESTDIR)$(LIBDIR)/sharp/
	$(Q)$(subst_paths) dist/slurm/plugstack.conf.in > $(DESTDIR)$(DOCDIR)/plugstack.sharp.conf
	$(Q)$(subst_paths) dist/sharp_coll.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/sharp_coll.pc
	$(Q)for u in $(UNITS); do \
	    $(subst_paths) "dist/systemd/$$u.in" > "$(DESTDIR)$(UNITDIR)/$$u"; done
	$(Q)install -m 0644 README.md $(filter-out docs/README.md,$(wildcard docs/*.md)) dist/grafana/sharp.json $(DESTDIR)$(DOCDIR)/
	$(Q)for b in $(INST_BINS); do n=$$(basename $$b); \
	    "$$b" --help > "$(DESTDIR)$(DOCDIR)/$$n.txt" 2>&1 || true; done
	$(Q)# every option, commented, with its default and doc; never overwrite
	$(Q)for d in $(DAEMON_CONFS); do f="$(DESTDIR)$(SYSCONFDIR)/sharp/$$d.conf"; \
	    [ -e "$$f" ] && { echo "install: keeping $$f"; continue; }; \
	    { echo "# $$d configuration: every option with its default (commented)."; \
	      echo "# Precedence: default < this file < SHARP_* environment < flags."; \
	      echo; env -i $(BINDIR)/$$d --dump-config --config /dev/null | \
	      sed -e 's/^\([a-z_][a-z_0-9]* = \)/# \1/'; } > "$$f"; done
ifeq ($(DESTDIR),)
	$(Q)f="$(SYSCONFDIR)/sharp/secret"; [ -e "$$f" ] || \
	    (umask 077 && head -c 32 /dev/urandom | base64 > "$$f" && \
	     echo "install: created the cluster secret $$f (mode 0600): copy it to every node")
else
	$(Q)echo "install: staged in $(DESTDIR), without a cluster secret: create" \
	    "$(SYSCONFDIR)/sharp/secret (mode 0600) on the nodes (docs/admin.md)"
endif

uninstall: uninstall-man
	$(Q)rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(notdir $(INST_BINS)))
	$(Q)rm -f $(DESTDIR)$(LIBDIR)/libsharp_coll.* $(DESTDIR)$(LIBDIR)/libsharp_mpi_*.so \
		$(DESTDIR)$(LIBDIR)/libsharp_yield.so \
		$(DESTDIR)$(LIBDIR)/libosm_sharp.so \
		$(DESTDIR)$(LIBDIR)/sharp/spank_sharp.so \
		$(DESTDIR)$(LIBDIR)/pkgconfig/sharp_coll.pc
	$(Q)rmdir $(DESTDIR)$(LIBDIR)/sharp 2>/dev/null || true
	$(Q)rm -rf $(DESTDIR)$(PREFIX)/include/sharp $(DESTDIR)$(DOCDIR)
	$(Q)rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,$(UNITS))
	$(Q)$(if $(RUNDIR_SYSTEMD),,rmdir --ignore-fail-on-non-empty $(DESTDIR)$(RUNSTATEDIR)/sharp 2>/dev/null || true)
	$(Q)echo "uninstall: $(SYSCONFDIR)/sharp (configuration, secret) and" \
	    "$(STATE_DIR) (the manager's state) left in place"

# Debian packages -------------------------------------------------------------
# debian/ built with dpkg-buildpackage -us -uc -b in a copy of the tree
# ($(O)/deb/sharp-VERSION; the .debs land in $(O)/deb), then lintian.
# tests/debian/test_deb.sh (make deb-check, as root) also installs them.
.PHONY: deb deb-check
deb:
	$(Q)bash scripts/deps.sh deb
	$(Q)bash scripts/build-deb.sh $(O)

deb-check: deb
	$(Q)O=$(O) SAN=$(SAN) bash tests/run-tests.sh tests/debian/test_deb.sh

# tests/cluster/test_cluster.sh (root): the packages installed in nine
# systemd containers (systemd-nspawn, a root made once by mmdebstrap and
# kept in /var/cache/sharp-cluster), started by systemctl, MPI jobs across
# them, kill -9, stop, an upgrade in service, remove and purge.  NO_DEB=1:
# the packages $(O)/deb already built are used (CI, after deb-check).
.PHONY: check-cluster deps-cluster
deps-cluster:
	$(Q)bash scripts/deps.sh cluster

check-cluster: deps-cluster $(if $(NO_DEB),,deb)
	$(Q)O=$(O) bash tests/run-tests.sh tests/cluster/test_cluster.sh

# Formatting ----------------------------------------------------------------
FORMAT_SRCS = $(shell git ls-files --cached --others --exclude-standard '*.c' '*.h' 2>/dev/null)
.PHONY: format format-check
format:
	$(Q)clang-format -i $(FORMAT_SRCS)
format-check:
	$(Q)clang-format --dry-run --Werror $(FORMAT_SRCS) && echo "format-check: ok"

# Demo ------------------------------------------------------------------------
.PHONY: demo
demo:
	$(Q)$(BUILD_ALL)
	$(Q)bash scripts/demo.sh $(O)

# Objects of test programs are not intermediates to delete.
.SECONDARY:

.PHONY: clean
clean:
	rm -rf $(O) $(CLEAN_EXTRA)

-include $(shell find $(OBJDIR) -name '*.d' 2>/dev/null)
