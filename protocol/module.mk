# protocol/: everything that crosses a process boundary: the data-path wire
# format, the control messages and the authentication handshake (what the
# fuzzers in tests/fuzz/ aim at).

COMMON_SRCS += \
	protocol/wire.c \
	protocol/wire_mac.c \
	protocol/ctl.c \
	protocol/auth.c \
	protocol/am_list.c
