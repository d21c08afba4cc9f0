# an/: sharp_an, the aggregation node.

AN_LIB_SRCS := an/an.c an/an_run.c an/an_recv.c an/an_link.c an/an_group.c \
	an/an_fold.c an/an_dist.c an/an_sparse.c an/an_ctl.c
AN_SRCS := an/main.c $(AN_LIB_SRCS)
SHARP_AN := $(BINDIR)/sharp_an
BINS += $(SHARP_AN)

$(SHARP_AN): $(call obj_of,$(AN_SRCS)) $(COMMON_LIB)
	$(call link_prog)
