# cli/: sharpctl, the administrator's command.

SHARPCTL := $(BINDIR)/sharpctl
BINS += $(SHARPCTL)

$(SHARPCTL): $(OBJDIR)/cli/sharpctl.o $(AM_LIB) $(COMMON_LIB)
	$(call link_prog)
