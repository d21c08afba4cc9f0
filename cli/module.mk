# cli/: sharpctl, the administrator's command.

SHARPCTL := $(BINDIR)/sharpctl
BINS += $(SHARPCTL)

$(SHARPCTL): $(OBJDIR)/cli/sharpctl.o $(AM_LIB) $(COMMON_LIB)
	$(call link_prog)

# sharp-hello: "why does my job not get sharp?" on a compute node, as the
# user (sharpd, the manager, a tree, quota, a group, an allreduce); the
# library linked in statically, so that it runs from the build tree too.
SHARP_HELLO := $(BINDIR)/sharp-hello
BINS += $(SHARP_HELLO)

$(SHARP_HELLO): $(OBJDIR)/cli/sharp_hello.o $(COLL_A) $(COMMON_LIB)
	$(call link_prog)
