# tests/fuzz/: libFuzzer harnesses, one per input path (docs/testing.md).
# Built with clang into $(FUZZ_O), apart from the gcc objects; nothing here
# is part of `all` or `check`, so those never need clang.
#
#   make fuzz [FUZZ_SECONDS=60]   run every harness that long, one at a time
#                                 (FUZZ_GOAL_EXECS: the total the goal line
#                                 asks for, default 10 million)
#   make fuzz-build               build the harnesses and their seed corpora

FUZZ_CC ?= clang
FUZZ_O := build/fuzz
FUZZ_OBJDIR := $(FUZZ_O)/obj
FUZZ_SECONDS ?= 60
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer
FUZZ_CFLAGS := -std=gnu11 -O1 -g -Wall -Wextra -Werror -Wshadow \
	-Wno-missing-field-initializers -fno-strict-aliasing -MMD -MP \
	$(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_HARNESSES := wire mcast ctl auth config topo an am sharpd
FUZZ_BINS := $(patsubst %,$(FUZZ_O)/bin/fuzz_%,$(FUZZ_HARNESSES))
FUZZ_GEN := $(FUZZ_O)/bin/gen_seeds
FUZZ_SEEDS_STAMP := $(FUZZ_O)/seeds/.stamp

fuzz_obj = $(patsubst %.c,$(FUZZ_OBJDIR)/%.o,$(1))
FUZZ_COMMON_OBJS := $(call fuzz_obj,$(COMMON_SRCS))
# (the metrics endpoint is started by sharp_am's main only: not linked)
FUZZ_AM_OBJS := $(call fuzz_obj,$(filter-out am/metrics.c,$(AM_LIB_SRCS)) \
	$(TOPO_LIB_SRCS))
FUZZ_AN_OBJS := $(call fuzz_obj,$(AN_LIB_SRCS))
FUZZ_SHARPD_OBJS := $(call fuzz_obj,$(SHARPD_LIB_SRCS))
# (SQLite: the manager's objects, linked by the harnesses and the seed maker
# that use them)
FUZZ_LDLIBS = $(COMMON_LDLIBS) $(SQLITE_LIBS)

$(FUZZ_OBJDIR)/%.o: %.c | $(DEPS_STAMP) $(PATHS_H)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  FUZZCC  $<")
	$(Q)$(FUZZ_CC) $(ALL_CPPFLAGS) $(FUZZ_CFLAGS) $(CFLAGS_$(subst /,_,$*)) \
		-c $< -o $@

# $(call fuzz_link,OBJS): a harness with libFuzzer's main (FUZZ_WRAP: the
# harness's -Wl,--wrap options)
define fuzz_link
@mkdir -p $(@D)
@$(if $(Q),echo "  FUZZLD  $@")
$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $(1) $(FUZZ_LDLIBS) \
	$(FUZZ_WRAP)
endef

$(FUZZ_O)/bin/fuzz_wire: $(FUZZ_OBJDIR)/tests/fuzz/fuzz_wire.o $(FUZZ_COMMON_OBJS)
	$(call fuzz_link,$^)
$(FUZZ_O)/bin/fuzz_mcast: $(FUZZ_OBJDIR)/tests/fuzz/fuzz_mcast.o $(FUZZ_COMMON_OBJS)
	$(call fuzz_link,$^)
$(FUZZ_O)/bin/fuzz_ctl: $(FUZZ_OBJDIR)/tests/fuzz/fuzz_ctl.o $(FUZZ_COMMON_OBJS)
	$(call fuzz_link,$^)
$(FUZZ_O)/bin/fuzz_auth: $(FUZZ_OBJDIR)/tests/fuzz/fuzz_auth.o $(FUZZ_COMMON_OBJS)
	$(call fuzz_link,$^)
$(FUZZ_O)/bin/fuzz_config: $(FUZZ_OBJDIR)/tests/fuzz/fuzz_config.o $(FUZZ_COMMON_OBJS)
	$(call fuzz_link,$^)
$(FUZZ_O)/bin/fuzz_topo: $(FUZZ_OBJDIR)/tests/fuzz/fuzz_topo.o $(FUZZ_AM_OBJS) \
		$(FUZZ_COMMON_OBJS)
	$(call fuzz_link,$^)
# the AN runs on an in-memory transport (shp_tp_find is the harness's), its
# AM connection on a socketpair (shp_conn_connect)
$(FUZZ_O)/bin/fuzz_an: FUZZ_WRAP := -Wl,--wrap=shp_tp_find \
	-Wl,--wrap=shp_conn_connect
$(FUZZ_O)/bin/fuzz_an: $(FUZZ_OBJDIR)/tests/fuzz/fuzz_an.o $(FUZZ_AN_OBJS) \
		$(FUZZ_COMMON_OBJS)
	$(call fuzz_link,$^)
# the AM's listeners hand the harness their accept callbacks; topology files
# it is asked to load are only the harness's own
$(FUZZ_O)/bin/fuzz_am: FUZZ_WRAP := -Wl,--wrap=shp_listener_start \
	-Wl,--wrap=shp_listener_stop -Wl,--wrap=shp_topo_load
$(FUZZ_O)/bin/fuzz_am: $(FUZZ_OBJDIR)/tests/fuzz/fuzz_am.o $(FUZZ_AM_OBJS) \
		$(FUZZ_COMMON_OBJS)
	$(call fuzz_link,$^)

# sharpd: the daemon without its main
$(FUZZ_O)/bin/fuzz_sharpd: $(FUZZ_OBJDIR)/tests/fuzz/fuzz_sharpd.o \
		$(FUZZ_SHARPD_OBJS) $(FUZZ_COMMON_OBJS)
	$(call fuzz_link,$^)

# Seeds: valid inputs made by the project's own encoders, plus the bundled
# topologies.
$(FUZZ_GEN): $(FUZZ_OBJDIR)/tests/fuzz/gen_seeds.o $(FUZZ_AM_OBJS) \
		$(FUZZ_COMMON_OBJS)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  FUZZLD  $@")
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -o $@ $^ $(FUZZ_LDLIBS)

$(FUZZ_SEEDS_STAMP): $(FUZZ_GEN) $(wildcard examples/*.ibnd tests/topology/data/*.ibnd)
	$(Q)rm -rf $(FUZZ_O)/seeds && mkdir -p $(FUZZ_O)/seeds
	$(Q)$(FUZZ_GEN) $(FUZZ_O)/seeds
	$(Q)for f in examples/*.ibnd tests/topology/data/*.ibnd; do \
	    cp "$$f" "$(FUZZ_O)/seeds/topo/$$(echo "$$f" | tr / -)"; done
	$(Q)touch $@

.PHONY: fuzz fuzz-build
fuzz-build: $(FUZZ_BINS) $(FUZZ_SEEDS_STAMP)

fuzz:
	$(Q)$(SUBMAKE) fuzz-build
	$(Q)FUZZ_O=$(FUZZ_O) $(if $(FUZZ_GOAL_EXECS),FUZZ_GOAL_EXECS=$(FUZZ_GOAL_EXECS)) \
		bash tests/fuzz/run-fuzz.sh $(FUZZ_SECONDS) $(FUZZ_HARNESSES)

-include $(shell find $(FUZZ_OBJDIR) -name '*.d' 2>/dev/null)
