# transport/: the data-path transport interface (transport.h) and its
# providers, a folder each: tcp/, udp/ (datagrams and multicast), shm/
# (shared-memory rings on one host) and verbs/ (RC and UD over libibverbs).

COMMON_SRCS += \
	transport/transport.c \
	transport/registry.c \
	transport/tcp/tcp.c \
	transport/udp/udp.c \
	transport/verbs/verbs_ep.c \
	transport/verbs/verbs_cm.c \
	transport/verbs/verbs.c \
	transport/shm/shm_ep.c \
	transport/shm/shm_rx.c \
	transport/shm/shm.c
