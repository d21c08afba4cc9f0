#include "core/net.h"

#include "core/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

shp_status_t shp_sockaddr_parse(const char *str, int default_port,
                                shp_sockaddr_t *addr)
{
    struct addrinfo hints, *res = NULL;
    char host[256], port[16];
    const char *colon, *hs, *he;
    struct sockaddr_un *sun;
    size_t hlen;
    int rc;

    if (str == NULL || *str == '\0') {
        return SHP_ERR_INVALID_PARAM;
    }
    memset(addr, 0, sizeof(*addr));
    if (!strncmp(str, "unix:", 5) || str[0] == '/') {
        const char *path = str[0] == '/' ? str : str + 5;
        sun = (struct sockaddr_un *)&addr->ss;
        if (*path == '\0' || strlen(path) >= sizeof(sun->sun_path)) {
            return SHP_ERR_INVALID_PARAM;
        }
        sun->sun_family = AF_UNIX;
        strcpy(sun->sun_path, path);
        addr->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                                strlen(path) + 1);
        return SHP_OK;
    }

    if (str[0] == '[') {
        hs = str + 1;
        he = strchr(hs, ']');
        if (he == NULL) {
            return SHP_ERR_INVALID_PARAM;
        }
        colon = he[1] == ':' ? he + 1 : NULL;
        if (he[1] != '\0' && colon == NULL) {
            return SHP_ERR_INVALID_PARAM;
        }
    } else {
        hs = str;
        colon = strrchr(str, ':');
        if (colon != NULL && strchr(str, ':') != colon) {
            return SHP_ERR_INVALID_PARAM; /* bare IPv6 needs brackets */
        }
        he = colon ? colon : str + strlen(str);
    }
    hlen = (size_t)(he - hs);
    if (hlen == 0 || hlen >= sizeof(host)) {
        return SHP_ERR_INVALID_PARAM;
    }
    memcpy(host, hs, hlen);
    host[hlen] = '\0';
    if (colon != NULL) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (colon[1] == '\0' || *end != '\0' || p < 0 || p > 65535) {
            return SHP_ERR_INVALID_PARAM;
        }
        snprintf(port, sizeof(port), "%ld", p);
    } else if (default_port > 0) {
        snprintf(port, sizeof(port), "%d", default_port);
    } else {
        return SHP_ERR_INVALID_PARAM;
    }

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        return SHP_ERR_NOT_FOUND;
    }
    memcpy(&addr->ss, res->ai_addr, res->ai_addrlen);
    addr->len = res->ai_addrlen;
    freeaddrinfo(res);
    return SHP_OK;
}

const char *shp_sockaddr_str(const shp_sockaddr_t *addr, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN];

    switch (addr->ss.ss_family) {
    case AF_INET: {
        const struct sockaddr_in *sin = (const void *)&addr->ss;
        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%d", ip, ntohs(sin->sin_port));
        break;
    }
    case AF_INET6: {
        const struct sockaddr_in6 *sin6 = (const void *)&addr->ss;
        inet_ntop(AF_INET6, &sin6->sin6_addr, ip, sizeof(ip));
        snprintf(buf, len, "[%s]:%d", ip, ntohs(sin6->sin6_port));
        break;
    }
    case AF_UNIX: {
        const struct sockaddr_un *sun = (const void *)&addr->ss;
        snprintf(buf, len, "unix:%s", sun->sun_path);
        break;
    }
    default:
        snprintf(buf, len, "(unknown address family %d)", addr->ss.ss_family);
        break;
    }
    return buf;
}

int shp_sockaddr_port(const shp_sockaddr_t *addr)
{
    if (addr->ss.ss_family == AF_INET) {
        return ntohs(
            ((const struct sockaddr_in *)(const void *)&addr->ss)->sin_port);
    }
    if (addr->ss.ss_family == AF_INET6) {
        return ntohs(
            ((const struct sockaddr_in6 *)(const void *)&addr->ss)->sin6_port);
    }
    return -1;
}

int shp_fd_io_full(int fd, void *buf, size_t len, int write_)
{
    uint8_t *p = buf;
    while (len > 0) {
        /* to a socket: no SIGPIPE when the peer is gone, an error */
        ssize_t n = write_ ? send(fd, p, len, MSG_NOSIGNAL) : read(fd, p, len);
        if (n < 0 && write_ && errno == ENOTSOCK) {
            n = write(fd, p, len);
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int shp_unix_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sa.sun_path, path, n + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        fd = -1;
    }
    return fd;
}

int shp_fd_set_nonblock(int fd)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0) {
        return -1;
    }
    return fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void shp_sock_tune(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int one = 1;

    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
        (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)) {
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
}

shp_status_t shp_listen(const shp_sockaddr_t *addr, int backlog, int *fd_out)
{
    int one = 1, fd, err;

    fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                0);
    if (fd < 0) {
        return shp_status_from_errno(errno);
    }
    if (addr->ss.ss_family == AF_UNIX) {
        const struct sockaddr_un *sun = (const void *)&addr->ss;
        unlink(sun->sun_path); /* stale socket of a previous run */
    } else {
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    }
    if (bind(fd, (const struct sockaddr *)&addr->ss, addr->len) < 0 ||
        listen(fd, backlog) < 0) {
        err = errno;
        close(fd);
        errno = err;
        return shp_status_from_errno(err);
    }
    *fd_out = fd;
    return SHP_OK;
}

shp_status_t shp_connect_start(const shp_sockaddr_t *addr,
                               const shp_sockaddr_t *bind_addr, int *fd_out)
{
    int fd, err;

    fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                0);
    if (fd < 0) {
        return shp_status_from_errno(errno);
    }
    if (bind_addr != NULL &&
        bind(fd, (const struct sockaddr *)&bind_addr->ss, bind_addr->len) < 0) {
        goto err_close;
    }
    shp_sock_tune(fd);
    if (connect(fd, (const struct sockaddr *)&addr->ss, addr->len) < 0 &&
        errno != EINPROGRESS) {
        goto err_close;
    }
    *fd_out = fd;
    return SHP_INPROGRESS;

err_close:
    err = errno;
    close(fd);
    errno = err;
    return shp_status_from_errno(err);
}

shp_status_t shp_connect_result(int fd)
{
    socklen_t len = sizeof(int);
    int err = 0;

    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) {
        return shp_status_from_errno(errno);
    }
    return shp_status_from_errno(err);
}
