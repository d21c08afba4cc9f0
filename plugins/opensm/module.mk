# plugins/opensm/: the OpenSM event plugin (loaded by opensm as
# lib<event_plugin_name>.so): tells the manager of fabric changes.  Built
# against the installed OpenSM headers, which OpenSM checks.

OSM_PLUGIN := $(LIB_OUT)/libosm_sharp.so
LIBS += $(OSM_PLUGIN)
CFLAGS_plugins_opensm_osm_sharp := -I/usr/include/infiniband

$(OSM_PLUGIN): $(OBJDIR)/plugins/opensm/osm_sharp.o $(TOPO_LIB) $(COMMON_LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(@F) -o $@ $< $(TOPO_LIB) \
		$(COMMON_LIB) $(COMMON_LDLIBS)
