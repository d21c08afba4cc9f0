# an/: sharp_an, the aggregation node.

AN_SRCS := an/main.c an/an.c an/an_ctl.c
SHARP_AN := $(BINDIR)/sharp_an
BINS += $(SHARP_AN)

$(SHARP_AN): $(call obj_of,$(AN_SRCS)) $(COMMON_LIB)
	$(call link_prog)
