# sharpd/: the per-host daemon.

SHARPD := $(BINDIR)/sharpd
BINS += $(SHARPD)

$(SHARPD): $(OBJDIR)/sharpd/sharpd.o $(COMMON_LIB)
	$(call link_prog)
