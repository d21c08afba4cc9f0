# topology/: the fabric as sharp sees it: ibnetdiscover files parsed,
# fabrics generated, trees and group plans laid on them.  Used by the
# manager, the tools (sharpctl, sharp-topo) and the OpenSM plugin.

TOPO_LIB_SRCS := topology/topo.c topology/topo_gen.c topology/trees.c
TOPO_LIB := $(LIB_OUT)/libshp_topology.a
LIBS += $(TOPO_LIB)

$(TOPO_LIB): $(call obj_of,$(TOPO_LIB_SRCS))
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^
