# core/: what every process links: status codes, logging, time, paths,
# configuration tables, sockets and framed connections.
#
# core/, reduce/, protocol/ and transport/ go into one archive,
# libshp_common.a ($(COMMON_LIB), made in the top Makefile once all four
# have listed their sources in COMMON_SRCS).

COMMON_SRCS := \
	core/status.c \
	core/log.c \
	core/time.c \
	core/config_kinds.c \
	core/config_print.c \
	core/config.c \
	core/net.c \
	core/conn.c

COMMON_LIB := $(LIB_OUT)/libshp_common.a
LIBS += $(COMMON_LIB)

print-%:
	@echo $($*)
