# reduce/: the reduction engine (folds by operation and type), its kernels
# built once per instruction set, and exact mode.

COMMON_SRCS += \
	reduce/reduce.c \
	reduce/exact.c \
	reduce/sparse.c \
	reduce/reduce_generic.c \
	reduce/reduce_avx2.c \
	reduce/reduce_avx512.c

# Kernels: -O3 for the vectorizer, never contract a*b+c into an FMA (results
# must not depend on the instruction set), one -m set per variant.
KERN_FLAGS := -O3 -ffp-contract=off -fno-trapping-math
CFLAGS_reduce_reduce_generic := $(KERN_FLAGS)
# exact sums: the AN's lane check and the client's limbs, vectorized
CFLAGS_reduce_exact := -O3
# sparse payloads: the zero scan over every byte
CFLAGS_reduce_sparse := -O3
CFLAGS_reduce_reduce_avx2 := $(KERN_FLAGS) -mavx2 -mf16c
CFLAGS_reduce_reduce_avx512 := $(KERN_FLAGS) -mavx512f -mavx512bw \
	-mavx512vl -mavx512dq -mavx2 -mf16c -mprefer-vector-width=512

# Vectorization report of the kernels (what the compiler did with each loop).
.PHONY: vecreport
vecreport:
	$(Q)for v in generic avx2 avx512; do \
	  $(CC) $(ALL_CPPFLAGS) -std=gnu11 $(KERN_FLAGS) \
	    $$(make -s --no-print-directory print-CFLAGS_reduce_reduce_$$v) \
	    -fopt-info-vec-optimized -c reduce/reduce_$$v.c -o /dev/null 2>&1 | \
	    sed "s/^/$$v: /" | grep -c 'loop vectorized' | sed "s/^/$$v: vectorized loops: /"; \
	done
