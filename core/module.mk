# common/: the core every component links (libshp_common.a).

COMMON_SRCS := \
	common/status.c \
	common/log.c \
	common/time.c \
	common/reduce.c \
	common/wire.c \
	common/exact.c \
	common/config.c \
	common/net.c \
	common/conn.c \
	common/ctl.c \
	common/auth.c \
	common/transport.c \
	common/tp_tcp.c \
	common/tp_udp.c \
	common/tp_verbs.c \
	common/tp_shm.c \
	common/reduce_generic.c \
	common/reduce_avx2.c \
	common/reduce_avx512.c

COMMON_LIB := $(LIBDIR)/libshp_common.a
LIBS += $(COMMON_LIB)

# Kernels: -O3 for the vectorizer, never contract a*b+c into an FMA (results
# must not depend on the instruction set), one -m set per variant.
KERN_FLAGS := -O3 -ffp-contract=off -fno-trapping-math
CFLAGS_common_reduce_generic := $(KERN_FLAGS)
# exact sums: the AN's lane check and the client's limbs, vectorized
CFLAGS_common_exact := -O3
CFLAGS_common_reduce_avx2 := $(KERN_FLAGS) -mavx2 -mf16c
CFLAGS_common_reduce_avx512 := $(KERN_FLAGS) -mavx512f -mavx512bw \
	-mavx512vl -mavx512dq -mavx2 -mf16c -mprefer-vector-width=512

$(COMMON_LIB): $(call obj_of,$(COMMON_SRCS))
	@mkdir -p $(@D)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# Vectorization report of the kernels (what the compiler did with each loop).
.PHONY: vecreport
vecreport:
	$(Q)for v in generic avx2 avx512; do \
	  f=$$(echo $$v | tr a-z A-Z); \
	  $(CC) $(ALL_CPPFLAGS) -std=gnu11 $(KERN_FLAGS) \
	    $$(make -s --no-print-directory print-CFLAGS_common_reduce_$$v) \
	    -fopt-info-vec-optimized -c common/reduce_$$v.c -o /dev/null 2>&1 | \
	    sed "s/^/$$v: /" | grep -c 'loop vectorized' | sed "s/^/$$v: vectorized loops: /"; \
	done

print-%:
	@echo $($*)
