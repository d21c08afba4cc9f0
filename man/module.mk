# man/: the manual pages.  Each is man/NAME.SECTION.in, its prose written by
# hand; the line `@OPTIONS@` is replaced by what the program prints from its
# option table (--man-options: the command line; --man-config: the file's
# keys), the table that drives --help and --dump-config, so that a page
# cannot drift from them.  The @PATHS@ of the build are filled in as
# make install does (the pages name this build's SYSCONFDIR, RUNSTATEDIR).

MAN_PAGES := $(patsubst man/%.in,%,$(wildcard man/*.in))
MANS := $(addprefix $(O)/man/,$(MAN_PAGES))
MANDIR ?= $(PREFIX)/share/man

# sharp_coll(3)'s ENVIRONMENT: from libsharp_coll's table (the static
# library: the shared one exports only sharp_coll_*).
MAN_COLL_GEN := $(O)/tools/man_coll
$(MAN_COLL_GEN): $(OBJDIR)/man/man_coll.o $(COLL_A) $(COMMON_LIB)
	$(call link_prog)

# libsharp_mpi(7)'s ENVIRONMENT: from libsharp_mpi's table of settings
MAN_MPI_GEN := $(O)/tools/man_mpi
$(MAN_MPI_GEN): $(OBJDIR)/man/man_mpi.o $(call obj_of,mpi-coll/settings_table.c) $(COMMON_LIB)
	$(call link_prog)
MAN_GEN_libsharp_mpi.7 = $(MAN_MPI_GEN)
MAN_GEN_sharp_am.8 = $(SHARP_AM) --man-options
MAN_GEN_sharp_am.conf.5 = $(SHARP_AM) --man-config
MAN_GEN_sharp_an.8 = $(SHARP_AN) --man-options
MAN_GEN_sharp_an.conf.5 = $(SHARP_AN) --man-config
MAN_GEN_sharpd.8 = $(SHARPD) --man-options
MAN_GEN_sharpd.conf.5 = $(SHARPD) --man-config
MAN_GEN_sharp-hello.1 = $(SHARP_HELLO) --man-options
MAN_GEN_sharp_coll.3 = $(MAN_COLL_GEN)

$(O)/man/sharp_am.8 $(O)/man/sharp_am.conf.5: $(SHARP_AM)
$(O)/man/sharp_an.8 $(O)/man/sharp_an.conf.5: $(SHARP_AN)
$(O)/man/sharpd.8 $(O)/man/sharpd.conf.5: $(SHARPD)
$(O)/man/sharp-hello.1: $(SHARP_HELLO)
$(O)/man/sharp_coll.3: $(MAN_COLL_GEN)
$(O)/man/libsharp_mpi.7: $(MAN_MPI_GEN)

$(O)/man/%: man/%.in man/page.sh $(PATHS_H)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  MAN     $@")
	$(Q)bash man/page.sh $< $@.tmp $(MAN_GEN_$*)
	$(Q)$(subst_paths) $@.tmp > $@ && rm -f $@.tmp

.PHONY: man install-man uninstall-man
man: $(MANS)

# every page into MANDIR/manN (make install does this too)
install-man: $(MANS)
	$(Q)for m in $(MANS); do s=$${m##*.}; \
	    install -d "$(DESTDIR)$(MANDIR)/man$$s" && \
	    install -m 0644 "$$m" "$(DESTDIR)$(MANDIR)/man$$s/"; done

uninstall-man:
	$(Q)for p in $(MAN_PAGES); do rm -f "$(DESTDIR)$(MANDIR)/man$${p##*.}/$$p"; done
