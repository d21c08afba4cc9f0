# plugins/slurm/: the Slurm SPANK plugin (loaded by slurmd and slurmstepd), built
# against Slurm's <slurm/spank.h> (libslurm-dev).  No sanitizers (it is
# loaded into Slurm's daemons, which are not) and nothing of sharp's
# libraries: it speaks the control protocol to sharpd itself.

SPANK_SHARP := $(LIB_OUT)/spank_sharp.so
LIBS += $(SPANK_SHARP)
SPANK_CFLAGS := -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -Wshadow -fPIC \
	-I$(O)/gen -D_GNU_SOURCE

$(SPANK_SHARP): plugins/slurm/spank_sharp.c $(PATHS_H) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC LD   $@")
	$(Q)$(CC) $(SPANK_CFLAGS) $(call pc_cflags,jansson) -shared \
		-Wl,-soname,$(@F) -o $@ $< $(JANSSON_LIBS)
