# tests/: one cmocka binary per unit, built into $(TESTDIR).

UNIT_TEST_SRCS := $(wildcard tests/unit/*/test_*.c)
UNIT_TESTS := $(patsubst tests/unit/%.c,$(TESTDIR)/unit/%,$(UNIT_TEST_SRCS))
TESTS += $(UNIT_TESTS)

$(TESTDIR)/unit/%: $(OBJDIR)/tests/unit/%.o $(COMMON_LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(COMMON_LIB) $(JANSSON_LIBS) \
		$(INIH_LIBS) $(LIBEV_LIBS) $(CMOCKA_LIBS) -lm -lpthread
