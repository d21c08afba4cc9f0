/* Socket addresses and non-blocking socket helpers. */
#ifndef SHP_COMMON_NET_H
#define SHP_COMMON_NET_H

#include "core/status.h"

#include <stddef.h>
#include <sys/socket.h>

typedef struct shp_sockaddr {
    struct sockaddr_storage ss;
    socklen_t len;
} shp_sockaddr_t;

/*
 * Parse "IPv4:port", "[IPv6]:port", "host:port" (resolved, numeric service)
 * or "unix:/path" / "/path" (a Unix socket).  With `default_port` > 0 the
 * port may be omitted.
 */
SHP_WUR shp_status_t shp_sockaddr_parse(const char *str, int default_port,
                                        shp_sockaddr_t *addr);
/* "127.0.0.1:7100", "[::1]:7100" or "unix:/run/x.sock". */
const char *shp_sockaddr_str(const shp_sockaddr_t *addr, char *buf, size_t len);
int shp_sockaddr_port(const shp_sockaddr_t *addr);

int shp_fd_set_nonblock(int fd);

/* Blocking I/O of exactly len bytes: read (write 0) or write (write 1),
 * retried on EINTR and short transfers; a write to a socket whose peer is
 * gone fails (EPIPE) instead of raising SIGPIPE.  0, or -1 on an error or
 * end of file. */
int shp_fd_io_full(int fd, void *buf, size_t len, int write);

/* A blocking connection to the Unix socket at `path` (close-on-exec): the
 * fd, or -1 with errno (ENAMETOOLONG for a path that does not fit). */
int shp_unix_connect(const char *path);

/* A non-blocking listening socket (SO_REUSEADDR; unlinks a stale Unix
 * socket path first).  *fd on success. */
SHP_WUR shp_status_t shp_listen(const shp_sockaddr_t *addr, int backlog,
                                int *fd);
/* Start a non-blocking connect; SHP_INPROGRESS while it completes (wait
 * for writability, then shp_connect_result()).  `bind_addr` may be NULL. */
SHP_WUR shp_status_t shp_connect_start(const shp_sockaddr_t *addr,
                                       const shp_sockaddr_t *bind_addr,
                                       int *fd);
SHP_WUR shp_status_t shp_connect_result(int fd);
/* Low-latency options on a TCP socket (TCP_NODELAY); no-op on Unix. */
void shp_sock_tune(int fd);

#endif
