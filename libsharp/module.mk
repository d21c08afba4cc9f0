# libsharp/: libsharp_coll, the SHARP collective API (shared + static).

COLL_SRCS := libsharp/coll_ctx.c libsharp/coll_job.c libsharp/coll_info.c \
	libsharp/coll_buf.c libsharp/coll_comm.c libsharp/coll_sparse.c \
	libsharp/coll_group.c libsharp/coll_exact.c libsharp/coll_ops.c
COLL_OBJS := $(call obj_of,$(COLL_SRCS))
COLL_SOVER := 1
COLL_SONAME := libsharp_coll.so.$(COLL_SOVER)
COLL_SO := $(LIB_OUT)/libsharp_coll.so
COLL_A := $(LIB_OUT)/libsharp_coll.a
LIBS += $(COLL_SO) $(COLL_A)

$(LIB_OUT)/$(COLL_SONAME).0.0: $(COLL_OBJS) $(COMMON_LIB) libsharp/libsharp_coll.map
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,$(COLL_SONAME) \
		-Wl,--version-script=libsharp/libsharp_coll.map -Wl,--no-undefined \
		-o $@ $(COLL_OBJS) $(COMMON_LIB) $(COMMON_LDLIBS)

$(COLL_SO): $(LIB_OUT)/$(COLL_SONAME).0.0
	$(Q)ln -sf $(COLL_SONAME).0.0 $(LIB_OUT)/$(COLL_SONAME)
	$(Q)ln -sf $(COLL_SONAME) $@

# the static library carries the common core it needs
$(COLL_A): $(COLL_OBJS) $(call obj_of,$(COMMON_SRCS))
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^
