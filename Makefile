# sharp: in-network reduction, in software.
#
# One non-recursive Makefile: every directory contributes a module.mk that
# appends to the variables below.  Objects never land in the source tree.
#
#   make [all]           build everything into $(O) (default: build/)
#   make check           build and run every test suite
#   make SAN=1 check     the same under AddressSanitizer + UBSan (O=build/san)
#   make bench-reduce    reduction-engine throughput benchmark
#   make install         PREFIX=/usr/local DESTDIR=
#   make deps            install (or print how to install) build dependencies
#   make format-check    clang-format conformance, as run by CI
#   make V=1 ...         show full command lines

.DEFAULT_GOAL := all
SHELL := /bin/bash

SAN ?= 0
ifeq ($(SAN),1)
O ?= build/san
else
O ?= build
endif
PREFIX ?= /usr/local
DESTDIR ?=

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
CPPFLAGS_BASE := -I$(TOP)/include -I$(TOP) -D_GNU_SOURCE
CFLAGS_BASE := -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -Wshadow \
	-Wno-missing-field-initializers -fPIC -fvisibility=hidden \
	-fno-strict-aliasing -MMD -MP
LDFLAGS_BASE :=
ifeq ($(SAN),1)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer
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

# Output layout -----------------------------------------------------------
BINDIR := $(O)/bin
LIBDIR := $(O)/lib
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
$(DEPS_STAMP): scripts/deps.sh
	$(Q)bash scripts/deps.sh
	$(Q)mkdir -p $(@D) && touch $@

.PHONY: deps
deps:
	$(Q)bash scripts/deps.sh

# Generic rules -------------------------------------------------------------
# obj_of(src): where the object of a source lands.
obj_of = $(patsubst %.c,$(OBJDIR)/%.o,$(1))

# $(call link_prog,EXTRA_LIBS): the recipe that links $@ from its object and
# project-library prerequisites, the common library and what that needs.
COMMON_LDLIBS = $(JANSSON_LIBS) $(INIH_LIBS) $(SODIUM_LIBS) $(LIBEV_LIBS) \
	-lrdmacm -libverbs -lm -lpthread
define link_prog
@mkdir -p $(@D)
@$(if $(Q),echo "  LD      $@")
$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) \
	$(filter-out $(COMMON_LIB),$(filter %.a,$^)) $(COMMON_LIB) $(COMMON_LDLIBS) $(1)
endef

$(OBJDIR)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) $(CFLAGS_$(subst /,_,$*)) -c $< -o $@

include common/module.mk
include an/module.mk
include am/module.mk
include sharpd/module.mk
include libsharp/module.mk
include mpi-coll/module.mk
include cli/module.mk
include tests/module.mk
include bench/module.mk

.PHONY: all
all: $(LIBS) $(BINS) $(TESTS) $(TEST_HELPERS) $(BENCHES)

# Tests ---------------------------------------------------------------------
.PHONY: check
check: all
	$(Q)O=$(O) SAN=$(SAN) bash tests/run-tests.sh $(TESTS) $(TEST_SCRIPTS)

# Install -------------------------------------------------------------------
# PREFIX: binaries, libraries, headers, pkg-config, units, docs.  The
# daemons read /etc/sharp (SYSCONFDIR) wherever they are installed.
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/sharp
VERSION := 0.1.0
INST_BINS := $(filter-out $(MPI_DEMO_OMPI) $(MPI_DEMO_MPICH),$(BINS))
DAEMON_CONFS := sharp_am sharp_an sharpd
UNITS := sharp_am.service sharpd.service sharp_an@.service
subst_paths = sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@DOCDIR@|$(DOCDIR)|g' \
	-e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@PREFIX@|$(PREFIX)|g' \
	-e 's|@VERSION@|$(VERSION)|g'

.PHONY: install uninstall
install: all
	$(Q)install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/sharp/api $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(DOCDIR) $(DESTDIR)$(SYSCONFDIR)/sharp
	$(Q)install -m 0755 $(INST_BINS) $(DESTDIR)$(PREFIX)/bin/
	$(Q)install -m 0755 $(MPI_DEMO_OMPI) $(MPI_DEMO_MPICH) $(DESTDIR)$(DOCDIR)/
	$(Q)install -m 0644 include/sharp/api/*.h $(DESTDIR)$(PREFIX)/include/sharp/api/
	$(Q)install -m 0755 $(LIBDIR)/$(COLL_SONAME).0.0 $(DESTDIR)$(PREFIX)/lib/
	$(Q)ln -sf $(COLL_SONAME).0.0 $(DESTDIR)$(PREFIX)/lib/$(COLL_SONAME)
	$(Q)ln -sf $(COLL_SONAME) $(DESTDIR)$(PREFIX)/lib/libsharp_coll.so
	$(Q)install -m 0644 $(COLL_A) $(DESTDIR)$(PREFIX)/lib/
	$(Q)install -m 0755 $(SHARP_MPI_OMPI) $(SHARP_MPI_MPICH) $(OSM_PLUGIN) \
		$(DESTDIR)$(PREFIX)/lib/
	$(Q)$(subst_paths) dist/sharp_coll.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/sharp_coll.pc
	$(Q)for u in $(UNITS); do \
	    $(subst_paths) "dist/systemd/$$u.in" > "$(DESTDIR)$(UNITDIR)/$$u"; done
	$(Q)install -m 0644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/
	$(Q)for b in $(INST_BINS); do n=$$(basename $$b); \
	    "$$b" --help > "$(DESTDIR)$(DOCDIR)/$$n.txt" 2>&1 || true; done
	$(Q)# every option, commented, with its default and doc; never overwrite
	$(Q)for d in $(DAEMON_CONFS); do f="$(DESTDIR)$(SYSCONFDIR)/sharp/$$d.conf"; \
	    [ -e "$$f" ] && { echo "install: keeping $$f"; continue; }; \
	    { echo "# $$d configuration: every option with its default (commented)."; \
	      echo "# Precedence: default < this file < SHARP_* environment < flags."; \
	      echo; env -i $(BINDIR)/$$d --dump-config --config /dev/null | \
	      sed -e 's/^\([a-z_][a-z_0-9]* = \)/# \1/'; } > "$$f"; done
	$(Q)f="$(DESTDIR)$(SYSCONFDIR)/sharp/secret"; [ -e "$$f" ] || \
	    (umask 077 && head -c 32 /dev/urandom | base64 > "$$f" && \
	     echo "install: created the cluster secret $$f (mode 0600): copy it to every node")

uninstall:
	$(Q)rm -f $(addprefix $(DESTDIR)$(PREFIX)/bin/,$(notdir $(INST_BINS)))
	$(Q)rm -f $(DESTDIR)$(PREFIX)/lib/libsharp_coll.* $(DESTDIR)$(PREFIX)/lib/libsharp_mpi_*.so \
		$(DESTDIR)$(PREFIX)/lib/libosm_sharp.so \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig/sharp_coll.pc
	$(Q)rm -rf $(DESTDIR)$(PREFIX)/include/sharp $(DESTDIR)$(DOCDIR)
	$(Q)rm -f $(addprefix $(DESTDIR)$(UNITDIR)/,$(UNITS))
	$(Q)echo "uninstall: $(SYSCONFDIR)/sharp (configuration, secret) left in place"

# Formatting ----------------------------------------------------------------
FORMAT_SRCS = $(shell git ls-files --cached --others --exclude-standard '*.c' '*.h' 2>/dev/null)
.PHONY: format format-check
format:
	$(Q)clang-format -i $(FORMAT_SRCS)
format-check:
	$(Q)clang-format --dry-run --Werror $(FORMAT_SRCS) && echo "format-check: ok"

# Demo ------------------------------------------------------------------------
.PHONY: demo
demo: all
	$(Q)bash scripts/demo.sh $(O)

# Objects of test programs are not intermediates to delete.
.SECONDARY:

.PHONY: clean
clean:
	rm -rf $(O) $(CLEAN_EXTRA)

-include $(shell find $(OBJDIR) -name '*.d' 2>/dev/null)
