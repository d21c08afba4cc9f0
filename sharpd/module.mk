# sharpd/: the per-host daemon.

# Everything but the main, as a library the tests link too.
SHARPD_LIB_SRCS := sharpd/sharpd_jobs.c sharpd/sharpd_am.c \
	sharpd/sharpd_clients.c sharpd/sharpd.c
SHARPD_LIB := $(LIB_OUT)/libshp_sharpd.a
LIBS += $(SHARPD_LIB)

$(SHARPD_LIB): $(call obj_of,$(SHARPD_LIB_SRCS))
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

SHARPD := $(BINDIR)/sharpd
BINS += $(SHARPD)

$(SHARPD): $(OBJDIR)/sharpd/main.o $(SHARPD_LIB) $(COMMON_LIB)
	$(call link_prog)
