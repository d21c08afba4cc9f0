# am/: sharp_am, the aggregation manager, and sharp-topo.

# Everything but the mains, as a library the tests link too.
AM_LIB_SRCS := am/topo.c am/topo_gen.c am/trees.c am/am.c am/am_admin.c \
	am/metrics.c
AM_LIB := $(LIBDIR)/libshp_am.a
LIBS += $(AM_LIB)

$(AM_LIB): $(call obj_of,$(AM_LIB_SRCS))
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

SHARP_TOPO := $(BINDIR)/sharp-topo
BINS += $(SHARP_TOPO)

$(SHARP_TOPO): $(OBJDIR)/am/topo_main.o $(AM_LIB) $(COMMON_LIB)
	$(call link_prog)

SHARP_AM := $(BINDIR)/sharp_am
BINS += $(SHARP_AM)

MHD_LIBS = $(call pc_libs,libmicrohttpd)

$(SHARP_AM): $(OBJDIR)/am/main.o $(AM_LIB) $(COMMON_LIB)
	$(call link_prog,$(MHD_LIBS))

# The OpenSM event plugin (loaded by opensm as lib<event_plugin_name>.so):
# built against the installed OpenSM headers, which OpenSM checks.
OSM_PLUGIN := $(LIBDIR)/libosm_sharp.so
LIBS += $(OSM_PLUGIN)
CFLAGS_am_osm_osm_sharp := -I/usr/include/infiniband

$(OSM_PLUGIN): $(OBJDIR)/am/osm/osm_sharp.o $(AM_LIB) $(COMMON_LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(@F) -o $@ $< $(AM_LIB) $(COMMON_LIB) \
		$(COMMON_LDLIBS)
