# cli/: the tools: sharpctl (the administrator's command), sharp-hello
# (a user's doctor), sharp-topo (topologies checked, generated, drawn) and
# sharp-fabric (a whole fabric on one machine, a script).

SHARPCTL := $(BINDIR)/sharpctl
BINS += $(SHARPCTL)

SHARPCTL_SRCS := cli/sharpctl/main.c cli/sharpctl/commands.c cli/sharpctl/out.c

$(SHARPCTL): $(call obj_of,$(SHARPCTL_SRCS)) $(TOPO_LIB) $(COMMON_LIB)
	$(call link_prog)

# sharp-hello: "why does my job not get sharp?" on a compute node, as the
# user (sharpd, the manager, a tree, quota, a group, an allreduce); the
# library linked in statically, so that it runs from the build tree too.
SHARP_HELLO := $(BINDIR)/sharp-hello
BINS += $(SHARP_HELLO)

SHARP_HELLO_SRCS := cli/hello/main.c cli/hello/checks.c cli/hello/peers.c

$(SHARP_HELLO): $(call obj_of,$(SHARP_HELLO_SRCS)) $(COLL_A) $(COMMON_LIB)
	$(call link_prog)

SHARP_TOPO := $(BINDIR)/sharp-topo
BINS += $(SHARP_TOPO)

$(SHARP_TOPO): $(OBJDIR)/cli/sharp_topo.o $(TOPO_LIB) $(COMMON_LIB)
	$(call link_prog)

# sharp-fabric: a local fabric (a script; installed with the binaries)
SHARP_FABRIC := $(BINDIR)/sharp-fabric
BINS += $(SHARP_FABRIC)

$(SHARP_FABRIC): cli/sharp-fabric
	@mkdir -p $(@D)
	$(Q)install -m 0755 $< $@
