# bench/: benchmarks (not tests): they print ratios measured side by side.

BENCH_REDUCE := $(BINDIR)/bench_reduce
BENCHES += $(BENCH_REDUCE)

$(BENCH_REDUCE): $(OBJDIR)/bench/reduce.o $(COMMON_LIB)
	$(call link_prog)

.PHONY: bench-reduce
bench-reduce: $(BENCH_REDUCE)
	$(BENCH_REDUCE)
