# am/: sharp_am, the aggregation manager.

# Everything but the main, as a library the tests link too.
AM_LIB_SRCS := am/am_store.c am/am_state.c am/am_persist.c am/am_settings.c \
	am/am_trees.c \
	am/am_groups.c am/am_ans.c am/am_jobs.c am/am_reserve.c am/am_sharpds.c \
	am/am_adopt.c am/am_adopt_reports.c am/am_ha.c am/am_ha_lost.c am/am_ids.c \
	am/am_peers.c am/am.c \
	am/am_admin.c am/metrics.c
AM_LIB := $(LIB_OUT)/libshp_am.a
LIBS += $(AM_LIB)

$(AM_LIB): $(call obj_of,$(AM_LIB_SRCS))
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

SHARP_AM := $(BINDIR)/sharp_am
BINS += $(SHARP_AM)

MHD_LIBS = $(call pc_libs,libmicrohttpd)
# the manager's state database (am_store.c); whatever links $(AM_LIB)
# links this too
SQLITE_LIBS = $(call pc_libs,sqlite3)

$(SHARP_AM): $(OBJDIR)/am/main.o $(AM_LIB) $(TOPO_LIB) $(COMMON_LIB)
	$(call link_prog,$(MHD_LIBS) $(SQLITE_LIBS))
